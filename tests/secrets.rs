//! The `secrets` capability (issue 11), judged by ground truth: a loopback server records
//! every byte it receives, and canary values (a secret, a granted env value) must reach the
//! host they are meant for and nothing else: not the guest, not another request, not the
//! output, metadata, logs, session, memory or the audit log, in plain or encoded form.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use base64::Engine as _;
use common::{Env, output, run};
use serde_json::json;
use skillhost::library::{Library, RunReport};
use skillhost::policy::Policy;

const SECRET: &str = "sk-live-7f3a9c2e51d84b60";
/// A granted environment value: the guest may read it, and must not send it anywhere.
const CANARY_VAR: &str = "SKILLHOST_TEST_SECRETS_CANARY";
const CANARY: &str = "canary-value-d41d8cd98f00";

fn set_canary() {
    static ONCE: Once = Once::new();
    // SAFETY: set once, before any test of this binary opens a library or runs a skill;
    // every test calls this first.
    ONCE.call_once(|| unsafe { std::env::set_var(CANARY_VAR, CANARY) });
}

/// Every encoding a leak may take, for searching files and captures.
fn forms(value: &str) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    vec![value.to_string(), b64.encode(value), hex::encode(value), value.bytes().map(|b| format!("%{b:02X}")).collect()]
}

/// A loopback HTTP server that keeps the raw bytes of every request and answers with the
/// request's head as the body, and the request's Authorization header echoed in `x-echo`
/// (a server that reflects credentials, like many debugging endpoints do).
struct CaptureServer {
    port: u16,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl CaptureServer {
    fn start() -> CaptureServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                    let raw = read_request(&mut s);
                    let text = String::from_utf8_lossy(&raw).into_owned();
                    let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
                    let auth = head
                        .lines()
                        .find_map(|l| l.strip_prefix("authorization: ").or_else(|| l.strip_prefix("Authorization: ")))
                        .unwrap_or("none")
                        .to_string();
                    seen.lock().unwrap().push(raw);
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nx-echo: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                        head.len()
                    );
                    let _ = s.write_all(reply.as_bytes());
                });
            }
        });
        CaptureServer { port, requests }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/api", self.port)
    }

    fn all(&self) -> Vec<String> {
        self.requests.lock().unwrap().iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect()
    }
}

/// Head, then a Content-Length or chunked body, until the peer stops.
fn read_request(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let body = raw.len() - end - 4;
            if let Some(len) = head.lines().find_map(|l| l.strip_prefix("content-length: ")) {
                if body >= len.trim().parse::<usize>().unwrap_or(0) {
                    break;
                }
            } else if head.contains("transfer-encoding: chunked") {
                if text.ends_with("\r\n0\r\n\r\n") || (body == 5 && text.ends_with("0\r\n\r\n")) {
                    break;
                }
            } else {
                break;
            }
        }
    }
    raw
}

fn library_with_secret(env: &Env) -> Library {
    let lib = env.library();
    lib.secrets().set("API_TOKEN", SECRET).unwrap();
    lib
}

/// The probe allowed to reach `server`, holding API_TOKEN for `secret_host` at the
/// server's port.
fn manifest(server: &CaptureServer, secret_host: &str) -> String {
    format!(
        "capabilities:\n  network: [\"http://127.0.0.1:{port}\"]\n  env: [{CANARY_VAR}]\n  session: true\n  memory: write\n  secrets:\n    - name: API_TOKEN\n      hosts: [\"{secret_host}:{port}\"]\n",
        port = server.port
    )
}

/// The audit log (and, on PostgreSQL, the shared memory log): neither may hold a value in
/// any form.
fn assert_nowhere_on_disk(env: &Env, value: &str) {
    let audit = common::audit_text(env.home.path());
    assert!(!audit.is_empty(), "no audit line was written");
    for form in forms(value) {
        assert!(!audit.contains(&form), "the audit log holds {form}");
    }
    if let Some(db) = common::database_for(env.home.path()) {
        let ops = db.psql("SELECT coalesce(string_agg(op, E'\\n' ORDER BY seq), '') FROM skillhost_memory_log");
        for form in forms(value) {
            assert!(!ops.contains(&form), "the shared memory log holds {form}");
        }
    }
}

