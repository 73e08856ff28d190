//! What the handle hands in (frames and requests) and what the machine gives back: frames
//! abandoned, and the outcome of each request.

use std::time::Instant;

use bytes::Bytes;

use super::{Action, Machine};
use crate::batch::Batch;
use crate::core::requests::Token;
use crate::error::RequestError;
use crate::event::{AbandonReason, Event, State};

impl Machine {
    /// A frame accepted by the handle: queued, or given back at once when the link is
    /// closed or its deadline has passed.
    pub(super) fn submit(&mut self, now: Instant, frame: Bytes, deadline: Option<Instant>) {
        self.c.submitted += 1;
        if self.state == State::Closed {
            self.abandon_all(vec![frame], AbandonReason::Shutdown);
            return;
        }
        if deadline.is_some_and(|d| d <= now) {
            self.abandon_all(vec![frame], AbandonReason::Expired);
            return;
        }
        self.outbox.push(frame, deadline);
        self.trim();
    }

    /// Frames accepted by the handle in one call, as `submit` takes one.
    pub(super) fn submit_batch(&mut self, now: Instant, batch: Batch, deadline: Option<Instant>) {
        self.c.submitted += batch.len() as u64;
        if self.state == State::Closed {
            self.abandon_all(batch.into_shared_frames(), AbandonReason::Shutdown);
            return;
        }
        if deadline.is_some_and(|d| d <= now) {
            self.abandon_all(batch.into_shared_frames(), AbandonReason::Expired);
            return;
        }
        self.outbox.push_batch(batch, deadline);
        self.trim();
    }

    /// A request accepted by the handle: waits for its turn, or is answered at once when the
    /// link is closed.
    pub(super) fn request(
        &mut self,
        now: Instant,
        token: Token,
        frame: Bytes,
        id: Option<Vec<u8>>,
        deadline: Instant,
    ) {
        if self.state == State::Closed {
            self.c.requests_submitted += 1;
            return self
                .requests
                .answer(token, Err(RequestError::Closed(frame)));
        }
        self.c.requests_submitted += 1;
        self.requests.submit(now, token, frame, id, deadline);
    }

    /// Hands every outcome reached to its caller.
    pub(super) fn answer_requests(&mut self) {
        while let Some((token, outcome)) = self.requests.poll_outcome() {
            self.actions.push_back(Action::Answer(token, outcome));
        }
    }

    /// Gives each frame back to the application (`Event::Abandoned`), counted.
    pub(super) fn abandon_all(&mut self, frames: Vec<Bytes>, reason: AbandonReason) {
        for frame in frames {
            self.c.abandon(reason, frame.len());
            self.emit(Event::Abandoned { frame, reason });
        }
    }
}
