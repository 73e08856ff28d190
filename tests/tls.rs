//! relink's own TLS: a rustls session per connection between the STREAM socket and the
//! framing, against real TLS servers with a CA and certificates made at test time (rcgen).
//!
//! The first tests use an in-process rustls server (no redis, no openssl) and run with a bare
//! `cargo test`; the `redis_*` tests use `redis-server --tls-port` and are ignored by default:
//! `cargo test --test tls -- --ignored`.

mod util;

use std::time::{Duration, Instant};

use relink::error::{LinkError, TlsError};
use relink::protocol::{Ping, Predicate};
use relink::{Builder, Cause, Heartbeat, State, Tls, Transition};
use util::peers::{Behaviour, Peer};
use util::tls::{server_config, Serve, ServerCert, TlsKit, TlsRedis, TlsServer, SERVER_NAME};
use util::{assert_accounted, lines_to, ms, show, wait_until, watched, Server, Watch};

/// Bound on any single wait for something that should happen at once on loopback.
const T: Duration = Duration::from_secs(10);

/// Scheduling slack on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(500);

/// A link to `endpoint` with the lines codec, TLS trusting the kit's CA, and a short backoff
/// (for restarts, and for failures no retry can fix).
fn tls_lines(kit: &TlsKit, endpoint: &str, tls: Tls) -> Builder {
    lines_to(endpoint)
        .tls(tls.ca_pem(&kit.pki.ca.cert))
        .reconnect(|r| {
            r.backoff_base = ms(50);
            r.backoff_max = ms(400);
            r.config_failure_retry = Some(ms(100));
        })
}

/// A failure no retry can fix: the certificates.
fn tls_rejected(t: &Transition) -> bool {
    t.cause == Cause::TlsRejected
}

