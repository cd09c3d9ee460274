//! The τ²-bench airline domain: record model, tool table and every tool's effects.
//!
//! Behaviour follows sierra-research/tau2-bench `src/tau2/domains/airline/tools.py` at commit
//! a2c0247, including its fixed choices:
//! - new reservations get the first free id of `HATHAT`, `HATHAU`, `HATHAV` ("Too many
//!   reservations" after that) and `created_at` is always `2024-05-15T15:00:00`;
//! - new certificates get the first free id of `certificate_3221322` … `certificate_3221324`;
//! - a certificate used to pay a booking is removed from the user's payment methods; gift cards
//!   are debited (their amounts are floats, prices and payments ints);
//! - only booking takes seats: cancelling or changing flights neither releases nor takes any;
//! - one-stop search looks for the second leg on `2024-05-<day+1>` (no zero padding) when the
//!   first leg arrives the next day (`+1` in its arrival time).

use super::ordered_map::OrderedMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::env::{ToolSpec, pyjson};

use super::{Args, as_int, calculate, object_params, spec, string_param, to_json};

/// A person's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Name {
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
}

/// A postal address; `address2` is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Address {
    /// First line.
    pub address1: String,
    /// Second line.
    #[serde(default)]
    pub address2: Option<String>,
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
    /// A gift card.
    #[serde(rename = "gift_card")]
    GiftCard {
        /// Payment method id.
        id: String,
        /// Remaining amount.
        amount: f64,
    },
    /// A travel certificate (single use).
    #[serde(rename = "certificate")]
    Certificate {
        /// Payment method id.
        id: String,
        /// Value.
        amount: f64,
    },
}

/// A passenger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passenger {
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
    /// Date of birth, YYYY-MM-DD.
    pub dob: String,
}

/// A flight's state on one date.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status")]
pub enum FlightDateStatus {
    /// Bookable.
    #[serde(rename = "available")]
    Available {
        /// Seats left per cabin.
        available_seats: OrderedMap<i64>,
        /// Price per cabin.
        prices: OrderedMap<i64>,
    },
    /// Has landed.
    #[serde(rename = "landed")]
    Landed {
        /// Departure time.
        actual_departure_time_est: String,
        /// Arrival time.
        actual_arrival_time_est: String,
    },
    /// Cancelled.
    #[serde(rename = "cancelled")]
    Cancelled {},
    /// Delayed.
    #[serde(rename = "delayed")]
    Delayed {
        /// Expected departure.
        estimated_departure_time_est: String,
        /// Expected arrival.
        estimated_arrival_time_est: String,
    },
    /// In the air.
    #[serde(rename = "flying")]
    Flying {
        /// Departure time.
        actual_departure_time_est: String,
        /// Expected arrival.
        estimated_arrival_time_est: String,
    },
    /// On time.
    #[serde(rename = "on time")]
    OnTime {
        /// Expected departure.
        estimated_departure_time_est: String,
        /// Expected arrival.
        estimated_arrival_time_est: String,
    },
}

impl FlightDateStatus {
    /// The status word.
    pub fn status(&self) -> &'static str {
        match self {
            FlightDateStatus::Available { .. } => "available",
            FlightDateStatus::Landed { .. } => "landed",
            FlightDateStatus::Cancelled {} => "cancelled",
            FlightDateStatus::Delayed { .. } => "delayed",
            FlightDateStatus::Flying { .. } => "flying",
            FlightDateStatus::OnTime { .. } => "on time",
        }
    }
}

/// A scheduled flight and its state per date.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flight {
    /// Flight number.
    pub flight_number: String,
    /// Origin airport.
    pub origin: String,
    /// Destination airport.
    pub destination: String,
    /// Departure time, HH:MM:SS EST.
    pub scheduled_departure_time_est: String,
    /// Arrival time, HH:MM:SS EST (`+1` when the next day).
    pub scheduled_arrival_time_est: String,
    /// Date → state.
    pub dates: OrderedMap<FlightDateStatus>,
}

/// One flight of a reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationFlight {
    /// Flight number.
    pub flight_number: String,
    /// Origin airport.
    pub origin: String,
    /// Destination airport.
    pub destination: String,
    /// Date.
    pub date: String,
    /// Price per passenger.
    pub price: i64,
}

