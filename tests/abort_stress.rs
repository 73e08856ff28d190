//! A link never takes the process down: libzmq's `_input_stopped` abort (issue #3937,
//! docs/design.md "libzmq's asserts within relink's reach") cannot be reached through
//! relink's public API, under the load that reaches it with libzmq's own redial.
//!
//! Each trial runs in a child process (this test binary again, running the ignored helper
//! below), so that an abort (SIGABRT) is counted instead of ending the test. The child holds
//! links on one `IoPool` whose readers pause and resume (the link falls behind and stops
//! reading), a peer that writes about one libzmq pipe's worth (RCVHWM 64 chunks of 8 KiB) to
//! each connection, at once or after a silence, then closes it (a FIN, or a reset), fast redials
//! (`reconnect_ivl` 1 ms, backoff 1 to 20 ms) and two threads burning the CPU beside them. A
//! cycle is one connection the peer closed. The child prints a `cycle` line per cycle and,
//! when its time is up, what the peer wrote and what the links delivered or reported.
//!
//! `cargo test --test abort_stress -- --ignored --nocapture` runs the two tests side by side
//! for 30 s each (`.ci/run` does); `RELINK_ABORT_STRESS_SECS=300` gives them 150 s each. Each
//! prints `abort_stress libzmq=... resets=... cycles=... aborts=... per_1000=...
//! first_abort=... written=... accounted=... delivered=...`. Beside them,
//! `a_refused_dial_and_a_drop_come_back_to_ready_within_a_bound` prints the time from a refused
//! dial, and from the peer's close of a Ready connection, to Ready again (`dial_to_ready ...`).
//!
//! The same binary runs against another libzmq 4.3.x through `LD_LIBRARY_PATH` (the soname
//! is the same); with `RELINK_EXPECT_LIBZMQ=4.3.2` set, every test first checks that the
//! libzmq in use is that one (`.ci/run` runs them so against libzmq 4.3.2 built from source).

mod util;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;
use relink::{Event, IoPool, Link, State};
use util::logs::Logs;
use util::peers::{free_port, refused_endpoint, set_linger_zero, Behaviour, Peer};
use util::proc::run_self;
use util::watch::Watch;

/// Env var of the child: `<seconds> <links> <resets: 0|1>`; the helper does nothing without it.
const CHILD: &str = "RELINK_ABORT_STRESS_CHILD";
/// Name of the helper test, for `--exact`.
const CHILD_TEST: &str = "abort_stress_child_runs_cycles_until_its_time_is_up";
/// Seconds of the whole run, unless `RELINK_ABORT_STRESS_SECS` says otherwise.
const SECS: u64 = 60;
/// Seconds of one child (a new child starts after an abort, or when one ends).
const CHILD_SECS: u64 = 15;
/// libzmq's batch: its engine reads at most this much into one message.
const CHUNK: usize = 8192;
/// Room after a child's time for it to settle and report.
const SETTLE: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What a run of children saw.
#[derive(Debug, Default)]
struct Tally {
    cycles: u64,
    aborts: u64,
    /// The cycle (counted from the run's start) that first aborted.
    first_abort: Option<u64>,
    /// Bytes the peer wrote to connections it closed with a FIN, in children that ended.
    written: u64,
    /// Bytes the links delivered, or reported as unread or discarded, in those children.
    accounted: u64,
    /// Of those, the bytes delivered to the application (the readers' frames).
    delivered: u64,
}

