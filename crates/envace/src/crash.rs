//! Named crash points for crash-and-resume tests: when `ENVACE_TEST_KILL_AT=POINT:N` is set,
//! the process sends itself SIGKILL the N-th time it reaches `POINT`.
//!
//! A kill at a random moment rarely lands inside the few milliseconds of a store transaction
//! or a checkpoint write; these points make those moments reachable on purpose (in the spirit
//! of SQLite's fault injection). Without the variable a point costs one atomic load. The
//! points:
//!
//! | point | where |
//! |---|---|
//! | `store.batch` | inside a store transaction, after its rows are inserted, before commit |
//! | `checkpoint.files` | a checkpoint's model and optimizer written to its temporary folder |
//! | `checkpoint.renamed` | the checkpoint folder renamed into place, not yet in the store |
//! | `checkpoint.recorded` | the checkpoint recorded in the store, older ones not yet pruned |
//! | `step.done` | a training step finished, its metrics still buffered |
//!
//! Beside the kills, one injected fault: with `ENVACE_TEST_FAIL_AT=checkpoint.write:N` the N-th
//! checkpoint fails as a full disk would (`ErrorKind::StorageFull`) after its model file is
//! written, for machines where a test cannot mount a small filesystem to fill for real.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable: `POINT:N` (N counts from 1 in each process).
pub const KILL_AT_VAR: &str = "ENVACE_TEST_KILL_AT";

/// The environment variable of injected faults: `POINT:N`, POINT one of [`FAULT_POINTS`].
pub const FAIL_AT_VAR: &str = "ENVACE_TEST_FAIL_AT";

/// Every fault point.
pub const FAULT_POINTS: [&str; 1] = ["checkpoint.write"];

/// Every crash point, for tests that pick among them.
pub const POINTS: [&str; 5] = [
    "store.batch",
    "checkpoint.files",
    "checkpoint.renamed",
    "checkpoint.recorded",
    "step.done",
];

#[derive(Debug)]
struct Plan {
    point: String,
    hit: u64,
    seen: AtomicU64,
}

static PLAN: OnceLock<Option<Plan>> = OnceLock::new();
static FAULT_PLAN: OnceLock<Option<Plan>> = OnceLock::new();

fn plan_from_env() -> Option<Plan> {
    plan_from(KILL_AT_VAR, &POINTS)
}

fn plan_from(var: &str, points: &[&str]) -> Option<Plan> {
    let value = std::env::var(var).ok()?;
    let (point, hit) = value.rsplit_once(':')?;
    let hit = hit.trim().parse().ok().filter(|&hit: &u64| hit > 0)?;
    if !points.contains(&point) {
        tracing::warn!("{var}={value:?} names no point (known: {points:?})");
        return None;
    }
    Some(Plan {
        point: point.to_owned(),
        hit,
        seen: AtomicU64::new(0),
    })
}

/// Marks crash point `name`: kills the process here when `ENVACE_TEST_KILL_AT` asks for it.
pub fn point(name: &str) {
    let Some(plan) = PLAN.get_or_init(plan_from_env) else {
        return;
    };
    if plan.point != name {
        return;
    }
    if plan.seen.fetch_add(1, Ordering::SeqCst) + 1 == plan.hit {
        kill_self();
    }
}

/// Marks fault point `name`: fails here as a full disk would when `ENVACE_TEST_FAIL_AT` asks
/// for it.
pub fn fault(name: &str) -> std::io::Result<()> {
    let Some(plan) = FAULT_PLAN.get_or_init(|| plan_from(FAIL_AT_VAR, &FAULT_POINTS)) else {
        return Ok(());
    };
    if plan.point == name && plan.seen.fetch_add(1, Ordering::SeqCst) + 1 == plan.hit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!("no space left on device (injected by {FAIL_AT_VAR})"),
        ));
    }
    Ok(())
}

/// SIGKILL to this process (through the `kill` command, since the engine has no unsafe code),
/// so that nothing is flushed or unwound; abort if that fails.
fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    std::process::abort()
}