/// A payment (positive) or refund (negative) on a reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payment {
    /// Payment method id.
    pub payment_id: String,
    /// Amount in dollars.
    pub amount: i64,
}

/// A customer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// User id.
    pub user_id: String,
    /// Name.
    pub name: Name,
    /// Address.
    pub address: Address,
    /// Email.
    pub email: String,
    /// Date of birth.
    pub dob: String,
    /// Payment method id → method.
    pub payment_methods: OrderedMap<PaymentMethod>,
    /// Saved passengers.
    pub saved_passengers: Vec<Passenger>,
    /// `gold`, `silver` or `regular`.
    pub membership: String,
    /// Reservation ids.
    pub reservations: Vec<String>,
}

/// A reservation; `status` is `null` unless cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// Reservation id.
    pub reservation_id: String,
    /// Owner.
    pub user_id: String,
    /// Trip origin.
    pub origin: String,
    /// Trip destination.
    pub destination: String,
    /// `one_way` or `round_trip`.
    pub flight_type: String,
    /// Cabin class.
    pub cabin: String,
    /// Flights.
    pub flights: Vec<ReservationFlight>,
    /// Passengers.
    pub passengers: Vec<Passenger>,
    /// Payments and refunds.
    pub payment_history: Vec<Payment>,
    /// Creation time.
    pub created_at: String,
    /// Bags in total.
    pub total_baggages: i64,
    /// Paid bags.
    pub nonfree_baggages: i64,
    /// `yes` or `no`.
    pub insurance: String,
    /// `cancelled` or null.
    #[serde(default)]
    pub status: Option<String>,
}

/// The airline database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AirlineDb {
    /// Flight number → flight.
    pub flights: OrderedMap<Flight>,
    /// User id → user.
    pub users: OrderedMap<User>,
    /// Reservation id → reservation.
    pub reservations: OrderedMap<Reservation>,
}

type ToolResult = Result<Value, String>;

/// Seats or prices per cabin class.
type CabinCounts = OrderedMap<i64>;

const NEW_RESERVATION_IDS: [&str; 3] = ["HATHAT", "HATHAU", "HATHAV"];
const NEW_CERTIFICATE_IDS: [&str; 3] = [
    "certificate_3221322",
    "certificate_3221323",
    "certificate_3221324",
];
const NOW: &str = "2024-05-15T15:00:00";

/// The 20 airports `list_all_airports` returns, in the reference's order (IATA, city).
const AIRPORTS: [(&str, &str); 20] = [
    ("SFO", "San Francisco"),
    ("JFK", "New York"),
    ("LAX", "Los Angeles"),
    ("ORD", "Chicago"),
    ("DFW", "Dallas"),
    ("DEN", "Denver"),
    ("SEA", "Seattle"),
    ("ATL", "Atlanta"),
    ("MIA", "Miami"),
    ("BOS", "Boston"),
    ("PHX", "Phoenix"),
    ("IAH", "Houston"),
    ("LAS", "Las Vegas"),
    ("MCO", "Orlando"),
    ("EWR", "Newark"),
    ("CLT", "Charlotte"),
    ("MSP", "Minneapolis"),
    ("DTW", "Detroit"),
    ("PHL", "Philadelphia"),
    ("LGA", "LaGuardia"),
];

