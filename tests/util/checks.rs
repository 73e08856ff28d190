//! Frames and their accounting: sending numbered frames, reading the numbers back, and the
//! checks every fault scenario ends with (each frame once and in order, `submitted =
//! confirmed + unconfirmed + abandoned + rejected + queued`, Abandoned events that match the
//! counters, a bounded close).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use relink::error::SendError;
use relink::{AbandonReason, Link, Metrics, State};
use std::thread;

use super::payload::{parse_producer_payload, producer_payload};

use super::payload::{decode_lines, duplicates, first_out_of_order, parse_seq, seq_payload};

/// Room for scheduling delays on a loaded two-core machine, on top of every time bound.
pub const SLACK: Duration = Duration::from_millis(500);
/// How soon a FIN or RST from the peer must turn into a Backoff: the kernel delivers it at once
/// on loopback, so this is all slack.
pub const CLOSE_DETECT: Duration = Duration::from_secs(1);

/// Sends `seq_payload(n)` for every `n` in `range`; none may be refused.
pub fn send_seqs(link: &Link, range: std::ops::Range<u64>) {
    for n in range {
        link.send(seq_payload(n))
            .unwrap_or_else(|e| panic!("send of frame {n} refused: {e:?}"));
    }
}

/// The sequence numbers of `frames`, skipping exactly the frames in `skip`; panics on any
/// other frame.
pub fn seqs_of(frames: &[Vec<u8>], skip: &[&[u8]]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| !skip.contains(&f.as_slice()))
        .map(|f| {
            parse_seq(f)
                .unwrap_or_else(|| panic!("a frame nobody sent: {:?}", String::from_utf8_lossy(f)))
        })
        .collect()
}

/// The sequence numbers of the lines in `bytes` (what a peer received).
pub fn line_seqs(bytes: &[u8]) -> Vec<u64> {
    seqs_of(&decode_lines(bytes).0, &[])
}

/// Asserts that `got` is exactly `want`, in order, each once; says what is duplicated or
/// missing otherwise.
pub fn assert_each_once_in_order(got: &[u64], want: std::ops::Range<u64>, what: &str) {
    let dups = duplicates(got);
    assert!(dups.is_empty(), "{what}: received twice: {dups:?}");
    let seen: HashSet<u64> = got.iter().copied().collect();
    let missing: Vec<u64> = want.clone().filter(|n| !seen.contains(n)).collect();
    assert!(missing.is_empty(), "{what}: never arrived: {missing:?}");
    let extra: Vec<u64> = got.iter().copied().filter(|n| !want.contains(n)).collect();
    assert!(extra.is_empty(), "{what}: never sent: {extra:?}");
    assert_eq!(
        first_out_of_order(got),
        None,
        "{what}: out of order: {got:?}"
    );
}

/// The next `n` frames the link gives back (`Event::Abandoned`), with their reasons, in the
/// order they came; other events are skipped. Panics if they do not come within `bound`.
pub fn wait_abandoned(link: &Link, n: usize, bound: Duration) -> Vec<(Vec<u8>, AbandonReason)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + bound;
    while got.len() < n {
        match link.events().recv_deadline(deadline) {
            Ok(relink::Event::Abandoned { frame, reason }) => got.push((frame.to_vec(), reason)),
            Ok(_) => {}
            Err(e) => panic!("{} of {n} frames given back: {e}; {got:?}", got.len()),
        }
    }
    got
}

/// `submitted = confirmed + unconfirmed + abandoned + rejected + queued`, exactly.
pub fn assert_accounted(m: &Metrics, what: &str) {
    assert_eq!(
        m.unaccounted(),
        0,
        "{what}: submitted {} != confirmed {} + unconfirmed {} + abandoned {} + rejected {} + \
         queued {}: {m:?}",
        m.frames_submitted,
        m.frames_confirmed,
        m.frames_unconfirmed,
        m.abandoned.total(),
        m.frames_rejected,
        m.outbox_frames
    );
}

/// Every `Abandoned` event is counted under its reason, and nothing else is.
pub fn assert_abandoned_match(m: &Metrics, abandoned: &[(Vec<u8>, AbandonReason)], what: &str) {
    let mut by_reason: HashMap<AbandonReason, u64> = HashMap::new();
    for (_, r) in abandoned {
        *by_reason.entry(*r).or_default() += 1;
    }
    let n = |r| by_reason.get(&r).copied().unwrap_or(0);
    assert_eq!(
        (
            n(AbandonReason::Expired),
            n(AbandonReason::Overflow),
            n(AbandonReason::Shutdown),
            n(AbandonReason::ConnectionLost),
            n(AbandonReason::Unconfirmed)
        ),
        (
            m.abandoned.expired,
            m.abandoned.overflow,
            m.abandoned.shutdown,
            m.abandoned.connection_lost,
            m.abandoned.unconfirmed
        ),
        "{what}: Abandoned events (expired, overflow, shutdown, connection-lost, unconfirmed) \
         disagree with the counters"
    );
}

