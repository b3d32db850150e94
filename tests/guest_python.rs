//! Skills written in Python, through the real toolchain (componentize-py, installed by
//! `.ci/guest-toolchains` under target/guest-toolchains/) and the real host: the scaffold
//! builds and passes its own cases; the SDK test skill (tests/guests/python/pymodes) gives
//! results, metadata, memories, invalid params, a readable uncaught exception, a denied
//! capability, memory search and session use; the install report tells the runtime's own
//! imports from a warning.
//!
//! A missing toolchain skips the test with a loud message, except under CI (env `CI` set),
//! where it fails: CI must run them.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::{Env, repo};
use serde_json::Value;

/// componentize-py, or None after saying loudly why the test does nothing.
fn componentize_py() -> Option<PathBuf> {
    let path = repo().join("target/guest-toolchains/python/bin/componentize-py");
    if path.exists() {
        return Some(path);
    }
    let message = format!("componentize-py is not installed at {}: run .ci/guest-toolchains", path.display());
    if std::env::var_os("CI").is_some() {
        panic!("{message}");
    }
    eprintln!("SKIPPED: {message}");
    None
}

fn skillhost(home: &Path, componentize: &Path) -> Command {
    let mut c = Command::cargo_bin("skillhost").unwrap();
    c.env("SKILLHOST_HOME", home).env("SKILLHOST_COMPONENTIZE_PY", componentize);
    c
}

fn stdout(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stdout).into_owned()
}

fn run_json(home: &Path, tool: &Path, args: &[&str]) -> Value {
    let mut cmd = skillhost(home, tool);
    cmd.args(["--json", "skill", "run"]).args(args);
    let out = cmd.output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

fn output(report: &Value) -> &str {
    report["result"]["ok"]["output"].as_str().unwrap_or_else(|| panic!("no output: {report:#}"))
}

fn error(report: &Value) -> &str {
    report["result"]["error"]["message"].as_str().unwrap_or_else(|| panic!("no error: {report:#}"))
}

#[test]
fn python_scaffold_builds_installs_and_passes_its_cases() {
    let Some(tool) = componentize_py() else { return };
    let env = Env::new();
    let (home, parent) = (env.home.path(), env.sources.path());
    skillhost(home, &tool)
        .args(["skill", "new", "py-hello", "--lang", "python", "--dir"])
        .arg(parent)
        .assert()
        .success();
    let dir = parent.join("py-hello");
    assert!(dir.join("app.py").is_file() && dir.join("SKILL.md").is_file());
    skillhost(home, &tool).args(["skill", "build"]).arg(&dir).assert().success();
    assert!(dir.join("skill.wasm").is_file());
    let installed = skillhost(home, &tool).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let report = stdout(&installed);
    assert!(report.contains("imported by the Python runtime, not declared, so denied"), "{report}");
    assert!(!report.contains("! imports beyond the declaration"), "a normal Python skill is not a warning: {report}");

    let out = skillhost(home, &tool)
        .args(["--json", "skill", "test", "py-hello", "--cases"])
        .arg(dir.join("cases.json"))
        .assert()
        .success();
    let results: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(results.as_array().unwrap().len(), 4);
    assert!(results.as_array().unwrap().iter().all(|r| r["passed"] == true), "{results:#}");

    // Without the toolchain, the build says what to install.
    let mut missing = skillhost(home, Path::new("/nonexistent/componentize-py"));
    let out = missing.args(["skill", "build"]).arg(&dir).assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("pip install componentize-py==0.25.1"), "{err}");
}

#[test]
fn the_python_sdk_through_the_real_host() {
    let Some(tool) = componentize_py() else { return };
    let env = Env::new();
    let home = env.home.path();
    let dir = env.sources.path().join("pymodes");
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["SKILL.md", "app.py"] {
        std::fs::copy(repo().join("tests/guests/python/pymodes").join(file), dir.join(file)).unwrap();
    }
    skillhost(home, &tool).args(["skill", "build"]).arg(&dir).assert().success();
    // Installed without granting: memory and session are declared but denied.
    skillhost(home, &tool).args(["skill", "install"]).arg(&dir).assert().success();

    let r = run_json(home, &tool, &["pymodes", "-p", "mode=search", "-p", "arg=uart"]);
    assert!(error(&r).contains("denied: memory.search needs the `memory: read` capability"), "{r:#}");
    assert_eq!(r["denials"][0]["capability"], "memory", "{r:#}");

    skillhost(home, &tool).args(["policy", "grant", "pymodes", "memory=write", "session"]).assert().success();
    let r = run_json(home, &tool, &["pymodes", "-p", "mode=greet", "-p", "arg=Ada"]);
    assert_eq!(r["result"]["ok"]["status"], "success", "{r:#}");
    assert!(output(&r).starts_with("hello, Ada from "), "{r:#}");
    assert_eq!(r["result"]["ok"]["metadata"], serde_json::json!([["chars", "3"]]), "{r:#}");
    assert_eq!(r["memories"]["stored"].as_array().map(Vec::len), Some(1), "{r:#}");
    let r = run_json(home, &tool, &["pymodes", "-p", "mode=search", "-p", "arg=greeted"]);
    assert!(output(&r).contains("greeted Ada in python"), "{r:#}");

    let r = run_json(home, &tool, &["pymodes", "-p", "mode=bad"]);
    assert_eq!(r["result"]["error"]["kind"], "invalid-params", "{r:#}");
    assert!(error(&r).contains("arg: give a number"), "{r:#}");
    let r = run_json(home, &tool, &["pymodes", "-p", "mode=boom"]);
    assert!(error(&r).contains("uncaught KeyError: 'missing'") && error(&r).contains("app.py"), "{r:#}");

    let r = run_json(home, &tool, &["--session", "s-py", "pymodes", "-p", "mode=session", "-p", "arg=one"]);
    assert_eq!(output(&r), "before=None after=one keys=['py']", "{r:#}");
    let r = run_json(home, &tool, &["--session", "s-py", "pymodes", "-p", "mode=session", "-p", "arg=two"]);
    assert_eq!(output(&r), "before=one after=two keys=['py']", "{r:#}");
}
