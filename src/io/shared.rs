//! What the handles and the IO threads share: the commands sent to a link's IO thread, the
//! thread's wake-up, the state both sides of one link read (atomics, the intake, the final
//! snapshot, undelivered events), and the notifications that wake async tasks: events
//! arrived, the IO thread finished with the link.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::Sender;
use event_listener::Event as Notify;

use super::answer::Promise;
use super::ffi::EventFd;
use super::intake::{Intake, Taken};
use super::lane::Lanes;
use super::look::{LookSpan, Looks};
use super::padded::Padded;
use super::snapshot::Sources;
use super::spool::Store;
use crate::core::machine::Unresolved;
use crate::event::{Event, State};
use crate::metrics::Metrics;

/// What handles and resolver threads send to the IO thread about one link.
#[derive(Debug)]
pub(crate) enum Command {
    /// Frames wait in the link's intake (sent by the frame that found it empty).
    Take,
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
    #[cfg(feature = "test-hooks")]
    PanicForTests,
    /// A flush; its outcome goes into `promise`.
    Flush {
        deadline: Instant,
        promise: Promise<Result<(), crate::error::FlushError>>,
    },
    /// Application code run for the link off its IO thread (the resolver) took `took`.
    CallbackTook {
        callback: crate::error::Callback,
        took: std::time::Duration,
    },
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

    /// Called by the IO thread when its eventfd fired (its epoll set watches it
    /// edge-triggered and never reads it): the next [`Wake::wake`] writes again.
    pub(super) fn drained(&self) {
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
    /// Where frames wait for the IO thread, and their admission.
    pub intake: Intake,
    /// The lanes of the link's `Producer`s (`super::lane`), drained with the intake.
    pub lanes: Lanes,
    /// The link's spool, if it has one (`super::spool`).
    pub spool: Option<Arc<Store>>,
    /// Wakes async receivers: the IO thread delivered events, or stopped.
    pub arrived: Notify,
    /// The IO thread has finished (its final snapshot is kept); `done` wakes async closers.
    pub finished: AtomicBool,
    pub done: Notify,
    /// The IO thread stopped reading because the application is not taking events.
    pub reader_waiting: AtomicBool,
    /// The sources of the last snapshot, kept when the IO thread stops
    /// ([`Shared::final_metrics`] composes it).
    pub(super) final_sources: Mutex<Option<Sources>>,
    /// Events the IO thread could not deliver before it stopped; receivers take them after
    /// the channel.
    pub leftover: Mutex<VecDeque<Event>>,
    /// How long a blocking receive of the link's events or replies looks before it sleeps:
    /// `look` for a request's reply, and for events while the link's replies come soon after
    /// its writes (`replying`, set by the IO thread); `stream_look` for other events.
    pub look: Arc<LookSpan>,
    pub stream_look: LookSpan,
    pub replying: AtomicBool,
}

impl Shared {
    pub(crate) fn new(thread: Arc<Wake>, intake: Intake) -> Shared {
        Shared {
            thread,
            events_queued: Padded(AtomicUsize::new(0)),
            state: AtomicU8::new(State::Idle as u8),
            closed: AtomicBool::new(false),
            intake,
            lanes: Lanes::default(),
            arrived: Notify::new(),
            finished: AtomicBool::new(false),
            done: Notify::new(),
            reader_waiting: AtomicBool::new(false),
            final_sources: Mutex::new(None),
            leftover: Mutex::new(VecDeque::new()),
            look: Arc::new(LookSpan::reply()),
            stream_look: LookSpan::stream(),
            replying: AtomicBool::new(false),
            spool: None,
        }
    }

    /// The same, looking as `looks` says ([`Looks`]).
    pub(crate) fn with_looks(mut self, looks: Looks) -> Shared {
        let (look, stream_look) = LookSpan::for_looks(looks);
        self.look = Arc::new(look);
        self.stream_look = stream_look;
        self
    }

    /// The same, with a spool.
    pub(crate) fn with_spool(mut self, spool: Option<Arc<Store>>) -> Shared {
        self.spool = spool;
        self
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

    /// The link's last snapshot, composed from the sources its IO thread kept when it
    /// stopped and the frames refused at the call so far; before it stopped, an empty snapshot
    /// in the current state.
    /// Refuses every frame from now on and takes the last ones queued: the intake's, then
    /// the lanes'.
    pub(crate) fn close_intake(&self) -> Taken {
        let mut taken = self.intake.close();
        self.lanes.drain(&mut taken, true);
        taken
    }

    pub(crate) fn final_metrics(&self) -> Metrics {
        let sources = *self.final_sources();
        let state = State::from_u8(self.state.load(Ordering::Acquire));
        sources
            .unwrap_or_else(|| Sources::empty(state))
            .compose(&self.intake)
    }

    /// The sources of the final snapshot, to keep or amend (the IO thread, as it stops).
    pub(super) fn final_sources(&self) -> std::sync::MutexGuard<'_, Option<Sources>> {
        self.final_sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The IO thread has stopped for good: wakes async closers and receivers.
    pub(crate) fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        self.done.notify(usize::MAX);
        self.arrived.notify(usize::MAX);
    }
}
