//! `envace serve-model` in process with SmolLM2-135M-Instruct (the GGUF `cargo xtask setup`
//! installs), driven over real HTTP by the engine's own OpenAI client: a plain answer, a
//! tool call whose reply has the shape of OpenAI's documented example, concurrent requests
//! generated in one batch, 400s naming the bad field, the quantised weights it serves against
//! the dequantised ones, a server killed mid-request, streamed replies (read off the wire and
//! through the official `openai` Python client, which `cargo xtask setup` installs); then
//! a tiny model served from a Hugging Face folder and from a run's checkpoint, a tiny Qwen3
//! whose own template renders the tools (SmolLM2's gets them folded into its turns), and the
//! errors of loading.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use envace::config::{self, Architecture, EndpointConfig};
use envace::model::{self, Policy, TransformerConfig};
use envace::openai::{ChatClient, ChatMsg, ChatRequest, EndpointFailure, ToolCallOut};
use envace::serve::{LoadedModel, ModelServer, ServeOptions, serve};
use envace::store::{Batch, CheckpointRow, Store};
use envace::tokenize;
use expect_test::expect;
use serde_json::{Value, json};

pub(crate) fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn smollm2() -> LoadedModel {
    let path = model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    LoadedModel::from_path(&path).expect("SmolLM2 loads from its GGUF")
}

/// One server shared by the tests that only send requests.
fn shared() -> &'static ModelServer {
    static SERVER: OnceLock<ModelServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        serve(smollm2(), any_port(), &ServeOptions::default()).expect("the server starts")
    })
}

pub(crate) fn client(url: &str, timeout_secs: f64, max_retries: u32) -> ChatClient {
    ChatClient::new(&EndpointConfig {
        url: url.to_owned(),
        model: "smollm2".to_owned(),
        api_key_env: None,
        timeout_secs,
        max_retries,
        max_concurrency: 16,
    })
    .expect("a valid endpoint config")
    .with_backoff(Duration::from_millis(50), Duration::from_millis(200))
}

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city name."}},
                "required": ["city"]
            }
        }
    })
}

fn call(id: &str, city: &str) -> ToolCallOut {
    ToolCallOut {
        id: id.to_owned(),
        name: "get_weather".to_owned(),
        arguments: format!("{{\"city\": \"{city}\"}}"),
    }
}

