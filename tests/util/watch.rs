//! One way to follow a link's events. A [`Watch`] takes them from the link's channel on the
//! test thread and keeps them by kind; [`Watch::until`] is the one way to wait for a
//! transition (bounded, panicking with [`Watch::trace`], the one way to print what was seen).
//! A [`Drained`] is the same record taken by a thread of its own ([`spawn_drainer`]), for
//! tests whose main thread is busy sending.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use relink::error::LinkError;
use relink::{AbandonReason, Builder, Cause, Event, Events, Link, Metrics, State, Transition};

use super::checks::timed_close;

/// Bound on taking the events left after `close`.
const FINISH: Duration = Duration::from_secs(5);

/// Everything a link reported, taken from its event channel by the test thread.
pub struct Watch {
    events: Events,
    /// Each transition, with the instant the test received it.
    pub transitions: Vec<(Instant, Transition)>,
    /// Frames received.
    pub frames: Vec<Vec<u8>>,
    /// Frames given back, with the reason.
    pub abandoned: Vec<(Vec<u8>, AbandonReason)>,
    /// Errors reported.
    pub errors: Vec<LinkError>,
    /// For each transition (same index as `transitions`), how many frames came before it:
    /// the order of frames and state changes in the event stream.
    pub frames_before: Vec<usize>,
}

impl Watch {
    /// Watches the events of `link`.
    pub fn new(link: &Link) -> Watch {
        Watch::on(link.events())
    }

    /// Watches an event channel (a clone of a link's).
    pub fn on(events: &Events) -> Watch {
        Watch {
            events: events.clone(),
            transitions: Vec::new(),
            frames: Vec::new(),
            abandoned: Vec::new(),
            errors: Vec::new(),
            frames_before: Vec::new(),
        }
    }

    /// Keeps one event; the transition, if it is one.
    pub fn record(&mut self, ev: Event) -> Option<Transition> {
        match ev {
            Event::State(t) => {
                self.transitions.push((Instant::now(), t.clone()));
                self.frames_before.push(self.frames.len());
                Some(t)
            }
            Event::Frame(f) => {
                self.frames.push(f.into());
                None
            }
            Event::Abandoned { frame, reason } => {
                self.abandoned.push((frame.into(), reason));
                None
            }
            Event::Error(e) => {
                self.errors.push(e);
                None
            }
            _ => None,
        }
    }

    /// Takes events until a transition satisfies `f`; returns it with the instant it was
    /// received, or None at `timeout`.
    pub fn try_until(
        &mut self,
        timeout: Duration,
        f: impl Fn(&Transition) -> bool,
    ) -> Option<(Instant, Transition)> {
        let deadline = Instant::now() + timeout;
        loop {
            let ev = self.events.recv_deadline(deadline).ok()?;
            if let Some(t) = self.record(ev) {
                if f(&t) {
                    return Some((self.transitions.last().expect("just pushed").0, t));
                }
            }
        }
    }

    /// Takes events until a transition satisfies `f`; returns it with the instant it was
    /// received. Panics at `timeout` with every transition seen so far.
    pub fn until(
        &mut self,
        timeout: Duration,
        f: impl Fn(&Transition) -> bool,
    ) -> (Instant, Transition) {
        self.try_until(timeout, f).unwrap_or_else(|| {
            panic!(
                "no matching transition within {timeout:?}; seen: {}",
                self.trace()
            )
        })
    }

    /// Takes events until a transition satisfies `which`, asserts that it is the step
    /// `(from, to, cause)` (panicking with every transition seen otherwise), and returns it
    /// with the instant it was received.
    pub fn expect_step(
        &mut self,
        timeout: Duration,
        which: impl Fn(&Transition) -> bool,
        want: (State, State, Cause),
    ) -> (Instant, Transition) {
        let (at, t) = self.until(timeout, which);
        assert_eq!((t.from, t.to, t.cause), want, "{}", self.trace());
        (at, t)
    }

    /// [`Watch::expect_step`] for the link leaving Ready: it must go to Backoff for `cause`.
    pub fn left_ready(&mut self, timeout: Duration, cause: Cause) -> Instant {
        self.expect_step(
            timeout,
            |t| t.from == State::Ready,
            (State::Ready, State::Backoff, cause),
        )
        .0
    }

    /// `close(timeout)` within its bound ([`timed_close`]), then every event left.
    pub fn close(&mut self, link: &Link, timeout: Duration, what: &str) -> (Metrics, Duration) {
        let closed = timed_close(link, timeout, what);
        self.finish();
        closed
    }

