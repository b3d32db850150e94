//! The chain itself: how a line is hashed and written after the previous one (its
//! canonical form is `canonical`'s), and how a log is walked and its end read back.

use std::fs::File;
use std::io::BufRead;
use std::os::unix::fs::FileExt as _;

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::canonical::{CanonicalEntry, write_canonical_object};
use super::{ChainBreak, EntryKind, GENESIS, MAX_LINE_BYTES, Problem, RESERVED, TornTail};

/// The hash a line records: sha256 over `prev` and the canonical line without `hash`.
pub(super) fn line_hash(prev: &str, without_hash: &Map<String, Value>) -> String {
    let mut text = Vec::new();
    write_canonical_object(without_hash, &mut text, |_| false);
    hash_of(prev, &text)
}

pub(super) fn hash_of(prev: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(canonical);
    hex::encode(h.finalize())
}

pub(super) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let now = now.replace_millisecond(now.millisecond()).unwrap_or(now);
    now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// An entry an append takes: a `kind` of `call` or `step`, a `session`, no field the log sets.
pub(super) fn check_entry(entry: &CanonicalEntry) -> Result<()> {
    match entry.get_json("kind").map(serde_json::from_slice::<EntryKind>) {
        Some(Ok(EntryKind::Call | EntryKind::Step | EntryKind::Install)) => {}
        Some(Ok(EntryKind::Seal)) => bail!("`seal` entries are written by `skillhost audit seal` only"),
        _ => bail!("an audit entry needs `kind`: \"call\", \"step\" or \"install\""),
    }
    // A non-empty JSON string: more than its two quotes.
    if !matches!(entry.get_json("session"), Some(json) if json.len() > 2 && json[0] == b'"') {
        bail!("an audit entry needs a non-empty `session`");
    }
    if let Some(k) = RESERVED.iter().find(|k| entry.contains_key(k)) {
        bail!("`{k}` is set by the audit log itself; leave it out of the entry");
    }
    Ok(())
}

/// `entry` as line `seq` after `prev`: the canonical JSON with `seq`, `ts`, `prev` and
/// `hash`, newline-terminated, and its hash.
pub(super) fn chained_line(mut entry: CanonicalEntry, seq: u64, prev: &str) -> (String, String) {
    entry.insert("seq", seq);
    entry.insert("ts", now_rfc3339());
    entry.insert("prev", prev);
    // One canonical text serves both: hashed without `hash`, then `hash` spliced in where
    // its key sorts (the same bytes as writing the whole entry with it).
    let mut text = Vec::with_capacity(1024);
    let at = entry.write(&mut text, |k| k > &b"hash"[..]);
    let hash = hash_of(prev, &text);
    let field = format!("\"hash\":\"{hash}\"");
    let spliced = if text[at] == b'}' {
        // `hash` sorts last: after a comma unless the object was empty.
        if at > 1 { format!(",{field}") } else { field }
    } else {
        format!("{field},")
    };
    text.splice(at..at, spliced.into_bytes());
    text.push(b'\n');
    (String::from_utf8(text).unwrap_or_default(), hash)
}

/// How far a log verifies.
pub(super) struct Walk {
    pub(super) entries: u64,
    pub(super) head: String,
    pub(super) torn_tail: Option<TornTail>,
    pub(super) broken: Option<ChainBreak>,
    /// The first line, when it is a seal entry.
    pub(super) first_seal: Option<Map<String, Value>>,
}

pub(super) fn walk(mut reader: impl BufRead) -> std::io::Result<Walk> {
    let mut buf = Vec::new();
    let mut w = Walk { entries: 0, head: GENESIS.to_string(), torn_tail: None, broken: None, first_seal: None };
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(w);
        }
        line_no += 1;
        let Some(content) = buf.strip_suffix(b"\n") else {
            w.torn_tail = Some(TornTail { line: line_no, bytes: n as u64 });
            return Ok(w);
        };
        match check_line(line_no, content, &w.head) {
            Ok(hash) => {
                if line_no == 1
                    && let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(content)
                    && m.get("kind").and_then(Value::as_str) == Some("seal")
                {
                    w.first_seal = Some(m);
                }
                w.head = hash;
                w.entries = line_no;
            }
            Err(b) => {
                w.broken = Some(b);
                return Ok(w);
            }
        }
    }
}

