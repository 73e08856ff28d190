//! An IO thread's loop over its links: one loop serves a set of links, one or thousands; a
//! link never waits for another. The worker decides when each link is served; the link's
//! [`Slot`] does the serving.
//!
//! Each pass: wait in epoll on the thread's eventfd and on the ZMQ_FD of every link's STREAM
//! socket and monitor, until the earliest deadline of the thread's timer heap; read `now` once;
//! take the commands of the thread's channel; then serve each link that has something to do
//! (a socket that signalled, a command, a due deadline, input left over from the last pass, a
//! reader that was behind). No business logic lives here.
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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::ffi::{self, Epoll, Ready};
use super::ids::ById;
use super::look::LookSpan;
use super::shared::{Command, Wake};
use super::slot::{Post, Slot};
use super::stopwatch;
use crate::core::guard::panic_message;
use crate::core::machine::Input;
use crate::error::{Callback, LinkError};
use crate::event::Event;
#[cfg(feature = "metrics")]
use crate::metrics::Metrics;
use crate::view::PoolView;

/// What serving a link moved, for the loop's look after the pass (the most of its links).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Moved {
    Nothing,
    /// Application data, sent or received.
    Data,
    /// Application data written on a link whose replies come soon after its writes (see
    /// `Slot::awaits_reply`).
    AwaitingReply,
}

/// Commands taken per pass (all links of the thread together).
const COMMAND_BUDGET: usize = 1024;
/// Readiness reports taken per wait.
const REPORTS: usize = 256;
/// A gap this long in the loop's service (woken late, or a long pass) is told to every link.
const LATE: Duration = Duration::from_millis(50);
/// The loop says at warn that it was late at most once per period.
const LATE_WARN_PERIOD: Duration = Duration::from_secs(10);

/// Why the loop was late, each said at most once per [`LATE_WARN_PERIOD`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lateness {
    /// A callback it timed held it.
    Callback,
    /// It woke long after its deadline: the process got no CPU.
    Starved,
    /// One pass over its links took long.
    LongPass,
}

impl Lateness {
    /// How many reasons there are.
    const COUNT: usize = 3;
}

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
pub(crate) type LinkRow = (u64, Arc<str>, Metrics);

/// The way to one link on its IO thread: the thread's channel and the link's id. The
/// handles hold it; the link's slot holds the [`Post`] made from it.
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

    /// The link's way to itself, for its slot: queues a command, true when it was queued.
    pub(crate) fn post(&self) -> Post {
        let route = self.clone();
        Arc::new(move |cmd| route.send(cmd).is_ok())
    }
}

/// One IO thread: its links, its wait set, its timers.
pub(crate) struct Worker {
    epoll: Epoll,
    wake: Arc<Wake>,
    commands: Receiver<Msg>,
    /// Each slot in a box of its own (a few KiB): the table's entries stay small, so finding
    /// a link touches its entry's cache line and then only the lines of the slot it uses.
    slots: HashMap<u64, Box<Slot>, ById>,
    /// Links to serve in the next pass (each at most once: `Slot::queued`).
    queue: Vec<u64>,
    /// Links whose reader is behind: looked at every pass (taking an event wakes the thread).
    behind: HashSet<u64, ById>,
    /// (deadline, link): stale entries (the link's `timer_at` differs) are skipped.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The batch being written; it moves into the zmq message, so only one per thread.
    buf: Vec<u8>,
    reports: Vec<Ready>,
    /// How long the loop looks for a command or input before it sleeps after a pass that
    /// wrote on a link whose replies come soon after its writes (`LookSpan::reply`).
    look: LookSpan,
    /// The same after other passes that moved application data (`LookSpan::stream`).
    stream_look: LookSpan,
    /// When the loop last warned that it was late, for each [`Lateness`], and the gaps since
    /// then not warned of.
    late_warned: [Option<Instant>; Lateness::COUNT],
    late_unwarned: u64,
}

