//! BFCL's `TicketAPI` rebuilt natively: a support-ticket queue with a logged-in user, where
//! tickets are created, looked up, edited, resolved and closed.

use serde_json::{Map, Value, json};

use super::pyops::{self, Config, Op, str_of, truthy};
use super::{Args, Backend, Method, Outcome, opt, req};
use crate::error::Result;

const CLASS: &str = "TicketAPI";

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "create_ticket",
        params: &[req("title"), opt("description"), opt("priority")],
    },
    Method {
        name: "get_ticket",
        params: &[req("ticket_id")],
    },
    Method {
        name: "close_ticket",
        params: &[req("ticket_id")],
    },
    Method {
        name: "resolve_ticket",
        params: &[req("ticket_id"), req("resolution")],
    },
    Method {
        name: "edit_ticket",
        params: &[req("ticket_id"), req("updates")],
    },
    Method {
        name: "ticket_login",
        params: &[req("username"), req("password")],
    },
    Method {
        name: "ticket_get_login_status",
        params: &[],
    },
    Method {
        name: "logout",
        params: &[],
    },
    Method {
        name: "get_user_tickets",
        params: &[opt("status")],
    },
];

/// The fields `edit_ticket` may change.
const EDITABLE: [&str; 4] = ["title", "description", "status", "priority"];

/// The loaded backend: BFCL's public attributes, as they are given (any JSON value for the
/// counter and the user, as in Python).
pub struct TicketApi {
    ticket_queue: Vec<Map<String, Value>>,
    ticket_counter: Value,
    current_user: Value,
}

impl TicketApi {
    /// Loads `initial_config["TicketAPI"]` as BFCL's `_load_scenario` does: an empty queue,
    /// counter 1 and nobody logged in unless the configuration says otherwise.
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let config = Config::new(CLASS, config);
        Ok(TicketApi {
            ticket_queue: config.list_of_objects("ticket_queue")?.unwrap_or_default(),
            ticket_counter: config.value("ticket_counter", Value::from(1)),
            current_user: config.value("current_user", Value::Null),
        })
    }

    /// The first ticket whose `id` equals `ticket_id` (Python's `==`), or the `KeyError` text
    /// when a ticket before it has no `id`.
    fn find(
        &mut self,
        ticket_id: &Value,
    ) -> std::result::Result<Option<&mut Map<String, Value>>, String> {
        for ticket in &mut self.ticket_queue {
            if pyops::eq(pyops::item(ticket, "id")?, ticket_id) {
                return Ok(Some(ticket));
            }
        }
        Ok(None)
    }

    fn create_ticket(&mut self, args: &Args) -> Outcome {
        if !truthy(&self.current_user) {
            return Ok(json!({
                "error": "User not authenticated. Please log in to create a ticket."
            }));
        }
        let one = Value::from(1);
        let priority = args.get("priority").unwrap_or(&one);
        if pyops::compare(priority, "<", &one)? || pyops::compare(priority, ">", &Value::from(5))? {
            return Ok(json!({ "error": "Invalid priority. Priority must be between 1 and 5." }));
        }
        let ticket = json!({
            "id": self.ticket_counter,
            "title": args.value("title"),
            "description": args.get("description").cloned().unwrap_or(Value::from("")),
            "status": "Open",
            "priority": priority,
            "created_by": self.current_user,
        });
        if let Value::Object(map) = &ticket {
            self.ticket_queue.push(map.clone());
        }
        // Python appends the ticket before the counter's `+= 1`, which may raise.
        self.ticket_counter = pyops::arith(Op::Add, &self.ticket_counter, &one, true)?;
        Ok(ticket)
    }

    fn get_ticket(&mut self, args: &Args) -> Outcome {
        let ticket_id = args.value("ticket_id");
        match self.find(ticket_id)? {
            Some(ticket) => Ok(Value::Object(ticket.clone())),
            None => Ok(not_found(ticket_id)),
        }
    }

    /// `close_ticket` (`status` "Closed") and `resolve_ticket` ("Resolved", with a resolution).
    fn settle(&mut self, args: &Args, status: &str, resolution: Option<&Value>) -> Outcome {
        let ticket_id = args.value("ticket_id");
        let Some(ticket) = self.find(ticket_id)? else {
            return Ok(not_found(ticket_id));
        };
        let current = pyops::item(ticket, "status")?;
        let word = if status == "Closed" {
            "closed"
        } else {
            "resolved"
        };
        let id = str_of(ticket_id);
        if pyops::eq(current, &Value::from(status)) {
            return Ok(json!({ "error": format!("Ticket with ID {id} is already {word}.") }));
        }
        ticket.insert("status".into(), Value::from(status));
        if let Some(resolution) = resolution {
            ticket.insert("resolution".into(), resolution.clone());
        }
        Ok(json!({ "status": format!("Ticket {id} has been {word} successfully.") }))
    }

    fn edit_ticket(&mut self, args: &Args) -> Outcome {
        let ticket_id = args.value("ticket_id");
        let updates = args.value("updates");
        let Some(ticket) = self.find(ticket_id)? else {
            return Ok(not_found(ticket_id));
        };
        let Value::Object(updates) = updates else {
            return Err(pyops::no_attribute(updates, "keys"));
        };
        // Python joins a set here, whose order varies between runs; this keeps the given order.
        let invalid: Vec<&str> = updates
            .keys()
            .map(String::as_str)
            .filter(|k| !EDITABLE.contains(k))
            .collect();
        if !invalid.is_empty() {
            return Ok(json!({
                "error": format!("Invalid fields for update: {}", invalid.join(", "))
            }));
        }
        for (key, value) in updates {
            if !value.is_null() {
                ticket.insert(key.clone(), value.clone());
            }
        }
        Ok(json!({
            "status": format!("Ticket {} has been updated successfully.", str_of(ticket_id))
        }))
    }

    fn ticket_login(&mut self, args: &Args) -> Outcome {
        let username = args.value("username");
        if truthy(username) && truthy(args.value("password")) {
            self.current_user = username.clone();
            return Ok(json!({ "success": true }));
        }
        Ok(json!({ "success": false }))
    }

    fn logout(&mut self) -> Outcome {
        if truthy(&self.current_user) {
            self.current_user = Value::Null;
            return Ok(json!({ "success": true }));
        }
        Ok(json!({ "success": false }))
    }

    fn get_user_tickets(&self, args: &Args) -> Outcome {
        if !truthy(&self.current_user) {
            return Ok(
                json!([{ "error": "User not authenticated. Please log in to view tickets." }]),
            );
        }
        let mut mine = Vec::new();
        for ticket in &self.ticket_queue {
            if pyops::eq(pyops::item(ticket, "created_by")?, &self.current_user) {
                mine.push(ticket);
            }
        }
        let status = args.get("status").unwrap_or(&Value::Null);
        if truthy(status) {
            let mut kept = Vec::new();
            for ticket in mine {
                if pyops::lower(pyops::item(ticket, "status")?)? == pyops::lower(status)? {
                    kept.push(ticket);
                }
            }
            mine = kept;
        }
        Ok(Value::Array(
            mine.into_iter().map(|t| Value::Object(t.clone())).collect(),
        ))
    }
}

