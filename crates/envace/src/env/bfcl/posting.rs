//! BFCL's `TwitterAPI`: one user's account that authenticates, posts, retweets, comments,
//! mentions and follows, with tweets kept by integer id.

use serde_json::{Map, Value};

use super::pyops::{
    self, Config, Key, dict_get, dict_set, dict_state, error, int_value, iterate, lower, object,
    str_of,
};
use super::{Args, Backend, Method, Outcome, Raised, opt, req};
use crate::error::Result;

const CLASS: &str = "TwitterAPI";

/// Its public methods.
pub const METHODS: &[Method] = &[
    Method {
        name: "authenticate_twitter",
        params: &[req("username"), req("password")],
    },
    Method {
        name: "posting_get_login_status",
        params: &[],
    },
    Method {
        name: "post_tweet",
        params: &[req("content"), opt("tags"), opt("mentions")],
    },
    Method {
        name: "retweet",
        params: &[req("tweet_id")],
    },
    Method {
        name: "comment",
        params: &[req("tweet_id"), req("comment_content")],
    },
    Method {
        name: "mention",
        params: &[req("tweet_id"), req("mentioned_usernames")],
    },
    Method {
        name: "follow_user",
        params: &[req("username_to_follow")],
    },
    Method {
        name: "list_all_following",
        params: &[],
    },
    Method {
        name: "unfollow_user",
        params: &[req("username_to_unfollow")],
    },
    Method {
        name: "get_tweet",
        params: &[req("tweet_id")],
    },
    Method {
        name: "get_user_tweets",
        params: &[req("username")],
    },
    Method {
        name: "search_tweets",
        params: &[req("keyword")],
    },
    Method {
        name: "get_tweet_comments",
        params: &[req("tweet_id")],
    },
    Method {
        name: "get_user_stats",
        params: &[req("username")],
    },
];

/// A stored tweet: its dict, and whether its `mentions` is the instance's shared default list.
///
/// `post_tweet`'s `mentions` defaults to one list object that every tweet posted without
/// mentions holds, so `mention` on one of them extends the list they (and later such tweets)
/// all show. Python shares that list across the whole process; here it is shared within the
/// instance.
#[derive(Clone, Debug)]
struct Tweet {
    fields: Map<String, Value>,
    default_mentions: bool,
}

/// The instance: its public attributes, plus the shared default `mentions` list.
pub struct TwitterApi {
    username: Value,
    password: Value,
    authenticated: Value,
    tweets: Vec<(Key, Tweet)>,
    comments: Vec<(Key, Vec<Value>)>,
    retweets: Vec<(Key, Vec<Value>)>,
    following_list: Vec<Value>,
    tweet_counter: i128,
    default_mentions: Vec<Value>,
}

/// Python's `int(text)` for a decimal string (whitespace around, a sign, `_` between digits).
fn parse_int(text: &str) -> Option<i128> {
    let (negative, digits) = pyops::int_literal(text)?;
    let magnitude: i128 = digits.parse().ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// A config entry that must be an object of lists (`comments`, `retweets`), keys as given.
fn lists_by_key(config: Config, field: &str) -> Result<Vec<(Key, Vec<Value>)>> {
    let map = config.object_of(field, "a list", Value::is_array)?;
    Ok(map
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            (
                Key::Str(k.clone()),
                v.as_array().cloned().unwrap_or_default(),
            )
        })
        .collect())
}

impl TwitterApi {
    /// `_load_scenario(config)`: the task's values, the module defaults for the rest; tweet
    /// ids become ints.
    pub fn load(config: &Map<String, Value>) -> Result<Self> {
        let config = Config::new(CLASS, config);
        let mut tweets = Vec::new();
        for (k, v) in config
            .object_of("tweets", "an object", Value::is_object)?
            .into_iter()
            .flatten()
        {
            let id = parse_int(k).ok_or_else(|| {
                config.error(format!(
                    "`tweets` key {k:?}: invalid literal for int() with base 10: {}",
                    crate::env::pyjson::repr(&Value::from(k.as_str()))
                ))
            })?;
            let tweet = Tweet {
                fields: v.as_object().cloned().unwrap_or_default(),
                default_mentions: false,
            };
            dict_set(&mut tweets, Key::Int(id), tweet);
        }
        let following_list = match config.list("following_list")? {
            None => vec![Value::from("alice"), Value::from("bob")],
            Some(items) => items.clone(),
        };
        Ok(TwitterApi {
            username: config.value("username", Value::from("john")),
            password: config.value("password", Value::from("john123")),
            authenticated: config.value("authenticated", Value::Bool(false)),
            tweets,
            comments: lists_by_key(config, "comments")?,
            retweets: lists_by_key(config, "retweets")?,
            following_list,
            tweet_counter: config.int("tweet_counter", 0)?,
            default_mentions: Vec::new(),
        })
    }

