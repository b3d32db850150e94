//! install.json: what an installed or archived version is, and the hashes that prove it.
//!
//! A record is read from disk that anyone with access to the home could have edited, so
//! it is checked as it is parsed: the content hash must be a sha256 (64 hex digits; it
//! names history directories and is shown shortened) and every file must be a plain
//! relative path inside the skill directory (records name the files that are re-hashed and
//! copied on rollback).

use std::collections::BTreeMap;
use std::path::{Component, Path};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Deserializer, Serialize};

use crate::fsutil::{FileStamp, SealKey};
use crate::text::sha256_hex;

/// What install.json records about an installed version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstallRecord {
    pub name: String,
    pub version: Option<String>,
    /// sha256 over SKILL.md and the component: the identity of this version.
    #[serde(deserialize_with = "sha256_field")]
    pub content_hash: String,
    pub manifest_sha256: String,
    pub wasm_sha256: Option<String>,
    pub installed_ms: u64,
    /// Every file of the version (relative path -> sha256); `content_hash` covers them all.
    #[serde(default, deserialize_with = "file_list")]
    pub files: BTreeMap<String, String>,
    /// The component's imports (empty for instruction skills).
    pub imports: Vec<String>,
    /// Imports that need a capability the manifest does not declare.
    pub undeclared_imports: Vec<UndeclaredImport>,
    /// Where this version was installed from (a directory, a bundle file or a URL); absent
    /// in records written before it was recorded, and for installs that did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// For a version pulled from an OCI registry: the verified digest and its signer.
    /// Absent for local installs and in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<crate::oci::Provenance>,
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

    /// Read and check `dir/install.json`.
    pub fn read(dir: &Path) -> Result<InstallRecord> {
        let path = dir.join("install.json");
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            anyhow!(
                "{} is corrupt ({e}): it was edited or written by an incompatible skillhost; reinstall the skill",
                path.display()
            )
        })
    }
}

/// The first 12 characters of a hash, for display (the whole string when shorter).
pub fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn sha256_field<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if !is_sha256(&s) {
        return Err(serde::de::Error::custom(format!("content_hash `{s}` is not a sha256 (64 lowercase hex digits)")));
    }
    Ok(s)
}

/// Is `rel` a plain relative path (no `..`, no root, not empty)?
pub(crate) fn is_plain_relative(rel: &str) -> bool {
    let path = Path::new(rel);
    !rel.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

fn file_list<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let files = BTreeMap::<String, String>::deserialize(d)?;
    if let Some(bad) = files.keys().find(|k| !is_plain_relative(k)) {
        return Err(serde::de::Error::custom(format!("file `{bad}` is not a relative path inside the skill")));
    }
    Ok(files)
}

/// [`verify_files`], skipped when this host already verified these files: a seal in
/// `seals` (an HMAC with the host key over the content hash, the directory and every
/// file's stamp) says they were hashed and found good and have not changed since. A
/// changed, replaced or moved file has another stamp, so it is hashed again. A full check
/// seals its result only when no file changed while it was being hashed.
pub(crate) fn verify_files_sealed(
    dir: &Path,
    record: &InstallRecord,
    seals: &Path,
    key: Option<&SealKey>,
) -> Result<()> {
    let seal_path = seals.join(format!("{}.seal", record.content_hash));
    let before = file_stamps(dir, record);
    if let (Some(key), Some(stamps)) = (key, &before)
        && let Ok(mac) = std::fs::read_to_string(&seal_path)
        && key.verify(&seal_parts(dir, record, stamps).iter().map(|p| p.as_slice()).collect::<Vec<_>>(), mac.trim())
    {
        return Ok(());
    }
    verify_files(dir, record)?;
    if let (Some(key), Some(stamps)) = (key, before)
        && file_stamps(dir, record).as_ref() == Some(&stamps)
    {
        let mac = key.seal(&seal_parts(dir, record, &stamps).iter().map(|p| p.as_slice()).collect::<Vec<_>>());
        // Only a shortcut: a seal that cannot be written means the next load hashes again.
        if crate::fsutil::create_private_dir(seals).is_ok() {
            let _ = crate::fsutil::write_atomic(&seal_path, mac.as_bytes());
        }
    }
    Ok(())
}

fn file_stamps(dir: &Path, record: &InstallRecord) -> Option<BTreeMap<String, FileStamp>> {
    record.files.keys().map(|rel| Some((rel.clone(), FileStamp::of(&dir.join(rel)).ok()??))).collect()
}

fn seal_parts(dir: &Path, record: &InstallRecord, stamps: &BTreeMap<String, FileStamp>) -> [Vec<u8>; 4] {
    [
        b"skillhost verified files".to_vec(),
        record.content_hash.as_bytes().to_vec(),
        dir.as_os_str().as_encoded_bytes().to_vec(),
        serde_json::to_vec(stamps).unwrap_or_default(),
    ]
}

/// Re-hash the files a record lists in `dir` and check them against its content hash.
pub(crate) fn verify_files(dir: &Path, record: &InstallRecord) -> Result<()> {
    let mut actual = BTreeMap::new();
    for rel in record.files.keys() {
        let bytes = std::fs::read(dir.join(rel)).with_context(|| {
            format!("{} is missing; the copy of `{}` is incomplete", dir.join(rel).display(), record.name)
        })?;
        actual.insert(rel.clone(), sha256_hex(&bytes));
    }
    let found = crate::text::content_hash(&actual);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record_json(hash: &str, file: &str) -> String {
        format!(
            r#"{{"name":"t","version":null,"content_hash":"{hash}","manifest_sha256":"x","wasm_sha256":null,"installed_ms":0,"files":{{"{file}":"x"}},"imports":[],"undeclared_imports":[]}}"#
        )
    }

    #[test]
    fn records_with_short_hashes_or_escaping_paths_are_refused() {
        let good = "a".repeat(64);
        // Records written before `source` existed still load.
        let old = serde_json::from_str::<InstallRecord>(&record_json(&good, "SKILL.md")).unwrap();
        assert_eq!(old.source, None);
        assert_eq!(old.provenance, None);
        let e = serde_json::from_str::<InstallRecord>(&record_json("abc", "SKILL.md")).unwrap_err().to_string();
        assert!(e.contains("`abc` is not a sha256"), "{e}");
        let e = serde_json::from_str::<InstallRecord>(&record_json(&good, "../../etc/passwd")).unwrap_err().to_string();
        assert!(e.contains("not a relative path"), "{e}");
        assert!(serde_json::from_str::<InstallRecord>(&record_json(&good, "/etc/passwd")).is_err());
        assert_eq!(short_hash("abc"), "abc");
        assert_eq!(short_hash(&good), &good[..12]);
    }
}
