//! The skill library: installed skills on disk, integrity, and running them. [`Library`] is
//! also the long-lived service object: one value, shared as `Arc<Library>` by the CLI, the
//! agent loop and the MCP server, owns the wasmtime runtime, the skill cache (keyed by
//! content hash), the policy snapshot, the memory store and the audit writer, and serves
//! many calls at once.
//!
//! Layout of the skillhost home (`--home`, `SKILLHOST_HOME`, or the XDG data dir):
//!
//! ```text
//! policy.toml               user-level grants (see `policy`)
//! skills/<name>/SKILL.md    installed manifest
//! skills/<name>/skill.wasm  installed component (executable skills only)
//! skills/<name>/install.json  hashes, imports, install time
//! history/<name>/<hash>/    archived versions (see `history`)
//! cache/                    compiled components (see `sandbox::cache`)
//! memory/                   long-term + session memory, daily notes (see crate::memory)
//! audit/audit.jsonl         hash-chained log, one line per skill call or agent step (see `audit`)
//! ```
//!
//! Installs are staged in a sibling directory and swapped in with renames, so a crash
//! mid-install leaves the previous version in place. The first load of a version re-hashes
//! its files against install.json and refuses to run on a mismatch.
//!
//! State that other processes can change is revalidated, never trusted for the process
//! lifetime: a loaded skill is reused while its install.json has the same [`FileStamp`]
//! (a reinstall by another process replaces that file, so the next call loads the new
//! version), and the policy is re-read only when the stamp of the user or project file
//! changes. Everything opened lazily (runtime, memory store, a skill) is opened once even
//! when the first calls arrive together.
//!
//! The code is split by what it does: [`record`] (install.json and hashes), `install`
//! (staging, swap, crash recovery, import, remove), `history` (archive, history, rollback),
//! `catalog` (names, scan, info, search) and `run` (the skill cache, calls, their audit
//! entries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow};

use crate::audit::AuditLog;
use crate::memory::{Memory, MemoryConfig, MemoryStore};
use crate::policy::{Policy, PolicyFiles, PolicySnapshots};
use crate::sandbox::{Runtime, RuntimeOptions};

mod catalog;
mod history;
mod install;
mod loaded;
mod params;
pub mod record;
mod run;
pub mod secrets;

pub use catalog::{SkillInfo, SkillSearch};
pub use history::HistoryEntry;
pub use install::{ImportResult, InstallOptions, InstallReport, OpenedBundle, Replacement, SkillKind};
pub use loaded::{LoadedSkill, Lookup};
pub use params::params_from_pairs;
pub use record::{InstallRecord, UndeclaredImport, short_hash};
pub use run::{RunOptions, RunReport, call_entry, new_session_id};

use crate::fsutil::FileStamp;
/// Moved to [`crate::fsutil`]; re-exported so existing callers keep compiling.
pub use crate::fsutil::write_atomic;

pub const DEFAULT_NAMESPACE: &str = "default";

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// How often the library did expensive work: what the caches are for. Tests and
/// benchmarks read it to check that work is not repeated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LibraryStats {
    /// Wasmtime runtimes created (at most one per library).
    pub runtime_inits: u64,
    /// Memory stores opened (at most one per library).
    pub memory_opens: u64,
    /// Skill versions read, verified and prepared (once per content hash).
    pub skill_loads: u64,
    /// Times the policy files were parsed (once per change on disk).
    pub policy_loads: u64,
}

#[derive(Default)]
struct Counters {
    runtime_inits: AtomicU64,
    memory_opens: AtomicU64,
    skill_loads: AtomicU64,
}

/// Initialise `cell` once: concurrent first callers wait for the one that initialises
/// instead of each opening their own (a second memory store would block on this process's
/// own lock). A failed initialisation is not cached; the next caller tries again.
fn init_once<'a, T>(cell: &'a OnceLock<T>, lock: &Mutex<()>, init: impl FnOnce() -> Result<T>) -> Result<&'a T> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let v = init()?;
    Ok(cell.get_or_init(|| v))
}

