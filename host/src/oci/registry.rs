//! The OCI distribution API, spoken directly over the host's pooled reqwest client
//! ([`crate::http`]): the handful of endpoints a push and a pull need (manifests by tag or
//! digest, blobs, monolithic uploads) plus the bearer-token handshake. `oci-client` would
//! bring a second reqwest (0.13) and TLS stack for the same few requests.
//!
//! Everything read is bounded: a manifest by [`Limits::manifest_bytes`], a blob by the size
//! its descriptor states (and [`Limits::blob_bytes`]), every read by a first-byte and a
//! between-bytes timeout and a total deadline. Every blob is checked against its digest and
//! size before it is used; a manifest's digest is computed from the bytes received, never
//! taken from a header.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A parsed `oci://HOST[:PORT]/REPOSITORY(:TAG|@sha256:HEX)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference> {
        let usage = "expected oci://HOST[:PORT]/REPOSITORY:TAG or oci://HOST[:PORT]/REPOSITORY@sha256:DIGEST";
        let rest = s.strip_prefix("oci://").ok_or_else(|| anyhow!("`{s}` is not an oci:// reference ({usage})"))?;
        let (registry, path) = rest.split_once('/').ok_or_else(|| anyhow!("`{s}` has no repository ({usage})"))?;
        let port_ok = match registry.rsplit_once(':') {
            Some((_, p)) if !registry.ends_with(']') => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()),
            _ => true,
        };
        if registry.is_empty()
            || !port_ok
            || !registry.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        {
            bail!("`{s}`: `{registry}` is not a registry host[:port]");
        }
        let (path, digest) = match path.split_once('@') {
            Some((p, d)) => {
                super::cosign::check_digest(d)?;
                (p, Some(d.to_string()))
            }
            None => (path, None),
        };
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, Some(t.to_string())),
            _ => (path, None),
        };
        if let Some(t) = &tag
            && (t.is_empty()
                || t.len() > 128
                || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                || t.starts_with(['.', '-']))
        {
            bail!("`{s}`: `{t}` is not a tag (letters, digits, `.`, `_`, `-`)");
        }
        let segment_ok = |seg: &str| {
            !seg.is_empty()
                && seg.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
                && seg.starts_with(|c: char| c.is_ascii_alphanumeric())
        };
        if repository.is_empty() || !repository.split('/').all(segment_ok) {
            bail!(
                "`{s}`: `{repository}` is not a repository name (lowercase path segments of letters, digits, `.`, `_`, `-`)"
            );
        }
        if tag.is_none() && digest.is_none() {
            bail!("`{s}` names no tag or digest ({usage})");
        }
        Ok(Reference { registry: registry.into(), repository: repository.into(), tag, digest })
    }

    /// `HOST[:PORT]/REPOSITORY`: what signatures and trust rules name.
    pub fn repository_path(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The same repository at `digest`.
    pub fn at_digest(&self, digest: &str) -> String {
        format!("oci://{}@{digest}", self.repository_path())
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "oci://{}", self.repository_path())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// A content descriptor of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Descriptor {
    pub fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: digest_of(bytes),
            size: bytes.len() as u64,
            annotations: None,
        }
    }
}

/// An OCI image manifest (the fields skillhost writes and reads).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<serde_json::Map<String, serde_json::Value>>,
}

pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::text::sha256_hex(bytes))
}

/// Size and time bounds of everything read from a registry.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub manifest_bytes: u64,
    pub blob_bytes: u64,
    pub first_byte: Duration,
    pub between_bytes: Duration,
    /// One manifest or blob, start to end.
    pub total: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            manifest_bytes: 4 << 20,
            blob_bytes: 256 << 20,
            first_byte: Duration::from_secs(30),
            between_bytes: Duration::from_secs(30),
            total: Duration::from_secs(600),
        }
    }
}

