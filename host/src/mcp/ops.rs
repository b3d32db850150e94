//! What makes `skillhost mcp --http` operable as one of N replicas behind a load balancer:
//! `/healthz`, `/readyz`, `/metrics` and the drain on SIGTERM / SIGINT.
//!
//! - `GET /healthz`: 200 while the process serves HTTP at all (liveness: restart me if not).
//! - `GET /readyz`: 200 when this host can take calls: not draining, and the [`Readiness`]
//!   check passes (for a local home, [`HomeReadiness`]: skills readable, the sandbox runtime
//!   made, the memory store open, the audit log appendable and writable; on a PostgreSQL
//!   store also: it answers and its schema is current). 503 with a short JSON reason
//!   otherwise. The check is a trait so another backend can plug in its own.
//! - Both are open, without the bearer token: load balancers and orchestrators probe without
//!   credentials, and the answers carry no information beyond up / ready / a fixed reason
//!   word (the details, which may name paths, go to the server's log, once per change).
//! - `GET /metrics` ([`super::metrics`]) names the installed skills and their traffic, so
//!   it sits behind the token whenever one is set (Prometheus sends one with
//!   `authorization: {credentials_file: ...}`); on a loopback bind without a token it is
//!   open like `/mcp` is.
//!
//! The drain: the first SIGTERM or SIGINT flips `/readyz` to 503 at once and answers any
//! further `/mcp` request 503 with `Connection: close`; then (at once, or after
//! `--drain-grace-secs` for balancers that only learn of it from `/readyz`) it closes the
//! listening socket, so new connections are refused and a balancer retries them elsewhere,
//! and closes idle kept-alive connections. Requests already in flight run on: a call finishes within its own
//! wall limit (and its wait for a slot), writes its audit line and sends its answer. After
//! every counted request has been answered (or `--drain-secs` passed, or a second signal
//! came), MCP sessions and listen streams are ended, calls still running are cancelled (their
//! audit lines say `cancelled`), the audit log is synced, and the process exits 0.
//! Long-lived streams (a 2025-11-25 session's GET stream, a 2026-07-28
//! `subscriptions/listen`) are not counted: they have no end to wait for.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::McpServer;
use super::metrics::{Levels, StoreOp};
use crate::library::Library;

/// Why a host is not ready: a short, fixed word or phrase, safe to show an unauthenticated
/// prober (`detail` goes to the log only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    pub reason: &'static str,
    pub detail: String,
}

impl NotReady {
    pub fn new(reason: &'static str, detail: impl std::fmt::Display) -> NotReady {
        NotReady { reason, detail: detail.to_string() }
    }
}

/// The future a [`Readiness`] check returns.
pub type ReadinessFuture<'a> = Pin<Box<dyn Future<Output = Result<(), NotReady>> + Send + 'a>>;

/// Can this host take calls now? Asked on every `/readyz` (a balancer probes every few
/// seconds): keep it cheap. It is raced against a timeout, so a hung store reads as not
/// ready rather than as a hung probe.
pub trait Readiness: Send + Sync + 'static {
    fn check(&self) -> ReadinessFuture<'_>;
}

/// Any `Fn() -> impl Future<Output = Result<(), NotReady>>` is a readiness check.
impl<F, Fut> Readiness for F
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
{
    fn check(&self) -> ReadinessFuture<'_> {
        Box::pin(self())
    }
}

/// Readiness of a local home: what a call needs before it can run and be audited.
pub struct HomeReadiness {
    lib: Arc<Library>,
}

impl HomeReadiness {
    pub fn new(lib: Arc<Library>) -> HomeReadiness {
        HomeReadiness { lib }
    }

    /// The checks, blocking (file system and store access).
    fn check_now(lib: &Library) -> Result<(), NotReady> {
        // On a PostgreSQL store: it answers, and its schema is the one this build knows (a
        // database migrated by a newer skillhost, or dropped, takes no calls from this host).
        if let Some(pg) = lib.postgres() {
            let status = pg.schema_status().map_err(|e| NotReady::new("store unreachable", format!("{e:#}")))?;
            status.check(pg).map_err(|e| NotReady::new("store schema not current", format!("{e:#}")))?;
        }
        lib.names().map_err(|e| NotReady::new("skills unreadable", format!("{e:#}")))?;
        lib.runtime().map_err(|e| NotReady::new("sandbox unavailable", format!("{e:#}")))?;
        lib.memory().map_err(|e| NotReady::new("store unreachable", format!("{e:#}")))?;
        let audit = lib.audit_log();
        audit.check_appendable().map_err(|e| NotReady::new("audit log damaged", format!("{e:#}")))?;
        if lib.postgres().is_some() {
            // The chain is the store's (checked above), not a file of this home.
            return Ok(());
        }
        // Appendable is about the chain; the file (or, before the first line, its directory,
        // made as the first append would) must also take a write. Opening for append and an
        // unnamed temporary file write nothing that stays.
        let path = audit.path();
        let writable = match std::fs::OpenOptions::new().append(true).open(path) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let dir = path.parent().unwrap_or(std::path::Path::new("."));
                std::fs::create_dir_all(dir).and_then(|()| tempfile::tempfile_in(dir)).map(|_| ())
            }
            Err(e) => Err(e),
        };
        writable.map_err(|e| NotReady::new("audit log not writable", format!("{}: {e}", path.display())))
    }
}

impl Readiness for HomeReadiness {
    fn check(&self) -> ReadinessFuture<'_> {
        let lib = self.lib.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || HomeReadiness::check_now(&lib))
                .await
                .unwrap_or_else(|e| Err(NotReady::new("check failed", e)))
        })
    }
}

