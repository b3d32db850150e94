//! read-log-file: stream a log file line by line (constant memory, any size) and return
//! the lines that match a keyword / level / start-time filter, each cited by its 1-based
//! line number (`L123: ...`), plus counts by level, the time span and the most frequent
//! message shapes. Proposes one summarized memory: counts and shapes, never the log itself.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader};

use serde_json::Value;
use skillhost_sdk::{Context, NewMemory, Skill, SkillError, SkillResult, export_skill};

/// Where the workspace is mounted inside the sandbox; relative paths resolve here.
const WORKSPACE: &str = "/workspace";
/// Longest line kept while scanning; the rest of a longer line is skipped (not buffered).
const MAX_LINE_BYTES: usize = 64 * 1024;
/// Longest line shown in the output, in characters.
const SHOW_LINE_CHARS: usize = 400;
/// Budget for the matching-lines section of the output, in bytes.
const OUTPUT_BUDGET: usize = 256 * 1024;
/// Distinct message shapes tracked; later new shapes are counted as "other".
const MAX_SHAPES: usize = 10_000;
/// Longest message shape kept, in characters.
const SHAPE_CHARS: usize = 120;
/// Largest proposed memory, in bytes.
const MAX_MEMORY_BYTES: usize = 1800;
const DEFAULT_MAX_LINES: u64 = 200;
const MAX_MAX_LINES: u64 = 5000;

// ---------------------------------------------------------------------------------------
// Levels and timestamps
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    const ALL: [Level; 4] = [Level::Error, Level::Warn, Level::Info, Level::Debug];

    fn name(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// A level word as written in logs, case-insensitive.
    fn from_word(word: &str) -> Option<Level> {
        let w = word.trim();
        if w.is_empty() || w.len() > 8 {
            return None;
        }
        match w.to_ascii_uppercase().as_str() {
            "ERROR" | "ERR" | "FATAL" | "CRIT" | "CRITICAL" | "ALERT" | "EMERG" | "PANIC" => Some(Level::Error),
            "WARN" | "WARNING" => Some(Level::Warn),
            "INFO" | "NOTICE" => Some(Level::Info),
            "DEBUG" | "DBG" | "TRACE" | "VERBOSE" => Some(Level::Debug),
            _ => None,
        }
    }
}

/// A wall-clock timestamp without time zone; field order gives chronological ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Ts {
    year: u16,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    millis: u16,
}

impl Ts {
    fn display(&self) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        )
    }
}

fn days_in_month(year: u16, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => 29,
        2 => 28,
        _ => 0,
    }
}

