//! What the link tells the application: its states, why it changed, and every frame it gives
//! back.

use std::fmt;

use bytes::Bytes;

use crate::error::LinkError;

pub use crate::core::abandon::AbandonReason;

/// The state of a link. See the crate docs for the diagram.
///
/// # Examples
/// ```
/// use relink::State;
///
/// fn describe(state: State) -> &'static str {
///     match state {
///         State::Ready => "up",
///         State::Connecting | State::Connected => "coming up",
///         State::Backoff | State::Cooldown => "down, retrying",
///         State::Idle | State::Closed => "not running",
///     }
/// }
/// assert_eq!(describe(State::Cooldown), "down, retrying");
/// assert_eq!(State::Backoff.to_string(), "Backoff");
/// ```
/// The crate docs ("States") show every transition between them.
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
    /// Every state, in the order of their numbers.
    pub(crate) const ALL: [State; 7] = [
        State::Idle,
        State::Connecting,
        State::Connected,
        State::Ready,
        State::Backoff,
        State::Cooldown,
        State::Closed,
    ];

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
///
/// # Examples
/// ```
/// use relink::Cause;
///
/// assert_eq!(Cause::PeerClosed.to_string(), "peer-closed");
/// assert!(Cause::HeartbeatTimeout.is_failure()); // counts for the backoff
/// assert!(!Cause::ReconnectNow.is_failure());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// The link was started.
    Start,
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
    /// [`LinkError::Tls`](crate::error::LinkError::Tls) and in the transition's log line. Never
    /// followed by a plaintext attempt.
    Tls,
    /// libzmq could not reach the peer to send (immediate mode, peer gone).
    Unreachable,
    /// Application code run by the link panicked: a predicate, the framing, or the resolver
    /// (then the dial failed). The panic was caught and reported first in an
    /// [`Event::Error`] with [`LinkError::CallbackPanicked`]; the connection was reset and the
    /// link backs off and tries again like after any failure, so the backoff (and
    /// `max_attempts`, Cooldown) bound a callback that panics every time.
    CallbackPanic,
    /// The backoff delay ran out.
    RetryTimer,
    /// The cooldown period ran out.
    CooldownOver,
    /// The application called `reconnect_now`.
    ReconnectNow,
    /// The application closed the link.
    Closed,
    /// The TLS handshake failed in a way no retry can fix until the configuration changes
    /// (on either side): a server certificate not valid for the name, an unknown issuer, an
    /// expired or otherwise bad certificate, or the server refusing ours (a fatal alert such
    /// as `certificate required`; see [`TlsError::is_config`](crate::error::TlsError::is_config)).
    /// The reason is in an [`Event::Error`] with [`LinkError::Tls`](crate::error::LinkError::Tls);
    /// the next attempt waits
    /// [`Reconnect::config_failure_retry`](crate::config::Reconnect::config_failure_retry) (the cooldown
    /// period by default), not the backoff, and
    /// [`Metrics::tls_rejected`](crate::Metrics::tls_rejected) counts it.
    TlsRejected,
    /// The peer refused the link when it opened, for a reason no retry at the usual pace can
    /// fix (the [`Protocol`](crate::protocol::Protocol)'s verdict
    /// [`Verdict::Refused`](crate::protocol::Verdict::Refused): bad credentials, say). The reason is in
    /// an [`Event::Error`] with [`LinkError::Refused`](crate::error::LinkError::Refused); the
    /// next attempt waits [`Reconnect::config_failure_retry`](crate::config::Reconnect::config_failure_retry),
    /// and [`Metrics::handshakes_refused`](crate::Metrics::handshakes_refused) counts it.
    Rejected,
}

impl Cause {
    /// The one-word form used in logs and status lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Start => "start",
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
            Cause::ReconnectNow => "reconnect-now",
            Cause::Closed => "closed",
            Cause::TlsRejected => "tls-rejected",
            Cause::Rejected => "rejected",
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
                | Cause::TlsRejected
        )
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state change, with what the application needs to judge it.
///
/// # Examples
/// The first refused dial:
/// ```
/// use std::time::Duration;
/// use relink::{Cause, Event, Link, State};
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// // Nobody listens on `port`.
/// let endpoint = format!("tcp://127.0.0.1:{port}");
/// let link = Link::builder(&endpoint).reconnect(|r| r.native_retries = 0).build()?;
/// let t = loop {
///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
///         if t.to == State::Backoff { break t; }
///     }
/// };
/// let (from, to, cause, attempt) = (t.from, t.to, t.cause, t.attempt);
/// println!("{from} -> {to} ({cause}), attempt {attempt}, retry in {:?}", t.next_retry);
/// assert_eq!((t.from, t.cause, t.attempt), (State::Connecting, Cause::Refused, 1));
/// assert!(t.cause.is_failure() && t.next_retry.is_some());
/// assert_eq!(t.endpoint, Some(endpoint));
/// link.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// Why.
    pub cause: Cause,
    /// The attempt, as [`Metrics::attempt`](crate::Metrics::attempt) defines it and shows at
    /// the same moment: the ordinal of the latest dial relink made since the last stable
    /// connection (0 when none was made since), native redials not counted.
    pub attempt: u32,
    /// The delay drawn, when `to` is Backoff or Cooldown.
    pub next_retry: Option<std::time::Duration>,
    /// The endpoint dialled or in use (`tcp://10.0.0.7:6379`), when there is one.
    pub endpoint: Option<String>,
}

