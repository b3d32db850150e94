//! `skillhost doctor`: one look at everything a working setup needs (guest toolchains, the
//! home, the skill, memory and audit stores, the LLM provider), each with what to fix, so a
//! new user is not left guessing which of them is missing.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::output::clean_line;
use super::print_json;
use crate::agent::provider::ProviderKind;
use crate::agent::provider::config::resolve_from_process_env;
use crate::library::Library;

/// How long the provider's host gets to accept a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    /// Works, but something optional is missing.
    Warn,
    /// Broken: the command exits 1.
    Fail,
}

#[derive(Debug, Serialize)]
struct Check {
    area: &'static str,
    name: String,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(area: &'static str, name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
    Check { area, name: name.into(), status, detail: detail.into(), fix: None }
}

pub(super) fn run(lib: &Library, home: &Path, json: bool) -> Result<ExitCode> {
    let mut checks = Vec::new();
    for tool in crate::authoring::toolchain_checks() {
        checks.push(match tool.version {
            Some(version) => check("toolchain", tool.name, Status::Ok, version),
            None => Check {
                fix: Some(tool.install.to_string()),
                ..check(
                    "toolchain",
                    tool.name,
                    Status::Warn,
                    "not found (only needed to build skills in that language)",
                )
            },
        });
    }
    checks.push(home_check(home));
    checks.extend(store_checks(lib));
    checks.push(provider_check(home));

    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if json {
        print_json(&checks)?;
    } else {
        for c in &checks {
            let mark = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("{mark} {}: {}: {}", c.area, c.name, clean_line(&c.detail));
            if let Some(fix) = &c.fix {
                println!("     fix: {}", clean_line(fix));
            }
        }
        println!("{}", if failed { "something needs fixing (see FAIL above)" } else { "all checks passed" });
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn home_check(home: &Path) -> Check {
    let probe = home.join(format!(".doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            check("home", home.display().to_string(), Status::Ok, "exists and is writable")
        }
        Err(e) => Check {
            fix: Some("pass --home DIR or set SKILLHOST_HOME to a directory you can write".into()),
            ..check("home", home.display().to_string(), Status::Fail, format!("cannot write in it ({e})"))
        },
    }
}

fn store_checks(lib: &Library) -> Vec<Check> {
    let mut checks = Vec::new();
    match lib.scan() {
        Ok(skills) => {
            let broken: Vec<String> = skills
                .iter()
                .filter_map(|(name, info)| match info {
                    Ok(_) => lib.verify_installed(name).err().map(|e| format!("{name}: {e:#}")),
                    Err(e) => Some(format!("{name}: {e:#}")),
                })
                .collect();
            checks.push(if broken.is_empty() {
                check("store", "skills", Status::Ok, format!("{} installed, all readable", skills.len()))
            } else {
                Check {
                    fix: Some("reinstall them (`skillhost skill update NAME`) or remove them".into()),
                    ..check("store", "skills", Status::Fail, format!("damaged: {}", broken.join("; ")))
                }
            });
        }
        Err(e) => checks.push(check("store", "skills", Status::Fail, format!("{e:#}"))),
    }
    checks.push(match lib.memory().and_then(|m| m.all_records()) {
        Ok(records) => check("store", "memory", Status::Ok, format!("{} records", records.len())),
        Err(e) => Check {
            fix: Some("close other skillhost processes holding it, or see `skillhost memory --help`".into()),
            ..check("store", "memory", Status::Fail, format!("{e:#}"))
        },
    });
    checks.push(match lib.audit_log().verify() {
        Ok(verified) => check("store", "audit log", Status::Ok, format!("{} entries, chain intact", verified.entries)),
        Err(e) => Check {
            fix: Some("run `skillhost audit verify`, then `skillhost audit seal` to set the damaged log aside".into()),
            ..check("store", "audit log", Status::Fail, format!("{e}"))
        },
    });
    checks
}

fn provider_check(home: &Path) -> Check {
    let config = match resolve_from_process_env(home) {
        Ok(Some(config)) => config,
        Ok(None) => {
            return Check {
                fix: Some(
                    "set OPENAI_API_KEY (and OPENAI_BASE_URL for a local server) or ANTHROPIC_API_KEY, or add a [provider] table to skillhost.toml; `skillhost run --decisions FILE` works without one".into(),
                ),
                ..check("provider", "LLM provider", Status::Warn, "none configured")
            };
        }
        Err(e) => {
            return Check {
                fix: Some("see `skillhost config show`".into()),
                ..check("provider", "LLM provider", Status::Fail, e.to_string())
            };
        }
    };
    if config.kind == ProviderKind::Scripted {
        let file = config.decisions.clone().unwrap_or_default();
        return if file.is_file() {
            check("provider", "scripted", Status::Ok, format!("decisions file {}", file.display()))
        } else {
            check("provider", "scripted", Status::Fail, format!("decisions file {} does not exist", file.display()))
        };
    }
    let name = format!("{} (model {})", config.base_url, config.model);
    let Some((host, port)) = reqwest::Url::parse(&config.base_url)
        .ok()
        .and_then(|u| Some((u.host_str()?.trim_matches(['[', ']']).to_string(), u.port_or_known_default()?)))
    else {
        return check("provider", name, Status::Fail, "the base URL has no host");
    };
    let reached = tokio::runtime::Builder::new_current_thread().enable_all().build().map(|rt| {
        rt.block_on(async {
            tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect((host.as_str(), port))).await
        })
    });
    // Through a proxy the host itself need not be reachable (NO_PROXY is not weighed here).
    let proxied = config.proxy.http.is_some() || config.proxy.https.is_some();
    match reached {
        Ok(Ok(Ok(_))) => check("provider", name, Status::Ok, format!("{host}:{port} accepts connections")),
        _ if proxied => {
            check("provider", name, Status::Warn, format!("{host}:{port} not reached directly (a proxy is configured)"))
        }
        Ok(Ok(Err(e))) => Check {
            fix: Some(
                "start the server, or point OPENAI_BASE_URL / ANTHROPIC_BASE_URL / `base_url` at where it listens"
                    .into(),
            ),
            ..check("provider", name, Status::Fail, format!("cannot connect to {host}:{port} ({e})"))
        },
        _ => Check {
            fix: Some("check the network, or the base URL".into()),
            ..check(
                "provider",
                name,
                Status::Fail,
                format!("{host}:{port} did not accept a connection within {} s", CONNECT_TIMEOUT.as_secs()),
            )
        },
    }
}
