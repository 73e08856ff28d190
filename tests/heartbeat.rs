//! Dead-peer detection: libzmq never notices a STREAM peer that stopped answering (no FIN, no
//! RST); relink's heartbeat must, within `Heartbeat::bound()` = interval × (max_missed + 1),
//! and must not raise false alarms (a busy link, a paused reader).
//!
//! Times are measured on a real clock, so every bound has a generous [`SLACK`]. The ignored
//! tests need redis-server, or root and network namespaces (`cargo test -- --ignored`).

mod util;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use relink::framing::Lines;
use relink::protocol::{Handshake, Ping, Predicate};
use relink::{Cause, Event, Heartbeat, Link, State, Transition};
use util::{lines_to, netns, show, watched, Behaviour, Peer, RedisServer, Server, Watch};

/// Room for scheduling delays on a loaded two-core machine, on top of every time bound.
const SLACK: Duration = Duration::from_millis(500);
/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The heartbeat most tests use: a raw `ping\n` every 200 ms, dead after 600 ms of silence.
fn heartbeat_200ms() -> Heartbeat {
    Heartbeat::new(ms(200), Ping::Raw(b"ping\n".to_vec())).max_missed(2)
}

fn is_heartbeat_death(t: &Transition) -> bool {
    t.cause == Cause::HeartbeatTimeout
}

#[test]
fn a_peer_that_stays_connected_but_never_answers_is_declared_dead_within_the_bound_then_redialled()
{
    let peer = Peer::start(Behaviour::Silent);
    let hb = heartbeat_200ms();
    let bound = hb.bound();
    let (link, mut w) = watched(Link::builder(peer.endpoint()).heartbeat(hb).reconnect(|r| {
        r.backoff_base = ms(50);
        r.backoff_max = ms(200);
    }));
    let (ready_at, _) = w.until(T, |t| t.to == State::Ready);

    let (dead_at, _) = w.expect_step(
        bound + SLACK + T,
        |t| t.from == State::Ready && t.to != State::Ready,
        (State::Ready, State::Backoff, Cause::HeartbeatTimeout),
    );
    let took = dead_at - ready_at;
    let sent = link.metrics().heartbeats_sent;
    eprintln!("silent peer: declared dead {took:?} after Ready (bound {bound:?})");
    assert!(
        took <= bound + SLACK,
        "declared dead {took:?} after Ready; the bound is {bound:?} (+{SLACK:?} slack)"
    );
    assert!(
        took >= bound / 2,
        "declared dead only {took:?} after Ready: too early for a {bound:?} bound"
    );
    assert!(
        sent >= 2,
        "{sent} pings sent before the verdict; max_missed is 2"
    );
    assert!(
        peer.wait_accepts(2, T),
        "the link did not dial again after the heartbeat timeout; seen: {}",
        w.trace()
    );
    link.close(ms(500));
}

