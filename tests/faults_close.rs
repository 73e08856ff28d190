//! The fault matrix, closing: a close in every state, a thousand links opened and closed
//! without a leak, and a close with more frames queued than the event channel holds. Part of
//! the fault matrix: one test per failure a long-lived TCP client meets, each proving that the
//! link keeps working and accounts for every frame.
//!
//! Every scenario states at its top, and checks:
//! - the expected sequence of states;
//! - its detection bound (how soon the link must notice), measured on the real clock with
//!   generous slack and printed with `eprintln!` (run with `--nocapture` to see the figures);
//! - the accounting identity `submitted = sent + abandoned + rejected + queued`
//!   (`Metrics::unaccounted() == 0`), and that every `Abandoned` event matches the counters;
//! - that no frame reached the peer twice: payloads carry sequence numbers
//!   (`util::seq_payload`), and what the peer received (or echoed) is checked for duplicates
//!   and order.
//!
//! Every test holds `util::PROCESS` for reading; a test that counts the threads and file
//! descriptors of the whole process holds it for writing.

mod util;

use std::time::{Duration, Instant};

use relink::config::{Jitter, ProofOfLife};
use relink::framing::Lines;
use relink::{AbandonReason, Cause, Link, State};
use util::*;

/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// 11. Close in every state
// ---------------------------------------------------------------------------------------

/// A lines link to a port that refuses, leaving `native_retries` failures to libzmq.
fn refused_lines(native_retries: u32) -> relink::Builder {
    Link::builder(util::refused_endpoint())
        .framing(Lines::new())
        .reconnect(|r| r.native_retries = native_retries)
}

/// Sends 5 frames to a link in `state`, closes it with a 300 ms timeout, and checks: close
/// returns within 300 ms + linger + slack, the state is Closed, accounting is exact, and the
/// frames that were not sent come back as Abandoned(Shutdown), in order.
fn close_in(link: &Link, w: &mut Watch, state: State, what: &str) -> Duration {
    assert_eq!(link.state(), state, "{what}: not in {state}: {}", w.trace());
    send_seqs(link, 0..5);
    let (m, took) = w.close(link, ms(300), what);
    assert_accounted(&m, what);
    assert_abandoned_match(&m, &w.abandoned, what);
    let back: Vec<u64> = abandoned_seqs(&w.abandoned);
    assert!(
        w.abandoned
            .iter()
            .all(|(_, r)| *r == AbandonReason::Shutdown),
        "{what}: {:?}",
        w.abandoned
    );
    assert_each_once_in_order(&back, m.frames_confirmed..5, what);
    assert_eq!(
        m.frames_confirmed + m.abandoned.shutdown,
        5,
        "{what}: {m:?}"
    );
    let last = w.transitions.last().map(|(_, t)| t.clone());
    assert!(
        matches!(&last, Some(t) if t.to == State::Closed && t.cause == Cause::Closed),
        "{what}: last transition {last:?}"
    );
    eprintln!(
        "measured: close in {state}: {took:?} (bound {:?})",
        ms(300) + relink::config::defaults::LINGER + SLACK
    );
    took
}

/// Expected states: Idle -> Connecting, and Connecting still: the refused dial is left to
/// libzmq's own redial, 10 s away; then close -> Closed within the bound, 5 frames back.
#[test]
fn close_while_connecting_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let (link, mut w) = watched(refused_lines(1_000).socket(|s| {
        s.reconnect_ivl = Duration::from_secs(10);
        s.connect_timeout = Duration::from_secs(30);
    }));
    w.until(T, |t| t.to == State::Connecting);
    assert!(w.quiet_for(ms(200)).is_none(), "{}", w.trace());
    close_in(&link, &mut w, State::Connecting, "close while connecting");
}

/// Expected states: Connecting -> Connected, and Connected still (the peer never writes and
/// the first inbound bytes are the proof of life); then close -> Closed within the bound. The
/// peer is a `Sink`, silent like `Silent` but reading, so it sees the close.
#[test]
fn close_while_connected_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let peer = Peer::start(Behaviour::Sink);
    let (link, mut w) = watched(
        Link::builder(peer.endpoint())
            .framing(Lines::new())
            .ready_when(ProofOfLife::Inbound),
    );
    w.until(T, |t| t.to == State::Connected);
    close_in(&link, &mut w, State::Connected, "close while connected");
    assert!(
        peer.wait_closed(0, T),
        "the connection stayed open after close"
    );
}

/// Expected states: Connected -> Ready; then close -> Closed within the bound. The peer
/// reads, so the 5 frames are flushed (sent, none abandoned) and reach it once each; the
/// stopped-reader test covers a close with frames stuck while Ready.
#[test]
fn close_while_ready_flushes_within_the_bound_and_every_frame_arrives_once() {
    let _g = shared();
    let peer = Peer::start(Behaviour::Sink);
    let (link, mut w) = watched(Link::builder(peer.endpoint()).framing(Lines::new()));
    w.until(T, |t| t.to == State::Ready);
    close_in(&link, &mut w, State::Ready, "close while ready");
    assert!(
        peer.wait_closed(0, T),
        "the connection stayed open after close"
    );
    assert_each_once_in_order(&line_seqs(&peer.received_all()), 0..5, "close while ready");
}

