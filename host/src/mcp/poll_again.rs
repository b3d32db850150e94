//! [`PollAgain`]: a future that, when it wakes itself from inside its own poll, is polled
//! again at once instead of going back to tokio's run queue.
//!
//! Why: hyper's HTTP/1 server wakes the connection's task from inside that task's own poll on
//! every request with a body: the service (ours, on the same task) takes the body's data from
//! hyper's channel, and taking it wakes the channel's sender, which is the connection itself.
//! tokio treats a task woken while it runs as one that yields: it goes to the back of the run
//! queue and an idle worker is unparked to steal it. With one client and two workers that is
//! a futex wake and wait and two context switches per request, and the connection moving to
//! the other core: on this VM 10-15 µs of CPU per request of the bare hyper + axum server
//! (`cargo bench --bench mcp`'s floor server under a Python client, 52-61 -> 40-46 µs per
//! request, three rounds).
//!
//! Only a wake made on the polling thread while the inner future is being polled is followed
//! at once: the future woke itself. A wake from anywhere else (the I/O driver, a timer, another
//! thread) goes to the task's own waker, as before, even during a poll; so does a wake tokio
//! defers until the poll has returned, which is how a guest call yields at an epoch tick
//! (`tokio::task::yield_now` in the sandbox's epoch callback): it still gives its worker back.
//! One poll follows at most [`MAX_REPOLLS`] self-wakes, and none once it has run
//! [`REPOLL_WITHIN`] (hyper's own yield after 16 pipelined requests is such a self-wake).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;

/// How long one poll may have run for a self-wake to be followed at once.
const REPOLL_WITHIN: Duration = Duration::from_micros(200);
/// How many self-wakes one poll follows at once.
const MAX_REPOLLS: usize = 4;

thread_local! {
    /// The [`Wakes`] of the `PollAgain` this thread is polling (null when none).
    static POLLING: Cell<*const Wakes> = const { Cell::new(std::ptr::null()) };
}

/// `inner`, polled again when its poll wakes it (see the module doc).
pub struct PollAgain<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<Wakes>,
    /// The waker the inner future is polled with: `wakes`, as a [`Waker`].
    waker: Waker,
}

/// What the inner future's waker does.
struct Wakes {
    /// The inner future woke itself during the poll in progress. Only the polling thread
    /// reads or writes it.
    woken: AtomicBool,
    /// The waker of the task this runs in, from its latest poll.
    task: AtomicWaker,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if POLLING.with(Cell::get) == Arc::as_ptr(self) {
            self.woken.store(true, Relaxed);
        } else {
            self.task.wake();
        }
    }
}

/// Marks this thread as polling `wakes` until dropped, unwinding included, and then puts back
/// what it was polling before.
struct Polling(*const Wakes);

impl Polling {
    fn enter(wakes: &Arc<Wakes>) -> Polling {
        Polling(POLLING.with(|p| p.replace(Arc::as_ptr(wakes))))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        POLLING.with(|p| p.set(self.0));
    }
}

impl<F> PollAgain<F> {
    pub fn new(inner: F) -> PollAgain<F> {
        let wakes = Arc::new(Wakes { woken: AtomicBool::new(false), task: AtomicWaker::new() });
        PollAgain { inner: Box::pin(inner), waker: Waker::from(wakes.clone()), wakes }
    }

    /// The inner future, to act on between polls (e.g. a graceful shutdown).
    pub fn inner(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }
}

