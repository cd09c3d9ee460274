//! BFCL's `TradingBot` rebuilt natively: a brokerage account with stocks, orders, a watch list
//! and a transaction history, where deposits and withdrawals are stamped with times drawn from
//! a seeded generator.
//!
//! BFCL turns its fixed "now" (2024-09-01 10:30, a naive datetime) into Unix seconds and back
//! with the machine's local time zone; the reference was recorded with `TZ=UTC`, so UTC is the
//! zone here: transaction times fall between 2024-09-01 10:30:00 and 2024-09-02 10:30:00.

use std::cmp::Ordering;

use serde_json::{Map, Value, json};

use super::pyops::{
    self, Config, DATE_FORMAT, DATETIME_FORMAT, DateTime, Key, Num, Op, compare, str_of, truthy,
};
use super::pyrandom::PyRandom;
use super::{Args, Backend, Method, Outcome, opt, req};
use crate::env::pyjson;
use crate::error::Result;

const CLASS: &str = "TradingBot";

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "get_current_time",
        params: &[],
    },
    Method {
        name: "get_symbol_by_name",
        params: &[req("name")],
    },
    Method {
        name: "get_stock_info",
        params: &[req("symbol")],
    },
    Method {
        name: "get_order_details",
        params: &[req("order_id")],
    },
    Method {
        name: "cancel_order",
        params: &[req("order_id")],
    },
    Method {
        name: "place_order",
        params: &[
            req("order_type"),
            req("symbol"),
            req("price"),
            req("amount"),
        ],
    },
    Method {
        name: "withdraw_funds",
        params: &[req("amount")],
    },
    Method {
        name: "get_account_info",
        params: &[],
    },
    Method {
        name: "trading_login",
        params: &[req("username"), req("password")],
    },
    Method {
        name: "trading_get_login_status",
        params: &[],
    },
    Method {
        name: "trading_logout",
        params: &[],
    },
    Method {
        name: "fund_account",
        params: &[req("amount")],
    },
    Method {
        name: "remove_stock_from_watchlist",
        params: &[req("symbol")],
    },
    Method {
        name: "get_watchlist",
        params: &[],
    },
    Method {
        name: "get_order_history",
        params: &[],
    },
    Method {
        name: "get_transaction_history",
        params: &[opt("start_date"), opt("end_date")],
    },
    Method {
        name: "get_available_stocks",
        params: &[req("sector")],
    },
    Method {
        name: "filter_stocks_by_price",
        params: &[req("stocks"), req("min_price"), req("max_price")],
    },
    Method {
        name: "add_to_watchlist",
        params: &[req("stock")],
    },
    Method {
        name: "notify_price_change",
        params: &[req("stocks"), req("threshold")],
    },
];

/// BFCL's fixed "now", 2024-09-01 10:30:00, in Unix seconds (read as UTC).
const NOW_UNIX: i64 = 1_725_186_600;
/// One day later: the end of the range transaction times are drawn from.
const NOW_PLUS_DAY_UNIX: i64 = NOW_UNIX + 86_400;
/// BFCL's `get_current_time` answer (`CURRENT_TIME.strftime("%I:%M %p")`).
const CURRENT_TIME_TEXT: &str = "10:30 AM";
/// The seed of the generator behind transaction times when the configuration gives none.
const DEFAULT_SEED: i64 = 1_053_520;

/// The module's default orders (keys are integers, as in the Python source).
fn default_orders() -> Vec<(Key, Value)> {
    vec![
        (
            Key::Int(12_345),
            json!({"id": 12345, "order_type": "Buy", "symbol": "AAPL", "price": 210.65,
                   "amount": 10, "status": "Completed"}),
        ),
        (
            Key::Int(12_446),
            json!({"id": 12446, "order_type": "Sell", "symbol": "GOOG", "price": 2840.56,
                   "amount": 5, "status": "Pending"}),
        ),
    ]
}

