//! Updates supersede (issue 13 item 2): a restatement is merged, an update (same subject, new
//! value) becomes the live record and the old one is archived as outdated with a link to its
//! successor; numbers in words and Chinese numerals compare as numbers; Chinese negation is
//! read by words. Through the public API on real files (redb, tantivy).
//!
//! New fields (`superseded_by`, `supersedes`) are read through their JSON form, which is
//! also what `memory archive --json` prints, so this file also builds against the code before
//! them (it was run there once to see these tests fail).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::memory_store::{HOUR_MS as HOUR, clock, open_at, provenance, record};
use proptest::prelude::*;
use serde_json::Value;
use skillhost::memory::{Memory, MemoryKind, NewRecord, SearchFilter};

fn by(skill: &str, content: &str, kind: MemoryKind, priority: u8) -> NewRecord {
    record(content, kind, priority, provenance(skill, "h1", "s1", 1))
}

fn user(content: &str) -> NewRecord {
    by("user", content, MemoryKind::Preference, 3)
}

fn json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

fn live_contents(m: &Memory) -> Vec<String> {
    m.live("default").unwrap().into_iter().map(|r| r.content).collect()
}

fn search_ids(m: &Memory, q: &str) -> Vec<u64> {
    m.search(q, &SearchFilter::namespace("default"), 10).unwrap().into_iter().map(|h| h.record.id).collect()
}

/// Store `old`, an hour later `new` (both the user's); returns their ids.
fn old_then_new(m: &Memory, clock: &AtomicU64, old: &str, new: &str) -> (u64, u64) {
    let a = m.add(user(old)).unwrap();
    clock.fetch_add(HOUR, Ordering::SeqCst);
    let b = m.add(user(new)).unwrap();
    (a, b)
}

#[test]
fn an_update_becomes_the_live_record_and_the_old_one_is_archived_with_a_link() {
    let cases = [
        ("The user prefers tabs for indentation", "The user now prefers spaces for indentation", "indentation"),
        ("The user prefers tabs", "The user now prefers spaces", "prefers"),
        (
            "The web project uses npm as its package manager",
            "The web project uses pnpm as its package manager",
            "package manager",
        ),
        ("The user lives in Berlin", "The user lives in Munich", "lives"),
        ("The user's editor is vim", "The user's editor is helix", "editor"),
        ("The user's name is Alice Martin", "The user's name is Alicia Martin", "name"),
        ("The upload timeout is 10 s", "The upload timeout is 10 ms", "upload timeout"),
        ("Merging to main needs two approvals", "Merging to main needs one approval", "merging approvals"),
        ("用户喜欢用制表符缩进", "用户现在喜欢用空格缩进", "缩进"),
        ("项目用npm管理依赖", "项目用pnpm管理依赖", "管理依赖"),
        ("接口超时两秒", "接口超时五秒", "接口超时"),
        ("用户住在北京", "用户住在上海", "用户住在"),
    ];
    for (old, new, query) in cases {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let m = open_at(dir.path(), &clock);
        let (a, b) = old_then_new(&m, &clock, old, new);
        assert_ne!(a, b, "{new:?} is an update of {old:?}, not a restatement");
        assert_eq!(live_contents(&m), vec![new.to_string()], "only the newest value is live ({old:?} -> {new:?})");
        assert_eq!(search_ids(&m, query), vec![b], "{query:?} finds the new value");
        let archive = m.archive().unwrap();
        let entry = archive.iter().find(|e| e.record.id == a).unwrap_or_else(|| panic!("{old:?} archived"));
        assert_eq!(entry.reason, "outdated");
        assert_eq!(entry.record.content, old, "the old wording is kept in the archive");
        assert_eq!(json(entry)["superseded_by"], json(&b), "the archive entry links the successor");
        assert_eq!(json(&entry.record)["superseded_by"], json(&b), "the record is marked superseded");
        let successor = m.get(b).unwrap().unwrap();
        assert_eq!(json(&successor)["supersedes"], json(&[a]), "the successor links back");
        // Both provenances are kept: the old one in the archive, the new one live.
        assert_eq!(entry.record.provenance[0].session, "s1");
        assert_eq!(successor.provenance.len(), 1);
    }
}

