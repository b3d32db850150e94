//! The user's policy: which capabilities each skill is granted, limit caps, and the values
//! of path templates. Plain TOML so a security reviewer can read it.
//!
//! Two files: the user-level one in the skillhost home (written by `skill install` and
//! `policy grant`) and an optional project-level `.skillhost/policy.toml`, which overrides
//! the user file in one direction only: it narrows grants (`[skills.NAME]` is intersected
//! with the user's table) and lowers limits, and its `[paths]` is ignored. A project
//! directory is often writable by a skill, so anything else would let a skill grant itself
//! rights. Grants only ever come from the user file or the CLI that writes it; never from
//! a skill or a model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::capabilities::{Access, MemoryAccess, Mount, NetRule};
use crate::capabilities::{CapabilityKind, CapabilitySet, LeakAction, LimitsRequest, grant_syntax};
use crate::fsutil::FileStamp;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Values of path templates (`WORKSPACE = "/home/me/project"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub paths: BTreeMap<String, String>,
    /// Caps on every skill's limits.
    #[serde(default)]
    pub limits: LimitsRequest,
    /// Grants per skill.
    #[serde(default)]
    pub skills: BTreeMap<String, CapabilitySet>,
    /// Limit caps per skill (override `limits`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub skill_limits: BTreeMap<String, LimitsRequest>,
    /// What skills may do to long-term memory (`[memory]`; absent in older files).
    #[serde(default, skip_serializing_if = "MemoryPolicy::is_default")]
    pub memory: MemoryPolicy,
    /// What a leak of a held value does (`[secrets]`; absent in older files).
    #[serde(default, skip_serializing_if = "SecretsPolicy::is_default")]
    pub secrets: SecretsPolicy,
}

/// `[secrets]` of a policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsPolicy {
    /// `redact` (the default) or `fail`: see [`LeakAction`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_leak: Option<LeakAction>,
}

impl SecretsPolicy {
    fn is_default(&self) -> bool {
        *self == SecretsPolicy::default()
    }

    /// The action in force.
    pub fn on_leak(&self) -> LeakAction {
        self.on_leak.unwrap_or_default()
    }
}

/// `[memory]` of a policy: rules for the memories skills propose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryPolicy {
    /// Highest priority a skill-proposed memory is stored at (default 3); priority 5 is
    /// the user's, so a skill cannot crowd the user's own memories out of MEMORY.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_skill_priority: Option<u8>,
    /// Percent of the MEMORY.md view one skill's records may take (default 20), so a skill
    /// that floods memory cannot push the user's records out; the user's own are not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_view_share: Option<u8>,
}

impl MemoryPolicy {
    /// Skills' proposed memories are capped at this priority unless the policy says otherwise.
    pub const DEFAULT_MAX_SKILL_PRIORITY: u8 = 3;

    fn is_default(&self) -> bool {
        *self == MemoryPolicy::default()
    }

    /// The cap in force.
    pub fn max_skill_priority(&self) -> u8 {
        self.max_skill_priority.unwrap_or(Self::DEFAULT_MAX_SKILL_PRIORITY).min(5)
    }

    /// One skill's share of the view unless the policy says otherwise (percent).
    pub const DEFAULT_SKILL_VIEW_SHARE: u8 = 20;

    /// The share in force, as a fraction.
    pub fn skill_view_share(&self) -> f64 {
        f64::from(self.skill_view_share.unwrap_or(Self::DEFAULT_SKILL_VIEW_SHARE).min(100)) / 100.0
    }
}

impl Policy {
    /// Load a policy file; a missing file is an empty policy (nothing granted).
    pub fn load(path: &Path) -> Result<Policy> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Policy::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read policy {}", path.display())),
        };
        let policy: Policy = toml::from_str(&text).map_err(|e| {
            anyhow!(
                "policy {} is invalid: {e}\nFix the file or move it aside; nothing is granted until it parses.",
                path.display()
            )
        })?;
        if let Some(p) = policy.memory.max_skill_priority.filter(|p| *p > 5) {
            bail!("policy {}: [memory] max_skill_priority = {p} is out of range; use 0 to 5", path.display());
        }
        if let Some(p) = policy.memory.skill_view_share.filter(|p| *p > 100) {
            bail!(
                "policy {}: [memory] skill_view_share = {p} is out of range; use a percent from 0 to 100",
                path.display()
            );
        }
        for (name, caps) in &policy.skills {
            caps.validate().map_err(|(f, m)| anyhow!("policy {}: [skills.{name}] {f}: {m}", path.display()))?;
        }
        Ok(policy)
    }

    /// Load, change and save the policy at `path` under an exclusive lock (a sibling
    /// `.lock` file), so two processes granting at once do not lose each other's update.
    /// Nothing is written when `change` fails.
    pub fn update<R>(path: &Path, change: impl FnOnce(&mut Policy) -> Result<R>) -> Result<(Policy, R)> {
        let _lock = crate::fsutil::lock_exclusive(&path.with_extension("toml.lock"))?;
        let mut policy = Policy::load(path)?;
        let before = policy.clone();
        let out = change(&mut policy)?;
        if policy != before {
            policy.save(path)?;
        }
        Ok((policy, out))
    }

    /// Write atomically (temp file + rename), so a crash never leaves half a policy.
    /// Comments in a hand-edited file are not preserved (the file is re-serialized).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self).context("cannot serialize policy")?;
        let header = "# skillhost policy: capabilities granted per skill. Edit with `skillhost policy grant|revoke`.\n";
        crate::fsutil::write_atomic(path, format!("{header}{text}").as_bytes())
    }

    /// The user policy (`self`) as narrowed by a project policy. A project file can only
    /// take rights away: it may live in a directory a skill can write to, so it must never
    /// widen a grant, raise a limit or repoint a path template (its `[paths]` is ignored).
    pub fn narrowed_by(mut self, project: Policy) -> Policy {
        for (name, caps) in self.skills.iter_mut() {
            if let Some(p) = project.skills.get(name) {
                *caps = caps.intersect(p);
            }
        }
        // A project may lower the skills' memory priority cap, never raise it.
        if let Some(p) = project.memory.max_skill_priority {
            self.memory.max_skill_priority = Some(p.min(self.memory.max_skill_priority()));
        }
        // ... and lower one skill's share of the view.
        if let Some(p) = project.memory.skill_view_share {
            let user = self.memory.skill_view_share.unwrap_or(MemoryPolicy::DEFAULT_SKILL_VIEW_SHARE);
            self.memory.skill_view_share = Some(p.min(user));
        }
        // A project may make leaks fail calls, never let them pass again.
        if project.secrets.on_leak() == LeakAction::Fail {
            self.secrets.on_leak = Some(LeakAction::Fail);
        }
        let user_global = self.limits;
        self.limits = user_global.lowered_by(&project.limits);
        for (name, lim) in &project.skill_limits {
            let user = self.skill_limits.get(name).copied().unwrap_or_default().or(&user_global);
            self.skill_limits.insert(name.clone(), user.lowered_by(&lim.or(&project.limits)));
        }
        self
    }

    pub fn granted(&self, skill: &str) -> CapabilitySet {
        self.skills.get(skill).cloned().unwrap_or_default()
    }

    pub fn limit_caps(&self, skill: &str) -> LimitsRequest {
        self.skill_limits.get(skill).copied().unwrap_or_default().or(&self.limits)
    }

    /// Add `grant` to what `skill` already has.
    pub fn grant(&mut self, skill: &str, grant: &CapabilitySet) {
        self.skills.entry(skill.to_string()).or_default().merge(grant);
    }

    /// Record everything in `grant` for `skill`.
    pub fn apply(&mut self, skill: &str, grant: &Grant) {
        if !grant.capabilities.is_empty() {
            self.grant(skill, &grant.capabilities);
        }
        if grant.limits != LimitsRequest::default() {
            let current = self.skill_limits.get(skill).copied().unwrap_or_default();
            self.skill_limits.insert(skill.to_string(), grant.limits.or(&current));
        }
    }

    /// Remove a right (`spec` as in [`parse_grant`]; `all` removes the skill's table).
    pub fn revoke(&mut self, skill: &str, spec: &str) -> Result<()> {
        if spec == "all" {
            if self.skills.remove(skill).is_none() & self.skill_limits.remove(skill).is_none() {
                bail!("`{skill}` has no grants in this policy");
            }
            return Ok(());
        }
        if spec == "limits" {
            if self.skill_limits.remove(skill).is_none() {
                bail!("`{skill}` has no raised limits to revoke");
            }
            return Ok(());
        }
        let Some(caps) = self.skills.get_mut(skill) else {
            bail!("skill `{skill}` has no grants in this policy");
        };
        let before = caps.clone();
        let (kind, value) = split_spec(spec);
        let kind =
            CapabilityKind::from_name(kind).ok_or_else(|| anyhow!("cannot revoke `{spec}`: {}", grant_syntax()))?;
        caps.revoke_spec(kind, value).map_err(|e| anyhow!("cannot revoke `{spec}`: {e}"))?;
        if *caps == before {
            bail!("`{skill}` holds nothing matching `{spec}`; see `skillhost policy show {skill}`");
        }
        Ok(())
    }
}

/// What the user consents to for one skill: capabilities, and limit caps above the defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grant {
    pub capabilities: CapabilitySet,
    pub limits: LimitsRequest,
}

impl Grant {
    /// Everything a manifest asks for.
    pub fn everything(m: &crate::manifest::Manifest) -> Grant {
        Grant { capabilities: m.capabilities.clone(), limits: m.limits }
    }

    pub fn capabilities(capabilities: CapabilitySet) -> Grant {
        Grant { capabilities, limits: LimitsRequest::default() }
    }
}

fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (spec.trim(), None),
    }
}

/// Turn a CLI grant (`--grant network=http://127.0.0.1:8080`) into rights, limited to what
/// the skill declares: you cannot grant what a skill did not ask for, so a typo fails loudly.
pub fn parse_grant(spec: &str, declared: &CapabilitySet, requested: &LimitsRequest) -> Result<Grant> {
    let (kind, value) = split_spec(spec);
    match (kind, value) {
        ("all", None) => return Ok(Grant { capabilities: declared.clone(), limits: *requested }),
        ("limits", None) => return Ok(Grant { capabilities: CapabilitySet::default(), limits: *requested }),
        _ => {}
    }
    let Some(kind) = CapabilityKind::from_name(kind) else {
        bail!("unknown grant `{spec}`: {}", grant_syntax());
    };
    Ok(Grant::capabilities(declared.grant_spec(kind, value)?))
}

/// Where the two policy files live.
#[derive(Debug, Clone)]
pub struct PolicyFiles {
    pub user: PathBuf,
    pub project: Option<PathBuf>,
}

impl PolicyFiles {
    pub fn load(&self) -> Result<Policy> {
        let user = Policy::load(&self.user)?;
        Ok(match &self.project {
            Some(p) => user.narrowed_by(Policy::load(p)?),
            None => user,
        })
    }

    /// The stamps of both files (`None` for a missing file): equal stamps, same policy.
    fn stamps(&self) -> std::io::Result<PolicyStamps> {
        let project = match &self.project {
            Some(p) => FileStamp::of(p)?,
            None => None,
        };
        Ok([FileStamp::of(&self.user)?, project])
    }
}

/// The stamps of the user and project files.
type PolicyStamps = [Option<FileStamp>; 2];

/// The effective policy of a [`PolicyFiles`], parsed once per change: each read compares
/// the files' stamps (two `stat`s) with those of the last parse, so a `policy revoke` by
/// another process applies to the next call while an unchanged policy is never re-parsed.
/// A policy that fails to parse is not kept: every read reports the error until it is fixed.
pub struct PolicySnapshots {
    files: PolicyFiles,
    current: Mutex<Option<(PolicyStamps, Arc<Policy>)>>,
    loads: AtomicU64,
}

impl PolicySnapshots {
    pub fn new(files: PolicyFiles) -> PolicySnapshots {
        PolicySnapshots { files, current: Mutex::new(None), loads: AtomicU64::new(0) }
    }

    pub fn files(&self) -> &PolicyFiles {
        &self.files
    }

    /// The policy as the files say now.
    pub fn current(&self) -> Result<Arc<Policy>> {
        // Stamp before reading: a change after this makes the kept stamp stale, so the next
        // read parses again (never the reverse).
        let stamps = self.files.stamps().ok();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(now), Some((seen, policy))) = (&stamps, current.as_ref())
            && now == seen
        {
            return Ok(policy.clone());
        }
        self.loads.fetch_add(1, Ordering::Relaxed);
        let policy = Arc::new(self.files.load()?);
        *current = stamps.map(|s| (s, policy.clone()));
        Ok(policy)
    }

    /// How many times the files were parsed.
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }
}

