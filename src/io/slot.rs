//! One link as its IO thread holds it: its machine, its STREAM socket and monitor, its events
//! on their way to the application ([`Sink`]), the promises of its requests. The worker
//! (`worker.rs`) decides when a link is served; a pass of the slot does the serving: translate
//! what arrived (routing-id toggles, data, monitor events) into machine inputs, carry out the
//! machine's actions, hand it the socket for writing. No business logic lives here.
//!
//! What arrives (the monitor, the socket, the acknowledgements) is read in `slot/input.rs`.
//!
//! The slot reaches its own IO thread from elsewhere (a resolver's answer) through a [`Post`]
//! its `build()` hands it, so that it names nothing of the worker's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::answer::Promise;
use super::buffers;
use super::context::Context;
use super::ffi;
use super::ids::ById;
use super::intake::{Asked, Handed, NextTake};
use super::lane;
use super::look::Replies;
use super::resolver::{self, Resolver};
use super::shared::{Command, Lookup, Shared};
use super::sink::Sink;
use super::snapshot::Sources;
use super::socket::{apply_options, guard, ms, send_batch, Guard, SocketOptions, COPIED_MAX};
use super::spool::Ledger;
use super::stopwatch::CallClock;
use crate::core::fmt_addr;
use crate::core::machine::{Action, Input, Machine, TxResult};
use crate::core::requests::Token;
use crate::core::settings::Settings;
use crate::error::{Callback, ConfigError, FlushError, LinkError};
use crate::event::{Event, State};
use crate::metrics::Metrics;

mod input;

/// What the IO thread needs besides the core's settings.
#[derive(Debug)]
pub(crate) struct IoSettings {
    pub socket: SocketOptions,
    pub resolver: Option<Resolver>,
    pub events_capacity: usize,
    /// How long the frames of a connection the peer closed may wait for the application.
    pub closed_frames_wait: Duration,
    /// Whether the IO thread looks for what comes next after this link's passes
    /// ([`Looks`](super::look::Looks)).
    pub looks: bool,
}

/// Batches written for one link per pass.
const WRITE_BUDGET: usize = 16;

/// Queues a command for this link on its IO thread, from any thread; false when the thread is
/// gone (the caller wakes the thread).
pub(crate) type Post = Arc<dyn Fn(Command) -> bool + Send + Sync>;

/// How long the TCP_INFO duplicate stays open after the last frame that waited for
/// acknowledgement was confirmed ([`Slot::release_idle`]).
const HOLD_IDLE: Duration = Duration::from_millis(100);

