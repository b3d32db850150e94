//! The sandbox: one wasmtime [`Engine`] for the process, components compiled once into a
//! cache, and a fresh [`Store`] + WASI context per call, built from nothing and given only
//! the effective capabilities (declared AND granted).
//!
//! All of WASI 0.2 and wasi:http are linked for every component, so components from any
//! toolchain instantiate; what they reach is decided per call by the capability modules
//! in this directory, one file each. Limits: linear memory through a [`ResourceLimiter`]
//! (summed over all memories of the instance); CPU and wall time through epoch
//! interruption (a ticker thread; the deadline callback compares the thread's CPU time and
//! the elapsed time with the limits), plus a tokio timeout for the wall limit while the
//! guest waits in a host call (epochs do not fire then); output, metadata and new memories
//! capped after the call.

mod cache;
mod env;
mod filesystem;
mod log;
mod memory;
mod network;
mod session;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde::Serialize;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

pub use cache::CompileOutcome;
pub use log::LogLine;
pub use memory::{Absorbed, absorb};

use crate::capabilities::{CapabilitySet, Limits};
use crate::memory::MemoryStore;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "skill",
        imports: { default: trappable },
        exports: { default: async },
    });
}

use bindings::skillhost::skill::types as wit;
use bindings::{Skill, SkillPre};

/// Milliseconds between epoch ticks.
const EPOCH_TICK_MS: u64 = 10;
/// The deadline callback checks CPU and wall time every this many ticks.
const CHECK_EVERY_TICKS: u64 = 2;
/// Linear memories one instance may have (Rust components have one or two).
const MAX_MEMORIES_PER_INSTANCE: usize = 8;
/// Guest stdout/stderr kept per call (the rest is refused to the guest).
const STDIO_CAPACITY: usize = 64 * 1024;
/// Bytes of each pooled memory/table slot kept resident between calls.
const KEEP_RESIDENT_BYTES: usize = 64 << 10;
/// Concurrent instances the pooling allocator is sized for.
const POOL_INSTANCES: u32 = 64;

/// The process-wide engine, linker and compile cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    cache: cache::CompileCache,
    ticker: Arc<AtomicBool>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.store(true, Ordering::Relaxed);
    }
}

/// A component ready to instantiate: linked once, instantiated per call in microseconds.
#[derive(Clone)]
pub struct PreparedSkill {
    pre: SkillPre<CallState>,
}

impl Runtime {
    /// `cache_dir` holds compiled components.
    pub fn new(cache_dir: PathBuf) -> Result<Runtime> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.max_wasm_stack(512 * 1024);
        // No component-model-async in the contract: skip the per-store concurrency state.
        config.concurrency_support(false);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(POOL_INSTANCES);
        pool.total_memories(POOL_INSTANCES * 2);
        pool.total_tables(POOL_INSTANCES * 4);
        pool.total_stacks(POOL_INSTANCES);
        pool.max_memory_size((Limits::CEILING.memory_mb as usize) << 20);
        // Reset the first pages of a slot with memset instead of madvise: a small skill
        // then reuses warm pages instead of faulting them in again on every call.
        pool.linear_memory_keep_resident(KEEP_RESIDENT_BYTES);
        pool.table_keep_resident(KEEP_RESIDENT_BYTES);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(anyhow::Error::from).context("cannot create the wasmtime engine")?;

        let mut linker: Linker<CallState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        Skill::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;

