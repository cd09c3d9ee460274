//! Every committed fuzz input — the seed corpora and each crash or hang `cargo xtask fuzz` found
//! (`fuzz/corpus/TARGET/`, `fuzz/regressions/TARGET/`) — run through its target's entry point
//! (`envace::fuzzing`), which must not panic; the seeds are inputs the parsers accept, so the
//! targets' round-trip checks run on them.

use std::path::{Path, PathBuf};

use envace::fuzzing::{self, TARGETS};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_seed_and_every_crash_found_runs_through_its_target_without_a_panic() {
    let mut counts = Vec::new();
    for target in TARGETS {
        let seeds = files(&fuzz_dir().join("corpus").join(target));
        assert!(
            seeds.len() >= 3,
            "fuzz/corpus/{target} holds {} seeds; each target keeps at least 3",
            seeds.len()
        );
        let found = files(&fuzz_dir().join("regressions").join(target));
        for file in seeds.iter().chain(&found) {
            let data = std::fs::read(file).unwrap();
            let outcome = std::panic::catch_unwind(|| fuzzing::run(target, &data));
            match outcome {
                Ok(known) => assert!(known, "{target} is not a target"),
                Err(_) => panic!("{target} panics on {}", file.display()),
            }
        }
        counts.push(format!(
            "{target}: {} seeds, {} found",
            seeds.len(),
            found.len()
        ));
    }
    eprintln!("{}", counts.join("; "));
    assert!(!fuzzing::run("no-such-target", b""));
}

#[test]
fn the_seeds_are_inputs_the_parsers_accept() {
    let seed = |target: &str, name: &str| {
        std::fs::read(fuzz_dir().join("corpus").join(target).join(name)).unwrap()
    };
    let text = |target: &str, name: &str| String::from_utf8(seed(target, name)).unwrap();
    let gguf = envace::model::Gguf::read_from(
        &mut std::io::Cursor::new(seed("gguf_header", "tiny-llama.gguf")),
        Path::new("tiny-llama.gguf"),
    )
    .unwrap();
    assert_eq!(gguf.transformer_config().unwrap().hidden_size, 8);
    envace::config::parse(&text("config", "quickstart.toml"), "quickstart.toml").unwrap();
    envace::rehearse::parse_execution_result(&text("rehearse", "object")).unwrap();
    let calls = envace::chat::parse_tool_calls(&text("tool_call", "two-calls"));
    assert_eq!(calls.valid_calls().count(), 2);
    let question = text("bfcl_line", "simple_python-1");
    let mut lines = question.lines();
    let entry = envace::eval::bfcl::parse_entry_lines(
        lines.next().unwrap(),
        lines.next(),
        "simple_python-1",
    )
    .unwrap();
    let gold = envace::eval::bfcl::gold_output(&entry, "simple_python").unwrap();
    assert!(
        envace::eval::bfcl::score_entry(&entry, "simple_python", &gold, Default::default()).valid
    );
}