/// The module's default stock table.
fn default_stocks() -> Map<String, Value> {
    let rows: [(&str, f64, f64, f64, f64, f64); 11] = [
        ("AAPL", 227.16, 0.17, 2.552, 227.11, 227.09),
        ("GOOG", 2840.34, 0.24, 1.123, 2835.67, 2842.15),
        ("TSLA", 667.92, -0.12, 1.654, 671.15, 668.20),
        ("MSFT", 310.23, 0.09, 3.234, 309.88, 310.11),
        ("NVDA", 220.34, 0.34, 1.234, 220.45, 220.67),
        ("ALPH", 1320.45, -0.08, 1.567, 1321.12, 1325.78),
        ("OMEG", 457.23, 0.12, 2.345, 456.78, 458.12),
        ("QUAS", 725.89, -0.03, 1.789, 726.45, 728.00),
        ("NEPT", 88.34, 0.19, 0.654, 88.21, 88.67),
        ("SYNX", 345.67, 0.11, 2.112, 345.34, 346.12),
        ("ZETA", 22.09, -0.05, 0.789, 22.12, 22.34),
    ];
    rows.iter()
        .map(|&(symbol, price, change, volume, ma5, ma20)| {
            (
                symbol.to_owned(),
                json!({"price": price, "percent_change": change, "volume": volume,
                       "MA(5)": ma5, "MA(20)": ma20}),
            )
        })
        .collect()
}

/// The loaded backend: BFCL's public attributes as they are given (any JSON value where
/// Python would keep any value), plus the generator behind transaction times.
pub struct TradingBot {
    /// `orders`, in insertion order; keys are what Python holds (configuration keys made of
    /// digits become integers, other keys stay strings, new orders use the counter's value).
    orders: Vec<(Key, Value)>,
    account_info: Map<String, Value>,
    authenticated: Value,
    market_status: Value,
    order_counter: Value,
    stocks: Map<String, Value>,
    watch_list: Vec<Value>,
    transaction_history: Vec<Value>,
    random: PyRandom,
}

