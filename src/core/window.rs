//! The window: frames written on the current connection and not yet confirmed by the peer's
//! TCP, each with the offset in the connection's byte stream at which it ends.
//!
//! A frame is confirmed once the peer's kernel has acknowledged every byte up to its end
//! offset (the IO side reads the count from `TCP_INFO`; it enters here as an argument). The
//! window also says when the machine should hold frames back (too many bytes unconfirmed) and
//! when the IO side should read the count again: soon after a write, then less often while
//! nothing moves, so a peer that stopped reading costs few wake-ups.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The first wait for a new count after a write or after progress.
const POLL_FIRST: Duration = Duration::from_micros(200);
/// The longest wait while nothing is acknowledged.
const POLL_MAX: Duration = Duration::from_millis(50);

/// What becomes of frames handed to the socket and not yet confirmed by the peer's TCP when
/// their connection drops.
///
/// A frame is *confirmed* once the peer's kernel acknowledged its last byte: the peer's
/// machine has it, though its application may not have read it (only a reply can show that).
/// At a drop, a frame not yet confirmed may or may not have reached the peer.
///
/// The same two choices apply to requests outstanding at a drop
/// ([`Requests::redelivery`](crate::config::Requests::redelivery)), where `Report` fails
/// each to its caller as "may have been processed" and is the default: a request has a caller
/// waiting who can retry, a frame has none.
///
/// See the example on [`Delivery::redelivery`](crate::config::Delivery::redelivery).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Redelivery {
    /// Write them again on the next connection, in order, after its hello and TLS handshake
    /// and before any newer frame: at-least-once (the peer may see a frame twice; counted in
    /// [`Metrics::frames_resent`](crate::Metrics::frames_resent)). Their deadlines still
    /// apply. The default: telemetry and data collectors would rather store a sample twice
    /// than lose it, and a `SET` written twice is harmless.
    #[default]
    Resend,
    /// Give each back in an [`Event::Abandoned`](crate::Event::Abandoned) with reason
    /// [`Unconfirmed`](crate::AbandonReason::Unconfirmed): at-most-once ("may have been
    /// received"), for commands that must not run twice (`INCR`, `LPUSH`, payments).
    Report,
}

/// Frames written together from one submission and not all confirmed yet: back to back in
/// one buffer, one handle on it for all of them.
#[derive(Debug)]
struct Run {
    data: Bytes,
    /// Where the oldest frame still waiting starts in `data`.
    first: usize,
    /// Frames of the run still waiting.
    left: usize,
    /// When the run was handed to the socket.
    at: Instant,
    /// Its deadline, which applies again if its frames are resent.
    deadline: Option<Instant>,
    /// Its submission's order number, which its frames keep if they are resent.
    order: u64,
}

/// One waiting frame: where it ends in the connection's stream and in its run's buffer.
#[derive(Clone, Copy, Debug)]
struct Mark {
    /// The stream offset (bytes written on this connection) just past its last byte.
    end: u64,
    /// The offset in its run's buffer just past its last byte.
    at: usize,
}

/// A frame taken back from the window (its connection is gone), with its deadline and its
/// order number (its place among the frames and requests handed to the machine).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Unconfirmed {
    pub(super) frame: Bytes,
    pub(super) deadline: Option<Instant>,
    pub(super) order: u64,
}

/// How many connection losses in a row the oldest frame taken back from the window was the
/// oldest at. Frames are confirmed in order, so the oldest unconfirmed one is the one a peer
/// that drops the connection cannot get past; those behind it wait on it and are not counted.
/// A frame is known by its bytes' place in memory: a resent frame is the same slice of the
/// same buffer.
#[derive(Debug, Default)]
pub(super) struct Losses(Option<((usize, usize), u32)>);

