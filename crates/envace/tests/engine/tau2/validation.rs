//! Argument validation before a tool runs (`TOOL_NOT_AVAILABLE`, `INVALID_PARAMETERS`), tool
//! schemas in OpenAI format, and the `Environment` contract: clone, reset, hash, rendering.

use envace::env::{Environment, ErrorCode, ToolOutcome, render_outcome};
use expect_test::{Expect, expect};
use serde_json::{Value, json};

use super::{airline, failure, retail};

fn check_retail(name: &str, arguments: Value, expect: Expect) {
    let mut env = retail().env(0);
    let before = env.state_hash();
    expect.assert_eq(&failure(&mut env, name, arguments));
    assert_eq!(env.state_hash(), before, "a rejected call changes nothing");
}

fn check_airline(name: &str, arguments: Value, expect: Expect) {
    let mut env = airline().env(0);
    expect.assert_eq(&failure(&mut env, name, arguments));
}

#[test]
fn unknown_tool_is_not_available() {
    check_retail(
        "delete_order",
        json!({"order_id": "#W6779827"}),
        expect![[
            r#"TOOL_NOT_AVAILABLE: tool "delete_order" is not available; the tools are: calculate, cancel_pending_order, exchange_delivered_order_items, find_user_id_by_name_zip, find_user_id_by_email, get_order_details, get_product_details, get_item_details, get_user_details, list_all_product_types, modify_pending_order_address, modify_pending_order_items, modify_pending_order_payment, modify_user_address, return_delivered_order_items, transfer_to_human_agents"#
        ]],
    );
    check_airline(
        "think",
        json!({"thought": "hm"}),
        expect![[
            r#"TOOL_NOT_AVAILABLE: tool "think" is not available; the tools are: book_reservation, calculate, cancel_reservation, get_reservation_details, get_user_details, list_all_airports, search_direct_flight, search_onestop_flight, send_certificate, transfer_to_human_agents, update_reservation_baggages, update_reservation_flights, update_reservation_passengers, get_flight_status"#
        ]],
    );
}

#[test]
fn arguments_must_fit_the_schema() {
    check_retail(
        "get_order_details",
        json!({}),
        expect![
            "INVALID_PARAMETERS: argument `order_id` of get_order_details is required but missing"
        ],
    );
    check_retail(
        "get_order_details",
        json!({"order_id": 6779827}),
        expect![[
            r#"INVALID_PARAMETERS: argument `order_id` of get_order_details: 6779827 is not of type "string""#
        ]],
    );
    check_retail(
        "get_order_details",
        json!({"order_id": "#W6779827", "verbose": true}),
        expect![
            "INVALID_PARAMETERS: argument `verbose` is not a parameter of get_order_details; its parameters are: order_id"
        ],
    );
    check_retail(
        "get_order_details",
        json!(["#W6779827"]),
        expect![
            "INVALID_PARAMETERS: arguments of get_order_details must be a JSON object, got an array"
        ],
    );
    check_retail(
        "return_delivered_order_items",
        json!({"order_id": "#W7303089", "item_ids": "2492465580", "payment_method_id": "credit_card_4387170"}),
        expect![[
            r#"INVALID_PARAMETERS: argument `item_ids` of return_delivered_order_items: "2492465580" is not of type "array""#
        ]],
    );
    check_retail(
        "exchange_delivered_order_items",
        json!({"order_id": "#W4817420", "item_ids": [6777246137_u64], "new_item_ids": ["4579334072"], "payment_method_id": "gift_card_8168843"}),
        expect![[
            r#"INVALID_PARAMETERS: argument `item_ids/0` of exchange_delivered_order_items: 6777246137 is not of type "string""#
        ]],
    );
    check_airline(
        "update_reservation_baggages",
        json!({"reservation_id": "VYAAQN", "total_baggages": "3", "nonfree_baggages": 2, "payment_id": "credit_card_3432394"}),
        expect![[
            r#"INVALID_PARAMETERS: argument `total_baggages` of update_reservation_baggages: "3" is not of type "integer""#
        ]],
    );
    check_airline(
        "update_reservation_flights",
        json!({"reservation_id": "VYAAQN", "cabin": "first", "flights": [], "payment_id": "credit_card_3432394"}),
        expect![[
            r#"INVALID_PARAMETERS: argument `cabin` of update_reservation_flights: "first" is not one of "business", "economy" or "basic_economy""#
        ]],
    );
    check_airline(
        "book_reservation",
        json!({"user_id": "evelyn_khan_9070", "origin": "PHL", "destination": "LGA", "flight_type": "one_way",
               "cabin": "economy", "flights": [{"flight_number": "HAT001"}], "passengers": [],
               "payment_methods": [], "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no"}),
        expect![[
            r#"INVALID_PARAMETERS: argument `flights/0` of book_reservation: "date" is a required property"#
        ]],
    );
    check_airline(
        "send_certificate",
        json!({"user_id": "evelyn_khan_9070", "amount": 12.5}),
        expect![[
            r#"INVALID_PARAMETERS: argument `amount` of send_certificate: 12.5 is not of type "integer""#
        ]],
    );
}

