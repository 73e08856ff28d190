//! Every reply to the frame it answers, against a real redis-server: requests beside
//! subscriptions, client tracking and publishers each get their own reply (RESP2 and RESP3);
//! writes a restarted server refuses while it loads its data are resent or reported, never
//! counted as confirmed; an opening `PING` answered `-LOADING` makes the link Ready once the
//! loading ends.
//!
//! Ignored in a bare `cargo test` (they need redis-server); `.ci/run` installs it and runs them.

mod util;

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use relink::framing::Resp;
use relink::protocol::Redis;
use relink::{AbandonReason, Cause, Event, Heartbeat, Link, Redelivery, State};
use util::{RedisServer, Server};

const T: Duration = Duration::from_secs(30);

/// A plain client of the `redis` crate, for what the test itself asks of the server.
fn client(redis: &RedisServer) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", redis.addr()))
        .and_then(|c| c.get_connection())
        .expect("a plain redis connection")
}

// ----- pushes and requests -----------------------------------------------------------------------

/// A link that subscribed (and in RESP3 tracks keys) sends 1 000 requests in batches of 50
/// while another client publishes to its channel and changes the keys it read: every request
/// gets its own reply, and the pushes are events.
///
/// The requests start once the first message is pushed, so that they run among the pushes.
/// The pushes are taken as they come, on a thread of their own: the publisher pushes faster
/// than the requests are answered on a loaded machine, and a link whose events are not taken
/// pauses reading when its events channel is full, replies included.
fn requests_beside_pushes(resp3: bool) {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let protocol = match resp3 {
        true => Redis::new().open_with(["HELLO", "3"]),
        false => Redis::new(),
    };
    let link = Link::builder(redis.endpoint())
        .protocol(protocol)
        // Pings between the requests all the time; a loaded machine's pauses are no reason to
        // call the peer dead.
        .heartbeat(Heartbeat::every(Duration::from_millis(50)).max_missed(10_000))
        .build()
        .unwrap();
    if resp3 {
        link.send(Resp::command(["CLIENT", "TRACKING", "on"]))
            .unwrap();
    }
    link.send(Resp::command(["SUBSCRIBE", "ch", "other"]))
        .unwrap();
    link.flush(T).expect("the subscription is answered");
    let pushed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (first_push, pushing) = std::sync::mpsc::channel();
    let taker = {
        let (events, pushed) = (link.events().clone(), pushed.clone());
        // Until the link is closed and every event was taken.
        thread::spawn(move || {
            while let Ok(event) = events.recv() {
                if matches!(&event, Event::Frame(f) if is_push(f)) {
                    pushed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = first_push.send(());
                }
            }
        })
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = {
        let (stop, mut c) = (stop.clone(), client(&redis));
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg("ch")
                    .arg(n)
                    .query(&mut c)
                    .unwrap();
                // A key the link read: its tracking pushes an invalidation.
                let _: () = redis::cmd("SET")
                    .arg(format!("k{}", n % 50))
                    .arg(n)
                    .query(&mut c)
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    pushing
        .recv_timeout(T)
        .expect("the publisher's messages are pushed");
    let pushed_before = pushed.load(std::sync::atomic::Ordering::SeqCst);
    let (mut right, mut wrong) = (0, Vec::new());
    for batch in 0..20 {
        let pending: Vec<_> = (0..50)
            .map(|i| {
                let n = batch * 50 + i;
                // A subscribed RESP2 connection runs only PING among the ordinary commands.
                let frame = match (resp3, n % 2) {
                    (true, 0) => Resp::command(["GET".to_string(), format!("k{}", n % 50)]),
                    (true, _) => Resp::command(["ECHO".to_string(), format!("req-{n}")]),
                    (false, _) => Resp::command(["PING".to_string(), format!("req-{n}")]),
                };
                (n, link.request_within(frame, T))
            })
            .collect();
        for (n, p) in pending {
            let reply = p.wait().unwrap_or_else(|e| panic!("request {n}: {e}"));
            let own = match (resp3, n % 2) {
                // A GET's reply is a bulk string or a null, never another request's text.
                (true, 0) => !reply.windows(4).any(|w| w == b"req-"),
                _ => reply
                    .windows(format!("req-{n}\r").len())
                    .any(|w| w == format!("req-{n}\r").as_bytes()),
            };
            if own {
                right += 1;
            } else {
                wrong.push((n, String::from_utf8_lossy(&reply).into_owned()));
            }
        }
    }
    let pushed_while = pushed.load(std::sync::atomic::Ordering::SeqCst) - pushed_before;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let published = publisher.join().unwrap();
    let m = link.close(Duration::from_secs(1));
    taker.join().unwrap();
    let pushes = pushed.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!(
        "resp3={resp3}: right={right} wrong={} ({published} published, {pushes} pushes as \
         events, {pushed_while} of them while the requests ran, {} replies late)",
        wrong.len(),
        m.replies_late
    );
    assert!(
        wrong.is_empty(),
        "replies given to other requests: {:?}",
        &wrong[..wrong.len().min(5)]
    );
    assert_eq!(right, 1_000);
    assert!(pushed_while > 0, "the server pushed while the requests ran");
}

/// A message published to a channel the link subscribed to (RESP2 or RESP3), or a RESP3
/// invalidation of a key it read; not a subscription's confirmation.
fn is_push(frame: &[u8]) -> bool {
    let Some(body) = frame.get(4..) else {
        return false;
    };
    matches!(&frame[..4], b"*3\r\n" | b">3\r\n" | b">2\r\n")
        && (body.starts_with(b"$7\r\nmessage\r\n") || body.starts_with(b"$10\r\ninvalidate\r\n"))
}

#[test]
#[ignore = "needs redis-server"]
fn resp2_requests_beside_a_subscription_and_a_publisher_each_get_their_own_reply() {
    requests_beside_pushes(false);
}

#[test]
#[ignore = "needs redis-server"]
fn resp3_requests_beside_subscriptions_tracking_and_a_publisher_each_get_their_own_reply() {
    requests_beside_pushes(true);
}

#[test]
#[ignore = "needs redis-server"]
fn a_subscribe_as_a_request_gets_its_confirmation_and_the_next_request_its_own_reply() {
    let redis = RedisServer::start().expect("this test needs redis-server");
    let link = Link::builder(redis.endpoint())
        .framing(Resp::new())
        .protocol(Redis::new().open_with(["HELLO", "3"]))
        .build()
        .unwrap();
    let confirmed = link
        .request_within(Resp::command(["SUBSCRIBE", "ch"]), T)
        .wait()
        .unwrap();
    assert_eq!(
        &confirmed[..],
        b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    );
    let echo = link
        .request_within(Resp::command(["ECHO", "x"]), T)
        .wait()
        .unwrap();
    assert_eq!(&echo[..], b"$1\r\nx\r\n");
    link.close(Duration::from_secs(1));
}

// ----- a server that loads its data after a restart ----------------------------------------------

/// A persistent redis-server whose append-only file holds `keys` filler keys as commands, so
/// that a restart answers `-LOADING` for a while (about a second per million keys here).
fn loading_redis(keys: u64) -> RedisServer {
    let redis = RedisServer::start_with(
        true,
        &[
            "--aof-use-rdb-preamble",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    )
    .expect("this test needs redis-server");
    let mut c = client(&redis);
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(keys)
        .arg("filler")
        .arg(10)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    let rewritten = util::wait_for(T, || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).ok()?;
        (info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
            .then_some(())
    });
    assert!(rewritten.is_some(), "the append-only file is rewritten");
    redis
}

fn key_of(frame: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(frame).ok()?;
    let at = text.find("-key-")? + 5;
    text[at..].split('\r').next()?.parse().ok()
}

/// How many of trial `n`'s writes redis ran more than once, counted from its append-only
/// files (every write it ran is there, `appendfsync always`).
fn applied_twice(redis: &RedisServer, n: u32) -> usize {
    let dir = redis.data_dir().expect("a persistent server");
    let mut runs: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    let needle = format!("t{n}-key-");
    let files = walk(dir);
    for file in files {
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).split("\r\n") {
            if let Some(k) = line
                .strip_prefix(needle.as_str())
                .and_then(|k| k.parse().ok())
            {
                *runs.entry(k).or_default() += 1;
            }
        }
    }
    runs.values().filter(|&&r| r > 1).count()
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// One trial: `WRITES` `SET`s sent on a link confirmed by reply, the server killed twice
/// while they flow and restarted (it loads its data, answering `-LOADING`). Returns the keys
/// missing from redis, those reported (abandoned), the refusals counted, the resends and the
/// writes redis ran twice.
fn trial(
    redis: &mut RedisServer,
    n: u32,
    policy: Redelivery,
) -> (Vec<u64>, HashSet<u64>, u64, u64, usize) {
    const WRITES: u64 = 6_000;
    let link = util::writer_to(redis, policy, T).build().unwrap();
    let collector = util::collect_abandoned(link.events(), 3 * T);
    let producer = {
        let link = link.clone();
        thread::spawn(move || {
            for k in 0..WRITES {
                // Paced over about three seconds, so that writes go on while the restarted
                // server loads.
                if k % 10 == 0 {
                    thread::sleep(Duration::from_millis(5));
                }
                let key = format!("t{n}-key-{k}");
                link.send(Resp::command(["SET", key.as_str(), "v"]))
                    .expect("accepted");
            }
        })
    };
    let m = util::kill_twice_while_writing(&link, redis, WRITES, producer, T);
    let mut reported = HashSet::new();
    for (frame, reason) in collector.join().unwrap() {
        assert!(
            matches!(reason, AbandonReason::Refused | AbandonReason::Unconfirmed),
            "{reason}"
        );
        reported.extend(key_of(&frame));
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("t{n}-key-*"))
        .query(&mut client(redis))
        .unwrap();
    let present: HashSet<u64> = keys.iter().filter_map(|k| key_of(k.as_bytes())).collect();
    let missing = (0..WRITES).filter(|k| !present.contains(k)).collect();
    let twice = applied_twice(redis, n);
    (missing, reported, m.frames_refused, m.frames_resent, twice)
}

fn loading_trials(policy: Redelivery) {
    let mut redis = loading_redis(400_000);
    let (mut refused, mut reported_total) = (0, 0);
    for n in 0..10 {
        let (missing, reported, r, resent, twice) = trial(&mut redis, n, policy);
        let unreported: Vec<_> = missing.iter().filter(|k| !reported.contains(k)).collect();
        eprintln!(
            "trial {n} ({policy:?}): {} missing, {} reported, {r} refusals, {resent} resent, \
             {twice} run twice: {} lost without a report",
            missing.len(),
            reported.len(),
            unreported.len()
        );
        assert!(
            unreported.is_empty(),
            "writes lost without a report: {unreported:?}"
        );
        if policy == Redelivery::Resend {
            assert!(
                missing.is_empty() && reported.is_empty(),
                "every write is in redis"
            );
        }
        refused += r;
        reported_total += reported.len();
    }
    eprintln!("{policy:?}: {refused} refusals over 10 trials, {reported_total} writes reported");
    assert!(
        refused > 0,
        "the restarted server refused writes while it loaded"
    );
}

#[test]
#[ignore = "needs redis-server"]
fn with_resend_every_set_refused_by_a_loading_redis_is_written_again_and_present() {
    loading_trials(Redelivery::Resend);
}

#[test]
#[ignore = "needs redis-server"]
fn with_report_every_set_missing_after_a_loading_redis_refused_it_was_reported() {
    loading_trials(Redelivery::Report);
}

#[test]
#[ignore = "needs redis-server"]
fn an_opening_ping_answered_loading_becomes_ready_within_a_second_of_the_loading_end() {
    let mut redis = loading_redis(1_000_000);
    let link = Link::builder(redis.endpoint())
        .framing(Resp::new())
        .protocol(Redis::new().open_with(["PING"]))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(20);
            r.backoff_max = Duration::from_millis(100);
        })
        .build()
        .unwrap();
    let mut watch = util::Watch::new(&link);
    watch.until_state(State::Ready, T);
    redis.kill();
    let killed = Instant::now();
    // Returns once the server answers PING: its loading is over.
    redis.relaunch();
    let loaded = Instant::now();
    let ready = watch.until_state(State::Ready, T);
    let late = Instant::now().saturating_duration_since(loaded);
    eprintln!(
        "loading for {:?}; the link Ready {late:?} after it ({})",
        loaded - killed,
        ready.cause
    );
    assert!(
        loaded - killed > Duration::from_millis(300),
        "the server loaded for a while"
    );
    assert!(
        late < Duration::from_secs(1),
        "Ready {late:?} after the loading ended"
    );
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.handshakes_refused, 0, "a loading server is no refusal");
    assert!(
        watch
            .transitions
            .iter()
            .all(|(_, t)| t.cause != Cause::Rejected),
        "{}",
        watch.trace()
    );
}

