//! VitaBench's food-delivery domain rebuilt natively: its tasks (each with its own small
//! database of stores, products, orders, weather and addresses), and an [`Environment`] whose
//! tools behave as the reference toolkit's do.
//!
//! The tools, their arguments and their results follow meituan-longcat/vitabench
//! (`src/vita/domains/delivery/tools.py` and the generic tools of `environment/toolkit.py`, at
//! commit 96f3b85): searches rank stores and products with `thefuzz`'s `partial_ratio`
//! ([`fuzzy`]), records are shown in the reference's `repr` forms, a failed precondition is
//! answered with its message as the result (the reference's tools return an `AssertionError`'s
//! text), and a missing record is a tool error. The tests compare every tool's answers with
//! the reference toolkit's own on eleven tasks. Three things differ, on purpose:
//!
//! - order ids are `OT` and ten hex digits of a hash of the user and the order's number in the
//!   conversation, not of the wall clock, so a replayed conversation gets the same ids;
//! - searches show records with the same searchable text as the last of them, as the reference
//!   does, but each task's searches see only that task's stores (the reference's registries of
//!   products and addresses outlive a task within a thread);
//! - `get_date_holiday_info` needs the `holidays` package's calendar of China and is not
//!   rebuilt: a call gets a tool error saying so, and [`DeliveryEnv::unbuilt_calls`] counts such
//!   calls so a task's record says it met one.

pub mod fuzzy;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use super::pyjson::{float_repr, repr};
use super::tau2::{canonical_hash, string_param};
use super::{Environment, ErrorCode, ToolFailure, ToolOutcome, ToolSet, ToolSpec};
use crate::error::{Error, Result};

/// Insertion-ordered map, as the reference's dicts.
pub type Ordered<V> = IndexMap<String, V, std::hash::RandomState>;

/// One VitaBench task.
#[derive(Debug, Clone, Serialize)]
pub struct VitaTask {
    pub id: String,
    pub domain: String,
    /// The full hidden goal given to the user simulator (and shown to the rubric judge).
    pub instructions: String,
    /// The user's profile (id, occupation, addresses, dietary restrictions, …), as given.
    pub user_profile: Map<String, Value>,
    pub evaluation: EvaluationCriteria,
    /// The task's database, parsed.
    #[serde(skip)]
    pub db: Arc<DeliveryDb>,
}

/// What the task is graded on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EvaluationCriteria {
    #[serde(default, deserialize_with = "null_as_default")]
    pub expected_states: Vec<ExpectedState>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub overall_rubrics: Vec<String>,
}

/// One acceptable end state: the orders it must hold and its rubrics.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExpectedState {
    #[serde(default, deserialize_with = "null_as_default")]
    pub required_orders: Vec<Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub optional_orders: Vec<Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub state_rubrics: Vec<String>,
}

fn null_as_default<'de, D, T>(de: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

impl VitaTask {
    /// The rubrics the judge decides, as the reference numbers them: every expected state's
    /// rubrics, then the overall ones, each text once.
    pub fn rubrics(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let states = self
            .evaluation
            .expected_states
            .iter()
            .flat_map(|s| s.state_rubrics.iter());
        for rubric in states.chain(self.evaluation.overall_rubrics.iter()) {
            if !out.contains(rubric) {
                out.push(rubric.clone());
            }
        }
        out
    }
}

/// An address with its coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Location {
    pub address: String,
    #[serde(deserialize_with = "lenient_f64")]
    pub longitude: f64,
    #[serde(deserialize_with = "lenient_f64")]
    pub latitude: f64,
}

impl Location {
    /// The reference's `repr`: `<address> longitude:<x>,latitude:<y>`.
    pub fn show(&self) -> String {
        format!(
            "{} longitude:{},latitude:{}",
            self.address,
            float_repr(self.longitude),
            float_repr(self.latitude)
        )
    }
}

/// A city's weather on a day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weather {
    pub city: String,
    pub category: String,
    pub datetime: String,
    pub temperature: (f64, f64),
    pub humidity: f64,
}

/// A product a store sells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Product {
    pub product_id: String,
    pub name: String,
    pub store_id: String,
    pub store_name: String,
    #[serde(deserialize_with = "lenient_f64")]
    pub price: f64,
    #[serde(default)]
    pub quantity: Option<i64>,
    /// The product's options, as one comma-separated text (a list is joined, as the reference
    /// does).
    #[serde(default, deserialize_with = "joined_attributes")]
    pub attributes: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

impl Product {
    /// The reference's `repr(StoreProduct)`.
    pub fn show(&self) -> String {
        format!(
            "StoreProduct(store_name={}, store_id={}, product_name={}, product_id={}, attributes={}, quantity={}, price={}, tags={})",
            self.store_name,
            self.store_id,
            self.name,
            self.product_id,
            self.attributes,
            self.quantity.unwrap_or(0),
            float_repr(self.price),
            py_list(&self.tags)
        )
    }

    /// The product as an order line: the same fields with this quantity and these options.
    fn ordered(&self, quantity: i64, attributes: &str) -> Value {
        json!({
            "product_id": self.product_id,
            "name": self.name,
            "store_id": self.store_id,
            "store_name": self.store_name,
            "price": self.price,
            "quantity": quantity,
            "attributes": attributes,
            "tags": self.tags,
        })
    }
}

