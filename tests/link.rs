//! Integration tests of the link against real TCP peers on 127.0.0.1: round trips with each
//! codec, concurrent senders, a peer restart, configuration errors, a peer that breaks the
//! framing, close and drop, frames the codec refuses, and inbound backpressure.
//!
//! Run with `cargo test --test link`.

mod util;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use relink::config::Jitter;
use relink::error::{ConfigError, LinkError, SendError};
use relink::framing::{DecodeError, EncodeError, LengthDelimited, Lines, Raw};
use relink::protocol::{Handshake, Ping, Predicate};
use relink::{
    AbandonReason, Builder, Cause, Event, Events, Heartbeat, Link, Overflow, SendOptions, State,
    Transition,
};
use util::{
    assert_accounted, decode_length_prefixed, decode_lines, duplicates, encode_length_prefixed,
    first_out_of_order, parse_seq, refused_endpoint, seq_payload, watched, Behaviour, Peer, Watch,
};

/// Bound on any single wait for something that should happen at once on loopback.
const T: Duration = Duration::from_secs(5);

// The handle and the event receiver can be shared and cloned across threads: checked when
// this file compiles.
const _: () = {
    const fn shareable<X: Send + Sync + Clone + 'static>() {}
    shareable::<Link>();
    shareable::<Events>();
};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Every transition starts in the state the one before it entered.
fn assert_chained(ts: &[Transition]) {
    for w in ts.windows(2) {
        assert_eq!(
            w[1].from, w[0].to,
            "transition {:?} does not follow {:?}",
            w[1], w[0]
        );
    }
}

/// A link to a port where nothing listens, whose libzmq redial waits 30 s: it stays in
/// Connecting. Returned once it is there, with its watcher.
fn stuck_connecting() -> (Link, Watch) {
    let (link, mut seen) = watched(
        Link::builder(refused_endpoint())
            .reconnect(|r| r.native_retries = 100)
            .socket(|s| {
                s.reconnect_ivl = Duration::from_secs(30);
                s.connect_timeout = Duration::from_secs(30);
            }),
    );
    seen.until_entered(0, State::Connecting, T);
    (link, seen)
}

/// `close` on a link already closed: returns at once (well within 3 s) and the link stays
/// Closed. Returns the final metrics again.
fn close_again(link: &Link) -> relink::Metrics {
    let start = Instant::now();
    let again = link.close(Duration::from_secs(1));
    assert!(start.elapsed() < Duration::from_secs(3));
    assert_eq!(link.state(), State::Closed);
    again
}

/// A builder with short backoff delays, so reconnection tests stay quick.
fn quick(endpoint: &str) -> Builder {
    Link::builder(endpoint).reconnect(|r| {
        r.backoff_base = Duration::from_millis(20);
        r.backoff_max = Duration::from_millis(300);
    })
}

/// The error `build()` returns for `b`; panics (closing the link) if it builds.
fn build_err(b: Builder, what: &str) -> ConfigError {
    match b.build() {
        Ok(link) => {
            link.close(Duration::from_millis(100));
            panic!("{what}: build() accepted it");
        }
        Err(e) => e,
    }
}

/// Drops `link` on another thread and returns how long the drop took, or None if it did not
/// return within `bound`.
fn timed_drop(link: Link, bound: Duration) -> Option<Duration> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let start = Instant::now();
        drop(link);
        let _ = tx.send(start.elapsed());
    });
    rx.recv_timeout(bound).ok()
}

// ---------------------------------------------------------------------------------------
// 1. Round trips with each codec
// ---------------------------------------------------------------------------------------

#[test]
fn raw_bytes_sent_to_an_echo_peer_come_back_as_the_same_byte_stream() {
    let peer = Peer::start(Behaviour::Echo);
    let (link, mut seen) = watched(Link::builder(peer.endpoint()).framing(Raw::new()));
    let mut sent: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("raw-{i}|").repeat(i + 1).into_bytes())
        .collect();
    // Larger than one 8 KiB read chunk: arrives in pieces.
    sent.push((0..100_000u32).map(|i| (i % 251) as u8).collect());
    let wire = sent.concat();
    for f in &sent {
        link.send(f.clone()).unwrap();
    }
    seen.expect_seen(T, "the echo", |s| {
        s.frames.iter().map(Vec::len).sum::<usize>() >= wire.len()
    });
    assert_eq!(seen.frames.concat(), wire, "echoed stream differs");
    assert!(seen.frames.iter().all(|f| !f.is_empty()));
    assert!(peer.wait_received_len(wire.len(), T));
    assert_eq!(peer.received_all(), wire, "the peer got other bytes");
    let m = link.close(T);
    assert_eq!(m.frames_sent, sent.len() as u64);
    assert_eq!(m.bytes_received, wire.len() as u64);
    assert_eq!(m.unaccounted(), 0);
    assert_chained(&seen.since(0));
}

