//! What a line of the audit log records, as types: a skill or tool call ([`CallEntry`]), an
//! agent step ([`StepEntry`]), an install from a registry ([`InstallEntry`]), and the enums
//! of their statuses and actions. The log itself takes any JSON object
//! ([`super::AuditLog::append`]); these types are how the library, the agent, the MCP server
//! and the CLI fill one in, so a field cannot be misspelt in one writer and statuses are
//! never recovered by reading a serialized error back.
//!
//! Serialized forms are public (old logs must verify and read the same): every name here
//! is the string the log has always held, and the tests below pin each status against the
//! ad hoc maps the writers built before these types existed.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::sandbox::{CallError, Denial, LogLine, Status};

/// What a line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// One skill call (`Library::run`), or an MCP memory tool call, MEMORY.md read or
    /// refusal.
    Call,
    /// One step of the agent loop.
    Step,
    /// An install from an OCI registry: the digest, the signer, or `--allow-unsigned`.
    Install,
    /// The first line of a segment started by [`super::AuditLog::seal`]: it records the
    /// damaged log that was set aside and the sha256 of its bytes.
    Seal,
}

/// A new entry of `kind` for `session`, to be filled in and passed to [`super::AuditLog::append`].
pub fn new_entry(kind: EntryKind, session: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("kind".into(), serde_json::to_value(kind).unwrap_or(Value::Null));
    m.insert("session".into(), Value::String(session.to_string()));
    m
}

/// `fields` (a struct serialized to an object) as an entry of `kind` for `session`.
pub(super) fn entry_of(kind: EntryKind, session: &str, fields: &impl Serialize) -> Map<String, Value> {
    let mut m = new_entry(kind, session);
    if let Ok(Value::Object(fields)) = serde_json::to_value(fields) {
        m.extend(fields);
    }
    m
}

/// `text` on one line, cut to a preview length: enough to recognise an output in a line
/// of the log, not a second copy of it.
pub fn preview(text: &str) -> String {
    crate::text::one_line(text, PREVIEW_CHARS)
}

/// Most characters of a skill's output kept in a call entry: enough to recognise the
/// result, not a second copy of it.
const PREVIEW_CHARS: usize = 200;

/// A value the caller chose (parameters, a resource URI), as the log keeps it: bounded
/// (see [`crate::bounded`]).
fn bounded_value<S: Serializer>(value: &Value, s: S) -> Result<S::Ok, S::Error> {
    crate::bounded::value(value, crate::bounded::MAX_VALUE_BYTES).serialize(s)
}

/// A name the client chose, as the log keeps it: bounded.
fn bounded_name<S: Serializer>(name: &str, s: S) -> Result<S::Ok, S::Error> {
    crate::bounded::string(name, crate::bounded::MAX_NAME_BYTES).serialize(s)
}

/// The registry provenance as call and install lines carry it.
fn provenance_value<S: Serializer>(p: &crate::oci::Provenance, s: S) -> Result<S::Ok, S::Error> {
    p.audit_value().serialize(s)
}

fn some_provenance<S: Serializer>(p: &Option<crate::oci::Provenance>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => provenance_value(p, s),
        None => s.serialize_none(),
    }
}

