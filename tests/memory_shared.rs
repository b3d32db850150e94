//! The memory store shared by several processes and many threads, damaged stores, and the
//! per-session reference count (issue 9, defects 7, 8 and 9). Real processes: a holder
//! child (this test binary, re-run on its ignored `holder_child` test) owns the store while
//! the `skillhost` CLI and this process use it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::Value;
use skillhost::memory::{Memory, MemoryConfig, MemoryKind, MemoryStore, NewRecord, Provenance, SearchFilter};

fn rec(content: &str, session: &str) -> NewRecord {
    NewRecord {
        namespace: "default".into(),
        kind: MemoryKind::Fact,
        content: content.into(),
        priority: 3,
        tags: vec![],
        provenance: Provenance { skill: "probe".into(), skill_hash: "aaaa".into(), session: session.into(), step: 1 },
    }
}

fn cli(home: &Path) -> assert_cmd::Command {
    let mut c = common::skillhost(home);
    c.env("SKILLHOST_MEMORY_WAIT_MS", "5000");
    c
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// Owns the store of `$MEMORY_HOLDER_DIR` and answers `search WORDS` with the ids it finds.
#[test]
#[ignore = "run as a child process by the tests below"]
fn holder_child() {
    let Ok(dir) = std::env::var("MEMORY_HOLDER_DIR") else { return };
    let m = Memory::open(Path::new(&dir), MemoryConfig::default()).unwrap();
    m.add(rec("the holder wrote this about the canbus", "holder")).unwrap();
    println!("ready owner={}", m.is_owner());
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if let Some(q) = line.strip_prefix("search ") {
            let hits = m.search(q, &SearchFilter::namespace("default"), 50).unwrap();
            let ids: Vec<String> = hits.iter().map(|h| h.record.id.to_string()).collect();
            println!("found {}", ids.join(","));
        } else if line == "quit" {
            break;
        }
    }
}

struct Holder {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Holder {
    fn start(dir: &Path) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "holder_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("MEMORY_HOLDER_DIR", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut h = Holder { child, stdin, lines };
        let ready = h.expect("ready");
        assert_eq!(ready, "ready owner=true", "the holder owns the store");
        h
    }

    fn expect(&mut self, prefix: &str) -> String {
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(60)).expect("the holder answers");
            // libtest prints `test holder_child ... ` before the first line of output.
            if let Some(at) = line.find(prefix) {
                return line[at..].to_string();
            }
        }
    }

    fn search(&mut self, q: &str) -> Vec<u64> {
        writeln!(self.stdin, "search {q}").unwrap();
        let line = self.expect("found");
        line.trim_start_matches("found")
            .trim()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect()
    }

    fn kill(mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        self.child.wait().unwrap();
    }
}

