//! The link's state machine: pure, sans-IO.
//!
//! No socket, no clock, no sleep, no global random generator. Time comes in as `now`, the next
//! deadline leaves as [`Machine::poll_timeout`], effects leave as [`Action`]s drained with
//! [`Machine::poll_action`], and bytes to write are pulled with [`Machine::poll_transmit`].
//!
//! This file holds the types, the [`Machine`] (what outlives a connection), the inputs, the
//! transition table, `fail` and `teardown`. The child modules are `impl Machine` blocks, one
//! concern each: `connection` (one TCP connection's state, and its coming up), `dial`, `tls`,
//! `receive`, `transmit`, `intake`, `close`, `metrics` and `served`.
//!
#![doc = include_str!("../../docs/transitions.md")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::SeedableRng;

use self::connection::Connection;
use super::backoff::Backoff;
use super::counters::Counters;
use super::endpoints::{fmt_addr, Endpoints};
use super::framing::BoxedFraming;
use super::guard::{Panicked, Stopwatch, Untimed};
use super::outbox::Outbox;
use super::protocol::BoxedProtocol;
use super::requests::{Outcome, Requests, Token};
use super::settings::Settings;
use super::timers::{Timer, Timers};
use super::window::{Losses, Window};
use crate::batch::Batch;
use crate::error::{Callback, DecodeError, FlushError, LinkError, TlsError};
use crate::event::{AbandonReason, Cause, Event, State, Transition};

/// What the IO side tells the machine.
#[derive(Debug)]
pub(crate) enum Input {
    /// Begin connecting.
    Start,
    /// Stop new work; flush until `deadline`, then close.
    Close { deadline: Instant },
    /// Cut a Backoff or Cooldown short.
    ReconnectNow,
    /// A frame accepted by the handle.
    Submit {
        frame: bytes::Bytes,
        deadline: Option<Instant>,
    },
    /// Frames accepted by the handle in one call, in order, sharing one deadline.
    SubmitBatch {
        batch: Batch,
        deadline: Option<Instant>,
    },
    /// The answer to a `Resolve` action.
    Resolved {
        generation: u64,
        result: Result<Vec<SocketAddr>, Unresolved>,
    },
    /// The answer to a `Refresh` action.
    Refreshed {
        endpoint: usize,
        result: Result<Vec<SocketAddr>, Unresolved>,
    },
    /// The TCP connection of this dial came up.
    Connected { generation: u64 },
    /// The TCP connection of this dial went down.
    Disconnected { generation: u64 },
    /// The dial failed (the socket redials by itself unless stopped).
    ConnectFailed { generation: u64 },
    /// The IO side stopped (true) or resumed (false) reading because the application is slow.
    ReadPaused(bool),
    /// A request accepted by the handle; its outcome leaves as `Action::Answer`.
    Request {
        token: Token,
        frame: Bytes,
        /// Its id, when correlating by id.
        id: Option<Vec<u8>>,
        deadline: Instant,
    },
    /// The link was not served for `unserved`, up to now: the process was stopped or got no
    /// CPU, or a slow callback held the IO thread. Given before the pass reads the socket.
    Resumed { unserved: Duration },
    /// Application code run off the IO thread (the resolver) took `took`.
    CallbackTook { callback: Callback, took: Duration },
    /// Payload bytes of the connection of dial `generation` that the peer's kernel has
    /// acknowledged (`TCP_INFO`), or `None` when no reading could be taken now.
    Acked { generation: u64, bytes: Option<u64> },
    /// The acknowledgements of the connection of dial `generation` cannot be read (its
    /// descriptor could not be matched): its frames count as confirmed when written.
    AcksUnavailable { generation: u64 },
    /// A flush: answered with `Action::Flushed` once every frame submitted before it has its
    /// outcome, or at `deadline`.
    Flush { token: Token, deadline: Instant },
}

/// Why a lookup gave no address.
#[derive(Debug)]
pub(crate) enum Unresolved {
    /// The name did not resolve; a short reason.
    Failed(String),
    /// The resolver panicked.
    Panicked(Panicked),
}

