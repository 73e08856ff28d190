//! "Nothing lost without a report": every frame handed to `send` is sent, abandoned with a
//! reason and given back in an event, or refused at the call; none is sent twice or out of
//! order; a slow reader pauses reading instead of growing or dropping. Against real scripted
//! peers on 127.0.0.1 (see `tests/util`).

mod util;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use relink::error::SendError;
use relink::framing::LengthDelimited;
use relink::protocol::{Handshake, Predicate};
use relink::{AbandonReason, Event, Events, Link, Overflow, Redelivery, SendOptions};
use util::*;

/// Bound on every wait for something that should happen within a few milliseconds.
const BOUND: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Tests that measure process memory or load the machine take this lock, so that they do not
/// run alongside each other.
fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The resident set size of this process, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

/// The next `Abandoned` event within `timeout`, skipping state changes; None at the timeout.
fn next_abandoned(events: &Events, timeout: Duration) -> Option<(Vec<u8>, AbandonReason)> {
    let deadline = Instant::now() + timeout;
    loop {
        match events.recv_deadline(deadline).ok()? {
            Event::Abandoned { frame, reason } => return Some((frame.into(), reason)),
            Event::State(_) => {}
            other => panic!("unexpected event {other:?}"),
        }
    }
}

/// Every event left after `close`, until the channel is exhausted (bounded).
fn drain_after_close(events: &Events) -> Vec<Event> {
    let mut out = Vec::new();
    let deadline = Instant::now() + BOUND;
    while let Ok(ev) = events.recv_deadline(deadline) {
        out.push(ev);
    }
    assert!(
        Instant::now() < deadline,
        "the event channel was not exhausted after close"
    );
    out
}

/// The abandoned frames among `events`, with their reasons, in order.
fn abandoned_in(events: &[Event]) -> Vec<(Vec<u8>, AbandonReason)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Abandoned { frame, reason } => Some((frame.to_vec(), *reason)),
            _ => None,
        })
        .collect()
}

fn join_bounded<T>(handle: thread::JoinHandle<T>, what: &str) -> T {
    assert!(
        wait_until(BOUND, || handle.is_finished()),
        "{what} did not finish within {BOUND:?}"
    );
    handle.join().unwrap_or_else(|_| panic!("{what} panicked"))
}

/// One line per connection: the peer incarnation it reached, the range of `producer`'s frames
/// it received, and whether they were in order.
fn describe_connections(connections: &[(usize, Vec<u8>)], producer: u8) -> String {
    let mut out = String::new();
    for (i, (incarnation, bytes)) in connections.iter().enumerate() {
        let (frames, rest) = decode_length_prefixed(bytes);
        let seqs: Vec<u64> = frames
            .iter()
            .filter_map(|f| parse_producer_payload(f))
            .filter(|(p, _)| *p == producer)
            .map(|(_, s)| s)
            .collect();
        out += &format!(
            "  connection {i} (peer incarnation {incarnation}): {} frames, {:?}..={:?}, \
             {} bytes of a partial frame, in order: {}\n",
            seqs.len(),
            seqs.first(),
            seqs.last(),
            rest.len(),
            first_out_of_order(&seqs).is_none()
        );
    }
    out
}

// ---------------------------------------------------------------------------------------
// 1. Restarts under load
// ---------------------------------------------------------------------------------------

