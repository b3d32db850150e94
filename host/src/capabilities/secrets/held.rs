//! One call's secrets at work: [`CallSecrets`] injects each granted secret into outbound
//! requests to the hosts its declaration names, and [`ScannedBody`] runs every body that
//! crosses the sandbox's edge through the call's [`LeakScanner`] as it streams (outbound: a
//! find blocks the request; inbound: it is masked before the guest reads it). The rules are
//! told in [`super::enforce`]; this is the machinery the network gate, the session and the
//! final redaction share.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use wasmtime_wasi_http::Error as HttpError;

use super::leak_scan::{LeakScanner, MIN_SCANNED_LEN, MIN_SECRET_LEN, SecretValues};
use crate::capabilities::CapabilityKind;
use crate::capabilities::SecretUse;
use crate::sandbox::denial::Denial;

/// One call's secrets: where each goes, its value, the scanner over every held value, and
/// the leaks and refused uses seen so far (shared by the network gate, the session and the
/// final redaction).
pub struct CallSecrets {
    uses: Vec<SecretUse>,
    values: SecretValues,
    pub scanner: LeakScanner,
    denials: Mutex<Vec<Denial>>,
    /// The end of the last response body the guest read: a value split across two
    /// responses is masked in the second.
    inbound_tail: Mutex<Vec<u8>>,
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
        CallSecrets {
            uses: uses.to_vec(),
            values: values.clone(),
            scanner,
            denials: Mutex::new(Vec::new()),
            inbound_tail: Mutex::new(Vec::new()),
        }
    }

    pub fn deny(&self, message: String) {
        if let Ok(mut d) = self.denials.lock()
            && !d.iter().any(|x| x.message == message)
        {
            d.push(Denial { capability: CapabilityKind::Secrets.into(), message });
        }
    }

    pub(super) fn take_denials(&self) -> Vec<Denial> {
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
    /// add the headers of the secrets meant for its host. `Ok(true)` when a secret rides on
    /// it: the request then asks for an uncompressed answer, since compressed bytes hide an
    /// echo from the scanner ([`CallSecrets::check_response_coding`]). `Err` is the reason
    /// to refuse it.
    pub fn prepare_request(
        &self,
        request: &mut http::Request<wasmtime_wasi_http::WasiBody>,
        scheme: &str,
        host: &str,
        port: u16,
        url: &str,
    ) -> Result<bool, HttpError> {
        let mut carried = false;
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
        for u in &self.uses {
            if !u.sent_to(scheme, host, port) {
                if u.names_host(host) {
                    self.deny(format!(
                        "secret {} not sent to {url}: it is scoped to [{}] (scheme, host and port; a bare host means port 443 for https, 80 for http: write `{host}:{port}` to send it there)",
                        u.name,
                        u.hosts.join(", ")
                    ));
                }
                continue;
            }
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
            carried = true;
        }
        if carried {
            request.headers_mut().insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
        }
        Ok(carried)
    }

    /// A response to a request that carried a secret must come uncompressed: the guest can
    /// inflate what the scanner would see only as compressed bytes. `Err` refuses it.
    pub fn check_response_coding(&self, url: &str, headers: &http::HeaderMap) -> Result<(), HttpError> {
        let coded = headers
            .get_all(http::header::CONTENT_ENCODING)
            .iter()
            .chain(headers.get_all(http::header::TRANSFER_ENCODING).iter())
            .flat_map(|v| v.to_str().unwrap_or("?").split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .find(|c| !c.is_empty() && c != "identity" && c != "chunked");
        match coded {
            None => Ok(()),
            Some(coding) => {
                self.deny(format!(
                    "the response from {url} to a request carrying a secret was refused: it came {coding}-coded, which would hide an echo of the secret from the host's scan (the request asked for identity)"
                ));
                Err(HttpError::HttpResponseContentCoding(Some(coding)))
            }
        }
    }

    /// Mask held values in a response's headers before the guest sees them.
    pub fn mask_response_headers(&self, url: &str, headers: &mut http::HeaderMap) {
        if self.scanner.is_empty() {
            return;
        }
        // A header *name* cannot be masked in place: one that carries a value goes.
        let named: Vec<http::HeaderName> =
            headers.keys().filter(|n| self.scanner.find(n.as_str().as_bytes()).is_some()).cloned().collect();
        for name in named {
            if let Some(leak) = self.scanner.find(name.as_str().as_bytes()) {
                self.deny(format!("the response from {url} echoed {leak} in a header name: the header was dropped"));
            }
            headers.remove(&name);
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
    /// Inbound: the end of what was passed on so far (of this body, or of the previous
    /// response before this one's first bytes), scanned with what comes next.
    passed: Option<Vec<u8>>,
    /// Trailers seen, scanned, passed on after the held-back bytes.
    trailers: Option<http::HeaderMap>,
    done: bool,
}

impl<B> ScannedBody<B> {
    pub fn new(inner: B, secrets: Arc<CallSecrets>, on_find: OnFind, url: String) -> ScannedBody<B> {
        ScannedBody {
            inner,
            secrets,
            on_find,
            url,
            pending: BytesMut::new(),
            passed: None,
            trailers: None,
            done: false,
        }
    }

    /// Scan trailers as headers are: outbound a hit blocks, inbound it is masked (a name
    /// carrying a value is dropped).
    fn scan_trailers(&mut self, mut trailers: http::HeaderMap) -> Result<http::HeaderMap, HttpError> {
        match self.on_find {
            OnFind::Block => {
                let hit = trailers.iter().find_map(|(n, v)| {
                    self.secrets.scanner.find(v.as_bytes()).or_else(|| self.secrets.scanner.find(n.as_str().as_bytes()))
                });
                if let Some(leak) = hit {
                    self.secrets.deny(format!("HTTP request to {} blocked: its trailers carried {leak}", self.url));
                    return Err(HttpError::HttpRequestDenied);
                }
            }
            OnFind::Mask => {
                let url = format!("{} (trailers)", self.url);
                self.secrets.mask_response_headers(&url, &mut trailers);
            }
        }
        Ok(trailers)
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
                let before = self
                    .passed
                    .get_or_insert_with(|| self.secrets.inbound_tail.lock().map(|t| t.clone()).unwrap_or_default());
                if let Some(leak) = self.secrets.scanner.mask_after(before, &mut self.pending).first() {
                    self.secrets.deny(format!("the response from {} echoed {leak}: masked", self.url));
                }
            }
        }
        let window = self.secrets.scanner.longest().saturating_sub(1);
        let keep = if at_end { 0 } else { window };
        let ready = self.pending.len().saturating_sub(keep);
        let out = (ready > 0).then(|| self.pending.split_to(ready).freeze());
        if self.on_find == OnFind::Mask {
            let passed = self.passed.get_or_insert_with(Vec::new);
            if let Some(b) = &out {
                passed.extend_from_slice(b);
                let cut = passed.len().saturating_sub(window);
                passed.drain(..cut);
            }
            if at_end && let Ok(mut tail) = self.secrets.inbound_tail.lock() {
                tail.clone_from(passed);
            }
        }
        Ok(out)
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
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
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
                    // Trailers (the body's end): scanned, then passed on after whatever is
                    // held back.
                    Err(frame) => {
                        this.done = true;
                        let trailers = match frame.into_trailers() {
                            Ok(t) => match this.scan_trailers(t) {
                                Ok(t) => Some(t),
                                Err(e) => return Poll::Ready(Some(Err(e))),
                            },
                            Err(_) => None,
                        };
                        this.trailers = trailers;
                        return match this.release(true) {
                            Err(e) => Poll::Ready(Some(Err(e))),
                            Ok(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
                            Ok(None) => Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t)))),
                        };
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::secrets::leak_scan::tests::scanner;

    #[test]
    fn a_value_split_across_chunks_is_held_back_and_blocked() {
        use http_body_util::BodyExt;
        let secrets = Arc::new(CallSecrets {
            uses: vec![],
            values: SecretValues::default(),
            scanner: scanner("split-secret-value"),
            denials: Mutex::new(Vec::new()),
            inbound_tail: Mutex::new(Vec::new()),
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
            vec![SecretUse { hosts: vec!["api.example.com".into(), "127.0.0.1:8080".into()], ..SecretUse::named("T") }];
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
        secrets.prepare_request(&mut r, "https", "api.example.com", 443, "https://api.example.com:443/x").unwrap();
        assert_eq!(r.headers()["authorization"], "Bearer token-value-1");
        assert!(r.headers()["authorization"].is_sensitive());
        let mut r = request("http://api.example.com/x");
        secrets.prepare_request(&mut r, "http", "api.example.com", 80, "http://api.example.com:80/x").unwrap();
        assert!(r.headers().get("authorization").is_none(), "never in cleartext over a network");
        let mut r = request("http://127.0.0.1:8080/x");
        secrets.prepare_request(&mut r, "http", "127.0.0.1", 8080, "http://127.0.0.1:8080/x").unwrap();
        assert!(r.headers().get("authorization").is_some(), "plain http to loopback is a local server");
        let mut r = request("https://other.example.com/x");
        secrets.prepare_request(&mut r, "https", "other.example.com", 443, "https://other.example.com:443/x").unwrap();
        assert!(r.headers().get("authorization").is_none());
        let mut r = request("https://other.example.com/x?t=token-value-1");
        assert!(
            secrets.prepare_request(&mut r, "https", "other.example.com", 443, "u").is_err(),
            "a leak in the URL is blocked"
        );
        let d = secrets.take_denials();
        assert!(d.iter().any(|d| d.message.contains("over https only")), "{d:?}");
        assert!(d.iter().any(|d| d.message.contains("URL carried the value of secret T")), "{d:?}");
    }

    fn mask_secrets() -> Arc<CallSecrets> {
        Arc::new(CallSecrets {
            uses: vec![],
            values: SecretValues::default(),
            scanner: scanner("split-secret-value"),
            denials: Mutex::new(Vec::new()),
            inbound_tail: Mutex::new(Vec::new()),
        })
    }

    /// What the guest reads of `body` through an inbound scan: data, and trailers.
    fn read_masked<B: Body<Data = Bytes, Error = HttpError> + Unpin>(
        body: B,
        secrets: &Arc<CallSecrets>,
    ) -> (Vec<u8>, Option<http::HeaderMap>) {
        use http_body_util::BodyExt;
        let mut b = ScannedBody::new(body, secrets.clone(), OnFind::Mask, "http://x".into());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let (mut data, mut trailers) = (Vec::new(), None);
            while let Some(frame) = b.frame().await {
                let frame = frame.unwrap();
                match frame.into_data() {
                    Ok(d) => data.extend_from_slice(&d),
                    Err(f) => trailers = f.into_trailers().ok(),
                }
            }
            (data, trailers)
        })
    }

    #[test]
    fn a_value_split_across_two_responses_never_meets_in_the_guest() {
        let secrets = mask_secrets();
        let (first, _) = read_masked(Chunks(["hello split-sec".into()].into()), &secrets);
        let (second, _) = read_masked(Chunks(["ret-value world".into()].into()), &secrets);
        let joined = String::from_utf8_lossy(&[first, second].concat()).into_owned();
        assert!(!joined.contains("split-secret-value"), "{joined}");
        assert!(joined.ends_with(" world") && joined.starts_with("hello "), "only the value is masked: {joined}");
        assert!(secrets.take_denials()[0].message.contains("echoed the value of secret T"));
    }

    #[test]
    fn trailers_are_scanned_and_passed_on_after_the_data() {
        let secrets = mask_secrets();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-echo", "Bearer split-secret-value".parse().unwrap());
        trailers.insert(http::HeaderName::from_static("x-split-secret-value"), "1".parse().unwrap());
        trailers.insert("x-fine", "ok".parse().unwrap());
        let body = WithTrailers(Some(Bytes::from("data")), Some(trailers));
        let (data, trailers) = read_masked(body, &secrets);
        assert_eq!(data, b"data");
        let t = trailers.expect("the trailers reach the guest");
        assert_eq!(t["x-fine"], "ok");
        assert!(!format!("{t:?}").contains("split-secret-value"), "{t:?}");
        assert!(t.contains_key("x-echo"), "a value is masked in place");
        let d = secrets.take_denials();
        assert!(d.iter().any(|d| d.message.contains("header name")), "{d:?}");
    }

    #[test]
    fn a_compressed_answer_to_a_request_carrying_a_secret_is_refused() {
        let secrets = mask_secrets();
        let mut h = http::HeaderMap::new();
        assert!(secrets.check_response_coding("u", &h).is_ok());
        h.insert(http::header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(secrets.check_response_coding("u", &h).is_ok());
        for coding in ["gzip", "br", "deflate", "identity, GZIP", "zstd"] {
            h.insert(http::header::CONTENT_ENCODING, coding.parse().unwrap());
            assert!(secrets.check_response_coding("u", &h).is_err(), "{coding}");
        }
        assert!(secrets.take_denials()[0].message.contains("gzip-coded"));
    }

    /// A body of one data chunk, then trailers.
    struct WithTrailers(Option<Bytes>, Option<http::HeaderMap>);

    impl Body for WithTrailers {
        type Data = Bytes;
        type Error = HttpError;
        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
            let frame = match self.0.take() {
                Some(d) => Some(Frame::data(d)),
                None => self.1.take().map(Frame::trailers),
            };
            Poll::Ready(frame.map(Ok))
        }
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
