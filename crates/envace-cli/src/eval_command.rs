//! `envace eval --model PATH | --run RUN[@STEP] | --endpoint URL --bench bfcl:CATEGORY,tau2:DOMAIN,vita:delivery,…`:
//! public benchmarks on a model file, a run's checkpoint (scores stored with the run) or
//! any OpenAI-compatible endpoint (τ²-bench and VitaBench with a user simulator behind another), with a
//! progress bar per category and every task's record; and
//! `envace eval score bfcl`, another system's decoded calls through the same checker.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use envace::config::EndpointConfig;
use envace::env::tau2::{DomainKind, Task, Tau2Domain};
use envace::eval::bfcl::{self, NameStyle, run::RunOptions};
use envace::eval::convrehearsal::{RehearsalBudget, RehearsingAgent};
use envace::eval::tau2::{self, EndpointAgent, EndpointJudge, EndpointUser, Tau2Options};
use envace::openai::{ChatClient, ChatMsg, ChatRequest};
use envace::serve::{LoadedModel, ServeOptions, serve};
use envace::store::{Batch, EvalRow, EvalTaskRow, Store};
use indicatif::{ProgressBar, ProgressStyle};

use crate::commands::emit;
use crate::{EvalArgs, EvalCommand, ScoreCommand};

/// One item of `--bench`.
#[derive(Debug, Clone, PartialEq)]
enum Bench {
    /// A BFCL category.
    Bfcl(String),
    /// A τ²-bench domain.
    Tau2(DomainKind),
    /// A VitaBench domain (`delivery`).
    Vita(String),
    /// A tool-call dataset in OpenAI format, by file name.
    Tools(String),
}

/// One BFCL category's tasks.
enum BfclSuite {
    Single(Vec<bfcl::Entry>),
    Multi(Vec<bfcl::multi::MultiEntry>),
}

impl BfclSuite {
    fn len(&self) -> usize {
        match self {
            BfclSuite::Single(entries) => entries.len(),
            BfclSuite::Multi(entries) => entries.len(),
        }
    }
}

/// The items of `--bench` (`bfcl:NAME`, `tau2:DOMAIN`), checked before any model is loaded.
fn parse_benches(bench: &[String]) -> Result<Vec<Bench>> {
    let mut out = Vec::new();
    for item in bench {
        let Some((name, category)) = item.trim().split_once(':') else {
            bail!(
                "--bench {item:?}: give BENCHMARK:CATEGORY, e.g. bfcl:simple_python or tau2:retail"
            );
        };
        match name {
            "bfcl" => {
                if let Some(why) = bfcl::unsupported(category) {
                    bail!("--bench {item:?}: {why}");
                }
                if !bfcl::CATEGORIES.contains(&category)
                    && !bfcl::multi::MULTI_CATEGORIES.contains(&category)
                {
                    bail!(
                        "--bench {item:?}: unknown BFCL category; the categories are {}, {}",
                        bfcl::CATEGORIES.join(", "),
                        bfcl::multi::MULTI_CATEGORIES.join(", ")
                    );
                }
                out.push(Bench::Bfcl(category.to_owned()));
            }
            "tau2" => {
                let kind = match category {
                    "retail" => DomainKind::Retail,
                    "airline" => DomainKind::Airline,
                    _ => bail!(
                        "--bench {item:?}: unknown τ²-bench domain; the domains are retail, airline"
                    ),
                };
                out.push(Bench::Tau2(kind));
            }
            "vita" => {
                if category != "delivery" {
                    bail!(
                        "--bench {item:?}: VitaBench's {category:?} domain is not rebuilt; vita:delivery is"
                    );
                }
                out.push(Bench::Vita(category.to_owned()));
            }
            "tools" => {
                if category.is_empty() {
                    bail!("--bench {item:?}: name the dataset, e.g. tools:finmcp for finmcp.jsonl");
                }
                out.push(Bench::Tools(category.to_owned()));
            }
            _ => bail!(
                "--bench {item:?}: the benchmark {name:?} cannot be evaluated yet; BFCL (bfcl:simple_python, …), τ²-bench (tau2:retail, tau2:airline), VitaBench (vita:delivery) and tool-call datasets (tools:NAME) can"
            ),
        }
    }
    Ok(out)
}

/// A τ²-bench domain's folder: `DIR/tau2-bench/<domain>`, or `DIR/<domain>` when DIR is the
/// τ²-bench folder itself.
fn tau2_dir(data: &Path, kind: DomainKind) -> std::path::PathBuf {
    let nested = data.join("tau2-bench");
    let root = if nested.is_dir() {
        nested
    } else {
        data.to_path_buf()
    };
    root.join(kind.as_str())
}

