//! Confirmed delivery: what the window costs on a healthy link, and how soon a frame is
//! confirmed.
//!
//! Run with `cargo bench --bench delivery` (about a minute) or
//! `cargo bench --bench delivery -- --quick` (about ten seconds; `--smoke`: three rounds).
//!
//! Throughput, 64 B, 1 KiB and 64 KiB payloads (length-prefixed, one producer,
//! `Overflow::Block`), to a local sink that reads and discards, timed from the first send until
//! every frame is confirmed (`frames_confirmed`):
//! - `window`: the default window (`defaults::WINDOW`, 4 MiB);
//! - `unbounded`: `window(0)`: frames are still confirmed, nothing is held back;
//! - `std_tcp`: `std::net::TcpStream` behind a `BufWriter`, timed until the sink read it all.
//!
//! The machine is noisy (two cores, other work on them), so the settings are compared within
//! rounds: many short rounds (8 MiB each; `--quick`: 2 MiB), each running the three back to
//! back, `window` and `unbounded` in alternating order (A B, B A, ...); a round gives the
//! ratio of `window`'s rate to `unbounded`'s (and to `std_tcp`'s), and the row prints the
//! median of those ratios with their quartiles, beside the median rates:
//!
//! `delivery size=<bytes> rounds=<n> window_mps=<w> unbounded_mps=<u> std_tcp_mps=<s>
//! ratio_window=<median> q1=<q1> q3=<q3> ratio_std=<median>`, where `*_mps` is millions of
//! frames per second and the ratios are `window` over `unbounded` and over `std_tcp`.
//!
//! Confirmed by reply beside confirmed by TCP, 64 B and 1 KiB, to a sink that also answers
//! each `PING` frame with `PONG` (both links ping every second and know only pings are
//! answered; only `confirm` differs), timed from the first send until a `flush` after the last
//! returns (every frame confirmed), the two in alternating order within each round:
//!
//! `confirm size=<bytes> rounds=<n> tcp_mps=<t> reply_mps=<r> ratio_reply=<median> q1=<q1>
//! q3=<q3>`, the ratio being `reply`'s rate over `tcp`'s.
//!
//! Then, by reply, the time from `send` to confirmed with the default barrier (5 ms), and what a
//! `flush` after one `send` costs at each level (by reply it writes its barrier at once):
//! `reply_latency n=<N> p50_us=<p50> p99_us=<p99>`, `flush_us confirm=<tcp|reply> n=<N>
//! p50=<p50> p99=<p99>`.
//!
//! Then the time from `send` to confirmed on loopback, one 64 B frame at a time (the next is
//! sent once the last is confirmed, seen by polling `metrics()`, which adds a round trip to
//! the IO thread): `confirm_latency n=<N> p50_us=<p50> p99_us=<p99>`, beside the round trip
//! of one `metrics()` call alone: `metrics_rtt_us p50=<p50>`.

mod support;

use std::io::{BufWriter, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink::framing::LengthDelimited;
use relink::protocol::Ping;
use relink::{Confirm, Heartbeat, Link, Overflow, State};
use support::peer::Peer;

const BOUND: Duration = Duration::from_secs(120);

/// A sink that counts the bytes it read.
fn sink() -> (Peer, Arc<AtomicU64>) {
    let read = Arc::new(AtomicU64::new(0));
    let counter = read.clone();
    let peer = Peer::start(move |mut s: TcpStream, _| {
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            counter.fetch_add(n as u64, Ordering::Relaxed);
        }
    });
    (peer, read)
}

/// A sink that reads length-prefixed frames and answers each `PING` with `PONG`.
fn pinged_sink() -> Peer {
    Peer::start(move |mut s: TcpStream, _| {
        // As servers that answer do: a pong is not held back behind the last one's
        // acknowledgement (Nagle's algorithm against a delayed ACK costs 40 ms).
        s.set_nodelay(true).expect("nodelay");
        let mut w = s.try_clone().expect("clone");
        let mut buf = vec![0u8; 256 * 1024];
        let mut pending: Vec<u8> = Vec::new();
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buf[..n]);
            let mut at = 0;
            while pending.len() - at >= 4 {
                let len = u32::from_be_bytes(pending[at..at + 4].try_into().unwrap()) as usize;
                if pending.len() - at - 4 < len {
                    break;
                }
                if &pending[at + 4..at + 4 + len] == b"PING"
                    && w.write_all(b"\0\0\0\x04PONG").is_err()
                {
                    return;
                }
                at += 4 + len;
            }
            pending.drain(..at);
        }
    })
}

