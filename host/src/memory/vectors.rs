//! Record embeddings: derived from the records like the text index, stored in redb next
//! to them, held in memory for brute-force cosine search.
//!
//! ```text
//! record_vectors  id -> u64 content hash, u8 language, u16 namespace length, namespace, f32 x dim
//! vector_meta     "model" -> identity of the model that computed them
//! ```
//!
//! A vector is computed when its record is written (the add path embeds before it takes
//! the write guard, so concurrent adds embed in parallel; batch writes and imports embed in
//! one batched pass), removed with its record, and recomputed when its content changes or
//! the model changes (a different identity clears the table). Opening a store embeds the
//! records that have none (a store from before vectors, a deleted table). The table is
//! committed without fsync: it can always be recomputed from the records.
//! Without a model nothing here runs and search stays lexical.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{Context as _, Result, anyhow};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::embed::{EmbedModel, TextRole};
use super::records::MemoryRecord;
use super::schema::{RECORDS, decode_record};

pub(super) const VECTORS: TableDefinition<u64, &[u8]> = TableDefinition::new("record_vectors");
pub(super) const VECTOR_META: TableDefinition<&str, &str> = TableDefinition::new("vector_meta");
/// Records embedded per pass when filling in missing vectors.
const FILL_BATCH: usize = 64;
/// Precomputed vectors waiting for their write (bounded: a failed write leaves one behind).
const MAX_PENDING: usize = 256;

/// Script of a record, for the per-language correction of cosine scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Script {
    Latin,
    Cjk,
}

impl Script {
    pub(super) fn of(text: &str) -> Script {
        let (mut cjk, mut letters) = (0usize, 0usize);
        for c in text.chars().filter(|c| c.is_alphanumeric()) {
            letters += 1;
            if matches!(c as u32, 0x3040..=0x30ff | 0x3400..=0x4dbf | 0x4e00..=0x9fff | 0xac00..=0xd7af | 0xf900..=0xfaff)
            {
                cjk += 1;
            }
        }
        // A CJK character carries about a word: a quarter of them makes it a CJK text.
        if cjk * 4 >= letters.max(1) { Script::Cjk } else { Script::Latin }
    }
}

pub(super) struct Entry {
    pub namespace: String,
    pub script: Script,
    hash: u64,
    pub vector: Box<[f32]>,
}

/// The vectors of one store, and the model that makes them.
pub(super) struct Vectors {
    pub model: Option<Arc<EmbedModel>>,
    pub entries: RwLock<HashMap<u64, Entry>>,
    pending: Mutex<HashMap<u64, Vec<f32>>>,
}

fn content_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

