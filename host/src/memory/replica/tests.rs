//! `replica.rs`'s tests: several hosts' replicas on an in-process log.

use std::sync::MutexGuard;
use std::time::Instant;

use super::*;
use crate::memory::log::{HeldHead, LogHead, OpsAfter, Pruned, Replication};
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
    /// Panic when asked for the head (a bug in the follower's path).
    panic_on_head: AtomicBool,
    /// Panic when asked to append (after the writer's op committed here).
    panic_on_append: AtomicBool,
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
    fn head(&self) -> Result<LogHead> {
        assert!(!self.panic_on_head.load(Ordering::SeqCst), "the test log panics on head()");
        let (seq, at_ms) = self.head_op();
        Ok(LogHead { seq, at_ms })
    }
    fn read_after(&self, after: u64, limit: usize) -> Result<OpsAfter> {
        let ops = self.ops.lock().unwrap();
        Ok(OpsAfter {
            after_at_ms: ops.iter().find(|o| o.seq == after).map(|o| o.at_ms),
            after_digest: ops.iter().find(|o| o.seq == after).map(LoggedOp::digest),
            ops: ops.iter().filter(|o| o.seq > after).take(limit).cloned().collect(),
        })
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
    fn read_after(&mut self, after: u64) -> Result<OpsAfter> {
        self.log.read_after(after, usize::MAX)
    }
    fn append(self: Box<Self>, op: &LoggedOp) -> Result<()> {
        if self.log.refuse.load(Ordering::Relaxed) {
            bail!("connection lost");
        }
        assert!(!self.log.panic_on_append.load(Ordering::SeqCst), "the test log panics on append()");
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
    assert_eq!(log.head().unwrap().seq, 4);
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
    assert_eq!(log.head().unwrap().seq, 0, "a refused write is not in the log");

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
    assert_eq!(log.head().unwrap().seq, 40);
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
    // Nor does it answer reads: it holds a write the log may never have taken.
    let err = a.search("second fact dma engine", &SearchFilter::default(), 5).unwrap_err().to_string();
    assert!(err.contains("diverged"), "{err}");
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
    let (applying, applied, _) = read_marks(&b_dir.path().join("store.redb")).unwrap().unwrap();
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
    let head = log.head().unwrap().seq;
    assert_eq!(head, 16);

    // A local store has no log to compact.
    let plain_dir = tempfile::tempdir().unwrap();
    let plain =
        Memory::open(plain_dir.path(), MemoryConfig { embed_model: EmbedModelChoice::Off, ..MemoryConfig::default() })
            .unwrap();
    let err = plain.checkpoint(Duration::ZERO).unwrap_err().to_string();
    assert!(err.contains("not replicated") && err.contains("store compact"), "{err}");

    let report = a.checkpoint(Duration::ZERO).unwrap();
    assert_eq!(report.seq, 16, "{report:?}");
    assert_eq!((report.records, report.archive), (a.all_records().unwrap().len(), a.archive().unwrap().len()));
    assert!(report.archive >= 1, "the forgotten record is in the checkpoint's archive");
    assert_eq!((report.pruned.ops_removed, report.pruned.ops_left), (16, 0));
    assert_eq!(log.head().unwrap().seq, 16, "the head stays where it was");

    // A new host starts from the checkpoint: the same records, ids, times, archive and
    // working memory, the same search answers, and it writes on after it.
    let c = host(c_dir.path(), &log);
    assert_eq!(contents(&c), contents(&a));
    assert_eq!(c.archive().unwrap(), a.archive().unwrap());
    assert_eq!(c.session_get("s1", "goal").unwrap().as_deref(), Some("find the kettle"));
    assert_eq!(found(&c, "gadget7 shelf7"), found(&a, "gadget7 shelf7"));
    let next = c.add(record("the printer in room3 needs toner")).unwrap();
    assert_eq!(next, a.all_records().unwrap().iter().map(|r| r.id).max().unwrap() + 1, "ids go on from A's");
    assert_eq!(log.read_after(0, 10).unwrap().ops.iter().map(|o| o.seq).collect::<Vec<_>>(), vec![17]);

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

/// A log that ends before a replica's last op (the store restored from a backup, or
/// replaced): a running replica stops serving, saying so, and a restarted one is rebuilt
/// from the log as it is, instead of waiting, unaware, for the log to pass its op.
#[test]
fn a_replica_ahead_of_its_log_is_refused_then_rebuilt() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    for fact in ["kept fact about the uart", "lost fact about the dma", "another lost fact about the bus"] {
        a.add(record(fact)).unwrap();
    }
    // The store goes back to its first op.
    log.ops.lock().unwrap().truncate(1);
    let refused = refused_within_10s(&a, "a replica ahead of its log went on serving");
    assert!(refused.contains("diverged") && refused.contains("behind this replica"), "{refused}");
    let err = a.add(record("a new fact")).unwrap_err().to_string();
    assert!(err.contains("diverged"), "{err}");
    drop(a);
    let a = host(dir.path(), &log);
    let kept: Vec<String> = contents(&a).into_iter().map(|(_, c, _)| c).collect();
    assert_eq!(kept, vec!["kept fact about the uart".to_string()]);
    a.add(record("a new fact")).unwrap();
}

/// A store restored from a backup and written on since, past where a replica stood: its op
/// N is another op than the replica's op N. A running replica stops serving, saying so,
/// instead of applying the new history's later ops on top of its own; a restarted one is
/// rebuilt from the log as it is.
#[test]
fn a_replica_whose_log_took_another_history_is_refused_then_rebuilt() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    for fact in ["a fact about the uart", "a fact about the dma", "a fact about the bus"] {
        a.add(record(fact)).unwrap();
    }
    // Another history of four ops, swapped in at once (so the follower never sees the log
    // behind it): what the restored store holds after other hosts wrote on it.
    let other = Arc::new(VecLog::default());
    let c_dir = tempfile::tempdir().unwrap();
    {
        let c = host(c_dir.path(), &other);
        std::thread::sleep(Duration::from_millis(5));
        for fact in ["the uart runs at 9600 baud", "the dma has 8 channels", "the bus is i2c", "the led is red"] {
            c.add(record(fact)).unwrap();
        }
    }
    *log.ops.lock().unwrap() = other.ops.lock().unwrap().clone();
    let refused = refused_within_10s(&a, "a replica went on applying another history's ops");
    assert!(refused.contains("diverged") && refused.contains("restored or replaced"), "{refused}");
    drop(a);
    let a = host(dir.path(), &log);
    let fresh_dir = tempfile::tempdir().unwrap();
    assert_eq!(contents(&a), contents(&host(fresh_dir.path(), &log)), "restarted, it holds the log's history");
}

