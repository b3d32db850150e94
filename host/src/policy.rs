//! The user's policy: which capabilities each skill is granted, limit caps, and the values
//! of path templates. Plain TOML so a security reviewer can read it.
//!
//! Two files: the user-level one in the skillhost home (written by `skill install` and
//! `policy grant`) and an optional project-level `.skillhost/policy.toml`. The project file
//! overrides the user file per skill (a `[skills.NAME]` table there replaces the user's
//! table for NAME), per path variable and per limit field. Grants only ever come from these
//! files or the CLI that writes them; never from a skill or a model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::capabilities::{CapabilitySet, LimitsRequest, MemoryAccess, Mount, NetRule};

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
        for (name, caps) in &policy.skills {
            caps.validate().map_err(|(f, m)| anyhow!("policy {}: [skills.{name}] {f}: {m}", path.display()))?;
        }
        Ok(policy)
    }

    /// Write atomically (temp file + rename), so a crash never leaves half a policy.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self).context("cannot serialize policy")?;
        let header = "# skillhost policy: capabilities granted per skill. Edit with `skillhost policy grant|revoke`.\n";
        crate::library::write_atomic(path, format!("{header}{text}").as_bytes())
    }

    /// `project` over `self` (user-level).
    pub fn overlaid_with(mut self, project: Policy) -> Policy {
        self.paths.extend(project.paths);
        self.limits = project.limits.or(&self.limits);
        self.skills.extend(project.skills);
        for (name, lim) in project.skill_limits {
            let merged = lim.or(self.skill_limits.get(&name).unwrap_or(&LimitsRequest::default()));
            self.skill_limits.insert(name, merged);
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
        let caps = self.skills.entry(skill.to_string()).or_default();
        for m in &grant.filesystem {
            match caps.filesystem.iter_mut().find(|c| c.host == m.host && c.guest == m.guest) {
                Some(c) => c.access = c.access.max(m.access),
                None => caps.filesystem.push(m.clone()),
            }
        }
        for r in &grant.network {
            if !caps.network.contains(r) {
                caps.network.push(r.clone());
            }
        }
        for e in &grant.env {
            if !caps.env.contains(e) {
                caps.env.push(e.clone());
            }
        }
        caps.memory = caps.memory.max(grant.memory);
        caps.session |= grant.session;
    }

    /// Remove a right (`spec` as in [`parse_grant`]; `all` removes the skill's table).
    pub fn revoke(&mut self, skill: &str, spec: &str) -> Result<()> {
        if spec == "all" {
            self.skills.remove(skill);
            return Ok(());
        }
        let Some(caps) = self.skills.get_mut(skill) else {
            bail!("skill `{skill}` has no grants in this policy");
        };
        let (kind, value) = split_spec(spec);
        match (kind, value) {
            ("filesystem", None) => caps.filesystem.clear(),
            ("filesystem", Some(guest)) => {
                caps.filesystem.retain(|m| m.guest != guest.split(':').next().unwrap_or(guest))
            }
            ("network", None) => caps.network.clear(),
            ("network", Some(r)) => {
                let rule = NetRule::parse(r).map_err(|e| anyhow!(e))?;
                caps.network.retain(|n| *n != rule)
            }
            ("env", None) => caps.env.clear(),
            ("env", Some(name)) => caps.env.retain(|n| n != name),
            ("memory", None) => caps.memory = MemoryAccess::None,
            ("memory", Some("write")) => caps.memory = caps.memory.min(MemoryAccess::Read),
            ("memory", Some("read")) => caps.memory = MemoryAccess::None,
            ("session", None) => caps.session = false,
            _ => bail!("cannot revoke `{spec}`: {GRANT_SYNTAX}"),
        }
        Ok(())
    }
}

pub const GRANT_SYNTAX: &str = "use all | filesystem[=GUEST_PATH[:read|read-write]] | network[=URL_RULE] | env[=NAME] | memory[=read|write] | session";

fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (spec.trim(), None),
    }
}

