//! Our own pauses are not the peer's silence: a process that was stopped (SIGSTOP, as a VM
//! pause, a CPU quota, a debugger or a long swap-in would) and a slow callback on a shared IO
//! thread must not make healthy peers look dead, and dead peers must still be found within the
//! heartbeat's bound once the link is served again.
//!
//! The pause scenarios stop a child process (this test binary again, running the ignored
//! helper below) that owns the links; the peers stay in this process (or are a redis-server),
//! so they answer every ping they are sent while the child is stopped. The child prints its
//! links' transitions on stdout ([`netns::Report`] lines, CLOCK_MONOTONIC stamps).
//!
//! Times are measured on a real clock: bounds carry a [`SLACK`] for a loaded two-core machine.

mod util;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relink::error::{Callback, LinkError};
use relink::framing::{DecodeError, EncodeError, Framing, Lines};
use relink::protocol::{Ping, Predicate};
use relink::{Event, Heartbeat, IoPool, Link, State};
use util::netns::{self, mono_us, us_between, Process, Report};
use util::{Behaviour, Peer, RedisServer, Server};

/// Room for scheduling delays on a loaded two-core machine, on top of every time bound.
const SLACK: Duration = Duration::from_millis(500);
/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------------------
// The child that owns the links
// ---------------------------------------------------------------------------------------

/// Env var: `<endpoint> <echo|redis> <links>`; the helper does nothing without it.
const CHILD_SPEC: &str = "RELINK_PAUSE_CHILD";
/// Name of the helper test, for `--exact`.
const CHILD_TEST: &str = "pause_child_helper_owns_links_on_the_global_pool_and_reports_them";
/// The heartbeat of the child's links: 200 ms × (2 + 1).
const CHILD_INTERVAL: Duration = Duration::from_millis(200);

fn child_heartbeat(peer: &str) -> Heartbeat {
    let (ping, reply): (&[u8], &[u8]) = match peer {
        "redis" => (b"PING\r\n", b"+PONG"),
        _ => (b"PING\n", b"PING"),
    };
    Heartbeat::new(CHILD_INTERVAL, Ping::Raw(ping.to_vec()))
        .max_missed(2)
        .reply(Predicate::starts_with(reply))
}

/// The child: builds the links on `IoPool::global()`, says `started` once all are Ready,
/// then reports every transition until its stdin closes. Run on its own, it starts itself as
/// such a child against a local echo peer and expects it to say `started`.
#[test]
#[ignore = "starts a child process; the pause tests rely on it"]
fn pause_child_helper_owns_links_on_the_global_pool_and_reports_them() {
    let Ok(spec) = std::env::var(CHILD_SPEC) else {
        // Run on its own, it checks that role: itself as a child, three links to a local echo
        // peer, all reported Ready (`start_child` waits for that, bounded).
        let peer = Peer::start(Behaviour::Echo);
        let child = start_child(&peer.endpoint(), "echo", 3);
        drop(child);
        return;
    };
    let mut words = spec.split_whitespace();
    let (endpoint, peer, n) = match (words.next(), words.next(), words.next()) {
        (Some(e), Some(p), Some(n)) => (e.to_string(), p.to_string(), n.parse::<usize>()),
        _ => panic!("bad {CHILD_SPEC}: {spec:?}"),
    };
    let n = n.expect("a number of links");
    // The IO threads' warnings (how late they were, and why) on stderr, for the test's output.
    let _ = env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .try_init();
    let say = |what: String| println!("{} t_us={} {what}", netns::PREFIX, mono_us());
    let pool = IoPool::global().expect("the global pool");
    let (tx, rx) = crossbeam_channel::unbounded::<relink::Transition>();
    let links: Vec<Link> = (0..n)
        .map(|_| {
            let link = Link::builder(&endpoint)
                .framing(Lines::new())
                .io_pool(&pool)
                .heartbeat(child_heartbeat(&peer))
                .reconnect(|r| {
                    r.backoff_base = ms(50);
                    r.backoff_max = ms(500);
                })
                .build()
                .expect("build a child link");
            let events = link.events().clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                while let Ok(ev) = events.recv() {
                    if let Event::State(t) = ev {
                        if tx.send(t).is_err() {
                            return;
                        }
                    }
                }
            });
            link
        })
        .collect();
    drop(tx);
    let eof_rx = netns::stdin_closed();
    let mut ready = 0;
    let mut started = false;
    loop {
        crossbeam_channel::select! {
            recv(rx) -> t => {
                let Ok(t) = t else { break };
                if t.to == State::Ready {
                    ready += 1;
                }
                if t.from == State::Ready {
                    ready -= 1;
                }
                if started {
                    say(format!(
                        "state from={} to={} cause={} attempt={}",
                        t.from, t.to, t.cause, t.attempt
                    ));
                } else if ready == n {
                    started = true;
                    say("started".into());
                }
            }
            recv(eof_rx) -> _ => break,
        }
    }
    let metrics: Vec<relink::Metrics> = links.iter().map(Link::metrics).collect();
    let ready = metrics.iter().filter(|m| m.state == State::Ready).count();
    let deferred: u64 = metrics.iter().map(|m| m.verdicts_deferred).sum();
    say(format!("ended ready={ready} deferred={deferred}"));
    for link in links {
        link.close(ms(100));
    }
}

