//! `clock` in the sandbox: without it the WASI wall clock is a stopped one that remembers
//! it was read, and the call's denials say so once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use wasmtime::component::Linker;
use wasmtime_wasi::{HostWallClock, WasiCtxBuilder};

use super::Clock;
use crate::capabilities::CapabilityKind;
use crate::sandbox::capability::{CallSetup, Enforce};
use crate::sandbox::{CallState, Denial};

/// Set when a skill without `clock` read the wall clock.
#[derive(Default)]
pub(crate) struct ClockState {
    read_while_stopped: Arc<AtomicBool>,
}

/// The wall clock of a call that does not hold `clock`: always the Unix epoch.
struct StoppedClock {
    read: Arc<AtomicBool>,
}

impl HostWallClock for StoppedClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        self.read.store(true, Ordering::Relaxed);
        Duration::ZERO
    }
}

impl Enforce for Clock {
    type State = ClockState;
    /// `wasi:clocks/wall-clock` is ambient at install (every std component imports it).
    const GOVERNS: &'static [&'static str] = &[];

    fn add_to_linker(_linker: &mut Linker<CallState>) -> Result<()> {
        // Linked with WASI's core; `prepare` decides which clock it reads.
        Ok(())
    }

    fn prepare(held: &bool, _: &CallSetup<'_>, wasi: &mut WasiCtxBuilder, _: &mut Vec<Denial>) -> Result<ClockState> {
        let state = ClockState::default();
        if !*held {
            wasi.wall_clock(StoppedClock { read: state.read_while_stopped.clone() });
        }
        Ok(state)
    }

    fn take_denials(state: &mut ClockState) -> Vec<Denial> {
        if !state.read_while_stopped.swap(false, Ordering::Relaxed) {
            return Vec::new();
        }
        vec![Denial::new(
            CapabilityKind::Clock,
            "the skill read the wall clock without the `clock` capability and got 1970-01-01T00:00:00Z; declare `clock: true` in SKILL.md and grant it to give it the time",
        )]
    }
}
