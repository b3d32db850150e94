//! [`Store`]: the redb store of one home opened by this process, its search index, its
//! daily notes and the caches in front of them. Only the process that holds
//! `memory/store.lock` opens a `Store`; every other process reaches it through the owner's
//! socket (see `handle.rs`). Writes are in `writes.rs`, the schema in `schema.rs`.
//!
//! Each public write is one redb transaction (durable on return: the one fsync a write
//! pays), followed by the derived data: the record vectors (a redb commit without fsync)
//! and one index commit stamped with the new generation (files written without fsync, see
//! `index_dir.rs`). A killed process loses neither (the kernel has the writes); a crash of
//! the machine costs at worst recomputing them on the next open, never a record. Writes are
//! serialized from their first read to their index update ([`WriteGuard`]); reads run in
//! parallel with them and with each other.
//!
//! A store that redb cannot read (changed bytes, a truncated file) is reported as damaged
//! with the way out, never as a panic: redb may panic on garbage pages, so opening and
//! every operation run under `catch_unwind` (see [`damaged`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use redb::{Database, ReadableDatabase, ReadableTable};

use super::daily::{self, DailyEntry, DailyNotes};
use super::embed::{self, EmbedModel};
use super::hybrid::{self, FusionParams};
use super::index::{self, DailyHit, MemoryIndex};
use super::lock::StoreLock;
use super::merge::{self, round_importance};
use super::records::{ArchiveEntry, MemoryRecord, NewRecord, SearchFilter, SearchHit, SearchOrder};
use super::schema::{
    ARCHIVE, BY_NAMESPACE, META, RECORDS, RecordCache, SESSION_KV, Txn, WriteGuard, decode_record, encode, migrate,
};
use super::sessions;
use super::tokens::count_tokens;
use super::vectors::Vectors;
use super::view::{self, MemoryView};

/// Most results one search returns.
pub const MAX_SEARCH_LIMIT: usize = 1000;
/// Search hits compared for "the newer of two records about the same subject first": the
/// first ten, fetched whatever the limit, so that the order of the first hits does not
/// depend on how many were asked for (recall's 20 and a caller's 10 see the same top five).
const PREFER_NEWER_WINDOW: usize = 10;
/// Recall: a hit is relevant when its score is at least this share of the best hit's.
const RECALL_RELATIVE_SCORE: f32 = 0.5;
/// Recall: how many search hits are looked at (the recent records among them are skipped,
/// so more than the relevant part's five).
const RECALL_RANKS: usize = 20;
/// Recall: records of each part (the most recent, the relevant).
const RECALL_PART: usize = 5;
/// Recall: for the places recent records freed, hits within this ratio of each other's
/// scores count as equally relevant (and priority decides).
const RECALL_TIE: f32 = 0.9;
/// Recall: scores this close (relative) are equal: search cannot tell the hits apart.
const RECALL_EXACT_TIE: f32 = 1e-4;
/// Sessions whose references are remembered (oldest forgotten first): bounded memory for a
/// server that lives for days.
const MAX_TRACKED_SESSIONS: usize = 4096;

/// Tunables; [`MemoryConfig::default`] is what SPEC §5 prescribes.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// Hard budget of the MEMORY.md view, in cl100k_base tokens.
    pub budget_tokens: usize,
    /// Share of the view one skill's records may take (0-1; the policy's `[memory]
    /// skill_view_share`, in percent); the user's records are not limited by it.
    pub skill_view_share: f64,
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
    /// How long to wait for the process that owns the store to answer (or to start serving).
    pub busy_wait: Duration,
    /// Which embedding model semantic search uses (none: lexical only).
    pub embed_model: EmbedModelChoice,
    /// How lexical and semantic scores are fused (see `hybrid.rs`).
    pub fusion: FusionParams,
}

/// Where the embedding model comes from.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum EmbedModelChoice {
    /// `$SKILLHOST_EMBED_MODEL`, else `<home>/models/` when installed (see [`embed::model_path`]);
    /// the home's `[memory] fusion`, when set, then replaces [`MemoryConfig::fusion`].
    #[default]
    FromEnvironment,
    /// Lexical search only.
    Off,
    File(PathBuf),
}

impl Default for MemoryConfig {
    fn default() -> MemoryConfig {
        MemoryConfig {
            budget_tokens: 2000,
            skill_view_share: 0.20,
            max_record_bytes: 4096,
            low_priority_ttl_ms: super::schema::DAY_MS,
            daily_archive_days: 90,
            demote_below: 0.01,
            merge_similarity: 0.75,
            busy_wait: Duration::from_secs(3),
            embed_model: EmbedModelChoice::default(),
            fusion: FusionParams::default(),
        }
    }
}

