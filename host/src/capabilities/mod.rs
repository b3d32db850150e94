//! What a skill may do: the capability set a SKILL.md declares, the same shape granted by
//! the user's policy, and their intersection (effective rights = declared AND granted).
//!
//! A capability is one folder here: `mod.rs` is its declaration (the type SKILL.md and
//! policy.toml hold, and the set algebra on it: validate, intersect, minus, describe, grant
//! and revoke specs, plus what it needs from the rest of the host: the store, tool hints),
//! and `enforce.rs` beside it is the sandbox's half (which imports it governs, what it links,
//! the slice of a call's state its host functions see; the `sandbox::capability::Enforce`
//! trait). [`with_capabilities!`] is the one list of capabilities: [`CapabilitySet`], the
//! [`CapabilityKind`] enum, the grant syntax, the sandbox's per-call state, what a call
//! needs opened and its MCP tool hints are all generated from it, so adding a capability
//! (the latest: `clock`) is one folder and one list entry; a missing trait impl is a compile
//! error, and `library`, `mcp` and the sandbox's call path name no capability.
//!
//! One type serves declaration, grant and effective rights so that "intersect" is defined
//! per capability in one place. The declaration halves depend on nothing but serde: what a
//! skill may ask for is reviewable without wasmtime.

pub mod clock;
pub mod env;
pub mod filesystem;
mod limits;
pub mod memory;
pub mod network;
pub mod secrets;
pub mod session;

use std::fmt;

use anyhow::{Result, bail};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use filesystem::{Access, Mount, expand_path};
pub use limits::{Limits, LimitsRequest};
pub use memory::MemoryAccess;
pub use network::{NetRule, PortRule, default_port};
pub use secrets::{LeakAction, SecretUse};

/// One kind of right. The declaration side: what SKILL.md and policy.toml say, and the
/// algebra on it. Enforcement is `sandbox::Enforce`, implemented by the sandbox module of
/// the same name.
pub trait Capability {
    /// Its variant of [`CapabilityKind`] (and so its key in SKILL.md and policy.toml).
    const KIND: CapabilityKind;
    /// The grant-spec syntax after the key, for help texts (`[=read|write]`).
    const SPEC: &'static str;
    /// What a manifest declares and a policy grants. `Default` is "nothing".
    type Decl: Clone + Default + PartialEq + Eq + fmt::Debug + Serialize + DeserializeOwned;

    /// Check what serde cannot (paths, names). Errors are (field, message).
    fn validate(_decl: &Self::Decl) -> Result<(), (String, String)> {
        Ok(())
    }
    /// Effective rights: what is both declared and granted.
    fn intersect(declared: &Self::Decl, granted: &Self::Decl) -> Self::Decl;
    /// The part of `mine` that `other` does not cover (consent on install and upgrade).
    fn minus(mine: &Self::Decl, other: &Self::Decl) -> Self::Decl;
    /// One display line per right, without the capability's name.
    fn describe(decl: &Self::Decl) -> Vec<String>;
    /// Add `more` to what a policy already grants.
    fn merge(held: &mut Self::Decl, more: &Self::Decl);
    /// The rights a CLI grant spec (`network=URL`: `value` is what follows `=`) names,
    /// limited to what the skill declares: what it did not ask for cannot be granted.
    fn parse_grant(value: Option<&str>, declared: &Self::Decl) -> Result<Self::Decl>;
    /// Take away what a revoke spec names. Reports nothing: the caller checks for change.
    fn revoke(held: &mut Self::Decl, value: Option<&str>) -> Result<()>;

    /// Does a call holding `decl` need the home's memory store opened (and locked)?
    fn needs_store(_decl: &Self::Decl) -> bool {
        false
    }
    /// Mark in `hints` what holding `decl` lets a call change or reach.
    fn hint(_decl: &Self::Decl, _hints: &mut ToolHints) {}
}

/// What a tool's effective rights say about it, for clients (MCP's tool annotations). It
/// starts as "changes nothing, reaches nothing outside the host"; each capability marks
/// what it adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHints {
    /// It may change state that outlives the call (files, memory, a remote service).
    pub writes: bool,
    /// It may overwrite or delete what was there (a read-write mount).
    pub destructive: bool,
    /// It reaches beyond the host (the network).
    pub open_world: bool,
}

/// The one list of capabilities: `field: module::Type => Variant`, in the order they
/// appear in serialized policies. Calls `$callback!` with the list.
macro_rules! with_capabilities {
    ($callback:ident) => {
        $callback! {
            filesystem: filesystem::Filesystem => Filesystem,
            network: network::Network => Network,
            env: env::Env => Env,
            memory: memory::Memory => Memory,
            session: session::Session => Session,
            secrets: secrets::Secrets => Secrets,
            clock: clock::Clock => Clock,
        }
    };
}
pub(crate) use with_capabilities;

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

