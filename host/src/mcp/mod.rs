//! `skillhost mcp`: the installed skills and memory served to any Model Context Protocol client.
//!
//! One [`McpServer`] (one `Arc<Library>`, the options, the call limiter) is shared by every
//! connection; each connection (stdio, or one Streamable HTTP session or stateless request)
//! gets a cheap [`SkillhostMcp`] handler that names its audit session. The handler is written
//! by hand against rmcp's `ServerHandler` because the tool list is not known at compile time:
//! every `tools/list` reads the installed skills and the policy again, so a skill installed,
//! removed or re-granted while the server runs shows on the next list and applies to the next
//! call. Nothing a client sends can change rights: the handler only ever reads the policy.
//!
//! Executable skills are tools ([`tools`]), instruction skills are prompts (and their SKILL.md a
//! resource), the MEMORY.md view is a resource, and `memory_search` / `memory_add` are tools
//! when `--memory` allows them. Every skill is also served through the Skills extension
//! ([`skills`]: `skills/list`, `skills/get`, `skill://` files with sha256 digests).
//!
//! Why ~770 lines in one file: rmcp's `ServerHandler` is one trait whose methods (tools,
//! prompts, resources, skills, completion) share the server's state and its audit helper;
//! what each method serves lives in [`tools`] and [`skills`], the transports in [`http`],
//! [`connections`] and [`stdio`] (stdio and HTTP each answer a plain `tools/call` themselves,
//! [`stdio`] and `http::direct`, through the same [`SkillhostMcp::call`] as rmcp's handler;
//! `request` reads such a call without rmcp's general parse when it has no `_meta`).

pub mod connections;
pub mod http;
pub mod metrics;
pub mod ops;
pub mod poll_again;
mod request;
mod skills;
pub mod stdio;
mod tools;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Result;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, GetSkillRequestParams, GetSkillResult, Implementation,
    ListPromptsResult, ListResourcesResult, ListSkillsResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, Prompt, PromptMessage, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, RequestId, Resource, ResourceContents, Role, ServerCapabilities, ServerConfig,
    SubscriptionFilter,
};
use rmcp::service::{
    NotificationContext, Peer, RequestContext, SubscriptionContext, SubscriptionSendError, SubscriptionSink,
};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::profile::AgentProfile;
use crate::audit::{CallDetail, CallEntry, CallStatus, ClientInfo, McpCall};
use crate::capabilities::MemoryAccess;
use crate::library::{DEFAULT_NAMESPACE, Library, LoadedSkill, Lookup, RunOptions};
use crate::sandbox::CallError;

/// What the MCP client may do with long-term memory (`--memory`): which memory tools are
/// listed, and the most each skill's own `memory` right may be during calls from this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryMode {
    /// No memory tools, no MEMORY.md resource.
    None,
    /// `memory_search` and the MEMORY.md resource.
    Read,
    /// Also `memory_add`.
    Write,
}

impl MemoryMode {
    /// The most a skill's own `memory` right may be during calls from this server.
    pub fn skill_access(self) -> MemoryAccess {
        match self {
            MemoryMode::None => MemoryAccess::None,
            MemoryMode::Read => MemoryAccess::Read,
            MemoryMode::Write => MemoryAccess::Write,
        }
    }
}

/// Which transport a request came over; recorded in the audit session name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// How the server is set up (from the command line).
pub struct ServerOptions {
    /// The skillhost home (for reading instruction skills' SKILL.md).
    pub home: PathBuf,
    /// Only the skills this profile's allowlist names, and its memory namespace.
    pub profile: Option<AgentProfile>,
    pub memory: MemoryMode,
    /// How long a skill call waits for one of the runtime's call slots (sized with
    /// [`Library::with_call_slots`]) before it is refused busy.
    pub queue_wait: Duration,
}

impl ServerOptions {
    pub fn new(home: PathBuf) -> ServerOptions {
        ServerOptions { home, profile: None, memory: MemoryMode::Read, queue_wait: Duration::from_secs(10) }
    }
}

