//! `skillhost mcp`: serve the installed skills and memory to MCP clients, over stdio (default,
//! for a client that starts the server) or Streamable HTTP (`--http ADDR`, for remote or
//! shared use). stdout belongs to the protocol on stdio: everything else goes to stderr.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;

use crate::agent::profile::load_profiles;
use crate::library::Library;
use crate::mcp::http::HttpOptions;
use crate::mcp::ops::{HomeReadiness, Ops};
use crate::mcp::{McpServer, MemoryMode, ServerOptions};

#[derive(Args)]
pub(super) struct McpArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8765; a
    /// non-loopback address needs a token).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Serve only the skills this agent profile allows, with its memory namespace.
    #[arg(long, value_name = "PROFILE")]
    agent: Option<String>,
    /// What clients may do with long-term memory.
    #[arg(long, value_enum, default_value = "read")]
    memory: MemoryMode,
    /// File holding the bearer token HTTP clients must send (required for a non-loopback
    /// --http address). SKILLHOST_MCP_TOKEN sets it too.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Another `Host` header value to accept over HTTP (the name clients use to reach a
    /// non-loopback bind); repeatable. Loopback names are always accepted.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// A browser origin to accept over HTTP (e.g. https://app.example.com:443); repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// Most skill calls running at once; more wait for a slot (up to --call-wait-secs, then
    /// a busy error, audited).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_calls: u32,
    /// Seconds a call waits for a slot when --max-calls are running (0: refused at once).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=600))]
    call_wait_secs: u64,
    /// Most HTTP connections open at once (lowered to half the open-file limit); at the cap
    /// the oldest connection waiting for its request is closed to make room.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections: u32,
    /// Most HTTP connections open at once from one address.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections_per_peer: u32,
    /// Seconds a connection may take to send a request head (also the idle wait of a
    /// kept-alive connection); slower ones are closed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout_secs: u64,
    /// Linear memory all running skill calls may hold together, in MiB: each call reserves
    /// its memory limit before it starts, waits while the budget is taken, then is refused
    /// (an audited `memory-budget` status).
    #[arg(long, default_value_t = crate::sandbox::DEFAULT_MEMORY_BUDGET_MB, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    memory_budget_mb: u64,
    /// HTTP: no MCP sessions for 2025-11-25 clients either, so any replica behind a plain
    /// round-robin load balancer can answer any request (2026-07-28 requests are stateless
    /// anyway). Those clients then get no list-changed notifications (no GET stream).
    #[arg(long, requires = "http")]
    stateless: bool,
    /// HTTP: seconds a 2025-11-25 session may go without a request before it is ended (at
    /// most a fifth more); its client then gets 404 and opens a new one.
    #[arg(long, default_value_t = crate::mcp::http::DEFAULT_SESSION_IDLE.as_secs(), value_parser = clap::value_parser!(u64).range(2..=86400))]
    session_idle_secs: u64,
    /// HTTP: on SIGTERM or SIGINT, seconds to wait for the requests in flight before the
    /// calls still running are cancelled (audited as cancelled) and the process exits 0.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    drain_secs: u64,
    /// HTTP: on SIGTERM or SIGINT, seconds to keep accepting connections (answering 503,
    /// /readyz included) before the listening socket is closed; for load balancers that
    /// learn of the drain from /readyz and cannot retry a refused connection elsewhere.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600))]
    drain_grace_secs: u64,
}

fn read_token(args: &McpArgs) -> Result<Option<String>> {
    let token = match &args.token_file {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the token file {}", file.display()))?
                .trim()
                .to_string(),
        ),
        None => std::env::var("SKILLHOST_MCP_TOKEN").ok().map(|t| t.trim().to_string()),
    };
    match token {
        Some(t) if t.is_empty() => bail!("the MCP token is empty; put a long random string in it"),
        other => Ok(other),
    }
}

pub(super) fn run(lib: Library, home: &Path, args: McpArgs) -> Result<ExitCode> {
    let lib = lib.with_guest_memory_budget(args.memory_budget_mb).with_call_slots(args.max_calls);
    // On a shared store, skills installed and grants changed on any host apply here within
    // a fraction of a second (the next call revalidates against the pulled files).
    if let Some(sync) = lib.home_sync() {
        sync.follow(|| true)?;
    }
    let mut options = ServerOptions::new(home.to_path_buf());
    options.memory = args.memory;
    options.queue_wait = std::time::Duration::from_secs(args.call_wait_secs);
    if let Some(name) = &args.agent {
        let profiles = load_profiles(home)?;
        let known: Vec<String> = profiles.iter().map(|p| p.name.clone()).collect();
        let profile = profiles.into_iter().find(|p| p.name == *name).ok_or_else(|| {
            anyhow!("no agent profile `{name}`; known: {} (add one with `skillhost agent add DIR`)", known.join(", "))
        })?;
        options.profile = Some(profile);
    }
    let http = match args.http {
        Some(addr) => {
            let mut h = HttpOptions::new(addr);
            h.token = read_token(&args)?;
            h.allowed_hosts = args.allow_hosts.clone();
            h.allowed_origins = args.allow_origins.clone();
            h.connections.max_total = args.max_connections as usize;
            h.connections.max_per_peer = args.max_connections_per_peer as usize;
            h.connections.header_timeout = std::time::Duration::from_secs(args.header_timeout_secs);
            h.stateless = args.stateless;
            h.session_idle = std::time::Duration::from_secs(args.session_idle_secs);
            h.drain_wait = std::time::Duration::from_secs(args.drain_secs);
            h.drain_grace = std::time::Duration::from_secs(args.drain_grace_secs);
            h.check()?;
            Some(h)
        }
        None => None,
    };
    let lib = Arc::new(lib);
    let server = McpServer::new(lib.clone(), options);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        match http {
            Some(h) => {
                // Runs until SIGTERM or SIGINT, then drains (see crate::mcp::ops).
                let ops = Ops::new(server.clone(), HomeReadiness::new(lib));
                ops.watch_signals()?;
                crate::mcp::http::serve(server, h, ops).await
            }
            None => crate::mcp::stdio::serve(server).await,
        }
    })?;
    // A stdin read may still be parked on the blocking pool; do not wait for it.
    rt.shutdown_background();
    Ok(ExitCode::SUCCESS)
}