/// How a call ended: the skill's own status, the kind of [`CallError`] that stopped it, or
/// `refused` (the host did not start it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallStatus {
    Success,
    Failure,
    RequireMore,
    InvalidParams,
    Failed,
    CpuLimit,
    MemoryLimit,
    Timeout,
    /// No call slot was free in time (the runtime's, or the MCP server's queue).
    Busy,
    /// The call's memory limit did not fit in the host's guest memory budget.
    MemoryBudget,
    Panic,
    Trap,
    Setup,
    Cancelled,
    /// Refused before anything ran (a damaged install, no such skill, an instruction skill,
    /// a memory tool this server does not offer).
    Refused,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Success => "success",
            CallStatus::Failure => "failure",
            CallStatus::RequireMore => "require-more",
            CallStatus::InvalidParams => "invalid-params",
            CallStatus::Failed => "failed",
            CallStatus::CpuLimit => "cpu-limit",
            CallStatus::MemoryLimit => "memory-limit",
            CallStatus::Timeout => "timeout",
            CallStatus::Busy => "busy",
            CallStatus::MemoryBudget => "memory-budget",
            CallStatus::Panic => "panic",
            CallStatus::Trap => "trap",
            CallStatus::Setup => "setup",
            CallStatus::Cancelled => "cancelled",
            CallStatus::Refused => "refused",
        }
    }

    /// The status of a call's result: the skill's own status, or the error's kind.
    pub fn of<T>(result: &Result<T, CallError>, ok: impl Fn(&T) -> Status) -> CallStatus {
        match result {
            Ok(out) => ok(out).into(),
            Err(e) => e.into(),
        }
    }
}

impl From<Status> for CallStatus {
    fn from(status: Status) -> CallStatus {
        match status {
            Status::Success => CallStatus::Success,
            Status::Failure => CallStatus::Failure,
            Status::RequireMore => CallStatus::RequireMore,
        }
    }
}

impl From<&CallError> for CallStatus {
    fn from(error: &CallError) -> CallStatus {
        match error {
            CallError::InvalidParams(_) => CallStatus::InvalidParams,
            CallError::Failed(_) => CallStatus::Failed,
            CallError::CpuLimit(_) => CallStatus::CpuLimit,
            CallError::MemoryLimit(_) => CallStatus::MemoryLimit,
            CallError::Timeout { .. } => CallStatus::Timeout,
            CallError::Busy { .. } => CallStatus::Busy,
            CallError::MemoryBudget { .. } => CallStatus::MemoryBudget,
            CallError::Panic(_) => CallStatus::Panic,
            CallError::Trap(_) => CallStatus::Trap,
            CallError::Setup(_) => CallStatus::Setup,
            CallError::Cancelled => CallStatus::Cancelled,
        }
    }
}

/// One call as the log records it: who called what with which parameters, how it ended,
/// and what [`CallDetail`] says about the kind of call it was. `params` is bounded when
/// written (the caller chose it).
#[derive(Debug, Clone, Serialize)]
pub struct CallEntry {
    pub session: String,
    pub step: u32,
    /// The skill, or the MCP memory tool (`memory_search`, `memory_view`, ...).
    pub skill: String,
    #[serde(serialize_with = "bounded_value")]
    pub params: Value,
    pub status: CallStatus,
    /// The sentence beside an error status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub detail: CallDetail,
}

/// The fields a call's kind adds to its entry.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum CallDetail {
    /// A skill the library started (or stopped at its parameter check or secrets).
    Ran(Box<RanCall>),
    /// A call the library refused before anything ran: why, as a denial.
    Refused { denials: Vec<Denial> },
    /// A call served by `skillhost mcp` that did not reach the library (a memory tool, a
    /// MEMORY.md read, a call refused or turned away busy).
    Mcp(McpCall),
}

/// What a started call did.
#[derive(Debug, Clone, Serialize)]
pub struct RanCall {
    /// The MCP transport (`stdio`, `http`) when an MCP client asked for the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<&'static str>,
    pub version: Option<String>,
    pub skill_hash: String,
    /// The verified registry digest and signer of what ran (OCI installs only).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "some_provenance")]
    pub oci: Option<crate::oci::Provenance>,
    /// Bytes of the skill's output and its start on one line (a result only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_preview: Option<String>,
    pub elapsed_us: u64,
    pub cpu_time_us: u64,
    pub memory_peak_bytes: usize,
    pub denials: Vec<Denial>,
    pub not_granted: Vec<String>,
    pub memories_stored: Vec<u64>,
    pub memories_dropped: Vec<String>,
    pub logs: Vec<LogLine>,
}

