//! `cargo xtask …`: the first command on a machine that has only the Rust toolchain.
//!
//! The justfile stays the task runner (demo, test, build-skills, bench, lint); this crate only
//! installs what it needs and then hands over to it, so there is one set of recipes:
//!
//! - `cargo xtask setup`: adds the `wasm32-wasip2` target (skills are built for it) and installs
//!   `just` into cargo's bin directory when it is missing: the prebuilt binary from PyPI
//!   (`rust-just`, pinned version and wheel hashes) when Python's pip can fetch it, which takes
//!   seconds, else `cargo install just --locked`, a build of a few minutes. Each step prints its
//!   tool's own progress, so a first build is never silent.
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
/// The `just` that `cargo install just --locked` builds today, as PyPI's prebuilt wheels
/// (`rust-just`), with the sha256 of every wheel pip may pick: pip refuses any other file.
const JUST_FROM_PYPI: &str = "rust-just==1.59.0 \
    --hash=sha256:3ee47f26e3aff917107602d57a08ede20df447f78dc4f9ceb08e57a883c56eb9 \
    --hash=sha256:a305aa91fc425c44e3bcc7d5faae7b8c1503091d8e79aae1f6801dbdca478e20 \
    --hash=sha256:55a22dbd38fb3491d221da1e45184d09460526fae73b845eb9cdfbefcf06822b \
    --hash=sha256:105f7d21ff3a36ffbe1c2039bcac2c63b92941a11e3531ecdff3e4b6411f87d4 \
    --hash=sha256:68795a4da5ffb65ed79a79ffaa8cdb06b7db15feba82a36fb0855a3eb964eb24 \
    --hash=sha256:75bde89d36bb0c7b35fb9cecefb303f154dc320d4b5b8c832c5ad0bf1904077b
";

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
    match just_from_pypi() {
        Ok(()) => {}
        Err(why) => {
            say(&format!(
                "no prebuilt `just` ({why}); installing it with `cargo install just --locked`: a one-time build of a few minutes, progress below"
            ));
            let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
            status(Command::new(cargo).args(["install", "just", "--locked"]), "cargo install just")?;
        }
    }
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

/// Put PyPI's prebuilt `just` (hash-checked by pip) into cargo's bin directory, where
/// `cargo install` would have put it. Any failure (no Python, no pip, no network to PyPI, no
/// wheel for this platform) is returned for the fallback to build it instead.
fn just_from_pypi() -> Result<(), String> {
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success()))
        .ok_or("no Python with pip")?;
    let scratch = workspace_root()?.join("target").join("xtask-just");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
    let requirements = scratch.join("requirements.txt");
    std::fs::write(&requirements, JUST_FROM_PYPI)
        .map_err(|e| format!("cannot write {}: {e}", requirements.display()))?;
    say("installing `just` (the task runner): the prebuilt rust-just 1.59.0 from PyPI, hash-checked");
    let installed = scratch.join("wheel");
    status(
        Command::new(python)
            // Installing into a scratch directory as root is fine: silence pip's warning.
            .env("PIP_ROOT_USER_ACTION", "ignore")
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--only-binary", ":all:"])
            .args(["--require-hashes", "--target"])
            .arg(&installed)
            .arg("-r")
            .arg(&requirements),
        "pip install rust-just",
    )?;
    let name = if cfg!(windows) { "just.exe" } else { "just" };
    let from = [installed.join("bin").join(name), installed.join("Scripts").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or("the rust-just wheel holds no `just` binary")?;
    let bin = cargo_bin();
    std::fs::create_dir_all(&bin).map_err(|e| format!("cannot create {}: {e}", bin.display()))?;
    let to = bin.join(name);
    std::fs::copy(&from, &to).map_err(|e| format!("cannot copy `just` to {}: {e}", to.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot make {} executable: {e}", to.display()))?;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if !runs(&to) {
        let _ = std::fs::remove_file(&to);
        return Err(format!("the prebuilt `just` does not run here ({})", to.display()));
    }
    Ok(())
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

fn workspace_root() -> Result<&'static Path, String> {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or_else(|| "the xtask crate has no parent directory".to_string())
}

fn run_just(just: &Path, args: &[String]) -> Result<(), String> {
    // Run from the workspace root whatever the caller's directory, like cargo does.
    let root = workspace_root()?;
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