/// One link as its IO thread holds it: its machine, its sockets, its undelivered events.
/// Built on the caller's thread (so that errors reach `build()`), then moved to the thread.
pub(crate) struct Slot {
    /// The link's id, unique in the process.
    pub(super) id: u64,
    post: Post,
    pub(super) machine: Machine,
    socket: zmq::Socket,
    monitor: zmq::Socket,
    pub(super) socket_fd: i32,
    pub(super) monitor_fd: i32,
    /// The monitor's ZMQ_FD signalled since its events were last read (true at first): the
    /// monitor is read only then, until it has nothing more.
    pub(super) monitor_signalled: bool,
    /// The STREAM socket's ZMQ_FD signalled since the socket was last read (true at first).
    pub(super) socket_signalled: bool,
    /// The last call into the STREAM socket was a read that found nothing: libzmq processed
    /// every pending command then, so ZMQ_FD signals anything new, and neither a read nor
    /// ZMQ_EVENTS is needed until it does.
    socket_quiet: bool,
    /// The acknowledgements were read in this pass (or nothing waited for them).
    acks_read: bool,
    /// The values this thread last stored in `Shared::reader_waiting` and `Shared::state` (it
    /// alone writes them while the slot lives): a pass stores only a change, and does not
    /// touch the application's cache lines when nothing changed.
    reader_waiting: bool,
    published_state: u8,
    sink: Sink,
    closed_frames_wait: Duration,
    pub(super) shared: Arc<Shared>,
    /// Routing id and generation of the current dial.
    rid: Option<(Rid, u64)>,
    /// The address of the current dial.
    dialed: Option<SocketAddr>,
    /// The TCP connection of the current dial, as the monitor reported it: its
    /// acknowledgements confirm frames.
    conn: Option<ffi::TcpConn>,
    connected: bool,
    /// The monitor reported the current dial's connection up (EVENT_CONNECTED) and not yet
    /// down: told ahead of the in-band notification, which a link behind has not read.
    monitor_up: bool,
    /// ZMQ_IMMEDIATE is set: libzmq then names each connection itself and ignores
    /// ZMQ_CONNECT_ROUTING_ID, so the routing id is learnt from the connect notification.
    immediate: bool,
    linger: Duration,
    /// The last routing id learnt that way (its later frames are not a new connection).
    learnt_rid: Option<Vec<u8>>,
    endpoint: Option<String>,
    batch_cap: usize,
    /// What the link's next `Intake::take` is made from: the sizes of its buffers and the
    /// last take's emptied lists.
    next_take: NextTake,
    /// Application frames sent and received as of the end of the last pass, whether the
    /// link's replies come soon after its writes (mirrored in `Shared::replying`), and
    /// whether the last pass wrote frames such a reply may answer (see `Slot::note_traffic`).
    traffic: (u64, u64),
    replies: Replies,
    awaiting: bool,
    /// The IO thread looks for what comes next after this link's passes (`Looks::Learnt`).
    pub(super) looks: bool,
    released: (u64, u64),
    /// The machine stopped (when, for the bound on waiting for senders).
    pub(super) stopped: Option<Instant>,
    monitor_mismatch: u64,
    resolver: Option<Resolver>,
    /// The deadline of this link's entry in the thread's timer heap, if it has one.
    pub(super) timer_at: Option<Instant>,
    /// Queued to be served in the current or the next pass.
    pub(super) queued: bool,
    /// When to drain the link's lanes again (see [`Slot::take_intake`]).
    lane_recheck: Option<Instant>,
    /// When to close the TCP_INFO duplicate, held while no frame waits ([`HOLD_IDLE`]).
    release_at: Option<Instant>,
    /// Who waits for each outstanding request, by its token.
    promises: HashMap<Token, Promise, ById>,
    /// The flushes waiting for their outcome.
    flushes: HashMap<Token, Promise<Result<(), FlushError>>, ById>,
    next_token: Token,
    /// The spool's sequence numbers of the frames the machine holds (a spooled link).
    ledger: Option<Ledger>,
    /// Leaves the shared state Closed when the slot goes (before `_done` tells `close`).
    _stop: StopGuard,
    /// Dropped when the slot is freed: `close` waits for that.
    _done: Sender<()>,
    /// Keeps the context alive until the sockets are closed (declared last: dropped last).
    _context: Context,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("id", &self.id)
            .field("state", &self.machine.state())
            .finish_non_exhaustive()
    }
}

/// What a link's `build()` hands the slot besides the settings.
pub(crate) struct Wiring {
    pub context: Context,
    pub seed: u64,
    pub shared: Arc<Shared>,
    /// The link's id.
    pub id: u64,
    /// The way to the link's IO thread.
    pub post: Post,
    pub events: Sender<Event>,
    pub done: Sender<()>,
    /// What the link's spool held at its start, said first.
    pub recovered: Option<Event>,
}

/// A socket error at build time, told apart from a bad setting when it is a limit.
fn build_error(what: &str, e: zmq::Error) -> ConfigError {
    match e {
        zmq::Error::EMFILE => ConfigError::NoRoom(format!(
            "libzmq {what}: {e} (the context's socket limit, three sockets per link, or the \
             process's open-file limit, about four per link)"
        )),
        e => ConfigError::Zmq(format!("{what}: {e}")),
    }
}