/// The child, running `links` links to `endpoint`, all Ready.
fn start_child(endpoint: &str, peer: &str, links: usize) -> Process {
    let spec = format!("{endpoint} {peer} {links}");
    let child = Process::this_test(CHILD_TEST, &[(CHILD_SPEC, spec)]).expect("start the child");
    wait_started(&child, links);
    child
}

/// Waits until the child says all its `links` links are Ready.
fn wait_started(child: &Process, links: usize) {
    let mut seen = Vec::new();
    let started = netns::wait_report(child.lines(), T, &mut seen, |r| {
        matches!(r, Report::Started { .. })
    });
    assert!(
        started.is_ok(),
        "the child's {links} links did not all become Ready: {started:?}; seen: {seen:?}"
    );
}

/// Stops the child for `pause`, lets it run on, and returns the transitions it reports in
/// the two bounds after it resumed (a healthy peer gives none).
fn pause_child(child: &Process, pause: Duration) -> Vec<Report> {
    child.signal(libc::SIGSTOP);
    std::thread::sleep(pause);
    child.signal(libc::SIGCONT);
    let mut seen = Vec::new();
    // Nothing to wait for: a quiet child is the expected outcome.
    let bound = child_heartbeat("echo").bound();
    let quiet = netns::wait_report(child.lines(), 2 * bound + SLACK, &mut seen, |_| false);
    assert!(
        quiet.is_err_and(|e| e.starts_with("nothing within")),
        "the child stopped reporting; seen: {seen:?}"
    );
    seen
}

