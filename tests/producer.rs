//! A link's `Producer`: frames handed to the IO thread through a single-producer ring keep the
//! contract of `Link::send`: order, exact accounting, the overflow policies and their bounds,
//! deadlines, frames refused given back, room given back when the sender goes, and a frame
//! sent to an IO thread that went to sleep still leaves. Against real peers on 127.0.0.1 (or
//! a port nobody listens on, so that frames stay in the outbox).

mod util;

use std::time::{Duration, Instant};

use relink::error::SendError;
use relink::framing::LengthDelimited;
use relink::{AbandonReason, Link, Overflow, SendOptions};
use util::*;

/// Bound on every wait for something that should happen within a few milliseconds.
const BOUND: Duration = Duration::from_secs(10);

#[test]
fn a_sender_s_frames_of_every_size_reach_the_peer_in_order_and_are_counted() {
    let peer = Peer::start(Behaviour::Sink);
    let link = ready_len32_link(&peer, BOUND);
    let mut sender = link.producer();
    // Small frames are copied into the ring, large ones (over 1 KiB) go as handles: both
    // kinds interleaved, from another thread than the one that made the sender.
    let want: Vec<Vec<u8>> = (0..2000u64)
        .map(|seq| seq_frame(seq, [8, 100, 3000, 20][seq as usize % 4]))
        .collect();
    let frames = want.clone();
    std::thread::spawn(move || {
        for f in &frames {
            sender.send(f).expect("send");
        }
    })
    .join()
    .expect("producer");
    let total: usize = want.iter().map(|f| 4 + f.len()).sum();
    let got = peer.wait_frames_on_one_connection(total, BOUND);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "frames out of order or changed");
    let m = link.close(BOUND);
    assert_eq!((m.frames_submitted, m.frames_sent), (2000, 2000));
    assert_accounted(&m, "sender");
}

#[test]
fn a_frame_sent_after_the_io_thread_went_idle_still_leaves() {
    let peer = Peer::start(Behaviour::Sink);
    let link = ready_len32_link(&peer, BOUND);
    let mut sender = link.producer();
    let mut total = 0;
    for seq in 0..40u64 {
        let f = seq_frame(seq, 16);
        sender.send(&f).expect("send");
        total += 4 + f.len();
        // Each frame must leave on its own: nothing comes after it to carry it.
        assert!(
            peer.wait_received_len(total, BOUND),
            "frame {seq} did not leave: the peer got {} of {total} bytes",
            peer.received_len()
        );
        // Idle for a moment, longer every round: the IO thread ends its looks and sleeps,
        // with and without the lane's second drain still to come.
        std::thread::sleep(Duration::from_micros(50 * seq));
    }
    assert_accounted(&link.close(BOUND), "idle between frames");
}

#[test]
fn a_sender_that_does_not_wait_refuses_at_the_limit_and_gives_the_frame_back() {
    let link = offline_link((2, 1024), Overflow::Block(BOUND));
    let mut sender = link.producer().options(SendOptions::new().no_wait());
    sender.send(b"one").expect("room");
    sender.send(b"two").expect("room");
    let start = Instant::now();
    assert_eq!(sender.send(b"three"), Err(SendError::Full("three".into())));
    assert!(start.elapsed() < BOUND / 2, "refused without waiting");
    drop(sender);
    let m = link.close(ms(50));
    assert_eq!(
        (m.frames_submitted, m.frames_rejected, m.abandoned.shutdown),
        (3, 1, 2)
    );
    assert_accounted(&m, "refused at the limit");
}

#[test]
fn a_sender_waits_for_room_as_long_as_the_policy_says_and_no_longer() {
    let link = offline_link((1, 1024), Overflow::Block(ms(60)));
    let mut sender = link.producer();
    sender.send(b"first").expect("room");
    let start = Instant::now();
    assert_eq!(
        sender.send(b"second"),
        Err(SendError::Full("second".into()))
    );
    let waited = start.elapsed();
    assert!(
        waited >= ms(60) && waited < BOUND,
        "waited {waited:?} for the policy's 60 ms"
    );
    drop(sender);
    assert_accounted(&link.close(ms(50)), "waited for room");
}

