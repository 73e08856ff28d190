//! Read by the peer: frames confirmed by the peer's application (its reply), against real
//! servers killed mid-stream (nats-server, redis-server); the pong that must never answer a
//! request; a poison frame given up; a flush.
//!
//! The real-server tests are ignored in a bare `cargo test`; `.ci/run` installs the servers and
//! runs them.

mod util;

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use relink::error::{DecodeError, EncodeError, FlushError, RequestError};
use relink::framing::{Framing, Lines, Resp};
use relink::protocol::Redis;
use relink::protocol::{Correlation, Handshake, Ping, Predicate, RequestReply};
use relink::{AbandonReason, Confirm, Event, Heartbeat, Link, Overflow, Redelivery, State};
use util::{NatsServer, NatsSubscriber, RedisServer, Server, Watch};

const T: Duration = Duration::from_secs(30);

// ----- NATS: a publisher's burst, the server killed ---------------------------------------------

/// NATS on the wire: frames go out as given (a `PUB` is two lines, CRLF included); inbound
/// frames are CRLF lines (a publisher gets no `MSG`).
#[derive(Clone)]
struct NatsWire(Lines);

impl Framing for NatsWire {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        dst.extend_from_slice(frame);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<bytes::Bytes>, DecodeError> {
        self.0.decode(src)
    }
}

const SUBJECT: &str = "relink.burst";

fn publish(n: u64) -> Vec<u8> {
    let payload = format!("{n:08}");
    format!("PUB {SUBJECT} {}\r\n{payload}\r\n", payload.len()).into_bytes()
}

fn payload_seq(payload: &[u8]) -> Option<u64> {
    std::str::from_utf8(payload).ok()?.parse().ok()
}

/// A publisher link to `endpoint`: `CONNECT` then `PING` as the hello (ready on its `PONG`),
/// PING/PONG as the heartbeat, only pings answered, frames confirmed by `confirm`.
fn publisher(endpoint: &str, confirm: Confirm, policy: Redelivery) -> Link {
    Link::builder(endpoint)
        .framing(NatsWire(Lines::builder().crlf(true).build().unwrap()))
        .protocol(Handshake::new(
            vec![b"CONNECT {\"verbose\":false}\r\nPING\r\n".to_vec()],
            Predicate::new(|f| f == b"PONG"),
        ))
        .heartbeat(
            Heartbeat::new(Duration::from_secs(1), Ping::Raw(b"PING\r\n".to_vec()))
                .reply(|f: &[u8]| f == b"PONG"),
        )
        .confirm(confirm)
        .delivery(|d| d.redelivery = policy)
        // The subscriber is back on a restarted server before the publisher.
        .socket(|s| s.reconnect_ivl = Duration::from_millis(300))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(300);
            r.backoff_max = Duration::from_secs(1);
        })
        .delivery(|d| d.overflow = Overflow::Block(T))
        // Every frame of the burst may come back in an event at once.
        .events_capacity(16_384)
        .build()
        .unwrap()
}

/// Frames given back in events, until the link's outcomes add up to `total` (bounded).
fn settle(link: &Link, total: u64) -> Vec<(Vec<u8>, AbandonReason)> {
    let mut reported = Vec::new();
    let deadline = Instant::now() + T;
    loop {
        let m = link.metrics();
        if m.frames_confirmed + m.abandoned.total() >= total {
            break;
        }
        assert!(Instant::now() < deadline, "outcomes never added up: {m:?}");
        if let Ok(Event::Abandoned { frame, reason }) =
            link.events().recv_timeout(Duration::from_millis(20))
        {
            reported.push((frame.to_vec(), reason));
        }
    }
    while let Ok(e) = link.events().try_recv() {
        if let Event::Abandoned { frame, reason } = e {
            reported.push((frame.to_vec(), reason));
        }
    }
    reported
}

/// What became of a burst: received by the server (its subscriber saw it), reported, resent.
struct Burst {
    received: usize,
    reported: usize,
    resent: u64,
    lost: usize,
}