/// A store and its products.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Store {
    pub name: String,
    pub store_id: String,
    #[serde(deserialize_with = "lenient_f64")]
    pub score: f64,
    pub location: Location,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub products: Vec<Product>,
}

impl Store {
    /// The reference's `str(Store)`: the store without its products.
    pub fn summary(&self) -> String {
        format!(
            "Store(name={}, store_id={}, score={}, location={}, tags={})",
            self.name,
            self.store_id,
            float_repr(self.score),
            self.location.show(),
            py_list(&self.tags)
        )
    }

    /// The reference's `repr(Store)`: the summary, then every product.
    pub fn detail(&self) -> String {
        let products: Vec<String> = self.products.iter().map(Product::show).collect();
        format!("{}, products={}", self.summary(), products.join("\n"))
    }
}

/// An order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub order_type: String,
    pub user_id: String,
    pub store_id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub note: String,
    #[serde(default)]
    pub location: Option<Location>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub dispatch_time: String,
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub shipping_time: Option<f64>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub delivery_time: String,
    #[serde(default, deserialize_with = "lenient_f64")]
    pub total_price: f64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub create_time: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub update_time: String,
    #[serde(default = "unpaid")]
    pub status: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub products: Vec<Value>,
}

fn unpaid() -> String {
    "unpaid".to_owned()
}

/// The statuses an order can have.
pub const ORDER_STATUSES: [&str; 8] = [
    "unpaid",
    "paid",
    "unconsumed",
    "consumed",
    "processed",
    "in-progress",
    "delivered",
    "cancelled",
];

impl Order {
    fn id_label(&self) -> &'static str {
        match self.order_type.as_str() {
            "instore" => "shop_id",
            "hotel" => "hotel_id",
            "attraction" => "attraction_id",
            "flight" => "flight_id",
            "train" => "train_id",
            _ => "store_id",
        }
    }

    /// The reference's `str(Order)` (its trailing `, ` and missing parenthesis included).
    pub fn summary(&self) -> String {
        format!(
            "Order(order_id:{}, order_type:{}, user_id:{}, {}:{}, total_price:{}, create_time:{}, update_time:{}, status:{}, ",
            self.order_id,
            self.order_type,
            self.user_id,
            self.id_label(),
            self.store_id,
            float_repr(self.total_price),
            self.create_time,
            self.update_time,
            self.status
        )
    }

    /// The reference's `repr(Order)`.
    pub fn detail(&self) -> String {
        let products: Vec<String> = self.products.iter().map(show_line).collect();
        let products = format!("[{}]", products.join(", "));
        if self.order_type == "delivery" {
            format!(
                "Order(order_id:{}, order_type:{}, user_id:{}, {}:{}, dispatch_time:{}, shipping_time:{}, delivery_time:{}, total_price:{}, create_time:{}, update_time:{}, note:{}, status:{}, products:{products})",
                self.order_id,
                self.order_type,
                self.user_id,
                self.id_label(),
                self.store_id,
                self.dispatch_time,
                self.shipping_time.map_or("None".to_owned(), float_repr),
                self.delivery_time,
                float_repr(self.total_price),
                self.create_time,
                self.update_time,
                self.note,
                self.status
            )
        } else {
            format!(
                "Order(order_id:{}, order_type:{}, user_id:{}, {}:{}, total_price:{}, create_time:{}, update_time:{}, status:{}, products:{products})",
                self.order_id,
                self.order_type,
                self.user_id,
                self.id_label(),
                self.store_id,
                float_repr(self.total_price),
                self.create_time,
                self.update_time,
                self.status
            )
        }
    }
}

/// An order line as the reference shows it: a product it built as `StoreProduct(...)`, one it
/// loaded as the dict it was.
fn show_line(line: &Value) -> String {
    match serde_json::from_value::<Product>(line.clone()) {
        Ok(product) if line.get("store_name").is_some() => product.show(),
        _ => repr(line),
    }
}

