//! `just bench`: the sandbox's call cost against process-per-call baselines measured in the
//! same run (the machine is shared and noisy, so ratios matter more than absolutes).
//!
//! Figures: compile at install; cold first call from the cache (deserialize + link +
//! instantiate + execute); warm call p50/p99 (instantiate + execute of a prepared
//! component) and the full `Library::run` path (policy, validation, audit line); trivial
//! calls per second with 1, 2, 8 and 32 concurrent callers in one process (a
//! multi-threaded runtime with one worker per core), as ratios to one caller; baselines:
//! a minimal native binary and a python3 script doing the same trivial work, fork + exec
//! per call.
//!
//! The floor beside the warm call: wasmtime alone ([`BareProbe`]) instantiating the same
//! component on the runtime's own engine and dropping its store, with and without running
//! `execute`, timed in turn with the warm call (so the warm call is not comparable with
//! figures from before 2026-12-07, when it ran alone); and its 8-caller scaling, in rounds
//! paired with ours, from one shared component (the runtime instantiates from a copy per CPU,
//! see sandbox/lanes.rs). What the warm call costs above it is the runtime's own work.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use skillhost::capabilities::{CapabilitySet, Limits};
use skillhost::library::{Library, RunOptions};
use skillhost::memory::{Memory, MemoryConfig};
use skillhost::sandbox::{CallGrant, Invocation, MakeAhead, Runtime, RuntimeOptions};

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[idx]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn time_n(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let probe = repo.join("target/skills/probe");
    let wasm = std::fs::read(probe.join("skill.wasm")).expect("run `just build-skills` first");
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    // Compile at install.
    // Every call instantiates inline (no instance made ahead of a caller that calls alone):
    // the warm call measured here is instantiate + execute.
    let inline = RuntimeOptions { make_ahead: MakeAhead::WhenSlow, ..Default::default() };
    let runtime = Runtime::with_options(tmp.path().join("bench-cache"), inline).unwrap();
    let mut compiles = time_n(3, || {
        // An install of bytes the cache already holds reuses the entry: empty it, so that
        // each round compiles.
        for e in std::fs::read_dir(tmp.path().join("bench-cache")).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "cwasm") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        let (_, outcome) = runtime.compile(&wasm, &|_| {}).unwrap();
        assert!(matches!(outcome, skillhost::sandbox::CompileOutcome::Compiled { .. }), "{outcome:?}");
    });
    let compile = percentile(&mut compiles, 0.5);

    // Cold first call from the cache: what a fresh CLI process does after the engine exists.
    let sha = hex_sha(&wasm);
    let store: Arc<dyn skillhost::memory::MemoryStore> =
        Arc::new(Memory::open(&tmp.path().join("memory"), MemoryConfig::default()).unwrap());
    let grant = CallGrant {
        skill: "probe".into(),
        skill_hash: sha.clone(),
        capabilities: CapabilitySet::default(),
        limits: Limits::DEFAULT,
        paths: Default::default(),
        store: Some(store.clone()),
        namespace: "bench".into(),
        secret_values: Default::default(),
    };
    let inv = Invocation { session_id: "bench".into(), step: 1, params: r#"{"mode":"noop"}"#.into(), queue_wait: None };
    let mut colds = time_n(20, || {
        let (prepared, outcome) = runtime.prepare(&wasm, &sha, &|_| {}).unwrap();
        assert!(matches!(outcome, skillhost::sandbox::CompileOutcome::Hit { .. }));
        let out = rt.block_on(runtime.call(&prepared, grant.clone(), inv.clone()));
        assert_eq!(out.result.unwrap().output, "ok");
    });
    let cold = percentile(&mut colds, 0.5);
    let mut engines = time_n(5, || {
        drop(Runtime::new(tmp.path().join("bench-cache")).unwrap());
    });
    let engine_new = percentile(&mut engines, 0.5);

    // Warm: instantiate + execute of a prepared component.
    let (prepared, _) = runtime.prepare(&wasm, &sha, &|_| {}).unwrap();
    for _ in 0..200 {
        rt.block_on(runtime.call(&prepared, grant.clone(), inv.clone()));
    }
    // Beside it, the same on wasmtime alone: one of each in turn, so that the three see the
    // same state of the machine (a profile records only ours).
    let profile = std::env::var("SKILLHOST_BENCH_PROFILE").ok();
    let bare = profile.is_none().then(|| Arc::new(BareProbe::new(runtime.engine(), &wasm)));
    let (mut warm, mut bare_instantiate, mut bare_call) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..5200 {
        let warm_call = time_n(1, || {
            let out = rt.block_on(runtime.call(&prepared, grant.clone(), inv.clone()));
            debug_assert!(out.result.is_ok());
        });
        let Some(bare) = &bare else {
            warm.extend(warm_call);
            continue;
        };
        let instantiate = time_n(1, || rt.block_on(bare.call(false)));
        let call = time_n(1, || rt.block_on(bare.call(true)));
        // The first 200 rounds warm wasmtime alone up.
        if round >= 200 {
            warm.extend(warm_call);
            bare_instantiate.extend(instantiate);
            bare_call.extend(call);
        }
    }
    if profile.as_deref() == Some("warm") {
        // Only warm calls, for `perf record`.
        for _ in 0..50_000 {
            rt.block_on(runtime.call(&prepared, grant.clone(), inv.clone()));
        }
        return;
    }
    let warm_p50 = percentile(&mut warm, 0.5);
    let warm_p99 = percentile(&mut warm, 0.99);

    // Concurrent callers in one process: each runs its share of the calls back to back.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let mt = tokio::runtime::Builder::new_multi_thread().worker_threads(cores).enable_all().build().unwrap();
    let runtime = Arc::new(runtime);
    const CONCURRENT_CALLS: usize = 8_000;
    let mut throughput = Vec::new();
    // `SKILLHOST_BENCH_PROFILE=concurrent`: only many rounds of 8 callers, for `perf record`.
    // `concurrent1`: the same with one caller, the profile to compare it with.
    let rounds: &[usize] = match profile.as_deref() {
        Some("concurrent") => &[8; 10],
        Some("concurrent1") => &[1; 10],
        _ => &[1, 2, 8, 32],
    };
    // `callers` callers, each running its share of the calls back to back, on our runtime or
    // (`alone`) on wasmtime alone: calls/s and process CPU per call.
    let run_calls = |callers: usize, alone: bool| -> (f64, f64) {
        let per_caller = CONCURRENT_CALLS / callers;
        let cpu_before = process_cpu();
        let started = Instant::now();
        mt.block_on(async {
            let tasks: Vec<_> = (0..callers)
                .map(|_| {
                    let (runtime, prepared, grant, inv, bare) =
                        (runtime.clone(), prepared.clone(), grant.clone(), inv.clone(), bare.clone());
                    tokio::spawn(async move {
                        for _ in 0..per_caller {
                            if let (true, Some(bare)) = (alone, &bare) {
                                bare.call(true).await;
                            } else {
                                let out = runtime.call(&prepared, grant.clone(), inv.clone()).await;
                                assert!(out.result.is_ok(), "{:?}", out.result);
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let calls = (per_caller * callers) as f64;
        (calls / started.elapsed().as_secs_f64(), (process_cpu() - cpu_before).as_secs_f64() * 1e6 / calls)
    };
    for &callers in rounds {
        let (per_sec, cpu_per_call) = run_calls(callers, false);
        throughput.push((callers, per_sec, cpu_per_call));
    }
    // How far 8 callers scale over 1, ours and wasmtime alone: five rounds of the four, in
    // turn, so that each ratio compares figures taken moments apart (one round is ~0.2 s, and
    // the machine's speed drifts more than that between rounds).
    let rate = |callers: usize, alone: bool| run_calls(callers, alone).0;
    let (mut ours_at8, mut alone_at8) = (Vec::new(), Vec::new());
    if profile.is_none() {
        for _ in 0..5 {
            ours_at8.push(rate(8, false) / rate(1, false));
            alone_at8.push(rate(8, true) / rate(1, true));
        }
    }
    drop(mt);
    drop(runtime);
    if profile.is_some() {
        for (callers, per_sec, cpu) in &throughput {
            println!("{callers} caller(s): {per_sec:.0} calls/s, {cpu:.2} us CPU per call");
        }
        return;
    }

    // Full library path: policy load, params validation, call, audit append.
    let home = tmp.path().join("home");
    let lib = Library::open(&home, Some(tmp.path()), None).unwrap();
    lib.install(&probe, &|_| Ok(None)).unwrap();
    let opts = RunOptions { session: "bench".into(), ..Default::default() };
    for _ in 0..100 {
        rt.block_on(lib.run("probe", json!({"mode": "noop"}), &opts)).unwrap();
    }
    let mut full = time_n(2000, || {
        rt.block_on(lib.run("probe", json!({"mode": "noop"}), &opts)).unwrap();
    });
    let full_p50 = percentile(&mut full, 0.5);

    // Baselines: the same trivial work as a process per call.
    let native = tmp.path().join("noop-native");
    let c_src = tmp.path().join("noop.c");
    std::fs::write(&c_src, "#include <stdio.h>\nint main(int c, char **v) { (void)v; printf(\"{\\\"output\\\":\\\"ok\\\",\\\"args\\\":%d}\\n\", c); return 0; }\n").unwrap();
    let built =
        Command::new("cc").args(["-O2", "-o"]).arg(&native).arg(&c_src).status().map(|s| s.success()).unwrap_or(false);
    let mut native_p50 = None;
    if built {
        let mut s = time_n(300, || {
            let out = Command::new(&native).arg(r#"{"mode":"noop"}"#).output().unwrap();
            assert!(out.status.success());
        });
        native_p50 = Some(percentile(&mut s, 0.5));
    }
    let script = "import json,sys\np=json.loads(sys.argv[1])\nprint(json.dumps({'output':'ok','mode':p['mode']}))";
    let mut py = time_n(40, || {
        let out = Command::new("python3").args(["-c", script, r#"{"mode":"noop"}"#]).output().expect("python3 missing");
        assert!(out.status.success());
    });
    let py_p50 = percentile(&mut py, 0.5);

    println!("skillhost runtime benchmark (probe component {} KiB)", wasm.len() / 1024);
    println!("  compile at install (p50 of 3)           {:>10.1} ms", compile.as_secs_f64() * 1e3);
    println!("  engine creation (pooling, p50 of 5)     {:>10.1} us", us(engine_new));
    println!("  cold first call from cache (p50 of 20)  {:>10.1} us", us(cold));
    println!("  warm call p50 (instantiate+execute)     {:>10.1} us", us(warm_p50));
    println!("  warm call p99                           {:>10.1} us", us(warm_p99));
    println!("  Library::run p50 (policy+validate+audit){:>10.1} us", us(full_p50));
    let (bare_instantiate_p50, bare_call_p50) =
        (percentile(&mut bare_instantiate, 0.5), percentile(&mut bare_call, 0.5));
    println!("  floor, wasmtime alone on the same engine (no capability state, metering, limits):");
    println!("    instantiate + drop p50                {:>10.1} us", us(bare_instantiate_p50));
    println!(
        "    instantiate + execute + drop p50      {:>10.1} us   (dynamic call; the warm call is {:.2}x this)",
        us(bare_call_p50),
        us(warm_p50) / us(bare_call_p50)
    );
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let range = |v: &[f64]| format!("{:.2}-{:.2}", v[0], v[v.len() - 1]);
    let (ours8, alone8) = (median(&mut ours_at8), median(&mut alone_at8));
    println!(
        "  8 callers / 1 caller, median of 5 paired rounds: {ours8:.2}x ({}); wasmtime alone, one shared component, {alone8:.2}x ({})",
        range(&ours_at8),
        range(&alone_at8)
    );
    let (single, single_cpu) = (throughput[0].1, throughput[0].2);
    for (callers, per_sec, cpu) in &throughput {
        println!(
            "  trivial calls/s, {callers:>2} concurrent caller(s)  {per_sec:>10.0} /s   ratio {:>7.2}x (to 1 caller, {cores} workers)",
            per_sec / single
        );
        println!(
            "      process CPU per call                {cpu:>10.1} us   ratio {:>7.2}x (to 1 caller; above 1 is contention)",
            cpu / single_cpu
        );
    }
    // What the cores could give if nothing else ran: the scaling the call path allows.
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("  load average while measuring: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    match native_p50 {
        Some(n) => println!(
            "  baseline native fork+exec p50           {:>10.1} us   ratio {:>7.1}x",
            us(n),
            us(n) / us(warm_p50)
        ),
        None => println!("  baseline native fork+exec               skipped (no C compiler `cc`)"),
    }
    println!(
        "  baseline python3 process p50            {:>10.1} us   ratio {:>7.1}x",
        us(py_p50),
        us(py_p50) / us(warm_p50)
    );
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("targets:");
    println!("  warm p50 <= 25 us: {}", verdict(us(warm_p50) <= 25.0));
    let at8 = throughput.iter().find(|(c, _, _)| *c == 8).map(|(_, t, _)| t / single).unwrap_or(0.0);
    println!("  >= 1.7x single-caller throughput at 8 callers: {} ({at8:.2}x)", verdict(at8 >= 1.7));
    if let Some(n) = native_p50 {
        println!("  >= 25x native baseline: {}", verdict(us(n) / us(warm_p50) >= 25.0));
    }
    println!("  >= 500x python3 baseline: {}", verdict(us(py_p50) / us(warm_p50) >= 500.0));
    println!("  cold first call <= 10 ms: {}", verdict(cold <= Duration::from_millis(10)));
    // Issue 29's tighter targets, each beside what wasmtime alone does on this machine.
    println!(
        "  warm p50 <= 10 us: {} ({:.1} us; wasmtime alone {:.1} us, of which instantiate + drop {:.1} us)",
        verdict(us(warm_p50) <= 10.0),
        us(warm_p50),
        us(bare_call_p50),
        us(bare_instantiate_p50)
    );
    println!(
        "  >= 1.8x single-caller throughput at 8 callers: {} ({ours8:.2}x, median of the paired rounds; wasmtime alone, one shared component, {alone8:.2}x)",
        verdict(ours8 >= 1.8),
    );
}

/// CPU time (user + system) of the whole process so far: all workers, the epoch ticker
/// and the kernel work done for them.
fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn hex_sha(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// What the store of a bare instance holds: an empty WASI context, nothing of ours.
struct Bare {
    ctx: wasmtime_wasi::WasiCtx,
    http: wasmtime_wasi_http::WasiHttpCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi_http::WasiHttpView for Bare {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: wasmtime_wasi_http::default_hooks(),
        }
    }
}

impl wasmtime_wasi::WasiView for Bare {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView { ctx: &mut self.ctx, table: &mut self.table }
    }
}

/// The floor under a warm call: wasmtime alone, on the runtime's own engine (its pooling
/// allocator, epochs, stack size and memory reset), with none of the runtime's work (no
/// capability state, CPU metering, limits, admission or instance made ahead). WASI is linked
/// as ours is; the skill world's own imports trap, which the probe's `noop` never calls.
struct BareProbe {
    engine: wasmtime::Engine,
    pre: wasmtime::component::InstancePre<Bare>,
    /// `execute`, found once (as the runtime's typed bindings find it once).
    execute: wasmtime::component::ComponentExportIndex,
}

impl BareProbe {
    fn new(engine: &wasmtime::Engine, wasm: &[u8]) -> BareProbe {
        let component = wasmtime::component::Component::new(engine, wasm).unwrap();
        let mut linker = wasmtime::component::Linker::<Bare>::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).unwrap();
        // The skill world's own interfaces, as functions that trap. (Not
        // `define_unknown_imports_as_traps`: it does not match the probe's newer WASI minor
        // version to the one linked, and would define those interfaces again as traps, with
        // resource types of their own that fail the type check.)
        for (name, item) in component.component_type().imports(engine) {
            let (true, wasmtime::component::types::ComponentItem::ComponentInstance(interface)) =
                (name.starts_with("skillhost:"), item.ty)
            else {
                continue;
            };
            let mut instance = linker.instance(name).unwrap();
            for (function, item) in interface.exports(engine) {
                if let wasmtime::component::types::ComponentItem::ComponentFunc(_) = item.ty {
                    instance
                        .func_new(function, |_, _, _, _| Err(wasmtime::Error::msg("not linked in the bare floor")))
                        .unwrap();
                }
            }
        }
        let execute = component.get_export_index(None, "execute").expect("the probe exports `execute`");
        BareProbe { engine: engine.clone(), pre: linker.instantiate_pre(&component).unwrap(), execute }
    }

    /// Instantiate the probe in a store of its own, run `execute` (noop) if `execute`, and
    /// drop the store. The call goes through wasmtime's dynamic API (its arguments and result
    /// checked and built as values), a little more work than the runtime's typed call.
    async fn call(&self, execute: bool) {
        use wasmtime::component::Val;
        let data = Bare {
            ctx: wasmtime_wasi::WasiCtxBuilder::new().build(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            table: wasmtime::component::ResourceTable::new(),
        };
        let mut store = wasmtime::Store::new(&self.engine, data);
        store.set_epoch_deadline(1_000);
        let instance = self.pre.instantiate_async(&mut store).await.unwrap();
        if execute {
            let execute = instance.get_func(&mut store, self.execute).expect("`execute` is a function");
            let call = Val::Record(vec![
                ("session-id".into(), Val::String("bench".into())),
                ("step".into(), Val::U32(1)),
                ("params".into(), Val::String(r#"{"mode":"noop"}"#.into())),
            ]);
            let mut result = [Val::Bool(false)];
            execute.call_async(&mut store, &[call], &mut result).await.unwrap();
            assert!(matches!(&result[0], Val::Result(Ok(_))), "{:?}", result[0]);
        }
    }
}
