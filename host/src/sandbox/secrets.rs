//! `secrets`: values the host holds and the guest never sees.
//!
//! A granted secret is injected by the host into outbound requests to the hosts its
//! declaration names (over https, or plain http to a loopback address for local servers):
//! the guest builds the request, the header is added on its way out. Nothing else carries
//! the value, and a [`LeakScanner`] makes sure of it: every value this call's host side
//! holds (granted secrets, and granted environment values, which the guest does see) is
//! searched for, plain and in simple encodings (base64, base64url, hex, percent-encoding),
//!
//! - in every outbound request (URL, headers, streamed body): a hit blocks the request;
//! - in responses: a server that echoes the secret back gets it masked before the guest
//!   reads it (same length, so framing stays intact);
//! - in what the call hands back (output, metadata, proposed memories, logs, stdout and
//!   stderr) and in session values it stores: a hit is redacted or refused.
//!
//! Every hit is a denial in the call's report and so in the audit log, which names the
//! secret and the encoding, never the value. Values shorter than [`MIN_SCANNED_LEN`] are
//! not scanned (an env value like `1` or `en` would match everywhere).

use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use aho_corasick::{AhoCorasick, MatchKind};
use anyhow::Result;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi_http::Error as HttpError;

use super::capability::{CallSetup, Enforce};
use crate::capabilities::CapabilityKind;
use super::{CallState, Denial};
use crate::capabilities::SecretUse;
use crate::capabilities::secrets::LeakAction;
use crate::capabilities::secrets::Secrets;

/// Granted env values shorter than this are not scanned for; secrets always are, from 4 bytes.
pub const MIN_SCANNED_LEN: usize = 8;
const MIN_SECRET_LEN: usize = 4;

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
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::Plain => "as is",
            Encoding::Base64 => "base64-encoded",
            Encoding::Base64Url => "base64url-encoded",
            Encoding::Hex => "hex-encoded",
            Encoding::PercentEncoded => "percent-encoded",
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
        let Some(matcher) = &self.matcher else { return Vec::new() };
        let spans: Vec<(usize, usize, usize)> =
            matcher.find_iter(&*bytes).map(|m| (m.start(), m.end(), m.pattern().as_usize())).collect();
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
    let reserved = percent_encoding::percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string().into_bytes();
    out.push((Encoding::PercentEncoded, reserved));
    out
}

/// One call's secrets: where each goes, its value, the scanner over every held value, and
/// the leaks and refused uses seen so far (shared by the network gate, the session and the
/// final redaction).
pub struct CallSecrets {
    uses: Vec<SecretUse>,
    values: SecretValues,
    pub scanner: LeakScanner,
    denials: Mutex<Vec<Denial>>,
}

impl CallSecrets {
    /// From the effective secrets, their values and the granted env names (whose values the
    /// host holds too).
    pub fn new(uses: &[SecretUse], values: &SecretValues, env_names: &[String]) -> CallSecrets {
        let mut held: Vec<(String, String, usize)> = Vec::new();
        for u in uses {
            if let Some(v) = values.get(&u.name) {
                held.push((format!("secret {}", u.name), v.to_string(), MIN_SECRET_LEN));
            }
        }
        for name in env_names {
            if let Ok(v) = std::env::var(name) {
                held.push((format!("env {name}"), v, MIN_SCANNED_LEN));
            }
        }
        let scanner = LeakScanner::new(held.iter().map(|(s, v, n)| (s.clone(), v.as_str(), *n)));
        CallSecrets { uses: uses.to_vec(), values: values.clone(), scanner, denials: Mutex::new(Vec::new()) }
    }

    pub fn deny(&self, message: String) {
        if let Ok(mut d) = self.denials.lock()
            && !d.iter().any(|x| x.message == message)
        {
            d.push(Denial { capability: CapabilityKind::Secrets.into(), message });
        }
    }

    fn take_denials(&self) -> Vec<Denial> {
        self.denials.lock().map(|mut d| std::mem::take(&mut *d)).unwrap_or_default()
    }

    /// Redact held values from text the call hands back; each hit is a denial naming `what`.
    /// True when there was a hit.
    pub fn redact(&self, what: &str, text: &mut String) -> bool {
        let leaks = self.scanner.redact(text);
        for leak in &leaks {
            self.deny(format!("{what} carried {leak}: redacted"));
        }
        !leaks.is_empty()
    }

