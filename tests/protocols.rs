//! Real protocols through one `Protocol` each (`examples/protocols/`, and the example on the
//! `Protocol` trait), each given to the builder alone, against real servers: nats-server
//! pinging an idle link that no application code answers, subscriptions renewed after a
//! restart, the trait's example publishing and reading back through nats-server; mosquitto
//! killed twice during 5 000 QoS 1 publishes, a refused `CONNACK`; a silent collector opened
//! with a hello line; redis' `AUTH` and `SELECT` on every connection through the built-in
//! `relink::protocol::Redis`, and a wrong password refused. The server tests are ignored in a
//! bare `cargo test`; `.ci/run` installs the servers and runs them.

mod util;

#[path = "../examples/protocols/mqtt.rs"]
#[allow(dead_code)]
mod mqtt;
#[path = "../examples/protocols/nats.rs"]
#[allow(dead_code)]
mod nats;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use relink::error::LinkError;
use relink::framing::{Lines, Resp};
use relink::protocol::Redis;
use relink::protocol::{Answers, Opening, Protocol};
use relink::{Cause, Event, Link, Redelivery, State};
use util::{Behaviour, Mosquitto, NatsServer, Peer, RedisServer, Server, Watch};

const T: Duration = Duration::from_secs(30);

// ----- NATS ----------------------------------------------------------------------------------

fn nats_link(endpoint: &str, protocol: &nats::Nats) -> Link {
    Link::builder(endpoint)
        .protocol(protocol.clone())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(500);
        })
        .build()
        .unwrap()
}

#[test]
fn nats_and_mqtt_each_bring_their_framing_heartbeat_and_confirmation_by_reply() {
    let (nats, mqtt) = (nats::Nats::new(), mqtt::Mqtt::new("relink-test"));
    let every = relink::config::defaults::PROTOCOL_HEARTBEAT;
    for p in [&nats as &dyn Protocol, &mqtt as &dyn Protocol] {
        assert!(p.framing().is_some(), "{}: a framing", p.name());
        let hb = p.heartbeat().expect("a heartbeat");
        assert_eq!(
            hb.bound(),
            every * 3,
            "{}: a ping every {every:?}",
            p.name()
        );
        assert!(
            p.confirm().is_by_reply(),
            "{}: confirmed by reply",
            p.name()
        );
        assert_eq!(p.answers(), Answers::Pings, "{}", p.name());
    }
    assert!(mqtt.correlation().is_some(), "PUBACKs matched by packet id");
    // The one value is the whole link: build() takes it as it is.
    let endpoint = util::refused_endpoint();
    for link in [
        Link::builder(&endpoint).protocol(nats).build(),
        Link::builder(&endpoint).protocol(mqtt).build(),
    ] {
        link.expect("a whole link").close(Duration::ZERO);
    }
}

#[test]
#[ignore = "needs nats-server"]
fn an_idle_nats_link_answers_the_servers_pings_itself_and_is_never_dropped() {
    let server = NatsServer::start_pinging(1).expect("this test needs nats-server");
    let link = nats_link(&server.endpoint(), &nats::Nats::new());
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Ready);
    // Ten seconds idle: the server pings every second and drops a client that misses two.
    let left = watch.try_until(Duration::from_secs(10), |t| t.from == State::Ready);
    let m = link.metrics();
    eprintln!(
        "10 s idle: {} server pings answered by the link, {} heartbeats of its own, left Ready: {:?}",
        m.frames_answered,
        m.heartbeats_sent,
        left.as_ref().map(|(_, t)| t.to_string())
    );
    assert!(left.is_none(), "the link left Ready: {}", watch.trace());
    assert!(
        m.frames_answered >= 8,
        "the server's pings were answered: {m:?}"
    );
    assert_eq!(m.connects, 1);
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs nats-server"]
fn a_nats_subscription_is_renewed_on_every_connection() {
    let mut server = NatsServer::start(&[]).expect("this test needs nats-server");
    let protocol = nats::Nats::new();
    let link = nats_link(&server.endpoint(), &protocol);
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Ready);
    link.send(protocol.subscribe("renewed")).unwrap();
    for round in 0..3 {
        // Published on the link itself: it comes back only while the subscription holds.
        let deadline = Instant::now() + T;
        let mut got = false;
        while !got && Instant::now() < deadline {
            link.send(nats::publish("renewed", format!("r{round}").as_bytes()))
                .unwrap();
            let until = Instant::now() + Duration::from_millis(200);
            while let Ok(e) = link
                .events()
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                if let Event::Frame(f) = e {
                    got |=
                        nats::message(&f).is_some_and(|(_, p)| p == format!("r{round}").as_bytes());
                }
            }
        }
        assert!(got, "round {round}: the subscription holds");
        server.restart();
    }
    link.close(Duration::from_secs(1));
}