/// The installed skills of one home, and the machinery to run them.
pub struct Library {
    root: PathBuf,
    policy: PolicyFiles,
    snapshots: PolicySnapshots,
    /// Path variables given explicitly (`--workspace`): they win over the policy's `[paths]`.
    paths: BTreeMap<String, String>,
    /// Fallbacks (the current directory for `$WORKSPACE`) for variables nobody set.
    default_paths: BTreeMap<String, String>,
    runtime: OnceLock<Runtime>,
    runtime_init: Mutex<()>,
    /// The guests' memory budget of the runtime, when not the default.
    memory_budget_mb: Option<u64>,
    /// Calls the runtime runs at once, when not its default (a server's `--max-calls`).
    call_slots: Option<u32>,
    store: OnceLock<Arc<Memory>>,
    store_init: Mutex<()>,
    skills: loaded::SkillCache,
    /// The host key sealing verified file stamps (`cache/.key`, shared with the compile
    /// cache); `None` when the home cannot hold one.
    seal_key: OnceLock<Option<crate::fsutil::SealKey>>,
    audit: AuditLog,
    /// The shared PostgreSQL store, when the host runs on one ([`Library::use_postgres`]).
    postgres: Option<crate::store::PgStore>,
    /// This home as a copy of the store's shared home (skills, grants, trust, secrets).
    home_sync: Option<crate::store::HomeSync>,
    counters: Counters,
    progress: Box<dyn Fn(&str) + Send + Sync>,
}

impl Library {
    /// Open (creating if needed) the home at `root`. `workspace`, when given, is `$WORKSPACE`
    /// (over the policy's `[paths]`); `project_policy` is the project-level policy file.
    pub fn open(root: &Path, workspace: Option<&Path>, project_policy: Option<PathBuf>) -> Result<Library> {
        std::fs::create_dir_all(root.join("skills"))
            .with_context(|| format!("cannot create the skillhost home {}", root.display()))?;
        let mut paths = BTreeMap::new();
        if let Some(ws) = workspace {
            let ws = std::fs::canonicalize(ws).with_context(|| format!("workspace {} does not exist", ws.display()))?;
            paths.insert("WORKSPACE".to_string(), ws.to_string_lossy().into_owned());
        }
        install::recover_interrupted_installs(&root.join("skills"));
        // Temp files of killed atomic writes (policy, secrets, audit seal, compile cache).
        for dir in [root.to_path_buf(), root.join("cache"), root.join("audit")] {
            let now = std::time::SystemTime::now();
            for (path, because) in crate::fsutil::sweep_temp_files(&dir, crate::fsutil::TempWriters::Anyone, now) {
                tracing::info!(path = %path.display(), because = ?because, "removed the temp file of an interrupted write");
            }
        }
        let policy = PolicyFiles { user: root.join("policy.toml"), project: project_policy };
        Ok(Library {
            root: root.to_path_buf(),
            snapshots: PolicySnapshots::new(policy.clone()),
            policy,
            paths,
            default_paths: BTreeMap::new(),
            runtime: OnceLock::new(),
            runtime_init: Mutex::new(()),
            memory_budget_mb: None,
            call_slots: None,
            store: OnceLock::new(),
            store_init: Mutex::new(()),
            skills: loaded::SkillCache::default(),
            seal_key: OnceLock::new(),
            audit: AuditLog::in_home(root),
            postgres: None,
            home_sync: None,
            counters: Counters::default(),
            progress: Box::new(|_| {}),
        })
    }

    /// `$WORKSPACE` when neither `--workspace` nor the policy's `[paths]` sets it.
    pub fn set_default_workspace(&mut self, dir: &Path) -> Result<()> {
        let dir = std::fs::canonicalize(dir).with_context(|| format!("workspace {} does not exist", dir.display()))?;
        self.default_paths.insert("WORKSPACE".to_string(), dir.to_string_lossy().into_owned());
        Ok(())
    }

    /// `$WORKSPACE` as if given with `--workspace` (over the policy's `[paths]`).
    pub fn set_workspace(&mut self, dir: &Path) -> Result<()> {
        let dir = std::fs::canonicalize(dir).with_context(|| format!("workspace {} does not exist", dir.display()))?;
        self.paths.insert("WORKSPACE".to_string(), dir.to_string_lossy().into_owned());
        Ok(())
    }

    /// `$WORKSPACE` given explicitly (`--workspace`, [`Library::set_workspace`]), if any.
    pub fn explicit_workspace(&self) -> Option<&Path> {
        self.paths.get("WORKSPACE").map(Path::new)
    }

    /// The fallback `$WORKSPACE` ([`Library::set_default_workspace`]), if any.
    pub fn default_workspace(&self) -> Option<&Path> {
        self.default_paths.get("WORKSPACE").map(Path::new)
    }

    /// Receive progress lines (compiles) while long operations run.
    pub fn on_progress(&mut self, f: impl Fn(&str) + Send + Sync + 'static) {
        self.progress = Box::new(f);
    }

    /// The skillhost home this library serves.
    pub fn home(&self) -> &Path {
        &self.root
    }

    /// The values of secrets (`skillhost secret ...`), in the home.
    pub fn secrets(&self) -> secrets::SecretStore {
        secrets::SecretStore::in_home(&self.root)
    }