fn digits(b: &[u8], at: usize, n: usize) -> Option<u32> {
    let s = b.get(at..at + n)?;
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

/// Parse `YYYY-MM-DD[T ]HH:MM[:SS[.fff]]` at the start of `b`. Returns the timestamp and
/// how many bytes it used. `strict` (for the `since` parameter) demands valid ranges and
/// `-` date separators; log lines may also use `/` and `,` for the fraction.
fn parse_ts_prefix(b: &[u8], strict: bool) -> Option<(Ts, usize)> {
    let year = digits(b, 0, 4)?;
    let sep = *b.get(4)?;
    if sep != b'-' && (strict || sep != b'/') {
        return None;
    }
    let month = digits(b, 5, 2)?;
    if *b.get(7)? != sep {
        return None;
    }
    let day = digits(b, 8, 2)?;
    let mut ts = Ts { year: year as u16, month: month as u8, day: day as u8, hour: 0, minute: 0, second: 0, millis: 0 };
    if !(1..=12).contains(&month) || day == 0 || day as u8 > days_in_month(ts.year, ts.month) {
        return None;
    }
    let mut used = 10;
    match b.get(10) {
        Some(b'T') | Some(b't') | Some(b' ') => {}
        _ => return Some((ts, used)),
    }
    let (Some(hour), Some(b':'), Some(minute)) = (digits(b, 11, 2), b.get(13), digits(b, 14, 2)) else {
        return if strict { None } else { Some((ts, used)) };
    };
    if hour > 23 || minute > 59 {
        return None;
    }
    ts.hour = hour as u8;
    ts.minute = minute as u8;
    used = 16;
    if b.get(16) == Some(&b':') {
        let second = digits(b, 17, 2)?;
        if second > 59 {
            return None;
        }
        ts.second = second as u8;
        used = 19;
        if let Some(&c) = b.get(19)
            && (c == b'.' || (!strict && c == b','))
        {
            let mut n = 0;
            let mut millis = 0u32;
            while let Some(&d) = b.get(20 + n) {
                if !d.is_ascii_digit() {
                    break;
                }
                if n < 3 {
                    millis = millis * 10 + u32::from(d - b'0');
                }
                n += 1;
            }
            if n == 0 || n > 9 {
                return None;
            }
            for _ in n..3 {
                millis *= 10;
            }
            ts.millis = millis as u16;
            used = 20 + n;
        }
    }
    Some((ts, used))
}

/// Validate the `since` parameter strictly; the error message shows accepted forms.
fn parse_since(raw: &str) -> Result<Ts, SkillError> {
    let s = raw.trim();
    let example = "use an ISO time like 2026-03-02T14:00:00, \"2026-03-02 14:00\" or 2026-03-02";
    let bad = |why: &str| SkillError::invalid(format!("since: {why} (got {raw:?}); {example}"));
    let b = s.as_bytes();
    match parse_ts_prefix(b, true) {
        Some((ts, used)) if used == b.len() => Ok(ts),
        Some((_, used)) => {
            let rest = &s[used..];
            if rest.starts_with('Z') || rest.starts_with('+') || rest.starts_with('-') {
                Err(bad("time zones are not supported, log times are compared as written"))
            } else {
                Err(bad("unexpected text after the time"))
            }
        }
        None => {
            if b.len() >= 10 && digits(b, 0, 4).is_some() && digits(b, 5, 2).is_some() && digits(b, 8, 2).is_some() {
                Err(bad(
                    "not a valid date and time (month 01-12, day within the month, hour 00-23, minute and second 00-59)",
                ))
            } else {
                Err(bad("not an ISO date/time"))
            }
        }
    }
}

/// The timestamp a log line starts with (after optional `[` or spaces), if any.
fn line_timestamp(line: &str) -> Option<(Ts, usize)> {
    let trimmed = line.trim_start_matches([' ', '\t', '[']);
    let skipped = line.len() - trimmed.len();
    parse_ts_prefix(trimmed.as_bytes(), false).and_then(|(ts, used)| {
        // A bare date without a time is not a line timestamp.
        if used <= 10 { None } else { Some((ts, skipped + used)) }
    })
}

/// The level of a line and where its message starts. Looks for a bracketed level
/// (`[ERROR]`, `[WARN ]`) near the start, then for a level word among the first tokens
/// after the timestamp (`ERROR`, `W:`, `level=warn`).
fn line_level(line: &str, after_ts: usize) -> Option<(Level, usize)> {
    let head_end = floor_char_boundary(line, 160);
    let head = &line[..head_end];
    let mut from = 0;
    while let Some(open) = head[from..].find('[') {
        let start = from + open + 1;
        let Some(close) = head[start..].find(']') else {
            break;
        };
        if let Some(level) = Level::from_word(&head[start..start + close]) {
            return Some((level, start + close + 1));
        }
        from = start;
    }
    let rest_start = after_ts.min(head.len());
    let rest = &head[rest_start..];
    let mut offset = rest_start;
    for (i, token) in rest.split(' ').enumerate() {
        if i >= 6 {
            break;
        }
        let end = offset + token.len();
        let word = token.trim_end_matches(':');
        let word = word.strip_prefix("level=").or_else(|| word.strip_prefix("lvl=")).unwrap_or(word);
        let word = word.trim_matches(['"', '<', '>', '(', ')']);
        let is_upper = word.chars().all(|c| c.is_ascii_uppercase());
        if (is_upper || token.starts_with("level=") || token.starts_with("lvl="))
            && !word.is_empty()
            && let Some(level) = Level::from_word(word)
        {
            return Some((level, end));
        }
        offset = end + 1;
    }
    None
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

// ---------------------------------------------------------------------------------------
// Text helpers
// ---------------------------------------------------------------------------------------

/// Make a line safe to show: control characters become `\xNN`, long lines are cut.
fn sanitize(line: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(line.len().min(max_chars + 16));
    let mut shown = 0;
    let mut total = 0;
    for c in line.chars() {
        total += 1;
        if shown >= max_chars {
            continue;
        }
        shown += 1;
        if c == '\t' {
            out.push(' ');
        } else if c.is_control() {
            out.push_str(&format!("\\x{:02x}", c as u32 & 0xff));
        } else {
            out.push(c);
        }
    }
    if total > shown {
        out.push_str(&format!(" ...(+{} chars)", total - shown));
    }
    out
}

/// A message with its variable parts normalized, so that repeated events group together:
/// digit runs become `#`, hex literals `0x#`, hash-like words `#`, quoted text `"*"`.
fn message_shape(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len().min(SHAPE_CHARS + 8));
    let chars: Vec<char> = msg.trim().chars().collect();
    let mut i = 0;
    let mut last_space = false;
    while i < chars.len() && out.chars().count() < SHAPE_CHARS {
        let c = chars[i];
        if c == '"'
            && let Some(len) = chars[i + 1..].iter().position(|&q| q == '"')
        {
            out.push_str("\"*\"");
            i += len + 2;
            last_space = false;
            continue;
        }
        if c.is_alphanumeric() {
            let start = i;
            while i < chars.len() && chars[i].is_alphanumeric() {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let all_hex = word.chars().all(|c| c.is_ascii_hexdigit());
            let has_digit = word.chars().any(|c| c.is_ascii_digit());
            let hex_tail = |from: usize| lower.len() > from && lower[from..].chars().all(|c| c.is_ascii_hexdigit());
            if lower.starts_with("0x") && hex_tail(2) {
                out.push_str("0x#");
            } else if lower.starts_with('x') && out.ends_with('\\') && hex_tail(1) {
                out.push_str("x#");
            } else if has_digit && (word.chars().all(|c| c.is_ascii_digit()) || (all_hex && word.len() >= 6)) {
                out.push('#');
            } else if has_digit {
                // An identifier with an index (uart1, i2c1, ch4): keep the name, drop the index.
                let keep = word.trim_end_matches(|c: char| c.is_ascii_digit());
                out.push_str(keep);
                if keep.len() < word.len() {
                    out.push('#');
                }
            } else {
                out.push_str(&word);
            }
            last_space = false;
            continue;
        }
        if c.is_whitespace() {
            if !last_space && !out.is_empty() {
                out.push(' ');
            }
            last_space = true;
        } else if c.is_control() {
            out.push('?');
            last_space = false;
        } else {
            out.push(c);
            last_space = false;
        }
        i += 1;
    }
    // "#.#" (a decimal number) reads better as "#".
    while out.contains("#.#") {
        out = out.replace("#.#", "#");
    }
    out.trim_end().to_string()
}

/// Case-insensitive substring search; ASCII needles avoid allocating per line.
struct KeywordMatcher {
    needle: String,
    ascii: bool,
}

impl KeywordMatcher {
    fn new(keyword: &str) -> Self {
        let ascii = keyword.is_ascii();
        KeywordMatcher { needle: if ascii { keyword.to_ascii_lowercase() } else { keyword.to_lowercase() }, ascii }
    }

    fn matches(&self, line: &str) -> bool {
        if self.ascii {
            let hay = line.as_bytes();
            let needle = self.needle.as_bytes();
            if needle.len() > hay.len() {
                return false;
            }
            hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
        } else {
            line.to_lowercase().contains(&self.needle)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------

struct Params {
    path: String,
    keyword: Option<String>,
    since: Option<(Ts, String)>,
    level: Option<Level>,
    max_lines: usize,
}

fn opt_string(obj: &serde_json::Map<String, Value>, key: &str) -> Result<Option<String>, SkillError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(SkillError::invalid(format!("{key}: expected a string, got {other}"))),
    }
}

fn resolve_path(raw: &str) -> Result<String, SkillError> {
    let p = raw.trim();
    if p.is_empty() {
        return Err(SkillError::invalid("path: empty; pass a file in the workspace such as /workspace/uart.log"));
    }
    if p.contains('\0') {
        return Err(SkillError::invalid("path: contains a NUL byte; pass a path such as /workspace/uart.log"));
    }
    if p.contains('\\') || (p.len() >= 2 && p.as_bytes()[1] == b':') {
        return Err(SkillError::invalid(format!(
            "path: {p:?} looks like a Windows path; pass a guest path such as /workspace/uart.log"
        )));
    }
    if p.starts_with('/') {
        return Ok(p.to_string());
    }
    let rel = p.trim_start_matches("./");
    Ok(format!("{WORKSPACE}/{rel}"))
}

fn parse_params(v: Value) -> Result<Params, SkillError> {
    let Value::Object(obj) = v else {
        return Err(SkillError::invalid("parameters must be a JSON object like {\"path\": \"/workspace/uart.log\"}"));
    };
    let path = match opt_string(&obj, "path")?.or(opt_string(&obj, "file_path")?) {
        Some(p) => resolve_path(&p)?,
        None => {
            return Err(SkillError::invalid(
                "path: required; pass the log file to read, e.g. {\"path\": \"/workspace/uart.log\"}",
            ));
        }
    };
    let keyword = opt_string(&obj, "keyword")?;
    let since = match opt_string(&obj, "since")? {
        Some(s) => Some((parse_since(&s)?, s.trim().to_string())),
        None => None,
    };
    let level = match opt_string(&obj, "level")? {
        Some(s) => Some(Level::from_word(&s).ok_or_else(|| {
            SkillError::invalid(format!("level: {s:?} is not one of ERROR, WARN, INFO, DEBUG (omit it for all levels)"))
        })?),
        None => None,
    };
    let max_lines = match obj.get("max_lines") {
        None | Some(Value::Null) => DEFAULT_MAX_LINES,
        Some(Value::Number(n)) => {
            let v = n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64));
            match v {
                Some(v) if (1..=MAX_MAX_LINES).contains(&v) => v,
                _ => {
                    return Err(SkillError::invalid(format!(
                        "max_lines: {n} is out of range; use an integer from 1 to {MAX_MAX_LINES} (default {DEFAULT_MAX_LINES})"
                    )));
                }
            }
        }
        Some(other) => {
            return Err(SkillError::invalid(format!(
                "max_lines: expected an integer from 1 to {MAX_MAX_LINES}, got {other}"
            )));
        }
    };
    Ok(Params { path, keyword, since, level, max_lines: max_lines as usize })
}

// ---------------------------------------------------------------------------------------
// File access
// ---------------------------------------------------------------------------------------

fn parent_dir(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => WORKSPACE,
    }
}

