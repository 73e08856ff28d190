//! Looking before sleeping: a thread about to sleep until another thread hands it something
//! looks for it a little while first, giving its core away between looks.
//!
//! On a machine whose cores are idle, waking a sleeping thread costs tens of microseconds
//! (docs/design.md, "The round trip"), more than a round trip through the link's
//! socket. A caller that waits for a reply looks before it sleeps, so a reply that comes
//! within the look is taken without that wake-up; a longer wait costs the look once, then
//! sleeps without CPU.
//!
//! How long to look is learnt from the waits that follow a look that found nothing
//! ([`LookSpan`]), as a guest kernel's haltpoll governor learns how long to poll before it
//! halts: what came soon after the look would have been caught by a longer one, and a long
//! wait says that looking costs CPU for nothing. Only where a reply is waited for: after a
//! write on a link whose replies come soon after its writes ([`Replies`]), and for a
//! request's reply, between [`LOOK`] and [`LOOK_MAX`] ([`LookSpan::reply`]). Elsewhere, on a
//! stream coming in or going out, a look lasts at most [`LOOK`] ([`LookSpan::stream`]), and
//! none at all once frames come further apart than that: a longer look would catch every
//! frame of a slow stream and so never end (measured: a link receiving or sending a frame
//! every 200 µs used twice the CPU with reply looks on its stream), and a short one that
//! misses costs its yielding and the wake-up both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether the threads that wait on a link look for what they wait for before they sleep: a
/// request's reply, the link's next event, the IO thread's next input after a write. Given to
/// [`Builder::looks`](crate::Builder::looks). A `send` waiting for room is not one of them.
///
/// Each frame passes three threads: the application's, relink's IO thread and libzmq's. A
/// thread that sleeps and is woken costs 10–20 µs of CPU on a virtual machine; a round trip
/// through the three threads and the peer lasts 60–150 µs there, so a look that waits for a
/// reply spins for longer than the wake-up it saves. [`Looks::Never`], the default, sleeps at
/// once: the least CPU, 0.87–1.22 × the least a client of this shape costs at a frame every
/// 200 µs or 2 ms (docs/benchmarks.md, "Paced traffic"). [`Looks::Learnt`] spends CPU to save
/// the wake-ups where a reply is due soon: the shortest round trip. Streams coming in or going
/// out at a steady pace cost the same under both: their looks shrink to none.
///
/// `cargo bench --bench paced -- --quick` prints both beside the least a client of this
/// shape costs (`card_ratio`, `learnt_card_ratio`) and their round trips.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::Looks;
///
/// // A client whose request round trip matters more than the core it spends waiting.
/// let link = Link::builder("tcp://127.0.0.1:7000").looks(Looks::Learnt).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Looks {
    /// Look before sleeping, for as long as the link's traffic says it wins: a thread about to
    /// sleep until a reply comes looks for it first, yielding its core between looks, for
    /// 30–250 µs learnt from how soon replies come; a thread waiting on a stream looks for at
    /// most 30 µs, and not at all once frames come further apart. The shortest round trip,
    /// for more CPU.
    Learnt,
    /// Never look: every wait that finds nothing sleeps at once and costs a wake-up, and no
    /// CPU is spent looking. The default: the least CPU.
    #[default]
    Never,
}

/// The longest look on a stream, and the shortest for a reply; the first of both.
pub(crate) const LOOK: Duration = Duration::from_micros(30);

/// The longest look for a reply.
pub(crate) const LOOK_MAX: Duration = Duration::from_micros(250);

/// The smallest look a stream's look grows to from none.
const LOOK_STEP: u64 = 5;

/// How long a thread looks before it sleeps, between a least and a most, learnt from the
/// waits of the looks that found nothing, each counted from the start of its look to what
/// ended it: one that ended with something coming within the most doubles the look (a look
/// that long would have caught it); one longer than that halves it. A wait that ended at its
/// own timeout within the most says nothing. Shared by the threads that wait on one link; a
/// stale read only looks a little longer or shorter.
#[derive(Debug)]
pub(crate) struct LookSpan {
    micros: AtomicU64,
    min: u64,
    max: u64,
}

impl LookSpan {
    /// A look for a reply: [`LOOK`] to [`LOOK_MAX`].
    pub(crate) const fn reply() -> LookSpan {
        LookSpan::between(LOOK.as_micros() as u64, LOOK_MAX.as_micros() as u64)
    }

    /// A look on a stream: none to [`LOOK`].
    pub(crate) const fn stream() -> LookSpan {
        LookSpan::between(0, LOOK.as_micros() as u64)
    }

