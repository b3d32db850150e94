//! LLM providers against mock OpenAI-compatible and Anthropic servers on 127.0.0.1: request
//! shapes, reply parsing, retries and backoff, every failure as one clear sentence; the scripted
//! provider; configuration from skillhost.toml and the environment.

#[path = "common/llm_mock.rs"]
mod llm_mock;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_mock::{MockServer, Reply};
use serde_json::{Value, json};
use skillhost::agent::provider::config::{DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL, DEFAULT_TIMEOUT};
use skillhost::agent::provider::{
    ChatMessage, ChatRequest, Provider, ProviderConfig, ProviderError, ProviderKind, Purpose, ResponseFormat,
    RetryNotice, RetryObserver, RetryReason, StreamEvent, StreamFault, StreamObserver, ToolCall, ToolSpec, Usage, open,
    open_streaming, open_with, resolve,
};
use skillhost::http::ProxySettings;

fn openai_config(server: &MockServer) -> ProviderConfig {
    let mut config = ProviderConfig::openai(&format!("{}/v1", server.base), "test-model");
    config.api_key = Some("sk-test".to_string());
    config.backoff_base = Duration::from_millis(20);
    config
}

fn anthropic_config(server: &MockServer) -> ProviderConfig {
    let mut config = ProviderConfig::anthropic(&server.base, "claude-test", "sk-ant-test");
    config.backoff_base = Duration::from_millis(20);
    config
}

fn decide_json() -> ChatRequest {
    ChatRequest::new(
        Purpose::Decide,
        ResponseFormat::Json,
        vec![
            ChatMessage::system("You are a log analyst. Answer in JSON."),
            ChatMessage::user("why is the UART garbled?"),
        ],
    )
}

fn read_log_tool() -> ToolSpec {
    ToolSpec {
        name: "read-log-file".to_string(),
        description: "Reads a log file".to_string(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

fn decide_tools() -> ChatRequest {
    let mut request = ChatRequest::new(
        Purpose::Decide,
        ResponseFormat::Tools(vec![read_log_tool()]),
        vec![
            ChatMessage::system("You are a log analyst."),
            ChatMessage::user("why is the UART garbled?"),
            ChatMessage::assistant_tool_calls(
                "",
                vec![ToolCall {
                    id: "call_0".into(),
                    name: "read-log-file".into(),
                    arguments: r#"{"path":"a.log"}"#.into(),
                }],
            ),
            ChatMessage::tool_result("call_0", "L1 boot ok"),
        ],
    );
    request.max_tokens = Some(500);
    request.temperature = Some(0.0);
    request
}

async fn chat_error(provider: &dyn Provider, request: &ChatRequest) -> ProviderError {
    match provider.chat(request).await {
        Ok(reply) => panic!("expected an error, got {reply:?}"),
        Err(error) => error,
    }
}

fn assert_one_sentence(message: &str) {
    assert!(!message.contains('\n'), "not one line: {message}");
    assert!(!message.contains("panicked") && !message.contains("backtrace"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible

#[tokio::test]
async fn openai_json_mode_sends_response_format_and_returns_the_text() {
    let action = r#"{"reasoning":"read first","next_action":"call_skill","skill_name":"read-log-file"}"#;
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_text(action))]).await;
    let provider = open(&openai_config(&server)).unwrap();
    let reply = provider.chat(&decide_json()).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some(action));
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.usage, Some(Usage { prompt_tokens: 12, completion_tokens: 5 }));
    assert_eq!(reply.model, "mock-model");

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(request.body["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        request.body["messages"],
        json!([
            {"role": "system", "content": "You are a log analyst. Answer in JSON."},
            {"role": "user", "content": "why is the UART garbled?"},
        ])
    );
    assert!(request.body.get("tools").is_none() && request.body.get("max_tokens").is_none());
    assert!(
        provider.name().contains(&format!("OpenAI-compatible provider at {}/v1", server.base)),
        "{}",
        provider.name()
    );
}

#[tokio::test]
async fn openai_tool_calling_sends_tools_and_parses_tool_calls() {
    // Malformed arguments come back verbatim: repairing them is the loop's job.
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_tool_call(
        "call_1",
        "read-log-file",
        r#"{"path": "uart.log",}"#,
    ))])
    .await;
    let mut config = openai_config(&server);
    config.api_key = None;
    let provider = open(&config).unwrap();
    let reply = provider.chat(&decide_tools()).await.unwrap();

    assert_eq!(reply.text, None);
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall {
            id: "call_1".into(),
            name: "read-log-file".into(),
            arguments: r#"{"path": "uart.log",}"#.into()
        }]
    );
    let body = &server.requests()[0].body;
    assert_eq!(server.requests()[0].header("authorization"), None, "no key configured, none sent");
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "read-log-file",
            "description": "Reads a log file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        }}])
    );
    assert_eq!(body["tool_choice"], "required");
    assert!(body.get("response_format").is_none());
    assert_eq!(body["max_tokens"], 500);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["name"], "read-log-file");
    assert_eq!(body["messages"][3], json!({"role": "tool", "tool_call_id": "call_0", "content": "L1 boot ok"}));
}

