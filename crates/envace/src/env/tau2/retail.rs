//! The τ²-bench retail domain: record model, tool table and every tool's effects.
//!
//! Behaviour follows sierra-research/tau2-bench `src/tau2/domains/retail/tools.py` at commit
//! a2c0247, including its quirks:
//! - `modify_pending_order_items` does not round the price difference it records, sums it in
//!   item order starting from 0 (so amounts such as `71.96000000000001` appear), and gives every
//!   modified item the price and options of the *last* new item in the list;
//! - gift-card balances are rounded to cents after each change, order amounts are not;
//! - `modify_pending_order_address` / `_payment` accept any status containing "pending", while
//!   cancelling and item modification need exactly "pending";
//! - errors raised half way leave the changes made before them (the reference mutates live
//!   records), e.g. a cancellation refunding a gift card before failing on a later payment.

use super::ordered_map::OrderedMap;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

use crate::env::ToolSpec;

use super::{Args, calculate, object_params, round2, spec, string_param, to_json};

/// One variant (item) of a product.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Item id.
    pub item_id: String,
    /// Option name → value.
    pub options: OrderedMap<String>,
    /// Whether it is in stock.
    pub available: bool,
    /// Price.
    pub price: f64,
}

/// A product type with its variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Product {
    /// Product name.
    pub name: String,
    /// Product id.
    pub product_id: String,
    /// Item id → variant.
    pub variants: OrderedMap<Variant>,
}

/// A person's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserName {
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
}

/// A postal address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Address {
    /// First line.
    pub address1: String,
    /// Second line.
    pub address2: String,
    /// City.
    pub city: String,
    /// Country.
    pub country: String,
    /// State.
    pub state: String,
    /// Zip code.
    pub zip: String,
}

/// A saved payment method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source")]
pub enum PaymentMethod {
    /// A credit card.
    #[serde(rename = "credit_card")]
    CreditCard {
        /// Payment method id.
        id: String,
        /// Card brand.
        brand: String,
        /// Last four digits.
        last_four: String,
    },
    /// A PayPal account.
    #[serde(rename = "paypal")]
    Paypal {
        /// Payment method id.
        id: String,
    },
    /// A gift card with a balance.
    #[serde(rename = "gift_card")]
    GiftCard {
        /// Payment method id.
        id: String,
        /// Balance.
        balance: f64,
    },
}

/// A customer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// User id.
    pub user_id: String,
    /// Name.
    pub name: UserName,
    /// Default address.
    pub address: Address,
    /// Email.
    pub email: String,
    /// Payment method id → method.
    pub payment_methods: OrderedMap<PaymentMethod>,
    /// Order ids.
    pub orders: Vec<String>,
}

/// A shipment of some items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fulfillment {
    /// Tracking ids.
    pub tracking_id: Vec<String>,
    /// Item ids shipped.
    pub item_ids: Vec<String>,
}

/// An item in an order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderItem {
    /// Product name.
    pub name: String,
    /// Product id.
    pub product_id: String,
    /// Item id.
    pub item_id: String,
    /// Price paid.
    pub price: f64,
    /// Options of the item.
    pub options: OrderedMap<String>,
}

/// A payment or refund on an order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderPayment {
    /// `payment` or `refund`.
    pub transaction_type: String,
    /// Amount.
    pub amount: f64,
    /// Payment method id.
    pub payment_method_id: String,
}

/// An order. The seven optional fields are `null` until a tool sets them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// Order id (`#W…`).
    pub order_id: String,
    /// Owner.
    pub user_id: String,
    /// Shipping address.
    pub address: Address,
    /// Items.
    pub items: Vec<OrderItem>,
    /// Status.
    pub status: String,
    /// Shipments.
    pub fulfillments: Vec<Fulfillment>,
    /// Payments and refunds.
    pub payment_history: Vec<OrderPayment>,
    /// Why it was cancelled.
    #[serde(default)]
    pub cancel_reason: Option<String>,
    /// Item ids to exchange.
    #[serde(default)]
    pub exchange_items: Option<Vec<String>>,
    /// Item ids to exchange for.
    #[serde(default)]
    pub exchange_new_items: Option<Vec<String>>,
    /// Payment method for the exchange.
    #[serde(default)]
    pub exchange_payment_method_id: Option<String>,
    /// Price difference of the exchange (an int 0 when no items are exchanged, as in Python).
    #[serde(default)]
    pub exchange_price_difference: Option<Number>,
    /// Item ids to return.
    #[serde(default)]
    pub return_items: Option<Vec<String>>,
    /// Payment method for the refund.
    #[serde(default)]
    pub return_payment_method_id: Option<String>,
}