/// The same, when the other history's ops carry the very times of the replica's (written
/// by hosts whose clocks ran behind): the op's digest tells them apart, where the time alone
/// would have let the replica apply op 4 on top of its own op 3.
#[test]
fn another_history_with_the_same_op_times_is_told_apart_by_digest() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    for fact in ["a fact about the uart", "a fact about the dma", "a fact about the bus"] {
        a.add(record(fact)).unwrap();
    }
    let times: Vec<u64> = log.ops.lock().unwrap().iter().map(|o| o.at_ms).collect();
    let other = Arc::new(VecLog::default());
    let c_dir = tempfile::tempdir().unwrap();
    {
        let c = host(c_dir.path(), &other);
        for fact in ["the uart runs at 9600 baud", "the dma has 8 channels", "the bus is i2c", "the led is red"] {
            c.add(record(fact)).unwrap();
        }
    }
    let mut swapped = other.ops.lock().unwrap().clone();
    for (op, at) in swapped.iter_mut().zip(&times) {
        op.at_ms = *at;
    }
    let last = *times.last().unwrap();
    swapped[3].at_ms = swapped[3].at_ms.max(last);
    assert_eq!(swapped[2].at_ms, last, "op 3 of both histories has one time");
    *log.ops.lock().unwrap() = swapped;
    let refused = refused_within_10s(&a, "a replica applied another history's op 4 on top of its own op 3");
    assert!(refused.contains("restored or replaced") && refused.contains("digest"), "{refused}");
    drop(a);
    let a = host(dir.path(), &log);
    let fresh_dir = tempfile::tempdir().unwrap();
    assert_eq!(contents(&a), contents(&host(fresh_dir.path(), &log)), "restarted, it holds the log's history");
}