#[test]
fn length_prefixed_frames_sent_to_an_echo_peer_come_back_one_for_one() {
    let peer = Peer::start(Behaviour::Echo);
    let (link, mut seen) =
        watched(Link::builder(peer.endpoint()).framing(LengthDelimited::len32()));
    let mut sent: Vec<Vec<u8>> = (0..50u64).map(seq_payload).collect();
    sent.insert(10, Vec::new()); // a zero-length frame is legal
    sent.push(vec![0u8; 5]); // bytes that look like a length prefix
    sent.push((0..100_000u32).map(|i| (i % 253) as u8).collect());
    for f in &sent {
        link.send(f.clone()).unwrap();
    }
    seen.expect_seen(T, "the echo", |s| s.frames.len() >= sent.len());
    assert_eq!(seen.frames, sent, "echoed frames differ");
    let wire: Vec<u8> = sent
        .iter()
        .flat_map(|f| encode_length_prefixed(f))
        .collect();
    assert!(peer.wait_received_len(wire.len(), T));
    assert_eq!(peer.received_all(), wire, "the peer got other bytes");
    let m = link.close(T);
    assert_eq!(m.frames_sent, sent.len() as u64);
    assert_eq!(m.frames_received, sent.len() as u64);
    assert_eq!(m.unaccounted(), 0);
}

#[test]
fn lines_sent_to_an_echo_peer_come_back_one_for_one() {
    let peer = Peer::start(Behaviour::Echo);
    let (link, mut seen) = watched(Link::builder(peer.endpoint()).framing(Lines::new()));
    let mut sent: Vec<Vec<u8>> = (0..50u64).map(seq_payload).collect();
    sent.insert(5, Vec::new()); // an empty line is a legal empty frame
    sent.push(b"with\ttabs and \x00 bytes".to_vec());
    sent.push(vec![b'L'; 20_000]);
    for f in &sent {
        link.send(f.clone()).unwrap();
    }
    seen.expect_seen(T, "the echo", |s| s.frames.len() >= sent.len());
    assert_eq!(seen.frames, sent, "echoed lines differ");
    let wire_len: usize = sent.iter().map(|f| f.len() + 1).sum();
    assert!(peer.wait_received_len(wire_len, T));
    let received = peer.received_all();
    let (lines, rest) = decode_lines(&received);
    assert_eq!(lines, sent, "the peer got other lines");
    assert!(rest.is_empty());
    let m = link.close(T);
    assert_eq!(m.frames_sent, sent.len() as u64);
    assert_eq!(m.frames_received, sent.len() as u64);
    assert_accounted(&m, "lines round trip");
}

// ---------------------------------------------------------------------------------------
// 2. Concurrent senders
// ---------------------------------------------------------------------------------------

#[test]
fn eight_threads_sending_at_once_keep_each_threads_order_with_no_loss_or_duplicate() {
    const THREADS: u8 = 8;
    const PER_THREAD: u64 = 2000;
    let total = u64::from(THREADS) * PER_THREAD;
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(peer.endpoint())
        .framing(LengthDelimited::len32())
        .delivery(|d| d.overflow = Overflow::Block(Duration::from_secs(10)))
        .build()
        .unwrap();
    let mut seen = Watch::on(link.events());
    seen.until_entered(0, State::Ready, T);

    let mut audits = 0;
    thread::scope(|s| {
        let senders: Vec<_> = (0..THREADS)
            .map(|tid| {
                let link = link.clone();
                s.spawn(move || {
                    for seq in 0..PER_THREAD {
                        let mut p = vec![tid];
                        p.extend_from_slice(&seq_payload(seq));
                        if let Err(e) = link.send(p) {
                            panic!("thread {tid} frame {seq}: {e}");
                        }
                    }
                })
            })
            .collect();
        // The accounting holds in every snapshot, also while frames are in flight.
        while !senders.iter().all(|h| h.is_finished()) {
            let m = link.metrics();
            assert_eq!(m.unaccounted(), 0, "mid-run snapshot: {m:?}");
            audits += 1;
        }
        for h in senders {
            h.join().expect("a sender thread panicked");
        }
    });
    assert!(audits > 0);

    let frame_len = 4 + 1 + seq_payload(0).len();
    let wire_len = total as usize * frame_len;
    assert!(
        peer.wait_received_len(wire_len, Duration::from_secs(20)),
        "the peer got {} of {wire_len} bytes",
        peer.received_len()
    );
    assert_eq!(peer.accept_count(), 1, "the link reconnected");
    let received = peer.received_all();
    let (frames, rest) = decode_length_prefixed(&received);
    assert!(rest.is_empty(), "{} stray bytes", rest.len());
    assert_eq!(frames.len() as u64, total);
    assert!(duplicates(&frames).is_empty(), "duplicate frames");
    let mut per_thread: Vec<Vec<u64>> = vec![Vec::new(); usize::from(THREADS)];
    for f in &frames {
        let seq = parse_seq(&f[1..]).unwrap_or_else(|| panic!("bad payload {f:?}"));
        per_thread[usize::from(f[0])].push(seq);
    }
    for (tid, seqs) in per_thread.iter().enumerate() {
        assert_eq!(
            first_out_of_order(seqs),
            None,
            "thread {tid}: order broken at the peer"
        );
        assert_eq!(
            seqs,
            &(0..PER_THREAD).collect::<Vec<_>>(),
            "thread {tid}: frames missing"
        );
    }
    let m = link.metrics();
    assert_eq!(m.frames_sent, total);
    assert_eq!(m.frames_submitted, total);
    assert_eq!(m.frames_rejected, 0);
    assert_eq!(m.bytes_sent, total * (frame_len as u64 - 4));
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    link.close(T);
}

