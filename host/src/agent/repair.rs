//! Repair the JSON object a model answers with. Models wrap it in Markdown fences, put prose
//! around it, leave trailing commas, or type smart quotes; none of that should cost a step.
//! What cannot be repaired comes back as one sentence the model can act on when re-asked.
//!
//! Repairs, tried in this order on each candidate until one gives a JSON object:
//! 1. the whole reply as it is;
//! 2. the outermost balanced `{...}` (string- and escape-aware, so braces inside strings do
//!    not count), first inside Markdown code fences, then anywhere in the reply, skipping
//!    balanced prose such as `{x}` that is not JSON;
//! 3. on each candidate: trailing commas before `}` / `]` removed, and strings delimited by
//!    typographic quotes (`“key”`) turned into JSON strings. Both only outside JSON strings,
//!    where neither can occur in valid JSON, so a valid object never changes meaning.
//!
//! Not repaired, on purpose: single-quoted strings, comments, bare keys, `True`/`None`, and
//! truncated objects (closing them would invent content). A reply that is valid JSON but not
//! an object (an array of actions, a bare string) is an error rather than dug into.

use serde_json::Value;

/// Most candidate objects tried per reply: bounds the work on hostile input.
const MAX_CANDIDATES: usize = 16;

/// Why a reply did not give a JSON object. `Display` is written for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepairError {
    #[error("the reply is empty: answer with one JSON object")]
    Empty,
    #[error("no JSON object found in the reply: answer with exactly one JSON object {{...}} and nothing else")]
    NoObject,
    #[error("the reply is JSON but {found}, not an object: answer with one JSON object {{...}}")]
    NotAnObject { found: &'static str },
    #[error(
        "the JSON object that starts at line {line}, column {column} of the reply is never closed ({open} bracket(s) still open at the end): the reply was probably cut off; answer again with one complete, shorter JSON object"
    )]
    Unclosed { line: usize, column: usize, open: usize },
    #[error(
        "the JSON object in the reply does not parse: {message} (counted from its opening brace); answer with one valid JSON object"
    )]
    Invalid { message: String },
}

/// The JSON object in `text`, repaired if needed (see the module docs).
pub fn repair_json(text: &str) -> Result<Value, RepairError> {
    let text = text.trim_start_matches('\u{feff}').trim();
    if text.is_empty() {
        return Err(RepairError::Empty);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => return Ok(v),
        Ok(other) => return Err(RepairError::NotAnObject { found: describe(&other) }),
        Err(_) => {}
    }
    let mut first_error: Option<RepairError> = None;
    let mut unclosed: Option<RepairError> = None;
    let mut tried = 0;
    for (start, end) in fenced_regions(text).into_iter().chain([(0, text.len())]) {
        let region = &text[start..end];
        let mut pos = 0;
        while let Some(found) = region[pos..].find('{') {
            if tried == MAX_CANDIDATES {
                break;
            }
            tried += 1;
            let open = pos + found;
            match balanced_end(region, open) {
                Ok(close) => {
                    let candidate = &region[open..close];
                    match parse_object(candidate) {
                        Ok(v) => return Ok(v),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                    pos = close;
                }
                Err(open_count) => {
                    // Everything after an unclosed `{` is inside it: no later candidate in
                    // this region can be the model's object (an inner one would be a fragment).
                    let (line, column) = line_column(text, start + open);
                    unclosed.get_or_insert(RepairError::Unclosed { line, column, open: open_count });
                    break;
                }
            }
        }
    }
    Err(first_error.or(unclosed).unwrap_or(RepairError::NoObject))
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Object(_) => "an object",
    }
}

/// `candidate` as an object, as it is or with the slips of the module docs repaired.
fn parse_object(candidate: &str) -> Result<Value, RepairError> {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(candidate) {
        return Ok(v);
    }
    match serde_json::from_str::<Value>(&fix_slips(candidate)) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(RepairError::NotAnObject { found: describe(&other) }),
        Err(e) => Err(RepairError::Invalid { message: e.to_string() }),
    }
}