#[test]
fn every_frame_is_accounted_for_and_none_is_duplicated_or_reordered_across_twenty_peer_restarts() {
    let _heavy = heavy();
    const PRODUCERS: u8 = 4;
    const TOTAL: u64 = 100_000;
    const PER_PRODUCER: u64 = TOTAL / PRODUCERS as u64;
    const RESTARTS: usize = 20;
    /// How long the producers take for their frames, paced, so that restarts find them busy.
    const SPREAD: Duration = Duration::from_secs(10);
    /// Bytes a peer incarnation must receive before it is stopped (about 100 frames).
    const LIVE_BYTES: usize = 2_000;
    /// Every fifth outage lasts longer than the frames' lifetime, so some expire.
    const TTL: Duration = Duration::from_secs(1);
    const LONG_OUTAGE: Duration = Duration::from_millis(1_300);
    const SHORT_OUTAGE: Duration = Duration::from_millis(30);

    let port = free_port();
    let mut peer = Peer::start_on(port, Behaviour::Sink).expect("start the peer");
    let (link, ready, drainer) = drained(
        // At most once: a frame not confirmed at a drop comes back as Unconfirmed.
        through_restarts(port, TTL).delivery(|d| d.redelivery = Redelivery::Report),
    );

    let start = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let link = link.clone();
            thread::spawn(move || {
                send_paced(
                    &link,
                    p,
                    PER_PRODUCER,
                    start,
                    SPREAD,
                    Duration::from_secs(30),
                )
            })
        })
        .collect();
    let producing = || producers.iter().any(|h| !h.is_finished());

    // Each entry: the incarnation of the peer and the bytes one of its connections received.
    let mut connections: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut under_load = 0;
    for r in 0..RESTARTS {
        assert!(
            wait_until(BOUND, || ready.load(Ordering::SeqCst) > r),
            "restart {r}: the link did not become Ready"
        );
        let busy = peer.wait_until(BOUND, |s| s.total_received() >= LIVE_BYTES);
        if busy && producing() {
            under_load += 1;
        }
        assert!(
            busy || !producing(),
            "restart {r}: no traffic reached the peer"
        );
        connections.extend(stop_and_collect(peer).into_iter().map(|c| (r, c)));
        let outage = if r % 5 == 4 {
            LONG_OUTAGE
        } else {
            SHORT_OUTAGE
        };
        thread::sleep(outage); // the outage itself: the endpoint refuses meanwhile
        peer = Peer::start_on(port, Behaviour::Sink).expect("restart the peer on its port");
    }

    let refused: u64 = producers
        .into_iter()
        .map(|h| join_bounded(h, "a producer"))
        .sum();
    assert!(
        wait_until(BOUND, || link.metrics().outbox_frames == 0),
        "the outbox did not drain on the last connection"
    );
    let m = link.close(Duration::from_secs(1));
    let drained = join_bounded(drainer, "the event drainer");
    assert!(
        peer.wait_all_closed(BOUND),
        "the last connection did not close"
    );
    connections.extend(stop_and_collect(peer).into_iter().map(|c| (RESTARTS, c)));

    // What the peer received, per connection and overall.
    let mut received: Vec<(u8, u64)> = Vec::new();
    let mut partial_tails = 0;
    for (i, (_, bytes)) in connections.iter().enumerate() {
        let (frames, rest) = decode_length_prefixed(bytes);
        if !rest.is_empty() {
            partial_tails += 1;
        }
        for f in frames {
            let id = parse_producer_payload(&f).unwrap_or_else(|| {
                panic!(
                    "connection {i}: a frame that no producer sent: {:?}",
                    String::from_utf8_lossy(&f)
                )
            });
            received.push(id);
        }
    }
    assert_none_twice(&received, "frames received twice");
    for p in 0..PRODUCERS {
        let seqs = producer_seqs(&received, p);
        if let Some(i) = first_out_of_order(&seqs) {
            panic!(
                "producer {p}: frame {} received after frame {}; producer {p}'s frames per \
                 connection:\n{}",
                seqs[i],
                seqs[i - 1],
                describe_connections(&connections, p)
            );
        }
    }

    // What came back as abandoned: each once, never also received, and the counts match.
    let mut by_reason: HashMap<AbandonReason, u64> = HashMap::new();
    for (_, reason) in &drained.abandoned {
        *by_reason.entry(*reason).or_default() += 1;
    }
    assert_abandoned_not_received(&drained.abandoned, &received);
    let reported = |r| by_reason.get(&r).copied().unwrap_or(0);
    assert_eq!(reported(AbandonReason::Expired), m.abandoned.expired);
    assert_eq!(reported(AbandonReason::Overflow), m.abandoned.overflow);
    assert_eq!(reported(AbandonReason::Shutdown), m.abandoned.shutdown);
    assert_eq!(
        reported(AbandonReason::ConnectionLost),
        m.abandoned.connection_lost
    );
    assert_eq!(drained.abandoned.len() as u64, m.abandoned.total());
    assert!(drained.errors.is_empty(), "errors: {:?}", drained.errors);
    assert_eq!(m.events_dropped, 0);

    let lost_in_transit = m.frames_sent as i128 - received.len() as i128;
    eprintln!(
        "restart test: {RESTARTS} restarts ({under_load} under load), {} Ready, {} reconnects\n  \
         submitted {} = sent {} + abandoned {} (expired {}, overflow {}, shutdown {}, \
         connection-lost {}) + rejected {} + queued {}\n  \
         received by the peer {} over {} connections ({} ending in a partial frame); \
         sent but lost with a connection {}",
        ready.load(Ordering::SeqCst),
        m.reconnects,
        m.frames_submitted,
        m.frames_sent,
        m.abandoned.total(),
        m.abandoned.expired,
        m.abandoned.overflow,
        m.abandoned.shutdown,
        m.abandoned.connection_lost,
        m.frames_rejected,
        m.outbox_frames,
        received.len(),
        connections.len(),
        partial_tails,
        lost_in_transit,
    );

    // The accounting identity, exactly.
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    assert_eq!(m.outbox_frames, 0);
    assert_eq!(m.frames_rejected, refused);
    assert_eq!(m.frames_submitted, TOTAL + refused);
    assert_eq!(m.frames_confirmed + m.abandoned.total(), TOTAL);
    assert!(lost_in_transit >= 0, "the peer received more than was sent");
    assert!(m.reconnects >= RESTARTS as u64, "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 2. Overflow policies at their limits (peer down, frames stay queued)
// ---------------------------------------------------------------------------------------

#[test]
fn reject_new_gives_the_fourth_frame_back_when_the_outbox_holds_three() {
    let link = offline_link((3, 1 << 20), Overflow::RejectNew);
    for f in [b"one", b"two", b"six"] {
        link.send(f.to_vec()).expect("room for three frames");
    }
    assert_eq!(
        link.send(b"four".to_vec()),
        Err(SendError::Full(b"four"[..].into()))
    );
    let m = link.metrics();
    assert_eq!(
        (m.frames_submitted, m.frames_rejected, m.outbox_frames),
        (4, 1, 3)
    );
    assert_eq!(m.unaccounted(), 0);
    link.close(ms(100));
}

#[test]
fn reject_new_gives_a_frame_back_when_it_would_pass_the_byte_limit() {
    let link = offline_link((1_000, 10), Overflow::RejectNew);
    link.send(b"aaaa".to_vec()).expect("4 of 10 bytes");
    link.send(b"bbbb".to_vec()).expect("8 of 10 bytes");
    assert_eq!(
        link.send(b"ccc".to_vec()),
        Err(SendError::Full(b"ccc"[..].into())),
        "11 bytes are over the limit"
    );
    link.send(b"dd".to_vec()).expect("exactly 10 bytes fit");
    let m = link.metrics();
    assert_eq!(
        (m.outbox_frames, m.outbox_bytes, m.frames_rejected),
        (3, 10, 1)
    );
    assert_accounted(&m, "byte limit");
    link.close(ms(100));
}

#[test]
fn drop_oldest_accepts_the_fourth_frame_and_gives_the_first_back_as_overflow() {
    let link = offline_link((3, 1 << 20), Overflow::DropOldest);
    for f in ["f1", "f2", "f3", "f4"] {
        link.send(f).expect("DropOldest never refuses");
    }
    assert_eq!(
        next_abandoned(link.events(), BOUND),
        Some((b"f1".to_vec(), AbandonReason::Overflow))
    );
    let m = link.metrics();
    assert_eq!(m.abandoned.overflow, 1);
    assert_eq!((m.outbox_frames, m.frames_rejected), (3, 0));
    assert_eq!(m.unaccounted(), 0);
    let m = link.close(ms(100));
    let left = abandoned_in(&drain_after_close(link.events()));
    let shutdown = |f: &str| (f.as_bytes().to_vec(), AbandonReason::Shutdown);
    assert_eq!(left, vec![shutdown("f2"), shutdown("f3"), shutdown("f4")]);
    assert_eq!(m.unaccounted(), 0);
}

#[test]
fn block_waits_its_timeout_then_gives_the_frame_back() {
    let link = offline_link((3, 1 << 20), Overflow::Block(ms(200)));
    for f in ["f1", "f2", "f3"] {
        link.send(f).expect("room for three frames");
    }
    let t0 = Instant::now();
    let result = link.send("f4");
    let waited = t0.elapsed();
    assert_eq!(result, Err(SendError::Full(b"f4"[..].into())));
    assert!(
        waited >= ms(190) && waited < Duration::from_secs(3),
        "waited {waited:?} for a 200 ms block"
    );
    let m = link.metrics();
    assert_eq!((m.frames_rejected, m.outbox_frames), (1, 3));
    assert_eq!(m.unaccounted(), 0);
    link.close(ms(100));
}

#[test]
fn block_returns_as_soon_as_an_expiring_frame_makes_room() {
    let link = offline_link((3, 1 << 20), Overflow::Block(Duration::from_secs(5)));
    let t0 = Instant::now();
    link.send_with("f1", SendOptions::new().ttl(ms(300)))
        .expect("room");
    link.send("f2").expect("room");
    link.send("f3").expect("room");
    link.send("f4")
        .expect("room appears when f1 expires, well within the 5 s block");
    let waited = t0.elapsed();
    assert!(
        waited >= ms(250) && waited < Duration::from_secs(4),
        "send returned after {waited:?}; f1 expires at 300 ms"
    );
    assert_eq!(
        next_abandoned(link.events(), BOUND),
        Some((b"f1".to_vec(), AbandonReason::Expired))
    );
    let m = link.metrics();
    assert_eq!(
        (m.abandoned.expired, m.outbox_frames, m.frames_rejected),
        (1, 3, 0)
    );
    assert_eq!(m.unaccounted(), 0);
    link.close(ms(100));
}

#[test]
fn block_returns_once_the_peer_comes_up_and_the_outbox_drains() {
    let port = free_port();
    let link = Link::builder(endpoint_for(port))
        .framing(LengthDelimited::len32())
        .reconnect(|r| {
            r.backoff_base = ms(10);
            r.backoff_max = ms(50);
        })
        .delivery(|d| {
            d.outbox_frames = 3;
            d.outbox_bytes = 1 << 20;
            d.overflow = Overflow::Block(Duration::from_secs(8));
        })
        .build()
        .expect("build the link");
    for f in ["f1", "f2", "f3"] {
        link.send(f).expect("room for three frames");
    }
    let sender = {
        let link = link.clone();
        thread::spawn(move || link.send("f4"))
    };
    thread::sleep(ms(200));
    assert!(
        !sender.is_finished(),
        "send returned with the outbox full and the peer down"
    );
    let peer = Peer::start_on(port, Behaviour::Sink).expect("start the peer");
    assert_eq!(join_bounded(sender, "the blocked send"), Ok(()));
    let wire: Vec<u8> = ["f1", "f2", "f3", "f4"]
        .iter()
        .flat_map(|f| encode_length_prefixed(f.as_bytes()))
        .collect();
    assert!(
        peer.wait_received_len(wire.len(), BOUND),
        "the peer did not receive the four frames"
    );
    assert_eq!(peer.received_all(), wire);
    let m = link.close(Duration::from_secs(1));
    assert_eq!((m.frames_sent, m.frames_rejected), (4, 0));
    assert_eq!(m.unaccounted(), 0);
}

// ---------------------------------------------------------------------------------------
// 3. Expiry while offline
// ---------------------------------------------------------------------------------------

#[test]
fn a_frame_whose_ttl_passes_while_offline_comes_back_as_expired() {
    let link = offline_link((100, 1 << 20), Overflow::RejectNew);
    let t0 = Instant::now();
    link.send_with("short-lived", SendOptions::new().ttl(ms(100)))
        .expect("queued");
    assert_eq!(
        next_abandoned(link.events(), BOUND),
        Some((b"short-lived".to_vec(), AbandonReason::Expired))
    );
    assert!(t0.elapsed() >= ms(90), "expired early: {:?}", t0.elapsed());
    let m = link.metrics();
    assert_eq!(m.abandoned.expired, 1);
    assert_eq!((m.outbox_frames, m.frames_sent), (0, 0));
    assert_eq!(m.unaccounted(), 0);
    link.close(ms(100));
}

// ---------------------------------------------------------------------------------------
// 4. A slow reader
// ---------------------------------------------------------------------------------------

#[test]
fn a_slow_reader_pauses_reading_with_bounded_memory_then_gets_every_frame_in_order() {
    let _heavy = heavy();
    const FRAME: usize = 16 * 1024;
    const TOTAL_BYTES: usize = 96 << 20;
    const N: u64 = (TOTAL_BYTES / FRAME) as u64;
    const MAX_GROWTH: u64 = 32 << 20;

    let rss_before = rss_bytes();
    let written = Arc::new(AtomicUsize::new(0));
    let peer = Peer::start(Behaviour::script({
        let written = written.clone();
        move |c| {
            if c.index() > 0 {
                return c.hold(); // only the first connection carries the flood
            }
            for seq in 0..N {
                let mut f = seq_payload(seq);
                f.resize(FRAME, b'.');
                if c.write_frame(&f).is_err() {
                    return;
                }
                written.fetch_add(4 + FRAME, Ordering::SeqCst);
            }
            c.hold();
        }
    }));
    let link = Link::builder(peer.endpoint())
        .framing(LengthDelimited::len32())
        .events_capacity(16)
        .build()
        .expect("build the link");

    assert!(
        wait_until(BOUND, || link.metrics().reading_paused),
        "reading never paused"
    );
    // The peer's writes stall: nothing written for 300 ms.
    let (mut last, mut since) = (written.load(Ordering::SeqCst), Instant::now());
    let stalled = wait_until(BOUND, || {
        let now = written.load(Ordering::SeqCst);
        if now != last {
            (last, since) = (now, Instant::now());
        }
        since.elapsed() >= ms(300)
    });
    let rss_paused = rss_bytes();
    let m = link.metrics();
    let growth = rss_paused.saturating_sub(rss_before);
    eprintln!(
        "slow reader: peer wrote {} of {TOTAL_BYTES} bytes before stalling; link received {} \
         bytes; RSS {} -> {} (+{} KiB)",
        last,
        m.bytes_received,
        rss_before,
        rss_paused,
        growth / 1024
    );
    assert!(stalled, "the peer never stopped writing");
    assert!(m.reading_paused);
    assert!(
        last < TOTAL_BYTES / 2,
        "the peer wrote {last} of {TOTAL_BYTES} bytes to a link that is not being read"
    );
    assert!(
        growth < MAX_GROWTH,
        "memory grew by {growth} bytes while the reader was paused"
    );

    // Now read everything.
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(40);
    while next < N {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Frame(f)) => {
                assert_eq!(f.len(), FRAME, "frame {next}");
                assert_eq!(parse_seq(&f[..14]), Some(next), "frame {next} out of order");
                next += 1;
            }
            Ok(Event::State(_)) => {}
            Ok(other) => panic!("unexpected event {other:?}"),
            Err(e) => panic!("got {next} of {N} frames: {e:?}"),
        }
    }
    let m = link.metrics();
    assert_eq!(m.frames_received, N);
    assert_eq!(m.bytes_received, (N as usize * (4 + FRAME)) as u64);
    assert_eq!(m.events_dropped, 0);
    assert!(
        wait_until(BOUND, || !link.metrics().reading_paused),
        "reading stayed paused after the reader caught up"
    );
    link.close(ms(200));
    peer.stop();
}

