//! What the core is told: the settings of one link, built once by the builder, and the public
//! policy types they hold. No socket option, resolver, context or channel size is among them.

use std::sync::Arc;
use std::time::Duration;

use super::backoff::BackoffConfig;
use super::confirm::{Answers, Confirm};
use super::endpoint::Endpoint;
use super::framing::BoxedFraming;
use super::heartbeat::Heartbeat;
use super::protocol::BoxedProtocol;
use super::requests::RequestSettings;
use super::tls::TlsSettings;
use super::window::Redelivery;

/// How long a protocol's verdict may take on a new connection.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest zmq message relink builds by coalescing frames.
pub const BATCH_BYTES: usize = 256 * 1024;

/// The validated settings of one link's core.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub endpoints: Vec<Endpoint>,
    pub framing: BoxedFraming,
    pub backoff: BackoffConfig,
    pub max_attempts: Option<u32>,
    pub cooldown: Duration,
    pub native_retries: u32,
    pub proof: ProofOfLife,
    pub min_stable: Duration,
    pub heartbeat: Option<Heartbeat>,
    pub outbox_frames: usize,
    pub outbox_bytes: usize,
    pub abandon_on_disconnect: bool,
    pub dns_refresh: Duration,
    pub batch_bytes: usize,
    /// Bound on one TCP connect: a failed dial that took this long timed out.
    pub connect_timeout: Duration,
    /// How long a dial may go unanswered (the native redial included) before it fails.
    pub dial_bound: Duration,
    /// TLS on every connection: one session setting per endpoint, in the order of
    /// `endpoints`. None: plain TCP.
    pub tls: Option<Vec<TlsSettings>>,
    /// Request and reply: correlation, redelivery, the window, the default deadline.
    pub requests: RequestSettings,
    /// A call into application code this long or longer is reported as slow.
    pub slow_callback: Duration,
    /// The link's name, in every log line about it.
    pub name: Arc<str>,
    /// The wait after a failure no retry can fix (`tls-rejected`); None: the cooldown period.
    pub config_retry: Option<Duration>,
    /// Most bytes written and not yet acknowledged by the peer's TCP; 0: no bound.
    pub window: usize,
    /// What becomes of unconfirmed frames when their connection drops.
    pub redelivery: Redelivery,
    /// Answers that only confirm a sent frame are also `Event::Frame`s.
    pub answer_events: bool,
    /// Which frames the peer answers, in order (made `Pings` by `build()` when it is not said
    /// and the heartbeat has a `reply`).
    pub answers: Answers,
    /// What confirms a frame.
    pub confirm: Confirm,
    /// What the protocol does at the edges of a connection.
    pub protocol: Option<BoxedProtocol>,
    /// How long the link waits for the protocol's verdict.
    pub handshake_timeout: Duration,
    /// A frame or request in flight at this many connection losses in a row is abandoned
    /// (`AbandonReason::Poison`).
    pub max_losses: u32,
}

/// What makes a Connected link Ready (proof of life).
///
/// # Examples
/// A server that greets first (as SMTP and FTP servers do) is alive when its greeting comes:
/// ```
/// use std::time::Duration;
/// use relink::{Event, Link, State};
/// use relink::config::ProofOfLife;
/// use relink::framing::Lines;
/// # use std::io::{Read, Write};
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let port = listener.local_addr()?.port();
/// # std::thread::spawn(move || {
/// #     let (mut s, _) = listener.accept().unwrap();
/// #     s.write_all(b"220 hello\r\n").unwrap();
/// #     let _ = s.read(&mut [0u8; 1]); // until the link closes
/// # });
///
/// // The server on `port` greets with "220 hello".
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .framing(Lines::new())
///     .ready_when(ProofOfLife::Inbound)
///     .build()?;
/// let mut states = Vec::new();
/// let greeting = loop {
///     match link.events().recv_timeout(Duration::from_secs(5))? {
///         Event::State(t) => states.push(t.to),
///         Event::Frame(f) => break f,
///         _ => {}
///     }
/// };
/// assert_eq!(states, [State::Connecting, State::Connected, State::Ready]);
/// assert_eq!(greeting, &b"220 hello"[..]);
/// link.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
/// A connection that is Ready only on the peer's answer to a hello is said by a
/// [`Protocol`](crate::protocol::Protocol) ([`Handshake`](crate::protocol::Handshake) is the simplest).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ProofOfLife {
    /// The TCP connect itself (with TLS: the completed handshake). The default. (The attempt
    /// counter still resets only after `min_stable`.)
    Connect,
    /// The first bytes received from the peer (with TLS: the first decrypted bytes, after
    /// the handshake).
    Inbound,
}
