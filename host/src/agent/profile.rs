//! Agent profiles (minimal placeholder on the `agent-loop` branch).
//!
//! The full version (AGENT.md parsing with all its checks, `skillhost agent ...`) comes from
//! the `agent-router` branch and replaces this file at merge; this one only has the API the
//! loop is written against: the struct, role slicing by [`Phase`], the allowlist check,
//! the builtin `general` profile and a simple [`load_profiles`].

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

#[derive(Debug, Clone)]
pub struct AgentProfile {
    pub name: String,
    pub description: String,
    pub keywords: Vec<String>,
    pub identity: String,
    pub boundaries: String,
    pub workflow: String,
    pub output_style: String,
    /// Allowlist of skills; empty = all.
    pub skills: Vec<String>,
    pub namespace: String,
    pub evidence: bool,
    pub max_steps: Option<u32>,
    pub source: Option<PathBuf>,
}

/// Which part of the role a step needs (SPEC section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Step,
    DecisionPoint,
    Final,
}

impl AgentProfile {
    /// Identity and boundaries always; workflow at decision points; output style for the final answer.
    pub fn role(&self, phase: Phase) -> String {
        let mut out = format!("## Identity\n{}\n\n## Boundaries\n{}\n", self.identity.trim(), self.boundaries.trim());
        if phase == Phase::DecisionPoint && !self.workflow.trim().is_empty() {
            out.push_str(&format!("\n## Workflow\n{}\n", self.workflow.trim()));
        }
        if phase == Phase::Final && !self.output_style.trim().is_empty() {
            out.push_str(&format!("\n## Output style\n{}\n", self.output_style.trim()));
        }
        out
    }

    pub fn allows(&self, skill: &str) -> bool {
        self.skills.is_empty() || self.skills.iter().any(|s| s == skill)
    }
}

pub fn builtin_general() -> AgentProfile {
    AgentProfile {
        name: "general".into(),
        description: "General assistant that uses any installed skill.".into(),
        keywords: Vec::new(),
        identity: "You are a careful assistant that solves the user's task with the installed skills.".into(),
        boundaries: "Only act through the skills offered. Do not invent skill results.".into(),
        workflow: "Look at what the skills offer, call the most relevant one, and reply once you can answer.".into(),
        output_style: "Answer concisely and say what you are unsure about.".into(),
        skills: Vec::new(),
        namespace: crate::library::DEFAULT_NAMESPACE.into(),
        evidence: false,
        max_steps: None,
        source: None,
    }
}

#[derive(Debug, Default, serde::Deserialize)]
struct FrontMatter {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    skills: Vec<String>,
    namespace: Option<String>,
    #[serde(default)]
    evidence: bool,
    max_steps: Option<u32>,
}

/// `<home>/agents/<name>/AGENT.md` (YAML front matter, then `## Identity`, `## Boundaries`,
/// `## Workflow`, `## Output style` sections), plus the builtin `general`.
pub fn load_profiles(home: &Path) -> Result<Vec<AgentProfile>> {
    let mut out = Vec::new();
    let dir = home.join("agents");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut paths: Vec<PathBuf> =
            entries.flatten().map(|e| e.path().join("AGENT.md")).filter(|p| p.is_file()).collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
            out.push(parse(&path, &text)?);
        }
    }
    if !out.iter().any(|p| p.name == "general") {
        out.push(builtin_general());
    }
    Ok(out)
}

fn parse(path: &Path, text: &str) -> Result<AgentProfile> {
    let (front, body) = match text.strip_prefix("---\n").and_then(|rest| rest.split_once("\n---")) {
        Some((front, body)) => (front, body.trim_start_matches('-')),
        None => ("", text),
    };
    let fm: FrontMatter = if front.trim().is_empty() {
        FrontMatter::default()
    } else {
        serde_yaml_ng::from_str(front).with_context(|| format!("{}: invalid front matter", path.display()))?
    };
    let dir_name = path.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
    let name = fm.name.or(dir_name).unwrap_or_else(|| "agent".into());
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in body.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            sections.push((title.trim().to_lowercase(), String::new()));
        } else if let Some((_, text)) = sections.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    let section =
        |key: &str| sections.iter().find(|(t, _)| t == key).map(|(_, b)| b.trim().to_string()).unwrap_or_default();
    Ok(AgentProfile {
        namespace: fm.namespace.unwrap_or_else(|| name.clone()),
        name,
        description: fm.description,
        keywords: fm.keywords,
        identity: section("identity"),
        boundaries: section("boundaries"),
        workflow: section("workflow"),
        output_style: section("output style"),
        skills: fm.skills,
        evidence: fm.evidence,
        max_steps: fm.max_steps,
        source: Some(path.to_path_buf()),
    })
}
