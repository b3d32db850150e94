//! A mock LLM service on 127.0.0.1 for provider and agent tests: answers from a queue of
//! canned replies and records every request (path, headers, JSON body, arrival time) so tests
//! can assert what was sent and when.
//!
//! Include with `#[path = "common/llm_mock.rs"] mod llm_mock;` (it does not need the skill
//! fixtures of `common/mod.rs`).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use wasmtime_wasi_http::io::TokioIo;

/// What the mock answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Never answers (for timeouts).
    Hang,
    /// Closes the connection without answering (a dropped connection).
    Drop,
    /// A 200 `text/event-stream` body sent part by part (chunked, as servers stream).
    Stream(Vec<StreamPart>),
}

/// One part of a streamed reply.
#[derive(Debug, Clone)]
pub enum StreamPart {
    /// Bytes sent as they are (an event is `data: ...\n\n`).
    Bytes(String),
    /// Send nothing more until the test opens this gate (`notify_one`).
    Wait(Arc<tokio::sync::Notify>),
    /// Break the connection here: the chunked body never ends.
    Cut,
}

/// `data: JSON` and a blank line.
pub fn sse(data: &Value) -> StreamPart {
    StreamPart::Bytes(format!("data: {data}\n\n"))
}

/// `event: NAME`, `data: JSON` and a blank line (Anthropic names every event).
pub fn sse_event(data: &Value) -> StreamPart {
    StreamPart::Bytes(format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap_or("message")))
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> StreamPart {
    sse(&json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "model": "mock-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

/// The stream of [`openai_text`] with its content in `pieces`: role, pieces, finish, the
/// usage-only chunk (`stream_options.include_usage`), `[DONE]`.
pub fn openai_stream_text(pieces: &[&str]) -> Vec<StreamPart> {
    let mut parts = vec![openai_chunk(json!({"role": "assistant", "content": ""}), None)];
    parts.extend(pieces.iter().map(|p| openai_chunk(json!({"content": p}), None)));
    parts.push(openai_chunk(json!({}), Some("stop")));
    parts.push(sse(&json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "model": "mock-model", "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    })));
    parts.push(StreamPart::Bytes("data: [DONE]\n\n".into()));
    parts
}

/// The stream of [`openai_tool_call`] with its arguments in `pieces`.
pub fn openai_stream_tool_call(id: &str, name: &str, pieces: &[&str]) -> Vec<StreamPart> {
    let mut parts = vec![openai_chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
        ]}),
        None,
    )];
    parts.extend(
        pieces.iter().map(|p| openai_chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}), None)),
    );
    parts.push(openai_chunk(json!({}), Some("tool_calls")));
    parts.push(sse(&json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "model": "mock-model", "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
    })));
    parts.push(StreamPart::Bytes("data: [DONE]\n\n".into()));
    parts
}

/// The stream of [`anthropic_tool_use`]: its text in `text`, its input JSON in `input`.
pub fn anthropic_stream_tool_use(id: &str, name: &str, text: &[&str], input: &[&str]) -> Vec<StreamPart> {
    let mut parts = vec![
        sse_event(&json!({"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-mock", "content": [],
            "stop_reason": null, "usage": {"input_tokens": 40, "output_tokens": 1},
        }})),
        sse_event(&json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        sse_event(&json!({"type": "ping"})),
    ];
    parts.extend(text.iter().map(|t| {
        sse_event(&json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}))
    }));
    parts.push(sse_event(&json!({"type": "content_block_stop", "index": 0})));
    parts.push(sse_event(&json!({"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": id, "name": name, "input": {},
    }})));
    parts.extend(input.iter().map(|p| {
        sse_event(
            &json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": p}}),
        )
    }));
    parts.push(sse_event(&json!({"type": "content_block_stop", "index": 1})));
    parts
        .push(sse_event(&json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
        "usage": {"output_tokens": 9}})));
    parts.push(sse_event(&json!({"type": "message_stop"})));
    parts
}

/// A response body fed from a channel, so parts can wait and the connection can break.
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx)
    }
}

type MockBody = BoxBody<Bytes, std::io::Error>;

