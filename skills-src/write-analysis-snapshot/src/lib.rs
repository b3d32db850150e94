//! write-analysis-snapshot: accumulate findings ({claim, evidence: ["L123", ...]}) in the
//! session's working memory under a key, so later steps (and generate-report) can build on
//! them instead of re-deriving them. Repeating a claim merges its evidence.

use serde_json::Value;
use skill_findings::{
    DEFAULT_KEY, Finding, MAX_CLAIM_CHARS, MAX_EVIDENCE_PER_FINDING, MAX_FINDINGS, MAX_KEY_CHARS, char_len, clip,
    findings_list, is_valid_key, one_line, parse_citation, read_snapshot, write_snapshot,
};
use skillhost_sdk::{Context, Skill, SkillError, SkillResult, export_skill};

const MAX_FINDINGS_PER_CALL: usize = 50;
const MAX_EVIDENCE_CHARS: usize = 300;
const MAX_NOTE_CHARS: usize = 2000;

const CITATION_HELP: &str =
    "cite log lines as \"L<n>\", the line numbers read-log-file prints (e.g. \"L1243\" or \"L1243: RX overrun\")";
const FINDINGS_EXAMPLE: &str =
    "e.g. [{\"claim\": \"RX overruns coincide with flash erases\", \"evidence\": [\"L1243\", \"L1240\"]}]";

/// `L123`, `L123: text`, `L123-L130`, `l45` -> the citation as stored (`L123...`).
/// Returns None when the string does not start with `L` followed by a line number >= 1.
fn citation(raw: &str) -> Option<String> {
    parse_citation(raw).map(|(line, rest)| format!("L{line}{rest}"))
}

/// Validate one finding from the parameters.
fn parse_finding(i: usize, v: &Value, note: &Option<String>, step: u32) -> Result<Finding, SkillError> {
    let Value::Object(obj) = v else {
        return Err(SkillError::invalid(format!(
            "findings[{i}]: expected an object {{\"claim\": \"...\", \"evidence\": [\"L123\"]}}, got {v}"
        )));
    };
    let claim = match obj.get("claim") {
        Some(Value::String(s)) if !s.trim().is_empty() => one_line(s),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(SkillError::invalid(format!(
                "findings[{i}].claim: required; state the finding in one sentence"
            )));
        }
        Some(other) => {
            return Err(SkillError::invalid(format!("findings[{i}].claim: expected a string, got {other}")));
        }
    };
    if char_len(&claim) > MAX_CLAIM_CHARS {
        return Err(SkillError::invalid(format!(
            "findings[{i}].claim: {} characters; keep a claim under {MAX_CLAIM_CHARS} characters",
            char_len(&claim)
        )));
    }
    let raw_evidence: Vec<Value> = match obj.get("evidence") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(s @ Value::String(_)) => vec![s.clone()],
        Some(other) => {
            return Err(SkillError::invalid(format!(
                "findings[{i}].evidence: expected a list of strings, got {other}; {CITATION_HELP}"
            )));
        }
    };
    if raw_evidence.len() > MAX_EVIDENCE_PER_FINDING {
        return Err(SkillError::invalid(format!(
            "findings[{i}].evidence: {} entries; cite at most {MAX_EVIDENCE_PER_FINDING} key lines per finding",
            raw_evidence.len()
        )));
    }
    let mut evidence = Vec::new();
    for (j, e) in raw_evidence.iter().enumerate() {
        let Value::String(s) = e else {
            return Err(SkillError::invalid(format!(
                "findings[{i}].evidence[{j}]: expected a string like \"L123\", got {e}"
            )));
        };
        let Some(c) = citation(s) else {
            return Err(SkillError::invalid(format!(
                "findings[{i}].evidence[{j}]: {s:?} is not a line citation; {CITATION_HELP}"
            )));
        };
        let c = one_line(&c);
        if char_len(&c) > MAX_EVIDENCE_CHARS {
            return Err(SkillError::invalid(format!(
                "findings[{i}].evidence[{j}]: longer than {MAX_EVIDENCE_CHARS} characters; cite the line number and a short quote"
            )));
        }
        if !evidence.contains(&c) {
            evidence.push(c);
        }
    }
    Ok(Finding { claim, evidence, note: note.clone(), step })
}

