//! `skillhost memory ...`: the memory system from the command line. Records written here
//! carry the provenance `user` (session `cli-<ms>`), so `memory quarantine --skill user` can
//! undo a bad hand-written batch like any skill's.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Subcommand;
use serde_json::json;

use super::output::clean_line;
use super::print_json;
use crate::library::{DEFAULT_NAMESPACE, Library};
use crate::memory::{MemoryKind, MemoryRecord, NewRecord, Provenance, SearchFilter, SearchOrder};

#[derive(Subcommand)]
pub(super) enum MemoryCmd {
    /// Print the MEMORY.md view (what every agent run gets) and its token count.
    Show {
        /// The memory namespace (an agent profile's own, or `default`).
        #[arg(long, default_value = DEFAULT_NAMESPACE)]
        namespace: String,
    },
    /// Store a memory by hand.
    Add {
        /// The memory's text.
        text: String,
        /// preference | fact | task-result | snapshot | pitfall | general
        #[arg(long, default_value = "fact", value_parser = parse_kind)]
        kind: MemoryKind,
        /// 0 (expires after a day) to 5 (never dropped from MEMORY.md).
        #[arg(long, default_value_t = 3)]
        priority: u8,
        /// A tag to file it under (repeatable).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// The memory namespace (an agent profile's own, or `default`).
        #[arg(long, default_value = DEFAULT_NAMESPACE)]
        namespace: String,
    },
    /// Relevance search over long-term memory (or daily notes with --daily).
    Search {
        /// What to look for, in words.
        query: String,
        /// The memory namespace (an agent profile's own, or `default`).
        #[arg(long, default_value = DEFAULT_NAMESPACE)]
        namespace: String,
        /// Only records of this kind (repeatable): preference | fact | task-result | snapshot | pitfall | general
        #[arg(long = "kind", value_parser = parse_kind)]
        kinds: Vec<MemoryKind>,
        /// Only records of at least this priority (0 to 5).
        #[arg(long, default_value_t = 0)]
        min_priority: u8,
        /// Only records written in this agent session.
        #[arg(long)]
        session: Option<String>,
        /// Only records written by this skill.
        #[arg(long)]
        skill: Option<String>,
        /// Order relevant records by priority, then recency.
        #[arg(long)]
        by_priority: bool,
        /// How many results to show.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Search the daily notes instead.
        #[arg(long)]
        daily: bool,
    },
    /// Show a day's notes (default today, UTC), or append one with --add.
    Daily {
        /// The day to show, as YYYY-MM-DD (default today, UTC).
        #[arg(long)]
        date: Option<String>,
        /// Append this note to today's file (`#promote` flags it for `memory maintain`).
        #[arg(long)]
        add: Option<String>,
    },
    /// Copy a daily-note entry (DATE:LINE) into long-term memory, or set a record's priority (ID).
    Promote {
        /// A record id, or a daily-note entry as DATE:LINE.
        #[arg(value_name = "ID|DATE:LINE")]
        target: String,
        /// The priority to give it (0 to 5).
        #[arg(long)]
        priority: Option<u8>,
        /// The kind of the new record: preference | fact | task-result | snapshot | pitfall | general
        #[arg(long, default_value = "general", value_parser = parse_kind)]
        kind: MemoryKind,
        /// The memory namespace (an agent profile's own, or `default`).
        #[arg(long, default_value = DEFAULT_NAMESPACE)]
        namespace: String,
    },
    /// Move a record to the archive (undo with `memory archive --restore`).
    Forget {
        /// The record id (as `memory search` and `memory list` show it).
        id: u64,
    },
    /// Archive deprecated and expired records and merge near-duplicates.
    Compact {
        /// Only this namespace (default: all).
        #[arg(long)]
        namespace: Option<String>,
    },
    /// The weekly job: compact, demote decayed records, archive old daily notes, promote flagged notes.
    Maintain {
        /// Namespace that promoted daily notes go to.
        #[arg(long, default_value = DEFAULT_NAMESPACE)]
        namespace: String,
    },
    /// Write every record as JSON lines (stdout, or --output FILE).
    Export {
        /// Write to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Load `memory export` output (all or nothing).
    Import {
        /// A file of JSON lines written by `memory export`.
        file: PathBuf,
    },
    /// Deprecate everything a skill (or one version of it) wrote: the poisoned-memory response.
    Quarantine {
        /// The skill whose memories to deprecate.
        #[arg(long)]
        skill: String,
        /// A content-hash prefix of the version (see `skill history`).
        #[arg(long)]
        version: Option<String>,
    },
    /// List the records (oldest first), of every namespace or one.
    List {
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Include deprecated records.
        #[arg(long)]
        all: bool,
    },
    /// Show one record in full: text, provenance, timestamps.
    Get {
        /// The record id (as `memory list` shows it).
        id: u64,
    },
    /// The embedding model of semantic search: `install` it, or show its `status`.
    Model {
        #[command(subcommand)]
        action: super::memory_model::ModelCmd,
    },
    /// List what housekeeping removed, or put one entry back.
    Archive {
        /// Put this archived entry back (ids as listed without --restore).
        #[arg(long, value_name = "ARCHIVE_ID")]
        restore: Option<u64>,
    },
}

fn parse_kind(s: &str) -> Result<MemoryKind, String> {
    MemoryKind::parse(s)
}

fn print_records(title: &str, hits: &[(MemoryRecord, Option<f32>)]) {
    println!("{title}");
    for (r, score) in hits {
        let score = score.map(|s| format!(" score {s:.2}")).unwrap_or_default();
        let by: Vec<&str> = r.skills().collect();
        let state = if r.deprecated.is_some() { " DEPRECATED" } else { "" };
        println!("  #{} [{} p{}{score}{state}] {}", r.id, r.kind.as_str(), r.priority, clean_line(&r.content));
        println!("      by {} (session {})", clean_line(&by.join(", ")), clean_line(&r.session));
    }
}

pub(super) fn run(lib: &Library, cmd: MemoryCmd, json: bool) -> Result<ExitCode> {
    let cmd = match cmd {
        MemoryCmd::Model { action } => return super::memory_model::run(lib.home(), action, json),
        MemoryCmd::Search { .. } if !json && crate::memory::embed::model_path(lib.home()).is_none() => {
            eprintln!("{}", crate::memory::embed::lexical_only_notice());
            cmd
        }
        cmd => cmd,
    };
    let memory = lib.memory()?;
    match cmd {
        MemoryCmd::Show { namespace } => {
            let view = memory.view(&namespace)?;
            if json {
                print_json(&view)?;
            } else {
                print!("{}", view.text);
                eprintln!(
                    "\n({} / {} tokens, cl100k_base; {} records shown, {} omitted)",
                    view.tokens,
                    view.budget,
                    view.included().count(),
                    view.omitted
                );
            }
        }
        MemoryCmd::Add { text, kind, priority, tags, namespace } => {
            // Each hand-written add is its own session, so a merge keeps both provenances.
            let session = format!("cli-{}", memory.now_ms());
            let (id, merged) = memory.add_detailed(NewRecord {
                namespace,
                kind,
                content: text,
                priority,
                tags,
                provenance: Provenance { skill: "user".into(), skill_hash: String::new(), session, step: 0 },
            })?;
            let record = memory.get(id)?.ok_or_else(|| anyhow!("memory #{id} vanished"))?;
            if json {
                print_json(&json!({ "merged": merged, "record": record }))?;
            } else if merged {
                println!("merged into memory #{id} (the same fact was already stored)");
            } else if let Some(old) = record.supersedes.last() {
                println!(
                    "stored memory #{id}; it updates #{old}, now archived as outdated (`skillhost memory archive` shows it)"
                );
            } else {
                println!("stored memory #{id}");
            }
        }
        MemoryCmd::Search { query, namespace, kinds, min_priority, session, skill, by_priority, limit, daily } => {
            if daily {
                let hits = memory.search_daily(&query, limit)?;
                if json {
                    print_json(&hits)?;
                } else {
                    for h in &hits {
                        println!("  {}:{} (score {:.2}) {}", h.date, h.line, h.score, clean_line(&h.text));
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let filter = SearchFilter {
                namespace: Some(namespace),
                kinds,
                min_priority,
                session,
                skill,
                order: if by_priority { SearchOrder::PriorityThenRecency } else { SearchOrder::Relevance },
            };
            let hits = memory.search(&query, &filter, limit)?;
            if json {
                print_json(&hits)?;
            } else {
                let shown: Vec<(MemoryRecord, Option<f32>)> =
                    hits.into_iter().map(|h| (h.record, Some(h.score))).collect();
                print_records(&format!("{} memories", shown.len()), &shown);
            }
        }
        MemoryCmd::Daily { date, add } => {
            if let Some(text) = add {
                let entry = memory.note(&text)?;
                if json {
                    print_json(&entry)?;
                } else {
                    println!("noted in {}:{}", entry.date, entry.line);
                }
                return Ok(ExitCode::SUCCESS);
            }
            let (date, entries) = memory.daily(date.as_deref())?;
            if json {
                print_json(&json!({ "date": date, "entries": entries }))?;
            } else if entries.is_empty() {
                println!("no notes on {date}");
            } else {
                for e in &entries {
                    println!("{}:{}  {}", e.date, e.line, clean_line(&e.text));
                }
            }
        }
        MemoryCmd::Promote { target, priority, kind, namespace } => {
            let record = match target.split_once(':') {
                Some((date, line)) => {
                    let line: u32 =
                        line.parse().map_err(|_| anyhow!("`{target}`: expected DATE:LINE, e.g. 2026-11-30:3"))?;
                    let id = memory.promote_daily(date, line, &namespace, kind, priority.unwrap_or(3))?;
                    memory.get(id)?.ok_or_else(|| anyhow!("memory #{id} vanished"))?
                }
                None => {
                    let id: u64 = target
                        .trim_start_matches('#')
                        .parse()
                        .map_err(|_| anyhow!("`{target}` is neither a memory id nor DATE:LINE"))?;
                    let current = memory.get(id)?.ok_or_else(|| anyhow!("no memory #{id}"))?;
                    memory.set_priority(id, priority.unwrap_or((current.priority + 1).min(5)))?
                }
            };
            if json {
                print_json(&record)?;
            } else {
                println!("memory #{} is now priority {}: {}", record.id, record.priority, record.content);
            }
        }
        MemoryCmd::List { namespace, all } => super::memory_records::list(lib, namespace.as_deref(), all, json)?,
        MemoryCmd::Get { id } => super::memory_records::get(lib, id, json)?,
        MemoryCmd::Forget { id } => {
            let archive_id = memory.forget(id)?;
            if json {
                print_json(&json!({ "forgotten": id, "archive_id": archive_id }))?;
            } else {
                println!(
                    "memory #{id} moved to the archive (entry {archive_id}; `skillhost memory archive --restore {archive_id}` undoes it)"
                );
            }
        }
        MemoryCmd::Compact { namespace } => {
            let report = memory.compact(namespace.as_deref())?;
            if json {
                print_json(&report)?;
            } else {
                println!(
                    "compacted: {} merged, {} expired, {} deprecated removed; {} archive entries (`skillhost memory archive`)",
                    report.merged.len(),
                    report.expired.len(),
                    report.deprecated_removed.len(),
                    report.archived.len()
                );
            }
        }
        MemoryCmd::Maintain { namespace } => {
            let report = memory.maintain(&namespace)?;
            if json {
                print_json(&report)?;
            } else {
                let c = &report.compact;
                println!(
                    "maintained: {} merged, {} expired, {} deprecated removed, {} demoted, {} daily notes archived, {} notes promoted",
                    c.merged.len(),
                    c.expired.len(),
                    c.deprecated_removed.len(),
                    report.demoted.len(),
                    report.daily_archived.len(),
                    report.promoted.len()
                );
            }
        }
        MemoryCmd::Export { output } => match output {
            Some(path) => {
                let mut buf = Vec::new();
                let n = memory.export(&mut buf)?;
                std::fs::write(&path, buf).with_context(|| format!("cannot write {}", path.display()))?;
                if json {
                    print_json(&json!({ "exported": n, "file": path }))?;
                } else {
                    println!("exported {n} memories to {}", path.display());
                }
            }
            None => {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                memory.export(&mut out)?;
                out.flush()?;
            }
        },
        MemoryCmd::Import { file } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let report = memory.import(&text, &file.display().to_string())?;
            if json {
                print_json(&report)?;
            } else {
                println!(
                    "imported {} memories ({} already present, {} renumbered)",
                    report.imported,
                    report.unchanged,
                    report.renumbered.len()
                );
            }
        }
        MemoryCmd::Quarantine { skill, version } => {
            if version.as_deref().is_some_and(|v| v.is_empty() || !v.chars().all(|c| c.is_ascii_hexdigit())) {
                bail!("--version takes a content-hash prefix (hex), as `skillhost skill history {skill}` shows");
            }
            let ids = memory.quarantine(&skill, version.as_deref())?;
            if json {
                print_json(&json!({ "deprecated": ids }))?;
            } else {
                println!(
                    "deprecated {} memories written by {skill}{}; they no longer reach prompts or skills (`memory compact` archives them)",
                    ids.len(),
                    version.map(|v| format!(" version {v}")).unwrap_or_default()
                );
            }
        }
        MemoryCmd::Archive { restore: Some(id) } => {
            let record = memory.restore(id)?;
            if json {
                print_json(&record)?;
            } else {
                println!("restored memory #{}: {}", record.id, record.content);
                if let Some(successor) = record.superseded_by {
                    println!(
                        "note: #{} was superseded by #{successor}, which is still live: both are live now and search ranks #{successor} first; forget #{successor} (`skillhost memory forget {successor}`) if the old value holds again",
                        record.id
                    );
                }
            }
        }
        // Taken before the store is opened (above); kept here for the match to be complete.
        MemoryCmd::Model { action } => return super::memory_model::run(lib.home(), action, json),
        MemoryCmd::Archive { restore: None } => {
            let entries = memory.archive()?;
            if json {
                print_json(&entries)?;
            } else {
                for e in &entries {
                    let into = match (e.merged_into, e.superseded_by) {
                        (_, Some(s)) => format!(", superseded by #{s}"),
                        (Some(m), None) => format!(" into #{m}"),
                        (None, None) => String::new(),
                    };
                    println!("  {} {}{into}: #{} {}", e.id, e.reason, e.record.id, clean_line(&e.record.content));
                }
                println!("{} archive entries", entries.len());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
