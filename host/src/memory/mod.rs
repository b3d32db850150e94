//! Long-term memory, working memory and daily notes (SPEC §5).
//!
//! [`Memory`] is the whole system behind one skillhost home's `memory/` directory:
//!
//! ```text
//! memory/store.redb        the source of truth: records, provenance, archive, sessions
//! memory/index/            tantivy BM25 index, rebuilt from the store when missing or stale
//! memory/daily/DATE.md     daily notes, append-only, searchable, never auto-loaded
//! memory/archive/daily/    daily notes older than 90 days (moved by `memory maintain`)
//! memory/store.lock        who holds the store (redb allows one process)
//! ```
//!
//! The sandbox talks only to the [`MemoryStore`] trait (search, insert, session working
//! memory); the CLI and the agent loop use [`Memory`] directly for the view, compaction,
//! quarantine and export. Every removal (merge, expiry, demotion, compaction of deprecated
//! records) moves the record to the archive table, from which `memory restore` brings it
//! back: nothing learned is lost to housekeeping.

mod daily;
mod index;
mod lock;
mod records;
mod store;
mod tokens;
mod view;

pub use daily::DailyEntry;
pub use index::DailyHit;
pub use records::{
    ArchiveEntry, Deprecation, MemoryKind, MemoryRecord, NewRecord, Provenance, SearchFilter, SearchHit, SearchOrder,
};
pub use store::{CompactReport, ImportReport, MaintainReport, Memory, MemoryConfig, validate_namespace};
pub use tokens::count_tokens;
pub use view::{MemoryView, ViewSection};

use anyhow::Result;

/// Long-term memory and session working memory, as the sandbox needs them.
pub trait MemoryStore: Send + Sync {
    /// Live records of `namespace` relevant to `query`, best first, with their scores.
    fn search(&self, namespace: &str, query: &str, limit: usize) -> Result<Vec<(MemoryRecord, f32)>>;
    /// Store a record, merging it into a near-duplicate if there is one; returns the id
    /// of the record that now holds the fact.
    fn insert(&self, record: NewRecord) -> Result<u64>;
    /// All records of `namespace` (live, deprecated and expired), oldest first.
    fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>>;
    fn session_get(&self, session: &str, key: &str) -> Result<Option<String>>;
    fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()>;
    fn session_keys(&self, session: &str) -> Result<Vec<String>>;
}
