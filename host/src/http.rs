//! The host's own outbound HTTP: one pooled client under the LLM providers and `skill install
//! URL` (guest `wasi:http` is not here: it goes through the sandbox, which checks every request
//! against the skill's network grant).
//!
//! reqwest on hyper, HTTP/1.1, rustls with the `ring` provider and the webpki roots (the same
//! TLS stack wasmtime-wasi-http already builds, so no aws-lc and no system certificate code).
//! One client per proxy setting, cached for the process: connections to a provider are kept
//! alive and reused across the steps of a run and across concurrent runs, instead of one TCP
//! (and TLS) handshake per model call.
//!
//! - **Proxies** come from `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` and `NO_PROXY` (or their
//!   lower-case forms), read through an `env` function so tests never touch the process
//!   environment. Nothing else: no system proxy lookup.
//! - **Redirects** are followed up to [`MAX_REDIRECTS`] hops; a loop, a longer chain and a hop
//!   from https down to http are refused with a [`RedirectRefused`] naming the chain. Requests
//!   to an origin registered with [`keep_redirects_on_origin`] (an LLM provider, whose key may
//!   travel in a header such as `x-api-key` that reqwest would carry to another host) follow
//!   redirects only within that origin.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

/// Most redirect hops followed for one request.
pub const MAX_REDIRECTS: usize = 10;

/// Connecting (TCP and TLS) gives up after this long, whatever the request's own deadline.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Idle kept-alive connections are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

pub const USER_AGENT: &str = concat!("skillhost/", env!("CARGO_PKG_VERSION"));

/// Which proxy to use for which scheme, as the usual environment variables say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ProxySettings {
    /// For `http://` URLs (`HTTP_PROXY`, else `ALL_PROXY`).
    pub http: Option<String>,
    /// For `https://` URLs (`HTTPS_PROXY`, else `ALL_PROXY`).
    pub https: Option<String>,
    /// Hosts, domains (`.example.com`), IPs and CIDR ranges that bypass the proxy, comma
    /// separated; `*` bypasses it for everything.
    pub no_proxy: Option<String>,
}

impl ProxySettings {
    /// From `env` (empty variables count as unset; the upper-case name wins).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> ProxySettings {
        let var = |name: &str| {
            [name.to_string(), name.to_ascii_lowercase()]
                .iter()
                .find_map(|n| env(n).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()))
        };
        let all = var("ALL_PROXY");
        ProxySettings {
            http: var("HTTP_PROXY").or_else(|| all.clone()),
            https: var("HTTPS_PROXY").or(all),
            no_proxy: var("NO_PROXY"),
        }
    }

    /// From the process environment.
    pub fn from_process_env() -> ProxySettings {
        ProxySettings::from_env(&|name| std::env::var(name).ok())
    }
}

/// Why a client could not be built: a proxy URL that is not one, or TLS set-up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct HttpSetupError(pub String);

/// Why a redirect was not followed; found in a reqwest error's source chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefused {
    #[error("it redirects in a loop ({chain})")]
    Loop { chain: String },
    #[error("it redirects more than {MAX_REDIRECTS} times ({chain})")]
    TooMany { chain: String },
    #[error("it redirects from https down to plain http ({chain})")]
    Downgrade { chain: String },
    #[error("it redirects to another origin ({chain}); use the final address directly")]
    OtherOrigin { chain: String },
}

impl RedirectRefused {
    /// The refusal in `error`'s source chain, if a redirect was what failed.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a RedirectRefused> {
        let mut cause = Some(error);
        while let Some(current) = cause {
            if let Some(refused) = current.downcast_ref::<RedirectRefused>() {
                return Some(refused);
            }
            cause = current.source();
        }
        None
    }
}

/// The pooled client for `proxy` (built once per distinct setting, then shared).
pub fn client(proxy: &ProxySettings) -> Result<reqwest::Client, HttpSetupError> {
    static CLIENTS: Mutex<Option<HashMap<ProxySettings, reqwest::Client>>> = Mutex::new(None);
    let mut clients = CLIENTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let clients = clients.get_or_insert_with(HashMap::new);
    if let Some(client) = clients.get(proxy) {
        // A clone shares the pool.
        return Ok(client.clone());
    }
    let client = build(proxy)?;
    clients.insert(proxy.clone(), client.clone());
    Ok(client)
}

/// The pooled client for the process environment's proxy settings.
pub fn shared() -> Result<reqwest::Client, HttpSetupError> {
    client(&ProxySettings::from_process_env())
}

/// Requests first sent to `url`'s origin follow redirects only within that origin.
pub fn keep_redirects_on_origin(url: &reqwest::Url) {
    let mut origins = pinned_origins().write().unwrap_or_else(|poisoned| poisoned.into_inner());
    origins.insert(url.origin().ascii_serialization());
}

fn pinned_origins() -> &'static RwLock<BTreeSet<String>> {
    static ORIGINS: RwLock<BTreeSet<String>> = RwLock::new(BTreeSet::new());
    &ORIGINS
}

