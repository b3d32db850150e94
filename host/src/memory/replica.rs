//! A host's memory as a replica of a shared, ordered log of writes (many hosts, one
//! PostgreSQL; see `crate::store`).
//!
//! # Why a log of operations, replayed into the same local store
//!
//! Search ranks with tantivy's BM25, our analyzers, the embedding model and the fusion in
//! `hybrid.rs`, and a write's outcome (merged into the same fact, the newest of an update,
//! a priority held) is decided by `merge.rs` against what the store holds. Reimplementing
//! both over SQL would give a second ranking and a second set of write rules, and the two
//! would drift. So the system of record is the *ordered log of write operations* (the
//! [`Request`]s of `ops.rs`, each with the time it was written at), and every host keeps
//! the same redb + tantivy store as a single machine does, as a cache it can rebuild by
//! replaying the log. The same ops in the same order at the same times give the same
//! records, ids and vectors on every host: search results are identical to the local
//! backend's by construction.
//!
//! # A write
//!
//! 1. Take the log's head for writing ([`MemoryLog::lock_head`]: PostgreSQL holds a row
//!    lock on the head in the write's transaction, so hosts write one at a time).
//! 2. Apply what other hosts wrote since this replica last looked, in order.
//! 3. Run the op on the local store at `max(now, the head's time)`: its outcome is decided
//!    against exactly the state every other host will have when it replays it.
//! 4. If it committed anything, append it to the log and commit; then answer. An op that
//!    changed nothing (refused, invalid) is not logged.
//!
//! # What says where a replica stands
//!
//! Every commit an op makes here also writes `replica_applying = seq` in the store's meta
//! table (in the same redb transaction; see [`replaying`]), and once the op is whole,
//! `replica_seq = seq`. A replica whose `replica_applying` is ahead of its `replica_seq`
//! was stopped inside an op (killed, or the log refused the append): on open it is wiped
//! and rebuilt from the log rather than trusted. A replay that does not commit where the
//! writer's did, or a log written with another embedding model, marks the replica
//! diverged: it refuses memory calls, saying so, and is rebuilt when the host restarts.
//!
//! # Checkpoints: a log that does not grow for ever
//!
//! `skillhost store compact` has one host write a *checkpoint* ([`Replica::checkpoint`]):
//! holding the head (no write in between), it catches up and stores its replica's whole
//! state (a [`MemorySnapshot`](super::MemorySnapshot), exactly what `store import` moves)
//! as the state after the head's op. A new replica starts from the newest checkpoint and
//! replays only the ops after it. The ops a checkpoint holds are removed once the newest
//! checkpoint at least the retention (default 10 minutes) old holds them: a host that
//! follows the log is never that far behind, so it never finds an op missing. One that was
//! away longer (stopped, cut off) finds a gap where its next op should be: it refuses memory
//! calls, saying so, and a restart rebuilds it from the checkpoint, as a diverged replica
//! is rebuilt. Checkpoints leave every id, time and record as they were, so search ranks
//! the same on a replica started from one as on one that replayed everything.
//!
//! # Freshness
//!
//! A follower thread per replica looks at the log's head every [`FOLLOW_EVERY`] and
//! applies what is new, so a write answered on one host is searchable on every other
//! within that (the issue asks for 1 s). A write first catches up, so it never decides
//! against stale state.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;

use serde::{Deserialize, Serialize};

use super::log::{APPLIED, APPLYING, Checkpoint, LoggedOp, MemoryLog, Pruned, Replaying};
use super::ops::{Op, Request};
use super::snapshot::MemorySnapshot;
use super::store::Store;

/// How often a replica's follower looks for writes of other hosts.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Ops read from the log per round trip while catching up.
const CATCH_UP_BATCH: usize = 500;

/// The file that marks a replica diverged: the next open rebuilds it.
const DIVERGED_MARK: &str = "replica.diverged";

/// What `skillhost store compact` did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointReport {
    /// The checkpoint holds the state after this op (0: the log is empty, nothing written).
    pub seq: u64,
    /// Records (live and not) and archive entries it holds.
    pub records: usize,
    pub archive: usize,
    #[serde(flatten)]
    pub pruned: Pruned,
}