impl Losses {
    /// The frames of a lost connection, oldest first: the oldest counted once more (or from
    /// one, if it is another frame than at the last loss). Gives back the frames to resend,
    /// and the oldest apart when it has been the oldest at `max` losses in a row.
    pub(super) fn count(
        &mut self,
        mut frames: Vec<Unconfirmed>,
        max: u32,
    ) -> (Vec<Unconfirmed>, Option<Bytes>) {
        let Some(head) = frames.first() else {
            self.0 = None;
            return (frames, None);
        };
        let key = (head.frame.as_ptr() as usize, head.frame.len());
        let n = match self.0 {
            Some((k, n)) if k == key => n + 1,
            _ => 1,
        };
        if n >= max {
            self.0 = None;
            let poison = frames.remove(0).frame;
            return (frames, Some(poison));
        }
        self.0 = Some((key, n));
        (frames, None)
    }

    /// Forgets the count (the frames were not resent).
    pub(super) fn clear(&mut self) {
        self.0 = None;
    }
}

/// Frames written on the current connection and not yet confirmed: runs of frames, oldest
/// first, and a mark per frame in the same order (a frame costs 16 bytes here, and no handle
/// of its own on its buffer).
#[derive(Debug)]
pub(super) struct Window {
    runs: VecDeque<Run>,
    marks: VecDeque<Mark>,
    /// Bytes written on the current connection (control frames and TLS records included).
    written: u64,
    /// Of those, bytes the peer's kernel acknowledged.
    acked: u64,
    /// The next time a new count is wanted, while frames wait.
    poll_at: Option<Instant>,
    poll_every: Duration,
    /// The acknowledgements of this connection cannot be read: frames count as confirmed when
    /// handed to the socket (unless confirmed by reply).
    blind: bool,
    /// Frames are confirmed by the peer's answers (`Confirm::reply`), not by its TCP.
    by_reply: bool,
    /// The stream offset up to which the peer's application answered.
    read: u64,
    /// The number of the oldest waiting frame: frames are numbered as they are written, from
    /// 0, across connections.
    first: u64,
    /// The frames the peer refused, by number, oldest first, with their lengths: taken back
    /// already (written again or reported), they keep their place until the frames around
    /// them are confirmed, and are never counted as confirmed themselves.
    refused: VecDeque<(u64, usize)>,
}

impl Window {
    /// A window whose frames are confirmed by the peer's TCP, or (`by_reply`) by its answers.
    pub(super) fn new(by_reply: bool) -> Window {
        Window {
            by_reply,
            read: 0,
            runs: VecDeque::new(),
            marks: VecDeque::new(),
            written: 0,
            acked: 0,
            poll_at: None,
            poll_every: POLL_FIRST,
            blind: false,
            first: 0,
            refused: VecDeque::new(),
        }
    }

    /// A new connection: its stream starts at offset 0. Frames of the last one must have been
    /// taken first.
    pub(super) fn reset(&mut self) {
        debug_assert!(self.marks.is_empty(), "window reset with frames in it");
        // Numbers go on: a turn of the last connection can never confirm a frame of this one.
        let first = self.first;
        *self = Window::new(self.by_reply);
        self.first = first;
    }

    /// Frames waiting for confirmation (the refused ones, taken back, are not).
    pub(super) fn len(&self) -> usize {
        self.marks.len() - self.refused.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes written and not yet acknowledged.
    pub(super) fn unacked(&self) -> u64 {
        self.written - self.acked
    }

    /// Bytes written on this connection so far.
    pub(super) fn written(&self) -> u64 {
        self.written
    }

    /// Whether acknowledgements of this connection cannot be read.
    pub(super) fn is_blind(&self) -> bool {
        self.blind
    }

    /// When the oldest waiting frame was handed to the socket.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.runs.front().map(|r| r.at)
    }

    /// When the IO side should read the acknowledged count again.
    pub(super) fn poll_at(&self) -> Option<Instant> {
        self.poll_at
    }

    /// `len` bytes were written at `now`.
    pub(super) fn wrote(&mut self, now: Instant, len: usize) {
        self.written += len as u64;
        if !self.is_empty() {
            self.poll_every = POLL_FIRST;
            self.poll_at = Some(now + POLL_FIRST);
        }
    }

