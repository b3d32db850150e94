//! `session`: working memory scoped to the agent session (session.get/set/keys).

pub(crate) mod enforce;

use anyhow::{Result, anyhow};

use super::{Capability, CapabilityKind, ToolHints, no_value};

/// The `session` capability: held or not.
pub struct Session;

impl Capability for Session {
    const KIND: CapabilityKind = CapabilityKind::Session;
    const SPEC: &'static str = "";
    type Decl = bool;

    fn intersect(declared: &bool, granted: &bool) -> bool {
        *declared && *granted
    }

    fn minus(mine: &bool, other: &bool) -> bool {
        *mine && !*other
    }

    fn describe(held: &bool) -> Vec<String> {
        if *held { vec![String::new()] } else { Vec::new() }
    }

    fn merge(held: &mut bool, more: &bool) {
        *held |= *more;
    }

    fn parse_grant(value: Option<&str>, declared: &bool) -> Result<bool> {
        no_value(Self::KIND, value)?;
        if !*declared {
            return Err(anyhow!("the skill does not declare session access; it cannot be granted"));
        }
        Ok(true)
    }

    fn revoke(held: &mut bool, value: Option<&str>) -> Result<()> {
        no_value(Self::KIND, value)?;
        *held = false;
        Ok(())
    }

    fn needs_store(held: &bool) -> bool {
        *held
    }

    /// Session working memory is written too: a skill with it changes state across calls.
    fn hint(held: &bool, hints: &mut ToolHints) {
        hints.writes |= *held;
    }
}
