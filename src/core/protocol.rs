//! The protocol: what a protocol does at the edges of a connection, written once and handed to
//! the builder. Sans-IO like the framing: frames in, frames and verdicts out, no clock.
//!
//! The framing cuts bytes into frames; the protocol says what some frames mean to the link:
//! which open a connection, which answer the opening, which the link answers itself, which
//! ping and which pong, and how a frame is marked when written again.

use std::fmt;

use super::predicate::Predicate;

pub use super::confirm::Replies;

use super::confirm::{Answers, Confirm};
use super::framing::AnyFraming;
use super::heartbeat::Heartbeat;
use super::requests::Correlation;

/// The interval of the heartbeat a protocol runs when it gives a [`Protocol::ping`] and no
/// heartbeat of its own.
pub const PROTOCOL_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the link writes when a connection opens, and whether it then waits for the peer.
///
/// # Examples
/// ```
/// use relink::protocol::Opening;
///
/// // A telemetry collector that answers nothing: a line, and Ready at once.
/// let hello = Opening::ready(vec![b"HELLO sensor-7".to_vec()]);
/// // MQTT: CONNECT, then Ready only on the CONNACK that accepts it.
/// let connect = Opening::wait(vec![vec![0x10, 0x0c /* ... */]]);
/// # let _ = (hello, connect);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opening {
    pub(crate) frames: Vec<Vec<u8>>,
    pub(crate) wait: bool,
}

impl Opening {
    /// `frames` first on the connection, and the link Ready at once: a preamble that gets no
    /// reply. Frames queued before go after it.
    pub fn ready(frames: Vec<Vec<u8>>) -> Opening {
        Opening {
            frames,
            wait: false,
        }
    }

    /// `frames` first on the connection, then the link waits for [`Protocol::verdict`] to say
    /// Ready (within [`Builder::handshake_timeout`](crate::Builder::handshake_timeout)).
    pub fn wait(frames: Vec<Vec<u8>>) -> Opening {
        Opening { frames, wait: true }
    }
}

/// What the peer's frame says while the link waits for its verdict on a new connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The connection is Ready. The frame is consumed.
    Ready,
    /// Not this frame: it is delivered to the application, and the link keeps waiting.
    NotYet,
    /// An answer to the opening, not the last: the frame is consumed, and the link keeps
    /// waiting (redis' `+OK` to `AUTH`, before the reply to `SELECT`).
    Continue,
    /// The peer refused the link for a reason no retry at the usual pace can fix (bad
    /// credentials, a protocol version it does not speak): the connection is closed with cause
    /// [`Rejected`](crate::Cause::Rejected), the reason comes in an
    /// [`Event::Error`](crate::Event::Error), and the next attempt waits
    /// [`Reconnect::config_failure_retry`](crate::config::Reconnect::config_failure_retry).
    Refused(String),
    /// The peer cannot take the link yet but will soon (redis' `-LOADING` while it reads its
    /// data after a restart): the frame is consumed, the answers still due to this opening
    /// are dropped, and the opening is written again on the same connection after a short
    /// pause that grows (10 ms, doubling, at most 250 ms), each time with a fresh
    /// [`handshake_timeout`](crate::Builder::handshake_timeout). The link becomes Ready within
    /// a pause of the peer's recovery; no backoff, no cooldown.
    Retry,
}