/// A Python list of strings: `['a', 'b']`.
fn py_list(items: &[String]) -> String {
    repr(&Value::from(items.to_vec()))
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn lenient_f64<'de, D: Deserializer<'de>>(de: D) -> std::result::Result<f64, D::Error> {
    let value = Value::deserialize(de)?;
    match &value {
        Value::Null => Ok(0.0),
        other => number(other).ok_or_else(|| {
            serde::de::Error::custom(format!("expected a number, got {}", repr(other)))
        }),
    }
}

fn lenient_opt_f64<'de, D: Deserializer<'de>>(de: D) -> std::result::Result<Option<f64>, D::Error> {
    let value = Value::deserialize(de)?;
    Ok(number(&value))
}

fn joined_attributes<'de, D: Deserializer<'de>>(de: D) -> std::result::Result<String, D::Error> {
    Ok(match Value::deserialize(de)? {
        Value::String(s) => s,
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// A task's database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryDb {
    /// The conversation's "now", `yyyy-mm-dd HH:MM:SS`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub time: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub user_id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub orders: Ordered<Order>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub weather: Vec<Weather>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub location: Vec<Location>,
    #[serde(default)]
    pub user_historical_behaviors: Value,
    #[serde(default, deserialize_with = "null_as_default")]
    pub stores: Ordered<Store>,
}

impl Default for DeliveryDb {
    fn default() -> Self {
        DeliveryDb {
            time: String::new(),
            user_id: String::new(),
            orders: Ordered::default(),
            weather: Vec::new(),
            location: Vec::new(),
            user_historical_behaviors: Value::Null,
            stores: Ordered::default(),
        }
    }
}

impl DeliveryDb {
    /// The product with this id in any store.
    pub fn product(&self, product_id: &str) -> Option<&Product> {
        self.stores
            .values()
            .flat_map(|s| s.products.iter())
            .find(|p| p.product_id == product_id)
    }

    /// Every known address with its coordinates, as the reference's registry holds them: in
    /// order of first registration (the address list, then the orders', then the stores'), each
    /// address once, with the coordinates registered last.
    fn addresses(&self) -> Vec<&Location> {
        let mut out: Vec<&Location> = Vec::new();
        let all = self
            .location
            .iter()
            .chain(self.orders.values().filter_map(|o| o.location.as_ref()))
            .chain(self.stores.values().map(|s| &s.location));
        for location in all {
            match out.iter_mut().find(|l| l.address == location.address) {
                Some(slot) => *slot = location,
                None => out.push(location),
            }
        }
        out
    }
}

#[derive(Deserialize)]
struct RawTask {
    id: Value,
    #[serde(default)]
    domain: String,
    #[serde(default)]
    environment: Value,
    #[serde(default)]
    user_scenario: Value,
    #[serde(default)]
    instructions: String,
    #[serde(default)]
    evaluation_criteria: Value,
}

/// The task file of a domain folder: `tasks_en.json` (or `tasks.json`).
pub fn task_file(dir: &Path) -> PathBuf {
    let english = dir.join("tasks_en.json");
    if english.is_file() || !dir.join("tasks.json").is_file() {
        english
    } else {
        dir.join("tasks.json")
    }
}

/// Reads a VitaBench task file (a JSON array of tasks); an error names the file, the task and
/// the field.
pub fn load_tasks(path: &Path) -> Result<Vec<VitaTask>> {
    let data_error = |message: String| Error::VitaData {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let raw: Vec<Value> = serde_json::from_str(&text)
        .map_err(|e| data_error(format!("not a JSON array of tasks: {e}")))?;
    let mut tasks = Vec::with_capacity(raw.len());
    for (idx, value) in raw.into_iter().enumerate() {
        let raw: RawTask =
            serde_json::from_value(value).map_err(|e| data_error(format!("task {idx}: {e}")))?;
        let id = match &raw.id {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => {
                return Err(data_error(format!(
                    "task {idx}: `id` is missing or not text"
                )));
            }
        };
        let db: DeliveryDb = serde_json::from_value(raw.environment)
            .map_err(|e| data_error(format!("task {id}: environment: {e}")))?;
        if db.time.is_empty() || parse_time(&db.time).is_none() {
            return Err(data_error(format!(
                "task {id}: environment.time {:?} is not `yyyy-mm-dd HH:MM:SS`",
                db.time
            )));
        }
        let user_profile = match raw.user_scenario.get("user_profile") {
            Some(Value::Object(map)) => map.clone(),
            _ => {
                return Err(data_error(format!(
                    "task {id}: user_scenario.user_profile is missing or not an object"
                )));
            }
        };
        let evaluation: EvaluationCriteria = match raw.evaluation_criteria {
            Value::Null => EvaluationCriteria::default(),
            value => serde_json::from_value(value)
                .map_err(|e| data_error(format!("task {id}: evaluation_criteria: {e}")))?,
        };
        tasks.push(VitaTask {
            id,
            domain: raw.domain,
            instructions: raw.instructions,
            user_profile,
            evaluation,
            db: Arc::new(db),
        });
    }
    Ok(tasks)
}

/// Seconds since 1970-01-01 of `yyyy-mm-dd HH:MM:SS` (Python's `strptime` with that format:
/// one- or two-digit fields after the year), or `None` when it is not one.
pub fn parse_time(text: &str) -> Option<i64> {
    let (date, time) = text.split_once(' ')?;
    let days = parse_date(date)?;
    let parts: Vec<&str> = time.split(':').collect();
    let [h, m, s] = parts.as_slice() else {
        return None;
    };
    let field = |t: &str, max: i64| -> Option<i64> {
        if t.is_empty() || t.len() > 2 || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let v: i64 = t.parse().ok()?;
        (v <= max).then_some(v)
    };
    Some(days * 86_400 + field(h, 23)? * 3600 + field(m, 59)? * 60 + field(s, 61)?)
}

/// Days since 1970-01-01 of `yyyy-mm-dd`, or `None`.
pub fn parse_date(text: &str) -> Option<i64> {
    let parts: Vec<&str> = text.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return None;
    };
    let digits = |t: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit())
    };
    if !digits(y, 4..=4) || !digits(m, 1..=2) || !digits(d, 1..=2) {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] {
        return None;
    }
    Some(super::functions::days_from_civil(y, m, d))
}

/// `yyyy-mm-dd HH:MM:SS` of seconds since 1970-01-01.
pub fn format_time(secs: i64) -> String {
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = super::functions::civil_from_days(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Great-circle distance in metres, rounded to whole metres (the reference's haversine with
/// an earth radius of 6,371 km).
pub fn distance_m(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    if lon1 == lon2 && lat1 == lat2 {
        return 0.0;
    }
    let (lon1, lat1, lon2, lat2) = (
        lon1.to_radians(),
        lat1.to_radians(),
        lon2.to_radians(),
        lat2.to_radians(),
    );
    let a = ((lat2 - lat1) / 2.0).sin().powi(2)
        + lat1.cos() * lat2.cos() * ((lon2 - lon1) / 2.0).sin().powi(2);
    (6_371_000.0 * 2.0 * a.sqrt().asin()).round_ties_even()
}

/// Delivery minutes for a distance in metres: `round(25 + int(distance) · 0.00651)`.
pub fn delivery_minutes(distance: f64) -> f64 {
    (25.0 + distance.trunc() * 0.006510).round_ties_even()
}

/// The dates of named holidays, by year (the reference's English table).
const HOLIDAYS: &[(&str, &[(&str, &str)])] = &[
    (
        "2025",
        &[
            ("New Year's Day", "2025-01-01"),
            ("Start of Autumn", "2025-08-07"),
            ("Women's Day", "2025-03-08"),
            ("Laba Festival", "2025-01-07"),
            ("Dragon Head Festival", "2025-03-01"),
            ("Party Founding Day", "2025-07-01"),
            ("Qingming Festival", "2025-04-04"),
            ("Double Ninth Festival", "2025-10-29"),
            ("Dragon Boat Festival", "2025-05-31"),
            ("Mother's Day", "2025-05-11"),
            ("Lantern Festival", "2025-02-15"),
            ("Labor Day", "2025-05-01"),
            ("Qixi Festival", "2025-08-29"),
            ("Winter Solstice", "2025-12-21"),
            ("Christmas Day", "2025-12-25"),
            ("National Day", "2025-10-01"),
            ("Mid-Autumn Festival", "2025-10-06"),
        ],
    ),
    (
        "2024",
        &[
            ("Double Ninth Festival", "2024-10-11"),
            ("Qixi Festival", "2024-08-10"),
            ("Valentine's Day", "2024-02-14"),
            ("Qingming Festival", "2024-04-04"),
            ("Dragon Boat Festival", "2024-06-10"),
            ("Lantern Festival", "2024-02-24"),
            ("Mid-Autumn Festival", "2024-09-17"),
        ],
    ),
    (
        "2023",
        &[
            ("National Day", "2023-10-01"),
            ("Dragon Boat Festival", "2023-06-22"),
            ("Mid-Autumn Festival", "2023-09-29"),
            ("Qingming Festival", "2023-04-05"),
            ("Double Ninth Festival", "2023-10-23"),
            ("Father's Day", "2023-06-18"),
        ],
    ),
];

/// Tools this rebuild does not run, with why.
pub const NOT_REBUILT: &[(&str, &str)] = &[(
    "get_date_holiday_info",
    "get_date_holiday_info is not rebuilt natively: it needs the `holidays` package's calendar of China",
)];

fn num(description: &str) -> Value {
    json!({"type": "number", "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn spec(name: &str, description: &str, params: &[(&str, Value, bool)], mutates: bool) -> ToolSpec {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (key, schema, is_required) in params {
        properties.insert((*key).to_owned(), schema.clone());
        if *is_required {
            required.push(Value::from(*key));
        }
    }
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: json!({"type": "object", "properties": properties, "required": required}),
        mutates_state: mutates,
    }
}

/// The delivery domain's tools, in the reference's order (its own, then the generic ones).
fn delivery_tool_specs() -> Vec<ToolSpec> {
    vec![
        spec(
            "delivery_distance_to_time",
            "Delivery time in minutes for a distance in metres from the store to the address.",
            &[("distance", num("Distance in metres."), true)],
            false,
        ),
        spec(
            "get_delivery_store_info",
            "A store's details: id, score, address, coordinates, tags and every product.",
            &[("store_id", string_param("The store's id."), true)],
            false,
        ),
        spec(
            "get_delivery_product_info",
            "A product's details: name, id, store, price, options and tags.",
            &[("product_id", string_param("The product's id."), true)],
            false,
        ),
        spec(
            "delivery_store_search_recommand",
            "Search delivery stores by keywords taken from what the user wants; returns the stores, best match first.",
            &[("keywords", strings("Keywords describing the store."), true)],
            false,
        ),
        spec(
            "delivery_product_search_recommand",
            "Search delivery products by keywords taken from what the user wants; returns the products, best match first.",
            &[(
                "keywords",
                strings("Keywords describing the product."),
                true,
            )],
            false,
        ),
        spec(
            "create_delivery_order",
            "Create a delivery order (status unpaid) for the user from one store's products.",
            &[
                ("user_id", string_param("The user's id."), true),
                ("store_id", string_param("The store's id."), true),
                ("product_ids", strings("Ids of the products ordered."), true),
                (
                    "product_cnts",
                    json!({"type": "array", "items": {"type": "integer"}, "description": "How many of each product, in the order of product_ids."}),
                    true,
                ),
                ("address", string_param("The delivery address."), true),
                (
                    "dispatch_time",
                    string_param(
                        "When the store dispatches the order, yyyy-mm-dd HH:MM:SS, not in the past.",
                    ),
                    true,
                ),
                (
                    "attributes",
                    strings("The chosen options of each product, in the order of product_ids."),
                    false,
                ),
                ("note", string_param("A note for the store."), false),
            ],
            true,
        ),
        spec(
            "pay_delivery_order",
            "Pay an unpaid delivery order.",
            &[("order_id", string_param("The order's id."), true)],
            true,
        ),
        spec(
            "get_delivery_order_status",
            "A delivery order's status.",
            &[("order_id", string_param("The order's id."), true)],
            false,
        ),
        spec(
            "cancel_delivery_order",
            "Cancel a delivery order.",
            &[("order_id", string_param("The order's id."), true)],
            true,
        ),
        spec(
            "modify_delivery_order",
            "Replace a delivery order's note.",
            &[
                ("order_id", string_param("The order's id."), true),
                ("note", string_param("The new note."), true),
            ],
            true,
        ),
        spec(
            "search_delivery_orders",
            "The user's delivery orders with a status (unpaid unless given).",
            &[
                ("user_id", string_param("The user's id."), true),
                (
                    "status",
                    json!({"type": "string", "enum": ORDER_STATUSES, "description": "The status to list."}),
                    false,
                ),
            ],
            false,
        ),
        spec(
            "get_delivery_order_detail",
            "A delivery order's full details.",
            &[("order_id", string_param("The order's id."), true)],
            false,
        ),
        spec(
            "longitude_latitude_to_distance",
            "Distance in metres between two points given by longitude and latitude.",
            &[
                ("longitude1", num("Longitude of the first point."), true),
                ("latitude1", num("Latitude of the first point."), true),
                ("longitude2", num("Longitude of the second point."), true),
                ("latitude2", num("Latitude of the second point."), true),
            ],
            false,
        ),
        spec(
            "weather",
            "The weather at an address between two dates.",
            &[
                ("address", string_param("An address or city."), true),
                ("date_start", string_param("First day, yyyy-mm-dd."), true),
                ("date_end", string_param("Last day, yyyy-mm-dd."), true),
            ],
            false,
        ),
        spec(
            "address_to_longitude_latitude",
            "The longitude and latitude of an address.",
            &[("address", string_param("The address."), true)],
            false,
        ),
        spec(
            "get_date_holiday_info",
            "Which holiday a date is, if any.",
            &[("date", string_param("The date, yyyy-mm-dd."), true)],
            false,
        ),
        spec(
            "get_holiday_date",
            "The date of a named holiday in a year.",
            &[
                ("year", string_param("The year, e.g. 2025."), true),
                ("holiday_name", string_param("The holiday's name."), true),
            ],
            false,
        ),
        spec(
            "get_user_historical_behaviors",
            "The user's profile and ordering habits.",
            &[],
            false,
        ),
        spec(
            "get_user_all_orders",
            "Every order of the user.",
            &[],
            false,
        ),
        spec(
            "get_nearby",
            "Stores within a range in metres of a point.",
            &[
                ("longitude", num("Longitude of the point.")),
                ("latitude", num("Latitude of the point.")),
                ("range", num("The range in metres.")),
            ]
            .map(|(k, v)| (k, v, true)),
            false,
        ),
    ]
}

static DELIVERY_TOOLS: LazyLock<ToolSet> = LazyLock::new(|| {
    ToolSet::new(delivery_tool_specs()).expect("the delivery tool table's schemas compile")
});

/// The delivery domain's tools, with their schemas (built once).
pub fn delivery_tools() -> &'static [ToolSpec] {
    DELIVERY_TOOLS.specs()
}

/// The delivery domain's environment for one task.
#[derive(Debug, Clone)]
pub struct DeliveryEnv {
    task_id: String,
    initial: Arc<DeliveryDb>,
    db: DeliveryDb,
    created: usize,
    unbuilt_calls: usize,
    seed: u64,
}

/// How a tool call ended: its text as the reference shows it (a failed precondition's message
/// included: the reference's tools return an `AssertionError`'s text as their result), or an
/// error.
enum Answer {
    Text(String),
    Error(String),
}

impl DeliveryEnv {
    /// The environment of `task`, in its initial state.
    pub fn new(task: &VitaTask) -> Self {
        DeliveryEnv {
            task_id: task.id.clone(),
            initial: Arc::clone(&task.db),
            db: (*task.db).clone(),
            created: 0,
            unbuilt_calls: 0,
            seed: 0,
        }
    }

    /// The task's database as it stands.
    pub fn db(&self) -> &DeliveryDb {
        &self.db
    }

    /// Calls to tools this rebuild does not run ([`NOT_REBUILT`]).
    pub fn unbuilt_calls(&self) -> usize {
        self.unbuilt_calls
    }

    fn order(&self, order_id: &str) -> std::result::Result<&Order, String> {
        let order = self
            .db
            .orders
            .get(order_id)
            .ok_or_else(|| format!("Order {order_id} not found"))?;
        if order.order_type != "delivery" {
            return Err(format!("Order {order_id} is not a delivery order"));
        }
        Ok(order)
    }

    fn order_mut(&mut self, order_id: &str) -> std::result::Result<&mut Order, String> {
        self.order(order_id)?;
        Ok(self.db.orders.get_mut(order_id).expect("checked above"))
    }

    fn coordinates(&self, address: &str) -> std::result::Result<(f64, f64), String> {
        let addresses = self.db.addresses();
        let ranked = fuzzy::rank(address, addresses.iter().map(|l| l.address.as_str()));
        let not_found = || format!("Longitude and latitude not found for address {address}");
        let Some(&(idx, score)) = ranked.first() else {
            return Err(not_found());
        };
        let best = addresses[idx];
        if score < 30 || fuzzy::ratio(address, &best.address) < 20 {
            return Err(not_found());
        }
        Ok((best.longitude, best.latitude))
    }

    fn create_order(&mut self, args: &Map<String, Value>) -> Answer {
        let text = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let list = |key: &str| -> Vec<Value> {
            args.get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (user_id, store_id, address, dispatch) = (
            text("user_id"),
            text("store_id"),
            text("address"),
            text("dispatch_time"),
        );
        let product_ids: Vec<String> = list("product_ids")
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_owned())
            .collect();
        let counts: Vec<i64> = list("product_cnts")
            .iter()
            .map(|v| v.as_i64().unwrap_or(0))
            .collect();
        if user_id.is_empty() {
            return Answer::Text("User ID cannot be empty".into());
        }
        if user_id != self.db.user_id {
            return Answer::Text("User ID does not match".into());
        }
        let Some(store) = self.db.stores.get(&store_id).cloned() else {
            return Answer::Text(format!("Store {store_id} not found"));
        };
        let mut products = Vec::new();
        for id in &product_ids {
            match self.db.product(id) {
                Some(product) => products.push(product.clone()),
                None => return Answer::Error(format!("{id} not found")),
            }
        }
        if address.is_empty() {
            return Answer::Text(format!("Location {address} is empty"));
        }
        if product_ids.len() != counts.len() || counts.iter().any(|c| *c <= 0) {
            return Answer::Text(format!(
                "product_cnts {} list is invalid",
                repr(&Value::from(counts.clone()))
            ));
        }
        let Some(dispatch_secs) = parse_time(&dispatch).filter(|_| !dispatch.is_empty()) else {
            return Answer::Text(format!(
                "dispatch_time {dispatch} time format is invalid, yyyy-mm-dd HH:MM:SS required"
            ));
        };
        if parse_time(&self.db.time).is_some_and(|now| dispatch_secs < now) {
            return Answer::Text(format!("dispatch_time {dispatch} must be in the future"));
        }
        let (longitude, latitude) = match self.coordinates(&address) {
            Ok(point) => point,
            Err(why) => return Answer::Error(why),
        };
        let distance = distance_m(
            longitude,
            latitude,
            store.location.longitude,
            store.location.latitude,
        );
        let minutes = delivery_minutes(distance);
        let delivery_time = format_time(dispatch_secs + (minutes * 60.0) as i64);
        let total: f64 = products
            .iter()
            .zip(&counts)
            .map(|(p, c)| p.price * *c as f64)
            .sum();
        let attributes: Vec<String> = list("attributes")
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_owned())
            .collect();
        let lines: Vec<Value> = products
            .iter()
            .zip(&counts)
            .enumerate()
            .map(|(i, (p, c))| p.ordered(*c, attributes.get(i).map_or("", String::as_str)))
            .collect();
        self.created += 1;
        let order = Order {
            order_id: order_id(&user_id, self.created),
            order_type: "delivery".into(),
            user_id,
            store_id,
            note: text("note"),
            location: Some(Location {
                address,
                longitude,
                latitude,
            }),
            dispatch_time: dispatch,
            shipping_time: Some(minutes),
            delivery_time,
            total_price: total,
            create_time: self.db.time.clone(),
            update_time: self.db.time.clone(),
            status: "unpaid".into(),
            products: lines,
        };
        if self.db.orders.contains_key(&order.order_id) {
            return Answer::Text("Order already exists".into());
        }
        let shown = order.detail();
        self.db.orders.insert(order.order_id.clone(), order);
        Answer::Text(shown)
    }

    fn run(&mut self, name: &str, args: &Map<String, Value>) -> Answer {
        let text = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let float = |key: &str| args.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        let keywords = || -> String {
            args.get("keywords")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect::<String>())
                .unwrap_or_default()
        };
        match name {
            "delivery_distance_to_time" => {
                Answer::Text(shown_float(delivery_minutes(float("distance"))))
            }
            "get_delivery_store_info" => match self.db.stores.get(&text("store_id")) {
                Some(store) => Answer::Text(store.detail()),
                None => Answer::Error(format!("Store {} not found", text("store_id"))),
            },
            "get_delivery_product_info" => match self.db.product(&text("product_id")) {
                Some(product) => Answer::Text(product.show()),
                None => Answer::Error(format!("{} not found", text("product_id"))),
            },
            "delivery_store_search_recommand" => {
                let stores: Vec<&Store> = self.db.stores.values().collect();
                let docs: Vec<String> = stores
                    .iter()
                    .map(|s| format!("{}{}", s.name, s.tags.join(",")))
                    .collect();
                let ranked = fuzzy::rank(&keywords(), docs.iter().map(String::as_str));
                let shown: Vec<String> = ranked
                    .iter()
                    .take(100)
                    .map(|(i, _)| stores[last_alike(&docs, *i)].summary())
                    .collect();
                Answer::Text(shown.join("\n"))
            }
            "delivery_product_search_recommand" => {
                let products: Vec<&Product> = self
                    .db
                    .stores
                    .values()
                    .flat_map(|s| s.products.iter())
                    .collect();
                let docs: Vec<String> = products
                    .iter()
                    .map(|p| format!("{} {} {}", p.store_name, p.name, py_list(&p.tags)))
                    .collect();
                let ranked = fuzzy::rank(&keywords(), docs.iter().map(String::as_str));
                let shown: Vec<String> = ranked
                    .iter()
                    .take(100)
                    .map(|(i, _)| products[last_alike(&docs, *i)].show())
                    .collect();
                Answer::Text(shown.join("\n"))
            }
            "create_delivery_order" => self.create_order(args),
            "pay_delivery_order" => match self.order_mut(&text("order_id")) {
                Err(why) => Answer::Error(why),
                Ok(order) if order.status == "unpaid" => {
                    order.status = "paid".into();
                    Answer::Text("Payment successful".into())
                }
                Ok(_) => Answer::Text("Order is not in `unpaid` status.".into()),
            },
            "get_delivery_order_status" => match self.order(&text("order_id")) {
                Ok(order) => Answer::Text(order.status.clone()),
                Err(why) => Answer::Error(why),
            },
            "cancel_delivery_order" => match self.order_mut(&text("order_id")) {
                Err(why) => Answer::Error(why),
                Ok(order) if order.status == "cancelled" => {
                    Answer::Text(format!("Order {} is already cancelled", order.order_id))
                }
                Ok(order) => {
                    order.status = "cancelled".into();
                    Answer::Text(format!("Order {} has been cancelled.", order.order_id))
                }
            },
            "modify_delivery_order" => match self.order_mut(&text("order_id")) {
                Err(why) => Answer::Error(why),
                Ok(order) => {
                    order.note = text("note");
                    Answer::Text(format!("Order {} has been modified.", order.order_id))
                }
            },
            "search_delivery_orders" => {
                let user = text("user_id");
                if user.is_empty() {
                    return Answer::Text("User ID cannot be empty".into());
                }
                if user != self.db.user_id {
                    return Answer::Text("User ID does not match".into());
                }
                let status = args
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("unpaid");
                let found: Vec<String> = self
                    .db
                    .orders
                    .values()
                    .filter(|o| {
                        o.order_type == "delivery" && o.status == status && o.user_id == user
                    })
                    .map(Order::summary)
                    .collect();
                if found.is_empty() {
                    Answer::Text("No delivery orders available".into())
                } else {
                    Answer::Text(found.join("\n"))
                }
            }
            "get_delivery_order_detail" => {
                let id = text("order_id");
                if id.is_empty() {
                    return Answer::Text("Order ID cannot be empty".into());
                }
                match self.order(&id) {
                    Ok(order) => Answer::Text(order.detail()),
                    Err(why) => Answer::Error(why),
                }
            }
            "longitude_latitude_to_distance" => Answer::Text(shown_float(distance_m(
                float("longitude1"),
                float("latitude1"),
                float("longitude2"),
                float("latitude2"),
            ))),
            "weather" => self.weather(&text("address"), &text("date_start"), &text("date_end")),
            "address_to_longitude_latitude" => match self.coordinates(&text("address")) {
                Ok((lon, lat)) => {
                    Answer::Text(format!("[{}, {}]", shown_float(lon), shown_float(lat)))
                }
                Err(why) => Answer::Error(why),
            },
            "get_holiday_date" => {
                let (year, wanted) = (text("year"), text("holiday_name"));
                let Some((_, days)) = HOLIDAYS.iter().find(|(y, _)| *y == year) else {
                    return Answer::Text(format!("Holiday data for year {year} not found"));
                };
                // The reference ranks the names by `partial_ratio` on the raw text and takes
                // the best from 80.
                let best = days
                    .iter()
                    .map(|(name, date)| (fuzzy::partial_ratio(&wanted, name), *date))
                    .fold(None::<(u32, &str)>, |best, (score, date)| match best {
                        Some((b, _)) if b >= score => best,
                        _ => Some((score, date)),
                    });
                match best {
                    Some((score, date)) if score >= 80 => Answer::Text(date.to_owned()),
                    _ => Answer::Text(format!("Holiday named '{wanted}' not found in year {year}")),
                }
            }
            "get_user_historical_behaviors" => {
                Answer::Text(repr(&self.db.user_historical_behaviors))
            }
            "get_user_all_orders" => {
                let shown: Vec<String> = self.db.orders.values().map(Order::detail).collect();
                Answer::Text(shown.join("\n"))
            }
            "get_nearby" => {
                let (lon, lat, range) = (float("longitude"), float("latitude"), float("range"));
                let found: Vec<String> = self
                    .db
                    .stores
                    .values()
                    .filter(|s| {
                        distance_m(lon, lat, s.location.longitude, s.location.latitude) <= range
                    })
                    .map(Store::summary)
                    .collect();
                if found.is_empty() {
                    Answer::Text("No search results found".into())
                } else {
                    Answer::Text(found.join("\n"))
                }
            }
            other => match NOT_REBUILT.iter().find(|(n, _)| *n == other) {
                Some((_, why)) => {
                    self.unbuilt_calls += 1;
                    Answer::Error((*why).to_owned())
                }
                None => Answer::Error(format!("Tool '{other}' not found.")),
            },
        }
    }

    fn weather(&self, address: &str, start: &str, end: &str) -> Answer {
        let (Some(first), Some(last)) = (parse_date(start), parse_date(end)) else {
            let bad = if parse_date(start).is_none() {
                format!("Invalid date_start format. Expected yyyy-mm-dd, got: {start}")
            } else {
                format!("Invalid date_end format. Expected yyyy-mm-dd, got: {end}")
            };
            return Answer::Text(bad);
        };
        let cities: Vec<&str> = self.db.weather.iter().map(|w| w.city.as_str()).collect();
        let mut unique: Vec<&str> = Vec::new();
        for city in cities {
            if !unique.contains(&city) {
                unique.push(city);
            }
        }
        let ranked = fuzzy::rank(address, unique.iter().copied());
        let Some(&(idx, score)) = ranked.first().filter(|(_, s)| *s >= 50) else {
            return Answer::Error(format!("Weather information not found for {address}"));
        };
        let _ = score;
        let city = unique[idx];
        let mut days: Vec<&Weather> = self
            .db
            .weather
            .iter()
            .filter(|w| {
                w.city == city
                    && parse_date(&w.datetime).is_some_and(|d| (first..=last).contains(&d))
            })
            .collect();
        if days.is_empty() {
            return Answer::Text(format!(
                "No weather information found for {city} between {start} and {end}"
            ));
        }
        days.sort_by(|a, b| a.datetime.cmp(&b.datetime));
        let mut out = String::new();
        for (i, w) in days.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let _ = write!(
                out,
                "city: {}, weather: {}, datetime: {}, temperature: {}~{}, humidity: {}",
                w.city,
                w.category,
                w.datetime,
                float_repr(w.temperature.0),
                float_repr(w.temperature.1),
                float_repr(w.humidity)
            );
        }
        Answer::Text(out)
    }
}