    /// Check an outbound request (URL and headers; the body is wrapped by the caller) and
    /// add the headers of the secrets meant for its host. `Err` is the reason to refuse it.
    pub fn prepare_request(
        &self,
        request: &mut http::Request<wasmtime_wasi_http::WasiBody>,
        scheme: &str,
        host: &str,
        url: &str,
    ) -> Result<(), HttpError> {
        if let Some(leak) = self.scanner.find(request.uri().to_string().as_bytes()) {
            self.deny(format!("HTTP request to {url} blocked: its URL carried {leak}"));
            return Err(HttpError::HttpRequestDenied);
        }
        for (name, value) in request.headers() {
            if let Some(leak) =
                self.scanner.find(value.as_bytes()).or_else(|| self.scanner.find(name.as_str().as_bytes()))
            {
                self.deny(format!("HTTP request to {url} blocked: its header `{name}` carried {leak}"));
                return Err(HttpError::HttpRequestDenied);
            }
        }
        let loopback = host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        for u in self.uses.iter().filter(|u| u.sent_to(host)) {
            if scheme != "https" && !loopback {
                self.deny(format!(
                    "secret {} not sent to {url}: secrets travel over https only (or plain http to a loopback address)",
                    u.name
                ));
                continue;
            }
            let Some(value) = self.values.get(&u.name) else {
                self.deny(format!(
                    "secret {} not sent to {url}: it has no value; set it with `skillhost secret set {}`",
                    u.name, u.name
                ));
                continue;
            };
            let (Ok(name), Ok(mut header)) = (
                http::HeaderName::from_bytes(u.header.as_bytes()),
                http::HeaderValue::from_str(&u.header_value(value)),
            ) else {
                self.deny(format!(
                    "secret {} not sent to {url}: its value cannot be written in an HTTP header",
                    u.name
                ));
                continue;
            };
            header.set_sensitive(true);
            request.headers_mut().insert(name, header);
        }
        Ok(())
    }

    /// Mask held values in a response's headers before the guest sees them.
    pub fn mask_response_headers(&self, url: &str, headers: &mut http::HeaderMap) {
        if self.scanner.is_empty() {
            return;
        }
        for value in headers.values_mut() {
            let mut bytes = value.as_bytes().to_vec();
            let leaks = self.scanner.mask(&mut bytes);
            if let Some(leak) = leaks.first() {
                self.deny(format!("the response from {url} echoed {leak} in a header: masked"));
                if let Ok(masked) = http::HeaderValue::from_bytes(&bytes) {
                    *value = masked;
                }
            }
        }
    }
}

/// What the body wrapper does with a held value it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnFind {
    /// Outbound: fail the stream before the value leaves.
    Block,
    /// Inbound: mask it and go on.
    Mask,
}

/// A body scanned as it streams. It holds back the last `longest - 1` bytes of what it
/// has seen, so a value split over two chunks is found before any of it is passed on.
pub struct ScannedBody<B> {
    inner: B,
    secrets: Arc<CallSecrets>,
    on_find: OnFind,
    url: String,
    pending: BytesMut,
    done: bool,
}

impl<B> ScannedBody<B> {
    pub fn new(inner: B, secrets: Arc<CallSecrets>, on_find: OnFind, url: String) -> ScannedBody<B> {
        ScannedBody { inner, secrets, on_find, url, pending: BytesMut::new(), done: false }
    }

    /// Scan what is pending; pass on all of it at the end, or all but the hold-back.
    fn release(&mut self, at_end: bool) -> Result<Option<Bytes>, HttpError> {
        match self.on_find {
            OnFind::Block => {
                if let Some(leak) = self.secrets.scanner.find(&self.pending) {
                    self.secrets.deny(format!("HTTP request to {} blocked: its body carried {leak}", self.url));
                    return Err(HttpError::HttpRequestDenied);
                }
            }
            OnFind::Mask => {
                if let Some(leak) = self.secrets.scanner.mask(&mut self.pending).first() {
                    self.secrets.deny(format!("the response from {} echoed {leak}: masked", self.url));
                }
            }
        }
        let keep = if at_end { 0 } else { self.secrets.scanner.longest.saturating_sub(1) };
        let ready = self.pending.len().saturating_sub(keep);
        Ok((ready > 0).then(|| self.pending.split_to(ready).freeze()))
    }
}

