//! An MQTT 3.1.1 client on relink: the protocol in `examples/protocols/mqtt.rs` (its framing,
//! opening, pings, confirmation and request matching in one value), against a mosquitto broker
//! that is killed and started again mid-run.
//!
//! Run it with `cargo run --example mqtt` (needs `mosquitto` in /usr/sbin, /usr/bin or on
//! PATH; it starts its own on 127.0.0.1 on a free port and kills it at the end, whatever the
//! end). It ends by itself in a few seconds.
//!
//! The link is `Link::builder(ep).protocol(Mqtt::new("relink-example")).build()`. It
//! subscribes to `demo/#` (QoS 1) and publishes ten QoS 1 messages to `demo/a`, each a request
//! answered by the `PUBACK` with its packet id, and ten QoS 0 messages, which get no answer of
//! their own and are confirmed by the `PINGRESP` to a `PINGREQ` written after them; the broker
//! delivers all twenty back, and the link acknowledges each QoS 1 delivery itself. Then
//! mosquitto is killed and started again on the same port: the link reconnects, its protocol
//! opens the new connection with `CONNECT` and the subscription again, and twenty more
//! messages go round. The application below never writes a `CONNECT`, a `SUBSCRIBE` after the
//! first, a `PINGREQ` or a `PUBACK`.

#[path = "protocols/mqtt.rs"]
#[allow(dead_code)] // the credentials are for the tests' refused CONNACK
mod mqtt;
#[path = "support/server.rs"]
mod server;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use relink::{Event, Link, State};
use server::{free_port, Scratch, Server};

/// Messages of each QoS per round.
const N: usize = 10;
/// Bound on every wait of the example.
const BOUND: Duration = Duration::from_secs(10);

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

/// What one round saw.
#[derive(Default)]
struct Round {
    /// QoS 1 publishes answered by their own `PUBACK`.
    acked: usize,
    /// Publications of this round the broker delivered back.
    delivered: usize,
}

/// Publishes `N` QoS 1 messages (requests) and `N` QoS 0 ones (frames), waits for the
/// acknowledgements and the confirmations, then reads the broker's deliveries of this round
/// until all came (bounded).
fn round(link: &Link, protocol: &mqtt::Mqtt, round: usize) -> Result<Round, String> {
    let mut seen = Round::default();
    let pending: Vec<_> = (0..N)
        .map(|i| {
            let payload = format!("round {round} qos 1 message {i}");
            let publish = protocol.publish1("demo/a", payload.as_bytes());
            (mqtt::packet_id(&publish), link.request(publish))
        })
        .collect();
    for i in 0..N {
        let payload = format!("round {round} qos 0 message {i}");
        link.send(protocol.publish0("demo/a", payload.as_bytes()))
            .map_err(|e| format!("publish: {e}"))?;
    }
    for (id, p) in pending {
        match p.wait() {
            Ok(ack) if mqtt::packet_id(&ack) == id => seen.acked += 1,
            Ok(ack) => println!("  {id:?} answered by another packet: {ack:?}"),
            Err(e) => println!("  publish {id:?}: {e}"),
        }
    }
    // The QoS 0 publishes: confirmed by a PINGRESP to a PINGREQ written after them.
    link.flush(BOUND).map_err(|e| format!("flush: {e}"))?;
    let deadline = Instant::now() + BOUND;
    let mine = format!("round {round} ");
    while seen.delivered < 2 * N {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Frame(f)) => {
                if let Some((topic, payload)) = mqtt::publication(&f) {
                    println!("  {topic}: {}", String::from_utf8_lossy(payload));
                    seen.delivered += usize::from(payload.starts_with(mine.as_bytes()));
                }
            }
            Ok(Event::State(t)) => println!("{t}"),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(seen)
}

fn run() -> Result<bool, String> {
    let port = free_port()?;
    let config = Scratch::write(
        &format!("relink-example-mqtt-{port}.conf"),
        &format!("listener {port} 127.0.0.1\nallow_anonymous true\n"),
    )?;
    let mut broker = Server::start(
        "mosquitto",
        ["-c".into(), config.path().as_os_str().to_owned()],
        port,
    )?;
    let protocol = mqtt::Mqtt::new("relink-example");
    protocol.subscribe("demo/#");
    let link = Link::builder(broker.endpoint())
        .protocol(protocol.clone())
        .build()
        .map_err(|e| format!("build: {e}"))?;
    wait_ready(&link)?;
    let (mut acked, mut delivered) = (0, 0);
    for r in 0..2 {
        let seen = round(&link, &protocol, r)?;
        (acked, delivered) = (acked + seen.acked, delivered + seen.delivered);
        if r == 0 {
            println!("killing mosquitto and starting it again");
            broker.start_again()?;
            wait_ready(&link)?;
        }
    }
    let m = link.close(Duration::from_secs(1));
    drop(broker);
    println!(
        "acknowledged {acked} of {}, delivered {delivered} of {}; frames confirmed {} of {}; \
         the link acknowledged {} deliveries itself; connects {}; unaccounted {}",
        2 * N,
        4 * N,
        m.frames_confirmed,
        m.frames_submitted,
        m.frames_answered,
        m.connects,
        m.unaccounted()
    );
    Ok(acked == 2 * N
        && delivered == 4 * N
        && m.frames_confirmed == m.frames_submitted
        && m.unaccounted() == 0)
}

fn main() -> ExitCode {
    let _ = env_logger::builder().is_test(false).try_init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("mqtt example: a check failed (see the line above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("mqtt example: {e}");
            ExitCode::FAILURE
        }
    }
}
