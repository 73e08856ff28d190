//! The builder's settings in groups a reader takes in at a glance: the reconnect policy, the
//! delivery of frames, requests, and libzmq's socket options. Each is a value with a documented
//! `Default` (the values of [`defaults`](super::defaults)); the builder's flat setters change
//! one field of a group each.

use std::time::Duration;

use super::defaults;
use crate::core::backoff::Jitter;
use crate::core::confirm::Confirm;
use crate::core::overflow::Overflow;
use crate::core::requests::Correlation;
use crate::core::window::Redelivery;
use crate::io::Keepalive;

/// The reconnect policy: the backoff between attempts, when the link rests, what counts as a
/// stable connection. Given whole to [`Builder::reconnect`](crate::Builder::reconnect); each
/// field also has a setter of its own on the builder, which documents it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::{Jitter, Reconnect};
///
/// // A fleet of thousands against one server: slower, spread, resting after 20 failures.
/// let mut fleet = Reconnect::default();
/// fleet.backoff_base = Duration::from_secs(1);
/// fleet.backoff_max = Duration::from_secs(60);
/// fleet.jitter = Jitter::Full;
/// fleet.max_attempts = Some(20);
/// let link = Link::builder("tcp://127.0.0.1:7000").reconnect(fleet).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Reconnect {
    /// First backoff delay, before jitter ([`Builder::backoff`](crate::Builder::backoff)):
    /// 200 ms.
    pub backoff_base: Duration,
    /// Largest backoff delay, before jitter: 8 s.
    pub backoff_max: Duration,
    /// Growth per failure ([`Builder::backoff_factor`](crate::Builder::backoff_factor)): 2.
    pub backoff_factor: f64,
    /// Smallest delay ever drawn ([`Builder::backoff_floor`](crate::Builder::backoff_floor)):
    /// 10 ms.
    pub backoff_floor: Duration,
    /// How delays are randomised ([`Builder::jitter`](crate::Builder::jitter)): full jitter.
    pub jitter: Jitter,
    /// Failed attempts before the link rests in Cooldown
    /// ([`Builder::max_attempts`](crate::Builder::max_attempts)): none (never).
    pub max_attempts: Option<u32>,
    /// How long Cooldown lasts ([`Builder::cooldown`](crate::Builder::cooldown)): 60 s.
    pub cooldown: Duration,
    /// Failed connects left to libzmq's own redial
    /// ([`Builder::native_retries`](crate::Builder::native_retries)): 1.
    pub native_retries: u32,
    /// How long a Ready connection must last before the attempt counter resets
    /// ([`Builder::min_stable`](crate::Builder::min_stable)): 1 s.
    pub min_stable: Duration,
    /// The wait after a failure no retry fixes (a TLS rejection, a protocol's refusal)
    /// ([`Builder::config_failure_retry`](crate::Builder::config_failure_retry)): none, which
    /// is the cooldown.
    pub config_failure_retry: Option<Duration>,
    /// How often names are resolved again ([`Builder::dns_refresh`](crate::Builder::dns_refresh)):
    /// 60 s.
    pub dns_refresh: Duration,
}

impl Default for Reconnect {
    fn default() -> Reconnect {
        Reconnect {
            backoff_base: defaults::BACKOFF_BASE,
            backoff_max: defaults::BACKOFF_MAX,
            backoff_factor: defaults::BACKOFF_FACTOR,
            backoff_floor: defaults::BACKOFF_FLOOR,
            jitter: Jitter::Full,
            max_attempts: None,
            cooldown: defaults::COOLDOWN,
            native_retries: defaults::NATIVE_RETRIES,
            min_stable: defaults::MIN_STABLE,
            config_failure_retry: None,
            dns_refresh: defaults::DNS_REFRESH,
        }
    }
}

