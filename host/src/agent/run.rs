//! The agent loop (SPEC section 6): compose the context, ask the model for one action,
//! carry it out, record it, repeat, until the model replies, asks the user, or the step
//! limit ends the run with a summary.
//!
//! All the state a run needs lives in [`AgentState`], saved to the memory store after every
//! step, so a run paused by `require_more` (or cut short by a provider failure) resumes with
//! the same goal, history, facts and counters. The model never gets to crash the loop: an
//! unusable reply is repaired, re-asked once with the parse error, and otherwise counts as a
//! failed step whose message the model sees next time.
//!
//! The loop is split along its seams: [`state`] (what is saved between steps, with the step
//! kinds and statuses as enums), [`decision`] (reading the model's reply into one action),
//! `step` (one step: decide, carry out, record), `summary` (the end at the step limit) and
//! [`outcome`] (what a run reports).

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};

use super::profile::AgentProfile;
use super::provider::Provider;
use crate::library::{Library, new_session_id};

pub mod decision;
pub mod outcome;
pub mod state;
mod step;
mod summary;

pub use decision::{Action, Decision, action_of, interpret};
pub use outcome::{Outcome, OutcomeStatus, StepReport};
pub use state::{AgentState, DecisionRecord, Facts, RunWorkspace, StepAction, StepStatus, UserAnswer};
use step::Agent;

pub const DEFAULT_MAX_STEPS: u32 = 8;
/// Calls of the same skill in a row, the last two adding nothing, before the model is told
/// it may conclude.
pub const REPEAT_LIMIT: usize = 3;
/// Most characters of a skill result kept in the saved state.
const STORED_RESULT_CHARS: usize = 16_000;

/// Called after every step (live progress).
pub type ProgressFn = Box<dyn Fn(&StepReport) + Send + Sync>;

/// Knobs of a run.
#[derive(Default)]
pub struct AgentOptions {
    /// Overrides the profile's `max_steps` (default [`DEFAULT_MAX_STEPS`]).
    pub max_steps: Option<u32>,
    /// Native tool calling instead of JSON mode.
    pub tools: bool,
    /// Called after every step.
    pub progress: Option<ProgressFn>,
    /// The session id of a new run (default: a fresh one), so a caller knows it before the
    /// run ends (e.g. to name it when interrupted).
    pub session: Option<String>,
    /// Recorded in the saved state for `--resume`.
    pub workspace: Option<RunWorkspace>,
}

/// Which profile handles `request`: the one asked for by name, else the router's choice.
pub async fn choose_profile(
    request: &str,
    profiles: &[AgentProfile],
    requested: Option<&str>,
    provider: Option<&dyn Provider>,
) -> Result<(AgentProfile, crate::agent::router::Route)> {
    let route = crate::agent::router::route(request, profiles, requested, provider).await?;
    let profile = profiles.iter().find(|p| p.name == route.profile).cloned().ok_or_else(|| {
        let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
        anyhow!("no agent profile named `{}`; the profiles are: {}", route.profile, names.join(", "))
    })?;
    Ok((profile, route))
}

/// Start a new run of `goal` with `profile`.
pub async fn run(
    library: &Library,
    provider: &dyn Provider,
    profile: &AgentProfile,
    goal: &str,
    options: &AgentOptions,
) -> Result<Outcome> {
    if goal.trim().is_empty() {
        bail!("the task is empty; say what the agent should do");
    }
    let max_steps = options.max_steps.or(profile.max_steps).unwrap_or(DEFAULT_MAX_STEPS).max(1);
    let state = AgentState {
        session: options.session.clone().unwrap_or_else(new_session_id),
        goal: goal.trim().to_string(),
        profile: profile.name.clone(),
        namespace: profile.namespace.clone(),
        step: 0,
        max_steps,
        decisions: Vec::new(),
        attempts: BTreeMap::new(),
        facts: Facts::default(),
        feedback: Vec::new(),
        pending_question: None,
        answers: Vec::new(),
        finished: false,
        answer: None,
        repeat_rule: false,
        output_style_given: false,
        workspace: options.workspace.clone(),
    };
    Agent::new(library, provider, profile, options, state)?.drive().await
}

/// The saved state of session `id`.
pub fn load_session(library: &Library, id: &str) -> Result<AgentState> {
    let value = library.agent_session(id)?.ok_or_else(|| {
        anyhow!("no agent session `{id}`; the id is printed when a run pauses (`skillhost audit list` shows sessions)")
    })?;
    serde_json::from_value(value).map_err(|e| anyhow!("agent session `{id}` cannot be read ({e}); start a new run"))
}

/// Continue a paused run with the user's `answer`.
pub async fn resume(
    library: &Library,
    provider: &dyn Provider,
    profile: &AgentProfile,
    mut state: AgentState,
    answer: Option<&str>,
    options: &AgentOptions,
) -> Result<Outcome> {
    if state.finished {
        bail!("session {} already finished; start a new run", state.session);
    }
    if state.namespace != profile.namespace {
        bail!(
            "session {} used memory namespace `{}`, but profile `{}` now uses `{}`; resuming would mix memories, so start a new run",
            state.session,
            state.namespace,
            profile.name,
            profile.namespace
        );
    }
    match (state.pending_question.take(), answer) {
        (Some(question), Some(answer)) => {
            state.feedback.push(format!("the user answered your question \"{question}\": {answer}"));
            state.answers.push(UserAnswer { question, answer: answer.to_string() });
        }
        (Some(question), None) => {
            bail!(
                "session {} is waiting for an answer to: {question}\nresume with: skillhost run --resume {} \"ANSWER\"",
                state.session,
                state.session
            )
        }
        // A retry after a provider failure: the answer (if any) was already recorded.
        (None, Some(answer)) if state.answers.last().is_some_and(|a| a.answer == answer) => {}
        (None, Some(answer)) => {
            state.feedback.push(format!("the user adds: {answer}"));
            state.answers.push(UserAnswer { question: "(added by the user)".into(), answer: answer.to_string() });
        }
        (None, None) => {}
    }
    if let Some(m) = options.max_steps {
        state.max_steps = m.max(state.step + 1);
    } else if state.step >= state.max_steps {
        state.max_steps = state.step + 1;
    }
    Agent::new(library, provider, profile, options, state)?.drive().await
}
