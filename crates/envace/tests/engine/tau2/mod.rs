//! τ²-bench retail and airline tests: gold replays against the reference's hashes, every tool's
//! known answers and error cases, argument validation, rewards and pass^k.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

mod conversation;
mod gold;
mod reset;
mod rewards;
mod tools;
mod validation;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use envace::env::tau2::{DomainKind, Tau2Domain, Tau2Env};
use envace::env::{Environment, ToolOutcome};
use serde_json::Value;

/// The τ²-bench data folder beside the repository (`../shared/benchmarks/tau2-bench`).
pub fn data_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks/tau2-bench");
    assert!(
        root.join("retail/db.json").is_file() && root.join("airline/db.json").is_file(),
        "τ²-bench data is missing: expected {}/{{retail,airline}}/db.json (the shared/ folder beside the repository root)",
        root.display()
    );
    root
}

/// The retail domain, loaded once per test binary (the task and rollout suites share it).
pub fn retail() -> &'static Arc<Tau2Domain> {
    static DOMAIN: OnceLock<Arc<Tau2Domain>> = OnceLock::new();
    DOMAIN.get_or_init(|| Tau2Domain::load(DomainKind::Retail, data_root().join("retail")).unwrap())
}

/// The airline domain, loaded once per test binary.
pub fn airline() -> &'static Arc<Tau2Domain> {
    static DOMAIN: OnceLock<Arc<Tau2Domain>> = OnceLock::new();
    DOMAIN
        .get_or_init(|| Tau2Domain::load(DomainKind::Airline, data_root().join("airline")).unwrap())
}

/// Calls a tool that must fail and returns `CODE: message`.
pub fn failure(env: &mut Tau2Env, name: &str, arguments: Value) -> String {
    match env.call(name, &arguments) {
        ToolOutcome::Failure(failure) => format!("{}: {}", failure.code, failure.message),
        ToolOutcome::Success(value) => panic!("{name} succeeded: {value}"),
    }
}
