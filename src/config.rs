//! The builder, every setting with its default, and the checks `build()` makes.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::codec::Codec;
use crate::error::ConfigError;
use crate::ffi::RawContext;

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
    pub const OUTBOX_FRAMES: usize = 10_000;
    /// Outbox limit in bytes.
    pub const OUTBOX_BYTES: usize = 16 * 1024 * 1024;
    /// Capacity of the event channel.
    pub const EVENTS_CAPACITY: usize = 1024;
    /// Bound on the close run by dropping the last handle.
    pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
    /// Silent heartbeat intervals tolerated before a connection is declared dead.
    pub const MAX_MISSED: u32 = 2;
    /// Handshake reply timeout.
    pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long a DNS answer is used before it is asked again.
    pub const DNS_REFRESH: Duration = Duration::from_secs(60);
    /// Largest zmq message relink builds by coalescing frames.
    pub const BATCH_BYTES: usize = 64 * 1024;
    /// Sockets a relink context allows (libzmq's default is 1023).
    pub const MAX_SOCKETS: u32 = 16_384;
}

/// Where a link connects: `tcp://host:port`.
///
/// The host is an IPv4 literal, a bracketed IPv6 literal (`tcp://[::1]:6379`) or a name, which
/// relink resolves itself, off every IO thread (libzmq would block its own IO thread on it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub(crate) host: Host,
    pub(crate) port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Endpoint {
    /// Parses `tcp://host:port`.
    ///
    /// # Examples
    /// ```
    /// let e = relink::Endpoint::parse("tcp://127.0.0.1:6379").unwrap();
    /// assert_eq!(e.to_string(), "tcp://127.0.0.1:6379");
    /// assert!(relink::Endpoint::parse("127.0.0.1:6379").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Endpoint, ConfigError> {
        let bad = |reason| ConfigError::BadEndpoint {
            endpoint: s.to_string(),
            reason,
        };
        let rest = s
            .strip_prefix("tcp://")
            .ok_or_else(|| bad("must start with tcp://"))?;
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad("missing :port"))?;
            let ip: IpAddr = addr.parse().map_err(|_| bad("bad IPv6 address"))?;
            if !ip.is_ipv6() {
                return Err(bad("bad IPv6 address"));
            }
            (Host::Ip(ip), port)
        } else {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("missing :port"))?;
            if host.is_empty() {
                return Err(bad("empty host"));
            }
            if host == "*" {
                return Err(bad("a wildcard host cannot be connected to"));
            }
            if host.contains(':') {
                return Err(bad("an IPv6 address must be in brackets"));
            }
            match host.parse::<IpAddr>() {
                Ok(ip) => (Host::Ip(ip), port),
                Err(_) => {
                    let valid = host.len() <= 253
                        && host.split('.').all(|label| {
                            !label.is_empty()
                                && label.len() <= 63
                                && label
                                    .bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        });
                    if !valid {
                        return Err(bad("bad host name"));
                    }
                    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                        return Err(bad("bad IPv4 address"));
                    }
                    (Host::Name(host.to_ascii_lowercase()), port)
                }
            }
        };
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("port must be a number"));
        }
        let port: u16 = port.parse().map_err(|_| bad("port out of range"))?;
        if port == 0 {
            return Err(bad("port 0 cannot be connected to"));
        }
        Ok(Endpoint { host, port })
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as written (without brackets).
    pub fn host(&self) -> String {
        match &self.host {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "tcp://[{ip}]:{}", self.port),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "tcp://{ip}:{}", self.port),
            Host::Name(n) => write!(f, "tcp://{n}:{}", self.port),
        }
    }
}

/// How the backoff delay is randomised.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform in `[floor, d]` where `d` is the exponential delay: the fewest total attempts and
    /// the flattest reconnect storm. The default.
    Full,
    /// Uniform in `d × [1 − x, 1 + x]`, `x` in `(0, 1]`.
    Proportional(f64),
    /// "Decorrelated": uniform in `[base, previous × 3]`, capped at max.
    Decorrelated,
    /// No randomness: exactly `d`. Only for tests and single clients; a fleet reconnects in
    /// lockstep with it.
    None,
}