/// A VitaBench domain's task file: in `DIR/vitabench/<domain>/`, `DIR/<domain>/` or DIR itself.
fn vita_file(data: &Path, domain: &str) -> std::path::PathBuf {
    let candidates = [
        data.join("vitabench").join(domain),
        data.join(domain),
        data.to_path_buf(),
    ];
    let dir = candidates
        .iter()
        .find(|dir| envace::env::vita::task_file(dir).is_file())
        .unwrap_or(&candidates[0]);
    envace::env::vita::task_file(dir)
}

/// A tool-call dataset's file: `NAME` itself, `NAME.jsonl` or `NAME.json`, in DIR or DIR/tools.
fn tools_file(data: &Path, name: &str) -> Result<std::path::PathBuf> {
    let mut tried = Vec::new();
    for dir in [data.to_path_buf(), data.join("tools")] {
        for file in [
            name.to_owned(),
            format!("{name}.jsonl"),
            format!("{name}.json"),
        ] {
            let path = dir.join(file);
            if path.is_file() {
                return Ok(path);
            }
            tried.push(path.display().to_string());
        }
    }
    bail!(
        "--bench tools:{name}: no dataset file; looked for {}",
        tried.join(", ")
    )
}

/// Counts how conversations ended, by kind (`user_stop`, `max_steps`, …).
fn endings<'a>(
    terminations: impl Iterator<Item = &'a tau2::Termination>,
) -> Result<BTreeMap<String, usize>> {
    let mut counts = BTreeMap::<String, usize>::new();
    for termination in terminations {
        let kind = serde_json::to_value(termination)?
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_owned();
        *counts.entry(kind).or_default() += 1;
    }
    Ok(counts)
}

/// The first line of an evaluation run's config text: what marks a run as one `--record-as`
/// may reuse. The text is not an experiment config (its `[evaluation]` table is unknown to one),
/// so the studio lists such a run in an arm of its own.
const EVALUATION_RUN_MARK: &str =
    "# An evaluation run recorded by `envace eval --record-as`: a model evaluated, no training.";

/// The newest evaluation run named `name` for the same model, or a new one (finished, step 0).
fn evaluation_run(store: &Store, name: &str, evaluated: &str) -> Result<envace::store::RunId> {
    let text = format!("{EVALUATION_RUN_MARK}\n[evaluation]\n{evaluated}\n");
    let view = store.view();
    let newest = view
        .runs()?
        .into_iter()
        .filter(|run| run.name == name)
        .map(|run| run.id)
        .max_by_key(|id| id.0);
    if let Some(id) = newest {
        let record = view.find_run(&id.0.to_string())?;
        if record.config_toml == text {
            return Ok(id);
        }
        if !record.config_toml.starts_with(EVALUATION_RUN_MARK) {
            bail!(
                "--record-as {name:?}: run {} has that name and is a training run; pick another name",
                id.0
            );
        }
    }
    let run = store.create_run(name, &text)?;
    store.set_run_status(run, envace::store::RunStatus::Finished)?;
    Ok(run)
}

/// `RUN@STEP` as the run and the checkpoint step; a plain `RUN` (or one whose text after the
/// last `@` is not a step) is the run at its latest checkpoint.
fn run_and_step(spec: &str) -> (&str, Option<u64>) {
    match spec.rsplit_once('@') {
        Some((run, step)) if !run.is_empty() => match step.parse::<u64>() {
            Ok(step) => (run, Some(step)),
            Err(_) => (spec, None),
        },
        _ => (spec, None),
    }
}

/// `--timeout SECS`: a positive, finite number of seconds.
pub(crate) fn parse_timeout(text: &str) -> std::result::Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 => Ok(secs),
        _ => Err(format!(
            "{text:?} is not a positive number of seconds, e.g. 600"
        )),
    }
}

/// A client for a chat-completions endpoint; each request may take `timeout_secs`.
fn client(url: &str, model: &str, timeout_secs: f64) -> Result<ChatClient> {
    Ok(ChatClient::new(&EndpointConfig {
        url: url.to_owned(),
        model: model.to_owned(),
        api_key_env: None,
        timeout_secs,
        max_retries: 2,
        max_concurrency: 8,
    })?)
}

/// Asks `client` for one token before any task runs, so that an endpoint that is down or is not
/// an OpenAI-compatible server (an HTML page, a body that is not JSON, an error status) stops the
/// evaluation with what it answered, rather than scoring every task as unanswered. `flag` names
/// the option that gave the URL.
fn preflight(client: &ChatClient, flag: &str) -> Result<()> {
    let mut ping = ChatRequest::new(vec![ChatMsg::user("Reply with one word: ready?")]);
    ping.max_tokens = Some(1);
    ping.temperature = Some(0.0);
    client.complete(&ping).map(drop).map_err(|failure| {
        anyhow::anyhow!(
            "{flag} does not answer as an OpenAI-compatible endpoint, so no task was run: {failure}"
        )
    })
}

