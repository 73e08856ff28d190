//! Replies known by what redis says, against a real redis-server, with nothing but
//! `Link::builder(ep).protocol(Redis::new()).build()`: the commands a redis user sends every day
//! (a bare `UNSUBSCRIBE`, `HELLO 3` before Ready, pub/sub in RESP2 and RESP3, `MULTI`, blocking
//! commands, `RESET`) never hand a request another's reply, and seeded random sequences of them
//! prove it (the failing seed printed).
//!
//! Ignored in a bare `cargo test` (they need redis-server); `.ci/run` installs it and runs them.
//! `RELINK_FOLLOW_SEEDS` sets how many random sequences run (60 by default).

mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relink::error::{EncodeError, SendError};
use relink::framing::Resp;
use relink::protocol::Redis;
use relink::{Cause, Event, Heartbeat, Link, Pending, State};
use util::RedisServer;

const T: Duration = Duration::from_secs(30);

fn cmd(args: &[&str]) -> Vec<u8> {
    Resp::command(args)
}

/// A link to `redis` as a redis user writes it.
fn link(redis: &RedisServer, protocol: Redis) -> Link {
    Link::builder(redis.endpoint())
        .protocol(protocol)
        .build()
        .expect("a redis link")
}

/// Drains a link's events on a thread of its own, counting drops of the connection for a
/// protocol error, until `stop`.
fn drain(link: &Link, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    let events = link.events().clone();
    thread::spawn(move || {
        let mut protocol_drops = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(Event::State(t)) = events.recv_timeout(Duration::from_millis(20)) {
                if t.cause == Cause::Protocol {
                    protocol_drops += 1;
                }
            }
        }
        protocol_drops
    })
}

/// `PING marker`: its answer names the marker in every mode (`$n marker` in RESP2 and RESP3,
/// `*2 pong marker` on a RESP2 connection that subscribed), `+QUEUED` in a transaction.
fn marked(marker: &str) -> Vec<u8> {
    cmd(&["PING", marker])
}

/// Whether `reply` is `marker`'s own answer.
fn answers(reply: &[u8], marker: &str) -> bool {
    reply == b"+QUEUED\r\n"
        || reply
            .windows(marker.len() + 2)
            .any(|w| w.starts_with(marker.as_bytes()) && w.ends_with(b"\r\n"))
}

/// Waits for each request and counts the replies that are not their own.
fn count_wrong(pending: Vec<(String, Pending)>, seed: u64) -> (u64, u64) {
    let (mut right, mut wrong) = (0, 0);
    for (marker, p) in pending {
        match p.wait() {
            Ok(reply) if answers(&reply, &marker) => right += 1,
            other => {
                wrong += 1;
                eprintln!("seed {seed}: request {marker} got {other:?}");
            }
        }
    }
    (right, wrong)
}

// ----- the named cases ---------------------------------------------------------------------------

