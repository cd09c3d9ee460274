//! BFCL's `MessageAPI`: a workspace of users who log in, send, search and delete messages,
//! with message ids drawn from a seeded `random.Random` and kept in a set laid out as CPython
//! lays it out, so that they list in Python's order.

use serde_json::{Map, Value};

use super::pyops::{self, Config, Key, dict_get, error, int_value, object, str_of};
use super::pyrandom::PyRandom;
use super::{Args, Backend, Method, Outcome, Raised, req};
use crate::error::Result;

const CLASS: &str = "MessageAPI";

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "list_users",
        params: &[],
    },
    Method {
        name: "get_user_id",
        params: &[req("user")],
    },
    Method {
        name: "message_login",
        params: &[req("user_id")],
    },
    Method {
        name: "message_get_login_status",
        params: &[],
    },
    Method {
        name: "send_message",
        params: &[req("receiver_id"), req("message")],
    },
    Method {
        name: "delete_message",
        params: &[req("receiver_id")],
    },
    Method {
        name: "view_messages_sent",
        params: &[],
    },
    Method {
        name: "add_contact",
        params: &[req("user_name")],
    },
    Method {
        name: "search_messages",
        params: &[req("keyword")],
    },
    Method {
        name: "get_message_stats",
        params: &[],
    },
];

/// The seed `_load_scenario` uses when the task gives none.
const DEFAULT_SEED: i128 = 200_191;

/// The message ids drawn so far: a Python `set` of ints, or the list a task put in its
/// `generated_ids` (JSON has no sets; Python keeps the list, and adding to it then fails).
#[derive(Clone, Debug)]
enum Ids {
    Set(IntSet),
    List(Vec<Value>),
}

/// The instance: its public attributes and its random generator.
pub struct MessageApi {
    random: PyRandom,
    generated_ids: Ids,
    user_count: i128,
    /// User name → user id, in insertion order (names added by `add_contact` may be any
    /// hashable value, as in Python).
    user_map: Vec<(Key, String)>,
    /// Each message as a one-entry dict `{receiver_id: message}`.
    inbox: Vec<Map<String, Value>>,
    message_count: i128,
    current_user: Value,
}