/// Runs children for `secs` seconds in all; `resets` mixes resets among the peer's FINs.
fn run(secs: u64, resets: bool) -> Tally {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now()).as_secs();
        let child_secs = left.clamp(1, CHILD_SECS);
        let spec = format!("{child_secs} 4 {}", u8::from(resets));
        let (mut child, lines) = run_self(CHILD_TEST, &[(CHILD, spec)]);
        let bound = Instant::now() + Duration::from_secs(child_secs) + SETTLE;
        loop {
            match lines.recv_deadline(bound) {
                Ok(line) if line.starts_with("cycle") => tally.cycles += 1,
                Ok(line) if line.starts_with("end ") => {
                    let field = |name: &str| -> u64 {
                        line.split_whitespace()
                            .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                            .expect("a field of the end line")
                    };
                    tally.written += field("written");
                    tally.accounted += field("accounted");
                    tally.delivered += field("delivered");
                }
                Ok(_) => {}
                // The child's stdout closed (it ended or aborted), or it overran its bound.
                Err(_) => break,
            }
        }
        let _ = child.kill();
        let status = child.wait().expect("wait for the child");
        if status.signal() == Some(libc::SIGABRT) {
            // The cycle that aborted counts among the cycles.
            tally.cycles += 1;
            tally.aborts += 1;
            tally.first_abort.get_or_insert(tally.cycles);
        }
    }
    let per_1000 = tally.aborts as f64 * 1000.0 / tally.cycles.max(1) as f64;
    println!(
        "abort_stress libzmq={} resets={resets} cycles={} aborts={} per_1000={per_1000:.1} \
         first_abort={} written={} accounted={} delivered={}",
        libzmq(),
        tally.cycles,
        tally.aborts,
        tally.first_abort.map_or("-".into(), |c| c.to_string()),
        tally.written,
        tally.accounted,
        tally.delivered
    );
    tally
}

