//! The sandbox: one wasmtime [`Engine`] for the process, components compiled once into a
//! cache, and a fresh [`Store`] + WASI context per call, built from nothing and given only
//! the effective capabilities (declared AND granted).
//!
//! All of WASI 0.2 and wasi:http are linked for every component, so components from any
//! toolchain instantiate; what they reach is decided per call by the capability modules
//! in this directory, one file each (see [`capability`]); raw sockets are refused to all.
//! [`classify_import`] says, for every import, which of these applies.
//!
//! Many calls share one process: calls are admitted through a semaphore sized like the
//! instance pool (a call waits for a slot, then fails with "host busy"); CPU time is
//! accounted per call across polls and worker threads ([`cpu`]); the epoch callback yields
//! to the executor every tick so a busy guest never holds a worker thread; host imports
//! are async and run store work on the blocking pool. Limits: linear memory through a
//! [`ResourceLimiter`] (summed over all memories of the instance); CPU and wall time
//! checked in the epoch callback, plus a tokio timeout for the wall limit while the guest
//! waits in a host call (epochs do not fire then); output, metadata and new memories
//! capped after the call.

mod cache;
pub(crate) mod capability;
mod cpu;
mod denial;
mod imports;
mod lanes;
mod log;
mod ready;
pub(crate) mod sockets;
mod toolchain;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde::Serialize;
use tokio::sync::{Semaphore, SemaphorePermit};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub use crate::capabilities::memory::Absorbed;
pub use crate::capabilities::secrets::leak_scan::{LeakScanner, SecretValues};
pub use cache::{CacheSweep, CompileOutcome, ComponentBytes, SWEEP_GRACE, sweep as sweep_compile_cache};
pub use denial::{Denial, DenialKind};
pub use imports::{ImportClass, capability_of_import, classify_import, provided_interfaces};
pub use log::{LogLevel, LogLine};
pub use ready::MakeAhead;
pub use toolchain::{Toolchain, detect as detect_toolchain};

use crate::capabilities::{CapabilitySet, LeakAction, Limits};
use crate::memory::MemoryStore;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "skill",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

use bindings::SkillPre;
use bindings::skillhost::skill::types as wit;

/// Milliseconds between epoch ticks: the granularity of the CPU and wall checks and of a
/// busy guest's yields to the executor.
const EPOCH_TICK_MS: u64 = 10;
/// CPU time a busy guest runs between yields to the executor, at least.
const MIN_SLICE: Duration = Duration::from_millis(EPOCH_TICK_MS / 2);
/// Linear memories one instance may have (Rust components have one or two).
const MAX_MEMORIES_PER_INSTANCE: usize = 8;
/// Guest stdout/stderr kept per call (the rest is refused to the guest).
const STDIO_CAPACITY: usize = 64 * 1024;
/// Resource handles (streams, files, header maps, requests...) one call may hold at once:
/// they live in host memory, outside the guest's linear-memory limit.
pub const MAX_HANDLES_PER_CALL: usize = 1024;
/// Metadata pairs kept per call (empty pairs cost host memory and report size too).
pub const MAX_METADATA_ENTRIES: usize = 256;
/// Bytes of each pooled memory/table slot reset with memset (kept resident) between calls,
/// when the kernel can say which pages a call dirtied (`PAGEMAP_SCAN`, Linux 6.7): only
/// those are reset, so a small skill's next call takes no page faults. Without it the
/// first bytes of a slot are reset blindly, and more than a little costs more than it saves.
const KEEP_RESIDENT_SCANNED: usize = 1 << 20;
const KEEP_RESIDENT_BLIND: usize = 64 << 10;
/// Native stack kept for the host's frames beneath a guest's wasm stack (wasmtime's
/// default: a 2 MiB async stack for a 512 KiB wasm stack).
const HOST_STACK_HEADROOM: usize = 1536 << 10;

/// How a [`Runtime`] is sized.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeOptions {
    /// Calls running at once (instances in the pool). Further calls wait for a slot, up
    /// to their wall-time limit, then fail with "host busy".
    pub max_concurrent_calls: u32,
    /// Whether skills slow to instantiate get an instance made ahead of their next call
    /// (see [`MakeAhead`]; made-ahead instances hold pool slots of their own).
    pub make_ahead: MakeAhead,
    /// Linear memory all running guests may hold together, in MiB. A call reserves its
    /// memory limit from it before it starts (waiting like for a slot, then refused), so
    /// the host's guest memory stays under this whatever `max_concurrent_calls` is.
    pub memory_budget_mb: u64,
}

