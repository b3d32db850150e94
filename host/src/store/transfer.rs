//! `skillhost store import --from HOME` and `store export --to DIR`: a local home's system
//! of record moved into an empty PostgreSQL store, and a store's moved back into a new home,
//! losslessly (issue 33).
//!
//! # What moves, and how
//!
//! - **The shared home** (skills, history, agents, `policy.toml`, `trust.toml`,
//!   `secrets.json`): the same units [`HomeSync`] shares between hosts. Import uploads every
//!   unit of the home as version 1 (the secrets sealed with the store key, as any host
//!   seals them); export writes every unit back as files (the secrets opened with the key).
//!   A skill directory is the bytes it was, `install.json` included, so the install records'
//!   file hashes still verify.
//! - **The audit chain**: the home's `audit/audit.jsonl` is verified, then its lines go into
//!   `skillhost_audit` verbatim and in order, with the head row at its last line, in one
//!   transaction. Nothing is re-hashed: the hashes a user kept still hold, `audit verify` on
//!   the store passes with the same head, and new lines chain after the old ones. Export
//!   writes the rows back as the file's lines (one snapshot) and verifies the file.
//! - **Memory**: on PostgreSQL, memory is an ordered log of write ops every host replays
//!   (`memory/replica.rs`). Logging one `add` per record would re-run the merge rules and
//!   renumber, and could not carry the archive, deprecations or working memory. So import
//!   takes a consistent snapshot of the home's store (records, archive, id counters, working
//!   memory, promoted lines, daily note files) and logs it as one op, `load_snapshot`, which
//!   is accepted only as the first op of an empty log and only by an empty store, and which
//!   every replica applies identically: rows as they are, then the search index and vectors
//!   rebuilt from them (`memory/snapshot.rs`). Export takes the same snapshot from this
//!   host's replica (caught up with the log first) and loads it into the new home's store.
//! - **Paused agent runs** (`memory/sessions/*.json`): one row each
//!   (`store/agent_sessions.rs`), written back as the same files.
//!
//! # Why only into empty targets
//!
//! Merging two homes is not a move: ids, audit sequence numbers and grants would collide,
//! and the audit chain cannot hold two geneses. So import refuses a store that holds any
//! audit line, memory op or shared-home unit, and export refuses a directory that is not
//! empty, each saying what to do instead. Every check that can fail on the source (the audit
//! log verifies, the store key is there for secrets, the memory snapshot reads) runs before
//! anything is written; a failure after that (the database going away mid-import) leaves a
//! partly imported store, and the error says to drop it and import again.
//!
//! Not moved: `audit/sealed/` (segments a seal set aside: the chain records their hashes,
//! the files stay in the old home), `cache/` (derived) and `skillhost.toml` (each host's own
//! settings, such as the embedding model, which every host of a store must set alike).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;

use super::{HomeSync, PgMemoryLog, PgStore};
use crate::audit::AuditLog;
use crate::library::Library;
use crate::memory::{AgentSessions, Memory, MemoryConfig, MemoryLog as _, MemorySnapshot, SnapshotReport};

/// What `store import` or `store export` moved.
#[derive(Debug, Clone, Serialize)]
pub struct TransferReport {
    /// The home read from or written to.
    pub home: PathBuf,
    /// Shared-home units (`skills/NAME`, `policy.toml`, ...).
    pub units: Vec<String>,
    /// Audit lines, and the chain's head hash after them.
    pub audit_lines: u64,
    pub audit_head: String,
    pub memory: SnapshotReport,
    /// Paused agent runs (`memory/sessions/`).
    pub agent_sessions: usize,
}

/// How much a store already holds: (audit lines, memory ops, shared-home version).
fn contents(store: &PgStore) -> Result<(i64, u64, i64)> {
    let pg = store.clone();
    let (audit, home) = store.block_on(async move {
        let client = pg.client().await?;
        let read = |e: tokio_postgres::Error| pg.error("cannot read", &e);
        let audit: i64 =
            client.query_one("SELECT seq FROM skillhost_audit_head WHERE id = 1", &[]).await.map_err(read)?.get(0);
        let home: i64 = client.query_one("SELECT version FROM skillhost_home_head", &[]).await.map_err(read)?.get(0);
        Ok((audit, home))
    })?;
    let memory = PgMemoryLog::open(store)?.head()?.seq;
    Ok((audit, memory, home))
}

/// The memory of the local home `home`, consistent; empty when it has none.
fn local_snapshot(home: &Path) -> Result<MemorySnapshot> {
    let dir = home.join("memory");
    if !dir.join("store.redb").exists() && !dir.join("daily").exists() {
        return Ok(empty_snapshot());
    }
    let memory = Memory::open(&dir, MemoryConfig::default())
        .with_context(|| format!("cannot open the memory of {}", home.display()))?;
    // Another process owns it (a server, an agent run, a memory command): what it writes
    // after the snapshot would be in neither the store nor anywhere its users look next.
    if !memory.is_owner() {
        bail!(
            "the memory of {} is open in another skillhost process (pid {}: a `skillhost mcp` server, an agent run or a memory command); nothing was imported. Stop it (or let it finish), then import again: an import copies the home as it is at one moment, and what that process wrote afterwards would not be in the store",
            home.display(),
            memory.owner_pid()
        );
    }
    memory.snapshot()
}

