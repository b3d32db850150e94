//! Paused agent runs: `memory/sessions/<id>.json`, one file per session, each replaced
//! atomically (written aside, fsynced, renamed). They used to be a table of the memory
//! store; they are agent state, not memory, so they live apart: reading or saving one needs
//! no store owner, and a damaged store does not take the paused runs with it. Stores that
//! still hold the old `agent_sessions` table are migrated when the owner opens them.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use redb::{Database, ReadableTable, TableHandle};

use super::schema::AGENT_SESSIONS;

/// Longest session id accepted (a file name must stay under 255 bytes once escaped).
const MAX_ID_BYTES: usize = 80;

/// The session files of one home.
pub struct AgentSessions {
    dir: PathBuf,
}

/// The id a session file name stands for ([`file_name`] undone); `None` for a name that
/// no id gives (a stray file, a temporary one).
fn id_of(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".json")?.as_bytes();
    let mut id = Vec::with_capacity(stem.len());
    let mut i = 0;
    while i < stem.len() {
        match stem[i] {
            b'%' => {
                let hex = std::str::from_utf8(stem.get(i + 1..i + 3)?).ok()?;
                id.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' => {
                id.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    let id = String::from_utf8(id).ok()?;
    (file_name(&id).ok()? == name).then_some(id)
}

/// `id` as a file name: letters, digits, `-` and `_` as they are, every other byte as `%XX`
/// (so `../x` or `a/b` can never name another file, and distinct ids stay distinct).
fn file_name(id: &str) -> Result<String> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        bail!("agent session id `{id}` must be 1-{MAX_ID_BYTES} bytes");
    }
    let mut name = String::with_capacity(id.len() + 5);
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            name.push(b as char);
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name.push_str(".json");
    Ok(name)
}

impl AgentSessions {
    pub fn new(dir: PathBuf) -> AgentSessions {
        AgentSessions { dir }
    }

    pub fn get(&self, id: &str) -> Result<Option<serde_json::Value>> {
        let path = self.dir.join(file_name(id)?);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("agent session {id} is corrupt ({})", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read agent session {}", path.display())),
        }
    }

    /// Every saved session, by id (for `store import`); files that name no session are
    /// left alone.
    pub fn all(&self) -> Result<Vec<(String, serde_json::Value)>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", self.dir.display())),
        };
        let mut sessions = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot read {}", self.dir.display()))?;
            let Some(id) = entry.file_name().to_str().and_then(id_of) else { continue };
            if let Some(state) = self.get(&id)? {
                sessions.push((id, state));
            }
        }
        sessions.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(sessions)
    }

    pub fn save(&self, id: &str, state: &serde_json::Value) -> Result<()> {
        let bytes = serde_json::to_vec(state).context("cannot encode the agent session")?;
        self.write(id, &bytes)
    }

    fn write(&self, id: &str, bytes: &[u8]) -> Result<()> {
        let path = self.dir.join(file_name(id)?);
        std::fs::create_dir_all(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
        let mut tmp =
            crate::fsutil::temp_file_for(&path).with_context(|| format!("cannot write in {}", self.dir.display()))?;
        tmp.write_all(bytes).and_then(|_| tmp.as_file().sync_all()).context("cannot write the agent session")?;
        tmp.persist(&path).map_err(|e| anyhow::anyhow!("cannot replace {}: {}", path.display(), e.error))?;
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Move the sessions of an old store's `agent_sessions` table into `dir`. Files are
/// written (and fsynced) before the table is dropped, so a crash in between only repeats
/// the move; a session already saved as a file is newer and is kept.
pub(super) fn migrate_from_store(db: &Database, dir: &Path) -> Result<()> {
    let txn = db.begin_write().context("cannot start the agent-session migration")?;
    if !txn.list_tables()?.any(|h| h.name() == AGENT_SESSIONS.name()) {
        txn.abort()?;
        return Ok(());
    }
    let files = AgentSessions::new(dir.to_path_buf());
    {
        let table = txn.open_table(AGENT_SESSIONS)?;
        for row in table.iter()? {
            let (k, v) = row?;
            let id = k.value();
            let name = match file_name(id) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(session = %id, "agent session not migrated: {e:#}");
                    continue;
                }
            };
            if !dir.join(name).exists() {
                files.write(id, v.value())?;
            }
        }
    }
    txn.delete_table(AGENT_SESSIONS)?;
    txn.commit().context("cannot commit the agent-session migration")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{file_name, id_of};

    #[test]
    fn file_names_cannot_escape_and_stay_distinct() {
        assert_eq!(file_name("s-1a-2b").unwrap(), "s-1a-2b.json");
        assert_eq!(file_name("../x").unwrap(), "%2E%2E%2Fx.json");
        assert_ne!(file_name("a/b").unwrap(), file_name("a%2Fb").unwrap());
        assert!(file_name("").is_err());
    }

    #[test]
    fn a_file_name_gives_back_its_id_and_nothing_else_gives_one() {
        for id in ["s-1a-2b", "../x", "a/b", "a%2Fb", "日本", "x y"] {
            assert_eq!(id_of(&file_name(id).unwrap()).as_deref(), Some(id));
        }
        for stray in ["x.json.tmp", ".x.json", "%2e.json", "%zz.json", "a.b.json", ".json", "x"] {
            assert_eq!(id_of(stray), None, "{stray}");
        }
    }
}
