//! Skills written in Python and JavaScript, through the real toolchains (componentize-py and
//! componentize-js, installed by `.ci/guest-toolchains` under target/guest-toolchains/) and
//! the real host: each scaffold builds and passes its own cases; each SDK test skill
//! (tests/guests/<lang>/) gives results, metadata, memories, invalid params, a readable
//! uncaught exception, a denied capability, memory search and session use; the install
//! report tells the runtime's own imports from a warning.
//!
//! A missing toolchain skips the test with a loud message, except under CI (env `CI` set),
//! where it fails: CI must run them.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::{Env, repo};
use serde_json::{Value, json};

#[derive(Clone, Copy)]
enum Lang {
    Python,
    Js,
}

impl Lang {
    fn flag(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }

    fn runtime(self) -> &'static str {
        match self {
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }

    /// (environment variable that names the tool, where `.ci/guest-toolchains` puts it)
    fn tool(self) -> (&'static str, &'static str) {
        match self {
            Lang::Python => ("SKILLHOST_COMPONENTIZE_PY", "target/guest-toolchains/python/bin/componentize-py"),
            Lang::Js => ("SKILLHOST_COMPONENTIZE_JS", "target/guest-toolchains/js/node_modules/.bin/componentize-js"),
        }
    }

    /// The SDK test skill's directory and name.
    fn modes(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Lang::Python => ("tests/guests/python/pymodes", "pymodes", "app.py"),
            Lang::Js => ("tests/guests/js/jsmodes", "jsmodes", "app.js"),
        }
    }

    /// What the uncaught exception of mode `boom` must say.
    fn uncaught(self) -> &'static str {
        match self {
            Lang::Python => "uncaught KeyError: 'missing'",
            Lang::Js => "uncaught TypeError:",
        }
    }
}

/// The toolchain, or None after saying loudly why the test does nothing.
fn toolchain(lang: Lang) -> Option<PathBuf> {
    common::require_installed(
        repo().join(lang.tool().1),
        &format!("the {} toolchain", lang.flag()),
        ".ci/guest-toolchains",
    )
}

fn skillhost(home: &Path, lang: Lang, tool: &Path) -> Command {
    let mut c = Command::cargo_bin("skillhost").unwrap();
    c.env("SKILLHOST_HOME", home).env(lang.tool().0, tool);
    c
}

fn stdout(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stdout).into_owned()
}

fn run_json(home: &Path, args: &[&str]) -> Value {
    let out = Command::cargo_bin("skillhost")
        .unwrap()
        .env("SKILLHOST_HOME", home)
        .args(["--json", "skill", "run"])
        .args(args)
        .output()
        .unwrap();
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

fn scaffold_builds_installs_and_passes_its_cases(lang: Lang) {
    let Some(tool) = toolchain(lang) else { return };
    let env = Env::new();
    let (home, parent) = (env.home.path(), env.sources.path());
    let name = format!("{}-hello", lang.flag());
    skillhost(home, lang, &tool)
        .args(["skill", "new", &name, "--lang", lang.flag(), "--dir"])
        .arg(parent)
        .assert()
        .success();
    let dir = parent.join(&name);
    assert!(dir.join("SKILL.md").is_file() && dir.join("cases.json").is_file());
    skillhost(home, lang, &tool).args(["skill", "build"]).arg(&dir).assert().success();
    assert!(dir.join("skill.wasm").is_file());
    let installed = skillhost(home, lang, &tool).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let report = stdout(&installed);
    let runtime = format!("imported by the {} runtime, not declared, so denied", lang.runtime());
    assert!(report.contains(&runtime), "{report}");
    assert!(!report.contains("! imports beyond the declaration"), "a normal skill is not a warning: {report}");

    let out = skillhost(home, lang, &tool)
        .args(["--json", "skill", "test", &name, "--cases"])
        .arg(dir.join("cases.json"))
        .assert()
        .success();
    let results: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(results.as_array().unwrap().len(), 4);
    assert!(results.as_array().unwrap().iter().all(|r| r["passed"] == true), "{results:#}");

    // Without the toolchain, the build says what to install.
    let out =
        skillhost(home, lang, Path::new("/nonexistent/tool")).args(["skill", "build"]).arg(&dir).assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("is not installed") && err.contains("install"), "{err}");
}