impl MessageApi {
    /// `_load_scenario(config)`: the task's values, the module defaults for the rest.
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let config = Config::new(CLASS, config);
        let generated_ids = match config.list("generated_ids")? {
            None => Ids::Set(IntSet::new()),
            Some(items) => Ids::List(items.clone()),
        };
        let user_map = match config.object_of("user_map", "a user id string", Value::is_string)? {
            None => [
                ("Alice", "USR001"),
                ("Bob", "USR002"),
                ("Catherine", "USR003"),
                ("Daniel", "USR004"),
            ]
            .iter()
            .map(|(name, id)| (Key::Str((*name).to_owned()), (*id).to_owned()))
            .collect(),
            Some(map) => map
                .iter()
                .map(|(name, id)| (Key::Str(name.clone()), str_of(id)))
                .collect(),
        };
        let inbox = match config.list_of_objects("inbox")? {
            None => [
                ("USR002", "My name is Alice. I want to connect."),
                ("USR003", "Could you upload the file?"),
                ("USR004", "Could you upload the file?"),
            ]
            .iter()
            .map(|(to, text)| {
                let mut one = Map::new();
                one.insert((*to).to_owned(), Value::from(*text));
                one
            })
            .collect(),
            Some(items) => items,
        };
        Ok(MessageApi {
            random: PyRandom::new(config.seed(DEFAULT_SEED)?),
            generated_ids,
            user_count: config.int("user_count", 4)?,
            user_map,
            inbox,
            message_count: config.int("message_count", 3)?,
            current_user: config.value("current_user", Value::Null),
        })
    }

    fn logged_in(&self) -> bool {
        pyops::truthy(&self.current_user)
    }

    /// `_generate_id`: draws until the id is new, then records it.
    fn generate_id(&mut self) -> Outcome {
        let mut new_id = self.random.randint(10_000, 99_999);
        while self.generated_ids.contains(new_id) {
            new_id = self.random.randint(10_000, 99_999);
        }
        match &mut self.generated_ids {
            Ids::Set(set) => set.add(new_id),
            Ids::List(_) => return Err("'list' object has no attribute 'add'".into()),
        }
        Ok(object([("new_id", Value::from(new_id))]))
    }

    fn get_user_id(&self, user: &Value) -> Outcome {
        let key = Key::from_value(user)?;
        match dict_get(&self.user_map, &key) {
            Some(id) => Ok(object([("user_id", id.as_str())])),
            None => error(format!(
                "User '{}' not found in the workspace.",
                str_of(user)
            )),
        }
    }

    fn message_login(&mut self, user_id: &Value) -> Outcome {
        if !self
            .user_map
            .iter()
            .any(|(_, id)| pyops::eq(user_id, &Value::from(id.as_str())))
        {
            return Ok(object([
                ("login_status", Value::Bool(false)),
                (
                    "message",
                    Value::from(format!("User ID '{}' not found.", str_of(user_id))),
                ),
            ]));
        }
        self.current_user = user_id.clone();
        Ok(object([
            ("login_status", Value::Bool(true)),
            (
                "message",
                Value::from(format!(
                    "User '{}' logged in successfully.",
                    str_of(user_id)
                )),
            ),
        ]))
    }

    fn send_message(&mut self, receiver_id: &Value, message: &Value) -> Outcome {
        if !self.logged_in() {
            return error("No user is currently logged in.");
        }
        // Only a string equals one of the (string) user ids, so a receiver that passes is one.
        let receiver = match receiver_id {
            Value::String(id) if self.user_map.iter().any(|(_, known)| known == id) => id.clone(),
            _ => {
                return error(format!("Receiver ID '{}' not found.", str_of(receiver_id)));
            }
        };
        let message_id = self.generate_id()?;
        let mut one = Map::new();
        one.insert(receiver.clone(), message.clone());
        self.inbox.push(one);
        self.message_count += 1;
        Ok(object([
            ("sent_status", Value::Bool(true)),
            ("message_id", message_id),
            (
                "message",
                Value::from(format!("Message sent to '{receiver}' successfully.")),
            ),
        ]))
    }

    fn delete_message(&mut self, receiver_id: &Value) -> Outcome {
        if !self.logged_in() {
            return error("No user is currently logged in.");
        }
        let mut found = None;
        for message in self.inbox.iter().rev() {
            let (receiver, _) = first_item(message)?;
            if pyops::eq(&Value::from(receiver.as_str()), receiver_id) {
                found = Some((message.clone(), receiver.clone()));
                break;
            }
        }
        let Some((message, receiver)) = found else {
            return error(format!("Receiver ID {} not found.", str_of(receiver_id)));
        };
        // `list.remove` drops the first message equal to the one found, not that one.
        let as_value = Value::Object(message);
        if let Some(at) = self
            .inbox
            .iter()
            .position(|m| pyops::eq(&Value::Object(m.clone()), &as_value))
        {
            self.inbox.remove(at);
        }
        Ok(object([
            ("deleted_status", Value::Bool(true)),
            ("receiver_id", Value::from(receiver)),
            (
                "message",
                Value::from(format!(
                    "Receiver {}'s latest message deleted successfully.",
                    str_of(receiver_id)
                )),
            ),
        ]))
    }

    fn view_messages_sent(&self) -> Outcome {
        if !self.logged_in() {
            return error("No user is currently logged in.");
        }
        let mut sent: Map<String, Value> = Map::new();
        for message in &self.inbox {
            let (receiver, content) = first_item(message)?;
            match sent.get_mut(receiver) {
                Some(Value::Array(list)) => list.push(content.clone()),
                _ => {
                    sent.insert(receiver.clone(), Value::Array(vec![content.clone()]));
                }
            }
        }
        Ok(object([("messages", Value::Object(sent))]))
    }

    fn add_contact(&mut self, user_name: &Value) -> Outcome {
        let key = Key::from_value(user_name)?;
        if dict_get(&self.user_map, &key).is_some() {
            return error(format!("User name '{}' already exists.", str_of(user_name)));
        }
        self.user_count += 1;
        let user_id = format!("USR{}", zfill(&self.user_count.to_string(), 3));
        if self.user_map.iter().any(|(_, id)| *id == user_id) {
            return error(format!("User ID '{user_id}' already exists."));
        }
        self.user_map.push((key, user_id.clone()));
        Ok(object([
            ("added_status", Value::Bool(true)),
            ("user_id", Value::from(user_id)),
            (
                "message",
                Value::from(format!(
                    "Contact '{}' added successfully.",
                    str_of(user_name)
                )),
            ),
        ]))
    }

    fn search_messages(&self, keyword: &Value) -> Outcome {
        if !self.logged_in() {
            return error("No user is currently logged in.");
        }
        let keyword = pyops::lower(keyword)?;
        let mut results = Vec::new();
        for message in &self.inbox {
            let (receiver, content) = first_item(message)?;
            if pyops::lower(content)?.contains(&keyword) {
                results.push(object([
                    ("receiver_id", Value::from(receiver.as_str())),
                    ("message", content.clone()),
                ]));
            }
        }
        Ok(object([("results", Value::Array(results))]))
    }

    fn get_message_stats(&self) -> Outcome {
        if !self.logged_in() {
            return error("No user is currently logged in.");
        }
        let mut received_count = 0usize;
        let mut contacts: Vec<&String> = Vec::new();
        for message in &self.inbox {
            let (receiver, _) = first_item(message)?;
            received_count += 1;
            if !contacts.contains(&receiver) {
                contacts.push(receiver);
            }
        }
        Ok(object([(
            "stats",
            object([
                ("received_count", Value::from(received_count)),
                ("total_contacts", Value::from(contacts.len())),
            ]),
        )]))
    }
}