// ---------------------------------------------------------------------------------------
// 3. Peer restart
// ---------------------------------------------------------------------------------------

#[test]
fn a_link_whose_peer_restarts_on_the_same_port_comes_back_to_ready_and_frames_flow_again() {
    let peer = Peer::start(Behaviour::Echo);
    let port = peer.port();
    let link = quick(&peer.endpoint())
        .framing(Lines::new())
        .build()
        .unwrap();
    let ev = link.events();
    let mut seen = Watch::on(ev);
    link.send(b"before".to_vec()).unwrap();
    seen.expect_seen(T, "the first echo", |s| !s.frames.is_empty());
    assert_eq!(link.state(), State::Ready);
    let ready_at = seen
        .since(0)
        .iter()
        .rposition(|t| t.to == State::Ready)
        .expect("a transition into Ready");

    peer.stop();
    seen.until_entered(ready_at + 1, State::Backoff, T);
    let lost = &seen.since(0)[ready_at + 1];
    assert_eq!(
        (lost.from, lost.to, lost.cause),
        (State::Ready, State::Backoff, Cause::PeerClosed),
        "first transition after the peer stopped; seen: {}",
        seen.trace()
    );
    // While nothing listens the link keeps trying and is refused.
    let lost_at = ready_at + 1;
    seen.expect_seen(T, "a refused redial", |s| {
        s.since(lost_at)
            .iter()
            .any(|t| t.cause == Cause::Refused && t.to == State::Backoff)
    });
    assert_ne!(link.state(), State::Ready);

    let peer = Peer::start_on(port, Behaviour::Echo).expect("restart the peer on its port");
    let refused_at = seen.transitions.len();
    seen.until_entered(refused_at, State::Ready, T);
    assert_chained(&seen.since(0));
    let outage = &seen.since(lost_at);
    assert!(
        outage
            .iter()
            .all(|t| t.to != State::Closed && t.to != State::Cooldown),
        "{}",
        seen.trace()
    );

    let before = seen.frames.len();
    for i in 0..20 {
        link.send(seq_payload(i)).unwrap();
    }
    seen.expect_seen(T, "echoes after the restart", |s| {
        s.frames.len() >= before + 20
    });
    let after: Vec<Vec<u8>> = (0..20).map(seq_payload).collect();
    assert_eq!(&seen.frames[before..], &after[..]);
    assert!(peer.wait_accepts(1, T));
    let m = link.close(T);
    assert!(m.reconnects >= 1, "{m:?}");
    assert_eq!(m.unaccounted(), 0);
}

// ---------------------------------------------------------------------------------------
// 4. Configuration errors
// ---------------------------------------------------------------------------------------