/// The retail database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetailDb {
    /// Product id → product.
    pub products: OrderedMap<Product>,
    /// User id → user.
    pub users: OrderedMap<User>,
    /// Order id → order.
    pub orders: OrderedMap<Order>,
}

type ToolResult = Result<Value, String>;

/// The retail tools, with schemas in our own words.
pub fn tool_specs() -> Vec<ToolSpec> {
    let order_id = || string_param("Order id, starting with '#', e.g. '#W0000000'.");
    let user_id = || string_param("User id, e.g. 'sara_doe_496'.");
    let item_list = |what: &str| serde_json::json!({"type": "array", "items": {"type": "string"}, "description": what});
    let payment = || {
        string_param(
            "Id of a payment method of the user, e.g. 'gift_card_0000000' or 'credit_card_0000000'.",
        )
    };
    let address = |first: (&str, Value)| {
        object_params(vec![
            first,
            ("address1", string_param("First address line.")),
            (
                "address2",
                string_param("Second address line, may be empty."),
            ),
            ("city", string_param("City.")),
            ("state", string_param("State code, e.g. 'CA'.")),
            ("country", string_param("Country, e.g. 'USA'.")),
            ("zip", string_param("Zip code.")),
        ])
    };
    vec![
        spec(
            "calculate",
            "Evaluate an arithmetic expression (numbers, + - * /, parentheses) and return the result rounded to two decimals.",
            object_params(vec![(
                "expression",
                string_param("The expression, e.g. '2 + 2'."),
            )]),
            false,
        ),
        spec(
            "cancel_pending_order",
            "Cancel an order whose status is 'pending' and refund its payments (gift cards at once, other methods in 5-7 business days). Needs the user's explicit confirmation. Returns the updated order.",
            object_params(vec![
                ("order_id", order_id()),
                (
                    "reason",
                    serde_json::json!({"type": "string", "description": "Either 'no longer needed' or 'ordered by mistake'."}),
                ),
            ]),
            true,
        ),
        spec(
            "exchange_delivered_order_items",
            "Request an exchange of items of a delivered order for other variants of the same products; can be done once per order. Needs the user's explicit confirmation. Returns the updated order.",
            object_params(vec![
                ("order_id", order_id()),
                ("item_ids", item_list("Item ids to exchange; may repeat.")),
                (
                    "new_item_ids",
                    item_list(
                        "Replacement item ids, position by position, same product as the item they replace.",
                    ),
                ),
                ("payment_method_id", payment()),
            ]),
            true,
        ),
        spec(
            "find_user_id_by_name_zip",
            "Look up a user id from first name, last name and zip code. Prefer looking up by email.",
            object_params(vec![
                ("first_name", string_param("First name, e.g. 'John'.")),
                ("last_name", string_param("Last name, e.g. 'Doe'.")),
                ("zip", string_param("Zip code, e.g. '12345'.")),
            ]),
            false,
        ),
        spec(
            "find_user_id_by_email",
            "Look up a user id from an email address.",
            object_params(vec![(
                "email",
                string_param("Email, e.g. 'someone@example.com'."),
            )]),
            false,
        ),
        spec(
            "get_order_details",
            "Return an order's status and details.",
            object_params(vec![("order_id", order_id())]),
            false,
        ),
        spec(
            "get_product_details",
            "Return a product type and all its variants (a product id is not an item id).",
            object_params(vec![(
                "product_id",
                string_param("Product id, e.g. '6086499569'."),
            )]),
            false,
        ),
        spec(
            "get_item_details",
            "Return one item (variant): options, availability and price (an item id is not a product id).",
            object_params(vec![(
                "item_id",
                string_param("Item id, e.g. '1008292230'."),
            )]),
            false,
        ),
        spec(
            "get_user_details",
            "Return a user's details, including payment methods and order ids.",
            object_params(vec![("user_id", user_id())]),
            false,
        ),
        spec(
            "list_all_product_types",
            "List every product type (50) as a JSON object from product name to product id, sorted by name.",
            object_params(vec![]),
            false,
        ),
        spec(
            "modify_pending_order_address",
            "Change the shipping address of a pending order. Needs the user's explicit confirmation. Returns the updated order.",
            address(("order_id", order_id())),
            true,
        ),
        spec(
            "modify_pending_order_items",
            "Swap items of a pending order for other variants of the same products; can be done once per order. Needs the user's explicit confirmation. Returns the updated order.",
            object_params(vec![
                ("order_id", order_id()),
                ("item_ids", item_list("Item ids to change; may repeat.")),
                (
                    "new_item_ids",
                    item_list(
                        "Replacement item ids, position by position, same product as the item they replace.",
                    ),
                ),
                ("payment_method_id", payment()),
            ]),
            true,
        ),
        spec(
            "modify_pending_order_payment",
            "Pay a pending order with another payment method of the user (the old one is refunded). Needs the user's explicit confirmation. Returns the updated order.",
            object_params(vec![
                ("order_id", order_id()),
                ("payment_method_id", payment()),
            ]),
            true,
        ),
        spec(
            "modify_user_address",
            "Change a user's default address. Needs the user's explicit confirmation. Returns the updated user.",
            address(("user_id", user_id())),
            true,
        ),
        spec(
            "return_delivered_order_items",
            "Request a return of items of a delivered order; the refund goes to the original payment method or a gift card. Needs the user's explicit confirmation. Returns the updated order.",
            object_params(vec![
                ("order_id", order_id()),
                ("item_ids", item_list("Item ids to return; may repeat.")),
                ("payment_method_id", payment()),
            ]),
            true,
        ),
        spec(
            "transfer_to_human_agents",
            "Hand the conversation to a human agent with a summary. Only when the user asks for one or the request cannot be handled with these tools and the policy.",
            object_params(vec![(
                "summary",
                string_param("Summary of the user's issue."),
            )]),
            false,
        ),
    ]
}