impl Backend for MessageApi {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        match method {
            "list_users" => Ok(object([(
                "user_list",
                Value::Array(self.user_map.iter().map(|(k, _)| k.to_value()).collect()),
            )])),
            "get_user_id" => self.get_user_id(args.value("user")),
            "message_login" => self.message_login(args.value("user_id")),
            "message_get_login_status" => {
                Ok(object([("login_status", Value::Bool(self.logged_in()))]))
            }
            "send_message" => self.send_message(args.value("receiver_id"), args.value("message")),
            "delete_message" => self.delete_message(args.value("receiver_id")),
            "view_messages_sent" => self.view_messages_sent(),
            "add_contact" => self.add_contact(args.value("user_name")),
            "search_messages" => self.search_messages(args.value("keyword")),
            "get_message_stats" => self.get_message_stats(),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let mut state = Map::new();
        let ids = match &self.generated_ids {
            Ids::Set(set) => set.iter().map(Value::from).collect(),
            Ids::List(items) => items.clone(),
        };
        state.insert("generated_ids".into(), Value::Array(ids));
        state.insert("user_count".into(), int_value(self.user_count));
        state.insert(
            "user_map".into(),
            Value::Object(pyops::dict_state(&self.user_map, |id| {
                Value::from(id.as_str())
            })),
        );
        state.insert(
            "inbox".into(),
            Value::Array(self.inbox.iter().cloned().map(Value::Object).collect()),
        );
        state.insert("message_count".into(), int_value(self.message_count));
        state.insert("current_user".into(), self.current_user.clone());
        state
    }
}

impl Ids {
    fn contains(&self, id: i64) -> bool {
        match self {
            Ids::Set(set) => set.contains(id),
            Ids::List(items) => items.iter().any(|v| pyops::eq(v, &Value::from(id))),
        }
    }
}