    pub fn policy_files(&self) -> &PolicyFiles {
        &self.policy
    }

    /// The effective policy (user file narrowed by the project file), re-read only when
    /// one of the files changed on disk since the last call.
    pub fn policy(&self) -> Result<Arc<Policy>> {
        self.snapshots.current()
    }

    /// Counts of expensive work done so far (see [`LibraryStats`]).
    pub fn stats(&self) -> LibraryStats {
        LibraryStats {
            runtime_inits: self.counters.runtime_inits.load(Ordering::Relaxed),
            memory_opens: self.counters.memory_opens.load(Ordering::Relaxed),
            skill_loads: self.counters.skill_loads.load(Ordering::Relaxed),
            policy_loads: self.snapshots.loads(),
        }
    }

    /// The host key in `cache/.key` (created on first use), or `None` when the home cannot
    /// hold one: then every load hashes the skill's files.
    pub(crate) fn seal_key(&self) -> Option<&crate::fsutil::SealKey> {
        self.seal_key
            .get_or_init(|| {
                let dir = self.root.join("cache");
                crate::fsutil::create_private_dir(&dir).ok()?;
                crate::fsutil::SealKey::load_or_create(&dir.join(".key")).ok()
            })
            .as_ref()
    }

    /// The runtime's pool and budgets now, `None` before the first call made the runtime
    /// (a metrics scrape must not be what creates it).
    pub fn runtime_stats(&self) -> Option<crate::sandbox::RuntimeStats> {
        self.runtime.get().map(Runtime::stats)
    }

    pub fn runtime(&self) -> Result<&Runtime> {
        init_once(&self.runtime, &self.runtime_init, || {
            self.counters.runtime_inits.fetch_add(1, Ordering::Relaxed);
            let protected = std::iter::once(self.root.clone()).chain(self.policy.project.clone());
            let mut options = RuntimeOptions::default();
            if let Some(slots) = self.call_slots {
                options.max_concurrent_calls = slots;
            }
            let mut runtime = Runtime::with_options(self.root.join("cache"), options)?.protecting(protected);
            if let Some(mb) = self.memory_budget_mb {
                runtime = runtime.with_memory_budget(mb);
            }
            Ok(runtime.sealing_with(self.seal_key().cloned()))
        })
    }

    /// Run calls under a memory budget of `mb` MiB for all guests together (see
    /// [`crate::sandbox::RuntimeOptions::memory_budget_mb`]); before the first call.
    pub fn with_guest_memory_budget(mut self, mb: u64) -> Library {
        self.memory_budget_mb = Some(mb);
        self
    }

    /// Run at most `slots` calls at once; further calls wait for a slot (up to their
    /// [`RunOptions::queue_wait`], else their wall limit), then fail `busy`. The only call
    /// admission of the process: a server sizes it instead of queueing in front of it.
    /// Before the first call.
    pub fn with_call_slots(mut self, slots: u32) -> Library {
        self.call_slots = Some(slots.max(1));
        self
    }

    /// Before a clean exit of a process that keeps its library to the end (a server): if
    /// the memory is open and a replica of the shared store's log, stop it where an op ends
    /// and record that durably ([`Memory::stop_replication`]), so the next start need not
    /// rebuild it. Memory writes are refused afterwards.
    pub fn stop_memory_replication(&self) -> Result<()> {
        match self.store.get() {
            Some(memory) => memory.stop_replication(),
            None => Ok(()),
        }
    }

    /// The memory system of this home, opened on first use (it locks the store against
    /// other processes for as long as this library lives).
    pub fn memory(&self) -> Result<Arc<Memory>> {
        init_once(&self.store, &self.store_init, || {
            let mut config = MemoryConfig::default();
            // A policy that does not load is reported by the call that needs it.
            if let Ok(policy) = self.policy() {
                config.skill_view_share = policy.memory.skill_view_share();
            }
            if let Ok(ms) = std::env::var("SKILLHOST_MEMORY_WAIT_MS") {
                let ms: u64 = ms
                    .trim()
                    .parse()
                    .map_err(|_| anyhow!("SKILLHOST_MEMORY_WAIT_MS must be a number of milliseconds, not `{ms}`"))?;
                config.busy_wait = std::time::Duration::from_millis(ms);
            }
            self.counters.memory_opens.fetch_add(1, Ordering::Relaxed);
            let dir = match &self.postgres {
                Some(pg) => self.memory_replica(pg, &mut config)?,
                None => self.root.join("memory"),
            };
            Ok(Arc::new(Memory::open(&dir, config)?))
        })
        .cloned()
    }

