//! The machine's transmit path: batches built from control frames, the outbox and the
//! requests; what became of them at the socket; the window of frames written and not yet
//! confirmed, and what becomes of it when a connection is lost.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::connection::Connection;
use super::{Ev, Machine, Timer, TxResult};
use crate::core::confirm::{Answers, Turn};
use crate::core::framing::BoxedFraming;
use crate::core::framing::{Framing, LengthDelimited, Lines};
use crate::core::guard::{guarded, Panicked};
use crate::core::outbox::{Outbox, Unsent, Written};
use crate::core::tls::RECORD_PLAINTEXT;
use crate::core::window::Redelivery;
use crate::error::{Callback, EncodeError, RequestError};
use crate::event::{AbandonReason, State};

/// How long after the oldest waiting frame was written the first reading of the
/// acknowledged bytes comes, while nothing waits on the confirmations (`Machine::reading_at`).
pub(crate) const QUIET: Duration = Duration::from_millis(10);

/// Unconfirmed frames at which every pass reads the acknowledged bytes.
const PRESSED_FRAMES: usize = 64;

/// Unconfirmed bytes at which every pass reads the acknowledged bytes (or a quarter of a
/// smaller window).
const PRESSED_BYTES: u64 = 64 * 1024;

/// How long to wait before offering the socket a batch again after EAGAIN.
const SEND_RETRY: Duration = Duration::from_millis(1);

