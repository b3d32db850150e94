//! query-issue-kb: rank the entries of a JSON knowledge base of past incidents by keyword
//! relevance to a query. BM25-style scoring with field weights (tags, title and symptom
//! count more than cause and fix), IDF over the knowledge base, ASCII words with light
//! stemming, and character bigrams for CJK text.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use skillhost_sdk::{Context, Skill, SkillError, SkillResult, export_skill};

const WORKSPACE: &str = "/workspace";
const DEFAULT_KB: &str = "/workspace/kb.json";
const DEFAULT_TOP: u64 = 3;
const MAX_TOP: u64 = 20;
/// Largest knowledge base read, in bytes.
const MAX_KB_BYTES: u64 = 32 * 1024 * 1024;
/// Longest field shown in the output, in characters.
const SHOW_FIELD_CHARS: usize = 700;
const MAX_QUERY_CHARS: usize = 2000;

const K1: f64 = 1.2;

/// Searchable fields, their weights and their BM25 length normalization `b`: what an
/// incident looks like ranks above how it was explained or fixed; short fields (id, tags,
/// title) are barely length-normalized so a descriptive title is not penalized.
#[derive(Clone, Copy)]
enum Field {
    Id,
    Tags,
    Title,
    Symptom,
    Cause,
    Fix,
}

const FIELDS: [(Field, f64, f64); 6] = [
    (Field::Id, 3.0, 0.0),
    (Field::Tags, 3.0, 0.3),
    (Field::Title, 2.5, 0.3),
    (Field::Symptom, 2.0, 0.75),
    (Field::Cause, 1.0, 0.75),
    (Field::Fix, 1.0, 0.75),
];

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "did", "do", "does", "for", "from", "has", "have", "how",
    "i", "in", "into", "is", "it", "its", "my", "of", "on", "or", "our", "so", "that", "the", "their", "then", "there",
    "these", "this", "to", "was", "we", "were", "what", "when", "where", "which", "while", "who", "why", "will",
    "with", "you", "your", "after", "before", "during", "about", "any", "some", "all", "also", "get", "got", "issue",
    "problem",
];

// ---------------------------------------------------------------------------------------
// Knowledge base
// ---------------------------------------------------------------------------------------

fn text_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => String::new(),
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join("; "),
        Value::Object(_) => return Err(serde::de::Error::custom("expected text, found an object")),
    })
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tag_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Vec::new(),
        Value::String(s) => s.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect(),
        Value::Array(items) => items.iter().map(value_text).collect(),
        _ => return Err(serde::de::Error::custom("tags: expected a list of strings")),
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Entry {
    #[serde(deserialize_with = "text_or_number")]
    id: String,
    #[serde(deserialize_with = "text_or_number")]
    title: String,
    #[serde(deserialize_with = "text_or_number")]
    symptom: String,
    #[serde(deserialize_with = "text_or_number")]
    cause: String,
    #[serde(deserialize_with = "text_or_number")]
    fix: String,
    #[serde(deserialize_with = "tag_list")]
    tags: Vec<String>,
}