/// Runs a retail tool on validated arguments; `Err` is the reference's error message.
pub(crate) fn call(db: &mut RetailDb, name: &str, args: &Args<'_>) -> ToolResult {
    match name {
        "calculate" => calculate(args),
        "cancel_pending_order" => cancel_pending_order(db, args),
        "exchange_delivered_order_items" => exchange_delivered_order_items(db, args),
        "find_user_id_by_name_zip" => {
            let (first, last, zip) = (
                args.str("first_name")?,
                args.str("last_name")?,
                args.str("zip")?,
            );
            db.users
                .iter()
                .find(|(_, user)| {
                    user.name.first_name.to_lowercase() == first.to_lowercase()
                        && user.name.last_name.to_lowercase() == last.to_lowercase()
                        && user.address.zip == zip
                })
                .map(|(id, _)| Value::String(id.clone()))
                .ok_or_else(|| "User not found".to_owned())
        }
        "find_user_id_by_email" => {
            let email = args.str("email")?.to_lowercase();
            db.users
                .iter()
                .find(|(_, user)| user.email.to_lowercase() == email)
                .map(|(id, _)| Value::String(id.clone()))
                .ok_or_else(|| "User not found".to_owned())
        }
        "get_order_details" => to_json(order(db, args.str("order_id")?)?),
        "get_product_details" => to_json(product(db, args.str("product_id")?)?),
        "get_item_details" => {
            let item_id = args.str("item_id")?;
            let variant = db
                .products
                .values()
                .find_map(|product| product.variants.get(item_id))
                .ok_or_else(|| "Item not found".to_owned())?;
            to_json(variant)
        }
        "get_user_details" => to_json(user(db, args.str("user_id")?)?),
        "list_all_product_types" => {
            let mut names = serde_json::Map::new();
            for product in db.products.values() {
                names.insert(
                    product.name.clone(),
                    Value::String(product.product_id.clone()),
                );
            }
            Ok(Value::String(crate::env::pyjson::dumps(
                &Value::Object(names),
                true,
            )))
        }
        "modify_pending_order_address" => {
            let address = address_arg(args)?;
            let order = order_mut(db, args.str("order_id")?)?;
            if !order.status.contains("pending") {
                return Err("Non-pending order cannot be modified".to_owned());
            }
            order.address = address;
            to_json(order)
        }
        "modify_pending_order_items" => modify_pending_order_items(db, args),
        "modify_pending_order_payment" => modify_pending_order_payment(db, args),
        "modify_user_address" => {
            let address = address_arg(args)?;
            let user = db
                .users
                .get_mut(args.str("user_id")?)
                .ok_or_else(|| "User not found".to_owned())?;
            user.address = address;
            to_json(user)
        }
        "return_delivered_order_items" => return_delivered_order_items(db, args),
        "transfer_to_human_agents" => Ok(Value::String("Transfer successful".to_owned())),
        _ => Err(format!("Tool '{name}' not found.")),
    }
}

