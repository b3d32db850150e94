//! `clock`: the wall-clock time (`wasi:clocks/wall-clock`). A skill that does not hold it
//! reads a clock stopped at the Unix epoch (1970-01-01T00:00:00Z), and its call records one
//! denial saying so: the time of day is a fingerprint and a side channel, and a skill that
//! never needed it stays reproducible. The monotonic clock (elapsed time, with an arbitrary
//! start) stays ambient: runtimes need it for their own timeouts and it says nothing about
//! when the call ran.
//!
//! Every std-based component imports the wall clock, so the interface stays ambient at
//! install (no "undeclared import" report); what it yields is decided per call here.

pub(crate) mod enforce;

use anyhow::{Result, anyhow};

use super::{Capability, CapabilityKind, no_value};

/// The `clock` capability: held or not.
pub struct Clock;

impl Capability for Clock {
    const KIND: CapabilityKind = CapabilityKind::Clock;
    const SPEC: &'static str = "";
    type Decl = bool;

    fn intersect(declared: &bool, granted: &bool) -> bool {
        *declared && *granted
    }

    fn minus(mine: &bool, other: &bool) -> bool {
        *mine && !*other
    }

    fn describe(held: &bool) -> Vec<String> {
        if *held { vec!["(the wall-clock time)".into()] } else { Vec::new() }
    }

    fn merge(held: &mut bool, more: &bool) {
        *held |= *more;
    }

    fn parse_grant(value: Option<&str>, declared: &bool) -> Result<bool> {
        no_value(Self::KIND, value)?;
        if !*declared {
            return Err(anyhow!("the skill does not declare clock access; it cannot be granted"));
        }
        Ok(true)
    }

    fn revoke(held: &mut bool, value: Option<&str>) -> Result<()> {
        no_value(Self::KIND, value)?;
        *held = false;
        Ok(())
    }
}
