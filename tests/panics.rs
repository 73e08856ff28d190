//! Application code that panics never takes a link down silently (issue 18): a panic in a
//! predicate or the resolver is caught where relink calls it, reported in an error event that
//! names the callback, and treated as a failure of the connection (cause `callback-panic`):
//! the link backs off and tries again. A panic in relink's own IO thread closes that link and
//! nothing else; every blocked caller returns.
//!
//! (A codec cannot panic yet: the codecs are relink's own. The codec calls are guarded all the
//! same; their test comes with user codecs.)
//!
//! The panics below print to stderr through the default panic hook; that is expected.
//! `Seen` is local: the kit's `Watch` keeps transitions, and these tests need the error events
//! in order with them.

mod util;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink::config::Jitter;
use relink::error::{Callback, LinkError, SendError};
use relink::protocol::{Handshake, Ping, Predicate};
use relink::{Cause, Event, Heartbeat, Link, Overflow, State, Transition};
use util::{Behaviour, Peer};

/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(5);
/// How promptly a blocked caller must return once the IO thread is gone.
const PROMPT: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Calls that panic with `boom` on the first call, or on every call.
#[derive(Clone, Copy, Debug)]
enum Panics {
    FirstCall,
    EveryCall,
}

impl Panics {
    /// Panics when this call (counted from 0) should.
    fn maybe(self, calls: &AtomicU32) {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        if matches!(self, Panics::EveryCall) || n == 0 {
            panic!("boom");
        }
    }
}

/// A predicate that panics as told, and otherwise answers `answer`.
fn predicate(panics: Panics, answer: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> Predicate {
    let calls = AtomicU32::new(0);
    Predicate::new(move |f| {
        panics.maybe(&calls);
        answer(f)
    })
}

/// The ping of [`echoed_pings`].
const PING: &[u8] = b"PING";

/// A heartbeat every 50 ms whose `reply` predicate panics as told and otherwise takes the
/// echoed ping for its pong (the peers here echo).
fn echoed_pings(panics: Panics) -> Heartbeat {
    Heartbeat::new(ms(50), Ping::Frame(PING.to_vec())).reply(predicate(panics, |f| f == PING))
}

/// A resolver that panics as told, and otherwise answers 127.0.0.1:`port`. Counts its calls.
fn resolver(
    panics: Panics,
    port: u16,
    calls: Arc<AtomicU32>,
) -> impl Fn(&str, u16) -> Result<Vec<SocketAddr>, String> + Send + Sync + 'static {
    move |_host: &str, _| {
        panics.maybe(&calls);
        Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
    }
}

/// A lines link with a quick, deterministic backoff.
fn builder(endpoint: &str) -> relink::Builder {
    util::lines_to(endpoint).reconnect(|r| {
        r.native_retries = 0;
        r.backoff_base = ms(40);
        r.backoff_max = ms(2000);
        r.jitter = Jitter::None;
    })
}

/// Everything the application saw, in order.
#[derive(Default)]
struct Seen(Vec<Event>);

impl Seen {
    /// Receives (and prints) events until one satisfies `f`; panics at `timeout`.
    fn until(&mut self, link: &Link, timeout: Duration, f: impl Fn(&Event) -> bool) -> Event {
        let deadline = Instant::now() + timeout;
        loop {
            match link.events().recv_deadline(deadline) {
                Ok(ev) => {
                    println!("  {}", show(&ev));
                    self.0.push(ev.clone());
                    if f(&ev) {
                        return ev;
                    }
                }
                Err(e) => panic!(
                    "no matching event within {timeout:?} ({e}); seen: {:#?}",
                    self.0
                ),
            }
        }
    }

