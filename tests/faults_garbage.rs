//! The fault matrix, peers that break the protocol or the flow: an endless line, a length
//! prefix of 4 GiB, and a peer that stops reading. Part of the fault matrix: one test per
//! failure a long-lived TCP client meets, each proving that the link keeps working and accounts
//! for every frame.
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

mod util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink::error::{LinkError, SendError};
use relink::framing::{DecodeError, LengthDelimited, Lines};
use relink::{Cause, Link, Overflow, State};
use util::*;

/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(5);

/// Waits for Ready, then for the link to drop the connection for a protocol error: Ready
/// -(protocol)-> Backoff. Returns how long after Ready that came.
fn reset_after_ready(w: &mut Watch) -> Duration {
    let (ready_at, _) = w.until(T, |t| t.to == State::Ready);
    w.left_ready(T, Cause::Protocol) - ready_at
}

/// Waits (up to 2 × `T`) until `n` frames came back, once the peer echoes: connections
/// made before the switch may still fail first.
fn wait_echoes(w: &mut Watch, n: usize) {
    let deadline = Instant::now() + 2 * T;
    while !w.frames_until(n, ms(100)) {
        assert!(
            Instant::now() < deadline,
            "no echo after the switch: {}",
            w.trace()
        );
    }
}

/// A link with `framing` to `peer`, which misbehaves from its first byte: the link resets the
/// connection within 1 s of Ready, reporting `error`. Returns the link, its watch and how long
/// after Ready the reset came.
fn reset_by<F: relink::framing::Framing + Clone>(
    peer: &Peer,
    framing: F,
    error: DecodeError,
) -> (Link, Watch, Duration) {
    let (link, mut w) = watched(
        Link::builder(peer.endpoint())
            .framing(framing)
            .reconnect(|r| {
                r.backoff_base = ms(50);
                r.backoff_max = ms(200);
            }),
    );
    let detect = reset_after_ready(&mut w);
    assert!(detect <= ms(1000), "reset {detect:?} after Ready");
    assert!(
        w.errors.contains(&LinkError::Decode(error)),
        "no {error:?} event: {:?}",
        w.errors
    );
    (link, w, detect)
}

// ---------------------------------------------------------------------------------------
// 8. Garbage from the peer
// ---------------------------------------------------------------------------------------

/// The peer streams bytes without a newline, far past the lines framing's `max_length` (64).
/// Expected states: Ready -(protocol)-> Backoff with an `Error(Decode(LineTooLong))` event, over
/// again while the peer keeps doing it; once it echoes, Ready and a round trip.
/// Detection bound: the reset within 1 s of the connect (it takes `max_length + 2` bytes: the
/// longest line and a `\r`).
/// Memory bound: the link resets the connection instead of buffering: the peer manages to
/// write only what the socket buffers hold (asserted below 16 MiB of the 64 MiB it tries).
/// Frames: 10 queued while the peer misbehaves arrive once each after the switch, in order.
#[test]
fn a_peer_that_sends_an_endless_line_gets_its_connection_reset_without_a_panic_and_bounded_memory()
{
    const TRY: usize = 64 << 20;
    // The most one connection took before the link reset it.
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    let peer = Peer::start(Behaviour::script(move |conn| {
        let chunk = vec![b'x'; 64 * 1024];
        let mut n = 0;
        while n < TRY && conn.write_all(&chunk).is_ok() {
            n += chunk.len();
        }
        counter.fetch_max(n, Ordering::SeqCst);
    }));
    let (link, mut w, detect) = reset_by(
        &peer,
        Lines::builder().max_length(64).build().unwrap(),
        DecodeError::LineTooLong { max: 64 },
    );
    send_seqs(&link, 0..10);
    assert!(peer.wait_closed(0, T), "the first connection stayed open");
    peer.set_behaviour(Behaviour::Echo);
    // The next connection that echoes makes the link Ready for good.
    wait_echoes(&mut w, 10);
    let wrote = written.load(Ordering::SeqCst);
    let (m, _) = w.close(&link, ms(500), "endless line");
    assert!(
        wrote < 16 << 20,
        "the peer wrote {wrote} bytes on one connection before the link reset it"
    );
    assert_each_once_in_order(&seqs_of(&w.frames, &[]), 0..10, "endless line");
    assert_accounted(&m, "endless line");
    assert_abandoned_match(&m, &w.abandoned, "endless line");
    assert_eq!(m.frames_confirmed, 10, "{m:?}");
    eprintln!(
        "measured: endless line: Backoff(protocol) {detect:?} after Ready (bound 1 s); the \
         peer wrote at most {} KiB on one connection before the reset; {} codec errors",
        wrote / 1024,
        w.errors.len()
    );
}

/// The peer announces a frame of 4 GiB − 1 bytes (length prefix `ff ff ff ff`).
/// Expected states: Ready -(protocol)-> Backoff with `Error(Decode(FrameTooLarge { len:
/// 4294967295, .. }))`, as soon as the 4 prefix bytes are in (nothing is allocated for the
/// frame); once the peer echoes, Ready and a round trip.
/// Detection bound: the reset within 1 s of the connect.
/// Frames: 10 queued meanwhile arrive once each, in order.
#[test]
fn a_length_prefix_of_four_gib_is_refused_at_once_and_the_link_reconnects() {
    let mut garbage = vec![0xff; 4];
    garbage.extend_from_slice(b"and then some bytes");
    let peer = Peer::start(Behaviour::Garbage(garbage));
    let max = 1 << 20;
    let (link, mut w, detect) = reset_by(
        &peer,
        LengthDelimited::builder()
            .max_frame_length(max)
            .build()
            .unwrap(),
        DecodeError::FrameTooLarge {
            len: u32::MAX as u64,
            max,
        },
    );
    send_seqs(&link, 0..10);
    peer.set_behaviour(Behaviour::Echo);
    wait_echoes(&mut w, 10);
    let (m, _) = w.close(&link, ms(500), "4 GiB prefix");
    assert_each_once_in_order(&seqs_of(&w.frames, &[]), 0..10, "4 GiB prefix");
    assert_accounted(&m, "4 GiB prefix");
    assert_abandoned_match(&m, &w.abandoned, "4 GiB prefix");
    assert_eq!(m.frames_confirmed, 10, "{m:?}");
    eprintln!(
        "measured: 4 GiB prefix: Backoff(protocol) {detect:?} after Ready (bound 1 s); {} \
         codec errors; {} bytes received in all",
        w.errors.len(),
        m.bytes_received
    );
}

