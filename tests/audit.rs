//! The hash-chained audit log: real skill runs through the CLI chain and verify; edits,
//! deletions, reordering and insertions are named by line; a torn last line is a crash, not
//! tampering; concurrent appenders (threads and processes) keep one valid chain.

mod common;

use std::path::Path;

use assert_cmd::Command;
use common::Env;
use serde_json::{Value, json};
use skillhost::audit::{AuditLog, EntryKind, Problem, VerifyError, new_entry};

fn skillhost(env: &Env) -> Command {
    let mut c = Command::cargo_bin("skillhost").unwrap();
    c.env("SKILLHOST_HOME", env.home.path()).arg("--workspace").arg(env.workspace.path()).env_remove("RUST_LOG");
    c
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

/// A log of `n` call entries in session `s`, written through the API.
fn log_with(home: &Path, n: usize) -> AuditLog {
    let log = AuditLog::in_home(home);
    for i in 0..n {
        let mut e = new_entry(EntryKind::Call, "s");
        e.insert("skill".into(), format!("skill-{i}").into());
        e.insert("status".into(), "success".into());
        log.append(e).unwrap();
    }
    log
}

fn lines(log: &AuditLog) -> Vec<String> {
    std::fs::read_to_string(log.path()).unwrap().lines().map(str::to_string).collect()
}

fn write_lines(log: &AuditLog, lines: &[String]) {
    std::fs::write(log.path(), lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

fn broken(log: &AuditLog) -> skillhost::audit::ChainBreak {
    match log.verify() {
        Err(VerifyError::Broken(b)) => b,
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

#[test]
fn real_runs_chain_and_the_cli_lists_shows_and_verifies_them() {
    let env = Env::new();
    let dir = env.probe_as("probe", "");
    skillhost(&env).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    for (mode, code) in [("echo", 0), ("noop", 0), ("bogus", 3)] {
        skillhost(&env)
            .args(["skill", "run", "probe", "--session", "sess-a", "-p", &format!("mode={mode}")])
            .assert()
            .code(code);
    }
    skillhost(&env).args(["skill", "run", "probe", "--session", "sess-b", "-p", "mode=noop"]).assert().success();

    let out = skillhost(&env).args(["--json", "audit", "verify"]).assert().success();
    let v = json_of(&out.get_output().stdout);
    assert_eq!(v["intact"], true);
    assert_eq!(v["entries"], 4);
    assert_eq!(v["head"].as_str().unwrap().len(), 64);
    let out = skillhost(&env).args(["audit", "verify"]).assert().success();
    assert!(String::from_utf8_lossy(&out.get_output().stdout).contains("audit log intact: 4 entries"));

    let out = skillhost(&env).args(["--json", "audit", "list"]).assert().success();
    let sessions = json_of(&out.get_output().stdout);
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    assert_eq!(sessions[0]["session"], "sess-a");
    assert_eq!(sessions[0]["entries"], 3);
    assert_eq!(sessions[0]["skills"], json!(["probe"]));
    assert_eq!(sessions[0]["final_status"], "invalid-params", "the probe rejects an unknown mode");
    assert_eq!(sessions[1]["session"], "sess-b");
    assert_eq!(sessions[1]["final_status"], "success");

    let out = skillhost(&env).args(["--json", "audit", "show", "sess-a"]).assert().success();
    let entries = json_of(&out.get_output().stdout);
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries.iter().all(|e| e["session"] == "sess-a" && e["kind"] == "call" && e["skill"] == "probe"));
    assert_eq!(entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(entries[0]["params"], json!({"mode": "echo"}));
    assert_eq!(entries[0]["output_preview"], "sess-a|0|");
    assert_eq!(entries[0]["skill_hash"].as_str().unwrap().len(), 64);
    assert!(entries[2]["error"].as_str().unwrap().contains("unknown mode"), "{}", entries[2]);

    let out = skillhost(&env).args(["audit", "show", "sess-b"]).assert().success();
    let table = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(table.contains("probe") && table.contains("success") && !table.contains("sess-a"), "{table}");
    let out = skillhost(&env).args(["audit", "list"]).assert().success();
    let table = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(table.contains("sess-a") && table.contains("sess-b"), "{table}");

    let out = skillhost(&env).args(["audit", "show", "nope"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains("no audit entries for session `nope`"));
}

#[test]
fn an_edited_field_is_named_by_its_line() {
    let env = Env::new();
    let log = log_with(env.home.path(), 5);
    let mut l = lines(&log);
    l[2] = l[2].replace("\"status\":\"success\"", "\"status\":\"failure\"");
    write_lines(&log, &l);
    let b = broken(&log);
    assert_eq!((b.line, b.problem), (3, Problem::HashMismatch), "{}", b.message);
    assert!(b.message.starts_with("line 3 was modified after it was written"), "{}", b.message);

    let out = skillhost(&env).args(["audit", "verify"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("TAMPERED") && err.contains("line 3 was modified"), "{err}");
    let out = skillhost(&env).args(["--json", "audit", "verify"]).assert().code(1);
    let v = json_of(&out.get_output().stdout);
    assert_eq!(
        (v["intact"].clone(), v["line"].clone(), v["problem"].clone()),
        (json!(false), json!(3), json!("hash-mismatch"))
    );
}

#[test]
fn an_edit_that_recomputes_its_own_hash_breaks_the_next_line() {
    let env = Env::new();
    let log = log_with(env.home.path(), 4);
    let mut l = lines(&log);
    let mut entry: serde_json::Map<String, Value> = serde_json::from_str(&l[1]).unwrap();
    entry.insert("status".into(), "failure".into());
    entry.remove("hash");
    let prev = entry["prev"].as_str().unwrap().to_string();
    let canonical = skillhost::audit::canonical_json(&Value::Object(entry.clone()));
    let forged = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(format!("{prev}{canonical}").as_bytes()))
    };
    entry.insert("hash".into(), forged.into());
    l[1] = serde_json::to_string(&entry).unwrap();
    write_lines(&log, &l);
    let b = broken(&log);
    assert_eq!((b.line, b.problem), (3, Problem::PrevMismatch), "{}", b.message);
}

#[test]
fn deleted_reordered_and_inserted_lines_are_named() {
    let env = Env::new();
    let log = log_with(env.home.path(), 5);
    let original = lines(&log);

    let mut l = original.clone();
    l.remove(1); // seq 2 gone: the line after it, now line 2, no longer follows line 1
    write_lines(&log, &l);
    let b = broken(&log);
    assert_eq!((b.line, b.problem), (2, Problem::PrevMismatch), "{}", b.message);
    assert!(b.message.contains("line 2 (seq 3) does not follow line 1"), "{}", b.message);

    let mut l = original.clone();
    l.remove(0);
    write_lines(&log, &l);
    let b = broken(&log);
    assert_eq!((b.line, b.problem), (1, Problem::PrevMismatch), "{}", b.message);
    assert!(b.message.contains("should start the chain"), "{}", b.message);

    let mut l = original.clone();
    l.swap(2, 3);
    write_lines(&log, &l);
    assert_eq!(broken(&log).line, 3);

    let mut l = original.clone();
    l.insert(4, original[1].clone());
    write_lines(&log, &l);
    assert_eq!(broken(&log).line, 5);

    let mut l = original.clone();
    l[3] = "{not json".into();
    write_lines(&log, &l);
    let b = broken(&log);
    assert_eq!((b.line, b.problem), (4, Problem::Unparseable), "{}", b.message);

    write_lines(&log, &original);
    assert_eq!(log.verify().unwrap().entries, 5, "the untouched log verifies");
}

#[test]
fn a_torn_last_line_is_a_crash_not_tampering_and_the_next_append_repairs_it() {
    let env = Env::new();
    let log = log_with(env.home.path(), 3);
    let whole = lines(&log).pop().unwrap();
    let mut text = std::fs::read_to_string(log.path()).unwrap();
    text.push_str(&whole[..whole.len() / 2]);
    std::fs::write(log.path(), &text).unwrap();

    let v = log.verify().unwrap();
    let torn = v.torn_tail.clone().expect("torn tail reported");
    assert_eq!((v.entries, torn.line), (3, 4));
    assert!(torn.to_string().contains("line 4 is incomplete") && torn.to_string().contains("interrupted"), "{torn}");
    let out = skillhost(&env).args(["audit", "verify"]).assert().success();
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("line 4 is incomplete") && !err.contains("TAMPERED"), "{err}");

    let appended = log.append(new_entry(EntryKind::Call, "s")).unwrap();
    assert_eq!((appended.seq, appended.torn_tail_bytes), (4, (whole.len() / 2) as u64));
    let v = log.verify().unwrap();
    assert_eq!((v.entries, v.torn_tail.is_none()), (4, true));
    assert_eq!(log.show("s").unwrap()[3]["torn_tail_bytes"], json!(whole.len() / 2), "the repair is on record");
}

#[test]
fn concurrent_threads_keep_one_chain_with_every_entry() {
    let env = Env::new();
    let path = env.home.path().to_path_buf();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    // Each append opens its own file handle; the lock is what orders them.
                    let mut e = new_entry(EntryKind::Step, &format!("t{t}"));
                    e.insert("step".into(), i.into());
                    AuditLog::in_home(&path).append(e).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let log = AuditLog::in_home(&path);
    assert_eq!(log.verify().unwrap().entries, 200);
    for t in 0..8 {
        let steps: Vec<u64> = log.show(&format!("t{t}")).unwrap().iter().map(|e| e["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, (0..25).collect::<Vec<_>>(), "thread {t}'s entries, each once, in its order");
    }
}

#[test]
fn concurrent_processes_keep_one_chain() {
    let env = Env::new();
    let dir = env.probe_as("probe", "");
    skillhost(&env).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let children: Vec<_> = (0..6)
        .map(|i| {
            std::process::Command::new(&bin)
                .env("SKILLHOST_HOME", env.home.path())
                .arg("--workspace")
                .arg(env.workspace.path())
                .args(["skill", "run", "probe", "--session", &format!("p{i}"), "-p", "mode=noop"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!String::from_utf8_lossy(&out.stderr).contains("cannot write the audit log"));
    }
    let log = AuditLog::in_home(env.home.path());
    assert_eq!(log.verify().unwrap().entries, 6);
    assert_eq!(log.list().unwrap().len(), 6);
}

#[test]
fn a_damaged_last_line_stops_auditing_loudly_but_not_the_call() {
    let env = Env::new();
    let dir = env.probe_as("probe", "");
    skillhost(&env).args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    skillhost(&env).args(["skill", "run", "probe", "-p", "mode=noop"]).assert().success();
    let log = AuditLog::in_home(env.home.path());
    std::fs::write(log.path(), "garbage\n").unwrap();
    let out = skillhost(&env).args(["skill", "run", "probe", "-p", "mode=noop"]).assert().success();
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("warning: cannot write the audit log") && err.contains("audit verify"), "{err}");
}