impl From<&str> for Unresolved {
    fn from(reason: &str) -> Unresolved {
        Unresolved::Failed(reason.to_string())
    }
}

impl From<String> for Unresolved {
    fn from(reason: String) -> Unresolved {
        Unresolved::Failed(reason)
    }
}

/// What the machine asks the IO side to do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Resolve `host` off the IO thread and answer with `Input::Resolved`.
    Resolve {
        generation: u64,
        host: String,
        port: u16,
    },
    /// Resolve `host` again in the background and answer with `Input::Refreshed`.
    Refresh {
        endpoint: usize,
        host: String,
        port: u16,
    },
    /// Dial `addr` with a routing id made from `generation` (never reused).
    Connect { generation: u64, addr: SocketAddr },
    /// Write these bytes on the current connection now, best effort (the TLS close_notify
    /// ahead of a close's `Disconnect`).
    Send(Vec<u8>),
    /// Stop the socket's own dialling and close the connection of the current dial, if any.
    Disconnect,
    /// Deliver an event to the application.
    Emit(Event),
    /// The machine is Closed: release the socket and stop.
    Stop,
    /// The one outcome of a request, for whoever waits for it.
    Answer(Token, Outcome),
    /// The outcome of a flush.
    Flushed(Token, Result<(), FlushError>),
}

/// Outcome of handing a batch to the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxResult {
    Sent,
    /// EAGAIN: the socket's queue is full; try again shortly.
    WouldBlock,
    /// EHOSTUNREACH: no connection to send on.
    Unreachable,
}

/// The events of the transition table (inputs after generation checks, and timer expiries).
#[derive(Debug)]
enum Ev {
    Start,
    Close(Instant),
    ReconnectNow,
    Resolved(Result<Vec<SocketAddr>, Unresolved>),
    TcpConnected,
    ConnectFailed,
    DialTimeout,
    Alive,
    HandshakeTimeout,
    Disconnected,
    HeartbeatDead,
    ProtocolError(DecodeError),
    /// The TLS session failed (handshake or record).
    Tls(TlsError),
    Unreachable,
    /// Application code run for this connection panicked (a predicate, the framing).
    CallbackPanicked(Panicked),
    /// The protocol's verdict: the peer refused the link.
    Rejected(String),
    Stable,
    RetryTimer,
    Flushed,
    CloseDeadline,
}

/// An outage is first reported at warn level after this long, then each time it doubles.
const OUTAGE_WARN_FIRST: Duration = Duration::from_secs(10);

