//! The `skillhost` command line. Every command takes `--json` for scripting; human output
//! goes to stdout, progress and warnings to stderr. Exit codes: 0 success, 1 error,
//! 2 usage, 3 the skill ran but did not succeed (failure, require-more, invalid params,
//! stopped by a limit).

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::library::{Library, RunOptions, RunReport, params_from_pairs};
use crate::policy::{Grant, Policy, parse_grant};
use crate::sandbox::Status;

mod agent;
mod mcp;
mod memory;
mod run;

#[derive(Parser)]
#[command(name = "skillhost", version, about = "A WebAssembly-sandboxed skill host for AI agents")]
struct Cli {
    /// skillhost home (skills, policy, memory, cache). Default: the XDG data dir.
    #[arg(long, global = true, env = "SKILLHOST_HOME")]
    home: Option<PathBuf>,
    /// Directory that `$WORKSPACE` mounts refer to (default: the current directory).
    #[arg(long, global = true)]
    workspace: Option<PathBuf>,
    /// Machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install, inspect and run skills.
    #[command(subcommand)]
    Skill(SkillCmd),
    /// Show and change what skills are granted.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Long-term memory: the MEMORY.md view, search, daily notes, housekeeping, export.
    #[command(subcommand)]
    Memory(memory::MemoryCmd),
    /// Read and verify the hash-chained audit log of skill calls and agent steps.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Agent profiles (roles: skills, memory namespace) and a dry run of the router.
    #[command(subcommand)]
    Agent(agent::AgentCmd),
    /// Run the agent on a task: the model picks skills step by step (see `--help`).
    Run(run::RunArgs),
    /// Serve the skills and memory to MCP clients (stdio; Streamable HTTP with --http).
    Mcp(mcp::McpArgs),
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Sessions: first and last time, entries, skills called, final status.
    List,
    /// The entries of one session, in order.
    Show { session: String },
    /// Check the whole chain; exit 1 naming the first tampered line.
    Verify,
}

