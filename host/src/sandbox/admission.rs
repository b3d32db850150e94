//! The runtime's call slots, counted for the operator: how many calls run, how many wait.
//!
//! A tokio [`Semaphore`] says how many permits are free but not how many tasks wait for one,
//! and "calls queued for a slot" is the first number to look at when a host is saturated
//! (the `skillhost_calls_queued` gauge of `skillhost mcp --http`'s `/metrics`). So the
//! semaphore is wrapped: the same `try_acquire` / `acquire` the call path already used, with
//! a counter of waiters kept by a guard that lives exactly as long as the wait (a wait given
//! up at its timeout is dropped, and with it its count).

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{AcquireError, Semaphore, SemaphorePermit, TryAcquireError};

/// The call slots of a [`super::Runtime`] (one per pooled instance).
pub(crate) struct Admission {
    slots: Semaphore,
    size: usize,
    waiting: AtomicUsize,
}

/// What [`Admission`] holds now: a snapshot for metrics, not a promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Calls holding a slot.
    pub running: usize,
    /// Slots in all.
    pub slots: usize,
    /// Calls waiting for a slot.
    pub waiting: usize,
}

/// One waiter counted until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub(crate) fn new(size: usize) -> Admission {
        Admission { slots: Semaphore::new(size), size, waiting: AtomicUsize::new(0) }
    }

    pub(crate) fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.slots.try_acquire()
    }

    /// Wait for a slot, counted among the waiters while the future is alive.
    pub(crate) async fn acquire(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = Waiting(&self.waiting);
        self.slots.acquire().await
    }

    pub(crate) fn stats(&self) -> AdmissionStats {
        AdmissionStats {
            running: self.size.saturating_sub(self.slots.available_permits()),
            slots: self.size,
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_are_counted_while_they_wait_and_not_after() {
        let a = Admission::new(1);
        let held = a.try_acquire().unwrap();
        assert_eq!(a.stats(), AdmissionStats { running: 1, slots: 1, waiting: 0 });
        // A wait given up at its timeout leaves the count.
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(5), a.acquire()).await;
        assert!(gave_up.is_err());
        assert_eq!(a.stats().waiting, 0);
        let mut wait = std::pin::pin!(a.acquire());
        assert!(futures_poll_once(wait.as_mut()).await.is_none());
        assert_eq!(a.stats().waiting, 1);
        drop(held);
        let permit = wait.await.unwrap();
        assert_eq!(a.stats(), AdmissionStats { running: 1, slots: 1, waiting: 0 });
        drop(permit);
        assert_eq!(a.stats().running, 0);
    }

    /// Poll `f` once: its output if it was ready.
    async fn futures_poll_once<F: Future + Unpin>(mut f: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
