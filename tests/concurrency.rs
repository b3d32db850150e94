//! Many calls in one process, through the runtime directly: CPU time charged to the call
//! that used it, busy guests yielding their worker, admission control in front of the
//! instance pool, and a 32-call mix on a multi-threaded runtime.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost::capabilities::{CapabilitySet, Limits};
use skillhost::memory::{Memory, MemoryConfig, MemoryStore};
use skillhost::sandbox::{CallError, CallGrant, CallOutcome, Invocation, PreparedSkill, Runtime, RuntimeOptions};

struct Rig {
    runtime: Arc<Runtime>,
    prepared: PreparedSkill,
    _tmp: tempfile::TempDir,
}

fn rig(max_concurrent_calls: u32) -> Rig {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(common::probe_wasm()).unwrap();
    let runtime = Runtime::with_options(tmp.path().join("cache"), RuntimeOptions { max_concurrent_calls }).unwrap();
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
    Invocation { session_id: session.into(), step: 1, params: params.to_string() }
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
