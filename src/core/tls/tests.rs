//! The TLS session against an in-memory rustls server: bytes are moved by hand, so every test
//! is exact and needs no network.

use std::io::Read;

use rustls::ServerConnection;

use super::*;
use crate::Tls;

use super::test_certs::{Pki, ServerSetup, OTHER_NAME, SERVER_NAME};

/// How the in-memory server is set up.
type Server<'a> = ServerSetup<'a>;

/// A client session for `host` with these settings.
fn client(tls: &Tls, host: &str) -> TlsSession {
    let config = tls.client_config().unwrap();
    TlsSession::new(&tls.settings(config, host, false).unwrap()).unwrap()
}

/// Trusts the test CA only.
fn trusting(pki: &Pki) -> Tls {
    Tls::new().ca_pem(&pki.ca.cert)
}

/// A client and a server joined by hand: `pump` moves bytes both ways until neither side has
/// anything more to say, delivering the server's bytes to the client in `chunk`-byte pieces.
struct Wire {
    client: TlsSession,
    server: ServerConnection,
    chunk: usize,
    /// The server's own failure, if it had one.
    server_error: Option<rustls::Error>,
    /// Every byte the server decrypted.
    server_plaintext: Vec<u8>,
    /// Every byte the client decrypted and the test has not taken.
    client_plain: BytesMut,
    /// Every byte that went from the client to the server.
    client_wire: Vec<u8>,
}

impl Wire {
    fn new(client: TlsSession, server: ServerConnection) -> Wire {
        Wire {
            client,
            server,
            chunk: usize::MAX,
            server_error: None,
            server_plaintext: Vec::new(),
            client_plain: BytesMut::new(),
            client_wire: Vec::new(),
        }
    }

    /// Moves bytes until both sides are quiet (bounded: a handshake is a few round trips).
    fn pump(&mut self) -> Result<(), TlsError> {
        for _ in 0..20 {
            let mut c2s = Vec::new();
            self.client.take_ciphertext(&mut c2s);
            self.client_wire.extend_from_slice(&c2s);
            self.deliver_to_server(&c2s);
            let mut s2c = Vec::new();
            while self.server.wants_write() {
                self.server.write_tls(&mut s2c).unwrap();
            }
            for piece in s2c.chunks(self.chunk.max(1)) {
                self.client.feed(piece, &mut self.client_plain)?;
            }
            if c2s.is_empty() && s2c.is_empty() {
                return Ok(());
            }
        }
        panic!("the two sides are still talking after 20 rounds");
    }

    fn deliver_to_server(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.server_error.is_none() {
            if self.server.read_tls(&mut bytes).unwrap() == 0 {
                break;
            }
            match self.server.process_new_packets() {
                Ok(_) => {
                    let mut chunk = [0u8; 4096];
                    while let Ok(n @ 1..) = self.server.reader().read(&mut chunk) {
                        self.server_plaintext.extend_from_slice(&chunk[..n]);
                    }
                }
                Err(e) => self.server_error = Some(e),
            }
        }
    }

    fn server_sends(&mut self, data: &[u8]) {
        use std::io::Write;
        self.server.writer().write_all(data).unwrap();
    }

    fn client_plaintext(&mut self) -> Vec<u8> {
        self.client_plain.split().to_vec()
    }
}

fn handshake(tls: &Tls, server: &Server) -> (Wire, Result<(), TlsError>) {
    let mut wire = Wire::new(client(tls, SERVER_NAME), server.session());
    let result = wire.pump();
    (wire, result)
}