#[test]
fn build_returns_the_config_error_that_names_each_bad_input() {
    // Endpoints.
    for bad in [
        "udp://127.0.0.1:6379",      // another scheme
        "tcp://127.0.0.1",           // no port
        "tcp://127.0.0.1:",          // empty port
        "tcp://127.0.0.1:0",         // port 0
        "tcp://127.0.0.1:70000",     // port above 65535
        "tcp://127.0.0.1:http",      // port not a number
        "tcp://::1:6379",            // IPv6 without brackets
        "tcp://[::1]",               // bracketed, no port
        "tcp://[::1:6379",           // unclosed bracket
        "tcp://[127.0.0.1]:6379",    // IPv4 in brackets
        "tcp://:6379",               // empty host
        "tcp://*:6379",              // wildcard
        "tcp://bad host:6379",       // space in a name
        "tcp://exa..mple.com:6379",  // empty label
        "tcp://999.1.1.1:6379",      // not an IPv4 address
        "tcp://h\u{e9}llo.com:6379", // not ASCII
    ] {
        let err = build_err(Link::builder(bad), bad);
        assert!(
            matches!(&err, ConfigError::BadEndpoint { endpoint, .. } if endpoint == bad),
            "{bad}: {err:?}"
        );
    }
    // A bad extra endpoint is caught too.
    let ok = refused_endpoint();
    let err = build_err(Link::builder(&ok).endpoint("tcp://x:0"), "extra endpoint");
    assert!(
        matches!(&err, ConfigError::BadEndpoint { endpoint, .. } if endpoint == "tcp://x:0"),
        "{err:?}"
    );

    let b = || Link::builder(&ok);
    let zero = Duration::ZERO;
    let sec = Duration::from_secs(1);

    // ZeroDuration.
    let cases: Vec<(Builder, &str)> = vec![
        (
            b().reconnect(|r| {
                r.backoff_base = zero;
                r.backoff_max = sec;
            }),
            "backoff base",
        ),
        (b().reconnect(|r| r.cooldown = zero), "cooldown"),
        (
            b().reconnect(|r| r.config_failure_retry = Some(zero)),
            "config_failure_retry",
        ),
        (b().socket(|s| s.connect_timeout = zero), "connect_timeout"),
        (b().socket(|s| s.reconnect_ivl = zero), "reconnect_ivl"),
        (b().socket(|s| s.linger = zero), "linger"),
        (b().close_timeout(zero), "close_timeout"),
        (b().reconnect(|r| r.dns_refresh = zero), "dns_refresh"),
        (b().delivery(|d| d.frame_ttl = Some(zero)), "frame_ttl"),
        (
            b().delivery(|d| d.overflow = Overflow::Block(zero)),
            "overflow block timeout",
        ),
        (
            b().heartbeat(Heartbeat::new(zero, Ping::Raw(b"p".to_vec()))),
            "heartbeat interval",
        ),
        (b().handshake_timeout(zero), "handshake_timeout"),
    ];
    for (builder, name) in cases {
        let err = build_err(builder, name);
        assert!(
            matches!(err, ConfigError::ZeroDuration { name: n } if n == name),
            "{name}: {err:?}"
        );
    }

    // ZeroLimit.
    let cases: Vec<(Builder, &str)> = vec![
        (b().reconnect(|r| r.max_attempts = Some(0)), "max_attempts"),
        (
            b().delivery(|d| {
                d.outbox_frames = 0;
                d.outbox_bytes = 1024;
            }),
            "outbox frames",
        ),
        (
            b().delivery(|d| {
                d.outbox_frames = 10;
                d.outbox_bytes = 0;
            }),
            "outbox bytes",
        ),
        (b().events_capacity(0), "events_capacity"),
        (b().delivery(|d| d.batch_bytes = 0), "batch_bytes"),
        (
            b().socket(|s| {
                s.sndhwm = 0;
                s.rcvhwm = 10;
            }),
            "sndhwm",
        ),
        (
            b().socket(|s| {
                s.sndhwm = 10;
                s.rcvhwm = -1;
            }),
            "rcvhwm",
        ),
    ];
    for (builder, name) in cases {
        let err = build_err(builder, name);
        assert!(
            matches!(err, ConfigError::ZeroLimit { name: n } if n == name),
            "{name}: {err:?}"
        );
    }

    // TooLarge: beyond what libzmq's int milliseconds can carry.
    let huge = Duration::from_millis(i32::MAX as u64 + 1);
    let cases: Vec<(Builder, &str)> = vec![
        (b().socket(|s| s.linger = huge), "linger"),
        (b().socket(|s| s.connect_timeout = huge), "connect_timeout"),
        (b().socket(|s| s.reconnect_ivl = huge), "reconnect_ivl"),
        (b().socket(|s| s.tcp_maxrt = Some(huge)), "tcp_maxrt"),
    ];
    for (builder, name) in cases {
        let err = build_err(builder, name);
        assert!(
            matches!(err, ConfigError::TooLarge { name: n, value, max } if n == name && value > max),
            "{name}: {err:?}"
        );
    }

    // MaxBelowBase: relink's backoff, and libzmq's own redial interval.
    let err = build_err(
        b().reconnect(|r| {
            r.backoff_base = sec;
            r.backoff_max = Duration::from_millis(100);
        }),
        "backoff",
    );
    assert!(
        matches!(err, ConfigError::MaxBelowBase { base, max } if base == sec && max == Duration::from_millis(100)),
        "{err:?}"
    );
    let err = build_err(
        b().socket(|s| {
            s.reconnect_ivl = sec;
            s.reconnect_ivl_max = Duration::from_millis(500);
        }),
        "reconnect_ivl_max",
    );
    assert!(matches!(err, ConfigError::MaxBelowBase { .. }), "{err:?}");

    // FloorAboveMax.
    let err = build_err(
        b().reconnect(|r| {
            r.backoff_base = Duration::from_millis(100);
            r.backoff_max = sec;
            r.backoff_floor = Duration::from_secs(2);
        }),
        "floor",
    );
    assert!(
        matches!(err, ConfigError::FloorAboveMax { floor, max } if floor == Duration::from_secs(2) && max == sec),
        "{err:?}"
    );

    // BadFactor.
    for f in [0.5, 0.0, -2.0, f64::NAN, f64::INFINITY] {
        let err = build_err(b().reconnect(|r| r.backoff_factor = f), "factor");
        assert!(
            matches!(err, ConfigError::BadFactor(x) if x.to_bits() == f.to_bits()),
            "factor {f}: {err:?}"
        );
    }

    // JitterOutOfRange.
    for x in [0.0, -0.1, 1.5, f64::NAN] {
        let err = build_err(
            b().reconnect(|r| r.jitter = Jitter::Proportional(x)),
            "jitter",
        );
        assert!(
            matches!(err, ConfigError::JitterOutOfRange(y) if y.to_bits() == x.to_bits()),
            "jitter {x}: {err:?}"
        );
    }

    // EmptyPing.
    let err = build_err(
        b().heartbeat(Heartbeat::new(sec, Ping::Raw(Vec::new()))),
        "ping",
    );
    assert!(matches!(err, ConfigError::EmptyPing), "{err:?}");

    // Unencodable: an opening or a ping frame the codec refuses.
    let hello = Handshake::new(vec![b"HI\nTHERE".to_vec()], Predicate::new(|_| true));
    let err = build_err(
        b().framing(Lines::new()).protocol(hello),
        "hello with a newline",
    );
    assert!(
        matches!(
            err,
            ConfigError::Unencodable {
                what: "opening frame",
                source: EncodeError::ContainsNewline
            }
        ),
        "{err:?}"
    );
    let err = build_err(
        b().framing(Raw::new())
            .heartbeat(Heartbeat::new(sec, Ping::Frame(Vec::new()))),
        "empty raw ping frame",
    );
    assert!(
        matches!(
            err,
            ConfigError::Unencodable {
                what: "heartbeat ping",
                source: EncodeError::Empty
            }
        ),
        "{err:?}"
    );
    let err = build_err(
        b().framing(
            LengthDelimited::builder()
                .max_frame_length(4)
                .build()
                .unwrap(),
        )
        .heartbeat(Heartbeat::new(sec, Ping::Frame(b"PING!".to_vec()))),
        "ping frame above max_frame",
    );
    assert!(
        matches!(
            err,
            ConfigError::Unencodable {
                what: "heartbeat ping",
                source: EncodeError::TooLarge { len: 5, max: 4 }
            }
        ),
        "{err:?}"
    );

    // Every error has a one-line message.
    let err = build_err(Link::builder("tcp://127.0.0.1:0"), "port 0");
    let msg = err.to_string();
    assert!(!msg.is_empty() && !msg.contains('\n'), "{msg:?}");
}

