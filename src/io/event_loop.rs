//! An IO thread's loop: the only code that calls zmq or reads the clock. One loop serves a set
//! of links, one or thousands; a link never waits for another.
//!
//! Each pass: wait in epoll on the thread's eventfd and on the ZMQ_FD of every link's STREAM
//! socket and monitor, until the earliest deadline of the thread's timer heap; read `now` once;
//! take the commands of the thread's channel; then serve each link that has something to do
//! (a socket that signalled, a command, a due deadline, input left over from the last pass, a
//! reader that was behind): translate what arrived (routing-id toggles, data, monitor events)
//! into machine inputs, carry out the machine's actions, hand it the socket for writing. No
//! business logic lives here.
//!
//! ZMQ_FD is edge-like: it signals that libzmq has commands to process, not that a message is
//! waiting. So every time a link is served its sockets are read until EAGAIN or the link's
//! budget, and afterwards ZMQ_EVENTS is asked (which processes libzmq's pending commands, a
//! disconnect's among them): a link whose socket still has input is served again next pass.
//! Budgets per link per pass (messages read, batches written) keep one busy link from starving
//! the others on its thread.
//!
//! The loop also measures its own lateness: it knows the deadline it slept to and how long its
//! last pass took. When the two together left its links unserved for [`LATE`] or more (the
//! process was stopped or got no CPU, or a slow callback held the thread), every link is told
//! so (`Input::Resumed`) before anything is read or any timer fires, and the core gives the
//! peers a fresh chance instead of a verdict.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::view::PoolView;

use super::answer::Promise;
use super::context::Context;
use super::ffi::{self, Epoll, Ready};
use super::resolver::{self, Resolver};
use super::shared::{Command, Lookup, Shared, Wake};
use super::socket::{apply_options, ms, send_batch, SocketOptions};
use super::stopwatch::{self, CallClock};
use crate::core::fmt_addr;
use crate::core::guard::panic_message;
use crate::core::machine::{Action, Input, Machine, TxResult};
use crate::core::requests::Token;
use crate::core::settings::Settings;
use crate::error::{Callback, ConfigError, LinkError};
use crate::event::{Event, State};
use crate::metrics::Metrics;

/// What the IO thread needs besides the core's settings.
#[derive(Debug)]
pub(crate) struct IoSettings {
    pub socket: SocketOptions,
    pub resolver: Option<Resolver>,
    pub events_capacity: usize,
}

/// How long the IO thread watches for a command or input after a busy pass before it sleeps,
/// giving its core away between looks.
const SPIN: Duration = Duration::from_micros(30);

/// Messages read from one link's socket per pass before the other links get their turn.
const READ_BUDGET: usize = 256;
/// Batches written for one link per pass.
const WRITE_BUDGET: usize = 16;
/// Commands taken per pass (all links of the thread together).
const COMMAND_BUDGET: usize = 1024;
/// Readiness reports taken per wait.
const REPORTS: usize = 256;
/// A gap this long in the loop's service (woken late, or a long pass) is told to every link.
const LATE: Duration = Duration::from_millis(50);
/// The loop says at warn that it was late at most once per period.
const LATE_WARN_PERIOD: Duration = Duration::from_secs(10);

const EVENT_CONNECTED: u16 = 0x0001;
const EVENT_CONNECT_RETRIED: u16 = 0x0004;
const EVENT_DISCONNECTED: u16 = 0x0200;

/// The token of the thread's eventfd; a link's sockets use `id * 2` and `id * 2 + 1`.
const WAKE_TOKEN: u64 = u64::MAX;

/// What an IO thread's channel carries: a new link, or a command for one of its links.
#[derive(Debug)]
pub(crate) enum Msg {
    /// A link built on the caller's thread, moved to the IO thread that serves it.
    Register(Box<Slot>),
    /// A command for the link with this id.
    Link(u64, Command),
    /// The thread's part of a pool view, with the `top` worst links of each list.
    View { top: usize, reply: Sender<PoolView> },
    /// Every link of the thread: id, name and snapshot (the metrics export).
    #[cfg(feature = "metrics")]
    Rows(Sender<Vec<LinkRow>>),
}

/// One link as the metrics export sees it: its id, its name and its snapshot.
#[cfg(feature = "metrics")]
pub(crate) type LinkRow = (u64, std::sync::Arc<str>, Metrics);

/// The way to one link on its IO thread: the thread's channel and the link's id.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub id: u64,
    pub tx: Sender<Msg>,
}