#[test]
fn a_restatement_still_merges_and_numbers_compare_as_numbers() {
    let cases = [
        ("Merging to main needs two approvals", "Merging to main needs 2 approvals"),
        ("The upload timeout is ten seconds", "The upload timeout is 10 seconds"),
        ("The build cache holds twenty five entries", "The build cache holds 25 entries"),
        ("接口超时两秒", "接口超时2秒"),
        ("每批最多3千条记录", "每批最多三千条记录"),
        ("UART garbage is caused by a baud rate mismatch", "A baud rate mismatch causes UART garbage"),
        ("用户非常喜欢用vim编辑器", "用户喜欢用vim编辑器"),
    ];
    for (a_text, b_text) in cases {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let m = open_at(dir.path(), &clock);
        let (a, b) = old_then_new(&m, &clock, a_text, b_text);
        assert_eq!(a, b, "{b_text:?} restates {a_text:?}: merged");
        assert_eq!(m.live("default").unwrap().len(), 1);
        assert_eq!(m.get(a).unwrap().unwrap().provenance.len(), 1, "same user session: one provenance");
    }
}

#[test]
fn unrelated_records_and_identifiers_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let m = open_at(dir.path(), &clock);
    for t in [
        "The user prefers tabs",
        "The user prefers dark mode",
        "Ticket 41 was a baud mismatch on port 3",
        "Ticket 42 was a baud mismatch on port 3",
        "rule 7: always sign commits",
        "rule 8: always sign commits",
        "用户喜欢深色主题",
        "用户喜欢简短的回答",
    ] {
        m.add(user(t)).unwrap();
        clock.fetch_add(HOUR, Ordering::SeqCst);
    }
    assert_eq!(m.live("default").unwrap().len(), 8, "{:?}", live_contents(&m));
}

#[test]
fn another_predicate_stays_apart_a_synonym_restates_and_a_bare_measurement_updates() {
    let pair = |old: &str, new: &str| {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let m = open_at(dir.path(), &clock);
        let (a, b) = old_then_new(&m, &clock, old, new);
        let outdated = m.archive().unwrap().iter().filter(|e| e.reason == "outdated").count();
        (a == b, live_contents(&m), outdated)
    };
    // The same object, another relation to it: two facts, both live.
    for (old, new) in [
        ("Lin lives in Paris", "Lin likes Paris"),
        ("Lin uses Zed for Rust", "Lin hates Zed for Rust"),
        ("林住在巴黎", "林喜欢巴黎"),
    ] {
        let (merged, live, outdated) = pair(old, new);
        assert!(!merged && live.len() == 2 && outdated == 0, "{new:?} is not an update of {old:?}: {live:?}");
    }
    // The same value in other words: one record.
    for (old, new) in [
        ("Lin prefers tabs for Python", "Lin likes tabs for Python"),
        ("The build cache is large", "The build cache is big"),
        ("林偏好用tabs缩进", "林喜欢用tabs缩进"),
    ] {
        let (merged, live, _) = pair(old, new);
        assert!(merged && live.len() == 1, "{new:?} restates {old:?}: {live:?}");
    }
    // A number without a unit is a measurement: a new one is an update.
    for (old, new) in
        [("The API rate limit is 500", "The API rate limit is 800"), ("网关的限流是500", "网关的限流是800")]
    {
        let (merged, live, outdated) = pair(old, new);
        assert!(!merged && live == vec![new.to_string()] && outdated == 1, "{new:?} updates {old:?}: {live:?}");
    }
    // ...while a number that names which one keeps two subjects apart.
    for (old, new) in
        [("#17 fixes the login bug", "#18 fixes the login bug"), ("第3步先备份数据库", "第4步先备份数据库")]
    {
        let (merged, live, _) = pair(old, new);
        assert!(!merged && live.len() == 2, "{new:?} is about another one than {old:?}: {live:?}");
    }
}

