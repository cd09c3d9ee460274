//! The verl scale-out: the exported launcher of every preset against reviewed fixtures and the
//! reference's key lists, the Parquet dataset read back, and imports of hand-written dumps.
//!
//! `ENVACE_BLESS=1` rewrites the launcher fixtures (`fixtures/verl/PRESET.run.sh` and
//! `PRESET.warnings.txt`); review the diff before committing it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use envace::config::{self, PRESETS};
use envace::controller::{JobPool, job_pool};
use envace::store::Store;
use envace::verl::{self, ExportInput, ExportOptions, ExportReport};
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verl")
}

/// A key list fixture: `key` lines, `env` lines, and `map` lines (free-form mappings whose
/// children are any keys).
#[derive(Debug, Default)]
struct KeyList {
    keys: BTreeSet<String>,
    envs: BTreeSet<String>,
    maps: BTreeSet<String>,
}

impl KeyList {
    fn accepts(&self, key: &str) -> bool {
        self.keys.contains(key)
            || self.maps.iter().any(|map| {
                key.strip_prefix(map.as_str())
                    .is_some_and(|r| r.starts_with('.'))
            })
    }
}

fn key_list(name: &str) -> KeyList {
    let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
    let mut list = KeyList::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        match line.split_once(' ') {
            Some(("key", key)) => list.keys.insert(key.to_owned()),
            Some(("env", name)) => list.envs.insert(name.to_owned()),
            Some(("map", key)) => list.maps.insert(key.to_owned()),
            _ => panic!("{name}: unexpected line {line:?}"),
        };
    }
    list
}

/// The settings a preset lacks, as a user would give them with `--set`.
fn sets_for(config: &config::ExperimentConfig) -> ExportOptions {
    let mut options = ExportOptions::default();
    if config.model.source != config::ModelSource::Hf {
        options
            .sets
            .insert("model_path".into(), "/cluster/models/Qwen3-8B".into());
    }
    if config.judge.kind == config::JudgeKind::Rule {
        options
            .sets
            .insert("judge_url".into(), "http://judge.cluster:10001/v1".into());
    }
    options
}

/// Exports preset `name` into `out` with its real task pools.
fn export_preset(name: &str, out: &Path) -> ExportReport {
    let preset = config::preset(name).unwrap();
    let config_path = out.with_extension("toml");
    std::fs::write(&config_path, preset.toml).unwrap();
    let experiment = config::parse_file(&config_path).unwrap();
    let sources = envace::rl::session::load_sources(&experiment).unwrap();
    let train = job_pool(&experiment, &sources, JobPool::Rl).unwrap();
    let validation = job_pool(&experiment, &sources, JobPool::HeldOut).unwrap();
    verl::export(
        &experiment,
        &config_path,
        out,
        ExportInput {
            train: &train,
            validation: &validation,
            sources: &sources,
        },
        &sets_for(&experiment),
    )
    .unwrap()
}

