//! generate-report: render findings as a Markdown report in which every conclusion cites
//! the log lines (`L<n>`) that support it. A conclusion without a valid citation is not
//! softened or skipped: the whole report is refused, naming each uncited conclusion, so the
//! caller goes back and finds the evidence (or drops the claim).

use std::collections::BTreeMap;

use serde_json::Value;
use skill_findings::{
    DEFAULT_KEY, MAX_CLAIM_CHARS, MAX_EVIDENCE_PER_FINDING, MAX_FINDINGS, char_len, clip, findings_list, is_valid_key,
    one_line, parse_citation, snapshot_elements,
};
use skillhost_sdk::{Context, Skill, SkillError, SkillResult, export_skill};

const DEFAULT_TITLE: &str = "Log analysis report";
const MAX_TITLE_CHARS: usize = 200;

const CITATION_HELP: &str = "Every conclusion needs at least one evidence entry of the form L<n>: a line number from \
     read-log-file output, e.g. \"L1243\" or \"L1243: RX overrun\". Add the lines that support each conclusion \
     (read-log-file with a keyword finds them), or drop the conclusion.";

/// A citation: the line number and the text after it (may be empty).
#[derive(Clone, Debug, PartialEq)]
struct Cite {
    line: u64,
    /// Range end for `L120-L130` / `L120-130`.
    to: Option<u64>,
    text: String,
}

impl Cite {
    fn label(&self) -> String {
        match self.to {
            Some(to) => format!("L{}-L{to}", self.line),
            None => format!("L{}", self.line),
        }
    }
}

/// Parse `^L\d+` (optionally followed by a range end and text). Accepts a lowercase `l` too.
fn citation(raw: &str) -> Option<Cite> {
    let (line, mut tail) = parse_citation(raw)?;
    // A range: L120-L130 or L120-130.
    let mut to = None;
    if let Some(r) = tail.strip_prefix('-') {
        let r2 = r.strip_prefix('L').or_else(|| r.strip_prefix('l')).unwrap_or(r);
        let m_len = r2.bytes().take_while(u8::is_ascii_digit).count();
        if m_len > 0
            && let Ok(end) = r2[..m_len].parse::<u64>()
        {
            if end > line {
                to = Some(end);
            }
            tail = &r2[m_len..];
        }
    }
    let text = tail.trim_start_matches([':', ' ', '-', '\u{2014}', '\t', ',']).trim();
    Some(Cite { line, to, text: one_line(text) })
}

/// A finding before validation of its evidence.
struct Conclusion {
    claim: String,
    cites: Vec<Cite>,
    rejected: Vec<String>,
    note: Option<String>,
}

/// Turn one raw finding into a conclusion; only structural problems are errors here,
/// citation problems are collected so that all of them can be reported at once.
fn parse_conclusion(i: usize, v: &Value, source: &str) -> Result<Conclusion, SkillError> {
    let Value::Object(obj) = v else {
        return Err(SkillError::invalid(format!(
            "{source}[{i}]: expected an object {{\"claim\": \"...\", \"evidence\": [\"L123\"]}}, got {v}"
        )));
    };
    let claim = match obj.get("claim") {
        Some(Value::String(s)) if !s.trim().is_empty() => one_line(s),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(SkillError::invalid(format!(
                "{source}[{i}].claim: required; state the conclusion in one sentence"
            )));
        }
        Some(other) => {
            return Err(SkillError::invalid(format!("{source}[{i}].claim: expected a string, got {other}")));
        }
    };
    if char_len(&claim) > MAX_CLAIM_CHARS {
        return Err(SkillError::invalid(format!(
            "{source}[{i}].claim: longer than {MAX_CLAIM_CHARS} characters; state the conclusion in a sentence or two"
        )));
    }
    let raw: Vec<Value> = match obj.get("evidence") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(s @ Value::String(_)) => vec![s.clone()],
        Some(other) => vec![other.clone()],
    };
    if raw.len() > MAX_EVIDENCE_PER_FINDING {
        return Err(SkillError::invalid(format!(
            "{source}[{i}].evidence: {} entries; cite at most {MAX_EVIDENCE_PER_FINDING} key lines per conclusion",
            raw.len()
        )));
    }
    let mut cites: Vec<Cite> = Vec::new();
    let mut rejected = Vec::new();
    for e in &raw {
        match e.as_str().and_then(citation) {
            Some(c) => {
                if !cites.contains(&c) {
                    cites.push(c);
                }
            }
            None => rejected.push(match e {
                Value::String(s) => clip(&one_line(s), 80),
                other => clip(&other.to_string(), 80),
            }),
        }
    }
    let note = obj.get("note").and_then(Value::as_str).map(one_line).filter(|n| !n.is_empty());
    Ok(Conclusion { claim, cites, rejected, note })
}

