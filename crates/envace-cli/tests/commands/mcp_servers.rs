//! `[[env.mcp_servers]]` end to end: a stdio server named in a config is shown with its exact
//! command line and runs only after the user confirms it once; a job whose functions domain is
//! `envace serve-env functions --stdio` trains to the same scores as the built-in domain.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use envace::store::Store;

const TINY_JOB: &str = include_str!("../../../envace/tests/fixtures/train/tiny_job.toml");

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The tiny job with its functions domain served by `envace serve-env` through `sh`, which
    /// first appends a line to `spawned.log`, so the test sees every start of the server.
    fn config_with_server(&self, name: &str, extra_arg: Option<&str>) -> PathBuf {
        let script = format!(
            "echo started >> '{}'; exec '{}' serve-env functions --stdio",
            self.path("spawned.log").display(),
            env!("CARGO_BIN_EXE_envace")
        );
        let mut command = vec!["sh".to_owned(), "-c".to_owned(), script];
        command.extend(extra_arg.map(str::to_owned));
        let argv = command
            .iter()
            .map(|arg| format!("{arg:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            "{TINY_JOB}\n[[env.mcp_servers]]\ndomain = \"functions\"\ncommand = [{argv}]\n"
        );
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn envace(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_envace"))
            .args(args)
            .env("ENVACE_HOME", self.path("home"))
            .env_remove("RUST_LOG")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    fn train(&self, store: &Path, config: &Path) -> Output {
        self.envace(
            &[
                "--store",
                store.to_str().unwrap(),
                "train",
                config.to_str().unwrap(),
            ],
            "",
        )
    }

    fn spawns(&self) -> usize {
        std::fs::read_to_string(self.path("spawned.log"))
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What a run scored: every evaluation row and every reward and fidelity metric.
fn scores(store: &Path) -> Vec<String> {
    let store = Store::open(store).unwrap();
    let view = store.view();
    let run = view.runs().unwrap()[0].id;
    let mut rows: Vec<String> = view
        .eval_results(run)
        .unwrap()
        .into_iter()
        .map(|r| {
            format!(
                "{} {} {} {} {}",
                r.step, r.benchmark, r.category, r.metric, r.value
            )
        })
        .collect();
    rows.extend(
        view.metrics(run)
            .unwrap()
            .into_iter()
            .filter(|m| m.key.contains("reward") || m.key.contains("fidelity"))
            .map(|m| format!("{} {} {}", m.step, m.key, m.value)),
    );
    rows.sort();
    rows
}

#[test]
fn a_stdio_server_runs_only_after_its_exact_command_line_is_confirmed() {
    let home = Home::new();
    let config = home.config_with_server("job.toml", None);
    let store = home.path("runs.sqlite");
    let shown = format!(
        "sh -c 'echo started >> '\\''{}'\\''; exec '\\''{}'\\'' serve-env functions --stdio'",
        home.path("spawned.log").display(),
        env!("CARGO_BIN_EXE_envace")
    );

    // Not confirmed: the job is refused, naming the field and the exact command line, before
    // the store is created or the command runs.
    let out = home.train(&store, &config);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("env.mcp_servers[0]: `{shown}`"))
            && err.contains("envace config confirm-mcp"),
        "{err}"
    );
    assert!(!store.exists(), "the refused job created the store");
    assert_eq!(home.spawns(), 0);

    // Shown and declined: nothing recorded, still refused.
    let out = home.envace(&["config", "confirm-mcp", config.to_str().unwrap()], "n\n");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("\n    {shown}\n")) && err.contains("not confirmed"),
        "{err}"
    );
    assert!(!home.train(&store, &config).status.success());
    assert_eq!(home.spawns(), 0);

    // Confirmed once: the job runs and its episodes reach the server.
    let out = home.envace(&["config", "confirm-mcp", config.to_str().unwrap()], "y\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = home.train(&store, &config);
    assert!(out.status.success(), "{}", stderr(&out));
    let started = home.spawns();
    assert!(started > 1, "the server started {started} times");

    // Confirmed stays confirmed: a second job and a second confirm-mcp ask nothing.
    let out = home.envace(&["config", "confirm-mcp", config.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is confirmed"),
        "{out:?}"
    );

    // A changed command line asks again.
    let changed = home.config_with_server("changed.toml", Some("extra"));
    let out = home.train(&home.path("other.sqlite"), &changed);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("extra`"), "{}", stderr(&out));
    assert_eq!(home.spawns(), started);
}

#[test]
fn a_job_on_the_served_functions_domain_scores_as_the_built_in_one() {
    let home = Home::new();
    let served = home.config_with_server("served.toml", None);
    let builtin = home.path("builtin.toml");
    std::fs::write(&builtin, TINY_JOB).unwrap();
    let out = home.envace(
        &["config", "confirm-mcp", "--yes", served.to_str().unwrap()],
        "",
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let served_store = home.path("served.sqlite");
    let builtin_store = home.path("builtin.sqlite");
    let out = home.train(&served_store, &served);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = home.train(&builtin_store, &builtin);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(home.spawns() > 1);
    let served_scores = scores(&served_store);
    assert!(
        served_scores.iter().any(|row| row.contains("fidelity")),
        "{served_scores:?}"
    );
    assert_eq!(served_scores, scores(&builtin_store));
}
