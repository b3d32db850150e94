//! The example skills ported to other languages (examples/ports/: query-issue-kb in Python,
//! generate-report in JavaScript) give the same results as the Rust skills: each port is
//! built with its real toolchain, installed next to the Rust build in one home, and every
//! case of its shared cases.json runs on both; the run reports must be equal field by field
//! (validated params, output, status, metadata, proposed memories, error, memories, denials,
//! logs). The cases' expectations are checked on the Rust skill too, so an empty or broken
//! run cannot pass as "equal".
//!
//! A missing toolchain fails the test, naming it and its installer; `SKILLHOST_SKIP_GUESTS=1`
//! skips it instead, loudly (see `common::Needs`).

mod common;

use std::path::{Path, PathBuf};

use common::{Env, built, repo, skillhost};
use serde_json::{Value, json};

/// A port and the Rust skill it must match.
struct Port {
    /// The Rust skill (built into target/skills/ by `just build-skills`).
    rust: &'static str,
    /// The port's name and directory under examples/ports/.
    port: &'static str,
    /// Its source file next to SKILL.md.
    app: &'static str,
    /// (environment variable that names the tool, where `.ci/guest-toolchains` puts it)
    tool: (&'static str, &'static str),
    /// The workspace its cases run in, under the port's directory (None: an empty one).
    workspace: Option<&'static str>,
}

const QUERY_ISSUE_KB: Port = Port {
    rust: "query-issue-kb",
    port: "query-issue-kb-python",
    app: "app.py",
    tool: ("SKILLHOST_COMPONENTIZE_PY", "target/guest-toolchains/python/bin/componentize-py"),
    workspace: Some("workspace"),
};

const GENERATE_REPORT: Port = Port {
    rust: "generate-report",
    port: "generate-report-js",
    app: "app.js",
    tool: ("SKILLHOST_COMPONENTIZE_JS", "target/guest-toolchains/js/node_modules/.bin/componentize-js"),
    workspace: None,
};

/// The parts of a `--json skill run` report that must be equal (JSON pointers).
const FIELDS: [&str; 10] = [
    "/params",
    "/result/ok/output",
    "/result/ok/status",
    "/result/ok/metadata",
    "/result/ok/new_memories",
    "/result/error",
    "/result",
    "/memories",
    "/denials",
    "/logs",
];

fn source(port: &Port) -> PathBuf {
    repo().join("examples/ports").join(port.port)
}

fn run_json(home: &Path, workspace: &Path, args: &[&str]) -> Value {
    let out =
        skillhost(home).arg("--workspace").arg(workspace).args(["--json", "skill", "run"]).args(args).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

/// Build the port (from a copy, so the source tree gets no build files) with its real
/// toolchain and install it and the Rust skill in `env`'s home; None when the toolchain is
/// missing and the user opted out of the guest tests (`require_installed` said so loudly).
fn install_both(env: &Env, port: &Port) -> Option<()> {
    let tool = common::require_installed(
        repo().join(port.tool.1),
        &format!("the toolchain of {}", port.port),
        common::Needs::GuestToolchains,
    )?;
    let home = env.home.path();
    let dir = env.sources.path().join(port.port);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["SKILL.md", port.app] {
        std::fs::copy(source(port).join(file), dir.join(file)).unwrap();
    }
    skillhost(home).env(port.tool.0, tool).args(["skill", "build"]).arg(&dir).assert().success();
    skillhost(home).args(["skill", "install"]).arg(dir).arg("--yes").assert().success();
    skillhost(home).args(["skill", "install"]).arg(built(port.rust)).arg("--yes").assert().success();
    Some(())
}

/// `report`'s status as `skill test` names it, and its output or error text.
fn outcome(report: &Value) -> (String, String) {
    let result = &report["result"];
    if let Some(ok) = result.get("ok") {
        (ok["status"].as_str().unwrap_or_default().to_string(), ok["output"].as_str().unwrap_or_default().to_string())
    } else {
        let error = &result["error"];
        (
            error["kind"].as_str().unwrap_or_default().to_string(),
            error["message"].as_str().unwrap_or_default().to_string(),
        )
    }
}

fn assert_same(case: &str, rust: &Value, port: &Value) {
    for field in FIELDS {
        assert_eq!(
            port.pointer(field),
            rust.pointer(field),
            "case {case:?}: field {field} differs (left: the port, right: the Rust skill)"
        );
    }
}

/// Every case of the port's cases.json on both skills: expectations met by the Rust skill,
/// reports equal; then `skill test` passes the port on the same file.
fn same_results_on_the_shared_cases(port: &Port) {
    let env = Env::new();
    if install_both(&env, port).is_none() {
        return;
    }
    let home = env.home.path();
    let workspace = port.workspace.map(|w| source(port).join(w)).unwrap_or_else(|| env.workspace.path().to_path_buf());
    let cases_file = source(port).join("cases.json");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(&cases_file).unwrap()).unwrap();
    assert!(cases.len() >= 20, "{} has only {} cases", cases_file.display(), cases.len());
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let params = case.get("params").cloned().unwrap_or_else(|| json!({})).to_string();
        let rust = run_json(home, &workspace, &[port.rust, "--params", &params]);
        let ported = run_json(home, &workspace, &[port.port, "--params", &params]);
        let (status, text) = outcome(&rust);
        let want = case.get("expect_status").and_then(Value::as_str).unwrap_or("success");
        assert_eq!(status, want, "case {name:?}: the Rust skill's status: {rust:#}");
        if let Some(part) = case.get("expect_output").and_then(Value::as_str) {
            assert!(text.contains(part), "case {name:?}: the Rust skill's output lacks {part:?}: {text}");
        }
        assert_same(name, &rust, &ported);
    }

    let out = skillhost(home)
        .arg("--workspace")
        .arg(workspace)
        .args(["--json", "skill", "test", port.port, "--cases"])
        .arg(cases_file)
        .assert()
        .success();
    let results: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(results.as_array().map(Vec::len), Some(cases.len()), "{results:#}");
    assert!(results.as_array().unwrap().iter().all(|r| r["passed"] == true), "{results:#}");
}

