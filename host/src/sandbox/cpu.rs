//! CPU time per call. A call's future may be polled on any worker thread and several calls
//! share a thread, so the thread's CPU clock alone says nothing about one call: the call's
//! future is wrapped in [`Metered`], which adds the thread-CPU delta of every poll to the
//! call's meter. The epoch callback runs inside a poll, on the polling thread, so it can
//! add the delta of the poll in progress ([`CpuMeter::used`]).
//!
//! Host work moved to the blocking pool (store and index access) is not charged to the
//! call: the limit is on the guest's computation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// CPU nanoseconds one call used.
#[derive(Default)]
pub(super) struct CpuMeter {
    /// Summed over finished polls.
    used_ns: AtomicU64,
    /// The polling thread's CPU clock when the current poll started; 0 between polls.
    poll_started_ns: AtomicU64,
}

impl CpuMeter {
    /// CPU time so far, including the poll in progress when called from inside it.
    pub fn used(&self) -> Duration {
        let mut ns = self.used_ns.load(Ordering::Relaxed);
        let started = self.poll_started_ns.load(Ordering::Relaxed);
        if started != 0 {
            ns += thread_cpu_ns().saturating_sub(started);
        }
        Duration::from_nanos(ns)
    }
}

/// A future whose polls are charged to `meter`.
pub(super) struct Metered<'a, F> {
    pub inner: Pin<&'a mut F>,
    pub meter: Arc<CpuMeter>,
}

impl<F: Future> Future for Metered<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let start = thread_cpu_ns().max(1);
        self.meter.poll_started_ns.store(start, Ordering::Relaxed);
        let out = self.inner.as_mut().poll(cx);
        let spent = thread_cpu_ns().saturating_sub(start);
        self.meter.poll_started_ns.store(0, Ordering::Relaxed);
        self.meter.used_ns.fetch_add(spent, Ordering::Relaxed);
        out
    }
}

/// CPU time used by the calling thread, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we pass; CLOCK_THREAD_CPUTIME_ID is
    // supported on every Linux and macOS version we build for.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