macro_rules! define_set {
    ($($field:ident : $module:ident :: $cap:ident => $variant:ident),* $(,)?) => {
        /// Everything a skill can be given. Deny by default: `CapabilitySet::default()`
        /// is nothing. Each field is documented in its capability's module.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct CapabilitySet {
            $(
                #[serde(default, skip_serializing_if = "is_default")]
                pub $field: <$module::$cap as Capability>::Decl,
            )*
        }

        /// The kinds of rights, one per capability module.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum CapabilityKind {
            $($variant,)*
        }

        impl CapabilityKind {
            pub const ALL: &'static [CapabilityKind] = &[$(CapabilityKind::$variant,)*];

            /// The key in SKILL.md, policy.toml and grant specs.
            pub fn name(self) -> &'static str {
                match self {
                    $(CapabilityKind::$variant => stringify!($field),)*
                }
            }

            pub fn from_name(name: &str) -> Option<CapabilityKind> {
                match name {
                    $(stringify!($field) => Some(CapabilityKind::$variant),)*
                    _ => None,
                }
            }

            fn spec(self) -> &'static str {
                match self {
                    $(CapabilityKind::$variant => <$module::$cap as Capability>::SPEC,)*
                }
            }

            /// Does `set` hold anything of this kind?
            pub fn held_by(self, set: &CapabilitySet) -> bool {
                match self {
                    $(CapabilityKind::$variant => !is_default(&set.$field),)*
                }
            }
        }

        impl CapabilitySet {
            /// Check what serde cannot: paths and names. Errors are (field, message).
            pub fn validate(&self) -> Result<(), (String, String)> {
                $(<$module::$cap as Capability>::validate(&self.$field)?;)*
                Ok(())
            }

            /// Effective rights: what is both declared (`self`) and granted.
            pub fn intersect(&self, granted: &CapabilitySet) -> CapabilitySet {
                CapabilitySet {
                    $($field: <$module::$cap as Capability>::intersect(&self.$field, &granted.$field),)*
                }
            }

            /// The part of `self` that `other` does not cover (for consent on install and upgrade).
            pub fn minus(&self, other: &CapabilitySet) -> CapabilitySet {
                CapabilitySet {
                    $($field: <$module::$cap as Capability>::minus(&self.$field, &other.$field),)*
                }
            }

            /// One line per right, for display.
            pub fn describe(&self) -> Vec<String> {
                let mut out = Vec::new();
                $(
                    for line in <$module::$cap as Capability>::describe(&self.$field) {
                        out.push(if line.is_empty() {
                            stringify!($field).to_string()
                        } else {
                            format!("{} {line}", stringify!($field))
                        });
                    }
                )*
                out
            }

            /// Does a call with these effective rights need the memory store opened?
            pub fn needs_store(&self) -> bool {
                false $(|| <$module::$cap as Capability>::needs_store(&self.$field))*
            }

            /// What these effective rights let a call change or reach.
            pub fn tool_hints(&self) -> ToolHints {
                let mut hints = ToolHints::default();
                $(<$module::$cap as Capability>::hint(&self.$field, &mut hints);)*
                hints
            }

            /// Add everything in `more` (a policy grant).
            pub fn merge(&mut self, more: &CapabilitySet) {
                $(<$module::$cap as Capability>::merge(&mut self.$field, &more.$field);)*
            }

            /// The rights the grant spec `kind[=value]` names, within `self` (the declaration).
            pub fn grant_spec(&self, kind: CapabilityKind, value: Option<&str>) -> Result<CapabilitySet> {
                let mut out = CapabilitySet::default();
                match kind {
                    $(CapabilityKind::$variant => {
                        out.$field = <$module::$cap as Capability>::parse_grant(value, &self.$field)?;
                    })*
                }
                Ok(out)
            }

            /// Take away what the revoke spec `kind[=value]` names.
            pub fn revoke_spec(&mut self, kind: CapabilityKind, value: Option<&str>) -> Result<()> {
                match kind {
                    $(CapabilityKind::$variant => <$module::$cap as Capability>::revoke(&mut self.$field, value),)*
                }
            }
        }
    };
}

with_capabilities!(define_set);

impl fmt::Display for CapabilityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl CapabilitySet {
    pub fn is_empty(&self) -> bool {
        *self == CapabilitySet::default()
    }

    /// What `self` asks for beyond `other`, one line per right.
    pub fn beyond(&self, other: &CapabilitySet) -> Vec<String> {
        self.minus(other).describe()
    }
}

/// The grant-spec syntax of every capability, for help and error texts.
pub fn grant_syntax() -> String {
    let kinds: Vec<String> = CapabilityKind::ALL.iter().map(|k| format!("{}{}", k.name(), k.spec())).collect();
    format!("use all | {} | limits", kinds.join(" | "))
}