impl Entry {
    fn field(&self, f: Field) -> String {
        match f {
            Field::Id => self.id.clone(),
            Field::Tags => self.tags.join(" "),
            Field::Title => self.title.clone(),
            Field::Symptom => self.symptom.clone(),
            Field::Cause => self.cause.clone(),
            Field::Fix => self.fix.clone(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // Extensions B-F, compatibility supplement
}

/// Light stemming so that plurals and simple inflections meet: "overruns" -> "overrun",
/// "errors" -> "error", "framing" stays (too short a stem would over-merge).
fn stem(word: &str) -> String {
    let w = word;
    if w.len() > 4 && w.ends_with("ies") {
        return format!("{}y", &w[..w.len() - 3]);
    }
    if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        return w[..w.len() - 1].to_string();
    }
    w.to_string()
}

fn push_word(word: &str, out: &mut Vec<String>) {
    if word.is_empty() {
        return;
    }
    let lower = word.to_lowercase();
    if STOP_WORDS.contains(&lower.as_str()) {
        return;
    }
    if lower.chars().count() < 2 && !lower.chars().all(|c| c.is_ascii_digit()) {
        return;
    }
    let stemmed = stem(&lower);
    // uart1 / ch4 / spi2: also index the name without its instance number.
    let base = stemmed.trim_end_matches(|c: char| c.is_ascii_digit());
    if base.len() >= 3 && base.len() < stemmed.len() && base.chars().any(|c| c.is_alphabetic()) {
        out.push(base.to_string());
    }
    out.push(stemmed);
}

/// Lowercase words (letters and digits) minus stop words, plus CJK character bigrams.
fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_cjk = |cjk: &mut Vec<char>, out: &mut Vec<String>| {
        if cjk.len() == 1 {
            out.push(cjk[0].to_string());
        } else {
            for pair in cjk.windows(2) {
                out.push(pair.iter().collect());
            }
        }
        cjk.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            push_word(&word, &mut out);
            word.clear();
            cjk.push(c);
        } else if c.is_alphanumeric() {
            if !cjk.is_empty() {
                flush_cjk(&mut cjk, &mut out);
            }
            word.push(c);
        } else {
            push_word(&word, &mut out);
            word.clear();
            if !cjk.is_empty() {
                flush_cjk(&mut cjk, &mut out);
            }
        }
    }
    push_word(&word, &mut out);
    if !cjk.is_empty() {
        flush_cjk(&mut cjk, &mut out);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Index and ranking
// ---------------------------------------------------------------------------------------

struct DocFields {
    /// Per field: term frequencies and length in tokens.
    fields: Vec<(HashMap<String, u32>, usize)>,
}

struct Ranked {
    index: usize,
    score: f64,
    matched: Vec<String>,
}

fn rank(entries: &[Entry], query_terms: &[String]) -> Vec<Ranked> {
    let docs: Vec<DocFields> = entries
        .iter()
        .map(|e| DocFields {
            fields: FIELDS
                .iter()
                .map(|(f, _, _)| {
                    let toks = tokenize(&e.field(*f));
                    let len = toks.len();
                    let mut tf: HashMap<String, u32> = HashMap::new();
                    for t in toks {
                        *tf.entry(t).or_insert(0) += 1;
                    }
                    (tf, len)
                })
                .collect(),
        })
        .collect();
    let n = docs.len() as f64;
    let avg_len: Vec<f64> = (0..FIELDS.len())
        .map(|i| {
            let total: usize = docs.iter().map(|d| d.fields[i].1).sum();
            (total as f64 / n.max(1.0)).max(1.0)
        })
        .collect();
    let mut unique: Vec<&String> = Vec::new();
    let mut seen = HashSet::new();
    for t in query_terms {
        if seen.insert(t) {
            unique.push(t);
        }
    }
    let idf: Vec<f64> = unique
        .iter()
        .map(|t| {
            let df = docs.iter().filter(|d| d.fields.iter().any(|(tf, _)| tf.contains_key(*t))).count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();

    let mut ranked = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let mut score = 0.0;
        let mut matched = Vec::new();
        for (ti, t) in unique.iter().enumerate() {
            let mut term_score = 0.0;
            for (fi, (_, weight, b)) in FIELDS.iter().enumerate() {
                let (tf, len) = &d.fields[fi];
                if let Some(&c) = tf.get(*t) {
                    let c = f64::from(c);
                    let norm = 1.0 - b + b * (*len as f64) / avg_len[fi];
                    term_score += weight * c * (K1 + 1.0) / (c + K1 * norm);
                }
            }
            if term_score > 0.0 {
                score += idf[ti] * term_score;
                matched.push((*t).clone());
            }
        }
        if score > 0.0 {
            // Entries that match more of the query's distinct terms rank higher.
            let coverage = matched.len() as f64 / unique.len().max(1) as f64;
            score *= 0.5 + 0.5 * coverage;
            ranked.push(Ranked { index: i, score, matched });
        }
    }
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    ranked
}

// ---------------------------------------------------------------------------------------
// Parameters and I/O
// ---------------------------------------------------------------------------------------

struct Params {
    query: String,
    kb_path: String,
    top: usize,
}

fn resolve_path(raw: &str) -> Result<String, SkillError> {
    let p = raw.trim();
    if p.is_empty() {
        return Ok(DEFAULT_KB.to_string());
    }
    if p.contains('\0') || p.contains('\\') || (p.len() >= 2 && p.as_bytes()[1] == b':') {
        return Err(SkillError::invalid(format!(
            "kb_path: {p:?} is not a sandbox path; pass a guest path such as {DEFAULT_KB}"
        )));
    }
    if p.starts_with('/') {
        return Ok(p.to_string());
    }
    Ok(format!("{WORKSPACE}/{}", p.trim_start_matches("./")))
}

fn parse_params(v: Value) -> Result<Params, SkillError> {
    let Value::Object(obj) = v else {
        return Err(SkillError::invalid("parameters must be a JSON object like {\"query\": \"RX overrun DMA\"}"));
    };
    let query = match obj.get("query").or_else(|| obj.get("keyword")) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(SkillError::invalid(
                "query: required; describe the symptom in a few keywords, e.g. {\"query\": \"uart RX overrun garbage console\"}",
            ));
        }
        Some(other) => {
            return Err(SkillError::invalid(format!("query: expected a string, got {other}")));
        }
    };
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(SkillError::invalid(format!(
            "query: {} characters is too long; use a few keywords (at most {MAX_QUERY_CHARS} characters)",
            query.chars().count()
        )));
    }
    let kb_path = match obj.get("kb_path") {
        None | Some(Value::Null) => DEFAULT_KB.to_string(),
        Some(Value::String(s)) => resolve_path(s)?,
        Some(other) => {
            return Err(SkillError::invalid(format!("kb_path: expected a string, got {other}")));
        }
    };
    let top = match obj.get("top") {
        None | Some(Value::Null) => DEFAULT_TOP,
        Some(Value::Number(n)) => {
            match n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64)) {
                Some(v) if (1..=MAX_TOP).contains(&v) => v,
                _ => {
                    return Err(SkillError::invalid(format!(
                        "top: {n} is out of range; use an integer from 1 to {MAX_TOP} (default {DEFAULT_TOP})"
                    )));
                }
            }
        }
        Some(other) => {
            return Err(SkillError::invalid(format!("top: expected an integer from 1 to {MAX_TOP}, got {other}")));
        }
    };
    Ok(Params { query, kb_path, top: top as usize })
}

