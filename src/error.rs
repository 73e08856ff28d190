//! Error types, one per concern: configuration, sending, receiving events, the wire format and
//! the link itself.

use std::time::Duration;

use crate::core::abandon::AbandonReason;
use crate::core::batch::Batch;

/// A configuration that [`Builder::build`](crate::Builder::build) refuses.
///
/// Every check is made once, in `build()`; a link that was built never fails for a
/// configuration reason later.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::error::ConfigError;
///
/// let err = Link::builder("tcp://127.0.0.1:6379")
///     .reconnect(|r| {
///         r.backoff_base = Duration::from_secs(5);
///         r.backoff_max = Duration::from_secs(1);
///     })
///     .build()
///     .unwrap_err();
/// assert_eq!(err, ConfigError::MaxBelowBase {
///     base: Duration::from_secs(5),
///     max: Duration::from_secs(1),
/// });
/// assert_eq!(err.to_string(), "backoff max (1s) is below its base (5s)");
///
/// let err = Link::builder("udp://localhost:6379").build().unwrap_err();
/// assert_eq!(err.to_string(), "bad endpoint \"udp://localhost:6379\": only tcp:// is supported");
///
/// let err = Link::builder("tcp://127.0.0.1:6379").delivery(|d| { d.outbox_frames = 0; d.outbox_bytes = 1024; }).build();
/// assert_eq!(err.unwrap_err(), ConfigError::ZeroLimit { name: "outbox frames" });
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The endpoint is not `tcp://host:port` nor `host:port` (host a name, an IPv4 literal or a
    /// bracketed IPv6 literal; port 1–65535).
    #[error("bad endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The builder was given an empty list of endpoints.
    #[error("no endpoint given")]
    NoEndpoint,
    /// A duration that must be positive is zero.
    #[error("{name} must be greater than zero")]
    ZeroDuration {
        /// The setting, as named in the builder.
        name: &'static str,
    },
    /// A count or size that must be positive is zero.
    #[error("{name} must be greater than zero")]
    ZeroLimit {
        /// The setting, as named in the builder.
        name: &'static str,
    },
    /// A value is above what libzmq or the wire format can carry.
    #[error("{name} is {value}, above the largest allowed {max}")]
    TooLarge {
        /// The setting, as named in the builder.
        name: &'static str,
        /// The value given.
        value: u128,
        /// The largest value allowed.
        max: u128,
    },
    /// The backoff's maximum delay is below its base delay.
    #[error("backoff max ({max:?}) is below its base ({base:?})")]
    MaxBelowBase {
        /// The base delay.
        base: Duration,
        /// The maximum delay.
        max: Duration,
    },
    /// The backoff's floor is above its maximum delay.
    #[error("backoff floor ({floor:?}) is above its max ({max:?})")]
    FloorAboveMax {
        /// The floor.
        floor: Duration,
        /// The maximum delay.
        max: Duration,
    },
    /// The backoff factor is below 1 or not a finite number.
    #[error("backoff factor {0} must be a finite number of at least 1")]
    BadFactor(f64),
    /// Proportional jitter outside `(0, 1]`, or not a finite number.
    #[error("jitter fraction {0} must be in (0, 1]")]
    JitterOutOfRange(f64),
    /// The heartbeat ping is empty (and no protocol gives one: `Heartbeat::every`).
    #[error("the heartbeat ping is empty")]
    EmptyPing,
    /// A hello frame or the heartbeat ping cannot be encoded by the framing.
    #[error("{what} cannot be encoded: {source}")]
    Unencodable {
        /// Which frame: `"opening frame"`, `"protocol ping"` or `"heartbeat ping"`.
        what: &'static str,
        /// Why the framing refuses it.
        source: EncodeError,
    },
    /// A heartbeat reply predicate or a protocol was set with a framing that does not cut the
    /// byte stream into the peer's frames (raw chunks): a reply must be a whole decoded frame,
    /// or application bytes glued to it would be taken for it.
    #[error("{what} needs a framing that delimits frames; {framing} does not")]
    ReplyNeedsFraming {
        /// `"heartbeat reply"` or `"protocol"`.
        what: &'static str,
        /// The framing's name.
        framing: String,
    },
    /// The settings of what the peer answers and what confirms a frame contradict each other,
    /// or leave it ambiguous which inbound frame answers a ping and which a request. The
    /// message says which settings and what to change.
    #[error("ambiguous answers: {0}")]
    Answers(&'static str),
    /// libzmq refused the socket or the context it was asked to make.
    #[error("libzmq: {0}")]
    Zmq(String),
    /// The TLS settings cannot be used (a PEM file, a key, the server name).
    #[error("tls: {0}")]
    Tls(#[from] TlsConfigError),
    /// The process has no room for another link: the libzmq context's socket limit (three
    /// sockets per link), the open-file limit (about four descriptors per link), or a thread
    /// or descriptor an IO thread needs. The message says which.
    #[error("no room for another link: {0}")]
    NoRoom(String),
    /// A framing setting that cannot work: a length field width other than 1, 2, 3, 4 or 8,
    /// an empty delimiter, bytes to skip past the length field, and the like.
    #[error("bad framing setting {setting}: {reason}")]
    BadFraming {
        /// The setting, as named in the framing's builder.
        setting: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The spool ([`Builder::spool`](crate::Builder::spool)) cannot be used: its directory is
    /// in use by another link or process, was written in another format, holds files of
    /// something else, or cannot be read or written. The message says which.
    #[error("spool: {0}")]
    Spool(String),
}

/// Why a framing refuses to encode a frame: what [`Framing::encode`](crate::framing::Framing::encode)
/// and [`Framing::check`](crate::framing::Framing::check) return, and what `send` hands back
/// with the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The frame is longer than the framing's limit.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The frame's length.
        len: usize,
        /// The framing's limit.
        max: usize,
    },
    /// The lines framing was given a frame that contains a `\n`.
    #[error("a line frame must not contain a newline")]
    ContainsNewline,
    /// The raw framing was given an empty frame (an empty write would close the connection).
    #[error("an empty frame cannot be sent raw")]
    Empty,
    /// A delimited framing was given a frame that contains its delimiter (or that would form
    /// one with the delimiter written after it).
    #[error("a delimited frame must not contain its delimiter")]
    ContainsDelimiter,
    /// The frame is shorter than the framing can write: a length-delimited frame shorter than
    /// its length field offset, or than a positive length adjustment.
    #[error("frame of {len} bytes is below the minimum of {min}")]
    TooShort {
        /// The frame's length.
        len: usize,
        /// The shortest frame the framing can write.
        min: usize,
    },
    /// The frame does not have the form the framing requires (for RESP: a frame that starts
    /// with `*` but is not exactly one complete array, or an inline command with no word).
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// A command whose answers the link cannot follow on a connection it keeps (redis'
    /// `CLIENT REPLY OFF` or `SKIP`, which take away the answers that match replies to
    /// frames, and `QUIT`, which ends the connection): refused at the call, with the reason
    /// and what to do instead.
    #[error("command refused: {0}")]
    Unsupported(&'static str),
}

/// What the peer sent that the framing cannot accept: what
/// [`Framing::decode`](crate::framing::Framing::decode) returns. The connection is reset when
/// it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The peer announced, or sent, a frame longer than the framing's limit: a length field
    /// above `max_frame_length` (or one no frame can have: the sum of header, length and
    /// adjustment past what memory can hold), a RESP value above `max_frame`.
    #[error("peer announced a frame of {len} bytes, above the limit of {max}")]
    FrameTooLarge {
        /// The announced length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A line (or a delimited frame) grew past its limit without a delimiter.
    #[error("peer sent a line longer than {max} bytes")]
    LineTooLong {
        /// The limit.
        max: usize,
    },
    /// The peer's bytes do not follow the framing: an overlong or too long varint, a length
    /// below the length adjustment, a RESP value that breaks the protocol or nests too deep.
    #[error("peer broke the framing: {0}")]
    Malformed(&'static str),
    /// More bytes of one incomplete frame arrived than the framing's
    /// [`max_buffered`](crate::framing::Framing::max_buffered) allows.
    #[error("peer sent {buffered} bytes of an incomplete frame, above the limit of {max}")]
    Overbuffered {
        /// The bytes buffered.
        buffered: usize,
        /// The limit.
        max: usize,
    },
}

/// A frame refused by [`Link::send`](crate::Link::send) and its variants; the frame is given
/// back as the [`Bytes`](bytes::Bytes) handle it was passed in (no copy).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::error::SendError;
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// // Nobody listens on `port`: frames wait in the outbox.
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .delivery(|d| {
///         d.outbox_frames = 1;
///         d.outbox_bytes = 1024;
///     })
///     .build()?;
/// link.send("first")?;
/// match link.send("second") {
///     Err(SendError::Full(frame)) => assert_eq!(frame, &b"second"[..]), // keep it, try later
///     other => panic!("{other:?}"),
/// }
/// link.close(Duration::from_millis(50));
/// let err = link.send("third").unwrap_err();
/// assert_eq!(err.to_string(), "link closed");
/// assert_eq!(err.into_inner(), &b"third"[..]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The outbox is at its limit (frames or bytes) and the overflow policy is `RejectNew`,
    /// or the call said [`SendOptions::no_wait`](crate::SendOptions::no_wait), or a `Block`
    /// wait ran out.
    #[error("outbox full")]
    Full(bytes::Bytes),
    /// The link is closed or closing.
    #[error("link closed")]
    Closed(bytes::Bytes),
    /// The framing cannot encode this frame.
    #[error("frame refused: {1}")]
    Invalid(bytes::Bytes, EncodeError),
    /// The link's spool could not take the frame: a write error (a full disk, an I/O error),
    /// or a call a spooled link does not offer ([`Producer`](crate::Producer)). Nothing of the
    /// frame stays in the spool or the outbox.
    #[error("spool: {1}")]
    Spool(bytes::Bytes, String),
}

impl SendError {
    /// The frame that was not sent.
    pub fn into_inner(self) -> bytes::Bytes {
        match self {
            SendError::Full(f)
            | SendError::Closed(f)
            | SendError::Invalid(f, _)
            | SendError::Spool(f, _) => f,
        }
    }
}

/// Frames of a batch refused by [`Link::send_batch`](crate::Link::send_batch) or
/// [`Link::send_batch_async`](crate::Link::send_batch_async); the refused frames are given
/// back, and the frames before them were accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The outbox reached its limit: the first `accepted` frames were queued, the rest did not
    /// fit (policy `RejectNew`, or a `Block` wait ran out).
    #[error("outbox full: {accepted} frames accepted, {} refused", rest.len())]
    Full {
        /// Frames of the batch that were queued.
        accepted: usize,
        /// The frames refused, in order.
        rest: Batch,
    },
    /// The link is closed or closing: the first `accepted` frames were queued before it
    /// closed, the rest were refused.
    #[error("link closed: {accepted} frames accepted, {} refused", rest.len())]
    Closed {
        /// Frames of the batch that were queued.
        accepted: usize,
        /// The frames refused, in order.
        rest: Batch,
    },
    /// The link's spool could not take the frames (a write error): the first `accepted` were
    /// queued, the rest were refused.
    #[error("spool: {error}: {accepted} frames accepted, {} refused", rest.len())]
    Spool {
        /// Frames of the batch that were queued.
        accepted: usize,
        /// The frames refused, in order.
        rest: Batch,
        /// What went wrong.
        error: String,
    },
    /// The framing cannot encode the frame at `index`: the whole batch is refused, unsent.
    #[error("frame {index} of the batch refused: {error}")]
    Invalid {
        /// The batch, as given.
        batch: Batch,
        /// The first frame the framing refuses.
        index: usize,
        /// Why it refuses it.
        error: EncodeError,
    },
}

impl BatchError {
    /// How many frames of the batch were accepted.
    pub fn accepted(&self) -> usize {
        match self {
            BatchError::Full { accepted, .. }
            | BatchError::Closed { accepted, .. }
            | BatchError::Spool { accepted, .. } => *accepted,
            BatchError::Invalid { .. } => 0,
        }
    }

    /// The frames that were not accepted, in order.
    pub fn into_inner(self) -> Batch {
        match self {
            BatchError::Full { rest, .. }
            | BatchError::Closed { rest, .. }
            | BatchError::Spool { rest, .. } => rest,
            BatchError::Invalid { batch, .. } => batch,
        }
    }
}

/// Something that went wrong on the link and is reported in an [`Event::Error`](crate::Event).
///
/// # Examples
/// A peer that breaks the framing:
/// ```
/// use std::time::Duration;
/// use relink::{Cause, Event, Link};
/// use relink::error::LinkError;
/// use relink::framing::{LengthDelimited, DecodeError};
/// # use std::io::{Read, Write};
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let port = listener.local_addr()?.port();
/// # std::thread::spawn(move || {
/// #     let (mut s, _) = listener.accept().unwrap();
/// #     s.write_all(&[0xff; 4]).unwrap();
/// #     let _ = s.read(&mut [0u8; 1]); // until the link resets the connection
/// # });
///
/// // The server on `port` announces a frame of 4 GiB.
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .framing(LengthDelimited::builder().max_frame_length(1024).build()?)
///     .build()?;
/// let err = loop {
///     if let Event::Error(e) = link.events().recv_timeout(Duration::from_secs(5))? {
///         break e;
///     }
/// };
/// let too_large = DecodeError::FrameTooLarge { len: u32::MAX as u64, max: 1024 };
/// assert_eq!(err, LinkError::Decode(too_large));
/// // The connection was reset and counts as a failure.
/// match link.events().recv_timeout(Duration::from_secs(5))? {
///     Event::State(t) => assert_eq!(t.cause, Cause::Protocol),
///     other => panic!("{other:?}"),
/// }
/// link.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The peer broke the framing; the connection was reset.
    #[error("peer broke the framing: {0}")]
    Decode(#[from] DecodeError),
    /// A libzmq call failed where it should not have.
    #[error("libzmq {call}: {message}")]
    Zmq {
        /// The call that failed.
        call: &'static str,
        /// libzmq's message.
        message: String,
    },
    /// Events could not be delivered because the application did not read them; this many
    /// were dropped (their frames are still counted in the metrics).
    #[error("{0} events dropped: the application is not reading events")]
    EventsDropped(u64),
    /// The peer refused the link when it opened (the [`Protocol`](crate::protocol::Protocol)'s verdict
    /// [`Verdict::Refused`](crate::protocol::Verdict::Refused)): the attempt fails with
    /// [`Cause::Rejected`](crate::Cause::Rejected) and the next waits
    /// [`Reconnect::config_failure_retry`](crate::config::Reconnect::config_failure_retry).
    #[error("the peer refused the link: {reason}")]
    Refused {
        /// The protocol's reason.
        reason: String,
    },
    /// A TLS handshake failed (the attempt fails with [`Cause::Tls`](crate::Cause::Tls)), or
    /// an established TLS session broke (a bad record, a fatal alert from the peer).
    #[error("tls: {0}")]
    Tls(TlsError),
    /// Application code that relink runs (a predicate, the resolver, a framing) panicked. The
    /// panic was caught where the code was called and counted as a failure of the connection:
    /// the link resets it, backs off and tries again (see [`Cause::CallbackPanic`]).
    ///
    /// [`Cause::CallbackPanic`]: crate::Cause::CallbackPanic
    #[error("{callback} panicked{}", message_suffix(.message))]
    CallbackPanicked {
        /// What panicked.
        callback: Callback,
        /// The panic message, when the panic's payload is a string (`panic!("boom")`);
        /// `None` for any other payload (`std::panic::panic_any(42)`).
        message: Option<String>,
    },
    /// The link's IO thread stopped on a panic in relink itself. The link is Closed: sends are
    /// refused, blocked callers return, and the event stream ends after this event.
    #[error("the IO thread stopped on a panic{}", message_suffix(.message))]
    IoThreadPanicked {
        /// The panic message, when the payload is a string.
        message: Option<String>,
    },
    /// Application code the link runs (the framing, a predicate, the resolver) took at least
    /// the [`slow_callback`](crate::Builder::slow_callback) threshold. On the IO thread that
    /// time was taken from every link of the thread (the verdicts on their peers are put off,
    /// not given). Reported once per link per period (10 s); every one is counted in
    /// [`Metrics::slow_callbacks`](crate::Metrics::slow_callbacks).
    #[error("{callback} was slow: it took {took:?}")]
    SlowCallback {
        /// What was slow.
        callback: Callback,
        /// How long the call took.
        took: Duration,
    },
    /// A TLS credentials file (CA, client certificate or key) changed and cannot be used
    /// (unreadable, bad PEM, a key that does not match the certificate, a file half-written):
    /// the link keeps the last good credentials and reads the files again when they change
    /// next. Reported once per change, at the next connection.
    #[error("new tls credentials refused, the last good ones stay: {0}")]
    TlsCredentials(TlsConfigError),
    /// The peer closed the connection in the middle of a frame: the first `bytes` bytes of
    /// it arrived, its end never will. The frame is not delivered; every frame before it
    /// was. Reported just before the state change that says the connection is gone, and
    /// counted in [`Metrics::frames_cut`](crate::Metrics::frames_cut).
    #[error("the peer closed in the middle of a frame: {bytes} bytes of it never delivered")]
    CutFrame {
        /// The bytes of the cut frame that arrived (for a TLS link, decrypted bytes).
        bytes: usize,
    },
    /// Frames of a connection the peer closed waited longer than
    /// [`closed_frames_wait`](crate::Builder::closed_frames_wait) for the application to
    /// take them and were dropped: `frames` frames, `bytes` bytes in all. Reported in their
    /// place in the event stream, and counted in
    /// [`Metrics::frames_unread`](crate::Metrics::frames_unread).
    #[error("{frames} frames ({bytes} bytes) of a closed connection dropped: the application did not take them in time")]
    FramesUnread {
        /// Frames dropped.
        frames: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// The link's spool ([`Builder::spool`](crate::Builder::spool)) could not write to its
    /// directory (a full disk, an I/O error): `writable` is false and `message` says why.
    /// While it cannot, the sends that must write are refused with [`SendError::Spool`] and
    /// the record of confirmed frames waits to be written (retried). Once a write succeeds
    /// again, a second event says so (`writable` true).
    #[error("spool {}: {message}", if *writable { "writable again" } else { "cannot write" })]
    Spool {
        /// Whether the spool writes again.
        writable: bool,
        /// What failed, or what succeeded again.
        message: String,
    },
}

fn message_suffix(message: &Option<String>) -> String {
    match message {
        Some(m) => format!(": {m}"),
        None => String::new(),
    }
}

/// Application code that relink runs on its own threads, named in
/// [`LinkError::CallbackPanicked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Callback {
    /// The heartbeat's reply predicate ([`Heartbeat::reply`](crate::Heartbeat::reply)).
    HeartbeatReply,
    /// The resolver closure ([`Builder::resolver`](crate::Builder::resolver)).
    Resolver,
    /// The framing, decoding what the peer sent.
    Decode,
    /// The framing, encoding a frame (a queued frame, a hello frame or the heartbeat ping).
    Encode,
    /// The request correlation's code, telling replies apart
    /// ([`Correlation`](crate::protocol::Correlation)).
    Correlation,
    /// The link's [`Protocol`](crate::protocol::Protocol): its opening, verdict, reaction, ping or
    /// resend mark.
    Protocol,
}

impl Callback {
    /// How the callback is named in messages (`"heartbeat reply predicate"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Callback::HeartbeatReply => "heartbeat reply predicate",
            Callback::Resolver => "resolver",
            Callback::Decode => "framing decoder",
            Callback::Encode => "framing encoder",
            Callback::Correlation => "request correlation",
            Callback::Protocol => "protocol",
        }
    }
}

impl std::fmt::Display for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a TLS handshake or session failed. A handshake failure fails the connection attempt
/// with its own cause; the link never falls back to plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The server's certificate is not signed by any trusted root.
    #[error("server certificate has an unknown issuer")]
    UnknownIssuer,
    /// The server's certificate is valid, but not for the name the link expects.
    #[error("server certificate is not valid for {expected:?}{}", presented_names(.presented))]
    WrongName {
        /// The server name the link checks (its endpoint's host or `Tls::server_name`).
        expected: String,
        /// The names the certificate is valid for, when known.
        presented: Vec<String>,
    },
    /// The server's certificate has expired.
    #[error("server certificate has expired")]
    Expired,
    /// Another problem with the server's certificate (not yet valid, revoked, bad signature,
    /// wrong usage, …), described.
    #[error("bad server certificate: {0}")]
    BadCertificate(String),
    /// The peer sent a fatal alert, described (`"handshake failure"`, `"certificate
    /// required"`, …): it refused the handshake, for instance a server that requires a client
    /// certificate.
    #[error("tls alert from peer: {0}")]
    Alert(String),
    /// The peer sent bytes that are not TLS: a plaintext server, or garbage.
    #[error("peer does not speak tls")]
    NotTls,
    /// The handshake did not complete within
    /// [`Tls::handshake_timeout`](crate::Tls::handshake_timeout): a stopped server, or one
    /// that waits for something else.
    #[error("handshake did not complete within {0:?}")]
    HandshakeTimeout(std::time::Duration),
    /// Any other TLS failure, described.
    #[error("tls: {0}")]
    Other(String),
}

