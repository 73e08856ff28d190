//! What the core is told: the settings of one link, built once by the builder, and the public
//! policy types they hold. No socket option, resolver, context or channel size is among them.

use std::time::Duration;

use super::backoff::BackoffConfig;
use super::codec::Codec;
use super::endpoint::Endpoint;
use super::heartbeat::Heartbeat;
use super::predicate::Predicate;
use super::tls::TlsSettings;

/// Handshake reply timeout.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The validated settings of one link's core.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub endpoints: Vec<Endpoint>,
    pub codec: Codec,
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
}

/// What makes a Connected link Ready (proof of life).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ProofOfLife {
    /// The TCP connect itself (with TLS: the completed handshake). The default. (The attempt counter still resets only after
    /// `min_stable`.)
    Connect,
    /// The first bytes received from the peer (with TLS: the first decrypted bytes, after
    /// the handshake).
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
            timeout: HANDSHAKE_TIMEOUT,
        }
    }
}
