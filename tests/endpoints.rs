//! Integration tests of name resolution and of links with several endpoints: a name whose
//! answer holds several addresses is tried address by address; a name that does not resolve
//! fails with `Cause::Dns` and growing delays without slowing other links; a link with two
//! servers moves to the other when its server dies; each link draws its own endpoint order.
//!
//! Run with `cargo test --test endpoints`. The tests marked `#[ignore]` need root: each runs
//! itself again in a child process inside new mount and network namespaces (`unshare`, `ip`),
//! where its own `/etc/hosts` and `/etc/resolv.conf` are bound over the system's, so that
//! `localhost` resolves to both `::1` and `127.0.0.1` and the only DNS server is one the test
//! runs. Run them with `cargo test --test endpoints -- --ignored`.

mod util;

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use relink::config::Jitter;
use relink::framing::Lines;
use relink::{Builder, Cause, Event, Link, State};
use util::{free_port, refused_endpoint, wait_for, watched, Behaviour, Peer, Watch};

/// Bound on any single wait for something that should happen at once on loopback.
const T: Duration = Duration::from_secs(5);

/// The name that never resolves (RFC 6761 reserves `.invalid`).
const INVALID: &str = "tcp://does-not-exist.invalid:1";

/// Set in the child process a namespaced test runs in.
const CHILD_ENV: &str = "RELINK_TEST_IN_NAMESPACES";

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Sends `payload` (a line) and waits for the echo. Any other event fails the round trip.
fn round_trip(link: &Link, payload: &str, timeout: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    link.send(payload.as_bytes().to_vec())
        .map_err(|e| format!("send: {e}"))?;
    match link.events().recv_timeout(timeout) {
        Ok(Event::Frame(f)) if f == payload.as_bytes() => Ok(start.elapsed()),
        Ok(other) => Err(format!("expected the echo of {payload:?}, got {other:?}")),
        Err(e) => Err(format!("no echo of {payload:?} within {timeout:?}: {e:?}")),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The endpoint text relink reports for an address (`tcp://[::1]:5`).
fn endpoint_of(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("tcp://{a}"),
        SocketAddr::V6(a) => format!("tcp://[{}]:{}", a.ip(), a.port()),
    }
}

/// A bare echo server on any address (the scripted [`Peer`] listens on 127.0.0.1 only), for
/// a listener on `::1`. Stops and joins its threads on drop, bounded by its short timeouts.
struct EchoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl EchoServer {
    fn start(listener: TcpListener) -> EchoServer {
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let (st, th) = (stop.clone(), threads.clone());
        let acceptor = thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let st = st.clone();
                        let h = thread::spawn(move || echo_conn(s, &st));
                        th.lock().unwrap().push(h);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(2))
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        EchoServer {
            addr,
            stop,
            threads,
            acceptor: Some(acceptor),
        }
    }
}