impl TlsError {
    /// Whether the failure is one a retry cannot fix until a certificate, a key, a trusted
    /// root or the server name changes: the server's certificate (unknown issuer, wrong
    /// name, expired, otherwise bad), or a fatal alert by which the server refused the
    /// handshake for what the link offered (`certificate required`, `bad certificate`,
    /// `unknown ca`, `access denied`, `handshake failure`, ...). A link reports these with
    /// [`Cause::TlsRejected`](crate::Cause::TlsRejected) and retries them slowly; the other
    /// failures (a stopped server, a peer that is not TLS, a broken record) with
    /// [`Cause::Tls`](crate::Cause::Tls) at the backoff.
    ///
    /// # Examples
    /// ```
    /// use relink::error::TlsError;
    ///
    /// assert!(TlsError::UnknownIssuer.is_config());
    /// assert!(TlsError::Alert("certificate required".into()).is_config());
    /// assert!(!TlsError::NotTls.is_config());
    /// ```
    pub fn is_config(&self) -> bool {
        match self {
            TlsError::UnknownIssuer
            | TlsError::WrongName { .. }
            | TlsError::Expired
            | TlsError::BadCertificate(_) => true,
            TlsError::Alert(alert) => REFUSING_ALERTS.contains(&alert.as_str()),
            TlsError::NotTls | TlsError::HandshakeTimeout(_) | TlsError::Other(_) => false,
        }
    }
}