#[test]
fn cli_commands_work_while_another_process_holds_the_store_and_after_it_dies() {
    let home = tempfile::tempdir().unwrap();
    let mut holder = Holder::start(&home.path().join("memory"));

    let out =
        cli(home.path()).args(["--json", "memory", "add", "the lidar driver needs firmware 7.2"]).output().unwrap();
    assert!(out.status.success(), "add during a holder: {}", String::from_utf8_lossy(&out.stderr));
    let id = json_of(&out.stdout)["record"]["id"].as_u64().unwrap();
    let out = cli(home.path()).args(["--json", "memory", "search", "lidar firmware"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hits = json_of(&out.stdout);
    assert!(hits.as_array().unwrap().iter().any(|h| h["record"]["id"] == id), "{hits}");
    let out = cli(home.path()).args(["--json", "memory", "show"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = json_of(&out.stdout)["text"].as_str().unwrap().to_string();
    assert!(text.contains("lidar driver") && text.contains("canbus"), "{text}");
    // The holder sees what the other process wrote.
    assert!(holder.search("lidar firmware").contains(&id));

    // The owner dies mid-way (SIGKILL: no cleanup, a stale socket stays behind).
    holder.kill();
    let out = cli(home.path()).args(["--json", "memory", "search", "lidar firmware"]).output().unwrap();
    assert!(out.status.success(), "after the owner died: {}", String::from_utf8_lossy(&out.stderr));
    assert!(json_of(&out.stdout).as_array().unwrap().iter().any(|h| h["record"]["id"] == id));
    cli(home.path()).args(["memory", "add", "written after the owner died"]).assert().success();
}

#[test]
fn a_client_in_process_takes_over_when_the_owner_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let holder = Holder::start(dir.path());
    let m = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    assert!(!m.is_owner());
    assert_eq!(m.owner_pid(), holder.child.id());
    let id = m.add(rec("written through the owner about the gpio bank", "client")).unwrap();
    m.session_set("s1", "k", "v1").unwrap();
    holder.kill();
    // The next call finds the owner gone and takes the store over, with everything in it.
    let hits = m.search("gpio bank", &SearchFilter::namespace("default"), 10).unwrap();
    assert_eq!(hits.iter().map(|h| h.record.id).collect::<Vec<_>>(), vec![id]);
    assert!(m.is_owner());
    assert_eq!(m.session_get("s1", "k").unwrap().as_deref(), Some("v1"));
    assert_eq!(m.live("default").unwrap().len(), 2, "the holder's record and ours");
}

/// Many threads doing every kind of call at once on one handle; each checks its own results.
fn hammer(m: Arc<Memory>, threads: usize, rounds: usize) {
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let session = format!("thread-{t}");
                let mut mine = Vec::new();
                for i in 0..rounds {
                    // Distinct identifiers keep the facts distinct: a number after `#` names
                    // which one (a bare number is a value, and a new value would be an update).
                    let text = format!("thread{t} observed sensor reading #{} on bus #{i}", t * 1000 + i);
                    let id = m.insert(rec(&text, &session)).unwrap();
                    mine.push((id, text));
                    m.session_set(&session, &format!("k{i}"), &format!("v{t}-{i}")).unwrap();
                    let hits = m.search_in_session(&session, "default", &format!("thread{t} sensor"), 50).unwrap();
                    assert!(hits.iter().any(|(r, _)| r.id == id), "thread {t} round {i}: own record not found");
                    assert_eq!(m.session_get(&session, &format!("k{i}")).unwrap(), Some(format!("v{t}-{i}")));
                    let recalled = m.recall_in_session(&session, "default", "sensor reading").unwrap();
                    assert!(!recalled.is_empty());
                    let view = m.view("default").unwrap();
                    assert!(view.tokens <= view.budget);
                }
                let keys = m.session_keys(&session).unwrap();
                assert_eq!(keys.len(), rounds, "thread {t}: {keys:?}");
                for (id, text) in mine {
                    assert_eq!(m.get(id).unwrap().map(|r| r.content), Some(text));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let all = m.all_records().unwrap();
    assert_eq!(all.len(), threads * rounds, "every insert is one record");
    let mut ids: Vec<u64> = all.iter().map(|r| r.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "ids are unique");
    // The index is in step with the store after all that.
    let hits = m.search("sensor reading", &SearchFilter::namespace("default"), 1000).unwrap();
    assert_eq!(hits.len(), threads * rounds);
    // The view after the writes shows the newest state (no stale cache).
    let live = m.live("default").unwrap();
    assert_eq!(live.len(), threads * rounds);
}

#[test]
fn many_threads_at_once_on_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Memory::open(dir.path(), MemoryConfig::default()).unwrap());
    assert!(m.is_owner());
    hammer(m, 16, 12);
}

#[test]
fn many_threads_at_once_on_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    let client = Arc::new(Memory::open(dir.path(), MemoryConfig::default()).unwrap());
    assert!(owner.is_owner() && !client.is_owner());
    hammer(client, 8, 8);
    assert_eq!(owner.all_records().unwrap().len(), 64);
}

#[test]
fn concurrent_adds_of_one_fact_merge_into_one_record() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Memory::open(dir.path(), MemoryConfig::default()).unwrap());
    let barrier = Arc::new(Barrier::new(8));
    let ids: Vec<u64> = (0..8)
        .map(|t| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                m.add(rec("the staging cluster runs kubernetes", &format!("s{t}"))).unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let live = m.live("default").unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].provenance.len(), 8, "every writer's provenance is kept");
}

#[test]
fn a_record_counts_one_reference_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let m = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    let id = m.add(rec("the flash chip is a w25q128", "w")).unwrap();
    let refs = || m.get(id).unwrap().unwrap().references;
    m.search_in_session("a", "default", "flash chip", 5).unwrap();
    m.search_in_session("a", "default", "flash chip", 5).unwrap();
    assert_eq!(refs(), 1, "a session searching in a loop counts once");
    // A long-lived process serves a new session: it counts again.
    m.search_in_session("b", "default", "flash chip", 5).unwrap();
    assert_eq!(refs(), 2);
    m.recall_in_session("c", "default", "flash").unwrap();
    m.recall_in_session("c", "default", "flash").unwrap();
    assert_eq!(refs(), 3);
    // Through another process's handle (a client), sessions are still told apart.
    let client = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    client.search_in_session("b", "default", "flash chip", 5).unwrap();
    assert_eq!(refs(), 3, "session b was counted already, by the owner");
    client.search_in_session("d", "default", "flash chip", 5).unwrap();
    assert_eq!(refs(), 4);
}

fn store_with_records(dir: &Path) {
    let m = Memory::open(dir, MemoryConfig::default()).unwrap();
    for i in 0..40 {
        m.add(rec(&format!("fact {i} about the i2c controller number {i}"), "s")).unwrap();
    }
    m.session_set("s", "k", "v").unwrap();
}

