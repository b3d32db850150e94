//! What a skill may do: the capability set a SKILL.md declares, the same shape granted by
//! the user's policy, and their intersection (effective rights = declared AND granted).
//!
//! One type serves all three roles so that "intersect" is defined field by field in one
//! place. Enforcement lives in `sandbox/`, one file per capability; this module only holds
//! the declarations, their validation and the set algebra.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Everything a skill can be given. Deny by default: `CapabilitySet::default()` is nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilitySet {
    /// Host directories mounted at guest paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filesystem: Vec<Mount>,
    /// Outbound HTTP allowlist (`scheme://host[:port][/path-prefix]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<NetRule>,
    /// Names of environment variables passed through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Long-term memory access.
    #[serde(default, skip_serializing_if = "MemoryAccess::is_none")]
    pub memory: MemoryAccess,
    /// Session working memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session: bool,
}

/// A host directory (a path or a template such as `$WORKSPACE/logs`) seen by the guest at
/// `guest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub host: String,
    pub guest: String,
    #[serde(default)]
    pub access: Access,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    #[default]
    Read,
    ReadWrite,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryAccess {
    #[default]
    None,
    Read,
    Write,
}

impl MemoryAccess {
    fn is_none(&self) -> bool {
        *self == MemoryAccess::None
    }
}

impl fmt::Display for MemoryAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryAccess::None => "none",
            MemoryAccess::Read => "read",
            MemoryAccess::Write => "write",
        })
    }
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let access = match self.access {
            Access::Read => "read",
            Access::ReadWrite => "read-write",
        };
        write!(f, "{} -> {} ({access})", self.host, self.guest)
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
    /// `/v1/x`, not `/v1admin`), and a path with dot segments or encoded separators never
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
        let prefix = self.path_prefix.as_str();
        if prefix == "/" {
            return true;
        }
        let lower = path.to_ascii_lowercase();
        let suspicious = path.split('/').any(|seg| seg == "." || seg == "..")
            || ["%2e", "%2f", "%5c", "\\"].iter().any(|p| lower.contains(p));
        if suspicious {
            return false;
        }
        path == prefix
            || (prefix.ends_with('/') && path.starts_with(prefix))
            || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/') || rest.starts_with('?'))
    }
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

impl CapabilitySet {
    pub fn is_empty(&self) -> bool {
        *self == CapabilitySet::default()
    }