#[tokio::test]
async fn openai_embeddings() {
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_embedding(&[0.25, -0.5, 1.0]))]).await;
    let mut config = openai_config(&server);
    config.embedding_model = "nomic-embed-text".to_string();
    let vector = open(&config).unwrap().embed("uart framing error").await.unwrap();
    assert_eq!(vector, vec![0.25, -0.5, 1.0]);
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/embeddings");
    assert_eq!(request.body, json!({"model": "nomic-embed-text", "input": "uart framing error"}));
}

// ---------------------------------------------------------------------------------------------
// Anthropic

#[tokio::test]
async fn anthropic_tool_use_request_shape_and_reply() {
    let server = MockServer::start(vec![Reply::ok(llm_mock::anthropic_tool_use(
        "toolu_1",
        "read-log-file",
        json!({"path": "uart.log"}),
    ))])
    .await;
    let provider = open(&anthropic_config(&server)).unwrap();
    let reply = provider.chat(&decide_tools()).await.unwrap();

    assert_eq!(reply.text.as_deref(), Some("I will read the log."));
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall {
            id: "toolu_1".into(),
            name: "read-log-file".into(),
            arguments: r#"{"path":"uart.log"}"#.into()
        }]
    );
    assert_eq!(reply.usage, Some(Usage { prompt_tokens: 40, completion_tokens: 9 }));
    assert_eq!(reply.model, "claude-mock");

    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = &request.body;
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["system"], "You are a log analyst.");
    assert_eq!(body["max_tokens"], 500);
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["tools"][0]["name"], "read-log-file");
    assert_eq!(body["tools"][0]["input_schema"]["required"], json!(["path"]));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "why is the UART garbled?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_0", "name": "read-log-file", "input": {"path": "a.log"}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_0", "content": "L1 boot ok"}]},
        ])
    );
}