fn whole(bytes: Bytes) -> MockBody {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Respond {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }

    pub fn ok(body: Value) -> Reply {
        Reply::json(200, body)
    }

    /// An error status with the usual `{"error": {"message": ...}}` body.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::json(status, json!({ "error": { "message": message, "type": "mock_error" } }))
    }

    pub fn raw(status: u16, body: &str) -> Reply {
        Reply::Respond { status, headers: vec![("content-type".into(), "text/html".into())], body: body.to_string() }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Respond { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// The request target as sent: a path, or an absolute URL when sent to a proxy.
    pub target: String,
    pub headers: http::HeaderMap,
    /// The body as JSON, or as a JSON string when it was not JSON.
    pub body: Value,
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct State {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A running mock; stops when dropped.
pub struct MockServer {
    /// `http://127.0.0.1:<port>`
    pub base: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl MockServer {
    /// Listens on 127.0.0.1 (an OS-chosen port) and answers with `replies` in order; once they
    /// run out, every request gets a 500 saying so.
    pub async fn start(replies: Vec<Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = Arc::new(State { replies: Mutex::new(replies.into()), requests: Mutex::default() });
        let accept_state = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| answer(state.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        MockServer { base, state, task }
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(state: Arc<State>, request: Request<Incoming>) -> Result<Response<MockBody>, std::io::Error> {
    let at = Instant::now();
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let text = String::from_utf8_lossy(&body).to_string();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    state.requests.lock().unwrap().push(Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        target: parts.uri.to_string(),
        headers: parts.headers,
        body,
        at,
    });
    let reply = state.replies.lock().unwrap().pop_front();
    match reply.unwrap_or_else(|| Reply::error(500, "mock server has no more replies")) {
        Reply::Respond { status, headers, body } => {
            let mut response = Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            Ok(response.body(whole(Bytes::from(body))).expect("valid mock response"))
        }
        Reply::Stream(parts) => {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tokio::spawn(async move {
                for part in parts {
                    match part {
                        StreamPart::Bytes(text) => {
                            if tx.send(Ok(Frame::data(Bytes::from(text)))).await.is_err() {
                                return;
                            }
                            // Apart, so the client reads them as separate chunks.
                            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                        }
                        StreamPart::Wait(gate) => gate.notified().await,
                        StreamPart::Cut => {
                            let _ = tx.send(Err(std::io::Error::other("mock cuts the stream"))).await;
                            return;
                        }
                    }
                }
            });
            Ok(Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(ChannelBody(rx).boxed())
                .expect("valid mock response"))
        }
        Reply::Hang => {
            let never = std::future::pending::<Infallible>().await;
            match never {}
        }
        // An error from the service makes hyper close the connection without a response.
        Reply::Drop => Err(std::io::Error::other("mock drops the connection")),
    }
}

/// An OpenAI chat completion whose message content is `text`.
pub fn openai_text(text: &str) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": "mock-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    })
}

/// An OpenAI chat completion with one tool call; `arguments` is the raw JSON text.
pub fn openai_tool_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": "mock-model",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}],
            },
            "finish_reason": "tool_calls",
        }],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
    })
}

pub fn openai_embedding(vector: &[f32]) -> Value {
    json!({"object": "list", "model": "mock-embed", "data": [{"object": "embedding", "index": 0, "embedding": vector}]})
}

/// An Anthropic Messages reply with one text block.
pub fn anthropic_text(text: &str) -> Value {
    json!({
        "id": "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": "claude-mock",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 30, "output_tokens": 6},
    })
}

/// An Anthropic Messages reply with a text block and one `tool_use` block.
pub fn anthropic_tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({
        "id": "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": "claude-mock",
        "content": [
            {"type": "text", "text": "I will read the log."},
            {"type": "tool_use", "id": id, "name": name, "input": input},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 40, "output_tokens": 9},
    })
}

/// A forwarding HTTP proxy on 127.0.0.1 (plain http only, as a client sends to an `HTTP_PROXY`:
/// the request target is the absolute URL). Records every request target, forwards the request
/// to its origin, and relays the answer. Only loopback origins are forwarded.
pub struct ForwardProxy {
    /// `http://127.0.0.1:<port>`
    pub base: String,
    targets: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ForwardProxy {
    pub async fn start() -> ForwardProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let targets = Arc::new(Mutex::new(Vec::new()));
        let seen = targets.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| forward(seen.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ForwardProxy { base, targets, task }
    }

    /// The request targets received, in order.
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    seen: Arc<Mutex<Vec<String>>>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let (mut parts, body) = request.into_parts();
    seen.lock().unwrap().push(parts.uri.to_string());
    let refuse = |status: u16, why: &str| {
        Ok(Response::builder().status(status).body(Full::new(Bytes::from(why.to_string()))).expect("valid response"))
    };
    let (Some(host), Some(port)) = (parts.uri.host().map(str::to_string), parts.uri.port_u16()) else {
        return refuse(400, "proxy: the target is not an absolute http URL with a port");
    };
    if host != "127.0.0.1" {
        return refuse(403, "proxy: only loopback origins");
    }
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let Ok(upstream) = tokio::net::TcpStream::connect((host.as_str(), port)).await else {
        return refuse(502, "proxy: the origin is not listening");
    };
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await.map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    // Origin-form towards the origin.
    parts.uri = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").parse().expect("a path is a URI");
    let answer =
        sender.send_request(Request::from_parts(parts, Full::new(body))).await.map_err(std::io::Error::other)?;
    let (parts, body) = answer.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Ok(Response::from_parts(parts, Full::new(body)))
}
