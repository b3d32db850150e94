//! `env`: only the named variables are passed, with the host's current values; the guest
//! sees no other variable (an undeclared or ungranted name is simply not set).

use wasmtime_wasi::WasiCtxBuilder;

pub(super) fn apply(names: &[String], builder: &mut WasiCtxBuilder) {
    for name in names {
        if let Ok(value) = std::env::var(name) {
            builder.env(name, value);
        }
    }
}
