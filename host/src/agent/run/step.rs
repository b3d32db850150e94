//! One step of the loop: compose the context, ask for one action (repairing or re-asking once),
//! carry it out, take in what it taught, record it in the state and the audit log.

use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};
use serde_json::Value;

use super::super::context::{self, Catalog, MemorySummary, StepInputs};
use super::super::executor::{self, Executed};
use super::super::guardrail::{EvidenceReport, check_evidence};
use super::super::profile::{AgentProfile, Phase};
use super::super::provider::{ChatMessage, ChatReply, ChatRequest, Provider, Purpose, ResponseFormat, ToolCall, Usage};
use super::decision::{Action, Decision, interpret};
use super::outcome::{Outcome, OutcomeStatus, StepReport};
use super::state::{AgentState, DecisionRecord, StepAction, StepStatus};
use super::{AgentOptions, REPEAT_LIMIT, STORED_RESULT_CHARS};
use crate::audit::StepEntry;
use crate::library::{Library, RunOptions};
use crate::text::one_line;

pub(super) struct Agent<'a> {
    pub(super) library: &'a Library,
    pub(super) provider: &'a dyn Provider,
    pub(super) profile: &'a AgentProfile,
    pub(super) options: &'a AgentOptions,
    pub(super) catalog: Catalog,
    pub(super) memory: MemorySummary,
    pub(super) state: AgentState,
    pub(super) steps: Vec<StepReport>,
    /// When this invocation started (the run's elapsed time in the outcome).
    pub(super) started: Instant,
}

/// Why a step had no usable action.
struct Unusable(String);

struct Decided {
    decision: Result<Decision, Unusable>,
    repaired: bool,
    reasked: bool,
    /// An early reply was asked again with the output style (the final role slice).
    styled: bool,
    /// A note for the progress line (e.g. why the styled re-ask did not happen).
    note: Option<String>,
    model_us: u64,
    prompt_bytes: usize,
    /// Summed over the step's requests; `None` when the provider reported none.
    usage: Option<Usage>,
}

/// Most characters of an unusable reply echoed back in the re-ask: the model needs to see
/// what it sent, not a second copy of a runaway reply (a 10 MB reply made a 10 MB request).
pub(super) const REASK_ECHO_CHARS: usize = 2_000;

fn add_usage(total: &mut Option<Usage>, more: Option<Usage>) {
    if let Some(more) = more {
        let sum = total.get_or_insert(Usage { prompt_tokens: 0, completion_tokens: 0 });
        sum.prompt_tokens += more.prompt_tokens;
        sum.completion_tokens += more.completion_tokens;
    }
}