/// Byte ranges of the contents of Markdown code fences (an unclosed fence runs to the end).
fn fenced_regions(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(found) = text[pos..].find("```") {
        let after = pos + found + 3;
        let start = text[after..].find('\n').map_or(text.len(), |i| after + i + 1);
        let end = text[start..].find("```").map_or(text.len(), |i| start + i);
        out.push((start, end));
        pos = (end + 3).min(text.len());
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Quote {
    Ascii,
    Smart,
}

/// One character inside a `"` string: true when it is the closing quote (escapes tracked).
fn closes_ascii_string(c: char, escaped: &mut bool) -> bool {
    if *escaped {
        *escaped = false;
        false
    } else if c == '\\' {
        *escaped = true;
        false
    } else {
        c == '"'
    }
}

fn is_smart_quote(c: char) -> bool {
    matches!(c, '\u{201c}' | '\u{201d}')
}

/// End (exclusive) of the bracketed value opening at `open`; `Err` with the number of
/// brackets still open when the text ends first.
fn balanced_end(text: &str, open: usize) -> Result<usize, usize> {
    let mut depth = 0usize;
    let mut quote: Option<Quote> = None;
    let mut escaped = false;
    for (i, c) in text[open..].char_indices() {
        match quote {
            Some(Quote::Ascii) => {
                if closes_ascii_string(c, &mut escaped) {
                    quote = None;
                }
            }
            Some(Quote::Smart) => {
                if is_smart_quote(c) {
                    quote = None;
                }
            }
            None => match c {
                '"' => quote = Some(Quote::Ascii),
                c if is_smart_quote(c) => quote = Some(Quote::Smart),
                '{' | '[' => depth += 1,
                '}' | ']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return Ok(open + i + c.len_utf8());
                    }
                }
                _ => {}
            },
        }
    }
    Err(depth)
}

