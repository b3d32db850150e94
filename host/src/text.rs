//! Small text helpers used across the host: hex sha256 of bytes and of a file listing (a
//! version's identity), whitespace flattened to one line, and text cut to a number of
//! characters (never inside a character). One implementation each, so a summary line, an
//! audit preview and a terminal line cut text the same way, and an install record, a bundle
//! and its signature name a version by the same hash.

use std::collections::BTreeMap;

use sha2::{Digest as _, Sha256};

/// The sha256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes.as_ref()))
}

/// The identity of a version: sha256 over every file's path and sha256, in path order.
pub fn content_hash(files: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (rel, sha) in files {
        h.update(rel.as_bytes());
        h.update(b"\0");
        h.update(sha.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

/// `text` on one line: every run of whitespace (newlines included) becomes one space, and
/// leading and trailing whitespace goes.
pub fn flatten(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `max_chars` characters of `text`, with `marker` after them when something was
/// cut; `text` itself when it is no longer.
pub fn cut(text: &str, max_chars: usize, marker: &str) -> String {
    match text.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}{marker}", &text[..i]),
        None => text.to_string(),
    }
}

/// `text` flattened ([`flatten`]) and cut after `max_chars` characters with `…`.
pub fn one_line(text: &str, max_chars: usize) -> String {
    cut(&flatten(text), max_chars, "…")
}

/// `text` flattened and, if longer than `max_chars` characters, cut so that it is
/// `max_chars` long with the `…` it ends with (for columns of a fixed width).
pub fn fit_line(text: &str, max_chars: usize) -> String {
    let flat = flatten(text);
    if flat.chars().count() <= max_chars {
        return flat;
    }
    cut(&flat, max_chars.saturating_sub(1), "…")
}

/// `text` cut after `max_chars` characters, followed by what `said` says of the number of
/// characters cut (for a model, which should know that it did not see everything).
pub fn cut_counted(text: &str, max_chars: usize, said: impl Fn(usize) -> String) -> String {
    match text.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}{}", &text[..i], said(text[i..].chars().count())),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_hex() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex("abc"), sha256_hex(b"abc"));
    }

    #[test]
    fn lines_are_flattened_and_cut_on_characters() {
        assert_eq!(flatten("  a\n\tb  c \r\n"), "a b c");
        assert_eq!(one_line("a\nb", 3), "a b");
        assert_eq!(one_line("é é é", 3), "é é…");
        assert_eq!(cut("abcdef", 3, "..."), "abc...");
        assert_eq!(cut("abc", 3, "..."), "abc");
        assert_eq!(fit_line("abcdef", 6), "abcdef");
        assert_eq!(fit_line("abcdefg", 6), "abcde…");
        assert_eq!(fit_line("abcdefg", 6).chars().count(), 6);
        assert_eq!(cut_counted("abcdef", 2, |n| format!(" [{n} more]")), "ab [4 more]");
        assert_eq!(cut_counted("ab", 2, |n| format!(" [{n} more]")), "ab");
    }
}