// ---------------------------------------------------------------------------------------
// 5. A peer that breaks the framing
// ---------------------------------------------------------------------------------------

#[test]
fn an_oversized_inbound_frame_resets_the_connection_with_a_codec_error_and_the_link_reconnects() {
    const MAX: usize = 1024;
    // First connection: a length prefix of 0xFFFFFFFF.
    let peer = Peer::start(Behaviour::Garbage(vec![0xFF; 4]));
    let link = quick(&peer.endpoint())
        .framing(
            LengthDelimited::builder()
                .max_frame_length(MAX)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let ev = link.events();
    let mut seen = Watch::on(ev);
    assert!(peer.wait_accepts(1, T), "no first connection");
    // Second connection: a well-formed frame one byte above the limit.
    peer.set_behaviour(Behaviour::Garbage(encode_length_prefixed(&[7u8; MAX + 1])));

    let protocol_failures = |s: &Watch| {
        s.transitions
            .iter()
            .filter(|(_, t)| t.cause == Cause::Protocol)
            .count()
    };
    seen.expect_seen(T, "the first protocol failure", |s| {
        protocol_failures(s) >= 1 && !s.errors.is_empty()
    });
    assert!(
        matches!(
            seen.errors[0],
            LinkError::Decode(DecodeError::FrameTooLarge { len, max: MAX }) if len == u64::from(u32::MAX)
        ),
        "{:?}",
        seen.errors
    );

    assert!(peer.wait_accepts(2, T), "the link did not reconnect");
    // Third connection onwards: a healthy echo.
    peer.set_behaviour(Behaviour::Echo);
    seen.expect_seen(T, "the second protocol failure", |s| {
        protocol_failures(s) >= 2 && s.errors.len() >= 2
    });
    assert!(
        matches!(
            seen.errors[1],
            LinkError::Decode(DecodeError::FrameTooLarge { len, max: MAX }) if len == MAX as u64 + 1
        ),
        "{:?}",
        seen.errors
    );
    for t in seen.since(0).iter().filter(|t| t.cause == Cause::Protocol) {
        assert_eq!(t.to, State::Backoff, "{t:?}");
        assert!(matches!(t.from, State::Connected | State::Ready), "{t:?}");
    }
    assert!(
        seen.frames.is_empty(),
        "an oversized frame reached the application"
    );
    // Each broken connection was closed by the link.
    assert!(peer.wait_closed(0, T) && peer.wait_closed(1, T));

    assert!(peer.wait_accepts(3, T), "no third connection");
    let mark = seen.transitions.len();
    link.send(b"healthy".to_vec()).unwrap();
    seen.expect_seen(T, "an echo on the healthy connection", |s| {
        !s.frames.is_empty()
    });
    assert_eq!(seen.frames, vec![b"healthy".to_vec()]);
    assert_eq!(link.state(), State::Ready);
    assert!(seen.since(mark).iter().all(|t| t.cause != Cause::Protocol));
    assert_chained(&seen.since(0));
    let m = link.close(T);
    assert!(m.connects >= 3, "{m:?}");
    assert_eq!(m.unaccounted(), 0);
}

// ---------------------------------------------------------------------------------------
// 6. close
// ---------------------------------------------------------------------------------------

#[test]
fn close_while_connecting_returns_promptly_gives_queued_frames_back_and_refuses_later_sends() {
    // Nothing listens; libzmq's own redial waits long, so the link stays in Connecting.
    let (link, mut seen) = stuck_connecting();
    let queued: Vec<Vec<u8>> = (0..3).map(seq_payload).collect();
    for f in &queued {
        link.send(f.clone()).unwrap();
    }
    // `state()` may lag the event by one pass of the IO thread (see the ignored test
    // `state_agrees_with_a_transition_already_received`).
    assert!(
        util::wait_until(T, || link.state() == State::Connecting),
        "{:?}",
        link.state()
    );

    let start = Instant::now();
    let m = link.close(Duration::from_millis(300));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(3), "close took {took:?}");
    assert_eq!(link.state(), State::Closed);
    assert_eq!(m.state, State::Closed);
    assert_eq!(m.frames_sent, 0);
    assert_eq!(m.abandoned.shutdown, queued.len() as u64, "{m:?}");
    assert_eq!(m.outbox_frames, 0);
    assert_eq!(m.unaccounted(), 0);

    seen.finish();
    let given_back: Vec<Vec<u8>> = seen
        .abandoned
        .iter()
        .map(|(f, r)| {
            assert_eq!(*r, AbandonReason::Shutdown);
            f.clone()
        })
        .collect();
    assert_eq!(given_back, queued, "queued frames not given back in order");
    let ts = seen.since(0);
    let last = ts.last().expect("transitions");
    assert_eq!((last.to, last.cause), (State::Closed, Cause::Closed));
    assert_chained(&seen.since(0));

    match link.send(b"late".to_vec()) {
        Err(SendError::Closed(f)) => assert_eq!(f, &b"late"[..]),
        other => panic!("send after close: {other:?}"),
    }
    match link.send_with(b"later".to_vec(), SendOptions::new().no_wait()) {
        Err(SendError::Closed(f)) => assert_eq!(f, &b"later"[..]),
        other => panic!("a no-wait send after close: {other:?}"),
    }
    let again = close_again(&link);
    assert_eq!(again.frames_rejected, 2);
    assert_eq!(again.abandoned, m.abandoned);
    assert_eq!(again.unaccounted(), 0);
}