/// The default [`RuntimeOptions::memory_budget_mb`]: the default 64 calls at the default
/// 64 MiB limit fit; four calls at the 1 GiB ceiling take it all.
pub const DEFAULT_MEMORY_BUDGET_MB: u64 = 4096;

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            max_concurrent_calls: 64,
            make_ahead: MakeAhead::default(),
            memory_budget_mb: DEFAULT_MEMORY_BUDGET_MB,
        }
    }
}

/// One engine (with its instance pool and linker) per wasm stack size: wasmtime sizes the
/// stack per engine, not per store. The default size's engine always exists; the others
/// are made on the first call that needs them.
#[derive(Clone)]
struct StackTier {
    engine: Engine,
    linker: Arc<Linker<CallState>>,
}

/// The process-wide engines, linkers and compile cache.
pub struct Runtime {
    /// Indexed like [`Limits::STACK_TIERS_KB`]; `tiers[0]` is set at creation.
    tiers: [OnceLock<StackTier>; Limits::STACK_TIERS_KB.len()],
    tier_init: std::sync::Mutex<()>,
    cache: cache::CompileCache,
    ticker: Arc<AtomicBool>,
    admission: Semaphore,
    max_calls: u32,
    /// The guests' memory budget, one permit per MiB (see [`RuntimeOptions::memory_budget_mb`]).
    memory_budget: Semaphore,
    memory_budget_mb: u64,
    make_ahead: MakeAhead,
    /// Made-ahead instances this runtime may still hold (see [`ready`]).
    ahead_budget: Arc<AtomicUsize>,
    /// Host paths no mount may expose (see `filesystem`).
    protected: Vec<PathBuf>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.store(true, Ordering::Relaxed);
    }
}

/// A component ready to instantiate: linked once, instantiated per call in microseconds.
/// Linked for the default stack at once, for a larger stack on the first call that has it.
#[derive(Clone)]
pub struct PreparedSkill {
    pre: SkillPre<CallState>,
    component: Component,
    larger: Arc<[OnceLock<SkillPre<CallState>>; Limits::STACK_TIERS_KB.len()]>,
    /// Copies of `pre` for the other CPUs (see [`lanes`]).
    copies: Arc<lanes::Copies>,
    ready: Arc<ready::ReadySlot>,
}

impl PreparedSkill {
    /// Whether an instance is waiting, made ahead, for this skill's next call.
    pub fn has_instance_made_ahead(&self) -> bool {
        self.ready.has_one()
    }

    /// How many per-CPU copies of the component exist besides the first (see [`lanes`]).
    pub fn lane_copies(&self) -> usize {
        self.copies.made()
    }
}

impl StackTier {
    /// An engine whose guests get `stack_kb` of wasm stack, pooled for `calls` calls at
    /// once, with every interface linked, and an epoch ticker stopped by `stop`.
    fn new(stack_kb: u64, calls: u32, stop: &Arc<AtomicBool>) -> Result<StackTier> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let stack = (stack_kb as usize) << 10;
        config.max_wasm_stack(stack);
        // The host's own frames below the guest's keep wasmtime's default headroom.
        config.async_stack_size(stack + HOST_STACK_HEADROOM);
        // No component-model-async in the contract: skip the per-store concurrency state.
        config.concurrency_support(false);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(calls);
        pool.total_memories(calls * 2);
        pool.total_tables(calls * 4);
        pool.total_stacks(calls);
        pool.max_memory_size((Limits::CEILING.memory_mb as usize) << 20);
        // Reset the first pages of a slot with memset instead of madvise: a small skill
        // then reuses warm pages instead of faulting them in again on every call.
        let keep_resident = if kernel_has_pagemap_scan() { KEEP_RESIDENT_SCANNED } else { KEEP_RESIDENT_BLIND };
        pool.linear_memory_keep_resident(keep_resident);
        pool.table_keep_resident(keep_resident);
        pool.pagemap_scan(wasmtime::Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(anyhow::Error::from).context("cannot create the wasmtime engine")?;

        let mut linker: Linker<CallState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::skillhost::skill::types::add_to_linker::<CallState, TypesOnly>(&mut linker, |_| TypesOnly)?;
        log::add_to_linker(&mut linker)?;
        capability::link_all(&mut linker)?;

        let (stop, weak) = (stop.clone(), engine.weak());
        std::thread::Builder::new().name(format!("skillhost-epoch-{stack_kb}k")).spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(EPOCH_TICK_MS));
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })?;
        Ok(StackTier { engine, linker: Arc::new(linker) })
    }
}

