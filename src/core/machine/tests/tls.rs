//! The machine with TLS, in virtual time, against an in-memory rustls server: bytes move by
//! hand between the two, so each test sees exactly what went on the wire.

use std::io::{Read, Write};

use rustls::ServerConnection;

use super::*;
use crate::config::ProofOfLife;
use crate::core::tls::test_certs::{Pem, Pki, ServerSetup};
use crate::error::{LinkError, TlsError};
use crate::Tls;

fn tls_builder(pki: &Pki) -> Builder {
    Sim::builder()
        .tls(Tls::new().ca_pem(&pki.ca.cert).server_name("localhost"))
        .framing(Lines::new())
}

/// A peer on the other side of the simulated socket: what it decrypted, and every byte that
/// reached it.
struct Peer {
    conn: ServerConnection,
    plaintext: Vec<u8>,
    raw: Vec<u8>,
    taken: usize,
}

impl Peer {
    fn new(cert: &Pem) -> Peer {
        Peer {
            conn: ServerSetup::with(cert).session(),
            plaintext: Vec::new(),
            raw: Vec::new(),
            taken: 0,
        }
    }

    /// Moves bytes both ways until neither side has more (bounded).
    fn pump(&mut self, s: &mut Sim) {
        for _ in 0..20 {
            s.transmit();
            let fresh = s.written[self.taken..].to_vec();
            self.taken = s.written.len();
            self.raw.extend_from_slice(&fresh);
            let mut rd = &fresh[..];
            while !rd.is_empty() {
                if self.conn.read_tls(&mut rd).unwrap() == 0 {
                    break;
                }
                if self.conn.process_new_packets().is_err() {
                    break;
                }
            }
            let mut buf = [0u8; 4096];
            while let Ok(n) = self.conn.reader().read(&mut buf) {
                if n == 0 {
                    break;
                }
                self.plaintext.extend_from_slice(&buf[..n]);
            }
            let mut out = Vec::new();
            while self.conn.wants_write() {
                self.conn.write_tls(&mut out).unwrap();
            }
            if out.is_empty() && fresh.is_empty() {
                return;
            }
            if !out.is_empty() && matches!(s.m.state(), Connected | Ready) {
                s.data(&out);
            }
        }
    }

    fn send(&mut self, s: &mut Sim, plaintext: &[u8]) {
        self.conn.writer().write_all(plaintext).unwrap();
        let mut out = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut out).unwrap();
        }
        s.data(&out);
    }
}

