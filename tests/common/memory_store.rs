//! The set-up the memory tests share: a clock they move by hand, a store on that clock,
//! and records with a chosen provenance.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use skillhost::memory::{Memory, MemoryConfig, MemoryKind, NewRecord, Provenance};

pub const HOUR_MS: u64 = 3_600_000;
pub const DAY_MS: u64 = 86_400_000;

/// A clock at a fixed instant (2026-09-21), moved by the test.
pub fn clock() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(1_790_000_000_000))
}

/// The store in `dir` with the default configuration, reading time from `clock`.
pub fn open_at(dir: &Path, clock: &Arc<AtomicU64>) -> Memory {
    open_with(dir, clock, MemoryConfig::default())
}

/// The store in `dir` with `config`, reading time from `clock`.
pub fn open_with(dir: &Path, clock: &Arc<AtomicU64>, config: MemoryConfig) -> Memory {
    let c = clock.clone();
    Memory::open(dir, config).unwrap().with_clock(move || c.load(Ordering::SeqCst))
}

/// Written by `skill` (version `hash`) in `session`, step `step`.
pub fn provenance(skill: &str, hash: &str, session: &str, step: u32) -> Provenance {
    Provenance { skill: skill.into(), skill_hash: hash.into(), session: session.into(), step }
}

/// A record of namespace `default` with no tags.
pub fn record(content: &str, kind: MemoryKind, priority: u8, provenance: Provenance) -> NewRecord {
    NewRecord { namespace: "default".into(), kind, content: content.into(), priority, tags: vec![], provenance }
}
