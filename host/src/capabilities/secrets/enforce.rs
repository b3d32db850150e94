//! `secrets`: values the host holds and the guest never sees.
//!
//! A granted secret is injected by the host into outbound requests to the hosts its
//! declaration names (over https, or plain http to a loopback address for local servers):
//! the guest builds the request, the header is added on its way out. Nothing else carries
//! the value, and a [`LeakScanner`] makes sure of it: every value this call's host side
//! holds (granted secrets, and granted environment values, which the guest does see) is
//! searched for, plain and in simple encodings (base64, base64url, hex, percent-encoding),
//!
//! - in every outbound request (URL, headers, streamed body): a hit blocks the request;
//! - in responses: a server that echoes the secret back gets it masked before the guest
//!   reads it (same length, so framing stays intact);
//! - in what the call hands back (output, metadata, proposed memories, logs, stdout and
//!   stderr) and in session values it stores: a hit is redacted or refused.
//!
//! Every hit is a denial in the call's report and so in the audit log, which names the
//! secret and the encoding, never the value. Values shorter than [`super::leak_scan::MIN_SCANNED_LEN`] are
//! not scanned (an env value like `1` or `en` would match everywhere).
//!
//! The parts: [`super::leak_scan`] finds values in bytes, [`super::held`] injects and
//! scans on the way in and out; this module is the capability's entry in the list.

use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;

use crate::capabilities::SecretUse;
use crate::capabilities::secrets::Secrets;
use crate::capabilities::secrets::held::CallSecrets;
use crate::sandbox::capability::{CallSetup, Enforce};
use crate::sandbox::{CallState, Denial};

impl Enforce for Secrets {
    type State = Arc<CallSecrets>;
    /// Secrets are no interface of their own: they ride on `wasi:http` (see `network`).
    const GOVERNS: &'static [&'static str] = &[];

    fn add_to_linker(_linker: &mut Linker<CallState>) -> Result<()> {
        Ok(())
    }

    fn prepare(
        _effective: &Vec<SecretUse>,
        call: &CallSetup<'_>,
        _: &mut WasiCtxBuilder,
        _: &mut Vec<Denial>,
    ) -> Result<Arc<CallSecrets>> {
        Ok(call.secrets.clone())
    }

    fn take_denials(state: &mut Arc<CallSecrets>) -> Vec<Denial> {
        state.take_denials()
    }

    fn redact(state: &Arc<CallSecrets>, what: &str, text: &mut String) -> bool {
        state.redact(what, text)
    }
}