    /// Frames of one submission (numbered `order` among everything handed in) were handed to
    /// the socket at `now`: back to back in `data` from `first`, each given as (its end in
    /// `data`, its end in the stream).
    pub(super) fn push_run(
        &mut self,
        data: Bytes,
        first: usize,
        frames: impl IntoIterator<Item = (usize, u64)>,
        now: Instant,
        (deadline, order): (Option<Instant>, u64),
    ) {
        let before = self.marks.len();
        self.marks
            .extend(frames.into_iter().map(|(at, end)| Mark { end, at }));
        let left = self.marks.len() - before;
        if left == 0 {
            return;
        }
        self.runs.push_back(Run {
            data,
            first,
            left,
            at: now,
            deadline,
            order,
        });
        self.poll_at.get_or_insert(now + POLL_FIRST);
    }

    /// Removes the oldest waiting frame; gives its run, its start and its end in the run's
    /// buffer, and whether it was the run's last.
    fn pop(&mut self) -> Option<(Mark, usize)> {
        let mark = self.marks.pop_front()?;
        self.first += 1;
        let run = self.runs.front_mut().expect("a mark belongs to a run");
        let start = std::mem::replace(&mut run.first, mark.at);
        run.left -= 1;
        if run.left == 0 {
            self.runs.pop_front();
        }
        Some((mark, start))
    }

    /// Removes the oldest `k` waiting frames and gives how many of them were confirmed and the
    /// bytes those held (the refused ones among them were taken back already).
    fn confirm_oldest(&mut self, k: usize) -> (usize, usize) {
        let last = self.first + k as u64;
        let bytes = self.pop_many(k);
        let (mut n, mut len) = (k, bytes);
        while let Some(&(number, l)) = self.refused.front() {
            if number >= last {
                break;
            }
            self.refused.pop_front();
            n -= 1;
            len -= l;
        }
        (n, len)
    }

    /// Removes the oldest `k` waiting frames, a run at a time; gives how many bytes they held.
    fn pop_many(&mut self, k: usize) -> usize {
        let (mut left, mut at, mut bytes) = (k, 0, 0);
        while left > 0 {
            let run = self.runs.front_mut().expect("a mark belongs to a run");
            let n = left.min(run.left);
            let end = self.marks[at + n - 1].at;
            bytes += end - std::mem::replace(&mut run.first, end);
            run.left -= n;
            if run.left == 0 {
                self.runs.pop_front();
            }
            at += n;
            left -= n;
        }
        self.marks.drain(..k);
        self.first += k as u64;
        bytes
    }

    /// The peer's kernel acknowledged `bytes` bytes of this connection's stream: the frames
    /// that end at or before it are confirmed, `confirmed` called once with how many and the
    /// bytes they held. A count lower than one seen before or higher than what was written is
    /// not trusted (it cannot belong to this connection) and returns false.
    pub(super) fn acked(
        &mut self,
        now: Instant,
        bytes: u64,
        confirmed: impl FnOnce(usize, usize),
    ) -> bool {
        if bytes < self.acked || bytes > self.written {
            return false;
        }
        let moved = bytes > self.acked;
        self.acked = bytes;
        if !self.by_reply {
            self.confirm_through(bytes, confirmed);
        }
        // The IO side reads at every busy pass too, often microseconds apart: only the timed
        // reading, or progress, moves the schedule. (Each early reading that found nothing
        // new once doubled the interval, and a window that held frames back then slept up
        // to `POLL_MAX` before its next reading: rounds of a batch sender fell from 46 to
        // 5 M/s.)
        if moved || self.is_empty() || self.reading_due(now) {
            self.reschedule(now, moved);
        }
        true
    }

    /// Frames end in the order they were written: those ending at or before `end` are a
    /// prefix, confirmed together.
    fn confirm_through(&mut self, end: u64, confirmed: impl FnOnce(usize, usize)) {
        let k = self.marks.partition_point(|m| m.end <= end);
        if k > 0 {
            let (k, len) = self.confirm_oldest(k);
            confirmed(k, len);
        }
    }

    /// The number the next frame written will have.
    pub(super) fn next_number(&self) -> u64 {
        self.first + self.marks.len() as u64
    }

