//! `just bench`: MCP calls per second through a real load balancer (Debian's haproxy, round
//! robin, the config tests/common/haproxy.rs tests and the README shows) to 1, 2 and 3
//! `skillhost mcp --http --stateless` hosts on one PostgreSQL store, next to one host on its
//! local home and one host on the store, both called directly, measured in the same run.
//!
//! Clients: `CLIENTS` tasks, each with its own reqwest client and so its own kept-alive
//! connection, sending 2026-07-28 stateless `tools/call`s of the probe's `noop` back to back
//! for `WINDOW`; every answer is checked. Every call writes its audit line (into the one
//! chain in PostgreSQL for the store figures). Each figure is the median of `ROUNDS`
//! interleaved runs.
//!
//! On 2 cores this shows the cost of the balancer and of more hosts sharing the same cores
//! (every host, haproxy, PostgreSQL and the clients run on them), not scaling: with the cores
//! full, a second host can only add overhead. The ratios are what to read.

#[path = "../../tests/common/haproxy.rs"]
mod haproxy;
#[path = "../../tests/common/postgres.rs"]
mod postgres;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const CLIENTS: usize = 16;
const WINDOW: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn bin() -> String {
    std::env::var("SKILLHOST_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_skillhost").to_string())
}

/// `skillhost` on `home`, on `store` (a PostgreSQL URL) or the home's own files.
fn skillhost(home: &Path, store: Option<&str>) -> Command {
    let mut c = Command::new(bin());
    c.arg("--home").arg(home).env_remove("SKILLHOST_STORE").env_remove("SKILLHOST_MCP_TOKEN").env_remove("RUST_LOG");
    if let Some(url) = store {
        c.env("SKILLHOST_STORE", url).env("SKILLHOST_STORE_KEY", KEY);
    }
    c
}

/// A `skillhost mcp --http --stateless` host; killed when dropped.
struct Host {
    child: Child,
    addr: SocketAddr,
}

impl Host {
    fn start(home: &Path, store: Option<&str>) -> Host {
        let mut child = skillhost(home, store)
            .args(["mcp", "--http", "127.0.0.1:0", "--stateless", "--memory", "none", "--max-calls", "64"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "skillhost mcp --http exited before listening");
            if let Some(rest) = line.trim().strip_prefix("skillhost mcp: listening on http://") {
                break rest.split(['/', ' ']).next().unwrap().parse().unwrap();
            }
        };
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while stderr.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                sink.clear();
            }
        });
        Host { child, addr }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Figure {
    calls: usize,
    wall: Duration,
    p50: Duration,
    p99: Duration,
}

impl Figure {
    fn per_s(&self) -> f64 {
        self.calls as f64 / self.wall.as_secs_f64()
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

/// `CLIENTS` clients calling `addr` back to back for `WINDOW` (after a warm-up).
fn calls(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> Figure {
    let url = format!("http://{addr}/mcp");
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "probe", "arguments": { "mode": "noop" },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { "name": "bench", "version": "1" },
            "io.modelcontextprotocol/clientCapabilities": {}
        } } })
    .to_string();
    rt.block_on(async move {
        let start = Instant::now() + Duration::from_millis(500);
        let end = start + WINDOW;
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (url, body) = (url.clone(), body.clone());
                tokio::spawn(async move {
                    let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
                    let call = || async {
                        let began = Instant::now();
                        let answer = client
                            .post(&url)
                            .header("Content-Type", "application/json")
                            .header("Accept", "application/json, text/event-stream")
                            .header("MCP-Protocol-Version", "2026-07-28")
                            .header("Mcp-Method", "tools/call")
                            .header("Mcp-Name", "probe")
                            .body(body.clone())
                            .send()
                            .await
                            .expect("the call got no answer");
                        let status = answer.status();
                        let text = answer.text().await.unwrap();
                        assert!(status.is_success() && text.contains(r#""output":"ok""#), "{status}: {text}");
                        began.elapsed()
                    };
                    // Warm-up: the connection, each host's compiled skill and instance pool.
                    while Instant::now() < start {
                        call().await;
                    }
                    let mut samples = Vec::new();
                    while Instant::now() < end {
                        samples.push(call().await);
                    }
                    samples
                })
            })
            .collect();
        let mut samples = Vec::new();
        for t in tasks {
            samples.extend(t.await.unwrap());
        }
        let wall = WINDOW;
        let calls = samples.len();
        Figure { calls, wall, p50: percentile(&mut samples, 0.5), p99: percentile(&mut samples, 0.99) }
    })
}

