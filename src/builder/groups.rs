//! The builder's settings in groups a reader takes in at a glance: the reconnect policy, the
//! delivery of frames, requests, and libzmq's socket options. Each is a value with public,
//! documented fields and one `Default` (the values of [`defaults`](super::defaults)), the only
//! place the builder's defaults are written; the builder changes a group in place with a
//! closure ([`Builder::reconnect`](crate::Builder::reconnect) and the others).

use std::time::Duration;

use super::defaults;
use crate::core::backoff::Jitter;
use crate::core::overflow::Overflow;
use crate::core::requests::Correlation;
use crate::core::window::Redelivery;
pub use crate::io::SocketOptions;

/// The reconnect policy: the backoff between attempts, when the link rests, what counts as a
/// stable connection. Given whole to [`Builder::reconnect`](crate::Builder::reconnect); each
/// field also has a setter of its own on the builder, which documents it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::Reconnect;
///
/// // A policy kept as a function, for every link of a fleet.
/// fn fleet(r: &mut Reconnect) {
///     r.max_attempts = Some(20);
/// }
/// let link = Link::builder("tcp://127.0.0.1:7000").reconnect(fleet).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Reconnect {
    /// Backoff delays grow from `base` to `max` (before jitter). Defaults to 200 ms .. 8 s.
    ///
    /// # Examples
    /// The backoff group ([`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base), [`Reconnect::backoff_factor`](crate::config::Reconnect::backoff_factor),
    /// [`Reconnect::backoff_floor`](crate::config::Reconnect::backoff_floor), [`Reconnect::jitter`](crate::config::Reconnect::jitter),
    /// [`Reconnect::max_attempts`](crate::config::Reconnect::max_attempts), [`Reconnect::cooldown`](crate::config::Reconnect::cooldown),
    /// [`Reconnect::native_retries`](crate::config::Reconnect::native_retries), [`Reconnect::rng_seed`](crate::config::Reconnect::rng_seed)) says how long a
    /// link waits between attempts, and when it rests:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    /// use relink::config::Jitter;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: every dial is refused.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .reconnect(|r| { r.backoff_base = Duration::from_millis(20); r.backoff_max = Duration::from_secs(2); }) // 20 ms, 40 ms, 80 ms, ...
    ///     .reconnect(|r| {
    ///         r.backoff_factor = 2.0;
    ///         r.backoff_floor = Duration::from_millis(5);
    ///     })
    ///     .reconnect(|r| r.jitter = Jitter::Proportional(0.2)) // each delay within ±20 %
    ///     .reconnect(|r| r.max_attempts = Some(3)) // then rest in Cooldown
    ///     .reconnect(|r| r.cooldown = Duration::from_secs(30))
    ///     .reconnect(|r| r.native_retries = 0) // every retry waits relink's delay
    ///     .reconnect(|r| r.rng_seed = Some(7)) // the same delays on every run
    ///     .build()?;
    /// let mut waits = Vec::new();
    /// while waits.last().map(|&(_, to, _)| to) != Some(State::Cooldown) {
    ///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         if let Some(d) = t.next_retry {
    ///             waits.push((t.attempt, t.to, d));
    ///         }
    ///     }
    /// }
    /// let (first, to, d) = waits[0];
    /// assert_eq!((first, to), (1, State::Backoff));
    /// assert!(d >= Duration::from_millis(16) && d <= Duration::from_millis(24));
    /// assert_eq!(waits[2], (3, State::Cooldown, Duration::from_secs(30)));
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub backoff_base: Duration,
    /// Largest backoff delay, before jitter: 8 s.
    pub backoff_max: Duration,
    /// Growth of the delay per attempt ([`Metrics::attempt`](crate::Metrics::attempt)).
    /// Defaults to 2.
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub backoff_factor: f64,
    /// No delay is ever shorter than this. Defaults to 10 ms.
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub backoff_floor: Duration,
    /// How delays are randomised. Defaults to [`Jitter::Full`].
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub jitter: Jitter,
    /// Attempts ([`Metrics::attempt`](crate::Metrics::attempt): relink's dials since the last
    /// stable connection, libzmq's own redials not counted) that may fail before the link rests
    /// in Cooldown; each probe after a Cooldown that fails rests again. Defaults to none
    /// (never).
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub max_attempts: Option<u32>,
    /// How long Cooldown lasts before a probe. Defaults to 60 s.
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub cooldown: Duration,
    /// Failed connects of an outage left to libzmq's own redial (`reconnect_ivl`, the fast path
    /// for a brief blip) before relink stops it and waits its own jittered delay between every
    /// later attempt. Counted from the last stable connection. Defaults to 1; 0 gives every
    /// retry to relink.
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub native_retries: u32,
    /// How long a Ready connection must last before the attempt counter resets; a drop
    /// sooner counts as a failure (flap guard). Defaults to 1 s. Zero resets on Ready.
    ///
    /// See the example on [`Builder::ready_when`](crate::Builder::ready_when).
    pub min_stable: Duration,
    /// The wait before the next attempt after a failure no retry can fix until a
    /// configuration changes ([`Cause::TlsRejected`](crate::Cause::TlsRejected): the server's
    /// certificate is not valid for the name or has an unknown issuer, or the server refused
    /// ours), instead of the backoff meant for restarts: each attempt is a full handshake
    /// against the server, and the answer will be the same. Defaults to the
    /// [`Reconnect::cooldown`](crate::config::Reconnect::cooldown) period (60 s by default).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, Tls};
    ///
    /// let link = Link::builder("tcp://gateway.example:6380")
    ///     .tls(Tls::new())
    ///     .reconnect(|r| { r.backoff_base = Duration::from_millis(50); r.backoff_max = Duration::from_secs(2); }) // for restarts
    ///     .reconnect(|r| r.config_failure_retry = Some(Duration::from_secs(300))) // for a wrong certificate
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub config_failure_retry: Option<Duration>,
    /// How often the name in use is resolved again, in the background (the next dial finds
    /// the fresh answer); a failed dial also asks again. Defaults to 60 s.
    ///
    /// See the example on [`Builder::resolver`](crate::Builder::resolver).
    pub dns_refresh: Duration,
    /// A fixed seed for the backoff's random draws, for tests. Defaults to OS entropy.
    ///
    /// See the example on [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base).
    pub rng_seed: Option<u64>,
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
            rng_seed: None,
        }
    }
}

