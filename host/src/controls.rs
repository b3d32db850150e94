//! Text a skill wrote, made inert for whoever shows it: control characters (ANSI escapes,
//! BEL, NUL, carriage returns, backspaces, C0 and C1 controls), bidi overrides and
//! zero-width characters are replaced by `\u{..}` escapes, so a skill cannot clear a
//! screen, rewrite a line, reorder text or hide words inside it. One set, used by the CLI
//! (a terminal) and the MCP server (a client's UI and its model) alike.

use std::borrow::Cow;

/// Characters that act on a terminal, reorder text or hide instead of showing.
fn is_active(c: char, keep_newlines: bool) -> bool {
    match c {
        '\t' => false,
        '\n' => !keep_newlines,
        c if c.is_control() => true,
        // Bidi marks, embeddings, overrides and isolates.
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        // Zero-width and invisible: spaces, joiners, word joiner, invisible operators, BOM.
        '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' | '\u{180e}' => true,
        _ => false,
    }
}

/// `text` with every active character (see the module doc) shown as a `\u{..}` escape;
/// newlines kept when `keep_newlines`.
pub fn neutralise(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_active(c, keep_newlines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_active(c, keep_newlines) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Every string inside `value` (object keys too) neutralised, newlines kept.
pub fn neutralise_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(neutralise(s, true).into_owned()),
        Value::Array(items) => Value::Array(items.iter().map(neutralise_json).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (neutralise(k, true).into_owned(), neutralise_json(v))).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_zero_width_are_escaped() {
        assert_eq!(neutralise("a\u{1b}[2Jb\u{7}\0", true), "a\\u{1b}[2Jb\\u{7}\\u{0}");
        assert_eq!(neutralise("ok\u{202e}txt\u{200b}x\u{feff}", true), "ok\\u{202e}txt\\u{200b}x\\u{feff}");
        assert_eq!(neutralise("line\nnext\ttab", true), "line\nnext\ttab");
        assert_eq!(neutralise("line\nnext", false), "line\\u{a}next");
        assert_eq!(neutralise("\u{85}\u{9b}", true), "\\u{85}\\u{9b}");
        assert!(!"plain text, 中文, émoji 🙂".chars().any(|c| is_active(c, true)));
        let v = neutralise_json(&serde_json::json!({"k\u{7}": ["\u{1b}x", 3]}));
        assert_eq!(v, serde_json::json!({"k\\u{7}": ["\\u{1b}x", 3]}));
    }
}