impl Route {
    /// Queues a command for the link (the caller wakes the thread).
    pub(crate) fn send(&self, cmd: Command) -> Result<(), crossbeam_channel::SendError<Command>> {
        self.tx
            .send(Msg::Link(self.id, cmd))
            .map_err(|crossbeam_channel::SendError(m)| match m {
                Msg::Link(_, cmd) => crossbeam_channel::SendError(cmd),
                _ => unreachable!("a command was sent"),
            })
    }
}

/// One link as its IO thread holds it: its machine, its sockets, its undelivered events.
/// Built on the caller's thread (so that errors reach `build()`), then moved to the thread.
pub(crate) struct Slot {
    route: Route,
    machine: Machine,
    socket: zmq::Socket,
    monitor: zmq::Socket,
    socket_fd: i32,
    monitor_fd: i32,
    events: Sender<Event>,
    /// Events went into the channel since the last `publish`: async receivers are woken then.
    delivered: Cell<bool>,
    events_capacity: usize,
    pending: VecDeque<Event>,
    max_pending: usize,
    shared: Arc<Shared>,
    /// Routing id and generation of the current dial.
    rid: Option<(Vec<u8>, u64)>,
    /// The address of the current dial.
    dialed: Option<SocketAddr>,
    /// The TCP connection of the current dial, as the monitor reported it: its
    /// acknowledgements confirm frames.
    conn: Option<ffi::TcpConn>,
    connected: bool,
    /// ZMQ_IMMEDIATE is set: libzmq then names each connection itself and ignores
    /// ZMQ_CONNECT_ROUTING_ID, so the routing id is learnt from the connect notification.
    immediate: bool,
    linger: Duration,
    /// The last routing id learnt that way (its later frames are not a new connection).
    learnt_rid: Option<Vec<u8>>,
    endpoint: Option<String>,
    batch_cap: usize,
    released: (u64, u64),
    events_dropped: u64,
    /// Events dropped and not yet reported in an `EventsDropped` error.
    dropped_unreported: u64,
    /// The machine stopped (when, for the bound on waiting for senders).
    stopped: Option<Instant>,
    monitor_mismatch: u64,
    resolver: Option<Resolver>,
    /// The deadline of this link's entry in the thread's timer heap, if it has one.
    timer_at: Option<Instant>,
    /// Queued to be served in the current or the next pass.
    queued: bool,
    /// Who waits for each outstanding request, by its token.
    promises: HashMap<Token, Promise, ById>,
    next_token: Token,
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
            .field("id", &self.route.id)
            .field("state", &self.machine.state())
            .finish_non_exhaustive()
    }
}

/// What a link's `build()` hands the slot besides the settings.
pub(crate) struct Wiring {
    pub context: Context,
    pub seed: u64,
    pub shared: Arc<Shared>,
    pub route: Route,
    pub events: Sender<Event>,
    pub done: Sender<()>,
}

/// A new link id (process-wide, never reused).
pub(crate) fn next_link_id() -> u64 {
    static LINK_ID: AtomicU64 = AtomicU64::new(0);
    LINK_ID.fetch_add(1, Ordering::Relaxed)
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
    pub(crate) fn new(settings: Settings, io: IoSettings, w: Wiring) -> Result<Slot, ConfigError> {
        ffi::seed_libc_rand_once(rand::random());
        let Wiring {
            context,
            seed,
            shared,
            route,
            events,
            done,
        } = w;
        let zerr = |what: &str, e: zmq::Error| ConfigError::Zmq(format!("{what}: {e}"));
        let mut socket = context
            .raw
            .socket(zmq::STREAM)
            .map_err(|e| build_error("socket", e))?;
        apply_options(&mut socket, &io.socket).map_err(ConfigError::Zmq)?;
        let addr = format!(
            "inproc://relink-monitor-{}-{}",
            std::process::id(),
            route.id
        );
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
        // Room for a batch's TLS records too (about 22 bytes per 16 KiB record).
        let batch_cap =
            settings.batch_bytes.min(1 << 20) + 64 + settings.batch_bytes.min(1 << 20) / 256;
        let mut machine = Machine::new(settings, seed, Instant::now());
        machine.set_stopwatch(Box::new(CallClock));
        let stop = shared.clone();
        Ok(Slot {
            route,
            machine,
            socket,
            monitor,
            socket_fd,
            monitor_fd,
            events,
            delivered: Cell::new(false),
            events_capacity: io.events_capacity,
            pending: VecDeque::new(),
            max_pending,
            shared,
            rid: None,
            connected: false,
            immediate: io.socket.immediate,
            linger: io.socket.linger,
            learnt_rid: None,
            endpoint: None,
            batch_cap,
            released: (0, 0),
            events_dropped: 0,
            dropped_unreported: 0,
            stopped: None,
            monitor_mismatch: 0,
            dialed: None,
            conn: None,
            resolver: io.resolver,
            timer_at: None,
            queued: false,
            promises: HashMap::default(),
            next_token: 0,
            _stop: StopGuard(stop),
            _done: done,
            _context: context,
        })
    }
}

