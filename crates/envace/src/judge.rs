//! Judges that turn a finished episode into its score (DESIGN.md §1): the rule judge for
//! generated tasks, and the verdict type every judge returns, where a judge that could not
//! decide masks the episode instead of scoring it 0.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::chat::Message;
use crate::config::Domain;
use crate::error::Result;
use crate::tasks::{GenSources, GenTask, Runner};

/// A judge's decision on one episode.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The episode score, with the per-standard details.
    Scored {
        /// Sum of turn scores / (checklists × max turns), in `[0, 1]`.
        score: f64,
        /// Verdict per standard, for the episode viewer.
        detail: Value,
    },
    /// The judge could not decide (its call failed): the episode is left out of training.
    Masked {
        /// Why.
        reason: String,
    },
}

/// Scores finished episodes.
pub trait EpisodeJudge: Sync {
    /// The verdict on `trajectory` (user, assistant and tool messages) for `task`.
    fn judge(&self, task: &GenTask, trajectory: &[Message]) -> Verdict;
}

/// The rule judge of generated tasks: replays the trajectory's tool calls on the real
/// environment from the task's initial state and decides every standard by its rule (required
/// calls, facts in the final answer, final state hash).
#[derive(Debug)]
pub struct RuleJudge {
    sources: GenSources,
    runners: Mutex<HashMap<Domain, Runner>>,
}

impl RuleJudge {
    /// A judge over the loaded domain data.
    pub fn new(sources: GenSources) -> Self {
        RuleJudge {
            sources,
            runners: Mutex::new(HashMap::new()),
        }
    }

    fn judge_with_runner(&self, task: &GenTask, trajectory: &[Message]) -> Result<Verdict> {
        let mut runners = self
            .runners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let runner = match runners.entry(task.domain) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Runner::new(task.domain, &self.sources)?)
            }
        };
        let report = runner.judge(task, trajectory);
        let detail = serde_json::to_value(&report).unwrap_or(Value::Null);
        Ok(Verdict::Scored {
            score: report.score,
            detail,
        })
    }
}

impl EpisodeJudge for RuleJudge {
    fn judge(&self, task: &GenTask, trajectory: &[Message]) -> Verdict {
        self.judge_with_runner(task, trajectory)
            .unwrap_or_else(|e| Verdict::Masked {
                reason: format!("the rule judge could not replay the episode: {e}"),
            })
    }
}

/// A leaf value as an answer would state it: strings unquoted, other values as the tool's
/// JSON shows them (how generated tasks write their facts), null as nothing.
fn stated(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => crate::env::pyjson::dumps(other, false),
    }
}