#[test]
fn handshake_completes_and_plaintext_flows_both_ways_then_close_notify_is_seen() {
    let pki = Pki::new();
    let (mut wire, result) = handshake(&trusting(&pki), &Server::with(&pki.server));
    result.unwrap();
    assert!(!wire.client.is_handshaking());
    assert!(!wire.server.is_handshaking());

    wire.client.send_plaintext(b"PING\r\n").unwrap();
    wire.pump().unwrap();
    assert_eq!(wire.server_plaintext, b"PING\r\n");

    wire.server_sends(b"+PONG\r\n");
    wire.pump().unwrap();
    assert_eq!(wire.client_plaintext(), b"+PONG\r\n");
    assert!(!wire.client.peer_closed());

    wire.client.close_notify();
    wire.pump().unwrap();
    assert!(wire.server.received_close_notify_for_test());
    wire.server.send_close_notify();
    wire.pump().unwrap();
    assert!(wire.client.peer_closed());
}

/// `ServerConnection` tells of a received close_notify only through `process_new_packets`'s
/// state: read it again here.
trait ReceivedCloseNotify {
    fn received_close_notify_for_test(&mut self) -> bool;
}

impl ReceivedCloseNotify for ServerConnection {
    fn received_close_notify_for_test(&mut self) -> bool {
        self.process_new_packets().unwrap().peer_has_closed()
    }
}

#[test]
fn ciphertext_fed_one_byte_at_a_time_still_completes_the_handshake_and_decrypts() {
    let pki = Pki::new();
    let mut wire = Wire::new(
        client(&trusting(&pki), SERVER_NAME),
        Server::with(&pki.server).session(),
    );
    wire.chunk = 1;
    wire.pump().unwrap();
    assert!(!wire.client.is_handshaking());
    let reply: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    wire.server_sends(&reply);
    wire.pump().unwrap();
    assert_eq!(wire.client_plaintext(), reply);
}

#[test]
fn a_frame_larger_than_rustls_default_buffers_goes_through_whole() {
    let pki = Pki::new();
    let (mut wire, result) = handshake(&trusting(&pki), &Server::with(&pki.server));
    result.unwrap();
    let frame = vec![7u8; 200 * 1024];
    wire.client.send_plaintext(&frame).unwrap();
    wire.pump().unwrap();
    assert_eq!(wire.server_plaintext.len(), frame.len());
    wire.server_sends(&frame);
    wire.pump().unwrap();
    assert_eq!(wire.client_plaintext().len(), frame.len());
}

#[test]
fn a_sealed_batch_notes_where_each_record_ends_and_the_peer_reads_each_piece_only_once_its_record_is_whole(
) {
    let pki = Pki::new();
    let (mut wire, result) = handshake(&trusting(&pki), &Server::with(&pki.server));
    result.unwrap();
    let batch: Vec<u8> = (0..40 * 1024).map(|i| (i % 251) as u8).collect();
    let (mut out, mut ends) = (Vec::new(), Vec::new());
    wire.client.seal(&batch, &mut out, &mut ends).unwrap();
    assert_eq!(ends.len(), 3, "16 KiB, 16 KiB and 8 KiB: {ends:?}");
    assert_eq!(ends.last(), Some(&out.len()));
    let mut read = 0;
    let mut from = 0;
    for (i, &end) in ends.iter().enumerate() {
        // All of a record but its last byte: the peer reads nothing of it yet.
        wire.deliver_to_server(&out[from..end - 1]);
        assert_eq!(
            wire.server_plaintext.len(),
            read,
            "record {i} not whole yet"
        );
        wire.deliver_to_server(&out[end - 1..end]);
        read = ((i + 1) * RECORD_PLAINTEXT).min(batch.len());
        assert_eq!(wire.server_plaintext.len(), read, "record {i} whole");
        from = end;
    }
    assert_eq!(wire.server_plaintext, batch);
}

#[test]
fn application_data_before_the_handshake_is_refused_and_nothing_is_sent() {
    let pki = Pki::new();
    let mut session = client(&trusting(&pki), SERVER_NAME);
    assert!(session.is_handshaking());
    assert!(session.send_plaintext(b"secret").is_err());
    let mut out = Vec::new();
    session.take_ciphertext(&mut out);
    assert!(!out.is_empty(), "the ClientHello is ready at once");
    assert!(!out.windows(6).any(|w| w == b"secret"));
}

