//! The engine's layering rule, read from the source: controller → rl → eval → rollout → model,
//! each layer importing only the layers after it, and the modules outside the layers (config,
//! store, tasks, env, chat, …) importing no layer but `model`. A `use` against the direction
//! fails here naming the file and the path.

use std::path::{Path, PathBuf};

/// The layers, highest first.
const LAYERS: [&str; 5] = ["controller", "rl", "eval", "rollout", "model"];

/// Top-level modules above every layer, which may import any of them.
const ABOVE: [&str; 4] = ["bench", "fuzzing", "verl", "lib"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a source file that the rule covers: without comments and without a trailing
/// `#[cfg(test)]` module (tests may reach across layers for fixtures).
fn product_code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a file's code names through `crate::…` (grouped `crate::{a, b}`
/// included) or through `super::` chains that climb to the crate root; `depth` is how deep the
/// file's module sits below the root (`rl/grpo.rs`: 2).
fn imported_top_modules(code: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let ident = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut search = code;
    while let Some(at) = search.find("crate::") {
        let preceded_by_ident = search[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        let rest = &search[at + "crate::".len()..];
        if !preceded_by_ident {
            if let Some(group) = rest.strip_prefix('{') {
                let inner: String = group.chars().take_while(|c| *c != '}').collect();
                out.extend(inner.split(',').map(|item| ident(item.trim())));
            } else {
                out.push(ident(rest));
            }
        }
        search = rest;
    }
    for (at, _) in code.match_indices("super::") {
        // Count the chain `super::super::…` starting here, once per chain.
        if code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(next) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = next;
        }
        if climbs == depth {
            out.push(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

/// Every import against the rule, as `file: path`.
fn violations() -> Vec<String> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let top = parts[0].trim_end_matches(".rs").to_owned();
        if ABOVE.contains(&top.as_str()) || top == "main" {
            continue;
        }
        // Depth of the file's module: `rl/mod.rs` is 1, `rl/grpo.rs` 2, `config.rs`-style 1.
        let depth = if parts.last().is_some_and(|p| p == "mod.rs") {
            parts.len() - 1
        } else {
            parts.len()
        };
        let text = std::fs::read_to_string(file).unwrap();
        let code = product_code(&text);
        let own = LAYERS.iter().position(|l| *l == top);
        for target in imported_top_modules(&code, depth) {
            if target == top {
                continue;
            }
            let Some(target_layer) = LAYERS.iter().position(|l| *l == target) else {
                continue;
            };
            let allowed = match own {
                Some(own) => target_layer > own,
                None => target == "model",
            };
            if !allowed {
                found.push(format!("{}: imports crate::{target}", rel.display()));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_import_points_down_the_layers() {
    let found = violations();
    assert!(
        found.is_empty(),
        "imports against controller → rl → eval → rollout → model (modules outside the \
         layers may import only model):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_sees_each_form_of_import() {
    let code = "use crate::rl::session::Session;\nfn f() { crate::eval::heldout::x(); }\n\
                use crate::{controller, model::Policy};\nuse super::super::rollout::X;\n\
                // use crate::store::Nope;\nlet s = \"my_crate::tasks\";";
    let code = product_code(code);
    let mut found = imported_top_modules(&code, 2);
    found.sort();
    assert_eq!(found, ["controller", "eval", "model", "rl", "rollout"]);
    // One `super::` from a depth-2 file stays inside its own top-level module.
    assert!(imported_top_modules("use super::session::Session;", 2).is_empty());
    assert_eq!(
        imported_top_modules("use super::rollout::X;", 1),
        ["rollout"]
    );
    // A test module at the end is not product code.
    let with_tests =
        "use crate::model::Policy;\n#[cfg(test)]\nmod tests {\n    use crate::rl::AdamW;\n}\n";
    assert_eq!(
        imported_top_modules(&product_code(with_tests), 1),
        ["model"]
    );
}
