//! One call of an installed skill, as named stages from the loaded version to its audit
//! line (see [`Library::run_cancellable`]), the report that carries it, and the audit entry
//! that records it.
//!
//! A call is refused before it starts when the audit log cannot take its line, and an
//! audit write that fails after the call is an error: no call runs unaudited.

use std::sync::Arc;

use anyhow::{Result, anyhow};
use serde::Serialize;
use serde_json::Value;

use super::Library;
use super::loaded::{Loaded, LoadedSkill, off_the_executor};
use super::params::validate_params;
use crate::audit::{CallDetail, CallEntry, CallStatus, RanCall, preview};
use crate::capabilities::memory::{Absorbed, MemoryAdmission, admit_memories};
use crate::capabilities::{CapabilitySet, Limits, MemoryAccess};
use crate::memory::{MemoryStore, Provenance};
use crate::policy::Policy;
use crate::sandbox::{
    CallError, CallGrant, CallOutcome, CompileOutcome, Denial, DenialKind, Invocation, PreparedSkill,
};

/// Everything about one `run`: who ran what, and the sandbox's [`CallOutcome`] (result,
/// denials, logs, output streams, costs) as it came back, with the host's additions.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub skill: String,
    pub version: Option<String>,
    pub content_hash: String,
    /// The verified registry digest and signer of what ran (OCI installs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<crate::oci::Provenance>,
    pub session: String,
    pub step: u32,
    /// The MCP transport the call came over (see [`RunOptions::transport`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<&'static str>,
    pub params: Value,
    /// How the call went. Its `denials` also hold what admission did to proposed
    /// memories (drops, lowered priorities).
    #[serde(flatten)]
    pub outcome: CallOutcome,
    /// Rights the skill declares that the policy does not grant, for information: the call
    /// ran without them whether or not it tried to use them (`denials` says what it tried).
    pub not_granted: Vec<String>,
    pub memories: Absorbed,
    pub compile: Option<CompileOutcome>,
    pub limits: Limits,
}

impl RunReport {
    /// The report of a call that has not run yet: its outcome says so until it does.
    fn begin(name: &str, loaded: &Loaded, authorized: &Authorized, opts: &RunOptions, params: Value) -> RunReport {
        RunReport {
            skill: name.to_string(),
            version: loaded.record.version.clone(),
            content_hash: loaded.content_hash.clone(),
            provenance: loaded.record.provenance.clone(),
            session: opts.session.clone(),
            step: opts.step,
            transport: opts.transport,
            params,
            outcome: CallOutcome::refused(CallError::Setup(String::new())),
            not_granted: loaded.manifest.capabilities.beyond(&authorized.effective),
            memories: Default::default(),
            compile: loaded.compile,
            limits: authorized.limits,
        }
    }

    /// How the call ended: the skill's status, or the kind of error that stopped it.
    pub fn status(&self) -> CallStatus {
        CallStatus::of(&self.outcome.result, |out| out.status)
    }
}

/// What the authorize stage decided: the policy it read, the call's effective rights and
/// its limits.
struct Authorized {
    policy: Arc<Policy>,
    effective: CapabilitySet,
    limits: Limits,
}

/// How to run: session and step identity, the namespace of the agent profile, and a cap on
/// the skill's `memory` right for this call (a server started with `--memory read` runs a
/// memory-write skill as memory-read; what the cap took shows in `not_granted`).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub session: String,
    pub step: u32,
    pub namespace: String,
    pub max_memory: MemoryAccess,
    /// How long the call may wait for a call slot (see [`Library::with_call_slots`]) when
    /// shorter than its wall limit; then it fails `busy`, audited like any call.
    pub queue_wait: Option<std::time::Duration>,
    /// The MCP transport (`stdio`, `http`) the call came over, for its audit line.
    pub transport: Option<&'static str>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            session: new_session_id(),
            step: 0,
            namespace: super::DEFAULT_NAMESPACE.into(),
            max_memory: MemoryAccess::Write,
            queue_wait: None,
            transport: None,
        }
    }
}