fn errors(s: &Sim) -> Vec<LinkError> {
    s.events
        .iter()
        .filter_map(|e| match e {
            Event::Error(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn tls_nothing_but_the_handshake_leaves_before_it_completes_and_its_completion_is_the_proof() {
    let pki = Pki::new();
    let hello = ProofOfLife::Connect;
    let mut s = Sim::connecting(tls_builder(&pki).ready_when(hello));
    s.submit(b"queued before the connect");
    s.tcp_up();
    assert_eq!(
        s.m.state(),
        Connected,
        "the TCP connect alone is not the proof"
    );
    s.transmit();
    assert_eq!(s.written[0], 0x16, "a TLS handshake record comes first");
    assert!(!contains(&s.written, b"queued"));
    let mut peer = Peer::new(&pki.server);
    peer.pump(&mut s);
    assert_eq!(s.m.state(), Ready);
    assert_eq!(
        s.transitions(),
        vec![
            (Idle, Connecting, Cause::Start),
            (Connecting, Connected, Cause::TcpConnected),
            (Connected, Ready, Cause::Alive),
        ]
    );
    assert_eq!(peer.plaintext, b"queued before the connect\n");
    assert!(!contains(&peer.raw, b"queued"), "frames travel encrypted");
    peer.send(&mut s, b"a reply\n");
    assert_eq!(s.frames(), vec![b"a reply".to_vec()]);
    assert_eq!(s.metrics().frames_sent, 1);
}

#[test]
fn tls_the_hello_and_pings_go_after_the_handshake_inside_the_session() {
    let pki = Pki::new();
    let proof = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let hb = Heartbeat::new(Duration::from_secs(1), Ping::Frame(b"PING".to_vec()))
        .reply(Predicate::new(|f| f == b"PONG"));
    let mut s = Sim::connecting(tls_builder(&pki).protocol(proof).heartbeat(hb));
    s.tcp_up();
    // A stalled handshake: no hello and no ping leaves, only its own records.
    s.advance(Duration::from_millis(2500));
    s.transmit();
    assert!(!contains(&s.written, b"HELLO") && !contains(&s.written, b"PING"));
    let mut peer = Peer::new(&pki.server);
    peer.pump(&mut s);
    assert_eq!(peer.plaintext, b"HELLO\n");
    peer.send(&mut s, b"OK\n");
    assert_eq!(s.m.state(), Ready);
    s.advance(Duration::from_millis(1100));
    peer.pump(&mut s);
    assert_eq!(peer.plaintext, b"HELLO\nPING\n");
    peer.send(&mut s, b"PONG\n");
    assert!(
        s.frames().is_empty(),
        "the reply is the heartbeat's, not the app's"
    );
    assert!(s.metrics().last_rtt.is_some());
}

#[test]
fn tls_a_certificate_for_another_name_is_rejected_and_lets_no_frame_out() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.submit(b"secret");
    s.tcp_up();
    let mut peer = Peer::new(&pki.other_name);
    peer.pump(&mut s);
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.last_transition().cause, Cause::TlsRejected);
    assert_eq!(s.last_transition().cause.to_string(), "tls-rejected");
    assert_eq!(s.metrics().tls_rejected, 1);
    assert!(matches!(
        errors(&s).as_slice(),
        [LinkError::Tls(TlsError::WrongName { expected, .. })] if expected == "localhost"
    ));
    assert!(peer.plaintext.is_empty());
    assert!(!contains(&peer.raw, b"secret"));
    assert_eq!(
        s.metrics().outbox_frames,
        1,
        "the frame waits for a verified server"
    );
    assert_eq!(s.metrics().frames_sent, 0);
}

#[test]
fn row23_a_tls_failure_no_retry_can_fix_waits_the_config_failure_retry_not_the_backoff() {
    let pki = Pki::new();
    let retry = Duration::from_secs(90);
    let mut s =
        Sim::connecting(tls_builder(&pki).reconnect(|r| r.config_failure_retry = Some(retry)));
    for attempt in 1..=3 {
        s.tcp_up();
        let mut peer = Peer::new(&pki.other_name);
        // Only this connection's bytes reach this connection's server.
        peer.taken = s.written.len();
        peer.pump(&mut s);
        let t = s.last_transition();
        assert_eq!(
            (t.to, t.cause, t.attempt),
            (Backoff, Cause::TlsRejected, attempt)
        );
        assert_eq!(t.next_retry, Some(retry), "attempt {attempt}");
        assert_eq!(s.next_timer(), retry);
        assert_eq!(s.m.state(), Connecting);
    }
    assert_eq!(s.metrics().tls_rejected, 3);
}

#[test]
fn tls_a_failure_no_retry_can_fix_waits_the_cooldown_period_by_default() {
    let pki = Pki::new();
    let mut s =
        Sim::connecting(tls_builder(&pki).reconnect(|r| r.cooldown = Duration::from_secs(45)));
    s.tcp_up();
    Peer::new(&pki.other_name).pump(&mut s);
    assert_eq!(
        s.last_transition().next_retry,
        Some(Duration::from_secs(45))
    );
}

#[test]
fn tls_a_server_that_is_not_tls_is_retried_at_the_backoff() {
    let pki = Pki::new();
    let mut s = Sim::connecting(
        tls_builder(&pki).reconnect(|r| r.config_failure_retry = Some(Duration::from_secs(90))),
    );
    s.tcp_up();
    s.transmit();
    s.data(b"+OK plaintext server\r\n");
    let t = s.last_transition();
    assert_eq!(t.cause, Cause::Tls);
    assert!(t.next_retry.unwrap() <= Duration::from_millis(200), "{t:?}");
}

#[test]
fn row23_tls_garbage_instead_of_a_server_hello_fails_with_the_tls_cause() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.tcp_up();
    s.transmit();
    s.data(b"+OK plaintext server\r\n");
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.last_transition().cause, Cause::Tls);
    assert!(matches!(
        errors(&s).as_slice(),
        [LinkError::Tls(TlsError::NotTls)]
    ));
}

#[test]
fn tls_a_handshake_that_never_completes_times_out_with_the_tls_cause() {
    let pki = Pki::new();
    let b = tls_builder(&pki).tls(
        Tls::new()
            .ca_pem(&pki.ca.cert)
            .server_name("localhost")
            .handshake_timeout(Duration::from_secs(3)),
    );
    let mut s = Sim::connecting(b);
    s.tcp_up();
    let waited = s.next_timer();
    assert_eq!(waited, Duration::from_secs(3));
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.last_transition().cause, Cause::Tls);
    assert!(matches!(
        errors(&s).as_slice(),
        [LinkError::Tls(TlsError::HandshakeTimeout(_))]
    ));
}

