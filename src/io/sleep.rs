//! A timer for async waits that must end at a deadline on any executor: one process-wide
//! thread, started on first use, wakes each sleeping task at its deadline.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// A future that is ready at its deadline.
#[derive(Debug)]
pub(crate) struct Sleep {
    deadline: Instant,
    /// Registered with the timer thread on the first poll that finds the deadline ahead.
    shared: Option<Arc<Mutex<Option<Waker>>>>,
}

/// Sleeps until `deadline`.
pub(crate) fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline,
        shared: None,
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        match &self.shared {
            Some(slot) => {
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
            }
            None => {
                let slot = Arc::new(Mutex::new(Some(cx.waker().clone())));
                timers().add(self.deadline, Arc::downgrade(&slot));
                self.shared = Some(slot);
            }
        }
        Poll::Pending
    }
}

/// Sleepers by deadline; a dropped `Sleep` leaves a dead entry that goes at its deadline.
struct Sleepers {
    heap: Mutex<BinaryHeap<Reverse<Sleeper>>>,
    changed: Condvar,
}

struct Sleeper(Instant, Weak<Mutex<Option<Waker>>>);

impl PartialEq for Sleeper {
    fn eq(&self, other: &Sleeper) -> bool {
        self.0 == other.0
    }
}
impl Eq for Sleeper {}
impl PartialOrd for Sleeper {
    fn partial_cmp(&self, other: &Sleeper) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Sleeper {
    fn cmp(&self, other: &Sleeper) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl Sleepers {
    fn add(&self, deadline: Instant, waker: Weak<Mutex<Option<Waker>>>) {
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        let earliest = heap.peek().map_or(true, |Reverse(e)| deadline < e.0);
        heap.push(Reverse(Sleeper(deadline, waker)));
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            while heap.peek().is_some_and(|Reverse(e)| e.0 <= now) {
                let Some(Reverse(Sleeper(_, waker))) = heap.pop() else {
                    break;
                };
                let waker = waker
                    .upgrade()
                    .and_then(|w| w.lock().unwrap_or_else(|e| e.into_inner()).take());
                if let Some(w) = waker {
                    w.wake();
                }
            }
            heap = match heap.peek().map(|Reverse(e)| e.0) {
                None => self.changed.wait(heap).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    self.changed
                        .wait_timeout(heap, at.saturating_duration_since(now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

static TIMERS: OnceLock<&'static Sleepers> = OnceLock::new();

/// Starts the process's timer thread, once: every IO pool does before its first link, so a
/// thread the system refuses is an error there, not a panic at a link's first timer.
pub(crate) fn start() -> std::io::Result<()> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if TIMERS.get().is_some() {
        return Ok(());
    }
    let timers: &'static Sleepers = Box::leak(Box::new(Sleepers {
        heap: Mutex::new(BinaryHeap::new()),
        changed: Condvar::new(),
    }));
    std::thread::Builder::new()
        .name("relink-timer".into())
        .spawn(move || timers.run())?;
    let _ = TIMERS.set(timers);
    Ok(())
}

fn timers() -> &'static Sleepers {
    TIMERS
        .get()
        .expect("the timer thread starts with every IO pool")
}
