//! The shared, ordered log of memory writes a replica follows (see `replica.rs`): its
//! interface ([`MemoryLog`], implemented over PostgreSQL in `crate::store` and in-process in
//! tests), and the mark an op being applied leaves on this thread, which the store's clock
//! and its commits read. A module of its own below `store.rs` and `schema.rs`, so that they
//! can read the mark without knowing the replica that sets it.

use std::cell::Cell;
use std::sync::Arc;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One write operation as the log holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedOp {
    /// Its place in the log: 1, 2, 3, ... with no gaps.
    pub seq: u64,
    /// The time it ran at (ms since the epoch); replays run at this time too.
    pub at_ms: u64,
    /// The embedding model of the host that wrote it (`None`: lexical only).
    pub model: Option<String>,
    /// The operation, in the wire format of `ops.rs` (`{"op": "add", ...}`).
    pub op: Value,
    /// The [`text_digest`] of the text the log stored, when the op was read from it: a
    /// reader's own serialization of `op` could differ from the writer's (a float's last
    /// digit, another serde_json), so the stored text's is the one compared.
    #[serde(skip)]
    pub stored_digest: Option<u64>,
}

impl LoggedOp {
    /// The op's text as the log stores it (the same function on the same value everywhere,
    /// so a writer knows the text it appended, and a reader that parsed it gets it back).
    pub fn text(&self) -> serde_json::Result<String> {
        serde_json::to_string(&self.op)
    }

    /// [`text_digest`] of the stored text (read from the log) or of [`LoggedOp::text`] (to
    /// be appended): with the time, what tells this op from another history's op of the
    /// same number.
    pub fn digest(&self) -> u64 {
        self.stored_digest.unwrap_or_else(|| self.text().map_or(0, |t| text_digest(t.as_bytes())))
    }
}

/// The first 64 bits of the SHA-256 of an op's text (never 0, which means "unknown"): what a
/// replica records of the last op it applied, and what the log tells of its op of that
/// number (PostgreSQL computes it over the stored text, `sha256(convert_to(op, 'UTF8'))`).
pub fn text_digest(text: &[u8]) -> u64 {
    use sha2::Digest as _;
    digest_of_sha256(&sha2::Sha256::digest(text))
}

/// [`text_digest`] from the SHA-256 already computed (by the database).
pub fn digest_of_sha256(sha256: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    for (to, from) in first.iter_mut().zip(sha256) {
        *to = *from;
    }
    u64::from_be_bytes(first).max(1)
}

/// The state of a replica after op `seq`: where a new replica starts instead of replaying
/// the ops before it, which a compaction may have removed (see `replica.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The last op it holds.
    pub seq: u64,
    /// That op's time.
    pub at_ms: u64,
    /// The embedding model of the host that took it (as [`LoggedOp::model`]).
    pub model: Option<String>,
    /// A [`MemorySnapshot`](super::MemorySnapshot), as JSON.
    pub snapshot: Value,
}

/// What writing a checkpoint removed, and what the log holds after.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pruned {
    /// Ops removed: those an older-than-retention checkpoint holds.
    pub ops_removed: u64,
    /// Checkpoints removed: those older than that one.
    pub checkpoints_removed: u64,
    /// Ops still in the log.
    pub ops_left: u64,
}

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

/// Where a log ends: its last op's number and the time that op was written at. The time
/// tells two histories' op N apart (a store restored from a backup and written on since).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogHead {
    /// 0: the log is empty.
    pub seq: u64,
    pub at_ms: u64,
}

/// What [`MemoryLog::read_after`] finds after op `after`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpsAfter {
    /// The time op `after` itself was written at, while the log still holds it (`None`:
    /// `after` is 0, or a compaction removed it): a replica checks that it is the op it
    /// applied last.
    pub after_at_ms: Option<u64>,
    /// The [`text_digest`] of op `after`, when the log holds it and tells.
    pub after_digest: Option<u64>,
    /// The ops after it, in order.
    pub ops: Vec<LoggedOp>,
}

/// The shared, ordered log of memory writes (PostgreSQL's `memory_log`, or an in-process
/// one in tests).
pub trait MemoryLog: Send + Sync + 'static {
    /// The last op's seq and time ((0, 0): empty).
    fn head(&self) -> Result<LogHead>;
    /// Up to `limit` ops after `after`, in order.
    fn read_after(&self, after: u64, limit: usize) -> Result<OpsAfter>;
    /// Hold the head for one write: no other writer appends until the returned value is
    /// appended to or dropped (dropped: nothing is appended).
    fn lock_head(&self) -> Result<Box<dyn HeldHead + '_>>;
    /// The newest checkpoint, if one was written.
    fn checkpoint(&self) -> Result<Option<Checkpoint>>;
    /// Where the log lives, for messages.
    fn describe(&self) -> String;
}

