//! Registries for the OCI tests: Debian's `docker-registry` (the CNCF distribution registry)
//! on a free loopback port with in-memory storage, killed on drop; and a small hand-written
//! hostile registry that serves exactly the bytes a test gives it (tampered, endless, slow,
//! redirected).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A real registry on 127.0.0.1, storage in memory.
pub struct RealRegistry {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RealRegistry {
    pub fn start() -> RealRegistry {
        let bin = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| {
                panic!("docker-registry is not installed: `apt-get install -y --no-install-recommends docker-registry` (.ci/run does)")
            });
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{inmemory: {{}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n"
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start docker-registry");
        let registry = RealRegistry { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
                let mut line = String::new();
                if BufReader::new(s).read_line(&mut line).is_ok() && line.contains(" 200 ") {
                    return registry;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("docker-registry did not answer on 127.0.0.1:{port} within 20 s");
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kill it now (the registry going down).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RealRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// How the hostile registry answers one path.
#[derive(Clone)]
pub enum Answer {
    Bytes(Vec<u8>),
    /// Bytes forever, no length.
    Endless,
    /// A few bytes, then silence.
    Stall,
    /// 307 to this URL.
    Redirect(String),
}

/// A registry that answers GETs of exact paths (`/v2/REPO/manifests/REF`,
/// `/v2/REPO/blobs/DIGEST`) as told; 404 for everything else.
pub struct HostileRegistry {
    pub port: u16,
    pub answers: Arc<Mutex<HashMap<String, Answer>>>,
}

impl HostileRegistry {
    pub fn start() -> HostileRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let answers: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let shared = answers.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let answers = shared.clone();
                std::thread::spawn(move || serve(stream, &answers));
            }
        });
        HostileRegistry { port, answers }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn set(&self, path: &str, answer: Answer) {
        self.answers.lock().unwrap().insert(path.to_string(), answer);
    }
}

fn serve(stream: TcpStream, answers: &Mutex<HashMap<String, Answer>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h.trim().is_empty() {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        let mut parts = request.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let answer = answers.lock().unwrap().get(&path).cloned();
        let head_only = method == "HEAD";
        let ok = match answer {
            None => write!(out, "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_ok(),
            Some(Answer::Bytes(b)) => {
                let _ = write!(out, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", b.len());
                head_only || out.write_all(&b).is_ok()
            }
            Some(Answer::Redirect(to)) => {
                write!(out, "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\ncontent-length: 0\r\n\r\n").is_ok()
            }
            Some(Answer::Endless) => {
                let _ = write!(out, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
                let chunk = vec![b'x'; 64 << 10];
                while write!(out, "{:x}\r\n", chunk.len()).is_ok()
                    && out.write_all(&chunk).is_ok()
                    && out.write_all(b"\r\n").is_ok()
                {}
                false
            }
            Some(Answer::Stall) => {
                let _ = write!(out, "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nabc");
                let _ = out.flush();
                std::thread::sleep(Duration::from_secs(30));
                false
            }
        };
        if !ok {
            return;
        }
    }
}
