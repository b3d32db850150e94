//! Many calls in one process, through the runtime directly: CPU time charged to the call
//! that used it, busy guests yielding their worker, admission control in front of the
//! instance pool, and a 32-call mix on a multi-threaded runtime.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost::capabilities::{Access, Mount};
use skillhost::capabilities::{CapabilitySet, Limits};
use skillhost::memory::{Memory, MemoryConfig, MemoryStore};
use skillhost::sandbox::{
    CallError, CallGrant, CallOutcome, Invocation, MakeAhead, PreparedSkill, Runtime, RuntimeOptions,
};

struct Rig {
    runtime: Arc<Runtime>,
    prepared: PreparedSkill,
    _tmp: tempfile::TempDir,
}

fn rig(max_concurrent_calls: u32) -> Rig {
    rig_with(RuntimeOptions { max_concurrent_calls, ..Default::default() })
}

fn rig_with(options: RuntimeOptions) -> Rig {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(common::probe_wasm()).unwrap();
    let runtime = Runtime::with_options(tmp.path().join("cache"), options).unwrap();
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&wasm))
    };
    let (prepared, _) = runtime.prepare(&wasm, &sha, &|_| {}).unwrap();
    Rig { runtime: Arc::new(runtime), prepared, _tmp: tmp }
}

fn limits(cpu_ms: u64, wall_ms: u64) -> Limits {
    Limits { cpu_time_ms: cpu_ms, wall_time_ms: wall_ms, ..Limits::DEFAULT }
}

fn grant(limits: Limits) -> CallGrant {
    CallGrant {
        skill: "probe".into(),
        skill_hash: "test".into(),
        capabilities: CapabilitySet::default(),
        limits,
        paths: Default::default(),
        store: None,
        namespace: "default".into(),
        secret_values: Default::default(),
    }
}

fn invocation(session: &str, params: Value) -> Invocation {
    Invocation { session_id: session.into(), step: 1, params: params.to_string(), queue_wait: None }
}

type Pending = tokio::task::JoinHandle<(CallOutcome, Duration)>;