/// Two earlier turns where the assistant called the tool and got its response, so that even a
/// 135M model continues the pattern with a call for the new city.
fn tool_conversation() -> Vec<ChatMsg> {
    vec![
        ChatMsg::system("You call get_weather for every city the user names."),
        ChatMsg::user("Weather in Paris?"),
        ChatMsg::assistant_calls("", vec![call("c1", "Paris")]),
        ChatMsg::tool("c1", r#"{"temp_c": 21}"#),
        ChatMsg::assistant("21 °C in Paris."),
        ChatMsg::user("Weather in Rome?"),
        ChatMsg::assistant_calls("", vec![call("c2", "Rome")]),
        ChatMsg::tool("c2", r#"{"temp_c": 25}"#),
        ChatMsg::assistant("25 °C in Rome."),
        ChatMsg::user("Weather in London?"),
    ]
}

pub(crate) fn greedy(messages: Vec<ChatMsg>, max_tokens: u32) -> ChatRequest {
    let mut req = ChatRequest::new(messages);
    req.temperature = Some(0.0);
    req.max_tokens = Some(max_tokens);
    req
}

/// A raw HTTP exchange: the status and the JSON body.
fn raw(method: &str, url: &str, body: Option<&str>) -> (u16, Value) {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build(),
    );
    let response = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        (_, Some(body)) => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body),
        (_, None) => agent.post(url).send_empty(),
    }
    .expect("the server answers");
    let status = response.status().as_u16();
    let text = response
        .into_body()
        .read_to_string()
        .expect("the body reads");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")),
    )
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where the shapes of two JSON values differ: keys present on one side only, values of
/// different JSON types (array items are compared to the reference's first item).
fn shape_diff(reference: &Value, ours: &Value, path: &str, out: &mut Vec<String>) {
    match (reference, ours) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().filter(|k| !b.contains_key(*k)) {
                out.push(format!("{path}.{key}: missing"));
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{key}: not in the reference"));
            }
            for (key, value) in a {
                if let Some(other) = b.get(key) {
                    shape_diff(value, other, &format!("{path}.{key}"), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => match a.first() {
            Some(_) if b.is_empty() => out.push(format!("{path}: empty, the reference is not")),
            Some(first) => {
                for (idx, item) in b.iter().enumerate() {
                    shape_diff(first, item, &format!("{path}[{idx}]"), out);
                }
            }
            None => {}
        },
        _ if json_type(reference) != json_type(ours) => out.push(format!(
            "{path}: {} where the reference has {}",
            json_type(ours),
            json_type(reference)
        )),
        _ => {}
    }
}

#[test]
fn a_plain_question_gets_a_plain_answer() {
    let server = shared();
    let reply = client(&server.url(), 120.0, 0)
        .complete(&greedy(
            vec![ChatMsg::user(
                "What is the capital of France? Answer in one sentence.",
            )],
            16,
        ))
        .expect("the server answers");
    assert!(reply.content.contains("Paris"), "{reply:?}");
    assert!(reply.tool_calls.is_empty(), "{reply:?}");
    assert_eq!(reply.finish_reason, "stop", "{reply:?}");
    assert!(reply.prompt_tokens > 10, "{reply:?}");
    assert!((1..=16).contains(&reply.completion_tokens), "{reply:?}");
    assert_eq!(reply.attempts, 1);
}

#[test]
fn a_tool_call_reply_has_the_shape_of_openais_documented_example() {
    let server = shared();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openai/chat_completion_tool_calls.json");
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(&fixture).expect("the fixture is in the repository"),
    )
    .expect("the fixture is JSON");
    let mut req = greedy(tool_conversation(), 40);
    req.tools = vec![weather_tool()];
    let body = req.to_json("smollm2").to_string();
    let (status, ours) = raw(
        "POST",
        &format!("{}/chat/completions", server.url()),
        Some(&body),
    );
    assert_eq!(status, 200, "{ours}");
    let mut diffs = Vec::new();
    shape_diff(&reference, &ours, "", &mut diffs);
    assert!(diffs.is_empty(), "{diffs:#?}\n{ours:#}");
    let message = &ours["choices"][0]["message"];
    assert_eq!(ours["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(ours["object"], "chat.completion");
    let call = &message["tool_calls"][0];
    assert!(
        call["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("call_")),
        "{call}"
    );
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value = serde_json::from_str(
        call["function"]["arguments"]
            .as_str()
            .expect("arguments are a JSON string"),
    )
    .expect("the string holds JSON");
    assert_eq!(arguments, json!({"city": "London"}));

    // The same request through the client: the call comes back structured.
    let reply = client(&server.url(), 120.0, 0)
        .complete(&req)
        .expect("the server answers");
    assert_eq!(reply.finish_reason, "tool_calls");
    assert_eq!(reply.content, "");
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    assert_eq!(reply.tool_calls[0].arguments, r#"{"city":"London"}"#);
}

#[test]
fn bad_requests_get_a_400_that_names_the_field() {
    let server = shared();
    let url = format!("{}/chat/completions", server.url());
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"messages": user, "n": 3}).to_string(), Some("n")),
        (
            json!({"messages": user, "stream": "yes"}).to_string(),
            Some("stream"),
        ),
        (
            json!({"messages": user, "temperature": "warm"}).to_string(),
            Some("temperature"),
        ),
        (
            json!({"messages": user, "max_tokens": -1}).to_string(),
            Some("max_tokens"),
        ),
        (
            json!({"messages": [{"role": "user"}, {"role": "pilot", "content": "x"}]}).to_string(),
            Some("messages[1].role"),
        ),
        (
            json!({"messages": user, "tools": [{"type": "retrieval"}]}).to_string(),
            Some("tools[0].type"),
        ),
        ("{not json".to_owned(), None),
    ];
    for (body, param) in cases {
        let (status, reply) = raw("POST", &url, Some(&body));
        assert_eq!(status, 400, "{body} -> {reply}");
        let error = &reply["error"];
        assert_eq!(error["type"], "invalid_request_error", "{reply}");
        assert_eq!(error["param"].as_str(), param, "{body} -> {reply}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{reply}"
        );
    }
    // The client reports a 400 as a failure after one attempt: asking again would not help.
    let mut req = greedy(vec![ChatMsg::user("hi")], 4);
    req.temperature = Some(5.0);
    let failure = client(&server.url(), 120.0, 3)
        .complete(&req)
        .expect_err("temperature 5 is out of range");
    assert!(
        matches!(&failure, EndpointFailure::Http { status: 400, attempts: 1, body_excerpt, .. } if body_excerpt.contains("temperature")),
        "{failure:?}"
    );

    let (status, reply) = raw("GET", &format!("{}/embeddings", server.url()), None);
    assert_eq!(status, 404, "{reply}");
    let (status, reply) = raw("GET", &url, None);
    assert_eq!(status, 405, "{reply}");
    let (status, models) = raw("GET", &format!("{}/models", server.url()), None);
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(models["data"][0]["object"], "model");
    let (status, health) = raw(
        "GET",
        &format!("http://{}/health", server.local_addr()),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
}

#[test]
fn concurrent_requests_are_generated_in_one_batch() {
    let options = ServeOptions {
        max_batch: 8,
        // Long enough for four client threads to queue their requests together.
        batch_window: Duration::from_millis(300),
        ..ServeOptions::default()
    };
    let server = serve(smollm2(), any_port(), &options).expect("the server starts");
    let client = client(&server.url(), 120.0, 0);
    let questions = [
        "What is the capital of France? Answer in one sentence.",
        "Name a primary colour.",
        "Say hello.",
        "What is 2 plus 2?",
    ];
    let threads: Vec<_> = questions
        .iter()
        .map(|q| {
            let client = client.clone();
            let req = greedy(vec![ChatMsg::user(*q)], 12);
            std::thread::spawn(move || client.complete(&req))
        })
        .collect();
    let replies: Vec<_> = threads
        .into_iter()
        .map(|t| {
            t.join()
                .expect("a client thread does not panic")
                .expect("every request is answered")
        })
        .collect();
    for reply in &replies {
        assert!(!reply.content.is_empty(), "{reply:?}");
        assert!(reply.completion_tokens <= 12, "{reply:?}");
    }
    assert!(replies[0].content.contains("Paris"), "{:?}", replies[0]);
    let stats = server.stats();
    assert_eq!(stats.n_requests, 4, "{stats:?}");
    assert!(stats.max_batch_seen >= 2, "no batching: {stats:?}");
    assert!(stats.n_batches < 4, "no batching: {stats:?}");
    server.shutdown();
}

/// A GGUF is served on its quantised weights, by our own kernels (the fastest path), and they
/// stay close to the dequantised f32 weights training sees: the same next token, logits within
/// a tenth of their range. Seeded sampling on the quantised weights repeats itself.
#[test]
fn a_gguf_is_served_on_its_quantised_weights_close_to_the_dequantised_ones() {
    let path = model::smollm2_gguf().unwrap_or_else(|e| panic!("{e}"));
    let mut served = smollm2();
    assert!(
        served
            .weights()
            .starts_with("quantised GGUF weights on native "),
        "{}",
        served.weights()
    );
    let mut dense = LoadedModel::from_path_dequantized(&path).expect("the GGUF dequantises");
    assert!(dense.weights().contains("F32"), "{}", dense.weights());
    let body = json!({"messages": [{"role": "user", "content": "Name a primary colour."}]});
    let text = served.render_request(&body).expect("the request renders");
    let tokenizer = model::Gguf::open(&path)
        .and_then(|gguf| gguf.tokenizer())
        .expect("the GGUF has a tokenizer");
    let prompt = tokenize::encode(&tokenizer, &text).expect("the prompt encodes");
    let quantised = served.next_token_logits(&prompt).expect("quantised logits");
    let f32_logits = dense.next_token_logits(&prompt).expect("f32 logits");
    assert_eq!(quantised.len(), f32_logits.len());
    assert_eq!(model::argmax(&quantised), model::argmax(&f32_logits));
    let max_diff = quantised
        .iter()
        .zip(&f32_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let spread = f32_logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
        - f32_logits.iter().fold(f32::INFINITY, |m, &v| m.min(v));
    eprintln!(
        "served against dequantised logits: max |diff| {max_diff:.4} over a range of {spread:.2}"
    );
    assert!(max_diff < 0.1 * spread, "{max_diff} vs range {spread}");

    let server = serve(served, any_port(), &ServeOptions::default()).expect("the server starts");
    let client = client(&server.url(), 120.0, 0);
    let mut sampled = ChatRequest::new(vec![ChatMsg::user("Say hello.")]);
    sampled.temperature = Some(1.0);
    sampled.max_tokens = Some(12);
    sampled.seed = Some(17);
    let first = client.complete(&sampled).expect("the server answers");
    let again = client.complete(&sampled).expect("the server answers");
    assert!(first.completion_tokens >= 1, "{first:?}");
    assert_eq!(first.content, again.content);
    server.shutdown();
}

#[test]
fn a_server_stopped_mid_request_gives_a_failure_not_a_panic() {
    let server = serve(smollm2(), any_port(), &ServeOptions::default()).expect("the server starts");
    let client = client(&server.url(), 60.0, 1);
    let req = greedy(
        vec![ChatMsg::user("Write a long story about a dragon.")],
        64,
    );
    let start = Instant::now();
    let pending = std::thread::spawn(move || client.complete(&req));
    std::thread::sleep(Duration::from_millis(700));
    server.shutdown();
    let failure = pending
        .join()
        .expect("the client thread does not panic")
        .expect_err("the server went away");
    assert!(
        matches!(
            failure,
            EndpointFailure::Transport { attempts: 2, .. } | EndpointFailure::Timeout { .. }
        ),
        "{failure:?}"
    );
    eprintln!("{failure} after {:?}", start.elapsed());
    // The server lets its batch in flight finish before it goes; on a loaded 2-core CI
    // machine that took 41 s once. The bound only catches a client that hangs.
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
}

/// A tiny Llama saved as a Hugging Face folder with a trained tokenizer and no
/// `tokenizer_config.json`: the server falls back to EnvACE's ChatML template.
fn tiny_hf_folder(dir: &Path) {
    let corpus = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\nhi, how can I help?<|im_end|>\n";
    model::save_tiny_llama_folder(dir, corpus).expect("the tiny folder saves");
}

#[test]
fn a_hugging_face_folder_and_a_run_checkpoint_are_served() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let checkpoint = tmp.path().join("checkpoints/step-3");
    tiny_hf_folder(&checkpoint);

    let mut store = Store::open(&tmp.path().join("runs.sqlite")).expect("a fresh store");
    let run = store.create_run("tiny-run", "").expect("a run");
    let mut batch = Batch::new(run);
    batch.checkpoints.push(CheckpointRow {
        step: 3,
        // Relative to the store's folder.
        path: "checkpoints/step-3".to_owned(),
        bytes: 0,
        wall_time: 0.0,
    });
    store.write(&batch).expect("the checkpoint row is written");

    let model = LoadedModel::from_run(&store, "tiny-run").expect("the run's checkpoint loads");
    assert_eq!(model.name(), "tiny-run/step-3");
    assert!(
        model.template_knows_tools(),
        "the ChatML fallback renders tools"
    );
    let server = serve(model, any_port(), &ServeOptions::default()).expect("the server starts");
    let mut req = greedy(vec![ChatMsg::user("hello there")], 6);
    req.tools = vec![weather_tool()];
    let reply = client(&server.url(), 60.0, 0)
        .complete(&req)
        .expect("an untrained model still answers");
    // An untrained model writes noise, yet the reply is well-formed.
    assert!(
        matches!(reply.finish_reason.as_str(), "stop" | "length"),
        "{reply:?}"
    );
    assert!((1..=6).contains(&reply.completion_tokens), "{reply:?}");
    let (_, models) = raw("GET", &format!("{}/models", server.url()), None);
    assert_eq!(models["data"][0]["id"], "tiny-run/step-3");
    server.shutdown();

    let folder = LoadedModel::from_path(&checkpoint).expect("the folder loads directly");
    assert_eq!(folder.name(), "step-3");
}

#[test]
fn loading_errors_name_the_file_and_what_to_do() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let text_file = tmp.path().join("notes.txt");
    std::fs::write(&text_file, "not a model").expect("a file writes");
    let empty_dir = tmp.path().join("empty");
    std::fs::create_dir(&empty_dir).expect("a folder");
    let message = |path: &Path| {
        LoadedModel::from_path(path)
            .expect_err("not a model")
            .to_string()
            .replace(&tmp.path().display().to_string(), "TMP")
    };
    let mut store = Store::open(&tmp.path().join("runs.sqlite")).expect("a fresh store");
    let run = store.create_run("fresh", "").expect("a run");
    store.write(&Batch::new(run)).expect("an empty batch");
    let no_checkpoint = LoadedModel::from_run(&store, "fresh")
        .expect_err("no checkpoint")
        .to_string();
    let no_run = LoadedModel::from_run(&store, "nope")
        .expect_err("no such run")
        .to_string();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let busy = serve(
        tiny_for_errors(tmp.path()),
        taken.local_addr().expect("a bound address"),
        &ServeOptions::default(),
    )
    .expect_err("the port is taken")
    .to_string();
    // The operating system's words follow; they differ between systems.
    assert!(
        busy.starts_with(&format!(
            "address {}: cannot listen: ",
            taken.local_addr().expect("a bound address")
        )),
        "{busy}"
    );
    expect![[r#"
        TMP/missing.gguf: no such file or folder; pass a .gguf file or a Hugging Face model folder
        TMP/notes.txt: unsupported model format: expected a .gguf file or a Hugging Face folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
        TMP/empty: this folder has no config.json; a Hugging Face model folder needs config.json, model.safetensors (or an index and shards), tokenizer.json, and tokenizer_config.json for its chat template
        run "fresh": run 1 (fresh) has no checkpoint yet; `envace runs show 1` lists what it saved
        no run matches "nope"; `envace runs list` shows the runs in this store"#]]
    .assert_eq(
        &[
            message(&tmp.path().join("missing.gguf")),
            message(&text_file),
            message(&empty_dir),
            no_checkpoint,
            no_run,
        ]
        .join("\n"),
    );
}

fn tiny_for_errors(dir: &Path) -> LoadedModel {
    let folder = dir.join("tiny");
    tiny_hf_folder(&folder);
    LoadedModel::from_path(&folder).expect("the tiny folder loads")
}

#[test]
fn a_template_that_knows_tools_renders_them_itself() {
    // A tiny Qwen3 with the real Qwen3 tokenizer and chat template (tools, tool calls and
    // tool responses are the template's own business).
    let tokenizer_dir = model::qwen3_tokenizer_dir().unwrap_or_else(|e| panic!("{e}"));
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let folder = tmp.path().join("qwen3-tiny");
    std::fs::create_dir_all(&folder).expect("a folder");
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(tokenizer_dir.join(file), folder.join(file)).expect("the file copies");
    }
    let tokenizer = tokenize::load(&folder.join("tokenizer.json")).expect("the tokenizer loads");
    let tiny = config::TinyModelConfig {
        architecture: Architecture::Qwen3,
        hidden_size: 32,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        intermediate_size: 48,
        vocab_size: tokenizer.get_vocab_size(true) as u32,
        max_position_embeddings: 4096,
        rope_theta: 10_000.0,
        tie_embeddings: true,
        split_digits: true,
    };
    let cfg = TransformerConfig::from_tiny(&tiny).expect("a valid tiny config");
    Policy::init(cfg, 3, &Device::Cpu, DType::F32)
        .expect("a tiny model")
        .save(&folder)
        .expect("the model saves");
    let qwen3 = LoadedModel::from_path(&folder).expect("the folder loads");
    assert!(qwen3.template_knows_tools());
    let im_end = tokenizer
        .token_to_id("<|im_end|>")
        .expect("Qwen3 has <|im_end|>");
    assert!(qwen3.stop_tokens().contains(&im_end), "{qwen3:?}");

    let mut req = greedy(tool_conversation(), 4);
    req.tools = vec![weather_tool()];
    let body = req.to_json("qwen3-tiny");
    let prompt = qwen3
        .render_request(&body)
        .expect("the conversation renders");
    for needle in [
        "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
        "<|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response><|im_end|>",
        "<|im_start|>user\nWeather in London?<|im_end|>\n<|im_start|>assistant\n",
    ] {
        assert!(prompt.contains(needle), "{needle:?} not in\n{prompt}");
    }

    // SmolLM2's template knows no tools: the same conversation is folded into plain turns.
    let smol = smollm2();
    assert!(!smol.template_knows_tools());
    let folded = smol
        .render_request(&body)
        .expect("the conversation renders");
    for needle in [
        "<|im_start|>system\nYou call get_weather for every city the user names.\n\n# Tools\n",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
        "<|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response><|im_end|>",
    ] {
        assert!(folded.contains(needle), "{needle:?} not in\n{folded}");
    }
    let err = smol
        .render_request(&json!({"messages": [{"role": "user", "content": "hi"}], "top_p": 0}))
        .expect_err("top_p 0 keeps no token");
    assert_eq!(
        err.to_string(),
        "request field top_p: must be greater than 0"
    );

    // The tiny Qwen3 also answers over HTTP, whatever noise it writes.
    let server = serve(qwen3, any_port(), &ServeOptions::default()).expect("the server starts");
    let reply = client(&server.url(), 60.0, 0)
        .complete(&req)
        .expect("the server answers");
    assert!((1..=4).contains(&reply.completion_tokens), "{reply:?}");
    server.shutdown();
}

#[test]
fn an_api_key_guards_every_route_but_health_and_lets_the_server_leave_loopback() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let folder = tmp.path().join("tiny");
    tiny_hf_folder(&folder);
    let load = || LoadedModel::from_path(&folder).expect("the tiny folder loads");
    let everywhere: SocketAddr = "0.0.0.0:0".parse().expect("an address");
    let Err(refused) = serve(load(), everywhere, &ServeOptions::default()) else {
        panic!("beyond loopback without a key is refused");
    };
    assert!(
        refused
            .to_string()
            .contains("serving beyond this machine needs an API key"),
        "{refused}"
    );
    let options = ServeOptions {
        api_key: Some("s3cret-key".to_owned()),
        ..ServeOptions::default()
    };
    let server = serve(load(), everywhere, &options).expect("with a key it listens everywhere");
    let base = format!("http://127.0.0.1:{}", server.local_addr().port());
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build(),
    );
    let call = |path: &str, key: Option<&str>| -> (u16, String) {
        let url = format!("{base}{path}");
        let response = if path.ends_with("completions") {
            let mut request = agent.post(&url).header("Content-Type", "application/json");
            if let Some(key) = key {
                request = request.header("Authorization", &format!("Bearer {key}"));
            }
            request.send(r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}"#)
        } else {
            let mut request = agent.get(&url);
            if let Some(key) = key {
                request = request.header("Authorization", &format!("Bearer {key}"));
            }
            request.call()
        }
        .expect("the server answers");
        let status = response.status().as_u16();
        (
            status,
            response.into_body().read_to_string().expect("a body"),
        )
    };
    assert_eq!(call("/health", None).0, 200, "health needs no key");
    for path in ["/v1/models", "/v1/chat/completions"] {
        for key in [None, Some("wrong"), Some("s3cret-ke"), Some("s3cret-key2")] {
            let (status, body) = call(path, key);
            assert_eq!(status, 401, "{path} with {key:?}: {body}");
            let error: Value = serde_json::from_str(&body).expect("an OpenAI-style error");
            assert_eq!(
                error["error"]["message"],
                "this server needs an API key: send it as `Authorization: Bearer KEY`"
            );
        }
        let (status, body) = call(path, Some("s3cret-key"));
        assert_eq!(status, 200, "{path}: {body}");
    }
    server.shutdown();
}

