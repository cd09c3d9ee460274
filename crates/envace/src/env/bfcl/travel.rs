//! BFCL's `TravelAPI` rebuilt natively: a travel-booking backend with an access token, stored
//! credit cards, flight prices from a fixed route table, bookings, insurance and currency
//! conversion. Identifiers and card balances come from a seeded `random.Random`, drawn in the
//! order BFCL draws them, so the same calls give the same numbers as in Python.

use serde_json::{Map, Value, json};

use super::pyops::{self, Config, DATE_FORMAT, Op, Strptime, float, str_of};
use super::pyrandom::PyRandom;
use super::{Args, Backend, Method, Outcome, opt, req};
use crate::env::pyjson;
use crate::error::Result;

const CLASS: &str = "TravelAPI";

/// The seed BFCL uses when a task's configuration gives none.
const DEFAULT_SEED: i128 = 141_053;

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "authenticate_travel",
        params: &[
            req("client_id"),
            req("client_secret"),
            req("refresh_token"),
            req("grant_type"),
            req("user_first_name"),
            req("user_last_name"),
        ],
    },
    Method {
        name: "travel_get_login_status",
        params: &[],
    },
    Method {
        name: "get_budget_fiscal_year",
        params: &[opt("lastModifiedAfter"), opt("includeRemoved")],
    },
    Method {
        name: "register_credit_card",
        params: &[
            req("access_token"),
            req("card_number"),
            req("expiration_date"),
            req("cardholder_name"),
            req("card_verification_number"),
        ],
    },
    Method {
        name: "get_flight_cost",
        params: &[
            req("travel_from"),
            req("travel_to"),
            req("travel_date"),
            req("travel_class"),
        ],
    },
    Method {
        name: "get_credit_card_balance",
        params: &[req("access_token"), req("card_id")],
    },
    Method {
        name: "book_flight",
        params: &[
            req("access_token"),
            req("card_id"),
            req("travel_date"),
            req("travel_from"),
            req("travel_to"),
            req("travel_class"),
        ],
    },
    Method {
        name: "retrieve_invoice",
        params: &[req("access_token"), opt("booking_id"), opt("insurance_id")],
    },
    Method {
        name: "get_booking_history",
        params: &[req("access_token")],
    },
    Method {
        name: "list_all_airports",
        params: &[],
    },
    Method {
        name: "cancel_booking",
        params: &[req("access_token"), req("booking_id")],
    },
    Method {
        name: "compute_exchange_rate",
        params: &[req("base_currency"), req("target_currency"), req("value")],
    },
    Method {
        name: "verify_traveler_information",
        params: &[
            req("first_name"),
            req("last_name"),
            req("date_of_birth"),
            req("passport_number"),
        ],
    },
    Method {
        name: "set_budget_limit",
        params: &[req("access_token"), req("budget_limit")],
    },
    Method {
        name: "get_nearest_airport_by_city",
        params: &[req("location")],
    },
    Method {
        name: "purchase_insurance",
        params: &[
            req("access_token"),
            req("insurance_type"),
            req("booking_id"),
            req("insurance_cost"),
            req("card_id"),
        ],
    },
    Method {
        name: "contact_customer_support",
        params: &[req("booking_id"), req("message")],
    },
    Method {
        name: "get_all_credit_cards",
        params: &[],
    },
];

/// The airports `list_all_airports` names, in its order.
const AIRPORTS: [&str; 23] = [
    "RMS", "SBK", "MPC", "SVP", "SHD", "CDG", "LHR", "SSV", "OKD", "WLB", "PEK", "HND", "HKG",
    "CIA", "CRH", "ATV", "PHV", "GFD", "SFO", "LAX", "JFK", "ORD", "BOS",
];

/// City → nearest airport, as `get_nearest_airport_by_city` knows them.
const CITY_AIRPORTS: [(&str, &str); 23] = [
    ("Rivermist", "RMS"),
    ("Stonebrook", "SBK"),
    ("Maplecrest", "MPC"),
    ("Silverpine", "SVP"),
    ("Shadowridge", "SHD"),
    ("London", "LHR"),
    ("Paris", "CDG"),
    ("Sunset Valley", "SSV"),
    ("Oakendale", "OKD"),
    ("Willowbend", "WLB"),
    ("Crescent Hollow", "CRH"),
    ("Autumnville", "ATV"),
    ("Pinehaven", "PHV"),
    ("Greenfield", "GFD"),
    ("San Francisco", "SFO"),
    ("Los Angeles", "LAX"),
    ("New York", "JFK"),
    ("Chicago", "ORD"),
    ("Boston", "BOS"),
    ("Beijing", "PEK"),
    ("Hong Kong", "HKG"),
    ("Rome", "CIA"),
    ("Tokyo", "HND"),
];

/// One US dollar in each other currency; a rate as BFCL writes it (an `int` or a `float`),
/// since `value * rate` keeps Python's int/float distinction.
enum Rate {
    Int(i64),
    Float(f64),
}

/// The rates `compute_exchange_rate` knows, in BFCL's order (it tries each pair both ways).
const EXCHANGE_RATES: [(&str, &str, Rate); 10] = [
    ("USD", "RMB", Rate::Int(7)),
    ("USD", "EUR", Rate::Float(0.8)),
    ("USD", "JPY", Rate::Int(110)),
    ("USD", "GBP", Rate::Float(0.7)),
    ("USD", "CAD", Rate::Float(1.3)),
    ("USD", "AUD", Rate::Float(1.4)),
    ("USD", "INR", Rate::Int(70)),
    ("USD", "RUB", Rate::Int(60)),
    ("USD", "BRL", Rate::Float(3.8)),
    ("USD", "MXN", Rate::Int(20)),
];

