//! The editor's "Check connection" for an endpoint (LLM judge, external simulator): the
//! engine's OpenAI client lists the endpoint's models and asks for a one-token chat
//! completion, and the outcome comes back as one structured result.

use std::time::{Duration, Instant};

use envace::config::EndpointConfig;
use envace::openai::{ChatClient, ChatMsg, ChatRequest};

use crate::contract::{EndpointCheck, StudioError};

/// The longest a check waits for each of its two requests (less when the config says less).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

const WHAT: &str = "Cannot check the connection";

/// The endpoint table at `path` (e.g. `["judge", "endpoint"]`) of the config text `toml`.
pub fn endpoint_at(toml: &str, path: &[String]) -> Result<EndpointConfig, StudioError> {
    let dotted = path.join(".");
    let values: serde_json::Value = toml::from_str(toml).map_err(|err| {
        StudioError::new(
            WHAT,
            format!("the config is not valid TOML: {}", err.message()),
        )
    })?;
    let table = path
        .iter()
        .try_fold(&values, |value, key| value.get(key))
        .ok_or_else(|| {
            let mut err = StudioError::new(WHAT, format!("the config has no [{dotted}] table"));
            err.field = Some(dotted.clone());
            err
        })?;
    serde_json::from_value(table.clone()).map_err(|err| {
        let mut out = StudioError::new(WHAT, format!("[{dotted}]: {err}"));
        out.field = Some(dotted.clone());
        out
    })
}

/// Checks `endpoint` (found at the dotted TOML path `at`, for messages): lists its models,
/// then times a one-token chat completion with its model. Never retries. Blocks up to twice
/// [`CHECK_TIMEOUT`].
pub fn check(mut endpoint: EndpointConfig, at: &str) -> Result<EndpointCheck, StudioError> {
    endpoint.max_retries = 0;
    endpoint.timeout_secs = endpoint.timeout_secs.min(CHECK_TIMEOUT.as_secs_f64());
    let client = ChatClient::new(&endpoint).map_err(|err| {
        let mut out = StudioError::new(WHAT, &err);
        if let envace::Error::Endpoint { field, .. } = &err {
            out.field = Some(format!("{at}.{field}"));
        }
        out
    })?;
    let (models, models_error) = match client.list_models() {
        Ok(models) => (models, None),
        Err(failure) => (Vec::new(), Some(failure.to_string())),
    };
    let mut ping = ChatRequest::new(vec![ChatMsg::user("Reply with one word: ready?")]);
    ping.max_tokens = Some(1);
    ping.temperature = Some(0.0);
    let started = Instant::now();
    let reply = client.complete(&ping);
    let latency_ms = started.elapsed().as_secs_f64() * 1e3;
    let model_listed = (!models.is_empty()).then(|| models.contains(&endpoint.model));
    Ok(match reply {
        Ok(_) => {
            let mut summary = format!(
                "Connected: {} answered in {latency_ms:.0} ms",
                endpoint.model
            );
            match model_listed {
                Some(true) => summary.push_str(&format!("; {} model(s) listed", models.len())),
                Some(false) => summary.push_str(&format!(
                    "; it is not among the listed models ({})",
                    models.join(", ")
                )),
                None => {}
            }
            EndpointCheck {
                ok: true,
                url: client.endpoint_url().to_owned(),
                models,
                model_listed,
                models_error,
                latency_ms: Some(latency_ms),
                summary,
            }
        }
        Err(failure) => EndpointCheck {
            ok: false,
            url: failure.url().to_owned(),
            summary: format!("Failed: {failure}"),
            models,
            model_listed,
            models_error,
            latency_ms: None,
        },
    })
}
