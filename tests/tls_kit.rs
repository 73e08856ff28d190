//! The TLS test kit against a real `redis-server --tls-port`, with a plain rustls client (no
//! relink): the certificates made at test time are accepted, refused for the reasons they are
//! made for, and the server's restart and SIGSTOP helpers do what they say.
//!
//! Needs `redis-server` built with TLS (Debian's is): `cargo test --test tls_kit -- --ignored`.

mod util;

use std::time::{Duration, Instant};

use util::tls::{client_config, connect, ping, rustls_error, ServerCert, TlsKit, TlsRedis};
use util::tls::{OTHER_NAME, SERVER_NAME};
use util::Server;

/// Bound on anything that should happen at once on loopback.
const T: Duration = Duration::from_secs(10);

fn start(kit: &TlsKit, cert: ServerCert, auth_clients: bool) -> TlsRedis {
    TlsRedis::start(kit, cert, auth_clients).expect("redis-server is not on PATH")
}

#[test]
#[ignore = "needs redis-server with TLS"]
fn tls_redis_answers_ping_through_a_verified_handshake_by_name_and_by_address() {
    let kit = TlsKit::new();
    let redis = start(&kit, ServerCert::Valid, false);
    let config = client_config(&kit.pki.ca.cert, None);
    for name in [SERVER_NAME, "127.0.0.1"] {
        let mut stream = connect(redis.addr(), config.clone(), name, T).unwrap();
        assert_eq!(ping(&mut stream).unwrap(), b"+PONG\r\n");
    }

    // Rough handshake time on loopback: connect + full handshake, new session each time.
    let mut times: Vec<Duration> = (0..20)
        .map(|_| {
            let fresh = client_config(&kit.pki.ca.cert, None);
            let started = Instant::now();
            let stream = connect(redis.addr(), fresh, SERVER_NAME, T).unwrap();
            let took = started.elapsed();
            drop(stream);
            took
        })
        .collect();
    times.sort();
    eprintln!(
        "TLS handshake on loopback (connect + handshake, median of 20): {:?}",
        times[10]
    );
}

#[test]
#[ignore = "needs redis-server with TLS"]
fn tls_redis_with_a_certificate_for_another_name_is_refused_by_the_client() {
    let kit = TlsKit::new();
    let redis = start(&kit, ServerCert::OtherName, false);
    let config = client_config(&kit.pki.ca.cert, None);
    let err = connect(redis.addr(), config.clone(), SERVER_NAME, T).unwrap_err();
    assert!(
        matches!(
            rustls_error(&err),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "{err}"
    );
    // The same certificate is fine for the name it was made for.
    let mut stream = connect(redis.addr(), config, OTHER_NAME, T).unwrap();
    assert_eq!(ping(&mut stream).unwrap(), b"+PONG\r\n");
}

#[test]
#[ignore = "needs redis-server with TLS"]
fn tls_redis_with_an_expired_or_untrusted_certificate_is_refused_by_the_client() {
    let kit = TlsKit::new();
    let config = client_config(&kit.pki.ca.cert, None);
    for (cert, expected) in [
        (ServerCert::Expired, "Expired"),
        (ServerCert::UnknownCa, "UnknownIssuer"),
    ] {
        let redis = start(&kit, cert, false);
        let err = connect(redis.addr(), config.clone(), SERVER_NAME, T).unwrap_err();
        let text = format!("{:?}", rustls_error(&err));
        assert!(text.contains(expected), "{cert:?}: {text}");
    }
}

#[test]
#[ignore = "needs redis-server with TLS"]
fn mutual_tls_redis_refuses_a_client_without_a_certificate_and_serves_one_with() {
    let kit = TlsKit::new();
    let redis = start(&kit, ServerCert::Valid, true);

    // TLS 1.3: the client's handshake ends before the server judges it; the refusal (an
    // alert, or the connection closed) comes with the first reply.
    let anonymous = client_config(&kit.pki.ca.cert, None);
    let refused = connect(redis.addr(), anonymous, SERVER_NAME, T).and_then(|mut s| ping(&mut s));
    let err = refused.expect_err("served without a client certificate");
    assert_eq!(
        rustls_error(&err),
        Some(&rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired
        )),
        "{err}"
    );

    let with_cert = client_config(&kit.pki.ca.cert, Some(&kit.pki.client));
    let mut stream = connect(redis.addr(), with_cert, SERVER_NAME, T).unwrap();
    assert_eq!(ping(&mut stream).unwrap(), b"+PONG\r\n");
}

#[test]
#[ignore = "needs redis-server with TLS"]
fn tls_redis_restarts_on_its_port_and_serves_a_new_handshake() {
    let kit = TlsKit::new();
    let mut redis = start(&kit, ServerCert::Valid, false);
    let config = client_config(&kit.pki.ca.cert, None);
    let mut before = connect(redis.addr(), config.clone(), SERVER_NAME, T).unwrap();
    assert_eq!(ping(&mut before).unwrap(), b"+PONG\r\n");
    let port = redis.port();

    redis.restart();
    assert_eq!(redis.port(), port);
    assert!(
        ping(&mut before).is_err(),
        "the old connection died with the old server"
    );
    let mut after = connect(redis.addr(), config, SERVER_NAME, T).unwrap();
    assert_eq!(ping(&mut after).unwrap(), b"+PONG\r\n");
}

#[test]
#[ignore = "needs redis-server with TLS"]
fn a_stopped_tls_redis_accepts_tcp_but_completes_no_handshake_until_continued() {
    let kit = TlsKit::new();
    let redis = start(&kit, ServerCert::Valid, false);
    let config = client_config(&kit.pki.ca.cert, None);
    let mut open = connect(redis.addr(), config.clone(), SERVER_NAME, T).unwrap();

    redis.stop_signal();
    let short = Duration::from_millis(300);
    let started = Instant::now();
    let err = connect(redis.addr(), config.clone(), SERVER_NAME, short).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    assert!(started.elapsed() < T);
    open.sock.set_read_timeout(Some(short)).unwrap();
    assert!(ping(&mut open).is_err(), "a stopped server does not answer");

    redis.cont_signal();
    let mut stream = connect(redis.addr(), config, SERVER_NAME, T).unwrap();
    assert_eq!(ping(&mut stream).unwrap(), b"+PONG\r\n");
}
