//! The sandbox, through the real runtime: limits, capabilities, denials, cache integrity.
//! Every test runs twice: on a current-thread tokio runtime and on a multi-threaded one
//! (calls in a server run on whichever worker is free).

mod common;

use std::cell::Cell;

use common::{Env, TestServer, output};
use serde_json::{Value, json};
use skillhost::library::{Library, RunOptions, RunReport};
use skillhost::sandbox::{CallError, CompileOutcome, Status};

#[derive(Clone, Copy)]
enum Flavor {
    CurrentThread,
    MultiThread,
}

thread_local! {
    static FLAVOR: Cell<Flavor> = const { Cell::new(Flavor::CurrentThread) };
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    match FLAVOR.with(Cell::get) {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
        Flavor::MultiThread => {
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
        }
    }
}

fn run(lib: &Library, name: &str, params: Value) -> RunReport {
    run_with(lib, name, params, &RunOptions::default())
}

fn run_with(lib: &Library, name: &str, params: Value, opts: &RunOptions) -> RunReport {
    tokio_runtime().block_on(lib.run(name, params, opts)).unwrap()
}

/// Each listed test body as `current_thread::NAME` and `multi_thread::NAME`.
macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod current_thread {
            $(#[test] fn $name() { super::FLAVOR.with(|f| f.set(super::Flavor::CurrentThread)); super::$name() })*
        }
        mod multi_thread {
            $(#[test] fn $name() { super::FLAVOR.with(|f| f.set(super::Flavor::MultiThread)); super::$name() })*
        }
    };
}

fn trivial_call_succeeds_and_reports() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "");
    let opts = RunOptions { session: "sess-1".into(), step: 4, ..Default::default() };
    let r = run_with(&lib, "p", json!({"mode": "echo", "arg": "hi"}), &opts);
    assert_eq!(output(&r), "sess-1|4|hi");
    assert!(r.outcome.denials.is_empty(), "{:?}", r.outcome.denials);
    assert!(
        matches!(r.compile, Some(CompileOutcome::Hit { .. })),
        "install compiled it into the cache: {:?}",
        r.compile
    );
    let audit = std::fs::read_to_string(env.home.path().join("audit/audit.jsonl")).unwrap();
    assert!(audit.contains("\"session\":\"sess-1\""), "{audit}");
}

fn invalid_params_are_rejected_before_the_component_runs() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "");
    let r = run(&lib, "p", json!({"mode": 3}));
    let Err(CallError::InvalidParams(m)) = &r.outcome.result else { panic!("{:?}", r.outcome.result) };
    assert!(m.contains("`mode`") && m.contains("string"), "{m}");
    let r = run(&lib, "p", json!({"arg": "x"}));
    let Err(CallError::InvalidParams(m)) = &r.outcome.result else { panic!("{:?}", r.outcome.result) };
    assert!(m.contains("\"mode\" is a required property"), "{m}");
    let r = run(&lib, "p", json!({"mode": "noop", "bogus": 1}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("bogus")),
        "{:?}",
        r.outcome.result
    );
    let r = run(&lib, "p", json!({"mode": "noop", "n": -1}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("`n`")),
        "{:?}",
        r.outcome.result
    );
    // The skill's own invalid-params answer comes through as such.
    let r = run(&lib, "p", json!({"mode": "no-such-mode"}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::InvalidParams(m)) if m.contains("unknown mode")),
        "{:?}",
        r.outcome.result
    );
}

fn panic_is_readable_and_the_next_call_works() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "");
    let r = run(&lib, "p", json!({"mode": "panic", "arg": "boom"}));
    let Err(CallError::Panic(m)) = &r.outcome.result else { panic!("{:?}", r.outcome.result) };
    assert!(m.contains("probe panicked on purpose: boom"), "{m}");
    assert_eq!(output(&run(&lib, "p", json!({"mode": "noop"}))), "ok");
}

fn infinite_loop_is_stopped_by_the_cpu_deadline() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "limits:\n  cpu_time_ms: 200\n");
    let started = std::time::Instant::now();
    let r = run(&lib, "p", json!({"mode": "loop"}));
    assert!(matches!(&r.outcome.result, Err(CallError::CpuLimit(m)) if m.contains("200 ms")), "{:?}", r.outcome.result);
    assert!(started.elapsed().as_secs() < 5, "took {:?}", started.elapsed());
    assert_eq!(output(&run(&lib, "p", json!({"mode": "noop"}))), "ok");
}

fn busy_guest_is_stopped_by_the_wall_clock_too() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "limits:\n  wall_time_ms: 300\n");
    let started = std::time::Instant::now();
    let r = run(&lib, "p", json!({"mode": "loop"}));
    assert_eq!(r.outcome.result.as_ref().unwrap_err(), &CallError::Timeout { limit_ms: 300 });
    assert!(started.elapsed().as_millis() < 2_000, "took {:?}", started.elapsed());
}

fn waiting_is_not_counted_as_cpu_time() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "limits:\n  cpu_time_ms: 100\n");
    let r = run(&lib, "p", json!({"mode": "sleep", "n": 400}));
    assert_eq!(output(&r), "slept");
}