/// Path templates live next to mounts now; re-exported for existing callers.
pub use crate::capabilities::expand_path;

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> CapabilitySet {
        CapabilitySet {
            filesystem: vec![Mount {
                host: "$WORKSPACE".into(),
                guest: "/workspace".into(),
                access: Access::ReadWrite,
            }],
            env: vec!["LANG".into()],
            memory: MemoryAccess::Write,
            session: true,
            network: vec![NetRule::parse("https://api.example.com").unwrap()],
            ..Default::default()
        }
    }

    #[test]
    fn grants_are_bounded_by_the_declaration() {
        let d = declared();
        let none = LimitsRequest::default();
        assert_eq!(parse_grant("all", &d, &none).unwrap().capabilities, d);
        // A network grant must fall under a declared rule.
        assert!(parse_grant("network=https://api.example.com/v2", &d, &none).is_ok());
        assert!(parse_grant("network=https://evil.example.org", &d, &none).is_err());
        let asks = LimitsRequest { wall_time_ms: Some(60_000), ..Default::default() };
        assert_eq!(parse_grant("limits", &d, &asks).unwrap().limits, asks);
        assert_eq!(
            parse_grant("filesystem=/workspace:read", &d, &none).unwrap().capabilities.filesystem[0].access,
            Access::Read
        );
        assert!(parse_grant("env=HOME", &d, &none).unwrap_err().to_string().contains("does not declare env HOME"));
        assert!(parse_grant("filesystem=/etc", &d, &none).is_err());
        assert!(parse_grant("sockets", &d, &none).unwrap_err().to_string().contains("unknown grant"));
        assert!(parse_grant("session", &CapabilitySet::default(), &none).is_err());
    }

    #[test]
    fn grant_revoke_and_overlay() {
        let mut p = Policy::default();
        p.apply("s", &parse_grant("all", &declared(), &LimitsRequest::default()).unwrap());
        p.revoke("s", "memory=write").unwrap();
        p.revoke("s", "env=LANG").unwrap();
        let err = p.revoke("s", "env=LANG").unwrap_err().to_string();
        assert!(err.contains("holds nothing matching"), "{err}");
        p.revoke("s", "filesystem=/workspace:read-write").unwrap();
        assert_eq!(p.granted("s").filesystem[0].access, Access::Read, "downgraded, not removed");
        let caps = p.granted("s");
        assert_eq!(caps.memory, MemoryAccess::Read);
        assert!(caps.env.is_empty());
        let text = toml::to_string(&p).unwrap();
        let back: Policy = toml::from_str(&text).unwrap();
        assert_eq!(back, p);
        let mut project = Policy::default();
        project.skills.insert("s".into(), CapabilitySet::default());
        project.skills.insert("other".into(), declared());
        project.paths.insert("WORKSPACE".into(), "/etc".into());
        project.limits.memory_mb = Some(4096);
        project.skill_limits.insert("s".into(), LimitsRequest { wall_time_ms: Some(100), ..Default::default() });
        let merged = p.clone().narrowed_by(project);
        assert!(merged.granted("s").is_empty(), "the project narrowed s to nothing");
        assert!(merged.granted("other").is_empty(), "the project cannot grant");
        assert!(merged.paths.is_empty(), "the project cannot repoint paths");
        assert_eq!(merged.limit_caps("s").memory_mb, Some(crate::capabilities::Limits::DEFAULT.memory_mb));
        assert_eq!(merged.limit_caps("s").wall_time_ms, Some(100));
    }

    #[test]
    fn the_skill_memory_priority_cap_defaults_to_3_and_only_narrows() {
        let old: Policy = toml::from_str("[skills.s]\nsession = true\n").unwrap();
        assert_eq!(old.memory.max_skill_priority(), 3, "files without [memory] keep loading");
        assert!(!toml::to_string(&old).unwrap().contains("[memory]"), "nothing written for the default");
        let user: Policy = toml::from_str("[memory]\nmax_skill_priority = 4\n").unwrap();
        assert_eq!(user.memory.max_skill_priority(), 4);
        let project: Policy = toml::from_str("[memory]\nmax_skill_priority = 5\n").unwrap();
        assert_eq!(user.clone().narrowed_by(project).memory.max_skill_priority(), 4, "a project cannot raise it");
        let project: Policy = toml::from_str("[memory]\nmax_skill_priority = 1\n").unwrap();
        assert_eq!(user.narrowed_by(project).memory.max_skill_priority(), 1);
        assert!(toml::from_str::<Policy>("[memory]\nbogus = 1\n").is_err());
    }

    #[test]
    fn a_project_can_make_leaks_fail_calls_never_pass_again() {
        let plain: Policy = toml::from_str("[skills.s]\nsession = true\n").unwrap();
        assert_eq!(plain.secrets.on_leak(), LeakAction::Redact);
        assert!(!toml::to_string(&plain).unwrap().contains("[secrets]"), "nothing written for the default");
        let failing: Policy = toml::from_str("[secrets]\non_leak = \"fail\"\n").unwrap();
        let redacting: Policy = toml::from_str("[secrets]\non_leak = \"redact\"\n").unwrap();
        assert_eq!(plain.clone().narrowed_by(failing.clone()).secrets.on_leak(), LeakAction::Fail);
        assert_eq!(failing.narrowed_by(redacting).secrets.on_leak(), LeakAction::Fail, "a project cannot loosen it");
        assert!(toml::from_str::<Policy>("[secrets]\non_leak = \"ignore\"\n").is_err());
    }
}
