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

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable: `POINT:N` (N counts from 1 in each process).
pub const KILL_AT_VAR: &str = "ENVACE_TEST_KILL_AT";

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

fn plan_from_env() -> Option<Plan> {
    let value = std::env::var(KILL_AT_VAR).ok()?;
    let (point, hit) = value.rsplit_once(':')?;
    let hit = hit.trim().parse().ok().filter(|&hit: &u64| hit > 0)?;
    if !POINTS.contains(&point) {
        tracing::warn!("{KILL_AT_VAR}={value:?} names no crash point (known: {POINTS:?})");
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

/// SIGKILL to this process (through the `kill` command, since the engine has no unsafe code),
/// so that nothing is flushed or unwound; abort if that fails.
fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    std::process::abort()
}