/// Freshness the lists advertise (2026-07-28 `ttlMs`): short, because skills and grants
/// change while the server runs.
const LIST_TTL_MS: u64 = 2_000;
/// URI of the MEMORY.md view resource.
pub const MEMORY_URI: &str = "skillhost://memory/MEMORY.md";

/// How often the server looks for installed, removed or re-granted skills to tell listening
/// clients about (a `stat` per skill and policy file).
const LIST_WATCH_EVERY: Duration = Duration::from_millis(500);

/// How long, once stdin has closed and rmcp has given the running calls its own grace
/// (5 s) and then cancelled them, the server waits for their audit lines before it exits.
const AUDIT_DRAIN_WAIT: Duration = Duration::from_secs(10);

/// State shared by every connection of one server process.
pub struct McpServer {
    lib: Arc<Library>,
    options: ServerOptions,
    /// Tool calls not yet audited, so an exit can wait for their lines.
    in_flight: InFlight,
    connections: AtomicU64,
    /// What `/metrics` serves (see [`metrics`]).
    metrics: metrics::Metrics,
    /// Clients to tell when the lists change; the watcher starts with the first.
    listeners: std::sync::Mutex<Vec<Listener>>,
    watching: std::sync::Once,
}

/// Tool calls that are running (or queued) and have not written their audit line yet.
#[derive(Default)]
struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One call counted in [`InFlight`] until dropped (after its audit line, or when its task is
/// dropped).
struct InFlightCall<'a>(&'a InFlight);

impl InFlight {
    fn enter(&self) -> InFlightCall<'_> {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightCall(self)
    }

    /// Wait until no call is in flight, at most `within`; how many are still running then.
    async fn drained(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before the check, so a call ending in between is not missed.
            let idle = self.idle.notified();
            let running = self.count.load(Ordering::SeqCst);
            if running == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.count.load(Ordering::SeqCst);
            }
        }
    }
}

impl Drop for InFlightCall<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A client that hears when the tool, prompt and resource lists change.
enum Listener {
    /// A 2025-11-25 session (stdio, or an HTTP session): notifications on its stream.
    Session(Peer<RoleServer>),
    /// A 2026-07-28 `subscriptions/listen` request.
    Subscription(SubscriptionSink),
}

impl Listener {
    /// Send the three list-changed notifications; false once the client is gone.
    async fn lists_changed(&self) -> bool {
        match self {
            Listener::Session(peer) => {
                peer.notify_tool_list_changed().await.is_ok()
                    && peer.notify_prompt_list_changed().await.is_ok()
                    && peer.notify_resource_list_changed().await.is_ok()
            }
            Listener::Subscription(sink) => {
                // A category the client did not ask for is refused by the sink: not an end.
                let alive = |r: Result<(), SubscriptionSendError>| {
                    !matches!(r, Err(SubscriptionSendError::SubscriptionClosed | SubscriptionSendError::Service(_)))
                };
                alive(sink.notify_tool_list_changed().await)
                    && alive(sink.notify_prompt_list_changed().await)
                    && alive(sink.notify_resource_list_changed().await)
            }
        }
    }
}

/// What the lists depend on: each installed skill's install.json and the policy files.
type ListsStamp = Vec<(String, Option<crate::fsutil::FileStamp>)>;

impl McpServer {
    pub fn new(lib: Arc<Library>, options: ServerOptions) -> Arc<McpServer> {
        // A sync per answer would cost more than the call: lines are written before the
        // answer, synced behind (see crate::audit); `finish` syncs the rest.
        if let Err(e) = lib.audit_log().sync_in_background() {
            tracing::warn!("{e:#}; every audit line is synced before its answer instead");
        }
        Arc::new(McpServer {
            lib,
            options,
            in_flight: InFlight::default(),
            connections: AtomicU64::new(0),
            metrics: metrics::Metrics::new(),
            listeners: std::sync::Mutex::new(Vec::new()),
            watching: std::sync::Once::new(),
        })
    }

