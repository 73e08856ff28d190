//! Batch sends: one call, one admission check, one message to the IO thread; each frame keeps
//! its own outcome and the accounting stays exact under every overflow policy. Against real
//! peers on 127.0.0.1, or an endpoint that refuses (frames then stay queued).

mod util;

use std::time::{Duration, Instant};

use relink::error::BatchError;
use relink::framing::{EncodeError, LengthDelimited, Lines};
use relink::{AbandonReason, Batch, Event, Link, Overflow, SendOptions, State};
use util::*;

/// Bound on every wait for something that should happen within a few milliseconds.
const BOUND: Duration = Duration::from_secs(10);

fn numbered(range: std::ops::Range<u64>) -> Batch {
    range.map(seq_payload).collect()
}

/// A link to `peer` with len32 frames that waits for room (`Block`).
fn sink_link(peer: &Peer) -> Link {
    Link::builder(peer.endpoint())
        .framing(LengthDelimited::len32())
        .delivery(|d| d.overflow = Overflow::Block(BOUND))
        .build()
        .expect("build")
}

/// A link with line framing to an endpoint that refuses: frames stay queued.
fn lines_link() -> Link {
    Link::builder(refused_endpoint())
        .framing(Lines::new())
        .build()
        .expect("build")
}

fn queued_link(limits: (usize, usize), overflow: Overflow) -> Link {
    offline(limits, overflow)
        .framing(LengthDelimited::len32())
        .build()
        .expect("build")
}

#[test]
fn a_batch_partly_over_the_limit_gives_back_exactly_the_refused_frames() {
    let link = queued_link((5, 1 << 20), Overflow::RejectNew);
    link.send(seq_payload(0)).expect("one single frame first");
    let err = link
        .send_batch(numbered(1..9), relink::SendOptions::new())
        .expect_err("8 frames, room for 4");
    match &err {
        BatchError::Full { accepted, rest } => {
            assert_eq!(*accepted, 4);
            assert_eq!(rest, &numbered(5..9), "the refused frames, in order");
        }
        other => panic!("expected Full, got {other:?}"),
    }
    let m = link.close(ms(50));
    assert_eq!(m.frames_submitted, 9);
    assert_eq!(m.frames_rejected, 4);
    assert_eq!(
        m.abandoned.shutdown, 5,
        "the queued frames, given back at close"
    );
    assert_accounted(&m, "partial refusal");
}

#[test]
fn the_byte_limit_cuts_a_batch_between_frames() {
    // 10-byte frames, room for 25 bytes: two fit.
    let link = queued_link((100, 25), Overflow::RejectNew);
    let batch: Batch = (0..4u8).map(|i| [i; 10]).collect();
    let err = link
        .send_batch(batch, relink::SendOptions::new())
        .expect_err("40 bytes, room for 25");
    assert_eq!(err.accepted(), 2);
    assert_eq!(
        err.into_inner().into_frames(),
        vec![vec![2u8; 10], vec![3u8; 10]]
    );
    let m = link.metrics();
    assert_eq!(
        (m.outbox_frames, m.outbox_bytes, m.frames_rejected),
        (2, 20, 2)
    );
    assert_accounted(&m, "byte limit");
}

