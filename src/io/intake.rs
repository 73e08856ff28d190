//! A link's intake: where the handles' frames and requests wait for the IO thread, and the
//! admission that keeps the frames within the outbox limits (a request's admission is the
//! requests' window's, in the IO thread).
//!
//! A frame is admitted and queued in one short critical section: the admission check against
//! the frames and bytes accepted and not yet sent or abandoned, then a copy of the frame into
//! the intake buffer (small frames, back to back) or its `Bytes` handle (large ones, whole
//! batches). The IO thread takes the intake whole, every frame queued since its last take,
//! and hands it to the machine as few submissions (one per run of copied frames with the same
//! deadline). Only the frame that finds the intake empty tells the IO thread, with one
//! message in its channel (and a wake-up if it sleeps); the frames queued behind it ride on
//! that message. Order per producer holds: one lock orders every frame, and a take moves
//! them out in that order.
//!
//! Admission counts the frames and bytes admitted under the lock, and the IO thread counts
//! those that left the outbox (sent or abandoned) in atomics of its own that producers only
//! read: the check costs no atomic write, and the one it reads changes once per pass. A stale
//! read sees less room than there is, never more, so the limits hold. The lock is a spin
//! lock (see `Intake::lock`); a producer that must wait for room waits on a condition
//! variable of its own (blocking) or on `room_freed` (async); the IO thread wakes both when it
//! frees room and when the link closes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use event_listener::Event as Notify;
use spin::mutex::{SpinMutex, SpinMutexGuard};

use super::answer::Promise;
use super::padded::Padded;
use crate::core::batch::Batch;
use crate::core::machine::Input;
use crate::error::RequestError;

/// Frames up to this size are copied into the intake buffer; larger ones keep their own
/// buffer (a copy would cost more than the handle).
pub(crate) const COPY_MAX: usize = 1024;

/// The largest intake buffer the IO thread makes ahead of the frames (bytes; see
/// [`Intake::take`]).
const SPARE_MAX: usize = 256 * 1024;

/// Times a sender that finds the intake locked gives its core away before it sleeps between
/// tries.
const LOCK_YIELDS: usize = 16;

/// How long a sender that found the intake locked many times sleeps before it tries again.
const LOCK_NAP: Duration = Duration::from_micros(20);

/// How a blocked sender waits at most between two looks at the link, without a deadline.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// A link's intake and admission (see the module docs).
#[derive(Debug)]
pub(crate) struct Intake {
    /// On a cache line of its own: between two takes it stays in the producer's cache. A spin
    /// lock (see [`Intake::lock`]): its unlock is a plain store.
    queue: Padded<SpinMutex<Queue>>,
    /// Blocked senders wait on `room` for room (or the close), holding `room_lock` while they
    /// look; the IO thread takes `room_lock` before it wakes them, so none misses a wake-up.
    room_lock: Mutex<()>,
    room: Condvar,
    /// Frames and bytes that left the outbox (sent or abandoned), written by the IO thread.
    released_frames: Padded<AtomicUsize>,
    released_bytes: Padded<AtomicUsize>,
    /// Senders waiting for room, blocked or async (read by the IO thread at every pass).
    waiters: Padded<AtomicUsize>,
    /// Wakes async senders waiting for room.
    room_freed: Notify,
    /// Frames refused at the call.
    rejected: AtomicU64,
    /// Frames a sender's lane took after the IO thread's last take (see `io::lane`).
    late: AtomicU64,
    /// Frames restored from the link's spool at its start, and the bytes its start cut.
    recovered: (AtomicU64, AtomicU64, AtomicU64),
    max_frames: usize,
    max_bytes: usize,
}

#[derive(Debug)]
struct Queue {
    /// Frames are accepted; false once the IO thread has taken the last of them.
    open: bool,
    /// The IO thread was told that there is something to take, and has not taken it yet.
    told: bool,
    /// Frames and bytes admitted so far (wrapping counts: less the released, the queued).
    admitted_frames: usize,
    admitted_bytes: usize,
    frames: Taken,
}

/// The frames of the intake, in submission order, as one take moves them to the IO thread.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// Copied frames, back to back.
    data: BytesMut,
    /// The end of each copied frame in `data`.
    ends: Vec<usize>,
    entries: Vec<Item>,
}

#[derive(Debug)]
enum Item {
    /// The next `count` copied frames, all with this deadline.
    Copied {
        count: usize,
        deadline: Option<Instant>,
    },
    /// A frame that keeps its own buffer.
    Whole {
        frame: Bytes,
        deadline: Option<Instant>,
    },
    /// A batch's frames.
    Batch {
        batch: Batch,
        deadline: Option<Instant>,
    },
    /// A request.
    Request(Asked),
}

