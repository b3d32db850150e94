//! Skills written in Python, JavaScript, C and Go, through the real toolchains
//! (componentize-py, componentize-js, zig cc, Go, wasm-tools, installed by
//! `.ci/guest-toolchains` under target/guest-toolchains/) and the real host: each scaffold
//! builds and passes its own cases; each SDK test skill (tests/guests/<lang>/) gives results,
//! metadata, memories, invalid params, a readable guest error (uncaught exception, failed C
//! assert, Go panic), a denied capability, memory search and session use; the install report
//! tells the runtime's own imports from a warning. The checked-in C and Go bindings match
//! what `wit-bindgen` 0.63.0 generates from wit/, and the C SDK's JSON reader passes its
//! native test under AddressSanitizer.
//!
//! A missing toolchain fails the test, naming it and `.ci/guest-toolchains` (which `just test`
//! runs first); `SKILLHOST_SKIP_GUESTS=1` skips them instead, loudly (see `common::Needs`).

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::{Env, repo};
use serde_json::{Value, json};

#[derive(Clone, Copy)]
enum Lang {
    Python,
    Js,
    C,
    Go,
}

impl Lang {
    fn flag(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
            Lang::Go => "go",
        }
    }

    fn runtime(self) -> &'static str {
        match self {
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
            Lang::C => "C",
            Lang::Go => "Go",
        }
    }

    /// (environment variable that names a tool, where `.ci/guest-toolchains` puts it), for
    /// each tool the language's build runs.
    fn tools(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Lang::Python => &[("SKILLHOST_COMPONENTIZE_PY", "target/guest-toolchains/python/bin/componentize-py")],
            Lang::Js => {
                &[("SKILLHOST_COMPONENTIZE_JS", "target/guest-toolchains/js/node_modules/.bin/componentize-js")]
            }
            Lang::C => &[
                ("SKILLHOST_ZIG", "target/guest-toolchains/native/bin/python-zig"),
                ("SKILLHOST_WASM_TOOLS", "target/guest-toolchains/native/bin/wasm-tools"),
            ],
            Lang::Go => &[
                ("SKILLHOST_GO", "target/guest-toolchains/native/bin/go"),
                ("SKILLHOST_WASM_TOOLS", "target/guest-toolchains/native/bin/wasm-tools"),
            ],
        }
    }

    /// The SDK test skill's directory, name and files.
    fn modes(self) -> (&'static str, &'static str, &'static [&'static str]) {
        match self {
            Lang::Python => ("tests/guests/python/pymodes", "pymodes", &["app.py"]),
            Lang::Js => ("tests/guests/js/jsmodes", "jsmodes", &["app.js"]),
            Lang::C => ("tests/guests/c/cmodes", "cmodes", &["app.c"]),
            Lang::Go => ("tests/guests/go/gomodes", "gomodes", &["app.go", "go.mod"]),
        }
    }

    /// What the guest error of mode `boom` must say.
    fn uncaught(self) -> &'static str {
        match self {
            Lang::Python => "uncaught KeyError: 'missing'",
            Lang::Js => "uncaught TypeError:",
            Lang::C => "Assertion failed: strcmp(key, \"present\") == 0 && \"the key is present\"",
            Lang::Go => "uncaught panic: runtime error: index out of range [5] with length 1",
        }
    }
}

/// The toolchain's (environment variable, path) pairs: a failure naming what is missing, or
/// None when the user opted out of the guest tests (`SKILLHOST_SKIP_GUESTS=1`).
fn toolchain(lang: Lang) -> Option<Vec<(&'static str, PathBuf)>> {
    lang.tools()
        .iter()
        .map(|(env, path)| {
            common::require_installed(
                repo().join(path),
                &format!("the {} toolchain", lang.flag()),
                common::Needs::GuestToolchains,
            )
            .map(|p| (*env, p))
        })
        .collect()
}