fn order<'a>(db: &'a RetailDb, order_id: &str) -> Result<&'a Order, String> {
    db.orders
        .get(order_id)
        .ok_or_else(|| "Order not found".to_owned())
}

fn order_mut<'a>(db: &'a mut RetailDb, order_id: &str) -> Result<&'a mut Order, String> {
    db.orders
        .get_mut(order_id)
        .ok_or_else(|| "Order not found".to_owned())
}

fn user<'a>(db: &'a RetailDb, user_id: &str) -> Result<&'a User, String> {
    db.users
        .get(user_id)
        .ok_or_else(|| "User not found".to_owned())
}

fn product<'a>(db: &'a RetailDb, product_id: &str) -> Result<&'a Product, String> {
    db.products
        .get(product_id)
        .ok_or_else(|| "Product not found".to_owned())
}

fn variant<'a>(db: &'a RetailDb, product_id: &str, item_id: &str) -> Result<&'a Variant, String> {
    product(db, product_id)?
        .variants
        .get(item_id)
        .ok_or_else(|| "Variant not found".to_owned())
}

fn payment_method<'a>(
    db: &'a RetailDb,
    user_id: &str,
    payment_method_id: &str,
) -> Result<&'a PaymentMethod, String> {
    user(db, user_id)?
        .payment_methods
        .get(payment_method_id)
        .ok_or_else(|| "Payment method not found".to_owned())
}

/// The balance of a gift card, `None` for other methods.
fn gift_balance(method: &PaymentMethod) -> Option<f64> {
    match method {
        PaymentMethod::GiftCard { balance, .. } => Some(*balance),
        _ => None,
    }
}

/// Applies `change` to a gift card's balance and rounds it to cents, as the reference does.
fn update_gift_card(
    db: &mut RetailDb,
    user_id: &str,
    method_id: &str,
    change: impl Fn(f64) -> f64,
) {
    if let Some(PaymentMethod::GiftCard { balance, .. }) = db
        .users
        .get_mut(user_id)
        .and_then(|user| user.payment_methods.get_mut(method_id))
    {
        *balance = round2(change(*balance));
    }
}

fn address_arg(args: &Args<'_>) -> Result<Address, String> {
    Ok(Address {
        address1: args.str("address1")?.to_owned(),
        address2: args.str("address2")?.to_owned(),
        city: args.str("city")?.to_owned(),
        country: args.str("country")?.to_owned(),
        state: args.str("state")?.to_owned(),
        zip: args.str("zip")?.to_owned(),
    })
}

/// Whether `wanted` asks for more copies of some id than `available` holds; returns that id.
fn first_overdrawn<'a>(wanted: &'a [String], available: &[String]) -> Option<&'a String> {
    wanted.iter().find(|id| {
        wanted.iter().filter(|w| w == id).count() > available.iter().filter(|a| a == id).count()
    })
}

fn cancel_pending_order(db: &mut RetailDb, args: &Args<'_>) -> ToolResult {
    let order_id = args.str("order_id")?;
    let reason = args.str("reason")?;
    let current = order(db, order_id)?;
    if current.status != "pending" {
        return Err("Non-pending order cannot be cancelled".to_owned());
    }
    if reason != "no longer needed" && reason != "ordered by mistake" {
        return Err("Invalid reason".to_owned());
    }
    let user_id = current.user_id.clone();
    let payments = current.payment_history.clone();
    let mut refunds = Vec::new();
    for payment in &payments {
        refunds.push(OrderPayment {
            transaction_type: "refund".to_owned(),
            amount: payment.amount,
            payment_method_id: payment.payment_method_id.clone(),
        });
        let method = payment_method(db, &user_id, &payment.payment_method_id)?;
        if gift_balance(method).is_some() {
            update_gift_card(db, &user_id, &payment.payment_method_id, |b| {
                b + payment.amount
            });
        }
    }
    let order = order_mut(db, order_id)?;
    order.status = "cancelled".to_owned();
    order.cancel_reason = Some(reason.to_owned());
    order.payment_history.extend(refunds);
    to_json(order)
}