/// A new session id: `s-` and 128 random bits in hex. Unguessable and unique across
/// processes and hosts (time and pid were neither).
pub fn new_session_id() -> String {
    format!("s-{}", crate::fsutil::random_hex(16))
}

/// The `call` entry of the audit log for one skill call.
pub fn call_entry(report: &RunReport) -> CallEntry {
    let outcome = &report.outcome;
    let output = outcome.result.as_ref().ok();
    CallEntry {
        session: report.session.clone(),
        step: report.step,
        skill: report.skill.clone(),
        params: report.params.clone(),
        status: report.status(),
        // The error's kind is the status; the sentence goes beside it.
        error: outcome.result.as_ref().err().map(CallError::to_string),
        detail: CallDetail::Ran(Box::new(RanCall {
            transport: report.transport,
            version: report.version.clone(),
            skill_hash: report.content_hash.clone(),
            oci: report.provenance.clone(),
            output_bytes: output.map(|o| o.output.len()),
            output_preview: output.map(|o| preview(&o.output)),
            elapsed_us: outcome.elapsed_us,
            cpu_time_us: outcome.cpu_time_us,
            memory_peak_bytes: outcome.memory_peak_bytes,
            denials: outcome.denials.clone(),
            not_granted: report.not_granted.clone(),
            memories_stored: report.memories.stored.clone(),
            memories_dropped: report.memories.dropped.clone(),
            logs: outcome.logs.clone(),
        })),
    }
}

impl Library {
    /// Run an installed skill once. Refused (an error, nothing runs) when the audit log
    /// cannot record the call; an error too when the call ran but its line could not be
    /// written.
    pub async fn run(&self, name: &str, params: Value, opts: &RunOptions) -> Result<RunReport> {
        self.run_cancellable(name, params, opts, std::future::pending()).await
    }

    /// [`Library::run`] that stops when `cancelled` resolves first: the guest's future (and
    /// with it its store) is dropped at the guest's next yield to the executor (an epoch
    /// tick, or at once when it waits in a host call), and the call's audit line has status
    /// `cancelled`. The report's result is then [`CallError::Cancelled`].
    ///
    /// One call is six stages, each a function below: [`Library::load_stage`] (the verified,
    /// prepared version), [`Library::authorize`] (policy: effective rights and limits),
    /// [`Library::prepare`] (parameters, paths, secrets, the store: the grant),
    /// [`Library::call_stage`] (the sandbox, raced against `cancelled`),
    /// [`Library::absorb`] (proposed memories through [`admit_memories`]) and
    /// [`Library::audit_call`]. A stage that ends the call early still reaches the audit.
    pub async fn run_cancellable(
        &self,
        name: &str,
        params: Value,
        opts: &RunOptions,
        cancelled: impl Future<Output = ()>,
    ) -> Result<RunReport> {
        self.run_looked_up(name, None, params, opts, cancelled).await
    }