    /// Takes events until the link enters `state`; the transition that entered it.
    pub fn until_state(&mut self, state: State, timeout: Duration) -> Transition {
        self.until(timeout, |t| t.to == state).1
    }

    /// The transitions up to and including the first into `state`, each with the instant it
    /// was received. Panics at `timeout` with every transition seen so far.
    pub fn through(&mut self, state: State, timeout: Duration) -> Vec<(Instant, Transition)> {
        let mark = self.transitions.len();
        self.until(timeout, |t| t.to == state);
        self.transitions[mark..].to_vec()
    }

    /// The next transition, which must come within `timeout`.
    pub fn next(&mut self, timeout: Duration) -> (Instant, Transition) {
        self.until(timeout, |_| true)
    }

    /// Takes events until what was seen satisfies `f`; false at the timeout.
    pub fn until_seen(&mut self, timeout: Duration, mut f: impl FnMut(&Watch) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while !f(self) {
            match self.events.recv_deadline(deadline) {
                Ok(ev) => {
                    self.record(ev);
                }
                Err(_) => return false,
            }
        }
        true
    }

    /// Takes events until what was seen satisfies `f`; panics at `timeout`, naming `what` and
    /// listing every transition seen.
    pub fn expect_seen(&mut self, timeout: Duration, what: &str, f: impl FnMut(&Watch) -> bool) {
        if !self.until_seen(timeout, f) {
            panic!(
                "waiting for {what} within {timeout:?}; {} frames, errors {:?}, seen: {}",
                self.frames.len(),
                self.errors,
                self.trace()
            );
        }
    }

    /// Whether a transition into `state` was seen at or after transition number `from`.
    pub fn entered_since(&self, from: usize, state: State) -> bool {
        self.transitions[from.min(self.transitions.len())..]
            .iter()
            .any(|(_, t)| t.to == state)
    }

    /// Takes events until the link entered `state` at or after transition number `from`
    /// (at once if it already did); panics at `timeout`.
    pub fn until_entered(&mut self, from: usize, state: State, timeout: Duration) {
        self.expect_seen(timeout, &format!("state {state}"), |w| {
            w.entered_since(from, state)
        });
    }

    /// Takes events until `n` frames arrived in all; false at the timeout.
    pub fn frames_until(&mut self, n: usize, timeout: Duration) -> bool {
        self.until_frames(timeout, |f| f.len() >= n)
    }

    /// Takes events until the frames received so far satisfy `f`; false at the timeout.
    pub fn until_frames(&mut self, timeout: Duration, f: impl Fn(&[Vec<u8>]) -> bool) -> bool {
        self.until_seen(timeout, |w| f(&w.frames))
    }

    /// Takes events for `d`; the first transition among them, if any.
    pub fn quiet_for(&mut self, d: Duration) -> Option<Transition> {
        let deadline = Instant::now() + d;
        let mut first = None;
        while let Ok(ev) = self.events.recv_deadline(deadline) {
            if let Some(t) = self.record(ev) {
                first.get_or_insert(t);
            }
        }
        first
    }

    /// Takes every event waiting now.
    pub fn drain(&mut self) {
        while let Ok(ev) = self.events.try_recv() {
            self.record(ev);
        }
    }

    /// After `close`: takes events until the channel is exhausted (bounded).
    pub fn finish(&mut self) {
        let deadline = Instant::now() + FINISH;
        while let Ok(ev) = self.events.recv_deadline(deadline) {
            self.record(ev);
        }
        assert!(
            Instant::now() < deadline,
            "the event channel was not exhausted after close"
        );
    }

