//! Idle cost: the CPU time 100 links use when there is nothing to send.
//!
//! Run with `cargo bench --bench idle` (two 10 s windows) or
//! `cargo bench --bench idle -- --quick` (two 3 s windows) or `--smoke` (or
//! `RELINK_BENCH_SMOKE=1`: two 1 s windows, to show that it runs to the end).
//!
//! Two measurements, each over a window of wall-clock time, of this process's CPU time (user +
//! system, `getrusage(RUSAGE_SELF)`):
//! - `ready`: 100 links in Ready, each with a 1 s heartbeat (`Ping::Frame(b"ping")`, replies
//!   recognised by a predicate) to a peer that echoes every byte.
//! - `backoff`: 100 links to a port that refuses, with a backoff of 1 s .. 2 s, so they keep
//!   dialling and waiting.
//!
//! The echo peer runs in a child process (`support::peer::ChildPeer`: this same binary, started
//! again), so the parent's CPU time is relink's alone: its IO threads, libzmq's IO thread, and
//! the main thread sleeping through the window. The last lines are
//! `idle state=ready links=100 cpu_ms=<x>` and `idle state=backoff links=100 cpu_ms=<x>`,
//! the CPU time over the whole window.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use relink::framing::LengthDelimited;
use relink::protocol::{Ping, Predicate};
use relink::{Heartbeat, Link, State};

use support::cpu_time;
use support::peer::ChildPeer;

/// Links per measurement.
const LINKS: usize = 100;
/// Longest wait for the links to reach the state measured.
const SETTLE_BOUND: Duration = Duration::from_secs(30);

/// Waits (bounded) until every link is in `state`, taking their events meanwhile.
fn wait_all(links: &[Link], state: State) {
    let deadline = Instant::now() + SETTLE_BOUND;
    for link in links {
        support::wait_state(link, state, deadline);
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
    support::peer::serve_if_child();
    // `cargo bench` adds `--bench`; every argument but `--quick` and `--smoke` is ignored.
    let smoke = support::smoke();
    let quick = support::flag("quick");
    let window = Duration::from_secs(if smoke {
        1
    } else if quick {
        3
    } else {
        10
    });
    println!(
        "idle: {LINKS} links, {:.0} s windows{}",
        window.as_secs_f64(),
        if smoke {
            " (smoke)"
        } else if quick {
            " (quick)"
        } else {
            ""
        }
    );
    let mut summary = Vec::new();

    // Ready, with heartbeats answered by the peer process.
    let peer = ChildPeer::start();
    let endpoint = peer.endpoint();
    let links: Vec<Link> = (0..LINKS)
        .map(|_| {
            Link::builder(&endpoint)
                .framing(LengthDelimited::len32())
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
    let endpoint = format!("tcp://127.0.0.1:{}", support::free_port());
    let links: Vec<Link> = (0..LINKS)
        .map(|_| {
            Link::builder(&endpoint)
                .framing(LengthDelimited::len32())
                .reconnect(|r| {
                    r.backoff_base = Duration::from_secs(1);
                    r.backoff_max = Duration::from_secs(2);
                })
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
