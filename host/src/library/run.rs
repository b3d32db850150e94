//! Running an installed skill: the skill cache, one call from policy to audit line, and
//! the audit entry that records it.
//!
//! The cache holds each loaded version under its content hash; a name points at the hash
//! its install.json named when it was read, together with that file's [`FileStamp`]. A
//! call stats install.json (one `stat`): the same stamp reuses the loaded version, a new
//! one (a reinstall, rollback or remove, by this process or another) reads the record
//! again. Loading is single-flight per name, so concurrent first calls verify and prepare
//! a version once.
//!
//! A call is refused before it starts when the audit log cannot take its line, and an
//! audit write that fails after the call is an error: no call runs unaudited.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value};

use super::Library;
use super::record::{InstallRecord, verify_files_sealed};
use crate::audit::{CallDetail, CallEntry, CallStatus, RanCall, preview};
use crate::capabilities::{CapabilityKind, Limits, MemoryAccess};
use crate::fsutil::FileStamp;
use crate::manifest::{Manifest, ParamType};
use crate::memory::Provenance;
use crate::sandbox::{
    self, CallError, CallGrant, CompileOutcome, Denial, DenialKind, Invocation, LogLine, PreparedSkill, SkillOutput,
};

/// Everything about one `run`.
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
    pub params: Value,
    #[serde(serialize_with = "ser_result")]
    pub result: Result<SkillOutput, CallError>,
    /// What the sandbox refused when the skill tried it (and proposed memories dropped).
    pub denials: Vec<Denial>,
    /// Rights the skill declares that the policy does not grant, for information: the call
    /// ran without them whether or not it tried to use them (`denials` says what it tried).
    pub not_granted: Vec<String>,
    pub logs: Vec<LogLine>,
    pub memories: sandbox::Absorbed,
    pub stdout: String,
    pub stderr: String,
    pub elapsed_us: u64,
    /// CPU time the guest used (summed over the polls of its call, on whichever threads).
    pub cpu_time_us: u64,
    pub memory_peak_bytes: usize,
    pub compile: Option<CompileOutcome>,
    pub limits: Limits,
}

impl RunReport {
    /// How the call ended: the skill's status, or the kind of error that stopped it.
    pub fn status(&self) -> CallStatus {
        CallStatus::of(&self.result, |out| out.status)
    }
}

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

/// How to run: session and step identity, and the namespace of the agent profile.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub session: String,
    pub step: u32,
    pub namespace: String,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { session: new_session_id(), step: 0, namespace: super::DEFAULT_NAMESPACE.into() }
    }
}

/// A new session id: `s-` and 128 random bits in hex. Unguessable and unique across
/// processes and hosts (time and pid were neither).
pub fn new_session_id() -> String {
    format!("s-{}", crate::fsutil::random_hex(16))
}

/// The `call` entry of the audit log for one skill call.
pub fn call_entry(report: &RunReport) -> CallEntry {
    let output = report.result.as_ref().ok();
    CallEntry {
        session: report.session.clone(),
        step: report.step,
        skill: report.skill.clone(),
        params: report.params.clone(),
        status: report.status(),
        // The error's kind is the status; the sentence goes beside it.
        error: report.result.as_ref().err().map(CallError::to_string),
        detail: CallDetail::Ran(Box::new(RanCall {
            version: report.version.clone(),
            skill_hash: report.content_hash.clone(),
            oci: report.provenance.clone(),
            output_bytes: output.map(|o| o.output.len()),
            output_preview: output.map(|o| preview(&o.output)),
            elapsed_us: report.elapsed_us,
            cpu_time_us: report.cpu_time_us,
            memory_peak_bytes: report.memory_peak_bytes,
            denials: report.denials.clone(),
            not_granted: report.not_granted.clone(),
            memories_stored: report.memories.stored.clone(),
            memories_dropped: report.memories.dropped.clone(),
            logs: report.logs.clone(),
        })),
    }
}

