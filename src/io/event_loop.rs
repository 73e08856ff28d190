//! The IO thread: the only code that calls zmq or reads the clock.
//!
//! Each pass: wait in `zmq::poll` on the STREAM socket, its monitor and the eventfd, until the
//! machine's next deadline; read `now` once; translate what arrived (routing-id toggles, data,
//! monitor events, commands) into machine inputs; carry out the machine's actions; hand it the
//! socket for writing. No business logic lives here.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::context::Context;
use super::ffi;
use super::resolver::{self, Resolver};
use super::shared::{Command, Lookup, Shared};
use super::socket::{apply_options, ms, send_batch, SocketOptions};
use crate::core::fmt_addr;
use crate::core::guard::panic_message;
use crate::core::machine::{Action, Input, Machine, TxResult};
use crate::core::settings::Settings;
use crate::error::{ConfigError, LinkError};
use crate::event::{Event, State};
use crate::metrics::Metrics;

/// What the IO thread needs besides the core's settings.
#[derive(Debug)]
pub(crate) struct IoSettings {
    pub socket: SocketOptions,
    pub resolver: Option<Resolver>,
    pub events_capacity: usize,
}

/// How long the IO thread watches for a command after a busy pass before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// Messages read from the socket per pass before commands and timers get their turn.
const READ_BUDGET: usize = 256;
/// Commands taken per pass.
const COMMAND_BUDGET: usize = 4096;

const EVENT_CONNECTED: u16 = 0x0001;
const EVENT_CONNECT_RETRIED: u16 = 0x0004;
const EVENT_DISCONNECTED: u16 = 0x0200;

/// Builds the sockets on the caller's thread (so that errors reach `build()`), then runs the
/// loop on a thread of its own.
pub(crate) struct IoThread {
    machine: Machine,
    socket: zmq::Socket,
    monitor: zmq::Socket,
    commands: Receiver<Command>,
    reply_tx: Sender<Command>,
    events: Sender<Event>,
    pending: VecDeque<Event>,
    max_pending: usize,
    shared: Arc<Shared>,
    /// Routing id and generation of the current dial.
    rid: Option<(Vec<u8>, u64)>,
    connected: bool,
    /// ZMQ_IMMEDIATE is set: libzmq then names each connection itself and ignores
    /// ZMQ_CONNECT_ROUTING_ID, so the routing id is learnt from the connect notification.
    immediate: bool,
    linger: Duration,
    /// The last routing id learnt that way (its later frames are not a new connection).
    learnt_rid: Option<Vec<u8>>,
    endpoint: Option<String>,
    buf: Vec<u8>,
    batch_cap: usize,
    released: (u64, u64),
    events_dropped: u64,
    /// Events dropped and not yet reported in an `EventsDropped` error.
    dropped_unreported: u64,
    stopped: bool,
    monitor_mismatch: u64,
    resolver: Option<Resolver>,
    /// Keeps the context alive until the sockets are closed (declared last: dropped last).
    _context: Context,
}

