//! `filesystem`: each effective mount becomes a WASI preopen with read or read-write
//! permissions. Nothing else of the host filesystem exists for the guest; `..` and
//! absolute paths outside a mount are refused by wasmtime-wasi's capability-based
//! directory handles.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::Denial;
use crate::capabilities::{Access, Mount};
use crate::policy::expand_path;

pub(super) fn apply(
    mounts: &[Mount],
    paths: &BTreeMap<String, String>,
    builder: &mut WasiCtxBuilder,
    denials: &mut Vec<Denial>,
) -> Result<()> {
    for m in mounts {
        let host = match expand_path(&m.host, paths) {
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