// ----- the Protocol trait's example ----------------------------------------------------------

/// The example on the `Protocol` trait (src/core/protocol.rs), as it is written there: the test
/// below checks the two are the same text, and the one after runs it against nats-server.
mod trait_example {
    // The trait's example, from here:
    use relink::framing::{AnyFraming, Counted};
    use relink::protocol::{Answers, Opening, Protocol, Reaction};
    use relink::Link;
    use std::time::Duration;

    #[derive(Clone)]
    struct Nats {
        subjects: Vec<String>,
    }

    impl Protocol for Nats {
        fn framing(&self) -> Option<AnyFraming> {
            // A header line; `PUB` and `MSG` end with their body's length, and the body follows.
            let nats = Counted::new(|header| {
                let header = std::str::from_utf8(header).ok()?;
                let counted = header.starts_with("PUB ") || header.starts_with("MSG ");
                counted
                    .then(|| header.rsplit(' ').next()?.parse().ok())
                    .flatten()
            });
            Some(nats.into())
        }

        fn open(&mut self) -> Opening {
            let mut frames = vec![br#"CONNECT {"verbose":false}"#.to_vec()];
            for (sid, subject) in self.subjects.iter().enumerate() {
                frames.push(format!("SUB {subject} {sid}").into_bytes());
            }
            Opening::ready(frames)
        }

        fn react(&mut self, frame: &[u8]) -> Reaction {
            match frame {
                b"PING" => Reaction::Answer(b"PONG".to_vec()),
                _ => Reaction::Deliver,
            }
        }

        fn ping(&self) -> Option<Vec<u8>> {
            Some(b"PING".to_vec())
        }

        fn is_pong(&self, frame: &[u8]) -> bool {
            frame == b"PONG"
        }

        fn answers(&self) -> Answers {
            Answers::Pings
        }
    }

    /// A `PUB`: its header line, CRLF, the payload.
    fn publish(subject: &str, payload: &str) -> String {
        format!("PUB {subject} {}\r\n{payload}", payload.len())
    }
    // to here.

    use super::util::{NatsServer, Watch};
    use super::T;
    use relink::{Event, State};

    /// The code lines of the trait's example, from its first `use` to the line before
    /// `let link`, and of this module between its two marks, without their indentation.
    fn example_lines() -> (Vec<String>, Vec<String>) {
        let source = include_str!("../src/core/protocol.rs");
        let doc: Vec<&str> = source
            .lines()
            .skip_while(|l| !l.starts_with("/// A NATS publisher and subscriber"))
            .skip_while(|l| *l != "/// ```")
            .skip(1)
            .take_while(|l| !l.starts_with("/// let link"))
            .map(|l| l.strip_prefix("///").unwrap_or(l))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .collect();
        let this = include_str!("protocols.rs");
        let here: Vec<&str> = this
            .lines()
            .skip_while(|l| !l.ends_with("// The trait's example, from here:"))
            .skip(1)
            .take_while(|l| !l.ends_with("// to here."))
            .map(|l| l.strip_prefix("    ").unwrap_or(l))
            .collect();
        let sorted = |lines: Vec<&str>| {
            let mut lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            while lines.last().is_some_and(|l| l.is_empty()) {
                lines.pop();
            }
            // The `use` lines in the order rustfmt keeps in each place.
            let uses = lines.iter().take_while(|l| l.starts_with("use ")).count();
            lines[..uses].sort();
            lines
        };
        (sorted(doc), sorted(here))
    }