fn load_kb(path: &str) -> Result<Vec<Entry>, SkillError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        let dir = match path.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &path[..i],
        };
        let listing = skillhost_sdk::dir_listing(dir)
            .map(|l| format!(" Files in {dir}: {l}."))
            .or_else(|| skillhost_sdk::dir_listing(WORKSPACE).map(|l| format!(" Files in {WORKSPACE}: {l}.")))
            .unwrap_or_default();
        if e.kind() == std::io::ErrorKind::NotFound {
            SkillError::invalid(format!(
                "kb_path: {path} does not exist inside the sandbox (the workspace is mounted at {WORKSPACE}).{listing}"
            ))
        } else {
            SkillError::failed(format!("cannot open knowledge base {path}: {e}.{listing}"))
        }
    })?;
    if meta.is_dir() {
        return Err(SkillError::invalid(format!(
            "kb_path: {path} is a directory; pass the JSON file, e.g. {DEFAULT_KB}"
        )));
    }
    if meta.len() > MAX_KB_BYTES {
        return Err(SkillError::failed(format!(
            "knowledge base {path} is {} MiB; this skill reads at most {} MiB",
            meta.len() / (1024 * 1024),
            MAX_KB_BYTES / (1024 * 1024)
        )));
    }
    let text =
        std::fs::read(path).map_err(|e| SkillError::failed(format!("cannot read knowledge base {path}: {e}")))?;
    let text = String::from_utf8_lossy(&text);
    let text = text.trim_start_matches('\u{feff}');
    serde_json::from_str::<Vec<Entry>>(text).map_err(|e| {
        SkillError::failed(format!(
            "knowledge base {path} is not a JSON array of {{id, title, symptom, cause, fix, tags}} objects: {e}"
        ))
    })
}