/// Fatal alerts (as [`TlsError::Alert`] spells them) by which a server refuses what the link
/// offered: they repeat on every attempt until the configuration changes.
const REFUSING_ALERTS: &[&str] = &[
    "certificate required",
    "bad certificate",
    "unsupported certificate",
    "certificate revoked",
    "certificate expired",
    "certificate unknown",
    "unknown ca",
    "access denied",
    "handshake failure",
    "insufficient security",
    "protocol version",
    "no application protocol",
    "unrecognised name",
];

fn presented_names(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (it is for {})", names.join(", "))
    }
}

/// TLS settings that [`Builder::build`](crate::Builder::build) refuses, inside
/// [`ConfigError::Tls`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// The endpoint is an IP address and no [`Tls::server_name`](crate::Tls::server_name) was given.
    #[error("endpoint host {host} is an IP address: set Tls::server_name (a DNS name, or the IP to check against the certificate)")]
    ServerNameRequired {
        /// The endpoint's host.
        host: String,
    },
    /// The server name is neither a valid DNS name nor an IP address.
    #[error("bad server name {0:?}")]
    BadServerName(String),
    /// A certificate or key file cannot be read.
    #[error("cannot read {what}: {reason}")]
    Unreadable {
        /// Which file, and what it was for.
        what: String,
        /// The system's error.
        reason: String,
    },
    /// A PEM text is malformed.
    #[error("bad PEM in {what}: {reason}")]
    BadPem {
        /// Which PEM, and what it was for.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A PEM text that must hold certificates holds none.
    #[error("no certificate in {what}")]
    NoCertificate {
        /// Which PEM, and what it was for.
        what: String,
    },
    /// The client key's PEM holds no private key.
    #[error("no private key in {what}")]
    NoKey {
        /// Which PEM.
        what: String,
    },
    /// A CA certificate cannot be used as a trust root.
    #[error("CA certificate in {what} cannot be used: {reason}")]
    BadCaCertificate {
        /// Which PEM.
        what: String,
        /// Why.
        reason: String,
    },
    /// No root is trusted: [`Tls::web_roots`](crate::Tls::web_roots) was turned off and no CA was given.
    #[error("no trust roots: web roots are off and no CA was given")]
    NoTrustRoots,
    /// The client key does not belong to the client certificate.
    #[error("the client key does not match the client certificate")]
    KeyMismatch,
    /// The client certificate or key cannot be used, described.
    #[error("client certificate: {0}")]
    BadClientAuth(String),
    /// rustls refused the configuration, described.
    #[error("{0}")]
    Rustls(String),
    /// [`Tls::system_roots`](crate::Tls::system_roots) was asked for and the system's
    /// certificate store gave no usable certificate, with what went wrong reading it.
    #[error("no certificate in the system's store: {0}")]
    NoSystemRoots(String),
}