#[test]
fn chinese_negation_is_a_word_not_a_character() {
    // 不 / 没有 / 别 as words negate: the statement flips, so it supersedes.
    for (old, new) in [
        ("用户喜欢用vim编辑器", "用户不喜欢用vim编辑器"),
        ("部署脚本会自动重启服务", "部署脚本没有自动重启服务"),
        ("The staging server is atlas", "The staging server is not atlas"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let m = open_at(dir.path(), &clock);
        let (a, b) = old_then_new(&m, &clock, old, new);
        assert_ne!(a, b, "{new:?} negates {old:?}");
        assert_eq!(live_contents(&m), vec![new.to_string()]);
    }
    // 非常 ("very"), 无论 ("regardless"), 不错 ("good"), 特别 ("especially") negate nothing.
    for (old, new) in [
        ("用户喜欢用vim编辑器写代码", "用户非常喜欢用vim编辑器写代码"),
        ("用户喜欢用vim编辑器写代码", "用户特别喜欢用vim编辑器写代码"),
        ("发布前要跑完整测试", "无论如何发布前要跑完整测试"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let m = open_at(dir.path(), &clock);
        let (a, b) = old_then_new(&m, &clock, old, new);
        assert_eq!(a, b, "{new:?} restates {old:?}: merged, not a negation");
    }
}

#[test]
fn a_skill_update_of_a_user_record_is_stored_beside_it_and_ranks_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let m = open_at(dir.path(), &clock);
    let mine = m.add(user("The user prefers tabs for indentation")).unwrap();
    clock.fetch_add(HOUR, Ordering::SeqCst);
    let theirs = m.add(by("notes", "The user now prefers spaces for indentation", MemoryKind::Preference, 3)).unwrap();
    assert_ne!(mine, theirs);
    let kept = m.get(mine).unwrap().unwrap();
    assert_eq!(kept.content, "The user prefers tabs for indentation", "a skill never rewrites the user's record");
    assert!(kept.is_live(clock.load(Ordering::SeqCst)));
    assert!(m.archive().unwrap().is_empty(), "nothing of the user's was archived");
    assert_eq!(search_ids(&m, "indentation"), vec![mine, theirs], "the user's record keeps its rank");
    // The other way round the user's update supersedes the skill's record.
    let dir = tempfile::tempdir().unwrap();
    let m = open_at(dir.path(), &clock);
    let theirs = m.add(by("notes", "The user prefers tabs for indentation", MemoryKind::Preference, 3)).unwrap();
    clock.fetch_add(HOUR, Ordering::SeqCst);
    let mine = m.add(user("The user now prefers spaces for indentation")).unwrap();
    assert_eq!(live_contents(&m), vec!["The user now prefers spaces for indentation".to_string()]);
    assert_eq!(m.archive().unwrap()[0].record.id, theirs);
    assert_ne!(mine, theirs);
}

#[test]
fn an_update_keeps_the_standing_of_the_record_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let m = open_at(dir.path(), &clock);
    let mut old = by("user", "The user's timezone is Europe/Berlin", MemoryKind::Preference, 4);
    old.tags = vec!["profile".into()];
    m.add(old).unwrap();
    clock.fetch_add(HOUR, Ordering::SeqCst);
    let id = m.add(by("user", "The user's timezone is now Asia/Tokyo", MemoryKind::Preference, 2)).unwrap();
    let r = m.get(id).unwrap().unwrap();
    assert_eq!((r.priority, r.tags.clone()), (4, vec!["profile".to_string()]));
    assert!(r.expires_ms.is_none());
}

#[test]
fn search_ranks_the_newer_of_two_live_records_about_the_same_subject_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let m = open_at(dir.path(), &clock);
    // Bulk loads are not compared on the way in: both are live.
    let old = m.add_batch(vec![user("editor vim")]).unwrap()[0];
    clock.fetch_add(HOUR, Ordering::SeqCst);
    let new = m.add_batch(vec![user("the user's editor is now helix")]).unwrap()[0];
    // BM25 alone ranks the shorter, older record first.
    assert_eq!(search_ids(&m, "editor"), vec![new, old], "the newer of the two comes first");
    // Compaction settles it: the older one is archived as outdated.
    let report = m.compact(None).unwrap();
    assert_eq!(json(&report)["superseded"], json(&[[old, new]]));
    assert_eq!(search_ids(&m, "editor"), vec![new]);
}