/// A request on its way to the IO thread: its frame, its id (when replies are matched by
/// id), its reply's deadline and where its outcome goes.
#[derive(Debug)]
pub(crate) struct Asked {
    pub frame: Bytes,
    pub id: Option<Vec<u8>>,
    pub deadline: Instant,
    pub promise: Promise,
}

/// What a take hands the IO thread, in the order of the calls.
#[derive(Debug)]
pub(crate) enum Handed {
    /// Frames, as the machine takes them.
    Frames(Input),
    /// A request: the IO thread keeps its promise and hands the machine its token.
    Request(Asked),
}

/// What the IO thread keeps for a link's next [`Intake::take`]: the sizes it makes the next
/// intake buffers at (bytes copied, frames copied, entries), and the lists of the last take,
/// emptied by [`Taken::hand_over`], which the next take reuses rather than allocating.
#[derive(Debug, Default)]
pub(crate) struct NextTake {
    bytes: usize,
    frames: usize,
    entries: usize,
    kept_ends: Vec<usize>,
    kept_entries: Vec<Item>,
}

impl NextTake {
    /// The buffers of the next take: fresh bytes (they go to the machine with the frames), the
    /// kept lists when they are no larger than a take ever makes them.
    fn make(&mut self) -> Taken {
        Taken {
            data: BytesMut::with_capacity(self.bytes),
            ends: reuse(&mut self.kept_ends, self.frames, FRAMES_MAX),
            entries: reuse(&mut self.kept_entries, self.entries, ENTRIES_MAX),
        }
    }
}

/// The most frames and entries a take's lists are made (or kept) for.
const FRAMES_MAX: usize = SPARE_MAX / 64;
const ENTRIES_MAX: usize = SPARE_MAX / 1024;

/// `kept` (empty) with room for `want`, or a new list when `kept` is over `max`.
fn reuse<T>(kept: &mut Vec<T>, want: usize, max: usize) -> Vec<T> {
    let mut list = std::mem::take(kept);
    if list.capacity() > max {
        return Vec::with_capacity(want);
    }
    list.clear();
    list.reserve(want);
    list
}

/// Why a frame (or a batch) was not queued; the caller still has it.
#[derive(Debug)]
pub(crate) enum Refused {
    /// No room now.
    Full,
    /// The link is closed.
    Closed,
}

/// Whether the IO thread must be told about a frame just queued (the intake was empty).
#[must_use]
pub(crate) struct Tell(pub bool);

