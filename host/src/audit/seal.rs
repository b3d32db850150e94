//! Setting a damaged log aside ([`AuditLog::seal`]) and checking, when a log starts with a
//! seal, that the sealed file still has the bytes it recorded.

use std::io::{BufReader, Read as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;
use serde_json::{Map, Value};

use super::chain::{chained_line, last_entry, walk};
use super::read::str_field;
use super::{AuditLog, EntryKind, GENESIS, new_entry};
use crate::text::sha256_hex;

impl AuditLog {
    pub(super) fn check_sealed(&self, seal: &Map<String, Value>) -> SealCheck {
        let rel = str_field(seal, "sealed_file").to_string();
        let recorded = str_field(seal, "sealed_sha256").to_string();
        let file = self.path.parent().unwrap_or(Path::new(".")).join(&rel);
        let status = match std::fs::read(&file) {
            Err(_) => SealStatus::Missing,
            Ok(bytes) if sha256_hex(&bytes) == recorded => SealStatus::Intact,
            Ok(_) => SealStatus::Changed,
        };
        SealCheck {
            file,
            sha256: recorded,
            verified_entries: seal.get("sealed_verified_entries").and_then(Value::as_u64).unwrap_or(0),
            status,
        }
    }

    /// Set a damaged log aside and start a new, verified segment. The damaged file moves
    /// unchanged to `sealed/<time>.jsonl` with a note beside it (`<time>.json`: its sha256,
    /// size, how many lines verified and the hash of the last one, what is wrong). The new
    /// log's first line is a `seal` entry recording the same, so the history stays
    /// provable: `verify` checks the sealed file against that hash. Refuses a log that
    /// verifies (nothing is damaged; a torn last line is repaired by the next append).
    pub fn seal(&self) -> Result<Sealed> {
        if let Some(pg) = &self.pg {
            return Err(super::postgres::no_seal(&pg.location()));
        }
        if !self.path.exists() {
            bail!("there is no audit log at {} to seal", self.path.display());
        }
        let file = self.open_locked()?;
        let bytes = {
            let mut b = Vec::new();
            (&file).read_to_end(&mut b).with_context(|| format!("cannot read {}", self.path.display()))?;
            b
        };
        let walk =
            walk(BufReader::new(bytes.as_slice())).with_context(|| format!("cannot read {}", self.path.display()))?;
        let damage = match (&walk.broken, last_entry(&file)) {
            (Some(b), _) => b.message.clone(),
            (None, Err(e)) => format!("its end cannot be chained to: {e:#}"),
            (None, Ok(_)) => bail!(
                "the audit log {} verifies ({} entries); there is nothing to seal",
                self.path.display(),
                walk.entries
            ),
        };
        let id = format!("{}-{}", compact_now(), crate::fsutil::random_hex(3));
        let dir = self.sealed_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let sealed_path = dir.join(format!("{id}.jsonl"));
        let note_path = dir.join(format!("{id}.json"));
        let sealed = Sealed {
            sealed_path: sealed_path.clone(),
            note_path: note_path.clone(),
            sha256: sha256_hex(&bytes),
            bytes: bytes.len() as u64,
            lines: bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() as u64,
            verified_entries: walk.entries,
            verified_head: walk.head.clone(),
            damaged_line: walk.broken.as_ref().map(|b| b.line),
            damage,
            head: String::new(),
        };
        let rel = format!("sealed/{id}.jsonl");
        let mut entry = new_entry(EntryKind::Seal, &format!("seal-{id}"));
        entry.insert("status".into(), "sealed".into());
        entry.insert("sealed_file".into(), rel.into());
        entry.insert("sealed_sha256".into(), sealed.sha256.clone().into());
        entry.insert("sealed_bytes".into(), sealed.bytes.into());
        entry.insert("sealed_lines".into(), sealed.lines.into());
        entry.insert("sealed_verified_entries".into(), sealed.verified_entries.into());
        entry.insert("sealed_verified_head".into(), sealed.verified_head.clone().into());
        entry.insert("sealed_damaged_line".into(), sealed.damaged_line.into());
        entry.insert("error".into(), sealed.damage.clone().into());
        let (line, head) = chained_line(entry.into(), 1, GENESIS);
        let sealed = Sealed { head, ..sealed };
        crate::fsutil::write_atomic(
            &note_path,
            &serde_json::to_vec_pretty(&sealed).context("cannot serialize the seal note")?,
        )?;
        // The damaged file is linked aside under the lock, then the new segment replaces the
        // path in one rename, so the path always names a log: an appender never finds it
        // missing (and creates a file the seal would replace, losing its line), and one
        // waiting on the old file's lock sees another inode and reopens the new segment.
        std::fs::hard_link(&self.path, &sealed_path)
            .with_context(|| format!("cannot link {} to {}", self.path.display(), sealed_path.display()))?;
        crate::fsutil::write_atomic(&self.path, line.as_bytes())?;
        drop(file);
        Ok(sealed)
    }
}

/// A [`AuditLog::seal`] that happened.
#[derive(Debug, Clone, Serialize)]
pub struct Sealed {
    /// Where the damaged log is now.
    pub sealed_path: PathBuf,
    /// The note beside it.
    pub note_path: PathBuf,
    /// sha256 of the sealed file's bytes, also recorded in the new segment's first line.
    pub sha256: String,
    pub bytes: u64,
    pub lines: u64,
    /// Lines of the sealed file that verified before the damage.
    pub verified_entries: u64,
    /// Hash of the last of them (GENESIS when none).
    pub verified_head: String,
    /// First damaged line, when a line is (not when only the end is unusable).
    pub damaged_line: Option<u64>,
    pub damage: String,
    /// Hash of the new segment's first line.
    pub head: String,
}

/// What [`AuditLog::verify`] found about the segment a log's first line seals.
#[derive(Debug, Clone, Serialize)]
pub struct SealCheck {
    pub file: PathBuf,
    pub sha256: String,
    pub verified_entries: u64,
    pub status: SealStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SealStatus {
    /// The sealed file still has the bytes the seal recorded.
    Intact,
    /// It was changed after it was sealed.
    Changed,
    /// It is gone.
    Missing,
}

/// `20261201T094533Z`, for file names.
fn compact_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    now.format(&fmt).unwrap_or_else(|_| "unknown-time".into())
}
