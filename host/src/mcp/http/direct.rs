//! A plain `tools/call`, stateless or in a 2025-11-25 session, answered on the connection's
//! own task, without rmcp's per-request service or its session's worker.
//!
//! Why: for each stateless request rmcp builds a handler of its own, starts a service loop for
//! it on a new task, runs the request on another, and passes the answer back over a channel to
//! the connection's task: two task spawns and two cross-task hand-offs (on two workers, a
//! futex wake each) around a guest call that itself takes ~15 µs. A session's request goes
//! through the session's worker and service loop to a handler task and back as an SSE stream.
//! Here the request is parsed once, run by the same [`SkillhostMcp::call`] rmcp's handler
//! runs, and answered with rmcp's own types after the same result handling rmcp applies
//! (2026-07-28: cache hints, the error code of a missing resource, the JSON-RPC error's HTTP
//! status; earlier revisions: the legacy-peer stripping, every answer 200), so the JSON-RPC
//! message is the one rmcp would send (tests/mcp.rs compares them).
//!
//! Only a request rmcp would certainly accept and route as this path assumes is taken: `POST`,
//! no `Origin` (browsers go through rmcp's origin check), a `Host` among the names the server
//! accepts without a port, `Content-Type: application/json`, an `Accept` naming both JSON and
//! event streams without parameters, a `Content-Length` body, each header once, no progress
//! token (progress needs rmcp's stream), and one of three revisions:
//! - 2026-07-28 ([`Revision::Inline`]): `MCP-Protocol-Version: 2026-07-28` and the same version
//!   in `_meta` with every key that revision requires, `Mcp-Method: tools/call` and `Mcp-Name`
//!   equal to the tool (plain, not Base64-wrapped);
//! - an earlier revision on a server started with `--stateless` ([`Revision::Legacy`]): the
//!   header names a known revision before 2026-07-28 and `_meta` names none; rmcp serves it
//!   statelessly as that revision, and answers it as it answers a 2025-11-25 session (the
//!   legacy-peer stripping, every answer 200);
//! - a 2025-11-25 session ([`Revision::Session`]): one `Mcp-Session-Id` naming a session rmcp
//!   has and [`super::Sessions`] knows (its client sent `notifications/initialized`), no
//!   revision or one before 2026-07-28 in the header, none in `_meta`, and `Mcp-Method` and
//!   `Mcp-Name`, if sent, naming `tools/call` and the tool. It runs on the session's own
//!   handler, so its audit session, client and capabilities are the session's. The answer is
//!   an SSE stream as rmcp's, the message one `data:` event, without rmcp's priming event
//!   (it only serves resuming a stream after a dropped connection, and this server cancels
//!   a call whose connection drops: `cancel_on_disconnect` in the parent module); a call
//!   still running after [`SSE_KEEP_ALIVE`] gets its headers then and a comment that often,
//!   as rmcp's keep-alive, so no read timeout cuts it off. The client's
//!   `notifications/cancelled` reaches rmcp's session as before, and rmcp hands it to the
//!   handler, which stops the call here; its stream then ends with no message, as rmcp's
//!   does. A session that ends (closed, expired) has its calls here cancelled
//!   ([`super::Sessions`]). A drain that ends a call in its first [`SSE_KEEP_ALIVE`] gets
//!   the stateless path's 500, where rmcp's stream would end empty.
//!
//! Anything else, or anything in doubt, goes on to rmcp unchanged, which answers or refuses it
//! as before. (`Mcp-Param-*` headers are checked by rmcp against `x-mcp-header` annotations in
//! the schema its handler's `get_tool` returns; `SkillhostMcp` has no `get_tool`, so rmcp
//! checks nothing there. Should a handler ever have one, its tools are left to rmcp here.)
//!
//! As under rmcp, a client that closes its connection before the answer cancels the call, and
//! so does the end of a drain; the call then still runs to its audit line, on a task of its own.
//! One deliberate difference besides: a call that panics is answered 500 at once, where under rmcp the
//! request would wait for the client to go away or the drain to end, then get the same 500.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{FutureExt as _, StreamExt as _};
use rmcp::ErrorData as McpError;
use rmcp::ServerHandler as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorCode, Implementation, JsonRpcMessage,
    ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::common::http_header::BASE64_HEADER_PREFIX;
use tokio_util::sync::CancellationToken;

use super::super::request::{ToolsCall, rmcp_tools_call, tools_call};
use super::super::{CallContext, Client, DirectCall, McpServer, SkillhostMcp, Transport, client_from, client_named};
use super::Sessions;

