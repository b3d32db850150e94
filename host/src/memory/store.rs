//! [`Memory`]: the redb store, its index, the daily notes and the housekeeping rules.
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
//! agent_sessions    session id -> JSON    (paused agent runs)
//! session_kv        (session, key) -> value  (working memory written by skills)
//! daily_promoted    (date, line) -> record id
//! ```
//!
//! Each public write is one redb transaction (durable on return), followed by one index
//! commit stamped with the new generation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use redb::{
    Database, MultimapTableDefinition, ReadableDatabase, ReadableMultimapTable, ReadableTable, TableDefinition,
    TableHandle, WriteTransaction,
};
use serde::{Deserialize, Serialize};

use super::MemoryStore;
use super::daily::{self, DailyEntry, DailyNotes, PROMOTE_FLAG};
use super::index::{self, DailyHit, MemoryIndex};
use super::lock::StoreLock;
use super::records::{
    ArchiveEntry, Deprecation, MemoryKind, MemoryRecord, NewRecord, Provenance, SearchFilter, SearchHit, SearchOrder,
};
use super::tokens::count_tokens;
use super::view::{self, MemoryView};
use crate::search::analyze;

const SCHEMA_VERSION: u64 = 2;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("memory_records");
const BY_NAMESPACE: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("records_by_ns");
const BY_SKILL: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("records_by_skill");
/// Live priority-5 records per namespace: the budget check reads only these.
const PROTECTED: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("protected_by_ns");
const ARCHIVE: TableDefinition<u64, &[u8]> = TableDefinition::new("archive");
const AGENT_SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("agent_sessions");
const SESSION_KV: TableDefinition<(&str, &str), &str> = TableDefinition::new("session_kv");
const PROMOTED: TableDefinition<(&str, u32), u64> = TableDefinition::new("daily_promoted");
/// Schema 1: `id -> JSON` with a single provenance and no lifecycle fields.
const V1_RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("memories");

const DAY_MS: u64 = 86_400_000;
/// Ids stay below 2^53 so that they survive JSON tools that read numbers as doubles.
const MAX_ID: u64 = 1 << 53;
/// Most results one search returns.
pub const MAX_SEARCH_LIMIT: usize = 1000;

/// Tunables; [`MemoryConfig::default`] is what SPEC §5 prescribes.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// Hard budget of the MEMORY.md view, in cl100k_base tokens.
    pub budget_tokens: usize,
    /// Largest record accepted (content + tags, bytes); bigger ones must be summarized.
    pub max_record_bytes: usize,
    /// Records of priority <= 1 expire this long after they were written.
    pub low_priority_ttl_ms: u64,
    /// `memory maintain` archives daily notes older than this.
    pub daily_archive_days: i64,
    /// `memory maintain` archives records whose importance fell below this (priority < 5).
    pub demote_below: f64,
    /// Dice similarity of analyzed terms at or above which two records are one fact.
    pub merge_similarity: f64,
    /// How long to wait for another process holding the store.
    pub busy_wait: Duration,
}

impl Default for MemoryConfig {
    fn default() -> MemoryConfig {
        MemoryConfig {
            budget_tokens: 2000,
            max_record_bytes: 4096,
            low_priority_ttl_ms: DAY_MS,
            daily_archive_days: 90,
            demote_below: 0.01,
            merge_similarity: 0.75,
            busy_wait: Duration::from_secs(3),
        }
    }
}

type Clock = Box<dyn Fn() -> u64 + Send + Sync>;

/// The memory system of one skillhost home.
pub struct Memory {
    dir: PathBuf,
    db: Database,
    index: MemoryIndex,
    daily: DailyNotes,
    config: MemoryConfig,
    clock: Clock,
    line_tokens: Mutex<HashMap<(u64, u64, u8), usize>>,
    /// Views by namespace: (store generation, valid until ms, view).
    views: Mutex<HashMap<String, (u64, u64, MemoryView)>>,
    /// Records whose reference was counted by this open store.
    touched: Mutex<std::collections::HashSet<u64>>,
    records_cache: RecordCache,
    daily_fingerprint: Mutex<String>,
    /// An index update failed: rebuild on the next write rather than patch.
    index_dirty: std::sync::atomic::AtomicBool,
    _lock: StoreLock,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactReport {
    pub merged: Vec<(u64, u64)>,
    pub expired: Vec<u64>,
    pub deprecated_removed: Vec<u64>,
    /// Archive ids of everything removed (`memory restore ID` undoes one).
    pub archived: Vec<u64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct MaintainReport {
    pub compact: CompactReport,
    pub demoted: Vec<u64>,
    pub daily_archived: Vec<String>,
    pub promoted: Vec<u64>,
    /// Flagged notes that could not be promoted (too long, over the priority-5 budget...).
    pub promote_errors: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    pub imported: usize,
    pub unchanged: usize,
    /// (id in the file, id given) for records whose id was taken by a different record.
    pub renumbered: Vec<(u64, u64)>,
}

fn system_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).context("cannot encode a memory record")
}

fn decode_record(bytes: &[u8], id: u64) -> Result<MemoryRecord> {
    serde_json::from_slice(bytes).with_context(|| format!("memory record #{id} is corrupt"))
}

/// Namespaces name agent profiles: short, lowercase, safe in file names and JSON.
pub fn validate_namespace(ns: &str) -> Result<()> {
    let ok = !ns.is_empty()
        && ns.len() <= 64
        && ns.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    if !ok {
        bail!("memory namespace `{ns}` is invalid: use 1-64 characters of a-z, 0-9, `-`, `_`, `.`");
    }
    Ok(())
}

fn numbers(terms: &[String]) -> BTreeSet<&str> {
    terms.iter().filter(|t| t.chars().any(|c| c.is_ascii_digit())).map(String::as_str).collect()
}

