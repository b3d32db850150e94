//! Every import a component may have, classified. Install refuses a component that imports
//! an interface this host does not provide, and reports governed imports the skill did not
//! declare; nothing falls through to "allowed" by default.

use serde::Serialize;

use super::capability::{governed, governing};
use crate::capabilities::CapabilityKind;

/// What the host does with one imported interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "capability", rename_all = "kebab-case")]
pub enum ImportClass {
    /// Provided to every skill and reaching nothing outside the call: clocks, random, io
    /// streams, stdio, the process environment (which holds only what `env` grants),
    /// wasi:http types (without the outgoing handler), the skill world's types and log.
    Ambient,
    /// Provided; what it reaches is decided per call by this capability.
    Governed(CapabilityKind),
    /// Linked so that components from every toolchain instantiate, but every use is
    /// refused: raw sockets and name lookup (no capability grants them).
    Refused,
    /// Not provided by this host: the component cannot run here.
    NotProvided,
}

/// WASI 0.2 and skill-world interfaces that need no capability.
const AMBIENT: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/exit",
    "wasi:cli/environment",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:http/types",
    "skillhost:skill/types",
    "skillhost:skill/log",
];

/// WASI sockets: linked, refused on every use (see `CallState::new`).
const REFUSED: &[&str] = &[
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// Classify an import such as `wasi:filesystem/preopens@0.2.3`. WASI interfaces are
/// provided at 0.2.x, the skill world at 0.1.x; any other version is not provided.
pub fn classify_import(import: &str) -> ImportClass {
    let (name, version) = match import.split_once('@') {
        Some((n, v)) => (n, v),
        None => return ImportClass::NotProvided,
    };
    let version_ok = if name.starts_with("wasi:") {
        version.starts_with("0.2.")
    } else if name.starts_with("skillhost:skill/") {
        version.starts_with("0.1.")
    } else {
        false
    };
    if !version_ok {
        return ImportClass::NotProvided;
    }
    if let Some(kind) = governing(name) {
        return ImportClass::Governed(kind);
    }
    if AMBIENT.contains(&name) {
        return ImportClass::Ambient;
    }
    if REFUSED.contains(&name) {
        return ImportClass::Refused;
    }
    ImportClass::NotProvided
}

/// The capability that governs an import (None: ambient, refused or not provided).
/// Kept for callers of the string API; [`classify_import`] is exhaustive.
pub fn capability_of_import(import: &str) -> Option<&'static str> {
    match classify_import(import) {
        ImportClass::Governed(kind) => Some(kind.name()),
        ImportClass::Ambient | ImportClass::Refused | ImportClass::NotProvided => None,
    }
}

/// Every interface name the host links, for tests.
pub fn provided_interfaces() -> Vec<&'static str> {
    let mut all = governed();
    all.extend_from_slice(AMBIENT);
    all.extend_from_slice(REFUSED);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_has_a_class() {
        assert_eq!(
            classify_import("wasi:filesystem/preopens@0.2.3"),
            ImportClass::Governed(CapabilityKind::Filesystem)
        );
        assert_eq!(classify_import("wasi:filesystem/types@0.2.0"), ImportClass::Governed(CapabilityKind::Filesystem));
        assert_eq!(classify_import("wasi:http/outgoing-handler@0.2.6"), ImportClass::Governed(CapabilityKind::Network));
        assert_eq!(classify_import("skillhost:skill/memory@0.1.0"), ImportClass::Governed(CapabilityKind::Memory));
        assert_eq!(classify_import("skillhost:skill/session@0.1.0"), ImportClass::Governed(CapabilityKind::Session));
        assert_eq!(classify_import("wasi:cli/environment@0.2.0"), ImportClass::Ambient);
        assert_eq!(classify_import("wasi:sockets/tcp@0.2.0"), ImportClass::Refused);
        assert_eq!(classify_import("wasi:sockets/ip-name-lookup@0.2.0"), ImportClass::Refused);
        // What the host does not provide is never "allowed".
        for missing in [
            "wasi:keyvalue/store@0.2.0-draft",
            "wasi:filesystem/preopens@0.3.0",
            "wasi:filesystem/preopens",
            "skillhost:skill/secrets@0.1.0",
            "skillhost:skill/memory@0.2.0",
            "acme:tools/run@1.0.0",
            "",
        ] {
            assert_eq!(classify_import(missing), ImportClass::NotProvided, "{missing}");
            assert_eq!(capability_of_import(missing), None);
        }
        let all = provided_interfaces();
        let unique: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "an interface is classified twice");
    }
}