#[derive(Subcommand)]
enum SkillCmd {
    /// Install a skill: a directory (SKILL.md + optional skill.wasm), a `.skill` bundle, or
    /// an http(s) URL to a bundle.
    Install {
        #[arg(value_name = "DIR|FILE.skill|URL")]
        dir: PathBuf,
        /// Grant a declared capability: all | filesystem[=GUEST[:read|read-write]] | network[=RULE] | env[=NAME] | memory[=read|write] | session
        #[arg(long = "grant")]
        grants: Vec<String>,
        /// Grant everything the skill declares (and the limits it asks for) without asking.
        #[arg(long, short, conflicts_with = "grants")]
        yes: bool,
    },
    /// List installed skills.
    List,
    /// Find installed skills for a task described in words (English or Chinese).
    Search {
        query: String,
        /// How many skills to show.
        #[arg(long, default_value_t = 5)]
        top: usize,
    },
    /// Show a skill: manifest, hashes, imports, declared / granted / effective rights.
    Info { name: String },
    /// Run a skill once in the sandbox and print its SkillResult.
    Run {
        name: String,
        /// Parameters as a JSON object.
        #[arg(long)]
        params: Option<String>,
        /// One parameter as name=value (repeatable; typed by SKILL.md).
        #[arg(short = 'p', long = "param")]
        pairs: Vec<String>,
        /// Session id (shares session working memory between runs).
        #[arg(long)]
        session: Option<String>,
    },
    /// Remove an installed skill and its grants (its versions stay in the history).
    Remove {
        name: String,
        /// Also delete every archived version.
        #[arg(long)]
        purge: bool,
    },
    /// Scaffold a new skill that builds and passes its own cases as generated.
    New {
        name: String,
        /// Guest language (only rust for now).
        #[arg(long, default_value = "rust")]
        lang: String,
        /// Parent directory (default: the current one).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Path to skillhost's sdk/rust (default: next to the sources this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build a Rust skill crate to DIR/skill.wasm (cargo, wasm32-wasip2, release).
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run an installed skill against parameter cases and print a table.
    Test {
        name: String,
        #[arg(long)]
        cases: PathBuf,
    },
    /// Pack a skill directory into a `.skill` bundle (a tar with a manifest of file hashes).
    Pack {
        dir: PathBuf,
        /// Output file (default: NAME-VERSION.skill in the current directory).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Check a skill directory: our SKILL.md format, and with --agent-skills the Agent Skills rules.
    Lint {
        path: PathBuf,
        #[arg(long)]
        agent_skills: bool,
    },
    /// Import a folder of Agent Skills (e.g. .claude/skills) as instruction skills.
    Import { dir: PathBuf },
    /// Versions of a skill (installed and archived), with the rights each added or dropped.
    History { name: String },
    /// Reinstall the exact bytes of an archived version (a version or a content-hash prefix).
    Rollback { name: String, version: String },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Print the effective policy (user file with the project file over it).
    Show { name: Option<String> },
    /// Grant declared capabilities to an installed skill.
    Grant { name: String, specs: Vec<String> },
    /// Revoke capabilities (same syntax as grant; `all` removes every grant).
    Revoke { name: String, specs: Vec<String> },
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    let json = cli.json;
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if json {
                println!("{}", json!({ "error": format!("{e:#}") }));
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::from(1)
        }
    }
}

fn default_home() -> Result<PathBuf> {
    directories::ProjectDirs::from("", "", "skillhost")
        .map(|d| d.data_dir().to_path_buf())
        .ok_or_else(|| anyhow!("cannot determine a home directory; pass --home or set SKILLHOST_HOME"))
}

fn home_of(cli: &Cli) -> Result<PathBuf> {
    match &cli.home {
        Some(h) => Ok(h.clone()),
        None => default_home(),
    }
}

fn open_library(cli: &Cli) -> Result<Library> {
    let home = home_of(cli)?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let project = cwd.join(".skillhost").join("policy.toml");
    let mut lib = Library::open(&home, cli.workspace.as_deref(), project.exists().then_some(project))?;
    lib.set_default_workspace(&cwd)?;
    let quiet = cli.json;
    lib.on_progress(move |msg| {
        if !quiet || std::io::stderr().is_terminal() {
            eprintln!("  .. {msg}");
        }
    });
    Ok(lib)
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn run(cli: Cli) -> Result<ExitCode> {
    let lib = open_library(&cli)?;
    let home = home_of(&cli)?;
    let json = cli.json;
    match cli.command {
        Command::Run(args) => run::run(&lib, &home, args, json),
        Command::Skill(cmd) => skill(&lib, cmd, json),
        Command::Policy(cmd) => policy(&lib, cmd, json),
        Command::Memory(cmd) => memory::run(&lib, cmd, json),
        Command::Audit(cmd) => audit(&lib, cmd, json),
        Command::Agent(cmd) => agent::run(&home, cmd, json),
        Command::Mcp(args) => mcp::run(lib, &home, args),
    }
}

fn audit(lib: &Library, cmd: AuditCmd, json: bool) -> Result<ExitCode> {
    use crate::audit::VerifyError;
    let log = lib.audit_log();
    let warn_unreadable = |lines: &[u64]| {
        if !lines.is_empty() {
            eprintln!("warning: {} unreadable line(s) skipped; run `skillhost audit verify`", lines.len());
        }
    };
    match cmd {
        AuditCmd::List => {
            let read = log.read()?;
            warn_unreadable(&read.unreadable);
            let sessions = read.sessions();
            if json {
                print_json(&sessions)?;
            } else if sessions.is_empty() {
                println!("no audit entries yet in {}", log.path().display());
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
                let field = |e: &serde_json::Map<String, Value>, k: &str| match e.get(k) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => "-".into(),
                    Some(v) => v.to_string(),
                };
                println!(
                    "{:>5} {:<24} {:>4} {:<5} {:<24} {:<14} {:>9}  detail",
                    "seq", "time", "step", "kind", "skill", "status", "us"
                );
                for e in &entries {
                    let denials = e.get("denials").and_then(Value::as_array).map_or(0, Vec::len);
                    let stored = e.get("memories_stored").and_then(Value::as_array).map_or(0, Vec::len);
                    let mut detail = Vec::new();
                    if let Some(Value::String(err)) = e.get("error") {
                        detail.push(one_line(err, 60));
                    }
                    if denials > 0 {
                        detail.push(format!("{denials} denied"));
                    }
                    if stored > 0 {
                        detail.push(format!("{stored} memories stored"));
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
        }
        AuditCmd::Verify => match log.verify() {
            Ok(v) => {
                if json {
                    print_json(
                        &json!({ "intact": true, "path": log.path(), "entries": v.entries, "head": v.head, "torn_tail": v.torn_tail }),
                    )?;
                } else {
                    println!("audit log intact: {} entries, head {} ({})", v.entries, v.head, log.path().display());
                }
                if let Some(t) = &v.torn_tail {
                    eprintln!("warning: {t}");
                }
            }
            Err(VerifyError::Broken(b)) => {
                if json {
                    print_json(
                        &json!({ "intact": false, "path": log.path(), "line": b.line, "problem": b.problem, "message": b.message }),
                    )?;
                } else {
                    eprintln!("audit log TAMPERED or damaged ({}): {}", log.path().display(), b.message);
                }
                return Ok(ExitCode::from(1));
            }
            Err(e) => return Err(e.into()),
        },
    }
    Ok(ExitCode::SUCCESS)
}

fn ask(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && matches!(line.trim(), "y" | "Y" | "yes")
}

fn skill(lib: &Library, cmd: SkillCmd, json: bool) -> Result<ExitCode> {
    match cmd {
        SkillCmd::Install { dir, grants, yes } => {
            let interactive = !yes && grants.is_empty() && std::io::stdin().is_terminal() && !json;
            let decide = |m: &crate::manifest::Manifest| -> Result<Option<Grant>> {
                if yes {
                    return Ok(Some(Grant::everything(m)));
                }
                let mut set = Policy::default();
                for spec in &grants {
                    let g =
                        parse_grant(spec, &m.capabilities, &m.limits).map_err(|e| anyhow!("--grant {spec}: {e}"))?;
                    set.apply(&m.name, &g);
                }
                if !grants.is_empty() {
                    return Ok(Some(Grant { capabilities: set.granted(&m.name), limits: set.limit_caps(&m.name) }));
                }
                // On an upgrade, ask only about what the new version adds: the user's
                // earlier decisions (including revocations) stay as they are.
                let previous = lib.info(&m.name).ok().map(|i| (i.manifest.capabilities, ()));
                let new_caps = match &previous {
                    Some((caps, _)) => m.capabilities.minus(caps),
                    None => m.capabilities.clone(),
                };
                let asks: Vec<String> = new_caps.describe().into_iter().chain(m.limits.beyond_default()).collect();
                if interactive && !asks.is_empty() {
                    let what = if previous.is_some() { "this version newly asks for" } else { "asks for" };
                    eprintln!("{} {what}:", m.name);
                    for d in &asks {
                        eprintln!("  - {d}");
                    }
                    if ask("Grant these?") {
                        return Ok(Some(Grant { capabilities: new_caps, limits: m.limits }));
                    }
                }
                Ok(None)
            };
            let source = dir.to_string_lossy().into_owned();
            let report = if source.starts_with("http://") || source.starts_with("https://") {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                let bytes = rt.block_on(crate::bundle::download(&source))?;
                lib.install_bundle(&bytes, &decide)?
            } else if dir.is_file() {
                let bytes = std::fs::read(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
                lib.install_bundle(&bytes, &decide).map_err(|e| anyhow!("{}: {e:#}", dir.display()))?
            } else {
                lib.install(&dir, &decide)?
            };
            if json {
                print_json(&report)?;
            } else {
                println!(
                    "installed {} {} ({}, {})",
                    report.name,
                    report.version.as_deref().unwrap_or(""),
                    report.kind,
                    &report.content_hash[..12]
                );
                print_list("declares", &report.declared);
                print_list("granted", &report.granted);
                if !report.imports.is_empty() {
                    let short: Vec<&str> = report.imports.iter().map(|i| i.split('@').next().unwrap_or(i)).collect();
                    println!("  component imports ({}): {}", short.len(), short.join(", "));
                }
                let mut by_cap: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
                for u in &report.undeclared_imports {
                    by_cap.entry(&u.capability).or_default().push(&u.import);
                }
                for (cap, imports) in by_cap {
                    println!(
                        "  ! imports beyond the declaration: `{cap}` ({}); calls through them are denied",
                        imports.join(", ")
                    );
                }
                if let Some(prev) = &report.replaced {
                    println!("  replaced {} (kept in `skillhost skill history {}`)", &prev[..12], report.name);
                }
                if !report.new_rights.is_empty() {
                    println!(
                        "  ! this version asks for rights the previous one did not: {} (not granted unless you grant them)",
                        report.new_rights.join("; ")
                    );
                }
                if !report.limits_requested.is_empty() {
                    println!(
                        "  asks for limits above the defaults: {} (in force: wall {} ms, cpu {} ms, memory {} MiB; grant with `skillhost policy grant {} limits`)",
                        report.limits_requested.join("; "),
                        report.limits.wall_time_ms,
                        report.limits.cpu_time_ms,
                        report.limits.memory_mb,
                        report.name
                    );
                }
                if !report.not_granted.is_empty() {
                    println!(
                        "  not granted: {} (grant with `skillhost policy grant {} all`)",
                        report.not_granted.join("; "),
                        report.name
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::List => {
            let scanned = lib.scan()?;
            if json {
                let rows: Vec<Value> = scanned
                    .iter()
                    .map(|(name, info)| match info {
                        Ok(i) => json!({
                            "name": name,
                            "version": i.record.version,
                            "kind": if i.record.is_instruction() { "instruction" } else { "executable" },
                            "description": i.manifest.description,
                            "content_hash": i.record.content_hash,
                            "effective": i.effective,
                        }),
                        Err(e) => json!({ "name": name, "error": format!("{e:#}") }),
                    })
                    .collect();
                print_json(&rows)?;
            } else if scanned.is_empty() {
                println!("no skills installed; install one with `skillhost skill install DIR`");
            } else {
                for (name, info) in &scanned {
                    match info {
                        Ok(i) => println!(
                            "{:<28} {:<8} {:<11} {}",
                            name,
                            i.record.version.as_deref().unwrap_or("-"),
                            if i.record.is_instruction() { "instruction" } else { "executable" },
                            one_line(&i.manifest.description, 72)
                        ),
                        Err(e) => println!("{name:<28} BROKEN   {e:#}"),
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Search { query, top } => {
            let hits = lib.search(&query, top)?;
            if json {
                let rows: Vec<Value> = hits
                    .iter()
                    .map(|(h, i)| {
                        json!({
                            "name": h.name,
                            "score": h.score,
                            "kind": if i.record.is_instruction() { "instruction" } else { "executable" },
                            "description": i.manifest.description,
                        })
                    })
                    .collect();
                print_json(&rows)?;
            } else if hits.is_empty() {
                println!("no installed skill matches; try other words, or `skillhost skill list`");
            } else {
                for (h, i) in &hits {
                    println!("{:>6.2}  {:<28} {}", h.score, h.name, one_line(&i.manifest.description, 64));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Info { name } => {
            let info = lib.info(&name)?;
            if json {
                print_json(&info)?;
            } else {
                let m = &info.manifest;
                println!("{} {}", m.name, info.record.version.as_deref().unwrap_or(""));
                println!("  {}", m.description);
                if let Some(w) = &m.when_to_use {
                    println!("  when to use: {w}");
                }
                println!("  content hash: {}", info.record.content_hash);
                for p in &m.parameters {
                    println!(
                        "  param {} ({:?}{}){}",
                        p.name,
                        p.kind,
                        if p.required { ", required" } else { "" },
                        if p.description.is_empty() { String::new() } else { format!(": {}", p.description) }
                    );
                }
                print_list("declares", &info.declared);
                print_list("granted", &info.granted);
                print_list("effective", &info.effective);
                println!("  limits: {}", serde_json::to_string(&info.limits)?);
                if !info.record.imports.is_empty() {
                    print_list("component imports", &info.record.imports);
                }
                if info.record.is_instruction() && !m.body.is_empty() {
                    println!("\n{}", m.body);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Run { name, params, pairs, session } => {
            let mut value = match &params {
                Some(text) => serde_json::from_str::<Value>(text).map_err(|e| {
                    anyhow!("--params is not valid JSON ({e}); pass an object like '{{\"path\": \"x.log\"}}'")
                })?,
                None => json!({}),
            };
            if !pairs.is_empty() {
                let manifest = lib.info(&name)?.manifest;
                let extra = params_from_pairs(&manifest, &pairs)?;
                if let (Some(obj), Value::Object(more)) = (value.as_object_mut(), extra) {
                    obj.extend(more);
                }
            }
            let mut opts = RunOptions::default();
            if let Some(s) = session {
                opts.session = s;
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let report = rt.block_on(lib.run(&name, value, &opts))?;
            if json {
                print_json(&report)?;
            } else {
                print_run(&report);
            }
            let ok = matches!(&report.result, Ok(o) if o.status == Status::Success);
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(3) })
        }
        SkillCmd::New { name, lang, dir, sdk } => {
            if lang != "rust" {
                anyhow::bail!("`--lang {lang}` is not supported yet; only rust");
            }
            let parent = dir.unwrap_or_else(|| PathBuf::from("."));
            let created = crate::authoring::new_rust_skill(
                &parent,
                &name,
                &sdk.unwrap_or_else(crate::authoring::default_sdk_path),
            )?;
            if json {
                print_json(&json!({ "created": created }))?;
            } else {
                println!("created {}", created.display());
                println!(
                    "next: skillhost skill build {0} && skillhost skill install {0} --yes && skillhost skill test {name} --cases {0}/cases.json",
                    created.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Build { dir } => {
            let wasm = crate::authoring::build(&dir)?;
            let size = std::fs::metadata(&wasm).map(|m| m.len()).unwrap_or(0);
            if json {
                print_json(&json!({ "component": wasm, "bytes": size }))?;
            } else {
                println!("built {} ({} KiB)", wasm.display(), size / 1024);
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Test { name, cases } => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let results = rt.block_on(crate::authoring::test(lib, &name, &cases))?;
            let failed = results.iter().filter(|r| !r.passed).count();
            if json {
                print_json(&results)?;
            } else {
                println!("{:<4} {:<32} {:<15} {:>9}  detail", "", "case", "status", "us");
                for r in &results {
                    println!(
                        "{:<4} {:<32} {:<15} {:>9}  {}",
                        if r.passed { "ok" } else { "FAIL" },
                        one_line(&r.name, 32),
                        r.status,
                        r.elapsed_us,
                        r.detail
                    );
                }
                println!("{} passed, {} failed", results.len() - failed, failed);
            }
            Ok(if failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        SkillCmd::Pack { dir, output } => {
            let manifest = crate::manifest::Manifest::load_dir(&dir).map_err(|e| anyhow!("{e}"))?;
            let out = output.unwrap_or_else(|| {
                let version = manifest.version.as_ref().map(|v| format!("-{v}")).unwrap_or_default();
                PathBuf::from(format!("{}{version}.skill", manifest.name))
            });
            let bundle = crate::bundle::pack(&dir, &out)?;
            if json {
                print_json(&json!({ "bundle": out, "manifest": bundle }))?;
            } else {
                println!("packed {} ({} files) into {}", bundle.name, bundle.files.len(), out.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Lint { path, agent_skills } => {
            let issues = crate::lint::lint_dir(&path, agent_skills);
            let errors = issues.iter().filter(|i| i.severity == crate::lint::Severity::Error).count();
            if json {
                print_json(&issues)?;
            } else if issues.is_empty() {
                println!("{}: ok", path.join("SKILL.md").display());
            } else {
                for i in &issues {
                    println!("{i}");
                }
            }
            Ok(if errors > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        SkillCmd::Import { dir } => {
            let results = lib.import(&dir)?;
            if json {
                print_json(&results)?;
            } else {
                for r in &results {
                    let name = r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    match (&r.installed, &r.error) {
                        (Some(rep), _) => println!("imported {name} ({})", rep.kind),
                        (None, Some(e)) => println!("failed   {name}: {e}"),
                        (None, None) => println!("skipped  {name}: lint errors"),
                    }
                    for i in &r.issues {
                        println!("    {i}");
                    }
                    if !r.not_imported.is_empty() {
                        println!("    not imported: {}", r.not_imported.join(", "));
                    }
                }
            }
            let failed = results.iter().filter(|r| r.installed.is_none()).count();
            Ok(if failed > 0 { ExitCode::from(3) } else { ExitCode::SUCCESS })
        }
        SkillCmd::History { name } => {
            let entries = lib.history(&name)?;
            if json {
                print_json(&entries)?;
            } else {
                for e in &entries {
                    println!(
                        "{} {:<10} {}  {}",
                        if e.installed { "*" } else { " " },
                        e.version.as_deref().unwrap_or("-"),
                        &e.content_hash[..16],
                        if e.installed { "installed" } else { "archived" }
                    );
                    if !e.granted_then.is_empty() {
                        println!("      granted when archived: {}", e.granted_then.join("; "));
                    }
                    for r in &e.added_rights {
                        println!("      + {r}");
                    }
                    for r in &e.removed_rights {
                        println!("      - {r}");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Rollback { name, version } => {
            let entry = lib.rollback(&name, &version)?;
            if json {
                print_json(&entry)?;
            } else {
                println!(
                    "{name} rolled back to {} ({}); grants unchanged: rights it declares that you have not granted stay off",
                    entry.version.as_deref().unwrap_or("-"),
                    &entry.content_hash[..16]
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillCmd::Remove { name, purge } => {
            lib.remove(&name, purge)?;
            if json {
                print_json(&json!({ "removed": name }))?;
            } else {
                println!("removed {name}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max_chars {
        return flat;
    }
    let cut: String = flat.chars().take(max_chars - 1).collect();
    format!("{cut}…")
}

fn print_list(label: &str, items: &[String]) {
    if items.is_empty() {
        println!("  {label}: nothing");
    } else {
        println!("  {label}:");
        for i in items {
            println!("    - {i}");
        }
    }
}

fn print_run(r: &RunReport) {
    match &r.result {
        Ok(o) => {
            println!("{}", o.output);
            println!("--");
            println!("status: {:?}", o.status);
            for (k, v) in &o.metadata {
                println!("  {k}: {v}");
            }
        }
        Err(e) => println!("error: {e}"),
    }
    for m in &r.memories.stored {
        println!("memory stored: #{m}");
    }
    for d in &r.denials {
        println!("denied ({}): {}", d.capability, d.message);
    }
    for l in &r.logs {
        eprintln!("[{}] {}", l.level, l.message);
    }
    eprintln!("({} us, peak memory {} KiB, session {})", r.elapsed_us, r.memory_peak_bytes / 1024, r.session);
}

fn policy(lib: &Library, cmd: PolicyCmd, json: bool) -> Result<ExitCode> {
    let files = lib.policy_files();
    match cmd {
        PolicyCmd::Show { name } => {
            let p = files.load()?;
            let shown = match &name {
                Some(n) => {
                    let mut one = Policy { paths: p.paths.clone(), limits: p.limits, ..Default::default() };
                    one.skills.insert(n.clone(), p.granted(n));
                    if let Some(l) = p.skill_limits.get(n) {
                        one.skill_limits.insert(n.clone(), *l);
                    }
                    one
                }
                None => p,
            };
            if json {
                print_json(&shown)?;
            } else {
                println!("# user policy: {}", files.user.display());
                if let Some(pp) = &files.project {
                    println!("# project policy (overrides): {}", pp.display());
                }
                print!("{}", toml::to_string_pretty(&shown)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        PolicyCmd::Grant { name, specs } => {
            let manifest = lib.info(&name)?.manifest;
            change_grants(lib, &name, &specs, json, "grant", |p, spec| {
                p.apply(&name, &parse_grant(spec, &manifest.capabilities, &manifest.limits)?);
                Ok(())
            })
        }
        PolicyCmd::Revoke { name, specs } => {
            change_grants(lib, &name, &specs, json, "revoke", |p, spec| p.revoke(&name, spec))
        }
    }
}

/// Apply `change` for each spec to the user policy, save it, and show the result.
fn change_grants(
    lib: &Library,
    name: &str,
    specs: &[String],
    json: bool,
    verb: &str,
    mut change: impl FnMut(&mut Policy, &str) -> Result<()>,
) -> Result<ExitCode> {
    if specs.is_empty() {
        anyhow::bail!("say what to {verb}: {}", crate::policy::GRANT_SYNTAX);
    }
    let (p, ()) = Policy::update(&lib.policy_files().user, |p| specs.iter().try_for_each(|spec| change(p, spec)))?;
    let caps = p.granted(name);
    if json {
        print_json(&caps)?;
    } else {
        print_list(&format!("{name} granted"), &caps.describe());
    }
    Ok(ExitCode::SUCCESS)
}
