//! Finding a held value in bytes: the [`LeakScanner`] of [`super::enforce`]. Every value a
//! call's host side holds (granted secrets, and granted environment values, which the guest
//! does see) is searched for plain and in the encodings a guest can undo (base64, base64url,
//! hex, percent-encoding as `encodeURIComponent` and Python's `quote` write it, JSON escapes,
//! reversed, lowercased), with one Aho-Corasick automaton over all of them. What is done with
//! a find (block, mask, redact) is [`super::held`]'s business.

use std::collections::BTreeMap;
use std::fmt;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;

use crate::capabilities::secrets::LeakAction;

/// Granted env values shorter than this are not scanned for; secrets always are, from 4 bytes.
pub const MIN_SCANNED_LEN: usize = 8;
pub(super) const MIN_SECRET_LEN: usize = 4;

/// Secret values for one call, by name, and what a leak of any held value does. `Debug`
/// never shows a value.
#[derive(Clone, Default)]
pub struct SecretValues {
    values: BTreeMap<String, String>,
    on_leak: LeakAction,
}

impl SecretValues {
    pub fn new(values: BTreeMap<String, String>) -> SecretValues {
        SecretValues { values, on_leak: LeakAction::default() }
    }

    /// The same values, with `on_leak` applied to the call's leaks.
    pub fn on_leak(self, on_leak: LeakAction) -> SecretValues {
        SecretValues { on_leak, ..self }
    }

    pub fn leak_action(&self) -> LeakAction {
        self.on_leak
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
}

impl fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.values.keys()).finish()
    }
}

/// How a held value was written where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Plain,
    Base64,
    Base64Url,
    Hex,
    PercentEncoded,
    /// As a JSON string escapes it: `\/` for `/`, or `\u00XX` for every byte.
    JsonEscaped,
    /// Backwards, for a guest that reverses what it reads.
    Reversed,
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::Plain => "as is",
            Encoding::Base64 => "base64-encoded",
            Encoding::Base64Url => "base64url-encoded",
            Encoding::Hex => "hex-encoded",
            Encoding::PercentEncoded => "percent-encoded",
            Encoding::JsonEscaped => "JSON-escaped",
            Encoding::Reversed => "reversed",
        })
    }
}

/// A held value found somewhere it must not be: which one, and how it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// `secret NAME` or `env NAME`.
    pub source: String,
    pub encoding: Encoding,
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the value of {} ({})", self.source, self.encoding)
    }
}

/// Finds held values, plain or encoded, in text and bytes.
pub struct LeakScanner {
    matcher: Option<AhoCorasick>,
    /// Per pattern: index into `sources`, and the encoding.
    patterns: Vec<(usize, Encoding)>,
    sources: Vec<String>,
    /// The longest pattern: a streamed body holds back this many bytes less one.
    longest: usize,
}

