//! The metrics snapshot: plain data the IO thread fills from its own counters.

use std::net::SocketAddr;
use std::time::Duration;

use crate::event::{AbandonReason, State};

/// Frames abandoned, by reason.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{AbandonReason, Event, Link, SendOptions};
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// // Nobody listens on `port`: nothing is sent.
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
/// link.send_with("late", SendOptions::new().ttl(Duration::from_millis(10)))?;
/// link.send("queued")?;
/// while !matches!(
///     link.events().recv_timeout(Duration::from_secs(5))?,
///     Event::Abandoned { reason: AbandonReason::Expired, .. }
/// ) {}
/// let a = link.close(Duration::from_millis(50)).abandoned;
/// assert_eq!((a.expired, a.shutdown, a.total()), (1, 1, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Abandoned {
    /// Their deadline passed while they waited.
    pub expired: u64,
    /// Dropped by the `DropOldest` policy.
    pub overflow: u64,
    /// Still queued when the link closed.
    pub shutdown: u64,
    /// Queued when a connection dropped, with `abandon_on_disconnect`.
    pub connection_lost: u64,
    /// Refused by the framing's encode after its check accepted them.
    pub unencodable: u64,
    /// Handed to the socket and not confirmed when their connection dropped, with
    /// `Redelivery::Report`, or when the link closed: the peer may have received them.
    pub unconfirmed: u64,
    /// In flight at `max_losses` connection losses in a row.
    pub poison: u64,
    /// Answered with a refusal (not run), with `Redelivery::Report`.
    pub refused: u64,
}

impl Abandoned {
    /// All reasons together.
    pub fn total(&self) -> u64 {
        AbandonReason::ALL.iter().map(|&r| self.get(r)).sum()
    }

    /// The frames abandoned for `reason`.
    ///
    /// # Examples
    /// ```
    /// use relink::{AbandonReason, Abandoned};
    ///
    /// let a = Abandoned::default();
    /// assert_eq!(AbandonReason::ALL.iter().map(|&r| a.get(r)).sum::<u64>(), a.total());
    /// ```
    pub fn get(&self, reason: AbandonReason) -> u64 {
        *self.field(reason)
    }

    fn field(&self, reason: AbandonReason) -> &u64 {
        match reason {
            AbandonReason::Expired => &self.expired,
            AbandonReason::Overflow => &self.overflow,
            AbandonReason::Shutdown => &self.shutdown,
            AbandonReason::ConnectionLost => &self.connection_lost,
            AbandonReason::Unencodable => &self.unencodable,
            AbandonReason::Unconfirmed => &self.unconfirmed,
            AbandonReason::Poison => &self.poison,
            AbandonReason::Refused => &self.refused,
        }
    }

    fn field_mut(&mut self, reason: AbandonReason) -> &mut u64 {
        match reason {
            AbandonReason::Expired => &mut self.expired,
            AbandonReason::Overflow => &mut self.overflow,
            AbandonReason::Shutdown => &mut self.shutdown,
            AbandonReason::ConnectionLost => &mut self.connection_lost,
            AbandonReason::Unencodable => &mut self.unencodable,
            AbandonReason::Unconfirmed => &mut self.unconfirmed,
            AbandonReason::Poison => &mut self.poison,
            AbandonReason::Refused => &mut self.refused,
        }
    }

    /// Counts one more frame abandoned for `reason`.
    pub(crate) fn count(&mut self, reason: AbandonReason) {
        *self.field_mut(reason) += 1;
    }
}

/// Reason by reason: the abandoned frames of several links (as in a pool's
/// [`Totals`](crate::pool::Totals)).
impl std::ops::AddAssign for Abandoned {
    fn add_assign(&mut self, o: Abandoned) {
        for r in AbandonReason::ALL {
            *self.field_mut(r) += o.get(r);
        }
    }
}