/// Start a call on the current runtime; it resolves to its outcome and when it ended
/// (measured from `t0`).
fn spawn(rig: &Rig, grant: CallGrant, inv: Invocation, t0: Instant) -> Pending {
    let (runtime, prepared) = (rig.runtime.clone(), rig.prepared.clone());
    tokio::spawn(async move {
        let out = runtime.call(&prepared, grant, inv).await;
        (out, t0.elapsed())
    })
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn cpu_ms(out: &CallOutcome) -> f64 {
    out.cpu_time_us as f64 / 1000.0
}

/// A busy call stops at its own CPU limit: not before it, and within 20% above it.
fn assert_stopped_at_own_limit(out: &CallOutcome, limit_ms: u64) {
    assert!(
        matches!(&out.result, Err(CallError::CpuLimit(m)) if m.contains(&format!("{limit_ms} ms"))),
        "limit {limit_ms}: {:?}",
        out.result
    );
    let used = cpu_ms(out);
    assert!(used >= limit_ms as f64, "stopped early: {used:.1} ms of CPU for a limit of {limit_ms} ms");
    assert!(used <= limit_ms as f64 * 1.2, "stopped late: {used:.1} ms of CPU for a limit of {limit_ms} ms");
}

fn cpu_is_charged_to_the_call_that_used_it(rt: tokio::runtime::Runtime) {
    let rig = rig(16);
    rt.block_on(async {
        let t0 = Instant::now();
        let busy: Vec<(u64, Pending)> = [150u64, 300, 450]
            .into_iter()
            .map(|limit| {
                (limit, spawn(&rig, grant(limits(limit, 60_000)), invocation("busy", json!({"mode": "loop"})), t0))
            })
            .collect();
        // Sleepers with a CPU limit far below what the busy calls burn on the same threads.
        let sleepers: Vec<Pending> = (0..3)
            .map(|_| spawn(&rig, grant(limits(50, 60_000)), invocation("s", json!({"mode": "sleep", "n": 800})), t0))
            .collect();
        for (limit, call) in busy {
            let (out, _) = call.await.unwrap();
            assert_stopped_at_own_limit(&out, limit);
        }
        for call in sleepers {
            let (out, _) = call.await.unwrap();
            assert_eq!(out.result.as_ref().map(|o| o.output.as_str()), Ok("slept"), "a sleeper was stopped");
            assert!(cpu_ms(&out) < 50.0, "a sleeper was charged {:.1} ms", cpu_ms(&out));
        }
    });
}

#[test]
fn cpu_is_charged_per_call_on_a_current_thread_runtime() {
    cpu_is_charged_to_the_call_that_used_it(current_thread());
}

#[test]
fn cpu_is_charged_per_call_on_a_multi_threaded_runtime() {
    cpu_is_charged_to_the_call_that_used_it(multi_thread());
}

#[test]
fn a_busy_guest_lets_other_calls_on_its_thread_run() {
    let rig = rig(8);
    current_thread().block_on(async {
        let t0 = Instant::now();
        let busy = spawn(&rig, grant(limits(1_500, 60_000)), invocation("b", json!({"mode": "loop"})), t0);
        // Give the busy guest the thread first.
        tokio::task::yield_now().await;
        let trivial = spawn(&rig, grant(limits(1_000, 10_000)), invocation("t", json!({"mode": "noop"})), t0);
        let (trivial_out, trivial_done) = trivial.await.unwrap();
        assert_eq!(trivial_out.result.unwrap().output, "ok");
        let (busy_out, busy_done) = busy.await.unwrap();
        assert_stopped_at_own_limit(&busy_out, 1_500);
        assert!(
            trivial_done < Duration::from_millis(500) && trivial_done * 3 < busy_done,
            "the trivial call ended at {trivial_done:?}, the busy one at {busy_done:?}"
        );
    });
}

#[test]
fn calls_beyond_the_pool_wait_for_a_slot() {
    let rig = rig(2);
    multi_thread().block_on(async {
        let t0 = Instant::now();
        let calls: Vec<Pending> = (0..6)
            .map(|_| spawn(&rig, grant(limits(1_000, 20_000)), invocation("q", json!({"mode": "sleep", "n": 200})), t0))
            .collect();
        for call in calls {
            let (out, _) = call.await.unwrap();
            assert_eq!(out.result.unwrap().output, "slept");
        }
        // Two at a time: three rounds of 200 ms.
        assert!(t0.elapsed() >= Duration::from_millis(580), "ran more than 2 at once: {:?}", t0.elapsed());
    });
}

#[test]
fn a_call_that_finds_no_slot_in_time_fails_host_busy() {
    let rig = rig(2);
    multi_thread().block_on(async {
        let t0 = Instant::now();
        let long: Vec<Pending> = (0..2)
            .map(|_| {
                spawn(&rig, grant(limits(1_000, 20_000)), invocation("l", json!({"mode": "sleep", "n": 2_000})), t0)
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let asked = Instant::now();
        let (out, _) =
            spawn(&rig, grant(limits(1_000, 300)), invocation("x", json!({"mode": "noop"})), t0).await.unwrap();
        let waited = asked.elapsed();
        let Err(error @ CallError::Busy { running: 2, .. }) = &out.result else { panic!("{:?}", out.result) };
        assert!(error.to_string().contains("host busy: 2 calls running; retry later"), "{error}");
        assert!(waited >= Duration::from_millis(290) && waited < Duration::from_millis(1_500), "waited {waited:?}");
        for call in long {
            assert_eq!(call.await.unwrap().0.result.unwrap().output, "slept");
        }
        // Slots are given back: the next call runs.
        let (out, _) =
            spawn(&rig, grant(limits(1_000, 5_000)), invocation("y", json!({"mode": "noop"})), t0).await.unwrap();
        assert_eq!(out.result.unwrap().output, "ok");
    });
}

#[test]
fn thirty_two_mixed_calls_on_a_multi_threaded_runtime() {
    let rig = rig(64);
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn MemoryStore> =
        Arc::new(Memory::open(&tmp.path().join("memory"), MemoryConfig::default()).unwrap());
    multi_thread().block_on(async {
        let t0 = Instant::now();
        let mut calls = Vec::new();
        for i in 0..32u32 {
            let session = format!("session-{i}");
            let (mut g, params) = match i % 5 {
                0 => (grant(limits(1_000, 30_000)), json!({"mode": "echo", "arg": format!("call-{i}")})),
                1 => (grant(limits(50, 30_000)), json!({"mode": "sleep", "n": 300})),
                2 => (grant(limits(120, 30_000)), json!({"mode": "loop"})),
                3 => {
                    let g = CallGrant {
                        limits: Limits { memory_mb: 24, ..limits(2_000, 30_000) },
                        ..grant(Limits::DEFAULT)
                    };
                    (g, json!({"mode": "alloc", "n": 12}))
                }
                _ => (grant(limits(2_000, 30_000)), json!({"mode": "session-set", "arg": format!("value-{i}")})),
            };
            if i % 5 == 4 {
                g.capabilities.session = true;
                g.store = Some(store.clone());
            }
            let mut inv = invocation(&session, params);
            inv.step = i;
            calls.push((i, spawn(&rig, g, inv, t0)));
        }
        for (i, call) in calls {
            let (out, _) = call.await.unwrap();
            match i % 5 {
                0 => assert_eq!(out.result.unwrap().output, format!("session-{i}|{i}|call-{i}")),
                1 => {
                    assert_eq!(out.result.as_ref().unwrap().output, "slept", "call {i}");
                    assert!(cpu_ms(&out) < 50.0, "call {i} charged {:.1} ms", cpu_ms(&out));
                }
                2 => assert_stopped_at_own_limit(&out, 120),
                3 => {
                    let r = out.result.as_ref().unwrap();
                    assert_eq!(r.output, "allocated 12 MiB", "call {i}");
                    assert!(out.memory_peak_bytes >= 12 << 20 && out.memory_peak_bytes <= 24 << 20, "call {i}");
                }
                _ => {
                    assert_eq!(out.result.unwrap().output, "stored", "call {i}");
                    let kept = store.session_get(&format!("session-{i}"), "probe").unwrap();
                    assert_eq!(kept.as_deref(), Some(format!("value-{i}").as_str()));
                }
            }
        }
    });
}

#[test]
fn a_call_over_its_memory_limit_does_not_disturb_the_others() {
    let rig = rig(8);
    multi_thread().block_on(async {
        let t0 = Instant::now();
        let small = Limits { memory_mb: 8, ..limits(2_000, 30_000) };
        let over = spawn(&rig, grant(small), invocation("m", json!({"mode": "alloc", "n": 16})), t0);
        let fine = spawn(&rig, grant(small), invocation("m", json!({"mode": "alloc", "n": 2})), t0);
        let (over, _) = over.await.unwrap();
        assert!(matches!(&over.result, Err(CallError::MemoryLimit(m)) if m.contains("8 MiB")), "{:?}", over.result);
        assert_eq!(fine.await.unwrap().0.result.unwrap().output, "allocated 2 MiB");
    });
}

/// A rig whose every skill gets an instance made ahead from its second call on.
fn rig_making_ahead() -> Rig {
    rig_with(RuntimeOptions { max_concurrent_calls: 8, make_ahead: MakeAhead::Always, ..Default::default() })
}

/// Wait (at most 10 s) until `prepared` has an instance made ahead for its next call.
fn wait_made_ahead(prepared: &PreparedSkill) {
    let until = Instant::now() + Duration::from_secs(10);
    while !prepared.has_instance_made_ahead() {
        assert!(Instant::now() < until, "no instance was made ahead within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn reading(dir: &std::path::Path) -> CallGrant {
    let mut g = grant(limits(2_000, 30_000));
    g.capabilities.filesystem =
        vec![Mount { host: dir.display().to_string(), guest: "/data".into(), access: Access::Read }];
    g
}

#[test]
fn an_instance_made_ahead_is_fresh_and_gets_only_its_own_calls_grant() {
    let rig = rig_making_ahead();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("canary.txt"), "canary-7f3a").unwrap();
    let read = || invocation("ahead", json!({"mode": "read-file", "arg": "/data/canary.txt"}));
    let count = || invocation("ahead", json!({"mode": "count"}));
    multi_thread().block_on(async {
        let call = |g: CallGrant, inv: Invocation| {
            let (runtime, prepared) = (rig.runtime.clone(), rig.prepared.clone());
            async move { runtime.call(&prepared, g, inv).await }
        };
        // Two inline calls; the second leaves an instance made ahead.
        for _ in 0..2 {
            assert_eq!(
                call(grant(limits(2_000, 30_000)), count()).await.result.unwrap().output,
                "call 1 of this instance"
            );
        }
        wait_made_ahead(&rig.prepared);
        // The made-ahead instance serves one call, fresh, with that call's invocation.
        let out = call(grant(limits(2_000, 30_000)), count()).await;
        assert_eq!(out.result.unwrap().output, "call 1 of this instance");
        // A grant given to one call is there for it and gone for the next one, both made ahead.
        wait_made_ahead(&rig.prepared);
        assert_eq!(call(reading(data.path()), read()).await.result.unwrap().output, "canary-7f3a");
        wait_made_ahead(&rig.prepared);
        let refused = call(grant(limits(2_000, 30_000)), read()).await;
        let text = format!("{:?}", refused.result);
        assert!(refused.result.is_err() && !text.contains("canary-7f3a"), "{text}");
        wait_made_ahead(&rig.prepared);
        let echo = call(
            grant(limits(2_000, 30_000)),
            Invocation {
                session_id: "s-ahead".into(),
                step: 7,
                params: json!({"mode": "echo", "arg": "mine"}).to_string(),
                queue_wait: None,
            },
        )
        .await;
        assert_eq!(echo.result.unwrap().output, "s-ahead|7|mine");
    });
}

#[test]
fn concurrent_calls_with_instances_made_ahead_each_see_their_own_grant() {
    let rig = rig_making_ahead();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("canary.txt"), "canary-91c2").unwrap();
    multi_thread().block_on(async {
        let t0 = Instant::now();
        for round in 0..4 {
            let pending: Vec<_> = (0..8)
                .map(|i| {
                    let g = if i % 2 == 0 { reading(data.path()) } else { grant(limits(2_000, 30_000)) };
                    let mode = if i % 4 < 2 { "read-file" } else { "count" };
                    let inv = invocation("c", json!({"mode": mode, "arg": "/data/canary.txt"}));
                    (i, mode, spawn(&rig, g, inv, t0))
                })
                .collect();
            for (i, mode, p) in pending {
                let (out, _) = p.await.unwrap();
                match (mode, i % 2 == 0) {
                    ("count", _) => assert_eq!(out.result.unwrap().output, "call 1 of this instance", "round {round}"),
                    (_, true) => assert_eq!(out.result.unwrap().output, "canary-91c2", "round {round}"),
                    (_, false) => assert!(out.result.is_err(), "round {round}: call {i} read without a grant"),
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[test]
fn a_made_ahead_instance_over_a_calls_memory_limit_fails_that_call_like_an_inline_one() {
    let rig = rig_making_ahead();
    // No memory at all: whatever the probe had at instantiation is over it.
    let tiny = Limits { memory_mb: 0, ..limits(2_000, 30_000) };
    let inline =
        rig_with(RuntimeOptions { max_concurrent_calls: 8, make_ahead: MakeAhead::Never, ..Default::default() });
    multi_thread().block_on(async {
        for _ in 0..2 {
            rig.runtime
                .call(&rig.prepared, grant(limits(2_000, 30_000)), invocation("m", json!({"mode": "noop"})))
                .await;
        }
        wait_made_ahead(&rig.prepared);
        let ahead = rig.runtime.call(&rig.prepared, grant(tiny), invocation("m", json!({"mode": "noop"}))).await;
        let never = inline.runtime.call(&inline.prepared, grant(tiny), invocation("m", json!({"mode": "noop"}))).await;
        assert!(never.result.is_err(), "instantiating the probe should exceed a limit of 0 MiB: {:?}", never.result);
        assert_eq!(format!("{:?}", ahead.result), format!("{:?}", never.result));
    });
}

/// By default a skill fast to instantiate (the probe) gets its next instance made ahead
/// from its second call on, and that instance serves the next call fresh. (Fails with the
/// old default, slow skills only. Which path made it, a worker or the blocking pool, is
/// decided by timing; `sandbox/ready.rs`'s unit tests pin that decision.)
#[test]
fn a_fast_skill_is_made_ahead_by_default_and_each_call_still_gets_a_fresh_instance() {
    let rig = rig(8);
    let count = || invocation("c", json!({"mode": "count"}));
    multi_thread().block_on(async {
        for round in 0..5 {
            let out = spawn(&rig, grant(limits(2_000, 30_000)), count(), Instant::now()).await.unwrap().0;
            assert_eq!(out.result.unwrap().output, "call 1 of this instance", "round {round}");
            if round >= 1 {
                wait_made_ahead(&rig.prepared);
                assert_eq!(rig.runtime.stats().made_ahead, 1);
            }
        }
    });
}

/// Calls on the other CPUs get a copy of the component of their own (sandbox/lanes.rs),
/// made in the background; every call through a copy is a fresh instance with its own
/// grant and the right answer, like a call through the first.
#[test]
fn calls_on_every_cpu_get_their_own_copy_and_the_same_answers() {
    let rig = rig(64);
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("canary.txt"), "canary-lanes").unwrap();
    multi_thread().block_on(async {
        let until = Instant::now() + Duration::from_secs(20);
        let mut rounds = 0;
        loop {
            let t0 = Instant::now();
            let pending: Vec<_> = (0..16u32)
                .map(|i| {
                    let (g, params) = match i % 3 {
                        0 => (grant(limits(2_000, 30_000)), json!({"mode": "echo", "arg": format!("c{i}")})),
                        1 => (grant(limits(2_000, 30_000)), json!({"mode": "count"})),
                        _ => (reading(data.path()), json!({"mode": "read-file", "arg": "/data/canary.txt"})),
                    };
                    (i, spawn(&rig, g, invocation(&format!("s{i}"), params), t0))
                })
                .collect();
            for (i, p) in pending {
                let out = p.await.unwrap().0.result.unwrap().output;
                let want = match i % 3 {
                    0 => format!("s{i}|1|c{i}"),
                    1 => "call 1 of this instance".to_string(),
                    _ => "canary-lanes".to_string(),
                };
                assert_eq!(out, want, "round {rounds}, call {i}");
            }
            rounds += 1;
            // Keep calling a few rounds after the copies exist, so that calls run through them.
            if cpus == 1 || (rig.prepared.lane_copies() >= 1 && rounds >= 8) {
                break;
            }
            assert!(Instant::now() < until, "no copy for another CPU after {rounds} rounds of 16 calls on {cpus} CPUs");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if cpus == 1 {
            assert_eq!(rig.prepared.lane_copies(), 0, "one CPU, one copy");
        }
    });
}