fn denials(r: &RunReport) -> String {
    r.outcome.denials.iter().map(|d| format!("{}: {}", d.capability, d.message)).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_granted_secret_reaches_its_host_only_and_an_echo_is_masked() {
    set_canary();
    let env = Env::new();
    let server = CaptureServer::start();
    let lib = library_with_secret(&env);
    env.install_granted(&lib, "gh", &manifest(&server, "127.0.0.1"));

    let r = run(&lib, "gh", json!({"mode": "http-send", "arg": server.url(), "header": "X-Plain: hello"}));
    let out = output(&r).to_string();
    let got = server.all();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].to_ascii_lowercase().contains(&format!("authorization: bearer {SECRET}").to_ascii_lowercase()),
        "the host receives the injected header: {}",
        got[0]
    );
    // The server echoed the header in its body and in x-echo: the guest sees neither.
    assert!(!out.contains(SECRET), "the guest read the secret back: {out}");
    assert!(out.contains("x-echo: Bearer ****"), "{out}");
    let d = denials(&r);
    assert!(d.contains("echoed the value of secret API_TOKEN"), "{d}");
    assert_nowhere_on_disk(&env, SECRET);
}

#[test]
fn no_grant_or_another_host_means_no_secret() {
    set_canary();
    let env = Env::new();
    let server = CaptureServer::start();
    let lib = library_with_secret(&env);
    // Declared for a name the request does not use: 127.0.0.1 is not `localhost`.
    env.install_granted(&lib, "elsewhere", &manifest(&server, "localhost"));
    let r = run(&lib, "elsewhere", json!({"mode": "http-send", "arg": server.url()}));
    output(&r);
    // Declared for this host but not granted.
    env.install_granted(&lib, "ungranted", &manifest(&server, "127.0.0.1"));
    let policy_path = env.home.path().join("policy.toml");
    Policy::update(&policy_path, |p| p.revoke("ungranted", "secrets")).unwrap();
    let r = run(&lib, "ungranted", json!({"mode": "http-send", "arg": server.url()}));
    output(&r);
    assert!(r.not_granted.iter().any(|n| n.contains("API_TOKEN")), "{:?}", r.not_granted);
    let got = server.all();
    assert_eq!(got.len(), 2);
    for req in got {
        assert!(!req.contains(SECRET) && !req.to_ascii_lowercase().contains("authorization"), "{req}");
    }
}

#[test]
fn an_unset_secret_is_reported_when_used() {
    set_canary();
    let env = Env::new();
    let server = CaptureServer::start();
    let lib = env.library();
    env.install_granted(&lib, "unset", &manifest(&server, "127.0.0.1"));
    let r = run(&lib, "unset", json!({"mode": "http-send", "arg": server.url()}));
    output(&r);
    let d = denials(&r);
    assert!(d.contains("secret API_TOKEN not sent") && d.contains("skillhost secret set API_TOKEN"), "{d}");
}

