//! The dial's bookkeeping: [`Dialer`] owns which dial is current (its generation), the
//! attempt and the failures in a row, the native redials, the backoff and its generator, the
//! endpoints with their name cache, and the endpoint and address in use. It decides; the
//! machine arms the timers, takes the transitions and asks the IO side.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;

use crate::core::addresses::{fmt_addr, Endpoints};
use crate::core::backoff::Backoff;
use crate::core::endpoint::Host;

/// What outlives a connection on the dialling side: which dial is current, how many failed,
/// and where the next one goes.
#[derive(Debug)]
pub(super) struct Dialer {
    /// The dial in progress; inputs of another one are stale.
    generation: u64,
    /// Failed dials and lost connections in a row, libzmq's own redials included.
    failures: u32,
    /// The attempt: the ordinal of the latest dial relink made since the last stable connection
    /// (0 when none was made since). The backoff grows with it and `max_attempts` counts it.
    attempt: u32,
    /// Native redials the current dial may still use.
    native_left: u32,
    /// Native redials used since the last stable connection (they are the fast path for the
    /// first failures of an outage, not for every dial).
    native_used: u32,
    /// When the current dial (or the native redial of it) began.
    started: Instant,
    backoff: Backoff,
    rng: StdRng,
    /// The wait before the next dial, while one is armed.
    retry_delay: Option<Duration>,
    endpoints: Endpoints,
    /// The endpoint and address of the current dial (kept after a failure: its log line,
    /// the metrics and the next dial's choice name it).
    current: Option<(usize, SocketAddr)>,
    /// The endpoint whose answer is awaited.
    resolving: Option<usize>,
}

/// Where a new dial goes first.
#[derive(Debug)]
pub(super) enum Next {
    /// Connect to this address (an IP endpoint, or a name answered from the cache).
    Connect(SocketAddr),
    /// Look this name up first.
    Resolve { host: String, port: u16 },
}

impl Dialer {
    /// No dial yet; `rng` draws the backoff jitter (the endpoint order is drawn already).
    pub(super) fn new(endpoints: Endpoints, backoff: Backoff, rng: StdRng, now: Instant) -> Dialer {
        Dialer {
            generation: 0,
            failures: 0,
            attempt: 0,
            native_left: 0,
            native_used: 0,
            started: now,
            backoff,
            rng,
            retry_delay: None,
            endpoints,
            current: None,
            resolving: None,
        }
    }

    /// The dial in progress.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether `generation` is the dial in progress (inputs of another one are stale).
    pub(super) fn is_current(&self, generation: u64) -> bool {
        generation == self.generation
    }

    pub(super) fn attempt(&self) -> u32 {
        self.attempt
    }

    pub(super) fn failures(&self) -> u32 {
        self.failures
    }

    pub(super) fn native_left(&self) -> u32 {
        self.native_left
    }

    pub(super) fn native_used(&self) -> u32 {
        self.native_used
    }

    /// The wait before the next dial, while one is armed.
    pub(super) fn retry_delay(&self) -> Option<Duration> {
        self.retry_delay
    }

    /// The address of the current dial, when it has one.
    pub(super) fn addr(&self) -> Option<SocketAddr> {
        self.current.map(|(_, addr)| addr)
    }

    /// The endpoint of the current dial (its index in the list).
    pub(super) fn endpoint(&self) -> Option<usize> {
        self.current.map(|(idx, _)| idx)
    }

    /// A new dial at `now`: a fresh generation, the attempt counted, the native redials it
    /// may use (`native_retries` since the last stable connection in all), and the next
    /// endpoint in turn; its address, or the name to look up first.
    pub(super) fn begin(
        &mut self,
        now: Instant,
        native_retries: u32,
        dns_refresh: Duration,
    ) -> Next {
        self.generation += 1;
        self.attempt = self.attempt.saturating_add(1);
        self.native_left = native_retries.saturating_sub(self.native_used);
        self.started = now;
        self.retry_delay = None;
        let idx = self.endpoints.next_index();
        let ep = self.endpoints.get(idx).clone();
        match ep.host {
            Host::Ip(ip) => {
                let addr = SocketAddr::new(ip, ep.port);
                self.current = Some((idx, addr));
                Next::Connect(addr)
            }
            Host::Name(name) => {
                if let Some(addr) = self.endpoints.cached(idx, now, dns_refresh) {
                    self.current = Some((idx, addr));
                    Next::Connect(addr)
                } else {
                    // Keep the next address index across resolutions so every address gets
                    // its turn.
                    self.current = None;
                    self.resolving = Some(idx);
                    Next::Resolve {
                        host: name,
                        port: ep.port,
                    }
                }
            }
        }
    }