impl Slot {
    pub(crate) fn new(
        mut settings: Settings,
        io: IoSettings,
        w: Wiring,
    ) -> Result<Slot, ConfigError> {
        ffi::seed_libc_rand_once(rand::random());
        let Wiring {
            context,
            seed,
            shared,
            id,
            post,
            events,
            done,
            recovered,
        } = w;
        let zerr = |what: &str, e: zmq::Error| ConfigError::Zmq(format!("{what}: {e}"));
        let mut socket = context
            .raw
            .socket(zmq::STREAM)
            .map_err(|e| build_error("socket", e))?;
        let guard = guard().map_err(ConfigError::Zmq)?;
        apply_options(&mut socket, &io.socket, guard).map_err(ConfigError::Zmq)?;
        if guard == Guard::NoRedial {
            // libzmq redials nothing: every attempt is relink's.
            settings.native_retries = 0;
        }
        let addr = format!("inproc://relink-monitor-{}-{}", std::process::id(), id);
        socket
            .monitor(&addr, zmq::SocketEvent::ALL as i32)
            .map_err(|e| build_error("monitor", e))?;
        let monitor = context
            .raw
            .socket(zmq::PAIR)
            .map_err(|e| build_error("monitor socket", e))?;
        monitor
            .set_linger(0)
            .map_err(|e| zerr("monitor linger", e))?;
        monitor
            .connect(&addr)
            .map_err(|e| build_error("monitor connect", e))?;
        let socket_fd = socket.get_fd().map_err(|e| zerr("ZMQ_FD", e))?;
        let monitor_fd = monitor.get_fd().map_err(|e| zerr("monitor ZMQ_FD", e))?;
        // Room for the state events of a long outage and for every frame the outbox can give back
        // at once (a close abandons them all): nothing is trimmed short of that.
        let max_pending = io
            .events_capacity
            .saturating_mul(4)
            .max(4096)
            .saturating_add(settings.outbox_frames);
        let batch_cap = buffers::capacity(settings.batch_bytes);
        let mut machine = Machine::new(settings, seed, Instant::now());
        machine.set_stopwatch(Box::new(CallClock));
        let stop = shared.clone();
        let ledger = shared.spool.clone().map(Ledger::new);
        let mut slot = Slot {
            id,
            post,
            machine,
            socket,
            monitor,
            socket_fd,
            monitor_fd,
            monitor_signalled: true,
            socket_signalled: true,
            socket_quiet: false,
            acks_read: false,
            reader_waiting: false,
            published_state: State::Idle as u8,
            sink: Sink::new(events, shared.clone(), io.events_capacity, max_pending),
            closed_frames_wait: io.closed_frames_wait,
            shared,
            rid: None,
            connected: false,
            monitor_up: false,
            immediate: io.socket.immediate,
            linger: io.socket.linger,
            learnt_rid: None,
            endpoint: None,
            batch_cap,
            next_take: NextTake::default(),
            traffic: (0, 0),
            replies: Replies::default(),
            awaiting: false,
            looks: io.looks,
            released: (0, 0),
            stopped: None,
            monitor_mismatch: 0,
            dialed: None,
            conn: None,
            resolver: io.resolver,
            timer_at: None,
            queued: false,
            lane_recheck: None,
            release_at: None,
            promises: HashMap::default(),
            flushes: HashMap::default(),
            next_token: 0,
            ledger,
            _stop: StopGuard(stop),
            _done: done,
            _context: context,
        };
        if let Some(ev) = recovered {
            slot.deliver(ev);
        }
        Ok(slot)
    }

    /// One pass for this link; returns whether it has more to do right away (input left
    /// unread or batches left unwritten after its budget).
    pub(super) fn pass(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        if self.lane_recheck.is_some_and(|at| at <= now) {
            self.lane_recheck = None;
            self.take_intake(now, false);
        }
        self.flush_events();
        self.sink.expire(now);
        self.acks_read = false;
        if std::mem::take(&mut self.monitor_signalled) {
            self.read_monitor(now);
        }
        let mut more = false;
        // A reading of the acknowledgements when one is due: at a quiet link's pace one
        // covers the frames of several passes (`Machine::reading_at`).
        let due = self.machine.reading_due(now);
        let mut read = false;
        if !self.sink.is_behind() {
            // Acknowledgements first: a reply (or garbage that fails the connection) comes
            // after the peer's kernel acknowledged what it answers, so the frames it answers
            // are confirmed before anything the reply causes.
            self.read_acks(now, due);
            read = due;
            // A quiet socket whose ZMQ_FD did not signal holds nothing (a pass for a timer, a
            // command): the read, a mailbox check in libzmq (`getpid` and `poll`), is skipped.
            // One the link's own calls left unquiet (a write) is asked first: ZMQ_EVENTS makes
            // the same check as a read that finds nothing, at a third of its cost.
            let signalled = std::mem::take(&mut self.socket_signalled);
            if signalled || (!self.socket_quiet && self.holds_input()) {
                more |= self.read_socket(now);
                // A reply's reader wakes as soon as the frames are in the channel, while this
                // pass goes on with the link's timers and writes.
                self.notify_delivered();
            }
        }
        self.machine.handle_timeout(now);
        self.carry_out(now);
        let again = (due && !read) || self.machine.reading_due(now);
        self.read_acks(now, again);
        more |= self.transmit(now, buf);
        self.release_idle(now);
        self.note_traffic(now);
        self.publish();
        // Any call into the socket but a read that found nothing may have taken libzmq's
        // signal for input that is still unread (and asking processes its pending commands, a
        // disconnect's among them). After such a read, ZMQ_FD signals whatever comes next.
        let readable = !self.socket_quiet && self.holds_input();
        more || (readable && !self.sink.is_behind() && self.stopped.is_none())
    }