        let ticker = Arc::new(AtomicBool::new(false));
        let (stop, weak) = (ticker.clone(), engine.weak());
        std::thread::Builder::new().name("skillhost-epoch".into()).spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(EPOCH_TICK_MS));
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })?;
        let cache = cache::CompileCache::new(cache_dir, &engine);
        Ok(Runtime { engine, linker, cache, ticker })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compile `wasm` (at install) and store it in the cache. Rejects anything that is not
    /// a component with a message saying what it is and what to do.
    pub fn compile(&self, wasm: &[u8], progress: &dyn Fn(&str)) -> Result<(Component, CompileOutcome)> {
        check_is_component(wasm)?;
        self.cache.compile(&self.engine, wasm, progress)
    }

    /// Load a verified component (`wasm` whose sha256 is `sha256`) from the compile cache,
    /// recompiling if the entry is missing or corrupt, and link it.
    pub fn prepare(
        &self,
        wasm: &[u8],
        sha256: &str,
        progress: &dyn Fn(&str),
    ) -> Result<(PreparedSkill, CompileOutcome)> {
        check_is_component(wasm)?;
        let (component, outcome) = self.cache.load(&self.engine, wasm, sha256, progress)?;
        let pre = self.linker.instantiate_pre(&component).map_err(|e| {
            anyhow::anyhow!("the component cannot be linked against the skill world: {e:#}\nRebuild it against wit/ (package skillhost:skill@0.1.0).")
        })?;
        let pre = SkillPre::new(pre).map_err(|e| {
            anyhow::anyhow!("the component does not export `execute` from the skill world: {e:#}\nBuild it with skillhost-sdk's export_skill! or against wit/.")
        })?;
        Ok((PreparedSkill { pre }, outcome))
    }

    /// Run one call in a fresh store.
    pub async fn call(&self, skill: &PreparedSkill, grant: CallGrant, invocation: Invocation) -> CallOutcome {
        let started = Instant::now();
        let limits = grant.limits;
        let mut denials = Vec::new();
        let stdout = MemoryOutputPipe::new(STDIO_CAPACITY);
        let stderr = MemoryOutputPipe::new(STDIO_CAPACITY);
        let state = match CallState::new(&grant, &invocation, stdout.clone(), stderr.clone(), &mut denials) {
            Ok(s) => s,
            Err(e) => return CallOutcome::failed_setup(e, denials, started),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        let (cpu_limit, wall) = (Duration::from_millis(limits.cpu_time_ms), Duration::from_millis(limits.wall_time_ms));
        let cpu_start = thread_cpu_time();
        store.set_epoch_deadline(CHECK_EVERY_TICKS);
        store.epoch_deadline_callback(move |mut ctx| {
            // Epochs count elapsed time, including time spent waiting in host calls; the
            // CPU limit is checked against the CPU time this thread actually used.
            if started.elapsed() >= wall {
                ctx.data_mut().stopped = Some(CallError::Timeout { limit_ms: wall.as_millis() as u64 });
                return Ok(UpdateDeadline::Interrupt);
            }
            if thread_cpu_time().saturating_sub(cpu_start) >= cpu_limit {
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::Continue(CHECK_EVERY_TICKS))
        });

        let instance = match tokio::time::timeout(wall, skill.pre.instantiate_async(&mut store)).await {
            Ok(Ok(i)) => Ok(i),
            Ok(Err(e)) => Err(CallError::Setup(format!("cannot instantiate the component: {e:#}"))),
            Err(_) => Err(CallError::Timeout { limit_ms: limits.wall_time_ms }),
        };
        let result = match instance {
            Err(e) => Err(e),
            Ok(instance) => {
                let remaining = wall.saturating_sub(started.elapsed());
                match tokio::time::timeout(remaining, instance.call_execute(&mut store, &invocation.to_wit())).await {
                    Err(_) => Err(CallError::Timeout { limit_ms: limits.wall_time_ms }),
                    Ok(Err(e)) => Err(classify_trap(e, store.data_mut(), &limits, &stderr)),
                    Ok(Ok(Err(wit::SkillError::InvalidParams(m)))) => Err(CallError::InvalidParams(m)),
                    Ok(Ok(Err(wit::SkillError::Failed(m)))) => Err(CallError::Failed(m)),
                    Ok(Ok(Ok(r))) => Ok(SkillOutput::from_wit(r, &limits)),
                }
            }
        };
        let execute_end = Instant::now();
        let state = store.into_data();
        denials.extend(state.denials);
        denials.extend(state.net.denials.take());
        CallOutcome {
            result,
            denials,
            logs: state.logs,
            stdout: String::from_utf8_lossy(&stdout.contents()).into_owned(),
            stderr: String::from_utf8_lossy(&stderr.contents()).into_owned(),
            memory_peak_bytes: state.limiter.peak,
            elapsed_us: execute_end.duration_since(started).as_micros() as u64,
        }
    }
}

/// What one call is allowed: decided by the library from SKILL.md and the policy.
#[derive(Clone)]
pub struct CallGrant {
    pub skill: String,
    pub skill_hash: String,
    pub capabilities: CapabilitySet,
    pub limits: Limits,
    /// Values for path templates such as `$WORKSPACE`.
    pub paths: BTreeMap<String, String>,
    /// Needed only when the call holds `memory` or `session`; `None` keeps a call that
    /// needs neither from opening (and locking) the store.
    pub store: Option<Arc<dyn MemoryStore>>,
    pub namespace: String,
}

/// The call's input.
#[derive(Debug, Clone, Serialize)]
pub struct Invocation {
    pub session_id: String,
    pub step: u32,
    /// Validated JSON object text.
    pub params: String,
}

