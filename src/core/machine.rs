//! The link's state machine: pure, sans-IO.
//!
//! No socket, no clock, no sleep, no global random generator. Time comes in as `now`, the next
//! deadline leaves as [`Machine::poll_timeout`], effects leave as [`Action`]s drained with
//! [`Machine::poll_action`], and bytes to write are pulled with [`Machine::poll_transmit`].
//!
#![doc = include_str!("../../docs/transitions.md")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::backoff::Backoff;
use super::counters::Counters;
use super::endpoint::Host;
use super::endpoints::{fmt_addr, Endpoints};
use super::framing::BoxedFraming;
use super::guard::{guarded, timed, Panicked, Stopwatch, Untimed};
use super::heartbeat::{HeartbeatState, Ping, Reply};
use super::outbox::{Outbox, Written};
use super::requests::{Matched, Matching, Outcome, Requests, Token, Verdict};
use super::settings::{ProofOfLife, Settings};
use super::timers::{Timer, Timers};
use super::tls::TlsSession;
use super::window::{Redelivery, Window};
use crate::batch::Batch;
use crate::error::{Callback, DecodeError, LinkError, RequestError, TlsError};
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
    Stable,
    RetryTimer,
    Flushed,
    CloseDeadline,
}

/// An outage is first reported at warn level after this long, then each time it doubles.
const OUTAGE_WARN_FIRST: Duration = Duration::from_secs(10);

/// How long to wait before offering the socket a batch again after EAGAIN.
const SEND_RETRY: Duration = Duration::from_millis(1);

/// The state machine of one link.
#[derive(Debug)]
pub(crate) struct Machine {
    cfg: Settings,
    state: State,
    since: Instant,
    generation: u64,
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
    heartbeat: Option<HeartbeatState>,
    handshake_pending: bool,
    outbox: Outbox,
    /// Encoded control frames (hello, pings) for the current connection, ahead of the outbox.
    control: VecDeque<Vec<u8>>,
    in_flight_control: Vec<Vec<u8>>,
    /// The link's framing: decodes `rx`, encodes control frames and the outbox's frames.
    framing: BoxedFraming,
    /// Bytes received on the current connection and not yet decoded into frames.
    rx: BytesMut,
    actions: VecDeque<Action>,
    closing: bool,
    endpoints: Endpoints,
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
    read_paused: bool,
    /// The TLS session of the current connection (made at its TCP connect, dropped with it).
    tls: Option<TlsSession>,
    /// Ciphertext the socket refused (EAGAIN): sent again as it is, since its records are
    /// numbered and cannot be made again. Its frames stay in flight until then.
    tls_retry: Option<Vec<u8>>,
    /// Scratch: an encoded batch on its way into the TLS session.
    plain_out: Vec<u8>,
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
    /// Frames written on the current connection and not yet confirmed.
    window: Window,
    /// Where each frame of the last `poll_transmit` ends in its plaintext batch.
    pending_ends: Vec<usize>,
    /// Bytes of the last `poll_transmit` (ciphertext, with TLS).
    pending_len: usize,
}

