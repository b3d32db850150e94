//! Our own small MCP clients for the tests: JSON-RPC lines over a child's stdio, and raw
//! HTTP/1.1 POSTs to `skillhost mcp --http` (stateless 2026-07-28 requests). The real clients
//! (Python SDK, conformance suite) are driven by tests/mcp_clients.rs.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

pub const SKILLS: [&str; 5] =
    ["read-log-file", "query-issue-kb", "write-analysis-snapshot", "generate-report", "publish-npm-package"];

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillhost")
}

pub fn workspace() -> std::path::PathBuf {
    crate::common::repo().join("examples/log-analysis/workspace")
}

/// `skillhost --home HOME --workspace WS ARGS...`, checked.
pub fn cli(home: &Path, args: &[&str]) -> String {
    let out = crate::common::skillhost_command(home)
        .arg("--home")
        .arg(home)
        .arg("--workspace")
        .arg(workspace())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "skillhost {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A home with the five example skills installed, each granted what it declares.
pub fn example_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    for s in SKILLS {
        cli(home.path(), &["skill", "install", crate::common::built(s).to_str().unwrap(), "--yes"]);
    }
    home
}

/// A `skillhost mcp` child spoken to over stdio with the 2025-11-25 handshake.
pub struct StdioClient {
    child: Child,
    /// `None` once [`StdioClient::close_stdin`] closed it.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl StdioClient {
    pub fn start(home: &Path, args: &[&str]) -> StdioClient {
        StdioClient::start_with(home, args, Stdio::inherit(), &[])
    }

