//! The model worker: one thread that takes queued generation jobs, decodes those that sample
//! alike in one batch, and answers each.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use super::Counters;
use super::model::Weights;
use crate::model::{Generated, Sampling};

/// One generation request on its way to the worker.
pub(super) struct Job {
    pub(super) prompt: Vec<u32>,
    pub(super) max_new_tokens: usize,
    pub(super) sampling: Sampling,
    pub(super) reply: tokio::sync::oneshot::Sender<std::result::Result<Generated, String>>,
    /// Where each new token goes as soon as it is picked, for a streamed reply; the sender is
    /// dropped once the job is answered.
    pub(super) tokens: Option<tokio::sync::mpsc::UnboundedSender<u32>>,
}

impl Job {
    /// Requests with equal keys can share one batched generation.
    pub(super) fn batch_key(&self) -> Option<(u64, u64, u64)> {
        if self.sampling.temperature <= 0.0 {
            None
        } else {
            Some((
                self.sampling.temperature.to_bits(),
                self.sampling.top_p.to_bits(),
                self.sampling.seed,
            ))
        }
    }
}

/// The model worker: takes waiting jobs, generates for those that sample alike in one batch,
/// answers each, until every sender of the queue is gone.
pub(super) fn run_worker(
    weights: &mut Weights,
    stop_tokens: &[u32],
    queue: &mpsc::Receiver<Job>,
    max_batch: usize,
    window: Duration,
    counters: &Counters,
) {
    let mut pending: VecDeque<Job> = VecDeque::new();
    loop {
        if pending.is_empty() {
            match queue.recv() {
                Ok(job) => pending.push_back(job),
                Err(_) => return,
            }
            if !window.is_zero() {
                std::thread::sleep(window);
            }
        }
        while let Ok(job) = queue.try_recv() {
            pending.push_back(job);
        }
        // A request whose connection is gone needs no generation.
        pending.retain(|job| !job.reply.is_closed());
        let Some(first) = pending.front() else {
            continue;
        };
        let key = first.batch_key();
        let sampling = first.sampling.clone();
        let mut batch = Vec::new();
        let mut rest = VecDeque::new();
        for job in pending.drain(..) {
            if batch.len() < max_batch && job.batch_key() == key {
                batch.push(job);
            } else {
                rest.push_back(job);
            }
        }
        pending = rest;
        let prompts: Vec<Vec<u32>> = batch.iter().map(|job| job.prompt.clone()).collect();
        let max_new_tokens = batch
            .iter()
            .map(|job| job.max_new_tokens)
            .max()
            .unwrap_or(1);
        counters.n_batches.fetch_add(1, Ordering::Relaxed);
        counters
            .max_batch_seen
            .fetch_max(batch.len() as u64, Ordering::Relaxed);
        tracing::debug!(
            batch = batch.len(),
            max_new_tokens,
            queued = pending.len(),
            "generating"
        );
        // Streamed rows get their tokens as they come, no more than their own request asked.
        let mut streams: Vec<_> = batch
            .iter()
            .map(|job| (job.tokens.clone(), job.max_new_tokens))
            .collect();
        let mut on_token = |row: usize, token: u32| {
            if let Some((Some(sender), room)) = streams.get_mut(row)
                && *room > 0
            {
                *room -= 1;
                // A client that went away is not an error; its tokens just go nowhere.
                let _ = sender.send(token);
            }
        };
        // A panic inside the model fails this batch only; the server goes on.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            weights.generate(
                &prompts,
                max_new_tokens,
                stop_tokens,
                &sampling,
                &mut on_token,
            )
        }));
        drop(streams);
        let results: Vec<std::result::Result<Generated, String>> = match outcome {
            Ok(Ok(generated)) => generated.into_iter().map(Ok).collect(),
            Ok(Err(err)) => vec![Err(err.to_string()); batch.len()],
            Err(_) => vec![Err("the model panicked while generating".to_owned()); batch.len()],
        };
        for (job, result) in batch.into_iter().zip(results) {
            let result = result.map(|mut generated| {
                generated.tokens.truncate(job.max_new_tokens);
                generated.logprobs.truncate(job.max_new_tokens);
                generated
            });
            // The requester may have gone away meanwhile: nothing to answer then.
            let _ = job.reply.send(result);
        }
    }
}
