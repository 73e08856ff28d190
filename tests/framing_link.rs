//! The public framing trait through a real link: a user-defined framing end to end, a
//! heartbeat reply that is always a whole frame (the reply never swallows application bytes),
//! and the configurations `build()` refuses for raw chunks.
//!
//! Run with `cargo test --test framing_link`; the redis-server scenarios with
//! `cargo test --test framing_link -- --ignored`.

mod util;

use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relink::bytes::{Buf, Bytes, BytesMut};
use relink::error::{ConfigError, LinkError, SendError};
use relink::framing::{DecodeError, EncodeError, Framing, Lines, Raw, Resp, RespValue};
use relink::protocol::{Handshake, Ping, Predicate};
use relink::{Cause, Event, Heartbeat, Link, State};
use util::{Behaviour, Conn, Peer, RedisServer};

/// Bound on any single wait for something that should happen at once on loopback.
const T: Duration = Duration::from_secs(10);

/// Waits (bounded) until the link is Ready, taking events on the way.
fn wait_ready(link: &Link) {
    let deadline = Instant::now() + T;
    while link.state() != State::Ready {
        assert!(Instant::now() < deadline, "not Ready within {T:?}");
        let _ = link.events().recv_timeout(Duration::from_millis(20));
    }
}

/// Takes frames until `n` arrived or `T` passed; other events are kept apart.
fn take_frames(link: &Link, n: usize) -> (Vec<Vec<u8>>, Vec<Event>) {
    let deadline = Instant::now() + T;
    let (mut frames, mut other) = (Vec::new(), Vec::new());
    while frames.len() < n {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Frame(f)) => frames.push(f.into()),
            Ok(ev) => other.push(ev),
            Err(_) => break,
        }
    }
    (frames, other)
}

// ---------------------------------------------------------------------------------------
// A framing of the application's own
// ---------------------------------------------------------------------------------------

/// A 2-byte big-endian length (counting the type byte), a type byte, then the body; the frame
/// the application sees is the type byte and the body.
#[derive(Debug, Clone)]
struct Typed;

impl Framing for Typed {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.extend_from_slice(&(frame.len() as u16).to_be_bytes());
        dst.extend_from_slice(frame);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let Some(head) = src.get(..2) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([head[0], head[1]]));
        if len == 0 {
            return Err(DecodeError::Malformed("a frame needs its type byte"));
        }
        if src.len() < 2 + len {
            return Ok(None);
        }
        src.advance(2);
        Ok(Some(src.split_to(len).freeze()))
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        match frame.len() {
            0 => Err(EncodeError::TooShort { len: 0, min: 1 }),
            len if len > 0xffff => Err(EncodeError::TooLarge { len, max: 0xffff }),
            _ => Ok(()),
        }
    }

    fn max_buffered(&self) -> usize {
        2 + 0xffff
    }

    fn name(&self) -> &str {
        "typed"
    }
}

/// Reads one `Typed` frame (type byte and body) from the peer's side of a connection.
fn read_typed(conn: &mut Conn, timeout: Duration) -> Option<Vec<u8>> {
    let head = conn.read_exact(2, timeout).ok()?;
    let len = usize::from(u16::from_be_bytes([head[0], head[1]]));
    conn.read_exact(len, timeout).ok()
}

/// Answers each `Typed` frame with type + 1 and the body upper-cased, the answers of a few
/// requests written glued together and split at an odd point.
fn typed_peer() -> Peer {
    Peer::start(Behaviour::script(|conn| {
        let mut out = Vec::new();
        while let Some(frame) = read_typed(conn, Duration::from_secs(30)) {
            let mut answer = vec![frame[0].wrapping_add(1)];
            answer.extend(frame[1..].iter().map(u8::to_ascii_uppercase));
            out.extend_from_slice(&(answer.len() as u16).to_be_bytes());
            out.extend_from_slice(&answer);
            if out.len() > 20 {
                let cut = out.len() - 3;
                if conn.write_all(&out[..cut]).is_err() {
                    return;
                }
                out.drain(..cut);
            }
            if frame == b"\x09flush" {
                if conn.write_all(&out).is_err() {
                    return;
                }
                out.clear();
            }
        }
    }))
}

