//! Agent profiles (roles): who the agent is for a kind of request, which skills it may use and
//! which memory namespace it reads and writes (SPEC section 6, issue 5 item 3).
//!
//! A profile is `<home>/agents/<name>/AGENT.md`: YAML front matter (`description` required;
//! `keywords`, `skills`, `namespace`, `evidence`, `max_steps` optional) and a Markdown body with
//! up to four `##` sections, `Identity` (required), `Boundaries`, `Workflow` and `Output style`.
//! The sections are kept apart because the loop injects them by phase ([`AgentProfile::role`]):
//! a long workflow or output style in every step would crowd out evidence the model needs.
//!
//! A broken AGENT.md is an error naming `file:line` and what to fix, never skipped: a profile
//! that silently vanished would route requests to a role with other rights and other memories.
//! The builtin `general` profile is always there unless the home defines its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::library::DEFAULT_NAMESPACE;
use crate::manifest::{field_line, split_front_matter, validate_name};

/// The directory under the home that holds one directory per profile.
pub const AGENTS_DIR: &str = "agents";
/// The profile file inside a profile directory.
pub const PROFILE_FILE: &str = "AGENT.md";
/// The profile used when nothing more specific fits.
pub const GENERAL: &str = "general";

const BUILTIN_GENERAL: &str = include_str!("profiles/general/AGENT.md");

/// The `##` sections an AGENT.md body may have, in the order the role text uses them.
const SECTIONS: [&str; 4] = ["Identity", "Boundaries", "Workflow", "Output style"];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentProfile {
    /// The directory name, validated like skill names (lowercase letters, digits, `-`).
    pub name: String,
    /// One line; the router shows it to the model.
    pub description: String,
    /// Words (English or Chinese) that point at this profile when the router falls back to keywords.
    pub keywords: Vec<String>,
    pub identity: String,
    pub boundaries: String,
    pub workflow: String,
    pub output_style: String,
    /// The skills this profile may call; empty means every installed skill.
    pub skills: Vec<String>,
    /// The memory namespace this profile reads and writes.
    pub namespace: String,
    /// Evidence style: the final answer must cite `L<n>` lines (see `agent::guardrail`).
    pub evidence: bool,
    pub max_steps: Option<u32>,
    /// The AGENT.md it was read from; `None` for the builtin profile.
    pub source: Option<PathBuf>,
}

/// Which part of a run the role text is for (SPEC section 6: the role is sliced by phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// An ordinary step: identity and boundaries.
    Step,
    /// The first step and any step where the plan is decided: plus the workflow.
    DecisionPoint,
    /// Writing the final answer: identity, boundaries and the output style.
    Final,
}

impl AgentProfile {
    /// The role text for `phase`: identity and boundaries always, the workflow at decision
    /// points, the output style (and, for evidence-style profiles, the citation rule the
    /// guardrail enforces) only for the final answer. Empty sections are left out.
    pub fn role(&self, phase: Phase) -> String {
        let mut text = format!("# Role: {}\n\n{}\n", self.name, self.identity.trim());
        let mut section = |title: &str, body: &str| {
            if !body.trim().is_empty() {
                text.push_str(&format!("\n## {title}\n\n{}\n", body.trim()));
            }
        };
        section("Boundaries", &self.boundaries);
        match phase {
            Phase::Step => {}
            Phase::DecisionPoint => section("Workflow", &self.workflow),
            Phase::Final => {
                section("Output style", &self.output_style);
                if self.evidence {
                    section(
                        "Evidence rule",
                        "Every conclusion must cite the line it rests on as `L<n>` (a line number a skill returned). \
                         Conclusions without a citation are marked unsupported.",
                    );
                }
            }
        }
        text
    }

    /// Whether this profile may call `skill`.
    pub fn allows(&self, skill: &str) -> bool {
        self.skills.is_empty() || self.skills.iter().any(|allowed| allowed == skill)
    }
}

/// A problem in an AGENT.md. `Display` is `file:line: message`, the message saying what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ProfileError {
    pub file: PathBuf,
    /// 1-based line in the file, when one line is to blame.
    pub line: Option<usize>,
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    description: String,
    #[serde(default)]
    keywords: Vec<String>,
    /// Absent: every installed skill. Present: exactly these (an empty list is an error).
    skills: Option<Vec<String>>,
    namespace: Option<String>,
    #[serde(default)]
    evidence: bool,
    max_steps: Option<u32>,
}

