//! The delivery side: what the link owes across connections. [`Backlog`] owns the frames
//! queued (the outbox), the frames written and not yet confirmed (the window, and the losses
//! its oldest frame was in flight at), the requests and their replies, and the flushes that
//! wait on them. A lost connection's frames are resent or reported from here; the machine
//! gives back what it returns, as events.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::flushes::Flushes;
use super::transmit::Bounds;
use crate::core::confirm::Turn;
use crate::core::counters::Counters;
use crate::core::framing::BoxedFraming;
use crate::core::guard::{guarded, Panicked};
use crate::core::outbox::{Outbox, Written};
use crate::core::protocol::Replies;
use crate::core::requests::{RequestWindow, Token};
use crate::core::settings::Settings;
use crate::core::window::{Losses, Redelivery, Window};
use crate::error::{Callback, FlushError, RequestError};

/// How long after the oldest waiting frame was written the first reading of the
/// acknowledged bytes comes, while nothing waits on the confirmations
/// ([`Backlog::reading_at`]).
pub(crate) const QUIET: Duration = Duration::from_millis(10);

/// How long after the oldest waiting frame was written the link's own timer takes the first
/// reading, while nothing waits on the confirmations: before it, the reading waits for a pass
/// the link makes anyway after [`QUIET`] (its next frame's), and costs no wake-up of its own
/// ([`Backlog::reading_wake_at`]).
pub(crate) const QUIET_WAKE: Duration = Duration::from_millis(50);

/// Unconfirmed frames at which every pass reads the acknowledged bytes.
const PRESSED_FRAMES: usize = 64;

/// Unconfirmed bytes at which every pass reads the acknowledged bytes (or a quarter of a
/// smaller window).
const PRESSED_BYTES: u64 = 64 * 1024;

/// Frames and requests the link holds for the application, whatever the connection.
#[derive(Debug)]
pub(super) struct Backlog {
    /// Frames waiting for a Ready connection.
    pub(super) outbox: Outbox,
    /// Frames written and not yet confirmed; a lost connection's are resent or reported.
    pub(super) window: Window,
    /// How many losses in a row the oldest unconfirmed frame has been in flight at.
    pub(super) losses: Losses,
    /// Requests outstanding and their replies.
    pub(super) requests: RequestWindow,
    /// Flushes waiting for the frames submitted before them.
    pub(super) flushes: Flushes,
    /// The order number the next frame or request handed in gets: frames and requests are
    /// written merged by it, in the order they were handed in.
    next_order: u64,
}

/// What a lost connection leaves to give back: the frame abandoned as poison, and under
/// `Redelivery::Report` every unconfirmed frame.
#[derive(Debug, Default)]
pub(super) struct Lost {
    pub(super) poison: Option<Bytes>,
    pub(super) unconfirmed: Vec<Bytes>,
    /// The protocol's marking of a frame written again panicked (the frame goes unmarked).
    pub(super) panics: Vec<Panicked>,
}

impl Backlog {
    /// Empty, with the limits and policies of `cfg`.
    pub(super) fn new(cfg: &Settings) -> Backlog {
        Backlog {
            outbox: Outbox::new(cfg.outbox_frames, cfg.outbox_bytes),
            window: Window::new(cfg.confirm.by_reply),
            losses: Losses::default(),
            requests: RequestWindow::new(&cfg.requests, cfg.max_losses),
            flushes: Flushes::default(),
            next_order: 0,
        }
    }

    /// The order number of a submission or request handed in now: its place among all of
    /// them, which it keeps until it is written (again, after a loss).
    pub(super) fn stamp(&mut self) -> u64 {
        self.next_order += 1;
        self.next_order
    }

    /// Nothing left to write, to confirm or to answer.
    pub(super) fn drained(&self) -> bool {
        self.outbox.is_empty() && self.window.is_empty() && self.requests.waiting() == 0
    }

    /// The frames and requests of the last `poll_transmit` go first in line again.
    pub(super) fn requeue(&mut self) {
        self.outbox.requeue();
        self.requests.requeue();
    }