#[test]
fn a_frame_the_codec_refuses_refuses_the_whole_batch() {
    let link = lines_link();
    let batch: Batch = [&b"ok"[..], b"fine", b"two\nlines", b"ok"]
        .into_iter()
        .collect();
    match link.send_batch(batch.clone(), relink::SendOptions::new()) {
        Err(BatchError::Invalid {
            batch: back,
            index,
            error,
        }) => {
            assert_eq!(back, batch, "the whole batch comes back");
            assert_eq!(index, 2);
            assert_eq!(error, EncodeError::ContainsNewline);
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let m = link.metrics();
    assert_eq!(
        (m.frames_submitted, m.frames_rejected, m.outbox_frames),
        (4, 4, 0)
    );
}

#[test]
fn order_is_kept_across_batches_and_single_sends_from_one_thread() {
    let peer = Peer::start(Behaviour::Sink);
    let link = sink_link(&peer);
    // Half of it before the link is Ready (queued), half after.
    let mut next = 0u64;
    let mut step = |link: &Link, i: u64| {
        if i % 3 == 0 {
            link.send(seq_payload(next)).expect("send");
            next += 1;
        } else {
            let n = 1 + i % 50;
            link.send_batch(numbered(next..next + n), relink::SendOptions::new())
                .expect("send_batch");
            next += n;
        }
    };
    for i in 0..100 {
        step(&link, i);
    }
    Watch::new(&link).until(BOUND, |t| t.to == State::Ready);
    for i in 100..200 {
        step(&link, i);
    }
    link.send_batch(
        (next..next + 10).map(seq_payload).collect(),
        relink::SendOptions::new(),
    )
    .expect("a batch collected from an iterator");
    next += 10;
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, next, "every frame sent: {m:?}");
    assert_accounted(&m, "mixed sends");
    let on_wire = |frames: u64| frames as usize * (4 + seq_payload(0).len());
    assert!(
        peer.wait_received_len(on_wire(next), BOUND),
        "the peer read everything"
    );
    let received = peer.received_all();
    let (frames, rest) = decode_length_prefixed(&received);
    assert!(rest.is_empty(), "a frame was cut");
    assert_each_once_in_order(&seqs_of(&frames, &[]), 0..next, "mixed sends");
}

#[test]
fn under_drop_oldest_a_batch_abandons_the_oldest_frames_one_by_one() {
    let link = queued_link((4, 1 << 20), Overflow::DropOldest);
    for i in 0..3 {
        link.send(seq_payload(i)).expect("single");
    }
    link.send_batch(numbered(3..7), relink::SendOptions::new())
        .expect("DropOldest accepts");
    let mut abandoned = Vec::new();
    let deadline = Instant::now() + BOUND;
    while abandoned.len() < 3 {
        let ev = link.events().recv_deadline(deadline);
        if let Event::Abandoned { frame, reason } = ev.expect("abandoned events") {
            abandoned.push((frame.into(), reason));
        }
    }
    assert_eq!(
        abandoned_seqs(&abandoned),
        vec![0, 1, 2],
        "the oldest go first"
    );
    assert!(abandoned.iter().all(|(_, r)| *r == AbandonReason::Overflow));
    let m = link.metrics();
    assert_eq!((m.outbox_frames, m.abandoned.overflow), (4, 3));
    // A batch larger than the limit keeps only its newest frames.
    link.send_batch(numbered(7..17), relink::SendOptions::new())
        .expect("DropOldest accepts");
    let m = link.close(ms(50));
    assert_eq!(m.abandoned.overflow, 3 + 10);
    assert_eq!(m.abandoned.shutdown, 4);
    assert_eq!(m.frames_submitted, 17);
    assert_accounted(&m, "drop oldest");
}

#[test]
fn under_block_a_batch_waits_for_room_then_refuses_the_rest_at_the_deadline() {
    let link = queued_link((2, 1 << 20), Overflow::Block(ms(200)));
    let started = Instant::now();
    let err = link
        .send_batch(numbered(0..5), relink::SendOptions::new())
        .expect_err("room for 2, nothing leaves");
    let waited = started.elapsed();
    assert!(waited >= ms(190), "gave up after {waited:?}");
    assert_eq!(err.accepted(), 2);
    assert_eq!(err.into_inner(), numbered(2..5));
    let m = link.close(ms(50));
    assert_eq!((m.frames_submitted, m.frames_rejected), (5, 3));
    assert_accounted(&m, "block deadline");
}

#[test]
fn under_block_a_batch_larger_than_the_outbox_goes_in_as_room_frees() {
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(peer.endpoint())
        .framing(LengthDelimited::len32())
        .delivery(|d| {
            d.outbox_frames = 8;
            d.outbox_bytes = 1 << 20;
            d.overflow = Overflow::Block(BOUND);
        })
        .build()
        .expect("build");
    link.send_batch(numbered(0..100), relink::SendOptions::new())
        .expect("all accepted as room frees");
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, 100);
    assert_accounted(&m, "block progress");
    let on_wire = 100 * (4 + seq_payload(0).len());
    assert!(
        peer.wait_received_len(on_wire, BOUND),
        "the peer read everything"
    );
    let received = peer.received_all();
    let (frames, _) = decode_length_prefixed(&received);
    assert_each_once_in_order(&seqs_of(&frames, &[]), 0..100, "block progress");
}

