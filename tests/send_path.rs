//! The send path: every `send*` call goes through one intake, so frames of every size and
//! batches from one producer keep their order; the async calls end their waits at the same
//! bounds as the blocking ones; a per-frame deadline applies on every path. Against real peers
//! on 127.0.0.1 (or a port nobody listens on, so that frames stay in the outbox).

mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use relink::bytes::{Bytes, BytesMut};
use relink::error::{RequestError, SendError};
use relink::framing::{DecodeError, EncodeError, Framing, Lines};
use relink::protocol::RequestReply;
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

/// Lines, whose decode of the first frame it reads tells `entered` and waits (up to
/// [`BOUND`]) for `release`: the IO thread is held inside a pass.
#[derive(Clone)]
struct HeldDecode {
    lines: Lines,
    entered: mpsc::Sender<()>,
    release: Arc<Mutex<mpsc::Receiver<()>>>,
    held: Arc<AtomicBool>,
}

impl Framing for HeldDecode {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.lines.encode(frame, dst)
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let frame = self.lines.decode(src)?;
        if frame.is_some() && !self.held.swap(true, Ordering::SeqCst) {
            let _ = self.entered.send(());
            let _ = self.release.lock().unwrap().recv_timeout(BOUND);
        }
        Ok(frame)
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        self.lines.check(frame)
    }

    fn delimits_frames(&self) -> bool {
        true
    }
}

#[test]
fn a_request_whose_deadline_passed_before_the_io_thread_took_it_expires_unwritten() {
    // The IO thread is held in the pass that reads the echo of the first frame; a request with
    // a 1 ms deadline is made meanwhile, and a frame after it; both are taken after the
    // request's deadline: the request must expire unwritten, the frame go out.
    let peer = Peer::start(Behaviour::Echo);
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let link = Link::builder(peer.endpoint())
        .framing(HeldDecode {
            lines: Lines::new(),
            entered: entered_tx,
            release: Arc::new(Mutex::new(release_rx)),
            held: Arc::new(AtomicBool::new(false)),
        })
        .protocol(RequestReply)
        .build()
        .expect("build");
    Watch::new(&link).until(BOUND, |t| t.to == relink::State::Ready);
    link.send("first").expect("send");
    entered
        .recv_timeout(BOUND)
        .expect("the IO thread reads the echo");
    let within = ms(1);
    let asked = Instant::now();
    let late = link.request_within("late", within);
    link.send("on time").expect("send");
    while asked.elapsed() <= within {
        std::thread::sleep(Duration::from_micros(200));
    }
    release.send(()).expect("the IO thread waits");
    assert_eq!(
        late.wait(),
        Err(RequestError::Abandoned(AbandonReason::Expired))
    );
    let m = link.close(BOUND);
    assert_eq!(m.frames_sent, 2);
    assert_eq!(peer.received_all(), b"first\non time\n");
}