/// Hashes a link id (a counter) with one multiplication: a command costs one lookup, and
/// SipHash's resistance to chosen keys buys nothing for ids the crate hands out itself.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type ById = BuildHasherDefault<IdHasher>;

/// One IO thread: its links, its wait set, its timers.
pub(crate) struct Worker {
    epoll: Epoll,
    wake: Arc<Wake>,
    commands: Receiver<Msg>,
    slots: HashMap<u64, Slot, ById>,
    /// Links to serve in the next pass (each at most once: `Slot::queued`).
    queue: Vec<u64>,
    /// Links whose reader is behind: looked at every pass (taking an event wakes the thread).
    behind: HashSet<u64, ById>,
    /// (deadline, link): stale entries (the link's `timer_at` differs) are skipped.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The batch being written; it moves into the zmq message, so only one per thread.
    buf: Vec<u8>,
    reports: Vec<Ready>,
    /// When the loop last warned that it was late, and the gaps since then not warned of.
    late_warned: Option<Instant>,
    late_unwarned: u64,
}

impl Worker {
    pub(crate) fn new(wake: Arc<Wake>, commands: Receiver<Msg>) -> std::io::Result<Worker> {
        let epoll = Epoll::new()?;
        epoll.add(wake.raw_fd(), WAKE_TOKEN)?;
        Ok(Worker {
            epoll,
            wake,
            commands,
            slots: HashMap::default(),
            queue: Vec::new(),
            behind: HashSet::default(),
            timers: BinaryHeap::new(),
            buf: Vec::new(),
            reports: vec![ffi::BLANK; REPORTS],
            late_warned: None,
            late_unwarned: 0,
        })
    }