#[test]
fn send_batch_async_waits_for_room_without_blocking() {
    let link = queued_link((2, 1 << 20), Overflow::Block(BOUND));
    let mut exec = TestExec::new();
    link.send_with(seq_payload(0), SendOptions::new().ttl(ms(200)))
        .expect("0");
    link.send_with(seq_payload(1), SendOptions::new().ttl(ms(200)))
        .expect("1");
    let mut send = Box::pin(link.send_batch_async(numbered(2..4), relink::SendOptions::new()));
    assert!(exec.poll(&mut send).is_pending(), "no room");
    let result = exec
        .block_on(send, BOUND)
        .expect("resolves once room frees");
    assert_eq!(result, Ok(()));
    let m = link.close(ms(50));
    assert_eq!((m.abandoned.expired, m.abandoned.shutdown), (2, 2));
    assert_accounted(&m, "async batch");
}

#[test]
fn a_batch_after_close_comes_back_whole() {
    let link = queued_link((10, 1 << 20), Overflow::RejectNew);
    link.close(ms(10));
    match link.send_batch(numbered(0..3), relink::SendOptions::new()) {
        Err(BatchError::Closed { accepted: 0, rest }) => assert_eq!(rest, numbered(0..3)),
        other => panic!("expected Closed, got {other:?}"),
    }
    assert_eq!(link.metrics().frames_rejected, 3);
}

// The writer: frames copied into a batch of its own, handed over when it is full, at
// `flush`, and when it is dropped.

#[test]
fn a_writer_hands_nothing_over_until_flush_then_the_peer_reads_every_frame_in_order() {
    let peer = Peer::start(Behaviour::Sink);
    let link = sink_link(&peer);
    let mut writer = link.writer();
    for n in 0..500 {
        writer.send(seq_payload(n)).expect("written");
    }
    assert_eq!(
        (writer.buffered(), link.metrics().frames_submitted),
        (500, 0),
        "held in the writer"
    );
    writer.flush().expect("handed over");
    assert_eq!(writer.buffered(), 0);
    // Frames sent on the link itself go after those already handed over.
    link.send(seq_payload(500)).expect("send");
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, 501, "{m:?}");
    assert_accounted(&m, "writer");
    let on_wire = 501 * (4 + seq_payload(0).len());
    assert!(
        peer.wait_received_len(on_wire, BOUND),
        "the peer read everything"
    );
    let (frames, _) = decode_length_prefixed(&peer.received_all());
    assert_each_once_in_order(&seqs_of(&frames, &[]), 0..501, "writer then send");
}

#[test]
fn a_full_writer_hands_its_frames_over_without_a_flush() {
    let link = queued_link((100, 1 << 20), Overflow::RejectNew);
    let mut writer = link.writer().capacity(3, 1 << 20);
    for n in 0..2 {
        writer.send(seq_payload(n)).expect("written");
    }
    assert_eq!(link.metrics().frames_submitted, 0, "two of three");
    writer.send(seq_payload(2)).expect("the third fills it");
    assert_eq!((writer.buffered(), link.metrics().frames_submitted), (0, 3));
    // The byte bound fills it too: one frame larger than the bound goes at once.
    let mut writer = link.writer().capacity(100, 64);
    writer.send([7u8; 65]).expect("written");
    assert_eq!((writer.buffered(), link.metrics().frames_submitted), (0, 4));
    drop(writer);
    let m = link.close(ms(50));
    assert_eq!(m.abandoned.shutdown, 4, "queued, given back at close");
    assert_accounted(&m, "full writer");
}