    /// No look at all ([`Looks::Never`]).
    pub(crate) const fn none() -> LookSpan {
        LookSpan {
            micros: AtomicU64::new(0),
            min: 0,
            max: 0,
        }
    }

    /// A reply's and a stream's looks for a link that waits so.
    pub(crate) const fn for_looks(looks: Looks) -> (LookSpan, LookSpan) {
        match looks {
            Looks::Learnt => (LookSpan::reply(), LookSpan::stream()),
            Looks::Never => (LookSpan::none(), LookSpan::none()),
        }
    }

    const fn between(min: u64, max: u64) -> LookSpan {
        LookSpan {
            micros: AtomicU64::new(LOOK.as_micros() as u64),
            min,
            max,
        }
    }

    /// How long to look now.
    pub(crate) fn get(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    /// A look that found nothing and the wait after it ended `waited` after the look
    /// began, with something that came (`came`) or at its timeout.
    pub(crate) fn waited(&self, waited: Duration, came: bool) {
        let now = self.micros.load(Ordering::Relaxed);
        let next = if waited.as_micros() > u128::from(self.max) {
            now / 2
        } else if came {
            now.saturating_mul(2).max(LOOK_STEP)
        } else {
            return;
        };
        let next = if next < LOOK_STEP { 0 } else { next };
        self.micros
            .store(next.clamp(self.min, self.max), Ordering::Relaxed);
    }
}

/// Whether a link's replies come soon after its writes, as requests and their replies do,
/// learnt from its passes: frames that come within [`LOOK_MAX`] of a write, with at most
/// [`REPLY_WRITES`] passes that wrote since frames last came, say yes; frames that come later,
/// or with no write before them (a stream coming in), or after many writes (a stream going
/// out), say no.
#[derive(Debug, Default)]
pub(crate) struct Replies {
    sent_at: Option<Instant>,
    /// Passes that wrote since frames last came.
    writes: u32,
    replying: bool,
}

/// Passes that wrote since frames last came, at most, for the frames that come to count as
/// replies: a request can go out in two batches.
const REPLY_WRITES: u32 = 2;

impl Replies {
    /// One pass: whether it wrote application frames and whether frames came (it reads
    /// before it writes). Returns whether the link's replies come soon after its writes.
    pub(crate) fn pass(&mut self, now: Instant, wrote: bool, came: bool) -> bool {
        if came {
            let soon = self
                .sent_at
                .is_some_and(|at| now.saturating_duration_since(at) <= LOOK_MAX);
            self.replying = soon && (1..=REPLY_WRITES).contains(&self.writes);
            self.writes = 0;
        }
        if wrote {
            self.sent_at = Some(now);
            self.writes = self.writes.saturating_add(1);
        }
        self.replying
    }