/// The delivery of frames sent: how many may wait, what happens at the limit, how long they
/// live, what confirms them and what a drop does to them. Changed in place by [`Builder::delivery`](crate::Builder::delivery).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::Delivery;
///
/// // A policy kept as a function, for every link of a fleet.
/// fn fleet(d: &mut Delivery) {
///     d.frame_ttl = Some(Duration::from_secs(60));
/// }
/// let link = Link::builder("tcp://127.0.0.1:7000").delivery(fleet).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Delivery {
    /// Outbox limits: frames waiting to be sent or to be confirmed, in number and in bytes.
    /// Defaults to 100 000 frames and 16 MiB. A frame counts until the peer's TCP has
    /// acknowledged it, so the frame limit must cover what a fast link has on the wire and in
    /// the window: at 64 B frames, 10 000 held one producer's `send` to 0.8 × the speed it
    /// has at 30 000 or more (the throughput bench).
    ///
    /// # Examples
    /// The outbox group ([`Delivery::outbox_frames`](crate::config::Delivery::outbox_frames), [`Delivery::overflow`](crate::config::Delivery::overflow),
    /// [`Delivery::frame_ttl`](crate::config::Delivery::frame_ttl), [`Delivery::abandon_on_disconnect`](crate::config::Delivery::abandon_on_disconnect))
    /// bounds what waits to be sent; every frame ends in one reported outcome:
    /// ```
    /// use std::time::Duration;
    /// use relink::{AbandonReason, Event, Link, Overflow};
    /// use relink::error::SendError;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: frames wait in the outbox.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .delivery(|d| {
    ///         d.outbox_frames = 2;
    ///         d.outbox_bytes = 64 * 1024;
    ///         d.overflow = Overflow::RejectNew;
    ///         d.frame_ttl = Some(Duration::from_secs(60));
    ///         d.abandon_on_disconnect = true;
    ///     })
    ///     .build()?;
    /// link.send("one")?;
    /// link.send("two")?;
    /// // At the limit the frame is refused and given back.
    /// assert_eq!(link.send("three"), Err(SendError::Full(b"three"[..].into())));
    /// // Closing abandons what is still queued; each frame comes back in an event.
    /// let m = link.close(Duration::from_millis(50));
    /// assert_eq!((m.frames_rejected, m.abandoned.shutdown), (1, 2));
    /// let mut back = Vec::new();
    /// while let Ok(ev) = link.events().try_recv() {
    ///     if let Event::Abandoned { frame, reason: AbandonReason::Shutdown } = ev {
    ///         back.push(frame);
    ///     }
    /// }
    /// assert_eq!(back, [b"one".to_vec(), b"two".to_vec()]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub outbox_frames: usize,
    /// Bytes that may wait likewise: 16 MiB.
    pub outbox_bytes: usize,
    /// What `send` does at the outbox limit. Defaults to [`Overflow::RejectNew`].
    ///
    /// See the example on [`Delivery::outbox_frames`](crate::config::Delivery::outbox_frames). and on [`Overflow`].
    pub overflow: Overflow,
    /// Default lifetime of a queued frame; an unsent frame older than this is abandoned as
    /// Expired. Defaults to none (frames wait until sent, closed or dropped).
    ///
    /// See the example on [`Delivery::outbox_frames`](crate::config::Delivery::outbox_frames). and on [`Link::send_with`](crate::Link::send_with), whose
    /// [`SendOptions::ttl`](crate::SendOptions::ttl) overrides it for one call.
    pub frame_ttl: Option<Duration>,
    /// Abandon queued frames (reason ConnectionLost) when a connection drops, instead of
    /// keeping them for the next one. Defaults to false.
    ///
    /// See the example on [`Delivery::outbox_frames`](crate::config::Delivery::outbox_frames).
    pub abandon_on_disconnect: bool,
    /// Most bytes the link hands to the socket that the peer's TCP has not acknowledged yet;
    /// frames beyond it wait in the outbox, counted, instead of in libzmq's pipe and the
    /// kernel's buffer, where a drop would take them. At least one batch is always allowed.
    /// `0` sets no bound (frames are still confirmed, resent or reported). Defaults to 4 MiB:
    /// a window bounds a link's throughput at about `window` bytes per round trip of an
    /// acknowledgement, and 1 MiB held `send_batch` of 64 B frames to 0.6 × the rate of no
    /// bound on loopback.
    ///
    /// Frames stay in the outbox's count (and its limits) until they are confirmed, so
    /// [`Overflow::Block`] pushes back on a producer faster than the peer's kernel takes the
    /// bytes. See the example on [`Delivery::redelivery`](crate::config::Delivery::redelivery).
    pub window: usize,
    /// What becomes of frames handed to the socket and not yet confirmed when their
    /// connection drops: [`Redelivery::Resend`] (at-least-once) or [`Redelivery::Report`]
    /// (at-most-once). Defaults to `Resend`.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, Redelivery};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Non-idempotent commands: a frame the peer may have taken comes back in an event.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .delivery(|d| {
    ///         d.window = 256 * 1024;
    ///         d.redelivery = Redelivery::Report;
    ///     })
    ///     .build()?;
    /// link.send("INCR hits\r\n")?;
    /// let m = link.close(Duration::from_millis(50));
    /// assert_eq!(m.unaccounted(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub redelivery: Redelivery,
    /// A frame or request in flight at `n` connection losses in a row (a *poison* frame that
    /// makes the peer drop the connection, or a peer that never lives long enough to take it)
    /// is abandoned with [`AbandonReason::Poison`](crate::AbandonReason::Poison), and what
    /// waits behind it moves on. Defaults to 5; at least 1.
    pub max_losses: u32,
    /// Largest zmq message built by coalescing small frames. Defaults to 256 KiB: at 64 B
    /// frames, a quarter as many messages as 64 KiB cost libzmq's thread a quarter of the
    /// wake-ups and writes (one producer's `send` ran 1.15 × as fast in the throughput bench).
    pub batch_bytes: usize,
    /// Whether an answer that only confirms a frame given to `send` (redis' `+OK` to a `SET`,
    /// under a protocol whose peer answers every frame) also comes as an
    /// [`Event::Frame`](crate::Event::Frame). Defaults to false: such answers are consumed by
    /// the link and counted in [`Metrics::answers_consumed`](crate::Metrics::answers_consumed),
    /// so a writer that never reads its events never fills them; an error reply still comes
    /// back beside its frame ([`Event::ErrorReply`](crate::Event::ErrorReply)), and
    /// [`Link::request`](crate::Link::request) gives a reply to whoever asked for it.
    pub answer_events: bool,
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
            batch_bytes: defaults::BATCH_BYTES,
            max_losses: defaults::MAX_LOSSES,
            answer_events: false,
        }
    }
}