fn echo_conn(mut s: TcpStream, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
    let _ = s.set_write_timeout(Some(T));
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// A scratch directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "relink-endpoints-{tag}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether this process is the namespaced child of a test.
fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// True in the child that runs `test` in namespaces whose `/etc/hosts` gives localhost both
/// loopback addresses; in the parent, runs that child (see [`rerun_in_namespaces`]) and
/// returns false.
fn in_dual_stack_child(test: &str) -> bool {
    if in_child() {
        return true;
    }
    rerun_in_namespaces(test, &[("/etc/hosts", DUAL_STACK_HOSTS)]);
    false
}

/// Runs the test named `test` again in a child process, inside new mount and network
/// namespaces where loopback is up and each `(path, contents)` of `files` is bound over
/// `path`. Fails plainly with the child's output if the child cannot be set up or its test
/// fails; prints the output otherwise. The child is killed after 40 s.
fn rerun_in_namespaces(test: &str, files: &[(&str, &str)]) {
    let dir = TempDir::new("ns");
    let mut script = String::from("set -e\nip link set lo up\n");
    let mut args: Vec<String> = Vec::new();
    for (i, (target, contents)) in files.iter().enumerate() {
        let src = dir.0.join(format!("file{i}"));
        std::fs::write(&src, contents).unwrap();
        script.push_str(&format!("mount --bind \"${}\" {target}\n", i + 1));
        args.push(src.display().to_string());
    }
    script.push_str(&format!("shift {}\nexec \"$@\"\n", files.len()));
    let exe = std::env::current_exe().unwrap();
    let out_path = dir.0.join("output");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new("unshare")
        .args(["--mount", "--net", "--", "sh", "-c", &script, "sh"])
        .args(&args)
        .arg(&exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("{test}: cannot run `unshare` (util-linux): {e}"));
    let status = wait_for(Duration::from_secs(40), || child.try_wait().unwrap());
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    println!("---- child output ({test}) ----\n{output}---- end of child output ----");
    match status {
        Some(s) if s.success() && output.contains("1 passed") => {}
        Some(s) => panic!(
            "{test} failed in its namespaces ({s}); it needs root, `unshare` and `ip`; \
             output above"
        ),
        None => panic!("{test} did not finish within 40 s in its namespaces; output above"),
    }
}

/// `/etc/hosts` for the namespaced tests: `localhost` is both loopback addresses.
const DUAL_STACK_HOSTS: &str = "::1 localhost\n127.0.0.1 localhost\n";

/// The addresses `localhost` resolves to here, in the resolver's order.
fn localhost_addrs(port: u16) -> Vec<SocketAddr> {
    ("localhost", port)
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default()
}

/// In the namespaced child: checks that IPv6 loopback works and `localhost` resolves to both
/// loopback addresses, failing plainly otherwise. Returns the answer for `port`.
/// In the child that runs `test` (see [`in_dual_stack_child`]), the dual-stack answer for
/// `localhost` on `port` ([`require_dual_stack_localhost`]); None in the parent, once the
/// child has run.
fn dual_stack_answer(test: &str, port: u16) -> Option<Vec<SocketAddr>> {
    in_dual_stack_child(test).then(|| require_dual_stack_localhost(port))
}

fn require_dual_stack_localhost(port: u16) -> Vec<SocketAddr> {
    if let Err(e) = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)) {
        panic!("IPv6 loopback is unavailable: binding [::1]:0 failed: {e}");
    }
    let addrs = localhost_addrs(port);
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    assert!(
        addrs.contains(&v4) && addrs.contains(&v6),
        "localhost must resolve to 127.0.0.1 and ::1 for this test; it resolves to {addrs:?}"
    );
    addrs
}

/// A builder for `tcp://localhost:PORT` where each failed address costs one short delay.
fn localhost_builder(port: u16) -> Builder {
    Link::builder(format!("tcp://localhost:{port}"))
        .framing(Lines::new())
        .reconnect(|r| {
            r.native_retries = 0;
            r.backoff_base = Duration::from_millis(20);
            r.backoff_max = Duration::from_millis(200);
        })
}

