//! `secrets`: named secrets the host injects into outbound HTTP requests to named hosts.
//! The guest never holds a value: it asks for a request, the host adds the header on its
//! way out (see `sandbox::secrets`).
//!
//! SKILL.md declares where each secret may go and how it is written:
//!
//! ```yaml
//! capabilities:
//!   network: [https://api.github.com]
//!   secrets:
//!     - name: GITHUB_TOKEN
//!       hosts: [api.github.com]
//!       header: Authorization      # the default
//!       format: "Bearer {}"        # the default; `{}` is the value
//! ```
//!
//! The policy grants a secret by name (`secrets = ["GITHUB_TOKEN"]`), optionally narrowing
//! its hosts (`{ name = "GITHUB_TOKEN", hosts = ["api.github.com"] }`). A grant never adds
//! a host, a header or a format the skill did not declare.

pub(crate) mod enforce;
pub(crate) mod held;
pub(crate) mod leak_scan;

use std::fmt;

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use super::{Capability, CapabilityKind};

/// The `secrets` capability: where each named secret may be sent.
pub struct Secrets;

pub const DEFAULT_HEADER: &str = "Authorization";
pub const DEFAULT_FORMAT: &str = "Bearer {}";

/// Headers a secret may not be written into: they frame or route the request.
const FORBIDDEN_HEADERS: &[&str] =
    &["host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive"];

/// One secret and where it goes. In a policy, a bare name means "where the skill declares".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SecretUseRepr", into = "SecretUseRepr")]
pub struct SecretUse {
    pub name: String,
    /// Host names (`api.github.com`, `*.example.com` for subdomains) or addresses the value
    /// is sent to. Empty only in a policy grant: "every host the skill declares".
    pub hosts: Vec<String>,
    pub header: String,
    /// The header value, with `{}` standing for the secret.
    pub format: String,
}

impl SecretUse {
    pub fn named(name: &str) -> SecretUse {
        SecretUse { name: name.into(), hosts: Vec::new(), header: DEFAULT_HEADER.into(), format: DEFAULT_FORMAT.into() }
    }

    /// Is a request to `scheme://host:port` (host with brackets stripped from IPv6) one
    /// this secret is sent to? An entry names the host and, unless it says `host:port`, the
    /// scheme's default port: another service on the same host (an echo, a log) gets nothing.
    pub fn sent_to(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.hosts.iter().filter_map(|h| HostEntry::parse(h).ok()).any(|e| e.covers(scheme, host, port))
    }

    /// Whether an entry names `host` at some other port or scheme (to say why nothing was sent).
    pub fn names_host(&self, host: &str) -> bool {
        self.hosts.iter().filter_map(|h| HostEntry::parse(h).ok()).any(|e| host_matches(e.host, host))
    }

    /// The header value carrying `value`.
    pub fn header_value(&self, value: &str) -> String {
        self.format.replacen("{}", value, 1)
    }
}

/// One `hosts` entry: `host`, `host:port` or `[v6]:port`, optionally after `https://` or
/// `http://`.
struct HostEntry<'a> {
    scheme: Option<&'a str>,
    host: &'a str,
    port: Option<u16>,
}

impl<'a> HostEntry<'a> {
    fn parse(entry: &'a str) -> Result<HostEntry<'a>, String> {
        let (scheme, rest) = match entry.split_once("://") {
            Some((s @ ("https" | "http"), rest)) => (Some(s), rest),
            Some((s, _)) => return Err(format!("`{entry}`: a secret goes over https or http, not {s}")),
            None => (None, entry),
        };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| format!("`{entry}`: unclosed `[`"))?;
            (host, after.strip_prefix(':'))
        } else {
            match rest.split_once(':') {
                Some((h, p)) if !p.contains(':') => (h, Some(p)),
                _ => (rest, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("`{entry}`: `{p}` is not a port (1-65535)"))?,
            ),
        };
        Ok(HostEntry { scheme, host, port })
    }

    fn covers(&self, scheme: &str, host: &str, port: u16) -> bool {
        let default = if scheme == "http" { 80 } else { 443 };
        self.scheme.is_none_or(|s| s == scheme) && self.port.unwrap_or(default) == port && host_matches(self.host, host)
    }
}

