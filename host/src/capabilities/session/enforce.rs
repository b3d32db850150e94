//! `session`: working memory scoped to the agent session, through the [`MemoryStore`]
//! seam. Without the capability every call returns `denied` (and is recorded). Store work
//! runs on the blocking pool.
//!
//! [`MemoryStore`]: crate::memory::MemoryStore

use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::{HasData, Linker};
use wasmtime_wasi::WasiCtxBuilder;

use crate::capabilities::CapabilityKind;
use crate::capabilities::session::Session;
use crate::memory::MemoryStore;
use crate::sandbox::bindings::skillhost::skill::session::{self as wit_session, Host};
use crate::sandbox::bindings::skillhost::skill::types::HostError;
use crate::sandbox::capability::off_executor;
use crate::sandbox::capability::{CallSetup, Enforce};
use crate::sandbox::{CallState, Denial};

const MAX_KEY_BYTES: usize = 256;
const MAX_VALUE_BYTES: usize = 256 * 1024;
/// Keys per session, so a skill cannot fill the store through one session (256 KiB each).
const MAX_KEYS: usize = 256;

/// The session slice of a call.
pub(crate) struct SessionState {
    held: bool,
    store: Option<Arc<dyn MemoryStore>>,
    session_id: String,
    /// The most the session may hold after a `set` (keys and values, bytes: `session_kb`).
    max_bytes: usize,
    denials: Vec<Denial>,
    /// Values the host holds: a session value carrying one is refused (it would outlive
    /// the call and reach the next skill that reads the session).
    secrets: Arc<crate::capabilities::secrets::held::CallSecrets>,
}

/// Links `skillhost:skill/session` to a call's [`SessionState`] only.
struct SessionView;

impl HasData for SessionView {
    type Data<'a> = &'a mut SessionState;
}

impl Enforce for Session {
    type State = SessionState;
    const GOVERNS: &'static [&'static str] = &["skillhost:skill/session"];

    fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
        wit_session::add_to_linker::<CallState, SessionView>(linker, |s| &mut s.caps.session)?;
        Ok(())
    }

    fn prepare(held: &bool, call: &CallSetup<'_>, _: &mut WasiCtxBuilder, _: &mut Vec<Denial>) -> Result<SessionState> {
        Ok(SessionState {
            held: *held,
            store: call.grant.store.clone(),
            session_id: call.invocation.session_id.clone(),
            max_bytes: (call.grant.limits.session_kb as usize).saturating_mul(1024),
            denials: Vec::new(),
            secrets: call.secrets.clone(),
        })
    }

    fn take_denials(state: &mut SessionState) -> Vec<Denial> {
        std::mem::take(&mut state.denials)
    }
}

impl SessionState {
    fn allowed(&mut self, op: &str) -> Result<(), HostError> {
        if self.held {
            return Ok(());
        }
        let message = format!("session.{op} needs the `session` capability, which this skill does not hold");
        self.denials.push(Denial { capability: CapabilityKind::Session.into(), message: message.clone() });
        Err(HostError::Denied(message))
    }
}

fn unavailable(e: anyhow::Error) -> HostError {
    HostError::Unavailable(format!("{e:#}"))
}

impl Host for SessionState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, HostError>> {
        if let Err(e) = self.allowed("get") {
            return Ok(Err(e));
        }
        let session = self.session_id.clone();
        Ok(off_executor(self.store.as_ref(), move |s| s.session_get(&session, &key).map_err(unavailable)).await)
    }

    async fn set(&mut self, key: String, value: String) -> wasmtime::Result<Result<(), HostError>> {
        if let Err(e) = self.allowed("set") {
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
        let scanner = &self.secrets.scanner;
        let refused = match (scanner.find(key.as_bytes()), scanner.find(value.as_bytes())) {
            (Some(leak), _) => Some(format!("session.set refused: its key carried {leak}")),
            (None, Some(leak)) => Some(format!("session.set of `{key}` refused: its value carried {leak}")),
            (None, None) => None,
        };
        if let Some(message) = refused {
            self.denials.push(Denial { capability: CapabilityKind::Secrets.into(), message: message.clone() });
            return Ok(Err(HostError::Denied(message)));
        }
        let (session, max_bytes) = (self.session_id.clone(), self.max_bytes);
        Ok(off_executor(self.store.as_ref(), move |s| {
            let keys = s.session_keys(&session).map_err(unavailable)?;
            if keys.len() >= MAX_KEYS && !keys.contains(&key) {
                return Err(HostError::InvalidInput(format!(
                    "this session already holds {MAX_KEYS} keys; overwrite an existing key instead"
                )));
            }
            // The session's size with this value in place of the key's old one. Bounded by
            // the limit itself (no set makes it larger), so reading it back stays cheap.
            let mut size = key.len() + value.len();
            for k in keys.iter().filter(|k| **k != key) {
                size += k.len() + s.session_get(&session, k).map_err(unavailable)?.map_or(0, |v| v.len());
            }
            if size > max_bytes {
                return Err(HostError::InvalidInput(format!(
                    "session.set of `{key}` refused: the session would hold {} KiB, over its limit of {} KiB (limit session_kb); overwrite or shorten existing keys, or declare `limits: session_kb: N` in SKILL.md (at most {}) and have the user grant it with `skillhost policy grant NAME limits`",
                    size.div_ceil(1024),
                    max_bytes / 1024,
                    crate::capabilities::Limits::CEILING.session_kb
                )));
            }
            s.session_set(&session, &key, &value).map_err(unavailable)
        })
        .await)
    }

    async fn keys(&mut self) -> wasmtime::Result<Result<Vec<String>, HostError>> {
        if let Err(e) = self.allowed("keys") {
            return Ok(Err(e));
        }
        let session = self.session_id.clone();
        Ok(off_executor(self.store.as_ref(), move |s| s.session_keys(&session).map_err(unavailable)).await)
    }
}