impl Invocation {
    fn to_wit(&self) -> wit::Invocation {
        wit::Invocation { session_id: self.session_id.clone(), step: self.step, params: self.params.clone() }
    }
}

/// Per-call store data: WASI built from the grant, host-interface state, accounting.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    net: network::NetworkGate,
    limiter: MemoryLimiter,
    host: memory::HostAccess,
    logs: Vec<LogLine>,
    denials: Vec<Denial>,
    /// Why the deadline callback stopped the guest, when it was not the CPU limit.
    stopped: Option<CallError>,
}

impl CallState {
    fn new(
        grant: &CallGrant,
        invocation: &Invocation,
        stdout: MemoryOutputPipe,
        stderr: MemoryOutputPipe,
        denials: &mut Vec<Denial>,
    ) -> Result<CallState> {
        let mut builder = WasiCtxBuilder::new();
        builder.stdout(stdout).stderr(stderr);
        filesystem::apply(&grant.capabilities.filesystem, &grant.paths, &mut builder, denials)?;
        env::apply(&grant.capabilities.env, &mut builder);
        Ok(CallState {
            wasi: builder.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            net: network::NetworkGate::new(grant.capabilities.network.clone()),
            limiter: MemoryLimiter { max: (grant.limits.memory_mb as usize) << 20, total: 0, peak: 0, hit: false },
            host: memory::HostAccess::new(grant, &invocation.session_id),
            logs: Vec::new(),
            denials: Vec::new(),
            stopped: None,
        })
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.net }
    }
}

impl bindings::skillhost::skill::types::Host for CallState {}

/// Linear memory cap over all memories of the instance; a grow past it traps with a
/// message naming the limit.
struct MemoryLimiter {
    max: usize,
    /// Bytes of linear memory in use, summed over memories (creation counts as a grow from 0).
    total: usize,
    peak: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = self.total.saturating_sub(current).saturating_add(desired);
        if total > self.max {
            self.hit = true;
            return Err(wasmtime::Error::msg(format!("memory limit of {} MiB exceeded", self.max >> 20)));
        }
        self.total = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES_PER_INSTANCE
    }
}

/// CPU time used by the calling thread (the guest runs on it between awaits).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we pass; CLOCK_THREAD_CPUTIME_ID is
    // supported on every Linux and macOS version we build for.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A right the skill used without holding it. The model reads `message`; the audit log
/// keeps the whole record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    pub capability: String,
    pub message: String,
}

/// What a skill returned, after the host's caps.
#[derive(Debug, Clone, Serialize)]
pub struct SkillOutput {
    pub output: String,
    pub status: Status,
    pub metadata: Vec<(String, String)>,
    pub new_memories: Vec<ProposedMemory>,
    /// Bytes cut from `output` by the output limit.
    pub truncated_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Success,
    Failure,
    RequireMore,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProposedMemory {
    pub kind: crate::memory::MemoryKind,
    pub content: String,
    pub priority: u8,
    pub tags: Vec<String>,
}

impl SkillOutput {
    fn from_wit(r: wit::SkillResult, limits: &Limits) -> SkillOutput {
        let cap = (limits.output_kb as usize) * 1024;
        let mut output = r.output;
        let mut truncated_bytes = 0;
        if output.len() > cap {
            let mut cut = cap;
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            truncated_bytes = output.len() - cut;
            output.truncate(cut);
            output.push_str(&format!(
                "\n[skillhost: output truncated, {truncated_bytes} bytes over the limit of {} KiB]",
                limits.output_kb
            ));
        }
        // Metadata counts against the same budget, separately: it is text for the model too.
        let mut metadata = Vec::new();
        let mut used = 0usize;
        let total = r.metadata.len();
        for (k, v) in r.metadata {
            used = used.saturating_add(k.len() + v.len());
            if used > cap {
                break;
            }
            metadata.push((k, v));
        }
        if metadata.len() < total {
            metadata.push((
                "skillhost.metadata_truncated".into(),
                format!("{} entries dropped over the limit of {} KiB", total - metadata.len(), limits.output_kb),
            ));
        }
        SkillOutput {
            output,
            status: match r.status {
                wit::Status::Success => Status::Success,
                wit::Status::Failure => Status::Failure,
                wit::Status::RequireMore => Status::RequireMore,
            },
            metadata,
            new_memories: r.new_memories.into_iter().map(memory::proposed_from_wit).collect(),
            truncated_bytes,
        }
    }
}

/// Why a call produced no result. `InvalidParams` and `Failed` come from the skill; the
/// others are the sandbox stopping it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "message", rename_all = "kebab-case")]
pub enum CallError {
    InvalidParams(String),
    Failed(String),
    CpuLimit(String),
    MemoryLimit(String),
    Timeout { limit_ms: u64 },
    Panic(String),
    Trap(String),
    Setup(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::InvalidParams(m) => write!(f, "invalid parameters: {m}"),
            CallError::Failed(m) => write!(f, "skill failed: {m}"),
            CallError::CpuLimit(m) => write!(f, "stopped by the CPU limit: {m}"),
            CallError::MemoryLimit(m) => write!(f, "stopped by the memory limit: {m}"),
            CallError::Timeout { limit_ms } => write!(f, "stopped by the wall-time limit of {limit_ms} ms"),
            CallError::Panic(m) => write!(f, "skill panicked: {m}"),
            CallError::Trap(m) => write!(f, "skill trapped: {m}"),
            CallError::Setup(m) => write!(f, "cannot start the skill: {m}"),
        }
    }
}