pub(super) type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub(super) fn system_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
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

/// Which records each session already referenced.
#[derive(Default)]
struct SessionRefs {
    seen: HashMap<String, HashSet<u64>>,
    order: VecDeque<String>,
}

impl SessionRefs {
    /// The ids `session` had not referenced yet (now marked as referenced).
    fn fresh(&mut self, session: &str, ids: &[u64]) -> Vec<u64> {
        if !self.seen.contains_key(session) {
            if self.order.len() >= MAX_TRACKED_SESSIONS
                && let Some(oldest) = self.order.pop_front()
            {
                self.seen.remove(&oldest);
            }
            self.order.push_back(session.to_string());
        }
        let seen = self.seen.entry(session.to_string()).or_default();
        ids.iter().copied().filter(|id| seen.insert(*id)).collect()
    }
}

/// The error for a store redb cannot read, with the way out.
pub(super) fn damaged(path: &Path, detail: &str) -> anyhow::Error {
    let p = path.display();
    anyhow!(
        "memory store {p} is damaged ({detail}). To recover: move it aside (`mv {p} {p}.damaged`), then run skillhost again (it starts an empty store) and `skillhost memory import FILE` your latest `skillhost memory export` file (records only: the archive and working memory are not exported); keep the damaged file for a later salvage"
    )
}

/// The message of a caught panic.
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "redb panicked".to_string())
}

/// The memory store of one home, opened by the process that owns it.
pub(super) struct Store {
    pub(super) dir: PathBuf,
    pub(super) path: PathBuf,
    /// Dropped by hand, under `catch_unwind` (redb's drop may panic on a damaged file).
    pub(super) db: std::mem::ManuallyDrop<Database>,
    pub(super) index: MemoryIndex,
    pub(super) daily: DailyNotes,
    pub(super) config: MemoryConfig,
    clock: RwLock<Clock>,
    line_tokens: Mutex<HashMap<(u64, u64, u8), usize>>,
    /// Views by namespace: (store generation, valid until ms, view).
    views: Mutex<HashMap<String, (u64, u64, MemoryView)>>,
    /// Records whose reference each session already counted.
    touched: Mutex<SessionRefs>,
    /// Decoded records by namespace, kept in step with every commit (in commit order, under
    /// the write guard). Only this process writes the store, so nothing else can make it stale.
    pub(super) records_cache: RecordCache,
    /// Record embeddings and the model (see `vectors.rs`).
    pub(super) vectors: Vectors,
    daily_fingerprint: Mutex<String>,
    /// An index update failed: rebuild on the next write rather than patch.
    index_dirty: std::sync::atomic::AtomicBool,
    write_lock: Mutex<()>,
    _lock: StoreLock,
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: `db` is taken once, here, and never used again.
        let db = unsafe { std::mem::ManuallyDrop::take(&mut self.db) };
        // A panic while closing a damaged file must not turn an answered command into a crash.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
    }
}

