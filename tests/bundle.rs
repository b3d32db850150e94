//! `.skill` bundles: pack, install from a file and from a loopback URL, and refusal of
//! tampered, padded or escaping bundles.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use common::{Env, skillhost};
use serde_json::Value;

fn packed(env: &Env) -> (std::path::PathBuf, Vec<u8>) {
    let dir = env.probe_as("bundled", "");
    std::fs::create_dir_all(dir.join("references")).unwrap();
    std::fs::write(dir.join("references/usage.md"), "how to use it").unwrap();
    std::fs::create_dir_all(dir.join("target")).unwrap();
    std::fs::write(dir.join("target/junk"), "build output is not packed").unwrap();
    let out = env.sources.path().join("bundled.skill");
    let o =
        skillhost(env.home.path()).args(["--json", "skill", "pack"]).arg(&dir).arg("-o").arg(&out).assert().success();
    let report: Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    let files: Vec<&String> = report["manifest"]["files"].as_object().unwrap().keys().collect();
    assert_eq!(files, ["SKILL.md", "references/usage.md", "skill.wasm"]);
    let bytes = std::fs::read(&out).unwrap();
    (out, bytes)
}

#[test]
fn pack_then_install_from_a_file() {
    let env = Env::new();
    let (file, _) = packed(&env);
    skillhost(env.home.path()).args(["skill", "install"]).arg(&file).assert().success();
    skillhost(env.home.path()).args(["skill", "run", "bundled", "-p", "mode=noop"]).assert().success();
}

#[test]
fn tampered_or_padded_bundles_are_refused() {
    let env = Env::new();
    let (file, bytes) = packed(&env);
    // Flip one byte inside the component's data (far from the tar headers).
    let mut tampered = bytes.clone();
    let at = bytes.windows(4).position(|w| w == b"\0asm").unwrap() + 4096;
    tampered[at] ^= 0xff;
    std::fs::write(&file, &tampered).unwrap();
    let o = skillhost(env.home.path()).args(["skill", "install"]).arg(&file).assert().code(1);
    let err = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(err.contains("`skill.wasm` does not match its hash"), "{err}");

    // An extra file that the manifest does not list.
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mut builder = tar::Builder::new(Vec::new());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        builder.append_data(&mut header, entry.path().unwrap(), data.as_slice()).unwrap();
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(4);
    header.set_cksum();
    builder.append_data(&mut header, "scripts/evil.sh", &b"boom"[..]).unwrap();
    std::fs::write(&file, builder.into_inner().unwrap()).unwrap();
    let o = skillhost(env.home.path()).args(["skill", "install"]).arg(&file).assert().code(1);
    let err = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(err.contains("`scripts/evil.sh` is not listed"), "{err}");

    std::fs::write(&file, b"not a bundle at all").unwrap();
    let o = skillhost(env.home.path()).args(["skill", "install"]).arg(&file).assert().code(1);
    assert!(String::from_utf8_lossy(&o.get_output().stderr).contains("bundle"));
    let o = skillhost(env.home.path()).args(["--json", "skill", "list"]).assert().success();
    assert_eq!(serde_json::from_slice::<Value>(&o.get_output().stdout).unwrap(), serde_json::json!([]));
}

#[test]
fn install_from_a_loopback_url() {
    let env = Env::new();
    let (_, bytes) = packed(&env);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 2048];
            let n = s.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            if request.starts_with("GET /bundled.skill ") {
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", bytes.len());
                let _ = s.write_all(&bytes);
            } else {
                let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        }
    });
    let o = skillhost(env.home.path())
        .args(["skill", "install", &format!("http://127.0.0.1:{port}/missing.skill")])
        .assert()
        .code(1);
    assert!(String::from_utf8_lossy(&o.get_output().stderr).contains("404"), "{:?}", o.get_output());
    skillhost(env.home.path())
        .args(["skill", "install", &format!("http://127.0.0.1:{port}/bundled.skill"), "--yes"])
        .assert()
        .success();
    skillhost(env.home.path()).args(["skill", "run", "bundled", "-p", "mode=echo", "-p", "arg=hi"]).assert().success();
}
