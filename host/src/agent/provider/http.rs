//! POSTing JSON to an LLM service: timeouts, retries with backoff, and HTTP failures turned into
//! [`ProviderError`] sentences.
//!
//! The transport is the host's one pooled client ([`crate::http`]): kept-alive connections
//! reused across the steps of a run, the proxy settings of the environment, redirects kept on
//! the provider's own origin (its key may travel in a header another host must not see).

use std::error::Error as StdError;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::Value;

use super::config::ProviderConfig;
use super::stream::{Broken, SseParser, StreamEvent, StreamFold, StreamObserver};
use super::{ProviderError, RetryNotice, RetryObserver, RetryReason};
use crate::http::RedirectRefused;

/// Larger replies are refused: no chat completion or embedding is anywhere near this.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Who is on the other end, for error sentences.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// e.g. "OpenAI-compatible provider at http://127.0.0.1:11434/v1".
    pub label: String,
    /// The variable that holds (or should hold) the key.
    pub key_env: String,
    /// What to tell the user when nothing answers.
    pub unreachable_hint: String,
}

/// The model a request is for, and the setting that chooses it, named when the server does not
/// know it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelRef<'a> {
    pub name: &'a str,
    pub setting: &'static str,
}

#[derive(Debug, Clone, Copy)]
struct RetryPolicy {
    timeout: Duration,
    max_retries: u32,
    backoff_base: Duration,
    max_backoff: Duration,
}

pub(crate) struct JsonClient {
    endpoint: Endpoint,
    policy: RetryPolicy,
    /// A handle on the shared pool (cloning a reqwest client shares its connections).
    http: reqwest::Client,
    /// Told before every wait between attempts, so the user sees why nothing happens.
    on_retry: Option<RetryObserver>,
}

/// How one attempt failed.
enum AttemptError {
    /// The connection broke mid-exchange (reset, closed early): worth another attempt.
    Dropped(String),
    /// A streamed reply broke (cut, bad chunk, error event): worth another attempt.
    Broken(Broken),
    /// Final.
    Fatal(ProviderError),
}

/// What an attempt got: a whole reply (any status), or a streamed 2xx reply already
/// folded into the JSON its unstreamed form has.
enum Answer {
    Whole(RawReply),
    Streamed(Value),
}

/// Reading the reply as server-sent events: a fresh fold per attempt, and who is shown it.
pub(crate) struct Streaming<'a> {
    pub fold: &'a (dyn Fn() -> Box<dyn StreamFold> + Sync),
    pub observer: &'a StreamObserver,
}

