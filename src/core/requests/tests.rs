//! The matcher in simulated time: every request ends in exactly one outcome, and no reply
//! ever answers another request.

use super::*;
use bytes::Bytes;

/// The default of `Builder::max_losses`.
const MAX_LOSSES: u32 = 5;

const T: Duration = Duration::from_secs(1);

fn settings(overflow: Overflow, frames: usize) -> RequestSettings {
    RequestSettings {
        overflow,
        max_frames: frames,
        ..RequestSettings::default()
    }
}

fn in_order(overflow: Overflow, frames: usize) -> RequestWindow {
    RequestWindow::new(&settings(overflow, frames), MAX_LOSSES)
}

fn resending() -> RequestWindow {
    RequestWindow::new(
        &RequestSettings {
            redelivery: Redelivery::Resend,
            ..settings(Overflow::RejectNew, 8)
        },
        MAX_LOSSES,
    )
}

fn bytes_limited(max_bytes: usize) -> RequestWindow {
    RequestWindow::new(
        &RequestSettings {
            max_bytes,
            ..settings(Overflow::RejectNew, 8)
        },
        MAX_LOSSES,
    )
}

fn by_id() -> RequestWindow {
    let id = |f: &[u8]| f.get(..1).map(<[u8]>::to_vec);
    RequestWindow::new(
        &RequestSettings {
            correlation: Correlation::by_id(id, id),
            ..settings(Overflow::RejectNew, 16)
        },
        MAX_LOSSES,
    )
}

/// Writes every unsent request, as one batch the socket takes.
fn write_all(r: &mut RequestWindow) -> Vec<Vec<u8>> {
    let mut written = Vec::new();
    while let Some(f) = r.next_unsent() {
        written.push(f.to_vec());
        r.advance();
    }
    r.confirm();
    written
}

fn outcomes(r: &mut RequestWindow) -> Vec<(Token, Outcome)> {
    std::iter::from_fn(|| r.poll_outcome()).collect()
}

fn reply(r: &mut RequestWindow, frame: &[u8]) -> Matched {
    r.on_frame(Bytes::copy_from_slice(frame), Inbound::Reply)
}

#[test]
fn in_order_each_reply_answers_the_oldest_outstanding_request() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    for t in 1..=3 {
        r.submit(now, t, Bytes::from(vec![t as u8]), None, now + T, 0);
    }
    assert_eq!(write_all(&mut r), [[1], [2], [3]]);
    assert_eq!(reply(&mut r, b"a"), Matched::Answer(1));
    assert_eq!(reply(&mut r, b"b"), Matched::Answer(2));
    assert_eq!(reply(&mut r, b"c"), Matched::Answer(3));
    assert_eq!(
        outcomes(&mut r),
        [
            (1, Ok(Bytes::from_static(b"a"))),
            (2, Ok(Bytes::from_static(b"b"))),
            (3, Ok(Bytes::from_static(b"c")))
        ]
    );
    assert!(r.is_empty());
}

#[test]
fn a_frame_while_nothing_was_sent_is_unsolicited() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    assert_eq!(
        reply(&mut r, b"greeting"),
        Matched::Unsolicited(Bytes::from_static(b"greeting"))
    );
    r.submit(now, 1, Bytes::from_static(b"q"), None, now + T, 0);
    // Queued, not yet written: the frame cannot be its reply.
    assert_eq!(
        reply(&mut r, b"notice"),
        Matched::Unsolicited(Bytes::from_static(b"notice"))
    );
    assert_eq!(r.len(), 1);
}

#[test]
fn an_unsolicited_verdict_leaves_the_outstanding_request_waiting() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"q"), None, now + T, 0);
    write_all(&mut r);
    assert_eq!(
        r.on_frame(Bytes::from_static(b">push"), Inbound::Unsolicited),
        Matched::Unsolicited(Bytes::from_static(b">push"))
    );
    assert_eq!(reply(&mut r, b"answer"), Matched::Answer(1));
}