fn sdk_through_the_real_host(lang: Lang) {
    let Some(tool) = toolchain(lang) else { return };
    let env = Env::new();
    let home = env.home.path();
    let (source, name, app) = lang.modes();
    let dir = env.sources.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["SKILL.md", app] {
        std::fs::copy(repo().join(source).join(file), dir.join(file)).unwrap();
    }
    skillhost(home, lang, &tool).args(["skill", "build"]).arg(&dir).assert().success();
    // Installed without granting: memory and session are declared but denied.
    skillhost(home, lang, &tool).args(["skill", "install"]).arg(&dir).assert().success();

    let r = run_json(home, &[name, "-p", "mode=search", "-p", "arg=uart"]);
    assert!(error(&r).contains("denied: memory.search needs the `memory: read` capability"), "{r:#}");
    assert_eq!(r["denials"][0]["capability"], "memory", "{r:#}");

    skillhost(home, lang, &tool).args(["policy", "grant", name, "memory=write", "session"]).assert().success();
    let r = run_json(home, &[name, "-p", "mode=greet", "-p", "arg=Ada"]);
    assert_eq!(r["result"]["ok"]["status"], "success", "{r:#}");
    assert!(output(&r).starts_with("hello, Ada from "), "{r:#}");
    assert_eq!(r["result"]["ok"]["metadata"], json!([["chars", "3"]]), "{r:#}");
    assert_eq!(r["memories"]["stored"].as_array().map(Vec::len), Some(1), "{r:#}");
    assert!(r["logs"].to_string().contains("greeting Ada"), "{r:#}");
    let r = run_json(home, &[name, "-p", "mode=search", "-p", "arg=greeted"]);
    assert!(output(&r).contains(&format!("greeted Ada in {}", lang.flag())), "{r:#}");

    let r = run_json(home, &[name, "-p", "mode=bad"]);
    assert_eq!(r["result"]["error"]["kind"], "invalid-params", "{r:#}");
    assert!(error(&r).contains("arg: give a number"), "{r:#}");
    let r = run_json(home, &[name, "-p", "mode=boom"]);
    assert!(error(&r).contains(lang.uncaught()) && error(&r).contains(app), "{r:#}");

    let session = |arg: &str| {
        let r = run_json(home, &["--session", "s-guest", name, "-p", "mode=session", "-p", &format!("arg={arg}")]);
        serde_json::from_str::<Value>(output(&r)).unwrap()
    };
    assert_eq!(session("one"), json!({"before": null, "after": "one", "keys": ["py"]}));
    assert_eq!(session("two"), json!({"before": "one", "after": "two", "keys": ["py"]}));
}

#[test]
fn an_async_quickjs_component_is_refused_with_the_way_to_rebuild_it() {
    let Some(componentize_js) = toolchain(Lang::Js) else { return };
    let qjs = componentize_js.with_file_name("componentize-qjs");
    assert!(qjs.exists(), "componentize-qjs comes with componentize-js's packages: {}", qjs.display());
    let env = Env::new();
    let home = env.home.path();
    let dir = env.sources.path().join("qjs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: qjs\ndescription: QuickJS.\nversion: 0.1.0\n---\nQuickJS test skill.\n",
    )
    .unwrap();
    let source = dir.join("main.js");
    std::fs::write(
        &source,
        "export function execute(call) { return { output: `quick ${call.step}`, newMemories: [], status: 'success', metadata: [] }; }\n",
    )
    .unwrap();
    let build = |sync: bool| {
        let mut c = std::process::Command::new(&qjs);
        c.arg("--wit")
            .arg(repo().join("wit"))
            .args(["--world", "skill", "--js"])
            .arg(&source)
            .arg("-o")
            .arg(dir.join("skill.wasm"));
        if sync {
            c.arg("--sync");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // componentize-qjs's default output uses the component-model async ABI.
    build(false);
    let out = skillhost(home, Lang::Js, &componentize_js)
        .args(["skill", "install"])
        .arg(&dir)
        .arg("--yes")
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("component-model async ABI") && err.contains("add `--sync`"), "{err}");
    build(true);
    skillhost(home, Lang::Js, &componentize_js).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let r = run_json(home, &["qjs"]);
    assert_eq!(output(&r), "quick 0", "{r:#}");
}

#[test]
fn python_scaffold_builds_installs_and_passes_its_cases() {
    scaffold_builds_installs_and_passes_its_cases(Lang::Python);
}

#[test]
fn js_scaffold_builds_installs_and_passes_its_cases() {
    scaffold_builds_installs_and_passes_its_cases(Lang::Js);
}

#[test]
fn the_python_sdk_through_the_real_host() {
    sdk_through_the_real_host(Lang::Python);
}

#[test]
fn the_js_sdk_through_the_real_host() {
    sdk_through_the_real_host(Lang::Js);
}
