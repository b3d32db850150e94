//! One process at a time: redb allows a single writer process, so the store is guarded by
//! an advisory lock on `store.lock`, which also records who holds it. A second process
//! waits up to the configured time, then says which process holds the store instead of
//! failing with a bare "database already open". The kernel drops the lock when its holder
//! dies, SIGKILL included, so a crash never leaves the store locked.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// Held for as long as the store is open.
pub(super) struct StoreLock {
    _file: File,
}

impl StoreLock {
    pub fn acquire(path: &Path, wait: Duration) -> Result<StoreLock> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open the memory lock file {}", path.display()))?;
        let started = Instant::now();
        loop {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                bail!("cannot lock the memory store ({}): {err}", path.display());
            }
            if started.elapsed() >= wait {
                bail!(
                    "the memory store {} is busy: {}; waited {:.1} s. Wait for that process to finish (or stop it) and retry",
                    store_dir(path).display(),
                    holder(&mut file),
                    wait.as_secs_f64()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let me = format!("pid {} ({})\n", std::process::id(), command_line(std::process::id()));
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(me.as_bytes())?;
        Ok(StoreLock { _file: file })
    }
}

fn store_dir(lock: &Path) -> PathBuf {
    lock.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.seek(SeekFrom::Start(0)).and_then(|_| file.read_to_string(&mut text));
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
