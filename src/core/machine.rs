//! The link's state machine: pure, sans-IO.
//!
//! No socket, no clock, no sleep, no global random generator. Time comes in as `now`, the next
//! deadline leaves as [`Machine::poll_timeout`], effects leave as [`Action`]s drained with
//! [`Machine::poll_action`], and bytes to write are pulled with [`Machine::poll_transmit`].
//!
//! This file holds the types, the [`Machine`] (what outlives a connection), the inputs, the
//! transition table and the glue that needs several parts at once: the dial, `fail`,
//! `teardown`, the close, and the snapshot. The child modules hold the parts as types that
//! own their fields: `dial` ([`Dialer`]), `outage` ([`Outage`]), `callbacks` ([`Callbacks`]),
//! `flushes` ([`Flushes`]) and `connection` ([`Connection`]); `tls`, `receive` and `transmit`
//! are the byte paths.
//!
#![doc = include_str!("../../docs/transitions.md")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::SeedableRng;

use self::callbacks::Callbacks;
use self::connection::Connection;
use self::dial::{Dialer, Next};
use self::flushes::Flushes;
use self::outage::Outage;
use super::backoff::Backoff;
use super::counters::Counters;
use super::endpoints::{fmt_addr, Endpoints};
use super::framing::BoxedFraming;
use super::guard::{Panicked, Stopwatch};
use super::outbox::Outbox;
use super::protocol::BoxedProtocol;
use super::requests::{Outcome, Requests, Token};
use super::settings::Settings;
use super::timers::{Timer, Timers};
use super::window::{Losses, Window};
use crate::batch::Batch;
use crate::error::{Callback, DecodeError, FlushError, LinkError, RequestError, TlsError};
use crate::event::{AbandonReason, Cause, Event, State, Transition};
use crate::metrics::Metrics;

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

