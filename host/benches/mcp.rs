//! `just bench`: `skillhost mcp` end to end as real clients see it, next to the floor under
//! any server measured in the same run (the machine is shared and noisy, so ratios matter
//! more than absolutes).
//!
//! All through the real `skillhost` binary with the audit log on (every call a hash-chained
//! line, synced behind the answers), the trivial probe skill in `noop` mode:
//! - **stdio**, one sequential client: round trip p50/p99 (JSON-RPC line out, answer back),
//!   calls/s, and the server's CPU per call;
//! - **Streamable HTTP**, 2025-11-25 session requests and 2026-07-28 stateless ones, with 1
//!   and 16 clients: each client its own kept-alive connection on a plain blocking socket
//!   (default options: no TCP_NODELAY, no TCP_QUICKACK, like Python's `http.client` or
//!   curl), one request after another: p50/p99, calls/s, server CPU per call; and 2025-11-25
//!   requests without a session to a server started with `--stateless` (as behind a balancer);
//! - **the floor**, two of them. A server with skillhost's stack and none of its work: this
//!   bench re-run as a tokio server on the same transports (rmcp's stdio pipes; hyper and
//!   axum over loopback with TCP_NODELAY) answering every request with the real answer's bytes,
//!   measured by the same clients, 1 and 16 of them; what `skillhost mcp` uses beyond it is its
//!   own work. And the bytes alone: through a `cat` process over pipes (as the stdio client
//!   and server), and through a loopback socket to an echo thread (as the HTTP ones); two
//!   wake-ups per round trip, which on a virtual machine cost tens of microseconds whatever
//!   the server does;
//! - the baseline: the same call as a `skillhost skill run` process.
//!
//! Server CPU is the server process's user + system time (`/proc/PID/stat`, all threads) over
//! the measured calls, divided by their number. The clients run on the same cores.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost::library::Library;
use skillhost::mcp::poll_again::PollAgain;

// The allocator `skillhost` uses (host/src/main.rs), so that the floor server, which is this
// binary, allocates as the server it bounds does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// CPU time (user + system, every thread) process `pid` used so far.
fn cpu_of(pid: u32) -> Duration {
    cpu_in(&format!("/proc/{pid}/stat"))
}

/// CPU time (user + system) of the process or thread whose `stat` file is `path`.
fn cpu_in(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last `)`.
    let fields: Vec<&str> = stat.get(stat.rfind(')').map_or(0, |i| i + 2)..).unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros((ticks(11) + ticks(12)) * 1_000_000 / hz)
}

/// What one measured phase gave.
struct Figures {
    p50: Duration,
    p99: Duration,
    per_sec: f64,
    /// The server's (for the floors: `cat`'s, the echo thread's) CPU per call.
    cpu_per_call: Option<Duration>,
}

impl Figures {
    fn of(mut samples: Vec<Duration>, wall: Duration, cpu: Option<Duration>) -> Figures {
        let n = samples.len().max(1);
        Figures {
            p50: percentile(&mut samples, 0.5),
            p99: percentile(&mut samples, 0.99),
            per_sec: n as f64 / wall.as_secs_f64(),
            cpu_per_call: cpu.map(|c| c / n as u32),
        }
    }

    fn print(&self, what: &str) {
        let cpu = self.cpu_per_call.map_or("".to_string(), |c| format!("  server CPU {:>6.1} us/call", us(c)));
        println!(
            "  {what:<40} p50 {:>8.1} us  p99 {:>8.1} us  {:>7.0} calls/s{cpu}",
            us(self.p50),
            us(self.p99),
            self.per_sec,
        );
    }
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

/// One sequential client of the stdio server `cmd` starts: the figures, and the last answer.
fn stdio_calls(mut cmd: Command, warmup: usize, n: usize) -> (Figures, String) {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
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
    let (mut began, mut cpu0) = (Instant::now(), Duration::ZERO);
    for id in 1..=(warmup + n) {
        if id == warmup + 1 {
            (began, cpu0) = (Instant::now(), cpu_of(pid));
        }
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
    let (wall, cpu) = (began.elapsed(), cpu_of(pid).saturating_sub(cpu0));
    (Figures::of(samples, wall, Some(cpu)), line.trim_end().to_string())
}

/// One kept-alive HTTP/1.1 connection on a plain blocking socket (see the module doc).
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn { reader: BufReader::new(s.try_clone().unwrap()), writer: s }
    }