impl Intake {
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> Intake {
        Intake {
            queue: Padded(SpinMutex::new(Queue {
                open: true,
                told: false,
                admitted_frames: 0,
                admitted_bytes: 0,
                frames: Taken::default(),
            })),
            room_lock: Mutex::new(()),
            room: Condvar::new(),
            released_frames: Padded(AtomicUsize::new(0)),
            released_bytes: Padded(AtomicUsize::new(0)),
            waiters: Padded(AtomicUsize::new(0)),
            room_freed: Notify::new(),
            rejected: AtomicU64::new(0),
            late: AtomicU64::new(0),
            recovered: (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)),
            max_frames,
            max_bytes,
        }
    }

    /// Locks the queue. A sender holds it for one frame's copy, the IO thread for a swap of
    /// buffers, and neither ever waits while holding it, so a sender that finds it locked
    /// tries again, giving its core away between tries (the holder may be waiting for one),
    /// and after [`LOCK_YIELDS`] tries sleeps [`LOCK_NAP`] between them. The lock costs one
    /// locked instruction and a plain store, where a lock that can put its waiters to sleep
    /// costs two locked instructions per frame (measured: a sixth of the CPU of a producer's
    /// `send` at 64 B).
    fn lock(&self) -> SpinMutexGuard<'_, Queue> {
        let mut tries = 0;
        loop {
            if let Some(q) = self.queue.try_lock() {
                return q;
            }
            tries += 1;
            if tries <= LOCK_YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(LOCK_NAP);
            }
        }
    }

    /// The limits a frame is admitted under: the outbox's, or twice them when forced.
    fn limits(&self, forced: bool) -> (usize, usize) {
        if forced {
            (
                self.max_frames.saturating_mul(2),
                self.max_bytes.saturating_mul(2),
            )
        } else {
            (self.max_frames, self.max_bytes)
        }
    }

    /// Frames and bytes admitted and not yet sent or abandoned.
    fn queued(&self, q: &Queue) -> (usize, usize) {
        let frames = self.released_frames.load(Ordering::SeqCst);
        let bytes = self.released_bytes.load(Ordering::SeqCst);
        (
            q.admitted_frames.wrapping_sub(frames),
            q.admitted_bytes.wrapping_sub(bytes),
        )
    }

    /// Whether `len` more bytes in one frame fit: under the frame limit, and under the byte
    /// limit unless nothing is queued (a frame larger than the byte limit goes alone).
    fn fits(&self, q: &Queue, len: usize, forced: bool) -> bool {
        let (max_frames, max_bytes) = self.limits(forced);
        let (frames, bytes) = self.queued(q);
        frames < max_frames && (bytes + len <= max_bytes || frames == 0)
    }

    /// Queues one frame if it is admitted now; never waits. A small frame is copied and stays
    /// the caller's; a large one is taken out of `frame` (which is left empty) when queued.
    /// A refused frame is left as it was.
    #[inline]
    pub(crate) fn offer(
        &self,
        frame: &mut Bytes,
        deadline: Option<Instant>,
        forced: bool,
    ) -> Result<Tell, Refused> {
        let mut q = self.lock();
        if !q.open {
            return Err(Refused::Closed);
        }
        if !self.fits(&q, frame.len(), forced) {
            return Err(Refused::Full);
        }
        q.admit(1, frame.len());
        q.frames.push(frame, deadline);
        Ok(q.tell())
    }

    /// Queues a request behind every frame and request queued before it. Its admission is
    /// the requests' window's, in the IO thread (the window changes with every reply and
    /// every connection lost); only a closed link refuses it here, giving it back.
    pub(crate) fn offer_request(&self, asked: Asked) -> Result<Tell, Asked> {
        let mut q = self.lock();
        if !q.open {
            return Err(asked);
        }
        q.frames.entries.push(Item::Request(asked));
        Ok(q.tell())
    }

    /// The bytes the start of the link's spool cut from its files, and how many frames at
    /// most the machine's going down took.
    pub(crate) fn spool_cut(&self, bytes: u64, lost_at_most: u64) {
        self.recovered.1.store(bytes, Ordering::Relaxed);
        self.recovered.2.store(lost_at_most, Ordering::Relaxed);
    }

    /// Frames restored from the spool, the bytes its start cut, and the frames at most it
    /// reported lost with the machine.
    pub(crate) fn recovered(&self) -> (u64, u64, u64) {
        (
            self.recovered.0.load(Ordering::Relaxed),
            self.recovered.1.load(Ordering::Relaxed),
            self.recovered.2.load(Ordering::Relaxed),
        )
    }

    /// Queues a frame recovered from the link's spool at its start, whatever the limits (the
    /// spool held it, so it was admitted once).
    pub(crate) fn restore(&self, mut frame: Bytes, deadline: Option<Instant>) -> Tell {
        self.recovered.0.fetch_add(1, Ordering::Relaxed);
        let mut q = self.lock();
        q.admit(1, frame.len());
        q.frames.push(&mut frame, deadline);
        q.tell()
    }

    /// Queues the longest prefix of `batch` that is admitted now (the whole batch, or none of
    /// it, when forced); never waits. Returns how many frames were queued; `batch` keeps the
    /// rest.
    pub(crate) fn offer_batch(
        &self,
        batch: &mut Batch,
        deadline: Option<Instant>,
        forced: bool,
    ) -> Result<(usize, Tell), Refused> {
        let mut q = self.lock();
        if !q.open {
            return Err(Refused::Closed);
        }
        let (max_frames, max_bytes) = self.limits(forced);
        let (f0, b0) = self.queued(&q);
        let k = if forced {
            if (f0 < max_frames && b0 < max_bytes) || f0 == 0 {
                batch.len()
            } else {
                0
            }
        } else {
            let mut k = 0;
            while k < batch.len() {
                let alone = f0 + k == 0;
                if f0 + k >= max_frames || (b0 + batch.prefix_bytes(k + 1) > max_bytes && !alone) {
                    break;
                }
                k += 1;
            }
            k
        };
        if k == 0 {
            return Err(Refused::Full);
        }
        let rest = batch.split_off(k);
        let taken = std::mem::replace(batch, rest);
        q.admit(k, taken.bytes());
        q.frames.entries.push(Item::Batch {
            batch: taken,
            deadline,
        });
        Ok((k, q.tell()))
    }

    /// Admits room ahead for a sender's lane: for a frame of `len` bytes at least, and up to
    /// `want` frames and bytes, never more than half the room left (so that other producers
    /// keep some), under twice the limits when `forced`. A frame larger than the byte limit
    /// is admitted alone, as [`offer`](Intake::offer) admits it. Returns the frames and bytes
    /// admitted, which the lane uses up or gives back with [`unreserve`](Intake::unreserve).
    pub(crate) fn reserve(
        &self,
        len: usize,
        want: (usize, usize),
        forced: bool,
    ) -> Result<(usize, usize), Refused> {
        let mut q = self.lock();
        if !q.open {
            return Err(Refused::Closed);
        }
        if !self.fits(&q, len, forced) {
            return Err(Refused::Full);
        }
        let (max_frames, max_bytes) = self.limits(forced);
        let (frames, bytes) = self.queued(&q);
        let room_bytes = max_bytes.saturating_sub(bytes);
        let grant = if len > room_bytes {
            (1, len)
        } else {
            let half = |room: usize| room.div_ceil(2).max(1);
            (
                want.0.min(half(max_frames - frames)),
                want.1.min(half(room_bytes)).max(len),
            )
        };
        q.admit(grant.0, grant.1);
        Ok(grant)
    }

    /// Gives back room a lane admitted and did not use; senders waiting for room are woken.
    pub(crate) fn unreserve(&self, frames: usize, bytes: usize) {
        if frames == 0 && bytes == 0 {
            return;
        }
        {
            let mut q = self.lock();
            q.admitted_frames = q.admitted_frames.wrapping_sub(frames);
            q.admitted_bytes = q.admitted_bytes.wrapping_sub(bytes);
        }
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.wake_waiters();
        }
    }

    /// Counts frames a lane found after the IO thread's last take: given back at shutdown.
    pub(crate) fn given_back_late(&self, frames: usize) {
        self.late.fetch_add(frames as u64, Ordering::SeqCst);
    }

    /// Frames given back that way so far.
    pub(crate) fn given_back_late_total(&self) -> u64 {
        self.late.load(Ordering::SeqCst)
    }

    /// Counts frames refused at the call.
    pub(crate) fn rejected(&self, frames: usize) {
        self.rejected.fetch_add(frames as u64, Ordering::SeqCst);
    }

    /// Frames refused at the call so far.
    pub(crate) fn rejected_total(&self) -> u64 {
        self.rejected.load(Ordering::SeqCst)
    }

    /// Waits (blocking) until a frame of `len` bytes may fit (under twice the limits if
    /// `forced`), the link closes, or `deadline` (if any) passes; false when it passed.
    pub(crate) fn wait_for_room(
        &self,
        len: usize,
        deadline: Option<Instant>,
        forced: bool,
    ) -> bool {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut held = self.room_lock.lock().unwrap_or_else(|e| e.into_inner());
        let ok = loop {
            if self.room_or_closed(len, forced) {
                break true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break false;
            }
            // Without a deadline, look again now and then anyway: a bound on every wait.
            let slice = deadline.map_or(WAIT_SLICE, |d| d - now);
            held = self
                .room
                .wait_timeout(held, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(held);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        ok
    }

    /// As [`wait_for_room`](Intake::wait_for_room), without blocking the thread: woken by
    /// the IO thread when it frees room or the link closes, and by the timer at `deadline`.
    pub(crate) async fn room_async(
        &self,
        len: usize,
        deadline: Option<Instant>,
        forced: bool,
    ) -> bool {
        let _waiting = Waiting::new(self);
        let mut timer = deadline.map(super::sleep::sleep_until);
        loop {
            // Register, then look: room freed after the look wakes the listener.
            let listener = self.room_freed.listen();
            if self.room_or_closed(len, forced) {
                return true;
            }
            let mut listener = std::pin::pin!(listener);
            let fired = std::future::poll_fn(|cx| {
                if listener.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(false);
                }
                let timed_out = timer
                    .as_mut()
                    .is_some_and(|t| Pin::new(t).poll(cx).is_ready());
                if timed_out {
                    Poll::Ready(true)
                } else {
                    Poll::Pending
                }
            })
            .await;
            if fired {
                return self.room_or_closed(len, forced);
            }
        }
    }

    fn room_or_closed(&self, len: usize, forced: bool) -> bool {
        let q = self.lock();
        !q.open || self.fits(&q, len, forced)
    }

    /// Wakes every sender waiting for room, blocked or async.
    pub(crate) fn wake_waiters(&self) {
        drop(self.room_lock.lock().unwrap_or_else(|e| e.into_inner()));
        self.room.notify_all();
        self.room_freed.notify(usize::MAX);
    }

    /// Frames and bytes left the outbox: room for senders, who are woken if they wait.
    pub(crate) fn release(&self, frames: usize, bytes: usize) {
        if frames == 0 && bytes == 0 {
            return;
        }
        self.released_frames.fetch_add(frames, Ordering::SeqCst);
        self.released_bytes.fetch_add(bytes, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.wake_waiters();
        }
    }

    /// Takes every frame queued (for the IO thread); the next frame tells it again.
    ///
    /// The buffers the producers copy into next are made here, by the IO thread, at the sizes
    /// of `next` (which the take then sets to twice its own, up to [`SPARE_MAX`] bytes): a
    /// producer then copies without growing them, and every intake buffer is allocated and
    /// freed on the IO thread. A buffer a producer allocates and the IO thread frees takes the
    /// allocator's lock of the producer's arena on each free, which the producer waits for on
    /// its next allocation.
    pub(crate) fn take(&self, next: &mut NextTake) -> Taken {
        let mut spare = next.make();
        {
            let mut q = self.lock();
            q.told = false;
            std::mem::swap(&mut q.frames, &mut spare);
        }
        // Twice the take: the next may be larger (the IO thread took less often).
        let ahead = |n: usize, max: usize| n.saturating_mul(2).min(max);
        next.bytes = ahead(spare.data.len(), SPARE_MAX);
        next.frames = ahead(spare.ends.len(), FRAMES_MAX);
        next.entries = ahead(spare.entries.len(), ENTRIES_MAX);
        spare
    }

    /// Refuses every frame from now on (the frames queued stay for the IO thread to take);
    /// senders waiting for room are woken, to be refused.
    pub(crate) fn shut(&self) {
        self.lock().open = false;
        self.wake_waiters();
    }

    /// Refuses every frame from now on and takes the last ones queued.
    pub(crate) fn close(&self) -> Taken {
        let taken = {
            let mut q = self.lock();
            q.open = false;
            std::mem::take(&mut q.frames)
        };
        self.wake_waiters();
        taken
    }
}

