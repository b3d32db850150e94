//! `env`: only the named variables are passed, with the host's current values; the guest
//! sees no other variable (an undeclared or ungranted name is simply not set).

use anyhow::Result;
use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;

use crate::capabilities::env::Env;
use crate::sandbox::capability::{CallSetup, Enforce};
use crate::sandbox::{CallState, Denial};

impl Enforce for Env {
    type State = ();
    /// `wasi:cli/environment` is ambient: every std-based component imports it to read its
    /// arguments at start-up, and it yields only the variables granted here.
    const GOVERNS: &'static [&'static str] = &[];

    fn add_to_linker(_linker: &mut Linker<CallState>) -> Result<()> {
        Ok(())
    }

    fn prepare(names: &Vec<String>, _: &CallSetup<'_>, wasi: &mut WasiCtxBuilder, _: &mut Vec<Denial>) -> Result<()> {
        for name in names {
            if let Ok(value) = std::env::var(name) {
                wasi.env(name, value);
            }
        }
        Ok(())
    }
}
