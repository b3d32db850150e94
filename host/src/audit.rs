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

use std::fs::File;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::fsutil::FileStamp;
use crate::text::sha256_hex;

mod entry;
pub use entry::{
    CallDetail, CallEntry, CallStatus, ClientInfo, EntryKind, InstallEntry, InstallStatus, McpCall, RanCall,
    StepAction, StepEntry, StepStatus, new_entry, preview,
};

/// `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Fields the log sets itself; an entry may not bring its own.
const RESERVED: [&str; 5] = ["seq", "ts", "prev", "hash", "torn_tail_bytes"];

/// Longest last line an append reads back: far above any entry (the sandbox caps logs and
/// parameters), so a longer one is damage, not an entry.
const MAX_LINE_BYTES: u64 = 64 << 20;

/// `value` as canonical JSON: no whitespace, object keys sorted by bytes at every level,
/// scalars as serde_json writes them. What the chain hashes.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Only serde_json's own output and ASCII punctuation were written.
    String::from_utf8(out).unwrap_or_default()
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            write_canonical_object(map, out, |_| false);
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        // Writing a scalar into a Vec cannot fail.
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// `map` as a canonical object; returns the offset of the first key for which `mark`
/// holds (or of the closing brace when none does).
fn write_canonical_object(map: &Map<String, Value>, out: &mut Vec<u8>, mark: impl Fn(&str) -> bool) -> usize {
    let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    let mut marked = None;
    for (i, (k, v)) in pairs.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if marked.is_none() && mark(k) {
            marked = Some(out.len());
        }
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
        write_canonical(v, out);
    }
    let end = out.len();
    out.push(b'}');
    marked.unwrap_or(end)
}

/// The hash a line records: sha256 over `prev` and the canonical line without `hash`.
fn line_hash(prev: &str, without_hash: &Map<String, Value>) -> String {
    let mut text = Vec::new();
    write_canonical_object(without_hash, &mut text, |_| false);
    hash_of(prev, &text)
}

fn hash_of(prev: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(canonical);
    hex::encode(h.finalize())
}

fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let now = now.replace_millisecond(now.millisecond()).unwrap_or(now);
    now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

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
}

/// Every readable entry of the log, in order.
#[derive(Debug, Clone, Default)]
pub struct AuditRead {
    pub entries: Vec<Map<String, Value>>,
    /// Line numbers that are not JSON objects (`skillhost audit verify` says why).
    pub unreadable: Vec<u64>,
}

/// One session as `skillhost audit list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub session: String,
    pub first_ts: String,
    pub last_ts: String,
    pub entries: usize,
    /// Skills called, in order of first call.
    pub skills: Vec<String>,
    /// Status of the session's last entry.
    pub final_status: String,
    pub denials: usize,
}

fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

impl AuditRead {
    /// Sessions in order of their first entry.
    pub fn sessions(&self) -> Vec<SessionSummary> {
        let mut out: Vec<SessionSummary> = Vec::new();
        for e in &self.entries {
            let session = str_field(e, "session");
            let idx = match out.iter().position(|s| s.session == session) {
                Some(i) => i,
                None => {
                    out.push(SessionSummary {
                        session: session.to_string(),
                        first_ts: str_field(e, "ts").to_string(),
                        last_ts: String::new(),
                        entries: 0,
                        skills: Vec::new(),
                        final_status: String::new(),
                        denials: 0,
                    });
                    out.len() - 1
                }
            };
            let s = &mut out[idx];
            s.entries += 1;
            s.last_ts = str_field(e, "ts").to_string();
            s.final_status = str_field(e, "status").to_string();
            s.denials += e.get("denials").and_then(Value::as_array).map_or(0, Vec::len);
            let skill = str_field(e, "skill");
            if !skill.is_empty() && !s.skills.iter().any(|k| k == skill) {
                s.skills.push(skill.to_string());
            }
        }
        out
    }

    /// The entries of `session`, in order.
    pub fn session(&self, session: &str) -> Vec<Map<String, Value>> {
        self.entries.iter().filter(|e| str_field(e, "session") == session).cloned().collect()
    }
}

/// The append-only, hash-chained log in one file. Clones share one [`GroupCommit`]: the
/// appends of one process (a server's concurrent calls) share their syncs.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
    commits: Arc<GroupCommit>,
}