    /// Check what serde cannot: paths and names. Errors are (field, message).
    pub fn validate(&self) -> Result<(), (String, String)> {
        for m in &self.filesystem {
            let host_ok = m.host.starts_with('$') || m.host.starts_with('/');
            if !host_ok {
                return Err((
                    "filesystem.host".into(),
                    format!("`{}` must be absolute or start with a template such as $WORKSPACE", m.host),
                ));
            }
            if m.host.split('/').any(|c| c == "..") {
                return Err(("filesystem.host".into(), format!("`{}` must not contain `..`", m.host)));
            }
            if !m.guest.starts_with('/') || m.guest.split('/').any(|c| c == "..") {
                return Err((
                    "filesystem.guest".into(),
                    format!("`{}` must be an absolute guest path without `..`, like /workspace", m.guest),
                ));
            }
        }
        for name in &self.env {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(("env".into(), format!("`{name}` is not a variable name (letters, digits, `_`)")));
            }
        }
        Ok(())
    }

    /// Effective rights: what is both declared (`self`) and granted.
    pub fn intersect(&self, granted: &CapabilitySet) -> CapabilitySet {
        let filesystem = self
            .filesystem
            .iter()
            .filter_map(|d| {
                granted
                    .filesystem
                    .iter()
                    .filter(|g| g.host == d.host && g.guest == d.guest)
                    .map(|g| g.access.min(d.access))
                    .max()
                    .map(|access| Mount { access, ..d.clone() })
            })
            .collect();
        // The narrower of each declared/granted pair where one contains the other.
        let mut network: Vec<NetRule> = Vec::new();
        for d in &self.network {
            for g in &granted.network {
                let narrower = if d.within(g) {
                    d
                } else if g.within(d) {
                    g
                } else {
                    continue;
                };
                if !network.contains(narrower) {
                    network.push(narrower.clone());
                }
            }
        }
        let granted_env: BTreeSet<&String> = granted.env.iter().collect();
        CapabilitySet {
            filesystem,
            network,
            env: self.env.iter().filter(|n| granted_env.contains(n)).cloned().collect(),
            memory: self.memory.min(granted.memory),
            session: self.session && granted.session,
        }
    }

    /// The part of `self` that `other` does not cover (for consent on install and upgrade).
    pub fn minus(&self, other: &CapabilitySet) -> CapabilitySet {
        CapabilitySet {
            filesystem: self
                .filesystem
                .iter()
                .filter(|m| {
                    !other.filesystem.iter().any(|o| o.host == m.host && o.guest == m.guest && o.access >= m.access)
                })
                .cloned()
                .collect(),
            network: self.network.iter().filter(|r| !other.network.iter().any(|o| r.within(o))).cloned().collect(),
            env: self.env.iter().filter(|e| !other.env.contains(e)).cloned().collect(),
            memory: if self.memory > other.memory { self.memory } else { MemoryAccess::None },
            session: self.session && !other.session,
        }
    }

    /// What `self` asks for beyond `other`, one line per right.
    pub fn beyond(&self, other: &CapabilitySet) -> Vec<String> {
        self.minus(other).describe()
    }

    /// One line per right, for display.
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self.filesystem.iter().map(|m| format!("filesystem {m}")).collect();
        out.extend(self.network.iter().map(|r| format!("network {r}")));
        out.extend(self.env.iter().map(|e| format!("env {e}")));
        if self.memory != MemoryAccess::None {
            out.push(format!("memory {}", self.memory));
        }
        if self.session {
            out.push("session".into());
        }
        out
    }
}

/// Limits a skill asks for in SKILL.md (all optional); the policy caps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_kb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_memories: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
}

/// The limits in force for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub wall_time_ms: u64,
    pub cpu_time_ms: u64,
    pub memory_mb: u64,
    pub output_kb: u64,
    pub max_new_memories: u64,
    pub max_memory_bytes: u64,
}

impl Limits {
    /// Used when neither the skill nor the policy says otherwise.
    pub const DEFAULT: Limits = Limits {
        wall_time_ms: 10_000,
        cpu_time_ms: 5_000,
        memory_mb: 64,
        output_kb: 64,
        max_new_memories: 8,
        max_memory_bytes: 2_048,
    };
    /// No policy can raise a limit above these.
    pub const CEILING: Limits = Limits {
        wall_time_ms: 600_000,
        cpu_time_ms: 300_000,
        memory_mb: 1_024,
        output_kb: 4_096,
        max_new_memories: 100,
        max_memory_bytes: 16_384,
    };

    /// Effective limits: the skill's request (or the default), capped by the policy (the
    /// default where the policy says nothing: asking for more than the default is a right
    /// the user grants, like a capability) and by the ceiling.
    pub fn resolve(request: &LimitsRequest, cap: &LimitsRequest) -> Limits {
        let pick = |req: Option<u64>, cap: Option<u64>, default: u64, ceiling: u64| {
            req.unwrap_or(default).min(cap.unwrap_or(default)).min(ceiling)
        };
        let (d, c) = (Limits::DEFAULT, Limits::CEILING);
        Limits {
            wall_time_ms: pick(request.wall_time_ms, cap.wall_time_ms, d.wall_time_ms, c.wall_time_ms),
            cpu_time_ms: pick(request.cpu_time_ms, cap.cpu_time_ms, d.cpu_time_ms, c.cpu_time_ms),
            memory_mb: pick(request.memory_mb, cap.memory_mb, d.memory_mb, c.memory_mb),
            output_kb: pick(request.output_kb, cap.output_kb, d.output_kb, c.output_kb),
            max_new_memories: pick(
                request.max_new_memories,
                cap.max_new_memories,
                d.max_new_memories,
                c.max_new_memories,
            ),
            max_memory_bytes: pick(
                request.max_memory_bytes,
                cap.max_memory_bytes,
                d.max_memory_bytes,
                c.max_memory_bytes,
            ),
        }
    }
}