impl Worker {
    pub(crate) fn new(wake: Arc<Wake>, commands: Receiver<Msg>) -> std::io::Result<Worker> {
        let epoll = Epoll::new()?;
        epoll.add_edge(wake.raw_fd(), WAKE_TOKEN)?;
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
            look: LookSpan::reply(),
            stream_look: LookSpan::stream(),
            late_warned: [None; Lateness::COUNT],
            late_unwarned: 0,
        })
    }

    /// Runs the thread until its pool is gone and its last link closed. Never unwinds:
    /// application code is guarded where it is called, and a panic of the loop itself (a bug
    /// in relink) while it serves a link closes that link alone (see `Worker::guarded`); a
    /// `StopGuard` in each slot leaves its shared state Closed however the slot goes.
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
        let mut busy = Moved::Nothing;
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
            // threads the reply needs can run (docs/design.md, "The round trip"). For as long
            // as the loop's windows say, learning from the wait after the look: a reply's
            // after a write on a link whose replies come soon, a stream's after other traffic.
            let looked_at = Instant::now();
            let spun = match busy {
                Moved::Nothing => None,
                Moved::Data => self.spin(self.stream_look.get()),
                Moved::AwaitingReply => self.spin(self.look.get()),
            };
            let slept_at = Instant::now();
            let (n, timeout) = match spun {
                Some(n) => (n, 0),
                None => {
                    self.wake.sleeping.store(true, Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    let timeout = self.timeout_ms(slept_at);
                    let n = self.epoll.wait(&mut self.reports, timeout);
                    self.wake.sleeping.store(false, Ordering::SeqCst);
                    match busy {
                        Moved::Nothing => {}
                        Moved::Data => self.stream_look.waited(looked_at.elapsed(), n > 0),
                        Moved::AwaitingReply => self.look.waited(looked_at.elapsed(), n > 0),
                    }
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
                    if let Some(slot) = self.slots.get_mut(&(token / 2)) {
                        if token % 2 == 1 {
                            slot.monitor_signalled = true;
                        } else {
                            slot.socket_signalled = true;
                        }
                    }
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
            busy = Moved::Nothing;
            std::mem::swap(&mut serving, &mut self.queue);
            for id in serving.drain(..) {
                let mut moved = Moved::Nothing;
                self.guarded(now, id, |w| moved = w.serve(now, id));
                busy = busy.max(moved);
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
        // Each reason has its own period: a starved process does not hide the callback that
        // holds the thread later.
        let kind = match slowest {
            Some(_) => Lateness::Callback,
            None if late >= long_pass => Lateness::Starved,
            None => Lateness::LongPass,
        };
        let warned = &mut self.late_warned[kind as usize];
        if warned.is_some_and(|at| now < at + LATE_WARN_PERIOD) {
            self.late_unwarned += 1;
            return;
        }
        let why = match slowest {
            Some((callback, took)) => format!("a {callback} held it for {took:?}"),
            None if kind == Lateness::Starved => format!(
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
        *warned = Some(now);
    }

    /// Looks at the command queue and the wait set without blocking for up to `look`,
    /// yielding the core between looks; returns the reports taken once either has something,
    /// or `None` when the time ran out.
    fn spin(&mut self, look: Duration) -> Option<usize> {
        if look.is_zero() {
            return None;
        }
        let until = Instant::now() + look;
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
        let mut took = matches!(first, Command::Take);
        slot.command(now, first);
        if !slot.queued {
            slot.queued = true;
            self.queue.push(id);
        }
        let next = loop {
            if *taken >= COMMAND_BUDGET {
                break None;
            }
            match self.commands.try_recv() {
                Ok(Msg::Link(i, cmd)) if i == id => {
                    *taken += 1;
                    took |= matches!(cmd, Command::Take);
                    slot.command(now, cmd);
                }
                Ok(other) => break Some(other),
                Err(_) => break None,
            }
        };
        if took {
            slot.write_taken(now, &mut self.buf);
        }
        next
    }

    fn dispatch(&mut self, now: Instant, msg: Msg) {
        match msg {
            Msg::Register(slot) => self.register(now, slot),
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
        let Some(slot) = self.unregister(id) else {
            return;
        };
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
        stop(*slot, move |slot| slot.stop_after_panic(now, message, late));
    }

    /// Takes link `id` off the thread's books: its slot, its place in the queues, its
    /// sockets in the wait set.
    fn unregister(&mut self, id: u64) -> Option<Box<Slot>> {
        let slot = self.slots.remove(&id)?;
        self.behind.remove(&id);
        self.queue.retain(|q| *q != id);
        self.epoll.delete(slot.socket_fd);
        self.epoll.delete(slot.monitor_fd);
        Some(slot)
    }

    fn register(&mut self, now: Instant, mut slot: Box<Slot>) {
        let id = slot.id;
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

    /// Serves one link; returns what it moved.
    fn serve(&mut self, now: Instant, id: u64) -> Moved {
        let Some(slot) = self.slots.get_mut(&id) else {
            return Moved::Nothing;
        };
        slot.queued = false;
        let before = slot.machine.traffic();
        let more = slot.pass(now, &mut self.buf);
        let busy = if !slot.looks {
            // `Looks::Never`: nothing this link moved is looked for.
            Moved::Nothing
        } else if slot.awaits_reply() {
            Moved::AwaitingReply
        } else if slot.machine.traffic() != before {
            Moved::Data
        } else {
            Moved::Nothing
        };
        if !slot.is_behind() {
            self.behind.remove(&id);
        } else {
            self.behind.insert(id);
        }
        if slot.stopped.is_some() {
            self.finish(now, id);
            return busy;
        }
        if let Some(t) = slot.next_deadline() {
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
        let Some(slot) = self.unregister(id) else {
            return;
        };
        stop(*slot, move |slot| slot.shutdown(now));
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

/// Ends a slot with `end`; a panic there (a bug in relink) is logged, and the slot is freed
/// all the same.
fn stop(slot: Slot, end: impl FnOnce(Slot)) {
    let name = slot.machine.name().clone();
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || end(slot))) {
        log::error!(
            "relink[{name}]: the link panicked while stopping: {}",
            panic_message(payload.as_ref()).unwrap_or_default()
        );
    }
}
