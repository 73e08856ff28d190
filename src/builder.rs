//! The builder and every setting with its default: every method of [`Builder`] is in this
//! file; the checks `build()` makes are functions in `check.rs`.
//!
//! `build()` hands the checked [`Config`] to `Link::start` (in `link.rs`), which splits it:
//! the core gets its [`Settings`], the IO thread its socket options.

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
use crate::io::{self, Context, IoPool, Looks, Resolver};
use crate::tls::Tls;

mod check;
mod groups;

pub use groups::{Delivery, Reconnect, Requests, SocketOptions};

/// All defaults, in one place.
pub mod defaults {
    use std::time::Duration;

    pub use crate::core::protocol::PROTOCOL_HEARTBEAT;

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
    pub use crate::io::{CONNECT_TIMEOUT, LINGER, MAX_SOCKETS, RCVHWM, RECONNECT_IVL, SNDHWM};
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
/// setter says its default; [`build`](crate::Builder::build) checks everything once.
///
/// The settings:
///
/// | what | methods |
/// |---|---|
/// | starting | [`build`](crate::Builder::build): checks every setting, starts the link |
/// | where | [`endpoint`](crate::Builder::endpoint), [`name`](crate::Builder::name), [`resolver`](crate::Builder::resolver), [`tls`](crate::Builder::tls) |
/// | the peer's language | [`protocol`](crate::Builder::protocol), which brings the rest of this row unless given: [`framing`](crate::Builder::framing), [`heartbeat`](crate::Builder::heartbeat) (or [`without_heartbeat`](crate::Builder::without_heartbeat)), [`confirm`](crate::Builder::confirm) |
/// | when a connection is alive | [`ready_when`](crate::Builder::ready_when), [`handshake_timeout`](crate::Builder::handshake_timeout) |
/// | groups, each changed in place | [`reconnect`](crate::Builder::reconnect) ([`Reconnect`]), [`delivery`](crate::Builder::delivery) ([`Delivery`]), [`requests`](crate::Builder::requests) ([`Requests`]), [`socket`](crate::Builder::socket) ([`SocketOptions`]) |
/// | durability | [`spool`](crate::Builder::spool) |
/// | receiving | [`events_capacity`](crate::Builder::events_capacity), [`closed_frames_wait`](crate::Builder::closed_frames_wait) |
/// | threads and the process | [`context`](crate::Builder::context), [`io_pool`](crate::Builder::io_pool), [`looks`](crate::Builder::looks), [`slow_callback`](crate::Builder::slow_callback), [`close_timeout`](crate::Builder::close_timeout) |
///
/// # Examples
/// A link to a line-based service, with a heartbeat, a bounded outbox and a give-up point:
/// ```
/// use std::time::Duration;
/// use relink::{Event, Heartbeat, Link, Overflow};
/// use relink::protocol::{Ping, Predicate};
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
///     .reconnect(|r| {
///         r.backoff_base = Duration::from_millis(100);
///         r.backoff_max = Duration::from_secs(5);
///         r.max_attempts = Some(10);
///         r.cooldown = Duration::from_secs(30);
///     })
///     .heartbeat(
///         Heartbeat::new(Duration::from_secs(1), Ping::Frame(b"PING".to_vec()))
///             .reply(Predicate::starts_with("PING")),
///     )
///     .delivery(|d| {
///         d.outbox_frames = 1_000;
///         d.outbox_bytes = 1 << 20;
///         d.overflow = Overflow::Block(Duration::from_millis(100));
///         d.frame_ttl = Some(Duration::from_secs(10));
///     })
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
    /// The settings given, which a protocol's own do not replace.
    said: Said,
    reconnect: Reconnect,
    delivery: Delivery,
    requests: Requests,
    socket: SocketOptions,
}

/// Which of the settings a protocol brings were given to the builder.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Said {
    pub(crate) framing: bool,
    pub(crate) heartbeat: bool,
    pub(crate) confirm: bool,
    pub(crate) correlation: bool,
}

const MAX_ZMQ_MS: u128 = i32::MAX as u128;