    /// Whether the socket holds input, as ZMQ_EVENTS says (which also processes libzmq's
    /// pending commands for it); a socket that holds none is quiet from then on, until its
    /// ZMQ_FD signals or the link calls into it again.
    fn holds_input(&mut self) -> bool {
        let readable = self
            .socket
            .get_events()
            .is_ok_and(|e| e.contains(zmq::POLLIN));
        self.socket_quiet = !readable;
        readable
    }

    /// Closes the TCP_INFO duplicate once no frame has waited for [`HOLD_IDLE`]: a link that
    /// writes now and then (a request and its reply every few milliseconds, a reading that
    /// confirms a stream's last frames before the pass writes the next) keeps it, rather than
    /// closing and taking it again each time (four system calls: two addresses, a dup, a
    /// close). At the end of a pass, so that a pass that reads and then writes keeps it.
    fn release_idle(&mut self, now: Instant) {
        let idle = !self.machine.wants_acks();
        let Some(conn) = self.conn.as_mut().filter(|c| idle && c.is_held()) else {
            self.release_at = None;
            return;
        };
        match self.release_at {
            None => self.release_at = Some(now + HOLD_IDLE),
            Some(at) if at <= now => {
                conn.release();
                self.release_at = None;
            }
            Some(_) => {}
        }
    }

    /// Learns from this pass's traffic whether the link's replies come soon after its writes
    /// ([`Replies`]): the looks of the IO loop and of the link's blocking receives are a
    /// reply's only on such a link, so a link that streams in or out looks as a stream does
    /// (`look::LookSpan::stream`).
    fn note_traffic(&mut self, now: Instant) {
        let (sent, received) = self.machine.sent_received();
        let wrote = sent != self.traffic.0;
        let was = self.replies.replying();
        let replying = self.replies.pass(now, wrote, received != self.traffic.1);
        if replying != was {
            self.shared.replying.store(replying, Ordering::Relaxed);
        }
        self.awaiting = wrote && replying;
        self.traffic = (sent, received);
    }

    /// The last pass wrote frames on a link whose replies come soon after its writes.
    pub(super) fn awaits_reply(&self) -> bool {
        self.awaiting
    }

    pub(super) fn command(&mut self, now: Instant, cmd: Command) {
        let input = match cmd {
            Command::Take => {
                self.take_intake(now, false);
                return;
            }
            Command::Close { deadline } => Input::Close { deadline },
            Command::ReconnectNow => Input::ReconnectNow,
            Command::Resolved {
                lookup: Lookup::Dial(generation),
                result,
            } => Input::Resolved { generation, result },
            Command::Resolved {
                lookup: Lookup::Refresh(endpoint),
                result,
            } => Input::Refreshed { endpoint, result },
            Command::Metrics(reply) => {
                // Frames a sender queued before the call count, even one whose push raced
                // with the lane's last drain (`lane`: it told nobody).
                self.take_intake(now, false);
                let _ = reply.send(self.snapshot(now));
                return;
            }
            #[cfg(feature = "test-hooks")]
            Command::PanicForTests => panic!("IO thread panic requested by a test"),
            Command::CallbackTook { callback, took } => Input::CallbackTook { callback, took },
            Command::Flush { deadline, promise } => {
                // The frames sent before the flush are in the intake or a lane: taken first.
                self.take_intake(now, false);
                let token = self.next_token;
                self.next_token += 1;
                self.flushes.insert(token, promise);
                Input::Flush { token, deadline }
            }
        };
        self.machine.handle_input(now, input);
    }