/// 5 000 `PUB`s, then the server killed (frozen 150 ms first if `freeze`) and started again.
fn nats_burst(confirm: Confirm, policy: Redelivery, freeze: bool) -> Option<Burst> {
    const N: u64 = 5_000;
    let mut nats = NatsServer::start(&[])?;
    let sub = NatsSubscriber::start(nats.addr(), SUBJECT);
    let link = publisher(&nats.endpoint(), confirm, policy);
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Ready);
    for n in 0..N {
        link.send(publish(n)).expect("accepted");
    }
    if freeze {
        nats.stop_signal();
        thread::sleep(Duration::from_millis(150));
    }
    nats.kill();
    nats.relaunch();
    sub.wait_subscribed(2);
    let reported = settle(&link, N);
    let reported_seqs: HashSet<u64> = reported
        .iter()
        .filter_map(|(f, _)| {
            let text = std::str::from_utf8(f).ok()?;
            payload_seq(text.lines().nth(1)?.as_bytes())
        })
        .collect();
    // The server delivered what it confirmed before answering the ping; its subscriber may
    // read the last of it a moment later.
    let received = || -> HashSet<u64> {
        sub.payloads()
            .iter()
            .filter_map(|p| payload_seq(p))
            .collect()
    };
    let missing = |got: &HashSet<u64>| {
        (0..N)
            .filter(|n| !got.contains(n) && !reported_seqs.contains(n))
            .count()
    };
    let _ = util::wait_for(Duration::from_secs(5), || {
        (missing(&received()) == 0).then_some(())
    });
    let received = received();
    let lost = missing(&received);
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    drop(watch);
    Some(Burst {
        received: received.len(),
        reported: reported.len(),
        resent: m.frames_resent,
        lost,
    })
}

/// Confirmed by reply, with barriers no sooner than 1 s: the burst's frames are confirmed only
/// by pongs of the server started again, on which its subscriber is already back. (NATS
/// forwards a message to a subscriber after it has read it, and may answer a later ping first:
/// a kill in the microseconds between the two loses a message the server did read and
/// confirm. That loss is the server's, and the subscriber cannot tell it from relink's.)
fn burst_confirm() -> Confirm {
    Confirm::reply().barrier(1 << 20, Duration::from_secs(1))
}

fn check_burst(b: Option<Burst>, policy: Redelivery, what: &str) {
    let b = b.expect("this test needs nats-server");
    eprintln!(
        "{what}: {} received, {} reported, {} resent, {} lost without a report",
        b.received, b.reported, b.resent, b.lost
    );
    assert_eq!(b.lost, 0, "{what}: frames lost without a report");
    if policy == Redelivery::Resend {
        assert_eq!(b.reported, 0, "{what}: nothing reported under Resend");
    }
}

#[test]
#[ignore = "needs nats-server"]
fn a_nats_burst_confirmed_by_reply_loses_nothing_unreported_when_the_server_is_killed_resend() {
    let policy = Redelivery::Resend;
    check_burst(
        nats_burst(Confirm::reply(), policy, false),
        policy,
        "killed, resend",
    );
}

#[test]
#[ignore = "needs nats-server"]
fn a_nats_burst_confirmed_by_reply_loses_nothing_unreported_when_the_server_is_killed_report() {
    let policy = Redelivery::Report;
    check_burst(
        nats_burst(Confirm::reply(), policy, false),
        policy,
        "killed, report",
    );
}

#[test]
#[ignore = "needs nats-server"]
fn a_nats_burst_confirmed_by_reply_loses_nothing_unreported_when_the_server_is_frozen_then_killed()
{
    for policy in [Redelivery::Resend, Redelivery::Report] {
        let what = format!("frozen then killed, {policy:?}");
        check_burst(nats_burst(burst_confirm(), policy, true), policy, &what);
    }
}