impl Machine {
    /// Fills `buf` with the next bytes to write: control frames first, then queued frames
    /// while Ready, up to `batch_bytes` (one frame at least); with TLS, the session's records
    /// of that batch, and while handshaking only the handshake's own records. Returns false
    /// when there is nothing to write now. Every call must be answered with
    /// [`Machine::transmit_done`] (after [`Machine::transmit_unsent`] when the socket gave
    /// the bytes back).
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let more = if self.speaks_tls() {
            self.poll_sealed(now, buf)
        } else {
            self.poll_batch(now, buf)
        };
        if let Some(conn) = &mut self.conn {
            conn.pending_len = buf.len();
        }
        more
    }

    /// The bytes of the last `poll_transmit` that the socket did not take (EAGAIN), given
    /// back before `transmit_done`. With TLS they are sent again as they are; without, the
    /// frames behind them are encoded again.
    pub(crate) fn transmit_unsent(&mut self, bytes: Vec<u8>) {
        if let Some(conn) = self.conn.as_mut().filter(|c| c.tls.is_some()) {
            conn.tls_retry = Some(bytes);
        }
    }

    /// The plaintext batch: control frames, then queued frames while Ready.
    pub(super) fn poll_batch(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if !matches!(self.state, State::Connected | State::Ready)
            || self.outbox.in_flight() > 0
            || self.requests.in_flight() > 0
        {
            return false;
        }
        if self.timers.at(Timer::SendRetry).is_some_and(|t| t > now) {
            return false;
        }
        let limit = self.cfg.batch_bytes;
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        conn.pending_ends.clear();
        conn.pending_turns.clear();
        let answers = self.cfg.answers;
        while let Some((kind, c)) = conn.control.pop_front() {
            buf.extend_from_slice(&c);
            let turn = (answers != Answers::Unknown)
                .then(|| kind.turn(answers == Answers::EveryFrame))
                .flatten();
            if let Some(turn) = turn {
                conn.pending_turns.push((turn, buf.len()));
            }
            conn.in_flight_control.push((kind, c));
        }
        if self.state == State::Ready {
            // A batch holds one frame at least, and no more frames once the payloads would
            // pass the limit (the framing's own bytes are not counted). The window holds back
            // frames while too many written bytes are unacknowledged (one batch at least when
            // none are).
            let window = match self.cfg.window {
                0 => u64::MAX,
                _ if self.window.is_blind() => u64::MAX,
                w => w as u64,
            };
            let bounds = Bounds {
                limit,
                window,
                unacked: self.window.unacked(),
            };
            let (outbox, framing, name) = (&mut self.outbox, &mut self.framing, &self.cfg.name);
            let ends = &mut conn.pending_ends;
            let first = ends.len();
            let mut filled = Filled::default();
            // One reading for the whole batch: timing each frame would cost more than
            // encoding a small one.
            let took = self.callbacks.watch().time(Callback::Encode, &mut || {
                filled = fill_batch(outbox, framing, name, buf, bounds, ends);
            });
            if answers == Answers::EveryFrame {
                let turns = ends[first..].iter().map(|&e| (Turn::Frame, e));
                conn.pending_turns.extend(turns);
            }
            self.took(now, Callback::Encode, took);
            self.abandon_all(filled.refused, AbandonReason::Unencodable);
            if let Some(p) = filled.panicked {
                // The frame stays first in line (not in flight): it is never lost without a
                // word, and its deadline (if any) or a close still ends it.
                return self.encode_panicked(now, buf, p);
            }
            if let Err(p) = self.batch_requests(buf) {
                return self.encode_panicked(now, buf, p);
            }
        }
        !buf.is_empty()
    }

    /// The framing panicked while a batch was being built: nothing of it is written, the frames
    /// taken for it go back to the outbox and the connection fails.
    fn encode_panicked(&mut self, now: Instant, buf: &mut Vec<u8>, p: Panicked) -> bool {
        buf.clear();
        self.requeue_in_flight();
        self.step(now, Ev::CallbackPanicked(p));
        false
    }

    /// Adds the requests waiting to be written to the batch, while it has room.
    fn batch_requests(&mut self, buf: &mut Vec<u8>) -> Result<(), Panicked> {
        let limit = self.cfg.batch_bytes;
        while let Some(frame) = self.requests.next_unsent() {
            if !buf.is_empty() && buf.len().saturating_add(frame.len()) > limit {
                break;
            }
            let mark = buf.len();
            let framing = &mut self.framing;
            match guarded(Callback::Encode, || framing.encode(frame, buf))? {
                Ok(()) => {
                    self.requests.advance();
                    let in_order = self.cfg.answers != Answers::Unknown && !self.requests.by_id();
                    if let Some(conn) = self.conn.as_mut().filter(|_| in_order) {
                        conn.pending_turns.push((Turn::Request, buf.len()));
                    }
                }
                Err(e) => {
                    buf.truncate(mark);
                    self.requests
                        .refuse_next(|frame| RequestError::Invalid(frame, e));
                    self.answer_requests();
                }
            }
        }
        Ok(())
    }

    /// What became of the batch from the last `poll_transmit`.
    pub(crate) fn transmit_done(&mut self, now: Instant, result: TxResult) {
        let retry_waits = self.conn.as_ref().is_some_and(|c| c.tls_retry.is_some());
        match result {
            TxResult::Sent => {
                self.written(now);
                self.barrier_due(now);
                self.requests.confirm();
                if let Some(conn) = &mut self.conn {
                    conn.in_flight_control.clear();
                    if let Some(hb) = &mut conn.heartbeat {
                        hb.on_outbound(now);
                    }
                }
            }
            TxResult::WouldBlock if retry_waits => {
                // Sealed records wait as they are; their frames stay in flight.
                self.timers.arm(Timer::SendRetry, now + SEND_RETRY);
            }
            TxResult::WouldBlock if self.speaks_tls() => {
                // Sealed records lost: the session cannot go on without them.
                let g = self.dial.generation();
                self.fail_reason = Some("tls records refused by the socket".into());
                self.for_current(now, g, Ev::Unreachable);
            }
            TxResult::WouldBlock | TxResult::Unreachable => {
                self.requeue_in_flight();
                if result == TxResult::WouldBlock {
                    self.timers.arm(Timer::SendRetry, now + SEND_RETRY);
                } else {
                    let g = self.dial.generation();
                    self.for_current(now, g, Ev::Unreachable);
                }
            }
        }
        self.trim();
        self.check_flushed(now);
    }

    /// The bytes of the last `poll_transmit` went out: its frames wait in the window for
    /// their confirmation, each at the stream offset where it ends.
    fn written(&mut self, now: Instant) {
        let (len, ends, records) = match &self.conn {
            Some(conn) => (
                conn.pending_len,
                &conn.pending_ends[..],
                conn.tls.is_some().then_some(&conn.pending_records[..]),
            ),
            None => (0, &[][..], None),
        };
        let base = self.window.written();
        self.window.wrote(now, len);
        let (c, window) = (&mut self.c, &mut self.window);
        let blind = window.is_blind() && !window.by_reply();
        // With TLS a frame can be read once the record that carries its last byte has
        // arrived: it is confirmed with the end of that record.
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
                ends: run_ends,
                deadline,
            } = run;
            let frames = run_ends.iter().map(|&at| {
                let end = match (ends.get(k), records) {
                    (Some(&e), None) => e,
                    (Some(&e), Some(records)) => records
                        .get(e.saturating_sub(1) / RECORD_PLAINTEXT)
                        .map_or(len, |&r| r),
                    (None, _) => len,
                };
                let end = base + end as u64;
                k += 1;
                (at, end)
            });
            window.push_run(data, start, frames, now, deadline);
        });
        // The turns of the batch, at their ends in the stream (with TLS, the ends of their
        // records, as for frames).
        if let Some(conn) = &mut self.conn {
            let Connection {
                turns,
                pending_turns,
                pending_records,
                tls,
                uncovered_since,
                ..
            } = conn;
            for &(turn, e) in pending_turns.iter() {
                let end = match tls {
                    None => e,
                    Some(_) => pending_records
                        .get(e.saturating_sub(1) / RECORD_PLAINTEXT)
                        .map_or(len, |&r| r),
                };
                turns.push(turn, base + end as u64);
            }
            pending_turns.clear();
            if k > 0
                && uncovered_since.is_none()
                && !turns.ping_after(self.window.newest_end().unwrap_or(0))
            {
                *uncovered_since = Some(now);
            }
        }
    }

    /// A reading of the acknowledged bytes: the frames it covers are confirmed.
    pub(super) fn acked(&mut self, now: Instant, generation: u64, bytes: Option<u64>) {
        if !self.is_current(generation) || !matches!(self.state, State::Connected | State::Ready) {
            self.c.ignored += 1;
            return;
        }
        let Some(bytes) = bytes else {
            self.window.no_reading(now);
            return;
        };
        let c = &mut self.c;
        if !self.window.acked(now, bytes, |n, len| c.confirmed(n, len)) {
            log::debug!("relink: an acknowledged count that cannot be this connection's ignored");
        }
        self.check_flushed(now);
    }

    /// The acknowledgements of the connection of dial `generation` cannot be read: its frames
    /// count as confirmed when written.
    pub(super) fn acks_unavailable(&mut self, generation: u64) {
        if self.is_current(generation) && !self.window.is_blind() {
            log::warn!(
                "relink: the acknowledgements of the connection to {} cannot be read: \
                 its frames count as confirmed when written",
                self.endpoint_text().unwrap_or_default()
            );
            let c = &mut self.c;
            self.window.go_blind(|n, len| c.confirmed(n, len));
        }
    }

    /// Whether frames wait for the acknowledged bytes of the current connection (the IO side
    /// keeps what it reads them from only while they do).
    pub(crate) fn wants_acks(&self) -> bool {
        !self.window.is_empty()
    }

    /// Whether the IO side should read the acknowledged bytes at `now`: the window's reading
    /// is due ([`Machine::reading_at`]), or something waits on the confirmations (a flush, a
    /// close, a window that holds frames back or fills up).
    pub(crate) fn reading_due(&self, now: Instant) -> bool {
        !self.window.is_empty()
            && (self.reading_pressed() || self.reading_at().is_some_and(|t| t <= now))
    }

    /// When the window's next reading is due: its own schedule, but no sooner than
    /// [`QUIET`] after the oldest waiting frame was written, while nothing waits on the
    /// confirmations. A link that writes a frame now and then takes one reading for the
    /// frames of [`QUIET`], not one per frame (each costs the IO thread a wake-up and a few
    /// system calls, more than the frame).
    pub(super) fn reading_at(&self) -> Option<Instant> {
        let at = self.window.poll_at()?;
        if self.reading_pressed() {
            return Some(at);
        }
        Some(
            self.window
                .oldest()
                .map_or(at, |oldest| at.max(oldest + QUIET)),
        )
    }

    /// Something waits on the confirmations: a flush, a close, frames held back or about to
    /// be (a quarter of the window), or more frames than [`PRESSED_FRAMES`] unconfirmed.
    fn reading_pressed(&self) -> bool {
        let unacked = self.window.unacked();
        let window = match self.cfg.window {
            0 => PRESSED_BYTES,
            w => (w as u64 / 4).min(PRESSED_BYTES),
        };
        self.closing
            || self.flushes.waits()
            || unacked >= window
            || self.window.len() >= PRESSED_FRAMES
    }

    /// The frames of a lost connection that were written and not confirmed, by the policy:
    /// first in line again (resend), or each given back (report).
    pub(super) fn redeliver(&mut self) {
        let frames = self.window.take_all();
        self.window.reset();
        match self.cfg.redelivery {
            Redelivery::Resend => {
                let (frames, poison) = self.losses.count(frames, self.cfg.max_losses);
                if let Some(poison) = poison {
                    log::warn!(
                        "relink[{}]: a frame of {} bytes, the oldest unconfirmed at {} \
                         connection losses in a row, abandoned as poison",
                        self.cfg.name,
                        poison.len(),
                        self.cfg.max_losses
                    );
                    self.abandon_all(vec![poison], AbandonReason::Poison);
                }
                self.c.resent += frames.len() as u64;
                for s in frames.into_iter().rev() {
                    let frame = match self.marked_for_resend(&s.frame) {
                        Ok(Some(marked)) => marked.into(),
                        Ok(None) => s.frame,
                        Err(p) => {
                            // Reported here: the connection is already down.
                            self.report_panic(&p);
                            s.frame
                        }
                    };
                    self.outbox.push_front(frame, s.deadline);
                }
            }
            Redelivery::Report => {
                self.losses.clear();
                let frames = frames.into_iter().map(|s| s.frame).collect();
                self.abandon_all(frames, AbandonReason::Unconfirmed);
            }
        }
    }

    /// The protocol's mark on a frame written again (MQTT's DUP), guarded.
    fn marked_for_resend(&self, frame: &[u8]) -> Result<Option<Vec<u8>>, Panicked> {
        match self.protocol.as_ref() {
            Some(p) => guarded(Callback::Protocol, || p.resend(frame)),
            None => Ok(None),
        }
    }

    /// The frames, requests and control frames of the last `poll_transmit` go first in line
    /// again.
    pub(super) fn requeue_in_flight(&mut self) {
        self.outbox.requeue();
        self.requests.requeue();
        if let Some(conn) = &mut self.conn {
            conn.requeue_control();
        }
    }

    /// Drops the oldest frames (`Overflow`) while the outbox is over its limits; the last
    /// frame stays even if it alone is over. Frames in flight are confirmed or put back first.
    pub(super) fn trim(&mut self) {
        while self.outbox.in_flight() == 0 && self.outbox.over_limit() && self.outbox.len() > 1 {
            let frame = self.outbox.pop_front().expect("non-empty");
            self.abandon_all(vec![frame], AbandonReason::Overflow);
        }
    }
}