    fn transitions(&self) -> Vec<&Transition> {
        self.0
            .iter()
            .filter_map(|e| match e {
                Event::State(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    fn panics(&self) -> Vec<(Callback, Option<String>)> {
        self.0
            .iter()
            .filter_map(|e| match e {
                Event::Error(LinkError::CallbackPanicked { callback, message }) => {
                    Some((*callback, message.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

fn show(ev: &Event) -> String {
    match ev {
        Event::State(t) => format!(
            "State {} -> {} ({}) attempt={} next_retry={:?}",
            t.from, t.to, t.cause, t.attempt, t.next_retry
        ),
        Event::Error(e) => format!("Error({e})"),
        Event::Frame(f) => format!("Frame({:?})", String::from_utf8_lossy(f)),
        other => format!("{other:?}"),
    }
}

fn is_ready(ev: &Event) -> bool {
    matches!(ev, Event::State(t) if t.to == State::Ready)
}

fn is_frame(ev: &Event, want: &[u8]) -> bool {
    matches!(ev, Event::Frame(f) if f == want)
}

fn is_panic_backoff(ev: &Event) -> bool {
    matches!(ev, Event::State(t) if t.cause == Cause::CallbackPanic)
}

/// The error event comes right before the transition it caused, names the callback and
/// carries the message; the transition leaves `from` with cause callback-panic.
fn assert_reported(seen: &Seen, callback: Callback, from: State) {
    let i = seen
        .0
        .iter()
        .position(is_panic_backoff)
        .expect("a callback-panic transition");
    assert_eq!(
        seen.0[i - 1],
        Event::Error(LinkError::CallbackPanicked {
            callback,
            message: Some("boom".into())
        }),
        "the error event comes just before the transition"
    );
    match &seen.0[i] {
        Event::State(t) => {
            assert_eq!((t.from, t.to), (from, State::Backoff), "{t:?}");
            assert!(t.next_retry.is_some());
        }
        _ => unreachable!(),
    }
    if let Event::Error(e) = &seen.0[i - 1] {
        assert_eq!(e.to_string(), format!("{callback} panicked: boom"));
    }
}

/// Waits until the link has backed off after `n` callback panics; returns the delays drawn
/// for them, in order.
fn panic_delays(link: &Link, seen: &mut Seen, n: usize) -> Vec<Duration> {
    while seen
        .transitions()
        .iter()
        .filter(|t| t.cause == Cause::CallbackPanic)
        .count()
        < n
    {
        seen.until(link, T, is_panic_backoff);
    }
    seen.transitions()
        .iter()
        .filter(|t| t.cause == Cause::CallbackPanic)
        .map(|t| t.next_retry.expect("a delay"))
        .collect()
}

// ----- predicates ---------------------------------------------------------------------------

#[test]
fn a_reply_predicate_that_panics_once_is_reported_and_the_link_recovers() {
    // The echo peer answers each ping with the ping itself: the predicate is asked about a
    // frame only while a ping waits for its pong, so its first call is on the first echo.
    let peer = Peer::start(Behaviour::Echo);
    let link = builder(&peer.endpoint())
        .heartbeat(echoed_pings(Panics::FirstCall))
        .build()
        .unwrap();
    println!("events seen by the application:");
    let mut seen = Seen::default();
    seen.until(&link, T, is_ready);
    seen.until(&link, T, is_ready);
    assert_reported(&seen, Callback::HeartbeatReply, State::Ready);
    assert!(
        !seen.0.iter().any(|e| is_frame(e, PING)),
        "the frame the predicate panicked on is not delivered"
    );

    link.send(b"again".to_vec()).unwrap();
    seen.until(&link, T, |e| is_frame(e, b"again"));
    assert_eq!(link.state(), State::Ready);
    let m = link.metrics();
    println!(
        "metrics: state={} callback_panics={} connects={} consecutive_failures={}",
        m.state, m.callback_panics, m.connects, m.consecutive_failures
    );
    assert_eq!(
        (m.state, m.callback_panics, m.connects),
        (State::Ready, 1, 2)
    );
    assert_eq!(seen.panics().len(), 1);
    let m = link.close(T);
    assert_eq!((m.state, m.callback_panics), (State::Closed, 1));
}

#[test]
fn a_reply_predicate_that_always_panics_keeps_the_link_backing_off_with_growing_delays() {
    // Every connection's first ping comes back for the predicate.
    let peer = Peer::start(Behaviour::Echo);
    let link = builder(&peer.endpoint())
        .heartbeat(echoed_pings(Panics::EveryCall))
        .build()
        .unwrap();
    let mut seen = Seen::default();
    let delays = panic_delays(&link, &mut seen, 4);
    assert!(
        delays.windows(2).all(|w| w[0] < w[1]),
        "the backoff grows: {delays:?}"
    );
    assert_reported(&seen, Callback::HeartbeatReply, State::Ready);
    assert!(seen.panics().len() >= 4);
    assert!(!seen.0.iter().any(|e| matches!(e, Event::Frame(_))));
    let m = link.metrics();
    assert!(m.callback_panics >= 4, "{m:?}");
    assert!(m.consecutive_failures >= 4, "{m:?}");
    assert_ne!(m.state, State::Closed);
    assert_eq!(link.close(T).state, State::Closed);
}

#[test]
fn a_handshake_predicate_that_panics_once_is_reported_and_the_link_recovers() {
    let peer = Peer::start(Behaviour::Echo);
    let hs = Handshake::new(
        vec![b"HELLO".to_vec()],
        predicate(Panics::FirstCall, |f| f == b"HELLO"),
    );
    let link = builder(&peer.endpoint()).protocol(hs).build().unwrap();
    let mut seen = Seen::default();
    seen.until(&link, T, is_ready);
    assert_reported(&seen, Callback::Protocol, State::Connected);
    link.send(b"after".to_vec()).unwrap();
    seen.until(&link, T, |e| is_frame(e, b"after"));
    let m = link.close(T);
    assert_eq!((m.callback_panics, m.connects), (1, 2));
}

#[test]
fn a_handshake_predicate_that_always_panics_never_makes_the_link_ready() {
    let peer = Peer::start(Behaviour::Echo);
    let hs = Handshake::new(
        vec![b"HELLO".to_vec()],
        predicate(Panics::EveryCall, |_| true),
    );
    let link = builder(&peer.endpoint()).protocol(hs).build().unwrap();
    let mut seen = Seen::default();
    let delays = panic_delays(&link, &mut seen, 4);
    assert!(delays.windows(2).all(|w| w[0] < w[1]), "{delays:?}");
    assert_reported(&seen, Callback::Protocol, State::Connected);
    assert!(!seen.transitions().iter().any(|t| t.to == State::Ready));
    assert!(link.metrics().callback_panics >= 4);
    link.close(T);
}

// ----- the resolver -----------------------------------------------------------------------

#[test]
fn a_resolver_that_panics_once_fails_that_dial_and_the_next_one_connects() {
    let peer = Peer::start(Behaviour::Echo);
    let calls = Arc::new(AtomicU32::new(0));
    let link = builder(&format!("tcp://echo.test:{}", peer.port()))
        .resolver(resolver(Panics::FirstCall, peer.port(), calls.clone()))
        .build()
        .unwrap();
    let mut seen = Seen::default();
    seen.until(&link, T, is_ready);
    assert_reported(&seen, Callback::Resolver, State::Connecting);
    link.send(b"resolved".to_vec()).unwrap();
    seen.until(&link, T, |e| is_frame(e, b"resolved"));
    let m = link.close(T);
    assert_eq!((m.callback_panics, m.connects), (1, 1));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_resolver_that_always_panics_backs_off_and_leaves_the_resolver_threads_serving() {
    let peer = Peer::start(Behaviour::Echo);
    let calls = Arc::new(AtomicU32::new(0));
    let bad = builder(&format!("tcp://broken.test:{}", peer.port()))
        .resolver(resolver(Panics::EveryCall, peer.port(), calls.clone()))
        .build()
        .unwrap();
    let mut seen = Seen::default();
    // More panics than the pool has threads: none of them may have died.
    let delays = panic_delays(&bad, &mut seen, 6);
    assert!(
        delays.windows(2).all(|w| w[0] < w[1]),
        "the backoff grows: {delays:?}"
    );
    assert_reported(&seen, Callback::Resolver, State::Connecting);
    assert!(bad.metrics().callback_panics >= 6);

    let good = builder(&format!("tcp://fine.test:{}", peer.port()))
        .resolver(resolver(
            Panics::FirstCall,
            peer.port(),
            Arc::new(AtomicU32::new(1)),
        ))
        .build()
        .unwrap();
    let mut seen_good = Seen::default();
    seen_good.until(&good, T, is_ready);
    good.send(b"still resolving".to_vec()).unwrap();
    seen_good.until(&good, T, |e| is_frame(e, b"still resolving"));
    assert!(seen_good.panics().is_empty());
    good.close(T);
    assert_eq!(bad.close(T).state, State::Closed);
}

// ----- isolation ----------------------------------------------------------------------------

#[test]
fn a_link_whose_predicate_always_panics_leaves_another_link_exchanging_frames() {
    let noisy_peer = Peer::start(Behaviour::Echo);
    let noisy = builder(&noisy_peer.endpoint())
        .heartbeat(echoed_pings(Panics::EveryCall))
        .build()
        .unwrap();

    let peer = Peer::start(Behaviour::Echo);
    let quiet = builder(&peer.endpoint()).build().unwrap();
    let mut seen = Seen::default();
    seen.until(&quiet, T, is_ready);
    let mut noisy_seen = Seen::default();
    for i in 0..20 {
        let frame = format!("frame {i}").into_bytes();
        quiet.send(frame.clone()).unwrap();
        seen.until(&quiet, T, |e| is_frame(e, &frame));
        if i % 5 == 0 {
            noisy_seen.until(&noisy, T, is_panic_backoff);
        }
    }
    assert!(noisy.metrics().callback_panics >= 4);
    let m = quiet.close(T);
    assert_eq!(
        (m.frames_received, m.callback_panics, m.connects),
        (20, 0, 1)
    );
    noisy.close(T);
}

// ----- the IO thread stops ------------------------------------------------------------------

/// Runs a call that may block on a thread of its own; the thread returns the call's result and
/// the instant it returned.
fn spawn_call<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> std::thread::JoinHandle<(R, Instant)> {
    std::thread::spawn(move || {
        let r = f();
        (r, Instant::now())
    })
}

/// The result of a call started with [`spawn_call`]; fails the test unless the call returned
/// within `bound` of `since` (the wait itself is bounded by the same deadline).
fn join_within<R>(h: std::thread::JoinHandle<(R, Instant)>, since: Instant, bound: Duration) -> R {
    let deadline = since + bound;
    while !h.is_finished() {
        assert!(
            Instant::now() < deadline,
            "a blocked call did not return within {bound:?}"
        );
        std::thread::sleep(ms(5));
    }
    let (r, at) = h.join().expect("the caller's thread");
    assert!(at.saturating_duration_since(since) <= bound);
    r
}

#[test]
fn when_the_io_thread_stops_every_blocked_caller_returns_and_everything_says_closed() {
    // Nothing listens: frames wait in the outbox (room for one), so a Block send waits.
    let link = builder(&util::refused_endpoint())
        .delivery(|d| {
            d.outbox_frames = 1;
            d.outbox_bytes = 1 << 20;
            d.overflow = Overflow::Block(Duration::from_secs(30));
        })
        .build()
        .unwrap();
    link.send(b"queued".to_vec()).unwrap();
    let other_peer = Peer::start(Behaviour::Echo);
    let other = builder(&other_peer.endpoint()).build().unwrap();

    let l = link.clone();
    let blocked_send = spawn_call(move || l.send(b"blocked".to_vec()));
    let l = link.clone();
    let reader = spawn_call(move || {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match l.events().recv_deadline(deadline) {
                Ok(ev) => got.push(ev),
                Err(e) => return (got, e),
            }
        }
    });
    std::thread::sleep(ms(100)); // let both callers block
    assert!(!blocked_send.is_finished(), "the send waits for room");

    let at = Instant::now();
    relink::test_hooks::panic_io_thread(&link);

    let sent = join_within(blocked_send, at, PROMPT);
    assert!(matches!(sent, Err(SendError::Closed(f)) if f == b"blocked"[..]));
    let (events, end) = join_within(reader, at, PROMPT);
    assert_eq!(
        end,
        relink::error::RecvTimeoutError::Disconnected,
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Error(LinkError::IoThreadPanicked { .. }))),
        "{events:?}"
    );
    assert_eq!(link.state(), State::Closed);

    let l = link.clone();
    let metrics = join_within(spawn_call(move || l.metrics()), Instant::now(), PROMPT);
    assert_eq!(metrics.state, State::Closed);
    assert_eq!(
        metrics.outbox_frames, 1,
        "the queued frame is still counted"
    );
    let l = link.clone();
    let closed = join_within(spawn_call(move || l.close(T)), Instant::now(), PROMPT);
    assert_eq!(closed.state, State::Closed);
    assert!(matches!(
        link.send(b"late".to_vec()),
        Err(SendError::Closed(_))
    ));
    assert!(link.events().recv().is_err(), "recv returns at once");

    // The other link never noticed.
    let mut seen = Seen::default();
    other.send(b"unaffected".to_vec()).unwrap();
    seen.until(&other, T, |e| is_frame(e, b"unaffected"));
    assert_eq!(other.close(T).frames_received, 1);
}