    /// The oldest frames, taken out while the outbox is over its limits (`Overflow`); the
    /// last frame stays even if it alone is over. Frames in flight are confirmed or put back
    /// first.
    pub(super) fn overflow(&mut self) -> Vec<Bytes> {
        let mut dropped = Vec::new();
        while self.outbox.in_flight() == 0 && self.outbox.over_limit() && self.outbox.len() > 1 {
            dropped.push(self.outbox.pop_front().expect("non-empty"));
        }
        dropped
    }

    /// The earliest deadline of a frame, a request or a flush.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        [
            self.outbox.next_deadline(),
            self.requests.next_deadline(),
            self.flushes.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A flush of the frames submitted so far (`abandoned` of all given back so far).
    pub(super) fn flush(
        &mut self,
        token: Token,
        submitted: u64,
        abandoned: u64,
        deadline: Instant,
    ) {
        self.flushes.push(token, submitted, abandoned, deadline);
    }

    /// Answers (through `answer`) the flushes whose frames all have their outcome, or whose
    /// deadline passed, out of the `submitted` frames so far (`abandoned` of all given back).
    pub(super) fn settle_flushes(
        &mut self,
        now: Instant,
        submitted: u64,
        abandoned: u64,
        answer: impl FnMut(Token, Result<(), FlushError>),
    ) {
        let waiting = (self.outbox.len() + self.window.len()) as u64;
        self.flushes
            .settle(now, waiting, submitted, abandoned, answer);
    }

    /// Whether the IO side should read the acknowledged bytes at `now`: the window's reading
    /// is due ([`Backlog::reading_at`]), or something waits on the confirmations.
    /// `window_limit` is the window's bound in bytes (0: none); `closing`, a close waits.
    pub(super) fn reading_due(&self, now: Instant, window_limit: usize, closing: bool) -> bool {
        !self.window.is_empty()
            && (self.reading_pressed(window_limit, closing)
                || self
                    .reading_at(window_limit, closing)
                    .is_some_and(|t| t <= now))
    }

    /// When the window's next reading is due: its own schedule, but no sooner than
    /// [`QUIET`] after the oldest waiting frame was written, while nothing waits on the
    /// confirmations. A link that writes a frame now and then takes one reading for the
    /// frames of [`QUIET`], not one per frame (each costs the IO thread a wake-up and a few
    /// system calls, more than the frame).
    pub(super) fn reading_at(&self, window_limit: usize, closing: bool) -> Option<Instant> {
        self.reading_after(window_limit, closing, QUIET)
    }

    /// When the IO thread must wake for the window's next reading: [`Backlog::reading_at`],
    /// but, while nothing waits on the confirmations, no sooner than [`QUIET_WAKE`] after the
    /// oldest waiting frame was written. A link that writes a frame every few milliseconds
    /// takes its readings in the passes of its frames, without a wake-up of their own; one
    /// that wrote one frame and nothing more has it confirmed [`QUIET_WAKE`] later.
    pub(super) fn reading_wake_at(&self, window_limit: usize, closing: bool) -> Option<Instant> {
        self.reading_after(window_limit, closing, QUIET_WAKE)
    }

    /// The window's own schedule, but, while nothing waits on the confirmations, no sooner
    /// than `quiet` after the oldest waiting frame was written.
    fn reading_after(
        &self,
        window_limit: usize,
        closing: bool,
        quiet: Duration,
    ) -> Option<Instant> {
        let at = self.window.poll_at()?;
        if self.reading_pressed(window_limit, closing) {
            return Some(at);
        }
        Some(
            self.window
                .oldest()
                .map_or(at, |oldest| at.max(oldest + quiet)),
        )
    }

    /// Something waits on the confirmations: a flush, a close, frames held back or about to
    /// be (a quarter of the window), or more frames than [`PRESSED_FRAMES`] unconfirmed.
    fn reading_pressed(&self, window_limit: usize, closing: bool) -> bool {
        let unacked = self.window.unacked();
        let window = match window_limit {
            0 => PRESSED_BYTES,
            w => (w as u64 / 4).min(PRESSED_BYTES),
        };
        closing || self.flushes.waits() || unacked >= window || self.window.len() >= PRESSED_FRAMES
    }

