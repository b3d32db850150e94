//! `skillhost secret …`: the values skills use without seeing them. A value is read from a
//! hidden prompt or from stdin, never from the command line (which lands in shell history
//! and in every process listing).

use std::io::{IsTerminal, Read as _, Write as _};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use serde::Serialize;

use super::print_json;
use crate::library::Library;

#[derive(Subcommand)]
pub(super) enum SecretCmd {
    /// Store a secret's value: typed at a hidden prompt, or piped on stdin
    /// (`printf %s "$TOKEN" | skillhost secret set GITHUB_TOKEN`). One trailing newline is dropped.
    Set {
        /// The secret's name, as skills declare it (letters, digits, `_`).
        name: String,
    },
    /// Secret names, when they were set and which skills declare or hold them (never values).
    List,
    /// Forget a secret's value. Grants naming it stay; the skill gets no value until it is set again.
    Remove {
        /// The secret's name.
        name: String,
    },
}

#[derive(Serialize)]
struct Listed {
    name: String,
    set: bool,
    set_at: Option<String>,
    /// Skills whose policy grant includes it (they get it injected).
    granted_to: Vec<String>,
    /// Skills that declare it but are not granted it.
    declared_by: Vec<String>,
}

pub(super) fn run(lib: &Library, cmd: SecretCmd, json: bool) -> Result<ExitCode> {
    let store = lib.secrets();
    match cmd {
        SecretCmd::Set { name } => {
            let value = read_value(&name)?;
            let replaced = store.set(&name, &value)?;
            if json {
                print_json(&serde_json::json!({ "name": name, "replaced": replaced }))?;
            } else {
                println!(
                    "{} secret {name} ({} bytes) in {}",
                    if replaced { "replaced" } else { "stored" },
                    value.len(),
                    store.path().display()
                );
                let holders = listing(lib)?.into_iter().find(|l| l.name == name);
                match holders {
                    Some(l) if !l.granted_to.is_empty() => println!("  used by: {}", l.granted_to.join(", ")),
                    Some(l) if !l.declared_by.is_empty() => println!(
                        "  declared by {} but granted to none: `skillhost policy grant SKILL secrets={name}`",
                        l.declared_by.join(", ")
                    ),
                    _ => println!("  no installed skill declares {name} yet"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCmd::List => {
            let listed = listing(lib)?;
            if json {
                print_json(&listed)?;
            } else if listed.is_empty() {
                println!("no secrets set or declared (set one with `skillhost secret set NAME`)");
            } else {
                for l in &listed {
                    let state = match &l.set_at {
                        Some(at) => format!("set {at}"),
                        None => "NOT SET".to_string(),
                    };
                    println!("{}  ({state})", l.name);
                    if !l.granted_to.is_empty() {
                        println!("  granted to: {}", l.granted_to.join(", "));
                    }
                    if !l.declared_by.is_empty() {
                        println!("  declared, not granted: {}", l.declared_by.join(", "));
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCmd::Remove { name } => {
            let removed = store.remove(&name)?;
            if json {
                print_json(&serde_json::json!({ "name": name, "removed": removed }))?;
            } else if removed {
                println!("removed secret {name}");
            } else {
                println!("secret {name} was not set");
            }
            Ok(if removed { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

/// Every secret that is set or declared by an installed skill, with who holds it.
fn listing(lib: &Library) -> Result<Vec<Listed>> {
    let mut out: Vec<Listed> = lib
        .secrets()
        .list()?
        .into_iter()
        .map(|s| Listed {
            name: s.name,
            set: true,
            set_at: Some(s.set_at),
            granted_to: Vec::new(),
            declared_by: Vec::new(),
        })
        .collect();
    let policy = lib.policy()?;
    for (skill, info) in lib.scan()? {
        let Ok(info) = info else { continue };
        let effective = info.manifest.capabilities.intersect(&policy.granted(&skill)).secrets;
        for declared in &info.manifest.capabilities.secrets {
            let entry = match out.iter().position(|l| l.name == declared.name) {
                Some(i) => &mut out[i],
                None => {
                    out.push(Listed {
                        name: declared.name.clone(),
                        set: false,
                        set_at: None,
                        granted_to: Vec::new(),
                        declared_by: Vec::new(),
                    });
                    out.last_mut().expect("just pushed")
                }
            };
            if effective.iter().any(|e| e.name == declared.name) {
                entry.granted_to.push(skill.clone());
            } else {
                entry.declared_by.push(skill.clone());
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The value from a hidden prompt (a terminal) or from all of stdin (a pipe).
fn read_value(name: &str) -> Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("value of {name} (input hidden): ");
        std::io::stderr().flush().ok();
        let line = read_hidden_line()?;
        eprintln!();
        return Ok(line);
    }
    let mut value = String::new();
    stdin.lock().read_to_string(&mut value).context("cannot read the value from stdin")?;
    let value = value.strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v)).unwrap_or(&value).to_string();
    if value.is_empty() {
        bail!(
            "no value on stdin: pipe it in (`printf %s \"$VALUE\" | skillhost secret set {name}`) or run in a terminal to be prompted"
        );
    }
    Ok(value)
}

/// One line from the terminal with echo off, restored afterwards (also on error).
fn read_hidden_line() -> Result<String> {
    let fd = libc::STDIN_FILENO;
    // SAFETY: termios is plain data; tcgetattr fills it for a terminal fd.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd is stdin, `saved` is a valid termios to fill.
    if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
        bail!("cannot read the terminal's settings to hide the input; pipe the value on stdin instead");
    }
    let mut hidden = saved;
    hidden.c_lflag &= !libc::ECHO;
    hidden.c_lflag |= libc::ECHONL;
    // SAFETY: `hidden` is a copy of the terminal's own settings with echo cleared.
    unsafe { libc::tcsetattr(fd, libc::TCSANOW, &hidden) };
    let mut line = String::new();
    let read = std::io::stdin().read_line(&mut line);
    // SAFETY: restores the settings read above.
    unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    read.context("cannot read the value")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
