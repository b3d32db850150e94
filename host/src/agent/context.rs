//! What the model sees each step (SPEC section 6), composed fresh from the run's state rather
//! than accumulated as a chat transcript: the prompt stays bounded however long the run is, a
//! resumed run sees exactly what an uninterrupted one would, and every part (role slice,
//! catalog, memory, history) can be narrowed independently.
//!
//! The catalog of a run is loaded once ([`Catalog::load`]): skills do not change mid-run, and
//! re-reading 50 manifests per step would dominate the loop's overhead.

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::{Value, json};

use super::profile::{AgentProfile, Phase};
use super::provider::{ChatMessage, ToolSpec};
use super::run::state::{AgentState, DecisionRecord};
use crate::library::Library;
use crate::search::{SearchDoc, SkillIndex};
use crate::text::one_line;

/// With more executable skills than this, only the best candidates get their parameters.
pub const FULL_CATALOG_MAX: usize = 10;
/// How many candidates get full parameters in a narrowed catalog.
pub const CANDIDATES: usize = 5;
/// Instruction skills ranking this high for the goal get their body injected.
pub const INSTRUCTION_TOP: usize = 3;
/// Decisions shown with their full result; older ones get one line.
pub const HISTORY_FULL: usize = 3;
/// Most characters of one skill result shown to the model.
pub const RESULT_CHARS: usize = 6000;
const INSTRUCTION_CHARS: usize = 4000;

/// One skill the profile may use.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub name: String,
    pub description: String,
    pub schema: Value,
    /// No component: the body is guidance to inject, not something to call.
    pub instruction: bool,
    pub body: String,
}

/// The skills of one run, filtered by the profile's allowlist, with a relevance index.
pub struct Catalog {
    pub entries: Vec<CatalogEntry>,
    /// Installed but outside the profile's allowlist (to explain a call to one).
    pub not_allowed: Vec<String>,
    index: Option<SkillIndex>,
}

impl Catalog {
    /// Skills that fail to load are left out (the library reports them elsewhere).
    pub fn load(library: &Library, profile: &AgentProfile) -> Result<Catalog> {
        let mut entries = Vec::new();
        let mut not_allowed = Vec::new();
        let mut docs = Vec::new();
        for (name, info) in library.scan()? {
            let Ok(info) = info else { continue };
            if !profile.allows(&name) {
                not_allowed.push(name);
                continue;
            }
            docs.push(SearchDoc {
                name: name.clone(),
                description: info.manifest.description.clone(),
                when_to_use: info.manifest.when_to_use.clone().unwrap_or_default(),
            });
            entries.push(CatalogEntry {
                name,
                description: crate::text::flatten(&info.manifest.description),
                schema: info.params_schema.clone(),
                instruction: info.record.is_instruction(),
                body: info.manifest.body.clone(),
            });
        }
        let index = if docs.is_empty() { None } else { Some(SkillIndex::build(&docs)?) };
        Ok(Catalog { entries, not_allowed, index })
    }

    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    pub fn executable(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.iter().filter(|e| !e.instruction)
    }

    /// Names ranked by relevance to `query`, best first (failures rank nothing).
    pub fn ranked(&self, query: &str, top: usize) -> Vec<String> {
        self.index
            .as_ref()
            .and_then(|i| i.search(query, top).ok())
            .map(|hits| hits.into_iter().map(|h| h.name).collect())
            .unwrap_or_default()
    }

    /// One tool per shortlisted skill, plus `reply` and `require_more` (native tool calling).
    pub fn tools(&self, names: &[String]) -> Vec<ToolSpec> {
        let mut tools: Vec<ToolSpec> = self
            .executable()
            .filter(|e| names.contains(&e.name))
            .map(|e| ToolSpec {
                name: e.name.clone(),
                description: e.description.clone(),
                parameters: e.schema.clone(),
            })
            .collect();
        tools.push(ToolSpec {
            name: REPLY_TOOL.into(),
            description: "Give the user the final answer and end the run.".into(),
            parameters: json!({"type": "object", "properties": {"message": {"type": "string", "description": "The final answer"}}, "required": ["message"]}),
        });
        tools.push(ToolSpec {
            name: REQUIRE_MORE_TOOL.into(),
            description: "Pause and ask the user a question you cannot answer with the skills.".into(),
            parameters: json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
        });
        tools
    }
}

