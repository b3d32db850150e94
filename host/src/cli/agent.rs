//! `skillhost agent ...`: agent profiles (roles) and a dry run of the router, so a user can see
//! which role, skills and memory namespace a request would get before running it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use serde_json::json;

use super::print_json;
use crate::agent::profile::{
    AGENTS_DIR, AgentProfile, PROFILE_FILE, Phase, check_namespaces, load_profile_dir, load_profiles,
};
use crate::agent::provider::{self, Provider};
use crate::agent::router::{Route, route};

/// Deepest directory nesting `agent add` copies; a profile is an AGENT.md and maybe notes.
const MAX_COPY_DEPTH: usize = 8;

#[derive(Subcommand)]
pub(super) enum AgentCmd {
    /// List the agent profiles: the builtin `general` and those in <home>/agents.
    List,
    /// Show a profile as parsed, and its role text for each phase of a run.
    Show {
        /// The profile's name.
        name: String,
    },
    /// Dry run of the router: which profile would handle REQUEST, and why. Uses the configured
    /// LLM provider if there is one, else keywords.
    Route {
        /// The task, as it would be given to `skillhost run`.
        request: String,
        /// Force a profile (as `skillhost run --agent` would).
        #[arg(long)]
        agent: Option<String>,
    },
    /// Remove an installed profile from <home>/agents (its memories stay in its namespace).
    Remove {
        /// The profile's name.
        name: String,
    },
    /// Install a profile directory (holding an AGENT.md; its name is the profile's) into <home>/agents.
    Add {
        /// The profile directory (named after the profile, holding its AGENT.md).
        dir: PathBuf,
        /// Replace an installed profile of the same name.
        #[arg(long)]
        replace: bool,
    },
}

pub(super) fn run(home: &Path, cmd: AgentCmd, json: bool) -> Result<ExitCode> {
    match cmd {
        AgentCmd::List => list(home, json)?,
        AgentCmd::Show { name } => show(home, &name, json)?,
        AgentCmd::Route { request, agent } => dry_route(home, &request, agent.as_deref(), json)?,
        AgentCmd::Add { dir, replace } => add(home, &dir, replace, json)?,
        AgentCmd::Remove { name } => remove(home, &name, json)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn source_of(profile: &AgentProfile) -> String {
    profile.source.as_ref().map_or_else(|| "builtin".to_string(), |path| path.display().to_string())
}

fn list(home: &Path, json: bool) -> Result<()> {
    let profiles = load_profiles(home)?;
    if json {
        let rows: Vec<_> = profiles
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "description": p.description,
                    "skills": p.skills,
                    "namespace": p.namespace,
                    "evidence": p.evidence,
                    "source": p.source,
                })
            })
            .collect();
        return print_json(&rows);
    }
    for p in &profiles {
        let skills = if p.skills.is_empty() { "all skills".to_string() } else { p.skills.join(", ") };
        let evidence = if p.evidence { ", evidence-style" } else { "" };
        println!("{}  {}", p.name, p.description);
        println!("    skills: {skills}; memory namespace: {}{evidence}; from {}", p.namespace, source_of(p));
    }
    Ok(())
}

fn find(profiles: Vec<AgentProfile>, name: &str) -> Result<AgentProfile> {
    let names: Vec<String> = profiles.iter().map(|p| p.name.clone()).collect();
    match profiles.into_iter().find(|p| p.name == name) {
        Some(profile) => Ok(profile),
        None => bail!("there is no agent profile `{name}`; the profiles are: {}", names.join(", ")),
    }
}

fn show(home: &Path, name: &str, json: bool) -> Result<()> {
    let profile = find(load_profiles(home)?, name)?;
    let step = profile.role(Phase::Step);
    let decision_point = profile.role(Phase::DecisionPoint);
    let last = profile.role(Phase::Final);
    if json {
        return print_json(
            &json!({ "profile": profile, "roles": { "step": step, "decision_point": decision_point, "final": last } }),
        );
    }
    println!("{}: {}", profile.name, profile.description);
    println!("  source:    {}", source_of(&profile));
    let skills = if profile.skills.is_empty() { "all installed skills".to_string() } else { profile.skills.join(", ") };
    println!("  skills:    {skills}");
    println!("  namespace: {}", profile.namespace);
    println!("  evidence:  {}", if profile.evidence { "yes (the final answer must cite L<n>)" } else { "no" });
    if let Some(max) = profile.max_steps {
        println!("  max steps: {max}");
    }
    if !profile.keywords.is_empty() {
        println!("  keywords:  {}", profile.keywords.join(", "));
    }
    for (title, text) in [("every step", step), ("decision points", decision_point), ("final answer", last)] {
        println!("\n----- role text for {title} -----\n{text}");
    }
    Ok(())
}

/// The configured provider, or `None` with a warning when there is none or it cannot be used,
/// so the dry run still shows the keyword route.
fn configured_provider(home: &Path) -> Option<std::sync::Arc<dyn Provider>> {
    let config = match provider::config::resolve_from_process_env(home) {
        Ok(config) => config?,
        Err(error) => {
            eprintln!("warning: {error}; routing by keywords");
            return None;
        }
    };
    match provider::open(&config) {
        Ok(provider) => Some(provider),
        Err(error) => {
            eprintln!("warning: {error}; routing by keywords");
            None
        }
    }
}