impl Queue {
    fn admit(&mut self, frames: usize, bytes: usize) {
        self.admitted_frames = self.admitted_frames.wrapping_add(frames);
        self.admitted_bytes = self.admitted_bytes.wrapping_add(bytes);
    }

    /// Whether the frame just queued must tell the IO thread (it is the first since a take).
    fn tell(&mut self) -> Tell {
        Tell(!std::mem::replace(&mut self.told, true))
    }
}

impl Taken {
    /// Appends the bytes of a run of copied frames (given as two parts: a ring's wrap may
    /// split them), whose lengths the run's pushes then give, in order, between frames that
    /// keep their own buffer.
    /// `frames` is how many frames the run holds at most.
    pub(crate) fn copied_run<'a>(
        &'a mut self,
        first: &[u8],
        second: &[u8],
        frames: usize,
    ) -> CopiedRun<'a> {
        let at = self.data.len();
        self.data.reserve(first.len() + second.len());
        self.data.extend_from_slice(first);
        self.data.extend_from_slice(second);
        self.ends.reserve(frames);
        CopiedRun {
            taken: self,
            at,
            run: None,
        }
    }

    /// `count` more copied frames, with this deadline: the last entry's if it has the same.
    fn count_copied(&mut self, count: usize, deadline: Option<Instant>) {
        match self.entries.last_mut() {
            Some(Item::Copied {
                count: c,
                deadline: d,
            }) if *d == deadline => *c += count,
            _ => self.entries.push(Item::Copied { count, deadline }),
        }
    }

    /// Each frame's deadline, in order.
    #[cfg(test)]
    pub(crate) fn deadlines(&self) -> Vec<Option<Instant>> {
        let mut out = Vec::new();
        for entry in &self.entries {
            match entry {
                Item::Copied { count, deadline } => out.extend((0..*count).map(|_| *deadline)),
                Item::Whole { deadline, .. } => out.push(*deadline),
                Item::Batch { batch, deadline } => out.extend((0..batch.len()).map(|_| *deadline)),
                Item::Request(_) => {}
            }
        }
        out
    }

    fn push(&mut self, frame: &mut Bytes, deadline: Option<Instant>) {
        if frame.len() > COPY_MAX {
            self.entries.push(Item::Whole {
                frame: std::mem::take(frame),
                deadline,
            });
            return;
        }
        self.data.extend_from_slice(frame);
        self.ends.push(self.data.len());
        self.count_copied(1, deadline);
    }

    /// The frames as machine inputs and the requests, in order: one `SubmitBatch` per run of
    /// copied frames (each run split off the front of the one buffer, without a copy), one
    /// per batch, one `Submit` per frame that kept its own buffer, one `Request` per request.
    pub(crate) fn into_handed(self, hand: impl FnMut(Handed)) {
        self.hand_over(&mut NextTake::default(), hand);
    }

    /// As [`Taken::into_handed`], keeping the emptied lists in `keep` for the next take.
    pub(crate) fn hand_over(self, keep: &mut NextTake, mut hand: impl FnMut(Handed)) {
        let Taken {
            mut data,
            mut ends,
            mut entries,
        } = self;
        let mut next = 0;
        for entry in entries.drain(..) {
            match entry {
                Item::Copied { count, deadline } => {
                    let start = if next == 0 { 0 } else { ends[next - 1] };
                    let run = &ends[next..next + count];
                    let end = run[count - 1];
                    let ends = run.iter().map(|e| e - start).collect();
                    let batch = Batch::from_parts(data.split_to(end - start), ends);
                    next += count;
                    hand(Handed::Frames(Input::SubmitBatch { batch, deadline }));
                }
                Item::Whole { frame, deadline } => {
                    hand(Handed::Frames(Input::Submit { frame, deadline }))
                }
                Item::Batch { batch, deadline } => {
                    hand(Handed::Frames(Input::SubmitBatch { batch, deadline }))
                }
                Item::Request(asked) => hand(Handed::Request(asked)),
            }
        }
        ends.clear();
        keep.kept_ends = ends;
        keep.kept_entries = entries;
    }

    /// Every frame, in order; each request is answered `Closed`, with its frame.
    pub(crate) fn into_frames(self) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.into_handed(|handed| match handed {
            Handed::Frames(Input::Submit { frame, .. }) => out.push(frame),
            Handed::Frames(Input::SubmitBatch { batch, .. }) => {
                out.extend(batch.into_shared_frames())
            }
            Handed::Frames(_) => {}
            Handed::Request(asked) => asked.promise.fill(Err(RequestError::Closed(asked.frame))),
        });
        out
    }
}