// ----- redis: writes sent with `send`, the server killed twice -------------------------------

/// One `SET key-N N` as RESP.
fn set(n: u64) -> Vec<u8> {
    Resp::command(["SET", &format!("key-{n:010}"), &format!("{n:010}")])
}

/// The keys `key-N` (N below `writes`) the redis-server at `addr` has.
fn present_keys(redis: &RedisServer, writes: u64) -> HashSet<u64> {
    let link = Link::builder(redis.endpoint())
        .framing(Resp::new())
        .protocol(RequestReply)
        .requests(|q| q.correlation = Some(Correlation::resp()))
        .build()
        .unwrap();
    let reply = link
        .request_within(Resp::command(["KEYS", "key-*"]), T)
        .wait()
        .expect("KEYS answered");
    link.close(Duration::from_secs(1));
    let text = String::from_utf8_lossy(&reply);
    text.lines()
        .filter_map(|l| l.strip_prefix("key-")?.parse::<u64>().ok())
        .filter(|&n| n < writes)
        .collect()
}

/// 20 000 `SET`s sent with `send` (replies read as events), redis-server (every write on disk
/// before its reply) killed and started again twice. Returns (missing keys, refusals (a
/// restarted server's `-LOADING`), reported, resent).
fn redis_kills(confirm: Confirm, policy: Redelivery) -> Option<(u64, u64, u64, u64)> {
    const WRITES: u64 = 20_000;
    // Every write on disk before its reply, in a data directory removed on drop.
    let mut redis = RedisServer::start_persistent()?;
    let link = util::writer_to(&redis, policy, T)
        .confirm(confirm)
        .build()
        .unwrap();
    // Writes reported. A write a restarted server refused while it read its append-only file
    // (`-LOADING`) is not confirmed: resent, or reported here.
    let collector = util::collect_abandoned(link.events(), 2 * T);
    let producer = {
        let link = link.clone();
        thread::spawn(move || {
            for n in 0..WRITES {
                link.send(set(n)).expect("accepted");
            }
        })
    };
    let m = util::kill_twice_while_writing(&link, &mut redis, WRITES, producer, T);
    let reported = collector.join().unwrap().len() as u64;
    let missing = WRITES - present_keys(&redis, WRITES).len() as u64;
    Some((missing, m.frames_refused, reported, m.frames_resent))
}

fn check_redis(policy: Redelivery) {
    let (missing, refused, reported, resent) =
        redis_kills(Confirm::reply(), policy).expect("this test needs redis-server");
    let lost = missing.saturating_sub(reported);
    eprintln!(
        "redis killed twice ({policy:?}): {missing} keys missing, {refused} refusals, \
         {reported} reported, {resent} resent: {lost} lost without a report"
    );
    assert_eq!(lost, 0, "writes lost without a report");
    if policy == Redelivery::Resend {
        assert_eq!(reported, 0, "nothing reported under Resend");
    }
}

#[test]
#[ignore = "needs redis-server"]
fn redis_writes_confirmed_by_reply_lose_nothing_unreported_across_two_kills_resend() {
    check_redis(Redelivery::Resend);
}

#[test]
#[ignore = "needs redis-server"]
fn redis_writes_confirmed_by_reply_lose_nothing_unreported_across_two_kills_report() {
    check_redis(Redelivery::Report);
}

// ----- the pong that must never answer a request -------------------------------------------------

