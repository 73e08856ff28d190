//! A NATS client on relink: the protocol in `examples/protocols/nats.rs` (its framing, opening,
//! pings and confirmation in one value), against a nats-server that restarts mid-run.
//!
//! Run it with `cargo run --example nats` (needs `nats-server`, 2.9 or newer, in /usr/sbin,
//! /usr/bin or on PATH; it starts its own on 127.0.0.1 on a free port, configured to ping its
//! clients every 250 ms, and kills it at the end, whatever the end). It ends by itself in
//! about 2 seconds.
//!
//! The link is `Link::builder(ep).protocol(Nats::new()).build()`. It subscribes to `demo.>`,
//! publishes ten messages to `demo.a` and reads them back; then nats-server is killed and
//! started again on the same port. The link reconnects, its protocol opens the new connection
//! with `CONNECT` and the subscription again, and ten more messages come back. Then the link
//! stays idle until it has answered at least three of the server's pings itself (bounded). The
//! application code below never writes a `PONG` nor a `SUB` after the first, and every
//! publish is confirmed by the server's `PONG` to a ping written after it (`Link::flush` waits
//! for that before the server is killed).

#[path = "protocols/nats.rs"]
mod nats;
#[path = "support/server.rs"]
mod server;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use relink::{Event, Link, State};
use server::{free_port, Scratch, Server};

/// How often the server pings its clients.
const SERVER_PING: &str = "250ms";
/// Server pings the idle link answers before the example ends.
const PINGS: u64 = 3;
/// Bound on every wait of the example.
const BOUND: Duration = Duration::from_secs(10);

/// Reads events until `n` messages of `round` came (bounded), printing the state changes.
fn receive(link: &Link, round: usize, n: usize) -> usize {
    let deadline = Instant::now() + BOUND;
    let mut got = 0;
    while got < n {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Frame(f)) => {
                if let Some((subject, payload)) = nats::message(&f) {
                    println!("  {subject}: {}", String::from_utf8_lossy(payload));
                    got += usize::from(payload.starts_with(format!("round {round} ").as_bytes()));
                }
            }
            Ok(Event::State(t)) => println!("{t}"),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    got
}

fn wait_ready(link: &Link) -> Result<(), String> {
    let deadline = Instant::now() + BOUND;
    while link.state() != State::Ready {
        match link.events().recv_deadline(deadline) {
            Ok(Event::State(t)) => println!("{t}"),
            Ok(_) => {}
            Err(_) => return Err(format!("the link was not Ready within {BOUND:?}")),
        }
    }
    Ok(())
}

/// Waits (bounded) until the link has answered `n` of the server's pings; returns how many.
fn idle_until_answered(link: &Link, n: u64) -> u64 {
    let deadline = Instant::now() + BOUND;
    loop {
        let answered = link.metrics().frames_answered;
        if answered >= n || Instant::now() >= deadline {
            return answered;
        }
        match link.events().recv_timeout(Duration::from_millis(50)) {
            Ok(Event::State(t)) => println!("{t}"),
            Ok(Event::Frame(f)) => println!("  frame: {}", String::from_utf8_lossy(&f)),
            _ => {}
        }
    }
}

fn run() -> Result<bool, String> {
    let port = free_port()?;
    let config = Scratch::write(
        &format!("relink-example-nats-{port}.conf"),
        &format!("ping_interval: \"{SERVER_PING}\"\nping_max: 2\n"),
    )?;
    let mut server = Server::start(
        "nats-server",
        [
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string().into(),
            "-c".into(),
            config.path().as_os_str().to_owned(),
        ],
        port,
    )?;
    let started = Instant::now();
    let protocol = nats::Nats::new();
    let link = Link::builder(server.endpoint())
        .protocol(protocol.clone())
        .build()
        .map_err(|e| format!("build: {e}"))?;
    wait_ready(&link)?;
    link.send(protocol.subscribe("demo.>"))
        .map_err(|e| format!("subscribe: {e}"))?;
    let mut received = 0;
    for round in 0..2 {
        for i in 0..10 {
            let payload = format!("round {round} message {i}");
            link.send(nats::publish("demo.a", payload.as_bytes()))
                .map_err(|e| format!("publish: {e}"))?;
        }
        // Confirmed: the server answered a PING written after the last PUB.
        link.flush(BOUND).map_err(|e| format!("flush: {e}"))?;
        received += receive(&link, round, 10);
        if round == 0 {
            println!("killing nats-server and starting it again");
            server.start_again()?;
            wait_ready(&link)?;
        }
    }
    println!("idle: the server pings every {SERVER_PING}");
    let answered = idle_until_answered(&link, PINGS);
    let m = link.close(Duration::from_secs(1));
    drop(server);
    println!(
        "received {received} of 20 in {:.2} s; the link answered {answered} server pings; \
         frames confirmed by the server's PONG {} of {}; unaccounted {}",
        started.elapsed().as_secs_f64(),
        m.frames_confirmed,
        m.frames_submitted,
        m.unaccounted()
    );
    Ok(received == 20
        && answered >= PINGS
        && m.frames_confirmed == m.frames_submitted
        && m.unaccounted() == 0)
}

fn main() -> ExitCode {
    let _ = env_logger::builder().is_test(false).try_init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("nats example: a check failed (see the line above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("nats example: {e}");
            ExitCode::FAILURE
        }
    }
}
