//! VitaBench delivery tests: the tools against the tasks' own data (the expected orders replayed
//! through them), known answers and error cases, and graded conversations with scripted
//! players, the sliding-window rubric judge and Avg@k / Pass@k / Pass^k.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

mod conversation;
mod rehearsal;
mod tools;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use envace::env::vita::{VitaTask, load_tasks};

/// The delivery task file beside the repository (`../shared/benchmarks/vitabench/delivery`).
pub fn task_path() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/benchmarks/vitabench/delivery/tasks_en.json");
    assert!(
        path.is_file(),
        "VitaBench data is missing: expected {} (the shared/ folder beside the repository root)",
        path.display()
    );
    path
}

/// The 100 delivery tasks, loaded once per test binary.
pub fn tasks() -> &'static [VitaTask] {
    static TASKS: OnceLock<Vec<VitaTask>> = OnceLock::new();
    TASKS.get_or_init(|| load_tasks(&task_path()).unwrap())
}

/// The task with this id.
pub fn task(id: &str) -> &'static VitaTask {
    tasks().iter().find(|t| t.id == id).unwrap()
}