    #[test]
    fn the_protocol_trait_example_is_the_code_run_against_nats_server() {
        let (doc, here) = example_lines();
        assert!(doc.len() > 40, "the example was found: {doc:#?}");
        assert_eq!(
            doc, here,
            "src/core/protocol.rs's example and tests/protocols.rs differ"
        );
    }

    #[test]
    #[ignore = "needs nats-server"]
    fn the_protocol_trait_example_publishes_and_reads_back_through_nats_server() {
        const N: usize = 20;
        let server = NatsServer::start_pinging(1).expect("this test needs nats-server");
        let link = Link::builder(server.endpoint())
            .protocol(Nats {
                subjects: vec!["updates".into()],
            })
            .build()
            .unwrap();
        let mut watch = Watch::new(&link);
        watch.until(T, |t| t.to == State::Ready);
        for i in 0..N {
            link.send(publish("updates", &format!("hello {i}")))
                .unwrap();
        }
        link.flush(T).expect("every PUB confirmed by a PONG");
        let (mut got, mut other) = (Vec::new(), Vec::new());
        let deadline = std::time::Instant::now() + T;
        while got.len() < N {
            match link.events().recv_deadline(deadline) {
                Ok(Event::Frame(f)) if f.starts_with(b"MSG updates 0 ") => got.push(f),
                // The server's greeting is the application's to read.
                Ok(Event::Frame(f)) if f.starts_with(b"INFO ") => {}
                Ok(Event::Frame(f)) => other.push(f),
                Ok(_) => {}
                Err(e) => panic!(
                    "{} of {N} messages, then {e}; other frames {other:?}",
                    got.len()
                ),
            }
        }
        for (i, f) in got.iter().enumerate() {
            let payload = format!("hello {i}");
            let want = format!("MSG updates 0 {}\r\n{payload}", payload.len());
            assert_eq!(&f[..], want.as_bytes());
        }
        // Idle past the server's ping interval: its PING is answered, and the link stays up.
        let left = watch.try_until(Duration::from_millis(2500), |t| t.from == State::Ready);
        let m = link.close(Duration::from_secs(1));
        assert!(left.is_none(), "the link left Ready: {}", watch.trace());
        assert!(
            other.is_empty(),
            "no -ERR, nothing but the messages: {other:?}"
        );
        assert_eq!(m.connects, 1, "{}", watch.trace());
        assert_eq!(
            (m.frames_confirmed, m.frames_submitted),
            (N as u64, N as u64)
        );
        assert!(m.frames_answered >= 1, "the server's PING answered: {m:?}");
    }
}

// ----- MQTT ----------------------------------------------------------------------------------

fn mqtt_link(endpoint: &str, protocol: mqtt::Mqtt) -> Link {
    Link::builder(endpoint)
        .protocol(protocol)
        .requests(|q| {
            q.redelivery = Redelivery::Resend;
            q.timeout = T;
            q.limit_frames = 256;
            q.limit_bytes = 1 << 20;
        })
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(500);
            r.config_failure_retry = Some(Duration::from_secs(20));
        })
        .build()
        .unwrap()
}

