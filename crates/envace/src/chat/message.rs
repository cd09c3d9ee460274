//! The engine's one chat vocabulary: who sent a message ([`Role`]) and the message itself
//! ([`Message`]), shared by task oracles, judges, rollout records and τ²-bench grading.

use serde::{Deserialize, Serialize};

/// Who sent a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system turn: instructions and the tool list.
    System,
    /// The user's request (or a rehearsal memory shown as a user turn).
    User,
    /// The agent: text and `<tool_call>` blocks.
    Assistant,
    /// A rendered tool response.
    Tool,
}

impl Role {
    /// The role as chat templates and the OpenAI wire format name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// The role named `name` (`system`, `user`, `assistant` or `tool`), if it is one.
    pub fn parse(name: &str) -> Option<Role> {
        [Role::System, Role::User, Role::Assistant, Role::Tool]
            .into_iter()
            .find(|role| role.as_str() == name)
    }
}

/// One chat message: its sender and its text exactly as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Sender.
    pub role: Role,
    /// The text exactly as the model sees it.
    pub content: String,
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_through_their_names_and_json() {
        for role in [Role::System, Role::User, Role::Assistant, Role::Tool] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{}\"", role.as_str()));
            assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), role);
        }
        assert_eq!(Role::parse("rehearse"), None);
        let message = Message::new(Role::Tool, "42");
        let json = serde_json::to_string(&message).unwrap();
        assert_eq!(json, r#"{"role":"tool","content":"42"}"#);
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), message);
    }
}