/// The delivery of frames sent: how many may wait, what happens at the limit, how long they
/// live, what confirms them and what a drop does to them. Given whole to
/// [`Builder::delivery`](crate::Builder::delivery); each field also has a setter of its own on
/// the builder, which documents it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{Confirm, Link, Overflow, Redelivery};
/// use relink::config::Delivery;
///
/// // Readings that are worthless after a minute, and a peer that says it has read them.
/// let mut readings = Delivery::default();
/// readings.overflow = Overflow::DropOldest;
/// readings.frame_ttl = Some(Duration::from_secs(60));
/// readings.redelivery = Redelivery::Report;
/// readings.confirm = Confirm::tcp();
/// let link = Link::builder("tcp://127.0.0.1:7000").delivery(readings).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Delivery {
    /// Frames that may wait, sent or not, until confirmed
    /// ([`Builder::outbox_limits`](crate::Builder::outbox_limits)): 100 000.
    pub outbox_frames: usize,
    /// Bytes that may wait likewise: 16 MiB.
    pub outbox_bytes: usize,
    /// What `send` does at the limit ([`Builder::overflow`](crate::Builder::overflow)):
    /// [`Overflow::RejectNew`].
    pub overflow: Overflow,
    /// How long a frame may wait unsent ([`Builder::frame_ttl`](crate::Builder::frame_ttl)):
    /// none.
    pub frame_ttl: Option<Duration>,
    /// Abandon what is queued when a connection drops
    /// ([`Builder::abandon_on_disconnect`](crate::Builder::abandon_on_disconnect)): false.
    pub abandon_on_disconnect: bool,
    /// Bytes written and not yet confirmed ([`Builder::window`](crate::Builder::window)):
    /// 4 MiB.
    pub window: usize,
    /// What a drop does to the frames it left unconfirmed
    /// ([`Builder::redelivery`](crate::Builder::redelivery)): [`Redelivery::Resend`].
    pub redelivery: Redelivery,
    /// What confirms a frame ([`Builder::confirm`](crate::Builder::confirm)): the peer's TCP.
    pub confirm: Confirm,
    /// Connections a frame may be the oldest unconfirmed one at a drop before it is abandoned
    /// as poison ([`Builder::max_losses`](crate::Builder::max_losses)): 5.
    pub max_losses: u32,
}

impl Default for Delivery {
    fn default() -> Delivery {
        Delivery {
            outbox_frames: defaults::OUTBOX_FRAMES,
            outbox_bytes: defaults::OUTBOX_BYTES,
            overflow: Overflow::RejectNew,
            frame_ttl: None,
            abandon_on_disconnect: false,
            window: defaults::WINDOW,
            redelivery: Redelivery::Resend,
            confirm: Confirm::tcp(),
            max_losses: defaults::MAX_LOSSES,
        }
    }
}

/// Requests and their replies ([`Link::request`](crate::Link::request)): how a reply is
/// matched, how long it may take, how many requests may be outstanding, what a drop does to
/// them. Given whole to [`Builder::requests`](crate::Builder::requests); each field also has a
/// setter of its own on the builder, which documents it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::framing::Resp;
/// use relink::{Link, Redelivery};
/// use relink::config::Requests;
/// use relink::protocol::Correlation;
///
/// // redis, pipelined deep, each command written again after a drop.
/// let mut redis = Requests::default();
/// redis.correlation = Correlation::resp();
/// redis.limit_frames = 10_000;
/// redis.redelivery = Redelivery::Resend;
/// let link = Link::builder("127.0.0.1:6379").framing(Resp::new()).requests(redis).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Requests {
    /// How replies are matched ([`Builder::correlation`](crate::Builder::correlation)): in
    /// order.
    pub correlation: Correlation,
    /// A reply's deadline from the call
    /// ([`Builder::request_timeout`](crate::Builder::request_timeout)): 5 s.
    pub timeout: Duration,
    /// Requests outstanding at most
    /// ([`Builder::request_limits`](crate::Builder::request_limits)): 1024.
    pub limit_frames: usize,
    /// Their bytes at most: 4 MiB.
    pub limit_bytes: usize,
    /// What a drop does to requests written and not answered
    /// ([`Builder::request_redelivery`](crate::Builder::request_redelivery)):
    /// [`Redelivery::Report`].
    pub redelivery: Redelivery,
}

impl Default for Requests {
    fn default() -> Requests {
        Requests {
            correlation: Correlation::in_order(),
            timeout: defaults::REQUEST_TIMEOUT,
            limit_frames: defaults::REQUEST_LIMIT_FRAMES,
            limit_bytes: defaults::REQUEST_LIMIT_BYTES,
            redelivery: Redelivery::Report,
        }
    }
}

