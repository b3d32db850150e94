//! Installing and removing: read and check a skill directory, stage a copy, swap it in,
//! record grants; repair what a crash in the middle left behind.
//!
//! Everything that can refuse the install (an unreadable policy, a bad manifest, a
//! component that does not compile, a refused grant) is checked before the installed copy
//! changes, so a failed install leaves the previous version exactly as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;

use super::record::{InstallRecord, UndeclaredImport};
use super::{Library, history::archive, now_ms};
use crate::capabilities::Limits;
use crate::fsutil::{ScratchName, swap_dir, write_atomic};
use crate::manifest::Manifest;
use crate::policy::{Grant, Policy};
use crate::sandbox::{self, CompileOutcome};
use crate::text::content_hash;
use crate::text::sha256_hex;

/// Executable (a component to run) or instruction (guidance for the agent only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkillKind {
    Executable,
    Instruction,
}

impl std::fmt::Display for SkillKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkillKind::Executable => "executable",
            SkillKind::Instruction => "instruction",
        })
    }
}

/// The result of an install, for display.
#[derive(Debug, Clone, Serialize)]
pub struct InstallReport {
    pub name: String,
    pub version: Option<String>,
    pub content_hash: String,
    pub kind: SkillKind,
    pub declared: Vec<String>,
    pub imports: Vec<String>,
    pub undeclared_imports: Vec<UndeclaredImport>,
    /// The toolchain the component says built it. A language runtime (Python, JS, Go)
    /// imports interfaces for itself: the report says so instead of warning (calls through
    /// them are denied all the same).
    pub toolchain: Option<sandbox::Toolchain>,
    pub granted: Vec<String>,
    pub not_granted: Vec<String>,
    /// Limits the skill asks for above the defaults (granted only with consent).
    pub limits_requested: Vec<String>,
    /// The limits in force after this install.
    pub limits: Limits,
    pub compile: Option<CompileOutcome>,
    /// Content hash of the version this install replaced (now in the history); `None` when
    /// nothing was installed or the same content was (see `unchanged`).
    pub replaced: Option<String>,
    /// The same content was already installed: nothing was replaced or archived.
    pub unchanged: bool,
    /// Rights this version declares beyond the version it replaced; not granted unless the
    /// user consents (existing grants never widen by themselves).
    pub new_rights: Vec<String>,
    /// The installed version this install replaced with different content, and the grants
    /// the new content kept ("replaces X (grants kept: ...)").
    pub replaces: Option<Replacement>,
    /// Where this version came from (recorded in install.json).
    pub source: Option<String>,
    /// The verified digest and signer of an OCI install.
    pub provenance: Option<crate::oci::Provenance>,
    /// Grants that deserve a second look (read-write mounts outside the workspace).
    pub warnings: Vec<String>,
}

/// An installed version with different content that an install is about to replace.
#[derive(Debug, Clone, Serialize)]
pub struct Replacement {
    pub name: String,
    pub version: Option<String>,
    pub content_hash: String,
    /// Where the replaced version came from, when its install.json says.
    pub source: Option<String>,
    /// What the user policy grants the name: the new content keeps it.
    pub grants_kept: Vec<String>,
}

impl std::fmt::Display for Replacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replaces {} {}", self.name, self.version.as_deref().unwrap_or("-"))?;
        write!(f, " ({}", super::short_hash(&self.content_hash))?;
        if let Some(s) = &self.source {
            write!(f, ", from {s}")?;
        }
        let kept = if self.grants_kept.is_empty() { "none".to_string() } else { self.grants_kept.join("; ") };
        write!(f, ") (grants kept: {kept})")
    }
}

/// How an install treats the version already installed under the same name, and where the
/// new one comes from.
pub struct InstallOptions<'a> {
    /// Asked before new content replaces an installed version that holds grants (the new
    /// code would inherit them); `Ok(false)` cancels the install and nothing changes.
    pub confirm_replace: &'a dyn Fn(&Replacement) -> Result<bool>,
    /// Recorded in install.json as where the skill came from.
    pub source: Option<String>,
    /// What an OCI install verified (digest, signer); recorded in install.json.
    pub provenance: Option<crate::oci::Provenance>,
}