/// How to authenticate to a registry. `Debug` shows the user name, never a secret.
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    Anonymous,
    /// A user and password: sent as HTTP basic auth to the registry, or to its token service
    /// in the bearer handshake.
    Basic { user: String, password: String },
    /// A registry token used as it is (`--registry-token`, config.json `registrytoken`).
    Bearer(String),
    /// An OAuth2 refresh token (config.json `identitytoken`, what `docker login` stores for
    /// some registries): exchanged at the token service for an access token.
    IdentityToken(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Anonymous => f.write_str("Anonymous"),
            Auth::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, password: <redacted> }}"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
        }
    }
}

impl Auth {
    /// What a refusal names: the kind of credentials and the user, no secret.
    fn describe(&self) -> String {
        match self {
            Auth::Anonymous => "no credentials".into(),
            Auth::Basic { user, .. } => format!("the password of user `{user}`"),
            Auth::Bearer(_) => "the registry token".into(),
            Auth::IdentityToken(_) => "the identity token".into(),
        }
    }
}

impl Auth {
    /// The entry for `registry` in a docker `config.json` (`{"auths": {HOST: {"auth":
    /// base64(user:password)} | {"username", "password"} | {"registrytoken"}}}`).
    pub fn from_docker_config(text: &str, registry: &str) -> Result<Auth> {
        #[derive(Deserialize)]
        struct Config {
            #[serde(default)]
            auths: std::collections::BTreeMap<String, Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            auth: Option<String>,
            username: Option<String>,
            password: Option<String>,
            registrytoken: Option<String>,
            identitytoken: Option<String>,
        }
        let config: Config = serde_json::from_str(text).map_err(|e| anyhow!("not a docker config.json: {e}"))?;
        let entry = config.auths.iter().find(|(k, _)| {
            let k = k.trim_start_matches("https://").trim_start_matches("http://");
            k.trim_end_matches('/') == registry
        });
        let Some((_, e)) = entry else { return Ok(Auth::Anonymous) };
        if let Some(t) = e.registrytoken.clone() {
            return Ok(Auth::Bearer(t));
        }
        if let Some(t) = e.identitytoken.clone() {
            return Ok(Auth::IdentityToken(t));
        }
        if let Some(a) = &e.auth {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(a.trim())
                .map_err(|_| anyhow!("the `auth` of {registry} in config.json is not base64"))?;
            let text = String::from_utf8(decoded).map_err(|_| anyhow!("the `auth` of {registry} is not UTF-8"))?;
            let (user, password) =
                text.split_once(':').ok_or_else(|| anyhow!("the `auth` of {registry} is not user:password"))?;
            return Ok(Auth::Basic { user: user.into(), password: password.into() });
        }
        match (&e.username, &e.password) {
            (Some(u), Some(p)) => Ok(Auth::Basic { user: u.clone(), password: p.clone() }),
            _ => Ok(Auth::Anonymous),
        }
    }
}