/// What an answer in its turn says of the frame it answers ([`Protocol::reply_kind`]).
///
/// # Examples
/// A line protocol whose server answers `OK`, `ERR ...`, or `BUSY` for a command it will run
/// later:
/// ```
/// use relink::protocol::{Answers, Protocol, Replies, ReplyKind};
///
/// #[derive(Clone)]
/// struct Lines;
///
/// impl Protocol for Lines {
///     fn answers(&self) -> Answers {
///         Answers::EveryFrame
///     }
///
///     fn reply_kind(&mut self, reply: &[u8], _asked: Replies) -> ReplyKind {
///         match reply {
///             b"BUSY" => ReplyKind::Refused,
///             r if r.starts_with(b"ERR") => ReplyKind::Error,
///             _ => ReplyKind::Done,
///         }
///     }
/// }
/// assert_eq!(Lines.reply_kind(b"BUSY", Replies::One), ReplyKind::Refused);
/// assert_eq!(Lines.reply_kind(b"ERR no such key", Replies::One), ReplyKind::Error);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyKind {
    /// The peer ran the frame. The default. A sent frame's answer is then read by the link
    /// and counted ([`Metrics::answers_consumed`](crate::Metrics::answers_consumed)), or an
    /// [`Event::Frame`](crate::Event::Frame) under
    /// [`Delivery::answer_events`](crate::config::Delivery::answer_events).
    Done,
    /// The peer read the frame and answered with an error (a wrong type, a syntax error):
    /// the frame is confirmed, and the error is the application's concern. A frame given to
    /// `send` that is answered so comes back in an
    /// [`Event::ErrorReply`](crate::Event::ErrorReply) beside its reply.
    Error,
    /// The peer did not run the frame and will later (redis' `-LOADING`, `-BUSY`,
    /// `-TRYAGAIN`, `-MASTERDOWN`, `-CLUSTERDOWN`): the frame is not confirmed, and it alone
    /// is taken back; the frames written after it are answered on their own. With
    /// [`Redelivery::Resend`](crate::Redelivery::Resend) it is written again after a pause
    /// that grows while refusals go on (10 ms, doubling, at most 1 s), behind the frames
    /// refused before it and ahead of the frames still queued; with
    /// [`Redelivery::Report`](crate::Redelivery::Report) it comes back in an
    /// [`Event::ErrorReply`](crate::Event::ErrorReply) and an
    /// [`Event::Abandoned`](crate::Event::Abandoned) with reason
    /// [`Refused`](crate::AbandonReason::Refused). Either way
    /// [`Metrics::frames_refused`](crate::Metrics::frames_refused) counts it.
    Refused,
    /// The answer is its turn's and more follow (under [`Replies::Followed`]): the first
    /// answer of a turn confirms its frame (or answers its request); the answers after it of
    /// a request's turn are [`Event::Frame`](crate::Event::Frame)s, those of a sent frame's
    /// turn are read like its first (events under
    /// [`Delivery::answer_events`](crate::config::Delivery::answer_events)).
    More,
    /// The answer cannot be its turn's (a pub/sub confirmation in a `GET`'s turn): the
    /// connection closes with cause [`Protocol`](crate::Cause::Protocol), its frames and
    /// requests are resent or reported by their policies, and
    /// [`Metrics::replies_unexpected`](crate::Metrics::replies_unexpected) counts it. No
    /// caller is ever handed an answer that is not its own.
    Unexpected,
}

/// What the link does with a frame of the peer's own: one that answers nothing the link wrote
/// (a server's ping, a message pushed to a subscriber).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reaction {
    /// Deliver it to the application. The default.
    Deliver,
    /// Write this frame at once, ahead of the outbox (a NATS `PONG` to the server's `PING`),
    /// and keep the peer's frame from the application.
    Answer(Vec<u8>),
    /// Write this frame at once, ahead of the outbox (an MQTT `PUBACK`), and deliver the
    /// peer's frame too.
    AnswerAndDeliver(Vec<u8>),
}