    /// The peer's application answered what ends at stream offset `end`, after the frames
    /// numbered below `upto`: it read them, so those still waiting are confirmed (at either
    /// level: the peer's TCP acknowledged them too).
    pub(super) fn answered(&mut self, end: u64, upto: u64, confirmed: impl FnOnce(usize, usize)) {
        self.read = self.read.max(end);
        let k = upto.saturating_sub(self.first).min(self.marks.len() as u64) as usize;
        if k > 0 {
            let (k, len) = self.confirm_oldest(k);
            confirmed(k, len);
        }
        if self.is_empty() {
            self.poll_at = None;
            self.poll_every = POLL_FIRST;
        }
    }

    /// The frame numbered `number`, while it waits.
    pub(super) fn frame(&self, number: u64) -> Option<Bytes> {
        let i = usize::try_from(number.checked_sub(self.first)?).ok()?;
        self.marks.get(i)?;
        // The runs before the frame's own, and where it starts in its run.
        let (mut left, mut start) = (i, None);
        for run in &self.runs {
            if left < run.left {
                let begin = match left {
                    0 => run.first,
                    _ => self.marks[i - 1].at,
                };
                start = Some((run, begin));
                break;
            }
            left -= run.left;
        }
        let (run, begin) = start?;
        Some(run.data.slice(begin..self.marks[i].at))
    }

    /// The stream offset up to which the peer's application answered.
    pub(super) fn read_to(&self) -> u64 {
        self.read
    }

    /// Whether frames are confirmed by the peer's answers.
    pub(super) fn by_reply(&self) -> bool {
        self.by_reply
    }

    /// The stream offset just past the newest waiting frame.
    pub(super) fn newest_end(&self) -> Option<u64> {
        self.marks.back().map(|m| m.end)
    }

    /// The time for a reading came at `now`: the next is due later unless this one moves.
    pub(super) fn poll_due(&mut self, now: Instant) {
        if self.poll_at.is_some_and(|t| t <= now) {
            self.reschedule(now, false);
        }
    }

    /// No reading could be taken at `now`: ask again later (as for a reading that found
    /// nothing new: only when one was due).
    pub(super) fn no_reading(&mut self, now: Instant) {
        if self.reading_due(now) {
            self.reschedule(now, false);
        }
    }

    /// Whether a reading at `now` is the timed one (or none is scheduled).
    fn reading_due(&self, now: Instant) -> bool {
        self.poll_at.map_or(true, |t| t <= now)
    }

    /// The next reading: none while nothing waits, soon after progress, later and later
    /// while nothing moves.
    fn reschedule(&mut self, now: Instant, moved: bool) {
        if self.is_empty() {
            self.poll_at = None;
            self.poll_every = POLL_FIRST;
            return;
        }
        self.poll_every = if moved {
            POLL_FIRST
        } else {
            (self.poll_every * 2).min(POLL_MAX)
        };
        self.poll_at = Some(now + self.poll_every);
    }

    /// This connection's acknowledgements cannot be read: every frame in the window, and every
    /// later one, is confirmed as it is handed to the socket (`confirmed` gets how many are
    /// in the window now and the bytes they hold).
    pub(super) fn go_blind(&mut self, confirmed: impl FnOnce(usize, usize)) {
        self.blind = true;
        self.poll_at = None;
        if self.by_reply {
            // Answers still confirm them.
            return;
        }
        let k = self.marks.len();
        let (k, len) = self.confirm_oldest(k);
        confirmed(k, len);
    }

    /// Takes every waiting frame, oldest first (the connection is gone, or the peer refused
    /// the oldest).
    pub(super) fn take_all(&mut self) -> Vec<Unconfirmed> {
        self.poll_at = None;
        let mut out = Vec::with_capacity(self.marks.len());
        while let Some(run) = self.runs.front() {
            let (data, deadline, order) = (run.data.clone(), run.deadline, run.order);
            let number = self.first;
            let (mark, start) = self.pop().expect("a run has a frame");
            if self.refused.front().is_some_and(|&(n, _)| n == number) {
                self.refused.pop_front();
                continue;
            }
            out.push(Unconfirmed {
                frame: data.slice(start..mark.at),
                deadline,
                order,
            });
        }
        self.refused.clear();
        out
    }