fn waiting_guest_is_stopped_by_the_wall_clock() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "limits:\n  wall_time_ms: 300\n");
    let r = run(&lib, "p", json!({"mode": "sleep", "n": 20_000}));
    assert_eq!(r.outcome.result.as_ref().unwrap_err(), &CallError::Timeout { limit_ms: 300 });
}

fn memory_bomb_is_stopped_by_the_limit() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "limits:\n  memory_mb: 16\n");
    let r = run(&lib, "p", json!({"mode": "membomb"}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::MemoryLimit(m)) if m.contains("16 MiB")),
        "{:?}",
        r.outcome.result
    );
    assert!(r.outcome.memory_peak_bytes <= 16 << 20);
    assert_eq!(output(&run(&lib, "p", json!({"mode": "noop"}))), "ok");
}

fn output_flood_is_capped() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "limits:\n  output_kb: 1\n");
    let r = run(&lib, "p", json!({"mode": "flood", "n": 1_000_000}));
    let out = r.outcome.result.as_ref().unwrap();
    assert_eq!(out.truncated_bytes, 1_000_000 - 1024);
    assert!(out.output.len() < 1200, "{}", out.output.len());
    assert!(out.output.contains("output truncated"));
    // Metadata counts against the same budget.
    let r = run(&lib, "p", json!({"mode": "meta-flood", "n": 100}));
    let meta = &r.outcome.result.as_ref().unwrap().metadata;
    assert!(meta.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() < 2048, "{} entries", meta.len());
    assert!(meta.last().unwrap().1.contains("entries dropped"), "{:?}", meta.last());
    // A stdout flood cannot fill host memory either: the pipe refuses past its capacity.
    let r = run(&lib, "p", json!({"mode": "stdout-flood", "n": 10_000}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::Panic(m)) if m.contains("failed printing to stdout")),
        "{:?}",
        r.outcome.result
    );
    assert!(r.outcome.stdout.len() <= 64 * 1024);
}

