//! Task families over the τ²-bench airline database: reservation details, flight status,
//! flight search, cancellation, baggage and passenger updates, and booking.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::{Fact, Plan, Rng, pick_text, split_of};
use crate::chat::ToolCall;
use crate::config::TaskSplit;
use crate::env::tau2::airline::{
    AirlineDb, Flight, FlightDateStatus, PaymentMethod, Reservation, User,
};
use crate::env::tau2::{Db, Tau2Domain};
use crate::error::{Error, Result};

/// The users, reservations and flights of one split.
pub(crate) struct Pools<'a> {
    db: &'a AirlineDb,
    users: Vec<&'a User>,
    reservations: Vec<&'a Reservation>,
    flights: Vec<&'a Flight>,
}

impl<'a> Pools<'a> {
    pub(crate) fn new(domain: &'a Arc<Tau2Domain>, split: TaskSplit) -> Result<Self> {
        let Db::Airline(db) = domain.initial_db() else {
            return Err(Error::TaskGen {
                what: format!("domain folder {}", domain.dir().display()),
                message: "airline tasks need the airline domain, got another one".to_owned(),
            });
        };
        let users = db
            .users
            .values()
            .filter(|u| split_of(&format!("user:{}", u.user_id)) == split)
            .collect();
        let reservations = db
            .reservations
            .values()
            .filter(|r| split_of(&format!("user:{}", r.user_id)) == split)
            .collect();
        let flights = db
            .flights
            .values()
            .filter(|f| split_of(&format!("flight:{}", f.flight_number)) == split)
            .collect();
        Ok(Pools {
            db,
            users,
            reservations,
            flights,
        })
    }

    fn flight_in_split(&self, number: &str) -> bool {
        self.flights.iter().any(|f| f.flight_number == number)
    }
}

const GREETINGS: [&str; 5] = ["", "Hello. ", "Hi there! ", "Good afternoon, ", "Hey, "];

type Family = fn(&Pools<'_>, u32, &mut Rng) -> Option<Plan>;

const FAMILIES: [(&str, u32, Family); 7] = [
    ("reservation_details", 1, reservation_details),
    ("flight_status", 1, flight_status),
    ("search_direct_flights", 2, search_direct_flights),
    ("cancel_reservation", 2, cancel_reservation),
    ("update_baggage", 3, update_baggage),
    ("update_passengers", 3, update_passengers),
    ("book_flight", 4, book_flight),
];

/// The airline family names with their lowest difficulty.
pub(crate) fn families() -> Vec<(&'static str, u32)> {
    super::family_names(&FAMILIES)
}

/// Draws a family allowed at this difficulty and plans a task; retries on a sample that does
/// not fit.
pub(crate) fn plan(
    pools: &Pools<'_>,
    difficulty: u32,
    families: &[String],
    rng: &mut Rng,
) -> Result<Plan> {
    super::plan_from_table(
        &FAMILIES,
        "airline families",
        difficulty,
        families,
        rng,
        |family, rng| family(pools, difficulty, rng),
    )
}

fn active_reservation<'a>(pools: &Pools<'a>, rng: &mut Rng) -> Option<&'a Reservation> {
    let reservation = *rng.pick(&pools.reservations)?;
    (reservation.status.is_none()).then_some(reservation)
}

fn reservation_touch(reservation: &Reservation) -> BTreeSet<String> {
    BTreeSet::from([
        format!("user:{}", reservation.user_id),
        format!("reservation:{}", reservation.reservation_id),
    ])
}

fn greet(rng: &mut Rng, request: String) -> String {
    format!(
        "{}{}",
        rng.pick(&GREETINGS).copied().unwrap_or(""),
        request.trim()
    )
}