/// Check one complete line against the previous line's hash; its own hash on success.
pub(super) fn check_line(n: u64, content: &[u8], prev: &str) -> Result<String, ChainBreak> {
    let broken = |problem, message: String| ChainBreak { line: n, problem, message: format!("line {n} {message}") };
    let mut entry = match serde_json::from_slice::<Value>(content) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(broken(Problem::Unparseable, "is not a JSON object".into())),
        Err(e) => return Err(broken(Problem::Unparseable, format!("is not valid JSON ({e})"))),
    };
    let Some(Value::String(recorded)) = entry.remove("hash") else {
        return Err(broken(Problem::Unparseable, "has no `hash` field".into()));
    };
    let Some(line_prev) = entry.get("prev").and_then(Value::as_str).map(str::to_string) else {
        return Err(broken(Problem::Unparseable, "has no `prev` field".into()));
    };
    let actual = line_hash(&line_prev, &entry);
    if actual != recorded {
        return Err(broken(
            Problem::HashMismatch,
            format!(
                "was modified after it was written: its content hashes to {}…, but it records {}…",
                short(&actual),
                short(&recorded)
            ),
        ));
    }
    if line_prev != prev {
        let seq = entry.get("seq").map_or("none".to_string(), Value::to_string);
        let message = if n == 1 {
            format!(
                "(seq {seq}) should start the chain (prev of 64 zeros) but records prev {}…: lines before it were deleted",
                short(&line_prev)
            )
        } else {
            format!(
                "(seq {seq}) does not follow line {}: it records prev {}…, but line {} hashes to {}…; a line was deleted, inserted or reordered here",
                n - 1,
                short(&line_prev),
                n - 1,
                short(prev)
            )
        };
        return Err(broken(Problem::PrevMismatch, message));
    }
    match entry.get("seq").and_then(Value::as_u64) {
        Some(s) if s == n => Ok(recorded),
        other => Err(broken(
            Problem::SeqGap,
            format!("has seq {}, expected {n}: lines were renumbered", other.map_or("none".into(), |s| s.to_string())),
        )),
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The end of the log as an append needs it.
pub(super) struct Tail {
    /// `hash` and `seq` of the last complete line (GENESIS and 0 when there is none).
    pub(super) hash: String,
    pub(super) seq: u64,
    /// Length of the file without a torn last line.
    pub(super) complete_len: u64,
    pub(super) torn_bytes: u64,
}

/// Read the last complete line from the end of the file, without reading the rest.
pub(super) fn last_entry(file: &File) -> Result<Tail> {
    let len = file.metadata()?.len();
    let mut tail = Tail { hash: GENESIS.to_string(), seq: 0, complete_len: len, torn_bytes: 0 };
    if len == 0 {
        return Ok(tail);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] != b'\n' {
        tail.complete_len = last_newline_before(file, len)?.map_or(0, |p| p + 1);
        tail.torn_bytes = len - tail.complete_len;
    }
    if tail.complete_len == 0 {
        return Ok(tail);
    }
    let end = tail.complete_len - 1; // the newline ending the last complete line
    let start = last_newline_before(file, end)?.map_or(0, |p| p + 1);
    if end - start > MAX_LINE_BYTES {
        bail!(
            "its last line is {} bytes, more than any entry; nothing more can be chained to it. Run `skillhost audit verify` to find the damage",
            end - start
        );
    }
    let mut line = vec![0u8; (end - start) as usize];
    file.read_exact_at(&mut line, start)?;
    let entry: Map<String, Value> = serde_json::from_slice(&line).map_err(|e| {
        anyhow!(
            "its last line is not a valid audit entry ({e}); nothing more can be chained to it. Run `skillhost audit verify` to find the damage"
        )
    })?;
    let (Some(hash), Some(seq)) = (entry.get("hash").and_then(Value::as_str), entry.get("seq").and_then(Value::as_u64))
    else {
        bail!("its last line has no `hash` or `seq`; run `skillhost audit verify` to find the damage");
    };
    tail.hash = hash.to_string();
    tail.seq = seq;
    Ok(tail)
}

/// Offset of the last `\n` before `end`, reading backwards in chunks.
pub(super) fn last_newline_before(file: &File, end: u64) -> std::io::Result<Option<u64>> {
    const CHUNK: u64 = 8192;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hi = end;
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK);
        let chunk = &mut buf[..(hi - lo) as usize];
        file.read_exact_at(chunk, lo)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(Some(lo + i as u64));
        }
        hi = lo;
    }
    Ok(None)
}
