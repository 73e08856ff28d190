//! What the link tells the application: its states, why it changed, and every frame it gives
//! back.

use std::fmt;

use crate::error::LinkError;

/// The state of a link. See the crate docs for the diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum State {
    /// Built, not started yet.
    Idle = 0,
    /// Resolving a name or dialling.
    Connecting = 1,
    /// TCP is up; proof of life (first bytes or a handshake reply) not seen yet.
    Connected = 2,
    /// Proven alive: queued frames flow.
    Ready = 3,
    /// Waiting a jittered delay before the next attempt.
    Backoff = 4,
    /// `max_attempts` failures in a row: resting for the cooldown period, then probing.
    Cooldown = 5,
    /// Closed for good.
    Closed = 6,
}

impl State {
    pub(crate) fn from_u8(v: u8) -> State {
        match v {
            0 => State::Idle,
            1 => State::Connecting,
            2 => State::Connected,
            3 => State::Ready,
            4 => State::Backoff,
            5 => State::Cooldown,
            _ => State::Closed,
        }
    }

    /// The state's name as spelled in the API (`"Ready"`).
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "Idle",
            State::Connecting => "Connecting",
            State::Connected => "Connected",
            State::Ready => "Ready",
            State::Backoff => "Backoff",
            State::Cooldown => "Cooldown",
            State::Closed => "Closed",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the state changed. Displayed as one word (`peer-closed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// The link was started.
    Start,
    /// A name is being resolved or an address dialled.
    Dialling,
    /// The TCP connection came up.
    TcpConnected,
    /// Proof of life was seen (or the connect itself is the proof).
    Alive,
    /// The peer refused the connection, or libzmq's dial failed.
    Refused,
    /// The connect (or the name resolution) took longer than `connect_timeout`.
    ConnectTimeout,
    /// The name did not resolve.
    Dns,
    /// The peer closed the connection, or it was reset.
    PeerClosed,
    /// The heartbeat heard nothing for `interval × (max_missed + 1)`.
    HeartbeatTimeout,
    /// The handshake reply did not come in time.
    HandshakeTimeout,
    /// The peer broke the framing or a limit; the connection was reset.
    Protocol,
    /// The TLS handshake failed (unknown issuer, wrong name, expired certificate, an alert
    /// from the peer, a peer that does not speak TLS, no handshake within its timeout), or an
    /// established TLS session broke. The reason is in an [`Event::Error`] with
    /// [`LinkError::Tls`](crate::LinkError::Tls) and in the transition's log line. Never
    /// followed by a plaintext attempt.
    Tls,
    /// libzmq could not reach the peer to send (immediate mode, peer gone).
    Unreachable,
    /// Application code run by the link panicked: a predicate, the codec, or the resolver
    /// (then the dial failed). The panic was caught and reported first in an
    /// [`Event::Error`] with [`LinkError::CallbackPanicked`]; the connection was reset and the
    /// link backs off and tries again like after any failure, so the backoff (and
    /// `max_attempts`, Cooldown) bound a callback that panics every time.
    CallbackPanic,
    /// The backoff delay ran out.
    RetryTimer,
    /// The cooldown period ran out.
    CooldownOver,
    /// `max_attempts` failures in a row.
    AttemptsExhausted,
    /// The application called `reconnect_now`.
    ReconnectNow,
    /// The application closed the link.
    Closed,
}

impl Cause {
    /// The one-word form used in logs and status lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Start => "start",
            Cause::Dialling => "dialling",
            Cause::TcpConnected => "tcp-connected",
            Cause::Alive => "alive",
            Cause::Refused => "refused",
            Cause::ConnectTimeout => "connect-timeout",
            Cause::Dns => "dns",
            Cause::PeerClosed => "peer-closed",
            Cause::HeartbeatTimeout => "heartbeat-timeout",
            Cause::HandshakeTimeout => "handshake-timeout",
            Cause::Protocol => "protocol",
            Cause::Tls => "tls-handshake",
            Cause::Unreachable => "unreachable",
            Cause::CallbackPanic => "callback-panic",
            Cause::RetryTimer => "retry-timer",
            Cause::CooldownOver => "cooldown-over",
            Cause::AttemptsExhausted => "attempts-exhausted",
            Cause::ReconnectNow => "reconnect-now",
            Cause::Closed => "closed",
        }
    }

    /// Whether this cause counts as a failed attempt for the backoff.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Cause::Refused
                | Cause::ConnectTimeout
                | Cause::Dns
                | Cause::PeerClosed
                | Cause::HeartbeatTimeout
                | Cause::HandshakeTimeout
                | Cause::Protocol
                | Cause::Tls
                | Cause::Unreachable
                | Cause::CallbackPanic
        )
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a frame accepted by `send` was never handed to the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AbandonReason {
    /// Its deadline passed while it waited.
    Expired,
    /// The outbox overflowed and the policy is `DropOldest`.
    Overflow,
    /// The link closed before it could be sent.
    Shutdown,
    /// The connection dropped and `abandon_on_disconnect` is set.
    ConnectionLost,
}

impl AbandonReason {
    /// The one-word form.
    pub fn as_str(self) -> &'static str {
        match self {
            AbandonReason::Expired => "expired",
            AbandonReason::Overflow => "overflow",
            AbandonReason::Shutdown => "shutdown",
            AbandonReason::ConnectionLost => "connection-lost",
        }
    }
}

impl fmt::Display for AbandonReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state change, with what the application needs to judge it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// Why.
    pub cause: Cause,
    /// Failed attempts in a row so far, libzmq's own redials included (0 once a connection
    /// proved stable): what the backoff grows with and `max_attempts` counts.
    pub attempt: u32,
    /// The delay drawn, when `to` is Backoff or Cooldown.
    pub next_retry: Option<std::time::Duration>,
    /// The endpoint dialled or in use (`tcp://10.0.0.7:6379`), when there is one.
    pub endpoint: Option<String>,
}

/// What the link sends to the application through [`Link::events`](crate::Link::events).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A frame from the peer, decoded by the codec.
    Frame(Vec<u8>),
    /// The link changed state.
    State(Transition),
    /// A frame accepted by `send` that will never be sent, given back.
    Abandoned {
        /// The frame.
        frame: Vec<u8>,
        /// Why.
        reason: AbandonReason,
    },
    /// Something went wrong that the application should know of.
    Error(LinkError),
}