fn open_error(path: &str, e: &io::Error) -> SkillError {
    let listing = skillhost_sdk::dir_listing(parent_dir(path))
        .map(|l| format!(" Files in {}: {l}.", parent_dir(path)))
        .or_else(|| skillhost_sdk::dir_listing(WORKSPACE).map(|l| format!(" Files in {WORKSPACE}: {l}.")))
        .unwrap_or_default();
    match e.kind() {
        io::ErrorKind::NotFound => SkillError::invalid(format!(
            "path: {path} does not exist inside the sandbox (this skill sees only the workspace, mounted at {WORKSPACE}).{listing}"
        )),
        io::ErrorKind::PermissionDenied => SkillError::failed(format!(
            "cannot open {path}: permission denied; this skill may read only {WORKSPACE}.{listing}"
        )),
        _ => SkillError::failed(format!("cannot open {path}: {e}.{listing}")),
    }
}

/// Read the next line into `buf` (without the line ending), keeping at most
/// MAX_LINE_BYTES of it. Returns None at end of file, Some(truncated) otherwise.
fn next_line<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
    buf.clear();
    let mut truncated = false;
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        any = true;
        let (chunk, consumed, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(buf.len());
        if chunk.len() > room {
            truncated = true;
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        reader.consume(consumed);
        if done {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(truncated))
}

// ---------------------------------------------------------------------------------------
// The scan
// ---------------------------------------------------------------------------------------

struct ShapeStat {
    count: u64,
    first_line: u64,
}

#[derive(Default)]
struct Scan {
    lines: u64,
    bytes: u64,
    matched: u64,
    shown: usize,
    out_lines: String,
    budget_hit: bool,
    /// Matching lines by level: ERROR, WARN, INFO, DEBUG, none.
    match_counts: [u64; 5],
    /// All scanned lines by level.
    all_counts: [u64; 5],
    lines_with_ts: u64,
    first_ts: Option<(Ts, u64)>,
    last_ts: Option<(Ts, u64)>,
    shapes: HashMap<String, ShapeStat>,
    other_shapes: u64,
    /// First matching line per level (line number, short text), for the memory's key line.
    first_by_level: [Option<(u64, String)>; 5],
}

fn level_slot(level: Option<Level>) -> usize {
    level.map(Level::index).unwrap_or(4)
}

/// Scan the whole input; on a read error, returns the number of lines read before it.
fn scan<R: BufRead>(reader: &mut R, p: &Params) -> Result<Scan, (u64, io::Error)> {
    let matcher = p.keyword.as_deref().map(KeywordMatcher::new);
    let mut s = Scan::default();
    let mut buf = Vec::with_capacity(1024);
    // Lines without their own timestamp/level (stack traces, wrapped text) belong to the
    // record above them.
    let mut cur_ts: Option<Ts> = None;
    let mut cur_level: Option<Level> = None;
    while let Some(truncated) = next_line(reader, &mut buf).map_err(|e| (s.lines, e))? {
        s.lines += 1;
        s.bytes += buf.len() as u64 + 1;
        let n = s.lines;
        let text: Cow<'_, str> = String::from_utf8_lossy(&buf);
        let own_ts = line_timestamp(&text);
        let after_ts = own_ts.map(|(_, used)| used).unwrap_or(0);
        let own_level = line_level(&text, after_ts);
        if let Some((ts, _)) = own_ts {
            s.lines_with_ts += 1;
            cur_ts = Some(ts);
            cur_level = own_level.map(|(l, _)| l);
        } else if own_level.is_some() {
            cur_level = own_level.map(|(l, _)| l);
        }
        let level = own_level.map(|(l, _)| l).or(cur_level);
        s.all_counts[level_slot(level)] += 1;

        if let Some((since, _)) = &p.since {
            match cur_ts {
                Some(ts) if ts >= *since => {}
                _ => continue,
            }
        }
        if let Some(want) = p.level
            && level != Some(want)
        {
            continue;
        }
        if let Some(m) = &matcher
            && !m.matches(&text)
        {
            continue;
        }

        s.matched += 1;
        let slot = level_slot(level);
        s.match_counts[slot] += 1;
        if let Some(ts) = cur_ts {
            if s.first_ts.is_none() {
                s.first_ts = Some((ts, n));
            }
            s.last_ts = Some((ts, n));
        }
        if s.first_by_level[slot].is_none() {
            s.first_by_level[slot] = Some((n, sanitize(&text, 120)));
        }

        let msg_start = own_level.map(|(_, end)| end).unwrap_or(after_ts).min(text.len());
        let shape = message_shape(&text[msg_start..]);
        if let Some(st) = s.shapes.get_mut(&shape) {
            st.count += 1;
        } else if s.shapes.len() < MAX_SHAPES {
            s.shapes.insert(shape, ShapeStat { count: 1, first_line: n });
        } else {
            s.other_shapes += 1;
        }

        if s.shown < p.max_lines && !s.budget_hit {
            let mut line = format!("L{n}: {}", sanitize(&text, SHOW_LINE_CHARS));
            if truncated {
                line.push_str(" ...(line longer than 64 KiB, cut while reading)");
            }
            if s.out_lines.len() + line.len() + 1 > OUTPUT_BUDGET {
                s.budget_hit = true;
            } else {
                s.out_lines.push_str(&line);
                s.out_lines.push('\n');
                s.shown += 1;
            }
        }
    }
    Ok(s)
}

fn counts_text(counts: &[u64; 5]) -> String {
    let mut parts: Vec<String> = Level::ALL.iter().map(|l| format!("{} {}", l.name(), counts[l.index()])).collect();
    if counts[4] > 0 {
        parts.push(format!("no level {}", counts[4]));
    }
    parts.join(", ")
}

fn file_stem(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = match name.rfind('.') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    };
    if stem.is_empty() { "log".to_string() } else { stem.to_string() }
}

