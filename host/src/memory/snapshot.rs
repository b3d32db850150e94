//! A whole memory store as one value ([`MemorySnapshot`]), taken from a store and loaded into
//! an empty one: how `skillhost store import` moves a home's memory into PostgreSQL and
//! `store export` moves it back (see `crate::store::transfer`).
//!
//! # Why a snapshot op, not a replay of adds
//!
//! On PostgreSQL, memory is a log of write ops every host replays (`replica.rs`). Importing
//! a home by logging one `add` per record would run the merge and update rules again
//! (records that coexist in the home could merge), give new ids and new timestamps, and
//! could not bring the archive, deprecations, reference counts, working memory or promoted
//! daily lines at all. So the snapshot travels as *one* write op, [`LoadSnapshot`]
//! (`ops.rs`), holding the records and archive entries exactly as stored (ids, times,
//! provenance, priorities, deprecations), the id counters, the session working memory, the
//! promoted-line table and the daily note files byte for byte. Every replica applies it the
//! same way: it writes the rows as they are, decides nothing, and rebuilds the derived parts
//! (search index, vectors) from them.
//!
//! It is only accepted by an empty store (no record, no archive entry, no working memory,
//! no daily note, unused id counters); the PostgreSQL side also refuses it anywhere but as the
//! first op of an empty log. So it never has to be merged with anything, and a replica that
//! replays it is in the same state as the one that wrote it.
//!
//! [`LoadSnapshot`]: super::ops::LoadSnapshot

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};

use super::daily::parse_date;
use super::records::{ArchiveEntry, MemoryRecord};
use super::schema::{ARCHIVE, MAX_ID, META, PROMOTED, RECORDS, SESSION_KV, decode_record, encode};
use super::store::{Store, validate_namespace};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// Everything a memory store holds that is not derived (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySnapshot {
    pub format: u32,
    /// The next record id and archive id the store would give.
    pub next_id: u64,
    pub next_archive_id: u64,
    /// Every record (live, deprecated, expired), by id.
    pub records: Vec<MemoryRecord>,
    /// Every archive entry, by archive id.
    pub archive: Vec<ArchiveEntry>,
    /// Working memory: (session, key, value).
    pub session_kv: Vec<(String, String, String)>,
    /// Daily lines already promoted: (date, line, record id).
    pub promoted: Vec<(String, u32, u64)>,
    /// `daily/DATE.md`, by date, byte for byte.
    pub daily: BTreeMap<String, String>,
    /// `archive/daily/DATE.md` (notes `memory maintain` moved aside), by date.
    pub archived_daily: BTreeMap<String, String>,
}

/// What a load brought in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotReport {
    pub records: usize,
    pub archive: usize,
    pub session_keys: usize,
    pub daily_notes: usize,
}

