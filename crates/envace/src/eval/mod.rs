//! Evaluation of a policy: running its episodes for a job (`episodes`, shared with training),
//! held-out generated tasks with standard errors, per family and pass@k (`heldout`), and
//! test-time private rehearsal with its rehearsal-budget curves (`rehearsal`), and the public
//! benchmarks: BFCL's data and AST checker (`bfcl`), τ²-bench conversations with a user
//! simulator (`tau2`).

pub mod bfcl;
pub mod episodes;
pub mod heldout;
pub mod rehearsal;
pub mod tau2;
