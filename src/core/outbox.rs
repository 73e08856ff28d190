//! The outbox: frames accepted by `send` that wait for a Ready connection, in submission
//! order, each with an optional deadline.
//!
//! Admission limits are enforced by the handle before a frame is accepted (so a refused frame
//! can be handed back at the call); the outbox only keeps order, expires frames and, for the
//! `DropOldest` policy, trims itself back under its limits.
//!
//! Frames are `Bytes`. A batch (or a run of small frames from the intake) stays one entry,
//! its frames back to back in one frozen buffer: queueing, writing and confirming its frames
//! allocates nothing per frame, and a frame that leaves is a slice of that buffer. Frames handed out for writing stay at the
//! front, in flight, until they are written (they leave, to wait in the window for their
//! confirmation) or put back (a failed write).
//!
//! Each submission keeps its order number, the place the machine gave it among every frame
//! and request handed in: the machine writes frames and requests merged by it.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use crate::core::batch::Batch;

/// The frames of one submission: one frame, or a batch's frames (back to back in one buffer,
/// each ending at its entry in `ends`) from `head` on.
#[derive(Debug)]
enum Frames {
    One(Bytes),
    Many {
        data: Bytes,
        ends: Vec<usize>,
        head: usize,
    },
}

#[derive(Debug)]
struct Submission {
    frames: Frames,
    deadline: Option<Instant>,
    /// A frame the peer refused, to be written again ahead of the frames still queued.
    retry: bool,
    /// Its place among the frames and requests handed to the machine (see the module docs).
    order: u64,
}

impl Submission {
    /// The index of the first frame still queued.
    fn first(&self) -> usize {
        match &self.frames {
            Frames::One(_) => 0,
            Frames::Many { head, .. } => *head,
        }
    }

    /// One past the index of the last frame.
    fn end(&self) -> usize {
        match &self.frames {
            Frames::One(_) => 1,
            Frames::Many { ends, .. } => ends.len(),
        }
    }

    /// Where frame `i` of a batch lies in its buffer.
    fn span(ends: &[usize], i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { ends[i - 1] };
        start..ends[i]
    }

    /// Removes the first queued frame (a slice of a batch's buffer, not a copy); true if the
    /// entry is now empty.
    fn take_front(&mut self) -> (Bytes, bool) {
        match &mut self.frames {
            Frames::One(f) => (std::mem::take(f), true),
            Frames::Many { data, ends, head } => {
                let f = data.slice(Submission::span(ends, *head));
                *head += 1;
                (f, *head == ends.len())
            }
        }
    }

    /// Every frame still queued, in order.
    fn into_frames(self, out: &mut Vec<Bytes>) {
        match self.frames {
            Frames::One(f) => out.push(f),
            Frames::Many { data, ends, head } => {
                out.extend((head..ends.len()).map(|i| data.slice(Submission::span(&ends, i))));
            }
        }
    }
}

#[derive(Debug)]
pub(crate) struct Outbox {
    queue: VecDeque<Submission>,
    /// Frames and bytes queued, in flight included.
    frames: usize,
    bytes: usize,
    max_frames: usize,
    max_bytes: usize,
    /// No queued deadline is earlier than this (it may be stale-early after pops).
    earliest: Option<Instant>,
    /// Frames at the front handed out for writing and not yet confirmed or put back.
    in_flight: usize,
    in_flight_bytes: usize,
    /// The first frame not in flight: (entry, frame index in it). Meaningful while
    /// `in_flight > 0`.
    cursor: (usize, usize),
}

impl Outbox {
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> Outbox {
        Outbox {
            queue: VecDeque::new(),
            frames: 0,
            bytes: 0,
            max_frames,
            max_bytes,
            earliest: None,
            in_flight: 0,
            in_flight_bytes: 0,
            cursor: (0, 0),
        }
    }

    /// Frames queued, in flight included.
    pub(crate) fn len(&self) -> usize {
        self.frames
    }

    /// Bytes queued, in flight included.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Frames handed out for writing and not yet confirmed.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues a frame, numbered `order` among everything handed to the machine.
    pub(crate) fn push(&mut self, frame: Bytes, deadline: Option<Instant>, order: u64) {
        self.note_deadline(deadline);
        self.frames += 1;
        self.bytes += frame.len();
        self.queue.push_back(Submission {
            frames: Frames::One(frame),
            deadline,
            retry: false,
            order,
        });
    }

    /// Queues every frame of `batch`, in order, sharing one deadline and one order number.
    pub(crate) fn push_batch(&mut self, batch: Batch, deadline: Option<Instant>, order: u64) {
        if batch.is_empty() {
            return;
        }
        self.note_deadline(deadline);
        self.frames += batch.len();
        self.bytes += batch.bytes();
        let (data, ends) = batch.into_parts();
        self.queue.push_back(Submission {
            frames: Frames::Many {
                data,
                ends,
                head: 0,
            },
            deadline,
            retry: false,
            order,
        });
    }

