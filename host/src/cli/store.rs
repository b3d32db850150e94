//! `skillhost store migrate | status | import | export | compact`: the schema of the shared
//! PostgreSQL store, moving a home into it and back, and checkpointing its memory log. These
//! run before (and without) the command's library: a host refuses to open on a schema that
//! is not current, and migrate is how it becomes current; import, export and compact open
//! what they need themselves (`crate::store::transfer`, a host library for compact).

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
    /// Checkpoint the memory log: this host writes its replica's whole state at the log's
    /// head (writes wait meanwhile), new hosts start from the newest checkpoint, and the ops
    /// held by the newest checkpoint at least --retain-secs old are removed (a running host
    /// is never that far behind; one that was away longer is rebuilt when it restarts). Run
    /// it from a timer on one host, e.g. daily.
    Compact {
        /// Keep the ops of the last this many seconds, for hosts that are behind (0: remove
        /// every op the new checkpoint holds, only when no other host is running: one that is
        /// a moment behind would find its next op gone and refuse memory until restarted).
        #[arg(long, default_value_t = 600, value_name = "SECONDS")]
        retain_secs: u64,
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
    if let StoreCmd::Compact { retain_secs } = cmd {
        let store = PgStore::open(pg)?;
        let mut lib = crate::library::Library::open(home, None, None)?;
        lib.use_postgres(store.clone())?;
        let report = lib.memory()?.checkpoint(std::time::Duration::from_secs(*retain_secs))?;
        if json {
            print_json(&json!({ "store": url.to_string(), "checkpoint": report }))?;
        } else if report.seq == 0 {
            println!("the memory log of {url} is empty: nothing to checkpoint");
        } else {
            let p = &report.pruned;
            println!(
                "memory log of {url}: checkpoint at op {} ({} record(s), {} archived)",
                report.seq, report.records, report.archive
            );
            println!(
                "  removed {} op(s) and {} older checkpoint(s); {} op(s) kept (for hosts up to {retain_secs} s behind, and the writes after the checkpoint)",
                p.ops_removed, p.checkpoints_removed, p.ops_left
            );
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
            // How much the memory log holds (only on a current schema: the tables are known).
            let memory_log = match problem {
                None => Some(crate::store::PgMemoryLog::open(&store)?.stats()?),
                Some(_) => None,
            };
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
                    "memory_log": memory_log,
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
                if let Some(m) = &memory_log {
                    let checkpoint = match &m.checkpoint {
                        Some((seq, at)) => format!("newest checkpoint at op {seq} (written {at})"),
                        None => "no checkpoint (`skillhost store compact` writes one)".to_string(),
                    };
                    println!("memory log: head at op {}, {} op(s) held, {checkpoint}", m.head, m.ops);
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
        StoreCmd::Import { .. } | StoreCmd::Export { .. } | StoreCmd::Compact { .. } => {
            unreachable!("handled above")
        }
    }
}

fn local(home: &Path, source: &StoreSource, cmd: &StoreCmd, json: bool) -> Result<ExitCode> {
    let what = match cmd {
        StoreCmd::Migrate => "nothing to migrate (its stores migrate themselves when opened)",
        StoreCmd::Status => "the home's own files",
        StoreCmd::Import { .. } | StoreCmd::Export { .. } => anyhow::bail!(
            "store import and export move a home into a PostgreSQL store and back: name the store with --store postgres://... (or [store] url in skillhost.toml); a local home is copied with its directory"
        ),
        StoreCmd::Compact { .. } => anyhow::bail!(
            "store compact checkpoints the memory log of a PostgreSQL store (--store postgres://... or [store] url in skillhost.toml); a local home's memory has no log to compact (`skillhost memory compact` tidies its records)"
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
