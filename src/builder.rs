//! The builder and every setting with its default: every method of [`Builder`] but `build()`
//! is in this file; the checks `build()` makes are functions in `check.rs`.
//!
//! `build()` itself lives with the handle it builds, in `link.rs`. The checked [`Config`] is
//! split there: the core gets its [`Settings`], the IO thread its socket options.

use std::sync::Arc;
use std::time::Duration;

use crate::core::backoff::{BackoffConfig, Jitter};
use crate::core::confirm::{Answers, Confirm};
use crate::core::framing::{BoxedFraming, Framing, Raw};
use crate::core::heartbeat::Heartbeat;
use crate::core::protocol::{BoxedProtocol, Protocol};
use crate::core::requests::{Correlation, RequestSettings};
use crate::core::settings::{ProofOfLife, Settings, HANDSHAKE_TIMEOUT};
use crate::core::window::Redelivery;
use crate::error::ConfigError;
use crate::io::{self, Context, IoPool, Keepalive, Looks, Resolver};
use crate::tls::Tls;

mod check;
mod groups;

pub use groups::{Delivery, Reconnect, Requests, SocketOptions};

/// All defaults, in one place.
pub mod defaults {
    use std::time::Duration;

    /// First backoff delay (before jitter).
    pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
    /// Largest backoff delay (before jitter).
    pub const BACKOFF_MAX: Duration = Duration::from_secs(8);
    /// Growth per failure.
    pub const BACKOFF_FACTOR: f64 = 2.0;
    /// Smallest delay ever drawn.
    pub const BACKOFF_FLOOR: Duration = Duration::from_millis(10);
    /// Wait in Cooldown before a probe.
    pub const COOLDOWN: Duration = Duration::from_secs(60);
    /// Failures left to libzmq's own redial before relink takes over.
    pub const NATIVE_RETRIES: u32 = 1;
    /// Time a connection must last before the attempt counter resets.
    pub const MIN_STABLE: Duration = Duration::from_secs(1);
    /// Bound on one TCP connect (libzmq's ZMQ_CONNECT_TIMEOUT and relink's own timer).
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// libzmq's ZMQ_RECONNECT_IVL.
    pub const RECONNECT_IVL: Duration = Duration::from_millis(100);
    /// libzmq's ZMQ_LINGER: how long a closed socket keeps trying to write.
    pub const LINGER: Duration = Duration::from_millis(200);
    /// libzmq's send high-water mark, in messages (each message is a batch of frames).
    pub const SNDHWM: i32 = 64;
    /// libzmq's receive high-water mark, in messages.
    pub const RCVHWM: i32 = 64;
    /// Outbox limit in frames.
    pub const OUTBOX_FRAMES: usize = 100_000;
    /// Outbox limit in bytes.
    pub const OUTBOX_BYTES: usize = 16 * 1024 * 1024;
    /// Capacity of the event channel.
    pub const EVENTS_CAPACITY: usize = 1024;
    /// How long the frames of a connection the peer closed may wait for the application.
    pub const CLOSED_FRAMES_WAIT: Duration = Duration::from_secs(30);
    /// Bound on the close run by dropping the last handle.
    pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
    pub use crate::core::heartbeat::MAX_MISSED;
    pub use crate::core::settings::HANDSHAKE_TIMEOUT;
    pub use crate::core::tls::TLS_HANDSHAKE_TIMEOUT;
    /// How long a DNS answer is used before it is asked again.
    pub const DNS_REFRESH: Duration = Duration::from_secs(60);
    pub use crate::core::requests::{REQUEST_LIMIT_BYTES, REQUEST_LIMIT_FRAMES, REQUEST_TIMEOUT};
    pub use crate::core::settings::BATCH_BYTES;
    /// Most bytes handed to the socket and not yet acknowledged by the peer's TCP, per link:
    /// Linux's largest send buffer by default (`net.ipv4.tcp_wmem`).
    pub const WINDOW: usize = 4 * 1024 * 1024;
    pub use crate::io::MAX_SOCKETS;
    /// A call into application code this long or longer is reported as slow.
    pub const SLOW_CALLBACK: Duration = Duration::from_millis(100);
    /// Connection losses in a row a frame or request may be in flight at before it is
    /// abandoned as [`Poison`](crate::AbandonReason::Poison).
    pub const MAX_LOSSES: u32 = 5;
    pub use crate::core::confirm::{BARRIER_AGE, BARRIER_BYTES};
}

pub use crate::core::overflow::Overflow;

/// The validated configuration of one link: the core's settings, and what the IO thread and
/// the handle need besides.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub core: Settings,
    pub rng_seed: Option<u64>,
    pub socket: io::SocketOptions,
    pub overflow: Overflow,
    pub frame_ttl: Option<Duration>,
    pub events_capacity: usize,
    pub closed_frames_wait: Duration,
    pub close_timeout: Duration,
    pub resolver: Option<Resolver>,
    pub spool: Option<crate::spool::Spool>,
    pub looks: Looks,
}