/// The last index whose text equals `docs[idx]`: the reference maps a ranked text back to its
/// record through a text-to-id dict, so records with the same searchable text all show as the
/// last of them (a quirk kept so that searches answer as the reference's do).
fn last_alike(docs: &[String], idx: usize) -> usize {
    docs.iter().rposition(|d| *d == docs[idx]).unwrap_or(idx)
}

/// A number result as the reference shows it: `json.dumps(str(x))`, e.g. `"1115.0"`.
fn shown_float(x: f64) -> String {
    format!("\"{}\"", float_repr(x))
}

/// `OT` and ten hex digits of a hash of the user and the order's number.
fn order_id(user_id: &str, n: usize) -> String {
    let hash = canonical_hash(&format!("#DELIVERY#{user_id}#{n}"));
    format!("OT{}", &hash[..10])
}

impl Environment for DeliveryEnv {
    fn name(&self) -> &str {
        "vita/delivery"
    }

    fn tools(&self) -> &[ToolSpec] {
        DELIVERY_TOOLS.specs()
    }

    fn reset(&mut self, seed: u64) {
        self.db = (*self.initial).clone();
        self.created = 0;
        self.unbuilt_calls = 0;
        self.seed = seed;
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        let args = match DELIVERY_TOOLS.check(name, arguments) {
            Ok(args) => args.clone(),
            Err(failure) => return ToolOutcome::Failure(failure),
        };
        match self.run(name, &args) {
            Answer::Text(text) => ToolOutcome::Success(Value::String(text)),
            Answer::Error(message) => {
                ToolOutcome::Failure(ToolFailure::new(ErrorCode::ToolError, message))
            }
        }
    }