/// Read a stored snapshot back, refusing to overwrite a key that holds something else.
fn parse_stored(key: &str, text: &str) -> Result<Vec<Finding>, SkillError> {
    read_snapshot(text).map_err(|why| {
        SkillError::invalid(format!(
            "key: session key {key:?} already holds something that is not a findings list ({why}); choose another key"
        ))
    })
}

fn validate_key(v: Option<&Value>) -> Result<String, SkillError> {
    let key = match v {
        None | Some(Value::Null) => return Ok(DEFAULT_KEY.to_string()),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(DEFAULT_KEY.to_string()),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(other) => {
            return Err(SkillError::invalid(format!("key: expected a string, got {other}")));
        }
    };
    if !is_valid_key(&key) {
        return Err(SkillError::invalid(format!(
            "key: {key:?} is not a valid snapshot key; use up to {MAX_KEY_CHARS} letters, digits, '_', '-', '.' or ':' (default \"{DEFAULT_KEY}\")"
        )));
    }
    Ok(key)
}

/// Merge new findings into the stored list: a repeated claim (case-insensitive) gains the
/// new evidence instead of appearing twice. Returns (added, merged).
fn merge(stored: &mut Vec<Finding>, new: Vec<Finding>) -> (usize, usize) {
    let (mut added, mut merged) = (0, 0);
    for f in new {
        let existing = stored.iter_mut().find(|s| s.claim.to_lowercase() == f.claim.to_lowercase());
        match existing {
            Some(s) => {
                for e in f.evidence {
                    if !s.evidence.contains(&e) && s.evidence.len() < MAX_EVIDENCE_PER_FINDING {
                        s.evidence.push(e);
                    }
                }
                if f.note.is_some() {
                    s.note = f.note;
                }
                s.step = f.step;
                merged += 1;
            }
            None => {
                stored.push(f);
                added += 1;
            }
        }
    }
    (added, merged)
}

fn render(key: &str, list: &[Finding]) -> String {
    let mut out = String::new();
    for (i, f) in list.iter().enumerate() {
        let ev = if f.evidence.is_empty() {
            "none yet (uncited: generate-report refuses it until L<n> lines are added)".to_string()
        } else {
            f.evidence.join(", ")
        };
        out.push_str(&format!("{}. {}\n   Evidence: {ev}", i + 1, clip(&f.claim, 500)));
        if f.step > 0 {
            out.push_str(&format!(" (step {})", f.step));
        }
        out.push('\n');
        if let Some(n) = &f.note {
            out.push_str(&format!("   Note: {}\n", clip(&one_line(n), 500)));
        }
    }
    if out.is_empty() {
        out = format!("(snapshot {key:?} is empty)\n");
    }
    out
}

struct WriteAnalysisSnapshot;

impl Skill for WriteAnalysisSnapshot {
    type Params = Value;

