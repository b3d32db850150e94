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
//! In memory the vectors are a [`Table`]: signed bytes with a scale per 32 values (a
//! quarter of f32's memory, ~0.5 KB a record) in one contiguous block, scanned with the
//! encoder's integer kernel (on the rayon pool for large stores). A byte dot product is
//! within 2e-3 of the f32 one (tested): enough to pick candidates and to measure the crowd
//! a cosine is compared with; the candidates' final cosines come from the f32 vectors in redb.
//! Query embeddings are kept in a small LRU by their text ([`Vectors::query_embedding`]):
//! recall and a skill's searches repeat the same query, and the embedding is most of a
//! hybrid search's time.
//! Without a model nothing here runs and search stays lexical.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{Context as _, Result, anyhow};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::calibration::Calibration;
use super::embed::{ByteVectors, EmbedModel, TextRole};
use super::records::MemoryRecord;
use super::schema::{RECORDS, decode_record};
use super::script::Script;

pub(super) const VECTORS: TableDefinition<u64, &[u8]> = TableDefinition::new("record_vectors");
pub(super) const VECTOR_META: TableDefinition<&str, &str> = TableDefinition::new("vector_meta");
/// Records embedded per pass when filling in missing vectors.
const FILL_BATCH: usize = 64;
/// Precomputed vectors waiting for their write (bounded: a failed write leaves one behind).
const MAX_PENDING: usize = 256;
/// Query embeddings kept (384 floats each: 1.5 KiB).
const QUERY_CACHE: usize = 256;

/// One stored vector row, as redb holds it.
pub(super) struct Entry {
    pub namespace: String,
    pub script: Script,
    hash: u64,
    pub vector: Box<[f32]>,
}

/// What the table keeps of a record besides its vector.
#[derive(Clone, Copy)]
struct RowMeta {
    id: u64,
    hash: u64,
    namespace: u32,
    script: Script,
}

/// The in-memory vectors of a store: one byte row per record, in no particular order
/// (a removal moves the last row into the hole).
pub(super) struct Table {
    rows: ByteVectors,
    meta: Vec<RowMeta>,
    row_of: HashMap<u64, usize>,
    namespaces: Vec<String>,
    namespace_ids: HashMap<String, u32>,
}

/// A record's approximate cosine to a query, from [`Table::scan`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Scored {
    pub id: u64,
    pub cosine: f32,
    pub script: Script,
}

impl Table {
    fn new(model: &EmbedModel) -> Result<Table> {
        Table::with_dim(model.dim(), model.kernel())
    }

    fn with_dim(dim: usize, kernel: super::embed::Kernel) -> Result<Table> {
        Ok(Table {
            rows: ByteVectors::new(dim, kernel)?,
            meta: Vec::new(),
            row_of: HashMap::new(),
            namespaces: Vec::new(),
            namespace_ids: HashMap::new(),
        })
    }

    pub(super) fn len(&self) -> usize {
        self.meta.len()
    }

    fn namespace_id(&mut self, namespace: &str) -> u32 {
        if let Some(&id) = self.namespace_ids.get(namespace) {
            return id;
        }
        let id = self.namespaces.len() as u32;
        self.namespaces.push(namespace.to_string());
        self.namespace_ids.insert(namespace.to_string(), id);
        id
    }

    /// Is the vector of record `id` the one of `hash` in `namespace`?
    fn is_current(&self, id: u64, hash: u64, namespace: &str) -> bool {
        self.row_of.get(&id).is_some_and(|&row| {
            let m = self.meta[row];
            m.hash == hash && self.namespaces[m.namespace as usize] == namespace
        })
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.row_of.contains_key(&id)
    }

