//! Evaluation of a policy: running its episodes for a job (`episodes`, shared with training),
//! held-out generated tasks with standard errors, per family and pass@k (`heldout`), and
//! test-time private rehearsal with its rehearsal-budget curves (`rehearsal`), and the public
//! BFCL benchmark's data and AST checker (`bfcl`).

pub mod bfcl;
pub mod episodes;
pub mod heldout;
pub mod rehearsal;
