//! Findings as write-analysis-snapshot and generate-report exchange them: a claim plus
//! evidence citations (`L1243`, `L1243: RX overrun`) pointing at log lines.
//!
//! The snapshot one skill stores in session memory is the other's input, so what the two
//! must agree on lives here, once: the citation rule, the stored JSON shape, the key rule
//! and the limits. Error wording stays in each skill; functions here say *why* something
//! was rejected and let the caller phrase it.

use serde_json::{Map, Value, json};

/// Session key of the snapshot when the caller names none; both skills must default alike.
pub const DEFAULT_KEY: &str = "findings";
/// Longest snapshot key, in characters (see [`is_valid_key`]).
pub const MAX_KEY_CHARS: usize = 64;
/// Longest claim, in characters. One limit for saving and reporting, so a saved claim is reportable.
pub const MAX_CLAIM_CHARS: usize = 2000;
/// Most evidence entries per finding, for the same reason.
pub const MAX_EVIDENCE_PER_FINDING: usize = 50;
/// Most findings a snapshot holds, which is also the most a report takes: any snapshot can be reported.
pub const MAX_FINDINGS: usize = 200;

/// A finding as stored in the session snapshot. The JSON form is an object
/// `{"claim", "evidence": [...], "note"?, "step"}`; see [`write_snapshot`] and [`read_snapshot`].
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// The finding in one sentence, on one line.
    pub claim: String,
    /// Citations of the lines that support it (`L<n>...`), without duplicates; empty while uncited.
    pub evidence: Vec<String>,
    /// Free-text note given with the finding, if any.
    pub note: Option<String>,
    /// Agent step that last saved it (0 when unknown).
    pub step: u32,
}

impl Finding {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("claim".into(), json!(self.claim));
        m.insert("evidence".into(), json!(self.evidence));
        if let Some(n) = &self.note {
            m.insert("note".into(), json!(n));
        }
        m.insert("step".into(), json!(self.step));
        Value::Object(m)
    }

    /// Element `i` of a stored snapshot. Tolerant where harmless: evidence may be a single
    /// string, non-string evidence is dropped, note and step may be missing.
    fn from_json(i: usize, item: &Value) -> Result<Finding, String> {
        let Some(obj) = item.as_object() else {
            return Err(format!("element {i} is not an object"));
        };
        let Some(claim) = obj.get("claim").and_then(Value::as_str) else {
            return Err(format!("element {i} has no claim"));
        };
        let evidence = match obj.get("evidence") {
            Some(Value::Array(e)) => e.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            Some(Value::String(s)) => vec![s.clone()],
            _ => Vec::new(),
        };
        Ok(Finding {
            claim: claim.to_string(),
            evidence,
            note: obj.get("note").and_then(Value::as_str).map(str::to_string),
            step: obj.get("step").and_then(Value::as_u64).and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
        })
    }
}

/// The text to store in session memory for `findings`: a JSON array of finding objects.
pub fn write_snapshot(findings: &[Finding]) -> String {
    Value::Array(findings.iter().map(Finding::to_json).collect()).to_string()
}

/// A stored snapshot read back as findings, for adding to it. `Err` says why `text` is not
/// a findings list (so the caller can refuse to overwrite whatever the key holds).
pub fn read_snapshot(text: &str) -> Result<Vec<Finding>, String> {
    snapshot_elements(text)?.iter().enumerate().map(|(i, item)| Finding::from_json(i, item)).collect()
}

/// The elements of a stored snapshot, not yet checked: for a reader that validates each one
/// as it validates findings passed as parameters. `Err` says why `text` is not a JSON array.
pub fn snapshot_elements(text: &str) -> Result<Vec<Value>, String> {
    match serde_json::from_str(text) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(_) => Err("not a JSON array".to_string()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// The `findings` parameter as a list of raw findings: an array, a single object, or the
/// JSON text of either (models send all three). `Err` names what was given instead
/// (`a string`, or the value) for the caller's message.
pub fn findings_list(v: &Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(items) => Ok(items.clone()),
        Value::Object(_) => Ok(vec![v.clone()]),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(inner @ (Value::Array(_) | Value::Object(_))) => findings_list(&inner),
            _ => Err("a string".to_string()),
        },
        other => Err(other.to_string()),
    }
}