#[test]
fn a_granted_env_value_cannot_leave_in_any_encoding() {
    set_canary();
    let env = Env::new();
    let server = CaptureServer::start();
    let lib = library_with_secret(&env);
    env.install_granted(&lib, "thief", &manifest(&server, "127.0.0.1"));
    let url = server.url();
    for encoding in ["plain", "base64", "hex", "percent"] {
        for to in ["output", "metadata", "log", "stderr", "memory", "fail", "session"] {
            let r = run(&lib, "thief", json!({"mode": "leak", "arg": CANARY_VAR, "body": encoding, "header": to}));
            let seen = format!(
                "{:?} {:?} {:?} {} {}",
                r.outcome.result, r.outcome.logs, r.memories, r.outcome.stdout, r.outcome.stderr
            );
            for form in forms(CANARY) {
                assert!(!seen.contains(&form), "{to}/{encoding}: {form} got through: {seen}");
            }
            let d = denials(&r);
            assert!(d.contains(&format!("env {CANARY_VAR}")), "{to}/{encoding}: no denial: {d}");
        }
        for to in ["url", "header", "body"] {
            let r = run(
                &lib,
                "thief",
                json!({"mode": "leak", "arg": CANARY_VAR, "body": encoding, "header": format!("{to}={url}")}),
            );
            assert!(r.outcome.result.is_err(), "{to}/{encoding}: the request went through: {:?}", r.outcome.result);
            let d = denials(&r);
            assert!(d.contains("blocked") && d.contains(&format!("env {CANARY_VAR}")), "{to}/{encoding}: {d}");
        }
    }
    // Ground truth: the server never saw the value in any form, and neither did the disk.
    for req in server.all() {
        for form in forms(CANARY) {
            assert!(!req.contains(&form), "the server received {form}");
        }
    }
    assert_nowhere_on_disk(&env, CANARY);
    let store = lib.memory().unwrap();
    for rec in store.all_records().unwrap() {
        assert!(!rec.content.contains(CANARY), "{}", rec.content);
    }
}

#[test]
fn the_policy_can_fail_a_call_that_leaks_instead_of_redacting_it() {
    set_canary();
    let env = Env::new();
    let server = CaptureServer::start();
    let lib = library_with_secret(&env);
    env.install_granted(&lib, "thief", &manifest(&server, "127.0.0.1"));
    let leak = |to: &str| json!({"mode": "leak", "arg": CANARY_VAR, "body": "base64", "header": to});
    let honest = json!({"mode": "noop"});
    // The default: the result comes back with the value redacted.
    let r = run(&lib, "thief", leak("output"));
    assert!(output(&r).contains("[redacted"), "{:?}", r.outcome.result);

    let policy_path = env.home.path().join("policy.toml");
    let mut policy = Policy::load(&policy_path).unwrap();
    policy.secrets.on_leak = Some(skillhost::capabilities::LeakAction::Fail);
    policy.save(&policy_path).unwrap();
    let lib = library_with_secret(&env);
    for to in ["output", "metadata", "log", "stderr", "memory", "fail"] {
        let r = run(&lib, "thief", leak(to));
        let Err(skillhost::sandbox::CallError::Failed(m)) = &r.outcome.result else {
            panic!("{to}: the call should fail: {:?}", r.outcome.result)
        };
        assert!(m.contains("on_leak"), "{to}: {m}");
        assert!(denials(&r).contains(&format!("env {CANARY_VAR}")), "{to}: {}", denials(&r));
        assert!(r.memories.stored.is_empty(), "{to}: a failed call stores nothing: {:?}", r.memories.stored);
    }
    // A call that leaks nothing is untouched.
    assert_eq!(output(&run(&lib, "thief", honest)), "ok");
    let text = std::fs::read_to_string(&policy_path).unwrap();
    assert!(text.contains("[secrets]") && text.contains("on_leak = \"fail\""), "{text}");
    assert_nowhere_on_disk(&env, CANARY);
}