/// Expected states: Connecting -(refused)-> Backoff, and Backoff still (a 10 s delay); then
/// close -> Closed within the bound.
#[test]
fn close_while_backing_off_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let (link, mut w) = watched(refused_lines(0).reconnect(|r| {
        r.backoff_base = Duration::from_secs(10);
        r.backoff_max = Duration::from_secs(20);
        r.jitter = Jitter::None;
    }));
    let (_, t) = w.until(T, |t| t.to == State::Backoff);
    assert_eq!(t.cause, Cause::Refused);
    close_in(&link, &mut w, State::Backoff, "close while backing off");
}

/// Expected states: Connecting -(refused)-> Cooldown (`max_attempts(1)`), and Cooldown still
/// (60 s); then close -> Closed within the bound.
#[test]
fn close_while_cooling_down_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let (link, mut w) = watched(refused_lines(0).reconnect(|r| {
        r.max_attempts = Some(1);
        r.cooldown = Duration::from_secs(60);
    }));
    let (_, t) = w.until(T, |t| t.to == State::Cooldown);
    assert_eq!(t.cause, Cause::Refused);
    close_in(&link, &mut w, State::Cooldown, "close while cooling down");
}

// ---------------------------------------------------------------------------------------
// 12. Open and close many times
// ---------------------------------------------------------------------------------------

/// 1000 links opened and closed, alternating an endpoint that accepts (each link waits for
/// Ready) and one that refuses. Counted after a warm-up link of each kind, because the first
/// link starts the process-wide context (libzmq's IO and reaper threads).
/// Expected: afterwards, no more file descriptors or threads than before (within 5 s for the
/// last threads to exit); every close within its bound; accounting exact on each link.
#[test]
fn opening_and_closing_a_thousand_links_leaks_no_thread_and_no_file_descriptor() {
    let _g = exclusive();
    let peer = Peer::start(Behaviour::Sink);
    let refused = util::refused_endpoint();
    let open_close = |endpoint: &str, wait_ready: bool| {
        let link = Link::builder(endpoint)
            .framing(Lines::new())
            .build()
            .expect("build");
        if wait_ready {
            let mut w = Watch::new(&link);
            w.until(T, |t| t.to == State::Ready);
        }
        let m = link.close(ms(100));
        assert_accounted(&m, "open/close");
        assert_eq!(link.state(), State::Closed);
    };
    open_close(&peer.endpoint(), true);
    open_close(&refused, false);
    assert!(
        util::wait_until(T, || peer.open_count() == 0),
        "the warm-up connection stayed open"
    );
    let before = fds_and_threads();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..1000 {
        let t0 = Instant::now();
        if i % 2 == 0 {
            open_close(&peer.endpoint(), true);
        } else {
            open_close(&refused, false);
        }
        slowest = slowest.max(t0.elapsed());
    }
    let took = started.elapsed();
    // The kernel completes a connect before the peer's accept loop takes it: wait for it.
    assert!(
        peer.wait_accepts(501, T),
        "only {} connections for 501 connected links",
        peer.accept_count()
    );
    let mut after = fds_and_threads();
    let settled = util::wait_until(T, || {
        after = fds_and_threads();
        after.0 <= before.0 && after.1 <= before.1 && peer.open_count() == 0
    });
    assert!(
        settled,
        "(fds, threads) before {before:?}, after {after:?}; {} peer connections still open",
        peer.open_count()
    );
    let accepted = peer.accept_count();
    assert!(
        accepted >= 501,
        "only {accepted} connections for 501 connected links"
    );
    eprintln!(
        "measured: open/close x1000: {took:?} in all, slowest {slowest:?}; (fds, threads) \
         before {before:?}, after {after:?}; the peer accepted {accepted} connections for 501 \
         connected links"
    );
}

/// A link closed with more frames queued than its event channel (1024) and the IO thread's
/// pending queue (4 × 1024) can hold, while nobody reads events during `close`.
/// Expected: every queued frame comes back in an `Abandoned(Shutdown)` event, as the contract
/// says ("abandoned with a reason and returned to the app in an event").
#[test]
fn closing_with_more_queued_frames_than_the_event_channel_holds_gives_every_frame_back() {
    let _g = shared();
    let (link, mut w) = watched(
        Link::builder(util::refused_endpoint())
            .framing(Lines::new())
            .delivery(|d| {
                d.outbox_frames = 8_000;
                d.outbox_bytes = 1 << 20;
            }),
    );
    send_seqs(&link, 0..8_000);
    let (m, _) = w.close(&link, ms(100), "big close");
    assert_accounted(&m, "big close");
    assert_eq!(m.abandoned.shutdown, 8_000, "{m:?}");
    let back: Vec<u64> = abandoned_seqs(&w.abandoned);
    eprintln!(
        "measured: big close: {} of 8000 frames given back; events_dropped {}",
        back.len(),
        m.events_dropped
    );
    assert_each_once_in_order(&back, 0..8_000, "big close");
}
