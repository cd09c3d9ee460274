//! Evaluation of a policy: running its episodes for a job (`episodes`, shared with training),
//! held-out generated tasks with standard errors, per family and pass@k (`heldout`), and
//! test-time private rehearsal with its rehearsal-budget curves (`rehearsal`), and the public
//! benchmarks: BFCL's data and AST checker (`bfcl`), τ²-bench conversations with a user
//! simulator (`tau2`), VitaBench delivery conversations graded by a rubric judge (`vita`), and
//! FinMCP-style tool-name metrics on any OpenAI-format dataset (`toolmetrics`), whose items run
//! side by side through [`run_concurrently`].

pub mod bfcl;
pub mod convrehearsal;
pub mod episodes;
pub mod heldout;
pub mod rehearsal;
pub mod tau2;
pub mod toolmetrics;
pub mod vita;

/// `work` on every item, at most `concurrency` at once on scoped threads (each takes the next
/// item when it finishes one, so slow items do not hold the others up), with `progress(done,
/// total)` after each; the results in item order. For benchmarks whose items wait on endpoints.
pub fn run_concurrently<T: Sync, R: Send>(
    items: &[T],
    concurrency: usize,
    work: &(dyn Fn(&T) -> R + Sync),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..concurrency.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let idx = next.fetch_add(1, Ordering::SeqCst);
                    let Some(item) = items.get(idx) else { break };
                    let result = work(item);
                    *slots[idx].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                    progress(done.fetch_add(1, Ordering::SeqCst) + 1, items.len());
                }
            });
        }
    });
    slots
        .into_iter()
        .filter_map(|slot| slot.into_inner().unwrap_or_else(PoisonError::into_inner))
        .collect()
}
