//! A producer's lane: the single-producer rings a [`Producer`](crate::Producer) queues its frames
//! in, and the IO thread's end of them.
//!
//! A lane has one producer (the `Producer`, which is `Send` and not `Sync`) and one consumer
//! (the link's IO thread), so a frame's handoff needs no locked instruction: the producer
//! copies the frame's bytes into one `rtrb` ring and its length and deadline into another,
//! each published with a release store. The IO thread reads the entries there, then copies
//! all their bytes at once (one or two copies, as the ring wraps) into a take of the intake's
//! kind ([`Taken`]), which reaches the machine as the intake's frames do. A frame too large to
//! copy into the ring travels as a `Bytes` handle in a third ring; its entry keeps its place.
//! A frame's bytes (or handle) go in before its entry, so an entry read is a frame whole.
//!
//! **Telling the IO thread.** A push tells the IO thread (the intake's `Take` command and a
//! wake-up if it sleeps) only when the lane's `told` flag is clear, and sets it; the IO thread
//! clears it just before each drain. A push whose load of `told` raced with that clear (its
//! entry not yet visible to the drain, the clear not yet visible to it) tells nobody, so after
//! every drain that found frames the IO thread drains the lane once more a moment later
//! ([`RECHECK`]): by then the entry is visible. A frame waits at most that long, never for a
//! pass that does not come.
//!
//! **The end.** The IO thread's last drain, when the link closes, marks the lane finished.
//! A frame pushed after that (its `Producer` read the link open just before the close) is never
//! taken; the `Producer` finds it when it next calls or is dropped, and counts it as given back
//! at shutdown (`Intake::given_back_late`), with a warning: nothing is lost without a report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rtrb::{Consumer, Producer, RingBuffer};

use super::intake::{Taken, COPY_MAX};
use super::padded::Padded;

/// How long after a drain that found frames the IO thread drains the lane again (see the
/// module docs).
pub(crate) const RECHECK: Duration = Duration::from_millis(1);

/// A frame's length (or [`WHOLE`]) and deadline, in the lane's ring of entries.
#[derive(Clone, Copy, Debug)]
struct Cell {
    len: u32,
    /// Nanoseconds from the lane's epoch, plus one; zero for none.
    when: u64,
}

/// The length of an entry whose frame is the next handle in the lane's ring of handles.
const WHOLE: u32 = u32::MAX;

/// Handles the ring of handles holds.
const WHOLE_SLOTS: usize = 64;

/// Bytes of frames per entry the ring of entries is made for.
const BYTES_PER_ENTRY: usize = 64;

/// The producer's end of a lane.
#[derive(Debug)]
pub(crate) struct LaneIn {
    bytes: Producer<u8>,
    entries: Producer<Cell>,
    whole: Producer<(Bytes, Option<Instant>)>,
    end: Arc<LaneEnd>,
    /// Frames up to this size are copied into the ring.
    copy_max: usize,
}

/// What both ends of a lane share; the IO thread reads the rings through it.
#[derive(Debug)]
pub(crate) struct LaneEnd {
    /// The IO thread has been told that there are frames (see the module docs).
    told: Padded<AtomicBool>,
    /// Deadlines travel as nanoseconds from this instant.
    epoch: Instant,
    rings: Mutex<Rings>,
    /// The producer's end was dropped: the lane goes at the next drain.
    gone: AtomicBool,
}

#[derive(Debug)]
struct Rings {
    bytes: Consumer<u8>,
    entries: Consumer<Cell>,
    whole: Consumer<(Bytes, Option<Instant>)>,
    /// The IO thread took its last frames from the lane (the link closed).
    finished: bool,
}

/// A new lane whose ring holds `capacity` bytes of frames.
pub(crate) fn lane(capacity: usize) -> (LaneIn, Arc<LaneEnd>) {
    let capacity = capacity.max(BYTES_PER_ENTRY);
    let (bytes_in, bytes_out) = RingBuffer::new(capacity);
    let (entries_in, entries_out) = RingBuffer::new(capacity / BYTES_PER_ENTRY);
    let (whole_in, whole_out) = RingBuffer::new(WHOLE_SLOTS);
    let end = Arc::new(LaneEnd {
        told: Padded(AtomicBool::new(false)),
        epoch: Instant::now(),
        rings: Mutex::new(Rings {
            bytes: bytes_out,
            entries: entries_out,
            whole: whole_out,
            finished: false,
        }),
        gone: AtomicBool::new(false),
    });
    let lane = LaneIn {
        bytes: bytes_in,
        entries: entries_in,
        whole: whole_in,
        end: end.clone(),
        copy_max: (capacity / 4).min(COPY_MAX),
    };
    (lane, end)
}