/// Economy fares in USD for each route BFCL serves (from, to, price).
const BASE_COSTS: [(&str, &str, i64); 153] = [
    ("SFO", "LAX", 200),
    ("SFO", "JFK", 500),
    ("SFO", "ORD", 400),
    ("SFO", "BOS", 450),
    ("SFO", "RMS", 300),
    ("SFO", "SBK", 350),
    ("SFO", "MPC", 370),
    ("SFO", "SVP", 320),
    ("SFO", "SHD", 330),
    ("SFO", "SSV", 340),
    ("SFO", "OKD", 360),
    ("SFO", "WLB", 310),
    ("SFO", "CRH", 380),
    ("SFO", "ATV", 390),
    ("SFO", "PHV", 420),
    ("SFO", "GFD", 430),
    ("SFO", "CIA", 700),
    ("LAX", "SFO", 100),
    ("LAX", "JFK", 600),
    ("LAX", "ORD", 500),
    ("LAX", "BOS", 550),
    ("LAX", "RMS", 310),
    ("LAX", "SBK", 320),
    ("LAX", "MPC", 330),
    ("LAX", "SVP", 340),
    ("LAX", "SHD", 350),
    ("LAX", "SSV", 360),
    ("LAX", "OKD", 370),
    ("LAX", "WLB", 380),
    ("LAX", "CRH", 390),
    ("LAX", "ATV", 400),
    ("LAX", "PHV", 410),
    ("LAX", "GFD", 420),
    ("LAX", "HND", 430),
    ("JFK", "ORD", 300),
    ("JFK", "BOS", 250),
    ("JFK", "RMS", 450),
    ("JFK", "SBK", 460),
    ("JFK", "MPC", 470),
    ("JFK", "SVP", 480),
    ("JFK", "SHD", 490),
    ("JFK", "SSV", 500),
    ("JFK", "OKD", 510),
    ("JFK", "WLB", 520),
    ("JFK", "CRH", 530),
    ("JFK", "ATV", 540),
    ("JFK", "PHV", 550),
    ("JFK", "GFD", 560),
    ("JFK", "LAX", 570),
    ("JFK", "HND", 800),
    ("JFK", "PVG", 950),
    ("JFK", "PEK", 1000),
    ("ORD", "LAX", 180),
    ("ORD", "BOS", 200),
    ("ORD", "RMS", 350),
    ("ORD", "SBK", 360),
    ("ORD", "MPC", 370),
    ("ORD", "SVP", 380),
    ("ORD", "SHD", 390),
    ("ORD", "SSV", 400),
    ("ORD", "OKD", 410),
    ("ORD", "WLB", 420),
    ("ORD", "CRH", 430),
    ("ORD", "ATV", 440),
    ("ORD", "PHV", 450),
    ("ORD", "GFD", 460),
    ("BOS", "RMS", 400),
    ("BOS", "SBK", 410),
    ("BOS", "MPC", 420),
    ("BOS", "SVP", 430),
    ("BOS", "SHD", 440),
    ("BOS", "SSV", 450),
    ("BOS", "OKD", 460),
    ("BOS", "WLB", 470),
    ("BOS", "CRH", 480),
    ("BOS", "ATV", 490),
    ("BOS", "PHV", 500),
    ("BOS", "GFD", 510),
    ("RMS", "BOS", 200),
    ("RMS", "JFK", 210),
    ("RMS", "SBK", 220),
    ("RMS", "MPC", 230),
    ("RMS", "SVP", 240),
    ("RMS", "SHD", 250),
    ("RMS", "SSV", 260),
    ("RMS", "OKD", 270),
    ("RMS", "WLB", 280),
    ("RMS", "CRH", 290),
    ("RMS", "ATV", 300),
    ("RMS", "PHV", 310),
    ("RMS", "GFD", 320),
    ("RMS", "LAX", 330),
    ("SBK", "MPC", 200),
    ("SBK", "SVP", 210),
    ("SBK", "SHD", 220),
    ("SBK", "SSV", 230),
    ("SBK", "OKD", 240),
    ("SBK", "WLB", 250),
    ("SBK", "CRH", 260),
    ("SBK", "ATV", 270),
    ("SBK", "PHV", 280),
    ("SBK", "GFD", 290),
    ("MPC", "SVP", 210),
    ("MPC", "SHD", 220),
    ("MPC", "SSV", 230),
    ("MPC", "OKD", 240),
    ("MPC", "WLB", 250),
    ("MPC", "CRH", 260),
    ("MPC", "ATV", 270),
    ("MPC", "PHV", 280),
    ("MPC", "GFD", 290),
    ("SVP", "SHD", 230),
    ("SVP", "SSV", 240),
    ("SVP", "OKD", 250),
    ("SVP", "WLB", 260),
    ("SVP", "CRH", 270),
    ("SVP", "ATV", 280),
    ("SVP", "PHV", 290),
    ("SVP", "GFD", 300),
    ("SHD", "SSV", 220),
    ("SHD", "OKD", 230),
    ("SHD", "WLB", 240),
    ("SHD", "CRH", 250),
    ("SHD", "ATV", 260),
    ("SHD", "PHV", 270),
    ("SHD", "GFD", 280),
    ("SSV", "OKD", 240),
    ("SSV", "WLB", 250),
    ("SSV", "CRH", 260),
    ("SSV", "ATV", 270),
    ("SSV", "PHV", 280),
    ("SSV", "GFD", 290),
    ("OKD", "WLB", 230),
    ("OKD", "CRH", 240),
    ("OKD", "ATV", 250),
    ("OKD", "PHV", 260),
    ("OKD", "GFD", 270),
    ("WLB", "CRH", 250),
    ("WLB", "ATV", 260),
    ("WLB", "PHV", 270),
    ("WLB", "GFD", 280),
    ("CRH", "ATV", 240),
    ("CRH", "PHV", 250),
    ("CRH", "GFD", 260),
    ("CRH", "SFO", 270),
    ("CRH", "RMS", 280),
    ("CRH", "HKG", 290),
    ("CRH", "JFK", 300),
    ("ATV", "PHV", 230),
    ("ATV", "GFD", 240),
    ("PHV", "GFD", 220),
    ("LHR", "CDG", 100),
    ("OKD", "LAX", 220),
];

