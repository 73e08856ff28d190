//! The link's state machine: pure, sans-IO.
//!
//! No socket, no clock, no sleep, no global random generator. Time comes in as `now`, the next
//! deadline leaves as [`Machine::poll_timeout`], effects leave as [`Action`]s drained with
//! [`Machine::poll_action`], and bytes to write are pulled with [`Machine::poll_transmit`].
//!
//! Every method of [`Machine`] is in this file: its inputs and actions, the transition
//! table, and the glue that needs several parts at once (the dial and its failure, the
//! connection coming up, TLS, the receive and transmit paths, the close, the snapshot). The
//! parts are types of their own in the child modules, each owning its fields and methods:
//!
//! - `dial`: [`Dialer`], the dial's bookkeeping (generation, attempt, failures, native
//!   redials, backoff and its generator, the endpoints and the one in use);
//! - `connection`: [`Connection`], one TCP connection's state (TLS session, receive buffer,
//!   heartbeat, control frames and their turns, the last batch's bookkeeping);
//! - `delivery`: [`Backlog`], what is held across connections (outbox, window and losses,
//!   requests, flushes): a batch's bounds and its requests, written frames, the reading
//!   schedule of the acknowledgements, redelivery;
//! - `flushes`: [`Flushes`], the flushes that wait and their settling;
//! - `outage`: [`Outage`], the outage record and its warn lines;
//! - `callbacks`: [`Callbacks`], the stopwatch of application code and the slow-call reports;
//! - `receive`: what the protocol and the correlation say of an inbound frame;
//! - `transmit`: the filling of a batch through the framing.
//!
#![doc = include_str!("../../docs/transitions.md")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::SeedableRng;

use self::callbacks::Callbacks;
use self::connection::{encode, Connection};
use self::delivery::Backlog;
use self::dial::{Dialer, Next};
use self::outage::Outage;
use self::receive::{inbound, unsolicited};
use self::transmit::{fill_batch, Bounds, Ends, Filled, SEND_RETRY};
use super::addresses::{fmt_addr, Endpoints};
use super::backoff::Backoff;
use super::confirm::{Answers, Control, Turn, Waiting};
use super::counters::Counters;
use super::framing::BoxedFraming;
use super::guard::{guarded, timed};
use super::guard::{Panicked, Stopwatch};
use super::heartbeat::{Ping, Reply};
use super::protocol::BoxedProtocol;
use super::protocol::{Reaction, Replies, ReplyKind, Verdict};
use super::requests::{Inbound, Matched};
use super::requests::{Outcome, Token};
use super::settings::ProofOfLife;
use super::settings::Settings;
use super::timers::{Timer, Timers};
use super::tls::{TlsSession, TlsSettings};
use super::window::{Redelivery, Unconfirmed};
use crate::core::batch::Batch;
use crate::error::{Callback, DecodeError, FlushError, LinkError, RequestError, TlsError};
use crate::event::{AbandonReason, Cause, Event, State, Transition};
use crate::metrics::Metrics;

/// The first pause after a refusal; it doubles while refusals go on, up to the most.
const REFUSAL_PAUSE_FIRST: Duration = Duration::from_millis(10);
const REFUSAL_PAUSE_MAX: Duration = Duration::from_secs(1);
/// The first pause before an opening the peer said "not yet" to is written again; it doubles
/// up to the most.
const REOPEN_PAUSE_FIRST: Duration = Duration::from_millis(10);
const REOPEN_PAUSE_MAX: Duration = Duration::from_millis(250);

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

/// What an inbound frame is ([`Machine::classify`]).
#[derive(Debug)]
enum Arrival {
    /// The opening's verdict is awaited: the protocol's verdict on it first.
    Opening,
    /// The answer in its turn, taken.
    Turn(Waiting),
    /// No turn waits for it: a request's reply (by id, or with no answers said) or the peer's
    /// own.
    Untaken,
    /// The peer answers every frame, none waits, and it is not one of its own.
    Unexpected,
}

/// The state machine of one link.
///
/// It holds what outlives a connection, each part a type of its own: the settings and the
/// state, the [`Dialer`] (which dial is current, attempts and failures, backoff, endpoints),
/// the timers, the [`Backlog`] (outbox, window, requests, flushes: their frames are resent or
/// reported after a loss), the counters, the [`Outage`] record and the [`Callbacks`]'
/// stopwatch and slow reports. What belongs to one TCP connection is in [`Connection`], made
/// when it comes up and dropped with it.
///
/// # Contract
/// The IO side drives it in this order on every pass, with the `now` it read once:
/// 1. inputs: [`handle_input`](Machine::handle_input) for what it saw (a connect, a close,
///    a command, an acknowledged count), [`handle_data`](Machine::handle_data) for bytes of
///    the connection;
/// 2. [`handle_timeout`](Machine::handle_timeout) once [`poll_timeout`](Machine::poll_timeout)
///    is due;
/// 3. [`poll_transmit`](Machine::poll_transmit) until it returns false, each batch answered
///    with [`transmit_done`](Machine::transmit_done) (after
///    [`transmit_unsent`](Machine::transmit_unsent) when the socket gave bytes back);
/// 4. [`poll_action`](Machine::poll_action) until it returns `None`, carrying each out;
/// 5. [`poll_timeout`](Machine::poll_timeout): the deadline to sleep until.
///
/// The getters ([`state`](Machine::state), [`metrics`](Machine::metrics),
/// [`wants_acks`](Machine::wants_acks), ...) may be read at any point; nothing here blocks,
/// reads a clock or touches a socket. An inbound frame is classified once
/// ([`classify`](Machine::classify)) and handled in one `match` ([`on_frame`](Machine::on_frame)).
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
    /// The frames and requests held across connections: outbox, window, requests, flushes.
    delivery: Backlog,
    /// What the protocol does at the edges of a connection (taken from the settings).
    protocol: Option<BoxedProtocol>,
}