/// The builtin `general` profile: a careful general assistant that may use every skill.
pub fn builtin_general() -> AgentProfile {
    match parse_profile(GENERAL, BUILTIN_GENERAL, None) {
        Ok(profile) => profile,
        // The text is compiled in and a unit test parses it; this arm only keeps a broken edit
        // from taking the host down.
        Err(error) => AgentProfile {
            name: GENERAL.to_string(),
            description: "General assistant for any request.".to_string(),
            keywords: Vec::new(),
            identity: format!("You are a careful general assistant. (builtin profile text is broken: {error})"),
            boundaries: String::new(),
            workflow: String::new(),
            output_style: String::new(),
            skills: Vec::new(),
            namespace: DEFAULT_NAMESPACE.to_string(),
            evidence: false,
            max_steps: None,
            source: None,
        },
    }
}

/// The profiles of `home` (`<home>/agents/<name>/AGENT.md`) plus the builtin `general` unless
/// the home defines one, sorted by name. Hidden directories (staging of `skillhost agent add`)
/// and plain files under `agents/` are ignored; a profile directory without an AGENT.md, a
/// broken AGENT.md, or two profiles sharing a memory namespace is an error.
pub fn load_profiles(home: &Path) -> Result<Vec<AgentProfile>> {
    let dir = home.join(AGENTS_DIR);
    let mut profiles = Vec::new();
    if dir.exists() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("cannot list the agent profiles in {}", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list the agent profiles in {}", dir.display()))?;
            let path = entry.path();
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str() else {
                anyhow::bail!(
                    "{}: the directory name is not UTF-8; profile names use lowercase letters, digits and `-`",
                    path.display()
                );
            };
            if name.starts_with('.') || !path.is_dir() {
                continue;
            }
            profiles.push(load_profile_dir(name, &path)?);
        }
    }
    if !profiles.iter().any(|profile| profile.name == GENERAL) {
        profiles.push(builtin_general());
    }
    profiles.sort_by(|a, b| a.name.cmp(&b.name));
    check_namespaces(&profiles)?;
    Ok(profiles)
}

/// Reads and parses `<dir>/AGENT.md` as the profile `name`.
pub fn load_profile_dir(name: &str, dir: &Path) -> Result<AgentProfile> {
    let file = dir.join(PROFILE_FILE);
    if !file.is_file() {
        anyhow::bail!(
            "{}: agent profile directory without an {PROFILE_FILE}; add one (front matter with `description`, a `## Identity` section) or remove the directory",
            dir.display()
        );
    }
    let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
    parse_profile(name, &text, Some(&file))
}