fn check_golden(path: &Path, actual: &str) {
    if std::env::var_os("ENVACE_BLESS").is_some() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|_| {
        panic!(
            "{} is missing; run with ENVACE_BLESS=1 to write it",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the export at line {} (ENVACE_BLESS=1 rewrites it; review the diff):\n  fixture: {:?}\n  export:  {:?}",
            path.display(),
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// Every preset's launcher matches its reviewed fixture, and every override key and
/// environment variable it uses is one the reference accepts — in the launcher key list the
/// exporter was written against and in the held-out list of keys its Python code reads.
#[test]
fn preset_launchers_match_fixtures_and_reference_keys() {
    let reference = key_list("reference_keys.txt");
    let heldout = key_list("heldout_keys.txt");
    let tmp = tempfile::tempdir().unwrap();
    for preset in PRESETS {
        let out = tmp.path().join(preset.name);
        let report = export_preset(preset.name, &out);
        let script = std::fs::read_to_string(out.join("run.sh")).unwrap();
        check_golden(&fixtures().join(format!("{}.run.sh", preset.name)), &script);
        let warnings: String = report.warnings.iter().map(|w| format!("{w}\n")).collect();
        check_golden(
            &fixtures().join(format!("{}.warnings.txt", preset.name)),
            &warnings,
        );
        assert!(!report.override_keys.is_empty());
        for key in &report.override_keys {
            assert!(
                reference.accepts(key),
                "{}: override {key} is not in reference_keys.txt",
                preset.name
            );
            assert!(
                heldout.accepts(key),
                "{}: override {key} is not in the held-out key list",
                preset.name
            );
        }
        for name in &report.env_vars {
            assert!(
                reference.envs.contains(name),
                "{}: run.sh variable {name} is not one the reference launcher reads",
                preset.name
            );
        }
        // The keys the report lists are the ones the script passes.
        let in_script = script
            .lines()
            .filter_map(|l| l.strip_prefix("    "))
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim_start_matches('+')))
            .count();
        assert_eq!(in_script, report.override_keys.len(), "{}", preset.name);
        assert!(report.n_train > 0 && report.n_validation > 0);
    }
}

#[test]
fn missing_settings_are_one_error_naming_each_set() {
    let tmp = tempfile::tempdir().unwrap();
    let preset = config::preset("quickstart").unwrap();
    let config_path = tmp.path().join("quickstart.toml");
    std::fs::write(&config_path, preset.toml).unwrap();
    let experiment = config::parse_file(&config_path).unwrap();
    let sources = envace::tasks::GenSources {
        retail: None,
        airline: None,
    };
    let input = ExportInput {
        train: &[],
        validation: &[],
        sources: &sources,
    };
    let err = verl::export(
        &experiment,
        &config_path,
        &tmp.path().join("out"),
        input,
        &ExportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--set model_path=DIR"), "{err}");
    assert!(err.contains("--set judge_url=URL"), "{err}");
    let mut options = sets_for(&experiment);
    options.sets.insert("nodes".into(), "4".into());
    let err = verl::export(
        &experiment,
        &config_path,
        &tmp.path().join("out"),
        input,
        &options,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--set nodes: unknown setting"), "{err}");
}

/// Drops nulls from objects, so a row read back (absent optional fields are null) compares
/// with the row written (absent fields are missing).
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        Value::Number(n) => serde_json::json!(n.as_f64()),
        other => other.clone(),
    }
}

/// A Parquet record as JSON.
fn row_json(row: &parquet::record::Row) -> Value {
    Value::Object(
        row.get_column_iter()
            .map(|(name, field)| (name.clone(), field_json(field)))
            .collect(),
    )
}

fn field_json(field: &parquet::record::Field) -> Value {
    use parquet::record::Field;
    match field {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Long(n) => serde_json::json!(n),
        Field::Double(x) => serde_json::json!(x),
        Field::Str(s) => Value::String(s.clone()),
        Field::Group(row) => row_json(row),
        Field::ListInternal(list) => Value::Array(list.elements().iter().map(field_json).collect()),
        other => panic!("unexpected Parquet field {other:?}"),
    }
}

/// The Parquet files read back with the reference's column names and types, row for row the
/// JSON rows of the tool dataset (the same rows).
#[test]
fn parquet_dataset_reads_back_with_reference_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("quickstart");
    let report = export_preset("quickstart", &out);
    let json: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(out.join("data/checklist_tools.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json.len(), report.n_train + report.n_validation);
    let file = std::fs::File::open(out.join("data/validation.parquet")).unwrap();
    let reader = SerializedFileReader::new(file).unwrap();
    let schema = reader.metadata().file_metadata().schema_descr();
    let columns: Vec<String> = (0..schema.num_columns())
        .map(|i| schema.column(i).path().string())
        .collect();
    for (column, physical) in [
        ("data_source", "BYTE_ARRAY"),
        ("messages.list.element.role", "BYTE_ARRAY"),
        ("messages.list.element.content", "BYTE_ARRAY"),
        ("extra_info.index", "INT64"),
        ("extra_info.original_index", "INT64"),
        ("extra_info.tools", "BYTE_ARRAY"),
        (
            "extra_info.messages.list.element.tool_calls.list.element.function.arguments",
            "BYTE_ARRAY",
        ),
        (
            "extra_info.interaction_kwargs.checklist_list.list.element.list.element.list.element.weight",
            "DOUBLE",
        ),
        (
            "extra_info.interaction_kwargs.checklist_list.list.element.list.element.list.element.required_for_next_turn",
            "BOOLEAN",
        ),
    ] {
        let at = columns
            .iter()
            .position(|c| c == column)
            .unwrap_or_else(|| panic!("no column {column} in {columns:?}"));
        assert_eq!(
            schema.column(at).physical_type().to_string(),
            physical,
            "{column}"
        );
    }
    let rows: Vec<Value> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| row_json(&row.unwrap()))
        .collect();
    assert_eq!(rows.len(), report.n_validation);
    for (idx, row) in rows.iter().enumerate() {
        assert_eq!(
            without_nulls(row),
            without_nulls(&json[report.n_train + idx]),
            "validation row {idx}"
        );
    }
    let first = &rows[0];
    assert_eq!(
        first["messages"].as_array().unwrap().last().unwrap()["role"],
        "user"
    );
    let tools: Value =
        serde_json::from_str(first["extra_info"]["tools"].as_str().unwrap()).unwrap();
    assert!(tools[0]["function"]["name"].is_string());
}

/// Python's reader agrees (pyarrow, as the reference's `datasets` loads Parquet; installed by
/// `cargo xtask setup` into the cache); skipped with a message only when Python is missing.
#[test]
fn parquet_dataset_reads_back_in_pyarrow() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED parquet_dataset_reads_back_in_pyarrow: python3 is not on PATH");
        return;
    }
    let package = envace::model::cached_file("python/pyarrow/__init__.py", "the pyarrow package")
        .unwrap_or_else(|e| panic!("{e}"));
    let site = package
        .parent()
        .and_then(Path::parent)
        .expect("the package's folder")
        .to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("quickstart");
    export_preset("quickstart", &out);
    let script = "import sys, pyarrow.parquet as pq\n\
        t = pq.read_table(sys.argv[1])\n\
        s = t.schema\n\
        assert str(s.field('messages').type) == 'list<element: struct<role: string, content: string>>', s.field('messages').type\n\
        e = s.field('extra_info').type\n\
        assert str(e.field('index').type) == 'int64'\n\
        assert str(e.field('tools').type) == 'string'\n\
        r = t.slice(0, 1).to_pylist()[0]\n\
        assert r['extra_info']['interaction_kwargs']['checklist_list'][0][0][0]['weight'] > 0\n\
        print(t.num_rows)\n";
    let output = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(out.join("data/validation.parquet"))
        .env("PYTHONPATH", &site)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// The hand-written dumps become one imported run with its trajectories (roles told apart),
