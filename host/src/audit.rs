//! The audit log: one JSON line per skill call or agent step in `<home>/audit/audit.jsonl`,
//! hash-chained so that editing, deleting, inserting or reordering a line is detectable.
//!
//! Each line is the caller's entry plus `seq` (1-based, contiguous), `ts` (RFC 3339, UTC,
//! milliseconds), `prev` (the previous line's `hash`; 64 zeros on the first line) and
//! `hash`: the hex sha256 over `prev` followed by the canonical JSON of the line without
//! `hash` (no whitespace, object keys sorted by bytes at every level). The canonical form is
//! written by [`canonical_json`] rather than left to serde_json's map type, whose order a
//! `preserve_order` feature anywhere in the dependency graph would silently change.
//!
//! Appends hold an exclusive lock on the file (flock, through `File::lock`), take the
//! previous hash from the last line (read backwards from the end, so an append costs the
//! same on a large log), and write the line with one `write_all`, then release the lock;
//! the line is synced by a `sync_data` that concurrent appenders of one process share
//! (group commit, see [`GroupCommit`]). By default an append returns once its line is on
//! disk; a server ([`AuditLog::sync_in_background`]) returns once it is written and syncs
//! behind. Either way a caller that answers after the append never answers a call that a
//! killed process could lose: the line is in the kernel from the write on.
//! A crash mid-write leaves a torn last line without a newline: [`AuditLog::verify`] reports
//! it as such, not as tampering, and the next append cuts it off (that entry was never
//! complete, so nothing written whole is lost) and records how many bytes it discarded in
//! its own entry (`torn_tail_bytes`).
//!
//! What a chain alone cannot show is lines cut off the end: what remains still verifies.
//! `skillhost audit verify` prints the head hash; keep it elsewhere if that matters.
//!
//! A damaged last line means nothing more can be chained: [`AuditLog::check_appendable`]
//! says so (naming the damaged line), and the library refuses skill calls rather than run
//! them unaudited. [`AuditLog::seal`] is the way out: the damaged file moves unchanged to
//! `sealed/`, and a new segment starts whose first line (`kind: seal`) records the sealed
//! file's sha256, so `verify` passes again and still proves what the old file held.
//!
//! The log takes generic entries (a JSON object with `kind` and `session`); it knows
//! nothing of the library or the agent that write them.
//!
//! With a PostgreSQL store (`--store postgres://...`, see [`AuditLog::postgres`]) the same
//! lines, with the same hash rule, form one chain in the database shared by every host;
//! appends, verification and reading dispatch to `postgres` (its module doc says how appends
//! are serialized and group-committed), and `verify` walks the rows with the same code.
//!
//! Files: `entry` the typed entries writers fill in, `canonical` an entry in canonical
//! form before it is chained (a call's entry is written into it straight from its fields),
//! `chain` the canonical form, hashing and walking of lines, `sync` group commit, `read` reading entries back and
//! summarising sessions, `seal` setting a damaged log aside, `postgres` the chain in a
//! PostgreSQL store.

use std::fs::File;
use std::io::{BufReader, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;

use crate::fsutil::FileStamp;

mod canonical;
mod chain;
mod entry;
mod postgres;
mod read;
mod seal;
mod sync;

pub use canonical::CanonicalEntry;
pub use canonical::canonical_json;
use chain::{Tail, chained_line, check_entry, last_entry, walk};
pub use entry::{
    CallDetail, CallEntry, CallStatus, ClientInfo, EntryKind, InstallEntry, InstallStatus, McpCall, RanCall,
    StepAction, StepEntry, StepStatus, new_entry, preview,
};
pub use postgres::MAX_BATCH;
pub(crate) use postgres::PG_SCHEMA;
pub use read::{AuditRead, SessionSummary};
pub use seal::{SealCheck, SealStatus, Sealed};
pub use sync::MAX_UNSYNCED_LINES;
use sync::{GroupCommit, Writer};

/// `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Fields the log sets itself; an entry may not bring its own.
const RESERVED: [&str; 5] = ["seq", "ts", "prev", "hash", "torn_tail_bytes"];

/// Longest last line an append reads back: far above any entry (the sandbox caps logs and
/// parameters), so a longer one is damage, not an entry.
const MAX_LINE_BYTES: u64 = 64 << 20;

/// How long an inline append waits for another thread's append of this process before it
/// goes to the blocking pool ([`AuditLog::try_append_now`]): a few of its system calls.
const WRITER_WAIT: std::time::Duration = std::time::Duration::from_micros(30);

/// What an append wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Appended {
    pub seq: u64,
    pub hash: String,
    /// Bytes of a torn last line (an interrupted write) cut off before this append.
    pub torn_tail_bytes: u64,
}

