//! The hash-chained audit log: real skill runs through the CLI chain and verify; edits,
//! deletions, reordering and insertions are named by line; a torn last line is a crash, not
//! tampering; concurrent appenders (threads and processes) keep one valid chain. The lines
//! every writer produces (library calls and refusals, agent steps, MCP memory tools) match a
//! fixture written by the code before entries were typed, and that old log still verifies.

#[path = "mcp/client.rs"]
mod client;
mod common;

use std::path::Path;

use common::Env;
use serde_json::{Value, json};
use skillhost::audit::{AuditLog, EntryKind, Problem, VerifyError, new_entry};

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
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    for (mode, code) in [("echo", 0), ("noop", 0), ("bogus", 3)] {
        env.skillhost()
            .args(["skill", "run", "probe", "--session", "sess-a", "-p", &format!("mode={mode}")])
            .assert()
            .code(code);
    }
    env.skillhost().args(["skill", "run", "probe", "--session", "sess-b", "-p", "mode=noop"]).assert().success();

    let out = env.skillhost().args(["--json", "audit", "verify"]).assert().success();
    let v = json_of(&out.get_output().stdout);
    assert_eq!(v["intact"], true);
    assert_eq!(v["entries"], 4);
    assert_eq!(v["head"].as_str().unwrap().len(), 64);
    let out = env.skillhost().args(["audit", "verify"]).assert().success();
    assert!(String::from_utf8_lossy(&out.get_output().stdout).contains("audit log intact: 4 entries"));

    let out = env.skillhost().args(["--json", "audit", "list"]).assert().success();
    let sessions = json_of(&out.get_output().stdout);
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    assert_eq!(sessions[0]["session"], "sess-a");
    assert_eq!(sessions[0]["entries"], 3);
    assert_eq!(sessions[0]["skills"], json!(["probe"]));
    assert_eq!(sessions[0]["final_status"], "invalid-params", "the probe rejects an unknown mode");
    assert_eq!(sessions[1]["session"], "sess-b");
    assert_eq!(sessions[1]["final_status"], "success");

    let out = env.skillhost().args(["--json", "audit", "show", "sess-a"]).assert().success();
    let entries = json_of(&out.get_output().stdout);
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries.iter().all(|e| e["session"] == "sess-a" && e["kind"] == "call" && e["skill"] == "probe"));
    assert_eq!(entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(entries[0]["params"], json!({"mode": "echo"}));
    assert_eq!(entries[0]["output_preview"], "sess-a|0|");
    assert_eq!(entries[0]["skill_hash"].as_str().unwrap().len(), 64);
    assert!(entries[2]["error"].as_str().unwrap().contains("unknown mode"), "{}", entries[2]);

    let out = env.skillhost().args(["audit", "show", "sess-b"]).assert().success();
    let table = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(table.contains("probe") && table.contains("success") && !table.contains("sess-a"), "{table}");
    let out = env.skillhost().args(["audit", "list"]).assert().success();
    let table = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(table.contains("sess-a") && table.contains("sess-b"), "{table}");

    let out = env.skillhost().args(["audit", "show", "nope"]).assert().code(1);
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

    let out = env.skillhost().args(["audit", "verify"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("TAMPERED") && err.contains("line 3 was modified"), "{err}");
    let out = env.skillhost().args(["--json", "audit", "verify"]).assert().code(1);
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
    let out = env.skillhost().args(["audit", "verify"]).assert().success();
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
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let children: Vec<_> = (0..6)
        .map(|i| {
            std::process::Command::new(&bin)
                .env("SKILLHOST_HOME", env.home.path())
                .envs(common::store_env(env.home.path()))
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
fn a_damaged_log_refuses_calls_until_sealed_and_the_seal_keeps_the_history() {
    let env = Env::new();
    let dir = env.probe_as("probe", "");
    env.skillhost().args(["skill", "install"]).arg(&dir).arg("--yes").assert().success();
    for session in ["before-1", "before-2"] {
        env.skillhost().args(["skill", "run", "probe", "--session", session, "-p", "mode=noop"]).assert().success();
    }
    let log = AuditLog::in_home(env.home.path());
    let head_before = log.verify().unwrap().head;
    // One bad line at the end: nothing more can be chained.
    let mut damaged = std::fs::read(log.path()).unwrap();
    damaged.extend_from_slice(b"garbage\n");
    std::fs::write(log.path(), &damaged).unwrap();

    // The call is refused, before it runs, naming the log, the line and the way out.
    let out = env.skillhost().args(["skill", "run", "probe", "-p", "mode=noop"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains(&log.path().display().to_string()), "{err}");
    assert!(err.contains("line 3 is not valid JSON"), "{err}");
    assert!(err.contains("refused") && err.contains("skillhost audit seal"), "{err}");
    assert_eq!(std::fs::read(log.path()).unwrap(), damaged, "nothing was appended");
    env.skillhost().args(["audit", "verify"]).assert().code(1);

    // Seal: the damaged file moves aside unchanged; the new segment verifies.
    let out = env.skillhost().args(["--json", "audit", "seal"]).assert().success();
    let sealed = json_of(&out.get_output().stdout);
    let sealed_path = Path::new(sealed["sealed_path"].as_str().unwrap()).to_path_buf();
    assert_eq!(std::fs::read(&sealed_path).unwrap(), damaged, "the sealed file keeps every byte");
    assert!(sealed_path.starts_with(env.home.path().join("audit/sealed")), "{sealed_path:?}");
    assert_eq!(sealed["verified_entries"], 2);
    assert_eq!(sealed["verified_head"], head_before.as_str());
    assert_eq!(sealed["damaged_line"], 3);
    let note: Value = serde_json::from_slice(&std::fs::read(sealed["note_path"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(note["sha256"], sealed["sha256"]);
    let v = log.verify().unwrap();
    assert_eq!(v.entries, 1);
    let seal_check = v.sealed.unwrap();
    assert_eq!(seal_check.status, skillhost::audit::SealStatus::Intact);
    assert_eq!(seal_check.sha256, sealed["sha256"].as_str().unwrap());
    let first: Value = serde_json::from_str(lines(&log)[0].as_str()).unwrap();
    assert_eq!(first["kind"], "seal");
    assert_eq!(first["sealed_sha256"], sealed["sha256"]);

    // Calls run again and chain onto the seal; the history before the seal still shows.
    env.skillhost().args(["skill", "run", "probe", "--session", "after", "-p", "mode=noop"]).assert().success();
    let out = env.skillhost().args(["--json", "audit", "verify"]).assert().success();
    let v = json_of(&out.get_output().stdout);
    assert_eq!((v["intact"].clone(), v["entries"].clone()), (json!(true), json!(2)), "{v}");
    assert_eq!(v["sealed"]["status"], "intact");
    let out = env.skillhost().args(["--json", "audit", "list"]).assert().success();
    let sessions: Vec<String> = json_of(&out.get_output().stdout)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap().to_string())
        .collect();
    assert!(sessions.starts_with(&["before-1".to_string(), "before-2".to_string()]), "{sessions:?}");
    assert!(sessions.last().is_some_and(|s| s == "after"), "{sessions:?}");
    env.skillhost().args(["audit", "show", "before-1"]).assert().success();

    // A sealed file changed afterwards is reported; an intact log has nothing to seal.
    let err = env.skillhost().args(["audit", "seal"]).assert().code(1);
    assert!(String::from_utf8_lossy(&err.get_output().stderr).contains("nothing to seal"));
    std::fs::write(&sealed_path, b"rewritten\n").unwrap();
    let out = env.skillhost().args(["audit", "verify"]).assert().code(1);
    assert!(String::from_utf8_lossy(&out.get_output().stdout).contains("CHANGED after it was sealed"));
}

#[test]
fn appends_racing_a_seal_land_in_the_new_segment() {
    let env = Env::new();
    let log = log_with(env.home.path(), 3);
    let mut text = std::fs::read_to_string(log.path()).unwrap();
    text.push_str("{\"not\":\"an entry\"}\n");
    std::fs::write(log.path(), text).unwrap();
    assert!(log.check_appendable().unwrap_err().to_string().contains("line 4 has no `hash` field"));
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let log = log.clone();
            std::thread::spawn(move || {
                // Writers race the seal: each either fails on the damaged log or lands after the seal.
                for _ in 0..20 {
                    let mut e = new_entry(EntryKind::Call, &format!("w{i}"));
                    e.insert("status".into(), "success".into());
                    if log.append(e).is_ok() {
                        return true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                false
            })
        })
        .collect();
    log.seal().unwrap();
    for w in writers {
        assert!(w.join().unwrap(), "every writer got in after the seal");
    }
    let v = log.verify().unwrap();
    assert_eq!(v.entries, 5, "the seal line and the four writers");
    let sealed = std::fs::read_dir(log.sealed_dir()).unwrap().count();
    assert_eq!(sealed, 2, "one sealed segment and its note");
    let mut seal = new_entry(EntryKind::Seal, "x");
    seal.insert("status".into(), "sealed".into());
    assert!(log.append(seal).unwrap_err().to_string().contains("audit seal"), "callers cannot forge seals");
}

/// The fixture: a log written by the code before audit entries were typed (e4ebcf3), by
/// [`write_every_kind_of_line`].
const FIXTURE: &str = "tests/fixtures/audit/e4ebcf3.jsonl";

/// Every kind of line today's writers produce, into `env`'s home: skill calls that succeed,
/// log, have a memory capped and another stored, fail in the guest, fail the parameter
/// check, and are refused; an agent run (a call, an unusable reply, an answer); an MCP
/// session with a skill call, memory tools (stored, searched, refused arguments) and a
/// MEMORY.md read.
fn write_every_kind_of_line(env: &Env) {
    use skillhost::agent::profile::builtin_general;
    use skillhost::agent::provider::scripted::ScriptedProvider;
    use skillhost::agent::run::{self as agent, AgentOptions};
    use skillhost::library::RunOptions;

    let lib = env.library();
    env.install_granted(&lib, "probe", "capabilities:\n  memory: write\n");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let calls = [
        json!({"mode": "echo", "arg": "x"}),
        json!({"mode": "log", "arg": "hello", "n": 2}),
        json!({"mode": "remember-priority", "arg": "likes tea", "n": 5}),
        json!({"mode": "remember", "arg": "a fact", "n": 1}),
        json!({"mode": "bogus"}),
        json!({"mode": "fail", "arg": "on purpose"}),
        json!({"mode": 7}),
    ];
    for (step, params) in calls.into_iter().enumerate() {
        let opts = RunOptions { session: "typed-audit".into(), step: step as u32, ..RunOptions::default() };
        rt.block_on(lib.run("probe", params, &opts)).unwrap();
    }
    let opts = RunOptions { session: "typed-audit".into(), step: 9, ..RunOptions::default() };
    assert!(rt.block_on(lib.run("nope", json!({}), &opts)).is_err());

    let decisions = json!({"decide": [
        {"reasoning": "try", "next_action": "call_skill", "skill_name": "probe", "parameters": {"mode": "noop"}},
        "no json here",
        "still none",
        {"reasoning": "done", "next_action": "reply", "message": "the probe answers"},
        {"reasoning": "done", "next_action": "reply", "message": "the probe answers"},
    ]});
    let provider = ScriptedProvider::parse(Path::new("decisions.json"), &decisions.to_string()).unwrap();
    rt.block_on(agent::run(&lib, &provider, &builtin_general(), "check the probe", &AgentOptions::default())).unwrap();
    drop(lib);

    let mut c = client::StdioClient::start(env.home.path(), &["--memory", "write"]);
    c.call("probe", json!({ "mode": "noop" }));
    c.call("memory_add", json!({ "content": "the build uses cargo", "kind": "fact", "priority": 2 }));
    c.call("memory_search", json!({ "query": "cargo" }));
    c.call("memory_add", json!({ "content": 3 }));
    c.result("resources/read", json!({ "uri": "skillhost://memory/MEMORY.md" }));
    drop(c);
}

/// What of a line does not depend on when or where it was written: times, hashes, paths and
/// session ids replaced by placeholders (sessions numbered by first appearance).
fn stable(lines: &[Value], home: &str, repo: &str) -> Vec<String> {
    let mut sessions: Vec<String> = Vec::new();
    lines
        .iter()
        .map(|line| {
            let mut m = line.as_object().unwrap().clone();
            for k in
                ["ts", "hash", "prev", "elapsed_us", "cpu_time_us", "memory_peak_bytes", "model_us", "prompt_bytes"]
            {
                if m.contains_key(k) {
                    m.insert(k.into(), "<varies>".into());
                }
            }
            if let Some(Value::String(h)) = m.get("skill_hash") {
                assert_eq!(h.len(), 64, "{line}");
                m.insert("skill_hash".into(), "<hash>".into());
            }
            // Which records a search finds is the search's business, not the log's.
            if let Some(Value::Array(ids)) = m.get("memories_read") {
                assert!(ids.iter().all(Value::is_u64), "{line}");
                m.insert("memories_read".into(), "<ids>".into());
            }
            let session = m["session"].as_str().unwrap().to_string();
            let n = sessions.iter().position(|s| *s == session).unwrap_or_else(|| {
                sessions.push(session.clone());
                sessions.len() - 1
            });
            let text = skillhost::audit::canonical_json(&Value::Object(m));
            let text = text.replace(home, "<home>").replace(repo, "<repo>");
            text.replace(&session, &format!("<session-{n}>"))
        })
        .collect()
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn today_writes_the_lines_the_fixture_holds_and_the_old_log_still_verifies() {
    let fixture = common::repo().join(FIXTURE);
    let env = Env::new();
    write_every_kind_of_line(&env);
    let log = AuditLog::in_home(env.home.path());
    assert!(log.verify().is_ok());
    if std::env::var_os("SKILLHOST_WRITE_AUDIT_FIXTURE").is_some() {
        std::fs::create_dir_all(fixture.parent().unwrap()).unwrap();
        std::fs::copy(log.path(), &fixture).unwrap();
        // The lines are hashed as written: where they were written goes beside them.
        let paths = json!({ "home": env.home.path(), "repo": common::repo() });
        std::fs::write(fixture.with_extension("paths.json"), format!("{paths:#}\n")).unwrap();
        panic!("wrote {} from this build; unset SKILLHOST_WRITE_AUDIT_FIXTURE to test against it", fixture.display());
    }
    // Field for field, the lines of the code before typed entries.
    let old = read_lines(&fixture);
    let mut new = read_lines(log.path());
    // Fields added since the fixture was written (additive: old lines lack them and still
    // verify): the MCP transport on the lines of skill calls an MCP client made.
    const ADDED: &[&str] = &["transport"];
    for (o, n) in old.iter().zip(new.iter_mut()) {
        for field in ADDED {
            if o.get(field).is_none()
                && let Some(n) = n.as_object_mut()
            {
                n.remove(*field);
            }
        }
    }
    let paths: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.with_extension("paths.json")).unwrap()).unwrap();
    let old = stable(&old, paths["home"].as_str().unwrap(), paths["repo"].as_str().unwrap());
    let new = stable(&new, &env.home.path().to_string_lossy(), &common::repo().to_string_lossy());
    assert_eq!(old.len(), new.len(), "new:\n{}", new.join("\n"));
    for (i, (o, n)) in old.iter().zip(&new).enumerate() {
        assert_eq!(o, n, "line {} differs from the fixture", i + 1);
    }
    // The old log verifies and reads, and today's appends chain to it.
    let other = tempfile::tempdir().unwrap();
    let copy = AuditLog::in_home(other.path());
    std::fs::create_dir_all(copy.path().parent().unwrap()).unwrap();
    std::fs::copy(&fixture, copy.path()).unwrap();
    let verified = copy.verify().unwrap();
    assert_eq!(verified.entries, old.len() as u64);
    let sessions = copy.list().unwrap();
    assert_eq!(sessions[0].session, "typed-audit");
    assert_eq!(sessions[0].final_status, "refused");
    assert_eq!(copy.append(new_entry(EntryKind::Call, "after")).unwrap().seq, old.len() as u64 + 1);
    assert_eq!(copy.verify().unwrap().entries, old.len() as u64 + 1);
}
