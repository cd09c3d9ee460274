//! `envace export verl` and `envace import verl` as a person runs them: the quickstart written
//! out as a launcher folder (warnings printed, the missing settings asked for by name, a
//! written folder never replaced without `--force`), and a cluster run folder imported into the
//! store, then imported again without adding anything.

use std::path::Path;
use std::process::{Command, Output};

fn envace(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_envace"))
        .args(args)
        .env("ENVACE_HOME", home)
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_quickstart_exports_for_verl_with_its_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = dir.path().join("quickstart.toml");
    let out = envace(
        &home,
        &["config", "init", "--out", config.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let folder = dir.path().join("cluster");
    let export = |extra: &[&str]| {
        let mut args = vec![
            "export",
            "verl",
            config.to_str().unwrap(),
            "--out",
            folder.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        envace(&home, &args)
    };

    // A tiny model and the rule judge: the model and judge the cluster uses are asked for.
    let out = export(&[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("--set model_path=") && err.contains("--set judge_url="),
        "{err}"
    );
    assert!(
        !folder.exists(),
        "a refused export wrote {}",
        folder.display()
    );

    let sets = [
        "--set",
        "model_path=/cluster/models/Qwen3-8B",
        "--set",
        "judge_url=http://judge.cluster:10001/v1/chat/completions",
    ];
    let out = export(&sets);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("warning: [sft] is enabled")
            && err.contains("warning: [judge].kind = \"rule\""),
        "{err}"
    );
    assert!(
        text(&out.stdout).starts_with("wrote "),
        "{}",
        text(&out.stdout)
    );
    for file in [
        "run.sh",
        "README.md",
        "data/train.parquet",
        "data/validation.parquet",
    ] {
        assert!(folder.join(file).is_file(), "{file} is missing");
    }
    let launcher = std::fs::read_to_string(folder.join("run.sh")).unwrap();
    assert!(launcher.contains("algorithm.group_by_agent_id=True"));

    // A written folder is kept unless --force says otherwise.
    let out = export(&sets);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("run.sh")).unwrap(),
        launcher
    );
    let mut forced = sets.to_vec();
    forced.push("--force");
    assert!(export(&forced).status.success());
}

#[test]
fn a_cluster_run_imports_once_and_shows_in_the_run_list() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let run = dir.path().join("cluster-run");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../envace/tests/fixtures/verl/run");
    copy_dir(&fixture, &run);

    let out = envace(&home, &["import", "verl", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("imported run 1 (cluster-sample)") && stdout.contains("6 trajectories"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("warning: rollout_dumps/2.jsonl:2: malformed JSON line"),
        "{}",
        text(&out.stderr)
    );

    let out = envace(&home, &["import", "verl", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("updated run 1")
            && stdout.contains(": 0 trajectories, 0 metric rows added"),
        "{stdout}"
    );

    let out = envace(&home, &["runs", "list"]);
    assert!(
        text(&out.stdout).contains("cluster-sample"),
        "{}",
        text(&out.stdout)
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
