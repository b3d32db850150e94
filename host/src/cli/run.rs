//! `skillhost run "TASK"`: the agent loop from the command line. Progress goes to stderr one
//! line per step, the final answer to stdout (`--json`: the whole outcome). Exit codes: 0
//! answered, 3 paused (`require_more`) or stopped by the step limit, 1 errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use clap::Args;

use super::output::{clean, clean_line};
use super::print_json;
use crate::agent::profile::load_profiles;
use crate::agent::provider::scripted::ScriptedProvider;
use crate::agent::provider::{Provider, config::resolve_from_process_env, open};
use crate::agent::run::{self as agent, AgentOptions, Outcome, OutcomeStatus, StepReport};
use crate::library::Library;

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
    /// Use native tool calling instead of JSON mode.
    #[arg(long)]
    tools: bool,
}

pub(super) fn run(lib: &Library, home: &Path, args: RunArgs, json: bool) -> Result<ExitCode> {
    let provider: Arc<dyn Provider> = match &args.decisions {
        Some(path) => Arc::new(ScriptedProvider::load(path).map_err(|e| anyhow!("{e}"))?),
        None => match resolve_from_process_env(home).map_err(|e| anyhow!("{e}"))? {
            Some(config) => open(&config).map_err(|e| anyhow!("{e}"))?,
            None => bail!(
                "no LLM provider is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a local server such as Ollama or vLLM) or ANTHROPIC_API_KEY, or add a [provider] table to {}; or replay a decisions file with --decisions FILE",
                home.join(crate::agent::provider::config::CONFIG_FILE).display()
            ),
        },
    };
    eprintln!("provider: {}", provider.name());
    let options = AgentOptions {
        max_steps: args.max_steps,
        tools: args.tools,
        progress: Some(Box::new(|step: &StepReport| eprintln!("{}", clean_line(&progress_line(step))))),
    };
    let profiles = load_profiles(home)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
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
            eprintln!("resuming session {id} (agent {}, step {} of {})", profile.name, state.step, state.max_steps);
            rt.block_on(agent::resume(lib, provider.as_ref(), profile, state, answer, &options))?
        }
        (None, Some(task)) => {
            let (profile, route) =
                rt.block_on(agent::choose_profile(task, &profiles, args.agent.as_deref(), Some(provider.as_ref())))?;
            eprintln!("agent: {} ({})", profile.name, route.reason);
            rt.block_on(agent::run(lib, provider.as_ref(), &profile, task, &options))?
        }
        (None, None) => bail!("say what the agent should do: skillhost run \"TASK\" (or --resume ID \"ANSWER\")"),
    };
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

/// `[step 2/8] query-issue-kb {"query":"..."} -> success, 3 hits (12 ms)`
pub fn progress_line(step: &StepReport) -> String {
    let what = match &step.skill {
        Some(skill) => {
            let params = step.params.to_string();
            let params = crate::agent::context::one_line(&params, 100);
            format!("{skill} {params}")
        }
        None => step.action.to_string(),
    };
    let mut line = format!(
        "[step {}/{}] {what} -> {}, {} ({} ms)",
        step.step,
        step.max_steps,
        step.status,
        crate::agent::context::one_line(&step.summary, 90),
        step.elapsed_us / 1000
    );
    if step.repaired {
        line.push_str(" [reply repaired]");
    }
    if step.reasked {
        line.push_str(" [asked again]");
    }
    for note in &step.notes {
        line.push_str(&format!("\n    {note}"));
    }
    line
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
    eprintln!("session {} ({} steps, agent {})", outcome.session, outcome.total_steps, outcome.profile);
}