#[test]
#[ignore = "needs redis-server"]
fn a_bare_unsubscribe_after_two_subscribes_leaves_every_later_request_its_own_reply() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    let stop = Arc::new(AtomicBool::new(false));
    let drops = drain(&link, stop.clone());
    link.send(cmd(&["SUBSCRIBE", "c"])).unwrap();
    link.send(cmd(&["SUBSCRIBE", "c", "d"])).unwrap();
    link.send(cmd(&["UNSUBSCRIBE"])).unwrap();
    let pending = (0..400)
        .map(|i| {
            let m = format!("m{i}");
            let p = link.request_within(marked(&m), T);
            (m, p)
        })
        .collect();
    assert_eq!(count_wrong(pending, 0), (400, 0));
    stop.store(true, Ordering::Relaxed);
    assert_eq!(drops.join().unwrap(), 0);
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn hello_3_as_a_request_before_ready_then_a_subscribe_leaves_requests_their_own_replies() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    let hello = link.request_within(cmd(&["HELLO", "3"]), T);
    link.send(cmd(&["SUBSCRIBE", "s"])).unwrap();
    let pending: Vec<_> = (0..200)
        .map(|i| {
            let m = format!("h{i}");
            let p = link.request_within(marked(&m), T);
            (m, p)
        })
        .collect();
    assert!(hello.wait().unwrap().starts_with(b"%"), "RESP3's map");
    assert_eq!(count_wrong(pending, 0), (200, 0));
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn after_unsubscribing_an_array_that_looks_like_a_message_is_a_reply() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    link.send(cmd(&["SUBSCRIBE", "x"])).unwrap();
    link.send(cmd(&["UNSUBSCRIBE", "x"])).unwrap();
    link.send(cmd(&["DEL", "l"])).unwrap();
    link.send(cmd(&["RPUSH", "l", "message", "x", "y"]))
        .unwrap();
    for _ in 0..200 {
        let reply = link
            .request_within(cmd(&["LRANGE", "l", "0", "-1"]), T)
            .wait()
            .unwrap();
        assert_eq!(&reply[..], b"*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1\r\ny\r\n");
    }
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn client_reply_off_or_skip_and_quit_are_refused_at_the_call_with_the_reason() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    for refused in [
        cmd(&["CLIENT", "REPLY", "OFF"]),
        cmd(&["CLIENT", "REPLY", "SKIP"]),
        cmd(&["QUIT"]),
    ] {
        match link.send(refused) {
            Err(SendError::Invalid(_, EncodeError::Unsupported(why))) => {
                assert!(!why.is_empty())
            }
            other => panic!("{other:?}"),
        }
    }
    let reply = link.request_within(marked("after"), T).wait().unwrap();
    assert!(answers(&reply, "after"));
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn blpop_longer_than_the_heartbeat_bound_keeps_the_link_and_its_answer() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    // The protocol's heartbeat: a PING every second, dead after 3 s of silence.
    let link = link(&redis, Redis::new());
    for secs in [5, 10] {
        let start = Instant::now();
        let blpop = link.request_within(cmd(&["BLPOP", "empty", &secs.to_string()]), T);
        let behind = link.request_within(marked("behind"), T);
        let reply = blpop.wait().unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_secs(secs) - Duration::from_millis(100));
        assert!(
            &reply[..] == b"*-1\r\n" || &reply[..] == b"_\r\n",
            "{reply:?}"
        );
        assert!(answers(&behind.wait().unwrap(), "behind"));
        println!("BLPOP {secs}: answered after {took:?}, link Ready throughout");
    }
    assert_eq!(link.metrics().reconnects, 0);
    assert_eq!(link.state(), State::Ready);
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn blpop_0_waits_until_its_answer_and_a_push_ends_it() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    let blpop = link.request_within(cmd(&["BLPOP", "q", "0"]), T);
    let pusher = {
        let addr = redis.addr();
        thread::spawn(move || {
            thread::sleep(Duration::from_secs(5));
            let mut c = redis::Client::open(format!("redis://{addr}/"))
                .and_then(|c| c.get_connection())
                .unwrap();
            let _: i64 = redis::cmd("RPUSH").arg("q").arg("v").query(&mut c).unwrap();
        })
    };
    let reply = blpop.wait().unwrap();
    assert_eq!(&reply[..], b"*2\r\n$1\r\nq\r\n$1\r\nv\r\n");
    pusher.join().unwrap();
    assert_eq!(link.metrics().reconnects, 0);
    link.close(Duration::from_secs(1));
}

#[test]
#[ignore = "needs redis-server"]
fn the_builder_turns_off_the_heartbeat_a_protocol_brings() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = Link::builder(redis.endpoint())
        .protocol(Redis::new())
        .without_heartbeat()
        .build()
        .unwrap();
    assert!(answers(
        &link.request_within(marked("x"), T).wait().unwrap(),
        "x"
    ));
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(link.metrics().heartbeats_sent, 0);
    link.close(Duration::from_secs(1));
    let hb = Link::builder(redis.endpoint())
        .protocol(Redis::new())
        .heartbeat(Heartbeat::every(Duration::from_millis(100)))
        .build()
        .unwrap();
    assert!(answers(
        &hb.request_within(marked("y"), T).wait().unwrap(),
        "y"
    ));
    hb.close(Duration::from_secs(1));
}

