//! [`PollAgain`]: a future that, when its own poll wakes it, is polled again at once instead
//! of going back to tokio's run queue.
//!
//! Why: hyper's HTTP/1 server wakes the connection's task from inside that task's own poll on
//! every request with a body: the service (ours, on the same task) takes the body's data from
//! hyper's channel, and taking it wakes the channel's sender, which is the connection itself.
//! tokio treats a task woken while it runs as one that yields: it goes to the back of the run
//! queue and an idle worker is unparked to steal it. With one client and two workers that is
//! a futex wake and wait and two context switches per request, and the connection moving to
//! the other core: on this VM 10-15 µs of CPU per request of the bare hyper + axum server
//! (`cargo bench --bench mcp`'s floor server, 52-61 -> 40-46 µs per request, three rounds).
//!
//! A wake that comes while the inner future is being polled is noted instead, and the inner
//! future polled again before this poll returns, as long as this poll has run less than
//! [`REPOLL_WITHIN`] and at most [`MAX_REPOLLS`] times: a guest call that yields at an epoch
//! tick (after milliseconds of work) still gives its worker back, as it did. A wake from
//! anywhere else (the I/O driver, a timer, another task) goes to the task's own waker, as
//! before. No wake is lost: the poller and the waker both take the "woken" flag with a swap
//! after the "polling" flag changes, so exactly one of them acts on it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;

/// How long one poll may have run for a wake from inside it to be followed at once.
pub const REPOLL_WITHIN: Duration = Duration::from_micros(200);
/// How many times one poll polls the inner future again.
pub const MAX_REPOLLS: usize = 4;

/// `inner`, polled again when its poll wakes it (see the module doc).
pub struct PollAgain<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<Wakes>,
    /// The waker the inner future is polled with: `wakes`, as a [`Waker`].
    waker: Waker,
}

/// What the inner future's waker does.
struct Wakes {
    /// Set while the inner future is being polled.
    polling: AtomicBool,
    /// A wake came while `polling`, not yet acted on.
    woken: AtomicBool,
    /// The waker of the task this runs in, from its latest poll.
    task: AtomicWaker,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(SeqCst) {
            #[cfg(test)]
            tests::widen_the_race();
            self.woken.store(true, SeqCst);
            // The poll may have ended between the two loads: then it may not have seen the
            // flag, and whichever of it and this takes the flag wakes or polls again.
            if self.polling.load(SeqCst) || !self.woken.swap(false, SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

impl<F> PollAgain<F> {
    pub fn new(inner: F) -> PollAgain<F> {
        let wakes = Arc::new(Wakes {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
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
            this.wakes.polling.store(true, SeqCst);
            let polled = this.inner.as_mut().poll(&mut Context::from_waker(&this.waker));
            this.wakes.polling.store(false, SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.wakes.woken.swap(false, SeqCst) {
                return Poll::Pending;
            }
            if started.elapsed() >= REPOLL_WITHIN {
                break;
            }
        }
        // Woken, but this poll has run long enough: back to the run queue, as a yield.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

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

    /// Pending `n` times, each time waking itself first (as hyper's body channel does).
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

    #[test]
    fn a_wake_from_elsewhere_wakes_the_task() {
        let (count, waker) = counting();
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        struct Waits(std::sync::mpsc::Sender<Waker>, bool);
        impl Future for Waits {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                if self.1 {
                    return Poll::Ready(());
                }
                self.1 = true;
                self.0.send(cx.waker().clone()).unwrap();
                Poll::Pending
            }
        }
        let mut future = std::pin::pin!(PollAgain::new(Waits(tx, false)));
        assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        std::thread::spawn(move || rx.recv().unwrap().wake()).join().unwrap();
        assert_eq!(count.0.load(SeqCst), 1);
        assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_ready());
    }

    /// Wakes from another thread racing the polls: each message is sent only once the last
    /// was received, so every one needs a wake, many of them landing as a poll ends. A lost
    /// wake leaves a message unreceived.
    /// Set by the race test: a wake that finds a poll running waits a little before it
    /// notes itself, so that the poll often ends in between (the race it must survive).
    static WIDEN_THE_RACE: AtomicBool = AtomicBool::new(false);

    pub(super) fn widen_the_race() {
        if WIDEN_THE_RACE.load(SeqCst) {
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    #[test]
    fn no_wake_is_lost_to_a_race_with_the_poll() {
        const MESSAGES: u32 = 20_000;
        WIDEN_THE_RACE.store(true, SeqCst);
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
            // Spinning, not blocking: the next message then goes out while the receiver's
            // poll that sent the ack is still ending.
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