    /// Tell `listener` when the lists change (starts the watcher on first use; needs a runtime).
    fn listen(self: &Arc<Self>, listener: Listener) {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner()).push(listener);
        self.watching.call_once(|| {
            tokio::spawn(watch_lists(Arc::downgrade(self)));
        });
    }

    fn lists_stamp(&self) -> Result<ListsStamp> {
        let mut stamp = Vec::new();
        for name in self.lib.names()? {
            let file = self.options.home.join("skills").join(&name).join("install.json");
            stamp.push((name, crate::fsutil::FileStamp::of(&file)?));
        }
        let policy = self.lib.policy_files();
        for file in std::iter::once(&policy.user).chain(policy.project.as_ref()) {
            stamp.push((file.display().to_string(), crate::fsutil::FileStamp::of(file)?));
        }
        Ok(stamp)
    }

    /// A handler for one new connection over `transport`.
    pub fn connection(self: &Arc<Self>, transport: Transport) -> SkillhostMcp {
        let n = self.connections.fetch_add(1, Ordering::Relaxed);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        SkillhostMcp {
            server: self.clone(),
            transport,
            nonce: format!("{nanos:x}-{:x}-{n}", process_id()),
            session: Arc::new(OnceLock::new()),
            http_sessions: None,
            direct_calls: Arc::default(),
        }
    }

    /// Wait (at most [`AUDIT_DRAIN_WAIT`]) until every call that was running has written its
    /// audit line: once the transport is gone rmcp cancels them, and a cancelled call still
    /// writes its line. Says so on stderr if some could not finish in time.
    pub async fn drain_calls(&self) {
        let left = self.in_flight.drained(AUDIT_DRAIN_WAIT).await;
        if left > 0 {
            eprintln!(
                "warning: {left} MCP call(s) still running {} s after the client went away; exiting without their audit lines",
                AUDIT_DRAIN_WAIT.as_secs()
            );
        }
    }

    /// Before a clean exit: every audit line written is synced, and a memory replica of the
    /// shared store records where it stands (else the next start rebuilds it from the log).
    pub fn finish(&self) -> Result<()> {
        let replica = self.lib.stop_memory_replication();
        self.lib.audit_log().flush()?;
        replica
    }

    fn namespace(&self) -> &str {
        self.options.profile.as_ref().map_or(DEFAULT_NAMESPACE, |p| p.namespace.as_str())
    }

    fn allows(&self, skill: &str) -> bool {
        self.options.profile.as_ref().is_none_or(|p| p.allows(skill))
    }
}

/// This process's id, asked of the kernel once: every stateless HTTP request is a connection
/// of its own and names it in its audit session.
fn process_id() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// The handler of one connection.
#[derive(Clone)]
pub struct SkillhostMcp {
    server: Arc<McpServer>,
    transport: Transport,
    nonce: String,
    /// The audit session of this connection, named once the client is known.
    session: Arc<OnceLock<String>>,
    /// Over HTTP with sessions: where this handler enters its session once the client has
    /// sent `notifications/initialized`, so the direct path can answer its calls.
    http_sessions: Option<std::sync::Weak<http::Sessions>>,
    /// This session's calls answered by the direct path and still running, so that the
    /// client's `notifications/cancelled` (which rmcp hands to this handler) stops them.
    direct_calls: Arc<DirectCalls>,
}

/// Calls of one session running on the direct path: each one's token, under a number of its
/// own (so a call that ends removes its own entry, not a later one's under the same id).
type DirectCalls = std::sync::Mutex<std::collections::HashMap<RequestId, (u64, CancellationToken)>>;

/// A call entered in its session's [`DirectCalls`] while it runs; leaves when dropped.
struct DirectCall {
    calls: Arc<DirectCalls>,
    id: RequestId,
    number: u64,
}

impl Drop for DirectCall {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        if calls.get(&self.id).is_some_and(|(number, _)| *number == self.number) {
            calls.remove(&self.id);
        }
    }
}