fn host_matches(pattern: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(domain) => {
            host.len() > domain.len() + 1 && host.ends_with(domain) && {
                let cut = host.len() - domain.len();
                host.as_bytes()[cut - 1] == b'.'
            }
        }
        None => host == pattern,
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum SecretUseRepr {
    Name(String),
    Full {
        name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hosts: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<String>,
    },
}

impl From<SecretUseRepr> for SecretUse {
    fn from(r: SecretUseRepr) -> SecretUse {
        match r {
            SecretUseRepr::Name(name) => SecretUse::named(&name),
            SecretUseRepr::Full { name, hosts, header, format } => SecretUse {
                name,
                hosts: hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
                header: header.unwrap_or_else(|| DEFAULT_HEADER.into()),
                format: format.unwrap_or_else(|| DEFAULT_FORMAT.into()),
            },
        }
    }
}

impl From<SecretUse> for SecretUseRepr {
    fn from(s: SecretUse) -> SecretUseRepr {
        let default_shape = s.header == DEFAULT_HEADER && s.format == DEFAULT_FORMAT;
        if s.hosts.is_empty() && default_shape {
            return SecretUseRepr::Name(s.name);
        }
        SecretUseRepr::Full {
            name: s.name,
            hosts: s.hosts,
            header: (s.header != DEFAULT_HEADER).then_some(s.header),
            format: (s.format != DEFAULT_FORMAT).then_some(s.format),
        }
    }
}

impl fmt::Display for SecretUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts = if self.hosts.is_empty() { "the declared hosts".to_string() } else { self.hosts.join(", ") };
        write!(f, "{} -> {hosts} ({}: {})", self.name, self.header, self.format.replacen("{}", "…", 1))
    }
}