#[test]
#[ignore = "needs redis-server"]
fn a_sigstopped_redis_server_is_declared_dead_within_the_bound_and_used_again_after_sigcont() {
    let redis = RedisServer::start().expect("this test needs redis-server on PATH");
    let hb = Heartbeat::new(ms(200), Ping::Raw(b"PING\r\n".to_vec()))
        .max_missed(2)
        .reply(Predicate::starts_with(&b"+PONG"[..]));
    let bound = hb.bound();
    let (link, mut w) = watched(lines_to(&redis.endpoint()).heartbeat(hb).reconnect(|r| {
        r.backoff_base = ms(50);
        r.backoff_max = ms(400);
    }));
    w.until(T, |t| t.to == State::Ready);
    let rtt = util::wait_for(T, || link.metrics().last_rtt);
    assert!(rtt.is_some(), "no PONG measured; seen: {}", w.trace());
    w.drain();
    assert_eq!(link.state(), State::Ready, "seen: {}", w.trace());

    // Frozen: the TCP connection stays up, nothing answers.
    redis.stop_signal();
    let stopped_at = Instant::now();
    let (dead_at, _) = w.expect_step(
        bound + SLACK + T,
        |t| t.from == State::Ready && t.to != State::Ready,
        (State::Ready, State::Backoff, Cause::HeartbeatTimeout),
    );
    let took = dead_at - stopped_at;
    eprintln!("redis-server: declared dead {took:?} after SIGSTOP (bound {bound:?})");
    assert!(
        took <= bound + SLACK,
        "declared dead {took:?} after SIGSTOP; the bound is {bound:?} (+{SLACK:?} slack)"
    );

    // New connects to a stopped process still succeed (the kernel answers), so the link may
    // flap Connected/Ready/Backoff until the server runs again.
    redis.cont_signal();
    let recovered_by = Instant::now() + 4 * T;
    let mut answered = false;
    while !answered && Instant::now() < recovered_by {
        if link.state() != State::Ready {
            w.until(T, |t| t.to == State::Ready);
        }
        link.send(b"PING relink".to_vec()).unwrap();
        // Redis answers a bulk string: "$6", "relink". A flap before it means: ask again.
        let (frames, transitions) = (w.frames.len(), w.transitions.len());
        w.until_seen(2 * bound, |w| {
            w.frames[frames..].iter().any(|f| f == b"relink")
                || w.since(transitions).iter().any(|t| t.from == State::Ready)
        });
        answered = w.frames[frames..].iter().any(|f| f == b"relink");
    }
    assert!(
        answered,
        "redis-server did not answer through the link after SIGCONT; seen: {}",
        w.trace()
    );

    // And it stays alive: the heartbeat's pings are answered for two whole bounds.
    let before = link.metrics();
    let left_ready = util::wait_until(2 * bound, || link.state() != State::Ready);
    let after = link.metrics();
    let mark = w.transitions.len();
    w.drain();
    let late = w.since(mark);
    assert!(
        !left_ready && late.is_empty(),
        "the link did not stay Ready after SIGCONT: {}",
        show(&late)
    );
    assert_eq!(after.state, State::Ready);
    assert!(
        after.heartbeats_sent > before.heartbeats_sent,
        "no ping sent in two bounds"
    );
    assert!(redis.ping(T), "redis-server itself does not answer");
    link.close(ms(500));
}

/// Env var naming the endpoint the helper's link dials; the helper does nothing without it.
const CHILD_ENDPOINT: &str = "RELINK_NETNS_CHILD_ENDPOINT";
/// Name of the helper test, for `--exact`.
const CHILD_TEST: &str = "netns_helper_runs_a_link_in_namespace_a_and_reports_on_stdout";

