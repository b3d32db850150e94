//! The end of a run at its step limit: a summary of what is known and what is open, written
//! by the model when it can, else by the host from the history.

use std::time::Instant;

use anyhow::Result;

use super::super::guardrail::check_evidence;
use super::super::profile::Phase;
use super::super::provider::{ChatMessage, Purpose, ResponseFormat};
use super::outcome::{Outcome, OutcomeStatus};
use super::state::{DecisionRecord, StepAction, StepStatus};
use super::step::Agent;
use crate::audit::StepEntry;
use crate::text::one_line;

impl Agent<'_> {
    /// Out of steps: a summary of what is known and what is open, by the model if it can.
    pub(super) async fn step_limit(mut self) -> Result<Outcome> {
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
        let mut usage = None;
        let from_model = match self.chat(Purpose::Summarize, ResponseFormat::Text, messages).await {
            Ok(reply) => {
                usage = reply.usage;
                reply.text.filter(|t| !t.trim().is_empty())
            }
            Err(e) => {
                tracing::warn!(error = %e, "the summary could not be written by the model; summarizing without it");
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
            prompt_bytes,
            result_summary: one_line(&summary, 120),
            model_us: started.elapsed().as_micros() as u64,
            elapsed_us: started.elapsed().as_micros() as u64,
            prompt_tokens: usage.map(|u| u.prompt_tokens),
            completion_tokens: usage.map(|u| u.completion_tokens),
            ..StepEntry::new(&self.state.session, self.state.step, StepAction::StepLimitSummary, StepStatus::StepLimit)
        };
        let audited = self.audit(entry, evidence.as_ref());
        self.save()?;
        audited?;
        Ok(self.outcome(OutcomeStatus::StepLimit, Some(summary), None, evidence))
    }

    fn deterministic_summary(&self) -> String {
        let mut out = format!(
            "The step limit ({}) was reached before a final answer to: {}\n\nKnown:\n",
            self.state.max_steps, self.state.goal
        );
        let known: Vec<&DecisionRecord> =
            self.state.decisions.iter().filter(|d| d.status == StepStatus::Success).collect();
        if known.is_empty() {
            out.push_str("- nothing yet: no skill call succeeded\n");
        }
        for d in known {
            out.push_str(&format!(
                "- step {} {}: {}\n",
                d.step,
                d.skill.as_deref().unwrap_or(d.action.as_str()),
                d.summary
            ));
        }
        if !self.state.facts.lines.is_empty() {
            let lines: Vec<String> = self.state.facts.lines.iter().take(20).map(|l| format!("L{l}")).collect();
            out.push_str(&format!("- log lines seen: {}\n", lines.join(", ")));
        }
        out.push_str("\nOpen:\n- the question itself: no conclusion was reached\n");
        for d in self.state.decisions.iter().filter(|d| d.status != StepStatus::Success) {
            out.push_str(&format!(
                "- step {} {}: {}\n",
                d.step,
                d.skill.as_deref().unwrap_or(d.action.as_str()),
                d.summary
            ));
        }
        out
    }
}
