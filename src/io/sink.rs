//! Where a link's events go on their way to the application: the events channel, bounded by
//! `events_capacity` (counted in [`Shared::events_queued`]), and behind it the events the
//! application has not made room for, kept in order, with the drop policy of a reader that
//! does not read, and the bound on how long the frames of a connection the peer closed may
//! wait for it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;

use super::shared::Shared;
use crate::error::LinkError;
use crate::event::Event;

/// One link's events between its machine and its receivers.
pub(super) struct Sink {
    tx: Sender<Event>,
    shared: Arc<Shared>,
    /// Events the channel may hold before the application takes them.
    capacity: usize,
    /// Events that found the channel full, oldest first; a frame of a closed connection
    /// with the instant it may wait until.
    pending: VecDeque<(Event, Option<Instant>)>,
    /// While a closed connection's last bytes are read: until when its frames may wait.
    closing: Option<Instant>,
    /// The earliest such instant among the frames waiting.
    next_expiry: Option<Instant>,
    /// Frames of closed connections the application did not take in time, and their bytes.
    unread: (u64, u64),
    /// Past this many waiting events, state and error events are dropped.
    max_pending: usize,
    /// Events went into the channel since the last [`Sink::take_delivered`].
    delivered: bool,
    /// Events dropped in all.
    dropped: u64,
    /// Events dropped and not yet reported in an `EventsDropped` error.
    unreported: u64,
}

impl Sink {
    /// A sink into `tx` holding `capacity` events in the channel and up to `max_pending`
    /// behind it.
    pub(super) fn new(
        tx: Sender<Event>,
        shared: Arc<Shared>,
        capacity: usize,
        max_pending: usize,
    ) -> Sink {
        Sink {
            tx,
            shared,
            capacity,
            pending: VecDeque::new(),
            closing: None,
            next_expiry: None,
            unread: (0, 0),
            max_pending,
            delivered: false,
            dropped: 0,
            unreported: 0,
        }
    }

    /// Hands an event on; true when it had to wait behind the channel (the reader is behind).
    ///
    /// The application is not reading events when more than `max_pending` wait: frames are
    /// bounded by the read stop and never dropped; state and error events go first,
    /// abandoned frames last (they stay counted in the metrics either way).
    pub(super) fn push(&mut self, ev: Event) -> bool {
        let ev = if self.pending.is_empty() {
            match self.try_send(ev) {
                Ok(()) => return false,
                Err(ev) => ev,
            }
        } else {
            ev
        };
        let until = match ev {
            Event::Frame(_) => self.closing,
            _ => None,
        };
        if let Some(t) = until {
            self.next_expiry.get_or_insert(t);
        }
        self.pending.push_back((ev, until));
        if self.pending.len() > self.max_pending {
            let victim = self
                .pending
                .iter()
                .position(|(e, _)| matches!(e, Event::State(_) | Event::Error(_)))
                .or_else(|| {
                    self.pending
                        .iter()
                        .position(|(e, _)| matches!(e, Event::Abandoned { .. }))
                });
            if let Some(i) = victim {
                self.pending.remove(i);
                self.dropped += 1;
                self.unreported += 1;
            }
        }
        true
    }

    /// Moves waiting events into the channel while it has room, then reports the events
    /// dropped since the last report; true when nothing waits any more (the reader caught up).
    pub(super) fn flush(&mut self) -> bool {
        while let Some((ev, until)) = self.pending.pop_front() {
            if let Err(ev) = self.try_send(ev) {
                self.pending.push_front((ev, until));
                break;
            }
        }
        if self.next_expiry.is_some() && !self.pending.iter().any(|(_, u)| u.is_some()) {
            self.next_expiry = None;
        }
        if self.pending.is_empty() && self.unreported > 0 {
            let report = Event::Error(LinkError::EventsDropped(self.unreported));
            if self.try_send(report).is_ok() {
                self.unreported = 0;
            }
        }
        if !self.pending.is_empty() {
            return false;
        }
        if self.pending.capacity() > 64 {
            // A reader that caught up: give back what the backlog took.
            self.pending = VecDeque::new();
        }
        true
    }

    /// The frames pushed from now until [`Sink::closed`] are a closed connection's last: those
    /// that have to wait behind the channel may wait until `until`.
    pub(super) fn closing(&mut self, until: Instant) {
        self.closing = Some(until);
    }

    /// The closed connection's last frames were pushed.
    pub(super) fn closed(&mut self) {
        self.closing = None;
    }

