//! Experiment config tests: presets, every invalid fixture's located errors, and the JSON Schema.
#![allow(clippy::unwrap_used)] // Test helpers may unwrap: a panic here is the test failing.

use std::path::{Path, PathBuf};

use envace::config::{self, ExperimentConfig, KlType, ToolResponseMode};
use expect_test::expect_file;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn preset_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("assets/configs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

/// An invalid config kept as a fixture, with what its header says must be reported.
struct Fixture {
    name: String,
    text: String,
    /// (TOML path, line) pairs from `# expect: PATH:LINE` lines.
    expected: Vec<(String, usize)>,
    /// From `# schema-level: true|false`: whether the JSON Schema alone rejects it.
    schema_level: bool,
}

fn fixtures() -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/invalid");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut expected = Vec::new();
            let mut schema_level = None;
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("# expect: ") {
                    let (path, line) = rest.rsplit_once(':').unwrap();
                    expected.push((path.to_string(), line.trim().parse().unwrap()));
                } else if let Some(rest) = line.strip_prefix("# schema-level: ") {
                    schema_level = Some(rest.trim() == "true");
                }
            }
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(!expected.is_empty(), "{name}: no `# expect:` header");
            Fixture {
                name,
                text,
                expected,
                schema_level: schema_level.unwrap(),
            }
        })
        .collect()
}

#[test]
fn every_preset_file_is_valid_and_matches_the_embedded_copy() {
    let files = preset_files();
    assert_eq!(files.len(), config::PRESETS.len());
    for file in files {
        let parsed = config::parse_file(&file).unwrap_or_else(|err| panic!("{err}"));
        let stem = file.file_stem().unwrap().to_str().unwrap();
        let preset = config::preset(stem).unwrap();
        assert_eq!(preset.toml, std::fs::read_to_string(&file).unwrap());
        assert_eq!(parsed.run.name, stem);
    }
}

#[test]
fn presets_differ_only_where_they_say() {
    let quickstart = config::parse(config::preset("quickstart").unwrap().toml, "q").unwrap();
    let real = config::parse(config::preset("real-env-baseline").unwrap().toml, "r").unwrap();
    let frozen = config::parse(config::preset("caller-frozen").unwrap().toml, "c").unwrap();
    assert_eq!(
        quickstart.env.tool_response_mode,
        ToolResponseMode::Rehearse
    );
    assert_eq!(real.env.tool_response_mode, ToolResponseMode::Real);
    assert_eq!(frozen.rl.frozen_roles, vec![config::PolicyRole::Act]);
    // Same budget and model: the comparison is fair.
    assert_eq!(quickstart.rl.n_steps, real.rl.n_steps);
    assert_eq!(quickstart.model, real.model);
    assert_eq!(quickstart.sft, real.sft);
    assert_eq!(quickstart.model, frozen.model);
    assert_eq!(quickstart.sft, frozen.sft);
}

#[test]
fn defaults_follow_the_reference_run() {
    let config = config::parse("[run]\nname = \"x\"\n", "minimal").unwrap();
    let rl = &config.rl;
    assert_eq!(rl.lr, 1e-6);
    assert_eq!((rl.batch_size, rl.group_size), (16, 4));
    assert_eq!((rl.kl_type, rl.kl_coef), (KlType::K3, 1e-4));
    assert_eq!(rl.entropy_coef, 0.0);
    assert!(!rl.divide_by_std);
    assert_eq!((rl.max_prompt_tokens, rl.max_response_tokens), (4096, 8192));
    assert_eq!(config.env.max_turns, 30);
    assert_eq!(config.env.tool_response_mode, ToolResponseMode::Rehearse);
}

#[test]
fn reference_preset_mirrors_the_paper() {
    let config = config::parse(config::preset("envace-qwen3-8b").unwrap().toml, "ref").unwrap();
    assert_eq!(config.model.source, config::ModelSource::Hf);
    assert_eq!(config.rl.lr, 1e-6);
    assert_eq!((config.rl.batch_size, config.rl.group_size), (16, 4));
    assert_eq!(config.env.max_turns, 30);
    assert_eq!(config.judge.kind, config::JudgeKind::Llm);
    assert_eq!(
        config
            .judge
            .endpoint
            .as_ref()
            .unwrap()
            .api_key_env
            .as_deref(),
        Some("ENVACE_JUDGE_API_KEY")
    );
}

#[test]
fn configs_round_trip_through_toml() {
    for preset in config::PRESETS {
        let config = config::parse(preset.toml, preset.name).unwrap();
        let written = config.to_toml().unwrap();
        let again: ExperimentConfig = config::parse(&written, "written").unwrap();
        assert_eq!(config, again, "{}", preset.name);
    }
}

#[test]
fn relative_paths_resolve_against_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exp.toml");
    std::fs::write(
        &file,
        "[run]\nname = \"x\"\n[model]\nsource = \"gguf\"\npath = \"weights/m.gguf\"\n",
    )
    .unwrap();
    let config = config::parse_file(&file).unwrap();
    assert_eq!(
        config.model.path.unwrap(),
        dir.path().join("weights/m.gguf")
    );
}