#[test]
#[ignore = "needs mosquitto"]
fn mqtt_qos1_publishes_through_two_broker_kills_are_each_acknowledged_by_their_own_puback() {
    const N: u16 = 5_000;
    let mut broker = Mosquitto::start("").expect("this test needs mosquitto");
    let protocol = mqtt::Mqtt::new("relink-test-publisher");
    let link = mqtt_link(&broker.endpoint(), protocol.clone());
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Ready);
    // At most 128 in flight, as a client waits for its acknowledgements.
    let (mut acked, mut failed) = (0u64, 0u64);
    let mut in_flight = std::collections::VecDeque::new();
    let settle = |id: u16, p: relink::Pending, acked: &mut u64, failed: &mut u64| match p.wait() {
        Ok(ack) => {
            assert_eq!(
                mqtt::packet_id(&ack),
                Some(id),
                "a PUBACK answers its own PUBLISH"
            );
            *acked += 1;
        }
        Err(e) => {
            eprintln!("publish {id}: {e}");
            *failed += 1;
        }
    };
    for n in 0..N {
        let p = protocol.publish1("relink/qos1", format!("{n}").as_bytes());
        let id = mqtt::packet_id(&p).unwrap();
        in_flight.push_back((id, link.request(p)));
        if in_flight.len() >= 128 {
            let (id, p) = in_flight.pop_front().unwrap();
            settle(id, p, &mut acked, &mut failed);
        }
        if n == N / 3 || n == 2 * N / 3 {
            broker.restart();
        }
    }
    for (id, p) in in_flight {
        settle(id, p, &mut acked, &mut failed);
    }
    let m = link.close(Duration::from_secs(1));
    eprintln!(
        "{N} QoS 1 publishes, broker killed twice: {acked} acknowledged, {failed} reported, \
         connects {}",
        m.connects
    );
    assert_eq!(
        acked + failed,
        N as u64,
        "every publish acknowledged or reported"
    );
    assert!(
        m.connects >= 3,
        "the broker was reached again after each kill"
    );
    assert!(acked > 0);
}

/// Waits for `link`'s first connection to be refused by the peer's answer to its opening:
/// Backoff with cause `rejected` and the next attempt `pace` later. Returns the refusal's
/// reason, which the link reports as `LinkError::Refused`.
fn refused_at_the_slow_pace(link: &Link, pace: Duration) -> String {
    let mut watch = Watch::new(link);
    let (_, t) = watch.until(T, |t| t.from == State::Connected);
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::Rejected),
        "{}",
        watch.trace()
    );
    assert_eq!(t.next_retry, Some(pace), "the slow pace");
    let reason = watch.errors.iter().find_map(|e| match e {
        LinkError::Refused { reason } => Some(reason.clone()),
        _ => None,
    });
    reason.expect("the refusal is reported with its reason")
}

