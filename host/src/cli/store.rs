//! `skillhost store migrate | status | import | export`: the schema of the shared PostgreSQL
//! store, and moving a home into it and back. These run before (and without) the command's
//! library: a host refuses to open on a schema that is not current, and migrate is how it
//! becomes current; import and export open what they need themselves
//! (`crate::store::transfer`).

use std::path::{Path, PathBuf};
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
    /// Move a local home (skills, history, agents, policy, trust, secrets, the audit log,
    /// memory) into the PostgreSQL store, which must be empty (freshly migrated). Secrets are
    /// sealed with the store key (SKILLHOST_STORE_KEY_FILE). The home is only read.
    Import {
        /// The skillhost home to import (e.g. ~/.local/share/skillhost).
        #[arg(long, value_name = "HOME_DIR")]
        from: PathBuf,
    },
    /// Write the PostgreSQL store's skills, policy, trust, secrets, audit log and memory
    /// into a new local home: DIR must not exist or be empty.
    Export {
        /// The directory to make a home of.
        #[arg(long, value_name = "HOME_DIR")]
        to: PathBuf,
    },
}

pub(super) fn run(home: &Path, flag: Option<&str>, cmd: &StoreCmd, json: bool) -> Result<ExitCode> {
    let (url, source) = StoreUrl::resolve(flag, home)?;
    let StoreUrl::Postgres(pg) = &url else {
        return local(home, &source, cmd, json);
    };
    if let StoreCmd::Import { from } | StoreCmd::Export { to: from } = cmd {
        let store = PgStore::open(pg)?;
        let (report, verb) = match cmd {
            StoreCmd::Import { .. } => (crate::store::transfer::import(&store, home, from)?, "imported"),
            _ => (crate::store::transfer::export(&store, home, from)?, "exported"),
        };
        if json {
            print_json(&json!({ "store": url.to_string(), verb: report }))?;
        } else {
            let (prep, dir) = if verb == "imported" { ("from", "into") } else { ("to", "from") };
            println!("{verb} {prep} {} {dir} {url}:", report.home.display());
            println!("  shared home: {} unit(s) (skills, history, agents, policy, trust, secrets)", report.units.len());
            println!("  audit log: {} line(s), head {}", report.audit_lines, report.audit_head);
            let m = &report.memory;
            println!(
                "  memory: {} record(s), {} archived, {} working-memory key(s), {} daily note(s)",
                m.records, m.archive, m.session_keys, m.daily_notes
            );
            println!("  paused agent runs: {}", report.agent_sessions);
        }
        return Ok(ExitCode::SUCCESS);
    }
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
        StoreCmd::Import { .. } | StoreCmd::Export { .. } => unreachable!("handled above"),
    }
}

fn local(home: &Path, source: &StoreSource, cmd: &StoreCmd, json: bool) -> Result<ExitCode> {
    let what = match cmd {
        StoreCmd::Migrate => "nothing to migrate (its stores migrate themselves when opened)",
        StoreCmd::Status => "the home's own files",
        StoreCmd::Import { .. } | StoreCmd::Export { .. } => anyhow::bail!(
            "store import and export move a home into a PostgreSQL store and back: name the store with --store postgres://... (or [store] url in skillhost.toml); a local home is copied with its directory"
        ),
    };
    if json {
        print_json(&json!({ "store": "local", "source": source.to_string(), "home": home }))?;
    } else {
        println!("store: local, the home {} (from {source}): {what}", home.display());
        println!("  a shared store is chosen with --store postgres://... or [store] url in skillhost.toml");
    }
    Ok(ExitCode::SUCCESS)
}