/// A store's link to the log it replicates.
pub(super) struct Replica {
    log: Arc<dyn MemoryLog>,
    /// The last op applied here; held while applying or writing, so ops apply in order.
    applied: Mutex<u64>,
    /// Why this replica stopped serving, once it diverged.
    diverged: Mutex<Option<String>>,
    stop: AtomicBool,
}

impl Replica {
    /// Wipe `dir`'s store when it was left inside an op, marked diverged, or is behind what
    /// the log still holds (its next op was compacted into a checkpoint), before it opens.
    pub(super) fn check_before_open(dir: &Path, log: &dyn MemoryLog) -> Result<()> {
        let path = dir.join("store.redb");
        let diverged = dir.join(DIVERGED_MARK).exists();
        let (applying, applied) = if path.exists() { read_marks(&path)? } else { (0, 0) };
        let interrupted = !diverged && applying > applied;
        let passed = !diverged && !interrupted && applied > 0 && !replayable_from(log, applied)?;
        if diverged || interrupted || passed {
            tracing::warn!(
                dir = %dir.display(),
                because = if diverged {
                    "it diverged from the log"
                } else if interrupted {
                    "it was stopped inside a write"
                } else {
                    "the ops after it were compacted into a checkpoint while it was away"
                },
                "rebuilding this host's memory replica from the shared log"
            );
            for name in ["store.redb", "index", "daily", "archive", DIVERGED_MARK] {
                let p = dir.join(name);
                let removed = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                match removed {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("cannot remove {} to rebuild it", p.display())),
                }
            }
        }
        Ok(())
    }

    /// Attach `log` to the freshly opened `store`: catch up, then follow in the background.
    pub(super) fn attach(store: &Arc<Store>, log: Arc<dyn MemoryLog>) -> Result<Arc<Replica>> {
        let applied = store.replica_marks()?.1;
        let replica = Arc::new(Replica {
            log,
            applied: Mutex::new(applied),
            diverged: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        replica.start_from_checkpoint(store)?;
        replica.catch_up(store)?;
        let (store_ref, replica_ref) = (Arc::downgrade(store), Arc::downgrade(&replica));
        std::thread::Builder::new()
            .name("memory-follower".into())
            .spawn(move || follow(store_ref, replica_ref))
            .context("cannot start the memory replica's follower thread")?;
        Ok(replica)
    }

    fn check(&self) -> Result<()> {
        match &*self.diverged.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Some(why) => Err(anyhow!(
                "this host's memory replica diverged from the shared log ({why}); restart the host to rebuild it from {}",
                self.log.describe()
            )),
            None => Ok(()),
        }
    }

    fn diverge(&self, store: &Store, why: String) -> anyhow::Error {
        tracing::error!(why, "memory replica diverged from the shared log");
        let _ = std::fs::write(store.dir.join(DIVERGED_MARK), &why);
        *self.diverged.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
        self.check().unwrap_err()
    }

    /// Apply what the log holds beyond this replica.
    pub(super) fn catch_up(&self, store: &Store) -> Result<()> {
        self.check()?;
        let mut applied = self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            // The head first: every op up to it was in the log when it was read, so if none
            // comes back after it, they were removed since (never: appended since).
            let head = self.log.head()?;
            let ops = self.log.read_after(*applied, CATCH_UP_BATCH)?;
            if ops.is_empty() {
                if head > *applied {
                    // Every op after this replica is gone: compacted while it was away.
                    return Err(self.diverge(
                        store,
                        format!(
                            "ops {} to {head} were compacted into a checkpoint while this host was behind (at op {})",
                            *applied + 1,
                            *applied
                        ),
                    ));
                }
                return Ok(());
            }
            for op in &ops {
                if self.stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                self.apply(store, &mut applied, op)?;
            }
        }
    }

    /// A new (empty) replica starts from the log's newest checkpoint, if there is one.
    fn start_from_checkpoint(&self, store: &Store) -> Result<()> {
        let mut applied = self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *applied != 0 {
            return Ok(());
        }
        let Some(checkpoint) = self.log.checkpoint()? else { return Ok(()) };
        self.check_model(store, &format!("the checkpoint at op {}", checkpoint.seq), checkpoint.model.as_deref())?;
        let snapshot: MemorySnapshot = serde_json::from_value(checkpoint.snapshot).map_err(|e| {
            self.diverge(store, format!("the checkpoint at op {} is not a memory snapshot: {e}", checkpoint.seq))
        })?;
        {
            let _replaying = Replaying::start(checkpoint.seq, checkpoint.at_ms);
            store.load_snapshot(snapshot).map_err(|e| {
                self.diverge(store, format!("the checkpoint at op {} cannot be loaded: {e:#}", checkpoint.seq))
            })?;
        }
        store.set_replica_applied(checkpoint.seq, true)?;
        *applied = checkpoint.seq;
        tracing::info!(seq = checkpoint.seq, "memory replica started from the log's checkpoint");
        Ok(())
    }

    /// Refuse what another embedding model wrote (`what`: the op or checkpoint).
    fn check_model(&self, store: &Store, what: &str, model: Option<&str>) -> Result<()> {
        let ours = store.vectors.model().map(|m| m.identity().to_string());
        if model != ours.as_deref() {
            return Err(self.diverge(
                store,
                format!(
                    "{what} was written with the embedding model {}, this host runs {}: every host must run the same model",
                    model.unwrap_or("none"),
                    ours.as_deref().unwrap_or("none")
                ),
            ));
        }
        Ok(())
    }

    /// Replay one op another host wrote (or this one, before a restart).
    fn apply(&self, store: &Store, applied: &mut u64, logged: &LoggedOp) -> Result<()> {
        if logged.seq > *applied + 1 {
            return Err(self.diverge(
                store,
                format!(
                    "ops {} to {} were compacted into a checkpoint while this host was behind (at op {})",
                    *applied + 1,
                    logged.seq - 1,
                    *applied
                ),
            ));
        }
        if logged.seq != *applied + 1 {
            return Err(self.diverge(store, format!("op {} follows op {} in the log", logged.seq, *applied)));
        }
        self.check_model(store, &format!("op {}", logged.seq), logged.model.as_deref())?;
        let request: Request = serde_json::from_value(logged.op.clone())
            .map_err(|e| self.diverge(store, format!("op {} is not an operation this host knows: {e}", logged.seq)))?;
        {
            let _replaying = Replaying::start(logged.seq, logged.at_ms);
            // The writer's outcome, error or not, is the outcome here too.
            if let Err(e) = request.serve(store) {
                tracing::debug!(seq = logged.seq, "replayed op ended in an error, as where it was written: {e:#}");
            }
        }
        if store.replica_marks()?.0 != logged.seq {
            return Err(
                self.diverge(store, format!("op {} changed nothing here, unlike where it was written", logged.seq))
            );
        }
        store.set_replica_applied(logged.seq, false)?;
        *applied = logged.seq;
        Ok(())
    }

    /// Run the write `request` through the log (see the module doc).
    pub(super) fn write(&self, store: &Store, request: Request) -> Result<Value> {
        self.check()?;
        let mut applied = self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.stop.load(Ordering::SeqCst) {
            bail!("this host's memory replica is closed (the host is shutting down); the write was not made");
        }
        let mut head = self.log.lock_head()?;
        if matches!(request, Request::LoadSnapshot(_)) && head.seq() != 0 {
            bail!(
                "{} already holds {} memory write(s): a memory snapshot is loaded only as the first op of an empty log (import into a new, freshly migrated database)",
                self.log.describe(),
                head.seq()
            );
        }
        for op in head.read_after(*applied)? {
            self.apply(store, &mut applied, &op)?;
        }
        if head.seq() != *applied {
            return Err(self.diverge(
                store,
                format!(
                    "ops {} to {} were compacted into a checkpoint while this host was behind (at op {})",
                    *applied + 1,
                    head.seq(),
                    *applied
                ),
            ));
        }
        let seq = head.seq() + 1;
        let at_ms = store.now_ms().max(head.at_ms());
        let op = serde_json::to_value(&request).context("cannot encode the memory write for the log")?;
        let answer = {
            let _replaying = Replaying::start(seq, at_ms);
            request.serve(store)
        };
        if store.replica_marks()?.0 != seq {
            // Nothing committed (refused or invalid): nothing to log.
            return answer;
        }
        let logged = LoggedOp { seq, at_ms, model: store.vectors.model().map(|m| m.identity().to_string()), op };
        if let Err(e) = head.append(&logged) {
            let diverged =
                self.diverge(store, format!("op {seq} ran here but could not be appended to the log: {e:#}"));
            bail!(
                "this memory write may or may not have been recorded ({e:#}): check (e.g. `skillhost memory search`) before retrying. {diverged:#}"
            );
        }
        store.set_replica_applied(seq, false)?;
        *applied = seq;
        answer
    }

    /// Write a checkpoint of this replica at the log's head (see the module doc): holding
    /// the head, so no write lands between the last op it holds and the snapshot.
    pub(super) fn checkpoint(&self, store: &Store, retain: Duration) -> Result<CheckpointReport> {
        self.check()?;
        let mut applied = self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.stop.load(Ordering::SeqCst) {
            bail!("this host's memory replica is closed (the host is shutting down); no checkpoint was written");
        }
        let mut head = self.log.lock_head()?;
        for op in head.read_after(*applied)? {
            self.apply(store, &mut applied, &op)?;
        }
        if head.seq() != *applied {
            bail!(
                "{} holds op {}, but this replica reached op {} only: no checkpoint was written",
                self.log.describe(),
                head.seq(),
                *applied
            );
        }
        if head.seq() == 0 {
            return Ok(CheckpointReport::default());
        }
        let snapshot = store.snapshot()?;
        let (records, archive) = (snapshot.records.len(), snapshot.archive.len());
        let checkpoint = Checkpoint {
            seq: head.seq(),
            at_ms: head.at_ms(),
            model: store.vectors.model().map(|m| m.identity().to_string()),
            snapshot: serde_json::to_value(&snapshot).context("cannot encode the memory checkpoint")?,
        };
        let pruned = head.write_checkpoint(&checkpoint, retain)?;
        Ok(CheckpointReport { seq: checkpoint.seq, records, archive, pruned })
    }

    /// A request that changes the store: a checkpoint, or a write through the log.
    fn handle(&self, store: &Store, request: Request) -> Result<Value> {
        match request {
            Request::Checkpoint(c) => {
                Ok(serde_json::to_value(self.checkpoint(store, Duration::from_secs(c.retain_secs))?)?)
            }
            request => self.write(store, request),
        }
    }

    /// Stop following and writing through the log once the op in progress (the follower's
    /// or a writer's) is whole, and record where the replica stands durably. Without it a
    /// host that exits cleanly leaves `replica_seq` unsynced (or an op half applied by the
    /// follower) and its next start reads "stopped inside a write" and rebuilds the whole
    /// replica from the log. Later writes are refused; reads go on.
    pub(super) fn stop(&self, store: &Store) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        let applied = self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.diverged.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some() {
            // Rebuilt on the next open anyway (the mark file says so).
            return Ok(());
        }
        let (applying, _) = store.replica_marks()?;
        if applying > *applied {
            // An op this replica began and did not finish (a write the log refused): leave the
            // marks as they are, so that the next open rebuilds.
            return Ok(());
        }
        store.set_replica_applied(*applied, true)
    }

    /// The log head is ahead of this replica.
    fn behind(&self) -> Result<bool> {
        let applied = *self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(self.log.head()? > applied)
    }
}