fn median(mut runs: Vec<Figure>) -> Figure {
    runs.sort_by(|a, b| a.per_s().total_cmp(&b.per_s()));
    runs.swap_remove(runs.len() / 2)
}

fn install_probe(home: &Path, store: Option<&str>) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let probe = repo.join("target/skills/probe");
    assert!(probe.join("skill.wasm").exists(), "run `just build-skills` first");
    let out = skillhost(home, store).args(["skill", "install"]).arg(&probe).arg("--yes").output().unwrap();
    assert!(out.status.success(), "skill install: {}", String::from_utf8_lossy(&out.stderr));
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let home = |name: &str| -> PathBuf { tmp.path().join(name) };

    let local_home = home("local");
    install_probe(&local_home, None);
    let db = postgres::database();
    let url = db.url();
    let out = skillhost(&home("host0"), Some(&url)).args(["store", "migrate"]).output().unwrap();
    assert!(out.status.success(), "store migrate: {}", String::from_utf8_lossy(&out.stderr));
    install_probe(&home("host0"), Some(&url));

    let local = Host::start(&local_home, None);
    let hosts: Vec<Host> = (0..3).map(|i| Host::start(&home(&format!("host{i}")), Some(&url))).collect();
    let addrs: Vec<SocketAddr> = hosts.iter().map(|h| h.addr).collect();
    let balancers: Vec<haproxy::Haproxy> = (1..=3).map(|n| haproxy::Haproxy::start(&addrs[..n])).collect();
    // haproxy marks a host up after two passing /readyz checks (200 ms apart).
    std::thread::sleep(Duration::from_millis(800));

    let labels = [
        "1 host, local home, direct (baseline)",
        "1 host, PostgreSQL store, direct",
        "haproxy -> 1 host, PostgreSQL store",
        "haproxy -> 2 hosts, PostgreSQL store",
        "haproxy -> 3 hosts, PostgreSQL store",
    ];
    let targets = [local.addr, hosts[0].addr, balancers[0].addr, balancers[1].addr, balancers[2].addr];
    let mut runs: Vec<Vec<Figure>> = (0..targets.len()).map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (i, addr) in targets.iter().enumerate() {
            runs[i].push(calls(&rt, *addr));
        }
    }
    let figures: Vec<Figure> = runs.into_iter().map(median).collect();
    let audited = db.psql("SELECT count(*) FROM skillhost_audit");
    println!(
        "MCP calls through haproxy, {CLIENTS} clients (own connections, 2026-07-28 stateless tools/call), {}s windows, median of {ROUNDS} interleaved runs",
        WINDOW.as_secs()
    );
    println!("{:<42} {:>10} {:>10} {:>10} {:>8}", "", "calls/s", "p50", "p99", "ratio");
    let base = figures[0].per_s();
    for (label, f) in labels.iter().zip(&figures) {
        println!(
            "{label:<42} {:>10.0} {:>8.2}ms {:>8.2}ms {:>7.2}x",
            f.per_s(),
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3,
            f.per_s() / base
        );
    }
    println!("(ratio: calls/s to the baseline's; {audited} calls audited in the store's one chain)");
    println!("2 cores run every host, haproxy, PostgreSQL and the clients: more hosts add overhead here, not capacity");
    let verified = skillhost(&home("host1"), Some(&url)).args(["audit", "verify"]).output().unwrap();
    assert!(verified.status.success(), "audit verify: {}", String::from_utf8_lossy(&verified.stderr));
}
