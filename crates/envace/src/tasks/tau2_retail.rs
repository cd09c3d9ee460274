//! Task families over the τ²-bench retail database: user look-up, order status, variant
//! availability, cancelling, address changes, returns and exchanges.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Fact, Plan, Rng, capitalise, fill, split_of};
use crate::chat::ToolCall;
use crate::config::TaskSplit;
use crate::env::tau2::retail::{Order, PaymentMethod, Product, RetailDb, User};
use crate::env::tau2::{Db, Tau2Domain};
use crate::error::{Error, Result};

/// The users, orders and products of one split.
pub(crate) struct Pools<'a> {
    db: &'a RetailDb,
    users: Vec<&'a User>,
    orders: Vec<&'a Order>,
    products: Vec<&'a Product>,
}

impl<'a> Pools<'a> {
    pub(crate) fn new(domain: &'a Arc<Tau2Domain>, split: TaskSplit) -> Result<Self> {
        let Db::Retail(db) = domain.initial_db() else {
            return Err(Error::TaskGen {
                what: format!("domain folder {}", domain.dir().display()),
                message: "retail tasks need the retail domain, got another one".to_owned(),
            });
        };
        let users: Vec<&User> = db
            .users
            .values()
            .filter(|u| split_of(&format!("user:{}", u.user_id)) == split)
            .collect();
        let orders = db
            .orders
            .values()
            .filter(|o| split_of(&format!("user:{}", o.user_id)) == split)
            .collect();
        let products = db
            .products
            .values()
            .filter(|p| split_of(&format!("product:{}", p.product_id)) == split)
            .collect();
        Ok(Pools {
            db,
            users,
            orders,
            products,
        })
    }

    fn product_in_split(&self, product_id: &str) -> bool {
        self.products.iter().any(|p| p.product_id == product_id)
    }
}

const GREETINGS: [&str; 6] = [
    "",
    "Hi! ",
    "Hello, ",
    "Good morning. ",
    "Hey there. ",
    "Hi, quick question. ",
];

const STREETS: [&str; 8] = [
    "Maple Avenue",
    "Cedar Lane",
    "Lakeview Drive",
    "Highland Road",
    "Willow Street",
    "Sunset Boulevard",
    "Pine Court",
    "River Road",
];

const CITIES: [(&str, &str, &str); 6] = [
    ("Austin", "TX", "787"),
    ("Denver", "CO", "802"),
    ("Seattle", "WA", "981"),
    ("Boston", "MA", "021"),
    ("Phoenix", "AZ", "850"),
    ("Chicago", "IL", "606"),
];

/// How the user identifies themself, and the look-up calls that this takes.
fn identify(
    pools: &Pools<'_>,
    user: &User,
    difficulty: u32,
    rng: &mut Rng,
) -> (String, Vec<ToolCall>) {
    if difficulty <= 1 {
        let text = fill(
            rng.pick(&["My user id is {id}.", "I'm user {id}.", "(user id: {id})"])
                .copied()
                .unwrap_or(""),
            &[("id", user.user_id.clone())],
        );
        return (text, Vec::new());
    }
    let by_name = difficulty >= 4 && {
        let same: usize = pools
            .db
            .users
            .values()
            .filter(|u| {
                u.name.first_name.to_lowercase() == user.name.first_name.to_lowercase()
                    && u.name.last_name.to_lowercase() == user.name.last_name.to_lowercase()
                    && u.address.zip == user.address.zip
            })
            .count();
        same == 1
    };
    if by_name {
        let text = fill(
            rng.pick(&[
                "I'm {first} {last}, zip code {zip}.",
                "My name is {first} {last} and I live in zip {zip}.",
                "This is {first} {last} ({zip}).",
            ])
            .copied()
            .unwrap_or(""),
            &[
                ("first", user.name.first_name.clone()),
                ("last", user.name.last_name.clone()),
                ("zip", user.address.zip.clone()),
            ],
        );
        let call = ToolCall::new(
            "find_user_id_by_name_zip",
            vec![
                ("first_name", json!(user.name.first_name)),
                ("last_name", json!(user.name.last_name)),
                ("zip", json!(user.address.zip)),
            ],
        );
        (text, vec![call])
    } else {
        let text = fill(
            rng.pick(&[
                "My email is {email}.",
                "You can find me under {email}.",
                "My account email: {email}.",
                "I registered with {email}.",
            ])
            .copied()
            .unwrap_or(""),
            &[("email", user.email.clone())],
        );
        let call = ToolCall::new("find_user_id_by_email", vec![("email", json!(user.email))]);
        (text, vec![call])
    }
}

