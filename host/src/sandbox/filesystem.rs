//! `filesystem`: each effective mount becomes a WASI preopen with read or read-write
//! permissions. Nothing else of the host filesystem exists for the guest; `..` and
//! absolute paths outside a mount are refused by wasmtime-wasi's capability-based
//! directory handles.
//!
//! A mount that contains the skillhost home or the project policy file (or lies inside
//! the home) is refused, and the call with it: through it a skill could grant itself
//! rights, swap compiled code, read memory or truncate the audit log. A preopen cannot
//! exclude a subtree, so refusing is the only safe answer. So is a mount in /proc, /sys or
//! /dev: the host's process environments, its whole tree (`/proc/self/root`), its devices.
//!
//! What the guest then does inside its mounts is seen by the host too
//! ([`super::filesystem_gate`]): writes are charged to the call's `disk_write_mb`, and
//! wasmtime-wasi's refusals become one `filesystem` denial.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use wasmtime::component::Linker;

use super::capability::{CallSetup, Enforce};
use super::filesystem_gate::FsState;
use crate::capabilities::CapabilityKind;
use super::{CallState, Denial};
use crate::capabilities::filesystem::Filesystem;
use crate::capabilities::filesystem::resolve_mount_host;
use crate::capabilities::{Access, Mount};

impl Enforce for Filesystem {
    type State = FsState;
    const GOVERNS: &'static [&'static str] = &["wasi:filesystem/types", "wasi:filesystem/preopens"];

    /// Linked with WASI's core (`Runtime::new`), without preopens it reaches nothing; then
    /// re-linked through the gate that charges writes and records refusals.
    fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
        super::filesystem_gate::add_to_linker(linker)
    }

    fn prepare(
        mounts: &Vec<Mount>,
        call: &CallSetup<'_>,
        wasi: &mut WasiCtxBuilder,
        denials: &mut Vec<Denial>,
    ) -> Result<FsState> {
        let writable = apply(mounts, &call.grant.paths, call.protected, wasi, denials)?;
        Ok(FsState::new(&call.grant.limits, writable))
    }

    fn take_denials(state: &mut FsState) -> Vec<Denial> {
        state.take_denials()
    }
}

/// Host directories no mount may be in.
const KERNEL_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

fn apply(
    mounts: &[Mount],
    paths: &BTreeMap<String, String>,
    protected: &[PathBuf],
    builder: &mut WasiCtxBuilder,
    denials: &mut Vec<Denial>,
) -> Result<bool> {
    let mut writable = false;
    for m in mounts {
        let host = match resolve_mount_host(&m.host, paths) {
            Ok(p) => p,
            Err(e) => {
                denials.push(Denial { capability: CapabilityKind::Filesystem.into(), message: format!("mount {m} skipped: {e:#}") });
                continue;
            }
        };
        if let Some(p) = protected.iter().find(|p| p.starts_with(&host) || host.starts_with(p)) {
            let message = format!(
                "mount {m} ({}) would expose {}, which holds the skillhost home or the project policy (grants, compiled code, installed skills, memory, audit log); refusing to run. Run from a directory that does not contain it or pass --workspace DIR, or keep the home elsewhere (SKILLHOST_HOME / --home)",
                host.display(),
                p.display()
            );
            denials.push(Denial { capability: CapabilityKind::Filesystem.into(), message: message.clone() });
            anyhow::bail!(message);
        }
        // Kernel views of the host: /proc/<pid>/environ is the host's environment (API keys)
        // and /proc/<pid>/root every file; /dev and /sys are its devices.
        if let Some(kernel) = KERNEL_DIRS.iter().find(|k| host.starts_with(k)) {
            let message = format!(
                "mount {m} ({}) is inside {kernel}, the kernel's view of the host (process environments and files, devices); refusing to run. Mount a project directory instead",
                host.display()
            );
            denials.push(Denial { capability: CapabilityKind::Filesystem.into(), message: message.clone() });
            anyhow::bail!(message);
        }
        let perms = match m.access {
            Access::Read => FsPerms::ReadOnly,
            Access::ReadWrite => FsPerms::ReadWrite,
        };
        builder
            .preopened_dir(&host, &m.guest, perms)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot mount {} at {}: does the directory exist?", host.display(), m.guest))?;
        writable |= m.access == Access::ReadWrite;
    }
    Ok(writable)
}