/// A successful [`AuditLog::verify`].
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    /// Complete lines, all verified.
    pub entries: u64,
    /// `hash` of the last verified line (GENESIS when empty): keep it elsewhere to detect
    /// lines later cut off the end.
    pub head: String,
    pub torn_tail: Option<TornTail>,
    /// When the log starts with a seal: the sealed segment it records, and whether that
    /// file still has the recorded bytes.
    pub sealed: Option<SealCheck>,
}

/// An unfinished last line: a write interrupted by a crash, not tampering.
#[derive(Debug, Clone, Serialize)]
pub struct TornTail {
    pub line: u64,
    pub bytes: u64,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is incomplete ({} bytes, no newline at the end of the file): a write was interrupted, probably by a crash. It is not part of the chain; the {} lines before it verify, and the next append discards it",
            self.line,
            self.bytes,
            self.line - 1
        )
    }
}

/// Why a line breaks the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Problem {
    /// Not JSON, or not an object with `seq`, `prev` and `hash`.
    Unparseable,
    /// The content does not hash to the recorded `hash`: the line was edited.
    HashMismatch,
    /// `prev` is not the previous line's hash: a line was deleted, inserted or reordered.
    PrevMismatch,
    /// `seq` is not the line number.
    SeqGap,
    /// A PostgreSQL chain's head row does not record its last line: lines were cut off the
    /// end, added after it, or the head was edited.
    HeadMismatch,
}

/// The first line that breaks the chain.
#[derive(Debug, Clone, Serialize)]
pub struct ChainBreak {
    /// 1-based line number in the file.
    pub line: u64,
    pub problem: Problem,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{}", .0.message)]
    Broken(ChainBreak),
    #[error("cannot read the audit log {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The PostgreSQL store could not be read (the message names it and what to check).
    #[error("{0:#}")]
    Store(anyhow::Error),
}

/// The append-only, hash-chained log in one file, or in a PostgreSQL store. Clones share
/// one [`GroupCommit`] (one writer for a store): the appends of one process (a server's
/// concurrent calls) share their syncs (their transactions).
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
    commits: Arc<GroupCommit>,
    /// The chain in a PostgreSQL store; `path` is then unused.
    pg: Option<Arc<postgres::PgChain>>,
}

impl AuditLog {
    pub fn new(path: impl Into<PathBuf>) -> AuditLog {
        AuditLog { path: path.into(), commits: Arc::default(), pg: None }
    }

    /// The one chain of a PostgreSQL store (its schema checked by the caller, see
    /// [`crate::store::PgStore::open`]), written by a group-committing writer of this
    /// process: make one per process and clone it.
    pub fn postgres(store: &crate::store::PgStore) -> AuditLog {
        AuditLog { path: PathBuf::new(), commits: Arc::default(), pg: Some(Arc::new(postgres::PgChain::new(store))) }
    }

    /// Whether the chain is in a PostgreSQL store.
    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    /// Where the chain is, for messages: the file's path, or the store's URL (no password)
    /// and table.
    pub fn location(&self) -> String {
        match &self.pg {
            Some(pg) => pg.location(),
            None => self.path.display().to_string(),
        }
    }

    /// How many `sync_data` rounds this log (and its clones) ran: under concurrent appends,
    /// fewer than the appends (group commit). For a PostgreSQL chain: the transactions
    /// committed.
    pub fn syncs(&self) -> u64 {
        if let Some(pg) = &self.pg {
            return pg.batches();
        }
        self.commits.lock().syncs
    }

    /// For a PostgreSQL chain: batches committed in one round trip on the head this host
    /// knew, and guesses that missed because another host had appended (see
    /// `audit/postgres.rs`). `(0, 0)` for a file.
    pub fn one_trip_appends(&self) -> (u64, u64) {
        self.pg.as_ref().map_or((0, 0), |pg| pg.guesses())
    }

    /// From now on (for this log and its clones), an append returns as soon as its line is
    /// written, and a background thread syncs behind the appends (see [`GroupCommit`]):
    /// for a server, where a sync per answer would cost more than the call. A killed
    /// process still loses no written line; a power loss can lose the last sync round's.
    /// Call [`AuditLog::flush`] before a clean exit.
    /// A PostgreSQL chain's appends return once committed; this changes nothing for it.
    pub fn sync_in_background(&self) -> Result<()> {
        if self.pg.is_some() {
            return Ok(());
        }
        let mut st = self.commits.lock();
        if st.background {
            return Ok(());
        }
        let weak = Arc::downgrade(&self.commits);
        std::thread::Builder::new()
            .name("skillhost-audit-sync".into())
            .spawn(move || GroupCommit::run_syncer(weak))
            .context("cannot start the audit sync thread")?;
        st.background = true;
        Ok(())
    }