fn exchange_delivered_order_items(db: &mut RetailDb, args: &Args<'_>) -> ToolResult {
    let order_id = args.str("order_id")?;
    let item_ids = args.strings("item_ids")?;
    let new_item_ids = args.strings("new_item_ids")?;
    let payment_method_id = args.str("payment_method_id")?;
    let current = order(db, order_id)?;
    if current.status != "delivered" {
        return Err("Non-delivered order cannot be exchanged".to_owned());
    }
    let all_item_ids: Vec<String> = current.items.iter().map(|i| i.item_id.clone()).collect();
    if let Some(id) = first_overdrawn(&item_ids, &all_item_ids) {
        return Err(format!("Number of {id} not found."));
    }
    if item_ids.len() != new_item_ids.len() {
        return Err("The number of items to be exchanged should match.".to_owned());
    }
    // Python starts the sum from the int 0; with no items it stays an int.
    let mut diff_price: Option<f64> = None;
    for (item_id, new_item_id) in item_ids.iter().zip(&new_item_ids) {
        let item = current
            .items
            .iter()
            .find(|item| &item.item_id == item_id)
            .ok_or_else(|| format!("Item {item_id} not found"))?;
        let new_variant = variant(db, &item.product_id, new_item_id)?;
        if !new_variant.available {
            return Err(format!("New item {new_item_id} not found or available"));
        }
        diff_price = Some(diff_price.unwrap_or(0.0) + (new_variant.price - item.price));
    }
    let diff_price = diff_price.map(round2);
    let method = payment_method(db, &current.user_id, payment_method_id)?;
    if let Some(balance) = gift_balance(method)
        && balance < diff_price.unwrap_or(0.0)
    {
        return Err("Insufficient gift card balance to pay for the price difference".to_owned());
    }
    let mut exchange_items = item_ids;
    exchange_items.sort();
    let mut exchange_new_items = new_item_ids;
    exchange_new_items.sort();
    let order = order_mut(db, order_id)?;
    order.status = "exchange requested".to_owned();
    order.exchange_items = Some(exchange_items);
    order.exchange_new_items = Some(exchange_new_items);
    order.exchange_payment_method_id = Some(payment_method_id.to_owned());
    order.exchange_price_difference = Some(match diff_price {
        Some(diff) => Number::from_f64(diff)
            .ok_or_else(|| format!("price difference {diff} is not finite"))?,
        None => Number::from(0),
    });
    to_json(order)
}

fn modify_pending_order_items(db: &mut RetailDb, args: &Args<'_>) -> ToolResult {
    let order_id = args.str("order_id")?;
    let item_ids = args.strings("item_ids")?;
    let new_item_ids = args.strings("new_item_ids")?;
    let payment_method_id = args.str("payment_method_id")?;
    let current = order(db, order_id)?;
    if current.status != "pending" {
        return Err("Non-pending order cannot be modified".to_owned());
    }
    let all_item_ids: Vec<String> = current.items.iter().map(|i| i.item_id.clone()).collect();
    if let Some(id) = first_overdrawn(&item_ids, &all_item_ids) {
        return Err(format!("{id} not found"));
    }
    if item_ids.len() != new_item_ids.len() {
        return Err("The number of items to be exchanged should match".to_owned());
    }
    let mut diff_price = 0.0_f64;
    let mut last_variant: Option<Variant> = None;
    for (item_id, new_item_id) in item_ids.iter().zip(&new_item_ids) {
        if item_id == new_item_id {
            return Err("The new item id should be different from the old item id".to_owned());
        }
        let item = current
            .items
            .iter()
            .find(|item| &item.item_id == item_id)
            .ok_or_else(|| format!("Item {item_id} not found"))?;
        let new_variant = variant(db, &item.product_id, new_item_id)?;
        if !new_variant.available {
            return Err(format!("New item {new_item_id} not found or available"));
        }
        diff_price += new_variant.price - item.price;
        last_variant = Some(new_variant.clone());
    }
    let user_id = current.user_id.clone();
    let method = payment_method(db, &user_id, payment_method_id)?;
    let is_gift_card = gift_balance(method).is_some();
    if let Some(balance) = gift_balance(method)
        && balance < diff_price
    {
        return Err("Insufficient gift card balance to pay for the new item".to_owned());
    }
    order_mut(db, order_id)?.payment_history.push(OrderPayment {
        transaction_type: if diff_price > 0.0 {
            "payment"
        } else {
            "refund"
        }
        .to_owned(),
        amount: diff_price.abs(),
        payment_method_id: payment_method_id.to_owned(),
    });
    if is_gift_card {
        update_gift_card(db, &user_id, payment_method_id, |b| b - diff_price);
    }
    let order = order_mut(db, order_id)?;
    // The reference gives every changed item the last new variant's price and options.
    if let Some(variant) = &last_variant {
        for (item_id, new_item_id) in item_ids.iter().zip(&new_item_ids) {
            let item = order
                .items
                .iter_mut()
                .find(|item| &item.item_id == item_id)
                .ok_or_else(|| format!("Item {item_id} not found"))?;
            item.item_id = new_item_id.clone();
            item.price = variant.price;
            item.options = variant.options.clone();
        }
    }
    order.status = "pending (item modified)".to_owned();
    to_json(order)
}