/// Run `op` on the store this process owns: a write of a replicated store goes through its
/// shared log.
pub(super) fn run<O: Op>(replica: Option<&Replica>, store: &Store, op: O) -> Result<O::Output> {
    match replica {
        Some(replica) if !O::READ => {
            let answer = replica.handle(store, op.into())?;
            serde_json::from_value(answer).context("a replicated memory write gave an unexpected answer")
        }
        _ => op.run(store),
    }
}

/// Serve `request` from another process, as [`run`] does.
pub(super) fn serve(replica: Option<&Replica>, store: &Store, request: Request) -> Result<Value> {
    match replica {
        Some(replica) if !request.is_read() => replica.handle(store, request),
        _ => request.serve(store),
    }
}

/// Catch the replica of `store` up every [`FOLLOW_EVERY`] until the store closes.
fn follow(store: Weak<Store>, replica: Weak<Replica>) {
    let mut failing = false;
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let (Some(store), Some(replica)) = (store.upgrade(), replica.upgrade()) else { return };
        if replica.stop.load(Ordering::Relaxed) || replica.check().is_err() {
            return;
        }
        let caught = replica.behind().and_then(|behind| if behind { replica.catch_up(&store) } else { Ok(()) });
        match caught {
            Ok(()) if failing => {
                tracing::info!("the memory log is reachable again");
                failing = false;
            }
            Ok(()) => {}
            Err(e) if !failing => {
                tracing::warn!("cannot follow the memory log: {e:#}; retrying");
                failing = true;
            }
            Err(_) => {}
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whether a replica at op `applied` can go on by replaying: its next op is still in the log
/// (or there is none yet).
fn replayable_from(log: &dyn MemoryLog, applied: u64) -> Result<bool> {
    // The head first, as in `catch_up`: an op appended in between is not a gap.
    let head = log.head()?;
    Ok(match log.read_after(applied, 1)?.first() {
        Some(next) => next.seq == applied + 1,
        None => head <= applied,
    })
}

/// `(replica_applying, replica_seq)` of a closed store file.
fn read_marks(path: &Path) -> Result<(u64, u64)> {
    use redb::ReadableDatabase;
    let db = redb::Database::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let txn = db.begin_read()?;
    let meta = match txn.open_table(super::schema::META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0, 0)),
        Err(e) => return Err(e.into()),
    };
    let get = |k: &str| -> Result<u64> { Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0)) };
    Ok((get(APPLYING)?, get(APPLIED)?))
}