    /// Send `request` (a whole HTTP request); the status, the session header if any, and the body.
    fn exchange(&mut self, request: &[u8]) -> (u16, Option<String>, Vec<u8>) {
        self.writer.write_all(request).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("no HTTP status line");
        let (mut length, mut chunked, mut session) = (None, false, None);
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let Some((k, v)) = l.split_once(':') else { continue };
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.contains("chunked"),
                "mcp-session-id" => session = Some(v.trim().to_string()),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if let Some(n) = length {
            body.resize(n, 0);
            self.reader.read_exact(&mut body).unwrap();
        } else if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).unwrap();
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        }
        (status, session, body)
    }
}

fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut req = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    req.into_bytes()
}

/// Which MCP revision an HTTP client speaks.
#[derive(Clone, Copy, PartialEq)]
enum Revision {
    /// 2025-11-25: `initialize` first, then every request carries `Mcp-Session-Id`.
    Session,
    /// 2026-07-28: every request stands alone (`_meta` names the client).
    Stateless,
    /// 2025-11-25 without a session, to a server started with `--stateless` (as behind a
    /// balancer): every request stands alone, named by its `MCP-Protocol-Version` header.
    Sessionless,
}

/// A client of `revision` on its own connection: its call request, ready to send again.
fn http_client(addr: SocketAddr, revision: Revision) -> (Conn, Vec<u8>) {
    let mut conn = Conn::open(addr);
    let accept = ("Accept", "application/json, text/event-stream");
    let json_type = ("Content-Type", "application/json");
    match revision {
        Revision::Session => {
            let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "bench", "version": "1" } } });
            let (status, session, body) = conn.exchange(&post(addr, &[json_type, accept], &init.to_string()));
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let session = session.expect("no Mcp-Session-Id on the initialize answer");
            let headers =
                [json_type, accept, ("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", session.as_str())];
            let done = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string();
            assert_eq!(conn.exchange(&post(addr, &headers, &done)).0, 202);
            let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": { "name": "probe", "arguments": { "mode": "noop" } } });
            (conn, post(addr, &headers, &call.to_string()))
        }
        Revision::Sessionless => {
            let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": { "name": "probe", "arguments": { "mode": "noop" } } });
            let headers = [json_type, accept, ("MCP-Protocol-Version", "2025-11-25")];
            (conn, post(addr, &headers, &call.to_string()))
        }
        Revision::Stateless => {
            let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "probe", "arguments": { "mode": "noop" },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": { "name": "bench", "version": "1" },
                    "io.modelcontextprotocol/clientCapabilities": {}
                } } });
            let headers = [
                json_type,
                accept,
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "probe"),
            ];
            (conn, post(addr, &headers, &call.to_string()))
        }
    }
}

fn checked_call(conn: &mut Conn, request: &[u8]) -> Duration {
    let started = Instant::now();
    let (status, _, body) = conn.exchange(request);
    let took = started.elapsed();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        body.windows(13).any(|w| w == br#""output":"ok""#),
        "not the probe's answer: {}",
        String::from_utf8_lossy(&body)
    );
    took
}

/// `clients` clients of `revision`, each on its own thread and connection, calling back to
/// back for `window` (after `warmup` calls each).
fn http_calls(
    addr: SocketAddr,
    pid: u32,
    revision: Revision,
    clients: usize,
    warmup: usize,
    window: Duration,
) -> Figures {
    let ready = std::sync::Arc::new(std::sync::Barrier::new(clients + 1));
    let go = std::sync::Arc::new(std::sync::Barrier::new(clients + 1));
    let deadline = std::sync::Arc::new(std::sync::OnceLock::<Instant>::new());
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (ready, go, deadline) = (ready.clone(), go.clone(), deadline.clone());
            std::thread::spawn(move || {
                let (mut conn, request) = http_client(addr, revision);
                for _ in 0..warmup {
                    checked_call(&mut conn, &request);
                }
                ready.wait();
                go.wait();
                let end = *deadline.get().unwrap();
                let mut samples = Vec::new();
                while Instant::now() < end {
                    samples.push(checked_call(&mut conn, &request));
                }
                samples
            })
        })
        .collect();
    ready.wait();
    let (began, cpu0) = (Instant::now(), cpu_of(pid));
    deadline.set(began + window).unwrap();
    go.wait();
    let samples: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let (wall, cpu) = (began.elapsed(), cpu_of(pid).saturating_sub(cpu0));
    Figures::of(samples, wall, Some(cpu))
}

