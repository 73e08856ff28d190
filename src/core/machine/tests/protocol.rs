//! A protocol at the edges of a connection, in virtual time: the opening with or without a
//! verdict, a refusal (row 24), the link's own answers to the peer's frames, the heartbeat only
//! once Ready, and the mark on a resent frame.

use super::*;
use crate::error::LinkError;
use crate::protocol::{Answers, Opening, Protocol, Reaction, Verdict};
use crate::Redelivery;

const SEC: Duration = Duration::from_secs(1);

/// A line protocol: `HELLO` to open (waiting for `OK` when `wait`, refused on `NO ...`), the
/// peer's `PING` answered `PONG` by the link, the link's ping `PING?` answered `PONG!`, and a
/// resent frame marked with a leading `*`.
#[derive(Clone)]
struct Lined {
    wait: bool,
}

impl Protocol for Lined {
    fn open(&mut self) -> Opening {
        let hello = vec![b"HELLO".to_vec()];
        if self.wait {
            Opening::wait(hello)
        } else {
            Opening::ready(hello)
        }
    }

    fn verdict(&mut self, frame: &[u8]) -> Verdict {
        match frame {
            b"OK" => Verdict::Ready,
            f if f.starts_with(b"NO ") => {
                Verdict::Refused(String::from_utf8_lossy(&f[3..]).into_owned())
            }
            _ => Verdict::NotYet,
        }
    }

    fn react(&mut self, frame: &[u8]) -> Reaction {
        match frame {
            b"PING" => Reaction::Answer(b"PONG".to_vec()),
            f if f.starts_with(b"MSG") => Reaction::AnswerAndDeliver(b"ACK".to_vec()),
            _ => Reaction::Deliver,
        }
    }

    fn ping(&self) -> Option<Vec<u8>> {
        Some(b"PING?".to_vec())
    }

    fn is_pong(&self, frame: &[u8]) -> bool {
        frame == b"PONG!"
    }

    fn answers(&self) -> Answers {
        Answers::Pings
    }

    fn resend(&self, frame: &[u8]) -> Option<Vec<u8>> {
        Some([b"*", frame].concat())
    }
}

fn lined(wait: bool) -> Builder {
    Sim::builder()
        .framing(Lines::new())
        .heartbeat(Heartbeat::new(SEC, Ping::Frame(b"unused".to_vec())))
        .protocol(Lined { wait })
}

#[test]
fn an_opening_without_a_reply_is_ready_at_once_and_goes_before_frames_queued_earlier() {
    let mut s = Sim::connecting(lined(false));
    s.submit(b"queued");
    s.tcp_up();
    assert_eq!(s.m.state(), State::Ready);
    s.transmit();
    assert_eq!(s.written, b"HELLO\nqueued\n");
}

#[test]
fn an_opening_that_waits_is_ready_on_the_verdict_and_frames_before_it_are_delivered() {
    let mut s = Sim::connecting(lined(true));
    s.submit(b"queued");
    s.tcp_up();
    s.transmit();
    assert_eq!(s.m.state(), State::Connected);
    assert_eq!(s.written, b"HELLO\n", "nothing else before the verdict");
    s.data(b"INFO server\n");
    assert_eq!(s.m.state(), State::Connected);
    s.data(b"OK\n");
    assert_eq!(s.m.state(), State::Ready);
    assert_eq!(s.frames(), [b"INFO server".to_vec()]);
    s.transmit();
    assert_eq!(s.written, b"HELLO\nqueued\n");
}