    /// Runs the thread until its pool is gone and its last link closed. Never unwinds:
    /// application code is guarded where it is called, and a panic of the loop itself (a bug
    /// in relink) while it serves a link closes that link alone (see `Worker::guarded`); a
    /// [`StopGuard`] in each slot leaves its shared state Closed however the slot goes.
    pub(crate) fn run(mut self) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| self.run_loop())) {
            // Every slot left is dropped with the worker: its StopGuard tells its handles.
            log::error!(
                "relink: an IO thread panicked outside any link ({}); its links are closed",
                panic_message(payload.as_ref()).unwrap_or_default()
            );
        }
    }

    fn run_loop(&mut self) {
        let mut busy = false;
        let mut serving = Vec::new();
        // The `now` of the pass before: the last instant every link was known to be served.
        let mut pass_began = Instant::now();
        loop {
            if self.slots.is_empty() && self.wake.orphaned.load(Ordering::SeqCst) {
                // Registrations made before the pool went away are still in the channel.
                if self.commands.is_empty() {
                    break;
                }
            }
            // Right after traffic a reply is often due within microseconds (the peer's answer
            // on a socket, the application's next frame): look for both for a moment before
            // paying for a sleep and a wake-up, yielding the core between looks so that the
            // threads the reply needs can run (docs/design.md, "The round trip").
            let spun = if busy { self.spin() } else { None };
            let slept_at = Instant::now();
            let (n, timeout) = match spun {
                Some(n) => (n, 0),
                None => {
                    self.wake.sleeping.store(true, Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    let timeout = self.timeout_ms(slept_at);
                    let n = self.epoll.wait(&mut self.reports, timeout);
                    self.wake.sleeping.store(false, Ordering::SeqCst);
                    (n, timeout)
                }
            };
            let now = Instant::now();
            // Unserved: the last pass, and the time past the deadline the loop slept to.
            let wake_by = u64::try_from(timeout)
                .ok()
                .map(|t| slept_at + Duration::from_millis(t));
            let late = wake_by.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
            let long_pass = slept_at.saturating_duration_since(pass_began);
            pass_began = now;
            let slowest = stopwatch::take_slowest();
            if late + long_pass >= LATE {
                self.resumed(now, late, long_pass, slowest);
            }
            for i in 0..n {
                let token = ffi::token(&self.reports[i]);
                if token == WAKE_TOKEN {
                    self.wake.drained();
                } else {
                    self.enqueue(token / 2);
                }
            }
            self.take_commands(now);
            while let Some(Reverse((at, id))) = self.timers.peek().copied() {
                if at > now {
                    break;
                }
                self.timers.pop();
                if let Some(slot) = self.slots.get_mut(&id) {
                    if slot.timer_at == Some(at) {
                        slot.timer_at = None;
                        self.enqueue(id);
                    }
                }
            }
            if !self.behind.is_empty() {
                for id in self.behind.iter().copied().collect::<Vec<_>>() {
                    self.enqueue(id);
                }
            }
            busy = false;
            std::mem::swap(&mut serving, &mut self.queue);
            for id in serving.drain(..) {
                let mut moved = false;
                self.guarded(now, id, |w| moved = w.serve(now, id));
                busy |= moved;
            }
            self.compact_timers();
        }
    }

    /// The loop did not serve its links for `late + long_pass` (it woke `late` after the
    /// deadline it slept to; its last pass took `long_pass`): every link is told before this
    /// pass reads anything or fires a timer, and is served in it. Says why at warn, at most
    /// once per period: a slow callback it timed, or a process that got no CPU.
    fn resumed(
        &mut self,
        now: Instant,
        late: Duration,
        long_pass: Duration,
        slowest: Option<(Callback, Duration)>,
    ) {
        let unserved = late + long_pass;
        let ids: Vec<u64> = self.slots.keys().copied().collect();
        for &id in &ids {
            self.guarded(now, id, |w| {
                if let Some(slot) = w.slots.get_mut(&id) {
                    slot.machine.handle_input(now, Input::Resumed { unserved });
                }
            });
            self.enqueue(id);
        }
        let slowest = slowest.filter(|(_, took)| *took >= LATE);
        if self
            .late_warned
            .is_some_and(|at| now < at + LATE_WARN_PERIOD)
        {
            self.late_unwarned += 1;
            return;
        }
        let why = match slowest {
            Some((callback, took)) => format!("a {callback} held it for {took:?}"),
            None if late >= long_pass => format!(
                "it woke {late:?} after its deadline: the process got no CPU, being stopped, \
                 paused or starved"
            ),
            None => format!("one pass over its links took {long_pass:?}"),
        };
        let more = match std::mem::take(&mut self.late_unwarned) {
            0 => String::new(),
            n => format!("; {n} more gaps since the last report"),
        };
        log::warn!(
            "relink: an IO thread served its {} {unserved:?} late ({why}); their peers get \
             a fresh chance, not a verdict{more}",
            match ids.len() {
                1 => "link".to_string(),
                n => format!("{n} links"),
            }
        );
        self.late_warned = Some(now);
    }

    /// Looks at the command queue and the wait set without blocking for up to [`SPIN`],
    /// yielding the core between looks; returns the reports taken once either has something,
    /// or `None` when the time ran out.
    fn spin(&mut self) -> Option<usize> {
        let until = Instant::now() + SPIN;
        loop {
            let n = self.epoll.wait(&mut self.reports, 0);
            if n > 0 || !self.commands.is_empty() || !self.queue.is_empty() {
                return Some(n);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// Queues a link to be served (once) in this pass or the next.
    fn enqueue(&mut self, id: u64) {
        if let Some(slot) = self.slots.get_mut(&id) {
            if !slot.queued {
                slot.queued = true;
                self.queue.push(id);
            }
        }
    }

    fn timeout_ms(&self, now: Instant) -> i32 {
        if !self.commands.is_empty() || !self.queue.is_empty() {
            return 0;
        }
        match self.timers.peek() {
            None => -1,
            Some(Reverse((t, _))) => {
                if *t <= now {
                    0
                } else {
                    // Round up: waking early only costs another pass.
                    let d = *t - now;
                    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
            }
        }
    }

    fn take_commands(&mut self, now: Instant) {
        let mut taken = 0;
        let mut next = None;
        while taken < COMMAND_BUDGET {
            let msg = match next.take() {
                Some(msg) => msg,
                None => match self.commands.try_recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                },
            };
            taken += 1;
            match msg {
                Msg::Link(id, cmd) => {
                    // A run of commands for one link (a producer's frames) costs one lookup.
                    self.guarded(now, id, |w| {
                        next = w.command_run(now, id, cmd, &mut taken);
                    });
                }
                msg => self.dispatch(now, msg),
            }
        }
        if let Some(msg) = next {
            self.dispatch(now, msg);
        }
    }

    /// Hands `first` to link `id`, then the commands that follow it in the channel for the
    /// same link, within the budget; returns the first message for anything else.
    fn command_run(
        &mut self,
        now: Instant,
        id: u64,
        first: Command,
        taken: &mut usize,
    ) -> Option<Msg> {
        // A command for a link already closed (a late resolver answer) finds no slot.
        let slot = self.slots.get_mut(&id)?;
        slot.command(now, first);
        if !slot.queued {
            slot.queued = true;
            self.queue.push(id);
        }
        while *taken < COMMAND_BUDGET {
            match self.commands.try_recv() {
                Ok(Msg::Link(i, cmd)) if i == id => {
                    *taken += 1;
                    slot.command(now, cmd);
                }
                Ok(other) => return Some(other),
                Err(_) => return None,
            }
        }
        None
    }

    fn dispatch(&mut self, now: Instant, msg: Msg) {
        match msg {
            Msg::Register(slot) => self.register(now, *slot),
            Msg::View { top, reply } => {
                let links = self
                    .slots
                    .values()
                    .map(|s| (s.machine.name(), s.snapshot(now)));
                let _ = reply.send(crate::view::tally(links, top));
            }
            #[cfg(feature = "metrics")]
            Msg::Rows(reply) => {
                let rows = self
                    .slots
                    .iter()
                    .map(|(id, s)| (*id, s.machine.name().clone(), s.snapshot(now)))
                    .collect();
                let _ = reply.send(rows);
            }
            Msg::Link(id, cmd) => {
                // A command for a link already closed (a late resolver answer) finds no slot.
                self.guarded(now, id, |w| {
                    if let Some(slot) = w.slots.get_mut(&id) {
                        slot.command(now, cmd);
                        if !slot.queued {
                            slot.queued = true;
                            w.queue.push(id);
                        }
                    }
                });
            }
        }
    }

    /// Runs `f`, which works on link `id` alone; if it panics (a bug in relink: application
    /// code is guarded where it is called), that link is closed as it stands and the others
    /// carry on.
    fn guarded(&mut self, now: Instant, id: u64, f: impl FnOnce(&mut Worker)) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(self))) {
            self.drop_after_panic(now, id, panic_message(payload.as_ref()));
        }
    }

    /// Frees the slot of a link whose handling panicked: new frames refused, the frames its
    /// handles still had on the way given back, its handles told (`Slot::stop_after_panic`).
    fn drop_after_panic(&mut self, now: Instant, id: u64, message: Option<String>) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        self.behind.remove(&id);
        self.queue.retain(|q| *q != id);
        self.epoll.delete(slot.socket_fd);
        self.epoll.delete(slot.monitor_fd);
        self.wake.links.fetch_sub(1, Ordering::SeqCst);
        slot.shared.closed.store(true, Ordering::SeqCst);
        let late = slot.shared.intake.close().into_frames();
        for _ in 0..self.commands.len() {
            match self.commands.try_recv() {
                // A metrics request is answered by the final snapshot once its reply
                // channel is dropped here.
                Ok(Msg::Link(i, _)) if i == id => {}
                Ok(msg) => self.dispatch(now, msg),
                Err(_) => break,
            }
        }
        let name = slot.machine.name().clone();
        let stopped = catch_unwind(AssertUnwindSafe(move || {
            slot.stop_after_panic(now, message, late)
        }));
        if let Err(payload) = stopped {
            log::error!(
                "relink[{name}]: the link panicked while stopping: {}",
                panic_message(payload.as_ref()).unwrap_or_default()
            );
        }
    }

    fn register(&mut self, now: Instant, mut slot: Slot) {
        let id = slot.route.id;
        let added = self
            .epoll
            .add(slot.socket_fd, id * 2)
            .and_then(|()| self.epoll.add(slot.monitor_fd, id * 2 + 1));
        if let Err(e) = added {
            // Cannot happen short of the kernel's memory: the link cannot be served; it closes.
            log::error!("relink[{}]: epoll add failed: {e}", slot.machine.name());
            slot.deliver(Event::Error(LinkError::Zmq {
                call: "epoll_ctl",
                message: e.to_string(),
            }));
            slot.machine
                .handle_input(now, Input::Close { deadline: now });
        } else {
            slot.machine.handle_input(now, Input::Start);
        }
        self.slots.insert(id, slot);
        self.enqueue(id);
    }

    /// Serves one link; returns whether application data moved.
    fn serve(&mut self, now: Instant, id: u64) -> bool {
        let Some(slot) = self.slots.get_mut(&id) else {
            return false;
        };
        slot.queued = false;
        let before = slot.machine.traffic();
        let more = slot.pass(now, &mut self.buf);
        let busy = slot.machine.traffic() != before;
        if slot.pending.is_empty() {
            self.behind.remove(&id);
        } else {
            self.behind.insert(id);
        }
        if slot.stopped.is_some() {
            self.finish(now, id);
            return busy;
        }
        if let Some(t) = slot.machine.poll_timeout() {
            // Only an earlier deadline needs a new heap entry; a later one is found when the
            // current entry fires early (one spare pass).
            if slot.timer_at.map_or(true, |at| t < at) {
                slot.timer_at = Some(t);
                self.timers.push(Reverse((t, id)));
            }
        }
        if more {
            self.enqueue(id);
        }
        busy
    }

    /// Closes a stopped link: refuses new frames, takes what its handles queued before, hands
    /// over its final snapshot and leftover events, closes its sockets and frees its slot.
    fn finish(&mut self, now: Instant, id: u64) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        // Refuse new frames and take the last ones queued: the machine, closed, gives them
        // back as abandoned.
        slot.shared.closed.store(true, Ordering::SeqCst);
        slot.take_intake(now, true);
        // Every command of this link is in the channel now: take all that is there (other
        // links' commands are dispatched as usual).
        for _ in 0..self.commands.len() {
            let Ok(msg) = self.commands.try_recv() else {
                break;
            };
            self.dispatch(now, msg);
        }
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        self.behind.remove(&id);
        self.queue.retain(|q| *q != id);
        self.epoll.delete(slot.socket_fd);
        self.epoll.delete(slot.monitor_fd);
        let name = slot.machine.name().clone();
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || slot.shutdown(now))) {
            log::error!(
                "relink[{name}]: the link panicked while stopping: {}",
                panic_message(payload.as_ref()).unwrap_or_default()
            );
        }
        self.wake.links.fetch_sub(1, Ordering::SeqCst);
    }

    /// Rebuilds the timer heap when stale entries outnumber the links.
    fn compact_timers(&mut self) {
        if self.timers.len() <= 2 * self.slots.len() + 64 {
            return;
        }
        self.timers = self
            .slots
            .iter()
            .filter_map(|(id, s)| s.timer_at.map(|t| Reverse((t, *id))))
            .collect();
    }
}

