//! The agent loop (SPEC section 6): compose the context, ask the model for one action,
//! carry it out, record it, repeat, until the model replies, asks the user, or the step
//! limit ends the run with a summary.
//!
//! All the state a run needs lives in [`AgentState`], saved to the memory store after every
//! step, so a run paused by `require_more` (or cut short by a provider failure) resumes with
//! the same goal, history, facts and counters. The model never gets to crash the loop: an
//! unusable reply is repaired, re-asked once with the parse error, and otherwise counts as a
//! failed step whose message the model sees next time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::{self, Catalog, MemorySummary, REPLY_TOOL, REQUIRE_MORE_TOOL, StepInputs, one_line};
use super::executor::{self, Executed};
use super::guardrail::{EvidenceReport, check_evidence};
use super::profile::{AgentProfile, Phase};
use super::provider::{ChatMessage, ChatReply, ChatRequest, Provider, Purpose, ResponseFormat};
use super::repair::repair_json;
use crate::audit::StepEntry;
use crate::library::{Library, RunOptions, new_session_id};

pub const DEFAULT_MAX_STEPS: u32 = 8;
/// Calls of the same skill in a row, the last two adding nothing, before the model is told
/// it may conclude.
pub const REPEAT_LIMIT: usize = 3;
/// Most characters of a skill result kept in the saved state.
const STORED_RESULT_CHARS: usize = 16_000;

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
    /// `call_skill`, `reply`, `require_more`, or `invalid` (no usable action).
    pub action: String,
    pub reasoning: String,
    pub skill: Option<String>,
    pub params: Value,
    pub status: String,
    pub summary: String,
    /// What the model sees of the result (a skill's output, or the message).
    pub result: String,
    pub new_facts: bool,
}

/// One action, as decided by the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    CallSkill { skill: String, params: Value },
    Reply { message: String },
    RequireMore { question: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub reasoning: String,
    pub action: Action,
}

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
    pub action: String,
    pub skill: Option<String>,
    pub params: Value,
    pub status: String,
    pub summary: String,
    pub prompt_bytes: usize,
    pub model_us: u64,
    pub elapsed_us: u64,
    pub memories_stored: Vec<u64>,
    /// The reply needed `repair_json` (code fences, trailing commas, prose around it).
    pub repaired: bool,
    /// The model was asked again once with the parse error.
    pub reasked: bool,
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
    /// Steps taken in this invocation.
    pub steps: Vec<StepReport>,
    pub total_steps: u32,
}

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
        session: new_session_id(),
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
    };
    Agent::new(library, provider, profile, options, state)?.drive().await
}

