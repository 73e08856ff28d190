//! The state of one TCP connection, and how it comes up.
//!
//! A [`Connection`] is made when the TCP connection of a dial comes up (`tcp_connected`) and
//! dropped when it goes (`teardown`, `finish`): the machine holds it as `Option<Connection>`,
//! `Some` exactly while the state is Connected or Ready. Nothing in it is reset by hand; the
//! next connection starts from a fresh one.
//!
//! What lives here is meaningless on another connection: the TLS session and the records the
//! socket refused, bytes received and not yet decoded, control frames (hello, pings) encoded
//! for this peer, the heartbeat's clock, whether the handshake reply is awaited, and the
//! bookkeeping of the last `poll_transmit`. What outlives a connection stays on the
//! [`Machine`]: the outbox, the requests and the window (their frames are resent or reported
//! after a loss), the counters, the backoff and its attempt count, the endpoints and the one
//! in use (dialled before a connection exists, named in the failure's log line after it is
//! gone), the timers, and whether the IO side paused reading (a property of the application,
//! not of the peer).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::{Ev, Machine, Timer};
use crate::core::confirm::{Answers, Control, Turn, Turns};
use crate::core::framing::BoxedFraming;
use crate::core::guard::{guarded, timed, Panicked, Stopwatch};
use crate::core::heartbeat::{HeartbeatState, Ping};
use crate::core::settings::ProofOfLife;
use crate::core::tls::TlsSession;
use crate::error::Callback;
use crate::event::{Cause, State};

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
    /// The turns of the last `poll_transmit`, each with where it ends in its plaintext batch.
    pub(super) pending_turns: Vec<(Turn, usize)>,
    /// Since when frames written have had no ping written after them (`Confirm::reply` under
    /// `Answers::Pings`: a barrier is due once this is old enough).
    pub(super) uncovered_since: Option<Instant>,
    /// Where each frame of the last `poll_transmit` ends in its plaintext batch.
    pub(super) pending_ends: Vec<usize>,
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

impl Machine {
    /// The connection carries application bytes (TCP is up, and the TLS handshake has
    /// completed): heartbeat, hello, and the connect as proof of life.
    pub(super) fn link_up(&mut self, now: Instant) {
        let (framing, watch) = (&mut self.framing, self.callbacks.watch());
        let (reset, took) = timed(watch, Callback::Decode, || framing.reset());
        self.took(now, Callback::Decode, took);
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        // With a protocol the heartbeat waits for Ready: no ping before the peer accepted the
        // link (MQTT's PINGREQ before its CONNACK).
        conn.heartbeat = self
            .cfg
            .heartbeat
            .as_ref()
            .filter(|_| self.protocol.is_none())
            .map(|hb| HeartbeatState::start(hb, now, self.read_paused));
        conn.handshake_pending = false;
        let mut panicked = reset.err();
        let mut slowest = Duration::ZERO;
        if let Some(protocol) = self.protocol.as_mut() {
            let opening = match guarded(Callback::Protocol, || protocol.open()) {
                Ok(o) => o,
                Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
            };
            for f in &opening.frames {
                let (encoded, took) =
                    encode(&mut self.framing, self.callbacks.watch(), &self.cfg.name, f);
                slowest = slowest.max(took);
                match encoded {
                    Ok(Some(buf)) => conn.control.push_back((Control::Hello, buf)),
                    Ok(None) => {}
                    Err(p) => {
                        panicked = Some(p);
                        break;
                    }
                }
            }
            conn.handshake_pending = opening.wait;
            self.took(now, Callback::Encode, slowest);
            if let Some(p) = panicked {
                return self.step(now, Ev::CallbackPanicked(p));
            }
            if opening.wait {
                self.timers
                    .arm(Timer::Handshake, now + self.cfg.handshake_timeout);
            } else {
                self.ready(now);
            }
            return;
        }
        if let Some(p) = panicked {
            self.step(now, Ev::CallbackPanicked(p));
        } else if matches!(self.cfg.proof, ProofOfLife::Connect) {
            self.ready(now);
        }
    }