/// Group commit: an append writes its line under the file lock, releases the lock, then
/// its line is synced together with the others written meanwhile: one `sync_data` covers
/// every line written before it started.
///
/// Two ways to wait for it. By default an append returns once a sync that covers its line
/// has finished: one appender at a time (the leader) syncs for all, the others wait for
/// it, so under load one sync covers many lines and a lone append costs one sync, as
/// before. With [`AuditLog::sync_in_background`] (the MCP server) an append returns as soon
/// as its line is written, and a background thread syncs behind the appends, round after
/// round; the appends of one round share its sync. A killed process loses nothing either
/// way (a written line is in the kernel); a power loss can lose the lines written since the
/// last finished round (rounds are [`SYNC_PAUSE`] apart plus the sync's own time), at most
/// [`MAX_UNSYNCED_LINES`]: past that many, appends wait for the disk.
#[derive(Debug, Default)]
struct GroupCommit {
    state: Mutex<CommitState>,
    /// A sync round finished.
    done: Condvar,
    /// Lines are waiting for the background syncer.
    work: Condvar,
    /// The log file this process appends to, kept open with the end of the chain it
    /// wrote last (see [`Writer`]). Also what serializes this process's appends: every
    /// clone's appends flock the same open file, and a second flock of one open file
    /// would not wait for the first.
    writer: Mutex<Option<Writer>>,
}

/// The open log file and what this process knows of its end: the hash and `seq` of the
/// line it wrote last, and the file's stamp just after that write (under the flock). An
/// append that finds the file with the same stamp (same inode, size, mtime and ctime)
/// chains to them without reading the file's end again; any other writer (another
/// process's append, a seal, an edit) changes the stamp, and the end is read as before.
#[derive(Debug)]
struct Writer {
    file: Arc<File>,
    stamp: FileStamp,
    hash: String,
    seq: u64,
}

/// Pause of the background syncer between two rounds.
const SYNC_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Most lines written but not yet synced in background mode before appends wait.
pub const MAX_UNSYNCED_LINES: u64 = 1024;

#[derive(Debug, Default)]
struct CommitState {
    /// Lines this process wrote (each append's ticket is the count after its write).
    written: u64,
    /// Every line up to this ticket is on disk.
    durable: u64,
    syncing: bool,
    /// Files written since the last sync, one handle per inode (a seal switches files).
    pending: Vec<(u64, u64, Arc<File>)>,
    /// `sync_data` rounds run, for [`AuditLog::syncs`].
    syncs: u64,
    /// Appends do not wait for the disk; the background syncer runs.
    background: bool,
    /// The last sync failed: appends wait for a sync of their own until one succeeds.
    failing: bool,
}

type Guard<'a> = std::sync::MutexGuard<'a, CommitState>;

impl GroupCommit {
    fn lock(&self) -> Guard<'_> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record a written line (its file unlocked, still open; `id` its device and inode);
    /// its ticket.
    fn written(&self, file: &Arc<File>, id: (u64, u64)) -> u64 {
        let mut st = self.lock();
        st.written += 1;
        if !st.pending.iter().any(|(dev, ino, _)| (*dev, *ino) == id) {
            st.pending.push((id.0, id.1, file.clone()));
        }
        st.written
    }

