//! What confirms a frame, which frames the peer answers, and the turns of a connection: the
//! frames written that wait for their answer, in the order the peer answers them.
//!
//! ```text
//!  written: [hello][f1][f2][ping][req][f3]  ──►  peer reads in order, answers in order
//!  turns (EveryFrame): Hello F1 F2 Ping Req F3    the k-th answer pops the k-th turn
//!  turns (Pings):      Ping Req                    only pings (and in-order requests) answer
//!  an answer to a turn that ends at stream offset e confirms every frame ending at or before e
//! ```
//!
//! Pure: no clock, no IO. A pong is recognised by its place in the order, never by its content
//! alone: under [`Answers::EveryFrame`] the answer in a ping's turn is its pong whatever it
//! says; under [`Answers::Pings`] a frame the heartbeat's `reply` accepts is a pong only when a
//! ping's turn is first, and a request's turn first takes the next answer even if it looks like
//! a pong.

use std::collections::VecDeque;
use std::time::Duration;

/// Which frames the peer's application answers, in the order it read them
/// ([`Protocol::answers`](crate::protocol::Protocol::answers)).
///
/// The link uses it to give each answer its turn: a ping's reply is told from a request's by
/// its place, and (with [`Confirm::reply`]) an answer confirms every frame written before the
/// frame it answers.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::protocol::{Answers, Protocol, Redis};
/// use relink::Link;
///
/// // redis answers every command in order: the k-th reply answers the k-th frame.
/// assert_eq!(Redis::new().answers(), Answers::EveryFrame);
/// let link = Link::builder("tcp://127.0.0.1:6379")
///     .protocol(Redis::new())
///     .build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answers {
    /// Not said. A heartbeat with a `reply` makes it [`Answers::Pings`] (its pongs are then
    /// told apart, and frames can be confirmed by reply); without one, frames can be confirmed
    /// only by the peer's TCP. The default.
    #[default]
    Unknown,
    /// The peer answers every frame written, hello and pings included, in order (redis,
    /// memcached, most request/reply line protocols), as many answers each as the protocol's
    /// [`replies`](crate::protocol::Protocol::replies) says. Frames the protocol or the
    /// correlation calls unsolicited (a push) take no turn.
    EveryFrame,
    /// The peer answers only the heartbeat's ping (and in-order requests), and the
    /// heartbeat's `reply` says which inbound frames are pongs (NATS' `PING`/`PONG` beside
    /// `PUB`, MQTT's `PINGREQ`/`PINGRESP` beside QoS 0 `PUBLISH`).
    Pings,
}

/// How many in-order answers the peer gives to a frame the link writes
/// ([`Protocol::replies`](crate::protocol::Protocol::replies), under [`Answers::EveryFrame`]), asked as the frame is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replies {
    /// One answer, in its turn. The default.
    One,
    /// This many answers, in turn, each read as an answer of its own ([`ReplyKind`](crate::protocol::ReplyKind)): the
    /// first confirms the frame.
    Many(u32),
    /// No answer in turn: the peer answers with frames of its own, told by
    /// [`Protocol::is_unsolicited`](crate::protocol::Protocol::is_unsolicited). The frame takes no turn, so no later answer is taken for
    /// its; it is confirmed by the next answer to a frame written after it. A request whose
    /// frame gets no answer is refused at the call
    /// ([`RequestError::NoReply`](crate::error::RequestError::NoReply)).
    Pushed,
    /// Answers the protocol follows one by one: each answer in the frame's turn goes to
    /// [`Protocol::reply_kind`](crate::protocol::Protocol::reply_kind) with this value, and the turn lasts while it says
    /// [`ReplyKind::More`](crate::protocol::ReplyKind::More) (redis' `SUBSCRIBE a b`: a confirmation per channel; a bare
    /// `UNSUBSCRIBE`: one per channel held when redis runs it). The number is the protocol's
    /// own mark for what the frame asked.
    Followed(u32),
    /// One answer that the peer holds on purpose for up to this long (a blocking command's own
    /// timeout: redis' `BLPOP k 5`; [`Duration::MAX`](std::time::Duration::MAX): as long as
    /// it likes, `BLPOP k 0`). While it waits, the heartbeat does not call a silent peer dead
    /// before that time and its own bound have passed; the kernel backstops stay on.
    Held(std::time::Duration),
}

