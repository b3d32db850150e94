//! What a line of the audit log records, as types: a skill or tool call ([`CallEntry`]), an
//! agent step ([`StepEntry`]), and the enums of their statuses and actions. The log itself
//! takes any JSON object ([`super::AuditLog::append`]); these types are how the library, the
//! agent and the MCP server fill one in, so a field cannot be misspelt in one writer and
//! statuses are never recovered by reading a serialized error back.
//!
//! Serialized forms are public (old logs must verify and read the same): every name here
//! is the string the log has always held, and the tests below pin them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::sandbox::{CallError, Denial, LogLine, Status};

/// Most characters of a skill's output kept in a call entry: enough to recognise the
/// result, not a second copy of it.
const PREVIEW_CHARS: usize = 200;

/// What a line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// One skill call (`Library::run`) or MCP memory tool call.
    Call,
    /// One step of the agent loop.
    Step,
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
fn entry_of(kind: EntryKind, session: &str, fields: impl Serialize) -> Map<String, Value> {
    let mut m = new_entry(kind, session);
    if let Ok(Value::Object(fields)) = serde_json::to_value(fields) {
        m.extend(fields);
    }
    m
}

/// `text` on one line, cut to a preview length: enough to recognise an output in a line
/// of the log, not a second copy of it.
pub fn preview(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
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
    Busy,
    Panic,
    Trap,
    Setup,
    Cancelled,
    /// Refused before anything ran (a damaged install, no such skill, an instruction skill).
    Refused,
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
            CallError::Panic(_) => CallStatus::Panic,
            CallError::Trap(_) => CallStatus::Trap,
            CallError::Setup(_) => CallStatus::Setup,
            CallError::Cancelled => CallStatus::Cancelled,
        }
    }
}

/// One call as the log records it: who called what with which parameters, how it ended,
/// and what [`CallDetail`] says about the kind of call it was.
#[derive(Debug, Clone, Serialize)]
pub struct CallEntry {
    pub session: String,
    pub step: u32,
    /// The skill, or the MCP memory tool (`memory_search`, ...).
    pub skill: String,
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
    /// A memory tool call or MEMORY.md read served by `skillhost mcp`.
    MemoryTool(MemoryToolCall),
}

/// What a started call did.
#[derive(Debug, Clone, Serialize)]
pub struct RanCall {
    pub version: Option<String>,
    pub skill_hash: String,
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

/// What an MCP memory tool line adds: who asked over what, and the records it touched.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryToolCall {
    pub transport: String,
    pub client: ClientInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memories_stored: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memories_read: Option<Vec<Value>>,
}

/// An MCP client as it named itself.
#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    pub name: String,
    pub version: String,
}

impl CallEntry {
    /// The status and error sentence of a call's result.
    pub fn ended<T>(result: &Result<T, CallError>, ok: impl Fn(&T) -> CallStatus) -> (CallStatus, Option<String>) {
        match result {
            Ok(out) => (ok(out), None),
            Err(e) => (CallStatus::from(e), Some(e.to_string())),
        }
    }

    pub fn into_entry(self) -> Map<String, Value> {
        entry_of(EntryKind::Call, &self.session.clone(), self)
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
        entry_of(EntryKind::Step, &self.session.clone(), self)
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
    /// No call slot was free in time (the host was busy).
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
            CallError::Busy { .. } => StepStatus::Busy,
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
display_as_str!(StepAction, StepStatus);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names_are_the_serialized_ones() {
        for status in
            [StepStatus::RequireMore, StepStatus::InvalidParams, StepStatus::ParseError, StepStatus::StepLimit]
        {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
            assert_eq!(serde_json::from_value::<StepStatus>(status.as_str().into()).unwrap(), status);
        }
        for action in
            [StepAction::CallSkill, StepAction::RequireMore, StepAction::Invalid, StepAction::StepLimitSummary]
        {
            assert_eq!(serde_json::to_value(action).unwrap(), action.as_str());
        }
    }

    /// Every error kind: the call status, the step status and the error's own serialized
    /// `kind` (the `--json` report) are one name.
    #[test]
    fn a_call_error_kind_is_its_status_everywhere() {
        let errors = [
            CallError::InvalidParams("x".into()),
            CallError::Failed("x".into()),
            CallError::CpuLimit("x".into()),
            CallError::MemoryLimit("x".into()),
            CallError::Timeout { limit_ms: 5 },
            CallError::Busy { running: 1, waited_ms: 2 },
            CallError::Panic("x".into()),
            CallError::Trap("x".into()),
            CallError::Setup("x".into()),
            CallError::Cancelled,
        ];
        for e in &errors {
            let kind = serde_json::to_value(e).unwrap()["kind"].clone();
            assert_eq!(serde_json::to_value(CallStatus::from(e)).unwrap(), kind, "{e:?}");
            assert_eq!(StepStatus::from(e).as_str(), kind, "{e:?}");
        }
        for s in [Status::Success, Status::Failure, Status::RequireMore] {
            let name = serde_json::to_value(s).unwrap();
            assert_eq!(serde_json::to_value(CallStatus::from(s)).unwrap(), name);
            assert_eq!(StepStatus::from(s).as_str(), name);
        }
        assert_eq!(serde_json::to_value(CallStatus::Refused).unwrap(), "refused");
    }
}