impl LeakScanner {
    /// The length of the longest pattern: a streaming scan holds back one byte less, so a
    /// value split across chunks is found before any of it is passed on.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// `values`: (source label such as `secret GITHUB_TOKEN`, value, minimum length to scan).
    pub fn new<'a>(values: impl IntoIterator<Item = (String, &'a str, usize)>) -> LeakScanner {
        let mut needles: Vec<Vec<u8>> = Vec::new();
        let mut patterns = Vec::new();
        let mut sources = Vec::new();
        for (source, value, min_len) in values {
            if value.len() < min_len {
                continue;
            }
            let idx = sources.len();
            sources.push(source);
            for (encoding, needle) in encodings(value.as_bytes()) {
                if needle.len() >= MIN_SECRET_LEN && !needles.contains(&needle) {
                    needles.push(needle);
                    patterns.push((idx, encoding));
                }
            }
        }
        let longest = needles.iter().map(Vec::len).max().unwrap_or(0);
        let matcher = (!needles.is_empty())
            .then(|| AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&needles).ok())
            .flatten();
        LeakScanner { matcher, patterns, sources, longest }
    }

    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    fn leak(&self, pattern: usize) -> Leak {
        let (source, encoding) = self.patterns[pattern];
        Leak { source: self.sources[source].clone(), encoding }
    }

    /// The first held value in `haystack`.
    pub fn find(&self, haystack: &[u8]) -> Option<Leak> {
        let m = self.matcher.as_ref()?.find(haystack)?;
        Some(self.leak(m.pattern().as_usize()))
    }

    /// Replace every held value in `text` with a marker naming it; the leaks found.
    pub fn redact(&self, text: &mut String) -> Vec<Leak> {
        let Some(matcher) = &self.matcher else { return Vec::new() };
        let mut found = Vec::new();
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for m in matcher.find_iter(text.as_bytes()) {
            let leak = self.leak(m.pattern().as_usize());
            // Patterns are UTF-8 and so is the text: matches start and end on char boundaries.
            out.push_str(&text[last..m.start()]);
            out.push_str(&format!("[redacted: {}]", leak.source));
            last = m.end();
            if !found.contains(&leak) {
                found.push(leak);
            }
        }
        if !found.is_empty() {
            out.push_str(&text[last..]);
            *text = out;
        }
        found
    }

    /// Mask every held value in `bytes` with `*`, keeping the length; the leaks found.
    pub fn mask(&self, bytes: &mut [u8]) -> Vec<Leak> {
        self.mask_after(&[], bytes)
    }

    /// [`LeakScanner::mask`] for `bytes` that the reader will see right after `before`
    /// (already passed on): a value that starts in `before` is masked from where `bytes`
    /// begins, so the two halves never meet.
    pub fn mask_after(&self, before: &[u8], bytes: &mut [u8]) -> Vec<Leak> {
        let Some(matcher) = &self.matcher else { return Vec::new() };
        let mut joined = before.to_vec();
        joined.extend_from_slice(bytes);
        let at = before.len();
        let spans: Vec<(usize, usize, usize)> = matcher
            .find_iter(&joined)
            .filter(|m| m.end() > at)
            .map(|m| (m.start().saturating_sub(at), m.end() - at, m.pattern().as_usize()))
            .collect();
        let mut found = Vec::new();
        for (start, end, pattern) in spans {
            bytes[start..end].fill(b'*');
            let leak = self.leak(pattern);
            if !found.contains(&leak) {
                found.push(leak);
            }
        }
        found
    }
}

/// `value` as it may appear: plain, base64 (standard and URL-safe, at each of the three
/// alignments a value can have inside a longer encoded text), hex and percent-encoding.
fn encodings(value: &[u8]) -> Vec<(Encoding, Vec<u8>)> {
    let mut out = vec![(Encoding::Plain, value.to_vec())];
    // Header names reach the guest lowercased.
    if value.to_ascii_lowercase() != value {
        out.push((Encoding::Plain, value.to_ascii_lowercase()));
    }
    for (encoding, engine) in [
        (Encoding::Base64, &base64::engine::general_purpose::STANDARD_NO_PAD),
        (Encoding::Base64Url, &base64::engine::general_purpose::URL_SAFE_NO_PAD),
    ] {
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(value);
            let text = engine.encode(&shifted);
            // Characters that depend only on the value's bits: from the first whole sextet
            // after the offset's bytes to the last whole sextet before the end.
            let start = (8 * offset).div_ceil(6);
            let end = (8 * (offset + value.len())) / 6;
            if end > start + 3 {
                out.push((encoding, text.as_bytes()[start..end].to_vec()));
            }
        }
    }
    out.push((Encoding::Hex, hex::encode(value).into_bytes()));
    out.push((Encoding::Hex, hex::encode_upper(value).into_bytes()));
    let all: String = value.iter().map(|b| format!("%{b:02X}")).collect();
    out.push((Encoding::PercentEncoded, all.to_ascii_lowercase().into_bytes()));
    out.push((Encoding::PercentEncoded, all.into_bytes()));
    for set in [percent_encoding::NON_ALPHANUMERIC, URI_COMPONENT, PYTHON_QUOTE] {
        out.push((Encoding::PercentEncoded, percent_encoding::percent_encode(value, set).to_string().into_bytes()));
    }
    let escaped: String = value.iter().map(|b| format!("\\u{b:04x}")).collect();
    out.push((Encoding::JsonEscaped, escaped.to_ascii_uppercase().replace("\\U", "\\u").into_bytes()));
    out.push((Encoding::JsonEscaped, escaped.into_bytes()));
    if value.contains(&b'/') {
        let slashes: Vec<u8> =
            value.iter().flat_map(|&b| if b == b'/' { vec![b'\\', b'/'] } else { vec![b] }).collect();
        out.push((Encoding::JsonEscaped, slashes));
    }
    out.push((Encoding::Reversed, value.iter().rev().copied().collect()));
    out
}