impl Builder {
    pub(crate) fn new(endpoint: &str) -> Builder {
        // The groups' defaults are the builder's: `apply_groups` writes them into the
        // configuration, over the zeros below.
        let mut b = Builder {
            endpoints: vec![endpoint.to_string()],
            context: None,
            tls: None,
            io_pool: None,
            name: None,
            requests_said: false,
            said: Said::default(),
            reconnect: Reconnect::default(),
            delivery: Delivery::default(),
            requests: Requests::default(),
            socket: SocketOptions::default(),
            config: Config {
                core: Settings {
                    endpoints: Vec::new(),
                    framing: BoxedFraming::new(Raw::new()),
                    backoff: BackoffConfig {
                        base: Duration::ZERO,
                        max: Duration::ZERO,
                        factor: 1.0,
                        floor: Duration::ZERO,
                        jitter: Jitter::Full,
                    },
                    max_attempts: None,
                    cooldown: Duration::ZERO,
                    native_retries: 0,
                    proof: ProofOfLife::Connect,
                    min_stable: Duration::ZERO,
                    heartbeat: None,
                    outbox_frames: 0,
                    outbox_bytes: 0,
                    abandon_on_disconnect: false,
                    dns_refresh: Duration::ZERO,
                    batch_bytes: 0,
                    // Both follow the socket options; `into_config` sets them once checked.
                    connect_timeout: Duration::ZERO,
                    dial_bound: Duration::ZERO,
                    tls: None,
                    requests: RequestSettings::default(),
                    slow_callback: defaults::SLOW_CALLBACK,
                    // Set by `into_config`: the name given, or the first endpoint.
                    name: Arc::from(""),
                    config_retry: None,
                    window: 0,
                    redelivery: Redelivery::Resend,
                    answer_events: false,
                    answers: Answers::Unknown,
                    confirm: Confirm::tcp(),
                    protocol: None,
                    handshake_timeout: HANDSHAKE_TIMEOUT,
                    max_losses: 0,
                },
                rng_seed: None,
                socket: SocketOptions::default(),
                overflow: Overflow::RejectNew,
                frame_ttl: None,
                spool: None,
                events_capacity: defaults::EVENTS_CAPACITY,
                closed_frames_wait: defaults::CLOSED_FRAMES_WAIT,
                close_timeout: defaults::CLOSE_TIMEOUT,
                resolver: None,
                looks: Looks::Never,
            },
        };
        b.apply_groups();
        b
    }

