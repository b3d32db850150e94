//! Memory behind the `memory` and `session` host interfaces.
//!
//! [`MemoryStore`] is the seam: the sandbox talks only to the trait. [`RedbStore`] is the
//! minimal implementation that ships with the runtime (records and session snapshots in one
//! redb file, search by token overlap); the full memory system (BM25 index, tiers, MEMORY.md
//! budget, compaction) replaces the implementation, not the trait.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    Preference,
    Fact,
    TaskResult,
    Snapshot,
    Pitfall,
    General,
}

/// Who wrote a memory: the skill, the exact bytes of its version, and when in which session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub skill: String,
    pub skill_hash: String,
    pub session: String,
    pub step: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    pub id: u64,
    pub namespace: String,
    pub kind: MemoryKind,
    pub content: String,
    pub priority: u8,
    pub tags: Vec<String>,
    pub created_ms: u64,
    pub provenance: Provenance,
}

/// A record to store; the store assigns id and creation time.
#[derive(Debug, Clone)]
pub struct NewRecord {
    pub namespace: String,
    pub kind: MemoryKind,
    pub content: String,
    pub priority: u8,
    pub tags: Vec<String>,
    pub provenance: Provenance,
}

/// Long-term memory and session working memory, as the sandbox needs them.
pub trait MemoryStore: Send + Sync {
    /// Records of `namespace` relevant to `query`, best first, with their scores.
    fn search(&self, namespace: &str, query: &str, limit: usize) -> Result<Vec<(MemoryRecord, f32)>>;
    /// Store a record; returns its id.
    fn insert(&self, record: NewRecord) -> Result<u64>;
    /// All records of `namespace`, oldest first.
    fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>>;
    fn session_get(&self, session: &str, key: &str) -> Result<Option<String>>;
    fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()>;
    fn session_keys(&self, session: &str) -> Result<Vec<String>>;
}

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("memories");
const SESSION: TableDefinition<(&str, &str), &str> = TableDefinition::new("session_kv");

/// The minimal redb-backed store: one file, every write its own committed transaction.
pub struct RedbStore {
    db: Database,
}

impl RedbStore {
    pub fn open(path: &Path) -> Result<RedbStore> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => anyhow!(
                "memory store {} is in use by another skillhost process; wait for it to finish and retry",
                path.display()
            ),
            other => anyhow!("cannot open memory store {}: {other}", path.display()),
        })?;
        let txn = db.begin_write()?;
        txn.open_table(RECORDS)?;
        txn.open_table(SESSION)?;
        txn.commit()?;
        Ok(RedbStore { db })
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Lowercased words; CJK characters count as one token each so Chinese text matches too.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            out.push(c.to_string());
        } else if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x3040..=0x30FF | 0xAC00..=0xD7AF)
}

impl MemoryStore for RedbStore {
    fn search(&self, namespace: &str, query: &str, limit: usize) -> Result<Vec<(MemoryRecord, f32)>> {
        let q: std::collections::BTreeSet<String> = tokens(query).into_iter().collect();
        let mut hits: Vec<(MemoryRecord, f32)> = self
            .list(namespace)?
            .into_iter()
            .filter_map(|r| {
                let doc: std::collections::HashSet<String> =
                    tokens(&r.content).into_iter().chain(r.tags.iter().flat_map(|t| tokens(t))).collect();
                let matched = q.iter().filter(|t| doc.contains(*t)).count();
                (matched > 0).then(|| {
                    let score = matched as f32 / q.len() as f32 + r.priority as f32 * 0.01;
                    (r, score)
                })
            })
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.created_ms.cmp(&a.0.created_ms)));
        hits.truncate(limit);
        Ok(hits)
    }

    fn insert(&self, r: NewRecord) -> Result<u64> {
        let txn = self.db.begin_write()?;
        let id = {
            let mut table = txn.open_table(RECORDS)?;
            let id = table.last()?.map(|(k, _)| k.value() + 1).unwrap_or(1);
            let record = MemoryRecord {
                id,
                namespace: r.namespace,
                kind: r.kind,
                content: r.content,
                priority: r.priority.min(5),
                tags: r.tags,
                created_ms: now_ms(),
                provenance: r.provenance,
            };
            table.insert(id, serde_json::to_vec(&record)?.as_slice())?;
            id
        };
        txn.commit()?;
        Ok(id)
    }

    fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(RECORDS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (_, v) = row?;
            let r: MemoryRecord = serde_json::from_slice(v.value()).context("corrupt memory record")?;
            if r.namespace == namespace {
                out.push(r);
            }
        }
        Ok(out)
    }

    fn session_get(&self, session: &str, key: &str) -> Result<Option<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION)?;
        Ok(table.get((session, key))?.map(|v| v.value().to_string()))
    }

    fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(SESSION)?.insert((session, key), value)?;
        txn.commit()?;
        Ok(())
    }

    fn session_keys(&self, session: &str) -> Result<Vec<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION)?;
        let mut keys = Vec::new();
        for row in table.range((session, "")..)? {
            let (k, _) = row?;
            let (s, key) = k.value();
            if s != session {
                break;
            }
            keys.push(key.to_string());
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ns: &str, content: &str) -> NewRecord {
        NewRecord {
            namespace: ns.into(),
            kind: MemoryKind::Fact,
            content: content.into(),
            priority: 3,
            tags: vec![],
            provenance: Provenance { skill: "s".into(), skill_hash: "h".into(), session: "x".into(), step: 1 },
        }
    }

    #[test]
    fn records_and_sessions_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        {
            let s = RedbStore::open(&path).unwrap();
            s.insert(record("default", "UART RX overrun when DMA ring is exhausted")).unwrap();
            s.insert(record("default", "串口 乱码 与 波特率 有关")).unwrap();
            s.insert(record("other", "UART in another namespace")).unwrap();
            s.session_set("s1", "b", "2").unwrap();
            s.session_set("s1", "a", "1").unwrap();
            s.session_set("s2", "c", "3").unwrap();
        }
        let s = RedbStore::open(&path).unwrap();
        let hits = s.search("default", "uart overrun", 5).unwrap();
        assert_eq!(hits.len(), 1);
        assert!(hits[0].0.content.contains("DMA"));
        assert_eq!(s.search("default", "乱码", 5).unwrap().len(), 1);
        assert_eq!(s.session_keys("s1").unwrap(), vec!["a", "b"]);
        assert_eq!(s.session_get("s2", "c").unwrap().as_deref(), Some("3"));
        assert_eq!(s.session_get("s2", "a").unwrap(), None);
    }
}