/// Round trips of one line through `cat` (pipes both ways, like the stdio client and server).
fn pipe_echo(n: usize, bytes: usize) -> Option<Figures> {
    let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().ok()?;
    let pid = child.id();
    let mut stdin = child.stdin.take()?;
    let mut stdout = BufReader::new(child.stdout.take()?);
    let _cat = Server(child);
    let line = format!("{}\n", "x".repeat(bytes.saturating_sub(1)));
    let mut back = String::new();
    let mut samples = Vec::with_capacity(n);
    let (mut began, mut cpu0) = (Instant::now(), Duration::ZERO);
    for i in 0..n + 200 {
        if i == 200 {
            // `cat`'s own CPU per line: the transport's share of a server's CPU per call.
            (began, cpu0) = (Instant::now(), cpu_of(pid));
        }
        let started = Instant::now();
        stdin.write_all(line.as_bytes()).ok()?;
        stdin.flush().ok()?;
        back.clear();
        stdout.read_line(&mut back).ok()?;
        if i >= 200 {
            samples.push(started.elapsed());
        }
    }
    let (wall, cpu) = (began.elapsed(), cpu_of(pid).saturating_sub(cpu0));
    Some(Figures::of(samples, wall, Some(cpu)))
}

/// Round trips of `request` bytes to an echo thread over loopback, `answer` bytes back.
fn socket_echo(n: usize, request: usize, answer: usize) -> Figures {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tid_tx.send(unsafe { libc::gettid() });
        let (mut s, _) = listener.accept().unwrap();
        let (mut inbox, reply) = (vec![0u8; request], vec![b'y'; answer]);
        while s.read_exact(&mut inbox).is_ok() {
            if s.write_all(&reply).is_err() {
                return;
            }
        }
    });
    // The echo thread's own CPU per exchange: the loopback's share of a server's CPU per call.
    let echo_stat = format!("/proc/self/task/{}/stat", tid_rx.recv().unwrap());
    let mut s = TcpStream::connect(addr).unwrap();
    let (out, mut back) = (vec![b'x'; request], vec![0u8; answer]);
    let mut samples = Vec::with_capacity(n);
    let (mut began, mut cpu0) = (Instant::now(), Duration::ZERO);
    for i in 0..n + 200 {
        if i == 200 {
            (began, cpu0) = (Instant::now(), cpu_in(&echo_stat));
        }
        let started = Instant::now();
        s.write_all(&out).unwrap();
        s.read_exact(&mut back).unwrap();
        if i >= 200 {
            samples.push(started.elapsed());
        }
    }
    let (wall, cpu) = (began.elapsed(), cpu_in(&echo_stat).saturating_sub(cpu0));
    Figures::of(samples, wall, Some(cpu))
}

/// `skillhost mcp --http` on a free loopback port with `args`: the server, its address and pid.
fn serve_http(home: &Path, args: &[&str]) -> (Server, SocketAddr, u32) {
    let mut cmd = serve(home, &["--http", "127.0.0.1:0", "--max-calls", "64"]);
    cmd.args(args);
    listening(cmd)
}

