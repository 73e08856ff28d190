//! The outage record: since when the link has had no Ready connection, how long the last
//! outage lasted, and when the next warn line about the one under way is due.

use std::time::{Duration, Instant};

use crate::event::Cause;

/// An outage is first reported at warn level after this long, then each time it doubles.
const WARN_FIRST: Duration = Duration::from_secs(10);

/// The link's outages: the one under way and the last one that ended.
#[derive(Debug)]
pub(super) struct Outage {
    /// Since when a Ready connection has been lost (the outage the next Ready ends).
    since: Option<Instant>,
    /// How long the last outage lasted, from the loss of a Ready connection to the next Ready.
    last: Option<Duration>,
    /// Since when attempts have been failing without a Ready in between.
    failing_since: Option<Instant>,
    /// The outage length at which the next warn line is due.
    next_warn: Duration,
}

impl Default for Outage {
    fn default() -> Outage {
        Outage {
            since: None,
            last: None,
            failing_since: None,
            next_warn: WARN_FIRST,
        }
    }
}

impl Outage {
    /// A Ready connection was lost at `now`: an outage begins, unless one is under way.
    pub(super) fn lost(&mut self, now: Instant) {
        self.since.get_or_insert(now);
    }

    /// An attempt failed at `now` (`failures` in a row, the last for `cause`): a warn line
    /// once the link has had no connection for long, then each time that doubles.
    pub(super) fn failed(&mut self, now: Instant, name: &str, failures: u32, cause: Cause) {
        let failing_since = *self.failing_since.get_or_insert(now);
        let failing_for = now.saturating_duration_since(failing_since);
        if failing_for >= self.next_warn {
            log::warn!(
                "relink[{name}]: no connection for {}s ({failures} failures in a row, last: {cause}); still retrying",
                failing_for.as_secs(),
            );
            while self.next_warn <= failing_for {
                self.next_warn = self.next_warn.saturating_mul(2);
            }
        }
    }

    /// The link is Ready at `now`: a long run of failures it ends is reported, and an outage
    /// it ends is recorded. Returns whether it ended one (a reconnect).
    pub(super) fn ended(&mut self, now: Instant, name: &str) -> bool {
        if let Some(since) = self.failing_since.take() {
            let d = now.saturating_duration_since(since);
            if d >= WARN_FIRST {
                log::warn!(
                    "relink[{name}]: connected again after {}s without a connection",
                    d.as_secs()
                );
            }
        }
        self.next_warn = WARN_FIRST;
        let Some(since) = self.since.take() else {
            return false;
        };
        self.last = Some(now.saturating_duration_since(since));
        true
    }

    /// How long the last outage lasted.
    pub(super) fn last(&self) -> Option<Duration> {
        self.last
    }

    /// How long attempts have been failing at `now`, while they are.
    pub(super) fn down_for(&self, now: Instant) -> Option<Duration> {
        self.failing_since
            .map(|since| now.saturating_duration_since(since))
    }
}