struct ReadLogFile;

impl Skill for ReadLogFile {
    type Params = Value;

    fn execute(params: Value, ctx: &Context) -> Result<SkillResult, SkillError> {
        let p = parse_params(params)?;
        let started = std::time::Instant::now();

        match std::fs::metadata(&p.path) {
            Ok(m) if m.is_dir() => {
                let listing = skillhost_sdk::dir_listing(&p.path).unwrap_or_default();
                return Err(SkillError::invalid(format!(
                    "path: {} is a directory; pass one log file inside it. Files there: {listing}",
                    p.path
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(open_error(&p.path, &e)),
        }
        let file = File::open(&p.path).map_err(|e| open_error(&p.path, &e))?;
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let s = scan(&mut reader, &p)
            .map_err(|(line, e)| SkillError::failed(format!("reading {} failed after line {line}: {e}", p.path)))?;
        ctx.info(&format!("scanned {} lines ({} bytes) of {}, {} matched", s.lines, s.bytes, p.path, s.matched));

        // Filter description, reused in output and memory.
        let mut filters = Vec::new();
        if let Some(k) = &p.keyword {
            let shown: String = k.chars().take(80).collect();
            let ellipsis = if shown.len() < k.len() { "..." } else { "" };
            filters.push(format!("keyword {shown:?}{ellipsis}"));
        }
        if let Some(l) = p.level {
            filters.push(format!("level {}", l.name()));
        }
        if let Some((_, since)) = &p.since {
            filters.push(format!("since {since}"));
        }
        let filter_text = if filters.is_empty() { "no filter".to_string() } else { filters.join(", ") };

        let mut shapes: Vec<(&String, &ShapeStat)> = s.shapes.iter().collect();
        shapes.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.1.first_line.cmp(&b.1.first_line)));

        // ---- output for the model
        let mut out = String::new();
        out.push_str(&format!("{}: scanned {} lines, {} matched ({filter_text}).\n", p.path, s.lines, s.matched));
        if s.matched == 0 {
            out.push_str("No line matched.");
            if p.since.is_some() && s.lines_with_ts == 0 {
                out.push_str(
                    " No line starts with a timestamp this skill recognizes (YYYY-MM-DD HH:MM:SS), so `since` cannot match; call again without since.",
                );
            } else {
                out.push_str(" Try a broader filter: a shorter or different keyword, no level, or an earlier since.");
            }
            out.push('\n');
        } else {
            let more = s.matched - s.shown as u64;
            if more > 0 {
                let why = if s.budget_hit { "output size budget reached" } else { "max_lines reached" };
                out.push_str(&format!(
                    "Showing the first {} matching lines; {more} more matched ({why}). Narrow with keyword/level/since, or raise max_lines (up to {MAX_MAX_LINES}).\n",
                    s.shown
                ));
            }
            out.push('\n');
            out.push_str(&s.out_lines);
            out.push('\n');
        }
        out.push_str(&format!("Counts by level (matching lines): {}\n", counts_text(&s.match_counts)));
        if p.level.is_some() || p.keyword.is_some() || p.since.is_some() {
            out.push_str(&format!("Counts by level (all scanned lines): {}\n", counts_text(&s.all_counts)));
        }
        match (&s.first_ts, &s.last_ts) {
            (Some((f, fl)), Some((l, ll))) => out.push_str(&format!(
                "Time span of matches: first {} (L{fl}), last {} (L{ll})\n",
                f.display(),
                l.display()
            )),
            _ => out.push_str("Time span of matches: no timestamps seen\n"),
        }
        if !shapes.is_empty() {
            out.push_str("Most frequent messages among matches (digits/hex normalized):\n");
            for (shape, st) in shapes.iter().take(5) {
                out.push_str(&format!("  {}x  {shape}  (first L{})\n", st.count, st.first_line));
            }
            if s.other_shapes > 0 {
                out.push_str(&format!("  ({} more lines with rarer messages not grouped)\n", s.other_shapes));
            }
        }
        out.push_str(&format!("Total lines scanned: {}\n", s.lines));

        // ---- one summarized memory: counts + shapes, never the raw log
        let stem = file_stem(&p.path);
        let mut mem = format!(
            "Log {} ({filter_text}): {} lines scanned, {} matched; levels {}",
            p.path,
            s.lines,
            s.matched,
            counts_text(&s.match_counts)
        );
        if let (Some((f, _)), Some((l, _))) = (&s.first_ts, &s.last_ts) {
            mem.push_str(&format!("; span {} .. {}", f.display(), l.display()));
        }
        if !shapes.is_empty() {
            let top: Vec<String> = shapes
                .iter()
                .take(3)
                .map(|(shape, st)| format!("{}x \"{shape}\" (first L{})", st.count, st.first_line))
                .collect();
            mem.push_str(&format!(". Top messages: {}", top.join("; ")));
        }
        if let Some((line, text)) = s.first_by_level.iter().flatten().next() {
            mem.push_str(&format!(". Key line L{line}: {text}"));
        }
        mem.push('.');
        // Stay well inside the host's default per-memory size (2 KiB).
        if mem.len() > MAX_MEMORY_BYTES {
            let cut = floor_char_boundary(&mem, MAX_MEMORY_BYTES - 3);
            mem.truncate(cut);
            mem.push_str("...");
        }

        let elapsed = started.elapsed().as_millis();
        let fmt_ts = |t: &Option<(Ts, u64)>| t.map(|(ts, _)| ts.display()).unwrap_or_default();
        let mut result = SkillResult::success(out)
            .meta("path", &p.path)
            .meta("lines_scanned", s.lines)
            .meta("lines_matched", s.matched)
            .meta("lines_shown", s.shown)
            .meta("bytes_scanned", s.bytes)
            .meta("first_ts", fmt_ts(&s.first_ts))
            .meta("last_ts", fmt_ts(&s.last_ts))
            .meta("elapsed_ms", elapsed);
        for l in Level::ALL {
            result = result.meta(format!("count_{}", l.name().to_ascii_lowercase()), s.match_counts[l.index()]);
        }
        result = result.meta("count_none", s.match_counts[4]);
        Ok(result.remember(NewMemory::task_result(mem).priority(2).tag("log").tag(stem)))
    }
}

export_skill!(ReadLogFile);

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, p: Params) -> Scan {
        let mut r = io::Cursor::new(text.as_bytes().to_vec());
        scan(&mut r, &p).map_err(|(_, e)| e).unwrap()
    }