struct RawReply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl JsonClient {
    pub fn new(
        endpoint: Endpoint,
        config: &ProviderConfig,
        on_retry: Option<RetryObserver>,
    ) -> Result<JsonClient, ProviderError> {
        let http = crate::http::client(&config.proxy)
            .map_err(|error| ProviderError::Config(format!("cannot reach the {}: {error}", endpoint.label)))?;
        if let Ok(base) = reqwest::Url::parse(&config.base_url) {
            crate::http::keep_redirects_on_origin(&base);
        }
        Ok(JsonClient {
            endpoint,
            policy: RetryPolicy {
                timeout: config.timeout,
                max_retries: config.max_retries,
                backoff_base: config.backoff_base,
                max_backoff: config.max_backoff,
            },
            http,
            on_retry,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// POSTs `body` to `url` and returns the JSON of a 2xx reply, retrying 408/429/5xx and
    /// dropped connections up to `max_retries` times.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &Value,
        model: ModelRef<'_>,
    ) -> Result<Value, ProviderError> {
        self.post_maybe_streamed(url, headers, body, model, None).await
    }

    /// [`JsonClient::post`] for a request that asks for a streamed reply: each piece goes to
    /// the observer as it arrives, and the result is the JSON the unstreamed reply would have
    /// been. A stream that breaks is retried like a dropped connection. A server that ignores
    /// `stream` and answers with plain JSON is read as such.
    pub async fn post_streamed(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &Value,
        model: ModelRef<'_>,
        streaming: Streaming<'_>,
    ) -> Result<Value, ProviderError> {
        self.post_maybe_streamed(url, headers, body, model, Some(streaming)).await
    }

    async fn post_maybe_streamed(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &Value,
        model: ModelRef<'_>,
        streaming: Option<Streaming<'_>>,
    ) -> Result<Value, ProviderError> {
        let url = reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| {
                ProviderError::Config(format!(
                    "`{url}` is not a valid URL for the {}; check the base URL",
                    self.endpoint.label
                ))
            })?;
        let headers = self.headers(headers)?;
        let body = Bytes::from(body.to_string());
        let attempts = self.policy.max_retries.saturating_add(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            tracing::debug!(url = %url, attempt, attempts, "provider request");
            let outcome = tokio::time::timeout(
                self.policy.timeout,
                self.attempt(&url, headers.clone(), body.clone(), streaming.as_ref()),
            )
            .await;
            let (reason, wait, asked) = match outcome {
                // A timeout is retried like a 5xx: a loaded server often answers the next one.
                Err(_) => {
                    if attempt >= attempts {
                        return Err(ProviderError::Timeout {
                            provider: self.endpoint.label.clone(),
                            after: self.policy.timeout,
                            attempts,
                        });
                    }
                    (RetryReason::Timeout { after: self.policy.timeout }, self.backoff(attempt), None)
                }
                Ok(Err(AttemptError::Fatal(error))) => return Err(error),
                Ok(Err(AttemptError::Dropped(reason))) => {
                    if attempt >= attempts {
                        return Err(ProviderError::Unreachable {
                            provider: self.endpoint.label.clone(),
                            reason: format!("{reason} (on all {attempts} attempts)"),
                            hint: self.endpoint.unreachable_hint.clone(),
                        });
                    }
                    (RetryReason::Dropped, self.backoff(attempt), None)
                }
                Ok(Err(AttemptError::Broken(broken))) => {
                    if attempt >= attempts {
                        return Err(ProviderError::BrokenStream {
                            provider: self.endpoint.label.clone(),
                            attempts,
                            detail: broken.detail,
                        });
                    }
                    tracing::debug!(detail = %broken.detail, "the streamed reply broke");
                    (RetryReason::BrokenStream { fault: broken.fault }, self.backoff(attempt), None)
                }
                Ok(Ok(Answer::Streamed(value))) => return Ok(value),
                Ok(Ok(Answer::Whole(reply))) if reply.status.is_success() => return self.parse_json(&reply.body),
                Ok(Ok(Answer::Whole(reply))) if is_retryable(reply.status) => {
                    if attempt >= attempts {
                        return Err(self.exhausted(&reply, attempts));
                    }
                    let backoff = self.backoff(attempt);
                    let asked = retry_after(&reply.headers, SystemTime::now());
                    let wait = match asked {
                        // The server knows when it will take us again; backoff is only a floor
                        // against a `Retry-After: 0` hammering loop.
                        Some(asked) => asked.max(backoff.min(Duration::from_millis(100))),
                        None => backoff,
                    }
                    .min(self.policy.max_backoff);
                    let reason = if reply.status == StatusCode::TOO_MANY_REQUESTS {
                        RetryReason::RateLimited
                    } else {
                        RetryReason::Status { status: reply.status.as_u16() }
                    };
                    (reason, wait, asked)
                }
                Ok(Ok(Answer::Whole(reply))) => return Err(self.rejected(&reply, model)),
            };
            if let Some(observer) = &self.on_retry {
                observer(&RetryNotice {
                    provider: self.endpoint.label.clone(),
                    reason,
                    failed_attempt: attempt,
                    attempts,
                    wait_ms: wait.as_millis() as u64,
                    retry_after_ms: asked.map(|a| a.as_millis() as u64),
                    capped: asked.is_some_and(|a| a > wait),
                });
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// The request headers, checked once: the only user-supplied value is the key.
    fn headers(&self, extra: &[(&'static str, String)]) -> Result<HeaderMap, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        for (name, value) in extra {
            let value = HeaderValue::from_str(value).map_err(|_| {
                ProviderError::Config(format!(
                    "cannot build the request to the {}: a header value is not valid HTTP; check {} for stray characters such as newlines",
                    self.endpoint.label, self.endpoint.key_env
                ))
            })?;
            headers.insert(HeaderName::from_static(name), value);
        }
        Ok(headers)
    }

    /// Exponential backoff with up to 50% jitter, so clients that failed together do not
    /// retry together.
    fn backoff(&self, attempt: u32) -> Duration {
        let exponential = self.policy.backoff_base.saturating_mul(1 << (attempt - 1).min(16));
        let jitter = exponential.mul_f64(fastrand::f64() * 0.5);
        (exponential + jitter).min(self.policy.max_backoff)
    }

    fn parse_json(&self, body: &[u8]) -> Result<Value, ProviderError> {
        serde_json::from_slice(body).map_err(|error| ProviderError::BadResponse {
            provider: self.endpoint.label.clone(),
            detail: format!("the body is not JSON ({error}): {}", excerpt(body)),
        })
    }

    fn exhausted(&self, reply: &RawReply, attempts: u32) -> ProviderError {
        let provider = self.endpoint.label.clone();
        let detail = error_detail(&reply.body);
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            ProviderError::RateLimited { provider, attempts, detail }
        } else {
            ProviderError::Server { provider, status: reply.status.as_u16(), attempts, detail }
        }
    }

    fn rejected(&self, reply: &RawReply, model: ModelRef<'_>) -> ProviderError {
        let provider = self.endpoint.label.clone();
        let detail = error_detail(&reply.body);
        match reply.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ProviderError::Auth {
                provider,
                status: reply.status.as_u16(),
                detail,
                key_env: self.endpoint.key_env.clone(),
            },
            StatusCode::NOT_FOUND => ProviderError::NotFound {
                provider,
                model: model.name.to_string(),
                setting: model.setting.to_string(),
                detail,
            },
            status => {
                ProviderError::Rejected { provider, status: status.as_u16(), model: model.name.to_string(), detail }
            }
        }
    }

    async fn attempt(
        &self,
        url: &reqwest::Url,
        mut headers: HeaderMap,
        body: Bytes,
        streaming: Option<&Streaming<'_>>,
    ) -> Result<Answer, AttemptError> {
        if streaming.is_some() {
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        let sent = self.http.post(url.clone()).headers(headers).body(body).send().await;
        let mut response = sent.map_err(|error| self.classify(url, &error))?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let is_event_stream = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
        if let Some(streaming) = streaming
            && status.is_success()
            && is_event_stream
        {
            return self.read_stream(response, streaming).await.map(Answer::Streamed);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| self.classify(url, &error))? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(AttemptError::Fatal(ProviderError::BadResponse {
                    provider: self.endpoint.label.clone(),
                    detail: format!("the reply is larger than {} MiB", MAX_RESPONSE_BYTES >> 20),
                }));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer::Whole(RawReply { status, headers, body: Bytes::from(body) }))
    }

    /// Read a 2xx event stream to its end, folding and showing each event.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        streaming: &Streaming<'_>,
    ) -> Result<Value, AttemptError> {
        let mut parser = SseParser::default();
        let mut fold = (streaming.fold)();
        let mut received = 0usize;
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                // The headers were HTTP: a body that fails now is a stream cut short.
                Err(error) => {
                    return Err(AttemptError::Broken(Broken {
                        fault: super::stream::StreamFault::Cut,
                        detail: format!("the stream was cut after {received} bytes ({})", innermost(&error)),
                    }));
                }
            };
            received += chunk.len();
            if received > MAX_RESPONSE_BYTES {
                return Err(AttemptError::Fatal(ProviderError::BadResponse {
                    provider: self.endpoint.label.clone(),
                    detail: format!("the streamed reply is larger than {} MiB", MAX_RESPONSE_BYTES >> 20),
                }));
            }
            for event in parser.push(&chunk) {
                fold.event(&event, streaming.observer).map_err(AttemptError::Broken)?;
            }
        }
        let value = fold.finish().map_err(|mut broken| {
            if parser.has_partial() {
                broken.detail.push_str(" (the body ends in the middle of an event)");
            }
            broken.detail = format!("{} after {received} bytes", broken.detail);
            AttemptError::Broken(broken)
        })?;
        (streaming.observer)(StreamEvent::End);
        Ok(value)
    }