impl MemorySnapshot {
    /// Nothing to load.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.archive.is_empty()
            && self.session_kv.is_empty()
            && self.promoted.is_empty()
            && self.daily.is_empty()
            && self.archived_daily.is_empty()
    }

    pub fn report(&self) -> SnapshotReport {
        SnapshotReport {
            records: self.records.len(),
            archive: self.archive.len(),
            session_keys: self.session_kv.len(),
            daily_notes: self.daily.len() + self.archived_daily.len(),
        }
    }

    /// Refuse what no store could have written: a damaged or hand-made snapshot must not
    /// write outside the store or break its invariants.
    fn check(&self) -> Result<()> {
        if self.format != SNAPSHOT_FORMAT {
            bail!(
                "the memory snapshot is in format {}, this skillhost reads format {SNAPSHOT_FORMAT}: use the same skillhost version on both ends",
                self.format
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.records {
            if r.id == 0 || r.id >= MAX_ID || !seen.insert(r.id) {
                bail!("the memory snapshot holds record id {} twice or out of range (1 to 2^53-1)", r.id);
            }
            validate_namespace(&r.namespace).with_context(|| format!("memory record #{} in the snapshot", r.id))?;
            if r.priority > 5 {
                bail!("memory record #{} in the snapshot has priority {}, over 5", r.id, r.priority);
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &self.archive {
            if e.id == 0 || e.id >= MAX_ID || !seen.insert(e.id) {
                bail!("the memory snapshot holds archive id {} twice or out of range", e.id);
            }
        }
        for date in self.daily.keys().chain(self.archived_daily.keys()) {
            parse_date(date).context("a daily note in the memory snapshot")?;
        }
        Ok(())
    }
}

/// The daily note files of `dir` (`DATE.md`), by date.
fn read_notes(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(date) = name.strip_suffix(".md")
            && parse_date(date).is_ok()
        {
            let text = std::fs::read_to_string(entry.path())
                .with_context(|| format!("cannot read {}", entry.path().display()))?;
            out.insert(date.to_string(), text);
        }
    }
    Ok(out)
}

impl Store {
    /// A checkpoint is written by a replica into its shared log (`replica.rs`); a store with
    /// no log has nothing to compact.
    pub fn refuse_checkpoint(&self) -> Result<super::log::CheckpointReport> {
        bail!(
            "the memory store {} is not replicated through a shared log: `skillhost store compact` is for a PostgreSQL store (--store postgres://...); a local store has no log to compact",
            self.dir.display()
        )
    }

    /// The whole store, consistent: taken between two writes.
    pub fn snapshot(&self) -> Result<MemorySnapshot> {
        let _between_writes = self.write_guard();
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let get = |k: &str| -> Result<u64> { Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0)) };
        let (next_id, next_archive_id) = (get("next_id")?, get("next_archive_id")?);
        let mut records = Vec::new();
        for row in txn.open_table(RECORDS)?.iter()? {
            let (k, v) = row?;
            records.push(decode_record(v.value(), k.value())?);
        }
        let mut archive = Vec::new();
        for row in txn.open_table(ARCHIVE)?.iter()? {
            let (k, v) = row?;
            archive.push(
                serde_json::from_slice::<ArchiveEntry>(v.value())
                    .with_context(|| format!("memory archive entry #{} is corrupt", k.value()))?,
            );
        }
        let mut session_kv = Vec::new();
        for row in txn.open_table(SESSION_KV)?.iter()? {
            let (k, v) = row?;
            let (session, key) = k.value();
            session_kv.push((session.to_string(), key.to_string(), v.value().to_string()));
        }
        let mut promoted = Vec::new();
        for row in txn.open_table(PROMOTED)?.iter()? {
            let (k, v) = row?;
            let (date, line) = k.value();
            promoted.push((date.to_string(), line, v.value()));
        }
        Ok(MemorySnapshot {
            format: SNAPSHOT_FORMAT,
            next_id,
            next_archive_id,
            records,
            archive,
            session_kv,
            promoted,
            daily: read_notes(&self.dir.join("daily"))?,
            archived_daily: read_notes(&self.dir.join("archive").join("daily"))?,
        })
    }

    /// Load `snapshot` into this store, which must be empty (see the module doc).
    pub fn load_snapshot(&self, snapshot: MemorySnapshot) -> Result<SnapshotReport> {
        snapshot.check()?;
        let report = snapshot.report();
        let current = self.snapshot()?;
        let unused = |n: u64| n <= 1;
        if !current.is_empty() || !unused(current.next_id) || !unused(current.next_archive_id) {
            bail!(
                "the memory store {} is not empty ({} records, {} archived, {} working-memory keys, {} daily notes): a snapshot is loaded only into an empty store, so that nothing is merged or renumbered; load it into a new home or a new database",
                self.dir.display(),
                current.records.len(),
                current.archive.len(),
                current.session_kv.len(),
                current.daily.len() + current.archived_daily.len()
            );
        }
        let txn = self.begin()?;
        let next_id = snapshot.records.iter().map(|r| r.id + 1).fold(snapshot.next_id, u64::max);
        let next_archive_id = snapshot.archive.iter().map(|e| e.id + 1).fold(snapshot.next_archive_id, u64::max);
        for r in &snapshot.records {
            txn.put(r)?;
        }
        {
            let mut table = txn.txn.open_table(ARCHIVE)?;
            for e in &snapshot.archive {
                table.insert(e.id, encode(e)?.as_slice())?;
            }
            let mut table = txn.txn.open_table(SESSION_KV)?;
            for (session, key, value) in &snapshot.session_kv {
                table.insert((session.as_str(), key.as_str()), value.as_str())?;
            }
            let mut table = txn.txn.open_table(PROMOTED)?;
            for (date, line, id) in &snapshot.promoted {
                table.insert((date.as_str(), *line), *id)?;
            }
        }
        txn.set_meta("next_id", next_id)?;
        txn.set_meta("next_archive_id", next_archive_id)?;
        txn.bump_generation()?;
        // The notes before the commit: a failed commit takes them away again, so the store
        // stays empty and the load can be retried.
        let written = write_notes(&self.dir.join("daily"), &snapshot.daily)
            .and_then(|()| write_notes(&self.dir.join("archive").join("daily"), &snapshot.archived_daily));
        let committed = written.and_then(|()| txn.commit());
        let _guard = match committed {
            Ok(guard) => guard,
            Err(e) => {
                remove_notes(&self.dir.join("daily"), &snapshot.daily);
                remove_notes(&self.dir.join("archive").join("daily"), &snapshot.archived_daily);
                return Err(e.context("cannot load the memory snapshot"));
            }
        };
        self.refresh_daily_fingerprint()?;
        let records: Vec<&MemoryRecord> = snapshot.records.iter().collect();
        if let Err(e) = self.vectors.apply(&self.db, &records, &[]) {
            tracing::warn!(
                "memory loaded, but its embeddings could not be stored ({e:#}); they are recomputed on the next open"
            );
        }
        self.rebuild_index()?;
        Ok(report)
    }
}

fn write_notes(dir: &Path, notes: &BTreeMap<String, String>) -> Result<()> {
    if notes.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (date, text) in notes {
        crate::fsutil::write_atomic(&dir.join(format!("{date}.md")), text.as_bytes())?;
    }
    Ok(())
}

fn remove_notes(dir: &Path, notes: &BTreeMap<String, String>) {
    for date in notes.keys() {
        let _ = std::fs::remove_file(dir.join(format!("{date}.md")));
    }
}