/// Dice coefficient over analyzed terms; texts that mention different numbers are never
/// the same fact ("512 errors" vs "513 errors").
fn similarity(a: &[String], b: &[String]) -> f64 {
    if a.is_empty() || b.is_empty() || numbers(a) != numbers(b) {
        return 0.0;
    }
    let shared = a.iter().filter(|t| b.contains(t)).count();
    2.0 * shared as f64 / (a.len() + b.len()) as f64
}

/// Fold `other` into `keep`: the higher priority's wording wins, every provenance stays.
/// Returns `keep` as it was when its wording, kind or priority changed (to be archived).
fn merge_into(keep: &mut MemoryRecord, other: &MemoryRecord, now: u64) -> Option<MemoryRecord> {
    let before = keep.clone();
    if other.priority > keep.priority {
        keep.content = other.content.clone();
        keep.kind = other.kind;
        keep.priority = other.priority;
    }
    for t in &other.tags {
        if !keep.tags.contains(t) {
            keep.tags.push(t.clone());
        }
    }
    for p in &other.provenance {
        if !keep.provenance.contains(p) {
            keep.provenance.push(p.clone());
        }
    }
    keep.references = keep.references.saturating_add(other.references);
    keep.expires_ms = match (keep.expires_ms, other.expires_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    };
    keep.updated_ms = now;
    keep.importance = round_importance(keep.importance_at(now));
    (keep.content != before.content || keep.kind != before.kind || keep.priority != before.priority).then_some(before)
}

/// Six decimals: enough to rank, and every such value survives a JSON round trip exactly.
fn round_importance(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

const NEGATIONS: [&str; 14] = [
    "no", "not", "never", "none", "nothing", "cannot", "can't", "don't", "doesn't", "isn't", "won't", "without", "nor",
    "neither",
];
const CJK_NEGATIONS: [char; 6] = ['不', '没', '无', '未', '非', '别'];

/// Negation words present in `text`: "X" and "not X" are different facts even though
/// their analyzed terms (stop words removed) are the same.
fn negations(text: &str) -> BTreeSet<String> {
    let lower = text.to_lowercase();
    let mut out: BTreeSet<String> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| NEGATIONS.contains(w) || w.ends_with("n't"))
        .map(str::to_string)
        .collect();
    out.extend(lower.chars().filter(|c| CJK_NEGATIONS.contains(c)).map(String::from));
    out
}

/// Two records are the same memory when what was written, where and by whom match.
fn same_identity(a: &MemoryRecord, b: &MemoryRecord) -> bool {
    (a.id, &a.namespace, &a.content, a.kind, a.created_ms, &a.provenance)
        == (b.id, &b.namespace, &b.content, b.kind, b.created_ms, &b.provenance)
}

fn same_fact(a_text: &str, a: &[String], b_text: &str, b: &[String], threshold: f64) -> bool {
    similarity(a, b) >= threshold && negations(a_text) == negations(b_text)
}

/// Decoded records by namespace, kept in step with every commit of this process. The
/// process holds the store lock, so nobody else writes: the MEMORY.md view after a write
/// needs no full decode of the namespace.
type RecordCache = Mutex<HashMap<String, BTreeMap<u64, MemoryRecord>>>;

enum Change {
    Upsert(MemoryRecord),
    Remove(String, u64),
}

struct Txn<'a> {
    txn: WriteTransaction,
    cache: Option<&'a RecordCache>,
    changes: std::cell::RefCell<Vec<Change>>,
}