#[test]
fn a_timed_out_request_keeps_its_place_and_its_late_reply_is_dropped() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"slow"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"next"), None, now + 3 * T, 0);
    write_all(&mut r);
    r.expire(now + T);
    assert_eq!(outcomes(&mut r), [(1, Err(RequestError::TimedOut))]);
    assert_eq!(r.waiting(), 1);
    assert_eq!(reply(&mut r, b"late answer to slow"), Matched::Late);
    assert_eq!(reply(&mut r, b"answer to next"), Matched::Answer(2));
    assert_eq!(r.late, 1);
    assert_eq!(
        outcomes(&mut r),
        [(2, Ok(Bytes::from_static(b"answer to next")))]
    );
}

#[test]
fn a_request_that_expires_unsent_leaves_and_says_so() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"q"), None, now + T, 0);
    assert_eq!(r.next_deadline(), Some(now + T));
    r.expire(now + T);
    assert_eq!(
        outcomes(&mut r),
        [(1, Err(RequestError::Abandoned(AbandonReason::Expired)))]
    );
    assert!(r.is_empty());
    assert_eq!(r.next_unsent(), None);
}

#[test]
fn a_request_submitted_past_its_deadline_expires_at_once() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"q"), None, now, 0);
    assert_eq!(
        outcomes(&mut r),
        [(1, Err(RequestError::Abandoned(AbandonReason::Expired)))]
    );
}

#[test]
fn a_request_in_the_batch_being_written_is_not_expired_under_it() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"q"), None, now + T, 0);
    assert!(r.next_unsent().is_some());
    r.advance();
    r.expire(now + T);
    assert!(outcomes(&mut r).is_empty());
    r.confirm();
    r.expire(now + T);
    assert_eq!(outcomes(&mut r), [(1, Err(RequestError::TimedOut))]);
}

#[test]
fn by_id_replies_answer_their_own_requests_in_any_order() {
    let now = Instant::now();
    let mut r = by_id();
    for (t, id) in [(1, b'a'), (2, b'b'), (3, b'c')] {
        r.submit(now, t, Bytes::from(vec![id]), Some(vec![id]), now + T, 0);
    }
    write_all(&mut r);
    for (id, token) in [(b'c', 3), (b'a', 1), (b'b', 2)] {
        assert_eq!(
            r.on_frame(Bytes::from(vec![id, b'!']), Inbound::Id(vec![id])),
            Matched::Answer(token)
        );
    }
    assert!(r.is_empty());
}

#[test]
fn by_id_a_reply_for_a_timed_out_request_is_late() {
    let now = Instant::now();
    let mut r = by_id();
    r.submit(
        now,
        1,
        Bytes::from_static(b"a"),
        Some(b"a".to_vec()),
        now + T,
        0,
    );
    r.submit(
        now,
        2,
        Bytes::from_static(b"b"),
        Some(b"b".to_vec()),
        now + 2 * T,
        0,
    );
    write_all(&mut r);
    r.expire(now + T);
    assert_eq!(outcomes(&mut r), [(1, Err(RequestError::TimedOut))]);
    assert_eq!(
        r.len(),
        1,
        "a timed-out request by id leaves the window at once"
    );
    assert_eq!(
        r.on_frame(Bytes::from_static(b"a"), Inbound::Id(b"a".to_vec())),
        Matched::Late
    );
    assert_eq!(
        r.on_frame(Bytes::from_static(b"b"), Inbound::Id(b"b".to_vec())),
        Matched::Answer(2)
    );
}

#[test]
fn report_fails_the_sent_requests_at_a_drop_and_keeps_the_unsent_ones() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"sent"), None, now + T, 0);
    write_all(&mut r);
    r.submit(now, 2, Bytes::from_static(b"queued"), None, now + T, 0);
    r.connection_lost(|_| None);
    assert_eq!(
        outcomes(&mut r),
        [(
            1,
            Err(RequestError::Abandoned(AbandonReason::ConnectionLost))
        )]
    );
    assert_eq!(write_all(&mut r), [b"queued".to_vec()]);
}