/// The state machine of one link.
///
/// It holds what outlives a connection, each part a type of its own: the settings and the
/// state, the [`Dialer`] (which dial is current, attempts and failures, backoff, endpoints),
/// the timers, the outbox, the requests and the window (frames written and not yet confirmed,
/// resent or reported when their connection is lost), the [`Flushes`], the counters, the
/// [`Outage`] record and the [`Callbacks`]' stopwatch and slow reports. What belongs to one
/// TCP connection is in [`Connection`], made when it comes up and dropped with it.
#[derive(Debug)]
pub(crate) struct Machine {
    cfg: Settings,
    state: State,
    since: Instant,
    /// The dial's bookkeeping: generation, attempt, failures, backoff, endpoints.
    dial: Dialer,
    /// The connection of the current dial, from its TCP connect to its teardown: `Some`
    /// exactly while Connected or Ready.
    conn: Option<Connection>,
    timers: Timers,
    outbox: Outbox,
    /// The link's framing: decodes the connection's `rx`, encodes control frames and the
    /// outbox's frames.
    framing: BoxedFraming,
    actions: VecDeque<Action>,
    closing: bool,
    outage: Outage,
    last_rtt: Option<Duration>,
    /// The IO side stopped reading because the application is slow (whatever the connection).
    read_paused: bool,
    /// Why the current failure happened, for the transition's log line.
    fail_reason: Option<String>,
    /// The stopwatch of calls into application code, and the slow ones' reports.
    callbacks: Callbacks,
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
    flushes: Flushes,
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
            dial: Dialer::new(endpoints, backoff, rng, now),
            conn: None,
            timers: Timers::default(),
            outbox,
            framing,
            actions: VecDeque::new(),
            closing: false,
            outage: Outage::default(),
            last_rtt: None,
            read_paused: false,
            fail_reason: None,
            callbacks: Callbacks::default(),
            c: Counters::default(),
            requests,
            window,
            protocol,
            losses: Losses::default(),
            flushes: Flushes::default(),
        }
    }

    /// Times every call into application code from now on with `watch`.
    pub(crate) fn set_stopwatch(&mut self, watch: Box<dyn Stopwatch>) {
        self.callbacks.set_watch(watch);
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
        consider(self.flushes.deadline());
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
            (Connecting, Ev::ConnectFailed) if self.dial.native_left() > 0 => {
                let left = self.dial.native_redial(now);
                log::debug!(
                    "relink[{}]: dial {} failed (refused); the socket redials ({left} native retries left)",
                    self.cfg.name,
                    self.endpoint_text().unwrap_or_default(),
                );
                self.timers.arm(Timer::Dial, now + self.cfg.dial_bound);
            }
            (Connecting, Ev::ConnectFailed) => {
                // A dial the socket gave up on after its connect timeout is reported the same
                // way as a refused one; the time it took tells them apart.
                if self.dial.took(now) >= self.cfg.connect_timeout {
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
            (Ready, Ev::Stable) => self.dial.stable(),
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
        if was == State::Ready {
            self.outage.lost(now);
        }
        // A dial that failed makes the cached answer suspect: ask again.
        self.dial.failed(was == State::Connecting);
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
            self.dial.attempt(),
            self.dial.failures()
        );
        self.outage
            .failed(now, &self.cfg.name, self.dial.failures(), cause);
        let exhausted = self.dial.exhausted(self.cfg.max_attempts);
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
            (State::Backoff, self.dial.backoff_delay())
        };
        self.timers.arm(Timer::Retry, now + delay);
        self.dial.set_retry_delay(Some(delay));
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
        self.dial.end();
    }

    fn transition(&mut self, now: Instant, to: State, cause: Cause) {
        let from = self.state;
        if from == to && to != State::Connecting {
            return;
        }
        self.state = to;
        self.since = now;
        let next_retry = match to {
            State::Backoff | State::Cooldown => self.dial.retry_delay(),
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
                self.dial.attempt(),
                endpoint.as_deref().unwrap_or("-"),
                d
            ),
            _ => log::info!(
                "relink[{}]: {from} -> {to} ({why}) attempt={} next_retry={}",
                self.cfg.name,
                self.dial.attempt(),
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
            attempt: self.dial.attempt(),
            next_retry,
            endpoint,
        }));
    }

    fn endpoint_text(&self) -> Option<String> {
        self.dial.endpoint_text()
    }

    fn emit(&mut self, ev: Event) {
        self.actions.push_back(Action::Emit(ev));
    }

    fn is_current(&self, generation: u64) -> bool {
        self.dial.is_current(generation)
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

    // ----- the dial ---------------------------------------------------------------------------

    fn dial(&mut self, now: Instant, cause: Cause) {
        self.timers.disarm(Timer::Retry);
        let next = self
            .dial
            .begin(now, self.cfg.native_retries, self.cfg.dns_refresh);
        self.timers.arm(Timer::Dial, now + self.cfg.dial_bound);
        self.transition(now, State::Connecting, cause);
        match next {
            Next::Connect(addr) => self.connect(addr),
            Next::Resolve { host, port } => self.actions.push_back(Action::Resolve {
                generation: self.dial.generation(),
                host,
                port,
            }),
        }
    }

    fn resolved(&mut self, now: Instant, addrs: Vec<SocketAddr>) {
        match self.dial.resolved(now, addrs) {
            Err(()) => self.c.ignored += 1,
            Ok(None) => self.fail(now, Cause::Dns),
            Ok(Some(addr)) => {
                self.timers
                    .arm(Timer::DnsRefresh, now + self.cfg.dns_refresh);
                self.connect(addr);
            }
        }
    }

    /// Asks for a fresh answer for the endpoint in use, in the background: the next dial then
    /// finds it in the cache.
    fn refresh_dns(&mut self) {
        if let Some((endpoint, host, port)) = self.dial.refresh() {
            self.actions.push_back(Action::Refresh {
                endpoint,
                host,
                port,
            });
        }
    }

    /// A background answer: replaces the cached one (a failure keeps the old answer), and the
    /// next refresh is armed. No state changes.
    /// A resolver that panicked in the background is reported; the connection in use is not
    /// touched.
    fn refreshed(&mut self, now: Instant, idx: usize, result: Result<Vec<SocketAddr>, Unresolved>) {
        if let Err(Unresolved::Panicked(p)) = &result {
            self.report_panic(p);
        }
        if self.state == State::Closed || !self.dial.has_endpoint(idx) {
            self.c.ignored += 1;
            return;
        }
        self.dial.refreshed(now, &self.cfg.name, idx, result.ok());
        self.timers
            .arm(Timer::DnsRefresh, now + self.cfg.dns_refresh);
    }

    fn connect(&mut self, addr: SocketAddr) {
        log::debug!("relink[{}]: dialling {}", self.cfg.name, fmt_addr(addr));
        self.actions.push_back(Action::Connect {
            generation: self.dial.generation(),
            addr,
        });
    }

    /// The TCP connection of the current dial came up: a fresh [`Connection`] for it, and
    /// with TLS its handshake begins.
    fn tcp_connected(&mut self, now: Instant) {
        self.timers.disarm(Timer::Dial);
        self.timers.disarm(Timer::SendRetry);
        self.c.connects += 1;
        let (tls, handshake) = match self.tls_session() {
            None => (None, Ok(None)),
            Some((Ok(session), bound)) => (Some(session), Ok(Some(bound))),
            Some((Err(e), _)) => (None, Err(e)),
        };
        self.conn = Some(Connection::new(tls));
        self.transition(now, State::Connected, Cause::TcpConnected);
        match handshake {
            Ok(None) => self.link_up(now),
            // The ClientHello is ready in the session; poll_transmit sends it.
            Ok(Some(bound)) => self.timers.arm(Timer::Handshake, now + bound),
            Err(e) => self.tls_failed(now, e),
        }
    }

    // ----- served time and slow callbacks -----------------------------------------------------

    /// After a gap in which the link was not served, a verdict on the peer that was due, or
    /// about to be, gets a fresh chance: the heartbeat a ping at once and a full bound, the
    /// handshake, TLS handshake and dial bounds their full length again from `now`. Frame
    /// deadlines, the backoff and the close deadline stay as they were.
    fn resumed(&mut self, now: Instant, unserved: Duration) {
        let mut deferred = 0;
        if let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) {
            deferred += u64::from(hb.resumed(now, unserved));
        }
        for t in [Timer::Dial, Timer::Handshake] {
            let Some(at) = self.timers.at(t) else {
                continue;
            };
            // Due, or due sooner than the gap was long: the answer may still be on its way
            // (the socket's own IO thread was stopped too, and hands it over a little later).
            if at <= now + unserved {
                let bound = self.verdict_bound(t);
                self.timers.arm(t, now + bound);
                deferred += 1;
            }
        }
        if deferred > 0 {
            self.c.verdicts_deferred += deferred;
            log::debug!(
                "relink: {} not served for {unserved:?}: the peer gets a fresh chance",
                self.endpoint_text().unwrap_or_else(|| "-".into())
            );
        }
    }

    /// A verdict timer `t` due within its own bound from `now` (or past due) is armed again a
    /// full bound from `now`, counted in `verdicts_deferred`: reading was paused (the
    /// application's pace), so what the peer sent may not have been read yet.
    fn defer_verdict(&mut self, now: Instant, t: Timer) {
        let Some(at) = self.timers.at(t) else {
            return;
        };
        let bound = self.verdict_bound(t);
        if at < now + bound {
            self.timers.arm(t, now + bound);
            if at <= now {
                self.c.verdicts_deferred += 1;
            }
        }
    }

    /// The full length of a verdict timer, as it was armed.
    fn verdict_bound(&self, t: Timer) -> Duration {
        match t {
            Timer::Dial => self.cfg.dial_bound,
            _ if self.tls_handshaking() => self.tls_handshake_bound(),
            Timer::Handshake => self.cfg.handshake_timeout,
            _ => Duration::ZERO,
        }
    }

    /// Application code `callback` took `took`: counted and reported when it is slow (at
    /// most one warn line and one error event per link per period).
    fn took(&mut self, now: Instant, callback: Callback, took: Duration) {
        let (c, dial) = (&mut self.c, &self.dial);
        let threshold = self.cfg.slow_callback;
        let slow = self
            .callbacks
            .took(now, callback, took, threshold, c, || dial.endpoint_text());
        if let Some(e) = slow {
            self.emit(Event::Error(e));
        }
    }

    // ----- frames and requests handed in, frames given back -----------------------------------

    /// A frame accepted by the handle: queued, or given back at once when the link is
    /// closed or its deadline has passed.
    fn submit(&mut self, now: Instant, frame: Bytes, deadline: Option<Instant>) {
        self.c.submitted += 1;
        if self.state == State::Closed {
            self.abandon_all(vec![frame], AbandonReason::Shutdown);
            return;
        }
        if deadline.is_some_and(|d| d <= now) {
            self.abandon_all(vec![frame], AbandonReason::Expired);
            return;
        }
        self.outbox.push(frame, deadline);
        self.trim();
    }

    /// Frames accepted by the handle in one call, as `submit` takes one.
    fn submit_batch(&mut self, now: Instant, batch: Batch, deadline: Option<Instant>) {
        self.c.submitted += batch.len() as u64;
        if self.state == State::Closed {
            self.abandon_all(batch.into_shared_frames(), AbandonReason::Shutdown);
            return;
        }
        if deadline.is_some_and(|d| d <= now) {
            self.abandon_all(batch.into_shared_frames(), AbandonReason::Expired);
            return;
        }
        self.outbox.push_batch(batch, deadline);
        self.trim();
    }

    /// A request accepted by the handle: waits for its turn, or is answered at once when the
    /// link is closed.
    fn request(
        &mut self,
        now: Instant,
        token: Token,
        frame: Bytes,
        id: Option<Vec<u8>>,
        deadline: Instant,
    ) {
        self.c.requests_submitted += 1;
        if self.state == State::Closed {
            return self
                .requests
                .answer(token, Err(RequestError::Closed(frame)));
        }
        self.requests.submit(now, token, frame, id, deadline);
    }

    /// Hands every outcome reached to its caller.
    fn answer_requests(&mut self) {
        while let Some((token, outcome)) = self.requests.poll_outcome() {
            self.actions.push_back(Action::Answer(token, outcome));
        }
    }

    /// Gives each frame back to the application (`Event::Abandoned`), counted.
    fn abandon_all(&mut self, frames: Vec<Bytes>, reason: AbandonReason) {
        for frame in frames {
            self.c.abandon(reason, frame.len());
            self.emit(Event::Abandoned { frame, reason });
        }
    }

    // ----- flushes and the close ----------------------------------------------------------------

    /// A flush: answered once every frame submitted before it has its outcome, or at
    /// `deadline`.
    fn flush(&mut self, now: Instant, token: Token, deadline: Instant) {
        self.flushes
            .push(token, self.c.submitted, self.c.abandoned.total(), deadline);
        self.barrier_due(now);
        self.settle_flushes(now);
    }

    /// Answers the flushes whose frames all have their outcome, or whose deadline passed.
    fn settle_flushes(&mut self, now: Instant) {
        let waiting = (self.outbox.len() + self.window.len()) as u64;
        let (submitted, abandoned) = (self.c.submitted, self.c.abandoned.total());
        let actions = &mut self.actions;
        self.flushes
            .settle(now, waiting, submitted, abandoned, |token, outcome| {
                actions.push_back(Action::Flushed(token, outcome))
            });
    }

    /// Flushes answered, and a close that waits for nothing more: the flushed row.
    fn check_flushed(&mut self, now: Instant) {
        if self.flushes.waits() {
            self.settle_flushes(now);
        }
        if self.closing && self.state != State::Closed && self.drained() {
            self.step(now, Ev::Flushed);
        }
    }

    /// Nothing left to write, to confirm or to answer.
    fn drained(&self) -> bool {
        self.outbox.is_empty() && self.window.is_empty() && self.requests.waiting() == 0
    }

    /// The end: the connection closed (with TLS, close_notify first, best effort within
    /// the linger), every frame and request still held given back, the socket released.
    fn finish(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        self.requeue_in_flight();
        let conn = self.conn.take();
        if let Some(c) = &conn {
            self.c.bytes_discarded += c.rx.len() as u64;
        }
        if matches!(
            self.state,
            State::Connecting | State::Connected | State::Ready
        ) {
            // Best effort, within the linger.
            if let Some(bytes) = conn.and_then(Connection::close_notify) {
                self.actions.push_back(Action::Send(bytes));
            }
            self.actions.push_back(Action::Disconnect);
        }
        // Written, not confirmed: the peer may have them.
        let unconfirmed = self
            .window
            .take_all()
            .into_iter()
            .map(|s| s.frame)
            .collect();
        self.abandon_all(unconfirmed, AbandonReason::Unconfirmed);
        self.window.reset();
        let frames = self.outbox.drain();
        self.abandon_all(frames, AbandonReason::Shutdown);
        self.requests.shutdown();
        self.answer_requests();
        self.timers.clear();
        self.dial.set_retry_delay(None);
        self.transition(now, State::Closed, Cause::Closed);
        self.actions.push_back(Action::Stop);
    }

    // ----- the snapshot -------------------------------------------------------------------------

    /// A consistent snapshot at `now`, for [`Metrics`].
    pub(crate) fn metrics(&self, now: Instant) -> Metrics {
        let next_retry_in = match self.state {
            State::Backoff | State::Cooldown => self
                .timers
                .at(Timer::Retry)
                .map(|t| t.saturating_duration_since(now)),
            _ => None,
        };
        let queued = self.outbox.len();
        let queued_bytes = self.outbox.bytes();
        Metrics {
            state: self.state,
            time_in_state: now.saturating_duration_since(self.since),
            attempt: self.dial.attempt(),
            native_redials: self.dial.native_used(),
            consecutive_failures: self.dial.failures(),
            connects: self.c.connects,
            reconnects: self.c.reconnects,
            last_outage: self.outage.last(),
            next_retry_in,
            peer_addr: self.dial.addr(),
            frames_submitted: self.c.submitted,
            frames_sent: self.c.sent,
            bytes_sent: self.c.bytes_sent,
            frames_rejected: self.c.rejected,
            abandoned: self.c.abandoned,
            outbox_frames: queued as u64,
            outbox_bytes: queued_bytes as u64,
            frames_received: self.c.received,
            bytes_received: self.c.bytes_received,
            frames_cut: self.c.frames_cut,
            bytes_cut: self.c.bytes_cut,
            // The IO side's (`Sources::compose`).
            frames_unread: 0,
            bytes_unread: 0,
            bytes_discarded: self.c.bytes_discarded,
            heartbeats_sent: self.c.heartbeats_sent,
            heartbeats_missed: self.c.heartbeats_missed,
            last_rtt: self.last_rtt,
            reading_paused: self.read_paused,
            events_dropped: 0,
            ignored_inputs: self.c.ignored,
            callback_panics: self.c.callback_panics,
            requests_submitted: self.c.requests_submitted,
            requests_late_held: (self.requests.len() - self.requests.waiting()) as u64,
            barriers_sent: self.c.barriers,
            handshakes_refused: self.c.handshakes_refused,
            frames_answered: self.c.answered_by_link,
            requests_answered: self.requests.answered,
            requests_failed: self.requests.failed,
            requests_outstanding: self.requests.waiting() as u64,
            requests_written: self.requests.written() as u64,
            replies_late: self.requests.late,
            slow_callbacks: self.c.slow_callbacks,
            slowest_callback: self.c.slowest_callback,
            verdicts_deferred: self.c.verdicts_deferred,
            down_for: self.outage.down_for(now),
            tls_rejected: self.c.tls_rejected,
            frames_confirmed: self.c.confirmed,
            frames_unconfirmed: self.window.len() as u64,
            frames_resent: self.c.resent,
            oldest_unconfirmed: self
                .window
                .oldest()
                .map(|t| now.saturating_duration_since(t)),
            frames_recovered: 0,
            spool_bytes_cut: 0,
        }
    }
}

mod callbacks;
mod connection;
mod dial;
mod flushes;
mod outage;
mod receive;
#[cfg(test)]
mod tests;
mod tls;
mod transmit;