fn filesystem_is_confined_to_granted_mounts() {
    let env = Env::new();
    std::fs::write(env.workspace.path().join("data.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", env.workspace.path().join("link")).unwrap();
    let lib = env.library();
    env.install_granted(
        &lib,
        "reader",
        "capabilities:\n  filesystem:\n    - host: $WORKSPACE\n      guest: /workspace\n      access: read\n",
    );
    assert_eq!(output(&run(&lib, "reader", json!({"mode": "read-file", "arg": "/workspace/data.txt"}))), "inside");
    for path in [
        "/etc/passwd",
        "/workspace/../etc/passwd",
        "../etc/passwd",
        "/workspace/../../../../etc/passwd",
        "/workspace/link",
        "/",
    ] {
        let r = run(&lib, "reader", json!({"mode": "read-file", "arg": path}));
        assert!(
            matches!(&r.outcome.result, Err(CallError::Failed(_))),
            "{path} must not be readable: {:?}",
            r.outcome.result
        );
    }
    let r = run(&lib, "reader", json!({"mode": "write-file", "arg": "/workspace/new.txt"}));
    assert!(r.outcome.result.is_err(), "read-only mount accepted a write");
    assert!(!env.workspace.path().join("new.txt").exists());

    env.install_granted(
        &lib,
        "writer",
        "capabilities:\n  filesystem:\n    - host: $WORKSPACE\n      guest: /workspace\n      access: read-write\n",
    );
    assert_eq!(output(&run(&lib, "writer", json!({"mode": "write-file", "arg": "/workspace/new.txt"}))), "written");
    assert_eq!(std::fs::read_to_string(env.workspace.path().join("new.txt")).unwrap(), "written by probe");

    // No mount at all: nothing is visible.
    env.install_granted(&lib, "blind", "");
    let r = run(&lib, "blind", json!({"mode": "read-file", "arg": "/workspace/data.txt"}));
    assert!(r.outcome.result.is_err());
}

fn environment_is_only_what_is_declared_and_granted() {
    let env = Env::new();
    let lib = env.library();
    assert!(std::env::var("PATH").is_ok(), "the test needs PATH set");
    env.install_granted(&lib, "none", "");
    let r = run(&lib, "none", json!({"mode": "env", "arg": "PATH"}));
    assert_eq!(output(&r), "PATH is not set");
    assert_eq!(r.outcome.result.as_ref().unwrap().metadata, vec![("env_count".to_string(), "0".to_string())]);

    env.install_granted(&lib, "some", "capabilities:\n  env: [PATH]\n");
    let r = run(&lib, "some", json!({"mode": "env", "arg": "PATH"}));
    // The guest read the host's exact value (only that is redacted), and handing it back
    // is a leak the host redacts (see tests/secrets.rs).
    assert_eq!(output(&r), "PATH=[redacted: env PATH]");
    assert!(
        r.outcome.denials.iter().any(|d| d.capability == "secrets" && d.message.contains("env PATH")),
        "{:?}",
        r.outcome.denials
    );
    let r = run(&lib, "some", json!({"mode": "env", "arg": "HOME"}));
    assert_eq!(output(&r), "HOME is not set");

    env.install_ungranted(&lib, "asked", "capabilities:\n  env: [PATH]\n");
    let r = run(&lib, "asked", json!({"mode": "env", "arg": "PATH"}));
    assert_eq!(output(&r), "PATH is not set");
    assert_eq!(r.not_granted, vec!["env PATH".to_string()], "reported as information, not as a denial");
}

fn the_wall_clock_is_stopped_without_the_clock_capability() {
    let env = Env::new();
    let lib = env.library();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let clock_denials = |r: &RunReport| r.outcome.denials.iter().filter(|d| d.capability == "clock").count();

    env.install_granted(&lib, "timeless", "");
    let r = run(&lib, "timeless", json!({"mode": "clock"}));
    assert_eq!(output(&r), "0", "a skill without `clock` reads the epoch");
    assert_eq!(clock_denials(&r), 1, "one denial however often it read: {:?}", r.outcome.denials);
    assert!(
        r.outcome.denials.iter().any(|d| d.message.contains("clock: true")),
        "says how to get it: {:?}",
        r.outcome.denials
    );
    // A call that does not read the clock is not told about it.
    assert_eq!(clock_denials(&run(&lib, "timeless", json!({"mode": "noop"}))), 0);

    env.install_granted(&lib, "timely", "capabilities:\n  clock: true\n");
    let r = run(&lib, "timely", json!({"mode": "clock"}));
    let read: u64 = output(&r).parse().unwrap();
    assert!(read.abs_diff(now) < 600, "the host's time: read {read}, host {now}");
    assert_eq!(clock_denials(&r), 0, "{:?}", r.outcome.denials);

    // Declared but not granted: still stopped, and the missing grant is reported.
    env.install_ungranted(&lib, "asked", "capabilities:\n  clock: true\n");
    let r = run(&lib, "asked", json!({"mode": "clock"}));
    assert_eq!(output(&r), "0");
    assert_eq!(r.not_granted, vec!["clock (the wall-clock time)".to_string()]);
}

fn declared_but_not_granted_is_denied() {
    let env = Env::new();
    let lib = env.library();
    env.install_ungranted(&lib, "p", "capabilities:\n  session: true\n  memory: write\n");
    let r = run(&lib, "p", json!({"mode": "session-set", "arg": "v"}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::Failed(m)) if m.contains("denied") && m.contains("session")),
        "{:?}",
        r.outcome.result
    );
    assert!(
        r.outcome.denials.iter().any(|d| d.capability == "session" && d.message.contains("session.set")),
        "{:?}",
        r.outcome.denials
    );
    let r = run(&lib, "p", json!({"mode": "remember", "arg": "fact", "n": 1}));
    assert!(r.memories.stored.is_empty());
    assert!(r.outcome.denials.iter().any(|d| d.message.contains("memory: write")), "{:?}", r.outcome.denials);
    let r = run(&lib, "p", json!({"mode": "memory-search", "arg": "x"}));
    assert!(
        matches!(&r.outcome.result, Err(CallError::Failed(m)) if m.contains("denied") && m.contains("memory: read")),
        "{:?}",
        r.outcome.result
    );

    // Granting it later takes effect on the next call.
    let mut policy = skillhost::policy::Policy::load(&env.home.path().join("policy.toml")).unwrap();
    let manifest = lib.info("p").unwrap().manifest;
    policy.apply("p", &skillhost::policy::parse_grant("session", &manifest.capabilities, &manifest.limits).unwrap());
    policy.save(&env.home.path().join("policy.toml")).unwrap();
    let opts = RunOptions { session: "s".into(), ..Default::default() };
    assert_eq!(output(&run_with(&lib, "p", json!({"mode": "session-set", "arg": "kept"}), &opts)), "stored");
    assert_eq!(output(&run_with(&lib, "p", json!({"mode": "session-get"}), &opts)), "kept");
    let other = RunOptions { session: "t".into(), ..Default::default() };
    assert_eq!(output(&run_with(&lib, "p", json!({"mode": "session-get"}), &other)), "");
}

fn memories_are_stored_with_provenance_within_limits() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(
        &lib,
        "p",
        "capabilities:\n  memory: write\nlimits:\n  max_new_memories: 2\n  max_memory_bytes: 64\n",
    );
    let opts = RunOptions { session: "sess-m".into(), step: 2, namespace: "ops".into(), ..Default::default() };
    let r = run_with(&lib, "p", json!({"mode": "remember", "arg": "uart overrun", "n": 5}), &opts);
    assert_eq!(r.memories.stored.len(), 2);
    assert!(
        r.memories.dropped.iter().any(|d| d.contains("3 proposed memories over the limit of 2")),
        "{:?}",
        r.memories
    );
    let records = lib.store().unwrap().list("ops").unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].provenance[0].skill, "p");
    assert_eq!(records[0].provenance[0].skill_hash, r.content_hash);
    assert_eq!((records[0].provenance[0].session.as_str(), records[0].provenance[0].step), ("sess-m", 2));
    assert!(lib.store().unwrap().list("default").unwrap().is_empty());

    let long = "x".repeat(100);
    let r = run_with(&lib, "p", json!({"mode": "remember", "arg": long, "n": 1}), &opts);
    assert!(r.memories.stored.is_empty());
    assert!(r.memories.dropped[0].contains("summarize"), "{:?}", r.memories.dropped);

    // The same skill can read them back through memory.search, in its namespace only.
    let r = run_with(&lib, "p", json!({"mode": "memory-search", "arg": "overrun"}), &opts);
    assert!(output(&r).contains("uart overrun #0"), "{}", output(&r));
    let r = run(&lib, "p", json!({"mode": "memory-search", "arg": "overrun"}));
    assert_eq!(output(&r), "");
}

