//! Instances made ahead of calls: for components that are slow to instantiate, and for any
//! skill while the host has nothing else to do.
//!
//! A Python component is a dozen dynamically linked core modules; wasmtime fills their
//! shared function table eagerly (its segments sit at offsets only known at link time), so
//! instantiating one costs over a millisecond, more than the call itself. For such a skill
//! the runtime keeps one instance made ahead on the blocking pool after each call, and the
//! next call starts at `execute`.
//!
//! Isolation is unchanged: a made-ahead instance has never run a call. It was instantiated
//! with no capability at all (a WASI context with nothing in it, no grant), and the call's
//! own state (WASI context, capabilities, limits, pipes) replaces that before any export
//! runs; only what instantiation itself created (the resource table, memory accounting)
//! carries over. Each instance serves one call and is dropped with it, as before.
//!
//! Whether a skill is slow is measured, not guessed: its first two instantiations are timed
//! inline. A component slower than [`WORTH_MAKING_AHEAD`] gets its next instance made on the
//! blocking pool after each call. A fast one (a Rust component instantiates in tens of
//! microseconds) gets it made by a task spawned on the runtime that ran the call, which a
//! worker runs when the call's task next waits: for a server, normally once the answer is
//! written, while the client reads it. That costs no hand-off between threads, and when the
//! next call takes the instance no more CPU than the inline instantiation it skips; a
//! client that calls one at a time (an MCP client over stdio, an agent) finds its next call
//! starting at `execute`. Such a task gives its worker back at every epoch tick and gives
//! up after [`MAKE_ON_WORKER_WALL`] (the skill is then treated as slow), and fast skills
//! hold at most half of the runtime's made-ahead places ([`KEPT_FOR_SLOW`]), so that many
//! rarely called fast skills cannot keep a slow one from having its instance. (Made on the
//! blocking pool instead, a fast skill's instance costs a thread wake-up per call: under
//! load that took 10-20% of the throughput; README, Performance.) Nothing is made ahead
//! before a skill's second call, so a one-shot `skill run` pays nothing.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use super::CallState;
use super::bindings::{Skill, SkillPre};

/// Instantiation slower than this (the faster of a skill's first two) makes instances ahead.
pub(crate) const WORTH_MAKING_AHEAD: Duration = Duration::from_micros(250);
/// Made-ahead instances one runtime holds at once (each holds a pool slot).
pub(crate) const MAX_MADE_AHEAD: usize = 16;
/// Wall time a background instantiation may take (start functions run guest code).
const MAKE_AHEAD_WALL: Duration = Duration::from_secs(2);
/// Wall time an instantiation made on a worker may take (checked at epoch ticks): past it,
/// the skill is treated as slow, and made ahead on the blocking pool from then on.
const MAKE_ON_WORKER_WALL: Duration = Duration::from_millis(5);
/// Made-ahead places only skills slow to instantiate may take: a fast skill's instance is
/// made only while more than this many are free.
const KEPT_FOR_SLOW: usize = MAX_MADE_AHEAD / 2;

/// When a runtime makes instances ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MakeAhead {
    /// For every skill from its second call on: one slow to instantiate (over
    /// [`WORTH_MAKING_AHEAD`]) on the blocking pool, a fast one on the worker that ran the
    /// call, when that call's task next waits (see the module doc).
    #[default]
    Adaptive,
    /// Only for skills slow to instantiate, on the blocking pool (every other call
    /// instantiates inline, as a benchmark of instantiation wants).
    WhenSlow,
    /// For every skill from its second call on, on the blocking pool (tests).
    Always,
    /// Never: every call instantiates inline.
    Never,
}

/// Where a made-ahead instance is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maker {
    BlockingPool,
    /// A task on the runtime that ran the call (on a worker, not a thread of its own).
    ThisWorker,
}

/// One instance ready for a call, with the stack tier it was made for.
pub(crate) struct Made {
    pub tier: usize,
    pub store: Store<CallState>,
    pub instance: Skill,
    _held: Held,
}

/// A unit of the runtime's made-ahead budget, given back on drop.
struct Held(Arc<AtomicUsize>);

impl Held {
    /// One place of `budget`, if more than `leave` are free.
    fn take(budget: &Arc<AtomicUsize>, leave: usize) -> Option<Held> {
        budget.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n > leave).then(|| n - 1)).ok()?;
        Some(Held(budget.clone()))
    }
}

/// Clears a slot's `refilling` when its making ends, however it ends (also when the task is
/// dropped before it ran, at a runtime's shutdown): else the skill would never be made
/// ahead again.
struct Refilling(Arc<ReadySlot>);