    /// After a write: wait for the disk, or leave it to the background syncer.
    fn after_write(&self, ticket: u64) -> std::io::Result<()> {
        let st = self.lock();
        if st.background && !st.failing && st.written - st.durable <= MAX_UNSYNCED_LINES {
            self.work.notify_one();
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
    fn wait_durable(&self, ticket: u64) -> std::io::Result<()> {
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
    fn run_syncer(commits: std::sync::Weak<GroupCommit>) {
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

impl AuditLog {
    pub fn new(path: impl Into<PathBuf>) -> AuditLog {
        AuditLog { path: path.into(), commits: Arc::default() }
    }

    /// How many `sync_data` rounds this log (and its clones) ran: under concurrent appends,
    /// fewer than the appends (group commit).
    pub fn syncs(&self) -> u64 {
        self.commits.lock().syncs
    }

    /// From now on (for this log and its clones), an append returns as soon as its line is
    /// written, and a background thread syncs behind the appends (see [`GroupCommit`]):
    /// for a server, where a sync per answer would cost more than the call. A killed
    /// process still loses no written line; a power loss can lose the last sync round's.
    /// Call [`AuditLog::flush`] before a clean exit.
    pub fn sync_in_background(&self) -> Result<()> {
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
        let ticket = self.commits.lock().written;
        self.commits.wait_durable(ticket).with_context(|| format!("cannot sync {}", self.path.display()))
    }

    /// The log of a skillhost home: `<home>/audit/audit.jsonl`.
    pub fn in_home(home: &Path) -> AuditLog {
        AuditLog::new(home.join("audit").join("audit.jsonl"))
    }

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
    fn relock(&self, kept: Writer) -> Option<(Arc<File>, Writer)> {
        kept.file.lock().ok()?;
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (kept.stamp.dev(), kept.stamp.ino()) => Some((kept.file.clone(), kept)),
            _ => {
                let _ = kept.file.unlock();
                None
            }
        }
    }

    /// Append `entry` (which must have a `kind` of `call` or `step`, and a `session`) as
    /// the next line of the chain.
    pub fn append(&self, entry: Map<String, Value>) -> Result<Appended> {
        check_entry(&entry)?;
        let mut writer = self.commits.writer.lock().unwrap_or_else(|p| p.into_inner());
        // Any failure below forgets the kept file: the next append opens the log afresh.
        let kept = writer.take();
        let (file, known) = match kept.and_then(|w| self.relock(w)) {
            Some((file, w)) => (file, Some(w)),
            None => (Arc::new(self.open_locked()?), None),
        };
        self.append_locked(writer, file, known, entry)
    }

    /// [`AuditLog::append`] only if it need not wait: in background-sync mode, with the
    /// log file kept open by an earlier append, no other appender of this process or
    /// another holding it, and the disk not behind. Then the append is a few system calls
    /// (a flock, two `fstat`s, a `stat`, a `write`), cheap enough for an async worker;
    /// otherwise the entry comes back untouched, for [`AuditLog::append`] off the executor.
    pub fn try_append_now(
        &self,
        entry: Map<String, Value>,
    ) -> std::result::Result<Result<Appended>, Map<String, Value>> {
        if let Err(e) = check_entry(&entry) {
            return Ok(Err(e));
        }
        {
            let st = self.commits.lock();
            if !st.background || st.failing || st.written - st.durable >= MAX_UNSYNCED_LINES {
                return Err(entry);
            }
        }
        let Ok(mut writer) = self.commits.writer.try_lock() else { return Err(entry) };
        let Some(kept) = writer.take() else { return Err(entry) };
        if kept.file.try_lock().is_err() {
            *writer = Some(kept);
            return Err(entry);
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == (kept.stamp.dev(), kept.stamp.ino()) => {
                let file = kept.file.clone();
                Ok(self.append_locked(writer, file, Some(kept), entry))
            }
            _ => {
                // Sealed aside or removed: the next blocking append opens the new file.
                let _ = kept.file.unlock();
                Err(entry)
            }
        }
    }

    /// The rest of an append once `file` is open and flocked (`known`: what this process
    /// knew of its end); `writer` is held until the line is written.
    fn append_locked(
        &self,
        mut writer: std::sync::MutexGuard<'_, Option<Writer>>,
        file: Arc<File>,
        known: Option<Writer>,
        mut entry: Map<String, Value>,
    ) -> Result<Appended> {
        // Under the flock from here; an error still unlocks (the file may stay open, kept
        // for the syncer, and an open file keeps its flock).
        let locked = || -> Result<(FileStamp, Tail, String, Option<FileStamp>)> {
            let before = FileStamp::from_metadata(
                &file.metadata().with_context(|| format!("cannot read the end of {}", self.path.display()))?,
            );
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
                entry.insert("torn_tail_bytes".into(), tail.torn_bytes.into());
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
        }
        drop(writer);
        let ticket = self.commits.written(&file, (before.dev(), before.ino()));
        self.commits.after_write(ticket).with_context(|| format!("cannot sync {}", self.path.display()))?;
        Ok(Appended { seq, hash, torn_tail_bytes: tail.torn_bytes })
    }

    /// Can the next entry be chained to the log? Reads only its end (as an append does).
    /// The error names the log, the first damaged line and the way out, for callers that
    /// must not act unaudited.
    pub fn check_appendable(&self) -> Result<()> {
        // The file as this process's last append left it: its end was a line just written.
        if let Some(w) = self.commits.writer.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
            && FileStamp::of(&self.path).ok().flatten() == Some(w.stamp)
        {
            return Ok(());
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
    pub fn verify(&self) -> Result<Verified, VerifyError> {
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

    fn check_sealed(&self, seal: &Map<String, Value>) -> SealCheck {
        let rel = str_field(seal, "sealed_file").to_string();
        let recorded = str_field(seal, "sealed_sha256").to_string();
        let file = self.path.parent().unwrap_or(Path::new(".")).join(&rel);
        let status = match std::fs::read(&file) {
            Err(_) => SealStatus::Missing,
            Ok(bytes) if sha256_hex(&bytes) == recorded => SealStatus::Intact,
            Ok(_) => SealStatus::Changed,
        };
        SealCheck {
            file,
            sha256: recorded,
            verified_entries: seal.get("sealed_verified_entries").and_then(Value::as_u64).unwrap_or(0),
            status,
        }
    }

    /// Set a damaged log aside and start a new, verified segment. The damaged file moves
    /// unchanged to `sealed/<time>.jsonl` with a note beside it (`<time>.json`: its sha256,
    /// size, how many lines verified and the hash of the last one, what is wrong). The new
    /// log's first line is a `seal` entry recording the same, so the history stays
    /// provable: `verify` checks the sealed file against that hash. Refuses a log that
    /// verifies (nothing is damaged; a torn last line is repaired by the next append).
    pub fn seal(&self) -> Result<Sealed> {
        if !self.path.exists() {
            bail!("there is no audit log at {} to seal", self.path.display());
        }
        let file = self.open_locked()?;
        let bytes = {
            let mut b = Vec::new();
            (&file).read_to_end(&mut b).with_context(|| format!("cannot read {}", self.path.display()))?;
            b
        };
        let walk =
            walk(BufReader::new(bytes.as_slice())).with_context(|| format!("cannot read {}", self.path.display()))?;
        let damage = match (&walk.broken, last_entry(&file)) {
            (Some(b), _) => b.message.clone(),
            (None, Err(e)) => format!("its end cannot be chained to: {e:#}"),
            (None, Ok(_)) => bail!(
                "the audit log {} verifies ({} entries); there is nothing to seal",
                self.path.display(),
                walk.entries
            ),
        };
        let id = format!("{}-{}", compact_now(), crate::fsutil::random_hex(3));
        let dir = self.sealed_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let sealed_path = dir.join(format!("{id}.jsonl"));
        let note_path = dir.join(format!("{id}.json"));
        let sealed = Sealed {
            sealed_path: sealed_path.clone(),
            note_path: note_path.clone(),
            sha256: sha256_hex(&bytes),
            bytes: bytes.len() as u64,
            lines: bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() as u64,
            verified_entries: walk.entries,
            verified_head: walk.head.clone(),
            damaged_line: walk.broken.as_ref().map(|b| b.line),
            damage,
            head: String::new(),
        };
        let rel = format!("sealed/{id}.jsonl");
        let mut entry = new_entry(EntryKind::Seal, &format!("seal-{id}"));
        entry.insert("status".into(), "sealed".into());
        entry.insert("sealed_file".into(), rel.into());
        entry.insert("sealed_sha256".into(), sealed.sha256.clone().into());
        entry.insert("sealed_bytes".into(), sealed.bytes.into());
        entry.insert("sealed_lines".into(), sealed.lines.into());
        entry.insert("sealed_verified_entries".into(), sealed.verified_entries.into());
        entry.insert("sealed_verified_head".into(), sealed.verified_head.clone().into());
        entry.insert("sealed_damaged_line".into(), sealed.damaged_line.into());
        entry.insert("error".into(), sealed.damage.clone().into());
        let (line, head) = chained_line(entry, 1, GENESIS);
        let sealed = Sealed { head, ..sealed };
        crate::fsutil::write_atomic(
            &note_path,
            &serde_json::to_vec_pretty(&sealed).context("cannot serialize the seal note")?,
        )?;
        // The damaged file is linked aside under the lock, then the new segment replaces the
        // path in one rename, so the path always names a log: an appender never finds it
        // missing (and creates a file the seal would replace, losing its line), and one
        // waiting on the old file's lock sees another inode and reopens the new segment.
        std::fs::hard_link(&self.path, &sealed_path)
            .with_context(|| format!("cannot link {} to {}", self.path.display(), sealed_path.display()))?;
        crate::fsutil::write_atomic(&self.path, line.as_bytes())?;
        drop(file);
        Ok(sealed)
    }

    /// Every entry that parses, in order, and the numbers of lines that do not. Does not
    /// verify the chain (see [`AuditLog::verify`]).
    pub fn read(&self) -> Result<AuditRead> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(AuditRead::default()),
            Err(e) => return Err(anyhow!("cannot read the audit log {}: {e}", self.path.display())),
        };
        let mut out = AuditRead::default();
        parse_lines(&text, &mut out.entries, Some(&mut out.unreadable));
        Ok(out)
    }

    /// Like [`AuditLog::read`], with the readable entries of sealed segments first (oldest
    /// first): the whole history, across seals.
    pub fn read_history(&self) -> Result<AuditRead> {
        let mut sealed: Vec<PathBuf> = std::fs::read_dir(self.sealed_dir())
            .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "jsonl")).collect())
            .unwrap_or_default();
        sealed.sort();
        let mut entries = Vec::new();
        for path in sealed {
            let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            parse_lines(&text, &mut entries, None);
        }
        let current = self.read()?;
        entries.extend(current.entries);
        Ok(AuditRead { entries, unreadable: current.unreadable })
    }

    /// Per session: first and last time, entries, skills called, final status (sealed
    /// segments included).
    pub fn list(&self) -> Result<Vec<SessionSummary>> {
        Ok(self.read_history()?.sessions())
    }

    /// The entries of `session`, in order (sealed segments included); an error when it has none.
    pub fn show(&self, session: &str) -> Result<Vec<Map<String, Value>>> {
        let entries = self.read_history()?.session(session);
        if entries.is_empty() {
            bail!("no audit entries for session `{session}`; `skillhost audit list` shows the sessions");
        }
        Ok(entries)
    }
}

/// A [`AuditLog::seal`] that happened.
#[derive(Debug, Clone, Serialize)]
pub struct Sealed {
    /// Where the damaged log is now.
    pub sealed_path: PathBuf,
    /// The note beside it.
    pub note_path: PathBuf,
    /// sha256 of the sealed file's bytes, also recorded in the new segment's first line.
    pub sha256: String,
    pub bytes: u64,
    pub lines: u64,
    /// Lines of the sealed file that verified before the damage.
    pub verified_entries: u64,
    /// Hash of the last of them (GENESIS when none).
    pub verified_head: String,
    /// First damaged line, when a line is (not when only the end is unusable).
    pub damaged_line: Option<u64>,
    pub damage: String,
    /// Hash of the new segment's first line.
    pub head: String,
}

/// What [`AuditLog::verify`] found about the segment a log's first line seals.
#[derive(Debug, Clone, Serialize)]
pub struct SealCheck {
    pub file: PathBuf,
    pub sha256: String,
    pub verified_entries: u64,
    pub status: SealStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SealStatus {
    /// The sealed file still has the bytes the seal recorded.
    Intact,
    /// It was changed after it was sealed.
    Changed,
    /// It is gone.
    Missing,
}

/// `20261201T094533Z`, for file names.
fn compact_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    now.format(&fmt).unwrap_or_else(|_| "unknown-time".into())
}

/// An entry an append takes: a `kind` of `call` or `step`, a `session`, no field the log sets.
fn check_entry(entry: &Map<String, Value>) -> Result<()> {
    match entry.get("kind").cloned().map(serde_json::from_value::<EntryKind>) {
        Some(Ok(EntryKind::Call | EntryKind::Step | EntryKind::Install)) => {}
        Some(Ok(EntryKind::Seal)) => bail!("`seal` entries are written by `skillhost audit seal` only"),
        _ => bail!("an audit entry needs `kind`: \"call\", \"step\" or \"install\""),
    }
    if !matches!(entry.get("session"), Some(Value::String(s)) if !s.is_empty()) {
        bail!("an audit entry needs a non-empty `session`");
    }
    if let Some(k) = RESERVED.iter().find(|k| entry.contains_key(**k)) {
        bail!("`{k}` is set by the audit log itself; leave it out of the entry");
    }
    Ok(())
}

/// `entry` as line `seq` after `prev`: the canonical JSON with `seq`, `ts`, `prev` and
/// `hash`, newline-terminated, and its hash.
fn chained_line(mut entry: Map<String, Value>, seq: u64, prev: &str) -> (String, String) {
    entry.insert("seq".into(), seq.into());
    entry.insert("ts".into(), now_rfc3339().into());
    entry.insert("prev".into(), prev.into());
    // One canonical text serves both: hashed without `hash`, then `hash` spliced in where
    // its key sorts (the same bytes as writing the whole entry with it).
    let mut text = Vec::with_capacity(1024);
    let at = write_canonical_object(&entry, &mut text, |k| k > "hash");
    let hash = hash_of(prev, &text);
    let field = format!("\"hash\":\"{hash}\"");
    let spliced = if text[at] == b'}' {
        // `hash` sorts last: after a comma unless the object was empty.
        if at > 1 { format!(",{field}") } else { field }
    } else {
        format!("{field},")
    };
    text.splice(at..at, spliced.into_bytes());
    text.push(b'\n');
    (String::from_utf8(text).unwrap_or_default(), hash)
}

fn parse_lines(text: &[u8], entries: &mut Vec<Map<String, Value>>, mut unreadable: Option<&mut Vec<u64>>) {
    for (i, line) in text.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(m)) => entries.push(m),
            _ => {
                if let Some(u) = unreadable.as_deref_mut() {
                    u.push(i as u64 + 1)
                }
            }
        }
    }
}

