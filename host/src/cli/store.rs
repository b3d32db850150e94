//! `skillhost store migrate | status`: the schema of the shared PostgreSQL store. These run
//! before (and without) a library: a host refuses to open on a schema that is not current,
//! and these are how it becomes current.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::print_json;
use crate::store::{PgStore, SchemaState, StoreSource, StoreUrl, migrations};

#[derive(Subcommand)]
pub(super) enum StoreCmd {
    /// Apply the pending schema migrations to the PostgreSQL store (`--store URL` or
    /// `[store] url`). Safe to run from several hosts at once, and again: applied ones are
    /// skipped. Refuses a schema newer than this skillhost knows.
    Migrate,
    /// The store in force, its schema version and the version this skillhost knows.
    /// Exit 1 when the hosts would refuse it (migrate, or upgrade skillhost).
    Status,
}

pub(super) fn run(home: &Path, flag: Option<&str>, cmd: &StoreCmd, json: bool) -> Result<ExitCode> {
    let (url, source) = StoreUrl::resolve(flag, home)?;
    let StoreUrl::Postgres(pg) = &url else {
        return local(home, &source, cmd, json);
    };
    let store = PgStore::connect(pg)?;
    match cmd {
        StoreCmd::Migrate => {
            let applied = store.migrate()?;
            let status = store.schema_status()?;
            if json {
                print_json(&json!({ "store": url.to_string(), "applied": applied, "version": status.version }))?;
            } else if applied.is_empty() {
                println!("{url}: schema version {} is current; nothing to apply", status.version);
            } else {
                for v in &applied {
                    let name = migrations::MIGRATIONS.iter().find(|m| m.version == *v).map_or("", |m| m.name);
                    println!("applied migration {v}: {name}");
                }
                println!("{url}: schema version {}", status.version);
            }
            Ok(ExitCode::SUCCESS)
        }
        StoreCmd::Status => {
            let status = store.schema_status()?;
            let problem = status.check(&store).err().map(|e| format!("{e:#}"));
            if json {
                print_json(&json!({
                    "store": url.to_string(),
                    "source": source.to_string(),
                    "version": status.version,
                    "known": status.known,
                    "state": status.state,
                    "applied": status.applied,
                    "pending": status.pending.iter().map(|(v, n)| json!({"version": v, "name": n})).collect::<Vec<_>>(),
                    "problem": problem,
                }))?;
            } else {
                println!("store: {url} (from {source})");
                println!("schema version: {} (this skillhost knows {})", status.version, status.known);
                for m in &status.applied {
                    println!("  applied {}: {} ({}, by {})", m.version, m.name, m.applied_at, m.applied_by);
                }
                for (v, name) in &status.pending {
                    println!("  pending {v}: {name}");
                }
                match &problem {
                    None => println!("state: current"),
                    Some(p) => {
                        println!("state: {}: {p}", if status.state == SchemaState::Ahead { "ahead" } else { "behind" })
                    }
                }
            }
            Ok(if problem.is_none() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

fn local(home: &Path, source: &StoreSource, cmd: &StoreCmd, json: bool) -> Result<ExitCode> {
    let what = match cmd {
        StoreCmd::Migrate => "nothing to migrate (its stores migrate themselves when opened)",
        StoreCmd::Status => "the home's own files",
    };
    if json {
        print_json(&json!({ "store": "local", "source": source.to_string(), "home": home }))?;
    } else {
        println!("store: local, the home {} (from {source}): {what}", home.display());
        println!("  a shared store is chosen with --store postgres://... or [store] url in skillhost.toml");
    }
    Ok(ExitCode::SUCCESS)
}