/// per-step rewards and console metrics; the cut line is reported with its file and line.
#[test]
fn import_reads_dumps_and_metrics_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster-run");
    copy_dir(&fixtures().join("run"), &dir);
    let mut store = Store::open(&tmp.path().join("runs.sqlite")).unwrap();

    let report = verl::import(&mut store, &dir).unwrap();
    assert!(report.created);
    assert_eq!(report.name, "cluster-sample");
    assert_eq!(report.trajectories, 6);
    let skipped: Vec<String> = report.skipped.iter().map(|s| s.to_string()).collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].starts_with("rollout_dumps/2.jsonl:2: malformed JSON line"),
        "{skipped:?}"
    );

    let run = store.view().find_run("cluster-sample").unwrap();
    assert_eq!(run.id, report.run);
    let source = std::fs::canonicalize(&dir).unwrap().display().to_string();
    assert_eq!(store.imported_from(run.id).unwrap(), Some(source));

    let trajectories = store.view().trajectories(run.id).unwrap();
    assert_eq!(trajectories.len(), 6);
    let roles: Vec<(u64, u64, String, Option<f64>)> = trajectories
        .iter()
        .map(|t| {
            (
                t.step,
                t.episode_idx,
                t.data["imported"]["role"].as_str().unwrap().to_owned(),
                t.reward,
            )
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            (1, 0, "act".into(), Some(1.0)),
            (1, 1, "act".into(), Some(0.0)),
            (1, 2, "rehearse".into(), Some(1.0)),
            (1, 3, "rehearse".into(), Some(0.0)),
            (2, 0, "act".into(), Some(0.5)),
            (2, 2, "rehearse".into(), Some(0.5)),
        ]
    );
    // Both rollouts of the same prompt share a group; the stored records read back as episodes.
    assert_eq!(trajectories[0].task_id, trajectories[1].task_id);
    assert_ne!(trajectories[0].task_id, trajectories[2].task_id);
    let episodes = store
        .read(|view| envace::rollout::load_episodes(view, run.id))
        .unwrap();
    assert_eq!(episodes.len(), 6);
    assert_eq!(episodes[2].1.mode, "rehearse");

    let metric = |step: u64, key: &str| -> Option<f64> {
        let values: Vec<f64> = store
            .view()
            .metrics(run.id)
            .unwrap()
            .iter()
            .filter(|m| m.step == step && m.key == key)
            .map(|m| m.value)
            .collect();
        assert!(values.len() <= 1, "{key} at step {step} stored twice");
        values.first().copied()
    };
    assert_eq!(metric(1, "rl/reward"), Some(0.5));
    assert_eq!(metric(1, "act/n_samples"), Some(2.0));
    assert_eq!(metric(1, "rehearse/reward"), Some(0.5));
    assert_eq!(metric(1, "rl/success"), Some(0.5));
    assert_eq!(metric(2, "act/reward"), Some(0.5));
    assert_eq!(metric(1, "verl/critic/score/mean"), Some(0.5));
    assert_eq!(
        metric(2, "verl/actor/Tool Caller Agent/pg_loss"),
        Some(-0.004)
    );
    let n_metrics = store.view().count_metrics(run.id).unwrap();

    // A second import of the same folder adds nothing.
    let again = verl::import(&mut store, &dir).unwrap();
    assert!(!again.created);
    assert_eq!((again.trajectories, again.metrics), (0, 0));
    assert_eq!(store.view().runs().unwrap().len(), 1);
    assert_eq!(store.view().trajectories(run.id).unwrap().len(), 6);
    assert_eq!(store.view().count_metrics(run.id).unwrap(), n_metrics);
}

