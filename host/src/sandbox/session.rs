//! `session`: working memory scoped to the agent session, through the [`MemoryStore`]
//! seam. Without the capability every call returns `denied` (and is recorded).
//!
//! [`MemoryStore`]: crate::memory::MemoryStore

use super::bindings::skillhost::skill::session::Host;
use super::bindings::skillhost::skill::types::HostError;
use super::{CallState, Denial};

const MAX_KEY_BYTES: usize = 256;
const MAX_VALUE_BYTES: usize = 256 * 1024;
/// Keys per session, so a skill cannot fill the store through one session (256 KiB each).
const MAX_KEYS: usize = 256;

impl CallState {
    fn session_allowed(&mut self, op: &str) -> Result<(), HostError> {
        if self.host.session {
            return Ok(());
        }
        let message = format!("session.{op} needs the `session` capability, which this skill does not hold");
        self.denials.push(Denial { capability: "session".into(), message: message.clone() });
        Err(HostError::Denied(message))
    }
}

fn unavailable(e: anyhow::Error) -> HostError {
    HostError::Unavailable(format!("{e:#}"))
}

impl Host for CallState {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, HostError>> {
        if let Err(e) = self.session_allowed("get") {
            return Ok(Err(e));
        }
        Ok(self.host.store().and_then(|s| s.session_get(&self.host.session_id, &key).map_err(unavailable)))
    }

    fn set(&mut self, key: String, value: String) -> wasmtime::Result<Result<(), HostError>> {
        if let Err(e) = self.session_allowed("set") {
            return Ok(Err(e));
        }
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Ok(Err(HostError::InvalidInput(format!("keys must be 1-{MAX_KEY_BYTES} bytes"))));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Ok(Err(HostError::InvalidInput(format!(
                "value of {} bytes exceeds {MAX_VALUE_BYTES}; store a summary instead",
                value.len()
            ))));
        }
        Ok(self.host.store().and_then(|s| {
            let keys = s.session_keys(&self.host.session_id).map_err(unavailable)?;
            if keys.len() >= MAX_KEYS && !keys.contains(&key) {
                return Err(HostError::InvalidInput(format!(
                    "this session already holds {MAX_KEYS} keys; overwrite an existing key instead"
                )));
            }
            s.session_set(&self.host.session_id, &key, &value).map_err(unavailable)
        }))
    }

    fn keys(&mut self) -> wasmtime::Result<Result<Vec<String>, HostError>> {
        if let Err(e) = self.session_allowed("keys") {
            return Ok(Err(e));
        }
        Ok(self.host.store().and_then(|s| s.session_keys(&self.host.session_id).map_err(unavailable)))
    }
}