fn classify_trap(e: wasmtime::Error, state: &mut CallState, limits: &Limits, stderr: &MemoryOutputPipe) -> CallError {
    if let Some(reason) = state.stopped.take() {
        return reason;
    }
    if state.limiter.hit {
        return CallError::MemoryLimit(format!(
            "the skill tried to use more than {} MiB of linear memory",
            limits.memory_mb
        ));
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => {
            return CallError::CpuLimit(format!("the skill ran longer than its {} ms of CPU time", limits.cpu_time_ms));
        }
        Some(Trap::StackOverflow) => return CallError::Trap("stack overflow (infinite recursion?)".into()),
        _ => {}
    }
    let stderr = String::from_utf8_lossy(&stderr.contents()).into_owned();
    if let Some(pos) = stderr.find("panicked at") {
        let msg: String = stderr[pos..].lines().take(3).collect::<Vec<_>>().join(" ");
        return CallError::Panic(msg);
    }
    let mut msg = format!("{e:#}");
    if msg.len() > 2000 {
        msg.truncate(msg.floor_char_boundary(2000));
    }
    CallError::Trap(msg)
}

/// Everything about one call, for the CLI, the agent loop and the audit log.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub result: Result<SkillOutput, CallError>,
    pub denials: Vec<Denial>,
    pub logs: Vec<LogLine>,
    pub stdout: String,
    pub stderr: String,
    pub memory_peak_bytes: usize,
    pub elapsed_us: u64,
}

impl CallOutcome {
    fn failed_setup(e: anyhow::Error, denials: Vec<Denial>, started: Instant) -> CallOutcome {
        CallOutcome {
            result: Err(CallError::Setup(format!("{e:#}"))),
            denials,
            logs: Vec::new(),
            stdout: String::new(),
            stderr: String::new(),
            memory_peak_bytes: 0,
            elapsed_us: started.elapsed().as_micros() as u64,
        }
    }
}

/// `\0asm` + a layer byte tells a core module (layer 0) from a component (layer 1).
fn check_is_component(wasm: &[u8]) -> Result<()> {
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        anyhow::bail!("not a WebAssembly file (no \\0asm header); build the skill for wasm32-wasip2");
    }
    if wasm[6..8] != [1, 0] {
        anyhow::bail!(
            "this is a core WebAssembly module, not a component; build for the wasm32-wasip2 target (or wrap it with `wasm-tools component new`)"
        );
    }
    Ok(())
}

/// The component's imports, for the install report (`wasi:filesystem/preopens@0.2.x`...).
pub fn component_imports(engine: &Engine, component: &Component) -> Vec<String> {
    let mut names: Vec<String> = component.component_type().imports(engine).map(|(n, _)| n.to_string()).collect();
    names.sort();
    names
}

/// Map an import to the capability that governs it (None: always available, harmless).
/// `wasi:cli/environment` is not mapped: every std-based component imports it to read its
/// arguments at start-up, and it yields only the variables `env` grants.
pub fn capability_of_import(import: &str) -> Option<&'static str> {
    let name = import.split('@').next().unwrap_or(import);
    match name {
        n if n.starts_with("wasi:filesystem/") => Some("filesystem"),
        n if n.starts_with("wasi:http/outgoing-handler") => Some("network"),
        n if n.starts_with("wasi:sockets/") => Some("network"),
        "skillhost:skill/memory" => Some("memory"),
        "skillhost:skill/session" => Some("session"),
        _ => None,
    }
}
