//! The machine's close: a close flushes what is queued, then ends the link.

use std::time::Instant;

use super::connection::Connection;
use super::{Action, Ev, Flush, Machine};
use crate::core::requests::Token;
use crate::error::FlushError;
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
        if !self.flushes.is_empty() {
            self.check_flushes(now);
        }
        if self.closing && self.state != State::Closed && self.drained() {
            self.step(now, Ev::Flushed);
        }
    }

    /// Nothing left to write, to confirm or to answer.
    pub(super) fn drained(&self) -> bool {
        self.outbox.is_empty() && self.window.is_empty() && self.requests.waiting() == 0
    }
}

/// Flushes: a wait for the frames submitted before it.
impl Machine {
    /// A flush: answered once every frame submitted before it has its outcome, or at
    /// `deadline`.
    pub(super) fn flush(&mut self, now: Instant, token: Token, deadline: Instant) {
        self.flushes.push(Flush {
            token,
            mark: self.c.submitted,
            abandoned: self.c.abandoned.total(),
            deadline,
        });
        self.barrier_due(now);
        self.check_flushes(now);
    }

    /// Whether a flush waits.
    pub(super) fn flush_waits(&self) -> bool {
        !self.flushes.is_empty()
    }

    /// The earliest deadline of a waiting flush.
    pub(super) fn flush_deadline(&self) -> Option<Instant> {
        self.flushes.iter().map(|f| f.deadline).min()
    }

    /// Answers the flushes whose frames all have their outcome, or whose deadline passed.
    /// Frames leave the outbox and the window in the order they came (but for a deadline of
    /// their own), so a flush is done once no more frames wait than came after it.
    fn check_flushes(&mut self, now: Instant) {
        let waiting = (self.outbox.len() + self.window.len()) as u64;
        let (submitted, abandoned) = (self.c.submitted, self.c.abandoned.total());
        let actions = &mut self.actions;
        self.flushes.retain(|f| {
            let after = submitted - f.mark;
            let outcome = if waiting <= after {
                match abandoned - f.abandoned {
                    0 => Ok(()),
                    frames => Err(FlushError::Abandoned { frames }),
                }
            } else if f.deadline <= now {
                Err(FlushError::TimedOut {
                    waiting: waiting - after,
                })
            } else {
                return true;
            };
            actions.push_back(Action::Flushed(f.token, outcome));
            false
        });
    }
}