/// What makes a Connected link Ready (proof of life).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ProofOfLife {
    /// The TCP connect itself. The default. (The attempt counter still resets only after
    /// `min_stable`.)
    Connect,
    /// The first bytes received from the peer.
    Inbound,
    /// A reply accepted by `accept` to the `hello` frames sent on every connect, within
    /// `timeout`.
    Handshake {
        /// Frames sent (through the codec) first on every connection.
        hello: Vec<Vec<u8>>,
        /// Tells whether a decoded inbound frame is the reply. The reply is not delivered to
        /// the application.
        accept: Predicate,
        /// How long to wait for the reply before the connection counts as failed.
        timeout: Duration,
    },
}

impl ProofOfLife {
    /// A handshake with the default timeout (5 s).
    pub fn handshake(
        hello: Vec<Vec<u8>>,
        accept: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
    ) -> ProofOfLife {
        ProofOfLife::Handshake {
            hello,
            accept: Predicate::new(accept),
            timeout: defaults::HANDSHAKE_TIMEOUT,
        }
    }
}

/// A shareable test on a frame (`Fn(&[u8]) -> bool`).
#[derive(Clone)]
pub struct Predicate(pub(crate) Arc<PredicateFn>);

type PredicateFn = dyn Fn(&[u8]) -> bool + Send + Sync;

impl Predicate {
    /// Wraps a closure.
    pub fn new(f: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> Predicate {
        Predicate(Arc::new(f))
    }

    /// A predicate that accepts frames starting with `prefix`.
    pub fn starts_with(prefix: impl Into<Vec<u8>>) -> Predicate {
        let prefix = prefix.into();
        Predicate::new(move |frame| frame.starts_with(&prefix))
    }

    pub(crate) fn test(&self, frame: &[u8]) -> bool {
        (self.0)(frame)
    }
}

impl fmt::Debug for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Predicate(..)")
    }
}

/// Resolves a host name to its addresses; replaces the system resolver (getaddrinfo) for a
/// link, for tests or for a service-discovery lookup. Runs on relink's resolver threads.
#[derive(Clone)]
pub struct Resolver(pub(crate) Arc<ResolverFn>);

type ResolverFn = dyn Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync;

impl Resolver {
    /// Wraps a closure: `(host, port) -> addresses` or a short reason.
    pub fn new(
        f: impl Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync + 'static,
    ) -> Resolver {
        Resolver(Arc::new(f))
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolver(..)")
    }
}

/// The heartbeat's ping.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ping {
    /// Bytes written as they are, whatever the codec (e.g. `PING\r\n` to redis-server).
    Raw(Vec<u8>),
    /// A frame encoded by the link's codec.
    Frame(Vec<u8>),
}

/// The application heartbeat: the only way to notice a peer that is half-open or stopped
/// (libzmq runs no heartbeat on STREAM sockets).
///
/// Any inbound byte counts as life. A connection silent for `interval × (max_missed + 1)` is
/// declared dead, closed and counted as a failure.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{Heartbeat, Ping, Predicate};
/// let hb = Heartbeat::new(Duration::from_secs(1), Ping::Raw(b"PING\r\n".to_vec()))
///     .max_missed(2)
///     .reply(Predicate::starts_with(&b"+PONG"[..]));
/// assert_eq!(hb.bound(), Duration::from_secs(3));
/// ```
#[derive(Clone, Debug)]
pub struct Heartbeat {
    pub(crate) interval: Duration,
    pub(crate) max_missed: u32,
    pub(crate) ping: Ping,
    pub(crate) idle_only: bool,
    pub(crate) reply: Option<Predicate>,
}

impl Heartbeat {
    /// A ping every `interval`. `max_missed` defaults to 2, `idle_only` to false, no reply
    /// predicate.
    pub fn new(interval: Duration, ping: Ping) -> Heartbeat {
        Heartbeat {
            interval,
            max_missed: defaults::MAX_MISSED,
            ping,
            idle_only: false,
            reply: None,
        }
    }

    /// Silent intervals tolerated before the verdict. Defaults to 2.
    pub fn max_missed(mut self, n: u32) -> Heartbeat {
        self.max_missed = n;
        self
    }

    /// Ping only when nothing was sent for an interval. Defaults to false.
    pub fn idle_only(mut self, yes: bool) -> Heartbeat {
        self.idle_only = yes;
        self
    }

    /// Recognises the peer's reply to a ping, to measure the round trip; recognised replies
    /// are not delivered to the application. Defaults to none.
    pub fn reply(mut self, p: Predicate) -> Heartbeat {
        self.reply = Some(p);
        self
    }

    /// The longest a dead peer goes unnoticed: `interval × (max_missed + 1)`.
    pub fn bound(&self) -> Duration {
        self.interval
            .saturating_mul(self.max_missed.saturating_add(1))
    }
}

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

