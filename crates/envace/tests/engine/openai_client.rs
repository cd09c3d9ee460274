//! The OpenAI-compatible chat client against tiny scripted HTTP servers started here: retries
//! with backoff on 5xx, 429 and timeouts, no retry on other 4xx, the per-attempt time limit,
//! the limit of requests in flight across clones, failures returned as data, the model list
//! a connection check reads, and API keys from a registered key source (the studio's keyring).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envace::config::EndpointConfig;
use envace::openai::{ChatClient, ChatMsg, ChatRequest, EndpointFailure, KeySource};

/// What the scripted server does with one request.
#[derive(Debug, Clone)]
enum Act {
    /// Answer with this status, extra headers and body.
    Reply(u16, Vec<(String, String)>, String),
    /// Wait this long, then answer 200 (normally after the client gave up).
    Stall(Duration),
    /// Read the request, then close the connection without answering.
    Hang,
}

const OK_BODY: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

fn ok() -> Act {
    Act::Reply(200, Vec::new(), OK_BODY.to_owned())
}

fn status(code: u16) -> Act {
    Act::Reply(
        code,
        Vec::new(),
        format!("{{\"error\": {{\"message\": \"status {code}\"}}}}"),
    )
}

/// A server on a free loopback port that answers the n-th request (from 0) with `script(n)`,
/// counting requests, requests in flight, the most in flight at once, and the last
/// `Authorization` header.
struct Scripted {
    url: String,
    n_requests: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    authorization: Arc<Mutex<Option<String>>>,
}

impl Scripted {
    fn start(hold: Duration, script: impl Fn(usize) -> Act + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        let url = format!(
            "http://{}/v1",
            listener.local_addr().expect("a bound address")
        );
        let n_requests = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let authorization = Arc::new(Mutex::new(None));
        let script = Arc::new(script);
        let (n, max, auth) = (
            Arc::clone(&n_requests),
            Arc::clone(&max_in_flight),
            Arc::clone(&authorization),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (n, in_flight, max, auth, script) = (
                    Arc::clone(&n),
                    Arc::clone(&in_flight),
                    Arc::clone(&max),
                    Arc::clone(&auth),
                    Arc::clone(&script),
                );
                std::thread::spawn(move || {
                    let Some(header) = read_request(&stream) else {
                        return;
                    };
                    if header.is_some() {
                        *auth.lock().expect("no panic holds the lock") = header;
                    }
                    let idx = n.fetch_add(1, Ordering::SeqCst);
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(hold);
                    let act = script(idx);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    answer(stream, act);
                });
            }
        });
        Scripted {
            url,
            n_requests,
            max_in_flight,
            authorization,
        }
    }

    fn n_requests(&self) -> usize {
        self.n_requests.load(Ordering::SeqCst)
    }
}

/// Reads one request; its `Authorization` header, or `None` when the connection closed first.
fn read_request(stream: &TcpStream) -> Option<Option<String>> {
    let request = crate::loopback::read_request(stream)?;
    // A GET (the model list) has no body; a chat completion names the model.
    if !request.body.is_empty() {
        let body: serde_json::Value = serde_json::from_slice(&request.body).ok()?;
        assert_eq!(body["model"], "scripted-model", "the model name is sent");
    }
    Some(request.authorization)
}