/// A link to a [`pinged_sink`], confirmed at `confirm`'s level.
fn pinged_link(endpoint: &str, confirm: Confirm) -> Link {
    let link = Link::builder(endpoint)
        .framing(LengthDelimited::len32())
        .delivery(|d| d.overflow = Overflow::Block(BOUND))
        .heartbeat(
            Heartbeat::new(Duration::from_secs(1), Ping::Frame(b"PING".to_vec()))
                .reply(|f: &[u8]| f == b"PONG"),
        )
        .confirm(confirm)
        .build()
        .expect("build");
    support::wait_state(
        &link,
        State::Ready,
        Instant::now() + Duration::from_secs(10),
    );
    link
}

fn run_confirm(confirm: Confirm, size: usize, frames: u64) -> Duration {
    let peer = pinged_sink();
    let link = pinged_link(&peer.endpoint(), confirm);
    let payload = vec![0xA5u8; size];
    let start = Instant::now();
    for _ in 0..frames {
        link.send(payload.clone()).expect("send");
    }
    // As a producer that wants to know its burst was read: by reply, the flush's barrier
    // confirms the tail at once instead of after the barrier's age.
    link.flush(BOUND).expect("flushed");
    assert_eq!(link.metrics().frames_confirmed, frames);
    let took = start.elapsed();
    let m = link.close(Duration::from_secs(5));
    assert_eq!(m.unaccounted(), 0);
    peer.stop();
    took
}

fn link(endpoint: &str, window: usize) -> Link {
    let link = Link::builder(endpoint)
        .framing(LengthDelimited::len32())
        .delivery(|d| {
            d.overflow = Overflow::Block(BOUND);
            d.window = window;
        })
        .build()
        .expect("build");
    support::wait_state(
        &link,
        State::Ready,
        Instant::now() + Duration::from_secs(10),
    );
    link
}

/// Until `f` holds, bounded.
fn until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !f() {
        assert!(Instant::now() < deadline, "not done within {BOUND:?}");
        std::thread::yield_now();
    }
}

fn run_relink(window: usize, size: usize, frames: u64) -> Duration {
    let (peer, _) = sink();
    let link = link(&peer.endpoint(), window);
    let payload = vec![0xA5u8; size];
    let start = Instant::now();
    for _ in 0..frames {
        link.send(payload.clone()).expect("send");
    }
    until(|| link.metrics().frames_confirmed == frames);
    let took = start.elapsed();
    let m = link.close(Duration::from_secs(5));
    assert_eq!(m.unaccounted(), 0);
    peer.stop();
    took
}

fn run_std(size: usize, frames: u64) -> Duration {
    let (peer, read) = sink();
    let stream = TcpStream::connect(("127.0.0.1", peer.port())).expect("connect");
    let mut w = BufWriter::with_capacity(64 * 1024, stream);
    let payload = vec![0xA5u8; size];
    let len = (size as u32).to_be_bytes();
    let start = Instant::now();
    for _ in 0..frames {
        w.write_all(&len)
            .and_then(|()| w.write_all(&payload))
            .expect("write");
    }
    w.flush().expect("flush");
    let total = frames * (size as u64 + 4);
    until(|| read.load(Ordering::Relaxed) >= total);
    let took = start.elapsed();
    drop(w);
    peer.stop();
    took
}

