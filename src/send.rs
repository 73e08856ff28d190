//! The options of one `send*` call.

use std::time::Duration;

/// How one [`send_with`](crate::Link::send_with) call (or its async and batch twins) queues
/// its frames: how long it may wait for room at the outbox limit, and how long its frames may
/// wait to be sent. `SendOptions::new()` is the link's own settings: the builder's
/// [`Delivery::overflow`](crate::config::Delivery::overflow) policy and its `frame_ttl`; `send` and
/// `send_async` and the batch calls take the same options; `send` is `send_with` with
/// `SendOptions::new()`.
///
/// # Examples
/// Wait up to 100 ms for room, and give the frame up (reason `Expired`) if it is not sent
/// within a second:
/// ```
/// use std::time::Duration;
/// use relink::{Link, SendOptions};
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
/// let options = SendOptions::new()
///     .wait(Duration::from_millis(100))
///     .ttl(Duration::from_secs(1));
/// link.send_with("quote", options)?;
/// link.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// `None`: the link's overflow policy.
    pub(crate) wait: Option<WaitFor>,
    /// `None`: the builder's `frame_ttl`.
    pub(crate) ttl: Option<Duration>,
}

/// A wait for room that overrides the overflow policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitFor {
    No,
    For(Duration),
}

impl SendOptions {
    /// The link's own settings: its overflow policy at the outbox limit, the builder's
    /// `frame_ttl` (none by default) for the frame.
    pub const fn new() -> SendOptions {
        SendOptions {
            wait: None,
            ttl: None,
        }
    }

    /// Refuses the frame at once ([`SendError::Full`](crate::error::SendError::Full)) at the outbox
    /// limit, whatever the policy, except `DropOldest`, which drops the oldest frame instead.
    /// A call that must never block the thread uses it (crossbeam's `try_send`).
    pub const fn no_wait(mut self) -> SendOptions {
        self.wait = Some(WaitFor::No);
        self
    }

    /// Waits up to `timeout` for room at the outbox limit, whatever the policy. A batch call
    /// waits up to `timeout` in all.
    pub const fn wait(mut self, timeout: Duration) -> SendOptions {
        self.wait = Some(WaitFor::For(timeout));
        self
    }

    /// Abandons the frame (reason [`Expired`](crate::AbandonReason::Expired), given back in
    /// an event) if it is not sent within `ttl` of being queued; overrides the builder's
    /// `frame_ttl`.
    pub const fn ttl(mut self, ttl: Duration) -> SendOptions {
        self.ttl = Some(ttl);
        self
    }
}