fn empty_snapshot() -> MemorySnapshot {
    MemorySnapshot {
        format: crate::memory::SNAPSHOT_FORMAT,
        next_id: 0,
        next_archive_id: 0,
        records: Vec::new(),
        archive: Vec::new(),
        session_kv: Vec::new(),
        promoted: Vec::new(),
        daily: Default::default(),
        archived_daily: Default::default(),
    }
}

/// A library of `host_home` on `store`: this host, as any command would run it.
fn host_library(store: &PgStore, host_home: &Path) -> Result<Library> {
    let mut lib = Library::open(host_home, None, None)?;
    lib.use_postgres(store.clone())?;
    Ok(lib)
}

/// `skillhost store import --from FROM`, run by the host whose home is `host_home`.
pub fn import(store: &PgStore, host_home: &Path, from: &Path) -> Result<TransferReport> {
    if !from.is_dir() {
        bail!("{} is not a directory: name the skillhost home to import with --from", from.display());
    }
    let looks_like_home = ["skills", "memory", "audit", "policy.toml"].iter().any(|p| from.join(p).exists());
    if !looks_like_home {
        bail!(
            "{} holds no skillhost home (no skills/, memory/, audit/ or policy.toml): name the home to import with --from",
            from.display()
        );
    }
    let (audit, memory, home) = contents(store)?;
    if audit != 0 || memory != 0 || home != 0 {
        bail!(
            "the PostgreSQL store {} is not empty ({audit} audit line(s), {memory} memory write(s), shared home at version {home}): import only into a new database (createdb, then `skillhost store migrate --store URL`), so that nothing it holds is overwritten or interleaved",
            store.url()
        );
    }
    // Everything that can fail on the source, before anything is written.
    let sync = HomeSync::new(store, from)?;
    sync.check_can_import()?;
    let audit_file = AuditLog::in_home(from);
    let verified = audit_file.verify().map_err(|e| {
        anyhow!("the audit log {} does not verify ({e}); nothing was imported: `skillhost --home {} audit verify` shows the damage and `audit seal` sets it aside", audit_file.location(), from.display())
    })?;
    let snapshot = local_snapshot(from)?;
    // After the snapshot: opening an old store moved its paused runs out into files.
    let sessions = AgentSessions::new(from.join("memory").join("sessions")).all()?;

    let partly = |e: anyhow::Error| {
        e.context(format!(
            "the import stopped part way: {} now holds part of {}; drop that database, create and migrate it again, then import again",
            store.url(),
            from.display()
        ))
    };
    let units = sync.import_home().map_err(partly)?;
    let imported = AuditLog::import_file(store, audit_file.path()).map_err(partly)?;
    if imported.head != verified.head {
        return Err(partly(anyhow!("the audit log {} changed during the import", audit_file.location())));
    }
    let memory = if snapshot.is_empty() {
        SnapshotReport::default()
    } else {
        let lib = host_library(store, host_home).map_err(partly)?;
        lib.memory().and_then(|m| m.load_snapshot(snapshot)).map_err(partly)?
    };
    for (id, state) in &sessions {
        super::agent_sessions::save(store, id, state).map_err(partly)?;
    }
    Ok(TransferReport {
        home: from.to_path_buf(),
        units,
        audit_lines: imported.entries,
        audit_head: imported.head,
        memory,
        agent_sessions: sessions.len(),
    })
}

/// `skillhost store export --to TO`, run by the host whose home is `host_home`.
pub fn export(store: &PgStore, host_home: &Path, to: &Path) -> Result<TransferReport> {
    match std::fs::read_dir(to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} is not empty: export into a new or empty directory (nothing in it is overwritten)",
                    to.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", to.display())),
    }
    if same_dir(host_home, to) {
        bail!("{} is this host's home: export into another directory", to.display());
    }
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    // This host's replica, caught up with the log, holds the store's memory.
    let lib = host_library(store, host_home)?;
    let snapshot = lib.memory()?.snapshot()?;

    let units = HomeSync::new(store, to)?.export_home()?;
    let audit_file = AuditLog::in_home(to);
    std::fs::create_dir_all(to.join("audit"))?;
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(audit_file.path())
            .with_context(|| format!("cannot create {}", audit_file.path().display()))?,
    );
    let lines = lib.audit_log().export_lines(&mut out)?;
    let file = out.into_inner().map_err(|e| anyhow!("cannot write {}: {e}", audit_file.path().display()))?;
    file.sync_all()?;
    let verified = audit_file
        .verify()
        .map_err(|e| anyhow!("the exported audit log {} does not verify: {e}", audit_file.location()))?;
    if verified.entries != lines {
        bail!(
            "the exported audit log {} holds {} lines, {lines} were written",
            audit_file.location(),
            verified.entries
        );
    }
    let memory = if snapshot.is_empty() {
        SnapshotReport::default()
    } else {
        let local = Memory::open(&to.join("memory"), MemoryConfig::default())?;
        local.load_snapshot(snapshot)?
    };
    let sessions = super::agent_sessions::all(store)?;
    let files = AgentSessions::new(to.join("memory").join("sessions"));
    for (id, state) in &sessions {
        files.save(id, state)?;
    }
    Ok(TransferReport {
        home: to.to_path_buf(),
        units,
        audit_lines: lines,
        audit_head: verified.head,
        memory,
        agent_sessions: sessions.len(),
    })
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
