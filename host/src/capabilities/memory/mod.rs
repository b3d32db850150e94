//! `memory`: long-term memory access, `read` (memory.search) or `write` (also store the
//! memories a call proposes).

pub(crate) mod enforce;

pub use enforce::{Absorbed, MemoryAdmission, admit_memories};

use std::fmt;

use anyhow::{Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::{Capability, CapabilityKind, ToolHints};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryAccess {
    #[default]
    None,
    Read,
    Write,
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

/// The `memory` capability: one access level.
pub struct Memory;

impl Capability for Memory {
    const KIND: CapabilityKind = CapabilityKind::Memory;
    const SPEC: &'static str = "[=read|write]";
    type Decl = MemoryAccess;

    fn intersect(declared: &MemoryAccess, granted: &MemoryAccess) -> MemoryAccess {
        (*declared).min(*granted)
    }

    fn minus(mine: &MemoryAccess, other: &MemoryAccess) -> MemoryAccess {
        if mine > other { *mine } else { MemoryAccess::None }
    }

    fn describe(access: &MemoryAccess) -> Vec<String> {
        match access {
            MemoryAccess::None => Vec::new(),
            a => vec![a.to_string()],
        }
    }

    fn merge(held: &mut MemoryAccess, more: &MemoryAccess) {
        *held = (*held).max(*more);
    }

    fn parse_grant(value: Option<&str>, declared: &MemoryAccess) -> Result<MemoryAccess> {
        let level = match value {
            None => *declared,
            Some("read") => MemoryAccess::Read,
            Some("write") => MemoryAccess::Write,
            Some(other) => bail!("memory grant `{other}`: use memory=read or memory=write"),
        };
        if *declared == MemoryAccess::None {
            return Err(anyhow!("the skill does not declare memory access; it cannot be granted"));
        }
        Ok(level.min(*declared))
    }

    fn revoke(held: &mut MemoryAccess, value: Option<&str>) -> Result<()> {
        *held = match value {
            None | Some("read") => MemoryAccess::None,
            Some("write") => (*held).min(MemoryAccess::Read),
            Some(other) => bail!("memory revoke `{other}`: use memory, memory=read or memory=write"),
        };
        Ok(())
    }

    fn needs_store(held: &MemoryAccess) -> bool {
        *held != MemoryAccess::None
    }

    fn hint(held: &MemoryAccess, hints: &mut ToolHints) {
        hints.writes |= *held == MemoryAccess::Write;
    }
}
