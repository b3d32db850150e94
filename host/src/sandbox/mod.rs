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

mod admission;
mod cache;
mod call;
pub(crate) mod capability;
mod cpu;
pub(crate) mod denial;
mod imports;
mod lanes;
mod log;
mod outcome;
mod ready;
pub(crate) mod sockets;
mod toolchain;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use crate::capabilities::memory::Absorbed;
pub use crate::capabilities::secrets::leak_scan::{LeakScanner, SecretValues};
pub use admission::AdmissionStats;
pub use cache::{CacheSweep, CompileOutcome, ComponentBytes, SWEEP_GRACE, sweep as sweep_compile_cache};
pub use call::{CallGrant, CallState, Invocation};
pub use denial::{Denial, DenialKind};
pub use imports::{ImportClass, capability_of_import, classify_import, provided_interfaces};
pub use log::{LogLevel, LogLine};
pub use outcome::{CallError, CallOutcome, ProposedMemory, SkillOutput, Status};
pub use ready::MakeAhead;
pub use toolchain::{Toolchain, detect as detect_toolchain};

use crate::capabilities::Limits;

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
    /// Which skills get an instance made ahead of their next call, and where (see
    /// [`MakeAhead`]; made-ahead instances hold pool slots of their own).
    pub make_ahead: MakeAhead,
    /// Linear memory all running guests may hold together, in MiB. A call reserves its
    /// memory limit from it before it starts (waiting like for a slot, then refused), so
    /// the host's guest memory stays under this whatever `max_concurrent_calls` is.
    pub memory_budget_mb: u64,
}

/// A snapshot of a [`Runtime`]'s pool and budgets (see [`Runtime::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeStats {
    pub admission: AdmissionStats,
    /// Instances made ahead of a call and not yet taken (each holds a pool slot).
    pub made_ahead: usize,
    /// MiB of the guests' memory budget reserved by running calls.
    pub memory_reserved_mb: u64,
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
    admission: admission::Admission,
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
            admission: admission::Admission::new(calls as usize),
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

    /// What the runtime holds now, for metrics: call slots running and waited for,
    /// instances made ahead, the guests' memory budget reserved.
    pub fn stats(&self) -> RuntimeStats {
        let ahead_max = if self.make_ahead == MakeAhead::Never { 0 } else { ready::MAX_MADE_AHEAD };
        let budget = budget_permits(self.memory_budget_mb);
        RuntimeStats {
            admission: self.admission.stats(),
            made_ahead: ahead_max.saturating_sub(self.ahead_budget.load(Ordering::Relaxed)),
            memory_reserved_mb: budget.saturating_sub(self.memory_budget.available_permits()) as u64,
            memory_budget_mb: self.memory_budget_mb,
        }
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
}

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

/// `skillhost:skill/types` has no functions: it is linked with no state at all.
struct TypesOnly;

impl wasmtime::component::HasData for TypesOnly {
    type Data<'a> = TypesOnly;
}

impl wit::Host for TypesOnly {}

/// Permits of a memory budget of `mb` MiB (a semaphore holds at most `u32::MAX >> 3`).
fn budget_permits(mb: u64) -> usize {
    mb.min(Semaphore::MAX_PERMITS as u64).min(u32::MAX as u64 >> 3) as usize
}