/// The state machine of one link.
///
/// It holds what outlives a connection: the settings and the state, the dial's bookkeeping
/// (generation, attempt, failures, native redials, backoff, the endpoints and the one in use),
/// the timers, the outbox, the requests and the window (frames written and not yet confirmed,
/// resent or reported when their connection is lost), the counters and the outage record.
/// What belongs to one TCP connection is in [`Connection`], made when it comes up and dropped
/// with it.
#[derive(Debug)]
pub(crate) struct Machine {
    cfg: Settings,
    state: State,
    since: Instant,
    /// The dial in progress; inputs of another one are stale.
    generation: u64,
    /// The connection of the current dial, from its TCP connect to its teardown: `Some`
    /// exactly while Connected or Ready.
    conn: Option<Connection>,
    /// Failed dials and lost connections in a row, libzmq's own redials included.
    failures: u32,
    /// The attempt: the ordinal of the latest dial relink made since the last stable connection
    /// (0 when none was made since). The backoff grows with it and `max_attempts` counts it.
    attempt: u32,
    native_left: u32,
    /// Native redials used since the last stable connection (they are the fast path for the
    /// first failures of an outage, not for every dial).
    native_used: u32,
    /// When the current dial (or the native redial of it) began.
    dial_started: Instant,
    backoff: Backoff,
    rng: StdRng,
    timers: Timers,
    retry_delay: Option<Duration>,
    outbox: Outbox,
    /// The link's framing: decodes the connection's `rx`, encodes control frames and the
    /// outbox's frames.
    framing: BoxedFraming,
    actions: VecDeque<Action>,
    closing: bool,
    endpoints: Endpoints,
    /// The endpoint and address of the current dial (kept after a failure: its log line,
    /// the metrics and the next dial's choice name it).
    current: Option<(usize, SocketAddr)>,
    /// The endpoint whose answer is awaited.
    resolving: Option<usize>,
    outage_since: Option<Instant>,
    last_outage: Option<Duration>,
    /// Since when attempts have been failing without a Ready in between.
    failing_since: Option<Instant>,
    /// The outage length at which the next warn line is due.
    next_outage_warn: Duration,
    last_rtt: Option<Duration>,
    /// The IO side stopped reading because the application is slow (whatever the connection).
    read_paused: bool,
    /// Why the current failure happened, for the transition's log line.
    fail_reason: Option<String>,
    /// Times every call into application code (the IO side's clock; none in unit tests).
    watch: Box<dyn Stopwatch>,
    /// When a slow callback was last reported, and how many came since without a report.
    slow_reported: Option<Instant>,
    slow_unreported: u64,
    c: Counters,
    /// Requests outstanding and their replies.
    requests: Requests,
    /// Frames written and not yet confirmed; a lost connection's are resent or reported.
    window: Window,
    /// What the protocol does at the edges of a connection (taken from the settings).
    protocol: Option<BoxedProtocol>,
    /// How many losses in a row the oldest unconfirmed frame has been in flight at.
    losses: Losses,
    /// Flushes waiting for the frames submitted before them.
    flushes: Vec<Flush>,
}

/// A flush: waits until the frames submitted before it have their outcome.
#[derive(Debug)]
struct Flush {
    token: Token,
    /// Frames submitted before it.
    mark: u64,
    /// Frames abandoned before it.
    abandoned: u64,
    deadline: Instant,
}

impl Machine {
    /// A machine in Idle. `seed` draws the backoff jitter and the endpoint order.
    pub(crate) fn new(mut cfg: Settings, seed: u64, now: Instant) -> Machine {
        let mut rng = StdRng::seed_from_u64(seed);
        let endpoints = Endpoints::new(std::mem::take(&mut cfg.endpoints), &mut rng);
        let framing = cfg.framing.clone();
        let protocol = cfg.protocol.take();
        let outbox = Outbox::new(cfg.outbox_frames, cfg.outbox_bytes);
        let backoff = Backoff::new(cfg.backoff.clone());
        let requests = Requests::new(&cfg.requests, cfg.max_losses);
        let window = Window::new(cfg.confirm.by_reply);
        Machine {
            cfg,
            state: State::Idle,
            since: now,
            generation: 0,
            conn: None,
            failures: 0,
            attempt: 0,
            native_left: 0,
            native_used: 0,
            dial_started: now,
            backoff,
            rng,
            timers: Timers::default(),
            retry_delay: None,
            outbox,
            framing,
            actions: VecDeque::new(),
            closing: false,
            endpoints,
            current: None,
            resolving: None,
            outage_since: None,
            last_outage: None,
            failing_since: None,
            next_outage_warn: OUTAGE_WARN_FIRST,
            last_rtt: None,
            read_paused: false,
            fail_reason: None,
            watch: Box::new(Untimed),
            slow_reported: None,
            slow_unreported: 0,
            c: Counters::default(),
            requests,
            window,
            protocol,
            losses: Losses::default(),
            flushes: Vec::new(),
        }
    }

    /// Times every call into application code from now on with `watch`.
    pub(crate) fn set_stopwatch(&mut self, watch: Box<dyn Stopwatch>) {
        self.watch = watch;
    }

    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// The link's name, as every log line about it says it.
    pub(crate) fn name(&self) -> &std::sync::Arc<str> {
        &self.cfg.name
    }

