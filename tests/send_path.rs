//! The send path: every `send*` call goes through one intake, so frames of every size and
//! batches from one producer keep their order; the async calls end their waits at the same
//! bounds as the blocking ones; a per-frame deadline applies on every path. Against real peers
//! on 127.0.0.1 (or a port nobody listens on, so that frames stay in the outbox).

mod util;

use std::time::{Duration, Instant};

use relink::error::SendError;
use relink::{AbandonReason, Batch, Link, Overflow, SendOptions};
use util::*;

/// Bound on every wait for something that should happen within a few milliseconds.
const BOUND: Duration = Duration::from_secs(10);

#[test]
fn small_large_and_batched_frames_from_one_producer_reach_the_peer_in_order() {
    let peer = Peer::start(Behaviour::Sink);
    let link = ready_len32_link(&peer, BOUND);
    // Small frames are copied into the intake, large ones (over 1 KiB) keep their buffer,
    // batches go whole: all three kinds interleaved.
    let mut want = Vec::new();
    let mut seq = 0u64;
    for round in 0..50 {
        for len in [8, 100, 3000, 20] {
            let f = seq_frame(seq, len);
            want.push(f.clone());
            link.send(f).expect("send");
            seq += 1;
        }
        if round % 5 == 0 {
            let mut batch = Batch::new();
            for len in [16, 2000, 9] {
                let f = seq_frame(seq, len);
                batch.push(&f);
                want.push(f);
                seq += 1;
            }
            link.send_batch(batch, relink::SendOptions::new())
                .expect("send_batch");
        }
    }
    let total: usize = want.iter().map(|f| 4 + f.len()).sum();
    let got = peer.wait_frames_on_one_connection(total, BOUND);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "frames out of order or changed");
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, want.len() as u64);
    assert_accounted(&m, "mixed sizes");
}

#[test]
fn send_async_under_block_gives_the_frame_back_at_the_policys_bound() {
    // Nothing listens: the outbox (room for one) stays full.
    let bound = ms(150);
    let link = offline_link((1, 1 << 20), Overflow::Block(bound));
    link.send("first").expect("room for one");
    let mut exec = TestExec::new();
    let started = Instant::now();
    let result = exec
        .block_on(link.send_async("second", relink::SendOptions::new()), BOUND)
        .expect("send_async resolves at its bound");
    let waited = started.elapsed();
    assert_eq!(result, Err(SendError::Full(b"second"[..].into())));
    assert!(
        waited >= bound,
        "gave up after {waited:?}, before {bound:?}"
    );
    assert!(waited < BOUND, "waited {waited:?}");
    assert!(
        exec.polls <= 3,
        "polled {} times: a polling loop",
        exec.polls
    );
    let m = link.close(ms(50));
    assert_eq!(m.frames_rejected, 1);
    assert_accounted(&m, "send_async at its bound");
}

#[test]
fn send_async_waits_for_room_no_longer_than_its_option_whatever_the_policy() {
    let link = offline_link((1, 1 << 20), Overflow::Block(Duration::from_secs(60)));
    link.send_with("first", SendOptions::new().no_wait())
        .expect("room for one");
    let mut exec = TestExec::new();
    let wait = ms(100);
    let started = Instant::now();
    let result = exec
        .block_on(
            link.send_async("second", SendOptions::new().wait(wait)),
            BOUND,
        )
        .expect("send_async resolves at its bound");
    let waited = started.elapsed();
    assert!(matches!(result, Err(SendError::Full(_))), "{result:?}");
    assert!(waited >= wait, "gave up after {waited:?}");
    assert!(
        waited < Duration::from_secs(5),
        "waited {waited:?}: the policy's 60 s?"
    );
    link.close(ms(50));
}

#[test]
fn send_batch_async_under_block_gives_the_rest_back_at_the_policys_bound() {
    let bound = ms(100);
    let link = offline_link((2, 1 << 20), Overflow::Block(bound));
    let batch: Batch = ["a", "b", "c", "d"].into_iter().collect();
    let mut exec = TestExec::new();
    let started = Instant::now();
    let err = exec
        .block_on(
            link.send_batch_async(batch, relink::SendOptions::new()),
            BOUND,
        )
        .expect("send_batch_async resolves at its bound")
        .unwrap_err();
    let waited = started.elapsed();
    assert_eq!(err.accepted(), 2);
    assert_eq!(
        err.into_inner().into_frames(),
        [b"c".to_vec(), b"d".to_vec()]
    );
    assert!(waited >= bound, "gave up after {waited:?}");
    let m = link.close(ms(50));
    assert_eq!((m.frames_submitted, m.frames_rejected), (4, 2));
    assert_accounted(&m, "batch at its bound");
}

#[test]
fn a_per_frame_ttl_expires_frames_on_every_send_path() {
    // Nothing listens: every frame waits in the outbox until its deadline.
    let link = Link::builder(refused_endpoint()).build().expect("build");
    let ttl = SendOptions::new().ttl(ms(30));
    link.send_with("blocking", ttl).expect("send_with");
    let batch: Batch = ["batch 1", "batch 2"].into_iter().collect();
    link.send_batch(batch, ttl).expect("send_batch");
    let mut exec = TestExec::new();
    exec.block_on(link.send_async("async", ttl), BOUND)
        .expect("resolves")
        .expect("send_async");
    let batch: Batch = ["async batch"].into_iter().collect();
    exec.block_on(link.send_batch_async(batch, ttl), BOUND)
        .expect("resolves")
        .expect("send_batch_async");
    link.send("no ttl").expect("send");
    let given_back = wait_abandoned(&link, 5, BOUND);
    assert!(
        given_back.iter().all(|(_, r)| *r == AbandonReason::Expired),
        "{given_back:?}"
    );
    let expired: Vec<&[u8]> = given_back.iter().map(|(f, _)| &f[..]).collect();
    assert_eq!(
        expired,
        [
            &b"blocking"[..],
            b"batch 1",
            b"batch 2",
            b"async",
            b"async batch"
        ]
    );
    let m = link.close(ms(50));
    assert_eq!((m.abandoned.expired, m.abandoned.shutdown), (5, 1));
    assert_accounted(&m, "ttl on every path");
}