/// The child side of the blackhole test, which runs it inside namespace A with the endpoint
/// in `RELINK_NETNS_CHILD_ENDPOINT`. Run on its own, it checks that protocol here: it starts
/// itself as a child against a local echo peer and reads a Ready report from its stdout.
#[test]
#[ignore = "needs root and network namespaces (its blackhole test does)"]
fn netns_helper_runs_a_link_in_namespace_a_and_reports_on_stdout() {
    if let Ok(endpoint) = std::env::var(CHILD_ENDPOINT) {
        netns::run_child_link(&endpoint, ms(200), 2, Duration::from_secs(30));
        return;
    }
    use std::io::BufRead;
    let peer = Peer::start(Behaviour::Echo);
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child = std::process::Command::new(exe)
        .args([CHILD_TEST, "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENDPOINT, peer.endpoint())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let ready = netns::wait_report(
        &rx,
        2 * T,
        &mut seen,
        |r| matches!(r, netns::Report::State { to, .. } if to == "Ready"),
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        ready.is_ok(),
        "no Ready report from the child: {ready:?}; seen: {seen:?}"
    );
}

#[test]
#[ignore = "needs root and network namespaces"]
fn a_blackholed_peer_that_sends_no_fin_or_rst_is_declared_dead_within_the_bound() {
    let bound = heartbeat_200ms().bound();
    let pair = netns::netns_pair();
    let port = 7000;
    let _echo = pair.echo_in_b(port, T);
    let endpoint = format!("tcp://{}:{port}", pair.addr_b);
    let child = pair
        .spawn_this_test(&pair.a, CHILD_TEST, &[(CHILD_ENDPOINT, endpoint)])
        .unwrap_or_else(|e| panic!("cannot start the link in namespace A: {e}"));
    let lines = child.lines();
    let mut seen = Vec::new();

    let ready = netns::wait_report(
        lines,
        2 * T,
        &mut seen,
        |r| matches!(r, netns::Report::State { to, .. } if to == "Ready"),
    );
    assert!(
        ready.is_ok(),
        "no Ready in namespace A: {ready:?}; seen: {seen:?}"
    );
    // The path works: three echoed pings (600 ms of answered heartbeats) and no verdict.
    for _ in 0..3 {
        let echoed = netns::wait_report(lines, T, &mut seen, |r| {
            matches!(r, netns::Report::Frame { .. } | netns::Report::State { .. })
        });
        assert!(
            matches!(echoed, Ok(netns::Report::Frame { .. })),
            "pings not echoed before the blackhole: {echoed:?}; seen: {seen:?}"
        );
    }

    let silenced_at = netns::mono_us();
    pair.blackhole_b_in_a()
        .unwrap_or_else(|e| panic!("cannot add the blackhole route: {e}"));
    let dead = netns::wait_report(
        lines,
        bound + SLACK + T,
        &mut seen,
        |r| matches!(r, netns::Report::State { from, .. } if from == "Ready"),
    );
    let Ok(netns::Report::State {
        t_us, to, cause, ..
    }) = dead
    else {
        panic!("the link never left Ready after the blackhole: {dead:?}; seen: {seen:?}");
    };
    let took = netns::us_between(silenced_at, t_us);
    eprintln!("blackhole: declared dead {took:?} after the route was added (bound {bound:?})");
    assert_eq!(
        (to.as_str(), cause.as_str()),
        ("Backoff", "heartbeat-timeout"),
        "seen: {seen:?}"
    );
    assert!(
        took <= bound + SLACK,
        "declared dead {took:?} after the blackhole; the bound is {bound:?} (+{SLACK:?} slack)"
    );
    // `child`, `_echo` and then `pair` are dropped here: processes killed, namespaces gone.
}

#[test]
fn an_idle_only_heartbeat_sends_no_ping_while_the_link_carries_data() {
    let peer = Peer::start(Behaviour::Echo);
    let interval = ms(300);
    let hb = Heartbeat::new(interval, Ping::Raw(b"ping\n".to_vec()))
        .max_missed(2)
        .idle_only(true);
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .heartbeat(hb)
        .build()
        .unwrap();
    // Queued now, sent in the same pass that makes the link Ready.
    link.send(b"data-0".to_vec()).unwrap();
    Watch::new(&link).until(T, |t| t.to == State::Ready);

    let mut seen = Vec::new();
    let every = interval / 4;
    let mut next = Instant::now() + every;
    let end = Instant::now() + 6 * interval;
    let mut sent = 1;
    let mut echoed = 0;
    while next < end {
        // Read what comes back until it is time to send again.
        while let Ok(ev) = link.events().recv_deadline(next) {
            match ev {
                Event::Frame(f) => {
                    assert!(f.starts_with(b"data-"), "unexpected frame {f:?}");
                    echoed += 1;
                }
                Event::State(t) => seen.push(t),
                _ => {}
            }
        }
        link.send(format!("data-{sent}").into_bytes()).unwrap();
        sent += 1;
        next += every;
    }
    let m = link.metrics();
    assert_eq!(m.heartbeats_sent, 0, "pings sent on a busy link");
    assert!(seen.is_empty(), "transitions after Ready: {}", show(&seen));
    assert_eq!(m.state, State::Ready);
    assert_eq!(m.connects, 1);
    assert!(echoed >= sent / 2, "only {echoed} of {sent} frames echoed");
    let lines = util::lines_str(&peer.received_all());
    assert!(
        lines.iter().all(|l| l.starts_with("data-")),
        "the peer received something else than data: {lines:?}"
    );
    link.close(ms(500));
}

#[test]
fn a_link_whose_reading_is_paused_is_never_declared_dead() {
    // A peer that floods 1 KiB chunks and never reads.
    let peer = Peer::start(Behaviour::script(|conn| {
        let chunk = vec![b'x'; 1024];
        while !conn.is_stopping() {
            match conn.write_all(&chunk) {
                Ok(()) => conn.pause(ms(1)),
                // The client does not read for a while: keep the connection and go on.
                Err(e) if e.kind() == ErrorKind::TimedOut => {}
                Err(_) => return,
            }
        }
    }));
    let hb = heartbeat_200ms();
    let bound = hb.bound();
    let link = Link::builder(peer.endpoint())
        .heartbeat(hb)
        .events_capacity(4)
        .build()
        .unwrap();
    assert!(
        util::wait_until(T, || link.metrics().reading_paused),
        "reading never paused although nothing takes the events"
    );

    // Not reading for three whole bounds: the silence is ours, not the peer's.
    let left_ready = util::wait_until(3 * bound, || link.state() != State::Ready);
    let m = link.metrics();
    assert!(!left_ready, "the link left Ready while reading was paused");
    assert_eq!(m.state, State::Ready);
    assert_eq!(m.connects, 1, "the connection was replaced while paused");
    assert!(
        m.reading_paused,
        "reading resumed without the application reading"
    );
    assert!(m.heartbeats_sent > 0, "no ping sent in three bounds");

    // Read again: the backlog, then live data, with no verdict at any point.
    let until = Instant::now() + 2 * bound;
    let mut transitions = Vec::new();
    let mut frames = 0;
    while let Ok(ev) = link.events().recv_deadline(until) {
        match ev {
            Event::State(t) => transitions.push(t),
            Event::Frame(_) => frames += 1,
            _ => {}
        }
    }
    let mut late = Watch::new(&link);
    late.drain();
    transitions.extend(late.since(0));
    frames += late.frames.len();
    let m = link.metrics();
    assert!(
        transitions.iter().all(|t| t.to != State::Backoff),
        "transitions: {}",
        show(&transitions)
    );
    assert!(
        !transitions.iter().any(is_heartbeat_death),
        "declared dead: {}",
        show(&transitions)
    );
    assert_eq!(m.state, State::Ready);
    assert_eq!(m.connects, 1);
    assert_eq!(peer.accept_count(), 1);
    assert!(frames > 4, "only {frames} frames after reading resumed");
    assert_eq!(m.events_dropped, 0, "events dropped");
    link.close(ms(500));
}

#[test]
fn a_handshake_that_gets_no_reply_times_out_and_counts_as_a_failure() {
    let peer = Peer::start(Behaviour::Silent);
    let timeout = ms(300);
    let (link, mut w) = watched(
        Link::builder(peer.endpoint())
            .framing(Lines::new())
            .protocol(Handshake::new(
                vec![b"HELLO".to_vec()],
                Predicate::starts_with(&b"WELCOME"[..]),
            ))
            .handshake_timeout(timeout)
            .reconnect(|r| {
                r.backoff_base = ms(50);
                r.backoff_max = ms(200);
            }),
    );
    let mut attempts = Vec::new();
    for _ in 0..2 {
        let (connected_at, _) = w.until(T, |t| t.to == State::Connected);
        let (failed_at, t) = w.expect_step(
            timeout + SLACK + T,
            |t| t.from == State::Connected,
            (State::Connected, State::Backoff, Cause::HandshakeTimeout),
        );
        let took = failed_at - connected_at;
        assert!(
            took >= timeout / 2 && took <= timeout + SLACK,
            "handshake timed out after {took:?}; the timeout is {timeout:?}"
        );
        attempts.push(t.attempt);
    }
    assert_eq!(
        attempts[1],
        attempts[0] + 1,
        "the failure count did not grow: {}",
        w.trace()
    );
    assert!(
        attempts[0] >= 1,
        "a handshake timeout must count as a failure"
    );
    assert!(
        w.since(0).iter().all(|t| t.to != State::Ready),
        "Ready without a reply: {}",
        w.trace()
    );
    assert!(link.metrics().consecutive_failures >= 2);
    link.close(ms(500));
}
