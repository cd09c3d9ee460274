//! `envace eval --model PATH | --run RUN | --endpoint URL --bench bfcl:CATEGORY,…`: public
//! benchmarks on a model file, a run's latest checkpoint (scores stored with the run) or any
//! OpenAI-compatible endpoint, with a progress bar per category and every task's record; and
//! `envace eval score bfcl`, another system's decoded calls through the same checker.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use envace::config::EndpointConfig;
use envace::eval::bfcl::{self, NameStyle, run::RunOptions};
use envace::openai::ChatClient;
use envace::serve::{LoadedModel, ServeOptions, serve};
use envace::store::{Batch, EvalRow, Store};
use indicatif::{ProgressBar, ProgressStyle};

use crate::commands::emit;
use crate::{EvalArgs, EvalCommand, ScoreCommand};

/// The BFCL categories of `--bench` (`bfcl:NAME`), checked before any model is loaded.
fn bfcl_categories(bench: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for item in bench {
        let Some((name, category)) = item.trim().split_once(':') else {
            bail!("--bench {item:?}: give BENCHMARK:CATEGORY, e.g. bfcl:simple_python");
        };
        if name != "bfcl" {
            bail!(
                "--bench {item:?}: the benchmark {name:?} cannot be evaluated yet; BFCL can (bfcl:simple_python, …)"
            );
        }
        if let Some(why) = bfcl::unsupported(category) {
            bail!("--bench {item:?}: {why}");
        }
        if !bfcl::CATEGORIES.contains(&category) {
            bail!(
                "--bench {item:?}: unknown BFCL category; the categories are {}",
                bfcl::CATEGORIES.join(", ")
            );
        }
        out.push(category.to_owned());
    }
    Ok(out)
}