/// Two profiles sharing a namespace would see each other's memories. The error blames the
/// profile that sets `namespace:` explicitly (at that line) when one does.
pub fn check_namespaces(profiles: &[AgentProfile]) -> Result<()> {
    let mut owners: HashMap<&str, &AgentProfile> = HashMap::new();
    for profile in profiles {
        if let Some(other) = owners.insert(&profile.namespace, profile) {
            let (blamed, line) = match (namespace_line(profile), namespace_line(other)) {
                (None, Some(line)) => (other, Some(line)),
                (line, _) => (profile, line),
            };
            let file =
                blamed.source.clone().unwrap_or_else(|| PathBuf::from(format!("{}/{PROFILE_FILE}", blamed.name)));
            return Err(ProfileError {
                file,
                line,
                message: format!(
                    "profiles `{}` and `{}` both use the memory namespace `{}`; give each profile its own namespace so their memories stay apart",
                    other.name, profile.name, profile.namespace
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// The file line of `namespace:` in the profile's front matter, if it has one.
fn namespace_line(profile: &AgentProfile) -> Option<usize> {
    let text = std::fs::read_to_string(profile.source.as_ref()?).ok()?;
    let (yaml, _) = split_front_matter(&text).ok()?;
    field_line(&yaml, "namespace").map(|line| line + 1)
}

/// Parses the AGENT.md `text` of the profile `name`; `source` names the file in errors and is
/// kept in [`AgentProfile::source`]. Errors are [`ProfileError`]s.
pub fn parse_profile(name: &str, text: &str, source: Option<&Path>) -> Result<AgentProfile> {
    let file = source.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(format!("{name}/{PROFILE_FILE}")));
    let err = |line: Option<usize>, message: String| ProfileError { file: file.clone(), line, message };

    validate_name(name)
        .map_err(|m| err(None, format!("agent profile name {m}; rename the directory (it is the profile's name)")))?;
    let (yaml, body) = split_front_matter(text).map_err(|(line, _)| match line {
        Some(line) => err(
            Some(line),
            format!("{PROFILE_FILE} must start with a `---` line opening the YAML front matter (with at least `description:`)"),
        ),
        None => err(None, "the front matter has no closing `---` line; end it with a line holding only `---`".into()),
    })?;
    // The front matter's line 1 is the file's line 2.
    let at = |key: &str| field_line(&yaml, key).map(|line| line + 1);
    let front: FrontMatter = serde_yaml_ng::from_str(&yaml).map_err(|e| {
        let line = e.location().map(|l| l.line() + 1);
        let mut message = format!("invalid front matter: {e}");
        if message.contains("unknown field") {
            message.push_str("; remove it (allowed: description, keywords, skills, namespace, evidence, max_steps)");
        }
        err(line, message)
    })?;

    let description = crate::text::flatten(&front.description);
    if description.is_empty() {
        return Err(err(
            at("description"),
            "`description` is empty; say in one line what requests this profile handles (the router shows it to the model)".into(),
        )
        .into());
    }
    let mut keywords = Vec::new();
    for keyword in &front.keywords {
        let keyword = crate::text::flatten(keyword);
        if keyword.is_empty() {
            return Err(err(at("keywords"), "`keywords` has an empty entry; remove it".into()).into());
        }
        keywords.push(keyword);
    }
    if front.skills.as_ref().is_some_and(Vec::is_empty) {
        return Err(err(
            at("skills"),
            "`skills: []` would allow no skill, which is never useful; list the skills this profile may call, or leave `skills` out to allow all".into(),
        )
        .into());
    }
    let skills = front.skills.clone().unwrap_or_default();
    for skill in &skills {
        validate_name(skill).map_err(|m| {
            err(
                at("skills"),
                format!("skill name in `skills` {m}; list installed skill names (or leave `skills` out to allow all)"),
            )
        })?;
    }
    let namespace = match &front.namespace {
        Some(namespace) => {
            crate::memory::validate_namespace(namespace).map_err(|e| err(at("namespace"), format!("{e:#}")))?;
            namespace.clone()
        }
        // `general` shares the namespace `skillhost memory` uses by default, so what a user
        // stores by hand reaches the default agent.
        None if name == GENERAL => DEFAULT_NAMESPACE.to_string(),
        None => name.to_string(),
    };
    if front.max_steps == Some(0) {
        return Err(err(at("max_steps"), "`max_steps` must be at least 1 (or left out for the default)".into()).into());
    }

    let body_line = text[..text.len() - body.len()].matches('\n').count() + 1;
    let sections = parse_sections(body, body_line).map_err(|(line, message)| err(line, message))?;
    let [identity, boundaries, workflow, output_style] = sections;
    if identity.trim().is_empty() {
        return Err(err(
            Some(body_line),
            "no `## Identity` section (or it is empty); add one saying who the agent is and what it is for".into(),
        )
        .into());
    }
    Ok(AgentProfile {
        name: name.to_string(),
        description,
        keywords,
        identity,
        boundaries,
        workflow,
        output_style,
        skills,
        namespace,
        evidence: front.evidence,
        max_steps: front.max_steps,
        source: source.map(Path::to_path_buf),
    })
}

/// Splits the body into the four [`SECTIONS`] (trimmed; empty when absent). `first_line` is the
/// file line of the body's first line. Before the first `##` only blank lines and a `#` title
/// may appear; `##` lines inside code fences are content.
fn parse_sections(body: &str, first_line: usize) -> Result<[String; 4], (Option<usize>, String)> {
    let mut sections: [Option<String>; 4] = Default::default();
    let mut current: Option<usize> = None;
    let mut in_fence = false;
    for (index, line) in body.lines().enumerate() {
        let line_no = first_line + index;
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
        }
        let heading = (!in_fence).then(|| line.strip_prefix("## ")).flatten();
        if let Some(title) = heading {
            let title = title.trim().trim_end_matches('#').trim();
            let Some(slot) = SECTIONS.iter().position(|known| known.eq_ignore_ascii_case(title)) else {
                return Err((
                    Some(line_no),
                    format!("unknown section `## {title}`; AGENT.md sections are `## {}`", SECTIONS.join("`, `## ")),
                ));
            };
            if sections[slot].is_some() {
                return Err((Some(line_no), format!("`## {}` appears twice; merge the two", SECTIONS[slot])));
            }
            sections[slot] = Some(String::new());
            current = Some(slot);
            continue;
        }
        match current {
            Some(slot) => {
                let text = sections[slot].get_or_insert_with(String::new);
                text.push_str(line);
                text.push('\n');
            }
            None if trimmed.is_empty() || (line.starts_with("# ") && !in_fence) => {}
            None => {
                return Err((
                    Some(line_no),
                    "text before the first section; put it under `## Identity` (or another section)".into(),
                ));
            }
        }
    }
    Ok(sections.map(|section| section.map(|text| text.trim().to_string()).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANALYST: &str = "---\ndescription: Finds causes in logs\nkeywords: [uart, 乱码]\nskills: [read-log-file]\nevidence: true\nmax_steps: 6\n---\n# Log analyst\n\n## Identity\nYou analyse logs.\n\n## Boundaries\nRead only.\n\n## Workflow\n1. read\n\n## Output style\nCite L<n>.\n";

    #[test]
    fn builtin_general_parses_and_allows_everything() {
        let general = parse_profile(GENERAL, BUILTIN_GENERAL, None).unwrap();
        assert_eq!(general, builtin_general());
        assert!(general.allows("anything") && !general.evidence && general.source.is_none());
        assert_eq!(general.namespace, DEFAULT_NAMESPACE);
        assert!(!general.identity.is_empty() && !general.workflow.is_empty() && !general.output_style.is_empty());
    }

    #[test]
    fn sections_fill_fields_and_role_slices_by_phase() {
        let profile = parse_profile("log-analyst", ANALYST, None).unwrap();
        assert_eq!(profile.identity, "You analyse logs.");
        assert_eq!(profile.namespace, "log-analyst");
        assert_eq!(profile.max_steps, Some(6));
        assert!(profile.allows("read-log-file") && !profile.allows("publish-npm-package"));
        let step = profile.role(Phase::Step);
        assert!(step.contains("You analyse logs.") && step.contains("Read only."));
        assert!(!step.contains("1. read") && !step.contains("Cite L<n>."));
        let decision = profile.role(Phase::DecisionPoint);
        assert!(decision.contains("1. read") && !decision.contains("Cite L<n>."));
        let last = profile.role(Phase::Final);
        assert!(last.contains("Cite L<n>.") && last.contains("Evidence rule") && !last.contains("1. read"));
    }

    #[test]
    fn headings_in_code_fences_are_content() {
        let text = "---\ndescription: d\n---\n## Identity\nme\n```\n## Not a section\n```\n";
        let profile = parse_profile("x", text, None).unwrap();
        assert!(profile.identity.contains("## Not a section"));
    }

    #[test]
    fn errors_name_the_line() {
        let error = |text: &str| parse_profile("x", text, Some(Path::new("a/AGENT.md"))).unwrap_err().to_string();
        let e = error("---\ndescription: d\n---\n## Identity\nme\n## Tone\nfriendly\n");
        assert!(e.starts_with("a/AGENT.md:6: unknown section `## Tone`") && e.contains("## Output style"), "{e}");
        let e = error("---\ndescription: d\n---\nhello\n## Identity\nme\n");
        assert!(e.starts_with("a/AGENT.md:4: text before the first section"), "{e}");
        let e = error("---\ndescription: d\nmax_steps: 0\n---\n## Identity\nme\n");
        assert!(e.starts_with("a/AGENT.md:3: `max_steps`"), "{e}");
        let e = error("---\ndescription: d\nnamespace: Bad NS\n---\n## Identity\nme\n");
        assert!(e.starts_with("a/AGENT.md:3: memory namespace `Bad NS` is invalid"), "{e}");
        let e = error("---\ndescription: d\n---\n## Identity\nme\n## identity\nagain\n");
        assert!(e.starts_with("a/AGENT.md:6: `## Identity` appears twice"), "{e}");
        let e = error("no front matter\n");
        assert!(e.starts_with("a/AGENT.md:1: AGENT.md must start with a `---`"), "{e}");
    }
}
