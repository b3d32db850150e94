//! `network`: the outbound HTTP allowlist (`scheme://host[:port][/path-prefix]`). Raw
//! sockets are no capability: they are refused to every skill.

pub(crate) mod enforce;

use std::fmt;
use std::net::IpAddr;

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use super::{Capability, CapabilityKind, ToolHints};

/// The `network` capability: a list of allowlist rules.
pub struct Network;

impl Capability for Network {
    const KIND: CapabilityKind = CapabilityKind::Network;
    const SPEC: &'static str = "[=URL_RULE]";
    type Decl = Vec<NetRule>;

    /// The narrower of each declared/granted pair where one contains the other.
    fn intersect(declared: &Vec<NetRule>, granted: &Vec<NetRule>) -> Vec<NetRule> {
        let mut out: Vec<NetRule> = Vec::new();
        for d in declared {
            for g in granted {
                let narrower = if d.within(g) {
                    d
                } else if g.within(d) {
                    g
                } else {
                    continue;
                };
                if !out.contains(narrower) {
                    out.push(narrower.clone());
                }
            }
        }
        out
    }

    fn minus(mine: &Vec<NetRule>, other: &Vec<NetRule>) -> Vec<NetRule> {
        mine.iter().filter(|r| !other.iter().any(|o| r.within(o))).cloned().collect()
    }

    fn describe(rules: &Vec<NetRule>) -> Vec<String> {
        rules.iter().map(ToString::to_string).collect()
    }

    fn merge(held: &mut Vec<NetRule>, more: &Vec<NetRule>) {
        for r in more {
            if !held.contains(r) {
                held.push(r.clone());
            }
        }
    }

    fn parse_grant(value: Option<&str>, declared: &Vec<NetRule>) -> Result<Vec<NetRule>> {
        let Some(v) = value else {
            if declared.is_empty() {
                return Err(anyhow!("the skill does not declare network access; it cannot be granted"));
            }
            return Ok(declared.clone());
        };
        let rule = NetRule::parse(v).map_err(|e| anyhow!(e))?;
        if !declared.iter().any(|d| rule.within(d)) {
            return Err(anyhow!("the skill does not declare network access covering {rule}; it cannot be granted"));
        }
        Ok(vec![rule])
    }

    fn revoke(held: &mut Vec<NetRule>, value: Option<&str>) -> Result<()> {
        match value {
            None => held.clear(),
            Some(r) => {
                let rule = NetRule::parse(r).map_err(|e| anyhow!(e))?;
                held.retain(|n| *n != rule)
            }
        }
        Ok(())
    }

    fn hint(rules: &Vec<NetRule>, hints: &mut ToolHints) {
        if !rules.is_empty() {
            hints.writes = true;
            hints.open_world = true;
        }
    }
}

/// One outbound HTTP allowlist entry, parsed from `scheme://host[:port][/path-prefix]`.
/// `host` may start with `*.` to allow subdomains (never the bare domain, never IPs);
/// a missing port means the scheme's default port and `*` means any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRule {
    pub scheme: String,
    pub host: String,
    pub port: PortRule,
    pub path_prefix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRule {
    Default,
    Any,
    Exact(u16),
}