impl Txn<'_> {
    fn meta(&self, key: &str) -> Result<u64> {
        let t = self.txn.open_table(META)?;
        Ok(t.get(key)?.map(|v| v.value()).unwrap_or(0))
    }

    fn set_meta(&self, key: &str, value: u64) -> Result<()> {
        self.txn.open_table(META)?.insert(key, value)?;
        Ok(())
    }

    fn next(&self, key: &str) -> Result<u64> {
        let id = self.meta(key)?.max(1);
        self.set_meta(key, id + 1)?;
        Ok(id)
    }

    fn get(&self, id: u64) -> Result<Option<MemoryRecord>> {
        let t = self.txn.open_table(RECORDS)?;
        let v = t.get(id)?;
        v.map(|v| decode_record(v.value(), id)).transpose()
    }

    fn put(&self, r: &MemoryRecord) -> Result<()> {
        self.changes.borrow_mut().push(Change::Upsert(r.clone()));
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

    fn delete(&self, r: &MemoryRecord) -> Result<()> {
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

    fn archive(&self, at_ms: u64, reason: &str, record: MemoryRecord, merged_into: Option<u64>) -> Result<u64> {
        let id = self.next("next_archive_id")?;
        let entry = ArchiveEntry { id, at_ms, reason: reason.to_string(), record, merged_into };
        self.txn.open_table(ARCHIVE)?.insert(id, encode(&entry)?.as_slice())?;
        Ok(id)
    }

    fn all(&self) -> Result<Vec<MemoryRecord>> {
        let t = self.txn.open_table(RECORDS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(decode_record(v.value(), k.value())?);
        }
        Ok(out)
    }

    /// Live priority-5 records of `namespace`, as this transaction sees them.
    fn protected(&self, namespace: &str, now: u64) -> Result<Vec<MemoryRecord>> {
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
    fn new_id(&self) -> Result<u64> {
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

    fn bump_generation(&self) -> Result<u64> {
        let g = self.meta("generation")? + 1;
        self.set_meta("generation", g)?;
        Ok(g)
    }

    fn commit(self) -> Result<()> {
        self.txn.commit().context("cannot commit to the memory store")?;
        if let Some(cache) = self.cache
            && let Ok(mut cache) = cache.lock()
        {
            for change in self.changes.into_inner() {
                match change {
                    Change::Upsert(r) => {
                        if let Some(ns) = cache.get_mut(&r.namespace) {
                            ns.insert(r.id, r);
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
        Ok(())
    }
}

impl Memory {
    /// Open the memory of a skillhost home (`dir` = `<home>/memory`), waiting up to
    /// `config.busy_wait` for another process that holds it.
    pub fn open(dir: &Path, config: MemoryConfig) -> Result<Memory> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let lock = StoreLock::acquire(&dir.join("store.lock"), config.busy_wait)?;
        let path = dir.join("store.redb");
        // The first runtime kept a schema-1 store at <home>/memory.redb: adopt it.
        if let Some(legacy) = dir.parent().map(|p| p.join("memory.redb"))
            && legacy.exists()
            && !path.exists()
        {
            std::fs::rename(&legacy, &path)
                .with_context(|| format!("cannot move {} to {}", legacy.display(), path.display()))?;
        }
        let db = Database::create(&path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => {
                anyhow!(
                    "memory store {} is already open (in this process, or by a program that ignores store.lock)",
                    path.display()
                )
            }
            other => anyhow!(
                "cannot open memory store {}: {other}; if the file is damaged, move it aside and `skillhost memory import` a `memory export` file (records only: the archive and sessions are not exported)",
                path.display()
            ),
        })?;
        let daily = DailyNotes::new(dir.join("daily"));
        let (generation, fingerprint) = {
            migrate(&db, system_now_ms())?;
            let txn = db.begin_read()?;
            let meta = txn.open_table(META)?;
            let g = meta.get("generation")?.map(|v| v.value()).unwrap_or(0);
            (g, daily.fingerprint()?)
        };
        let stamp = index::stamp(generation, &fingerprint);
        let daily_fingerprint = Mutex::new(fingerprint);
        let (index, fresh) = MemoryIndex::open(&dir.join("index"), &stamp)?;
        let memory = Memory {
            dir: dir.to_path_buf(),
            db,
            index,
            daily,
            config,
            clock: Box::new(system_now_ms),
            line_tokens: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
            touched: Mutex::new(std::collections::HashSet::new()),
            records_cache: Mutex::new(HashMap::new()),
            daily_fingerprint,
            index_dirty: std::sync::atomic::AtomicBool::new(false),
            _lock: lock,
        };
        if !fresh {
            memory.rebuild_index()?;
        }
        Ok(memory)
    }

    /// Replace the clock (tests of expiry and recency; imports of old data).
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Memory {
        self.clock = Box::new(clock);
        self
    }

    pub fn now_ms(&self) -> u64 {
        (self.clock)()
    }

    fn begin(&self) -> Result<Txn<'_>> {
        Ok(Txn {
            txn: self.db.begin_write().context("cannot start a memory store transaction")?,
            cache: Some(&self.records_cache),
            changes: std::cell::RefCell::new(Vec::new()),
        })
    }

    fn current_stamp(&self) -> Result<String> {
        let daily = self.daily_fingerprint.lock().map_err(|_| anyhow!("daily-note fingerprint poisoned"))?;
        Ok(index::stamp(self.generation()?, &daily))
    }

    /// Daily notes change only through this store (it holds the lock) or by hand between
    /// runs (caught at open), so their fingerprint is read again only after we change them.
    fn refresh_daily_fingerprint(&self) -> Result<()> {
        let fresh = self.daily.fingerprint()?;
        *self.daily_fingerprint.lock().map_err(|_| anyhow!("daily-note fingerprint poisoned"))? = fresh;
        Ok(())
    }

    /// Rebuild the search index from the store (and the daily notes).
    pub fn rebuild_index(&self) -> Result<()> {
        let records = self.all_records()?;
        let daily = self.daily.all()?;
        self.index.rebuild(records.iter(), &daily, &self.current_stamp()?)
    }

    /// Bring the index in step after a committed write. The write itself stands either way:
    /// if the incremental update fails the index is rebuilt, and if that fails too it is
    /// rebuilt on the next open (its stamp no longer matches).
    fn reindex(&self, upserts: &[&MemoryRecord], deletes: &[u64], daily: &[DailyEntry]) -> Result<()> {
        use std::sync::atomic::Ordering;
        let stamp = self.current_stamp()?;
        let first = if self.index_dirty.load(Ordering::SeqCst) {
            anyhow!("an earlier index update failed")
        } else {
            match self.index.apply(upserts, deletes, daily, &stamp) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            }
        };
        match self.rebuild_index() {
            Ok(()) => self.index_dirty.store(false, Ordering::SeqCst),
            Err(second) => {
                // Patching later writes onto an index that misses this one would stamp it
                // as current; stay dirty so every write rebuilds until one succeeds.
                self.index_dirty.store(true, Ordering::SeqCst);
                eprintln!(
                    "warning: memory stored, but the search index could not be updated ({first:#}; rebuild: {second:#}); it is rebuilt on the next write or open"
                );
            }
        }
        Ok(())
    }

    /// A record by id (any state).
    pub fn get(&self, id: u64) -> Result<Option<MemoryRecord>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(RECORDS)?;
        let v = t.get(id)?;
        v.map(|v| decode_record(v.value(), id)).transpose()
    }

    fn load(&self, ids: impl IntoIterator<Item = u64>) -> Result<Vec<MemoryRecord>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(RECORDS)?;
        let mut out = Vec::new();
        for id in ids {
            if let Some(v) = t.get(id)? {
                out.push(decode_record(v.value(), id)?);
            }
        }
        Ok(out)
    }

    /// Every record of every namespace, by id.
    pub fn all_records(&self) -> Result<Vec<MemoryRecord>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(RECORDS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(decode_record(v.value(), k.value())?);
        }
        Ok(out)
    }

    fn ids_of_namespace(&self, namespace: &str) -> Result<Vec<u64>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_multimap_table(BY_NAMESPACE)?;
        let mut ids = Vec::new();
        for v in t.get(namespace)? {
            ids.push(v?.value());
        }
        Ok(ids)
    }

    /// Live (not deprecated, not expired) records of `namespace`, oldest first.
    pub fn live(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        let now = self.now_ms();
        self.with_namespace(namespace, |records| records.values().filter(|r| r.is_live(now)).cloned().collect())
    }

    /// Run `f` over the decoded records of `namespace` (decoded once per open store).
    fn with_namespace<T>(&self, namespace: &str, f: impl FnOnce(&BTreeMap<u64, MemoryRecord>) -> T) -> Result<T> {
        let mut cache = self.records_cache.lock().map_err(|_| anyhow!("memory record cache poisoned"))?;
        if !cache.contains_key(namespace) {
            let records = self.load(self.ids_of_namespace(namespace)?)?;
            cache.insert(namespace.to_string(), records.into_iter().map(|r| (r.id, r)).collect());
        }
        let empty = BTreeMap::new();
        Ok(f(cache.get(namespace).unwrap_or(&empty)))
    }

    fn check_new(&self, r: &NewRecord) -> Result<()> {
        validate_namespace(&r.namespace)?;
        if r.content.trim().is_empty() {
            bail!("a memory needs content; it was empty");
        }
        if r.priority > 5 {
            bail!("priority {} is out of range; use 0 (ephemeral) to 5 (never dropped)", r.priority);
        }
        let size = r.content.len() + r.tags.iter().map(String::len).sum::<usize>();
        if size > self.config.max_record_bytes {
            bail!(
                "memory is {size} bytes (content and tags), over the limit of {} bytes; summarize it (counts, key lines, the conclusion) and store the summary",
                self.config.max_record_bytes
            );
        }
        Ok(())
    }

    /// Refuse a write that would leave the priority-5 records of `namespace` over budget.
    fn check_protected(&self, namespace: &str, live: &[MemoryRecord]) -> Result<()> {
        let tokens = view::protected_tokens(namespace, live);
        if tokens <= self.config.budget_tokens {
            return Ok(());
        }
        let mut protected: Vec<(usize, u64)> =
            live.iter().filter(|r| r.priority == 5).map(|r| (count_tokens(&view::line(r)), r.id)).collect();
        protected.sort_by(|a, b| b.cmp(a));
        let list = protected.iter().take(8).map(|(t, id)| format!("#{id} ({t} tokens)")).collect::<Vec<_>>().join(", ");
        bail!(
            "refused: priority-5 memories of `{namespace}` would take {tokens} tokens, over the {}-token MEMORY.md budget, and priority 5 is never dropped. Shorten or merge some (`skillhost memory compact`), lower one (`skillhost memory promote ID --priority 4`) or forget one (`skillhost memory forget ID`); largest: {list}",
            self.config.budget_tokens
        )
    }

    /// The live record of `namespace` that states the same fact as `text`, if any.
    fn duplicate_of(&self, namespace: &str, text: &str, except: Option<u64>) -> Result<Option<MemoryRecord>> {
        let terms = analyze(text);
        if terms.is_empty() {
            return Ok(None);
        }
        let now = self.now_ms();
        let candidates = self.index.search(text, &SearchFilter::namespace(namespace), now, 8)?;
        let mut best: Option<(f64, MemoryRecord)> = None;
        for r in self.load(candidates.into_iter().map(|(id, _)| id))? {
            if Some(r.id) == except || !r.is_live(now) {
                continue;
            }
            let other = analyze(&r.content);
            let s = similarity(&terms, &other);
            if same_fact(text, &terms, &r.content, &other, self.config.merge_similarity)
                && best.as_ref().is_none_or(|(b, _)| s > *b)
            {
                best = Some((s, r));
            }
        }
        Ok(best.map(|(_, r)| r))
    }

    fn new_record(&self, id: u64, r: NewRecord, now: u64) -> MemoryRecord {
        let mut tags = Vec::new();
        for t in r.tags {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let mut record = MemoryRecord {
            id,
            namespace: r.namespace,
            session: r.provenance.session.clone(),
            kind: r.kind,
            content: r.content.trim().to_string(),
            priority: r.priority,
            importance: 0.0,
            tags,
            created_ms: now,
            updated_ms: now,
            expires_ms: (r.priority <= 1).then(|| now + self.config.low_priority_ttl_ms),
            deprecated: None,
            references: 0,
            provenance: vec![r.provenance],
        };
        record.importance = round_importance(record.importance_at(now));
        record
    }

    /// Store `r`: merged into a near-duplicate when there is one (the archive keeps the
    /// incoming version, and the stored one when its wording changes), else as a new
    /// record. Returns the id that holds the fact.
    pub fn add(&self, r: NewRecord) -> Result<u64> {
        Ok(self.add_detailed(r)?.0)
    }

    /// [`Memory::add`], also saying whether the record was merged into an existing one.
    pub fn add_detailed(&self, r: NewRecord) -> Result<(u64, bool)> {
        self.check_new(&r)?;
        let now = self.now_ms();
        let namespace = r.namespace.clone();
        let dup = self.duplicate_of(&namespace, &r.content, None)?;
        let txn = self.begin()?;
        // Re-read inside the transaction: the candidate may have changed since the search.
        let dup = match dup {
            Some(d) => txn.get(d.id)?.filter(|d| d.is_live(now)),
            None => None,
        };
        let incoming = self.new_record(txn.new_id()?, r, now);
        let (stored, merged) = match dup {
            Some(mut existing) => {
                let superseded = merge_into(&mut existing, &incoming, now);
                txn.put(&existing)?;
                if let Some(old) = superseded {
                    txn.archive(now, "superseded", old, Some(existing.id))?;
                }
                txn.archive(now, "merged", incoming, Some(existing.id))?;
                (existing, true)
            }
            None => {
                txn.put(&incoming)?;
                (incoming, false)
            }
        };
        if stored.priority == 5 {
            self.check_protected(&namespace, &txn.protected(&namespace, now)?)?;
        }
        txn.bump_generation()?;
        txn.commit()?;
        self.reindex(&[&stored], &[], &[])?;
        Ok((stored.id, merged))
    }

    /// Store many records in one transaction, without merging (bulk loads and benchmarks;
    /// `memory compact` merges duplicates afterwards). Priority-5 budgets are checked.
    pub fn add_batch(&self, records: Vec<NewRecord>) -> Result<Vec<u64>> {
        for r in &records {
            self.check_new(r)?;
        }
        let now = self.now_ms();
        let txn = self.begin()?;
        let mut stored = Vec::with_capacity(records.len());
        for r in records {
            let rec = self.new_record(txn.new_id()?, r, now);
            txn.put(&rec)?;
            stored.push(rec);
        }
        let namespaces: BTreeSet<&str> =
            stored.iter().filter(|r| r.priority == 5).map(|r| r.namespace.as_str()).collect();
        for ns in namespaces {
            self.check_protected(ns, &txn.protected(ns, now)?)?;
        }
        txn.bump_generation()?;
        txn.commit()?;
        let refs: Vec<&MemoryRecord> = stored.iter().collect();
        self.reindex(&refs, &[], &[])?;
        Ok(stored.iter().map(|r| r.id).collect())
    }

    /// Live records relevant to `query` under `filter` (at most [`MAX_SEARCH_LIMIT`]).
    /// With [`SearchOrder::PriorityThenRecency`], the 50 most relevant are ordered by
    /// priority, then recency.
    pub fn search(&self, query: &str, filter: &SearchFilter, limit: usize) -> Result<Vec<SearchHit>> {
        if let Some(ns) = &filter.namespace {
            validate_namespace(ns)?;
        }
        let limit = limit.min(MAX_SEARCH_LIMIT);
        let now = self.now_ms();
        let fetch = match filter.order {
            SearchOrder::Relevance => limit,
            SearchOrder::PriorityThenRecency => (limit.saturating_mul(5)).max(50),
        };
        let ranked = self.index.search(query, filter, now, fetch)?;
        let scores: HashMap<u64, f32> = ranked.iter().copied().collect();
        let mut hits: Vec<SearchHit> = self
            .load(ranked.iter().map(|(id, _)| *id))?
            .into_iter()
            .filter(|r| r.is_live(now))
            .map(|r| SearchHit { score: scores.get(&r.id).copied().unwrap_or(0.0), record: r })
            .collect();
        if filter.order == SearchOrder::PriorityThenRecency {
            hits.sort_by(|a, b| {
                b.record.priority.cmp(&a.record.priority).then(b.record.created_ms.cmp(&a.record.created_ms))
            });
        }
        hits.truncate(limit);
        Ok(hits)
    }

    /// Daily-note entries relevant to `query`.
    pub fn search_daily(&self, query: &str, limit: usize) -> Result<Vec<DailyHit>> {
        self.index.search_daily(query, limit.min(MAX_SEARCH_LIMIT))
    }

    /// What goes into a prompt besides MEMORY.md: the 5 most recent records of the
    /// namespace plus the 5 highest-priority records relevant to `query`, without repeats.
    /// Counts as a reference for each returned record.
    pub fn recall(&self, namespace: &str, query: &str) -> Result<Vec<MemoryRecord>> {
        let now = self.now_ms();
        let mut recent = Vec::new();
        {
            let txn = self.db.begin_read()?;
            let by_ns = txn.open_multimap_table(BY_NAMESPACE)?;
            let records = txn.open_table(RECORDS)?;
            for id in by_ns.get(namespace)?.rev() {
                let id = id?.value();
                let Some(v) = records.get(id)? else { continue };
                let r = decode_record(v.value(), id)?;
                if r.is_live(now) {
                    recent.push(r);
                    if recent.len() == 5 {
                        break;
                    }
                }
            }
        }
        let filter = SearchFilter {
            namespace: Some(namespace.to_string()),
            order: SearchOrder::PriorityThenRecency,
            ..SearchFilter::default()
        };
        let mut out = recent;
        for hit in self.search(query, &filter, 5)? {
            if !out.iter().any(|r| r.id == hit.record.id) {
                out.push(hit.record);
            }
        }
        self.touch(&out.iter().map(|r| r.id).collect::<Vec<_>>())?;
        Ok(out)
    }

    /// Count a reference to each record, at most once per record per open store (one CLI
    /// call or agent process), so a skill searching in a loop cannot inflate importance.
    /// Not fsynced: a crash may lose a few counts, never a record.
    pub fn touch(&self, ids: &[u64]) -> Result<()> {
        let fresh: Vec<u64> = match self.touched.lock() {
            Ok(mut seen) => ids.iter().copied().filter(|id| seen.insert(*id)).collect(),
            Err(_) => return Ok(()),
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let mut touched = Vec::new();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::None).map_err(|e| anyhow!("memory store: {e}"))?;
        {
            let mut t = txn.open_table(RECORDS)?;
            for id in fresh {
                let found = t.get(id)?.map(|v| decode_record(v.value(), id)).transpose()?;
                if let Some(mut r) = found {
                    r.references = r.references.saturating_add(1);
                    t.insert(id, encode(&r)?.as_slice())?;
                    touched.push(r);
                }
            }
        }
        txn.commit().context("cannot commit to the memory store")?;
        if let Ok(mut cache) = self.records_cache.lock() {
            for r in touched {
                if let Some(ns) = cache.get_mut(&r.namespace) {
                    ns.insert(r.id, r);
                }
            }
        }
        Ok(())
    }

    fn cached_line_tokens(&self, r: &MemoryRecord) -> usize {
        let key = (r.id, r.updated_ms, r.priority);
        if let Ok(cache) = self.line_tokens.lock()
            && let Some(n) = cache.get(&key)
        {
            return *n;
        }
        let n = count_tokens(&view::line(r));
        if let Ok(mut cache) = self.line_tokens.lock() {
            cache.insert(key, n);
        }
        n
    }

    /// The MEMORY.md view of `namespace`.
    pub fn view(&self, namespace: &str) -> Result<MemoryView> {
        validate_namespace(namespace)?;
        let now = self.now_ms();
        let generation = self.generation()?;
        if let Ok(views) = self.views.lock()
            && let Some((g, valid_until, v)) = views.get(namespace)
            && *g == generation
            && now < *valid_until
        {
            return Ok(v.clone());
        }
        let (view, next_expiry) = self.with_namespace(namespace, |records| {
            let live: Vec<&MemoryRecord> = records.values().filter(|r| r.is_live(now)).collect();
            let view =
                view::render(namespace, &live, self.config.budget_tokens, now, &mut |r| self.cached_line_tokens(r));
            (view, live.iter().filter_map(|r| r.expires_ms).min().unwrap_or(u64::MAX))
        })?;
        // Valid until the next hour (recency moves slowly) or the next expiry, whichever is first.
        let valid_until = (now / 3_600_000 + 1).saturating_mul(3_600_000).min(next_expiry);
        if let Ok(mut views) = self.views.lock() {
            views.insert(namespace.to_string(), (generation, valid_until, view.clone()));
        }
        Ok(view)
    }

    fn generation(&self) -> Result<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(META)?.get("generation")?.map(|v| v.value()).unwrap_or(0))
    }

    fn update_record(&self, id: u64, change: impl FnOnce(&mut MemoryRecord) -> Result<()>) -> Result<MemoryRecord> {
        let txn = self.begin()?;
        let mut r = txn.get(id)?.ok_or_else(|| anyhow!("no memory #{id}; `skillhost memory search` lists ids"))?;
        change(&mut r)?;
        r.updated_ms = self.now_ms();
        r.importance = round_importance(r.importance_at(r.updated_ms));
        txn.put(&r)?;
        if r.priority == 5 {
            self.check_protected(&r.namespace, &txn.protected(&r.namespace, r.updated_ms)?)?;
        }
        txn.bump_generation()?;
        txn.commit()?;
        self.reindex(&[&r], &[], &[])?;
        Ok(r)
    }

    /// Set a record's priority (0-5); lowering it to 1 or less gives it a day from now.
    pub fn set_priority(&self, id: u64, priority: u8) -> Result<MemoryRecord> {
        if priority > 5 {
            bail!("priority {priority} is out of range; use 0 to 5");
        }
        let expires = self.now_ms() + self.config.low_priority_ttl_ms;
        self.update_record(id, |r| {
            r.expires_ms = (priority <= 1).then(|| r.expires_ms.unwrap_or(expires));
            r.priority = priority;
            Ok(())
        })
    }

    /// Copy daily-note entry `date:line` into long-term memory (once).
    pub fn promote_daily(&self, date: &str, line: u32, namespace: &str, kind: MemoryKind, priority: u8) -> Result<u64> {
        let entry = self
            .daily
            .read(date)?
            .into_iter()
            .find(|e| e.line == line)
            .ok_or_else(|| anyhow!("the daily note of {date} has no entry on line {line}; `skillhost memory daily --date {date}` shows them"))?;
        {
            let txn = self.db.begin_read()?;
            if let Some(id) = txn.open_table(PROMOTED)?.get((date, line))? {
                bail!("{date}:{line} was already promoted to memory #{}", id.value());
            }
        }
        let content = entry.text.replace(PROMOTE_FLAG, "");
        // Drop the HH:MM:SS stamp the note carries.
        let content = match content.split_once(' ') {
            Some((time, rest)) if time.len() == 8 && time.as_bytes()[2] == b':' => rest.trim().to_string(),
            _ => content.trim().to_string(),
        };
        let id = self.add(NewRecord {
            namespace: namespace.to_string(),
            kind,
            content,
            priority,
            tags: vec![],
            provenance: Provenance {
                skill: "daily-note".into(),
                skill_hash: String::new(),
                session: format!("daily:{date}"),
                step: line,
            },
        })?;
        let txn = self.begin()?;
        txn.txn.open_table(PROMOTED)?.insert((date, line), id)?;
        txn.commit()?;
        Ok(id)
    }

    /// Move a record to the archive (`memory restore` brings it back).
    pub fn forget(&self, id: u64) -> Result<u64> {
        let now = self.now_ms();
        let txn = self.begin()?;
        let r = txn.get(id)?.ok_or_else(|| anyhow!("no memory #{id}; `skillhost memory search` lists ids"))?;
        txn.delete(&r)?;
        let archive_id = txn.archive(now, "forgotten", r, None)?;
        txn.bump_generation()?;
        txn.commit()?;
        self.reindex(&[], &[id], &[])?;
        Ok(archive_id)
    }

    /// Put an archived record back (same id). Fails if that id is in use again.
    pub fn restore(&self, archive_id: u64) -> Result<MemoryRecord> {
        let now = self.now_ms();
        let txn = self.begin()?;
        let entry: ArchiveEntry = {
            let t = txn.txn.open_table(ARCHIVE)?;
            let v = t
                .get(archive_id)?
                .ok_or_else(|| anyhow!("no archive entry {archive_id}; `skillhost memory archive` lists them"))?;
            serde_json::from_slice(v.value()).with_context(|| format!("archive entry {archive_id} is corrupt"))?
        };
        let mut record = entry.record;
        if txn.get(record.id)?.is_some() {
            if entry.reason != "superseded" {
                bail!("memory #{} exists again; forget it first, then restore", record.id);
            }
            // A superseded wording shares the id of the record that absorbed it: it comes
            // back as a record of its own.
            record.id = txn.new_id()?;
        }
        record.deprecated = None;
        record.expires_ms = record.expires_ms.map(|_| now + self.config.low_priority_ttl_ms);
        txn.put(&record)?;
        if record.priority == 5 {
            self.check_protected(&record.namespace, &txn.protected(&record.namespace, now)?)?;
        }
        txn.txn.open_table(ARCHIVE)?.remove(archive_id)?;
        txn.bump_generation()?;
        txn.commit()?;
        self.reindex(&[&record], &[], &[])?;
        Ok(record)
    }

    /// The archive, oldest first.
    pub fn archive(&self) -> Result<Vec<ArchiveEntry>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(ARCHIVE)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push(
                serde_json::from_slice(v.value()).with_context(|| format!("archive entry {} is corrupt", k.value()))?,
            );
        }
        Ok(out)
    }

    /// Deprecate every live record that `skill` wrote (only version `hash_prefix`, if
    /// given): the response to poisoned memory. Returns the ids.
    pub fn quarantine(&self, skill: &str, hash_prefix: Option<&str>) -> Result<Vec<u64>> {
        let now = self.now_ms();
        let txn = self.begin()?;
        let ids: Vec<u64> = {
            let t = txn.txn.open_multimap_table(BY_SKILL)?;
            let mut ids = Vec::new();
            for v in t.get(skill)? {
                ids.push(v?.value());
            }
            ids
        };
        let reason = match hash_prefix {
            Some(h) => format!("quarantined: written by {skill} version {h}"),
            None => format!("quarantined: written by {skill}"),
        };
        let mut changed = Vec::new();
        for id in ids {
            let Some(mut r) = txn.get(id)? else { continue };
            let hit = r
                .provenance
                .iter()
                .any(|p| p.skill == skill && hash_prefix.is_none_or(|h| p.skill_hash.starts_with(h)));
            if hit && r.deprecated.is_none() {
                r.deprecated = Some(Deprecation { at_ms: now, reason: reason.clone() });
                r.updated_ms = now;
                txn.put(&r)?;
                changed.push(id);
            }
        }
        txn.bump_generation()?;
        txn.commit()?;
        self.reindex(&[], &changed, &[])?;
        Ok(changed)
    }

    /// Cleanup job: archive deprecated and expired records, merge near-duplicates (each
    /// record against its best index candidates, not every pair).
    pub fn compact(&self, namespace: Option<&str>) -> Result<CompactReport> {
        if let Some(ns) = namespace {
            validate_namespace(ns)?;
        }
        let now = self.now_ms();
        let mut report = CompactReport::default();
        let txn = self.begin()?;
        let records: Vec<MemoryRecord> =
            txn.all()?.into_iter().filter(|r| namespace.is_none_or(|ns| r.namespace == ns)).collect();
        let mut removed: Vec<u64> = Vec::new();
        let mut survivors: Vec<MemoryRecord> = Vec::new();
        for r in records {
            if r.deprecated.is_some() {
                txn.delete(&r)?;
                removed.push(r.id);
                report.deprecated_removed.push(r.id);
                report.archived.push(txn.archive(now, "deprecated", r, None)?);
            } else if !r.is_live(now) {
                txn.delete(&r)?;
                removed.push(r.id);
                report.expired.push(r.id);
                report.archived.push(txn.archive(now, "expired", r, None)?);
            } else {
                survivors.push(r);
            }
        }
        let position: HashMap<u64, usize> = survivors.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
        let mut gone = vec![false; survivors.len()];
        let mut updated: Vec<usize> = Vec::new();
        for i in 0..survivors.len() {
            if gone[i] {
                continue;
            }
            let terms = analyze(&survivors[i].content);
            let filter = SearchFilter::namespace(&survivors[i].namespace);
            for (id, _) in self.index.search(&survivors[i].content, &filter, now, 8)? {
                let Some(&j) = position.get(&id) else { continue };
                if j <= i || gone[j] {
                    continue;
                }
                let other_terms = analyze(&survivors[j].content);
                if !same_fact(
                    &survivors[i].content,
                    &terms,
                    &survivors[j].content,
                    &other_terms,
                    self.config.merge_similarity,
                ) {
                    continue;
                }
                let other = survivors[j].clone();
                let keep_id = survivors[i].id;
                if let Some(old) = merge_into(&mut survivors[i], &other, now) {
                    report.archived.push(txn.archive(now, "superseded", old, Some(keep_id))?);
                }
                gone[j] = true;
                txn.delete(&other)?;
                removed.push(other.id);
                report.merged.push((other.id, keep_id));
                report.archived.push(txn.archive(now, "merged", other, Some(keep_id))?);
                if !updated.contains(&i) {
                    updated.push(i);
                }
            }
        }
        for &i in &updated {
            txn.put(&survivors[i])?;
        }
        txn.bump_generation()?;
        txn.commit()?;
        let upserts: Vec<&MemoryRecord> = updated.iter().map(|&i| &survivors[i]).collect();
        self.reindex(&upserts, &removed, &[])?;
        Ok(report)
    }

    /// The weekly job: compact, archive records whose importance decayed below the
    /// threshold, archive daily notes older than 90 days, promote `#promote` entries.
    pub fn maintain(&self, namespace: &str) -> Result<MaintainReport> {
        validate_namespace(namespace)?;
        let compact = self.compact(None)?;
        let now = self.now_ms();
        let mut report = MaintainReport { compact, ..MaintainReport::default() };

        let txn = self.begin()?;
        let decayed: Vec<MemoryRecord> = txn
            .all()?
            .into_iter()
            .filter(|r| r.priority < 5 && r.importance_at(now) < self.config.demote_below)
            .collect();
        if decayed.is_empty() {
            txn.txn.abort()?;
        } else {
            for r in decayed {
                txn.delete(&r)?;
                report.demoted.push(r.id);
                report.compact.archived.push(txn.archive(now, "demoted", r, None)?);
            }
            txn.bump_generation()?;
            txn.commit()?;
            self.reindex(&[], &report.demoted, &[])?;
        }

        let today = daily::date_of(now);
        for date in self.daily.dates()? {
            let flagged: Vec<DailyEntry> = self.daily.read(&date)?.into_iter().filter(DailyEntry::flagged).collect();
            for e in flagged {
                let done = {
                    let txn = self.db.begin_read()?;
                    txn.open_table(PROMOTED)?.get((date.as_str(), e.line))?.is_some()
                };
                if !done {
                    // One bad note must not stop the weekly job: report it and go on.
                    match self.promote_daily(&date, e.line, namespace, MemoryKind::General, 3) {
                        Ok(id) => report.promoted.push(id),
                        Err(err) => report.promote_errors.push(format!("{date}:{}: {err:#}", e.line)),
                    }
                }
            }
            if daily::days_between(&date, &today)? > self.config.daily_archive_days {
                let to = self.dir.join("archive").join("daily");
                std::fs::create_dir_all(&to).with_context(|| format!("cannot create {}", to.display()))?;
                let from = self.daily.path(&date);
                std::fs::rename(&from, to.join(format!("{date}.md")))
                    .with_context(|| format!("cannot move {} to the archive", from.display()))?;
                report.daily_archived.push(date);
            }
        }
        if !report.daily_archived.is_empty() {
            self.refresh_daily_fingerprint()?;
            self.rebuild_index()?;
        }
        Ok(report)
    }

    /// Append to today's daily note.
    pub fn note(&self, text: &str) -> Result<DailyEntry> {
        if text.len() > self.config.max_record_bytes {
            bail!("the note is {} bytes, over the limit of {}; summarize it", text.len(), self.config.max_record_bytes);
        }
        let entry = self.daily.append(self.now_ms(), text)?;
        self.refresh_daily_fingerprint()?;
        self.reindex(&[], &[], std::slice::from_ref(&entry))?;
        Ok(entry)
    }

    /// Entries of the daily note of `date` (default: today).
    pub fn daily(&self, date: Option<&str>) -> Result<(String, Vec<DailyEntry>)> {
        let date = date.map(str::to_string).unwrap_or_else(|| daily::date_of(self.now_ms()));
        let entries = self.daily.read(&date)?;
        Ok((date, entries))
    }

    /// Every record as JSON lines, by id (the archive is not included).
    pub fn export(&self, out: &mut dyn std::io::Write) -> Result<usize> {
        let records = self.all_records()?;
        for r in &records {
            serde_json::to_writer(&mut *out, r)?;
            out.write_all(b"\n")?;
        }
        Ok(records.len())
    }

    /// Load `memory export` output. All or nothing: one bad line imports nothing and the
    /// error names it. Ids are kept when free; a record identical to the stored one is
    /// skipped; a different record under a taken id gets a new id.
    pub fn import(&self, input: &str, source: &str) -> Result<ImportReport> {
        let mut incoming = Vec::new();
        for (i, line) in input.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let r: MemoryRecord =
                serde_json::from_str(line).with_context(|| format!("{source}:{}: not a memory record", i + 1))?;
            validate_namespace(&r.namespace).with_context(|| format!("{source}:{}", i + 1))?;
            if r.priority > 5 || r.content.trim().is_empty() {
                bail!("{source}:{}: priority must be 0-5 and content non-empty", i + 1);
            }
            if r.id == 0 || r.id >= MAX_ID {
                bail!("{source}:{}: id {} is out of range (1 to 2^53-1)", i + 1, r.id);
            }
            incoming.push(r);
        }
        let mut report = ImportReport::default();
        let txn = self.begin()?;
        let mut stored = Vec::new();
        for mut r in incoming {
            match txn.get(r.id)? {
                // The same memory (counters and state may have moved on since the export).
                Some(existing) if same_identity(&existing, &r) => {
                    report.unchanged += 1;
                    continue;
                }
                Some(_) => {
                    let new_id = txn.new_id()?;
                    report.renumbered.push((r.id, new_id));
                    r.id = new_id;
                }
                None => {
                    if r.id >= txn.meta("next_id")? {
                        txn.set_meta("next_id", r.id + 1)?;
                    }
                }
            }
            txn.put(&r)?;
            report.imported += 1;
            stored.push(r);
        }
        let namespaces: BTreeSet<String> =
            stored.iter().filter(|r| r.priority == 5).map(|r| r.namespace.clone()).collect();
        let now = self.now_ms();
        for ns in namespaces {
            self.check_protected(&ns, &txn.protected(&ns, now)?)?;
        }
        txn.bump_generation()?;
        txn.commit()?;
        let refs: Vec<&MemoryRecord> = stored.iter().collect();
        self.reindex(&refs, &[], &[])?;
        Ok(report)
    }

    /// State of a paused agent run.
    pub fn agent_session(&self, id: &str) -> Result<Option<serde_json::Value>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(AGENT_SESSIONS)?;
        let v = t.get(id)?;
        v.map(|v| serde_json::from_slice(v.value()).with_context(|| format!("agent session {id} is corrupt")))
            .transpose()
    }

    pub fn save_agent_session(&self, id: &str, state: &serde_json::Value) -> Result<()> {
        let txn = self.begin()?;
        txn.txn.open_table(AGENT_SESSIONS)?.insert(id, encode(state)?.as_slice())?;
        txn.commit()
    }
}