fn mps(frames: u64, d: Duration) -> f64 {
    frames as f64 / d.as_secs_f64() / 1e6
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// The value at fraction `q` of `xs`, sorted in place.
fn quantile(xs: &mut [f64], q: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let smoke = support::smoke();
    let quick = smoke || support::flag("quick");
    let rounds = if smoke {
        3
    } else if quick {
        9
    } else {
        25
    };
    let bytes_per_round: u64 = if quick { 2 << 20 } else { 8 << 20 };
    for size in [64usize, 1024, 65536] {
        let frames = bytes_per_round / size as u64;
        let (mut w, mut u, mut s) = (Vec::new(), Vec::new(), Vec::new());
        let (mut ratio, mut ratio_std) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (tw, tu) = if round % 2 == 0 {
                let tw = run_relink(relink::config::defaults::WINDOW, size, frames);
                (tw, run_relink(0, size, frames))
            } else {
                let tu = run_relink(0, size, frames);
                (
                    run_relink(relink::config::defaults::WINDOW, size, frames),
                    tu,
                )
            };
            let ts = run_std(size, frames);
            // Rates in the same round: the ratio of rates is the inverse ratio of times.
            ratio.push(tu.as_secs_f64() / tw.as_secs_f64());
            ratio_std.push(ts.as_secs_f64() / tw.as_secs_f64());
            w.push(mps(frames, tw));
            u.push(mps(frames, tu));
            s.push(mps(frames, ts));
        }
        let (q1, q3) = (quantile(&mut ratio, 0.25), quantile(&mut ratio, 0.75));
        println!(
            "delivery size={size} rounds={rounds} window_mps={:.3} unbounded_mps={:.3} \
             std_tcp_mps={:.3} ratio_window={:.2} q1={q1:.2} q3={q3:.2} ratio_std={:.2}",
            support::median(&mut w),
            support::median(&mut u),
            support::median(&mut s),
            support::median(&mut ratio),
            support::median(&mut ratio_std),
        );
    }
    for size in [64usize, 1024] {
        let frames = bytes_per_round / size as u64;
        let (mut t, mut r, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (tt, tr) = if round % 2 == 0 {
                let tt = run_confirm(Confirm::tcp(), size, frames);
                (tt, run_confirm(Confirm::reply(), size, frames))
            } else {
                let tr = run_confirm(Confirm::reply(), size, frames);
                (run_confirm(Confirm::tcp(), size, frames), tr)
            };
            ratio.push(tt.as_secs_f64() / tr.as_secs_f64());
            t.push(mps(frames, tt));
            r.push(mps(frames, tr));
        }
        let (q1, q3) = (quantile(&mut ratio, 0.25), quantile(&mut ratio, 0.75));
        println!(
            "confirm size={size} rounds={rounds} tcp_mps={:.3} reply_mps={:.3} \
             ratio_reply={:.2} q1={q1:.2} q3={q3:.2}",
            support::median(&mut t),
            support::median(&mut r),
            support::median(&mut ratio),
        );
    }
    let n = if quick { 200 } else { 1000 };
    {
        let peer = pinged_sink();
        let link = pinged_link(&peer.endpoint(), Confirm::reply());
        let mut lat = Vec::with_capacity(n);
        for i in 0..n as u64 {
            let t = Instant::now();
            link.send(vec![0x5Au8; 64]).expect("send");
            until(|| link.metrics().frames_confirmed > i);
            lat.push(t.elapsed());
        }
        lat.sort();
        println!(
            "reply_latency n={n} p50_us={:.0} p99_us={:.0}",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        link.close(Duration::from_secs(1));
        peer.stop();
    }
    for (name, confirm) in [("tcp", Confirm::tcp()), ("reply", Confirm::reply())] {
        let peer = pinged_sink();
        let link = pinged_link(&peer.endpoint(), confirm);
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            link.send(vec![0x5Au8; 64]).expect("send");
            let t = Instant::now();
            link.flush(BOUND).expect("flushed");
            lat.push(t.elapsed());
        }
        lat.sort();
        println!(
            "flush_us confirm={name} n={n} p50={:.0} p99={:.0}",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        link.close(Duration::from_secs(1));
        peer.stop();
    }
    let (peer, _) = sink();
    let link = link(&peer.endpoint(), relink::config::defaults::WINDOW);
    let n = if quick { 500 } else { 5000 };
    let mut lat = Vec::with_capacity(n);
    let mut rtt = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        let _ = link.metrics();
        rtt.push(t.elapsed());
        let t = Instant::now();
        link.send(vec![0x5Au8; 64]).expect("send");
        until(|| link.metrics().frames_confirmed > i);
        lat.push(t.elapsed());
    }
    lat.sort();
    rtt.sort();
    println!(
        "confirm_latency n={n} p50_us={:.0} p99_us={:.0}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
    println!("metrics_rtt_us p50={:.0}", percentile(&rtt, 0.5));
    link.close(Duration::from_secs(1));
    peer.stop();
}
