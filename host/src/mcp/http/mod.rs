//! Streamable HTTP at `/mcp` (rmcp's tower service under axum), and the operations
//! endpoints of [`super::ops`]: `/healthz`, `/readyz` (open) and `/metrics` (guarded).
//!
//! Connections are accepted by [`super::connections`] (a header read timeout, caps in total
//! and per peer). In front of the MCP service, in this order: a bearer token when one is configured (always
//! for a non-loopback bind, see [`HttpOptions::check`]); a request-size limit; a bound on
//! requests in flight. Each refusal is a JSON-RPC error body with a sentence saying what to
//! do. `Host` (DNS rebinding) and browser `Origin` checks are rmcp's, configured here. A
//! plain `tools/call`, stateless or in a 2025-11-25 session, is then answered by `direct`
//! without rmcp's per-request service or the session's worker (`sessions` knows the sessions
//! rmcp opened); everything else is rmcp's.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Result, bail};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::connections::ConnectionLimits;
use super::ops::{self, Ops};
use super::{McpServer, Transport};

mod direct;
mod sessions;

pub(crate) use sessions::Sessions;

/// How the HTTP endpoint is guarded.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Required `Authorization: Bearer` token; mandatory for a non-loopback bind.
    pub token: Option<String>,
    /// Extra `Host` names accepted besides loopback (for a non-loopback bind).
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`http://localhost:*` style); none means only loopback pages.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub max_in_flight: usize,
    /// Open connections: in total, per peer address, and how long one may take to send a
    /// request head (see [`super::connections`]).
    pub connections: ConnectionLimits,
    /// No MCP sessions for 2025-11-25 clients either (rmcp's `legacy_session_mode = false`):
    /// every request is answered on its own, so any replica behind a plain round-robin
    /// balancer can take it. Costs: no `Mcp-Session-Id`, no GET stream (405), so no
    /// list-changed notifications to those clients, and a `notifications/cancelled` cannot
    /// reach its request (closing the connection still cancels it).
    pub stateless: bool,
    /// How long a 2025-11-25 session may go without a request before it is ended (its
    /// client then gets 404 and starts a new one): at least this, at most a fifth more.
    pub session_idle: std::time::Duration,
    /// How long a drain waits for the requests in flight (see [`super::ops`]).
    pub drain_wait: std::time::Duration,
    /// How long a drain keeps accepting connections (answering 503) before it closes the
    /// listening socket: for balancers that learn of the drain from `/readyz` and cannot
    /// retry a refused connection elsewhere. Zero: closed at once.
    pub drain_grace: std::time::Duration,
}

impl HttpOptions {
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            token: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 1 << 20,
            max_in_flight: 256,
            connections: ConnectionLimits {
                max_total: 512,
                max_per_peer: 128,
                header_timeout: std::time::Duration::from_secs(10),
            },
            stateless: false,
            session_idle: DEFAULT_SESSION_IDLE,
            drain_wait: std::time::Duration::from_secs(30),
            drain_grace: std::time::Duration::ZERO,
        }
    }

    /// Refuse setups that would expose the skills unauthenticated.
    pub fn check(&self) -> Result<()> {
        if !self.addr.ip().is_loopback() && self.token.is_none() {
            bail!(
                "refusing to serve MCP on {} without a token: a non-loopback address needs --token-file FILE or SKILLHOST_MCP_TOKEN (or bind 127.0.0.1)",
                self.addr
            );
        }
        if self.token.as_deref().is_some_and(|t| t.len() < 16) {
            bail!("the MCP token is too short: use at least 16 characters (e.g. `openssl rand -hex 32`)");
        }
        Ok(())
    }
}

/// rmcp's own default: a session unheard of for five minutes is ended.
pub const DEFAULT_SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(300);

fn rpc_error(status: StatusCode, code: i64, message: String) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message } });
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"skillhost\""));
        // A client without the token keeps no connection open here.
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// Equal-length, data-independent comparison: the token check leaks no prefix timing.
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

struct Guard {
    token: Option<String>,
    max_body_bytes: usize,
    in_flight: Semaphore,
    max_in_flight: usize,
}

async fn guard(State(g): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Some(token) = &g.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match given {
            Some(t) if same_token(t.as_bytes(), token.as_bytes()) => {}
            Some(_) => {
                return rpc_error(StatusCode::UNAUTHORIZED, -32001, "invalid bearer token".into());
            }
            None => {
                return rpc_error(
                    StatusCode::UNAUTHORIZED,
                    -32001,
                    "this server requires `Authorization: Bearer <token>` (the token of --token-file / SKILLHOST_MCP_TOKEN)"
                        .into(),
                );
            }
        }
    }
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > g.max_body_bytes as u64) {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            format!(
                "request body of {} bytes is over the limit of {} bytes; send less at once",
                declared.unwrap_or(0),
                g.max_body_bytes
            ),
        );
    }
    let Ok(_permit) = g.in_flight.try_acquire() else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            -32000,
            format!("server busy: {} requests in flight (the limit); retry shortly", g.max_in_flight),
        );
    };
    next.run(request).await
}