/// The loaded backend: the public attributes BFCL's class keeps, and its generator.
pub struct TravelApi {
    random: PyRandom,
    /// Card id → card (each an object, as loading checks).
    credit_card_list: Map<String, Value>,
    /// Booking id → booking (each an object, as loading checks).
    booking_record: Map<String, Value>,
    access_token: Value,
    token_type: Value,
    token_expires_in: Value,
    token_scope: Value,
    user_first_name: Value,
    user_last_name: Value,
    budget_limit: Value,
}

impl TravelApi {
    /// Loads `initial_config["TravelAPI"]` as BFCL's `_load_scenario` does (without the
    /// long-context padding): absent fields take BFCL's defaults, and the generator is seeded
    /// with `random_seed` (141053 by default).
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let config = Config::new(CLASS, config);
        let field = |name: &str| config.value(name, Value::Null);
        let objects = |name: &str| {
            let map = config.object_of(name, "an object", Value::is_object)?;
            Ok::<_, crate::error::Error>(map.cloned().unwrap_or_default())
        };
        Ok(TravelApi {
            random: PyRandom::new(config.seed(DEFAULT_SEED)?),
            credit_card_list: objects("credit_card_list")?,
            booking_record: objects("booking_record")?,
            access_token: field("access_token"),
            token_type: field("token_type"),
            token_expires_in: field("token_expires_in"),
            token_scope: field("token_scope"),
            user_first_name: field("user_first_name"),
            user_last_name: field("user_last_name"),
            budget_limit: field("budget_limit"),
        })
    }

    /// `self.token_expires_in == 0`.
    fn token_expired(&self) -> bool {
        pyops::eq(&self.token_expires_in, &Value::from(0))
    }

    /// Why the call's `access_token` is refused (`self.token_expires_in == 0`, then
    /// `access_token != self.access_token`), or `None` when it is accepted.
    fn token_refusal(&self, args: &Args) -> Option<&'static str> {
        if self.token_expired() {
            Some("Token expired")
        } else if !pyops::eq(args.value("access_token"), &self.access_token) {
            Some("Invalid access token")
        } else {
            None
        }
    }

    /// The card stored under `card_id` (which the caller has found in the list).
    fn card_mut(
        &mut self,
        card_id: &Value,
    ) -> std::result::Result<&mut Map<String, Value>, String> {
        let key = pyops::hash_key(card_id)?;
        match key.and_then(|k| self.credit_card_list.get_mut(k)) {
            Some(Value::Object(card)) => Ok(card),
            Some(_) => Err("a credit card entry is not an object".into()),
            None => Err(pyops::key_error(card_id)),
        }
    }

    fn authenticate_travel(&mut self, args: &Args) -> Outcome {
        self.token_expires_in = Value::from(2);
        self.access_token = Value::String(self.random.randint(100_000, 999_999).to_string());
        self.token_type = Value::from("Bearer");
        self.token_scope = args.value("grant_type").clone();
        self.user_first_name = args.value("user_first_name").clone();
        self.user_last_name = args.value("user_last_name").clone();
        Ok(json!({
            "expires_in": 2,
            "access_token": self.access_token,
            "token_type": "Bearer",
            "scope": self.token_scope,
        }))
    }

    fn travel_get_login_status(&self) -> Outcome {
        let logged_out = self.token_expires_in.is_null() || self.token_expired();
        Ok(json!({ "status": !logged_out }))
    }

    fn register_credit_card(&mut self, args: &Args) -> Outcome {
        if self.token_expires_in.is_null() {
            return Ok(json!({ "error": "Token not initialized" }));
        }
        if let Some(refusal) = self.token_refusal(args) {
            return pyops::error(refusal);
        }
        // BFCL looks the card number up among the card ids.
        if pyops::contains(&self.credit_card_list, args.value("card_number"))? {
            return Ok(json!({ "error": "Card already registered" }));
        }
        let card_id = self
            .random
            .randint(100_000_000_000, 999_999_999_999)
            .to_string();
        let balance = self.random.randint(10_000, 99_999);
        let card = json!({
            "card_number": args.value("card_number"),
            "expiration_date": args.value("expiration_date"),
            "cardholder_name": args.value("cardholder_name"),
            "card_verification_number": args.value("card_verification_number"),
            "balance": balance,
        });
        self.credit_card_list.insert(card_id.clone(), card);
        Ok(json!({ "card_id": card_id }))
    }

    fn get_credit_card_balance(&self, args: &Args) -> Outcome {
        if let Some(refusal) = self.token_refusal(args) {
            return pyops::error(refusal);
        }
        let card_id = args.value("card_id");
        if !pyops::contains(&self.credit_card_list, card_id)? {
            let ids: Vec<Value> = self
                .credit_card_list
                .keys()
                .map(|k| Value::String(k.clone()))
                .collect();
            return Ok(json!({
                "error": format!(
                    "Card not registered. Here are a list of card_id's: {}",
                    pyjson::repr(&Value::Array(ids))
                )
            }));
        }
        let card = pyops::item(&self.credit_card_list, &str_of(card_id))?;
        Ok(json!({ "card_balance": pyops::getitem(card, "balance")? }))
    }

    fn book_flight(&mut self, args: &Args) -> Outcome {
        let refuse = |error: String| Ok(json!({ "booking_status": false, "error": error }));
        if let Some(refusal) = self.token_refusal(args) {
            return refuse(refusal.into());
        }
        let card_id = args.value("card_id");
        if !pyops::contains(&self.credit_card_list, card_id)? {
            return refuse("Card not registered".into());
        }
        if !self.card_mut(card_id)?.contains_key("balance") {
            return refuse("Balance not found".into());
        }
        let (from, to) = (args.value("travel_from"), args.value("travel_to"));
        let is_airport = |v: &Value| v.as_str().is_some_and(|s| AIRPORTS.contains(&s));
        if !is_airport(from) {
            return refuse(format!("Invalid departure airport code: {}", str_of(from)));
        }
        if !is_airport(to) {
            return refuse(format!("Invalid destination airport code: {}", str_of(to)));
        }
        let date = args.value("travel_date");
        if strptime_ymd(date)?.is_none() {
            return refuse("Invalid date format. Use YYYY-MM-DD.".into());
        }
        let class = args.value("travel_class");
        pyops::check_hashable(class)?;
        if !class
            .as_str()
            .is_some_and(|c| ["economy", "business", "first"].contains(&c))
        {
            // Python prints a set here, whose order varies between runs; this is one of them.
            return refuse(
                "Invalid travel class. Must be one of {'economy', 'business', 'first'}".into(),
            );
        }
        let travel_cost = match flight_cost(from, to, date, class) {
            Ok(cost) => cost,
            Err(error) => return refuse(error),
        };
        let cost_value = float(travel_cost);
        let budget_limit = self.budget_limit.clone();
        let card = self.card_mut(card_id)?;
        let balance = card.get("balance").cloned().unwrap_or(Value::Null);
        if pyops::compare(&balance, "<", &cost_value)? {
            return refuse("Insufficient funds".into());
        }
        if !budget_limit.is_null() && pyops::compare(&balance, "<", &budget_limit)? {
            return refuse("Balance is less than budget limit".into());
        }
        let new_balance = pyops::arith(Op::Sub, &balance, &cost_value, true)?;
        card.insert("balance".into(), new_balance);
        let booking_id = self.random.randint(1_000_000, 9_999_999).to_string();
        let transaction_id = self.random.randint(10_000_000, 99_999_999).to_string();
        self.booking_record.insert(
            booking_id.clone(),
            json!({
                "card_id": card_id,
                "travel_date": date,
                "travel_from": from,
                "travel_to": to,
                "travel_class": class,
                "travel_cost": cost_value,
                "transaction_id": transaction_id,
            }),
        );
        Ok(json!({
            "booking_id": booking_id,
            "transaction_id": transaction_id,
            "booking_status": true,
            "booking_history": {},
        }))
    }

    fn retrieve_invoice(&self, args: &Args) -> Outcome {
        if let Some(refusal) = self.token_refusal(args) {
            return pyops::error(refusal);
        }
        let booking_id = args.get("booking_id").unwrap_or(&Value::Null);
        if !pyops::contains(&self.booking_record, booking_id)? {
            return Ok(json!({ "error": "Booking not found" }));
        }
        let record = self
            .booking_record
            .get(&str_of(booking_id))
            .unwrap_or(&Value::Null);
        let mut invoice = Map::new();
        invoice.insert("booking_id".into(), booking_id.clone());
        for field in [
            "travel_date",
            "travel_from",
            "travel_to",
            "travel_class",
            "travel_cost",
            "transaction_id",
        ] {
            invoice.insert(field.into(), pyops::getitem(record, field)?.clone());
        }
        Ok(json!({ "invoice": invoice }))
    }

    fn get_booking_history(&self, args: &Args) -> Outcome {
        if let Some(refusal) = self.token_refusal(args) {
            return pyops::error(refusal);
        }
        Ok(json!({ "booking_history": self.booking_record }))
    }

    fn cancel_booking(&mut self, args: &Args) -> Outcome {
        let refuse = |error: &str| Ok(json!({ "cancel_status": false, "error": error }));
        if let Some(refusal) = self.token_refusal(args) {
            return refuse(refusal);
        }
        let booking_id = args.value("booking_id");
        if !pyops::contains(&self.booking_record, booking_id)? {
            return refuse("Booking not found");
        }
        let key = str_of(booking_id);
        let record = self.booking_record.get(&key).unwrap_or(&Value::Null);
        let card_id = pyops::getitem(record, "card_id")?.clone();
        let travel_cost = pyops::getitem(record, "travel_cost")?.clone();
        let card = self.card_mut(&card_id)?;
        let new_balance = pyops::arith(Op::Add, pyops::item(card, "balance")?, &travel_cost, true)?;
        card.insert("balance".into(), new_balance);
        self.booking_record.shift_remove(&key);
        Ok(json!({ "cancel_status": true }))
    }

    fn compute_exchange_rate(&self, args: &Args) -> Outcome {
        let (base, target) = (args.value("base_currency"), args.value("target_currency"));
        let value = args.value("value");
        let is = |v: &Value, code: &str| v.as_str() == Some(code);
        for (from, to, rate) in &EXCHANGE_RATES {
            let rate = match rate {
                Rate::Int(n) => Value::from(*n),
                Rate::Float(x) => float(*x),
            };
            if is(base, from) && is(target, to) {
                let product = pyops::arith(Op::Mul, value, &rate, false)?;
                return Ok(json!({ "exchanged_value": float(pyops::to_float(&product)?) }));
            }
            if is(base, to) && is(target, from) {
                let quotient = pyops::arith(Op::Div, value, &rate, false)?;
                let quotient = pyops::to_float(&quotient)?;
                return Ok(json!({ "exchanged_value": float(pyops::round(quotient, 2)) }));
            }
        }
        Err("No available exchange rate for the given currencies.".into())
    }

    fn verify_traveler_information(&self, args: &Args) -> Outcome {
        let (first, last) = (args.value("first_name"), args.value("last_name"));
        let refuse = |reason: String| {
            Ok(json!({ "verification_status": false, "verification_failure": reason }))
        };
        if !pyops::eq(&self.user_first_name, first) || !pyops::eq(&self.user_last_name, last) {
            return refuse(format!(
                "Cannot book flight information for another user.Expected {} {}, got {} {}",
                str_of(&self.user_first_name),
                str_of(&self.user_last_name),
                str_of(first),
                str_of(last)
            ));
        }
        let Some((year, month, day)) = strptime_ymd(args.value("date_of_birth"))? else {
            return refuse("Invalid date of birth format. Please use YYYY-MM-DD.".into());
        };
        let (today_year, today_month, today_day) = today_utc();
        let age = today_year - year - i64::from((today_month, today_day) < (month, day));
        if age < 18 {
            return refuse("Traveler must be at least 18 years old.".into());
        }
        let passport = args.value("passport_number");
        let Some(passport) = passport.as_str() else {
            return Err(pyops::no_attribute(passport, "startswith"));
        };
        if !passport.starts_with("US") {
            return refuse("Passport must be issued by the United States.".into());
        }
        Ok(json!({ "verification_status": true }))
    }

    fn set_budget_limit(&mut self, args: &Args) -> Outcome {
        if let Some(refusal) = self.token_refusal(args) {
            return pyops::error(refusal);
        }
        let limit = float(pyops::to_float(args.value("budget_limit"))?);
        self.budget_limit = limit.clone();
        Ok(json!({ "budget_limit": limit }))
    }

    fn get_nearest_airport_by_city(&self, args: &Args) -> Outcome {
        let location = args.value("location");
        pyops::check_hashable(location)?;
        let airport = CITY_AIRPORTS
            .iter()
            .find(|(city, _)| location.as_str() == Some(*city))
            .map_or("Unknown", |(_, code)| *code);
        Ok(json!({ "nearest_airport": airport }))
    }

    fn purchase_insurance(&mut self, args: &Args) -> Outcome {
        let refuse = |error: &str| Ok(json!({ "insurance_status": false, "error": error }));
        if let Some(refusal) = self.token_refusal(args) {
            return refuse(refusal);
        }
        let cost = args.value("insurance_cost");
        if !self.budget_limit.is_null() && pyops::compare(&self.budget_limit, "<", cost)? {
            return refuse("Exceeded budget limit");
        }
        if !pyops::contains(&self.booking_record, args.value("booking_id"))? {
            return refuse("Booking not found");
        }
        let card_id = args.value("card_id");
        if !pyops::contains(&self.credit_card_list, card_id)? {
            return refuse("Credit card not registered");
        }
        let card = self.card_mut(card_id)?;
        let new_balance = pyops::arith(Op::Sub, pyops::item(card, "balance")?, cost, true)?;
        card.insert("balance".into(), new_balance);
        let insurance_id = self.random.randint(100_000_000, 999_999_999).to_string();
        Ok(json!({ "insurance_id": insurance_id, "insurance_status": true }))
    }

    fn contact_customer_support(&self, args: &Args) -> Outcome {
        if !pyops::contains(&self.booking_record, args.value("booking_id"))? {
            return Ok(json!({ "error": "Booking not found" }));
        }
        Ok(json!({
            "customer_support_message": "Thank you for contacting customer support. Your message has been received and we will get back to you shortly."
        }))
    }
}