/// A snapshot of a link, taken by [`Link::metrics`](crate::Link::metrics).
///
/// The frame counters are exact at the moment of the snapshot: `frames_submitted ==
/// frames_confirmed + frames_unconfirmed + abandoned.total() + frames_rejected +
/// outbox_frames`. `frames_sent` counts hand-offs to the socket, a step on the way (a resent
/// frame is handed over twice).
///
/// # Examples
/// Every frame given to the link is in exactly one counter:
/// ```
/// use std::time::Duration;
/// use relink::Link;
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// // Nobody listens on `port`: frames wait in the outbox.
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .delivery(|d| {
///         d.outbox_frames = 2;
///         d.outbox_bytes = 1024;
///     })
///     .build()?;
/// link.send("a")?;
/// link.send("b")?;
/// assert!(link.send("c").is_err()); // refused: the outbox is full
/// let m = link.metrics();
/// assert_eq!((m.frames_submitted, m.frames_rejected, m.outbox_frames), (3, 1, 2));
/// assert_eq!(m.unaccounted(), 0);
/// let m = link.close(Duration::from_millis(50));
/// assert_eq!((m.abandoned.shutdown, m.outbox_frames, m.frames_confirmed), (2, 0, 0));
/// assert_eq!(m.unaccounted(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
/// [`Link::metrics`](crate::Link::metrics) shows a snapshot of a link that is up.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Metrics {
    /// The state.
    pub state: State,
    /// How long the link has been in it.
    pub time_in_state: Duration,
    /// The attempt: the ordinal of the latest dial relink made since the last stable
    /// connection.
    ///
    /// This is the one meaning of "attempt" everywhere: in [`Transition::attempt`], in the
    /// `attempt=` of log lines and in relink-cat's status lines.
    /// - 1 for the first dial after the start or after a stable connection was lost, 2 for the
    ///   next, and so on; in Backoff or Cooldown it is the dial that failed (the next one will
    ///   be `attempt + 1`).
    /// - 0 when no dial was made since the last stable connection: in Idle, and once a Ready
    ///   connection has lasted `min_stable`.
    /// - libzmq's own fast redials (`native_retries`) are not attempts; they are counted in
    ///   [`native_redials`](Metrics::native_redials).
    /// - The backoff delay grows with it and `max_attempts` counts it.
    ///
    /// [`Transition::attempt`]: crate::Transition::attempt
    pub attempt: u32,
    /// libzmq's own redials (the `native_retries` fast path) since the last stable connection.
    pub native_redials: u32,
    /// Failures in a row since the last stable connection: failed dials, libzmq's own redials
    /// included, and connections lost before they were stable.
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
    /// Frames handed to the socket (a resent frame counts each time); see
    /// [`frames_confirmed`](Metrics::frames_confirmed) for what reached the peer.
    pub frames_sent: u64,
    /// Frame payload bytes handed to the socket.
    pub bytes_sent: u64,
    /// Frames refused at the call (outbox full, link closed).
    pub frames_rejected: u64,
    /// Frames abandoned after they were accepted, by reason.
    pub abandoned: Abandoned,
    /// Frames waiting to be sent (resent ones included); frames handed to the socket and
    /// not yet confirmed are in [`frames_unconfirmed`](Metrics::frames_unconfirmed).
    pub outbox_frames: u64,
    /// Payload bytes waiting to be sent.
    pub outbox_bytes: u64,
    /// Frames received and delivered (or waiting to be) to the application.
    pub frames_received: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Frames the peer's close cut short: the connection ended (FIN, reset, or TLS
    /// close_notify) after the first bytes of a frame and before its last. Each is reported
    /// in a [`LinkError::CutFrame`](crate::error::LinkError::CutFrame) with its length and
    /// never delivered.
    pub frames_cut: u64,
    /// The bytes of those frames.
    pub bytes_cut: u64,
    /// Frames of connections the peer closed that waited for the application longer than
    /// [`closed_frames_wait`](crate::Builder::closed_frames_wait) and were dropped (reported
    /// in a [`LinkError::FramesUnread`](crate::error::LinkError::FramesUnread)); they count in
    /// `frames_received` too, which counts the frames decoded.
    pub frames_unread: u64,
    /// The bytes of those frames.
    pub bytes_unread: u64,
    /// Bytes received and never decoded: relink ended the connection itself (a protocol
    /// error, a heartbeat or handshake verdict, a panic in application code, the close) with
    /// them in its receive buffer, or they came from a connection it had already let go.
    /// What the peer wrote before a close of its own is never among them: it is decoded
    /// first (see [`frames_cut`](Metrics::frames_cut)).
    pub bytes_discarded: u64,
    /// Heartbeat pings sent.
    pub heartbeats_sent: u64,
    /// Heartbeat intervals that passed without a byte from the peer.
    pub heartbeats_missed: u64,
    /// Round trip of the last recognised heartbeat reply.
    pub last_rtt: Option<Duration>,
    /// Whether reading is paused because the application is not taking events.
    pub reading_paused: bool,
    /// Events dropped because the application did not read them: state and error events
    /// first, then [`Event::Abandoned`](crate::Event::Abandoned) events, each with the frame it
    /// carries (that frame stays counted in [`abandoned`](Metrics::abandoned)). A received
    /// frame ([`Event::Frame`](crate::Event::Frame)) is never dropped: reading pauses instead.
    pub events_dropped: u64,
    /// Inputs that had no row in the transition table (ignored, as the contract says).
    pub ignored_inputs: u64,
    /// Panics caught in application code the link ran (predicates, framing, resolver); each
    /// was reported in an `Event::Error` and, unless it came too late to matter, failed the
    /// connection or the dial with cause `callback-panic`.
    pub callback_panics: u64,
    /// Requests handed to the IO thread ([`Link::request`](crate::Link::request) and its
    /// kin; a request refused at the call is not among them): `requests_answered +
    /// requests_failed + requests_outstanding`.
    pub requests_submitted: u64,
    /// Requests answered by their reply.
    pub requests_answered: u64,
    /// Requests that ended without a reply (timed out, abandoned, refused in the IO thread:
    /// see [`RequestError`](crate::error::RequestError)).
    pub requests_failed: u64,
    /// Requests outstanding whose callers wait: queued, written and unanswered, or waiting for
    /// room in the window (those that timed out are in `requests_failed`, and in
    /// `requests_late_held` while they keep their place).
    pub requests_outstanding: u64,
    /// Of those, requests handed to the socket and not yet answered: what a drop now would
    /// fail to their callers ([`Redelivery::Report`](crate::Redelivery::Report)) or write
    /// again ([`Resend`](crate::Redelivery::Resend)).
    pub requests_written: u64,
    /// Of the outstanding requests, those that timed out and still hold their place in the
    /// window until their late reply comes (in order): the window's places they take from
    /// new requests.
    pub requests_late_held: u64,
    /// Late replies (to requests that had timed out) consumed and dropped.
    pub replies_late: u64,
    /// Times the peer refused the link when it opened (the protocol's verdict
    /// [`Verdict::Refused`](crate::protocol::Verdict::Refused)).
    pub handshakes_refused: u64,
    /// Frames the link wrote to answer the peer's own frames (the protocol's
    /// [`Reaction`](crate::protocol::Reaction): a `PONG` to a server's `PING`).
    pub frames_answered: u64,
    /// Barrier pings written to confirm frames by reply
    /// ([`Confirm::reply`](crate::Confirm::reply) under [`Answers::Pings`](crate::protocol::Answers::Pings)).
    pub barriers_sent: u64,
    /// Calls into application code (framing, predicates, resolver) that took at least the
    /// [`slow_callback`](crate::Builder::slow_callback) threshold. The first of each period
    /// was reported in an `Event::Error` with [`LinkError::SlowCallback`].
    ///
    /// [`LinkError::SlowCallback`]: crate::error::LinkError::SlowCallback
    pub slow_callbacks: u64,
    /// The longest of those calls.
    pub slowest_callback: Option<Duration>,
    /// Verdicts on the peer (heartbeat, handshake, TLS handshake, dial bound) that were due
    /// after a gap in which relink itself did not serve the link (the process was stopped, or
    /// a slow callback held its IO thread), and that were given a fresh chance instead.
    pub verdicts_deferred: u64,
    /// How long the link has been without a Ready connection: since it lost its last one (or
    /// since its first failed attempt, if it was never up). `None` while Ready, and before
    /// any failure. A pool's view ranks its links by it.
    pub down_for: Option<Duration>,
    /// TLS handshakes that failed in a way no retry can fix
    /// ([`Cause::TlsRejected`](crate::Cause::TlsRejected): wrong name, unknown issuer, our
    /// certificate refused), each retried after `config_failure_retry`.
    pub tls_rejected: u64,
    /// Frames whose last byte the peer's TCP acknowledged (on a connection whose
    /// acknowledgements could not be read: frames handed to the socket).
    pub frames_confirmed: u64,
    /// Frames handed to the socket and not yet confirmed, now.
    pub frames_unconfirmed: u64,
    /// Frames put back first in the outbox, to be written again, because their connection
    /// dropped before they were confirmed (`Redelivery::Resend`); each counts again in
    /// `frames_sent` when it is written (a deadline may still end it first).
    pub frames_resent: u64,
    /// Answers in their turn that refused a frame ([`ReplyKind::Refused`](crate::protocol::ReplyKind):
    /// not run, to be written again): each refused frame is resent after a pause or reported,
    /// never confirmed.
    pub frames_refused: u64,
    /// Answers dropped because the opening they answered had been taken back for writing
    /// again after the peer said "not yet" ([`Verdict::Retry`](crate::protocol::Verdict)).
    pub replies_dropped: u64,
    /// Answers that could not be their turn's ([`ReplyKind::Unexpected`](crate::protocol::ReplyKind)):
    /// each closed its connection with cause [`Protocol`](crate::Cause::Protocol), and no
    /// caller was handed it.
    pub replies_unexpected: u64,
    /// Answers that only confirmed a frame given to `send`, consumed by the link (not
    /// delivered: [`Delivery::answer_events`](crate::config::Delivery::answer_events) is off).
    pub answers_consumed: u64,
    /// How long ago the oldest unconfirmed frame was handed to the socket.
    pub oldest_unconfirmed: Option<Duration>,
    /// Frames the link's [`Spool`](crate::Spool) held at its start, sent again (each also
    /// counts in `frames_submitted` and ends like any frame).
    pub frames_recovered: u64,
    /// Bytes cut from the spool's files at the start: torn or corrupt records.
    pub spool_bytes_cut: u64,
    /// At most this many frames the spool held were lost with the machine (a power cut, a
    /// kernel crash) or to damage on disk, as its start found (`Event::Recovered`'s
    /// `lost_at_most`).
    pub spool_frames_lost_at_most: u64,
}

impl Metrics {
    /// `submitted − (confirmed + unconfirmed + abandoned + rejected + queued)`: zero in every
    /// snapshot.
    ///
    /// See the example on [`Metrics`].
    pub fn unaccounted(&self) -> i128 {
        self.frames_submitted as i128
            - (self.frames_confirmed as i128
                + self.frames_unconfirmed as i128
                + self.abandoned.total() as i128
                + self.frames_rejected as i128
                + self.outbox_frames as i128)
    }

    pub(crate) fn empty(state: State) -> Metrics {
        Metrics {
            state,
            time_in_state: Duration::ZERO,
            attempt: 0,
            native_redials: 0,
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
            frames_cut: 0,
            bytes_cut: 0,
            frames_unread: 0,
            bytes_unread: 0,
            bytes_discarded: 0,
            heartbeats_sent: 0,
            heartbeats_missed: 0,
            last_rtt: None,
            reading_paused: false,
            events_dropped: 0,
            ignored_inputs: 0,
            callback_panics: 0,
            requests_submitted: 0,
            requests_late_held: 0,
            barriers_sent: 0,
            handshakes_refused: 0,
            frames_answered: 0,
            requests_answered: 0,
            requests_failed: 0,
            requests_outstanding: 0,
            requests_written: 0,
            replies_late: 0,
            slow_callbacks: 0,
            slowest_callback: None,
            verdicts_deferred: 0,
            down_for: None,
            tls_rejected: 0,
            frames_confirmed: 0,
            frames_unconfirmed: 0,
            frames_resent: 0,
            frames_refused: 0,
            replies_dropped: 0,
            replies_unexpected: 0,
            answers_consumed: 0,
            oldest_unconfirmed: None,
            frames_recovered: 0,
            spool_bytes_cut: 0,
            spool_frames_lost_at_most: 0,
        }
    }
}
