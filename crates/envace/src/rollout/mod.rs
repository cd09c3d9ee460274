//! The episode engine: batches of episodes in which the policy acts and each tool call is
//! answered by the real environment, by the policy itself rehearsing the tool (world
//! rehearsal), by an external simulator endpoint, or by a per-call mix, with every token
//! labelled by its role, every rehearsed response replayed against the real environment for
//! fidelity, and every episode judged and recorded.
//!
//! # One step of a batch
//!
//! All active episodes generate their next assistant turn in one batched call of the
//! [`Generator`] (role Act). Each turn's `<tool_call>` blocks (at most `max_parallel_calls`;
//! later ones are answered with a `TOO_MANY_TOOL_CALLS` error and not run) are answered by the
//! source the [`ResponseMode`] picks. All rehearse prompts of the step, over all episodes, go
//! to the generator in one batched call (role Rehearse); external calls run concurrently. The
//! real counterpart of every non-real response comes from the episode's shadow environment,
//! which runs each call for real in order, so it is the real state at that moment; the pair is
//! scored ([`crate::fidelity`]). An answer carrying `error_tool_call` ends the episode, as do a
//! turn without tool calls (the final answer), `max_turns`, or an environment or simulator
//! fault (which masks it).
//!
//! # Tokens
//!
//! The acting sequence is the rendered prompt (label [`Label::Prompt`]), then per turn the
//! generated tokens ([`Label::Act`]) and the template text that carries the tool responses and
//! opens the next assistant turn ([`Label::Injected`]), computed as the difference between two
//! renderings of the conversation so that generated tokens are never re-tokenised. Each
//! rehearse call is its own sample: the rehearse prompt ([`Label::Prompt`]) and the generated
//! answer ([`Label::Rehearse`]). Generation sees at most `max_prompt_tokens` of context (left
//! truncation); each sample records the window every generation saw, so a trainer recomputes
//! log-probabilities over the same context.

mod codec;
mod engine;
mod generators;
mod record;

pub use codec::TokenCodec;
pub use engine::{
    EpisodeSpec, ResponseMode, RolloutSettings, SIMULATOR_UNAVAILABLE, Simulator,
    TOO_MANY_TOOL_CALLS, run_batch,
};
#[cfg(feature = "wgpu")]
pub use generators::GpuGenerator;
pub use generators::{
    GenerationOutput, GenerationRequest, Generator, OracleActor, PolicyGenerator, RealRehearser,
    RoleRouter, Scripted,
};
pub use record::{
    CallRecord, EndReason, EpisodeRecord, GenerationWindow, Label, ResponseSource, Sample,
    TurnRecord, fidelity_rows, load_episodes, record_episodes,
};

/// An OpenAI-compatible endpoint (vLLM, SGLang, Ollama, a llama.cpp server, `envace
/// serve-model`) as the external simulator: the rehearse prompt goes out as chat messages at
/// temperature 0, the reply's text comes back to the strict parser; a failed call (after the
/// client's retries) masks the episode.
#[derive(Debug, Clone)]
pub struct EndpointSimulator {
    /// The endpoint.
    pub client: crate::openai::ChatClient,
    /// Most tokens per answer.
    pub max_tokens: u32,
}

impl Simulator for EndpointSimulator {
    fn simulate(&self, messages: &[serde_json::Value]) -> std::result::Result<String, String> {
        let mut request = crate::openai::ChatRequest::new(crate::rehearse::as_chat(messages));
        request.temperature = Some(0.0);
        request.max_tokens = Some(self.max_tokens);
        self.client
            .complete(&request)
            .map(|reply| reply.content)
            .map_err(|failure| failure.to_string())
    }
}