fn money(x: f64) -> String {
    format!("${x:.2}")
}

fn options_text(options: &crate::env::tau2::ordered_map::OrderedMap<String>) -> String {
    options
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn touched_order(touched: &mut BTreeSet<String>, order: &Order) {
    touched.insert(format!("user:{}", order.user_id));
    touched.insert(format!("order:{}", order.order_id));
}

type Family = fn(&Pools<'_>, u32, &mut Rng) -> Option<Plan>;

const FAMILIES: [(&str, u32, Family); 8] = [
    ("user_lookup", 1, user_lookup),
    ("order_status", 1, order_status),
    ("variant_availability", 1, variant_availability),
    ("cancel_pending_order", 2, cancel_pending_order),
    ("modify_order_address", 2, modify_order_address),
    ("modify_user_address", 2, modify_user_address),
    ("return_delivered_items", 3, return_delivered_items),
    ("exchange_delivered_item", 4, exchange_delivered_item),
];

/// The retail family names with their lowest difficulty.
pub(crate) fn families() -> Vec<(&'static str, u32)> {
    super::family_names(&FAMILIES)
}

/// Draws a family allowed at this difficulty and plans a task; retries on a sample that does
/// not fit (e.g. an order without a suitable item).
pub(crate) fn plan(
    pools: &Pools<'_>,
    difficulty: u32,
    families: &[String],
    rng: &mut Rng,
) -> Result<Plan> {
    super::plan_from_table(
        &FAMILIES,
        "retail families",
        difficulty,
        families,
        rng,
        |family, rng| family(pools, difficulty, rng),
    )
}

fn user_of<'a>(pools: &Pools<'a>, order: &Order) -> Option<&'a User> {
    pools.db.users.get(&order.user_id)
}

fn user_lookup(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let user = *rng.pick(&pools.users)?;
    let (intro, lookup) = identify(pools, user, difficulty.max(2), rng);
    let mut turns = vec![lookup];
    let mut facts = vec![Fact {
        what: "their user id".to_owned(),
        text: user.user_id.clone(),
    }];
    let mut ask = rng
        .pick(&[
            "Can you tell me which user id my account has?",
            "I forgot my user id, could you look it up?",
            "What is the user id on my account?",
            "Please find my account id.",
        ])
        .copied()
        .unwrap_or("")
        .to_owned();
    let mut answer = format!("Your user id is {}.", user.user_id);
    if difficulty >= 3 {
        turns.push(vec![ToolCall::new(
            "get_user_details",
            vec![("user_id", json!(user.user_id))],
        )]);
        let n_orders = user.orders.len();
        ask.push_str(" And how many orders do I have on file?");
        facts.push(Fact {
            what: "how many orders they have".to_owned(),
            text: format!("{n_orders} order(s)"),
        });
        answer.push_str(&format!(" You have {n_orders} order(s) on file."));
    }
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "user_lookup",
        request: format!("{greeting}{intro} {ask}"),
        turns,
        required,
        facts,
        answer,
        check_state: difficulty >= 3,
        touched: BTreeSet::from([format!("user:{}", user.user_id)]),
    })
}