/// A bundle unpacked and its signature checked ([`Library::open_bundle`]): install `dir`
/// with `checked.provenance`. The directory goes when this is dropped.
pub struct OpenedBundle {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub version: Option<String>,
    pub checked: crate::oci::bundle::Checked,
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

impl Library {
    /// Check that the policy files parse before anything changes: an install that would
    /// fail at the grant step must fail before the swap.
    fn policy_before_change(&self, what: &str) -> Result<()> {
        self.policy().map(|_| ()).map_err(|e| anyhow!("{e:#}\nNothing was {what}."))
    }

    /// Install the skill in `src` (a directory with SKILL.md and, for executable skills,
    /// skill.wasm), adding `grants` to the user policy.
    /// Replacing a granted version is accepted without asking (the report says so); see
    /// [`Library::install_with`] to confirm first.
    pub fn install(&self, src: &Path, grants: &dyn Fn(&Manifest) -> Result<Option<Grant>>) -> Result<InstallReport> {
        let source = std::fs::canonicalize(src).unwrap_or_else(|_| src.to_path_buf());
        let opts = InstallOptions {
            confirm_replace: &|_| Ok(true),
            source: Some(source.display().to_string()),
            provenance: None,
        };
        self.install_with(src, grants, &opts)
    }

    /// [`Library::install`], asking `opts.confirm_replace` before new content inherits the
    /// grants of an installed version, and recording `opts.source`.
    pub fn install_with(
        &self,
        src: &Path,
        grants: &dyn Fn(&Manifest) -> Result<Option<Grant>>,
        opts: &InstallOptions<'_>,
    ) -> Result<InstallReport> {
        self.policy_before_change("installed")?;
        let manifest = Manifest::load_dir(src).map_err(|e| anyhow!("{e}"))?;
        if crate::memory::is_reserved_source(&manifest.name) {
            bail!(
                "{}: a skill may not be named `{}`: that name marks memories written by the user or the host ({}); rename the skill",
                src.join("SKILL.md").display(),
                manifest.name,
                crate::memory::RESERVED_SOURCES.join(", ")
            );
        }
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
            source: opts.source.clone(),
            provenance: opts.provenance.clone(),
        };

        // New content under an installed name inherits that name's grants: the user
        // confirms before anything changes.
        let replaces = match self.read_record(&manifest.name) {
            Ok(old) if old.content_hash != record.content_hash => Some(Replacement {
                name: manifest.name.clone(),
                version: old.version.clone(),
                content_hash: old.content_hash.clone(),
                source: old.source.clone(),
                grants_kept: self.user_grants(&manifest.name),
            }),
            _ => None,
        };
        if let Some(r) = replaces.as_ref().filter(|r| !r.grants_kept.is_empty())
            && !(opts.confirm_replace)(r)?
        {
            bail!("not installed: `{}` stays as it was ({r})", manifest.name);
        }

        // Decide grants before touching the installed copy, so a refused grant installs nothing.
        let granted_now = grants(&manifest)?.map(|g| Grant {
            capabilities: manifest.capabilities.intersect(&g.capabilities),
            limits: g.limits.granted_within(&manifest.limits),
        });

