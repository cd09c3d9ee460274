//! The bad-input catalogue (`tests/bad_inputs/`): every case is a file that says which `envace`
//! command reads it and the exact error lines it must print. Each case runs the real binary in a
//! fresh folder and must exit with its code, print each expected line, never panic, and leave
//! every file it was given as it was (and create none).
//!
//! The expected lines are looked for in stderr, then stdout (where `env call` prints a tool's
//! own error, which is the tool's answer). A case file:
//!
//! ```text
//! # What the case is (first line).
//! # command: serve-model --model model.gguf --addr 127.0.0.1:0
//! # exit: 1
//! # expect: error: model.gguf: not a GGUF file (magic "XXXX")
//! @ copy smollm2 model.gguf
//! @ patch model.gguf 0 58585858
//! === notes.txt
//! a text file's contents, up to the next `===` line or the end
//! ```
//!
//! `@` lines build binary inputs, in order: `copy smollm2 NAME` (the cached SmolLM2 GGUF),
//! `copy repo:PATH NAME`, `tiny-hf DIR` (a tiny Llama saved as a Hugging Face folder),
//! `store NAME` (a run store of this build's schema holding one run), `truncate NAME BYTES`,
//! `patch NAME OFFSET HEX`, `delete NAME`, `replace NAME OLD NEW` (the first occurrence of the
//! text OLD), `gguf-tensor NAME TENSOR type N` / `gguf-tensor NAME TENSOR dim I N` (a tensor's
//! type or one of its dimensions in a GGUF header), `http-server KIND` (a loopback server
//! answering every request with an HTML page (`html`), a cut-off JSON body (`invalid-json`), no
//! choices (`no-choices`), a 404 (`not-found`), a 12 MiB body (`huge-body`) or status 200 and a
//! body that starts and then trickles forever (`endless-body`)). An MCP server is a script
//! written as a text file and named in the command (`env mcp -- sh server.sh`). The command runs in the case's folder, so
//! paths in it and in its errors are relative. In a command or an expected line, `{dir}` is that
//! folder, `{home}` its `ENVACE_HOME`, `{server}` the `/v1` URL of its HTTP server and
//! `{shared}` the benchmark data beside the checkout (`../shared/benchmarks`); in an expected
//! line, `{n}` stands for any number (one or more digits).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn catalogue_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad_inputs")
}

/// One case, read from its file.
#[derive(Debug, Default)]
struct Case {
    name: String,
    command: Vec<String>,
    exit: Option<i32>,
    expect: Vec<String>,
    /// What builds the inputs, in the file's order.
    actions: Vec<Action>,
}

/// One thing that builds a case's inputs.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    /// An `@` line.
    Step(String),
    /// A `===` section: a text file and its contents.
    File(String, String),
}

fn parse(name: &str, text: &str) -> Result<Case, String> {
    let mut case = Case {
        name: name.to_owned(),
        ..Case::default()
    };
    let mut current: Option<(String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(file) = line.strip_prefix("=== ") {
            case.actions
                .extend(current.take().map(|(n, b)| Action::File(n, b)));
            current = Some((file.trim().to_owned(), String::new()));
            continue;
        }
        if let Some(step) = line.strip_prefix("@ ") {
            case.actions
                .extend(current.take().map(|(n, b)| Action::File(n, b)));
            case.actions.push(Action::Step(step.trim().to_owned()));
            continue;
        }
        if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
            continue;
        }
        if let Some(rest) = line.strip_prefix("# command: ") {
            case.command = split_words(rest);
        } else if let Some(rest) = line.strip_prefix("# exit: ") {
            case.exit = Some(
                rest.trim()
                    .parse()
                    .map_err(|_| format!("line {}: exit {rest:?}", i + 1))?,
            );
        } else if let Some(rest) = line.strip_prefix("# expect: ") {
            case.expect.push(rest.to_owned());
        } else if !(line.starts_with('#') || line.trim().is_empty()) {
            return Err(format!(
                "line {}: not a header, step or file: {line:?}",
                i + 1
            ));
        }
    }
    case.actions
        .extend(current.take().map(|(n, b)| Action::File(n, b)));
    if case.command.is_empty() {
        return Err("no `# command:` line".to_owned());
    }
    Ok(case)
}

/// Words split on spaces, with single-quoted words kept whole (`--args '{"a": 1}'`).
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').unwrap_or(quoted.len());
            words.push(quoted[..end].to_owned());
            rest = quoted.get(end + 1..).unwrap_or("").trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            words.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    words
}