fn string_param(obj: &serde_json::Map<String, Value>, key: &str, default: &str) -> Result<String, SkillError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(default.to_string()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(default.to_string()),
        Some(Value::String(s)) => Ok(one_line(s)),
        Some(other) => Err(SkillError::invalid(format!("{key}: expected a string, got {other}"))),
    }
}

fn render(title: &str, conclusions: &[Conclusion], source: &str) -> String {
    let mut md = format!("# {title}\n\n");
    let n = conclusions.len();
    md.push_str(&format!(
        "{n} conclusion{} from {source}, each backed by log lines (`L<n>` is the 1-based line number in the analysed log).\n\n",
        if n == 1 { "" } else { "s" }
    ));

    md.push_str("## Conclusions\n\n");
    for (i, c) in conclusions.iter().enumerate() {
        let labels: Vec<String> = c.cites.iter().map(Cite::label).collect();
        md.push_str(&format!("{}. {} [{}]\n", i + 1, c.claim, labels.join(", ")));
    }

    md.push_str("\n## Evidence\n");
    for (i, c) in conclusions.iter().enumerate() {
        md.push_str(&format!("\n### {}. {}\n\n", i + 1, clip(&c.claim, 160)));
        for cite in &c.cites {
            if cite.text.is_empty() {
                md.push_str(&format!("- `{}`\n", cite.label()));
            } else {
                md.push_str(&format!("- `{}`: {}\n", cite.label(), cite.text));
            }
        }
        if let Some(note) = &c.note {
            md.push_str(&format!("\n_Note: {note}_\n"));
        }
    }

    let mut index: BTreeMap<(u64, Option<u64>), Vec<usize>> = BTreeMap::new();
    for (i, c) in conclusions.iter().enumerate() {
        for cite in &c.cites {
            let entry = index.entry((cite.line, cite.to)).or_default();
            if !entry.contains(&(i + 1)) {
                entry.push(i + 1);
            }
        }
    }
    md.push_str("\n## Cited lines\n\n| Line | Supports conclusion |\n|---|---|\n");
    for ((line, to), users) in &index {
        let label = match to {
            Some(t) => format!("L{line}-L{t}"),
            None => format!("L{line}"),
        };
        let users: Vec<String> = users.iter().map(|u| u.to_string()).collect();
        md.push_str(&format!("| {label} | {} |\n", users.join(", ")));
    }
    md
}

struct GenerateReport;

impl Skill for GenerateReport {
    type Params = Value;

    fn execute(params: Value, ctx: &Context) -> Result<SkillResult, SkillError> {
        let Value::Object(obj) = params else {
            return Err(SkillError::invalid(
                "parameters must be a JSON object like {\"title\": \"...\", \"findings\": [{\"claim\": \"...\", \"evidence\": [\"L123\"]}]}",
            ));
        };
        let title = string_param(&obj, "title", DEFAULT_TITLE)?;
        let title = clip(&title, MAX_TITLE_CHARS);
        let key = string_param(&obj, "key", DEFAULT_KEY)?;
        if !is_valid_key(&key) {
            return Err(SkillError::invalid(format!(
                "key: {key:?} is not a valid snapshot key; use the key given to write-analysis-snapshot (default \"{DEFAULT_KEY}\")"
            )));
        }

        let given = match obj.get("findings") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => findings_list(v).map_err(|got| {
                let example =
                    if v.is_string() { "; e.g. [{\"claim\": \"...\", \"evidence\": [\"L123\"]}]" } else { "" };
                SkillError::invalid(format!(
                    "findings: expected a list of {{claim, evidence}} objects, got {got}{example}"
                ))
            })?,
        };
        let (raw, source, source_label) = if !given.is_empty() {
            (given, "params".to_string(), "the given findings".to_string())
        } else {
            let stored = ctx.session_get(&key)?;
            let list = match stored.as_deref().map(str::trim) {
                None | Some("") => Vec::new(),
                // Each element is checked below, like findings passed as parameters.
                Some(text) => snapshot_elements(text).map_err(|_| {
                    SkillError::invalid(format!(
                        "key: session key {key:?} does not hold a findings list written by write-analysis-snapshot; pass findings directly or use the right key"
                    ))
                })?,
            };
            if list.is_empty() {
                return Err(SkillError::invalid(format!(
                    "no findings to report: pass findings, e.g. [{{\"claim\": \"RX overruns coincide with flash erases\", \"evidence\": [\"L1243\"]}}], \
                     or run write-analysis-snapshot first (session key {key:?} is empty)"
                )));
            }
            (list, format!("session:{key}"), format!("session snapshot \"{key}\""))
        };
        if raw.len() > MAX_FINDINGS {
            return Err(SkillError::invalid(format!(
                "findings: {} conclusions; a report takes at most {MAX_FINDINGS}, consolidate related ones",
                raw.len()
            )));
        }