#[test]
fn row24_a_refusal_closes_with_its_reason_and_waits_the_config_retry() {
    let b = lined(true).reconnect(|r| {
        r.config_failure_retry = Some(30 * SEC);
        r.jitter = Jitter::None;
    });
    let mut s = Sim::connecting(b);
    s.tcp_up();
    s.data(b"NO bad credentials\n");
    let t = s.last_transition();
    assert_eq!(
        (t.from, t.to, t.cause),
        (Connected, Backoff, Cause::Rejected)
    );
    assert!(s.events.iter().any(|e| matches!(
        e,
        Event::Error(LinkError::Refused { reason }) if reason == "bad credentials"
    )));
    assert_eq!(s.disconnects, 1);
    assert_eq!(s.next_timer(), 30 * SEC, "the slow pace, not the backoff");
    assert_eq!(s.metrics().handshakes_refused, 1);
}

#[test]
fn an_opening_that_gets_no_verdict_times_out_at_the_handshake_timeout() {
    let mut s = Sim::connecting(lined(true).handshake_timeout(2 * SEC));
    s.tcp_up();
    assert_eq!(s.next_timer(), 2 * SEC);
    assert_eq!(s.last_transition().cause, Cause::HandshakeTimeout);
}

#[test]
fn with_a_protocol_the_heartbeat_pings_only_once_ready_and_with_the_protocols_ping() {
    let mut s = Sim::connecting(lined(true));
    s.tcp_up();
    s.advance(SEC);
    s.transmit();
    assert_eq!(s.written, b"HELLO\n", "no ping before the verdict");
    s.data(b"OK\n");
    s.advance(SEC);
    s.transmit();
    assert_eq!(s.written, b"HELLO\nPING?\n");
    s.data(b"PONG!\n");
    assert!(s.frames().is_empty(), "the pong is the link's");
    assert!(s.metrics().last_rtt.is_some());
}

#[test]
fn the_peers_own_ping_is_answered_by_the_link_ahead_of_the_outbox_and_not_delivered() {
    let mut s = Sim::ready(lined(false));
    s.transmit();
    s.written.clear();
    s.data(b"PING\nMSG a\n");
    s.submit(b"frame");
    s.transmit();
    assert_eq!(s.written, b"PONG\nACK\nframe\n");
    assert_eq!(s.frames(), [b"MSG a".to_vec()], "the MSG is delivered too");
    assert_eq!(s.metrics().frames_answered, 2);
}

#[test]
fn with_requests_by_id_the_peers_own_frame_is_answered_once_and_a_reply_not_at_all() {
    // Requests `REQ <id>` answered by `ACK <id>`; the peer's `MSG` gets the link's `ACK`.
    let id = |f: &[u8]| f.strip_prefix(b"REQ ").map(<[u8]>::to_vec);
    let reply = |f: &[u8]| f.strip_prefix(b"ACK ").map(<[u8]>::to_vec);
    let b = lined(false)
        .requests(|q| q.correlation = Some(crate::protocol::Correlation::by_id(id, reply)));
    let mut s = Sim::ready(b);
    s.transmit();
    s.input(Input::Request {
        token: 1,
        frame: Bytes::from_static(b"REQ 7"),
        id: Some(b"7".to_vec()),
        deadline: s.now + SEC,
    });
    s.transmit();
    s.written.clear();
    s.data(b"MSG a\nACK 7\n");
    s.transmit();
    assert_eq!(s.written, b"ACK\n", "one answer, to the MSG only");
    assert_eq!(s.frames(), [b"MSG a".to_vec()]);
    assert_eq!(s.answers.len(), 1, "the request got its reply");
    let m = s.metrics();
    assert_eq!(
        (m.frames_answered, m.frames_received),
        (1, 2),
        "the reply is received too"
    );
}

#[test]
fn a_frame_written_again_on_a_new_connection_carries_the_protocols_mark() {
    let b = lined(false).delivery(|d| d.redelivery = Redelivery::Resend);
    let mut s = Sim::ready(b);
    s.auto_ack = false;
    s.submit(b"PUBLISH 1");
    s.transmit();
    s.tcp_down();
    while s.m.state() != State::Connecting {
        s.next_timer();
    }
    s.tcp_up();
    s.written.clear();
    s.transmit();
    assert_eq!(s.written, b"HELLO\n*PUBLISH 1\n");
}