fn order_status(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let order = *rng.pick(&pools.orders)?;
    let user = user_of(pools, order)?;
    let (intro, lookup) = if difficulty >= 2 {
        identify(pools, user, difficulty, rng)
    } else {
        (String::new(), Vec::new())
    };
    let ask = fill(
        rng.pick(&[
            "What's the status of my order {order}?",
            "Where is my order {order} at the moment?",
            "Could you check on order {order} for me?",
            "Has my order {order} shipped yet?",
            "I'd like an update on order {order}.",
        ])
        .copied()
        .unwrap_or(""),
        &[("order", order.order_id.clone())],
    );
    let mut turns = Vec::new();
    if !lookup.is_empty() {
        turns.push(lookup);
    }
    turns.push(vec![ToolCall::new(
        "get_order_details",
        vec![("order_id", json!(order.order_id))],
    )]);
    let mut facts = vec![Fact {
        what: "the order status".to_owned(),
        text: format!("status: {}", order.status),
    }];
    let mut answer = format!("Order {} has status: {}.", order.order_id, order.status);
    let mut request = format!("{} {ask}", intro.trim());
    if difficulty >= 3 {
        let n_items = order.items.len();
        request.push_str(" How many items are in it?");
        facts.push(Fact {
            what: "how many items the order has".to_owned(),
            text: format!("{n_items} item(s)"),
        });
        answer.push_str(&format!(" It contains {n_items} item(s)."));
    }
    if difficulty >= 5
        && let Some(tracking) = order
            .fulfillments
            .first()
            .and_then(|f| f.tracking_id.first())
    {
        request.push_str(" And the tracking number, please.");
        facts.push(Fact {
            what: "the tracking number".to_owned(),
            text: tracking.clone(),
        });
        answer.push_str(&format!(" Tracking number: {tracking}."));
    }
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let mut touched = BTreeSet::new();
    touched_order(&mut touched, order);
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "order_status",
        request: format!("{greeting}{}", request.trim()),
        turns,
        required,
        facts,
        answer,
        check_state: difficulty >= 3,
        touched,
    })
}

fn variant_availability(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let product = *rng.pick(&pools.products)?;
    let variants: Vec<_> = product.variants.values().collect();
    let n_asked = if difficulty >= 3 { 2 } else { 1 };
    if variants.len() < n_asked {
        return None;
    }
    let first = rng.below(variants.len());
    let picked: Vec<_> = (0..n_asked)
        .map(|k| variants[(first + k) % variants.len()])
        .collect();
    let described: Vec<String> = picked.iter().map(|v| options_text(&v.options)).collect();
    let what = if difficulty >= 2 {
        format!("the {}", product.name)
    } else {
        format!("the {} (product id {})", product.name, product.product_id)
    };
    let ask = fill(
        rng.pick(&[
            "Is {what} with {opts} in stock, and how much is it?",
            "I'm looking at {what}: is the one with {opts} available? What does it cost?",
            "Do you have {what} in {opts}? Please tell me the price too.",
            "Could you check availability and price of {what} ({opts})?",
        ])
        .copied()
        .unwrap_or(""),
        &[
            ("what", what),
            ("opts", described.join("; and also the one with ")),
        ],
    );
    let mut turns = Vec::new();
    if difficulty >= 2 {
        turns.push(vec![ToolCall::new("list_all_product_types", vec![])]);
    }
    turns.push(vec![ToolCall::new(
        "get_product_details",
        vec![("product_id", json!(product.product_id))],
    )]);
    let mut facts = Vec::new();
    let mut lines = Vec::new();
    for (variant, text) in picked.iter().zip(&described) {
        let stock = if variant.available {
            "in stock"
        } else {
            "out of stock"
        };
        facts.push(Fact {
            what: format!("whether item {} is available", variant.item_id),
            text: format!("item {} is {stock}", variant.item_id),
        });
        facts.push(Fact {
            what: format!("the price of item {}", variant.item_id),
            text: money(variant.price),
        });
        lines.push(format!(
            "The {} with {text}: item {} is {stock}, price {}.",
            product.name,
            variant.item_id,
            money(variant.price)
        ));
    }
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "variant_availability",
        request: format!("{greeting}{ask}"),
        turns,
        required,
        facts,
        answer: lines.join(" "),
        check_state: difficulty >= 3,
        touched: BTreeSet::from([format!("product:{}", product.product_id)]),
    })
}

/// An order of the split with this status, with its owner.
fn order_with_status<'a>(
    pools: &Pools<'a>,
    rng: &mut Rng,
    accept: impl Fn(&Order) -> bool,
) -> Option<(&'a Order, &'a User)> {
    let order = *rng.pick(&pools.orders)?;
    if !accept(order) {
        return None;
    }
    Some((order, user_of(pools, order)?))
}