fn encode(e: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(11 + e.namespace.len() + e.vector.len() * 4);
    out.extend_from_slice(&e.hash.to_le_bytes());
    out.push(match e.script {
        Script::Latin => 0,
        Script::Cjk => 1,
    });
    out.extend_from_slice(&(e.namespace.len() as u16).to_le_bytes());
    out.extend_from_slice(e.namespace.as_bytes());
    for v in e.vector.iter() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn decode(bytes: &[u8], dim: usize) -> Option<Entry> {
    let hash = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let script = match bytes.get(8)? {
        0 => Script::Latin,
        1 => Script::Cjk,
        _ => return None,
    };
    let ns_len = u16::from_le_bytes(bytes.get(9..11)?.try_into().ok()?) as usize;
    let namespace = std::str::from_utf8(bytes.get(11..11 + ns_len)?).ok()?.to_string();
    let floats = bytes.get(11 + ns_len..)?;
    if floats.len() != dim * 4 {
        return None;
    }
    let vector = floats.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Some(Entry { namespace, script, hash, vector })
}

impl Vectors {
    /// Load the stored vectors of `db` (clearing them if `model` is another one) and embed
    /// the records that have none.
    pub(super) fn open(db: &Database, model: Option<Arc<EmbedModel>>) -> Result<Vectors> {
        let vectors = Vectors { model, entries: RwLock::new(HashMap::new()), pending: Mutex::new(HashMap::new()) };
        let Some(model) = vectors.model.clone() else { return Ok(vectors) };
        let stored_identity = {
            let txn = db.begin_read()?;
            match txn.open_table(VECTOR_META) {
                Ok(t) => t.get("model")?.map(|v| v.value().to_string()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(e.into()),
            }
        };
        if stored_identity.as_deref() != Some(model.identity()) {
            let mut txn = db.begin_write()?;
            txn.set_durability(redb::Durability::None).map_err(|e| anyhow!("memory store: {e}"))?;
            let _ = txn.delete_table(VECTORS);
            txn.open_table(VECTORS)?;
            txn.open_table(VECTOR_META)?.insert("model", model.identity())?;
            txn.commit().context("cannot reset the memory vectors")?;
        }
        let mut missing = Vec::new();
        let mut orphans = Vec::new();
        {
            let txn = db.begin_read()?;
            let table = txn.open_table(VECTORS)?;
            let records = txn.open_table(RECORDS)?;
            let mut entries = vectors.entries.write().map_err(|_| anyhow!("memory vectors poisoned"))?;
            for row in table.iter()? {
                let (id, v) = row?;
                if let Some(e) = decode(v.value(), model.dim()) {
                    entries.insert(id.value(), e);
                }
            }
            let mut ids = HashSet::new();
            for row in records.iter()? {
                let (id, _) = row?;
                ids.insert(id.value());
                if !entries.contains_key(&id.value()) {
                    missing.push(id.value());
                }
            }
            orphans.extend(entries.keys().copied().filter(|id| !ids.contains(id)));
        }
        if !orphans.is_empty() {
            vectors.apply(db, &[], &orphans)?;
        }
        if !missing.is_empty() {
            if missing.len() > FILL_BATCH {
                tracing::info!(target: "skillhost::progress", "embedding {} memories for semantic search (once)...", missing.len());
            }
            for ids in missing.chunks(FILL_BATCH) {
                let records: Vec<MemoryRecord> = {
                    let txn = db.begin_read()?;
                    let t = txn.open_table(RECORDS)?;
                    let mut out = Vec::new();
                    for &id in ids {
                        if let Some(v) = t.get(id)? {
                            out.push(decode_record(v.value(), id)?);
                        }
                    }
                    out
                };
                vectors.apply(db, &records.iter().collect::<Vec<_>>(), &[])?;
            }
        }
        Ok(vectors)
    }

    /// Embed `content` now, outside the write guard, for the write that follows.
    pub(super) fn prepare(&self, content: &str) {
        let Some(model) = &self.model else { return };
        let hash = content_hash(content.trim());
        if self.pending.lock().map(|p| p.contains_key(&hash)).unwrap_or(true) {
            return;
        }
        let v = model.embed(TextRole::Passage, content.trim());
        if let Ok(mut p) = self.pending.lock() {
            if p.len() >= MAX_PENDING {
                p.clear();
            }
            p.insert(hash, v);
        }
    }

    /// Bring the vectors in step with a committed write: embed `upserts` whose content
    /// changed (in one batch), drop `deletes`.
    pub(super) fn apply(&self, db: &Database, upserts: &[&MemoryRecord], deletes: &[u64]) -> Result<()> {
        let Some(model) = &self.model else { return Ok(()) };
        let mut changed: Vec<(&MemoryRecord, u64)> = Vec::new();
        {
            let entries = self.entries.read().map_err(|_| anyhow!("memory vectors poisoned"))?;
            let mut seen = HashSet::new();
            for r in upserts {
                let hash = content_hash(&r.content);
                let same = entries.get(&r.id).is_some_and(|e| e.hash == hash && e.namespace == r.namespace);
                if !same && seen.insert(r.id) {
                    changed.push((r, hash));
                }
            }
        }
        if changed.is_empty() && deletes.is_empty() {
            return Ok(());
        }
        let mut computed: Vec<Option<Vec<f32>>> = {
            let mut pending = self.pending.lock().map_err(|_| anyhow!("memory vectors poisoned"))?;
            changed.iter().map(|(_, h)| pending.remove(h)).collect()
        };
        // Each distinct text is embedded once (an import often repeats a record's text).
        let mut slot_of_text: HashMap<&str, usize> = HashMap::new();
        let mut texts: Vec<&str> = Vec::new();
        let mut slots: Vec<(usize, usize)> = Vec::new();
        for (i, (r, _)) in changed.iter().enumerate().filter(|(i, _)| computed[*i].is_none()) {
            let slot = *slot_of_text.entry(r.content.as_str()).or_insert_with(|| {
                texts.push(r.content.as_str());
                texts.len() - 1
            });
            slots.push((i, slot));
        }
        let fresh_vectors = model.embed_batch(TextRole::Passage, &texts);
        for (i, slot) in slots {
            computed[i] = fresh_vectors.get(slot).cloned();
        }
        let fresh: Vec<(u64, Entry)> = changed
            .iter()
            .zip(computed)
            .map(|((r, hash), v)| {
                let entry = Entry {
                    namespace: r.namespace.clone(),
                    script: Script::of(&r.content),
                    hash: *hash,
                    vector: v.unwrap_or_default().into_boxed_slice(),
                };
                (r.id, entry)
            })
            .collect();
        let mut txn = db.begin_write()?;
        txn.set_durability(redb::Durability::None).map_err(|e| anyhow!("memory store: {e}"))?;
        {
            let mut t = txn.open_table(VECTORS)?;
            for id in deletes {
                t.remove(id)?;
            }
            for (id, e) in &fresh {
                t.insert(id, encode(e).as_slice())?;
            }
        }
        txn.commit().context("cannot store the memory vectors")?;
        let mut entries = self.entries.write().map_err(|_| anyhow!("memory vectors poisoned"))?;
        for id in deletes {
            entries.remove(id);
        }
        entries.extend(fresh);
        Ok(())
    }

    /// Bytes the in-memory vectors take (for footprint reports).
    pub(super) fn footprint(&self) -> usize {
        self.entries.read().map(|e| e.values().map(|v| v.vector.len() * 4 + v.namespace.len() + 48).sum()).unwrap_or(0)
    }
}