/// How far a log verifies.
struct Walk {
    entries: u64,
    head: String,
    torn_tail: Option<TornTail>,
    broken: Option<ChainBreak>,
    /// The first line, when it is a seal entry.
    first_seal: Option<Map<String, Value>>,
}

fn walk(mut reader: impl BufRead) -> std::io::Result<Walk> {
    let mut buf = Vec::new();
    let mut w = Walk { entries: 0, head: GENESIS.to_string(), torn_tail: None, broken: None, first_seal: None };
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(w);
        }
        line_no += 1;
        let Some(content) = buf.strip_suffix(b"\n") else {
            w.torn_tail = Some(TornTail { line: line_no, bytes: n as u64 });
            return Ok(w);
        };
        match check_line(line_no, content, &w.head) {
            Ok(hash) => {
                if line_no == 1
                    && let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(content)
                    && m.get("kind").and_then(Value::as_str) == Some("seal")
                {
                    w.first_seal = Some(m);
                }
                w.head = hash;
                w.entries = line_no;
            }
            Err(b) => {
                w.broken = Some(b);
                return Ok(w);
            }
        }
    }
}

/// Check one complete line against the previous line's hash; its own hash on success.
fn check_line(n: u64, content: &[u8], prev: &str) -> Result<String, ChainBreak> {
    let broken = |problem, message: String| ChainBreak { line: n, problem, message: format!("line {n} {message}") };
    let mut entry = match serde_json::from_slice::<Value>(content) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(broken(Problem::Unparseable, "is not a JSON object".into())),
        Err(e) => return Err(broken(Problem::Unparseable, format!("is not valid JSON ({e})"))),
    };
    let Some(Value::String(recorded)) = entry.remove("hash") else {
        return Err(broken(Problem::Unparseable, "has no `hash` field".into()));
    };
    let Some(line_prev) = entry.get("prev").and_then(Value::as_str).map(str::to_string) else {
        return Err(broken(Problem::Unparseable, "has no `prev` field".into()));
    };
    let actual = line_hash(&line_prev, &entry);
    if actual != recorded {
        return Err(broken(
            Problem::HashMismatch,
            format!(
                "was modified after it was written: its content hashes to {}…, but it records {}…",
                short(&actual),
                short(&recorded)
            ),
        ));
    }
    if line_prev != prev {
        let seq = entry.get("seq").map_or("none".to_string(), Value::to_string);
        let message = if n == 1 {
            format!(
                "(seq {seq}) should start the chain (prev of 64 zeros) but records prev {}…: lines before it were deleted",
                short(&line_prev)
            )
        } else {
            format!(
                "(seq {seq}) does not follow line {}: it records prev {}…, but line {} hashes to {}…; a line was deleted, inserted or reordered here",
                n - 1,
                short(&line_prev),
                n - 1,
                short(prev)
            )
        };
        return Err(broken(Problem::PrevMismatch, message));
    }
    match entry.get("seq").and_then(Value::as_u64) {
        Some(s) if s == n => Ok(recorded),
        other => Err(broken(
            Problem::SeqGap,
            format!("has seq {}, expected {n}: lines were renumbered", other.map_or("none".into(), |s| s.to_string())),
        )),
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The end of the log as an append needs it.
struct Tail {
    /// `hash` and `seq` of the last complete line (GENESIS and 0 when there is none).
    hash: String,
    seq: u64,
    /// Length of the file without a torn last line.
    complete_len: u64,
    torn_bytes: u64,
}

/// Read the last complete line from the end of the file, without reading the rest.
fn last_entry(file: &File) -> Result<Tail> {
    let len = file.metadata()?.len();
    let mut tail = Tail { hash: GENESIS.to_string(), seq: 0, complete_len: len, torn_bytes: 0 };
    if len == 0 {
        return Ok(tail);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] != b'\n' {
        tail.complete_len = last_newline_before(file, len)?.map_or(0, |p| p + 1);
        tail.torn_bytes = len - tail.complete_len;
    }
    if tail.complete_len == 0 {
        return Ok(tail);
    }
    let end = tail.complete_len - 1; // the newline ending the last complete line
    let start = last_newline_before(file, end)?.map_or(0, |p| p + 1);
    if end - start > MAX_LINE_BYTES {
        bail!(
            "its last line is {} bytes, more than any entry; nothing more can be chained to it. Run `skillhost audit verify` to find the damage",
            end - start
        );
    }
    let mut line = vec![0u8; (end - start) as usize];
    file.read_exact_at(&mut line, start)?;
    let entry: Map<String, Value> = serde_json::from_slice(&line).map_err(|e| {
        anyhow!(
            "its last line is not a valid audit entry ({e}); nothing more can be chained to it. Run `skillhost audit verify` to find the damage"
        )
    })?;
    let (Some(hash), Some(seq)) = (entry.get("hash").and_then(Value::as_str), entry.get("seq").and_then(Value::as_u64))
    else {
        bail!("its last line has no `hash` or `seq`; run `skillhost audit verify` to find the damage");
    };
    tail.hash = hash.to_string();
    tail.seq = seq;
    Ok(tail)
}

/// Offset of the last `\n` before `end`, reading backwards in chunks.
fn last_newline_before(file: &File, end: u64) -> std::io::Result<Option<u64>> {
    const CHUNK: u64 = 8192;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hi = end;
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK);
        let chunk = &mut buf[..(hi - lo) as usize];
        file.read_exact_at(chunk, lo)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(Some(lo + i as u64));
        }
        hi = lo;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kept_log_file_sees_other_writers_edits_and_seals() {
        let dir = tempfile::tempdir().unwrap();
        // Two logs of one path share nothing in memory: like two processes.
        let (a, b) = (AuditLog::in_home(dir.path()), AuditLog::in_home(dir.path()));
        a.sync_in_background().unwrap();
        let e = || new_entry(EntryKind::Call, "s");
        let now_or_later = |log: &AuditLog| match log.try_append_now(e()) {
            Ok(r) => r.unwrap(),
            Err(entry) => log.append(entry).unwrap(),
        };
        for i in 0..4 {
            assert_eq!(now_or_later(&a).seq, 2 * i + 1);
            assert_eq!(b.append(e()).unwrap().seq, 2 * i + 2);
        }
        // Kept open and unchanged since: written without waiting.
        assert_eq!(a.try_append_now(e()).ok().map(|r| r.unwrap().seq), Some(9));
        assert!(a.check_appendable().is_ok());
        assert_eq!(a.verify().unwrap().entries, 9);
        // An edit in place (same size) breaks the chain; `a` must not trust what it kept.
        let text = std::fs::read_to_string(a.path()).unwrap();
        std::fs::write(a.path(), text.replacen("\"session\":\"s\"", "\"session\":\"t\"", 1)).unwrap();
        assert!(a.check_appendable().is_ok(), "the end still chains");
        assert_eq!(now_or_later(&a).seq, 10);
        b.seal().unwrap();
        // The path names the new segment now: the kept file is not written again.
        assert!(a.try_append_now(e()).is_err());
        let after = a.append(e()).unwrap();
        assert_eq!(after.seq, 2, "chained to the seal line of the new segment");
        assert_eq!(now_or_later(&a).seq, 3);
        assert_eq!(b.append(e()).unwrap().seq, 4);
        a.flush().unwrap();
        assert_eq!(a.verify().unwrap().entries, 4);
    }

    #[test]
    fn a_chained_line_is_the_canonical_entry_with_its_hash() {
        let entries = [
            json!({ "kind": "call", "session": "s", "skill": "probe", "params": { "b": [1, "x"], "a": null } }),
            json!({ "a": 1 }),
            json!({ "zz": "last", "ha": "\u{e9}\"q" }),
        ];
        for e in entries {
            let Value::Object(m) = e else { unreachable!() };
            let (line, hash) = chained_line(m, 7, GENESIS);
            let Value::Object(mut back) = serde_json::from_str::<Value>(&line).unwrap() else { panic!("{line}") };
            assert_eq!(format!("{}\n", canonical_json(&Value::Object(back.clone()))), line);
            back.remove("hash");
            assert_eq!(line_hash(GENESIS, &back), hash);
        }
    }

    #[test]
    fn canonical_form_sorts_keys_at_every_level() {
        let v = json!({"b": 1, "a": {"d": [ {"z": 1, "y": 2} ], "c": "x\"y"}});
        assert_eq!(canonical_json(&v), r#"{"a":{"c":"x\"y","d":[{"y":2,"z":1}]},"b":1}"#);
    }

    #[test]
    fn entries_must_say_what_and_whose() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::in_home(dir.path());
        assert!(log.append(Map::new()).unwrap_err().to_string().contains("kind"));
        assert!(log.append(new_entry(EntryKind::Call, "")).unwrap_err().to_string().contains("session"));
        let mut e = new_entry(EntryKind::Step, "s");
        e.insert("hash".into(), "x".into());
        assert!(log.append(e).unwrap_err().to_string().contains("`hash` is set by the audit log"));
        assert_eq!(log.verify().unwrap().entries, 0);
    }

    #[test]
    fn appends_chain_and_step_entries_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::in_home(dir.path());
        let first = log.append(new_entry(EntryKind::Call, "s1")).unwrap();
        let step = StepEntry {
            skill: Some("read-log-file".into()),
            ..StepEntry::new("s1", 2, StepAction::CallSkill, StepStatus::Success)
        };
        let second = log.append(step.into_entry()).unwrap();
        assert_eq!((first.seq, second.seq), (1, 2));
        let v = log.verify().unwrap();
        assert_eq!((v.entries, v.head.as_str()), (2, second.hash.as_str()));
        let shown = log.show("s1").unwrap();
        assert_eq!(shown[0]["prev"], GENESIS);
        assert_eq!(shown[1]["prev"], first.hash.as_str());
        assert_eq!(shown[1]["kind"], "step");
        assert_eq!(shown[1]["action"], "call_skill");
        let sessions = log.list().unwrap();
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].skills, vec!["read-log-file"]);
        assert_eq!(sessions[0].final_status, "success");
        assert!(log.show("nope").unwrap_err().to_string().contains("no audit entries for session `nope`"));
    }

    #[test]
    fn concurrent_appends_share_syncs_and_keep_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::in_home(dir.path());
        let (threads, each) = (8, 40);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let log = log.clone();
                scope.spawn(move || {
                    for i in 0..each {
                        let mut e = new_entry(EntryKind::Call, &format!("s{t}"));
                        e.insert("i".into(), i.into());
                        log.append(e).unwrap();
                    }
                });
            }
        });
        let total = (threads * each) as u64;
        assert_eq!(log.verify().unwrap().entries, total);
        let syncs = log.syncs();
        assert!((1..total).contains(&syncs), "{syncs} syncs for {total} concurrent appends: none was shared");
        // Every thread's lines are all there, in its own order.
        for t in 0..threads {
            let mine: Vec<u64> = log.show(&format!("s{t}")).unwrap().iter().map(|e| e["i"].as_u64().unwrap()).collect();
            assert_eq!(mine, (0..each as u64).collect::<Vec<_>>());
        }
        // A lone append still syncs before it returns.
        let before = log.syncs();
        log.append(new_entry(EntryKind::Call, "alone")).unwrap();
        assert_eq!(log.syncs(), before + 1);
    }

    #[test]
    fn background_syncs_follow_the_appends() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::in_home(dir.path());
        log.sync_in_background().unwrap();
        log.sync_in_background().unwrap();
        for i in 0..200 {
            let mut e = new_entry(EntryKind::Call, "bg");
            e.insert("i".into(), i.into());
            log.append(e).unwrap();
        }
        // Every line is readable at once (written before the append returned).
        assert_eq!(log.verify().unwrap().entries, 200);
        log.flush().unwrap();
        let st = log.commits.lock();
        assert_eq!(st.durable, 200, "flush leaves nothing unsynced");
        assert!(st.syncs >= 1, "the background syncer ran");
    }

    #[test]
    fn the_tail_is_found_across_chunk_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::in_home(dir.path());
        for i in 0..3 {
            let mut e = new_entry(EntryKind::Call, "s");
            e.insert("params".into(), json!({"blob": "x".repeat(9000 * i + 10)}));
            log.append(e).unwrap();
        }
        assert_eq!(log.verify().unwrap().entries, 3);
    }
}