    /// On a PostgreSQL store, this host's memory is a replica of the store's memory log
    /// (see `memory/replica.rs`), kept under `cache/`: the directory for it, and `config`
    /// set to replicate. The model and fusion are the home's, as a local store reads them.
    fn memory_replica(&self, pg: &crate::store::PgStore, config: &mut MemoryConfig) -> Result<PathBuf> {
        let log = crate::store::PgMemoryLog::open(pg)?;
        let dir = self.root.join("cache").join("memory-replica").join(log.id());
        config.embed_model = match crate::memory::model_setting(&self.root)?.path {
            Some(path) => crate::memory::EmbedModelChoice::File(path),
            None => crate::memory::EmbedModelChoice::Off,
        };
        if let Some(choice) = crate::memory::fusion_setting(&self.root)? {
            config.fusion = choice.params();
        }
        config.replication = Some(crate::memory::Replication(Arc::new(log)));
        Ok(dir)
    }

    pub fn store(&self) -> Result<Arc<dyn MemoryStore>> {
        Ok(self.memory()?)
    }

    /// The hash-chained audit log of this home (see [`crate::audit`]), or of the PostgreSQL
    /// store the library uses.
    pub fn audit_log(&self) -> AuditLog {
        self.audit.clone()
    }

    /// Run on the shared PostgreSQL `store` (opened with [`crate::store::PgStore::open`],
    /// which checked its schema): from now on the audit chain is the store's. Before the
    /// first call. Features that keep their state in the store reach it with
    /// [`Library::postgres`].
    ///
    /// The home becomes a copy of the store's shared home (see [`crate::store::HomeSync`]):
    /// brought up to date here, and by whoever changes it through [`Library::home_sync`].
    pub fn use_postgres(&mut self, store: crate::store::PgStore) -> Result<()> {
        let sync = crate::store::HomeSync::new(&store, &self.root)?;
        sync.pull()?;
        self.audit = AuditLog::postgres(&store);
        self.home_sync = Some(sync);
        self.postgres = Some(store);
        Ok(())
    }

    /// How this home follows the store's shared home; `None` for the local home.
    pub fn home_sync(&self) -> Option<&crate::store::HomeSync> {
        self.home_sync.as_ref()
    }

    /// The saved state of the paused agent run `id`: on the local home a file of the
    /// memory directory (its store opened first, which moves an old store's sessions out);
    /// on PostgreSQL a row every host reads, so a run paused on one host resumes on another.
    pub fn agent_session(&self, id: &str) -> Result<Option<serde_json::Value>> {
        match &self.postgres {
            Some(pg) => crate::store::agent_sessions::get(pg, id),
            None => self.memory()?.agent_session(id),
        }
    }

    /// Save the state of the agent run `id` (after each of its steps); see
    /// [`Library::agent_session`].
    pub fn save_agent_session(&self, id: &str, state: &serde_json::Value) -> Result<()> {
        match &self.postgres {
            Some(pg) => crate::store::agent_sessions::save(pg, id, state),
            None => self.memory()?.save_agent_session(id, state),
        }
    }

    /// The PostgreSQL store this library runs on; `None` for the local home.
    pub fn postgres(&self) -> Option<&crate::store::PgStore> {
        self.postgres.as_ref()
    }

    fn skill_dir(&self, name: &str) -> PathBuf {
        self.root.join("skills").join(name)
    }

    fn history_dir(&self, name: &str) -> PathBuf {
        self.root.join("history").join(name)
    }

    /// What the user policy grants `name` now, one line per right (empty if unreadable).
    fn user_grants(&self, name: &str) -> Vec<String> {
        Policy::load(&self.policy.user).map(|p| p.granted(name).describe()).unwrap_or_default()
    }

    /// Check that the installed files of `name` are the bytes its install recorded.
    pub fn verify_installed(&self, name: &str) -> Result<()> {
        let record = self.read_record(name)?;
        record::verify_files(&self.skill_dir(name), &record)
    }

    fn read_record(&self, name: &str) -> Result<InstallRecord> {
        crate::manifest::validate_name(name).map_err(|e| anyhow!("`{name}` is not a skill name: {e}"))?;
        let dir = self.skill_dir(name);
        if !dir.join("install.json").exists() {
            return Err(anyhow!(
                "skill `{name}` is not installed; see `skillhost skill list`, or install it with `skillhost skill install DIR`"
            ));
        }
        InstallRecord::read(&dir)
    }

    /// The stamp of `name`'s install.json, `None` when it is not there.
    fn record_stamp(&self, name: &str) -> Option<FileStamp> {
        FileStamp::of(&self.skill_dir(name).join("install.json")).ok().flatten()
    }
}