fn answer(mut stream: TcpStream, act: Act) {
    let (code, headers, body) = match act {
        Act::Reply(code, headers, body) => (code, headers, body),
        Act::Stall(duration) => {
            std::thread::sleep(duration);
            (200, Vec::new(), OK_BODY.to_owned())
        }
        Act::Hang => return,
    };
    let mut head = format!(
        "HTTP/1.1 {code} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    // The client may have hung up already (after a timeout): that is not an error here.
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

fn client(url: &str, timeout_secs: f64, max_retries: u32, max_concurrency: u32) -> ChatClient {
    ChatClient::new(&EndpointConfig {
        url: url.to_owned(),
        model: "scripted-model".to_owned(),
        api_key_env: None,
        timeout_secs,
        max_retries,
        max_concurrency,
    })
    .expect("a valid endpoint config")
    .with_backoff(Duration::from_millis(50), Duration::from_millis(400))
}

fn ping() -> ChatRequest {
    ChatRequest::new(vec![ChatMsg::user("ping")])
}

#[test]
fn server_errors_and_rate_limits_are_retried_with_exponential_backoff() {
    let server = Scripted::start(Duration::ZERO, |n| match n {
        0 | 1 => status(500),
        2 => Act::Reply(
            429,
            vec![("Retry-After".to_owned(), "0".to_owned())],
            "slow down".to_owned(),
        ),
        _ => ok(),
    });
    let start = Instant::now();
    let reply = client(&server.url, 5.0, 5, 4)
        .complete(&ping())
        .expect("the fourth attempt succeeds");
    let elapsed = start.elapsed();
    assert_eq!(reply.content, "pong");
    assert_eq!(reply.finish_reason, "stop");
    assert_eq!((reply.prompt_tokens, reply.completion_tokens), (3, 1));
    assert_eq!(reply.attempts, 4);
    assert_eq!(server.n_requests(), 4);
    // Backoff 50 ms, then 100 ms; the 429 said `Retry-After: 0`.
    assert!(
        elapsed >= Duration::from_millis(150),
        "backoff too short: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "backoff too long: {elapsed:?}"
    );
}

#[test]
fn retries_stop_after_max_retries_with_the_last_status() {
    let server = Scripted::start(Duration::ZERO, |_| status(503));
    let failure = client(&server.url, 5.0, 2, 4)
        .complete(&ping())
        .expect_err("every attempt fails");
    assert_eq!(server.n_requests(), 3);
    match &failure {
        EndpointFailure::Http {
            status,
            attempts,
            body_excerpt,
            ..
        } => {
            assert_eq!((*status, *attempts), (503, 3));
            assert!(body_excerpt.contains("status 503"), "{body_excerpt}");
        }
        other => panic!("expected an HTTP failure, got {other:?}"),
    }
    assert!(
        failure.to_string().contains("HTTP 503 (3 attempts)"),
        "{failure}"
    );
}

#[test]
fn client_errors_are_not_retried() {
    let server = Scripted::start(Duration::ZERO, |_| status(400));
    let failure = client(&server.url, 5.0, 3, 4)
        .complete(&ping())
        .expect_err("a 400 is final");
    assert!(
        matches!(
            failure,
            EndpointFailure::Http {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{failure:?}"
    );
    assert_eq!(server.n_requests(), 1);
}

#[test]
fn a_stalled_attempt_times_out_and_the_retry_succeeds() {
    let server = Scripted::start(Duration::ZERO, |n| {
        if n == 0 {
            Act::Stall(Duration::from_secs(3))
        } else {
            ok()
        }
    });
    let start = Instant::now();
    let reply = client(&server.url, 0.5, 2, 4)
        .complete(&ping())
        .expect("the second attempt succeeds");
    assert_eq!((reply.attempts, reply.content.as_str()), (2, "pong"));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn an_endpoint_that_always_stalls_gives_a_timeout_failure() {
    let server = Scripted::start(Duration::ZERO, |_| Act::Stall(Duration::from_secs(3)));
    let start = Instant::now();
    let failure = client(&server.url, 0.3, 1, 4)
        .complete(&ping())
        .expect_err("every attempt stalls");
    assert!(
        matches!(failure, EndpointFailure::Timeout { attempts: 2, .. }),
        "{failure:?}"
    );
    assert!(
        failure.to_string().contains("no reply within 0.3 s"),
        "{failure}"
    );
    // Two attempts of 0.3 s and one backoff of 50 ms, well before the server would answer.
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn dropped_and_refused_connections_are_transport_failures() {
    let server = Scripted::start(Duration::ZERO, |_| Act::Hang);
    let failure = client(&server.url, 5.0, 1, 4)
        .complete(&ping())
        .expect_err("the server never answers");
    assert!(
        matches!(failure, EndpointFailure::Transport { attempts: 2, .. }),
        "{failure:?}"
    );
    assert_eq!(server.n_requests(), 2);

    let closed_port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        listener.local_addr().expect("a bound address").port()
    };
    let failure = client(&format!("http://127.0.0.1:{closed_port}/v1"), 5.0, 2, 4)
        .complete(&ping())
        .expect_err("nothing listens there");
    assert!(
        matches!(failure, EndpointFailure::Transport { attempts: 3, .. }),
        "{failure:?}"
    );
    assert!(
        failure.to_string().contains("connection failed"),
        "{failure}"
    );
}

#[test]
fn a_reply_that_is_not_a_completion_is_a_bad_response_without_retry() {
    let server = Scripted::start(Duration::ZERO, |_| {
        Act::Reply(200, Vec::new(), "<html>gateway</html>".to_owned())
    });
    let failure = client(&server.url, 5.0, 3, 4)
        .complete(&ping())
        .expect_err("HTML is not a completion");
    assert!(
        matches!(failure, EndpointFailure::BadResponse { attempts: 1, .. }),
        "{failure:?}"
    );
    assert_eq!(server.n_requests(), 1);
}

#[test]
fn clones_share_the_limit_of_requests_in_flight() {
    let server = Scripted::start(Duration::from_millis(150), |_| ok());
    let client = client(&server.url, 10.0, 0, 2);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            std::thread::spawn(move || client.complete(&ping()))
        })
        .collect();
    for thread in threads {
        let reply = thread
            .join()
            .expect("a client thread does not panic")
            .expect("every request succeeds");
        assert_eq!(reply.content, "pong");
    }
    assert_eq!(server.n_requests(), 8);
    assert_eq!(server.max_in_flight.load(Ordering::SeqCst), 2);
}

#[test]
fn the_api_key_is_sent_as_a_bearer_token() {
    let server = Scripted::start(Duration::ZERO, |_| ok());
    // Cargo sets CARGO_PKG_NAME for the test process: a variable that is surely set, since
    // setting one here would need `unsafe`.
    let client = ChatClient::new(&EndpointConfig {
        url: server.url.clone(),
        model: "scripted-model".to_owned(),
        api_key_env: Some("CARGO_PKG_NAME".to_owned()),
        timeout_secs: 5.0,
        max_retries: 0,
        max_concurrency: 1,
    })
    .expect("the variable is set");
    client.complete(&ping()).expect("the server answers");
    assert_eq!(
        server
            .authorization
            .lock()
            .expect("no panic holds the lock")
            .as_deref(),
        Some("Bearer envace")
    );
    assert!(!format!("{client:?}").contains("envace\""), "{client:?}");
}

#[test]
fn the_model_list_is_read_in_one_attempt_and_failures_name_the_url() {
    let server = Scripted::start(Duration::ZERO, |n| match n {
        0 => Act::Reply(
            200,
            Vec::new(),
            r#"{"object":"list","data":[{"id":"smollm2","object":"model"},{"id":"judge"}]}"#
                .to_owned(),
        ),
        1 => status(503),
        2 => Act::Reply(200, Vec::new(), r#"{"data":[{"name":"x"}]}"#.to_owned()),
        _ => Act::Reply(200, Vec::new(), "<html>".to_owned()),
    });
    let client = client(&server.url, 5.0, 3, 1);
    let models_url = format!("{}/models", server.url);
    assert_eq!(
        client.list_models().expect("a model list"),
        ["smollm2", "judge"]
    );
    match client.list_models() {
        Err(EndpointFailure::Http {
            url,
            attempts: 1,
            status: 503,
            ..
        }) => assert_eq!(url, models_url),
        other => panic!("expected one HTTP 503 failure, got {other:?}"),
    }
    let failure = client.list_models().expect_err("no id");
    assert_eq!(
        failure.to_string(),
        format!(
            "{models_url}: unexpected reply (1 attempt): data[0].id is missing or not a string"
        )
    );
    let failure = client.list_models().expect_err("not JSON");
    assert!(
        failure.to_string().contains("the body is not JSON"),
        "{failure}"
    );
    assert_eq!(server.n_requests(), 4, "no request is retried");

    let refused = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        format!("http://{}/v1", listener.local_addr().expect("an address"))
    };
    match self::client(&refused, 5.0, 3, 1).list_models() {
        Err(EndpointFailure::Transport {
            url, attempts: 1, ..
        }) => {
            assert_eq!(url, format!("{refused}/models"));
        }
        other => panic!("expected a refused connection, got {other:?}"),
    }
}

/// A key source holding one key, as the studio's keyring would.
struct OneKey;

impl KeySource for OneKey {
    fn name(&self) -> &str {
        "the test's key source"
    }
    fn key(&self, var: &str) -> Result<String, String> {
        match var {
            "ENVACE_TEST_STORED_KEY" => Ok("stored-secret".to_owned()),
            _ => Err("no entry".to_owned()),
        }
    }
}

#[test]
fn a_key_missing_from_the_environment_comes_from_the_key_source() {
    assert!(envace::openai::set_key_source(Box::new(OneKey)));
    assert!(
        !envace::openai::set_key_source(Box::new(OneKey)),
        "a second source is refused"
    );
    let server = Scripted::start(Duration::ZERO, |_| ok());
    let endpoint = |var: &str| EndpointConfig {
        url: server.url.clone(),
        model: "scripted-model".to_owned(),
        api_key_env: Some(var.to_owned()),
        timeout_secs: 5.0,
        max_retries: 0,
        max_concurrency: 1,
    };
    let client = ChatClient::new(&endpoint("ENVACE_TEST_STORED_KEY")).expect("the stored key");
    client.complete(&ping()).expect("the server answers");
    assert_eq!(
        server
            .authorization
            .lock()
            .expect("no panic holds the lock")
            .as_deref(),
        Some("Bearer stored-secret")
    );
    let err = ChatClient::new(&endpoint("ENVACE_TEST_UNKNOWN_KEY")).expect_err("no key anywhere");
    assert_eq!(
        err.to_string(),
        format!(
            "endpoint api_key_env: the environment variable ENVACE_TEST_UNKNOWN_KEY is not set and the test's key source has no key under that name (no entry); export it or store the API key of {}",
            server.url
        )
    );
}