/// A run of copied frames being appended to a [`Taken`] ([`Taken::copied_run`]); its last
/// entries are written when it is dropped.
pub(crate) struct CopiedRun<'a> {
    taken: &'a mut Taken,
    /// Where the next copied frame begins in the take's bytes.
    at: usize,
    /// The copied frames since the last entry written, and their deadline.
    run: Option<(usize, Option<Instant>)>,
}

impl CopiedRun<'_> {
    /// The next copied frame is `len` bytes long.
    #[inline]
    pub(crate) fn push_copied(&mut self, len: usize, deadline: Option<Instant>) {
        self.at += len;
        debug_assert!(self.at <= self.taken.data.len());
        self.taken.ends.push(self.at);
        match &mut self.run {
            Some((count, d)) if *d == deadline => *count += 1,
            _ => {
                self.flush();
                self.run = Some((1, deadline));
            }
        }
    }

    /// A frame that keeps its own buffer comes next.
    pub(crate) fn push_whole(&mut self, frame: Bytes, deadline: Option<Instant>) {
        self.flush();
        self.taken.entries.push(Item::Whole { frame, deadline });
    }

    fn flush(&mut self) {
        if let Some((count, deadline)) = self.run.take() {
            self.taken.count_copied(count, deadline);
        }
    }
}