/// What the direct path needs: the server, the names `Host` may carry, and the drain's end.
pub(super) struct Direct {
    server: Arc<McpServer>,
    /// `Host` values (without a port) rmcp's own check accepts, normalized as it normalizes them.
    hosts: Vec<String>,
    max_body_bytes: usize,
    /// Ends every request still running (the drain's end), as rmcp's own cancellation token.
    sessions_end: CancellationToken,
    /// The handler accepts the 2026-07-28 revision (else rmcp refuses such requests).
    revision_supported: bool,
    /// No 2025-11-25 sessions (`--stateless`): rmcp serves requests of earlier revisions
    /// statelessly too.
    stateless: bool,
    /// The sessions this path answers for (none with `--stateless`).
    sessions: Option<Arc<Sessions>>,
}

/// How rmcp serves a stateless request, by the revision it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Revision {
    /// 2026-07-28: the request carries its revision, client and capabilities in `_meta`.
    Inline,
    /// A revision before 2026-07-28, named by the `MCP-Protocol-Version` header only, on a
    /// server without sessions.
    Legacy,
    /// A request in a 2025-11-25 session (`Mcp-Session-Id`), answered as rmcp answers one.
    Session,
}

impl Direct {
    pub(super) fn new(
        server: Arc<McpServer>,
        allowed_hosts: &[String],
        max_body_bytes: usize,
        sessions_end: CancellationToken,
        stateless: bool,
        sessions: Option<Arc<Sessions>>,
    ) -> Direct {
        let hosts = allowed_hosts
            .iter()
            .map(|h| h.trim())
            .filter(|h| !h.is_empty())
            // As rmcp reads an allowed name: an authority, else the raw text as a host. One
            // with a port is left to rmcp.
            .filter_map(|h| match axum::http::uri::Authority::try_from(h) {
                Ok(a) if a.port().is_none() => Some(normalize_host(a.host())),
                Ok(_) => None,
                Err(_) => Some(normalize_host(h)),
            })
            .collect();
        let revision_supported =
            server.connection(Transport::Http).supported_protocol_versions().contains(&ProtocolVersion::V_2026_07_28);
        Direct { server, hosts, max_body_bytes, sessions_end, revision_supported, stateless, sessions }
    }
}

/// rmcp's normalization of a host name: brackets off, lower case.
fn normalize_host(host: &str) -> String {
    host.trim_matches('[').trim_matches(']').to_ascii_lowercase()
}