fn cancel_pending_order(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let (order, user) = order_with_status(pools, rng, |o| o.status == "pending")?;
    let (intro, lookup) = identify(pools, user, difficulty, rng);
    let reason = *rng.pick(&["no longer needed", "ordered by mistake"])?;
    let why = match reason {
        "no longer needed" => *rng.pick(&[
            "I don't need it anymore",
            "it's no longer needed",
            "I changed my plans and no longer need it",
        ])?,
        _ => *rng.pick(&[
            "I ordered it by mistake",
            "it was a mistaken order",
            "I placed it by accident",
        ])?,
    };
    let ask = fill(
        rng.pick(&[
            "Please cancel my order {order}, {why}.",
            "I want to cancel order {order} because {why}.",
            "Can you cancel {order}? {Why}.",
            "Cancel order {order} please: {why}. Yes, I confirm.",
        ])
        .copied()
        .unwrap_or(""),
        &[
            ("order", order.order_id.clone()),
            ("why", why.to_owned()),
            ("Why", capitalise(why)),
        ],
    );
    let mut turns = Vec::new();
    if !lookup.is_empty() {
        turns.push(lookup);
    }
    turns.push(vec![ToolCall::new(
        "get_order_details",
        vec![("order_id", json!(order.order_id))],
    )]);
    turns.push(vec![ToolCall::new(
        "cancel_pending_order",
        vec![
            ("order_id", json!(order.order_id)),
            ("reason", json!(reason)),
        ],
    )]);
    let mut facts = vec![Fact {
        what: "that the order is cancelled".to_owned(),
        text: format!("{} is now cancelled", order.order_id),
    }];
    let mut answer = format!("Order {} is now cancelled.", order.order_id);
    if difficulty >= 4 {
        let total: f64 = order
            .payment_history
            .iter()
            .filter(|p| p.transaction_type == "payment")
            .map(|p| p.amount)
            .sum();
        facts.push(Fact {
            what: "the refunded amount".to_owned(),
            text: money(total),
        });
        answer.push_str(&format!(" A refund of {} is on its way.", money(total)));
    }
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let mut touched = BTreeSet::new();
    touched_order(&mut touched, order);
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "cancel_pending_order",
        request: format!("{greeting}{} {ask}", intro).trim().to_owned(),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched,
    })
}

/// A made-up new address: `(address1, address2, city, state, zip)`.
fn new_address(rng: &mut Rng) -> (String, String, String, String, String) {
    let street = format!(
        "{} {}",
        rng.range(10, 9999),
        rng.pick(&STREETS).copied().unwrap_or("Main Street")
    );
    let suite = if rng.chance(0.5) {
        format!("Suite {}", rng.range(100, 999))
    } else {
        String::new()
    };
    let (city, state, zip3) = rng
        .pick(&CITIES)
        .copied()
        .unwrap_or(("Austin", "TX", "787"));
    let zip = format!("{zip3}{:02}", rng.range(0, 99));
    (street, suite, city.to_owned(), state.to_owned(), zip)
}