#[test]
#[ignore = "needs redis-server"]
fn a_heartbeats_pong_never_answers_a_request_when_every_frame_is_answered() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let b = || {
        Link::builder(redis.endpoint())
            .framing(Resp::new())
            .requests(|q| q.correlation = Some(Correlation::resp()))
            // A ping every 2 ms: pings and requests interleave all the time (and a busy
            // machine's pauses are no reason to call the peer dead).
            .heartbeat(
                Heartbeat::new(Duration::from_millis(2), Ping::Raw(b"PING\r\n".to_vec()))
                    .max_missed(10_000),
            )
    };
    assert!(
        b().build().is_err(),
        "without saying what the peer answers, a pong could answer a request"
    );
    let link = b().protocol(Redis::new()).build().unwrap();
    link.request_within(Resp::command(["SET", "k", "value"]), T)
        .wait()
        .expect("SET answered");
    let mut pongs = 0;
    for _ in 0..1_000 {
        let reply = link
            .request_within(Resp::command(["GET", "k"]), T)
            .wait()
            .expect("GET answered");
        if reply.starts_with(b"+PONG") {
            pongs += 1;
        } else {
            assert_eq!(&reply[..], b"$5\r\nvalue\r\n");
        }
    }
    let m = link.close(Duration::from_secs(1));
    eprintln!(
        "200 GETs beside {} pings: {pongs} got a pong",
        m.heartbeats_sent
    );
    assert!(
        m.heartbeats_sent > 10,
        "pings went out between the requests"
    );
    assert_eq!(pongs, 0);
}

// ----- a poison frame ---------------------------------------------------------------------------

#[test]
fn a_frame_that_makes_the_peer_reset_is_given_up_as_poison_and_the_frames_behind_it_go_through() {
    // The peer resets the connection as soon as it sees the poison marker, before it has read
    // the 2 MiB frame whole, so the frame is never confirmed.
    let peer = util::Peer::start(util::Behaviour::script(|c| {
        let mut seen = Vec::new();
        while !c.is_stopping() {
            match c.read_some(Duration::from_millis(50)) {
                Ok(b) if b.is_empty() => return,
                Ok(b) => seen.extend_from_slice(&b),
                Err(_) => continue,
            }
            if seen.windows(6).any(|w| w == b"POISON") {
                c.reset();
                return;
            }
        }
    }));
    let link = Link::builder(peer.endpoint())
        .framing(relink::framing::LengthDelimited::len32())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(10);
            r.backoff_max = Duration::from_millis(50);
        })
        .delivery(|d| d.max_losses = 3)
        .build()
        .unwrap();
    let mut poison = b"POISON".to_vec();
    poison.resize(2 << 20, b'x');
    link.send(poison).expect("accepted");
    for n in 0..10u64 {
        link.send(format!("frame {n}")).expect("accepted");
    }
    let abandoned = util::wait_abandoned(&link, 1, T);
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].1, AbandonReason::Poison);
    assert!(abandoned[0].0.starts_with(b"POISON"));
    assert_eq!(link.flush(T), Ok(()), "the frames behind it are confirmed");
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.abandoned.poison, 1);
    assert_eq!(m.frames_confirmed, 10);
    assert_eq!(m.unaccounted(), 0, "{m:?}");
}

// ----- flush -----------------------------------------------------------------------------------

#[test]
#[ignore = "needs redis-server"]
fn a_flush_confirmed_by_reply_returns_once_redis_has_answered_every_write_before_it() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = Link::builder(redis.endpoint())
        .framing(Resp::new())
        .protocol(Redis::new())
        .confirm(Confirm::reply())
        .build()
        .unwrap();
    for n in 0..1_000 {
        link.send(set(n)).expect("accepted");
    }
    link.flush(T).expect("flushed");
    assert_eq!(link.metrics().frames_confirmed, 1_000);
    assert_eq!(present_keys(&redis, 1_000).len(), 1_000, "all applied");
    link.close(Duration::from_secs(1));
}

#[test]
fn a_flush_on_a_closed_link_says_so() {
    let link = Link::builder(util::refused_endpoint())
        .framing(relink::framing::Lines::new())
        .protocol(RequestReply)
        .build()
        .unwrap();
    link.close(Duration::from_millis(10));
    assert_eq!(link.flush(Duration::from_secs(1)), Err(FlushError::Closed));
    assert!(matches!(
        link.request(b"x".to_vec()).wait(),
        Err(RequestError::Closed(_))
    ));
}