#[test]
fn many_calls_at_once_each_get_their_own_secrets() {
    set_canary();
    let env = Env::new();
    let server = CaptureServer::start();
    let lib = Arc::new(library_with_secret(&env));
    env.install_granted(&lib, "gh", &manifest(&server, "127.0.0.1"));
    env.install_granted(&lib, "plain", &format!("capabilities:\n  network: [\"http://127.0.0.1:{}\"]\n", server.port));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let url = server.url();
    let reports: Vec<(String, RunReport)> = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..12 {
            let lib = lib.clone();
            let url = url.clone();
            let (skill, params) = match i % 3 {
                0 => ("gh", json!({"mode": "http-send", "arg": format!("{url}?call={i}")})),
                1 => ("plain", json!({"mode": "http-send", "arg": format!("{url}?call={i}")})),
                _ => (
                    "gh",
                    json!({"mode": "leak", "arg": CANARY_VAR, "body": "base64", "header": format!("body={url}")}),
                ),
            };
            tasks.push(tokio::spawn(async move {
                (skill.to_string(), lib.run(skill, params, &Default::default()).await.unwrap())
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (skill, r) in &reports {
        if r.params["mode"] == "leak" {
            assert!(r.outcome.result.is_err(), "leak went through");
        } else {
            assert!(!output(r).contains(SECRET), "{skill}: {}", output(r));
        }
    }
    let got = server.all();
    let (gets, posts): (Vec<&String>, Vec<&String>) = got.iter().partition(|r| r.starts_with("GET "));
    assert_eq!(gets.len(), 8, "4 gh + 4 plain requests");
    for req in gets {
        let first = req.lines().next().unwrap_or("");
        let call: usize = first
            .split("call=")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no call number in {first}"));
        assert_eq!(
            req.contains(SECRET),
            call.is_multiple_of(3),
            "exactly the gh calls carry the secret: call {call}: {first}"
        );
    }
    // The leaking uploads were cut before the value: their head and the bytes before it
    // may arrive, the value in no form does.
    for req in posts {
        for form in forms(CANARY) {
            assert!(!req.contains(&form), "the server received {form}");
        }
    }
}

#[test]
fn the_cli_reads_values_from_stdin_and_never_prints_them() {
    let env = Env::new();
    let home = env.home.path();
    let bin = assert_cmd::cargo::cargo_bin("skillhost");
    let set = assert_cmd::Command::new(&bin)
        .args(["--home", home.to_str().unwrap(), "secret", "set", "API_TOKEN"])
        .write_stdin(format!("{SECRET}\n"))
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let file = home.join("secrets.json");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(
        std::fs::read_to_string(&file).unwrap().contains(&format!("\"{SECRET}\"")),
        "the trailing newline is dropped"
    );
    for args in [&["secret", "list"][..], &["--json", "secret", "list"][..]] {
        let list = assert_cmd::Command::new(&bin).arg("--home").arg(home).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&list.stdout);
        assert!(list.status.success() && text.contains("API_TOKEN"), "{text}");
        assert!(!text.contains(SECRET), "a listing shows a value: {text}");
    }
    let empty = assert_cmd::Command::new(&bin)
        .args(["--home", home.to_str().unwrap(), "secret", "set", "OTHER"])
        .write_stdin("")
        .output()
        .unwrap();
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("no value on stdin"));
    let rm = assert_cmd::Command::new(&bin)
        .args(["--home", home.to_str().unwrap(), "secret", "remove", "API_TOKEN"])
        .output()
        .unwrap();
    assert!(rm.status.success());
    assert!(!std::fs::read_to_string(&file).unwrap().contains(SECRET), "removed");
}

#[test]
fn a_declared_secret_must_name_hosts_and_a_grant_cannot_widen_it() {
    set_canary();
    let env = Env::new();
    let lib = env.library();
    let dir = env.probe_as("nohosts", "capabilities:\n  secrets:\n    - name: API_TOKEN\n");
    let err = lib.install(&dir, &|_| Ok(None)).unwrap_err().to_string();
    assert!(err.contains("names no hosts"), "{err}");
    let server = CaptureServer::start();
    env.install_ungranted(&lib, "narrow", &manifest(&server, "127.0.0.1"));
    let policy_path = env.home.path().join("policy.toml");
    let err = Policy::update(&policy_path, |p| {
        let declared = lib.info("narrow")?.manifest;
        let g = skillhost::policy::parse_grant("secrets=OTHER_TOKEN", &declared.capabilities, &declared.limits)?;
        p.apply("narrow", &g);
        Ok(())
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("does not declare secret OTHER_TOKEN"), "{err}");
}

/// A loopback server that reflects the request's Authorization header in a form a guest can
/// undo, chosen by the request path: `/gzip` (a compressed answer), `/name` (in a header
/// name), `/reversed`, `/json` (`\uXXXX`-escaped), `/uri` (as `encodeURIComponent` writes
/// it). Keeps the raw requests.
fn reflecting_server() -> CaptureServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let raw = read_request(&mut s);
                let text = String::from_utf8_lossy(&raw).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let auth = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().starts_with("authorization: bearer ").then(|| l[22..].to_string())
                    })
                    .unwrap_or_default();
                seen.lock().unwrap().push(raw);
                let (extra, body) = match path.as_str() {
                    "/gzip" => ("Content-Encoding: gzip\r\n".to_string(), format!("pretend-gzip:{auth}")),
                    "/name" => (format!("x-{}: 1\r\n", auth.to_ascii_lowercase()), "ok".to_string()),
                    "/reversed" => (String::new(), auth.chars().rev().collect()),
                    "/json" => (
                        String::new(),
                        format!("{{\"auth\":\"{}\"}}", auth.bytes().map(|b| format!("\\u{b:04x}")).collect::<String>()),
                    ),
                    _ => (String::new(), auth.replace('-', "%2D")),
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes());
            });
        }
    });
    CaptureServer { port, requests }
}

