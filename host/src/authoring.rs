//! Authoring: `skill new` scaffolds a Rust skill that builds and passes its own cases as
//! generated, `skill build` compiles a skill crate to `skill.wasm`, `skill test` runs an
//! installed skill against parameter cases and reports a table.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::library::{Library, RunOptions};
use crate::manifest::validate_name;
use crate::sandbox::{CallError, Status};

/// Where the SDK lives: next to the skillhost sources this binary was built from.
pub fn default_sdk_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("sdk").join("rust")
}

/// Create `parent/name/` with a working Rust skill.
pub fn new_rust_skill(parent: &Path, name: &str, sdk: &Path) -> Result<PathBuf> {
    validate_name(name).map_err(|e| anyhow!("`{name}` is not a skill name: {e}"))?;
    let sdk = std::fs::canonicalize(sdk)
        .map_err(|_| anyhow!("the Rust SDK is not at {}; pass --sdk PATH/TO/skillhost/sdk/rust", sdk.display()))?;
    let dir = parent.join(name);
    if dir.exists() {
        bail!("{} already exists; choose another name or remove it", dir.display());
    }
    let sdk_toml = sdk.to_string_lossy().replace('\\', "/");
    let files: [(&str, String); 6] = [
        ("Cargo.toml", include_str!("scaffold/Cargo.toml.in").replace("{{name}}", name).replace("{{sdk}}", &sdk_toml)),
        (".cargo/config.toml", include_str!("scaffold/config.toml.in").to_string()),
        ("src/lib.rs", include_str!("scaffold/lib.rs.in").to_string()),
        ("SKILL.md", include_str!("scaffold/SKILL.md.in").replace("{{name}}", name)),
        ("cases.json", include_str!("scaffold/cases.json.in").to_string()),
        (".gitignore", "target/\nskill.wasm\n".to_string()),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(dir)
}

/// `cargo build` the skill crate in `dir` for wasm32-wasip2 and copy the component to
/// `dir/skill.wasm`.
pub fn build(dir: &Path) -> Result<PathBuf> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("{} not found: `skill build` builds a Rust skill crate", manifest.display()))?;
    let crate_name = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("name")
                .and_then(|r| r.trim().strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_string())
        })
        .ok_or_else(|| anyhow!("{} has no package name", manifest.display()))?;
    let status = Command::new("cargo")
        .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
        .arg(&manifest)
        .status()
        .context("cannot run cargo; is Rust installed?")?;
    if !status.success() {
        bail!("cargo build failed (see above); is the target installed? `rustup target add wasm32-wasip2`");
    }
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| dir.join("target"));
    let wasm = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", crate_name.replace('-', "_")));
    let out = dir.join("skill.wasm");
    std::fs::copy(&wasm, &out).with_context(|| format!("cargo did not produce {}", wasm.display()))?;
    Ok(out)
}

/// One parameter case of `skill test`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default = "empty_object")]
    pub params: Value,
    /// success | failure | require-more | invalid-params | failed | stopped
    #[serde(default = "success")]
    pub expect_status: String,
    /// A substring the output (or error message) must contain.
    #[serde(default)]
    pub expect_output: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn success() -> String {
    "success".into()
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub passed: bool,
    pub status: String,
    pub detail: String,
    pub elapsed_us: u64,
}

/// Run the installed skill `name` against the cases in `cases_file`.
pub async fn test(lib: &Library, name: &str, cases_file: &Path) -> Result<Vec<CaseResult>> {
    let cases: Vec<Case> = serde_json::from_slice(
        &std::fs::read(cases_file).with_context(|| format!("cannot read {}", cases_file.display()))?,
    )
    .map_err(|e| {
        anyhow!(
            "{} is not a list of cases ({e}); each is {{\"name\", \"params\", \"expect_status\", \"expect_output\"}}",
            cases_file.display()
        )
    })?;
    let mut results = Vec::new();
    for case in cases {
        let opts = RunOptions::default();
        let report = lib.run(name, case.params.clone(), &opts).await?;
        let (status, text) = match &report.result {
            Ok(o) => (
                match o.status {
                    Status::Success => "success",
                    Status::Failure => "failure",
                    Status::RequireMore => "require-more",
                },
                o.output.clone(),
            ),
            Err(CallError::InvalidParams(m)) => ("invalid-params", m.clone()),
            Err(CallError::Failed(m)) => ("failed", m.clone()),
            Err(e) => ("stopped", e.to_string()),
        };
        let status_ok = status == case.expect_status;
        let output_ok = case.expect_output.as_ref().is_none_or(|want| text.contains(want.as_str()));
        let detail = if !status_ok {
            format!("expected {}, got {status}: {}", case.expect_status, first_line(&text))
        } else if !output_ok {
            format!("output lacks {:?}: {}", case.expect_output.unwrap_or_default(), first_line(&text))
        } else {
            first_line(&text)
        };
        results.push(CaseResult {
            name: case.name,
            passed: status_ok && output_ok,
            status: status.to_string(),
            detail,
            elapsed_us: report.elapsed_us,
        });
    }
    Ok(results)
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(79).collect::<String>())
    } else {
        line.to_string()
    }
}