/// What JavaScript's `encodeURIComponent` leaves as is: letters, digits and `-_.!~*'()`.
const URI_COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');
/// What Python's `urllib.parse.quote` leaves as is: letters, digits, `_.-~` and `/`.
const PYTHON_QUOTE: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'_').remove(b'.').remove(b'-').remove(b'~').remove(b'/');

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    pub(in crate::capabilities::secrets) fn scanner(value: &str) -> LeakScanner {
        LeakScanner::new([("secret T".to_string(), value, MIN_SECRET_LEN)])
    }

    #[test]
    fn finds_plain_and_encoded_values_at_any_alignment() {
        let value = "ghp_s3cr3t+/value?&=42";
        let s = scanner(value);
        for prefix in ["", "a", "ab", "abc"] {
            let raw = format!("{prefix}{value} trailing");
            for (enc, text) in [
                (Encoding::Plain, raw.clone()),
                (Encoding::Base64, STANDARD.encode(&raw)),
                (Encoding::Base64Url, URL_SAFE.encode(&raw)),
                (Encoding::Hex, hex::encode(&raw)),
                (Encoding::Hex, hex::encode_upper(&raw)),
                (
                    Encoding::PercentEncoded,
                    percent_encoding::utf8_percent_encode(&raw, percent_encoding::NON_ALPHANUMERIC).to_string(),
                ),
            ] {
                let leak = s
                    .find(text.as_bytes())
                    .unwrap_or_else(|| panic!("{enc:?} with prefix {prefix:?} not found in {text}"));
                assert_eq!(leak.source, "secret T");
            }
        }
        assert!(s.find(b"nothing to see here, ghp_s3cr3t").is_none());
    }

    #[test]
    fn redaction_names_the_source_and_masking_keeps_the_length() {
        let s = scanner("hunter2hunter2");
        let mut text = "pw=hunter2hunter2; again: hunter2hunter2".to_string();
        let leaks = s.redact(&mut text);
        assert_eq!(text, "pw=[redacted: secret T]; again: [redacted: secret T]");
        assert_eq!(leaks.len(), 1);
        let mut bytes = b"{\"auth\":\"Bearer hunter2hunter2\"}".to_vec();
        let before = bytes.len();
        assert_eq!(s.mask(&mut bytes).len(), 1);
        assert_eq!(bytes.len(), before);
        assert!(!String::from_utf8_lossy(&bytes).contains("hunter2"));
    }

    #[test]
    fn short_values_are_not_scanned() {
        let s = LeakScanner::new([("env LANG".to_string(), "en", MIN_SCANNED_LEN)]);
        assert!(s.is_empty());
        assert!(s.find(b"en en en").is_none());
    }

    #[test]
    fn finds_the_escapings_a_guest_can_undo() {
        let value = "ghp_s3cr3t+/value?&=42 x";
        let s = scanner(value);
        let json_u: String = value.bytes().map(|b| format!("\\u{b:04X}")).collect();
        for (enc, text) in [
            (Encoding::PercentEncoded, "ghp_s3cr3t%2B%2Fvalue%3F%26%3D42%20x".to_string()),
            (Encoding::PercentEncoded, "ghp_s3cr3t%2B/value%3F%26%3D42%20x".to_string()),
            (Encoding::JsonEscaped, value.replace('/', "\\/")),
            (Encoding::JsonEscaped, json_u.clone()),
            (Encoding::JsonEscaped, json_u.to_ascii_lowercase().replace("\\U", "\\u")),
            (Encoding::Reversed, value.chars().rev().collect()),
        ] {
            let leak = s.find(format!("{{\"echo\": \"{text}\"}}").as_bytes());
            assert_eq!(leak.map(|l| l.encoding), Some(enc), "{text}");
        }
        let mut name = b"x-sk-live-abcdef".to_vec();
        assert_eq!(scanner("SK-Live-ABCDEF").mask(&mut name).len(), 1, "header names come lowercased");
    }
}