impl Machine {
    /// A machine in Idle. `seed` draws the backoff jitter and the endpoint order.
    pub(crate) fn new(mut cfg: Settings, seed: u64, now: Instant) -> Machine {
        let mut rng = StdRng::seed_from_u64(seed);
        let endpoints = Endpoints::new(std::mem::take(&mut cfg.endpoints), &mut rng);
        let framing = cfg.framing.clone();
        let protocol = cfg.protocol.take();
        let backoff = Backoff::new(cfg.backoff.clone());
        let delivery = Backlog::new(&cfg);
        Machine {
            cfg,
            state: State::Idle,
            since: now,
            dial: Dialer::new(endpoints, backoff, rng, now),
            conn: None,
            timers: Timers::default(),
            framing,
            actions: VecDeque::new(),
            closing: false,
            outage: Outage::default(),
            last_rtt: None,
            read_paused: false,
            fail_reason: None,
            callbacks: Callbacks::default(),
            c: Counters::default(),
            delivery,
            protocol,
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

    /// Whether application frames are in the outbox (queued, or in the batch being written):
    /// false means a batch holds control frames alone.
    pub(crate) fn holds_frames(&self) -> bool {
        !self.delivery.outbox.is_empty()
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
        // The event of each is made only when it fires: an `Ev` has variants that hold data,
        // and dropping five of them every pass is not free.
        const FIRED: [(Timer, fn() -> Ev); 5] = [
            (Timer::Close, || Ev::CloseDeadline),
            (Timer::Dial, || Ev::DialTimeout),
            (Timer::Handshake, || Ev::HandshakeTimeout),
            (Timer::Retry, || Ev::RetryTimer),
            (Timer::Stable, || Ev::Stable),
        ];
        for (timer, ev) in FIRED {
            if timer == Timer::Handshake && self.read_paused {
                // The answer may be waiting unread: no verdict on the peer while paused.
                if self.timers.at(timer).is_some_and(|at| at <= now) {
                    self.defer_verdict(now, timer);
                }
                continue;
            }
            if self.timers.take(timer, now) {
                self.step(now, ev());
            }
        }
        // Nothing to do for these: poll_transmit offers the batch again.
        self.timers.take(Timer::SendRetry, now);
        self.timers.take(Timer::Pause, now);
        if self.timers.take(Timer::Reopen, now) && self.state == State::Connected {
            self.open(now);
        }
        if self.timers.take(Timer::DnsRefresh, now) {
            self.refresh_dns();
        }
        let expired = self.delivery.outbox.expire(now);
        self.abandon_all(expired, AbandonReason::Expired);
        self.delivery.requests.expire(now);
        self.answer_requests();
        // The IO side reads the acknowledgements in this pass.
        if self.reading_at().is_some_and(|t| t <= now) {
            self.delivery.window.poll_due(now);
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
        consider(self.delivery.next_deadline());
        consider(self.delivery.reading_wake_at(self.cfg.window, self.closing));
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

    // ----- the transition table ------------------------------------------------------------------

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

    // ----- effects -------------------------------------------------------------------------------

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
        self.delivery.requests.connection_lost(|frame| {
            let p = protocol?;
            crate::core::guard::guarded(Callback::Protocol, || p.resend(frame))
                .ok()
                .flatten()
        });
        self.answer_requests();
        if self.cfg.abandon_on_disconnect && matches!(was, State::Connected | State::Ready) {
            let frames = self.delivery.outbox.drain();
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
            Timer::Pause,
            Timer::Reopen,
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

    // ----- the dial ------------------------------------------------------------------------------

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

    // ----- served time and slow callbacks --------------------------------------------------------

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

    // ----- frames and requests handed in, frames given back --------------------------------------

    /// A frame accepted by the handle: queued, or given back at once when the link is
    /// closed or its deadline has passed.
    fn submit(&mut self, now: Instant, frame: Bytes, deadline: Option<Instant>) {
        self.c.submitted += 1;
        let order = self.delivery.stamp();
        if self.state == State::Closed {
            self.abandon_all(vec![frame], AbandonReason::Shutdown);
            return;
        }
        if deadline.is_some_and(|d| d <= now) {
            self.abandon_all(vec![frame], AbandonReason::Expired);
            return;
        }
        self.delivery.outbox.push(frame, deadline, order);
        self.trim();
    }

    /// Frames accepted by the handle in one call, as `submit` takes one.
    fn submit_batch(&mut self, now: Instant, batch: Batch, deadline: Option<Instant>) {
        self.c.submitted += batch.len() as u64;
        let order = self.delivery.stamp();
        if self.state == State::Closed {
            self.abandon_all(batch.into_shared_frames(), AbandonReason::Shutdown);
            return;
        }
        if deadline.is_some_and(|d| d <= now) {
            self.abandon_all(batch.into_shared_frames(), AbandonReason::Expired);
            return;
        }
        self.delivery.outbox.push_batch(batch, deadline, order);
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
        let order = self.delivery.stamp();
        if self.state == State::Closed {
            return self
                .delivery
                .requests
                .answer(token, Err(RequestError::Closed(frame)));
        }
        // A frame the peer answers with pushes, or with a fixed number of answers, has no
        // reply of its own to give the caller. Nothing is noted of it here: what the
        // connection becomes is learnt from the answers.
        let in_turn = self.cfg.answers == Answers::EveryFrame && !self.delivery.requests.by_id();
        if let Some(p) = self.protocol.as_ref().filter(|_| in_turn) {
            let (replies, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
                p.replies(&frame)
            });
            self.took(now, Callback::Protocol, took);
            if matches!(replies, Ok(Replies::Many(_) | Replies::Pushed)) {
                return self
                    .delivery
                    .requests
                    .answer(token, Err(RequestError::NoReply(frame)));
            }
        }
        self.delivery
            .requests
            .submit(now, token, frame, id, deadline, order);
    }

    /// Hands every outcome reached to its caller.
    fn answer_requests(&mut self) {
        while let Some((token, outcome)) = self.delivery.requests.poll_outcome() {
            self.actions.push_back(Action::Answer(token, outcome));
        }
    }

    /// Gives each frame back to the application (`Event::Abandoned`), counted.
    fn abandon_all(&mut self, frames: Vec<Bytes>, reason: AbandonReason) {
        if frames.is_empty() {
            return;
        }
        for frame in frames {
            self.c.abandon(reason, frame.len());
            self.emit(Event::Abandoned { frame, reason });
        }
    }

    // ----- flushes and the close -----------------------------------------------------------------

    /// A flush: answered once every frame submitted before it has its outcome, or at
    /// `deadline`.
    fn flush(&mut self, now: Instant, token: Token, deadline: Instant) {
        self.delivery
            .flush(token, self.c.submitted, self.c.abandoned.total(), deadline);
        self.barrier_due(now);
        self.settle_flushes(now);
    }

    /// Answers the flushes whose frames all have their outcome, or whose deadline passed.
    fn settle_flushes(&mut self, now: Instant) {
        let (submitted, abandoned) = (self.c.submitted, self.c.abandoned.total());
        let actions = &mut self.actions;
        self.delivery
            .settle_flushes(now, submitted, abandoned, |token, outcome| {
                actions.push_back(Action::Flushed(token, outcome))
            });
    }

    /// Flushes answered, and a close that waits for nothing more: the flushed row.
    fn check_flushed(&mut self, now: Instant) {
        if self.delivery.flushes.waits() {
            self.settle_flushes(now);
        }
        if self.closing && self.state != State::Closed && self.drained() {
            self.step(now, Ev::Flushed);
        }
    }

    /// Nothing left to write, to confirm or to answer.
    fn drained(&self) -> bool {
        self.delivery.drained()
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
            .delivery
            .window
            .take_all()
            .into_iter()
            .map(|s| s.frame)
            .collect();
        self.abandon_all(unconfirmed, AbandonReason::Unconfirmed);
        self.delivery.window.reset();
        let frames = self.delivery.outbox.drain();
        self.abandon_all(frames, AbandonReason::Shutdown);
        self.delivery.requests.shutdown();
        self.answer_requests();
        self.timers.clear();
        self.dial.set_retry_delay(None);
        self.transition(now, State::Closed, Cause::Closed);
        self.actions.push_back(Action::Stop);
    }

    // ----- the connection coming up, and its heartbeat -------------------------------------------

    /// The connection carries application bytes (TCP is up, and the TLS handshake has
    /// completed): heartbeat, hello, and the connect as proof of life.
    fn link_up(&mut self, now: Instant) {
        let (framing, watch) = (&mut self.framing, self.callbacks.watch());
        let (reset, took) = timed(watch, Callback::Decode, || framing.reset());
        self.took(now, Callback::Decode, took);
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        // With a protocol the heartbeat waits for Ready: no ping before the peer accepted the
        // link (MQTT's PINGREQ before its CONNACK).
        let heartbeat = self.cfg.heartbeat.as_ref();
        conn.start_heartbeat(
            heartbeat.filter(|_| self.protocol.is_none()),
            now,
            self.read_paused,
        );
        conn.handshake_pending = false;
        let panicked = reset.err();
        if self.protocol.is_some() {
            if let Some(p) = panicked {
                return self.step(now, Ev::CallbackPanicked(p));
            }
            return self.open(now);
        }
        if let Some(p) = panicked {
            self.step(now, Ev::CallbackPanicked(p));
        } else if matches!(self.cfg.proof, ProofOfLife::Connect) {
            self.ready(now);
        }
    }

    /// Writes the protocol's opening on the connection: Ready at once, or once the peer's
    /// verdict says so (within the handshake timeout).
    fn open(&mut self, now: Instant) {
        let (Some(protocol), Some(conn)) = (self.protocol.as_mut(), self.conn.as_mut()) else {
            return;
        };
        let opening = match guarded(Callback::Protocol, || protocol.open()) {
            Ok(o) => o,
            Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
        };
        let (mut panicked, mut slowest) = (None, Duration::ZERO);
        for f in &opening.frames {
            let (encoded, took) =
                encode(&mut self.framing, self.callbacks.watch(), &self.cfg.name, f);
            slowest = slowest.max(took);
            match encoded {
                Ok(Some(buf)) => conn.queue_control(Control::Hello, buf),
                Ok(None) => {}
                Err(p) => {
                    panicked = Some(p);
                    break;
                }
            }
        }
        conn.handshake_pending = opening.wait;
        self.took(now, Callback::Encode, slowest);
        if let Some(p) = panicked {
            return self.step(now, Ev::CallbackPanicked(p));
        }
        if !opening.wait {
            self.ready(now);
        } else {
            self.timers
                .arm(Timer::Handshake, now + self.cfg.handshake_timeout);
        }
    }

    /// The proof of life came: the connection is Ready, and an outage it ends is recorded.
    fn ready(&mut self, now: Instant) {
        self.timers.disarm(Timer::Handshake);
        if self.outage.ended(now, &self.cfg.name) {
            self.c.reconnects += 1;
        }
        if let Some(conn) = &mut self.conn {
            conn.handshake_pending = false;
            conn.start_heartbeat(self.cfg.heartbeat.as_ref(), now, self.read_paused);
        }
        if self.cfg.min_stable.is_zero() {
            self.dial.stable();
        } else {
            self.timers.arm(Timer::Stable, now + self.cfg.min_stable);
        }
        self.transition(now, State::Ready, Cause::Alive);
    }

    /// The heartbeat's deadlines at `now`: a verdict on a silent peer, or the next ping.
    fn heartbeat_due(&mut self, now: Instant) {
        let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) else {
            return;
        };
        if hb.death_at().is_some_and(|t| t <= now) {
            // The interval that ends in the verdict was silent too.
            self.c.heartbeats_missed += 1;
            self.step(now, Ev::HeartbeatDead);
        } else if hb.next_ping() <= now {
            let missed = hb.on_ping(now);
            if missed {
                self.c.heartbeats_missed += 1;
            }
            self.c.heartbeats_sent += 1;
            self.queue_ping(now, true);
        }
        self.barrier_due(now);
    }

    /// Queues the ping ahead of the outbox: the heartbeat's, or (`heartbeat` false) a barrier
    /// whose answer confirms the frames written before it.
    fn queue_ping(&mut self, now: Instant, heartbeat: bool) {
        match self.encoded_ping(now) {
            Ok(ping) if ping.is_empty() => {}
            Ok(ping) => {
                if let Some(conn) = &mut self.conn {
                    conn.queue_control(Control::Ping { heartbeat }, ping);
                }
            }
            Err(p) => self.step(now, Ev::CallbackPanicked(p)),
        }
    }

    /// When a barrier is due: frames confirmed by reply under `Answers::Pings`, written with
    /// no ping after them, for the barrier's age.
    fn barrier_at(&self) -> Option<Instant> {
        if !self.delivery.window.by_reply() || self.cfg.answers != Answers::Pings {
            return None;
        }
        self.conn.as_ref()?.barrier_at(self.cfg.confirm.barrier_age)
    }

    /// Writes a barrier ping when frames confirmed by reply have waited with no ping after
    /// them for the barrier's age, when their bytes pass its bound, or when a flush waits.
    fn barrier_due(&mut self, now: Instant) {
        if self.state != State::Ready || !self.delivery.window.by_reply() {
            return;
        }
        if self.cfg.answers != Answers::Pings {
            return;
        }
        let Some(conn) = self.conn.as_ref() else {
            return;
        };
        let Some(newest) = self.delivery.window.newest_end() else {
            return;
        };
        let Some(uncovered) = conn.uncovered(newest, self.delivery.window.read_to()) else {
            return;
        };
        let by_bytes = uncovered >= self.cfg.confirm.barrier_bytes;
        let by_age = self.barrier_at().is_some_and(|t| t <= now);
        if by_bytes || by_age || self.delivery.flushes.waits() {
            self.c.barriers += 1;
            self.queue_ping(now, false);
        }
    }

    /// The ping's bytes; empty when there is none, or when the framing refused it.
    fn encoded_ping(&mut self, now: Instant) -> Result<Vec<u8>, Panicked> {
        if let Some(protocol) = self.protocol.as_ref() {
            if let Some(f) = guarded(Callback::Protocol, || protocol.ping())? {
                let (ping, took) = encode(
                    &mut self.framing,
                    self.callbacks.watch(),
                    &self.cfg.name,
                    &f,
                );
                self.took(now, Callback::Encode, took);
                return Ok(ping?.unwrap_or_default());
            }
        }
        let (ping, took) = match self.cfg.heartbeat.as_ref().map(|h| &h.ping) {
            Some(Ping::Raw(b)) => return Ok(b.clone()),
            Some(Ping::Frame(f)) => {
                encode(&mut self.framing, self.callbacks.watch(), &self.cfg.name, f)
            }
            None => return Ok(Vec::new()),
        };
        self.took(now, Callback::Encode, took);
        Ok(ping?.unwrap_or_default())
    }

    // ----- TLS: the session between the socket's bytes and the framing ---------------------------

    /// Socket bytes through the TLS session: handshake records advance it (its completion
    /// brings the connection up), application records come out as plaintext, appended to the
    /// receive buffer by the session itself.
    fn tls_data(&mut self, now: Instant, bytes: &[u8]) {
        let Some(fed) = self.conn.as_mut().and_then(|c| c.feed(bytes)) else {
            return;
        };
        let before = fed.before;
        if fed.peer_closed {
            log::debug!("relink[{}]: the peer sent tls close_notify", self.cfg.name);
        }
        if fed.established {
            self.tls_established(now);
        }
        // Bringing the connection up can fail it: then nothing of these bytes is received.
        let received = self
            .conn
            .as_ref()
            .map_or(0, |c| c.rx.len().saturating_sub(before));
        if received > 0 && matches!(self.state, State::Connected | State::Ready) {
            self.on_received(now, received);
        } else if let Some(conn) = self.conn.as_mut() {
            conn.rx.truncate(before);
        }
        if let Err(e) = fed.result {
            self.step(now, Ev::Tls(e));
        }
    }

    /// `poll_transmit`'s bytes with TLS: the records of the next plaintext batch, while
    /// handshaking only the handshake's own records, and after EAGAIN the refused records
    /// again as they are.
    fn poll_sealed(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if !matches!(self.state, State::Connected | State::Ready) {
            return false;
        }
        if self.timers.at(Timer::SendRetry).is_some_and(|t| t > now) {
            return false;
        }
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        if let Some(retry) = conn.take_retry() {
            // The same records: the frames in flight end where they did.
            *buf = retry;
            return true;
        }
        let handshaking = conn.tls_handshaking();
        let mut plain = conn.take_plain();
        // No hello, ping or frame before the server is verified: only handshake records.
        let batch = !handshaking && self.poll_batch(now, &mut plain);
        let Some(conn) = self.conn.as_mut() else {
            // Encoding the batch failed the connection (a framing that panicked): its
            // session is gone, and so is the batch.
            buf.clear();
            return false;
        };
        let Some(sealed) = conn.seal(plain, batch, buf) else {
            buf.clear();
            return false;
        };
        if let Err(e) = sealed {
            self.requeue_in_flight();
            self.step(now, Ev::Tls(e));
            buf.clear();
            return false;
        }
        !buf.is_empty()
    }

    /// Whether the current connection speaks TLS.
    fn speaks_tls(&self) -> bool {
        self.conn.as_ref().is_some_and(Connection::speaks_tls)
    }

    /// The TLS settings of the endpoint in use, when the link speaks TLS.
    fn tls_settings(&self) -> Option<&TlsSettings> {
        let idx = self.dial.endpoint()?;
        self.cfg.tls.as_ref().map(|list| &list[idx])
    }

    /// Whether the TLS handshake of the current connection is under way.
    fn tls_handshaking(&self) -> bool {
        self.conn.as_ref().is_some_and(Connection::tls_handshaking)
    }

    /// The handshake bound of the endpoint in use.
    fn tls_handshake_bound(&self) -> Duration {
        self.tls_settings()
            .map_or(Duration::ZERO, |t| t.handshake_timeout)
    }

    /// A session for a connection to the endpoint in use, with its handshake bound; `None`
    /// without TLS. Credentials that were changed and refused are reported here (the last
    /// good ones stay).
    fn tls_session(&mut self) -> Option<(Result<TlsSession, TlsError>, Duration)> {
        if let Some(t) = self.tls_settings().filter(|t| t.skip_verification) {
            log::warn!(
                "relink[{}]: TLS to {:?} without certificate verification (a test-only \
                 setting): anyone on the path can read and change this connection",
                self.cfg.name,
                t.server_name.to_str()
            );
        }
        let mut stale = None;
        let session = self.tls_settings().map(|t| {
            let (config, refused) = t.fresh_config();
            stale = refused;
            (TlsSession::with_config(t, config), t.handshake_timeout)
        });
        if let Some(e) = stale {
            log::warn!(
                "relink[{}]: new tls credentials refused, the last good ones stay: {e}",
                self.cfg.name
            );
            self.emit(Event::Error(LinkError::TlsCredentials(e)));
        }
        session
    }

    fn tls_established(&mut self, now: Instant) {
        self.timers.disarm(Timer::Handshake);
        if let Some(tls) = self.conn.as_ref().and_then(|c| c.tls.as_ref()) {
            log::debug!(
                "relink[{}]: tls established with {}{}",
                self.cfg.name,
                self.endpoint_text().unwrap_or_default(),
                tls.alpn_protocol()
                    .map(|p| format!(" (alpn {})", String::from_utf8_lossy(p)))
                    .unwrap_or_default()
            );
        }
        self.link_up(now);
    }

    /// A TLS failure: its own cause, the reason in an error event and in the log line. One
    /// that no retry can fix (the certificates) is `tls-rejected`, retried slowly.
    fn tls_failed(&mut self, now: Instant, e: TlsError) {
        let cause = if e.is_config() {
            self.c.tls_rejected += 1;
            Cause::TlsRejected
        } else {
            Cause::Tls
        };
        self.fail_reason = Some(e.to_string());
        self.emit(Event::Error(LinkError::Tls(e)));
        self.fail(now, cause);
    }

    // ----- the receive path: decoding, and where each inbound frame goes -------------------------

    /// Application bytes (without TLS) into the framing.
    fn on_plaintext(&mut self, now: Instant, bytes: &[u8]) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.rx.extend_from_slice(bytes);
        self.on_received(now, bytes.len());
    }

    /// `received` application bytes were appended to the receive buffer: decodes the frames.
    fn on_received(&mut self, now: Instant, received: usize) {
        self.c.bytes_received += received as u64;
        if self.state == State::Connected && matches!(self.cfg.proof, ProofOfLife::Inbound) {
            self.step(now, Ev::Alive);
        }
        while let Some(conn) = self.conn.as_mut() {
            let (framing, rx, watch) = (&mut self.framing, &mut conn.rx, self.callbacks.watch());
            let (decoded, took) = timed(watch, Callback::Decode, || framing.decode(rx));
            let buffered = rx.len();
            self.took(now, Callback::Decode, took);
            match decoded {
                Ok(Ok(Some(frame))) => self.on_frame(now, frame),
                Ok(Ok(None)) => {
                    let max = self.framing.max_buffered();
                    if buffered > max {
                        let e = DecodeError::Overbuffered { buffered, max };
                        self.step(now, Ev::ProtocolError(e));
                    }
                    break;
                }
                Ok(Err(e)) => {
                    self.step(now, Ev::ProtocolError(e));
                    break;
                }
                Err(p) => {
                    self.step(now, Ev::CallbackPanicked(p));
                    break;
                }
            }
            if !matches!(self.state, State::Connected | State::Ready) {
                break;
            }
        }
    }

    /// The peer closed the connection: bytes left undecoded in the receive buffer are the
    /// start of a frame its end will never follow. Reported with their length (never
    /// delivered), counted, and taken out of the buffer.
    fn report_cut_frame(&mut self) {
        let bytes = self.conn.as_mut().map_or(0, Connection::take_cut);
        if bytes == 0 {
            return;
        }
        self.c.frames_cut += 1;
        self.c.bytes_cut += bytes as u64;
        log::warn!(
            "relink[{}]: the peer closed in the middle of a frame ({bytes} bytes of it came)",
            self.cfg.name
        );
        self.emit(Event::Error(LinkError::CutFrame { bytes }));
    }

    /// `len` bytes that arrived from a connection the machine already let go: discarded.
    pub(crate) fn stale_data(&mut self, len: usize) {
        self.c.bytes_discarded += len as u64;
    }

    /// An inbound frame: classified once ([`Machine::classify`]), then handled in one `match`.
    fn on_frame(&mut self, now: Instant, frame: Bytes) {
        let mut past_opening = false;
        loop {
            let arrival = match self.classify(now, &frame, past_opening) {
                Ok(a) => a,
                Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
            };
            match arrival {
                // A frame the verdict does not take goes on its way as any other.
                Arrival::Opening if self.handshake_reply(now, &frame) => return,
                Arrival::Opening => past_opening = true,
                Arrival::Turn(waiting) => return self.turn_answered(now, frame, waiting),
                Arrival::Untaken => return self.untaken(now, frame),
                Arrival::Unexpected => {
                    return self.step(
                        now,
                        Ev::ProtocolError(DecodeError::Malformed(
                            "an answer no frame waits for: the peer answered more than the protocol's `replies` said",
                        )),
                    )
                }
            }
        }
    }

    /// What `frame` is, decided once: an answer to the opening while its verdict is awaited
    /// (`past_opening`: the verdict did not take it), the answer in the turn that waits (the
    /// turn is taken), a frame no turn waits for, or (the peer answers every frame) an answer
    /// nothing waits for. A pong is known by its place: under `Answers::EveryFrame` whatever
    /// answers a ping's turn, under `Answers::Pings` a frame the protocol (or the heartbeat's
    /// `reply`) calls a pong while a ping's turn is first.
    fn classify(
        &mut self,
        now: Instant,
        frame: &[u8],
        past_opening: bool,
    ) -> Result<Arrival, Panicked> {
        let answers = self.cfg.answers;
        let every = answers == Answers::EveryFrame;
        let Some(conn) = self.conn.as_ref() else {
            return Ok(Arrival::Untaken);
        };
        let opening = conn.handshake_pending && !past_opening;
        // Unless every frame is answered, the opening's answer takes no turn: the verdict
        // tells it, ahead of any ping written meanwhile.
        if opening && !every {
            return Ok(Arrival::Opening);
        }
        let front = match answers {
            Answers::Unknown => None,
            _ => conn.turns.front(),
        };
        let own =
            |m: &Machine| unsolicited(m.protocol.as_ref(), &m.cfg.requests.correlation.0, frame);
        let takes_turn = match front {
            None => false,
            Some(Turn::Ping { .. }) if !every => self.is_pong(now, frame)?,
            // Any other turn takes the next frame, unless it is one of the peer's own.
            Some(_) => !own(self)?,
        };
        if takes_turn {
            if let Some(waiting) = self.conn.as_mut().and_then(|c| c.turns.pop()) {
                return Ok(Arrival::Turn(waiting));
            }
        }
        if opening {
            return Ok(Arrival::Opening);
        }
        if every && front.is_none() && !own(self)? {
            return Ok(Arrival::Unexpected);
        }
        Ok(Arrival::Untaken)
    }

    /// While the handshake's reply is awaited: whether `frame` is it (the link is then Ready,
    /// or failed if the predicate panicked). A frame it does not accept goes on its way.
    fn handshake_reply(&mut self, now: Instant, frame: &[u8]) -> bool {
        if !self.conn.as_ref().is_some_and(|c| c.handshake_pending) {
            return false;
        }
        let Some(protocol) = self.protocol.as_mut() else {
            return false;
        };
        let (verdict, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
            protocol.verdict(frame)
        });
        self.took(now, Callback::Protocol, took);
        match verdict {
            Ok(Verdict::Ready) => self.step(now, Ev::Alive),
            Ok(Verdict::NotYet) => return false,
            Ok(Verdict::Continue) => {}
            Ok(Verdict::Retry) => self.reopen_later(now),
            Ok(Verdict::Refused(reason)) => self.step(now, Ev::Rejected(reason)),
            Err(p) => self.step(now, Ev::CallbackPanicked(p)),
        }
        true
    }

    /// The peer said "not yet" to the opening: the answers still due to it are dropped, and it
    /// is written again after a pause that grows while the peer says so (with a fresh
    /// handshake timeout then).
    fn reopen_later(&mut self, now: Instant) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.handshake_pending = false;
        conn.turns.void(Turn::Hello);
        conn.reopen_pause = match conn.reopen_pause {
            Duration::ZERO => REOPEN_PAUSE_FIRST,
            p => (p * 2).min(REOPEN_PAUSE_MAX),
        };
        let pause = conn.reopen_pause;
        self.timers.disarm(Timer::Handshake);
        self.timers.arm(Timer::Reopen, now + pause);
        log::debug!(
            "relink[{}]: the peer cannot take the link yet; opening again in {pause:?}",
            self.cfg.name
        );
    }