/// A copy of `component` of its own (its own reference counts and registries) for
/// `engine`, linked: serialized and deserialized in this process.
fn copy_linked(engine: &Engine, linker: &Linker<CallState>, component: &Component) -> Result<SkillPre<CallState>> {
    let bytes = component.serialize().map_err(anyhow::Error::from)?;
    // SAFETY: the bytes were serialized just now, in this process, from a component this
    // runtime compiled or loaded from its own sealed cache; the engines it is copied to
    // differ from its own at most in stack size, which compiled code does not depend on.
    let copy = unsafe { Component::deserialize(engine, &bytes) }.map_err(anyhow::Error::from)?;
    link(linker, &copy)
}

/// Link `component` against the skill world.
fn link(linker: &Linker<CallState>, component: &Component) -> Result<SkillPre<CallState>> {
    let pre = linker.instantiate_pre(component).map_err(|e| {
        anyhow::anyhow!("the component cannot be linked against the skill world: {e:#}\nRebuild it against wit/ (package skillhost:skill@0.1.0).")
    })?;
    SkillPre::new(pre).map_err(|e| {
        anyhow::anyhow!("the component does not export `execute` from the skill world: {e:#}\nBuild it with skillhost-sdk's export_skill! or against wit/.")
    })
}

impl Runtime {
    /// `cache_dir` holds compiled components. Sized for 64 concurrent calls.
    pub fn new(cache_dir: PathBuf) -> Result<Runtime> {
        Runtime::with_options(cache_dir, RuntimeOptions::default())
    }

    pub fn with_options(cache_dir: PathBuf, options: RuntimeOptions) -> Result<Runtime> {
        let calls = options.max_concurrent_calls.max(1);
        let ahead = if options.make_ahead == MakeAhead::Never { 0 } else { ready::MAX_MADE_AHEAD };
        let ticker = Arc::new(AtomicBool::new(false));
        let default_tier = StackTier::new(Limits::STACK_TIERS_KB[0], calls + ahead as u32, &ticker)?;
        let cache = cache::CompileCache::new(cache_dir, &default_tier.engine);
        let tiers =
            std::array::from_fn(|i| if i == 0 { OnceLock::from(default_tier.clone()) } else { OnceLock::new() });
        Ok(Runtime {
            tiers,
            tier_init: std::sync::Mutex::new(()),
            cache,
            ticker,
            admission: Semaphore::new(calls as usize),
            max_calls: calls,
            memory_budget: Semaphore::new(budget_permits(options.memory_budget_mb)),
            memory_budget_mb: options.memory_budget_mb,
            make_ahead: options.make_ahead,
            ahead_budget: Arc::new(AtomicUsize::new(ahead)),
            protected: Vec::new(),
        })
    }

    fn default_tier(&self) -> &StackTier {
        self.tiers[0].get().expect("the default stack tier is made with the runtime")
    }

    /// The engine for `stack_kb` (a tier of [`Limits::STACK_TIERS_KB`]), made if needed.
    fn tier(&self, index: usize) -> Result<&StackTier> {
        if let Some(t) = self.tiers[index].get() {
            return Ok(t);
        }
        let _one = self.tier_init.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = self.tiers[index].get() {
            return Ok(t);
        }
        let ahead = if self.make_ahead == MakeAhead::Never { 0 } else { ready::MAX_MADE_AHEAD as u32 };
        let tier = StackTier::new(Limits::STACK_TIERS_KB[index], self.max_calls + ahead, &self.ticker)?;
        Ok(self.tiers[index].get_or_init(|| tier))
    }