/// The MCP client as it named itself (`initialize` or the request's `_meta`).
#[derive(Debug, Clone)]
struct Client {
    name: String,
    version: String,
}

fn client_of(context: &RequestContext<RoleServer>) -> Client {
    client_from(context.meta.client_info(), &context.peer)
}

/// The client named in a request's `_meta`, else in the session's `initialize`.
fn client_from(in_request: Option<Implementation>, peer: &Peer<RoleServer>) -> Client {
    client_named(in_request.or_else(|| peer.peer_info().map(|p| p.client_info.clone())))
}

/// The client as it named itself, or "unknown".
fn client_named(info: Option<Implementation>) -> Client {
    // A 2025-11-25 request served statelessly (`--stateless`) has no handshake behind it:
    // rmcp fills the peer's info with its own name and version, which would be a lie here.
    static PLACEHOLDER: OnceLock<Implementation> = OnceLock::new();
    let placeholder = PLACEHOLDER.get_or_init(Implementation::from_build_env);
    let info = info.filter(|i| i != placeholder);
    match info {
        Some(i) => Client { name: i.name, version: i.version },
        None => Client { name: "unknown".into(), version: "unknown".into() },
    }
}

/// What a tool call takes from the request that carried it: who asked, the token that stops
/// it (the client's `notifications/cancelled`, or a client gone), and where progress goes.
/// Built from rmcp's request context, or by the stdio and HTTP transports' own paths ([`stdio`],
/// [`http::direct`]).
struct CallContext<'a> {
    client: Client,
    cancelled: &'a CancellationToken,
    progress: Option<(&'a Peer<RoleServer>, ProgressToken)>,
}

impl<'a> CallContext<'a> {
    fn of(context: &'a RequestContext<RoleServer>) -> CallContext<'a> {
        CallContext {
            client: client_of(context),
            cancelled: &context.ct,
            progress: context.meta.get_progress_token().map(|token| (&context.peer, token)),
        }
    }
}

/// What an MCP audit line says beside its status: the sentence of an error, or the records
/// a memory tool stored or read.
#[derive(Debug, Default)]
struct McpLine {
    error: Option<String>,
    touched: tools::MemoriesTouched,
}

impl McpLine {
    fn error(message: &str) -> McpLine {
        McpLine { error: Some(message.to_string()), touched: Default::default() }
    }
}

/// Keep a client-chosen string fit for a session name: a few safe characters, bounded.
fn sanitize(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(48)
        .collect();
    if cleaned.is_empty() { "unknown".into() } else { cleaned }
}

fn internal(e: anyhow::Error) -> McpError {
    McpError::internal_error(format!("{e:#}"), None)
}

impl SkillhostMcp {
    /// This handler, entering its session in `sessions` once the client is initialized (HTTP
    /// with sessions; see [`http::Sessions`]).
    fn in_http_sessions(mut self, sessions: std::sync::Weak<http::Sessions>) -> SkillhostMcp {
        self.http_sessions = Some(sessions);
        self
    }

    /// Enter call `id`, stopped by `cancel`, as running on the direct path, until the returned
    /// guard drops; `None` if a call with that id runs there already (rmcp answers that one).
    fn enter_direct_call(&self, id: &RequestId, cancel: &CancellationToken) -> Option<DirectCall> {
        static NUMBERS: AtomicU64 = AtomicU64::new(0);
        let number = NUMBERS.fetch_add(1, Ordering::Relaxed);
        let mut calls = self.direct_calls.lock().unwrap_or_else(|e| e.into_inner());
        if calls.contains_key(id) {
            return None;
        }
        calls.insert(id.clone(), (number, cancel.clone()));
        Some(DirectCall { calls: self.direct_calls.clone(), id: id.clone(), number })
    }

    /// Cancel every call of this session running on the direct path: the session has ended.
    fn cancel_direct_calls(&self) {
        let running: Vec<_> = self.direct_calls.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
        for (_, (_, cancel)) in running {
            cancel.cancel();
        }
    }