impl Store {
    /// Open the store of `dir` (`<home>/memory`); `lock` proves this process owns it.
    pub(super) fn open(dir: &Path, config: MemoryConfig, lock: StoreLock, clock: Clock) -> Result<Store> {
        let path = dir.join("store.redb");
        // Before the index opens: tantivy must not be writing its own temp files yet.
        sweep_stale_temp_files(dir);
        // The first runtime kept a schema-1 store at <home>/memory.redb: adopt it.
        if let Some(legacy) = dir.parent().map(|p| p.join("memory.redb"))
            && legacy.exists()
            && !path.exists()
        {
            std::fs::rename(&legacy, &path)
                .with_context(|| format!("cannot move {} to {}", legacy.display(), path.display()))?;
        }
        match std::fs::metadata(&path) {
            // Never silently start over on an emptied file: the records it held would be gone
            // without a word. Ours are never empty (created aside, then renamed into place).
            Ok(m) if m.len() == 0 => {
                return Err(damaged(&path, "the file is empty (0 bytes): its records are gone or it was truncated"));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_store(&path)?,
            Err(e) => bail!("cannot read memory store {}: {e}", path.display()),
        }
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| open_db(&path)));
        let db = match opened {
            Ok(db) => db?,
            Err(panic) => return Err(damaged(&path, &format!("redb: {}", panic_message(&*panic)))),
        };
        let daily = DailyNotes::new(dir.join("daily"));
        let (generation, fingerprint) = {
            migrate(&db, system_now_ms()).map_err(|e| classify(&path, e))?;
            sessions::migrate_from_store(&db, &dir.join("sessions")).map_err(|e| classify(&path, e))?;
            let txn = db.begin_read()?;
            let meta = txn.open_table(META)?;
            let g = meta.get("generation")?.map(|v| v.value()).unwrap_or(0);
            (g, daily.fingerprint()?)
        };
        let vectors = Vectors::open(&db, load_model(dir, &config.embed_model)?).map_err(|e| classify(&path, e))?;
        // The home's settings decide the model (FromEnvironment), and so the fusion too.
        let mut config = config;
        if matches!(config.embed_model, EmbedModelChoice::FromEnvironment)
            && let Some(choice) = fusion_setting(dir.parent().unwrap_or(dir))?
        {
            config.fusion = choice.params();
        }
        let stamp = index::stamp(generation, &fingerprint);
        let daily_fingerprint = Mutex::new(fingerprint);
        let (index, fresh) = MemoryIndex::open(&dir.join("index"), &stamp)?;
        let store = Store {
            dir: dir.to_path_buf(),
            path,
            db: std::mem::ManuallyDrop::new(db),
            index,
            daily,
            config,
            clock: RwLock::new(clock),
            line_tokens: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
            touched: Mutex::new(SessionRefs::default()),
            records_cache: Mutex::new(HashMap::new()),
            vectors,
            daily_fingerprint,
            index_dirty: std::sync::atomic::AtomicBool::new(false),
            write_lock: Mutex::new(()),
            _lock: lock,
        };
        if !fresh {
            tracing::info!(index = %dir.join("index").display(), "the memory search index lags the store; rebuilding it");
            store.rebuild_index()?;
        }
        tracing::info!(
            store = %store.path.display(),
            generation,
            semantic = store.vectors.model().map(|m| m.identity()).unwrap_or("off (lexical only)"),
            "memory store opened"
        );
        Ok(store)
    }

    pub(super) fn set_clock(&self, clock: Clock) {
        if let Ok(mut c) = self.clock.write() {
            *c = clock;
        }
    }

    pub fn now_ms(&self) -> u64 {
        match self.clock.read() {
            Ok(c) => c(),
            Err(_) => system_now_ms(),
        }
    }

    /// Wait for the writes before this one (it protects no data: a panic does not poison it).
    pub(super) fn write_guard(&self) -> WriteGuard<'_> {
        self.write_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn begin(&self) -> Result<Txn<'_>> {
        let guard = self.write_guard();
        Ok(Txn {
            txn: self.db.begin_write().context("cannot start a memory store transaction")?,
            cache: Some(&self.records_cache),
            changes: std::cell::RefCell::new(Vec::new()),
            guard: Some(guard),
        })
    }

    pub(super) fn current_stamp(&self) -> Result<String> {
        let daily = self.daily_fingerprint.lock().map_err(|_| anyhow!("daily-note fingerprint poisoned"))?;
        Ok(index::stamp(self.generation()?, &daily))
    }

    /// Daily notes change only through this store (it holds the lock) or by hand between
    /// runs (caught at open), so their fingerprint is read again only after we change them.
    pub(super) fn refresh_daily_fingerprint(&self) -> Result<()> {
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
    pub(super) fn reindex(&self, upserts: &[&MemoryRecord], deletes: &[u64], daily: &[DailyEntry]) -> Result<()> {
        use std::sync::atomic::Ordering;
        if let Err(e) = self.vectors.apply(&self.db, upserts, deletes) {
            tracing::warn!(
                "memory stored, but its embedding could not be stored ({e:#}); it is recomputed on the next open"
            );
        }
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
                tracing::warn!(
                    "memory stored, but the search index could not be updated ({first:#}; rebuild: {second:#}); it is rebuilt on the next write or open"
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

    pub(super) fn load(&self, ids: impl IntoIterator<Item = u64>) -> Result<Vec<MemoryRecord>> {
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

    pub(super) fn ids_of_namespace(&self, namespace: &str) -> Result<Vec<u64>> {
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
    pub(super) fn with_namespace<T>(
        &self,
        namespace: &str,
        f: impl FnOnce(&BTreeMap<u64, MemoryRecord>) -> T,
    ) -> Result<T> {
        let mut cache = self.records_cache.lock().map_err(|_| anyhow!("memory record cache poisoned"))?;
        if !cache.contains_key(namespace) {
            let records = self.load(self.ids_of_namespace(namespace)?)?;
            cache.insert(namespace.to_string(), records.into_iter().map(|r| (r.id, r)).collect());
        }
        let empty = BTreeMap::new();
        Ok(f(cache.get(namespace).unwrap_or(&empty)))
    }

    pub(super) fn check_new(&self, r: &NewRecord) -> Result<()> {
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
    pub(super) fn check_protected(&self, namespace: &str, live: &[MemoryRecord]) -> Result<()> {
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

    pub(super) fn new_record(&self, id: u64, r: NewRecord, now: u64) -> MemoryRecord {
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
            referenced_ms: None,
            supersedes: Vec::new(),
            superseded_by: None,
        };
        record.importance = round_importance(record.importance_at(now));
        record
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
            SearchOrder::Relevance => limit.max(PREFER_NEWER_WINDOW),
            SearchOrder::PriorityThenRecency => (limit.saturating_mul(5)).max(50),
        };
        let sources = hybrid::Sources {
            index: &self.index,
            vectors: &self.vectors,
            db: &self.db,
            fusion: self.config.fusion,
            load: &|ids| self.load(ids),
        };
        let ranked = sources.ranked(query, filter, now, fetch)?;
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
        } else {
            merge::prefer_newer(&mut hits, self.config.merge_similarity, PREFER_NEWER_WINDOW);
        }
        hits.truncate(limit);
        tracing::debug!(hits = hits.len(), limit, order = ?filter.order, "memory search");
        Ok(hits)
    }

    /// Daily-note entries relevant to `query`.
    pub fn search_daily(&self, query: &str, limit: usize) -> Result<Vec<DailyHit>> {
        self.index.search_daily(query, limit.min(MAX_SEARCH_LIMIT))
    }

    /// What goes into a prompt besides MEMORY.md: the 5 most recent records of the
    /// namespace plus the 5 records most relevant to `query` that are not among them,
    /// highest priority first. Relevant = the best-ranked hits of [`Store::search`] (lexical
    /// or fused, newer-first applied) scoring at least [`RECALL_RELATIVE_SCORE`] of the best
    /// hit; the best hit itself is always in. Sharing one word is not enough.
    ///
    /// Relevance picks the records, priority orders them and breaks near-ties only for the
    /// places search's top five leave free (see [`relevant_by_priority`]): picking the
    /// highest priority among a wider relevant set let a project's many priority-4 facts,
    /// which all share its name, push out records search ranks in its top five, so recall
    /// found less than search did on tests/memory_eval.
    /// Counts as a reference for each returned record.
    pub fn recall(&self, session: &str, namespace: &str, query: &str) -> Result<Vec<MemoryRecord>> {
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
                    if recent.len() == RECALL_PART {
                        break;
                    }
                }
            }
        }
        let hits = self.search(query, &SearchFilter::namespace(namespace), RECALL_RANKS)?;
        let recent_ids: Vec<u64> = recent.iter().map(|r| r.id).collect();
        let mut out = recent;
        out.extend(relevant_by_priority(hits, &recent_ids, RECALL_PART));
        self.touch_in_session(session, &out.iter().map(|r| r.id).collect::<Vec<_>>())?;
        Ok(out)
    }

    /// Count a reference to each record, at most once per record per session (an agent
    /// run, a sandbox session, one CLI call), so a skill searching in a loop cannot inflate
    /// importance while a long-lived server still counts every new session. Not fsynced: a
    /// crash may lose a few counts, never a record.
    pub fn touch_in_session(&self, session: &str, ids: &[u64]) -> Result<()> {
        let fresh: Vec<u64> = match self.touched.lock() {
            Ok(mut refs) => refs.fresh(session, ids),
            Err(_) => return Ok(()),
        };
        if fresh.is_empty() {
            return Ok(());
        }
        // In the write order, like every other write (the cache below must follow commits).
        let _written = self.write_guard();
        let mut touched = Vec::new();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::None).map_err(|e| anyhow!("memory store: {e}"))?;
        {
            let mut t = txn.open_table(RECORDS)?;
            for id in fresh {
                let found = t.get(id)?.map(|v| decode_record(v.value(), id)).transpose()?;
                if let Some(mut r) = found {
                    r.references = r.references.saturating_add(1);
                    r.referenced_ms = Some(self.now_ms());
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

    pub(super) fn cached_line_tokens(&self, r: &MemoryRecord) -> usize {
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
            let view = view::render(
                namespace,
                &live,
                self.config.budget_tokens,
                self.config.skill_view_share,
                now,
                &mut |r| self.cached_line_tokens(r),
            );
            (view, live.iter().filter_map(|r| r.expires_ms).min().unwrap_or(u64::MAX))
        })?;
        // Valid until the next hour (recency moves slowly) or the next expiry, whichever is first.
        let valid_until = (now / 3_600_000 + 1).saturating_mul(3_600_000).min(next_expiry);
        if let Ok(mut views) = self.views.lock() {
            views.insert(namespace.to_string(), (generation, valid_until, view.clone()));
        }
        Ok(view)
    }

    pub(super) fn generation(&self) -> Result<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(META)?.get("generation")?.map(|v| v.value()).unwrap_or(0))
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

    /// Entries of the daily note of `date` (default: today).
    pub fn daily(&self, date: Option<&str>) -> Result<(String, Vec<DailyEntry>)> {
        let date = date.map(str::to_string).unwrap_or_else(|| daily::date_of(self.now_ms()));
        let entries = self.daily.read(&date)?;
        Ok((date, entries))
    }
}