/// What an MCP line adds: who asked over what, and the records a memory tool touched.
#[derive(Debug, Clone, Serialize)]
pub struct McpCall {
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub client: ClientInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memories_stored: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memories_read: Option<Vec<Value>>,
}

/// An MCP client as it named itself; each field bounded when written.
#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    #[serde(serialize_with = "bounded_name")]
    pub name: String,
    #[serde(serialize_with = "bounded_name")]
    pub version: String,
}

impl CallEntry {
    /// The entry in canonical form, written straight from the fields (a line per call:
    /// no `Map` in between; the same bytes, see [`super::CanonicalEntry`]).
    pub fn into_entry(self) -> super::CanonicalEntry {
        super::CanonicalEntry::typed(EntryKind::Call, &self.session, &self)
    }
}

/// How an install from a registry was trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstallStatus {
    /// Signed by a key trusted for the repository.
    Signed,
    /// Unsigned or untrusted, installed because the user said `--allow-unsigned`.
    UnsignedAllowed,
    Unsigned,
}

impl InstallStatus {
    pub fn of(provenance: &crate::oci::Provenance) -> InstallStatus {
        match (&provenance.signer, provenance.unsigned_allowed) {
            (Some(_), _) => InstallStatus::Signed,
            (None, true) => InstallStatus::UnsignedAllowed,
            (None, false) => InstallStatus::Unsigned,
        }
    }
}

/// The `install` line: what was installed from a registry, from where, signed by whom.
/// Its session is `install`.
#[derive(Debug, Clone, Serialize)]
pub struct InstallEntry {
    pub skill: String,
    pub version: Option<String>,
    pub skill_hash: String,
    /// What the user named (`oci://...`, a bundle file or URL).
    pub source: String,
    #[serde(serialize_with = "provenance_value")]
    pub oci: crate::oci::Provenance,
    pub status: InstallStatus,
}

impl InstallEntry {
    pub const SESSION: &'static str = "install";

    pub fn into_entry(self) -> Map<String, Value> {
        entry_of(EntryKind::Install, Self::SESSION, &self)
    }
}

/// One step of the agent loop, as SPEC section 6 lists it. [`StepEntry::into_entry`] makes
/// it an entry for [`super::AuditLog::append`].
#[derive(Debug, Clone, Serialize)]
pub struct StepEntry {
    pub session: String,
    pub step: u32,
    /// Bytes of the context sent to the model.
    pub prompt_bytes: usize,
    pub action: StepAction,
    pub skill: Option<String>,
    /// Content hash of the skill version that ran.
    pub skill_hash: Option<String>,
    pub params: Value,
    pub result_summary: String,
    pub status: StepStatus,
    pub model_us: u64,
    pub elapsed_us: u64,
    pub memory_peak_bytes: usize,
    pub denials: Vec<Denial>,
    pub memories_stored: Vec<u64>,
    /// Tokens of the step's model requests, as the provider reported them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
}

impl StepEntry {
    /// A step of `session` that has not done anything yet (filled in as the step goes).
    pub fn new(session: &str, step: u32, action: StepAction, status: StepStatus) -> StepEntry {
        StepEntry {
            session: session.to_string(),
            step,
            prompt_bytes: 0,
            action,
            skill: None,
            skill_hash: None,
            params: Value::Null,
            result_summary: String::new(),
            status,
            model_us: 0,
            elapsed_us: 0,
            memory_peak_bytes: 0,
            denials: Vec::new(),
            memories_stored: Vec::new(),
            prompt_tokens: None,
            completion_tokens: None,
        }
    }