    /// Writes the first batch of the frames just taken from the intake at once, before the
    /// rest of the link's pass: the pass's timers, readings and accounting then run while
    /// libzmq's IO thread writes, rather than before it is woken (docs/design.md, "CPU at a
    /// steady pace"). Only when the pass would write the same batch: nothing came in on the
    /// socket or its monitor, and none of the link's timers is due (`timer_at`, never later
    /// than the machine's next deadline as of the last pass). A frame or a request whose own
    /// deadline passed before it was taken never reaches the batch: the machine gives it back
    /// as it takes it (`Machine::submit`, `RequestWindow::submit`).
    pub(super) fn write_taken(&mut self, now: Instant, buf: &mut Vec<u8>) {
        let due = |at: Option<Instant>| at.is_some_and(|at| at <= now);
        let waits = self.stopped.is_some()
            || self.rid.is_none()
            || !self.socket_quiet
            || self.socket_signalled
            || self.monitor_signalled
            || due(self.timer_at)
            || due(self.lane_recheck);
        if !waits {
            // One batch: the pass writes whatever else there is.
            self.transmit_one(now, buf);
        }
    }

    /// Hands the frames waiting in the intake to the machine; with `last`, the intake is
    /// closed first, so that these are the last.
    pub(super) fn take_intake(&mut self, now: Instant, last: bool) {
        let shared = &self.shared;
        let taken = if last {
            shared.close_intake()
        } else {
            let mut taken = shared.intake.take(&mut self.next_take);
            // A lane's frames may have raced with this drain's clear of its `told` flag:
            // drain again a moment later (`lane::RECHECK`).
            if shared.lanes.drain(&mut taken, false) > 0 {
                self.lane_recheck = Some(now + lane::RECHECK);
            }
            taken
        };
        let machine = &mut self.machine;
        let ledger = &mut self.ledger;
        let (promises, next_token) = (&mut self.promises, &mut self.next_token);
        taken.hand_over(&mut self.next_take, |handed| {
            let input = match handed {
                Handed::Frames(input) => {
                    if let Some(l) = ledger {
                        l.taken(&input);
                    }
                    input
                }
                Handed::Request(Asked {
                    frame,
                    id,
                    deadline,
                    promise,
                }) => {
                    let token = *next_token;
                    *next_token += 1;
                    promises.insert(token, promise);
                    Input::Request {
                        token,
                        frame,
                        id,
                        deadline,
                    }
                }
            };
            machine.handle_input(now, input)
        });
    }