#[tokio::test]
async fn anthropic_json_mode_text_and_no_embeddings() {
    let server = MockServer::start(vec![Reply::ok(llm_mock::anthropic_text(r#"{"next_action":"reply"}"#))]).await;
    let provider = open(&anthropic_config(&server)).unwrap();
    let reply = provider.chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some(r#"{"next_action":"reply"}"#));
    let body = &server.requests()[0].body;
    assert!(body["system"].as_str().unwrap().ends_with("Answer with exactly one JSON object and nothing else."));
    assert!(body.get("tools").is_none() && body.get("response_format").is_none());

    let error = provider.embed("text").await.unwrap_err();
    assert!(matches!(error, ProviderError::Unsupported { .. }), "{error:?}");
    assert!(error.to_string().contains("Anthropic has no embeddings endpoint"), "{error}");
    assert_eq!(server.requests().len(), 1, "embed must not call the server");
}

#[tokio::test]
async fn anthropic_bad_key_names_its_variable() {
    let server = MockServer::start(vec![Reply::json(
        401,
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )])
    .await;
    let error = chat_error(open(&anthropic_config(&server)).unwrap().as_ref(), &decide_json()).await;
    let message = error.to_string();
    assert!(matches!(error, ProviderError::Auth { status: 401, .. }), "{error:?}");
    assert!(message.contains("ANTHROPIC_API_KEY") && message.contains("invalid x-api-key"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Retries, backoff and failures

#[tokio::test]
async fn server_errors_are_retried_until_success() {
    let server = MockServer::start(vec![
        Reply::error(500, "boom"),
        Reply::raw(502, "<html>bad gateway</html>"),
        Reply::ok(llm_mock::openai_text("{}")),
    ])
    .await;
    let reply = open(&openai_config(&server)).unwrap().chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("{}"));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.body == requests[0].body), "every retry sends the same request");
    // Exponential backoff: 20 ms then 40 ms, each plus up to 50% jitter.
    assert!(requests[1].at - requests[0].at >= Duration::from_millis(20));
    assert!(requests[2].at - requests[1].at >= Duration::from_millis(40));
}

#[tokio::test]
async fn rate_limit_waits_for_retry_after() {
    let server = MockServer::start(vec![
        Reply::error(429, "slow down").with_header("retry-after", "1"),
        Reply::ok(llm_mock::openai_text("{}")),
    ])
    .await;
    open(&openai_config(&server)).unwrap().chat(&decide_json()).await.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}, before Retry-After");
    assert!(gap < Duration::from_secs(3), "waited {gap:?}");
}

#[tokio::test]
async fn retries_exhausted_is_one_clear_error() {
    let server = MockServer::start(vec![Reply::error(503, "overloaded"); 4]).await;
    let error = chat_error(open(&openai_config(&server)).unwrap().as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::Server { status: 503, attempts: 4, .. }), "{error:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(message.contains("HTTP 503 on all 4 attempts") && message.contains("overloaded"), "{message}");
    assert_eq!(server.requests().len(), 4, "max_retries 3 = 4 attempts");

    let server = MockServer::start(vec![Reply::error(429, "quota"); 2]).await;
    let mut config = openai_config(&server);
    config.max_retries = 1;
    let error = chat_error(open(&config).unwrap().as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::RateLimited { attempts: 2, .. }), "{error:?}");
    assert!(error.to_string().contains("rate limiting (HTTP 429)"), "{error}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn dropped_connection_is_retried() {
    let server = MockServer::start(vec![Reply::Drop, Reply::ok(llm_mock::openai_text("{}"))]).await;
    let reply = open(&openai_config(&server)).unwrap().chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("{}"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn provider_down_is_unreachable_in_one_sentence() {
    // A port that was just free: nothing listens there any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let provider = open(&ProviderConfig::openai(&base, "m")).unwrap();
    let started = Instant::now();
    let error = chat_error(provider.as_ref(), &decide_json()).await;
    assert!(started.elapsed() < Duration::from_secs(5), "refused connections are not retried");
    assert!(matches!(error, ProviderError::Unreachable { .. }), "{error:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(
        message.starts_with(&format!(
            "cannot reach the OpenAI-compatible provider at {base}: connection refused; is the server running? set OPENAI_BASE_URL"
        )),
        "{message}"
    );
}

#[tokio::test]
async fn tls_to_a_plain_http_server_fails_the_handshake_clearly() {
    // Exercises the https path (rustls with ring, webpki roots, an IP as server name) without
    // leaving loopback: the mock speaks plain HTTP, so the handshake must fail, once.
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_text("{}"))]).await;
    let base = server.base.replace("http://", "https://");
    let mut config = ProviderConfig::openai(&format!("{base}/v1"), "m");
    config.timeout = Duration::from_secs(5);
    let error = chat_error(open(&config).unwrap().as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::Unreachable { .. }), "{error:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(
        message.starts_with(&format!("cannot reach the OpenAI-compatible provider at {base}/v1: TLS handshake failed")),
        "{message}"
    );
}

#[tokio::test]
async fn bad_key_is_an_auth_error_naming_the_variable() {
    let server = MockServer::start(vec![Reply::error(401, "Incorrect API key provided: sk-test.")]).await;
    let error = chat_error(open(&openai_config(&server)).unwrap().as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::Auth { status: 401, .. }), "{error:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(message.contains("set OPENAI_API_KEY") && message.contains("Incorrect API key provided"), "{message}");
    assert_eq!(server.requests().len(), 1, "a bad key is not retried");
}

#[tokio::test]
async fn unknown_model_and_other_rejections() {
    let server = MockServer::start(vec![
        Reply::error(404, "model 'test-model' not found"),
        Reply::error(400, "'messages' must contain the word 'json'"),
    ])
    .await;
    let provider = open(&openai_config(&server)).unwrap();
    let error = chat_error(provider.as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::NotFound { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("`test-model`") && message.contains("SKILLHOST_MODEL"), "{message}");

    let error = chat_error(provider.as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::Rejected { status: 400, .. }), "{error:?}");
    assert!(error.to_string().contains("must contain the word 'json'"), "{error}");
    assert_eq!(server.requests().len(), 2, "4xx are not retried");
}

#[tokio::test]
async fn unusable_replies_are_bad_responses() {
    let server = MockServer::start(vec![
        Reply::raw(200, "<html>captive portal</html>"),
        Reply::ok(json!({"id": "x", "choices": []})),
    ])
    .await;
    let provider = open(&openai_config(&server)).unwrap();
    let error = chat_error(provider.as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::BadResponse { .. }), "{error:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(message.contains("not JSON") && message.contains("captive portal"), "{message}");

    let error = chat_error(provider.as_ref(), &decide_json()).await;
    assert!(error.to_string().contains("no choices"), "{error}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let server = MockServer::start(vec![Reply::Hang]).await;
    let mut config = openai_config(&server);
    config.timeout = Duration::from_millis(300);
    config.max_retries = 0;
    let started = Instant::now();
    let error = chat_error(open(&config).unwrap().as_ref(), &decide_json()).await;
    let elapsed = started.elapsed();
    assert!(matches!(error, ProviderError::Timeout { .. }), "{error:?}");
    assert!(elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3), "{elapsed:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(
        message.contains("did not answer within 0.3 s on all 1 attempts") && message.contains("timeout_secs"),
        "{message}"
    );
    assert_eq!(server.requests().len(), 1, "no retries configured");
}

/// A provider for `config` whose retry notices land in the returned list.
fn observed(config: &ProviderConfig) -> (Arc<dyn Provider>, Arc<Mutex<Vec<RetryNotice>>>) {
    let notices: Arc<Mutex<Vec<RetryNotice>>> = Arc::default();
    let sink = notices.clone();
    let provider =
        open_with(config, Some(Arc::new(move |n: &RetryNotice| sink.lock().unwrap().push(n.clone())))).unwrap();
    (provider, notices)
}

#[tokio::test]
async fn a_timeout_is_retried_like_a_server_error_and_announced() {
    let server =
        MockServer::start(vec![Reply::Hang, Reply::error(503, "busy"), Reply::ok(llm_mock::openai_text("{}"))]).await;
    let mut config = openai_config(&server);
    config.timeout = Duration::from_millis(300);
    let (provider, notices) = observed(&config);
    let reply = provider.chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("{}"));
    assert_eq!(server.requests().len(), 3);
    let notices = notices.lock().unwrap().clone();
    let reasons: Vec<RetryReason> = notices.iter().map(|n| n.reason).collect();
    assert_eq!(
        reasons,
        [RetryReason::Timeout { after: Duration::from_millis(300) }, RetryReason::Status { status: 503 }]
    );
    assert_eq!(notices.iter().map(|n| (n.failed_attempt, n.attempts)).collect::<Vec<_>>(), [(1, 4), (2, 4)]);
    let shown = notices[0].to_string();
    assert!(shown.contains("did not answer within 0.3 s on attempt 1 of 4; retrying in"), "{shown}");
    assert!(notices[1].to_string().contains("answered HTTP 503 on attempt 2 of 4"), "{}", notices[1]);

    // Timeouts on every attempt: one sentence naming the attempts.
    let server = MockServer::start(vec![Reply::Hang, Reply::Hang]).await;
    let mut config = openai_config(&server);
    config.timeout = Duration::from_millis(200);
    config.max_retries = 1;
    let error = chat_error(open(&config).unwrap().as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::Timeout { attempts: 2, .. }), "{error:?}");
    assert!(error.to_string().contains("on all 2 attempts"), "{error}");
}

