//! `skillhost run "TASK"`: the agent loop from the command line. Progress goes to stderr one
//! line per step, the final answer to stdout (`--json`: the whole outcome). Exit codes: 0
//! answered, 3 paused (`require_more`) or stopped by the step limit, 1 errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use serde_json::json;

use super::output::{clean, clean_line};
use super::print_json;
use crate::agent::profile::load_profiles;
use crate::agent::provider::scripted::ScriptedProvider;
use crate::agent::provider::{
    Provider, RetryNotice, RetryObserver, StreamEvent, StreamObserver, config::resolve_from_process_env, open_streaming,
};
use crate::agent::run::{self as agent, AgentOptions, Outcome, OutcomeStatus, RunWorkspace, StepReport};
use crate::library::{Library, new_session_id};

/// The exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
const INTERRUPTED_EXIT: u8 = 130;

#[derive(Args)]
pub(super) struct RunArgs {
    /// What the agent should do.
    task: Option<String>,
    /// The agent profile (default: chosen by the router).
    #[arg(long, conflicts_with = "resume")]
    agent: Option<String>,
    /// Step limit (default: the profile's, else 8).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_steps: Option<u32>,
    /// Continue a run: the session id and your answer to its question (no answer: retry a
    /// run that stopped because the provider failed).
    #[arg(long, num_args = 1..=2, value_names = ["ID", "ANSWER"], conflicts_with = "task")]
    resume: Option<Vec<String>>,
    /// Replay a decisions file instead of calling a model (scripted provider).
    #[arg(long)]
    decisions: Option<PathBuf>,
    /// Native tool calling (the default for OpenAI-compatible and Anthropic providers unless
    /// `tool_calling = false` in skillhost.toml; off for --decisions replays).
    #[arg(long, conflicts_with = "no_tools")]
    tools: bool,
    /// JSON mode instead of native tool calling, for servers that lack it (same as
    /// `tool_calling = false` in the [provider] table of skillhost.toml).
    #[arg(long)]
    no_tools: bool,
    /// Show the model's replies on stderr as they arrive, even when stderr is not a terminal
    /// (the default on a terminal; `stream = false` in the [provider] table turns it off).
    /// Never under --json.
    #[arg(long)]
    stream: bool,
}

/// Set by the SIGINT handler; the run polls it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_signal: libc::c_int) {
    // Only an atomic store: the one thing a signal handler may safely do here.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Resolves once Ctrl-C was pressed.
async fn interrupted() {
    while !INTERRUPTED.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a provider retry looks like on stderr: a sentence for humans, a JSON event line
/// under `--json` (stdout stays the one outcome object). A streamed reply shown in part
/// ends its line first (`open`), and the notice says the part shown is void.
fn retry_observer(json: bool, open: Arc<AtomicBool>) -> RetryObserver {
    Arc::new(move |notice: &RetryNotice| {
        if open.swap(false, Ordering::SeqCst) {
            eprintln!(" [broken: shown again from the start on the next attempt]");
        }
        if json {
            let mut event = serde_json::to_value(notice).unwrap_or_default();
            event["event"] = json!("retry");
            eprintln!("{event}");
        } else {
            eprintln!("  .. {}", clean_line(&notice.to_string()));
        }
    })
}

/// Shows a streamed reply on stderr as it arrives: `  model: ` and the text, tool calls as
/// `[call NAME] ARGS`; model text is cleaned of terminal controls. `open` is set while a
/// reply's line is unfinished.
fn stream_observer(open: Arc<AtomicBool>) -> StreamObserver {
    Arc::new(move |event: StreamEvent<'_>| {
        use std::io::Write as _;
        let mut err = std::io::stderr().lock();
        if event != StreamEvent::End && !open.swap(true, Ordering::SeqCst) {
            let _ = write!(err, "  model: ");
        }
        let _ = match event {
            StreamEvent::Text(piece) => write!(err, "{}", clean(piece)),
            StreamEvent::ToolCall { name } => write!(err, "[call {}] ", clean_line(name)),
            StreamEvent::ToolArguments(piece) => write!(err, "{}", clean_line(piece)),
            StreamEvent::End => {
                if open.swap(false, Ordering::SeqCst) {
                    let _ = writeln!(err);
                }
                Ok(())
            }
        };
        let _ = err.flush();
    })
}

/// Stream replies? Never under `--json`; `--stream` or `stream = true` always; `stream =
/// false` never; else when stderr (where they are shown) is a terminal.
fn wants_stream(json: bool, flag: bool, configured: Option<bool>) -> bool {
    use std::io::IsTerminal as _;
    !json && (flag || configured.unwrap_or_else(|| std::io::stderr().is_terminal()))
}