pub fn evaluate(args: &EvalArgs, store_path: Option<&Path>) -> Result<ExitCode> {
    let categories = bfcl_categories(&args.bench)?;
    let data = args.data.as_deref().context("--data DIR is required")?;
    if let Some(out) = &args.out
        && out.exists()
        && !args.force
    {
        bail!(
            "{} already exists; pass --force to replace it",
            out.display()
        );
    }
    // Every category's data is read before the model is loaded: a bad file fails in a second.
    let mut suites = Vec::new();
    for category in &categories {
        let mut entries = bfcl::load(data, category)?;
        if let Some(n) = args.limit {
            entries.truncate(n);
        }
        suites.push((category.clone(), entries));
    }

    // The model: served in-process on the loopback, or the endpoint given.
    let mut served = None;
    // With --run: the store, the run and the checkpoint step its scores are stored at.
    let mut run_at = None;
    let (url, model_name) = if let Some(endpoint) = &args.endpoint {
        (endpoint.clone(), args.endpoint_model.clone())
    } else {
        let started = Instant::now();
        let model = match (&args.model, &args.run) {
            (Some(path), _) => LoadedModel::from_path(path)?,
            (None, Some(run)) => {
                let store_path = store_path.context("a run needs a store")?;
                let store = Store::open(store_path)?;
                let record = store.view().find_run(run)?;
                let step = store.view().checkpoints(record.id)?.last().map(|c| c.step);
                let model = LoadedModel::from_run(&store, run)?;
                run_at = Some((store, record.id, step.unwrap_or(0)));
                model
            }
            (None, None) => bail!("give --model PATH, --run RUN or --endpoint URL"),
        };
        eprintln!(
            "loaded {} ({}) in {:.1} s",
            model.name(),
            model.weights(),
            started.elapsed().as_secs_f64()
        );
        let server = serve(model, "127.0.0.1:0".parse()?, &ServeOptions::default())?;
        let name = server.model_name().to_owned();
        let url = server.url();
        served = Some(server);
        (url, name)
    };
    let client = ChatClient::new(&EndpointConfig {
        url,
        model: model_name.clone(),
        api_key_env: None,
        timeout_secs: 600.0,
        max_retries: 2,
        max_concurrency: 8,
    })?;
    let options = RunOptions {
        max_tokens: args.max_tokens,
        concurrency: 8,
        names: if args.underscore_names {
            NameStyle::DotsAsUnderscores
        } else {
            NameStyle::AsDocumented
        },
    };

    let mut lines = Vec::new();
    let mut summary = Vec::new();
    for (category, entries) in &suites {
        let bar = ProgressBar::new(entries.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>18} [{bar:30}] {pos}/{len} tasks  {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("bfcl:{category}"));
        let started = Instant::now();
        let (score, records) =
            bfcl::run::run_category(&client, entries, category, &options, &|done, _| {
                bar.set_position(done as u64)
            });
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        for record in &records {
            lines.push(serde_json::to_string(record)?);
        }
        let tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
        out!(
            "bfcl:{category}: accuracy {:.4} ± {:.4} ({} of {} right) in {secs:.1} s ({tokens} generated tokens)",
            score.accuracy,
            score.accuracy_se,
            score.correct,
            score.total
        );
        let mut reasons = std::collections::BTreeMap::<String, usize>::new();
        for verdict in score.verdicts.iter().filter(|v| !v.valid) {
            let kind = verdict.reason.split(": ").next().unwrap_or("").to_owned();
            *reasons.entry(kind).or_default() += 1;
        }
        for (kind, n) in &reasons {
            out!("    {n:>4} {kind}");
        }
        summary.push((category.clone(), score));
    }
    let accuracy: std::collections::BTreeMap<String, f64> = summary
        .iter()
        .map(|(category, score)| (category.clone(), score.accuracy))
        .collect();
    if let Some(summary) = bfcl::ast_summary(&accuracy)
        && summary.is_finite()
        && accuracy.len() > 1
    {
        out!(
            "bfcl: non-live AST summary {summary:.4} (BFCL's unweighted mean over the categories run)"
        );
    }
    if let Some(out) = &args.out {
        let mut text = lines.join("\n");
        text.push('\n');
        emit(Some(out), args.force, text.as_bytes())?;
        eprintln!("wrote {} task records to {}", lines.len(), out.display());
    }
    if let Some((mut store, run, step)) = run_at {
        let mut batch = Batch::new(run);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for (category, score) in &summary {
            for (metric, value) in [
                ("accuracy", score.accuracy),
                ("accuracy_se", score.accuracy_se),
            ] {
                batch.evals.push(EvalRow {
                    step,
                    benchmark: format!("bfcl_{category}"),
                    category: "all".to_owned(),
                    metric: metric.to_owned(),
                    value,
                    n_tasks: score.total as u64,
                    wall_time: now,
                });
            }
        }
        store.write(&batch)?;
        eprintln!(
            "stored the scores with run {run} at step {step} in {}",
            store.path().display()
        );
    }
    if let Some(server) = served {
        server.shutdown();
    }
    Ok(ExitCode::SUCCESS)
}

/// `envace eval score bfcl`: another system's decoded calls through BFCL's AST checker.
pub fn score(command: EvalCommand) -> Result<ExitCode> {
    let EvalCommand::Score(ScoreCommand::Bfcl {
        data,
        category,
        outputs,
        underscore_names,
        json,
    }) = command;
    use envace::eval::bfcl;
    let entries = bfcl::load(&data, &category)?;
    let given = bfcl::read_outputs(&outputs)?;
    let names = if underscore_names {
        bfcl::NameStyle::DotsAsUnderscores
    } else {
        bfcl::NameStyle::AsDocumented
    };
    let scored = bfcl::score(&entries, &category, &given, names)
        .with_context(|| format!("scoring {}", outputs.display()))?;
    if json {
        out!("{}", serde_json::to_string(&scored)?);
    } else {
        for verdict in &scored.verdicts {
            if verdict.valid {
                out!("{}\tok", verdict.id);
            } else {
                out!("{}\twrong\t{}", verdict.id, verdict.reason);
            }
        }
        out!(
            "{category}: accuracy {:.4} ± {:.4} ({} of {} right{})",
            scored.accuracy,
            scored.accuracy_se,
            scored.correct,
            scored.total,
            if scored.missing > 0 {
                format!("; {} without an output, scored wrong", scored.missing)
            } else {
                String::new()
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