#[test]
fn a_restored_outdated_record_says_it_is_superseded_and_ranks_after_its_successor() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let m = open_at(dir.path(), &clock);
    let (a, b) = old_then_new(&m, &clock, "The user's editor is vim", "The user's editor is now helix");
    let entry = m.archive().unwrap().into_iter().find(|e| e.record.id == a).unwrap();
    let back = m.restore(entry.id).unwrap();
    assert_eq!(back.id, a);
    assert_eq!(json(&back)["superseded_by"], json(&b), "restored, and still marked as superseded by #{b}");
    assert_eq!(search_ids(&m, "editor"), vec![b, a], "the successor stays first");
    // Once the successor is gone, a restore brings it back as a plain record.
    let m2dir = tempfile::tempdir().unwrap();
    let m2 = open_at(m2dir.path(), &clock);
    let (a, b) = old_then_new(&m2, &clock, "The user's editor is vim", "The user's editor is now helix");
    m2.forget(b).unwrap();
    let entry = m2.archive().unwrap().into_iter().find(|e| e.record.id == a).unwrap();
    let back = m2.restore(entry.id).unwrap();
    assert_eq!(json(&back).get("superseded_by"), None);
}

#[test]
fn the_cli_says_what_an_update_did_and_what_a_restore_brings_back() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| -> String {
        let out = assert_cmd::Command::cargo_bin("skillhost")
            .unwrap()
            .env("SKILLHOST_HOME", home.path())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["memory", "add", "--kind", "preference", "The user's editor is vim"]);
    let out = run(&["memory", "add", "--kind", "preference", "The user's editor is now helix"]);
    assert!(out.contains("stored memory #2; it updates #1"), "{out}");
    let out = run(&["memory", "archive"]);
    assert!(out.contains("outdated, superseded by #2: #1 The user's editor is vim"), "{out}");
    let out = run(&["memory", "archive", "--restore", "1"]);
    assert!(out.contains("was superseded by #2, which is still live"), "{out}");
}

/// A store written by the code before updates supersede (schema 2, made with that build's
/// `skillhost memory add`/`forget`): a merge, a replaced wording, a forgotten record.
#[test]
fn a_store_written_before_updates_opens_unchanged() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("memory");
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/memory-schema2/store.redb");
    std::fs::copy(&fixture, dir.join("store.redb")).unwrap();
    let clock = Arc::new(AtomicU64::new(1_800_000_000_000));
    let m = open_at(&dir, &clock);
    let live = live_contents(&m);
    assert_eq!(
        live,
        vec![
            "The user prefers tabs for indentation",
            "The web project uses npm as its package manager",
            "Baud-rate mismatch between the host and the device causes garbage on the UART",
        ]
    );
    let archive = m.archive().unwrap();
    let reasons: Vec<(&str, Option<u64>)> = archive.iter().map(|e| (e.reason.as_str(), e.merged_into)).collect();
    assert_eq!(reasons, vec![("superseded", Some(3)), ("merged", Some(3)), ("forgotten", None)]);
    assert!(archive.iter().all(|e| json(e).get("superseded_by").is_none()));
    // Export is as before: no new keys on records that never took part in an update.
    let mut out = Vec::new();
    m.export(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        !text.contains("superseded_by") && !text.contains("supersedes") && !text.contains("referenced_ms"),
        "{text}"
    );
    // The rebuilt index finds them, and an update of an old record supersedes it.
    assert_eq!(search_ids(&m, "package manager").len(), 1);
    let new = m.add(user("The user now prefers spaces for indentation")).unwrap();
    assert_eq!(search_ids(&m, "indentation"), vec![new]);
    assert!(m.archive().unwrap().iter().any(|e| e.reason == "outdated" && e.record.id == 1));
    // The archive restores as before.
    let forgotten = m.archive().unwrap().into_iter().find(|e| e.reason == "forgotten").unwrap();
    assert_eq!(m.restore(forgotten.id).unwrap().content, "scratch note to forget");
    drop(m);
    let m = open_at(&dir, &clock);
    assert_eq!(m.live("default").unwrap().len(), 4, "reopened after the new code wrote to it");
}

// ---- generated triples -------------------------------------------------------------

/// One subject with a slot for a value, in both languages: (template, values, restated
/// template, negated template). `{}` is the value.
struct Subject {
    base: &'static str,
    restated: &'static str,
    negated: &'static str,
    values: &'static [&'static str],
}