/// The airline tools, with schemas in our own words.
pub fn tool_specs() -> Vec<ToolSpec> {
    let cabin = || json!({"type": "string", "enum": ["business", "economy", "basic_economy"], "description": "Cabin class."});
    let flights = || {
        json!({"type": "array", "description": "Every flight segment, each with its number and date.", "items": {
            "type": "object",
            "properties": {
                "flight_number": {"type": "string", "description": "Flight number, e.g. 'HAT001'."},
                "date": {"type": "string", "description": "Date, YYYY-MM-DD."}
            },
            "required": ["flight_number", "date"]
        }})
    };
    let passengers = || {
        json!({"type": "array", "description": "Passengers.", "items": {
            "type": "object",
            "properties": {
                "first_name": {"type": "string"},
                "last_name": {"type": "string"},
                "dob": {"type": "string", "description": "Date of birth, YYYY-MM-DD."}
            },
            "required": ["first_name", "last_name", "dob"]
        }})
    };
    let reservation_id = || string_param("Reservation id, e.g. 'ZFA04Y'.");
    let user_id = || string_param("User id, e.g. 'sara_doe_496'.");
    let payment_id = || {
        string_param("Id of a payment method in the user's profile, e.g. 'credit_card_7815826'.")
    };
    let route = || {
        vec![
            (
                "origin",
                string_param("Origin airport, three letters, e.g. 'JFK'."),
            ),
            (
                "destination",
                string_param("Destination airport, three letters, e.g. 'LAX'."),
            ),
            ("date", string_param("Date, YYYY-MM-DD.")),
        ]
    };
    vec![
        spec(
            "book_reservation",
            "Book a reservation for a user, paying with payment methods from the user's profile.",
            object_params(vec![
                ("user_id", user_id()),
                ("origin", string_param("Trip origin airport, e.g. 'SFO'.")),
                (
                    "destination",
                    string_param("Trip destination airport, e.g. 'JFK'."),
                ),
                (
                    "flight_type",
                    json!({"type": "string", "enum": ["round_trip", "one_way"], "description": "Trip type."}),
                ),
                ("cabin", cabin()),
                ("flights", flights()),
                ("passengers", passengers()),
                (
                    "payment_methods",
                    json!({"type": "array", "description": "Payments; their amounts must add up to the total price.", "items": {
                        "type": "object",
                        "properties": {
                            "payment_id": {"type": "string", "description": "Payment method id."},
                            "amount": {"type": "integer", "description": "Amount in dollars."}
                        },
                        "required": ["payment_id", "amount"]
                    }}),
                ),
                (
                    "total_baggages",
                    json!({"type": "integer", "description": "Number of checked bags."}),
                ),
                (
                    "nonfree_baggages",
                    json!({"type": "integer", "description": "Number of bags that are paid for."}),
                ),
                (
                    "insurance",
                    json!({"type": "string", "enum": ["yes", "no"], "description": "Whether to add travel insurance."}),
                ),
            ]),
            true,
        ),
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
            "cancel_reservation",
            "Cancel a whole reservation and refund its payments.",
            object_params(vec![("reservation_id", reservation_id())]),
            true,
        ),
        spec(
            "get_reservation_details",
            "Return a reservation's details.",
            object_params(vec![("reservation_id", reservation_id())]),
            false,
        ),
        spec(
            "get_user_details",
            "Return a user's details, including payment methods and reservation ids.",
            object_params(vec![("user_id", user_id())]),
            false,
        ),
        spec(
            "list_all_airports",
            "List every airport served, with its IATA code and city.",
            object_params(vec![]),
            false,
        ),
        spec(
            "search_direct_flight",
            "Find bookable direct flights between two airports on a date.",
            object_params(route()),
            false,
        ),
        spec(
            "search_onestop_flight",
            "Find bookable pairs of flights with one connection between two airports on a date.",
            object_params(route()),
            false,
        ),
        spec(
            "send_certificate",
            "Give a user a travel certificate of some amount. Use with care.",
            object_params(vec![
                ("user_id", user_id()),
                (
                    "amount",
                    json!({"type": "integer", "description": "Certificate value in dollars."}),
                ),
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
        spec(
            "update_reservation_baggages",
            "Change the number of bags of a reservation, paying for extra paid bags.",
            object_params(vec![
                ("reservation_id", reservation_id()),
                (
                    "total_baggages",
                    json!({"type": "integer", "description": "New number of checked bags."}),
                ),
                (
                    "nonfree_baggages",
                    json!({"type": "integer", "description": "New number of paid bags."}),
                ),
                ("payment_id", payment_id()),
            ]),
            true,
        ),
        spec(
            "update_reservation_flights",
            "Replace the flights (and possibly cabin) of a reservation; list every segment of the new itinerary, changed or not. The price difference is charged or refunded.",
            object_params(vec![
                ("reservation_id", reservation_id()),
                ("cabin", cabin()),
                ("flights", flights()),
                ("payment_id", payment_id()),
            ]),
            true,
        ),
        spec(
            "update_reservation_passengers",
            "Replace the passenger details of a reservation; the number of passengers cannot change.",
            object_params(vec![
                ("reservation_id", reservation_id()),
                ("passengers", passengers()),
            ]),
            true,
        ),
        spec(
            "get_flight_status",
            "Return the status of a flight on a date.",
            object_params(vec![
                (
                    "flight_number",
                    string_param("Flight number, e.g. 'HAT001'."),
                ),
                ("date", string_param("Date, YYYY-MM-DD.")),
            ]),
            false,
        ),
    ]
}

/// Runs an airline tool on validated arguments; `Err` is the reference's error message.
pub(crate) fn call(db: &mut AirlineDb, name: &str, args: &Args<'_>) -> ToolResult {
    match name {
        "book_reservation" => book_reservation(db, args),
        "calculate" => calculate(args),
        "cancel_reservation" => {
            let reservation = reservation_mut(db, args.str("reservation_id")?)?;
            let refunds: Vec<Payment> = reservation
                .payment_history
                .iter()
                .map(|payment| Payment {
                    payment_id: payment.payment_id.clone(),
                    amount: -payment.amount,
                })
                .collect();
            reservation.payment_history.extend(refunds);
            reservation.status = Some("cancelled".to_owned());
            to_json(reservation)
        }
        "get_reservation_details" => to_json(reservation(db, args.str("reservation_id")?)?),
        "get_user_details" => to_json(user(db, args.str("user_id")?)?),
        "list_all_airports" => Ok(Value::Array(
            AIRPORTS
                .iter()
                .map(|(iata, city)| json!({"iata": iata, "city": city}))
                .collect(),
        )),
        "search_direct_flight" => {
            let date = args.str("date")?;
            let found = search_direct(
                db,
                date,
                Some(args.str("origin")?),
                Some(args.str("destination")?),
                None,
            );
            Ok(Value::Array(
                found
                    .into_iter()
                    .map(|f| direct_flight_json(f, None))
                    .collect(),
            ))
        }
        "search_onestop_flight" => search_onestop_flight(db, args),
        "send_certificate" => {
            let user_id = args.str("user_id")?;
            let raw_amount = args.raw("amount")?;
            let amount = raw_amount
                .as_f64()
                .ok_or_else(|| "amount must be a number".to_owned())?;
            let user = user_mut(db, user_id)?;
            let free = NEW_CERTIFICATE_IDS
                .iter()
                .find(|id| !user.payment_methods.contains_key(**id))
                .ok_or_else(|| "Too many certificates".to_owned())?;
            user.payment_methods.insert(
                (*free).to_owned(),
                PaymentMethod::Certificate {
                    id: (*free).to_owned(),
                    amount,
                },
            );
            let shown = match raw_amount {
                Value::Number(number) => pyjson::number_str(number),
                other => other.to_string(),
            };
            Ok(Value::String(format!(
                "Certificate {free} added to user {user_id} with amount {shown}."
            )))
        }
        "transfer_to_human_agents" => Ok(Value::String("Transfer successful".to_owned())),
        "update_reservation_baggages" => {
            let reservation_id = args.str("reservation_id")?;
            let total_baggages = args.int("total_baggages")?;
            let nonfree_baggages = args.int("nonfree_baggages")?;
            let payment_id = args.str("payment_id")?;
            let current = reservation(db, reservation_id)?;
            let user_id = current.user_id.clone();
            user(db, &user_id)?;
            let total_price = 50 * (nonfree_baggages - current.nonfree_baggages).max(0);
            let payment = payment_for_update(db, &user_id, payment_id, total_price)?;
            let reservation = reservation_mut(db, reservation_id)?;
            reservation.payment_history.extend(payment);
            reservation.total_baggages = total_baggages;
            reservation.nonfree_baggages = nonfree_baggages;
            to_json(reservation)
        }
        "update_reservation_flights" => update_reservation_flights(db, args),
        "update_reservation_passengers" => {
            let passengers = passengers_arg(args)?;
            let reservation = reservation_mut(db, args.str("reservation_id")?)?;
            if passengers.len() != reservation.passengers.len() {
                return Err("Number of passengers does not match".to_owned());
            }
            reservation.passengers = passengers;
            to_json(reservation)
        }
        "get_flight_status" => {
            let instance = flight_instance(db, args.str("flight_number")?, args.str("date")?)?;
            Ok(Value::String(instance.status().to_owned()))
        }
        _ => Err(format!("Tool '{name}' not found.")),
    }
}

fn user<'a>(db: &'a AirlineDb, user_id: &str) -> Result<&'a User, String> {
    db.users
        .get(user_id)
        .ok_or_else(|| format!("User {user_id} not found"))
}