    /// The next instant the link has work to do: its machine's deadline, the lanes' recheck
    /// (see [`Slot::take_intake`]), the bound of a closed connection's frames waiting for the
    /// application.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        [
            self.machine.poll_timeout(),
            self.lane_recheck,
            self.release_at,
            self.sink.next_expiry(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Events wait for the application to make room: the reader is behind.
    pub(super) fn is_behind(&self) -> bool {
        self.sink.is_behind()
    }

    /// The sources of the link's snapshot now.
    fn sources(&self, now: Instant) -> Sources {
        Sources {
            machine: self.machine.metrics(now),
            events_dropped: self.sink.dropped(),
            unread: self.sink.unread(),
            given_back: 0,
            stopped: false,
        }
    }

    /// The link's snapshot now, as its handles, its pool's view and the metrics export see it.
    pub(super) fn snapshot(&self, now: Instant) -> Metrics {
        self.sources(now).compose(&self.shared.intake)
    }

    /// Carries out the machine's actions.
    fn carry_out(&mut self, now: Instant) {
        while let Some(action) = self.machine.poll_action() {
            match action {
                Action::Emit(ev) => self.deliver(ev),
                Action::Connect { generation, addr } => self.connect(now, generation, addr),
                Action::Send(mut bytes) => {
                    if let Some((rid, _)) = &self.rid {
                        self.socket_quiet = false;
                        let _ = send_batch(&mut self.socket, rid, &mut bytes);
                    }
                }
                Action::Disconnect => {
                    // A lost connection's queued messages must be dropped, not flushed by
                    // libzmq's own redial during the linger period to the next connection.
                    // Only a close keeps the linger, to flush.
                    let lost = self.machine.state() != State::Closed;
                    self.disconnect_with(lost)
                }
                Action::Resolve {
                    generation,
                    host,
                    port,
                } => self.resolve(host, port, Lookup::Dial(generation)),
                Action::Refresh {
                    endpoint,
                    host,
                    port,
                } => self.resolve(host, port, Lookup::Refresh(endpoint)),
                Action::Stop => self.stopped = Some(now),
                Action::Answer(token, outcome) => {
                    if let Some(p) = self.promises.remove(&token) {
                        p.fill(outcome);
                    }
                }
                Action::Flushed(token, outcome) => {
                    if let Some(p) = self.flushes.remove(&token) {
                        p.fill(outcome);
                    }
                }
            }
        }
    }

    /// Hands a name to the resolver pool; the answer comes back as a command.
    fn resolve(&self, host: String, port: u16, lookup: Lookup) {
        let (post, shared) = (self.post.clone(), self.shared.clone());
        let reply = move |result, took: Option<Duration>| {
            // Before the answer: the link judges whether a resolver of the application's was
            // slow.
            if let Some(took) = took {
                let callback = Callback::Resolver;
                post(Command::CallbackTook { callback, took });
            }
            if post(Command::Resolved { lookup, result }) {
                shared.wake();
            }
        };
        resolver::resolve(self.resolver.clone(), host, port, Box::new(reply));
    }

    fn connect(&mut self, now: Instant, generation: u64, addr: SocketAddr) {
        self.disconnect_with(true);
        self.socket_quiet = false;
        // A fresh routing id per dial, never reused (reuse can abort libzmq).
        let mut id = [b'R'; 9];
        id[1..].copy_from_slice(&generation.to_be_bytes());
        let rid = Rid::new(&id);
        let endpoint = fmt_addr(addr);
        let result = ffi::set_bytes_option(&mut self.socket, zmq_sys::ZMQ_CONNECT_ROUTING_ID, &rid)
            .and_then(|_| self.socket.connect(&endpoint));
        match result {
            Ok(()) => {
                self.rid = Some((rid, generation));
                self.endpoint = Some(endpoint);
                self.dialed = Some(addr);
            }
            Err(e) => {
                self.deliver(Event::Error(LinkError::Zmq {
                    call: "connect",
                    message: e.to_string(),
                }));
                self.machine
                    .handle_input(now, Input::ConnectFailed { generation });
            }
        }
    }

    fn disconnect(&mut self) {
        self.disconnect_with(false)
    }

    /// Stops the current dial. With `discard`, libzmq drops what it still holds for the
    /// connection (ZMQ_LINGER is read when the endpoint's session is terminated).
    fn disconnect_with(&mut self, discard: bool) {
        if let Some(endpoint) = self.endpoint.take() {
            self.socket_quiet = false;
            if discard {
                let _ = self.socket.set_linger(0);
            }
            match self.socket.disconnect(&endpoint) {
                Ok(()) | Err(zmq::Error::ENOENT) => {}
                Err(e) => log::warn!(
                    "relink[{}]: disconnect {endpoint} failed: {e}",
                    self.machine.name()
                ),
            }
            if discard {
                let _ = self.socket.set_linger(ms(self.linger));
            }
        }
        self.rid = None;
        self.dialed = None;
        self.conn = None;
        self.connected = false;
        self.monitor_up = false;
    }

    /// Writes up to the budget; returns true when the budget ran out with batches left.
    fn transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        for _ in 0..WRITE_BUDGET {
            if self.transmit_one(now, buf) != Some(TxResult::Sent) {
                return false;
            }
        }
        true
    }