impl Store {
    /// The sandbox's search: live records of `namespace`, each counted as a reference of `session`.
    pub fn search_in_session(
        &self,
        session: &str,
        namespace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryRecord, f32)>> {
        let hits = self.search(query, &SearchFilter::namespace(namespace), limit)?;
        self.touch_in_session(session, &hits.iter().map(|h| h.record.id).collect::<Vec<_>>())?;
        Ok(hits.into_iter().map(|h| (h.record, h.score)).collect())
    }

    pub fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        self.load(self.ids_of_namespace(namespace)?)
    }

    pub fn session_get(&self, session: &str, key: &str) -> Result<Option<String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SESSION_KV)?;
        Ok(table.get((session, key))?.map(|v| v.value().to_string()))
    }

    pub fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()> {
        let txn = self.begin()?;
        txn.txn.open_table(SESSION_KV)?.insert((session, key), value)?;
        txn.commit()?;
        Ok(())
    }

    pub fn session_keys(&self, session: &str) -> Result<Vec<String>> {
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

/// A search hit and its rank in search's order.
type RankedHit = (usize, SearchHit);

/// The recall rule's relevant part: of `hits` (best first), those not in `shown` that score
/// at least [`RECALL_RELATIVE_SCORE`] of the best (the best hit always counts). Search's
/// first `n` of these are recalled, except that hits tied with the lowest of them (equal
/// scores, which search cannot tell apart: a lexical store with records holding the same
/// words) compete for those places by priority. The places that shown records free go to
/// the next relevant hits, where priority decides among those about as good as the last
/// one that fits (within [`RECALL_TIE`] of its score). Then highest priority first, rank
/// breaking ties. So recall finds whatever search's top `n` finds, unless it is shown, a
/// weak match or an exact tie of lower priority.
///
/// Letting priority compete for search's own places among near-ties lost records: a
/// project's priority-4 facts, which all share its name, pushed out the one record search
/// ranked fifth, 3 % above them (tests/memory_eval, "atlas-web 的端到端测试用什么工具？").
fn relevant_by_priority(hits: Vec<SearchHit>, shown: &[u64], n: usize) -> Vec<MemoryRecord> {
    let Some(best) = hits.first().map(|h| h.score) else { return Vec::new() };
    let (mut chosen, mut rest): (Vec<RankedHit>, Vec<RankedHit>) = hits
        .into_iter()
        .enumerate()
        .filter(|(rank, h)| *rank == 0 || best <= 0.0 || h.score >= best * RECALL_RELATIVE_SCORE)
        .filter(|(_, h)| !shown.contains(&h.record.id))
        .partition(|(rank, _)| *rank < n);
    if let Some(low) = chosen.iter().map(|(_, h)| h.score).reduce(f32::min) {
        let tied = |(_, h): &RankedHit| (h.score - low).abs() <= low.abs() * RECALL_EXACT_TIE;
        let (tied_in, kept): (Vec<_>, Vec<_>) = chosen.into_iter().partition(tied);
        let (tied_out, others): (Vec<_>, Vec<_>) = rest.into_iter().partition(tied);
        let places = tied_in.len();
        let (won, mut lost) = by_priority_for(places, tied_in.into_iter().chain(tied_out).collect());
        chosen = kept.into_iter().chain(won).collect();
        lost.extend(others);
        lost.sort_by_key(|(rank, _)| *rank);
        rest = lost;
    }
    let free = n.saturating_sub(chosen.len());
    // The next `free` always compete (search's newer-first rule may have moved a hit above
    // one that scores more), and so do later hits about as good as the last of them.
    let last = rest.get(free.wrapping_sub(1)).map(|(_, h)| h.score).filter(|s| *s > 0.0);
    let band =
        rest.into_iter().enumerate().filter(|(i, (_, h))| *i < free || last.is_none_or(|l| h.score >= l * RECALL_TIE));
    chosen.extend(by_priority_for(free, band.map(|(_, hit)| hit).collect()).0);
    chosen.sort_by(by_priority);
    chosen.into_iter().map(|(_, h)| h.record).collect()
}

/// Highest priority first, search's rank breaking ties.
fn by_priority(a: &RankedHit, b: &RankedHit) -> std::cmp::Ordering {
    b.1.record.priority.cmp(&a.1.record.priority).then(a.0.cmp(&b.0))
}

/// `pool` by priority, split after `places`: (the winners, the rest).
fn by_priority_for(places: usize, mut pool: Vec<RankedHit>) -> (Vec<RankedHit>, Vec<RankedHit>) {
    pool.sort_by(by_priority);
    let rest = pool.split_off(places.min(pool.len()));
    (pool, rest)
}

/// A new store is created aside and renamed into place, so `store.redb` is never a
/// half-created (empty) file of ours.
fn create_store(path: &Path) -> Result<()> {
    let fresh = path.with_extension("redb.new");
    let _ = std::fs::remove_file(&fresh);
    drop(Database::create(&fresh).with_context(|| format!("cannot create memory store {}", fresh.display()))?);
    std::fs::File::open(&fresh)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot sync {}", fresh.display()))?;
    std::fs::rename(&fresh, path).with_context(|| format!("cannot move {} to {}", fresh.display(), path.display()))?;
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn open_db(path: &Path) -> Result<Database> {
    Database::open(path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => anyhow!(
            "memory store {} is already open in this process (or by a program that ignores store.lock)",
            path.display()
        ),
        // redb reports a bad header (magic number, version) as invalid data.
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) if io.kind() != std::io::ErrorKind::InvalidData => {
            anyhow!("cannot open memory store {}: {io}", path.display())
        }
        other => damaged(path, &other.to_string()),
    })
}