/// Builds a [`Link`](crate::Link). Made by [`Link::builder`](crate::Link::builder); every
/// setter says its default; [`build`](Builder::build) checks everything once.
///
/// The settings, in groups:
///
/// | group | whole | one at a time |
/// |---|---|---|
/// | where and what | | [`endpoint`](Builder::endpoint), [`framing`](Builder::framing), [`protocol`](Builder::protocol), [`tls`](Builder::tls), [`name`](Builder::name), [`resolver`](Builder::resolver) |
/// | when a connection is alive | | [`heartbeat`](Builder::heartbeat), [`ready_when`](Builder::ready_when), [`handshake_timeout`](Builder::handshake_timeout) |
/// | reconnecting | [`reconnect`](Builder::reconnect) ([`Reconnect`]) | [`backoff`](Builder::backoff), [`backoff_factor`](Builder::backoff_factor), [`backoff_floor`](Builder::backoff_floor), [`jitter`](Builder::jitter), [`max_attempts`](Builder::max_attempts), [`cooldown`](Builder::cooldown), [`native_retries`](Builder::native_retries), [`min_stable`](Builder::min_stable), [`config_failure_retry`](Builder::config_failure_retry), [`dns_refresh`](Builder::dns_refresh), [`rng_seed`](Builder::rng_seed) |
/// | delivering frames | [`delivery`](Builder::delivery) ([`Delivery`]) | [`outbox_limits`](Builder::outbox_limits), [`overflow`](Builder::overflow), [`frame_ttl`](Builder::frame_ttl), [`abandon_on_disconnect`](Builder::abandon_on_disconnect), [`window`](Builder::window), [`redelivery`](Builder::redelivery), [`confirm`](Builder::confirm), [`max_losses`](Builder::max_losses), [`batch_bytes`](Builder::batch_bytes), [`spool`](Builder::spool) |
/// | requests | [`requests`](Builder::requests) ([`Requests`]) | [`correlation`](Builder::correlation), [`request_timeout`](Builder::request_timeout), [`request_limits`](Builder::request_limits), [`request_redelivery`](Builder::request_redelivery) |
/// | receiving | | [`events_capacity`](Builder::events_capacity), [`closed_frames_wait`](Builder::closed_frames_wait) |
/// | libzmq's socket | [`socket`](Builder::socket) ([`SocketOptions`]) | [`connect_timeout`](Builder::connect_timeout), [`immediate`](Builder::immediate), [`reconnect_ivl`](Builder::reconnect_ivl), [`reconnect_ivl_max`](Builder::reconnect_ivl_max), [`linger`](Builder::linger), [`hwm`](Builder::hwm), [`tcp_keepalive`](Builder::tcp_keepalive), [`tcp_maxrt`](Builder::tcp_maxrt) |
/// | threads and the process | | [`context`](Builder::context), [`io_pool`](Builder::io_pool), [`looks`](Builder::looks), [`slow_callback`](Builder::slow_callback), [`close_timeout`](Builder::close_timeout) |
///
/// # Examples
/// A link to a line-based service, with a heartbeat, a bounded outbox and a give-up point:
/// ```
/// use std::time::Duration;
/// use relink::{Event, Heartbeat, Link, Overflow, Ping, Predicate};
/// use relink::framing::Lines;
/// # use std::io::{Read, Write};
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let port = listener.local_addr()?.port();
/// # std::thread::spawn(move || {
/// #     let (mut s, _) = listener.accept().unwrap();
/// #     let mut buf = [0u8; 1024];
/// #     while let Ok(n) = s.read(&mut buf) {
/// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
/// #     }
/// # });
///
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
///     .framing(Lines::new())
///     .backoff(Duration::from_millis(100), Duration::from_secs(5))
///     .max_attempts(10)
///     .cooldown(Duration::from_secs(30))
///     .heartbeat(
///         Heartbeat::new(Duration::from_secs(1), Ping::Frame(b"PING".to_vec()))
///             .reply(Predicate::starts_with("PING")),
///     )
///     .outbox_limits(1_000, 1 << 20)
///     .overflow(Overflow::Block(Duration::from_millis(100)))
///     .frame_ttl(Duration::from_secs(10))
///     .build()?;
/// link.send("hello")?;
/// let reply = loop {
///     if let Event::Frame(f) = link.events().recv_timeout(Duration::from_secs(5))? {
///         break f;
///     }
/// };
/// assert_eq!(reply, &b"hello"[..]);
/// link.close(Duration::from_secs(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct Builder {
    endpoints: Vec<String>,
    config: Config,
    context: Option<Context>,
    tls: Option<Tls>,
    io_pool: Option<IoPool>,
    name: Option<String>,
    /// `requests` was called: the link means to make requests.
    requests_said: bool,
}

const MAX_ZMQ_MS: u128 = i32::MAX as u128;

impl Builder {
    pub(crate) fn new(endpoint: &str) -> Builder {
        Builder {
            endpoints: vec![endpoint.to_string()],
            context: None,
            tls: None,
            io_pool: None,
            name: None,
            requests_said: false,
            config: Config {
                core: Settings {
                    endpoints: Vec::new(),
                    framing: BoxedFraming::new(Raw::new()),
                    backoff: BackoffConfig {
                        base: defaults::BACKOFF_BASE,
                        max: defaults::BACKOFF_MAX,
                        factor: defaults::BACKOFF_FACTOR,
                        floor: defaults::BACKOFF_FLOOR,
                        jitter: Jitter::Full,
                    },
                    max_attempts: None,
                    cooldown: defaults::COOLDOWN,
                    native_retries: defaults::NATIVE_RETRIES,
                    proof: ProofOfLife::Connect,
                    min_stable: defaults::MIN_STABLE,
                    heartbeat: None,
                    outbox_frames: defaults::OUTBOX_FRAMES,
                    outbox_bytes: defaults::OUTBOX_BYTES,
                    abandon_on_disconnect: false,
                    dns_refresh: defaults::DNS_REFRESH,
                    batch_bytes: defaults::BATCH_BYTES,
                    // Both follow the socket options; `into_config` sets them once checked.
                    connect_timeout: defaults::CONNECT_TIMEOUT,
                    dial_bound: Duration::ZERO,
                    tls: None,
                    requests: RequestSettings::default(),
                    slow_callback: defaults::SLOW_CALLBACK,
                    // Set by `into_config`: the name given, or the first endpoint.
                    name: Arc::from(""),
                    config_retry: None,
                    window: defaults::WINDOW,
                    redelivery: Redelivery::Resend,
                    answers: Answers::Unknown,
                    confirm: Confirm::tcp(),
                    protocol: None,
                    handshake_timeout: HANDSHAKE_TIMEOUT,
                    max_losses: defaults::MAX_LOSSES,
                },
                rng_seed: None,
                socket: io::SocketOptions {
                    reconnect_ivl: defaults::RECONNECT_IVL,
                    reconnect_ivl_max: Duration::ZERO,
                    immediate: false,
                    connect_timeout: defaults::CONNECT_TIMEOUT,
                    linger: defaults::LINGER,
                    sndhwm: defaults::SNDHWM,
                    rcvhwm: defaults::RCVHWM,
                    keepalive: None,
                    tcp_maxrt: None,
                },
                overflow: Overflow::RejectNew,
                frame_ttl: None,
                spool: None,
                events_capacity: defaults::EVENTS_CAPACITY,
                closed_frames_wait: defaults::CLOSED_FRAMES_WAIT,
                close_timeout: defaults::CLOSE_TIMEOUT,
                resolver: None,
                looks: Looks::Learnt,
            },
        }
    }