    /// `mcp-<transport>-<client>@<version>-<nonce>`: the library's call lines carry only the
    /// session, so the transport and client are named there.
    fn session(&self, client: &Client) -> String {
        self.session
            .get_or_init(|| {
                format!(
                    "mcp-{}-{}@{}-{}",
                    self.transport.as_str(),
                    sanitize(&client.name),
                    sanitize(&client.version),
                    self.nonce
                )
            })
            .clone()
    }

    /// Run blocking library work (directory scans, store access) off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&McpServer) -> Result<T> + Send + 'static,
    ) -> Result<T, McpError> {
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || f(&server))
            .await
            .map_err(|e| McpError::internal_error(format!("worker failed: {e}"), None))?
            .map_err(internal)
    }

    async fn call_skill(
        &self,
        name: &str,
        loaded: Option<LoadedSkill>,
        arguments: Value,
        call: &CallContext<'_>,
    ) -> Result<CallToolResult, McpError> {
        // `--memory` caps the skill's own memory right too, not only the memory tools.
        let opts = RunOptions {
            session: self.session(&call.client),
            step: 0,
            namespace: self.server.namespace().to_string(),
            max_memory: self.server.options.memory.skill_access(),
            queue_wait: Some(self.server.options.queue_wait),
            transport: Some(self.transport.as_str()),
        };
        // rmcp cancels `ct` on the client's `notifications/cancelled` and when an HTTP
        // client goes away before the answer; the handler task itself keeps running, so the
        // library races the call against it (dropping the guest, or the wait for a slot).
        // The runtime's admission (sized by `--max-calls`) is the only queue: a call that
        // waits `--call-wait-secs` for a slot comes back `busy`, audited by the library.
        let started = std::time::Instant::now();
        let run = self.server.lib.run_looked_up(name, loaded, arguments, &opts, call.cancelled.cancelled());
        let report = match &call.progress {
            Some((peer, token)) => with_progress(run, peer, token.clone()).await,
            None => run.await,
        };
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                self.server.metrics.call(name, CallStatus::Refused, Some(started.elapsed()));
                return Ok(tools::error_result(&format!("{e:#}")));
            }
        };
        self.server.metrics.skill_call(&report, started.elapsed());
        match report.outcome.result {
            Err(CallError::Cancelled) => Err(McpError::new(ErrorCode(-32800), "request cancelled", None)),
            // A protocol error, as before the runtime's admission became the only queue.
            Err(CallError::Busy { running, waited_ms }) => Err(McpError::new(
                ErrorCode(-32000),
                format!(
                    "server busy: {running} skill calls are already running and this one waited {} s for a slot; retry shortly",
                    waited_ms / 1000
                ),
                None,
            )),
            _ => Ok(tools::call_result(&report)),
        }
    }

    /// The audit line of a memory tool call, a MEMORY.md read or a call refused before it
    /// reached the library, written before the answer goes out (synced in the background
    /// with concurrent appends, as a skill call's is). What the client sent is bounded. An
    /// error when the line could not be written: a call that ran is then not answered as
    /// done (as `Library::run` does for skill calls); a refusal is answered anyway.
    async fn audit_line(
        &self,
        tool: &str,
        client: &Client,
        params: &Value,
        status: CallStatus,
        line: McpLine,
    ) -> anyhow::Result<()> {
        let entry = CallEntry {
            session: self.session(client),
            step: 0,
            skill: tool.into(),
            params: params.clone(),
            status,
            error: line.error,
            detail: CallDetail::Mcp(McpCall {
                transport: self.transport.as_str(),
                client: ClientInfo { name: client.name.clone(), version: client.version.clone() },
                memories_stored: line.touched.stored,
                memories_read: line.touched.read,
            }),
        };
        self.server.metrics.call(tool, status, None);
        let started = std::time::Instant::now();
        let written = self.server.lib.append_entry(entry.into_entry()).await;
        self.server.metrics.store_op(metrics::StoreOp::AuditAppend, started.elapsed());
        if let Err(e) = &written {
            tracing::warn!(log = %self.server.lib.audit_log().location(), "cannot write the audit log: {e:#}");
        }
        written
    }

    async fn call_memory(
        &self,
        tool: tools::MemoryTool,
        arguments: Value,
        call: &CallContext<'_>,
    ) -> Result<CallToolResult, McpError> {
        let client = &call.client;
        let session = self.session(client);
        let namespace = self.server.namespace().to_string();
        let params = arguments.clone();
        let request = match tools::MemoryRequest::parse(tool, arguments) {
            Ok(r) => r,
            Err(message) => {
                // Refused either way; a line that cannot be written is logged by audit_line.
                let _ =
                    self.audit_line(tool.name(), client, &params, CallStatus::InvalidParams, McpLine::default()).await;
                return Ok(tools::error_result(&message));
            }
        };
        // Nothing runs that the audit log cannot record (as for a skill call).
        if let Err(e) = self.server.lib.audit_log().check_appendable() {
            return Ok(tools::error_result(&format!("{e:#}")));
        }
        let provenance_client = format!("mcp:{}@{}", sanitize(&client.name), sanitize(&client.version));
        let op = match tool {
            tools::MemoryTool::Search => metrics::StoreOp::MemorySearch,
            tools::MemoryTool::Add => metrics::StoreOp::MemoryAdd,
        };
        let started = std::time::Instant::now();
        let outcome = self
            .blocking(move |server| {
                let memory = server.lib.memory()?;
                let max_priority = server.lib.policy()?.memory.max_skill_priority();
                Ok(request.execute(&memory, &namespace, &session, &provenance_client, max_priority))
            })
            .await?;
        self.server.metrics.store_op(op, started.elapsed());
        let (status, touched) = match &outcome {
            Ok(v) => (CallStatus::Success, tools::memories_touched(v)),
            Err(_) => (CallStatus::Failed, Default::default()),
        };
        if let Err(e) = self.audit_line(tool.name(), client, &params, status, McpLine { error: None, touched }).await {
            let stored = match (tool, &outcome) {
                (tools::MemoryTool::Add, Ok(_)) => " The memory was stored; memory_search finds it.",
                _ => "",
            };
            return Ok(tools::error_result(&format!(
                "{} ran, but its audit line could not be written ({e:#}), so it is not answered.{stored}",
                tool.name()
            )));
        }
        Ok(match outcome {
            Ok(v) => tools::json_result(v),
            Err(message) => tools::error_result(&message),
        })
    }

    /// A `tools/call`: a memory tool, or a skill run in its sandbox. The one path for rmcp's
    /// handler and the stdio transport's own.
    async fn call(&self, request: CallToolRequestParams, call: CallContext<'_>) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let _in_flight = self.server.in_flight.enter();
        if let Some(tool) = tools::MemoryTool::from_name(&name) {
            if !tool.offered(self.server.options.memory) {
                let message = format!(
                    "unknown tool `{name}`: this server was started with --memory {:?}",
                    self.server.options.memory
                )
                .to_lowercase();
                let line = McpLine::error(&message);
                let _ = self.audit_line(tool.name(), &call.client, &arguments, CallStatus::Refused, line).await;
                return Err(McpError::invalid_params(message, None));
            }
            return self.call_memory(tool, arguments, &call).await.map(Into::into);
        }
        // On a shared store: this home brought up to what the store holds first, so that a
        // skill installed, updated or re-granted on another host a moment ago is what runs.
        if let Some(sync) = self.server.lib.home_sync() {
            sync.ensure_current().await.map_err(|e| McpError::internal_error(format!("{e:#}"), None))?;
        }
        // One stat once the skill is loaded, so no hop to the blocking pool; the run takes
        // the version found here instead of stating install.json again.
        let looked_up =
            if self.server.allows(&name) { self.server.lib.lookup_executable(&name) } else { Lookup::NotExecutable };
        let loaded = match looked_up {
            Lookup::Executable(loaded) => Some(loaded),
            // The run says why it cannot be loaded, and audits the refusal.
            Lookup::Unloadable => None,
            Lookup::NotExecutable => {
                return Err(McpError::invalid_params(
                    format!("unknown tool `{name}`: list the tools again (tools/list) to see what is installed"),
                    None,
                ));
            }
        };
        self.call_skill(&name, loaded, arguments, &call).await.map(Into::into)
    }
}