    /// Wait until every line this process wrote is on disk.
    pub fn flush(&self) -> Result<()> {
        if self.pg.is_some() {
            return Ok(()); // every append waited for its commit
        }
        let ticket = self.commits.lock().written;
        self.commits.wait_durable(ticket).with_context(|| format!("cannot sync {}", self.path.display()))
    }

    /// The log of a skillhost home: `<home>/audit/audit.jsonl`.
    pub fn in_home(home: &Path) -> AuditLog {
        AuditLog::new(home.join("audit").join("audit.jsonl"))
    }

    /// The file's path (empty for a PostgreSQL chain: see [`AuditLog::location`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where [`AuditLog::seal`] puts damaged logs: `sealed/` next to the log.
    pub fn sealed_dir(&self) -> PathBuf {
        self.path.parent().unwrap_or(Path::new(".")).join("sealed")
    }

    /// Open the log and take its exclusive lock. A seal renames the file aside while
    /// holding the lock, so a caller that opened the old file and waited gets the new one.
    fn open_locked(&self) -> Result<File> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        for _ in 0..64 {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&self.path)
                .with_context(|| format!("cannot open {}", self.path.display()))?;
            file.lock().with_context(|| format!("cannot lock {}", self.path.display()))?;
            let same = match (file.metadata(), std::fs::metadata(&self.path)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if same {
                return Ok(file);
            }
        }
        bail!("{} keeps being replaced while this process tries to append to it", self.path.display())
    }

    /// Take the flock of the kept file again; `None` (and the kept file dropped) when the
    /// path names another file now (a seal moved it aside, or it was removed).
    /// With the stamp of the file the path names, taken under the flock.
    fn relock(&self, kept: Writer) -> Option<(Arc<File>, Writer, FileStamp)> {
        kept.file.lock().ok()?;
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (kept.stamp.dev(), kept.stamp.ino()) => {
                Some((kept.file.clone(), kept, FileStamp::from_metadata(&m)))
            }
            _ => {
                let _ = kept.file.unlock();
                None
            }
        }
    }

    /// Append `entry` (which must have a `kind` of `call` or `step`, and a `session`) as
    /// the next line of the chain.
    pub fn append(&self, entry: impl Into<CanonicalEntry>) -> Result<Appended> {
        let entry = entry.into();
        check_entry(&entry)?;
        if let Some(pg) = &self.pg {
            return pg.append(entry);
        }
        let mut writer = self.commits.writer.lock().unwrap_or_else(|p| p.into_inner());
        // Any failure below forgets the kept file: the next append opens the log afresh.
        let kept = writer.take();
        let (file, known, before) = match kept.and_then(|w| self.relock(w)) {
            Some((file, w, stamp)) => (file, Some(w), Some(stamp)),
            None => (Arc::new(self.open_locked()?), None, None),
        };
        self.append_locked(writer, file, known, before, entry)
    }

    /// [`AuditLog::append`] only if it need not wait: in background-sync mode, with the
    /// log file kept open by an earlier append, no other appender of this process or
    /// another holding it, and the disk not behind. Then the append is a few system calls
    /// (a flock, a `stat`, a `write`, an `fstat`), cheap enough for an async worker;
    /// otherwise the entry comes back untouched, for [`AuditLog::append`] off the executor.
    pub fn try_append_now(
        &self,
        entry: impl Into<CanonicalEntry>,
    ) -> std::result::Result<Result<Appended>, CanonicalEntry> {
        let entry = entry.into();
        if let Err(e) = check_entry(&entry) {
            return Ok(Err(e));
        }
        if self.pg.is_some() {
            // It waits for a commit: off the executor ([`AuditLog::append_async`] awaits it).
            return Err(entry);
        }
        {
            let st = self.commits.lock();
            if !st.background || st.failing || st.written - st.durable >= MAX_UNSYNCED_LINES {
                return Err(entry);
            }
        }
        let Some(mut writer) = self.writer_soon() else { return Err(entry) };
        let Some(kept) = writer.take() else { return Err(entry) };
        if kept.file.try_lock().is_err() {
            *writer = Some(kept);
            return Err(entry);
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (kept.stamp.dev(), kept.stamp.ino()) => {
                let file = kept.file.clone();
                let before = FileStamp::from_metadata(&m);
                Ok(self.append_locked(writer, file, Some(kept), Some(before), entry))
            }
            _ => {
                // Sealed aside or removed: the next blocking append opens the new file.
                let _ = kept.file.unlock();
                Err(entry)
            }
        }
    }

    /// The writer's lock if it comes free within [`WRITER_WAIT`]. Another worker's inline
    /// append holds it for a few system calls; waiting that long on this thread costs less
    /// than handing the append to the blocking pool (two thread wake-ups and a task). A
    /// holder that is slower than that (a blocking append waiting for another process's
    /// flock) is not waited for.
    fn writer_soon(&self) -> Option<std::sync::MutexGuard<'_, Option<Writer>>> {
        let mut began = None;
        loop {
            match self.commits.writer.try_lock() {
                Ok(writer) => return Some(writer),
                Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {
                    if began.get_or_insert_with(std::time::Instant::now).elapsed() >= WRITER_WAIT {
                        return None;
                    }
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// [`AuditLog::append`] for async callers: a PostgreSQL chain's append is awaited; a
    /// file's runs on the blocking pool unless it need not wait ([`AuditLog::try_append_now`]).
    pub async fn append_async(&self, entry: impl Into<CanonicalEntry>) -> Result<Appended> {
        let entry = entry.into();
        if let Some(pg) = &self.pg {
            check_entry(&entry)?;
            return pg.append_async(entry).await;
        }
        let entry = match self.try_append_now(entry) {
            Ok(appended) => return appended,
            Err(entry) => entry,
        };
        let log = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(move || log.append(entry))
                .await
                .map_err(|e| anyhow!("the audit writer stopped: {e}"))?,
            Err(_) => log.append(entry),
        }
    }

    /// The rest of an append once `file` is open and flocked (`known`: what this process
    /// knew of its end; `stat`: the file's stamp if already taken under the flock, through
    /// the path that names this file); `writer` is held until the line is written.
    fn append_locked(
        &self,
        mut writer: std::sync::MutexGuard<'_, Option<Writer>>,
        file: Arc<File>,
        known: Option<Writer>,
        stat: Option<FileStamp>,
        mut entry: CanonicalEntry,
    ) -> Result<Appended> {
        // Under the flock from here; an error still unlocks (the file may stay open, kept
        // for the syncer, and an open file keeps its flock).
        let locked = || -> Result<(FileStamp, Tail, String, Option<FileStamp>)> {
            // The path's stamp names the same inode as `file` (checked under the flock), so
            // it is this file's stamp: no second `fstat`.
            let before = match stat {
                Some(s) => s,
                None => FileStamp::from_metadata(
                    &file.metadata().with_context(|| format!("cannot read the end of {}", self.path.display()))?,
                ),
            };
            let tail = match known {
                // Nobody wrote since this process's last line: its end is known.
                Some(w) if w.stamp == before => {
                    Tail { hash: w.hash, seq: w.seq, complete_len: before.size(), torn_bytes: 0 }
                }
                _ => last_entry(&file).with_context(|| format!("cannot read the end of {}", self.path.display()))?,
            };
            if tail.torn_bytes > 0 {
                file.set_len(tail.complete_len)
                    .with_context(|| format!("cannot cut the torn last line of {}", self.path.display()))?;
                entry.insert("torn_tail_bytes", tail.torn_bytes);
            }
            let (line, hash) = chained_line(entry, tail.seq + 1, &tail.hash);
            (&*file).write_all(line.as_bytes()).with_context(|| format!("cannot write to {}", self.path.display()))?;
            let after = file.metadata().ok().map(|m| FileStamp::from_metadata(&m));
            Ok((before, tail, hash, after))
        };
        let written = locked();
        // The line is in the kernel now: a killed process loses nothing from here. The
        // next appender may chain to it while this one waits for the disk.
        let unlocked = file.unlock().with_context(|| format!("cannot unlock {}", self.path.display()));
        let (before, tail, hash, after) = written?;
        unlocked?;
        let seq = tail.seq + 1;
        if let Some(stamp) = after {
            *writer = Some(Writer { file: file.clone(), stamp, hash: hash.clone(), seq });
            *self.commits.last_stamp.lock().unwrap_or_else(|p| p.into_inner()) = Some(stamp);
        }
        drop(writer);
        self.commits
            .written(&file, (before.dev(), before.ino()))
            .with_context(|| format!("cannot sync {}", self.path.display()))?;
        Ok(Appended { seq, hash, torn_tail_bytes: tail.torn_bytes })
    }

    /// Can the next entry be chained to the log? Reads only its end (as an append does).
    /// The error names the log, the first damaged line and the way out, for callers that
    /// must not act unaudited.
    pub fn check_appendable(&self) -> Result<()> {
        if let Some(pg) = &self.pg {
            return pg.check_appendable();
        }
        // The file as this process's last append left it: its end was a line just written.
        // Neither the `stat` nor the wait for an append in progress is taken under the
        // writer's lock: the stamp has a lock of its own, held only to copy it. An append
        // of this process that lands meanwhile changes both the file and the stamp, so the
        // stamp is read again before the end is read from the file.
        let kept = || *self.commits.last_stamp.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(before) = kept() {
            let now = FileStamp::of(&self.path).ok().flatten();
            if now == Some(before) || (now.is_some() && now == kept()) {
                return Ok(());
            }
        }
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(anyhow!("cannot read the audit log {}: {e}", self.path.display())),
        };
        let Err(e) = last_entry(&file) else { return Ok(()) };
        let damage = match self.verify() {
            Err(VerifyError::Broken(b)) => format!("; the first damaged line: {}", b.message),
            _ => String::new(),
        };
        Err(anyhow!(
            "the audit log {} cannot take another entry: {e:#}{damage}.\nSkill calls are refused until it can, so that none runs unaudited. `skillhost audit verify` shows the damage; `skillhost audit seal` sets the damaged log aside (kept in {}) and starts a new verified segment that records it.",
            self.path.display(),
            self.sealed_dir().display()
        ))
    }

    /// Walk the whole file and check every line: JSON object, recorded hash, link to the
    /// previous line, contiguous `seq`. Names the first line that fails. When the first
    /// line is a seal, also checks that the sealed file it names still has its bytes.
    ///
    /// A PostgreSQL chain is walked the same way, row by row in one snapshot, and its head row
    /// must record the last line ([`Problem::HeadMismatch`] otherwise).
    pub fn verify(&self) -> Result<Verified, VerifyError> {
        if let Some(pg) = &self.pg {
            return pg.verify();
        }
        let io = |source| VerifyError::Io { path: self.path.clone(), source };
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Verified { entries: 0, head: GENESIS.to_string(), torn_tail: None, sealed: None });
            }
            Err(e) => return Err(io(e)),
        };
        let walk = walk(BufReader::new(file)).map_err(io)?;
        if let Some(b) = walk.broken {
            return Err(VerifyError::Broken(b));
        }
        let sealed = walk.first_seal.map(|seal| self.check_sealed(&seal));
        Ok(Verified { entries: walk.entries, head: walk.head, torn_tail: walk.torn_tail, sealed })
    }

    /// Write every line of this chain, verbatim and in order (one snapshot), each followed
    /// by a newline, to `out`: what the file of a local home holds (`skillhost store
    /// export`). Returns how many lines.
    pub fn export_lines(&self, out: &mut dyn std::io::Write) -> Result<u64> {
        match &self.pg {
            Some(pg) => pg.export_lines(out),
            None => {
                let mut file = match File::open(&self.path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                    Err(e) => return Err(e).with_context(|| format!("cannot read {}", self.path.display())),
                };
                let copied = std::io::copy(&mut file, out)?;
                Ok(if copied == 0 { 0 } else { self.verify().map(|v| v.entries).unwrap_or(0) })
            }
        }
    }

    /// Load the local log `file` into the chain of the PostgreSQL `store`, which must be
    /// empty: the lines verbatim, in order, so their hashes (and the head a user kept) still
    /// hold and `audit verify` on the store passes (`skillhost store import`). Refuses a log
    /// that does not verify or ends in a torn line, saying what to do.
    pub fn import_file(store: &crate::store::PgStore, file: &Path) -> Result<Verified> {
        let local = AuditLog::new(file);
        let verified = local.verify().map_err(|e| {
            anyhow!("the audit log {} does not verify ({e}); nothing was imported: fix or seal it first (`skillhost --home HOME audit seal`), then import", file.display())
        })?;
        if let Some(torn) = &verified.torn_tail {
            bail!(
                "the audit log {} ends in an incomplete line ({torn}); nothing was imported: run one skill call on that home (the append discards it) or `skillhost --home HOME audit seal`, then import",
                file.display()
            );
        }
        let lines: Vec<String> = match std::fs::read_to_string(file) {
            Ok(text) => text.lines().map(str::to_string).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
        };
        if lines.len() as u64 != verified.entries {
            bail!(
                "the audit log {} changed while it was imported; stop the processes using that home and import again",
                file.display()
            );
        }
        postgres::import_lines(store, lines, &verified.head)?;
        Ok(verified)
    }
}

#[cfg(test)]
mod tests;