impl<F: Future> Future for PollAgain<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.wakes.task.register(cx.waker());
        let started = Instant::now();
        for _ in 0..=MAX_REPOLLS {
            this.wakes.woken.store(false, Relaxed);
            let polled = {
                let _polling = Polling::enter(&this.wakes);
                this.inner.as_mut().poll(&mut Context::from_waker(&this.waker))
            };
            if polled.is_ready() {
                return polled;
            }
            if !this.wakes.woken.load(Relaxed) {
                return Poll::Pending;
            }
            if started.elapsed() >= REPOLL_WITHIN {
                break;
            }
        }
        // It woke itself, but this poll has run long enough: back to the run queue, as a yield.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// Pending `left` times, each time waking itself first (as hyper's body channel does).
    struct WakesItself {
        left: usize,
        polls: usize,
    }

    impl Future for WakesItself {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.left == 0 {
                return Poll::Ready(self.polls);
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_from_inside_the_poll_is_followed_at_once_not_by_the_task() {
        let (count, waker) = counting();
        let mut future = std::pin::pin!(PollAgain::new(WakesItself { left: 2, polls: 0 }));
        assert_eq!(future.as_mut().poll(&mut Context::from_waker(&waker)), Poll::Ready(3));
        assert_eq!(count.0.load(SeqCst), 0, "the task was not woken: its poll went on");
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields() {
        let (count, waker) = counting();
        let mut future = std::pin::pin!(PollAgain::new(WakesItself { left: usize::MAX, polls: 0 }));
        assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!(count.0.load(SeqCst), 1, "woken once, to be polled again later");
        assert_eq!(future.inner.polls, MAX_REPOLLS + 1);
    }

    #[test]
    fn a_long_poll_is_not_followed_at_once() {
        struct SlowThenWakes(usize);
        impl Future for SlowThenWakes {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                self.0 += 1;
                std::thread::sleep(REPOLL_WITHIN * 2);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
        let (count, waker) = counting();
        let mut future = std::pin::pin!(PollAgain::new(SlowThenWakes(0)));
        assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!((future.inner.0, count.0.load(SeqCst)), (1, 1), "one poll, then a yield");
    }

    /// Hands its waker to another thread, which wakes it at once; `during_poll`: while this
    /// poll waits for that thread.
    struct WokenElsewhere {
        during_poll: bool,
        polls: usize,
        handed: Option<std::thread::JoinHandle<()>>,
    }

    impl Future for WokenElsewhere {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls += 1;
            if self.polls > 1 {
                return Poll::Ready(());
            }
            let waker = cx.waker().clone();
            let other = std::thread::spawn(move || waker.wake());
            if self.during_poll {
                other.join().unwrap();
            } else {
                self.handed = Some(other);
            }
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_from_another_thread_wakes_the_task_even_during_the_poll() {
        for during_poll in [false, true] {
            let (count, waker) = counting();
            let mut future = std::pin::pin!(PollAgain::new(WokenElsewhere { during_poll, polls: 0, handed: None }));
            assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
            if let Some(other) = future.inner.handed.take() {
                other.join().unwrap();
            }
            assert_eq!(future.inner.polls, 1, "not followed at once (during the poll: {during_poll})");
            assert_eq!(count.0.load(SeqCst), 1, "the task was woken (during the poll: {during_poll})");
            assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_ready());
        }
    }

    #[test]
    fn a_wake_of_another_poll_again_from_inside_a_poll_wakes_that_task() {
        // B: pending once, handing out the waker its inner future got.
        struct HandsOutItsWaker(Option<std::sync::mpsc::Sender<Waker>>);
        impl Future for HandsOutItsWaker {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                match self.0.take() {
                    Some(tx) => {
                        tx.send(cx.waker().clone()).unwrap();
                        Poll::Pending
                    }
                    None => Poll::Ready(()),
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (count_b, waker_b) = counting();
        let mut b = std::pin::pin!(PollAgain::new(HandsOutItsWaker(Some(tx))));
        assert!(b.as_mut().poll(&mut Context::from_waker(&waker_b)).is_pending());
        let inner_waker_of_b = rx.recv().unwrap();
        // A, on the same thread, wakes B from inside its own poll (two connections on one
        // worker): that is not A waking itself.
        let (count_a, waker_a) = counting();
        let mut a = std::pin::pin!(PollAgain::new(std::future::poll_fn(move |_| {
            inner_waker_of_b.wake_by_ref();
            Poll::Ready(())
        })));
        assert!(a.as_mut().poll(&mut Context::from_waker(&waker_a)).is_ready());
        assert_eq!((count_a.0.load(SeqCst), count_b.0.load(SeqCst)), (0, 1), "B's task was woken, A's not");
    }

    #[test]
    fn a_panicking_poll_leaves_the_thread_polling_nothing() {
        struct Panics;
        impl Future for Panics {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                panic!("the inner future panicked");
            }
        }
        let (_, waker) = counting();
        let mut future = std::pin::pin!(PollAgain::new(Panics));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = future.as_mut().poll(&mut Context::from_waker(&waker));
        }));
        assert!(unwound.is_err());
        assert!(POLLING.with(Cell::get).is_null(), "a later wake on this thread must not be taken for a self-wake");
    }

    /// Wakes from another thread racing the polls: each message is sent only once the last
    /// was received, by a sender that spins so that many land as a poll ends. A lost wake
    /// leaves a message unreceived.
    #[test]
    fn no_wake_is_lost_to_a_race_with_the_poll() {
        const MESSAGES: u32 = 20_000;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let (ack_tx, ack_rx) = std::sync::mpsc::channel::<u32>();
        rt.spawn(PollAgain::new(async move {
            while let Some(n) = rx.recv().await {
                ack_tx.send(n).unwrap();
            }
        }));
        for i in 0..MESSAGES {
            tx.send(i).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let acked = loop {
                match ack_rx.try_recv() {
                    Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() < deadline => std::hint::spin_loop(),
                    other => break other,
                }
            };
            assert_eq!(acked, Ok(i), "message {i} of {MESSAGES} was not received: its wake was lost");
        }
    }
}