/// Remove what killed writes left under `dir` (`<home>/memory`): the temp files of atomic
/// writes no live process owns (see [`crate::fsutil::sweep_temp_files`]). The index
/// directory is written only by the store's owner, whose lock this process holds, so every
/// temp file there (tantivy's, without a pid) is a leftover; session files are saved by any
/// process, so there a temp file must name a dead pid or be old. Tantivy's own files
/// (segments, meta.json, .managed.json, locks) are never touched: its GC owns them.
fn sweep_stale_temp_files(dir: &Path) {
    use crate::fsutil::{TempWriters, sweep_temp_files};
    let now = SystemTime::now();
    let dirs = [
        (dir.to_path_buf(), TempWriters::Anyone),
        (dir.join("index"), TempWriters::LockHolderOnly),
        (dir.join("sessions"), TempWriters::Anyone),
    ];
    for (swept, writers) in dirs {
        for (path, because) in sweep_temp_files(&swept, writers, now) {
            tracing::info!(path = %path.display(), because = ?because, "removed the temp file of an interrupted write");
        }
    }
}

/// A redb corruption error is a damaged store; anything else keeps its own message.
pub(super) fn classify(path: &Path, e: anyhow::Error) -> anyhow::Error {
    let corrupt = e.chain().any(|c| {
        matches!(c.downcast_ref::<redb::StorageError>(), Some(redb::StorageError::Corrupted(_)))
            || c.downcast_ref::<redb::TransactionError>()
                .is_some_and(|t| matches!(t, redb::TransactionError::Storage(redb::StorageError::Corrupted(_))))
            || c.downcast_ref::<redb::TableError>()
                .is_some_and(|t| matches!(t, redb::TableError::Storage(redb::StorageError::Corrupted(_))))
    });
    if corrupt { damaged(path, &format!("{e:#}")) } else { e }
}