/// A spec that names no value where one is required, or one where none is allowed.
pub(crate) fn no_value(kind: CapabilityKind, value: Option<&str>) -> Result<()> {
    if let Some(v) = value {
        bail!("`{kind}` takes no value (got `{v}`)");
    }
    Ok(())
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
        for bad in [
            "/okay-admin",
            "/ok/../admin",
            "/ok/%2e%2e/admin",
            "/ok/%2E%2e/admin",
            "/ok%2F..%2Fadmin",
            "/ok/..;/admin",
            "/ok/.;x/../../admin",
            "/ok/%252e%252e/admin",
            "/ok/%5c../admin",
            "/ok/x/../../admin",
            "/ok/../../../ok",
            "/ok/%00",
            "/ok/%zz",
            "/ok;jsessionid=1/../admin",
            "/ok/..",
        ] {
            assert!(!r.matches("http", "127.0.0.1", 8080, bad), "{bad}");
        }
        // RFC 3986 normal form: what the server will read is what is matched.
        for good in ["/ok/./x", "/%6Fk/x", "/ok/sub/../x", "/ok/x/..", "/ok/a%20b", "/ok/a%2cb"] {
            assert!(r.matches("http", "127.0.0.1", 8080, good), "{good}");
        }
        assert_eq!(network::normalize_path("/a/%7e/./b/../c;p=1").as_deref(), Some("/a/~/c;p=1"));
        assert_eq!(network::normalize_path("/a/%2c").as_deref(), Some("/a/%2C"));
        let v6 = NetRule::parse("http://[::1]:8080").unwrap();
        assert!(v6.matches("http", "::1", 8080, "/"));
        assert!(!v6.matches("http", "127.0.0.1", 8080, "/"));
    }

    fn declared() -> CapabilitySet {
        CapabilitySet {
            filesystem: vec![Mount {
                host: "$WORKSPACE".into(),
                guest: "/workspace".into(),
                access: Access::ReadWrite,
            }],
            env: vec!["A".into(), "B".into()],
            memory: MemoryAccess::Write,
            session: true,
            network: vec![NetRule::parse("http://127.0.0.1:8080").unwrap()],
            secrets: vec![],
            clock: true,
        }
    }

    #[test]
    fn effective_is_declared_and_granted() {
        let declared = declared();
        let granted = CapabilitySet {
            filesystem: vec![Mount { host: "$WORKSPACE".into(), guest: "/workspace".into(), access: Access::Read }],
            env: vec!["B".into(), "C".into()],
            memory: MemoryAccess::Read,
            session: false,
            network: vec![],
            secrets: vec![],
            clock: false,
        };
        let eff = declared.intersect(&granted);
        assert_eq!(eff.filesystem[0].access, Access::Read);
        assert_eq!(eff.env, vec!["B".to_string()]);
        assert_eq!(eff.memory, MemoryAccess::Read);
        assert!(!eff.session);
        assert!(!eff.clock);
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
    fn the_serialized_form_is_unchanged() {
        // SKILL.md front matter and policy.toml tables written before capabilities became
        // modules must keep parsing, and an empty capability is still left out.
        let yaml = "filesystem:\n  - host: $WORKSPACE\n    guest: /workspace\n    access: read-write\nnetwork:\n  - http://127.0.0.1:8080\nenv: [A, B]\nmemory: write\nsession: true\nclock: true\n";
        let set: CapabilitySet = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(set, declared());
        let toml_text = toml::to_string(&CapabilitySet { memory: MemoryAccess::Read, ..Default::default() }).unwrap();
        assert_eq!(toml_text.trim(), "memory = \"read\"");
        let back: CapabilitySet = toml::from_str(&toml::to_string(&declared()).unwrap()).unwrap();
        assert_eq!(back, declared());
        assert!(serde_yaml_ng::from_str::<CapabilitySet>("sockets: true\n").is_err(), "unknown keys refused");
        assert_eq!(
            declared().describe(),
            vec![
                "filesystem $WORKSPACE -> /workspace (read-write)",
                "network http://127.0.0.1:8080",
                "env A",
                "env B",
                "memory write",
                "session",
                "clock (the wall-clock time)",
            ]
        );
    }

    #[test]
    fn every_kind_round_trips_its_name() {
        for kind in CapabilityKind::ALL {
            assert_eq!(CapabilityKind::from_name(kind.name()), Some(*kind));
            assert!(grant_syntax().contains(kind.name()), "{kind} missing from the grant syntax");
            let mut set = CapabilitySet::default();
            assert!(!kind.held_by(&set));
            let mut full = declared();
            full.secrets = vec![SecretUse { hosts: vec!["api.example.com".into()], ..SecretUse::named("TOKEN") }];
            set = full.grant_spec(*kind, None).unwrap();
            assert!(kind.held_by(&set), "{kind}");
        }
        assert_eq!(CapabilityKind::from_name("sockets"), None);
    }

    #[test]
    fn what_a_call_needs_comes_from_its_capabilities() {
        assert!(!CapabilitySet::default().needs_store());
        assert!(CapabilitySet { memory: MemoryAccess::Read, ..Default::default() }.needs_store());
        assert!(CapabilitySet { session: true, ..Default::default() }.needs_store());
        assert!(!CapabilitySet { clock: true, network: declared().network, ..Default::default() }.needs_store());
        let hints = declared().tool_hints();
        assert_eq!(hints, ToolHints { writes: true, destructive: true, open_world: true });
        assert_eq!(CapabilitySet { clock: true, ..Default::default() }.tool_hints(), ToolHints::default());
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
