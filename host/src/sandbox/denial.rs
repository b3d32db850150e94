//! What a call was refused, as the model, the CLI and the audit log see it. A denial's kind
//! is an enum (a capability, or one of the two refusals no capability owns) whose serialized
//! form is the string the audit log has always recorded, so old logs read the same.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::capabilities::CapabilityKind;

/// A right the skill used without holding it. The model reads `message`; the audit log
/// keeps the whole record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    pub capability: DenialKind,
    pub message: String,
}

impl Denial {
    pub fn new(capability: impl Into<DenialKind>, message: impl Into<String>) -> Denial {
        Denial { capability: capability.into(), message: message.into() }
    }
}

/// Who refused: a capability the call did not hold (enough of), or the host itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenialKind {
    /// A capability's enforcement refused a use (its key: `filesystem`, `memory`...).
    Capability(CapabilityKind),
    /// Raw sockets and name lookup: linked for every toolchain, refused to every skill.
    Sockets,
    /// The call was refused before it ran (tampered or damaged install, no such skill).
    Integrity,
}

impl DenialKind {
    /// The serialized name: the capability's key, `sockets` or `integrity`.
    pub fn as_str(self) -> &'static str {
        match self {
            DenialKind::Capability(kind) => kind.name(),
            DenialKind::Sockets => "sockets",
            DenialKind::Integrity => "integrity",
        }
    }

    pub fn from_name(name: &str) -> Option<DenialKind> {
        match name {
            "sockets" => Some(DenialKind::Sockets),
            "integrity" => Some(DenialKind::Integrity),
            other => CapabilityKind::from_name(other).map(DenialKind::Capability),
        }
    }

    /// The capability a grant could give, when one could.
    pub fn capability(self) -> Option<CapabilityKind> {
        match self {
            DenialKind::Capability(kind) => Some(kind),
            _ => None,
        }
    }
}

impl From<CapabilityKind> for DenialKind {
    fn from(kind: CapabilityKind) -> DenialKind {
        DenialKind::Capability(kind)
    }
}

impl std::fmt::Display for DenialKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DenialKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DenialKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DenialKind, D::Error> {
        let name = String::deserialize(d)?;
        DenialKind::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("`{name}` is not a kind of denial")))
    }
}

/// Compares with the serialized name, as the audit log and `--json` show it.
impl PartialEq<str> for DenialKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for DenialKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for DenialKind {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_the_strings_logs_hold() {
        for name in ["filesystem", "network", "env", "memory", "session", "secrets", "sockets", "integrity"] {
            let kind = DenialKind::from_name(name).unwrap();
            assert_eq!(serde_json::to_value(kind).unwrap(), name);
            assert_eq!(serde_json::from_value::<DenialKind>(name.into()).unwrap(), kind);
        }
        for kind in CapabilityKind::ALL {
            assert_eq!(DenialKind::from(*kind).as_str(), kind.name());
        }
        assert!(serde_json::from_value::<DenialKind>("dns".into()).is_err());
        let d = Denial::new(CapabilityKind::Memory, "dropped");
        assert_eq!(serde_json::to_string(&d).unwrap(), r#"{"capability":"memory","message":"dropped"}"#);
    }
}