// ---------------------------------------------------------------------------------------
// 5. Close during an outage
// ---------------------------------------------------------------------------------------

#[test]
fn close_during_an_outage_gives_back_every_queued_frame_as_shutdown() {
    const N: u64 = 100;
    let link = offline_link((1_000, 1 << 20), Overflow::RejectNew);
    let sent: Vec<Vec<u8>> = (0..N).map(seq_payload).collect();
    for f in &sent {
        link.send(f.clone()).expect("queued");
    }
    let t0 = Instant::now();
    let m = link.close(ms(200));
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "close took {:?}",
        t0.elapsed()
    );
    let back = abandoned_in(&drain_after_close(link.events()));
    assert!(
        back.iter().all(|(_, r)| *r == AbandonReason::Shutdown),
        "{back:?}"
    );
    let frames: Vec<Vec<u8>> = back.into_iter().map(|(f, _)| f).collect();
    assert_eq!(frames, sent);
    assert_eq!(m.abandoned.shutdown, N);
    assert_eq!((m.frames_sent, m.outbox_frames), (0, 0));
    assert_eq!(m.unaccounted(), 0);
    assert_eq!(
        link.send("late"),
        Err(SendError::Closed(b"late"[..].into()))
    );
}

// ---------------------------------------------------------------------------------------
// 6. Freshness across reconnects
// ---------------------------------------------------------------------------------------