/// A benchmark's progress: a bar on a terminal, and with `--progress-json` one JSON line on
/// stderr per item done, `{"bench": …, "done": …, "total": …}` (what the studio reads).
struct Progress {
    bar: ProgressBar,
    label: String,
    total: usize,
    json: bool,
    /// The largest count shown so far.
    shown: std::sync::Mutex<usize>,
}

impl Progress {
    fn set(&self, done: usize) {
        // Workers report side by side: a count that arrives after a larger one says nothing
        // new, and the lock keeps the lines in the order of their counts.
        let mut shown = self
            .shown
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if done < *shown || (done == *shown && done > 0) {
            return;
        }
        *shown = done;
        self.bar.set_position(done as u64);
        if self.json {
            eprintln!(
                "{}",
                serde_json::json!({"bench": self.label, "done": done, "total": self.total})
            );
        }
    }

    fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
    }
}

fn progress_bar(len: usize, prefix: String, unit: &str, json: bool) -> Progress {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{prefix:>18}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{elapsed}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(prefix.clone());
    let progress = Progress {
        bar,
        label: prefix,
        total: len,
        json,
        shown: std::sync::Mutex::new(0),
    };
    progress.set(0);
    progress
}

/// A record as one JSON Lines line, tagged with its benchmark.
fn record_line(benchmark: &str, record: serde_json::Value) -> Result<String> {
    let mut value = record;
    if let Some(map) = value.as_object_mut() {
        map.insert("benchmark".to_owned(), benchmark.into());
    }
    Ok(serde_json::to_string(&value)?)
}

/// A task's row for the store (its step is set when stored), holding the whole record.
fn task_row(
    benchmark: &str,
    task_id: &str,
    trial: usize,
    score: Option<f64>,
    reason: &str,
    data: serde_json::Value,
) -> EvalTaskRow {
    EvalTaskRow {
        step: 0,
        benchmark: benchmark.to_owned(),
        task_id: task_id.to_owned(),
        trial: trial as u64,
        score,
        reason: reason.to_owned(),
        data,
    }
}

/// Keeps a task's row for the store and its record line for `--out`.
fn keep(
    lines: &mut Vec<String>,
    task_rows: &mut Vec<EvalTaskRow>,
    tag: &str,
    row: EvalTaskRow,
) -> Result<()> {
    lines.push(record_line(tag, row.data.clone())?);
    task_rows.push(row);
    Ok(())
}

/// A conversation's reason as stored: why it was masked, else why it scored what it did.
fn conversation_reason(masked: Option<&str>, reason: &str) -> String {
    match masked {
        Some(why) => format!("masked: {why}"),
        None => reason.to_owned(),
    }
}

/// What a rehearsing agent imagined, in one line.
fn rehearsal_line<T: ?Sized>(agent: Option<&RehearsingAgent<'_, T>>) -> Option<String> {
    agent.map(|agent| {
        let (attempts, calls) = agent.counts();
        format!(
            "    rehearsal {}: {attempts} imagined attempts with {calls} imagined tool calls (answered by the model itself)",
            agent.budget.label()
        )
    })
}

/// Counts of the first word group of each reason (`kind: detail` → `kind`).
fn reason_counts<'a>(reasons: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::<String, usize>::new();
    for reason in reasons {
        let kind = reason.split(": ").next().unwrap_or("").to_owned();
        *counts.entry(kind).or_default() += 1;
    }
    counts
}