/// The answer for a ticket id that matches no ticket.
fn not_found(ticket_id: &Value) -> Value {
    json!({ "error": format!("Ticket with ID {} not found.", str_of(ticket_id)) })
}

impl Backend for TicketApi {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        match method {
            "create_ticket" => self.create_ticket(args),
            "get_ticket" => self.get_ticket(args),
            "close_ticket" => self.settle(args, "Closed", None),
            "resolve_ticket" => {
                let resolution = args.value("resolution").clone();
                self.settle(args, "Resolved", Some(&resolution))
            }
            "edit_ticket" => self.edit_ticket(args),
            "ticket_login" => self.ticket_login(args),
            "ticket_get_login_status" => Ok(json!({ "login_status": truthy(&self.current_user) })),
            "logout" => self.logout(),
            "get_user_tickets" => self.get_user_tickets(args),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let mut state = Map::new();
        state.insert(
            "ticket_queue".into(),
            Value::Array(
                self.ticket_queue
                    .iter()
                    .cloned()
                    .map(Value::Object)
                    .collect(),
            ),
        );
        state.insert("ticket_counter".into(), self.ticket_counter.clone());
        state.insert("current_user".into(), self.current_user.clone());
        state
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::pyops::harness::run;
    use super::CLASS;

    // Each expected text below is what BFCL's Python class printed for the same call
    // (CPython 3.11, through the harness's `execute_multi_turn_func_call`).

