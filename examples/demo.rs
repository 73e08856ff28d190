//! The demo: a link to a local echo peer that restarts mid-run.
//!
//! Run it with `cargo run --example demo` (no setup: it starts its own peer on 127.0.0.1).
//! Set `RUST_LOG=debug` for every attempt. It ends by itself in about 12 seconds, or at Ctrl-C
//! with a graceful close.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink::framing::Lines;
use relink::protocol::Ping;
use relink::{Event, Heartbeat, Link};

#[path = "support/echo_peer.rs"]
mod echo_peer;

use echo_peer::EchoPeer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;

    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut peer = Some(EchoPeer::start(port)?);
    println!("demo: echo peer on 127.0.0.1:{port}; it will restart at 4 s");

    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(Lines::new())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(200);
            r.backoff_max = Duration::from_secs(2);
        })
        .heartbeat(
            Heartbeat::new(Duration::from_millis(500), Ping::Frame(b"ping".to_vec()))
                .reply(|f: &[u8]| f == b"PONG"),
        )
        .build()?;

    let start = Instant::now();
    let mut n = 0u32;
    let mut next_send = start;
    let mut restarted = false;
    while start.elapsed() < Duration::from_secs(12) && !interrupted.load(Ordering::SeqCst) {
        let t = start.elapsed();
        if t >= Duration::from_secs(4) && peer.is_some() && !restarted {
            println!("demo: stopping the peer for 2 s");
            peer.take().unwrap().stop();
        }
        if t >= Duration::from_secs(6) && peer.is_none() && !restarted {
            println!("demo: starting the peer again");
            peer = Some(EchoPeer::start(port)?);
            restarted = true;
        }
        if Instant::now() >= next_send {
            n += 1;
            match link.send(format!("hello {n}").into_bytes()) {
                Ok(()) => {}
                Err(e) => println!("demo: frame {n} refused: {e}"),
            }
            next_send += Duration::from_millis(500);
        }
        match link.events().recv_timeout(Duration::from_millis(50)) {
            Ok(Event::Frame(f)) => println!("demo: received {:?}", String::from_utf8_lossy(&f)),
            Ok(Event::State(s)) => println!(
                "demo: state {} -> {} ({}), attempt {}{}",
                s.from,
                s.to,
                s.cause,
                s.attempt,
                s.next_retry
                    .map(|d| format!(", next try in {d:?}"))
                    .unwrap_or_default()
            ),
            Ok(Event::Abandoned { frame, reason }) => println!(
                "demo: abandoned {:?} ({reason})",
                String::from_utf8_lossy(&frame)
            ),
            Ok(Event::Error(e)) => println!("demo: error: {e}"),
            Ok(_) | Err(_) => {}
        }
    }
    let m = link.close(Duration::from_secs(1));
    while let Ok(ev) = link.events().try_recv() {
        if let Event::Frame(f) = ev {
            println!("demo: received {:?}", String::from_utf8_lossy(&f));
        }
    }
    println!(
        "demo: done: {} frames submitted, {} confirmed, {} received, {} connects, {} reconnects, last outage {:?}, rtt {:?}, {} abandoned",
        m.frames_submitted,
        m.frames_confirmed,
        m.frames_received,
        m.connects,
        m.reconnects,
        m.last_outage,
        m.last_rtt,
        m.abandoned.total()
    );
    if m.frames_received < m.frames_confirmed {
        println!(
            "demo: {} frame(s) the peer's kernel acknowledged were never echoed: the peer went \
             down before its application read them; every other outcome is counted above",
            m.frames_confirmed - m.frames_received
        );
    }
    if let Some(p) = peer {
        p.stop();
    }
    Ok(())
}