    /// The proof of life came: the connection is Ready, and an outage it ends is recorded.
    pub(super) fn ready(&mut self, now: Instant) {
        self.timers.disarm(Timer::Handshake);
        if self.outage.ended(now, &self.cfg.name) {
            self.c.reconnects += 1;
        }
        if let Some(conn) = &mut self.conn {
            conn.handshake_pending = false;
            if conn.heartbeat.is_none() {
                conn.heartbeat = self
                    .cfg
                    .heartbeat
                    .as_ref()
                    .map(|hb| HeartbeatState::start(hb, now, self.read_paused));
            }
        }
        if self.cfg.min_stable.is_zero() {
            self.dial.stable();
        } else {
            self.timers.arm(Timer::Stable, now + self.cfg.min_stable);
        }
        self.transition(now, State::Ready, Cause::Alive);
    }

    /// The heartbeat's deadlines at `now`: a verdict on a silent peer, or the next ping.
    pub(super) fn heartbeat_due(&mut self, now: Instant) {
        let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) else {
            return;
        };
        if hb.death_at().is_some_and(|t| t <= now) {
            // The interval that ends in the verdict was silent too.
            self.c.heartbeats_missed += 1;
            self.step(now, Ev::HeartbeatDead);
        } else if hb.next_ping() <= now {
            let missed = hb.on_ping(now);
            if missed {
                self.c.heartbeats_missed += 1;
            }
            self.c.heartbeats_sent += 1;
            self.queue_ping(now, true);
        }
        self.barrier_due(now);
    }

    /// Queues the ping ahead of the outbox: the heartbeat's, or (`heartbeat` false) a barrier
    /// whose answer confirms the frames written before it.
    pub(super) fn queue_ping(&mut self, now: Instant, heartbeat: bool) {
        match self.encoded_ping(now) {
            Ok(ping) if ping.is_empty() => {}
            Ok(ping) => {
                if let Some(conn) = &mut self.conn {
                    conn.control.push_back((Control::Ping { heartbeat }, ping));
                    conn.uncovered_since = None;
                }
            }
            Err(p) => self.step(now, Ev::CallbackPanicked(p)),
        }
    }

    /// When a barrier is due: frames confirmed by reply under `Answers::Pings`, written with
    /// no ping after them, for the barrier's age.
    pub(super) fn barrier_at(&self) -> Option<Instant> {
        if !self.window.by_reply() || self.cfg.answers != Answers::Pings {
            return None;
        }
        let since = self.conn.as_ref()?.uncovered_since?;
        Some(since + self.cfg.confirm.barrier_age)
    }

    /// Writes a barrier ping when frames confirmed by reply have waited with no ping after
    /// them for the barrier's age, when their bytes pass its bound, or when a flush waits.
    pub(super) fn barrier_due(&mut self, now: Instant) {
        if self.state != State::Ready || !self.window.by_reply() {
            return;
        }
        if self.cfg.answers != Answers::Pings {
            return;
        }
        let Some(conn) = self.conn.as_ref() else {
            return;
        };
        let Some(newest) = self.window.newest_end() else {
            return;
        };
        if conn.turns.ping_after(newest) || conn.control.iter().any(|(c, _)| *c != Control::Hello) {
            return;
        }
        let covered = conn.turns.last_ping_end().max(self.window.read_to());
        let by_bytes = newest.saturating_sub(covered) >= self.cfg.confirm.barrier_bytes;
        let by_age = self.barrier_at().is_some_and(|t| t <= now);
        if by_bytes || by_age || self.flushes.waits() {
            self.c.barriers += 1;
            self.queue_ping(now, false);
        }
    }

    /// The ping's bytes; empty when there is none, or when the framing refused it.
    pub(super) fn encoded_ping(&mut self, now: Instant) -> Result<Vec<u8>, Panicked> {
        if let Some(protocol) = self.protocol.as_ref() {
            if let Some(f) = guarded(Callback::Protocol, || protocol.ping())? {
                let (ping, took) = encode(
                    &mut self.framing,
                    self.callbacks.watch(),
                    &self.cfg.name,
                    &f,
                );
                self.took(now, Callback::Encode, took);
                return Ok(ping?.unwrap_or_default());
            }
        }
        let (ping, took) = match self.cfg.heartbeat.as_ref().map(|h| &h.ping) {
            Some(Ping::Raw(b)) => return Ok(b.clone()),
            Some(Ping::Frame(f)) => {
                encode(&mut self.framing, self.callbacks.watch(), &self.cfg.name, f)
            }
            None => return Ok(Vec::new()),
        };
        self.took(now, Callback::Encode, took);
        Ok(ping?.unwrap_or_default())
    }
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
