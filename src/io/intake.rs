//! A link's intake: where the handles' frames wait for the IO thread, and the admission that
//! keeps them within the outbox limits.
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
//! The admission counters are atomics that producers raise under the lock and the IO thread
//! lowers without it (when frames leave the outbox), so a check under the lock never admits
//! more than the limits allow. A producer that must wait for room waits on the lock's
//! condition variable (blocking) or on `room_freed` (async); the IO thread wakes both when it
//! frees room and when the link closes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use event_listener::Event as Notify;

use super::padded::Padded;
use crate::batch::Batch;
use crate::core::machine::Input;

/// Frames up to this size are copied into the intake buffer; larger ones keep their own
/// buffer (a copy would cost more than the handle).
const COPY_MAX: usize = 1024;

/// How a blocked sender waits at most between two looks at the link, without a deadline.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// A link's intake and admission (see the module docs).
#[derive(Debug)]
pub(crate) struct Intake {
    queue: Mutex<Queue>,
    /// Blocked senders wait here for room (or the close).
    room: Condvar,
    /// Frames and bytes admitted and not yet sent or abandoned.
    queued_frames: Padded<AtomicUsize>,
    queued_bytes: Padded<AtomicUsize>,
    /// Senders waiting for room, blocked or async.
    waiters: AtomicUsize,
    /// Wakes async senders waiting for room.
    room_freed: Notify,
    /// Frames refused at the call.
    rejected: AtomicU64,
    max_frames: usize,
    max_bytes: usize,
}

#[derive(Debug)]
struct Queue {
    /// Frames are accepted; false once the IO thread has taken the last of them.
    open: bool,
    /// The IO thread was told that there is something to take, and has not taken it yet.
    told: bool,
    frames: Taken,
}

/// The frames of the intake, in submission order, as one take moves them to the IO thread.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// Copied frames, back to back.
    data: Vec<u8>,
    /// The end of each copied frame in `data`.
    ends: Vec<usize>,
    entries: Vec<Entry>,
}

#[derive(Debug)]
enum Entry {
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
}

/// Why a frame was not queued; it comes back.
#[derive(Debug)]
pub(crate) enum Refused<T> {
    /// No room now.
    Full(T),
    /// The link is closed.
    Closed(T),
}

/// Whether the IO thread must be told about a frame just queued (the intake was empty).
#[must_use]
pub(crate) struct Tell(pub bool);