/// What [`cancel_on_disconnect`] needs: the sessions to send the cancellation into.
struct SessionCalls {
    sessions: Arc<LocalSessionManager>,
    max_body_bytes: usize,
}

/// A 2025-11-25 session request whose answer streams on its own POST: rmcp runs it in the
/// session and does not stop it when that connection goes away (it does for stateless
/// requests). This server keeps no event store, so an answer whose connection is gone can
/// never be resumed: the drop is taken as the client's `notifications/cancelled`, which
/// stops the guest and audits the call as cancelled. Only requests with `Mcp-Session-Id`
/// pass through here; stateless ones go straight on.
async fn cancel_on_disconnect(State(state): State<Arc<SessionCalls>>, request: Request, next: Next) -> Response {
    let session = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(String::from);
    let Some(session) = session.filter(|_| request.method() == axum::http::Method::POST) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, state.max_body_bytes).await else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            format!("request body over the limit of {} bytes (or cut off); send less at once", state.max_body_bytes),
        );
    };
    // Only a request (a method and an id) has an answer to wait for.
    let id = request_id(&bytes);
    let response = next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await;
    let Some(id) = id else { return response };
    let cancel = DisconnectCancel { sessions: state.sessions.clone(), session, id };
    response.map(|body| axum::body::Body::new(CancelOnDrop { body, cancel: Some(cancel) }))
}

/// The id of a JSON-RPC request (a string `method` and a string or number `id`), `None` for
/// a notification, a response, a batch or anything else. Only the two fields are built (the
/// parameters are skipped, not turned into values); a body the two-field read refuses (a
/// duplicate key, say) is read whole as before, where the last duplicate wins.
fn request_id(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(serde::Deserialize)]
    struct Head {
        method: Option<serde_json::Value>,
        id: Option<serde_json::Value>,
    }
    // An object only: serde would also fill the struct from an array's first two items.
    let object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let (method, id) = match serde_json::from_slice::<Head>(body).ok().filter(|_| object) {
        Some(head) => (head.method, head.id),
        None => {
            let mut m = serde_json::from_slice::<serde_json::Value>(body).ok()?;
            let method = m.get("method").cloned();
            (method, m.get_mut("id").map(serde_json::Value::take))
        }
    };
    method.filter(serde_json::Value::is_string)?;
    id.filter(|id| id.is_string() || id.is_number())
}

/// The request to cancel if its answer's body is dropped before it ended.
struct DisconnectCancel {
    sessions: Arc<LocalSessionManager>,
    session: String,
    id: serde_json::Value,
}

impl DisconnectCancel {
    fn send(self) {
        use rmcp::transport::streamable_http_server::SessionManager as _;
        let note = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": { "requestId": self.id, "reason": "the HTTP client closed the connection before the answer" }
        });
        let Ok(message) = serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(note) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            // The session may be gone already (closed or expired): then so is the call.
            let _ = self.sessions.accept_message(&self.session.as_str().into(), message).await;
        });
    }
}

/// A response body that sends its [`DisconnectCancel`] when dropped before its end.
struct CancelOnDrop {
    body: axum::body::Body,
    cancel: Option<DisconnectCancel>,
}

impl http_body::Body for CancelOnDrop {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) {
            self.cancel = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.send();
        }
    }
}