#[test]
fn a_dropped_writer_hands_its_last_frames_over() {
    let link = queued_link((100, 1 << 20), Overflow::RejectNew);
    let mut writer = link.writer();
    writer.send(b"last one").expect("written");
    drop(writer);
    let m = link.close(ms(50));
    assert_eq!((m.frames_submitted, m.abandoned.shutdown), (1, 1), "{m:?}");
    assert_accounted(&m, "dropped writer");
}

#[test]
fn frames_the_outbox_refuses_at_a_flush_come_back_and_the_writer_is_empty() {
    let link = queued_link((3, 1 << 20), Overflow::RejectNew);
    let mut writer = link.writer();
    for n in 0..5 {
        writer.send(seq_payload(n)).expect("written");
    }
    match writer.flush() {
        Err(BatchError::Full { accepted, rest }) => {
            assert_eq!(accepted, 3);
            assert_eq!(rest, numbered(3..5), "the refused frames, in order");
        }
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(writer.buffered(), 0);
    writer.flush().expect("nothing left to hand over");
    drop(writer);
    let m = link.close(ms(50));
    assert_eq!((m.frames_submitted, m.frames_rejected), (5, 2));
    assert_accounted(&m, "writer refused");
}

#[test]
fn a_frame_the_framing_refuses_comes_back_at_its_own_call_and_the_writer_keeps_the_rest() {
    let link = lines_link();
    let mut writer = link.writer();
    writer.send(b"one").expect("written");
    match writer.send(b"a\nb") {
        Err(BatchError::Invalid {
            batch,
            index: 0,
            error: EncodeError::ContainsNewline,
        }) => assert_eq!(batch.into_frames(), [b"a\nb".to_vec()]),
        other => panic!("expected Invalid, got {other:?}"),
    }
    writer.send(b"two").expect("written");
    assert_eq!(writer.buffered(), 2);
    writer.flush().expect("handed over");
    let m = link.close(ms(50));
    assert_eq!(
        (m.frames_submitted, m.frames_rejected, m.abandoned.shutdown),
        (3, 1, 2)
    );
    assert_accounted(&m, "writer invalid");
}

#[test]
fn a_writer_after_close_gives_its_frames_back_as_closed() {
    let link = queued_link((10, 1 << 20), Overflow::RejectNew);
    let mut writer = link.writer();
    writer
        .send(b"late")
        .expect("written: the writer does not look at the link");
    link.close(ms(10));
    match writer.flush() {
        Err(BatchError::Closed { accepted: 0, rest }) => {
            assert_eq!(rest.into_frames(), [b"late".to_vec()])
        }
        other => panic!("expected Closed, got {other:?}"),
    }
    assert_eq!(link.metrics().frames_rejected, 1);
}

#[test]
fn a_writer_flush_async_waits_for_room_without_blocking_and_a_dropped_one_keeps_the_frames() {
    let link = queued_link((2, 1 << 20), Overflow::Block(BOUND));
    let mut exec = TestExec::new();
    for n in 0..2 {
        link.send_with(seq_payload(n), SendOptions::new().ttl(ms(200)))
            .expect("queued");
    }
    let mut writer = link.writer();
    let mut write = Box::pin(writer.send_async(&[1u8; 8]));
    assert_eq!(
        exec.block_on(&mut write, BOUND),
        Some(Ok(())),
        "held, not handed over"
    );
    drop(write);
    // A flush dropped while it waits leaves the frames in the writer.
    let mut flush = Box::pin(writer.flush_async());
    assert!(exec.poll(&mut flush).is_pending(), "no room");
    drop(flush);
    assert_eq!(writer.buffered(), 1, "kept by the writer");
    let mut flush = Box::pin(writer.flush_async());
    assert!(exec.poll(&mut flush).is_pending(), "still no room");
    let result = exec
        .block_on(flush, BOUND)
        .expect("resolves once room frees");
    assert_eq!(result, Ok(()));
    assert_eq!(writer.buffered(), 0);
    drop(writer);
    let m = link.close(ms(50));
    assert_eq!((m.abandoned.expired, m.abandoned.shutdown), (2, 1));
    assert_accounted(&m, "async writer");
}