    fn params(v: Value) -> Params {
        parse_params(v).unwrap()
    }

    #[test]
    fn since_is_strict() {
        assert!(parse_since("2026-03-02T14:00:00").is_ok());
        assert!(parse_since("2026-03-02 14:00").is_ok());
        assert!(parse_since("2026-03-02").is_ok());
        assert!(parse_since("2026-03-02T14:00:00.250").is_ok());
        for bad in [
            "yesterday",
            "2026-13-01",
            "2026-02-30T00:00",
            "2026-03-02T24:00",
            "2026-03-02T14:00Z",
            "14:00",
            "2026-03-02 14",
            "2026/03/02 14:00",
        ] {
            let e = parse_since(bad).unwrap_err();
            let SkillError::InvalidParams(m) = e else { panic!() };
            assert!(m.contains("2026-03-02T14:00:00"), "{m}");
        }
        assert!(parse_since("2024-02-29").is_ok());
        assert!(parse_since("2025-02-29").is_err());
    }

    #[test]
    fn levels_and_timestamps() {
        let l = "2026-03-02 14:03:12.345 [WARN ] uart1: framing error";
        let (ts, used) = line_timestamp(l).unwrap();
        assert_eq!(ts.display(), "2026-03-02 14:03:12.345");
        let (lvl, end) = line_level(l, used).unwrap();
        assert_eq!(lvl, Level::Warn);
        assert_eq!(&l[end..], " uart1: framing error");
        assert_eq!(line_level("2026-03-02 14:03:12,1 ERROR main: boom", 21).unwrap().0, Level::Error);
        assert_eq!(line_level("ts=1 level=debug msg=x", 0).unwrap().0, Level::Debug);
        assert!(line_level("2026-03-02 14:03:12 uart1: framing error at byte 3", 19).is_none());
    }