fn address_args(
    first: (&'static str, &str),
    address: &(String, String, String, String, String),
) -> Vec<(&'static str, Value)> {
    vec![
        (first.0, json!(first.1)),
        ("address1", json!(address.0)),
        ("address2", json!(address.1)),
        ("city", json!(address.2)),
        ("state", json!(address.3)),
        ("country", json!("USA")),
        ("zip", json!(address.4)),
    ]
}

fn address_text(address: &(String, String, String, String, String)) -> String {
    let suite = if address.1.is_empty() {
        String::new()
    } else {
        format!(", {}", address.1)
    };
    format!(
        "{}{suite}, {}, {} {}",
        address.0, address.2, address.3, address.4
    )
}

fn modify_order_address(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let (order, user) = order_with_status(pools, rng, |o| o.status.contains("pending"))?;
    let (intro, lookup) = identify(pools, user, difficulty, rng);
    let address = new_address(rng);
    let ask = fill(
        rng.pick(&[
            "Please ship order {order} to {addr} instead (USA).",
            "I moved: can order {order} go to {addr}, USA?",
            "Change the delivery address of {order} to {addr}, USA. I confirm.",
            "Could you update where {order} is shipped? New address: {addr}, USA.",
        ])
        .copied()
        .unwrap_or(""),
        &[
            ("order", order.order_id.clone()),
            ("addr", address_text(&address)),
        ],
    );
    let mut turns = Vec::new();
    if !lookup.is_empty() {
        turns.push(lookup);
    }
    turns.push(vec![ToolCall::new(
        "get_order_details",
        vec![("order_id", json!(order.order_id))],
    )]);
    turns.push(vec![ToolCall::new(
        "modify_pending_order_address",
        address_args(("order_id", &order.order_id), &address),
    )]);
    let facts = vec![Fact {
        what: "the new shipping address".to_owned(),
        text: address.0.clone(),
    }];
    let answer = format!(
        "Order {} will now ship to {}, USA.",
        order.order_id,
        address_text(&address)
    );
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let mut touched = BTreeSet::new();
    touched_order(&mut touched, order);
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "modify_order_address",
        request: format!("{greeting}{intro} {ask}").trim().to_owned(),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched,
    })
}

fn modify_user_address(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let user = *rng.pick(&pools.users)?;
    let (intro, lookup) = identify(pools, user, difficulty, rng);
    let address = new_address(rng);
    let ask = fill(
        rng.pick(&[
            "Please update my default address to {addr}, USA.",
            "I've moved to {addr}, USA; change my profile address.",
            "My new home address is {addr}, USA. Update it, I confirm.",
            "Set the address on my account to {addr}, USA.",
        ])
        .copied()
        .unwrap_or(""),
        &[("addr", address_text(&address))],
    );
    let mut turns = Vec::new();
    if !lookup.is_empty() {
        turns.push(lookup);
    }
    if difficulty >= 3 {
        turns.push(vec![ToolCall::new(
            "get_user_details",
            vec![("user_id", json!(user.user_id))],
        )]);
    }
    turns.push(vec![ToolCall::new(
        "modify_user_address",
        address_args(("user_id", &user.user_id), &address),
    )]);
    let facts = vec![Fact {
        what: "the new zip code".to_owned(),
        text: address.4.clone(),
    }];
    let answer = format!(
        "Your default address is now {}, USA.",
        address_text(&address)
    );
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "modify_user_address",
        request: format!("{greeting}{intro} {ask}").trim().to_owned(),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched: BTreeSet::from([format!("user:{}", user.user_id)]),
    })
}

fn return_delivered_items(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let (order, user) = order_with_status(pools, rng, |o| o.status == "delivered")?;
    let eligible: Vec<_> = order
        .items
        .iter()
        .filter(|item| pools.product_in_split(&item.product_id))
        .collect();
    let n_items = if difficulty >= 5 { 2 } else { 1 };
    if eligible.len() < n_items {
        return None;
    }
    let start = rng.below(eligible.len());
    let items: Vec<_> = (0..n_items)
        .map(|k| eligible[(start + k) % eligible.len()])
        .collect();
    let payment = order.payment_history.first()?.payment_method_id.clone();
    if !user.payment_methods.contains_key(&payment) {
        return None;
    }
    let (intro, lookup) = identify(pools, user, difficulty, rng);
    let names: Vec<String> = items
        .iter()
        .map(|i| format!("the {} ({})", i.name, options_text(&i.options)))
        .collect();
    let ask = fill(
        rng.pick(&[
            "I'd like to return {items} from order {order}, refunded to the original payment method.",
            "Please start a return for {items} in {order}; refund to how I paid.",
            "Order {order} arrived but I want to send back {items}. Refund to my original payment, I confirm.",
            "Can I return {items} from {order}? Original payment method for the refund, please.",
        ])
        .copied()
        .unwrap_or(""),
        &[("items", names.join(" and ")), ("order", order.order_id.clone())],
    );
    let item_ids: Vec<String> = items.iter().map(|i| i.item_id.clone()).collect();
    let mut turns = Vec::new();
    if !lookup.is_empty() {
        turns.push(lookup);
    }
    turns.push(vec![ToolCall::new(
        "get_order_details",
        vec![("order_id", json!(order.order_id))],
    )]);
    turns.push(vec![ToolCall::new(
        "return_delivered_order_items",
        vec![
            ("order_id", json!(order.order_id)),
            ("item_ids", json!(item_ids)),
            ("payment_method_id", json!(payment)),
        ],
    )]);
    let facts = vec![Fact {
        what: "the payment method refunded".to_owned(),
        text: payment.clone(),
    }];
    let answer = format!(
        "The return of {} from order {} is requested; the refund goes to {payment}.",
        names.join(" and "),
        order.order_id
    );
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let mut touched = BTreeSet::new();
    touched_order(&mut touched, order);
    for item in &items {
        touched.insert(format!("product:{}", item.product_id));
    }
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "return_delivered_items",
        request: format!("{greeting}{intro} {ask}").trim().to_owned(),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched,
    })
}