fn reservation_details(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let reservation = *rng.pick(&pools.reservations)?;
    let mut request = pick_text(
        rng,
        &[
            "Can you pull up reservation {id}? Where does it go?",
            "What's on my booking {id}: route and cabin?",
            "I need the details of reservation {id}.",
            "Please remind me of my trip {id}.",
        ],
        &[("id", reservation.reservation_id.clone())],
    );
    let mut turns = Vec::new();
    if difficulty >= 2 {
        request = format!("I'm {}. {request}", reservation.user_id);
        turns.push(vec![ToolCall::new(
            "get_user_details",
            vec![("user_id", json!(reservation.user_id))],
        )]);
    }
    turns.push(vec![ToolCall::new(
        "get_reservation_details",
        vec![("reservation_id", json!(reservation.reservation_id))],
    )]);
    let route = format!("from {} to {}", reservation.origin, reservation.destination);
    let mut facts = vec![
        Fact {
            what: "the route".to_owned(),
            text: route.clone(),
        },
        Fact {
            what: "the cabin".to_owned(),
            text: format!("cabin: {}", reservation.cabin),
        },
    ];
    let mut answer = format!(
        "Reservation {} goes {route} ({}), cabin: {}.",
        reservation.reservation_id, reservation.flight_type, reservation.cabin
    );
    if difficulty >= 3 {
        let n = reservation.passengers.len();
        facts.push(Fact {
            what: "the number of passengers".to_owned(),
            text: format!("{n} passenger(s)"),
        });
        answer.push_str(&format!(" It has {n} passenger(s)."));
        request.push_str(" How many passengers are on it?");
    }
    if difficulty >= 4 {
        let numbers: Vec<String> = reservation
            .flights
            .iter()
            .map(|f| f.flight_number.clone())
            .collect();
        for number in &numbers {
            facts.push(Fact {
                what: format!("flight {number}"),
                text: number.clone(),
            });
        }
        answer.push_str(&format!(" Flights: {}.", numbers.join(", ")));
        request.push_str(" Which flight numbers?");
    }
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "reservation_details",
        request: greet(rng, request),
        turns,
        required,
        facts,
        answer,
        check_state: difficulty >= 3,
        touched: reservation_touch(reservation),
    })
}

fn flight_status(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let flight = *rng.pick(&pools.flights)?;
    let dates: Vec<&String> = flight.dates.keys().collect();
    let n_dates = if difficulty >= 3 { 2 } else { 1 };
    if dates.len() < n_dates {
        return None;
    }
    let start = rng.below(dates.len() - n_dates + 1);
    let picked = &dates[start..start + n_dates];
    let date_text = picked
        .iter()
        .map(|d| d.as_str())
        .collect::<Vec<_>>()
        .join(" and ");
    let request = pick_text(
        rng,
        &[
            "What's the status of flight {f} on {d}?",
            "Is {f} on time on {d}?",
            "Could you check flight {f} for {d}?",
            "I'm tracking {f} ({d}). What's its status?",
        ],
        &[("f", flight.flight_number.clone()), ("d", date_text)],
    );
    let calls: Vec<ToolCall> = picked
        .iter()
        .map(|date| {
            ToolCall::new(
                "get_flight_status",
                vec![
                    ("flight_number", json!(flight.flight_number)),
                    ("date", json!(date)),
                ],
            )
        })
        .collect();
    let mut facts = Vec::new();
    let mut lines = Vec::new();
    for date in picked {
        let status = flight.dates.get(date.as_str())?.status();
        let text = format!("on {date}: {status}");
        facts.push(Fact {
            what: format!("the status on {date}"),
            text: text.clone(),
        });
        lines.push(text);
    }
    let answer = format!(
        "Flight {} status {}.",
        flight.flight_number,
        lines.join("; ")
    );
    Some(Plan {
        family: "flight_status",
        request: greet(rng, request),
        turns: vec![calls.clone()],
        required: calls,
        facts,
        answer,
        check_state: difficulty >= 3,
        touched: BTreeSet::from([format!("flight:{}", flight.flight_number)]),
    })
}

/// Bookable dates of a flight with at least `seats` seats in `cabin`.
fn bookable_dates<'a>(flight: &'a Flight, cabin: &str, seats: i64) -> Vec<(&'a String, i64)> {
    flight
        .dates
        .iter()
        .filter_map(|(date, status)| match status {
            FlightDateStatus::Available {
                available_seats,
                prices,
            } if available_seats.get(cabin).is_some_and(|n| *n >= seats) => {
                Some((date, *prices.get(cabin)?))
            }
            _ => None,
        })
        .collect()
}

/// Direct flights between two airports bookable on a date (what `search_direct_flight` finds).
fn direct_on<'a>(
    pools: &Pools<'a>,
    origin: &str,
    destination: &str,
    date: &str,
) -> Vec<&'a Flight> {
    pools
        .db
        .flights
        .values()
        .filter(|f| f.origin == origin && f.destination == destination)
        .filter(|f| matches!(f.dates.get(date), Some(FlightDateStatus::Available { .. })))
        .collect()
}