#[test]
fn a_damaged_store_is_reported_not_panicked_at_any_offset() {
    let template = tempfile::tempdir().unwrap();
    store_with_records(template.path());
    let original = std::fs::read(template.path().join("store.redb")).unwrap();
    let len = original.len();
    let mut damaged_reports = 0;
    // Header, the first pages, the middle, the end.
    for offset in [0, 9, 64, 300, 4096, 4200, 8192, len / 3, len / 2, len - 4096, len - 16] {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("memory");
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = original.clone();
        for b in &mut bytes[offset..(offset + 16).min(len)] {
            *b ^= 0x5a;
        }
        std::fs::write(dir.join("store.redb"), &bytes).unwrap();
        let out = cli(home.path()).args(["--json", "memory", "show"]).output().unwrap();
        assert_ne!(out.status.code(), Some(101), "offset {offset}: panicked: {}", String::from_utf8_lossy(&out.stderr));
        let v = json_of(&out.stdout);
        if !out.status.success() {
            let err = v["error"].as_str().unwrap_or_else(|| panic!("offset {offset}: no JSON error: {v}"));
            assert!(err.contains("is damaged") && err.contains("store.redb") && err.contains("memory import"), "{err}");
            damaged_reports += 1;
            // The damaged file is left where it was, for the user to move aside or salvage.
            assert!(std::fs::metadata(dir.join("store.redb")).unwrap().len() > 0, "offset {offset}");
        }
        // The library API says the same, without a panic.
        if let Err(e) = Memory::open(&dir, MemoryConfig::default()).and_then(|m| m.all_records()) {
            assert!(format!("{e:#}").contains("damaged"), "offset {offset}: {e:#}");
        }
    }
    assert!(damaged_reports >= 1, "at least the damaged header is reported");
}

#[test]
fn an_empty_store_file_is_refused_not_treated_as_empty() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("memory");
    store_with_records(&dir);
    std::fs::write(dir.join("store.redb"), b"").unwrap();
    let err = format!("{:#}", Memory::open(&dir, MemoryConfig::default()).err().expect("refused"));
    assert!(err.contains("is damaged") && err.contains("empty (0 bytes)"), "{err}");
    let out = cli(home.path()).args(["--json", "memory", "show"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(json_of(&out.stdout)["error"].as_str().unwrap().contains("empty (0 bytes)"));
    assert_eq!(std::fs::metadata(dir.join("store.redb")).unwrap().len(), 0, "left as found");
    // A missing store is a new, empty one (created aside and renamed: never empty on disk).
    std::fs::remove_file(dir.join("store.redb")).unwrap();
    let m = Memory::open(&dir, MemoryConfig::default()).unwrap();
    assert!(m.all_records().unwrap().is_empty());
    assert!(std::fs::metadata(dir.join("store.redb")).unwrap().len() > 0);
}

#[test]
fn agent_sessions_live_in_their_own_files_and_old_ones_are_migrated() {
    let dir = tempfile::tempdir().unwrap();
    store_with_records(dir.path());
    // An older store kept paused runs in its `agent_sessions` table.
    {
        const OLD: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("agent_sessions");
        let db = redb::Database::open(dir.path().join("store.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(OLD).unwrap().insert("s-old-1", br#"{"step":3,"goal":"g"}"#.as_slice()).unwrap();
        txn.open_table(OLD).unwrap().insert("s-both", br#"{"from":"table"}"#.as_slice()).unwrap();
        txn.commit().unwrap();
    }
    // A file saved meanwhile is newer than the table's copy.
    std::fs::create_dir_all(dir.path().join("sessions")).unwrap();
    std::fs::write(dir.path().join("sessions/s-both.json"), br#"{"from":"file"}"#).unwrap();
    let m = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    assert_eq!(m.agent_session("s-old-1").unwrap(), Some(serde_json::json!({"step": 3, "goal": "g"})));
    assert_eq!(m.agent_session("s-both").unwrap(), Some(serde_json::json!({"from": "file"})));
    assert!(dir.path().join("sessions/s-old-1.json").exists());
    m.save_agent_session("s-new", &serde_json::json!({"x": 1})).unwrap();
    assert_eq!(m.agent_session("s-new").unwrap(), Some(serde_json::json!({"x": 1})));
    assert_eq!(m.agent_session("nope").unwrap(), None);
    // Ids cannot name files elsewhere.
    m.save_agent_session("../escape", &serde_json::json!(1)).unwrap();
    assert!(!dir.path().join("escape.json").exists());
    assert_eq!(m.agent_session("../escape").unwrap(), Some(serde_json::json!(1)));
    // A client reads and writes them too, without going through the owner.
    let client = Memory::open(dir.path(), MemoryConfig::default()).unwrap();
    assert_eq!(client.agent_session("s-new").unwrap(), Some(serde_json::json!({"x": 1})));
    drop(client);
    drop(m);
    // The table is gone from the store; the records are untouched.
    let db = redb::Database::open(dir.path().join("store.redb")).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    assert!(txn.list_tables().unwrap().all(|t| redb::TableHandle::name(&t) != "agent_sessions"));
    drop(txn);
    drop(db);
    assert_eq!(Memory::open(dir.path(), MemoryConfig::default()).unwrap().all_records().unwrap().len(), 40);
}