impl Backend for TravelApi {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        match method {
            "authenticate_travel" => self.authenticate_travel(args),
            "travel_get_login_status" => self.travel_get_login_status(),
            "get_budget_fiscal_year" => Ok(json!({ "budget_fiscal_year": "2018" })),
            "register_credit_card" => self.register_credit_card(args),
            "get_flight_cost" => {
                let cost = flight_cost(
                    args.value("travel_from"),
                    args.value("travel_to"),
                    args.value("travel_date"),
                    args.value("travel_class"),
                )?;
                Ok(json!({ "travel_cost_list": [float(cost)] }))
            }
            "get_credit_card_balance" => self.get_credit_card_balance(args),
            "book_flight" => self.book_flight(args),
            "retrieve_invoice" => self.retrieve_invoice(args),
            "get_booking_history" => self.get_booking_history(args),
            "list_all_airports" => Ok(Value::Array(
                AIRPORTS.iter().map(|a| Value::from(*a)).collect(),
            )),
            "cancel_booking" => self.cancel_booking(args),
            "compute_exchange_rate" => self.compute_exchange_rate(args),
            "verify_traveler_information" => self.verify_traveler_information(args),
            "set_budget_limit" => self.set_budget_limit(args),
            "get_nearest_airport_by_city" => self.get_nearest_airport_by_city(args),
            "purchase_insurance" => self.purchase_insurance(args),
            "contact_customer_support" => self.contact_customer_support(args),
            "get_all_credit_cards" => Ok(json!({ "credit_card_list": self.credit_card_list })),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let mut state = Map::new();
        state.insert(
            "credit_card_list".into(),
            Value::Object(self.credit_card_list.clone()),
        );
        state.insert(
            "booking_record".into(),
            Value::Object(self.booking_record.clone()),
        );
        for (name, value) in [
            ("access_token", &self.access_token),
            ("token_type", &self.token_type),
            ("token_expires_in", &self.token_expires_in),
            ("token_scope", &self.token_scope),
            ("user_first_name", &self.user_first_name),
            ("user_last_name", &self.user_last_name),
            ("budget_limit", &self.budget_limit),
        ] {
            state.insert(name.into(), value.clone());
        }
        state.insert("long_context".into(), Value::Bool(false));
        state
    }
}