#[test]
fn a_certificate_for_another_name_fails_with_wrong_name_and_no_application_byte_leaves() {
    let pki = Pki::new();
    let (mut wire, result) = handshake(&trusting(&pki), &Server::with(&pki.other_name));
    let err = result.unwrap_err();
    match &err {
        TlsError::WrongName {
            expected,
            presented,
        } => {
            assert_eq!(expected, SERVER_NAME);
            assert_eq!(presented, &[OTHER_NAME]);
        }
        other => panic!("expected WrongName, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!("server certificate is not valid for \"{SERVER_NAME}\" (it is for {OTHER_NAME})")
    );
    assert!(wire.client.send_plaintext(b"PING\r\n").is_err());
    assert!(
        wire.client.feed(b"more", &mut BytesMut::new()).is_err(),
        "a failed session stays failed"
    );
    wire.pump().ok();
    assert!(wire.server_plaintext.is_empty());
}

#[test]
fn a_certificate_from_an_unknown_ca_fails_with_unknown_issuer() {
    let pki = Pki::new();
    let (_, result) = handshake(&trusting(&pki), &Server::with(&pki.unknown_ca_server));
    assert_eq!(result.unwrap_err(), TlsError::UnknownIssuer);
}

#[test]
fn the_web_roots_alone_do_not_trust_a_private_ca() {
    let pki = Pki::new();
    let (_, result) = handshake(&Tls::new(), &Server::with(&pki.server));
    assert_eq!(result.unwrap_err(), TlsError::UnknownIssuer);
}

#[test]
fn an_expired_certificate_fails_with_expired() {
    let pki = Pki::new();
    let (_, result) = handshake(&trusting(&pki), &Server::with(&pki.expired));
    let err = result.unwrap_err();
    assert_eq!(err, TlsError::Expired);
    assert_eq!(err.to_string(), "server certificate has expired");
}

/// The client's first flight, then `reply` from a peer that is not a TLS server.
fn reply_to_client_hello(reply: &[u8]) -> Result<(), TlsError> {
    let pki = Pki::new();
    let mut session = client(&trusting(&pki), SERVER_NAME);
    let mut hello = Vec::new();
    assert!(session.take_ciphertext(&mut hello) > 0);
    let result = session.feed(reply, &mut BytesMut::new());
    // Whatever happened, the session stays usable for the caller's clean-up.
    let mut alert = Vec::new();
    session.take_ciphertext(&mut alert);
    assert!(session.is_handshaking());
    result
}

#[test]
fn a_plaintext_reply_instead_of_a_server_hello_is_not_tls() {
    assert_eq!(
        reply_to_client_hello(b"+PONG\r\n").unwrap_err(),
        TlsError::NotTls
    );
    assert_eq!(
        reply_to_client_hello(b"-ERR unknown command\r\n").unwrap_err(),
        TlsError::NotTls
    );
    assert_eq!(
        reply_to_client_hello(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err(),
        TlsError::NotTls
    );
}

#[test]
fn garbage_instead_of_a_server_hello_is_not_tls_and_never_panics() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for len in [1usize, 4, 5, 6, 64, 300, 20_000] {
        for _ in 0..20 {
            let garbage: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            // Fewer than 5 bytes may be an incomplete record header: no verdict yet.
            match reply_to_client_hello(&garbage) {
                Ok(()) => assert!(len < 6, "{len} bytes of garbage accepted"),
                Err(e) => assert!(
                    matches!(
                        e,
                        TlsError::NotTls | TlsError::Alert(_) | TlsError::Other(_)
                    ),
                    "{e:?}"
                ),
            }
        }
    }
    // A record header with a bad content type is refused as soon as it is complete.
    assert_eq!(
        reply_to_client_hello(&[0xff; 64]).unwrap_err(),
        TlsError::NotTls
    );
}