#[test]
fn query_issue_kb_in_python_matches_the_rust_skill() {
    same_results_on_the_shared_cases(&QUERY_ISSUE_KB);
}

#[test]
fn generate_report_in_javascript_matches_the_rust_skill() {
    same_results_on_the_shared_cases(&GENERATE_REPORT);
}

/// generate-report without findings reads the session snapshot write-analysis-snapshot
/// saved: both versions render (or refuse) it alike.
#[test]
fn generate_report_in_javascript_reads_a_session_snapshot_like_the_rust_skill() {
    let env = Env::new();
    if install_both(&env, &GENERATE_REPORT).is_none() {
        return;
    }
    let (home, workspace) = (env.home.path(), env.workspace.path());
    skillhost(home).args(["skill", "install"]).arg(built("write-analysis-snapshot")).arg("--yes").assert().success();
    let snapshots = [
        (
            "s-cited",
            json!({"findings": [
                {"claim": "RX overruns occur only during flash erases", "evidence": ["L1240: erase start", "L1243: RX overrun"]},
                {"claim": "The RX DMA ring is too small", "evidence": ["L11", "L1240-L1250"]}
            ], "note": "first pass"}),
        ),
        (
            "s-open",
            json!({"findings": [{"claim": "Cited", "evidence": ["L1"]}, {"claim": "Open hypothesis"}], "key": "draft"}),
        ),
    ];
    for (session, params) in &snapshots {
        let (session, params) = (*session, params.to_string());
        let saved = run_json(home, workspace, &["--session", session, "write-analysis-snapshot", "--params", &params]);
        assert_eq!(outcome(&saved).0, "success", "{saved:#}");
    }
    let cases = [
        ("s-cited", json!({}), "success"),
        ("s-cited", json!({"title": "From the session", "key": "findings"}), "success"),
        ("s-cited", json!({"key": "other"}), "invalid-params"),
        ("s-open", json!({"key": "draft"}), "invalid-params"),
    ];
    for (session, params, want) in cases {
        let case = format!("session {session} with {params}");
        let params = params.to_string();
        let run = |skill: &str| run_json(home, workspace, &["--session", session, skill, "--params", &params]);
        let (rust, ported) = (run(GENERATE_REPORT.rust), run(GENERATE_REPORT.port));
        assert_eq!(outcome(&rust).0, want, "{case}: the Rust skill: {rust:#}");
        assert_same(&case, &rust, &ported);
    }
}
