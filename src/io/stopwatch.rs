//! The clock around calls into application code: the core's [`Stopwatch`], read on the IO
//! side (the core reads no clock), and the slowest call of the current pass, which the loop
//! names when it served its links late.

use std::cell::Cell;
use std::time::Duration;

use super::ffi;
use crate::core::guard::Stopwatch;
use crate::error::Callback;

thread_local! {
    /// The slowest call timed on this thread since the last [`take_slowest`].
    static SLOWEST: Cell<Option<(Callback, Duration)>> = const { Cell::new(None) };
}

/// Times calls with the coarse monotonic clock (a few nanoseconds a reading, a resolution of
/// the kernel's tick): cheap enough for every frame, fine enough for a threshold of 100 ms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallClock;

impl Stopwatch for CallClock {
    fn time(&self, what: Callback, f: &mut dyn FnMut()) -> Duration {
        let start = ffi::coarse_now();
        f();
        let took = ffi::coarse_now().saturating_sub(start);
        if !took.is_zero() {
            SLOWEST.with(|s| {
                if s.get().map_or(true, |(_, d)| took > d) {
                    s.set(Some((what, took)));
                }
            });
        }
        took
    }
}

/// The slowest call timed on this thread since the last call, and forgets it.
pub(crate) fn take_slowest() -> Option<(Callback, Duration)> {
    SLOWEST.with(Cell::take)
}