/// A loopback HTTP server that answers every request as `kind` says (an endpoint that is not
/// what it claims); returns its `/v1` URL. It lives as long as the test process.
fn bad_server(kind: &str) -> Result<String, String> {
    let fixed = |status: &str, content_type: &str, body: &[u8]| {
        let mut response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(body);
        Some(response)
    };
    // `None`: the body that never ends (see `answer`).
    let response = match kind {
        "html" => fixed(
            "200 OK",
            "text/html",
            b"<html><body>502 Bad Gateway</body></html>",
        ),
        "invalid-json" => fixed(
            "200 OK",
            "application/json",
            b"{\"choices\": [{\"message\": ",
        ),
        "no-choices" => fixed("200 OK", "application/json", b"{\"choices\": []}"),
        "not-found" => fixed(
            "404 Not Found",
            "application/json",
            b"{\"error\": {\"message\": \"no such route\"}}",
        ),
        "huge-body" => {
            // Valid JSON of 12 MiB: an object whose one string holds the padding.
            let mut body = b"{\"choices\": [], \"padding\": \"".to_vec();
            body.resize(12 << 20, b'x');
            body.extend_from_slice(b"\"}");
            fixed("200 OK", "application/json", &body)
        }
        "endless-body" => None,
        other => return Err(format!("unknown http-server kind {other:?}")),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let response = response.clone();
            // A connection at a time would keep a retry waiting behind an endless body.
            std::thread::spawn(move || answer(stream, response.as_deref()));
        }
    });
    Ok(url)
}

