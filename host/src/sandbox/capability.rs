//! The enforcement half of a capability: which imports it governs, what it links into the
//! process-wide linker (once), and the slice of per-call state its host functions see
//! (prepared from the effective rights, like wasmtime-wasi's per-interface contexts and
//! views). The list of capabilities is `capabilities::with_capabilities!`: the per-call
//! state struct and the link/prepare/finish loops below are generated from it, so a
//! capability without an [`Enforce`] impl does not compile.

use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;

use super::bindings::skillhost::skill::types::HostError;
use super::{CallGrant, CallState, Denial, Invocation};
use crate::capabilities::secrets::held::CallSecrets;
use crate::capabilities::{Capability, CapabilityKind};
use crate::memory::MemoryStore;

/// What a capability's `prepare` may read about the call.
pub(crate) struct CallSetup<'a> {
    pub grant: &'a CallGrant,
    pub invocation: &'a Invocation,
    /// Canonical host paths no mount may contain or lie inside (the home, the project policy).
    pub protected: &'a [std::path::PathBuf],
    /// The values the host holds for the call (the `secrets` capability's, and granted env
    /// values) with their leak scanner: the one state capabilities share, made before any is
    /// prepared, so that every one that moves data out (network, session, the output) scans.
    pub secrets: &'a Arc<CallSecrets>,
}

/// A capability as the sandbox enforces it.
pub(crate) trait Enforce: Capability {
    /// The part of a call's state this capability's host functions see, and nothing else.
    type State: Send + 'static;
    /// Interfaces (names without `@version`) whose reach this capability decides.
    const GOVERNS: &'static [&'static str];

    /// Link this capability's host interfaces (once per engine). Interfaces that are part
    /// of WASI's core (filesystem) are linked with it; their reach is set in `prepare`.
    fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()>;

    /// One call's state from its effective rights; may configure the WASI context.
    /// Rights that cannot be honoured (a mount that does not resolve) go to `denials`.
    fn prepare(
        effective: &Self::Decl,
        call: &CallSetup<'_>,
        wasi: &mut WasiCtxBuilder,
        denials: &mut Vec<Denial>,
    ) -> Result<Self::State>;

    /// Attempted uses refused during the call.
    fn take_denials(_state: &mut Self::State) -> Vec<Denial> {
        Vec::new()
    }

    /// Remove from text the call hands back (`what`: "the output", "a log line"...) what
    /// this capability must not leak (secret values; see `secrets`). True when it did.
    fn redact(_state: &Self::State, _what: &str, _text: &mut String) -> bool {
        false
    }
}

macro_rules! define_states {
    ($($field:ident : $module:ident :: $cap:ident => $variant:ident),* $(,)?) => {
        /// Every capability's slice of one call's state.
        pub(crate) struct CapabilityStates {
            $(pub $field: <crate::capabilities::$module::$cap as Enforce>::State,)*
        }

        /// Link every capability's host interfaces.
        pub(crate) fn link_all(linker: &mut Linker<CallState>) -> Result<()> {
            $(<crate::capabilities::$module::$cap as Enforce>::add_to_linker(linker)?;)*
            Ok(())
        }

        /// Prepare every capability's state for one call. The values the host holds for it
        /// (granted secrets and env values) are made first: every capability that moves
        /// data out of the call scans for them ([`CallSetup::secrets`]).
        pub(crate) fn prepare_all(
            grant: &CallGrant,
            invocation: &Invocation,
            protected: &[std::path::PathBuf],
            wasi: &mut WasiCtxBuilder,
            denials: &mut Vec<Denial>,
        ) -> Result<CapabilityStates> {
            let capabilities = &grant.capabilities;
            let secrets = Arc::new(CallSecrets::new(&capabilities.secrets, &grant.secret_values, &capabilities.env));
            let call = &CallSetup { grant, invocation, protected, secrets: &secrets };
            let effective = &grant.capabilities;
            Ok(CapabilityStates {
                $($field: <crate::capabilities::$module::$cap as Enforce>::prepare(&effective.$field, call, wasi, denials)?,)*
            })
        }

        /// The capability that governs `interface` (a name without version), if any.
        pub(crate) fn governing(interface: &str) -> Option<CapabilityKind> {
            $(
                if <crate::capabilities::$module::$cap as Enforce>::GOVERNS.contains(&interface) {
                    return Some(CapabilityKind::$variant);
                }
            )*
            None
        }

        /// Every interface some capability governs.
        pub(crate) fn governed() -> Vec<&'static str> {
            let mut out = Vec::new();
            $(out.extend_from_slice(<crate::capabilities::$module::$cap as Enforce>::GOVERNS);)*
            out
        }

        impl CapabilityStates {
            pub(crate) fn take_denials(&mut self) -> Vec<Denial> {
                let mut out = Vec::new();
                $(out.extend(<crate::capabilities::$module::$cap as Enforce>::take_denials(&mut self.$field));)*
                out
            }

            /// Every capability's redaction of `text`; true when any removed something.
            pub(crate) fn redact(&self, what: &str, text: &mut String) -> bool {
                let mut redacted = false;
                $(redacted |= <crate::capabilities::$module::$cap as Enforce>::redact(&self.$field, what, text);)*
                redacted
            }
        }
    };
}

crate::capabilities::with_capabilities!(define_states);

/// Run blocking store work (redb, tantivy, fsync) on tokio's blocking pool, so a guest's
/// memory call never stalls the other calls on its worker thread.
pub(crate) async fn off_executor<R: Send + 'static>(
    store: Option<&Arc<dyn MemoryStore>>,
    work: impl FnOnce(&dyn MemoryStore) -> Result<R, HostError> + Send + 'static,
) -> Result<R, HostError> {
    let store = store.cloned().ok_or_else(|| HostError::Unavailable("no memory store is open for this call".into()))?;
    match tokio::task::spawn_blocking(move || work(&*store)).await {
        Ok(r) => r,
        Err(e) => Err(HostError::Unavailable(format!("the memory store task failed: {e}"))),
    }
}
