//! The skill library: installed skills on disk, integrity, and running them.
//!
//! Layout of the skillhost home (`--home`, `SKILLHOST_HOME`, or the XDG data dir):
//!
//! ```text
//! policy.toml               user-level grants (see `policy`)
//! skills/<name>/SKILL.md    installed manifest
//! skills/<name>/skill.wasm  installed component (executable skills only)
//! skills/<name>/install.json  hashes, imports, install time
//! cache/                    compiled components (see `sandbox::cache`)
//! memory/                   long-term + session memory, daily notes (see crate::memory)
//! audit/audit.jsonl         hash-chained log, one line per skill call or agent step (see `audit`)
//! ```
//!
//! Installs are staged in a sibling directory and swapped in with renames, so a crash
//! mid-install leaves the previous version in place. Every load re-hashes the installed
//! files against install.json and refuses to run on a mismatch.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::capabilities::Limits;
use crate::manifest::{Manifest, ParamType};
use crate::memory::{Memory, MemoryConfig, MemoryStore, Provenance};
use crate::policy::{Grant, Policy, PolicyFiles};
use crate::sandbox::{
    self, CallError, CallGrant, CompileOutcome, Denial, Invocation, LogLine, PreparedSkill, Runtime, SkillOutput,
};

pub const DEFAULT_NAMESPACE: &str = "default";

/// Write a file atomically: temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| anyhow!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| anyhow!("cannot replace {}: {}", path.display(), e.error))?;
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What install.json records about an installed version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstallRecord {
    pub name: String,
    pub version: Option<String>,
    /// sha256 over SKILL.md and the component: the identity of this version.
    pub content_hash: String,
    pub manifest_sha256: String,
    pub wasm_sha256: Option<String>,
    pub installed_ms: u64,
    /// Every file of the version (relative path -> sha256); `content_hash` covers them all.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The component's imports (empty for instruction skills).
    pub imports: Vec<String>,
    /// Imports that need a capability the manifest does not declare.
    pub undeclared_imports: Vec<UndeclaredImport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndeclaredImport {
    pub import: String,
    pub capability: String,
}

impl InstallRecord {
    pub fn is_instruction(&self) -> bool {
        self.wasm_sha256.is_none()
    }
}

/// The identity of a version: sha256 over every file's path and sha256, in path order.
fn content_hash(files: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (rel, sha) in files {
        h.update(rel.as_bytes());
        h.update(b"\0");
        h.update(sha.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

/// Re-hash the files a record lists in `dir` and check them against its content hash.
fn verify_files(dir: &Path, record: &InstallRecord) -> Result<()> {
    let mut actual = BTreeMap::new();
    for rel in record.files.keys() {
        let bytes = std::fs::read(dir.join(rel)).with_context(|| {
            format!("{} is missing; the copy of `{}` is incomplete", dir.join(rel).display(), record.name)
        })?;
        actual.insert(rel.clone(), sha256_hex(&bytes));
    }
    let found = content_hash(&actual);
    if found != record.content_hash {
        let changed: Vec<&String> =
            actual.iter().filter(|(k, v)| record.files.get(*k) != Some(*v)).map(|(k, _)| k).collect();
        bail!(
            "files of `{}` in {} do not match their recorded hash (expected {}, found {found}; changed: {}): they were modified after install. Refusing them; reinstall the skill from a trusted source.",
            record.name,
            dir.display(),
            record.content_hash,
            changed.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

/// The result of an install, for display.
#[derive(Debug, Clone, Serialize)]
pub struct InstallReport {
    pub name: String,
    pub version: Option<String>,
    pub content_hash: String,
    pub kind: &'static str,
    pub declared: Vec<String>,
    pub imports: Vec<String>,
    pub undeclared_imports: Vec<UndeclaredImport>,
    pub granted: Vec<String>,
    pub not_granted: Vec<String>,
    /// Limits the skill asks for above the defaults (granted only with consent).
    pub limits_requested: Vec<String>,
    /// The limits in force after this install.
    pub limits: Limits,
    pub compile: Option<CompileOutcome>,
    /// Content hash of the version this install replaced (now in the history).
    pub replaced: Option<String>,
    /// Rights this version declares beyond the version it replaced; not granted unless the
    /// user consents (existing grants never widen by themselves).
    pub new_rights: Vec<String>,
}

/// Written next to an archived version.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ArchiveNote {
    archived_ms: u64,
    granted_then: Vec<String>,
}

/// The outcome of importing one skill directory.
#[derive(Debug, Clone, Serialize)]
pub struct ImportResult {
    pub dir: PathBuf,
    pub installed: Option<InstallReport>,
    pub error: Option<String>,
    pub issues: Vec<crate::lint::LintIssue>,
    /// Files next to SKILL.md that are not part of a skill (see `bundle::skill_files`).
    pub not_imported: Vec<String>,
}

/// One version of a skill, installed or archived.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryEntry {
    pub version: Option<String>,
    pub content_hash: String,
    pub installed_ms: u64,
    /// Is this the installed version?
    pub installed: bool,
    pub declares: Vec<String>,
    /// Rights declared here and not by the previous version.
    pub added_rights: Vec<String>,
    /// Rights the previous version declared and this one does not.
    pub removed_rights: Vec<String>,
    /// When it was archived (archived versions only).
    pub archived_ms: Option<u64>,
    /// What the user had granted it when it was archived.
    pub granted_then: Vec<String>,
    #[serde(skip)]
    declared: Option<crate::capabilities::CapabilitySet>,
}

/// One installed skill, for list/info.
#[derive(Debug, Clone, Serialize)]
pub struct SkillInfo {
    pub record: InstallRecord,
    pub manifest: Manifest,
    pub declared: Vec<String>,
    pub granted: Vec<String>,
    pub effective: Vec<String>,
    pub limits: Limits,
    pub params_schema: Value,
}

/// Everything about one `run`.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub skill: String,
    pub version: Option<String>,
    pub content_hash: String,
    pub session: String,
    pub step: u32,
    pub params: Value,
    #[serde(serialize_with = "ser_result")]
    pub result: Result<SkillOutput, CallError>,
    pub denials: Vec<Denial>,
    pub logs: Vec<LogLine>,
    pub memories: sandbox::Absorbed,
    pub stdout: String,
    pub stderr: String,
    pub elapsed_us: u64,
    pub memory_peak_bytes: usize,
    pub compile: Option<CompileOutcome>,
    pub limits: Limits,
}

fn ser_result<S: serde::Serializer>(r: &Result<SkillOutput, CallError>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "lowercase")]
    enum Tagged<'a> {
        Ok(&'a SkillOutput),
        Error(&'a CallError),
    }
    match r {
        Ok(o) => Tagged::Ok(o).serialize(s),
        Err(e) => Tagged::Error(e).serialize(s),
    }
}

/// How to run: session and step identity, and the namespace of the agent profile.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub session: String,
    pub step: u32,
    pub namespace: String,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { session: new_session_id(), step: 0, namespace: DEFAULT_NAMESPACE.into() }
    }
}

pub fn new_session_id() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("s-{:x}-{:x}", nanos, std::process::id())
}