/// Is `registry` (`HOST[:PORT]`) on loopback?
pub fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => registry.rsplit_once(':').map_or(registry, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// One registry: its base URL, credentials and bounds.
pub struct Registry {
    client: reqwest::Client,
    base: String,
    registry: String,
    auth: Auth,
    /// `--insecure-registry` hosts: a token realm there may be plain http too.
    insecure: Vec<String>,
    token: std::sync::Mutex<Option<String>>,
    pub limits: Limits,
}

impl Registry {
    /// https, or plain http for a loopback registry or one in `insecure` (`--insecure-registry`).
    pub fn new(registry: &str, insecure: &[String], auth: Auth) -> Result<Registry> {
        let scheme = if is_loopback(registry) || insecure.iter().any(|h| h == registry) { "http" } else { "https" };
        let client = crate::http::shared().map_err(|e| anyhow!("cannot reach {registry}: {e}"))?;
        Ok(Registry {
            client,
            base: format!("{scheme}://{registry}"),
            registry: registry.into(),
            auth,
            insecure: insecure.to_vec(),
            token: std::sync::Mutex::new(None),
            limits: Limits::default(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v2/{path}", self.base)
    }

    /// Send, answering a 401 bearer challenge once (anonymous or with the basic credentials).
    async fn send(&self, make: &dyn Fn() -> reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let first = self.authorized(make()).send();
        let response = tokio::time::timeout(self.limits.first_byte, first)
            .await
            .map_err(|_| anyhow!("{} did not answer within {} s", self.registry, self.limits.first_byte.as_secs()))?
            .map_err(|e| anyhow!("cannot reach the registry {}: {}", self.registry, chain(&e)))?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if !challenge.to_ascii_lowercase().starts_with("bearer ") || matches!(self.auth, Auth::Bearer(_)) {
            return Err(self.refused());
        }
        let token = self.fetch_token(&challenge).await?;
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token);
        let again = self.authorized(make()).send();
        tokio::time::timeout(self.limits.first_byte, again)
            .await
            .map_err(|_| anyhow!("{} did not answer within {} s", self.registry, self.limits.first_byte.as_secs()))?
            .map_err(|e| anyhow!("cannot reach the registry {}: {}", self.registry, chain(&e)))
    }

    fn authorized(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(t) = self.token.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return rb.bearer_auth(t);
        }
        match &self.auth {
            Auth::Anonymous => rb,
            Auth::Basic { user, password } => rb.basic_auth(user, Some(password)),
            Auth::Bearer(t) => rb.bearer_auth(t),
            // Only ever sent to the token service.
            Auth::IdentityToken(_) => rb,
        }
    }

    /// The error for a 401 that credentials did not (or could not) answer.
    fn refused(&self) -> anyhow::Error {
        match self.auth {
            Auth::Anonymous => anyhow!(
                "{} asks for credentials (401): give them in a docker config.json (`auths` entry for {0}; --registry-config FILE) or --registry-token",
                self.registry
            ),
            _ => anyhow!(
                "{} refused {} (401): check the credentials for {0} in the docker config.json (or --registry-token)",
                self.registry,
                self.auth.describe()
            ),
        }
    }

    async fn fetch_token(&self, challenge: &str) -> Result<String> {
        let params = parse_challenge(&challenge[7..]);
        let realm = params.iter().find(|(k, _)| k == "realm").map(|(_, v)| v.clone());
        let realm = realm.ok_or_else(|| anyhow!("{} sent a bearer challenge without a realm", self.registry))?;
        let mut url = reqwest::Url::parse(&realm).map_err(|e| anyhow!("token realm `{realm}`: {e}"))?;
        // Credentials travel to the realm: over https, or plain http only where the registry
        // itself may be spoken to in the clear (loopback, --insecure-registry).
        let realm_host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => bail!("token realm `{realm}` of {} has no host", self.registry),
        };
        if url.scheme() != "https"
            && !(url.scheme() == "http" && (is_loopback(&realm_host) || self.insecure.contains(&realm_host)))
        {
            bail!(
                "{} sends its token service to `{realm}`, which is not https; refusing to send credentials there (--insecure-registry {realm_host} if you mean it)",
                self.registry
            );
        }
        let rb = match &self.auth {
            // OAuth2: the refresh token is exchanged by POST (the distribution token spec).
            Auth::IdentityToken(t) => {
                let mut form: Vec<(&str, &str)> =
                    vec![("grant_type", "refresh_token"), ("refresh_token", t.as_str()), ("client_id", "skillhost")];
                for (k, v) in params.iter().filter(|(k, _)| k == "service" || k == "scope") {
                    form.push((k.as_str(), v.as_str()));
                }
                self.client.post(url).form(&form)
            }
            auth => {
                for (k, v) in params.iter().filter(|(k, _)| k == "service" || k == "scope") {
                    url.query_pairs_mut().append_pair(k, v);
                }
                let rb = self.client.get(url);
                match auth {
                    Auth::Basic { user, password } => rb.basic_auth(user, Some(password)),
                    _ => rb,
                }
            }
        };
        let response = tokio::time::timeout(self.limits.first_byte, rb.send())
            .await
            .map_err(|_| anyhow!("the token service of {} did not answer", self.registry))?
            .map_err(|e| anyhow!("cannot reach the token service of {}: {}", self.registry, chain(&e)))?;
        if matches!(response.status(), reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN) {
            return Err(self.refused());
        }
        if !response.status().is_success() {
            bail!("the token service of {} answered {}", self.registry, response.status());
        }
        let body = self.read(response, 1 << 20, "the token").await?;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| anyhow!("token answer: {e}"))?;
        v.get("token")
            .or(v.get("access_token"))
            .and_then(|t| t.as_str())
            .map(String::from)
            .ok_or_else(|| anyhow!("the token service of {} sent no token", self.registry))
    }

    /// Read a body of at most `max` bytes within the time bounds.
    async fn read(&self, mut response: reqwest::Response, max: u64, what: &str) -> Result<Vec<u8>> {
        if response.content_length().is_some_and(|n| n > max) {
            bail!("{what} from {} is larger than {max} bytes; refusing it", self.registry);
        }
        let deadline = Instant::now() + self.limits.total;
        let mut bytes = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = self.limits.between_bytes.min(left);
            let chunk = tokio::time::timeout(wait, response.chunk()).await.map_err(|_| {
                anyhow!(
                    "{what} from {} stalled (nothing for {} s, or over the {} s bound)",
                    self.registry,
                    wait.as_secs_f32(),
                    self.limits.total.as_secs()
                )
            })?;
            let Some(chunk) =
                chunk.map_err(|e| anyhow!("reading {what} from {} failed: {}", self.registry, chain(&e)))?
            else {
                break;
            };
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > max {
                bail!("{what} from {} is larger than {max} bytes; refusing it", self.registry);
            }
        }
        Ok(bytes)
    }

    /// The manifest `reference` (a tag or a digest) of `repository`, and its digest computed
    /// from the bytes; `None` when the registry has none (404).
    pub async fn manifest(&self, repository: &str, reference: &str) -> Result<Option<(String, Vec<u8>)>> {
        let url = self.url(&format!("{repository}/manifests/{reference}"));
        let accept = format!("{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json");
        let response = self.send(&|| self.client.get(&url).header(reqwest::header::ACCEPT, &accept)).await?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            bail!("{} answered {} for the manifest {repository}:{reference}", self.registry, response.status());
        }
        let bytes = self.read(response, self.limits.manifest_bytes, "the manifest").await?;
        let digest = digest_of(&bytes);
        if reference.starts_with("sha256:") && digest != reference {
            bail!(
                "{} served a manifest for {reference} whose bytes hash to {digest}: the registry or something on the way altered it; refusing it",
                self.registry
            );
        }
        Ok(Some((digest, bytes)))
    }

    /// The blob `d` of `repository`, checked against its digest and size.
    pub async fn blob(&self, repository: &str, d: &Descriptor) -> Result<Vec<u8>> {
        super::cosign::check_digest(&d.digest)?;
        if d.size > self.limits.blob_bytes {
            bail!(
                "the manifest lists a {} byte blob ({}), over the limit of {}",
                d.size,
                d.digest,
                self.limits.blob_bytes
            );
        }
        let url = self.url(&format!("{repository}/blobs/{}", d.digest));
        let response = self.send(&|| self.client.get(&url)).await?;
        if !response.status().is_success() {
            bail!("{} answered {} for the blob {}", self.registry, response.status(), d.digest);
        }
        let bytes = self.read(response, d.size, &format!("the blob {}", d.digest)).await?;
        let actual = digest_of(&bytes);
        if bytes.len() as u64 != d.size || actual != d.digest {
            bail!(
                "the blob {} from {} is {} bytes hashing to {actual} (the manifest says {} bytes): it was tampered with; refusing it",
                d.digest,
                self.registry,
                bytes.len(),
                d.size
            );
        }
        Ok(bytes)
    }

    /// Upload `bytes` as a blob of `repository` (skipped when the registry has it).
    pub async fn push_blob(&self, repository: &str, bytes: &[u8]) -> Result<String> {
        let digest = digest_of(bytes);
        let head = self.url(&format!("{repository}/blobs/{digest}"));
        if self.send(&|| self.client.head(&head)).await?.status().is_success() {
            return Ok(digest);
        }
        let start = self.url(&format!("{repository}/blobs/uploads/"));
        let r = self.send(&|| self.client.post(&start).header(reqwest::header::CONTENT_LENGTH, "0")).await?;
        if r.status() != reqwest::StatusCode::ACCEPTED {
            bail!("{} refused an upload to {repository} ({})", self.registry, r.status());
        }
        let location = r
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| anyhow!("{} started an upload without a Location", self.registry))?;
        let mut url = reqwest::Url::parse(&self.base)?.join(location).context("the upload Location")?;
        url.query_pairs_mut().append_pair("digest", &digest);
        let body = bytes.to_vec();
        let r = self
            .send(&|| {
                self.client
                    .put(url.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(body.clone())
            })
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            bail!("{} refused the blob {digest} ({})", self.registry, r.status());
        }
        Ok(digest)
    }

    /// Store `bytes` as the manifest `reference` (a tag) of `repository`; returns its digest.
    pub async fn push_manifest(&self, repository: &str, reference: &str, bytes: &[u8]) -> Result<String> {
        let url = self.url(&format!("{repository}/manifests/{reference}"));
        let body = bytes.to_vec();
        let r = self
            .send(&|| self.client.put(&url).header(reqwest::header::CONTENT_TYPE, OCI_MANIFEST).body(body.clone()))
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            let status = r.status();
            let text = self.read(r, 4096, "the error").await.unwrap_or_default();
            bail!(
                "{} refused the manifest {repository}:{reference} ({status}): {}",
                self.registry,
                String::from_utf8_lossy(&text)
            );
        }
        Ok(digest_of(bytes))
    }
}