impl Slot {
    /// One pass for this link; returns whether it has more to do right away (input left
    /// unread or batches left unwritten after its budget).
    fn pass(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        self.flush_events();
        self.read_monitor(now);
        let mut more = false;
        if self.pending.is_empty() {
            // Acknowledgements first: a reply (or garbage that fails the connection) comes
            // after the peer's kernel acknowledged what it answers, so the frames it answers
            // are confirmed before anything the reply causes.
            self.read_acks(now);
            more |= self.read_socket(now);
        }
        self.machine.handle_timeout(now);
        self.carry_out(now);
        self.read_acks(now);
        more |= self.transmit(now, buf);
        self.publish();
        // Any call into the socket may have taken libzmq's signal for input that is still
        // unread (and asking processes its pending commands, a disconnect's among them).
        let readable = self
            .socket
            .get_events()
            .map(|e| e.contains(zmq::POLLIN))
            .unwrap_or(false);
        more || (readable && self.pending.is_empty() && self.stopped.is_none())
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
            log::trace!(
                "relink[{}]: monitor event {event:#06x} value {value} ours={ours}",
                self.machine.name()
            );
            if !ours {
                continue;
            }
            let Some((_, generation)) = self.rid else {
                continue;
            };
            if event == EVENT_CONNECTED {
                self.note_connection(now, generation, value);
            }
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
                    self.last_acks(now);
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
                        "relink[{}]: monitor says {} before the stream notification",
                        self.machine.name(),
                        if says_up { "connected" } else { "disconnected" }
                    );
                }
                _ => {}
            }
        }
    }

    /// The monitor reported the connection of dial `generation` with its descriptor: keep it
    /// (and its addresses) to read the peer's acknowledgements from, if it is the dialled
    /// peer's; otherwise the machine confirms this connection's frames as they are written.
    fn note_connection(&mut self, now: Instant, generation: u64, fd: u32) {
        let conn = match (i32::try_from(fd), self.dialed) {
            // A kernel that does not report the count (before Linux 4.1) counts as unmatched.
            (Ok(fd), Some(peer)) => ffi::TcpConn::probe(fd, peer)
                .and_then(|mut c| c.bytes_acked().is_some().then_some(c)),
            _ => None,
        };
        log::trace!(
            "relink: connection descriptor {fd} of {:?}: {conn:?}",
            self.dialed
        );
        let unmatched = conn.is_none();
        self.conn = conn;
        if !self.machine.wants_acks() {
            // Nothing waits yet: the duplicate is taken again when frames do.
            if let Some(conn) = &mut self.conn {
                conn.release();
            }
        }
        if unmatched {
            self.machine
                .handle_input(now, Input::AcksUnavailable { generation });
            self.carry_out(now);
        }
    }

    /// Reads how many bytes the peer acknowledged, while frames wait for it.
    fn read_acks(&mut self, now: Instant) {
        if !self.machine.wants_acks() {
            // Nothing waits (a write of control bytes only): no duplicate descriptor is kept.
            if let Some(conn) = &mut self.conn {
                conn.release();
            }
            return;
        }
        let Some((_, generation)) = self.rid else {
            return;
        };
        let bytes = self.conn.as_mut().and_then(ffi::TcpConn::bytes_acked);
        self.machine
            .handle_input(now, Input::Acked { generation, bytes });
        self.carry_out(now);
        if !self.machine.wants_acks() {
            // Nothing waits: the duplicate descriptor is closed until frames wait again.
            if let Some(conn) = &mut self.conn {
                conn.release();
            }
        }
    }

    /// The connection dropped: one last reading (the descriptor is our own duplicate, still
    /// open), so that only frames the peer really did not acknowledge are resent or reported;
    /// then the duplicate is closed.
    fn last_acks(&mut self, now: Instant) {
        self.read_acks(now);
        self.conn = None;
    }

    /// Reads up to the budget; returns true when the budget ran out before the input did.
    fn read_socket(&mut self, now: Instant) -> bool {
        for _ in 0..READ_BUDGET {
            let rid = match self.socket.recv_msg(zmq::DONTWAIT) {
                Ok(m) => m,
                Err(zmq::Error::EAGAIN) => return false,
                Err(e) => {
                    log::error!("relink[{}]: zmq recv failed: {e}", self.machine.name());
                    return false;
                }
            };
            if !self.socket.get_rcvmore().unwrap_or(false) {
                continue;
            }
            let data = match self.socket.recv_msg(0) {
                Ok(m) => m,
                Err(e) => {
                    log::error!("relink[{}]: zmq recv failed: {e}", self.machine.name());
                    return false;
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
                        "relink[{}]: {} bytes from a stale connection dropped",
                        self.machine.name(),
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
                    self.last_acks(now);
                    Input::Disconnected { generation }
                };
                self.machine.handle_input(now, input);
            } else {
                self.machine.handle_data(now, generation, &data);
            }
            self.carry_out(now);
            if !self.pending.is_empty() {
                return false;
            }
        }
        true
    }

    fn command(&mut self, now: Instant, cmd: Command) {
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
                let _ = reply.send(self.snapshot(now));
                return;
            }
            #[cfg(feature = "test-hooks")]
            Command::PanicForTests => panic!("IO thread panic requested by a test"),
            Command::Request {
                frame,
                id,
                deadline,
                promise,
            } => {
                let token = self.next_token;
                self.next_token += 1;
                self.promises.insert(token, promise);
                Input::Request {
                    token,
                    frame,
                    id,
                    deadline,
                }
            }
            Command::CallbackTook { callback, took } => Input::CallbackTook { callback, took },
        };
        self.machine.handle_input(now, input);
    }

    /// Hands the frames waiting in the intake to the machine; with `last`, the intake is
    /// closed first, so that these are the last.
    fn take_intake(&mut self, now: Instant, last: bool) {
        let intake = &self.shared.intake;
        let taken = if last { intake.close() } else { intake.take() };
        let machine = &mut self.machine;
        taken.into_inputs(|input| machine.handle_input(now, input));
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
                Action::Stop => self.stopped = Some(now),
                Action::Answer(token, outcome) => {
                    if let Some(p) = self.promises.remove(&token) {
                        p.fill(outcome);
                    }
                }
            }
        }
    }

    /// Hands a name to the resolver pool; the answer comes back as a command.
    fn resolve(&self, host: String, port: u16, lookup: Lookup) {
        let (route, shared) = (self.route.clone(), self.shared.clone());
        let reply = move |result, took: Option<Duration>| {
            // Before the answer: the link judges whether a resolver of the application's was
            // slow.
            if let Some(took) = took {
                let callback = Callback::Resolver;
                let _ = route.send(Command::CallbackTook { callback, took });
            }
            if route.send(Command::Resolved { lookup, result }).is_ok() {
                shared.wake();
            }
        };
        resolver::resolve(self.resolver.clone(), host, port, Box::new(reply));
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
    }

    /// Writes up to the budget; returns true when the budget ran out with batches left.
    fn transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        for _ in 0..WRITE_BUDGET {
            if !self.machine.poll_transmit(now, buf) {
                // A batch that could not be built (the framing panicked) leaves actions behind.
                self.carry_out(now);
                return false;
            }
            let result = match &self.rid {
                None => TxResult::Unreachable,
                Some((rid, _)) => {
                    // The batch moves into the zmq message without a copy; the next one
                    // starts with room for a whole batch (the thread's one buffer: an idle
                    // link holds none).
                    let mut data = std::mem::replace(buf, Vec::with_capacity(self.batch_cap));
                    // Frames will wait for acknowledgement: the duplicate descriptor is open
                    // before libzmq can write them, so a drop still gets its last reading.
                    if let Some(conn) = &mut self.conn {
                        conn.hold();
                    }
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
                return false;
            }
        }
        true
    }

    /// Hands an event to the channel unless the application holds `events_capacity` of
    /// them already.
    fn try_send_event(&self, ev: Event) -> Result<(), Event> {
        let queued = &self.shared.events_queued;
        if queued.fetch_add(1, Ordering::SeqCst) >= self.events_capacity {
            queued.fetch_sub(1, Ordering::SeqCst);
            return Err(ev);
        }
        let sent = self
            .events
            .send(ev)
            .map_err(|crossbeam_channel::SendError(ev)| {
                queued.fetch_sub(1, Ordering::SeqCst);
                ev
            });
        if sent.is_ok() {
            self.delivered.set(true);
        }
        sent
    }

    fn deliver(&mut self, ev: Event) {
        if let Event::State(t) = &ev {
            // Published before the event can be seen: `state()` is never older than it.
            self.shared.state.store(t.to as u8, Ordering::Release);
        }
        if self.pending.is_empty() {
            match self.try_send_event(ev) {
                Ok(()) => return,
                Err(ev) => self.pending.push_back(ev),
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
            if let Err(ev) = self.try_send_event(ev) {
                self.pending.push_front(ev);
                break;
            }
        }
        if self.pending.is_empty() && self.dropped_unreported > 0 {
            let report = Event::Error(LinkError::EventsDropped(self.dropped_unreported));
            if self.try_send_event(report).is_ok() {
                self.dropped_unreported = 0;
            }
        }
        if self.pending.is_empty() {
            if self.pending.capacity() > 64 {
                // A reader that caught up: give back what the backlog took.
                self.pending = VecDeque::new();
            }
            self.set_reader_waiting(false);
        }
    }

    fn set_reader_waiting(&mut self, waiting: bool) {
        let was = self.shared.reader_waiting.swap(waiting, Ordering::SeqCst);
        if was != waiting {
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
        self.shared
            .state
            .store(self.machine.state() as u8, Ordering::Release);
        let (frames, bytes) = self.machine.released();
        let df = (frames - self.released.0) as usize;
        let db = (bytes - self.released.1) as usize;
        self.released = (frames, bytes);
        self.shared.intake.release(df, db);
        // Once per pass, after the sends: a receiver registers, then looks at the channel,
        // so it cannot miss them.
        if self.delivered.replace(false) {
            self.shared.arrived.notify(usize::MAX);
        }
    }

    /// The end of a stopped link, once its commands are taken: final snapshot, leftover
    /// events, sockets closed (libzmq keeps the linger, bounded, on its own thread).
    fn shutdown(mut self, now: Instant) {
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
    fn stop_after_panic(mut self, now: Instant, message: Option<String>, late: Vec<bytes::Bytes>) {
        log::error!(
            "relink[{}]: the IO thread panicked serving the link ({}); the link is closed",
            self.machine.name(),
            message.as_deref().unwrap_or("no message")
        );
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

/// Leaves the shared state Closed when the link's slot goes, however it goes: new frames
/// refused, `state()` Closed, a final snapshot that says Closed, and every sender blocked on
/// room woken. (The events channel closes with the `Slot` that holds its sender.)
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let shared = &*self.0;
        shared.closed.store(true, Ordering::SeqCst);
        shared.state.store(State::Closed as u8, Ordering::Release);
        // Frames still in the intake (the loop stopped outside this link) are given back.
        let late = shared.intake.close().into_frames();
        {
            let mut m = shared
                .final_metrics
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let m = m.get_or_insert_with(|| Metrics::empty(State::Closed));
            m.state = State::Closed;
            m.frames_submitted += late.len() as u64;
            m.abandoned.shutdown += late.len() as u64;
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
        // The events channel is closed (the slot's sender went first) and the final snapshot
        // is kept: async closers and receivers can finish.
        shared.finish();
    }
}