impl ServerHandler for SkillhostMcp {
    fn get_info(&self) -> ServerConfig {
        // Resources are always there: instruction skills' SKILL.md, and MEMORY.md unless --memory none.
        // listChanged: sent to 2025-11-25 sessions and 2026-07-28 `subscriptions/listen`.
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_skills()
            .build();
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("skillhost", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools are sandboxed skills: each runs in a WebAssembly sandbox with only the rights the user granted it. \
                 Prompts are instruction skills (guidance to follow). The MEMORY.md resource and memory_search give \
                 what was learned in earlier sessions.",
            )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let session_id = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|id| id.to_str().ok());
        if let (Some(id), Some(sessions)) = (session_id, self.http_sessions.as_ref().and_then(|s| s.upgrade())) {
            sessions.open(id, self.clone(), context.peer.clone());
        }
        self.server.listen(Listener::Session(context.peer));
    }

    async fn on_cancelled(&self, notification: CancelledNotificationParam, _context: NotificationContext<RoleServer>) {
        // rmcp cancels the requests it runs itself; this is for those the direct path runs.
        let Some(id) = notification.request_id else { return };
        let running = self.direct_calls.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        if let Some((_, cancel)) = running {
            cancel.cancel();
        }
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        // List changes only; there are no per-resource updates to subscribe to.
        let mut accepted = requested.clone();
        accepted.resource_subscriptions = None;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.server.listen(Listener::Subscription(context.sink().clone()));
        context.cancelled().await;
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let memory = self.server.options.memory;
        let tools = self.blocking(move |server| tools::list(server, memory)).await?;
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(LIST_TTL_MS).with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, CallContext::of(&context)).await
    }

    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        let skills = self.blocking(skills::list).await?;
        Ok(ListSkillsResult::with_all_items(skills).with_ttl_ms(LIST_TTL_MS).with_cache_scope(CacheScope::Private))
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        let uri = request.uri.clone();
        match self.blocking(move |server| skills::get(server, &uri)).await? {
            Some(skill) => {
                Ok(GetSkillResult::new(skill).with_ttl_ms(LIST_TTL_MS).with_cache_scope(CacheScope::Private))
            }
            None => Err(McpError::invalid_params(
                format!("no skill at `{}`: skills/list names the skills this server serves", request.uri),
                None,
            )),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let prompts = self
            .blocking(|server| {
                Ok(tools::instruction_skills(server)?
                    .into_iter()
                    .map(|i| Prompt::new(i.manifest.name.clone(), Some(tools::description(&i.manifest)), None))
                    .collect::<Vec<_>>())
            })
            .await?;
        Ok(ListPromptsResult::with_all_items(prompts).with_ttl_ms(LIST_TTL_MS).with_cache_scope(CacheScope::Private))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let name = request.name.clone();
        let found = self
            .blocking(move |server| {
                Ok(tools::instruction_skills(server)?.into_iter().find(|i| i.manifest.name == name))
            })
            .await?;
        let Some(info) = found else {
            return Err(McpError::invalid_params(
                format!("unknown prompt `{}`: prompts/list names the instruction skills", request.name),
                None,
            ));
        };
        // The body is guidance to follow (an instruction skill), so it is not quoted; it is
        // made inert like every text a SKILL.md supplies.
        let body = crate::controls::neutralise(&info.manifest.body, true).into_owned();
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)])
            .with_description(tools::description(&info.manifest))
            .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let with_memory = self.server.options.memory != MemoryMode::None;
        let resources = self
            .blocking(move |server| {
                let mut out = Vec::new();
                if with_memory {
                    out.push(
                        Resource::new(MEMORY_URI, "MEMORY.md")
                            .with_description("What was learned in earlier sessions (the memory view given to agents)")
                            .with_mime_type("text/markdown"),
                    );
                }
                for info in tools::instruction_skills(server)? {
                    out.push(
                        Resource::new(format!("skill://{}/SKILL.md", info.manifest.name), info.manifest.name.clone())
                            .with_description(tools::description(&info.manifest))
                            .with_mime_type("text/markdown"),
                    );
                }
                Ok(out)
            })
            .await?;
        Ok(ListResourcesResult::with_all_items(resources)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri.clone();
        if uri == MEMORY_URI && self.server.options.memory != MemoryMode::None {
            let client = client_of(&context);
            let namespace = self.server.namespace().to_string();
            let started = std::time::Instant::now();
            let text = self.blocking(move |server| Ok(server.lib.memory()?.view(&namespace)?.text)).await?;
            self.server.metrics.store_op(metrics::StoreOp::MemoryView, started.elapsed());
            self.audit_line("memory_view", &client, &json!({ "uri": uri }), CallStatus::Success, McpLine::default())
                .await
                .map_err(|e| {
                    McpError::internal_error(
                        format!("MEMORY.md was read, but the read could not be audited: {e:#}"),
                        None,
                    )
                })?;
            return Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, MEMORY_URI).with_mime_type("text/markdown"),
            ])
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private)
            .into());
        }
        if uri.starts_with("skill://") {
            // Any file install.json recorded for a served skill (SKILL.md, the component...).
            let file = self.blocking(move |server| skills::read(server, &uri)).await?;
            if let Some(contents) = file {
                return Ok(ReadResourceResult::new(vec![contents])
                    .with_ttl_ms(LIST_TTL_MS)
                    .with_cache_scope(CacheScope::Private)
                    .into());
            }
        }
        Err(McpError::new(
            ErrorCode::RESOURCE_NOT_FOUND,
            format!("no resource `{}`: resources/list names what this server has", request.uri),
            None,
        ))
    }
}