/// TCP keepalive, a kernel backstop: probes an idle connection and resets it when `count`
/// probes go unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is reset.
    pub count: u32,
}

/// A libzmq context that links share. Every link uses three of its sockets.
///
/// By default all links of a process share one (`Context::global()`), so a thousand links do
/// not start a thousand libzmq IO threads.
#[derive(Clone, Debug)]
pub struct Context {
    pub(crate) raw: Arc<RawContext>,
}

impl Context {
    /// A new context allowing `max_sockets` sockets (three per link).
    pub fn with_max_sockets(max_sockets: u32) -> Result<Context, ConfigError> {
        let raw = RawContext::new(max_sockets).map_err(|e| ConfigError::Zmq(e.to_string()))?;
        Ok(Context { raw: Arc::new(raw) })
    }

    /// The process-wide context (16384 sockets: about 5000 links; each link also needs about
    /// five file descriptors).
    pub fn global() -> Result<Context, ConfigError> {
        static GLOBAL: OnceLock<Result<Context, ConfigError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Context::with_max_sockets(defaults::MAX_SOCKETS))
            .clone()
    }
}

/// The libzmq socket options a link sets before it connects.
#[derive(Clone, Debug)]
pub(crate) struct SocketOptions {
    pub reconnect_ivl: Duration,
    pub reconnect_ivl_max: Duration,
    pub immediate: bool,
    pub connect_timeout: Duration,
    pub linger: Duration,
    pub sndhwm: i32,
    pub rcvhwm: i32,
    pub keepalive: Option<Keepalive>,
    pub tcp_maxrt: Option<Duration>,
}

/// Everything the backoff policy needs.
#[derive(Clone, Debug)]
pub(crate) struct BackoffConfig {
    pub base: Duration,
    pub max: Duration,
    pub factor: f64,
    pub floor: Duration,
    pub jitter: Jitter,
}

/// The validated configuration of one link.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub endpoints: Vec<Endpoint>,
    pub codec: Codec,
    pub backoff: BackoffConfig,
    pub max_attempts: Option<u32>,
    pub cooldown: Duration,
    pub native_retries: u32,
    pub rng_seed: Option<u64>,
    pub proof: ProofOfLife,
    pub min_stable: Duration,
    pub heartbeat: Option<Heartbeat>,
    pub socket: SocketOptions,
    pub outbox_frames: usize,
    pub outbox_bytes: usize,
    pub overflow: Overflow,
    pub frame_ttl: Option<Duration>,
    pub abandon_on_disconnect: bool,
    pub events_capacity: usize,
    pub close_timeout: Duration,
    pub dns_refresh: Duration,
    pub batch_bytes: usize,
    pub resolver: Option<Resolver>,
}

/// Builds a [`Link`](crate::Link). Made by [`Link::builder`](crate::Link::builder); every
/// setter says its default; [`build`](Builder::build) checks everything once.
#[derive(Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct Builder {
    endpoints: Vec<String>,
    config: Config,
    context: Option<Context>,
}

const MAX_ZMQ_MS: u128 = i32::MAX as u128;

impl Builder {
    pub(crate) fn new(endpoint: &str) -> Builder {
        Builder {
            endpoints: vec![endpoint.to_string()],
            context: None,
            config: Config {
                endpoints: Vec::new(),
                codec: Codec::Raw,
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
                rng_seed: None,
                proof: ProofOfLife::Connect,
                min_stable: defaults::MIN_STABLE,
                heartbeat: None,
                socket: SocketOptions {
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
                outbox_frames: defaults::OUTBOX_FRAMES,
                outbox_bytes: defaults::OUTBOX_BYTES,
                overflow: Overflow::RejectNew,
                frame_ttl: None,
                abandon_on_disconnect: false,
                events_capacity: defaults::EVENTS_CAPACITY,
                close_timeout: defaults::CLOSE_TIMEOUT,
                dns_refresh: defaults::DNS_REFRESH,
                batch_bytes: defaults::BATCH_BYTES,
                resolver: None,
            },
        }
    }

    /// Adds another server. Each new attempt goes to the next one, starting from a point and
    /// in an order drawn per link, so a fleet spreads over its servers. Defaults to the one
    /// endpoint given to `Link::builder`.
    pub fn endpoint(mut self, endpoint: &str) -> Builder {
        self.endpoints.push(endpoint.to_string());
        self
    }

    /// How frames are cut on the wire. Defaults to [`Codec::Raw`].
    pub fn codec(mut self, codec: Codec) -> Builder {
        self.config.codec = codec;
        self
    }

    /// Backoff delays grow from `base` to `max` (before jitter). Defaults to 200 ms .. 8 s.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Builder {
        self.config.backoff.base = base;
        self.config.backoff.max = max;
        self
    }