#[test]
fn a_sender_waiting_for_room_sends_once_the_outbox_drains() {
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(peer.endpoint())
        .framing(LengthDelimited::len32())
        .delivery(|d| {
            d.outbox_frames = 4;
            d.outbox_bytes = 1024;
            d.overflow = Overflow::Block(BOUND);
        })
        .build()
        .expect("build");
    // Before Ready, frames wait in the outbox: the sender fills it, then waits for room.
    let mut sender = link.producer();
    let producer = std::thread::spawn(move || {
        for seq in 0..200u64 {
            sender
                .send(seq_frame(seq, 32))
                .expect("room within the policy");
        }
    });
    producer.join().expect("producer");
    assert!(peer.wait_received_len(200 * 36, BOUND), "every frame left");
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, 200);
    assert_accounted(&m, "waited and sent");
}

#[test]
fn a_sender_s_time_to_live_expires_its_frames() {
    let link = Link::builder(refused_endpoint()).build().expect("build");
    let mut sender = link.producer().options(SendOptions::new().ttl(ms(30)));
    sender.send(b"late").expect("send");
    sender.send(b"later").expect("send");
    let expired = |f: &[u8]| (f.to_vec(), AbandonReason::Expired);
    assert_eq!(
        wait_abandoned(&link, 2, BOUND),
        [expired(b"late"), expired(b"later")]
    );
    drop(sender);
    let m = link.close(ms(50));
    assert_eq!(m.abandoned.expired, 2);
    assert_accounted(&m, "ttl");
}

#[test]
fn a_sender_gives_back_the_room_it_held_when_it_is_dropped() {
    let link = Link::builder(refused_endpoint())
        .delivery(|d| {
            d.outbox_frames = 4;
            d.outbox_bytes = 1024;
        })
        .build()
        .expect("build");
    let mut sender = link.producer();
    // The sender admits up to half the room ahead (two frames here) and uses one.
    sender.send(b"one").expect("room");
    let mut accepted = 0;
    while link
        .send_with("filler", SendOptions::new().no_wait())
        .is_ok()
    {
        accepted += 1;
    }
    assert_eq!(accepted, 2, "the sender holds one frame's room ahead");
    drop(sender);
    assert!(
        link.send_with("after the drop", SendOptions::new().no_wait())
            .is_ok(),
        "its room came back"
    );
    assert!(link
        .send_with("one too many", SendOptions::new().no_wait())
        .is_err());
    let m = link.close(ms(50));
    assert_eq!(m.abandoned.shutdown, 4);
    assert_accounted(&m, "room given back");
}

#[test]
fn a_sender_s_frames_before_close_are_accounted_and_after_it_refused() {
    let link = Link::builder(refused_endpoint()).build().expect("build");
    let mut sender = link.producer();
    for seq in 0..10u64 {
        sender.send(seq_frame(seq, 16)).expect("send");
    }
    let m = link.close(ms(50));
    assert_eq!(
        m.abandoned.shutdown, 10,
        "queued frames abandoned at the close"
    );
    assert!(matches!(sender.send(b"after"), Err(SendError::Closed(_))));
    drop(sender);
    let m = link.metrics();
    assert_eq!((m.frames_submitted, m.frames_rejected), (11, 1));
    assert_accounted(&m, "closed");
}

#[test]
fn a_frame_the_framing_cannot_encode_is_refused_at_its_own_call() {
    let link = Link::builder(refused_endpoint())
        .framing(relink::framing::Lines::new())
        .build()
        .expect("build");
    let mut sender = link.producer();
    sender.send(b"fine").expect("send");
    let err = sender.send(b"a\nb").unwrap_err();
    assert!(matches!(err, SendError::Invalid(..)), "{err:?}");
    assert_eq!(err.into_inner(), &b"a\nb"[..]);
    drop(sender);
    let m = link.close(ms(50));
    assert_eq!((m.frames_submitted, m.frames_rejected), (2, 1));
    assert_accounted(&m, "invalid");
}

