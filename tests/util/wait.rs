//! Bounded waits for conditions that have no event to wait on.

use std::thread;
use std::time::{Duration, Instant};

/// Call `f` until it returns `Some`, parking 2 ms between calls; `None` after `timeout`.
/// For conditions with no event to wait on; `f` is called at least once.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::sleep((deadline - now).min(Duration::from_millis(2)));
    }
}

/// `wait_for` for a boolean condition.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    wait_for(timeout, || f().then_some(())).is_some()
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