    /// The whole reconnect policy at once: every field of [`Reconnect`] (its `Default` is the
    /// builder's). The flat setters ([`backoff`](Builder::backoff),
    /// [`cooldown`](Builder::cooldown), ...) change one field each; called after this, they
    /// change it here.
    ///
    /// See the example on [`Reconnect`].
    pub fn reconnect(mut self, r: Reconnect) -> Builder {
        let core = &mut self.config.core;
        core.backoff.base = r.backoff_base;
        core.backoff.max = r.backoff_max;
        core.backoff.factor = r.backoff_factor;
        core.backoff.floor = r.backoff_floor;
        core.backoff.jitter = r.jitter;
        core.max_attempts = r.max_attempts;
        core.cooldown = r.cooldown;
        core.native_retries = r.native_retries;
        core.min_stable = r.min_stable;
        core.config_retry = r.config_failure_retry;
        core.dns_refresh = r.dns_refresh;
        self
    }

    /// The whole delivery of frames sent at once: every field of [`Delivery`] (its `Default`
    /// is the builder's). The flat setters ([`outbox_limits`](Builder::outbox_limits),
    /// [`overflow`](Builder::overflow), [`confirm`](Builder::confirm), ...) change one field
    /// each; called after this, they change it here.
    ///
    /// See the example on [`Delivery`].
    pub fn delivery(mut self, d: Delivery) -> Builder {
        let core = &mut self.config.core;
        core.outbox_frames = d.outbox_frames;
        core.outbox_bytes = d.outbox_bytes;
        core.abandon_on_disconnect = d.abandon_on_disconnect;
        core.window = d.window;
        core.redelivery = d.redelivery;
        core.confirm = d.confirm;
        core.max_losses = d.max_losses;
        self.config.overflow = d.overflow;
        self.config.frame_ttl = d.frame_ttl;
        self
    }

    /// All of libzmq's socket options at once: every field of [`SocketOptions`] (its
    /// `Default` is the builder's). The flat setters ([`connect_timeout`](Builder::connect_timeout),
    /// [`linger`](Builder::linger), ...) change one field each; called after this, they change
    /// it here.
    ///
    /// See the example on [`SocketOptions`].
    pub fn socket(mut self, o: SocketOptions) -> Builder {
        self.config.socket = io::SocketOptions {
            reconnect_ivl: o.reconnect_ivl,
            reconnect_ivl_max: o.reconnect_ivl_max,
            immediate: o.immediate,
            connect_timeout: o.connect_timeout,
            linger: o.linger,
            sndhwm: o.sndhwm,
            rcvhwm: o.rcvhwm,
            keepalive: o.keepalive,
            tcp_maxrt: o.tcp_maxrt,
        };
        self
    }

    /// Adds another server. Each new attempt goes to the next one, starting from a point and
    /// in an order drawn per link, so a fleet spreads over its servers. Defaults to the one
    /// endpoint given to `Link::builder`.
    ///
    /// # Examples
    /// The endpoints group ([`endpoint`](Builder::endpoint), [`resolver`](Builder::resolver),
    /// [`dns_refresh`](Builder::dns_refresh)): a link with a server that is down and one that is
    /// up ends up on the one that is up.
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    /// # use std::io::{Read, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut buf = [0u8; 1024];
    /// #     while let Ok(n) = s.read(&mut buf) {
    /// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
    /// #     }
    /// # });
    /// # let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let up = format!("tcp://127.0.0.1:{port}"); // a local echo server
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{dead}")) // nobody listens here
    ///     .endpoint(&up)
    ///     .native_retries(0)
    ///     .backoff(Duration::from_millis(10), Duration::from_millis(100))
    ///     .build()?;
    /// let ready = loop {
    ///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         if t.to == State::Ready { break t; }
    ///     }
    /// };
    /// assert_eq!(ready.endpoint, Some(up));
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn endpoint(mut self, endpoint: impl AsRef<str>) -> Builder {
        self.endpoints.push(endpoint.as_ref().to_string());
        self
    }

    /// How frames are cut on the wire: a built-in of [`framing`](crate::framing)
    /// ([`LengthDelimited`](crate::framing::LengthDelimited),
    /// [`Lines`](crate::framing::Lines), [`Delimited`](crate::framing::Delimited),
    /// [`Resp`](crate::framing::Resp), [`Raw`]) or a [`Framing`] of one's own. The link
    /// holds its own copy (cloned per link); the handle checks every frame with
    /// [`Framing::check`] at `send`. Defaults to [`Raw`] chunks.
    pub fn framing<F: Framing + Clone>(mut self, framing: F) -> Builder {
        self.config.core.framing = BoxedFraming::new(framing);
        self
    }