    /// The answer of the lookup this dial waits for: the address to connect to, or `None`
    /// (no address). `Err` when no lookup was awaited.
    pub(super) fn resolved(
        &mut self,
        now: Instant,
        addrs: Vec<SocketAddr>,
    ) -> Result<Option<SocketAddr>, ()> {
        let idx = self.resolving.take().ok_or(())?;
        if addrs.is_empty() {
            return Ok(None);
        }
        let addr = self.endpoints.resolved(idx, addrs, now);
        self.current = Some((idx, addr));
        Ok(Some(addr))
    }

    /// The name of the endpoint in use and its port, for a background lookup; `None` when it
    /// is an IP address (or there is none).
    pub(super) fn refresh(&self) -> Option<(usize, String, u16)> {
        let (idx, _) = self.current?;
        let ep = self.endpoints.get(idx);
        match &ep.host {
            Host::Name(name) => Some((idx, name.clone(), ep.port)),
            Host::Ip(_) => None,
        }
    }

    /// Whether `idx` names an endpoint of the list.
    pub(super) fn has_endpoint(&self, idx: usize) -> bool {
        idx < self.endpoints.len()
    }

    /// A background answer for endpoint `idx`: replaces the cached one; a failure (`None`, or
    /// no address) keeps the old answer.
    pub(super) fn refreshed(
        &mut self,
        now: Instant,
        name: &str,
        idx: usize,
        addrs: Option<Vec<SocketAddr>>,
    ) {
        match addrs {
            Some(addrs) if !addrs.is_empty() => self.endpoints.refreshed(idx, addrs, now),
            _ => {
                log::debug!(
                    "relink[{name}]: background refresh of {} failed; the old answer stays",
                    self.endpoints.get(idx)
                );
            }
        }
    }

    /// A native redial of the socket after a refused dial, when one is left: counted as a
    /// failure, and the address is marked suspect. Returns the native redials left.
    pub(super) fn native_redial(&mut self, now: Instant) -> u32 {
        self.started = now;
        self.native_left = self.native_left.saturating_sub(1);
        self.native_used = self.native_used.saturating_add(1);
        self.failures = self.failures.saturating_add(1);
        self.note_address_failed();
        self.native_left
    }

    /// How long the current dial (or its last native redial) has taken at `now`.
    pub(super) fn took(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }

    /// A failed attempt or a lost connection, counted; a dial that failed (`dialling`) makes
    /// the cached answer suspect (a connection that was up and dropped says nothing against
    /// the address).
    pub(super) fn failed(&mut self, dialling: bool) {
        self.failures = self.failures.saturating_add(1);
        if dialling {
            self.note_address_failed();
        }
    }

    /// The connection stayed up long enough: failures, attempt, native redials and backoff
    /// start over.
    pub(super) fn stable(&mut self) {
        self.failures = 0;
        self.attempt = 0;
        self.native_used = 0;
        self.backoff.reset();
    }

    /// Whether the attempts reached `max_attempts`.
    pub(super) fn exhausted(&self, max_attempts: Option<u32>) -> bool {
        max_attempts.is_some_and(|m| self.attempt >= m)
    }

    /// The backoff's delay for this attempt (a connection that was stable and dropped is
    /// followed by attempt 1's delay).
    pub(super) fn backoff_delay(&mut self) -> Duration {
        self.backoff.delay(self.attempt.max(1), &mut self.rng)
    }

    /// The next dial waits `delay`; `None` when none is armed.
    pub(super) fn set_retry_delay(&mut self, delay: Option<Duration>) {
        self.retry_delay = delay;
    }

    /// The current dial is over: any later input of it is stale.
    pub(super) fn end(&mut self) {
        self.generation += 1;
    }

    /// The endpoint in use as text: its address, or while its name is looked up, the name.
    pub(super) fn endpoint_text(&self) -> Option<String> {
        match self.current {
            Some((_, addr)) => Some(fmt_addr(addr)),
            None => self
                .resolving
                .map(|idx| self.endpoints.get(idx).to_string()),
        }
    }

    /// A dial that failed makes the cached answer of its endpoint suspect.
    fn note_address_failed(&mut self) {
        if let Some((idx, _)) = self.current {
            self.endpoints.mark_failed(idx);
        }
    }
}
