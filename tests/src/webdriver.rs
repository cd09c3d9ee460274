//! A minimal W3C WebDriver client over HTTP, enough to drive the studio like a person would.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One WebDriver session.
#[derive(Debug)]
pub struct Session {
    agent: ureq::Agent,
    base: String,
    id: String,
}

/// The W3C key code for Tab, which moves focus and so fires `change` on the field left.
pub const TAB: &str = "\u{E004}";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let response = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        ("DELETE", _) => agent.delete(url).call(),
        (_, body) => agent.post(url).send_json(body.unwrap_or_else(|| json!({}))),
    };
    let mut response = response.map_err(|err| format!("{method} {url}: {err}"))?;
    let status = response.status();
    let value: Value = response
        .body_mut()
        .read_json()
        .map_err(|err| format!("{method} {url}: reply is not JSON: {err}"))?;
    if !status.is_success() {
        return Err(format!("{method} {url}: {status}: {}", value["value"]));
    }
    Ok(value["value"].clone())
}

/// Waits until the driver at `base` answers `/status` as ready.
pub fn wait_ready(base: &str, timeout: Duration) -> Result<(), String> {
    let agent = agent();
    let start = Instant::now();
    loop {
        if let Ok(status) = call(&agent, "GET", &format!("{base}/status"), None)
            && status["ready"] == json!(true)
        {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(format!("WebDriver at {base} not ready after {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Session {
    /// Starts a session with the given capabilities.
    pub fn start(base: &str, capabilities: Value) -> Result<Session, String> {
        let agent = agent();
        let value = call(
            &agent,
            "POST",
            &format!("{base}/session"),
            Some(json!({"capabilities": {"alwaysMatch": capabilities}})),
        )?;
        let id = value["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session id in {value}"))?
            .to_string();
        Ok(Session {
            agent,
            base: base.to_string(),
            id,
        })
    }

    fn url(&self, rest: &str) -> String {
        format!("{}/session/{}{rest}", self.base, self.id)
    }

    /// Runs a script in the page and returns its result.
    pub fn script(&self, script: &str, args: Value) -> Result<Value, String> {
        call(
            &self.agent,
            "POST",
            &self.url("/execute/sync"),
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Polls `script` until it returns something truthy; returns that value.
    pub fn wait_for(&self, what: &str, script: &str, timeout: Duration) -> Result<Value, String> {
        let start = Instant::now();
        loop {
            let value = self.script(script, json!([]))?;
            let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                && value != json!("")
                && value != json!(0);
            if truthy {
                return Ok(value);
            }
            if start.elapsed() > timeout {
                return Err(format!("timed out after {timeout:?} waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Finds one element by CSS selector.
    pub fn find(&self, css: &str) -> Result<String, String> {
        let value = call(
            &self.agent,
            "POST",
            &self.url("/element"),
            Some(json!({"using": "css selector", "value": css})),
        )
        .map_err(|err| format!("finding {css}: {err}"))?;
        value
            .as_object()
            .and_then(|object| object.values().next())
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("no element reference for {css} in {value}"))
    }

    /// Clicks the element matching `css`.
    pub fn click(&self, css: &str) -> Result<(), String> {
        let element = self.find(css)?;
        call(
            &self.agent,
            "POST",
            &self.url(&format!("/element/{element}/click")),
            None,
        )
        .map_err(|err| format!("clicking {css}: {err}"))?;
        Ok(())
    }

    /// Clears the field matching `css` and types `text` into it.
    pub fn type_into(&self, css: &str, text: &str) -> Result<(), String> {
        // The form re-renders a section when the engine's validation answers, which can replace
        // the field between finding it and typing; then it is found again.
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_type_into(css, text) {
                Err(err) if err.contains("stale element reference") && tries < 5 => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                result => return result,
            }
        }
    }

    fn try_type_into(&self, css: &str, text: &str) -> Result<(), String> {
        let element = self.find(css)?;
        call(
            &self.agent,
            "POST",
            &self.url(&format!("/element/{element}/clear")),
            None,
        )?;
        call(
            &self.agent,
            "POST",
            &self.url(&format!("/element/{element}/value")),
            Some(json!({"text": text})),
        )
        .map_err(|err| format!("typing into {css}: {err}"))?;
        Ok(())
    }

    /// The visible text of the element matching `css`.
    pub fn text(&self, css: &str) -> Result<String, String> {
        let element = self.find(css)?;
        let value = call(
            &self.agent,
            "GET",
            &self.url(&format!("/element/{element}/text")),
            None,
        )?;
        Ok(value.as_str().unwrap_or_default().to_string())
    }

    /// A PNG screenshot of the window.
    pub fn screenshot(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        let value = call(&self.agent, "GET", &self.url("/screenshot"), None)?;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .map_err(|err| format!("screenshot is not base64: {err}"))
    }

    /// Ends the session (closing the app).
    pub fn end(self) {
        let _ = call(&self.agent, "DELETE", &self.url(""), None);
    }
}