fn skillhost(home: &Path, tools: &[(&str, PathBuf)]) -> Command {
    let mut c = common::skillhost(home);
    for (env, path) in tools {
        c.env(env, path);
    }
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
    let tool = &tool[..];
    let env = Env::new();
    let (home, parent) = (env.home.path(), env.sources.path());
    let name = format!("{}-hello", lang.flag());
    skillhost(home, tool).args(["skill", "new", &name, "--lang", lang.flag(), "--dir"]).arg(parent).assert().success();
    let dir = parent.join(&name);
    assert!(dir.join("SKILL.md").is_file() && dir.join("cases.json").is_file());
    skillhost(home, tool).args(["skill", "build"]).arg(&dir).assert().success();
    assert!(dir.join("skill.wasm").is_file());
    let installed = skillhost(home, tool).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let report = stdout(&installed);
    let runtime = format!("imported by the {} runtime, not declared, so denied", lang.runtime());
    assert!(report.contains(&runtime), "{report}");
    assert!(!report.contains("! imports beyond the declaration"), "a normal skill is not a warning: {report}");

    let out = skillhost(home, tool)
        .args(["--json", "skill", "test", &name, "--cases"])
        .arg(dir.join("cases.json"))
        .assert()
        .success();
    let results: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(results.as_array().unwrap().len(), 4);
    assert!(results.as_array().unwrap().iter().all(|r| r["passed"] == true), "{results:#}");

    // Without the toolchain, the build says what to install.
    let missing: Vec<(&str, PathBuf)> =
        tool.iter().map(|(env, _)| (*env, PathBuf::from("/nonexistent/tool"))).collect();
    let out = skillhost(home, &missing).args(["skill", "build"]).arg(&dir).assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("is not installed") && err.contains("install"), "{err}");
}

fn sdk_through_the_real_host(lang: Lang) {
    let Some(tool) = toolchain(lang) else { return };
    let tool = &tool[..];
    let env = Env::new();
    let home = env.home.path();
    let (source, name, files) = lang.modes();
    let app = files[0];
    let dir = env.sources.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["SKILL.md"].iter().chain(files) {
        std::fs::copy(repo().join(source).join(file), dir.join(file)).unwrap();
    }
    skillhost(home, tool).args(["skill", "build"]).arg(&dir).assert().success();
    // Installed without granting: memory and session are declared but denied.
    skillhost(home, tool).args(["skill", "install"]).arg(&dir).assert().success();

    let r = run_json(home, &[name, "-p", "mode=search", "-p", "arg=uart"]);
    assert!(error(&r).contains("denied: memory.search needs the `memory: read` capability"), "{r:#}");
    assert_eq!(r["denials"][0]["capability"], "memory", "{r:#}");

    skillhost(home, tool).args(["policy", "grant", name, "memory=write", "session"]).assert().success();
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
    if matches!(lang, Lang::Python) {
        a_long_lived_host_makes_fresh_python_instances_ahead(home, &dir);
    }
}