/// The embedding model `choice` names for the store in `dir` (`<home>/memory`). A bad
/// `[memory] embed_model` in skillhost.toml is an error (it names the file and the key); a
/// model that cannot be loaded is reported once and search stays lexical.
fn load_model(dir: &Path, choice: &EmbedModelChoice) -> Result<Option<std::sync::Arc<EmbedModel>>> {
    let path = match choice {
        EmbedModelChoice::Off => return Ok(None),
        EmbedModelChoice::File(p) => p.clone(),
        EmbedModelChoice::FromEnvironment => match model_setting(dir.parent().unwrap_or(dir))?.path {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    match EmbedModel::shared(&path) {
        Ok(m) => Ok(Some(m)),
        Err(e) => {
            tracing::warn!("{e:#}; memory search is lexical only");
            Ok(None)
        }
    }
}

/// Where the embedding model setting of a home came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// `$SKILLHOST_EMBED_MODEL`: it wins over the file.
    Environment,
    /// `embed_model` in the `[memory]` table of this skillhost.toml.
    ConfigFile(PathBuf),
    /// Neither is set: the model installed under the home, if there is one.
    Installed,
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Environment => write!(f, "{}", embed::MODEL_ENV),
            ModelSource::ConfigFile(p) => write!(f, "[memory] embed_model in {}", p.display()),
            ModelSource::Installed => write!(f, "installed model"),
        }
    }
}

/// The embedding model a home uses and where that was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSetting {
    /// `None`: lexical search only (turned `off`, or nothing installed).
    pub path: Option<PathBuf>,
    pub source: ModelSource,
}