/// Dials `tcp://localhost:PORT` until Ready on `listening` (the only address with a listener),
/// then echoes frames. Asserts the addresses dialled follow the resolver's answer, in order,
/// up to `listening`, Ready within 2 s.
fn reach_localhost_peer(port: u16, answer: &[SocketAddr], listening: SocketAddr) {
    let start = Instant::now();
    let link = localhost_builder(port).build().unwrap();
    let mut w = Watch::new(&link);
    let (_, ready) = w
        .try_until(T, |t| t.to == State::Ready)
        .unwrap_or_else(|| panic!("no Ready within {T:?} for {listening}; seen {}", w.trace()));
    let seen = w.since(0);
    let took = start.elapsed();
    assert_eq!(ready.endpoint.as_deref(), Some(&*endpoint_of(listening)));
    assert_eq!(link.metrics().peer_addr, Some(listening));
    // A dial names the name while it resolves, then the address in use: the address each
    // attempt dialled shows in the transition that ends it (Backoff when refused, or Ready).
    // They are the answer's addresses (IP literals, never the name), in the answer's order.
    let dialled: Vec<String> = seen
        .iter()
        .filter(|t| matches!(t.to, State::Backoff | State::Ready))
        .filter_map(|t| t.endpoint.clone())
        .collect();
    let wanted: Vec<String> = answer
        .iter()
        .take_while(|a| **a != listening)
        .chain(std::iter::once(&listening))
        .map(|a| endpoint_of(*a))
        .collect();
    assert_eq!(
        dialled, wanted,
        "addresses dialled (transitions {seen:?}) are not the answer's, in order"
    );
    for t in seen.iter().filter(|t| t.to == State::Backoff) {
        assert_eq!(t.cause, Cause::Refused, "a failed address: {t:?}");
    }
    for i in 0..5 {
        round_trip(&link, &format!("echo-{i}"), T).unwrap();
    }
    println!(
        "localhost answer {answer:?}: Ready on {listening} after {:.1} ms, dialled {dialled:?}",
        ms(took)
    );
    link.close(T);
    assert!(took < Duration::from_secs(2), "Ready after {took:?}");
}

// ---------------------------------------------------------------------------------------
// 1. A name with several addresses
// ---------------------------------------------------------------------------------------

#[test]
fn a_host_name_is_dialled_by_the_address_it_resolves_to() {
    let peer = Peer::start(Behaviour::Echo);
    let answer = localhost_addrs(peer.port());
    assert!(
        answer.contains(&peer.addr()),
        "localhost does not resolve to 127.0.0.1 here: {answer:?}"
    );
    reach_localhost_peer(peer.port(), &answer, peer.addr());
}

#[test]
#[ignore = "needs root and network namespaces"]
fn localhost_reaches_a_peer_listening_on_ipv6_loopback_only() {
    let port = free_port(); // free on 127.0.0.1: the IPv4 address is refused
    let Some(answer) = dual_stack_answer(
        "localhost_reaches_a_peer_listening_on_ipv6_loopback_only",
        port,
    ) else {
        return;
    };
    let listener = TcpListener::bind((Ipv6Addr::LOCALHOST, port))
        .unwrap_or_else(|e| panic!("bind [::1]:{port}: {e}"));
    let server = EchoServer::start(listener);
    // At most one refused address before it, each costing one delay of at most 20 ms.
    reach_localhost_peer(port, &answer, server.addr);
}

#[test]
#[ignore = "needs root and network namespaces"]
fn localhost_reaches_a_peer_listening_on_ipv4_loopback_only() {
    let peer = Peer::start(Behaviour::Echo);
    let Some(answer) = dual_stack_answer(
        "localhost_reaches_a_peer_listening_on_ipv4_loopback_only",
        peer.port(),
    ) else {
        return;
    };
    reach_localhost_peer(peer.port(), &answer, peer.addr());
}

// ---------------------------------------------------------------------------------------
// 2. A name that does not resolve
// ---------------------------------------------------------------------------------------

/// How long this machine's resolver takes to fail `does-not-exist.invalid`.
fn time_invalid_lookup() -> Duration {
    let start = Instant::now();
    let r = ("does-not-exist.invalid", 1).to_socket_addrs();
    let took = start.elapsed();
    assert!(
        r.is_err(),
        "does-not-exist.invalid resolved: {:?}",
        r.map(|a| a.count())
    );
    println!(
        "getaddrinfo(does-not-exist.invalid) failed in {:.1} ms here",
        ms(took)
    );
    took
}

/// A resolver that answers every name as the system's does for `.invalid`, without sending a
/// query off this machine (the real getaddrinfo path is tested in a network namespace with a
/// local DNS server, below).
fn nxdomain(
) -> impl Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync + 'static {
    |host: &str, _| Err(format!("{host}: Name or service not known"))
}