fn exchange_delivered_item(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let (order, user) = order_with_status(pools, rng, |o| o.status == "delivered")?;
    let item = rng.pick(&order.items)?;
    if !pools.product_in_split(&item.product_id) {
        return None;
    }
    let product = pools.db.products.get(&item.product_id)?;
    let candidates: Vec<_> = product
        .variants
        .values()
        .filter(|v| v.available && v.item_id != item.item_id)
        .collect();
    let new = *rng.pick(&candidates)?;
    let diff = new.price - item.price;
    let payment = user
        .payment_methods
        .iter()
        .find_map(|(id, method)| match method {
            PaymentMethod::GiftCard { balance, .. } if *balance >= diff.max(0.0) + 0.01 => Some(id),
            PaymentMethod::CreditCard { .. } | PaymentMethod::Paypal { .. } => Some(id),
            PaymentMethod::GiftCard { .. } => None,
        })?;
    let (intro, lookup) = identify(pools, user, difficulty, rng);
    let ask = fill(
        rng.pick(&[
            "I want to exchange the {name} ({old}) from order {order} for the one with {new}. Use {pay} for any difference.",
            "Could you swap my {name} in {order} ({old}) for {new}? Charge or refund {pay}.",
            "Order {order}: please exchange the {name} with {old} for the variant with {new}; pay with {pay}. I confirm.",
            "Exchange request: {name} ({old}) in {order} -> {new}, payment method {pay}.",
        ])
        .copied()
        .unwrap_or(""),
        &[
            ("name", item.name.clone()),
            ("old", options_text(&item.options)),
            ("new", options_text(&new.options)),
            ("order", order.order_id.clone()),
            ("pay", payment.clone()),
        ],
    );
    let mut turns = Vec::new();
    if !lookup.is_empty() {
        turns.push(lookup);
    }
    turns.push(vec![ToolCall::new(
        "get_order_details",
        vec![("order_id", json!(order.order_id))],
    )]);
    turns.push(vec![ToolCall::new(
        "get_product_details",
        vec![("product_id", json!(product.product_id))],
    )]);
    turns.push(vec![ToolCall::new(
        "exchange_delivered_order_items",
        vec![
            ("order_id", json!(order.order_id)),
            ("item_ids", json!([item.item_id])),
            ("new_item_ids", json!([new.item_id])),
            ("payment_method_id", json!(payment)),
        ],
    )]);
    let facts = vec![Fact {
        what: "the new item id".to_owned(),
        text: new.item_id.clone(),
    }];
    let answer = format!(
        "The exchange of item {} for item {} in order {} is requested; {payment} settles the difference.",
        item.item_id, new.item_id, order.order_id
    );
    let greeting = rng.pick(&GREETINGS).copied().unwrap_or("");
    let mut touched = BTreeSet::new();
    touched_order(&mut touched, order);
    touched.insert(format!("product:{}", product.product_id));
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "exchange_delivered_item",
        request: format!("{greeting}{intro} {ask}").trim().to_owned(),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched,
    })
}
