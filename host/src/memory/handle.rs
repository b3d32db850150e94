//! [`Memory`]: the handle every caller holds, in whichever process it runs.
//!
//! # Several processes, one store
//!
//! redb 4 allows one process to open a database for writing (its multi-process mode is
//! read-only and still excludes a writer), and the tantivy index allows one writer. So
//! exactly one process *owns* the store: the first `Memory::open` takes `store.lock`
//! (flock), opens redb and the index for as long as it lives, and serves every other
//! process on `memory/store.sock` (a Unix socket, mode 0600, same uid only). A later
//! `Memory::open` in another process (or a second one in the same process) finds the lock
//! taken and becomes a *client*: each call is one request on that socket, answered by the
//! owner with the same code its own callers run. When the owner exits (cleanly or killed),
//! the kernel drops its lock; the next call of a client finds the socket dead, takes the
//! lock and becomes the owner itself, transparently.
//!
//! Why an owner rather than short-held opens: a server doing thousands of memory calls a
//! second keeps redb, the index reader and its caches open and pays nothing per call, while
//! a CLI command beside it costs one round trip on a local socket (tens of microseconds)
//! instead of reopening redb and tantivy and revalidating caches per call. The caches stay
//! right because only the owner ever writes.
//!
//! What can be lost: every write is durable (fsynced by redb) before the owner answers, so
//! a power loss or a killed owner loses no acknowledged write. Reference counts are
//! committed without fsync and may lose the last few on a power loss. A write in flight
//! when the owner dies may or may not have been applied; the client is told so and not
//! retried (reads are retried on the new owner). The search index and the vectors are
//! derived and written without fsync: rebuilt on open if they lag the store, and after a
//! crash of the machine the index is checked file by file (rebuilt if anything is lost).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, bail};

use super::MemoryStore;
use super::daily::DailyEntry;
use super::index::DailyHit;
use super::lock::{self, StoreLock};
use super::log::Replication;
use super::ops::{self, Op, Request};
use super::records::{ArchiveEntry, MemoryKind, MemoryRecord, NewRecord, SearchFilter, SearchHit};
use super::remote::{self, CallError, Client, Server, guarded};
use super::replica::{self, Replica};
use super::sessions::AgentSessions;
use super::store::{Clock, MemoryConfig, Store, damaged, panic_message, system_now_ms};
use super::view::MemoryView;
use super::writes::{CompactReport, ImportReport, MaintainReport};

/// The owner's half: the open store and the server that lets other processes use it.
struct Owner {
    store: Arc<Store>,
    /// The shared log the store is a replica of (several hosts on one PostgreSQL).
    replica: Option<Arc<Replica>>,
    server: Option<Server>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Stop serving (and close the connections, which hold the store) before the store
        // and its lock go, so that the next owner never finds a live socket of ours.
        if let Some(mut s) = self.server.take() {
            s.stop();
        }
        // A replica stops where an op ends, and says so durably (see `Replica::stop`).
        if let Some(replica) = &self.replica
            && let Err(e) = replica.stop(&self.store)
        {
            tracing::warn!("cannot record where the memory replica stands: {e:#}; it is rebuilt on the next start");
        }
    }
}

enum Backend {
    Owner(Owner),
    Client(Arc<Client>),
}

struct State {
    backend: Backend,
    /// Bumped on every reconnect or take-over, so that threads that saw the same dead owner
    /// reconnect once.
    epoch: u64,
}

/// What semantic search holds in memory ([`Memory::semantic_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemanticStats {
    pub model: String,
    pub vectors: usize,
    pub vector_bytes: usize,
    /// The mapped model file, and the expanded weights on the heap.
    pub model_file_bytes: usize,
    pub model_heap_bytes: usize,
}

/// The memory system of one skillhost home.
pub struct Memory {
    dir: PathBuf,
    config: MemoryConfig,
    clock: Option<Clock>,
    /// The reference-count session of calls that name none (one per open handle).
    session: String,
    sessions: AgentSessions,
    state: RwLock<State>,
}