impl Machine {
    /// A machine in Idle. `seed` draws the backoff jitter and the endpoint order.
    pub(crate) fn new(mut cfg: Settings, seed: u64, now: Instant) -> Machine {
        let mut rng = StdRng::seed_from_u64(seed);
        let endpoints = Endpoints::new(std::mem::take(&mut cfg.endpoints), &mut rng);
        let framing = cfg.framing.clone();
        let outbox = Outbox::new(cfg.outbox_frames, cfg.outbox_bytes);
        let backoff = Backoff::new(cfg.backoff.clone());
        let requests = Requests::new(&cfg.requests);
        Machine {
            cfg,
            state: State::Idle,
            since: now,
            generation: 0,
            failures: 0,
            attempt: 0,
            native_left: 0,
            native_used: 0,
            dial_started: now,
            backoff,
            rng,
            timers: Timers::default(),
            retry_delay: None,
            heartbeat: None,
            handshake_pending: false,
            outbox,
            control: VecDeque::new(),
            in_flight_control: Vec::new(),
            framing,
            rx: BytesMut::new(),
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
            tls: None,
            tls_retry: None,
            plain_out: Vec::new(),
            fail_reason: None,
            watch: Box::new(Untimed),
            slow_reported: None,
            slow_unreported: 0,
            c: Counters::default(),
            requests,
            window: Window::new(),
            pending_ends: Vec::new(),
            pending_len: 0,
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

    /// Frames and bytes that left the outbox for good (sent or abandoned), since the start.
    pub(crate) fn released(&self) -> (u64, u64) {
        (self.c.released_frames, self.c.released_bytes)
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
                self.read_paused = paused;
                if let Some(hb) = &mut self.heartbeat {
                    hb.set_paused(paused, now);
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
            Input::AcksUnavailable { generation } => {
                if self.is_current(generation) && !self.window.is_blind() {
                    log::warn!(
                        "relink: the acknowledgements of the connection to {} cannot be read: \
                         its frames count as confirmed when written",
                        self.endpoint_text().unwrap_or_default()
                    );
                    let c = &mut self.c;
                    self.window.go_blind(|len| c.confirmed(len));
                }
            }
        }
        self.answer_requests();
        self.check_flushed(now);
    }

    /// Bytes received on the connection of dial `generation`.
    pub(crate) fn handle_data(&mut self, now: Instant, generation: u64, bytes: &[u8]) {
        if !self.is_current(generation) || !matches!(self.state, State::Connected | State::Ready) {
            self.c.ignored += 1;
            return;
        }
        if let Some(hb) = &mut self.heartbeat {
            hb.on_inbound(now);
        }
        if self.tls.is_some() {
            self.tls_data(now, bytes);
        } else {
            self.on_plaintext(now, bytes);
        }
    }

    /// Socket bytes through the TLS session: handshake records advance it (its completion
    /// brings the connection up), application records come out as plaintext, appended to the
    /// receive buffer by the session itself.
    fn tls_data(&mut self, now: Instant, bytes: &[u8]) {
        let Some(tls) = self.tls.as_mut() else {
            return;
        };
        let was_handshaking = tls.is_handshaking();
        let before = self.rx.len();
        let fed = tls.feed(bytes, &mut self.rx);
        let established = was_handshaking && !tls.is_handshaking() && fed.is_ok();
        if tls.peer_closed() {
            log::debug!("relink[{}]: the peer sent tls close_notify", self.cfg.name);
        }
        if established {
            self.tls_established(now);
        }
        let received = self.rx.len().saturating_sub(before);
        if received > 0 && matches!(self.state, State::Connected | State::Ready) {
            self.on_received(now, received);
        } else {
            self.rx.truncate(before);
        }
        if let Err(e) = fed {
            self.step(now, Ev::Tls(e));
        }
    }

    /// Application bytes (without TLS) into the framing.
    fn on_plaintext(&mut self, now: Instant, bytes: &[u8]) {
        self.rx.extend_from_slice(bytes);
        self.on_received(now, bytes.len());
    }

    /// `received` application bytes were appended to the receive buffer: decodes the frames.
    fn on_received(&mut self, now: Instant, received: usize) {
        self.c.bytes_received += received as u64;
        if self.state == State::Connected && matches!(self.cfg.proof, ProofOfLife::Inbound) {
            self.step(now, Ev::Alive);
        }
        loop {
            let (framing, rx, watch) = (&mut self.framing, &mut self.rx, &*self.watch);
            let (decoded, took) = timed(watch, Callback::Decode, || framing.decode(rx));
            self.took(now, Callback::Decode, took);
            match decoded {
                Ok(Ok(Some(frame))) => self.on_frame(now, frame),
                Ok(Ok(None)) => {
                    let max = self.framing.max_buffered();
                    if self.rx.len() > max {
                        let buffered = self.rx.len();
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

    /// Fires every timer due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for (timer, ev) in [
            (Timer::Close, Ev::CloseDeadline),
            (Timer::Dial, Ev::DialTimeout),
            (Timer::Handshake, Ev::HandshakeTimeout),
            (Timer::Retry, Ev::RetryTimer),
            (Timer::Stable, Ev::Stable),
        ] {
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
        self.window.poll_due(now);
        if let Some(hb) = &mut self.heartbeat {
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
                match self.encoded_ping(now) {
                    Ok(ping) if ping.is_empty() => {}
                    Ok(ping) => self.control.push_back(ping),
                    Err(p) => self.step(now, Ev::CallbackPanicked(p)),
                }
            }
        }
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
        consider(self.window.poll_at());
        if let Some(hb) = &self.heartbeat {
            consider(hb.death_at());
            consider(Some(hb.next_ping()));
        }
        next
    }

    /// The next effect to carry out.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Fills `buf` with the next bytes to write: control frames first, then queued frames
    /// while Ready, up to `batch_bytes` (one frame at least); with TLS, the session's records
    /// of that batch, and while handshaking only the handshake's own records. Returns false
    /// when there is nothing to write now. Every call must be answered with
    /// [`Machine::transmit_done`] (after [`Machine::transmit_unsent`] when the socket gave
    /// the bytes back).
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        let more = self.poll_sealed(now, buf);
        self.pending_len = buf.len();
        more
    }

    /// `poll_transmit`'s bytes: the plaintext batch, or with TLS its records.
    fn poll_sealed(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        if self.tls.is_none() {
            return self.poll_batch(now, buf);
        }
        buf.clear();
        if !matches!(self.state, State::Connected | State::Ready) {
            return false;
        }
        if self.timers.at(Timer::SendRetry).is_some_and(|t| t > now) {
            return false;
        }
        if let Some(retry) = self.tls_retry.take() {
            // The same records: the frames in flight end where they did.
            *buf = retry;
            return true;
        }
        let handshaking = self.tls.as_ref().is_some_and(TlsSession::is_handshaking);
        let mut plain = std::mem::take(&mut self.plain_out);
        // No hello, ping or frame before the server is verified: only handshake records.
        let batch = !handshaking && self.poll_batch(now, &mut plain);
        let Some(tls) = self.tls.as_mut() else {
            // Encoding the batch failed the connection (a framing that panicked): its
            // session is gone, and so is the batch.
            buf.clear();
            return false;
        };
        let sealed = if batch {
            tls.send_plaintext(&plain)
        } else {
            Ok(())
        };
        tls.take_ciphertext(buf);
        plain.clear();
        self.plain_out = plain;
        if let Err(e) = sealed {
            self.requeue_in_flight();
            self.step(now, Ev::Tls(e));
            buf.clear();
            return false;
        }
        !buf.is_empty()
    }

    /// The bytes of the last `poll_transmit` that the socket did not take (EAGAIN), given
    /// back before `transmit_done`. With TLS they are sent again as they are; without, the
    /// frames behind them are encoded again.
    pub(crate) fn transmit_unsent(&mut self, bytes: Vec<u8>) {
        if self.tls.is_some() {
            self.tls_retry = Some(bytes);
        }
    }

    /// The plaintext batch: control frames, then queued frames while Ready.
    fn poll_batch(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if !matches!(self.state, State::Connected | State::Ready)
            || self.outbox.in_flight() > 0
            || self.requests.in_flight() > 0
        {
            return false;
        }
        if self.timers.at(Timer::SendRetry).is_some_and(|t| t > now) {
            return false;
        }
        self.pending_ends.clear();
        while let Some(c) = self.control.pop_front() {
            buf.extend_from_slice(&c);
            self.in_flight_control.push(c);
        }
        if self.state == State::Ready {
            // A batch holds one frame at least, and no more frames once the payloads would
            // pass the limit (the framing's own bytes are not counted). The window holds back
            // frames while too many written bytes are unacknowledged (one batch at least when
            // none are).
            let limit = self.cfg.batch_bytes;
            let window = match self.cfg.window {
                0 => u64::MAX,
                _ if self.window.is_blind() => u64::MAX,
                w => w as u64,
            };
            let bounds = Bounds {
                limit,
                window,
                unacked: self.window.unacked(),
            };
            let (outbox, framing, name) = (&mut self.outbox, &mut self.framing, &self.cfg.name);
            let ends = &mut self.pending_ends;
            let mut filled = Filled::default();
            // One reading for the whole batch: timing each frame would cost more than
            // encoding a small one.
            let took = self.watch.time(Callback::Encode, &mut || {
                filled = fill_batch(outbox, framing, name, buf, bounds, ends);
            });
            self.took(now, Callback::Encode, took);
            self.abandon_all(filled.refused, AbandonReason::Unencodable);
            if let Some(p) = filled.panicked {
                // The frame stays first in line (not in flight): it is never lost without a
                // word, and its deadline (if any) or a close still ends it.
                return self.encode_panicked(now, buf, p);
            }
            if let Err(p) = self.batch_requests(buf) {
                return self.encode_panicked(now, buf, p);
            }
        }
        !buf.is_empty()
    }

    /// The framing panicked while a batch was being built: nothing of it is written, the frames
    /// taken for it go back to the outbox and the connection fails.
    fn encode_panicked(&mut self, now: Instant, buf: &mut Vec<u8>, p: Panicked) -> bool {
        buf.clear();
        self.requeue_in_flight();
        self.step(now, Ev::CallbackPanicked(p));
        false
    }

    /// What became of the batch from the last `poll_transmit`.
    pub(crate) fn transmit_done(&mut self, now: Instant, result: TxResult) {
        match result {
            TxResult::Sent => {
                self.written(now);
                self.requests.confirm();
                self.in_flight_control.clear();
                if let Some(hb) = &mut self.heartbeat {
                    hb.on_outbound(now);
                }
            }
            TxResult::WouldBlock if self.tls_retry.is_some() => {
                // Sealed records wait as they are; their frames stay in flight.
                self.timers.arm(Timer::SendRetry, now + SEND_RETRY);
            }
            TxResult::WouldBlock if self.tls.is_some() => {
                // Sealed records lost: the session cannot go on without them.
                let g = self.generation;
                self.fail_reason = Some("tls records refused by the socket".into());
                self.for_current(now, g, Ev::Unreachable);
            }
            TxResult::WouldBlock | TxResult::Unreachable => {
                self.requeue_in_flight();
                if result == TxResult::WouldBlock {
                    self.timers.arm(Timer::SendRetry, now + SEND_RETRY);
                } else {
                    let g = self.generation;
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
        let base = self.window.written();
        let len = self.pending_len;
        self.window.wrote(now, len);
        let (c, window, ends) = (&mut self.c, &mut self.window, &self.pending_ends);
        // With TLS a frame's last byte is in one of the records written now: it is
        // acknowledged at the latest with the last of them.
        let tls = self.tls.is_some();
        let mut k = 0;
        self.outbox.take_written(|run| {
            for len in run.lens() {
                c.sent(len);
                if window.is_blind() {
                    c.confirmed(len);
                }
            }
            if window.is_blind() {
                return;
            }
            let Written {
                data,
                start,
                ends: run_ends,
                deadline,
            } = run;
            let frames = run_ends.iter().map(|&at| {
                let end = match ends.get(k) {
                    Some(e) if !tls => base + *e as u64,
                    _ => base + len as u64,
                };
                k += 1;
                (at, end)
            });
            window.push_run(data, start, frames, now, deadline);
        });
    }

    /// A reading of the acknowledged bytes: the frames it covers are confirmed.
    fn acked(&mut self, now: Instant, generation: u64, bytes: Option<u64>) {
        if !self.is_current(generation) || !matches!(self.state, State::Connected | State::Ready) {
            self.c.ignored += 1;
            return;
        }
        let Some(bytes) = bytes else {
            self.window.no_reading(now);
            return;
        };
        let c = &mut self.c;
        if !self
            .window
            .acked(now, bytes, |len| c.confirmed(len))
        {
            log::debug!("relink: an acknowledged count that cannot be this connection's ignored");
        }
        self.check_flushed(now);
    }

    /// Whether the IO side should read the acknowledged bytes of the current connection.
    pub(crate) fn wants_acks(&self) -> bool {
        !self.window.is_empty()
    }

    /// The frames of a lost connection that were written and not confirmed, by the policy:
    /// first in line again (resend), or each given back (report).
    fn redeliver(&mut self) {
        let frames = self.window.take_all();
        self.window.reset();
        match self.cfg.redelivery {
            Redelivery::Resend => {
                self.c.resent += frames.len() as u64;
                for s in frames.into_iter().rev() {
                    self.outbox.push_front(s.frame, s.deadline);
                }
            }
            Redelivery::Report => {
                let frames = frames.into_iter().map(|s| s.frame).collect();
                self.abandon_all(frames, AbandonReason::Unconfirmed);
            }
        }
    }

    /// Nothing left to write, to confirm or to answer.
    fn drained(&self) -> bool {
        self.outbox.is_empty() && self.window.is_empty() && self.requests.waiting() == 0
    }

    /// A consistent snapshot at `now`.
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
            attempt: self.attempt,
            native_redials: self.native_used,
            consecutive_failures: self.failures,
            connects: self.c.connects,
            reconnects: self.c.reconnects,
            last_outage: self.last_outage,
            next_retry_in,
            peer_addr: self.current.map(|(_, a)| a),
            frames_submitted: self.c.submitted,
            frames_sent: self.c.sent,
            bytes_sent: self.c.bytes_sent,
            frames_rejected: self.c.rejected,
            abandoned: self.c.abandoned,
            outbox_frames: queued as u64,
            outbox_bytes: queued_bytes as u64,
            frames_received: self.c.received,
            bytes_received: self.c.bytes_received,
            heartbeats_sent: self.c.heartbeats_sent,
            heartbeats_missed: self.c.heartbeats_missed,
            last_rtt: self.last_rtt,
            reading_paused: self.read_paused,
            events_dropped: 0,
            ignored_inputs: self.c.ignored,
            callback_panics: self.c.callback_panics,
            requests_answered: self.requests.answered,
            requests_failed: self.requests.failed,
            requests_outstanding: self.requests.len() as u64,
            replies_late: self.requests.late,
            slow_callbacks: self.c.slow_callbacks,
            slowest_callback: self.c.slowest_callback,
            verdicts_deferred: self.c.verdicts_deferred,
            down_for: self
                .failing_since
                .map(|since| now.saturating_duration_since(since)),
            tls_rejected: self.c.tls_rejected,
            frames_confirmed: self.c.confirmed,
            frames_unconfirmed: self.window.len() as u64,
            frames_resent: self.c.resent,
            oldest_unconfirmed: self
                .window
                .oldest()
                .map(|t| now.saturating_duration_since(t)),
        }
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
                let bound = self
                    .tls_settings()
                    .map_or(Duration::ZERO, |t| t.handshake_timeout);
                self.tls_failed(now, TlsError::HandshakeTimeout(bound))
            }
            (Connected, Ev::HandshakeTimeout) => self.fail(now, Cause::HandshakeTimeout),
            (Connected | Ready, Ev::Tls(e)) => self.tls_failed(now, e),
            (Connected | Ready, Ev::Disconnected) => self.fail(now, Cause::PeerClosed),
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

    fn dial(&mut self, now: Instant, cause: Cause) {
        self.generation += 1;
        self.attempt = self.attempt.saturating_add(1);
        self.native_left = self.cfg.native_retries.saturating_sub(self.native_used);
        self.dial_started = now;
        self.timers.disarm(Timer::Retry);
        self.retry_delay = None;
        let idx = self.endpoints.next_index();
        let ep = self.endpoints.get(idx).clone();
        self.timers.arm(Timer::Dial, now + self.cfg.dial_bound);
        match ep.host {
            Host::Ip(ip) => {
                self.current = Some((idx, SocketAddr::new(ip, ep.port)));
                self.transition(now, State::Connecting, cause);
                self.connect_current();
            }
            Host::Name(name) => {
                if let Some(addr) = self.endpoints.cached(idx, now, self.cfg.dns_refresh) {
                    self.current = Some((idx, addr));
                    self.transition(now, State::Connecting, cause);
                    self.connect_current();
                } else {
                    // Keep the next address index across resolutions so every address gets
                    // its turn.
                    self.current = None;
                    self.resolving = Some(idx);
                    self.transition(now, State::Connecting, cause);
                    self.actions.push_back(Action::Resolve {
                        generation: self.generation,
                        host: name,
                        port: ep.port,
                    });
                }
            }
        }
    }

    fn resolved(&mut self, now: Instant, addrs: Vec<SocketAddr>) {
        let Some(idx) = self.resolving.take() else {
            self.c.ignored += 1;
            return;
        };
        if addrs.is_empty() {
            return self.fail(now, Cause::Dns);
        }
        let addr = self.endpoints.resolved(idx, addrs, now);
        self.current = Some((idx, addr));
        self.timers
            .arm(Timer::DnsRefresh, now + self.cfg.dns_refresh);
        self.connect_current();
    }

    /// Asks for a fresh answer for the endpoint in use, in the background: the next dial then
    /// finds it in the cache.
    fn refresh_dns(&mut self) {
        let Some((idx, _)) = self.current else {
            return;
        };
        let ep = self.endpoints.get(idx);
        if let Host::Name(name) = &ep.host {
            self.actions.push_back(Action::Refresh {
                endpoint: idx,
                host: name.clone(),
                port: ep.port,
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
        if self.state == State::Closed || idx >= self.endpoints.len() {
            self.c.ignored += 1;
            return;
        }
        match result {
            Ok(addrs) if !addrs.is_empty() => self.endpoints.refreshed(idx, addrs, now),
            Ok(_) | Err(_) => {
                log::debug!(
                    "relink[{}]: background refresh of {} failed; the old answer stays",
                    self.cfg.name,
                    self.endpoints.get(idx)
                );
            }
        }
        self.timers
            .arm(Timer::DnsRefresh, now + self.cfg.dns_refresh);
    }

    fn connect_current(&mut self) {
        if let Some((_, addr)) = self.current {
            log::debug!("relink[{}]: dialling {}", self.cfg.name, fmt_addr(addr));
            self.actions.push_back(Action::Connect {
                generation: self.generation,
                addr,
            });
        }
    }

    fn tcp_connected(&mut self, now: Instant) {
        self.timers.disarm(Timer::Dial);
        self.timers.disarm(Timer::SendRetry);
        self.c.connects += 1;
        self.rx = BytesMut::new();
        self.control.clear();
        self.heartbeat = None;
        self.handshake_pending = false;
        self.tls_retry = None;
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
        self.transition(now, State::Connected, Cause::TcpConnected);
        match session {
            None => self.link_up(now),
            Some((Ok(session), timeout)) => {
                // The ClientHello is ready in the session; poll_transmit sends it.
                self.tls = Some(session);
                self.timers.arm(Timer::Handshake, now + timeout);
            }
            Some((Err(e), _)) => self.tls_failed(now, e),
        }
    }

    /// The TLS settings of the endpoint in use, when the link speaks TLS.
    fn tls_settings(&self) -> Option<&super::tls::TlsSettings> {
        let (idx, _) = self.current?;
        self.cfg.tls.as_ref().map(|list| &list[idx])
    }

    fn tls_handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(TlsSession::is_handshaking)
    }

    fn tls_established(&mut self, now: Instant) {
        self.timers.disarm(Timer::Handshake);
        if let Some(tls) = &self.tls {
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

    /// The connection carries application bytes (TCP is up, and the TLS handshake has
    /// completed): heartbeat, hello, and the connect as proof of life.
    fn link_up(&mut self, now: Instant) {
        let (framing, watch) = (&mut self.framing, &*self.watch);
        let (reset, took) = timed(watch, Callback::Decode, || framing.reset());
        self.took(now, Callback::Decode, took);
        self.heartbeat = self
            .cfg
            .heartbeat
            .as_ref()
            .map(|hb| HeartbeatState::start(hb, now, self.read_paused));
        self.handshake_pending = false;
        let mut panicked = reset.err();
        let mut slowest = Duration::ZERO;
        if let ProofOfLife::Handshake { hello, timeout, .. } = &self.cfg.proof {
            for h in hello.iter().take_while(|_| panicked.is_none()) {
                let (encoded, took) = encode(&mut self.framing, &*self.watch, &self.cfg.name, h);
                slowest = slowest.max(took);
                match encoded {
                    Ok(Some(buf)) => self.control.push_back(buf),
                    Ok(None) => {}
                    Err(p) => {
                        panicked = Some(p);
                        break;
                    }
                }
            }
            self.handshake_pending = true;
            let t = now + *timeout;
            self.timers.arm(Timer::Handshake, t);
        }
        self.took(now, Callback::Encode, slowest);
        if let Some(p) = panicked {
            self.step(now, Ev::CallbackPanicked(p));
        } else if matches!(self.cfg.proof, ProofOfLife::Connect) {
            self.ready(now);
        }
    }

    fn ready(&mut self, now: Instant) {
        self.timers.disarm(Timer::Handshake);
        if let Some(since) = self.failing_since.take() {
            let d = now.saturating_duration_since(since);
            if d >= OUTAGE_WARN_FIRST {
                log::warn!(
                    "relink[{}]: connected again after {}s without a connection",
                    self.cfg.name,
                    d.as_secs()
                );
            }
        }
        self.next_outage_warn = OUTAGE_WARN_FIRST;
        self.handshake_pending = false;
        if let Some(since) = self.outage_since.take() {
            self.last_outage = Some(now.saturating_duration_since(since));
            self.c.reconnects += 1;
        }
        if self.cfg.min_stable.is_zero() {
            self.failures = 0;
            self.attempt = 0;
            self.native_used = 0;
            self.backoff.reset();
        } else {
            self.timers.arm(Timer::Stable, now + self.cfg.min_stable);
        }
        self.transition(now, State::Ready, Cause::Alive);
    }

    fn on_frame(&mut self, now: Instant, frame: Bytes) {
        if self.handshake_pending {
            if let ProofOfLife::Handshake { accept, .. } = &self.cfg.proof {
                let (accepted, took) =
                    timed(&*self.watch, Callback::Handshake, || accept.test(&frame));
                self.took(now, Callback::Handshake, took);
                match accepted {
                    Ok(true) => {
                        self.step(now, Ev::Alive);
                        return;
                    }
                    Ok(false) => {}
                    Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
                }
            }
        }
        if let Some(reply) = self.cfg.heartbeat.as_ref().and_then(|h| h.reply.as_ref()) {
            let (is_reply, took) = timed(&*self.watch, Callback::HeartbeatReply, || {
                reply.test(&frame)
            });
            self.took(now, Callback::HeartbeatReply, took);
            let is_reply = match is_reply {
                Ok(r) => r,
                Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
            };
            if is_reply {
                // Only the replies to our own pings are swallowed: an application that sends
                // the same command as the ping still gets its answers.
                if let Some(reply) = self.heartbeat.as_mut().and_then(|h| h.on_reply(now)) {
                    if let Reply::Rtt(rtt) = reply {
                        self.last_rtt = Some(rtt);
                    }
                    return;
                }
            }
        }
        self.c.received += 1;
        log::trace!(
            "relink[{}]: frame of {} bytes received",
            self.cfg.name,
            frame.len()
        );
        if self.requests.is_empty() {
            return self.emit(Event::Frame(frame));
        }
        let verdict = match self.verdict(&frame) {
            Ok(v) => v,
            Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
        };
        match self.requests.on_frame(frame, verdict) {
            Matched::Answer(_) => self.answer_requests(),
            Matched::Late => log::debug!("relink[{}]: a late reply dropped", self.cfg.name),
            Matched::Unsolicited(frame) => self.emit(Event::Frame(frame)),
        }
    }

    /// What the correlation's code says of an inbound frame, guarded.
    fn verdict(&self, frame: &[u8]) -> Result<Verdict, Panicked> {
        guarded(Callback::Correlation, || {
            match &self.cfg.requests.correlation.0 {
                Matching::InOrder {
                    unsolicited: Some(p),
                } if p.test(frame) => Verdict::Unsolicited,
                Matching::InOrder { .. } => Verdict::Reply,
                Matching::ById { reply_id, .. } => match reply_id.read(frame) {
                    Some(id) => Verdict::Id(id),
                    None => Verdict::Unsolicited,
                },
            }
        })
    }

    fn request(
        &mut self,
        now: Instant,
        token: Token,
        frame: Bytes,
        id: Option<Vec<u8>>,
        deadline: Instant,
    ) {
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

    /// Adds the requests waiting to be written to the batch, while it has room.
    fn batch_requests(&mut self, buf: &mut Vec<u8>) -> Result<(), Panicked> {
        let limit = self.cfg.batch_bytes;
        while let Some(frame) = self.requests.next_unsent() {
            if !buf.is_empty() && buf.len().saturating_add(frame.len()) > limit {
                break;
            }
            let mark = buf.len();
            let framing = &mut self.framing;
            match guarded(Callback::Encode, || framing.encode(frame, buf))? {
                Ok(()) => self.requests.advance(),
                Err(e) => {
                    buf.truncate(mark);
                    self.requests
                        .refuse_next(|frame| RequestError::Invalid(frame, e));
                    self.answer_requests();
                }
            }
        }
        Ok(())
    }

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
        self.requests.connection_lost();
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
        } else if cause == Cause::TlsRejected {
            // The same certificates get the same answer: no backoff meant for restarts.
            let wait = self.cfg.config_retry.unwrap_or(self.cfg.cooldown);
            log::warn!(
                "relink[{}]: tls rejected on {} ({}); a retry cannot fix this, next attempt in {wait:?}",
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
        for t in [
            Timer::Dial,
            Timer::Handshake,
            Timer::Stable,
            Timer::SendRetry,
        ] {
            self.timers.disarm(t);
        }
        self.requeue_in_flight();
        self.control.clear();
        self.heartbeat = None;
        self.handshake_pending = false;
        // The framing itself is reset (guarded) when the next connection comes up.
        self.rx = BytesMut::new();
        // Nothing of a TLS session outlives its connection.
        self.tls = None;
        self.tls_retry = None;
        // Any later input of this dial is stale.
        self.generation += 1;
    }

    fn finish(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        if matches!(
            self.state,
            State::Connecting | State::Connected | State::Ready
        ) {
            // Best effort, within the linger: close_notify, unless sealed records are still
            // waiting (it would be out of sequence).
            if let Some(mut tls) = self.tls.take() {
                if !tls.is_handshaking() && self.tls_retry.is_none() {
                    tls.close_notify();
                    let mut bytes = Vec::new();
                    tls.take_ciphertext(&mut bytes);
                    if !bytes.is_empty() {
                        self.actions.push_back(Action::Send(bytes));
                    }
                }
            }
            self.actions.push_back(Action::Disconnect);
        }
        self.tls = None;
        self.tls_retry = None;
        self.requeue_in_flight();
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
        self.heartbeat = None;
        self.retry_delay = None;
        self.transition(now, State::Closed, Cause::Closed);
        self.actions.push_back(Action::Stop);
    }

    fn submit(&mut self, now: Instant, frame: bytes::Bytes, deadline: Option<Instant>) {
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

    /// Drops the oldest frames (`Overflow`) while the outbox is over its limits; the last
    /// frame stays even if it alone is over. Frames in flight are confirmed or put back first.
    fn trim(&mut self) {
        while self.outbox.in_flight() == 0 && self.outbox.over_limit() && self.outbox.len() > 1 {
            let frame = self.outbox.pop_front().expect("non-empty");
            self.abandon_all(vec![frame], AbandonReason::Overflow);
        }
    }

    fn abandon_all(&mut self, frames: Vec<Bytes>, reason: AbandonReason) {
        for frame in frames {
            self.c.abandon(reason, frame.len());
            self.emit(Event::Abandoned { frame, reason });
        }
    }

    fn requeue_in_flight(&mut self) {
        self.outbox.requeue();
        self.requests.requeue();
        for c in self.in_flight_control.drain(..).rev() {
            self.control.push_front(c);
        }
    }

    fn check_flushed(&mut self, now: Instant) {
        if self.closing && self.state != State::Closed && self.drained() {
            self.step(now, Ev::Flushed);
        }
    }

    fn note_address_failed(&mut self) {
        if let Some((idx, _)) = self.current {
            self.endpoints.mark_failed(idx);
        }
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

    /// The ping's bytes; empty when there is none, or when the framing refused it.
    fn encoded_ping(&mut self, now: Instant) -> Result<Vec<u8>, Panicked> {
        let (ping, took) = match self.cfg.heartbeat.as_ref().map(|h| &h.ping) {
            Some(Ping::Raw(b)) => return Ok(b.clone()),
            Some(Ping::Frame(f)) => encode(&mut self.framing, &*self.watch, &self.cfg.name, f),
            None => return Ok(Vec::new()),
        };
        self.took(now, Callback::Encode, took);
        Ok(ping?.unwrap_or_default())
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

/// How filling a batch ended: frames the framing refused now (taken out of the outbox), and
/// the panic that ended it, if any.
#[derive(Default)]
struct Filled {
    refused: Vec<Bytes>,
    panicked: Option<Panicked>,
}

/// How much one batch may hold: payload bytes (`limit`, one frame at least), and the
/// window's bound on bytes written and not yet acknowledged (`unacked` of them already).
#[derive(Clone, Copy)]
struct Bounds {
    limit: usize,
    window: u64,
    unacked: u64,
}

/// Encodes queued frames into `buf` within `bounds`, noting where each ends in `ends`. Each
/// call into the framing is guarded.
fn fill_batch(
    outbox: &mut Outbox,
    framing: &mut BoxedFraming,
    name: &str,
    buf: &mut Vec<u8>,
    bounds: Bounds,
    ends: &mut Vec<usize>,
) -> Filled {
    let mut filled = Filled::default();
    while let Some(frame) = outbox.next_unsent() {
        if !buf.is_empty() && buf.len().saturating_add(frame.len()) > bounds.limit {
            break;
        }
        let unacked = bounds.unacked + buf.len() as u64;
        if unacked > 0 && unacked >= bounds.window {
            break;
        }
        let mark = buf.len();
        match guarded(Callback::Encode, || framing.encode(frame, buf)) {
            Ok(Ok(())) => {
                outbox.advance();
                ends.push(buf.len());
            }
            Ok(Err(e)) => {
                buf.truncate(mark);
                if outbox.in_flight() > 0 {
                    // The frames before it go first; it is then first in line.
                    break;
                }
                // The framing accepted the frame at `send` and refuses it now.
                log::debug!("relink[{name}]: the framing refused a queued frame: {e}");
                filled
                    .refused
                    .push(outbox.pop_front().expect("front exists"));
            }
            Err(p) => {
                filled.panicked = Some(p);
                break;
            }
        }
    }
    filled
}

/// One control frame (a hello frame, the ping) through the framing, guarded: the framing may
/// be application code. `None` when the framing refuses it (`build()` checked it, so only a
/// framing whose `check` and `encode` disagree does).
fn encode(
    framing: &mut BoxedFraming,
    watch: &dyn Stopwatch,
    name: &str,
    frame: &[u8],
) -> (Result<Option<Vec<u8>>, Panicked>, Duration) {
    timed(watch, Callback::Encode, || {
        let mut buf = Vec::new();
        match framing.encode(frame, &mut buf) {
            Ok(()) => Some(buf),
            Err(e) => {
                log::warn!("relink[{name}]: the framing refused a control frame: {e}");
                None
            }
        }
    })
}

mod served;
#[cfg(test)]
mod tests;
