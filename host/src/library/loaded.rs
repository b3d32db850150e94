//! The skill cache: each installed version loaded once (read, verified, parsed, its
//! component prepared) under its content hash; a name points at the hash its install.json
//! named when it was read, together with that file's [`FileStamp`]. A call stats
//! install.json (one `stat`): the same stamp reuses the loaded version, a new one (a
//! reinstall, rollback or remove, by this process or another) reads the record again.
//! Loading is single-flight per name, so concurrent first calls verify and prepare a
//! version once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow, bail};

use super::Library;
use super::record::{InstallRecord, verify_files_sealed};
use crate::fsutil::FileStamp;
use crate::manifest::Manifest;
use crate::sandbox::{CompileOutcome, PreparedSkill};

/// A verified, parsed and prepared version of a skill.
pub(super) struct Loaded {
    pub content_hash: String,
    pub manifest: Manifest,
    pub record: InstallRecord,
    pub validator: Arc<jsonschema::Validator>,
    pub prepared: Option<PreparedSkill>,
    /// How the component was obtained when this process first loaded it.
    pub compile: Option<CompileOutcome>,
}

/// The version a name pointed at when its install.json had `stamp`.
struct Current {
    stamp: FileStamp,
    hash: String,
}

/// Loaded versions by content hash, and which hash each name runs.
#[derive(Default)]
pub(super) struct SkillCache {
    by_name: Mutex<HashMap<String, Current>>,
    by_hash: Mutex<HashMap<String, Arc<Loaded>>>,
    /// One lock per name being loaded: concurrent first calls load once.
    loading: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps stay consistent at every await-free step, so a panic elsewhere does not
    // make them unusable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SkillCache {
    fn cached(&self, name: &str, stamp: &FileStamp) -> Option<Arc<Loaded>> {
        let hash = lock(&self.by_name).get(name).filter(|c| c.stamp == *stamp).map(|c| c.hash.clone())?;
        lock(&self.by_hash).get(&hash).cloned()
    }

    fn by_hash(&self, hash: &str) -> Option<Arc<Loaded>> {
        lock(&self.by_hash).get(hash).cloned()
    }

    fn name_lock(&self, name: &str) -> Arc<Mutex<()>> {
        lock(&self.loading).entry(name.to_string()).or_default().clone()
    }

    /// Point `name` at `loaded`; a version no name points at any more is dropped (calls
    /// still running keep their own reference).
    fn insert(&self, name: &str, stamp: FileStamp, loaded: Arc<Loaded>) {
        let mut by_name = lock(&self.by_name);
        let old = by_name.insert(name.to_string(), Current { stamp, hash: loaded.content_hash.clone() });
        let mut by_hash = lock(&self.by_hash);
        by_hash.insert(loaded.content_hash.clone(), loaded);
        if let Some(old) = old
            && !by_name.values().any(|c| c.hash == old.hash)
        {
            by_hash.remove(&old.hash);
        }
    }

    /// Forget what `name` runs (after this process replaced or removed it).
    pub(super) fn forget(&self, name: &str) {
        let mut by_name = lock(&self.by_name);
        if let Some(old) = by_name.remove(name)
            && !by_name.values().any(|c| c.hash == old.hash)
        {
            lock(&self.by_hash).remove(&old.hash);
        }
    }
}

impl Library {
    /// The installed version of `name` for a call: from the cache when its install.json is
    /// unchanged (one `stat`, no hand-off of the worker: block_in_place moves the worker's
    /// queue to another thread), else loaded off the executor.
    pub(super) fn loaded(&self, name: &str) -> Result<Arc<Loaded>> {
        let cached = self.record_stamp(name).and_then(|stamp| self.skills.cached(name, &stamp));
        cached.map_or_else(|| off_the_executor(|| self.load(name)), Ok)
    }