/// Split a line citation into its line number and whatever follows the digits:
/// `" l45: RX overrun "` gives `(45, ": RX overrun")`. `None` unless the trimmed text is `L`
/// (or `l`) and a line number >= 1: the one rule for what counts as evidence, so anything
/// the snapshot accepts, the report accepts too.
pub fn parse_citation(raw: &str) -> Option<(u64, &str)> {
    let s = raw.trim();
    let rest = s.strip_prefix('L').or_else(|| s.strip_prefix('l'))?;
    let digits_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits_len == 0 {
        return None;
    }
    let line: u64 = rest[..digits_len].parse().ok()?;
    if line == 0 {
        return None;
    }
    Some((line, &rest[digits_len..]))
}

/// Whether `key` may name a snapshot: at most [`MAX_KEY_CHARS`] ASCII letters, digits,
/// `_`, `-`, `.` or `:`, so both skills accept the same keys.
pub fn is_valid_key(key: &str) -> bool {
    char_len(key) <= MAX_KEY_CHARS && key.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
}

/// Length in characters, not bytes: the limits above count characters.
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// `s` with every run of whitespace (newlines included) turned into one space, ends trimmed:
/// claims and quotes are rendered one per line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `max` characters of `s`, with `...` when something was cut; never splits a character.
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations() {
        assert_eq!(parse_citation("L123"), Some((123, "")));
        assert_eq!(parse_citation(" l45: RX overrun "), Some((45, ": RX overrun")));
        assert_eq!(parse_citation("L0123-L130"), Some((123, "-L130")));
        for bad in ["L0", "line 40", "123", "L", "", "LX1", "see L12", "L99999999999999999999999"] {
            assert_eq!(parse_citation(bad), None, "{bad}");
        }
    }

    #[test]
    fn findings_lists() {
        assert_eq!(findings_list(&json!([{"claim": "a"}, {"claim": "b"}])).unwrap().len(), 2);
        assert_eq!(findings_list(&json!({"claim": "a"})).unwrap().len(), 1);
        assert_eq!(findings_list(&json!("[{\"claim\": \"a\"}]")).unwrap().len(), 1);
        assert_eq!(findings_list(&json!(5)), Err("5".to_string()));
        assert_eq!(findings_list(&json!("just text")), Err("a string".to_string()));
    }

    #[test]
    fn snapshot_round_trip() {
        let list = vec![
            Finding { claim: "a".into(), evidence: vec!["L1".into(), "L2: x".into()], note: Some("n".into()), step: 3 },
            Finding { claim: "b".into(), evidence: vec![], note: None, step: 0 },
        ];
        let text = write_snapshot(&list);
        assert_eq!(
            text,
            r#"[{"claim":"a","evidence":["L1","L2: x"],"note":"n","step":3},{"claim":"b","evidence":[],"step":0}]"#
        );
        assert_eq!(read_snapshot(&text).unwrap(), list);
        assert_eq!(snapshot_elements(&text).unwrap().len(), 2);
        // Foreign but harmless shapes are read; anything else says why not.
        let odd = read_snapshot(r#"[{"claim": "c", "evidence": "L5", "step": 99999999999}]"#).unwrap();
        assert_eq!(odd[0].evidence, vec!["L5"]);
        assert_eq!(odd[0].step, 0);
        assert_eq!(read_snapshot("{\"a\": 1}"), Err("not a JSON array".to_string()));
        assert_eq!(read_snapshot("[1]"), Err("element 0 is not an object".to_string()));
        assert_eq!(read_snapshot("[{}]"), Err("element 0 has no claim".to_string()));
        assert!(read_snapshot("nope").unwrap_err().starts_with("not JSON: "));
    }

    #[test]
    fn keys_and_text() {
        assert!(is_valid_key(DEFAULT_KEY) && is_valid_key("run-2.a:b_c") && is_valid_key(&"k".repeat(64)));
        assert!(!is_valid_key("bad key!") && !is_valid_key(&"k".repeat(65)));
        assert_eq!(one_line("  a \n\t b  "), "a b");
        assert_eq!(clip("héllo", 2), "hé...");
        assert_eq!(clip("hé", 2), "hé");
        assert_eq!(char_len("hé"), 2);
    }
}