#[test]
fn an_unresolvable_name_backs_off_with_cause_dns_and_growing_delays() {
    let lookup = Duration::ZERO;
    let link = Link::builder(INVALID)
        .resolver(nxdomain())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(400);
            r.jitter = Jitter::None;
        })
        .socket(|s| s.connect_timeout = Duration::from_secs(10))
        .build()
        .unwrap();
    let expected_ms = [50, 100, 200, 400, 400];
    let mut w = Watch::new(&link);
    let mut delays = Vec::new();
    for (i, d) in expected_ms.iter().enumerate() {
        let bound = lookup + Duration::from_millis(*d) + T;
        let (_, t) = w
            .try_until(bound, |t| t.to == State::Backoff)
            .unwrap_or_else(|| panic!("backoff {} did not come; seen {}", i + 1, w.trace()));
        assert_eq!(t.cause, Cause::Dns, "{t:?}");
        assert_eq!(t.attempt, i as u32 + 1, "{t:?}");
        assert_eq!(
            t.endpoint.as_deref(),
            Some("tcp://does-not-exist.invalid:1")
        );
        delays.push(
            t.next_retry
                .expect("a Backoff transition carries its delay"),
        );
    }
    let want: Vec<Duration> = expected_ms
        .iter()
        .map(|d| Duration::from_millis(*d))
        .collect();
    assert_eq!(delays, want, "delays after each DNS failure");
    let seen = w.since(0);
    assert!(
        seen.iter()
            .all(|t| matches!(t.to, State::Connecting | State::Backoff)),
        "the link went past Connecting: {seen:?}"
    );
    let m = link.close(T);
    assert_eq!(m.connects, 0);
}

/// Round trips on a lines link to an echo peer for `window` while the link `failing` builds
/// (with a short backoff) keeps failing to resolve its name, and
/// checks that the failing link did not slow them: at least 20, none slower than 500 ms.
/// Returns (round trips, slowest round trip, DNS failures of `failing` in the window).
fn round_trips_beside_a_failing_link(
    failing: Builder,
    window: Duration,
) -> (usize, Duration, usize) {
    let peer = Peer::start(Behaviour::Echo);
    let echo = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .build()
        .unwrap();
    Watch::new(&echo).until_state(State::Ready, T);
    let failing = failing
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(20);
            r.backoff_max = Duration::from_millis(100);
        })
        .socket(|s| s.connect_timeout = Duration::from_secs(10))
        .build()
        .unwrap();
    let end = Instant::now() + window;
    let (mut n, mut slowest, mut dns_failures) = (0, Duration::ZERO, 0);
    while Instant::now() < end {
        let rtt = round_trip(&echo, &format!("rt-{n}"), T).unwrap_or_else(|e| {
            panic!("round trip {n} beside the failing link: {e}");
        });
        slowest = slowest.max(rtt);
        n += 1;
        while let Ok(ev) = failing.events().try_recv() {
            if let Event::State(t) = ev {
                assert_ne!(t.to, State::Ready, "{t:?}");
                if t.to == State::Backoff {
                    assert_eq!(t.cause, Cause::Dns, "{t:?}");
                    dns_failures += 1;
                }
            }
        }
    }
    assert!(n >= 20, "only {n} round trips in {window:?}");
    assert!(slowest < Duration::from_millis(500), "slowest {slowest:?}");
    failing.close(T);
    echo.close(T);
    (n, slowest, dns_failures)
}

#[test]
fn a_link_failing_to_resolve_its_name_does_not_slow_another_link() {
    let lookup = Duration::ZERO;
    let (n, slowest, dns_failures) = round_trips_beside_a_failing_link(
        Link::builder(INVALID).resolver(nxdomain()),
        Duration::from_secs(3),
    );
    println!(
        "{n} round trips in 3 s, slowest {:.1} ms, while the other link failed DNS \
         {dns_failures} times",
        ms(slowest),
    );
    let _ = lookup;
    assert!(dns_failures >= 5, "only {dns_failures} DNS failures in 3 s");
}