    /// [`Library::run_cancellable`] of the version `looked_up` that the caller took from
    /// [`Library::lookup_executable`] for this call just before (`None`: look it up now), so
    /// that one call stats install.json once. On a shared store the caller looks it up after
    /// [`crate::store::HomeSync::ensure_current`] (as the MCP server does), which the run
    /// then does not repeat.
    pub async fn run_looked_up(
        &self,
        name: &str,
        looked_up: Option<LoadedSkill>,
        params: Value,
        opts: &RunOptions,
        cancelled: impl Future<Output = ()>,
    ) -> Result<RunReport> {
        let started = std::time::Instant::now();
        self.audit.check_appendable()?;
        let loaded = match looked_up {
            Some(LoadedSkill(loaded)) => loaded,
            None => {
                // On a shared store: the skill and grants as the store holds them now, so a
                // change made on another host applies to this call.
                if let Some(sync) = &self.home_sync {
                    sync.ensure_current().await.map_err(|e| {
                        anyhow!("`{name}` was not run: this host cannot check its skills and grants against the shared store, and a call must not run on a revoked grant: {e:#}")
                    })?;
                }
                self.load_stage(name, &params, opts).await?
            }
        };
        // Borrowed, not cloned: a clone would bump the shared reference counts that the
        // per-CPU copies (sandbox/lanes.rs) keep off the call path.
        let Some(prepared) = loaded.prepared.as_ref() else {
            let e = anyhow!(
                "`{name}` is an instruction skill: it has no component to run; its body is guidance for the agent (see `skillhost skill info {name}`)"
            );
            return Err(self.audit_refused(name, &params, opts, e).await);
        };
        let authorized = self.authorize(name, &loaded, opts)?;
        let mut report = RunReport::begin(name, &loaded, &authorized, opts, params);
        let Some((grant, invocation)) = self.prepare(name, &loaded, &authorized, opts, &mut report) else {
            self.audit_call(&report).await?;
            return Ok(report);
        };
        let store = grant.store.clone();
        match self.call_stage(prepared, grant, invocation, cancelled).await {
            Some(outcome) => {
                report.outcome = outcome;
                self.absorb(&mut report, &authorized, store.as_deref(), opts);
            }
            None => {
                report.outcome.result = Err(CallError::Cancelled);
                report.outcome.elapsed_us = started.elapsed().as_micros() as u64;
            }
        }
        self.audit_call(&report).await?;
        Ok(report)
    }

    /// Load: the installed version, verified and prepared (once per content hash). A call
    /// refused here (no such skill, tampered files) leaves a `refused` audit line and is an
    /// error; so does one of an instruction skill, which has no component.
    async fn load_stage(&self, name: &str, params: &Value, opts: &RunOptions) -> Result<Arc<Loaded>> {
        let loaded = match self.loaded(name) {
            Ok(l) => l,
            Err(e) => return Err(self.audit_refused(name, params, opts, e).await),
        };
        Ok(loaded)
    }

    /// Authorize: what the policy (as it is now) lets this call hold: declared AND granted,
    /// capped by `opts.max_memory`; limits within the policy's caps.
    fn authorize(&self, name: &str, loaded: &Loaded, opts: &RunOptions) -> Result<Authorized> {
        let policy = self.policy()?;
        let manifest = &loaded.manifest;
        let limits = Limits::resolve(&manifest.limits, &policy.limit_caps(name));
        let mut effective = manifest.capabilities.intersect(&policy.granted(name));
        effective.memory = effective.memory.min(opts.max_memory);
        Ok(Authorized { policy, effective, limits })
    }

