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

use super::daily::{DailyEntry, DailyNotes};
use super::embed::EmbedModel;
use super::hybrid::FusionParams;
use super::index::{self, MemoryIndex};
use super::lock::StoreLock;
use super::merge::round_importance;
use super::records::{MemoryRecord, NewRecord};
use super::schema::{BY_NAMESPACE, META, RECORDS, RecordCache, Txn, WriteGuard, decode_record, migrate};
use super::sessions;
use super::settings::{fusion_setting, model_setting};
use super::tokens::count_tokens;
use super::vectors::Vectors;
use super::view::{self, MemoryView};

/// Most results one search returns.
pub const MAX_SEARCH_LIMIT: usize = 1000;
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
    /// The shared log of writes this store is a replica of (several hosts on one
    /// PostgreSQL; see `replica.rs`); `None`: this home's store is the system of record.
    pub replication: Option<super::log::Replication>,
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
            replication: None,
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
pub(super) struct SessionRefs {
    seen: HashMap<String, HashSet<u64>>,
    order: VecDeque<String>,
}

impl SessionRefs {
    /// The ids `session` had not referenced yet (now marked as referenced).
    pub(super) fn fresh(&mut self, session: &str, ids: &[u64]) -> Vec<u64> {
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
    pub(super) line_tokens: Mutex<HashMap<(u64, u64, u8), usize>>,
    /// Views by namespace: (store generation, valid until ms, view).
    pub(super) views: Mutex<HashMap<String, (u64, u64, MemoryView)>>,
    /// Records whose reference each session already counted.
    pub(super) touched: Mutex<SessionRefs>,
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
        // An op replayed from the shared log runs at the time it was written.
        if let Some((_, at_ms)) = super::log::replaying() {
            return at_ms;
        }
        match self.clock.read() {
            Ok(c) => c(),
            Err(_) => system_now_ms(),
        }
    }

    /// `(replica_applying, replica_seq)`: the last log op that committed here, and the last
    /// one applied whole (see `replica.rs`).
    pub(super) fn replica_marks(&self) -> Result<(u64, u64)> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let get = |k: &str| -> Result<u64> { Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0)) };
        Ok((get(super::log::APPLYING)?, get(super::log::APPLIED)?))
    }

    /// Record that log op `seq` is applied whole. Not synced unless `durable`: a crash that
    /// loses it leaves `replica_applying` ahead, and the replica is rebuilt (never trusted).
    /// A clean stop records it `durable` ([`super::replica::Replica::stop`]).
    /// `mark` (the op's time and digest) tells it apart from another history's op `seq`.
    pub(super) fn set_replica_applied(&self, seq: u64, mark: super::log::OpMark, durable: bool) -> Result<()> {
        use super::log::{APPLIED, APPLIED_AT, APPLIED_AT_SEQ, APPLIED_DIGEST, APPLIED_DIGEST_SEQ};
        let mut txn = self.begin()?;
        if !durable {
            txn.txn.set_durability(redb::Durability::None).map_err(|e| anyhow::anyhow!("memory store: {e}"))?;
        }
        txn.set_meta(APPLIED, seq)?;
        txn.set_meta(APPLIED_AT, mark.at_ms)?;
        txn.set_meta(APPLIED_AT_SEQ, seq)?;
        txn.set_meta(APPLIED_DIGEST, mark.digest)?;
        txn.set_meta(APPLIED_DIGEST_SEQ, seq)?;
        txn.commit()?;
        Ok(())
    }

    /// The time and digest of the last op applied whole (each 0: not recorded for it).
    pub(super) fn replica_applied_mark(&self) -> Result<super::log::OpMark> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let get = |k: &str| -> Result<u64> { Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0)) };
        super::log::applied_mark(get(super::log::APPLIED)?, get)
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

    /// The embedding model in use, if any.
    pub fn embed_model(&self) -> Option<&std::sync::Arc<EmbedModel>> {
        self.vectors.model()
    }

    /// (records with a vector, bytes of the vectors in memory).
    pub fn vector_stats(&self) -> (usize, usize) {
        self.vectors.stats()
    }
}

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
    if is_corrupt(&e) { damaged(path, &format!("{e:#}")) } else { e }
}

/// Whether redb refused to open the file as not one of its databases (garbage where the
/// file was, a damaged header) or as one of an older format (a replica is rebuilt, not
/// upgraded).
pub(super) fn is_not_a_database(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<redb::DatabaseError>().is_some_and(|d| {
            match d {
                redb::DatabaseError::Storage(redb::StorageError::Corrupted(_))
                | redb::DatabaseError::UpgradeRequired(_) => true,
                // "Not a redb database: magic number mismatch".
                redb::DatabaseError::Storage(redb::StorageError::Io(io)) => {
                    io.kind() == std::io::ErrorKind::InvalidData
                }
                _ => false,
            }
        })
    })
}

/// Whether `e` is redb finding its file damaged.
pub(super) fn is_corrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(c.downcast_ref::<redb::StorageError>(), Some(redb::StorageError::Corrupted(_)))
            || c.downcast_ref::<redb::TransactionError>()
                .is_some_and(|t| matches!(t, redb::TransactionError::Storage(redb::StorageError::Corrupted(_))))
            || c.downcast_ref::<redb::TableError>()
                .is_some_and(|t| matches!(t, redb::TableError::Storage(redb::StorageError::Corrupted(_))))
    })
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
