//! The chaos test of issue 33: three `skillhost mcp --http --stateless` hosts, each with a
//! home of its own, on one PostgreSQL store (the fixture's), behind haproxy (round robin,
//! the README's config). Sixteen clients call a skill and add memories for a few seconds
//! (fifteen plain JSON-RPC clients on their own keep-alive connections, and the official
//! Python MCP client) while one host is SIGKILLed and restarted on the same port, home and
//! store, and another is drained with SIGTERM, exits 0, and is restarted. Afterwards:
//!
//! 1. every call that got an answer has exactly one audit line in PostgreSQL's chain, and no
//!    call's marker has two;
//! 2. every answered `memory_add` is readable from every host, the same record on each,
//!    once;
//! 3. the chain verifies;
//! 4. the clients saw only connection errors and 502/503 (never a wrong answer);
//! 5. the drained host exited 0.
//!
//! PostgreSQL (`.ci/postgres`), haproxy (`.ci/haproxy`) and the Python SDK
//! (`.ci/mcp-clients`) are required: a missing one fails the test naming its installer.

#[path = "mcp/client.rs"]
mod client;
mod common;
#[path = "common/haproxy.rs"]
mod haproxy;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haproxy::Haproxy;
use serde_json::{Value, json};

/// Clients at once: the plain ones and the Python SDK's.
const CLIENTS: usize = 16;
/// How long the clients call.
const LOAD: Duration = Duration::from_secs(9);
/// When (after the load started) one host is killed, and how long it stays down.
const KILL_AT: Duration = Duration::from_millis(1500);
const DOWN_FOR: Duration = Duration::from_millis(1000);
/// When another host is drained.
const DRAIN_AT: Duration = Duration::from_millis(4500);

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// One host: its home (kept across restarts), its fixed port, the running process if any.
struct Node {
    name: String,
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    addr: SocketAddr,
    url: String,
    key_file: PathBuf,
    logs: PathBuf,
    child: Option<Child>,
    starts: usize,
    /// The process id of each start, in order.
    pids: Vec<u32>,
}

impl Node {
    fn new(name: &str, addr: SocketAddr, url: &str, key_file: &Path, logs: &Path) -> Node {
        Node {
            name: name.to_string(),
            home: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            addr,
            url: url.to_string(),
            key_file: key_file.to_path_buf(),
            logs: logs.to_path_buf(),
            child: None,
            starts: 0,
            pids: Vec::new(),
        }
    }

    /// `skillhost` with this host's home, workspace and store.
    fn command(&self) -> Command {
        let mut c = common::skillhost_command(self.home.path());
        c.arg("--workspace")
            .arg(self.workspace.path())
            .env("SKILLHOST_STORE", &self.url)
            .env("SKILLHOST_STORE_KEY_FILE", &self.key_file)
            .env_remove("SKILLHOST_MCP_TOKEN");
        c
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}: skillhost {args:?}: {}{}",
            self.name,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn log_path(&self, start: usize) -> PathBuf {
        self.logs.join(format!("{}-{start}.log", self.name))
    }

    /// Start the server on this host's port and wait until `/readyz` says ready.
    fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        self.starts += 1;
        let log = std::fs::File::create(self.log_path(self.starts)).unwrap();
        let child = self
            .command()
            .args(["mcp", "--http", &self.addr.to_string(), "--stateless", "--memory", "write"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.pids.push(child.id());
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("{} (start {}) exited before it was ready ({status}):\n{}", self.name, self.starts, self.log());
            }
            if let Some(200) = get_status(self.addr, "/readyz") {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{} (start {}) not ready after 20 s on {}:\n{}",
                self.name,
                self.starts,
                self.addr,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().expect("not running").id();
        // SAFETY: kill(2) on our own child, not yet waited for: the pid is still its.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0, "kill({signal}) of {} failed", self.name);
    }

    /// Wait at most `within` for the server to exit.
    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.as_mut().expect("not running").try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// The stderr of the current (or last) start.
    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path(self.starts)).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The status of a GET on a fresh connection, or None if it failed.
fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    raw.split_whitespace().nth(1)?.parse().ok()
}