fn build(settings: &ProxySettings) -> Result<reqwest::Client, HttpSetupError> {
    let mut builder = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::custom(judge_redirect))
        // Only the settings given: no lookup of the process environment behind the caller's back.
        .no_proxy();
    let no_proxy = settings.no_proxy.as_deref().and_then(reqwest::NoProxy::from_string);
    for (scheme, url) in [("http", &settings.http), ("https", &settings.https)] {
        let Some(url) = url else { continue };
        let proxy = match scheme {
            "http" => reqwest::Proxy::http(url.as_str()),
            _ => reqwest::Proxy::https(url.as_str()),
        }
        .map_err(|e| {
            HttpSetupError(format!(
                "the {} proxy `{url}` is not a proxy URL ({e}); use e.g. http://127.0.0.1:3128",
                scheme.to_ascii_uppercase()
            ))
        })?;
        builder = builder.proxy(proxy.no_proxy(no_proxy.clone()));
    }
    builder.build().map_err(|e| HttpSetupError(format!("cannot set up the HTTP client: {e}")))
}

fn judge_redirect(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    match refusal(attempt.previous(), attempt.url()) {
        Some(refused) => attempt.error(refused),
        None => attempt.follow(),
    }
}

/// Why the hop from the chain `previous` to `next` is not followed, if it is not.
fn refusal(previous: &[reqwest::Url], next: &reqwest::Url) -> Option<RedirectRefused> {
    let chain = || previous.iter().chain(std::iter::once(next)).map(|u| u.as_str()).collect::<Vec<_>>().join(" -> ");
    if previous.contains(next) {
        return Some(RedirectRefused::Loop { chain: chain() });
    }
    if previous.len() > MAX_REDIRECTS {
        return Some(RedirectRefused::TooMany { chain: chain() });
    }
    if previous.last().is_some_and(|p| p.scheme() == "https") && next.scheme() == "http" {
        return Some(RedirectRefused::Downgrade { chain: chain() });
    }
    let first = previous.first()?;
    let origin = first.origin().ascii_serialization();
    let pinned = pinned_origins().read().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(&origin);
    (pinned && next.origin().ascii_serialization() != origin).then(|| RedirectRefused::OtherOrigin { chain: chain() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn proxy_settings_from_the_usual_variables() {
        let settings = ProxySettings::from_env(&env(&[
            ("https_proxy", "http://127.0.0.1:3128"),
            ("HTTP_PROXY", " http://127.0.0.1:8080 "),
            ("http_proxy", "http://ignored:1"),
            ("NO_PROXY", "localhost,.internal"),
        ]));
        assert_eq!(settings.http.as_deref(), Some("http://127.0.0.1:8080"), "upper case wins, trimmed");
        assert_eq!(settings.https.as_deref(), Some("http://127.0.0.1:3128"));
        assert_eq!(settings.no_proxy.as_deref(), Some("localhost,.internal"));

        let settings = ProxySettings::from_env(&env(&[("ALL_PROXY", "http://127.0.0.1:9"), ("HTTPS_PROXY", "")]));
        assert_eq!(
            (settings.http.as_deref(), settings.https.as_deref()),
            (Some("http://127.0.0.1:9"), Some("http://127.0.0.1:9"))
        );
        assert_eq!(ProxySettings::from_env(&env(&[])), ProxySettings::default());
    }

    #[test]
    fn a_bad_proxy_url_is_named() {
        let settings = ProxySettings { http: Some("http://[::1".into()), ..Default::default() };
        let message = client(&settings).unwrap_err().0;
        assert!(message.contains("HTTP proxy `http://[::1` is not a proxy URL"), "{message}");
    }

    fn urls(list: &[&str]) -> Vec<reqwest::Url> {
        list.iter().map(|u| reqwest::Url::parse(u).unwrap()).collect()
    }

    #[test]
    fn redirect_rules() {
        let next = |u: &str| reqwest::Url::parse(u).unwrap();
        assert_eq!(refusal(&urls(&["http://a.test/x"]), &next("http://b.test/y")), None, "another origin is fine");
        assert_eq!(
            refusal(&urls(&["http://a.test/1", "http://a.test/2"]), &next("http://a.test/1")),
            Some(RedirectRefused::Loop { chain: "http://a.test/1 -> http://a.test/2 -> http://a.test/1".into() })
        );
        let long: Vec<String> = (0..=MAX_REDIRECTS).map(|i| format!("http://a.test/{i}")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert!(matches!(refusal(&urls(&long), &next("http://a.test/end")), Some(RedirectRefused::TooMany { .. })));
        assert_eq!(
            refusal(&urls(&long[..MAX_REDIRECTS]), &next("http://a.test/end")),
            None,
            "{MAX_REDIRECTS} hops are fine"
        );
        assert!(matches!(
            refusal(&urls(&["https://a.test/"]), &next("http://a.test/")),
            Some(RedirectRefused::Downgrade { .. })
        ));
        keep_redirects_on_origin(&next("https://pinned.test:8443/v1"));
        assert!(matches!(
            refusal(&urls(&["https://pinned.test:8443/v1/x"]), &next("https://other.test/x")),
            Some(RedirectRefused::OtherOrigin { .. })
        ));
        assert_eq!(refusal(&urls(&["https://pinned.test:8443/v1/x"]), &next("https://pinned.test:8443/v2/x")), None);
    }
}