/// The final answer as it would read had the tools answered as the real environment does:
/// where a shown (rehearsed or simulated) response and the real one differ at the same place
/// of the same call's answer, the two values trade places in the answer. `pairs` are
/// `(shown, real)` responses of the calls a simulator answered. Values are exchanged where
/// they stand as whole words (ASCII case ignored), longest first, all in one pass. So a
/// faithful report of a wrong rehearsed result reads as the right one, and a report of the
/// real value the act role was never shown reads as wrong: judging the result checks whether
/// the act role used what it was shown. (`[rl].credit = "role"` credits the act role with the
/// better of this and the real judge's score, so a right result it worked out itself counts.)
pub fn answer_as_real<'a>(
    answer: &str,
    pairs: impl IntoIterator<Item = (&'a Value, &'a Value)>,
) -> String {
    let mut swaps: Vec<(String, String)> = Vec::new();
    for (shown, real) in pairs {
        let truth = crate::rehearse::leaves(real);
        for (path, value) in crate::rehearse::leaves(shown) {
            let Some(real_value) = truth.get(&path) else {
                continue;
            };
            let (shown_text, real_text) = (stated(&value), stated(real_value));
            if shown_text.is_empty() || real_text.is_empty() || shown_text == real_text {
                continue;
            }
            for (from, to) in [
                (shown_text.clone(), real_text.clone()),
                (real_text, shown_text),
            ] {
                if !swaps.iter().any(|(f, _)| f.eq_ignore_ascii_case(&from)) {
                    swaps.push((from, to));
                }
            }
        }
    }
    swaps.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    let word_char = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(answer.len());
    let mut rest = answer;
    'scan: while let Some(c) = rest.chars().next() {
        if !out.chars().next_back().is_some_and(word_char) {
            for (from, to) in &swaps {
                let whole_word = rest
                    .get(..from.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(from))
                    && !rest[from.len()..].chars().next().is_some_and(word_char);
                if whole_word {
                    out.push_str(to);
                    rest = &rest[from.len()..];
                    continue 'scan;
                }
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The instruction of the LLM judge.
pub const LLM_JUDGE_PROMPT: &str = "You are a strict judge of a tool-using assistant. You read \
a conversation between a user, the assistant and its tools, and a numbered list of standards. \
For every standard decide whether the conversation meets its pass condition. Answer with one \
JSON object and nothing else: {\"verdicts\": [{\"index\": 0, \"met\": true, \"reason\": \"...\"}, \
...]} with exactly one verdict per standard, in order.";

/// The LLM judge (DESIGN.md §1): an OpenAI-compatible endpoint decides each standard and
/// returns a strict JSON verdict. A failed call (after the client's retries, backoff and
/// timeout) or a verdict that does not parse masks the episode instead of scoring it 0.
#[derive(Debug, Clone)]
pub struct LlmJudge {
    client: crate::openai::ChatClient,
    /// Most tokens of the verdict.
    pub max_tokens: u32,
}

impl LlmJudge {
    /// A judge over `client`.
    pub fn new(client: crate::openai::ChatClient) -> Self {
        LlmJudge {
            client,
            max_tokens: 512,
        }
    }

    /// The same judge with at most `max_tokens` per verdict.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// The judge's messages for one checklist.
    pub fn messages(
        checklist: &crate::tasks::Checklist,
        trajectory: &[Message],
    ) -> Vec<crate::openai::ChatMsg> {
        let mut conversation = String::new();
        for message in trajectory {
            let role = message.role.as_str();
            conversation.push_str(&format!("[{role}] {}\n", message.content));
        }
        let mut standards = String::new();
        for (idx, standard) in checklist.standards.iter().enumerate() {
            standards.push_str(&format!(
                "{idx}. question: {}\n   focus on: {}\n   pass condition: {}\n   failure examples: {}\n",
                standard.question,
                standard.focus_on,
                standard.pass_condition,
                standard.failure_examples.join("; ")
            ));
        }
        vec![
            crate::openai::ChatMsg::system(LLM_JUDGE_PROMPT),
            crate::openai::ChatMsg::user(format!(
                "# Conversation\n{conversation}\n# Standards\n{standards}"
            )),
        ]
    }
}

/// The text inside a Markdown code fence (```` ```json ```` or ```` ``` ````), trimmed; the
/// trimmed text itself when it is not fenced.
pub fn strip_code_fence(text: &str) -> &str {
    let body = text.trim();
    match body
        .strip_prefix("```json")
        .or_else(|| body.strip_prefix("```"))
    {
        Some(rest) => rest.trim().strip_suffix("```").unwrap_or(rest).trim(),
        None => body,
    }
}

/// Reads a judge's verdict strictly: a JSON object (optionally in a ```json fence) whose
/// `verdicts` array has one `{"index", "met"}` per standard, indices 0.. in order.
pub fn parse_verdict(text: &str, n_standards: usize) -> std::result::Result<Vec<bool>, String> {
    let body = strip_code_fence(text);
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("the verdict is not JSON ({e})"))?;
    let verdicts = value
        .get("verdicts")
        .and_then(Value::as_array)
        .ok_or("the verdict has no \"verdicts\" array")?;
    if verdicts.len() != n_standards {
        return Err(format!(
            "the verdict has {} entries for {n_standards} standards",
            verdicts.len()
        ));
    }
    verdicts
        .iter()
        .enumerate()
        .map(|(idx, verdict)| {
            if verdict.get("index").and_then(Value::as_u64) != Some(idx as u64) {
                return Err(format!("verdict {idx} does not carry \"index\": {idx}"));
            }
            verdict
                .get("met")
                .and_then(Value::as_bool)
                .ok_or_else(|| format!("verdict {idx} has no boolean \"met\""))
        })
        .collect()
}

impl EpisodeJudge for LlmJudge {
    fn judge(&self, task: &GenTask, trajectory: &[Message]) -> Verdict {
        let mut turn_scores = Vec::with_capacity(task.checklists.len());
        let mut details = Vec::new();
        for checklist in &task.checklists {
            let mut request =
                crate::openai::ChatRequest::new(Self::messages(checklist, trajectory));
            request.temperature = Some(0.0);
            request.max_tokens = Some(self.max_tokens);
            request.response_format_json = true;
            let reply = match self.client.complete(&request) {
                Ok(reply) => reply,
                Err(failure) => {
                    return Verdict::Masked {
                        reason: format!("LLM judge call failed: {failure}"),
                    };
                }
            };
            let met = match parse_verdict(&reply.content, checklist.standards.len()) {
                Ok(met) => met,
                Err(why) => {
                    return Verdict::Masked {
                        reason: format!("LLM judge verdict unreadable: {why}"),
                    };
                }
            };
            let total: f64 = checklist.standards.iter().map(|s| s.weight).sum();
            let passed: f64 = checklist
                .standards
                .iter()
                .zip(&met)
                .filter(|(_, met)| **met)
                .map(|(s, _)| s.weight)
                .sum();
            turn_scores.push(if total > 0.0 { passed / total } else { 0.0 });
            details.push(serde_json::json!({"turn_idx": checklist.turn_idx, "met": met, "raw": reply.content}));
        }
        Verdict::Scored {
            score: crate::tasks::episode_score(&turn_scores, task.checklists.len(), 1),
            detail: Value::Array(details),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_read_as_real_replace_shown_values_as_whole_words() {
        let shown = json!({"result": "olleh dlrow", "n": 12});
        let real = json!({"result": "dlrow olleh", "n": 15});
        let pairs = [(&shown, &real)];
        assert_eq!(
            answer_as_real("Reversed: \"Olleh dlrow\", and 12 letters.", pairs),
            "Reversed: \"dlrow olleh\", and 15 letters."
        );
        // Not inside a longer word or number; one pass, so the values trade places.
        let pairs = [(&shown, &real)];
        assert_eq!(
            answer_as_real("x12 or 125 or 12, not 15", pairs),
            "x12 or 125 or 15, not 12"
        );
        // A value only in the shown response, or an error shown for a success, changes nothing.
        let error = json!({"error": "INVALID_PARAMETERS"});
        assert_eq!(
            answer_as_real("It failed: 12", [(&error, &real)]),
            "It failed: 12"
        );
        // Numbers are stated as the tool's JSON shows them.
        let (shown, real) = (json!({"value": 2.5}), json!({"value": 3.0}));
        assert_eq!(answer_as_real("2.5 km", [(&shown, &real)]), "3.0 km");
    }

    #[test]
    fn verdicts_parse_strictly() {
        let ok = "{\"verdicts\": [{\"index\": 0, \"met\": true, \"reason\": \"x\"}, {\"index\": 1, \"met\": false}]}";
        assert_eq!(parse_verdict(ok, 2), Ok(vec![true, false]));
        assert_eq!(strip_code_fence(&format!(" ```json\n{ok}\n``` ")), ok);
        assert_eq!(strip_code_fence(&format!("```\n{ok}```")), ok);
        assert_eq!(strip_code_fence(ok), ok);
        assert_eq!(
            parse_verdict(&format!("```json\n{ok}\n```"), 2),
            Ok(vec![true, false])
        );
        for (bad, n) in [
            ("yes", 1),
            ("{\"verdict\": []}", 1),
            (ok, 3),
            ("{\"verdicts\": [{\"index\": 1, \"met\": true}]}", 1),
            ("{\"verdicts\": [{\"index\": 0, \"met\": \"yes\"}]}", 1),
        ] {
            assert!(parse_verdict(bad, n).is_err(), "{bad}");
        }
    }
}