impl Drop for CopiedRun<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Counts an async sender among the waiters for room while it waits (dropped with its
/// future if that is cancelled).
struct Waiting<'a>(&'a Intake);

impl<'a> Waiting<'a> {
    fn new(intake: &'a Intake) -> Waiting<'a> {
        intake.waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(intake)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submissions(taken: Taken) -> Vec<(Vec<Vec<u8>>, Option<Instant>)> {
        let mut out = Vec::new();
        taken.into_handed(|handed| match handed {
            Handed::Frames(Input::Submit { frame, deadline }) => {
                out.push((vec![frame.to_vec()], deadline))
            }
            Handed::Frames(Input::SubmitBatch { batch, deadline }) => {
                out.push((batch.into_frames(), deadline))
            }
            other => panic!("not a submission: {other:?}"),
        });
        out
    }

    #[test]
    fn a_take_hands_over_the_frames_in_order_as_one_submission_per_run() {
        let intake = Intake::new(100, 1 << 20);
        let later = Some(Instant::now() + Duration::from_secs(1));
        let large = vec![7u8; COPY_MAX + 1];
        for (mut frame, deadline) in [
            (Bytes::from_static(b"a"), None),
            (Bytes::from_static(b"b"), None),
            (Bytes::from(large.clone()), None),
            (Bytes::from_static(b"c"), later),
            (Bytes::from_static(b"d"), later),
        ] {
            let _ = intake.offer(&mut frame, deadline, false).expect("room");
        }
        let mut batch: Batch = ["e", "f"].into_iter().collect();
        let (k, _) = intake.offer_batch(&mut batch, None, false).expect("room");
        assert_eq!((k, batch.len()), (2, 0));
        let _ = intake.offer(&mut Bytes::from_static(b"g"), None, false);
        assert_eq!(
            submissions(intake.take(&mut NextTake::default())),
            [
                (vec![b"a".to_vec(), b"b".to_vec()], None),
                (vec![large], None),
                (vec![b"c".to_vec(), b"d".to_vec()], later),
                (vec![b"e".to_vec(), b"f".to_vec()], None),
                (vec![b"g".to_vec()], None),
            ]
        );
        assert!(
            submissions(intake.take(&mut NextTake::default())).is_empty(),
            "taken once"
        );
    }

    #[test]
    fn a_large_frame_keeps_its_buffer_and_a_small_one_is_copied_and_stays_the_callers() {
        let intake = Intake::new(100, 1 << 20);
        let mut large = Bytes::from(vec![7u8; COPY_MAX + 1]);
        let at = large.as_ptr();
        let _ = intake.offer(&mut large, None, false).expect("room");
        assert!(large.is_empty(), "taken out of the caller's handle");
        let mut small = Bytes::from(vec![1u8; 8]);
        let _ = intake.offer(&mut small, None, false).expect("room");
        assert_eq!(small, vec![1u8; 8], "copied: the caller keeps it");
        let frames = intake.take(&mut NextTake::default()).into_frames();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].as_ptr(), at, "the same buffer, not a copy");
        assert_eq!(frames[1], vec![1u8; 8]);
    }