    #[test]
    fn shapes_normalize() {
        assert_eq!(message_shape(" uart1: RX overrun (ORE), 41 bytes lost"), "uart#: RX overrun (ORE), # bytes lost");
        assert_eq!(
            message_shape("flash: erase sector 9 @0x080A0000 (128 KiB) start"),
            "flash: erase sector # @0x# (# KiB) start"
        );
        assert_eq!(message_shape("console: garbage \"AT\\x9c\" (2 of 10)"), "console: garbage \"*\" (# of #)");
        assert_eq!(message_shape("latency 8.7 ms build 8f31c0a"), "latency # ms build #");
        assert_eq!(message_shape("bytes \\x9c\\x00 end"), "bytes \\x#\\x# end");
    }

    #[test]
    fn filters_and_line_numbers() {
        let log = "2026-03-02 13:00:00.000 [INFO ] boot\n\
                   2026-03-02 14:00:00.000 [ERROR] uart1: RX overrun, 4 bytes lost\n\
                   \tat driver.c:12\n\
                   2026-03-02 14:00:01.000 [WARN ] dma: ring exhausted\n\
                   2026-03-02 14:00:02.000 [ERROR] uart1: RX Overrun, 9 bytes lost\n";
        let s = run(log, params(serde_json::json!({"path": "x.log", "keyword": "OVERRUN"})));
        assert_eq!(s.lines, 5);
        assert_eq!(s.matched, 2);
        assert!(s.out_lines.starts_with("L2: "));
        assert!(s.out_lines.contains("\nL5: "));
        let s = run(log, params(serde_json::json!({"path": "x.log", "level": "ERROR"})));
        assert_eq!(s.matched, 3, "continuation line inherits ERROR");
        let s = run(log, params(serde_json::json!({"path": "x.log", "since": "2026-03-02 14:00:01"})));
        assert_eq!(s.matched, 2);
        assert_eq!(s.first_ts.unwrap().1, 4);
        let s = run(log, params(serde_json::json!({"path": "x.log", "max_lines": 1})));
        assert_eq!(s.shown, 1);
        assert_eq!(s.matched, 5);
        assert_eq!(s.shapes.get("uart#: RX overrun, # bytes lost").map(|x| x.count), Some(1));
    }