impl LimitsRequest {
    pub fn validate(&self) -> Result<(), (String, String)> {
        let fields = [
            ("wall_time_ms", self.wall_time_ms),
            ("cpu_time_ms", self.cpu_time_ms),
            ("memory_mb", self.memory_mb),
            ("output_kb", self.output_kb),
        ];
        for (name, v) in fields {
            if v == Some(0) {
                return Err((name.into(), "must be greater than 0".into()));
            }
        }
        Ok(())
    }

    /// Per-field minimum of `self` (unset meaning the default) and `lower` where it is set.
    pub fn lowered_by(&self, lower: &LimitsRequest) -> LimitsRequest {
        let d = Limits::DEFAULT;
        let f = |mine: Option<u64>, theirs: Option<u64>, default: u64| match theirs {
            Some(t) => Some(mine.unwrap_or(default).min(t)),
            None => mine,
        };
        LimitsRequest {
            wall_time_ms: f(self.wall_time_ms, lower.wall_time_ms, d.wall_time_ms),
            cpu_time_ms: f(self.cpu_time_ms, lower.cpu_time_ms, d.cpu_time_ms),
            memory_mb: f(self.memory_mb, lower.memory_mb, d.memory_mb),
            output_kb: f(self.output_kb, lower.output_kb, d.output_kb),
            max_new_memories: f(self.max_new_memories, lower.max_new_memories, d.max_new_memories),
            max_memory_bytes: f(self.max_memory_bytes, lower.max_memory_bytes, d.max_memory_bytes),
        }
    }

    /// The fields where `self` asks for more than the default, for consent.
    pub fn beyond_default(&self) -> Vec<String> {
        let d = Limits::DEFAULT;
        [
            ("wall_time_ms", self.wall_time_ms, d.wall_time_ms),
            ("cpu_time_ms", self.cpu_time_ms, d.cpu_time_ms),
            ("memory_mb", self.memory_mb, d.memory_mb),
            ("output_kb", self.output_kb, d.output_kb),
            ("max_new_memories", self.max_new_memories, d.max_new_memories),
            ("max_memory_bytes", self.max_memory_bytes, d.max_memory_bytes),
        ]
        .into_iter()
        .filter_map(|(name, v, default)| {
            v.filter(|v| *v > default).map(|v| format!("limit {name} {v} (default {default})"))
        })
        .collect()
    }

