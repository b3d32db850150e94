//! The redb schema of `memory/store.redb`, its migrations, and [`Txn`], the write
//! transaction every store write goes through.
//!
//! Schema (version 2; version 1 was the single-table store of the first runtime and is
//! migrated on open):
//!
//! ```text
//! meta              name -> u64           schema_version, generation, next_id, next_archive_id
//! memory_records    id -> JSON MemoryRecord
//! records_by_ns     namespace => ids      (multimap; listing and the view)
//! records_by_skill  skill => ids          (multimap; quarantine)
//! protected_by_ns   namespace => ids      (multimap; live priority-5 records)
//! archive           archive id -> JSON ArchiveEntry (everything housekeeping removed)
//! session_kv        (session, key) -> value  (working memory written by skills)
//! daily_promoted    (date, line) -> record id
//! agent_sessions    (old stores only) moved to `memory/sessions/` on open, see `sessions.rs`
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use anyhow::{Context as _, Result, bail};
use redb::{
    Database, MultimapTableDefinition, ReadableMultimapTable, ReadableTable, TableDefinition, TableHandle,
    WriteTransaction,
};
use serde::{Deserialize, Serialize};

use super::merge::round_importance;
use super::records::{ArchiveEntry, MemoryKind, MemoryRecord, Provenance, archive_reason};

pub(super) const SCHEMA_VERSION: u64 = 2;

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("memory_records");
pub(super) const BY_NAMESPACE: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("records_by_ns");
pub(super) const BY_SKILL: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("records_by_skill");
/// Live priority-5 records per namespace: the budget check reads only these.
pub(super) const PROTECTED: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("protected_by_ns");
pub(super) const ARCHIVE: TableDefinition<u64, &[u8]> = TableDefinition::new("archive");
pub(super) const AGENT_SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("agent_sessions");
pub(super) const SESSION_KV: TableDefinition<(&str, &str), &str> = TableDefinition::new("session_kv");
pub(super) const PROMOTED: TableDefinition<(&str, u32), u64> = TableDefinition::new("daily_promoted");
/// Schema 1: `id -> JSON` with a single provenance and no lifecycle fields.
pub(super) const V1_RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("memories");

pub(super) const DAY_MS: u64 = 86_400_000;
/// Ids stay below 2^53 so that they survive JSON tools that read numbers as doubles.
pub(super) const MAX_ID: u64 = 1 << 53;

pub(super) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).context("cannot encode a memory record")
}

pub(super) fn decode_record(bytes: &[u8], id: u64) -> Result<MemoryRecord> {
    serde_json::from_slice(bytes).with_context(|| format!("memory record #{id} is corrupt"))
}

/// Decoded records by namespace, kept in step with every commit of this process. The
/// process holds the store lock, so nobody else writes: the MEMORY.md view after a write
/// needs no full decode of the namespace.
pub(super) type RecordCache = Mutex<HashMap<String, BTreeMap<u64, MemoryRecord>>>;

pub(super) enum Change {
    Upsert(Box<MemoryRecord>),
    Remove(String, u64),
}

pub(super) struct Txn<'a> {
    pub(super) txn: WriteTransaction,
    pub(super) cache: Option<&'a RecordCache>,
    pub(super) changes: std::cell::RefCell<Vec<Change>>,
    /// Held from the start of a write until its index update is done (see [`WriteGuard`]).
    pub(super) guard: Option<WriteGuard<'a>>,
}

/// One write at a time, from its first read to its index update: two concurrent adds of
/// the same fact then merge instead of both inserting, and the record cache and the index
/// see the commits in commit order.
pub(super) type WriteGuard<'a> = std::sync::MutexGuard<'a, ()>;

impl<'a> Txn<'a> {
    pub(super) fn meta(&self, key: &str) -> Result<u64> {
        let t = self.txn.open_table(META)?;
        Ok(t.get(key)?.map(|v| v.value()).unwrap_or(0))
    }

    pub(super) fn set_meta(&self, key: &str, value: u64) -> Result<()> {
        self.txn.open_table(META)?.insert(key, value)?;
        Ok(())
    }

    pub(super) fn next(&self, key: &str) -> Result<u64> {
        let id = self.meta(key)?.max(1);
        self.set_meta(key, id + 1)?;
        Ok(id)
    }