/// The HTTP server `cmd` starts, once it says where it listens: the server, its address, pid.
fn listening(mut cmd: Command) -> (Server, SocketAddr, u32) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let server = Server(child);
    let addr: SocketAddr = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the HTTP server exited before listening");
        if let Some((_, rest)) = line.trim().split_once(": listening on http://") {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        while stderr.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    (server, addr, pid)
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

/// Set (to `stdio` or `http`) in this bench's own process when it is re-run as a floor server.
const FLOOR_SERVER: &str = "SKILLHOST_BENCH_FLOOR_SERVER";
/// The answer a floor server sends to every request: the real call's answer bytes.
const FLOOR_ANSWER: &str = "SKILLHOST_BENCH_FLOOR_ANSWER";

/// This bench re-run as a floor server of `kind`, answering every request with `answer`.
fn floor_command(kind: &str, answer: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(FLOOR_SERVER, kind).env(FLOOR_ANSWER, answer);
    cmd
}

/// The floor of any async Rust server on this machine: what `skillhost mcp` is built on and
/// nothing else. The same runtime (tokio's default multi-thread one, as `skillhost mcp`) and
/// allocator, the same transports (rmcp's non-blocking stdio pipes; hyper HTTP/1 with
/// TCP_NODELAY and a header timer under an axum router, each connection polled through
/// `PollAgain` as ours is), each request answered with the real call's answer bytes: no JSON
/// parsed, no skill, no policy, no audit line. A server's CPU per call above this one's is
/// its own work.
fn floor_server(kind: &str) {
    let answer = std::env::var(FLOOR_ANSWER).expect("a floor server needs its answer");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        match kind {
            "stdio" => {
                use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
                let (reader, mut writer) = rmcp::transport::stdio_pipes();
                let mut reader = tokio::io::BufReader::new(reader);
                let (answer, mut line) = (format!("{answer}\n"), Vec::new());
                while reader.read_until(b'\n', &mut line).await.unwrap() > 0 {
                    // A notification (no id) gets no answer; the client's lines are compact JSON.
                    if line.windows(5).any(|w| w == br#""id":"#) {
                        writer.write_all(answer.as_bytes()).await.unwrap();
                        writer.flush().await.unwrap();
                    }
                    line.clear();
                }
            }
            "http" => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                eprintln!("floor: listening on http://{}/mcp", listener.local_addr().unwrap());
                let answer = axum::body::Bytes::from(answer);
                let app = axum::Router::new().route(
                    "/mcp",
                    axum::routing::post(move |_request: axum::body::Bytes| {
                        let answer = answer.clone();
                        async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], answer) }
                    }),
                );
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    let app = app.clone();
                    tokio::spawn(async move {
                        let service =
                            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                                use tower::ServiceExt as _;
                                app.clone().oneshot(request.map(axum::body::Body::new))
                            });
                        // As `skillhost mcp` serves a connection (mcp/connections.rs).
                        let _ = PollAgain::new(
                            hyper::server::conn::http1::Builder::new()
                                .timer(hyper_util::rt::TokioTimer::new())
                                .header_read_timeout(Duration::from_secs(10))
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                        )
                        .await;
                    });
                }
            }
            other => panic!("no floor server `{other}`"),
        }
    });
}