/// What a protocol does on each connection: the frames that open it, the verdict on the peer's
/// first frames, the answers to the peer's own frames, the ping and its pong, which frames the
/// peer answers, and how a frame written again is marked.
///
/// Every method has a default, so a protocol says only what it needs; a default that follows
/// from another method derives from it: [`confirm`](Protocol::confirm) from
/// [`answers`](Protocol::answers) (by reply where the peer answers), and
/// [`heartbeat`](Protocol::heartbeat) from [`ping`](Protocol::ping) (a ping every 5 s when
/// there is one). The builder overrides each in one place (and
/// [`without_heartbeat`](crate::Builder::without_heartbeat) turns the heartbeat off). The
/// frames it returns are encoded by the link's framing. Given to the builder with
/// [`Builder::protocol`](crate::Builder::protocol); the link calls it on its IO thread, guarded
/// (a panic fails the connection with cause `callback-panic`).
///
/// # Examples
/// A NATS publisher and subscriber, the whole protocol in one value: NATS' framing (CRLF lines;
/// `PUB` and `MSG` carry a counted body), `CONNECT` and the subscriptions on every connection
/// and Ready at once, the server's `PING` answered by the link, the link's own `PING` (every 5 s,
/// the heartbeat its ping brings) and its `PONG`, and every `PUB` confirmed by the `PONG` to a ping written after it (the
/// server answers only pings, in order). A frame is given without its final CRLF: the framing
/// writes it. `tests/protocols.rs` runs this code against a nats-server.
/// ```
/// use std::time::Duration;
/// use relink::framing::{AnyFraming, Counted};
/// use relink::protocol::{Answers, Opening, Protocol, Reaction};
/// use relink::Link;
///
/// #[derive(Clone)]
/// struct Nats {
///     subjects: Vec<String>,
/// }
///
/// impl Protocol for Nats {
///     fn framing(&self) -> Option<AnyFraming> {
///         // A header line; `PUB` and `MSG` end with their body's length, and the body follows.
///         let nats = Counted::new(|header| {
///             let header = std::str::from_utf8(header).ok()?;
///             let counted = header.starts_with("PUB ") || header.starts_with("MSG ");
///             counted
///                 .then(|| header.rsplit(' ').next()?.parse().ok())
///                 .flatten()
///         });
///         Some(nats.into())
///     }
///
///     fn open(&mut self) -> Opening {
///         let mut frames = vec![br#"CONNECT {"verbose":false}"#.to_vec()];
///         for (sid, subject) in self.subjects.iter().enumerate() {
///             frames.push(format!("SUB {subject} {sid}").into_bytes());
///         }
///         Opening::ready(frames)
///     }
///
///     fn react(&mut self, frame: &[u8]) -> Reaction {
///         match frame {
///             b"PING" => Reaction::Answer(b"PONG".to_vec()),
///             _ => Reaction::Deliver,
///         }
///     }
///
///     fn ping(&self) -> Option<Vec<u8>> {
///         Some(b"PING".to_vec())
///     }
///
///     fn is_pong(&self, frame: &[u8]) -> bool {
///         frame == b"PONG"
///     }
///
///     fn answers(&self) -> Answers {
///         Answers::Pings
///     }
/// }
///
/// /// A `PUB`: its header line, CRLF, the payload.
/// fn publish(subject: &str, payload: &str) -> String {
///     format!("PUB {subject} {}\r\n{payload}", payload.len())
/// }
///
/// let link = Link::builder("tcp://127.0.0.1:4222")
///     .protocol(Nats { subjects: vec!["updates".into()] })
///     .build()?;
/// link.send(publish("updates", "hello"))?;
/// // The server sends it back to the subscription: `MSG updates 0 5\r\nhello`.
/// # link.close(Duration::ZERO);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Protocol: Send + 'static {
    /// The frames that open a new connection (built for it: the subscriptions held now, a
    /// fresh token), and whether the link waits for [`verdict`](Protocol::verdict). Called
    /// once per connection, when it carries application bytes (after TLS). Defaults to none,
    /// Ready at once.
    fn open(&mut self) -> Opening {
        Opening::default()
    }

    /// The peer's frame while the link waits for its verdict. Defaults to Ready.
    fn verdict(&mut self, frame: &[u8]) -> Verdict {
        let _ = frame;
        Verdict::Ready
    }

    /// A frame of the peer's own, once Ready (one that answers nothing the link wrote).
    /// Defaults to delivering it.
    fn react(&mut self, frame: &[u8]) -> Reaction {
        let _ = frame;
        Reaction::Deliver
    }

    /// The heartbeat's ping, in place of the [`Heartbeat`](crate::Heartbeat)'s own. The
    /// heartbeat runs only once the link is Ready. Defaults to the heartbeat's.
    fn ping(&self) -> Option<Vec<u8>> {
        None
    }

    /// Whether `frame` is the pong to a ping (under [`Answers::Pings`]; under
    /// [`Answers::EveryFrame`] the pong is known by its place). Defaults to false.
    fn is_pong(&self, frame: &[u8]) -> bool {
        let _ = frame;
        false
    }

    /// Which frames the peer answers, in order. Defaults to [`Answers::Unknown`].
    fn answers(&self) -> Answers {
        Answers::Unknown
    }

    /// Whether `frame` is one of the peer's own told by its content (a RESP3 push, a server's
    /// notice): it answers no frame the link wrote, so it takes no turn among the answers and
    /// is no request's reply; it goes to [`react`](Protocol::react). Defaults to false.
    fn is_unsolicited(&self, frame: &[u8]) -> bool {
        let _ = frame;
        false
    }

    /// How many in-order answers the peer gives to `frame`, a frame of the application's (or
    /// a request) being written, under [`Answers::EveryFrame`]. Asked as the frame is
    /// written, in the order written, and for a request once more at the call (a request
    /// whose frame gets [`Replies::Many`] or [`Replies::Pushed`] is refused there). What
    /// the answers do to the connection's mode is learnt from the answers themselves, in
    /// [`reply_kind`](Protocol::reply_kind). Defaults to [`Replies::One`].
    fn replies(&self, frame: &[u8]) -> Replies {
        let _ = frame;
        Replies::One
    }

    /// What `reply`, an answer in the turn of a frame of the application's (or of a request),
    /// says of that frame: run, answered with an error, refused for now, the first of more,
    /// or not its answer at all. `asked` is what [`replies`](Protocol::replies) said of the
    /// frame. Answers come here in the order the peer gave them, so a protocol follows the
    /// connection's mode here, by what the peer said (redis' subscriptions held, RESP3 after
    /// `HELLO 3`'s answer). Defaults to [`ReplyKind::Done`].
    fn reply_kind(&mut self, reply: &[u8], asked: Replies) -> ReplyKind {
        let _ = (reply, asked);
        ReplyKind::Done
    }

    /// A frame written again on a new connection after its connection dropped unconfirmed
    /// (under [`Redelivery::Resend`](crate::Redelivery::Resend)): the marked copy to write
    /// instead (MQTT sets DUP on a resent `PUBLISH`), or `None` to write it as it was.
    /// Defaults to `None`.
    fn resend(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let _ = frame;
        None
    }

    /// The framing the peer speaks, unless the builder is given one
    /// ([`Builder::framing`](crate::Builder::framing)). Defaults to none: the builder's
    /// (raw chunks unless given).
    fn framing(&self) -> Option<AnyFraming> {
        None
    }

    /// The heartbeat the link runs, unless the builder is given one
    /// ([`Builder::heartbeat`](crate::Builder::heartbeat)) or told to run none
    /// ([`Builder::without_heartbeat`](crate::Builder::without_heartbeat)): [`Heartbeat::every`]
    /// an interval writes the protocol's [`ping`](Protocol::ping). Defaults to a ping every
    /// [`PROTOCOL_HEARTBEAT`](crate::config::defaults::PROTOCOL_HEARTBEAT) (5 s) when
    /// [`ping`](Protocol::ping) gives one, else none.
    fn heartbeat(&self) -> Option<Heartbeat> {
        self.ping().map(|_| Heartbeat::every(PROTOCOL_HEARTBEAT))
    }

    /// What confirms a frame, unless the builder is given it
    /// ([`Builder::confirm`](crate::Builder::confirm)). Defaults to what
    /// [`answers`](Protocol::answers) allows: [`Confirm::reply`] where the peer answers
    /// ([`Answers::EveryFrame`] or [`Answers::Pings`]), else [`Confirm::tcp`].
    fn confirm(&self) -> Confirm {
        match self.answers() {
            Answers::Unknown => Confirm::tcp(),
            _ => Confirm::reply(),
        }
    }

    /// How replies match requests, unless the builder is given it
    /// ([`Requests::correlation`](crate::config::Requests::correlation)). Defaults to none: in order,
    /// with the frames [`is_unsolicited`](Protocol::is_unsolicited) calls the peer's own kept
    /// apart.
    fn correlation(&self) -> Option<Correlation> {
        None
    }

    /// Short name for logs. Defaults to `"custom"`.
    fn name(&self) -> &str {
        "custom"
    }
}