#[test]
fn close_while_connected_flushes_the_outbox_closes_the_connection_and_refuses_later_sends() {
    let peer = Peer::start(Behaviour::Sink);
    let (link, mut seen) = watched(Link::builder(peer.endpoint()).framing(Lines::new()));
    seen.until_entered(0, State::Ready, T);
    assert!(peer.wait_accepts(1, T));
    let lines: Vec<Vec<u8>> = (0..100).map(seq_payload).collect();
    for l in &lines {
        link.send(l.clone()).unwrap();
    }

    let start = Instant::now();
    let m = link.close(Duration::from_secs(2));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(3), "close took {took:?}");
    assert_eq!(link.state(), State::Closed);
    assert_eq!(m.frames_sent, lines.len() as u64, "{m:?}");
    assert_eq!(m.abandoned.total(), 0);
    assert_eq!(m.unaccounted(), 0);
    assert!(peer.wait_closed(0, T), "the connection stayed open");
    let received = peer.received();
    let (got, rest) = decode_lines(&received[0]);
    assert_eq!(got, lines, "flushed lines differ");
    assert!(rest.is_empty());

    seen.finish();
    let ts = seen.since(0);
    let last = ts.last().expect("transitions");
    assert_eq!(
        (last.from, last.to, last.cause),
        (State::Ready, State::Closed, Cause::Closed)
    );

    match link.send(b"late".to_vec()) {
        Err(SendError::Closed(f)) => assert_eq!(f, &b"late"[..]),
        other => panic!("send after close: {other:?}"),
    }
    let again = close_again(&link);
    assert_eq!(again.frames_sent, m.frames_sent);
    assert_eq!(again.unaccounted(), 0);
    assert_eq!(peer.accept_count(), 1, "the link dialled again after close");
}

// ---------------------------------------------------------------------------------------
// 7. Dropping the last handle
// ---------------------------------------------------------------------------------------

#[test]
fn dropping_the_last_handle_of_a_connected_link_closes_it_without_hanging() {
    let peer = Peer::start(Behaviour::Echo);
    let link = Link::builder(peer.endpoint()).build().unwrap();
    let events = link.events().clone();
    let mut seen = Watch::on(&events);
    seen.until_entered(0, State::Ready, T);

    // A clone going away leaves the link running.
    let clone = link.clone();
    drop(clone);
    link.send(b"still up".to_vec()).unwrap();
    seen.expect_seen(T, "the echo", |s| {
        s.frames.iter().map(Vec::len).sum::<usize>() >= b"still up".len()
    });
    assert_eq!(link.state(), State::Ready);

    let took = timed_drop(link, Duration::from_secs(10)).expect("dropping the link hung");
    assert!(took < Duration::from_secs(3), "drop took {took:?}");
    assert!(peer.wait_closed(0, T), "the connection stayed open");
    seen.finish();
    assert_eq!(seen.since(0).last().map(|t| t.to), Some(State::Closed));
}