    /// Refuse every call whose mounts contain or lie inside one of `paths` (canonicalized
    /// here; the skillhost home and the project policy file).
    pub fn protecting(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Runtime {
        self.protected = paths.into_iter().map(|p| std::fs::canonicalize(&p).unwrap_or(p)).collect();
        self
    }

    /// The engine of the default stack size.
    pub fn engine(&self) -> &Engine {
        &self.default_tier().engine
    }

    /// Seal compile-cache entries with `key` (the home's host key, which the library has
    /// loaded already) rather than loading it a second time.
    pub fn sealing_with(mut self, key: Option<crate::fsutil::SealKey>) -> Runtime {
        self.cache.use_key(key);
        self
    }

    /// Calls this runtime runs at once.
    pub fn max_concurrent_calls(&self) -> u32 {
        self.max_calls
    }

    /// Compile `wasm` (at install) and store it in the cache, or reuse the sealed entry these
    /// bytes already have. Rejects anything that is not a component with a message saying
    /// what it is and what to do.
    pub fn compile(&self, wasm: &[u8], progress: &dyn Fn(&str)) -> Result<(Component, CompileOutcome)> {
        check_is_component(wasm)?;
        self.cache.compile(self.engine(), wasm, progress).map_err(explain_compile_error)
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
        self.prepare_cached(sha256, &|| Ok(wasm.to_vec()), progress)
    }

    /// [`Runtime::prepare`] that reads the component only when the cache must compile it:
    /// a warm start maps the compiled entry and never touches the component's bytes.
    /// `wasm()` must return the bytes whose sha256 is `sha256` (verified by the caller).
    pub fn prepare_cached(
        &self,
        sha256: &str,
        wasm: cache::ComponentBytes<'_>,
        progress: &dyn Fn(&str),
    ) -> Result<(PreparedSkill, CompileOutcome)> {
        let checked = || {
            let bytes = wasm()?;
            check_is_component(&bytes)?;
            Ok(bytes)
        };
        let (component, outcome) =
            self.cache.load(self.engine(), &checked, sha256, progress).map_err(explain_compile_error)?;
        let pre = link(&self.default_tier().linker, &component)?;
        let ready = Arc::new(ready::ReadySlot::new());
        let image = component.image_range();
        let copy = image.end.addr() - image.start.addr() <= lanes::MAX_COPIED_BYTES;
        let copies = Arc::new(lanes::Copies::new(lanes::count(), copy));
        Ok((PreparedSkill { pre, component, larger: Arc::new(Default::default()), copies, ready }, outcome))
    }

    /// `skill` linked for the stack tier `index`: the default one, or (first call of this
    /// skill with this stack) its compiled code handed to that tier's engine and linked,
    /// on the blocking pool since a large component takes milliseconds to copy.
    async fn pre_for(&self, skill: &PreparedSkill, index: usize) -> Result<SkillPre<CallState>> {
        if index == 0 {
            return Ok(self.lane_pre(skill));
        }
        if let Some(pre) = skill.larger[index].get() {
            return Ok(pre.clone());
        }
        let tier = self.tier(index)?;
        let (component, engine, linker) = (skill.component.clone(), tier.engine.clone(), tier.linker.clone());
        let pre = tokio::task::spawn_blocking(move || copy_linked(&engine, &linker, &component))
            .await
            .map_err(|e| anyhow::anyhow!("linking for a larger stack stopped: {e}"))??;
        Ok(skill.larger[index].get_or_init(|| pre).clone())
    }

    /// The default tier's `skill` for the CPU this call runs on: its own copy if made, else
    /// copy 0, starting the copy on the blocking pool from the skill's third call on.
    fn lane_pre(&self, skill: &PreparedSkill) -> SkillPre<CallState> {
        let lane = lanes::current(lanes::count());
        if let Some(pre) = skill.copies.get(lane) {
            return pre.clone();
        }
        if skill.ready.repeated() && skill.copies.claim(lane) {
            let (copies, component, tier) =
                (skill.copies.clone(), skill.component.clone(), self.default_tier().clone());
            tokio::task::spawn_blocking(move || {
                if let Ok(pre) = copy_linked(&tier.engine, &tier.linker, &component) {
                    copies.set(lane, pre);
                }
            });
        }
        skill.pre.clone()
    }

    /// The same runtime with a guest memory budget of `mb` MiB (before any call runs).
    pub fn with_memory_budget(mut self, mb: u64) -> Runtime {
        self.memory_budget = Semaphore::new(budget_permits(mb));
        self.memory_budget_mb = mb;
        self
    }

    /// Reserve `mb` MiB of the guests' memory budget, waiting at most `wait`.
    async fn reserve_memory(&self, mb: u64, wait: Duration) -> Result<SemaphorePermit<'_>, CallError> {
        let refused = |waited: Duration| CallError::MemoryBudget {
            asked_mb: mb,
            budget_mb: self.memory_budget_mb,
            waited_ms: waited.as_millis() as u64,
        };
        if mb > self.memory_budget_mb {
            return Err(refused(Duration::ZERO));
        }
        let permits = budget_permits(mb) as u32;
        if let Ok(permit) = self.memory_budget.try_acquire_many(permits) {
            return Ok(permit);
        }
        match tokio::time::timeout(wait, self.memory_budget.acquire_many(permits)).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(refused(wait)),
        }
    }

    /// Wait for a call slot, at most `wait`.
    async fn admit(&self, wait: Duration) -> Result<SemaphorePermit<'_>, CallError> {
        if let Ok(permit) = self.admission.try_acquire() {
            return Ok(permit);
        }
        match tokio::time::timeout(wait, self.admission.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(CallError::Busy { running: self.max_calls, waited_ms: wait.as_millis() as u64 }),
        }
    }

    /// Run one call in a fresh store. The call first waits for a slot (at most its wall
    /// limit); its wall limit then counts from the start of its run. The future is `Send`:
    /// calls may run on any worker of a multi-threaded runtime.
    pub async fn call(&self, skill: &PreparedSkill, grant: CallGrant, invocation: Invocation) -> CallOutcome {
        let started = Instant::now();
        let limits = grant.limits;
        let (cpu_limit, wall) = (Duration::from_millis(limits.cpu_time_ms), Duration::from_millis(limits.wall_time_ms));
        let _slot = match self.admit(wall).await {
            Ok(p) => p,
            Err(e) => return CallOutcome::failed(e, Vec::new(), started),
        };
        // Its whole memory limit, held until the call ends: the sum over running calls
        // never exceeds the budget. The wait for it shares the wait for the slot.
        let _memory = match self.reserve_memory(limits.memory_mb, wall.saturating_sub(started.elapsed())).await {
            Ok(p) => p,
            Err(e) => return CallOutcome::failed(e, Vec::new(), started),
        };
        let running = Instant::now();
        let mut denials = Vec::new();
        let stdout = MemoryOutputPipe::new(STDIO_CAPACITY);
        let stderr = MemoryOutputPipe::new(STDIO_CAPACITY);
        let state =
            match CallState::new(&grant, &invocation, &self.protected, stdout.clone(), stderr.clone(), &mut denials) {
                Ok(s) => s,
                Err(e) => return CallOutcome::failed(CallError::Setup(format!("{e:#}")), denials, started),
            };
        let tier = Limits::STACK_TIERS_KB.iter().position(|t| *t == limits.stack_kb).unwrap_or(0);
        let pre = match self.pre_for(skill, tier).await {
            Ok(pre) => pre,
            Err(e) => {
                let e = CallError::Setup(format!("cannot prepare a {} KiB stack: {e:#}", limits.stack_kb));
                return CallOutcome::failed(e, denials, started);
            }
        };
        // An instance made ahead (never run, no capability) takes this call's state before
        // any export runs; one whose instantiation used more memory than this call may have
        // is dropped, and the inline instantiation below reports the limit as before.
        let (mut store, made_ahead) = match skill.ready.take(tier) {
            Some(made) if made.store.data().limiter.total <= state.limiter.max => {
                let mut store = made.store;
                store.data_mut().adopt(state);
                (store, Some(made.instance))
            }
            _ => (Store::new(pre.engine(), state), None),
        };
        store.limiter(|s| &mut s.limiter);
        let meter = Arc::new(cpu::CpuMeter::default());
        let deadline_meter = meter.clone();
        store.set_epoch_deadline(1);
        let mut slice_start = Duration::ZERO;
        store.epoch_deadline_callback(move |mut ctx| {
            // Epochs count elapsed time, including time spent waiting in host calls; the
            // CPU limit is checked against the CPU time this call's polls used.
            if running.elapsed() >= wall {
                ctx.data_mut().stopped = Some(CallError::Timeout { limit_ms: wall.as_millis() as u64 });
                return Ok(UpdateDeadline::Interrupt);
            }
            let used = deadline_meter.used();
            if used >= cpu_limit {
                ctx.data_mut().stopped = Some(CallError::CpuLimit(format!(
                    "the skill ran longer than its {} ms of CPU time",
                    cpu_limit.as_millis()
                )));
                return Ok(UpdateDeadline::Interrupt);
            }
            // Let the other tasks on this worker run, once this call has had its slice: a
            // guest resumed after another one's slice finds its deadline already passed,
            // and yielding again at once would starve it behind the others.
            if used.saturating_sub(slice_start) < MIN_SLICE {
                return Ok(UpdateDeadline::Continue(1));
            }
            slice_start = used;
            Ok(UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now())))
        });

        let mut inline_instantiation = None;
        let result = {
            let run = async {
                let instance = match made_ahead {
                    Some(instance) => instance,
                    None => {
                        let instantiating = Instant::now();
                        let instance = pre
                            .instantiate_async(&mut store)
                            .await
                            .map_err(|e| CallError::Setup(format!("cannot instantiate the component: {e:#}")))?;
                        inline_instantiation = Some(instantiating.elapsed());
                        instance
                    }
                };
                match instance.call_execute(&mut store, &invocation.to_wit()).await {
                    Err(e) => Err(classify_trap(e, store.data_mut(), &limits, &stderr)),
                    Ok(Err(wit::SkillError::InvalidParams(m))) => Err(CallError::InvalidParams(m)),
                    Ok(Err(wit::SkillError::Failed(m))) => Err(CallError::Failed(m)),
                    Ok(Ok(r)) => Ok(SkillOutput::from_wit(r, &limits)),
                }
            };
            let mut run = std::pin::pin!(run);
            let metered = cpu::Metered { inner: run.as_mut(), meter: meter.clone() };
            match tokio::time::timeout(wall, metered).await {
                Err(_) => Err(CallError::Timeout { limit_ms: limits.wall_time_ms }),
                Ok(r) => r,
            }
        };
        let execute_end = Instant::now();
        let mut state = store.into_data();
        skill.ready.called(inline_instantiation);
        skill.ready.refill(self.make_ahead, &self.ahead_budget, tier, pre);
        // Everything handed back is scrubbed of held values (secrets, granted env values)
        // before the denials are collected: a redaction is itself a denial.
        let caps = &state.caps;
        let leaked = std::cell::Cell::new(false);
        let redact = |what: &str, mut text: String| {
            if caps.redact(what, &mut text) {
                leaked.set(true);
            }
            text
        };
        let result = result.map(|mut out| {
            out.output = redact("the output", std::mem::take(&mut out.output));
            for (k, v) in &mut out.metadata {
                *k = redact("a metadata key", std::mem::take(k));
                *v = redact("metadata", std::mem::take(v));
            }
            for m in &mut out.new_memories {
                m.content = redact("a proposed memory", std::mem::take(&mut m.content));
                for t in &mut m.tags {
                    *t = redact("a memory tag", std::mem::take(t));
                }
            }
            out
        });
        let result = result.map_err(|e| match e {
            CallError::Failed(m) => CallError::Failed(redact("the error", m)),
            CallError::InvalidParams(m) => CallError::InvalidParams(redact("the error", m)),
            CallError::Trap(m) => CallError::Trap(redact("the error", m)),
            // A panic message is the guest's own text (quoted from its stderr), like a trap's.
            CallError::Panic(m) => CallError::Panic(redact("the error", m)),
            other => other,
        });
        let logs: Vec<LogLine> = std::mem::take(&mut state.logs.lines)
            .into_iter()
            .map(|l| LogLine { message: redact("a log line", l.message), ..l })
            .collect();
        let stdout = redact("stdout", String::from_utf8_lossy(&stdout.contents()).into_owned());
        let stderr = redact("stderr", String::from_utf8_lossy(&stderr.contents()).into_owned());
        denials.extend(state.caps.take_denials());
        // The policy may fail a call that tried to hand back a held value at all, rather
        // than pass on its (redacted) result.
        let result = match result {
            Ok(_)
            | Err(CallError::Failed(_))
            | Err(CallError::InvalidParams(_))
            | Err(CallError::Trap(_))
            | Err(CallError::Panic(_))
                if leaked.get() && grant.secret_values.leak_action() == LeakAction::Fail =>
            {
                Err(CallError::Failed(
                    "the skill tried to hand back a value the host holds for it (a secret or a granted environment value; it is redacted everywhere), and the policy fails such calls ([secrets] on_leak = \"fail\")".into(),
                ))
            }
            other => other,
        };
        CallOutcome {
            result,
            denials,
            logs,
            stdout,
            stderr,
            memory_peak_bytes: state.limiter.peak,
            cpu_time_us: meter.used().as_micros() as u64,
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
    /// Values of the effective `secrets` (the library reads them from the home's store).
    pub secret_values: SecretValues,
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

/// `skillhost:skill/types` has no functions: it is linked with no state at all.
struct TypesOnly;

impl wasmtime::component::HasData for TypesOnly {
    type Data<'a> = TypesOnly;
}

impl wit::Host for TypesOnly {}

/// Per-call store data: the WASI core, each capability's slice, accounting.
pub struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) caps: capability::CapabilityStates,
    limiter: MemoryLimiter,
    logs: log::LogBuffer,
    /// Why the deadline callback stopped the guest.
    stopped: Option<CallError>,
}

