//! The machine's close: a close flushes what is queued, then ends the link.

use std::time::Instant;

use super::connection::Connection;
use super::{Action, Ev, Machine};
use crate::event::{AbandonReason, Cause, State};

impl Machine {
    /// The end: the connection closed (with TLS, close_notify first, best effort within
    /// the linger), every frame and request still held given back, the socket released.
    pub(super) fn finish(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        self.requeue_in_flight();
        let conn = self.conn.take();
        if let Some(c) = &conn {
            self.c.bytes_discarded += c.rx.len() as u64;
        }
        if matches!(
            self.state,
            State::Connecting | State::Connected | State::Ready
        ) {
            // Best effort, within the linger.
            if let Some(bytes) = conn.and_then(Connection::close_notify) {
                self.actions.push_back(Action::Send(bytes));
            }
            self.actions.push_back(Action::Disconnect);
        }
        // Written, not confirmed: the peer may have them.
        let unconfirmed = self
            .window
            .take_all()
            .into_iter()
            .map(|s| s.frame)
            .collect();
        self.abandon_all(unconfirmed, AbandonReason::Unconfirmed);
        self.window.reset();
        let frames = self.outbox.drain();
        self.abandon_all(frames, AbandonReason::Shutdown);
        self.requests.shutdown();
        self.answer_requests();
        self.timers.clear();
        self.retry_delay = None;
        self.transition(now, State::Closed, Cause::Closed);
        self.actions.push_back(Action::Stop);
    }

    /// A close waits for nothing more: the flushed row.
    pub(super) fn check_flushed(&mut self, now: Instant) {
        if self.closing && self.state != State::Closed && self.drained() {
            self.step(now, Ev::Flushed);
        }
    }

    /// Nothing left to write, to confirm or to answer.
    pub(super) fn drained(&self) -> bool {
        self.outbox.is_empty() && self.window.is_empty() && self.requests.waiting() == 0
    }
}
