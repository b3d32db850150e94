//! `skillhost audit`: list sessions, show one, verify the chain, and seal a damaged log so
//! that auditing (and with it every skill call) can resume.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::{one_line, print_json};
use crate::audit::{SealStatus, VerifyError};
use crate::library::Library;

#[derive(Subcommand)]
pub(super) enum AuditCmd {
    /// Sessions: first and last time, entries, skills called, final status.
    List,
    /// The entries of one session, in order.
    Show {
        /// The session id (as `audit list` shows it).
        session: String,
    },
    /// Check the whole chain; exit 1 naming the first tampered line.
    Verify,
    /// Set a damaged log aside (unchanged, in audit/sealed/) and start a new verified
    /// segment whose first line records it. Skill calls are refused while the log is damaged.
    Seal,
}

pub(super) fn run(lib: &Library, cmd: AuditCmd, json: bool) -> Result<ExitCode> {
    let log = lib.audit_log();
    let warn_unreadable = |lines: &[u64]| {
        if !lines.is_empty() {
            eprintln!("warning: {} unreadable line(s) skipped; run `skillhost audit verify`", lines.len());
        }
    };
    match cmd {
        AuditCmd::List => {
            let read = log.read_history()?;
            warn_unreadable(&read.unreadable);
            let sessions = read.sessions();
            if json {
                print_json(&sessions)?;
            } else if sessions.is_empty() {
                println!("no audit entries yet in {}", log.location());
            } else {
                println!("{:<28} {:<24} {:<24} {:>7} {:<14} skills", "session", "first", "last", "entries", "final");
                for s in &sessions {
                    println!(
                        "{:<28} {:<24} {:<24} {:>7} {:<14} {}",
                        s.session,
                        s.first_ts,
                        s.last_ts,
                        s.entries,
                        s.final_status,
                        one_line(&s.skills.join(", "), 60)
                    );
                }
            }
        }
        AuditCmd::Show { session } => {
            let entries = log.show(&session)?;
            if json {
                print_json(&entries)?;
            } else {
                print_entries(&entries);
            }
        }
        AuditCmd::Verify => match log.verify() {
            Ok(v) => {
                let sealed_ok = v.sealed.as_ref().is_none_or(|s| s.status == SealStatus::Intact);
                if json {
                    print_json(&json!({
                        "intact": sealed_ok,
                        "path": log.location(),
                        "entries": v.entries,
                        "head": v.head,
                        "torn_tail": v.torn_tail,
                        "sealed": v.sealed,
                    }))?;
                } else {
                    println!("audit log intact: {} entries, head {} ({})", v.entries, v.head, log.location());
                    if let Some(s) = &v.sealed {
                        let what = match s.status {
                            SealStatus::Intact => "unchanged since it was sealed",
                            SealStatus::Changed => "CHANGED after it was sealed",
                            SealStatus::Missing => "MISSING",
                        };
                        println!(
                            "  continues a sealed segment: {} ({} entries verified before its damage; sha256 {}): {what}",
                            s.file.display(),
                            s.verified_entries,
                            s.sha256
                        );
                    }
                }
                if let Some(t) = &v.torn_tail {
                    eprintln!("warning: {t}");
                }
                if !sealed_ok {
                    return Ok(ExitCode::from(1));
                }
            }
            Err(VerifyError::Broken(b)) => {
                if json {
                    print_json(
                        &json!({ "intact": false, "path": log.location(), "line": b.line, "problem": b.problem, "message": b.message }),
                    )?;
                } else {
                    eprintln!("audit log TAMPERED or damaged ({}): {}", log.location(), b.message);
                    if log.is_postgres() {
                        eprintln!(
                            "  keep the rows as evidence (and a dump of the table); appends go on from the head row"
                        );
                    } else {
                        eprintln!(
                            "  keep the file as evidence; `skillhost audit seal` sets it aside and starts a new verified segment"
                        );
                    }
                }
                return Ok(ExitCode::from(1));
            }
            Err(e) => return Err(e.into()),
        },
        AuditCmd::Seal => {
            let sealed = log.seal()?;
            if json {
                print_json(&sealed)?;
            } else {
                println!("sealed the damaged audit log: {}", sealed.damage);
                println!(
                    "  moved to {} ({} bytes, {} lines, {} verified; sha256 {})",
                    sealed.sealed_path.display(),
                    sealed.bytes,
                    sealed.lines,
                    sealed.verified_entries,
                    sealed.sha256
                );
                println!("  note: {}", sealed.note_path.display());
                println!("  new segment {} starts with the seal, head {}", log.path().display(), sealed.head);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_entries(entries: &[Map<String, Value>]) {
    let field = |e: &Map<String, Value>, k: &str| match e.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(v) => v.to_string(),
    };
    println!(
        "{:>5} {:<24} {:>4} {:<5} {:<24} {:<14} {:>9}  detail",
        "seq", "time", "step", "kind", "skill", "status", "us"
    );
    for e in entries {
        let count = |k: &str| e.get(k).and_then(Value::as_array).map_or(0, Vec::len);
        let mut detail = Vec::new();
        if let Some(Value::String(err)) = e.get("error") {
            detail.push(one_line(err, 60));
        }
        if count("denials") > 0 {
            detail.push(format!("{} denied", count("denials")));
        }
        if count("not_granted") > 0 {
            detail.push(format!("{} declared but not granted", count("not_granted")));
        }
        if count("memories_stored") > 0 {
            detail.push(format!("{} memories stored", count("memories_stored")));
        }
        println!(
            "{:>5} {:<24} {:>4} {:<5} {:<24} {:<14} {:>9}  {}",
            field(e, "seq"),
            field(e, "ts"),
            field(e, "step"),
            field(e, "kind"),
            field(e, "skill"),
            field(e, "status"),
            field(e, "elapsed_us"),
            detail.join("; ")
        );
    }
}