    fn authenticated(&self) -> bool {
        pyops::truthy(&self.authenticated)
    }

    /// A tweet's dict as Python holds it now.
    fn tweet_value(&self, tweet: &Tweet) -> Value {
        let mut fields = tweet.fields.clone();
        if tweet.default_mentions {
            fields.insert(
                "mentions".into(),
                Value::Array(self.default_mentions.clone()),
            );
        }
        Value::Object(fields)
    }

    /// The index of the tweet `tweet_id` names, `None` when there is none, or the
    /// `TypeError` of an unhashable id.
    fn find_tweet(&self, tweet_id: &Value) -> std::result::Result<Option<usize>, Raised> {
        let key = Key::from_value(tweet_id)?;
        Ok(self.tweets.iter().position(|(k, _)| *k == key))
    }

    fn not_found(tweet_id: &Value) -> Outcome {
        error(format!("Tweet with ID {} not found.", str_of(tweet_id)))
    }

    fn authenticate(&mut self, username: &Value, password: &Value) -> Outcome {
        if pyops::eq(username, &self.username) && pyops::eq(password, &self.password) {
            self.authenticated = Value::Bool(true);
            return Ok(object([("authentication_status", Value::Bool(true))]));
        }
        Ok(object([("authentication_status", Value::Bool(false))]))
    }

    fn post_tweet(&mut self, args: &Args) -> Outcome {
        if !self.authenticated() {
            return error("User not authenticated. Please authenticate before posting.");
        }
        let mut fields = Map::new();
        fields.insert("id".into(), int_value(self.tweet_counter));
        fields.insert("username".into(), self.username.clone());
        fields.insert("content".into(), args.value("content").clone());
        fields.insert(
            "tags".into(),
            args.get("tags")
                .cloned()
                .unwrap_or(Value::Array(Vec::new())),
        );
        let mentions = args.get("mentions");
        fields.insert(
            "mentions".into(),
            mentions.cloned().unwrap_or(Value::Array(Vec::new())),
        );
        let tweet = Tweet {
            fields,
            default_mentions: mentions.is_none(),
        };
        let shown = self.tweet_value(&tweet);
        dict_set(&mut self.tweets, Key::Int(self.tweet_counter), tweet);
        self.tweet_counter += 1;
        Ok(shown)
    }

    fn retweet(&mut self, tweet_id: &Value) -> Outcome {
        if !self.authenticated() {
            return error("User not authenticated. Please authenticate before retweeting.");
        }
        if self.find_tweet(tweet_id)?.is_none() {
            return Self::not_found(tweet_id);
        }
        let me = Key::from_value(&self.username)?;
        if dict_get(&self.retweets, &me).is_none() {
            self.retweets.push((me.clone(), Vec::new()));
        }
        let Some((_, mine)) = self.retweets.iter_mut().find(|(k, _)| *k == me) else {
            return Err(me.key_error());
        };
        if mine.iter().any(|id| pyops::eq(id, tweet_id)) {
            return Ok(object([(
                "retweet_status",
                Value::from("Already retweeted"),
            )]));
        }
        mine.push(tweet_id.clone());
        Ok(object([(
            "retweet_status",
            Value::from("Successfully retweeted"),
        )]))
    }

