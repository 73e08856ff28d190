//! How one `send*` call goes through the link's intake (`crate::io::intake`): its wait for
//! room and its frames' deadline, resolved once from its options and the link's policy.

use std::time::{Duration, Instant};

/// How a `send*` call waits for room, resolved from its options and the link's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    No,
    /// Wait up to this long; the clock is read only if there is no room at once.
    For(Duration),
    /// Wait as long as it takes under twice the limits (`DropOldest`: the IO thread drops the
    /// oldest frames).
    Forced,
}

/// One `send*` call's way through the intake.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) wait: Wait,
    pub(super) forced: bool,
    pub(super) ttl: Option<Duration>,
}

impl Plan {
    /// The end of the wait for room, read when a wait begins: `None` for no end.
    pub(super) fn until(&self) -> Option<Instant> {
        match self.wait {
            Wait::No => Some(Instant::now()),
            Wait::For(t) => Some(Instant::now() + t),
            Wait::Forced => None,
        }
    }
}