fn user_mut<'a>(db: &'a mut AirlineDb, user_id: &str) -> Result<&'a mut User, String> {
    db.users
        .get_mut(user_id)
        .ok_or_else(|| format!("User {user_id} not found"))
}

fn reservation<'a>(db: &'a AirlineDb, reservation_id: &str) -> Result<&'a Reservation, String> {
    db.reservations
        .get(reservation_id)
        .ok_or_else(|| format!("Reservation {reservation_id} not found"))
}

fn reservation_mut<'a>(
    db: &'a mut AirlineDb,
    reservation_id: &str,
) -> Result<&'a mut Reservation, String> {
    db.reservations
        .get_mut(reservation_id)
        .ok_or_else(|| format!("Reservation {reservation_id} not found"))
}

fn flight<'a>(db: &'a AirlineDb, flight_number: &str) -> Result<&'a Flight, String> {
    db.flights
        .get(flight_number)
        .ok_or_else(|| format!("Flight {flight_number} not found"))
}

fn flight_instance<'a>(
    db: &'a AirlineDb,
    flight_number: &str,
    date: &str,
) -> Result<&'a FlightDateStatus, String> {
    flight(db, flight_number)?
        .dates
        .get(date)
        .ok_or_else(|| format!("Flight {flight_number} not found on date {date}"))
}