impl TradingBot {
    /// Loads `initial_config["TradingBot"]` as BFCL's `_load_scenario` does, each missing field
    /// taken from the module's default state.
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let config = Config::new(CLASS, config);
        let orders = match config.object("orders")? {
            None => default_orders(),
            Some(map) => map
                .iter()
                .map(|(key, order)| {
                    Ok((order_key(key).map_err(|e| config.error(e))?, order.clone()))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let account_info = match config.object("account_info")? {
            None => json!({"account_id": 12345, "balance": 10000.0, "binding_card": 1974202140965533_u64})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            Some(map) => map.clone(),
        };
        let list = |name: &str, default: Vec<Value>| {
            Ok::<_, crate::error::Error>(config.list(name)?.cloned().unwrap_or(default))
        };
        Ok(TradingBot {
            orders,
            account_info,
            authenticated: config.value("authenticated", Value::Bool(false)),
            market_status: config.value("market_status", Value::from("Closed")),
            order_counter: config.value("order_counter", Value::from(12_446)),
            stocks: config
                .object("stocks")?
                .cloned()
                .unwrap_or_else(default_stocks),
            watch_list: list("watch_list", vec![Value::from("NVDA")])?,
            transaction_history: list("transaction_history", Vec::new())?,
            random: PyRandom::new(config.seed(i128::from(DEFAULT_SEED))?),
        })
    }

    /// The position of the order whose key equals `order_id` (Python's dict lookup), or the
    /// `TypeError` for an unhashable id.
    fn order_index(&self, order_id: &Value) -> std::result::Result<Option<usize>, String> {
        let order_id = Key::from_value(order_id)?;
        Ok(self.orders.iter().position(|(key, _)| *key == order_id))
    }

    /// `{"error": "User not authenticated. ..."}` when no user is logged in, `None` when one is.
    fn login_refusal(&self, action: &str) -> Option<Outcome> {
        (!truthy(&self.authenticated)).then(|| pyops::error(not_logged_in(action)))
    }

    /// A transaction time: a second drawn uniformly from the day after BFCL's "now", printed
    /// in UTC as `%Y-%m-%d %H:%M:%S`.
    fn transaction_timestamp(&mut self) -> String {
        let seconds = self.random.randint(NOW_UNIX, NOW_PLUS_DAY_UNIX);
        format_unix_utc(seconds)
    }

    fn get_symbol_by_name(&self, args: &Args) -> Outcome {
        let name = args.value("name");
        pyops::check_hashable(name)?;
        let symbols = [
            ("Apple", "AAPL"),
            ("Google", "GOOG"),
            ("Tesla", "TSLA"),
            ("Microsoft", "MSFT"),
            ("Nvidia", "NVDA"),
            ("Zeta Corp", "ZETA"),
            ("Alpha Tech", "ALPH"),
            ("Omega Industries", "OMEG"),
            ("Quasar Ltd.", "QUAS"),
            ("Neptune Systems", "NEPT"),
            ("Synex Solutions", "SYNX"),
            ("Amazon", "AMZN"),
            ("Gorilla", "GORI"),
        ];
        let symbol = name
            .as_str()
            .and_then(|name| symbols.iter().find(|(company, _)| *company == name))
            .map_or("Stock not found", |(_, symbol)| *symbol);
        Ok(json!({ "symbol": symbol }))
    }

    fn get_stock_info(&self, args: &Args) -> Outcome {
        let symbol = args.value("symbol");
        match self.stock(symbol)? {
            Some(stock) => Ok(stock.clone()),
            None => Ok(json!({
                "error": format!("Stock with symbol '{}' not found.", str_of(symbol))
            })),
        }
    }

    /// `self.stocks.get(symbol)`: the entry for a string key, `None` for any other hashable
    /// key, the `TypeError` for an unhashable one.
    fn stock(&self, symbol: &Value) -> std::result::Result<Option<&Value>, String> {
        Ok(pyops::hash_key(symbol)?.and_then(|s| self.stocks.get(s)))
    }

    fn get_order_details(&self, args: &Args) -> Outcome {
        let order_id = args.value("order_id");
        match self.order_index(order_id)? {
            Some(i) => Ok(self.orders[i].1.clone()),
            None => {
                let keys: Vec<Value> = self.orders.iter().map(|(k, _)| k.to_value()).collect();
                Ok(json!({
                    "error": format!(
                        "Order with ID {} not found.Here is the list of orders_id: {}",
                        str_of(order_id),
                        pyjson::repr(&Value::Array(keys))
                    )
                }))
            }
        }
    }

    fn cancel_order(&mut self, args: &Args) -> Outcome {
        let order_id = args.value("order_id");
        let Some(i) = self.order_index(order_id)? else {
            return Ok(json!({
                "error": format!("Order with ID {} not found.", str_of(order_id))
            }));
        };
        let order = &mut self.orders[i].1;
        if *pyops::getitem(order, "status")? == "Completed" {
            return Ok(json!({
                "error": format!(
                    "Can't cancel order {}. Order is already completed.",
                    str_of(order_id)
                )
            }));
        }
        if let Value::Object(fields) = order {
            fields.insert("status".into(), Value::from("Cancelled"));
        }
        Ok(json!({ "order_id": order_id, "status": "Cancelled" }))
    }

    fn place_order(&mut self, args: &Args) -> Outcome {
        let order_type = args.value("order_type");
        let symbol = args.value("symbol");
        let price = args.value("price");
        let amount = args.value("amount");
        if let Some(refusal) = self.login_refusal("place an order") {
            return refusal;
        }
        if self.stock(symbol)?.is_none() {
            return Ok(json!({ "error": format!("Invalid stock symbol: {}", str_of(symbol)) }));
        }
        let zero = Value::from(0);
        if compare(price, "<=", &zero)? || compare(amount, "<=", &zero)? {
            return Ok(json!({ "error": "Price and amount must be positive values." }));
        }
        let order_type_text = pyops::lower(order_type)?;
        // Past the comparisons with 0 above, price and amount are numbers (or booleans).
        let price_float = pyops::to_float(price)?;
        if order_type_text == "buy" {
            let total_cost = price_float * to_int_as_float(amount)?;
            let balance = self
                .account_info
                .get("balance")
                .cloned()
                .unwrap_or_else(|| Value::from(0));
            if float_exceeds(total_cost, &balance)? {
                return Ok(json!({
                    "error": format!(
                        "Insufficient funds: required ${} but only ${} available.",
                        fixed2(total_cost),
                        fixed2(pyops::to_float(&balance)?)
                    )
                }));
            }
        }
        let order_id = self.order_counter.clone();
        let key = Key::from_value(&order_id)?;
        let order = json!({
            "id": order_id,
            "order_type": order_type,
            "symbol": symbol,
            "price": pyops::float_value(price_float)?,
            "amount": amount,
            "status": "Open",
        });
        pyops::dict_set(&mut self.orders, key, order);
        self.order_counter = pyops::arith(Op::Add, &self.order_counter, &Value::from(1), true)?;
        Ok(json!({
            "order_id": order_id,
            "order_type": order_type,
            "status": "Pending",
            "price": pyops::float_value(price_float)?,
            "amount": amount,
        }))
    }

    fn withdraw_funds(&mut self, args: &Args) -> Outcome {
        let amount = args.value("amount");
        if let Some(refusal) = self.login_refusal("make a transaction") {
            return refusal;
        }
        if self.market_status != "Open" {
            return Ok(json!({ "error": "Market is closed. Transactions are not allowed." }));
        }
        if compare(amount, "<=", &Value::from(0))? {
            return Ok(json!({ "error": "Transaction amount must be positive." }));
        }
        let balance = pyops::item(&self.account_info, "balance")?;
        if compare(amount, ">", balance)? {
            return Ok(json!({ "error": "Insufficient funds for withdrawal." }));
        }
        let new_balance = pyops::arith(Op::Sub, balance, amount, true)?;
        self.record_transaction("withdrawal", amount, &new_balance);
        Ok(json!({ "status": "Withdrawal successful", "new_balance": new_balance }))
    }

    fn fund_account(&mut self, args: &Args) -> Outcome {
        let amount = args.value("amount");
        if let Some(refusal) = self.login_refusal("fund the account") {
            return refusal;
        }
        if compare(amount, "<=", &Value::from(0))? {
            return Ok(json!({ "error": "Funding amount must be positive." }));
        }
        let balance = pyops::item(&self.account_info, "balance")?;
        let new_balance = pyops::arith(Op::Add, balance, amount, true)?;
        self.record_transaction("deposit", amount, &new_balance);
        Ok(json!({ "status": "Account funded successfully", "new_balance": new_balance }))
    }

    /// The tail of `withdraw_funds` and `fund_account`: the new balance stored, and the
    /// transaction recorded with a drawn timestamp.
    fn record_transaction(&mut self, kind: &str, amount: &Value, new_balance: &Value) {
        self.account_info
            .insert("balance".into(), new_balance.clone());
        let timestamp = self.transaction_timestamp();
        self.transaction_history.push(json!({
            "type": kind,
            "amount": amount,
            "timestamp": timestamp,
        }));
    }

    fn remove_stock_from_watchlist(&mut self, args: &Args) -> Outcome {
        let symbol = args.value("symbol");
        if let Some(refusal) = self.login_refusal("modify the watchlist") {
            return refusal;
        }
        match self.watch_list.iter().position(|s| pyops::eq(s, symbol)) {
            Some(i) => {
                self.watch_list.remove(i);
                Ok(json!({
                    "status": format!("Stock {} removed from watchlist successfully.", str_of(symbol))
                }))
            }
            None => Ok(json!({
                "error": format!("Stock {} not found in watchlist.", str_of(symbol))
            })),
        }
    }

    fn get_transaction_history(&self, args: &Args) -> Outcome {
        if !truthy(&self.authenticated) {
            return Ok(json!([{ "error": not_logged_in("view transaction history") }]));
        }
        let bound = |name: &str| -> std::result::Result<Option<DateTime>, String> {
            match args.get(name) {
                Some(value) if truthy(value) => Ok(Some(pyops::strptime(value, DATE_FORMAT)?)),
                _ => Ok(None),
            }
        };
        let start = bound("start_date")?;
        let end = bound("end_date")?;
        let mut kept = Vec::new();
        for transaction in &self.transaction_history {
            let when = pyops::strptime(pyops::getitem(transaction, "timestamp")?, DATETIME_FORMAT)?;
            let after_start = start.as_ref().is_none_or(|s| *s <= when);
            if after_start && end.as_ref().is_none_or(|e| when <= *e) {
                kept.push(transaction.clone());
            }
        }
        Ok(json!({ "transaction_history": kept }))
    }

    fn get_available_stocks(&self, args: &Args) -> Outcome {
        let sector = args.value("sector");
        pyops::check_hashable(sector)?;
        let stocks: &[&str] = match sector.as_str() {
            Some("Technology") => &["AAPL", "GOOG", "MSFT", "NVDA"],
            Some("Automobile") => &["TSLA", "F", "GM"],
            _ => &[],
        };
        Ok(json!({ "stock_list": stocks }))
    }

    fn filter_stocks_by_price(&self, args: &Args) -> Outcome {
        let min_price = args.value("min_price");
        let max_price = args.value("max_price");
        let mut kept = Vec::new();
        for symbol in pyops::iterate(args.value("stocks"))? {
            let price = self.price_of(&symbol)?;
            if compare(&price, ">=", min_price)?
                && compare(&self.price_of(&symbol)?, "<=", max_price)?
            {
                kept.push(symbol);
            }
        }
        Ok(json!({ "filtered_stocks": kept }))
    }

    /// `self.stocks.get(symbol, {}).get("price", 0)`.
    fn price_of(&self, symbol: &Value) -> std::result::Result<Value, String> {
        match self.stock(symbol)? {
            None => Ok(Value::from(0)),
            Some(Value::Object(stock)) => Ok(stock
                .get("price")
                .cloned()
                .unwrap_or_else(|| Value::from(0))),
            Some(other) => Err(pyops::no_attribute(other, "get")),
        }
    }

    fn add_to_watchlist(&mut self, args: &Args) -> Outcome {
        let stock = args.value("stock");
        if !self.watch_list.iter().any(|s| pyops::eq(s, stock)) && self.stock(stock)?.is_some() {
            self.watch_list.push(stock.clone());
        }
        Ok(json!({ "watchlist": self.watch_list }))
    }

    fn notify_price_change(&self, args: &Args) -> Outcome {
        let threshold = args.value("threshold");
        let mut changed = Vec::new();
        for symbol in pyops::iterate(args.value("stocks"))? {
            let Some(stock) = self.stock(&symbol)? else {
                continue;
            };
            let change = py_abs(pyops::getitem(stock, "percent_change")?)?;
            if compare(&change, ">=", threshold)? {
                changed.push(str_of(&symbol));
            }
        }
        let notification = if changed.is_empty() {
            "No significant price changes in the selected stocks.".to_owned()
        } else {
            format!(
                "Stocks {} have significant price changes.",
                changed.join(", ")
            )
        };
        Ok(json!({ "notification": notification }))
    }
}

impl Backend for TradingBot {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        match method {
            "get_current_time" => Ok(json!({ "current_time": CURRENT_TIME_TEXT })),
            "get_symbol_by_name" => self.get_symbol_by_name(args),
            "get_stock_info" => self.get_stock_info(args),
            "get_order_details" => self.get_order_details(args),
            "cancel_order" => self.cancel_order(args),
            "place_order" => self.place_order(args),
            "withdraw_funds" => self.withdraw_funds(args),
            "get_account_info" => self
                .login_refusal("view account information")
                .unwrap_or_else(|| Ok(Value::Object(self.account_info.clone()))),
            "trading_login" => {
                if truthy(&self.authenticated) {
                    return Ok(json!({ "status": "Already logged in" }));
                }
                self.authenticated = Value::Bool(true);
                Ok(json!({ "status": "Logged in successfully" }))
            }
            "trading_get_login_status" => Ok(json!({ "status": truthy(&self.authenticated) })),
            "trading_logout" => {
                if !truthy(&self.authenticated) {
                    return Ok(json!({ "status": "No user is currently logged in" }));
                }
                self.authenticated = Value::Bool(false);
                Ok(json!({ "status": "Logged out successfully" }))
            }
            "fund_account" => self.fund_account(args),
            "remove_stock_from_watchlist" => self.remove_stock_from_watchlist(args),
            "get_watchlist" => {
                if truthy(&self.authenticated) {
                    Ok(json!({ "watchlist": self.watch_list }))
                } else {
                    Ok(json!([format!(
                        "Error: {}",
                        not_logged_in("view the watchlist")
                    )]))
                }
            }
            "get_order_history" => {
                if truthy(&self.authenticated) {
                    let keys: Vec<Value> = self.orders.iter().map(|(k, _)| k.to_value()).collect();
                    Ok(json!({ "history": keys }))
                } else {
                    Ok(json!([{ "error": not_logged_in("view order history") }]))
                }
            }
            "get_transaction_history" => self.get_transaction_history(args),
            "get_available_stocks" => self.get_available_stocks(args),
            "filter_stocks_by_price" => self.filter_stocks_by_price(args),
            "add_to_watchlist" => self.add_to_watchlist(args),
            "notify_price_change" => self.notify_price_change(args),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let mut state = Map::new();
        state.insert(
            "orders".into(),
            Value::Object(pyops::dict_state(&self.orders, Value::clone)),
        );
        state.insert(
            "account_info".into(),
            Value::Object(self.account_info.clone()),
        );
        state.insert("authenticated".into(), self.authenticated.clone());
        state.insert("market_status".into(), self.market_status.clone());
        state.insert("order_counter".into(), self.order_counter.clone());
        state.insert("stocks".into(), Value::Object(self.stocks.clone()));
        state.insert("watch_list".into(), Value::Array(self.watch_list.clone()));
        state.insert(
            "transaction_history".into(),
            Value::Array(self.transaction_history.clone()),
        );
        state.insert("long_context".into(), Value::Bool(false));
        state
    }
}

/// BFCL's text for a call that needs a logged-in user: what it would have done, in words.
fn not_logged_in(action: &str) -> String {
    format!("User not authenticated. Please log in to {action}.")
}

/// An `orders` key as `_load_scenario` keeps it: a string of ASCII digits becomes an integer,
/// any other string stays as it is.
fn order_key(key: &str) -> std::result::Result<Key, String> {
    if key.is_empty() || !key.chars().all(|c| c.is_numeric()) {
        return Ok(Key::Str(key.to_owned()));
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "orders key {key:?} is made of non-ASCII digits, which is not supported"
        ));
    }
    let digits = key.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(Key::Int(0));
    }
    digits
        .parse::<u64>()
        .map(|n| Key::Int(i128::from(n)))
        .map_err(|_| format!("orders key {key} is beyond 64-bit integers, which is not supported"))
}