#[test]
fn a_missing_file_is_named() {
    let err = config::parse_file(Path::new("/no/such/experiment.toml")).unwrap_err();
    assert!(
        err.to_string().starts_with("/no/such/experiment.toml: "),
        "{err}"
    );
}

#[test]
fn there_are_at_least_twenty_invalid_fixtures() {
    assert!(fixtures().len() >= 20);
}

#[test]
fn every_invalid_fixture_reports_its_paths_and_lines() {
    for fixture in fixtures() {
        let source_name = format!("{}.toml", fixture.name);
        let err = match config::parse(&fixture.text, &source_name) {
            Ok(_) => panic!("{}: accepted an invalid config", fixture.name),
            Err(err) => err,
        };
        let mut reported: Vec<(String, usize)> = err
            .issues
            .iter()
            .map(|issue| (issue.path.clone(), issue.line))
            .collect();
        let mut expected = fixture.expected.clone();
        reported.sort();
        expected.sort();
        assert_eq!(reported, expected, "{}:\n{err}", fixture.name);
        // Each message names the file, the line and column, and the path.
        let rendered = err.to_string();
        for (path, line) in &fixture.expected {
            let located = format!("{source_name}:{line}:");
            assert!(rendered.contains(&located), "{}: {rendered}", fixture.name);
            assert!(
                rendered.contains(path.as_str()),
                "{}: {rendered}",
                fixture.name
            );
        }
        expect_file![format!(
            "../fixtures/config/invalid/{}.expected",
            fixture.name
        )]
        .assert_eq(&format!("{rendered}\n"));
    }
}

fn toml_to_json(text: &str) -> Option<serde_json::Value> {
    toml::from_str(text).ok()
}

#[test]
fn generated_schema_accepts_presets_and_rejects_schema_level_fixtures() {
    let schema = config::json_schema_value();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for preset in config::PRESETS {
        let value = toml_to_json(preset.toml).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", preset.name);
    }
    let mut n_schema_level = 0;
    for fixture in fixtures() {
        let Some(value) = toml_to_json(&fixture.text) else {
            assert!(!fixture.schema_level, "{}: not even TOML", fixture.name);
            continue;
        };
        assert_eq!(
            !validator.is_valid(&value),
            fixture.schema_level,
            "{}: the schema's verdict disagrees with its `schema-level` header",
            fixture.name
        );
        n_schema_level += usize::from(fixture.schema_level);
    }
    assert!(n_schema_level >= 10);
}

#[test]
fn schema_carries_help_text_and_ranges_for_the_form_editor() {
    let schema = config::json_schema_value();
    let text = schema.to_string();
    // Doc comments become descriptions; ranges become bounds.
    assert!(text.contains("In `mixed` mode, the probability that a call is rehearsed"));
    let env = &schema["$defs"]["EnvConfig"]["properties"]["mix_ratio"];
    assert_eq!(env["minimum"], 0.0);
    assert_eq!(env["maximum"], 1.0);
    assert_eq!(schema["additionalProperties"], false);
}

/// The RL pool is 16 prompts per step's worth (at least 64) unless `[rl].n_tasks` sizes it.
#[test]
fn the_rl_pool_size_follows_n_tasks() {
    let mut config = config::parse("[run]\nname = \"x\"\n[rl]\nbatch_size = 8\n", "pool").unwrap();
    assert_eq!(config.rl.pool_size(), 128);
    config.rl.batch_size = 2;
    assert_eq!(config.rl.pool_size(), 64);
    let config = config::parse(
        "[run]\nname = \"x\"\n[rl]\nbatch_size = 8\nn_tasks = 4000\n",
        "pool",
    )
    .unwrap();
    assert_eq!(config.rl.pool_size(), 4000);
    let err = config::parse("[run]\nname = \"x\"\n[rl]\nn_tasks = 0\n", "pool").unwrap_err();
    assert_eq!(err.issues[0].path, "rl.n_tasks", "{err}");
}

#[test]
fn runs_that_differ_only_in_seed_and_name_share_an_arm() {
    let base = envace::config::preset("quickstart").unwrap().toml;
    let with = |edits: &[(&[&str], serde_json::Value)]| {
        let mut text = base.to_owned();
        for (path, value) in edits {
            text = envace::config::edit::set_value(&text, path, value).unwrap();
        }
        Some(envace::config::parse(&text, "test").unwrap())
    };
    let runs = vec![
        (1, with(&[(&["run", "seed"], serde_json::json!(1))])),
        (2, with(&[(&["rl", "lr"], serde_json::json!(2e-5))])),
        (
            3,
            with(&[
                (&["run", "seed"], serde_json::json!(9)),
                (&["run", "name"], serde_json::json!("other")),
            ]),
        ),
        (4, None),
        (
            5,
            with(&[
                (&["rl", "lr"], serde_json::json!(2e-5)),
                (&["run", "seed"], serde_json::json!(3)),
            ]),
        ),
        (6, with(&[])),
    ];
    assert_eq!(config::seed_arms(&runs), vec![1, 2, 1, 4, 2, 1]);
}