#[test]
fn an_echo_the_guest_could_undo_is_masked_or_refused() {
    set_canary();
    let env = Env::new();
    let server = reflecting_server();
    let lib = library_with_secret(&env);
    env.install_granted(&lib, "undo", &manifest(&server, "127.0.0.1"));
    let json_form: String = SECRET.bytes().map(|b| format!("\\u{b:04x}")).collect();
    let reversed: String = SECRET.chars().rev().collect();
    for (path, form, said) in [
        ("/reversed", reversed.as_str(), "echoed the value of secret API_TOKEN (reversed): masked"),
        ("/json", json_form.as_str(), "echoed the value of secret API_TOKEN (JSON-escaped): masked"),
        ("/name", SECRET, "in a header name: the header was dropped"),
        ("/gzip", SECRET, "came gzip-coded"),
    ] {
        let url = format!("http://127.0.0.1:{}{path}", server.port);
        let r = run(&lib, "undo", json!({"mode": "http-get", "arg": url}));
        let shown = format!("{:?}", r.outcome.result);
        assert!(!shown.contains(form), "{path}: the guest got the secret back: {shown}");
        // Caught as the response reached the guest, not only in what it handed back.
        let d = denials(&r);
        assert!(d.contains(said), "{path}: {d}");
        assert!(!d.contains("output carried"), "{path}: the guest saw it first: {d}");
    }
    let got = server.all();
    assert!(got.iter().all(|r| r.to_ascii_lowercase().contains("accept-encoding: identity")), "{got:?}");
}

#[test]
fn a_secret_goes_to_its_port_only_not_to_another_service_on_the_same_host() {
    set_canary();
    let env = Env::new();
    let (api, other) = (CaptureServer::start(), CaptureServer::start());
    let lib = library_with_secret(&env);
    let manifest = format!(
        "capabilities:\n  network: [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{b}\"]\n  secrets:\n    - name: API_TOKEN\n      hosts: [\"127.0.0.1:{a}\"]\n",
        a = api.port,
        b = other.port
    );
    env.install_granted(&lib, "scoped", &manifest);
    let r = run(&lib, "scoped", json!({"mode": "http-get", "arg": other.url()}));
    assert!(r.outcome.result.is_ok(), "{:?}", r.outcome.result);
    assert!(
        other.all().iter().all(|r| !r.contains(SECRET)),
        "another port on the host got the secret: {:?}",
        other.all()
    );
    assert!(denials(&r).contains(&format!("write `127.0.0.1:{}`", other.port)), "{}", denials(&r));
    run(&lib, "scoped", json!({"mode": "http-get", "arg": api.url()}));
    assert!(api.all()[0].contains(SECRET), "its own port does: {:?}", api.all());
}