    /// Backoff delays grow from `base` to `max` (before jitter). Defaults to 200 ms .. 8 s.
    ///
    /// # Examples
    /// The backoff group ([`backoff`](Builder::backoff), [`backoff_factor`](Builder::backoff_factor),
    /// [`backoff_floor`](Builder::backoff_floor), [`jitter`](Builder::jitter),
    /// [`max_attempts`](Builder::max_attempts), [`cooldown`](Builder::cooldown),
    /// [`native_retries`](Builder::native_retries), [`rng_seed`](Builder::rng_seed)) says how long a
    /// link waits between attempts, and when it rests:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Jitter, Link, State};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: every dial is refused.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .backoff(Duration::from_millis(20), Duration::from_secs(2)) // 20 ms, 40 ms, 80 ms, ...
    ///     .backoff_factor(2.0)
    ///     .backoff_floor(Duration::from_millis(5))
    ///     .jitter(Jitter::Proportional(0.2)) // each delay within ±20 %
    ///     .max_attempts(3) // then rest in Cooldown
    ///     .cooldown(Duration::from_secs(30))
    ///     .native_retries(0) // every retry waits relink's delay
    ///     .rng_seed(7) // the same delays on every run
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
    pub fn backoff(mut self, base: Duration, max: Duration) -> Builder {
        self.config.core.backoff.base = base;
        self.config.core.backoff.max = max;
        self
    }

    /// Growth of the delay per attempt ([`Metrics::attempt`](crate::Metrics::attempt)).
    /// Defaults to 2.
    ///
    /// See the example on [`Builder::backoff`].
    pub fn backoff_factor(mut self, factor: f64) -> Builder {
        self.config.core.backoff.factor = factor;
        self
    }

    /// No delay is ever shorter than this. Defaults to 10 ms.
    ///
    /// See the example on [`Builder::backoff`].
    pub fn backoff_floor(mut self, floor: Duration) -> Builder {
        self.config.core.backoff.floor = floor;
        self
    }

    /// How delays are randomised. Defaults to [`Jitter::Full`].
    ///
    /// See the example on [`Builder::backoff`].
    pub fn jitter(mut self, jitter: Jitter) -> Builder {
        self.config.core.backoff.jitter = jitter;
        self
    }

    /// Attempts ([`Metrics::attempt`](crate::Metrics::attempt): relink's dials since the last
    /// stable connection, libzmq's own redials not counted) that may fail before the link rests
    /// in Cooldown; each probe after a Cooldown that fails rests again. Defaults to none
    /// (never).
    ///
    /// See the example on [`Builder::backoff`].
    pub fn max_attempts(mut self, n: u32) -> Builder {
        self.config.core.max_attempts = Some(n);
        self
    }

    /// How long Cooldown lasts before a probe. Defaults to 60 s.
    ///
    /// See the example on [`Builder::backoff`].
    pub fn cooldown(mut self, period: Duration) -> Builder {
        self.config.core.cooldown = period;
        self
    }

    /// Failed connects of an outage left to libzmq's own redial (`reconnect_ivl`, the fast path
    /// for a brief blip) before relink stops it and waits its own jittered delay between every
    /// later attempt. Counted from the last stable connection. Defaults to 1; 0 gives every
    /// retry to relink.
    ///
    /// See the example on [`Builder::backoff`].
    pub fn native_retries(mut self, n: u32) -> Builder {
        self.config.core.native_retries = n;
        self
    }

    /// A fixed seed for the backoff's random draws, for tests. Defaults to OS entropy.
    ///
    /// See the example on [`Builder::backoff`].
    pub fn rng_seed(mut self, seed: u64) -> Builder {
        self.config.rng_seed = Some(seed);
        self
    }

    /// What makes a connection Ready. Defaults to [`ProofOfLife::Connect`].
    ///
    /// # Examples
    /// The proof-of-life group ([`ready_when`](Builder::ready_when),
    /// [`min_stable`](Builder::min_stable), [`heartbeat`](Builder::heartbeat)) says when a
    /// connection counts as alive, and when as dead:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Cause, Event, Handshake, Heartbeat, Link, Ping, Predicate, State};
    /// use relink::framing::Lines;
    /// # use std::io::{Read, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut buf = [0u8; 1024];
    /// #     while let Ok(n) = s.read(&mut buf) {
    /// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
    /// #     }
    /// # });
    ///
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
    ///     .framing(Lines::new())
    ///     // Ready once the peer answers HELLO; the reply is not delivered.
    ///     .protocol(Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|r| r == b"HELLO")))
    ///     .min_stable(Duration::from_millis(500))
    ///     .heartbeat(
    ///         Heartbeat::new(Duration::from_millis(50), Ping::Frame(b"PING".to_vec()))
    ///             .reply(Predicate::starts_with("PING")),
    ///     )
    ///     .build()?;
    /// let ready = loop {
    ///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         if t.to == State::Ready { break t; }
    ///     }
    /// };
    /// assert_eq!((ready.from, ready.cause), (State::Connected, Cause::Alive));
    /// // The echoed pings are recognised as replies, not delivered: no event comes.
    /// assert!(link.events().recv_timeout(Duration::from_millis(300)).is_err());
    /// let m = link.metrics();
    /// assert!(m.heartbeats_sent >= 1 && m.last_rtt.is_some());
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ready_when(mut self, proof: ProofOfLife) -> Builder {
        self.config.core.proof = proof;
        self
    }

    /// How long a Ready connection must last before the attempt counter resets; a drop
    /// sooner counts as a failure (flap guard). Defaults to 1 s. Zero resets on Ready.
    ///
    /// See the example on [`Builder::ready_when`].
    pub fn min_stable(mut self, d: Duration) -> Builder {
        self.config.core.min_stable = d;
        self
    }

    /// Speaks TLS on every connection: the server is verified against the trust roots of `tls`
    /// and the server name (the endpoint's host name unless
    /// [`Tls::server_name`](crate::Tls::server_name) is set; required for an IP endpoint).
    /// Every connection gets a fresh session; its handshake completes before any hello, ping
    /// or frame leaves, and a failed handshake fails the attempt with
    /// [`Cause::Tls`](crate::Cause::Tls). There is never a plaintext fallback.
    ///
    /// Defaults to none (plain TCP).
    pub fn tls(mut self, tls: Tls) -> Builder {
        self.tls = Some(tls);
        self
    }