/// `realm="…",service="…",scope="…"` as pairs.
fn parse_challenge(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while let Some((k, after)) = rest.split_once('=') {
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (v, next) = match after.strip_prefix('"') {
            Some(q) => match q.split_once('"') {
                Some((v, n)) => (v.to_string(), n),
                None => (q.to_string(), ""),
            },
            None => match after.split_once(',') {
                Some((v, n)) => (v.to_string(), n),
                None => (after.to_string(), ""),
            },
        };
        out.push((k, v));
        rest = next.trim_start_matches(',').trim();
    }
    out
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(r) = crate::http::RedirectRefused::find(e) {
        return r.to_string();
    }
    let mut parts = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cause = c.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_bad_ones_say_why() {
        let r = Reference::parse("oci://127.0.0.1:5000/alice/my-skill:1.2.0").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "alice/my-skill", Some("1.2.0"))
        );
        let d = format!("sha256:{}", "0".repeat(64));
        let r = Reference::parse(&format!("oci://reg/a/b@{d}")).unwrap();
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert!(Reference::parse("oci://reg/a/b").unwrap_err().to_string().contains("no tag or digest"));
        assert!(Reference::parse("oci://reg/../b:1").is_err());
        assert!(Reference::parse("oci://reg/a/b@sha256:xyz").is_err());
        assert!(Reference::parse("oci://bundle:tool/a:1").is_err());
        assert!(Reference::parse("oci://[::1]:5000/a:1").is_ok());
        assert!(is_loopback("127.0.0.1:5000") && is_loopback("[::1]:80") && is_loopback("localhost:1"));
        assert!(!is_loopback("registry.example:5000"));
        let p = parse_challenge(r#"realm="http://127.0.0.1:1/token",service="reg",scope="repository:a:pull""#);
        assert_eq!(p[0], ("realm".into(), "http://127.0.0.1:1/token".into()));
        assert_eq!(p[2].1, "repository:a:pull");
        let cfg = r#"{"auths":{"reg:5000":{"auth":"dXNlcjpwYXNz"}}}"#;
        assert!(
            matches!(Auth::from_docker_config(cfg, "reg:5000").unwrap(), Auth::Basic { user, password } if user == "user" && password == "pass")
        );
        assert!(matches!(Auth::from_docker_config(cfg, "other").unwrap(), Auth::Anonymous));
    }
}
