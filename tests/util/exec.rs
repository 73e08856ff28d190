//! A minimal executor for async tests: it polls a future on the test thread only when the
//! future's waker was called, and counts polls and wakes, so a test can tell a future woken by
//! the IO thread from one polled in a loop. Every wait is bounded.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Counts the calls of the waker it hands out and lets a thread wait for the next one.
#[derive(Default)]
struct Counter {
    wakes: Mutex<usize>,
    cv: Condvar,
}

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        *self.wakes.lock().unwrap() += 1;
        self.cv.notify_all();
    }
}

/// Polls futures with a counting waker.
pub struct TestExec {
    counter: Arc<Counter>,
    waker: Waker,
    /// Polls made so far.
    pub polls: usize,
}

impl Default for TestExec {
    fn default() -> Self {
        TestExec::new()
    }
}

impl TestExec {
    pub fn new() -> TestExec {
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        TestExec {
            counter,
            waker,
            polls: 0,
        }
    }

    /// Times the waker was called.
    pub fn wakes(&self) -> usize {
        *self.counter.wakes.lock().unwrap()
    }

    /// Polls `f` once.
    pub fn poll<F: Future + Unpin>(&mut self, f: &mut F) -> Poll<F::Output> {
        self.polls += 1;
        let mut cx = Context::from_waker(&self.waker);
        std::pin::Pin::new(f).poll(&mut cx)
    }

    /// Waits until the waker has been called more than `seen` times; false at the deadline.
    pub fn wait_wakes_above(&self, seen: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut wakes = self.counter.wakes.lock().unwrap();
        while *wakes <= seen {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            wakes = self
                .counter
                .cv
                .wait_timeout(wakes, deadline - now)
                .unwrap()
                .0;
        }
        true
    }

    /// Runs `f` to completion, polling it only after a wake; `None` if it is not done
    /// within `timeout`.
    pub fn block_on<F: Future>(&mut self, f: F, timeout: Duration) -> Option<F::Output> {
        let deadline = Instant::now() + timeout;
        let mut f = pin!(f);
        loop {
            let seen = self.wakes();
            self.polls += 1;
            let mut cx = Context::from_waker(&self.waker);
            if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return Some(out);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !self.wait_wakes_above(seen, left) {
                return None;
            }
        }
    }
}