fn tls_errors(w: &Watch) -> Vec<TlsError> {
    w.errors
        .iter()
        .filter_map(|e| match e {
            LinkError::Tls(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ----- in-process rustls server -----------------------------------------------------------

#[test]
fn tls_frames_travel_encrypted_and_come_back_in_order() {
    let kit = TlsKit::new();
    let server = TlsServer::start(server_config(&kit.pki.server, None), Serve::Echo);
    let (link, mut w) = watched(tls_lines(&kit, &server.named_endpoint(), Tls::new()));
    let n = 1000;
    for i in 0..n {
        link.send(format!("frame-{i}").into_bytes()).unwrap();
    }
    assert!(
        w.frames_until(n, T),
        "{} of {n} frames back; seen: {}",
        w.frames.len(),
        w.trace()
    );
    let want: Vec<Vec<u8>> = (0..n).map(|i| format!("frame-{i}").into_bytes()).collect();
    assert_eq!(w.frames, want);
    let raw = server.seen(|s| s.raw.clone());
    assert!(!contains(&raw, b"frame-"), "a frame went out in plaintext");
    assert_eq!(server.seen(|s| s.handshakes), 1);
    let (m, _) = w.close(&link, ms(1000), "tls echo");
    assert_eq!(m.frames_sent, n as u64);
    assert_accounted(&m, "tls echo");
    let steps: Vec<_> = w.since(0).iter().map(|t| (t.from, t.to, t.cause)).collect();
    assert_eq!(
        steps[..3],
        [
            (State::Idle, State::Connecting, Cause::Start),
            (State::Connecting, State::Connected, Cause::TcpConnected),
            (State::Connected, State::Ready, Cause::Alive),
        ],
        "{}",
        w.trace()
    );
}

#[test]
fn tls_a_certificate_for_another_name_fails_the_handshake_and_no_application_byte_leaves() {
    let kit = TlsKit::new();
    let server = TlsServer::start(server_config(&kit.pki.other_name, None), Serve::Record);
    let (link, mut w) = watched(tls_lines(&kit, &server.named_endpoint(), Tls::new()));
    link.send(b"SECRET-FRAME".to_vec()).unwrap();
    w.expect_step(
        T,
        |t| t.from == State::Connected,
        (State::Connected, State::Backoff, Cause::TlsRejected),
    );
    // It waits and tries again, and fails the same way: never a plaintext attempt.
    w.until(T, |t| {
        t.from == State::Connected && t.cause == Cause::TlsRejected
    });
    assert!(
        !w.transitions.iter().any(|(_, t)| t.to == State::Ready),
        "{}",
        w.trace()
    );
    let errors = tls_errors(&w);
    assert!(
        matches!(errors.first(), Some(TlsError::WrongName { expected, presented })
            if expected == SERVER_NAME && presented.iter().any(|n| n == "other.relink.test")),
        "{errors:?}"
    );
    eprintln!("wrong name: {}", LinkError::Tls(errors[0].clone()));
    let m = link.metrics();
    assert_eq!(m.frames_sent, 0);
    assert_eq!(m.outbox_frames, 1, "the frame waits for a verified server");
    link.close(ms(300));
    assert_eq!(
        server.seen(|s| s.plaintext_len),
        0,
        "the peer decrypted bytes"
    );
    let raw = server.seen(|s| s.raw.clone());
    assert!(!raw.is_empty(), "the peer recorded the client's handshake");
    assert!(
        !contains(&raw, b"SECRET"),
        "the frame went out in plaintext"
    );
}

#[test]
fn tls_a_server_that_requires_a_client_certificate_refuses_a_link_without_one_and_accepts_one_with_one(
) {
    let kit = TlsKit::new();
    let config = server_config(&kit.pki.server, Some(&kit.pki.ca.cert));
    let server = TlsServer::start(config, Serve::Echo);

    let (without, mut w) = watched(tls_lines(&kit, &server.named_endpoint(), Tls::new()));
    without.send(b"no cert".to_vec()).unwrap();
    // With TLS 1.3 the client's side of the handshake is over before the server has checked
    // the (missing) certificate; its alert then ends the session, with the TLS cause.
    w.until(T, tls_rejected);
    w.until(T, tls_rejected);
    let errors = tls_errors(&w);
    assert!(
        errors
            .iter()
            .all(|e| matches!(e, TlsError::Alert(a) if a == "certificate required")),
        "{errors:?}"
    );
    assert!(w.frames.is_empty(), "an echo without a client certificate");
    without.close(ms(300));
    assert_eq!(server.seen(|s| s.plaintext_len), 0);

    let tls = Tls::new().client_auth(&kit.pki.client.cert, &kit.pki.client.key);
    let (with, mut w) = watched(tls_lines(&kit, &server.named_endpoint(), tls));
    with.send(b"with cert".to_vec()).unwrap();
    assert!(w.frames_until(1, T), "seen: {}", w.trace());
    assert_eq!(w.frames, vec![b"with cert".to_vec()]);
    assert!(tls_errors(&w).is_empty());
    with.close(ms(300));
}

/// A peer that is not TLS: each attempt fails with the TLS cause within the handshake bound,
/// the link keeps backing off, nothing panics, and no frame reaches the peer.
fn not_tls(behaviour: Behaviour, want: impl Fn(&TlsError) -> bool) {
    let kit = TlsKit::new();
    let peer = Peer::start(behaviour);
    let tls = Tls::new()
        .server_name(SERVER_NAME)
        .handshake_timeout(ms(500));
    let (link, mut w) = watched(tls_lines(&kit, &peer.endpoint(), tls));
    link.send(b"SECRET-FRAME".to_vec()).unwrap();
    for _ in 0..3 {
        let (at, t) = w.until(T, |t| t.from == State::Connected);
        assert_eq!(t.cause, Cause::Tls, "{}", w.trace());
        let connected = w
            .transitions
            .iter()
            .rev()
            .find(|(_, t)| t.to == State::Connected)
            .map(|(i, _)| *i)
            .unwrap();
        assert!(at - connected <= ms(500) + SLACK, "{:?}", at - connected);
    }
    let errors = tls_errors(&w);
    assert!(errors.iter().all(&want), "{errors:?}");
    assert_eq!(link.metrics().frames_sent, 0);
    link.close(ms(300));
    assert!(!contains(&peer.received_all(), b"SECRET"));
}

#[test]
fn tls_a_plaintext_peer_fails_the_handshake_within_its_bound() {
    not_tls(
        Behaviour::Garbage(b"-ERR this is plain redis\r\n".to_vec()),
        |e| matches!(e, TlsError::NotTls),
    );
}

#[test]
fn tls_a_peer_that_sends_garbage_instead_of_a_server_hello_fails_the_handshake() {
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    not_tls(Behaviour::Garbage(garbage), |e| {
        matches!(
            e,
            TlsError::NotTls | TlsError::Alert(_) | TlsError::Other(_)
        )
    });
}

#[test]
fn tls_a_peer_that_never_answers_the_client_hello_fails_at_the_handshake_timeout() {
    not_tls(Behaviour::Silent, |e| {
        matches!(e, TlsError::HandshakeTimeout(_))
    });
}

// ----- redis-server --tls-port --------------------------------------------------------------

fn redis(kit: &TlsKit, cert: ServerCert, auth_clients: bool) -> TlsRedis {
    TlsRedis::start(kit, cert, auth_clients).expect("this test needs redis-server on PATH")
}

/// `INCR` lines `from..to` answered `:from`..: redis's counter proves order and count.
fn incr(link: &relink::Link, n: usize) {
    for _ in 0..n {
        link.send(b"INCR relink".to_vec()).unwrap();
    }
}

fn replies(w: &Watch, from: usize) -> Vec<Vec<u8>> {
    w.frames[from..].to_vec()
}

fn counted(from: u64, to: u64) -> Vec<Vec<u8>> {
    (from..to).map(|i| format!(":{i}").into_bytes()).collect()
}

#[test]
#[ignore = "needs redis-server"]
fn redis_tls_ping_pong_and_frames_in_order() {
    let kit = TlsKit::new();
    let redis = redis(&kit, ServerCert::Valid, false);
    let (link, mut w) = watched(tls_lines(&kit, &redis.named_endpoint(), Tls::new()));
    link.send(b"PING".to_vec()).unwrap();
    assert!(w.frames_until(1, T), "seen: {}", w.trace());
    assert_eq!(w.frames[0], b"+PONG");
    incr(&link, 1000);
    assert!(w.frames_until(1001, T), "{} frames", w.frames.len());
    assert_eq!(replies(&w, 1), counted(1, 1001));
    let (m, _) = w.close(&link, ms(1000), "redis tls");
    assert_eq!(m.frames_sent, 1001);
    assert_accounted(&m, "redis tls");
}

#[test]
#[ignore = "needs redis-server"]
fn redis_tls_restart_is_ready_again_through_a_new_handshake_with_exact_accounting() {
    let kit = TlsKit::new();
    let mut redis = redis(&kit, ServerCert::Valid, false);
    let (link, mut w) = watched(tls_lines(&kit, &redis.named_endpoint(), Tls::new()));
    incr(&link, 100);
    assert!(w.frames_until(100, T), "seen: {}", w.trace());
    assert_eq!(replies(&w, 0), counted(1, 101));

    redis.restart();
    let mark = w.transitions.len();
    w.until(T, |t| t.from == State::Ready);
    w.until(T, |t| t.to == State::Ready);
    let after = w.since(mark);
    assert!(
        after
            .iter()
            .all(|t| t.cause != Cause::Tls && t.cause != Cause::Protocol),
        "{}",
        show(&after)
    );
    // A fresh server without persistence: its counter starts again at 1.
    incr(&link, 100);
    assert!(w.frames_until(200, T), "seen: {}", w.trace());
    assert_eq!(replies(&w, 100), counted(1, 101));
    let (m, _) = w.close(&link, ms(1000), "redis tls restart");
    assert_accounted(&m, "redis tls restart");
    assert_eq!((m.frames_submitted, m.frames_sent), (200, 200));
    assert_eq!(m.abandoned.total(), 0);
    assert_eq!((m.connects, m.reconnects), (2, 1));
    assert!(tls_errors(&w).is_empty(), "{:?}", w.errors);
}

#[test]
#[ignore = "needs redis-server"]
fn redis_tls_a_certificate_for_another_name_fails_the_handshake() {
    let kit = TlsKit::new();
    let redis = redis(&kit, ServerCert::OtherName, false);
    let (link, mut w) = watched(tls_lines(&kit, &redis.named_endpoint(), Tls::new()));
    link.send(b"PING".to_vec()).unwrap();
    w.expect_step(
        T,
        |t| t.from == State::Connected,
        (State::Connected, State::Backoff, Cause::TlsRejected),
    );
    assert!(matches!(
        tls_errors(&w).first(),
        Some(TlsError::WrongName { .. })
    ));
    assert_eq!(link.metrics().frames_sent, 0);
    link.close(ms(300));
}

#[test]
#[ignore = "needs redis-server"]
fn redis_mutual_tls_refuses_a_link_without_a_client_certificate_and_accepts_one_with_one() {
    let kit = TlsKit::new();
    let redis = redis(&kit, ServerCert::Valid, true);
    let (without, mut w) = watched(tls_lines(&kit, &redis.named_endpoint(), Tls::new()));
    without.send(b"PING".to_vec()).unwrap();
    w.until(T, tls_rejected);
    assert!(w.frames.is_empty());
    let errors = tls_errors(&w);
    assert!(
        matches!(errors.first(), Some(TlsError::Alert(_))),
        "{errors:?}"
    );
    without.close(ms(300));

    let tls = Tls::new().client_auth(&kit.pki.client.cert, &kit.pki.client.key);
    let (with, mut w) = watched(tls_lines(&kit, &redis.named_endpoint(), tls));
    with.send(b"PING".to_vec()).unwrap();
    w.until(T, |t| t.to == State::Ready);
    assert!(w.frames_until(1, T), "seen: {}", w.trace());
    assert_eq!(w.frames[0], b"+PONG");
    with.close(ms(300));
}

#[test]
#[ignore = "needs redis-server"]
fn redis_tls_the_heartbeat_catches_a_sigstopped_server_within_its_bound() {
    let kit = TlsKit::new();
    let redis = redis(&kit, ServerCert::Valid, false);
    let hb = Heartbeat::new(ms(200), Ping::Frame(b"PING".to_vec()))
        .max_missed(2)
        .reply(Predicate::starts_with(&b"+PONG"[..]));
    let bound = hb.bound();
    let tls = Tls::new().handshake_timeout(ms(500));
    let (link, mut w) = watched(tls_lines(&kit, &redis.named_endpoint(), tls).heartbeat(hb));
    w.until(T, |t| t.to == State::Ready);
    assert!(
        util::wait_for(T, || link.metrics().last_rtt).is_some(),
        "no PONG measured through TLS"
    );
    redis.stop_signal();
    let stopped_at = Instant::now();
    let dead_at = w.left_ready(bound + SLACK + T, Cause::HeartbeatTimeout);
    let took = dead_at - stopped_at;
    eprintln!("TLS redis-server: declared dead {took:?} after SIGSTOP (bound {bound:?})");
    assert!(took <= bound + SLACK, "{took:?} > {bound:?} + {SLACK:?}");
    // A new connect to the stopped process succeeds, its handshake never completes.
    w.until(T, |t| t.from == State::Connected && t.cause == Cause::Tls);
    assert!(matches!(
        tls_errors(&w).last(),
        Some(TlsError::HandshakeTimeout(_))
    ));
    redis.cont_signal();
    w.until(T, |t| t.to == State::Ready);
    assert!(wait_until(T, || link.metrics().heartbeats_sent > 0));
    link.close(ms(300));
}