/// Turn a CLI grant (`--grant network=http://127.0.0.1:8080`) into rights, limited to what
/// the skill declares: you cannot grant what a skill did not ask for, so a typo fails loudly.
pub fn parse_grant(spec: &str, declared: &CapabilitySet) -> Result<CapabilitySet> {
    let (kind, value) = split_spec(spec);
    let mut g = CapabilitySet::default();
    let not_declared = |what: &str| anyhow!("the skill does not declare {what}; it cannot be granted");
    match (kind, value) {
        ("all", None) => return Ok(declared.clone()),
        ("filesystem", None) => {
            if declared.filesystem.is_empty() {
                return Err(not_declared("filesystem access"));
            }
            g.filesystem = declared.filesystem.clone();
        }
        ("filesystem", Some(v)) => {
            let (guest, access) = match v.rsplit_once(':') {
                Some((g, "read")) => (g, Some(crate::capabilities::Access::Read)),
                Some((g, "read-write")) => (g, Some(crate::capabilities::Access::ReadWrite)),
                _ => (v, None),
            };
            let m: &Mount = declared
                .filesystem
                .iter()
                .find(|m| m.guest == guest)
                .ok_or_else(|| not_declared(&format!("a mount at {guest}")))?;
            g.filesystem.push(Mount { access: access.unwrap_or(m.access).min(m.access), ..m.clone() });
        }
        ("network", None) => {
            if declared.network.is_empty() {
                return Err(not_declared("network access"));
            }
            g.network = declared.network.clone();
        }
        ("network", Some(v)) => g.network.push(NetRule::parse(v).map_err(|e| anyhow!(e))?),
        ("env", None) => {
            if declared.env.is_empty() {
                return Err(not_declared("environment variables"));
            }
            g.env = declared.env.clone();
        }
        ("env", Some(name)) => {
            if !declared.env.iter().any(|e| e == name) {
                return Err(not_declared(&format!("env {name}")));
            }
            g.env.push(name.to_string());
        }
        ("memory", v) => {
            let level = match v {
                None => declared.memory,
                Some("read") => MemoryAccess::Read,
                Some("write") => MemoryAccess::Write,
                Some(other) => bail!("memory grant `{other}`: use memory=read or memory=write"),
            };
            if declared.memory == MemoryAccess::None {
                return Err(not_declared("memory access"));
            }
            g.memory = level.min(declared.memory);
        }
        ("session", None) => {
            if !declared.session {
                return Err(not_declared("session access"));
            }
            g.session = true;
        }
        _ => bail!("unknown grant `{spec}`: {GRANT_SYNTAX}"),
    }
    Ok(g)
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
            Some(p) => user.overlaid_with(Policy::load(p)?),
            None => user,
        })
    }
}

/// Expand a mount's host template (`$WORKSPACE/logs`) into a host path.
pub fn expand_path(template: &str, vars: &BTreeMap<String, String>) -> Result<PathBuf> {
    let Some(rest) = template.strip_prefix('$') else {
        return Ok(PathBuf::from(template));
    };
    let (name, tail) = if let Some(braced) = rest.strip_prefix('{') {
        braced.split_once('}').ok_or_else(|| anyhow!("`{template}`: unclosed `${{`"))?
    } else {
        match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        }
    };
    let base = vars.get(name).ok_or_else(|| {
        anyhow!("path variable ${name} is not defined: set it under [paths] in the policy, or pass --workspace for $WORKSPACE")
    })?;
    Ok(PathBuf::from(format!("{base}{tail}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Access;

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
        }
    }

    #[test]
    fn grants_are_bounded_by_the_declaration() {
        let d = declared();
        assert_eq!(parse_grant("all", &d).unwrap(), d);
        assert_eq!(parse_grant("filesystem=/workspace:read", &d).unwrap().filesystem[0].access, Access::Read);
        assert!(parse_grant("env=HOME", &d).unwrap_err().to_string().contains("does not declare env HOME"));
        assert!(parse_grant("filesystem=/etc", &d).is_err());
        assert!(parse_grant("sockets", &d).unwrap_err().to_string().contains("unknown grant"));
        assert!(parse_grant("session", &CapabilitySet::default()).is_err());
    }

    #[test]
    fn grant_revoke_and_overlay() {
        let mut p = Policy::default();
        p.grant("s", &parse_grant("all", &declared()).unwrap());
        p.revoke("s", "memory=write").unwrap();
        p.revoke("s", "env=LANG").unwrap();
        let caps = p.granted("s");
        assert_eq!(caps.memory, MemoryAccess::Read);
        assert!(caps.env.is_empty());
        let text = toml::to_string(&p).unwrap();
        let back: Policy = toml::from_str(&text).unwrap();
        assert_eq!(back, p);
        let mut project = Policy::default();
        project.skills.insert("s".into(), CapabilitySet::default());
        project.paths.insert("WORKSPACE".into(), "/p".into());
        let merged = p.clone().overlaid_with(project);
        assert!(merged.granted("s").is_empty());
        assert_eq!(merged.paths["WORKSPACE"], "/p");
    }

    #[test]
    fn templates_expand_only_known_vars() {
        let vars = BTreeMap::from([("WORKSPACE".to_string(), "/w".to_string())]);
        assert_eq!(expand_path("$WORKSPACE/logs", &vars).unwrap(), PathBuf::from("/w/logs"));
        assert_eq!(expand_path("${WORKSPACE}/x", &vars).unwrap(), PathBuf::from("/w/x"));
        assert!(expand_path("$HOME/.ssh", &vars).unwrap_err().to_string().contains("$HOME is not defined"));
    }
}