fn memory_search_counts_a_reference_once_per_record_per_session() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "capabilities:\n  memory: write\n");
    let in_session =
        |session: &str| RunOptions { session: session.into(), step: 1, namespace: "ops".into(), ..Default::default() };
    run_with(&lib, "p", json!({"mode": "remember", "arg": "uart overrun", "n": 1}), &in_session("writer"));
    let references = || lib.store().unwrap().list("ops").unwrap()[0].references;
    let before = references();
    // A skill searching in a loop cannot inflate a record's importance: one count per session.
    for _ in 0..3 {
        let r = run_with(&lib, "p", json!({"mode": "memory-search", "arg": "overrun"}), &in_session("session-a"));
        assert!(output(&r).contains("uart overrun"), "{}", output(&r));
    }
    assert_eq!(references(), before + 1, "three searches in one session count once");
    run_with(&lib, "p", json!({"mode": "memory-search", "arg": "overrun"}), &in_session("session-b"));
    assert_eq!(references(), before + 2, "another session counts again");
}

fn a_trap_carries_the_tail_of_the_guests_stderr() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "");
    let r = run(&lib, "p", json!({"mode": "abort", "arg": "the interpreter lost its frame"}));
    let Err(CallError::Trap(m)) = &r.outcome.result else { panic!("{:?}", r.outcome.result) };
    assert!(m.contains("the guest's stderr ended with:\nprobe: fatal error: the interpreter lost its frame"), "{m}");
    let next = run(&lib, "p", json!({"mode": "noop"}));
    assert_eq!(output(&next), "ok");
}

fn https_connects_to_the_checked_address_and_speaks_tls_there() {
    // A plain TCP listener standing where the rule points: the sandbox's https must connect
    // to this very address (not resolve anything again) and open with a TLS ClientHello.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            use std::io::Read as _;
            let mut first = [0u8; 3];
            let _ = s.read_exact(&mut first);
            let _ = tx.send(first);
        }
    });
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "tls", &format!("capabilities:\n  network:\n    - https://127.0.0.1:{port}\n"));
    let r = run(&lib, "tls", json!({"mode": "http-get", "arg": format!("https://127.0.0.1:{port}/")}));
    assert!(r.outcome.result.is_err(), "not a TLS server, so no response: {:?}", r.outcome.result);
    let first = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("no connection to the checked address");
    assert_eq!(first[0], 0x16, "a TLS handshake record");
    assert_eq!(first[1], 0x03, "TLS version major byte");
}

fn outbound_http_follows_the_allowlist() {
    let server = TestServer::start();
    let env = Env::new();
    let lib = env.library();
    env.install_granted(
        &lib,
        "net",
        &format!("capabilities:\n  network:\n    - http://127.0.0.1:{}/ok\n    - http://localhost:*\n", server.port),
    );
    let r = run(&lib, "net", json!({"mode": "http-get", "arg": format!("http://127.0.0.1:{}/ok", server.port)}));
    assert_eq!(output(&r), "200 hello");
    assert_eq!(server.hits(), 1);

    // Other path, other loopback address, other port: denied before any connection.
    for url in [
        format!("http://127.0.0.1:{}/secret", server.port),
        format!("http://127.0.0.1:{}/okay-admin", server.port),
        format!("http://127.0.0.1:{}/ok/../secret", server.port),
        format!("http://127.0.0.1:{}/ok/%2e%2e/secret", server.port),
        format!("http://127.0.0.2:{}/ok", server.port),
        format!("http://127.0.0.1:{}/ok", server.port.wrapping_add(1)),
    ] {
        let r = run(&lib, "net", json!({"mode": "http-get", "arg": url}));
        assert!(r.outcome.result.is_err(), "{url} reachable");
        assert!(
            r.outcome
                .denials
                .iter()
                .any(|d| d.capability == "network" && d.message.contains("not in the effective allowlist")),
            "{:?}",
            r.outcome.denials
        );
    }
    // An allowed *name* that resolves to an internal address is refused (DNS rebinding).
    let r = run(&lib, "net", json!({"mode": "http-get", "arg": format!("http://localhost:{}/ok", server.port)}));
    assert!(r.outcome.result.is_err());
    assert!(r.outcome.denials.iter().any(|d| d.message.contains("internal address")), "{:?}", r.outcome.denials);
    assert_eq!(server.hits(), 1);

    // Declared but not granted: nothing.
    env.install_ungranted(
        &lib,
        "quiet",
        &format!("capabilities:\n  network:\n    - http://127.0.0.1:{}/ok\n", server.port),
    );
    let r = run(&lib, "quiet", json!({"mode": "http-get", "arg": format!("http://127.0.0.1:{}/ok", server.port)}));
    assert!(r.outcome.result.is_err());
    assert!(r.outcome.denials.iter().any(|d| d.message.contains("no `network` capability")), "{:?}", r.outcome.denials);
    assert_eq!(server.hits(), 1);
}

