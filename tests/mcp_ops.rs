//! `skillhost mcp --http` as one of N replicas (issue 33, "Serving many replicas"): open
//! health and readiness probes, Prometheus metrics behind the token, the drain on SIGTERM,
//! JSON logs, and `--stateless` for 2025-11-25 clients. The load balancer test is
//! tests/mcp_balanced.rs.

#[path = "mcp/client.rs"]
mod client;
mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use client::{HttpServer, cli, http, rpc, start_rpc, workspace};
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef-ops-token";

fn audit_lines(home: &Path) -> Vec<Value> {
    common::audit_entries(home)
}

/// The value of the sample `series` (name and labels exactly as exposed), if present.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> client::HttpResponse {
    http(addr, "GET", path, headers, b"")
}

#[test]
fn probes_are_open_metrics_need_the_token_and_count_calls_by_skill_and_status() {
    let env = common::Env::new();
    let lib = env.library();
    env.install_granted(&lib, "probe-mem", "capabilities:\n  memory: write\n");
    let server = HttpServer::start(env.home.path(), &["--memory", "none"], &[("SKILLHOST_MCP_TOKEN", TOKEN)]);
    let auth = format!("Bearer {TOKEN}");
    let auth = [("Authorization", auth.as_str())];

    // Probes need no token and say nothing but the state.
    let health = get(server.addr, "/healthz", &[]);
    assert_eq!((health.status, health.json()), (200, json!({ "status": "ok" })), "{}", health.body);
    let ready = get(server.addr, "/readyz", &[]);
    assert_eq!((ready.status, ready.json()), (200, json!({ "status": "ready" })), "{}", ready.body);
    // Metrics name the skills: the token is required when one is set.
    let refused = get(server.addr, "/metrics", &[]);
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(!refused.body.contains("skillhost_"), "{}", refused.body);

    // A success, an invalid call, a call denied memory (--memory none) and a refused memory tool.
    let ok = rpc(server.addr, "tools/call", json!({ "name": "probe-mem", "arguments": { "mode": "noop" } }), &auth);
    assert_eq!(ok.json()["result"]["structuredContent"]["status"], "success", "{}", ok.body);
    let bad = rpc(server.addr, "tools/call", json!({ "name": "probe-mem", "arguments": { "n": -1 } }), &auth);
    assert_eq!(bad.json()["result"]["structuredContent"]["status"], "invalid-params", "{}", bad.body);
    let search = json!({ "name": "probe-mem", "arguments": { "mode": "memory-search", "arg": "baud" } });
    let denied = rpc(server.addr, "tools/call", search, &auth);
    let denials = denied.json()["result"]["structuredContent"]["denials"].clone();
    assert!(denials.as_array().unwrap().iter().any(|d| d["capability"] == "memory"), "{}", denied.body);
    let denied_status = denied.json()["result"]["structuredContent"]["status"].as_str().unwrap().to_string();
    assert_ne!(denied_status, "success", "{}", denied.body);
    let add = rpc(server.addr, "tools/call", json!({ "name": "memory_add", "arguments": { "text": "x" } }), &auth);
    assert!(add.json()["error"].is_object(), "{}", add.body);

    let m = get(server.addr, "/metrics", &auth);
    assert_eq!(m.status, 200);
    assert!(m.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/plain; version=0.0.4")));
    let text = &m.body;
    let count = |series: &str| sample(text, series).unwrap_or_else(|| panic!("no `{series}` in\n{text}"));
    assert_eq!(count(r#"skillhost_calls_total{skill="probe-mem",status="success"}"#), 1.0);
    assert_eq!(count(&format!(r#"skillhost_calls_total{{skill="probe-mem",status="{denied_status}"}}"#)), 1.0);
    assert_eq!(count(r#"skillhost_calls_total{skill="probe-mem",status="invalid-params"}"#), 1.0);
    assert_eq!(count(r#"skillhost_calls_total{skill="memory_add",status="refused"}"#), 1.0);
    assert!(count(r#"skillhost_denials_total{capability="memory"}"#) >= 1.0);
    assert_eq!(count(r#"skillhost_call_duration_seconds_count{skill="probe-mem"}"#), 3.0);
    assert_eq!(count(r#"skillhost_store_operation_duration_seconds_count{op="audit_append"}"#), 1.0);
    // The runtime exists now (the calls made it): its pool is exposed, idle.
    assert_eq!(count("skillhost_call_slots_in_use"), 0.0);
    assert!(count("skillhost_call_slots") >= 1.0);
    assert_eq!(count("skillhost_calls_queued"), 0.0);
    assert_eq!(count("skillhost_calls_in_flight"), 0.0);
    assert_eq!(count("skillhost_draining"), 0.0);

    // A damaged audit log cannot take the next call's line: not ready, and the reason is a
    // fixed phrase (no path, no line), while the process is still alive. (The file log's
    // own failure: on PostgreSQL no written line can change, and an unreachable store is
    // tests/cluster.rs's readyz test.)
    if common::database_for(env.home.path()).is_some() {
        return;
    }
    let log = env.home.path().join("audit/audit.jsonl");
    let mut damaged = std::fs::read(&log).unwrap();
    damaged.extend_from_slice(b"{\"not\": \"a chained line\"\n");
    std::fs::write(&log, damaged).unwrap();
    let ready = get(server.addr, "/readyz", &[]);
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.json(), json!({ "status": "not-ready", "reason": "audit log damaged" }));
    assert_eq!(get(server.addr, "/healthz", &[]).status, 200);
}

#[test]
fn sigterm_lets_the_call_in_flight_finish_audited_refuses_new_work_and_exits_zero() {
    let env = common::Env::new();
    let lib = env.library();
    env.install_granted(&lib, "probe", "limits:\n  wall_time_ms: 20000\n");
    // One second of grace: long enough to see the drain from outside before the socket closes.
    let mut server = HttpServer::start(env.home.path(), &["--drain-grace-secs", "1"], &[]);
    let addr = server.addr;
    let slow = json!({ "name": "probe", "arguments": { "mode": "sleep", "n": 2500 } });
    let mut in_flight = start_rpc(addr, "tools/call", slow);
    // Wait until the call runs (it holds a call slot) before the signal.
    let started = Instant::now();
    loop {
        let m = get(addr, "/metrics", &[]).body;
        if sample(&m, "skillhost_call_slots_in_use") == Some(1.0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the slow call never started:\n{m}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let signalled = Instant::now();
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(100));

    // During the grace: not ready, new requests refused with a reason, the process alive.
    let ready = get(addr, "/readyz", &[]);
    assert_eq!((ready.status, ready.json()), (503, json!({ "status": "draining" })), "{}", ready.body);
    assert_eq!(get(addr, "/healthz", &[]).status, 200);
    let refused = rpc(addr, "tools/call", json!({ "name": "probe", "arguments": { "mode": "noop" } }), &[]);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("draining"), "{}", refused.body);
    assert!(refused.headers.iter().any(|(k, v)| k == "connection" && v == "close"));

    // After the grace the socket is closed: a new connection is refused outright.
    std::thread::sleep(Duration::from_millis(1200));
    let connect = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
    assert!(connect.is_err(), "a new connection was accepted {:?} after SIGTERM", signalled.elapsed());

    // The call in flight still gets its answer.
    in_flight.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut raw = Vec::new();
    in_flight.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains("slept"), "the call in flight lost its answer: {raw}");

    // Exit 0, soon after the call ended (2.5 s of sleep, well within the 30 s drain).
    let status = server.wait_exit(Duration::from_secs(15)).expect("still running 15 s after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(signalled.elapsed() < Duration::from_secs(10), "the drain took {:?}", signalled.elapsed());

    // Its audit line is there (success), the refused request has none, and the chain holds.
    let lines = audit_lines(env.home.path());
    let calls: Vec<_> = lines.iter().filter(|l| l["skill"] == "probe").collect();
    assert_eq!(calls.len(), 1, "{lines:#?}");
    assert_eq!(calls[0]["status"], "success");
    assert_eq!(calls[0]["params"]["mode"], "sleep");
    cli(env.home.path(), &["audit", "verify"]);
}

#[test]
fn a_second_signal_cancels_the_calls_still_running_and_they_are_audited_as_cancelled() {
    let env = common::Env::new();
    let lib = env.library();
    env.install_granted(&lib, "probe", "limits:\n  wall_time_ms: 60000\n");
    let mut server = HttpServer::start(env.home.path(), &[], &[]);
    let addr = server.addr;
    let long = json!({ "name": "probe", "arguments": { "mode": "sleep", "n": 50000 } });
    let mut in_flight = start_rpc(addr, "tools/call", long);
    let started = Instant::now();
    while sample(&get(addr, "/metrics", &[]).body, "skillhost_call_slots_in_use") != Some(1.0) {
        assert!(started.elapsed() < Duration::from_secs(20), "the long call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    // With no grace the socket is closed at once.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
    assert!(server.wait_exit(Duration::from_millis(500)).is_none(), "exited with a call in flight");
    let second = Instant::now();
    server.signal(libc::SIGINT);
    let status = server.wait_exit(Duration::from_secs(15)).expect("still running 15 s after the second signal");
    assert!(status.success(), "{status:?}");
    assert!(second.elapsed() < Duration::from_secs(10), "{:?}", second.elapsed());
    // Its client is told, as rmcp tells it: a 500 with a sentence and no content type.
    let mut answer = String::new();
    let _ = in_flight.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
    assert!(answer.ends_with("no response message received from handler"), "{answer}");
    assert!(!answer.to_ascii_lowercase().contains("content-type"), "{answer}");
    let lines = audit_lines(env.home.path());
    let call = lines.iter().find(|l| l["skill"] == "probe").expect("the cancelled call has no audit line");
    assert_eq!(call["status"], "cancelled", "{call}");
    cli(env.home.path(), &["audit", "verify"]);
}

#[test]
fn log_format_json_writes_one_object_a_line() {
    let env = common::Env::new();
    let mut child = common::skillhost_command(env.home.path())
        .arg("--home")
        .arg(env.home.path())
        .arg("--workspace")
        .arg(workspace())
        .args(["--log-format", "json", "-v", "mcp", "--http", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .env_remove("SKILLHOST_MCP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("skillhost mcp: listening on http://")
        .unwrap()
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    assert_eq!(get(addr, "/readyz", &[]).status, 200);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let events: Vec<Value> = rest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let drain = events.iter().find(|e| e["fields"]["signal"] == "SIGTERM").unwrap_or_else(|| panic!("{rest}"));
    assert_eq!(drain["level"], "WARN");
    assert_eq!(drain["target"], "skillhost::mcp::ops");
    assert!(drain["fields"]["message"].as_str().unwrap().starts_with("draining"), "{drain}");
    assert!(drain["timestamp"].as_str().unwrap().ends_with('Z'), "{drain}");
    assert!(events.iter().any(|e| e["fields"]["message"] == "ready"), "{rest}");
}

/// A 2025-11-25 request over HTTP: `session` is the `Mcp-Session-Id` to send, if any.
fn legacy(addr: SocketAddr, id: u64, method: &str, params: Value, session: Option<&str>) -> client::HttpResponse {
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    if let Some(s) = session {
        headers.push(("Mcp-Session-Id", s));
    }
    http(addr, "POST", "/mcp", &headers, body.as_bytes())
}

fn initialize(addr: SocketAddr) -> client::HttpResponse {
    let params = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": { "name": "legacy-test", "version": "1.0" }
    });
    legacy(addr, 1, "initialize", params, None)
}

#[test]
fn stateless_serves_2025_11_25_requests_without_a_session_any_replica_can_answer() {
    let env = common::Env::new();
    let lib = env.library();
    env.install_granted(&lib, "probe", "");
    let call = json!({ "name": "probe", "arguments": { "mode": "echo", "arg": "hi" } });

    // Sessions (the default): a request without the session is refused, and a session is
    // known only to the host that made it, which is why a balancer would need stickiness.
    let a = HttpServer::start(env.home.path(), &[], &[]);
    let init = initialize(a.addr);
    let session = init.headers.iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v.clone());
    let session = session.unwrap_or_else(|| panic!("no session without --stateless: {:?}", init.headers));
    assert!(legacy(a.addr, 2, "tools/call", call.clone(), None).status >= 400);
    drop(a);
    let other = common::Env::new();
    other.install_granted(&other.library(), "probe", "");
    let b = HttpServer::start(other.home.path(), &[], &[]);
    let elsewhere = legacy(b.addr, 2, "tools/call", call.clone(), Some(&session));
    assert_eq!(elsewhere.status, 404, "another host knew the session: {}", elsewhere.body);
    drop(b);

    // --stateless: initialize answers without a session, and every later request is served
    // on its own, by whichever host gets it.
    let s = HttpServer::start(env.home.path(), &["--stateless"], &[]);
    let init = initialize(s.addr);
    assert_eq!(init.status, 200, "{}", init.body);
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-11-25", "{}", init.body);
    assert!(!init.headers.iter().any(|(k, _)| k == "mcp-session-id"), "{:?}", init.headers);
    let r = legacy(s.addr, 2, "tools/call", call, None);
    assert_eq!(r.status, 200, "{}", r.body);
    let out = r.json()["result"]["structuredContent"]["output"].as_str().unwrap().to_string();
    assert!(out.ends_with("|hi"), "{out}");
    // The cost: no GET stream for server-initiated messages (list changes).
    let stream =
        http(s.addr, "GET", "/mcp", &[("Accept", "text/event-stream"), ("MCP-Protocol-Version", "2025-11-25")], b"");
    assert_eq!(stream.status, 405, "{}", stream.body);
    // The audit line does not claim the client was rmcp (no handshake named it).
    let line = audit_lines(env.home.path()).into_iter().rfind(|l| l["skill"] == "probe").unwrap();
    let session = line["session"].as_str().unwrap();
    assert!(session.starts_with("mcp-http-unknown@unknown-"), "{line}");
}