impl CallState {
    fn new(
        grant: &CallGrant,
        invocation: &Invocation,
        protected: &[PathBuf],
        stdout: MemoryOutputPipe,
        stderr: MemoryOutputPipe,
        denials: &mut Vec<Denial>,
    ) -> Result<CallState> {
        let mut builder = WasiCtxBuilder::new();
        builder.stdout(stdout).stderr(stderr);
        // Raw sockets are refused to every skill, whatever wasmtime's defaults: no TCP, no
        // UDP, no name lookup, and no address passes the check.
        builder
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        let caps = capability::prepare_all(grant, invocation, protected, &mut builder, denials)?;
        Ok(CallState {
            wasi: builder.build(),
            table: bounded_table(),
            caps,
            limiter: MemoryLimiter { max: (grant.limits.memory_mb as usize) << 20, total: 0, peak: 0, hit: false },
            logs: log::LogBuffer::new(&grant.limits),
            stopped: None,
        })
    }
}

impl CallState {
    /// The state a made-ahead instance is instantiated in: no capability, no grant.
    fn with_nothing() -> Result<CallState> {
        let grant = CallGrant {
            skill: String::new(),
            skill_hash: String::new(),
            capabilities: CapabilitySet::default(),
            limits: Limits::CEILING,
            paths: BTreeMap::new(),
            store: None,
            namespace: String::new(),
            secret_values: SecretValues::default(),
        };
        let invocation = Invocation { session_id: String::new(), step: 0, params: "{}".into() };
        let sink = || MemoryOutputPipe::new(1024);
        let mut denials = Vec::new();
        CallState::new(&grant, &invocation, &[], sink(), sink(), &mut denials)
    }

