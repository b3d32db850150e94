//! Group commit: how the appends of one process share their syncs (see [`GroupCommit`]).

use std::fs::File;
use std::sync::{Arc, Condvar, Mutex};

use crate::fsutil::FileStamp;

/// Group commit: an append writes its line under the file lock, releases the lock, then
/// its line is synced together with the others written meanwhile: one `sync_data` covers
/// every line written before it started.
///
/// Two ways to wait for it. By default an append returns once a sync that covers its line
/// has finished: one appender at a time (the leader) syncs for all, the others wait for
/// it, so under load one sync covers many lines and a lone append costs one sync, as
/// before. With [`AuditLog::sync_in_background`](super::AuditLog::sync_in_background) (the MCP server) an append returns as soon
/// as its line is written, and a background thread syncs behind the appends, round after
/// round; the appends of one round share its sync. A killed process loses nothing either
/// way (a written line is in the kernel); a power loss can lose the lines written since the
/// last finished round (rounds are [`SYNC_PAUSE`] apart plus the sync's own time), at most
/// [`MAX_UNSYNCED_LINES`]: past that many, appends wait for the disk.
#[derive(Debug, Default)]
pub(super) struct GroupCommit {
    pub(super) state: Mutex<CommitState>,
    /// A sync round finished.
    pub(super) done: Condvar,
    /// Lines are waiting for the background syncer.
    pub(super) work: Condvar,
    /// The log file this process appends to, kept open with the end of the chain it
    /// wrote last (see [`Writer`]). Also what serializes this process's appends: every
    /// clone's appends flock the same open file, and a second flock of one open file
    /// would not wait for the first.
    pub(super) writer: Mutex<Option<Writer>>,
    /// The log file's stamp just after this process's last line, as in [`Writer::stamp`],
    /// for [`AuditLog::check_appendable`](super::AuditLog::check_appendable), which must
    /// not wait for an append in progress. Compared with the file's stamp before it is
    /// trusted, so an old one only sends the check to the file's end.
    pub(super) last_stamp: Mutex<Option<FileStamp>>,
}

/// The open log file and what this process knows of its end: the hash and `seq` of the
/// line it wrote last, and the file's stamp just after that write (under the flock). An
/// append that finds the file with the same stamp (same inode, size, mtime and ctime)
/// chains to them without reading the file's end again; any other writer (another
/// process's append, a seal, an edit) changes the stamp, and the end is read as before.
#[derive(Debug)]
pub(super) struct Writer {
    pub(super) file: Arc<File>,
    pub(super) stamp: FileStamp,
    pub(super) hash: String,
    pub(super) seq: u64,
}

/// Pause of the background syncer between two rounds.
const SYNC_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Most lines written but not yet synced in background mode before appends wait.
pub const MAX_UNSYNCED_LINES: u64 = 1024;

#[derive(Debug, Default)]
pub(super) struct CommitState {
    /// Lines this process wrote (each append's ticket is the count after its write).
    pub(super) written: u64,
    /// Every line up to this ticket is on disk.
    pub(super) durable: u64,
    pub(super) syncing: bool,
    /// Files written since the last sync, one handle per inode (a seal switches files).
    pub(super) pending: Vec<(u64, u64, Arc<File>)>,
    /// `sync_data` rounds run, for [`AuditLog::syncs`](super::AuditLog::syncs).
    pub(super) syncs: u64,
    /// Appends do not wait for the disk; the background syncer runs.
    pub(super) background: bool,
    /// The last sync failed: appends wait for a sync of their own until one succeeds.
    pub(super) failing: bool,
}

pub(super) type Guard<'a> = std::sync::MutexGuard<'a, CommitState>;

impl GroupCommit {
    pub(super) fn lock(&self) -> Guard<'_> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record a written line (its file unlocked, still open; `id` its device and inode),
    /// then wait for the disk, or leave it to the background syncer. One lock of the state
    /// for both; the syncer is woken only by the line that finds nothing pending: with lines
    /// already pending it has been woken before, and it looks at `pending` again before it
    /// waits (so a wake per line would be a futex call per answer for nothing).
    pub(super) fn written(&self, file: &Arc<File>, id: (u64, u64)) -> std::io::Result<()> {
        let mut st = self.lock();
        st.written += 1;
        let ticket = st.written;
        let first_pending = st.pending.is_empty();
        if !st.pending.iter().any(|(dev, ino, _)| (*dev, *ino) == id) {
            st.pending.push((id.0, id.1, file.clone()));
        }
        if st.background && !st.failing && st.written - st.durable <= MAX_UNSYNCED_LINES {
            if first_pending {
                self.work.notify_one();
            }
            return Ok(());
        }
        drop(st);
        self.wait_durable(ticket)
    }

    /// One sync of everything written so far, as the leader (`st.syncing` must be false).
    fn sync_round<'a>(&'a self, mut st: Guard<'a>) -> (Guard<'a>, std::io::Result<()>) {
        st.syncing = true;
        st.syncs += 1;
        let target = st.written;
        let files = std::mem::take(&mut st.pending);
        drop(st);
        let synced = files.iter().try_for_each(|(_, _, f)| f.sync_data());
        let mut st = self.lock();
        st.syncing = false;
        st.failing = synced.is_err();
        match synced {
            Ok(()) => st.durable = st.durable.max(target),
            // Not durable: the files stay pending, so the next round syncs them again.
            Err(_) => st.pending.extend(files),
        }
        self.done.notify_all();
        if !st.pending.is_empty() {
            self.work.notify_one();
        }
        (st, synced)
    }

    /// Return once the line of `ticket` is on disk, syncing as the leader when no sync runs.
    pub(super) fn wait_durable(&self, ticket: u64) -> std::io::Result<()> {
        let mut st = self.lock();
        loop {
            if st.durable >= ticket {
                return Ok(());
            }
            if st.syncing {
                st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let (next, synced) = self.sync_round(st);
            st = next;
            synced?;
        }
    }

    /// The background syncer: sync whatever was written, round after round, until the log
    /// (every clone) is dropped.
    pub(super) fn run_syncer(commits: std::sync::Weak<GroupCommit>) {
        while let Some(gc) = commits.upgrade() {
            let mut st = gc.lock();
            if st.pending.is_empty() || st.syncing {
                // Woken by a write; the timeout only notices that the log was dropped.
                st = gc
                    .work
                    .wait_timeout(st, std::time::Duration::from_millis(200))
                    .map_or_else(|p| p.into_inner().0, |r| r.0);
            }
            if !st.pending.is_empty() && !st.syncing {
                let (st, synced) = gc.sync_round(st);
                drop(st);
                drop(gc);
                if let Err(e) = synced {
                    tracing::warn!(
                        error = %e,
                        "cannot sync the audit log; appends wait for the disk until a sync succeeds"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                // Rounds back to back would keep the file's last page under writeback, and
                // a write to a page under writeback waits for the disk: pace the rounds.
                std::thread::sleep(SYNC_PAUSE);
            }
        }
    }
}