fn corrupted_cache_entry_is_detected_and_recompiled() {
    let env = env_with_probe_installed();
    let entry = cache_entry(env.home.path());
    let mut bytes = std::fs::read(&entry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();

    {
        let lib = env.library();
        let r = run(&lib, "p", json!({"mode": "noop"}));
        assert_eq!(output(&r), "ok");
        assert!(matches!(r.compile, Some(CompileOutcome::Recompiled { .. })), "{:?}", r.compile);
        assert_ne!(std::fs::read(&entry).unwrap(), bytes, "the entry was rewritten");
    }
    let lib = env.library();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert!(matches!(r.compile, Some(CompileOutcome::Hit { .. })), "{:?}", r.compile);
}

/// A home with the probe installed as `p` (and compiled into the cache), its library closed.
fn env_with_probe_installed() -> Env {
    let env = Env::new();
    env.install_granted(&env.library(), "p", "");
    env
}

/// The one compiled entry in a home's compile cache (its payload file).
fn cache_entry(home: &std::path::Path) -> std::path::PathBuf {
    let entries: Vec<_> = std::fs::read_dir(home.join("cache"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().unwrap()
}

fn a_cache_entry_with_a_forged_seal_is_recompiled() {
    let env = env_with_probe_installed();
    let entry = cache_entry(env.home.path());
    let mut bytes = std::fs::read(&entry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();
    // As someone who can write the cache but not read the host key would: the seal now
    // describes the changed payload (its stamp and sha256) but keeps the old HMAC.
    let seal_path = entry.with_extension("seal");
    let mut seal: Value = serde_json::from_slice(&std::fs::read(&seal_path).unwrap()).unwrap();
    let meta = std::fs::metadata(&entry).unwrap();
    {
        use std::os::unix::fs::MetadataExt as _;
        seal["stamp"] = json!({
            "dev": meta.dev(), "ino": meta.ino(), "size": meta.size(),
            "mtime_ns": meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            "ctime_ns": meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        });
    }
    use sha2::Digest as _;
    seal["payload_sha256"] = json!(hex::encode(sha2::Sha256::digest(&bytes)));
    std::fs::write(&seal_path, serde_json::to_vec(&seal).unwrap()).unwrap();
    // The forged seal is now as the attacker wants it except for its HMAC.
    let lib = env.library();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert_eq!(output(&r), "ok");
    assert!(matches!(r.compile, Some(CompileOutcome::Recompiled { .. })), "{:?}", r.compile);
    assert_ne!(std::fs::read(&entry).unwrap(), bytes, "the entry was rewritten");
}

fn a_copied_home_loads_its_compiled_skills_without_recompiling() {
    let env = env_with_probe_installed();
    let seal_of = |home: &std::path::Path| std::fs::read(cache_entry(home).with_extension("seal")).unwrap();
    let copy = tempfile::tempdir().unwrap();
    let copied_home = copy.path().join("home");
    let status = std::process::Command::new("cp").arg("-a").arg(env.home.path()).arg(&copied_home).status().unwrap();
    assert!(status.success());
    let lib = Library::open(&copied_home, Some(env.workspace.path()), None).unwrap();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert_eq!(output(&r), "ok");
    // The copy has other inodes, so the payload was hashed against its seal once (not
    // recompiled) and sealed again under its new stamp.
    assert!(matches!(r.compile, Some(CompileOutcome::Hit { .. })), "{:?}", r.compile);
    assert_ne!(seal_of(&copied_home), seal_of(env.home.path()), "re-sealed for the copy");
    let lib = Library::open(&copied_home, Some(env.workspace.path()), None).unwrap();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert!(matches!(r.compile, Some(CompileOutcome::Hit { .. })), "{:?}", r.compile);
}

fn a_cache_entry_of_the_previous_format_is_verified_and_migrated() {
    let env = env_with_probe_installed();
    let entry = cache_entry(env.home.path());
    let payload = std::fs::read(&entry).unwrap();
    // `SHA-ENGINE.cwasm`: the previous format put an unkeyed tag over exactly these before
    // the payload and had no seal.
    let stem = entry.file_stem().unwrap().to_string_lossy().into_owned();
    let (component_sha, engine_key) = stem.split_once('-').unwrap();
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(b"skillhost compile cache v2\0");
    h.update(component_sha.as_bytes());
    h.update(b"\0");
    h.update(engine_key.as_bytes());
    h.update(b"\0");
    h.update(&payload);
    let mut legacy = h.finalize().to_vec();
    legacy.extend_from_slice(&payload);
    std::fs::write(&entry, &legacy).unwrap();
    std::fs::remove_file(entry.with_extension("seal")).unwrap();

    let lib = env.library();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert_eq!(output(&r), "ok");
    assert!(matches!(r.compile, Some(CompileOutcome::Hit { .. })), "{:?}", r.compile);
    assert_eq!(std::fs::read(&entry).unwrap(), payload, "rewritten as the payload alone");
    assert!(entry.with_extension("seal").exists(), "and sealed");

    // A damaged entry of the old format is recompiled, not trusted.
    let mut damaged = legacy.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    std::fs::write(&entry, &damaged).unwrap();
    std::fs::remove_file(entry.with_extension("seal")).unwrap();
    let lib = env.library();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert_eq!(output(&r), "ok");
    assert!(matches!(r.compile, Some(CompileOutcome::Recompiled { .. })), "{:?}", r.compile);
}

fn entries_of_other_engines_are_removed_when_a_component_is_compiled() {
    let env = env_with_probe_installed();
    let entry = cache_entry(env.home.path());
    let stem = entry.file_stem().unwrap().to_string_lossy().into_owned();
    let (component_sha, engine_key) = stem.split_once('-').unwrap();
    let cache = env.home.path().join("cache");
    // What an older skillhost left: the same component under another engine key, and another
    // component (still installed for all we know) under that key.
    let stale = [format!("{component_sha}-00000000deadbeef.cwasm"), format!("{component_sha}-00000000deadbeef.seal")];
    let other = format!("{}-00000000deadbeef.cwasm", "ab".repeat(32));
    for name in stale.iter().chain([&other]) {
        std::fs::write(cache.join(name), b"old").unwrap();
    }
    std::fs::remove_file(&entry).unwrap();
    let lib = env.library();
    let r = run(&lib, "p", json!({"mode": "noop"}));
    assert!(matches!(r.compile, Some(CompileOutcome::Recompiled { .. })), "{:?}", r.compile);
    for name in &stale {
        assert!(!cache.join(name).exists(), "{name} was left behind");
    }
    assert!(cache.join(&other).exists(), "another component's entry is not this compile's to remove");
    assert!(cache.join(format!("{component_sha}-{engine_key}.cwasm")).exists());
    assert!(cache.join(format!("{component_sha}-{engine_key}.seal")).exists());
}

/// Recursion this deep needs about 2 MiB of wasm stack (~100 bytes a frame): it overflows
/// the default 512 KiB and fits in 4 MiB.
const DEEP_RECURSION: u64 = 20_000;

fn a_skill_gets_the_stack_it_asks_for_within_the_policy() {
    let env = Env::new();
    let lib = env.library();
    let asks = "limits:\n  stack_kb: 4096\n";
    env.install_granted(&lib, "deep", asks);
    env.install_ungranted(&lib, "deep-ungranted", asks);
    let capped = env.probe_as("deep-capped", asks);
    let cap = skillhost::capabilities::LimitsRequest { stack_kb: Some(1024), ..Default::default() };
    lib.install(&capped, &|_| Ok(Some(skillhost::policy::Grant { capabilities: Default::default(), limits: cap })))
        .unwrap();
    env.install_granted(&lib, "shallow", "");
    let deep = json!({"mode": "recurse", "n": DEEP_RECURSION});

    let r = run(&lib, "deep", deep.clone());
    assert_eq!(r.limits.stack_kb, 4096);
    assert!(output(&r).starts_with(&format!("depth {DEEP_RECURSION}")), "{:?}", r.outcome.result);
    // The default stack, for a skill that did not ask and one whose ask was not granted.
    for (name, stack) in [("shallow", 512), ("deep-ungranted", 512), ("deep-capped", 1024)] {
        let r = run(&lib, name, deep.clone());
        assert_eq!(r.limits.stack_kb, stack, "{name}");
        match &r.outcome.result {
            Err(CallError::Trap(m)) => {
                assert!(m.contains("stack overflow") && m.contains(&format!("{stack} KiB")), "{name}: {m}")
            }
            other => panic!("{name} should overflow its {stack} KiB stack: {other:?}"),
        }
    }
    // Calls on both stack sizes at once, each on its own engine, each with its own result.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let results = rt.block_on(async {
        let lib = std::sync::Arc::new(lib);
        let calls: Vec<_> = (0..8)
            .map(|i| {
                let lib = lib.clone();
                let (name, n) = if i % 2 == 0 { ("deep", DEEP_RECURSION) } else { ("shallow", 100 + i) };
                tokio::spawn(async move {
                    (name, n, lib.run(name, json!({"mode": "recurse", "n": n}), &RunOptions::default()).await.unwrap())
                })
            })
            .collect();
        let mut out = Vec::new();
        for c in calls {
            out.push(c.await.unwrap());
        }
        out
    });
    for (name, n, r) in results {
        assert!(output(&r).starts_with(&format!("depth {n} ")), "{name} {n}: {:?}", r.outcome.result);
    }
}

fn a_stack_request_outside_the_sizes_is_refused_at_install() {
    let env = Env::new();
    let lib = env.library();
    for kb in [0, 100, 65_536] {
        let dir = env.probe_as("greedy", &format!("limits:\n  stack_kb: {kb}\n"));
        let err = format!("{:#}", lib.install(&dir, &|_| Ok(None)).unwrap_err());
        assert!(err.contains("stack_kb") && err.contains("between 512 and 8192"), "{kb}: {err}");
    }
}

fn tampered_installed_component_is_refused() {
    let env = env_with_probe_installed();
    // One load first, so the host has sealed these files as verified (a later process
    // trusts that seal instead of hashing them again).
    assert_eq!(output(&run(&env.library(), "p", json!({"mode": "noop"}))), "ok");
    let wasm = env.home.path().join("skills/p/skill.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let before = std::fs::metadata(&wasm).unwrap();
    std::fs::write(&wasm, bytes).unwrap();
    // As a careful tamperer would: same size, mtime put back (ctime cannot be).
    let file = std::fs::File::options().write(true).open(&wasm).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
    drop(file);
    let lib = env.library();
    let err = tokio_runtime().block_on(lib.run("p", json!({"mode": "noop"}), &RunOptions::default())).unwrap_err();
    assert!(format!("{err:#}").contains("do not match their recorded hash"), "{err:#}");
}

fn malformed_manifest_and_non_component_wasm_are_clear_errors() {
    let env = Env::new();
    let lib = env.library();
    let dir = env.probe_as("bad", "capabilities:\n  memory: sometimes\n");
    let err = lib.install(&dir, &|_| Ok(None)).unwrap_err().to_string();
    assert!(err.contains("bad/SKILL.md:") && err.contains("memory") && err.contains("sometimes"), "{err}");

    let dir = env.probe_as("core", "");
    std::fs::write(dir.join("skill.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let err = format!("{:#}", lib.install(&dir, &|_| Ok(None)).unwrap_err());
    assert!(err.contains("core WebAssembly module, not a component"), "{err}");

    std::fs::write(dir.join("skill.wasm"), b"#!/bin/sh\necho pwned\n").unwrap();
    let err = format!("{:#}", lib.install(&dir, &|_| Ok(None)).unwrap_err());
    assert!(err.contains("not a WebAssembly file"), "{err}");
    assert!(lib.names().unwrap().is_empty(), "nothing half-installed");
}

fn a_broken_installed_skill_does_not_hide_the_others() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "good", "");
    env.install_granted(&lib, "broken", "");
    std::fs::write(env.home.path().join("skills/broken/SKILL.md"), "---\nname: [\n---\n").unwrap();
    let scanned = lib.scan().unwrap();
    assert_eq!(scanned.len(), 2);
    let broken = scanned.iter().find(|(n, _)| n == "broken").unwrap();
    assert!(format!("{:#}", broken.1.as_ref().unwrap_err()).contains("SKILL.md"));
    assert!(scanned.iter().find(|(n, _)| n == "good").unwrap().1.is_ok());
    assert_eq!(output(&run(&lib, "good", json!({"mode": "noop"}))), "ok");
}

fn status_and_failure_come_through() {
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "p", "");
    let r = run(&lib, "p", json!({"mode": "fail", "arg": "why"}));
    assert_eq!(r.outcome.result.unwrap_err(), CallError::Failed("probe failed on purpose: why".into()));
    let r = run(&lib, "p", json!({"mode": "log", "arg": "step", "n": 3}));
    assert_eq!(r.outcome.result.as_ref().unwrap().status, Status::Success);
    assert_eq!(r.outcome.logs.len(), 3);
    assert_eq!(r.outcome.logs[2].message, "step #2");
}

fn a_planted_symlink_cannot_redirect_a_mount() {
    let env = Env::new();
    std::fs::create_dir(env.workspace.path().join("real-logs")).unwrap();
    std::fs::write(env.workspace.path().join("real-logs/app.log"), "ok line").unwrap();
    // As if another skill with write access to the workspace had planted it.
    std::os::unix::fs::symlink("/etc", env.workspace.path().join("logs")).unwrap();
    let lib = env.library();
    let mount = |sub: &str| {
        format!("capabilities:\n  filesystem:\n    - host: $WORKSPACE/{sub}\n      guest: /logs\n      access: read\n")
    };
    env.install_granted(&lib, "sub", &mount("logs"));
    let r = run(&lib, "sub", json!({"mode": "read-file", "arg": "/logs/hostname"}));
    assert!(r.outcome.result.is_err(), "{:?}", r.outcome.result);
    assert!(r.outcome.denials.iter().any(|d| d.message.contains("outside")), "{:?}", r.outcome.denials);
    env.install_granted(&lib, "real", &mount("real-logs"));
    assert_eq!(output(&run(&lib, "real", json!({"mode": "read-file", "arg": "/logs/app.log"}))), "ok line");
}

fn raw_sockets_are_refused_even_with_network_granted() {
    let server = TestServer::start();
    let env = Env::new();
    let lib = env.library();
    env.install_granted(&lib, "net", &format!("capabilities:\n  network:\n    - http://127.0.0.1:{}\n", server.port));
    let r = run(&lib, "net", json!({"mode": "tcp-connect", "arg": format!("127.0.0.1:{}", server.port)}));
    let Err(CallError::Failed(m)) = &r.outcome.result else {
        panic!("a raw TCP connection went through: {:?}", r.outcome.result)
    };
    assert!(m.contains("AccessDenied") || m.contains("access-denied"), "{m}");
    let r = run(&lib, "net", json!({"mode": "dns-lookup", "arg": "localhost"}));
    assert!(r.outcome.result.is_err(), "name lookup answered: {:?}", r.outcome.result);
    assert_eq!(server.hits(), 0);
    // HTTP to the granted rule still works.
    let r = run(&lib, "net", json!({"mode": "http-get", "arg": format!("http://127.0.0.1:{}/", server.port)}));
    assert_eq!(output(&r), "200 hello");
}

/// A component whose only import is `interface`, an instance with no items.
fn component_importing(interface: &str) -> Vec<u8> {
    use wasm_encoder::{Component, ComponentImportSection, ComponentTypeRef, ComponentTypeSection, InstanceType};
    let mut component = Component::new();
    let mut types = ComponentTypeSection::new();
    types.instance(&InstanceType::new());
    component.section(&types);
    let mut imports = ComponentImportSection::new();
    imports.import(interface, ComponentTypeRef::Instance(0));
    component.section(&imports);
    component.finish()
}

fn an_import_the_host_does_not_provide_is_refused_at_install() {
    let env = Env::new();
    let lib = env.library();
    let dir = env.probe_as("keyvalue", "");
    std::fs::write(dir.join("skill.wasm"), component_importing("wasi:keyvalue/store@0.2.0-draft")).unwrap();
    let err = format!("{:#}", lib.install(&dir, &|_| Ok(None)).unwrap_err());
    assert!(err.contains("imports `wasi:keyvalue/store@0.2.0-draft`, which this host does not provide"), "{err}");
    assert!(lib.names().unwrap().is_empty(), "nothing installed");
    // A known interface at a version the host does not link is refused the same way.
    std::fs::write(dir.join("skill.wasm"), component_importing("wasi:filesystem/preopens@0.3.0")).unwrap();
    let err = format!("{:#}", lib.install(&dir, &|_| Ok(None)).unwrap_err());
    assert!(err.contains("wasi:filesystem/preopens@0.3.0"), "{err}");
}

fn undeclared_governed_imports_are_reported_and_sockets_are_always_refused() {
    let env = Env::new();
    let lib = env.library();
    let report = lib.install(&env.probe_as("p", ""), &|_| Ok(None)).unwrap();
    let caps: std::collections::BTreeSet<&str> =
        report.undeclared_imports.iter().map(|u| u.capability.as_str()).collect();
    // The probe imports the filesystem, wasi:http's handler, memory, session and sockets.
    for cap in ["filesystem", "network", "memory", "session", "sockets"] {
        assert!(caps.contains(cap), "{cap} missing from {:?}", report.undeclared_imports);
    }
    let report =
        lib.install(&env.probe_as("q", "capabilities:\n  memory: read\n  session: true\n"), &|_| Ok(None)).unwrap();
    assert!(report.undeclared_imports.iter().all(|u| u.capability != "memory" && u.capability != "session"));
    assert!(report.undeclared_imports.iter().any(|u| u.capability == "sockets"));
}

on_both_runtimes!(
    trivial_call_succeeds_and_reports,
    invalid_params_are_rejected_before_the_component_runs,
    panic_is_readable_and_the_next_call_works,
    infinite_loop_is_stopped_by_the_cpu_deadline,
    busy_guest_is_stopped_by_the_wall_clock_too,
    waiting_is_not_counted_as_cpu_time,
    waiting_guest_is_stopped_by_the_wall_clock,
    memory_bomb_is_stopped_by_the_limit,
    output_flood_is_capped,
    filesystem_is_confined_to_granted_mounts,
    environment_is_only_what_is_declared_and_granted,
    the_wall_clock_is_stopped_without_the_clock_capability,
    declared_but_not_granted_is_denied,
    memories_are_stored_with_provenance_within_limits,
    memory_search_counts_a_reference_once_per_record_per_session,
    a_trap_carries_the_tail_of_the_guests_stderr,
    outbound_http_follows_the_allowlist,
    https_connects_to_the_checked_address_and_speaks_tls_there,
    corrupted_cache_entry_is_detected_and_recompiled,
    a_cache_entry_with_a_forged_seal_is_recompiled,
    a_copied_home_loads_its_compiled_skills_without_recompiling,
    a_cache_entry_of_the_previous_format_is_verified_and_migrated,
    entries_of_other_engines_are_removed_when_a_component_is_compiled,
    a_skill_gets_the_stack_it_asks_for_within_the_policy,
    a_stack_request_outside_the_sizes_is_refused_at_install,
    tampered_installed_component_is_refused,
    malformed_manifest_and_non_component_wasm_are_clear_errors,
    a_broken_installed_skill_does_not_hide_the_others,
    status_and_failure_come_through,
    a_planted_symlink_cannot_redirect_a_mount,
    raw_sockets_are_refused_even_with_network_granted,
    an_import_the_host_does_not_provide_is_refused_at_install,
    undeclared_governed_imports_are_reported_and_sockets_are_always_refused,
);