/// The middleware: a plain stateless `tools/call` is answered here, anything else goes on.
pub(super) async fn answer(State(direct): State<Arc<Direct>>, request: Request, next: Next) -> Response {
    let revision = (request.method() == Method::POST).then(|| revision_of(&direct, request.headers())).flatten();
    let Some(revision) = revision else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes = match read_body(body, direct.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    let Some(call) = plain_call(&bytes, &parts.headers, revision) else {
        return next.run(Request::from_parts(parts, Body::from(bytes))).await;
    };
    let session = match (revision, &direct.sessions) {
        (Revision::Session, Some(sessions)) => match only(&parts.headers, "mcp-session-id") {
            Some(id) => sessions.find(id).await,
            None => None,
        },
        _ => None,
    };
    let (handler, client, tasks_declared) = match &session {
        // The session's handler, and the client as its request or else its `initialize` names
        // it, as rmcp's request context gives them.
        Some(session) => {
            let capabilities =
                call.capabilities.or_else(|| session.peer.peer_info().map(|info| info.capabilities.clone()));
            (
                session.handler.clone(),
                client_from(call.client, &session.peer),
                capabilities.is_some_and(|c| c.supports_tasks()),
            )
        }
        None if revision == Revision::Session => {
            return next.run(Request::from_parts(parts, Body::from(bytes))).await;
        }
        // A handler of its own per request, as rmcp makes one: its audit session is this
        // request's.
        None => (
            direct.server.connection(Transport::Http),
            client_named(call.client),
            call.capabilities.is_some_and(|c| c.supports_tasks()),
        ),
    };
    if handler.get_tool(&call.params.name).is_some() {
        return next.run(Request::from_parts(parts, Body::from(bytes))).await;
    }
    let cancel = CancellationToken::new();
    // In a session the client may cancel the call by its id (see the module doc).
    let entered = match &session {
        Some(session) => match handler.enter_direct_call(&call.id, &cancel) {
            // Entered, and its session still runs: if it ends from here on, the sweep (or the
            // next lookup) finds the call entered and cancels it. (Closed never reopens.)
            Some(entered) if !session.peer.is_transport_closed() => Some(entered),
            // A call with that id runs already, or the session has just ended: rmcp's to
            // answer, as it would any other.
            _ => return next.run(Request::from_parts(parts, Body::from(bytes))).await,
        },
        None => None,
    };
    tracing::debug!(id = %call.id, "tools/call answered by the HTTP transport");
    let PlainCall { id, params, revision, .. } = call;
    run(&direct, handler, Run { id, params, client, tasks_declared, revision, cancel, entered }).await
}

/// The body, read as rmcp reads it, with rmcp's answers when that fails.
async fn read_body(body: Body, max: usize) -> Result<Bytes, Response> {
    let mut data = body.into_data_stream();
    let mut collected = bytes::BytesMut::new();
    while let Some(chunk) = data.next().await {
        match chunk {
            Ok(chunk) if chunk.len() > max.saturating_sub(collected.len()) => {
                let refusal = format!("Payload Too Large: request body exceeds {max} bytes");
                return Err(plain_text(StatusCode::PAYLOAD_TOO_LARGE, refusal));
            }
            Ok(chunk) => collected.extend_from_slice(&chunk),
            Err(e) => {
                let refusal = format!("Failed to read request body: {e}");
                return Err(plain_text(StatusCode::INTERNAL_SERVER_ERROR, refusal));
            }
        }
    }
    Ok(collected.freeze())
}

/// A refusal as rmcp sends one: a status and a sentence, no content type.
fn plain_text(status: StatusCode, text: String) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

/// The revision of a request whose headers say rmcp would route it statelessly and accept
/// it; `None` leaves it to rmcp.
fn revision_of(direct: &Direct, headers: &HeaderMap) -> Option<Revision> {
    if headers.contains_key(ORIGIN) || headers.contains_key(TRANSFER_ENCODING) {
        return None;
    }
    let host_ok = only(headers, HOST.as_str())
        .and_then(|h| axum::http::uri::Authority::try_from(h).ok())
        .is_some_and(|a| direct.hosts.contains(&normalize_host(a.host())));
    let json_body = only(headers, CONTENT_TYPE.as_str()).is_some_and(|t| {
        let essence = t.split_once(';').map_or(t, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    });
    if !(host_ok && json_body && only(headers, CONTENT_LENGTH.as_str()).is_some() && accepts_json_and_events(headers)) {
        return None;
    }
    if headers.contains_key("mcp-session-id") {
        return session_request(direct, headers);
    }
    let version = only(headers, "mcp-protocol-version")?;
    if version == ProtocolVersion::V_2026_07_28.as_str() {
        let named = only(headers, "mcp-method") == Some("tools/call")
            && only(headers, "mcp-name").is_some_and(|n| !n.starts_with(BASE64_HEADER_PREFIX));
        return (direct.revision_supported && named).then_some(Revision::Inline);
    }
    // rmcp checks the standard headers (`Mcp-Method`, `Mcp-Name`) only from 2026-07-28 on.
    let earlier = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|known| known.as_str() == version && version < ProtocolVersion::STANDARD_HEADERS.as_str());
    (direct.stateless && earlier).then_some(Revision::Legacy)
}

/// [`Revision::Session`] if the headers of a request carrying `Mcp-Session-Id` are ones rmcp
/// routes to the session as this path assumes: a server with sessions, the id once, no
/// `MCP-Protocol-Version` or one known revision before 2026-07-28 (rmcp's default for none is
/// 2025-03-26), and `Mcp-Method`, if sent, `tools/call` (the tool's `Mcp-Name` is checked
/// against the body in [`plain_call`]).
fn session_request(direct: &Direct, headers: &HeaderMap) -> Option<Revision> {
    // No table of sessions: the server has none (`--stateless`).
    direct.sessions.as_ref()?;
    only(headers, "mcp-session-id")?;
    let version_ok = match headers.get_all("mcp-protocol-version").iter().count() {
        0 => true,
        1 => only(headers, "mcp-protocol-version").is_some_and(|version| {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|known| known.as_str() == version && version < ProtocolVersion::V_2026_07_28.as_str())
        }),
        _ => false,
    };
    let method_ok = match headers.get_all("mcp-method").iter().count() {
        0 => true,
        1 => only(headers, "mcp-method") == Some("tools/call"),
        _ => false,
    };
    (version_ok && method_ok).then_some(Revision::Session)
}

/// The one value of `name`, if it is there exactly once and is visible ASCII.
fn only<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then_some(())?;
    first.to_str().ok()
}

