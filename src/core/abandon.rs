//! Why a frame accepted by `send` was never handed to the socket: the reason the core
//! reports, carried by events, errors and the metrics alike.

use std::fmt;

/// Why a frame accepted by `send` was never handed to the socket.
///
/// # Examples
/// ```
/// use relink::AbandonReason;
///
/// assert_eq!(AbandonReason::ConnectionLost.to_string(), "connection-lost");
/// ```
/// [`Link::send_with`](crate::Link::send_with) and
/// [`Builder::outbox_limits`](crate::Builder::outbox_limits) show frames coming back with a
/// reason.
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
    /// The framing refused to encode it when its turn came, though its
    /// [`check`](crate::framing::Framing::check) accepted it at `send` (a framing whose `check` and
    /// `encode` disagree).
    Unencodable,
    /// It was handed to the socket and its connection dropped before the peer's TCP
    /// acknowledged its last byte, with [`Redelivery::Report`](crate::Redelivery::Report)
    /// (or the link closed then): the peer may have received it.
    Unconfirmed,
}

impl AbandonReason {
    /// The one-word form.
    pub fn as_str(self) -> &'static str {
        match self {
            AbandonReason::Expired => "expired",
            AbandonReason::Overflow => "overflow",
            AbandonReason::Shutdown => "shutdown",
            AbandonReason::ConnectionLost => "connection-lost",
            AbandonReason::Unencodable => "unencodable",
            AbandonReason::Unconfirmed => "unconfirmed",
        }
    }
}

impl fmt::Display for AbandonReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