/// Own the store if nobody does, else connect to its owner; waits up to `config.busy_wait`.
fn connect_or_own(dir: &Path, config: &MemoryConfig, clock: Option<Clock>) -> Result<Backend> {
    let lock_path = dir.join("store.lock");
    let socket = dir.join("store.sock");
    let started = Instant::now();
    loop {
        if let Some(lock) = StoreLock::try_acquire(&lock_path)? {
            // Bound before the (possibly slow) open: clients that come meanwhile wait in the
            // backlog instead of failing.
            let listener = match remote::bind(&socket) {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!("{e:#}; other processes cannot use the memory store while this one runs");
                    None
                }
            };
            let clock = clock.unwrap_or_else(|| Arc::new(system_now_ms));
            let checked = match &config.replication {
                Some(Replication(log)) => Replica::check_before_open(dir, log.as_ref()),
                None => Ok(()),
            };
            // redb may panic on a damaged file anywhere in opening (repair, migration, the
            // index rebuild): that is a damaged store, not a crash.
            let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Store::open(dir, config.clone(), lock, clock)
            }))
            .unwrap_or_else(|panic| {
                Err(damaged(&dir.join("store.redb"), &format!("redb: {}", panic_message(&*panic))))
            });
            // A replica catches up with the shared log before it serves anyone.
            let opened = checked.and(opened).map(Arc::new).and_then(|store| match &config.replication {
                Some(Replication(log)) => Replica::attach(&store, log.clone()).map(|r| (store, Some(r))),
                None => Ok((store, None)),
            });
            let (store, replica) = match opened {
                Ok(s) => s,
                Err(e) => {
                    if listener.is_some() {
                        let _ = std::fs::remove_file(&socket);
                    }
                    return Err(e);
                }
            };
            let server = match listener {
                Some(l) => Some(Server::start(l, socket, store.clone(), replica.clone())?),
                None => None,
            };
            return Ok(Backend::Owner(Owner { store, replica, server }));
        }
        let why = match Client::connect(&socket, config.busy_wait) {
            Ok(c) => {
                tracing::debug!(socket = %socket.display(), "another process owns the memory store; using it through its socket");
                return Ok(Backend::Client(Arc::new(c)));
            }
            Err(e) => e,
        };
        if started.elapsed() >= config.busy_wait {
            bail!(
                "the memory store {} is busy: {}, and that process does not answer on {} ({why}); waited {:.1} s. Wait for it to finish (or stop it) and retry",
                dir.display(),
                lock::holder(&lock_path),
                socket.display(),
                config.busy_wait.as_secs_f64()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

impl Memory {
    /// Open the memory of a skillhost home (`dir` = `<home>/memory`): as its owner if no
    /// process is, else as a client of the process that is (see the module doc).
    pub fn open(dir: &Path, config: MemoryConfig) -> Result<Memory> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let backend = connect_or_own(dir, &config, None)?;
        Ok(Memory {
            dir: dir.to_path_buf(),
            config,
            clock: None,
            session: format!("open-{}-{:016x}", std::process::id(), fastrand::u64(..)),
            sessions: AgentSessions::new(dir.join("sessions")),
            state: RwLock::new(State { backend, epoch: 0 }),
        })
    }

    /// Replace the clock (tests of expiry and recency; imports of old data). It rules the
    /// store while this handle owns it; a client's calls run on the owner's clock.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Memory {
        let clock: Clock = Arc::new(clock);
        if let Ok(state) = self.state.read()
            && let Backend::Owner(o) = &state.backend
        {
            o.store.set_clock(clock.clone());
        }
        self.clock = Some(clock);
        self
    }

    /// Before a process that owns a replicated store exits without dropping it (a server):
    /// stop following the shared log once the op in progress is whole, and record durably
    /// where the replica stands, so that the next start goes on from there instead of
    /// rebuilding it. Memory writes are refused from then on; a client handle or an
    /// unreplicated store has nothing to stop.
    pub fn stop_replication(&self) -> Result<()> {
        let state = self.state.read().map_err(|_| anyhow!("the memory handle is poisoned"))?;
        match &state.backend {
            Backend::Owner(o) => match &o.replica {
                Some(replica) => replica.stop(&o.store),
                None => Ok(()),
            },
            Backend::Client(_) => Ok(()),
        }
    }

    /// Whether this handle owns the store (else it is a client of the process that does).
    pub fn is_owner(&self) -> bool {
        self.state.read().map(|s| matches!(s.backend, Backend::Owner(_))).unwrap_or(false)
    }

    /// The pid of the process that owns the store.
    pub fn owner_pid(&self) -> u32 {
        match self.state.read().as_deref() {
            Ok(State { backend: Backend::Client(c), .. }) => c.owner_pid,
            _ => std::process::id(),
        }
    }

    /// Run an operation on the store: in this process if it owns it, else on the owner.
    fn run<O: Op>(&self, op: O) -> Result<O::Output> {
        for _ in 0..4 {
            let (client, epoch) = {
                let state = self.state.read().map_err(|_| anyhow!("memory handle poisoned"))?;
                match &state.backend {
                    Backend::Owner(o) => {
                        let (store, replica) = (o.store.clone(), o.replica.clone());
                        drop(state);
                        return guarded(&store, |s| replica::run(replica.as_deref(), s, op));
                    }
                    Backend::Client(c) => (c.clone(), state.epoch),
                }
            };
            let req: Request = op.clone().into();
            match client.call(&req) {
                Ok(v) => return serde_json::from_value(v).context("the memory store owner sent an unexpected answer"),
                Err(CallError::Failed(e)) => return Err(e),
                Err(CallError::NotSent(_)) => self.reconnect(epoch)?,
                Err(CallError::Lost(e)) => {
                    self.reconnect(epoch)?;
                    if !O::READ {
                        bail!(
                            "the process that owned the memory store (pid {}) went away during this write ({e}); it may or may not have been applied: check (e.g. `skillhost memory search`) before retrying",
                            client.owner_pid
                        );
                    }
                }
            }
        }
        bail!("the memory store owner keeps going away; retry")
    }

    /// The owner this handle talked to is gone: connect to the new one, or become it.
    fn reconnect(&self, seen: u64) -> Result<()> {
        let mut state = self.state.write().map_err(|_| anyhow!("memory handle poisoned"))?;
        if state.epoch != seen {
            return Ok(());
        }
        state.backend = connect_or_own(&self.dir, &self.config, self.clock.clone())?;
        state.epoch += 1;
        Ok(())
    }

    pub fn now_ms(&self) -> u64 {
        match self.state.read().as_deref() {
            Ok(State { backend: Backend::Owner(o), .. }) => o.store.now_ms(),
            _ => self.clock.as_ref().map(|c| c()).unwrap_or_else(system_now_ms),
        }
    }

    /// The embedding model and the vectors of the store, when this process owns it and a
    /// model is in use (None as a client of another process, or lexical only).
    pub fn semantic_stats(&self) -> Option<SemanticStats> {
        match self.state.read().as_deref() {
            Ok(State { backend: Backend::Owner(o), .. }) => {
                let model = o.store.embed_model()?;
                let (vectors, vector_bytes) = o.store.vector_stats();
                let (model_file_bytes, model_heap_bytes) = model.footprint();
                Some(SemanticStats {
                    model: model.identity().to_string(),
                    vectors,
                    vector_bytes,
                    model_file_bytes,
                    model_heap_bytes,
                })
            }
            _ => None,
        }
    }

    /// Rebuild the search index from the store (and the daily notes).
    pub fn rebuild_index(&self) -> Result<()> {
        self.run(ops::RebuildIndex {})
    }

    /// A record by id (any state).
    pub fn get(&self, id: u64) -> Result<Option<MemoryRecord>> {
        self.run(ops::Get { id })
    }

    /// Every record of every namespace, by id.
    pub fn all_records(&self) -> Result<Vec<MemoryRecord>> {
        self.run(ops::AllRecords {})
    }

    /// Live (not deprecated, not expired) records of `namespace`, oldest first.
    pub fn live(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        self.run(ops::Live { namespace: namespace.into() })
    }

    /// Store `r`: merged into a near-duplicate when there is one (the archive keeps the
    /// incoming version, and the stored one when its wording changes); the live record when
    /// it updates an older one (same subject, new value: the older one is archived as
    /// outdated, linked to it, and listed in the new record's `supersedes`); else a new
    /// record. Returns the id that holds the fact.
    pub fn add(&self, r: NewRecord) -> Result<u64> {
        Ok(self.add_detailed(r)?.0)
    }

    /// [`Memory::add`], also saying whether the record was merged into an existing one.
    pub fn add_detailed(&self, r: NewRecord) -> Result<(u64, bool)> {
        self.run(ops::Add { record: r })
    }

    /// Store many records in one transaction, without merging (bulk loads and benchmarks;
    /// `memory compact` merges duplicates afterwards). Priority-5 budgets are checked.
    pub fn add_batch(&self, records: Vec<NewRecord>) -> Result<Vec<u64>> {
        self.run(ops::AddBatch { records })
    }

    /// [`Memory::add_batch`] with each record's embedding given instead of computed: for
    /// benchmarks that need a large store with vectors quickly. Only in the process that
    /// owns the store, with a model loaded.
    #[doc(hidden)]
    pub fn add_batch_embedded(&self, batch: Vec<(NewRecord, Vec<f32>)>) -> Result<Vec<u64>> {
        match self.state.read().as_deref() {
            Ok(State { backend: Backend::Owner(o), .. }) => o.store.add_batch_embedded(batch),
            _ => bail!("add_batch_embedded needs the process that owns the memory store"),
        }
    }

    /// Live records relevant to `query` under `filter` (at most 1000). With
    /// [`SearchOrder::PriorityThenRecency`](super::SearchOrder), the 50 most relevant are
    /// ordered by priority, then recency. Counts no reference.
    pub fn search(&self, query: &str, filter: &SearchFilter, limit: usize) -> Result<Vec<SearchHit>> {
        self.run(ops::Search { query: query.into(), filter: filter.clone(), limit })
    }

    /// Daily-note entries relevant to `query`.
    pub fn search_daily(&self, query: &str, limit: usize) -> Result<Vec<DailyHit>> {
        self.run(ops::SearchDaily { query: query.into(), limit })
    }

    /// What goes into a prompt besides MEMORY.md: the 5 most recent records of the
    /// namespace plus the 5 highest-priority records relevant to `query`, without repeats.
    /// Counts as a reference of this handle's session for each returned record.
    pub fn recall(&self, namespace: &str, query: &str) -> Result<Vec<MemoryRecord>> {
        self.recall_in_session(&self.session, namespace, query)
    }

    /// [`Memory::recall`] on behalf of `session` (an agent run): each record counts one
    /// reference per session.
    pub fn recall_in_session(&self, session: &str, namespace: &str, query: &str) -> Result<Vec<MemoryRecord>> {
        self.run(ops::Recall { session: session.into(), namespace: namespace.into(), query: query.into() })
    }

    /// Count a reference to each record, once per record for this handle's session.
    pub fn touch(&self, ids: &[u64]) -> Result<()> {
        self.touch_in_session(&self.session, ids)
    }

    /// Count a reference to each record, at most once per record per `session`.
    pub fn touch_in_session(&self, session: &str, ids: &[u64]) -> Result<()> {
        self.run(ops::Touch { session: session.into(), ids: ids.to_vec() })
    }

    /// The MEMORY.md view of `namespace`.
    pub fn view(&self, namespace: &str) -> Result<MemoryView> {
        self.run(ops::View { namespace: namespace.into() })
    }

    /// Set a record's priority (0-5); lowering it to 1 or less gives it a day from now.
    pub fn set_priority(&self, id: u64, priority: u8) -> Result<MemoryRecord> {
        self.run(ops::SetPriority { id, priority })
    }

    /// Copy daily-note entry `date:line` into long-term memory (once).
    pub fn promote_daily(&self, date: &str, line: u32, namespace: &str, kind: MemoryKind, priority: u8) -> Result<u64> {
        self.run(ops::PromoteDaily { date: date.into(), line, namespace: namespace.into(), kind, priority })
    }

    /// Move a record to the archive (`memory restore` brings it back).
    pub fn forget(&self, id: u64) -> Result<u64> {
        self.run(ops::Forget { id })
    }

    /// Put an archived record back (same id). Fails if that id is in use again.
    pub fn restore(&self, archive_id: u64) -> Result<MemoryRecord> {
        self.run(ops::Restore { archive_id })
    }

    /// The archive, oldest first.
    pub fn archive(&self) -> Result<Vec<ArchiveEntry>> {
        self.run(ops::Archive {})
    }

    /// The whole store, consistent (see `snapshot.rs`).
    pub fn snapshot(&self) -> Result<super::MemorySnapshot> {
        self.run(ops::TakeSnapshot {})
    }

    /// Load a whole store into this one, which must be empty (on a shared log: whose log
    /// must be empty); ids, times and the archive are kept as they are.
    pub fn load_snapshot(&self, snapshot: super::MemorySnapshot) -> Result<super::SnapshotReport> {
        self.run(ops::LoadSnapshot { snapshot })
    }

    /// On a store replicated through a shared log: write a checkpoint of this replica at the
    /// log's head and remove the ops the newest checkpoint at least `retain` old holds (see
    /// `replica.rs`). A local store has no log: refused.
    pub fn checkpoint(&self, retain: std::time::Duration) -> Result<super::CheckpointReport> {
        self.run(ops::Checkpoint { retain_secs: retain.as_secs() })
    }

    /// Deprecate every live record that `skill` wrote (only version `hash_prefix`, if
    /// given): the response to poisoned memory. Returns the ids.
    pub fn quarantine(&self, skill: &str, hash_prefix: Option<&str>) -> Result<Vec<u64>> {
        self.run(ops::Quarantine { skill: skill.into(), hash_prefix: hash_prefix.map(str::to_string) })
    }

    /// Cleanup job: archive deprecated and expired records, merge near-duplicates.
    pub fn compact(&self, namespace: Option<&str>) -> Result<CompactReport> {
        self.run(ops::Compact { namespace: namespace.map(str::to_string) })
    }

    /// The weekly job: compact, archive records whose importance decayed below the
    /// threshold, archive daily notes older than 90 days, promote `#promote` entries.
    pub fn maintain(&self, namespace: &str) -> Result<MaintainReport> {
        self.run(ops::Maintain { namespace: namespace.into() })
    }

    /// Append to today's daily note.
    pub fn note(&self, text: &str) -> Result<DailyEntry> {
        self.run(ops::Note { text: text.into() })
    }

    /// Entries of the daily note of `date` (default: today).
    pub fn daily(&self, date: Option<&str>) -> Result<(String, Vec<DailyEntry>)> {
        self.run(ops::Daily { date: date.map(str::to_string) })
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
        self.run(ops::Import { input: input.into(), source: source.into() })
    }

    /// State of a paused agent run (`memory/sessions/`, no store owner needed).
    pub fn agent_session(&self, id: &str) -> Result<Option<serde_json::Value>> {
        self.sessions.get(id)
    }

    pub fn save_agent_session(&self, id: &str, state: &serde_json::Value) -> Result<()> {
        self.sessions.save(id, state)
    }
}