/// Seats and prices of a bookable flight date, or the reference's "not available" error.
fn available<'a>(
    db: &'a AirlineDb,
    flight_number: &str,
    date: &str,
) -> Result<(&'a CabinCounts, &'a CabinCounts), String> {
    match flight_instance(db, flight_number, date)? {
        FlightDateStatus::Available {
            available_seats,
            prices,
        } => Ok((available_seats, prices)),
        _ => Err(format!(
            "Flight {flight_number} not available on date {date}"
        )),
    }
}

/// A Python `KeyError` message for a missing dict key.
fn key_error(key: &str) -> String {
    format!("'{key}'")
}

fn flights_arg(args: &Args<'_>) -> Result<Vec<(String, String)>, String> {
    let items = args
        .raw("flights")?
        .as_array()
        .ok_or_else(|| "flights must be a list".to_owned())?;
    items
        .iter()
        .map(|item| {
            let field = |key: &str| {
                item.get(key)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("flight {key} must be a string"))
            };
            Ok((field("flight_number")?, field("date")?))
        })
        .collect()
}

fn passengers_arg(args: &Args<'_>) -> Result<Vec<Passenger>, String> {
    let items = args
        .raw("passengers")?
        .as_array()
        .ok_or_else(|| "passengers must be a list".to_owned())?;
    items
        .iter()
        .map(|item| {
            let field = |key: &str| {
                item.get(key)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("passenger {key} must be a string"))
            };
            Ok(Passenger {
                first_name: field("first_name")?,
                last_name: field("last_name")?,
                dob: field("dob")?,
            })
        })
        .collect()
}