impl NetRule {
    pub fn parse(text: &str) -> Result<NetRule, String> {
        let fix =
            "write it as scheme://host[:port][/path-prefix], e.g. https://api.example.com or http://127.0.0.1:8080/v1";
        let (scheme, rest) = text.split_once("://").ok_or_else(|| format!("`{text}` has no scheme; {fix}"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!("`{text}`: only http and https are supported"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or_else(|| format!("`{text}`: unclosed `[`; {fix}"))?;
            (format!("[{addr}]"), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        let host = host.to_ascii_lowercase();
        if host.is_empty() || host == "*" || host.contains('@') {
            return Err(format!("`{text}`: a host is required (`*` alone is not allowed); {fix}"));
        }
        if let Some(base) = host.strip_prefix("*.") {
            // A name with a real top-level label: `*.0.0.1` must not cover 127.0.0.1.
            let tld_is_name = base.rsplit('.').next().is_some_and(|t| t.chars().any(|c| c.is_ascii_alphabetic()));
            if base.contains('*') || base.contains(['[', ']', ':']) || !base.contains('.') || !tld_is_name {
                return Err(format!(
                    "`{text}`: wildcards are for subdomains of a domain name only, like *.example.com"
                ));
            }
        } else if host.contains('*') {
            return Err(format!("`{text}`: wildcards are for subdomains only, like *.example.com"));
        }
        let port = match port {
            None => PortRule::Default,
            Some("*") => PortRule::Any,
            Some(p) => {
                PortRule::Exact(p.parse().map_err(|_| format!("`{text}`: port `{p}` is not a number 1-65535 or `*`"))?)
            }
        };
        Ok(NetRule { scheme, host, port, path_prefix: path.to_string() })
    }

    /// The host as an IP address when the rule names one literally.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.trim_start_matches('[').trim_end_matches(']').parse().ok()
    }

    /// Is every request this rule allows also allowed by `other`?
    pub fn within(&self, other: &NetRule) -> bool {
        let host_ok = match (self.host.strip_prefix("*."), other.host.strip_prefix("*.")) {
            (_, None) => self.host == other.host,
            (Some(mine), Some(base)) => mine == base || mine.ends_with(&format!(".{base}")),
            (None, Some(base)) => self.host.ends_with(&format!(".{base}")),
        };
        let port_ok = match (self.port, other.port) {
            (_, PortRule::Any) => true,
            (a, b) => a == b,
        };
        self.scheme == other.scheme && host_ok && port_ok && other.path_ok(&self.path_prefix)
    }

    /// Does a request to `scheme://host:port/path` fall under this rule? Wildcards never
    /// match IP literals; a path prefix matches whole segments only (`/v1` covers `/v1` and
    /// `/v1/x`, not `/v1admin`) after RFC 3986 normalisation ([`normalize_path`]), and a
    /// path servers could read differently (encoded separators, double encoding, `..;`) never
    /// matches a rule that has a prefix, since the server may resolve it outside the prefix.
    pub fn matches(&self, scheme: &str, host: &str, port: u16, path: &str) -> bool {
        if !self.scheme.eq_ignore_ascii_case(scheme) {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let is_ip = host.parse::<IpAddr>().is_ok();
        let host_ok = match self.host.strip_prefix("*.") {
            Some(base) => {
                !is_ip
                    && host.len() > base.len() + 1
                    && host.ends_with(base)
                    && host[..host.len() - base.len()].ends_with('.')
            }
            None => host == self.host.trim_start_matches('[').trim_end_matches(']'),
        };
        let port_ok = match self.port {
            PortRule::Any => true,
            PortRule::Exact(p) => p == port,
            PortRule::Default => port == default_port(scheme),
        };
        host_ok && port_ok && self.path_ok(path)
    }

    fn path_ok(&self, path: &str) -> bool {
        if self.path_prefix == "/" {
            return true;
        }
        let (Some(path), Some(prefix)) = (normalize_path(path), normalize_path(&self.path_prefix)) else {
            return false;
        };
        path == prefix
            || (prefix.ends_with('/') && path.starts_with(&prefix))
            || path.strip_prefix(&prefix).is_some_and(|rest| rest.starts_with('/'))
    }
}

/// A request path in RFC 3986 normal form (section 6.2.2: percent-escapes of unreserved
/// characters decoded, the others upper-cased; dot segments removed as in 5.2.4), or `None`
/// when servers could read it in ways that disagree with that form, so no prefixed rule
/// should match it:
/// - an escaped `/`, `\`, `%` (double encoding: `%252e%252e` is `..` to a server that
///   decodes twice), a NUL or a control character, a raw `\`;
/// - a segment that is a dot segment once its `;parameters` are cut (`..;x`: Tomcat and
///   Jetty strip path parameters before routing, so `/ok/..;/admin` reaches `/admin`);
/// - dot segments that climb above the root, or over an empty segment (`//..`);
/// - a malformed escape.
pub fn normalize_path(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = path.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(hex, 16).ok()?;
            match v {
                b'/' | b'\\' | b'%' | 0..=0x1f | 0x7f => return None,
                _ if v.is_ascii_alphanumeric() || b"-._~".contains(&v) => decoded.push(v as char),
                _ => decoded.push_str(&format!("%{v:02X}")),
            }
            i += 3;
            continue;
        }
        if b == b'\\' || b < 0x20 || b == 0x7f {
            return None;
        }
        let ch = path[i..].chars().next()?;
        decoded.push(ch);
        i += ch.len_utf8();
    }
    if !decoded.starts_with('/') {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (n, seg) in segments.iter().enumerate() {
        let name = seg.split(';').next().unwrap_or("");
        let is_dot = name == "." || name == "..";
        if is_dot && name != *seg {
            return None;
        }
        match *seg {
            "." => {}
            // Climbing over an empty segment is read two ways: servers that merge slashes
            // (nginx by default) resolve `/api//../admin` to `/admin`, not `/api/admin`.
            ".." => {
                if out.pop()?.is_empty() {
                    return None;
                }
            }
            s => out.push(s),
        }
        // A trailing dot segment leaves a directory path ("/a/b/.." is "/a/").
        if is_dot && n == last {
            out.push("");
        }
    }
    Some(format!("/{}", out.join("/")))
}

pub fn default_port(scheme: &str) -> u16 {
    if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 }
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            PortRule::Default => {}
            PortRule::Any => write!(f, ":*")?,
            PortRule::Exact(p) => write!(f, ":{p}")?,
        }
        if self.path_prefix != "/" {
            write!(f, "{}", self.path_prefix)?;
        }
        Ok(())
    }
}

impl Serialize for NetRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for NetRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        NetRule::parse(&s).map_err(serde::de::Error::custom)
    }
}
