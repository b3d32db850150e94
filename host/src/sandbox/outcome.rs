//! What a call gives back: the skill's output after the host's caps, the error kinds that
//! can stop a call, and the [`CallOutcome`] the library, the CLI, the agent and the audit
//! log read.

use std::time::Instant;

use serde::Serialize;

use super::log::LogLine;
use super::{Denial, MAX_METADATA_ENTRIES, wit};
use crate::capabilities::Limits;

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
    pub(super) fn from_wit(r: wit::SkillResult, limits: &Limits) -> SkillOutput {
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

    pub(super) fn failed(e: CallError, denials: Vec<Denial>, started: Instant) -> CallOutcome {
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
