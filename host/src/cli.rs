//! The `skillhost` command line. Every command takes `--json` for scripting; human output
//! goes to stdout, progress and warnings to stderr. Exit codes: 0 success, 1 error,
//! 2 usage, 3 the skill ran but did not succeed (failure, require-more, invalid params,
//! stopped by a limit).
//!
//! This file holds the argument grammar and the dispatch; the handlers live in `cli/`, one
//! file per command group (skill, policy, memory, agent, run), with the shared human-output
//! helpers in `cli/output.rs`.

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use clap::{Parser, Subcommand};
use serde_json::json;

use crate::library::Library;

mod agent;
mod audit;
mod mcp;
mod memory;
mod output;
mod policy;
mod run;
mod secret;
mod skill;

use output::one_line;
use policy::policy;
use skill::skill;

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
    Audit(audit::AuditCmd),
    /// Agent profiles (roles: skills, memory namespace) and a dry run of the router.
    #[command(subcommand)]
    Agent(agent::AgentCmd),
    /// Run the agent on a task: the model picks skills step by step (see `--help`).
    Run(run::RunArgs),
    /// Serve the skills and memory to MCP clients (stdio; Streamable HTTP with --http).
    Mcp(mcp::McpArgs),
    /// Secrets skills use without seeing them: the host adds them to requests to the hosts
    /// a skill declares.
    #[command(subcommand)]
    Secret(secret::SecretCmd),
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
        /// Guest language: rust (cargo, wasm32-wasip2), python (componentize-py) or js
        /// (componentize-js).
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::authoring::GuestLang,
        /// Parent directory (default: the current one).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Rust only: path to skillhost's sdk/rust (default: next to the sources this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build the skill in DIR to DIR/skill.wasm: a Rust crate with cargo (wasm32-wasip2,
    /// release), a Python skill (app.py) with componentize-py, a JavaScript skill (app.js)
    /// with componentize-js.
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
        Command::Audit(cmd) => audit::run(&lib, cmd, json),
        Command::Agent(cmd) => agent::run(&home, cmd, json),
        Command::Mcp(args) => mcp::run(lib, &home, args),
        Command::Secret(cmd) => secret::run(&lib, cmd, json),
    }
}

fn ask(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && matches!(line.trim(), "y" | "Y" | "yes")
}