/// Bring the store to [`SCHEMA_VERSION`]; creates the tables of a new store.
fn migrate(db: &Database, now: u64) -> Result<()> {
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
    let t = Txn { txn, cache: None, changes: std::cell::RefCell::new(Vec::new()) };
    t.txn.open_table(RECORDS)?;
    t.txn.open_multimap_table(BY_NAMESPACE)?;
    t.txn.open_multimap_table(BY_SKILL)?;
    t.txn.open_multimap_table(PROTECTED)?;
    t.txn.open_table(ARCHIVE)?;
    t.txn.open_table(AGENT_SESSIONS)?;
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
    t.commit()
}

impl MemoryStore for Memory {
    fn search(&self, namespace: &str, query: &str, limit: usize) -> Result<Vec<(MemoryRecord, f32)>> {
        let hits = Memory::search(self, query, &SearchFilter::namespace(namespace), limit)?;
        self.touch(&hits.iter().map(|h| h.record.id).collect::<Vec<_>>())?;
        Ok(hits.into_iter().map(|h| (h.record, h.score)).collect())
    }

    fn insert(&self, record: NewRecord) -> Result<u64> {
        self.add(record)
    }

    fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        self.load(self.ids_of_namespace(namespace)?)
    }

    fn session_get(&self, session: &str, key: &str) -> Result<Option<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION_KV)?;
        Ok(table.get((session, key))?.map(|v| v.value().to_string()))
    }

    fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()> {
        let txn = self.begin()?;
        txn.txn.open_table(SESSION_KV)?.insert((session, key), value)?;
        txn.commit()
    }

    fn session_keys(&self, session: &str) -> Result<Vec<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION_KV)?;
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