    /// Take `call`'s state for a made-ahead instance: everything but what instantiation
    /// created (resource handles, memory in use).
    fn adopt(&mut self, mut call: CallState) {
        call.table = std::mem::replace(&mut self.table, bounded_table());
        call.limiter.total = self.limiter.total;
        call.limiter.peak = self.limiter.peak;
        *self = call;
    }
}

fn bounded_table() -> ResourceTable {
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_HANDLES_PER_CALL);
    table
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

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

/// Permits of a memory budget of `mb` MiB (a semaphore holds at most `u32::MAX >> 3`).
fn budget_permits(mb: u64) -> usize {
    mb.min(Semaphore::MAX_PERMITS as u64).min(u32::MAX as u64 >> 3) as usize
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
            if used > cap || metadata.len() >= MAX_METADATA_ENTRIES {
                break;
            }
            metadata.push((k, v));
        }
        if metadata.len() < total {
            metadata.push((
                "skillhost.metadata_truncated".into(),
                format!(
                    "{} entries dropped over the limit of {} KiB or {MAX_METADATA_ENTRIES} entries",
                    total - metadata.len(),
                    limits.output_kb
                ),
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
            new_memories: r
                .new_memories
                .into_iter()
                .map(crate::capabilities::memory::enforce::proposed_from_wit)
                .collect(),
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
    Timeout {
        limit_ms: u64,
    },
    /// No call slot was free within the call's wall limit: the host, not the skill, was
    /// the problem, and the same call may succeed when retried.
    Busy {
        running: u32,
        waited_ms: u64,
    },
    /// The call's memory limit did not fit in the host's guest memory budget (what the
    /// running calls had not reserved) within its wait, or is larger than the whole budget.
    MemoryBudget {
        asked_mb: u64,
        budget_mb: u64,
        waited_ms: u64,
    },
    Panic(String),
    Trap(String),
    Setup(String),
    /// The caller gave up on the call (an MCP client's `notifications/cancelled`, a
    /// dropped HTTP request); the guest was stopped at its next yield.
    Cancelled,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::InvalidParams(m) => write!(f, "invalid parameters: {m}"),
            CallError::Failed(m) => write!(f, "skill failed: {m}"),
            CallError::CpuLimit(m) => write!(f, "stopped by the CPU limit: {m}"),
            CallError::MemoryLimit(m) => write!(f, "stopped by the memory limit: {m}"),
            CallError::Timeout { limit_ms } => write!(f, "stopped by the wall-time limit of {limit_ms} ms"),
            CallError::Busy { running, waited_ms } => {
                write!(f, "host busy: {running} calls running; retry later (no slot was free within {waited_ms} ms)")
            }
            CallError::MemoryBudget { asked_mb, budget_mb, .. } if asked_mb > budget_mb => write!(
                f,
                "refused: the skill's memory limit of {asked_mb} MiB is over the host's memory budget for all guests ({budget_mb} MiB); lower its memory_mb or raise the budget"
            ),
            CallError::MemoryBudget { asked_mb, budget_mb, waited_ms } => write!(
                f,
                "host memory busy: the running calls hold the {budget_mb} MiB memory budget for guests and this call's {asked_mb} MiB did not fit within {waited_ms} ms; retry later"
            ),
            CallError::Panic(m) => write!(f, "skill panicked: {m}"),
            CallError::Trap(m) => write!(f, "skill trapped: {m}"),
            CallError::Setup(m) => write!(f, "cannot start the skill: {m}"),
            CallError::Cancelled => write!(f, "cancelled by the caller before it finished"),
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
        Some(Trap::StackOverflow) => {
            return CallError::Trap(format!(
                "stack overflow: the skill used more than its {} KiB of wasm stack (infinite recursion? A skill that recurses deeply may ask for up to {} KiB with `limits: stack_kb`)",
                limits.stack_kb,
                Limits::CEILING.stack_kb
            ));
        }
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
    // A runtime's own report of what went wrong (an uncaught exception, an abort message)
    // is on stderr; the trap alone says only "unreachable".
    if let Some(tail) = stderr_tail(&stderr) {
        msg.push_str("\nthe guest's stderr ended with:\n");
        msg.push_str(&tail);
    }
    CallError::Trap(msg)
}

/// Bytes of the guest's stderr quoted in a trap message, at most.
const STDERR_TAIL_BYTES: usize = 1024;

/// The last lines of `stderr` (at most [`STDERR_TAIL_BYTES`], whole lines where possible).
fn stderr_tail(stderr: &str) -> Option<String> {
    let trimmed = stderr.trim_end();
    if trimmed.is_empty() {
        return None;
    }
    let mut start = trimmed.len().saturating_sub(STDERR_TAIL_BYTES);
    start = trimmed.ceil_char_boundary(start);
    if start > 0
        && let Some(nl) = trimmed[start..].find('\n')
        && start + nl + 1 < trimmed.len()
    {
        start += nl + 1;
    }
    Some(trimmed[start..].to_string())
}

/// Everything about one call, for the CLI, the agent loop and the audit log.
#[derive(Debug, Clone, Serialize)]
pub struct CallOutcome {
    #[serde(serialize_with = "ser_result")]
    pub result: Result<SkillOutput, CallError>,
    pub denials: Vec<Denial>,
    pub logs: Vec<LogLine>,
    pub stdout: String,
    pub stderr: String,
    pub memory_peak_bytes: usize,
    /// CPU time the call's guest code used (summed over the polls of its future).
    pub cpu_time_us: u64,
    pub elapsed_us: u64,
}

impl CallOutcome {
    /// A call that ended before the sandbox ran anything.
    pub(crate) fn refused(e: CallError) -> CallOutcome {
        CallOutcome::failed(e, Vec::new(), Instant::now())
    }

    fn failed(e: CallError, denials: Vec<Denial>, started: Instant) -> CallOutcome {
        CallOutcome {
            result: Err(e),
            denials,
            logs: Vec::new(),
            stdout: String::new(),
            stderr: String::new(),
            memory_peak_bytes: 0,
            cpu_time_us: 0,
            elapsed_us: started.elapsed().as_micros() as u64,
        }
    }
}

/// Add the way out to compile errors a toolchain option causes. The skill world is
/// synchronous: a component built for the component-model async ABI (QuickJS's default)
/// fails validation with a parser message that names a WebAssembly feature, not the fix.
fn explain_compile_error(e: anyhow::Error) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("component model async") {
        return anyhow::anyhow!(
            "{text}\nThe component uses the component-model async ABI, which skillhost:skill@0.1.0 does not run: rebuild it synchronously (componentize-qjs: add `--sync`; componentize-js, componentize-py and wit-bindgen build synchronous components by default)"
        );
    }
    e
}

/// Linux 6.7 or later (wasmtime's `Enabled::Auto` uses `PAGEMAP_SCAN` there).
fn kernel_has_pagemap_scan() -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 7)
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

#[cfg(test)]
mod tests {
    use super::stderr_tail;

    #[test]
    fn the_stderr_tail_is_capped_to_whole_last_lines() {
        assert_eq!(stderr_tail("  \n"), None);
        assert_eq!(
            stderr_tail("Traceback:\n  line 3\nKeyError: 'x'\n").as_deref(),
            Some("Traceback:\n  line 3\nKeyError: 'x'")
        );
        let long: String = (0..500).map(|i| format!("line {i} é\n")).collect();
        let tail = stderr_tail(&long).unwrap();
        assert!(tail.len() <= 1024 && tail.starts_with("line ") && tail.ends_with("line 499 é"), "{tail}");
    }
}

/// A result as `{"ok": ...}` or `{"error": ...}`.
fn ser_result<S: serde::Serializer>(r: &Result<SkillOutput, CallError>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "lowercase")]
    enum Tagged<'a> {
        Ok(&'a SkillOutput),
        Error(&'a CallError),
    }
    match r {
        Ok(o) => Tagged::Ok(o).serialize(s),
        Err(e) => Tagged::Error(e).serialize(s),
    }
}