fn dry_route(home: &Path, request: &str, agent: Option<&str>, json: bool) -> Result<()> {
    let profiles = load_profiles(home)?;
    let provider = if agent.is_some() { None } else { configured_provider(home) };
    let provider_name = provider.as_ref().map(|p| p.name());
    if let (Some(name), false) = (&provider_name, json) {
        eprintln!("routing with {name}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let Route { profile, method, reason } = runtime.block_on(route(request, &profiles, agent, provider.as_deref()))?;
    if json {
        return print_json(
            &json!({ "profile": profile, "method": method, "reason": reason, "provider": provider_name }),
        );
    }
    println!("{profile}  (by {})", method.as_str());
    println!("  {reason}");
    Ok(())
}

fn remove(home: &Path, name: &str, json: bool) -> Result<()> {
    let profiles = load_profiles(home)?;
    let Some(profile) = profiles.iter().find(|p| p.name == name) else {
        let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
        bail!("no agent profile named `{name}`; the profiles are: {}", names.join(", "));
    };
    let dir = home.join(AGENTS_DIR).join(name);
    if profile.source.is_none() || !dir.join(PROFILE_FILE).is_file() {
        bail!("`{name}` is built in, not installed in {}; it cannot be removed", home.join(AGENTS_DIR).display());
    }
    // Renamed first so a half-deleted profile is never loaded.
    let trash = home.join(AGENTS_DIR).join(format!(".remove-{name}-{}", std::process::id()));
    std::fs::rename(&dir, &trash).with_context(|| format!("cannot remove {}", dir.display()))?;
    std::fs::remove_dir_all(&trash).with_context(|| format!("cannot delete {}", trash.display()))?;
    if json {
        return print_json(&json!({ "removed": name, "namespace": profile.namespace }));
    }
    println!(
        "removed agent profile {name}; its memories stay in namespace `{}` (`skillhost memory list --namespace {}`)",
        profile.namespace, profile.namespace
    );
    Ok(())
}

fn add(home: &Path, dir: &Path, replace: bool, json: bool) -> Result<()> {
    let dir =
        std::fs::canonicalize(dir).with_context(|| format!("profile directory {} does not exist", dir.display()))?;
    let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
        bail!("{}: cannot tell the profile name from this path; name the directory after the profile", dir.display());
    };
    if !dir.join(PROFILE_FILE).is_file() {
        bail!(
            "{} has no {PROFILE_FILE}; a profile directory holds an AGENT.md (see `skillhost agent show general`)",
            dir.display()
        );
    }
    let candidate = load_profile_dir(&name, &dir)?;
    let mut profiles: Vec<AgentProfile> = load_profiles(home)?;
    let installed = profiles.iter().any(|p| p.name == name && p.source.is_some());
    if installed && !replace {
        bail!("agent profile `{name}` is already installed; pass --replace to overwrite it");
    }
    profiles.retain(|p| p.name != name);
    profiles.push(candidate.clone());
    check_namespaces(&profiles)?;

    let agents = home.join(AGENTS_DIR);
    std::fs::create_dir_all(&agents).with_context(|| format!("cannot create {}", agents.display()))?;
    let target = agents.join(&name);
    let staging = agents.join(format!(".add-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    if let Err(error) = copy_dir(&dir, &staging, 0) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(error);
    }
    if target.exists() {
        let old = agents.join(format!(".old-{name}-{}", std::process::id()));
        std::fs::rename(&target, &old).with_context(|| format!("cannot move the old {} aside", target.display()))?;
        std::fs::rename(&staging, &target).with_context(|| format!("cannot install {}", target.display()))?;
        let _ = std::fs::remove_dir_all(&old);
    } else {
        std::fs::rename(&staging, &target).with_context(|| format!("cannot install {}", target.display()))?;
    }
    let profile = load_profile_dir(&name, &target)?;

    let missing: Vec<&str> =
        profile.skills.iter().filter(|s| !home.join("skills").join(s).is_dir()).map(String::as_str).collect();
    if !missing.is_empty() {
        eprintln!(
            "warning: `{name}` allows skills that are not installed: {}; install them with `skillhost skill install`",
            missing.join(", ")
        );
    }
    if json {
        return print_json(&json!({ "added": name, "path": target, "replaced": installed, "profile": profile }));
    }
    println!("added agent profile `{name}` to {}", target.display());
    Ok(())
}

/// Copies regular files and directories; symlinks are refused so a profile cannot smuggle in a
/// pointer to files outside it.
fn copy_dir(from: &Path, to: &Path, depth: usize) -> Result<()> {
    if depth > MAX_COPY_DEPTH {
        bail!(
            "{} is nested more than {MAX_COPY_DEPTH} levels deep; a profile directory should be shallow",
            from.display()
        );
    }
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot list {}", from.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", from.display()))?;
        let kind = entry.file_type().with_context(|| format!("cannot inspect {}", entry.path().display()))?;
        let dest = to.join(entry.file_name());
        if kind.is_symlink() {
            bail!(
                "{} is a symbolic link; profile directories may hold only plain files and directories",
                entry.path().display()
            );
        } else if kind.is_dir() {
            copy_dir(&entry.path(), &dest, depth + 1)?;
        } else if !kind.is_file() {
            bail!(
                "{} is not a regular file (a FIFO, socket or device); profile directories may hold only plain files",
                entry.path().display()
            );
        } else {
            std::fs::copy(entry.path(), &dest)
                .with_context(|| format!("cannot copy {} to {}", entry.path().display(), dest.display()))?;
        }
    }
    Ok(())
}