    /// Builds and writes the next batch; `None` when there was nothing to write.
    fn transmit_one(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<TxResult> {
        if !self.machine.poll_transmit(now, buf) {
            // A batch that could not be built (the framing panicked) leaves actions behind.
            self.carry_out(now);
            return None;
        }
        let result = match &self.rid {
            None => TxResult::Unreachable,
            Some((rid, _)) => {
                // The batch moves into the zmq message without a copy; the next one
                // starts with room for a whole batch, in a buffer libzmq gave back if
                // there is one (the thread's one buffer: an idle link holds none). A
                // small batch is copied instead and the thread's buffer kept
                // (`socket::COPIED_MAX`).
                let small = buf.len() <= COPIED_MAX;
                let mut data = if small {
                    std::mem::take(buf)
                } else {
                    std::mem::replace(buf, buffers::take(self.batch_cap))
                };
                // Frames will wait for acknowledgement: the duplicate descriptor is open
                // before libzmq can write them, so a drop still gets its last reading. A
                // batch of control frames alone (a heartbeat's ping) waits for nothing and
                // takes no duplicate (four system calls: two addresses, a dup, a close).
                if self.machine.holds_frames() {
                    if let Some(conn) = &mut self.conn {
                        conn.hold();
                    }
                }
                self.socket_quiet = false;
                let result = send_batch(&mut self.socket, rid, &mut data);
                if !data.is_empty() {
                    self.machine.transmit_unsent(data);
                    if small {
                        *buf = buffers::take(self.batch_cap);
                    }
                } else if small {
                    *buf = data;
                }
                result
            }
        };
        self.machine.transmit_done(now, result);
        self.carry_out(now);
        Some(result)
    }

    pub(super) fn deliver(&mut self, ev: Event) {
        if let Event::State(t) = &ev {
            // Published before the event can be seen: `state()` is never older than it.
            self.published_state = t.to as u8;
            self.shared.state.store(t.to as u8, Ordering::Release);
        }
        if let (Some(l), Event::Abandoned { frame, reason }) = (&mut self.ledger, &ev) {
            l.abandoned(frame, *reason, self.machine.state() == State::Closed);
        }
        if self.sink.push(ev) {
            self.set_reader_waiting(true);
        }
    }

    fn flush_events(&mut self) {
        if self.sink.flush() {
            self.set_reader_waiting(false);
        }
    }

    fn set_reader_waiting(&mut self, waiting: bool) {
        if self.reader_waiting != waiting {
            self.reader_waiting = waiting;
            self.shared.reader_waiting.store(waiting, Ordering::SeqCst);
            self.machine
                .handle_input(Instant::now(), Input::ReadPaused(waiting));
            if waiting {
                log::debug!(
                    "relink[{}]: the application is not taking events; reading paused",
                    self.machine.name()
                );
            }
        }
    }

    fn publish(&mut self) {
        let state = self.machine.state() as u8;
        if state != self.published_state {
            self.published_state = state;
            self.shared.state.store(state, Ordering::Release);
        }
        let (frames, bytes) = self.machine.released();
        let df = (frames - self.released.0) as usize;
        let db = (bytes - self.released.1) as usize;
        self.released = (frames, bytes);
        self.shared.intake.release(df, db);
        if let Some(l) = &mut self.ledger {
            l.confirmed_total(self.machine.confirmed());
            // The spool's disk, full or writable again.
            for e in l.news() {
                self.deliver(Event::Error(e));
            }
        }
        self.notify_delivered();
    }

    /// Wakes the link's receivers if events went into the channel since the last call: after
    /// the sends, as a receiver registers and then looks at the channel, so it cannot miss
    /// them. After the pass's read and at its end.
    fn notify_delivered(&mut self) {
        if self.sink.take_delivered() {
            self.shared.arrived.notify(usize::MAX);
        }
    }

    /// The end of a stopped link, once its commands are taken: final snapshot, leftover
    /// events, sockets closed (libzmq keeps the linger, bounded, on its own thread).
    pub(super) fn shutdown(mut self, now: Instant) {
        self.carry_out(now);
        self.publish();
        // The spool closes with the link, before its events end: whoever holds a clone of the
        // link's events, its lock is let go and its acks written.
        if let Some(store) = &self.shared.spool {
            store.shut();
        }
        *self.shared.final_sources() = Some(self.sources(now));
        self.flush_events();
        self.shared
            .leftover
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(self.sink.drain());
        self.disconnect();
        ffi::stop_monitor(&mut self.socket);
        drop(self.monitor);
        drop(self.socket);
        self.shared
            .state
            .store(State::Closed as u8, Ordering::Release);
        if self.monitor_mismatch > 0 {
            log::debug!(
                "relink[{}]: {} monitor events disagreed with the stream notifications",
                self.machine.name(),
                self.monitor_mismatch
            );
        }
        // Wake any sender waiting for room: the link is closed.
        self.shared.intake.wake_waiters();
    }

    /// The loop panicked (a bug in relink, not application code: that is guarded where it is
    /// called). The machine may be half-way through a step, so it is not driven again: the
    /// link is closed as it stands. New frames are refused; frames still on their way are
    /// given back as abandoned (`shutdown`); the application gets what events were waiting,
    /// then an [`LinkError::IoThreadPanicked`], then the end of the stream; the final metrics
    /// are the machine's last counters with state Closed.
    pub(super) fn stop_after_panic(
        mut self,
        now: Instant,
        message: Option<String>,
        late: Vec<bytes::Bytes>,
    ) {
        log::error!(
            "relink[{}]: the IO thread panicked serving the link ({}); the link is closed",
            self.machine.name(),
            message.as_deref().unwrap_or("no message")
        );
        let machine = &self.machine;
        let counters = catch_unwind(AssertUnwindSafe(|| machine.metrics(now)))
            .unwrap_or_else(|_| Metrics::empty(State::Closed));
        *self.shared.final_sources() = Some(Sources {
            machine: counters,
            events_dropped: self.sink.dropped(),
            unread: self.sink.unread(),
            given_back: late.len() as u64,
            stopped: true,
        });
        {
            let mut leftover = self
                .shared
                .leftover
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            leftover.extend(self.sink.drain());
            leftover.push_back(Event::Error(LinkError::IoThreadPanicked { message }));
            leftover.extend(late.into_iter().map(|frame| Event::Abandoned {
                frame,
                reason: crate::event::AbandonReason::Shutdown,
            }));
        }
        self.shared
            .state
            .store(State::Closed as u8, Ordering::Release);
        self.disconnect_with(true);
        ffi::stop_monitor(&mut self.socket);
        // Dropping `self` closes the sockets and the events channel: receivers get the
        // leftover events, then an error.
    }
}

/// A connection's routing id, held inside the slot when it is short (relink's own are 9
/// bytes, those libzmq makes 5): reading a message's id or sending one reads no allocation of
/// its own, which on a quiet link is a cache line fetched from memory.
#[derive(Clone, Debug)]
enum Rid {
    Inline { len: u8, bytes: [u8; RID_INLINE] },
    Heap(Vec<u8>),
}

/// The longest routing id [`Rid`] holds inline.
const RID_INLINE: usize = 22;

impl Rid {
    fn new(id: &[u8]) -> Rid {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= RID_INLINE => {
                let mut bytes = [0; RID_INLINE];
                bytes[..id.len()].copy_from_slice(id);
                Rid::Inline { len, bytes }
            }
            _ => Rid::Heap(id.to_vec()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Rid::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Rid::Heap(id) => id,
        }
    }
}

impl std::ops::Deref for Rid {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Leaves the shared state Closed when the link's slot goes, however it goes: new frames
/// refused, `state()` Closed, a final snapshot that says Closed, and every sender blocked on
/// room woken. (The events channel closes with the slot's `Sink`, which holds its sender.)
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let shared = &*self.0;
        shared.closed.store(true, Ordering::SeqCst);
        shared.state.store(State::Closed as u8, Ordering::Release);
        // Frames still in the intake (the loop stopped outside this link) are given back.
        let late = shared.close_intake().into_frames();
        {
            let mut kept = shared.final_sources();
            let sources = kept.get_or_insert_with(|| Sources::empty(State::Closed));
            sources.stopped = true;
            sources.given_back += late.len() as u64;
        }
        if !late.is_empty() {
            shared
                .leftover
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(late.into_iter().map(|frame| Event::Abandoned {
                    frame,
                    reason: crate::event::AbandonReason::Shutdown,
                }));
        }
        // However the link ended, its spool closes with it (already, after `Slot::shutdown`).
        if let Some(store) = &shared.spool {
            store.shut();
        }
        // The events channel is closed (the sink went first) and the final snapshot's sources
        // are kept: async closers and receivers can finish.
        shared.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::Rid;

    #[test]
    fn a_routing_id_reads_back_as_it_was_made_whatever_its_length() {
        for len in [0, 5, 9, 22, 23, 255] {
            let id: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let rid = Rid::new(&id);
            assert_eq!(rid.as_slice(), &id[..], "length {len}");
            assert_eq!(matches!(rid, Rid::Inline { .. }), len <= 22, "length {len}");
        }
    }
}
