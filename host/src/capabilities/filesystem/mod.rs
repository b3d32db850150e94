//! `filesystem`: host directories (a path or a template such as `$WORKSPACE/logs`) mounted
//! at guest paths, read-only or read-write. Path templates live here, next to the mounts
//! that use them.

mod dirfd;
pub(crate) mod enforce;
mod gate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::{Capability, CapabilityKind, ToolHints};

/// A host directory (a path or a template such as `$WORKSPACE/logs`) seen by the guest at
/// `guest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub host: String,
    pub guest: String,
    #[serde(default)]
    pub access: Access,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    #[default]
    Read,
    ReadWrite,
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let access = match self.access {
            Access::Read => "read",
            Access::ReadWrite => "read-write",
        };
        write!(f, "{} -> {} ({access})", self.host, self.guest)
    }
}

/// The `filesystem` capability: a list of mounts.
pub struct Filesystem;

/// `GUEST_PATH[:read|read-write]`, the value of a filesystem grant or revoke spec.
fn guest_and_access(v: &str) -> (&str, Option<Access>) {
    match v.rsplit_once(':') {
        Some((g, "read")) => (g, Some(Access::Read)),
        Some((g, "read-write")) => (g, Some(Access::ReadWrite)),
        _ => (v, None),
    }
}

impl Capability for Filesystem {
    const KIND: CapabilityKind = CapabilityKind::Filesystem;
    const SPEC: &'static str = "[=GUEST_PATH[:read|read-write]]";
    type Decl = Vec<Mount>;

    fn validate(mounts: &Vec<Mount>) -> Result<(), (String, String)> {
        for m in mounts {
            let host_ok = m.host.starts_with('$') || m.host.starts_with('/');
            if !host_ok {
                return Err((
                    "filesystem.host".into(),
                    format!("`{}` must be absolute or start with a template such as $WORKSPACE", m.host),
                ));
            }
            if let Err(e) = split_template(&m.host) {
                return Err(("filesystem.host".into(), format!("{e:#}")));
            }
            if m.host.split('/').any(|c| c == "..") {
                return Err(("filesystem.host".into(), format!("`{}` must not contain `..`", m.host)));
            }
            if !m.guest.starts_with('/') || m.guest.split('/').any(|c| c == "..") {
                return Err((
                    "filesystem.guest".into(),
                    format!("`{}` must be an absolute guest path without `..`, like /workspace", m.guest),
                ));
            }
        }
        Ok(())
    }

    fn intersect(declared: &Vec<Mount>, granted: &Vec<Mount>) -> Vec<Mount> {
        declared
            .iter()
            .filter_map(|d| {
                granted
                    .iter()
                    .filter(|g| g.host == d.host && g.guest == d.guest)
                    .map(|g| g.access.min(d.access))
                    .max()
                    .map(|access| Mount { access, ..d.clone() })
            })
            .collect()
    }

    fn minus(mine: &Vec<Mount>, other: &Vec<Mount>) -> Vec<Mount> {
        mine.iter()
            .filter(|m| !other.iter().any(|o| o.host == m.host && o.guest == m.guest && o.access >= m.access))
            .cloned()
            .collect()
    }

    fn describe(mounts: &Vec<Mount>) -> Vec<String> {
        mounts.iter().map(ToString::to_string).collect()
    }

    fn merge(held: &mut Vec<Mount>, more: &Vec<Mount>) {
        for m in more {
            match held.iter_mut().find(|c| c.host == m.host && c.guest == m.guest) {
                Some(c) => c.access = c.access.max(m.access),
                None => held.push(m.clone()),
            }
        }
    }

    fn parse_grant(value: Option<&str>, declared: &Vec<Mount>) -> Result<Vec<Mount>> {
        let Some(v) = value else {
            if declared.is_empty() {
                return Err(anyhow!("the skill does not declare filesystem access; it cannot be granted"));
            }
            return Ok(declared.clone());
        };
        let (guest, access) = guest_and_access(v);
        let m = declared
            .iter()
            .find(|m| m.guest == guest)
            .ok_or_else(|| anyhow!("the skill does not declare a mount at {guest}; it cannot be granted"))?;
        Ok(vec![Mount { access: access.unwrap_or(m.access).min(m.access), ..m.clone() }])
    }

    fn revoke(held: &mut Vec<Mount>, value: Option<&str>) -> Result<()> {
        match value {
            None => held.clear(),
            Some(v) => match guest_and_access(v) {
                // `:read-write` downgrades the mount to read-only instead of removing it.
                (guest, Some(Access::ReadWrite)) => {
                    held.iter_mut().filter(|m| m.guest == guest).for_each(|m| m.access = Access::Read)
                }
                (guest, _) => held.retain(|m| m.guest != guest),
            },
        }
        Ok(())
    }

    fn hint(mounts: &Vec<Mount>, hints: &mut ToolHints) {
        if mounts.iter().any(|m| m.access == Access::ReadWrite) {
            hints.writes = true;
            hints.destructive = true;
        }
    }
}