fn search_direct_flights(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let flight = *rng.pick(&pools.flights)?;
    let dates = bookable_dates(flight, "economy", 0);
    let (date, _) = *rng.pick(&dates)?;
    let found = direct_on(pools, &flight.origin, &flight.destination, date);
    if !found
        .iter()
        .all(|f| pools.flight_in_split(&f.flight_number))
    {
        return None;
    }
    let request = pick_text(
        rng,
        &[
            "Which direct flights go from {o} to {d} on {date}?",
            "I need a nonstop {o} to {d} on {date}. What's available?",
            "Search direct flights {o} -> {d}, {date}, please.",
            "Are there any direct flights between {o} and {d} on {date}?",
        ],
        &[
            ("o", flight.origin.clone()),
            ("d", flight.destination.clone()),
            ("date", date.clone()),
        ],
    );
    let call = ToolCall::new(
        "search_direct_flight",
        vec![
            ("origin", json!(flight.origin)),
            ("destination", json!(flight.destination)),
            ("date", json!(date)),
        ],
    );
    let mut facts = Vec::new();
    let numbers: Vec<String> = found.iter().map(|f| f.flight_number.clone()).collect();
    for number in &numbers {
        facts.push(Fact {
            what: format!("flight {number}"),
            text: number.clone(),
        });
    }
    let mut answer = format!(
        "Direct flights from {} to {} on {date}: {}.",
        flight.origin,
        flight.destination,
        numbers.join(", ")
    );
    if difficulty >= 4 {
        let cheapest = found
            .iter()
            .filter_map(|f| match f.dates.get(date.as_str()) {
                Some(FlightDateStatus::Available { prices, .. }) => prices.get("economy").copied(),
                _ => None,
            })
            .min()?;
        facts.push(Fact {
            what: "the cheapest economy fare".to_owned(),
            text: format!("${cheapest}"),
        });
        answer.push_str(&format!(" The cheapest economy fare is ${cheapest}."));
    }
    let touched = found
        .iter()
        .map(|f| format!("flight:{}", f.flight_number))
        .collect();
    Some(Plan {
        family: "search_direct_flights",
        request: greet(rng, request),
        turns: vec![vec![call.clone()]],
        required: vec![call],
        facts,
        answer,
        check_state: difficulty >= 3,
        touched,
    })
}

fn cancel_reservation(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let reservation = active_reservation(pools, rng)?;
    let request = pick_text(
        rng,
        &[
            "I'm {u}. Please cancel reservation {r}.",
            "User {u} here: I can't make the trip, cancel {r} please. I confirm.",
            "Cancel my booking {r} (user id {u}).",
            "My plans changed. I'm {u}; cancel {r} and refund me.",
        ],
        &[
            ("u", reservation.user_id.clone()),
            ("r", reservation.reservation_id.clone()),
        ],
    );
    let turns = vec![
        vec![ToolCall::new(
            "get_user_details",
            vec![("user_id", json!(reservation.user_id))],
        )],
        vec![ToolCall::new(
            "get_reservation_details",
            vec![("reservation_id", json!(reservation.reservation_id))],
        )],
        vec![ToolCall::new(
            "cancel_reservation",
            vec![("reservation_id", json!(reservation.reservation_id))],
        )],
    ];
    let mut facts = vec![Fact {
        what: "that the reservation is cancelled".to_owned(),
        text: format!("{} is cancelled", reservation.reservation_id),
    }];
    let mut answer = format!("Reservation {} is cancelled.", reservation.reservation_id);
    if difficulty >= 4 {
        let total: i64 = reservation.payment_history.iter().map(|p| p.amount).sum();
        facts.push(Fact {
            what: "the refund total".to_owned(),
            text: format!("${total}"),
        });
        answer.push_str(&format!(" ${total} will be refunded."));
    }
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "cancel_reservation",
        request: greet(rng, request),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched: reservation_touch(reservation),
    })
}

fn credit_card(user: &User) -> Option<&String> {
    user.payment_methods
        .iter()
        .find_map(|(id, method)| match method {
            PaymentMethod::CreditCard { .. } => Some(id),
            _ => None,
        })
}

