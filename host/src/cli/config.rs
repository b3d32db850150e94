//! `skillhost config show`: the configuration in force, merged from `<home>/skillhost.toml`
//! and the environment, with where each value came from, so "which model am I talking to,
//! and why" has one answer.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Subcommand;
use serde_json::json;

use super::output::clean_line;
use super::print_json;
use crate::agent::provider::config::{CONFIG_FILE, explain};

#[derive(Subcommand)]
pub(super) enum ConfigCmd {
    /// Print the merged configuration and, for every value, where it came from (default, the
    /// file, or an environment variable). API keys are shown as set or not, never their value.
    Show,
}

pub(super) fn run(home: &Path, cmd: &ConfigCmd, json: bool) -> Result<ExitCode> {
    match cmd {
        ConfigCmd::Show => show(home, json)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn show(home: &Path, json: bool) -> Result<()> {
    let file = home.join(CONFIG_FILE);
    let settings = explain(home, &|name| std::env::var(name).ok()).map_err(|e| anyhow!("{e}"))?;
    if json {
        return print_json(&json!({
            "home": home,
            "file": file,
            "file_exists": file.is_file(),
            "provider": settings,
        }));
    }
    println!("home: {}", clean_line(&home.display().to_string()));
    let state = if file.is_file() { "" } else { " (not present: defaults and environment only)" };
    println!("file: {}{state}", clean_line(&file.display().to_string()));
    println!();
    if settings.is_empty() {
        println!(
            "[provider]  # none configured: `skillhost run` needs --decisions FILE, or set OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY, or add a [provider] table"
        );
        return Ok(());
    }
    println!("[provider]");
    let width = settings.iter().map(|s| s.key.len() + 3 + s.value.to_string().len()).max().unwrap_or(0);
    for setting in &settings {
        let line = format!("{} = {}", setting.key, setting.value);
        println!("{}  # {}", clean_line(&format!("{line:width$}")), clean_line(&setting.source.to_string()));
    }
    Ok(())
}