    /// Frames submitted, sent and received: changes whenever application data moved
    /// (heartbeats do not count).
    pub(crate) fn traffic(&self) -> u64 {
        self.c.traffic()
    }

    /// Application frames sent (handed to the socket) and received, since the start.
    pub(crate) fn sent_received(&self) -> (u64, u64) {
        (self.c.sent, self.c.received)
    }

    /// Frames and bytes that left the outbox for good (sent or abandoned), since the start.
    pub(crate) fn released(&self) -> (u64, u64) {
        (self.c.released_frames, self.c.released_bytes)
    }

    /// Frames confirmed so far.
    pub(crate) fn confirmed(&self) -> u64 {
        self.c.confirmed
    }

    /// Feeds one input.
    pub(crate) fn handle_input(&mut self, now: Instant, input: Input) {
        match input {
            Input::Start => self.step(now, Ev::Start),
            Input::Close { deadline } => self.step(now, Ev::Close(deadline)),
            Input::ReconnectNow => self.step(now, Ev::ReconnectNow),
            Input::Submit { frame, deadline } => self.submit(now, frame, deadline),
            Input::SubmitBatch { batch, deadline } => self.submit_batch(now, batch, deadline),
            Input::Resolved { generation, result } => {
                if self.is_current(generation) {
                    self.step(now, Ev::Resolved(result))
                } else {
                    self.c.ignored += 1;
                    if let Err(Unresolved::Panicked(p)) = result {
                        // Too late to fail its dial, but the application still hears of it.
                        self.report_panic(&p);
                    }
                }
            }
            Input::Refreshed { endpoint, result } => self.refreshed(now, endpoint, result),
            Input::Connected { generation } => self.for_current(now, generation, Ev::TcpConnected),
            Input::Disconnected { generation } => {
                self.for_current(now, generation, Ev::Disconnected)
            }
            Input::ConnectFailed { generation } => {
                self.for_current(now, generation, Ev::ConnectFailed)
            }
            Input::ReadPaused(paused) => {
                let resumed = self.read_paused && !paused;
                self.read_paused = paused;
                if let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) {
                    hb.set_paused(paused, now);
                }
                if resumed {
                    // What waited unread reaches the machine from now on: the handshake's
                    // verdict, if near, gets a full bound to see it.
                    self.defer_verdict(now, Timer::Handshake);
                }
            }
            Input::Request {
                token,
                frame,
                id,
                deadline,
            } => self.request(now, token, frame, id, deadline),
            Input::Resumed { unserved } => self.resumed(now, unserved),
            Input::CallbackTook { callback, took } => self.took(now, callback, took),
            Input::Acked { generation, bytes } => self.acked(now, generation, bytes),
            Input::AcksUnavailable { generation } => self.acks_unavailable(generation),
            Input::Flush { token, deadline } => self.flush(now, token, deadline),
        }
        self.answer_requests();
        self.check_flushed(now);
    }

    /// Bytes received on the connection of dial `generation`.
    pub(crate) fn handle_data(&mut self, now: Instant, generation: u64, bytes: &[u8]) {
        if !self.is_current(generation) || !matches!(self.state, State::Connected | State::Ready) {
            self.c.ignored += 1;
            self.stale_data(bytes.len());
            return;
        }
        if let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) {
            hb.on_inbound(now);
        }
        if self.speaks_tls() {
            self.tls_data(now, bytes);
        } else {
            self.on_plaintext(now, bytes);
        }
    }

    /// Fires every timer due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for (timer, ev) in [
            (Timer::Close, Ev::CloseDeadline),
            (Timer::Dial, Ev::DialTimeout),
            (Timer::Handshake, Ev::HandshakeTimeout),
            (Timer::Retry, Ev::RetryTimer),
            (Timer::Stable, Ev::Stable),
        ] {
            if timer == Timer::Handshake && self.read_paused {
                // The answer may be waiting unread: no verdict on the peer while paused.
                if self.timers.at(timer).is_some_and(|at| at <= now) {
                    self.defer_verdict(now, timer);
                }
                continue;
            }
            if self.timers.take(timer, now) {
                self.step(now, ev);
            }
        }
        if self.timers.take(Timer::SendRetry, now) {
            // Nothing to do: poll_transmit offers the batch again.
        }
        if self.timers.take(Timer::DnsRefresh, now) {
            self.refresh_dns();
        }
        let expired = self.outbox.expire(now);
        self.abandon_all(expired, AbandonReason::Expired);
        self.requests.expire(now);
        self.answer_requests();
        // The IO side reads the acknowledgements in this pass.
        if self.reading_at().is_some_and(|t| t <= now) {
            self.window.poll_due(now);
        }
        self.heartbeat_due(now);
        self.check_flushed(now);
    }

    /// The next instant `handle_timeout` has work to do.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let mut next = self.timers.next();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        consider(self.outbox.next_deadline());
        consider(self.requests.next_deadline());
        consider(self.reading_at());
        consider(self.flush_deadline());
        consider(self.barrier_at());
        if let Some(hb) = self.conn.as_ref().and_then(|c| c.heartbeat.as_ref()) {
            consider(hb.death_at());
            consider(Some(hb.next_ping()));
        }
        next
    }

    /// The next effect to carry out.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    // ----- the transition table -------------------------------------------------------------

    fn step(&mut self, now: Instant, ev: Ev) {
        use State::*;
        match (self.state, ev) {
            (Closed, _) => self.c.ignored += 1,
            (Idle, Ev::Start) => self.dial(now, Cause::Start),
            (Connecting, Ev::Resolved(Ok(addrs))) => self.resolved(now, addrs),
            (Connecting, Ev::Resolved(Err(Unresolved::Failed(reason)))) => {
                log::debug!("relink[{}]: resolving failed: {reason}", self.cfg.name);
                self.fail(now, Cause::Dns)
            }
            (Connecting, Ev::Resolved(Err(Unresolved::Panicked(p)))) => {
                self.report_panic(&p);
                self.fail(now, Cause::CallbackPanic)
            }
            (Connecting, Ev::TcpConnected) => self.tcp_connected(now),
            (Connecting, Ev::ConnectFailed) if self.native_left > 0 => {
                self.dial_started = now;
                self.native_left -= 1;
                self.native_used = self.native_used.saturating_add(1);
                self.failures = self.failures.saturating_add(1);
                self.note_address_failed();
                log::debug!(
                    "relink[{}]: dial {} failed (refused); the socket redials ({} native retries left)",
                    self.cfg.name,
                    self.endpoint_text().unwrap_or_default(),
                    self.native_left
                );
                self.timers.arm(Timer::Dial, now + self.cfg.dial_bound);
            }
            (Connecting, Ev::ConnectFailed) => {
                // A dial the socket gave up on after its connect timeout is reported the same
                // way as a refused one; the time it took tells them apart.
                let took = now.saturating_duration_since(self.dial_started);
                if took >= self.cfg.connect_timeout {
                    self.fail(now, Cause::ConnectTimeout)
                } else {
                    self.fail(now, Cause::Refused)
                }
            }
            (Connecting, Ev::DialTimeout) => self.fail(now, Cause::ConnectTimeout),
            (Connected, Ev::Alive) => self.ready(now),
            (Connected, Ev::HandshakeTimeout) if self.tls_handshaking() => {
                let bound = self.tls_handshake_bound();
                self.tls_failed(now, TlsError::HandshakeTimeout(bound))
            }
            (Connected, Ev::HandshakeTimeout) => self.fail(now, Cause::HandshakeTimeout),
            (Connected, Ev::Rejected(reason)) => {
                self.c.handshakes_refused += 1;
                self.emit(Event::Error(LinkError::Refused {
                    reason: reason.clone(),
                }));
                self.fail_reason = Some(reason);
                self.fail(now, Cause::Rejected)
            }
            (Connected | Ready, Ev::Tls(e)) => self.tls_failed(now, e),
            (Connected | Ready, Ev::Disconnected) => {
                // Everything the peer wrote before its close was decoded on its way here.
                self.report_cut_frame();
                self.fail(now, Cause::PeerClosed)
            }
            (Connected | Ready, Ev::HeartbeatDead) => self.fail(now, Cause::HeartbeatTimeout),
            (Connected | Ready, Ev::ProtocolError(e)) => {
                self.emit(Event::Error(LinkError::Decode(e)));
                self.fail(now, Cause::Protocol)
            }
            (Connected | Ready, Ev::Unreachable) => self.fail(now, Cause::Unreachable),
            (Connected | Ready, Ev::CallbackPanicked(p)) => {
                self.report_panic(&p);
                self.fail(now, Cause::CallbackPanic)
            }
            (Ready, Ev::Stable) => {
                self.failures = 0;
                self.attempt = 0;
                self.native_used = 0;
                self.backoff.reset();
            }
            (Backoff, Ev::RetryTimer) => self.dial(now, Cause::RetryTimer),
            (Cooldown, Ev::RetryTimer) => self.dial(now, Cause::CooldownOver),
            (Backoff | Cooldown, Ev::ReconnectNow) => self.dial(now, Cause::ReconnectNow),
            (_, Ev::Close(deadline)) => {
                self.closing = true;
                self.timers.arm(Timer::Close, deadline);
                if self.drained() {
                    self.finish(now);
                }
            }
            (_, Ev::Flushed) | (_, Ev::CloseDeadline) => self.finish(now),
            (state, ev) => {
                self.c.ignored += 1;
                log::trace!(
                    "relink[{}]: no row for {ev:?} in {state}; ignored",
                    self.cfg.name
                );
            }
        }
    }

    // ----- effects ----------------------------------------------------------------------------

    /// Tells the application that its code panicked, and counts it.
    fn report_panic(&mut self, p: &Panicked) {
        self.c.callback_panics += 1;
        log::warn!("relink[{}]: {}", self.cfg.name, p.to_error());
        self.emit(Event::Error(p.to_error()));
    }

    /// A failed attempt or a lost connection: close it, count it, wait.
    fn fail(&mut self, now: Instant, cause: Cause) {
        let was = self.state;
        self.teardown();
        if was == State::Ready && self.outage_since.is_none() {
            self.outage_since = Some(now);
        }
        self.failures = self.failures.saturating_add(1);
        if was == State::Connecting {
            // A dial that failed makes the cached answer suspect: ask again. A connection that
            // was up and dropped says nothing against the address.
            self.note_address_failed();
        }
        self.redeliver();
        // Requests written again carry the protocol's mark, as frames do (a panic there keeps
        // the request as it was: the connection is already down).
        let protocol = self.protocol.as_ref();
        self.requests.connection_lost(|frame| {
            let p = protocol?;
            crate::core::guard::guarded(Callback::Protocol, || p.resend(frame))
                .ok()
                .flatten()
        });
        self.answer_requests();
        if self.cfg.abandon_on_disconnect && matches!(was, State::Connected | State::Ready) {
            let frames = self.outbox.drain();
            self.abandon_all(frames, AbandonReason::ConnectionLost);
        }
        log::debug!(
            "relink[{}]: attempt failed ({cause}) on {}: attempt={} failures={}",
            self.cfg.name,
            self.endpoint_text().unwrap_or_else(|| "-".into()),
            self.attempt,
            self.failures
        );
        let failing_since = *self.failing_since.get_or_insert(now);
        let failing_for = now.saturating_duration_since(failing_since);
        if failing_for >= self.next_outage_warn {
            log::warn!(
                "relink[{}]: no connection for {}s ({} failures in a row, last: {cause}); still retrying",
                self.cfg.name,
                failing_for.as_secs(),
                self.failures
            );
            while self.next_outage_warn <= failing_for {
                self.next_outage_warn = self.next_outage_warn.saturating_mul(2);
            }
        }
        let exhausted = self.cfg.max_attempts.is_some_and(|m| self.attempt >= m);
        let (to, delay) = if exhausted {
            (State::Cooldown, self.cfg.cooldown)
        } else if matches!(cause, Cause::TlsRejected | Cause::Rejected) {
            // The same certificates (or credentials) get the same answer: no backoff meant
            // for restarts.
            let wait = self.cfg.config_retry.unwrap_or(self.cfg.cooldown);
            log::warn!(
                "relink[{}]: {cause} on {} ({}); a retry cannot fix this, next attempt in {wait:?}",
                self.cfg.name,
                self.endpoint_text().unwrap_or_else(|| "-".into()),
                self.fail_reason.as_deref().unwrap_or("-")
            );
            (State::Backoff, wait)
        } else {
            (
                State::Backoff,
                // A connection that was stable and dropped is followed by attempt 1's delay.
                self.backoff.delay(self.attempt.max(1), &mut self.rng),
            )
        };
        self.timers.arm(Timer::Retry, now + delay);
        self.retry_delay = Some(delay);
        self.transition(now, to, cause);
        if self.closing && self.drained() {
            self.finish(now);
        }
    }

    /// Closes the connection of the current dial and forgets its per-connection state.
    fn teardown(&mut self) {
        self.actions.push_back(Action::Disconnect);
        if let Some(conn) = &self.conn {
            // Bytes of a frame not finished when relink itself ended the connection.
            self.c.bytes_discarded += conn.rx.len() as u64;
        }
        for t in [
            Timer::Dial,
            Timer::Handshake,
            Timer::Stable,
            Timer::SendRetry,
        ] {
            self.timers.disarm(t);
        }
        self.requeue_in_flight();
        // Nothing of the connection outlives it; the framing itself is reset (guarded) when
        // the next connection comes up.
        self.conn = None;
        // Any later input of this dial is stale.
        self.generation += 1;
    }

    fn transition(&mut self, now: Instant, to: State, cause: Cause) {
        let from = self.state;
        if from == to && to != State::Connecting {
            return;
        }
        self.state = to;
        self.since = now;
        let next_retry = match to {
            State::Backoff | State::Cooldown => self.retry_delay,
            _ => None,
        };
        let endpoint = self.endpoint_text();
        let why = match self.fail_reason.take() {
            Some(reason) => format!("{cause}: {reason}"),
            None => cause.to_string(),
        };
        match (to, next_retry) {
            (State::Cooldown, Some(d)) => log::warn!(
                "relink[{}]: attempt {} failed on {} (last: {why}); cooling down for {:?}",
                self.cfg.name,
                self.attempt,
                endpoint.as_deref().unwrap_or("-"),
                d
            ),
            _ => log::info!(
                "relink[{}]: {from} -> {to} ({why}) attempt={} next_retry={}",
                self.cfg.name,
                self.attempt,
                next_retry.map_or("-".to_string(), |d| format!("{d:?}"))
            ),
        }
        if from == to {
            return;
        }
        self.emit(Event::State(Transition {
            from,
            to,
            cause,
            attempt: self.attempt,
            next_retry,
            endpoint,
        }));
    }

    fn endpoint_text(&self) -> Option<String> {
        match self.current {
            Some((_, addr)) => Some(fmt_addr(addr)),
            None => self
                .resolving
                .map(|idx| self.endpoints.get(idx).to_string()),
        }
    }

    fn emit(&mut self, ev: Event) {
        self.actions.push_back(Action::Emit(ev));
    }

    fn is_current(&self, generation: u64) -> bool {
        generation == self.generation
    }

    fn for_current(&mut self, now: Instant, generation: u64, ev: Ev) {
        if self.is_current(generation) {
            self.step(now, ev);
        } else {
            self.c.ignored += 1;
            log::trace!(
                "relink[{}]: stale {ev:?} from dial {generation} dropped",
                self.cfg.name
            );
        }
    }
}

mod close;
mod connection;
mod dial;
mod intake;
mod metrics;
mod receive;
mod served;
#[cfg(test)]
mod tests;
mod tls;
mod transmit;