    pub(crate) fn replying(&self) -> bool {
        self.replying
    }
}

impl Default for LookSpan {
    fn default() -> LookSpan {
        LookSpan::reply()
    }
}

/// Calls `find` until it gives something, for up to `window`'s look (or until `deadline`,
/// if earlier), yielding the core between calls; `None` if nothing came.
///
/// `find` is called at least twice, before and after one yield, however long the yield
/// takes: on a loaded machine a yield can outlast the whole bound, and the look after it is
/// the one that sees what the other thread handed over meanwhile. A span at zero (a stream's
/// whose frames come further apart than its most, or [`Looks::Never`]) calls it once: no
/// look, no yield.
pub(crate) fn look<T>(
    window: &LookSpan,
    deadline: Option<Instant>,
    mut find: impl FnMut() -> Option<T>,
) -> Option<T> {
    if let Some(found) = find() {
        return Some(found);
    }
    let span = window.get();
    if span.is_zero() {
        return None;
    }
    let start = Instant::now();
    let bound = start + span;
    let until = deadline.map_or(bound, |d| d.min(bound));
    loop {
        std::thread::yield_now();
        if let Some(found) = find() {
            return Some(found);
        }
        if Instant::now() >= until {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_gives_what_comes_and_gives_up_after_its_bound() {
        let window = LookSpan::reply();
        let mut calls = 0;
        assert_eq!(
            look(&window, Some(Instant::now()), || {
                calls += 1;
                (calls == 2).then_some(calls)
            }),
            Some(2),
            "what comes after the first call is seen, even past the deadline"
        );
        let start = Instant::now();
        assert_eq!(look(&window, None, || None::<()>), None);
        assert!(start.elapsed() >= LOOK, "looked for its whole bound");
        let mut calls = 0;
        let past = Instant::now();
        assert_eq!(
            look(&window, Some(past), || {
                calls += 1;
                None::<()>
            }),
            None
        );
        assert_eq!(
            calls, 2,
            "a deadline already past ends the look after one yield"
        );
    }

    #[test]
    fn a_span_that_never_looks_asks_once_and_learns_nothing() {
        let (reply, stream) = LookSpan::for_looks(Looks::Never);
        for span in [&reply, &stream] {
            let mut calls = 0;
            assert_eq!(
                look(span, None, || {
                    calls += 1;
                    None::<()>
                }),
                None
            );
            assert_eq!(calls, 1, "no yield, no second call");
            span.waited(Duration::from_micros(10), true);
            assert_eq!(span.get(), Duration::ZERO, "a wait does not make it look");
        }
        let (reply, _) = LookSpan::for_looks(Looks::Learnt);
        let mut calls = 0;
        look(&reply, None, || {
            calls += 1;
            None::<()>
        });
        assert!(calls >= 2, "the learnt span looks");
        // A stream whose frames come further apart than its most stops looking, and yields
        // no more; one that comes soon after a look makes it look again.
        let stream = LookSpan::stream();
        for _ in 0..4 {
            stream.waited(Duration::from_micros(2_000), true);
        }
        assert_eq!(stream.get(), Duration::ZERO);
        let mut calls = 0;
        look(&stream, None, || {
            calls += 1;
            None::<()>
        });
        assert_eq!(calls, 1, "a stream's look at zero asks once");
        stream.waited(Duration::from_micros(10), true);
        assert_eq!(stream.get(), Duration::from_micros(LOOK_STEP));
    }

    #[test]
    fn replies_are_frames_that_come_soon_after_a_write_and_streams_are_not() {
        let us = Duration::from_micros;
        let t0 = Instant::now();
        // Request and reply: a write, the reply 60 µs later, again.
        let mut r = Replies::default();
        assert!(!r.pass(t0, true, false), "nothing came yet");
        assert!(r.pass(t0 + us(60), false, true));
        assert!(r.pass(t0 + us(100), true, false));
        assert!(r.pass(t0 + us(160), false, true));
        // A reply later than LOOK_MAX is not one the looks should wait for.
        assert!(r.pass(t0 + us(200), true, false));
        assert!(!r.pass(t0 + us(200) + LOOK_MAX + us(1), false, true));
        // A stream coming in: frames with no write before them.
        let mut r = Replies::default();
        for i in 0..10 {
            assert!(!r.pass(t0 + us(200 * i), false, true));
        }
        // A stream going out, with a frame coming now and then: many writes before it.
        let mut r = Replies::default();
        for i in 0..10 {
            assert!(!r.pass(t0 + us(200 * i), true, false));
        }
        assert!(!r.pass(t0 + us(2_010), false, true));
        // Pipelined requests: each pass reads replies and writes requests.
        let mut r = Replies::default();
        assert!(!r.pass(t0, true, false));
        for i in 1..10 {
            assert!(r.pass(t0 + us(50 * i), true, true));
        }
    }

    #[test]
    fn a_look_grows_while_what_it_missed_comes_soon_and_shrinks_when_waits_are_long() {
        let window = LookSpan::reply();
        assert_eq!(window.get(), LOOK);
        let us = Duration::from_micros;
        // Something came 40 µs after the look: twice as long, up to the bound.
        window.waited(us(40), true);
        assert_eq!(window.get(), LOOK * 2);
        for _ in 0..10 {
            window.waited(us(40), true);
        }
        assert_eq!(window.get(), LOOK_MAX);
        // A timeout within the bound says nothing; a wait beyond it halves, down to LOOK.
        window.waited(us(100), false);
        assert_eq!(window.get(), LOOK_MAX);
        window.waited(LOOK_MAX + us(1), true);
        assert_eq!(window.get(), LOOK_MAX / 2);
        for _ in 0..10 {
            window.waited(Duration::from_secs(1), false);
        }
        assert_eq!(window.get(), LOOK);
    }

    #[test]
    fn a_streams_look_goes_once_frames_come_further_apart_and_comes_back_when_they_close_up() {
        let window = LookSpan::stream();
        assert_eq!(window.get(), LOOK);
        let us = Duration::from_micros;
        // A frame every 200 µs: no look of up to 30 µs catches one.
        for _ in 0..5 {
            window.waited(us(200), true);
        }
        assert_eq!(window.get(), Duration::ZERO);
        // Frames 20 µs apart: a look would catch them, and grows back, up to LOOK.
        window.waited(us(20), true);
        assert_eq!(window.get(), us(LOOK_STEP));
        for _ in 0..5 {
            window.waited(us(20), true);
        }
        assert_eq!(window.get(), LOOK);
    }
}
