//! Calls into application code, timed: the stopwatch the IO side hands the machine, and the
//! reports of slow calls (at most one warn line and one error event per link per period).

use std::time::{Duration, Instant};

use crate::core::counters::Counters;
use crate::core::guard::{Stopwatch, Untimed};
use crate::error::{Callback, LinkError};

/// A link reports slow callbacks (a warn line and an error event) at most once per period.
const SLOW_REPORT_PERIOD: Duration = Duration::from_secs(10);

/// The stopwatch of every call into application code, and the slow calls' reports.
#[derive(Debug)]
pub(super) struct Callbacks {
    /// Times every call into application code (the IO side's clock; none in unit tests).
    watch: Box<dyn Stopwatch>,
    /// When a slow callback was last reported.
    reported: Option<Instant>,
    /// Slow callbacks since the last report, not reported on their own.
    unreported: u64,
}

impl Default for Callbacks {
    fn default() -> Callbacks {
        Callbacks {
            watch: Box::new(Untimed),
            reported: None,
            unreported: 0,
        }
    }
}

impl Callbacks {
    /// The stopwatch calls into application code are timed with.
    pub(super) fn watch(&self) -> &dyn Stopwatch {
        &*self.watch
    }

    /// Times every call from now on with `watch`.
    pub(super) fn set_watch(&mut self, watch: Box<dyn Stopwatch>) {
        self.watch = watch;
    }

    /// Application code `callback` took `took`: counted in `c` when it is at least
    /// `threshold`, and reported (a warn line naming `endpoint`, and the error returned for
    /// the application) at most once per period.
    pub(super) fn took(
        &mut self,
        now: Instant,
        callback: Callback,
        took: Duration,
        threshold: Duration,
        c: &mut Counters,
        endpoint: impl FnOnce() -> Option<String>,
    ) -> Option<LinkError> {
        if took < threshold {
            return None;
        }
        c.slow_callbacks += 1;
        c.slowest_callback = c.slowest_callback.max(Some(took));
        if self
            .reported
            .is_some_and(|at| now < at + SLOW_REPORT_PERIOD)
        {
            self.unreported += 1;
            return None;
        }
        let more = match std::mem::take(&mut self.unreported) {
            0 => String::new(),
            n => format!("; {n} more since the last report"),
        };
        let cost = if callback == Callback::Resolver {
            "only this link's dial waited"
        } else {
            "no other link of its IO thread was served meanwhile"
        };
        log::warn!(
            "relink: slow callback on {}: the {callback} took {took:?} (threshold {threshold:?}); \
             {cost}{more}",
            endpoint().unwrap_or_else(|| "-".into()),
        );
        self.reported = Some(now);
        Some(LinkError::SlowCallback { callback, took })
    }
}