/// `get_flight_cost`'s price for one route, class and date, or the text of what it raises.
fn flight_cost(
    from: &Value,
    to: &Value,
    date: &Value,
    class: &Value,
) -> std::result::Result<f64, String> {
    pyops::check_hashable(from)?;
    pyops::check_hashable(to)?;
    let base = match (from.as_str(), to.as_str()) {
        (Some(from), Some(to)) => BASE_COSTS
            .iter()
            .find(|(f, t, _)| *f == from && *t == to)
            .map(|(_, _, cost)| *cost),
        _ => None,
    };
    let Some(base) = base else {
        return Err("No available route for the given airports.".into());
    };
    let factor = match class.as_str() {
        Some("economy") => 1,
        Some("business") => 2,
        Some("first") => 5,
        _ => return Err("Invalid travel class. Options are: economy, business, first.".into()),
    };
    let multiplier = if digit_sum(date)? % 2 == 0 { 2 } else { 1 };
    Ok((base * factor * multiplier) as f64)
}

/// `sum(int(char) for char in travel_date if char.isdigit())`, over whatever iterating the
/// value gives in Python (a string's characters, a list's items, a dict's keys).
fn digit_sum(date: &Value) -> std::result::Result<i128, String> {
    let mut sum: i128 = 0;
    for item in &pyops::iterate(date)? {
        let Some(text) = item.as_str() else {
            return Err(pyops::no_attribute(item, "isdigit"));
        };
        if text.is_empty() || !text.chars().all(pyops::is_digit) {
            continue;
        }
        let mut value: i128 = 0;
        for c in text.chars() {
            let digit = pyops::decimal_digit(c).ok_or_else(|| {
                format!(
                    "invalid literal for int() with base 10: {}",
                    pyjson::repr(item)
                )
            })?;
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(i128::from(digit)))
                .ok_or_else(|| "integer too large in travel_date".to_owned())?;
        }
        sum = sum
            .checked_add(value)
            .ok_or_else(|| "integer too large in travel_date".to_owned())?;
    }
    Ok(sum)
}