fn clip(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

struct QueryIssueKb;

impl Skill for QueryIssueKb {
    type Params = Value;

    fn execute(params: Value, ctx: &Context) -> Result<SkillResult, SkillError> {
        let p = parse_params(params)?;
        let terms = tokenize(&p.query);
        if terms.is_empty() {
            return Err(SkillError::invalid(format!(
                "query: {:?} has no searchable words once stop words are dropped; use specific terms such as \"RX overrun DMA flash\"",
                p.query
            )));
        }
        let entries = load_kb(&p.kb_path)?;
        ctx.info(&format!("ranking {} knowledge-base entries for {:?}", entries.len(), p.query));

        if entries.is_empty() {
            return Ok(SkillResult::success(format!(
                "The knowledge base {} is empty: nothing to match {:?} against.",
                p.kb_path, p.query
            ))
            .meta("hits", 0)
            .meta("matches", 0)
            .meta("kb_entries", 0)
            .meta("kb_path", &p.kb_path));
        }

        let ranked = rank(&entries, &terms);
        if ranked.is_empty() {
            let mut tag_counts: HashMap<String, usize> = HashMap::new();
            for e in &entries {
                for t in &e.tags {
                    *tag_counts.entry(t.to_lowercase()).or_insert(0) += 1;
                }
            }
            let mut tags: Vec<(String, usize)> = tag_counts.into_iter().collect();
            tags.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let tag_list: Vec<String> = tags.into_iter().take(20).map(|(t, _)| t).collect();
            let mut out = format!(
                "No knowledge-base entry matched {:?} ({} entries searched in {}).\n\
                 Try other keywords: the component (uart, dma, flash, i2c, clock), the symptom as the log words it \
                 (overrun, framing error, timeout, garbage), or the error code.",
                p.query,
                entries.len(),
                p.kb_path
            );
            if !tag_list.is_empty() {
                out.push_str(&format!("\nTags used in this knowledge base: {}.", tag_list.join(", ")));
            }
            return Ok(SkillResult::success(out)
                .meta("hits", 0)
                .meta("matches", 0)
                .meta("kb_entries", entries.len())
                .meta("kb_path", &p.kb_path));
        }

        let shown: Vec<&Ranked> = ranked.iter().take(p.top).collect();
        let mut out = format!(
            "{} of {} knowledge-base entries match {:?} ({}); showing the best {}:\n",
            ranked.len(),
            entries.len(),
            p.query,
            p.kb_path,
            shown.len()
        );
        for (rank_no, r) in shown.iter().enumerate() {
            let e = &entries[r.index];
            let id = if e.id.trim().is_empty() { format!("#{}", r.index + 1) } else { e.id.trim().to_string() };
            out.push_str(&format!(
                "\n{}. [{id}] {} (score {:.2}; matched: {})\n",
                rank_no + 1,
                clip(&e.title, 200),
                r.score,
                r.matched.join(", ")
            ));
            for (label, text) in [("Symptom", &e.symptom), ("Cause", &e.cause), ("Fix", &e.fix)] {
                if !text.trim().is_empty() {
                    out.push_str(&format!("   {label}: {}\n", clip(text, SHOW_FIELD_CHARS)));
                }
            }
            if !e.tags.is_empty() {
                out.push_str(&format!("   Tags: {}\n", e.tags.join(", ")));
            }
        }
        out.push_str(
            "\nA knowledge-base entry is a past incident, not proof: confirm its symptom in the log (cite L<n> lines) before concluding.\n",
        );
        let ids: Vec<String> = shown.iter().map(|r| entries[r.index].id.trim().to_string()).collect();
        Ok(SkillResult::success(out)
            .meta("hits", shown.len())
            .meta("matches", ranked.len())
            .meta("kb_entries", entries.len())
            .meta("top_id", ids.first().cloned().unwrap_or_default())
            .meta("top_score", format!("{:.3}", shown[0].score))
            .meta("ids", ids.join(","))
            .meta("kb_path", &p.kb_path))
    }
}

export_skill!(QueryIssueKb);

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, title: &str, symptom: &str, cause: &str, tags: &[&str]) -> Entry {
        Entry {
            id: id.into(),
            title: title.into(),
            symptom: symptom.into(),
            cause: cause.into(),
            fix: String::new(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn tokenizes_words_and_cjk() {
        assert_eq!(tokenize("The RX overruns on uart1!"), vec!["rx", "overrun", "uart", "uart1"]);
        assert_eq!(tokenize("串口乱码 DMA"), vec!["串口", "口乱", "乱码", "dma"]);
        assert_eq!(tokenize("乱"), vec!["乱"]);
        assert!(tokenize("why is the of").is_empty());
    }

    #[test]
    fn ranks_by_field_weight_and_idf() {
        let kb = vec![
            entry("A", "I2C bus stuck", "sensor NACK", "slave holds SDA", &["i2c"]),
            entry(
                "B",
                "RX overrun during flash erase",
                "uart overrun, garbage",
                "dma ring too small",
                &["uart", "dma", "串口"],
            ),
            entry("C", "Baud mismatch", "garbage on console", "wrong clock; overrun unlikely", &["uart", "baud"]),
        ];
        let r = rank(&kb, &tokenize("uart RX overrun dma"));
        assert_eq!(r[0].index, 1);
        assert_eq!(r[1].index, 2);
        assert!(r.iter().all(|x| x.index != 0));
        let r = rank(&kb, &tokenize("串口乱码"));
        assert_eq!(r[0].index, 1);
        assert!(rank(&kb, &tokenize("bluetooth pairing")).is_empty());
    }

    #[test]
    fn kb_parsing_is_lenient_about_fields() {
        let v: Vec<Entry> = serde_json::from_str(r#"[{"id": 7, "title": "t", "tags": "a, b"}, {}]"#).unwrap();
        assert_eq!(v[0].id, "7");
        assert_eq!(v[0].tags, vec!["a", "b"]);
        assert!(serde_json::from_str::<Vec<Entry>>(r#"{"id": 1}"#).is_err());
        assert!(serde_json::from_str::<Vec<Entry>>(r#"[{"title": {"x": 1}}]"#).is_err());
    }

    #[test]
    fn params() {
        let p = parse_params(serde_json::json!({"query": " overrun "})).unwrap();
        assert_eq!((p.query.as_str(), p.kb_path.as_str(), p.top), ("overrun", DEFAULT_KB, 3));
        let p = parse_params(serde_json::json!({"query": "x", "kb_path": "kb/issues.json", "top": 20})).unwrap();
        assert_eq!(p.kb_path, "/workspace/kb/issues.json");
        for v in [
            serde_json::json!({}),
            serde_json::json!({"query": ""}),
            serde_json::json!({"query": 5}),
            serde_json::json!({"query": "x", "top": 0}),
            serde_json::json!({"query": "x", "top": 21}),
            serde_json::json!({"query": "x", "top": "3"}),
            serde_json::json!({"query": "x", "kb_path": 1}),
        ] {
            assert!(matches!(parse_params(v), Err(SkillError::InvalidParams(_))));
        }
    }
}