impl IoThread {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        settings: Settings,
        io: IoSettings,
        context: Context,
        seed: u64,
        shared: Arc<Shared>,
        commands: Receiver<Command>,
        reply_tx: Sender<Command>,
        events: Sender<Event>,
    ) -> Result<IoThread, ConfigError> {
        static LINK_ID: AtomicU64 = AtomicU64::new(0);
        ffi::seed_libc_rand_once(rand::random());
        let zerr = |what: &str, e: zmq::Error| ConfigError::Zmq(format!("{what}: {e}"));
        let mut socket = context
            .raw
            .socket(zmq::STREAM)
            .map_err(|e| zerr("socket", e))?;
        apply_options(&mut socket, &io.socket).map_err(ConfigError::Zmq)?;
        let id = LINK_ID.fetch_add(1, Ordering::Relaxed);
        let addr = format!("inproc://relink-monitor-{}-{id}", std::process::id());
        socket
            .monitor(&addr, zmq::SocketEvent::ALL as i32)
            .map_err(|e| zerr("monitor", e))?;
        let monitor = context
            .raw
            .socket(zmq::PAIR)
            .map_err(|e| zerr("monitor socket", e))?;
        monitor
            .set_linger(0)
            .map_err(|e| zerr("monitor linger", e))?;
        monitor
            .connect(&addr)
            .map_err(|e| zerr("monitor connect", e))?;
        // Room for the state events of a long outage and for every frame the outbox can give back
        // at once (a close abandons them all): nothing is trimmed short of that.
        let max_pending = io
            .events_capacity
            .saturating_mul(4)
            .max(4096)
            .saturating_add(settings.outbox_frames);
        let resolver = io.resolver;
        let immediate = io.socket.immediate;
        let linger = io.socket.linger;
        // Room for a batch's TLS records too (about 22 bytes per 16 KiB record).
        let batch_cap =
            settings.batch_bytes.min(1 << 20) + 64 + settings.batch_bytes.min(1 << 20) / 256;
        let machine = Machine::new(settings, seed, Instant::now());
        Ok(IoThread {
            machine,
            socket,
            monitor,
            commands,
            reply_tx,
            events,
            pending: VecDeque::new(),
            max_pending,
            shared,
            rid: None,
            connected: false,
            immediate,
            linger,
            learnt_rid: None,
            endpoint: None,
            buf: Vec::with_capacity(batch_cap),
            batch_cap,
            released: (0, 0),
            events_dropped: 0,
            dropped_unreported: 0,
            stopped: false,
            monitor_mismatch: 0,
            resolver,
            _context: context,
        })
    }

    /// Runs the link until it is closed. Never unwinds: application code is guarded where it is
    /// called, and if the loop itself panics (a bug in relink) the link is closed here and the
    /// handles are told (see [`IoThread::stop_after_panic`]). Whatever happens, a [`StopGuard`]
    /// leaves the shared state Closed when this returns.
    pub(crate) fn run(mut self) {
        let _stop = StopGuard(self.shared.clone());
        let outcome = catch_unwind(AssertUnwindSafe(|| self.run_loop()));
        let finish = catch_unwind(AssertUnwindSafe(move || match outcome {
            Ok(()) => self.shutdown(),
            Err(payload) => self.stop_after_panic(panic_message(payload.as_ref())),
        }));
        if let Err(payload) = finish {
            log::error!(
                "relink: the IO thread panicked while stopping: {}",
                panic_message(payload.as_ref()).unwrap_or_default()
            );
        }
    }

    fn run_loop(&mut self) {
        self.machine.handle_input(Instant::now(), Input::Start);
        self.carry_out(Instant::now());
        let mut busy = false;
        while !self.stopped {
            if busy {
                // Right after traffic the application often answers within microseconds:
                // look at the command queue for a moment before paying for a sleep and a
                // wake-up. Bounded, and only after a pass that moved data.
                let until = Instant::now() + SPIN;
                while self.commands.is_empty() && Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            self.shared.sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let timeout = self.poll_timeout_ms();
            let reading = self.pending.is_empty();
            let (socket_in, monitor_in, woken) = {
                let mut items = [
                    self.socket.as_poll_item(if reading {
                        zmq::POLLIN
                    } else {
                        zmq::PollEvents::empty()
                    }),
                    self.monitor.as_poll_item(zmq::POLLIN),
                    zmq::PollItem::from_fd(self.shared.waker.raw(), zmq::POLLIN),
                ];
                match zmq::poll(&mut items, timeout) {
                    Ok(_) => (
                        items[0].is_readable(),
                        items[1].is_readable(),
                        items[2].is_readable(),
                    ),
                    Err(zmq::Error::EINTR) => (false, false, false),
                    Err(e) => {
                        log::error!("relink: zmq poll failed: {e}");
                        (false, false, false)
                    }
                }
            };
            self.shared.sleeping.store(false, Ordering::SeqCst);
            let now = Instant::now();
            if woken {
                self.shared.waker.drain();
                self.shared.wake_pending.swap(false, Ordering::AcqRel);
            }
            let before = self.machine.traffic();
            self.flush_events();
            if monitor_in {
                self.read_monitor(now);
            }
            if socket_in && self.pending.is_empty() {
                self.read_socket(now);
            }
            self.take_commands(now);
            self.machine.handle_timeout(now);
            self.carry_out(now);
            self.transmit(now);
            self.publish();
            busy = self.machine.traffic() != before;
        }
    }

    fn poll_timeout_ms(&self) -> i64 {
        if !self.commands.is_empty() {
            return 0;
        }
        match self.machine.poll_timeout() {
            None => -1,
            Some(t) => {
                let now = Instant::now();
                if t <= now {
                    0
                } else {
                    // Round up: waking early only costs another pass.
                    let d = t - now;
                    (d.as_micros().div_ceil(1000)).min(i64::MAX as u128) as i64
                }
            }
        }
    }

    fn read_monitor(&mut self, now: Instant) {
        while let Ok(head) = self.monitor.recv_msg(zmq::DONTWAIT) {
            let mut endpoint = None;
            while self.monitor.get_rcvmore().unwrap_or(false) {
                match self.monitor.recv_msg(zmq::DONTWAIT) {
                    Ok(m) => endpoint = Some(m),
                    Err(_) => break,
                }
            }
            if head.len() < 6 {
                continue;
            }
            let event = u16::from_ne_bytes([head[0], head[1]]);
            let value = u32::from_ne_bytes([head[2], head[3], head[4], head[5]]);
            let ours = match (&endpoint, &self.endpoint) {
                (Some(e), Some(active)) => e.as_str() == Some(active.as_str()),
                _ => false,
            };
            log::trace!("relink: monitor event {event:#06x} value {value} ours={ours}");
            if !ours {
                continue;
            }
            let Some((_, generation)) = self.rid else {
                continue;
            };
            match event {
                EVENT_CONNECT_RETRIED if !self.connected => {
                    self.machine
                        .handle_input(now, Input::ConnectFailed { generation });
                    self.carry_out(now);
                }
                EVENT_DISCONNECTED
                    if self.connected && (self.immediate || !self.pending.is_empty()) =>
                {
                    // With ZMQ_IMMEDIATE libzmq drops the pipe, and the disconnect
                    // notification queued in it: only the monitor tells. And while reading
                    // is paused the notification waits behind unread data, and libzmq's own
                    // redial would hand the queue to a new connection: act on the monitor.
                    self.connected = false;
                    self.machine
                        .handle_input(now, Input::Disconnected { generation });
                    self.carry_out(now);
                }
                EVENT_CONNECTED | EVENT_DISCONNECTED => {
                    // Cross-check: the routing-id toggles are the source of truth; a monitor
                    // event that disagrees with them is counted and logged.
                    let says_up = event == EVENT_CONNECTED;
                    if says_up == self.connected {
                        continue;
                    }
                    self.monitor_mismatch += 1;
                    log::trace!(
                        "relink: monitor says {} before the stream notification",
                        if says_up { "connected" } else { "disconnected" }
                    );
                }
                _ => {}
            }
        }
    }

    fn read_socket(&mut self, now: Instant) {
        for _ in 0..READ_BUDGET {
            let rid = match self.socket.recv_msg(zmq::DONTWAIT) {
                Ok(m) => m,
                Err(zmq::Error::EAGAIN) => return,
                Err(e) => {
                    log::error!("relink: zmq recv failed: {e}");
                    return;
                }
            };
            if !self.socket.get_rcvmore().unwrap_or(false) {
                continue;
            }
            let data = match self.socket.recv_msg(0) {
                Ok(m) => m,
                Err(e) => {
                    log::error!("relink: zmq recv failed: {e}");
                    return;
                }
            };
            let learn = self.immediate
                && !self.connected
                && data.is_empty()
                && self.learnt_rid.as_deref() != Some(&rid[..]);
            let generation = match &mut self.rid {
                Some((r, g)) if r.as_slice() == &rid[..] => *g,
                Some((r, g)) if learn => {
                    *r = rid.to_vec();
                    self.learnt_rid = Some(rid.to_vec());
                    *g
                }
                _ => {
                    log::trace!(
                        "relink: {} bytes from a stale connection dropped",
                        data.len()
                    );
                    continue;
                }
            };
            if data.is_empty() {
                // STREAM_NOTIFY: an empty frame toggles between connected and disconnected.
                self.connected = !self.connected;
                let input = if self.connected {
                    Input::Connected { generation }
                } else {
                    Input::Disconnected { generation }
                };
                self.machine.handle_input(now, input);
            } else {
                self.machine.handle_data(now, generation, &data);
            }
            self.carry_out(now);
            if !self.pending.is_empty() {
                return;
            }
        }
    }

    fn take_commands(&mut self, now: Instant) {
        for _ in 0..COMMAND_BUDGET {
            let Ok(cmd) = self.commands.try_recv() else {
                break;
            };
            self.command(now, cmd);
        }
    }

    fn command(&mut self, now: Instant, cmd: Command) {
        let input = match cmd {
            Command::Send { frame, deadline } => Input::Submit { frame, deadline },
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
                let _ = reply.send(self.snapshot(now));
                return;
            }
            Command::PanicForTests => panic!("IO thread panic requested by a test"),
        };
        self.machine.handle_input(now, input);
    }

    fn snapshot(&self, now: Instant) -> Metrics {
        let mut m = self.machine.metrics(now);
        m.events_dropped = self.events_dropped;
        m
    }

    /// Carries out the machine's actions.
    fn carry_out(&mut self, now: Instant) {
        while let Some(action) = self.machine.poll_action() {
            match action {
                Action::Emit(ev) => self.deliver(ev),
                Action::Connect { generation, addr } => self.connect(now, generation, addr),
                Action::Send(mut bytes) => {
                    if let Some((rid, _)) = &self.rid {
                        let _ = send_batch(&self.socket, rid, &mut bytes);
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
                Action::Stop => self.stopped = true,
            }
        }
    }

    /// Hands a name to the resolver pool; the answer comes back as a command.
    fn resolve(&self, host: String, port: u16, lookup: Lookup) {
        resolver::resolve(
            self.resolver.clone(),
            host,
            port,
            lookup,
            self.reply_tx.clone(),
            self.shared.clone(),
        );
    }

    fn connect(&mut self, now: Instant, generation: u64, addr: SocketAddr) {
        self.disconnect_with(true);
        // A fresh routing id per dial, never reused (reuse can abort libzmq).
        let mut rid = Vec::with_capacity(9);
        rid.push(b'R');
        rid.extend_from_slice(&generation.to_be_bytes());
        let endpoint = fmt_addr(addr);
        let result = ffi::set_bytes_option(&mut self.socket, zmq_sys::ZMQ_CONNECT_ROUTING_ID, &rid)
            .and_then(|_| self.socket.connect(&endpoint));
        match result {
            Ok(()) => {
                self.rid = Some((rid, generation));
                self.endpoint = Some(endpoint);
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
            if discard {
                let _ = self.socket.set_linger(0);
            }
            match self.socket.disconnect(&endpoint) {
                Ok(()) | Err(zmq::Error::ENOENT) => {}
                Err(e) => log::warn!("relink: disconnect {endpoint} failed: {e}"),
            }
            if discard {
                let _ = self.socket.set_linger(ms(self.linger));
            }
        }
        self.rid = None;
        self.connected = false;
    }

    fn transmit(&mut self, now: Instant) {
        while self.machine.poll_transmit(now, &mut self.buf) {
            let result = match &self.rid {
                None => TxResult::Unreachable,
                Some((rid, _)) => {
                    // The batch moves into the zmq message without a copy; the next one
                    // starts with room for a whole batch.
                    let mut data =
                        std::mem::replace(&mut self.buf, Vec::with_capacity(self.batch_cap));
                    let result = send_batch(&self.socket, rid, &mut data);
                    if !data.is_empty() {
                        self.machine.transmit_unsent(data);
                    }
                    result
                }
            };
            self.machine.transmit_done(now, result);
            self.carry_out(now);
            if result != TxResult::Sent {
                break;
            }
        }
        // A batch that could not be built (the codec panicked) leaves actions behind.
        self.carry_out(now);
    }

    fn deliver(&mut self, ev: Event) {
        if let Event::State(t) = &ev {
            // Published before the event can be seen: `state()` is never older than it.
            self.shared.state.store(t.to as u8, Ordering::Release);
        }
        if self.pending.is_empty() {
            match self.events.try_send(ev) {
                Ok(()) => return,
                Err(TrySendError::Full(ev)) | Err(TrySendError::Disconnected(ev)) => {
                    self.pending.push_back(ev)
                }
            }
        } else {
            self.pending.push_back(ev);
        }
        if self.pending.len() > self.max_pending {
            // The application is not reading events. Frames are bounded by the read stop and
            // never dropped; state and error events go first, abandoned frames last (they stay
            // counted in the metrics either way).
            let victim = self
                .pending
                .iter()
                .position(|e| matches!(e, Event::State(_) | Event::Error(_)))
                .or_else(|| {
                    self.pending
                        .iter()
                        .position(|e| matches!(e, Event::Abandoned { .. }))
                });
            if let Some(i) = victim {
                self.pending.remove(i);
                self.events_dropped += 1;
                self.dropped_unreported += 1;
            }
        }
        self.set_reader_waiting(true);
    }

    fn flush_events(&mut self) {
        while let Some(ev) = self.pending.pop_front() {
            match self.events.try_send(ev) {
                Ok(()) => {}
                Err(TrySendError::Full(ev)) | Err(TrySendError::Disconnected(ev)) => {
                    self.pending.push_front(ev);
                    break;
                }
            }
        }
        if self.pending.is_empty() && self.dropped_unreported > 0 {
            let report = Event::Error(LinkError::EventsDropped(self.dropped_unreported));
            if self.events.try_send(report).is_ok() {
                self.dropped_unreported = 0;
            }
        }
        if self.pending.is_empty() {
            self.set_reader_waiting(false);
        }
    }

    fn set_reader_waiting(&mut self, waiting: bool) {
        let was = self.shared.reader_waiting.swap(waiting, Ordering::SeqCst);
        if was != waiting {
            self.machine
                .handle_input(Instant::now(), Input::ReadPaused(waiting));
            if waiting {
                log::debug!("relink: the application is not taking events; reading paused");
            }
        }
    }

    fn publish(&mut self) {
        self.shared
            .state
            .store(self.machine.state() as u8, Ordering::Release);
        let (frames, bytes) = self.machine.released();
        let df = (frames - self.released.0) as usize;
        let db = (bytes - self.released.1) as usize;
        self.released = (frames, bytes);
        self.shared.release(df, db);
    }

    fn shutdown(mut self) {
        let now = Instant::now();
        // Refuse new frames, then wait for the senders already past the check.
        self.shared.closed.store(true, Ordering::SeqCst);
        let until = now + Duration::from_secs(1);
        while self.shared.sending.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::yield_now();
        }
        while let Ok(cmd) = self.commands.try_recv() {
            self.command(now, cmd);
        }
        self.carry_out(now);
        self.publish();
        let snapshot = self.snapshot(now);
        *self
            .shared
            .final_metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(snapshot);
        self.flush_events();
        self.shared
            .leftover
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(self.pending.drain(..));
        self.disconnect();
        ffi::stop_monitor(&mut self.socket);
        drop(self.monitor);
        drop(self.socket);
        self.shared
            .state
            .store(State::Closed as u8, Ordering::Release);
        if self.monitor_mismatch > 0 {
            log::debug!(
                "relink: {} monitor events disagreed with the stream notifications",
                self.monitor_mismatch
            );
        }
        // Wake any sender blocked on room: the link is closed.
        let _g = self.shared.room.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.room_cv.notify_all();
    }

    /// The loop panicked (a bug in relink, not application code: that is guarded where it is
    /// called). The machine may be half-way through a step, so it is not driven again: the
    /// link is closed as it stands. New frames are refused; frames still on their way are
    /// given back as abandoned (`shutdown`); the application gets what events were waiting,
    /// then an [`LinkError::IoThreadPanicked`], then the end of the stream; the final metrics
    /// are the machine's last counters with state Closed.
    fn stop_after_panic(mut self, message: Option<String>) {
        log::error!(
            "relink: the IO thread panicked ({}); the link is closed",
            message.as_deref().unwrap_or("no message")
        );
        let now = Instant::now();
        self.shared.closed.store(true, Ordering::SeqCst);
        let until = now + Duration::from_secs(1);
        while self.shared.sending.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::yield_now();
        }
        let mut late = Vec::new();
        while let Ok(cmd) = self.commands.try_recv() {
            // A metrics request is answered by the final snapshot once its reply channel is
            // dropped here.
            if let Command::Send { frame, .. } = cmd {
                late.push(frame);
            }
        }
        let machine = &self.machine;
        let mut snapshot = catch_unwind(AssertUnwindSafe(|| machine.metrics(now)))
            .unwrap_or_else(|_| Metrics::empty(State::Closed));
        snapshot.state = State::Closed;
        snapshot.events_dropped = self.events_dropped;
        snapshot.frames_submitted += late.len() as u64;
        snapshot.abandoned.shutdown += late.len() as u64;
        *self
            .shared
            .final_metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(snapshot);
        {
            let mut leftover = self
                .shared
                .leftover
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            leftover.extend(self.pending.drain(..));
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

/// Leaves the shared state Closed when the IO thread ends, however it ends: new frames
/// refused, `state()` Closed, a final snapshot that says Closed, and every sender blocked on
/// room woken. (The events channel closes with the `IoThread` that holds its sender.)
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let shared = &*self.0;
        shared.closed.store(true, Ordering::SeqCst);
        shared.state.store(State::Closed as u8, Ordering::Release);
        {
            let mut m = shared
                .final_metrics
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            m.get_or_insert_with(|| Metrics::empty(State::Closed)).state = State::Closed;
        }
        let _g = shared.room.lock().unwrap_or_else(|e| e.into_inner());
        shared.room_cv.notify_all();
    }
}
