//! The heartbeat: when to ping, and when a silent connection is dead.
//!
//! Pure: the caller passes `now`. Any inbound byte counts as life. Death is declared when
//! nothing arrived for `interval × (max_missed + 1)`; while reading is paused (the application
//! is slow to take frames) no verdict is given, and the silence is measured again from the
//! moment reading resumes. After a gap in which the link was not served (the process was
//! stopped, or a slow callback held its IO thread), a verdict that was due or about to be gets a
//! fresh chance instead: a ping at once and a full bound from the resume.

use std::time::{Duration, Instant};

use super::predicate::Predicate;

/// Silent heartbeat intervals tolerated before a connection is declared dead.
pub const MAX_MISSED: u32 = 2;

/// Unanswered pings remembered for matching replies.
const MAX_OUTSTANDING: usize = 8;

/// The heartbeat's ping.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{Heartbeat, Link};
/// use relink::protocol::Ping;
/// use relink::error::ConfigError;
/// use relink::framing::{Lines, Raw};
///
/// let every = Duration::from_secs(5);
/// let lines = || Link::builder("tcp://127.0.0.1:6379").framing(Lines::new());
/// // Raw bytes are written as they are, whatever the framing: redis's inline PING.
/// let raw = Heartbeat::new(every, Ping::Raw(b"PING\r\n".to_vec()));
/// # drop(lines().heartbeat(raw));
/// // A Frame goes through the framing, and a line cannot hold a newline.
/// let framed = Heartbeat::new(every, Ping::Frame(b"PING\r\n".to_vec()));
/// let err = lines().heartbeat(framed).build().unwrap_err();
/// assert!(matches!(err, ConfigError::Unencodable { what: "heartbeat ping", .. }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ping {
    /// Bytes written as they are, whatever the framing (e.g. `PING\r\n` to redis-server).
    Raw(Vec<u8>),
    /// A frame encoded by the link's framing.
    Frame(Vec<u8>),
}

/// The application heartbeat: the only way to notice a peer that is half-open or stopped
/// (the STREAM socket runs none of its own).
///
/// Any inbound byte counts as life. A connection silent for `interval × (max_missed + 1)` is
/// declared dead, closed and counted as a failure. Only time in which relink served the link
/// counts: after a pause of the process or a slow callback on its IO thread, a verdict that
/// was due gives the peer a ping at once and a full bound instead (see the crate docs,
/// "Pauses of the process and slow callbacks").
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Heartbeat;
/// use relink::protocol::{Ping, Predicate};
/// let hb = Heartbeat::new(Duration::from_secs(1), Ping::Raw(b"PING\r\n".to_vec()))
///     .max_missed(2)
///     .reply(Predicate::starts_with(&b"+PONG"[..]));
/// assert_eq!(hb.bound(), Duration::from_secs(3));
/// ```
#[derive(Clone, Debug)]
pub struct Heartbeat {
    pub(crate) interval: Duration,
    pub(crate) max_missed: u32,
    pub(crate) ping: Ping,
    pub(crate) idle_only: bool,
    pub(crate) reply: Option<Predicate>,
}

impl Heartbeat {
    /// A ping every `interval`. `max_missed` defaults to 2, `idle_only` to false, no reply
    /// predicate.
    pub fn new(interval: Duration, ping: Ping) -> Heartbeat {
        Heartbeat {
            interval,
            max_missed: MAX_MISSED,
            ping,
            idle_only: false,
            reply: None,
        }
    }

    /// A heartbeat every `interval` whose ping is the link's [`Protocol`](crate::protocol::Protocol)'s
    /// ([`Protocol::ping`](crate::protocol::Protocol::ping)); `build()` refuses it without one.
    pub fn every(interval: Duration) -> Heartbeat {
        Heartbeat::new(interval, Ping::Raw(Vec::new()))
    }

    /// Silent intervals tolerated before the verdict. Defaults to 2.
    pub fn max_missed(mut self, n: u32) -> Heartbeat {
        self.max_missed = n;
        self
    }

    /// Ping only when nothing was sent for an interval. Defaults to false.
    pub fn idle_only(mut self, yes: bool) -> Heartbeat {
        self.idle_only = yes;
        self
    }

    /// Recognises the peer's reply to a ping, to measure the round trip; recognised replies
    /// are not delivered to the application: a closure (`|f: &[u8]| f == b"PONG"`) or a
    /// [`Predicate`] such as [`Predicate::starts_with`]. Defaults to none.
    pub fn reply(mut self, p: impl Into<Predicate>) -> Heartbeat {
        self.reply = Some(p.into());
        self
    }

    /// The longest a dead peer goes unnoticed: `interval × (max_missed + 1)`.
    pub fn bound(&self) -> Duration {
        self.interval
            .saturating_mul(self.max_missed.saturating_add(1))
    }
}

#[derive(Debug)]
pub(crate) struct HeartbeatState {
    interval: Duration,
    bound: Duration,
    idle_only: bool,
    last_inbound: Instant,
    last_outbound: Instant,
    last_ping: Instant,
    inbound_since_ping: bool,
    /// Pings sent and not answered yet, oldest first (a few at most).
    pings_outstanding: Outstanding,
    /// How many of the oldest outstanding pings were sent before a gap: their round trip
    /// would measure our pause, not the peer.
    unmeasured: usize,
    /// A ping owed at once (after a gap), whatever the schedule says.
    ping_now: Option<Instant>,
    paused: bool,
    /// Answers the peer holds on purpose (blocking commands written and not answered yet).
    held: usize,
    /// Until when the newest of them may be held; `None` with `held > 0`: for as long as the
    /// peer likes.
    held_until: Option<Instant>,
}

