//! Who owns the store: redb allows one process, so the owner holds an advisory lock on
//! `store.lock`, which also records who it is. Other processes do not wait for it: they
//! talk to the owner over its socket (see `handle.rs`). The kernel drops the lock when its
//! holder dies, SIGKILL included, so a crash never leaves the store locked, and the next
//! process to try takes it over.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

/// Held for as long as the store is open.
pub(super) struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// The lock if nobody holds it, else `None` (never waits).
    pub fn try_acquire(path: &Path) -> Result<Option<StoreLock>> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open the memory lock file {}", path.display()))?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                bail!("cannot lock the memory store ({}): {err}", path.display());
            }
            return Ok(None);
        }
        let me = format!("pid {} ({})\n", std::process::id(), command_line(std::process::id()));
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(me.as_bytes())?;
        Ok(Some(StoreLock { _file: file }))
    }
}

/// Who holds the lock, as its holder wrote it.
pub(super) fn holder(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    match text.trim() {
        "" => "another process holds it".to_string(),
        who => format!("held by {who}"),
    }
}

fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(200)
                .collect()
        })
        .unwrap_or_else(|_| "skillhost".to_string())
}
