//! The state of one TCP connection, and what it does with it.
//!
//! A [`Connection`] is made when the TCP connection of a dial comes up (`tcp_connected`) and
//! dropped when it goes (`teardown`, `finish`): the machine holds it as `Option<Connection>`,
//! `Some` exactly while the state is Connected or Ready. Nothing in it is reset by hand; the
//! next connection starts from a fresh one.
//!
//! What lives here is meaningless on another connection: the TLS session (feeding it the
//! socket's bytes, sealing a batch) and the records the socket refused, bytes received and not
//! yet decoded, control frames (hello, pings, answers) encoded for this peer and the turns
//! they take, the heartbeat's clock, whether the handshake reply is awaited, and the
//! bookkeeping of the last `poll_transmit`. What outlives a connection is elsewhere on the
//! [`Machine`](super::Machine): the [`Backlog`](super::delivery::Backlog) (its frames are
//! resent or reported after a loss), the counters, the [`Dialer`](super::dial::Dialer) (the
//! backoff, the endpoints and the one in use, dialled before a connection exists and named in
//! the failure's log line after it is gone), the timers, and whether the IO side paused
//! reading (a property of the application, not of the peer).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::core::confirm::{Answers, Control, Turn, Turns};
use crate::core::framing::BoxedFraming;
use crate::core::guard::{timed, Panicked, Stopwatch};
use crate::core::heartbeat::{Heartbeat, HeartbeatState};
use crate::core::protocol::Replies;
use crate::core::tls::{TlsSession, RECORD_PLAINTEXT};
use crate::error::{Callback, TlsError};

/// The per-connection state of a link: made at the TCP connect, dropped with the connection.
#[derive(Debug, Default)]
pub(super) struct Connection {
    /// The TLS session, when the link speaks TLS (its ClientHello waits in it from the start).
    pub(super) tls: Option<TlsSession>,
    /// Ciphertext the socket refused (EAGAIN): sent again as it is, since its records are
    /// numbered and cannot be made again. Its frames stay in flight until then.
    pub(super) tls_retry: Option<Vec<u8>>,
    /// Scratch: an encoded batch on its way into the TLS session.
    pub(super) plain_out: Vec<u8>,
    /// Bytes received and not yet decoded into frames.
    pub(super) rx: BytesMut,
    /// The heartbeat, from the moment the connection carries application bytes.
    pub(super) heartbeat: Option<HeartbeatState>,
    /// The hello went out and the peer's accepted reply has not come yet.
    pub(super) handshake_pending: bool,
    /// Encoded control frames (hello, pings), ahead of the outbox.
    pub(super) control: VecDeque<(Control, Vec<u8>)>,
    /// Control frames of the last `poll_transmit`, until it is answered.
    pub(super) in_flight_control: Vec<(Control, Vec<u8>)>,
    /// What was written and waits for the peer's answer, in the order it answers
    /// (`Answers::EveryFrame` or `Pings`).
    pub(super) turns: Turns,
    /// The turns of the last `poll_transmit`, each with what the protocol said of its answers
    /// and where it ends in its plaintext batch.
    pub(super) pending_turns: Vec<(Turn, Replies, usize)>,
    /// Since when frames written have had no ping written after them (`Confirm::reply` under
    /// `Answers::Pings`: a barrier is due once this is old enough).
    pub(super) uncovered_since: Option<Instant>,
    /// Where each frame of the last `poll_transmit` ends in its plaintext batch.
    pub(super) pending_ends: Vec<usize>,
    /// What the protocol says of the answers of each frame of the last `poll_transmit`, when
    /// the peer answers every frame.
    pub(super) pending_replies: Vec<Replies>,
    /// The pause before the opening is written again after the peer said "not yet"
    /// (`Verdict::Retry`); zero until it first did.
    pub(super) reopen_pause: Duration,
    /// The pause frames wait after a refusal (`ReplyKind::Refused`); zero until the first, and
    /// again once a frame is answered without one.
    pub(super) refusal_pause: Duration,
    /// With TLS, where each record of the last `poll_transmit` ends in its ciphertext: the
    /// record that carries plaintext byte `p` of the batch ends at
    /// `pending_records[p / RECORD_PLAINTEXT]`.
    pub(super) pending_records: Vec<usize>,
    /// Bytes of the last `poll_transmit` (ciphertext, with TLS).
    pub(super) pending_len: usize,
}

