//! Carries out one `call_skill` action. Every way it can go wrong (a skill that does not
//! exist or that the profile may not use, parameters that do not validate, a denied
//! capability, a trap, a timeout, a failure) comes back as an [`Executed`] whose `result`
//! is a sentence the model can act on next step; nothing here returns an error to the loop.

use std::collections::BTreeSet;

use serde_json::Value;

use super::context::{Catalog, truncate};
use super::guardrail::returned_lines;
use crate::audit::StepStatus;
use crate::library::{Library, RunOptions};
use crate::sandbox::{CallError, Denial};
use crate::text::one_line;

/// What one skill call did, for the next step, the audit line and the progress line.
#[derive(Debug, Clone)]
pub struct Executed {
    /// The skill's status, the sandbox's error kind, or why the host did not run it.
    pub status: StepStatus,
    /// One line for progress and the audit log.
    pub summary: String,
    /// What the model sees: the skill's output, or the message explaining what went wrong.
    pub result: String,
    pub skill_hash: Option<String>,
    /// The parameters as run (defaults filled in).
    pub params: Value,
    /// `L<n>` lines in the output.
    pub lines: BTreeSet<u64>,
    pub memories_stored: Vec<u64>,
    pub memories_dropped: Vec<String>,
    pub denials: Vec<Denial>,
    pub elapsed_us: u64,
    pub memory_peak_bytes: usize,
    /// sha256 of the output (successful calls only).
    pub output_hash: Option<String>,
}

impl Executed {
    /// A call that produced no output (`status` says why).
    fn without_output(status: StepStatus, params: Value, message: String) -> Executed {
        Executed {
            status,
            summary: one_line(&message, 120),
            result: message,
            skill_hash: None,
            params,
            lines: BTreeSet::new(),
            memories_stored: Vec::new(),
            memories_dropped: Vec::new(),
            denials: Vec::new(),
            elapsed_us: 0,
            memory_peak_bytes: 0,
            output_hash: None,
        }
    }

    pub fn succeeded(&self) -> bool {
        self.status == StepStatus::Success
    }
}

pub async fn execute(library: &Library, catalog: &Catalog, skill: &str, params: Value, opts: &RunOptions) -> Executed {
    let Some(entry) = catalog.get(skill) else {
        if catalog.not_allowed.iter().any(|n| n == skill) {
            let message = format!(
                "`{skill}` is installed but this agent may not use it; use one of: {}",
                executable_names(catalog)
            );
            return Executed::without_output(StepStatus::NotAllowed, params, message);
        }
        let close = close_names(skill, catalog);
        let message = if close.is_empty() {
            format!("there is no skill named `{skill}`; the skills are: {}", executable_names(catalog))
        } else {
            format!(
                "there is no skill named `{skill}`; did you mean {}? (all skills: {})",
                close.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" or "),
                executable_names(catalog)
            )
        };
        return Executed::without_output(StepStatus::UnknownSkill, params, message);
    };
    if entry.instruction {
        let message = format!(
            "`{skill}` is an instruction skill: guidance to follow, not something to call. Its guidance:\n{}",
            truncate(entry.body.trim(), 2000)
        );
        return Executed::without_output(StepStatus::InstructionSkill, params, message);
    }
    let report = match library.run(skill, params.clone(), opts).await {
        Ok(r) => r,
        Err(e) => {
            return Executed::without_output(StepStatus::Error, params, format!("`{skill}` could not run: {e:#}"));
        }
    };
    let mut out = Executed {
        skill_hash: Some(report.content_hash.clone()),
        memories_stored: report.memories.stored.clone(),
        memories_dropped: report.memories.dropped.clone(),
        denials: report.outcome.denials.clone(),
        elapsed_us: report.outcome.elapsed_us,
        memory_peak_bytes: report.outcome.memory_peak_bytes,
        ..Executed::without_output(StepStatus::Success, report.params.clone(), String::new())
    };
    match &report.outcome.result {
        Ok(output) => {
            out.status = output.status.into();
            out.lines = returned_lines(&output.output);
            out.output_hash = Some(crate::text::sha256_hex(&output.output));
            let first = output.output.lines().find(|l| !l.trim().is_empty()).unwrap_or("(empty output)");
            out.summary = one_line(first, 100);
            out.result = output.output.clone();
            if output.truncated_bytes > 0 {
                out.result.push_str(&format!(
                    "\n[output cut by the host: {} bytes over the skill's output limit; ask for less]",
                    output.truncated_bytes
                ));
            }
            if !output.metadata.is_empty() {
                let meta: Vec<String> = output.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.result.push_str(&format!("\nmetadata: {}", meta.join(", ")));
            }
        }
        Err(error) => {
            out.status = error.into();
            let advice = match error {
                CallError::InvalidParams(_) => "Fix the parameters to match the skill's schema and call it again.",
                CallError::Panic(_) | CallError::Trap(_) => {
                    "The skill crashed on this input (the host is fine); try other parameters or another skill."
                }
                CallError::Timeout { .. } | CallError::CpuLimit(_) | CallError::MemoryLimit(_) => {
                    "Ask for less (narrower filters, fewer lines) or take another approach."
                }
                CallError::Failed(_) => "Read the reason; change the request or try another skill.",
                CallError::Setup(_) => "The skill cannot start here; use another skill or tell the user.",
                CallError::Cancelled => {
                    "The call was cancelled before it finished; call it again if it is still needed."
                }
                CallError::Busy { .. } | CallError::MemoryBudget { .. } => {
                    "The host is busy with other calls; the same call may work a little later."
                }
            };
            out.result = format!("{error}. {advice}");
            out.summary = one_line(&error.to_string(), 120);
        }
    }
    let denials: Vec<String> = report
        .outcome
        .denials
        .iter()
        .filter(|d| d.capability != "memory")
        .map(|d| format!("{}: {}", d.capability, d.message))
        .collect();
    if !denials.is_empty() {
        out.result.push_str(&format!("\ndenied by the sandbox: {}", denials.join("; ")));
    }
    out
}

fn executable_names(catalog: &Catalog) -> String {
    let names: Vec<&str> = catalog.executable().map(|e| e.name.as_str()).collect();
    if names.is_empty() { "(none)".into() } else { names.join(", ") }
}

/// Up to three skill names close to `wanted`: shared substring or small edit distance.
pub fn close_names(wanted: &str, catalog: &Catalog) -> Vec<String> {
    let wanted_l = wanted.to_lowercase();
    let mut scored: Vec<(usize, &str)> = catalog
        .executable()
        .map(|e| {
            let name = e.name.to_lowercase();
            let distance = edit_distance(&wanted_l, &name);
            let related = name.contains(&wanted_l) || wanted_l.contains(&name);
            (if related { 0 } else { distance }, e.name.as_str())
        })
        .filter(|(d, n)| *d <= (n.len().max(wanted.len()) / 2).max(2))
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n.to_string()).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