    fn comment(&mut self, tweet_id: &Value, content: &Value) -> Outcome {
        if !self.authenticated() {
            return error("User not authenticated. Please authenticate before commenting.");
        }
        if self.find_tweet(tweet_id)?.is_none() {
            return Self::not_found(tweet_id);
        }
        let key = Key::from_value(tweet_id)?;
        let entry = object([
            ("username", self.username.clone()),
            ("content", content.clone()),
        ]);
        match self.comments.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(entry),
            None => self.comments.push((key, vec![entry])),
        }
        Ok(object([(
            "comment_status",
            Value::from("Comment added successfully"),
        )]))
    }

    fn mention(&mut self, tweet_id: &Value, usernames: &Value) -> Outcome {
        let Some(index) = self.find_tweet(tweet_id)? else {
            return Self::not_found(tweet_id);
        };
        let tweet = &mut self.tweets[index].1;
        let target = if tweet.default_mentions {
            &mut self.default_mentions
        } else {
            match tweet.fields.get_mut("mentions") {
                None => return Err(pyops::key_error(&Value::from("mentions"))),
                Some(Value::Array(list)) => list,
                Some(other) => return Err(pyops::no_attribute(other, "extend")),
            }
        };
        target.extend(iterate(usernames)?);
        Ok(object([(
            "mention_status",
            Value::from("Users mentioned successfully"),
        )]))
    }

    fn follow_user(&mut self, username: &Value) -> Outcome {
        if !self.authenticated() {
            return error("User not authenticated. Please authenticate before following.");
        }
        if self.following_list.iter().any(|u| pyops::eq(u, username)) {
            return Ok(object([("follow_status", Value::Bool(false))]));
        }
        self.following_list.push(username.clone());
        Ok(object([("follow_status", Value::Bool(true))]))
    }

    fn unfollow_user(&mut self, username: &Value) -> Outcome {
        if !self.authenticated() {
            return error("User not authenticated. Please authenticate before unfollowing.");
        }
        let Some(at) = self
            .following_list
            .iter()
            .position(|u| pyops::eq(u, username))
        else {
            return Ok(object([("unfollow_status", Value::Bool(false))]));
        };
        self.following_list.remove(at);
        Ok(object([("unfollow_status", Value::Bool(true))]))
    }

    fn get_tweet(&self, tweet_id: &Value) -> Outcome {
        match self.find_tweet(tweet_id)? {
            Some(index) => Ok(self.tweet_value(&self.tweets[index].1)),
            None => Self::not_found(tweet_id),
        }
    }

    /// The tweets whose `username` equals `username`.
    fn tweets_by(&self, username: &Value) -> std::result::Result<Vec<Value>, Raised> {
        let mut found = Vec::new();
        for (_, tweet) in &self.tweets {
            if pyops::eq(field(tweet, "username")?, username) {
                found.push(self.tweet_value(tweet));
            }
        }
        Ok(found)
    }

    fn search_tweets(&self, keyword: &Value) -> Outcome {
        let mut found = Vec::new();
        for (_, tweet) in &self.tweets {
            let keyword = lower(keyword)?;
            let content = lower(field(tweet, "content")?)?;
            let hit = content.contains(&keyword) || {
                let tags = iterate(field(tweet, "tags")?)?;
                let mut lowered = Vec::with_capacity(tags.len());
                for tag in &tags {
                    lowered.push(lower(tag)?);
                }
                lowered.contains(&keyword)
            };
            if hit {
                found.push(self.tweet_value(tweet));
            }
        }
        Ok(Value::Array(found))
    }

    fn get_tweet_comments(&self, tweet_id: &Value) -> Outcome {
        if self.find_tweet(tweet_id)?.is_none() {
            return Self::not_found(tweet_id);
        }
        let key = Key::from_value(tweet_id)?;
        Ok(Value::Array(
            dict_get(&self.comments, &key).cloned().unwrap_or_default(),
        ))
    }

    fn get_user_stats(&self, username: &Value) -> Outcome {
        let tweet_count = self.tweets_by(username)?.len();
        let following_count = if pyops::eq(username, &self.username) {
            self.following_list.len()
        } else {
            0
        };
        let key = Key::from_value(username)?;
        let retweet_count = dict_get(&self.retweets, &key).map_or(0, Vec::len);
        Ok(object([
            ("tweet_count", Value::from(tweet_count)),
            ("following_count", Value::from(following_count)),
            ("retweet_count", Value::from(retweet_count)),
        ]))
    }
}