    fn insert(&mut self, id: u64, e: &Entry) {
        if e.vector.len() != self.rows.dim() {
            // Not embedded (a failed pass): the record competes on words until the next open.
            self.remove(id);
            return;
        }
        let meta = RowMeta { id, hash: e.hash, namespace: self.namespace_id(&e.namespace), script: e.script };
        match self.row_of.get(&id) {
            Some(&row) => {
                self.rows.set(row, &e.vector);
                self.meta[row] = meta;
            }
            None => {
                self.rows.push(&e.vector);
                self.meta.push(meta);
                self.row_of.insert(id, self.meta.len() - 1);
            }
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(row) = self.row_of.remove(&id) else { return };
        self.rows.swap_remove(row);
        self.meta.swap_remove(row);
        if let Some(moved) = self.meta.get(row) {
            self.row_of.insert(moved.id, row);
        }
    }

    /// Every record of `namespace` (all with `None`) with its approximate cosine to the
    /// unit vector `query`.
    pub(super) fn scan(&self, query: &[f32], namespace: Option<&str>) -> Vec<Scored> {
        let wanted = match namespace {
            Some(ns) => match self.namespace_ids.get(ns) {
                Some(&id) => Some(id),
                None => return Vec::new(),
            },
            None => None,
        };
        let dots = self.rows.dots(query);
        self.meta
            .iter()
            .zip(dots)
            .filter(|(m, _)| wanted.is_none_or(|w| m.namespace == w))
            .map(|(m, cosine)| Scored { id: m.id, cosine, script: m.script })
            .collect()
    }

    fn footprint(&self) -> usize {
        // Rows, metadata, and the id map (a key, a row and a control byte, over its load factor).
        self.rows.footprint()
            + self.meta.capacity() * std::mem::size_of::<RowMeta>()
            + self.row_of.capacity() * 17
            + self.namespaces.iter().map(|n| 2 * n.len() + 64).sum::<usize>()
    }
}

/// The model and the in-memory vectors it made (a store has both or neither).
pub(super) struct Semantic {
    pub model: Arc<EmbedModel>,
    pub table: RwLock<Table>,
    /// The reference passages' vectors (calibration.rs), embedded on first use.
    pub calibration: std::sync::OnceLock<Calibration>,
}

/// The vectors of one store, and the model that makes them.
pub(super) struct Vectors {
    /// `None`: no model, search is lexical.
    pub semantic: Option<Semantic>,
    pending: Mutex<HashMap<u64, Vec<f32>>>,
    /// Vectors handed in with their records ([`Vectors::give`]), taken by the next write.
    given: Mutex<HashMap<u64, Vec<f32>>>,
    queries: Mutex<QueryCache>,
}

/// Recent query embeddings by normalised text, least recently used dropped first.
#[derive(Default)]
struct QueryCache {
    map: HashMap<String, (Arc<Vec<f32>>, u64)>,
    clock: u64,
}

impl QueryCache {
    fn get(&mut self, key: &str) -> Option<Arc<Vec<f32>>> {
        self.clock += 1;
        let now = self.clock;
        self.map.get_mut(key).map(|(v, used)| {
            *used = now;
            v.clone()
        })
    }

    fn put(&mut self, key: String, v: Arc<Vec<f32>>) {
        if self.map.len() >= QUERY_CACHE
            && !self.map.contains_key(&key)
            && let Some(oldest) = self.map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())
        {
            self.map.remove(&oldest);
        }
        self.clock += 1;
        self.map.insert(key, (v, self.clock));
    }
}

/// The cache key of a query text: runs of spaces become one (the tokenizer does the same,
/// so two texts with one key embed alike); nothing else changes (e5 tells case apart).
fn query_key(text: &str) -> String {
    let mut key = String::with_capacity(text.len());
    for c in text.trim().chars() {
        if !(c == ' ' && key.ends_with(' ')) {
            key.push(c);
        }
    }
    key
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

/// A stored row, parsed in place: the vector's bytes are read only when asked for.
struct StoredRow<'a> {
    hash: u64,
    script: Script,
    namespace: &'a str,
    floats: &'a [u8],
}

impl StoredRow<'_> {
    /// The vector, into `out` (its allocation reused across rows).
    fn read_vector(&self, out: &mut Vec<f32>) {
        out.clear();
        out.extend(self.floats.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    }
}

fn parse(bytes: &[u8], dim: usize) -> Option<StoredRow<'_>> {
    let hash = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let script = match bytes.get(8)? {
        0 => Script::Latin,
        1 => Script::Cjk,
        _ => return None,
    };
    let ns_len = u16::from_le_bytes(bytes.get(9..11)?.try_into().ok()?) as usize;
    let namespace = std::str::from_utf8(bytes.get(11..11 + ns_len)?).ok()?;
    let floats = bytes.get(11 + ns_len..)?;
    (floats.len() == dim * 4).then_some(StoredRow { hash, script, namespace, floats })
}

fn decode(bytes: &[u8], dim: usize) -> Option<Entry> {
    let row = parse(bytes, dim)?;
    let mut vector = Vec::with_capacity(dim);
    row.read_vector(&mut vector);
    Some(Entry { namespace: row.namespace.to_string(), script: row.script, hash: row.hash, vector: vector.into() })
}

