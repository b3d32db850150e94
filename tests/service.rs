//! The library as a long-lived service: one `Arc<Library>` serving many calls at once on a
//! multi-threaded runtime, lazily opened state opened once, and state other processes
//! change (installed skills, the policy) picked up on the next call without re-reading
//! what did not change.

mod common;

use std::sync::{Arc, Barrier};

use common::{Env, output, run};
use serde_json::{Value, json};
use skillhost::library::{Library, RunOptions};
use skillhost::policy::{Grant, Policy};

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap()
}

#[test]
fn concurrent_runs_through_one_arc_library_each_get_their_own_result() {
    let env = Env::new();
    let installer = env.library();
    env.install_granted(&installer, "plain", "");
    env.install_granted(&installer, "keeper", "capabilities:\n  memory: write\n  session: true\n");
    drop(installer);
    // A fresh library: the first calls race for the runtime, the store, the policy and each skill.
    let lib = Arc::new(env.library());
    let rt = multi_thread();
    let calls: Vec<(String, Value, String)> = (0..24)
        .map(|i| match i % 4 {
            0 => ("plain".into(), json!({"mode": "echo", "arg": format!("call-{i}")}), format!("s{i}|{i}|call-{i}")),
            1 => ("plain".into(), json!({"mode": "sleep", "n": 50}), "slept".into()),
            2 => ("keeper".into(), json!({"mode": "session-set", "arg": format!("v{i}")}), "stored".into()),
            _ => ("keeper".into(), json!({"mode": "remember", "arg": format!("fact {i}"), "n": 1}), "proposed".into()),
        })
        .collect();
    let reports = rt.block_on(async {
        let tasks: Vec<_> = calls
            .iter()
            .enumerate()
            .map(|(i, (skill, params, _))| {
                let (lib, skill, params) = (lib.clone(), skill.clone(), params.clone());
                tokio::spawn(async move {
                    let opts = RunOptions { session: format!("s{i}"), step: i as u32, ..Default::default() };
                    lib.run(&skill, params, &opts).await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for ((skill, _, expected), report) in calls.iter().zip(&reports) {
        let report = report.as_ref().unwrap_or_else(|e| panic!("{skill}: {e:#}"));
        assert_eq!(output(report), expected, "{skill}");
        assert!(report.outcome.denials.is_empty(), "{skill}: {:?}", report.outcome.denials);
    }
    for (i, r) in reports.iter().enumerate().filter(|(i, _)| i % 4 == 3) {
        assert_eq!(r.as_ref().unwrap().memories.stored.len(), 1, "call {i} stored its memory");
    }
    let stats = lib.stats();
    assert_eq!(stats.runtime_inits, 1, "{stats:?}");
    assert_eq!(stats.memory_opens, 1, "{stats:?}");
    assert_eq!(stats.skill_loads, 2, "each version is loaded once: {stats:?}");
    assert_eq!(stats.policy_loads, 1, "an unchanged policy is parsed once: {stats:?}");
    assert_eq!(lib.audit_log().verify().unwrap().entries, 24, "every call audited");
    // Session values stayed per session.
    let r = run(&lib, "keeper", json!({"mode": "session-get"}));
    assert_eq!(output(&r), "", "a new session sees nothing of the others");
    let r = skillhost_run(&lib, "keeper", json!({"mode": "session-get"}), "s2");
    assert_eq!(output(&r), "v2");
}

fn skillhost_run(lib: &Library, skill: &str, params: Value, session: &str) -> skillhost::library::RunReport {
    common::run_with(lib, skill, params, &RunOptions { session: session.into(), ..Default::default() })
}

#[test]
fn first_concurrent_calls_open_the_store_and_the_runtime_once() {
    let env = Env::new();
    let lib = Arc::new(env.library());
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (lib, barrier) = (lib.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let memory = lib.memory().map_err(|e| format!("{e:#}"))?;
                let runtime = lib.runtime().map_err(|e| format!("{e:#}"))? as *const _ as usize;
                Ok::<_, String>((memory, runtime))
            })
        })
        .collect();
    let opened: Vec<_> = threads.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
    for (memory, runtime) in &opened {
        assert!(Arc::ptr_eq(memory, &opened[0].0), "one store for every caller");
        assert_eq!(*runtime, opened[0].1, "one runtime for every caller");
    }
    let stats = lib.stats();
    assert_eq!((stats.memory_opens, stats.runtime_inits), (1, 1), "{stats:?}");
}

#[test]
fn a_reinstall_by_another_process_is_run_on_the_next_call() {
    let env = Env::new();
    let server = env.library();
    let v1 = env.probe_as("tool", "");
    server.install(&v1, &|_| Ok(None)).unwrap();
    let first = run(&server, "tool", json!({"mode": "noop"}));
    assert_eq!(first.version.as_deref(), Some("0.1.0"));
    run(&server, "tool", json!({"mode": "noop"}));
    assert_eq!(server.stats().skill_loads, 1, "a warm call does not reload");

    // Another library on the same home (another process, as far as files go) upgrades it.
    let other = env.library();
    let v2 = env.probe_as("tool", "");
    let text = std::fs::read_to_string(v2.join("SKILL.md")).unwrap().replace("version: 0.1.0", "version: 0.2.0");
    std::fs::write(v2.join("SKILL.md"), text).unwrap();
    let report = other.install(&v2, &|_| Ok(None)).unwrap();
    assert_ne!(report.content_hash, first.content_hash);

    let after = run(&server, "tool", json!({"mode": "noop"}));
    assert_eq!(after.version.as_deref(), Some("0.2.0"), "the new bytes run");
    assert_eq!(after.content_hash, report.content_hash);
    assert_eq!(server.stats().skill_loads, 2);

    // And a remove by the other one is seen too.
    other.remove("tool", false).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(server.run("tool", json!({"mode": "noop"}), &RunOptions::default())).unwrap_err();
    assert!(err.to_string().contains("`tool` is not installed"), "{err}");
}

#[test]
fn the_policy_is_reparsed_only_when_it_changes_and_a_revoke_applies_to_the_next_call() {
    let env = Env::new();
    let server = env.library();
    env.install_granted(&server, "keeper", "capabilities:\n  session: true\n");
    let before = server.stats().policy_loads;
    for _ in 0..5 {
        assert_eq!(output(&run(&server, "keeper", json!({"mode": "session-set", "arg": "x"}))), "stored");
    }
    assert_eq!(server.stats().policy_loads, before, "five calls, no parse: install already read this policy");

    // `skillhost policy revoke keeper session` from another process.
    Policy::update(&env.home.path().join("policy.toml"), |p| p.revoke("keeper", "session")).unwrap();
    let r = run(&server, "keeper", json!({"mode": "session-set", "arg": "x"}));
    assert!(r.outcome.result.is_err(), "revoked before this call: {:?}", r.outcome.result);
    assert_eq!(r.not_granted, vec!["session".to_string()]);
    assert!(r.outcome.denials.iter().any(|d| d.capability == "session"), "it tried: {:?}", r.outcome.denials);
    assert_eq!(server.stats().policy_loads, before + 1, "one parse for the change");

    // A grant from elsewhere applies just as fast.
    Policy::update(&env.home.path().join("policy.toml"), |p| {
        p.apply(
            "keeper",
            &Grant::capabilities(skillhost::capabilities::CapabilitySet { session: true, ..Default::default() }),
        );
        Ok(())
    })
    .unwrap();
    assert_eq!(output(&run(&server, "keeper", json!({"mode": "session-set", "arg": "x"}))), "stored");

    // A policy broken on disk is an error on every call until fixed, never the stale copy.
    std::fs::write(env.home.path().join("policy.toml"), "[skills.keeper\n").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(server.run("keeper", json!({"mode": "noop"}), &RunOptions::default())).unwrap_err();
    assert!(format!("{err:#}").contains("policy.toml is invalid"), "{err:#}");
}

#[test]
fn declared_but_unused_rights_are_information_not_denials() {
    let env = Env::new();
    let lib = env.library();
    env.install_ungranted(&lib, "asker", "capabilities:\n  env: [PATH]\n  session: true\n");
    let r = run(&lib, "asker", json!({"mode": "noop"}));
    assert_eq!(output(&r), "ok");
    assert!(r.outcome.denials.is_empty(), "the skill tried nothing: {:?}", r.outcome.denials);
    assert_eq!(r.not_granted, vec!["env PATH".to_string(), "session".to_string()]);
    let line = lib.audit_log().read().unwrap().entries.pop().unwrap();
    assert_eq!(line["denials"], json!([]));
    assert_eq!(line["not_granted"], json!(["env PATH", "session"]));

    // Attempted use is still a denial.
    let r = run(&lib, "asker", json!({"mode": "session-set", "arg": "v"}));
    assert!(r.outcome.denials.iter().any(|d| d.capability == "session"), "{:?}", r.outcome.denials);
}

#[test]
fn session_ids_carry_128_random_bits() {
    let ids: std::collections::HashSet<String> = (0..2000).map(|_| skillhost::library::new_session_id()).collect();
    assert_eq!(ids.len(), 2000);
    for id in ids.iter().take(10) {
        let hex = id.strip_prefix("s-").unwrap();
        assert_eq!(hex.len(), 32, "{id}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
}