/// The log's head, held for one write.
pub trait HeldHead {
    /// The last op's seq and time.
    fn seq(&self) -> u64;
    fn at_ms(&self) -> u64;
    /// The ops after `after` (all of them: the head is held, so they are final).
    fn read_after(&mut self, after: u64) -> Result<OpsAfter>;
    /// Append `op` (whose seq is `seq() + 1`) and release the head; `Ok` only once the
    /// append is durable.
    fn append(self: Box<Self>, op: &LoggedOp) -> Result<()>;
    /// Record `checkpoint` (the state after op `seq()`), then remove the ops and older
    /// checkpoints that the newest checkpoint at least `retain` old makes unneeded (a host
    /// that follows the log is never more than that behind, so it never misses an op), and
    /// release the head; `Ok` only once durable.
    fn write_checkpoint(self: Box<Self>, checkpoint: &Checkpoint, retain: std::time::Duration) -> Result<Pruned>;
}

/// The memory log a [`MemoryConfig`](super::MemoryConfig) replicates through; `Debug` so the
/// config stays printable.
#[derive(Clone)]
pub struct Replication(pub Arc<dyn MemoryLog>);

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replication({})", self.0.describe())
    }
}

thread_local! {
    /// The op this thread is applying: its seq and time (see [`replaying`]).
    static REPLAYING: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// The op (seq, time) this thread is applying to a replica, if any: the store's clock reads
/// its time, and each commit records its seq.
pub(super) fn replaying() -> Option<(u64, u64)> {
    REPLAYING.with(Cell::get)
}

/// Sets [`REPLAYING`] for as long as it lives (also through a panic).
pub(super) struct Replaying;

impl Replaying {
    pub(super) fn start(seq: u64, at_ms: u64) -> Replaying {
        REPLAYING.with(|r| r.set(Some((seq, at_ms))));
        Replaying
    }
}

impl Drop for Replaying {
    fn drop(&mut self) {
        REPLAYING.with(|r| r.set(None));
    }
}

/// The error of an op that committed on a replica and then failed part way (a daily note
/// marked in redb whose line could not be written). Its replica diverges, so a restart
/// rebuilds it whole from the log, and a writer does not log the op.
#[derive(Debug)]
pub(super) struct PartlyApplied(pub(super) String);

impl std::fmt::Display for PartlyApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartlyApplied {}

/// The meta keys of a replica's position: the last log op that committed here, and the
/// last one applied whole.
pub(super) const APPLYING: &str = "replica_applying";
pub(super) const APPLIED: &str = "replica_seq";
/// The time of the last op applied whole, and that op's seq: the time counts only while it
/// is `replica_seq`'s (an older build moves `replica_seq` on without it).
pub(super) const APPLIED_AT: &str = "replica_seq_at_ms";
pub(super) const APPLIED_AT_SEQ: &str = "replica_seq_at_ms_of";
/// The [`text_digest`] of the last op applied whole, and that op's seq (a key of its own: a
/// build that records the time but not the digest moves the time's seq on without it).
pub(super) const APPLIED_DIGEST: &str = "replica_seq_digest";
pub(super) const APPLIED_DIGEST_SEQ: &str = "replica_seq_digest_of";

/// What tells the last op a replica applied from another history's op of that number: its
/// time and digest, each 0 when not known (see [`applied_mark`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct OpMark {
    pub at_ms: u64,
    pub digest: u64,
}

impl OpMark {
    /// Whether the log's op (time and digest, where the log tells) is certainly not the one
    /// this mark was recorded for: one of them is known on both sides and differs.
    pub(super) fn differs_from(&self, logged_at: Option<u64>, logged_digest: Option<u64>) -> bool {
        let differs = |ours: u64, theirs: Option<u64>| ours != 0 && theirs.is_some_and(|t| t != ours);
        differs(self.at_ms, logged_at) || differs(self.digest, logged_digest)
    }
}

/// The mark of op `applied` from the meta values read by `get` ([`APPLIED_AT`] and
/// [`APPLIED_DIGEST`], each with its seq): each part 0 (unknown) unless it was recorded for
/// that op.
pub(super) fn applied_mark(applied: u64, get: impl Fn(&str) -> anyhow::Result<u64>) -> anyhow::Result<OpMark> {
    let part = |value: &str, of: &str| -> anyhow::Result<u64> { Ok(if get(of)? == applied { get(value)? } else { 0 }) };
    Ok(OpMark { at_ms: part(APPLIED_AT, APPLIED_AT_SEQ)?, digest: part(APPLIED_DIGEST, APPLIED_DIGEST_SEQ)? })
}