    /// Changes the reconnect policy ([`Reconnect`]: the backoff between attempts, when the
    /// link rests, what counts as a stable connection) in place; each field says its default.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::Link;
    /// use relink::config::Jitter;
    ///
    /// // A fleet of thousands against one server: slower, spread, resting after 20 failures.
    /// let link = Link::builder("tcp://127.0.0.1:7000")
    ///     .reconnect(|r| {
    ///         r.backoff_base = Duration::from_secs(1);
    ///         r.backoff_max = Duration::from_secs(60);
    ///         r.jitter = Jitter::Full;
    ///         r.max_attempts = Some(20);
    ///     })
    ///     .build()?;
    /// # link.close(Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn reconnect(mut self, change: impl FnOnce(&mut Reconnect)) -> Builder {
        change(&mut self.reconnect);
        self
    }

    /// Changes the delivery of frames sent ([`Delivery`]: how many may wait, what happens at
    /// the limit, how long they live, what a drop does to them) in place; each field says its
    /// default.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, Overflow, Redelivery};
    ///
    /// // Readings that are worthless after a minute, never written twice.
    /// let link = Link::builder("tcp://127.0.0.1:7000")
    ///     .delivery(|d| {
    ///         d.overflow = Overflow::DropOldest;
    ///         d.frame_ttl = Some(Duration::from_secs(60));
    ///         d.redelivery = Redelivery::Report;
    ///     })
    ///     .build()?;
    /// # link.close(Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn delivery(mut self, change: impl FnOnce(&mut Delivery)) -> Builder {
        change(&mut self.delivery);
        self
    }

    /// Changes libzmq's own options on the link's socket ([`SocketOptions`]) in place; each
    /// field says its default. Most links keep them.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::Link;
    /// use relink::config::Keepalive;
    ///
    /// let link = Link::builder("tcp://127.0.0.1:7000")
    ///     .socket(|s| {
    ///         s.connect_timeout = Duration::from_secs(2);
    ///         s.keepalive = Some(Keepalive::new(Duration::from_secs(30)));
    ///     })
    ///     .build()?;
    /// # link.close(Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn socket(mut self, change: impl FnOnce(&mut SocketOptions)) -> Builder {
        change(&mut self.socket);
        self
    }

    /// Adds another server. Each new attempt goes to the next one, starting from a point and
    /// in an order drawn per link, so a fleet spreads over its servers. Defaults to the one
    /// endpoint given to `Link::builder`.
    ///
    /// # Examples
    /// The endpoints group ([`endpoint`](crate::Builder::endpoint), [`resolver`](crate::Builder::resolver),
    /// [`Reconnect::dns_refresh`](crate::config::Reconnect::dns_refresh)): a link with a server that is down and one that is
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
    ///     .reconnect(|r| {
    ///         r.native_retries = 0;
    ///         r.backoff_base = Duration::from_millis(10);
    ///         r.backoff_max = Duration::from_millis(100);
    ///     })
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
        self.said.framing = true;
        self
    }

    /// What makes a connection Ready. Defaults to [`ProofOfLife::Connect`].
    ///
    /// # Examples
    /// The proof-of-life group ([`ready_when`](crate::Builder::ready_when),
    /// [`Reconnect::min_stable`](crate::config::Reconnect::min_stable), [`heartbeat`](crate::Builder::heartbeat)) says when a
    /// connection counts as alive, and when as dead:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Cause, Event, Heartbeat, Link, State};
    /// use relink::protocol::{Handshake, Ping, Predicate};
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
    ///     .reconnect(|r| r.min_stable = Duration::from_millis(500))
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
    /// See the example on [`Builder::ready_when`](crate::Builder::ready_when).
    pub fn heartbeat(mut self, hb: Heartbeat) -> Builder {
        self.config.core.heartbeat = Some(hb);
        self.said.heartbeat = true;
        self
    }

    /// No application heartbeat, not even the one a [`protocol`](Builder::protocol) brings
    /// (redis' `PING` every second): a silent peer is then found by the kernel backstops alone
    /// ([`SocketOptions`](crate::config::SocketOptions)' keepalive and `TCP_USER_TIMEOUT`).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::protocol::Redis;
    /// use relink::Link;
    ///
    /// let link = Link::builder("127.0.0.1:6379")
    ///     .protocol(Redis::new())
    ///     .without_heartbeat()
    ///     .build()?;
    /// # link.close(Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn without_heartbeat(mut self) -> Builder {
        self.config.core.heartbeat = None;
        self.said.heartbeat = true;
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

    /// Capacity of the event channel; when it is full, the link stops reading the socket.
    /// Defaults to 1024.
    ///
    /// # Examples
    /// The events group ([`events_capacity`](crate::Builder::events_capacity),
    /// [`close_timeout`](crate::Builder::close_timeout)): dropping the last [`Link`](crate::Link)
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
    /// the application's pace (at most libzmq's receive queue, [`SocketOptions::sndhwm`](crate::config::SocketOptions::sndhwm)'s
    /// `rcvhwm` messages of up to 8 KiB), and acts on the close behind its last frame. Frames
    /// that find the event channel full wait for room; those still waiting after this long
    /// are dropped, reported in one
    /// [`LinkError::FramesUnread`](crate::error::LinkError::FramesUnread) and counted in
    /// [`Metrics::frames_unread`](crate::Metrics::frames_unread). The bound keeps the memory of
    /// an application that stops taking events while its peer keeps closing connections
    /// finite: at most what the closes of one such period read.
    ///
    /// See the example on [`Builder::events_capacity`](crate::Builder::events_capacity).
    pub fn closed_frames_wait(mut self, d: Duration) -> Builder {
        self.config.closed_frames_wait = d;
        self
    }

    /// How the threads that wait on the link wait: sleep at once ([`Looks::Never`], the
    /// default: the least CPU) or look for a while before sleeping ([`Looks::Learnt`]: a
    /// shorter request round trip for more CPU). It applies to
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
    /// See the example on [`Builder::events_capacity`](crate::Builder::events_capacity).
    pub fn close_timeout(mut self, d: Duration) -> Builder {
        self.config.close_timeout = d;
        self
    }

    /// What the protocol does at the edges of each connection: the frames that open it and
    /// the verdict on the peer's first frames, the link's own answers to the peer's frames,
    /// the ping and its pong, which frames the peer answers, how a resent frame is marked. See
    /// [`Protocol`]. Defaults to none: no opening (see [`ready_when`](crate::Builder::ready_when)), the
    /// [`Heartbeat`](crate::Heartbeat)'s ping, every frame delivered.
    ///
    /// With a protocol, the heartbeat starts once the link is Ready. `build()` asks a clone of
    /// the protocol for its opening and its ping and refuses a frame the framing cannot write
    /// ([`ConfigError::Unencodable`](crate::error::ConfigError::Unencodable)), and a protocol
    /// on a framing that does not cut frames. [`Handshake`](crate::protocol::Handshake)
    /// is the simplest protocol that waits for the peer: hello frames and a predicate on the
    /// reply.
    pub fn protocol<P: Protocol + Clone>(mut self, protocol: P) -> Builder {
        self.config.core.protocol = Some(BoxedProtocol::new(protocol));
        self
    }

    /// How long the link waits for the [`Protocol`]'s verdict on a new connection
    /// ([`Opening::wait`](crate::protocol::Opening::wait)) before it closes it with cause
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
        self.said.confirm = true;
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
    ///     .reconnect(|r| r.dns_refresh = Duration::from_secs(10)) // ask the registry again every 10 s
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

    /// Checks every setting (check.rs); no libzmq object is made.
    /// Checks the configuration and starts the link.
    ///
    /// # Errors
    /// [`ConfigError`] for a setting out of range or a libzmq object that could not be made;
    /// see the example there. Examples of whole configurations are on [`Builder`].
    pub fn build(self) -> Result<crate::Link, ConfigError> {
        let (config, context, pool) = self.validate()?;
        crate::Link::start(config, context, pool)
    }

    pub(crate) fn into_config(mut self) -> Result<Config, ConfigError> {
        self.apply_groups();
        check::config(self)
    }

    /// Writes the groups into the configuration the checks read.
    fn apply_groups(&mut self) {
        let (r, d, q) = (&self.reconnect, &self.delivery, &self.requests);
        let core = &mut self.config.core;
        core.backoff = BackoffConfig {
            base: r.backoff_base,
            max: r.backoff_max,
            factor: r.backoff_factor,
            floor: r.backoff_floor,
            jitter: r.jitter,
        };
        core.max_attempts = r.max_attempts;
        core.cooldown = r.cooldown;
        core.native_retries = r.native_retries;
        core.min_stable = r.min_stable;
        core.config_retry = r.config_failure_retry;
        core.dns_refresh = r.dns_refresh;
        core.outbox_frames = d.outbox_frames;
        core.outbox_bytes = d.outbox_bytes;
        core.abandon_on_disconnect = d.abandon_on_disconnect;
        core.window = d.window;
        core.redelivery = d.redelivery;
        core.answer_events = d.answer_events;
        core.max_losses = d.max_losses;
        core.batch_bytes = d.batch_bytes;
        core.requests = RequestSettings {
            correlation: q.correlation.clone().unwrap_or_else(Correlation::in_order),
            redelivery: q.redelivery,
            overflow: d.overflow,
            max_frames: q.limit_frames,
            max_bytes: q.limit_bytes,
            timeout: q.timeout,
            matchable: false,
        };
        self.said.correlation = q.correlation.is_some();
        self.config.overflow = d.overflow;
        self.config.frame_ttl = d.frame_ttl;
        self.config.rng_seed = r.rng_seed;
        self.config.socket = self.socket.clone();
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
    /// Changes the settings of requests ([`Requests`]: how a reply is matched, how long it may
    /// take, how many may be outstanding, what a drop does to them) in place; each field says
    /// its default.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::protocol::Redis;
    /// use relink::{Link, Redelivery};
    ///
    /// // redis, pipelined deep, each command written again after a drop.
    /// let link = Link::builder("127.0.0.1:6379")
    ///     .protocol(Redis::new())
    ///     .requests(|q| {
    ///         q.limit_frames = 10_000;
    ///         q.redelivery = Redelivery::Resend;
    ///     })
    ///     .build()?;
    /// # link.close(Duration::ZERO);
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn requests(mut self, change: impl FnOnce(&mut Requests)) -> Builder {
        change(&mut self.requests);
        self.requests_said = true;
        self
    }
}