impl Vectors {
    /// Load the stored vectors of `db` (clearing them if `model` is another one) and embed
    /// the records that have none.
    pub(super) fn open(db: &Database, model: Option<Arc<EmbedModel>>) -> Result<Vectors> {
        let semantic = match model {
            Some(model) => Some(Semantic {
                table: RwLock::new(Table::new(&model)?),
                calibration: std::sync::OnceLock::new(),
                model,
            }),
            None => None,
        };
        let vectors = Vectors {
            semantic,
            pending: Mutex::new(HashMap::new()),
            given: Mutex::new(HashMap::new()),
            queries: Mutex::new(QueryCache::default()),
        };
        let Some(Semantic { model, table, .. }) = &vectors.semantic else { return Ok(vectors) };
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
            let stored = txn.open_table(VECTORS)?;
            let records = txn.open_table(RECORDS)?;
            let mut table = table.write().map_err(|_| anyhow!("memory vectors poisoned"))?;
            for row in stored.iter()? {
                let (id, v) = row?;
                if let Some(e) = decode(v.value(), model.dim()) {
                    table.insert(id.value(), &e);
                }
            }
            let mut ids = HashSet::new();
            for row in records.iter()? {
                let (id, _) = row?;
                ids.insert(id.value());
                if !table.contains(id.value()) {
                    missing.push(id.value());
                }
            }
            orphans.extend(table.meta.iter().map(|m| m.id).filter(|id| !ids.contains(id)));
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

    /// The embedding model, if the store has one.
    pub(super) fn model(&self) -> Option<&Arc<EmbedModel>> {
        self.semantic.as_ref().map(|s| &s.model)
    }

    /// The exact (f32, from redb) cosines of `query` to the records `ids` that have a vector.
    pub(super) fn exact_cosines(
        &self,
        db: &Database,
        query: &[f32],
        ids: impl IntoIterator<Item = u64>,
    ) -> Result<HashMap<u64, (f32, Script)>> {
        let txn = db.begin_read()?;
        let stored = match txn.open_table(VECTORS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(HashMap::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = HashMap::new();
        let mut vector = Vec::with_capacity(query.len());
        for id in ids {
            if let Some(v) = stored.get(id)?
                && let Some(row) = parse(v.value(), query.len())
            {
                row.read_vector(&mut vector);
                out.insert(id, (super::embed::cosine(query, &vector), row.script));
            }
        }
        Ok(out)
    }

    /// (records with a vector, bytes the in-memory vectors take).
    pub(super) fn stats(&self) -> (usize, usize) {
        match self.semantic.as_ref().and_then(|s| s.table.read().ok()) {
            Some(t) => (t.len(), t.footprint()),
            None => (0, 0),
        }
    }
    /// The reference passages of the model (calibration.rs): from `db`, or embedded (and
    /// stored there) on first use.
    pub(super) fn calibration(&self, db: &Database) -> Result<&Calibration> {
        let semantic = self.semantic.as_ref().ok_or_else(|| anyhow!("no embedding model"))?;
        if let Some(c) = semantic.calibration.get() {
            return Ok(c);
        }
        let c = Calibration::open(db, &semantic.model)?;
        Ok(semantic.calibration.get_or_init(|| c))
    }

    /// The query embedding of `text` by `model` (one of this store's), from the cache when
    /// the same text was embedded lately.
    pub(super) fn query_embedding(&self, model: &EmbedModel, text: &str) -> Arc<Vec<f32>> {
        let key = query_key(text);
        if let Some(v) = self.queries.lock().ok().and_then(|mut c| c.get(&key)) {
            return v;
        }
        let v = Arc::new(model.embed(TextRole::Query, &key));
        if let Ok(mut c) = self.queries.lock() {
            c.put(key, v.clone());
        }
        v
    }

    /// Use `vector` for the record with `content` in the next write instead of embedding
    /// it (benchmarks build large stores from vectors computed elsewhere). It must have the
    /// model's dimension and unit length.
    pub(super) fn give(&self, content: &str, mut vector: Vec<f32>) -> Result<()> {
        let Some(model) = self.model() else { return Err(anyhow!("no embedding model: nothing to give vectors to")) };
        if vector.len() != model.dim() {
            return Err(anyhow!("a vector of {} values, the model's have {}", vector.len(), model.dim()));
        }
        super::embed::normalize(&mut vector);
        self.given.lock().map_err(|_| anyhow!("memory vectors poisoned"))?.insert(content_hash(content.trim()), vector);
        Ok(())
    }

    /// Embed `content` now, outside the write guard, for the write that follows.
    pub(super) fn prepare(&self, content: &str) {
        let Some(model) = self.model() else { return };
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
        let Some(Semantic { model, table, .. }) = &self.semantic else { return Ok(()) };
        let mut changed: Vec<(&MemoryRecord, u64)> = Vec::new();
        {
            let table = table.read().map_err(|_| anyhow!("memory vectors poisoned"))?;
            let mut seen = HashSet::new();
            for r in upserts {
                let hash = content_hash(&r.content);
                let same = table.is_current(r.id, hash, &r.namespace);
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
            let mut given = self.given.lock().map_err(|_| anyhow!("memory vectors poisoned"))?;
            changed.iter().map(|(_, h)| pending.remove(h).or_else(|| given.remove(h))).collect()
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
        let mut table = table.write().map_err(|_| anyhow!("memory vectors poisoned"))?;
        for id in deletes {
            table.remove(*id);
        }
        for (id, e) in &fresh {
            table.insert(*id, e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_cache_keeps_the_most_recently_used() {
        let mut cache = QueryCache::default();
        for i in 0..QUERY_CACHE {
            cache.put(format!("q{i}"), Arc::new(vec![i as f32]));
        }
        // q0 is used again, so q1 is now the least recently used and goes first.
        assert_eq!(cache.get("q0").map(|v| v[0]), Some(0.0));
        cache.put("new".into(), Arc::new(vec![-1.0]));
        assert_eq!(cache.map.len(), QUERY_CACHE);
        assert!(cache.get("q1").is_none(), "the least recently used was dropped");
        assert!(cache.get("q0").is_some() && cache.get("q2").is_some() && cache.get("new").is_some());
        // Putting a key already there replaces it and drops nothing.
        cache.put("q2".into(), Arc::new(vec![2.5]));
        assert_eq!((cache.map.len(), cache.get("q2").map(|v| v[0])), (QUERY_CACHE, Some(2.5)));
    }

    fn entry(namespace: &str, hot: usize, hash: u64) -> Entry {
        let mut vector = vec![0f32; 64];
        vector[hot] = 1.0;
        Entry { namespace: namespace.into(), script: Script::Latin, hash, vector: vector.into_boxed_slice() }
    }

    #[test]
    fn the_table_keeps_ids_rows_and_namespaces_in_step_through_removals() {
        let mut t = Table::with_dim(64, super::super::embed::Kernel::detect()).unwrap();
        for id in 0..10u64 {
            t.insert(id, &entry(if id % 2 == 0 { "even" } else { "odd" }, id as usize, id));
        }
        // Remove from the middle, the end and the front: the moved rows keep their ids.
        for id in [3, 9, 0] {
            t.remove(id);
        }
        t.remove(42); // not there: nothing happens
        // Record 4 now points along axis 7 (a new version of its content).
        t.insert(4, &entry("even", 7, 99));
        assert_eq!(t.len(), 7);
        assert!(t.is_current(4, 99, "even") && !t.is_current(4, 4, "even") && !t.is_current(4, 99, "odd"));
        let best = |q: usize, ns: Option<&str>| {
            let mut query = vec![0f32; 64];
            query[q] = 1.0;
            let scored = t.scan(&query, ns);
            let mut top = scored.iter().filter(|s| s.cosine > 0.9).map(|s| s.id).collect::<Vec<_>>();
            top.sort();
            (scored.len(), top)
        };
        for id in [1u64, 2, 5, 6, 8] {
            assert_eq!(best(id as usize, None), (7, vec![id]), "record {id} is found by its own axis");
        }
        assert_eq!(best(7, None).1, vec![4, 7]);
        // Left in "even": 2, 4, 6, 8; in "odd": 1, 5, 7.
        assert_eq!(best(7, Some("even")), (4, vec![4]));
        assert_eq!(best(7, Some("odd")), (3, vec![7]));
        assert_eq!(best(7, Some("nowhere")), (0, vec![]));
        // A vector of the wrong length is not kept (the record then competes on words).
        t.insert(5, &Entry { vector: vec![1.0; 3].into_boxed_slice(), ..entry("odd", 5, 5) });
        assert!(!t.contains(5) && t.len() == 6);
    }

    #[test]
    fn query_keys_fold_only_what_the_tokenizer_folds() {
        assert_eq!(query_key("  how do   I  deploy "), "how do I deploy");
        // Case, tabs and full-width spaces are left alone: they may embed differently.
        assert_ne!(query_key("Deploy"), query_key("deploy"));
        assert_eq!(query_key("a\tb"), "a\tb");
        assert_eq!(query_key("部署\u{3000}流程"), "部署\u{3000}流程");
    }
}