#[test]
fn a_user_defined_framing_carries_frames_both_ways_through_a_link() {
    let peer = typed_peer();
    let link = Link::builder(peer.endpoint())
        .framing(Typed)
        .build()
        .expect("valid config");
    let mut sent = Vec::new();
    for i in 0..50u8 {
        let frame = [&[i % 8][..], format!("message {i}").as_bytes()].concat();
        link.send(frame.clone()).expect("accepted");
        sent.push(frame);
    }
    link.send(b"\x09flush".to_vec()).expect("accepted");
    let (frames, _) = take_frames(&link, 51);
    assert_eq!(frames.len(), 51, "every answer arrives as one frame");
    for (frame, answer) in sent.iter().zip(&frames) {
        assert_eq!(answer[0], frame[0] + 1);
        assert_eq!(answer[1..], frame[1..].to_ascii_uppercase());
    }
    assert_eq!(frames[50], b"\x0aFLUSH");
    let m = link.close(T);
    assert_eq!(m.frames_sent, 51);
    assert_eq!(m.frames_received, 51);
}

#[test]
fn a_frame_the_user_framing_refuses_is_given_back_at_send() {
    let link = Link::builder(util::refused_endpoint())
        .framing(Typed)
        .build()
        .expect("valid config");
    match link.send(Vec::new()) {
        Err(SendError::Invalid(frame, EncodeError::TooShort { len: 0, min: 1 })) => {
            assert!(frame.is_empty())
        }
        other => panic!("expected the empty frame refused, got {other:?}"),
    }
    let big = vec![7u8; 0x10000];
    match link.send(big.clone()) {
        Err(SendError::Invalid(frame, EncodeError::TooLarge { .. })) => assert_eq!(frame, big),
        other => panic!("expected the large frame refused, got {other:?}"),
    }
    let m = link.close(T);
    assert_eq!(m.frames_rejected, 2);
}

#[test]
fn a_peer_that_breaks_the_user_framing_gets_its_connection_reset_with_an_error_event() {
    let peer = Peer::start(Behaviour::Garbage(b"\0\0\0\x02ok".to_vec()));
    let link = Link::builder(peer.endpoint())
        .framing(Typed)
        .build()
        .expect("valid config");
    let deadline = Instant::now() + T;
    let (mut error, mut reset) = (None, false);
    while !(error.is_some() && reset) {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Error(e)) => error = Some(e),
            Ok(Event::State(t)) if t.cause == Cause::Protocol => reset = true,
            Ok(_) => {}
            Err(_) => panic!("no protocol reset within {T:?} (error: {error:?})"),
        }
    }
    assert_eq!(
        error,
        Some(LinkError::Decode(DecodeError::Malformed(
            "a frame needs its type byte"
        )))
    );
}

// ---------------------------------------------------------------------------------------
// Raw chunks cannot carry a reply
// ---------------------------------------------------------------------------------------

#[test]
fn raw_chunks_with_a_heartbeat_reply_or_a_protocol_are_a_config_error() {
    let hb = || {
        Heartbeat::new(Duration::from_millis(100), Ping::Raw(b"PING\r\n".to_vec()))
            .reply(Predicate::starts_with(&b"+PONG"[..]))
    };
    for builder in [
        Link::builder("tcp://127.0.0.1:6379").heartbeat(hb()),
        Link::builder("tcp://127.0.0.1:6379")
            .framing(Raw::new())
            .heartbeat(hb()),
        Link::builder("tcp://127.0.0.1:6379")
            .framing(Raw)
            .heartbeat(hb()),
    ] {
        assert_eq!(
            builder.build().err(),
            Some(ConfigError::ReplyNeedsFraming {
                what: "heartbeat reply",
                framing: "raw".into()
            })
        );
    }
    let handshake = Handshake::new(vec![b"HELLO".to_vec()], Predicate::starts_with("OK"));
    let err = Link::builder("tcp://127.0.0.1:6379")
        .protocol(handshake)
        .build()
        .err();
    assert_eq!(
        err,
        Some(ConfigError::ReplyNeedsFraming {
            what: "protocol",
            framing: "raw".into()
        })
    );
    assert!(err.unwrap().to_string().contains("raw"));

    // A heartbeat without a reply predicate is fine raw; a reply is fine with any framing
    // that delimits frames.
    let no_reply = Heartbeat::new(Duration::from_millis(100), Ping::Raw(b"p".to_vec()));
    let link = Link::builder(util::refused_endpoint())
        .heartbeat(no_reply)
        .build()
        .expect("raw heartbeat without a reply");
    link.close(T);
    let link = Link::builder(util::refused_endpoint())
        .framing(Lines::builder().crlf(true).build().unwrap())
        .heartbeat(hb())
        .build()
        .expect("lines with a reply");
    link.close(T);
}