/// `datetime.strptime(value, "%Y-%m-%d")`: the date, `None` where Python raises `ValueError`
/// (no match, data left over, a day the month lacks, year 0), or the `TypeError` text for a
/// value that is not a string.
fn strptime_ymd(value: &Value) -> std::result::Result<Option<(i64, u32, u32)>, String> {
    match pyops::strptime(value, DATE_FORMAT) {
        Ok((year, month, day, ..)) => Ok(Some((year, month, day))),
        Err(Strptime::Value(_)) => Ok(None),
        Err(Strptime::Type(text)) => Err(text),
    }
}

/// Today's date in UTC (BFCL's reference runs use `TZ=UTC` for `datetime.today()`).
fn today_utc() -> (i64, u32, u32) {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    pyops::civil_from_days(i64::try_from(seconds / 86_400).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::pyops::harness::run;
    use super::CLASS;

    // Each expected text below is what BFCL's Python class printed for the same call
    // (CPython 3.11, TZ=UTC, through the harness's `execute_multi_turn_func_call`).

    #[test]
    fn exchange_rates_follow_python_arithmetic() {
        let (results, _) = run(
            CLASS,
            json!({}),
            &[
                "compute_exchange_rate('EUR', 'USD', 100)",
                "compute_exchange_rate('RMB', 'USD', 10)",
                "compute_exchange_rate('MXN', 'USD', 0.125)",
                "compute_exchange_rate('USD', 'RMB', '3')",
                "compute_exchange_rate('USD', 'RMB', True)",
                "compute_exchange_rate('USD', 'EUR', '3')",
                "compute_exchange_rate('USD', 'RMB', [1])",
                "compute_exchange_rate('USD', 'RMB', None)",
                "compute_exchange_rate('EUR', 'USD', 'x')",
                "compute_exchange_rate('USD', 'RMB', ' 1_0 ')",
                "compute_exchange_rate('USD', 'USD', 1)",
            ],
        );
        assert_eq!(
            results,
            [
                r#"{"exchanged_value": 125.0}"#,
                r#"{"exchanged_value": 1.43}"#,
                r#"{"exchanged_value": 0.01}"#,
                r#"{"exchanged_value": 3333333.0}"#,
                r#"{"exchanged_value": 7.0}"#,
                "Error during execution: can't multiply sequence by non-int of type 'float'",
                "Error during execution: float() argument must be a string or a real number, not 'list'",
                "Error during execution: unsupported operand type(s) for *: 'NoneType' and 'int'",
                "Error during execution: unsupported operand type(s) for /: 'str' and 'float'",
                "Error during execution: could not convert string to float: ' 1_0  1_0  1_0  1_0  1_0  1_0  1_0 '",
                "Error during execution: No available exchange rate for the given currencies.",
            ]
        );
    }

    #[test]
    fn flight_costs_sum_digits_as_python_iterates() {
        let (results, _) = run(
            CLASS,
            json!({}),
            &[
                "get_flight_cost('SFO', 'LAX', '2024-01-02', 'first')",
                "get_flight_cost('SFO', 'LAX', ['12', '3'], 'business')",
                "get_flight_cost('SFO', 'LAX', {'12': 1, 'x': 2}, 'economy')",
                "get_flight_cost('SFO', 'LAX', '\u{0662}\u{0660}', 'business')",
                "get_flight_cost('SFO', 'LAX', '2024-\u{00b2}', 'business')",
                "get_flight_cost('SFO', 'LAX', 2024, 'business')",
                "get_flight_cost('SFO', 'LAX', ['a', 1], 'business')",
                "get_flight_cost(['SFO'], {'a': 1}, '1', 'business')",
                "get_flight_cost('XXX', 'LAX', '1', 'economy')",
                "get_flight_cost('SFO', 'LAX', '1', 'Economy')",
            ],
        );
        assert_eq!(
            results,
            [
                r#"{"travel_cost_list": [1000.0]}"#,
                r#"{"travel_cost_list": [400.0]}"#,
                r#"{"travel_cost_list": [400.0]}"#,
                r#"{"travel_cost_list": [800.0]}"#,
                "Error during execution: invalid literal for int() with base 10: '\u{b2}'",
                "Error during execution: 'int' object is not iterable",
                "Error during execution: 'int' object has no attribute 'isdigit'",
                "Error during execution: unhashable type: 'list'",
                "Error during execution: No available route for the given airports.",
                "Error during execution: Invalid travel class. Options are: economy, business, first.",
            ]
        );
    }

    #[test]
    fn dates_parse_as_strptime_does() {
        let auth = "authenticate_travel('c', 's', 'r', 'read_write', 'Ann', 'Lee')";
        let verify =
            |date: &str| format!("verify_traveler_information('Ann', 'Lee', {date}, 'US1')");
        let dates = [
            "'1990-1-5'",
            "'1990-01- 5'",
            "'\u{ff11}\u{ff19}\u{ff19}\u{ff10}-01-05'",
            "'1990-01-1\u{0665}'",
            "'1992-02-29'",
            "'1990-02-29'",
            "'1990-13-01'",
            "'1990-01-05 '",
            "'0000-01-05'",
            "'2099-01-01'",
            "19900101",
            "None",
        ];
        let mut calls = vec![auth.to_owned()];
        calls.extend(dates.iter().map(|d| verify(d)));
        calls.push("verify_traveler_information('Bob', 'Lee', '1990-01-01', 'US1')".into());
        calls.push("verify_traveler_information('Ann', 'Lee', '1990-01-01', 123)".into());
        let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
        let (results, _) = run(CLASS, json!({}), &calls);
        let ok = r#"{"verification_status": true}"#;
        let bad = r#"{"verification_status": false, "verification_failure": "Invalid date of birth format. Please use YYYY-MM-DD."}"#;
        assert_eq!(
            results[1..],
            [
                ok,
                ok,
                ok,
                ok,
                ok,
                bad,
                bad,
                bad,
                bad,
                r#"{"verification_status": false, "verification_failure": "Traveler must be at least 18 years old."}"#,
                "Error during execution: strptime() argument 1 must be str, not int",
                "Error during execution: strptime() argument 1 must be str, not None",
                r#"{"verification_status": false, "verification_failure": "Cannot book flight information for another user.Expected Ann Lee, got Bob Lee"}"#,
                "Error during execution: 'int' object has no attribute 'startswith'",
            ]
        );
    }

    #[test]
    fn bookings_fail_where_python_fails() {
        let config = json!({
            "credit_card_list": {"c1": {"balance": 1000}, "c2": {"x": 1}, "c3": {"balance": "lots"}},
            "booking_record": {
                "b2": {"card_id": "zz", "travel_cost": 1},
                "b3": {"card_id": "c1"},
            },
            "access_token": "tok", "token_expires_in": 10, "budget_limit": 500.0,
        });
        let (results, state) = run(
            CLASS,
            config,
            &[
                "get_credit_card_balance('tok', 'nope')",
                "get_credit_card_balance('tok', 'c2')",
                "book_flight('tok', 'c2', '2024-01-01', 'SFO', 'LAX', 'economy')",
                "book_flight('tok', 'c1', '2024-01-01', 'SFO', 5, 'economy')",
                "book_flight('tok', 'c1', 20240101, 'SFO', 'LAX', 'economy')",
                "book_flight('tok', 'c1', '2024-01-01', 'SFO', 'LAX', ['economy'])",
                "book_flight('tok', 'c1', '2024-01-01', 'CDG', 'SFO', 'economy')",
                "book_flight('tok', 'c3', '2024-01-01', 'SFO', 'LAX', 'economy')",
                "book_flight('tok', 'c1', '2024-01-02', 'SFO', 'LAX', 'business')",
                "book_flight('tok', 'c1', '2024-1-2', 'SFO', 'LAX', 'economy')",
                "retrieve_invoice('tok', 'b2')",
                "retrieve_invoice('tok', ['b2'])",
                "cancel_booking('tok', 'b2')",
                "cancel_booking('tok', 'b3')",
                "purchase_insurance('tok', 'full', 'b2', '5', 'c1')",
                "purchase_insurance('tok', 'full', 'b2', 5, 'c3')",
                "purchase_insurance('tok', 'full', 'b2', 5, 'c1')",
                "register_credit_card('tok', 'c1', '1', 'a', 1)",
            ],
        );
        assert_eq!(
            results,
            [
                r#"{"error": "Card not registered. Here are a list of card_id's: ['c1', 'c2', 'c3']"}"#,
                "Error during execution: 'balance'",
                r#"{"booking_status": false, "error": "Balance not found"}"#,
                r#"{"booking_status": false, "error": "Invalid destination airport code: 5"}"#,
                "Error during execution: strptime() argument 1 must be str, not int",
                "Error during execution: unhashable type: 'list'",
                r#"{"booking_status": false, "error": "No available route for the given airports."}"#,
                "Error during execution: '<' not supported between instances of 'str' and 'float'",
                r#"{"booking_id": "3426812", "transaction_id": "45451592", "booking_status": true, "booking_history": {}}"#,
                r#"{"booking_id": "7223063", "transaction_id": "35535380", "booking_status": true, "booking_history": {}}"#,
                "Error during execution: 'travel_date'",
                "Error during execution: unhashable type: 'list'",
                "Error during execution: 'zz'",
                "Error during execution: 'travel_cost'",
                "Error during execution: '<' not supported between instances of 'float' and 'str'",
                "Error during execution: unsupported operand type(s) for -=: 'str' and 'int'",
                r#"{"insurance_id": "468970213", "insurance_status": true}"#,
                r#"{"error": "Card already registered"}"#,
            ]
        );
        assert_eq!(state["credit_card_list"]["c1"]["balance"], json!(395.0));
    }

    #[test]
    fn expired_and_missing_tokens() {
        let (results, state) = run(
            CLASS,
            json!({"token_expires_in": 0, "access_token": "tok", "random_seed": 7}),
            &[
                "travel_get_login_status()",
                "book_flight('tok', 'c1', '2024-01-01', 'SFO', 'LAX', 'economy')",
                "cancel_booking('tok', 'b1')",
                "authenticate_travel('c', 's', 'r', 'read_write', 'Ann', 'Lee')",
            ],
        );
        assert_eq!(
            results,
            [
                r#"{"status": false}"#,
                r#"{"booking_status": false, "error": "Token expired"}"#,
                r#"{"cancel_status": false, "error": "Token expired"}"#,
                r#"{"expires_in": 2, "access_token": "439563", "token_type": "Bearer", "scope": "read_write"}"#,
            ]
        );
        assert_eq!(state["token_expires_in"], json!(2));
        let (results, _) = run(
            CLASS,
            json!({}),
            &[
                "register_credit_card('x', '1', '1', 'a', 1)",
                "retrieve_invoice(None)",
            ],
        );
        assert_eq!(
            results,
            [
                r#"{"error": "Token not initialized"}"#,
                r#"{"error": "Booking not found"}"#
            ]
        );
    }

    #[test]
    fn budget_limits_convert_as_float_does() {
        let calls: Vec<String> = [
            "'\u{0663}.\u{0665}'",
            "' 1_000.5 '",
            "'-1.5e-3'",
            "True",
            "250",
            "'1_'",
            "'1__0'",
            "'+-1'",
            "'.'",
            "'0x1'",
            "'  '",
            "None",
        ]
        .iter()
        .map(|v| format!("set_budget_limit('tok', {v})"))
        .collect();
        let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
        let (results, state) = run(CLASS, json!({"access_token": "tok"}), &calls);
        let refused = |text: &str| {
            format!("Error during execution: could not convert string to float: {text}")
        };
        assert_eq!(
            results,
            [
                r#"{"budget_limit": 3.5}"#.to_owned(),
                r#"{"budget_limit": 1000.5}"#.into(),
                r#"{"budget_limit": -0.0015}"#.into(),
                r#"{"budget_limit": 1.0}"#.into(),
                r#"{"budget_limit": 250.0}"#.into(),
                refused("'1_'"),
                refused("'1__0'"),
                refused("'+-1'"),
                refused("'.'"),
                refused("'0x1'"),
                refused("'  '"),
                "Error during execution: float() argument must be a string or a real number, not 'NoneType'".into(),
            ]
        );
        assert_eq!(state["budget_limit"], json!(250.0));
    }

    #[test]
    fn bad_configs_are_refused() {
        for config in [
            json!({"credit_card_list": []}),
            json!({"credit_card_list": {"c": 5}}),
            json!({"booking_record": {"b": "x"}}),
            json!({"random_seed": "abc"}),
        ] {
            let map = config.as_object().unwrap();
            assert!(super::TravelApi::load(map).is_err(), "{config}");
        }
    }
}