fn secs() -> u64 {
    std::env::var("RELINK_ABORT_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SECS)
}

/// The libzmq in use, as `4.3.2`; checked against `RELINK_EXPECT_LIBZMQ` when that is set.
/// Also installs the log capture, so that the guard's line is kept whichever test says it.
fn libzmq() -> String {
    Logs::capture();
    let (a, b, c) = zmq::version();
    let version = format!("{a}.{b}.{c}");
    if let Ok(want) = std::env::var("RELINK_EXPECT_LIBZMQ") {
        assert_eq!(version, want, "the libzmq in use is not the one expected");
    }
    version
}

/// libzmq 4.3.3 and newer have ZMQ_RECONNECT_STOP, relink's guard; older ones the fallback.
fn has_reconnect_stop() -> bool {
    zmq::version() >= (4, 3, 3)
}

#[test]
fn the_guard_in_force_is_said_once_at_info_or_warn() {
    let version = libzmq();
    let links: Vec<Link> = (0..2)
        .map(|_| {
            Link::builder(refused_endpoint())
                .build()
                .expect("build a link")
        })
        .collect();
    let (level, needle) = if has_reconnect_stop() {
        (
            "INFO",
            format!("libzmq {version}: ZMQ_RECONNECT_STOP set, libzmq does not redial"),
        )
    } else {
        (
            "WARN",
            format!("libzmq {version} has no ZMQ_RECONNECT_STOP"),
        )
    };
    let lines = Logs::capture().matching("ZMQ_RECONNECT_STOP");
    assert_eq!(lines.len(), 1, "said once: {lines:?}");
    assert!(
        lines[0].starts_with(level) && lines[0].contains(&needle),
        "{level} {needle:?}: {lines:?}"
    );
    for link in links {
        link.close(ms(100));
    }
}

#[test]
fn immediate_is_refused_where_libzmq_would_drop_a_closed_connections_unread_bytes() {
    libzmq();
    let built = Link::builder(refused_endpoint())
        .socket(|s| s.immediate = true)
        .build();
    match built {
        Ok(link) => {
            assert!(has_reconnect_stop(), "immediate accepted without the guard");
            link.close(ms(100));
        }
        Err(e) => {
            assert!(
                !has_reconnect_stop(),
                "immediate refused with the guard: {e}"
            );
            let text = e.to_string();
            assert!(text.contains("needs libzmq 4.3.3 or newer"), "{text}");
        }
    }
}

/// Rounds of each dial-to-Ready measurement.
const ROUNDS: usize = 20;
/// Bound on one way back to Ready.
const READY_BOUND: Duration = Duration::from_secs(5);

/// Median and largest of `d`, in milliseconds.
fn summary(d: &mut [Duration]) -> String {
    d.sort();
    format!(
        "median_ms={:.0} max_ms={:.0}",
        d[d.len() / 2].as_secs_f64() * 1e3,
        d[d.len() - 1].as_secs_f64() * 1e3
    )
}

#[test]
#[ignore = "stress: run by .ci/run"]
fn a_refused_dial_and_a_drop_come_back_to_ready_within_a_bound() {
    let version = libzmq();
    // A refused dial, then the peer listening: from the refusal (libzmq's redial or relink's
    // own failure counted) to Ready, with the link's defaults.
    let mut refused = Vec::new();
    for _ in 0..ROUNDS {
        let port = free_port();
        let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
            .build()
            .expect("build a link");
        let mut watch = Watch::new(&link);
        let seen = util::wait_for(READY_BOUND, || {
            let m = link.metrics();
            (m.native_redials + m.consecutive_failures > 0).then(Instant::now)
        });
        let refused_at = seen.expect("the first dial refused");
        let peer = Peer::start_on(port, Behaviour::Sink).expect("listen on the refused port");
        watch.until_state(State::Ready, READY_BOUND);
        refused.push(refused_at.elapsed());
        link.close(ms(100));
        peer.stop();
    }
    // A Ready connection the peer closes: from its close to Ready again.
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(peer.endpoint())
        .reconnect(|r| r.min_stable = Duration::ZERO)
        .build()
        .expect("build a link");
    let mut watch = Watch::new(&link);
    watch.until_state(State::Ready, READY_BOUND);
    let mut dropped = Vec::new();
    for round in 1..=ROUNDS {
        // The peer holds the connection (Ready came at the TCP connect): close it.
        assert!(peer.wait_accepts(round, READY_BOUND), "the peer accepted");
        let closed_at = Instant::now();
        peer.close_connections();
        watch.until(READY_BOUND, |t| t.to != State::Ready);
        watch.until_state(State::Ready, READY_BOUND);
        dropped.push(closed_at.elapsed());
    }
    link.close(ms(100));
    peer.stop();
    println!(
        "dial_to_ready libzmq={version} after=refused rounds={ROUNDS} {}",
        summary(&mut refused)
    );
    println!(
        "dial_to_ready libzmq={version} after=drop rounds={ROUNDS} {}",
        summary(&mut dropped)
    );
}

#[test]
#[ignore = "stress: run by .ci/run"]
fn paused_readers_floods_closes_and_fast_redials_never_abort_the_process() {
    let tally = run(secs() / 2, false);
    assert!(tally.cycles > 0, "no cycle ran: {tally:?}");
    assert_eq!(tally.aborts, 0, "libzmq aborted the process: {tally:?}");
    // Every byte the peer wrote before its FIN reached the application or was reported:
    // no connection libzmq redialled on its own carried bytes past relink.
    assert_eq!(tally.written, tally.accounted, "bytes lost: {tally:?}");
}

#[test]
#[ignore = "stress: run by .ci/run"]
fn paused_readers_floods_resets_and_fast_redials_never_abort_the_process() {
    let tally = run(secs() / 2, true);
    assert!(tally.cycles > 0, "no cycle ran: {tally:?}");
    assert_eq!(tally.aborts, 0, "libzmq aborted the process: {tally:?}");
}

// ---------------------------------------------------------------------------------------
// The child
// ---------------------------------------------------------------------------------------

/// What the peer counts.
#[derive(Default)]
struct PeerCounts {
    /// Bytes written to connections closed with a FIN.
    written: AtomicU64,
    /// Connection handlers still running.
    running: AtomicU64,
}

/// One connection: a silence (half the time), about one pipe's worth of bytes, then a FIN
/// (or, with `resets`, a reset a third of the time). Returns when it closed.
fn serve(
    stream: TcpStream,
    resets: bool,
    counts: &PeerCounts,
    closed: &crossbeam_channel::Sender<()>,
) {
    let mut rng = rand::rng();
    if rng.random_bool(0.5) {
        thread::sleep(ms(rng.random_range(1..80)));
    }
    // Around RCVHWM chunks: with the connect notification, often exactly a full pipe.
    let chunks = rng.random_range(60..=66);
    let extra = if rng.random_bool(0.25) {
        rng.random_range(1..CHUNK)
    } else {
        0
    };
    let burst = vec![b'x'; chunks * CHUNK + extra];
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let mut stream = stream;
    let ok = stream.write_all(&burst).is_ok();
    if resets && rng.random_bool(1.0 / 3.0) {
        // A reset instead of a FIN.
        set_linger_zero(&stream);
        drop(stream);
    } else {
        drop(stream);
        if ok {
            counts
                .written
                .fetch_add(burst.len() as u64, Ordering::SeqCst);
        }
    }
    let _ = closed.send(());
}

/// The peer's accept loop, until `stop`.
fn accept_loop(
    listener: TcpListener,
    resets: bool,
    counts: Arc<PeerCounts>,
    stop: Arc<AtomicBool>,
    closed: crossbeam_channel::Sender<()>,
) {
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let (counts, closed) = (counts.clone(), closed.clone());
                counts.running.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    serve(stream, resets, &counts, &closed);
                    counts.running.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(_) => thread::sleep(ms(1)),
        }
    }
}