pub(super) fn run(lib: &mut Library, home: &Path, args: RunArgs, json: bool) -> Result<ExitCode> {
    let line_open = Arc::new(AtomicBool::new(false));
    let (provider, tool_calling): (Arc<dyn Provider>, bool) = match &args.decisions {
        Some(path) => (Arc::new(ScriptedProvider::load(path).map_err(|e| anyhow!("{e}"))?), false),
        None => match resolve_from_process_env(home).map_err(|e| anyhow!("{e}"))? {
            Some(config) => {
                let on_stream =
                    wants_stream(json, args.stream, config.stream).then(|| stream_observer(line_open.clone()));
                let on_retry = Some(retry_observer(json, line_open.clone()));
                (open_streaming(&config, on_retry, on_stream).map_err(|e| anyhow!("{e}"))?, config.tool_calling)
            }
            None => bail!(
                "no LLM provider is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a local server such as Ollama or vLLM) or ANTHROPIC_API_KEY, or add a [provider] table to {}; or replay a decisions file with --decisions FILE",
                home.join(crate::agent::provider::config::CONFIG_FILE).display()
            ),
        },
    };
    let tools = (args.tools || tool_calling) && !args.no_tools;
    eprintln!("provider: {} ({})", provider.name(), if tools { "native tool calling" } else { "JSON mode" });
    let session = match &args.resume {
        Some(resume) => resume.first().cloned().unwrap_or_default(),
        None => new_session_id(),
    };
    let workspace = match (lib.explicit_workspace(), lib.default_workspace()) {
        (Some(path), _) => Some(RunWorkspace { path: path.to_path_buf(), explicit: true }),
        (None, Some(path)) => Some(RunWorkspace { path: path.to_path_buf(), explicit: false }),
        (None, None) => None,
    };
    let options = AgentOptions {
        max_steps: args.max_steps,
        tools,
        progress: Some(Box::new(|step: &StepReport| eprintln!("{}", progress_line(step)))),
        session: Some(session.clone()),
        workspace,
    };
    let profiles = load_profiles(home)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }
    let outcome = match (&args.resume, &args.task) {
        (Some(resume), _) => {
            let (id, answer) = match resume.as_slice() {
                [id, answer] => (id, Some(answer.as_str())),
                [id] => (id, None),
                _ => bail!("--resume takes a session id and, for a paused run, your answer"),
            };
            let state = agent::load_session(lib, id)?;
            let profile = profiles.iter().find(|p| p.name == state.profile).ok_or_else(|| {
                anyhow!("session {id} ran with the agent profile `{}`, which is no longer installed", state.profile)
            })?;
            continue_in_workspace(lib, &state)?;
            eprintln!("resuming session {id} (agent {}, step {} of {})", profile.name, state.step, state.max_steps);
            let lib = &*lib;
            rt.block_on(async {
                tokio::select! {
                    outcome = agent::resume(lib, provider.as_ref(), profile, state, answer, &options) => Some(outcome),
                    () = interrupted() => None,
                }
            })
        }
        (None, Some(task)) => {
            let lib = &*lib;
            rt.block_on(async {
                let chosen = tokio::select! {
                    chosen = agent::choose_profile(task, &profiles, args.agent.as_deref(), Some(provider.as_ref())) => Some(chosen),
                    () = interrupted() => None,
                };
                let (profile, route) = match chosen {
                    Some(chosen) => chosen?,
                    None => return Ok::<_, anyhow::Error>(None),
                };
                eprintln!("agent: {} ({})", profile.name, route.reason);
                tokio::select! {
                    outcome = agent::run(lib, provider.as_ref(), &profile, task, &options) => Ok(Some(outcome)),
                    () = interrupted() => Ok(None),
                }
            })?
        }
        (None, None) => bail!("say what the agent should do: skillhost run \"TASK\" (or --resume ID \"ANSWER\")"),
    };
    let Some(outcome) = outcome else {
        return report_interrupted(lib, &session, json);
    };
    let outcome = outcome?;
    if json {
        print_json(&outcome)?;
    } else {
        print_outcome(&outcome);
    }
    Ok(match outcome.status {
        OutcomeStatus::Answered => ExitCode::SUCCESS,
        OutcomeStatus::Paused | OutcomeStatus::StepLimit => ExitCode::from(3),
    })
}