/// The events of a streamed reply, read off the wire: each `data:` payload in order.
fn stream_events(url: &str, body: &Value) -> (String, Vec<String>) {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build(),
    );
    let response = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .expect("the server answers");
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response
        .into_body()
        .read_to_string()
        .expect("the body reads");
    let events = text
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {event:?}"))
                .to_owned()
        })
        .collect();
    (content_type, events)
}

#[test]
fn a_streamed_reply_comes_in_pieces_that_add_up_to_the_whole_one() {
    let server = shared();
    let url = format!("{}/chat/completions", server.url());
    let question = greedy(
        vec![ChatMsg::user(
            "What is the capital of France? Answer in one sentence.",
        )],
        24,
    );
    let whole = client(&server.url(), 120.0, 0)
        .complete(&question)
        .expect("the server answers");
    let mut body = question.to_json("smollm2");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (content_type, events) = stream_events(&url, &body);
    assert_eq!(content_type, "text/event-stream");
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:#?}"
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("each event is JSON"))
        .collect();
    let ids: std::collections::BTreeSet<&str> =
        chunks.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids.len(), 1, "one id for the whole reply");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|piece| !piece.is_empty())
        .collect();
    assert!(
        pieces.len() >= 3,
        "the content arrives as it is generated, not in one piece: {pieces:?}"
    );
    assert_eq!(pieces.concat(), whole.content);
    let finish = &chunks[chunks.len() - 2]["choices"][0];
    assert_eq!(finish["finish_reason"], whole.finish_reason.as_str());
    assert_eq!(finish["delta"], json!({}));
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], whole.prompt_tokens);
    assert_eq!(usage["usage"]["completion_tokens"], whole.completion_tokens);

    // A tool call arrives whole, in one delta, once the reply is done; no tag leaks as content.
    let mut req = greedy(tool_conversation(), 40);
    req.tools = vec![weather_tool()];
    let mut body = req.to_json("smollm2");
    body["stream"] = json!(true);
    let (_, events) = stream_events(&url, &body);
    let chunks: Vec<Value> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("each event is JSON"))
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!content.contains("<tool"), "{content:?}");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{chunks:#?}");
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"city":"London"}"#);
    assert_eq!(
        chunks.last().map(|c| &c["choices"][0]["finish_reason"]),
        Some(&json!("tool_calls"))
    );
}