impl HeartbeatState {
    /// Starts watching a connection that came up at `now`.
    pub(crate) fn start(cfg: &Heartbeat, now: Instant, paused: bool) -> HeartbeatState {
        HeartbeatState {
            interval: cfg.interval,
            bound: cfg.bound(),
            idle_only: cfg.idle_only,
            last_inbound: now,
            last_outbound: now,
            last_ping: now,
            inbound_since_ping: true,
            pings_outstanding: Outstanding::default(),
            unmeasured: 0,
            ping_now: None,
            paused,
            held: 0,
            held_until: None,
        }
    }

    /// An answer the peer may hold on purpose until `until` (`None`: as long as it likes) was
    /// written: no verdict before that time and the bound after it.
    pub(crate) fn hold(&mut self, until: Option<Instant>) {
        let forever = self.held > 0 && self.held_until.is_none();
        self.held_until = match (forever, until, self.held_until) {
            (true, _, _) | (false, None, _) => None,
            (false, Some(u), Some(h)) if self.held > 0 => Some(u.max(h)),
            (false, Some(u), _) => Some(u),
        };
        self.held += 1;
    }

    /// A held answer came at `now`: the silence before it was the peer's right.
    pub(crate) fn release(&mut self, now: Instant) {
        self.held = self.held.saturating_sub(1);
        if self.held == 0 {
            self.held_until = None;
        }
        self.on_inbound(now);
    }

    pub(crate) fn on_inbound(&mut self, now: Instant) {
        self.last_inbound = now;
        self.inbound_since_ping = true;
    }

    pub(crate) fn on_outbound(&mut self, now: Instant) {
        self.last_outbound = now;
    }

    /// When the next ping is due.
    pub(crate) fn next_ping(&self) -> Instant {
        if let Some(at) = self.ping_now {
            return at;
        }
        if self.idle_only {
            self.last_outbound.max(self.last_ping) + self.interval
        } else {
            self.last_ping + self.interval
        }
    }

    /// When the connection will be declared dead if nothing arrives; none while paused.
    pub(crate) fn death_at(&self) -> Option<Instant> {
        if self.paused {
            return None;
        }
        match (self.held, self.held_until) {
            (0, _) => Some(self.last_inbound + self.bound),
            (_, None) => None,
            (_, Some(until)) => Some(self.last_inbound.max(until) + self.bound),
        }
    }

    /// Records a ping queued at `now`; returns whether the interval before it was silent.
    pub(crate) fn on_ping(&mut self, now: Instant) -> bool {
        let missed = !self.inbound_since_ping && !self.paused;
        self.inbound_since_ping = false;
        self.last_ping = now;
        self.ping_now = None;
        if self.pings_outstanding.len() >= MAX_OUTSTANDING {
            self.pings_outstanding.pop_front();
            self.unmeasured = self.unmeasured.saturating_sub(1);
        }
        self.pings_outstanding.push_back(now);
        missed
    }

    /// A recognised reply to the oldest unanswered ping, if there is one (without one, the
    /// frame is the application's own and must be delivered).
    pub(crate) fn on_reply(&mut self, now: Instant) -> Option<Reply> {
        let sent = self.pings_outstanding.pop_front()?;
        if self.unmeasured > 0 {
            self.unmeasured -= 1;
            return Some(Reply::Unmeasured);
        }
        Some(Reply::Rtt(now.saturating_duration_since(sent)))
    }

    /// The link was not served for `unserved` up to `now` (the process was stopped, or its IO
    /// thread was held by a slow callback): that time is not the peer's silence. A verdict
    /// that was due, or would come before a ping sent now could be answered (within an
    /// interval), is put off: the peer gets a ping at once and a full bound from `now`.
    /// Returns whether a verdict was put off. The interval the gap broke is not counted as
    /// missed, and the round trips of pings sent before the gap are not measured.
    pub(crate) fn resumed(&mut self, now: Instant, unserved: Duration) -> bool {
        if unserved.is_zero() {
            return false;
        }
        self.inbound_since_ping = true;
        self.unmeasured = self.pings_outstanding.len();
        if self.paused || self.last_inbound + self.bound > now + self.interval {
            return false;
        }
        self.last_inbound = now;
        self.ping_now = Some(now);
        true
    }

    pub(crate) fn set_paused(&mut self, paused: bool, now: Instant) {
        if self.paused && !paused {
            // Bytes may have waited in the kernel while we did not read: measure anew.
            self.last_inbound = now;
            self.inbound_since_ping = true;
        }
        self.paused = paused;
    }
}

/// The instants of the pings not answered yet, oldest first, at most [`MAX_OUTSTANDING`]: a
/// ring inside the heartbeat's state, so that a ping and its pong touch no allocation of
/// their own (on a quiet link, a cache line fetched from memory each).
#[derive(Debug, Default)]
struct Outstanding {
    at: [Option<Instant>; MAX_OUTSTANDING],
    /// The slot of the oldest.
    head: usize,
    len: usize,
}

impl Outstanding {
    fn len(&self) -> usize {
        self.len
    }

    /// Adds the newest; the ring must have room.
    fn push_back(&mut self, at: Instant) {
        debug_assert!(self.len < MAX_OUTSTANDING);
        self.at[(self.head + self.len) % MAX_OUTSTANDING] = Some(at);
        self.len += 1;
    }

    fn pop_front(&mut self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let at = self.at[self.head].take();
        self.head = (self.head + 1) % MAX_OUTSTANDING;
        self.len -= 1;
        at
    }
}

/// What a recognised reply measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The round trip of the ping it answers.
    Rtt(Duration),
    /// It answers a ping sent before a gap of ours: its round trip would measure the gap.
    Unmeasured,
}

#[cfg(test)]
mod tests;