    #[test]
    fn runs_of_copied_frames_are_split_off_one_buffer_without_a_copy() {
        let intake = Intake::new(100, 1 << 20);
        let later = Some(Instant::now() + Duration::from_secs(1));
        for (frame, deadline) in [(&b"ab"[..], None), (b"c", later), (b"de", None)] {
            let _ = intake
                .offer(&mut Bytes::from_static(frame), deadline, false)
                .expect("room");
        }
        let mut runs = Vec::new();
        intake
            .take(&mut NextTake::default())
            .into_handed(|handed| match handed {
                Handed::Frames(Input::SubmitBatch { batch, .. }) => {
                    runs.push(batch.into_shared_frames())
                }
                other => panic!("not a run: {other:?}"),
            });
        let frames: Vec<&Bytes> = runs.iter().flatten().collect();
        assert_eq!(frames, [&b"ab"[..], b"c", b"de"]);
        let base = frames[0].as_ptr() as usize;
        let at: Vec<usize> = frames.iter().map(|f| f.as_ptr() as usize - base).collect();
        assert_eq!(at, [0, 2, 3], "three runs, one buffer");
    }

    #[test]
    fn a_take_leaves_buffers_as_large_as_it_took_so_producers_copy_without_growing_them() {
        let intake = Intake::new(10_000, 1 << 24);
        let mut next = NextTake::default();
        let capacity = |intake: &Intake| {
            let q = intake.lock();
            (q.frames.data.capacity(), q.frames.ends.capacity())
        };
        // The buffers made at a take are twice as large as the take before it.
        for _ in 0..2 {
            for _ in 0..1000 {
                let _ = intake.offer(&mut Bytes::from_static(&[1; 64]), None, false);
            }
            let _ = intake.take(&mut next);
        }
        let (bytes, frames) = capacity(&intake);
        assert!(
            bytes >= 64_000 && frames >= 1000,
            "{bytes} B, {frames} frames"
        );
        // An idle link's intake shrinks back: a take of nothing leaves nothing made.
        let _ = intake.take(&mut next);
        let _ = intake.take(&mut next);
        assert_eq!(capacity(&intake), (0, 0));
        // Never larger than SPARE_MAX, however large the take.
        for _ in 0..2 {
            for _ in 0..1000 {
                let _ = intake.offer(&mut Bytes::from_static(&[1; 1000]), None, false);
            }
            let _ = intake.take(&mut next);
        }
        assert_eq!(capacity(&intake).0, SPARE_MAX);
    }