struct Loaded {
    content_hash: String,
    manifest: Manifest,
    record: InstallRecord,
    validator: Arc<jsonschema::Validator>,
    prepared: Option<PreparedSkill>,
    /// How the component was obtained when this process first loaded it.
    compile: Option<CompileOutcome>,
}

/// The installed skills of one home, and the machinery to run them.
pub struct Library {
    root: PathBuf,
    policy: PolicyFiles,
    /// Path variables given explicitly (`--workspace`): they win over the policy's `[paths]`.
    paths: BTreeMap<String, String>,
    /// Fallbacks (the current directory for `$WORKSPACE`) for variables nobody set.
    default_paths: BTreeMap<String, String>,
    runtime: OnceLock<Runtime>,
    store: OnceLock<Arc<Memory>>,
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
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
        recover_interrupted_installs(&root.join("skills"));
        Ok(Library {
            root: root.to_path_buf(),
            policy: PolicyFiles { user: root.join("policy.toml"), project: project_policy },
            paths,
            default_paths: BTreeMap::new(),
            runtime: OnceLock::new(),
            store: OnceLock::new(),
            loaded: Mutex::new(HashMap::new()),
            progress: Box::new(|_| {}),
        })
    }

    /// `$WORKSPACE` when neither `--workspace` nor the policy's `[paths]` sets it.
    pub fn set_default_workspace(&mut self, dir: &Path) -> Result<()> {
        let dir = std::fs::canonicalize(dir).with_context(|| format!("workspace {} does not exist", dir.display()))?;
        self.default_paths.insert("WORKSPACE".to_string(), dir.to_string_lossy().into_owned());
        Ok(())
    }

    /// Receive progress lines (compiles) while long operations run.
    pub fn on_progress(&mut self, f: impl Fn(&str) + Send + Sync + 'static) {
        self.progress = Box::new(f);
    }

    pub fn policy_files(&self) -> &PolicyFiles {
        &self.policy
    }

    pub fn runtime(&self) -> Result<&Runtime> {
        if let Some(r) = self.runtime.get() {
            return Ok(r);
        }
        let r = Runtime::new(self.root.join("cache"))?;
        Ok(self.runtime.get_or_init(|| r))
    }

    /// The memory system of this home, opened on first use (it locks the store against
    /// other processes for as long as this library lives).
    pub fn memory(&self) -> Result<Arc<Memory>> {
        if let Some(s) = self.store.get() {
            return Ok(s.clone());
        }
        let mut config = MemoryConfig::default();
        if let Ok(ms) = std::env::var("SKILLHOST_MEMORY_WAIT_MS") {
            let ms: u64 = ms.trim().parse().map_err(|_| {
                anyhow::anyhow!("SKILLHOST_MEMORY_WAIT_MS must be a number of milliseconds, not `{ms}`")
            })?;
            config.busy_wait = std::time::Duration::from_millis(ms);
        }
        let s = Arc::new(Memory::open(&self.root.join("memory"), config)?);
        Ok(self.store.get_or_init(|| s).clone())
    }

    pub fn store(&self) -> Result<Arc<dyn MemoryStore>> {
        Ok(self.memory()?)
    }

    fn skill_dir(&self, name: &str) -> PathBuf {
        self.root.join("skills").join(name)
    }

    fn policy(&self) -> Result<Policy> {
        self.policy.load()
    }

    /// Install the skill in `src` (a directory with SKILL.md and, for executable skills,
    /// skill.wasm), adding `grants` to the user policy.
    pub fn install(&self, src: &Path, grants: &dyn Fn(&Manifest) -> Result<Option<Grant>>) -> Result<InstallReport> {
        let manifest = Manifest::load_dir(src).map_err(|e| anyhow!("{e}"))?;
        let manifest_bytes = std::fs::read(src.join("SKILL.md"))?;
        let wasm_path = src.join("skill.wasm");
        let wasm = match std::fs::read(&wasm_path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", wasm_path.display())),
        };
        let (imports, compile) = match &wasm {
            Some(bytes) => {
                let rt = self.runtime()?;
                let (component, outcome) =
                    rt.compile(bytes, &*self.progress).map_err(|e| anyhow!("{}: {e:#}", wasm_path.display()))?;
                (sandbox::component_imports(rt.engine(), &component), Some(outcome))
            }
            None => (Vec::new(), None),
        };
        let declared = &manifest.capabilities;
        let mut undeclared_imports: Vec<UndeclaredImport> = Vec::new();
        for i in &imports {
            let capability = match sandbox::classify_import(i) {
                sandbox::ImportClass::Ambient => continue,
                sandbox::ImportClass::Governed(kind) if kind.held_by(declared) => continue,
                sandbox::ImportClass::Governed(kind) => kind.name(),
                sandbox::ImportClass::Refused => "sockets",
                sandbox::ImportClass::NotProvided => bail!(
                    "{}: the component imports `{i}`, which this host does not provide (it links WASI 0.2 and skillhost:skill@0.1); rebuild it without that import",
                    wasm_path.display()
                ),
            };
            undeclared_imports.push(UndeclaredImport { import: i.clone(), capability: capability.to_string() });
        }
        let sources = crate::bundle::skill_files(src)?;
        let mut files = BTreeMap::new();
        let mut contents = Vec::new();
        for (rel, path) in &sources {
            let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            files.insert(rel.clone(), sha256_hex(&bytes));
            contents.push((rel.clone(), bytes));
        }
        let record = InstallRecord {
            name: manifest.name.clone(),
            version: manifest.version.as_ref().map(ToString::to_string),
            content_hash: content_hash(&files),
            files,
            manifest_sha256: sha256_hex(&manifest_bytes),
            wasm_sha256: wasm.as_deref().map(sha256_hex),
            installed_ms: now_ms(),
            imports: imports.clone(),
            undeclared_imports: undeclared_imports.clone(),
        };

        // Decide grants before touching the installed copy, so a refused grant installs nothing.
        let granted_now = grants(&manifest)?.map(|g| Grant {
            capabilities: manifest.capabilities.intersect(&g.capabilities),
            limits: g.limits.lowered_by(&manifest.limits),
        });

        // Stage, then swap in with renames.
        let skills = self.root.join("skills");
        let staging = skills.join(format!(".staging-{}-{}", manifest.name, std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)?;
        // Durable before the swap: a power cut must not leave empty files behind the rename.
        for (rel, bytes) in &contents {
            write_atomic(&staging.join(rel), bytes)?;
        }
        write_atomic(&staging.join("install.json"), &serde_json::to_vec_pretty(&record)?)?;
        let previous = self.read_record(&manifest.name).ok();
        let previous_manifest = previous.as_ref().and_then(|_| self.info(&manifest.name).ok()).map(|i| i.manifest);
        self.swap_in(&manifest.name, &staging)?;
        let replaced = previous.map(|r| r.content_hash);
        let new_rights = match &previous_manifest {
            Some(old) => manifest.capabilities.beyond(&old.capabilities),
            None => Vec::new(),
        };

        // Record grants (bounded by the declaration).
        if let Some(g) = granted_now.filter(|g| *g != Grant::default()) {
            Policy::update(&self.policy.user, |p| {
                p.apply(&manifest.name, &g);
                Ok(())
            })?;
        }
        let policy = self.policy()?;
        let effective = manifest.capabilities.intersect(&policy.granted(&manifest.name));
        let limits = Limits::resolve(&manifest.limits, &policy.limit_caps(&manifest.name));

        Ok(InstallReport {
            name: manifest.name.clone(),
            version: record.version.clone(),
            content_hash: record.content_hash.clone(),
            kind: if wasm.is_some() { "executable" } else { "instruction" },
            declared: manifest.capabilities.describe(),
            imports,
            undeclared_imports,
            granted: effective.describe(),
            not_granted: manifest.capabilities.beyond(&effective),
            limits_requested: manifest.limits.beyond_default(),
            limits,
            compile,
            replaced,
            new_rights,
        })
    }

    /// Make the prepared directory `staging` the installed version of `name`. The version it
    /// replaces is archived in `history/<name>/<content hash>/` (see [`Library::history`]).
    fn swap_in(&self, name: &str, staging: &Path) -> Result<()> {
        let target = self.skill_dir(name);
        let old = self.root.join("skills").join(format!(".old-{name}-{}", std::process::id()));
        if target.exists() {
            std::fs::rename(&target, &old).with_context(|| format!("cannot move aside {}", target.display()))?;
        }
        if let Err(e) = std::fs::rename(staging, &target) {
            if old.exists() {
                let _ = std::fs::rename(&old, &target);
            }
            return Err(e).with_context(|| format!("cannot install into {}", target.display()));
        }
        if old.exists() {
            let hash_of = |dir: &Path| {
                std::fs::read(dir.join("install.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<InstallRecord>(&b).ok())
                    .map(|r| r.content_hash)
            };
            if hash_of(&old) == hash_of(&target) {
                let _ = std::fs::remove_dir_all(&old); // the same bytes again
            } else {
                archive(&self.root, name, &old, self.user_grants(name));
            }
        }
        self.loaded.lock().map_err(|_| anyhow!("library lock poisoned"))?.remove(name);
        Ok(())
    }

    /// What the user policy grants `name` now, one line per right (empty if unreadable).
    fn user_grants(&self, name: &str) -> Vec<String> {
        Policy::load(&self.policy.user).map(|p| p.granted(name).describe()).unwrap_or_default()
    }

    fn history_dir(&self, name: &str) -> PathBuf {
        self.root.join("history").join(name)
    }

    /// Every known version of `name`, newest first: the installed one (if any) and the
    /// archived ones, each with the rights it declares and what changed from the version
    /// before it.
    pub fn history(&self, name: &str) -> Result<Vec<HistoryEntry>> {
        crate::manifest::validate_name(name).map_err(|e| anyhow!("`{name}` is not a skill name: {e}"))?;
        let mut entries = Vec::new();
        let mut dirs: Vec<(PathBuf, bool)> = Vec::new();
        if self.skill_dir(name).join("install.json").exists() {
            dirs.push((self.skill_dir(name), true));
        }
        if let Ok(rd) = std::fs::read_dir(self.history_dir(name)) {
            dirs.extend(rd.flatten().map(|e| (e.path(), false)));
        }
        for (dir, installed) in dirs {
            let Ok(bytes) = std::fs::read(dir.join("install.json")) else { continue };
            let Ok(record) = serde_json::from_slice::<InstallRecord>(&bytes) else { continue };
            let declared = std::fs::read_to_string(dir.join("SKILL.md"))
                .ok()
                .and_then(|t| Manifest::parse(&dir.join("SKILL.md"), &t).ok())
                .map(|m| m.capabilities);
            let note: Option<ArchiveNote> =
                std::fs::read(dir.join("archived.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
            entries.push(HistoryEntry {
                archived_ms: note.as_ref().map(|n| n.archived_ms),
                granted_then: note.map(|n| n.granted_then).unwrap_or_default(),
                version: record.version.clone(),
                content_hash: record.content_hash.clone(),
                installed_ms: record.installed_ms,
                installed,
                declares: declared.as_ref().map(|d| d.describe()).unwrap_or_default(),
                added_rights: Vec::new(),
                removed_rights: Vec::new(),
                declared,
            });
        }
        if entries.is_empty() {
            bail!("no version of `{name}` is installed or archived");
        }
        entries.sort_by_key(|e| e.installed_ms);
        for i in 1..entries.len() {
            if let (Some(prev), Some(cur)) = (entries[i - 1].declared.clone(), entries[i].declared.clone()) {
                entries[i].added_rights = cur.beyond(&prev);
                entries[i].removed_rights = prev.beyond(&cur);
            }
        }
        entries.reverse();
        Ok(entries)
    }

    /// Reinstall the exact bytes of an archived version (`which`: a version such as 0.1.0,
    /// or a content-hash prefix of at least 8 characters). The bytes are re-checked against
    /// the recorded hash first. Grants are left as they are: the effective rights of the
    /// restored version are its declaration intersected with them, so nothing widens.
    pub fn rollback(&self, name: &str, which: &str) -> Result<HistoryEntry> {
        let history = self.history(name)?;
        let matches: Vec<&HistoryEntry> = history
            .iter()
            .filter(|e| !e.installed)
            .filter(|e| e.version.as_deref() == Some(which) || (which.len() >= 8 && e.content_hash.starts_with(which)))
            .collect();
        let entry = match matches.as_slice() {
            [one] => (*one).clone(),
            [] => bail!(
                "`{name}` has no archived version `{which}`; see `skillhost skill history {name}` (versions: {})",
                history.iter().filter_map(|e| e.version.clone()).collect::<Vec<_>>().join(", ")
            ),
            _ => bail!("`{which}` matches several archived versions of `{name}`; give a longer content-hash prefix"),
        };
        let src = self.history_dir(name).join(&entry.content_hash);
        let record: InstallRecord = serde_json::from_slice(
            &std::fs::read(src.join("install.json")).with_context(|| format!("cannot read {}", src.display()))?,
        )
        .with_context(|| format!("{}/install.json is corrupt", src.display()))?;
        if record.content_hash != entry.content_hash {
            bail!(
                "{}/install.json does not belong to version {}; refusing to restore it",
                src.display(),
                entry.content_hash
            );
        }
        verify_files(&src, &record)?;
        let wasm = std::fs::read(src.join("skill.wasm")).ok();
        if let Some(w) = &wasm {
            // Recompile into the cache if needed (and reject a corrupt component) before the swap.
            let sha = sha256_hex(w);
            self.runtime()?.prepare(w, &sha, &*self.progress)?;
        }
        let staging = self.root.join("skills").join(format!(".staging-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)?;
        for rel in record.files.keys().map(String::as_str).chain(["install.json"]) {
            write_atomic(&staging.join(rel), &std::fs::read(src.join(rel))?)?;
        }
        self.swap_in(name, &staging)?;
        let _ = std::fs::remove_dir_all(&src);
        Ok(entry)
    }

    fn read_record(&self, name: &str) -> Result<InstallRecord> {
        crate::manifest::validate_name(name).map_err(|e| anyhow!("`{name}` is not a skill name: {e}"))?;
        let path = self.skill_dir(name).join("install.json");
        let bytes = std::fs::read(&path).map_err(|_| {
            anyhow!("skill `{name}` is not installed; see `skillhost skill list`, or install it with `skillhost skill install DIR`")
        })?;
        serde_json::from_slice(&bytes).with_context(|| format!("{} is corrupt; reinstall the skill", path.display()))
    }

    /// Names of installed skills, sorted.
    pub fn names(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(self.root.join("skills"))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && entry.path().join("install.json").exists() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Read, verify and parse an installed skill (cached per process).
    fn load(&self, name: &str) -> Result<Arc<Loaded>> {
        if let Some(l) = self.loaded.lock().map_err(|_| anyhow!("library lock poisoned"))?.get(name) {
            return Ok(l.clone());
        }
        let record = self.read_record(name)?;
        let dir = self.skill_dir(name);
        let read = |file: &str| {
            std::fs::read(dir.join(file))
                .with_context(|| format!("cannot read {}; reinstall `{name}`", dir.join(file).display()))
        };
        verify_files(&dir, &record)?;
        let manifest_bytes = read("SKILL.md")?;
        let wasm = if record.is_instruction() { None } else { Some(read("skill.wasm")?) };
        let text = String::from_utf8(manifest_bytes).map_err(|_| anyhow!("{}/SKILL.md is not UTF-8", dir.display()))?;
        let manifest = Manifest::parse(&dir.join("SKILL.md"), &text).map_err(|e| anyhow!("{e}"))?;
        let validator = jsonschema::validator_for(&manifest.params_schema())
            .map_err(|e| anyhow!("parameters of `{name}` do not form a JSON Schema: {e}"))?;
        let (prepared, compile) = match (&wasm, &record.wasm_sha256) {
            (Some(w), Some(sha)) => {
                let (p, outcome) = self.runtime()?.prepare(w, sha, &*self.progress)?;
                (Some(p), Some(outcome))
            }
            _ => (None, None),
        };
        let loaded = Arc::new(Loaded {
            content_hash: record.content_hash.clone(),
            manifest,
            record,
            validator: Arc::new(validator),
            prepared,
            compile,
        });
        self.loaded.lock().map_err(|_| anyhow!("library lock poisoned"))?.insert(name.to_string(), loaded.clone());
        Ok(loaded)
    }

    /// Every installed skill, each loaded on its own: one broken skill is reported next to
    /// the others instead of hiding them.
    pub fn scan(&self) -> Result<Vec<(String, Result<SkillInfo>)>> {
        Ok(self
            .names()?
            .into_iter()
            .map(|n| {
                let info = self.info(&n);
                (n, info)
            })
            .collect())
    }

    /// Install from a `.skill` bundle's bytes (verified entry by entry, see [`crate::bundle`]).
    pub fn install_bundle(
        &self,
        bytes: &[u8],
        grants: &dyn Fn(&Manifest) -> Result<Option<Grant>>,
    ) -> Result<InstallReport> {
        let tmp = tempfile::Builder::new()
            .prefix(".bundle-")
            .tempdir_in(&self.root)
            .with_context(|| format!("cannot create a temporary directory in {}", self.root.display()))?;
        let dir = crate::bundle::unpack(bytes, tmp.path())?;
        self.install(&dir, grants)
    }

    /// Import every skill directory under `dir` (for example a `.claude/skills` tree):
    /// each is linted with the Agent Skills rules and, if it has no errors, installed
    /// (as an instruction skill unless it ships a skill.wasm; nothing is granted). One bad
    /// skill never stops the others.
    pub fn import(&self, dir: &Path) -> Result<Vec<ImportResult>> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("SKILL.md").is_file())
            .collect();
        dirs.sort();
        if dirs.is_empty() {
            bail!("{} has no skill directories (subdirectories with a SKILL.md)", dir.display());
        }
        let mut results = Vec::new();
        for d in dirs {
            let issues = crate::lint::lint_dir(&d, true);
            let blocked = issues.iter().any(|i| i.severity == crate::lint::Severity::Error);
            let mut not_imported: Vec<String> = std::fs::read_dir(&d)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| {
                            !["SKILL.md", "skill.wasm", "scripts", "references", "assets"].contains(&n.as_str())
                        })
                        .collect()
                })
                .unwrap_or_default();
            not_imported.sort();
            let (installed, error) = if blocked {
                (None, None)
            } else {
                match self.install(&d, &|_| Ok(None)) {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                }
            };
            results.push(ImportResult { dir: d, installed, error, issues, not_imported });
        }
        Ok(results)
    }

    /// Installed skills ranked by relevance to a task description (see [`crate::search`]).
    /// Skills that fail to load are skipped, not fatal.
    pub fn search(&self, query: &str, top: usize) -> Result<Vec<(crate::search::SearchHit, SkillInfo)>> {
        let infos: Vec<SkillInfo> = self.scan()?.into_iter().filter_map(|(_, i)| i.ok()).collect();
        let docs: Vec<crate::search::SearchDoc> = infos
            .iter()
            .map(|i| crate::search::SearchDoc {
                name: i.manifest.name.clone(),
                description: i.manifest.description.clone(),
                when_to_use: i.manifest.when_to_use.clone().unwrap_or_default(),
            })
            .collect();
        let hits = crate::search::SkillIndex::build(&docs)?.search(query, top)?;
        Ok(hits
            .into_iter()
            .filter_map(|h| infos.iter().find(|i| i.manifest.name == h.name).map(|i| (h, i.clone())))
            .collect())
    }

    pub fn info(&self, name: &str) -> Result<SkillInfo> {
        let record = self.read_record(name)?;
        let dir = self.skill_dir(name);
        let text = std::fs::read_to_string(dir.join("SKILL.md"))?;
        let manifest = Manifest::parse(&dir.join("SKILL.md"), &text).map_err(|e| anyhow!("{e}"))?;
        let policy = self.policy()?;
        let granted = policy.granted(name);
        let effective = manifest.capabilities.intersect(&granted);
        Ok(SkillInfo {
            declared: manifest.capabilities.describe(),
            granted: granted.describe(),
            effective: effective.describe(),
            limits: Limits::resolve(&manifest.limits, &policy.limit_caps(name)),
            params_schema: manifest.params_schema(),
            record,
            manifest,
        })
    }

    /// Remove an installed skill and its grants; its files stay in the history (for
    /// `rollback`) unless `purge`. Grants go first, so a failure (say, an invalid policy
    /// file) leaves the skill installed rather than half removed.
    pub fn remove(&self, name: &str, purge: bool) -> Result<()> {
        self.read_record(name)?;
        let granted_then = self.user_grants(name);
        Policy::update(&self.policy.user, |p| {
            p.skills.remove(name);
            p.skill_limits.remove(name);
            Ok(())
        })?;
        let dir = self.skill_dir(name);
        let trash = self.root.join("skills").join(format!(".removed-{name}-{}", std::process::id()));
        std::fs::rename(&dir, &trash).with_context(|| format!("cannot remove {}", dir.display()))?;
        if purge {
            let _ = std::fs::remove_dir_all(&trash);
            let _ = std::fs::remove_dir_all(self.history_dir(name));
        } else {
            archive(&self.root, name, &trash, granted_then);
        }
        self.loaded.lock().map_err(|_| anyhow!("library lock poisoned"))?.remove(name);
        Ok(())
    }

    /// Run an installed skill once.
    pub async fn run(&self, name: &str, params: Value, opts: &RunOptions) -> Result<RunReport> {
        let loaded = self.load(name)?;
        let Some(prepared) = &loaded.prepared else {
            bail!(
                "`{name}` is an instruction skill: it has no component to run; its body is guidance for the agent (see `skillhost skill info {name}`)"
            );
        };
        let manifest = &loaded.manifest;
        let policy = self.policy()?;
        let limits = Limits::resolve(&manifest.limits, &policy.limit_caps(name));
        let mut report = RunReport {
            skill: name.to_string(),
            version: loaded.record.version.clone(),
            content_hash: loaded.content_hash.clone(),
            session: opts.session.clone(),
            step: opts.step,
            params: params.clone(),
            result: Err(CallError::Setup(String::new())),
            denials: Vec::new(),
            logs: Vec::new(),
            memories: Default::default(),
            stdout: String::new(),
            stderr: String::new(),
            elapsed_us: 0,
            memory_peak_bytes: 0,
            compile: loaded.compile,
            limits,
        };
        let params = match validate_params(manifest, &loaded.validator, params) {
            Ok(p) => p,
            Err(e) => {
                report.result = Err(e);
                self.audit(&report);
                return Ok(report);
            }
        };
        report.params = params.clone();
        let effective = manifest.capabilities.intersect(&policy.granted(name));
        for missing in manifest.capabilities.beyond(&effective) {
            report.denials.push(Denial {
                capability: missing.split(' ').next().unwrap_or("").to_string(),
                message: format!(
                    "declared but not granted: {missing} (grant with `skillhost policy grant {name} ...`)"
                ),
            });
        }
        // Explicit flags, then the user policy, then defaults.
        let mut paths = policy.paths.clone();
        paths.extend(self.paths.clone());
        for (k, v) in &self.default_paths {
            paths.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let needs_store = effective.memory != crate::capabilities::MemoryAccess::None || effective.session;
        let store = if needs_store { Some(self.store()?) } else { None };
        let grant = CallGrant {
            skill: name.to_string(),
            skill_hash: loaded.content_hash.clone(),
            capabilities: effective.clone(),
            limits,
            paths,
            store: store.clone(),
            namespace: opts.namespace.clone(),
        };
        let invocation = Invocation { session_id: opts.session.clone(), step: opts.step, params: params.to_string() };
        let outcome = self.runtime()?.call(prepared, grant, invocation).await;
        if let Ok(out) = &outcome.result {
            let provenance = Provenance {
                skill: name.to_string(),
                skill_hash: loaded.content_hash.clone(),
                session: opts.session.clone(),
                step: opts.step,
            };
            report.memories = sandbox::absorb(
                &out.new_memories,
                effective.memory,
                &limits,
                store.as_deref(),
                &opts.namespace,
                &provenance,
            );
            for d in &report.memories.dropped {
                report.denials.push(Denial { capability: "memory".into(), message: d.clone() });
            }
        }
        report.result = outcome.result;
        report.denials.extend(outcome.denials);
        report.logs = outcome.logs;
        report.stdout = outcome.stdout;
        report.stderr = outcome.stderr;
        report.elapsed_us = outcome.elapsed_us;
        report.memory_peak_bytes = outcome.memory_peak_bytes;
        self.audit(&report);
        Ok(report)
    }

    /// The hash-chained audit log of this home (see [`crate::audit`]).
    pub fn audit_log(&self) -> crate::audit::AuditLog {
        crate::audit::AuditLog::in_home(&self.root)
    }

    /// Append the call to the audit log. A failure to audit is reported on stderr, never
    /// silently ignored, but does not undo the call.
    fn audit(&self, report: &RunReport) {
        let log = self.audit_log();
        if let Err(e) = log.append(crate::audit::call_entry(report)) {
            eprintln!("warning: cannot write the audit log {}: {e:#}", log.path().display());
        }
    }
}

/// Finish what a crashed install or remove left behind: an `.old-NAME-PID` copy whose
/// `NAME` is missing is put back (the crash fell between the two renames of the swap);
/// other leftovers (stale staging or old copies, removed skills) are deleted.
fn recover_interrupted_installs(skills: &Path) {
    let Ok(entries) = std::fs::read_dir(skills) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file_name.strip_prefix('.') else { continue };
        let Some((kind, tail)) = rest.split_once('-') else { continue };
        let Some((name, pid)) = tail.rsplit_once('-') else { continue };
        if pid
            .parse::<u32>()
            .map(|p| p == std::process::id() || Path::new(&format!("/proc/{p}")).exists())
            .unwrap_or(true)
        {
            continue; // in progress in a live process (or not ours)
        }
        let path = entry.path();
        if kind == "old" && !skills.join(name).exists() {
            let _ = std::fs::rename(&path, skills.join(name));
        } else if matches!(kind, "old" | "removed") {
            if let Some(root) = skills.parent() {
                let granted = Policy::load(&root.join("policy.toml")).map(|p| p.granted(name)).unwrap_or_default();
                archive(root, name, &path, granted.describe());
            }
        } else if kind == "staging" {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Move a replaced or removed version into `history/<name>/<content hash>/`; a version
/// already there (same bytes) or without a readable record is simply deleted.
fn archive(root: &Path, name: &str, dir: &Path, granted_then: Vec<String>) {
    let hash = std::fs::read(dir.join("install.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<InstallRecord>(&b).ok())
        .map(|r| r.content_hash);
    if let Some(hash) = hash {
        let dest = root.join("history").join(name).join(&hash);
        // When it was archived and what the user had granted it then, for `skill history`.
        let note = ArchiveNote { archived_ms: now_ms(), granted_then };
        let _ = serde_json::to_vec_pretty(&note).map(|b| std::fs::write(dir.join("archived.json"), b));
        if !dest.exists()
            && dest.parent().is_some_and(|p| std::fs::create_dir_all(p).is_ok())
            && std::fs::rename(dir, &dest).is_ok()
        {
            return;
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn validate_params(
    manifest: &Manifest,
    validator: &jsonschema::Validator,
    mut params: Value,
) -> Result<Value, CallError> {
    let expected = || {
        let list: Vec<String> = manifest
            .parameters
            .iter()
            .map(|p| {
                let mut s =
                    format!("{} ({:?}{})", p.name, p.kind, if p.required { ", required" } else { "" }).to_lowercase();
                if let Some(c) = &p.choices {
                    s.push_str(&format!(" one of {}", Value::Array(c.clone())));
                }
                s
            })
            .collect();
        if list.is_empty() {
            "this skill takes no parameters".to_string()
        } else {
            format!("expected: {}", list.join(", "))
        }
    };
    let Some(obj) = params.as_object_mut() else {
        return Err(CallError::InvalidParams(format!(
            "parameters must be a JSON object, got {params}; {}",
            expected()
        )));
    };
    for p in &manifest.parameters {
        if let Some(d) = &p.default
            && !obj.contains_key(&p.name)
        {
            obj.insert(p.name.clone(), d.clone());
        }
    }
    let problems: Vec<String> = validator
        .iter_errors(&params)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() { e.to_string() } else { format!("`{}`: {e}", path.trim_start_matches('/')) }
        })
        .collect();
    if !problems.is_empty() {
        return Err(CallError::InvalidParams(format!("{}; {}", problems.join("; "), expected())));
    }
    Ok(params)
}

/// Parse `-p key=value` pairs using the declared parameter types (a string parameter
/// keeps `123` as text; others take JSON).
pub fn params_from_pairs(manifest: &Manifest, pairs: &[String]) -> Result<Value> {
    let mut obj = serde_json::Map::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').ok_or_else(|| anyhow!("`-p {pair}`: write it as -p name=value"))?;
        let kind = manifest.parameters.iter().find(|p| p.name == k).map(|p| p.kind);
        let value = match kind {
            Some(ParamType::String) | None => serde_json::from_str::<Value>(v)
                .ok()
                .filter(|j| kind.is_none() && !j.is_string())
                .unwrap_or_else(|| Value::String(v.to_string())),
            Some(_) => serde_json::from_str(v).map_err(|e| anyhow!("`-p {pair}`: `{k}` takes JSON ({e})"))?,
        };
        obj.insert(k.to_string(), value);
    }
    Ok(Value::Object(obj))
}