fn payments_arg(args: &Args<'_>) -> Result<Vec<Payment>, String> {
    let items = args
        .raw("payment_methods")?
        .as_array()
        .ok_or_else(|| "payment_methods must be a list".to_owned())?;
    items
        .iter()
        .map(|item| {
            Ok(Payment {
                payment_id: item
                    .get("payment_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| "payment_id must be a string".to_owned())?
                    .to_owned(),
                amount: item
                    .get("amount")
                    .and_then(as_int)
                    .ok_or_else(|| "amount must be an integer".to_owned())?,
            })
        })
        .collect()
}

fn book_reservation(db: &mut AirlineDb, args: &Args<'_>) -> ToolResult {
    let flights = flights_arg(args)?;
    let passengers = passengers_arg(args)?;
    let payments = payments_arg(args)?;
    let user_id = args.str("user_id")?;
    let cabin = args.str("cabin")?;
    let nonfree_baggages = args.int("nonfree_baggages")?;
    let insurance = args.str("insurance")?;
    user(db, user_id)?;
    let reservation_id = NEW_RESERVATION_IDS
        .iter()
        .find(|id| !db.reservations.contains_key(**id))
        .ok_or_else(|| "Too many reservations".to_owned())?
        .to_string();
    let n_passengers = passengers.len() as i64;
    let mut reservation_flights = Vec::new();
    let mut total_price: i64 = 0;
    for (flight_number, date) in &flights {
        let scheduled = flight(db, flight_number)?;
        let (seats, prices) = available(db, flight_number, date)?;
        if *seats.get(cabin).ok_or_else(|| key_error(cabin))? < n_passengers {
            return Err(format!("Not enough seats on flight {flight_number}"));
        }
        let price = *prices.get(cabin).ok_or_else(|| key_error(cabin))?;
        reservation_flights.push(ReservationFlight {
            flight_number: flight_number.clone(),
            origin: scheduled.origin.clone(),
            destination: scheduled.destination.clone(),
            date: date.clone(),
            price,
        });
        total_price += price * n_passengers;
    }
    if insurance == "yes" {
        total_price += 30 * n_passengers;
    }
    total_price += 50 * nonfree_baggages;
    let owner = user(db, user_id)?;
    for payment in &payments {
        let method = owner
            .payment_methods
            .get(&payment.payment_id)
            .ok_or_else(|| format!("Payment method {} not found", payment.payment_id))?;
        if let PaymentMethod::GiftCard { amount, .. } | PaymentMethod::Certificate { amount, .. } =
            method
            && *amount < payment.amount as f64
        {
            return Err(format!(
                "Not enough balance in payment method {}",
                payment.payment_id
            ));
        }
    }
    let total_payment: i64 = payments.iter().map(|p| p.amount).sum();
    if total_payment != total_price {
        return Err(format!(
            "Payment amount does not add up, total price is {total_price}, but paid {total_payment}"
        ));
    }
    let owner = user_mut(db, user_id)?;
    for payment in &payments {
        let method = owner
            .payment_methods
            .get_mut(&payment.payment_id)
            .ok_or_else(|| key_error(&payment.payment_id))?;
        match method {
            PaymentMethod::GiftCard { amount, .. } => *amount -= payment.amount as f64,
            PaymentMethod::Certificate { .. } => {
                owner.payment_methods.shift_remove(&payment.payment_id);
            }
            PaymentMethod::CreditCard { .. } => {}
        }
    }
    for (flight_number, date) in &flights {
        if let Some(FlightDateStatus::Available {
            available_seats, ..
        }) = db
            .flights
            .get_mut(flight_number)
            .and_then(|flight| flight.dates.get_mut(date))
            && let Some(seats) = available_seats.get_mut(cabin)
        {
            *seats -= n_passengers;
        }
    }
    let reservation = Reservation {
        reservation_id: reservation_id.clone(),
        user_id: user_id.to_owned(),
        origin: args.str("origin")?.to_owned(),
        destination: args.str("destination")?.to_owned(),
        flight_type: args.str("flight_type")?.to_owned(),
        cabin: cabin.to_owned(),
        flights: reservation_flights,
        passengers,
        payment_history: payments,
        created_at: NOW.to_owned(),
        total_baggages: args.int("total_baggages")?,
        nonfree_baggages,
        insurance: insurance.to_owned(),
        status: None,
    };
    let shown = to_json(&reservation)?;
    db.reservations.insert(reservation_id.clone(), reservation);
    user_mut(db, user_id)?.reservations.push(reservation_id);
    Ok(shown)
}

/// Charges an update to a payment method (not a certificate); `None` when the price is 0.
fn payment_for_update(
    db: &mut AirlineDb,
    user_id: &str,
    payment_id: &str,
    total_price: i64,
) -> Result<Option<Payment>, String> {
    let owner = user_mut(db, user_id)?;
    let method = owner
        .payment_methods
        .get_mut(payment_id)
        .ok_or_else(|| "Payment method not found".to_owned())?;
    match method {
        PaymentMethod::Certificate { .. } => {
            return Err("Certificate cannot be used to update reservation".to_owned());
        }
        PaymentMethod::GiftCard { amount, .. } => {
            if *amount < total_price as f64 {
                return Err("Gift card balance is not enough".to_owned());
            }
            *amount -= total_price as f64;
        }
        PaymentMethod::CreditCard { .. } => {}
    }
    Ok((total_price != 0).then(|| Payment {
        payment_id: payment_id.to_owned(),
        amount: total_price,
    }))
}

fn update_reservation_flights(db: &mut AirlineDb, args: &Args<'_>) -> ToolResult {
    let flights = flights_arg(args)?;
    let reservation_id = args.str("reservation_id")?;
    let cabin = args.str("cabin")?;
    let payment_id = args.str("payment_id")?;
    let current = reservation(db, reservation_id)?;
    let user_id = current.user_id.clone();
    user(db, &user_id)?;
    let n_passengers = current.passengers.len() as i64;
    let mut total_price: i64 = 0;
    let mut new_flights = Vec::new();
    for (flight_number, date) in &flights {
        let kept = current.flights.iter().find(|f| {
            &f.flight_number == flight_number && &f.date == date && cabin == current.cabin
        });
        if let Some(kept) = kept {
            total_price += kept.price * n_passengers;
            new_flights.push(kept.clone());
            continue;
        }
        let scheduled = flight(db, flight_number)?;
        let (seats, prices) = available(db, flight_number, date)?;
        if *seats.get(cabin).ok_or_else(|| key_error(cabin))? < n_passengers {
            return Err(format!("Not enough seats on flight {flight_number}"));
        }
        let price = *prices.get(cabin).ok_or_else(|| key_error(cabin))?;
        total_price += price * n_passengers;
        new_flights.push(ReservationFlight {
            flight_number: flight_number.clone(),
            origin: scheduled.origin.clone(),
            destination: scheduled.destination.clone(),
            date: date.clone(),
            price,
        });
    }
    total_price -= current.flights.iter().map(|f| f.price).sum::<i64>() * n_passengers;
    let payment = payment_for_update(db, &user_id, payment_id, total_price)?;
    let reservation = reservation_mut(db, reservation_id)?;
    reservation.payment_history.extend(payment);
    reservation.flights = new_flights;
    reservation.cabin = cabin.to_owned();
    to_json(reservation)
}

/// Bookable flights on a date, optionally filtered by origin, destination and earliest
/// departure (compared as strings, like the reference).
fn search_direct<'a>(
    db: &'a AirlineDb,
    date: &str,
    origin: Option<&str>,
    destination: Option<&str>,
    leave_after: Option<&str>,
) -> Vec<(&'a Flight, &'a FlightDateStatus)> {
    db.flights
        .values()
        .filter(|f| origin.is_none_or(|o| f.origin == o))
        .filter(|f| destination.is_none_or(|d| f.destination == d))
        .filter(|f| leave_after.is_none_or(|t| f.scheduled_departure_time_est.as_str() >= t))
        .filter_map(|f| match f.dates.get(date) {
            Some(status @ FlightDateStatus::Available { .. }) => Some((f, status)),
            _ => None,
        })
        .collect()
}