fn update_baggage(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let reservation = active_reservation(pools, rng)?;
    let user = pools.db.users.get(&reservation.user_id)?;
    let card = credit_card(user)?;
    let extra = if difficulty >= 5 { 2 } else { 1 };
    let total = reservation.total_baggages + extra;
    let nonfree = reservation.nonfree_baggages + extra;
    let request = pick_text(
        rng,
        &[
            "I'm {u}. Add {n} checked bag(s) to {r}, paid with {card}.",
            "Please add {n} more bag(s) to reservation {r} (user {u}); charge {card}.",
            "User {u}: I need {n} extra bag(s) on {r}. Use {card}, I confirm.",
            "Can you put {n} additional suitcase(s) on my booking {r}? I'm {u}, card {card}.",
        ],
        &[
            ("u", reservation.user_id.clone()),
            ("r", reservation.reservation_id.clone()),
            ("n", extra.to_string()),
            ("card", card.clone()),
        ],
    );
    let turns = vec![
        vec![ToolCall::new(
            "get_user_details",
            vec![("user_id", json!(reservation.user_id))],
        )],
        vec![ToolCall::new(
            "get_reservation_details",
            vec![("reservation_id", json!(reservation.reservation_id))],
        )],
        vec![ToolCall::new(
            "update_reservation_baggages",
            vec![
                ("reservation_id", json!(reservation.reservation_id)),
                ("total_baggages", json!(total)),
                ("nonfree_baggages", json!(nonfree)),
                ("payment_id", json!(card)),
            ],
        )],
    ];
    let cost = 50 * extra;
    let facts = vec![
        Fact {
            what: "the new number of bags".to_owned(),
            text: format!("{total} checked bag(s)"),
        },
        Fact {
            what: "the charge".to_owned(),
            text: format!("${cost}"),
        },
    ];
    let answer = format!(
        "Reservation {} now has {total} checked bag(s); ${cost} was charged to {card}.",
        reservation.reservation_id
    );
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "update_baggage",
        request: greet(rng, request),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched: reservation_touch(reservation),
    })
}

const FIRST_NAMES: [&str; 10] = [
    "Avery", "Jordan", "Riley", "Morgan", "Casey", "Quinn", "Harper", "Rowan", "Skyler", "Emerson",
];

fn update_passengers(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let reservation = active_reservation(pools, rng)?;
    let idx = if difficulty >= 5 {
        rng.below(reservation.passengers.len())
    } else {
        0
    };
    let old = reservation.passengers.get(idx)?;
    let new_first = *rng.pick(&FIRST_NAMES)?;
    if new_first == old.first_name {
        return None;
    }
    let passengers: Vec<_> = reservation
        .passengers
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let first = if k == idx {
                new_first
            } else {
                p.first_name.as_str()
            };
            json!({"first_name": first, "last_name": p.last_name, "dob": p.dob})
        })
        .collect();
    let request = pick_text(
        rng,
        &[
            "I'm {u}. On reservation {r}, {old} {last} should be {new} {last} (same birth date).",
            "Please fix a name on {r}: replace {old} {last} with {new} {last}. User {u}.",
            "User {u}: passenger {old} {last} on {r} is actually {new} {last}. I confirm the change.",
            "Can you change the passenger {old} {last} on booking {r} to {new} {last}? I'm {u}.",
        ],
        &[
            ("u", reservation.user_id.clone()),
            ("r", reservation.reservation_id.clone()),
            ("old", old.first_name.clone()),
            ("new", new_first.to_owned()),
            ("last", old.last_name.clone()),
        ],
    );
    let turns = vec![
        vec![ToolCall::new(
            "get_reservation_details",
            vec![("reservation_id", json!(reservation.reservation_id))],
        )],
        vec![ToolCall::new(
            "update_reservation_passengers",
            vec![
                ("reservation_id", json!(reservation.reservation_id)),
                ("passengers", json!(passengers)),
            ],
        )],
    ];
    let facts = vec![Fact {
        what: "the corrected passenger name".to_owned(),
        text: format!("{new_first} {}", old.last_name),
    }];
    let answer = format!(
        "Reservation {} now lists {new_first} {} instead of {} {}.",
        reservation.reservation_id, old.last_name, old.first_name, old.last_name
    );
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "update_passengers",
        request: greet(rng, request),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched: reservation_touch(reservation),
    })
}