    #[test]
    fn long_and_binary_lines() {
        let mut data = vec![b'a'; MAX_LINE_BYTES * 3];
        data.extend_from_slice(b"\n\xff\xfe\x00 [ERROR] bad bytes\r\nlast");
        let mut r = io::Cursor::new(data);
        let s = scan(&mut r, &params(serde_json::json!({"path": "/workspace/x"}))).map_err(|(_, e)| e).unwrap();
        assert_eq!(s.lines, 3);
        assert!(s.out_lines.contains("cut while reading"));
        assert!(s.out_lines.contains("\\x00"));
        assert_eq!(s.match_counts[0], 2, "the unterminated last line continues the ERROR record");
    }

    #[test]
    fn bad_params() {
        for v in [
            serde_json::json!({}),
            serde_json::json!({"path": ""}),
            serde_json::json!({"path": "a", "max_lines": 0}),
            serde_json::json!({"path": "a", "max_lines": 5001}),
            serde_json::json!({"path": "a", "max_lines": "ten"}),
            serde_json::json!({"path": "a", "level": "LOUD"}),
            serde_json::json!({"path": "a", "keyword": 3}),
            serde_json::json!({"path": "C:\\logs\\a.log"}),
            serde_json::json!([1, 2]),
        ] {
            assert!(matches!(parse_params(v), Err(SkillError::InvalidParams(_))));
        }
        assert_eq!(params(serde_json::json!({"path": "logs/a.log"})).path, "/workspace/logs/a.log");
        assert_eq!(params(serde_json::json!({"path": "a", "keyword": ""})).keyword, None);
    }
}
