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
//! `replica_seq = seq` with that op's time and text digest (`replica_seq_at_ms`,
//! `replica_seq_digest`: an op's number, time and digest
//! tell it from another history's op of that number, in a store restored from a backup and
//! written on since). A replica whose `replica_applying` is ahead of its `replica_seq`
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

use super::log::{
    APPLIED, APPLYING, Checkpoint, CheckpointReport, HeldHead, LogHead, LoggedOp, MemoryLog, OpMark, PartlyApplied,
    Replaying,
};
use super::ops::{Op, Request};
use super::snapshot::MemorySnapshot;
use super::store::Store;

/// How often a replica's follower looks for writes of other hosts.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Ops read from the log per round trip while catching up.
const CATCH_UP_BATCH: usize = 500;

/// The file that marks a replica diverged: the next open rebuilds it.
const DIVERGED_MARK: &str = "replica.diverged";

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
    /// Wipe `dir`'s store when it was left inside an op, marked diverged, or the log no
    /// longer continues from it (its next op was compacted into a checkpoint, or the log's
    /// op at its position is another op: a restored store), before it opens.
    pub(super) fn check_before_open(dir: &Path, log: &dyn MemoryLog) -> Result<()> {
        let path = dir.join("store.redb");
        let diverged = dir.join(DIVERGED_MARK).exists();
        let marks = if path.exists() { read_marks(&path) } else { Ok(Some((0, 0, OpMark::default()))) };
        // A file redb finds damaged is rebuilt: it is derived from the log.
        let damaged = matches!(marks, Ok(None));
        let (applying, applied, applied_mark) = marks?.unwrap_or_default();
        let interrupted = !diverged && !damaged && applying > applied;
        let passed =
            !diverged && !damaged && !interrupted && applied > 0 && !replayable_from(log, applied, applied_mark)?;
        if diverged || damaged || interrupted || passed {
            tracing::warn!(
                dir = %dir.display(),
                because = if diverged {
                    "it diverged from the log"
                } else if damaged {
                    "its store file is damaged"
                } else if interrupted {
                    "it was stopped inside a write"
                } else {
                    "the log no longer continues from it (compacted while it was away, or the store was restored or replaced)"
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
        // Once per catch-up, not per op: an op applied here leaves the marks equal, and the
        // ops after the first batch continue what this replica read from this log.
        self.check_whole(store, *applied)?;
        loop {
            // The head first: every op up to it was in the log when it was read, so if none
            // comes back after it, they were removed since (never: appended since).
            let log_head = self.log.head()?;
            let head = log_head.seq;
            let read = self.log.read_after(*applied, CATCH_UP_BATCH)?;
            self.check_same_history(
                store,
                *applied,
                time_of_op(*applied, read.after_at_ms, log_head),
                read.after_digest,
            )?;
            let ops = read.ops;
            if ops.is_empty() {
                if head > *applied {
                    // Every op after this replica is gone: compacted while it was away.
                    return Err(self.compacted(store, *applied, head));
                }
                if head < *applied {
                    return Err(self.behind_replica(store, *applied, head));
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
        // A checkpoint holds no op text: the time alone marks its op.
        store.set_replica_applied(checkpoint.seq, OpMark { at_ms: checkpoint.at_ms, digest: 0 }, true)?;
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
            return Err(self.compacted(store, *applied, logged.seq - 1));
        }
        if logged.seq != *applied + 1 {
            return Err(self.diverge(store, format!("op {} follows op {} in the log", logged.seq, *applied)));
        }
        self.check_model(store, &format!("op {}", logged.seq), logged.model.as_deref())?;
        let request: Request = serde_json::from_value(logged.op.clone())
            .map_err(|e| self.diverge(store, format!("op {} is not an operation this host knows: {e}", logged.seq)))?;
        {
            let _replaying = Replaying::start(logged.seq, logged.at_ms);
            // The writer's outcome, error or not, is the outcome here too, unless the op
            // stopped part way here.
            match request.serve(store) {
                Err(e) if e.downcast_ref::<PartlyApplied>().is_some() => return Err(self.diverge(store, e.to_string())),
                Err(e) => {
                    tracing::debug!(seq = logged.seq, "replayed op ended in an error, as where it was written: {e:#}")
                }
                Ok(_) => {}
            }
        }
        if store.replica_marks()?.0 != logged.seq {
            return Err(
                self.diverge(store, format!("op {} changed nothing here, unlike where it was written", logged.seq))
            );
        }
        store.set_replica_applied(logged.seq, OpMark { at_ms: logged.at_ms, digest: logged.digest() }, false)?;
        *applied = logged.seq;
        Ok(())
    }

    /// Hold this replica (no op applies meanwhile) and the log's head (no host writes), with
    /// every op up to the head applied: where a write or a checkpoint starts. `not_done`
    /// says what did not happen when it cannot.
    fn hold_caught_up(
        &self,
        store: &Store,
        not_done: &str,
    ) -> Result<(std::sync::MutexGuard<'_, u64>, Box<dyn HeldHead + '_>)> {
        self.check()?;
        let mut applied = self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.stop.load(Ordering::SeqCst) {
            bail!("this host's memory replica is closed (the host is shutting down); {not_done}");
        }
        self.check_whole(store, *applied)?;
        let mut head = self.log.lock_head()?;
        let read = head.read_after(*applied)?;
        let log_head = LogHead { seq: head.seq(), at_ms: head.at_ms() };
        self.check_same_history(store, *applied, time_of_op(*applied, read.after_at_ms, log_head), read.after_digest)?;
        for op in read.ops {
            self.apply(store, &mut applied, &op)?;
        }
        if head.seq() < *applied {
            return Err(self.behind_replica(store, *applied, head.seq()));
        }
        if head.seq() != *applied {
            return Err(self.compacted(store, *applied, head.seq()));
        }
        Ok((applied, head))
    }

    /// Diverge when an op committed here beyond `applied` (the last op applied whole): one
    /// stopped half way in this process (a panic, or a failure recording it whole) would
    /// otherwise be applied again, or its number given to the next write.
    fn check_whole(&self, store: &Store, applied: u64) -> Result<()> {
        let (applying, _) = store.replica_marks()?;
        if applying != applied {
            return Err(self.diverge(store, format!("op {applying} began here and was not applied whole")));
        }
        Ok(())
    }

    /// Diverge when the log's op `applied` (written at `logged_at`, when known: see
    /// [`time_of_op`]; its text's digest `logged_digest`, when the log holds it) is not the op
    /// this replica applied last: the store was restored from a backup, or replaced, and
    /// written on since, so the ops after it continue another history.
    fn check_same_history(
        &self,
        store: &Store,
        applied: u64,
        logged_at: Option<u64>,
        logged_digest: Option<u64>,
    ) -> Result<()> {
        let ours = store.replica_applied_mark()?;
        if applied > 0 && ours.differs_from(logged_at, logged_digest) {
            let shown = |v: Option<u64>, hex: bool| match v {
                Some(v) if v != 0 && hex => format!("{v:016x}"),
                Some(v) if v != 0 => v.to_string(),
                _ => "unknown".to_string(),
            };
            return Err(self.diverge(
                store,
                format!(
                    "the log's op {applied} is not the one this replica applied (written at {} ms with digest {}, not {} ms with digest {}): the store was restored or replaced",
                    shown(logged_at, false),
                    shown(logged_digest, true),
                    shown(Some(ours.at_ms), false),
                    shown(Some(ours.digest), true)
                ),
            ));
        }
        Ok(())
    }

    /// Diverge because the log's head `head` is behind op `at`, which this replica holds:
    /// the store was restored from a backup, or is not the one this replica copied.
    fn behind_replica(&self, store: &Store, at: u64, head: u64) -> anyhow::Error {
        self.diverge(
            store,
            format!("the log ends at op {head}, behind this replica's op {at}: the store was restored or replaced"),
        )
    }

    /// Diverge because the ops after `at` up to `last` are gone from the log (a checkpoint
    /// holds them, and this replica was behind it).
    fn compacted(&self, store: &Store, at: u64, last: u64) -> anyhow::Error {
        self.diverge(
            store,
            format!(
                "ops {} to {last} were compacted into a checkpoint while this host was behind (at op {at})",
                at + 1
            ),
        )
    }

    /// Run the write `request` through the log (see the module doc).
    pub(super) fn write(&self, store: &Store, request: Request) -> Result<Value> {
        let (mut applied, head) = self.hold_caught_up(store, "the write was not made")?;
        if matches!(request, Request::LoadSnapshot(_)) && head.seq() != 0 {
            bail!(
                "{} already holds {} memory write(s): a memory snapshot is loaded only as the first op of an empty log (import into a new, freshly migrated database)",
                self.log.describe(),
                head.seq()
            );
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
        if let Err(e) = &answer
            && let Some(partly) = e.downcast_ref::<PartlyApplied>()
        {
            // Not logged: no host applies it, and this one is rebuilt without it.
            let diverged = self.diverge(store, partly.to_string());
            bail!("this memory write was not made ({partly}). {diverged:#}");
        }
        let model = store.vectors.model().map(|m| m.identity().to_string());
        let logged = LoggedOp { seq, at_ms, model, op, stored_digest: None };
        if let Err(e) = head.append(&logged) {
            let diverged =
                self.diverge(store, format!("op {seq} ran here but could not be appended to the log: {e:#}"));
            bail!(
                "this memory write may or may not have been recorded ({e:#}): once the host is restarted (which rebuilds its memory from the log), check (e.g. `skillhost memory search`) before retrying. {diverged:#}"
            );
        }
        store.set_replica_applied(seq, OpMark { at_ms, digest: logged.digest() }, false)?;
        *applied = seq;
        answer
    }

    /// Write a checkpoint of this replica at the log's head (see the module doc): holding
    /// the head, so no write lands between the last op it holds and the snapshot.
    pub(super) fn checkpoint(&self, store: &Store, retain: Duration) -> Result<CheckpointReport> {
        let (_applied, head) = self.hold_caught_up(store, "no checkpoint was written")?;
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

    /// A request that changes the store: a checkpoint, or a write through the log. A panic
    /// in either (they replay other hosts' ops first) diverges the replica: what it left
    /// committed here may be an op the log never took, which reads must not serve, and a
    /// replica is rebuilt whole on restart (a damaged store file included).
    fn handle(&self, store: &Store, request: Request) -> Result<Value> {
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match request {
            Request::Checkpoint(c) => {
                Ok(serde_json::to_value(self.checkpoint(store, Duration::from_secs(c.retain_secs))?)?)
            }
            request => self.write(store, request),
        }));
        match handled {
            Ok(Err(e)) if super::store::is_corrupt(&e) => Err(self.damaged(store, &e)),
            Ok(result) => result,
            Err(panic) => {
                let why = super::store::panic_message(&*panic);
                Err(self.diverge(store, format!("a memory operation panicked here: {why}")))
            }
        }
    }

    /// A read on this replica. redb finding the file damaged diverges the replica: it is
    /// derived, so a restart rebuilds it from the log (the advice for a damaged store of one
    /// machine, move it aside and import an export, does not fit). A panic is answered with
    /// that advice and changes nothing.
    fn read<T>(&self, store: &Store, read: impl FnOnce() -> Result<T>) -> Result<T> {
        // A diverged replica answers no read either: it may hold a write the log never took.
        self.check()?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
            Ok(Err(e)) if super::store::is_corrupt(&e) => Err(self.damaged(store, &e)),
            Ok(result) => result,
            Err(panic) => {
                // Not diverged: a read that panics on what a call asked would otherwise let
                // any caller take this host's memory offline.
                let why = super::store::panic_message(&*panic);
                Err(anyhow!(
                    "a memory read failed on this host's replica ({why}); nothing was changed. If it repeats for every read, the replica's file {} may be damaged: restart the host after removing {} (a replica is rebuilt from {} when it starts)",
                    store.path.display(),
                    store.dir.display(),
                    self.log.describe()
                ))
            }
        }
    }

    fn damaged(&self, store: &Store, e: &anyhow::Error) -> anyhow::Error {
        self.diverge(store, format!("its store file {} is damaged ({e:#})", store.path.display()))
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
        store.set_replica_applied(*applied, store.replica_applied_mark()?, true)
    }

    /// The log head is not where this replica is: ahead of it (ops to apply), behind it, or
    /// at its op's number with another op (a restored or replaced store, which `catch_up`
    /// refuses).
    fn behind(&self, store: &Store) -> Result<bool> {
        let applied = *self.applied.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let head = self.log.head()?;
        if head.seq != applied {
            return Ok(true);
        }
        // The head row has no digest: an op of the same number and time is told apart when
        // the next op is appended, or by the next write (both read the op's digest).
        Ok(applied > 0 && store.replica_applied_mark()?.differs_from(Some(head.at_ms), None))
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
        Some(replica) => replica.read(store, || op.run(store)),
        None => op.run(store),
    }
}

/// Serve `request` from another process, as [`run`] does.
pub(super) fn serve(replica: Option<&Replica>, store: &Store, request: Request) -> Result<Value> {
    match replica {
        Some(replica) if !request.is_read() => replica.handle(store, request),
        Some(replica) => replica.read(store, || request.serve(store)),
        None => request.serve(store),
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
        let followed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            replica.behind(&store).and_then(|behind| if behind { replica.catch_up(&store) } else { Ok(()) })
        }));
        let caught = match followed {
            Ok(Err(e)) if super::store::is_corrupt(&e) => {
                let _ = replica.damaged(&store, &e);
                return;
            }
            Ok(caught) => caught,
            Err(panic) => {
                // A follower that died quietly would leave this host's reads stale for ever:
                // it diverges instead, so calls say so and a restart rebuilds the replica.
                let why = format!("following the log panicked: {}", super::store::panic_message(&*panic));
                let _ = replica.diverge(&store, why);
                return;
            }
        };
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

/// Whether a replica at op `applied` (marked `mark`) can go on by replaying: its next op is
/// still in the log (or there is none yet), and the log's op `applied` is the one it applied.
fn replayable_from(log: &dyn MemoryLog, applied: u64, mark: OpMark) -> Result<bool> {
    // The head first, as in `catch_up`: an op appended in between is not a gap.
    let log_head = log.head()?;
    let head = log_head.seq;
    let read = log.read_after(applied, 1)?;
    if mark.differs_from(time_of_op(applied, read.after_at_ms, log_head), read.after_digest) {
        // The log's op `applied` is another op: restored or replaced, and written on since.
        return Ok(false);
    }
    Ok(match read.ops.first() {
        Some(next) => next.seq == applied + 1,
        // A head behind the replica: the store was restored or replaced; rebuild from it.
        None => head == applied,
    })
}

/// The time the log's op `seq` was written at, when the log tells: its row (`row_at`), or
/// the head when `seq` is the head (its row may have been compacted away).
fn time_of_op(seq: u64, row_at: Option<u64>, head: LogHead) -> Option<u64> {
    row_at.or((head.seq == seq).then_some(head.at_ms))
}

/// `(replica_applying, replica_seq, its mark)` of a closed store file (`None`: redb finds
/// the file damaged); each part of the mark is 0 (unknown) unless it was recorded for that
/// `replica_seq` (a host that ran an older build moved `replica_seq` on without it).
fn read_marks(path: &Path) -> Result<Option<(u64, u64, OpMark)>> {
    use redb::ReadableDatabase;
    let read = || -> Result<(u64, u64, OpMark)> {
        let db = redb::Database::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let txn = db.begin_read()?;
        let meta = match txn.open_table(super::schema::META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0, 0, OpMark::default())),
            Err(e) => return Err(e.into()),
        };
        let get = |k: &str| -> Result<u64> { Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0)) };
        let applied = get(APPLIED)?;
        Ok((get(APPLYING)?, applied, super::log::applied_mark(applied, get)?))
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
        Ok(Ok(marks)) => Ok(Some(marks)),
        Ok(Err(e)) if super::store::is_corrupt(&e) || super::store::is_not_a_database(&e) => Ok(None),
        Ok(Err(e)) => Err(e),
        // redb panics on some damage.
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests;