#[test]
fn a_server_that_requires_a_client_certificate_refuses_a_client_without_one() {
    let pki = Pki::new();
    let mut server = Server::with(&pki.server);
    server.client_ca = Some(&pki.ca.cert);
    let (mut wire, result) = handshake(&trusting(&pki), &server);
    // In TLS 1.3 the client's side of the handshake is over before the server has judged it:
    // the refusal arrives as an alert on the next bytes.
    let err = result.err().unwrap_or_else(|| wire.pump().unwrap_err());
    assert_eq!(err, TlsError::Alert("certificate required".into()));
    assert_eq!(err.to_string(), "tls alert from peer: certificate required");
    assert!(wire.server_error.is_some());
    assert!(wire.server_plaintext.is_empty());
}

#[test]
fn a_server_that_requires_a_client_certificate_accepts_one_signed_by_its_ca() {
    let pki = Pki::new();
    let mut server = Server::with(&pki.server);
    server.client_ca = Some(&pki.ca.cert);
    let tls = trusting(&pki).client_auth(&pki.client.cert, &pki.client.key);
    let (mut wire, result) = handshake(&tls, &server);
    result.unwrap();
    assert!(wire.server.peer_certificates().is_some());
    wire.client.send_plaintext(b"hello").unwrap();
    wire.pump().unwrap();
    assert_eq!(wire.server_plaintext, b"hello");
    assert!(wire.server_error.is_none());
}

#[test]
fn tls_1_2_without_a_client_certificate_fails_during_the_handshake() {
    let pki = Pki::new();
    let mut server = Server::with(&pki.server);
    server.client_ca = Some(&pki.ca.cert);
    server.tls12_only = true;
    let (wire, result) = handshake(&trusting(&pki), &server);
    assert!(matches!(result.unwrap_err(), TlsError::Alert(_)));
    assert!(wire.client.is_handshaking());
}

#[test]
fn alpn_agrees_on_the_protocol_both_sides_know() {
    let pki = Pki::new();
    let mut server = Server::with(&pki.server);
    server.alpn = vec![b"relink/1".to_vec(), b"other".to_vec()];
    let tls = trusting(&pki).alpn(vec![b"nope".to_vec(), b"relink/1".to_vec()]);
    let (wire, result) = handshake(&tls, &server);
    result.unwrap();
    assert_eq!(wire.client.alpn_protocol(), Some(&b"relink/1"[..]));
}

#[test]
fn skipping_verification_accepts_a_certificate_for_another_name_from_an_unknown_ca() {
    let pki = Pki::new();
    let tls = Tls::new().dangerous_skip_verification_for_tests();
    let (mut wire, result) = handshake(&tls, &Server::with(&pki.unknown_ca_server));
    result.unwrap();
    wire.client.send_plaintext(b"x").unwrap();
    wire.pump().unwrap();
    assert_eq!(wire.server_plaintext, b"x");
    let other = Pki::new();
    let (_, result) = handshake(&tls, &Server::with(&other.other_name));
    result.unwrap();
}

#[test]
fn an_ip_address_as_server_name_checks_the_certificates_ip_addresses() {
    let pki = Pki::new();
    let tls = trusting(&pki).server_name("127.0.0.1");
    let config = tls.client_config().unwrap();
    let settings = tls.settings(config, "127.0.0.1", true).unwrap();
    let mut wire = Wire::new(
        TlsSession::new(&settings).unwrap(),
        Server::with(&pki.server).session(),
    );
    wire.pump().unwrap();
    assert!(!wire.client.is_handshaking());
}

#[test]
fn an_ip_address_the_certificate_does_not_name_fails_with_wrong_name() {
    let pki = Pki::new();
    let tls = trusting(&pki).server_name("127.0.0.2");
    let config = tls.client_config().unwrap();
    let settings = tls.settings(config, "127.0.0.2", true).unwrap();
    let mut wire = Wire::new(
        TlsSession::new(&settings).unwrap(),
        Server::with(&pki.server).session(),
    );
    assert_eq!(
        wire.pump().unwrap_err(),
        TlsError::WrongName {
            expected: "127.0.0.2".into(),
            presented: vec![SERVER_NAME.into(), "127.0.0.1".into()],
        }
    );
}