/// libzmq's own options on the link's socket, set before it connects. Given whole to
/// [`Builder::socket`](crate::Builder::socket); each field also has a setter of its own on the
/// builder, which documents it. Most links keep the defaults.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::{Keepalive, SocketOptions};
///
/// let mut socket = SocketOptions::default();
/// socket.connect_timeout = Duration::from_secs(2);
/// socket.keepalive = Some(Keepalive::new(Duration::from_secs(30)));
/// let link = Link::builder("tcp://127.0.0.1:7000").socket(socket).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SocketOptions {
    /// libzmq's own redial interval, ZMQ_RECONNECT_IVL
    /// ([`Builder::reconnect_ivl`](crate::Builder::reconnect_ivl)): 100 ms.
    pub reconnect_ivl: Duration,
    /// ZMQ_RECONNECT_IVL_MAX ([`Builder::reconnect_ivl_max`](crate::Builder::reconnect_ivl_max)):
    /// zero (no growth).
    pub reconnect_ivl_max: Duration,
    /// ZMQ_IMMEDIATE ([`Builder::immediate`](crate::Builder::immediate)): false.
    pub immediate: bool,
    /// Bound on one TCP connect, ZMQ_CONNECT_TIMEOUT and relink's own timer
    /// ([`Builder::connect_timeout`](crate::Builder::connect_timeout)): 5 s.
    pub connect_timeout: Duration,
    /// ZMQ_LINGER ([`Builder::linger`](crate::Builder::linger)): 200 ms.
    pub linger: Duration,
    /// Send high-water mark in messages, ZMQ_SNDHWM ([`Builder::hwm`](crate::Builder::hwm)):
    /// 64.
    pub sndhwm: i32,
    /// Receive high-water mark in messages, ZMQ_RCVHWM: 64.
    pub rcvhwm: i32,
    /// TCP keepalive ([`Builder::tcp_keepalive`](crate::Builder::tcp_keepalive)): the
    /// system's.
    pub keepalive: Option<Keepalive>,
    /// ZMQ_TCP_MAXRT ([`Builder::tcp_maxrt`](crate::Builder::tcp_maxrt)): the system's.
    pub tcp_maxrt: Option<Duration>,
}

impl Default for SocketOptions {
    fn default() -> SocketOptions {
        SocketOptions {
            reconnect_ivl: defaults::RECONNECT_IVL,
            reconnect_ivl_max: Duration::ZERO,
            immediate: false,
            connect_timeout: defaults::CONNECT_TIMEOUT,
            linger: defaults::LINGER,
            sndhwm: defaults::SNDHWM,
            rcvhwm: defaults::RCVHWM,
            keepalive: None,
            tcp_maxrt: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Link;

    /// The whole configuration, as its `Debug` text says it.
    fn shown(b: crate::Builder) -> String {
        format!("{:?}", b.into_config().expect("a valid configuration"))
    }

    #[test]
    fn each_groups_default_is_the_builders() {
        let plain = Link::builder("tcp://127.0.0.1:7000");
        let grouped = Link::builder("tcp://127.0.0.1:7000")
            .reconnect(Reconnect::default())
            .delivery(Delivery::default())
            .requests(Requests::default())
            .socket(SocketOptions::default());
        assert_eq!(shown(grouped), shown(plain));
    }

    #[test]
    fn a_group_sets_what_its_flat_setters_set() {
        let mut r = Reconnect::default();
        (r.backoff_base, r.backoff_max) = (Duration::from_millis(5), Duration::from_secs(3));
        (r.max_attempts, r.cooldown) = (Some(7), Duration::from_secs(9));
        let mut d = Delivery::default();
        (d.outbox_frames, d.frame_ttl) = (10, Some(Duration::from_secs(2)));
        d.overflow = Overflow::DropOldest;
        let mut q = Requests::default();
        (q.timeout, q.limit_frames) = (Duration::from_millis(300), 16);
        q.redelivery = Redelivery::Resend;
        let mut o = SocketOptions::default();
        (o.linger, o.sndhwm) = (Duration::from_millis(7), 9);
        let grouped = Link::builder("tcp://127.0.0.1:7000")
            .reconnect(r)
            .delivery(d)
            .requests(q)
            .socket(o);
        let flat = Link::builder("tcp://127.0.0.1:7000")
            .backoff(Duration::from_millis(5), Duration::from_secs(3))
            .max_attempts(7)
            .cooldown(Duration::from_secs(9))
            .outbox_limits(10, defaults::OUTBOX_BYTES)
            .frame_ttl(Duration::from_secs(2))
            .overflow(Overflow::DropOldest)
            .request_timeout(Duration::from_millis(300))
            .request_limits(16, defaults::REQUEST_LIMIT_BYTES)
            .request_redelivery(Redelivery::Resend)
            .linger(Duration::from_millis(7))
            .hwm(9, defaults::RCVHWM);
        assert_eq!(shown(grouped), shown(flat));
    }
}