    /// The installed version of `name`, read, verified and prepared once per content hash.
    fn load(&self, name: &str) -> Result<Arc<Loaded>> {
        if let Some(stamp) = self.record_stamp(name)
            && let Some(l) = self.skills.cached(name, &stamp)
        {
            return Ok(l);
        }
        let name_lock = self.skills.name_lock(name);
        let _loading = lock(&name_lock);
        let mut retried = false;
        loop {
            // Stamp before reading: if the file changes after this, the stored stamp is
            // stale and the next call reads again (never the reverse).
            let stamp = self.record_stamp(name);
            if let Some(stamp) = stamp
                && let Some(l) = self.skills.cached(name, &stamp)
            {
                return Ok(l);
            }
            match self.load_uncached(name) {
                Ok(loaded) => {
                    if let Some(stamp) = stamp {
                        self.skills.insert(name, stamp, loaded.clone());
                    }
                    return Ok(loaded);
                }
                // A swap by another process between reading the record and the files
                // looks like tampering; read the new version once before saying so.
                Err(e) if !retried && self.record_stamp(name) != stamp => {
                    retried = true;
                    let _ = e;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn load_uncached(&self, name: &str) -> Result<Arc<Loaded>> {
        let record = self.read_record(name)?;
        if let Some(l) = self.skills.by_hash(&record.content_hash) {
            return Ok(l);
        }
        let dir = self.skill_dir(name);
        let read = |file: &str| {
            std::fs::read(dir.join(file))
                .map_err(|e| anyhow!("cannot read {} ({e}); reinstall `{name}`", dir.join(file).display()))
        };
        verify_files_sealed(&dir, &record, &self.root.join("cache").join("verified"), self.seal_key())?;
        let manifest_bytes = read("SKILL.md")?;
        let text = String::from_utf8(manifest_bytes).map_err(|_| anyhow!("{}/SKILL.md is not UTF-8", dir.display()))?;
        let manifest = Manifest::parse(&dir.join("SKILL.md"), &text).map_err(|e| anyhow!("{e}"))?;
        let validator = jsonschema::validator_for(&manifest.params_schema())
            .map_err(|e| anyhow!("parameters of `{name}` do not form a JSON Schema: {e}"))?;
        let (prepared, compile) = match (record.is_instruction(), &record.wasm_sha256) {
            (false, Some(sha)) => {
                // The files were verified above; the component is read only if the
                // compile cache has to compile it, so a warm start maps the compiled code.
                let component = || {
                    let bytes = read("skill.wasm")?;
                    if crate::text::sha256_hex(&bytes) != *sha {
                        bail!(
                            "{}/skill.wasm changed while it was loaded; run it again, or reinstall `{name}`",
                            dir.display()
                        );
                    }
                    Ok(bytes)
                };
                let (p, outcome) = self.runtime()?.prepare_cached(sha, &component, &*self.progress)?;
                (Some(p), Some(outcome))
            }
            _ => (None, None),
        };
        self.counters.skill_loads.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Loaded {
            content_hash: record.content_hash.clone(),
            manifest,
            record,
            validator: Arc::new(validator),
            prepared,
            compile,
        }))
    }

    /// Is `name` an installed skill with a component to run? From the skill cache: one
    /// `stat` once the installed version is loaded. A version that cannot be loaded
    /// (damaged, tampered) counts as installed: running it says what is wrong.
    pub fn is_executable(&self, name: &str) -> bool {
        !matches!(self.lookup_executable(name), Lookup::NotExecutable)
    }

    /// [`Library::is_executable`], keeping the loaded version for the run that follows
    /// ([`Library::run_looked_up`]), so that the call does not stat install.json twice.
    pub fn lookup_executable(&self, name: &str) -> Lookup {
        let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain || name.starts_with('.') {
            return Lookup::NotExecutable;
        }
        let Some(stamp) = self.record_stamp(name) else { return Lookup::NotExecutable };
        let loaded = match self.skills.cached(name, &stamp) {
            Some(l) => l,
            None => match off_the_executor(|| self.load(name)) {
                Ok(l) => l,
                Err(_) => return Lookup::Unloadable,
            },
        };
        match loaded.prepared {
            Some(_) => Lookup::Executable(LoadedSkill(loaded)),
            None => Lookup::NotExecutable,
        }
    }
}

/// What [`Library::lookup_executable`] found under a name.
pub enum Lookup {
    /// Not a plain name, not installed, or an instruction skill (nothing to run).
    NotExecutable,
    /// Installed with a component: the version its install.json named just now.
    Executable(LoadedSkill),
    /// Installed, but its version cannot be loaded (damaged, tampered): a run of it is
    /// refused with the reason, and audited.
    Unloadable,
}

/// A loaded, executable version of a skill, for [`Library::run_looked_up`].
#[derive(Clone)]
pub struct LoadedSkill(pub(super) Arc<Loaded>);

/// Run blocking work (a first load reads, hashes and deserializes a component: milliseconds)
/// without stalling the other tasks of a multi-threaded runtime's worker. A current-thread
/// runtime has no other worker to hand its tasks to, so there the work simply runs.
pub(super) fn off_the_executor<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