/// The simplest protocol that waits for the peer: `hello` first on every connection, then
/// Ready on the first frame `accept` takes (that frame is not delivered; frames before it
/// are). Within [`Builder::handshake_timeout`](crate::Builder::handshake_timeout), as any
/// [`Opening::wait`]. A protocol that needs more (a refusal, the server's pings, a ping of its
/// own) implements [`Protocol`] itself.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::framing::Lines;
/// use relink::Link;
/// use relink::protocol::{Handshake, Predicate};
///
/// let link = Link::builder("tcp://127.0.0.1:7000")
///     .framing(Lines::new())
///     .protocol(Handshake::new(vec![b"AUTH secret".to_vec()], Predicate::new(|r| r == b"OK")))
///     .handshake_timeout(Duration::from_secs(2))
///     .build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Handshake {
    hello: Vec<Vec<u8>>,
    accept: Predicate,
    retry: Option<Predicate>,
}

impl Handshake {
    /// `hello` on every connection (none: wait for the peer's greeting), Ready on the first
    /// frame `accept` takes.
    pub fn new(hello: Vec<Vec<u8>>, accept: impl Into<Predicate>) -> Handshake {
        Handshake {
            hello,
            accept: accept.into(),
            retry: None,
        }
    }

    /// A frame `retry` takes says the peer cannot take the link yet (redis' `-LOADING` to a
    /// `PING`): the hello is written again after a short pause ([`Verdict::Retry`]) instead
    /// of the frame going to the application.
    ///
    /// # Examples
    /// ```
    /// use relink::protocol::{Handshake, Predicate};
    ///
    /// let ping = b"*1\r\n$4\r\nPING\r\n".to_vec();
    /// let hello = Handshake::new(vec![ping], Predicate::new(|r| r == b"+PONG\r\n"))
    ///     .retry_when(Predicate::starts_with("-LOADING"));
    /// # let _ = hello;
    /// ```
    pub fn retry_when(mut self, retry: impl Into<Predicate>) -> Handshake {
        self.retry = Some(retry.into());
        self
    }
}