impl Drop for Refilling {
    fn drop(&mut self) {
        self.0.refilling.store(false, Ordering::Release);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// A skill's made-ahead instance and what decides whether it gets one.
#[derive(Default)]
pub(crate) struct ReadySlot {
    made: Mutex<Option<Made>>,
    /// Whether `made` holds one: read without the lock on every call, so that a skill
    /// without made-ahead instances costs its callers no shared write.
    has_made: AtomicBool,
    refilling: AtomicBool,
    calls: AtomicU32,
    /// Fastest inline instantiation seen, in µs (`u64::MAX`: none yet).
    fastest_us: AtomicU64,
    inline_seen: AtomicU32,
    /// A background instantiation failed: this skill is instantiated inline from now on.
    broken: AtomicBool,
    /// An instantiation on a worker outran [`MAKE_ON_WORKER_WALL`]: slow from now on.
    made_slowly: AtomicBool,
}

impl ReadySlot {
    pub fn new() -> ReadySlot {
        ReadySlot { fastest_us: AtomicU64::new(u64::MAX), ..Default::default() }
    }

    /// The instance made ahead for `tier`, if there is one (another tier's is dropped).
    pub fn take(&self, tier: usize) -> Option<Made> {
        if !self.has_made.load(Ordering::Acquire) {
            return None;
        }
        let mut slot = self.made.lock().unwrap_or_else(|p| p.into_inner());
        self.has_made.store(false, Ordering::Release);
        let made = slot.take()?;
        (made.tier == tier).then_some(made)
    }

    pub fn has_one(&self) -> bool {
        self.has_made.load(Ordering::Acquire)
    }

    /// Count a call, and time an inline instantiation. Counts stop at 2 (all [`wanted`]
    /// asks) and the fastest time is written only when it improves: in steady state this
    /// reads shared lines and writes none, so cores calling one skill do not pass them back
    /// and forth on every call.
    pub fn called(&self, inline_instantiation: Option<Duration>) {
        if self.calls.load(Ordering::Acquire) < 2 {
            self.calls.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(took) = inline_instantiation {
            let us = took.as_micros() as u64;
            if us < self.fastest_us.load(Ordering::Acquire) {
                self.fastest_us.fetch_min(us, Ordering::AcqRel);
            }
            if self.inline_seen.load(Ordering::Acquire) < 2 {
                self.inline_seen.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether the skill has been called more than once (a one-shot run pays for nothing).
    pub fn repeated(&self) -> bool {
        self.calls.load(Ordering::Acquire) >= 2
    }

    /// Whether to make the next instance, and where.
    fn wanted(&self, policy: MakeAhead) -> Option<Maker> {
        if self.broken.load(Ordering::Acquire) || !self.repeated() {
            return None;
        }
        let timed = self.inline_seen.load(Ordering::Acquire) >= 2;
        let slow = self.made_slowly.load(Ordering::Acquire)
            || (timed && self.fastest_us.load(Ordering::Acquire) >= WORTH_MAKING_AHEAD.as_micros() as u64);
        match policy {
            MakeAhead::Never => None,
            MakeAhead::Always => Some(Maker::BlockingPool),
            MakeAhead::WhenSlow => slow.then_some(Maker::BlockingPool),
            MakeAhead::Adaptive if slow => Some(Maker::BlockingPool),
            // Until two instantiations are timed inline, it is not known to be fast.
            MakeAhead::Adaptive => timed.then_some(Maker::ThisWorker),
        }
    }

    /// After a call: make the next instance if this skill wants one, has none and the
    /// runtime's budget allows (on the blocking pool or on this worker, see [`MakeAhead`]).
    /// Needs a tokio runtime (calls run on one).
    pub fn refill(
        self: &Arc<Self>,
        policy: MakeAhead,
        budget: &Arc<AtomicUsize>,
        tier: usize,
        pre: SkillPre<CallState>,
    ) {
        let Some(maker) = self.wanted(policy) else { return };
        if self.has_one() || self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let refilling = Refilling(self.clone());
        let leave = if maker == Maker::ThisWorker { KEPT_FOR_SLOW } else { 0 };
        let Some(held) = Held::take(budget, leave) else { return };
        let keep = move |made: wasmtime::Result<(Store<CallState>, Skill)>| {
            let slot = &refilling.0;
            match made {
                Ok((store, instance)) => {
                    let made = Made { tier, store, instance, _held: held };
                    let mut guard = slot.made.lock().unwrap_or_else(|p| p.into_inner());
                    *guard = Some(made);
                    slot.has_made.store(true, Ordering::Release);
                }
                // Too slow for a worker (or failed there): the blocking pool next time,
                // whose own failure is final.
                Err(_) if maker == Maker::ThisWorker => slot.made_slowly.store(true, Ordering::Release),
                // The next call instantiates inline and reports the error with its own limits.
                Err(_) => slot.broken.store(true, Ordering::Release),
            }
        };
        match maker {
            Maker::BlockingPool => {
                let handle = tokio::runtime::Handle::current();
                tokio::task::spawn_blocking(move || keep(handle.block_on(make(&pre, maker))));
            }
            Maker::ThisWorker => {
                tokio::spawn(async move { keep(make(&pre, maker).await) });
            }
        }
    }
}

/// Instantiate `pre` in a store with no capability, bounded in time and memory; on a worker,
/// giving it back at every epoch tick.
async fn make(pre: &SkillPre<CallState>, maker: Maker) -> wasmtime::Result<(Store<CallState>, Skill)> {
    let state = CallState::with_nothing().map_err(|e| wasmtime::Error::msg(format!("{e:#}")))?;
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|s| &mut s.limiter);
    let started = Instant::now();
    store.set_epoch_deadline(1);
    let wall = if maker == Maker::ThisWorker { MAKE_ON_WORKER_WALL } else { MAKE_AHEAD_WALL };
    store.epoch_deadline_callback(move |_| {
        if started.elapsed() >= wall {
            return Ok(UpdateDeadline::Interrupt);
        }
        if maker == Maker::ThisWorker {
            return Ok(UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now())));
        }
        Ok(UpdateDeadline::Continue(1))
    });
    let instance = pre.instantiate_async(&mut store).await?;
    Ok((store, instance))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_after(calls: &[Option<u64>]) -> ReadySlot {
        let slot = ReadySlot::new();
        for c in calls {
            slot.called(c.map(Duration::from_micros));
        }
        slot
    }

    #[test]
    fn a_slow_skill_is_made_ahead_on_the_blocking_pool_a_fast_one_on_its_worker() {
        let pool = Some(Maker::BlockingPool);
        // One call, however slow: a one-shot `skill run` never pays for a background instance.
        assert_eq!(slot_after(&[Some(5_000)]).wanted(MakeAhead::WhenSlow), None);
        assert_eq!(slot_after(&[Some(5_000)]).wanted(MakeAhead::Adaptive), None);
        assert_eq!(slot_after(&[Some(1_300), Some(1_900)]).wanted(MakeAhead::WhenSlow), pool);
        assert_eq!(slot_after(&[Some(1_300), Some(1_900)]).wanted(MakeAhead::Adaptive), pool);
        // The faster of the first instantiations decides: one slow outlier is not enough.
        assert_eq!(slot_after(&[Some(2_000), Some(20)]).wanted(MakeAhead::WhenSlow), None);
        assert_eq!(slot_after(&[Some(30), Some(25), Some(40)]).wanted(MakeAhead::WhenSlow), None);
        assert_eq!(slot_after(&[Some(2_000), Some(20)]).wanted(MakeAhead::Adaptive), Some(Maker::ThisWorker));
        assert_eq!(slot_after(&[Some(30), Some(25)]).wanted(MakeAhead::Adaptive), Some(Maker::ThisWorker));
        // Two calls, one instantiation timed: not yet known to be fast.
        assert_eq!(slot_after(&[Some(30), None]).wanted(MakeAhead::Adaptive), None);
        assert_eq!(slot_after(&[Some(30), Some(25)]).wanted(MakeAhead::Always), pool);
        assert_eq!(slot_after(&[Some(3_000), Some(3_000)]).wanted(MakeAhead::Never), None);
        let broken = slot_after(&[Some(3_000), Some(3_000)]);
        broken.broken.store(true, Ordering::Release);
        assert_eq!(broken.wanted(MakeAhead::Always), None);
        assert_eq!(broken.wanted(MakeAhead::Adaptive), None);
        // Once an instantiation on a worker outran its wall: the blocking pool.
        let outran = slot_after(&[Some(30), Some(25)]);
        outran.made_slowly.store(true, Ordering::Release);
        assert_eq!(outran.wanted(MakeAhead::Adaptive), pool);
    }

    #[test]
    fn the_budget_of_made_ahead_instances_is_given_back_on_drop() {
        let budget = Arc::new(AtomicUsize::new(2));
        // A fast skill's place only while more than one is free.
        let a = Held::take(&budget, 1).unwrap();
        assert!(Held::take(&budget, 1).is_none());
        let b = Held::take(&budget, 0).unwrap();
        assert!(Held::take(&budget, 0).is_none());
        drop(a);
        assert_eq!(budget.load(Ordering::Acquire), 1);
        drop(b);
        assert_eq!(budget.load(Ordering::Acquire), 2);
    }
}