    pub fn into_entry(self) -> Map<String, Value> {
        entry_of(EntryKind::Step, &self.session, &self)
    }
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepAction {
    #[serde(rename = "call_skill")]
    CallSkill,
    #[serde(rename = "reply")]
    Reply,
    #[serde(rename = "require_more")]
    RequireMore,
    /// The model's reply was no usable action.
    #[serde(rename = "invalid")]
    Invalid,
    /// The run reached its step limit and the host wrote the summary (audit log only).
    #[serde(rename = "step-limit-summary")]
    StepLimitSummary,
}

impl StepAction {
    pub fn as_str(self) -> &'static str {
        match self {
            StepAction::CallSkill => "call_skill",
            StepAction::Reply => "reply",
            StepAction::RequireMore => "require_more",
            StepAction::Invalid => "invalid",
            StepAction::StepLimitSummary => "step-limit-summary",
        }
    }
}

/// How a step ended: a skill call's status or error kind, a refusal by the host, or a step
/// of the loop itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    // The skill ran and returned a SkillResult with this status.
    Success,
    Failure,
    RequireMore,
    // The call produced no result (the kinds of `sandbox::CallError`).
    InvalidParams,
    Failed,
    CpuLimit,
    MemoryLimit,
    Timeout,
    Panic,
    Trap,
    Setup,
    Cancelled,
    /// No call slot (or guest memory) was free in time: the host was busy.
    Busy,
    // The host did not run the call.
    /// Installed, but not in the profile's allowlist.
    NotAllowed,
    UnknownSkill,
    /// Guidance to follow, not a component to call.
    InstructionSkill,
    /// The library could not run it (e.g. a damaged install).
    Error,
    // The loop's own steps.
    /// The reply was no usable action, even after one re-ask.
    ParseError,
    Answered,
    Paused,
    StepLimit,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Success => "success",
            StepStatus::Failure => "failure",
            StepStatus::RequireMore => "require-more",
            StepStatus::InvalidParams => "invalid-params",
            StepStatus::Failed => "failed",
            StepStatus::CpuLimit => "cpu-limit",
            StepStatus::MemoryLimit => "memory-limit",
            StepStatus::Timeout => "timeout",
            StepStatus::Panic => "panic",
            StepStatus::Trap => "trap",
            StepStatus::Setup => "setup",
            StepStatus::Cancelled => "cancelled",
            StepStatus::Busy => "busy",
            StepStatus::NotAllowed => "not-allowed",
            StepStatus::UnknownSkill => "unknown-skill",
            StepStatus::InstructionSkill => "instruction-skill",
            StepStatus::Error => "error",
            StepStatus::ParseError => "parse-error",
            StepStatus::Answered => "answered",
            StepStatus::Paused => "paused",
            StepStatus::StepLimit => "step-limit",
        }
    }
}

impl From<Status> for StepStatus {
    fn from(status: Status) -> StepStatus {
        match status {
            Status::Success => StepStatus::Success,
            Status::Failure => StepStatus::Failure,
            Status::RequireMore => StepStatus::RequireMore,
        }
    }
}

impl From<&CallError> for StepStatus {
    fn from(error: &CallError) -> StepStatus {
        match error {
            CallError::InvalidParams(_) => StepStatus::InvalidParams,
            CallError::Failed(_) => StepStatus::Failed,
            CallError::CpuLimit(_) => StepStatus::CpuLimit,
            CallError::MemoryLimit(_) => StepStatus::MemoryLimit,
            CallError::Timeout { .. } => StepStatus::Timeout,
            CallError::Panic(_) => StepStatus::Panic,
            CallError::Trap(_) => StepStatus::Trap,
            CallError::Setup(_) => StepStatus::Setup,
            CallError::Cancelled => StepStatus::Cancelled,
            CallError::Busy { .. } | CallError::MemoryBudget { .. } => StepStatus::Busy,
        }
    }
}

macro_rules! display_as_str {
    ($($kind:ty),*) => {$(
        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// Compares with the serialized name, as the audit log and `--json` show it.
        impl PartialEq<&str> for $kind {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    )*};
}
display_as_str!(StepAction, StepStatus, CallStatus);

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;
