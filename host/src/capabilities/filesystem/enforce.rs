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
//! A mount is opened once, by handle, and the handle is what gets checked and handed to
//! the guest: a skill with write access to the workspace can swap a directory for a link
//! between a check by name and an open by name, so the open follows no link at any
//! component (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or component by
//! component with `O_NOFOLLOW` where the kernel lacks it), and the opened directory's
//! device and inode must still be where the check found it: below its template root,
//! not the home, not above or inside a protected path, not in a kernel view.
//!
//! What the guest then does inside its mounts is seen by the host too
//! ([`super::gate`]): writes are charged to the call's `disk_write_mb`, and
//! wasmtime-wasi's refusals become one `filesystem` denial.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use wasmtime_wasi::filesystem::Dir;
use wasmtime_wasi::{FsPerms, OpenMode, WasiCtxBuilder};

use wasmtime::component::Linker;

use super::dirfd::{open_no_links, openat};
use super::gate::FsState;
use crate::capabilities::CapabilityKind;
use crate::capabilities::filesystem::Filesystem;
use crate::capabilities::filesystem::{resolve_mount_host, template_root};
use crate::capabilities::{Access, Mount};
use crate::sandbox::capability::{CallSetup, Enforce};
use crate::sandbox::{CallState, Denial};

impl Enforce for Filesystem {
    type State = FsState;
    const GOVERNS: &'static [&'static str] = &["wasi:filesystem/types", "wasi:filesystem/preopens"];

    /// Linked with WASI's core (`Runtime::new`), without preopens it reaches nothing; then
    /// re-linked through the gate that charges writes and records refusals.
    fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
        super::gate::add_to_linker(linker)
    }

    fn prepare(
        mounts: &Vec<Mount>,
        call: &CallSetup<'_>,
        _wasi: &mut WasiCtxBuilder,
        denials: &mut Vec<Denial>,
    ) -> Result<FsState> {
        let preopens = open_mounts(mounts, &call.grant.paths, call.protected, denials)?;
        Ok(FsState::new(&call.grant.limits, preopens))
    }

    fn take_denials(state: &mut FsState) -> Vec<Denial> {
        state.take_denials()
    }
}

/// Host directories no mount may be in.
const KERNEL_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// A directory's identity: device and inode.
type Node = (u64, u64);

/// Open every mount by handle and check the handle; the guest's preopens, in mount order.
fn open_mounts(
    mounts: &[Mount],
    paths: &BTreeMap<String, String>,
    protected: &[PathBuf],
    denials: &mut Vec<Denial>,
) -> Result<Vec<(Dir, String)>> {
    let mut preopens = Vec::new();
    for m in mounts {
        let host = match resolve_mount_host(&m.host, paths) {
            Ok(p) => p,
            Err(e) => {
                denials.push(Denial {
                    capability: CapabilityKind::Filesystem.into(),
                    message: format!("mount {m} skipped: {e:#}"),
                });
                continue;
            }
        };
        let refuse = |denials: &mut Vec<Denial>, message: String| {
            denials.push(Denial { capability: CapabilityKind::Filesystem.into(), message: message.clone() });
            anyhow!(message)
        };
        if let Some(message) = exposes_protected(m, &host, protected) {
            return Err(refuse(denials, message));
        }
        if let Some(hook) = crate::capabilities::filesystem::AFTER_MOUNT_CHECK.get() {
            hook(&host);
        }
        let dir = match open_checked(m, &host, paths, protected) {
            Ok(dir) => dir,
            Err(message) => return Err(refuse(denials, message)),
        };
        let (perms, open_mode) = match m.access {
            Access::Read => (FsPerms::ReadOnly, OpenMode::READ),
            Access::ReadWrite => (FsPerms::ReadWrite, OpenMode::READ | OpenMode::WRITE),
        };
        preopens.push((Dir::new(dir, perms, open_mode, false), m.guest.clone()));
    }
    Ok(preopens)
}

/// Why a mount at `host` may not be given, judged on its path: it holds or lies inside a
/// protected path, or is in a kernel view of the host.
fn exposes_protected(m: &Mount, host: &Path, protected: &[PathBuf]) -> Option<String> {
    if let Some(p) = protected.iter().find(|p| p.starts_with(host) || host.starts_with(p)) {
        return Some(format!(
            "mount {m} ({}) would expose {}, which holds the skillhost home or the project policy (grants, compiled code, installed skills, memory, audit log); refusing to run. Run from a directory that does not contain it or pass --workspace DIR, or keep the home elsewhere (SKILLHOST_HOME / --home)",
            host.display(),
            p.display()
        ));
    }
    // Kernel views of the host: /proc/<pid>/environ is the host's environment (API keys)
    // and /proc/<pid>/root every file; /dev and /sys are its devices.
    KERNEL_DIRS.iter().find(|k| host.starts_with(k)).map(|kernel| {
        format!(
            "mount {m} ({}) is inside {kernel}, the kernel's view of the host (process environments and files, devices); refusing to run. Mount a project directory instead",
            host.display()
        )
    })
}

