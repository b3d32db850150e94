//! `just bench`: `skillhost mcp` end to end, against the CLI path measured in the same run
//! (the machine is shared and noisy, so ratios matter more than absolutes).
//!
//! Figures, all through the real `skillhost` binary with the audit log on (every call is a
//! synced, hash-chained line):
//! - `tools/call` of the trivial probe (mode noop) over stdio, one sequential client: the
//!   round trip p50/p99 (JSON-RPC line out, answer line back);
//! - calls per second over Streamable HTTP (stateless 2026-07-28 POSTs, keep-alive) with 16
//!   concurrent clients;
//! - the baseline: the same call as a `skillhost skill run` process (spawn, open the home,
//!   load the compiled component from the cache, run, audit, exit);
//! - the floor under any stdio server: a line echoed through a `cat` process over the same
//!   kind of pipes (two wake-ups of a sleeping process per round trip, which on a virtual
//!   machine cost tens of microseconds whatever the server does).
//!
//! The clients run on the same cores as the server; their cost is in the figures.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost::library::Library;

/// The `skillhost` binary measured: this build's, or `SKILLHOST_BENCH_BIN` (an older build,
/// for an A/B on the same machine state).
fn bin() -> String {
    std::env::var("SKILLHOST_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_skillhost").to_string())
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Kills the server when the bench ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("--home").arg(home).args(["mcp", "--memory", "none"]).args(args).env_remove("SKILLHOST_MCP_TOKEN");
    cmd
}

fn stdio_round_trips(home: &Path, warmup: usize, n: usize) -> Vec<Duration> {
    let mut child = serve(home, &[]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let _server = Server(child);
    let mut line = String::new();
    let mut exchange = |msg: &Value, answer: bool| -> Value {
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        if !answer {
            return Value::Null;
        }
        line.clear();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "bench", "version": "1" } } });
    exchange(&init, true);
    exchange(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }), false);
    let mut samples = Vec::with_capacity(n);
    for id in 1..=(warmup + n) {
        let call = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "probe", "arguments": { "mode": "noop" } } });
        let started = Instant::now();
        let r = exchange(&call, true);
        let took = started.elapsed();
        assert_eq!(r["result"]["structuredContent"]["output"], "ok", "{r}");
        if id > warmup {
            samples.push(took);
        }
    }
    samples
}

/// Calls answered per second by `clients` concurrent keep-alive HTTP clients over `window`.
fn http_throughput(home: &Path, clients: usize, window: Duration) -> f64 {
    let mut child =
        serve(home, &["--http", "127.0.0.1:0", "--max-calls", "64"]).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let _server = Server(child);
    let addr = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "skillhost mcp --http exited before listening");
        if let Some(rest) = line.trim().strip_prefix("skillhost mcp: listening on http://") {
            break rest.trim_end_matches("/mcp").to_string();
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        while stderr.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    let url = format!("http://{addr}/mcp");
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "probe", "arguments": { "mode": "noop" },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { "name": "bench", "version": "1" },
            "io.modelcontextprotocol/clientCapabilities": {}
        } } })
    .to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
    let call = {
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        move || {
            let req = http
                .post(&url)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "tools/call")
                .header("Mcp-Name", "probe")
                .body(body.clone());
            async move {
                let r = req.send().await.expect("the server stopped answering");
                assert_eq!(r.status(), 200);
                let text = r.text().await.unwrap();
                assert!(text.contains(r#""output":"ok""#), "{text}");
            }
        }
    };
    rt.block_on(async {
        for _ in 0..200 {
            call().await;
        }
    });
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (call, done) = (call.clone(), done.clone());
                tokio::spawn(async move {
                    while started.elapsed() < window {
                        call().await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Round trips of one line through `cat` (pipes both ways, like the stdio client and server).
fn pipe_echo_round_trips(n: usize) -> Option<Vec<Duration>> {
    let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().ok()?;
    let mut stdin = child.stdin.take()?;
    let mut stdout = BufReader::new(child.stdout.take()?);
    let _cat = Server(child);
    let line = format!("{}\n", "x".repeat(200));
    let mut back = String::new();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 200 {
        let started = Instant::now();
        stdin.write_all(line.as_bytes()).ok()?;
        stdin.flush().ok()?;
        back.clear();
        stdout.read_line(&mut back).ok()?;
        if i >= 200 {
            samples.push(started.elapsed());
        }
    }
    Some(samples)
}

fn cli_runs(home: &Path, n: usize) -> Vec<Duration> {
    (0..n + 2)
        .map(|_| {
            let started = Instant::now();
            let out = Command::new(bin())
                .arg("--home")
                .arg(home)
                .args(["skill", "run", "probe", "-p", "mode=noop"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            started.elapsed()
        })
        .skip(2)
        .collect()
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let probe = repo.join("target/skills/probe");
    assert!(probe.join("skill.wasm").exists(), "run `just build-skills` first");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    {
        let lib = Library::open(&home, None, None).unwrap();
        lib.install(&probe, &|_| Ok(None)).unwrap();
    }

    let mut stdio = stdio_round_trips(&home, 200, 3000);
    let (stdio_p50, stdio_p99) = (percentile(&mut stdio, 0.5), percentile(&mut stdio, 0.99));
    let echo_p50 = pipe_echo_round_trips(3000).map(|mut s| percentile(&mut s, 0.5));
    const CLIENTS: usize = 16;
    let http_per_sec = http_throughput(&home, CLIENTS, Duration::from_secs(4));
    let mut cli = cli_runs(&home, 30);
    let cli_p50 = percentile(&mut cli, 0.5);
    let audited = Library::open(&home, None, None).unwrap().audit_log().verify().unwrap().entries;

    println!("mcp (probe noop, audit on: {audited} lines written and verified):");
    println!("  stdio tools/call p50 (1 sequential client) {:>10.1} us", us(stdio_p50));
    println!("  stdio tools/call p99                       {:>10.1} us", us(stdio_p99));
    match echo_p50 {
        Some(e) => println!(
            "  floor: a line echoed through `cat` p50     {:>10.1} us   (stdio p50 is {:.1}x it)",
            us(e),
            us(stdio_p50) / us(e)
        ),
        None => println!("  floor: a line echoed through `cat`         skipped (no `cat`)"),
    }
    println!("  http tools/call, {CLIENTS} concurrent clients    {:>10.0} calls/s", http_per_sec);
    println!("  baseline `skillhost skill run` p50         {:>10.1} us", us(cli_p50));
    println!("  ratio stdio p50 to the CLI process         {:>10.1}x faster", us(cli_p50) / us(stdio_p50));
    println!(
        "  ratio http throughput to CLI processes     {:>10.1}x ({:.0} CLI runs/s back to back)",
        http_per_sec * cli_p50.as_secs_f64(),
        1.0 / cli_p50.as_secs_f64()
    );
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("targets:");
    println!("  stdio p50 <= 150 us: {} ({:.1} us)", verdict(us(stdio_p50) <= 150.0), us(stdio_p50));
    println!(
        "  >= 5000 calls/s over HTTP with {CLIENTS} clients: {} ({http_per_sec:.0}/s)",
        verdict(http_per_sec >= 5000.0)
    );
}