/// [`Events::recv`](crate::Events::recv) found the link closed and every event taken.
///
/// # Examples
/// See [`Events::recv`](crate::Events::recv).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("receiving on an empty and disconnected channel")]
pub struct RecvError;

/// Why [`Events::try_recv`](crate::Events::try_recv) returned no event.
///
/// # Examples
/// See [`Events::try_recv`](crate::Events::try_recv).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// No event is waiting now; the link is open.
    #[error("receiving on an empty channel")]
    Empty,
    /// The link is closed and every event was taken.
    #[error("receiving on an empty and disconnected channel")]
    Disconnected,
}

/// Why [`Events::recv_timeout`](crate::Events::recv_timeout) or
/// [`Events::recv_deadline`](crate::Events::recv_deadline) returned no event.
///
/// # Examples
/// See [`Events::recv_timeout`](crate::Events::recv_timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvTimeoutError {
    /// No event came before the timeout or deadline; the link is open.
    #[error("timed out waiting on receive operation")]
    Timeout,
    /// The link is closed and every event was taken.
    #[error("channel is empty and disconnected")]
    Disconnected,
}

/// Why a request ([`Link::request`](crate::Link::request) and its variants) got no reply.
/// Every request ends in exactly one outcome: its reply, or one of these.
///
/// # Examples
/// ```
/// use relink::AbandonReason;
/// use relink::error::RequestError;
///
/// let lost = RequestError::Abandoned(AbandonReason::ConnectionLost);
/// assert!(lost.may_have_been_processed());
/// assert_eq!(lost.to_string(), "request abandoned: connection-lost");
/// let full = RequestError::Full(relink::bytes::Bytes::from_static(b"GET k"));
/// assert!(!full.may_have_been_processed());
/// assert_eq!(full.into_frame().as_deref(), Some(&b"GET k"[..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request was written and no reply came before its deadline (counted from the call):
    /// the peer may have processed it. In order, its late reply is dropped when it comes.
    #[error("no reply before the deadline")]
    TimedOut,
    /// The request ended without a reply: [`Expired`](AbandonReason::Expired) (its deadline
    /// passed before it was written: not processed), [`ConnectionLost`](AbandonReason::ConnectionLost)
    /// (written, then its connection dropped, under [`Redelivery::Report`](crate::Redelivery):
    /// it may have been processed), [`Overflow`](AbandonReason::Overflow) (pushed out of the
    /// window unsent by `Overflow::DropOldest`) or [`Shutdown`](AbandonReason::Shutdown) (the
    /// link closed first).
    #[error("request abandoned: {0}")]
    Abandoned(AbandonReason),
    /// Refused: the window of outstanding requests is full
    /// ([`Requests::limit_frames`](crate::config::Requests::limit_frames)); the frame is given back.
    #[error("request limit reached")]
    Full(bytes::Bytes),
    /// Refused: the window of outstanding requests is full, and `late` of its places are held
    /// by requests that timed out and wait for their late replies (in order, a late reply
    /// keeps its place so that it never answers a newer request). The frame is given back.
    #[error(
        "request limit reached: {late} place(s) held by timed-out requests awaiting late replies"
    )]
    FullOfLate {
        /// The request's frame.
        frame: bytes::Bytes,
        /// Places held by timed-out requests.
        late: usize,
    },
    /// Refused: the link is closed or closing; the frame is given back.
    #[error("link closed")]
    Closed(bytes::Bytes),
    /// Refused: the framing cannot encode the frame; it is given back.
    #[error("frame refused: {1}")]
    Invalid(bytes::Bytes, EncodeError),
    /// Refused: correlating by id, the request's id could not be read; the frame is given
    /// back.
    #[error("request has no id")]
    NoId(bytes::Bytes),
    /// Refused: the protocol says the peer answers this frame with other than one reply in
    /// its turn ([`Replies::Pushed`](crate::protocol::Replies::Pushed) or
    /// [`Replies::Many`](crate::protocol::Replies::Many): redis' `SUBSCRIBE`), so no reply can be
    /// matched to it. Send it with `send` and read its answers as events. The frame is given
    /// back.
    #[error("the peer answers this frame with no single reply (a push or several answers): send it and read the events")]
    NoReply(bytes::Bytes),
    /// Refused: replies are matched in order, and the link does not know which frames the
    /// peer answers ([`Answers::Unknown`](crate::protocol::Answers::Unknown): a framing alone,
    /// no protocol that says it), so an answer to a frame given to `send` could be taken for
    /// the request's reply. Give a protocol whose
    /// [`answers`](crate::protocol::Protocol::answers) says what the peer answers
    /// ([`RequestReply`](crate::protocol::RequestReply) where it answers every frame, in
    /// order), or correlate replies by id
    /// ([`Correlation::by_id`](crate::protocol::Correlation::by_id)). The frame is given back.
    #[error("in-order requests need to know which frames the peer answers: give a protocol whose answers() says the peer answers every frame (protocol::RequestReply), or correlate replies by id (Correlation::by_id)")]
    AnswersUnknown(bytes::Bytes),
}