/// A search result in the reference's `DirectFlight` field order.
fn direct_flight_json(found: (&Flight, &FlightDateStatus), date: Option<&str>) -> Value {
    let (flight, status) = found;
    let (seats, prices) = match status {
        FlightDateStatus::Available {
            available_seats,
            prices,
        } => (json!(available_seats), json!(prices)),
        _ => (Value::Null, Value::Null),
    };
    json!({
        "flight_number": flight.flight_number,
        "origin": flight.origin,
        "destination": flight.destination,
        "status": "available",
        "scheduled_departure_time_est": flight.scheduled_departure_time_est,
        "scheduled_arrival_time_est": flight.scheduled_arrival_time_est,
        "date": date,
        "available_seats": seats,
        "prices": prices,
    })
}

fn search_onestop_flight(db: &mut AirlineDb, args: &Args<'_>) -> ToolResult {
    let origin = args.str("origin")?;
    let destination = args.str("destination")?;
    let date = args.str("date")?;
    let mut pairs = Vec::new();
    for first in search_direct(db, date, Some(origin), None, None) {
        let arrival = first.0.scheduled_arrival_time_est.as_str();
        let date2 = if arrival.contains("+1") {
            let day_text: String = date
                .chars()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let day: i64 = day_text
                .trim()
                .parse()
                .map_err(|_| format!("invalid literal for int() with base 10: '{day_text}'"))?;
            format!("2024-05-{}", day + 1)
        } else {
            date.to_owned()
        };
        let first_json = direct_flight_json(first, Some(date));
        for second in search_direct(
            db,
            &date2,
            Some(&first.0.destination),
            Some(destination),
            Some(arrival),
        ) {
            pairs.push(Value::Array(vec![
                first_json.clone(),
                direct_flight_json(second, Some(&date2)),
            ]));
        }
    }
    Ok(Value::Array(pairs))
}