/// What confirms a frame ([`Builder::confirm`](crate::Builder::confirm)): the peer's TCP, or a
/// reply from the peer's application.
///
/// - **By TCP** (the default): confirmed once the peer's kernel acknowledged its last byte. A
///   peer that dies with acknowledged bytes unread loses them, and the link cannot know.
/// - **By reply**: confirmed once the peer's application answered it, or answered a frame
///   written after it (in-order protocols read in order). Under [`Answers::Pings`] the link
///   writes a ping (a *barrier*) once unconfirmed bytes or their age pass a bound, so a steady
///   stream is confirmed within a bounded time; under [`Answers::EveryFrame`] every reply
///   confirms its frame. Until then a frame stays in the window, and at a drop it is resent or
///   reported by the [`Redelivery`](crate::Redelivery) policy like any unconfirmed frame.
///   Protocols whose peer answers nothing stay at confirmation by TCP.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Confirm;
///
/// // Confirm by reply; a barrier ping after 64 KiB or 2 ms of unconfirmed frames.
/// let c = Confirm::reply().barrier(64 << 10, Duration::from_millis(2));
/// assert!(c.is_by_reply());
/// assert!(!Confirm::tcp().is_by_reply());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirm {
    pub(crate) by_reply: bool,
    pub(crate) barrier_bytes: u64,
    pub(crate) barrier_age: Duration,
}

/// Unconfirmed bytes after which a barrier ping goes out, by default.
pub const BARRIER_BYTES: u64 = 256 << 10;
/// The age of the oldest unconfirmed frame after which a barrier ping goes out, by default.
pub const BARRIER_AGE: Duration = Duration::from_millis(5);

impl Confirm {
    /// Confirmed by the peer's TCP. The default.
    pub fn tcp() -> Confirm {
        Confirm {
            by_reply: false,
            barrier_bytes: BARRIER_BYTES,
            barrier_age: BARRIER_AGE,
        }
    }

    /// Confirmed by a reply of the peer's application (needs [`Answers::EveryFrame`] or
    /// [`Answers::Pings`]). Barriers after 256 KiB or 5 ms by default.
    pub fn reply() -> Confirm {
        Confirm {
            by_reply: true,
            ..Confirm::tcp()
        }
    }

    /// Under [`Answers::Pings`], a barrier ping goes out once `bytes` bytes written are
    /// unconfirmed or the oldest unconfirmed frame is `age` old (and no ping written after it
    /// is still unanswered). Defaults to 256 KiB and 5 ms.
    pub fn barrier(mut self, bytes: u64, age: Duration) -> Confirm {
        self.barrier_bytes = bytes;
        self.barrier_age = age;
        self
    }

    /// Whether frames are confirmed by a reply.
    pub fn is_by_reply(&self) -> bool {
        self.by_reply
    }
}

impl Default for Confirm {
    fn default() -> Confirm {
        Confirm::tcp()
    }
}

/// What a turn waits for the answer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// A hello frame: its answer goes to the handshake's verdict.
    Hello,
    /// A ping (`heartbeat`: the heartbeat's own, whose round trip is measured; otherwise a
    /// barrier or a flush's).
    Ping { heartbeat: bool },
    /// A frame of the application's: its answer is delivered as an event.
    Frame,
    /// A request: its answer goes to the request matcher.
    Request,
    /// The frame it waited for was taken back after a refusal, to be written again: its
    /// answer is dropped.
    Void,
}

/// The kind of a control frame written ahead of the outbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Hello,
    Ping {
        heartbeat: bool,
    },
    /// The link's answer to a frame of the peer's own (the protocol's reaction): no turn.
    Answer,
}