impl RequestError {
    /// The frame, when the request was refused at the call.
    pub fn into_frame(self) -> Option<bytes::Bytes> {
        match self {
            RequestError::Full(f)
            | RequestError::FullOfLate { frame: f, .. }
            | RequestError::Closed(f)
            | RequestError::Invalid(f, _)
            | RequestError::NoId(f)
            | RequestError::NoReply(f)
            | RequestError::AnswersUnknown(f) => Some(f),
            _ => None,
        }
    }

    /// Whether the peer may have processed the request: it was written and its reply did not
    /// come (timed out, or its connection dropped).
    pub fn may_have_been_processed(&self) -> bool {
        matches!(
            self,
            RequestError::TimedOut
                | RequestError::Abandoned(AbandonReason::ConnectionLost | AbandonReason::Poison)
        )
    }
}

/// Why a [`Link::flush`](crate::Link::flush) returned before every frame sent before it was
/// confirmed.
///
/// # Examples
/// ```
/// use relink::error::FlushError;
///
/// let e = FlushError::TimedOut { waiting: 3 };
/// assert_eq!(e.to_string(), "flush timed out with 3 frame(s) still waiting");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// The timeout passed with `waiting` frames sent before the call still unconfirmed (they
    /// go on: a flush withdraws nothing).
    #[error("flush timed out with {waiting} frame(s) still waiting")]
    TimedOut {
        /// Frames sent before the call without an outcome yet.
        waiting: u64,
    },
    /// Every frame sent before the call has its outcome, and `frames` were abandoned while
    /// the flush waited: each came back in an [`Event::Abandoned`](crate::Event::Abandoned)
    /// with its reason.
    #[error("{frames} frame(s) abandoned while flushing")]
    Abandoned {
        /// Frames abandoned while the flush waited.
        frames: u64,
    },
    /// The link is closed: it stopped before the frames had their outcome, and reported them
    /// as abandoned.
    #[error("the link is closed")]
    Closed,
}