/// Tells the child to stop; returns its last word: (links Ready, verdicts deferred).
fn finish_child(mut child: Process) -> (usize, u64) {
    child.close_stdin();
    let deadline = Instant::now() + T;
    loop {
        let line = child
            .lines()
            .recv_deadline(deadline)
            .unwrap_or_else(|e| panic!("the child did not say how it ended: {e}"));
        let Some(rest) = line.split(" ended ").nth(1) else {
            continue;
        };
        let field = |name: &str| -> u64 {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        return (field("ready") as usize, field("deferred"));
    }
}

fn left_ready(reports: &[Report]) -> usize {
    reports
        .iter()
        .filter(|r| matches!(r, Report::State { from, .. } if from == "Ready"))
        .count()
}

/// The pause scenario against `endpoint`: `links` Ready links, stopped for each of `pauses`.
fn none_leaves_ready_after_pauses(endpoint: &str, peer: &str, links: usize, pauses: &[Duration]) {
    let _process = util::exclusive();
    let child = start_child(endpoint, peer, links);
    for &pause in pauses {
        let reports = pause_child(&child, pause);
        let left = left_ready(&reports);
        eprintln!("pause {pause:?} of {links} links against {peer}: {left} left Ready");
        assert_eq!(
            left, 0,
            "{left} of {links} links left Ready after a pause of {pause:?}: {reports:?}"
        );
    }
    let (ready, deferred) = finish_child(child);
    eprintln!("at the end: {ready} of {links} Ready, {deferred} verdicts deferred");
    assert_eq!(
        ready, links,
        "the child's links are not all Ready at the end"
    );
    assert!(
        deferred > 0,
        "no verdict was deferred: did the pauses reach the links?"
    );
}

#[test]
fn links_of_a_process_stopped_for_0_7_s_and_3_s_stay_ready_against_an_echo_peer() {
    let peer = Peer::start(Behaviour::Echo);
    none_leaves_ready_after_pauses(&peer.endpoint(), "echo", 60, &[ms(700), ms(3000)]);
}

#[test]
#[ignore = "needs redis-server"]
fn links_of_a_process_stopped_for_0_7_s_and_3_s_stay_ready_against_redis_server() {
    let redis = RedisServer::start().expect("this test needs redis-server on PATH");
    none_leaves_ready_after_pauses(&redis.endpoint(), "redis", 100, &[ms(700), ms(3000)]);
}

#[test]
#[ignore = "slow: a 30 s pause; needs redis-server"]
fn links_of_a_process_stopped_for_30_s_stay_ready_against_redis_server() {
    let redis = RedisServer::start().expect("this test needs redis-server on PATH");
    none_leaves_ready_after_pauses(&redis.endpoint(), "redis", 100, &[ms(30_000)]);
}

// ---------------------------------------------------------------------------------------
// Dead peers right after a pause of the client
// ---------------------------------------------------------------------------------------

/// The child's one link is Ready; the peer dies (`kill_peer`) and at the same instant the
/// child is stopped for `pause`. Returns how long after the peer's death the child declared
/// the link dead. `what` names the row in the output.
fn detection_after_client_pause(
    what: &str,
    child: &Process,
    peer: &str,
    pause: Duration,
    kill_peer: impl FnOnce(),
) -> Duration {
    let died_us = mono_us();
    kill_peer();
    child.signal(libc::SIGSTOP);
    std::thread::sleep(pause);
    child.signal(libc::SIGCONT);
    let bound = child_heartbeat(peer).bound();
    let mut seen = Vec::new();
    let dead = netns::wait_report(child.lines(), pause + bound + T, &mut seen, |r| {
        matches!(r, Report::State { from, cause, .. }
            if from == "Ready" && cause == "heartbeat-timeout")
    })
    .unwrap_or_else(|e| panic!("the dead peer was not found: {e}; seen: {seen:?}"));
    let took = us_between(died_us, dead.t_us());
    eprintln!("{what}: dead {took:?} after its death and a client pause of {pause:?}");
    assert!(
        took <= pause + bound + SLACK,
        "declared dead {took:?} after the peer died; the pause was {pause:?}, the bound \
         {bound:?} (+{SLACK:?} slack)"
    );
    took
}

/// An echo peer that goes silent (keeps the connection, answers nothing) when told to.
fn silenceable_echo() -> (Peer, Arc<AtomicBool>) {
    let silent = Arc::new(AtomicBool::new(false));
    let flag = silent.clone();
    let peer = Peer::start(Behaviour::script(move |c| {
        while !c.is_stopping() {
            match c.read_some(ms(20)) {
                Ok(chunk) if chunk.is_empty() => return,
                Ok(chunk) if !flag.load(Ordering::SeqCst) => {
                    if c.write_all(&chunk).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return,
            }
        }
    }));
    (peer, silent)
}

#[test]
fn a_peer_that_goes_silent_during_a_client_pause_is_found_within_pause_plus_bound() {
    let _process = util::exclusive();
    let (peer, silent) = silenceable_echo();
    let child = start_child(&peer.endpoint(), "echo", 1);
    detection_after_client_pause("silent peer", &child, "echo", ms(700), || {
        silent.store(true, Ordering::SeqCst)
    });
}

#[test]
#[ignore = "needs redis-server"]
fn a_redis_server_stopped_during_a_client_pause_is_found_within_pause_plus_bound() {
    let _process = util::exclusive();
    let redis = RedisServer::start().expect("this test needs redis-server on PATH");
    let child = start_child(&redis.endpoint(), "redis", 1);
    detection_after_client_pause("stopped redis-server", &child, "redis", ms(700), || {
        redis.stop_signal()
    });
    redis.cont_signal();
}

#[test]
#[ignore = "needs root and network namespaces"]
fn a_peer_blackholed_during_a_client_pause_is_found_within_pause_plus_bound() {
    let _process = util::exclusive();
    let pair = netns::netns_pair();
    let port = 7000;
    // socat echoes the pings back, and the reply predicate knows them.
    let _echo = pair.echo_in_b(port, T);
    let spec = format!("tcp://{}:{port} echo 1", pair.addr_b);
    let child = pair
        .spawn_this_test(&pair.a, CHILD_TEST, &[(CHILD_SPEC, spec)])
        .unwrap_or_else(|e| panic!("cannot start the link in namespace A: {e}"));
    wait_started(&child, 1);
    detection_after_client_pause("blackhole", &child, "echo", ms(700), || {
        pair.blackhole_b_in_a()
            .unwrap_or_else(|e| panic!("cannot add the blackhole route: {e}"))
    });
}

// ---------------------------------------------------------------------------------------
// A slow callback on a shared IO thread
// ---------------------------------------------------------------------------------------

/// Lines, whose decode sleeps `stall` once, at the first frame after `armed` is set.
#[derive(Clone)]
struct StallOnce {
    lines: Lines,
    armed: Arc<AtomicBool>,
    stall: Duration,
}

impl Framing for StallOnce {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.lines.encode(frame, dst)
    }

    fn decode(
        &mut self,
        src: &mut relink::bytes::BytesMut,
    ) -> Result<Option<relink::bytes::Bytes>, DecodeError> {
        let frame = self.lines.decode(src)?;
        if frame.is_some() && self.armed.swap(false, Ordering::SeqCst) {
            std::thread::sleep(self.stall);
        }
        Ok(frame)
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        self.lines.check(frame)
    }

    fn delimits_frames(&self) -> bool {
        true
    }
}

/// Log lines at warn and above, for the slow-callback warning.
struct Warnings(Mutex<Vec<String>>);

impl log::Log for Warnings {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn warnings() -> &'static Warnings {
    static W: Warnings = Warnings(Mutex::new(Vec::new()));
    if log::set_logger(&W).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    &W
}

#[test]
fn a_decode_that_sleeps_1_5_s_on_a_shared_thread_condemns_none_of_its_100_neighbours() {
    let _process = util::exclusive();
    let log = warnings();
    let peer = Peer::start(Behaviour::Echo);
    let pool = IoPool::new(1).expect("a pool of one thread");
    let hb = || {
        Heartbeat::new(ms(100), Ping::Raw(b"PING\n".to_vec()))
            .max_missed(2)
            .reply(Predicate::starts_with("PING"))
    };
    let bound = hb().bound();
    let left = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(AtomicUsize::new(0));
    let neighbours: Vec<Link> = (0..100)
        .map(|_| {
            let link = Link::builder(peer.endpoint())
                .framing(Lines::new())
                .io_pool(&pool)
                .heartbeat(hb())
                .build()
                .expect("build a neighbour");
            let events = link.events().clone();
            let (left, ready) = (left.clone(), ready.clone());
            std::thread::spawn(move || {
                while let Ok(ev) = events.recv() {
                    if let Event::State(t) = ev {
                        if t.to == State::Ready {
                            ready.fetch_add(1, Ordering::SeqCst);
                        } else if t.from == State::Ready && t.to != State::Closed {
                            left.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            });
            link
        })
        .collect();
    let armed = Arc::new(AtomicBool::new(false));
    let stall = ms(1500);
    let slow = Link::builder(peer.endpoint())
        .framing(StallOnce {
            lines: Lines::new(),
            armed: armed.clone(),
            stall,
        })
        .io_pool(&pool)
        .heartbeat(hb())
        .build()
        .expect("build the slow link");
    assert!(
        util::wait_until(T, || ready.load(Ordering::SeqCst) == 100
            && slow.state() == State::Ready),
        "not all links became Ready"
    );
    armed.store(true, Ordering::SeqCst);
    slow.send("hello").expect("send");
    // The echo comes back, the decode sleeps; then the neighbours have two bounds to fail.
    let reported = loop {
        match slow.events().recv_timeout(stall + T) {
            Ok(Event::Error(e @ LinkError::SlowCallback { .. })) => break e,
            Ok(_) => {}
            Err(e) => panic!("no slow-callback error event: {e}"),
        }
    };
    let quiet_until = Instant::now() + 2 * bound + SLACK;
    util::wait_until(quiet_until - Instant::now(), || {
        left.load(Ordering::SeqCst) > 0
    });
    let left = left.load(Ordering::SeqCst);
    eprintln!("slow callback: {left} of 100 neighbours left Ready; event: {reported}");
    assert_eq!(left, 0, "{left} of 100 neighbours left Ready");
    let LinkError::SlowCallback { callback, took } = reported else {
        unreachable!()
    };
    assert_eq!(callback, Callback::Decode);
    // The coarse clock reads to the kernel's tick (a few ms).
    assert!(
        took + ms(20) >= stall,
        "reported {took:?} for a {stall:?} stall"
    );
    let m = slow.metrics();
    assert_eq!(m.slow_callbacks, 1, "{m:?}");
    assert!(
        m.slowest_callback.is_some_and(|d| d + ms(20) >= stall),
        "{m:?}"
    );
    let warned: Vec<String> = log.0.lock().unwrap().clone();
    for w in &warned {
        eprintln!("warning: {w}");
    }
    assert!(
        warned
            .iter()
            .any(|l| l.contains("slow callback") && l.contains("decode")),
        "no warning names the slow callback: {warned:?}"
    );
    assert!(
        warned
            .iter()
            .any(|l| l.contains("IO thread served") && l.contains("decode")),
        "the IO thread did not say why it was late: {warned:?}"
    );
    assert_eq!(slow.state(), State::Ready, "the slow link itself stays up");
    let spared = neighbours
        .iter()
        .filter(|l| l.metrics().verdicts_deferred > 0)
        .count();
    assert_eq!(
        spared, 100,
        "neighbours whose verdict was put off after the stall"
    );
    for link in neighbours {
        link.close(ms(100));
    }
    slow.close(ms(100));
}

#[test]
fn a_resolver_that_takes_300_ms_is_reported_as_slow_and_its_link_still_connects() {
    let peer = Peer::start(Behaviour::Echo);
    let port = peer.port();
    let resolver = move |_: &str, _| {
        std::thread::sleep(ms(300));
        Ok(vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))])
    };
    let link = Link::builder(format!("tcp://slow.test:{port}"))
        .resolver(resolver)
        .build()
        .expect("build");
    let mut slow = None;
    let deadline = Instant::now() + T;
    while link.state() != State::Ready || slow.is_none() {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Error(LinkError::SlowCallback { callback, took })) => {
                slow = Some((callback, took))
            }
            Ok(_) => {}
            Err(e) => panic!("no Ready and slow-callback report: {e} (slow: {slow:?})"),
        }
    }
    let (callback, took) = slow.expect("reported");
    assert_eq!(callback, Callback::Resolver);
    assert!(took + ms(20) >= ms(300), "reported {took:?}");
    let m = link.metrics();
    assert_eq!(m.slow_callbacks, 1, "{m:?}");
    link.close(ms(100));
}