    /// The answer in the turn `waiting`: what the protocol says of it first (for a frame's or a
    /// request's turn), then it confirms what was written before it and goes where its turn
    /// says (the heartbeat, the opening's verdict, the application with its frame, the request
    /// it answers). A turn whose answers the protocol follows stays first while it says more
    /// follow; an answer that cannot be its turn's closes the connection.
    fn turn_answered(&mut self, now: Instant, frame: Bytes, mut waiting: Waiting) {
        let Waiting {
            turn,
            end,
            upto,
            asked,
            answers,
        } = waiting;
        if let (Replies::Held(_), 0) = (asked, answers) {
            if let Some(hb) = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut()) {
                hb.release(now);
            }
        }
        let kind = match turn {
            Turn::Frame | Turn::Request => match self.reply_kind(now, &frame, asked) {
                Ok(kind) => kind,
                Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
            },
            _ => ReplyKind::Done,
        };
        if kind == ReplyKind::Unexpected {
            self.c.replies_unexpected += 1;
            return self.step(
                now,
                Ev::ProtocolError(DecodeError::Malformed(
                    "an answer that cannot be its turn's: the peer answered what the protocol did not expect",
                )),
            );
        }
        if kind == ReplyKind::More {
            waiting.answers += 1;
            if let Some(conn) = self.conn.as_mut() {
                conn.turns.push_front(waiting);
            }
        }
        match turn {
            Turn::Void => self.c.replies_dropped += 1,
            Turn::Ping { heartbeat } => {
                self.answered(end, upto);
                let hb = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut());
                if let Some(Reply::Rtt(rtt)) =
                    hb.filter(|_| heartbeat).and_then(|h| h.on_reply(now))
                {
                    self.last_rtt = Some(rtt);
                }
            }
            Turn::Hello => {
                self.answered(end, upto);
                if !self.handshake_reply(now, &frame) {
                    self.emit_frame(frame);
                }
            }
            // The answers after a turn's first are delivered as they are (a send's, when
            // answers are events).
            Turn::Frame if answers > 0 => self.answer_of_send(frame),
            Turn::Request if answers > 0 => self.emit_frame(frame),
            Turn::Frame => self.frame_answered(now, frame, kind, end, upto),
            Turn::Request => {
                self.answered(end, upto);
                self.c.received += 1;
                match self.delivery.requests.on_frame(frame, Inbound::Reply) {
                    Matched::Answer(_) => self.answer_requests(),
                    Matched::Late => log::debug!("relink[{}]: a late reply dropped", self.cfg.name),
                    Matched::Unsolicited(frame) => self.emit(Event::Frame(frame)),
                }
            }
        }
        self.check_flushed(now);
    }

    /// What the protocol says of `reply`, an answer in the turn of a frame or a request of
    /// the application's (`asked`: what it said of that frame's answers), timed.
    fn reply_kind(
        &mut self,
        now: Instant,
        reply: &[u8],
        asked: Replies,
    ) -> Result<ReplyKind, Panicked> {
        let Some(p) = self.protocol.as_mut() else {
            return Ok(ReplyKind::Done);
        };
        let (kind, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
            p.reply_kind(reply, asked)
        });
        self.took(now, Callback::Protocol, took);
        kind
    }

    /// The peer's application answered in a turn that ends at stream offset `end`: the frames
    /// numbered below `upto` are confirmed.
    fn answered(&mut self, end: u64, upto: u64) {
        let c = &mut self.c;
        self.delivery
            .window
            .answered(end, upto, |n, len| c.confirmed(n, len));
    }

    /// The first answer in its turn to a frame of the application's, numbered `upto - 1`:
    /// what the protocol said of it (`kind`) decides whether the frame is confirmed, confirmed
    /// with an error (given back beside it), or refused (not confirmed: written again, or
    /// reported).
    fn frame_answered(&mut self, now: Instant, reply: Bytes, kind: ReplyKind, end: u64, upto: u64) {
        // Only a frame still waiting can be named or refused: under confirmation by TCP it may
        // have left already, and its answer is then an ordinary frame.
        let number = upto.saturating_sub(1);
        match kind {
            ReplyKind::Refused => {
                if let Some(taken) = self.delivery.window.refuse(number) {
                    return self.refused(now, taken, reply, end, number);
                }
            }
            ReplyKind::Error => {
                if let Some(frame) = self.delivery.window.frame(number) {
                    self.answered(end, upto);
                    self.c.received += 1;
                    return self.emit(Event::ErrorReply { frame, reply });
                }
            }
            ReplyKind::Done | ReplyKind::More => {
                if let Some(conn) = &mut self.conn {
                    conn.refusal_pause = Duration::ZERO;
                }
                self.answered(end, upto);
                return self.answer_of_send(reply);
            }
            ReplyKind::Unexpected => {}
        }
        self.answered(end, upto);
        self.emit_frame(reply);
    }

    /// An answer that only confirms a frame given to `send`: an event when the application
    /// asked for them, else consumed and counted.
    fn answer_of_send(&mut self, reply: Bytes) {
        if self.cfg.answer_events {
            self.emit_frame(reply);
        } else {
            self.c.answers_consumed += 1;
        }
    }

    /// The peer refused `taken`, the frame numbered `number` (it did not run it), in a turn
    /// that ends at stream offset `end`: the frames before it are confirmed, and it alone is
    /// taken back (the frames written after it are answered on their own). By the redelivery
    /// policy it is written again after a pause that grows while refusals go on, behind the
    /// frames refused before it, or reported.
    fn refused(&mut self, now: Instant, taken: Unconfirmed, reply: Bytes, end: u64, number: u64) {
        self.c.refused += 1;
        self.answered(end, number);
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.refusal_pause = match conn.refusal_pause {
            Duration::ZERO => REFUSAL_PAUSE_FIRST,
            p => (p * 2).min(REFUSAL_PAUSE_MAX),
        };
        let pause = conn.refusal_pause;
        self.timers.arm(Timer::Pause, now + pause);
        log::debug!(
            "relink[{}]: frame refused ({}); writing it again in {pause:?}",
            self.cfg.name,
            String::from_utf8_lossy(reply.strip_suffix(b"\r\n").unwrap_or(&reply)),
        );
        let Unconfirmed {
            frame,
            deadline,
            order,
        } = taken;
        match self.cfg.redelivery {
            Redelivery::Resend => {
                self.c.resent += 1;
                let marked = self
                    .protocol
                    .as_ref()
                    .and_then(|p| guarded(Callback::Protocol, || p.resend(&frame)).ok())
                    .flatten();
                let frame = marked.map_or(frame, Bytes::from);
                self.delivery.outbox.push_retry(frame, deadline, order);
            }
            _ => {
                self.emit(Event::ErrorReply {
                    frame: frame.clone(),
                    reply,
                });
                self.abandon_all(vec![frame], AbandonReason::Refused);
            }
        }
    }

    /// Whether the heartbeat's `reply` (or the protocol) accepts `frame` as a pong, timed.
    fn is_pong(&mut self, now: Instant, frame: &[u8]) -> Result<bool, Panicked> {
        if let Some(protocol) = self.protocol.as_ref().filter(|p| p.ping().is_some()) {
            let (is, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
                protocol.is_pong(frame)
            });
            self.took(now, Callback::Protocol, took);
            return is;
        }
        let Some(reply) = self.cfg.heartbeat.as_ref().and_then(|h| h.reply.as_ref()) else {
            return Ok(false);
        };
        let (is, took) = timed(self.callbacks.watch(), Callback::HeartbeatReply, || {
            reply.test(frame)
        });
        self.took(now, Callback::HeartbeatReply, took);
        is
    }

    /// A frame no turn waits for: a request's reply where requests take no turn (no answers
    /// said, or matched by id), else the peer's own (the protocol's reaction first, then the
    /// application's).
    fn untaken(&mut self, now: Instant, frame: Bytes) {
        if self.cfg.answers == Answers::Unknown || self.delivery.requests.by_id() {
            return self.deliver(now, frame);
        }
        self.deliver_own(now, frame);
    }

    /// A frame for the application, as an event.
    fn emit_frame(&mut self, frame: Bytes) {
        self.c.received += 1;
        log::trace!(
            "relink[{}]: frame of {} bytes received",
            self.cfg.name,
            frame.len()
        );
        self.emit(Event::Frame(frame));
    }

    /// The protocol's reaction to a frame of the peer's own: an answer written at once, ahead
    /// of the outbox. Returns whether the frame goes on to the application.
    fn react(&mut self, now: Instant, frame: &[u8]) -> bool {
        let Some(protocol) = self.protocol.as_mut() else {
            return true;
        };
        let (reaction, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
            protocol.react(frame)
        });
        self.took(now, Callback::Protocol, took);
        let (answer, deliver) = match reaction {
            Ok(Reaction::Deliver) => return true,
            Ok(Reaction::Answer(a)) => (a, false),
            Ok(Reaction::AnswerAndDeliver(a)) => (a, true),
            Err(p) => {
                self.step(now, Ev::CallbackPanicked(p));
                return false;
            }
        };
        let (encoded, took) = encode(
            &mut self.framing,
            self.callbacks.watch(),
            &self.cfg.name,
            &answer,
        );
        self.took(now, Callback::Encode, took);
        match encoded {
            Ok(Some(bytes)) => {
                if let Some(conn) = self.conn.as_mut() {
                    conn.queue_control(Control::Answer, bytes);
                    self.c.answered_by_link += 1;
                }
            }
            Ok(None) => {}
            Err(p) => {
                self.step(now, Ev::CallbackPanicked(p));
                return false;
            }
        }
        deliver
    }

    /// A frame that is neither the handshake's nor a pong: a request's reply or the
    /// application's.
    fn deliver(&mut self, now: Instant, frame: Bytes) {
        if self.delivery.requests.is_empty() {
            return self.deliver_own(now, frame);
        }
        let verdict = match inbound(
            self.protocol.as_ref(),
            &self.cfg.requests.correlation.0,
            &frame,
        ) {
            Ok(v) => v,
            Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
        };
        match self.delivery.requests.on_frame(frame, verdict) {
            Matched::Answer(_) => {
                self.c.received += 1;
                self.answer_requests();
            }
            Matched::Late => {
                self.c.received += 1;
                log::debug!("relink[{}]: a late reply dropped", self.cfg.name);
            }
            // Only a frame that answers no request is the peer's own: the protocol reacts.
            Matched::Unsolicited(frame) => self.deliver_own(now, frame),
        }
    }

    /// A frame of the peer's own: the protocol's reaction, then the application, unless the
    /// reaction keeps it.
    fn deliver_own(&mut self, now: Instant, frame: Bytes) {
        if self.react(now, &frame) {
            self.emit_frame(frame);
        }
    }

    // ----- the transmit path: batches, the socket's answer, the window, redelivery ---------------

    /// Fills `buf` with the next bytes to write: control frames first, then queued frames
    /// while Ready, up to `batch_bytes` (one frame at least); with TLS, the session's records
    /// of that batch, and while handshaking only the handshake's own records. Returns false
    /// when there is nothing to write now. Every call must be answered with
    /// [`Machine::transmit_done`] (after [`Machine::transmit_unsent`] when the socket gave
    /// the bytes back).
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let more = if self.speaks_tls() {
            self.poll_sealed(now, buf)
        } else {
            self.poll_batch(now, buf)
        };
        if let Some(conn) = &mut self.conn {
            conn.pending_len = buf.len();
        }
        more
    }

    /// The bytes of the last `poll_transmit` that the socket did not take (EAGAIN), given
    /// back before `transmit_done`. With TLS they are sent again as they are; without, the
    /// frames behind them are encoded again.
    pub(crate) fn transmit_unsent(&mut self, bytes: Vec<u8>) {
        if let Some(conn) = self.conn.as_mut().filter(|c| c.tls.is_some()) {
            conn.tls_retry = Some(bytes);
        }
    }

    /// The plaintext batch: control frames, then while Ready the queued frames and the
    /// requests, merged by their order numbers: each goes in the order it was handed in, and
    /// what stops one (the batch or the window full, the pause after a refusal, a request
    /// waiting for room) stops everything handed in after it.
    fn poll_batch(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if !matches!(self.state, State::Connected | State::Ready)
            || self.delivery.outbox.in_flight() > 0
            || self.delivery.requests.in_flight() > 0
        {
            return false;
        }
        if self.timers.at(Timer::SendRetry).is_some_and(|t| t > now) {
            return false;
        }
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        conn.take_control(self.cfg.answers, buf);
        conn.pending_replies.clear();
        if self.state == State::Ready {
            // After a refusal, frames wait out the pause (control frames and the requests
            // handed in before the frames go on): a batch bound that takes no frame.
            let paused = self.timers.at(Timer::Pause).is_some_and(|t| t > now);
            let bounds = match paused {
                true => Bounds::NONE,
                false => self.delivery.bounds(self.cfg.batch_bytes, self.cfg.window),
            };
            loop {
                let request = self.delivery.requests.next_order();
                let frame = self.delivery.outbox.next_order();
                let stopped = match (frame, request) {
                    (Some(f), r) if r.map_or(true, |r| f < r) => {
                        // The frames handed in before the next request.
                        let until = r.unwrap_or(u64::MAX);
                        match self.batch_frames(now, buf, (bounds, until)) {
                            Ok(stopped) => stopped,
                            Err(p) => return self.encode_panicked(now, buf, p),
                        }
                    }
                    // The next request waits for room: what was handed in after it waits too.
                    (_, Some(_)) if self.delivery.requests.next_parked() => true,
                    (f, Some(_)) => {
                        // The requests handed in before the next frame.
                        match self.batch_requests(buf, f.unwrap_or(u64::MAX)) {
                            Ok(full) => full,
                            Err(p) => return self.encode_panicked(now, buf, p),
                        }
                    }
                    _ => true,
                };
                if stopped {
                    break;
                }
            }
        }
        !buf.is_empty()
    }

    /// Adds the queued frames numbered below `until` to the batch, within `bounds`, each with
    /// its turns when the peer answers every frame. Returns true when they stopped short of
    /// `until` (the batch or the window is full, the pause after a refusal): nothing handed
    /// in after them goes into this batch either.
    fn batch_frames(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        (bounds, until): (Bounds, u64),
    ) -> Result<bool, Panicked> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(true);
        };
        let every = self.cfg.answers == Answers::EveryFrame;
        let (outbox, framing, name) =
            (&mut self.delivery.outbox, &mut self.framing, &self.cfg.name);
        let first = conn.pending_ends.len();
        let mut ends = Ends {
            ends: &mut conn.pending_ends,
            replies: self
                .protocol
                .as_ref()
                .filter(|_| every)
                .map(|p| (p, &mut conn.pending_replies)),
        };
        // Only application code is timed as such: a built-in framing is not. A framing of the
        // application's is timed once for its part of the batch: timing each frame would cost
        // more than encoding a small one.
        let mut filled = Filled::default();
        let took = match framing.is_builtin() {
            true => {
                filled = fill_batch(outbox, framing, name, buf, (bounds, until), &mut ends);
                None
            }
            false => Some(self.callbacks.watch().time(Callback::Encode, &mut || {
                filled = fill_batch(outbox, framing, name, buf, (bounds, until), &mut ends);
            })),
        };
        if every {
            // A frame takes as many turns as the peer gives it answers, in the batch's order:
            // one that the protocol follows takes one, and lasts while its answers say more
            // follow.
            let replies = &conn.pending_replies;
            for (k, &e) in conn.pending_ends.iter().enumerate().skip(first) {
                let asked = replies.get(k).copied().unwrap_or(Replies::One);
                let n = match asked {
                    Replies::Many(n) => n,
                    Replies::Pushed => 0,
                    _ => 1,
                };
                for _ in 0..n {
                    conn.pending_turns.push((Turn::Frame, asked, e));
                }
            }
        }
        if let Some(took) = took {
            self.took(now, Callback::Encode, took);
        }
        self.abandon_all(filled.refused, AbandonReason::Unencodable);
        match filled.panicked {
            // The frame stays first in line (not in flight): it is never lost without a word,
            // and its deadline (if any) or a close still ends it.
            Some(p) => Err(p),
            None => Ok(filled.stopped),
        }
    }

    /// The framing panicked while a batch was being built: nothing of it is written, the frames
    /// taken for it go back to the outbox and the connection fails.
    fn encode_panicked(&mut self, now: Instant, buf: &mut Vec<u8>, p: Panicked) -> bool {
        buf.clear();
        self.requeue_in_flight();
        self.step(now, Ev::CallbackPanicked(p));
        false
    }

    /// Adds the requests waiting to be written and numbered below `until` to the batch, while
    /// it has room; one the framing refuses is answered at once. Returns true when the batch
    /// is full.
    fn batch_requests(&mut self, buf: &mut Vec<u8>, until: u64) -> Result<bool, Panicked> {
        let in_order = self.cfg.answers != Answers::Unknown && !self.delivery.requests.by_id();
        let turns = match self.conn.as_mut() {
            Some(conn) if in_order => Some(&mut conn.pending_turns),
            _ => None,
        };
        let every = self.cfg.answers == Answers::EveryFrame;
        let protocol = self.protocol.as_ref().filter(|_| every);
        let asked = |frame: &[u8]| protocol.map_or(Replies::One, |p| p.replies(frame));
        let (framing, limit) = (&mut self.framing, self.cfg.batch_bytes);
        let batched = self
            .delivery
            .batch_requests(framing, limit, buf, turns, asked, until);
        self.answer_requests();
        batched
    }

    /// What became of the batch from the last `poll_transmit`.
    pub(crate) fn transmit_done(&mut self, now: Instant, result: TxResult) {
        let retry_waits = self.conn.as_ref().is_some_and(|c| c.tls_retry.is_some());
        match result {
            TxResult::Sent => {
                self.written(now);
                self.barrier_due(now);
                self.delivery.requests.confirm();
                if let Some(conn) = &mut self.conn {
                    conn.sent(now);
                }
            }
            TxResult::WouldBlock if retry_waits => {
                // Sealed records wait as they are; their frames stay in flight.
                self.timers.arm(Timer::SendRetry, now + SEND_RETRY);
            }
            TxResult::WouldBlock if self.speaks_tls() => {
                // Sealed records lost: the session cannot go on without them.
                let g = self.dial.generation();
                self.fail_reason = Some("tls records refused by the socket".into());
                self.for_current(now, g, Ev::Unreachable);
            }
            TxResult::WouldBlock | TxResult::Unreachable => {
                self.requeue_in_flight();
                if result == TxResult::WouldBlock {
                    self.timers.arm(Timer::SendRetry, now + SEND_RETRY);
                } else {
                    let g = self.dial.generation();
                    self.for_current(now, g, Ev::Unreachable);
                }
            }
        }
        self.trim();
        self.check_flushed(now);
    }

    /// The bytes of the last `poll_transmit` went out: its frames wait in the window for
    /// their confirmation, each at the stream offset where it ends.
    fn written(&mut self, now: Instant) {
        let conn = self.conn.as_ref();
        let len = conn.map_or(0, |c| c.pending_len);
        let base = self.delivery.window.written();
        let number = self.delivery.window.next_number();
        self.delivery.window.wrote(now, len);
        // With TLS a frame can be read once the record that carries its last byte has
        // arrived: it is confirmed with the end of that record.
        let end_of = |k: usize| {
            conn.map_or(0, |c| {
                c.pending_ends
                    .get(k)
                    .map_or(c.pending_len, |&e| c.readable_end(e))
            })
        };
        let frames = self.delivery.written(now, base, &mut self.c, end_of);
        // The turns of the batch, at their ends in the stream (with TLS, the ends of their
        // records, as for frames).
        let newest = self.delivery.window.newest_end().unwrap_or(0);
        if let Some(conn) = &mut self.conn {
            conn.turns_written(base, number, now, frames > 0, newest);
        }
    }

    /// A reading of the acknowledged bytes: the frames it covers are confirmed.
    fn acked(&mut self, now: Instant, generation: u64, bytes: Option<u64>) {
        if !self.is_current(generation) || !matches!(self.state, State::Connected | State::Ready) {
            self.c.ignored += 1;
            return;
        }
        let Some(bytes) = bytes else {
            self.delivery.window.no_reading(now);
            return;
        };
        let c = &mut self.c;
        if !self
            .delivery
            .window
            .acked(now, bytes, |n, len| c.confirmed(n, len))
        {
            log::debug!("relink: an acknowledged count that cannot be this connection's ignored");
        }
        self.check_flushed(now);
    }

    /// The acknowledgements of the connection of dial `generation` cannot be read: its frames
    /// count as confirmed when written.
    fn acks_unavailable(&mut self, generation: u64) {
        if self.is_current(generation) && !self.delivery.window.is_blind() {
            log::warn!(
                "relink: the acknowledgements of the connection to {} cannot be read: \
                 its frames count as confirmed when written",
                self.endpoint_text().unwrap_or_default()
            );
            let c = &mut self.c;
            self.delivery.window.go_blind(|n, len| c.confirmed(n, len));
        }
    }

    /// Whether frames wait for the acknowledged bytes of the current connection (the IO side
    /// keeps what it reads them from only while they do).
    pub(crate) fn wants_acks(&self) -> bool {
        !self.delivery.window.is_empty()
    }

    /// Whether the IO side should read the acknowledged bytes at `now`: the window's reading
    /// is due ([`Machine::reading_at`]), or something waits on the confirmations (a flush, a
    /// close, a window that holds frames back or fills up).
    pub(crate) fn reading_due(&self, now: Instant) -> bool {
        self.delivery
            .reading_due(now, self.cfg.window, self.closing)
    }

    /// When the window's next reading is due ([`Backlog::reading_at`]).
    fn reading_at(&self) -> Option<Instant> {
        self.delivery.reading_at(self.cfg.window, self.closing)
    }

    /// The frames of a lost connection that were written and not confirmed, by the policy:
    /// first in line again (resend), or each given back (report).
    fn redeliver(&mut self) {
        let protocol = self.protocol.as_ref();
        let mark = |frame: &[u8]| match protocol {
            Some(p) => guarded(Callback::Protocol, || p.resend(frame)),
            None => Ok(None),
        };
        let (policy, max) = (self.cfg.redelivery, self.cfg.max_losses);
        let lost = self.delivery.redeliver(policy, max, &mut self.c, mark);
        if let Some(poison) = lost.poison {
            log::warn!(
                "relink[{}]: a frame of {} bytes, the oldest unconfirmed at {max} \
                 connection losses in a row, abandoned as poison",
                self.cfg.name,
                poison.len(),
            );
            self.abandon_all(vec![poison], AbandonReason::Poison);
        }
        for p in &lost.panics {
            // Reported here: the connection is already down.
            self.report_panic(p);
        }
        self.abandon_all(lost.unconfirmed, AbandonReason::Unconfirmed);
    }

    /// The frames, requests and control frames of the last `poll_transmit` go first in line
    /// again.
    fn requeue_in_flight(&mut self) {
        self.delivery.requeue();
        if let Some(conn) = &mut self.conn {
            conn.requeue_control();
        }
    }

    /// Drops the oldest frames (`Overflow`) while the outbox is over its limits; the last
    /// frame stays even if it alone is over. Frames in flight are confirmed or put back first.
    fn trim(&mut self) {
        let dropped = self.delivery.overflow();
        self.abandon_all(dropped, AbandonReason::Overflow);
    }

    // ----- the snapshot --------------------------------------------------------------------------

    /// A consistent snapshot at `now`, for [`Metrics`].
    pub(crate) fn metrics(&self, now: Instant) -> Metrics {
        let next_retry_in = match self.state {
            State::Backoff | State::Cooldown => self
                .timers
                .at(Timer::Retry)
                .map(|t| t.saturating_duration_since(now)),
            _ => None,
        };
        let queued = self.delivery.outbox.len();
        let queued_bytes = self.delivery.outbox.bytes();
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
            requests_late_held: (self.delivery.requests.len() - self.delivery.requests.waiting())
                as u64,
            barriers_sent: self.c.barriers,
            handshakes_refused: self.c.handshakes_refused,
            frames_answered: self.c.answered_by_link,
            requests_answered: self.delivery.requests.answered,
            requests_failed: self.delivery.requests.failed,
            requests_outstanding: self.delivery.requests.waiting() as u64,
            requests_written: self.delivery.requests.written() as u64,
            replies_late: self.delivery.requests.late,
            slow_callbacks: self.c.slow_callbacks,
            slowest_callback: self.c.slowest_callback,
            verdicts_deferred: self.c.verdicts_deferred,
            down_for: self.outage.down_for(now),
            tls_rejected: self.c.tls_rejected,
            frames_confirmed: self.c.confirmed,
            frames_unconfirmed: self.delivery.window.len() as u64,
            frames_resent: self.c.resent,
            frames_refused: self.c.refused,
            replies_dropped: self.c.replies_dropped,
            replies_unexpected: self.c.replies_unexpected,
            answers_consumed: self.c.answers_consumed,
            oldest_unconfirmed: self
                .delivery
                .window
                .oldest()
                .map(|t| now.saturating_duration_since(t)),
            frames_recovered: 0,
            spool_bytes_cut: 0,
            spool_frames_lost_at_most: 0,
        }
    }
}

mod callbacks;
mod connection;
mod delivery;
mod dial;
mod flushes;
mod outage;
mod receive;
#[cfg(test)]
mod tests;
mod transmit;
