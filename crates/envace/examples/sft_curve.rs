//! SFT learning curve of an experiment config: trains from scratch on oracle samples and
//! prints the loss every 25 steps and the held-out success (greedy, real environment, the
//! test split) every `EVERY` steps, to see when the tiny model starts to copy values.
//!
//! `cargo run --release -p envace --example sft_curve -- [CONFIG]` (the quickstart by
//! default). Environment: `STEPS` (600), `EVERY` (150), `LR` (`[sft].lr`), `BS`
//! (`[sft].batch_size`), `NTASKS` (`[sft].n_tasks`), `COSINE=true` (cosine decay), `SHOW=1`
//! (print six evaluated episodes turn by turn), `DUMP=N` (print
//! the first N training windows), `ACT_ONLY=true` (train the Act role only). Each evaluation
//! also prints the tasks solved per task family.
//! `SHARE` (`[sft].rehearse_share`). Batches come from `sft::batch_items`; `MB` micro-batch size (8).
use envace::config::LrSchedule;
use envace::config::{self, Role, TaskSplit};
use envace::eval::heldout;
use envace::rl::session::{Session, load_sources, task_pool};
use envace::rl::{AdamW, accumulate, learning_rate, pad_batch, token_logprobs};
use envace::rollout::EpisodeRecord;
use envace::store::{RunWriter, Store};
use std::time::Instant;
fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}
fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        eprintln!(
            "set RAYON_NUM_THREADS (e.g. to the core count): candle is much slower without it"
        );
    }
    let path = std::env::args().nth(1);
    let mut config = match path {
        Some(p) => config::parse_file(std::path::Path::new(&p))?,
        None => config::parse(config::preset("quickstart")?.toml, "quickstart")
            .map_err(|e| e.to_string())?,
    };
    let steps: u32 = env("STEPS", 600);
    let every: u32 = env("EVERY", 150);
    let lr: f64 = env("LR", config.sft.lr);
    let bs: usize = env("BS", config.sft.batch_size as usize);
    let ntasks: usize = env("NTASKS", config.sft.n_tasks as usize);
    let act_only: bool = env("ACT_ONLY", false);
    config.sft.lr = lr;
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("runs.sqlite"))?;
    let run = store.create_run("x", "")?;
    let writer = RunWriter::new(store, run, 1024);
    let sources = load_sources(&config)?;
    let tasks = task_pool(
        &config,
        &sources,
        config.env.task_split,
        ntasks,
        config.run.seed,
    )?;
    let test = task_pool(
        &config,
        &sources,
        TaskSplit::Test,
        config.eval.max_tasks.unwrap_or(50) as usize,
        config.run.seed.wrapping_add(2),
    )?;
    let mut session = Session::create(config.clone(), run, writer, &tasks, sources)?;
    let t0 = Instant::now();
    let mut items = envace::rl::sft::oracle_items(&mut session, &tasks)?;
    if act_only {
        items.retain(|i| i.role == Role::Act);
    }
    let max_len = (config.rl.max_prompt_tokens + config.rl.max_response_tokens) as usize;
    let mean_len =
        items.iter().map(|i| i.window_len(max_len)).sum::<usize>() as f64 / items.len() as f64;
    println!(
        "items {} mean window {mean_len:.0} built in {:.1}s",
        items.len(),
        t0.elapsed().as_secs_f64()
    );
    let dump: usize = env("DUMP", 0);
    for item in items.iter().take(dump) {
        let (tokens, _) = item.window(max_len);
        println!(
            "=== {:?} item: {} tokens, window {}\n{}",
            item.role,
            item.tokens.len(),
            tokens.len(),
            session.codec.decode(&tokens)?
        );
    }
    let roles = vec![Role::Act, Role::Rehearse];
    let mut opt = AdamW::new(&session.policy, 0.0)?;
    let share: Option<f64> = std::env::var("SHARE")
        .ok()
        .and_then(|v| v.parse().ok())
        .or(config.sft.rehearse_share);
    let t0 = Instant::now();
    for step in 0..steps {
        let picked = envace::rl::sft::batch_items(&items, 12345, step, bs, share);
        let mut batch_items: Vec<_> = picked.iter().map(|&i| &items[i]).collect();
        batch_items.sort_by_key(|item| item.window_len(max_len));
        let total: usize = batch_items
            .iter()
            .map(|i| i.n_trained(max_len, &roles))
            .sum();
        let mut grads = None;
        let mut lsum = 0.0;
        for micro in batch_items.chunks(env("MB", 8)) {
            let batch = pad_batch(micro, max_len, &roles, session.policy.device())?;
            let (logp, _) = token_logprobs(&session.policy, &batch)?;
            let loss = ((&logp * &batch.weight)?.sum_all()?.neg()? / total as f64)?;
            lsum += loss.to_scalar::<f32>()? as f64;
            let g = loss.backward()?;
            accumulate(&mut grads, g, &session.policy)?;
        }
        let sched = if env("COSINE", false) {
            LrSchedule::Cosine
        } else {
            LrSchedule::Constant
        };
        let lr_now = learning_rate(lr, sched, 10, 0.1, step, steps);
        if let Some(grads) = grads {
            opt.step(&grads, lr_now, 1.0, 1.0)?;
        }
        if step % 25 == 0 {
            println!(
                "step {step} loss {lsum:.3} t {:.0}s",
                t0.elapsed().as_secs_f64()
            );
        }
        if (step + 1) % every == 0 {
            let te = Instant::now();
            let episodes = heldout::evaluation_episodes(&session, &test, step + 1)?;
            let report = heldout::Report::of(&test, &episodes, &[]);
            let (mean, succ) = (report.all.score.mean, report.all.success.mean);
            if std::env::var("SHOW").is_ok() {
                show(&session, &episodes[..episodes.len().min(6)])?;
            }
            println!(
                "EVAL step {} score {mean:.3} success {succ:.3} (eval {:.0}s, train t {:.0}s)",
                step + 1,
                te.elapsed().as_secs_f64(),
                t0.elapsed().as_secs_f64()
            );
            let mut by_family: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
            for (task, episode) in test.iter().zip(&episodes) {
                let entry = by_family.entry(task.family).or_default();
                entry.1 += 1;
                entry.0 += u32::from(episode.reward.is_some_and(|r| r >= 1.0 - 1e-9));
            }
            let line: Vec<String> = by_family
                .iter()
                .map(|(family, (ok, n))| format!("{family} {ok}/{n}"))
                .collect();
            println!("  solved by family: {}", line.join(", "));
        }
    }
    Ok(())
}

fn show(session: &Session, episodes: &[EpisodeRecord]) -> Result<(), Box<dyn std::error::Error>> {
    for e in episodes {
        println!(
            "--- reward {:?} end {:?} mask {:?}",
            e.reward, e.end, e.mask_reason
        );
        if let Some(sample) = e.samples.first() {
            let t = &sample.tokens;
            let tokens = t[t.len().saturating_sub(70)..]
                .iter()
                .map(|&x| session.codec.decode(&[x]))
                .collect::<envace::error::Result<Vec<String>>>()?;
            println!("  TOKENS {tokens:?}");
        }
        for m in &e.messages {
            println!("  [{:?}] {}", m.role, m.content.replace('\n', " "));
        }
    }
    Ok(())
}