/// Open the checked directory `host` once, following no link, and check the handle: it is
/// still `host` (by the kernel's name for it), below the template root, and neither holds
/// nor lies inside a protected path or a kernel view (by device and inode).
fn open_checked(
    m: &Mount,
    host: &Path,
    paths: &BTreeMap<String, String>,
    protected: &[PathBuf],
) -> Result<File, String> {
    let changed = |why: String| {
        format!(
            "mount {m} ({}) changed between its check and its open ({why}); refusing to run. Something is swapping directories for links in the workspace: another skill with write access to it?",
            host.display()
        )
    };
    let root = template_root(&m.host, paths)
        .ok()
        .flatten()
        .and_then(|r| std::fs::canonicalize(r).ok())
        .unwrap_or_else(|| PathBuf::from("/"));
    let rel = host.strip_prefix(&root).map_err(|_| changed(format!("it is no longer below {}", root.display())))?;
    let root_dir = open_no_links(None, &root).map_err(|e| changed(format!("{}: {e}", root.display())))?;
    let dir = open_no_links(Some(&root_dir), rel).map_err(|e| changed(format!("{e}")))?;
    let now = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).map_err(|e| changed(e.to_string()))?;
    if now.as_path() != host {
        return Err(changed(format!("the opened directory is {}", now.display())));
    }
    if let Some(message) = exposes_protected(m, &now, protected) {
        return Err(message);
    }
    let up = ancestors(&dir).map_err(|e| changed(e.to_string()))?;
    let root_node = node(&root_dir).map_err(|e| changed(e.to_string()))?;
    if !up.contains(&root_node) {
        return Err(changed(format!("it is no longer below {}", root.display())));
    }
    let here = up[0];
    for p in protected {
        // A protected path below the mount has the mount among its ancestors; a mount
        // inside a protected path has it among its own.
        let Ok(p_up) = path_ancestors(p) else { continue };
        if p_up.contains(&here) || up.contains(&p_up[0]) {
            return Err(format!(
                "mount {m} ({}) is the same directory as, holds or lies inside {}, which holds the skillhost home or the project policy (grants, compiled code, installed skills, memory, audit log); refusing to run. Run from a directory that does not contain it or pass --workspace DIR, or keep the home elsewhere (SKILLHOST_HOME / --home)",
                host.display(),
                p.display()
            ));
        }
    }
    for kernel in KERNEL_DIRS {
        if let Ok(k) = std::fs::metadata(kernel).map(|md| (md.dev(), md.ino()))
            && up.contains(&k)
        {
            return Err(format!(
                "mount {m} ({}) is inside {kernel}, the kernel's view of the host (process environments and files, devices); refusing to run. Mount a project directory instead",
                host.display()
            ));
        }
    }
    Ok(dir)
}

fn node(f: &File) -> std::io::Result<Node> {
    let md = f.metadata()?;
    Ok((md.dev(), md.ino()))
}

/// The nodes from `dir` up to `/`, `dir` first, walked through `..` of the handle itself.
fn ancestors(dir: &File) -> std::io::Result<Vec<Node>> {
    let mut out = vec![node(dir)?];
    let mut at = dir.try_clone()?;
    // A tree deeper than this is not a directory tree a user mounts.
    for _ in 0..4096 {
        // O_PATH: an ancestor the user may pass through but not list is still walked.
        let parent = openat(at.as_raw_fd(), c"..", libc::O_NOFOLLOW | libc::O_PATH)?;
        let n = node(&parent)?;
        if Some(&n) == out.last() {
            return Ok(out);
        }
        out.push(n);
        at = parent;
    }
    Err(std::io::Error::other("directory tree too deep"))
}

/// The nodes of `path` and of each of its ancestors, by name (a protected path is the
/// host's own, not the skill's to move).
fn path_ancestors(path: &Path) -> std::io::Result<Vec<Node>> {
    path.ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .map(|a| std::fs::metadata(a).map(|md| (md.dev(), md.ino())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opened_directory_knows_its_ancestors_by_device_and_inode() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let base = open_no_links(None, &root).unwrap();
        let opened = open_no_links(Some(&base), Path::new("a/b")).unwrap();
        let up = ancestors(&opened).unwrap();
        assert_eq!(up[0], node(&opened).unwrap());
        assert!(up.contains(&node(&base).unwrap()));
        assert_eq!(*up.last().unwrap(), path_ancestors(Path::new("/")).unwrap()[0]);
    }
}
