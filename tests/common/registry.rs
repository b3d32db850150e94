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
        RealRegistry::start_with(|_| String::new())
    }

    /// A registry that asks for HTTP basic auth: `user` with `password` (a bcrypt htpasswd
    /// file written by apache2-utils' `htpasswd`).
    pub fn start_with_htpasswd(user: &str, password: &str) -> RealRegistry {
        RealRegistry::start_with(|dir| {
            let out = Command::new("htpasswd").args(["-nbB", user, password]).output().unwrap_or_else(|e| {
                panic!("htpasswd is not installed ({e}): `apt-get install -y --no-install-recommends apache2-utils` (.ci/run does)")
            });
            assert!(out.status.success(), "htpasswd: {}", String::from_utf8_lossy(&out.stderr));
            let file = dir.join("htpasswd");
            std::fs::write(&file, &out.stdout).unwrap();
            format!("auth: {{htpasswd: {{realm: skillhost-test, path: {}}}}}\n", file.display())
        })
    }

    /// Started with the config lines `extra` returns (given the registry's scratch directory).
    fn start_with(extra: impl FnOnce(&std::path::Path) -> String) -> RealRegistry {
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
        let extra = extra(dir.path());
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{inmemory: {{}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n{extra}"
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
                // 401: up, and asking for credentials.
                if BufReader::new(s).read_line(&mut line).is_ok() && (line.contains(" 200 ") || line.contains(" 401 "))
                {
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

/// The bearer-token handshake the hostile registry asks for: every `/v2/` request needs
/// `Authorization: Bearer TOKEN`, else 401 with a challenge naming `/token` on the same
/// server, which hands out TOKEN for basic `user:password` (GET) or an OAuth2 refresh token
/// (POST).
#[derive(Clone)]
pub struct TokenAuth {
    pub user: String,
    pub password: String,
    pub refresh: String,
    pub token: String,
}

/// One request the hostile registry saw: method, path with query, Authorization header.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: String,
}

/// A registry that answers GETs of exact paths (`/v2/REPO/manifests/REF`,
/// `/v2/REPO/blobs/DIGEST`) as told; 404 for everything else.
pub struct HostileRegistry {
    pub port: u16,
    pub answers: Arc<Mutex<HashMap<String, Answer>>>,
    pub auth: Arc<Mutex<Option<TokenAuth>>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl HostileRegistry {
    pub fn start() -> HostileRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let answers: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let auth: Arc<Mutex<Option<TokenAuth>>> = Arc::default();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (a, au, se) = (answers.clone(), auth.clone(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = State { answers: a.clone(), auth: au.clone(), seen: se.clone(), port };
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        HostileRegistry { port, answers, auth, seen }
    }

    /// Ask for the bearer-token handshake from now on.
    pub fn require_token(&self, auth: TokenAuth) {
        *self.auth.lock().unwrap() = Some(auth);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn set(&self, path: &str, answer: Answer) {
        self.answers.lock().unwrap().insert(path.to_string(), answer);
    }
}

struct State {
    answers: Arc<Mutex<HashMap<String, Answer>>>,
    auth: Arc<Mutex<Option<TokenAuth>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    port: u16,
}

/// Answer the token handshake; `true` when the request was answered here.
fn token_step(out: &mut TcpStream, state: &State, seen: &Seen) -> bool {
    let Some(auth) = state.auth.lock().unwrap().clone() else { return false };
    use base64::Engine as _;
    if seen.path.starts_with("/token") {
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", auth.user, auth.password))
        );
        let by_password = seen.method == "GET" && seen.authorization.as_deref() == Some(basic.as_str());
        let by_refresh = seen.method == "POST"
            && seen.body.split('&').any(|kv| kv == format!("refresh_token={}", auth.refresh))
            && seen.body.split('&').any(|kv| kv == "grant_type=refresh_token");
        if by_password || by_refresh {
            let body = format!(r#"{{"token":"{}","access_token":"{}"}}"#, auth.token, auth.token);
            let _ = write!(out, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        } else {
            let _ = write!(out, "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
        }
        return true;
    }
    if seen.authorization.as_deref() == Some(format!("Bearer {}", auth.token).as_str()) {
        return false;
    }
    let repo = seen
        .path
        .strip_prefix("/v2/")
        .and_then(|p| p.split_once("/manifests/").or(p.split_once("/blobs/")))
        .map_or("", |(r, _)| r);
    let _ = write!(
        out,
        "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://127.0.0.1:{}/token\",service=\"hostile\",scope=\"repository:{repo}:pull\"\r\ncontent-length: 0\r\n\r\n",
        state.port
    );
    true
}

fn serve(stream: TcpStream, state: &State) {
    let answers = &state.answers;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut authorization = None;
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
            if h.to_ascii_lowercase().starts_with("authorization:") {
                authorization = Some(h["authorization:".len()..].trim().to_string());
            }
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        let mut parts = request.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let seen = Seen {
            method: method.clone(),
            path: path.clone(),
            authorization,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        state.seen.lock().unwrap().push(seen.clone());
        if token_step(&mut out, state, &seen) {
            continue;
        }
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
