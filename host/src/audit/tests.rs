//! Unit tests of the log: chaining, canonical form, group commit, the tail read backwards.

use super::chain::line_hash;
use super::*;
use serde_json::{Map, Value, json};

#[test]
fn a_kept_log_file_sees_other_writers_edits_and_seals() {
    let dir = tempfile::tempdir().unwrap();
    // Two logs of one path share nothing in memory: like two processes.
    let (a, b) = (AuditLog::in_home(dir.path()), AuditLog::in_home(dir.path()));
    a.sync_in_background().unwrap();
    let e = || new_entry(EntryKind::Call, "s");
    let now_or_later = |log: &AuditLog| match log.try_append_now(e()) {
        Ok(r) => r.unwrap(),
        Err(entry) => log.append(entry).unwrap(),
    };
    for i in 0..4 {
        assert_eq!(now_or_later(&a).seq, 2 * i + 1);
        assert_eq!(b.append(e()).unwrap().seq, 2 * i + 2);
    }
    // Kept open and unchanged since: written without waiting.
    assert_eq!(a.try_append_now(e()).ok().map(|r| r.unwrap().seq), Some(9));
    assert!(a.check_appendable().is_ok());
    assert_eq!(a.verify().unwrap().entries, 9);
    // An edit in place (same size) breaks the chain; `a` must not trust what it kept.
    let text = std::fs::read_to_string(a.path()).unwrap();
    std::fs::write(a.path(), text.replacen("\"session\":\"s\"", "\"session\":\"t\"", 1)).unwrap();
    assert!(a.check_appendable().is_ok(), "the end still chains");
    assert_eq!(now_or_later(&a).seq, 10);
    b.seal().unwrap();
    // The path names the new segment now: the kept file is not written again.
    assert!(a.try_append_now(e()).is_err());
    let after = a.append(e()).unwrap();
    assert_eq!(after.seq, 2, "chained to the seal line of the new segment");
    assert_eq!(now_or_later(&a).seq, 3);
    assert_eq!(b.append(e()).unwrap().seq, 4);
    a.flush().unwrap();
    assert_eq!(a.verify().unwrap().entries, 4);
}

#[test]
fn a_chained_line_is_the_canonical_entry_with_its_hash() {
    let entries = [
        json!({ "kind": "call", "session": "s", "skill": "probe", "params": { "b": [1, "x"], "a": null } }),
        json!({ "a": 1 }),
        json!({ "zz": "last", "ha": "\u{e9}\"q" }),
    ];
    for e in entries {
        let Value::Object(m) = e else { unreachable!() };
        let (line, hash) = chained_line(m.into(), 7, GENESIS);
        let Value::Object(mut back) = serde_json::from_str::<Value>(&line).unwrap() else { panic!("{line}") };
        assert_eq!(format!("{}\n", canonical_json(&Value::Object(back.clone()))), line);
        back.remove("hash");
        assert_eq!(line_hash(GENESIS, &back), hash);
    }
}

#[test]
fn canonical_form_sorts_keys_at_every_level() {
    let v = json!({"b": 1, "a": {"d": [ {"z": 1, "y": 2} ], "c": "x\"y"}});
    assert_eq!(canonical_json(&v), r#"{"a":{"c":"x\"y","d":[{"y":2,"z":1}]},"b":1}"#);
}

#[test]
fn entries_must_say_what_and_whose() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::in_home(dir.path());
    assert!(log.append(Map::new()).unwrap_err().to_string().contains("kind"));
    assert!(log.append(new_entry(EntryKind::Call, "")).unwrap_err().to_string().contains("session"));
    let mut e = new_entry(EntryKind::Step, "s");
    e.insert("hash".into(), "x".into());
    assert!(log.append(e).unwrap_err().to_string().contains("`hash` is set by the audit log"));
    assert_eq!(log.verify().unwrap().entries, 0);
}