// ---------------------------------------------------------------------------------------------
// Python semantics this class alone needs (the shared ones are in `pyops`).

/// Python's `float(int(value))` for a number: a float truncated toward zero.
fn to_int_as_float(value: &Value) -> std::result::Result<f64, String> {
    match Num::of(value) {
        Some(Num::Int(i)) => Ok(i as f64),
        Some(Num::Float(x)) => Ok(x.trunc()),
        None => Err(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            pyops::type_name(value)
        )),
    }
}

/// Python's `f"{x:.2f}"`.
fn fixed2(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else {
        format!("{x:.2}")
    }
}

/// Python's `x > b` for a float `x` computed here (possibly infinite, so not held as JSON).
fn float_exceeds(x: f64, b: &Value) -> std::result::Result<bool, String> {
    match Num::of(b) {
        Some(y) => Ok(Num::Float(x).cmp(y) == Some(Ordering::Greater)),
        None => Err(pyops::not_supported(">", "float", pyops::type_name(b))),
    }
}

/// Python's `abs(value)`.
fn py_abs(value: &Value) -> std::result::Result<Value, String> {
    match Num::of(value) {
        Some(Num::Int(i)) => pyops::num_value(Num::Int(i.abs())),
        Some(Num::Float(x)) => pyops::float_value(x.abs()),
        None => Err(format!(
            "bad operand type for abs(): '{}'",
            pyops::type_name(value)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Transaction times.

/// Unix seconds as a UTC time, `%Y-%m-%d %H:%M:%S`.
fn format_unix_utc(seconds: i64) -> String {
    let (year, month, day) = pyops::civil_from_days(seconds.div_euclid(86_400));
    let in_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::pyops::harness;
    use super::*;

    fn bot(config: Value) -> TradingBot {
        TradingBot::load(config.as_object().unwrap()).unwrap()
    }

    fn call(bot: &mut TradingBot, method: &str, args: Value) -> String {
        harness::call(bot, method, args)
    }

    #[test]
    fn unix_seconds_print_as_utc() {
        assert_eq!(format_unix_utc(NOW_UNIX), "2024-09-01 10:30:00");
        assert_eq!(format_unix_utc(NOW_PLUS_DAY_UNIX), "2024-09-02 10:30:00");
        assert_eq!(format_unix_utc(951_782_400), "2000-02-29 00:00:00");
    }

    // Python 3.11 (TZ=UTC) printed each expected text for the same configuration and calls.
    #[test]
    fn odd_orders_and_arguments_fail_as_in_python() {
        let mut b = bot(json!({
            "orders": {"12345": {"symbol": "AAPL", "price": 210.65, "num_shares": 10,
                                 "status": "Completed"}, "order_type": "Buy"},
            "authenticated": true, "market_status": "Open"
        }));
        assert_eq!(
            call(&mut b, "get_order_details", json!({"order_id": 12345.0})),
            r#"{"symbol": "AAPL", "price": 210.65, "num_shares": 10, "status": "Completed"}"#
        );
        assert_eq!(
            call(
                &mut b,
                "get_order_details",
                json!({"order_id": "order_type"})
            ),
            "Buy"
        );
        assert_eq!(
            call(&mut b, "get_order_details", json!({"order_id": true})),
            r#"{"error": "Order with ID True not found.Here is the list of orders_id: [12345, 'order_type']"}"#
        );
        assert_eq!(
            call(&mut b, "get_order_details", json!({"order_id": [1]})),
            "Error during execution: unhashable type: 'list'"
        );
        assert_eq!(
            call(&mut b, "cancel_order", json!({"order_id": "order_type"})),
            "Error during execution: string indices must be integers, not 'str'"
        );
        assert_eq!(
            call(
                &mut b,
                "place_order",
                json!({"order_type": "Buy", "symbol": "AAPL", "price": 100000, "amount": 1})
            ),
            r#"{"error": "Insufficient funds: required $100000.00 but only $10000.00 available."}"#
        );
        assert_eq!(
            call(
                &mut b,
                "place_order",
                json!({"order_type": "Buy", "symbol": "AAPL", "price": "1", "amount": 1})
            ),
            "Error during execution: '<=' not supported between instances of 'str' and 'int'"
        );
        assert_eq!(
            call(
                &mut b,
                "place_order",
                json!({"order_type": 5, "symbol": "AAPL", "price": 1, "amount": 1})
            ),
            "Error during execution: 'int' object has no attribute 'lower'"
        );
        assert_eq!(
            call(
                &mut b,
                "place_order",
                json!({"order_type": "BUY", "symbol": "AAPL", "price": 2, "amount": 1.9})
            ),
            r#"{"order_id": 12446, "order_type": "BUY", "status": "Pending", "price": 2.0, "amount": 1.9}"#
        );
        assert_eq!(
            call(&mut b, "get_order_history", json!({})),
            r#"{"history": [12345, "order_type", 12446]}"#
        );
        assert_eq!(
            call(
                &mut b,
                "filter_stocks_by_price",
                json!({"stocks": "AAPL", "min_price": 0, "max_price": 1000})
            ),
            r#"{"filtered_stocks": ["A", "A", "P", "L"]}"#
        );
        assert_eq!(
            call(
                &mut b,
                "filter_stocks_by_price",
                json!({"stocks": ["AAPL"], "min_price": "a", "max_price": 1000})
            ),
            "Error during execution: '>=' not supported between instances of 'float' and 'str'"
        );
        assert_eq!(
            call(
                &mut b,
                "filter_stocks_by_price",
                json!({"stocks": 5, "min_price": 0, "max_price": 1})
            ),
            "Error during execution: 'int' object is not iterable"
        );
        assert_eq!(
            call(
                &mut b,
                "remove_stock_from_watchlist",
                json!({"symbol": ["x"]})
            ),
            r#"{"error": "Stock ['x'] not found in watchlist."}"#
        );
        assert_eq!(
            call(&mut b, "get_stock_info", json!({"symbol": 5})),
            r#"{"error": "Stock with symbol '5' not found."}"#
        );
        call(&mut b, "trading_logout", json!({}));
        assert_eq!(
            call(&mut b, "get_watchlist", json!({})),
            "['Error: User not authenticated. Please log in to view the watchlist.']"
        );
        assert_eq!(
            call(&mut b, "get_order_history", json!({})),
            "[{'error': 'User not authenticated. Please log in to view order history.'}]"
        );
    }

    // Python 3.11 (TZ=UTC): the default seed gives these timestamps, and strptime these errors.
    #[test]
    fn transactions_are_stamped_and_filtered_as_in_python() {
        let mut b = bot(json!({"authenticated": true, "market_status": "Open"}));
        assert_eq!(
            call(&mut b, "fund_account", json!({"amount": 100})),
            r#"{"status": "Account funded successfully", "new_balance": 10100.0}"#
        );
        call(&mut b, "fund_account", json!({"amount": 0.1}));
        assert_eq!(
            call(&mut b, "withdraw_funds", json!({"amount": 5})),
            r#"{"status": "Withdrawal successful", "new_balance": 10095.1}"#
        );
        assert_eq!(
            call(
                &mut b,
                "get_transaction_history",
                json!({"start_date": "2024-9-1", "end_date": "2024-09-02"})
            ),
            r#"{"transaction_history": [{"type": "deposit", "amount": 0.1, "timestamp": "2024-09-01 12:26:34"}]}"#
        );
        assert_eq!(
            call(
                &mut b,
                "get_transaction_history",
                json!({"start_date": "2024-09-02"})
            ),
            r#"{"transaction_history": [{"type": "deposit", "amount": 100, "timestamp": "2024-09-02 05:40:15"}, {"type": "withdrawal", "amount": 5, "timestamp": "2024-09-02 04:29:48"}]}"#
        );
        for (start, error) in [
            (
                "2024/09/01",
                "time data '2024/09/01' does not match format '%Y-%m-%d'",
            ),
            ("2024-09-011", "unconverted data remains: 1"),
            ("2024-02-30", "day is out of range for month"),
            ("0000-01-01", "year 0 is out of range"),
        ] {
            assert_eq!(
                call(
                    &mut b,
                    "get_transaction_history",
                    json!({"start_date": start})
                ),
                format!("Error during execution: {error}")
            );
        }
        assert_eq!(
            call(
                &mut b,
                "get_transaction_history",
                json!({"start_date": 20240901})
            ),
            "Error during execution: strptime() argument 1 must be str, not int"
        );
        let mut b = bot(json!({"authenticated": true, "order_counter": "x",
                               "transaction_history": [{"timestamp": "2024-01-01  1:2:3"},
                                                       {"timestamp": "2024-1-1 1:2:60"}]}));
        assert_eq!(
            call(&mut b, "get_transaction_history", json!({})),
            "Error during execution: second must be in 0..59"
        );
        assert_eq!(
            call(
                &mut b,
                "place_order",
                json!({"order_type": "Sell", "symbol": "AAPL", "price": 1, "amount": 1})
            ),
            "Error during execution: can only concatenate str (not \"int\") to str"
        );
        assert_eq!(
            call(&mut b, "get_order_history", json!({})),
            r#"{"history": [12345, 12446, "x"]}"#
        );
    }
}