/// The saved state of session `id`.
pub fn load_session(library: &Library, id: &str) -> Result<AgentState> {
    let value = library.memory()?.agent_session(id)?.ok_or_else(|| {
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

struct Agent<'a> {
    library: &'a Library,
    provider: &'a dyn Provider,
    profile: &'a AgentProfile,
    options: &'a AgentOptions,
    catalog: Catalog,
    memory: MemorySummary,
    state: AgentState,
    steps: Vec<StepReport>,
}

/// Why a step had no usable action.
struct Unusable(String);

struct Decided {
    decision: Result<Decision, Unusable>,
    repaired: bool,
    reasked: bool,
    model_us: u64,
    prompt_bytes: usize,
}

impl<'a> Agent<'a> {
    fn new(
        library: &'a Library,
        provider: &'a dyn Provider,
        profile: &'a AgentProfile,
        options: &'a AgentOptions,
        state: AgentState,
    ) -> Result<Agent<'a>> {
        let catalog = Catalog::load(library, profile)?;
        let memory = MemorySummary::load(library, &state.namespace, &state.goal)?;
        Ok(Agent { library, provider, profile, options, catalog, memory, state, steps: Vec::new() })
    }

    fn save(&self) -> Result<()> {
        let value = serde_json::to_value(&self.state)?;
        self.library.memory()?.save_agent_session(&self.state.session, &value)
    }

    async fn drive(mut self) -> Result<Outcome> {
        self.save()?;
        loop {
            if self.state.step >= self.state.max_steps {
                return self.step_limit().await;
            }
            self.state.step += 1;
            let phase = self.phase();
            let started = Instant::now();
            let decided = match self.decide(phase).await {
                Ok(d) => d,
                Err(e) => {
                    // No step happened: keep the state resumable and stop with the sentence.
                    self.state.step -= 1;
                    self.save()?;
                    let id = &self.state.session;
                    return Err(anyhow!(
                        "{e:#} (session {id} is saved at step {}: retry with `skillhost run --resume {id}`)",
                        self.state.step
                    ));
                }
            };
            self.state.feedback.clear();
            let mut entry = StepEntry {
                session: self.state.session.clone(),
                step: self.state.step,
                prompt_bytes: decided.prompt_bytes,
                model_us: decided.model_us,
                params: Value::Null,
                ..Default::default()
            };
            let mut report = StepReport {
                step: self.state.step,
                max_steps: self.state.max_steps,
                action: String::new(),
                skill: None,
                params: Value::Null,
                status: String::new(),
                summary: String::new(),
                prompt_bytes: decided.prompt_bytes,
                model_us: decided.model_us,
                elapsed_us: 0,
                memories_stored: Vec::new(),
                repaired: decided.repaired,
                reasked: decided.reasked,
                notes: Vec::new(),
            };
            let mut evidence = None;
            let mut end: Option<OutcomeStatus> = None;
            match decided.decision {
                Err(Unusable(message)) => {
                    let result = format!("your reply could not be used as an action: {message}");
                    self.record("invalid", String::new(), None, Value::Null, "parse-error", &result, &result, false);
                    (report.action, report.status, report.summary) =
                        ("invalid".into(), "parse-error".into(), one_line(&result, 120));
                }
                Ok(Decision { reasoning, action: Action::CallSkill { skill, params } }) => {
                    let opts = RunOptions {
                        session: self.state.session.clone(),
                        step: self.state.step,
                        namespace: self.state.namespace.clone(),
                    };
                    let executed = executor::execute(self.library, &self.catalog, &skill, params, &opts).await;
                    let new_facts = self.absorb(&skill, &executed);
                    self.record(
                        "call_skill",
                        reasoning,
                        Some(skill.clone()),
                        executed.params.clone(),
                        &executed.status,
                        &executed.summary,
                        &executed.result,
                        new_facts,
                    );
                    report.notes = self.notes_after_call(&skill, &executed);
                    report.action = "call_skill".into();
                    report.skill = Some(skill.clone());
                    report.params = executed.params.clone();
                    report.status = executed.status.clone();
                    report.summary = executed.summary.clone();
                    report.memories_stored = executed.memories_stored.clone();
                    entry.skill = Some(skill);
                    entry.skill_hash = executed.skill_hash.clone();
                    entry.elapsed_us = executed.elapsed_us;
                    entry.memory_peak_bytes = executed.memory_peak_bytes;
                    entry.denials = executed.denials.clone();
                    entry.memories_stored = executed.memories_stored.clone();
                }
                Ok(Decision { reasoning, action: Action::Reply { message } }) => {
                    let answer = if self.profile.evidence {
                        let checked = check_evidence(&message, &self.state.facts.lines);
                        evidence = Some(checked.report);
                        checked.text
                    } else {
                        message
                    };
                    self.record(
                        "reply",
                        reasoning,
                        None,
                        Value::Null,
                        "answered",
                        &one_line(&answer, 120),
                        &answer,
                        false,
                    );
                    self.state.finished = true;
                    self.state.answer = Some(answer.clone());
                    (report.action, report.status, report.summary) =
                        ("reply".into(), "answered".into(), one_line(&answer, 120));
                    end = Some(OutcomeStatus::Answered);
                }
                Ok(Decision { reasoning, action: Action::RequireMore { question } }) => {
                    self.record("require_more", reasoning, None, Value::Null, "paused", &question, &question, false);
                    self.state.pending_question = Some(question.clone());
                    (report.action, report.status, report.summary) = ("require_more".into(), "paused".into(), question);
                    end = Some(OutcomeStatus::Paused);
                }
            }
            report.elapsed_us = started.elapsed().as_micros() as u64;
            entry.action = report.action.clone();
            entry.params = report.params.clone();
            entry.status = report.status.clone();
            entry.result_summary = report.summary.clone();
            if entry.elapsed_us == 0 {
                entry.elapsed_us = report.elapsed_us;
            }
            self.audit(entry, evidence.as_ref());
            self.save()?;
            if let Some(progress) = &self.options.progress {
                progress(&report);
            }
            self.steps.push(report);
            if let Some(status) = end {
                let question = self.state.pending_question.clone();
                let answer = self.state.answer.clone();
                return Ok(self.outcome(status, answer, question, evidence));
            }
        }
    }

    fn phase(&self) -> Phase {
        let last_failed = self.state.decisions.last().is_some_and(|d| d.status != "success");
        if self.state.step >= self.state.max_steps || self.state.feedback.iter().any(|f| f.starts_with(REPEAT_NOTE)) {
            Phase::Final
        } else if self.state.step == 1 || last_failed {
            Phase::DecisionPoint
        } else {
            Phase::Step
        }
    }

    /// Ask for one action; repair, re-ask once, or give up with the reason.
    async fn decide(&self, phase: Phase) -> Result<Decided> {
        let inputs = StepInputs {
            profile: self.profile,
            catalog: &self.catalog,
            memory: &self.memory,
            phase,
            tools: self.options.tools,
        };
        let mut messages = context::compose(&self.state, &inputs);
        let format = if self.options.tools {
            let shortlist = context::shortlist(&self.state, &self.catalog);
            ResponseFormat::Tools(self.catalog.tools(&shortlist.candidates))
        } else {
            ResponseFormat::Json
        };
        let tool_bytes = match &format {
            ResponseFormat::Tools(tools) => serde_json::to_string(tools).map(|t| t.len()).unwrap_or(0),
            _ => 0,
        };
        let prompt_bytes = messages.iter().map(|m| m.content.len()).sum::<usize>() + tool_bytes;
        let started = Instant::now();
        let reply = self.chat(Purpose::Decide, format.clone(), messages.clone()).await?;
        let mut decided = Decided {
            decision: Err(Unusable(String::new())),
            repaired: false,
            reasked: false,
            model_us: 0,
            prompt_bytes,
        };
        match interpret(&reply) {
            Ok((decision, repaired)) => {
                decided.decision = Ok(decision);
                decided.repaired = repaired;
            }
            Err(problem) => {
                decided.reasked = true;
                let again = format!(
                    "Your reply could not be used: {problem}. {}",
                    if self.options.tools {
                        "Call exactly one of the tools."
                    } else {
                        "Answer again with one JSON object in the action format, and nothing else."
                    }
                );
                if reply.tool_calls.is_empty() {
                    messages.push(ChatMessage::assistant(reply.text.clone().unwrap_or_default()));
                    messages.push(ChatMessage::user(again));
                } else {
                    messages.push(ChatMessage::assistant_tool_calls(
                        reply.text.clone().unwrap_or_default(),
                        reply.tool_calls.clone(),
                    ));
                    for call in &reply.tool_calls {
                        messages.push(ChatMessage::tool_result(call.id.clone(), again.clone()));
                    }
                }
                let second = self.chat(Purpose::Decide, format, messages).await?;
                match interpret(&second) {
                    Ok((decision, repaired)) => {
                        decided.decision = Ok(decision);
                        decided.repaired = repaired;
                    }
                    Err(problem) => decided.decision = Err(Unusable(problem)),
                }
            }
        }
        decided.model_us = started.elapsed().as_micros() as u64;
        Ok(decided)
    }

    async fn chat(&self, purpose: Purpose, format: ResponseFormat, messages: Vec<ChatMessage>) -> Result<ChatReply> {
        let request = ChatRequest::new(purpose, format, messages);
        self.provider.chat(&request).await.map_err(|e| anyhow!("{e}"))
    }

    /// Take in what a call taught; true when it added anything (lines, memories, a new output).
    fn absorb(&mut self, skill: &str, executed: &Executed) -> bool {
        *self.state.attempts.entry(skill.to_string()).or_insert(0) += 1;
        let facts = &mut self.state.facts;
        let before = facts.lines.len();
        facts.lines.extend(executed.lines.iter().copied());
        let mut new = facts.lines.len() > before || !executed.memories_stored.is_empty();
        facts.memories.extend(executed.memories_stored.iter().copied());
        // An output that cites no log lines counts as new when it was not seen before; one
        // that does is judged by its lines (its header echoes the filters, so it always differs).
        if let Some(hash) = &executed.output_hash
            && executed.lines.is_empty()
        {
            new |= facts.outputs.insert(format!("{skill}:{hash}"));
        }
        new
    }

    /// The "memories stored" confirmation and the repeat rule, for the next step.
    fn notes_after_call(&mut self, skill: &str, executed: &Executed) -> Vec<String> {
        let mut notes = Vec::new();
        if !executed.memories_stored.is_empty() {
            let ids: Vec<String> = executed.memories_stored.iter().map(|id| format!("#{id}")).collect();
            notes.push(format!(
                "memories stored: {} (from {skill}, namespace {})",
                ids.join(" "),
                self.state.namespace
            ));
        }
        for d in &executed.memories_dropped {
            notes.push(format!("memory not stored: {d}"));
        }
        let trailing: Vec<&DecisionRecord> = self
            .state
            .decisions
            .iter()
            .rev()
            .take_while(|d| d.action == "call_skill" && d.skill.as_deref() == Some(skill))
            .collect();
        if trailing.len() >= REPEAT_LIMIT && trailing.iter().take(REPEAT_LIMIT - 1).all(|d| !d.new_facts) {
            notes.push(format!(
                "{REPEAT_NOTE} `{skill}` {} times in a row and the last calls added nothing new; you may conclude with what you have (reply), or try something different",
                trailing.len()
            ));
        }
        if !executed.memories_stored.is_empty() {
            // Refresh the memory part of the prompt only when something was written.
            if let Ok(m) = MemorySummary::load(self.library, &self.state.namespace, &self.state.goal) {
                self.memory = m;
            }
        }
        self.state.feedback.extend(notes.iter().cloned());
        notes
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        action: &str,
        reasoning: String,
        skill: Option<String>,
        params: Value,
        status: &str,
        summary: &str,
        result: &str,
        new_facts: bool,
    ) {
        self.state.decisions.push(DecisionRecord {
            step: self.state.step,
            action: action.into(),
            reasoning,
            skill,
            params,
            status: status.into(),
            summary: summary.into(),
            result: context::truncate(result, STORED_RESULT_CHARS),
            new_facts,
        });
    }

    fn audit(&self, entry: StepEntry, evidence: Option<&EvidenceReport>) {
        let mut line = entry.into_entry();
        // Which model decided (a scripted replay says so), so the record cannot be mistaken.
        line.insert("provider".into(), Value::String(self.provider.name()));
        if let Some(report) = evidence {
            line.insert("evidence".into(), serde_json::to_value(report).unwrap_or(Value::Null));
        }
        let log = self.library.audit_log();
        if let Err(e) = log.append(line) {
            eprintln!("warning: cannot write the audit log {}: {e:#}", log.path().display());
        }
    }

    /// Out of steps: a summary of what is known and what is open, by the model if it can.
    async fn step_limit(mut self) -> Result<Outcome> {
        let started = Instant::now();
        let mut history = String::new();
        for d in &self.state.decisions {
            history.push_str(&format!("- {}\n", d.one_line()));
        }
        let messages = vec![
            ChatMessage::system(format!(
                "{}\nThe step limit was reached before a final answer. Write a short summary for the user: what is known (with the evidence found) and what is still open.",
                self.profile.role(Phase::Final)
            )),
            ChatMessage::user(format!("Goal: {}\n\nSteps taken:\n{history}", self.state.goal)),
        ];
        let prompt_bytes = messages.iter().map(|m| m.content.len()).sum();
        let from_model = match self.chat(Purpose::Summarize, ResponseFormat::Text, messages).await {
            Ok(reply) => reply.text.filter(|t| !t.trim().is_empty()),
            Err(e) => {
                eprintln!("warning: the summary could not be written by the model ({e}); summarizing without it");
                None
            }
        };
        let summary = from_model.unwrap_or_else(|| self.deterministic_summary());
        let (summary, evidence) = if self.profile.evidence {
            let checked = check_evidence(&summary, &self.state.facts.lines);
            (checked.text, Some(checked.report))
        } else {
            (summary, None)
        };
        self.state.finished = true;
        self.state.answer = Some(summary.clone());
        let entry = StepEntry {
            session: self.state.session.clone(),
            step: self.state.step,
            prompt_bytes,
            action: "step-limit-summary".into(),
            params: Value::Null,
            result_summary: one_line(&summary, 120),
            status: "step-limit".into(),
            model_us: started.elapsed().as_micros() as u64,
            elapsed_us: started.elapsed().as_micros() as u64,
            ..Default::default()
        };
        self.audit(entry, evidence.as_ref());
        self.save()?;
        Ok(self.outcome(OutcomeStatus::StepLimit, Some(summary), None, evidence))
    }

    fn deterministic_summary(&self) -> String {
        let mut out = format!(
            "The step limit ({}) was reached before a final answer to: {}\n\nKnown:\n",
            self.state.max_steps, self.state.goal
        );
        let known: Vec<&DecisionRecord> = self.state.decisions.iter().filter(|d| d.status == "success").collect();
        if known.is_empty() {
            out.push_str("- nothing yet: no skill call succeeded\n");
        }
        for d in known {
            out.push_str(&format!("- step {} {}: {}\n", d.step, d.skill.as_deref().unwrap_or(&d.action), d.summary));
        }
        if !self.state.facts.lines.is_empty() {
            let lines: Vec<String> = self.state.facts.lines.iter().take(20).map(|l| format!("L{l}")).collect();
            out.push_str(&format!("- log lines seen: {}\n", lines.join(", ")));
        }
        out.push_str("\nOpen:\n- the question itself: no conclusion was reached\n");
        for d in self.state.decisions.iter().filter(|d| d.status != "success") {
            out.push_str(&format!("- step {} {}: {}\n", d.step, d.skill.as_deref().unwrap_or(&d.action), d.summary));
        }
        out
    }

    fn outcome(
        self,
        status: OutcomeStatus,
        answer: Option<String>,
        question: Option<String>,
        evidence: Option<EvidenceReport>,
    ) -> Outcome {
        Outcome {
            session: self.state.session.clone(),
            profile: self.state.profile.clone(),
            provider: self.provider.name(),
            status,
            answer,
            question,
            evidence,
            steps: self.steps,
            total_steps: self.state.step,
        }
    }
}

/// Starts every repeat-rule note (the phase switches to `Final` when one is pending).
const REPEAT_NOTE: &str = "you called";

/// The action in a reply, and whether it needed repair; `Err` is the problem, for the model.
pub fn interpret(reply: &ChatReply) -> Result<(Decision, bool), String> {
    if let Some(call) = reply.tool_calls.first() {
        let reasoning = reply.text.clone().unwrap_or_default();
        let (arguments, repaired) = parse_object(&call.arguments)
            .map_err(|e| format!("the arguments of your `{}` call are not usable JSON: {e}", call.name))?;
        let text = |key: &str| arguments.get(key).and_then(Value::as_str).map(str::to_string);
        let action = match call.name.as_str() {
            REPLY_TOOL => Action::Reply {
                message: text("message")
                    .filter(|m| !m.trim().is_empty())
                    .ok_or("`reply` needs a non-empty string `message` with the final answer")?,
            },
            REQUIRE_MORE_TOOL => Action::RequireMore {
                question: text("question")
                    .filter(|q| !q.trim().is_empty())
                    .ok_or("`require_more` needs a non-empty string `question`")?,
            },
            skill => Action::CallSkill { skill: skill.to_string(), params: arguments },
        };
        return Ok((Decision { reasoning, action }, repaired));
    }
    let text = reply.text.as_deref().unwrap_or("");
    let (value, repaired) = parse_object(text)?;
    Ok((action_of(&value)?, repaired))
}

fn parse_object(text: &str) -> Result<(Value, bool), String> {
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v @ Value::Object(_)) => Ok((v, false)),
        _ => repair_json(text).map(|v| (v, true)).map_err(|e| e.to_string()),
    }
}

/// The action an action object describes.
pub fn action_of(value: &Value) -> Result<Decision, String> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let reasoning = text("reasoning").unwrap_or("").to_string();
    let message = text("message");
    let action = match text("next_action") {
        Some("call_skill") => {
            let skill =
                text("skill_name").ok_or("`call_skill` needs `skill_name`: the name of a skill from the catalog")?;
            let params = match value.get("parameters") {
                None | Some(Value::Null) => Value::Object(Default::default()),
                // Some models put the object in a string.
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                Some(other) => other.clone(),
            };
            Action::CallSkill { skill: skill.to_string(), params }
        }
        Some("reply") => Action::Reply {
            message: message.ok_or("`reply` needs `message`: the final answer for the user")?.to_string(),
        },
        Some("require_more") => Action::RequireMore {
            question: message.ok_or("`require_more` needs `message`: the question for the user")?.to_string(),
        },
        Some(other) => return Err(format!("`next_action` is `{other}`; it must be call_skill, reply or require_more")),
        None => return Err("the object has no `next_action` (call_skill, reply or require_more)".to_string()),
    };
    Ok(Decision { reasoning, action })
}