#[test]
#[ignore = "needs mosquitto"]
fn a_refused_connack_is_reported_with_its_reason_and_retried_at_the_slow_pace() {
    let broker = Mosquitto::start("allow_anonymous false").expect("this test needs mosquitto");
    let link = mqtt_link(&broker.endpoint(), mqtt::Mqtt::new("relink-test-refused"));
    let reason = refused_at_the_slow_pace(&link, Duration::from_secs(20));
    assert_eq!(reason, "not authorized");
    assert_eq!(link.metrics().handshakes_refused, 1);
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs mosquitto"]
fn a_resent_qos1_publish_carries_dup_and_a_subscription_is_renewed() {
    let mut broker = Mosquitto::start("").expect("this test needs mosquitto");
    let protocol = mqtt::Mqtt::new("relink-test-subscriber");
    protocol.subscribe("relink/echo");
    let link = mqtt_link(&broker.endpoint(), protocol.clone());
    let mut watch = Watch::new(&link);
    for round in 0..2 {
        watch.until(T, |t| t.to == State::Ready);
        // Published to a topic the link subscribes to: the broker's PUBLISH comes back and
        // the link acknowledges it itself.
        let payload = format!("round {round}");
        let ack = link
            .request(protocol.publish1("relink/echo", payload.as_bytes()))
            .wait()
            .expect("acknowledged");
        assert_eq!(ack[0] >> 4, 4, "a PUBACK");
        let deadline = Instant::now() + T;
        let mut seen = HashSet::new();
        while !seen.contains(&payload) && Instant::now() < deadline {
            if let Ok(Event::Frame(f)) = link.events().recv_timeout(Duration::from_millis(100)) {
                if let Some((_, p)) = mqtt::publication(&f) {
                    seen.insert(String::from_utf8_lossy(p).into_owned());
                }
            }
        }
        assert!(
            seen.contains(&payload),
            "round {round}: the subscription holds"
        );
        broker.restart();
    }
    assert!(
        link.metrics().frames_answered >= 2,
        "the broker's PUBLISHes were acknowledged"
    );
    // The mark itself: DUP set on a QoS 1 PUBLISH, nothing else touched.
    let p = protocol.publish1("t", b"x");
    let marked = protocol.resend(&p).expect("marked");
    assert_eq!(marked[0], p[0] | 0x08);
    assert_eq!(marked[1..], p[1..]);
    assert_eq!(protocol.resend(&protocol.publish0("t", b"x")), None);
    link.close(Duration::from_secs(1));
}

// ----- a silent collector --------------------------------------------------------------------

/// A telemetry protocol: one hello line on every connection, no reply expected.
#[derive(Clone)]
struct Telemetry;

impl Protocol for Telemetry {
    fn open(&mut self) -> Opening {
        Opening::ready(vec![b"HELLO sensor-7".to_vec()])
    }
}

// ----- redis ---------------------------------------------------------------------------------

/// A redis-server with a user `app` (password `secret`) beside the default user.
fn redis_with_a_user() -> RedisServer {
    RedisServer::start_with(false, &["--user", "app", "on", ">secret", "~*", "+@all"])
        .expect("this test needs redis-server")
}

fn redis_link(endpoint: &str, password: &str) -> Link {
    Link::builder(endpoint)
        .protocol(
            Redis::new()
                .open_with(["AUTH", "app", password])
                .open_with(["SELECT", "3"]),
        )
        .build()
        .unwrap()
}

#[test]
#[ignore = "needs redis-server"]
fn redis_opening_commands_are_answered_before_ready_and_hold_on_every_connection() {
    let mut redis = redis_with_a_user();
    let link = redis_link(&redis.endpoint(), "secret");
    let mut watch = Watch::new(&link);
    for round in 0..2 {
        watch.until(T, |t| t.to == State::Ready);
        let info = link
            .request_within(Resp::command(["CLIENT", "INFO"]), T)
            .wait()
            .expect("CLIENT INFO answered");
        let info = String::from_utf8_lossy(&info);
        assert!(
            info.contains(" db=3 ") && info.contains(" user=app "),
            "round {round}: {info}"
        );
        if round == 0 {
            redis.restart();
        }
    }
    assert!(
        watch.frames.is_empty(),
        "the opening's +OKs are the link's: {:?}",
        watch.frames
    );
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn a_wrong_redis_password_is_a_refusal_with_redis_words_retried_at_the_slow_pace() {
    let redis = redis_with_a_user();
    let link = redis_link(&redis.endpoint(), "wrong");
    // The slow pace: `config_failure_retry`'s default.
    let reason = refused_at_the_slow_pace(&link, relink::config::defaults::COOLDOWN);
    assert!(reason.starts_with("WRONGPASS"), "{reason:?}");
    link.close(Duration::from_secs(1));
}

#[test]
fn a_silent_collector_gets_the_hello_first_on_every_connection_and_the_link_is_ready() {
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .protocol(Telemetry)
        .build()
        .unwrap();
    // Queued before the first connection: written after its hello.
    link.send("reading 1").unwrap();
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Ready);
    link.flush(T).expect("confirmed");
    // Confirmed by the peer's kernel: the peer's own thread may not have accepted yet, and a
    // connection it has not accepted cannot be closed.
    let each = "HELLO sensor-7\nreading 1\n".len();
    assert!(
        peer.wait_received_len(each, T),
        "the peer read the first connection"
    );
    peer.close_connections();
    watch.until(T, |t| t.to == State::Ready && t.from != State::Idle);
    link.send("reading 2").unwrap();
    link.flush(T).expect("confirmed");
    assert!(
        peer.wait_received_len(2 * each, T),
        "the peer read the second connection"
    );
    link.close(Duration::from_secs(1));
    let conns = util::stop_and_collect(peer);
    let lines: Vec<Vec<String>> = conns.iter().map(|c| util::lines_str(c)).collect();
    let lines: Vec<Vec<String>> = lines.into_iter().filter(|c| !c.is_empty()).collect();
    assert!(lines.len() >= 2, "{lines:?}");
    for c in &lines {
        assert_eq!(
            c.first().map(String::as_str),
            Some("HELLO sensor-7"),
            "{lines:?}"
        );
    }
    assert_eq!(lines[0], ["HELLO sensor-7", "reading 1"]);
    assert!(lines.last().unwrap().contains(&"reading 2".to_string()));
}