/// The `[memory]` table of skillhost.toml.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryTable {
    /// A model file (relative to the home) or "off". Read as any value so that a wrong type
    /// gets an error naming the key.
    embed_model: Option<toml::Value>,
    /// How search fuses its lexical and semantic parts: "default", "calibrated" or
    /// "store-crowd".
    fusion: Option<toml::Value>,
}

/// The fusions a home may choose with `[memory] fusion` (see [`FusionParams`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionChoice {
    /// [`FusionParams::meaning_first`]: what is kept as `Calibrated` keeps it, ranked by
    /// meaning first (README, Memory).
    Default,
    /// [`FusionParams::calibrated`]: a record of the other script is judged against the
    /// query's cosines to reference passages, so a small store answers across languages;
    /// ranked by that z plus the words' share.
    Calibrated,
    /// [`FusionParams::store_crowd`]: the default until issue 31's second round: the
    /// store's own crowd and a constant prior; leaves more queries about nothing unanswered
    /// in larger stores, and answers fewer across languages (README, Memory).
    StoreCrowd,
}

impl FusionChoice {
    pub fn params(self) -> FusionParams {
        match self {
            FusionChoice::Default => FusionParams::default(),
            FusionChoice::Calibrated => FusionParams::calibrated(),
            FusionChoice::StoreCrowd => FusionParams::store_crowd(),
        }
    }
}

/// `[memory] fusion` in `<home>/skillhost.toml`, if set. A value other than "default",
/// "calibrated" or "store-crowd" is an error naming the file and the key.
pub fn fusion_setting(home: &Path) -> Result<Option<FusionChoice>, crate::config::ConfigError> {
    use crate::config::{ConfigError, ConfigFile};
    let file = ConfigFile::load(home)?;
    let Some(value) = file.table::<MemoryTable>("memory")?.and_then(|t| t.fusion) else { return Ok(None) };
    match value.as_str() {
        Some("default") => Ok(Some(FusionChoice::Default)),
        Some("calibrated") => Ok(Some(FusionChoice::Calibrated)),
        Some("store-crowd") => Ok(Some(FusionChoice::StoreCrowd)),
        _ => Err(ConfigError(format!(
            "`fusion` in the [memory] table of {} is `{value}`; set it to \"default\", \"calibrated\" or \"store-crowd\" (how memory search weighs meaning across languages; see the README's Memory section)",
            file.path().display()
        ))),
    }
}

/// Which embedding model `home` uses: `$SKILLHOST_EMBED_MODEL` (a path, or `off`), else
/// `[memory] embed_model` in `<home>/skillhost.toml` (a path, relative to the home, or
/// `"off"`), else the model installed under the home. A bad value in the file is an error
/// naming the file and the key.
pub fn model_setting(home: &Path) -> Result<ModelSetting, crate::config::ConfigError> {
    use crate::config::{ConfigError, ConfigFile};
    match std::env::var_os(embed::MODEL_ENV) {
        Some(v) if v == "off" || v.is_empty() => {
            return Ok(ModelSetting { path: None, source: ModelSource::Environment });
        }
        Some(v) => return Ok(ModelSetting { path: Some(PathBuf::from(v)), source: ModelSource::Environment }),
        None => {}
    }
    let file = ConfigFile::load(home)?;
    let file_path = file.path().to_path_buf();
    let bad = |what: &str| {
        ConfigError(format!(
            "`embed_model` in the [memory] table of {} {what}; set it to the path of the model file (`skillhost memory model install` puts one under the home) or to \"off\" for lexical search only",
            file_path.display()
        ))
    };
    let setting = file.table::<MemoryTable>("memory")?.and_then(|t| t.embed_model);
    let Some(value) = setting else {
        let installed = Some(home.join(embed::MODEL_FILE)).filter(|p| p.exists());
        return Ok(ModelSetting { path: installed, source: ModelSource::Installed });
    };
    let source = ModelSource::ConfigFile(file_path.clone());
    let text = match value {
        toml::Value::String(s) => s,
        other => return Err(bad(&format!("is {} `{other}`, not a string", other.type_str()))),
    };
    if text == "off" {
        return Ok(ModelSetting { path: None, source });
    }
    if text.trim().is_empty() {
        return Err(bad("is empty"));
    }
    let path = home.join(&text);
    if !path.is_file() {
        return Err(bad(&format!("names {}, which is not a file", path.display())));
    }
    Ok(ModelSetting { path: Some(path), source })
}

impl Store {
    /// The embedding model in use, if any.
    pub fn embed_model(&self) -> Option<&std::sync::Arc<EmbedModel>> {
        self.vectors.model()
    }

