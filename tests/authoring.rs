//! Authoring end to end: scaffold -> build -> install -> test cases -> pack -> install the
//! bundle from a loopback URL into another home -> run.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use assert_cmd::Command;
use common::{Env, repo};
use serde_json::Value;

fn skillhost(home: &std::path::Path) -> Command {
    let mut c = common::skillhost(home);
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

#[test]
fn a_compile_error_is_not_blamed_on_the_wasm_target_and_pack_respects_the_umask() {
    let env = Env::new();
    let home = env.home.path();
    let parent = env.sources.path();
    skillhost(home).args(["skill", "new", "broken-skill", "--dir"]).arg(parent).assert().success();
    let dir = parent.join("broken-skill");
    let lib = dir.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{source}\nfn broken() -> u32 {{ \"not a number\" }}\n")).unwrap();
    let out = skillhost(home).args(["skill", "build"]).arg(&dir).assert().code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.contains("mismatched types"), "cargo's own error is shown: {stderr}");
    let sysroot = std::process::Command::new("rustc").args(["--print", "sysroot"]).output().unwrap();
    let sysroot = std::path::PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    assert!(sysroot.join("lib/rustlib/wasm32-wasip2/lib").is_dir(), "this test needs the wasm32-wasip2 target");
    let last = stderr.lines().rfind(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(last.contains("fix the errors cargo printed above") && !last.contains("rustup target add"), "{last}");

    // The bundle is for others: the usual file mode (0666 less the umask), not a temp file's 0600.
    std::fs::write(&lib, source).unwrap();
    let probe = parent.join("mode-probe");
    std::fs::File::create(&probe).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let usual = std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777;
    std::fs::write(dir.join("skill.wasm"), std::fs::read(common::probe_wasm()).unwrap()).unwrap();
    let bundle = parent.join("broken.skill");
    skillhost(home).args(["skill", "pack"]).arg(&dir).arg("-o").arg(&bundle).assert().success();
    assert_eq!(std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777, usual);
    assert!(usual & 0o044 != 0, "the test's umask {usual:o} hides the difference");
    let leftovers: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