/// A replica whose store holds an op beyond the last one it applied whole (here: as a
/// write that panicked after committing leaves it) refuses to go on rather than apply that
/// op again or give its number to the next write.
#[test]
fn a_replica_holding_an_op_not_applied_whole_refuses_to_go_on() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    a.add(record("first fact about the uart")).unwrap();
    // What a panic between the op's commit and `set_replica_applied` leaves: the store's
    // marks one op ahead of the replica's count.
    let (store, replica) = a.owned_for_tests();
    let replica = replica.unwrap();
    {
        let _replaying = Replaying::start(2, 0);
        let txn = store.begin().unwrap();
        txn.set_meta("unrelated_test_key", 1).unwrap();
        txn.commit().unwrap();
    }
    let err = a.add(record("second fact")).unwrap_err().to_string();
    assert!(err.contains("diverged") && err.contains("op 2 began here"), "{err}");
    assert!(replica.check().is_err());
}

/// A follower that panics marks the replica diverged (calls say so, a restart rebuilds it)
/// instead of dying quietly and leaving this host's reads stale for ever.
#[test]
fn a_follower_that_panics_diverges_the_replica() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    a.add(record("a fact about the uart")).unwrap();
    log.panic_on_head.store(true, Ordering::SeqCst);
    let refused = refused_within_10s(&a, "the follower panicked and the replica went on serving");
    assert!(refused.contains("diverged") && refused.contains("following the log panicked"), "{refused}");
    log.panic_on_head.store(false, Ordering::SeqCst);
    drop(a);
    let a = host(dir.path(), &log);
    let kept: Vec<String> = contents(&a).into_iter().map(|(_, c, _)| c).collect();
    assert_eq!(kept, vec!["a fact about the uart".to_string()]);
}

/// A write that panics (here: after committing, so its op may or may not be in the log)
/// marks the replica diverged at once: reads must not serve a write no other host may see.
/// Restarted, it holds what the log holds.
#[test]
fn a_write_that_panics_diverges_the_replica_at_once() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    a.add(record("a fact about the uart")).unwrap();
    log.panic_on_append.store(true, Ordering::SeqCst);
    let err = format!("{:#}", a.add(record("a fact about the uart baud rate")).unwrap_err());
    assert!(err.contains("diverged") && err.contains("panicked here"), "{err}");
    let read = format!("{:#}", a.search("uart", &SearchFilter::default(), 5).unwrap_err());
    assert!(read.contains("diverged"), "a read served a write the log never took: {read}");
    log.panic_on_append.store(false, Ordering::SeqCst);
    drop(a);
    let a = host(dir.path(), &log);
    let kept: Vec<String> = contents(&a).into_iter().map(|(_, c, _)| c).collect();
    assert_eq!(kept, vec!["a fact about the uart".to_string()], "restarted, it holds what the log holds");
}

/// The time and digest recorded beside `replica_seq` count only for the op they were
/// recorded for: a host that ran an older build moved `replica_seq` on without them (or, the
/// build before this one, with the time and without the digest), and a stale mark would
/// make a healthy replica look like another history's.
#[test]
fn a_mark_recorded_for_another_op_is_not_trusted() {
    use crate::memory::log::{APPLIED_AT, APPLIED_AT_SEQ};
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    a.add(record("a fact about the uart")).unwrap();
    let (store, _) = a.owned_for_tests();
    let mark = store.replica_applied_mark().unwrap();
    assert_ne!(mark.at_ms, 0);
    assert_eq!(mark.digest, log.ops.lock().unwrap()[0].digest(), "the digest of the op the log holds");
    // What the build before this one leaves: replica_seq and its time moved on, the digest not.
    let txn = store.begin().unwrap();
    txn.set_meta(APPLIED, 2).unwrap();
    txn.set_meta(APPLIED_AT, 77).unwrap();
    txn.set_meta(APPLIED_AT_SEQ, 2).unwrap();
    txn.commit().unwrap();
    assert_eq!(store.replica_applied_mark().unwrap(), OpMark { at_ms: 77, digest: 0 });
    // What an older build leaves: replica_seq moved on, nothing else.
    let txn = store.begin().unwrap();
    txn.set_meta(APPLIED, 3).unwrap();
    txn.commit().unwrap();
    assert_eq!(store.replica_applied_mark().unwrap(), OpMark::default());
    drop((a, store));
    assert_eq!(read_marks(&dir.path().join("store.redb")).unwrap().unwrap().2, OpMark::default());
}