impl Connection {
    /// A connection that has just come up, speaking TLS through `tls` when given.
    pub(super) fn new(tls: Option<TlsSession>) -> Connection {
        Connection {
            tls,
            ..Connection::default()
        }
    }

    /// Whether the connection speaks TLS.
    pub(super) fn speaks_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether its TLS handshake is under way.
    pub(super) fn tls_handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(TlsSession::is_handshaking)
    }

    /// The heartbeat `hb`, from `now`, unless one runs already (`paused`: the IO side is not
    /// reading).
    pub(super) fn start_heartbeat(&mut self, hb: Option<&Heartbeat>, now: Instant, paused: bool) {
        if self.heartbeat.is_none() {
            self.heartbeat = hb.map(|hb| HeartbeatState::start(hb, now, paused));
        }
    }

    /// Queues a control frame ahead of the outbox; a ping covers the frames written before
    /// it.
    pub(super) fn queue_control(&mut self, kind: Control, bytes: Vec<u8>) {
        if matches!(kind, Control::Ping { .. }) {
            self.uncovered_since = None;
        }
        self.control.push_back((kind, bytes));
    }

    /// When a barrier is due: `age` after frames were first written with no ping after them.
    pub(super) fn barrier_at(&self, age: Duration) -> Option<Instant> {
        Some(self.uncovered_since? + age)
    }

    /// The bytes up to `newest` (the end of the newest frame written) that no ping covers,
    /// when a barrier would cover them: none is written after it nor queued. Read up to
    /// `read_to`, the peer has answered for them already.
    pub(super) fn uncovered(&self, newest: u64, read_to: u64) -> Option<u64> {
        if self.turns.ping_after(newest) || self.control.iter().any(|(c, _)| *c != Control::Hello) {
            return None;
        }
        let covered = self.turns.last_ping_end().max(read_to);
        Some(newest.saturating_sub(covered))
    }

    /// Begins a batch in `buf` with the control frames queued, each in flight until the batch
    /// is answered, and with the turns they take when the peer's answers are known.
    pub(super) fn take_control(&mut self, answers: Answers, buf: &mut Vec<u8>) {
        self.pending_ends.clear();
        self.pending_turns.clear();
        while let Some((kind, c)) = self.control.pop_front() {
            buf.extend_from_slice(&c);
            let turn = (answers != Answers::Unknown)
                .then(|| kind.turn(answers == Answers::EveryFrame))
                .flatten();
            if let Some(turn) = turn {
                self.pending_turns.push((turn, Replies::One, buf.len()));
            }
            self.in_flight_control.push((kind, c));
        }
    }

    /// The batch of the last `poll_transmit` went out at `now`.
    pub(super) fn sent(&mut self, now: Instant) {
        self.in_flight_control.clear();
        if let Some(hb) = &mut self.heartbeat {
            hb.on_outbound(now);
        }
    }

    /// Where the peer can read up to plaintext byte `end` of the last batch (the end of a
    /// frame or a turn in it), as an offset in the batch's bytes: with TLS, the end of the
    /// record that carries that byte.
    pub(super) fn readable_end(&self, end: usize) -> usize {
        match self.tls {
            None => end,
            Some(_) => self
                .pending_records
                .get(end.saturating_sub(1) / RECORD_PLAINTEXT)
                .map_or(self.pending_len, |&r| r),
        }
    }

    /// The last batch was written at stream offset `base`, its first frame numbered `number`
    /// in the window: each of its turns waits for its answer at its end in the stream, after
    /// the frames of the batch that end before it. When it held frames (`frames`) and no ping
    /// after them covers `newest`, they are uncovered from `now`.
    pub(super) fn turns_written(
        &mut self,
        base: u64,
        number: u64,
        now: Instant,
        frames: bool,
        newest: u64,
    ) {
        let mut pending = std::mem::take(&mut self.pending_turns);
        for &(turn, asked, e) in &pending {
            let end = self.readable_end(e);
            let upto = number + self.pending_ends.partition_point(|&f| f <= e) as u64;
            self.turns.push(turn, base + end as u64, upto, asked);
            if let (Replies::Held(d), Some(hb)) = (asked, self.heartbeat.as_mut()) {
                hb.hold(now.checked_add(d));
            }
        }
        pending.clear();
        self.pending_turns = pending;
        if frames && self.uncovered_since.is_none() && !self.turns.ping_after(newest) {
            self.uncovered_since = Some(now);
        }
    }

    /// Bytes left undecoded, taken out of the receive buffer (the start of a frame whose end
    /// will never come): how many.
    pub(super) fn take_cut(&mut self) -> usize {
        let bytes = self.rx.len();
        self.rx.clear();
        bytes
    }

    /// Socket bytes through the TLS session: handshake records advance it, application
    /// records come out as plaintext appended to `rx`. `None` without TLS.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Option<Fed> {
        let tls = self.tls.as_mut()?;
        let was_handshaking = tls.is_handshaking();
        let before = self.rx.len();
        let result = tls.feed(bytes, &mut self.rx);
        Some(Fed {
            before,
            established: was_handshaking && !tls.is_handshaking() && result.is_ok(),
            peer_closed: tls.peer_closed(),
            result,
        })
    }

    /// The records to write, after EAGAIN: the ones the socket refused, as they are.
    pub(super) fn take_retry(&mut self) -> Option<Vec<u8>> {
        self.tls_retry.take()
    }

    /// The scratch a plaintext batch is built in before it is sealed.
    pub(super) fn take_plain(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.plain_out)
    }

    /// Seals the plaintext batch `plain` (or with `batch` false, only the session's own
    /// records, as while handshaking) into `buf`, noting where each record ends; `plain` is
    /// kept as the scratch of the next batch. `None` without TLS.
    pub(super) fn seal(
        &mut self,
        mut plain: Vec<u8>,
        batch: bool,
        buf: &mut Vec<u8>,
    ) -> Option<Result<(), TlsError>> {
        let tls = self.tls.as_mut()?;
        self.pending_records.clear();
        let sealed = if batch {
            tls.seal(&plain, buf, &mut self.pending_records)
        } else {
            tls.take_ciphertext(buf);
            Ok(())
        };
        plain.clear();
        self.plain_out = plain;
        Some(sealed)
    }

    /// The control frames of the last `poll_transmit` go first in line again.
    pub(super) fn requeue_control(&mut self) {
        for c in self.in_flight_control.drain(..).rev() {
            self.control.push_front(c);
        }
    }

    /// The TLS close_notify of an established session, as records to write; none while
    /// handshaking or while sealed records wait (it would be out of sequence).
    pub(super) fn close_notify(self) -> Option<Vec<u8>> {
        let mut tls = self.tls?;
        if tls.is_handshaking() || self.tls_retry.is_some() {
            return None;
        }
        tls.close_notify();
        let mut bytes = Vec::new();
        tls.take_ciphertext(&mut bytes);
        (!bytes.is_empty()).then_some(bytes)
    }
}

/// What the TLS session made of socket bytes.
#[derive(Debug)]
pub(super) struct Fed {
    /// The length of the receive buffer before: its plaintext comes after.
    pub(super) before: usize,
    /// The handshake completed with these bytes.
    pub(super) established: bool,
    /// The peer has sent its close_notify.
    pub(super) peer_closed: bool,
    /// A failure of the session.
    pub(super) result: Result<(), TlsError>,
}

/// One control frame (a hello frame, the ping) through the framing, guarded: the framing may
/// be application code. `None` when the framing refuses it (`build()` checked it, so only a
/// framing whose `check` and `encode` disagree does).
pub(super) fn encode(
    framing: &mut BoxedFraming,
    watch: &dyn Stopwatch,
    name: &str,
    frame: &[u8],
) -> (Result<Option<Vec<u8>>, Panicked>, Duration) {
    timed(watch, Callback::Encode, || {
        let mut buf = Vec::new();
        match framing.encode(frame, &mut buf) {
            Ok(()) => Some(buf),
            Err(e) => {
                log::warn!("relink[{name}]: the framing refused a control frame: {e}");
                None
            }
        }
    })
}