    fn state_hash(&self) -> String {
        canonical_hash(&json!({"task": self.task_id, "orders": self.db.orders}))
    }

    fn box_clone(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_and_reject_bad_text() {
        let t = parse_time("2025-06-21 11:20:00").unwrap();
        assert_eq!(format_time(t), "2025-06-21 11:20:00");
        assert_eq!(format_time(t + 45 * 60), "2025-06-21 12:05:00");
        assert_eq!(
            format_time(parse_time("2024-12-31 23:59:00").unwrap() + 120),
            "2025-01-01 00:01:00"
        );
        assert_eq!(
            parse_time("2025-6-1 9:05:00"),
            parse_time("2025-06-01 09:05:00")
        );
        for bad in [
            "2025-06-21",
            "2025-02-29 10:00:00",
            "2025-06-21 24:00:00",
            "tomorrow",
            "",
        ] {
            assert!(parse_time(bad).is_none(), "{bad}");
        }
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("2000-03-01"), Some(11_017));
    }

    #[test]
    fn distance_and_delivery_minutes_follow_the_reference() {
        // Python: round(25.00 + int(1234.6) * 0.006510, 0) == 33.0
        assert_eq!(delivery_minutes(1234.6), 33.0);
        assert_eq!(delivery_minutes(0.0), 25.0);
        // One degree of latitude on a 6,371 km sphere.
        assert_eq!(distance_m(100.0, 25.0, 100.0, 26.0), 111_195.0);
        assert_eq!(distance_m(1.0, 2.0, 1.0, 2.0), 0.0);
    }
}