/// How long a readiness check may take before the host counts as not ready.
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// Requests counted for the drain: answered or dropped when the count is back to zero.
#[derive(Default)]
struct Requests {
    count: AtomicUsize,
}

/// One counted request, until its response body ends or is dropped.
struct Counted(Arc<Ops>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.requests.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The operations state of one HTTP server process.
pub struct Ops {
    server: Arc<McpServer>,
    readiness: Box<dyn Readiness>,
    /// Cancelled when the drain starts.
    draining: CancellationToken,
    /// Cancelled by a second signal: stop waiting for calls.
    hurry: CancellationToken,
    requests: Requests,
    /// The last readiness answer (0 none yet, 1 ready, 2 not), so a change is logged once.
    last: AtomicU8,
}

impl Ops {
    pub fn new(server: Arc<McpServer>, readiness: impl Readiness) -> Arc<Ops> {
        Arc::new(Ops {
            server,
            readiness: Box::new(readiness),
            draining: CancellationToken::new(),
            hurry: CancellationToken::new(),
            requests: Requests::default(),
            last: AtomicU8::new(0),
        })
    }

    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Start the drain (idempotent): `/readyz` and new `/mcp` requests get 503 from now on.
    pub fn start_drain(&self) {
        self.draining.cancel();
    }

    /// Cancelled once the drain has started.
    pub fn drain_started(&self) -> CancellationToken {
        self.draining.clone()
    }

    /// Wait until no counted request and no tool call is left, at most `within` (or until a
    /// second signal). How many requests and calls are still running then.
    pub async fn wait_idle(&self, within: Duration) -> (usize, usize) {
        let deadline = Instant::now() + within;
        // Polled: the drain is rare and short, and a poll needs no wake-up plumbing in every
        // response body; 10 ms adds nothing a client would notice.
        loop {
            let requests = self.requests.count.load(Ordering::SeqCst);
            let calls = self.server.in_flight.count.load(Ordering::SeqCst);
            if (requests == 0 && calls == 0) || Instant::now() >= deadline || self.hurry.is_cancelled() {
                return (requests, calls);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sleep `for_` unless a second signal comes first.
    pub async fn hurried(&self, for_: Duration) {
        tokio::select! {
            () = tokio::time::sleep(for_) => {}
            () = self.hurry.cancelled() => {}
        }
    }

    /// Drain on the first SIGTERM or SIGINT; stop waiting for calls on the second. Installed
    /// before the server listens, so a signal never meets the default action (exit at once).
    pub fn watch_signals(self: &Arc<Self>) -> Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?;
        let ops = self.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::warn!(
                signal = name,
                "draining: refusing new connections and requests, finishing the calls in flight"
            );
            ops.start_drain();
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::warn!(
                signal = name,
                "second signal: cancelling the calls still running (their audit lines say cancelled)"
            );
            ops.hurry.cancel();
        });
        Ok(())
    }

    async fn ready(&self) -> Result<(), NotReady> {
        let started = Instant::now();
        let checked = match tokio::time::timeout(READINESS_TIMEOUT, self.readiness.check()).await {
            Ok(r) => r,
            Err(_) => Err(NotReady::new("check timed out", format!("no answer within {READINESS_TIMEOUT:?}"))),
        };
        self.server.metrics.store_op(StoreOp::ReadinessCheck, started.elapsed());
        let now = if checked.is_ok() { 1 } else { 2 };
        if self.last.swap(now, Ordering::Relaxed) != now {
            match &checked {
                Ok(()) => tracing::info!("ready"),
                Err(e) => tracing::warn!(reason = e.reason, "not ready: {}", e.detail),
            }
        }
        checked
    }
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    // Probes must see the state now, not a cached one.
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `GET /healthz`: the process serves.
pub async fn healthz() -> Response {
    json_response(StatusCode::OK, json!({ "status": "ok" }))
}

/// `GET /readyz`: see the module docs.
pub async fn readyz(State(ops): State<Arc<Ops>>) -> Response {
    if ops.is_draining() {
        return json_response(StatusCode::SERVICE_UNAVAILABLE, json!({ "status": "draining" }));
    }
    match ops.ready().await {
        Ok(()) => json_response(StatusCode::OK, json!({ "status": "ready" })),
        Err(e) => json_response(StatusCode::SERVICE_UNAVAILABLE, json!({ "status": "not-ready", "reason": e.reason })),
    }
}

/// `GET /metrics`: the Prometheus text exposition.
pub async fn metrics(State(ops): State<Arc<Ops>>) -> Response {
    let server = &ops.server;
    let levels = Levels {
        in_flight: server.in_flight.count.load(Ordering::Relaxed),
        runtime: server.lib.runtime_stats(),
        draining: ops.is_draining(),
    };
    let text = server.metrics.encode(levels);
    (StatusCode::OK, [(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response()
}

/// In front of `/mcp`: refuse while draining, count the request until its answer is sent.
pub async fn gate(State(ops): State<Arc<Ops>>, request: Request, next: Next) -> Response {
    if ops.is_draining() {
        let body = json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32000,
            "message": "this host is shutting down (draining); send the request again, another host will take it" } });
        let mut r = json_response(StatusCode::SERVICE_UNAVAILABLE, body);
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    let long_lived = request.method() == Method::GET
        || request.headers().get("mcp-method").is_some_and(|m| m.as_bytes() == b"subscriptions/listen");
    if long_lived {
        return next.run(request).await;
    }
    ops.requests.count.fetch_add(1, Ordering::SeqCst);
    let counted = Counted(ops.clone());
    let response = next.run(request).await;
    response.map(|body| axum::body::Body::new(CountedBody { body, _counted: counted }))
}

/// A response body that keeps its request counted until it is done or dropped.
struct CountedBody {
    body: axum::body::Body,
    _counted: Counted,
}

impl http_body::Body for CountedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