#[tokio::test]
async fn retry_after_is_announced_with_the_wait_and_the_cap() {
    let server = MockServer::start(vec![
        Reply::error(429, "slow down").with_header("retry-after", "0.5"),
        Reply::error(429, "slow down").with_header("retry-after", "100"),
        Reply::ok(llm_mock::openai_text("{}")),
    ])
    .await;
    let mut config = openai_config(&server);
    config.max_backoff = Duration::from_millis(600);
    let (provider, notices) = observed(&config);
    provider.chat(&decide_json()).await.unwrap();
    let notices = notices.lock().unwrap().clone();
    assert_eq!(notices.len(), 2);
    assert_eq!(notices[0].reason, RetryReason::RateLimited);
    assert_eq!((notices[0].wait_ms, notices[0].retry_after_ms, notices[0].capped), (500, Some(500), false));
    assert!(notices[0].to_string().contains("retrying in 0.5 s (as its Retry-After asked)"), "{}", notices[0]);
    // 100 s asked, 0.6 s waited: said so, with the setting that caps it.
    assert_eq!((notices[1].wait_ms, notices[1].retry_after_ms, notices[1].capped), (600, Some(100_000), true));
    let shown = notices[1].to_string();
    assert!(
        shown.contains("rate limiting (HTTP 429) on attempt 2 of 4; retrying in 0.6 s (it asked for 100.0 s"),
        "{shown}"
    );
    assert!(shown.contains("max_backoff"), "{shown}");
    let requests = server.requests();
    assert!(requests[2].at - requests[1].at >= Duration::from_millis(600));
    let event = serde_json::to_value(&notices[1]).unwrap();
    assert_eq!(event["reason"]["kind"], "rate-limited");
    assert_eq!(event["wait_ms"], 600);
}

