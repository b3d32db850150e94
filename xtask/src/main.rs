//! `cargo xtask …`: the first command on a machine that has only the Rust toolchain.
//!
//! The justfile stays the task runner (demo, test, build-skills, bench, lint); this crate only
//! installs what it needs and then hands over to it, so there is one set of recipes:
//!
//! - `cargo xtask setup`: adds the `wasm32-wasip2` target (skills are built for it) and installs
//!   `just` with `cargo install just --locked` when it is missing. Both print cargo's and
//!   rustup's own progress, so a first build is never silent.
//! - `cargo xtask demo` / `test` / `bench` / `lint` / `build-skills`: setup, then that recipe.
//!
//! It has no dependencies (std only) and is not a default member of the workspace, so
//! `cargo build` and `cargo test` of the host never build it.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const TARGET: &str = "wasm32-wasip2";
const RECIPES: [&str; 5] = ["demo", "test", "bench", "lint", "build-skills"];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or("demo");
    let result = match task {
        "setup" => setup().map(|just| {
            say(&format!("ready: `{}` and the {TARGET} target are installed", just.display()));
        }),
        recipe if RECIPES.contains(&recipe) => setup().and_then(|just| run_just(&just, &args)),
        "-h" | "--help" | "help" => {
            println!("{}", usage());
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n{}", usage())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> String {
    format!(
        "usage: cargo xtask [setup | {}] [ARGS for the just recipe]\n\
         setup installs the {TARGET} target and `just` when missing; every other task runs setup, then `just TASK`",
        RECIPES.join(" | ")
    )
}

fn say(line: &str) {
    eprintln!("xtask: {line}");
}

/// Installs what is missing; returns the `just` to run.
fn setup() -> Result<PathBuf, String> {
    ensure_target()?;
    ensure_just()
}

fn ensure_target() -> Result<(), String> {
    let installed = output("rustup", &["target", "list", "--installed"]).map_err(|e| {
        format!("cannot run `rustup` ({e}); skillhost needs a rustup-managed toolchain to add the {TARGET} target")
    })?;
    if installed.lines().any(|l| l.trim() == TARGET) {
        return Ok(());
    }
    say(&format!("installing the {TARGET} target (skills are WebAssembly components)"));
    status(Command::new("rustup").args(["target", "add", TARGET]), "rustup target add")
}

fn ensure_just() -> Result<PathBuf, String> {
    if let Some(found) = find_just() {
        return Ok(found);
    }
    say(
        "installing `just` (the task runner) with `cargo install just --locked`: a one-time build of a few minutes, progress below",
    );
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    status(Command::new(cargo).args(["install", "just", "--locked"]), "cargo install just")?;
    let installed = find_just()
        .ok_or_else(|| format!("`cargo install just` finished but no `just` is in {}", cargo_bin().display()))?;
    if !on_path("just") {
        say(&format!(
            "`just` is in {}, which is not on your PATH: add it (e.g. `export PATH=\"{}:$PATH\"`) to run `just test`",
            cargo_bin().display(),
            cargo_bin().display()
        ));
    }
    Ok(installed)
}

/// `just` on PATH, else in cargo's bin directory (where `cargo install` puts it).
fn find_just() -> Option<PathBuf> {
    if on_path("just") {
        return Some(PathBuf::from("just"));
    }
    let candidate = cargo_bin().join(if cfg!(windows) { "just.exe" } else { "just" });
    runs(&candidate).then_some(candidate)
}

fn on_path(program: &str) -> bool {
    runs(Path::new(program))
}

fn runs(program: &Path) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn cargo_bin() -> PathBuf {
    let home = env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env::var_os("HOME").or_else(|| env::var_os("USERPROFILE")).unwrap_or_default()).join(".cargo")
    });
    home.join("bin")
}

fn run_just(just: &Path, args: &[String]) -> Result<(), String> {
    // Run from the workspace root whatever the caller's directory, like cargo does.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("the xtask crate has no parent directory")?;
    // Recipes call `cargo`, `rustup` and each other: keep cargo's bin directory on their PATH.
    let mut paths = vec![cargo_bin()];
    paths.extend(env::var_os("PATH").map(|p| env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default());
    let path = env::join_paths(paths).map_err(|e| format!("cannot build PATH: {e}"))?;
    status(Command::new(just).args(args).current_dir(root).env("PATH", path), &format!("just {}", args.join(" ")))
}

fn output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs with the terminal inherited (progress visible); an error names the step.
fn status(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command.status().map_err(|e| format!("cannot start `{what}`: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("`{what}` failed ({status})")) }
}