/// An op's digest is of the text the log stores, and a reader that parses that text and
/// writes it again gets the same text (so a follower's digest is the writer's): escapes,
/// non-ASCII, floats, big integers, nested objects in any key order.
#[test]
fn an_op_read_back_from_its_text_has_the_same_digest() {
    let op = serde_json::json!({
        "op": "add", "text": "串口乱码 \"quoted\" \u{0} tab\t 😀", "z": 0.1, "a": -0.0, "n": u64::MAX,
        "f": 1e300, "nested": {"b": [1, 2.5, null, true], "a": {}},
        "importance": 117.63331139400017, "score": 0.9215686321258545, "tiny": 5e-324, "big": 1.7976931348623157e308
    });
    let written = LoggedOp { seq: 1, at_ms: 1, model: None, op, stored_digest: None };
    let text = written.text().unwrap();
    let read = LoggedOp { op: serde_json::from_str(&text).unwrap(), ..written.clone() };
    assert_eq!(read.text().unwrap(), text);
    assert_eq!(read.digest(), written.digest());
    assert_eq!(written.digest(), crate::memory::text_digest(text.as_bytes()));
    let other = LoggedOp { op: serde_json::json!({"op": "add", "text": "another"}), ..written.clone() };
    assert_ne!(other.digest(), written.digest());
    // Floats of every magnitude and all 17 digits: written, read and written again.
    let mut bits: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        bits ^= bits << 13;
        bits ^= bits >> 7;
        bits ^= bits << 17;
        let f = f64::from_bits(bits);
        if !f.is_finite() {
            continue;
        }
        let text = serde_json::to_string(&serde_json::json!({ "x": f })).unwrap();
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text, "{f:e}");
    }
    // And the digest of an op read from the log is the stored text's, whatever this host
    // would write for it.
    let stored = LoggedOp { stored_digest: Some(7), ..written.clone() };
    assert_eq!(stored.digest(), 7);
}

/// A daily note's op is marked begun before its line is written: a line that cannot be
/// written diverges the writer's replica and logs nothing (no host gets a line this one
/// lacks), and a restart rebuilds it. (A kill between the mark and the line leaves the op
/// begun and not applied, which an open rebuilds; the other order replayed it, writing the
/// line twice.)
#[test]
fn a_daily_note_that_cannot_be_written_after_its_mark_is_not_logged() {
    let log = Arc::new(VecLog::default());
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (host(a_dir.path(), &log), host(b_dir.path(), &log));
    let first = a.note("first note of the day").unwrap();
    // The note directory cannot be made: a file holds its name.
    let (store, _) = a.owned_for_tests();
    let daily = store.dir.join("daily");
    std::fs::rename(&daily, store.dir.join("daily.kept")).unwrap();
    std::fs::write(&daily, "not a directory").unwrap();
    let err = format!("{:#}", a.note("second note of the day").unwrap_err());
    assert!(err.contains("diverged") && err.contains("could not be written") && err.contains("not made"), "{err}");
    assert_eq!(log.ops.lock().unwrap().len(), 1, "the note that was not written was logged");
    let err = format!("{:#}", a.daily(None).unwrap_err());
    assert!(err.contains("diverged"), "{err}");
    drop((a, store));
    std::fs::remove_file(&daily).unwrap();
    std::fs::rename(a_dir.path().join("daily.kept"), &daily).unwrap();
    let a = host(a_dir.path(), &log);
    // The notes of the days the test wrote on (two, if it ran across midnight).
    let mut dates = vec![first.date];
    let lines = |m: &Memory, dates: &[String]| {
        dates.iter().flat_map(|d| m.daily(Some(d)).unwrap().1).map(|e| e.text).collect::<Vec<_>>()
    };
    assert_eq!(lines(&a, &dates).len(), 1, "{:?}", lines(&a, &dates));
    assert!(lines(&a, &dates)[0].ends_with("first note of the day"));
    let third = a.note("third note of the day").unwrap();
    if !dates.contains(&third.date) {
        dates.push(third.date);
    }
    let lines = |m: &Memory| lines(m, &dates);
    let started = Instant::now();
    while lines(&b) != lines(&a) {
        assert!(started.elapsed() < Duration::from_secs(10), "B: {:?}, A: {:?}", lines(&b), lines(&a));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lines(&b).len(), 2);
}

