//! `log`: leveled lines from the guest, capped per call (lines, and bytes by the `log_kb`
//! limit) so a chatty skill cannot exhaust host memory or the audit log. Always available
//! (it grants nothing).

use serde::Serialize;
use wasmtime::component::{HasData, Linker};

use super::CallState;
use super::bindings::skillhost::skill::log::{self as wit_log, Host, Level};
use crate::capabilities::Limits;

const MAX_LINES: usize = 1_000;
const MAX_LINE_BYTES: usize = 4_096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

/// The WIT `log` levels, serialized as the audit log has always written them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the serialized name.
impl PartialEq<&str> for LogLevel {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<Level> for LogLevel {
    fn from(level: Level) -> LogLevel {
        match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        }
    }
}

/// A call's log lines: all that `skillhost:skill/log` sees.
#[derive(Default)]
pub(super) struct LogBuffer {
    pub lines: Vec<LogLine>,
    /// Message bytes kept so far, and the most the call may keep (`log_kb`).
    bytes: usize,
    max_bytes: usize,
    /// Lines dropped over either cap (said once, in the last line).
    dropped: u64,
}

impl LogBuffer {
    pub(super) fn new(limits: &Limits) -> LogBuffer {
        LogBuffer { max_bytes: (limits.log_kb as usize).saturating_mul(1024), ..LogBuffer::default() }
    }

    fn capped(&self) -> bool {
        self.dropped > 0
    }
}

struct LogView;

impl HasData for LogView {
    type Data<'a> = &'a mut LogBuffer;
}

/// Link `skillhost:skill/log` (ambient: it grants nothing).
pub(super) fn add_to_linker(linker: &mut Linker<CallState>) -> anyhow::Result<()> {
    wit_log::add_to_linker::<CallState, LogView>(linker, |s| &mut s.logs)?;
    Ok(())
}

impl Host for LogBuffer {
    async fn write(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        if self.capped() {
            self.dropped += 1;
            return Ok(());
        }
        if message.len() > MAX_LINE_BYTES {
            message.truncate(message.floor_char_boundary(MAX_LINE_BYTES));
            message.push_str(" [truncated]");
        }
        let over_bytes = self.bytes.saturating_add(message.len()) > self.max_bytes;
        if self.lines.len() >= MAX_LINES || over_bytes {
            self.dropped = 1;
            let why = if over_bytes {
                format!(
                    "{} KiB (limit log_kb; a skill may ask for up to {} with `limits: log_kb`, granted with `skillhost policy grant NAME limits`)",
                    self.max_bytes / 1024,
                    Limits::CEILING.log_kb
                )
            } else {
                format!("{MAX_LINES} lines")
            };
            self.lines.push(LogLine {
                level: LogLevel::Warn,
                message: format!("[skillhost: log capped at {why}; the rest of this call's log lines were dropped]"),
            });
            return Ok(());
        }
        self.bytes += message.len();
        self.lines.push(LogLine { level: level.into(), message });
        Ok(())
    }
}
