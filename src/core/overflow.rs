//! What `send` does when the outbox is at its limit: a policy the builder sets and the core
//! (the outbox and the request limits) applies.

use std::time::Duration;

/// What `send` does when the outbox is at its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overflow {
    /// Refuse the new frame, giving it back in the error. The default.
    RejectNew,
    /// Accept the new frame and abandon the oldest queued one (reported in an
    /// [`Event::Abandoned`](crate::Event) with reason `Overflow`).
    DropOldest,
    /// Wait up to this long for room, then refuse.
    Block(Duration),
}