/// Reads one request (its head, then as many body bytes as it announced) and writes
/// `response`; with `None`, status 200 and a chunked JSON body that starts and then trickles a
/// space every 100 ms, never ending, until the client hangs up (or a minute has passed).
fn answer(mut stream: std::net::TcpStream, response: Option<&[u8]>) {
    use std::io::Write;
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    if let Some(response) = response {
        let _ = stream.write_all(response);
        return;
    }
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    let start = "{\"choices\": [";
    if write!(stream, "{head}{:x}\r\n{start}\r\n", start.len()).is_err() {
        return;
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
        if stream
            .write_all(b"1\r\n \r\n")
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Builds the case's inputs in `dir`; returns the URL of its HTTP server, if it has one.
fn build(case: &Case, dir: &Path) -> Result<Option<String>, String> {
    let mut server = None;
    for action in &case.actions {
        let step = match action {
            Action::File(name, body) => {
                let path = dir.join(name);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(&path, body).unwrap();
                continue;
            }
            Action::Step(step) => step,
        };
        let words: Vec<&str> = step.split_whitespace().collect();
        let at = |i: usize| -> Result<&str, String> {
            words
                .get(i)
                .copied()
                .ok_or_else(|| format!("step {step:?}: missing argument {i}"))
        };
        let path = |i: usize| -> Result<PathBuf, String> { Ok(dir.join(at(i)?)) };
        match at(0)? {
            "copy" => {
                let from = match at(1)? {
                    "smollm2" => envace::model::smollm2_gguf().map_err(|e| e.to_string())?,
                    other => match other.strip_prefix("repo:") {
                        Some(rel) => Path::new(env!("CARGO_MANIFEST_DIR"))
                            .join("../..")
                            .join(rel),
                        None => {
                            return Err(format!("step {step:?}: copy from smollm2 or repo:PATH"));
                        }
                    },
                };
                let to = path(2)?;
                fs::create_dir_all(to.parent().unwrap()).unwrap();
                fs::copy(&from, &to).map_err(|e| format!("copy {}: {e}", from.display()))?;
                // The shared benchmark files are read-only; the case's copy is its own.
                fs::set_permissions(&to, fs::Permissions::from_mode(0o644)).unwrap();
            }
            "tiny-hf" => tiny_hf_folder(&path(1)?),
            "http-server" => server = Some(bad_server(at(1)?)?),
            "store" => {
                // A store of this build's schema with one run (quickstart's config).
                let store = envace::store::Store::open(&path(1)?).map_err(|e| e.to_string())?;
                let config = fs::read_to_string(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../../assets/configs/quickstart.toml"),
                )
                .unwrap();
                store
                    .create_run("quickstart", &config)
                    .map_err(|e| e.to_string())?;
            }
            "truncate" => {
                let file = fs::OpenOptions::new().write(true).open(path(1)?).unwrap();
                file.set_len(at(2)?.parse().unwrap()).unwrap();
            }
            "patch" => {
                let file = path(1)?;
                let mut bytes = fs::read(&file).unwrap();
                let offset: usize = at(2)?.parse().unwrap();
                let new = hex(at(3)?);
                bytes[offset..offset + new.len()].copy_from_slice(&new);
                fs::write(&file, bytes).unwrap();
            }
            "delete" => fs::remove_file(path(1)?).map_err(|e| format!("{step}: {e}"))?,
            "replace" => {
                let file = path(1)?;
                let text = fs::read_to_string(&file).unwrap();
                let (old, new) = (at(2)?, at(3)?);
                assert!(text.contains(old), "{step}: {old:?} is not in the file");
                fs::write(&file, text.replacen(old, new, 1)).unwrap();
            }
            "gguf-tensor" => {
                let file = path(1)?;
                let mut bytes = fs::read(&file).unwrap();
                let (field, value): (&str, u64) = (at(3)?, at(at_value(&words))?.parse().unwrap());
                let info = gguf_tensor_info(&bytes, at(2)?)
                    .ok_or_else(|| format!("{step}: no such tensor"))?;
                match field {
                    "type" => bytes[info.type_at..info.type_at + 4]
                        .copy_from_slice(&u32::try_from(value).unwrap().to_le_bytes()),
                    "dim" => {
                        let i: usize = at(4)?.parse().unwrap();
                        let at = info.dims_at + 8 * i;
                        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
                    }
                    other => {
                        return Err(format!(
                            "{step}: gguf-tensor sets `type` or `dim`, not {other}"
                        ));
                    }
                }
                fs::write(&file, bytes).unwrap();
            }
            other => return Err(format!("unknown step {other:?}")),
        }
    }
    Ok(server)
}

/// The index of the value in a `gguf-tensor` step: `… type N` or `… dim I N`.
fn at_value(words: &[&str]) -> usize {
    if words.get(3) == Some(&"dim") { 5 } else { 4 }
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Where a tensor's dimensions and type lie in a GGUF header (found by its name's bytes, which
/// the tensor-info table holds as a length-prefixed string followed by `n_dims`, the dims and
/// the type).
struct TensorInfo {
    dims_at: usize,
    type_at: usize,
}

fn gguf_tensor_info(bytes: &[u8], name: &str) -> Option<TensorInfo> {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(name.as_bytes());
    let start = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())?
        + needle.len();
    let n_dims = u32::from_le_bytes(bytes[start..start + 4].try_into().ok()?) as usize;
    let dims_at = start + 4;
    Some(TensorInfo {
        dims_at,
        type_at: dims_at + 8 * n_dims,
    })
}

/// A tiny Llama saved as a Hugging Face folder with a trained tokenizer.
fn tiny_hf_folder(dir: &Path) {
    let corpus = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n";
    envace::model::save_tiny_llama_folder(dir, corpus).unwrap();
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    fs::read(&path).unwrap(),
                );
            }
        }
    }
    files
}

/// Runs one case; `Err` says every way it failed.
fn run_case(case: &Case) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("case");
    let home = tmp.path().join("home");
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&home).unwrap();
    let server = build(case, &dir)?.unwrap_or_default();
    let before = snapshot(&dir);
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/benchmarks");
    let fill = |s: &str| {
        s.replace("{dir}", &dir.display().to_string())
            .replace("{shared}", &shared.display().to_string())
            .replace("{home}", &home.display().to_string())
            .replace("{server}", &server)
    };
    let args: Vec<String> = case.command.iter().map(|a| fill(a)).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_envace"))
        .args(&args)
        .current_dir(&dir)
        .env("ENVACE_HOME", &home)
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut problems = Vec::new();
    match status {
        None => problems.push("still running after 60 s".to_owned()),
        Some(status) => {
            let want = case.exit.unwrap_or(1);
            if status.code() != Some(want) {
                problems.push(format!("exit {:?}, expected {want}", status.code()));
            }
        }
    }
    if stderr.contains("panicked") {
        problems.push("it panicked".to_owned());
    }
    if case.expect.is_empty() {
        problems.push("no `# expect:` line".to_owned());
    }
    if std::env::var_os("BAD_INPUT_SHOW").is_some() {
        eprintln!("--- {}\n{stderr}{stdout}", case.name);
    }
    // A tool's own error is its answer, on stdout; everything else is on stderr.
    let lines: Vec<&str> = stderr.lines().chain(stdout.lines()).collect();
    for expected in &case.expect {
        let expected = fill(expected);
        if !lines.iter().any(|line| matches_line(&expected, line)) {
            problems.push(format!("missing line: {expected}"));
        }
    }
    let after = snapshot(&dir);
    if after != before {
        let changed: Vec<_> = after
            .iter()
            .filter(|(path, bytes)| before.get(*path) != Some(*bytes))
            .map(|(path, _)| path.display().to_string())
            .chain(
                before
                    .keys()
                    .filter(|p| !after.contains_key(*p))
                    .map(|p| format!("{} (removed)", p.display())),
            )
            .collect();
        problems.push(format!("files written or changed: {changed:?}"));
    }
    if fs::read_dir(&home).unwrap().next().is_some() {
        problems.push(format!(
            "wrote into ENVACE_HOME: {:?}",
            snapshot(&home).keys().collect::<Vec<_>>()
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}\n  stderr:\n    {}",
            problems.join("\n  "),
            stderr.trim_end().replace('\n', "\n    ")
        ))
    }
}