    /// A failed exchange: refused or failed connections and refused redirects are final,
    /// dropped connections are retried, anything else (a reply that is not HTTP) is final.
    fn classify(&self, url: &reqwest::Url, error: &reqwest::Error) -> AttemptError {
        let unreachable = |reason: String| {
            AttemptError::Fatal(ProviderError::Unreachable {
                provider: self.endpoint.label.clone(),
                reason,
                hint: self.endpoint.unreachable_hint.clone(),
            })
        };
        if let Some(refused) = RedirectRefused::find(error) {
            return unreachable(format!("the request was not sent on: {refused}"));
        }
        if error.is_connect() {
            if let Some(io) = io_cause(error)
                && is_connect_failure(io)
            {
                return unreachable(connect_reason(io));
            }
            if url.scheme() == "https" {
                return unreachable(format!("TLS handshake failed: {}", innermost(error)));
            }
            return unreachable(innermost(error));
        }
        classify_exchange(&self.endpoint.label, error)
    }
}

/// The first I/O error in `error`'s source chain.
fn io_cause<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a std::io::Error> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cause = current.source();
    }
    None
}

/// The I/O kinds a failed TCP connect reports (a TLS failure is reported in other kinds).
fn is_connect_failure(io: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(io.kind(), ConnectionRefused | TimedOut | HostUnreachable | NetworkUnreachable | AddrNotAvailable)
}