    /// Per-field: `self` where set, else `fallback`.
    pub fn or(&self, fallback: &LimitsRequest) -> LimitsRequest {
        LimitsRequest {
            wall_time_ms: self.wall_time_ms.or(fallback.wall_time_ms),
            cpu_time_ms: self.cpu_time_ms.or(fallback.cpu_time_ms),
            memory_mb: self.memory_mb.or(fallback.memory_mb),
            output_kb: self.output_kb.or(fallback.output_kb),
            max_new_memories: self.max_new_memories.or(fallback.max_new_memories),
            max_memory_bytes: self.max_memory_bytes.or(fallback.max_memory_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_rules_parse_and_match() {
        let r = NetRule::parse("https://*.example.com/api").unwrap();
        assert!(r.matches("https", "a.example.com", 443, "/api/v1"));
        assert!(!r.matches("https", "example.com", 443, "/api"));
        assert!(!r.matches("https", "evilexample.com", 443, "/api"));
        assert!(!r.matches("http", "a.example.com", 80, "/api"));
        assert!(!r.matches("https", "a.example.com", 8443, "/api"));
        assert!(!r.matches("https", "a.example.com", 443, "/other"));
        let r = NetRule::parse("http://127.0.0.1:*").unwrap();
        assert!(r.matches("http", "127.0.0.1", 5555, "/"));
        assert_eq!(r.ip(), Some("127.0.0.1".parse().unwrap()));
        assert!(NetRule::parse("ftp://x.org").is_err());
        assert!(NetRule::parse("https://*").is_err());
        assert!(NetRule::parse("https://a*.b.com").is_err());
        assert!(NetRule::parse("example.com").is_err());
        assert_eq!(NetRule::parse("http://[::1]:8080/x").unwrap().to_string(), "http://[::1]:8080/x");
        // Wildcards are for domain names: they never cover IP literals.
        assert!(NetRule::parse("http://*.0.0.1:*").is_err());
        assert!(NetRule::parse("http://*.169.254").is_err());
        let r = NetRule::parse("http://*.example.com:*").unwrap();
        assert!(!r.matches("http", "127.0.0.1", 80, "/"));
        assert!(!r.matches("http", "::ffff:127.0.0.1", 80, "/"));
        // Prefixes match whole segments, and tricky paths never match a prefixed rule.
        let r = NetRule::parse("http://127.0.0.1:8080/ok").unwrap();
        assert!(r.matches("http", "127.0.0.1", 8080, "/ok"));
        assert!(r.matches("http", "127.0.0.1", 8080, "/ok/sub"));
        for bad in ["/okay-admin", "/ok/../admin", "/ok/%2e%2e/admin", "/ok%2F..%2Fadmin", "/ok/./x"] {
            assert!(!r.matches("http", "127.0.0.1", 8080, bad), "{bad}");
        }
        let v6 = NetRule::parse("http://[::1]:8080").unwrap();
        assert!(v6.matches("http", "::1", 8080, "/"));
        assert!(!v6.matches("http", "127.0.0.1", 8080, "/"));
    }

    #[test]
    fn effective_is_declared_and_granted() {
        let declared = CapabilitySet {
            filesystem: vec![Mount {
                host: "$WORKSPACE".into(),
                guest: "/workspace".into(),
                access: Access::ReadWrite,
            }],
            env: vec!["A".into(), "B".into()],
            memory: MemoryAccess::Write,
            session: true,
            network: vec![NetRule::parse("http://127.0.0.1:8080").unwrap()],
        };
        let granted = CapabilitySet {
            filesystem: vec![Mount { host: "$WORKSPACE".into(), guest: "/workspace".into(), access: Access::Read }],
            env: vec!["B".into(), "C".into()],
            memory: MemoryAccess::Read,
            session: false,
            network: vec![],
        };
        let eff = declared.intersect(&granted);
        assert_eq!(eff.filesystem[0].access, Access::Read);
        assert_eq!(eff.env, vec!["B".to_string()]);
        assert_eq!(eff.memory, MemoryAccess::Read);
        assert!(!eff.session);
        assert!(eff.network.is_empty());
        let wide = CapabilitySet { network: vec![NetRule::parse("http://127.0.0.1:*").unwrap()], ..Default::default() };
        assert_eq!(declared.intersect(&wide).network, declared.network);
        let other =
            CapabilitySet { network: vec![NetRule::parse("http://127.0.0.1:9090").unwrap()], ..Default::default() };
        assert!(declared.intersect(&other).network.is_empty());
        // Granting more than declared gives nothing extra.
        assert_eq!(CapabilitySet::default().intersect(&granted), CapabilitySet::default());
    }

    #[test]
    fn limits_are_capped() {
        let req = LimitsRequest { memory_mb: Some(4096), wall_time_ms: Some(50), ..Default::default() };
        let cap = LimitsRequest { memory_mb: Some(128), ..Default::default() };
        let l = Limits::resolve(&req, &cap);
        assert_eq!(l.memory_mb, 128);
        assert_eq!(l.wall_time_ms, 50);
        assert_eq!(l.cpu_time_ms, Limits::DEFAULT.cpu_time_ms);
        // Asking for more than the default needs a policy cap that allows it.
        let greedy = LimitsRequest { wall_time_ms: Some(60_000), ..Default::default() };
        assert_eq!(Limits::resolve(&greedy, &LimitsRequest::default()).wall_time_ms, Limits::DEFAULT.wall_time_ms);
        assert_eq!(Limits::resolve(&greedy, &greedy).wall_time_ms, 60_000);
        assert_eq!(greedy.beyond_default(), vec!["limit wall_time_ms 60000 (default 10000)".to_string()]);
    }
}
