//! `skillhost store import` and `store export` (issue 33: "moves a home into PostgreSQL and
//! back, losslessly"): a real local home built through the CLI goes into a fresh database, a
//! host on that store sees the same skills, grants, secrets, memory (ids, archive, search
//! results) and audit chain (same head), and an export of the store into a new directory is
//! the same home again: memory and archive equal, audit file identical, skill files identical.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Env, skillhost};
use serde_json::Value;

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const SECRET: &str = "sk-live-7f3a9c2e55b1d0c4";
const QUERIES: [&str; 4] =
    ["which editor does the user use", "release approval", "baud rate serial", "staging database"];

/// A skillhost command on `home`, on `store` when given.
fn cmd(home: &Path, store: Option<(&str, &Path)>) -> assert_cmd::Command {
    let mut c = skillhost(home);
    c.env_remove("SKILLHOST_STORE");
    if let Some((url, key)) = store {
        c.env("SKILLHOST_STORE", url).env("SKILLHOST_STORE_KEY_FILE", key);
    }
    c
}

fn ok(mut c: assert_cmd::Command, args: &[&str]) -> String {
    let out = c.args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(c: assert_cmd::Command, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = ok(c, &all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

fn failure(mut c: assert_cmd::Command, args: &[&str]) -> String {
    let out = c.args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!e.contains("panicked"), "{e}");
    e
}

/// A new database, with the store key in a file: what the homes here move into.
struct Store {
    db: common::postgres::Database,
    url: String,
    key: std::path::PathBuf,
    _keys: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        let db = common::postgres::database();
        let url = db.url();
        let keys = tempfile::tempdir().unwrap();
        let key = keys.path().join("store.key");
        std::fs::write(&key, KEY).unwrap();
        Store { db, url, key, _keys: keys }
    }

    /// A skillhost command of the host whose home is `home`, on this store.
    fn host(&self, home: &Path) -> assert_cmd::Command {
        cmd(home, Some((&self.url, &self.key)))
    }
}

/// What a home's memory looks like from the CLI: records, archive, and each query's ids.
#[derive(Debug, PartialEq)]
struct MemoryState {
    records: Value,
    archive: Value,
    daily: Value,
    found: Vec<Vec<u64>>,
}

fn memory_state(c: impl Fn() -> assert_cmd::Command) -> MemoryState {
    let found = QUERIES
        .iter()
        .map(|q| {
            let hits = json(c(), &["memory", "search", q]);
            hits.as_array().unwrap().iter().map(|h| h["record"]["id"].as_u64().unwrap()).collect()
        })
        .collect();
    MemoryState {
        records: json(c(), &["memory", "list", "--all"]),
        archive: json(c(), &["memory", "archive"]),
        daily: json(c(), &["memory", "daily"]),
        found,
    }
}

/// Every file under `dir`, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_home_moves_into_postgresql_and_back_losslessly() {
    let env = Env::new();
    let local = env.home.path();
    let l = || cmd(local, None);

    // A real local home: a skill installed and granted, a secret, calls in the audit log,
    // memories with an update (the older one archived as outdated) and a forgotten record,
    // a daily note.
    let dir = env.probe_as("echoer", "capabilities:\n  session: true\n");
    ok(l(), &["skill", "install", dir.to_str().unwrap()]);
    ok(l(), &["policy", "grant", "echoer", "session"]);
    l().args(["secret", "set", "API_TOKEN"]).write_stdin(format!("{SECRET}\n")).assert().success();
    for arg in ["one", "two"] {
        let ran = json(l(), &["skill", "run", "echoer", "-p", "mode=echo", "-p", &format!("arg={arg}")]);
        assert_eq!(ran["not_granted"], serde_json::json!([]), "{ran}");
    }
    ok(l(), &["memory", "add", "--kind", "preference", "The user's editor is vim"]);
    ok(l(), &["memory", "add", "--kind", "preference", "The user's editor is now helix"]);
    ok(l(), &["memory", "add", "--priority", "5", "The release pipeline needs approval from two maintainers"]);
    ok(l(), &["memory", "add", "Serial output is garbled when the baud rate does not match"]);
    let doomed = json(l(), &["memory", "add", "The staging database is rebuilt every Sunday night"]);
    let doomed = doomed["record"]["id"].as_u64().unwrap_or_else(|| panic!("{doomed}"));
    ok(l(), &["memory", "forget", &doomed.to_string()]);
    ok(l(), &["memory", "daily", "--add", "met with the release team about approvals"]);
    // An agent run paused on a question (its session saved under memory/sessions/).
    let d1 = env.sources.path().join("d1.json");
    std::fs::write(&d1, r#"{"decide": [{"next_action": "require_more", "message": "Which port?"}]}"#).unwrap();
    let out = l().args(["run", "--decisions"]).arg(&d1).arg("find the port").output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let paused = stderr.split("skillhost run --resume ").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    let before = memory_state(l);
    assert_eq!(before.records.as_array().unwrap().len(), 3, "{:?}", before.records);
    let reasons: Vec<&str> = before.archive.as_array().unwrap().iter().map(|e| e["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons.len(), 2, "the outdated and the forgotten record: {:?}", before.archive);
    assert!(reasons.contains(&"outdated"), "{reasons:?}");
    let local_verified = json(l(), &["audit", "verify"]);
    // The two calls, and the paused run's lines.
    let entries = local_verified["entries"].as_u64().unwrap();
    assert!(entries > 2, "{local_verified}");
    let local_audit = std::fs::read(local.join("audit").join("audit.jsonl")).unwrap();

    // Into a fresh database, through a host with a home of its own.
    let store = Store::new();
    let host_home = tempfile::tempdir().unwrap();
    let h = || store.host(host_home.path());
    // Not migrated yet: refused, saying what to run.
    let e = failure(h(), &["store", "import", "--from", local.to_str().unwrap()]);
    assert!(e.contains("skillhost store migrate"), "{e}");
    ok(h(), &["store", "migrate"]);
    let imported = json(h(), &["store", "import", "--from", local.to_str().unwrap()]);
    let report = &imported["imported"];
    assert_eq!(report["audit_lines"], entries, "{imported}");
    assert_eq!(report["agent_sessions"], 1, "{imported}");
    assert_eq!(report["audit_head"], local_verified["head"], "{imported}");
    assert_eq!(report["memory"]["records"], 3, "{imported}");
    assert_eq!(report["memory"]["archive"], 2, "{imported}");
    assert!(report["units"].to_string().contains("skills/echoer"), "{imported}");
    let stored =
        store.db.psql("SELECT encode(content, 'escape') FROM skillhost_home_units WHERE unit = 'secrets.json'");
    assert!(!stored.is_empty() && !stored.contains(SECRET), "the secret is stored in the clear: {stored}");
    // The log holds one op: the snapshot.
    assert_eq!(store.db.psql("SELECT count(*) FROM skillhost_memory_log"), "1");
    assert!(store.db.psql("SELECT op FROM skillhost_memory_log").contains("\"op\":\"load_snapshot\""));

    // A second import into the same (no longer empty) store is refused, saying why.
    let e = failure(h(), &["store", "import", "--from", local.to_str().unwrap()]);
    assert!(
        e.contains("not empty") && e.contains(&format!("{entries} audit line(s)")) && e.contains("new database"),
        "{e}"
    );

    // Another host of the store sees the same home.
    let other_home = tempfile::tempdir().unwrap();
    let o = || store.host(other_home.path());
    assert!(ok(o(), &["skill", "list"]).contains("echoer"));
    assert!(ok(o(), &["secret", "list"]).contains("API_TOKEN"));
    assert_eq!(memory_state(o), before, "memory on the store differs from the home's");
    let verified = json(o(), &["audit", "verify"]);
    assert_eq!(
        (verified["entries"].clone(), verified["head"].clone()),
        (entries.into(), local_verified["head"].clone())
    );
    // The run paused in the old home resumes on another host of the store.
    let d2 = env.sources.path().join("d2.json");
    std::fs::write(&d2, r#"{"decide": [{"next_action": "reply", "message": "use COM3"}]}"#).unwrap();
    let resumed = json(o(), &["run", "--decisions", d2.to_str().unwrap(), "--resume", &paused, "COM3"]);
    assert_eq!(
        (resumed["status"].as_str(), resumed["answer"].as_str()),
        (Some("answered"), Some("use COM3")),
        "{resumed}"
    );
    let entries = json(o(), &["audit", "verify"])["entries"].as_u64().unwrap();

    // Back out into a new directory: the same home.
    let out_parent = tempfile::tempdir().unwrap();
    let exported_home = out_parent.path().join("exported");
    let exported = json(h(), &["store", "export", "--to", exported_home.to_str().unwrap()]);
    assert_eq!(exported["exported"]["audit_lines"], entries, "{exported}");
    assert_eq!(exported["exported"]["agent_sessions"], 1, "{exported}");
    let exported_audit = std::fs::read(exported_home.join("audit").join("audit.jsonl")).unwrap();
    assert!(exported_audit.starts_with(&local_audit), "the exported chain starts with the old home's lines");
    // The session comes back finished, as the other host left it.
    let session_file = exported_home.join("memory").join("sessions").join(format!("{paused}.json"));
    let session: Value = serde_json::from_slice(&std::fs::read(&session_file).unwrap()).unwrap();
    assert_eq!(session["finished"], true, "{session}");
    let e2 = || cmd(&exported_home, None);
    assert_eq!(json(e2(), &["audit", "verify"])["entries"], entries);
    assert_eq!(memory_state(e2), before, "the exported home's memory differs from the original's");
    let skill_files = tree(&local.join("skills").join("echoer"));
    assert!(
        skill_files.contains_key("skill.wasm") && skill_files.contains_key("install.json"),
        "{:?}",
        skill_files.keys()
    );
    assert_eq!(tree(&exported_home.join("skills").join("echoer")), skill_files, "the skill's files differ");
    for file in ["policy.toml", "secrets.json"] {
        assert_eq!(
            std::fs::read(exported_home.join(file)).unwrap(),
            std::fs::read(local.join(file)).unwrap(),
            "{file}"
        );
    }
    // The exported home runs the skill with its grant and secret, chaining after the old lines.
    let ran = json(e2(), &["skill", "run", "echoer", "-p", "mode=echo", "-p", "arg=home again"]);
    assert_eq!(ran["not_granted"], serde_json::json!([]), "{ran}");
    assert_eq!(json(e2(), &["audit", "verify"])["entries"], entries + 1);
    // Exporting into a directory that is not empty is refused.
    let e = failure(h(), &["store", "export", "--to", exported_home.to_str().unwrap()]);
    assert!(e.contains("not empty"), "{e}");

    // And the store goes on: a call on it chains after the imported lines, and a new memory
    // takes the next id.
    let ran = json(o(), &["skill", "run", "echoer", "-p", "mode=echo", "-p", "arg=on the store"]);
    assert_eq!(ran["not_granted"], serde_json::json!([]), "the grant came along: {ran}");
    assert_eq!(json(h(), &["audit", "verify"])["entries"], entries + 1);
    let added = json(o(), &["memory", "add", "The kettle in the office is blue"]);
    let max = before
        .archive
        .as_array()
        .unwrap()
        .iter()
        .chain(before.records.as_array().unwrap())
        .map(|r| r.get("record").unwrap_or(r)["id"].as_u64().unwrap());
    assert_eq!(added["record"]["id"].as_u64(), max.max().map(|m| m + 1), "{added}");
}

#[test]
fn import_refuses_a_log_that_does_not_verify_and_export_needs_a_store() {
    let env = Env::new();
    let local = env.home.path();
    let dir = env.probe_as("echoer", "");
    ok(cmd(local, None), &["skill", "install", dir.to_str().unwrap()]);
    ok(cmd(local, None), &["skill", "run", "echoer", "-p", "mode=echo"]);
    let log = local.join("audit").join("audit.jsonl");
    let text = std::fs::read_to_string(&log).unwrap().replace("echoer", "echoes");
    std::fs::write(&log, text).unwrap();

    let store = Store::new();
    let host_home = tempfile::tempdir().unwrap();
    let h = || store.host(host_home.path());
    ok(h(), &["store", "migrate"]);
    let e = failure(h(), &["store", "import", "--from", local.to_str().unwrap()]);
    assert!(e.contains("does not verify") && e.contains("nothing was imported"), "{e}");
    assert_eq!(store.db.psql("SELECT count(*) FROM skillhost_home_units"), "0", "nothing written before the checks");
    let e = failure(h(), &["store", "import", "--from", "/nonexistent/home"]);
    assert!(e.contains("not a directory"), "{e}");
    let e = failure(cmd(local, None), &["store", "export", "--to", "/tmp/x"]);
    assert!(e.contains("--store postgres://"), "{e}");
}

/// A home whose memory a running server holds is not imported: what the server writes after
/// the snapshot would be in neither the store nor anywhere its users look once they move to
/// the store. Nothing is written; once the server has stopped, the same import runs.
#[test]
fn import_refuses_a_home_whose_memory_a_running_server_holds() {
    use std::io::{BufRead as _, BufReader, Write as _};
    let env = Env::new();
    let local = env.home.path();
    ok(cmd(local, None), &["memory", "add", "The office kettle is blue"]);
    let mut server = common::skillhost_command(local)
        .args(["mcp", "--memory", "write"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut answer = |request: &str| {
        writeln!(stdin, "{request}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line
    };
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    assert!(answer(init).contains("\"result\""));
    // `initialized`, then a memory tool: it opens the home's memory in the server, which
    // then holds it.
    let search = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_search","arguments":{"query":"kettle"}}}"#;
    let found = answer(search);
    assert!(found.contains("kettle"), "{found}");

    let store = Store::new();
    let host_home = tempfile::tempdir().unwrap();
    let h = || store.host(host_home.path());
    ok(h(), &["store", "migrate"]);
    let e = failure(h(), &["store", "import", "--from", local.to_str().unwrap()]);
    assert!(e.contains("open in another skillhost process") && e.contains(&format!("pid {}", server.id())), "{e}");
    assert!(e.contains("nothing was imported"), "{e}");
    assert_eq!(store.db.psql("SELECT count(*) FROM skillhost_home_units"), "0", "nothing written");
    assert_eq!(store.db.psql("SELECT seq FROM skillhost_audit_head WHERE id = 1"), "0", "nothing written");

    drop(stdin);
    assert!(server.wait().unwrap().success());
    let imported = json(h(), &["store", "import", "--from", local.to_str().unwrap()]);
    assert_eq!(imported["imported"]["memory"]["records"], 1, "{imported}");
}

#[test]
fn store_compact_checkpoints_the_memory_log_and_new_hosts_start_from_the_checkpoint() {
    let store = Store::new();
    let (a_home, b_home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = || store.host(a_home.path());
    let b = || store.host(b_home.path());
    ok(a(), &["store", "migrate"]);
    for fact in [
        "The user prefers vim as their editor",
        "The release pipeline needs approval from two maintainers",
        "Serial output is garbled when the baud rate does not match",
        "The staging database runs PostgreSQL 15",
        "The office kettle is broken",
    ] {
        ok(a(), &["memory", "add", fact]);
    }
    let old = json(a(), &["memory", "search", "kettle broken"])[0]["record"]["id"].as_u64().unwrap();
    ok(a(), &["memory", "forget", &old.to_string()]);
    let status = json(a(), &["store", "status"]);
    assert_eq!(status["memory_log"]["head"], 6, "{status}");
    assert_eq!(status["memory_log"]["ops"], 6, "{status}");
    assert!(status["memory_log"]["checkpoint"].is_null(), "{status}");

    // A checkpoint with no retention: every op it holds goes.
    let report = json(a(), &["store", "compact", "--retain-secs", "0"]);
    let c = &report["checkpoint"];
    assert_eq!(
        (c["seq"].as_u64(), c["ops_removed"].as_u64(), c["ops_left"].as_u64()),
        (Some(6), Some(6), Some(0)),
        "{report}"
    );
    assert_eq!(c["archive"], 1, "{report}");
    assert_eq!(store.db.psql("SELECT count(*) FROM skillhost_memory_log"), "0");
    let status = json(a(), &["store", "status"]);
    assert_eq!((status["memory_log"]["head"].as_u64(), status["memory_log"]["ops"].as_u64()), (Some(6), Some(0)));
    assert_eq!(status["memory_log"]["checkpoint"][0], 6, "{status}");
    let text = ok(a(), &["store", "status"]);
    assert!(text.contains("memory log: head at op 6, 0 op(s) held, newest checkpoint at op 6"), "{text}");

    // A new host starts from the checkpoint: the same memory, ids and answers as A.
    assert_eq!(memory_state(b), memory_state(a));
    // It writes on after the checkpoint, and A sees the write.
    ok(b(), &["memory", "add", "The printer on floor 3 needs toner"]);
    let hits = json(a(), &["memory", "search", "printer toner"]);
    assert_eq!(hits[0]["record"]["content"], "The printer on floor 3 needs toner", "{hits}");
    assert_eq!(hits[0]["record"]["id"].as_u64(), Some(6), "ids go on from the checkpoint's (5 records, then 6)");

    // With the default retention (10 minutes) the new checkpoint removes nothing yet: the
    // ops after the one written less than 10 minutes ago stay for hosts that are behind.
    let report = json(b(), &["store", "compact"]);
    let c = &report["checkpoint"];
    assert_eq!(
        (c["seq"].as_u64(), c["ops_removed"].as_u64(), c["checkpoints_removed"].as_u64(), c["ops_left"].as_u64()),
        (Some(7), Some(0), Some(0), Some(1)),
        "{report}"
    );
    assert_eq!(
        store.db.psql("SELECT string_agg(seq::text, ',' ORDER BY seq) FROM skillhost_memory_checkpoints"),
        "6,7"
    );
    // An import into a store that has memory (compacted or not) is still refused.
    let local = tempfile::tempdir().unwrap();
    std::fs::create_dir(local.path().join("memory")).unwrap();
    let e = failure(a(), &["store", "import", "--from", local.path().to_str().unwrap()]);
    assert!(e.contains("not empty") && e.contains("7 memory write(s)"), "{e}");
    // A local home has no memory log to compact.
    let e = failure(cmd(local.path(), None), &["store", "compact"]);
    assert!(e.contains("no log to compact"), "{e}");
}