// ---------------------------------------------------------------------------------------
// The scenario: pings every 2 ms, replies interleaved with the application's
// ---------------------------------------------------------------------------------------

/// Takes one RESP command (an array of bulk strings) from the front of `buf`.
fn take_command(buf: &mut Vec<u8>) -> Option<Vec<Vec<u8>>> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at + 1..end], end + 2))
    }
    let (count, mut at) = line(buf, 0)?;
    assert_eq!(buf[0], b'*', "the link writes commands as arrays");
    let count: usize = std::str::from_utf8(count).ok()?.parse().ok()?;
    let mut args = Vec::new();
    for _ in 0..count {
        let (len, next) = line(buf, at)?;
        let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
        let arg = buf.get(next..next + len)?.to_vec();
        at = next + len + 2;
        if buf.len() < at {
            return None;
        }
        args.push(arg);
    }
    buf.drain(..at);
    Some(args)
}

/// A redis-like peer: `+PONG` to each PING, the bulk string `value-<key>` to each GET; its
/// answers are written glued together and split at random points (a seeded generator), the
/// rest written as soon as the client pauses for 5 ms.
fn scripted_redis_peer() -> Peer {
    Peer::start(Behaviour::script(|conn| {
        let mut rng = StdRng::seed_from_u64(13 + conn.index() as u64);
        let (mut input, mut out) = (Vec::new(), Vec::new());
        loop {
            while let Some(cmd) = take_command(&mut input) {
                match cmd[0].as_slice() {
                    b"PING" => out.extend_from_slice(b"+PONG\r\n"),
                    b"GET" => {
                        let value = [&b"value-"[..], &cmd[1]].concat();
                        out.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
                        out.extend_from_slice(&value);
                        out.extend_from_slice(b"\r\n");
                    }
                    other => panic!("unexpected command {:?}", String::from_utf8_lossy(other)),
                }
                if rng.random_bool(0.6) && !out.is_empty() {
                    let cut = rng.random_range(1..=out.len());
                    if conn.write_all(&out[..cut]).is_err() {
                        return;
                    }
                    out.drain(..cut);
                }
            }
            match conn.read_some(Duration::from_millis(5)) {
                Ok(chunk) if chunk.is_empty() => return,
                Ok(chunk) => input.extend_from_slice(&chunk),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    if conn.write_all(&out).is_err() {
                        return;
                    }
                    out.clear();
                }
                Err(_) => return,
            }
        }
    }))
}

/// Sends `n` GETs of `key-<i>` at 0.7 ms intervals and returns every frame that reached the
/// application (bounded wait).
fn gets_at_0_7_ms(link: &Link, n: usize) -> Vec<Vec<u8>> {
    let sender = {
        let link = link.clone();
        thread::spawn(move || {
            for i in 0..n {
                link.send(Resp::command(["GET", &format!("key-{i}")]))
                    .expect("accepted");
                thread::sleep(Duration::from_micros(700));
            }
        })
    };
    let (frames, other) = take_frames(link, n);
    sender.join().expect("sender");
    assert!(
        !other.iter().any(|e| matches!(e, Event::Error(_))),
        "{other:?}"
    );
    frames
}

/// A heartbeat every 2 ms whose `+PONG` replies are recognised as whole frames; never dead
/// (the scenario is about replies, not about a slow machine's pauses).
fn ping_every_2_ms(ping: Ping, reply: Predicate) -> Heartbeat {
    Heartbeat::new(Duration::from_millis(2), ping)
        .max_missed(10_000)
        .reply(reply)
}