/// Frames a peer reads on each connection before it stops reading.
const READ_PER_CONNECTION: usize = 40;
/// How long it then leaves the link's frames piling up before it resets the connection.
const STALL_BEFORE_RESET: Duration = Duration::from_millis(200);
/// Connections the peer closes before the test stops sending.
const CLOSED_CONNECTIONS: usize = 6;
/// Size of the numbered frames: big enough that the kernel buffers and libzmq's queue fill
/// while the peer stalls.
const FRESH_FRAME: usize = 4096;

fn numbered_frame(seq: u64) -> Vec<u8> {
    let mut f = seq_payload(seq);
    f.resize(FRESH_FRAME, b'.');
    f
}

fn parse_numbered_frame(f: &[u8]) -> Option<u64> {
    if f.len() != FRESH_FRAME {
        return None;
    }
    parse_seq(&f[..14])
}

/// What one freshness run saw: the frames of each connection, in accept order.
struct Freshness {
    connections: Vec<Vec<Vec<u8>>>,
}

/// A peer that reads a few frames per connection (after answering a `HELLO` with `OK` when
/// `handshake`), stops reading while frames pile up, then resets the connection; the app
/// keeps sending numbered frames all along. Checks that each frame reached the peer at most
/// once and all in submission order, and the accounting; returns what each connection got.
fn run_freshness(immediate: bool, handshake: bool) -> Freshness {
    let peer = Peer::start(Behaviour::script(move |c| {
        let t = Duration::from_secs(5);
        if handshake && (c.read_frame(t).is_err() || c.write_frame(b"OK").is_err()) {
            return;
        }
        for _ in 0..READ_PER_CONNECTION {
            if c.read_frame(t).is_err() {
                return;
            }
        }
        c.pause(STALL_BEFORE_RESET);
        c.reset();
    }));
    let mut builder = Link::builder(peer.endpoint())
        .framing(LengthDelimited::len32())
        .socket(|s| s.immediate = immediate)
        .reconnect(|r| {
            r.backoff_base = ms(10);
            r.backoff_max = ms(50);
            r.min_stable = ms(10);
        })
        .delivery(|d| d.redelivery = Redelivery::Report);
    if handshake {
        let hello = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
        builder = builder.protocol(hello);
    }
    let link = builder.build().expect("build the link");
    let ready = Arc::new(AtomicUsize::new(0));
    let drainer = spawn_drainer(link.events(), ready.clone());
    assert!(
        wait_until(BOUND, || ready.load(Ordering::SeqCst) > 0),
        "the link never became Ready (immediate={immediate}, handshake={handshake})"
    );

    let mut seq = 0u64;
    let mut refused = 0u64;
    let mut held: Option<bytes::Bytes> = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while peer.closed().iter().filter(|c| **c).count() < CLOSED_CONNECTIONS {
        assert!(
            Instant::now() < deadline,
            "the peer closed only {} connections",
            peer.closed().iter().filter(|c| **c).count()
        );
        for _ in 0..20 {
            let frame = held.take().unwrap_or_else(|| numbered_frame(seq).into());
            match link.send(frame) {
                Ok(()) => seq += 1,
                Err(SendError::Full(f)) => {
                    refused += 1;
                    held = Some(f);
                    break;
                }
                Err(e) => panic!("send failed: {e:?}"),
            }
        }
        thread::sleep(ms(1)); // a steady stream, not one burst
    }
    let m = link.close(Duration::from_secs(1));
    let drained = join_bounded(drainer, "the event drainer");
    assert!(peer.wait_all_closed(BOUND), "a connection stayed open");
    let connections: Vec<Vec<Vec<u8>>> = peer
        .snapshot()
        .length_prefixed_frames()
        .into_iter()
        .map(|(frames, _)| frames)
        .collect();
    peer.stop();

    let seqs: Vec<u64> = connections
        .iter()
        .flatten()
        .filter(|f| f.as_slice() != b"HELLO")
        .map(|f| parse_numbered_frame(f).unwrap_or_else(|| panic!("not a numbered frame")))
        .collect();
    let abandoned: HashSet<u64> = drained
        .abandoned
        .iter()
        .map(|(f, _)| parse_numbered_frame(f).expect("a frame we sent"))
        .collect();
    assert!(seqs.iter().all(|s| !abandoned.contains(s)));
    assert!(drained.errors.is_empty(), "errors: {:?}", drained.errors);
    eprintln!(
        "freshness (immediate={immediate}, handshake={handshake}): {} connections, {} Ready; \
         submitted {} = sent {} + abandoned {} + rejected {} + queued {}; received {}",
        connections.len(),
        ready.load(Ordering::SeqCst),
        m.frames_submitted,
        m.frames_sent,
        m.abandoned.total(),
        m.frames_rejected,
        m.outbox_frames,
        seqs.len()
    );
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    assert_eq!(m.frames_submitted, seq + refused);
    assert_eq!(m.frames_confirmed + m.abandoned.total(), seq);
    assert!(seqs.len() as u64 <= m.frames_confirmed + m.abandoned.unconfirmed);
    assert!(connections.len() >= CLOSED_CONNECTIONS);
    Freshness { connections }
}

