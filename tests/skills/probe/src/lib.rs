//! The probe: one component that does whatever a sandbox test asks of it, from the
//! trivial (`noop`, used by the benchmark) to the hostile (`loop`, `membomb`, `flood`,
//! `read-file /etc/passwd`, `http-get` to a forbidden host...). Tests install it under
//! several SKILL.md manifests to check that declared AND granted decides what it gets.

use serde::Deserialize;
use skillhost_sdk::{Context, NewMemory, Skill, SkillError, SkillResult, export_skill};

#[derive(Deserialize)]
struct Params {
    mode: String,
    #[serde(default)]
    arg: String,
    #[serde(default)]
    n: u64,
}

struct Probe;

impl Skill for Probe {
    type Params = Params;

    fn execute(p: Params, ctx: &Context) -> Result<SkillResult, SkillError> {
        match p.mode.as_str() {
            "noop" => Ok(SkillResult::success("ok")),
            "echo" => Ok(SkillResult::success(format!("{}|{}|{}", ctx.session_id(), ctx.step(), p.arg))),
            "loop" => {
                let mut x: u64 = 1;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    if x == 0 {
                        break;
                    }
                }
                Ok(SkillResult::success(x.to_string()))
            }
            "membomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![7u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "flood" => Ok(SkillResult::success("x".repeat(p.n as usize))),
            "meta-flood" => {
                let mut r = SkillResult::success("metadata");
                for i in 0..p.n {
                    r = r.meta(format!("key-{i}"), "v".repeat(1000));
                }
                Ok(r)
            }
            "stdout-flood" => {
                for _ in 0..p.n {
                    println!("{}", "y".repeat(1023));
                }
                Ok(SkillResult::success("printed"))
            }
            "panic" => panic!("probe panicked on purpose: {}", p.arg),
            "fail" => Err(SkillError::failed(format!("probe failed on purpose: {}", p.arg))),
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_millis(p.n));
                Ok(SkillResult::success("slept"))
            }
            "read-file" => std::fs::read_to_string(&p.arg)
                .map(SkillResult::success)
                .map_err(|e| SkillError::failed(format!("cannot read {}: {e}", p.arg))),
            "write-file" => std::fs::write(&p.arg, "written by probe")
                .map(|_| SkillResult::success("written"))
                .map_err(|e| SkillError::failed(format!("cannot write {}: {e}", p.arg))),
            "list-dir" => std::fs::read_dir(&p.arg)
                .map(|rd| {
                    let mut names: Vec<String> =
                        rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                    names.sort();
                    SkillResult::success(names.join("\n"))
                })
                .map_err(|e| SkillError::failed(format!("cannot list {}: {e}", p.arg))),
            "env" => Ok(SkillResult::success(match std::env::var(&p.arg) {
                Ok(v) => format!("{}={v}", p.arg),
                Err(_) => format!("{} is not set", p.arg),
            })
            .meta("env_count", std::env::vars().count())),
            "http-get" => http_get(&p.arg).map(SkillResult::success).map_err(SkillError::failed),
            "memory-search" => {
                let hits = ctx.memory_search(&p.arg, 5)?;
                let lines: Vec<String> = hits.iter().map(|h| h.content.clone()).collect();
                Ok(SkillResult::success(lines.join("\n")).meta("hits", hits.len()))
            }
            "session-set" => {
                ctx.session_set("probe", &p.arg)?;
                Ok(SkillResult::success("stored"))
            }
            "session-get" => Ok(SkillResult::success(ctx.session_get("probe")?.unwrap_or_default())),
            "remember" => {
                let mut r = SkillResult::success("proposed");
                for i in 0..p.n {
                    r = r.remember(NewMemory::fact(format!("{} #{i}", p.arg)).priority(3).tag("probe"));
                }
                Ok(r)
            }
            "log" => {
                for i in 0..p.n {
                    ctx.info(&format!("{} #{i}", p.arg));
                }
                Ok(SkillResult::success("logged"))
            }
            other => Err(SkillError::invalid(format!("unknown mode '{other}'"))),
        }
    }
}

/// A plain GET through wasi:http; returns "<status> <body>".
fn http_get(url: &str) -> Result<String, String> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};

    let (scheme, rest) = url.split_once("://").ok_or("url needs a scheme")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let req = OutgoingRequest::new(Fields::new());
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    req.set_scheme(Some(&scheme)).map_err(|_| "bad scheme")?;
    req.set_authority(Some(authority)).map_err(|_| "bad authority")?;
    req.set_path_with_query(Some(path)).map_err(|_| "bad path")?;
    let pending = outgoing_handler::handle(req, None).map_err(|e| format!("request refused: {e:?}"))?;
    pending.subscribe().block();
    let resp = pending
        .get()
        .ok_or("no response")?
        .map_err(|_| "response already taken")?
        .map_err(|e| format!("request failed: {e:?}"))?;
    let status = resp.status();
    let body = resp.consume().map_err(|_| "no body")?;
    let stream = body.stream().map_err(|_| "no body stream")?;
    let mut bytes = Vec::new();
    // The stream ends with an error (closed); there is nothing else to wait for.
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        bytes.extend_from_slice(&chunk);
    }
    drop(stream);
    Ok(format!("{status} {}", String::from_utf8_lossy(&bytes)))
}

export_skill!(Probe);