/// Requests and their replies ([`Link::request`](crate::Link::request)): how a reply is
/// matched, how long it may take, how many requests may be outstanding, what a drop does to
/// them. Changed in place by [`Builder::requests`](crate::Builder::requests).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::Requests;
///
/// // A policy kept as a function, for every link of a fleet.
/// fn fleet(q: &mut Requests) {
///     q.limit_frames = 10_000;
/// }
/// let link = Link::builder("tcp://127.0.0.1:7000").requests(fleet).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Requests {
    /// How replies are matched to requests. Defaults to the protocol's, else
    /// [`Correlation::in_order`] (each answer in its turn answers its request; in order only
    /// where the link knows which frames the peer answers, a protocol's
    /// [`answers`](crate::protocol::Protocol::answers): else a request is refused at the call,
    /// [`RequestError::AnswersUnknown`](crate::error::RequestError::AnswersUnknown));
    /// [`Correlation::resp`] for RESP.
    ///
    /// # Examples
    /// ```
    /// use relink::framing::Resp;
    /// use relink::Link;
    /// use relink::protocol::{Correlation, RequestReply};
    ///
    /// let link = Link::builder("tcp://127.0.0.1:6379")
    ///     .framing(Resp::new())
    ///     .protocol(RequestReply)
    ///     .requests(|q| q.correlation = Some(Correlation::resp()))
    ///     .build()?;
    /// # link.close(std::time::Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub correlation: Option<Correlation>,
    /// A request's deadline, counted from the call (time queued during an outage counts),
    /// unless the call gives its own ([`Link::request_within`](crate::Link::request_within)).
    /// Defaults to 5 s.
    pub timeout: Duration,
    /// The limits of outstanding requests (queued or written, not answered): the pipelining
    /// depth, in requests and in their bytes (one request larger than `bytes` is admitted
    /// alone). Past it, the [`Overflow`] policy applies: `RejectNew` refuses the request
    /// ([`RequestError::Full`](crate::error::RequestError::Full)), `DropOldest` abandons the oldest
    /// unsent one, `Block(t)` lets it wait up to `t` for room, in line in the IO thread (the
    /// call itself never blocks). Defaults to 1024 requests, 4 MiB.
    pub limit_frames: usize,
    /// Their bytes at most: 4 MiB.
    pub limit_bytes: usize,
    /// What becomes of requests written on a connection that drops before their reply.
    /// Defaults to [`Redelivery::Report`] (they fail as "may have been processed").
    pub redelivery: Redelivery,
}