/// Each numbered frame reached the peer at most once, and all in submission order over the
/// connections in accept order.
fn assert_at_most_once_and_in_order(run: &Freshness) {
    let mut seqs: Vec<u64> = Vec::new();
    let mut ranges = Vec::new();
    for frames in &run.connections {
        let data: Vec<u64> = frames
            .iter()
            .filter_map(|f| parse_numbered_frame(f))
            .collect();
        ranges.push((data.first().copied(), data.last().copied()));
        seqs.extend(data);
    }
    let dups = duplicates(&seqs);
    assert!(dups.is_empty(), "frames received twice: {dups:?}");
    if let Some(i) = first_out_of_order(&seqs) {
        panic!(
            "frame {} received after frame {}; first and last frame of each connection: \
             {ranges:?}",
            seqs[i],
            seqs[i - 1]
        );
    }
}

fn assert_every_connection_begins_with_the_hello(run: &Freshness) {
    for (i, frames) in run.connections.iter().enumerate() {
        if let Some(first) = frames.first() {
            assert_eq!(
                first.as_slice(),
                b"HELLO",
                "connection {i} began with {:?}",
                String::from_utf8_lossy(&first[..first.len().min(20)])
            );
        }
        let hellos = frames.iter().filter(|f| f.as_slice() == b"HELLO").count();
        assert!(hellos <= 1, "connection {i} got {hellos} hellos");
    }
}

#[test]
fn with_immediate_off_each_frame_reaches_the_peer_at_most_once_and_in_order_across_reconnects() {
    assert_at_most_once_and_in_order(&run_freshness(false, false));
}

#[test]
fn with_immediate_on_each_frame_reaches_the_peer_at_most_once_and_in_order_across_reconnects() {
    assert_at_most_once_and_in_order(&run_freshness(true, false));
}

#[test]
fn with_immediate_off_every_connection_begins_with_the_hello_and_never_a_queued_frame() {
    let run = run_freshness(false, true);
    assert_every_connection_begins_with_the_hello(&run);
    assert_at_most_once_and_in_order(&run);
}

#[test]
fn with_immediate_on_every_connection_begins_with_the_hello_and_never_a_queued_frame() {
    let run = run_freshness(true, true);
    assert_every_connection_begins_with_the_hello(&run);
    assert_at_most_once_and_in_order(&run);
}