    /// Removes the oldest frame. Nothing may be in flight.
    pub(crate) fn pop_front(&mut self) -> Option<Bytes> {
        debug_assert_eq!(self.in_flight, 0, "pop_front with frames in flight");
        let entry = self.queue.front_mut()?;
        let (frame, emptied) = entry.take_front();
        if emptied {
            self.queue.pop_front();
        }
        self.frames -= 1;
        self.bytes -= frame.len();
        if self.queue.is_empty() {
            self.earliest = None;
        }
        Some(frame)
    }

    /// Whether the outbox holds more than its limits allow.
    pub(crate) fn over_limit(&self) -> bool {
        self.frames > self.max_frames || self.bytes > self.max_bytes
    }

    /// The earliest deadline, if any frame has one.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.earliest
    }

    /// Removes and returns the frames whose deadline has passed, keeping the order of the rest.
    /// While frames are in flight nothing expires (they are confirmed or put back first).
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Bytes> {
        match self.earliest {
            Some(t) if t <= now && self.in_flight == 0 => {}
            _ => return Vec::new(),
        }
        let mut expired = Vec::new();
        let mut earliest: Option<Instant> = None;
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for entry in self.queue.drain(..) {
            match entry.deadline {
                Some(d) if d <= now => {
                    let from = expired.len();
                    entry.into_frames(&mut expired);
                    for f in &expired[from..] {
                        self.frames -= 1;
                        self.bytes -= f.len();
                    }
                }
                Some(d) => {
                    earliest = Some(earliest.map_or(d, |e| e.min(d)));
                    kept.push_back(entry);
                }
                None => kept.push_back(entry),
            }
        }
        self.queue = kept;
        self.earliest = earliest;
        expired
    }

    /// Takes every queued frame, oldest first. Nothing may be in flight.
    pub(crate) fn drain(&mut self) -> Vec<Bytes> {
        debug_assert_eq!(self.in_flight, 0, "drain with frames in flight");
        let mut out = Vec::with_capacity(self.frames);
        for entry in self.queue.drain(..) {
            entry.into_frames(&mut out);
        }
        self.frames = 0;
        self.bytes = 0;
        self.earliest = None;
        out
    }

    /// The next frames to write: those of the first entry not yet in flight, from the first
    /// one not in flight (one frame, or the rest of a batch or run).
    pub(crate) fn unsent(&self) -> Option<Unsent<'_>> {
        let (e, i) = self.cursor_pos();
        let entry = self.queue.get(e)?;
        let order = entry.order;
        Some(match &entry.frames {
            Frames::One(f) => Unsent {
                data: f,
                start: 0,
                ends: None,
                order,
            },
            Frames::Many { data, ends, .. } => Unsent {
                data,
                start: Submission::span(ends, i).start,
                ends: Some(&ends[i..]),
                order,
            },
        })
    }

    /// The order number of the next frame to write, if one waits.
    pub(crate) fn next_order(&self) -> Option<u64> {
        let (e, _) = self.cursor_pos();
        self.queue.get(e).map(|entry| entry.order)
    }

    /// Marks the first `n` frames that [`unsent`](Outbox::unsent) gave as in flight (all of
    /// them from one entry).
    pub(crate) fn advance(&mut self, n: usize) {
        let (e, i) = self.cursor_pos();
        let Some(entry) = self.queue.get(e) else {
            return;
        };
        let n = n.min(entry.end() - i);
        if n == 0 {
            return;
        }
        let bytes = match &entry.frames {
            Frames::One(f) => f.len(),
            Frames::Many { ends, .. } => ends[i + n - 1] - Submission::span(ends, i).start,
        };
        self.in_flight += n;
        self.in_flight_bytes += bytes;
        self.cursor = if i + n == entry.end() {
            (e + 1, self.queue.get(e + 1).map_or(0, Submission::first))
        } else {
            (e, i + n)
        };
    }

    /// The frames in flight were written: they leave, oldest first, given to `each` a run at a
    /// time (the frames of one submission, back to back in its buffer, with its deadline):
    /// they wait for their confirmation elsewhere, and a run costs one handle on the buffer,
    /// not one per frame.
    pub(crate) fn take_written(&mut self, mut each: impl FnMut(Written<'_>)) {
        let mut left = self.in_flight;
        while left > 0 {
            let Some(entry) = self.queue.front_mut() else {
                break;
            };
            let (deadline, order) = (entry.deadline, entry.order);
            let emptied = match &mut entry.frames {
                Frames::One(f) => {
                    let len = f.len();
                    each(Written {
                        data: std::mem::take(f),
                        start: 0,
                        ends: std::slice::from_ref(&len),
                        deadline,
                        order,
                    });
                    left -= 1;
                    true
                }
                Frames::Many { data, ends, head } => {
                    let n = left.min(ends.len() - *head);
                    let start = Submission::span(ends, *head).start;
                    each(Written {
                        data: data.clone(),
                        start,
                        ends: &ends[*head..*head + n],
                        deadline,
                        order,
                    });
                    *head += n;
                    left -= n;
                    *head == ends.len()
                }
            };
            if emptied {
                self.queue.pop_front();
            }
        }
        self.frames -= self.in_flight;
        self.bytes -= self.in_flight_bytes;
        self.in_flight = 0;
        self.in_flight_bytes = 0;
        if self.queue.is_empty() {
            self.earliest = None;
        }
    }

    /// Puts a frame back first in line (one written on a connection that dropped before it
    /// was confirmed, to be resent), with its own order number. Nothing may be in flight.
    pub(crate) fn push_front(&mut self, frame: Bytes, deadline: Option<Instant>, order: u64) {
        debug_assert_eq!(self.in_flight, 0, "push_front with frames in flight");
        self.note_deadline(deadline);
        self.frames += 1;
        self.bytes += frame.len();
        self.queue.push_front(Submission {
            frames: Frames::One(frame),
            deadline,
            retry: false,
            order,
        });
    }

    /// Queues a frame the peer refused, to be written again: behind the refused frames queued
    /// before it, ahead of every other. Nothing may be in flight.
    pub(crate) fn push_retry(&mut self, frame: Bytes, deadline: Option<Instant>, order: u64) {
        debug_assert_eq!(self.in_flight, 0, "push_retry with frames in flight");
        self.note_deadline(deadline);
        self.frames += 1;
        self.bytes += frame.len();
        let at = self.queue.iter().take_while(|s| s.retry).count();
        self.queue.insert(
            at,
            Submission {
                frames: Frames::One(frame),
                deadline,
                retry: true,
                order,
            },
        );
    }

    /// The frames in flight were not written: they are queued again, first in line.
    pub(crate) fn requeue(&mut self) {
        self.in_flight = 0;
        self.in_flight_bytes = 0;
    }

    fn cursor_pos(&self) -> (usize, usize) {
        if self.in_flight > 0 {
            self.cursor
        } else {
            (0, self.queue.front().map_or(0, Submission::first))
        }
    }

    fn note_deadline(&mut self, d: Option<Instant>) {
        if let Some(d) = d {
            self.earliest = Some(self.earliest.map_or(d, |e| e.min(d)));
        }
    }
}