#[test]
fn the_official_openai_python_client_streams_replies() {
    // The client is installed by `cargo xtask setup` into the cache; without Python at all the
    // test cannot run, and says so.
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "SKIPPED the_official_openai_python_client_streams_replies: python3 is not on PATH"
        );
        return;
    }
    let package = model::cached_file("python/openai/__init__.py", "the openai Python package")
        .unwrap_or_else(|e| panic!("{e}"));
    let site = package
        .parent()
        .and_then(Path::parent)
        .expect("the package's folder");
    let server = shared();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai/stream_client.py");
    let output = std::process::Command::new("python3")
        .arg(&script)
        .arg(server.url())
        .arg(server.model_name())
        .arg(greedy(tool_conversation(), 40).to_json("smollm2")["messages"].to_string())
        .arg(weather_tool().to_string())
        .env("PYTHONPATH", site)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).expect("the script prints JSON");
    let plain = &seen["plain"];
    assert_eq!(plain["roles"], json!(["assistant"]), "{seen:#}");
    assert_eq!(plain["ids"], 1, "{seen:#}");
    assert!(plain["content_chunks"].as_u64() >= Some(3), "{seen:#}");
    assert_eq!(plain["content"], seen["whole"]["content"], "{seen:#}");
    assert!(
        plain["content"]
            .as_str()
            .is_some_and(|c| c.contains("Paris")),
        "{seen:#}"
    );
    assert_eq!(plain["finish_reason"], seen["whole"]["finish_reason"]);
    let tool = &seen["tool"];
    assert_eq!(tool["finish_reason"], "tool_calls", "{seen:#}");
    assert_eq!(tool["calls"].as_array().map(Vec::len), Some(1), "{seen:#}");
    assert_eq!(tool["calls"][0]["name"], "get_weather", "{seen:#}");
    let arguments: Value = serde_json::from_str(
        tool["calls"][0]["arguments"]
            .as_str()
            .expect("arguments are a string"),
    )
    .expect("arguments hold JSON");
    assert_eq!(arguments["city"], "London", "{seen:#}");
    assert!(
        tool["calls"][0]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("call_")),
        "{seen:#}"
    );
    assert!(
        tool["usage"]["completion_tokens"].as_u64() > Some(0),
        "{seen:#}"
    );
    assert_eq!(seen["bad_stream_param"], "stream", "{seen:#}");
}