#[test]
fn tls_a_handshake_due_to_time_out_during_a_pause_gets_its_full_bound_again() {
    let pki = Pki::new();
    let b = tls_builder(&pki).tls(
        Tls::new()
            .ca_pem(&pki.ca.cert)
            .server_name("localhost")
            .handshake_timeout(Duration::from_secs(3)),
    );
    let mut s = Sim::connecting(b);
    s.tcp_up();
    s.transmit();
    // Stopped for 5 s: the bound passed while nothing was served.
    s.now += Duration::from_secs(5);
    s.input(Input::Resumed {
        unserved: Duration::from_secs(5),
    });
    s.m.handle_timeout(s.now);
    s.drain();
    assert_eq!(s.m.state(), Connected, "no verdict at the resume");
    Peer::new(&pki.server).pump(&mut s);
    assert_eq!(s.m.state(), Ready);
    // A server that never answers still fails the attempt one bound after the resume.
    let mut s = Sim::connecting(tls_builder(&pki));
    s.tcp_up();
    s.now += Duration::from_secs(30);
    s.input(Input::Resumed {
        unserved: Duration::from_secs(30),
    });
    let waited = s.next_timer();
    assert_eq!(waited, crate::config::defaults::TLS_HANDSHAKE_TIMEOUT);
    assert_eq!(s.last_transition().cause, Cause::Tls);
}

#[test]
fn tls_every_connection_gets_a_fresh_session() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.tcp_up();
    Peer::new(&pki.server).pump(&mut s);
    assert_eq!(s.m.state(), Ready);
    s.tcp_down();
    s.next_timer();
    s.tcp_up();
    assert_eq!(s.m.state(), Connected);
    let before = s.written.len();
    s.transmit();
    assert_eq!(s.written[before], 0x16, "a new ClientHello");
    let mut peer = Peer::new(&pki.server);
    peer.taken = before;
    s.submit(b"after the restart");
    peer.pump(&mut s);
    assert_eq!(s.m.state(), Ready);
    assert_eq!(peer.plaintext, b"after the restart\n");
}

#[test]
fn tls_records_refused_on_a_lost_connection_are_not_offered_on_the_next() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.tcp_up();
    let mut buf = Vec::new();
    assert!(s.m.poll_transmit(s.now, &mut buf));
    let refused = buf.clone();
    s.m.transmit_unsent(std::mem::take(&mut buf));
    s.m.transmit_done(s.now, TxResult::WouldBlock);
    s.tcp_down();
    s.next_timer();
    s.tcp_up();
    assert_eq!(s.m.state(), Connected);
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(buf[0], 0x16, "a ClientHello");
    assert_ne!(buf, refused, "the new session's own hello");
    let before = s.written.len();
    s.written.extend_from_slice(&buf);
    s.m.transmit_done(s.now, TxResult::Sent);
    let mut peer = Peer::new(&pki.server);
    peer.taken = before;
    s.submit(b"on the new connection");
    peer.pump(&mut s);
    assert_eq!(s.m.state(), Ready);
    assert_eq!(peer.plaintext, b"on the new connection\n");
}

#[test]
fn tls_close_sends_close_notify_after_the_last_frame() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.tcp_up();
    let mut peer = Peer::new(&pki.server);
    peer.pump(&mut s);
    s.submit(b"last");
    s.transmit();
    s.input(Input::Close {
        deadline: s.now + Duration::from_secs(1),
    });
    assert_eq!(s.m.state(), Closed);
    peer.pump(&mut s);
    assert_eq!(peer.plaintext, b"last\n");
    let state = peer.conn.process_new_packets().unwrap();
    assert!(state.peer_has_closed(), "close_notify reached the peer");
}

#[test]
fn tls_records_the_socket_refused_are_offered_again_as_they_are() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.tcp_up();
    let mut peer = Peer::new(&pki.server);
    peer.pump(&mut s);
    s.submit(b"one");
    let mut buf = Vec::new();
    assert!(s.m.poll_transmit(s.now, &mut buf));
    let first = buf.clone();
    s.m.transmit_unsent(std::mem::take(&mut buf));
    s.m.transmit_done(s.now, TxResult::WouldBlock);
    s.submit(b"two");
    s.now += Duration::from_millis(2);
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(buf, first, "the same records, not sealed again");
    s.m.transmit_done(s.now, TxResult::Sent);
    s.written.extend_from_slice(&buf);
    peer.pump(&mut s);
    assert_eq!(peer.plaintext, b"one\ntwo\n");
    assert_eq!(s.metrics().frames_sent, 2);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn with_tls_a_frame_is_confirmed_when_the_records_written_with_it_are_acknowledged() {
    let pki = Pki::new();
    let mut s = Sim::connecting(tls_builder(&pki));
    s.auto_ack = false;
    s.tcp_up();
    let mut peer = Peer::new(&pki.server);
    peer.pump(&mut s);
    assert_eq!(s.m.state(), Ready);
    let before = s.m.delivery.window.written();
    s.submit(b"frame");
    s.transmit();
    let after = s.m.delivery.window.written();
    assert!(after > before + 6, "a record is larger than its plaintext");
    s.ack(after - 1);
    assert_eq!(s.metrics().frames_confirmed, 0);
    s.ack(after);
    assert_eq!(s.metrics().frames_confirmed, 1);
}
