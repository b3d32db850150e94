//! One step of the loop: compose the context, ask for one action (repairing or re-asking once),
//! carry it out, take in what it taught, record it in the state and the audit log.

use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};
use serde_json::Value;

use super::super::context::{self, Catalog, MemorySummary, StepInputs, one_line};
use super::super::executor::{self, Executed};
use super::super::guardrail::{EvidenceReport, check_evidence};
use super::super::profile::{AgentProfile, Phase};
use super::super::provider::{ChatMessage, ChatReply, ChatRequest, Provider, Purpose, ResponseFormat};
use super::decision::{Action, Decision, interpret};
use super::outcome::{Outcome, OutcomeStatus, StepReport};
use super::state::{AgentState, DecisionRecord, StepAction, StepStatus};
use super::{AgentOptions, REPEAT_LIMIT, STORED_RESULT_CHARS};
use crate::audit::StepEntry;
use crate::library::{Library, RunOptions};

pub(super) struct Agent<'a> {
    pub(super) library: &'a Library,
    pub(super) provider: &'a dyn Provider,
    pub(super) profile: &'a AgentProfile,
    pub(super) options: &'a AgentOptions,
    pub(super) catalog: Catalog,
    pub(super) memory: MemorySummary,
    pub(super) state: AgentState,
    pub(super) steps: Vec<StepReport>,
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
    pub(super) fn new(
        library: &'a Library,
        provider: &'a dyn Provider,
        profile: &'a AgentProfile,
        options: &'a AgentOptions,
        state: AgentState,
    ) -> Result<Agent<'a>> {
        let catalog = Catalog::load(library, profile)?;
        let memory = MemorySummary::load(library, &state.session, &state.namespace, &state.goal)?;
        Ok(Agent { library, provider, profile, options, catalog, memory, state, steps: Vec::new() })
    }

    pub(super) fn save(&self) -> Result<()> {
        let value = serde_json::to_value(&self.state)?;
        self.library.memory()?.save_agent_session(&self.state.session, &value)
    }

    pub(super) async fn drive(mut self) -> Result<Outcome> {
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
            self.state.repeat_rule = false;
            let mut entry = StepEntry {
                session: self.state.session.clone(),
                step: self.state.step,
                prompt_bytes: decided.prompt_bytes,
                model_us: decided.model_us,
                params: Value::Null,
                ..Default::default()
            };
            let mut evidence = None;
            let mut end: Option<OutcomeStatus> = None;
            let mut notes = Vec::new();
            let mut called: Option<(String, Executed)> = None;
            let (action, status, summary) = match decided.decision {
                Err(Unusable(message)) => {
                    let result = format!("your reply could not be used as an action: {message}");
                    let summary = one_line(&result, 120);
                    self.record(
                        StepAction::Invalid,
                        String::new(),
                        None,
                        Value::Null,
                        StepStatus::ParseError,
                        &result,
                        &result,
                        false,
                    );
                    (StepAction::Invalid, StepStatus::ParseError, summary)
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
                        StepAction::CallSkill,
                        reasoning,
                        Some(skill.clone()),
                        executed.params.clone(),
                        executed.status,
                        &executed.summary,
                        &executed.result,
                        new_facts,
                    );
                    notes = self.notes_after_call(&skill, &executed);
                    entry.skill = Some(skill.clone());
                    entry.skill_hash = executed.skill_hash.clone();
                    entry.elapsed_us = executed.elapsed_us;
                    entry.memory_peak_bytes = executed.memory_peak_bytes;
                    entry.denials = executed.denials.clone();
                    entry.memories_stored = executed.memories_stored.clone();
                    let (status, summary) = (executed.status, executed.summary.clone());
                    called = Some((skill, executed));
                    (StepAction::CallSkill, status, summary)
                }
                Ok(Decision { reasoning, action: Action::Reply { message } }) => {
                    let answer = if self.profile.evidence {
                        let checked = check_evidence(&message, &self.state.facts.lines);
                        evidence = Some(checked.report);
                        checked.text
                    } else {
                        message
                    };
                    let summary = one_line(&answer, 120);
                    self.record(
                        StepAction::Reply,
                        reasoning,
                        None,
                        Value::Null,
                        StepStatus::Answered,
                        &summary,
                        &answer,
                        false,
                    );
                    self.state.finished = true;
                    self.state.answer = Some(answer);
                    end = Some(OutcomeStatus::Answered);
                    (StepAction::Reply, StepStatus::Answered, summary)
                }
                Ok(Decision { reasoning, action: Action::RequireMore { question } }) => {
                    self.record(
                        StepAction::RequireMore,
                        reasoning,
                        None,
                        Value::Null,
                        StepStatus::Paused,
                        &question,
                        &question,
                        false,
                    );
                    self.state.pending_question = Some(question.clone());
                    end = Some(OutcomeStatus::Paused);
                    (StepAction::RequireMore, StepStatus::Paused, question)
                }
            };
            let (skill, params, memories_stored) = match called {
                Some((skill, executed)) => (Some(skill), executed.params, executed.memories_stored),
                None => (None, Value::Null, Vec::new()),
            };
            let report = StepReport {
                step: self.state.step,
                max_steps: self.state.max_steps,
                action,
                skill,
                params,
                status,
                summary,
                prompt_bytes: decided.prompt_bytes,
                model_us: decided.model_us,
                elapsed_us: started.elapsed().as_micros() as u64,
                memories_stored,
                repaired: decided.repaired,
                reasked: decided.reasked,
                notes,
            };
            entry.action = report.action.to_string();
            entry.params = report.params.clone();
            entry.status = report.status.to_string();
            entry.result_summary = report.summary.clone();
            if entry.elapsed_us == 0 {
                entry.elapsed_us = report.elapsed_us;
            }
            // Saved first, so a refused audit line loses no step: the run resumes after the fix.
            let audited = self.audit(entry, evidence.as_ref());
            self.save()?;
            audited?;
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
        let last_failed = self.state.decisions.last().is_some_and(|d| d.status != StepStatus::Success);
        if self.state.step >= self.state.max_steps || self.state.repeat_rule {
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

    pub(super) async fn chat(
        &self,
        purpose: Purpose,
        format: ResponseFormat,
        messages: Vec<ChatMessage>,
    ) -> Result<ChatReply> {
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
            .take_while(|d| d.action == StepAction::CallSkill && d.skill.as_deref() == Some(skill))
            .collect();
        if trailing.len() >= REPEAT_LIMIT && trailing.iter().take(REPEAT_LIMIT - 1).all(|d| !d.new_facts) {
            notes.push(format!(
                "you called `{skill}` {} times in a row and the last calls added nothing new; you may conclude with what you have (reply), or try something different",
                trailing.len()
            ));
            self.state.repeat_rule = true;
        }
        if !executed.memories_stored.is_empty() {
            // Refresh the memory part of the prompt only when something was written.
            if let Ok(m) =
                MemorySummary::load(self.library, &self.state.session, &self.state.namespace, &self.state.goal)
            {
                self.memory = m;
            }
        }
        self.state.feedback.extend(notes.iter().cloned());
        notes
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        action: StepAction,
        reasoning: String,
        skill: Option<String>,
        params: Value,
        status: StepStatus,
        summary: &str,
        result: &str,
        new_facts: bool,
    ) {
        self.state.decisions.push(DecisionRecord {
            step: self.state.step,
            action,
            reasoning,
            skill,
            params,
            status,
            summary: summary.into(),
            result: context::truncate(result, STORED_RESULT_CHARS),
            new_facts,
        });
    }

    /// Append the step's audit line. A run does not go on unaudited: the error says how to
    /// repair the log and resume (the step is saved by then).
    pub(super) fn audit(&self, entry: StepEntry, evidence: Option<&EvidenceReport>) -> Result<()> {
        let mut line = entry.into_entry();
        // Which model decided (a scripted replay says so), so the record cannot be mistaken.
        line.insert("provider".into(), Value::String(self.provider.name()));
        if let Some(report) = evidence {
            line.insert("evidence".into(), serde_json::to_value(report).unwrap_or(Value::Null));
        }
        let log = self.library.audit_log();
        log.append(line).map(drop).with_context(|| {
            format!(
                "the agent run stopped after step {}: its audit line cannot be written to {}. The session is saved; \
                 run `skillhost audit verify` (and `skillhost audit seal` if it reports damage), then resume with \
                 `skillhost run --resume {}`",
                self.state.step,
                log.path().display(),
                self.state.session
            )
        })
    }

    pub(super) fn outcome(
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