    /// The frames of the last batch went out at `now`, `base` bytes into the connection's
    /// stream: counted as sent in `c`, and each waits in the window at the stream offset where
    /// the peer can read its last byte (`base` plus `end_of` the k-th frame of the batch). A
    /// window that sees no acknowledgements and no answers confirms them at once. Returns how
    /// many went into the window.
    pub(super) fn written(
        &mut self,
        now: Instant,
        base: u64,
        c: &mut Counters,
        end_of: impl Fn(usize) -> usize,
    ) -> usize {
        let window = &mut self.window;
        let blind = window.is_blind() && !window.by_reply();
        let mut k = 0;
        self.outbox.take_written(|run| {
            let (frames, bytes) = (run.ends.len(), run.bytes());
            c.sent(frames, bytes);
            if blind {
                c.confirmed(frames, bytes);
                return;
            }
            let Written {
                data,
                start,
                ends,
                deadline,
                order,
            } = run;
            let frames = ends.iter().map(|&at| {
                let end = base + end_of(k) as u64;
                k += 1;
                (at, end)
            });
            window.push_run(data, start, frames, now, (deadline, order));
        });
        k
    }

    /// How much the next batch may hold: `limit` payload bytes (one frame at least), and
    /// while the window sees acknowledgements, `window_limit` bytes written and not yet
    /// acknowledged (0: no bound; one batch at least when none are).
    pub(super) fn bounds(&self, limit: usize, window_limit: usize) -> Bounds {
        // The framing's own bytes are not counted.
        let window = match window_limit {
            0 => u64::MAX,
            _ if self.window.is_blind() => u64::MAX,
            w => w as u64,
        };
        Bounds {
            limit,
            window,
            unacked: self.window.unacked(),
        }
    }

    /// Adds the requests waiting to be written and numbered below `until` to the batch in
    /// `buf`, while it holds fewer than `limit` bytes (one request at least), each with its
    /// turn in `turns` when the peer answers in order. One the framing refuses is answered
    /// with [`RequestError::Invalid`]; a panic of the framing ends the batch. Returns true
    /// when the batch is full.
    pub(super) fn batch_requests(
        &mut self,
        framing: &mut BoxedFraming,
        limit: usize,
        buf: &mut Vec<u8>,
        mut turns: Option<&mut Vec<(Turn, Replies, usize)>>,
        asked: impl Fn(&[u8]) -> Replies,
        until: u64,
    ) -> Result<bool, Panicked> {
        while let Some(frame) = self.requests.next_unsent() {
            if self.requests.next_order().is_some_and(|o| o >= until) {
                break;
            }
            if !buf.is_empty() && buf.len().saturating_add(frame.len()) > limit {
                return Ok(true);
            }
            let mark = buf.len();
            match guarded(Callback::Encode, || framing.encode(frame, buf))? {
                Ok(()) => {
                    if let Some(turns) = turns.as_deref_mut() {
                        let asked = guarded(Callback::Protocol, || asked(frame))?;
                        turns.push((Turn::Request, asked, buf.len()));
                    }
                    self.requests.advance();
                }
                Err(e) => {
                    buf.truncate(mark);
                    self.requests
                        .refuse_next(|frame| RequestError::Invalid(frame, e));
                }
            }
        }
        Ok(false)
    }

    /// The frames of a lost connection that were written and not confirmed, by `policy`:
    /// first in line again (resend, each `mark`ed by the protocol, counted in `c`), or given
    /// back (report). The oldest, lost `max_losses` times in a row, is poison.
    pub(super) fn redeliver(
        &mut self,
        policy: Redelivery,
        max_losses: u32,
        c: &mut Counters,
        mark: impl Fn(&[u8]) -> Result<Option<Vec<u8>>, Panicked>,
    ) -> Lost {
        let frames = self.window.take_all();
        self.window.reset();
        let mut lost = Lost::default();
        match policy {
            Redelivery::Resend => {
                let (frames, poison) = self.losses.count(frames, max_losses);
                lost.poison = poison;
                c.resent += frames.len() as u64;
                for s in frames.into_iter().rev() {
                    let frame = match mark(&s.frame) {
                        Ok(Some(marked)) => marked.into(),
                        Ok(None) => s.frame,
                        Err(p) => {
                            lost.panics.push(p);
                            s.frame
                        }
                    };
                    self.outbox.push_front(frame, s.deadline, s.order);
                }
            }
            Redelivery::Report => {
                self.losses.clear();
                lost.unconfirmed = frames.into_iter().map(|s| s.frame).collect();
            }
        }
        lost
    }
}