    /// Growth of the delay per failure. Defaults to 2.
    pub fn backoff_factor(mut self, factor: f64) -> Builder {
        self.config.backoff.factor = factor;
        self
    }

    /// No delay is ever shorter than this. Defaults to 10 ms.
    pub fn backoff_floor(mut self, floor: Duration) -> Builder {
        self.config.backoff.floor = floor;
        self
    }

    /// How delays are randomised. Defaults to [`Jitter::Full`].
    pub fn jitter(mut self, jitter: Jitter) -> Builder {
        self.config.backoff.jitter = jitter;
        self
    }

    /// Failed attempts in a row (libzmq's own redials included) before the link rests in
    /// Cooldown. Defaults to none (never).
    pub fn max_attempts(mut self, n: u32) -> Builder {
        self.config.max_attempts = Some(n);
        self
    }

    /// How long Cooldown lasts before a probe. Defaults to 60 s.
    pub fn cooldown(mut self, period: Duration) -> Builder {
        self.config.cooldown = period;
        self
    }

    /// Failed connects of an outage left to libzmq's own redial (`reconnect_ivl`, the fast path
    /// for a brief blip) before relink stops it and waits its own jittered delay between every
    /// later attempt. Counted from the last stable connection. Defaults to 1; 0 gives every
    /// retry to relink.
    pub fn native_retries(mut self, n: u32) -> Builder {
        self.config.native_retries = n;
        self
    }

    /// A fixed seed for the backoff's random draws, for tests. Defaults to OS entropy.
    pub fn rng_seed(mut self, seed: u64) -> Builder {
        self.config.rng_seed = Some(seed);
        self
    }

    /// What makes a connection Ready. Defaults to [`ProofOfLife::Connect`].
    pub fn ready_when(mut self, proof: ProofOfLife) -> Builder {
        self.config.proof = proof;
        self
    }

    /// How long a Ready connection must last before the attempt counter resets; a drop
    /// sooner counts as a failure (flap guard). Defaults to 1 s. Zero resets on Ready.
    pub fn min_stable(mut self, d: Duration) -> Builder {
        self.config.min_stable = d;
        self
    }

    /// The application heartbeat. Defaults to none.
    pub fn heartbeat(mut self, hb: Heartbeat) -> Builder {
        self.config.heartbeat = Some(hb);
        self
    }

    /// Bound on a connection attempt, including name resolution (also given to libzmq as
    /// ZMQ_CONNECT_TIMEOUT). Defaults to 5 s.
    pub fn connect_timeout(mut self, d: Duration) -> Builder {
        self.config.socket.connect_timeout = d;
        self
    }

    /// libzmq's ZMQ_IMMEDIATE. With `true`, libzmq never redials a STREAM endpoint after a
    /// drop, so relink always does. Defaults to false.
    pub fn immediate(mut self, yes: bool) -> Builder {
        self.config.socket.immediate = yes;
        self
    }

    /// libzmq's ZMQ_RECONNECT_IVL: the gap of its own redial. Defaults to 100 ms.
    pub fn reconnect_ivl(mut self, d: Duration) -> Builder {
        self.config.socket.reconnect_ivl = d;
        self
    }

    /// libzmq's ZMQ_RECONNECT_IVL_MAX (0: no growth). Defaults to 0.
    pub fn reconnect_ivl_max(mut self, d: Duration) -> Builder {
        self.config.socket.reconnect_ivl_max = d;
        self
    }

    /// libzmq's ZMQ_LINGER, always bounded. Defaults to 200 ms.
    pub fn linger(mut self, d: Duration) -> Builder {
        self.config.socket.linger = d;
        self
    }

    /// libzmq's send and receive high-water marks, in messages. Defaults to 64 and 64.
    pub fn hwm(mut self, sndhwm: i32, rcvhwm: i32) -> Builder {
        self.config.socket.sndhwm = sndhwm;
        self.config.socket.rcvhwm = rcvhwm;
        self
    }

    /// TCP keepalive (kernel backstop for idle links). Defaults to the system's (off).
    pub fn tcp_keepalive(mut self, k: Keepalive) -> Builder {
        self.config.socket.keepalive = Some(k);
        self
    }