/// The last message of the source chain: the actual cause, without reqwest's wrapping.
fn innermost(error: &(dyn StdError + 'static)) -> String {
    let mut last = error;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::REQUEST_TIMEOUT || status.is_server_error()
}

/// `Retry-After` as delay-seconds or an HTTP date; OpenAI's `retry-after-ms` when present.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) =
        headers.get("retry-after-ms").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(86_400.0)));
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A failure during the HTTP exchange: dropped connections are retried, anything else (a reply
/// that is not HTTP) is final.
fn classify_exchange(provider: &str, error: &(dyn StdError + 'static)) -> AttemptError {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(hyper_error) = current.downcast_ref::<hyper::Error>()
            && (hyper_error.is_incomplete_message() || hyper_error.is_canceled() || hyper_error.is_closed())
        {
            return AttemptError::Dropped("the server closed the connection before answering".to_string());
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof) {
                return AttemptError::Dropped(format!("the connection was dropped ({io})"));
            }
        }
        cause = current.source();
    }
    AttemptError::Fatal(ProviderError::BadResponse {
        provider: provider.to_string(),
        detail: format!("the reply is not valid HTTP ({error})"),
    })
}

fn connect_reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match error.kind() {
        ConnectionRefused => "connection refused".to_string(),
        TimedOut => "connecting timed out".to_string(),
        HostUnreachable | NetworkUnreachable => "no route to the host".to_string(),
        _ => error.to_string(),
    }
}

/// The service's own error message when the body is the usual `{"error": {"message": ...}}`
/// (OpenAI, Anthropic, Ollama, vLLM all use it), else the start of the body.
fn error_detail(body: &[u8]) -> String {
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        let message = json
            .pointer("/error/message")
            .or_else(|| json.get("error").filter(|e| e.is_string()))
            .or_else(|| json.get("message"))
            .and_then(Value::as_str);
        if let Some(message) = message {
            return one_line(message, 300);
        }
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return "empty body".to_string();
    }
    format!("body: {}", excerpt(body))
}

fn excerpt(body: &[u8]) -> String {
    one_line(&String::from_utf8_lossy(body), 200)
}

/// `text` on one line, cut after `max_chars` characters with `...`.
fn one_line(text: &str, max_chars: usize) -> String {
    crate::text::cut(&crate::text::flatten(text), max_chars, "...")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn retry_after_seconds_date_and_ms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(&headers(&[("retry-after", "7")]), now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(12));
        assert_eq!(retry_after(&headers(&[("retry-after", &later)]), now), Some(Duration::from_secs(12)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(12));
        assert_eq!(retry_after(&headers(&[("retry-after", &past)]), now), Some(Duration::ZERO));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7"), ("retry-after-ms", "250")]), now),
            Some(Duration::from_millis(250))
        );
        // A hostile header cannot overflow the Duration: capped at a day.
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "1e30")]), now), Some(Duration::from_secs(86_400)));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-3")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn error_detail_prefers_the_service_message() {
        let body = br#"{"error": {"message": "Incorrect API key\nprovided", "type": "invalid_request_error"}}"#;
        assert_eq!(error_detail(body), "Incorrect API key provided");
        assert_eq!(error_detail(br#"{"error": "model 'x' not found"}"#), "model 'x' not found");
        assert_eq!(error_detail(b"<html>Bad Gateway</html>"), "body: <html>Bad Gateway</html>");
        assert_eq!(error_detail(b"  "), "empty body");
        let long = "x".repeat(500);
        assert_eq!(error_detail(long.as_bytes()).len(), "body: ".len() + 200 + 3);
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter_and_cap() {
        let mut config = ProviderConfig::openai("http://127.0.0.1:1/v1", "m");
        config.backoff_base = Duration::from_millis(100);
        config.max_backoff = Duration::from_millis(1000);
        let endpoint = Endpoint { label: "test".into(), key_env: "K".into(), unreachable_hint: "h".into() };
        let client = JsonClient::new(endpoint, &config, None).unwrap();
        for _ in 0..50 {
            let first = client.backoff(1);
            assert!(first >= Duration::from_millis(100) && first <= Duration::from_millis(150), "{first:?}");
            let third = client.backoff(3);
            assert!(third >= Duration::from_millis(400) && third <= Duration::from_millis(600), "{third:?}");
            assert_eq!(client.backoff(10), Duration::from_millis(1000));
        }
    }
}