#[test]
fn with_pings_every_2_ms_every_get_reply_reaches_the_application_from_a_scripted_peer() {
    let peer = scripted_redis_peer();
    let link = Link::builder(peer.endpoint())
        .framing(Resp::new())
        .heartbeat(ping_every_2_ms(
            Ping::Frame(b"PING".to_vec()),
            Predicate::new(|f| f == b"+PONG\r\n"),
        ))
        .build()
        .expect("valid config");
    wait_ready(&link);
    let frames = gets_at_0_7_ms(&link, 300);
    let m = link.metrics();
    println!(
        "scripted peer: {} of 300 replies reached the application; {} pings sent",
        frames.len(),
        m.heartbeats_sent
    );
    assert_eq!(frames.len(), 300, "every GET reply reaches the application");
    for (i, frame) in frames.iter().enumerate() {
        assert_eq!(
            RespValue::parse(frame),
            Ok(RespValue::Bulk(format!("value-key-{i}").into_bytes())),
            "reply {i}"
        );
    }
    assert!(m.heartbeats_sent >= 20, "{m:?}");
    assert!(m.last_rtt.is_some(), "the +PONG replies were recognised");
    assert_eq!(m.frames_received, 300, "no +PONG was delivered as a frame");
    link.close(T);
}

fn redis() -> RedisServer {
    RedisServer::start().expect("redis-server is not on PATH")
}

#[test]
#[ignore = "needs redis-server"]
fn with_pings_every_2_ms_every_get_reply_reaches_the_application_from_redis_under_lines() {
    let server = redis();
    let link = Link::builder(server.endpoint())
        .framing(Lines::builder().crlf(true).build().unwrap())
        .heartbeat(ping_every_2_ms(
            Ping::Raw(b"PING\r\n".to_vec()),
            Predicate::starts_with(&b"+PONG"[..]),
        ))
        .build()
        .expect("valid config");
    wait_ready(&link);
    // Inline GETs of keys that do not exist: each reply is the one line `$-1`.
    let sender = {
        let link = link.clone();
        thread::spawn(move || {
            for i in 0..300 {
                link.send(format!("GET missing-{i}")).expect("accepted");
                thread::sleep(Duration::from_micros(700));
            }
        })
    };
    let (frames, _) = take_frames(&link, 300);
    sender.join().expect("sender");
    let m = link.metrics();
    println!(
        "redis, lines: {} of 300 replies reached the application; {} pings sent",
        frames.len(),
        m.heartbeats_sent
    );
    assert_eq!(frames.len(), 300);
    assert!(frames.iter().all(|f| f == b"$-1"), "{frames:?}");
    assert!(m.last_rtt.is_some());
    link.close(T);
}

#[test]
#[ignore = "needs redis-server"]
fn with_pings_every_2_ms_every_get_reply_reaches_the_application_from_redis_under_resp() {
    let server = redis();
    let link = Link::builder(server.endpoint())
        .framing(Resp::new())
        .heartbeat(ping_every_2_ms(
            Ping::Raw(b"PING\r\n".to_vec()),
            Predicate::new(|f| f == b"+PONG\r\n"),
        ))
        .build()
        .expect("valid config");
    wait_ready(&link);
    let mut mset = vec![b"MSET".to_vec()];
    for i in 0..300 {
        mset.push(format!("key-{i}").into_bytes());
        mset.push(format!("value-key-{i}").into_bytes());
    }
    link.send(Resp::command(&mset)).expect("accepted");
    let (ok, _) = take_frames(&link, 1);
    assert_eq!(ok, [b"+OK\r\n".to_vec()]);
    let frames = gets_at_0_7_ms(&link, 300);
    let m = link.metrics();
    println!(
        "redis, resp: {} of 300 replies reached the application; {} pings sent",
        frames.len(),
        m.heartbeats_sent
    );
    assert_eq!(frames.len(), 300);
    for (i, frame) in frames.iter().enumerate() {
        assert_eq!(
            RespValue::parse(frame),
            Ok(RespValue::Bulk(format!("value-key-{i}").into_bytes())),
            "reply {i}"
        );
    }
    assert!(m.last_rtt.is_some());
    link.close(T);
}