/// `tweet[name]` (Python's `KeyError` when the tweet lacks it).
fn field<'a>(tweet: &'a Tweet, name: &str) -> std::result::Result<&'a Value, Raised> {
    pyops::item(&tweet.fields, name)
}

impl Backend for TwitterApi {
    fn class(&self) -> &'static str {
        CLASS
    }

    fn methods(&self) -> &'static [Method] {
        METHODS
    }

    fn call(&mut self, method: &str, args: &Args) -> Outcome {
        match method {
            "authenticate_twitter" => {
                self.authenticate(args.value("username"), args.value("password"))
            }
            "posting_get_login_status" => Ok(object([(
                "login_status",
                Value::Bool(self.authenticated()),
            )])),
            "post_tweet" => self.post_tweet(args),
            "retweet" => self.retweet(args.value("tweet_id")),
            "comment" => self.comment(args.value("tweet_id"), args.value("comment_content")),
            "mention" => self.mention(args.value("tweet_id"), args.value("mentioned_usernames")),
            "follow_user" => self.follow_user(args.value("username_to_follow")),
            "list_all_following" => {
                if !self.authenticated() {
                    return error(
                        "User not authenticated. Please authenticate before listing following.",
                    );
                }
                Ok(object([(
                    "following_list",
                    Value::Array(self.following_list.clone()),
                )]))
            }
            "unfollow_user" => self.unfollow_user(args.value("username_to_unfollow")),
            "get_tweet" => self.get_tweet(args.value("tweet_id")),
            "get_user_tweets" => self.tweets_by(args.value("username")).map(Value::Array),
            "search_tweets" => self.search_tweets(args.value("keyword")),
            "get_tweet_comments" => self.get_tweet_comments(args.value("tweet_id")),
            "get_user_stats" => self.get_user_stats(args.value("username")),
            other => Err(pyops::attribute_error(CLASS, other)),
        }
    }

    fn state(&self) -> Map<String, Value> {
        let mut state = Map::new();
        state.insert("username".into(), self.username.clone());
        state.insert("password".into(), self.password.clone());
        state.insert("authenticated".into(), self.authenticated.clone());
        state.insert(
            "tweets".into(),
            Value::Object(dict_state(&self.tweets, |t| self.tweet_value(t))),
        );
        state.insert(
            "comments".into(),
            Value::Object(dict_state(&self.comments, |c| Value::Array(c.clone()))),
        );
        state.insert(
            "retweets".into(),
            Value::Object(dict_state(&self.retweets, |r| Value::Array(r.clone()))),
        );
        state.insert(
            "following_list".into(),
            Value::Array(self.following_list.clone()),
        );
        state.insert("tweet_counter".into(), int_value(self.tweet_counter));
        state
    }
}

#[cfg(test)]
mod tests {
    use super::super::pyops::harness;
    use super::*;
    use serde_json::json;

    fn run(api: &mut TwitterApi, method: &str, args: Value) -> String {
        harness::call(api, method, args)
    }