impl Default for Requests {
    fn default() -> Requests {
        Requests {
            correlation: None,
            timeout: defaults::REQUEST_TIMEOUT,
            limit_frames: defaults::REQUEST_LIMIT_FRAMES,
            limit_bytes: defaults::REQUEST_LIMIT_BYTES,
            redelivery: Redelivery::Report,
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
    fn a_group_left_as_it_is_changes_nothing() {
        let plain = Link::builder("tcp://127.0.0.1:7000");
        let grouped = Link::builder("tcp://127.0.0.1:7000")
            .reconnect(|_| {})
            .delivery(|_| {})
            .requests(|_| {})
            .socket(|_| {});
        assert_eq!(shown(grouped), shown(plain));
    }

    #[test]
    fn a_groups_change_reaches_the_configuration() {
        let changed = Link::builder("tcp://127.0.0.1:7000")
            .reconnect(|r| r.cooldown = Duration::from_secs(9))
            .delivery(|d| d.overflow = Overflow::DropOldest)
            .requests(|q| q.redelivery = Redelivery::Resend)
            .socket(|s| s.sndhwm = 9)
            .into_config()
            .expect("a valid configuration");
        assert_eq!(changed.core.cooldown, Duration::from_secs(9));
        assert_eq!(changed.overflow, Overflow::DropOldest);
        assert_eq!(changed.core.requests.redelivery, Redelivery::Resend);
        assert_eq!(changed.socket.sndhwm, 9);
    }
}