/// `from -> to (cause)`, as the logs say it.
///
/// # Examples
/// ```
/// # fn show(t: relink::Transition) {
/// println!("{t}"); // Ready -> Backoff (peer-closed)
/// # }
/// ```
impl std::fmt::Display for Transition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {} ({})", self.from, self.to, self.cause)
    }
}

/// What the link sends to the application through [`Link::events`](crate::Link::events).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{Event, Link};
/// use relink::framing::Lines;
/// # use std::io::{Read, Write};
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let port = listener.local_addr()?.port();
/// # std::thread::spawn(move || {
/// #     let (mut s, _) = listener.accept().unwrap();
/// #     let mut buf = [0u8; 1024];
/// #     while let Ok(n) = s.read(&mut buf) {
/// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
/// #     }
/// # });
///
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
///     .framing(Lines::new())
///     .build()?;
/// link.send("hello")?;
/// loop {
///     match link.events().recv_timeout(Duration::from_secs(5))? {
///         Event::Frame(f) => {
///             assert_eq!(f, &b"hello"[..]);
///             break;
///         }
///         Event::State(t) => println!("{} -> {} ({})", t.from, t.to, t.cause),
///         Event::Abandoned { frame, reason } => eprintln!("not sent ({reason}): {frame:?}"),
///         Event::Error(e) => eprintln!("link error: {e}"),
///         _ => {} // more kinds may come
///     }
/// }
/// link.close(Duration::from_millis(100));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A frame from the peer, decoded by the link's [`Framing`](crate::framing::Framing): cut
    /// from the receive buffer, not copied.
    Frame(Bytes),
    /// The link changed state.
    State(Transition),
    /// A frame accepted by `send` that will never be sent, given back.
    Abandoned {
        /// The frame.
        frame: Bytes,
        /// Why.
        reason: AbandonReason,
    },
    /// Something went wrong that the application should know of.
    Error(LinkError),
    /// The peer answered a frame given to `send` with an error, and this is the frame
    /// ([`ReplyKind::Error`](crate::protocol::ReplyKind::Error): confirmed, the peer read it; or
    /// [`ReplyKind::Refused`](crate::protocol::ReplyKind::Refused) under
    /// [`Redelivery::Report`](crate::Redelivery::Report): followed by its
    /// [`Event::Abandoned`] with reason [`Refused`](AbandonReason::Refused)). Told only
    /// while the frame waits for its answer, so under confirmation by reply
    /// ([`Confirm::reply`](crate::Confirm::reply)); under confirmation by TCP the reply is an
    /// [`Event::Frame`].
    ErrorReply {
        /// The frame the peer answered, as given to `send`.
        frame: Bytes,
        /// The peer's answer.
        reply: Bytes,
    },
    /// The link's spool held frames at its start (a spooled link's first event, when it held
    /// any or cut a torn tail): they are sent first, in their order, each then confirmed or
    /// abandoned like any frame.
    Recovered {
        /// Frames recovered, to be sent again.
        frames: u64,
        /// Bytes cut from the spool's files: records torn or corrupt, which failed their
        /// checksum (a power cut in the middle of a write, damage on disk), but not the torn
        /// tail a killed process leaves, which loses nothing.
        cut_bytes: u64,
        /// From the first recovered frame's sequence number to one past the last (frames
        /// that left before the restart leave gaps).
        seqs: std::ops::Range<u64>,
        /// When the machine went down while the spool's last run held it (a power cut, a
        /// kernel crash: told from a process's death by the boot's id, and never after a clean
        /// close): at most this many frames that run numbered were lost with the page cache,
        /// their records never synced. Under [`Durability::Group`](crate::Durability::Group)
        /// they are the frames of about the last interval (the count is a bound: it holds
        /// numbers never handed out too, up to four times an interval's frames, at least 256);
        /// under [`Durability::OsWriteBack`](crate::Durability::OsWriteBack) up to the
        /// 65 536 numbers reserved at a time; under
        /// [`Durability::EveryFrame`](crate::Durability::EveryFrame) none (0). Added to them,
        /// the frames whose records damage on disk took (a segment cut at a record's
        /// boundary or emptied, a corrupt record), each segment's seal saying which numbers
        /// it held; each is reported at one start only.
        lost_at_most: u64,
        /// The numbers those frames had, from the first to one past the last: a receiver
        /// that saw a number in it had its frame (0..0 when `lost_at_most` is 0).
        lost_seqs: std::ops::Range<u64>,
    },
}
