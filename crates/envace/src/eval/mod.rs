//! Evaluation of a policy: held-out generated tasks with standard errors, per family and
//! pass@k (`heldout`), and test-time private rehearsal with its rehearsal-budget curves
//! (`rehearsal`).

pub mod heldout;
pub mod rehearsal;