#[test]
fn resend_writes_the_sent_requests_again_first_and_in_order() {
    let now = Instant::now();
    let mut r = resending();
    r.submit(now, 1, Bytes::from_static(b"one"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"two"), None, now + T, 0);
    write_all(&mut r);
    r.submit(now, 3, Bytes::from_static(b"three"), None, now + T, 0);
    r.connection_lost(|_| None);
    assert!(outcomes(&mut r).is_empty());
    assert_eq!(
        write_all(&mut r),
        [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
    assert_eq!(reply(&mut r, b"1"), Matched::Answer(1));
}

#[test]
fn a_drop_forgets_timed_out_requests_whose_replies_cannot_come_any_more() {
    let now = Instant::now();
    let mut r = resending();
    r.submit(now, 1, Bytes::from_static(b"slow"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"next"), None, now + 2 * T, 0);
    write_all(&mut r);
    r.expire(now + T);
    outcomes(&mut r);
    r.connection_lost(|_| None);
    assert_eq!(write_all(&mut r), [b"next".to_vec()]);
    assert_eq!(reply(&mut r, b"n"), Matched::Answer(2));
}

#[test]
fn past_the_window_reject_new_gives_the_frame_back() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 1);
    r.submit(now, 1, Bytes::from_static(b"a"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"b"), None, now + T, 0);
    assert_eq!(
        outcomes(&mut r),
        [(2, Err(RequestError::Full(Bytes::from_static(b"b"))))]
    );
}

#[test]
fn past_the_window_drop_oldest_abandons_the_oldest_unsent_request() {
    let now = Instant::now();
    let mut r = in_order(Overflow::DropOldest, 2);
    r.submit(now, 1, Bytes::from_static(b"a"), None, now + T, 0);
    write_all(&mut r);
    r.submit(now, 2, Bytes::from_static(b"b"), None, now + T, 0);
    r.submit(now, 3, Bytes::from_static(b"c"), None, now + T, 0);
    assert_eq!(
        outcomes(&mut r),
        [(2, Err(RequestError::Abandoned(AbandonReason::Overflow)))]
    );
    assert_eq!(write_all(&mut r), [b"c".to_vec()]);
}

#[test]
fn past_the_window_block_parks_the_request_until_room_or_its_wait_ends() {
    let now = Instant::now();
    let mut r = in_order(Overflow::Block(T), 1);
    r.submit(now, 1, Bytes::from_static(b"a"), None, now + 5 * T, 0);
    r.submit(now, 2, Bytes::from_static(b"b"), None, now + 5 * T, 0);
    r.submit(now, 3, Bytes::from_static(b"c"), None, now + 5 * T, 0);
    assert_eq!(write_all(&mut r), [b"a".to_vec()]);
    assert_eq!(reply(&mut r, b"A"), Matched::Answer(1));
    assert_eq!(write_all(&mut r), [b"b".to_vec()], "room made: b moves in");
    r.expire(now + T);
    let out = outcomes(&mut r);
    assert_eq!(
        out[1],
        (3, Err(RequestError::Full(Bytes::from_static(b"c"))))
    );
    assert_eq!(r.len(), 1);
}

#[test]
fn the_window_counts_bytes_too() {
    let now = Instant::now();
    let mut r = bytes_limited(4);
    r.submit(now, 1, Bytes::from_static(b"abc"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"de"), None, now + T, 0);
    assert_eq!(
        outcomes(&mut r),
        [(2, Err(RequestError::Full(Bytes::from_static(b"de"))))]
    );
    // One request larger than the limit is admitted alone.
    let mut r = bytes_limited(4);
    r.submit(now, 1, Bytes::from_static(b"abcdef"), None, now + T, 0);
    assert!(outcomes(&mut r).is_empty());
}

#[test]
fn shutdown_fails_every_request_left_once() {
    let now = Instant::now();
    let mut r = in_order(Overflow::Block(T), 1);
    r.submit(now, 1, Bytes::from_static(b"a"), None, now + T, 0);
    write_all(&mut r);
    r.submit(now, 2, Bytes::from_static(b"b"), None, now + T, 0);
    r.shutdown();
    let shut = Err(RequestError::Abandoned(AbandonReason::Shutdown));
    assert_eq!(outcomes(&mut r), [(1, shut.clone()), (2, shut)]);
    assert!(r.is_empty());
    assert_eq!(r.next_deadline(), None);
}

#[test]
fn a_refused_encoding_fails_that_request_alone() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"bad"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"good"), None, now + T, 0);
    r.refuse_next(RequestError::Closed);
    assert_eq!(
        outcomes(&mut r),
        [(1, Err(RequestError::Closed(Bytes::from_static(b"bad"))))]
    );
    assert_eq!(write_all(&mut r), [b"good".to_vec()]);
}

