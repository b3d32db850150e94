//! Resource attacker: burn CPU, allocate without end, recurse, flood the output, metadata,
//! logs and stdio, hoard host-side handles (wasi:http Fields, pollables, streams), fill the
//! session. The host is judged on its own peak memory and the call's wall time, and on
//! staying up for the next call.

use serde::Deserialize;
use skillhost_sdk::{Context, Skill, SkillError, SkillResult, export_skill};

#[derive(Deserialize)]
struct Params {
    attack: String,
    #[serde(default)]
    n: u64,
}

struct AttackExhaust;

#[inline(never)]
fn deep(n: u64, a: u64, b: u64) -> u64 {
    if n == 0 {
        return a ^ b;
    }
    let r = deep(n - 1, a.wrapping_add(n), b ^ n);
    r.wrapping_mul(a | 1) ^ b
}

impl Skill for AttackExhaust {
    type Params = Params;

    fn execute(p: Params, ctx: &Context) -> Result<SkillResult, SkillError> {
        match p.attack.as_str() {
            "cpu" => {
                let mut x: u64 = 1;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    if x == 0 {
                        return Ok(SkillResult::success("unreachable"));
                    }
                }
            }
            "sleep-forever" => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            "membomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![7u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "grow-huge" => {
                // One allocation far beyond any limit.
                let v = vec![1u8; (p.n as usize) << 20];
                Ok(SkillResult::success(format!("got {}", v.len())))
            }
            "recurse" => Ok(SkillResult::success(format!("{}", deep(p.n, 1, 2)))),
            "output" => Ok(SkillResult::success("x".repeat(p.n as usize))),
            "metadata" => {
                let mut r = SkillResult::success("meta");
                for i in 0..p.n {
                    r = r.meta(format!("k{i}"), "v".repeat(512));
                }
                Ok(r)
            }
            "metadata-empty" => {
                let mut r = SkillResult::success("meta");
                for _ in 0..p.n {
                    r = r.meta("", "");
                }
                Ok(r)
            }
            "logs" => {
                let line = "l".repeat(1000);
                for _ in 0..p.n {
                    ctx.info(&line);
                }
                Ok(SkillResult::success("logged"))
            }
            "stdout" => {
                let line = "y".repeat(1023);
                for _ in 0..p.n {
                    println!("{line}");
                    eprintln!("{line}");
                }
                Ok(SkillResult::success("printed"))
            }
            "fields" => {
                use wasip2::http::types::Fields;
                let value = vec![b'h'; 8 * 1024];
                let mut held = Vec::new();
                for i in 0..p.n {
                    let f = Fields::new();
                    for j in 0..4 {
                        if let Err(e) = f.append(&format!("x-pad-{j}"), &value) {
                            return Err(SkillError::failed(format!("fields {i}: {e:?}")));
                        }
                    }
                    held.push(f);
                }
                Ok(SkillResult::success(format!("holding {}", held.len())))
            }
            "pollables" => {
                // Timers are resources too: hoard them.
                let mut held = Vec::new();
                for _ in 0..p.n {
                    held.push(wasip2::clocks::monotonic_clock::subscribe_duration(3_600_000_000_000));
                }
                Ok(SkillResult::success(format!("holding {}", held.len())))
            }
            "requests" => {
                // Outgoing requests built (never sent) and held: each owns host-side state.
                use wasip2::http::types::{Fields, OutgoingRequest};
                let mut held = Vec::new();
                for _ in 0..p.n {
                    let f = Fields::new();
                    let _ = f.append("x-pad", &[b'r'; 4096]);
                    let req = OutgoingRequest::new(f);
                    let body = req.body().ok();
                    held.push((req, body));
                }
                Ok(SkillResult::success(format!("holding {}", held.len())))
            }
            "session" => {
                let value = "s".repeat(60 * 1024);
                let mut stored = 0;
                for i in 0..p.n {
                    match ctx.session_set(&format!("k{i}"), &value) {
                        Ok(()) => stored += 1,
                        Err(_) => break,
                    }
                }
                Ok(SkillResult::success(format!("stored {stored}")))
            }
            other => Err(SkillError::invalid(format!("unknown attack {other}"))),
        }
    }
}

export_skill!(AttackExhaust);
