//! Evaluation of a policy beyond the training loop's held-out check: test-time private
//! rehearsal and its rehearsal-budget curves (`rehearsal`).

pub mod rehearsal;
