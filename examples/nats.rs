//! A NATS client on relink: the protocol in `examples/protocols/nats.rs` (under 100 lines),
//! against a nats-server that restarts mid-run.
//!
//! Run it with `cargo run --example nats` (needs `nats-server` on PATH or in /usr/sbin; it
//! starts its own on 127.0.0.1 on a free port, with the server pinging every second, and kills
//! it at the end). It ends by itself in about 4 seconds.
//!
//! The link subscribes to `demo.>`, publishes ten messages to `demo.a` and reads them back;
//! then nats-server is killed and started again on the same port. The link reconnects, its
//! protocol opens the new connection with `CONNECT` and the subscription again, the server's
//! pings are answered by the link itself, and ten more messages come back. The application
//! code below never writes a `PONG` nor a `SUB` after the first.

#[path = "protocols/nats.rs"]
mod nats;

use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use relink::{Event, Heartbeat, Link, State};

fn nats_server(port: u16, config: &std::path::Path) -> Option<Child> {
    let binary = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("nats-server");
    let child = Command::new(binary)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-c"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child)
}

/// Reads events until `n` messages came (bounded), printing the state changes.
fn receive(link: &Link, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = 0;
    while got < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match link.events().recv_timeout(left) {
            Ok(Event::Frame(f)) => {
                if let Some((subject, payload)) = nats::message(&f) {
                    println!("  {subject}: {}", String::from_utf8_lossy(payload));
                    got += 1;
                }
            }
            Ok(Event::State(t)) => println!("{t}"),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    got
}

fn wait_ready(link: &Link) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.state() != State::Ready && Instant::now() < deadline {
        if let Ok(Event::State(t)) = link.events().recv_timeout(Duration::from_millis(50)) {
            println!("{t}");
        }
    }
}

fn main() -> ExitCode {
    let _ = env_logger::builder().is_test(false).try_init();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = std::env::temp_dir().join(format!("relink-example-nats-{port}.conf"));
    std::fs::write(&config, "ping_interval: \"1s\"\nping_max: 2\n").expect("write the config");
    let Some(mut server) = nats_server(port, &config) else {
        eprintln!("nats-server did not start: is it installed?");
        return ExitCode::FAILURE;
    };
    let protocol = nats::Nats::new();
    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(nats::framing())
        .protocol(protocol.clone())
        .heartbeat(Heartbeat::every(Duration::from_secs(2)))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(100);
            r.backoff_max = Duration::from_secs(1);
        })
        .build()
        .expect("build");
    wait_ready(&link);
    link.send(protocol.subscribe("demo.>")).expect("subscribe");
    let mut received = 0;
    for round in 0..2 {
        for i in 0..10 {
            let payload = format!("round {round} message {i}");
            link.send(nats::publish("demo.a", payload.as_bytes()))
                .expect("publish");
        }
        received += receive(&link, 10);
        if round == 0 {
            println!("killing nats-server and starting it again");
            let _ = server.kill();
            let _ = server.wait();
            server = nats_server(port, &config).expect("nats-server restarts");
            wait_ready(&link);
        }
    }
    let m = link.close(Duration::from_secs(1));
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_file(&config);
    println!(
        "received {received} of 20; the link answered {} server pings; unaccounted {}",
        m.frames_answered,
        m.unaccounted()
    );
    if received == 20 && m.unaccounted() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