/// A verified, parsed and prepared version of a skill.
pub(super) struct Loaded {
    content_hash: String,
    manifest: Manifest,
    record: InstallRecord,
    validator: Arc<jsonschema::Validator>,
    prepared: Option<PreparedSkill>,
    /// How the component was obtained when this process first loaded it.
    compile: Option<CompileOutcome>,
}

/// The version a name pointed at when its install.json had `stamp`.
struct Current {
    stamp: FileStamp,
    hash: String,
}

/// Loaded versions by content hash, and which hash each name runs.
#[derive(Default)]
pub(super) struct SkillCache {
    by_name: Mutex<HashMap<String, Current>>,
    by_hash: Mutex<HashMap<String, Arc<Loaded>>>,
    /// One lock per name being loaded: concurrent first calls load once.
    loading: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps stay consistent at every await-free step, so a panic elsewhere does not
    // make them unusable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SkillCache {
    fn cached(&self, name: &str, stamp: &FileStamp) -> Option<Arc<Loaded>> {
        let hash = lock(&self.by_name).get(name).filter(|c| c.stamp == *stamp).map(|c| c.hash.clone())?;
        lock(&self.by_hash).get(&hash).cloned()
    }

    fn by_hash(&self, hash: &str) -> Option<Arc<Loaded>> {
        lock(&self.by_hash).get(hash).cloned()
    }

    fn name_lock(&self, name: &str) -> Arc<Mutex<()>> {
        lock(&self.loading).entry(name.to_string()).or_default().clone()
    }

    /// Point `name` at `loaded`; a version no name points at any more is dropped (calls
    /// still running keep their own reference).
    fn insert(&self, name: &str, stamp: FileStamp, loaded: Arc<Loaded>) {
        let mut by_name = lock(&self.by_name);
        let old = by_name.insert(name.to_string(), Current { stamp, hash: loaded.content_hash.clone() });
        let mut by_hash = lock(&self.by_hash);
        by_hash.insert(loaded.content_hash.clone(), loaded);
        if let Some(old) = old
            && !by_name.values().any(|c| c.hash == old.hash)
        {
            by_hash.remove(&old.hash);
        }
    }

    /// Forget what `name` runs (after this process replaced or removed it).
    pub(super) fn forget(&self, name: &str) {
        let mut by_name = lock(&self.by_name);
        if let Some(old) = by_name.remove(name)
            && !by_name.values().any(|c| c.hash == old.hash)
        {
            lock(&self.by_hash).remove(&old.hash);
        }
    }
}