#[test]
fn a_stale_deadline_only_costs_one_scan() {
    let now = Instant::now();
    let mut r = in_order(Overflow::RejectNew, 8);
    r.submit(now, 1, Bytes::from_static(b"a"), None, now + T, 0);
    r.submit(now, 2, Bytes::from_static(b"b"), None, now + 4 * T, 0);
    write_all(&mut r);
    assert_eq!(reply(&mut r, b"A"), Matched::Answer(1));
    outcomes(&mut r);
    assert_eq!(r.next_deadline(), Some(now + T));
    r.expire(now + T);
    assert!(outcomes(&mut r).is_empty());
    assert_eq!(r.next_deadline(), Some(now + 4 * T));
}

/// A random run against an echo peer that answers what it received on the current
/// connection, in order (or, by id, in any order): submissions, writes, replies, drops, time
/// passing, overflow, a final close. Returns how many requests were answered and how many
/// late replies were dropped.
fn random_run(seed: u64, by_id: bool, redelivery: Redelivery, overflow: Overflow) -> (usize, u64) {
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let mut now = start;
    let correlation = if by_id {
        Correlation::by_id(|f| Some(f.to_vec()), |f| Some(f.to_vec()))
    } else {
        Correlation::in_order()
    };
    let mut r = RequestWindow::new(
        &RequestSettings {
            redelivery,
            correlation,
            ..settings(overflow, 8)
        },
        MAX_LOSSES,
    );
    let mut frames: HashMap<Token, Vec<u8>> = HashMap::new();
    let mut ends: HashMap<Token, Vec<Outcome>> = HashMap::new();
    // What the peer received on this connection and has not answered yet.
    let mut peer: VecDeque<Vec<u8>> = VecDeque::new();
    let mut next: Token = 0;
    for _ in 0..400 {
        match rng.random_range(0..10) {
            0..=2 => {
                let frame = format!("req-{next}").into_bytes();
                frames.insert(next, frame.clone());
                let ttl = Duration::from_millis(rng.random_range(1..400));
                let id = by_id.then(|| frame.clone());
                r.submit(now, next, frame.into(), id, now + ttl, 0);
                next += 1;
            }
            3 | 4 => peer.extend(write_all(&mut r)),
            5 | 6 => {
                let pick = match by_id {
                    true if !peer.is_empty() => rng.random_range(0..peer.len()),
                    _ => 0,
                };
                if let Some(f) = peer.remove(pick) {
                    let verdict = match by_id {
                        true => Inbound::Id(f.clone()),
                        false => Inbound::Reply,
                    };
                    r.on_frame(f.into(), verdict);
                }
            }
            7 => {
                peer.clear();
                r.connection_lost(|_| None);
            }
            _ => {
                now += Duration::from_millis(rng.random_range(1..100));
                r.expire(now);
            }
        }
        for (t, o) in outcomes(&mut r) {
            ends.entry(t).or_default().push(o);
        }
    }
    r.shutdown();
    for (t, o) in outcomes(&mut r) {
        ends.entry(t).or_default().push(o);
    }
    assert!(r.is_empty());
    let mut answered = 0;
    for t in 0..next {
        let got = ends.get(&t).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(got.len(), 1, "seed {seed}: request {t} ended {got:?}");
        if let Ok(reply) = &got[0] {
            assert_eq!(
                reply, &frames[&t],
                "seed {seed}: request {t} got another's reply"
            );
            answered += 1;
        }
    }
    (answered, r.late)
}

#[test]
fn every_request_ends_once_and_only_its_own_reply_answers_it_in_random_runs() {
    let (mut answered, mut late) = (0, 0);
    for seed in 0..200 {
        let block = Overflow::Block(Duration::from_millis(150));
        for (by_id, redelivery, overflow) in [
            (false, Redelivery::Report, Overflow::RejectNew),
            (false, Redelivery::Resend, Overflow::DropOldest),
            (false, Redelivery::Resend, block),
            (true, Redelivery::Report, block),
            (true, Redelivery::Resend, Overflow::RejectNew),
        ] {
            let (a, l) = random_run(seed, by_id, redelivery, overflow);
            answered += a;
            late += l;
        }
    }
    // The runs reach the cases the test is about.
    assert!(answered > 1000, "{answered} answered");
    assert!(late > 100, "{late} late replies");
}