    /// Prepare: the call's grant and input. Parameters are checked (defaults filled in),
    /// path templates resolved (explicit flags, then the policy, then defaults), held
    /// secrets read, and the store opened only when a capability needs it. `None` when the
    /// call ends here; the report then says why.
    fn prepare(
        &self,
        name: &str,
        loaded: &Loaded,
        authorized: &Authorized,
        opts: &RunOptions,
        report: &mut RunReport,
    ) -> Option<(CallGrant, Invocation)> {
        // The audit line keeps what was sent when it is refused, what ran when it runs.
        match validate_params(&loaded.manifest, &loaded.validator, report.params.clone()) {
            Ok(p) => report.params = p,
            Err(e) => {
                report.outcome.result = Err(e);
                return None;
            }
        }
        let effective = &authorized.effective;
        let mut paths = authorized.policy.paths.clone();
        paths.extend(self.paths.clone());
        for (k, v) in &self.default_paths {
            paths.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let setup = || -> Result<_> {
            let secret_values = if effective.secrets.is_empty() {
                Default::default()
            } else {
                off_the_executor(|| self.secrets().values_for(&effective.secrets))?
            };
            let store = if effective.needs_store() { Some(self.store()?) } else { None };
            Ok((secret_values.on_leak(authorized.policy.secrets.on_leak()), store))
        };
        let (secret_values, store) = match setup() {
            Ok(v) => v,
            Err(e) => {
                report.outcome.result = Err(CallError::Setup(format!("{e:#}")));
                return None;
            }
        };
        let grant = CallGrant {
            skill: name.to_string(),
            skill_hash: loaded.content_hash.clone(),
            capabilities: effective.clone(),
            limits: authorized.limits,
            paths,
            store,
            namespace: opts.namespace.clone(),
            secret_values,
        };
        let invocation = Invocation {
            session_id: opts.session.clone(),
            step: opts.step,
            params: report.params.to_string(),
            queue_wait: opts.queue_wait,
        };
        Some((grant, invocation))
    }

    /// Call: the sandbox runs it; `None` when `cancelled` won. Biased: once cancelled, the
    /// guest is not resumed for another slice.
    async fn call_stage(
        &self,
        prepared: &PreparedSkill,
        grant: CallGrant,
        invocation: Invocation,
        cancelled: impl Future<Output = ()>,
    ) -> Option<CallOutcome> {
        let runtime = match self.runtime() {
            Ok(r) => r,
            Err(e) => return Some(CallOutcome::refused(CallError::Setup(format!("{e:#}")))),
        };
        let call = runtime.call(prepared, grant, invocation);
        tokio::select! {
            biased;
            () = cancelled => None,
            outcome = call => Some(outcome),
        }
    }

    /// Absorb: what the skill proposed to remember goes through the one memory admission
    /// (its right, its limits, the policy's priority cap); drops and lowered priorities
    /// are `memory` denials.
    fn absorb(
        &self,
        report: &mut RunReport,
        authorized: &Authorized,
        store: Option<&dyn MemoryStore>,
        opts: &RunOptions,
    ) {
        let Ok(out) = &report.outcome.result else { return };
        let provenance = Provenance {
            skill: report.skill.clone(),
            skill_hash: report.content_hash.clone(),
            session: opts.session.clone(),
            step: opts.step,
        };
        let rules = MemoryAdmission {
            access: authorized.effective.memory,
            max_count: authorized.limits.max_new_memories,
            max_bytes: authorized.limits.max_memory_bytes,
            max_priority: authorized.policy.memory.max_skill_priority(),
            namespace: &opts.namespace,
            provenance: &provenance,
        };
        let (absorbed, denials) = admit_memories(&out.new_memories, &rules, store);
        report.memories = absorbed;
        report.outcome.denials.extend(denials);
    }

    /// A call refused before anything ran (tampered installed files, a component that does
    /// not link, no such skill) still leaves its line: status `refused`, the reason as a
    /// denial. Returns the error to give the caller (with a note if the line was lost).
    async fn audit_refused(
        &self,
        name: &str,
        params: &Value,
        opts: &RunOptions,
        error: anyhow::Error,
    ) -> anyhow::Error {
        let entry = CallEntry {
            session: opts.session.clone(),
            step: opts.step,
            skill: name.into(),
            params: params.clone(),
            status: CallStatus::Refused,
            error: Some(format!("{error:#}")),
            detail: CallDetail::Refused {
                denials: vec![Denial::new(DenialKind::Integrity, format!("call refused before running: {error:#}"))],
            },
        };
        match self.append_entry(entry.into_entry()).await {
            Ok(()) => error,
            Err(e) => anyhow!("{error:#}\n(the refusal could not be written to the audit log either: {e:#})"),
        }
    }

    /// Append the call's line to the audit log, off the async executor (the append takes a
    /// file lock and syncs the file).
    async fn audit_call(&self, report: &RunReport) -> Result<()> {
        let entry = call_entry(report).into_entry();
        self.append_entry(entry).await.map_err(|e| {
            anyhow!(
                "`{}` ran (session {}), but its call could not be written to the audit log {}: {e:#}. Further calls are refused until the log is repaired; see `skillhost audit verify` and `skillhost audit seal`.",
                report.skill,
                report.session,
                self.audit.location()
            )
        })
    }

    /// Append `entry` to the audit log: inline when the append need not wait (a server's
    /// file log syncs in the background), else off the executor (a synced file append on
    /// the blocking pool; a PostgreSQL commit awaited on the store's writer).
    pub(crate) async fn append_entry(&self, entry: impl Into<crate::audit::CanonicalEntry>) -> Result<()> {
        self.audit.append_async(entry).await.map(|_| ())
    }
}