/// Secret and variable names: what `env` accepts, at most 64 characters.
pub fn validate_secret_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{name}` is not a secret name (1-64 letters, digits, `_`)"));
    }
    Ok(())
}

fn validate_host(entry: &str) -> Result<(), String> {
    let host = HostEntry::parse(entry)?.host;
    let bare = host.strip_prefix("*.").unwrap_or(host);
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return if host.starts_with("*.") {
            Err(format!("`{host}`: wildcards are for names, not addresses"))
        } else {
            Ok(())
        };
    }
    let ok = !bare.is_empty()
        && bare.len() <= 253
        && bare.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if !ok || (host.starts_with("*.") && !bare.contains('.')) {
        return Err(format!(
            "`{entry}` is not a host name (`api.example.com`, `*.example.com`, an address, any of them with `:PORT`)"
        ));
    }
    Ok(())
}

impl Capability for Secrets {
    const KIND: CapabilityKind = CapabilityKind::Secrets;
    const SPEC: &'static str = "[=NAME]";
    type Decl = Vec<SecretUse>;

    fn validate(uses: &Vec<SecretUse>) -> Result<(), (String, String)> {
        let field = |i: usize, what: &str| format!("secrets.{i}.{what}");
        for (i, s) in uses.iter().enumerate() {
            validate_secret_name(&s.name).map_err(|m| (field(i, "name"), m))?;
            if uses[..i].iter().any(|o| o.name == s.name) {
                return Err((field(i, "name"), format!("secret `{}` is listed twice", s.name)));
            }
            for h in &s.hosts {
                validate_host(h).map_err(|m| (field(i, "hosts"), m))?;
            }
            let header_ok = !s.header.is_empty()
                && s.header.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !header_ok {
                return Err((field(i, "header"), format!("`{}` is not an HTTP header name", s.header)));
            }
            if FORBIDDEN_HEADERS.contains(&s.header.to_ascii_lowercase().as_str()) {
                return Err((field(i, "header"), format!("a secret cannot be sent in the `{}` header", s.header)));
            }
            if s.format.matches("{}").count() != 1 || s.format.contains(['\r', '\n', '\0']) {
                return Err((
                    field(i, "format"),
                    format!("`{}` must hold `{{}}` (the value) exactly once, on one line", s.format),
                ));
            }
        }
        Ok(())
    }

    /// A declared secret the policy names, sent only to the hosts both allow.
    fn intersect(declared: &Vec<SecretUse>, granted: &Vec<SecretUse>) -> Vec<SecretUse> {
        let mut out = Vec::new();
        for d in declared {
            let Some(g) = granted.iter().find(|g| g.name == d.name) else { continue };
            let mut eff = d.clone();
            if !g.hosts.is_empty() {
                eff.hosts.retain(|h| g.hosts.contains(h));
            }
            if !eff.hosts.is_empty() {
                out.push(eff);
            }
        }
        out
    }

    /// What `other` does not cover: a bare name covers every declared host.
    fn minus(mine: &Vec<SecretUse>, other: &Vec<SecretUse>) -> Vec<SecretUse> {
        mine.iter()
            .filter_map(|m| {
                let Some(o) = other.iter().find(|o| o.name == m.name) else { return Some(m.clone()) };
                if o.hosts.is_empty() {
                    return None;
                }
                let mut rest = m.clone();
                rest.hosts.retain(|h| !o.hosts.contains(h));
                (!rest.hosts.is_empty()).then_some(rest)
            })
            .collect()
    }

    fn describe(uses: &Vec<SecretUse>) -> Vec<String> {
        uses.iter().map(ToString::to_string).collect()
    }

    fn merge(held: &mut Vec<SecretUse>, more: &Vec<SecretUse>) {
        for m in more {
            match held.iter_mut().find(|h| h.name == m.name) {
                // A bare name already covers every declared host.
                Some(h) if h.hosts.is_empty() => {}
                Some(h) if m.hosts.is_empty() => h.hosts.clear(),
                Some(h) => {
                    for host in &m.hosts {
                        if !h.hosts.contains(host) {
                            h.hosts.push(host.clone());
                        }
                    }
                }
                None => held.push(m.clone()),
            }
        }
    }

    /// `secrets` grants every declared secret, `secrets=NAME` one of them (where declared).
    fn parse_grant(value: Option<&str>, declared: &Vec<SecretUse>) -> Result<Vec<SecretUse>> {
        match value {
            None if declared.is_empty() => Err(anyhow!("the skill does not declare secrets; none can be granted")),
            None => Ok(declared.iter().map(|d| SecretUse::named(&d.name)).collect()),
            Some(name) if declared.iter().any(|d| d.name == name) => Ok(vec![SecretUse::named(name)]),
            Some(name) => {
                let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
                Err(anyhow!(
                    "the skill does not declare secret {name}; it cannot be granted (declared: {})",
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                ))
            }
        }
    }

    fn revoke(held: &mut Vec<SecretUse>, value: Option<&str>) -> Result<()> {
        match value {
            None => held.clear(),
            Some(name) => held.retain(|s| s.name != name),
        }
        Ok(())
    }
}

/// What a call that hands back a value the host holds for it (a secret, a granted env
/// value: in its output, metadata, memories, logs, stdout or stderr) gets: the value
/// replaced by a marker and the call's result kept (`redact`, the default), or the whole
/// call failed (`fail`). Outbound requests carrying a held value are refused either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeakAction {
    #[default]
    Redact,
    Fail,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> Vec<SecretUse> {
        vec![SecretUse {
            name: "GITHUB_TOKEN".into(),
            hosts: vec!["api.github.com".into(), "uploads.github.com".into()],
            header: DEFAULT_HEADER.into(),
            format: DEFAULT_FORMAT.into(),
        }]
    }

    #[test]
    fn a_bare_name_grants_the_declared_hosts_and_a_host_list_narrows_them() {
        let eff = Secrets::intersect(&declared(), &vec![SecretUse::named("GITHUB_TOKEN")]);
        assert_eq!(eff, declared());
        let narrow = SecretUse {
            hosts: vec!["api.github.com".into(), "evil.example".into()],
            ..SecretUse::named("GITHUB_TOKEN")
        };
        let eff = Secrets::intersect(&declared(), &vec![narrow]);
        assert_eq!(eff[0].hosts, vec!["api.github.com".to_string()], "a grant never adds a host");
        assert!(Secrets::intersect(&declared(), &vec![SecretUse::named("OTHER")]).is_empty());
        assert!(Secrets::minus(&declared(), &vec![SecretUse::named("GITHUB_TOKEN")]).is_empty());
        assert_eq!(Secrets::minus(&declared(), &vec![]), declared());
    }

    #[test]
    fn serialized_forms() {
        let yaml = "- name: GITHUB_TOKEN\n  hosts: [api.github.com, uploads.github.com]\n";
        let parsed: Vec<SecretUse> = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(parsed, declared());
        let policy: Vec<SecretUse> =
            toml::from_str::<toml::Table>("s = [\"GITHUB_TOKEN\"]").unwrap()["s"].clone().try_into().unwrap();
        assert_eq!(policy, vec![SecretUse::named("GITHUB_TOKEN")]);
        assert_eq!(serde_json::to_string(&SecretUse::named("A")).unwrap(), "\"A\"");
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |s: SecretUse| Secrets::validate(&vec![s]).unwrap_err();
        assert_eq!(bad(SecretUse::named("a-b")).0, "secrets.0.name");
        let s = SecretUse { hosts: vec!["*.com".into()], ..SecretUse::named("A") };
        assert_eq!(bad(s).0, "secrets.0.hosts");
        let s = SecretUse { header: "Host".into(), ..SecretUse::named("A") };
        assert!(bad(s).1.contains("Host"));
        let s = SecretUse { format: "token".into(), ..SecretUse::named("A") };
        assert_eq!(bad(s).0, "secrets.0.format");
        let s = SecretUse { format: "a {} {}".into(), ..SecretUse::named("A") };
        assert_eq!(bad(s).0, "secrets.0.format");
        assert!(Secrets::validate(&declared()).is_ok());
    }

    #[test]
    fn hosts_match_exactly_or_as_subdomains() {
        let s = SecretUse { hosts: vec!["*.example.com".into(), "api.github.com".into()], ..SecretUse::named("A") };
        let to = |host: &str| s.sent_to("https", host, 443);
        assert!(to("a.example.com"));
        assert!(to("API.GitHub.com."));
        assert!(!to("example.com"));
        assert!(!to("evilexample.com"));
        assert!(!to("api.github.com.evil.example"));
        assert!(!to("github.com"));
    }

    #[test]
    fn a_secret_is_scoped_to_scheme_host_and_port() {
        let s = SecretUse {
            hosts: vec![
                "api.github.com".into(),
                "127.0.0.1:8080".into(),
                "[::1]:9000".into(),
                "https://h.example:8443".into(),
            ],
            ..SecretUse::named("A")
        };
        assert!(s.sent_to("https", "api.github.com", 443));
        assert!(!s.sent_to("https", "api.github.com", 8443), "a bare host means the default port");
        assert!(s.sent_to("http", "127.0.0.1", 8080));
        assert!(!s.sent_to("http", "127.0.0.1", 8081), "another service on the same host");
        assert!(s.sent_to("http", "::1", 9000));
        assert!(!s.sent_to("http", "::1", 9001));
        assert!(s.sent_to("https", "h.example", 8443));
        assert!(!s.sent_to("http", "h.example", 8443), "the scheme too");
        assert!(s.names_host("127.0.0.1") && !s.names_host("127.0.0.2"));
        for bad in ["127.0.0.1:0", "127.0.0.1:http", "ftp://a.example", "[::1", "a.example:70000"] {
            assert!(validate_host(bad).is_err(), "{bad}");
        }
        for good in ["127.0.0.1:8080", "[::1]:9000", "::1", "https://h.example:8443", "*.example.com:8443"] {
            assert!(validate_host(good).is_ok(), "{good}");
        }
    }
}