/// The axum app: `/mcp` and `/metrics` guarded, `/healthz` and `/readyz` open, `/mcp`
/// behind the drain gate. `sessions_end` ends every MCP session and stream.
pub fn router(
    server: Arc<McpServer>,
    options: &HttpOptions,
    sessions_end: CancellationToken,
    ops: Arc<Ops>,
) -> axum::Router {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()];
    if !options.addr.ip().is_unspecified() {
        hosts.push(options.addr.ip().to_string());
    }
    hosts.extend(options.allowed_hosts.iter().cloned());
    let mut origins: Vec<String> =
        vec!["http://localhost:*".into(), "http://127.0.0.1:*".into(), "http://[::1]:*".into()];
    origins.extend(options.allowed_origins.iter().cloned());
    let sessions = {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(Sessions::rmcp_idle(options.session_idle));
        Arc::new(manager)
    };
    // The sessions the direct path answers for (none without sessions).
    let direct_sessions = (!options.stateless).then(|| Sessions::start(sessions.clone(), options.session_idle));
    let direct = Arc::new(direct::Direct::new(
        server.clone(),
        &hosts,
        options.max_body_bytes,
        sessions_end.clone(),
        options.stateless,
        direct_sessions.clone(),
    ));
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_body_bytes)
        // A plain JSON answer for a request that sends nothing before its response (most
        // calls); rmcp switches to an SSE stream when progress or other messages come first.
        .with_json_response(true)
        .with_legacy_session_mode(!options.stateless)
        .with_cancellation_token(sessions_end);
    let factory = {
        let server = server.clone();
        let direct_sessions = direct_sessions.as_ref().map(Arc::downgrade);
        move || -> Result<super::SkillhostMcp, std::io::Error> {
            let handler = server.connection(Transport::Http);
            Ok(match &direct_sessions {
                Some(sessions) => handler.in_http_sessions(sessions.clone()),
                None => handler,
            })
        }
    };
    let mcp: StreamableHttpService<_, LocalSessionManager> =
        StreamableHttpService::new(factory, sessions.clone(), config);
    let session_calls = Arc::new(SessionCalls { sessions, max_body_bytes: options.max_body_bytes });
    let guard_state = Arc::new(Guard {
        token: options.token.clone(),
        max_body_bytes: options.max_body_bytes,
        in_flight: Semaphore::new(options.max_in_flight.max(1)),
        max_in_flight: options.max_in_flight,
    });
    // The drain gate runs first (outermost), then the guard: nothing is read for a request
    // either refuses. Then a plain call, stateless or in a session, is answered directly
    // ([`direct`]); the rest goes on to rmcp.
    let mcp = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(session_calls, cancel_on_disconnect))
        .layer(middleware::from_fn_with_state(direct, direct::answer))
        .layer(middleware::from_fn_with_state(guard_state.clone(), guard))
        .layer(middleware::from_fn_with_state(ops.clone(), ops::gate));
    let metrics = axum::Router::new()
        .route("/metrics", axum::routing::get(ops::metrics))
        .with_state(ops.clone())
        .layer(middleware::from_fn_with_state(guard_state, guard));
    axum::Router::new()
        .route("/healthz", axum::routing::get(ops::healthz))
        .route("/readyz", axum::routing::get(ops::readyz))
        .with_state(ops)
        .merge(mcp)
        .merge(metrics)
        .fallback(|| async {
            rpc_error(
                StatusCode::NOT_FOUND,
                -32601,
                "no such endpoint: MCP is served at /mcp (and /healthz, /readyz, /metrics)".into(),
            )
        })
}

/// Bind and serve until the drain `ops` starts has ended (see [`super::ops`]): stop
/// accepting (after `drain_grace`), wait for the requests in flight (at most
/// `drain_wait`, the grace running alongside), end the sessions,
/// wait for the audit lines of calls cancelled then, sync the audit log. Prints the address
/// it listens on (stderr) once bound, so a caller that asked for port 0 learns the port.
pub async fn serve(server: Arc<McpServer>, options: HttpOptions, ops: Arc<Ops>) -> Result<()> {
    options.check()?;
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.addr))?;
    let local = listener.local_addr()?;
    eprintln!("skillhost mcp: listening on http://{local}/mcp");
    let sessions_end = CancellationToken::new();
    let app = router(server.clone(), &options, sessions_end.clone(), ops.clone());
    let stop_accepting = CancellationToken::new();
    let connections =
        tokio::spawn(super::connections::serve(listener, app, options.connections, stop_accepting.clone()));
    ops.drain_started().cancelled().await;
    let grace = async {
        ops.hurried(options.drain_grace).await;
        stop_accepting.cancel();
    };
    let ((), (requests, calls)) = tokio::join!(grace, ops.wait_idle(options.drain_wait));
    if requests + calls > 0 {
        tracing::warn!(
            requests,
            calls,
            "drain: still running after {} s (--drain-secs) or a second signal; cancelling them",
            options.drain_wait.as_secs()
        );
    }
    sessions_end.cancel();
    server.drain_calls().await;
    // The connections flush what they were sending and close; SSE streams ended above.
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, connections).await;
    tracing::info!("drained");
    server.finish()
}

/// How long, once the sessions are ended, the connections get to flush and close.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::request_id;
    use serde_json::json;

    #[test]
    fn only_a_request_has_an_id_to_cancel() {
        let id = |body: &str| request_id(body.as_bytes());
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"id":1}}}"#;
        assert_eq!(id(call), Some(json!(7)));
        assert_eq!(id(r#" {"method":"ping","id":"a"}"#), Some(json!("a")));
        // A notification, a response, an id of the wrong type, a method that is not a string.
        assert_eq!(id(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), None);
        assert_eq!(id(r#"{"method":"ping","id":null}"#), None);
        assert_eq!(id(r#"{"method":"ping","id":[1]}"#), None);
        assert_eq!(id(r#"{"method":5,"id":1}"#), None);
        // Not an object: a batch, or an array that would fill the two fields by position.
        assert_eq!(id(r#"["ping", 5]"#), None);
        assert_eq!(id(r#"[{"method":"ping","id":1}]"#), None);
        assert_eq!(id("not json"), None);
        // A duplicate key is read as a whole value reads it: the last one wins.
        assert_eq!(id(r#"{"method":"ping","id":1,"id":2}"#), Some(json!(2)));
    }
}
