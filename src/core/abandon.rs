//! Why a frame accepted by `send` was never handed to the socket: the reason the core
//! reports, carried by events, errors and the metrics alike.

use std::fmt;

/// Why a frame accepted by `send` (or a request) ended without being confirmed.
///
/// # Examples
/// ```
/// use relink::AbandonReason;
///
/// assert_eq!(AbandonReason::ConnectionLost.to_string(), "connection-lost");
/// ```
/// [`Link::send_with`](crate::Link::send_with) and
/// [`Delivery::outbox_frames`](crate::config::Delivery::outbox_frames) show frames coming back with a
/// reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AbandonReason {
    /// Its deadline passed while it waited.
    Expired,
    /// The outbox was over its limits under [`Overflow::DropOldest`](crate::Overflow::DropOldest), and this
    /// was its oldest frame. Under the other policies the outbox never overflows: a full one
    /// refuses new frames at the call, and frames a [`Spool`](crate::Spool) recovered at the
    /// start are held besides the limits.
    Overflow,
    /// The link closed before it could be sent.
    Shutdown,
    /// The connection dropped and `abandon_on_disconnect` is set.
    ConnectionLost,
    /// The framing refused to encode it when its turn came, though its
    /// [`check`](crate::framing::Framing::check) accepted it at `send` (a framing whose `check` and
    /// `encode` disagree).
    Unencodable,
    /// It was handed to the socket and its connection dropped before it was confirmed (by the
    /// peer's TCP, or by a reply under [`Confirm::reply`](crate::Confirm::reply)), with
    /// [`Redelivery::Report`](crate::Redelivery::Report) (or the link closed then): the peer
    /// may have received it.
    Unconfirmed,
    /// It was in flight at [`Delivery::max_losses`](crate::config::Delivery::max_losses) connection losses in a
    /// row: a frame that makes the peer drop the connection (or a peer that never lives long
    /// enough to take it) is given back instead of being written forever, and what waits
    /// behind it moves on.
    Poison,
    /// The peer answered it with a refusal (it did not run it and will later: redis'
    /// `-LOADING`; [`ReplyKind::Refused`](crate::protocol::ReplyKind::Refused)), with
    /// [`Redelivery::Report`](crate::Redelivery::Report). The reply came just before, in an
    /// [`Event::ErrorReply`](crate::Event::ErrorReply).
    Refused,
}

impl AbandonReason {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [AbandonReason; 8] = [
        AbandonReason::Expired,
        AbandonReason::Overflow,
        AbandonReason::Shutdown,
        AbandonReason::ConnectionLost,
        AbandonReason::Unencodable,
        AbandonReason::Unconfirmed,
        AbandonReason::Poison,
        AbandonReason::Refused,
    ];

    /// The one-word form.
    pub fn as_str(self) -> &'static str {
        match self {
            AbandonReason::Expired => "expired",
            AbandonReason::Overflow => "overflow",
            AbandonReason::Shutdown => "shutdown",
            AbandonReason::ConnectionLost => "connection-lost",
            AbandonReason::Unencodable => "unencodable",
            AbandonReason::Unconfirmed => "unconfirmed",
            AbandonReason::Poison => "poison",
            AbandonReason::Refused => "refused",
        }
    }
}

impl fmt::Display for AbandonReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
