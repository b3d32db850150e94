//! `skillhost memory list` and `memory get ID`: the records themselves, for a user who wants
//! to see what the agent remembers without searching for it.

use anyhow::{Result, bail};
use serde_json::json;

use super::output::{clean, clean_line};
use super::print_json;
use crate::library::Library;
use crate::memory::MemoryRecord;

/// Every record (of `namespace`, when given), oldest first; deprecated ones only with `all`.
pub(super) fn list(lib: &Library, namespace: Option<&str>, all: bool, json: bool) -> Result<()> {
    let memory = lib.memory()?;
    let mut records: Vec<MemoryRecord> = memory
        .all_records()?
        .into_iter()
        .filter(|r| namespace.is_none_or(|ns| r.namespace == ns))
        .filter(|r| all || r.deprecated.is_none())
        .collect();
    records.sort_by_key(|r| r.id);
    if json {
        return print_json(&records);
    }
    if records.is_empty() {
        let scope = namespace.map(|ns| format!(" in namespace `{ns}`")).unwrap_or_default();
        println!("no memories{scope}");
        return Ok(());
    }
    for r in &records {
        let state = if r.deprecated.is_some() { " DEPRECATED" } else { "" };
        println!(
            "#{} [{} {} p{}{state}] {}",
            r.id,
            clean_line(&r.namespace),
            r.kind.as_str(),
            r.priority,
            clean_line(&crate::text::one_line(&r.content, 100))
        );
    }
    println!("{} records (`skillhost memory get ID` shows one in full)", records.len());
    Ok(())
}

/// One record in full: text, provenance, timestamps.
pub(super) fn get(lib: &Library, id: u64, json: bool) -> Result<()> {
    let Some(r) = lib.memory()?.get(id)? else {
        bail!(
            "no memory #{id}; `skillhost memory list` shows the ids (a forgotten one is in `skillhost memory archive`)"
        );
    };
    if json {
        return print_json(&json!(r));
    }
    println!("#{} in namespace {} ({}, priority {})", r.id, clean_line(&r.namespace), r.kind.as_str(), r.priority);
    if let Some(d) = &r.deprecated {
        println!("DEPRECATED: {}", clean_line(&serde_json::to_string(d).unwrap_or_default()));
    }
    if !r.tags.is_empty() {
        println!("tags: {}", clean_line(&r.tags.join(", ")));
    }
    println!("created {} ms, updated {} ms, referenced {} times", r.created_ms, r.updated_ms, r.references);
    for p in &r.provenance {
        println!("written by {}", clean_line(&serde_json::to_string(p).unwrap_or_default()));
    }
    println!("\n{}", clean(r.content.trim_end()));
    Ok(())
}