    /// (records with a vector, bytes of the vectors in memory).
    pub fn vector_stats(&self) -> (usize, usize) {
        self.vectors.stats()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::records::MemoryKind;
    use super::*;

    fn hit(id: u64, score: f32, priority: u8) -> SearchHit {
        let record = MemoryRecord {
            id,
            namespace: "default".into(),
            session: "s".into(),
            kind: MemoryKind::Fact,
            content: format!("record {id}"),
            priority,
            importance: 0.0,
            tags: vec![],
            created_ms: 0,
            updated_ms: 0,
            expires_ms: None,
            deprecated: None,
            references: 0,
            provenance: vec![],
            referenced_ms: None,
            supersedes: vec![],
            superseded_by: None,
        };
        SearchHit { record, score }
    }

    #[test]
    fn many_high_priority_near_ties_do_not_push_out_search_top_five() {
        // The shape of tests/memory_eval's "atlas-web 的端到端测试用什么工具？": the relevant
        // record is fifth, a priority-4 record sixth at nearly the same score.
        let scores = [2.991, 2.808, 2.736, 2.678, 2.646, 2.560, 2.490, 2.431];
        let hits: Vec<SearchHit> =
            scores.iter().enumerate().map(|(i, s)| hit(i as u64, *s, if i == 5 { 4 } else { 3 })).collect();
        let ids: Vec<u64> = relevant_by_priority(hits, &[], 5).iter().map(|r| r.id).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn places_freed_by_shown_records_go_to_the_highest_priority_near_tie() {
        let hits = vec![hit(0, 3.0, 3), hit(1, 2.9, 3), hit(2, 2.0, 2), hit(3, 1.95, 5), hit(4, 1.0, 5)];
        // Record 1 is among the recent ones already shown: its place goes to 3 (priority 5,
        // about as good as 2), never to 4 (under half the best score).
        let ids: Vec<u64> = relevant_by_priority(hits, &[1], 3).iter().map(|r| r.id).collect();
        assert_eq!(ids, [3, 0, 2]);
    }

    #[test]
    fn exact_ties_at_the_last_place_compete_by_priority() {
        // Twelve records holding the same words: BM25 ties them all after the first two.
        let mut hits = vec![hit(1, 0.17, 0), hit(7, 0.16, 0)];
        hits.extend([2, 3, 4, 5, 6].map(|id| hit(id, 0.15, (id - 1) as u8)));
        let ids: Vec<u64> = relevant_by_priority(hits, &[], 5).iter().map(|r| r.id).collect();
        assert_eq!(ids, [6, 5, 4, 1, 7]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever the priorities and scores: a relevant hit of search's top `n` that is not
        /// shown is recalled, or an exact tie of at least its priority took its place;
        /// nothing shown or under the relative cut is; at most `n`, highest priority first.
        #[test]
        fn recall_keeps_search_top_n(
            // Few distinct scores, so that exact ties are common.
            raw in prop::collection::vec(((0u8..24).prop_map(|s| f32::from(s) / 2.0), 0u8..=5, any::<bool>()), 0..20),
            n in 1usize..7,
        ) {
            let mut scored: Vec<(f32, u8, bool)> = raw;
            // Mostly descending, as search returns them; a newer-first swap may break it.
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            if scored.len() > 3 {
                scored.swap(1, 2);
            }
            let shown: Vec<u64> = (0..scored.len() as u64).filter(|i| scored[*i as usize].2).collect();
            let hits: Vec<SearchHit> =
                scored.iter().enumerate().map(|(i, (s, p, _))| hit(i as u64, *s, *p)).collect();
            let best = scored.first().map_or(0.0, |h| h.0);
            let relevant = |i: usize| i == 0 || best <= 0.0 || scored[i].0 >= best * RECALL_RELATIVE_SCORE;
            let out = relevant_by_priority(hits, &shown, n);
            let ids: Vec<u64> = out.iter().map(|r| r.id).collect();
            prop_assert!(ids.len() <= n);
            for i in 0..scored.len().min(n) {
                if relevant(i) && !shown.contains(&(i as u64)) && !ids.contains(&(i as u64)) {
                    let (score, priority) = (scored[i].0, scored[i].1);
                    let replaced = out.iter().any(|r| {
                        let j = r.id as usize;
                        j >= n && scored[j].0 == score && scored[j].1 >= priority
                    });
                    prop_assert!(replaced, "top-{n} hit {i} lost: {ids:?} of {scored:?}");
                }
            }
            for id in &ids {
                prop_assert!(!shown.contains(id) && relevant(*id as usize), "{id} in {ids:?} of {scored:?}");
            }
            let eligible = (0..scored.len()).filter(|i| relevant(*i) && !shown.contains(&(*i as u64))).count();
            prop_assert_eq!(ids.len(), eligible.min(n), "free places left empty");
            prop_assert!(out.windows(2).all(|w| w[0].priority >= w[1].priority));
        }
    }
}
