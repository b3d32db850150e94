//! What a run reports: each step (progress lines, `--json`) and how the run ended.

use serde::Serialize;
use serde_json::Value;

use super::super::guardrail::EvidenceReport;
use super::state::{StepAction, StepStatus};

/// How a run ended (for now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeStatus {
    Answered,
    /// `require_more`: waiting for the user's answer.
    Paused,
    StepLimit,
}

/// One step, for progress lines and the `--json` outcome.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: u32,
    pub max_steps: u32,
    pub action: StepAction,
    pub skill: Option<String>,
    pub params: Value,
    pub status: StepStatus,
    pub summary: String,
    pub prompt_bytes: usize,
    pub model_us: u64,
    pub elapsed_us: u64,
    pub memories_stored: Vec<u64>,
    /// The reply needed `repair_json` (code fences, trailing commas, prose around it).
    pub repaired: bool,
    /// The model was asked again once with the parse error.
    pub reasked: bool,
    /// The model replied early and was asked once more with the output style.
    pub styled: bool,
    /// Tokens of the step's model requests, as the provider reported them (`None`: it did not).
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Notes the host adds for the next step (repeat rule, dropped memories).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub session: String,
    pub profile: String,
    pub provider: String,
    pub status: OutcomeStatus,
    /// The final answer (after guardrails), or the step-limit summary.
    pub answer: Option<String>,
    pub question: Option<String>,
    /// The guardrail's findings for evidence-style profiles.
    pub evidence: Option<EvidenceReport>,
    /// Tokens reported by the provider over this invocation's steps.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Wall time of this invocation, routing excluded.
    pub elapsed_us: u64,
    /// Steps taken in this invocation.
    pub steps: Vec<StepReport>,
    pub total_steps: u32,
}