#[test]
fn send_async_waits_for_room_without_polling_and_gives_the_frame_back_at_the_bound() {
    // Nothing listens: the outbox (room for one) stays full.
    let bound = ms(150);
    let link = offline_link((1, 1 << 20), Overflow::Block(bound));
    let mut sender = link.producer();
    let mut exec = TestExec::new();
    exec.block_on(sender.send_async(b"first"), BOUND)
        .expect("resolves")
        .expect("room for one");
    let started = Instant::now();
    let result = exec
        .block_on(sender.send_async(b"second"), BOUND)
        .expect("send_async resolves at its bound");
    let waited = started.elapsed();
    assert_eq!(result, Err(SendError::Full(b"second"[..].into())));
    assert!(waited >= bound && waited < BOUND, "waited {waited:?}");
    assert!(
        exec.polls <= 3,
        "polled {} times: a polling loop",
        exec.polls
    );
    drop(sender);
    let m = link.close(ms(50));
    assert_eq!(m.frames_rejected, 1);
    assert_accounted(&m, "sender's send_async at its bound");
}

#[test]
fn a_sender_under_drop_oldest_never_refuses_and_gives_the_oldest_back_as_overflow() {
    let link = offline_link((3, 1 << 20), Overflow::DropOldest);
    let mut sender = link.producer();
    for f in [b"f1", b"f2", b"f3", b"f4"] {
        sender.send(f).expect("DropOldest never refuses");
    }
    assert_eq!(
        wait_abandoned(&link, 1, BOUND),
        [(b"f1".to_vec(), AbandonReason::Overflow)]
    );
    drop(sender);
    let m = link.close(ms(50));
    assert_eq!((m.abandoned.overflow, m.abandoned.shutdown), (1, 3));
    assert_accounted(&m, "drop oldest");
}

#[test]
fn senders_on_their_threads_and_the_link_itself_each_keep_their_own_order() {
    let peer = Peer::start(Behaviour::Sink);
    let link = ready_len32_link(&peer, BOUND);
    const EACH: u64 = 3000;
    // A frame says who sent it and its place in that producer's sequence.
    let tagged = |who: u64, seq: u64| {
        let mut f = who.to_be_bytes().to_vec();
        f.extend_from_slice(&seq.to_be_bytes());
        f
    };
    let producers: Vec<_> = (0..3u64)
        .map(|who| {
            let link = link.clone();
            let mut sender = (who < 2).then(|| link.producer());
            std::thread::spawn(move || {
                for seq in 0..EACH {
                    match &mut sender {
                        Some(sender) => sender.send(tagged(who, seq)).expect("sender"),
                        None => link.send(tagged(who, seq)).expect("link"),
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().expect("producer");
    }
    let total = 3 * EACH as usize * (4 + 16);
    let mut next = [0u64; 3];
    for f in &peer.wait_frames_on_one_connection(total, BOUND) {
        let who = u64::from_be_bytes(f[..8].try_into().expect("8 bytes")) as usize;
        let seq = u64::from_be_bytes(f[8..16].try_into().expect("8 bytes"));
        assert_eq!(seq, next[who], "producer {who} out of order");
        next[who] += 1;
    }
    assert_eq!(next, [EACH; 3]);
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, 3 * EACH);
    assert_accounted(&m, "three producers");
}

#[test]
fn a_close_while_a_sender_sends_leaves_every_frame_accounted() {
    let peer = Peer::start(Behaviour::Sink);
    let link = ready_len32_link(&peer, BOUND);
    let (started, under_way) = std::sync::mpsc::channel();
    let mut sender = link.producer();
    let producer = std::thread::spawn(move || {
        let mut accepted = 0u64;
        let deadline = Instant::now() + BOUND;
        while Instant::now() < deadline {
            match sender.send(seq_frame(accepted, 24)) {
                Ok(()) => accepted += 1,
                Err(SendError::Closed(_)) => return (accepted, true),
                Err(e) => panic!("{e}"),
            }
            if accepted == 1000 {
                let _ = started.send(());
            }
        }
        (accepted, false)
    });
    under_way
        .recv_timeout(BOUND)
        .expect("the producer is under way");
    link.close(BOUND);
    let (accepted, refused) = producer.join().expect("producer");
    assert!(refused, "the sender saw the close");
    // The sender is gone: every frame it took is counted, sent or abandoned.
    let m = link.metrics();
    assert_eq!(m.frames_rejected, 1, "the one frame refused as Closed");
    assert_eq!(m.frames_submitted, accepted + 1);
    assert_accounted(&m, "closed while sending");
}
