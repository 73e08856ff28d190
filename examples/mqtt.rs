//! An MQTT 3.1.1 client on relink: the protocol in `examples/protocols/mqtt.rs`, against a
//! mosquitto broker that is killed and started again mid-run.
//!
//! Run it with `cargo run --example mqtt` (needs `mosquitto` on PATH or in /usr/sbin; it starts
//! its own on 127.0.0.1 on a free port and kills it at the end). It ends by itself in a few
//! seconds.
//!
//! The link subscribes to `demo/#` (QoS 1) and publishes ten QoS 1 messages to `demo/a`, each
//! a request answered by the `PUBACK` with its packet id; the broker delivers them back, and
//! the link acknowledges each delivery itself. Then mosquitto is killed and started again on
//! the same port: the link reconnects, its protocol opens the new connection with `CONNECT`
//! and the subscription again, and ten more messages go round. The application below never
//! writes a `CONNECT`, a `SUBSCRIBE` after the first, a `PINGREQ` or a `PUBACK`.

#[path = "protocols/mqtt.rs"]
#[allow(dead_code)] // the credentials are for the tests' refused CONNACK
mod mqtt;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use relink::{Event, Heartbeat, Link, Redelivery, State};

fn mosquitto(port: u16, config: &Path) -> Option<Child> {
    let binary = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("mosquitto");
    let child = Command::new(binary)
        .arg("-c")
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

fn wait_ready(link: &Link) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.state() != State::Ready && Instant::now() < deadline {
        if let Ok(Event::State(t)) = link.events().recv_timeout(Duration::from_millis(50)) {
            println!("{t}");
        }
    }
}

/// Publishes `n` QoS 1 messages and waits for their acknowledgements, then reads the broker's
/// deliveries until `n` came (bounded). Returns (acknowledged, delivered).
fn round(link: &Link, protocol: &mqtt::Mqtt, round: usize, n: usize) -> (usize, usize) {
    let pending: Vec<_> = (0..n)
        .map(|i| {
            let payload = format!("round {round} message {i}");
            link.request(protocol.publish1("demo/a", payload.as_bytes()))
        })
        .collect();
    let acked = pending.into_iter().filter_map(|p| p.wait().ok()).count();
    let (mut delivered, deadline) = (0, Instant::now() + Duration::from_secs(5));
    while delivered < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match link.events().recv_timeout(left) {
            Ok(Event::Frame(f)) => {
                if let Some((topic, payload)) = mqtt::publication(&f) {
                    println!("  {topic}: {}", String::from_utf8_lossy(payload));
                    delivered += 1;
                }
            }
            Ok(Event::State(t)) => println!("{t}"),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    (acked, delivered)
}

fn main() -> ExitCode {
    let _ = env_logger::builder().is_test(false).try_init();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = std::env::temp_dir().join(format!("relink-example-mqtt-{port}.conf"));
    let text = format!("listener {port} 127.0.0.1\nallow_anonymous true\n");
    std::fs::write(&config, text).expect("write the config");
    let Some(mut broker) = mosquitto(port, &config) else {
        eprintln!("mosquitto did not start: is it installed?");
        return ExitCode::FAILURE;
    };
    let protocol = mqtt::Mqtt::new("relink-example");
    protocol.subscribe("demo/#");
    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(mqtt::Packets)
        .protocol(protocol.clone())
        .requests(|q| {
            q.correlation = Some(mqtt::Mqtt::correlation());
            q.redelivery = Redelivery::Resend;
            q.timeout = Duration::from_secs(10);
        })
        .heartbeat(Heartbeat::every(Duration::from_secs(5)))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(100);
            r.backoff_max = Duration::from_secs(1);
        })
        .build()
        .expect("build");
    wait_ready(&link);
    let (mut acked, mut delivered) = (0, 0);
    for r in 0..2 {
        let (a, d) = round(&link, &protocol, r, 10);
        (acked, delivered) = (acked + a, delivered + d);
        if r == 0 {
            println!("killing mosquitto and starting it again");
            let _ = broker.kill();
            let _ = broker.wait();
            broker = mosquitto(port, &config).expect("mosquitto restarts");
            wait_ready(&link);
        }
    }
    let m = link.close(Duration::from_secs(1));
    let _ = broker.kill();
    let _ = broker.wait();
    let _ = std::fs::remove_file(&config);
    println!(
        "acknowledged {acked} of 20, delivered {delivered} of 20; the link acknowledged {} \
         deliveries itself; connects {}; unaccounted {}",
        m.frames_answered,
        m.connects,
        m.unaccounted()
    );
    if acked == 20 && delivered == 20 && m.unaccounted() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
