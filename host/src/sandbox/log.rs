//! `log`: leveled lines from the guest, capped per call so a chatty skill cannot exhaust
//! host memory. Always available (it grants nothing).

use serde::Serialize;
use wasmtime::component::{HasData, Linker};

use super::CallState;
use super::bindings::skillhost::skill::log::{self as wit_log, Host, Level};

const MAX_LINES: usize = 1_000;
const MAX_LINE_BYTES: usize = 4_096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub level: &'static str,
    pub message: String,
}

/// A call's log lines: all that `skillhost:skill/log` sees.
#[derive(Default)]
pub(super) struct LogBuffer {
    pub lines: Vec<LogLine>,
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
        let lines = &mut self.lines;
        if lines.len() >= MAX_LINES {
            if lines.len() == MAX_LINES {
                lines.push(LogLine { level: "warn", message: format!("[skillhost: log capped at {MAX_LINES} lines]") });
            }
            return Ok(());
        }
        if message.len() > MAX_LINE_BYTES {
            message.truncate(message.floor_char_boundary(MAX_LINE_BYTES));
            message.push_str(" [truncated]");
        }
        let level = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        lines.push(LogLine { level, message });
        Ok(())
    }
}
