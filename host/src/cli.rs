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
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use serde_json::json;

use crate::library::Library;

mod agent;
mod audit;
mod config;
mod doctor;
mod logging;
mod mcp;
mod memory;
mod memory_model;
mod memory_records;
mod oci;
mod output;
mod params;
mod policy;
mod run;
mod secret;
mod skill;
mod store;

pub use output::UsageError;
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
    /// Where the system of record lives: `local` (the home; the default) or a PostgreSQL URL
    /// shared by several hosts, e.g. postgres:///skillhost?host=/run/postgresql. Default:
    /// `[store] url` in skillhost.toml.
    #[arg(long, global = true, env = "SKILLHOST_STORE", value_name = "local|postgres://...")]
    store: Option<String>,
    /// Machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// More diagnostics on stderr: -v info, -vv debug, -vvv trace (default: warnings).
    /// RUST_LOG (e.g. `skillhost=debug`) overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// How diagnostics on stderr are written: `text` lines for people, or `json` (one object
    /// a line: timestamp, level, target, fields) for a log shipper.
    #[arg(long, global = true, value_enum, default_value = "text", env = "SKILLHOST_LOG_FORMAT")]
    log_format: logging::LogFormat,
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
    ///
    /// Each step the host sends the model the goal, the progress, the skills (with their
    /// parameters), the memory summary and the last results; the model answers with one action:
    /// call a skill, reply, or ask you a question (the run then pauses; answer with --resume ID
    /// "ANSWER"). Skills run in the sandbox with the rights the policy grants; every step is a
    /// line in the audit log. The provider comes from skillhost.toml or the environment
    /// (`skillhost config show`); --decisions FILE replays a scripted run offline. Ctrl-C saves
    /// the session and prints the id to resume it with.
    Run(run::RunArgs),
    /// Serve the skills and memory to MCP clients (stdio; Streamable HTTP with --http).
    Mcp(mcp::McpArgs),
    /// Print a shell completion script: `skillhost completions bash > /etc/bash_completion.d/skillhost`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The configuration in force.
    #[command(subcommand)]
    Config(config::ConfigCmd),
    /// Check the setup: guest toolchains, the home, the stores (skills, memory, audit log) and
    /// the provider's reachability, with what to fix. Exit 1 when something is broken.
    Doctor,
    /// Secrets skills use without seeing them: the host adds them to requests to the hosts
    /// a skill declares.
    #[command(subcommand)]
    Secret(secret::SecretCmd),
    /// Signing keys for publishing skills (`skill push --sign NAME`).
    #[command(subcommand)]
    Key(oci::KeyCmd),
    /// Which keys may sign skills for which registry/repository prefix (<home>/trust.toml).
    #[command(subcommand)]
    Trust(oci::TrustCmd),
    /// The shared PostgreSQL store: apply schema migrations, show the schema version.
    #[command(subcommand)]
    Store(store::StoreCmd),
}