/// A mount's host path split into its template variable (if any) and the rest:
/// `$WORKSPACE/logs` and `${WORKSPACE}/logs` are `(Some("WORKSPACE"), "/logs")`; an
/// absolute path is `(None, path)`. What follows a variable must be empty or start with
/// `/`: `$WORKSPACE-evil/x` or `${WORKSPACE}../x` would name a sibling of the variable's
/// directory, outside the root its mounts are checked against.
pub fn split_template(template: &str) -> Result<(Option<&str>, &str)> {
    let Some(rest) = template.strip_prefix('$') else {
        return Ok((None, template));
    };
    let (name, tail) = if let Some(braced) = rest.strip_prefix('{') {
        braced.split_once('}').ok_or_else(|| anyhow!("`{template}`: unclosed `${{`"))?
    } else {
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        (&rest[..end], &rest[end..])
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("`{template}`: `${name}` is not a path variable name (letters, digits and `_`, like $WORKSPACE)");
    }
    if !(tail.is_empty() || tail.starts_with('/')) {
        bail!(
            "`{template}`: what follows ${name} must be empty or start with `/` (got `{tail}`); a mount may only name ${name} or a path inside it, like ${name}/logs"
        );
    }
    Ok((Some(name), tail))
}

/// Expand a mount's host template (`$WORKSPACE/logs`) into a host path.
pub fn expand_path(template: &str, vars: &BTreeMap<String, String>) -> Result<PathBuf> {
    let (Some(name), tail) = split_template(template)? else {
        return Ok(PathBuf::from(template));
    };
    let base = variable(name, vars)?;
    Ok(PathBuf::from(format!("{base}{tail}")))
}

fn variable<'a>(name: &str, vars: &'a BTreeMap<String, String>) -> Result<&'a String> {
    vars.get(name).ok_or_else(|| {
        anyhow!("path variable ${name} is not defined: set it under [paths] in the policy, or pass --workspace for $WORKSPACE")
    })
}

/// The directory a mount's host path must stay inside: the expanded variable of a template
/// (`$WORKSPACE` for `$WORKSPACE/logs`), `None` for an absolute path.
pub fn template_root(template: &str, vars: &BTreeMap<String, String>) -> Result<Option<PathBuf>> {
    match split_template(template)? {
        (Some(name), _) => Ok(Some(PathBuf::from(variable(name, vars)?))),
        (None, _) => Ok(None),
    }
}

/// Expand a mount's template and resolve symlinks. For `$VAR/sub` the canonical result
/// must stay inside the canonical `$VAR` (compared component by component, so a sibling
/// such as `/w-evil` is not inside `/w`): another skill with write access to `$VAR` could
/// otherwise plant `sub -> /etc` and redirect this mount.
pub fn resolve_mount_host(template: &str, vars: &BTreeMap<String, String>) -> Result<PathBuf> {
    let full = expand_path(template, vars)?;
    let resolved =
        std::fs::canonicalize(&full).with_context(|| format!("{} does not exist or cannot be read", full.display()))?;
    if let Some(root) = template_root(template, vars)? {
        let root = std::fs::canonicalize(&root).with_context(|| format!("{} does not exist", root.display()))?;
        if !resolved.starts_with(&root) {
            bail!(
                "{} resolves to {}, outside {} (a symlink?); refusing to mount it",
                full.display(),
                resolved.display(),
                root.display()
            );
        }
    }
    Ok(resolved)
}

/// A pause point between a mount's check and its open, where a test plays the skill that
/// races the host (swapping a directory for a link) deterministically instead of hoping to
/// win the race. Called with the checked host path; nothing sets it outside tests.
#[doc(hidden)]
pub static AFTER_MOUNT_CHECK: OnceLock<fn(&Path)> = OnceLock::new();

/// Is this a read-write mount outside the workspace (`/etc`, `$HOME`, `/`)? Such a grant
/// lets the skill change files the user did not hand to a project; installs and grants
/// warn about it.
pub fn writes_outside_workspace(m: &Mount) -> bool {
    m.access == Access::ReadWrite && !matches!(split_template(&m.host), Ok((Some("WORKSPACE"), _)))
}

/// One warning line per read-write mount outside the workspace among `mounts`.
pub fn broad_write_warnings(mounts: &[Mount]) -> Vec<String> {
    mounts
        .iter()
        .filter(|m| writes_outside_workspace(m))
        .map(|m| {
            format!(
                "read-write mount of {} outside the workspace: the skill can change or delete any file there (revoke with `policy revoke NAME filesystem={}:read-write`)",
                m.host, m.guest
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_only_known_vars() {
        let vars = BTreeMap::from([("WORKSPACE".to_string(), "/w".to_string())]);
        assert_eq!(expand_path("$WORKSPACE/logs", &vars).unwrap(), PathBuf::from("/w/logs"));
        assert_eq!(expand_path("${WORKSPACE}/x", &vars).unwrap(), PathBuf::from("/w/x"));
        assert!(expand_path("$HOME/.ssh", &vars).unwrap_err().to_string().contains("$HOME is not defined"));
        // Whatever follows the variable must stay under it.
        for sibling in ["$WORKSPACE-evil/x", "${WORKSPACE}-evil", "${WORKSPACE}../x", "$WORKSPACE..", "$WORKSPACE.x"] {
            let e = expand_path(sibling, &vars).unwrap_err().to_string();
            assert!(e.contains("must be empty or start with `/`"), "{sibling}: {e}");
        }
        assert!(expand_path("${}/x", &vars).is_err());
        assert_eq!(template_root("${WORKSPACE}/a", &vars).unwrap(), Some(PathBuf::from("/w")));
        assert_eq!(template_root("/etc", &vars).unwrap(), None);
    }
}