    /// TCP_USER_TIMEOUT (libzmq's ZMQ_TCP_MAXRT): unacknowledged data older than this resets
    /// the connection (kernel backstop for links that send). Defaults to the system's.
    pub fn tcp_maxrt(mut self, d: Duration) -> Builder {
        self.config.socket.tcp_maxrt = Some(d);
        self
    }

    /// Outbox limits: frames waiting to be sent, in number and in bytes. Defaults to 10 000
    /// frames and 16 MiB.
    pub fn outbox_limits(mut self, frames: usize, bytes: usize) -> Builder {
        self.config.outbox_frames = frames;
        self.config.outbox_bytes = bytes;
        self
    }

    /// What `send` does at the outbox limit. Defaults to [`Overflow::RejectNew`].
    pub fn overflow(mut self, policy: Overflow) -> Builder {
        self.config.overflow = policy;
        self
    }

    /// Default lifetime of a queued frame; an unsent frame older than this is abandoned as
    /// Expired. Defaults to none (frames wait until sent, closed or dropped).
    pub fn frame_ttl(mut self, ttl: Duration) -> Builder {
        self.config.frame_ttl = Some(ttl);
        self
    }

    /// Abandon queued frames (reason ConnectionLost) when a connection drops, instead of
    /// keeping them for the next one. Defaults to false.
    pub fn abandon_on_disconnect(mut self, yes: bool) -> Builder {
        self.config.abandon_on_disconnect = yes;
        self
    }

    /// Capacity of the event channel; when it is full, the link stops reading the socket.
    /// Defaults to 1024.
    pub fn events_capacity(mut self, n: usize) -> Builder {
        self.config.events_capacity = n;
        self
    }

    /// Bound on the close run when the last handle is dropped. Defaults to 1 s.
    pub fn close_timeout(mut self, d: Duration) -> Builder {
        self.config.close_timeout = d;
        self
    }

    /// How often the name in use is resolved again, in the background (the next dial finds
    /// the fresh answer); a failed dial also asks again. Defaults to 60 s.
    pub fn dns_refresh(mut self, d: Duration) -> Builder {
        self.config.dns_refresh = d;
        self
    }

    /// Largest zmq message built by coalescing small frames. Defaults to 64 KiB.
    pub fn batch_bytes(mut self, n: usize) -> Builder {
        self.config.batch_bytes = n;
        self
    }

    /// How host names are resolved. Defaults to the system resolver (getaddrinfo), run on
    /// relink's resolver threads, never on an IO thread.
    pub fn resolver(mut self, r: Resolver) -> Builder {
        self.config.resolver = Some(r);
        self
    }

    /// The libzmq context to share. Defaults to [`Context::global`].
    pub fn context(mut self, ctx: &Context) -> Builder {
        self.context = Some(ctx.clone());
        self
    }

    /// Checks the configuration and starts the link.
    pub fn build(self) -> Result<crate::Link, ConfigError> {
        let (config, context) = self.validate()?;
        crate::link::Link::start(config, context)
    }

    pub(crate) fn validate(self) -> Result<(Config, Context), ConfigError> {
        let context = self.context.clone();
        let config = self.into_config()?;
        let context = match context {
            Some(ctx) => ctx,
            None => Context::global()?,
        };
        Ok((config, context))
    }

