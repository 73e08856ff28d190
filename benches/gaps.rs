//! Redial gaps against a server that accepts and closes at once: relink against libzmq alone.
//!
//! Run it with `cargo bench --bench gaps` (no setup: it starts its own peer on 127.0.0.1). It
//! takes up to about 30 s with relink's default backoff (200 ms .. 8 s, full jitter);
//! `cargo bench --bench gaps -- --fast` uses 50 ms .. 2 s and ends sooner; `--smoke` (or
//! `RELINK_BENCH_SMOKE=1`) is `--fast` with the first four accepts only, to show that it runs
//! to the end.
//!
//! A peer on 127.0.0.1 accepts every connection and closes it at once. First a relink link
//! with its defaults, then a bare libzmq STREAM socket (reconnect_ivl 100 ms, reconnect_ivl_max
//! 0) dial it, one after the other; for each, the example prints the gaps between the first
//! nine accepts the peer saw, in milliseconds:
//!
//! ```text
//! gaps impl=relink ms=...
//! gaps impl=libzmq ms=...
//! ```

mod support;

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use relink::Link;

use support::peer::Peer;

/// Accepts whose gaps are printed (so eight gaps).
const ACCEPTS: usize = 9;
/// Accepts whose gaps are printed in the smoke mode.
const SMOKE_ACCEPTS: usize = 4;
/// Longest wait for them, per implementation.
const BOUND: Duration = Duration::from_secs(32);

/// A peer that closes every connection as soon as it accepts it, and the accept times.
fn accept_then_close() -> (Peer, Receiver<Instant>) {
    let (tx, accepts) = crossbeam_channel::unbounded();
    let peer = Peer::start(move |stream, _| {
        let _ = tx.send(Instant::now());
        drop(stream); // close at once
    });
    (peer, accepts)
}

/// The first `n` accept times, or as many as came before `deadline`.
fn first_accepts(accepts: &Receiver<Instant>, n: usize, deadline: Instant) -> Vec<Instant> {
    let mut times = Vec::with_capacity(n);
    while times.len() < n {
        match accepts.recv_deadline(deadline) {
            Ok(t) => times.push(t),
            Err(_) => break,
        }
    }
    times
}

fn gaps_ms(times: &[Instant]) -> String {
    let gaps: Vec<String> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis().to_string())
        .collect();
    gaps.join(",")
}

fn report(name: &str, times: &[Instant], wanted: usize) {
    let short = if times.len() < wanted {
        format!(" (only {} accepts within {BOUND:?})", times.len())
    } else {
        String::new()
    };
    println!("gaps impl={name} ms={}{short}", gaps_ms(times));
}

/// relink with its defaults (or a smaller backoff with `--fast`): the first `n` accepts.
fn relink_gaps(fast: bool, n: usize) -> Result<Vec<Instant>, Box<dyn std::error::Error>> {
    let (peer, accepts) = accept_then_close();
    let mut builder = Link::builder(peer.endpoint());
    if fast {
        builder = builder.reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_secs(2);
        });
    }
    let link = builder.build()?;
    let times = first_accepts(&accepts, n, Instant::now() + BOUND);
    link.close(Duration::from_millis(200));
    Ok(times)
}

/// A bare libzmq STREAM socket: its own redial only; the first `n` accepts.
fn libzmq_gaps(n: usize) -> Result<Vec<Instant>, Box<dyn std::error::Error>> {
    let (peer, accepts) = accept_then_close();
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::STREAM)?;
    socket.set_linger(0)?;
    socket.set_reconnect_ivl(100)?;
    socket.set_reconnect_ivl_max(0)?;
    socket.connect(&peer.endpoint())?;
    let times = first_accepts(&accepts, n, Instant::now() + BOUND);
    drop(socket);
    drop(ctx);
    Ok(times)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` adds `--bench`; every argument but `--fast` and `--smoke` is ignored.
    let smoke = support::smoke();
    let fast = smoke || support::flag("fast");
    let n = if smoke { SMOKE_ACCEPTS } else { ACCEPTS };
    let relink = relink_gaps(fast, n)?;
    report("relink", &relink, n);
    let libzmq = libzmq_gaps(n)?;
    report("libzmq", &libzmq, n);
    println!(
        "relink counts a connection that closes before min_stable (1 s) as a failed attempt, \
         so its jittered backoff keeps growing; libzmq restarts its backoff after every \
         successful connect and redials about every 100-200 ms for as long as the server \
         keeps closing."
    );
    Ok(())
}