fn main() {
    if let Ok(kind) = std::env::var(FLOOR_SERVER) {
        floor_server(&kind);
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let probe = repo.join("target/skills/probe");
    assert!(probe.join("skill.wasm").exists(), "run `just build-skills` first");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    {
        let lib = Library::open(&home, None, None).unwrap();
        lib.install(&probe, &|_| Ok(None)).unwrap();
    }
    const CLIENTS: usize = 16;
    let window = Duration::from_secs(3);

    // One HTTP row alone, for a profiler to attach to (`SKILLHOST_BENCH_HTTP_ONLY=SECONDS`):
    // 16 stateless clients for that long.
    if let Some(secs) = std::env::var("SKILLHOST_BENCH_HTTP_ONLY").ok().and_then(|s| s.parse::<u64>().ok()) {
        let (_server, addr, pid) = serve_http(&home, &[]);
        println!("server pid {pid}");
        http_calls(addr, pid, Revision::Stateless, CLIENTS, 100, Duration::from_secs(secs))
            .print(&format!("http stateless 2026-07-28, {CLIENTS} client(s)"));
        return;
    }
    let (stdio, stdio_answer) = stdio_calls(serve(&home, &[]), 300, 5000);
    // The floor's bytes are sized like a real stdio exchange.
    let stdio_request = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "probe", "arguments": { "mode": "noop" } } })
    .to_string()
    .len();
    let (stdio_floor, _) = stdio_calls(floor_command("stdio", &stdio_answer), 300, 5000);
    // An A/B of the stdio path alone (with SKILLHOST_BENCH_BIN): it and its floors, nothing else.
    if std::env::var_os("SKILLHOST_BENCH_STDIO_ONLY").is_some() {
        stdio.print("stdio, 1 sequential client");
        stdio_floor.print("floor: tokio over the same pipes");
        if let Some(p) = pipe_echo(20_000, stdio_request) {
            p.print(&format!("floor: {stdio_request} B line echoed by `cat`"));
        }
        return;
    }

    let (server, addr, pid) = serve_http(&home, &[]);
    let mut http = Vec::new();
    for (revision, name) in [(Revision::Session, "session 2025-11-25"), (Revision::Stateless, "stateless 2026-07-28")] {
        for clients in [1, CLIENTS] {
            let figures = http_calls(addr, pid, revision, clients, 100, window);
            http.push((format!("http {name}, {clients} client(s)"), revision, clients, figures));
        }
    }
    {
        let (_sessionless_server, addr, pid) = serve_http(&home, &["--stateless"]);
        for clients in [1, CLIENTS] {
            let figures = http_calls(addr, pid, Revision::Sessionless, clients, 100, window);
            http.push((
                format!("http 2025-11-25 --stateless, {clients} client(s)"),
                Revision::Sessionless,
                clients,
                figures,
            ));
        }
    }
    // The floor's bytes are sized like a real stateless exchange.
    let (http_request, http_answer, http_body) = {
        let (mut conn, request) = http_client(addr, Revision::Stateless);
        let (_, _, body) = conn.exchange(&request);
        (request.len(), body.len() + 200, String::from_utf8(body).unwrap())
    };
    drop(server);
    let http_floor: Vec<Figures> = {
        let (_floor, addr, pid) = listening(floor_command("http", &http_body));
        [1, CLIENTS].map(|clients| http_calls(addr, pid, Revision::Stateless, clients, 100, window)).into()
    };

    // The floor, with bytes the size of the real exchanges.
    let pipe = pipe_echo(20_000, stdio_request);
    let socket = socket_echo(20_000, http_request, http_answer);
    let mut cli = cli_runs(&home, 20);
    let cli_p50 = percentile(&mut cli, 0.5);
    let audited = Library::open(&home, None, None).unwrap().audit_log().verify().unwrap().entries;

    println!("mcp (probe noop, audit on: {audited} lines written and verified; 2 cores shared with the clients):");
    stdio.print("stdio, 1 sequential client");
    for (what, _, _, f) in &http {
        f.print(what);
    }
    println!("floor: a tokio server on the same transports that answers with the same bytes and does nothing else:");
    stdio_floor.print("stdio, 1 sequential client");
    for (clients, f) in [1, CLIENTS].iter().zip(&http_floor) {
        f.print(&format!("http (hyper + axum), {clients} client(s)"));
    }
    println!("floor: the bytes alone:");
    match &pipe {
        Some(p) => p.print(&format!("{stdio_request} B line echoed by `cat`")),
        None => println!("  `cat` echo skipped (no `cat`)"),
    }
    socket.print(&format!("{http_request} B out, {http_answer} B back, loopback"));
    println!("  baseline `skillhost skill run` p50 {:>10.1} us", us(cli_p50));
    if let Some(p) = &pipe {
        println!("  stdio p50 is {:.1}x the pipe floor", us(stdio.p50) / us(p.p50));
    }
    let find = |r: Revision, c: usize| &http.iter().find(|(_, rev, n, _)| *rev == r && *n == c).unwrap().3;
    let (session1, stateless1) = (find(Revision::Session, 1), find(Revision::Stateless, 1));
    println!("  http stateless p50 (1 client) is {:.1}x the socket floor", us(stateless1.p50) / us(socket.p50));
    println!("  session p50 / stateless p50 (1 client): {:.2}", us(session1.p50) / us(stateless1.p50));
    let cpu = |f: &Figures| f.cpu_per_call.unwrap_or_default();
    // What skillhost does per call beyond the server floor: the part its own code decides.
    println!(
        "  skillhost's own CPU per call (server minus its floor): stdio {:.1} us, http stateless (1 client) {:.1} us",
        us(cpu(&stdio)) - us(cpu(&stdio_floor)),
        us(cpu(stateless1)) - us(cpu(&http_floor[0]))
    );
    println!(
        "  calls/s with {CLIENTS} stateless clients: {:.2} of the floor server's",
        find(Revision::Stateless, CLIENTS).per_sec / http_floor[1].per_sec
    );
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let best16 = [Revision::Stateless, Revision::Session, Revision::Sessionless]
        .into_iter()
        .map(|r| find(r, CLIENTS).per_sec)
        .fold(0.0, f64::max);
    let http_cpu = cpu(stateless1).max(cpu(session1));
    println!("targets:");
    println!(
        "  no session stall, p50 within 1.5x of stateless: {}",
        verdict(us(session1.p50) <= 1.5 * us(stateless1.p50))
    );
    println!("  stdio server CPU <= 40 us/call: {} ({:.1} us)", verdict(us(cpu(&stdio)) <= 40.0), us(cpu(&stdio)));
    println!(
        "  http server CPU <= 60 us/call (1 client, both revisions): {} ({:.1} us)",
        verdict(us(http_cpu) <= 60.0),
        us(http_cpu)
    );
    println!("  stdio p50 <= 60 us: {} ({:.1} us)", verdict(us(stdio.p50) <= 60.0), us(stdio.p50));
    println!("  >= 15000 calls/s over HTTP with {CLIENTS} clients: {} ({best16:.0}/s)", verdict(best16 >= 15_000.0));
}
