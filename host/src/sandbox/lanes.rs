//! Per-CPU copies of a prepared skill, so that cores calling one skill at once do not
//! share the cache lines its instantiation writes.
//!
//! Every instantiation writes inside the component it instantiates: reference counts of
//! the component, its modules, code and import lists, and the store registries they are
//! entered in. With one copy, two cores calling the same skill pass those lines back and
//! forth on every call. `cargo bench --bench runtime` on 2 cores, 8 callers: one copy
//! 97k calls/s at 20.5 us CPU per call, a copy per CPU 109k-114k at 18 us (one caller:
//! 15-16 us). A prototype with an engine per CPU as well gained nothing more within the
//! noise, so the engine, its pool and the admission bound stay shared.
//!
//! The copy for the CPU a call runs on is used (`sched_getcpu`: the cache lines belong to
//! the core, not to the thread; a thread that moves just uses another copy). Copy 0 is the
//! prepared skill itself; the others are made on the first call on their CPU, on the
//! blocking pool, and until one is ready that CPU's calls use copy 0, so no call waits
//! for a copy. A copy is the component serialized and deserialized in this process (the
//! way a larger stack tier gets its own), so it costs the component's code size in
//! memory: only components whose compiled image is under [`MAX_COPIED_BYTES`] get copies
//! (the Rust probe's is 690 KiB; at most 7 x 2 MiB for a skill called on 8 CPUs). A large
//! component's instantiation is long enough that the shared lines do not matter.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::CallState;
use super::bindings::SkillPre;

/// Copies at most (CPUs beyond this share copies).
const MAX_LANES: usize = 8;
/// Components whose compiled image is larger than this get no copies.
pub(super) const MAX_COPIED_BYTES: usize = 2 << 20;

/// The lanes of this machine: one per CPU, at most [`MAX_LANES`].
pub(super) fn count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, MAX_LANES))
}

/// The lane of the CPU this thread runs on now.
pub(super) fn current(lanes: usize) -> usize {
    if lanes <= 1 {
        return 0;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no arguments and only reads the CPU number (vDSO).
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu >= 0 {
            return cpu as usize % lanes;
        }
    }
    0
}

/// A prepared skill's copies for lanes 1.. (lane 0 is the skill's own `pre`).
pub(super) struct Copies {
    lanes: Box<[Lane]>,
}

/// One lane's copy, and whether a call has started making it.
#[derive(Default)]
struct Lane {
    made: OnceLock<SkillPre<CallState>>,
    started: AtomicBool,
}

impl Copies {
    /// Room for the copies of `lanes` lanes; none when `copy` is false (a large component).
    pub fn new(lanes: usize, copy: bool) -> Copies {
        let n = if copy { lanes.saturating_sub(1) } else { 0 };
        Copies { lanes: (0..n).map(|_| Lane::default()).collect() }
    }

    /// Lane `lane`'s room, if it has any (lane 0 has none: it is the prepared skill).
    fn lane(&self, lane: usize) -> Option<&Lane> {
        self.lanes.get(lane.checked_sub(1)?)
    }

    /// The copy for `lane`, if it exists.
    pub fn get(&self, lane: usize) -> Option<&SkillPre<CallState>> {
        self.lane(lane)?.made.get()
    }

    /// Whether the caller should make the copy for `lane`: true once per lane with room (a
    /// copy that fails is not tried again; its lane keeps using copy 0).
    pub fn claim(&self, lane: usize) -> bool {
        self.lane(lane).is_some_and(|l| !l.started.load(Ordering::Acquire) && !l.started.swap(true, Ordering::AcqRel))
    }

    /// Keep the copy made for `lane`.
    pub fn set(&self, lane: usize, pre: SkillPre<CallState>) {
        if let Some(l) = self.lane(lane) {
            let _ = l.made.set(pre);
        }
    }

    /// Copies made so far.
    pub fn made(&self) -> usize {
        self.lanes.iter().filter(|l| l.made.get().is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lane_is_claimed_once_and_lane_0_never() {
        let copies = Copies::new(4, true);
        assert!(!copies.claim(0), "lane 0 is the prepared skill itself");
        assert!(copies.claim(2));
        assert!(!copies.claim(2), "claimed twice");
        assert!(copies.claim(1) && copies.claim(3));
        assert!(!copies.claim(4), "no lane 4 among 4");
        assert!(copies.get(0).is_none() && copies.get(2).is_none());
        assert_eq!(copies.made(), 0);
    }

    #[test]
    fn a_large_component_gets_no_copies() {
        let copies = Copies::new(8, false);
        assert!((0..8).all(|lane| !copies.claim(lane)));
    }

    #[test]
    fn the_lane_is_one_of_the_lanes() {
        for lanes in 1..=MAX_LANES {
            assert!(current(lanes) < lanes);
        }
        assert!((1..=MAX_LANES).contains(&count()));
    }
}