impl Intake {
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> Intake {
        Intake {
            queue: Mutex::new(Queue {
                open: true,
                told: false,
                frames: Taken::default(),
            }),
            room: Condvar::new(),
            queued_frames: Padded(AtomicUsize::new(0)),
            queued_bytes: Padded(AtomicUsize::new(0)),
            waiters: AtomicUsize::new(0),
            room_freed: Notify::new(),
            rejected: AtomicU64::new(0),
            max_frames,
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Whether `len` more bytes in one frame fit: under the frame limit, and under the byte
    /// limit unless nothing is queued (a frame larger than the byte limit goes alone).
    fn fits(&self, len: usize, forced: bool) -> bool {
        let (max_frames, max_bytes) = self.limits(forced);
        let frames = self.queued_frames.load(Ordering::SeqCst);
        let bytes = self.queued_bytes.load(Ordering::SeqCst);
        frames < max_frames && (bytes + len <= max_bytes || frames == 0)
    }

    fn admit(&self, frames: usize, bytes: usize) {
        self.queued_frames.fetch_add(frames, Ordering::SeqCst);
        self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Queues one frame if it is admitted now; never waits.
    pub(crate) fn offer(
        &self,
        frame: Bytes,
        deadline: Option<Instant>,
        forced: bool,
    ) -> Result<Tell, Refused<Bytes>> {
        let mut q = self.lock();
        if !q.open {
            return Err(Refused::Closed(frame));
        }
        if !self.fits(frame.len(), forced) {
            return Err(Refused::Full(frame));
        }
        self.admit(1, frame.len());
        q.frames.push(frame, deadline);
        Ok(q.tell())
    }

    /// Queues the longest prefix of `batch` that is admitted now (the whole batch, or none of
    /// it, when forced); never waits. Returns how many frames were queued; `batch` keeps the
    /// rest.
    pub(crate) fn offer_batch(
        &self,
        batch: &mut Batch,
        deadline: Option<Instant>,
        forced: bool,
    ) -> Result<(usize, Tell), Refused<()>> {
        let mut q = self.lock();
        if !q.open {
            return Err(Refused::Closed(()));
        }
        let (max_frames, max_bytes) = self.limits(forced);
        let f0 = self.queued_frames.load(Ordering::SeqCst);
        let b0 = self.queued_bytes.load(Ordering::SeqCst);
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
            return Err(Refused::Full(()));
        }
        let rest = batch.split_off(k);
        let taken = std::mem::replace(batch, rest);
        self.admit(k, taken.bytes());
        q.frames.entries.push(Entry::Batch {
            batch: taken,
            deadline,
        });
        Ok((k, q.tell()))
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
        let mut q = self.lock();
        let ok = loop {
            if !q.open || self.fits(len, forced) {
                break true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break false;
            }
            // Without a deadline, look again now and then anyway: a bound on every wait.
            let slice = deadline.map_or(WAIT_SLICE, |d| d - now);
            q = self
                .room
                .wait_timeout(q, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(q);
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
        let mut timer = deadline.map(super::timer::sleep_until);
        loop {
            // Register, then look: room freed after the look wakes the listener.
            let listener = self.room_freed.listen();
            if !self.lock().open || self.fits(len, forced) {
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
                return !self.lock().open || self.fits(len, forced);
            }
        }
    }

    /// Wakes every sender waiting for room, blocked or async.
    pub(crate) fn wake_waiters(&self) {
        drop(self.lock());
        self.room.notify_all();
        self.room_freed.notify(usize::MAX);
    }

    /// Frames and bytes left the outbox: room for senders, who are woken if they wait.
    pub(crate) fn release(&self, frames: usize, bytes: usize) {
        if frames == 0 && bytes == 0 {
            return;
        }
        self.queued_frames.fetch_sub(frames, Ordering::SeqCst);
        self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.wake_waiters();
        }
    }

    /// Takes every frame queued (for the IO thread); the next frame tells it again.
    pub(crate) fn take(&self) -> Taken {
        let mut spare = Taken::default();
        let mut q = self.lock();
        q.told = false;
        std::mem::swap(&mut q.frames, &mut spare);
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
    /// Whether the frame just queued must tell the IO thread (it is the first since a take).
    fn tell(&mut self) -> Tell {
        Tell(!std::mem::replace(&mut self.told, true))
    }
}

impl Taken {
    fn push(&mut self, frame: Bytes, deadline: Option<Instant>) {
        if frame.len() > COPY_MAX {
            self.entries.push(Entry::Whole { frame, deadline });
            return;
        }
        self.data.extend_from_slice(&frame);
        self.ends.push(self.data.len());
        match self.entries.last_mut() {
            Some(Entry::Copied { count, deadline: d }) if *d == deadline => *count += 1,
            _ => self.entries.push(Entry::Copied { count: 1, deadline }),
        }
    }

    /// The frames as machine inputs, in order: one `SubmitBatch` per run of copied frames
    /// (the buffer moves into it without a copy when it is the only run), one per batch, one
    /// `Submit` per frame that kept its own buffer.
    pub(crate) fn into_inputs(self, mut submit: impl FnMut(Input)) {
        let Taken {
            mut data,
            ends,
            entries,
        } = self;
        let only_run = entries
            .iter()
            .filter(|e| matches!(e, Entry::Copied { .. }))
            .count()
            == 1;
        let mut next = 0;
        for entry in entries {
            match entry {
                Entry::Copied { count, deadline } => {
                    let start = if next == 0 { 0 } else { ends[next - 1] };
                    let run = &ends[next..next + count];
                    let batch = if only_run {
                        // The only run starts the buffer: it moves as it is.
                        Batch::from_parts(std::mem::take(&mut data), run.to_vec())
                    } else {
                        let end = run[count - 1];
                        let ends = run.iter().map(|e| e - start).collect();
                        Batch::from_parts(data[start..end].to_vec(), ends)
                    };
                    next += count;
                    submit(Input::SubmitBatch { batch, deadline });
                }
                Entry::Whole { frame, deadline } => submit(Input::Submit { frame, deadline }),
                Entry::Batch { batch, deadline } => submit(Input::SubmitBatch { batch, deadline }),
            }
        }
    }

    /// Every frame, one `Vec` each, in order.
    pub(crate) fn into_frames(self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.into_inputs(|input| match input {
            Input::Submit { frame, .. } => out.push(Vec::from(frame)),
            Input::SubmitBatch { batch, .. } => out.extend(batch.into_frames()),
            _ => {}
        });
        out
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
