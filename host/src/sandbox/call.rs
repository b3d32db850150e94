//! One call, in stages: [`Runtime::call`] admits it (a slot and its memory, within its
//! wall limit), builds its state (a WASI context from nothing plus each capability's slice),
//! takes an instance (one made ahead, or instantiated now), runs the export under the CPU
//! and wall limits, and scrubs what comes back of the values the host holds for it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use tokio::sync::SemaphorePermit;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::SkillPre;
use super::log::LogLine;
use super::outcome::{CallError, CallOutcome, SkillOutput};
use super::{
    Denial, MAX_HANDLES_PER_CALL, MAX_MEMORIES_PER_INSTANCE, MIN_SLICE, PreparedSkill, Runtime, STDIO_CAPACITY,
    budget_permits, capability, cpu, log, wit,
};
use crate::capabilities::secrets::leak_scan::SecretValues;
use crate::capabilities::{CapabilitySet, LeakAction, Limits};
use crate::memory::MemoryStore;

impl Runtime {
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

    /// Admit: a call slot, then the call's whole memory limit from the budget, held until
    /// the call ends (the sum over running calls never exceeds the budget). Both waits
    /// share the call's wall limit.
    async fn admit_call(
        &self,
        limits: &Limits,
        queue_wait: Option<Duration>,
        started: Instant,
    ) -> Result<(SemaphorePermit<'_>, SemaphorePermit<'_>), CallError> {
        let wall = Duration::from_millis(limits.wall_time_ms);
        let slot = self.admit(queue_wait.map_or(wall, |q| q.min(wall))).await?;
        let memory = self.reserve_memory(limits.memory_mb, wall.saturating_sub(started.elapsed())).await?;
        Ok((slot, memory))
    }

