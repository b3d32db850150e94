//! Authoring end to end: scaffold -> build -> install -> test cases -> pack -> install the
//! bundle from a loopback URL into another home -> run.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use assert_cmd::Command;
use common::{Env, repo};
use serde_json::Value;

fn skillhost(home: &std::path::Path) -> Command {
    let mut c = Command::cargo_bin("skillhost").unwrap();
    c.env("SKILLHOST_HOME", home);
    // Share compiled dependencies between runs of this test.
    c.env("CARGO_TARGET_DIR", repo().join("target/scaffold"));
    c
}

#[test]
fn scaffold_build_test_pack_install_from_url_run() {
    let env = Env::new();
    let home = env.home.path();
    let parent = env.sources.path();
    skillhost(home).args(["skill", "new", "hello-skill", "--dir"]).arg(parent).assert().success();
    let dir = parent.join("hello-skill");
    skillhost(home).args(["skill", "new", "hello-skill", "--dir"]).arg(parent).assert().code(1);

    skillhost(home).args(["skill", "build"]).arg(&dir).assert().success();
    assert!(dir.join("skill.wasm").is_file());
    skillhost(home).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();

    // The generated cases pass as generated...
    let out = skillhost(home)
        .args(["--json", "skill", "test", "hello-skill", "--cases"])
        .arg(dir.join("cases.json"))
        .assert()
        .success();
    let results: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(results.as_array().unwrap().len(), 4);
    assert!(results.as_array().unwrap().iter().all(|r| r["passed"] == true), "{results:#}");
    // ...and a wrong expectation is reported as a failure.
    let wrong = parent.join("wrong.json");
    std::fs::write(&wrong, r#"[{"name": "wrong", "params": {"name": "Ada"}, "expect_output": "goodbye"}]"#).unwrap();
    let out = skillhost(home).args(["skill", "test", "hello-skill", "--cases"]).arg(&wrong).assert().code(1);
    let table = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(table.contains("FAIL") && table.contains("output lacks \"goodbye\""), "{table}");

    // Pack, serve on loopback, install into a second home, run.
    let bundle = parent.join("hello.skill");
    skillhost(home).args(["skill", "pack"]).arg(&dir).arg("-o").arg(&bundle).assert().success();
    let bytes = std::fs::read(&bundle).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Some(Ok(mut s)) = listener.incoming().next() {
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", bytes.len());
            let _ = s.write_all(&bytes);
        }
    });
    let other = tempfile::tempdir().unwrap();
    skillhost(other.path())
        .args(["skill", "install", &format!("http://127.0.0.1:{port}/hello.skill")])
        .assert()
        .success();
    let out =
        skillhost(other.path()).args(["--json", "skill", "run", "hello-skill", "-p", "name=Grace"]).assert().success();
    let run: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(run["result"]["ok"]["output"], "hello, Grace");
}