// ---------------------------------------------------------------------------------------
// 9. A peer that stops reading
// ---------------------------------------------------------------------------------------

/// The peer accepts and never reads: the kernel buffers and libzmq's queue fill, then the
/// outbox (64 frames) fills, then `send` (RejectNew) refuses with the frame given back.
/// Expected states: Ready, and Ready still (a full pipe is not a failure).
/// Bounds: no `send` call takes more than 200 ms (RejectNew never waits); `close(300 ms)`
/// returns within 300 ms + linger + slack.
/// Accounting: submitted = sent + rejected + queued at every step; at close the frames still
/// queued come back as Abandoned(Shutdown), in order, and sent + abandoned = accepted (the
/// kernel's buffers may still grow and take some of them during the close's flush).
#[test]
fn a_peer_that_stops_reading_fills_the_outbox_then_sends_are_refused_with_the_frame_back() {
    let peer = Peer::start(Behaviour::StopReadingAfter(0));
    let limit = 64;
    let (link, mut w) = watched(
        Link::builder(peer.endpoint())
            .framing(LengthDelimited::len32())
            .delivery(|d| {
                d.outbox_frames = limit;
                d.outbox_bytes = 64 << 20;
                d.overflow = Overflow::RejectNew;
            }),
    );
    w.until(T, |t| t.to == State::Ready);
    let frame = |n: u64| {
        let mut f = util::seq_payload(n);
        f.resize(16 * 1024, b'.');
        f
    };
    let mut slowest = Duration::ZERO;
    let mut accepted = 0u64;
    let mut refused = None;
    // At most 256 MiB offered; kernel buffers and libzmq's queue hold far less.
    for n in 0..16_384u64 {
        let f = frame(n);
        let t0 = Instant::now();
        let r = link.send(f.clone());
        slowest = slowest.max(t0.elapsed());
        match r {
            Ok(()) => accepted += 1,
            Err(SendError::Full(back)) => {
                assert_eq!(back, f, "the refused frame came back changed");
                refused = Some(n);
                break;
            }
            Err(e) => panic!("send failed: {e:?}"),
        }
    }
    let refused = refused.expect("the outbox never filled");
    let m = link.metrics();
    assert_accounted(&m, "stopped reader (at the first refusal)");
    assert_eq!(m.state, State::Ready, "a full pipe is not a failure");
    assert!(m.outbox_frames <= limit as u64, "{m:?}");
    // Once more: refused again, the frame given back (libzmq may have taken a few more
    // frames meanwhile, while the kernel buffers were still filling).
    let mut rejected = 1;
    let mut n = refused + 1;
    loop {
        let f = frame(n);
        match link.send(f.clone()) {
            Ok(()) => accepted += 1,
            Err(SendError::Full(back)) => {
                assert_eq!(back, f);
                rejected += 1;
                break;
            }
            Err(e) => panic!("send failed: {e:?}"),
        }
        n += 1;
        assert!(n < refused + 10_000, "the outbox never filled again");
    }
    let m = link.metrics();
    assert_accounted(&m, "stopped reader (before close)");
    assert_eq!(m.frames_rejected, rejected, "{m:?}");
    assert_eq!(
        m.frames_confirmed + m.frames_unconfirmed + m.outbox_frames,
        accepted,
        "{m:?}"
    );
    assert!(
        slowest <= ms(200),
        "a send took {slowest:?}: RejectNew must not wait"
    );
    let (m, took) = w.close(&link, ms(300), "stopped reader");
    assert_accounted(&m, "stopped reader");
    assert_abandoned_match(&m, &w.abandoned, "stopped reader");
    // Written and not acknowledged (the window), then never written: all given back.
    let given_back = m.abandoned.unconfirmed + m.abandoned.shutdown;
    assert_eq!(m.frames_confirmed + given_back, accepted, "{m:?}");
    let back: Vec<u64> = w
        .abandoned
        .iter()
        .map(|(f, _)| util::parse_seq(&f[..14]).expect("one of ours"))
        .collect();
    // Frames are numbered by attempt; the two refused ones were never accepted.
    let expected: Vec<u64> = (0..n)
        .filter(|k| *k != refused && *k != n)
        .skip(m.frames_confirmed as usize)
        .collect();
    assert_eq!(back, expected, "the frames given back at close");
    assert_only(&w.since(0), "stopped reader", |t| {
        matches!(
            (t.from, t.to),
            (State::Idle, State::Connecting)
                | (State::Connecting, State::Connected)
                | (State::Connected, State::Ready)
                | (State::Ready, State::Closed)
        )
    });
    eprintln!(
        "measured: stopped reader: {accepted} frames of 16 KiB accepted ({} handed to the \
         socket) before the first refusal; slowest send {slowest:?} (bound 200 ms); close took \
         {took:?} (bound {:?})",
        m.frames_confirmed,
        ms(300) + relink::config::defaults::LINGER + SLACK
    );
}