    #[test]
    fn priorities_and_ids_compare_as_in_python() {
        let (results, state) = run(
            CLASS,
            json!({}),
            &[
                "create_ticket('t')",
                "get_user_tickets()",
                "ticket_login('', 'p')",
                "ticket_login('u', 'p')",
                "create_ticket('t', priority='3')",
                "create_ticket('t', priority=None)",
                "create_ticket('t', priority=0)",
                "create_ticket('t', priority=2.5)",
                "create_ticket('t', priority=True)",
                "get_ticket(1.0)",
                "get_ticket('1')",
                "close_ticket(2)",
                "close_ticket(2)",
                "resolve_ticket(2, 'done')",
                "resolve_ticket(2, 'again')",
            ],
        );
        assert_eq!(
            results,
            [
                r#"{"error": "User not authenticated. Please log in to create a ticket."}"#,
                "[{'error': 'User not authenticated. Please log in to view tickets.'}]",
                r#"{"success": false}"#,
                r#"{"success": true}"#,
                "Error during execution: '<' not supported between instances of 'str' and 'int'",
                "Error during execution: '<' not supported between instances of 'NoneType' and 'int'",
                r#"{"error": "Invalid priority. Priority must be between 1 and 5."}"#,
                r#"{"id": 1, "title": "t", "description": "", "status": "Open", "priority": 2.5, "created_by": "u"}"#,
                r#"{"id": 2, "title": "t", "description": "", "status": "Open", "priority": true, "created_by": "u"}"#,
                r#"{"id": 1, "title": "t", "description": "", "status": "Open", "priority": 2.5, "created_by": "u"}"#,
                r#"{"error": "Ticket with ID 1 not found."}"#,
                r#"{"status": "Ticket 2 has been closed successfully."}"#,
                r#"{"error": "Ticket with ID 2 is already closed."}"#,
                r#"{"status": "Ticket 2 has been resolved successfully."}"#,
                r#"{"error": "Ticket with ID 2 is already resolved."}"#,
            ]
        );
        assert_eq!(state["ticket_counter"], json!(3));
        assert_eq!(state["ticket_queue"][1]["resolution"], json!("done"));
    }

    #[test]
    fn edits_and_filters_fail_where_python_fails() {
        let (results, _) = run(
            CLASS,
            json!({"current_user": "u"}),
            &[
                "create_ticket('a')",
                "edit_ticket(1, {'title': 'new', 'status': None, 'priority': 9})",
                "edit_ticket(1, {'owner': 'x'})",
                "edit_ticket(1, ['title'])",
                "edit_ticket(77, ['title'])",
                "get_user_tickets('OPEN')",
                "get_user_tickets('closed')",
                "get_user_tickets(5)",
            ],
        );
        assert_eq!(
            results[1..],
            [
                r#"{"status": "Ticket 1 has been updated successfully."}"#,
                r#"{"error": "Invalid fields for update: owner"}"#,
                "Error during execution: 'list' object has no attribute 'keys'",
                r#"{"error": "Ticket with ID 77 not found."}"#,
                "[{'id': 1, 'title': 'new', 'description': '', 'status': 'Open', 'priority': 9, 'created_by': 'u'}]",
                "[]",
                "Error during execution: 'int' object has no attribute 'lower'",
            ]
        );
    }

    #[test]
    fn odd_configurations_raise_at_call_time() {
        // A ticket without `id` or `created_by`, and a counter that cannot be incremented:
        // Python appends the new ticket before `+= 1` raises.
        let (results, state) = run(
            CLASS,
            json!({
                "ticket_queue": [{"id": 1, "created_by": "u", "status": 5}, {"title": "no id"}],
                "current_user": "u",
                "ticket_counter": "7",
            }),
            &["get_ticket(2)", "get_user_tickets()", "create_ticket('t')"],
        );
        assert_eq!(
            results,
            [
                "Error during execution: 'id'",
                "Error during execution: 'created_by'",
                "Error during execution: can only concatenate str (not \"int\") to str",
            ]
        );
        assert_eq!(state["ticket_queue"][2]["id"], json!("7"));
        assert_eq!(state["ticket_counter"], json!("7"));
        let (results, _) = run(
            CLASS,
            json!({"current_user": "u", "ticket_counter": [1]}),
            &["create_ticket('t')"],
        );
        assert_eq!(
            results,
            ["Error during execution: 'int' object is not iterable"]
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        for config in [json!({"ticket_queue": {}}), json!({"ticket_queue": [1]})] {
            let map = config.as_object().unwrap();
            assert!(super::TicketApi::load(map).is_err(), "{config}");
        }
    }
}