/// The error a search on `m` ends in within 10 s (the follower finds the fault on its own);
/// panics with `still_serving` if it keeps answering.
fn refused_within_10s(m: &Memory, still_serving: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match m.search("uart", &SearchFilter::default(), 5) {
            Err(e) => return e.to_string(),
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(_) => panic!("{still_serving}"),
        }
    }
}

/// A read op for the tests below: it panics, or finds the file damaged.
#[derive(Clone)]
struct FailingRead {
    panic: bool,
}

impl From<FailingRead> for Request {
    fn from(_: FailingRead) -> Request {
        unreachable!("a read is never logged")
    }
}

impl crate::memory::ops::Op for FailingRead {
    type Output = ();
    const READ: bool = true;
    fn run(self, _: &Store) -> Result<()> {
        if self.panic {
            panic!("a bug in a read");
        }
        Err(anyhow::Error::new(redb::StorageError::Corrupted("a page checksum does not match".into())))
    }
}

/// A read that panics on a replica is answered with what to do for a replica (its file is
/// rebuilt from the log), not a single machine's "move it aside and import an export", and
/// leaves the replica serving (a read a caller can make panic must not take the host's
/// memory offline). One that finds the file damaged diverges it, and the restart rebuilds it.
#[test]
fn a_read_that_fails_on_a_replica_says_what_to_do_for_a_replica() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    let a = host(dir.path(), &log);
    a.add(record("a fact about the uart")).unwrap();
    let (store, replica) = a.owned_for_tests();
    let replica = replica.unwrap();
    let e = format!("{:#}", run(Some(&replica), &store, FailingRead { panic: true }).unwrap_err());
    assert!(e.contains("a bug in a read") && e.contains("rebuilt from") && !e.contains("memory import"), "{e}");
    assert!(replica.check().is_ok(), "a read that panicked took the replica offline");
    assert_eq!(a.search("uart", &SearchFilter::default(), 5).unwrap().len(), 1);

    let e = format!("{:#}", run(Some(&replica), &store, FailingRead { panic: false }).unwrap_err());
    assert!(e.contains("diverged") && e.contains("is damaged") && e.contains("restart"), "{e}");
    assert!(!e.contains("memory import"), "{e}");
    assert!(a.search("uart", &SearchFilter::default(), 5).is_err());
    drop((a, store, replica));
    let a = host(dir.path(), &log);
    assert_eq!(contents(&a).len(), 1, "restarted, it holds what the log holds");
}

/// A replica whose file redb cannot read (here: overwritten with garbage while the host was
/// down) is rebuilt from the log when the host starts, instead of refusing to open: it is
/// derived, and nothing in it is lost.
#[test]
fn a_damaged_replica_file_is_rebuilt_at_start() {
    let log = Arc::new(VecLog::default());
    let dir = tempfile::tempdir().unwrap();
    {
        let a = host(dir.path(), &log);
        a.add(record("a fact about the uart")).unwrap();
        a.add(record("a fact about the dma")).unwrap();
    }
    let file = dir.path().join("store.redb");
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    std::fs::write(&file, vec![0x5a; len.max(8192)]).unwrap();
    assert!(read_marks(&file).unwrap().is_none(), "garbage read as a store");
    let a = host(dir.path(), &log);
    let fresh = tempfile::tempdir().unwrap();
    assert_eq!(contents(&a), contents(&host(fresh.path(), &log)));
    assert_eq!(contents(&a).len(), 2);
}