    /// When the first frame of a closed connection waiting behind the channel runs out of
    /// time, if one waits.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.next_expiry
    }

    /// Drops the frames of closed connections still waiting at their bound, and reports them
    /// (how many, how many bytes) in a [`LinkError::FramesUnread`] ahead of the events that
    /// wait after them; counted in [`Sink::unread`].
    pub(super) fn expire(&mut self, now: Instant) {
        if !self.next_expiry.is_some_and(|t| t <= now) {
            return;
        }
        let (mut frames, mut bytes) = (0u64, 0u64);
        self.pending.retain(|(ev, until)| match (ev, until) {
            (Event::Frame(f), Some(t)) if *t <= now => {
                frames += 1;
                bytes += f.len() as u64;
                false
            }
            _ => true,
        });
        self.next_expiry = self.pending.iter().find_map(|(_, u)| *u);
        if frames > 0 {
            self.unread.0 += frames;
            self.unread.1 += bytes;
            let report = Event::Error(LinkError::FramesUnread { frames, bytes });
            self.pending.push_front((report, None));
        }
    }

    /// Frames of closed connections dropped because the application did not take them in
    /// time, and their bytes.
    pub(super) fn unread(&self) -> (u64, u64) {
        self.unread
    }

    /// Events wait behind the channel.
    pub(super) fn is_behind(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Events dropped because the application did not take them.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Whether events went into the channel since the last call (async receivers are woken
    /// then, once per pass).
    pub(super) fn take_delivered(&mut self) -> bool {
        std::mem::take(&mut self.delivered)
    }

    /// The events still waiting, oldest first (for the link's leftover events).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.pending.drain(..).map(|(ev, _)| ev)
    }

    /// Hands an event to the channel unless the application holds `capacity` of them
    /// already.
    fn try_send(&mut self, ev: Event) -> Result<(), Event> {
        let queued = &self.shared.events_queued;
        if queued.fetch_add(1, Ordering::SeqCst) >= self.capacity {
            queued.fetch_sub(1, Ordering::SeqCst);
            return Err(ev);
        }
        let sent = self
            .tx
            .send(ev)
            .map_err(|crossbeam_channel::SendError(ev)| {
                queued.fetch_sub(1, Ordering::SeqCst);
                ev
            });
        if sent.is_ok() {
            self.delivered = true;
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::event::{Cause, State, Transition};
    use crate::io::intake::Intake;
    use crate::io::shared::Wake;

    fn sink(capacity: usize) -> (Sink, crossbeam_channel::Receiver<Event>) {
        let wake = Arc::new(Wake::new().expect("an eventfd"));
        let shared = Arc::new(Shared::new(wake, Intake::new(8, 1024)));
        let (tx, rx) = crossbeam_channel::unbounded();
        (Sink::new(tx, shared, capacity, 4096), rx)
    }

    fn frame(n: usize) -> Event {
        Event::Frame(bytes::Bytes::from(vec![b'x'; n]))
    }

    fn backoff() -> Event {
        Event::State(Transition {
            from: State::Ready,
            to: State::Backoff,
            cause: Cause::PeerClosed,
            attempt: 1,
            next_retry: None,
            endpoint: None,
        })
    }

    #[test]
    fn a_closed_connections_frames_left_waiting_at_their_bound_are_dropped_and_reported_in_place() {
        let (mut s, rx) = sink(1);
        let t0 = Instant::now();
        assert!(!s.push(frame(1)), "room in the channel");
        s.closing(t0 + Duration::from_millis(300));
        for _ in 0..3 {
            assert!(s.push(frame(10)));
        }
        s.closed();
        s.push(backoff());
        assert_eq!(s.next_expiry(), Some(t0 + Duration::from_millis(300)));
        s.expire(t0 + Duration::from_millis(299));
        assert_eq!((s.unread(), s.pending.len()), ((0, 0), 4));
        s.expire(t0 + Duration::from_millis(300));
        assert_eq!((s.unread(), s.next_expiry()), ((3, 30), None));
        let left: Vec<_> = s.drain().collect();
        assert!(matches!(
            left[0],
            Event::Error(LinkError::FramesUnread {
                frames: 3,
                bytes: 30
            })
        ));
        assert!(matches!(left[1], Event::State(_)), "{left:?}");
        assert_eq!(left.len(), 2);
        assert_eq!(rx.len(), 1, "the frame that found room stays delivered");
    }

    #[test]
    fn frames_the_application_takes_in_time_are_never_dropped() {
        let (mut s, rx) = sink(1);
        let t0 = Instant::now();
        s.push(frame(1));
        s.closing(t0 + Duration::from_millis(300));
        s.push(frame(1));
        s.closed();
        // The application takes the first; the second moves into the channel.
        let _ = rx.try_recv();
        s.shared.events_queued.fetch_sub(1, Ordering::SeqCst);
        assert!(s.flush());
        assert_eq!(s.next_expiry(), None);
        s.expire(t0 + Duration::from_secs(1));
        assert_eq!(s.unread(), (0, 0));
        assert_eq!(rx.len(), 1);
    }
}