    fn execute(params: Value, ctx: &Context) -> Result<SkillResult, SkillError> {
        let Value::Object(obj) = params else {
            return Err(SkillError::invalid(
                "parameters must be a JSON object like {\"findings\": [{\"claim\": \"...\", \"evidence\": [\"L123\"]}]}",
            ));
        };
        let key = validate_key(obj.get("key"))?;
        let note = match obj.get("note") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) if char_len(s) > MAX_NOTE_CHARS => {
                return Err(SkillError::invalid(format!("note: keep it under {MAX_NOTE_CHARS} characters")));
            }
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(other) => {
                return Err(SkillError::invalid(format!("note: expected a string, got {other}")));
            }
        };
        let raw = match obj.get("findings") {
            None | Some(Value::Null) => {
                return Err(SkillError::invalid(
                    "findings: required; pass [{\"claim\": \"...\", \"evidence\": [\"L123\"]}, ...]",
                ));
            }
            Some(v) => findings_list(v).map_err(|got| {
                SkillError::invalid(format!(
                    "findings: expected a list of {{claim, evidence}} objects, got {got}; {FINDINGS_EXAMPLE}"
                ))
            })?,
        };
        if raw.is_empty() {
            return Err(SkillError::invalid(
                "findings: empty; pass at least one {\"claim\": \"...\", \"evidence\": [\"L123\"]}",
            ));
        }
        if raw.len() > MAX_FINDINGS_PER_CALL {
            return Err(SkillError::invalid(format!(
                "findings: {} items; save at most {MAX_FINDINGS_PER_CALL} per call",
                raw.len()
            )));
        }
        let new: Vec<Finding> =
            raw.iter().enumerate().map(|(i, v)| parse_finding(i, v, &note, ctx.step())).collect::<Result<_, _>>()?;

        let mut stored = match ctx.session_get(&key)? {
            Some(text) if !text.trim().is_empty() => parse_stored(&key, &text)?,
            _ => Vec::new(),
        };
        let before = stored.len();
        let (added, merged) = merge(&mut stored, new);
        if stored.len() > MAX_FINDINGS {
            return Err(SkillError::invalid(format!(
                "findings: the snapshot {key:?} would hold {} findings (limit {MAX_FINDINGS}, {before} stored); \
                 consolidate related findings into fewer claims or use another key",
                stored.len()
            )));
        }
        ctx.session_set(&key, &write_snapshot(&stored))?;
        ctx.info(&format!("snapshot {key}: {added} added, {merged} merged, {} total", stored.len()));

        let uncited = stored.iter().filter(|f| f.evidence.is_empty()).count();
        let mut out = format!(
            "Saved to session snapshot {key:?}: {added} new finding(s), {merged} merged into existing claims. \
             The snapshot now holds {} finding(s):\n\n",
            stored.len()
        );
        out.push_str(&render(&key, &stored));
        if uncited > 0 {
            out.push_str(&format!(
                "\n{uncited} finding(s) have no evidence yet: add L<n> lines (save the same claim again with evidence) before generating the report.\n"
            ));
        }
        out.push_str(&format!(
            "\nNext: call generate-report without findings to render this snapshot{}.\n",
            if key == DEFAULT_KEY { String::new() } else { format!(" (pass key {key:?})") }
        ));
        Ok(SkillResult::success(out)
            .meta("key", &key)
            .meta("count", stored.len())
            .meta("added", added)
            .meta("merged", merged)
            .meta("uncited", uncited))
    }
}

export_skill!(WriteAnalysisSnapshot);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations() {
        assert_eq!(citation("L123").as_deref(), Some("L123"));
        assert_eq!(citation(" l45: RX overrun ").as_deref(), Some("L45: RX overrun"));
        assert_eq!(citation("L0123-L130").as_deref(), Some("L123-L130"));
        for bad in ["L0", "line 40", "123", "L", "", "LX1", "L99999999999999999999999"] {
            assert_eq!(citation(bad), None, "{bad}");
        }
    }

    #[test]
    fn findings_validate_and_merge() {
        let v = serde_json::json!([
            {"claim": "Overruns follow flash erase", "evidence": ["L1243", "L1243", "L1240: erase start"]},
            {"claim": "Hypothesis without evidence"}
        ]);
        let list = findings_list(&v).unwrap();
        let parsed: Vec<Finding> =
            list.iter().enumerate().map(|(i, f)| parse_finding(i, f, &None, 2).unwrap()).collect();
        assert_eq!(parsed[0].evidence, vec!["L1243", "L1240: erase start"]);
        assert!(parsed[1].evidence.is_empty());
        let mut stored = parsed;
        let again = parse_finding(
            0,
            &serde_json::json!({"claim": "overruns FOLLOW flash erase", "evidence": "L1300"}),
            &None,
            3,
        )
        .unwrap();
        assert_eq!(merge(&mut stored, vec![again]), (0, 1));
        assert_eq!(stored[0].evidence.len(), 3);
        assert_eq!(parse_stored("findings", &write_snapshot(&stored)).unwrap(), stored);
    }

    #[test]
    fn bad_findings() {
        for v in [
            serde_json::json!({"evidence": ["L1"]}),
            serde_json::json!({"claim": "", "evidence": ["L1"]}),
            serde_json::json!({"claim": "x", "evidence": ["line 12"]}),
            serde_json::json!({"claim": "x", "evidence": [12]}),
            serde_json::json!({"claim": "x", "evidence": {"a": 1}}),
            serde_json::json!("just text"),
        ] {
            assert!(matches!(parse_finding(0, &v, &None, 1), Err(SkillError::InvalidParams(_))), "{v}");
        }
        assert!(parse_stored("k", "{\"a\": 1}").is_err());
        assert!(validate_key(Some(&serde_json::json!("bad key!"))).is_err());
        assert_eq!(validate_key(Some(&serde_json::json!(""))).unwrap(), "findings");
    }
}
