//! Versions of a skill: every replaced or removed version is archived under
//! `history/<name>/<content hash>/` with a note of when and with which grants; `history`
//! lists them with the rights each added or dropped, `rollback` restores exact bytes.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::record::{InstallRecord, verify_files};
use super::{Library, now_ms};
use crate::fsutil::{ScratchName, write_atomic};
use crate::manifest::Manifest;
use crate::text::sha256_hex;

/// Written next to an archived version.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ArchiveNote {
    archived_ms: u64,
    granted_then: Vec<String>,
}

/// The shortest content-hash prefix `skill rollback` accepts.
pub const MIN_HASH_PREFIX: usize = 8;

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

/// Move a replaced or removed version into `history/<name>/<content hash>/`; a version
/// already there (same bytes) or without a readable record is simply deleted.
pub(super) fn archive(root: &Path, name: &str, dir: &Path, granted_then: Vec<String>) {
    if let Ok(record) = InstallRecord::read(dir) {
        let dest = root.join("history").join(name).join(&record.content_hash);
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

impl Library {
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
            let Ok(record) = InstallRecord::read(&dir) else { continue };
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
        let archived: Vec<&HistoryEntry> = history.iter().filter(|e| !e.installed).collect();
        // Each version with enough of its hash to tell it from the others.
        let listing = || {
            archived
                .iter()
                .map(|e| {
                    format!(
                        "{} ({})",
                        e.version.as_deref().unwrap_or("-"),
                        &e.content_hash[..12.min(e.content_hash.len())]
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let is_hex = !which.is_empty() && which.bytes().all(|b| b.is_ascii_hexdigit());
        let by_version: Vec<&&HistoryEntry> = archived.iter().filter(|e| e.version.as_deref() == Some(which)).collect();
        let matches: Vec<&&HistoryEntry> = if by_version.is_empty() && is_hex {
            let by_prefix: Vec<&&HistoryEntry> =
                archived.iter().filter(|e| e.content_hash.starts_with(which)).collect();
            if which.len() < MIN_HASH_PREFIX && !by_prefix.is_empty() {
                bail!(
                    "the content-hash prefix `{which}` is too short: give at least {MIN_HASH_PREFIX} hex digits. The archived versions of `{name}`: {}",
                    listing()
                );
            }
            by_prefix
        } else {
            by_version
        };
        let entry = match matches.as_slice() {
            [one] => (**one).clone(),
            [] => bail!(
                "`{name}` has no archived version `{which}`; see `skillhost skill history {name}` (archived: {})",
                if archived.is_empty() { "none".to_string() } else { listing() }
            ),
            several => bail!(
                "`{which}` matches {} archived versions of `{name}`: {}; give a content-hash prefix of one of them",
                several.len(),
                several
                    .iter()
                    .map(|e| format!(
                        "{} ({})",
                        e.version.as_deref().unwrap_or("-"),
                        &e.content_hash[..12.min(e.content_hash.len())]
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let src = self.history_dir(name).join(&entry.content_hash);
        let record = InstallRecord::read(&src)?;
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
        let staging = ScratchName::new_path(&self.root.join("skills"), "staging", name);
        std::fs::create_dir_all(&staging)?;
        let staged = (|| -> Result<()> {
            for rel in record.files.keys().map(String::as_str).chain(["install.json"]) {
                let bytes =
                    std::fs::read(src.join(rel)).with_context(|| format!("cannot read {}", src.join(rel).display()))?;
                write_atomic(&staging.join(rel), &bytes)?;
            }
            Ok(())
        })();
        if let Err(e) = staged {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        self.swap_in(name, &staging)?;
        let _ = std::fs::remove_dir_all(&src);
        Ok(entry)
    }
}