/// Frames of one submission not yet in flight, in order (see [`Outbox::unsent`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unsent<'a> {
    data: &'a [u8],
    /// Where the first of them starts in `data`.
    start: usize,
    /// The end of each in `data`; `None` for a frame alone (all of `data`).
    ends: Option<&'a [usize]>,
    /// The submission's order number.
    order: u64,
}

impl<'a> Unsent<'a> {
    /// The order number of their submission.
    pub(crate) fn order(self) -> u64 {
        self.order
    }

    /// Each frame, a slice of the entry's buffer.
    pub(crate) fn frames(self) -> impl Iterator<Item = &'a [u8]> {
        let (data, mut at) = (self.data, self.start);
        let alone = self.ends.is_none().then_some(data);
        let many = self.ends.unwrap_or_default().iter();
        alone
            .into_iter()
            .chain(many.map(move |&end| &data[std::mem::replace(&mut at, end)..end]))
    }
}

/// Written frames of one submission: back to back in `data`, the first from `start`, each
/// ending at its entry in `ends` (offsets in `data`), with the submission's deadline and order
/// number.
#[derive(Debug)]
pub(crate) struct Written<'a> {
    pub data: Bytes,
    pub start: usize,
    pub ends: &'a [usize],
    pub deadline: Option<Instant>,
    pub order: u64,
}

impl Written<'_> {
    /// Where each frame lies in `data`, in order.
    #[cfg(test)]
    fn spans(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let mut at = self.start;
        self.ends
            .iter()
            .map(move |&end| std::mem::replace(&mut at, end)..end)
    }

    /// The bytes of the frames.
    pub(crate) fn bytes(&self) -> usize {
        self.ends.last().map_or(0, |end| end - self.start)
    }

    /// Each frame, a slice of the one buffer.
    #[cfg(test)]
    pub(crate) fn frames(&self) -> Vec<Bytes> {
        self.spans().map(|span| self.data.slice(span)).collect()
    }
}

#[cfg(test)]
mod tests;