/// How filling a batch ended: frames the framing refused now (taken out of the outbox), and
/// the panic that ended it, if any.
#[derive(Default)]
struct Filled {
    refused: Vec<Bytes>,
    panicked: Option<Panicked>,
}

/// How much one batch may hold: payload bytes (`limit`, one frame at least), and the
/// window's bound on bytes written and not yet acknowledged (`unacked` of them already).
#[derive(Clone, Copy)]
struct Bounds {
    limit: usize,
    window: u64,
    unacked: u64,
}

/// Encodes queued frames into `buf` within `bounds`, noting where each ends in `ends`. The
/// calls into the framing are guarded together, once per batch: a panic ends the batch where
/// it happened, with the frames refused before it kept in `refused`.
fn fill_batch(
    outbox: &mut Outbox,
    framing: &mut BoxedFraming,
    name: &str,
    buf: &mut Vec<u8>,
    bounds: Bounds,
    ends: &mut Vec<usize>,
) -> Filled {
    let mut refused = Vec::new();
    let encoded = guarded(Callback::Encode, || {
        // A run at a time: the frames of one submission are read off its buffer in order and
        // marked in flight together.
        while let Some(unsent) = outbox.unsent() {
            let RunFill { taken, full, error } = fill_run(framing, unsent, buf, bounds, ends);
            outbox.advance(taken);
            if full {
                break;
            }
            if let Some(e) = error {
                if outbox.in_flight() > 0 {
                    // The frames before it go first; it is then first in line.
                    break;
                }
                // The framing accepted the frame at `send` and refuses it now.
                log::debug!("relink[{name}]: the framing refused a queued frame: {e}");
                refused.push(outbox.pop_front().expect("front exists"));
            }
        }
    });
    Filled {
        refused,
        panicked: encoded.err(),
    }
}

