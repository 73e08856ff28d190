//! Idle cost: the CPU time 100 links use when there is nothing to send.
//!
//! Run with `cargo bench --bench idle` (two 10 s windows) or
//! `cargo bench --bench idle -- --quick` (two 3 s windows).
//!
//! Two measurements, each over a window of wall-clock time, of this process's CPU time (user +
//! system, `getrusage(RUSAGE_SELF)`):
//! - `ready`: 100 links in Ready, each with a 1 s heartbeat (`Ping::Frame(b"ping")`, replies
//!   recognised by a predicate) to a peer that echoes every byte.
//! - `backoff`: 100 links to a port that refuses, with a backoff of 1 s .. 2 s, so they keep
//!   dialling and waiting.
//!
//! The echo peer runs in a child process (this same binary, started again with
//! `RELINK_BENCH_IDLE_PEER` set), so the parent's CPU time is relink's alone: its IO threads,
//! libzmq's IO thread, and the main thread sleeping through the window. The last lines are
//! `idle state=ready links=100 cpu_ms=<x>` and `idle state=backoff links=100 cpu_ms=<x>`,
//! the CPU time over the whole window.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use relink::{Codec, Event, Heartbeat, Link, Ping, Predicate, State};

/// Links per measurement.
const LINKS: usize = 100;
/// Set in the child process that plays the echo peer.
const PEER_ENV: &str = "RELINK_BENCH_IDLE_PEER";
/// Longest wait for the links to reach the state measured.
const SETTLE_BOUND: Duration = Duration::from_secs(30);

/// The CPU time (user + system) this process has used so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The child process: an echo server for every connection, until its stdin closes.
fn run_peer() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the echo peer");
    let port = listener.local_addr().expect("peer address").port();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            });
        }
    });
    println!("port {port}");
    io::stdout().flush().expect("flush the port");
    // The parent closes our stdin when it is done (or when it dies).
    let mut sink = Vec::new();
    let _ = io::stdin().read_to_end(&mut sink);
    std::process::exit(0);
}

/// The echo peer as a child process.
struct PeerProcess {
    child: Child,
    port: u16,
}

impl PeerProcess {
    fn start() -> PeerProcess {
        let exe = std::env::current_exe().expect("path of this bench");
        let mut child = Command::new(exe)
            .env(PEER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the peer process");
        let stdout = child.stdout.take().expect("peer stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the peer's port");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("bad line from the peer: {line:?}"));
        PeerProcess { child, port }
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded) until every link is in `state`, taking their events meanwhile.
fn wait_all(links: &[Link], state: State) {
    let deadline = Instant::now() + SETTLE_BOUND;
    for (i, link) in links.iter().enumerate() {
        while link.state() != state {
            match link.events().recv_deadline(deadline) {
                Ok(Event::State(t)) if t.to == state => break,
                Ok(_) => {}
                Err(e) => panic!(
                    "link {i} did not reach {state} within {SETTLE_BOUND:?} (it is {}): {e}",
                    link.state()
                ),
            }
        }
    }
}

/// This process's CPU time over a window of wall-clock time.
fn measure(window: Duration) -> Duration {
    let before = cpu_time();
    // The main thread sleeps through the window: what is measured is the links' own work.
    thread::sleep(window);
    cpu_time() - before
}

fn close_all(links: Vec<Link>) {
    thread::scope(|s| {
        for chunk in links.chunks(10) {
            s.spawn(move || {
                for link in chunk {
                    link.close(Duration::from_secs(1));
                }
            });
        }
    });
}

fn report(state: &str, window: Duration, cpu: Duration, extra: &str) -> String {
    let ms = cpu.as_secs_f64() * 1e3;
    println!(
        "{state:<8} {LINKS} links, window {:.1} s: cpu {ms:.1} ms ({:.2} ms per s, {:.3} ms per \
         link per s){extra}",
        window.as_secs_f64(),
        ms / window.as_secs_f64(),
        ms / window.as_secs_f64() / LINKS as f64
    );
    format!("idle state={state} links={LINKS} cpu_ms={ms:.1}")
}

fn main() {
    if std::env::var_os(PEER_ENV).is_some() {
        run_peer();
        return;
    }
    // `cargo bench` adds `--bench`; every argument but `--quick` is ignored.
    let quick = std::env::args().any(|a| a == "--quick");
    let window = Duration::from_secs(if quick { 3 } else { 10 });
    println!(
        "idle: {LINKS} links, {:.0} s windows{}",
        window.as_secs_f64(),
        if quick { " (quick)" } else { "" }
    );
    let mut summary = Vec::new();

    // Ready, with heartbeats answered by the peer process.
    let peer = PeerProcess::start();
    let endpoint = format!("tcp://127.0.0.1:{}", peer.port);
    let links: Vec<Link> = (0..LINKS)
        .map(|_| {
            Link::builder(&endpoint)
                .codec(Codec::length_prefixed())
                .heartbeat(
                    Heartbeat::new(Duration::from_secs(1), Ping::Frame(b"ping".to_vec()))
                        .reply(Predicate::starts_with(&b"ping"[..])),
                )
                .build()
                .expect("build a link")
        })
        .collect();
    wait_all(&links, State::Ready);
    let before: Vec<_> = links.iter().map(Link::metrics).collect();
    let cpu = measure(window);
    let after: Vec<_> = links.iter().map(Link::metrics).collect();
    let not_ready = links.iter().filter(|l| l.state() != State::Ready).count();
    let sent: u64 = after.iter().map(|m| m.heartbeats_sent).sum::<u64>()
        - before.iter().map(|m| m.heartbeats_sent).sum::<u64>();
    let missed: u64 = after.iter().map(|m| m.heartbeats_missed).sum::<u64>()
        - before.iter().map(|m| m.heartbeats_missed).sum::<u64>();
    summary.push(report(
        "ready",
        window,
        cpu,
        &format!("; heartbeats sent {sent}, missed {missed}; not Ready at the end: {not_ready}"),
    ));
    close_all(links);
    peer.stop();

    // Backoff: a port that refuses (bound, then released).
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a port to release");
        l.local_addr().expect("address").port()
    };
    let endpoint = format!("tcp://127.0.0.1:{port}");
    let links: Vec<Link> = (0..LINKS)
        .map(|_| {
            Link::builder(&endpoint)
                .codec(Codec::length_prefixed())
                .backoff(Duration::from_secs(1), Duration::from_secs(2))
                .build()
                .expect("build a link")
        })
        .collect();
    wait_all(&links, State::Backoff);
    let before: u64 = links.iter().map(|l| l.metrics().attempt as u64).sum();
    let cpu = measure(window);
    let after: u64 = links.iter().map(|l| l.metrics().attempt as u64).sum();
    summary.push(report(
        "backoff",
        window,
        cpu,
        &format!(
            "; dials during the window: {}",
            after.saturating_sub(before)
        ),
    ));
    close_all(links);

    println!();
    for line in summary {
        println!("{line}");
    }
}