    /// Checks every setting; no libzmq object is made.
    pub(crate) fn into_config(self) -> Result<Config, ConfigError> {
        let mut c = self.config;
        if self.endpoints.is_empty() {
            return Err(ConfigError::NoEndpoint);
        }
        c.endpoints = self
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<_, _>>()?;
        let b = &c.backoff;
        positive("backoff base", b.base)?;
        if b.max < b.base {
            return Err(ConfigError::MaxBelowBase {
                base: b.base,
                max: b.max,
            });
        }
        if b.floor > b.max {
            return Err(ConfigError::FloorAboveMax {
                floor: b.floor,
                max: b.max,
            });
        }
        if !(b.factor.is_finite() && b.factor >= 1.0) {
            return Err(ConfigError::BadFactor(b.factor));
        }
        if let Jitter::Proportional(x) = b.jitter {
            if !(x.is_finite() && x > 0.0 && x <= 1.0) {
                return Err(ConfigError::JitterOutOfRange(x));
            }
        }
        if c.max_attempts == Some(0) {
            return Err(ConfigError::ZeroLimit {
                name: "max_attempts",
            });
        }
        positive("cooldown", c.cooldown)?;
        let s = &c.socket;
        positive("connect_timeout", s.connect_timeout)?;
        positive("reconnect_ivl", s.reconnect_ivl)?;
        positive("linger", s.linger)?;
        for (name, d) in [
            ("connect_timeout", s.connect_timeout),
            ("reconnect_ivl", s.reconnect_ivl),
            ("reconnect_ivl_max", s.reconnect_ivl_max),
            ("linger", s.linger),
        ] {
            fits_zmq_ms(name, d)?;
        }
        if s.reconnect_ivl_max > Duration::ZERO && s.reconnect_ivl_max < s.reconnect_ivl {
            return Err(ConfigError::MaxBelowBase {
                base: s.reconnect_ivl,
                max: s.reconnect_ivl_max,
            });
        }
        if s.sndhwm <= 0 {
            return Err(ConfigError::ZeroLimit { name: "sndhwm" });
        }
        if s.rcvhwm <= 0 {
            return Err(ConfigError::ZeroLimit { name: "rcvhwm" });
        }
        if let Some(k) = s.keepalive {
            positive("keepalive idle", k.idle)?;
            positive("keepalive interval", k.interval)?;
            if k.count == 0 {
                return Err(ConfigError::ZeroLimit {
                    name: "keepalive count",
                });
            }
            for (name, d) in [
                ("keepalive idle", k.idle),
                ("keepalive interval", k.interval),
            ] {
                if d.as_secs() as u128 > MAX_ZMQ_MS / 1000 {
                    return Err(ConfigError::TooLarge {
                        name,
                        value: d.as_secs() as u128,
                        max: MAX_ZMQ_MS / 1000,
                    });
                }
            }
            if k.count > i32::MAX as u32 {
                return Err(ConfigError::TooLarge {
                    name: "keepalive count",
                    value: k.count as u128,
                    max: i32::MAX as u128,
                });
            }
        }
        if let Some(d) = s.tcp_maxrt {
            positive("tcp_maxrt", d)?;
            fits_zmq_ms("tcp_maxrt", d)?;
        }
        match c.codec {
            Codec::LengthPrefixed { max_frame } => {
                if max_frame == 0 {
                    return Err(ConfigError::ZeroLimit { name: "max_frame" });
                }
                if max_frame as u64 > u32::MAX as u64 {
                    return Err(ConfigError::TooLarge {
                        name: "max_frame",
                        value: max_frame as u128,
                        max: u32::MAX as u128,
                    });
                }
            }
            Codec::Lines { max_line: 0 } => {
                return Err(ConfigError::ZeroLimit { name: "max_line" });
            }
            _ => {}
        }
        if let ProofOfLife::Handshake { hello, timeout, .. } = &c.proof {
            positive("handshake timeout", *timeout)?;
            if hello.is_empty() {
                return Err(ConfigError::EmptyHandshake);
            }
            for h in hello {
                c.codec
                    .check_frame(h)
                    .map_err(|source| ConfigError::Unencodable {
                        what: "hello frame",
                        source,
                    })?;
            }
        }
        if let Some(hb) = &c.heartbeat {
            positive("heartbeat interval", hb.interval)?;
            match &hb.ping {
                Ping::Raw(p) if p.is_empty() => return Err(ConfigError::EmptyPing),
                Ping::Raw(_) => {}
                Ping::Frame(p) => {
                    c.codec
                        .check_frame(p)
                        .map_err(|source| ConfigError::Unencodable {
                            what: "heartbeat ping",
                            source,
                        })?
                }
            }
        }
        if c.outbox_frames == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "outbox frames",
            });
        }
        if c.outbox_bytes == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "outbox bytes",
            });
        }
        if let Overflow::Block(d) = c.overflow {
            positive("overflow block timeout", d)?;
        }
        if let Some(ttl) = c.frame_ttl {
            positive("frame_ttl", ttl)?;
        }
        if c.events_capacity == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "events_capacity",
            });
        }
        positive("close_timeout", c.close_timeout)?;
        positive("dns_refresh", c.dns_refresh)?;
        if c.batch_bytes == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "batch_bytes",
            });
        }
        Ok(c)
    }
}

fn positive(name: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(ConfigError::ZeroDuration { name })
    } else {
        Ok(())
    }
}

fn fits_zmq_ms(name: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.as_millis() > MAX_ZMQ_MS {
        Err(ConfigError::TooLarge {
            name,
            value: d.as_millis(),
            max: MAX_ZMQ_MS,
        })
    } else {
        Ok(())
    }
}