#[test]
fn dropping_the_last_handle_with_frames_queued_for_an_unreachable_peer_does_not_hang() {
    let link = quick(&refused_endpoint())
        .close_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let events = link.events().clone();
    let frames: Vec<Vec<u8>> = (0..200).map(seq_payload).collect();
    for f in &frames {
        link.send(f.clone()).unwrap();
    }
    let m = link.metrics();
    assert_eq!(m.outbox_frames, frames.len() as u64);
    assert_ne!(m.state, State::Ready);

    let took = timed_drop(link, Duration::from_secs(10)).expect("dropping the link hung");
    assert!(took < Duration::from_secs(3), "drop took {took:?}");
    let mut seen = Watch::on(&events);
    seen.finish();
    let given_back: Vec<Vec<u8>> = seen.abandoned.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(given_back, frames, "queued frames not all given back");
    assert!(seen
        .abandoned
        .iter()
        .all(|(_, r)| *r == AbandonReason::Shutdown));
}

#[test]
fn dropping_the_last_handle_with_data_stuck_for_a_peer_that_stopped_reading_does_not_hang() {
    // The peer accepts and never reads: kernel buffers, libzmq's queue and the outbox fill.
    let peer = Peer::start(Behaviour::Silent);
    let link = Link::builder(peer.endpoint())
        .delivery(|d| {
            d.outbox_frames = 16;
            d.outbox_bytes = 16 << 20;
        })
        .socket(|s| {
            s.sndhwm = 4;
            s.rcvhwm = 4;
        })
        // A send that finds no room for this long proves nothing drains any more.
        .delivery(|d| d.overflow = Overflow::Block(Duration::from_millis(300)))
        .close_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let events = link.events().clone();
    let mut seen = Watch::on(&events);
    seen.until_entered(0, State::Ready, T);
    let chunk = vec![b'z'; 64 * 1024];
    let mut full = false;
    for _ in 0..2000 {
        match link.send(chunk.clone()) {
            Ok(()) => {}
            Err(SendError::Full(_)) => {
                full = true;
                break;
            }
            Err(e) => panic!("send: {e}"),
        }
    }
    assert!(
        full,
        "the outbox never filled: the silent peer took 128 MiB"
    );
    let m = link.metrics();
    assert!(m.outbox_frames + m.frames_unconfirmed > 0, "{m:?}");
    assert_eq!(m.unaccounted(), 0);

    let took = timed_drop(link, Duration::from_secs(10)).expect("dropping the link hung");
    assert!(took < Duration::from_secs(4), "drop took {took:?}");
    seen.finish();
    assert!(
        !seen.abandoned.is_empty()
            && seen.abandoned.iter().all(|(f, r)| matches!(
                r,
                AbandonReason::Shutdown | AbandonReason::Unconfirmed
            ) && *f == chunk),
        "{}",
        seen.trace()
    );
}

// ---------------------------------------------------------------------------------------
// 8. Send + Sync + Clone
// ---------------------------------------------------------------------------------------

#[test]
fn clones_of_a_link_and_of_its_events_work_from_other_threads() {
    let peer = Peer::start(Behaviour::Echo);
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .build()
        .unwrap();
    let expected: Vec<Vec<u8>> = (0..100).map(seq_payload).collect();
    let got = thread::scope(|s| {
        let sender = link.clone();
        let lines = expected.clone();
        s.spawn(move || {
            for l in lines {
                sender.send(l).unwrap();
            }
        });
        let events = link.events().clone();
        let n = expected.len();
        let reader = s.spawn(move || {
            let mut seen = Watch::on(&events);
            seen.expect_seen(T, "echoes", |s| s.frames.len() >= n);
            seen.frames
        });
        reader.join().expect("reader thread panicked")
    });
    assert_eq!(got, expected);
    assert_eq!(link.close(T).frames_sent, expected.len() as u64);
}

// ---------------------------------------------------------------------------------------
// 9. Frames the codec cannot encode
// ---------------------------------------------------------------------------------------