#[test]
fn a_resolver_that_takes_two_seconds_delays_only_the_link_that_asked() {
    let slow = |host: &str, _| {
        std::thread::sleep(Duration::from_secs(2));
        Err(format!("{host}: timed out"))
    };
    let (n, slowest, dns_failures) = round_trips_beside_a_failing_link(
        Link::builder(INVALID).resolver(slow),
        Duration::from_secs(3),
    );
    println!(
        "{n} round trips in 3 s beside a 2 s resolver, slowest {:.1} ms, {dns_failures} DNS failures",
        ms(slowest)
    );
    assert!(
        dns_failures >= 1,
        "the slow answer came back as a dns failure"
    );
}

#[test]
#[ignore = "needs root and network namespaces"]
fn a_resolver_that_never_answers_delays_only_the_link_that_asked() {
    if !in_child() {
        return rerun_in_namespaces(
            "a_resolver_that_never_answers_delays_only_the_link_that_asked",
            &[
                ("/etc/hosts", DUAL_STACK_HOSTS),
                (
                    "/etc/resolv.conf",
                    "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n",
                ),
            ],
        );
    }
    // The only DNS server: reads nothing, answers nothing. Every lookup waits the resolver's
    // full timeout (2 s), as with an unreachable server.
    let _dns = UdpSocket::bind((Ipv4Addr::LOCALHOST, 53)).expect("bind 127.0.0.1:53");
    let lookup = time_invalid_lookup();
    assert!(
        lookup >= Duration::from_secs(1),
        "the lookup did not wait for the silent server: {lookup:?}"
    );
    let (n, slowest, dns_failures) =
        round_trips_beside_a_failing_link(Link::builder(INVALID), Duration::from_secs(5));
    println!(
        "{n} round trips in 5 s, slowest {:.1} ms, while the other link's lookups each took \
         {:.0} ms ({dns_failures} failed)",
        ms(slowest),
        ms(lookup)
    );
    assert!(dns_failures >= 1, "no DNS failure in 5 s");
}

// ---------------------------------------------------------------------------------------
// 3. Two servers
// ---------------------------------------------------------------------------------------

