//! Attempts per minute against a TLS server whose certificate can never verify (it is not
//! valid for the name the link checks): each attempt is a TCP connect and a full handshake.
//!
//! Run with `cargo bench --bench tls_rejected` (a 60 s window) or
//! `cargo bench --bench tls_rejected -- --quick` (10 s); `--window SECS` sets it.
//!
//! Two links run side by side, each against an in-process rustls server of its own that
//! counts the connections it accepts: one with a 50–200 ms backoff, one with the defaults. One
//! line each:
//!
//! ```text
//! tls_rejected backoff=<settings> window_s=<w> attempts=<n> per_min=<n * 60 / w>
//! ```

mod support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use relink::{Builder, Link};

/// Backoff settings for one link.
type Tune = fn(Builder) -> Builder;

fn main() {
    let quick = support::flag("quick");
    let window = Duration::from_secs(
        support::arg("window")
            .map(|w| w.parse().expect("--window SECS"))
            .unwrap_or(if quick { 10 } else { 60 }),
    );
    let pki = support::tls::Pki::new();
    let config = support::tls::server_config(&pki);
    let stop = Arc::new(AtomicBool::new(false));
    let runs: [(&str, Tune); 2] = [
        ("50-200ms", |b| {
            b.reconnect(|r| {
                r.backoff_base = Duration::from_millis(50);
                r.backoff_max = Duration::from_millis(200);
            })
        }),
        ("defaults", |b| b),
    ];
    let mut counted = Vec::new();
    for (label, tune) in runs {
        let (port, accepts) = serve(config.clone(), stop.clone());
        // The server's certificate is for `localhost`: the link checks another name.
        let tls = support::tls::client(&pki).server_name("wrong.example");
        let link = tune(Link::builder(format!("tcp://127.0.0.1:{port}")).tls(tls))
            .name(format!("wrong-name-{label}"))
            .build()
            .expect("build");
        counted.push((label, link, accepts));
    }
    thread::sleep(window);
    let w = window.as_secs_f64();
    for (label, link, accepts) in counted {
        let n = accepts.load(Ordering::SeqCst);
        println!(
            "tls_rejected backoff={label} window_s={w:.0} attempts={n} per_min={:.1}",
            n as f64 * 60.0 / w
        );
        link.close(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
}

/// A TLS server on a fresh port that counts accepted connections and runs each handshake
/// (bounded by a read timeout) until the client gives up on it.
fn serve(config: Arc<rustls::ServerConfig>, stop: Arc<AtomicBool>) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let accepts = Arc::new(AtomicUsize::new(0));
    let counter = accepts.clone();
    thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((mut sock, _)) => {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let config = config.clone();
                    thread::spawn(move || {
                        let _ = sock.set_nonblocking(false);
                        let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut conn = rustls::ServerConnection::new(config).expect("session");
                        while conn.is_handshaking() {
                            if conn.complete_io(&mut sock).is_err() {
                                break;
                            }
                        }
                    });
                }
                Err(_) => thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    (port, accepts)
}