/// In one process (a server), a Python component is slow enough to instantiate that its
/// next instance is made ahead; every call still gets a fresh one (module globals start over).
fn a_long_lived_host_makes_fresh_python_instances_ahead(home: &Path, dir: &Path) {
    use sha2::Digest;
    use skillhost::capabilities::{CapabilitySet, Limits};
    use skillhost::sandbox::{CallGrant, CompileOutcome, Invocation};
    let library = skillhost::library::Library::open(home, None, None).unwrap();
    let runtime = library.runtime().unwrap();
    let wasm = std::fs::read(dir.join("skill.wasm")).unwrap();
    let sha = hex::encode(sha2::Sha256::digest(&wasm));
    let (prepared, outcome) = runtime.prepare(&wasm, &sha, &|_| {}).unwrap();
    assert!(matches!(outcome, CompileOutcome::Hit { .. }), "{outcome:?}");
    let grant = || CallGrant {
        skill: "pymodes".into(),
        skill_hash: sha.clone(),
        capabilities: CapabilitySet::default(),
        limits: Limits::DEFAULT,
        paths: Default::default(),
        store: None,
        namespace: "default".into(),
        secret_values: Default::default(),
    };
    let count = || Invocation {
        session_id: "s".into(),
        step: 1,
        params: json!({"mode": "count", "arg": ""}).to_string(),
        queue_wait: None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for call in 0..5 {
        if call >= 2 {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !prepared.has_instance_made_ahead() {
                assert!(std::time::Instant::now() < until, "no Python instance was made ahead before call {call}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let out = rt.block_on(runtime.call(&prepared, grant(), count()));
        assert_eq!(out.result.unwrap().output, "call 1 of this instance", "call {call}");
    }
}

#[test]
fn an_async_quickjs_component_is_refused_with_the_way_to_rebuild_it() {
    let Some(js) = toolchain(Lang::Js) else { return };
    let componentize_js = js[0].1.clone();
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
    let js_tools = [("SKILLHOST_COMPONENTIZE_JS", componentize_js.clone())];
    let out = skillhost(home, &js_tools).args(["skill", "install"]).arg(&dir).arg("--yes").assert().failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("component-model async ABI") && err.contains("add `--sync`"), "{err}");
    build(true);
    skillhost(home, &js_tools).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
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

#[test]
fn c_scaffold_builds_installs_and_passes_its_cases() {
    scaffold_builds_installs_and_passes_its_cases(Lang::C);
}

#[test]
fn go_scaffold_builds_installs_and_passes_its_cases() {
    scaffold_builds_installs_and_passes_its_cases(Lang::Go);
}

#[test]
fn the_c_sdk_through_the_real_host() {
    sdk_through_the_real_host(Lang::C);
}

#[test]
fn the_go_sdk_through_the_real_host() {
    sdk_through_the_real_host(Lang::Go);
}

/// Every file `wit-bindgen` generates into `out`, relative to it.
fn generated_files(out: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![out.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path.strip_prefix(out).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

/// The checked-in C and Go bindings are exactly what wit-bindgen-cli 0.63.0 generates from
/// wit/ with the flags the SDKs document, and the build embeds every SDK file.
#[test]
fn the_checked_in_c_and_go_bindings_match_the_wit() {
    let Some(wit_bindgen) = common::require_installed(
        repo().join("target/guest-toolchains/wit-bindgen/bin/wit-bindgen"),
        "wit-bindgen-cli 0.63.0",
        common::Needs::GuestToolchains,
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 2] = [
        ("c", &["--no-object-file"], "sdk/c/bindings"),
        ("go", &["--format=false", "--pkg-name", "skillhost.dev/sdk/bindings"], "sdk/go/skillhost/bindings"),
    ];
    for (lang, flags, checked_in) in cases {
        let out = tmp.path().join(lang);
        let run = std::process::Command::new(&wit_bindgen)
            .arg(lang)
            .args(flags)
            .arg("--out-dir")
            .arg(&out)
            .arg(repo().join("wit"))
            .output()
            .unwrap();
        assert!(run.status.success(), "wit-bindgen {lang} failed: {}", String::from_utf8_lossy(&run.stderr));
        let files = generated_files(&out);
        assert!(files.len() >= 2, "{lang}: {files:?}");
        for file in files {
            let fresh = std::fs::read_to_string(out.join(&file)).unwrap();
            let kept = std::fs::read_to_string(repo().join(checked_in).join(&file))
                .unwrap_or_else(|e| panic!("{checked_in}/{} is not checked in: {e}", file.display()));
            assert!(
                fresh == kept,
                "{checked_in}/{} differs from what wit-bindgen generates: regenerate it with `wit-bindgen {lang} {} --out-dir {checked_in} wit`",
                file.display(),
                flags.join(" ")
            );
        }
    }
    // Every file of sdk/c and sdk/go is one `skill build` writes out.
    for (root, embedded, strip) in [
        ("sdk/c", skillhost::authoring::C_SDK_FILES, None),
        ("sdk/go", skillhost::authoring::GO_SDK_FILES, Some(("skillhost/", "sdk/"))),
    ] {
        for file in generated_files(&repo().join(root)) {
            let mut rel = file.to_string_lossy().replace('\\', "/");
            if rel.ends_with(".md") {
                continue;
            }
            if let Some((from, to)) = strip
                && let Some(rest) = rel.strip_prefix(from)
            {
                rel = format!("{to}{rest}");
            }
            assert!(
                embedded.iter().any(|(p, _)| *p == rel),
                "{root}/{} is not embedded in skill build",
                file.display()
            );
        }
    }
}

/// The C SDK's JSON reader, natively, under AddressSanitizer and UBSan: escapes, \u with
/// surrogate pairs, numbers, the depth bound, and every truncation of a document refused
/// without a read past the buffer (tests/guests/c/json_test.c).
#[test]
fn the_c_sdk_json_reader_never_reads_past_its_input() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("json_test");
    let out = match std::process::Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-I",
        ])
        .arg(repo().join("sdk/c"))
        .arg(repo().join("tests/guests/c/json_test.c"))
        .arg(repo().join("sdk/c/skillhost_json.c"))
        .arg("-lm")
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            common::Needs::GuestToolchains.missing(&format!("the C compiler `{cc}`"), &e.to_string());
            return;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = std::process::Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("all checks passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
