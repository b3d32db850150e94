//! Reading the log back: every entry that parses, across sealed segments, and the
//! sessions `skillhost audit list` and `show` print.

use std::path::PathBuf;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value};

use super::AuditLog;

/// Every readable entry of the log, in order.
#[derive(Debug, Clone, Default)]
pub struct AuditRead {
    pub entries: Vec<Map<String, Value>>,
    /// Line numbers that are not JSON objects (`skillhost audit verify` says why).
    pub unreadable: Vec<u64>,
}

/// One session as `skillhost audit list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub session: String,
    pub first_ts: String,
    pub last_ts: String,
    pub entries: usize,
    /// Skills called, in order of first call.
    pub skills: Vec<String>,
    /// Status of the session's last entry.
    pub final_status: String,
    pub denials: usize,
}

pub(super) fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

impl AuditRead {
    /// Sessions in order of their first entry.
    pub fn sessions(&self) -> Vec<SessionSummary> {
        let mut out: Vec<SessionSummary> = Vec::new();
        for e in &self.entries {
            let session = str_field(e, "session");
            let idx = match out.iter().position(|s| s.session == session) {
                Some(i) => i,
                None => {
                    out.push(SessionSummary {
                        session: session.to_string(),
                        first_ts: str_field(e, "ts").to_string(),
                        last_ts: String::new(),
                        entries: 0,
                        skills: Vec::new(),
                        final_status: String::new(),
                        denials: 0,
                    });
                    out.len() - 1
                }
            };
            let s = &mut out[idx];
            s.entries += 1;
            s.last_ts = str_field(e, "ts").to_string();
            s.final_status = str_field(e, "status").to_string();
            s.denials += e.get("denials").and_then(Value::as_array).map_or(0, Vec::len);
            let skill = str_field(e, "skill");
            if !skill.is_empty() && !s.skills.iter().any(|k| k == skill) {
                s.skills.push(skill.to_string());
            }
        }
        out
    }

    /// The entries of `session`, in order.
    pub fn session(&self, session: &str) -> Vec<Map<String, Value>> {
        self.entries.iter().filter(|e| str_field(e, "session") == session).cloned().collect()
    }
}

impl AuditLog {
    /// Every entry that parses, in order, and the numbers of lines that do not. Does not
    /// verify the chain (see [`AuditLog::verify`]).
    pub fn read(&self) -> Result<AuditRead> {
        if let Some(pg) = &self.pg {
            return pg.read();
        }
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(AuditRead::default()),
            Err(e) => return Err(anyhow!("cannot read the audit log {}: {e}", self.path.display())),
        };
        let mut out = AuditRead::default();
        parse_lines(&text, &mut out.entries, Some(&mut out.unreadable));
        Ok(out)
    }

    /// Like [`AuditLog::read`], with the readable entries of sealed segments first (oldest
    /// first): the whole history, across seals.
    pub fn read_history(&self) -> Result<AuditRead> {
        if self.pg.is_some() {
            return self.read(); // never sealed
        }
        let mut sealed: Vec<PathBuf> = std::fs::read_dir(self.sealed_dir())
            .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "jsonl")).collect())
            .unwrap_or_default();
        sealed.sort();
        let mut entries = Vec::new();
        for path in sealed {
            let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            parse_lines(&text, &mut entries, None);
        }
        let current = self.read()?;
        entries.extend(current.entries);
        Ok(AuditRead { entries, unreadable: current.unreadable })
    }

    /// Per session: first and last time, entries, skills called, final status (sealed
    /// segments included).
    pub fn list(&self) -> Result<Vec<SessionSummary>> {
        Ok(self.read_history()?.sessions())
    }

    /// The entries of `session`, in order (sealed segments included); an error when it has none.
    pub fn show(&self, session: &str) -> Result<Vec<Map<String, Value>>> {
        let entries = match &self.pg {
            Some(pg) => pg.session(session)?,
            None => self.read_history()?.session(session),
        };
        if entries.is_empty() {
            bail!("no audit entries for session `{session}`; `skillhost audit list` shows the sessions");
        }
        Ok(entries)
    }
}

fn parse_lines(text: &[u8], entries: &mut Vec<Map<String, Value>>, mut unreadable: Option<&mut Vec<u64>>) {
    for (i, line) in text.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(m)) => entries.push(m),
            _ => {
                if let Some(u) = unreadable.as_deref_mut() {
                    u.push(i as u64 + 1)
                }
            }
        }
    }
}