    #[test]
    fn only_the_first_frame_after_a_take_tells_the_io_thread() {
        let intake = Intake::new(100, 1 << 20);
        let tells: Vec<bool> = (0..3)
            .map(|_| {
                intake
                    .offer(&mut Bytes::from_static(b"x"), None, false)
                    .unwrap()
                    .0
            })
            .collect();
        assert_eq!(tells, [true, false, false]);
        let _ = intake.take(&mut NextTake::default());
        assert!(
            intake
                .offer(&mut Bytes::from_static(b"y"), None, false)
                .unwrap()
                .0
        );
    }

    #[test]
    fn admission_keeps_both_limits_until_frames_are_released_and_a_large_frame_goes_alone() {
        let intake = Intake::new(2, 10);
        let f = |n: usize| Bytes::from(vec![0u8; n]);
        let _ = intake.offer(&mut f(6), None, false).expect("room");
        assert!(
            matches!(intake.offer(&mut f(6), None, false), Err(Refused::Full)),
            "bytes"
        );
        let _ = intake
            .offer(&mut f(4), None, false)
            .expect("room for 4 bytes");
        assert!(
            matches!(intake.offer(&mut f(1), None, false), Err(Refused::Full)),
            "frames"
        );
        assert!(
            intake.offer(&mut f(1), None, true).is_ok(),
            "forced: twice the limits"
        );
        intake.release(3, 11);
        let _ = intake
            .offer(&mut f(50), None, false)
            .expect("alone, over the byte limit");
        assert!(matches!(
            intake.offer(&mut f(1), None, false),
            Err(Refused::Full)
        ));
    }

    fn asked(line: &'static str) -> (Asked, crate::io::answer::Answer) {
        let (promise, answer) = crate::io::answer::Answer::pair(Default::default());
        let asked = Asked {
            frame: Bytes::from_static(line.as_bytes()),
            id: None,
            deadline: Instant::now() + Duration::from_secs(5),
            promise,
        };
        (asked, answer)
    }

    #[test]
    fn a_request_is_taken_between_the_frames_queued_around_it_and_admits_no_frame_room() {
        // Room for one frame: the request takes none of it.
        let intake = Intake::new(1, 1 << 20);
        let _ = intake.offer(&mut Bytes::from_static(b"a"), None, false);
        let (r, _answer) = asked("r");
        assert!(intake.offer_request(r).is_ok());
        intake.release(1, 1);
        let _ = intake
            .offer(&mut Bytes::from_static(b"b"), None, false)
            .unwrap();
        let mut order = Vec::new();
        intake
            .take(&mut NextTake::default())
            .into_handed(|handed| match handed {
                Handed::Frames(Input::SubmitBatch { batch, .. }) => {
                    order.extend(batch.into_frames())
                }
                Handed::Request(a) => order.push(a.frame.to_vec()),
                other => panic!("unexpected: {other:?}"),
            });
        assert_eq!(order, [b"a".to_vec(), b"r".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn a_request_left_in_a_closed_intake_is_answered_closed_and_a_later_one_given_back() {
        let intake = Intake::new(16, 1 << 20);
        let (r, mut answer) = asked("left");
        assert!(intake.offer_request(r).is_ok());
        assert!(intake.close().into_frames().is_empty());
        match answer.try_take() {
            Some(Err(RequestError::Closed(frame))) => assert_eq!(frame, &b"left"[..]),
            other => panic!("not answered closed: {other:?}"),
        }
        let (late, _answer) = asked("late");
        let Err(given_back) = intake.offer_request(late) else {
            panic!("a closed intake took a request");
        };
        assert_eq!(given_back.frame, &b"late"[..]);
    }

    #[test]
    fn a_shut_intake_refuses_new_frames_and_keeps_the_queued_ones_for_the_io_thread() {
        // Room for one frame: "kept" fills it.
        let intake = Intake::new(1, 1 << 20);
        let _ = intake.offer(&mut Bytes::from_static(b"kept"), None, false);
        intake.shut();
        assert!(matches!(
            intake.offer(&mut Bytes::from_static(b"late"), None, false),
            Err(Refused::Closed)
        ));
        let mut batch: Batch = ["late"].into_iter().collect();
        assert!(matches!(
            intake.offer_batch(&mut batch, None, false),
            Err(Refused::Closed)
        ));
        // A sender that would wait for room returns at once, to be refused.
        let started = Instant::now();
        assert!(intake.wait_for_room(1, Some(started + Duration::from_secs(5)), false));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(intake.close().into_frames(), [b"kept".to_vec()]);
    }
}