    pub(super) fn get(&self, id: u64) -> Result<Option<MemoryRecord>> {
        let t = self.txn.open_table(RECORDS)?;
        let v = t.get(id)?;
        v.map(|v| decode_record(v.value(), id)).transpose()
    }

    pub(super) fn put(&self, r: &MemoryRecord) -> Result<()> {
        self.changes.borrow_mut().push(Change::Upsert(Box::new(r.clone())));
        self.txn.open_table(RECORDS)?.insert(r.id, encode(r)?.as_slice())?;
        self.txn.open_multimap_table(BY_NAMESPACE)?.insert(r.namespace.as_str(), r.id)?;
        let mut protected = self.txn.open_multimap_table(PROTECTED)?;
        if r.priority == 5 && r.deprecated.is_none() {
            protected.insert(r.namespace.as_str(), r.id)?;
        } else {
            protected.remove(r.namespace.as_str(), r.id)?;
        }
        let mut by_skill = self.txn.open_multimap_table(BY_SKILL)?;
        for s in r.skills() {
            by_skill.insert(s, r.id)?;
        }
        Ok(())
    }

    pub(super) fn delete(&self, r: &MemoryRecord) -> Result<()> {
        self.changes.borrow_mut().push(Change::Remove(r.namespace.clone(), r.id));
        self.txn.open_table(RECORDS)?.remove(r.id)?;
        self.txn.open_multimap_table(BY_NAMESPACE)?.remove(r.namespace.as_str(), r.id)?;
        self.txn.open_multimap_table(PROTECTED)?.remove(r.namespace.as_str(), r.id)?;
        let mut by_skill = self.txn.open_multimap_table(BY_SKILL)?;
        for s in r.skills() {
            by_skill.remove(s, r.id)?;
        }
        Ok(())
    }

    pub(super) fn archive(
        &self,
        at_ms: u64,
        reason: &str,
        record: MemoryRecord,
        merged_into: Option<u64>,
    ) -> Result<u64> {
        let id = self.next("next_archive_id")?;
        let entry = ArchiveEntry { id, at_ms, reason: reason.to_string(), record, merged_into, superseded_by: None };
        self.txn.open_table(ARCHIVE)?.insert(id, encode(&entry)?.as_slice())?;
        Ok(id)
    }

    /// Archive `record` as outdated: `successor` is the update that replaced it.
    pub(super) fn archive_outdated(&self, at_ms: u64, mut record: MemoryRecord, successor: u64) -> Result<u64> {
        let id = self.next("next_archive_id")?;
        record.superseded_by = Some(successor);
        let entry = ArchiveEntry {
            id,
            at_ms,
            reason: archive_reason::OUTDATED.to_string(),
            record,
            merged_into: None,
            superseded_by: Some(successor),
        };
        self.txn.open_table(ARCHIVE)?.insert(id, encode(&entry)?.as_slice())?;
        Ok(id)
    }

    pub(super) fn all(&self) -> Result<Vec<MemoryRecord>> {
        let t = self.txn.open_table(RECORDS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(decode_record(v.value(), k.value())?);
        }
        Ok(out)
    }

