//! `filesystem`: each effective mount becomes a WASI preopen with read or read-write
//! permissions. Nothing else of the host filesystem exists for the guest; `..` and
//! absolute paths outside a mount are refused by wasmtime-wasi's capability-based
//! directory handles.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use wasmtime::component::Linker;

use super::capability::{CallSetup, Enforce};
use super::{CallState, Denial};
use crate::capabilities::filesystem::Filesystem;
use crate::capabilities::{Access, Mount, expand_path};

impl Enforce for Filesystem {
    type State = ();
    const GOVERNS: &'static [&'static str] = &["wasi:filesystem/types", "wasi:filesystem/preopens"];

    /// Linked with WASI's core (`Runtime::new`): without preopens it reaches nothing.
    fn add_to_linker(_linker: &mut Linker<CallState>) -> Result<()> {
        Ok(())
    }

    fn prepare(
        mounts: &Vec<Mount>,
        call: &CallSetup<'_>,
        wasi: &mut WasiCtxBuilder,
        denials: &mut Vec<Denial>,
    ) -> Result<()> {
        apply(mounts, &call.grant.paths, wasi, denials)
    }
}

fn apply(
    mounts: &[Mount],
    paths: &BTreeMap<String, String>,
    builder: &mut WasiCtxBuilder,
    denials: &mut Vec<Denial>,
) -> Result<()> {
    for m in mounts {
        let host = match contained_host_path(&m.host, paths) {
            Ok(p) => p,
            Err(e) => {
                denials.push(Denial { capability: "filesystem".into(), message: format!("mount {m} skipped: {e:#}") });
                continue;
            }
        };
        let perms = match m.access {
            Access::Read => FsPerms::ReadOnly,
            Access::ReadWrite => FsPerms::ReadWrite,
        };
        builder
            .preopened_dir(&host, &m.guest, perms)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot mount {} at {}: does the directory exist?", host.display(), m.guest))?;
    }
    Ok(())
}

/// Expand a mount's template and resolve symlinks; for `$VAR/sub` the result must stay
/// inside `$VAR`. Another skill with write access to `$VAR` could otherwise plant
/// `sub -> /etc` and redirect this mount.
fn contained_host_path(template: &str, paths: &BTreeMap<String, String>) -> Result<std::path::PathBuf> {
    let full = expand_path(template, paths)?;
    let resolved =
        std::fs::canonicalize(&full).with_context(|| format!("{} does not exist or cannot be read", full.display()))?;
    if let Some(rest) = template.strip_prefix('$') {
        let var_end = rest.find('/').unwrap_or(rest.len());
        let base = expand_path(&template[..=var_end], paths)?;
        let base = std::fs::canonicalize(&base).with_context(|| format!("{} does not exist", base.display()))?;
        if !resolved.starts_with(&base) {
            anyhow::bail!(
                "{} resolves to {}, outside {} (a symlink?); refusing to mount it",
                full.display(),
                resolved.display(),
                base.display()
            );
        }
    }
    Ok(resolved)
}