/// A folder that grows (a live run) adds only its new lines; a last line still being written
/// is reported with its file and line and read once it is complete.
#[test]
fn reimport_of_a_growing_folder_adds_only_new_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("live");
    copy_dir(&fixtures().join("run"), &dir);
    let mut store = Store::open(&tmp.path().join("runs.sqlite")).unwrap();
    let first = verl::import(&mut store, &dir).unwrap();

    let line = r#"{"input": "system\nYou are a helpful assistant.\nuser\nConvert 3 km to m.\nassistant\n", "output": "3000 m", "score": 1.0, "step": 2, "max_num_turns": 1, "num_checklists": 1}"#;
    let dump = dir.join("rollout_dumps/2.jsonl");
    let mut text = std::fs::read_to_string(&dump).unwrap();
    text.push_str(&line[..40]);
    std::fs::write(&dump, &text).unwrap();
    let partial = verl::import(&mut store, &dir).unwrap();
    assert_eq!(partial.trajectories, 0);
    let skipped: Vec<String> = partial.skipped.iter().map(|s| s.to_string()).collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].starts_with("rollout_dumps/2.jsonl:4: truncated"),
        "{skipped:?}"
    );

    text.push_str(&line[40..]);
    text.push('\n');
    std::fs::write(&dump, &text).unwrap();
    std::fs::write(
        dir.join("rollout_dumps/3.jsonl"),
        format!("{}\n", line.replace("\"step\": 2", "\"step\": 3")),
    )
    .unwrap();
    let mut log = std::fs::read_to_string(dir.join("logs/console.log")).unwrap();
    log.push_str("step:3 - critic/score/mean:1.000\n");
    std::fs::write(dir.join("logs/console.log"), log).unwrap();
    let grown = verl::import(&mut store, &dir).unwrap();
    assert_eq!(grown.run, first.run);
    assert_eq!(grown.trajectories, 2);
    assert!(grown.skipped.is_empty(), "{:?}", grown.skipped);
    let trajectories = store.view().trajectories(first.run).unwrap();
    assert_eq!(trajectories.len(), 8);
    let metrics = store.view().metrics(first.run).unwrap();
    let act_reward_2: Vec<f64> = metrics
        .iter()
        .filter(|m| m.step == 2 && m.key == "act/reward")
        .map(|m| m.value)
        .collect();
    assert_eq!(
        act_reward_2,
        vec![0.75],
        "recomputed over the grown dump, once"
    );
    assert!(
        metrics
            .iter()
            .any(|m| m.step == 3 && m.key == "verl/critic/score/mean" && m.value == 1.0)
    );
}

#[test]
fn import_of_a_folder_without_dumps_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = Store::open(&tmp.path().join("runs.sqlite")).unwrap();
    let err = verl::import(&mut store, tmp.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nothing to import"), "{err}");
    assert!(store.view().runs().unwrap().is_empty());
}