/// A reader that falls behind: takes nothing for a while, then everything there is, until
/// `stop`; adds the bytes of the frames it took to `delivered`.
fn reader(link: Link, stop: Arc<AtomicBool>, delivered: Arc<AtomicU64>) {
    let mut rng = rand::rng();
    let events = link.events();
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(ms(rng.random_range(0..60)));
        let until = Instant::now() + ms(rng.random_range(1..30));
        while Instant::now() < until {
            match events.recv_timeout(ms(5)) {
                Ok(Event::Frame(f)) => {
                    delivered.fetch_add(f.len() as u64, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
}

/// The child: links, peer, readers and CPU burners for its time, then the end line.
#[test]
#[ignore = "a child of the abort stress tests; does nothing on its own"]
fn abort_stress_child_runs_cycles_until_its_time_is_up() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let words: Vec<u64> = spec
        .split_whitespace()
        .map(|w| w.parse().expect("a number"))
        .collect();
    let [secs, links, resets] = words[..] else {
        panic!("bad {CHILD}: {spec:?}")
    };
    let resets = resets == 1;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the peer");
    let endpoint = format!("tcp://{}", listener.local_addr().expect("address"));
    let counts = Arc::new(PeerCounts::default());
    let stop_peer = Arc::new(AtomicBool::new(false));
    let (closed_tx, closed_rx) = crossbeam_channel::unbounded();
    let acceptor = {
        let (counts, stop) = (counts.clone(), stop_peer.clone());
        thread::spawn(move || accept_loop(listener, resets, counts, stop, closed_tx))
    };
    let stop = Arc::new(AtomicBool::new(false));
    let burners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..10_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                }
            })
        })
        .collect();
    let pool = IoPool::new(1).expect("a pool");
    let delivered = Arc::new(AtomicU64::new(0));
    let mut all = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..links {
        let link = Link::builder(&endpoint)
            .io_pool(&pool)
            .events_capacity(4)
            .socket(|s| s.reconnect_ivl = ms(1))
            .reconnect(|r| {
                r.backoff_base = ms(1);
                r.backoff_max = ms(20);
            })
            .closed_frames_wait(Duration::from_secs(60))
            .build()
            .expect("build a link");
        let (stop, delivered, handle) = (stop.clone(), delivered.clone(), link.clone());
        readers.push(thread::spawn(move || reader(handle, stop, delivered)));
        all.push(link);
    }
    let end = Instant::now() + Duration::from_secs(secs);
    let mut out = std::io::stdout();
    while let Ok(()) = closed_rx.recv_deadline(end) {
        let _ = writeln!(out, "cycle");
    }
    // Settle: no more connections; the open ones end with their burst; then the readers take
    // what is left (each ends after 500 ms without an event).
    stop_peer.store(true, Ordering::SeqCst);
    acceptor.join().expect("the accept loop");
    let settle = Instant::now() + Duration::from_secs(10);
    while counts.running.load(Ordering::SeqCst) > 0 && Instant::now() < settle {
        if closed_rx.recv_timeout(ms(100)).is_ok() {
            let _ = writeln!(out, "cycle");
        }
    }
    // The readers keep pausing and resuming until what the peer wrote before its FINs is
    // delivered or reported (bounded: a loss shows in the end line).
    let written = counts.written.load(Ordering::SeqCst);
    let accounted = || {
        let reported: u64 = all
            .iter()
            .map(|l| {
                let m = l.metrics();
                m.bytes_unread + m.bytes_discarded + m.bytes_cut
            })
            .sum();
        delivered.load(Ordering::SeqCst) + reported
    };
    let _ = util::wait_for(Duration::from_secs(10), || {
        (accounted() >= written).then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    for b in burners {
        b.join().expect("a burner");
    }
    for r in readers {
        r.join().expect("a reader");
    }
    let accounted = accounted();
    for link in &all {
        link.close(ms(100));
    }
    let delivered = delivered.load(Ordering::SeqCst);
    let _ = writeln!(
        out,
        "end written={written} accounted={accounted} delivered={delivered}"
    );
}
