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

use super::log::{APPLIED, APPLYING, LoggedOp, MemoryLog, Replaying};
use super::ops::{Op, Request};
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
    /// Wipe `dir`'s store when it was left inside an op or marked diverged, before it opens.
    pub(super) fn check_before_open(dir: &Path) -> Result<()> {
        let path = dir.join("store.redb");
        let diverged = dir.join(DIVERGED_MARK).exists();
        let interrupted = !diverged && path.exists() && {
            let (applying, applied) = read_marks(&path)?;
            applying > applied
        };
        if diverged || interrupted {
            tracing::warn!(
                dir = %dir.display(),
                because = if diverged { "it diverged from the log" } else { "it was stopped inside a write" },
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
            let ops = self.log.read_after(*applied, CATCH_UP_BATCH)?;
            if ops.is_empty() {
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

    /// Replay one op another host wrote (or this one, before a restart).
    fn apply(&self, store: &Store, applied: &mut u64, logged: &LoggedOp) -> Result<()> {
        if logged.seq != *applied + 1 {
            return Err(self.diverge(store, format!("op {} follows op {} in the log", logged.seq, *applied)));
        }
        let ours = store.vectors.model().map(|m| m.identity().to_string());
        if logged.model != ours {
            return Err(self.diverge(
                store,
                format!(
                    "op {} was written with the embedding model {}, this host runs {}: every host must run the same model",
                    logged.seq,
                    logged.model.as_deref().unwrap_or("none"),
                    ours.as_deref().unwrap_or("none")
                ),
            ));
        }
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
            let answer = replica.write(store, op.into())?;
            serde_json::from_value(answer).context("a replicated memory write gave an unexpected answer")
        }
        _ => op.run(store),
    }
}

/// Serve `request` from another process, as [`run`] does.
pub(super) fn serve(replica: Option<&Replica>, store: &Store, request: Request) -> Result<Value> {
    match replica {
        Some(replica) if !request.is_read() => replica.write(store, request),
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
    use crate::memory::{EmbedModelChoice, Memory, MemoryConfig, MemoryKind, NewRecord, Provenance, SearchFilter};

    /// An in-process log: what PostgreSQL's `memory_log` is to several hosts.
    #[derive(Default)]
    struct VecLog {
        ops: Mutex<Vec<LoggedOp>>,
        writer: Mutex<()>,
        /// Refuse appends (a lost database connection).
        refuse: AtomicBool,
    }

    struct Held<'a> {
        log: &'a VecLog,
        _writer: MutexGuard<'a, ()>,
    }

    impl MemoryLog for VecLog {
        fn head(&self) -> Result<u64> {
            Ok(self.ops.lock().unwrap().len() as u64)
        }
        fn read_after(&self, after: u64, limit: usize) -> Result<Vec<LoggedOp>> {
            Ok(self.ops.lock().unwrap().iter().skip(after as usize).take(limit).cloned().collect())
        }
        fn lock_head(&self) -> Result<Box<dyn HeldHead + '_>> {
            Ok(Box::new(Held { log: self, _writer: self.writer.lock().unwrap() }))
        }
        fn describe(&self) -> String {
            "the test log".into()
        }
    }

    impl HeldHead for Held<'_> {
        fn seq(&self) -> u64 {
            self.log.ops.lock().unwrap().len() as u64
        }
        fn at_ms(&self) -> u64 {
            self.log.ops.lock().unwrap().last().map_or(0, |o| o.at_ms)
        }
        fn read_after(&mut self, after: u64) -> Result<Vec<LoggedOp>> {
            self.log.read_after(after, usize::MAX)
        }
        fn append(self: Box<Self>, op: &LoggedOp) -> Result<()> {
            if self.log.refuse.load(Ordering::Relaxed) {
                bail!("connection lost");
            }
            let mut ops = self.log.ops.lock().unwrap();
            assert_eq!(op.seq, ops.len() as u64 + 1, "appends follow the head");
            ops.push(op.clone());
            Ok(())
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
}