/// How the frames of one run went into a batch: how many were encoded, whether the batch is
/// full, and the framing's refusal of the next one, if any.
struct RunFill {
    taken: usize,
    full: bool,
    error: Option<EncodeError>,
}

/// Encodes the frames of one run into `buf` until the batch is full or the framing refuses
/// one. The built-in framings' `encode` is called directly, inlined in the loop, instead of
/// through the box.
fn fill_run(
    framing: &mut BoxedFraming,
    unsent: Unsent<'_>,
    buf: &mut Vec<u8>,
    bounds: Bounds,
    ends: &mut Vec<usize>,
) -> RunFill {
    let any = framing.as_any_mut();
    if let Some(f) = any.downcast_mut::<LengthDelimited>() {
        return fill_run_with(f, unsent, buf, bounds, ends);
    }
    if let Some(f) = any.downcast_mut::<Lines>() {
        return fill_run_with(f, unsent, buf, bounds, ends);
    }
    fill_run_with(&mut **framing, unsent, buf, bounds, ends)
}

fn fill_run_with<F: Framing + ?Sized>(
    framing: &mut F,
    unsent: Unsent<'_>,
    buf: &mut Vec<u8>,
    bounds: Bounds,
    ends: &mut Vec<usize>,
) -> RunFill {
    let mut fill = RunFill {
        taken: 0,
        full: false,
        error: None,
    };
    for frame in unsent.frames() {
        if !buf.is_empty() && buf.len().saturating_add(frame.len()) > bounds.limit {
            fill.full = true;
            break;
        }
        let unacked = bounds.unacked + buf.len() as u64;
        if unacked > 0 && unacked >= bounds.window {
            fill.full = true;
            break;
        }
        let mark = buf.len();
        match framing.encode(frame, buf) {
            Ok(()) => {
                fill.taken += 1;
                ends.push(buf.len());
            }
            Err(e) => {
                buf.truncate(mark);
                fill.error = Some(e);
                break;
            }
        }
    }
    fill
}
