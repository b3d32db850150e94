//! Client-supplied values as the audit log keeps them: bounded.
//!
//! A line is written for every call, so whatever a client may make as large as it likes
//! (its `clientInfo` name and version, a tool's arguments, a resource URI) would grow the
//! log as fast as the client sends. A value that fits is kept as it is; a longer one is
//! kept as its size, its sha256 and a prefix, so the line still says what was sent and a
//! copy of the full value can be matched against it.

use std::borrow::Cow;

use serde_json::{Value, json};

/// Most bytes of a client string kept as it is (a name, a version).
pub const MAX_NAME_BYTES: usize = 128;
/// Most bytes of a client JSON value (tool arguments) kept as it is, as compact JSON.
pub const MAX_VALUE_BYTES: usize = 4096;
/// Bytes of an over-long value kept as its prefix.
pub const PREFIX_BYTES: usize = 256;

/// `text` if it has at most `max` bytes, else its digest and prefix (see the module doc).
pub fn string(text: &str, max: usize) -> Value {
    if text.len() <= max { Value::String(text.to_string()) } else { digest(text) }
}

/// `value` if its compact JSON has at most `max` bytes, else the digest and prefix of that JSON.
/// (Measured without writing it out: a call's arguments pass here on every call.)
pub fn value(value: &Value, max: usize) -> Cow<'_, Value> {
    if compact_len(value) <= max { Cow::Borrowed(value) } else { Cow::Owned(digest(&value.to_string())) }
}

/// Bytes of `value`'s compact JSON (what `to_string` writes).
fn compact_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Counting cannot fail, nor can writing a `Value`.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The form an over-long value takes in the log.
fn digest(text: &str) -> Value {
    let mut cut = PREFIX_BYTES.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    json!({
        "truncated": true,
        "bytes": text.len(),
        "sha256": crate::text::sha256_hex(text),
        "prefix": &text[..cut],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_kept_and_large_ones_become_digest_and_prefix() {
        assert_eq!(string("claude-code", MAX_NAME_BYTES), json!("claude-code"));
        let long = "é".repeat(100_000);
        let kept = string(&long, MAX_NAME_BYTES);
        assert_eq!(kept["bytes"], 200_000);
        assert_eq!(kept["sha256"], crate::text::sha256_hex(&long));
        assert!(kept["prefix"].as_str().unwrap().len() <= PREFIX_BYTES);
        assert!(kept.to_string().len() < 600);
        let args = json!({ "path": "/w/a.log" });
        assert_eq!(value(&args, MAX_VALUE_BYTES).into_owned(), args);
        // The bound is on the compact JSON's bytes, escapes and all: kept at the bound,
        // digested one byte past it.
        let at_bound = json!({ "q": "\"é\n", "n": [1.5, -2, null] });
        let len = at_bound.to_string().len();
        assert!(matches!(value(&at_bound, len), Cow::Borrowed(_)));
        assert_eq!(value(&at_bound, len - 1)["bytes"], len);
        let big = json!({ "blob": "x".repeat(900_000) });
        let kept = value(&big, MAX_VALUE_BYTES);
        assert_eq!(kept["truncated"], true);
        assert!(kept["prefix"].as_str().unwrap().starts_with("{\"blob\":\"xxx"));
    }
}
