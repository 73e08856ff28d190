//! The timer table: one deadline per kind of timer, indexed by [`Timer`].
//!
//! Pure: nothing here reads a clock. The machine arms a timer with an instant computed from the
//! `now` it was given; `handle_timeout(now)` takes the timers that are due.

use std::time::Instant;

/// The machine's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    Retry = 0,
    Dial,
    Handshake,
    Stable,
    Close,
    SendRetry,
    DnsRefresh,
    /// After a refusal: frames wait until it (`ReplyKind::Refused`).
    Pause,
    /// After the peer said "not yet" to the opening: it is written again then.
    Reopen,
}
const TIMERS: usize = 9;

/// The deadline of each timer, or none when it is not armed.
#[derive(Debug, Default)]
pub(super) struct Timers([Option<Instant>; TIMERS]);

impl Timers {
    pub(super) fn arm(&mut self, t: Timer, at: Instant) {
        self.0[t as usize] = Some(at);
    }

    pub(super) fn disarm(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }

    /// Disarms every timer.
    pub(super) fn clear(&mut self) {
        self.0 = [None; TIMERS];
    }

    /// The deadline of `t`, if armed.
    pub(super) fn at(&self, t: Timer) -> Option<Instant> {
        self.0[t as usize]
    }

    /// Disarms `t` and returns true if it is due at `now`.
    pub(super) fn take(&mut self, t: Timer, now: Instant) -> bool {
        match self.0[t as usize] {
            Some(at) if at <= now => {
                self.0[t as usize] = None;
                true
            }
            _ => false,
        }
    }

    /// The earliest armed deadline.
    pub(super) fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
}