impl LaneIn {
    /// Queues one frame; false (and nothing queued) when the rings have no room for it.
    #[inline]
    pub(crate) fn push(&mut self, frame: &[u8], deadline: Option<Instant>) -> bool {
        if self.entries.is_full() {
            return false;
        }
        let len = frame.len();
        if len <= self.copy_max {
            if self.bytes.push_entire_slice(frame).is_err() {
                return false;
            }
            let when = deadline.map_or(0, |d| {
                let n = d.saturating_duration_since(self.end.epoch).as_nanos();
                u64::try_from(n).unwrap_or(u64::MAX - 1) + 1
            });
            let pushed = self.entries.push(Cell {
                len: len as u32,
                when,
            });
            debug_assert!(pushed.is_ok(), "room was checked");
            return true;
        }
        if self.whole.is_full() {
            return false;
        }
        let pushed = self
            .whole
            .push((Bytes::copy_from_slice(frame), deadline))
            .is_ok()
            && self
                .entries
                .push(Cell {
                    len: WHOLE,
                    when: 0,
                })
                .is_ok();
        debug_assert!(pushed, "room was checked");
        pushed
    }

    /// Sets the lane's `told` flag; true if it was clear (the caller must tell the IO thread).
    #[inline]
    pub(crate) fn must_tell(&self) -> bool {
        let told = &self.end.told;
        !told.load(Ordering::Relaxed) && !told.swap(true, Ordering::SeqCst)
    }

    /// Whether the IO thread took every frame queued so far.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.slots() == self.entries.buffer().capacity()
    }

    /// Frames pushed after the IO thread's last drain (the link closed meanwhile): taken out
    /// of the lane and counted, never sent. Zero while the IO thread still drains the lane.
    pub(crate) fn stranded(&self) -> usize {
        let mut rings = self.end.lock();
        if !rings.finished {
            return 0;
        }
        rings.drain(&self.end, &mut Taken::default())
    }
}

impl Drop for LaneIn {
    fn drop(&mut self) {
        self.leave();
    }
}

impl LaneIn {
    /// The producer pushes nothing more: the IO thread drops the lane after its next drain.
    pub(crate) fn leave(&self) {
        self.end.gone.store(true, Ordering::SeqCst);
    }
}

impl LaneEnd {
    fn lock(&self) -> MutexGuard<'_, Rings> {
        self.rings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves every frame whose entry is there into `taken`; with `last`, the lane is
    /// finished. Returns the frames moved.
    fn drain(&self, taken: &mut Taken, last: bool) -> usize {
        self.told.store(false, Ordering::SeqCst);
        let mut rings = self.lock();
        if rings.finished {
            return 0;
        }
        let n = rings.drain(self, taken);
        rings.finished |= last;
        n
    }
}

impl Rings {
    /// Moves every frame whose entry is there into `taken`, the copied ones with one copy of
    /// all their bytes. Returns the frames moved.
    fn drain(&mut self, end: &LaneEnd, taken: &mut Taken) -> usize {
        let n = self.entries.slots();
        let Ok(entries) = self.entries.read_chunk(n) else {
            return 0;
        };
        let (e1, e2) = entries.as_slices();
        let copied: usize = e1
            .iter()
            .chain(e2)
            .filter(|e| e.len != WHOLE)
            .map(|e| e.len as usize)
            .sum();
        // Every entry's bytes are in the ring: they went in before it.
        let Ok(bytes) = self.bytes.read_chunk(copied) else {
            debug_assert!(false, "an entry without its bytes");
            return 0;
        };
        let (b1, b2) = bytes.as_slices();
        let deadline = |when: u64| match when {
            0 => None,
            t => Some(end.epoch + Duration::from_nanos(t - 1)),
        };
        let mut run = taken.copied_run(b1, b2, n);
        for e in e1.iter().chain(e2) {
            if e.len == WHOLE {
                let Ok((frame, at)) = self.whole.pop() else {
                    debug_assert!(false, "an entry without its handle");
                    continue;
                };
                run.push_whole(frame, at);
            } else {
                run.push_copied(e.len as usize, deadline(e.when));
            }
        }
        bytes.commit_all();
        entries.commit_all();
        n
    }
}

/// A link's lanes, as the IO thread drains them.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    list: Mutex<Vec<Arc<LaneEnd>>>,
}

impl Lanes {
    pub(crate) fn add(&self, end: Arc<LaneEnd>) {
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(end);
    }

