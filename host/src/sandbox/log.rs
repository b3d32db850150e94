//! `log`: leveled lines from the guest, capped per call so a chatty skill cannot exhaust
//! host memory. Always available (it grants nothing).

use serde::Serialize;

use super::CallState;
use super::bindings::skillhost::skill::log::{Host, Level};

const MAX_LINES: usize = 1_000;
const MAX_LINE_BYTES: usize = 4_096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub level: &'static str,
    pub message: String,
}

impl Host for CallState {
    fn write(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        if self.logs.len() >= MAX_LINES {
            if self.logs.len() == MAX_LINES {
                self.logs
                    .push(LogLine { level: "warn", message: format!("[skillhost: log capped at {MAX_LINES} lines]") });
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
        self.logs.push(LogLine { level, message });
        Ok(())
    }
}