        let conclusions: Vec<Conclusion> =
            raw.iter().enumerate().map(|(i, v)| parse_conclusion(i, v, "findings")).collect::<Result<_, _>>()?;

        // The guardrail: every conclusion must cite at least one line.
        let uncited: Vec<String> = conclusions
            .iter()
            .enumerate()
            .filter(|(_, c)| c.cites.is_empty())
            .map(|(i, c)| {
                let given = if c.rejected.is_empty() {
                    "no evidence given".to_string()
                } else {
                    format!(
                        "evidence {} is not an L<n> citation",
                        c.rejected.iter().map(|r| format!("{r:?}")).collect::<Vec<_>>().join(", ")
                    )
                };
                format!("- conclusion {} \"{}\": {given}", i + 1, clip(&c.claim, 200))
            })
            .collect();
        if !uncited.is_empty() {
            ctx.warn(&format!("refused report: {} of {} conclusions uncited", uncited.len(), conclusions.len()));
            return Err(SkillError::invalid(format!(
                "Refusing to write the report: {} of {} conclusion(s) cite no log line.\n{}\n{CITATION_HELP}",
                uncited.len(),
                conclusions.len(),
                uncited.join("\n")
            )));
        }

        let ignored: usize = conclusions.iter().map(|c| c.rejected.len()).sum();
        let mut md = render(&title, &conclusions, &source_label);
        if ignored > 0 {
            md.push_str(&format!(
                "\n_{ignored} evidence {} not an L<n> citation and {} left out._\n",
                if ignored == 1 { "entry was" } else { "entries were" },
                if ignored == 1 { "was" } else { "were" }
            ));
        }
        let citations: usize = conclusions.iter().map(|c| c.cites.len()).sum();
        let distinct: std::collections::BTreeSet<u64> =
            conclusions.iter().flat_map(|c| c.cites.iter().map(|x| x.line)).collect();
        ctx.info(&format!("report: {} conclusions, {citations} citations", conclusions.len()));
        Ok(SkillResult::success(md)
            .meta("conclusions", conclusions.len())
            .meta("citations", citations)
            .meta("distinct_lines", distinct.len())
            .meta("ignored_evidence", ignored)
            .meta("source", source)
            .meta("title", title))
    }
}

export_skill!(GenerateReport);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations() {
        let c = citation("L1243: RX overrun").unwrap();
        assert_eq!((c.line, c.to, c.text.as_str()), (1243, None, "RX overrun"));
        let c = citation("L120-L130 burst").unwrap();
        assert_eq!((c.line, c.to, c.label()), (120, Some(130), "L120-L130".to_string()));
        assert_eq!(citation("l7").unwrap().label(), "L7");
        assert_eq!(citation("L12abc").unwrap().text, "abc");
        for bad in ["line 12", "12", "L", "L0", "see L12", ""] {
            assert!(citation(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn conclusions_collect_rejected_evidence() {
        let c =
            parse_conclusion(0, &serde_json::json!({"claim": "a", "evidence": ["L1", "line 2", 3, "L1"]}), "findings")
                .unwrap();
        assert_eq!(c.cites.len(), 1);
        assert_eq!(c.rejected, vec!["line 2", "3"]);
        let c = parse_conclusion(0, &serde_json::json!({"claim": "b"}), "findings").unwrap();
        assert!(c.cites.is_empty());
        assert!(parse_conclusion(0, &serde_json::json!({"evidence": ["L1"]}), "findings").is_err());
        assert!(parse_conclusion(0, &serde_json::json!(["L1"]), "findings").is_err());
    }

    #[test]
    fn renders_every_citation() {
        let cs = vec![
            parse_conclusion(0, &serde_json::json!({"claim": "Ring too small", "evidence": ["L11: 16 x 32 B", "L1242"]}), "f").unwrap(),
            parse_conclusion(1, &serde_json::json!({"claim": "Overruns during erase", "evidence": ["L1242", "L1243"], "note": "9 episodes"}), "f").unwrap(),
        ];
        let md = render("T", &cs, "the given findings");
        assert!(md.starts_with("# T\n"));
        assert!(md.contains("1. Ring too small [L11, L1242]"));
        assert!(md.contains("- `L11`: 16 x 32 B"));
        assert!(md.contains("| L1242 | 1, 2 |"));
        assert!(md.contains("_Note: 9 episodes_"));
    }
}