#[test]
fn a_client_that_stalls_gets_a_timeout_while_others_are_answered() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let folder = tmp.path().join("tiny");
    tiny_hf_folder(&folder);
    let options = ServeOptions {
        read_timeout: Duration::from_secs(2),
        ..ServeOptions::default()
    };
    let loaded = LoadedModel::from_path(&folder).expect("the tiny folder loads");
    let server = serve(loaded, any_port(), &options).expect("the server starts");
    let host = server.local_addr().to_string();
    let read_all = |stream: &mut std::net::TcpStream| {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read timeout");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    // A body that stops after 10 of its 100 bytes, and headers that never end.
    let mut stalled_body = std::net::TcpStream::connect(&host).expect("connects");
    write!(
        stalled_body,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"message"
    )
    .expect("sends");
    let mut stalled_head = std::net::TcpStream::connect(&host).expect("connects");
    write!(
        stalled_head,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
    )
    .expect("sends");
    let start = Instant::now();
    // Meanwhile another client is answered at once.
    let (status, reply) = raw(
        "POST",
        &format!("{}/chat/completions", server.url()),
        Some(r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}"#),
    );
    assert_eq!(status, 200, "{reply}");
    assert!(start.elapsed() < Duration::from_secs(2), "not held up");
    let answer = read_all(&mut stalled_body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("the request body did not arrive within 2 s"),
        "{answer}"
    );
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(1900), "{waited:?}");
    // The half-sent headers: the connection is closed (hyper answers 408 or nothing).
    let answer = read_all(&mut stalled_head);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    server.shutdown();
}
