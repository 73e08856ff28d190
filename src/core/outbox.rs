//! The outbox: frames accepted by `send` that wait for a Ready connection, in submission
//! order, each with an optional deadline.
//!
//! Admission limits are enforced by the handle before a frame is accepted (so a refused frame
//! can be handed back at the call); the outbox only keeps order, expires frames and, for the
//! `DropOldest` policy, trims itself back under its limits.

use std::collections::VecDeque;
use std::time::Instant;

/// One frame waiting to be sent.
#[derive(Debug)]
pub(crate) struct Queued {
    pub frame: Vec<u8>,
    pub deadline: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct Outbox {
    queue: VecDeque<Queued>,
    bytes: usize,
    max_frames: usize,
    max_bytes: usize,
    /// No queued deadline is earlier than this (it may be stale-early after pops).
    earliest: Option<Instant>,
}

impl Outbox {
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> Outbox {
        Outbox {
            queue: VecDeque::new(),
            bytes: 0,
            max_frames,
            max_bytes,
            earliest: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn push_back(&mut self, q: Queued) {
        self.note_deadline(q.deadline);
        self.bytes += q.frame.len();
        self.queue.push_back(q);
    }

    /// Puts a frame back at the head (a batch the socket did not take).
    pub(crate) fn push_front(&mut self, q: Queued) {
        self.note_deadline(q.deadline);
        self.bytes += q.frame.len();
        self.queue.push_front(q);
    }

    pub(crate) fn pop_front(&mut self) -> Option<Queued> {
        let q = self.queue.pop_front()?;
        self.bytes -= q.frame.len();
        if self.queue.is_empty() {
            self.earliest = None;
        }
        Some(q)
    }

    pub(crate) fn front_len(&self) -> Option<usize> {
        self.queue.front().map(|q| q.frame.len())
    }

    /// Whether the outbox holds more than its limits allow.
    pub(crate) fn over_limit(&self) -> bool {
        self.queue.len() > self.max_frames || self.bytes > self.max_bytes
    }

    /// The earliest deadline, if any frame has one.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.earliest
    }

    /// Removes and returns the frames whose deadline has passed, keeping the order of the rest.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Vec<u8>> {
        match self.earliest {
            Some(t) if t <= now => {}
            _ => return Vec::new(),
        }
        let mut expired = Vec::new();
        let mut earliest: Option<Instant> = None;
        let mut bytes = self.bytes;
        self.queue.retain_mut(|q| match q.deadline {
            Some(d) if d <= now => {
                bytes -= q.frame.len();
                expired.push(std::mem::take(&mut q.frame));
                false
            }
            Some(d) => {
                earliest = Some(earliest.map_or(d, |e| e.min(d)));
                true
            }
            None => true,
        });
        self.bytes = bytes;
        self.earliest = earliest;
        expired
    }

    /// Takes every queued frame, oldest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Queued> + '_ {
        self.bytes = 0;
        self.earliest = None;
        self.queue.drain(..)
    }

    fn note_deadline(&mut self, d: Option<Instant>) {
        if let Some(d) = d {
            self.earliest = Some(self.earliest.map_or(d, |e| e.min(d)));
        }
    }
}

#[cfg(test)]
mod tests;