/// `list(message.items())[0]` of an inbox entry.
fn first_item(message: &Map<String, Value>) -> std::result::Result<(&String, &Value), Raised> {
    message
        .iter()
        .next()
        .ok_or_else(|| "list index out of range".to_owned())
}

/// `str.zfill(width)`: zeros after any sign up to `width` characters.
fn zfill(text: &str, width: usize) -> String {
    let len = text.chars().count();
    if len >= width {
        return text.to_owned();
    }
    let (sign, digits) = match text.strip_prefix(['-', '+']) {
        Some(rest) => (&text[..1], rest),
        None => ("", text),
    };
    format!("{sign}{}{digits}", "0".repeat(width - len))
}

/// A CPython `set` of small non-negative ints, laid out as CPython lays it out, so that
/// iterating it gives Python's order (an int's hash is the int itself; 8 slots to start;
/// nine linear probes, then perturbed jumps; the table grows fourfold when three fifths
/// full).
#[derive(Clone, Debug)]
struct IntSet {
    table: Vec<Option<i64>>,
    used: usize,
}

impl IntSet {
    const LINEAR_PROBES: usize = 9;
    const PERTURB_SHIFT: u32 = 5;

    fn new() -> IntSet {
        IntSet {
            table: vec![None; 8],
            used: 0,
        }
    }

    fn contains(&self, x: i64) -> bool {
        self.table.contains(&Some(x))
    }

    fn add(&mut self, x: i64) {
        if self.contains(x) {
            return;
        }
        Self::insert_clean(&mut self.table, x);
        self.used += 1;
        let mask = self.table.len() - 1;
        if self.used * 5 >= mask * 3 {
            let min_used = if self.used > 50_000 {
                self.used * 2
            } else {
                self.used * 4
            };
            let mut size = 8;
            while size <= min_used {
                size <<= 1;
            }
            let old = std::mem::replace(&mut self.table, vec![None; size]);
            for x in old.into_iter().flatten() {
                Self::insert_clean(&mut self.table, x);
            }
        }
    }

    fn insert_clean(table: &mut [Option<i64>], x: i64) {
        let mask = table.len() - 1;
        // The hash as CPython's size_t.
        let hash = x as u64;
        let mut perturb = hash;
        let mut i = (hash as usize) & mask;
        loop {
            let probes = if i + Self::LINEAR_PROBES <= mask {
                Self::LINEAR_PROBES
            } else {
                0
            };
            if let Some(slot) = table[i..=i + probes].iter_mut().find(|s| s.is_none()) {
                *slot = Some(x);
                return;
            }
            perturb >>= Self::PERTURB_SHIFT;
            i = (i
                .wrapping_mul(5)
                .wrapping_add(1)
                .wrapping_add(perturb as usize))
                & mask;
        }
    }

    /// The members in Python's iteration order.
    fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.table.iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pyops::harness;
    use super::*;
    use serde_json::json;

    fn api(config: Value) -> MessageApi {
        let Value::Object(map) = config else {
            panic!("not an object")
        };
        MessageApi::load(&map).unwrap()
    }

    fn call(api: &mut MessageApi, method: &str, args: Value) -> String {
        harness::call(api, method, args)
    }