#[test]
fn outcomes_render_like_the_reference() {
    let mut env = airline().env(0);
    let outcome = env.call(
        "get_flight_status",
        &json!({"flight_number": "HAT001", "date": "2024-05-03"}),
    );
    assert_eq!(outcome, ToolOutcome::Success(json!("cancelled")));
    assert_eq!(render_outcome(&outcome), "cancelled");
    let outcome = env.call("cancel_reservation", &json!({"reservation_id": "nope"}));
    assert_eq!(
        render_outcome(&outcome),
        "Error: Reservation nope not found"
    );
    assert_eq!(
        outcome.to_json(),
        json!({"code": "TOOL_ERROR", "message": "Reservation nope not found"})
    );
    let outcome = env.call("nope", &json!({}));
    let ToolOutcome::Failure(failure) = &outcome else {
        panic!()
    };
    assert_eq!(failure.code, ErrorCode::ToolNotAvailable);
    assert_eq!(outcome.to_json()["code"], "TOOL_NOT_AVAILABLE");
}

#[test]
fn tool_schemas_are_openai_functions() {
    for domain in [retail(), airline()] {
        let env = domain.env(0);
        let schemas = env.tool_schemas();
        assert_eq!(schemas.len(), env.tools().len());
        for schema in &schemas {
            assert_eq!(schema["type"], "function");
            let function = &schema["function"];
            assert!(function["name"].is_string());
            assert!(!function["description"].as_str().unwrap().is_empty());
            assert_eq!(function["parameters"]["type"], "object");
            let required = function["parameters"]["required"].as_array().unwrap();
            let properties = function["parameters"]["properties"].as_object().unwrap();
            assert_eq!(required.len(), properties.len(), "{}", function["name"]);
        }
    }
    let names: Vec<String> = retail()
        .tools()
        .specs()
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(names.len(), 16);
    assert_eq!(airline().tools().specs().len(), 14);
    let writes: Vec<&str> = airline()
        .tools()
        .specs()
        .iter()
        .filter(|s| s.mutates_state)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        writes,
        [
            "book_reservation",
            "cancel_reservation",
            "send_certificate",
            "update_reservation_baggages",
            "update_reservation_flights",
            "update_reservation_passengers"
        ]
    );
}

#[test]
fn clones_are_independent_and_reset_restores_the_start() {
    let domain = retail();
    let mut env = domain.env(7);
    let initial = env.state_hash();
    assert_eq!(initial, domain.initial_db().hash());
    assert_eq!(initial, env.state_hash(), "hash is stable");
    let snapshot: Box<dyn Environment> = env.box_clone();
    let outcome = env.call(
        "cancel_pending_order",
        &json!({"order_id": "#W6779827", "reason": "no longer needed"}),
    );
    assert!(!outcome.is_failure());
    let changed = env.state_hash();
    assert_ne!(changed, initial);
    assert_eq!(changed, env.db().hash(), "cached and full hashing agree");
    assert_eq!(
        snapshot.state_hash(),
        initial,
        "the clone kept the old state"
    );
    let mut replay = snapshot.clone();
    replay.call(
        "cancel_pending_order",
        &json!({"order_id": "#W6779827", "reason": "no longer needed"}),
    );
    assert_eq!(
        replay.state_hash(),
        changed,
        "replaying on the clone gives the same state"
    );
    env.reset(3);
    assert_eq!(env.state_hash(), initial);
    assert_eq!(env.seed(), 3);
    assert_eq!(env.name(), "tau2/retail");
}

#[test]
fn environments_for_tasks() {
    let domain = airline();
    let env = domain.env_for_task("7", 42).unwrap();
    assert_eq!(env.seed(), 42);
    assert_eq!(env.state_hash(), domain.initial_db().hash());
    let err = domain
        .env_for_task("no-such-task", 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no task has id \"no-such-task\""), "{err}");
    assert!(err.contains("tasks.json"), "{err}");
}

#[test]
fn a_missing_data_folder_is_an_error_naming_it() {
    let err = envace::env::tau2::Tau2Domain::load(
        envace::env::tau2::DomainKind::Retail,
        "/nonexistent/tau2/retail",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "τ²-bench data /nonexistent/tau2/retail: the retail domain folder does not exist"
    );
}