/// `Accept` names `application/json` and `text/event-stream`, none of its entries with a
/// parameter (a weight of zero would exclude one: rmcp reads those).
fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else { return false };
        for entry in value.split(',') {
            if entry.contains(';') || entry.contains('"') {
                return false;
            }
            let essence = entry.trim();
            json |= essence.eq_ignore_ascii_case("application/json");
            events |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && events
}

/// A `tools/call` taken here: what the call needs from the request.
struct PlainCall {
    id: RequestId,
    params: CallToolRequestParams,
    /// The client and its capabilities as the request's `_meta` names them, if it does.
    client: Option<Implementation>,
    capabilities: Option<ClientCapabilities>,
    revision: Revision,
}

/// The body as a call this path answers: a `tools/call` without a progress token; for
/// 2026-07-28, with every `_meta` key that revision requires and the headers' tool; before it,
/// with no revision in `_meta` (and in a session, the `Mcp-Name` sent, if any, the tool's).
fn plain_call(body: &[u8], headers: &HeaderMap, revision: Revision) -> Option<PlainCall> {
    // As rmcp's parse yields it: `_meta` beside the params, not in them.
    let ToolsCall { id, params, meta } = tools_call(body).or_else(|| rmcp_tools_call(body))?;
    let meta_ok = match revision {
        Revision::Inline => {
            meta.protocol_version() == Some(ProtocolVersion::V_2026_07_28)
                && meta.missing_required_keys(&ProtocolVersion::V_2026_07_28).is_empty()
        }
        Revision::Legacy | Revision::Session => meta.protocol_version().is_none(),
    };
    if !meta_ok || meta.get_progress_token().is_some() {
        return None;
    }
    let name_ok = match revision {
        Revision::Inline => only(headers, "mcp-name") == Some(&*params.name),
        Revision::Session => match headers.get_all("mcp-name").iter().count() {
            0 => true,
            1 => only(headers, "mcp-name") == Some(&*params.name),
            _ => false,
        },
        Revision::Legacy => true,
    };
    if !name_ok {
        return None;
    }
    Some(PlainCall { id, params, client: meta.client_info(), capabilities: meta.client_capabilities(), revision })
}

/// What a call ends with: its outcome, or `None` if it panicked.
type Calling = Pin<Box<dyn Future<Output = Option<Result<CallToolResponse, McpError>>> + Send>>;

/// A call in progress; if dropped before it ends (the client went away) it is cancelled and
/// finishes on a task of its own, so its audit line is still written.
struct Running {
    call: Option<Calling>,
    cancel: CancellationToken,
}

impl Future for Running {
    type Output = Option<Result<CallToolResponse, McpError>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else { return std::task::Poll::Ready(None) };
        let polled = call.as_mut().poll(cx);
        if polled.is_ready() {
            self.call = None;
        }
        polled
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.cancel.cancel();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(call);
            }
        }
    }
}

/// A call this path runs: the request's id and parameters, who asked, and what stops it.
struct Run {
    id: RequestId,
    params: CallToolRequestParams,
    client: Client,
    tasks_declared: bool,
    revision: Revision,
    cancel: CancellationToken,
    /// In a session: the call's entry where the client's `notifications/cancelled` finds it.
    entered: Option<DirectCall>,
}

async fn run(direct: &Direct, handler: SkillhostMcp, call: Run) -> Response {
    let Run { id, params, client, tasks_declared, revision, cancel, entered } = call;
    let calling = {
        let cancel = cancel.clone();
        async move { handler.call(params, CallContext { client, cancelled: &cancel, progress: None }).await }
    };
    // A panicking call has no answer: a 500 now (see the module doc).
    let calling: Calling = Box::pin(std::panic::AssertUnwindSafe(calling).catch_unwind().map(Result::ok));
    let mut running = Running { call: Some(calling), cancel: cancel.clone() };
    if revision == Revision::Session {
        return in_session(direct, running, id, tasks_declared, cancel, entered).await;
    }
    let outcome = tokio::select! {
        outcome = &mut running => outcome,
        // The drain's end: as under rmcp, the call is cancelled (and finishes on its own task).
        _ = direct.sessions_end.cancelled() => None,
    };
    let Some(outcome) = outcome else { return no_outcome() };
    let message = answer_of(outcome, id, tasks_declared, revision);
    let status = status_of(&message, revision);
    match serde_json::to_vec(&message) {
        Ok(body) => {
            (status, [(CONTENT_TYPE, HeaderValue::from_static("application/json"))], Bytes::from(body)).into_response()
        }
        Err(e) => {
            tracing::error!("Internal server error when serialize json response: {e}");
            let text = format!("Encounter an error when serialize json response: {e}");
            plain_text(StatusCode::INTERNAL_SERVER_ERROR, text)
        }
    }
}