/// `text` cut to `max` characters, saying how much was cut.
fn clip(text: &str, max: usize) -> String {
    crate::text::cut_counted(text, max, |n| format!("… [{n} more characters not repeated]"))
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
        Ok(Agent {
            library,
            provider,
            profile,
            options,
            catalog,
            memory,
            state,
            steps: Vec::new(),
            started: Instant::now(),
        })
    }

    pub(super) fn save(&self) -> Result<()> {
        let value = serde_json::to_value(&self.state)?;
        self.library.save_agent_session(&self.state.session, &value)
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
            self.state.output_style_given |= decided.styled;
            // Action and status are set from the step's report once it is known.
            let mut entry = StepEntry {
                prompt_bytes: decided.prompt_bytes,
                model_us: decided.model_us,
                prompt_tokens: decided.usage.map(|u| u.prompt_tokens),
                completion_tokens: decided.usage.map(|u| u.completion_tokens),
                ..StepEntry::new(&self.state.session, self.state.step, StepAction::Invalid, StepStatus::ParseError)
            };
            let mut evidence = None;
            let mut end: Option<OutcomeStatus> = None;
            let mut notes: Vec<String> = decided.note.iter().cloned().collect();
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
                        ..Default::default()
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
                    notes.extend(self.notes_after_call(&skill, &executed));
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
                styled: decided.styled,
                prompt_tokens: decided.usage.map(|u| u.prompt_tokens),
                completion_tokens: decided.usage.map(|u| u.completion_tokens),
                notes,
            };
            entry.action = report.action;
            entry.params = report.params.clone();
            entry.status = report.status;
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

    /// Ask for one action; repair, re-ask once, or give up with the reason. An early reply
    /// (before the final phase) is asked once more with the final role slice, so a model that
    /// answers early still sees the output style.
    async fn decide(&self, phase: Phase) -> Result<Decided> {
        let started = Instant::now();
        let mut decided = self.decide_in(phase).await?;
        let early_reply = matches!(decided.decision, Ok(Decision { action: Action::Reply { .. }, .. }));
        if early_reply && phase != Phase::Final && !self.state.output_style_given && self.has_final_slice() {
            let first = std::mem::replace(&mut decided.decision, Err(Unusable(String::new())));
            let Ok(Decision { action: Action::Reply { message }, .. }) = &first else { unreachable!() };
            let nudge = format!(
                "Before this answer is accepted: the role above now has the output style{} for the final answer. Give your final answer again following it (reply), or take another step if you are not done.",
                if self.profile.evidence { " and the evidence rule" } else { "" }
            );
            match self.decide_styled(message, &nudge).await {
                Ok(styled) => {
                    add_usage(&mut decided.usage, styled.usage);
                    decided.prompt_bytes += styled.prompt_bytes;
                    decided.repaired |= styled.repaired;
                    decided.styled = true;
                    // An unusable styled reply does not void the usable first one.
                    decided.decision = match styled.decision {
                        Ok(decision) => Ok(decision),
                        Err(_) => first,
                    };
                }
                Err(error) => {
                    decided.decision = first;
                    decided.note = Some(format!(
                        "the output style could not be given before the reply ({error:#}); the reply stands as first given"
                    ));
                }
            }
        }
        decided.model_us = started.elapsed().as_micros() as u64;
        Ok(decided)
    }

    /// Whether the final phase adds anything to the role (an output style, the evidence rule).
    fn has_final_slice(&self) -> bool {
        !self.profile.output_style.trim().is_empty() || self.profile.evidence
    }

    /// The re-ask of an early reply: the final-phase context, the reply, and `nudge`.
    async fn decide_styled(&self, reply: &str, nudge: &str) -> Result<Decided> {
        let (mut messages, format, prompt_bytes) = self.request_parts(Phase::Final);
        if self.options.tools {
            let call = ToolCall {
                id: "early-reply".to_string(),
                name: super::super::context::REPLY_TOOL.to_string(),
                arguments: serde_json::json!({ "message": clip(reply, REASK_ECHO_CHARS) }).to_string(),
            };
            messages.push(ChatMessage::assistant_tool_calls("", vec![call]));
            messages.push(ChatMessage::tool_result("early-reply", nudge));
        } else {
            let echoed = serde_json::json!({"next_action": "reply", "message": clip(reply, REASK_ECHO_CHARS)});
            messages.push(ChatMessage::assistant(echoed.to_string()));
            messages.push(ChatMessage::user(nudge));
        }
        let reply = self.chat(Purpose::Decide, format, messages).await?;
        let decision = interpret(&reply).map_err(Unusable);
        let repaired = decision.as_ref().is_ok_and(|(_, repaired)| *repaired);
        Ok(Decided {
            decision: decision.map(|(d, _)| d),
            repaired,
            reasked: false,
            styled: true,
            note: None,
            model_us: 0,
            prompt_bytes,
            usage: reply.usage,
        })
    }

    /// The messages, format and prompt size of one decision in `phase`.
    fn request_parts(&self, phase: Phase) -> (Vec<ChatMessage>, ResponseFormat, usize) {
        let inputs = StepInputs {
            profile: self.profile,
            catalog: &self.catalog,
            memory: &self.memory,
            phase,
            tools: self.options.tools,
        };
        let messages = context::compose(&self.state, &inputs);
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
        (messages, format, prompt_bytes)
    }

    /// One decision in `phase`, re-asked once with the parse error when unusable.
    async fn decide_in(&self, phase: Phase) -> Result<Decided> {
        let (mut messages, format, prompt_bytes) = self.request_parts(phase);
        let reply = self.chat(Purpose::Decide, format.clone(), messages.clone()).await?;
        let mut decided = Decided {
            decision: Err(Unusable(String::new())),
            repaired: false,
            reasked: false,
            styled: false,
            note: None,
            model_us: 0,
            prompt_bytes,
            usage: reply.usage,
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
                let echoed = clip(reply.text.as_deref().unwrap_or_default(), REASK_ECHO_CHARS);
                if reply.tool_calls.is_empty() {
                    messages.push(ChatMessage::assistant(echoed));
                    messages.push(ChatMessage::user(again));
                } else {
                    let calls: Vec<ToolCall> = reply
                        .tool_calls
                        .iter()
                        .map(|call| ToolCall { arguments: clip(&call.arguments, REASK_ECHO_CHARS), ..call.clone() })
                        .collect();
                    for call in &calls {
                        messages.push(ChatMessage::tool_result(call.id.clone(), again.clone()));
                    }
                    messages.insert(messages.len() - calls.len(), ChatMessage::assistant_tool_calls(echoed, calls));
                }
                let second = self.chat(Purpose::Decide, format, messages).await?;
                add_usage(&mut decided.usage, second.usage);
                match interpret(&second) {
                    Ok((decision, repaired)) => {
                        decided.decision = Ok(decision);
                        decided.repaired = repaired;
                    }
                    Err(problem) => decided.decision = Err(Unusable(problem)),
                }
            }
        }
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

    /// Take in what a call taught; true when what it returned added anything (new lines, a
    /// new output). Memories it stored do not count: a repeated call's summary merges into
    /// the memory of the previous one, which is no new fact.
    fn absorb(&mut self, skill: &str, executed: &Executed) -> bool {
        *self.state.attempts.entry(skill.to_string()).or_insert(0) += 1;
        let facts = &mut self.state.facts;
        let before = facts.lines.len();
        facts.lines.extend(executed.lines.iter().copied());
        let mut new = facts.lines.len() > before;
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
                log.location(),
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
            prompt_tokens: self.steps.iter().filter_map(|s| s.prompt_tokens).sum(),
            completion_tokens: self.steps.iter().filter_map(|s| s.completion_tokens).sum(),
            elapsed_us: self.started.elapsed().as_micros() as u64,
            steps: self.steps,
            total_steps: self.state.step,
        }
    }
}