impl<B> Body for ScannedBody<B>
where
    B: Body<Data = Bytes, Error = HttpError> + Unpin,
{
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    return match this.release(true) {
                        Err(e) => Poll::Ready(Some(Err(e))),
                        Ok(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
                        Ok(None) => Poll::Ready(None),
                    };
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.pending.extend_from_slice(&data);
                        match this.release(false) {
                            Err(e) => {
                                this.done = true;
                                return Poll::Ready(Some(Err(e)));
                            }
                            Ok(Some(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                            Ok(None) => continue,
                        }
                    }
                    // Trailers: whatever is held back goes first, then the trailers.
                    Err(frame) => {
                        if !this.pending.is_empty() {
                            // Rare (trailers on a request or response of a skill): pass the
                            // held-back bytes and drop the trailers rather than reorder them.
                            this.done = true;
                            return match this.release(true) {
                                Err(e) => Poll::Ready(Some(Err(e))),
                                Ok(b) => Poll::Ready(b.map(|b| Ok(Frame::data(b)))),
                            };
                        }
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

impl Enforce for Secrets {
    type State = Arc<CallSecrets>;
    /// Secrets are no interface of their own: they ride on `wasi:http` (see `network`).
    const GOVERNS: &'static [&'static str] = &[];

    fn add_to_linker(_linker: &mut Linker<CallState>) -> Result<()> {
        Ok(())
    }

    fn prepare(
        _effective: &Vec<SecretUse>,
        call: &CallSetup<'_>,
        _: &mut WasiCtxBuilder,
        _: &mut Vec<Denial>,
    ) -> Result<Arc<CallSecrets>> {
        Ok(call.secrets.clone())
    }

    fn take_denials(state: &mut Arc<CallSecrets>) -> Vec<Denial> {
        state.take_denials()
    }

    fn redact(state: &Arc<CallSecrets>, what: &str, text: &mut String) -> bool {
        state.redact(what, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    fn scanner(value: &str) -> LeakScanner {
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
    fn a_value_split_across_chunks_is_held_back_and_blocked() {
        use http_body_util::BodyExt;
        let secrets = Arc::new(CallSecrets {
            uses: vec![],
            values: SecretValues::default(),
            scanner: scanner("split-secret-value"),
            denials: Mutex::new(Vec::new()),
        });
        let body = Chunks(["hello split-sec", "ret-value world"].into_iter().map(Bytes::from).collect());
        let scanned = ScannedBody::new(body, secrets.clone(), OnFind::Block, "http://x".into());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut sent = Vec::new();
        let result = rt.block_on(async {
            let mut b = scanned;
            while let Some(frame) = b.frame().await {
                match frame {
                    Ok(f) => sent.extend_from_slice(&f.into_data().unwrap()),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        assert!(result.is_err(), "the body must fail");
        assert!(!String::from_utf8_lossy(&sent).contains("split-sec"), "nothing of the value left: {sent:?}");
        assert!(secrets.take_denials()[0].message.contains("body carried the value of secret T"));
    }

    #[test]
    fn secrets_go_over_https_or_to_loopback_only() {
        let uses =
            vec![SecretUse { hosts: vec!["api.example.com".into(), "127.0.0.1".into()], ..SecretUse::named("T") }];
        let values = SecretValues::new([("T".to_string(), "token-value-1".to_string())].into());
        let secrets = CallSecrets::new(&uses, &values, &[]);
        use http_body_util::BodyExt;
        let request = |uri: &str| {
            http::Request::builder()
                .uri(uri)
                .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
                .unwrap()
        };
        let mut r = request("https://api.example.com/x");
        secrets.prepare_request(&mut r, "https", "api.example.com", "https://api.example.com:443/x").unwrap();
        assert_eq!(r.headers()["authorization"], "Bearer token-value-1");
        assert!(r.headers()["authorization"].is_sensitive());
        let mut r = request("http://api.example.com/x");
        secrets.prepare_request(&mut r, "http", "api.example.com", "http://api.example.com:80/x").unwrap();
        assert!(r.headers().get("authorization").is_none(), "never in cleartext over a network");
        let mut r = request("http://127.0.0.1:8080/x");
        secrets.prepare_request(&mut r, "http", "127.0.0.1", "http://127.0.0.1:8080/x").unwrap();
        assert!(r.headers().get("authorization").is_some(), "plain http to loopback is a local server");
        let mut r = request("https://other.example.com/x");
        secrets.prepare_request(&mut r, "https", "other.example.com", "https://other.example.com:443/x").unwrap();
        assert!(r.headers().get("authorization").is_none());
        let mut r = request("https://other.example.com/x?t=token-value-1");
        assert!(
            secrets.prepare_request(&mut r, "https", "other.example.com", "u").is_err(),
            "a leak in the URL is blocked"
        );
        let d = secrets.take_denials();
        assert!(d.iter().any(|d| d.message.contains("over https only")), "{d:?}");
        assert!(d.iter().any(|d| d.message.contains("URL carried the value of secret T")), "{d:?}");
    }

    /// A body that yields the given chunks, one per poll.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = HttpError;
        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }
}
