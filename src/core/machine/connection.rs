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

use crate::core::confirm::{Control, Turn, Turns};
use crate::core::framing::BoxedFraming;
use crate::core::guard::{timed, Panicked, Stopwatch};
use crate::core::heartbeat::HeartbeatState;
use crate::core::tls::TlsSession;
use crate::error::Callback;

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