    /// Moves every frame of every lane into `taken` (with `last`, for the last time); a lane
    /// whose producer is gone is dropped after its drain. Returns the frames moved.
    pub(crate) fn drain(&self, taken: &mut Taken, last: bool) -> usize {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let mut frames = 0;
        list.retain(|end| {
            // Read before the drain: a producer seen gone pushed nothing after its last
            // frame, which this drain takes (its pushes happen before its `gone`). So a
            // drain takes every entry there, never a part: a lane dropped after a partial
            // drain would lose the rest (a throwaway build that capped drains at 256 KiB
            // lost the frames a dropped sender left, and its sink waited for them).
            let gone = end.gone.load(Ordering::SeqCst);
            frames += end.drain(taken, last);
            !gone && !last
        });
        frames
    }

    /// Whether any lane is there.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(lanes: &Lanes) -> Vec<Bytes> {
        let mut taken = Taken::default();
        lanes.drain(&mut taken, false);
        taken.into_frames()
    }

    #[test]
    fn frames_come_out_whole_and_in_order_across_the_ring_s_wrap() {
        let (mut lane, end) = lane(256);
        let lanes = Lanes::default();
        lanes.add(end);
        let mut expected = Vec::new();
        for round in 0..20u8 {
            for i in 0..3u8 {
                let frame = vec![round.wrapping_mul(7).wrapping_add(i); usize::from(i) * 13 + 1];
                assert!(lane.push(&frame, None));
                expected.push(frame);
            }
            let got = drained(&lanes);
            let want: Vec<Bytes> = expected.drain(..).map(Bytes::from).collect();
            assert_eq!(got, want, "round {round}");
        }
        assert!(lane.is_empty());
    }

    #[test]
    fn a_frame_too_large_to_copy_keeps_its_place_between_copied_ones() {
        let (mut lane, end) = lane(256);
        let lanes = Lanes::default();
        lanes.add(end);
        let big = vec![9u8; 1000];
        assert!(lane.push(b"a", None));
        assert!(lane.push(&big, None));
        assert!(lane.push(b"b", None));
        assert_eq!(
            drained(&lanes),
            [
                Bytes::from_static(b"a"),
                Bytes::from(big),
                Bytes::from_static(b"b")
            ]
        );
    }

    #[test]
    fn a_full_ring_refuses_a_push_and_takes_it_after_a_drain() {
        let (mut lane, end) = lane(64);
        let lanes = Lanes::default();
        lanes.add(end);
        let mut pushed = 0;
        while lane.push(&[1u8; 4], None) {
            pushed += 1;
        }
        assert!(pushed > 0 && !lane.is_empty());
        assert_eq!(drained(&lanes).len(), pushed);
        assert!(lane.push(&[1u8; 4], None));
    }

    #[test]
    fn deadlines_survive_the_ring() {
        let (mut lane, end) = lane(256);
        let mut taken = Taken::default();
        let at = Instant::now() + Duration::from_millis(20);
        assert!(lane.push(b"x", Some(at)));
        assert!(lane.push(b"y", None));
        end.drain(&mut taken, false);
        assert_eq!(taken.deadlines(), [Some(at), None]);
    }

    #[test]
    fn only_a_push_after_a_drain_must_tell() {
        let (mut lane, end) = lane(256);
        assert!(lane.push(b"x", None) && lane.must_tell());
        assert!(lane.push(b"y", None) && !lane.must_tell());
        end.drain(&mut Taken::default(), false);
        assert!(lane.push(b"z", None) && lane.must_tell());
    }

    #[test]
    fn frames_pushed_after_the_last_drain_are_found_stranded() {
        let (mut lane, end) = lane(256);
        let lanes = Lanes::default();
        lanes.add(end.clone());
        assert!(lane.push(b"before", None));
        assert_eq!(lane.stranded(), 0);
        let mut taken = Taken::default();
        assert_eq!(lanes.drain(&mut taken, true), 1);
        assert!(lanes.is_empty());
        assert!(lane.push(b"after", None));
        assert!(lane.push(b"after too", None));
        assert_eq!(lane.stranded(), 2);
        assert_eq!(lane.stranded(), 0);
    }

    #[test]
    fn a_lane_whose_sender_went_is_dropped_once_empty() {
        let (mut lane, end) = lane(256);
        let lanes = Lanes::default();
        lanes.add(end);
        assert!(lane.push(b"last", None));
        drop(lane);
        assert_eq!(drained(&lanes), [Bytes::from_static(b"last")]);
        assert!(lanes.is_empty());
    }
}