/// rmcp's answer when its handler sent nothing: the call panicked, or the drain ended it.
fn no_outcome() -> Response {
    let error = "no response message received from handler";
    tracing::error!("Internal server error when empty response: {error}");
    let text = format!("Encounter an error when empty response: {error}");
    plain_text(StatusCode::INTERNAL_SERVER_ERROR, text)
}

/// How long a session call's answer may be silent, as rmcp's SSE keep-alive: a call that runs
/// longer gets its headers then and a comment this often until its message, so no client's or
/// proxy's read timeout cuts off a long call.
const SSE_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// A session call's answer, an SSE stream as rmcp's: the message as one `data:` event (no
/// priming event: that only serves resuming, which this server cannot do), or nothing if the
/// client cancelled the call (rmcp drops that answer).
async fn in_session(
    direct: &Direct,
    mut running: Running,
    id: RequestId,
    tasks_declared: bool,
    cancel: CancellationToken,
    entered: Option<DirectCall>,
) -> Response {
    let event = move |outcome: Result<CallToolResponse, McpError>| -> Bytes {
        // The client's `notifications/cancelled` stopped it (a client gone or the drain's end
        // leave no outcome).
        if cancel.is_cancelled() {
            return Bytes::new();
        }
        let message = answer_of(outcome, id, tasks_declared, Revision::Session);
        match serde_json::to_string(&message) {
            Ok(json) => Bytes::from(format!("data: {json}\n\n")),
            Err(e) => {
                tracing::error!("Internal server error when serialize json response: {e}");
                Bytes::new()
            }
        }
    };
    let quick = tokio::select! {
        outcome = &mut running => Some(outcome),
        () = tokio::time::sleep(SSE_KEEP_ALIVE) => None,
        () = direct.sessions_end.cancelled() => return no_outcome(),
    };
    let body = match quick {
        Some(Some(outcome)) => {
            drop(entered);
            Body::from(event(outcome))
        }
        Some(None) => return no_outcome(),
        // Slow: the headers and a comment now, one every SSE_KEEP_ALIVE, then the message. Dropping
        // the body (the client gone) drops the call, which cancels it.
        None => {
            let sessions_end = direct.sessions_end.clone();
            let state = (running, Some(event), sessions_end, entered);
            let now = futures::stream::once(std::future::ready(Ok(Bytes::from_static(b":\n\n"))));
            Body::from_stream(now.chain(futures::stream::unfold(
                state,
                |(mut running, event, sessions_end, entered)| async move {
                    let event = event?;
                    tokio::select! {
                        outcome = &mut running => {
                            let chunk = outcome.map(event).unwrap_or_default();
                            Some((Ok::<_, std::convert::Infallible>(chunk), (running, None, sessions_end, entered)))
                        }
                        () = tokio::time::sleep(SSE_KEEP_ALIVE) => {
                            Some((Ok(Bytes::from_static(b":\n\n")), (running, Some(event), sessions_end, entered)))
                        }
                        () = sessions_end.cancelled() => None,
                    }
                },
            )))
        }
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(axum::http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The JSON-RPC answer as rmcp's server handler makes it for a request of `revision`.
fn answer_of(
    outcome: Result<CallToolResponse, McpError>,
    id: RequestId,
    tasks_declared: bool,
    revision: Revision,
) -> ServerJsonRpcMessage {
    let outcome = outcome.and_then(|response| {
        // SEP-2663: no task handle for a client that did not declare the tasks extension.
        if matches!(response, CallToolResponse::Task(_)) && !tasks_declared {
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let mut result = ServerResult::from(response);
        match revision {
            Revision::Inline => result.fill_missing_cache_hints(),
            Revision::Legacy | Revision::Session => {
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
            }
        }
        Ok(result)
    });
    match outcome {
        Ok(result) => JsonRpcMessage::response(result, id),
        Err(mut error) => {
            if revision == Revision::Inline && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            JsonRpcMessage::error(error, Some(id))
        }
    }
}

/// The HTTP status rmcp gives the answer: for 2026-07-28 by the error (the request's `_meta`
/// being whole), for earlier revisions always 200.
fn status_of(message: &ServerJsonRpcMessage, revision: Revision) -> StatusCode {
    let ServerJsonRpcMessage::Error(error) = message else { return StatusCode::OK };
    if revision != Revision::Inline {
        return StatusCode::OK;
    }
    match error.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}