impl fmt::Debug for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handshake")
            .field("hello", &self.hello.len())
            .finish_non_exhaustive()
    }
}

impl Protocol for Handshake {
    fn open(&mut self) -> Opening {
        Opening::wait(self.hello.clone())
    }

    fn verdict(&mut self, frame: &[u8]) -> Verdict {
        if self.accept.test(frame) {
            Verdict::Ready
        } else if self.retry.as_ref().is_some_and(|r| r.test(frame)) {
            Verdict::Retry
        } else {
            Verdict::NotYet
        }
    }

    fn name(&self) -> &str {
        "handshake"
    }
}

/// The peer answers every frame with one reply, in order, and says nothing of its own: a line
/// or RESP server without a protocol of its own ([`Answers::EveryFrame`], every other method
/// its default). With it, requests are matched in order and frames given to `send` are
/// confirmed by their replies, which the link consumes and counts. The framing is the
/// builder's ([`Builder::framing`](crate::Builder::framing)).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::framing::Lines;
/// use relink::protocol::RequestReply;
/// use relink::Link;
///
/// let link = Link::builder("tcp://127.0.0.1:7000")
///     .framing(Lines::new())
///     .protocol(RequestReply)
///     .build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestReply;

impl Protocol for RequestReply {
    fn answers(&self) -> Answers {
        Answers::EveryFrame
    }

    fn name(&self) -> &str {
        "request-reply"
    }
}

/// A protocol the link can hold and clone: any `Protocol + Clone`, behind one object-safe
/// trait.
pub(crate) trait DynProtocol: Protocol {
    fn clone_box(&self) -> Box<dyn DynProtocol>;
}

impl<T: Protocol + Clone> DynProtocol for T {
    fn clone_box(&self) -> Box<dyn DynProtocol> {
        Box::new(self.clone())
    }
}

/// The protocol of one link, boxed.
pub(crate) struct BoxedProtocol(pub(crate) Box<dyn DynProtocol>);

impl BoxedProtocol {
    pub(crate) fn new<P: Protocol + Clone>(protocol: P) -> BoxedProtocol {
        BoxedProtocol(Box::new(protocol))
    }
}

impl Clone for BoxedProtocol {
    fn clone(&self) -> Self {
        BoxedProtocol(self.0.clone_box())
    }
}

impl fmt::Debug for BoxedProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol({})", self.0.name())
    }
}

impl std::ops::Deref for BoxedProtocol {
    type Target = dyn DynProtocol;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for BoxedProtocol {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}
