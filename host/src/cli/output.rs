//! Human output shared by the command handlers: one-line excerpts, labelled lists, a skill
//! call's report.
//!
//! Text a skill controls (its output, metadata, logs, memories, SKILL.md fields) reaches a
//! terminal only through [`clean`] or [`clean_line`]: control characters (ANSI escapes,
//! carriage returns, backspaces, C1 controls), bidi overrides and zero-width characters are
//! shown as `\u{..}` escapes ([`crate::controls`], shared with the MCP server), so a skill
//! cannot clear the screen, rewrite a line or hide text; and an output
//! that contains a line shaped like the host's own report lines (`status: ...`, `--`,
//! `denied ...`) is printed behind a `| ` gutter, so it cannot forge them. `--json` output
//! is not touched: serde_json escapes control characters itself.

use std::borrow::Cow;

use crate::library::RunReport;

use crate::controls::neutralise;

/// Skill-controlled text for a terminal, newlines kept.
pub(crate) fn clean(text: &str) -> Cow<'_, str> {
    neutralise(text, true)
}

/// Skill-controlled text for one line of a terminal: newlines are escaped too.
pub(crate) fn clean_line(text: &str) -> Cow<'_, str> {
    neutralise(text, false)
}

/// Starts of the lines `print_run` writes itself.
const REPORT_LINES: &[&str] = &["--", "status:", "error:", "denied", "memory stored:", "not granted", "[", "("];

/// A skill's output for the terminal: cleaned, and behind a gutter if one of its lines
/// could pass for a line of the host's report.
pub(crate) fn skill_text(output: &str) -> String {
    let text = clean(output);
    let forged = text.lines().any(|l| {
        let l = l.trim_start().to_ascii_lowercase();
        REPORT_LINES.iter().any(|p| l.starts_with(p))
    });
    if !forged {
        return text.into_owned();
    }
    text.lines().map(|l| format!("| {l}")).collect::<Vec<_>>().join("\n")
}

/// Skill-controlled text for a column of a terminal line: cleaned, on one line, at most
/// `max_chars` characters.
pub(super) fn one_line(text: &str, max_chars: usize) -> String {
    crate::text::fit_line(&clean_line(text), max_chars)
}

pub(super) fn print_list(label: &str, items: &[String]) {
    if items.is_empty() {
        println!("  {label}: nothing");
    } else {
        println!("  {label}:");
        for i in items {
            println!("    - {}", clean_line(i));
        }
    }
}

pub(super) fn print_run(r: &RunReport) {
    match &r.outcome.result {
        Ok(o) => {
            println!("{}", skill_text(&o.output));
            println!("--");
            println!("status: {:?}", o.status);
            for (k, v) in &o.metadata {
                println!("  {}: {}", clean_line(k), clean_line(v));
            }
        }
        Err(e) => println!("error: {}", clean_line(&e.to_string())),
    }
    for m in &r.memories.stored {
        println!("memory stored: #{m}");
    }
    for d in &r.outcome.denials {
        println!("denied ({}): {}", d.capability, clean_line(&d.message));
        if let Some(spec) = grant_spec_for(d) {
            println!("  to allow it: skillhost policy grant {} {spec}", r.skill);
        }
    }
    if !r.not_granted.is_empty() {
        println!("not granted (the call ran without it): {}", clean_line(&r.not_granted.join("; ")));
    }
    for l in &r.outcome.logs {
        eprintln!("[{}] {}", l.level, clean_line(&l.message));
    }
    eprintln!(
        "({} us, peak memory {} KiB, session {})",
        r.outcome.elapsed_us,
        r.outcome.memory_peak_bytes / 1024,
        r.session
    );
}

/// The grant spec that would have allowed what `denial` refused, if a grant can: raw sockets
/// and internal addresses are never granted this way.
pub(super) fn grant_spec_for(denial: &crate::sandbox::Denial) -> Option<String> {
    let message = &denial.message;
    if message.contains("raw sockets") || message.contains("internal address") || message.contains("has no host") {
        return None;
    }
    match denial.capability.as_str() {
        "memory" if message.contains("memory: write") => Some("memory=write".to_string()),
        "memory" if message.contains("memory: read") => Some("memory=read".to_string()),
        // The other kinds: every declared right of that kind (the grant is bounded by SKILL.md).
        kind if crate::capabilities::CapabilityKind::from_name(kind).is_some() => Some(kind.to_string()),
        _ => None,
    }
}

/// A mistake in how a command was called (exit code 2, like clap's own usage errors), as
/// opposed to a failure while doing it (exit code 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_shown_not_obeyed() {
        assert_eq!(clean("plain\ttext\nline two"), "plain\ttext\nline two");
        assert_eq!(clean("\u{1b}[2J\u{1b}[Hhi"), "\\u{1b}[2J\\u{1b}[Hhi");
        assert_eq!(clean("ok\rstatus"), "ok\\u{d}status");
        assert_eq!(clean_line("a\nb"), "a\\u{a}b");
        assert_eq!(clean("\u{9b}31m \u{202e}txt"), "\\u{9b}31m \\u{202e}txt");
        assert_eq!(skill_text("all fine"), "all fine");
        assert_eq!(skill_text("done\n--\nstatus: Success"), "| done\n| --\n| status: Success");
        assert_eq!(one_line("a\u{1b}]0;title\u{7}b", 80), "a\\u{1b}]0;title\\u{7}b");
    }
}