/// Every [`LIST_WATCH_EVERY`], while clients listen: when a skill was installed, upgraded or
/// removed, or a policy file changed, send them list-changed notifications (they list again;
/// the lists are read fresh). Ends when the server is dropped.
async fn watch_lists(server: std::sync::Weak<McpServer>) {
    let mut last: Option<ListsStamp> = None;
    let mut ticks = tokio::time::interval(LIST_WATCH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(server) = server.upgrade() else { return };
        let reader = server.clone();
        let Ok(Ok(now)) = tokio::task::spawn_blocking(move || reader.lists_stamp()).await else { continue };
        let changed = last.as_ref().is_some_and(|l| *l != now);
        last = Some(now);
        if !changed {
            continue;
        }
        let current = std::mem::take(&mut *server.listeners.lock().unwrap_or_else(|p| p.into_inner()));
        let mut alive = Vec::with_capacity(current.len());
        for listener in current {
            if listener.lists_changed().await {
                alive.push(listener);
            }
        }
        server.listeners.lock().unwrap_or_else(|p| p.into_inner()).extend(alive);
    }
}

/// How often a long call tells a client that asked (`_meta.progressToken`) that it is still running.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Drive `run` to completion, sending `notifications/progress` every [`PROGRESS_EVERY`]:
/// progress is the milliseconds the call has run (it always increases; the total is unknown,
/// a skill says nothing about how far along it is).
async fn with_progress<F: std::future::Future>(run: F, peer: &Peer<RoleServer>, token: ProgressToken) -> F::Output {
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut run = std::pin::pin!(run);
    loop {
        tokio::select! {
            out = &mut run => return out,
            _ = ticks.tick() => {
                let ms = started.elapsed().as_millis() as u64;
                let update = ProgressNotificationParam::new(token.clone(), ms as f64)
                    .with_message(format!("running for {ms} ms"));
                // A client that cannot take the notification still gets its answer.
                let _ = peer.notify_progress(update).await;
            }
        }
    }
}