pub const REPLY_TOOL: &str = "reply";
pub const REQUIRE_MORE_TOOL: &str = "require_more";

/// The memory part of the prompt: MEMORY.md of the namespace plus recalled records.
#[derive(Debug, Clone, Default)]
pub struct MemorySummary {
    pub text: String,
}

impl MemorySummary {
    /// `session` is the agent run: recalled records count one reference per record per run.
    pub fn load(library: &Library, session: &str, namespace: &str, goal: &str) -> Result<MemorySummary> {
        let memory = library.memory()?;
        let view = memory.view(namespace)?;
        let shown: std::collections::HashSet<u64> = view.included().collect();
        let mut text = view.text.trim_end().to_string();
        let recalled: Vec<_> = memory
            .recall_in_session(session, namespace, goal)?
            .into_iter()
            .filter(|r| !shown.contains(&r.id))
            .collect();
        if !recalled.is_empty() {
            text.push_str("\n\nRecalled for this goal:\n");
            for r in recalled {
                let content = crate::memory::prompt_content(&r);
                let _ = writeln!(text, "- [#{} p{} {}] {content}", r.id, r.priority, r.kind.as_str());
            }
        }
        Ok(MemorySummary { text })
    }
}

/// Everything [`compose`] needs besides the state.
pub struct StepInputs<'a> {
    pub profile: &'a AgentProfile,
    pub catalog: &'a Catalog,
    pub memory: &'a MemorySummary,
    pub phase: Phase,
    pub tools: bool,
}

/// Which skills a step shows in full.
pub struct Shortlist {
    /// Skill names by relevance to the goal and the last result.
    pub ranked: Vec<String>,
    /// Executable skills shown (and offered as tools) with their parameters.
    pub candidates: Vec<String>,
    /// Whether the catalog was cut down to `candidates`.
    pub narrowed: bool,
}

pub fn shortlist(state: &AgentState, catalog: &Catalog) -> Shortlist {
    let query = match state.decisions.last() {
        Some(d) => format!("{} {}", state.goal, d.summary),
        None => state.goal.clone(),
    };
    let ranked = catalog.ranked(&query, CANDIDATES + INSTRUCTION_TOP);
    let executable: Vec<&CatalogEntry> = catalog.executable().collect();
    let narrowed = executable.len() > FULL_CATALOG_MAX;
    let candidates = if narrowed {
        // Skills this run already used keep their parameters; then the best-ranked; then
        // any others, so a query that matches nothing (another language) still gets some.
        let mut picked: Vec<String> = Vec::new();
        let used = state.decisions.iter().rev().filter_map(|d| d.skill.as_deref());
        let rest = executable.iter().map(|e| e.name.as_str());
        for name in used.chain(ranked.iter().map(String::as_str)).chain(rest) {
            if picked.len() >= CANDIDATES {
                break;
            }
            if !picked.iter().any(|p| p == name) && catalog.get(name).is_some_and(|e| !e.instruction) {
                picked.push(name.to_string());
            }
        }
        picked
    } else {
        executable.iter().map(|e| e.name.clone()).collect()
    };
    Shortlist { ranked, candidates, narrowed }
}