/// Whether `line` is the expected line, where each `{n}` in it stands for a number (one or more
/// digits: what a case cannot know in advance, such as how many lines a flood got out).
fn matches_line(expected: &str, line: &str) -> bool {
    let mut parts = expected.split("{n}");
    let Some(rest) = line.strip_prefix(parts.next().unwrap_or("")) else {
        return false;
    };
    let mut rest = rest;
    for part in parts {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        match rest[digits..].strip_prefix(part) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    rest.is_empty()
}

/// Every case file under the catalogue, by group (its folder) and name.
fn cases() -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for group in fs::read_dir(catalogue_dir()).unwrap() {
        let group = group.unwrap().path();
        if !group.is_dir() {
            continue;
        }
        for file in fs::read_dir(&group).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "case") {
                let name = file
                    .strip_prefix(catalogue_dir())
                    .unwrap()
                    .display()
                    .to_string();
                found.push((name, file));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_bad_input_is_refused_clearly_with_nothing_written() {
    let only = std::env::var("BAD_INPUT").unwrap_or_default();
    let all = cases();
    let mut failures = Vec::new();
    let mut per_group: BTreeMap<String, usize> = BTreeMap::new();
    for (name, file) in &all {
        if !name.contains(&only) {
            continue;
        }
        *per_group
            .entry(name.split('/').next().unwrap().to_owned())
            .or_default() += 1;
        let outcome =
            parse(name, &fs::read_to_string(file).unwrap()).and_then(|case| run_case(&case));
        if let Err(why) = outcome {
            failures.push(format!("{name}: {why}"));
        }
    }
    let tried: usize = per_group.values().sum();
    eprintln!(
        "bad inputs: {tried} tried, {} passed; by group: {per_group:?}",
        tried - failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {tried} cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    if only.is_empty() {
        assert!(
            tried >= 77,
            "the catalogue holds {tried} cases; it promises at least 77"
        );
    }
}

#[test]
fn case_files_parse_steps_files_and_quoted_words() {
    let case = parse(
        "x.case",
        "# A case.\n# command: env call functions add --args '{\"a\": 1}'\n# exit: 2\n# expect: error: x\n@ truncate a 3\n=== a\nabc\n=== b/c.txt\nline\n",
    )
    .unwrap();
    assert_eq!(
        case.command,
        ["env", "call", "functions", "add", "--args", "{\"a\": 1}"]
    );
    assert_eq!(case.exit, Some(2));
    let file = |n: &str, b: &str| Action::File(n.to_owned(), b.to_owned());
    assert_eq!(
        case.actions,
        [
            Action::Step("truncate a 3".to_owned()),
            file("a", "abc\n"),
            file("b/c.txt", "line\n")
        ]
    );
    let ordered = parse("o.case", "# command: x\n=== a\nabc\n@ truncate a 1\n").unwrap();
    assert_eq!(
        ordered.actions,
        [file("a", "abc\n"), Action::Step("truncate a 1".to_owned())]
    );
    assert!(matches_line(
        "wrote {n} lines ({n} bytes)",
        "wrote 12 lines (480 bytes)"
    ));
    assert!(!matches_line("wrote {n} lines", "wrote many lines"));
    assert!(!matches_line("wrote {n} lines", "wrote 12 lines and more"));
    assert!(matches_line("exactly this", "exactly this"));
    assert!(parse("y.case", "# no command\n").is_err());
    assert!(parse("z.case", "# command: x\nstray\n").is_err());
}