#[test]
fn send_refuses_a_frame_the_codec_cannot_encode_and_gives_it_back() {
    let peer = Peer::start(Behaviour::Echo);
    let lines = Link::builder(peer.endpoint())
        .framing(Lines::builder().max_length(16).build().unwrap())
        .build()
        .unwrap();

    let bad = b"two\nlines".to_vec();
    match lines.send(bad.clone()) {
        Err(SendError::Invalid(f, EncodeError::ContainsNewline)) => assert_eq!(f, bad),
        other => panic!("a frame with a newline: {other:?}"),
    }
    for r in [
        lines.send_with(bad.clone(), SendOptions::new().no_wait()),
        lines.send_with(bad.clone(), relink::SendOptions::new().wait(T)),
        lines.send_with(bad.clone(), SendOptions::new().ttl(T)),
    ] {
        assert!(
            matches!(&r, Err(SendError::Invalid(f, EncodeError::ContainsNewline)) if *f == bad),
            "{r:?}"
        );
    }
    let long = vec![b'x'; 17];
    match lines.send(long.clone()) {
        Err(SendError::Invalid(f, EncodeError::TooLarge { len: 17, max: 16 })) => {
            assert_eq!(f, long)
        }
        other => panic!("a line above max_length: {other:?}"),
    }

    // The link is unharmed: a good frame goes through, and only it reaches the peer.
    lines.send(b"fine".to_vec()).unwrap();
    let mut seen = Watch::on(lines.events());
    seen.expect_seen(T, "the echo", |s| !s.frames.is_empty());
    assert_eq!(seen.frames, vec![b"fine".to_vec()]);
    assert_eq!(peer.received_all(), b"fine\n");
    let m = lines.close(T);
    assert_eq!(m.frames_rejected, 5, "{m:?}");
    assert_eq!(m.frames_sent, 1);
    assert_eq!(m.unaccounted(), 0);

    // Raw: an empty write would close the connection, so an empty frame is refused.
    let raw = Link::builder(refused_endpoint())
        .framing(Raw::new())
        .build()
        .unwrap();
    match raw.send(Vec::new()) {
        Err(SendError::Invalid(f, EncodeError::Empty)) => assert!(f.is_empty()),
        other => panic!("an empty raw frame: {other:?}"),
    }
    // Length-prefixed: above max_frame.
    let framed = Link::builder(refused_endpoint())
        .framing(
            LengthDelimited::builder()
                .max_frame_length(8)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let big = vec![1u8; 9];
    match framed.send(big.clone()) {
        Err(SendError::Invalid(f, EncodeError::TooLarge { len: 9, max: 8 })) => {
            assert_eq!(f, big)
        }
        other => panic!("a frame above max_frame: {other:?}"),
    }
    for link in [raw, framed] {
        let m = link.close(Duration::from_millis(100));
        assert_eq!((m.frames_rejected, m.outbox_frames), (1, 0), "{m:?}");
        assert_eq!(m.unaccounted(), 0);
    }
}

// ---------------------------------------------------------------------------------------
// 10. Inbound backpressure
// ---------------------------------------------------------------------------------------

#[test]
fn a_slow_reader_loses_no_event_because_the_link_pauses_reading_instead() {
    const N: u64 = 500;
    let peer = Peer::start(Behaviour::Echo);
    let (link, mut seen) = watched(
        Link::builder(peer.endpoint())
            .framing(Lines::new())
            .events_capacity(4),
    );
    let ev = link.events();
    seen.until_entered(0, State::Ready, T);

    let pad = "p".repeat(200);
    let expected: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let mut l = seq_payload(i);
            l.extend_from_slice(pad.as_bytes());
            l
        })
        .collect();
    for l in &expected {
        link.send(l.clone()).unwrap();
    }
    // Nobody reads: the link must stop reading rather than drop or pile up frames.
    assert!(
        util::wait_until(T, || link.metrics().reading_paused),
        "reading never paused: {:?}",
        link.metrics()
    );
    assert!(ev.len() <= 4);

    // Read slowly.
    let mut frames = Vec::new();
    while frames.len() < expected.len() {
        match ev.recv_timeout(T) {
            Ok(Event::Frame(f)) => frames.push(f),
            Ok(other) => panic!("unexpected event {other:?} after {} frames", frames.len()),
            Err(e) => panic!("after {} frames: {e:?}", frames.len()),
        }
        if frames.len() % 50 == 0 {
            thread::sleep(Duration::from_millis(10)); // the slow application
        }
    }
    assert_eq!(frames.len(), expected.len());
    let first_wrong = frames.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "frames out of order or altered");
    assert!(
        util::wait_until(T, || !link.metrics().reading_paused),
        "reading stayed paused after the application caught up"
    );
    let m = link.close(T);
    assert_eq!(m.frames_received, N);
    assert_eq!(m.events_dropped, 0);
    assert_eq!(m.frames_sent, N);
    assert!(ev
        .try_recv()
        .map_or(true, |e| !matches!(e, Event::Frame(_))));
}

// ---------------------------------------------------------------------------------------
// State and events agree
// ---------------------------------------------------------------------------------------

#[test]
fn state_agrees_with_a_transition_already_received() {
    // Nothing listens and libzmq's redial waits 30 s: the link stays in Connecting.
    let (link, seen) = stuck_connecting();
    assert_eq!(
        link.state(),
        State::Connecting,
        "the application already holds the transition {:?}",
        seen.since(0)
    );
    link.close(Duration::from_millis(100));
}

#[test]
fn host_and_port_alone_connect_like_the_tcp_endpoint() {
    let peer = Peer::start(Behaviour::Echo);
    let link = Link::builder(peer.addr().to_string()) // "127.0.0.1:PORT", a String
        .framing(Lines::new())
        .build()
        .expect("host:port is an endpoint");
    link.send("hello").unwrap();
    let frame = loop {
        match link.events().recv_timeout(Duration::from_secs(5)) {
            Ok(Event::Frame(f)) => break f,
            Ok(Event::State(t)) => {
                if let Some(e) = &t.endpoint {
                    assert!(e.starts_with("tcp://127.0.0.1:"), "shown as tcp://: {e}");
                }
            }
            Ok(_) => {}
            Err(e) => panic!("no echo: {e}"),
        }
    };
    assert_eq!(frame, &b"hello"[..]);
    link.close(Duration::from_secs(1));
}