    /// Run one call in a fresh store. The call first waits for a slot (at most its wall
    /// limit); its wall limit then counts from the start of its run. The future is `Send`:
    /// calls may run on any worker of a multi-threaded runtime.
    pub async fn call(&self, skill: &PreparedSkill, grant: CallGrant, invocation: Invocation) -> CallOutcome {
        let started = Instant::now();
        let limits = grant.limits;
        let _admitted = match self.admit_call(&limits, invocation.queue_wait, started).await {
            Ok(permits) => permits,
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
        let (mut store, made_ahead, pre) = match self.store_for(skill, tier, state).await {
            Ok(taken) => taken,
            Err(e) => return CallOutcome::failed(e, denials, started),
        };
        let meter = watch_limits(&mut store, &limits, running);
        let (result, inline_instantiation) =
            run_export(&mut store, made_ahead, &pre, &invocation, &limits, &stderr, &meter).await;
        let execute_end = Instant::now();
        let mut state = store.into_data();
        skill.ready.called(inline_instantiation);
        skill.ready.refill(self.make_ahead, &self.ahead_budget, tier, pre);
        let (result, logs, stdout, stderr) = scrub(&mut state, result, &stdout, &stderr, &grant);
        denials.extend(state.caps.take_denials());
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

    /// Instance: the store for this call, with an instance made ahead when one fits. A
    /// made-ahead instance (never run, no capability) takes this call's state before any
    /// export runs; one whose instantiation used more memory than this call may have is
    /// dropped, and the inline instantiation reports the limit as before.
    async fn store_for(
        &self,
        skill: &PreparedSkill,
        tier: usize,
        state: CallState,
    ) -> Result<(Store<CallState>, Option<super::bindings::Skill>, SkillPre<CallState>), CallError> {
        let pre = self.pre_for(skill, tier).await.map_err(|e| {
            CallError::Setup(format!("cannot prepare a {} KiB stack: {e:#}", Limits::STACK_TIERS_KB[tier]))
        })?;
        let (mut store, made_ahead) = match skill.ready.take(tier) {
            Some(made) if made.store.data().limiter.total <= state.limiter.max => {
                let mut store = made.store;
                store.data_mut().adopt(state);
                (store, Some(made.instance))
            }
            _ => (Store::new(pre.engine(), state), None),
        };
        store.limiter(|s| &mut s.limiter);
        Ok((store, made_ahead, pre))
    }
}

/// The CPU and wall limits, checked at every epoch tick: epochs count elapsed time,
/// including time spent waiting in host calls; the CPU limit is checked against the CPU
/// time this call's polls used (the returned meter).
fn watch_limits(store: &mut Store<CallState>, limits: &Limits, running: Instant) -> Arc<cpu::CpuMeter> {
    let (cpu_limit, wall) = (Duration::from_millis(limits.cpu_time_ms), Duration::from_millis(limits.wall_time_ms));
    let meter = Arc::new(cpu::CpuMeter::default());
    let deadline_meter = meter.clone();
    store.set_epoch_deadline(1);
    let mut slice_start = Duration::ZERO;
    store.epoch_deadline_callback(move |mut ctx| {
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
    meter
}

/// Run: instantiate if no instance was made ahead, then the `execute` export, metered,
/// with a tokio timeout for the wall limit while the guest waits in a host call (epochs
/// do not fire then). Also returns how long an inline instantiation took.
async fn run_export(
    store: &mut Store<CallState>,
    made_ahead: Option<super::bindings::Skill>,
    pre: &SkillPre<CallState>,
    invocation: &Invocation,
    limits: &Limits,
    stderr: &MemoryOutputPipe,
    meter: &Arc<cpu::CpuMeter>,
) -> (Result<SkillOutput, CallError>, Option<Duration>) {
    let mut inline_instantiation = None;
    let result = {
        let run = async {
            let instance = match made_ahead {
                Some(instance) => instance,
                None => {
                    let instantiating = Instant::now();
                    let instance = pre
                        .instantiate_async(&mut *store)
                        .await
                        .map_err(|e| CallError::Setup(format!("cannot instantiate the component: {e:#}")))?;
                    inline_instantiation = Some(instantiating.elapsed());
                    instance
                }
            };
            match instance.call_execute(&mut *store, &invocation.to_wit()).await {
                Err(e) => Err(classify_trap(e, store.data_mut(), limits, stderr)),
                Ok(Err(wit::SkillError::InvalidParams(m))) => Err(CallError::InvalidParams(m)),
                Ok(Err(wit::SkillError::Failed(m))) => Err(CallError::Failed(m)),
                Ok(Ok(r)) => Ok(SkillOutput::from_wit(r, limits)),
            }
        };
        let mut run = std::pin::pin!(run);
        let metered = cpu::Metered { inner: run.as_mut(), meter: meter.clone() };
        match tokio::time::timeout(Duration::from_millis(limits.wall_time_ms), metered).await {
            Err(_) => Err(CallError::Timeout { limit_ms: limits.wall_time_ms }),
            Ok(r) => r,
        }
    };
    (result, inline_instantiation)
}

/// Scrub: everything handed back (result, logs, stdout, stderr) loses the values the
/// host holds for the call (secrets, granted env values); a redaction is itself a denial,
/// which the capabilities record. The policy may fail a call that tried to hand back a
/// held value at all, rather than pass on its (redacted) result.
fn scrub(
    state: &mut CallState,
    result: Result<SkillOutput, CallError>,
    stdout: &MemoryOutputPipe,
    stderr: &MemoryOutputPipe,
    grant: &CallGrant,
) -> (Result<SkillOutput, CallError>, Vec<LogLine>, String, String) {
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
    (result, logs, stdout, stderr)
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
    /// How long the call may wait for a call slot when all are taken, if shorter than its
    /// wall limit (a server's `--call-wait-secs`); then it fails `busy`.
    pub queue_wait: Option<Duration>,
}

impl Invocation {
    fn to_wit(&self) -> wit::Invocation {
        wit::Invocation { session_id: self.session_id.clone(), step: self.step, params: self.params.clone() }
    }
}

/// Per-call store data: the WASI core, each capability's slice, accounting.
pub struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) caps: capability::CapabilityStates,
    pub(super) limiter: MemoryLimiter,
    pub(super) logs: log::LogBuffer,
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
    pub(super) fn with_nothing() -> Result<CallState> {
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
        let invocation = Invocation { session_id: String::new(), step: 0, params: "{}".into(), queue_wait: None };
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
pub(super) struct MemoryLimiter {
    pub(super) max: usize,
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