    /// Transitions received from index `from` on.
    pub fn since(&self, from: usize) -> Vec<Transition> {
        self.transitions[from..]
            .iter()
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// How many times the link entered `state`.
    pub fn entered(&self, state: State) -> usize {
        self.transitions
            .iter()
            .filter(|(_, t)| t.to == state)
            .count()
    }

    /// Every transition seen, for failure messages.
    pub fn trace(&self) -> String {
        show(&self.since(0))
    }
}

/// A builder for a link to `endpoint` with the lines codec.
pub fn lines_to(endpoint: &str) -> Builder {
    Link::builder(endpoint).framing(relink::framing::Lines::new())
}

/// Builds the link `b` describes and starts watching its events.
pub fn watched(b: Builder) -> (Link, Watch) {
    let link = b.build().expect("build");
    let w = Watch::new(&link);
    (link, w)
}

/// Transitions as `from->to(cause,attempt=n)`, for failure messages.
pub fn show(ts: &[Transition]) -> String {
    let parts: Vec<String> = ts
        .iter()
        .map(|t| format!("{}->{}({},attempt={})", t.from, t.to, t.cause, t.attempt))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// [`show`] for transitions stamped with the instant they were received.
pub fn show_stamped(ts: &[(Instant, Transition)]) -> String {
    show(&ts.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>())
}

/// A redial that succeeds: Backoff -(retry-timer)-> Connecting -> Connected -(alive)-> Ready.
pub fn redial_step(t: &Transition) -> bool {
    matches!(
        (t.from, t.to, t.cause),
        (State::Backoff, State::Connecting, Cause::RetryTimer)
            | (State::Connecting, State::Connected, Cause::TcpConnected)
            | (State::Connected, State::Ready, Cause::Alive)
    )
}

/// A link that keeps failing for `cause`: Idle -(start)-> Connecting -(cause)-> Backoff
/// -(retry-timer)-> Connecting, over again.
pub fn retry_step(t: &Transition, cause: Cause) -> bool {
    matches!(
        (t.from, t.to, t.cause),
        (State::Idle, State::Connecting, Cause::Start)
            | (State::Backoff, State::Connecting, Cause::RetryTimer)
    ) || (t.from, t.to, t.cause) == (State::Connecting, State::Backoff, cause)
}

/// The longest time between a transition into `first` and the transition right after it,
/// when that one goes into `then` (zero when there is no such pair).
pub fn slowest_between(stamped: &[(Instant, Transition)], first: State, then: State) -> Duration {
    stamped
        .windows(2)
        .filter(|pair| pair[0].1.to == first && pair[1].1.to == then)
        .map(|pair| pair[1].0 - pair[0].0)
        .max()
        .unwrap_or_default()
}

/// Builds the link `b` describes and drains its events on a thread of its own
/// ([`spawn_drainer`]); returns the link, the count of Ready transitions so far and the
/// drainer.
pub fn drained(b: Builder) -> (Link, Arc<AtomicUsize>, thread::JoinHandle<Drained>) {
    let link = b.build().expect("build the link");
    let ready = Arc::new(AtomicUsize::new(0));
    let drainer = spawn_drainer(link.events(), ready.clone());
    (link, ready, drainer)
}

/// Asserts that every transition in `ts` is one `allowed` admits.
pub fn assert_only(ts: &[Transition], what: &str, allowed: impl Fn(&Transition) -> bool) {
    if let Some(bad) = ts.iter().find(|t| !allowed(t)) {
        panic!(
            "{what}: unexpected transition {}->{}({}); all: {}",
            bad.from,
            bad.to,
            bad.cause,
            show(ts)
        );
    }
}

/// The delay a backoff of `base`, factor 2 and cap `max` draws around after `attempt`
/// failures in a row, before jitter.
pub fn nominal(base: Duration, max: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.saturating_sub(1).min(20))
        .min(max)
}

/// Asserts that each Backoff's delay is its nominal delay ± 10 % (proportional jitter).
pub fn assert_delays_follow(backoffs: &[&Transition], base: Duration, max: Duration, what: &str) {
    for t in backoffs {
        let d = t.next_retry.expect("a Backoff carries its delay");
        let n = nominal(base, max, t.attempt);
        assert!(
            d >= n.mul_f64(0.9) && d <= n.mul_f64(1.1),
            "{what}: attempt {} drew {d:?}, not within 10 % of {n:?}",
            t.attempt
        );
    }
}

/// What a thread draining a link's events saw, once the link closed.
#[derive(Debug, Default)]
pub struct Drained {
    /// Each transition, with the instant the thread received it.
    pub transitions: Vec<(Instant, Transition)>,
    /// Frames given back, with the reason.
    pub abandoned: Vec<(Vec<u8>, AbandonReason)>,
    /// Errors reported.
    pub errors: Vec<LinkError>,
    /// How many frames arrived.
    pub frames: usize,
}

/// Takes every event of `events` on a thread of its own until the link is closed, counting
/// transitions to Ready in `ready`.
pub fn spawn_drainer(events: &Events, ready: Arc<AtomicUsize>) -> thread::JoinHandle<Drained> {
    let events = events.clone();
    thread::spawn(move || {
        let mut d = Drained::default();
        // Ends when the link is closed and every event was taken.
        while let Ok(ev) = events.recv() {
            match ev {
                Event::State(t) => {
                    if t.to == State::Ready {
                        ready.fetch_add(1, Ordering::SeqCst);
                    }
                    d.transitions.push((Instant::now(), t));
                }
                Event::Abandoned { frame, reason } => d.abandoned.push((frame.into(), reason)),
                Event::Error(e) => d.errors.push(e),
                Event::Frame(_) => d.frames += 1,
                _ => {}
            }
        }
        d
    })
}