        // Stage, then swap in with renames.
        let staging = ScratchName::new_path(&self.root.join("skills"), "staging", &manifest.name);
        std::fs::create_dir_all(&staging)?;
        let staged = (|| -> Result<()> {
            // Durable before the swap: a power cut must not leave empty files behind the rename.
            for (rel, bytes) in &contents {
                write_atomic(&staging.join(rel), bytes)?;
            }
            write_atomic(&staging.join("install.json"), &serde_json::to_vec_pretty(&record)?)
        })();
        if let Err(e) = staged {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        let previous = self.read_record(&manifest.name).ok();
        let previous_manifest = previous.as_ref().and_then(|_| self.info(&manifest.name).ok()).map(|i| i.manifest);
        self.swap_in(&manifest.name, &staging)?;
        let unchanged = previous.as_ref().is_some_and(|r| r.content_hash == record.content_hash);
        let replaced = previous.map(|r| r.content_hash).filter(|_| !unchanged);
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
            kind: if wasm.is_some() { SkillKind::Executable } else { SkillKind::Instruction },
            declared: manifest.capabilities.describe(),
            imports,
            undeclared_imports,
            toolchain: wasm.as_deref().and_then(sandbox::detect_toolchain),
            granted: effective.describe(),
            not_granted: manifest.capabilities.beyond(&effective),
            limits_requested: manifest.limits.beyond_default(),
            limits,
            compile,
            replaced,
            unchanged,
            new_rights,
            replaces,
            source: record.source.clone(),
            provenance: record.provenance.clone(),
            warnings: crate::capabilities::filesystem::broad_write_warnings(&effective.filesystem),
        })
    }

    /// Make the prepared directory `staging` the installed version of `name`. The version it
    /// replaces is archived in `history/<name>/<content hash>/` (see [`Library::history`]).
    pub(super) fn swap_in(&self, name: &str, staging: &Path) -> Result<()> {
        let target = self.skill_dir(name);
        let old = ScratchName::new_path(&self.root.join("skills"), "old", name);
        let had_old = swap_dir(&target, staging, &old).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(staging);
        })?;
        if had_old {
            let hash_of = |dir: &Path| InstallRecord::read(dir).ok().map(|r| r.content_hash);
            if hash_of(&old) == hash_of(&target) {
                let _ = std::fs::remove_dir_all(&old); // the same bytes again
            } else {
                archive(&self.root, name, &old, self.user_grants(name));
            }
            self.sweep_compile_cache(sandbox::SWEEP_GRACE);
        }
        self.skills.forget(name);
        Ok(())
    }

    /// Remove compile-cache entries of components no installed skill has any more (replaced,
    /// rolled back from or removed; a Python skill's entry is ~35 MB). A rollback to an
    /// archived version compiles it again. Nothing is removed when an install record cannot
    /// be read: then which components are still installed is not known.
    pub fn sweep_compile_cache(&self, grace: std::time::Duration) -> sandbox::CacheSweep {
        let mut keep = std::collections::HashSet::new();
        let names = match self.names() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("compile cache not swept: cannot list the installed skills ({e:#})");
                return sandbox::CacheSweep::default();
            }
        };
        for name in names {
            match InstallRecord::read(&self.skill_dir(&name)) {
                Ok(record) => keep.extend(record.wasm_sha256),
                Err(e) => {
                    tracing::warn!("compile cache not swept: {e:#}");
                    return sandbox::CacheSweep::default();
                }
            }
        }
        let swept = sandbox::sweep_compile_cache(&self.root.join("cache"), &keep, grace);
        if swept.entries > 0 {
            tracing::info!(
                "compile cache: removed {} entries ({} bytes) of components no longer installed",
                swept.entries,
                swept.bytes
            );
        }
        swept
    }

    /// Install from a `.skill` bundle's bytes (verified entry by entry, see [`crate::bundle`]).
    pub fn install_bundle(
        &self,
        bytes: &[u8],
        grants: &dyn Fn(&Manifest) -> Result<Option<Grant>>,
    ) -> Result<InstallReport> {
        self.install_bundle_with(
            bytes,
            grants,
            &InstallOptions { confirm_replace: &|_| Ok(true), source: None, provenance: None },
        )
    }

    /// [`Library::install_bundle`] with [`InstallOptions`] (the source is the bundle's path or
    /// URL). The bundle's signature is checked as [`Library::open_bundle`] does, without
    /// `--allow-unsigned`, and recorded as the install's provenance.
    pub fn install_bundle_with(
        &self,
        bytes: &[u8],
        grants: &dyn Fn(&Manifest) -> Result<Option<Grant>>,
        opts: &InstallOptions<'_>,
    ) -> Result<InstallReport> {
        self.policy_before_change("installed")?;
        let opened = self.open_bundle(bytes, crate::oci::Unsigned::Refuse)?;
        let opts = InstallOptions {
            confirm_replace: opts.confirm_replace,
            source: opts.source.clone(),
            provenance: Some(opened.checked.provenance.clone()),
        };
        self.install_with(&opened.dir, grants, &opts)
    }

    /// Unpack a `.skill` bundle (every file checked against MANIFEST.json) into a temporary
    /// directory of the home and check its signature against the trust file
    /// ([`crate::oci::bundle::check`]); nothing is installed yet.
    pub fn open_bundle(&self, bytes: &[u8], unsigned: crate::oci::Unsigned) -> Result<OpenedBundle> {
        let tmp = tempfile::Builder::new()
            .prefix(".bundle-")
            .tempdir_in(&self.root)
            .with_context(|| format!("cannot create a temporary directory in {}", self.root.display()))?;
        let unpacked = crate::bundle::unpack_with_manifest(bytes, tmp.path())?;
        let manifest = Manifest::load_dir(&unpacked.dir).map_err(|e| anyhow!("{e}"))?;
        crate::oci::bundle::check_name(&unpacked.manifest.name, &manifest.name)?;
        let trust = crate::oci::trust::TrustFile::load(&self.root)?;
        let checked = crate::oci::bundle::check(
            &trust,
            &manifest.name,
            &unpacked.manifest.digest(),
            unpacked.manifest.signature.as_ref(),
            unsigned,
        )?;
        Ok(OpenedBundle { _tmp: tmp, dir: unpacked.dir, version: unpacked.manifest.version, checked })
    }

    /// Import every skill directory under `dir` (for example a `.claude/skills` tree):
    /// each is linted with the Agent Skills rules and, if it has no errors, installed
    /// (as an instruction skill unless it ships a skill.wasm; nothing is granted). One bad
    /// skill never stops the others.
    pub fn import(&self, dir: &Path) -> Result<Vec<ImportResult>> {
        self.policy_before_change("imported")?;
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
                // An import grants nothing, and never hands an installed name's grants to
                // new content: that takes `skill install` and the user's confirmation.
                let refuse = |r: &Replacement| -> Result<bool> {
                    bail!(
                        "{r}: importing does not replace a skill that holds grants; install it with `skillhost skill install {}` to confirm",
                        d.display()
                    )
                };
                let source = Some(d.display().to_string());
                match self.install_with(
                    &d,
                    &|_| Ok(None),
                    &InstallOptions { confirm_replace: &refuse, source, provenance: None },
                ) {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                }
            };
            results.push(ImportResult { dir: d, installed, error, issues, not_imported });
        }
        Ok(results)
    }

    /// Remove an installed skill and its grants; its files stay in the history (for
    /// `rollback`) unless `purge`. Grants go first, so a failure (say, an invalid policy
    /// file) leaves the skill installed rather than half removed.
    pub fn remove(&self, name: &str, purge: bool) -> Result<()> {
        if let Err(not_installed) = self.read_record(name) {
            // `remove --purge` after a plain `remove`: only the archived versions are left.
            let history = self.history_dir(name);
            if purge && history.is_dir() {
                return std::fs::remove_dir_all(&history)
                    .with_context(|| format!("cannot delete the archived versions in {}", history.display()));
            }
            return Err(not_installed);
        }
        let granted_then = self.user_grants(name);
        Policy::update(&self.policy.user, |p| {
            p.skills.remove(name);
            p.skill_limits.remove(name);
            Ok(())
        })?;
        let dir = self.skill_dir(name);
        let trash = ScratchName::new_path(&self.root.join("skills"), "removed", name);
        std::fs::rename(&dir, &trash).with_context(|| format!("cannot remove {}", dir.display()))?;
        if purge {
            let _ = std::fs::remove_dir_all(&trash);
            let _ = std::fs::remove_dir_all(self.history_dir(name));
        } else {
            archive(&self.root, name, &trash, granted_then);
        }
        self.skills.forget(name);
        self.sweep_compile_cache(sandbox::SWEEP_GRACE);
        Ok(())
    }
}

/// Finish what a crashed install or remove left behind: an `old` copy whose skill is
/// missing is put back (the crash fell between the two renames of the swap); other
/// leftovers of dead processes (stale staging or old copies, removed skills) are archived
/// or deleted. Scratch directories of live processes are left alone.
pub(super) fn recover_interrupted_installs(skills: &Path) {
    let Ok(entries) = std::fs::read_dir(skills) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(scratch) = ScratchName::parse(&file_name) else { continue };
        if scratch.owner_alive() {
            continue; // in progress in a live process
        }
        let path = entry.path();
        let name = scratch.name.as_str();
        match scratch.kind.as_str() {
            "old" if !skills.join(name).exists() => {
                let _ = std::fs::rename(&path, skills.join(name));
            }
            "old" | "removed" => {
                if let Some(root) = skills.parent() {
                    let granted = Policy::load(&root.join("policy.toml")).map(|p| p.granted(name)).unwrap_or_default();
                    archive(root, name, &path, granted.describe());
                }
            }
            // A pull's aside copy: the store holds what the home should (see `HomeSync`).
            "staging" | crate::store::home_sync::PULLED_ASIDE => {
                let _ = std::fs::remove_dir_all(&path);
            }
            _ => {}
        }
    }
}