/// The system and user messages of one decision.
pub fn compose(state: &AgentState, inputs: &StepInputs<'_>) -> Vec<ChatMessage> {
    let StepInputs { profile, catalog, memory, phase, tools } = *inputs;
    let mut system = profile.role(phase);
    system.push_str("\n## How to act\n");
    if tools {
        system.push_str(
            "Each turn, call exactly one tool: a skill to learn or do something, `reply` with the final answer when you can answer, or `require_more` with a question only the user can answer. Tool results of earlier steps are in the history below.\n",
        );
    } else {
        system.push_str(concat!(
            "Each turn, answer with exactly one JSON object and nothing else:\n",
            "{\"reasoning\": \"why this is the next step\", \"next_action\": \"call_skill\" | \"reply\" | \"require_more\", ",
            "\"skill_name\": \"<skill, for call_skill>\", \"parameters\": {<arguments, for call_skill>}, ",
            "\"message\": \"<the final answer for reply, the question for require_more>\"}\n",
            "Use call_skill to learn or do something with a skill from the catalog, reply when you can answer the goal, ",
            "require_more only for a question that no skill can answer.\n",
        ));
    }

    let mut user = String::new();
    let _ = writeln!(user, "# Goal\n{}\n", state.goal.trim());
    let _ = writeln!(user, "# Progress\n{}\n", progress_line(state));
    if !state.answers.is_empty() {
        user.push_str("# Answers from the user\n");
        for qa in &state.answers {
            let _ = writeln!(user, "- Q: {} A: {}", qa.question, qa.answer);
        }
        user.push('\n');
    }

    let Shortlist { ranked, candidates, narrowed } = shortlist(state, catalog);
    let candidates: Vec<&str> = candidates.iter().map(String::as_str).collect();
    user.push_str("# Skills\n");
    let executable: Vec<&CatalogEntry> = catalog.executable().collect();
    if executable.is_empty() {
        user.push_str("(no executable skills are available to this agent)\n");
    }
    for name in &candidates {
        if let Some(e) = catalog.get(name) {
            let _ = writeln!(user, "- {}: {}\n  parameters (JSON Schema): {}", e.name, e.description, e.schema);
        }
    }
    if narrowed {
        user.push_str("Other skills (ask for them by name; their parameters are shown once one is relevant):\n");
        for e in executable.iter().filter(|e| !candidates.contains(&e.name.as_str())) {
            let _ = writeln!(user, "- {}: {}", e.name, one_line(&e.description, 100));
        }
    }
    user.push('\n');

    let instructions: Vec<&CatalogEntry> =
        ranked.iter().take(INSTRUCTION_TOP).filter_map(|n| catalog.get(n)).filter(|e| e.instruction).collect();
    for e in instructions {
        let _ = writeln!(
            user,
            "# Guidance from instruction skill `{}` (follow it; it is not callable)\n{}\n",
            e.name,
            truncate(e.body.trim(), INSTRUCTION_CHARS)
        );
    }

    let _ =
        writeln!(user, "# Memory\n{}\n", if memory.text.trim().is_empty() { "(empty)" } else { memory.text.trim() });

    user.push_str("# History\n");
    if state.decisions.is_empty() {
        user.push_str("(no steps yet)\n");
    }
    let full_from = state.decisions.len().saturating_sub(HISTORY_FULL);
    for (i, d) in state.decisions.iter().enumerate() {
        if i < full_from {
            let _ = writeln!(user, "- {}", d.one_line());
        } else {
            let _ = writeln!(user, "- {}\n{}", d.headline(), indent(&truncate(&d.result, RESULT_CHARS)));
        }
    }
    user.push('\n');
    if !state.feedback.is_empty() {
        user.push_str("# Notes from the host\n");
        for f in &state.feedback {
            let _ = writeln!(user, "- {f}");
        }
        user.push('\n');
    }
    user.push_str(if tools {
        "Call one tool now."
    } else {
        "Answer now with one JSON object (the action format above)."
    });
    vec![ChatMessage::system(system), ChatMessage::user(user)]
}

/// `step 2 of at most 8: done read-log-file (success); now choose the next action`.
pub fn progress_line(state: &AgentState) -> String {
    let done: Vec<String> = state
        .decisions
        .iter()
        .map(|d| match &d.skill {
            Some(s) => format!("{s} ({})", d.status),
            None => format!("{} ({})", d.action, d.status),
        })
        .collect();
    let mut line = format!("step {} of at most {}", state.step, state.max_steps);
    if done.is_empty() {
        line.push_str(": nothing done yet; choose the first action");
    } else {
        let _ = write!(line, ": done {}; now choose the next action", done.join(", "));
    }
    if state.step >= state.max_steps {
        line.push_str(". This is the last step: reply now with what you know and what is still open");
    }
    line
}

impl DecisionRecord {
    /// `step 2: call_skill query-issue-kb {"query":"..."} -> success`
    pub fn headline(&self) -> String {
        match &self.skill {
            Some(s) => {
                format!(
                    "step {}: call_skill {s} {} -> {}",
                    self.step,
                    one_line(&self.params.to_string(), 200),
                    self.status
                )
            }
            None => format!("step {}: {} -> {}", self.step, self.action, self.status),
        }
    }

    pub fn one_line(&self) -> String {
        format!("{}: {}", self.headline(), one_line(&self.summary, 160))
    }
}

/// `text` cut after `max_chars` characters, saying how much was cut (for the model).
pub fn truncate(text: &str, max_chars: usize) -> String {
    crate::text::cut_counted(text, max_chars, |n| format!("… [{n} more characters cut]"))
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}