/// Remove trailing commas and turn typographic-quoted strings into JSON strings, both only
/// outside JSON strings.
fn fix_slips(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<Quote> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match quote {
            Some(Quote::Ascii) => {
                out.push(c);
                if closes_ascii_string(c, &mut escaped) {
                    quote = None;
                }
            }
            Some(Quote::Smart) => {
                if is_smart_quote(c) {
                    out.push('"');
                    quote = None;
                } else if c == '"' {
                    out.push_str("\\\"");
                } else {
                    out.push(c);
                }
            }
            None => match c {
                '"' => {
                    quote = Some(Quote::Ascii);
                    out.push(c);
                }
                c if is_smart_quote(c) => {
                    quote = Some(Quote::Smart);
                    out.push('"');
                }
                ',' if text[i + 1..].trim_start().starts_with(['}', ']']) => {}
                _ => out.push(c),
            },
        }
    }
    out
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(text: &str) -> Value {
        repair_json(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[test]
    fn clean_json_is_taken_as_it_is() {
        assert_eq!(
            ok(r#"{"next_action": "reply", "message": "done"}"#),
            json!({"next_action": "reply", "message": "done"})
        );
        assert_eq!(ok("\u{feff}  {\"a\": 1}\n"), json!({"a": 1}));
    }

    #[test]
    fn fences_and_prose_are_stripped() {
        let fenced = "Here is my decision:\n```json\n{\"next_action\": \"call_skill\", \"skill_name\": \"read-log-file\"}\n```\nLet me know.";
        assert_eq!(ok(fenced)["skill_name"], "read-log-file");
        assert_eq!(ok("```\n{\"a\": 1}\n```")["a"], 1);
        assert_eq!(ok("```json\n{\"a\": 1}")["a"], 1, "an unclosed fence runs to the end");
        assert_eq!(ok("I will call {the skill} now. {\"a\": {\"b\": [1, 2]}} Thanks!"), json!({"a": {"b": [1, 2]}}));
        // Prose braces before a fence do not hide the fenced object.
        assert_eq!(ok("Use {x:\n```json\n{\"a\": 1}\n```")["a"], 1);
    }

    #[test]
    fn braces_and_escaped_quotes_inside_strings_do_not_count() {
        let v = ok(r#"Sure: {"message": "a } and a { and \"quoted }\" text", "n": 1} trailing } brace"#);
        assert_eq!(v["message"], "a } and a { and \"quoted }\" text");
        assert_eq!(v["n"], 1);
        assert_eq!(ok(r#"{"path": "C:\\dir\\", "x": "}"}"#)["x"], "}");
    }

    #[test]
    fn trailing_commas_and_smart_quotes_are_repaired() {
        assert_eq!(ok("{\"a\": [1, 2,], \"b\": {\"c\": 3,},\n}"), json!({"a": [1, 2], "b": {"c": 3}}));
        // A comma before a bracket inside a string is content, not a slip.
        assert_eq!(ok(r#"{"s": "x,]", "t": 1,}"#), json!({"s": "x,]", "t": 1}));
        assert_eq!(
            ok("{\u{201c}next_action\u{201d}: \u{201c}reply\u{201d}, \"message\": \"she said \u{201c}hi\u{201d}\"}"),
            json!({"next_action": "reply", "message": "she said \u{201c}hi\u{201d}"})
        );
        assert_eq!(ok("{\u{201c}say\u{201d}: \u{201c}a \"b\" c\u{201d}}")["say"], "a \"b\" c");
    }

    #[test]
    fn errors_say_what_to_do() {
        assert_eq!(repair_json("  \n"), Err(RepairError::Empty));
        assert_eq!(repair_json("I think the answer is 42."), Err(RepairError::NoObject));
        assert_eq!(repair_json("[{\"a\": 1}]"), Err(RepairError::NotAnObject { found: "an array" }));
        assert_eq!(repair_json("\"just text\""), Err(RepairError::NotAnObject { found: "a string" }));
        let cut = repair_json("Decision:\n  {\"next_action\": \"reply\", \"message\": \"the cause is");
        assert_eq!(cut, Err(RepairError::Unclosed { line: 2, column: 3, open: 1 }));
        assert!(cut.unwrap_err().to_string().contains("cut off"));
        let bad = repair_json("{\"a\": 1 \"b\": 2}").unwrap_err();
        let RepairError::Invalid { message } = &bad else { panic!("{bad:?}") };
        assert!(message.contains("line 1 column"), "{message}");
        assert!(bad.to_string().starts_with("the JSON object in the reply does not parse: expected"), "{bad}");
        // A truncated object with a complete inner object is not mistaken for it.
        assert!(matches!(repair_json("{\"a\": {\"b\": 1}, \"c\": "), Err(RepairError::Unclosed { .. })));
    }

    #[test]
    fn hostile_input_never_panics() {
        let deep_open = "{".repeat(200_000);
        assert!(matches!(repair_json(&deep_open), Err(RepairError::Unclosed { open: 200_000, .. })));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(repair_json(&format!("{{\"a\": {deep}}}")).is_err(), "recursion limit, not a stack overflow");
        assert!(repair_json(&"}".repeat(10_000)).is_err());
        assert!(repair_json(&"{}x".repeat(100_000)).is_ok());
        assert!(repair_json(&"{x} ".repeat(100_000)).is_err(), "bounded by MAX_CANDIDATES");
        for s in [
            "{",
            "}",
            "{\"",
            "{\"a\\",
            "\\",
            "\"",
            "```",
            "``````",
            "```\n",
            "{\u{201c}",
            "\u{201d}{\u{201c}}",
            "{,}",
            "{\"a\":1,,}",
            "{\u{00e9}\u{1f600}",
            "\u{1f600}{",
            "{\"\u{1f600}\": \"\u{1f600}\",}",
            "\0{\0}",
            ",}",
            "{]",
            "[}",
        ] {
            let _ = repair_json(s);
        }
    }
}