#[cfg(test)]
mod tests {
    use std::sync::MutexGuard;
    use std::time::Instant;

    use super::*;
    use crate::memory::log::{HeldHead, Replication};
    use crate::memory::{
        EmbedModelChoice, Memory, MemoryConfig, MemoryKind, MemoryStore as _, NewRecord, Provenance, SearchFilter,
    };

    /// An in-process log: what PostgreSQL's `memory_log` is to several hosts.
    #[derive(Default)]
    struct VecLog {
        ops: Mutex<Vec<LoggedOp>>,
        checkpoints: Mutex<Vec<Checkpoint>>,
        writer: Mutex<()>,
        /// Refuse appends (a lost database connection).
        refuse: AtomicBool,
    }

    impl VecLog {
        fn head_op(&self) -> (u64, u64) {
            let last_op = self.ops.lock().unwrap().last().map(|o| (o.seq, o.at_ms));
            let last_checkpoint = self.checkpoints.lock().unwrap().last().map(|c| (c.seq, c.at_ms));
            last_op.max(last_checkpoint).unwrap_or((0, 0))
        }
    }

    struct Held<'a> {
        log: &'a VecLog,
        _writer: MutexGuard<'a, ()>,
    }

    impl MemoryLog for VecLog {
        fn head(&self) -> Result<u64> {
            Ok(self.head_op().0)
        }
        fn read_after(&self, after: u64, limit: usize) -> Result<Vec<LoggedOp>> {
            Ok(self.ops.lock().unwrap().iter().filter(|o| o.seq > after).take(limit).cloned().collect())
        }
        fn lock_head(&self) -> Result<Box<dyn HeldHead + '_>> {
            Ok(Box::new(Held { log: self, _writer: self.writer.lock().unwrap() }))
        }
        fn checkpoint(&self) -> Result<Option<Checkpoint>> {
            Ok(self.checkpoints.lock().unwrap().last().cloned())
        }
        fn describe(&self) -> String {
            "the test log".into()
        }
    }

    impl HeldHead for Held<'_> {
        fn seq(&self) -> u64 {
            self.log.head_op().0
        }
        fn at_ms(&self) -> u64 {
            self.log.head_op().1
        }
        fn read_after(&mut self, after: u64) -> Result<Vec<LoggedOp>> {
            self.log.read_after(after, usize::MAX)
        }
        fn append(self: Box<Self>, op: &LoggedOp) -> Result<()> {
            if self.log.refuse.load(Ordering::Relaxed) {
                bail!("connection lost");
            }
            assert_eq!(op.seq, self.log.head_op().0 + 1, "appends follow the head");
            self.log.ops.lock().unwrap().push(op.clone());
            Ok(())
        }
        /// No retention here: every op the new checkpoint holds goes at once.
        fn write_checkpoint(self: Box<Self>, checkpoint: &Checkpoint, _retain: Duration) -> Result<Pruned> {
            let mut ops = self.log.ops.lock().unwrap();
            let mut checkpoints = self.log.checkpoints.lock().unwrap();
            let before = (ops.len(), checkpoints.len());
            ops.retain(|o| o.seq > checkpoint.seq);
            checkpoints.clear();
            checkpoints.push(checkpoint.clone());
            Ok(Pruned {
                ops_removed: (before.0 - ops.len()) as u64,
                checkpoints_removed: before.1 as u64,
                ops_left: ops.len() as u64,
            })
        }
    }

    fn host(dir: &Path, log: &Arc<VecLog>) -> Memory {
        let config = MemoryConfig {
            embed_model: EmbedModelChoice::Off,
            replication: Some(Replication(log.clone())),
            ..MemoryConfig::default()
        };
        Memory::open(dir, config).unwrap()
    }

    fn record(content: &str) -> NewRecord {
        NewRecord {
            namespace: "default".into(),
            kind: MemoryKind::Fact,
            content: content.into(),
            priority: 3,
            tags: vec![],
            provenance: Provenance { skill: "user".into(), skill_hash: String::new(), session: "t".into(), step: 0 },
        }
    }

    fn contents(m: &Memory) -> Vec<(u64, String, u64)> {
        m.all_records().unwrap().into_iter().map(|r| (r.id, r.content, r.created_ms)).collect()
    }

    fn found(m: &Memory, query: &str) -> Vec<u64> {
        m.search(query, &SearchFilter::default(), 5).unwrap().into_iter().map(|h| h.record.id).collect()
    }

    #[test]
    fn a_write_on_one_host_is_found_on_another_within_a_second_with_the_same_ids() {
        let log = Arc::new(VecLog::default());
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (host(a_dir.path(), &log), host(b_dir.path(), &log));
        let id = a.add(record("The release pipeline needs approval from two maintainers")).unwrap();
        let started = Instant::now();
        while found(&b, "release approval") != vec![id] {
            assert!(started.elapsed() < Duration::from_secs(1), "host B did not see host A's write within 1 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        // B writes next: it decides against A's record (the same fact merges) and logs after it.
        let (merged, _) = b.add_detailed(record("The release pipeline needs approval from two maintainers")).unwrap();
        assert_eq!(merged, id, "the same fact merged into A's record instead of a second one");
        let other = b.add(record("Serial output is garbled when the baud rate does not match")).unwrap();
        a.forget(id).unwrap();
        assert_eq!(log.head().unwrap(), 4);
        for m in [&a, &b] {
            let started = Instant::now();
            while m.all_records().unwrap().len() != 1 {
                assert!(started.elapsed() < Duration::from_secs(1));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert_eq!(contents(&a), contents(&b));
        assert_eq!(found(&a, "garbled serial"), vec![other]);
        assert_eq!(found(&b, "garbled serial"), vec![other]);
        assert_eq!(a.archive().unwrap(), b.archive().unwrap(), "the archive is replicated too");

        // A third host starting later rebuilds the same store from the log.
        let c_dir = tempfile::tempdir().unwrap();
        let c = host(c_dir.path(), &log);
        assert_eq!(contents(&c), contents(&a));
        assert_eq!(c.archive().unwrap(), a.archive().unwrap());
    }

    #[test]
    fn a_refused_write_is_not_logged_and_concurrent_writers_converge() {
        let log = Arc::new(VecLog::default());
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (Arc::new(host(a_dir.path(), &log)), Arc::new(host(b_dir.path(), &log)));
        let mut huge = record("x");
        huge.content = "y".repeat(100_000);
        assert!(a.add(huge).is_err());
        assert_eq!(log.head().unwrap(), 0, "a refused write is not in the log");

        let writers: Vec<_> = (0..8)
            .map(|i| {
                let m = if i % 2 == 0 { a.clone() } else { b.clone() };
                std::thread::spawn(move || {
                    const SUBJECTS: [&str; 8] =
                        ["kettle", "router", "garden", "invoice", "piano", "bicycle", "laptop", "window"];
                    const FACTS: [&str; 5] =
                        ["is blue", "needs repair", "belongs to Ann", "was bought in May", "stays in the attic"];
                    FACTS.map(|fact| m.add(record(&format!("The {} {fact}", SUBJECTS[i]))).unwrap())
                })
            })
            .collect();
        let answered: std::collections::BTreeSet<u64> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        assert_eq!(log.head().unwrap(), 40);
        let seqs: Vec<u64> = log.ops.lock().unwrap().iter().map(|o| o.seq).collect();
        assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
        let started = Instant::now();
        while contents(&a) != contents(&b) {
            assert!(started.elapsed() < Duration::from_secs(2), "the replicas did not converge");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(a.archive().unwrap(), b.archive().unwrap());
        // Every id a writer was answered with is on both hosts, live or archived (an update
        // of the same subject archives the older record as outdated).
        let held = |m: &Memory| -> std::collections::BTreeSet<u64> {
            let live = contents(m).into_iter().map(|(id, ..)| id);
            live.chain(m.archive().unwrap().into_iter().map(|e| e.record.id)).collect()
        };
        assert!(answered.len() >= 8, "{answered:?}");
        assert!(answered.is_subset(&held(&a)), "{answered:?} vs {:?}", held(&a));
        assert_eq!(held(&a), held(&b));
    }

    #[test]
    fn a_replica_stopped_inside_a_write_or_cut_off_from_the_log_is_rebuilt() {
        let log = Arc::new(VecLog::default());
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = host(a_dir.path(), &log);
        a.add(record("first fact about the uart driver")).unwrap();
        // The log refuses the next append: A ran it, so A's replica is no longer trusted.
        log.refuse.store(true, Ordering::Relaxed);
        let err = a.add(record("second fact about the dma engine")).unwrap_err().to_string();
        assert!(err.contains("may or may not have been recorded"), "{err}");
        log.refuse.store(false, Ordering::Relaxed);
        let err = a.add(record("third fact")).unwrap_err().to_string();
        assert!(err.contains("diverged") && err.contains("restart the host"), "{err}");
        drop(a);
        // Restarted, it rebuilds from the log: the unlogged write is gone, the logged one is there.
        let a = host(a_dir.path(), &log);
        let kept: Vec<String> = contents(&a).into_iter().map(|(_, c, _)| c).collect();
        assert_eq!(kept, vec!["first fact about the uart driver".to_string()]);
        a.add(record("fourth fact")).unwrap();
        let b = host(b_dir.path(), &log);
        assert_eq!(contents(&a), contents(&b));
    }
    #[test]
    fn a_replica_stopped_cleanly_stops_between_ops_and_resumes_there_without_a_rebuild() {
        let log = Arc::new(VecLog::default());
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = host(a_dir.path(), &log);
        let b = host(b_dir.path(), &log);
        for i in 0..40 {
            a.add(record(&format!("gadget{i} sits on shelf{i} in room{i}"))).unwrap();
        }
        // Stopped while its follower may be catching up: it stops where an op ends.
        std::thread::sleep(FOLLOW_EVERY + Duration::from_millis(30));
        b.stop_replication().unwrap();
        let seen = contents(&b);
        let err = b.add(record("a write after the stop")).unwrap_err().to_string();
        assert!(err.contains("shutting down") && err.contains("not made"), "{err}");
        // It follows no more, and nothing it began is left half done.
        a.add(record("gadget99 sits on shelf99 in room99")).unwrap();
        std::thread::sleep(FOLLOW_EVERY * 2);
        assert_eq!(contents(&b), seen, "the follower applied ops after the stop");
        drop(b);
        let (applying, applied) = read_marks(&b_dir.path().join("store.redb")).unwrap();
        assert!(applying <= applied, "stopped inside op {applying} (applied: {applied}): the next start rebuilds");
        assert_eq!(applied as usize, seen.len(), "replica_seq is where the replica stood");
        // Reopened, it goes on from there: the same records as A, the ids A gave.
        let b = host(b_dir.path(), &log);
        assert_eq!(contents(&b), contents(&a));
    }

    #[test]
    fn a_checkpoint_lets_new_replicas_start_from_it_and_one_left_behind_rebuilds() {
        let log = Arc::new(VecLog::default());
        let (a_dir, b_dir, c_dir) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = host(a_dir.path(), &log);
        let b = host(b_dir.path(), &log);
        for i in 0..12 {
            a.add(record(&format!("gadget{i} sits on shelf{i} in room{i}"))).unwrap();
        }
        let forgotten = a.add(record("the old kettle is broken")).unwrap();
        a.forget(forgotten).unwrap();
        a.session_set("s1", "goal", "find the kettle").unwrap();
        // B is stopped (one op behind, or more), and the log moves on without it.
        std::thread::sleep(FOLLOW_EVERY * 2);
        b.stop_replication().unwrap();
        drop(b);
        a.add(record("gadget12 sits on shelf12 in room12")).unwrap();
        let head = log.head().unwrap();
        assert_eq!(head, 16);

        // A local store has no log to compact.
        let plain_dir = tempfile::tempdir().unwrap();
        let plain = Memory::open(
            plain_dir.path(),
            MemoryConfig { embed_model: EmbedModelChoice::Off, ..MemoryConfig::default() },
        )
        .unwrap();
        let err = plain.checkpoint(Duration::ZERO).unwrap_err().to_string();
        assert!(err.contains("not replicated") && err.contains("store compact"), "{err}");

        let report = a.checkpoint(Duration::ZERO).unwrap();
        assert_eq!(report.seq, 16, "{report:?}");
        assert_eq!((report.records, report.archive), (a.all_records().unwrap().len(), a.archive().unwrap().len()));
        assert!(report.archive >= 1, "the forgotten record is in the checkpoint's archive");
        assert_eq!((report.pruned.ops_removed, report.pruned.ops_left), (16, 0));
        assert_eq!(log.head().unwrap(), 16, "the head stays where it was");

        // A new host starts from the checkpoint: the same records, ids, times, archive and
        // working memory, the same search answers, and it writes on after it.
        let c = host(c_dir.path(), &log);
        assert_eq!(contents(&c), contents(&a));
        assert_eq!(c.archive().unwrap(), a.archive().unwrap());
        assert_eq!(c.session_get("s1", "goal").unwrap().as_deref(), Some("find the kettle"));
        assert_eq!(found(&c, "gadget7 shelf7"), found(&a, "gadget7 shelf7"));
        let next = c.add(record("the printer in room3 needs toner")).unwrap();
        assert_eq!(next, a.all_records().unwrap().iter().map(|r| r.id).max().unwrap() + 1, "ids go on from A's");
        assert_eq!(log.read_after(0, 10).unwrap().iter().map(|o| o.seq).collect::<Vec<_>>(), vec![17]);

        // B's next op (4) is gone: reopened, it is rebuilt from the checkpoint, not refused.
        let b = host(b_dir.path(), &log);
        let started = Instant::now();
        while contents(&b) != contents(&c) {
            assert!(started.elapsed() < Duration::from_secs(1), "B did not catch up after the rebuild");
            std::thread::sleep(Duration::from_millis(10));
        }
        // A running replica that finds a gap (its follower had not looked yet: it looks every
        // 200 ms) refuses memory writes, naming it and what to do; restarted, it is rebuilt.
        let d_dir = tempfile::tempdir().unwrap();
        let d = host(d_dir.path(), &log);
        c.add(record("the garden hose leaks")).unwrap();
        c.checkpoint(Duration::ZERO).unwrap();
        let err = d.add(record("the boiler needs a service")).unwrap_err().to_string();
        assert!(err.contains("compacted into a checkpoint") && err.contains("restart the host"), "{err}");
        drop(d);
        let d = host(d_dir.path(), &log);
        assert_eq!(contents(&d), contents(&c), "restarted, it starts from the newest checkpoint");
    }
}