impl MemoryStore for Memory {
    fn search(&self, namespace: &str, query: &str, limit: usize) -> Result<Vec<(MemoryRecord, f32)>> {
        self.search_in_session(&self.session, namespace, query, limit)
    }

    fn search_in_session(
        &self,
        session: &str,
        namespace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryRecord, f32)>> {
        self.run(ops::SearchInSession {
            session: session.into(),
            namespace: namespace.into(),
            query: query.into(),
            limit,
        })
    }

    fn insert(&self, record: NewRecord) -> Result<u64> {
        self.add(record)
    }

    fn list(&self, namespace: &str) -> Result<Vec<MemoryRecord>> {
        self.run(ops::List { namespace: namespace.into() })
    }

    fn session_get(&self, session: &str, key: &str) -> Result<Option<String>> {
        self.run(ops::SessionGet { session: session.into(), key: key.into() })
    }

    fn session_set(&self, session: &str, key: &str, value: &str) -> Result<()> {
        self.run(ops::SessionSet { session: session.into(), key: key.into(), value: value.into() })
    }

    fn session_keys(&self, session: &str) -> Result<Vec<String>> {
        self.run(ops::SessionKeys { session: session.into() })
    }
}

#[cfg(test)]
impl Memory {
    /// The store and replica this process owns (for the replica's tests).
    pub(super) fn owned_for_tests(&self) -> (Arc<Store>, Option<Arc<Replica>>) {
        match &self.state.read().unwrap().backend {
            Backend::Owner(o) => (o.store.clone(), o.replica.clone()),
            Backend::Client(_) => panic!("this process does not own the memory store"),
        }
    }
}