    /// The application heartbeat. Defaults to none.
    ///
    /// See the example on [`Builder::ready_when`].
    pub fn heartbeat(mut self, hb: Heartbeat) -> Builder {
        self.config.core.heartbeat = Some(hb);
        self
    }

    /// Bound on a connection attempt, including name resolution (also given to libzmq as
    /// ZMQ_CONNECT_TIMEOUT). Defaults to 5 s.
    ///
    /// # Examples
    /// The socket group ([`connect_timeout`](Builder::connect_timeout),
    /// [`immediate`](Builder::immediate), [`reconnect_ivl`](Builder::reconnect_ivl),
    /// [`reconnect_ivl_max`](Builder::reconnect_ivl_max), [`linger`](Builder::linger),
    /// [`hwm`](Builder::hwm), [`tcp_keepalive`](Builder::tcp_keepalive),
    /// [`tcp_maxrt`](Builder::tcp_maxrt)) is handed to libzmq and the kernel:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Keepalive, Link, State};
    /// use relink::error::ConfigError;
    /// # use std::io::{Read, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut buf = [0u8; 1024];
    /// #     while let Ok(n) = s.read(&mut buf) {
    /// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
    /// #     }
    /// # });
    ///
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
    ///     .connect_timeout(Duration::from_secs(2))
    ///     .immediate(false)
    ///     .reconnect_ivl(Duration::from_millis(100))
    ///     .reconnect_ivl_max(Duration::from_secs(1))
    ///     .linger(Duration::from_millis(100))
    ///     .hwm(128, 128)
    ///     .tcp_keepalive(Keepalive::new(Duration::from_secs(30)))
    ///     .tcp_maxrt(Duration::from_secs(10))
    ///     .build()?;
    /// while link.state() != State::Ready {
    ///     link.events().recv_timeout(Duration::from_secs(5))?;
    /// }
    /// link.close(Duration::from_millis(100));
    ///
    /// // Checked once, in build(): libzmq's redial gap must not shrink as it grows.
    /// let bad = Link::builder("tcp://127.0.0.1:6379")
    ///     .reconnect_ivl(Duration::from_secs(1))
    ///     .reconnect_ivl_max(Duration::from_millis(100))
    ///     .build();
    /// assert!(matches!(bad, Err(ConfigError::MaxBelowBase { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect_timeout(mut self, d: Duration) -> Builder {
        self.config.socket.connect_timeout = d;
        self
    }

    /// libzmq's ZMQ_IMMEDIATE. With `true`, libzmq never redials a STREAM endpoint after a
    /// drop, so relink always does; and at the peer's close libzmq drops what it had received
    /// and relink had not read yet (at most its receive queue, [`hwm`](Builder::hwm)'s
    /// `rcvhwm` messages), uncounted: with `false` all of it is delivered. Defaults to false.
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn immediate(mut self, yes: bool) -> Builder {
        self.config.socket.immediate = yes;
        self
    }

    /// libzmq's ZMQ_RECONNECT_IVL: the gap of its own redial. Defaults to 100 ms.
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn reconnect_ivl(mut self, d: Duration) -> Builder {
        self.config.socket.reconnect_ivl = d;
        self
    }

    /// libzmq's ZMQ_RECONNECT_IVL_MAX (0: no growth). Defaults to 0.
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn reconnect_ivl_max(mut self, d: Duration) -> Builder {
        self.config.socket.reconnect_ivl_max = d;
        self
    }

    /// libzmq's ZMQ_LINGER, always bounded. Defaults to 200 ms.
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn linger(mut self, d: Duration) -> Builder {
        self.config.socket.linger = d;
        self
    }

    /// libzmq's send and receive high-water marks, in messages. Defaults to 64 and 64.
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn hwm(mut self, sndhwm: i32, rcvhwm: i32) -> Builder {
        self.config.socket.sndhwm = sndhwm;
        self.config.socket.rcvhwm = rcvhwm;
        self
    }

    /// TCP keepalive (kernel backstop for idle links). Defaults to the system's (off).
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn tcp_keepalive(mut self, k: Keepalive) -> Builder {
        self.config.socket.keepalive = Some(k);
        self
    }

    /// TCP_USER_TIMEOUT (libzmq's ZMQ_TCP_MAXRT): unacknowledged data older than this resets
    /// the connection (kernel backstop for links that send). Defaults to the system's.
    ///
    /// See the example on [`Builder::connect_timeout`].
    pub fn tcp_maxrt(mut self, d: Duration) -> Builder {
        self.config.socket.tcp_maxrt = Some(d);
        self
    }

    /// Outbox limits: frames waiting to be sent or to be confirmed, in number and in bytes.
    /// Defaults to 100 000 frames and 16 MiB. A frame counts until the peer's TCP has
    /// acknowledged it, so the frame limit must cover what a fast link has on the wire and in
    /// the window: at 64 B frames, 10 000 held one producer's `send` to 0.8 × the speed it
    /// has at 30 000 or more (the throughput bench).
    ///
    /// # Examples
    /// The outbox group ([`outbox_limits`](Builder::outbox_limits), [`overflow`](Builder::overflow),
    /// [`frame_ttl`](Builder::frame_ttl), [`abandon_on_disconnect`](Builder::abandon_on_disconnect))
    /// bounds what waits to be sent; every frame ends in one reported outcome:
    /// ```
    /// use std::time::Duration;
    /// use relink::{AbandonReason, Event, Link, Overflow};
    /// use relink::error::SendError;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: frames wait in the outbox.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .outbox_limits(2, 64 * 1024)
    ///     .overflow(Overflow::RejectNew)
    ///     .frame_ttl(Duration::from_secs(60))
    ///     .abandon_on_disconnect(true)
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
    pub fn outbox_limits(mut self, frames: usize, bytes: usize) -> Builder {
        self.config.core.outbox_frames = frames;
        self.config.core.outbox_bytes = bytes;
        self
    }

    /// What `send` does at the outbox limit. Defaults to [`Overflow::RejectNew`].
    ///
    /// See the example on [`Builder::outbox_limits`]. and on [`Overflow`].
    pub fn overflow(mut self, policy: Overflow) -> Builder {
        self.config.overflow = policy;
        self
    }

    /// Default lifetime of a queued frame; an unsent frame older than this is abandoned as
    /// Expired. Defaults to none (frames wait until sent, closed or dropped).
    ///
    /// See the example on [`Builder::outbox_limits`]. and on [`Link::send_with`](crate::Link::send_with), whose
    /// [`SendOptions::ttl`](crate::SendOptions::ttl) overrides it for one call.
    pub fn frame_ttl(mut self, ttl: Duration) -> Builder {
        self.config.frame_ttl = Some(ttl);
        self
    }

    /// Keeps every frame admitted by `send` in a [`Spool`](crate::Spool) on disk until it is
    /// confirmed (or abandoned and reported), and sends what a spool holds first at the next
    /// start. Defaults to none (the outbox lives in memory only).
    ///
    /// A spooled link numbers its frames ([`Link::send_numbered`](crate::Link::send_numbered));
    /// its [`Producer`](crate::Producer) refuses frames (`SendError::Spool`), since its ring
    /// bypasses the spool; requests are not spooled. The outbox limits bound the spool too.
    /// See the guide's "Spool" section and the example on [`Spool`](crate::Spool).
    pub fn spool(mut self, spool: crate::spool::Spool) -> Builder {
        self.config.spool = Some(spool);
        self
    }

    /// Abandon queued frames (reason ConnectionLost) when a connection drops, instead of
    /// keeping them for the next one. Defaults to false.
    ///
    /// See the example on [`Builder::outbox_limits`].
    pub fn abandon_on_disconnect(mut self, yes: bool) -> Builder {
        self.config.core.abandon_on_disconnect = yes;
        self
    }

    /// Capacity of the event channel; when it is full, the link stops reading the socket.
    /// Defaults to 1024.
    ///
    /// # Examples
    /// The events group ([`events_capacity`](Builder::events_capacity),
    /// [`close_timeout`](Builder::close_timeout)): dropping the last [`Link`](crate::Link)
    /// closes the link (and its spool, if it has one) whatever clones of its
    /// [`Events`](crate::Events) live on, and their stream ends with the transition to Closed.
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    /// # use std::io::{Read, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut buf = [0u8; 1024];
    /// #     while let Ok(n) = s.read(&mut buf) {
    /// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
    /// #     }
    /// # });
    ///
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
    ///     .events_capacity(64) // 64 events waiting: the link stops reading the socket
    ///     .close_timeout(Duration::from_millis(200))
    ///     .build()?;
    /// let events = link.events().clone();
    /// while link.state() != State::Ready {
    ///     events.recv_timeout(Duration::from_secs(5))?;
    /// }
    /// drop(link); // the last Link: closes, bounded by close_timeout; `events` lives on
    /// let mut last = None;
    /// while let Ok(ev) = events.recv() {
    ///     last = Some(ev);
    /// }
    /// assert!(matches!(last, Some(Event::State(t)) if t.to == State::Closed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events_capacity(mut self, n: usize) -> Builder {
        self.config.events_capacity = n;
        self
    }

    /// How long the frames of a connection the peer closed may wait for the application to
    /// take them. Defaults to 30 s.
    ///
    /// When the peer closes, the link reads what is left of the connection at once, whatever
    /// the application's pace (at most libzmq's receive queue, [`hwm`](Builder::hwm)'s
    /// `rcvhwm` messages of up to 8 KiB), and acts on the close behind its last frame. Frames
    /// that find the event channel full wait for room; those still waiting after this long
    /// are dropped, reported in one
    /// [`LinkError::FramesUnread`](crate::error::LinkError::FramesUnread) and counted in
    /// [`Metrics::frames_unread`](crate::Metrics::frames_unread). The bound keeps the memory of
    /// an application that stops taking events while its peer keeps closing connections
    /// finite: at most what the closes of one such period read.
    ///
    /// See the example on [`Builder::events_capacity`].
    pub fn closed_frames_wait(mut self, d: Duration) -> Builder {
        self.config.closed_frames_wait = d;
        self
    }

    /// How the threads that wait on the link wait: look for a while before sleeping
    /// ([`Looks::Learnt`], the default: the shortest round trip) or sleep at once
    /// ([`Looks::Never`]: less CPU per request and reply, a longer round trip). It applies to
    /// the application's blocking receives and requests on this link, and to the IO thread's
    /// looks after this link's passes.
    ///
    /// See the example on [`Looks`].
    pub fn looks(mut self, looks: Looks) -> Builder {
        self.config.looks = looks;
        self
    }

    /// Bound on the close run when the last handle is dropped. Defaults to 1 s.
    ///
    /// See the example on [`Builder::events_capacity`].
    pub fn close_timeout(mut self, d: Duration) -> Builder {
        self.config.close_timeout = d;
        self
    }

    /// How often the name in use is resolved again, in the background (the next dial finds
    /// the fresh answer); a failed dial also asks again. Defaults to 60 s.
    ///
    /// See the example on [`Builder::resolver`].
    pub fn dns_refresh(mut self, d: Duration) -> Builder {
        self.config.core.dns_refresh = d;
        self
    }

    /// Largest zmq message built by coalescing small frames. Defaults to 256 KiB: at 64 B
    /// frames, a quarter as many messages as 64 KiB cost libzmq's thread a quarter of the
    /// wake-ups and writes (one producer's `send` ran 1.15 × as fast in the throughput bench).
    pub fn batch_bytes(mut self, n: usize) -> Builder {
        self.config.core.batch_bytes = n;
        self
    }

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
    /// bytes. See the example on [`Builder::redelivery`].
    pub fn window(mut self, bytes: usize) -> Builder {
        self.config.core.window = bytes;
        self
    }

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
    ///     .window(256 * 1024)
    ///     .redelivery(Redelivery::Report)
    ///     .build()?;
    /// link.send("INCR hits\r\n")?;
    /// let m = link.close(Duration::from_millis(50));
    /// assert_eq!(m.unaccounted(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn redelivery(mut self, policy: Redelivery) -> Builder {
        self.config.core.redelivery = policy;
        self
    }

    /// What the protocol does at the edges of each connection: the frames that open it and
    /// the verdict on the peer's first frames, the link's own answers to the peer's frames,
    /// the ping and its pong, which frames the peer answers, how a resent frame is marked. See
    /// [`Protocol`]. Defaults to none: no opening (see [`ready_when`](Builder::ready_when)), the
    /// [`Heartbeat`](crate::Heartbeat)'s ping, every frame delivered.
    ///
    /// With a protocol, the heartbeat starts once the link is Ready. `build()` asks a clone of
    /// the protocol for its opening and its ping and refuses a frame the framing cannot write
    /// ([`ConfigError::Unencodable`](crate::error::ConfigError::Unencodable)), and a protocol
    /// on a framing that does not cut frames. [`Handshake`](crate::Handshake)
    /// is the simplest protocol that waits for the peer: hello frames and a predicate on the
    /// reply.
    pub fn protocol<P: Protocol + Clone>(mut self, protocol: P) -> Builder {
        self.config.core.protocol = Some(BoxedProtocol::new(protocol));
        self
    }

    /// How long the link waits for the [`Protocol`]'s verdict on a new connection
    /// ([`Opening::wait`](crate::Opening::wait)) before it closes it with cause
    /// `handshake-timeout`. Defaults to 5 s.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Builder {
        self.config.core.handshake_timeout = timeout;
        self
    }

    /// What confirms a frame: the peer's TCP ([`Confirm::tcp`], the default) or a reply of
    /// its application ([`Confirm::reply`], which needs to know what the peer answers: a
    /// [`Protocol`] whose [`answers`](Protocol::answers) says it, or a heartbeat with a
    /// `reply`, whose ping is then the barrier). See [`Confirm`].
    pub fn confirm(mut self, confirm: Confirm) -> Builder {
        self.config.core.confirm = confirm;
        self
    }

    /// A frame or request in flight at `n` connection losses in a row (a *poison* frame that
    /// makes the peer drop the connection, or a peer that never lives long enough to take it)
    /// is abandoned with [`AbandonReason::Poison`](crate::AbandonReason::Poison), and what
    /// waits behind it moves on. Defaults to 5; at least 1.
    pub fn max_losses(mut self, n: u32) -> Builder {
        self.config.core.max_losses = n;
        self
    }

    /// How host names are resolved: `resolve(host, port)` returns the addresses or a short
    /// reason, in place of the system resolver (for tests, or a service-discovery lookup).
    /// Defaults to the system resolver (getaddrinfo). Either runs on relink's resolver
    /// threads, never on an IO thread.
    ///
    /// A resolver that panics fails that dial: the panic is caught on the resolver thread (which
    /// keeps serving), reported in an [`Event::Error`](crate::Event) with
    /// [`LinkError::CallbackPanicked`](crate::error::LinkError::CallbackPanicked), and the link backs
    /// off with cause [`CallbackPanic`](crate::Cause::CallbackPanic).
    ///
    /// # Examples
    /// Names from a service registry instead of DNS:
    /// ```
    /// use std::net::SocketAddr;
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    /// # use std::io::{Read, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut buf = [0u8; 1024];
    /// #     while let Ok(n) = s.read(&mut buf) {
    /// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
    /// #     }
    /// # });
    ///
    /// let registry = |host: &str, port| match host {
    ///     "cache.internal" => Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))]),
    ///     _ => Err(format!("{host}: not registered")),
    /// };
    /// let link = Link::builder(&format!("tcp://cache.internal:{port}")) // a local echo server
    ///     .resolver(registry)
    ///     .dns_refresh(Duration::from_secs(10)) // ask the registry again every 10 s
    ///     .build()?;
    /// let ready = loop {
    ///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         if t.to == State::Ready { break t; }
    ///     }
    /// };
    /// assert_eq!(ready.endpoint, Some(format!("tcp://127.0.0.1:{port}")));
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolver(
        mut self,
        resolve: impl Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync + 'static,
    ) -> Builder {
        self.config.resolver = Some(Resolver::new(resolve));
        self
    }

    /// The libzmq context to share. Defaults to [`Context::global`].
    ///
    /// See the example on [`Context`].
    pub fn context(mut self, ctx: &Context) -> Builder {
        self.context = Some(ctx.clone());
        self
    }

    /// The IO threads the link runs on, shared with the other links given the same pool.
    /// Defaults to [`IoPool::global`] (one thread per core, shared by every link that is not
    /// given a pool): a link on it runs as fast as on a thread of its own (docs/benchmarks.md,
    /// "Many links", shows both from one run), and a program with a thousand links does not
    /// start a thousand threads. A thread of the link's own is one call away:
    /// `.io_pool(&IoPool::new(1)?)` (the thread exits once its last link is closed); use one
    /// for a link whose callbacks may be slow, so that they hold no other link's IO thread.
    ///
    /// ```no_run
    /// use relink::{IoPool, Link};
    ///
    /// # fn main() -> Result<(), relink::error::ConfigError> {
    /// let own = Link::builder("tcp://127.0.0.1:7000")
    ///     .io_pool(&IoPool::new(1)?)
    ///     .build()?;
    /// # drop(own);
    /// # Ok(())
    /// # }
    /// ```
    pub fn io_pool(mut self, pool: &IoPool) -> Builder {
        self.io_pool = Some(pool.clone());
        self
    }

    /// A call into application code (the framing's decode, encode or reset, a reply or
    /// handshake predicate, the resolver) that takes this long or longer is slow: it is
    /// logged at warn naming the link, the callback and the time it took, counted in
    /// [`Metrics::slow_callbacks`](crate::Metrics::slow_callbacks) and
    /// [`slowest_callback`](crate::Metrics::slowest_callback), and reported in an
    /// [`Event::Error`](crate::Event) with [`LinkError::SlowCallback`](crate::error::LinkError)
    /// (the warn line and the event at most once per link per 10 s). A callback on an IO
    /// thread holds every link of that thread for as long as it runs. Defaults to 100 ms.
    pub fn slow_callback(mut self, threshold: Duration) -> Builder {
        self.config.core.slow_callback = threshold;
        self
    }

    /// The link's name: every log line about the link carries it (`relink[NAME]: Ready ->
    /// Backoff (peer-closed) ...`), and [`Link::name`](crate::Link::name),
    /// [`Events::name`](crate::Events::name) and the pool's view
    /// ([`IoPool::view`](crate::IoPool::view)) give it back. Names need not be unique.
    /// Defaults to the endpoint given to [`Link::builder`](crate::Link::builder).
    ///
    /// # Examples
    /// ```
    /// use relink::Link;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let endpoint = format!("tcp://127.0.0.1:{port}");
    /// let named = Link::builder(&endpoint).name("meter-17").build()?;
    /// let unnamed = Link::builder(&endpoint).build()?;
    /// assert_eq!(named.name(), "meter-17");
    /// assert_eq!(unnamed.name(), endpoint);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// The wait before the next attempt after a failure no retry can fix until a
    /// configuration changes ([`Cause::TlsRejected`](crate::Cause::TlsRejected): the server's
    /// certificate is not valid for the name or has an unknown issuer, or the server refused
    /// ours), instead of the backoff meant for restarts: each attempt is a full handshake
    /// against the server, and the answer will be the same. Defaults to the
    /// [`cooldown`](Builder::cooldown) period (60 s by default).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, Tls};
    ///
    /// let link = Link::builder("tcp://gateway.example:6380")
    ///     .tls(Tls::new())
    ///     .backoff(Duration::from_millis(50), Duration::from_secs(2)) // for restarts
    ///     .config_failure_retry(Duration::from_secs(300)) // for a wrong certificate
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn config_failure_retry(mut self, wait: Duration) -> Builder {
        self.config.core.config_retry = Some(wait);
        self
    }

    /// Checks every setting (check.rs); no libzmq object is made.
    pub(crate) fn into_config(self) -> Result<Config, ConfigError> {
        check::config(self)
    }

    /// The checked configuration, with the context and the IO pool the link starts on (the
    /// global ones unless the builder names its own).
    pub(crate) fn validate(self) -> Result<(Config, Context, IoPool), ConfigError> {
        let context = self.context.clone();
        let pool = self.io_pool.clone();
        let config = self.into_config()?;
        let context = match context {
            Some(ctx) => ctx,
            None => Context::global()?,
        };
        let pool = match pool {
            Some(pool) => pool,
            None => IoPool::global()?,
        };
        Ok((config, context, pool))
    }
}

