//! `skill lint`: check a skill directory against our SKILL.md format and, on request, the
//! Agent Skills rules (so a skill written for skillhost also loads in other agents, and a
//! skill from a `.claude/skills` tree is checked before import). Every problem is reported
//! with its line, not just the first one.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_yaml_ng::Value;

use crate::manifest::{Manifest, field_line, split_front_matter, validate_name};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LintIssue {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub field: Option<String>,
    pub severity: Severity,
    pub message: String,
}

impl std::fmt::Display for LintIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, ": {sev}")?;
        if let Some(field) = &self.field {
            write!(f, ": `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Agent Skills limits (agentskills.io specification).
const MAX_DESCRIPTION: usize = 1024;
const MAX_COMPATIBILITY: usize = 500;
const AGENT_SKILLS_FIELDS: [&str; 6] = ["name", "description", "license", "compatibility", "metadata", "allowed-tools"];

/// Lint the skill in `dir`. `agent_skills` adds the Agent Skills rules.
pub fn lint_dir(dir: &Path, agent_skills: bool) -> Vec<LintIssue> {
    let file = dir.join("SKILL.md");
    let issue = |line: Option<usize>, field: Option<&str>, severity: Severity, message: String| LintIssue {
        file: file.clone(),
        line,
        field: field.map(str::to_owned),
        severity,
        message,
    };
    if std::fs::metadata(&file).is_ok_and(|m| m.len() > crate::manifest::MAX_SKILL_MD_BYTES) {
        let e = Manifest::load_dir(dir).err().map(|e| e.message).unwrap_or_default();
        return vec![issue(None, None, Severity::Error, e)];
    }
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) => return vec![issue(None, None, Severity::Error, format!("cannot read it: {e}"))],
    };
    let mut issues = Vec::new();
    if let Err(e) = Manifest::load_dir(dir) {
        issues.push(issue(e.line, e.field.as_deref(), Severity::Error, e.message));
    }
    if !agent_skills {
        return issues;
    }
    let Ok((yaml, body)) = split_front_matter(&text) else { return issues };
    // Too big or too deep to parse (load_dir above already said so).
    if crate::manifest::check_front_matter_limits(&yaml).is_err() {
        return issues;
    }
    let Ok(Value::Mapping(map)) = serde_yaml_ng::from_str::<Value>(&yaml) else { return issues };
    let already_named = issues.iter().any(|i| i.field.as_deref() == Some("name"));
    let at = |key: &str| field_line(&yaml, key).map(|l| l + 1);
    let text_of = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut push = |key: &str, severity, message: String| {
        let duplicate = issues.iter().any(|i: &LintIssue| i.field.as_deref() == Some(key) && i.message == message);
        if !duplicate {
            issues.push(issue(at(key), Some(key), severity, message));
        }
    };

    match text_of("name") {
        None => push("name", Severity::Error, "is required and must be a string".into()),
        Some(name) => {
            // Our own parse already reports a bad name; say it once.
            if let Err(m) = validate_name(&name)
                && !already_named
            {
                push("name", Severity::Error, format!("Agent Skills names: {m}"));
            }
            let dir_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name != dir_name {
                push("name", Severity::Error, format!("`{name}` must equal the directory name `{dir_name}`"));
            }
        }
    }
    match text_of("description") {
        None => push("description", Severity::Error, "is required and must be a string".into()),
        Some(d) if d.trim().is_empty() => push("description", Severity::Error, "must not be empty".into()),
        Some(d) if d.chars().count() > MAX_DESCRIPTION => push(
            "description",
            Severity::Error,
            format!("is {} characters; Agent Skills allow at most {MAX_DESCRIPTION}", d.chars().count()),
        ),
        Some(_) => {}
    }
    if let Some(c) = text_of("compatibility")
        && c.chars().count() > MAX_COMPATIBILITY
    {
        push(
            "compatibility",
            Severity::Error,
            format!("is {} characters; at most {MAX_COMPATIBILITY}", c.chars().count()),
        );
    }
    if let Some(meta) = map.get("metadata") {
        let all_strings = meta.as_mapping().is_some_and(|m| m.iter().all(|(k, v)| k.is_string() && v.is_string()));
        if !all_strings {
            push("metadata", Severity::Error, "must map string keys to string values".into());
        }
    }
    for key in map.keys().filter_map(Value::as_str) {
        if !AGENT_SKILLS_FIELDS.contains(&key) {
            push(
                key,
                Severity::Warning,
                "is a skillhost field, not part of the Agent Skills format; other agents ignore it".into(),
            );
        }
    }
    if body.trim().is_empty() {
        issues.push(issue(None, None, Severity::Warning, "the body is empty: say how to do the task".into()));
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lint(dir_name: &str, text: &str) -> Vec<LintIssue> {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(dir_name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("SKILL.md"), text).unwrap();
        lint_dir(&dir, true)
    }

    #[test]
    fn agent_skills_rules_with_lines() {
        assert!(lint("pdf", "---\nname: pdf\ndescription: Work with PDF files.\n---\n# Steps\n").is_empty());

        let issues = lint("pdf", "---\nname: PDF--tools\ndescription: x\n---\nbody\n");
        assert!(issues.iter().any(|i| i.line == Some(2) && i.message.contains("lowercase")), "{issues:?}");
        assert!(issues.iter().any(|i| i.message.contains("must equal the directory name `pdf`")), "{issues:?}");

        let long = "d".repeat(1100);
        let issues = lint("pdf", &format!("---\nname: pdf\nlicense: MIT\ndescription: {long}\n---\nbody\n"));
        let i = issues.iter().find(|i| i.field.as_deref() == Some("description")).unwrap();
        assert_eq!((i.line, i.severity), (Some(4), Severity::Error));
        assert!(i.message.contains("1100 characters"), "{i}");

        let issues = lint("pdf", "---\nname: pdf\ndescription: ok\nversion: 1.0.0\nmetadata:\n  n: 3\n---\nbody\n");
        assert!(issues.iter().any(|i| i.field.as_deref() == Some("version") && i.severity == Severity::Warning));
        assert!(issues.iter().any(|i| i.field.as_deref() == Some("metadata") && i.line == Some(5)), "{issues:?}");
    }
}