#[derive(Subcommand)]
enum SkillCmd {
    /// Install a skill: a directory (SKILL.md + optional skill.wasm), a `.skill` bundle, an
    /// http(s) URL to a bundle, or a signed OCI artifact (oci://HOST/REPO:TAG or @sha256:...).
    Install {
        /// What to install: a skill directory, a `.skill` bundle, an http(s) URL to one, or oci://HOST/REPO:TAG|@sha256:DIGEST.
        #[arg(value_name = "DIR|FILE.skill|URL|oci://REF")]
        dir: PathBuf,
        /// oci:// and .skill bundles: install although no signature by a key trusted for the
        /// repository (or `bundle:NAME`) verifies (shown loudly, recorded in install.json and
        /// the audit log).
        #[arg(long)]
        allow_unsigned: bool,
        /// oci:// only: install an older version than the one installed.
        #[arg(long)]
        allow_downgrade: bool,
        #[command(flatten)]
        registry: oci::RegistryArgs,
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
        /// The task, in words (English or Chinese).
        query: String,
        /// How many skills to show.
        #[arg(long, default_value_t = 5)]
        top: usize,
    },
    /// Show a skill: manifest, hashes, imports, declared / granted / effective rights.
    Info {
        /// The installed skill's name.
        name: String,
    },
    /// Run a skill once in the sandbox and print its SkillResult.
    Run {
        /// The installed skill's name.
        name: String,
        /// Parameters as a JSON object; `@FILE` reads it from a file, `-` from stdin.
        #[arg(long, value_name = "JSON|@FILE|-")]
        params: Option<String>,
        /// One parameter as name=value (repeatable; typed by SKILL.md).
        #[arg(short = 'p', long = "param")]
        pairs: Vec<String>,
        /// Session id (shares session working memory between runs).
        #[arg(long)]
        session: Option<String>,
    },
    /// Reinstall a skill from where it was installed from (the source in its install.json),
    /// confirming as `skill install` does before new content replaces it.
    Update {
        /// The installed skill's name.
        name: String,
        /// Replace without asking, keeping the grants (as `skill install --yes`).
        #[arg(long, short)]
        yes: bool,
        /// oci:// sources: accept a tag that now points at an older version.
        #[arg(long)]
        allow_downgrade: bool,
        /// Install the new version although no trusted signature verifies (shown loudly,
        /// recorded in install.json and the audit log).
        #[arg(long)]
        allow_unsigned: bool,
        #[command(flatten)]
        registry: oci::RegistryArgs,
    },
    /// Push a skill directory to an OCI registry as a CNCF Wasm artifact, signed with --sign.
    Push {
        /// The skill directory.
        dir: PathBuf,
        /// Where: oci://HOST[:PORT]/REPOSITORY:TAG.
        reference: String,
        /// The key (from `skillhost key generate NAME`) to sign with, in cosign's format.
        #[arg(long, value_name = "KEY")]
        sign: Option<String>,
        #[command(flatten)]
        registry: oci::RegistryArgs,
    },
    /// Check an installed skill: files against their hashes; for oci:// installs the digest,
    /// the signer and whether its key is still trusted. Exit 1 when something fails.
    Verify {
        /// The installed skill's name.
        name: String,
    },
    /// Remove an installed skill and its grants (its versions stay in the history).
    Remove {
        /// The skill's name (installed, or removed earlier with its versions still archived).
        name: String,
        /// Also delete every archived version.
        #[arg(long)]
        purge: bool,
    },
    /// Scaffold a new skill that builds and passes its own cases as generated.
    New {
        /// The new skill's name (lowercase letters, digits and dashes); also its directory.
        name: String,
        /// Guest language: rust (cargo, wasm32-wasip2), python (componentize-py), js
        /// (componentize-js), c (zig cc + wasm-tools) or go (Go + wasm-tools).
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
        /// The skill directory.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run an installed skill against parameter cases and print a table.
    Test {
        /// The installed skill's name.
        name: String,
        /// A JSON file of cases: parameters and the expected status (see a scaffold's cases.json).
        #[arg(long)]
        cases: PathBuf,
    },
    /// Pack a skill directory into a `.skill` bundle (a tar with a manifest of file hashes).
    Pack {
        /// The skill directory to pack.
        dir: PathBuf,
        /// Output file (default: NAME-VERSION.skill in the current directory).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Sign the bundle's content digest with this key (`skillhost key generate NAME`),
        /// in cosign's simple-signing format; installs check it against `bundle:NAME` rules.
        #[arg(long, value_name = "KEY")]
        sign: Option<String>,
    },
    /// Check a skill directory: our SKILL.md format, and with --agent-skills the Agent Skills rules.
    Lint {
        /// The skill directory (or its SKILL.md).
        path: PathBuf,
        /// Also check the Agent Skills rules (agentskills.io).
        #[arg(long)]
        agent_skills: bool,
    },
    /// Import a folder of Agent Skills (e.g. .claude/skills) as instruction skills.
    Import {
        /// A folder holding one directory per Agent Skill.
        dir: PathBuf,
    },
    /// Versions of a skill (installed and archived), with the rights each added or dropped.
    History {
        /// The skill's name.
        name: String,
    },
    /// Reinstall the exact bytes of an archived version (a version or a content-hash prefix).
    Rollback {
        /// The skill's name.
        name: String,
        /// A version (e.g. 0.2.0) or a content-hash prefix of at least 8 hex digits (see `skill history`).
        version: String,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Print the effective policy (user file with the project file over it).
    Show {
        /// Only this skill's grants.
        name: Option<String>,
    },
    /// Grant declared capabilities to an installed skill.
    Grant {
        /// The installed skill's name.
        name: String,
        /// What to grant (the syntax is filled in by `command()`).
        specs: Vec<String>,
    },
    /// Revoke capabilities (same syntax as grant; `all` removes every grant).
    Revoke {
        /// The installed skill's name.
        name: String,
        /// What to revoke (the syntax is filled in by `command()`).
        specs: Vec<String>,
    },
}

/// The whole grammar, with the help texts computed at run time (the grant syntax lists every
/// capability kind the host knows).
pub fn command() -> clap::Command {
    let grant = format!(
        "Grant a declared capability: {} (repeatable)",
        crate::capabilities::grant_syntax().trim_start_matches("use ")
    );
    let specs = format!("What to grant or revoke: {}", crate::capabilities::grant_syntax().trim_start_matches("use "));
    Cli::command()
        .mut_subcommand("skill", |c| c.mut_subcommand("install", |c| c.mut_arg("grants", |a| a.help(grant))))
        .mut_subcommand("policy", |c| {
            c.mut_subcommand("grant", |c| c.mut_arg("specs", |a| a.help(specs.clone())))
                .mut_subcommand("revoke", |c| c.mut_arg("specs", |a| a.help(specs)))
        })
}

pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = command().try_get_matches_from(&args).and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            // `--json` means errors too: a usage error is a JSON object on stdout.
            if e.use_stderr() && args.iter().skip(1).any(|a| a == "--json") {
                let message = e.render().to_string();
                let first = message.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
                println!("{}", json!({ "error": first, "kind": "usage", "exit_code": 2, "usage": message }));
                return ExitCode::from(2);
            }
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    logging::init(cli.verbose, cli.log_format);
    let json = cli.json;
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let usage = e.downcast_ref::<UsageError>().is_some();
            let code = if usage { 2 } else { 1 };
            if json {
                let mut object = json!({ "error": format!("{e:#}"), "exit_code": code });
                if usage {
                    object["kind"] = json!("usage");
                }
                println!("{object}");
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::from(code)
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
    // A shared store: refuse to run on a schema this build does not know or that needs
    // `skillhost store migrate`, before anything is done.
    if let (crate::store::StoreUrl::Postgres(url), _) = crate::store::StoreUrl::resolve(cli.store.as_deref(), &home)? {
        lib.use_postgres(crate::store::PgStore::open(&url)?)?;
    }
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
    // Commands that need no library (and must not create a home).
    match &cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut command(), "skillhost", &mut std::io::stdout());
            return Ok(ExitCode::SUCCESS);
        }
        Command::Config(cmd) => return config::run(&home_of(&cli)?, cmd, cli.json),
        Command::Store(cmd) => return store::run(&home_of(&cli)?, cli.store.as_deref(), cmd, cli.json),
        _ => {}
    }
    let mut lib = open_library(&cli)?;
    let home = home_of(&cli)?;
    let json = cli.json;
    // On a shared store, a command that changes the home runs holding the store's home lock
    // and shares what it changed (see `store::HomeSync`).
    let sync = lib.home_sync().cloned().filter(|_| changes_home(&cli.command));
    let dispatch = move || match cli.command {
        Command::Run(args) => run::run(&mut lib, &home, args, json),
        Command::Skill(cmd) => skill(&lib, cmd, json),
        Command::Policy(cmd) => policy(&lib, cmd, json),
        Command::Memory(cmd) => memory::run(&lib, cmd, json),
        Command::Audit(cmd) => audit::run(&lib, cmd, json),
        Command::Agent(cmd) => agent::run(&home, cmd, json),
        Command::Mcp(args) => mcp::run(lib, &home, args),
        Command::Doctor => doctor::run(&lib, &home, json),
        Command::Secret(cmd) => secret::run(&lib, cmd, json),
        Command::Key(cmd) => oci::key(&home, cmd, json),
        Command::Trust(cmd) => oci::trust(&home, cmd, json),
        Command::Completions { .. } | Command::Config(_) | Command::Store(_) => {
            unreachable!("handled before the library opens")
        }
    };
    match sync {
        Some(sync) => sync.change(dispatch),
        None => dispatch(),
    }
}

/// Whether `command` may change what a shared store's hosts share: installed skills, grants,
/// trusted keys, secrets, agent profiles.
fn changes_home(command: &Command) -> bool {
    match command {
        Command::Skill(c) => matches!(
            c,
            SkillCmd::Install { .. }
                | SkillCmd::Update { .. }
                | SkillCmd::Remove { .. }
                | SkillCmd::Import { .. }
                | SkillCmd::Rollback { .. }
        ),
        Command::Policy(c) => !matches!(c, PolicyCmd::Show { .. }),
        // Listing and showing change nothing: they need not wait for another host's change
        // (`agent route` asks a model, which may take long).
        Command::Secret(c) => !matches!(c, secret::SecretCmd::List),
        Command::Trust(c) => !matches!(c, oci::TrustCmd::List),
        Command::Agent(c) => {
            !matches!(c, agent::AgentCmd::List | agent::AgentCmd::Show { .. } | agent::AgentCmd::Route { .. })
        }
        _ => false,
    }
}

fn ask(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && matches!(line.trim(), "y" | "Y" | "yes")
}
