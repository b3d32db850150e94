//! What a run keeps between steps (saved to the memory store after every step), and the kinds
//! and statuses of a step as enums whose serialized names are the ones the audit log, the
//! saved sessions and `--json` have always used.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything a run knows; saved after every step (`Memory::save_agent_session`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentState {
    pub session: String,
    pub goal: String,
    pub profile: String,
    pub namespace: String,
    /// The step in progress or last done (1-based).
    pub step: u32,
    pub max_steps: u32,
    pub decisions: Vec<DecisionRecord>,
    /// Calls per skill.
    pub attempts: BTreeMap<String, u32>,
    pub facts: Facts,
    /// Lines for the next step's "Notes from the host" (memories stored, repeat rule, ...).
    pub feedback: Vec<String>,
    pub pending_question: Option<String>,
    pub answers: Vec<UserAnswer>,
    pub finished: bool,
    pub answer: Option<String>,
    /// The repeat rule fired on the last call: the next step is the `Final` phase.
    #[serde(default)]
    pub repeat_rule: bool,
    /// An early reply was already asked again with the output style (done once per run).
    #[serde(default)]
    pub output_style_given: bool,
    /// The `$WORKSPACE` the run started with, so `--resume` continues in the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<RunWorkspace>,
}

/// Where a run's `$WORKSPACE` pointed, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunWorkspace {
    pub path: std::path::PathBuf,
    /// Given with `--workspace` (over the policy's `[paths]`), not the current directory.
    pub explicit: bool,
}

/// What the run has learned so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Facts {
    /// `L<n>` lines returned by any skill output.
    pub lines: BTreeSet<u64>,
    pub memories: Vec<u64>,
    /// Output hashes seen (per skill: `skill:hash`).
    pub outputs: BTreeSet<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserAnswer {
    pub question: String,
    pub answer: String,
}

/// One step as the history keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub step: u32,
    pub action: StepAction,
    pub reasoning: String,
    pub skill: Option<String>,
    pub params: Value,
    pub status: StepStatus,
    pub summary: String,
    /// What the model sees of the result (a skill's output, or the message).
    pub result: String,
    pub new_facts: bool,
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

impl From<crate::sandbox::Status> for StepStatus {
    fn from(status: crate::sandbox::Status) -> StepStatus {
        use crate::sandbox::Status;
        match status {
            Status::Success => StepStatus::Success,
            Status::Failure => StepStatus::Failure,
            Status::RequireMore => StepStatus::RequireMore,
        }
    }
}

impl From<&crate::sandbox::CallError> for StepStatus {
    fn from(error: &crate::sandbox::CallError) -> StepStatus {
        use crate::sandbox::CallError;
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
display_as_str!(StepAction, StepStatus);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serialized_ones() {
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
        // A sandbox error kind maps to the status of the same name.
        let timeout = crate::sandbox::CallError::Timeout { limit_ms: 5 };
        let kind = serde_json::to_value(&timeout).unwrap()["kind"].clone();
        assert_eq!(kind, StepStatus::from(&timeout).as_str());
    }
}
