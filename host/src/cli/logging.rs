//! Diagnostics of the library modules (memory, library, sandbox, agent, mcp) go through
//! `tracing`; this is where the `skillhost` binary decides which of them it shows.
//!
//! Everything goes to stderr, never stdout: stdout carries results, `--json` objects and the
//! MCP stdio protocol, which a stray log line would corrupt. The level: warnings by default
//! (what the library printed as `warning: ...` before), `-v` info, `-vv` debug, `-vvv`
//! trace; `RUST_LOG` (an `EnvFilter` directive such as `skillhost=debug`) overrides both.
//! Progress notices of long library work (embedding every memory once) are info events of
//! the target [`PROGRESS_TARGET`], shown at the default level too.
//!
//! Lines are plain text, `warning: message key=value`, like the CLI's own messages; with
//! `-vv` and up each line also names the module it came from. `--log-format json` (or
//! `SKILLHOST_LOG_FORMAT=json`) writes one JSON object a line instead (`timestamp`,
//! `level`, `target`, `fields` with `message`), for a server whose stderr goes to a log
//! shipper: the same events and filter, nothing to parse out of prose.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of progress notices the default level shows (see the module docs).
pub const PROGRESS_TARGET: &str = "skillhost::progress";

/// The filter for `-v` repeated `verbosity` times, unless `rust_log` (the value of
/// `RUST_LOG`) is set and valid. An invalid `RUST_LOG` is reported and ignored.
fn filter(verbosity: u8, rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    if let Some(directives) = rust_log.filter(|d| !d.trim().is_empty()) {
        match EnvFilter::builder().parse(directives) {
            Ok(filter) => return (filter, None),
            Err(e) => {
                let why = format!("RUST_LOG `{directives}` is not a valid filter ({e}); using the -v level instead");
                return (default_filter(verbosity), Some(why));
            }
        }
    }
    (default_filter(verbosity), None)
}

fn default_filter(verbosity: u8) -> EnvFilter {
    let directives = match verbosity {
        0 => format!("warn,{PROGRESS_TARGET}=info"),
        1 => "warn,skillhost=info".to_string(),
        2 => "info,skillhost=debug".to_string(),
        _ => "trace".to_string(),
    };
    EnvFilter::builder().parse_lossy(directives)
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `warning: message key=value`.
    Text,
    /// One JSON object a line.
    Json,
}

/// Install the subscriber for this process (once; later calls change nothing).
pub fn init(verbosity: u8, format: LogFormat) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, complaint) = filter(verbosity, rust_log.as_deref());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false);
    let installed = match format {
        LogFormat::Text => {
            builder.event_format(PlainLines { targets: verbosity >= 2 || rust_log.is_some() }).try_init().is_ok()
        }
        LogFormat::Json => builder.json().with_current_span(false).with_span_list(false).try_init().is_ok(),
    };
    if installed && let Some(why) = complaint {
        tracing::warn!("{why}");
    }
}

/// `warning: message key=value`; `[module]` after the level when `targets`.
struct PlainLines {
    targets: bool,
}

impl<S, N> FormatEvent<S, N> for PlainLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        if meta.target() == PROGRESS_TARGET {
            write!(writer, "  .. ")?;
        } else {
            let level = match *meta.level() {
                Level::ERROR => "error",
                Level::WARN => "warning",
                Level::INFO => "info",
                Level::DEBUG => "debug",
                Level::TRACE => "trace",
            };
            write!(writer, "{level}: ")?;
            if self.targets {
                write!(writer, "[{}] ", meta.target())?;
            }
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_and_a_bad_one_is_reported() {
        let (f, complaint) = filter(0, Some("skillhost=debug"));
        assert_eq!(f.to_string(), "skillhost=debug");
        assert!(complaint.is_none());
        let (f, complaint) = filter(1, Some("skillhost=notalevel"));
        assert!(f.to_string().contains("skillhost=info"), "{f}");
        assert!(complaint.unwrap().contains("RUST_LOG"));
        assert!(filter(0, Some("  ")).0.to_string().contains("warn"));
    }
}
