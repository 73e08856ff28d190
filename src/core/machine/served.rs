//! Verdicts count only served time, and slow application code is named: what the machine
//! does when the IO side says the link was not served for a while (`Input::Resumed`) and
//! when a call into application code took long (timed by the IO side's stopwatch).

use std::time::{Duration, Instant};

use super::{Machine, Timer};
use crate::error::{Callback, LinkError};
use crate::event::Event;

/// A link reports slow callbacks (a warn line and an error event) at most once per period.
const SLOW_REPORT_PERIOD: Duration = Duration::from_secs(10);

impl Machine {
    /// After a gap in which the link was not served, a verdict on the peer that was due, or
    /// about to be, gets a fresh chance: the heartbeat a ping at once and a full bound, the
    /// handshake, TLS handshake and dial bounds their full length again from `now`. Frame
    /// deadlines, the backoff and the close deadline stay as they were.
    pub(super) fn resumed(&mut self, now: Instant, unserved: Duration) {
        let mut deferred = 0;
        if let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) {
            deferred += u64::from(hb.resumed(now, unserved));
        }
        for t in [Timer::Dial, Timer::Handshake] {
            let Some(at) = self.timers.at(t) else {
                continue;
            };
            // Due, or due sooner than the gap was long: the answer may still be on its way
            // (the socket's own IO thread was stopped too, and hands it over a little later).
            if at <= now + unserved {
                let bound = self.verdict_bound(t);
                self.timers.arm(t, now + bound);
                deferred += 1;
            }
        }
        if deferred > 0 {
            self.c.verdicts_deferred += deferred;
            log::debug!(
                "relink: {} not served for {unserved:?}: the peer gets a fresh chance",
                self.endpoint_text().unwrap_or_else(|| "-".into())
            );
        }
    }

    /// A verdict timer `t` due within its own bound from `now` (or past due) is armed again a
    /// full bound from `now`, counted in `verdicts_deferred`: reading was paused (the
    /// application's pace), so what the peer sent may not have been read yet.
    pub(super) fn defer_verdict(&mut self, now: Instant, t: Timer) {
        let Some(at) = self.timers.at(t) else {
            return;
        };
        let bound = self.verdict_bound(t);
        if at < now + bound {
            self.timers.arm(t, now + bound);
            if at <= now {
                self.c.verdicts_deferred += 1;
            }
        }
    }

    /// The full length of a verdict timer, as it was armed.
    fn verdict_bound(&self, t: Timer) -> Duration {
        match t {
            Timer::Dial => self.cfg.dial_bound,
            _ if self.tls_handshaking() => self.tls_handshake_bound(),
            Timer::Handshake => self.cfg.handshake_timeout,
            _ => Duration::ZERO,
        }
    }

    /// Application code `callback` took `took`: counted and reported when it is slow (at
    /// most one warn line and one error event per link per period).
    pub(super) fn took(&mut self, now: Instant, callback: Callback, took: Duration) {
        let threshold = self.cfg.slow_callback;
        if took < threshold {
            return;
        }
        self.c.slow_callbacks += 1;
        self.c.slowest_callback = self.c.slowest_callback.max(Some(took));
        if self
            .slow_reported
            .is_some_and(|at| now < at + SLOW_REPORT_PERIOD)
        {
            self.slow_unreported += 1;
            return;
        }
        let more = match std::mem::take(&mut self.slow_unreported) {
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
            self.endpoint_text().unwrap_or_else(|| "-".into()),
        );
        self.slow_reported = Some(now);
        self.emit(Event::Error(LinkError::SlowCallback { callback, took }));
    }
}