#[test]
fn appends_chain_and_step_entries_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::in_home(dir.path());
    let first = log.append(new_entry(EntryKind::Call, "s1")).unwrap();
    let step = StepEntry {
        skill: Some("read-log-file".into()),
        ..StepEntry::new("s1", 2, StepAction::CallSkill, StepStatus::Success)
    };
    let second = log.append(step.into_entry()).unwrap();
    assert_eq!((first.seq, second.seq), (1, 2));
    let v = log.verify().unwrap();
    assert_eq!((v.entries, v.head.as_str()), (2, second.hash.as_str()));
    let shown = log.show("s1").unwrap();
    assert_eq!(shown[0]["prev"], GENESIS);
    assert_eq!(shown[1]["prev"], first.hash.as_str());
    assert_eq!(shown[1]["kind"], "step");
    assert_eq!(shown[1]["action"], "call_skill");
    let sessions = log.list().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].skills, vec!["read-log-file"]);
    assert_eq!(sessions[0].final_status, "success");
    assert!(log.show("nope").unwrap_err().to_string().contains("no audit entries for session `nope`"));
}

#[test]
fn concurrent_appends_share_syncs_and_keep_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::in_home(dir.path());
    let (threads, each) = (8, 40);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let log = log.clone();
            scope.spawn(move || {
                for i in 0..each {
                    let mut e = new_entry(EntryKind::Call, &format!("s{t}"));
                    e.insert("i".into(), i.into());
                    log.append(e).unwrap();
                }
            });
        }
    });
    let total = (threads * each) as u64;
    assert_eq!(log.verify().unwrap().entries, total);
    let syncs = log.syncs();
    assert!((1..total).contains(&syncs), "{syncs} syncs for {total} concurrent appends: none was shared");
    // Every thread's lines are all there, in its own order.
    for t in 0..threads {
        let mine: Vec<u64> = log.show(&format!("s{t}")).unwrap().iter().map(|e| e["i"].as_u64().unwrap()).collect();
        assert_eq!(mine, (0..each as u64).collect::<Vec<_>>());
    }
    // A lone append still syncs before it returns.
    let before = log.syncs();
    log.append(new_entry(EntryKind::Call, "alone")).unwrap();
    assert_eq!(log.syncs(), before + 1);
}

#[test]
fn background_syncs_follow_the_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::in_home(dir.path());
    log.sync_in_background().unwrap();
    log.sync_in_background().unwrap();
    for i in 0..200 {
        let mut e = new_entry(EntryKind::Call, "bg");
        e.insert("i".into(), i.into());
        log.append(e).unwrap();
    }
    // Every line is readable at once (written before the append returned).
    assert_eq!(log.verify().unwrap().entries, 200);
    log.flush().unwrap();
    let st = log.commits.lock();
    assert_eq!(st.durable, 200, "flush leaves nothing unsynced");
    assert!(st.syncs >= 1, "the background syncer ran");
}

/// The syncer is woken only by a line that finds nothing pending: lines written while it
/// is idle, between rounds or while it syncs must all still reach the disk without a flush.
#[test]
fn background_syncs_reach_every_line_without_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::in_home(dir.path());
    log.sync_in_background().unwrap();
    let durable_soon = |n: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.commits.lock().durable < n {
            assert!(std::time::Instant::now() < deadline, "line {n} was never synced in the background");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    };
    let append = |i: u64| {
        let mut e = new_entry(EntryKind::Call, "bg");
        e.insert("i".into(), i.into());
        match log.try_append_now(e) {
            Ok(r) => r.unwrap(),
            Err(e) => log.append(e).unwrap(),
        };
    };
    // A lone line after the syncer went idle; then bursts (lines pending when others come).
    append(1);
    durable_soon(1);
    append(2);
    durable_soon(2);
    for i in 3..=300 {
        append(i);
    }
    durable_soon(300);
    let st = log.commits.lock();
    assert!(st.pending.is_empty(), "nothing left pending once every line is durable");
    assert!(st.syncs < 300, "the lines of a burst share syncs ({} syncs for 300 lines)", st.syncs);
}

#[test]
fn the_tail_is_found_across_chunk_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::in_home(dir.path());
    for i in 0..3 {
        let mut e = new_entry(EntryKind::Call, "s");
        e.insert("params".into(), json!({"blob": "x".repeat(9000 * i + 10)}));
        log.append(e).unwrap();
    }
    assert_eq!(log.verify().unwrap().entries, 3);
}