    #[test]
    fn set_order_matches_cpython() {
        // CPython 3.11: s = set(); for x in [67410, 41772, 24547, 10001, 10009, 10017, 99999,
        // 50000, 12345]: s.add(x) -> list(s) == [10017, 24547, 12345, 41772, 50000, 10001,
        // 67410, 10009, 99999]
        let mut set = IntSet::new();
        for x in [
            67410, 41772, 24547, 10001, 10009, 10017, 99999, 50000, 12345,
        ] {
            set.add(x);
        }
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [
                10017, 24547, 12345, 41772, 50000, 10001, 67410, 10009, 99999
            ]
        );
    }

    #[test]
    fn set_order_survives_growth_as_in_cpython() {
        // CPython 3.11: r = random.Random(5); s = set(); 23 times s.add(r.randint(10000,
        // 99999)) (the table grows at the 5th and the 19th) -> list(s) as below.
        let mut r = PyRandom::new(5);
        let mut set = IntSet::new();
        for _ in 0..23 {
            set.add(r.randint(10_000, 99_999));
        }
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [
                59906, 24838, 38407, 63497, 42643, 16796, 56993, 42680, 71481, 23365, 11718, 42318,
                95062, 43481, 30558, 95463, 13801, 58731, 85227, 79473, 71030, 81271, 91644
            ]
        );
    }

    #[test]
    fn delete_removes_the_first_equal_message() {
        // Python: inbox [{'USR002': 'hi'}, {'USR003': 'x'}, {'USR002': 'hi'}], then
        // delete_message('USR002') leaves [{'USR003': 'x'}, {'USR002': 'hi'}].
        let mut api = api(json!({
            "current_user": "USR001",
            "inbox": [{"USR002": "hi"}, {"USR003": "x"}, {"USR002": "hi"}],
        }));
        call(&mut api, "delete_message", json!({"receiver_id": "USR002"}));
        assert_eq!(
            api.state()["inbox"],
            json!([{"USR003": "x"}, {"USR002": "hi"}])
        );
    }

    #[test]
    fn contacts_with_odd_names_and_errors_read_as_in_python() {
        // Python: add_contact(user_name=5) -> {"added_status": true, "user_id": "USR005",
        // "message": "Contact '5' added successfully."}; list_users() then ends with 5;
        // get_user_id(user=[1]) raises "unhashable type: 'list'"; search_messages(keyword=3)
        // when logged in raises "'int' object has no attribute 'lower'".
        let mut api = api(json!({"current_user": "USR001"}));
        assert_eq!(
            call(&mut api, "add_contact", json!({"user_name": 5})),
            r#"{"added_status": true, "user_id": "USR005", "message": "Contact '5' added successfully."}"#
        );
        assert_eq!(
            call(&mut api, "list_users", json!({})),
            r#"{"user_list": ["Alice", "Bob", "Catherine", "Daniel", 5]}"#
        );
        assert_eq!(
            call(&mut api, "get_user_id", json!({"user": 5.0})),
            r#"{"user_id": "USR005"}"#
        );
        assert_eq!(
            call(&mut api, "get_user_id", json!({"user": [1]})),
            "Error during execution: unhashable type: 'list'"
        );
        assert_eq!(
            call(&mut api, "search_messages", json!({"keyword": 3})),
            "Error during execution: 'int' object has no attribute 'lower'"
        );
        assert_eq!(api.state()["user_map"]["5"], json!("USR005"));
    }

    #[test]
    fn sending_draws_ids_as_python_does() {
        // Python with the default seed: two send_message calls give new_id 67410 then 41772.
        let mut api = api(json!({"current_user": "USR001"}));
        let first = call(
            &mut api,
            "send_message",
            json!({"receiver_id": "USR002", "message": "a"}),
        );
        assert!(
            first.contains(r#""message_id": {"new_id": 67410}"#),
            "{first}"
        );
        let second = call(
            &mut api,
            "send_message",
            json!({"receiver_id": "USR003", "message": "b"}),
        );
        assert!(second.contains(r#""new_id": 41772"#), "{second}");
        assert_eq!(api.state()["generated_ids"], json!([67410, 41772]));
        assert_eq!(api.state()["message_count"], json!(5));
    }

    #[test]
    fn zfill_keeps_the_sign_first() {
        assert_eq!(zfill("5", 3), "005");
        assert_eq!(zfill("-5", 3), "-05");
        assert_eq!(zfill("1234", 3), "1234");
    }
}