    /// A sequence through odd arguments and the shared default `mentions` list; each expected
    /// text is what BFCL's Python class answered in a fresh process (CPython 3.11).
    #[test]
    fn odd_arguments_answer_as_python_does() {
        let Value::Object(config) = json!({
            "authenticated": true,
            "tweet_counter": 2,
            "tweets": {"0": {"id": 0, "username": "john", "content": "Hello", "tags": ["#Hi"], "mentions": []}},
            "comments": {"0": [{"username": "x", "content": "c"}]},
        }) else {
            unreachable!()
        };
        let mut t = TwitterApi::load(&config).unwrap();
        let steps: &[(&str, Value, &str)] = &[
            (
                "post_tweet",
                json!({"content": "first"}),
                r#"{"id": 2, "username": "john", "content": "first", "tags": [], "mentions": []}"#,
            ),
            (
                "post_tweet",
                json!({"content": "second", "tags": "#ab"}),
                r##"{"id": 3, "username": "john", "content": "second", "tags": "#ab", "mentions": []}"##,
            ),
            (
                "mention",
                json!({"tweet_id": 2, "mentioned_usernames": ["@a"]}),
                r#"{"mention_status": "Users mentioned successfully"}"#,
            ),
            (
                "get_tweet",
                json!({"tweet_id": 3}),
                r##"{"id": 3, "username": "john", "content": "second", "tags": "#ab", "mentions": ["@a"]}"##,
            ),
            (
                "mention",
                json!({"tweet_id": 3.0, "mentioned_usernames": "xy"}),
                r#"{"mention_status": "Users mentioned successfully"}"#,
            ),
            (
                "get_tweet",
                json!({"tweet_id": 2}),
                r#"{"id": 2, "username": "john", "content": "first", "tags": [], "mentions": ["@a", "x", "y"]}"#,
            ),
            (
                "mention",
                json!({"tweet_id": 0, "mentioned_usernames": 5}),
                "Error during execution: 'int' object is not iterable",
            ),
            (
                "get_tweet",
                json!({"tweet_id": "0"}),
                r#"{"error": "Tweet with ID 0 not found."}"#,
            ),
            (
                "get_tweet",
                json!({"tweet_id": [0]}),
                "Error during execution: unhashable type: 'list'",
            ),
            (
                "comment",
                json!({"tweet_id": 0, "comment_content": "new"}),
                r#"{"comment_status": "Comment added successfully"}"#,
            ),
            (
                "get_tweet_comments",
                json!({"tweet_id": 0}),
                "[{'username': 'john', 'content': 'new'}]",
            ),
            (
                "comment",
                json!({"tweet_id": true, "comment_content": "again"}),
                r#"{"error": "Tweet with ID True not found."}"#,
            ),
            (
                "retweet",
                json!({"tweet_id": 0.0}),
                r#"{"retweet_status": "Successfully retweeted"}"#,
            ),
            (
                "retweet",
                json!({"tweet_id": false}),
                r#"{"retweet_status": "Already retweeted"}"#,
            ),
            (
                "search_tweets",
                json!({"keyword": "A"}),
                "[{'id': 3, 'username': 'john', 'content': 'second', 'tags': '#ab', 'mentions': ['@a', 'x', 'y']}]",
            ),
            (
                "search_tweets",
                json!({"keyword": 3}),
                "Error during execution: 'int' object has no attribute 'lower'",
            ),
            (
                "get_user_stats",
                json!({"username": "john"}),
                r#"{"tweet_count": 3, "following_count": 2, "retweet_count": 1}"#,
            ),
            (
                "follow_user",
                json!({"username_to_follow": "carol"}),
                r#"{"follow_status": true}"#,
            ),
            (
                "unfollow_user",
                json!({"username_to_unfollow": "alice"}),
                r#"{"unfollow_status": true}"#,
            ),
        ];
        harness::script(&mut t, steps);
        let state = t.state();
        // The config's comment key "0" and the int key 0 print alike; the later one's list
        // shows, in the earlier one's place.
        assert_eq!(
            state["comments"],
            json!({"0": [{"username": "john", "content": "new"}]})
        );
        assert_eq!(state["retweets"], json!({"john": [0.0]}));
        assert_eq!(state["following_list"], json!(["bob", "carol"]));
        assert_eq!(state["tweet_counter"], json!(4));
        assert_eq!(state["tweets"]["3"]["mentions"], json!(["@a", "x", "y"]));
    }

    #[test]
    fn empty_account_answers_as_python_does() {
        // Python: with no tweets, search_tweets(keyword=3) is "[]" (the keyword is never
        // lowered) and get_user_stats(username=[1]) raises "unhashable type: 'list'".
        let mut t = TwitterApi::load(&Map::new()).unwrap();
        assert_eq!(run(&mut t, "search_tweets", json!({"keyword": 3})), "[]");
        assert_eq!(
            run(&mut t, "get_user_stats", json!({"username": [1]})),
            "Error during execution: unhashable type: 'list'"
        );
    }

    #[test]
    fn tweet_keys_parse_as_python_ints() {
        assert_eq!(parse_int(" +1_0 "), Some(10));
        assert_eq!(parse_int("007"), Some(7));
        assert_eq!(parse_int("1_"), None);
        assert_eq!(parse_int("x"), None);
        let Value::Object(config) = json!({"tweets": {"a": {}}}) else {
            unreachable!()
        };
        assert!(TwitterApi::load(&config).is_err());
    }
}
