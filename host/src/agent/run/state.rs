//! What a run keeps between steps (saved to the memory store after every step). The kinds
//! and statuses of a step are the audit log's enums (`audit::StepAction`, `audit::StepStatus`),
//! whose serialized names the saved sessions and `--json` share.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything a run knows; saved after every step (`Library::save_agent_session`).
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

// The kinds and statuses of a step are the audit log's vocabulary: defined with its entries.
pub use crate::audit::{StepAction, StepStatus};
