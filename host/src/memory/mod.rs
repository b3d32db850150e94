//! Long-term memory, working memory and daily notes (SPEC §5).
//!
//! [`Memory`] is the whole system behind one skillhost home's `memory/` directory:
//!
//! ```text
//! memory/store.redb        the source of truth: records, provenance, archive, working memory
//! memory/index/            tantivy BM25 index, rebuilt from the store when missing or stale
//! memory/daily/DATE.md     daily notes, append-only, searchable, never auto-loaded
//! memory/archive/daily/    daily notes older than 90 days (moved by `memory maintain`)
//! memory/sessions/ID.json  paused agent runs (atomic files, outside the store)
//! memory/store.lock        which process owns the store (redb allows one)
//! memory/store.sock        where the owner serves the other processes
//! ```
//!
//! Files: `handle.rs` ([`Memory`], owner or client), `remote.rs` (the owner's socket),
//! `store.rs` (the open store, reads, caches), `writes.rs`, `schema.rs` (tables, migration,
//! transactions), `embed/` (the in-process embedding model), `vectors.rs` (record
//! embeddings), `hybrid.rs` (BM25 + cosine fusion), `merge.rs` (same-fact and update
//! rules), `statement.rs` (what a record states: numbers, negations), `sessions.rs`,
//! `view.rs`, `index.rs`,
//! `daily.rs`, `lock.rs`, `snapshot.rs` (a whole store as one value, for
//! `skillhost store import/export`).
//!
//! The sandbox talks only to the [`MemoryStore`] trait (search, insert, session working
//! memory); the CLI and the agent loop use [`Memory`] directly for the view, compaction,
//! quarantine and export. Every removal (merge, expiry, demotion, compaction of deprecated
//! records) moves the record to the archive table, from which `memory restore` brings it
//! back: nothing learned is lost to housekeeping.

mod calibration;
mod daily;
pub mod embed;
mod handle;
mod hybrid;
mod index;
mod index_dir;
mod instructions;
mod lock;
mod log;
mod merge;
mod ops;
mod reads;
mod records;
mod remote;
mod replica;
mod schema;
mod script;
mod sessions;
pub use sessions::AgentSessions;
mod settings;
mod snapshot;
mod statement;
mod store;
mod tokens;
mod vectors;
mod view;
mod writes;

pub use daily::DailyEntry;
pub use handle::{Memory, SemanticStats};
pub use hybrid::FusionParams;
pub use index::DailyHit;
pub use instructions::{instruction_like, prompt_content};
pub use log::{
    Checkpoint, CheckpointReport, HeldHead, LogHead, LoggedOp, MemoryLog, OpsAfter, Pruned, Replication,
    digest_of_sha256, text_digest,
};
pub use records::{
    ArchiveEntry, Deprecation, MemoryKind, MemoryRecord, NewRecord, Provenance, RESERVED_SOURCES, SearchFilter,
    SearchHit, SearchOrder, archive_reason, is_reserved_source,
};
pub use replica::FOLLOW_EVERY;
pub use settings::{FusionChoice, ModelSetting, ModelSource, fusion_setting, model_setting};
pub use snapshot::{MemorySnapshot, SNAPSHOT_FORMAT, SnapshotReport};
pub use store::{EmbedModelChoice, MAX_SEARCH_LIMIT, MemoryConfig, validate_namespace};
pub use tokens::count_tokens;
pub use view::{MemoryView, ViewSection};
pub use writes::{AddOutcome, CompactReport, ImportReport, MaintainReport};

use anyhow::Result;

/// Long-term memory and session working memory, as the sandbox needs them. [`Memory`]
/// is safe to call from many threads at once (the sandbox calls it from
/// `spawn_blocking`), and from several processes at once.
pub trait MemoryStore: Send + Sync {
    /// Live records of `namespace` relevant to `query`, best first, with their scores.
    fn search(&self, namespace: &str, query: &str, limit: usize) -> Result<Vec<(MemoryRecord, f32)>>;
    /// [`MemoryStore::search`] on behalf of `session`: a record handed out counts one
    /// reference per session (the sandbox passes the call's session). The default ignores
    /// the session.
    fn search_in_session(
        &self,
        session: &str,
        namespace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryRecord, f32)>> {
        let _ = session;
        self.search(namespace, query, limit)
    }
    /// Store a record, merging it into a near-duplicate if there is one; returns the id
    /// of the record that now holds the fact.
    fn insert(&self, record: NewRecord) -> Result<u64>;
    /// All records of `namespace` (live, deprecated and expired), oldest first.
    fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>>;
    fn session_get(&self, session: &str, key: &str) -> Result<Option<String>>;
    fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()>;
    fn session_keys(&self, session: &str) -> Result<Vec<String>>;
}
