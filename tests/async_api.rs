//! The async face: `recv_async` and the `Stream` of events are woken by the IO thread (never
//! polled in a loop), the stream ends after close, many receivers polled at once all make
//! progress, `send_async` waits for room and `close_async` resolves. Driven by the kit's
//! counting executor (`tests/util/exec.rs`), so each test counts polls and wakes, against real
//! peers on 127.0.0.1.

mod util;

use std::pin::pin;
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use relink::bytes::Bytes;
use relink::error::SendError;
use relink::framing::Lines;
use relink::{Event, Link, Overflow, SendOptions, State};
use util::*;

/// Bound on every wait for something that should happen within a few milliseconds.
const BOUND: Duration = Duration::from_secs(10);

fn ready_echo_link(peer: &Peer) -> Link {
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .build()
        .expect("build");
    Watch::new(&link).until(BOUND, |t| t.to == State::Ready);
    // The IO thread tells async receivers at the end of the pass that delivered an event, and
    // the watch may have taken the Ready transition before that: a round trip through the IO
    // thread (a later pass) lets that telling go by before a test counts wakes.
    link.metrics();
    link
}

#[test]
fn recv_async_is_woken_once_when_an_event_arrives_and_not_polled_before() {
    let peer = Peer::start(Behaviour::Echo);
    let link = ready_echo_link(&peer);
    let mut exec = TestExec::new();
    let mut recv = link.events().recv_async();
    assert!(exec.poll(&mut recv).is_pending(), "no event yet");
    // Nothing arrives: the future must not be woken (a polling loop would wake it).
    thread::sleep(ms(200));
    assert_eq!(exec.wakes(), 0, "woken with nothing to take");
    link.send(b"hello".to_vec()).expect("send");
    assert!(exec.wait_wakes_above(0, BOUND), "not woken by the echo");
    match exec.poll(&mut recv) {
        Poll::Ready(Ok(Event::Frame(f))) => assert_eq!(f, &b"hello"[..]),
        other => panic!("expected the echoed frame, got {other:?}"),
    }
    assert_eq!(exec.polls, 2, "one poll to register, one to take the event");
    assert_eq!(exec.wakes(), 1, "exactly one wake for one event");
}

