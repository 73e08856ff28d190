//! What the handles and the IO thread share: the commands sent to it and the state both sides
//! read (atomics, the room condition, the final snapshot, undelivered events).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crossbeam_channel::Sender;

use super::ffi::EventFd;
use crate::core::machine::Unresolved;
use crate::event::{Event, State};
use crate::metrics::Metrics;

/// What handles and resolver threads send to the IO thread.
#[derive(Debug)]
pub(crate) enum Command {
    Send {
        frame: Vec<u8>,
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

/// State shared between the handles, the event receivers and the IO thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(super) waker: EventFd,
    pub(super) wake_pending: Padded<AtomicBool>,
    /// The IO thread is about to block (or blocks) in `zmq::poll`: a new command needs a wake.
    pub(super) sleeping: Padded<AtomicBool>,
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
    pub waiters: AtomicUsize,
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
    pub(crate) fn new() -> std::io::Result<Shared> {
        Ok(Shared {
            waker: EventFd::new()?,
            wake_pending: Padded(AtomicBool::new(false)),
            sleeping: Padded(AtomicBool::new(false)),
            state: AtomicU8::new(State::Idle as u8),
            closed: AtomicBool::new(false),
            sending: Padded(AtomicUsize::new(0)),
            queued_frames: Padded(AtomicUsize::new(0)),
            queued_bytes: Padded(AtomicUsize::new(0)),
            room: Mutex::new(()),
            room_cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            reader_waiting: AtomicBool::new(false),
            rejected: AtomicU64::new(0),
            final_metrics: Mutex::new(None),
            leftover: Mutex::new(VecDeque::new()),
        })
    }

    /// Wakes the IO thread; coalesced, so a burst of sends costs one write.
    pub(crate) fn wake(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            self.waker.wake();
        }
    }

    /// Wakes the IO thread after a command was queued, unless it is awake and so bound to
    /// see the command in its current pass. The fences pair with those in `IoThread::run`:
    /// either the IO thread sees the command before it blocks, or this sees it asleep.
    pub(crate) fn wake_for_command(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Frames and bytes left the outbox: room for senders, who are woken if they wait.
    pub(super) fn release(&self, frames: usize, bytes: usize) {
        if frames == 0 && bytes == 0 {
            return;
        }
        self.queued_frames.fetch_sub(frames, Ordering::SeqCst);
        self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.room.lock().unwrap_or_else(|e| e.into_inner());
            self.room_cv.notify_all();
        }
    }
}
