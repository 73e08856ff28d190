//! What the handles and the IO threads share: the commands sent to a link's IO thread, the
//! thread's wake-up, the state both sides of one link read (atomics, the room condition, the
//! final snapshot, undelivered events), and the notifications that wake async tasks: events
//! arrived, room freed, the IO thread finished with the link.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crossbeam_channel::Sender;
use event_listener::Event as Notify;

use super::event_loop::Slot;
use super::ffi::EventFd;
use crate::batch::Batch;
use crate::core::machine::Unresolved;
use crate::event::{Event, State};
use crate::metrics::Metrics;
use crate::view::PoolView;

/// What handles and resolver threads send to the IO thread.
#[derive(Debug)]
pub(crate) enum Command {
    Send {
        frame: Vec<u8>,
        deadline: Option<Instant>,
    },
    SendBatch {
        batch: Batch,
        deadline: Option<Instant>,
    },
    Close {
        deadline: Instant,
    },
    ReconnectNow,
    Metrics(Sender<Metrics>),
    Resolved {
        lookup: Lookup,
        result: Result<Vec<SocketAddr>, Unresolved>,
    },
    /// Makes the IO thread panic, so that tests can check what the handles see when it stops.
    PanicForTests,
}

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

/// An IO thread's wake-up: one eventfd per thread, whatever the number of its links.
#[derive(Debug)]
pub(crate) struct Wake {
    fd: EventFd,
    pending: Padded<AtomicBool>,
    /// The IO thread is about to block (or blocks) in its wait: a new command needs a wake.
    pub(super) sleeping: Padded<AtomicBool>,
    /// Nothing can give the thread a new link any more (its pool is gone): it exits once its
    /// last link is closed.
    pub(super) orphaned: AtomicBool,
    /// Links placed on the thread and not yet closed (the pool places a new link on the
    /// thread with the fewest).
    pub(crate) links: AtomicUsize,
}

impl Wake {
    pub(super) fn new() -> std::io::Result<Wake> {
        Ok(Wake {
            fd: EventFd::new()?,
            pending: Padded(AtomicBool::new(false)),
            sleeping: Padded(AtomicBool::new(false)),
            orphaned: AtomicBool::new(false),
            links: AtomicUsize::new(0),
        })
    }

    /// The eventfd the IO thread waits on.
    pub(super) fn raw_fd(&self) -> std::os::raw::c_int {
        self.fd.raw()
    }

    /// Wakes the IO thread; coalesced, so a burst of sends costs one write.
    pub(crate) fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            self.fd.wake();
        }
    }

    /// Called by the IO thread when its eventfd fired.
    pub(super) fn drained(&self) {
        self.fd.drain();
        self.pending.swap(false, Ordering::AcqRel);
    }

    /// Wakes the IO thread after a command was queued, unless it is awake and so bound to
    /// see the command in its current pass. The fences pair with those in the IO loop:
    /// either the IO thread sees the command before it blocks, or this sees it asleep.
    pub(crate) fn wake_for_command(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
    }
}

/// Which question a resolver answer belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lookup {
    /// The dial of this generation waits for it.
    Dial(u64),
    /// A background refresh of this endpoint's cached answer.
    Refresh(usize),
}

/// A value on a cache line of its own, so that producers and the IO thread do not slow each
/// other down by writing neighbouring fields.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// State shared between one link's handles, its event receivers and its IO thread.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The wake-up of the IO thread that serves the link.
    pub(crate) thread: Arc<Wake>,
    /// Events in the channel, not yet taken (the channel grows on demand; this bounds it).
    pub events_queued: Padded<AtomicUsize>,
    pub state: AtomicU8,
    /// No new frames are accepted. Set by `close` and by the IO thread when it stops.
    pub closed: AtomicBool,
    /// Handles inside the accept-and-enqueue section (see `Link::submit`).
    pub sending: Padded<AtomicUsize>,
    /// Frames and bytes accepted and not yet sent or abandoned (admission control).
    pub queued_frames: Padded<AtomicUsize>,
    pub queued_bytes: Padded<AtomicUsize>,
    pub room: Mutex<()>,
    pub room_cv: Condvar,
    /// Senders waiting for room, blocked or async.
    pub waiters: AtomicUsize,
    /// Wakes async senders waiting for room (the condition variable wakes blocked ones).
    pub room_freed: Notify,
    /// Wakes async receivers: the IO thread delivered events, or stopped.
    pub arrived: Notify,
    /// The IO thread has finished (its final snapshot is kept); `done` wakes async closers.
    pub finished: AtomicBool,
    pub done: Notify,
    /// The IO thread stopped reading because the application is not taking events.
    pub reader_waiting: AtomicBool,
    /// Frames refused at the call.
    pub rejected: AtomicU64,
    /// The last snapshot, kept when the IO thread stops.
    pub final_metrics: Mutex<Option<Metrics>>,
    /// Events the IO thread could not deliver before it stopped; receivers take them after
    /// the channel.
    pub leftover: Mutex<VecDeque<Event>>,
}

impl Shared {
    pub(crate) fn new(thread: Arc<Wake>) -> Shared {
        Shared {
            thread,
            events_queued: Padded(AtomicUsize::new(0)),
            state: AtomicU8::new(State::Idle as u8),
            closed: AtomicBool::new(false),
            sending: Padded(AtomicUsize::new(0)),
            queued_frames: Padded(AtomicUsize::new(0)),
            queued_bytes: Padded(AtomicUsize::new(0)),
            room: Mutex::new(()),
            room_cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            room_freed: Notify::new(),
            arrived: Notify::new(),
            finished: AtomicBool::new(false),
            done: Notify::new(),
            reader_waiting: AtomicBool::new(false),
            rejected: AtomicU64::new(0),
            final_metrics: Mutex::new(None),
            leftover: Mutex::new(VecDeque::new()),
        }
    }

    /// Wakes the link's IO thread; coalesced, so a burst of sends costs one write.
    pub(crate) fn wake(&self) {
        self.thread.wake()
    }

    /// Wakes the IO thread after a command was queued, unless it is awake (see
    /// [`Wake::wake_for_command`]).
    pub(crate) fn wake_for_command(&self) {
        self.thread.wake_for_command()
    }

    /// Frames and bytes left the outbox: room for senders, who are woken if they wait.
    pub(super) fn release(&self, frames: usize, bytes: usize) {
        if frames == 0 && bytes == 0 {
            return;
        }
        self.queued_frames.fetch_sub(frames, Ordering::SeqCst);
        self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.wake_room_waiters();
        }
    }

    /// Wakes every sender waiting for room, blocked or async: room was freed, or the link
    /// closed.
    pub(crate) fn wake_room_waiters(&self) {
        {
            let _g = self.room.lock().unwrap_or_else(|e| e.into_inner());
            self.room_cv.notify_all();
        }
        self.room_freed.notify(usize::MAX);
    }

    /// The IO thread has stopped for good: wakes async closers and receivers.
    pub(crate) fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        self.done.notify(usize::MAX);
        self.arrived.notify(usize::MAX);
    }
}
