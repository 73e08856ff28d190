//! The metrics snapshot: plain data the IO thread fills from its own counters.

use std::net::SocketAddr;
use std::time::Duration;

use crate::event::State;

/// Frames abandoned, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Abandoned {
    /// Their deadline passed while they waited.
    pub expired: u64,
    /// Dropped by the `DropOldest` policy.
    pub overflow: u64,
    /// Still queued when the link closed.
    pub shutdown: u64,
    /// Queued when a connection dropped, with `abandon_on_disconnect`.
    pub connection_lost: u64,
}

impl Abandoned {
    /// All reasons together.
    pub fn total(&self) -> u64 {
        self.expired + self.overflow + self.shutdown + self.connection_lost
    }
}

/// A snapshot of a link, taken by [`Link::metrics`](crate::Link::metrics).
///
/// The frame counters are exact at the moment of the snapshot:
/// `frames_submitted == frames_sent + abandoned.total() + frames_rejected + outbox_frames`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metrics {
    /// The state.
    pub state: State,
    /// How long the link has been in it.
    pub time_in_state: Duration,
    /// Ordinal of the current (or next) connection attempt since the last stable connection:
    /// `consecutive_failures + 1`.
    pub attempt: u32,
    /// Failed attempts in a row, what the backoff grows with and `max_attempts` counts. Every
    /// failed dial counts, libzmq's own redials included.
    pub consecutive_failures: u32,
    /// TCP connections established.
    pub connects: u64,
    /// Times the link came back to Ready after losing a Ready connection.
    pub reconnects: u64,
    /// How long the last outage lasted, from losing Ready to Ready again.
    pub last_outage: Option<Duration>,
    /// Time until the next attempt, in Backoff or Cooldown.
    pub next_retry_in: Option<Duration>,
    /// The address in use or being dialled.
    pub peer_addr: Option<SocketAddr>,
    /// Frames accepted by `send` (and its variants), plus those it refused.
    pub frames_submitted: u64,
    /// Frames handed to the socket.
    pub frames_sent: u64,
    /// Frame payload bytes handed to the socket.
    pub bytes_sent: u64,
    /// Frames refused at the call (outbox full, link closed).
    pub frames_rejected: u64,
    /// Frames abandoned after they were accepted, by reason.
    pub abandoned: Abandoned,
    /// Frames waiting to be sent.
    pub outbox_frames: u64,
    /// Payload bytes waiting to be sent.
    pub outbox_bytes: u64,
    /// Frames received and delivered (or waiting to be) to the application.
    pub frames_received: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Heartbeat pings sent.
    pub heartbeats_sent: u64,
    /// Heartbeat intervals that passed without a byte from the peer.
    pub heartbeats_missed: u64,
    /// Round trip of the last recognised heartbeat reply.
    pub last_rtt: Option<Duration>,
    /// Whether reading is paused because the application is not taking events.
    pub reading_paused: bool,
    /// Events dropped because the application did not read them (frames are never dropped).
    pub events_dropped: u64,
    /// Inputs that had no row in the transition table (ignored, as the contract says).
    pub ignored_inputs: u64,
    /// Panics caught in application code the link ran (predicates, codec, resolver); each
    /// was reported in an `Event::Error` and, unless it came too late to matter, failed the
    /// connection or the dial with cause `callback-panic`.
    pub callback_panics: u64,
}

impl Metrics {
    /// `submitted − (sent + abandoned + rejected + queued)`: zero in every snapshot.
    pub fn unaccounted(&self) -> i128 {
        self.frames_submitted as i128
            - (self.frames_sent as i128
                + self.abandoned.total() as i128
                + self.frames_rejected as i128
                + self.outbox_frames as i128)
    }

    pub(crate) fn empty(state: State) -> Metrics {
        Metrics {
            state,
            time_in_state: Duration::ZERO,
            attempt: 0,
            consecutive_failures: 0,
            connects: 0,
            reconnects: 0,
            last_outage: None,
            next_retry_in: None,
            peer_addr: None,
            frames_submitted: 0,
            frames_sent: 0,
            bytes_sent: 0,
            frames_rejected: 0,
            abandoned: Abandoned::default(),
            outbox_frames: 0,
            outbox_bytes: 0,
            frames_received: 0,
            bytes_received: 0,
            heartbeats_sent: 0,
            heartbeats_missed: 0,
            last_rtt: None,
            reading_paused: false,
            events_dropped: 0,
            ignored_inputs: 0,
            callback_panics: 0,
        }
    }
}