    /// [`StdioClient::start`] with the server's stderr going to `stderr` and `env` set.
    pub fn start_with(home: &Path, args: &[&str], stderr: Stdio, env: &[(&str, &str)]) -> StdioClient {
        let mut child = crate::common::skillhost_command(home)
            .arg("--home")
            .arg(home)
            .arg("--workspace")
            .arg(workspace())
            .arg("mcp")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = StdioClient { child, stdin: Some(stdin), stdout, next_id: 1 };
        let init = c.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": { "name": "test client", "version": "9.9" }
            }),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true, "{init}");
        c.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        c
    }

    pub fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin was closed");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Write bytes as they are (no newline added).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin was closed");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Close the server's stdin (end of input, as when the client exits).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Wait at most `within` for the server to exit; its exit status, or `None` if it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Send a request and return the whole response (`result` or `error`), skipping
    /// notifications.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.begin(method, params);
        self.response(id).0
    }

    /// Send a request without waiting for its answer; its id.
    pub fn begin(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// Read until the response to `id`: it, and the notifications that came before it.
    /// Responses to other ids are skipped.
    pub fn response(&mut self, id: u64) -> (Value, Vec<Value>) {
        let mut notifications = Vec::new();
        loop {
            let (_, v) = self.next_message(id);
            if v.get("id") == Some(&json!(id)) {
                return (v, notifications);
            }
            if v.get("id").is_none() {
                notifications.push(v);
            }
        }
    }

    /// The next line the server writes, as written and parsed (`id` names what we wait for).
    fn next_message(&mut self, id: u64) -> (String, Value) {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the server closed stdout while we waited for response {id}");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        (line, v)
    }

    /// Read until the response to `id` and return its line as the server wrote it.
    pub fn raw_response(&mut self, id: u64) -> String {
        loop {
            let (line, v) = self.next_message(id);
            if v.get("id") == Some(&json!(id)) {
                return line;
            }
        }
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.result("tools/call", json!({ "name": tool, "arguments": arguments }))
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        let list = self.result("tools/list", json!({}));
        list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `skillhost mcp --http 127.0.0.1:0 ARGS...`; the port is read from its stderr line.
pub struct HttpServer {
    child: Child,
    pub addr: SocketAddr,
    /// What the server has written to stderr so far (after its listening line).
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HttpServer {
    pub fn start(home: &Path, args: &[&str], env: &[(&str, &str)]) -> HttpServer {
        let mut cmd = crate::common::skillhost_command(home);
        cmd.arg("--home")
            .arg(home)
            .arg("--workspace")
            .arg(workspace())
            .args(["mcp", "--http", "127.0.0.1:0"])
            .args(args)
            .env_remove("SKILLHOST_MCP_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "skillhost mcp --http exited before listening");
            if let Some(rest) = line.trim().strip_prefix("skillhost mcp: listening on http://") {
                break rest.trim_end_matches("/mcp").parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe; kept for `stderr()`.
        let kept = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = kept.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        HttpServer { child, addr, stderr: kept }
    }

    /// The server's stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl HttpServer {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` (e.g. `libc::SIGTERM`) to the server.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; it has not been waited for, so the pid is its.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0, "kill({signal}) failed");
    }

    /// Wait at most `within` for the server to exit; its exit status, or `None` if it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    /// The JSON-RPC message of the body: plain JSON, or the last `data:` event of an SSE stream.
    pub fn json(&self) -> Value {
        if let Ok(v) = serde_json::from_str::<Value>(&self.body) {
            return v;
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|v| v.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC message in the body (status {}): {}", self.status, self.body))
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            out.extend_from_slice(&raw[..size.min(raw.len())]);
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[(size + 2).min(raw.len())..];
    }
    out
}

/// One HTTP/1.1 request with `Connection: close`; `headers` are added as given.
pub fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    // The head and the body are two writes: without this the body waits for the head's
    // delayed ACK (40 ms) wherever the server (or a balancer buffering it) waits for it.
    s.set_nodelay(true).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server refusing an oversized body may answer and close before it is all sent.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("no HTTP header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        body = dechunk(&body);
    }
    HttpResponse { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// A stateless 2026-07-28 `/mcp` request sent on a fresh connection, left unread: the caller
/// reads the answer or drops the connection.
pub fn start_rpc(addr: SocketAddr, method: &str, mut params: Value) -> TcpStream {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "rust-http-test", "version": "1.0" },
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let name = params.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\nMcp-Name: {name}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    s
}

/// A `/mcp` request whose answer may never come (the server may be killed meanwhile): the
/// JSON-RPC message of a complete 200 answer, or `None`.
pub fn try_rpc(addr: SocketAddr, method: &str, params: Value) -> Option<Value> {
    let mut s = std::panic::catch_unwind(|| start_rpc(addr, method, params)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    let mut body = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    let response = HttpResponse { status: 200, headers: Vec::new(), body };
    std::panic::catch_unwind(|| response.json()).ok()
}

/// CPU time (user + system) process `pid` used so far, in milliseconds (Linux /proc).
pub fn process_cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last `)`.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1000 / hz
}

/// A stateless 2026-07-28 JSON-RPC request to `/mcp`.
pub fn rpc(addr: SocketAddr, method: &str, mut params: Value, extra_headers: &[(&str, &str)]) -> HttpResponse {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "rust-http-test", "version": "1.0" },
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let name = params.get("name").and_then(Value::as_str).map(String::from);
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let mut headers: Vec<(&str, &str)> = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(n) = &name {
        headers.push(("Mcp-Name", n));
    }
    headers.extend_from_slice(extra_headers);
    http(addr, "POST", "/mcp", &headers, body.as_bytes())
}

/// A long-lived stateless request (e.g. `subscriptions/listen`) whose SSE answer is read as
/// it arrives: every JSON-RPC message of the stream comes out of `messages`, in order.
pub struct EventStream {
    pub messages: std::sync::mpsc::Receiver<Value>,
    socket: TcpStream,
}

impl EventStream {
    pub fn open(addr: SocketAddr, id: u64, method: &str, mut params: Value) -> EventStream {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { "name": "rust-listen-test", "version": "1.0" },
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut socket = TcpStream::connect(addr).unwrap();
        socket.write_all(req.as_bytes()).unwrap();
        let reader = socket.try_clone().unwrap();
        let (tx, messages) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Chunk sizes and SSE fields are skipped; every `data:` line is one message.
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { return };
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        EventStream { messages, socket }
    }

    /// The messages that arrive within `window`.
    pub fn collect(&self, window: Duration) -> Vec<Value> {
        let deadline = std::time::Instant::now() + window;
        let mut out = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.messages.recv_timeout(left) {
                Ok(v) => out.push(v),
                Err(_) => break,
            }
        }
        out
    }

    /// Wait at most `within` for a message `matches` accepts; it and those before it.
    pub fn wait_for(&self, within: Duration, matches: impl Fn(&Value) -> bool) -> (Option<Value>, Vec<Value>) {
        let deadline = std::time::Instant::now() + within;
        let mut before = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.messages.recv_timeout(left) {
                Ok(v) if matches(&v) => return (Some(v), before),
                Ok(v) => before.push(v),
                Err(_) => break,
            }
        }
        (None, before)
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}