impl Library {
    /// The installed version of `name`, read, verified and prepared once per content hash.
    fn load(&self, name: &str) -> Result<Arc<Loaded>> {
        if let Some(stamp) = self.record_stamp(name)
            && let Some(l) = self.skills.cached(name, &stamp)
        {
            return Ok(l);
        }
        let name_lock = self.skills.name_lock(name);
        let _loading = lock(&name_lock);
        let mut retried = false;
        loop {
            // Stamp before reading: if the file changes after this, the stored stamp is
            // stale and the next call reads again (never the reverse).
            let stamp = self.record_stamp(name);
            if let Some(stamp) = stamp
                && let Some(l) = self.skills.cached(name, &stamp)
            {
                return Ok(l);
            }
            match self.load_uncached(name) {
                Ok(loaded) => {
                    if let Some(stamp) = stamp {
                        self.skills.insert(name, stamp, loaded.clone());
                    }
                    return Ok(loaded);
                }
                // A swap by another process between reading the record and the files
                // looks like tampering; read the new version once before saying so.
                Err(e) if !retried && self.record_stamp(name) != stamp => {
                    retried = true;
                    let _ = e;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn load_uncached(&self, name: &str) -> Result<Arc<Loaded>> {
        let record = self.read_record(name)?;
        if let Some(l) = self.skills.by_hash(&record.content_hash) {
            return Ok(l);
        }
        let dir = self.skill_dir(name);
        let read = |file: &str| {
            std::fs::read(dir.join(file))
                .map_err(|e| anyhow!("cannot read {} ({e}); reinstall `{name}`", dir.join(file).display()))
        };
        verify_files_sealed(&dir, &record, &self.root.join("cache").join("verified"), self.seal_key())?;
        let manifest_bytes = read("SKILL.md")?;
        let text = String::from_utf8(manifest_bytes).map_err(|_| anyhow!("{}/SKILL.md is not UTF-8", dir.display()))?;
        let manifest = Manifest::parse(&dir.join("SKILL.md"), &text).map_err(|e| anyhow!("{e}"))?;
        let validator = jsonschema::validator_for(&manifest.params_schema())
            .map_err(|e| anyhow!("parameters of `{name}` do not form a JSON Schema: {e}"))?;
        let (prepared, compile) = match (record.is_instruction(), &record.wasm_sha256) {
            (false, Some(sha)) => {
                // The files were verified above; the component is read only if the
                // compile cache has to compile it, so a warm start maps the compiled code.
                let component = || {
                    let bytes = read("skill.wasm")?;
                    if crate::text::sha256_hex(&bytes) != *sha {
                        bail!(
                            "{}/skill.wasm changed while it was loaded; run it again, or reinstall `{name}`",
                            dir.display()
                        );
                    }
                    Ok(bytes)
                };
                let (p, outcome) = self.runtime()?.prepare_cached(sha, &component, &*self.progress)?;
                (Some(p), Some(outcome))
            }
            _ => (None, None),
        };
        self.counters.skill_loads.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Loaded {
            content_hash: record.content_hash.clone(),
            manifest,
            record,
            validator: Arc::new(validator),
            prepared,
            compile,
        }))
    }

    /// Is `name` an installed skill with a component to run? From the skill cache: one
    /// `stat` once the installed version is loaded. A version that cannot be loaded
    /// (damaged, tampered) counts as installed: running it says what is wrong.
    pub fn is_executable(&self, name: &str) -> bool {
        let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain || name.starts_with('.') {
            return false;
        }
        let Some(stamp) = self.record_stamp(name) else { return false };
        if let Some(l) = self.skills.cached(name, &stamp) {
            return l.prepared.is_some();
        }
        off_the_executor(|| self.load(name)).map(|l| l.prepared.is_some()).unwrap_or(true)
    }

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
    pub async fn run_cancellable(
        &self,
        name: &str,
        params: Value,
        opts: &RunOptions,
        cancelled: impl Future<Output = ()>,
    ) -> Result<RunReport> {
        self.run_narrowed(name, params, opts, MemoryAccess::Write, cancelled).await
    }

    /// [`Library::run_cancellable`] with the skill's `memory` right capped at `max_memory`
    /// for this call (a server started with `--memory read` runs a memory-write skill as
    /// memory-read). What the cap took away shows in the report's `not_granted`.
    pub async fn run_narrowed(
        &self,
        name: &str,
        params: Value,
        opts: &RunOptions,
        max_memory: MemoryAccess,
        cancelled: impl Future<Output = ()>,
    ) -> Result<RunReport> {
        let started = std::time::Instant::now();
        self.audit.check_appendable()?;
        // A loaded skill is one `stat` away: no hand-off of the worker for that (block_in_place
        // moves the worker's queue to another thread); only a real load leaves the executor.
        let cached = self.record_stamp(name).and_then(|stamp| self.skills.cached(name, &stamp));
        let loaded = match cached.map_or_else(|| off_the_executor(|| self.load(name)), Ok) {
            Ok(l) => l,
            Err(e) => return Err(self.audit_refused(name, &params, opts, e).await),
        };
        let Some(prepared) = &loaded.prepared else {
            let e = anyhow!(
                "`{name}` is an instruction skill: it has no component to run; its body is guidance for the agent (see `skillhost skill info {name}`)"
            );
            return Err(self.audit_refused(name, &params, opts, e).await);
        };
        let manifest = &loaded.manifest;
        let policy = self.policy()?;
        let limits = Limits::resolve(&manifest.limits, &policy.limit_caps(name));
        let mut effective = manifest.capabilities.intersect(&policy.granted(name));
        effective.memory = effective.memory.min(max_memory);
        let mut report = RunReport {
            skill: name.to_string(),
            version: loaded.record.version.clone(),
            content_hash: loaded.content_hash.clone(),
            provenance: loaded.record.provenance.clone(),
            session: opts.session.clone(),
            step: opts.step,
            params: params.clone(),
            result: Err(CallError::Setup(String::new())),
            denials: Vec::new(),
            not_granted: manifest.capabilities.beyond(&effective),
            logs: Vec::new(),
            memories: Default::default(),
            stdout: String::new(),
            stderr: String::new(),
            elapsed_us: 0,
            cpu_time_us: 0,
            memory_peak_bytes: 0,
            compile: loaded.compile,
            limits,
        };
        let params = match validate_params(manifest, &loaded.validator, params) {
            Ok(p) => p,
            Err(e) => {
                report.result = Err(e);
                self.audit_call(&report).await?;
                return Ok(report);
            }
        };
        report.params = params.clone();
        // Explicit flags, then the user policy, then defaults.
        let mut paths = policy.paths.clone();
        paths.extend(self.paths.clone());
        for (k, v) in &self.default_paths {
            paths.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let secret_values = match if effective.secrets.is_empty() {
            Ok(Default::default())
        } else {
            off_the_executor(|| self.secrets().values_for(&effective.secrets))
        } {
            Ok(v) => v,
            Err(e) => {
                report.result = Err(CallError::Setup(format!("{e:#}")));
                self.audit_call(&report).await?;
                return Ok(report);
            }
        };
        let secret_values = secret_values.on_leak(policy.secrets.on_leak());
        let store = if effective.needs_store() { Some(self.store()?) } else { None };
        let grant = CallGrant {
            skill: name.to_string(),
            skill_hash: loaded.content_hash.clone(),
            capabilities: effective.clone(),
            limits,
            paths,
            store: store.clone(),
            namespace: opts.namespace.clone(),
            secret_values,
        };
        let invocation = Invocation { session_id: opts.session.clone(), step: opts.step, params: params.to_string() };
        let call = self.runtime()?.call(prepared, grant, invocation);
        // Biased: once cancelled, the guest is not resumed for another slice.
        let outcome = tokio::select! {
            biased;
            () = cancelled => None,
            outcome = call => Some(outcome),
        };
        let Some(outcome) = outcome else {
            report.result = Err(CallError::Cancelled);
            report.elapsed_us = started.elapsed().as_micros() as u64;
            self.audit_call(&report).await?;
            return Ok(report);
        };
        if let Ok(out) = &outcome.result {
            let provenance = Provenance {
                skill: name.to_string(),
                skill_hash: loaded.content_hash.clone(),
                session: opts.session.clone(),
                step: opts.step,
            };
            // Priority 5 (and whatever the policy keeps above its cap) belongs to the user.
            let cap = policy.memory.max_skill_priority();
            let mut proposed = out.new_memories.clone();
            for (i, m) in proposed.iter_mut().enumerate().filter(|(_, m)| m.priority > cap) {
                report.denials.push(Denial {
                    capability: CapabilityKind::Memory.into(),
                    message: format!(
                        "memory #{} proposed at priority {}, stored at {cap}: priorities above {cap} belong to the user ([memory] max_skill_priority in the policy)",
                        i + 1,
                        m.priority
                    ),
                });
                m.priority = cap;
            }
            report.memories =
                sandbox::absorb(&proposed, effective.memory, &limits, store.as_deref(), &opts.namespace, &provenance);
            for d in &report.memories.dropped {
                report.denials.push(Denial { capability: CapabilityKind::Memory.into(), message: d.clone() });
            }
        }
        report.result = outcome.result;
        report.denials.extend(outcome.denials);
        report.logs = outcome.logs;
        report.stdout = outcome.stdout;
        report.stderr = outcome.stderr;
        report.elapsed_us = outcome.elapsed_us;
        report.cpu_time_us = outcome.cpu_time_us;
        report.memory_peak_bytes = outcome.memory_peak_bytes;
        self.audit_call(&report).await?;
        Ok(report)
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
                self.audit.path().display()
            )
        })
    }