#[test]
#[ignore = "needs redis-server"]
fn a_subscribe_redis_runs_while_loading_is_held_once_and_a_bare_unsubscribe_ends_it() {
    let mut redis = loading_redis(1_000_000);
    let link = Link::builder(redis.endpoint())
        .protocol(Redis::new())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(20);
            r.backoff_max = Duration::from_millis(100);
        })
        .build()
        .unwrap();
    link.request_within(Resp::command(["PING"]), T)
        .wait()
        .expect("Ready");
    redis.kill();
    // Queued while redis is down: written as it loads, `PING` refused, `SUBSCRIBE` run (and
    // written again only when refused, never counted twice).
    link.send(Resp::command(["PING"])).unwrap();
    link.send(Resp::command(["SUBSCRIBE", "ls"])).unwrap();
    redis.relaunch();
    link.send(Resp::command(["UNSUBSCRIBE"])).unwrap();
    let pending: Vec<_> = (0..200)
        .map(|i| {
            let m = format!("after-{i}");
            (
                m.clone(),
                link.request_within(Resp::command(["PING", &m]), T),
            )
        })
        .collect();
    let mut wrong = 0;
    for (m, p) in pending {
        let reply = p.wait().unwrap();
        if !reply.windows(m.len()).any(|w| w == m.as_bytes()) {
            wrong += 1;
        }
    }
    let metrics = link.close(Duration::from_secs(1));
    eprintln!(
        "while loading: {} refusals; 200 requests after a bare UNSUBSCRIBE: {wrong} wrong",
        metrics.frames_refused
    );
    assert_eq!(wrong, 0);
    assert_eq!(metrics.replies_unexpected, 0);
}