#[test]
fn a_base_url_port_above_65535_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let error =
        resolve(home.path(), &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:70000/v1")])).unwrap_err().to_string();
    assert!(
        error.contains("port `70000`") && error.contains("1 to 65535") && error.contains("OPENAI_BASE_URL"),
        "{error}"
    );
    std::fs::write(
        home.path().join("skillhost.toml"),
        "[provider]\nkind = \"openai\"\nbase_url = \"http://localhost:99999\"\n",
    )
    .unwrap();
    let error = resolve(home.path(), &env(&[])).unwrap_err().to_string();
    assert!(error.contains("port `99999`") && error.contains("base_url"), "{error}");
    let config = resolve(home.path(), &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:65535/v1")])).unwrap().unwrap();
    assert_eq!(config.base_url, "http://127.0.0.1:65535/v1");
}

#[test]
fn tool_calling_is_the_default_for_http_providers_with_a_switch() {
    let home = tempfile::tempdir().unwrap();
    let config = resolve(home.path(), &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")])).unwrap().unwrap();
    assert!(config.tool_calling);
    let config = resolve(home.path(), &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap().unwrap();
    assert!(config.tool_calling);
    std::fs::write(home.path().join("skillhost.toml"), "[provider]\nkind = \"openai\"\ntool_calling = false\n")
        .unwrap();
    assert!(!resolve(home.path(), &env(&[])).unwrap().unwrap().tool_calling);
    std::fs::write(
        home.path().join("skillhost.toml"),
        "[provider]\nkind = \"scripted\"\ndecisions = \"d.json\"\ntool_calling = true\n",
    )
    .unwrap();
    assert!(!resolve(home.path(), &env(&[])).unwrap().unwrap().tool_calling, "a replay has no tool calling");
}

// ---------------------------------------------------------------------------------------------
// Scripted

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn scripted_replays_in_order_per_purpose_then_says_it_ran_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "decisions.json",
        r#"{
            "comment": "two decisions and a route",
            "decide": [
                {"reasoning": "read", "next_action": "call_skill", "skill_name": "read-log-file", "parameters": {"path": "a"}},
                "{\"reasoning\": \"broken\",",
                {"tool_call": {"name": "read-log-file", "arguments": {"path": "b"}}}
            ],
            "route": ["log-analyst"]
        }"#,
    );
    let provider = open(&ProviderConfig::scripted(&path)).unwrap();
    assert_eq!(provider.name(), format!("scripted ({})", path.display()));

    let decide = decide_json();
    let first = provider.chat(&decide).await.unwrap();
    let first: Value = serde_json::from_str(first.text.as_deref().unwrap()).unwrap();
    assert_eq!(first["skill_name"], "read-log-file");
    let route = ChatRequest::new(Purpose::Route, ResponseFormat::Text, vec![ChatMessage::user("uart")]);
    assert_eq!(provider.chat(&route).await.unwrap().text.as_deref(), Some("log-analyst"));
    assert_eq!(provider.chat(&decide).await.unwrap().text.as_deref(), Some(r#"{"reasoning": "broken","#));
    let call = provider.chat(&decide).await.unwrap();
    assert_eq!(
        (call.tool_calls[0].name.as_str(), call.tool_calls[0].arguments.as_str()),
        ("read-log-file", r#"{"path":"b"}"#)
    );
    assert_eq!(call.model, "scripted");

    let error = provider.chat(&decide).await.unwrap_err();
    assert!(matches!(error, ProviderError::ScriptExhausted { purpose: Purpose::Decide, used: 3, .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "decisions file {} has no more `decide` replies (used 3); add replies to it, or configure a real provider",
            path.display()
        )
    );
    let summarize = ChatRequest::new(Purpose::Summarize, ResponseFormat::Text, vec![]);
    assert!(provider.chat(&summarize).await.unwrap_err().to_string().contains("no more `summarize` replies (used 0)"));

    let a = provider.embed("UART garbage at 115200").await.unwrap();
    assert_eq!(a, provider.embed("uart GARBAGE at 115200").await.unwrap());
}

#[test]
fn malformed_decisions_file_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "broken.json", "{\n  \"decide\": [\n    {\"a\": 1,}\n  ]\n}\n");
    let error = open(&ProviderConfig::scripted(&path)).err().expect("malformed file must fail");
    let message = error.to_string();
    assert!(matches!(error, ProviderError::Config(_)), "{error:?}");
    assert!(message.contains(&path.display().to_string()) && message.contains("line 3 column"), "{message}");

    let missing = dir.path().join("nope.json");
    let message = open(&ProviderConfig::scripted(&missing)).err().unwrap().to_string();
    assert!(message.starts_with(&format!("cannot read decisions file {}", missing.display())), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Configuration

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| map.get(name).cloned()
}

#[test]
fn nothing_configured_is_none() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(resolve(home.path(), &env(&[])).unwrap(), None);
    // Only a model, or empty variables, configure nothing.
    assert_eq!(resolve(home.path(), &env(&[("SKILLHOST_MODEL", "x"), ("OPENAI_API_KEY", "")])).unwrap(), None);
    // A file without a [provider] table neither.
    write(home.path(), "skillhost.toml", "");
    assert_eq!(resolve(home.path(), &env(&[])).unwrap(), None);
}

#[test]
fn file_then_environment() {
    let home = tempfile::tempdir().unwrap();
    write(
        home.path(),
        "skillhost.toml",
        r#"
[provider]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1/"
model = "qwen3:8b"
embedding_model = "nomic-embed-text"
api_key_env = "MY_LLM_KEY"
timeout_secs = 120
max_retries = 5
"#,
    );
    let config = resolve(home.path(), &env(&[("OPENAI_API_KEY", "ignored"), ("MY_LLM_KEY", "k1")])).unwrap().unwrap();
    assert_eq!(config.kind, ProviderKind::OpenAi);
    assert_eq!(config.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(config.model, "qwen3:8b");
    assert_eq!(config.embedding_model, "nomic-embed-text");
    assert_eq!((config.api_key.as_deref(), config.api_key_env.as_str()), (Some("k1"), "MY_LLM_KEY"));
    assert_eq!((config.timeout, config.max_retries), (Duration::from_secs(120), 5));

    let config = resolve(
        home.path(),
        &env(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
            ("SKILLHOST_MODEL", "llama-3.1-8b"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:1"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(config.kind, ProviderKind::OpenAi, "the file's kind wins over which keys happen to be set");
    assert_eq!((config.base_url.as_str(), config.model.as_str()), ("http://127.0.0.1:8000/v1", "llama-3.1-8b"));
    assert_eq!(config.api_key, None);

    // SKILLHOST_PROVIDER overrides the file's kind.
    let config =
        resolve(home.path(), &env(&[("SKILLHOST_PROVIDER", "anthropic"), ("MY_LLM_KEY", "k2")])).unwrap().unwrap();
    assert_eq!(config.kind, ProviderKind::Anthropic);
    assert_eq!(config.base_url, "http://127.0.0.1:11434/v1", "base_url from the file still applies");
}

#[test]
fn environment_alone_selects_the_provider() {
    let home = tempfile::tempdir().unwrap();
    let config = resolve(home.path(), &env(&[("ANTHROPIC_API_KEY", "sk-ant")])).unwrap().unwrap();
    assert_eq!(config.kind, ProviderKind::Anthropic);
    assert_eq!(
        (config.base_url.as_str(), config.model.as_str()),
        (DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL)
    );
    assert_eq!((config.api_key.as_deref(), config.timeout, config.max_retries), (Some("sk-ant"), DEFAULT_TIMEOUT, 3));

    let config = resolve(
        home.path(),
        &env(&[
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
            ("SKILLHOST_MODEL", "qwen3"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!((config.kind, config.model.as_str()), (ProviderKind::OpenAi, "qwen3"));

    let error = resolve(home.path(), &env(&[("SKILLHOST_PROVIDER", "gemini")])).unwrap_err().to_string();
    assert!(
        error.contains("SKILLHOST_PROVIDER is `gemini`") && error.contains("openai, anthropic or scripted"),
        "{error}"
    );
    let error = resolve(home.path(), &env(&[("OPENAI_BASE_URL", "localhost:11434")])).unwrap_err().to_string();
    assert!(error.contains("`localhost:11434` from OPENAI_BASE_URL is not an http(s) URL"), "{error}");
}

#[test]
fn scripted_config_resolves_decisions_against_the_home() {
    let home = tempfile::tempdir().unwrap();
    write(home.path(), "skillhost.toml", "[provider]\nkind = \"scripted\"\ndecisions = \"decisions.json\"\n");
    let config = resolve(home.path(), &env(&[("OPENAI_API_KEY", "sk")])).unwrap().unwrap();
    assert_eq!(
        (config.kind, config.decisions.clone()),
        (ProviderKind::Scripted, Some(home.path().join("decisions.json")))
    );
    let config = resolve(home.path(), &env(&[("SKILLHOST_DECISIONS", "/tmp/other.json")])).unwrap().unwrap();
    assert_eq!(config.decisions.as_deref(), Some(Path::new("/tmp/other.json")));

    write(home.path(), "skillhost.toml", "[provider]\nkind = \"scripted\"\n");
    let error = resolve(home.path(), &env(&[])).unwrap_err().to_string();
    assert!(error.contains("needs a decisions file"), "{error}");
}

#[test]
fn config_file_errors_name_the_problem() {
    let home = tempfile::tempdir().unwrap();
    let file = write(home.path(), "skillhost.toml", "[provider]\nkind = \"openai\"\nmodle = \"gpt\"\n");
    let error = resolve(home.path(), &env(&[])).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, ProviderError::Config(_)));
    assert_one_sentence(&message);
    assert!(
        message.contains(&file.display().to_string()) && message.contains("modle") && message.contains("line 3"),
        "{message}"
    );

    write(home.path(), "skillhost.toml", "[providers]\nkind = \"openai\"\n");
    let message = resolve(home.path(), &env(&[])).unwrap_err().to_string();
    assert!(message.contains("providers"), "{message}");

    write(home.path(), "skillhost.toml", "[provider]\nkind = \"gemini\"\n");
    let message = resolve(home.path(), &env(&[])).unwrap_err().to_string();
    assert!(message.contains("gemini"), "{message}");

    write(home.path(), "skillhost.toml", "[provider]\nmodel = \"m\"\n");
    let message = resolve(home.path(), &env(&[])).unwrap_err().to_string();
    assert!(message.contains("has no `kind`"), "{message}");

    write(home.path(), "skillhost.toml", "[provider]\nkind = \"openai\"\ntimeout_secs = 0\n");
    assert!(resolve(home.path(), &env(&[])).unwrap_err().to_string().contains("`timeout_secs`"));
}

#[test]
fn anthropic_without_a_key_is_a_config_error() {
    let mut config = ProviderConfig::anthropic("https://api.anthropic.com", "claude", "x");
    config.api_key = None;
    let message = open(&config).err().expect("no key must fail").to_string();
    assert!(message.contains("needs an API key: set ANTHROPIC_API_KEY"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Transport: the shared pooled client (proxy, redirects)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_through_the_proxy_unless_no_proxy_names_the_host() {
    let origin = MockServer::start(vec![
        Reply::ok(llm_mock::openai_text("via the proxy")),
        Reply::ok(llm_mock::openai_text("direct")),
    ])
    .await;
    let proxy = llm_mock::ForwardProxy::start().await;
    let mut config = openai_config(&origin);
    // The proxy settings as `resolve` reads them from the environment.
    let home = tempfile::tempdir().unwrap();
    let proxied =
        resolve(home.path(), &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"), ("HTTP_PROXY", &proxy.base)]))
            .unwrap()
            .unwrap();
    assert_eq!(proxied.proxy, ProxySettings { http: Some(proxy.base.clone()), https: None, no_proxy: None });
    config.proxy = proxied.proxy.clone();

    let reply = open(&config).unwrap().chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("via the proxy"));
    let url = format!("{}/v1/chat/completions", origin.base);
    assert_eq!(proxy.targets(), [url], "the proxy saw the absolute URL");
    assert_eq!(origin.requests()[0].target, "/v1/chat/completions", "the proxy forwarded it");
    assert_eq!(origin.requests()[0].header("authorization"), Some("Bearer sk-test"));

    let direct = resolve(
        home.path(),
        &env(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
            ("HTTP_PROXY", &proxy.base),
            ("no_proxy", "localhost,127.0.0.1"),
        ]),
    )
    .unwrap()
    .unwrap();
    config.proxy = direct.proxy;
    let reply = open(&config).unwrap().chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("direct"));
    assert_eq!(proxy.targets().len(), 1, "NO_PROXY bypassed the proxy");
    assert_eq!(origin.requests().len(), 2);
}

#[tokio::test]
async fn a_proxy_that_is_down_is_unreachable_in_one_sentence() {
    let origin = MockServer::start(vec![Reply::ok(llm_mock::openai_text("never"))]).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = openai_config(&origin);
    config.proxy = ProxySettings { http: Some(format!("http://127.0.0.1:{port}")), ..Default::default() };
    let error = chat_error(open(&config).unwrap().as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::Unreachable { .. }), "{error:?}");
    assert_one_sentence(&error.to_string());
    assert!(origin.requests().is_empty());
}

#[tokio::test]
async fn provider_redirects_stay_on_its_origin() {
    let elsewhere = MockServer::start(vec![Reply::ok(llm_mock::openai_text("{}"))]).await;
    let server = MockServer::start(vec![
        Reply::json(307, json!({})).with_header("location", "/v2/chat/completions"),
        Reply::ok(llm_mock::openai_text("moved")),
        Reply::json(307, json!({})).with_header("location", &format!("{}/steal", elsewhere.base)),
    ])
    .await;
    let provider = open(&openai_config(&server)).unwrap();
    // Within the origin: followed, the body sent again.
    let reply = provider.chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("moved"));
    let requests = server.requests();
    assert_eq!((requests[1].path.as_str(), &requests[1].body["model"]), ("/v2/chat/completions", &json!("test-model")));

    // To another origin: refused, so the key never reaches it.
    let error = chat_error(provider.as_ref(), &decide_json()).await;
    let message = error.to_string();
    assert_one_sentence(&message);
    assert!(message.contains("redirects to another origin") && message.contains("/steal"), "{message}");
    assert!(elsewhere.requests().is_empty());
}

#[test]
fn an_unknown_table_is_named_with_the_known_ones() {
    let home = tempfile::tempdir().unwrap();
    let file = write(home.path(), "skillhost.toml", "[provider]\nkind = \"openai\"\n\n[mpc]\nport = 1\n");
    let error = resolve(home.path(), &env(&[])).unwrap_err();
    assert!(matches!(error, ProviderError::Config(_)), "{error:?}");
    let message = error.to_string();
    assert_one_sentence(&message);
    assert_eq!(
        message,
        format!(
            "{} has an unknown table `mpc` (line 4); the known tables are: [provider], [memory], [store]",
            file.display()
        )
    );
}

/// What a streaming provider showed, one string per event.
type Shown = Arc<Mutex<Vec<String>>>;

/// A provider for `config` that streams, with the pieces it showed and its retry notices.
fn streaming(config: &ProviderConfig) -> (Arc<dyn Provider>, Shown, Arc<Mutex<Vec<RetryNotice>>>) {
    let shown: Shown = Arc::default();
    let notices: Arc<Mutex<Vec<RetryNotice>>> = Arc::default();
    let (show, notice) = (shown.clone(), notices.clone());
    let on_stream: StreamObserver = Arc::new(move |event: StreamEvent<'_>| {
        show.lock().unwrap().push(match event {
            StreamEvent::Text(t) => format!("text:{t}"),
            StreamEvent::ToolCall { name } => format!("call:{name}"),
            StreamEvent::ToolArguments(a) => format!("args:{a}"),
            StreamEvent::End => "end".to_string(),
        })
    });
    let on_retry: RetryObserver = Arc::new(move |n: &RetryNotice| notice.lock().unwrap().push(n.clone()));
    (open_streaming(config, Some(on_retry), Some(on_stream)).unwrap(), shown, notices)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn openai_streamed_replies_equal_unstreamed_ones_and_every_piece_is_shown() {
    let arguments = r#"{"path":"/workspace/uart.log","max_lines":5}"#;
    let pieces = [r#"{"path":"/work"#, r#"space/uart.log","#, r#""max_lines":5}"#];
    let server = MockServer::start(vec![
        Reply::ok(llm_mock::openai_tool_call("call_7", "read-log-file", arguments)),
        Reply::Stream(llm_mock::openai_stream_tool_call("call_7", "read-log-file", &pieces)),
        Reply::ok(llm_mock::openai_text("The baud rate is wrong [L12].")),
        Reply::Stream(llm_mock::openai_stream_text(&["The baud ", "rate is wrong", " [L12]."])),
    ])
    .await;
    let config = openai_config(&server);
    let plain = open(&config).unwrap();
    let (streamed, shown, notices) = streaming(&config);
    let whole = plain.chat(&decide_tools()).await.unwrap();
    let arrived = streamed.chat(&decide_tools()).await.unwrap();
    assert_eq!(arrived, whole, "tool call, usage and model as unstreamed");
    assert_eq!(arrived.usage, Some(Usage { prompt_tokens: 20, completion_tokens: 8 }));
    assert_eq!(arrived.tool_calls[0].arguments, arguments);
    let whole = plain.chat(&decide_json()).await.unwrap();
    let arrived = streamed.chat(&decide_json()).await.unwrap();
    assert_eq!(arrived, whole);
    let mut expected = vec!["call:read-log-file".to_string()];
    expected.extend(pieces.iter().map(|p| format!("args:{p}")));
    expected.push("end".into());
    expected.extend(["text:The baud ", "text:rate is wrong", "text: [L12].", "end"].map(String::from));
    assert_eq!(*shown.lock().unwrap(), expected);
    assert!(notices.lock().unwrap().is_empty());
    let requests = server.requests();
    assert!(requests[0].body.get("stream").is_none(), "unstreamed requests do not ask");
    assert_eq!(requests[1].body["stream"], true);
    assert_eq!(requests[1].body["stream_options"]["include_usage"], true);
    assert_eq!(requests[1].header("accept"), Some("text/event-stream"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn anthropic_streamed_replies_equal_unstreamed_ones() {
    let server = MockServer::start(vec![
        Reply::ok(llm_mock::anthropic_tool_use("toolu_3", "read-log-file", json!({"path": "a.log", "max_lines": 5}))),
        Reply::Stream(llm_mock::anthropic_stream_tool_use(
            "toolu_3",
            "read-log-file",
            &["I will ", "read the log."],
            &[r#"{"path": "a"#, r#".log", "max_"#, r#"lines": 5}"#],
        )),
    ])
    .await;
    let config = anthropic_config(&server);
    let whole = open(&config).unwrap().chat(&decide_tools()).await.unwrap();
    let (streamed, shown, _) = streaming(&config);
    let arrived = streamed.chat(&decide_tools()).await.unwrap();
    assert_eq!(arrived, whole);
    assert_eq!(arrived.usage, Some(Usage { prompt_tokens: 40, completion_tokens: 9 }), "output from message_delta");
    assert_eq!(arrived.text.as_deref(), Some("I will read the log."));
    let shown = shown.lock().unwrap().clone();
    assert_eq!(shown[..3], ["text:I will ", "text:read the log.", "call:read-log-file"].map(String::from));
    assert_eq!(shown.last().map(String::as_str), Some("end"));
    assert_eq!(server.requests()[1].body["stream"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_stream_is_retried_with_a_clear_notice_and_gives_the_same_reply() {
    use llm_mock::StreamPart;
    let good = llm_mock::openai_stream_text(&["all ", "fine"]);
    // Cut mid-way (the connection breaks), a chunk that is not JSON, a body that ends
    // before [DONE], an error event; then a whole stream.
    let mut cut = good[..2].to_vec();
    cut.push(StreamPart::Cut);
    let mut bad = good[..2].to_vec();
    bad.push(StreamPart::Bytes("data: {\"choices\": [{\"delta\": \n\n".into()));
    let short = good[..3].to_vec();
    let error = vec![llm_mock::sse(&json!({"error": {"message": "Overloaded", "type": "overloaded_error"}}))];
    let server = MockServer::start(vec![
        Reply::Stream(cut),
        Reply::Stream(bad),
        Reply::Stream(short),
        Reply::Stream(error),
        Reply::Stream(good.clone()),
    ])
    .await;
    let mut config = openai_config(&server);
    config.max_retries = 4;
    let (provider, shown, notices) = streaming(&config);
    let reply = provider.chat(&decide_json()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("all fine"), "the reply of the whole stream only");
    assert_eq!(reply.usage, Some(Usage { prompt_tokens: 12, completion_tokens: 5 }));
    let notices = notices.lock().unwrap().clone();
    let reasons: Vec<RetryReason> = notices.iter().map(|n| n.reason).collect();
    assert_eq!(
        reasons,
        [StreamFault::Cut, StreamFault::BadChunk, StreamFault::Cut, StreamFault::ServiceError]
            .map(|fault| RetryReason::BrokenStream { fault })
    );
    assert!(
        notices[0].to_string().contains("was cut off before its end on attempt 1 of 5; retrying in"),
        "{}",
        notices[0]
    );
    assert!(notices[1].to_string().contains("sent a chunk that is not valid JSON"), "{}", notices[1]);
    assert_eq!(shown.lock().unwrap().iter().filter(|s| *s == "end").count(), 1, "only the whole stream ends");

    // Broken on every attempt: one sentence that says how to turn streaming off.
    let server = MockServer::start(vec![Reply::Stream(good[..2].to_vec()), Reply::Stream(good[..1].to_vec())]).await;
    let mut config = openai_config(&server);
    config.max_retries = 1;
    let (provider, _, _) = streaming(&config);
    let error = chat_error(provider.as_ref(), &decide_json()).await;
    assert!(matches!(error, ProviderError::BrokenStream { attempts: 2, .. }), "{error:?}");
    let said = error.to_string();
    assert!(said.contains("ended before `data: [DONE]`") && said.contains("stream = false"), "{said}");

    // A server that ignores `stream` and answers JSON is read as usual.
    let server = MockServer::start(vec![Reply::ok(llm_mock::openai_text("plain"))]).await;
    let (provider, _, _) = streaming(&openai_config(&server));
    assert_eq!(provider.chat(&decide_json()).await.unwrap().text.as_deref(), Some("plain"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_streams_on_one_provider_stay_apart() {
    let replies = (0..6).map(|_| Reply::Stream(llm_mock::openai_stream_text(&["reply ", "number"]))).collect();
    let server = MockServer::start(replies).await;
    let (provider, shown, _) = streaming(&openai_config(&server));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move { provider.chat(&decide_json()).await.unwrap() })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().text.as_deref(), Some("reply number"));
    }
    assert_eq!(shown.lock().unwrap().iter().filter(|s| *s == "end").count(), 6);
}