/// `close` with a measured duration, asserting it is within `timeout + linger + slack`.
pub fn timed_close(link: &Link, timeout: Duration, what: &str) -> (Metrics, Duration) {
    let linger = relink::config::defaults::LINGER;
    let t0 = Instant::now();
    let m = link.close(timeout);
    let took = t0.elapsed();
    let bound = timeout + linger + SLACK;
    assert!(
        took <= bound,
        "{what}: close({timeout:?}) took {took:?}; the bound is {bound:?}"
    );
    assert_eq!(link.state(), State::Closed, "{what}: state after close");
    assert_eq!(m.state, State::Closed, "{what}: final metrics");
    (m, took)
}

/// The sequence numbers of the frames given back in `abandoned`, in order.
pub fn abandoned_seqs(abandoned: &[(Vec<u8>, AbandonReason)]) -> Vec<u64> {
    let frames: Vec<Vec<u8>> = abandoned.iter().map(|(f, _)| f.clone()).collect();
    seqs_of(&frames, &[])
}

/// One producer's thread body: sends `producer_payload(p, 0..n)`, paced evenly from `start`
/// over `spread`, retrying a frame the full outbox gives back for at most `give_up`. Returns
/// how many sends were refused.
pub fn send_paced(
    link: &Link,
    p: u8,
    n: u64,
    start: Instant,
    spread: Duration,
    give_up: Duration,
) -> u64 {
    let mut refused = 0u64;
    for seq in 0..n {
        let due = start + spread.mul_f64(seq as f64 / n as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let mut frame = bytes::Bytes::from(producer_payload(p, seq));
        let until = Instant::now() + give_up;
        loop {
            match link.send(frame) {
                Ok(()) => break,
                Err(SendError::Full(f)) => {
                    refused += 1;
                    assert!(Instant::now() < until, "outbox full for {give_up:?}");
                    frame = f;
                }
                Err(e) => panic!("producer {p}: send failed: {e:?}"),
            }
        }
    }
    refused
}

/// Asserts that no item occurs twice; the message starts with `what` and lists the first ten
/// repeated.
pub fn assert_none_twice<T: Eq + std::hash::Hash + Clone + std::fmt::Debug>(
    items: &[T],
    what: &str,
) {
    let dups = duplicates(items);
    assert!(dups.is_empty(), "{what}: {:?}", &dups[..dups.len().min(10)]);
}

/// The sequence numbers of producer `p` among `(producer, seq)` pairs, in order.
pub fn producer_seqs(received: &[(u8, u64)], p: u8) -> Vec<u64> {
    received
        .iter()
        .filter(|(q, _)| *q == p)
        .map(|(_, s)| *s)
        .collect()
}

/// Asserts that every abandoned frame is a producer's frame, abandoned once, and never also
/// among the `(producer, seq)` pairs `received`.
pub fn assert_abandoned_not_received(
    abandoned: &[(Vec<u8>, AbandonReason)],
    received: &[(u8, u64)],
) {
    let mut abandoned_ids = HashSet::new();
    for (frame, _) in abandoned {
        let id = parse_producer_payload(frame).expect("an abandoned frame is one we sent");
        assert!(abandoned_ids.insert(id), "{id:?} abandoned twice");
    }
    let both: Vec<_> = received
        .iter()
        .filter(|id| abandoned_ids.contains(id))
        .collect();
    assert!(both.is_empty(), "abandoned and received: {both:?}");
}

fn count_entries(dir: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {dir}: {e}"))
        .count()
}

/// (open file descriptors, threads of relink and libzmq) of this process. Threads are counted
/// by name (`relink-…`, libzmq's `ZMQbg/…`): the test harness starts a thread for each test
/// as another ends, whenever it likes, and a count of every thread caught one of those.
pub fn fds_and_threads() -> (usize, usize) {
    let threads = std::fs::read_dir("/proc/self/task")
        .unwrap_or_else(|e| panic!("read /proc/self/task: {e}"))
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("relink-") || name.starts_with("ZMQbg"))
        .count();
    (count_entries("/proc/self/fd"), threads)
}