    /// Append `entry` to the audit log: inline when the append need not wait (a server's
    /// log syncs in the background), else on the blocking pool.
    pub(crate) async fn append_entry(&self, entry: Map<String, Value>) -> Result<()> {
        // A server's appends (background sync) are a few system calls when nothing makes
        // them wait: no hop to the blocking pool for those.
        let entry = match self.audit.try_append_now(entry) {
            Ok(appended) => return appended.map(|_| ()),
            Err(entry) => entry,
        };
        let log = self.audit.clone();
        let appended = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(move || log.append(entry))
                .await
                .map_err(|e| anyhow!("the audit writer stopped: {e}"))?,
            Err(_) => log.append(entry),
        };
        appended.map(|_| ())
    }
}

fn validate_params(
    manifest: &Manifest,
    validator: &jsonschema::Validator,
    mut params: Value,
) -> Result<Value, CallError> {
    let expected = || {
        let list: Vec<String> = manifest
            .parameters
            .iter()
            .map(|p| {
                let mut s =
                    format!("{} ({:?}{})", p.name, p.kind, if p.required { ", required" } else { "" }).to_lowercase();
                if let Some(c) = &p.choices {
                    s.push_str(&format!(" one of {}", Value::Array(c.clone())));
                }
                s
            })
            .collect();
        if list.is_empty() {
            "this skill takes no parameters".to_string()
        } else {
            format!("expected: {}", list.join(", "))
        }
    };
    let Some(obj) = params.as_object_mut() else {
        return Err(CallError::InvalidParams(format!(
            "parameters must be a JSON object, got {params}; {}",
            expected()
        )));
    };
    for p in &manifest.parameters {
        if let Some(d) = &p.default
            && !obj.contains_key(&p.name)
        {
            obj.insert(p.name.clone(), d.clone());
        }
    }
    let problems: Vec<String> = validator
        .iter_errors(&params)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() { e.to_string() } else { format!("`{}`: {e}", path.trim_start_matches('/')) }
        })
        .collect();
    if !problems.is_empty() {
        return Err(CallError::InvalidParams(format!("{}; {}", problems.join("; "), expected())));
    }
    Ok(params)
}

/// Parse `-p key=value` pairs using the declared parameter types (a string parameter
/// keeps `123` as text; others take JSON).
pub fn params_from_pairs(manifest: &Manifest, pairs: &[String]) -> Result<Value> {
    let mut obj = serde_json::Map::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').ok_or_else(|| anyhow!("`-p {pair}`: write it as -p name=value"))?;
        let kind = manifest.parameters.iter().find(|p| p.name == k).map(|p| p.kind);
        let value = match kind {
            Some(ParamType::String) | None => serde_json::from_str::<Value>(v)
                .ok()
                .filter(|j| kind.is_none() && !j.is_string())
                .unwrap_or_else(|| Value::String(v.to_string())),
            // A value that is not of the declared type goes on as text, so the parameter check
            // reports it exactly as it would the same value given in `--params`.
            Some(_) => serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string())),
        };
        obj.insert(k.to_string(), value);
    }
    Ok(Value::Object(obj))
}

/// Run blocking work (a first load reads, hashes and deserializes a component: milliseconds)
/// without stalling the other tasks of a multi-threaded runtime's worker. A current-thread
/// runtime has no other worker to hand its tasks to, so there the work simply runs.
fn off_the_executor<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
