//! A real load balancer for the tests (Debian's haproxy, round robin, loopback only), with
//! the config the README shows: readiness checks on `/readyz`, a refused connection or a
//! drain's 503 retried on another host. haproxy comes from `.ci/haproxy` (which `just test`
//! runs first); a missing haproxy fails the test naming it.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The haproxy config as tested (and shown in the README): round robin, readiness checks,
/// a refused connection or a drain's 503 retried on the other host.
pub fn haproxy_config(listen: SocketAddr, hosts: &[SocketAddr]) -> String {
    let mut cfg = format!(
        "global
    maxconn 256
    log stderr format raw local0 info

defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # A host that refuses the connection (drained) or answers the drain's 503 before reading
    # the request is tried again, on another host: it did nothing with it.
    # (A retry needs the whole request at hand: buffer it before picking a host.)
    # Not `empty-response`: a host killed mid-call may have run the call and committed its
    # audit line and memory write already, and a tool call is not idempotent.
    retries 3
    option redispatch 1
    retry-on conn-failure 503
    option http-buffer-request

frontend mcp
    bind {listen}
    default_backend skillhost

backend skillhost
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
"
    );
    for (i, host) in hosts.iter().enumerate() {
        cfg.push_str(&format!("    server host{i} {host} check inter 200ms fall 2 rise 2\n"));
    }
    cfg
}

pub struct Haproxy {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    pub fn binary() -> PathBuf {
        let found = ["/usr/sbin/haproxy", "/usr/bin/haproxy", "/usr/local/sbin/haproxy"].map(PathBuf::from);
        found.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
            panic!("haproxy is not installed: run `bash .ci/haproxy` (or `just test`, which runs it)")
        })
    }

    pub fn start(hosts: &[SocketAddr]) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        // A free loopback port: taken from the kernel, released for haproxy to bind.
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, haproxy_config(addr, hosts)).unwrap();
        let check = Command::new(Self::binary()).arg("-c").arg("-f").arg(&cfg).output().unwrap();
        assert!(check.status.success(), "haproxy -c: {}", String::from_utf8_lossy(&check.stderr));
        let log = std::fs::File::create(dir.path().join("haproxy.log")).unwrap();
        let child = Command::new(Self::binary())
            .arg("-f")
            .arg(&cfg)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut h = Haproxy { child, addr, _dir: dir };
        let started = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = h.child.try_wait().unwrap() {
                panic!("haproxy exited ({status}): {}", h.log());
            }
            assert!(started.elapsed() < Duration::from_secs(10), "haproxy did not listen: {}", h.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        h
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Haproxy {
    /// Requests haproxy had to send again: in a log line (`option httplog`) the
    /// connection counts `actconn/feconn/beconn/srv_conn/retries` are the last five-field
    /// token before the request (after the timers, `Tq/Tw/Tc/Tr/Ta`), and
    /// `retries` is not 0 (`+N` when the request was redispatched to another server).
    pub fn retried(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| {
                let before_request = l.split('"').next().unwrap_or_default();
                let counts = before_request
                    .split_whitespace()
                    .rfind(|t| t.matches('/').count() == 4 && t.starts_with(char::is_numeric));
                counts.and_then(|c| c.rsplit('/').next()).is_some_and(|r| r != "0")
            })
            .count()
    }
}