fn modify_pending_order_payment(db: &mut RetailDb, args: &Args<'_>) -> ToolResult {
    let order_id = args.str("order_id")?;
    let payment_method_id = args.str("payment_method_id")?;
    let current = order(db, order_id)?;
    if !current.status.contains("pending") {
        return Err("Non-pending order cannot be modified".to_owned());
    }
    let user_id = current.user_id.clone();
    let method = payment_method(db, &user_id, payment_method_id)?;
    let first = match current.payment_history.as_slice() {
        [only] if only.transaction_type == "payment" => only.clone(),
        _ => return Err("There should be exactly one payment for a pending order".to_owned()),
    };
    if first.payment_method_id == payment_method_id {
        return Err("The new payment method should be different from the current one".to_owned());
    }
    let amount = first.amount;
    let new_is_gift = gift_balance(method).is_some();
    if let Some(balance) = gift_balance(method)
        && balance < amount
    {
        return Err("Insufficient gift card balance to pay for the order".to_owned());
    }
    let updated = order_mut(db, order_id)?;
    updated.payment_history.push(OrderPayment {
        transaction_type: "payment".to_owned(),
        amount,
        payment_method_id: payment_method_id.to_owned(),
    });
    updated.payment_history.push(OrderPayment {
        transaction_type: "refund".to_owned(),
        amount,
        payment_method_id: first.payment_method_id.clone(),
    });
    if new_is_gift {
        update_gift_card(db, &user_id, payment_method_id, |b| b - amount);
    }
    let old = payment_method(db, &user_id, &first.payment_method_id)?;
    if gift_balance(old).is_some() {
        update_gift_card(db, &user_id, &first.payment_method_id, |b| b + amount);
    }
    to_json(order(db, order_id)?)
}

fn return_delivered_order_items(db: &mut RetailDb, args: &Args<'_>) -> ToolResult {
    let order_id = args.str("order_id")?;
    let item_ids = args.strings("item_ids")?;
    let payment_method_id = args.str("payment_method_id")?;
    let current = order(db, order_id)?;
    if current.status != "delivered" {
        return Err("Non-delivered order cannot be returned".to_owned());
    }
    let method = payment_method(db, &current.user_id, payment_method_id)?;
    if gift_balance(method).is_none() {
        let original = current
            .payment_history
            .first()
            .ok_or_else(|| "list index out of range".to_owned())?;
        if payment_method_id != original.payment_method_id {
            return Err("Payment method should be the original payment method".to_owned());
        }
    }
    let all_item_ids: Vec<String> = current.items.iter().map(|i| i.item_id.clone()).collect();
    if first_overdrawn(&item_ids, &all_item_ids).is_some() {
        return Err("Some item not found".to_owned());
    }
    let mut return_items = item_ids;
    return_items.sort();
    let order = order_mut(db, order_id)?;
    order.status = "return requested".to_owned();
    order.return_items = Some(return_items);
    order.return_payment_method_id = Some(payment_method_id.to_owned());
    to_json(order)
}
