//! Daily notes: `memory/daily/YYYY-MM-DD.md`, one Markdown bullet per entry, appended and
//! fsynced, never rewritten. Dates are UTC so that two machines agree on which file a note
//! belongs to. An entry containing `#promote` is flagged for `memory maintain`, which copies
//! it into long-term memory once.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::macros::format_description;
use time::{Date, OffsetDateTime};

pub const PROMOTE_FLAG: &str = "#promote";

/// One bullet of a daily note; `line` is its 1-based line in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DailyEntry {
    pub date: String,
    pub line: u32,
    pub text: String,
}

impl DailyEntry {
    pub fn flagged(&self) -> bool {
        self.text.contains(PROMOTE_FLAG)
    }
}

pub(super) fn date_of(ms: u64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let fmt = format_description!("[year]-[month]-[day]");
    t.date().format(fmt).unwrap_or_else(|_| "1970-01-01".into())
}

fn time_of(ms: u64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let fmt = format_description!("[hour]:[minute]:[second]");
    t.time().format(fmt).unwrap_or_default()
}

/// Parse a `YYYY-MM-DD` date, with an error that says what form is expected.
pub(super) fn parse_date(s: &str) -> Result<Date> {
    Date::parse(s, format_description!("[year]-[month]-[day]"))
        .map_err(|_| anyhow::anyhow!("`{s}` is not a date; use YYYY-MM-DD, e.g. 2026-11-30"))
}

/// Days between two `YYYY-MM-DD` dates (b - a).
pub(super) fn days_between(a: &str, b: &str) -> Result<i64> {
    Ok((parse_date(b)? - parse_date(a)?).whole_days())
}

pub(super) struct DailyNotes {
    dir: PathBuf,
}

impl DailyNotes {
    pub fn new(dir: PathBuf) -> DailyNotes {
        DailyNotes { dir }
    }

    pub fn path(&self, date: &str) -> PathBuf {
        self.dir.join(format!("{date}.md"))
    }

    /// `text` as one entry's line (line breaks become ` / `), or why it cannot be one.
    pub fn entry_text(text: &str) -> Result<String> {
        let text = text.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" / ");
        if text.is_empty() {
            bail!("a daily note needs some text");
        }
        Ok(text)
    }

    /// Append `text` (one entry, see [`DailyNotes::entry_text`]) to the note of the day of
    /// `now_ms`.
    pub fn append(&self, now_ms: u64, text: &str) -> Result<DailyEntry> {
        let text = Self::entry_text(text)?;
        let date = date_of(now_ms);
        std::fs::create_dir_all(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
        let path = self.path(&date);
        let existing = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let mut chunk = String::new();
        if existing.is_empty() {
            chunk.push_str(&format!("# {date}\n\n"));
        } else if !existing.ends_with('\n') {
            chunk.push('\n');
        }
        // Newlines, not `lines()`: a torn last line (no newline) must not be counted twice.
        let line = (existing.matches('\n').count() + chunk.matches('\n').count() + 1) as u32;
        chunk.push_str(&format!("- {} {text}\n", time_of(now_ms)));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        file.write_all(chunk.as_bytes()).with_context(|| format!("cannot append to {}", path.display()))?;
        file.sync_data().with_context(|| format!("cannot sync {}", path.display()))?;
        Ok(DailyEntry { date, line, text: format!("{} {text}", time_of(now_ms)) })
    }

    /// The entries of one day (empty if there is no note that day).
    pub fn read(&self, date: &str) -> Result<Vec<DailyEntry>> {
        parse_date(date)?;
        read_file(&self.path(date), date)
    }

    /// Dates that have a note, oldest first.
    pub fn dates(&self) -> Result<Vec<String>> {
        let mut dates = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(dates),
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", self.dir.display())),
        };
        for entry in entries {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(date) = name.strip_suffix(".md")
                && parse_date(date).is_ok()
            {
                dates.push(date.to_string());
            }
        }
        dates.sort();
        Ok(dates)
    }

    pub fn all(&self) -> Result<Vec<DailyEntry>> {
        let mut out = Vec::new();
        for date in self.dates()? {
            out.extend(read_file(&self.path(&date), &date)?);
        }
        Ok(out)
    }

    /// Changes whenever a note is added, removed or changes size: the index stamp uses it.
    pub fn fingerprint(&self) -> Result<String> {
        let mut h = Sha256::new();
        for date in self.dates()? {
            let len = std::fs::metadata(self.path(&date)).map(|m| m.len()).unwrap_or(0);
            h.update(format!("{date}:{len};"));
        }
        Ok(hex::encode(&h.finalize()[..8]))
    }
}

fn read_file(path: &Path, date: &str) -> Result<Vec<DailyEntry>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let body = l.strip_prefix("- ")?.trim();
            (!body.is_empty()).then(|| DailyEntry {
                date: date.to_string(),
                line: i as u32 + 1,
                text: body.to_string(),
            })
        })
        .collect())
}