    /// The peer refused the frame numbered `number`: it is taken back (to be written again or
    /// reported) and gives way to the frames after it, which are answered on their own. Gives
    /// the frame and its deadline, unless it no longer waits or was refused already.
    pub(super) fn refuse(&mut self, number: u64) -> Option<Unconfirmed> {
        if self.refused.iter().any(|&(n, _)| n == number) {
            return None;
        }
        let frame = self.frame(number)?;
        let i = (number - self.first) as usize;
        let mut left = i;
        let (mut deadline, mut order) = (None, 0);
        for run in &self.runs {
            if left < run.left {
                (deadline, order) = (run.deadline, run.order);
                break;
            }
            left -= run.left;
        }
        let at = self.refused.partition_point(|&(n, _)| n < number);
        self.refused.insert(at, (number, frame.len()));
        if self.is_empty() {
            self.poll_at = None;
            self.poll_every = POLL_FIRST;
        }
        Some(Unconfirmed {
            frame,
            deadline,
            order,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_confirmed_only_once_its_last_byte_is_acknowledged() {
        let t = Instant::now();
        let mut w = Window::new(false);
        w.wrote(t, 10);
        w.push_run(
            Bytes::from_static(b"aaaabbbbbb"),
            0,
            [(4, 4), (10, 10)],
            t,
            (None, 0),
        );
        let mut got = Vec::new();
        assert!(w.acked(t, 9, |n, len| got.push((n, len))));
        assert_eq!(got, [(1, 4)]);
        assert!(w.acked(t, 10, |n, len| got.push((n, len))));
        assert_eq!(got, [(1, 4), (1, 6)]);
        assert!(w.is_empty());
        assert_eq!(w.poll_at(), None);
    }

    #[test]
    fn a_count_beyond_what_was_written_or_going_back_is_not_trusted() {
        let t = Instant::now();
        let mut w = Window::new(false);
        w.wrote(t, 4);
        w.push_run(Bytes::from_static(b"aaaa"), 0, [(4, 4)], t, (None, 0));
        assert!(!w.acked(t, 5, |_, _| panic!("confirmed on a foreign count")));
        assert!(w.acked(t, 2, |_, _| panic!("confirmed early")));
        assert!(!w.acked(t, 1, |_, _| panic!("confirmed on a count going back")));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn the_poll_interval_doubles_while_due_readings_find_nothing_and_resets_on_progress() {
        let t = Instant::now();
        let mut w = Window::new(false);
        w.wrote(t, 4);
        w.push_run(Bytes::from_static(b"aaaa"), 0, [(4, 4)], t, (None, 0));
        assert_eq!(w.poll_at(), Some(t + POLL_FIRST));
        // Readings before the due time that find nothing new leave the schedule alone.
        for _ in 0..20 {
            w.acked(t, 0, |_, _| {});
        }
        assert_eq!(w.poll_at(), Some(t + POLL_FIRST));
        // The due reading finds nothing: the next comes twice as late.
        let due = t + POLL_FIRST;
        w.acked(due, 0, |_, _| {});
        assert_eq!(w.poll_at(), Some(due + POLL_FIRST * 2));
        w.acked(due, 0, |_, _| {});
        assert_eq!(w.poll_at(), Some(due + POLL_FIRST * 2));
        let mut now = due;
        for _ in 0..20 {
            now = w.poll_at().unwrap();
            w.acked(now, 0, |_, _| {});
        }
        assert_eq!(w.poll_at(), Some(now + POLL_MAX));
        // Progress, due or not, brings the next reading close again.
        w.acked(t, 1, |_, _| {});
        assert_eq!(w.poll_at(), Some(t + POLL_FIRST));
        // A reading that could not be taken counts as one that found nothing.
        w.no_reading(t);
        assert_eq!(w.poll_at(), Some(t + POLL_FIRST), "not due yet");
        w.no_reading(t + POLL_FIRST);
        assert_eq!(w.poll_at(), Some(t + POLL_FIRST + POLL_FIRST * 2));
    }

    #[test]
    fn frames_taken_back_are_slices_of_their_runs_in_order_with_their_deadlines() {
        let t = Instant::now();
        let later = Some(t + Duration::from_secs(1));
        let mut w = Window::new(false);
        w.wrote(t, 12);
        // A run whose first frame ("x") was confirmed before it came here.
        let data = Bytes::from_static(b"xaabbb");
        w.push_run(data.clone(), 1, [(3, 2), (6, 5)], t, (None, 0));
        w.push_run(Bytes::from_static(b"cccc"), 0, [(4, 9)], t, (later, 1));
        assert_eq!((w.len(), w.oldest()), (3, Some(t)));
        let mut confirmed = Vec::new();
        assert!(w.acked(t, 2, |n, len| confirmed.push((n, len))));
        assert_eq!(confirmed, [(1, 2)]);
        let back = w.take_all();
        assert_eq!(
            back,
            [
                Unconfirmed {
                    frame: Bytes::from_static(b"bbb"),
                    deadline: None,
                    order: 0,
                },
                Unconfirmed {
                    frame: Bytes::from_static(b"cccc"),
                    deadline: later,
                    order: 1,
                },
            ]
        );
        assert_eq!(
            back[0].frame.as_ptr(),
            data[3..].as_ptr(),
            "a slice, not a copy"
        );
        assert!(w.is_empty());
        assert_eq!(w.oldest(), None);
    }

    #[test]
    fn one_count_confirms_the_frames_it_covers_across_runs_at_once_and_keeps_the_rest() {
        let t = Instant::now();
        let mut w = Window::new(false);
        w.wrote(t, 12);
        w.push_run(
            Bytes::from_static(b"aabbb"),
            0,
            [(2, 2), (5, 5)],
            t,
            (None, 0),
        );
        w.push_run(
            Bytes::from_static(b"ccdd"),
            0,
            [(2, 7), (4, 9)],
            t,
            (None, 0),
        );
        let mut confirmed = Vec::new();
        // Covers both frames of the first run and the first of the second, not the last.
        assert!(w.acked(t, 8, |n, len| confirmed.push((n, len))));
        assert_eq!(
            confirmed,
            [(3, 7)],
            "one call: three frames, 2 + 3 + 2 bytes"
        );
        assert_eq!(w.len(), 1);
        let back = w.take_all();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].frame, Bytes::from_static(b"dd"));
    }

    #[test]
    fn an_answer_confirms_the_frames_numbered_below_it_and_a_frame_is_found_by_its_number() {
        let now = Instant::now();
        let mut w = Window::new(true);
        assert_eq!(w.next_number(), 0);
        w.push_run(
            Bytes::from_static(b"aabbb"),
            0,
            [(2, 2), (5, 5)],
            now,
            (None, 0),
        );
        w.push_run(Bytes::from_static(b"cccc"), 0, [(4, 9)], now, (None, 0));
        assert_eq!(w.next_number(), 3);
        assert_eq!(w.frame(1).as_deref(), Some(&b"bbb"[..]));
        assert_eq!(w.frame(2).as_deref(), Some(&b"cccc"[..]));
        let mut got = (0, 0);
        w.answered(2, 1, |n, len| got = (n, len));
        assert_eq!(got, (1, 2));
        assert_eq!(w.frame(0), None);
        assert_eq!(w.frame(1).as_deref(), Some(&b"bbb"[..]));
        // An answer whose frames are confirmed already confirms nothing more.
        w.answered(2, 1, |_, _| panic!("nothing left below 1"));
        let rest = w.take_all();
        assert_eq!(rest.len(), 2);
        assert_eq!(w.next_number(), 3);
    }

    #[test]
    fn going_blind_confirms_every_waiting_frame_with_its_bytes() {
        let t = Instant::now();
        let mut w = Window::new(false);
        w.wrote(t, 5);
        w.push_run(
            Bytes::from_static(b"abcde"),
            0,
            [(2, 2), (5, 5)],
            t,
            (None, 0),
        );
        let mut confirmed = None;
        w.go_blind(|n, len| confirmed = Some((n, len)));
        assert_eq!(confirmed, Some((2, 5)));
        assert!(w.is_empty() && w.is_blind());
        assert_eq!(w.poll_at(), None);
    }
}