impl Control {
    /// The turn this control frame takes among the peer's answers (`every`: the peer answers
    /// every frame); none for the link's own answers.
    pub(crate) fn turn(self, every: bool) -> Option<Turn> {
        match self {
            Control::Hello if every => Some(Turn::Hello),
            Control::Ping { heartbeat } => Some(Turn::Ping { heartbeat }),
            Control::Hello | Control::Answer => None,
        }
    }
}

/// One turn: what it waits for, the stream offset just past its last byte, how many frames
/// of the connection's window were written up to it (a frame's own turn counts the frame):
/// its answer confirms that many, what the protocol said of its frame's answers, and how many
/// of them came already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) turn: Turn,
    pub(crate) end: u64,
    pub(crate) upto: u64,
    pub(crate) asked: Replies,
    pub(crate) answers: u32,
}

/// The turns of one connection, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    queue: VecDeque<Waiting>,
    /// The end of the newest ping written on the connection.
    last_ping_end: Option<u64>,
}

impl Turns {
    pub(crate) fn push(&mut self, turn: Turn, end: u64, upto: u64, asked: Replies) {
        if let Turn::Ping { .. } = turn {
            self.last_ping_end = Some(end);
        }
        self.queue.push_back(Waiting {
            turn,
            end,
            upto,
            asked,
            answers: 0,
        });
    }

    /// Puts a turn that waits for more answers back first.
    pub(crate) fn push_front(&mut self, waiting: Waiting) {
        self.queue.push_front(waiting);
    }

    /// The turn whose answer comes next.
    pub(crate) fn front(&self) -> Option<Turn> {
        self.queue.front().map(|w| w.turn)
    }

    /// Takes the next turn.
    pub(crate) fn pop(&mut self) -> Option<Waiting> {
        self.queue.pop_front()
    }

    /// Every turn of `kind` still waiting becomes [`Turn::Void`]: its answer will be dropped.
    pub(crate) fn void(&mut self, kind: Turn) {
        for w in self.queue.iter_mut().filter(|w| w.turn == kind) {
            w.turn = Turn::Void;
        }
    }

    /// Whether a ping was written after stream offset `end`.
    pub(crate) fn ping_after(&self, end: u64) -> bool {
        self.last_ping_end.is_some_and(|p| p >= end)
    }

    /// The end of the newest ping written (0 when none was).
    pub(crate) fn last_ping_end(&self) -> u64 {
        self.last_ping_end.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_come_back_in_the_order_they_were_written() {
        let mut t = Turns::default();
        t.push(Turn::Frame, 4, 1, Replies::One);
        t.push(Turn::Ping { heartbeat: true }, 10, 1, Replies::One);
        t.push(Turn::Request, 15, 1, Replies::One);
        assert!(t.ping_after(4) && t.ping_after(10) && !t.ping_after(11));
        let w = |turn, end, upto| {
            Some(Waiting {
                turn,
                end,
                upto,
                asked: Replies::One,
                answers: 0,
            })
        };
        assert_eq!(t.pop(), w(Turn::Frame, 4, 1));
        assert_eq!(t.pop(), w(Turn::Ping { heartbeat: true }, 10, 1));
        assert_eq!(t.last_ping_end(), 10);
        assert_eq!(t.front(), Some(Turn::Request));
        assert_eq!(t.pop(), w(Turn::Request, 15, 1));
        assert_eq!(t.pop(), None);
    }

    #[test]
    fn voided_turns_keep_their_place_and_lose_their_kind() {
        let mut t = Turns::default();
        t.push(Turn::Frame, 4, 1, Replies::One);
        t.push(Turn::Request, 8, 1, Replies::One);
        t.push(Turn::Frame, 12, 2, Replies::One);
        t.void(Turn::Frame);
        assert_eq!(t.pop().map(|w| w.turn), Some(Turn::Void));
        assert_eq!(t.pop().map(|w| w.turn), Some(Turn::Request));
        assert_eq!(t.pop().map(|w| (w.turn, w.upto)), Some((Turn::Void, 2)));
    }
}