const SUBJECTS: &[Subject] = &[
    Subject {
        base: "The user's editor is {}",
        restated: "{} is the user's editor",
        negated: "The user's editor is not {}",
        values: &["vim", "emacs", "helix", "nano", "kakoune"],
    },
    Subject {
        base: "The web project uses {} as its package manager",
        restated: "As its package manager the web project uses {}",
        negated: "The web project does not use {} as its package manager",
        values: &["npm", "pnpm", "yarn", "bun"],
    },
    Subject {
        base: "The user lives in {}",
        restated: "{} is where the user lives",
        negated: "The user no longer lives in {}",
        values: &["berlin", "paris", "lisbon", "tokyo", "oslo"],
    },
    Subject {
        base: "The nightly backup keeps {} snapshots",
        restated: "{} snapshots are what the nightly backup keeps",
        negated: "The nightly backup never keeps {} snapshots",
        values: &["three", "5", "seven", "12", "twenty"],
    },
    Subject {
        base: "用户的编辑器是{}",
        restated: "{}是用户的编辑器",
        negated: "用户的编辑器不是{}",
        values: &["vim", "emacs", "helix", "nano"],
    },
    Subject {
        base: "项目用{}管理依赖",
        restated: "项目依赖用{}管理",
        negated: "项目没有用{}管理依赖",
        values: &["npm", "pnpm", "yarn", "bun"],
    },
    // A bare measurement (no unit after the number) is a value, not an identifier.
    Subject {
        base: "The API rate limit is {}",
        restated: "{} is the API rate limit",
        negated: "The API rate limit is not {}",
        values: &["500", "800", "1000", "250", "1200"],
    },
    Subject {
        base: "网关的限流是{}",
        restated: "{}是网关的限流",
        negated: "网关的限流不是{}",
        values: &["500", "800", "1000", "250"],
    },
    // The restatement says it with a synonym (prefers / likes, 偏好 / 喜欢).
    Subject {
        base: "Lin prefers {} for indentation",
        restated: "For indentation Lin likes {}",
        negated: "Lin does not like {} for indentation",
        values: &["tabs", "spaces", "elastic tabstops"],
    },
    Subject {
        base: "林偏好用{}缩进",
        restated: "林缩进喜欢用{}",
        negated: "林不喜欢用{}缩进",
        values: &["tabs", "空格", "制表符"],
    },
    Subject {
        base: "接口超时{}秒",
        restated: "接口的超时是{}秒",
        negated: "接口超时不是{}秒",
        values: &["两", "五", "十", "3", "二十"],
    },
];

/// The same number written another way (digits <-> words), so a restatement may change it.
fn respell(v: &str) -> &str {
    match v {
        "three" => "3",
        "5" => "five",
        "seven" => "7",
        "12" => "twelve",
        "twenty" => "20",
        "两" => "2",
        "五" => "5",
        "十" => "10",
        "3" => "三",
        "二十" => "20",
        other => other,
    }
}

fn fill(template: &str, v: &str) -> String {
    template.replace("{}", v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// For a generated subject: the restatement (other word order, numbers respelled) merges
    /// into the base record; the update (another value) supersedes it; the negation of the
    /// update supersedes that in turn. One live record at every step, the newest.
    #[test]
    fn generated_restatement_update_negation_triples(subject in 0..SUBJECTS.len(), a in 0usize..5, step in 1usize..5) {
        let s = &SUBJECTS[subject];
        let old_value = s.values[a % s.values.len()];
        let new_value = s.values[(a + step) % s.values.len()];
        prop_assume!(old_value != new_value);
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let m = open_at(dir.path(), &clock);
        let base = fill(s.base, old_value);
        let restated = fill(s.restated, respell(old_value));
        let update = fill(s.base, new_value);
        let negation = fill(s.negated, new_value);

        let id = m.add(user(&base)).unwrap();
        clock.fetch_add(HOUR, Ordering::SeqCst);
        prop_assert_eq!(m.add(user(&restated)).unwrap(), id, "{:?} restates {:?}", restated, base);
        clock.fetch_add(HOUR, Ordering::SeqCst);
        let updated = m.add(user(&update)).unwrap();
        prop_assert_ne!(updated, id, "{:?} updates {:?}", update, base);
        prop_assert_eq!(live_contents(&m), vec![update.clone()]);
        clock.fetch_add(HOUR, Ordering::SeqCst);
        let negated = m.add(user(&negation)).unwrap();
        prop_assert_ne!(negated, updated, "{:?} negates {:?}", negation, update);
        prop_assert_eq!(live_contents(&m), vec![negation.clone()]);
        let outdated: Vec<u64> =
            m.archive().unwrap().iter().filter(|e| e.reason == "outdated").map(|e| e.record.id).collect();
        prop_assert_eq!(outdated, vec![id, updated]);
    }
}