/// A resumed run uses the `$WORKSPACE` its run started with, unless `--workspace` says otherwise.
fn continue_in_workspace(lib: &mut Library, state: &agent::AgentState) -> Result<()> {
    let Some(recorded) = &state.workspace else { return Ok(()) };
    match lib.explicit_workspace() {
        Some(given) if given != recorded.path => eprintln!(
            "note: session {} started in workspace {}; continuing in {} as --workspace says",
            state.session,
            recorded.path.display(),
            given.display()
        ),
        Some(_) => {}
        None => {
            let set = if recorded.explicit {
                lib.set_workspace(&recorded.path)
            } else {
                lib.set_default_workspace(&recorded.path)
            };
            set.map_err(|e| {
                anyhow!(
                    "session {} ran in workspace {}, which is gone ({e:#}); pass --workspace DIR to continue elsewhere",
                    state.session,
                    recorded.path.display()
                )
            })?;
            eprintln!("workspace: {} (as the run started)", recorded.path.display());
        }
    }
    Ok(())
}

/// Ctrl-C: the session is saved after every step, so name it and how to continue.
fn report_interrupted(lib: &Library, session: &str, json: bool) -> Result<ExitCode> {
    let saved = agent::load_session(lib, session).ok();
    let resume = format!("skillhost run --resume {session}");
    if json {
        println!(
            "{}",
            json!({
                "status": "interrupted",
                "session": saved.as_ref().map(|_| session),
                "step": saved.as_ref().map(|s| s.step),
                "resume": saved.as_ref().map(|_| &resume),
            })
        );
    } else {
        match &saved {
            Some(state) => eprintln!(
                "\ninterrupted: session {session} is saved after step {} of {}; continue with  {resume}",
                state.step, state.max_steps
            ),
            None => eprintln!("\ninterrupted before the run started; nothing to resume"),
        }
    }
    Ok(ExitCode::from(INTERRUPTED_EXIT))
}

/// `[step 2/8] query-issue-kb {"query":"..."} -> success, 3 hits (12 ms)`, then each of the
/// host's notes on a line of its own. Skill-controlled text is cleaned part by part, so a
/// newline a skill wrote is escaped while the host's own line breaks stay line breaks.
pub fn progress_line(step: &StepReport) -> String {
    let what = match &step.skill {
        Some(skill) => {
            let params = step.params.to_string();
            let params = crate::text::one_line(&params, 100);
            format!("{skill} {params}")
        }
        None => step.action.to_string(),
    };
    let tokens = match (step.prompt_tokens, step.completion_tokens) {
        (Some(prompt), Some(completion)) => format!(", {prompt}+{completion} tokens"),
        _ => String::new(),
    };
    let mut line = format!(
        "[step {}/{}] {what} -> {}, {} ({} ms, model {} ms{tokens})",
        step.step,
        step.max_steps,
        step.status,
        crate::text::one_line(&step.summary, 90),
        step.elapsed_us / 1000,
        step.model_us / 1000,
    );
    if step.repaired {
        line.push_str(" [reply repaired]");
    }
    if step.reasked {
        line.push_str(" [asked again]");
    }
    if step.styled {
        line.push_str(" [output style given]");
    }
    let mut lines = clean_line(&line).into_owned();
    for note in &step.notes {
        lines.push_str("\n    ");
        lines.push_str(&clean_line(note));
    }
    lines
}

fn print_outcome(outcome: &Outcome) {
    match outcome.status {
        OutcomeStatus::Answered => {
            println!("{}", clean(outcome.answer.as_deref().unwrap_or("").trim_end()));
        }
        OutcomeStatus::Paused => {
            println!("{}", clean(outcome.question.as_deref().unwrap_or("").trim_end()));
            eprintln!("paused: answer with  skillhost run --resume {} \"ANSWER\"", outcome.session);
        }
        OutcomeStatus::StepLimit => {
            eprintln!("stopped by the step limit after {} steps; summary:", outcome.total_steps);
            println!("{}", clean(outcome.answer.as_deref().unwrap_or("").trim_end()));
        }
    }
    if let Some(e) = &outcome.evidence {
        eprintln!(
            "evidence check: {} conclusions, {} cited, {} grounded, {} marked unsupported, {} citations of lines no skill returned",
            e.conclusions,
            e.cited,
            e.grounded,
            e.unsupported.len(),
            e.not_returned.len()
        );
    }
    let tokens = if outcome.prompt_tokens + outcome.completion_tokens > 0 {
        format!(", {} prompt + {} completion tokens", outcome.prompt_tokens, outcome.completion_tokens)
    } else {
        String::new()
    };
    eprintln!(
        "session {} ({} steps, agent {}, {:.1} s{tokens})",
        outcome.session,
        outcome.total_steps,
        outcome.profile,
        outcome.elapsed_us as f64 / 1e6
    );
}