/// A free loopback port, for a host that must come back on the same one.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// What one request got.
#[derive(Debug)]
enum Outcome {
    /// A 200 answer carrying a JSON-RPC message.
    Answer(Value),
    /// Another HTTP status (haproxy's 502/503, a draining host's 503...).
    Status(u16, String),
    /// The connection failed or was cut before a whole answer came.
    Connection(String),
}

/// A plain HTTP/1.1 JSON-RPC client on one kept-alive connection to the balancer, made
/// again whenever it breaks or the other side closes it.
struct KeepAlive {
    addr: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
    connects: usize,
}

impl KeepAlive {
    fn new(addr: SocketAddr) -> KeepAlive {
        KeepAlive { addr, conn: None, connects: 0 }
    }

    /// A stateless 2026-07-28 `tools/call` of `tool` with `arguments`.
    fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Outcome {
        let params = json!({
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": { "name": "chaos-client", "version": "1.0" },
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        });
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }).to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        match self.exchange(format!("{head}{body}").as_bytes()) {
            Ok((status, close, body)) => {
                if close {
                    self.conn = None;
                }
                if status != 200 {
                    return Outcome::Status(status, body);
                }
                match message_of(&body) {
                    Some(v) => Outcome::Answer(v),
                    None => Outcome::Status(status, format!("no JSON-RPC message in a 200 answer: {body}")),
                }
            }
            Err(e) => {
                self.conn = None;
                Outcome::Connection(e.to_string())
            }
        }
    }

    /// Send `request` and read one whole response: its status, whether the connection is
    /// to be closed after it, and the body (de-chunked).
    fn exchange(&mut self, request: &[u8]) -> std::io::Result<(u16, bool, String)> {
        if self.conn.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            self.connects += 1;
            self.conn = Some(BufReader::new(s));
        }
        let conn = self.conn.as_mut().unwrap();
        conn.get_mut().write_all(request)?;
        let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, what.to_string());
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(broken("closed before an answer"));
        }
        let status: u16 =
            line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| broken("no status line"))?;
        let (mut length, mut chunked, mut close) = (None, false, false);
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 {
                return Err(broken("closed inside the head"));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
                match k.as_str() {
                    "content-length" => length = v.parse::<usize>().ok(),
                    "transfer-encoding" => chunked = v.contains("chunked"),
                    "connection" => close = v.contains("close"),
                    _ => {}
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                if conn.read_line(&mut line)? == 0 {
                    return Err(broken("closed inside a chunked body"));
                }
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| broken("bad chunk size"))?;
                if size == 0 {
                    // Trailers, then the empty line.
                    loop {
                        line.clear();
                        if conn.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let mut chunk = vec![0; size + 2];
                conn.read_exact(&mut chunk)?;
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            conn.read_exact(&mut body)?;
        } else {
            conn.read_to_end(&mut body)?;
            close = true;
        }
        Ok((status, close, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// The JSON-RPC message of a body: plain JSON, or the last `data:` event with an id.
fn message_of(body: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return Some(v);
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|v| v.get("id").is_some())
}

/// A word of letters only that no other `n` gives (so memories never share a word, and
/// the memory never merges two of them as one fact).
fn word(n: u64) -> String {
    const CONSONANTS: &[u8] = b"bdfgklmnprstvz";
    const VOWELS: &[u8] = b"aeiou";
    let mut n = n;
    let mut w = String::new();
    // At least four syllables, a bijection from n.
    for _ in 0..4 {
        w.push(CONSONANTS[(n % 14) as usize] as char);
        n /= 14;
        w.push(VOWELS[(n % 5) as usize] as char);
        n /= 5;
    }
    while n > 0 {
        w.push(CONSONANTS[(n % 14) as usize] as char);
        n /= 14;
        w.push(VOWELS[(n % 5) as usize] as char);
        n /= 5;
    }
    w
}

/// A memory's content: three words of its own, the first of which is its marker.
fn memory_content(n: u64) -> (String, String) {
    let marker = format!("q{}", word(n));
    (marker.clone(), format!("{marker} {} {}", word(n + 1_000_000), word(n + 2_000_000)))
}

/// What one client sent and got.
#[derive(Default)]
struct Tally {
    /// Skill calls answered right: their markers.
    skill_answered: Vec<String>,
    /// memory_add answered: marker, content, the record id the answer gave.
    memory_answered: Vec<(String, String, u64)>,
    /// Connection-level failures (refused, cut, closed early).
    connection_errors: Vec<String>,
    /// 502/503 answers.
    unavailable: Vec<String>,
    /// Anything else: wrong answers, unexpected errors or statuses.
    wrong: Vec<String>,
    connects: usize,
}

fn run_client(c: usize, lb: SocketAddr, until: Instant) -> Tally {
    let mut client = KeepAlive::new(lb);
    let mut t = Tally::default();
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let memory = i.is_multiple_of(3);
        let (tool, marker, arguments, content) = if memory {
            let (marker, content) = memory_content(c as u64 * 100_000 + i);
            ("memory_add", marker, json!({ "content": content }), Some(content))
        } else {
            let marker = format!("c{c}-{i}");
            ("probe", marker.clone(), json!({ "mode": "echo", "arg": marker }), None)
        };
        match client.call(i, tool, arguments) {
            Outcome::Answer(v) => {
                let result = &v["result"];
                let right_id = v["id"] == json!(i);
                if let Some(content) = content {
                    match result["structuredContent"]["id"].as_u64() {
                        Some(id) if right_id && result["isError"] == false => {
                            t.memory_answered.push((marker, content, id))
                        }
                        _ => t.wrong.push(format!("client {c}: memory_add {marker}: {v}")),
                    }
                } else {
                    let output = result["structuredContent"]["output"].as_str().unwrap_or_default();
                    if right_id && result["isError"] == false && output.ends_with(&format!("|{marker}")) {
                        t.skill_answered.push(marker);
                    } else {
                        t.wrong.push(format!("client {c}: probe {marker}: {v}"));
                    }
                }
            }
            Outcome::Status(502 | 503, body) => t.unavailable.push(format!("{tool} {marker}: {body:.120}")),
            Outcome::Status(status, body) => t.wrong.push(format!("client {c}: {tool} {marker}: {status} {body}")),
            Outcome::Connection(e) => t.connection_errors.push(format!("{tool} {marker}: {e}")),
        }
    }
    t.connects = client.connects;
    t
}

fn python() -> PathBuf {
    let py = common::require_installed(
        common::repo().join("target/mcp-clients/venv/bin/python"),
        "the Python MCP SDK",
        common::Needs::McpClients,
    );
    // The chaos test needs every client it names: no opt-out turns this one into a skip.
    py.unwrap_or_else(|| panic!("the chaos test needs the Python MCP SDK: run `bash .ci/mcp-clients`"))
}

#[test]
fn three_hosts_on_one_store_lose_nothing_answered_when_one_is_killed_and_one_drained() {
    let test_started = Instant::now();
    let py = python();
    let db = common::postgres::database();
    let url = db.url();
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("store.key");
    std::fs::write(&key_file, KEY).unwrap();
    let logs = tempfile::tempdir().unwrap();

    // Three hosts on fixed ports (a restarted host comes back on its own), one store.
    let addrs = [free_port(), free_port(), free_port()];
    let mut nodes: Vec<Node> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| Node::new(&format!("host{i}"), *a, &url, &key_file, logs.path()))
        .collect();
    nodes[0].cli(&["store", "migrate"]);
    // The skill, installed once through the CLI: every host serves it from the store.
    let env = common::Env::new();
    let probe = env.probe_as("probe", "");
    nodes[0].cli(&["skill", "install", probe.to_str().unwrap(), "--yes"]);
    for n in &mut nodes {
        n.start();
    }
    let lb = Haproxy::start(&addrs);
    // Every host serves the skill before the load starts (haproxy's checks see them up too).
    for n in &nodes {
        let warm = format!("warm-{}", n.name);
        let call = json!({ "name": "probe", "arguments": { "mode": "echo", "arg": warm } });
        let r = client::rpc(n.addr, "tools/call", call, &[]);
        assert!(r.body.contains(&format!("|{warm}")), "{} does not serve the probe: {}", n.name, r.body);
    }
    std::thread::sleep(Duration::from_millis(500));

    // The load: 15 plain clients and the Python SDK's.
    let load_started = Instant::now();
    let until = load_started + LOAD;
    let lb_addr = lb.addr;
    let plain: Vec<_> = (0..CLIENTS - 1).map(|c| std::thread::spawn(move || run_client(c, lb_addr, until))).collect();
    let python_client = Command::new(&py)
        .arg(common::repo().join("tests/mcp/python_chaos.py"))
        .arg(format!("http://{lb_addr}/mcp"))
        .arg(LOAD.as_secs_f64().to_string())
        .arg("py")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let python_out = Arc::new(std::sync::Mutex::new(None));
    let python_waiter = {
        let out = python_out.clone();
        std::thread::spawn(move || {
            let o = python_client.wait_with_output().unwrap();
            *out.lock().unwrap() = Some(o);
        })
    };

    // SIGKILL host0, and bring it back on the same port, home and store.
    std::thread::sleep(KILL_AT.saturating_sub(load_started.elapsed()));
    nodes[0].signal(libc::SIGKILL);
    let killed = nodes[0].wait_exit(Duration::from_secs(5)).expect("host0 survived SIGKILL");
    assert!(!killed.success(), "{killed:?}");
    std::thread::sleep(DOWN_FOR);
    let restart = Instant::now();
    nodes[0].start();
    let host0_back = restart.elapsed();

    // Drain host1 with SIGTERM: it must exit 0; then restart it.
    std::thread::sleep(DRAIN_AT.saturating_sub(load_started.elapsed()));
    nodes[1].signal(libc::SIGTERM);
    let drain_started = Instant::now();
    let drained = nodes[1].wait_exit(Duration::from_secs(15));
    let drain_took = drain_started.elapsed();
    let drain_log = nodes[1].log();
    let drained = drained.unwrap_or_else(|| panic!("host1 still running 15 s after SIGTERM:\n{drain_log}"));
    assert!(drained.success(), "the drained host exited {drained:?}, not 0:\n{drain_log}");
    // (Its replica stopped where an op ended and said so: the restart goes on from there.)
    std::thread::sleep(Duration::from_millis(300));
    nodes[1].start();
    let restart_log = nodes[1].log();
    assert!(
        !restart_log.contains("rebuilding"),
        "host1 exited cleanly, yet its restart rebuilds its memory replica:\n{restart_log}"
    );
    let host1_back = load_started.elapsed();

    let tallies: Vec<Tally> = plain.into_iter().map(|h| h.join().unwrap()).collect();
    python_waiter.join().unwrap();
    let python_out = python_out.lock().unwrap().take().unwrap();
    assert!(
        python_out.status.success(),
        "the Python client failed: {}\n{}",
        String::from_utf8_lossy(&python_out.stdout),
        String::from_utf8_lossy(&python_out.stderr)
    );
    let seen: Value = serde_json::from_slice(&python_out.stdout).unwrap_or_else(|e| {
        panic!("the Python client's output is not JSON ({e}): {}", String::from_utf8_lossy(&python_out.stdout))
    });

    // 4. Only connection errors and 502/503: never a wrong answer.
    let mut wrong: Vec<String> = tallies.iter().flat_map(|t| t.wrong.clone()).collect();
    let mut answered_skill: Vec<String> = tallies.iter().flat_map(|t| t.skill_answered.clone()).collect();
    let answered_memory: Vec<(String, String, u64)> = tallies.iter().flat_map(|t| t.memory_answered.clone()).collect();
    let connection_errors: Vec<String> = tallies.iter().flat_map(|t| t.connection_errors.clone()).collect();
    let unavailable: Vec<String> = tallies.iter().flat_map(|t| t.unavailable.clone()).collect();
    let python_errors: Vec<String> =
        seen["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect();
    let mut python_answered = 0;
    for a in seen["answered"].as_array().unwrap() {
        let marker = a["marker"].as_str().unwrap();
        let output = a["structured"]["output"].as_str().unwrap_or_default();
        if a["is_error"] == false && output.ends_with(&format!("|{marker}")) {
            answered_skill.push(marker.to_string());
            python_answered += 1;
        } else {
            wrong.push(format!("python: {a}"));
        }
    }
    // The Python SDK reports a balancer's 502/503 or a cut connection as an exception:
    // anything else it raised is a wrong answer.
    let python_wrong: Vec<&String> = python_errors
        .iter()
        .filter(|e| {
            !["502", "503", "Connect", "RemoteProtocolError", "ReadError", "Timeout", "closed", "Connection"]
                .iter()
                .any(|ok| e.contains(ok))
        })
        .collect();
    let retried = lb.retried();
    let connects: usize = tallies.iter().map(|t| t.connects).sum();
    let summary = format!(
        "chaos: {} answered calls ({} skill calls incl. {python_answered} from the Python SDK, {} memory_add) in {:?} with 3 hosts (host0 SIGKILLed and serving again {host0_back:?} after its restart, host1 drained in {drain_took:?} and serving again {host1_back:?} into the load); client-side failures: {} connection errors, {} 502/503 answers, {} Python SDK exceptions; {connects} connections by the plain clients; haproxy retried {retried} requests",
        answered_skill.len() + answered_memory.len(),
        answered_skill.len(),
        answered_memory.len(),
        LOAD,
        connection_errors.len(),
        unavailable.len(),
        python_errors.len(),
    );
    eprintln!("{summary}");
    let lb_log = lb.log();
    let unusual: Vec<&str> =
        lb_log.lines().filter(|l| !l.contains(" 200 ") && !l.contains("Server skillhost/")).collect();
    eprintln!("haproxy's answers other than 200:\n{}", unusual.join("\n"));
    eprintln!("connection errors: {connection_errors:#?}\n502/503: {unavailable:#?}\npython: {python_errors:#?}");
    assert!(wrong.is_empty(), "wrong answers during the chaos ({}):\n{}", wrong.len(), wrong.join("\n"));
    assert!(python_wrong.is_empty(), "the Python client saw errors other than the balancer's: {python_wrong:#?}");
    assert!(
        answered_skill.len() >= 100 && answered_memory.len() >= 20 && python_answered >= 10,
        "too little got through for the test to mean anything: {summary}"
    );

    // 1. Every answered call has exactly one audit line; no marker has two.
    // (`host` is the writing process, `hostname:pid`; a line holds no newline.)
    let rows = db.psql("SELECT host || ' ' || line FROM skillhost_audit ORDER BY seq");
    let mut audited: BTreeMap<String, usize> = BTreeMap::new();
    let mut memory_lines: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_process: BTreeMap<u32, usize> = BTreeMap::new();
    for row in rows.lines() {
        let (host, line) = row.split_once(' ').unwrap_or_else(|| panic!("not `host line`: {row}"));
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("an audit line is not JSON ({e}): {line}"));
        if let Some(pid) = host.rsplit(':').next().and_then(|p| p.parse().ok()) {
            *by_process.entry(pid).or_default() += 1;
        }
        match v["skill"].as_str() {
            Some("probe") => {
                if let Some(marker) = v["params"]["arg"].as_str() {
                    *audited.entry(marker.to_string()).or_default() += 1;
                }
            }
            Some("memory_add") => {
                let content = v["params"]["content"].as_str().unwrap_or_default();
                let marker = content.split_whitespace().next().unwrap_or_default();
                *memory_lines.entry(marker.to_string()).or_default() += 1;
            }
            _ => {}
        }
    }
    let twice: Vec<_> = audited.iter().chain(&memory_lines).filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "calls with more than one audit line (run twice?): {twice:?}");
    let unaudited: Vec<&String> = answered_skill.iter().filter(|m| !audited.contains_key(*m)).collect();
    assert!(unaudited.is_empty(), "answered skill calls without an audit line: {unaudited:?}");
    let unaudited: Vec<&String> =
        answered_memory.iter().map(|(m, _, _)| m).filter(|m| !memory_lines.contains_key(*m)).collect();
    assert!(unaudited.is_empty(), "answered memory_add calls without an audit line: {unaudited:?}");

    // Every start of every host took part: the killed and the drained one before and after.
    for n in &nodes {
        for (start, pid) in n.pids.iter().enumerate() {
            let lines = by_process.get(pid).copied().unwrap_or(0);
            assert!(
                lines >= 3,
                "{} (start {}, pid {pid}) wrote {lines} audit lines: it took no part in the load",
                n.name,
                start + 1
            );
        }
    }
    let per_start: Vec<String> = nodes
        .iter()
        .map(|n| {
            let counts: Vec<String> =
                n.pids.iter().map(|p| by_process.get(p).copied().unwrap_or(0).to_string()).collect();
            format!("{} {}", n.name, counts.join("+"))
        })
        .collect();

    // 3. The chain verifies (every host's lines, the killed one's included).
    let verified = nodes[2].cli(&["audit", "verify"]);
    assert!(verified.contains("intact"), "{verified}");

    // 2. Every answered memory_add is readable from every host: the record its answer named,
    // with its content, once; the replicas agree (the killed host's included).
    let ids: BTreeSet<u64> = answered_memory.iter().map(|(_, _, id)| *id).collect();
    assert_eq!(ids.len(), answered_memory.len(), "two answered memory_add calls were given the same record");
    let mut lists = Vec::new();
    for n in &nodes {
        let started = Instant::now();
        let records = loop {
            let listed: Value = serde_json::from_str(&n.cli(&["--json", "memory", "list"])).unwrap();
            let records: BTreeMap<u64, String> = listed
                .as_array()
                .unwrap_or_else(|| panic!("memory list is not an array: {listed}"))
                .iter()
                .map(|r| {
                    let r = r.get("record").unwrap_or(r);
                    (r["id"].as_u64().unwrap(), r["content"].as_str().unwrap().to_string())
                })
                .collect();
            if ids.iter().all(|id| records.contains_key(id)) || started.elapsed() > Duration::from_secs(3) {
                break records;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        for (marker, content, id) in &answered_memory {
            match records.get(id) {
                Some(c) if c == content => {}
                other => panic!("{}: memory_add {marker} was answered as record {id}, which reads {other:?}", n.name),
            }
        }
        let mut contents: BTreeMap<&String, usize> = BTreeMap::new();
        for c in records.values() {
            *contents.entry(c).or_default() += 1;
        }
        let dup: Vec<_> = contents.iter().filter(|(_, n)| **n > 1).collect();
        assert!(dup.is_empty(), "{}: duplicate memory records: {dup:?}", n.name);
        lists.push((n.name.clone(), records));
    }
    for (name, records) in &lists[1..] {
        assert!(records == &lists[0].1, "{name}'s memory differs from {}'s", lists[0].0);
    }
    eprintln!(
        "{summary}; audit lines per host start: {}; test took {:?}",
        per_start.join(", "),
        test_started.elapsed()
    );
}