fn book_flight(pools: &Pools<'_>, difficulty: u32, rng: &mut Rng) -> Option<Plan> {
    let user = *rng.pick(&pools.users)?;
    let card = credit_card(user)?;
    let mut passengers = vec![json!({
        "first_name": user.name.first_name,
        "last_name": user.name.last_name,
        "dob": user.dob,
    })];
    if difficulty >= 5 {
        let saved = rng.pick(&user.saved_passengers)?;
        passengers.push(json!({
            "first_name": saved.first_name,
            "last_name": saved.last_name,
            "dob": saved.dob,
        }));
    }
    let n = passengers.len() as i64;
    let flight = *rng.pick(&pools.flights)?;
    let cabin = *rng.pick(&["economy", "business", "basic_economy"])?;
    let dates = bookable_dates(flight, cabin, n);
    let (date, price) = *rng.pick(&dates)?;
    let found = direct_on(pools, &flight.origin, &flight.destination, date);
    if !found
        .iter()
        .all(|f| pools.flight_in_split(&f.flight_number))
    {
        return None;
    }
    let insurance = if rng.chance(0.5) { "yes" } else { "no" };
    let total = price * n + if insurance == "yes" { 30 * n } else { 0 };
    let who = if n == 1 {
        "myself".to_owned()
    } else {
        let p = &passengers[1];
        format!(
            "myself and {} {}",
            p["first_name"].as_str().unwrap_or(""),
            p["last_name"].as_str().unwrap_or("")
        )
    };
    let cabin_text = cabin.replace('_', " ");
    let request = pick_text(
        rng,
        &[
            "I'm {u}. Book flight {f} from {o} to {d} on {date}, {cabin}, for {who}; {ins} insurance, no bags, pay with {card}.",
            "User {u}: I'd like a one-way {cabin} seat on {f} ({o} to {d}) on {date} for {who}. Insurance: {ins}. No checked bags. Card {card}.",
            "Please reserve {f} {o}->{d} on {date} in {cabin} for {who} (user {u}), insurance {ins}, zero bags, charge {card}. I confirm.",
            "Can you book me ({u}) on the {date} flight {f} from {o} to {d}? {cabin}, for {who}, insurance {ins}, no luggage, paying with {card}.",
        ],
        &[
            ("u", user.user_id.clone()),
            ("f", flight.flight_number.clone()),
            ("o", flight.origin.clone()),
            ("d", flight.destination.clone()),
            ("date", date.clone()),
            ("cabin", cabin_text),
            ("who", who),
            ("ins", insurance.to_owned()),
            ("card", card.clone()),
        ],
    );
    let turns = vec![
        vec![ToolCall::new(
            "get_user_details",
            vec![("user_id", json!(user.user_id))],
        )],
        vec![ToolCall::new(
            "search_direct_flight",
            vec![
                ("origin", json!(flight.origin)),
                ("destination", json!(flight.destination)),
                ("date", json!(date)),
            ],
        )],
        vec![ToolCall::new(
            "book_reservation",
            vec![
                ("user_id", json!(user.user_id)),
                ("origin", json!(flight.origin)),
                ("destination", json!(flight.destination)),
                ("flight_type", json!("one_way")),
                ("cabin", json!(cabin)),
                (
                    "flights",
                    json!([{"flight_number": flight.flight_number, "date": date}]),
                ),
                ("passengers", json!(passengers)),
                (
                    "payment_methods",
                    json!([{"payment_id": card, "amount": total}]),
                ),
                ("total_baggages", json!(0)),
                ("nonfree_baggages", json!(0)),
                ("insurance", json!(insurance)),
            ],
        )],
    ];
    let facts = vec![
        Fact {
            what: "the new reservation id".to_owned(),
            text: "HATHAT".to_owned(),
        },
        Fact {
            what: "the total charged".to_owned(),
            text: format!("${total}"),
        },
    ];
    let answer = format!(
        "You're booked: reservation HATHAT on {} ({date}), ${total} charged to {card}.",
        flight.flight_number
    );
    let mut touched: BTreeSet<String> = found
        .iter()
        .map(|f| format!("flight:{}", f.flight_number))
        .collect();
    touched.insert(format!("user:{}", user.user_id));
    let required = turns.iter().flatten().cloned().collect();
    Some(Plan {
        family: "book_flight",
        request: greet(rng, request),
        turns,
        required,
        facts,
        answer,
        check_state: true,
        touched,
    })
}