pub fn evaluate(args: &EvalArgs, store_path: Option<&Path>) -> Result<ExitCode> {
    let benches = parse_benches(&args.bench)?;
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
    if args.prompting
        && let Some(Bench::Bfcl(category)) = benches
            .iter()
            .find(|b| matches!(b, Bench::Bfcl(c) if bfcl::language(c) != bfcl::Language::Python))
    {
        bail!(
            "--prompting reads calls written as Python; bfcl:{category} expects Java or JavaScript arguments, so run it without --prompting"
        );
    }
    let rehearsal = match &args.rehearsal {
        Some(text) => {
            Some(RehearsalBudget::parse(text).map_err(|why| anyhow::anyhow!("--rehearsal {why}"))?)
        }
        None => None,
    };
    if rehearsal.is_some()
        && let Some(bench) = benches
            .iter()
            .find(|b| matches!(b, Bench::Bfcl(_) | Bench::Tools(_)))
    {
        let item = match bench {
            Bench::Bfcl(c) => format!("bfcl:{c}"),
            Bench::Tools(n) => format!("tools:{n}"),
            _ => String::new(),
        };
        bail!(
            "--rehearsal: {item} has no environment to rehearse against (single-turn calls); test-time rehearsal runs on tau2:… and vita:…"
        );
    }
    let has_tau2 = benches.iter().any(|b| matches!(b, Bench::Tau2(_)));
    let has_vita = benches.iter().any(|b| matches!(b, Bench::Vita(_)));
    if has_tau2 || has_vita {
        if args.user_endpoint.is_none() {
            bail!(
                "τ²-bench and VitaBench need a user simulator: pass --user-endpoint URL (any OpenAI-compatible endpoint, e.g. one `envace serve-model` started) or --user-endpoint self"
            );
        }
        if args.trials == 0 {
            bail!("--trials 0: give at least one trial per task");
        }
        if let Some(n) = args.max_steps
            && n < 3
        {
            bail!(
                "--max-steps {n}: a conversation needs at least 3 messages (greeting, user, agent)"
            );
        }
    }
    // Every benchmark's data is read before the model is loaded: a bad file fails in seconds.
    let mut bfcl_suites = Vec::new();
    let mut tau2_suites = Vec::new();
    let mut vita_suites = Vec::new();
    let mut tool_suites = Vec::new();
    for bench in &benches {
        match bench {
            Bench::Bfcl(category) => {
                let limit = args.limit.unwrap_or(usize::MAX);
                let suite = if bfcl::is_multi_turn(category) {
                    let mut entries = bfcl::multi::load_multi(data, category)?;
                    entries.truncate(limit);
                    BfclSuite::Multi(entries)
                } else {
                    let mut entries = bfcl::load(data, category)?;
                    entries.truncate(limit);
                    BfclSuite::Single(entries)
                };
                bfcl_suites.push((category.clone(), suite));
            }
            Bench::Tau2(kind) => {
                let dir = tau2_dir(data, *kind);
                let domain = Tau2Domain::load(*kind, &dir).with_context(|| {
                    format!("loading τ²-bench {} from {}", kind.as_str(), dir.display())
                })?;
                let Some(ids) = domain.splits().get(&args.split) else {
                    bail!(
                        "--split {:?}: {} has the splits {}",
                        args.split,
                        dir.join("split_tasks.json").display(),
                        domain
                            .splits()
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                };
                let mut tasks: Vec<Task> = ids
                    .iter()
                    .filter_map(|id| domain.task(id).cloned())
                    .collect();
                if let Some(n) = args.limit {
                    tasks.truncate(n);
                }
                tau2_suites.push((domain, tasks));
            }
            Bench::Vita(domain) => {
                let path = vita_file(data, domain);
                let mut tasks = envace::env::vita::load_tasks(&path).with_context(|| {
                    format!("loading VitaBench {domain} from {}", path.display())
                })?;
                if let Some(n) = args.limit {
                    tasks.truncate(n);
                }
                vita_suites.push((domain.clone(), tasks));
            }
            Bench::Tools(name) => {
                let path = tools_file(data, name)?;
                let mut samples = envace::eval::toolmetrics::load_samples(&path)?;
                if let Some(n) = args.limit {
                    samples.truncate(n);
                }
                tool_suites.push((name.clone(), samples));
            }
        }
    }
    if has_tau2 && args.judge_endpoint.is_none() {
        eprintln!(
            "no --judge-endpoint: τ²-bench conversations graded by NL assertions (most of retail) will be masked, not scored"
        );
    }
    if has_vita && args.judge_endpoint.is_none() {
        eprintln!(
            "no --judge-endpoint: VitaBench conversations are graded by a rubric judge and will be masked, not scored"
        );
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
            (None, Some(spec)) => {
                let (run, at) = run_and_step(spec);
                let store_path = store_path.context("a run needs a store")?;
                let store = Store::open(store_path)?;
                let record = store.view().find_run(run)?;
                let checkpoints = store.view().checkpoints(record.id)?;
                let step = at.or_else(|| checkpoints.last().map(|c| c.step));
                let model = LoadedModel::from_run_at(&store, run, at)?;
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
    if let Some(name) = &args.record_as {
        let store_path = store_path.context("--record-as needs a store")?;
        let store = Store::open(store_path)?;
        let evaluated = match (&args.model, &args.endpoint) {
            (Some(path), _) => format!("model = {:?}", path.display().to_string()),
            (None, Some(url)) => format!(
                "endpoint = {url:?}\nendpoint_model = {:?}",
                args.endpoint_model
            ),
            (None, None) => bail!("--record-as records --model or --endpoint"),
        };
        let run = evaluation_run(&store, name, &evaluated)?;
        eprintln!(
            "recording the scores as run {} ({name}) in {}",
            run.0,
            store.path().display()
        );
        run_at = Some((store, run, 0));
    }
    let agent_client = client(&url, &model_name, args.timeout)?;
    if args.endpoint.is_some() {
        preflight(&agent_client, "--endpoint")?;
    }
    let conversations = !(tau2_suites.is_empty() && vita_suites.is_empty());
    for (flag, given, model) in [
        ("--user-endpoint", &args.user_endpoint, &args.user_model),
        ("--judge-endpoint", &args.judge_endpoint, &args.judge_model),
    ] {
        if let Some(given) = given.as_deref().filter(|g| conversations && *g != "self") {
            preflight(&client(given, model, args.timeout)?, flag)?;
        }
    }
    let endpoint_or_self = |given: &str, model: &str| -> Result<ChatClient> {
        if given == "self" {
            client(&url, &model_name, args.timeout)
        } else {
            client(given, model, args.timeout)
        }
    };
    let options = RunOptions {
        max_tokens: args.max_tokens,
        concurrency: 8,
        names: if args.underscore_names {
            NameStyle::DotsAsUnderscores
        } else {
            NameStyle::AsDocumented
        },
        prompting: args.prompting,
    };

    // Test-time rehearsal: its setting names the scores (`tau2_airline@parallel:4`), so they
    // sit beside the plain ones instead of replacing them.
    let suffix = rehearsal.map_or(String::new(), |b| format!("@{}", b.label()));
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let mut lines = Vec::new();
    // Every task's row for the store (its step is set when stored).
    let mut task_rows: Vec<EvalTaskRow> = Vec::new();
    // (benchmark, category, metric, value, n_tasks) for the store.
    let mut scores: Vec<(String, String, String, f64, u64)> = Vec::new();
    let mut accuracy = BTreeMap::new();
    for (category, suite) in &bfcl_suites {
        let bar = progress_bar(
            suite.len(),
            format!("bfcl:{category}"),
            "tasks",
            args.progress_json,
        );
        let started = Instant::now();
        let progress = |done: usize, _: usize| bar.set(done);
        // Each task's (id, right, reason, record), and what the category's line adds.
        let mut tasks: Vec<(String, bool, String, serde_json::Value)> = Vec::new();
        let (score, tokens, steps) = match suite {
            BfclSuite::Single(entries) => {
                let (score, records) =
                    bfcl::run::run_category(&agent_client, entries, category, &options, &progress);
                for r in &records {
                    tasks.push((
                        r.id.clone(),
                        r.valid,
                        r.reason.clone(),
                        serde_json::to_value(r)?,
                    ));
                }
                (
                    score,
                    records.iter().map(|r| r.completion_tokens).sum::<u64>(),
                    None,
                )
            }
            BfclSuite::Multi(entries) => {
                let (score, records) =
                    bfcl::multi::run_multi(&agent_client, entries, category, &options, &progress);
                for r in &records {
                    tasks.push((
                        r.id.clone(),
                        r.valid,
                        r.reason.clone(),
                        serde_json::to_value(r)?,
                    ));
                }
                let steps: usize = records.iter().map(|r| r.steps).sum();
                (
                    score,
                    records.iter().map(|r| r.completion_tokens).sum::<u64>(),
                    Some(steps),
                )
            }
        };
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        for (id, valid, reason, record) in tasks {
            let score = if valid { 1.0 } else { 0.0 };
            let row = task_row(
                &format!("bfcl_{category}"),
                &id,
                0,
                Some(score),
                &reason,
                record,
            );
            keep(&mut lines, &mut task_rows, "bfcl", row)?;
        }
        let steps = steps
            .map(|n| format!("{n} model steps, "))
            .unwrap_or_default();
        out!(
            "bfcl:{category}: accuracy {:.4} ± {:.4} ({} of {} right) in {secs:.1} s ({steps}{tokens} generated tokens)",
            score.accuracy,
            score.accuracy_se,
            score.correct,
            score.total
        );
        let failing = score.verdicts.iter().filter(|v| !v.valid);
        for (kind, n) in reason_counts(failing.map(|v| v.reason.as_str())) {
            out!("    {n:>4} {kind}");
        }
        let benchmark = format!("bfcl_{category}");
        let n = score.total as u64;
        scores.push((
            benchmark.clone(),
            "all".to_owned(),
            "accuracy".into(),
            score.accuracy,
            n,
        ));
        scores.push((
            benchmark,
            "all".to_owned(),
            "accuracy_se".into(),
            score.accuracy_se,
            n,
        ));
        accuracy.insert(category.clone(), score.accuracy);
    }
    let non_live = accuracy.keys().filter(|c| !bfcl::is_multi_turn(c)).count();
    if let Some(summary) = bfcl::ast_summary(&accuracy)
        && summary.is_finite()
        && non_live > 1
    {
        out!(
            "bfcl: non-live AST summary {summary:.4} (BFCL's unweighted mean over the categories run)"
        );
    }
    if let Some((overall, groups)) = bfcl::weighted_summary(&accuracy) {
        let parts: Vec<String> = groups.iter().map(|(g, a)| format!("{g} {a:.4}")).collect();
        out!(
            "bfcl: overall {overall:.4} weighted as BFCL v4 weighs its groups, over those run ({}; live and agentic are not rebuilt)",
            parts.join(", ")
        );
    }

    // τ²-bench and VitaBench: the user simulator.
    let mut user = EndpointUser::new(endpoint_or_self(
        args.user_endpoint.as_deref().unwrap_or("self"),
        &args.user_model,
    )?);
    user.temperature = args.temperature;
    if !tau2_suites.is_empty() {
        let judge = match &args.judge_endpoint {
            Some(given) => Some(EndpointJudge::new(endpoint_or_self(
                given,
                &args.judge_model,
            )?)),
            None => None,
        };
        let tau2_options = Tau2Options {
            trials: args.trials,
            max_steps: args.max_steps.unwrap_or(100),
            ..Tau2Options::default()
        };
        for (domain, tasks) in &tau2_suites {
            let name = format!("{}{suffix}", domain.kind().as_str());
            let name = name.as_str();
            let mut agent = EndpointAgent::new(agent_client.clone(), domain);
            agent.max_tokens = args.max_tokens;
            agent.temperature = args.temperature;
            let policy = domain.policy().to_owned();
            let system = move |_: &Task| tau2::agent_system_prompt(&policy);
            let rehearsing = rehearsal.map(|budget| {
                RehearsingAgent::new(
                    &agent,
                    &agent_client,
                    &system,
                    domain.tools().specs(),
                    budget,
                )
            });
            let acting: &dyn tau2::Agent = match &rehearsing {
                Some(r) => r,
                None => &agent,
            };
            let bar = progress_bar(
                tasks.len() * args.trials,
                format!("tau2:{name}"),
                "conversations",
                args.progress_json,
            );
            let started = Instant::now();
            let (score, records) = tau2::run_domain(
                domain,
                tasks,
                acting,
                &user,
                judge.as_ref().map(|j| j as &dyn tau2::AssertionJudge),
                &tau2_options,
                &|done, _| bar.set(done),
            )?;
            bar.finish_and_clear();
            let secs = started.elapsed().as_secs_f64();
            for record in &records {
                let row = task_row(
                    &format!("tau2_{name}"),
                    &record.task_id,
                    record.trial,
                    record.reward,
                    &conversation_reason(record.masked.as_deref(), &record.reason),
                    serde_json::to_value(record)?,
                );
                keep(&mut lines, &mut task_rows, "tau2", row)?;
            }
            let pass1 = score.pass_hat_k.get(&1).copied().unwrap_or(f64::NAN);
            out!(
                "tau2:{name}: pass^1 {pass1:.4} over {} of {} tasks × {} trials (average reward {:.4}; {} conversations masked) in {secs:.1} s",
                score.n_scored_tasks,
                score.n_tasks,
                score.trials,
                score.avg_reward,
                score.masked
            );
            for (k, value) in score.pass_hat_k.iter().skip(1) {
                out!("    pass^{k} {value:.4}");
            }
            if let Some(line) = rehearsal_line(rehearsing.as_ref()) {
                out!("{line}");
            }
            for (kind, n) in endings(records.iter().map(|r| &r.termination))? {
                out!("    {n:>4} ended: {kind}");
            }
            let failing = records
                .iter()
                .filter(|r| r.reward.is_some_and(|r| r < 1.0))
                .map(|r| r.reason.as_str());
            for (kind, n) in reason_counts(failing) {
                out!("    {n:>4} {kind}");
            }
            let benchmark = format!("tau2_{name}");
            let n = score.n_scored_tasks as u64;
            for (k, value) in &score.pass_hat_k {
                scores.push((
                    benchmark.clone(),
                    "all".to_owned(),
                    format!("pass^{k}"),
                    *value,
                    n,
                ));
            }
            scores.push((
                benchmark.clone(),
                "all".to_owned(),
                "avg_reward".into(),
                score.avg_reward,
                score.n_tasks as u64,
            ));
            scores.push((
                benchmark,
                "all".to_owned(),
                "masked".into(),
                score.masked as f64,
                score.n_tasks as u64,
            ));
        }
    }

    for (domain, tasks) in &vita_suites {
        use envace::eval::vita::{self, EndpointRubricJudge, VitaAgent};
        let judge = match &args.judge_endpoint {
            Some(given) => Some(EndpointRubricJudge::new(endpoint_or_self(
                given,
                &args.judge_model,
            )?)),
            None => None,
        };
        let mut agent = VitaAgent::new(agent_client.clone());
        agent.0.max_tokens = args.max_tokens;
        agent.0.temperature = args.temperature;
        let tools = envace::env::vita::delivery_tools();
        let system = |task: &envace::env::vita::VitaTask| vita::agent_system_prompt(task);
        let rehearsing = rehearsal
            .map(|budget| RehearsingAgent::new(&agent.0, &agent_client, &system, tools, budget));
        let acting: &dyn tau2::Agent<envace::env::vita::VitaTask> = match &rehearsing {
            Some(r) => r,
            None => &agent,
        };
        let domain = &format!("{domain}{suffix}");
        let options = Tau2Options {
            trials: args.trials,
            max_steps: args.max_steps.unwrap_or(300),
            ..Tau2Options::default()
        };
        let bar = progress_bar(
            tasks.len() * args.trials,
            format!("vita:{domain}"),
            "conversations",
            args.progress_json,
        );
        let started = Instant::now();
        let (score, records) = vita::run_domain(
            domain,
            tasks,
            acting,
            &user,
            judge.as_ref().map(|j| j as &dyn vita::RubricJudge),
            &options,
            &|done, _| bar.set(done),
        )?;
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        let benchmark = format!("vita_{domain}");
        for record in &records {
            let row = task_row(
                &benchmark,
                &record.task_id,
                record.trial,
                record.reward,
                &conversation_reason(record.masked.as_deref(), &record.reason),
                serde_json::to_value(record)?,
            );
            keep(&mut lines, &mut task_rows, "vita", row)?;
        }
        let k = score.trials;
        out!(
            "vita:{domain}: Avg@{k} {:.4}, Pass@{k} {:.4}, Pass^{k} {:.4} over {} of {} tasks × {k} trials (rubrics met {:.4}; {} conversations masked) in {secs:.1} s",
            score.avg_at_k,
            score
                .pass_at_k
                .get(&(k as u64))
                .copied()
                .unwrap_or(f64::NAN),
            score
                .pass_hat_k
                .get(&(k as u64))
                .copied()
                .unwrap_or(f64::NAN),
            score.n_scored_tasks,
            score.n_tasks,
            score.rubric_score,
            score.masked
        );
        if let Some(line) = rehearsal_line(rehearsing.as_ref()) {
            out!("{line}");
        }
        for (kind, n) in endings(records.iter().map(|r| &r.termination))? {
            out!("    {n:>4} ended: {kind}");
        }
        let unbuilt: usize = records.iter().map(|r| r.unbuilt_calls).sum();
        if unbuilt > 0 {
            out!(
                "    {unbuilt:>4} calls to tools not rebuilt ({})",
                envace::env::vita::NOT_REBUILT
                    .iter()
                    .map(|(name, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let failing = records
            .iter()
            .filter(|r| r.reward.is_some_and(|r| r < 1.0))
            .map(|r| r.reason.as_str());
        for (kind, n) in reason_counts(failing) {
            out!("    {n:>4} {kind}");
        }
        let n = score.n_scored_tasks as u64;
        let all = score.n_tasks as u64;
        scores.push((
            benchmark.clone(),
            "all".to_owned(),
            format!("avg@{k}"),
            score.avg_at_k,
            all,
        ));
        for (k, value) in &score.pass_at_k {
            scores.push((
                benchmark.clone(),
                "all".to_owned(),
                format!("pass@{k}"),
                *value,
                n,
            ));
        }
        for (k, value) in &score.pass_hat_k {
            scores.push((
                benchmark.clone(),
                "all".to_owned(),
                format!("pass^{k}"),
                *value,
                n,
            ));
        }
        scores.push((
            benchmark.clone(),
            "all".to_owned(),
            "rubric_score".into(),
            score.rubric_score,
            all,
        ));
        scores.push((
            benchmark,
            "all".to_owned(),
            "masked".into(),
            score.masked as f64,
            all,
        ));
    }

    for (name, samples) in &tool_suites {
        use envace::eval::toolmetrics;
        let bar = progress_bar(
            samples.len(),
            format!("tools:{name}"),
            "samples",
            args.progress_json,
        );
        let started = Instant::now();
        let report =
            toolmetrics::run_dataset(&agent_client, samples, args.max_tokens, 8, &|done, _| {
                bar.set(done)
            });
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        let benchmark = format!("tools_{name}");
        for sample in &report.samples {
            let reason = match &sample.failure {
                Some(why) => format!("no answer: {why}"),
                None if sample.exact => String::new(),
                None => format!("called {:?}, expected {:?}", sample.predicted, sample.gold),
            };
            let row = task_row(
                &benchmark,
                &sample.id,
                0,
                Some(sample.f1),
                &reason,
                serde_json::to_value(sample)?,
            );
            keep(&mut lines, &mut task_rows, "tools", row)?;
        }
        print_tool_report(&format!("tools:{name}"), &report, secs)?;
        push_tool_scores(&mut scores, &benchmark, &report);
    }

    if let Some(out) = &args.out {
        let mut text = lines.join("\n");
        text.push('\n');
        emit(Some(out), args.force, text.as_bytes())?;
        eprintln!("wrote {} task records to {}", lines.len(), out.display());
    }
    if let Some((mut store, run, step)) = run_at {
        let mut batch = Batch::new(run);
        let wall_time = now();
        for (benchmark, category, metric, value, n_tasks) in scores {
            batch.evals.push(EvalRow {
                step,
                benchmark,
                category,
                metric,
                value,
                n_tasks,
                wall_time,
            });
        }
        batch.eval_tasks = task_rows
            .into_iter()
            .map(|row| EvalTaskRow { step, ..row })
            .collect();
        let n_records = batch.eval_tasks.len();
        store.write_evaluation(&batch)?;
        eprintln!(
            "stored the scores and {n_records} task records with run {run} at step {step} in {}",
            store.path().display()
        );
    }
    if let Some(server) = served {
        server.shutdown();
    }
    Ok(ExitCode::SUCCESS)
}

/// A tool-metrics report's lines: overall, then per scenario and per difficulty.
fn print_tool_report(
    label: &str,
    report: &envace::eval::toolmetrics::ToolReport,
    secs: f64,
) -> Result<()> {
    let line = |m: &envace::eval::toolmetrics::ToolMetrics| {
        format!(
            "F1 {:.4} (P {:.4}, R {:.4}) macro, F1 {:.4} (P {:.4}, R {:.4}) micro, exact {:.4}, {} samples",
            m.f1_macro,
            m.precision_macro,
            m.recall_macro,
            m.f1_micro,
            m.precision_micro,
            m.recall_micro,
            m.exact_match,
            m.n_samples
        )
    };
    out!("{label}: {} in {secs:.1} s", line(&report.overall));
    for (scenario, m) in &report.by_scenario {
        out!("    scenario {scenario}: {}", line(m));
    }
    for (difficulty, m) in &report.by_difficulty {
        out!("    difficulty {difficulty}: {}", line(m));
    }
    let failed = report
        .samples
        .iter()
        .filter(|s| s.failure.is_some())
        .count();
    if failed > 0 {
        out!("    {failed:>4} samples without an answer (scored as calling nothing)");
    }
    Ok(())
}

/// A tool-metrics report's figures for the store: category `all`, `scenario:NAME` and
/// `difficulty:NAME`.
fn push_tool_scores(
    scores: &mut Vec<(String, String, String, f64, u64)>,
    benchmark: &str,
    report: &envace::eval::toolmetrics::ToolReport,
) {
    let groups = std::iter::once(("all".to_owned(), &report.overall))
        .chain(
            report
                .by_scenario
                .iter()
                .map(|(k, m)| (format!("scenario:{k}"), m)),
        )
        .chain(
            report
                .by_difficulty
                .iter()
                .map(|(k, m)| (format!("difficulty:{k}"), m)),
        );
    for (category, metrics) in groups {
        for (metric, value) in metrics.pairs() {
            scores.push((
                benchmark.to_owned(),
                category.clone(),
                metric.to_owned(),
                value,
                metrics.n_samples as u64,
            ));
        }
    }
}

/// `envace eval score bfcl|tools`: another system's outputs through the same checker.
pub fn score(command: EvalCommand) -> Result<ExitCode> {
    let EvalCommand::Score(command) = command;
    let (data, category, outputs, underscore_names, json) = match command {
        ScoreCommand::Bfcl {
            data,
            category,
            outputs,
            underscore_names,
            json,
        } => (data, category, outputs, underscore_names, json),
        ScoreCommand::Tools {
            data,
            outputs,
            json,
        } => {
            use envace::eval::toolmetrics;
            let samples = toolmetrics::load_samples(&data)?;
            let given = toolmetrics::read_predictions(&outputs)?;
            let report = toolmetrics::score_predictions(&samples, &given);
            if json {
                out!("{}", serde_json::to_string(&report)?);
            } else {
                for s in &report.samples {
                    let verdict = if s.exact { "exact" } else { "differs" };
                    let why = s
                        .failure
                        .as_deref()
                        .map(|w| format!("\t{w}"))
                        .unwrap_or_default();
                    out!(
                        "{}\t{verdict}\tF1 {:.4}\tcalled {:?}\texpected {:?}{why}",
                        s.id,
                        s.f1,
                        s.predicted,
                        s.gold
                    );
                }
                print_tool_report(&data.display().to_string(), &report, 0.0)?;
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    use envace::eval::bfcl;
    let given = bfcl::read_outputs(&outputs)?;
    let scored = if bfcl::is_multi_turn(&category) {
        let entries = bfcl::multi::load_multi(&data, &category)?;
        bfcl::multi::score_multi(&entries, &category, &given)
            .with_context(|| format!("scoring {}", outputs.display()))?
    } else {
        let entries = bfcl::load(&data, &category)?;
        let names = if underscore_names {
            bfcl::NameStyle::DotsAsUnderscores
        } else {
            bfcl::NameStyle::AsDocumented
        };
        bfcl::score(&entries, &category, &given, names)
            .with_context(|| format!("scoring {}", outputs.display()))?
    };
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