#[test]
fn a_link_with_two_endpoints_moves_to_the_other_when_its_server_dies_and_back_when_one_returns() {
    let a = Peer::start(Behaviour::Echo);
    let b = Peer::start(Behaviour::Echo);
    let (link, mut w) = watched(
        Link::builder(a.endpoint())
            .endpoint(b.endpoint())
            .framing(Lines::new())
            .reconnect(|r| {
                r.native_retries = 0;
                r.min_stable = Duration::from_millis(50);
                r.backoff_base = Duration::from_millis(100);
                r.backoff_max = Duration::from_millis(400);
            }),
    );
    let first = w.until_state(State::Ready, T);
    round_trip(&link, "before", T).unwrap();
    let first_ep = first.endpoint.clone().unwrap();
    assert!(
        first_ep == a.endpoint() || first_ep == b.endpoint(),
        "Ready on {first_ep}, neither {} nor {}",
        a.endpoint(),
        b.endpoint()
    );
    let (dead, alive) = if first_ep == a.endpoint() {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(link.metrics().peer_addr, Some(dead.addr()));

    // The server in use dies: the next attempt goes to the other one.
    let killed_at = Instant::now();
    dead.stop();
    let lost = w.until_state(State::Backoff, T);
    assert_eq!(lost.cause, Cause::PeerClosed, "{lost:?}");
    let delay = lost.next_retry.unwrap();
    let moved = w.until_state(State::Ready, T);
    let took = killed_at.elapsed();
    println!(
        "moved from {first_ep} to {} in {:.1} ms (backoff delay drawn: {:.1} ms)",
        moved.endpoint.as_deref().unwrap_or("-"),
        ms(took),
        ms(delay)
    );
    assert_eq!(moved.endpoint, Some(alive.endpoint()));
    assert!(
        took <= delay + Duration::from_secs(1),
        "moving took {took:?}, one delay is {delay:?}"
    );
    assert_eq!(link.metrics().peer_addr, Some(alive.addr()));
    round_trip(&link, "after-move", T).unwrap();

    // Both dead: the link keeps backing off.
    let port = alive.port();
    alive.stop();
    let mark = w.transitions.len();
    let mut backoffs = 0;
    while backoffs < 3 {
        let t = w.until_state(State::Backoff, T);
        assert!(
            matches!(t.cause, Cause::PeerClosed | Cause::Refused),
            "{t:?}"
        );
        backoffs += 1;
    }
    let seen = w.since(0);
    assert!(
        seen[mark..].iter().all(|t| t.to != State::Ready),
        "Ready with both servers down: {:?}",
        &seen[mark..]
    );

    // One comes back on its port: Ready on it.
    let back = Peer::start_on(port, Behaviour::Echo).expect("restart on the same port");
    let again = w.until_state(State::Ready, T);
    assert_eq!(again.endpoint, Some(back.endpoint()));
    round_trip(&link, "after-return", T).unwrap();
    link.close(T);
}

// ---------------------------------------------------------------------------------------
// 4. Endpoint order
// ---------------------------------------------------------------------------------------

/// The first `n` endpoints a link to [a, b] dials (both refused), optionally seeded.
fn dial_order(a: &str, b: &str, seed: Option<u64>, n: usize) -> Vec<String> {
    let mut builder = Link::builder(a).endpoint(b).reconnect(|r| {
        r.native_retries = 0;
        r.backoff_base = Duration::from_millis(10);
        r.backoff_max = Duration::from_millis(20);
    });
    if let Some(s) = seed {
        builder = builder.reconnect(|r| r.rng_seed = Some(s));
    }
    let link = builder.build().unwrap();
    let mut w = Watch::new(&link);
    let mut order = Vec::new();
    while order.len() < n {
        let (_, t) = w
            .try_until(T, |t| t.to == State::Connecting)
            .unwrap_or_else(|| panic!("dial {} did not come; seen {}", order.len() + 1, w.trace()));
        order.push(t.endpoint.expect("a dial names its endpoint"));
    }
    link.close(Duration::from_millis(200));
    order
}

#[test]
fn each_link_draws_its_own_first_endpoint() {
    let (a, b) = (refused_endpoint(), refused_endpoint());
    let mut firsts: HashMap<String, usize> = HashMap::new();
    for _ in 0..20 {
        let order = dial_order(&a, &b, None, 1);
        *firsts.entry(order[0].clone()).or_default() += 1;
    }
    println!("first endpoint over 20 links: {firsts:?}");
    let keys: HashSet<&String> = firsts.keys().collect();
    assert_eq!(
        keys,
        HashSet::from([&a, &b]),
        "20 links all dialled one endpoint first (chance 2 in a million if drawn fairly)"
    );
}

#[test]
fn a_fixed_rng_seed_gives_every_link_the_same_endpoint_order_rotating_per_attempt() {
    let (a, b) = (refused_endpoint(), refused_endpoint());
    let orders: Vec<Vec<String>> = (0..5).map(|_| dial_order(&a, &b, Some(7), 4)).collect();
    for o in &orders {
        assert_eq!(
            o, &orders[0],
            "links with seed 7 dialled in different orders"
        );
    }
    let o = &orders[0];
    assert_ne!(o[0], o[1], "the second attempt did not move on: {o:?}");
    assert_eq!((&o[0], &o[1]), (&o[2], &o[3]), "not a rotation: {o:?}");
    let both: HashSet<&String> = o.iter().collect();
    assert_eq!(both, HashSet::from([&a, &b]));
}