/// Request and reply settings ([`Link::request`](crate::Link::request)).
impl Builder {
    /// How replies are matched to requests. Defaults to [`Correlation::in_order`] (every
    /// inbound frame answers the oldest outstanding request); [`Correlation::resp`] for redis.
    ///
    /// # Examples
    /// ```
    /// use relink::framing::Resp;
    /// use relink::{Correlation, Link};
    ///
    /// let link = Link::builder("tcp://127.0.0.1:6379")
    ///     .framing(Resp::new())
    ///     .correlation(Correlation::resp())
    ///     .build()?;
    /// # link.close(std::time::Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn correlation(mut self, correlation: Correlation) -> Builder {
        self.config.core.requests.correlation = correlation;
        self.requests_said = true;
        self
    }

    /// Every request setting at once: every field of [`Requests`] (its `Default` is the
    /// builder's). The flat setters ([`correlation`](Builder::correlation),
    /// [`request_timeout`](Builder::request_timeout), ...) change one field each; called after
    /// this, they change it here.
    ///
    /// See the example on [`Requests`].
    pub fn requests(mut self, r: Requests) -> Builder {
        let q = &mut self.config.core.requests;
        q.correlation = r.correlation;
        q.timeout = r.timeout;
        q.max_frames = r.limit_frames;
        q.max_bytes = r.limit_bytes;
        q.redelivery = r.redelivery;
        self.requests_said = true;
        self
    }

    /// A request's deadline, counted from the call (time queued during an outage counts),
    /// unless the call gives its own ([`Link::request_within`](crate::Link::request_within)).
    /// Defaults to 5 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Builder {
        self.config.core.requests.timeout = timeout;
        self
    }

    /// The limits of outstanding requests (queued or written, not answered): the pipelining
    /// depth, in requests and in their bytes (one request larger than `bytes` is admitted
    /// alone). Past it, the [`Overflow`] policy applies: `RejectNew` refuses the request
    /// ([`RequestError::Full`](crate::error::RequestError::Full)), `DropOldest` abandons the oldest
    /// unsent one, `Block(t)` lets it wait up to `t` for room, in line in the IO thread (the
    /// call itself never blocks). Defaults to 1024 requests, 4 MiB.
    pub fn request_limits(mut self, requests: usize, bytes: usize) -> Builder {
        self.config.core.requests.max_frames = requests;
        self.config.core.requests.max_bytes = bytes;
        self
    }

    /// What becomes of requests written on a connection that drops before their reply.
    /// Defaults to [`Redelivery::Report`] (they fail as "may have been processed").
    pub fn request_redelivery(mut self, policy: Redelivery) -> Builder {
        self.config.core.requests.redelivery = policy;
        self
    }
}
