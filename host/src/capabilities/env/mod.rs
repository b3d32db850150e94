//! `env`: names of environment variables passed through with the host's values.

pub(crate) mod enforce;

use anyhow::{Result, anyhow};
use std::collections::BTreeSet;

use super::{Capability, CapabilityKind};

/// The `env` capability: a list of variable names.
pub struct Env;

impl Capability for Env {
    const KIND: CapabilityKind = CapabilityKind::Env;
    const SPEC: &'static str = "[=NAME]";
    type Decl = Vec<String>;

    fn validate(names: &Vec<String>) -> Result<(), (String, String)> {
        for name in names {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(("env".into(), format!("`{name}` is not a variable name (letters, digits, `_`)")));
            }
        }
        Ok(())
    }

    fn intersect(declared: &Vec<String>, granted: &Vec<String>) -> Vec<String> {
        let granted: BTreeSet<&String> = granted.iter().collect();
        declared.iter().filter(|n| granted.contains(n)).cloned().collect()
    }

    fn minus(mine: &Vec<String>, other: &Vec<String>) -> Vec<String> {
        mine.iter().filter(|e| !other.contains(e)).cloned().collect()
    }

    fn describe(names: &Vec<String>) -> Vec<String> {
        names.clone()
    }

    fn merge(held: &mut Vec<String>, more: &Vec<String>) {
        for e in more {
            if !held.contains(e) {
                held.push(e.clone());
            }
        }
    }

    fn parse_grant(value: Option<&str>, declared: &Vec<String>) -> Result<Vec<String>> {
        match value {
            None if declared.is_empty() => {
                Err(anyhow!("the skill does not declare environment variables; it cannot be granted"))
            }
            None => Ok(declared.clone()),
            Some(name) if declared.iter().any(|e| e == name) => Ok(vec![name.to_string()]),
            Some(name) => Err(anyhow!("the skill does not declare env {name}; it cannot be granted")),
        }
    }

    fn revoke(held: &mut Vec<String>, value: Option<&str>) -> Result<()> {
        match value {
            None => held.clear(),
            Some(name) => held.retain(|n| n != name),
        }
        Ok(())
    }
}