    /// Live priority-5 records of `namespace`, as this transaction sees them.
    pub(super) fn protected(&self, namespace: &str, now: u64) -> Result<Vec<MemoryRecord>> {
        let ids: Vec<u64> = {
            let t = self.txn.open_multimap_table(PROTECTED)?;
            let mut ids = Vec::new();
            for v in t.get(namespace)? {
                ids.push(v?.value());
            }
            ids
        };
        let mut out = Vec::new();
        for id in ids {
            if let Some(r) = self.get(id)?
                && r.is_live(now)
            {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// A fresh id, never one in use (even if `next_id` was damaged).
    pub(super) fn new_id(&self) -> Result<u64> {
        loop {
            let id = self.next("next_id")?;
            if id >= MAX_ID {
                bail!("the memory store ran out of ids");
            }
            if self.get(id)?.is_none() {
                return Ok(id);
            }
        }
    }

    pub(super) fn bump_generation(&self) -> Result<u64> {
        let g = self.meta("generation")? + 1;
        self.set_meta("generation", g)?;
        Ok(g)
    }

    /// Give up the transaction (and the write guard).
    pub(super) fn abort(self) -> Result<()> {
        self.txn.abort()?;
        Ok(())
    }

    /// Commit; returns the write guard so that the caller's index update stays in order.
    pub(super) fn commit(self) -> Result<Option<WriteGuard<'a>>> {
        // A replayed (or replicated) op's commits say which op they belong to.
        if let Some((seq, _)) = super::log::replaying() {
            self.set_meta(super::log::APPLYING, seq)?;
        }
        let Txn { txn, cache, changes, guard } = self;
        txn.commit().context("cannot commit to the memory store")?;
        if let Some(cache) = cache
            && let Ok(mut cache) = cache.lock()
        {
            for change in changes.into_inner() {
                match change {
                    Change::Upsert(r) => {
                        if let Some(ns) = cache.get_mut(&r.namespace) {
                            ns.insert(r.id, *r);
                        }
                    }
                    Change::Remove(namespace, id) => {
                        if let Some(ns) = cache.get_mut(&namespace) {
                            ns.remove(&id);
                        }
                    }
                }
            }
        }
        Ok(guard)
    }
}

/// Bring the store to [`SCHEMA_VERSION`]; creates the tables of a new store.
pub(super) fn migrate(db: &Database, now: u64) -> Result<()> {
    let txn = db.begin_write().context("cannot start the memory store migration")?;
    let version = txn.open_table(META)?.get("schema_version")?.map(|v| v.value());
    match version {
        Some(SCHEMA_VERSION) => {
            txn.abort()?;
            return Ok(());
        }
        Some(v) if v > SCHEMA_VERSION => {
            bail!(
                "the memory store was written by a newer skillhost (schema {v}, this one knows {SCHEMA_VERSION}); upgrade skillhost"
            )
        }
        _ => {}
    }
    let t = Txn { txn, cache: None, changes: std::cell::RefCell::new(Vec::new()), guard: None };
    t.txn.open_table(RECORDS)?;
    t.txn.open_multimap_table(BY_NAMESPACE)?;
    t.txn.open_multimap_table(BY_SKILL)?;
    t.txn.open_multimap_table(PROTECTED)?;
    t.txn.open_table(ARCHIVE)?;
    t.txn.open_table(SESSION_KV)?;
    t.txn.open_table(PROMOTED)?;
    let has_v1 = t.txn.list_tables()?.any(|h| h.name() == V1_RECORDS.name());
    if has_v1 {
        #[derive(Deserialize)]
        struct V1 {
            id: u64,
            namespace: String,
            kind: MemoryKind,
            content: String,
            priority: u8,
            tags: Vec<String>,
            created_ms: u64,
            provenance: Provenance,
        }
        let old: Vec<V1> = {
            let table = t.txn.open_table(V1_RECORDS)?;
            let mut out = Vec::new();
            for row in table.iter()? {
                let (k, v) = row?;
                out.push(
                    serde_json::from_slice(v.value())
                        .with_context(|| format!("schema-1 memory record #{} is corrupt", k.value()))?,
                );
            }
            out
        };
        let mut next = 1;
        for o in old {
            let mut r = MemoryRecord {
                id: o.id,
                namespace: o.namespace,
                session: o.provenance.session.clone(),
                kind: o.kind,
                content: o.content,
                priority: o.priority.min(5),
                importance: 0.0,
                tags: o.tags,
                created_ms: o.created_ms,
                updated_ms: o.created_ms,
                expires_ms: (o.priority <= 1).then(|| o.created_ms + DAY_MS),
                deprecated: None,
                references: 0,
                provenance: vec![o.provenance],
                referenced_ms: None,
                supersedes: Vec::new(),
                superseded_by: None,
            };
            r.importance = round_importance(r.importance_at(now));
            next = next.max(r.id + 1);
            t.put(&r)?;
        }
        t.txn.delete_table(V1_RECORDS)?;
        t.set_meta("next_id", next.max(t.meta("next_id")?))?;
    }
    t.set_meta("schema_version", SCHEMA_VERSION)?;
    t.bump_generation()?;
    t.commit()?;
    Ok(())
}