// ----- random sequences --------------------------------------------------------------------------

/// One random sequence: `ops` calls from one thread, drawn from a grammar of what a redis user
/// sends (pub/sub of channels and patterns, bare unsubscribes, `HELLO 2|3` at any point,
/// `CLIENT TRACKING`, `MULTI`/`EXEC`/`DISCARD`, short blocking commands, `RESET`, error
/// replies, sends, batches and requests), while another client publishes and writes the keys
/// it reads. Every request is a `PING` with a marker of its own. Returns (requests, wrong).
fn sequence(redis: &RedisServer, seed: u64, ops: usize) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let protocol = match rng.random_bool(0.3) {
        true => Redis::new().open_with(["HELLO", "3"]),
        false => Redis::new(),
    };
    let link = link(redis, protocol);
    let stop = Arc::new(AtomicBool::new(false));
    let drops = drain(&link, stop.clone());
    let publisher = {
        let (addr, stop) = (redis.addr(), stop.clone());
        thread::spawn(move || {
            let mut c = redis::Client::open(format!("redis://{addr}/"))
                .and_then(|c| c.get_connection())
                .unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let ch = ["c0", "c1", "pa"][(i % 3) as usize];
                let _: i64 = redis::cmd("PUBLISH").arg(ch).arg(i).query(&mut c).unwrap();
                let _: () = redis::cmd("SET").arg("k0").arg(i).query(&mut c).unwrap();
                i += 1;
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let channels = ["c0", "c1", "c2"];
    let mut pending = Vec::new();
    let (mut requests, mut wrong) = (0, 0);
    let mut batch = relink::Batch::new();
    for op in 0..ops {
        let pick = rng.random_range(0..100);
        let frame = match pick {
            0..=44 => {
                let m = format!("s{seed}o{op}");
                pending.push((m.clone(), link.request_within(marked(&m), T)));
                continue;
            }
            45..=52 => {
                let n = rng.random_range(1..=2);
                let mut c = vec!["SUBSCRIBE"];
                c.extend((0..n).map(|_| channels[rng.random_range(0..3)]));
                cmd(&c)
            }
            53..=56 => cmd(&["PSUBSCRIBE", "p*"]),
            57..=62 => match rng.random_bool(0.5) {
                true => cmd(&["UNSUBSCRIBE"]),
                false => cmd(&["UNSUBSCRIBE", channels[rng.random_range(0..3)]]),
            },
            63..=64 => cmd(&["PUNSUBSCRIBE"]),
            65..=67 => cmd(&["HELLO", ["2", "3"][rng.random_range(0..2)]]),
            68 => cmd(&["CLIENT", "TRACKING", "ON"]),
            69..=71 => cmd(&["MULTI"]),
            72..=74 => cmd(&["EXEC"]),
            75 => cmd(&["DISCARD"]),
            76..=77 => cmd(&["BLPOP", "empty", "0.01"]),
            78 => cmd(&["RESET"]),
            79..=81 => cmd(&["INCR", "k0"]), // an error reply once k0 is not a number
            82..=85 => cmd(&["GET", "k0"]),
            86..=89 => cmd(&["LRANGE", "l", "0", "-1"]),
            _ => {
                batch.push(cmd(&["SET", &format!("b{}", rng.random_range(0..8)), "v"]));
                if batch.len() >= 4 {
                    let b = std::mem::take(&mut batch);
                    link.send_batch(b, Default::default()).unwrap();
                }
                continue;
            }
        };
        if std::env::var_os("RELINK_FOLLOW_TRACE").is_some() {
            eprintln!(
                "op {op}: {}",
                String::from_utf8_lossy(&frame).replace("\r\n", " ")
            );
        }
        match rng.random_bool(0.8) {
            true => link.send(frame).unwrap(),
            // A request of a command whose answers are followed: its reply is its own too.
            false => drop(link.request_within(frame, T)),
        }
        if pending.len() > 400 {
            let (r, w) = count_wrong(std::mem::take(&mut pending), seed);
            requests += r + w;
            wrong += w;
        }
    }
    let (r, w) = count_wrong(pending, seed);
    requests += r + w;
    wrong += w;
    stop.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
    let protocol_drops = drops.join().unwrap();
    let m = link.close(Duration::from_secs(5));
    assert_eq!(
        protocol_drops, 0,
        "seed {seed}: a connection closed for an answer relink did not expect"
    );
    assert_eq!(m.replies_unexpected, 0, "seed {seed}");
    (requests, wrong)
}

#[test]
#[ignore = "needs redis-server"]
fn random_sequences_of_everyday_redis_commands_give_every_request_its_own_reply() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let seeds: u64 = std::env::var("RELINK_FOLLOW_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let first: u64 = std::env::var("RELINK_FOLLOW_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random_range(0..1 << 32));
    let (mut requests, mut wrong) = (0, 0);
    for seed in first..first + seeds {
        let (r, w) = sequence(&redis, seed, 4000);
        assert_eq!(w, 0, "seed {seed} (RELINK_FOLLOW_SEED={seed} reruns it)");
        requests += r;
        wrong += w;
    }
    println!("{seeds} sequences from seed {first}: {requests} requests, {wrong} wrong");
}

// ----- refusals ----------------------------------------------------------------------------------

#[test]
#[ignore = "needs redis-server"]
fn incr_refused_busy_while_a_script_runs_runs_exactly_once_each() {
    // `-BUSY` once a script has run for 50 ms; the script below runs for 2 s.
    let redis = RedisServer::start_with(false, &["--busy-reply-threshold", "50"])
        .expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    let stop = Arc::new(AtomicBool::new(false));
    let drops = drain(&link, stop.clone());
    assert!(answers(
        &link.request_within(marked("up"), T).wait().unwrap(),
        "up"
    ));
    let script = {
        let addr = redis.addr();
        thread::spawn(move || {
            let mut c = redis::Client::open(format!("redis://{addr}/"))
                .and_then(|c| c.get_connection())
                .unwrap();
            let busy = "local s = tonumber(redis.call('TIME')[1]) \
                        while tonumber(redis.call('TIME')[1]) - s < 2 do end return 1";
            let _: i64 = redis::cmd("EVAL").arg(busy).arg(0).query(&mut c).unwrap();
        })
    };
    // Writes before, during and after the script.
    let n = 5000;
    for i in 0..n {
        link.send(cmd(&["INCR", "counter"])).unwrap();
        if i % 500 == 0 {
            thread::sleep(Duration::from_millis(100));
        }
    }
    link.flush(T).unwrap();
    script.join().unwrap();
    let got = link
        .request_within(cmd(&["GET", "counter"]), T)
        .wait()
        .unwrap();
    let m = link.metrics();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(drops.join().unwrap(), 0);
    println!(
        "{n} INCR: {} refused and written again, counter {}",
        m.frames_refused,
        String::from_utf8_lossy(&got).trim()
    );
    assert!(m.frames_refused > 0, "the script made redis refuse writes");
    assert_eq!(
        &got[..],
        format!("${}\r\n{n}\r\n", n.to_string().len()).as_bytes()
    );
    link.close(Duration::from_secs(1));
}

// ----- a writer that never reads its events -------------------------------------------------------

#[test]
#[ignore = "needs redis-server"]
fn a_writer_that_never_reads_its_events_keeps_being_confirmed() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = link(&redis, Redis::new());
    let n = 20_000;
    for k in 0..n {
        link.send(cmd(&["SET", &format!("w{k}"), "v"])).unwrap();
    }
    link.flush(T).expect("every write confirmed");
    let m = link.metrics();
    assert_eq!(m.frames_confirmed, n);
    assert_eq!(m.answers_consumed, n);
    assert!(!m.reading_paused);
    let size = link.request_within(cmd(&["DBSIZE"]), T).wait().unwrap();
    assert_eq!(&size[..], format!(":{n}\r\n").as_bytes());
    link.close(Duration::from_secs(1));
}