#[test]
fn the_stream_of_events_ends_after_close_once_every_event_is_taken() {
    let peer = Peer::start(Behaviour::Echo);
    let link = ready_echo_link(&peer);
    for i in 0..5 {
        link.send(format!("line {i}").into_bytes()).expect("send");
    }
    let mut events = link.events().clone();
    let closer = {
        let link = link.clone();
        thread::spawn(move || {
            // Close once the echoes are back, so that the stream holds frames and the close.
            wait_until(BOUND, || link.metrics().frames_received == 5);
            link.close(Duration::from_secs(2))
        })
    };
    let mut exec = TestExec::new();
    let all: Vec<Event> = exec
        .block_on(async { (&mut events).collect::<Vec<_>>().await }, BOUND)
        .expect("the stream did not end within the bound");
    let m = closer.join().expect("closer");
    let frames: Vec<&Bytes> = all
        .iter()
        .filter_map(|e| match e {
            Event::Frame(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 5, "every echo came through the stream");
    assert!(
        all.iter()
            .any(|e| matches!(e, Event::State(t) if t.to == State::Closed)),
        "the close is the stream's last news: {all:?}"
    );
    assert_eq!(m.state, State::Closed);
    assert!(
        exec.polls < 40,
        "the stream was polled {} times for {} events: a polling loop",
        exec.polls,
        all.len()
    );
    // Polled again after its end, it stays ended.
    assert_eq!(exec.block_on(events.next(), BOUND), Some(None));
}

#[test]
fn many_receivers_polled_at_once_all_make_progress() {
    let peer = Peer::start(Behaviour::Echo);
    let link = ready_echo_link(&peer);
    const N: usize = 4;
    let (started_tx, started) = crossbeam_channel::unbounded();
    let receivers: Vec<_> = (0..N)
        .map(|_| {
            let events = link.events().clone();
            let started_tx = started_tx.clone();
            thread::spawn(move || {
                let mut exec = TestExec::new();
                let mut recv = pin!(events.recv_async());
                let first = exec.poll(&mut recv);
                started_tx.send(()).expect("started");
                match first {
                    Poll::Ready(r) => Some(r),
                    Poll::Pending => exec.block_on(recv, BOUND),
                }
            })
        })
        .collect();
    for _ in 0..N {
        started.recv_timeout(BOUND).expect("receiver started");
    }
    // Every receiver is registered (or already done): N events, one for each.
    for i in 0..N {
        link.send(format!("to any {i}").into_bytes()).expect("send");
    }
    let mut got: Vec<Vec<u8>> = receivers
        .into_iter()
        .map(|h| match h.join().expect("receiver thread") {
            Some(Ok(Event::Frame(f))) => f.to_vec(),
            other => panic!("a receiver missed its wake-up or got no frame: {other:?}"),
        })
        .collect();
    got.sort();
    let want: Vec<Vec<u8>> = (0..N).map(|i| format!("to any {i}").into_bytes()).collect();
    assert_eq!(got, want, "each event went to exactly one receiver");
}

#[test]
fn send_async_with_block_waits_for_room_and_resumes_when_frames_leave() {
    // Nothing listens: frames stay queued until their ttl frees the room.
    let link = Link::builder(refused_endpoint())
        .framing(Lines::new())
        .delivery(|d| {
            d.outbox_frames = 2;
            d.outbox_bytes = 1 << 20;
            d.overflow = Overflow::Block(Duration::from_secs(60));
        })
        .build()
        .expect("build");
    link.send_with(b"a".to_vec(), SendOptions::new().ttl(ms(300)))
        .expect("a");
    link.send_with(b"b".to_vec(), SendOptions::new().ttl(ms(300)))
        .expect("b");
    let mut exec = TestExec::new();
    let started = Instant::now();
    let mut send = Box::pin(link.send_async(b"c".to_vec(), relink::SendOptions::new()));
    assert!(exec.poll(&mut send).is_pending(), "the outbox is full");
    assert!(
        exec.wait_wakes_above(0, BOUND),
        "not woken when the expired frames left"
    );
    let waited = started.elapsed();
    let result = exec.block_on(send, BOUND).expect("send_async resolves");
    assert_eq!(result, Ok(()));
    assert!(
        waited >= ms(250),
        "woken after {waited:?}, before any frame left"
    );
    assert!(
        exec.polls <= 4,
        "polled {} times: a polling loop",
        exec.polls
    );
    let m = link.close(ms(100));
    assert_eq!(m.frames_submitted, 3);
    assert_eq!(m.abandoned.expired, 2);
    assert_eq!(
        m.abandoned.shutdown, 1,
        "c waited in the outbox until the close"
    );
    assert_accounted(&m, "send_async");
}

#[test]
fn a_waiting_send_async_is_refused_when_the_link_closes() {
    let link = offline_link((1, 1 << 20), Overflow::Block(Duration::from_secs(60)));
    link.send(b"a".to_vec()).expect("a");
    let mut exec = TestExec::new();
    let mut send = Box::pin(link.send_async(b"b".to_vec(), relink::SendOptions::new()));
    assert!(exec.poll(&mut send).is_pending());
    let closer = {
        let link = link.clone();
        thread::spawn(move || link.close(ms(50)))
    };
    let result = exec.block_on(send, BOUND).expect("woken by the close");
    assert_eq!(result, Err(SendError::Closed(b"b"[..].into())));
    let m = closer.join().expect("closer");
    assert_eq!(m.frames_rejected, 1);
    assert_accounted(&m, "refused at close");
}

#[test]
fn close_async_resolves_with_the_final_metrics_without_blocking() {
    let peer = Peer::start(Behaviour::Echo);
    let link = ready_echo_link(&peer);
    for i in 0..10 {
        link.send(format!("{i}").into_bytes()).expect("send");
    }
    let mut exec = TestExec::new();
    let mut close = Box::pin(link.close_async(Duration::from_secs(2)));
    let started = Instant::now();
    let first = exec.poll(&mut close);
    assert!(
        started.elapsed() < ms(50),
        "the first poll blocked for {:?}",
        started.elapsed()
    );
    let m = match first {
        Poll::Ready(m) => m,
        Poll::Pending => exec.block_on(close, BOUND).expect("close_async resolves"),
    };
    assert_eq!(m.state, State::Closed);
    assert_eq!(m.frames_sent, 10, "flushed before closing");
    assert_accounted(&m, "close_async");
    assert_eq!(link.state(), State::Closed);
    // Closing again is harmless and resolves at once.
    let again = exec
        .block_on(link.close_async(ms(10)), BOUND)
        .expect("second close");
    assert_eq!(again.frames_sent, 10);
}

#[test]
fn a_stream_on_tokio_sees_frames_and_the_close() {
    let peer = Peer::start(Behaviour::Echo);
    let link = ready_echo_link(&peer);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let got = rt.block_on(async {
        let mut events = link.events().clone();
        link.send_async(b"ping".to_vec(), relink::SendOptions::new())
            .await
            .expect("send");
        let frame = tokio::time::timeout(BOUND, async {
            loop {
                match events.next().await {
                    Some(Event::Frame(f)) => break f,
                    Some(_) => {}
                    None => panic!("stream ended early"),
                }
            }
        })
        .await
        .expect("echo within the bound");
        let m = link.close_async(Duration::from_secs(1)).await;
        let rest = tokio::time::timeout(BOUND, events.collect::<Vec<_>>())
            .await
            .expect("the stream ends after close");
        (frame, m, rest)
    });
    assert_eq!(got.0, &b"ping"[..]);
    assert_eq!(got.1.frames_sent, 1);
    assert!(got
        .2
        .iter()
        .any(|e| matches!(e, Event::State(t) if t.to == State::Closed)));
}
