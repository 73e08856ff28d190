//! Soak: a link under steady load while its peer restarts every few seconds.
//!
//! Run it with `cargo bench --bench soak -- [--secs 30] [--restart-every 5]` (30 s by
//! default; the long soak is `cargo bench --bench soak -- --secs 600`); `--smoke` (or
//! `RELINK_BENCH_SMOKE=1`) runs 4 s with a restart every 2 s unless told otherwise.
//!
//! Checks, at the end, that every frame is accounted for, that the peer never saw a frame
//! twice or out of order, and that RSS and the open file descriptors stayed flat; prints one
//! summary line and exits non-zero if a check failed.

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use relink::error::SendError;
use relink::framing::LengthDelimited;
use relink::{Event, Link, Overflow};

use support::peer::Peer;
use support::{open_fds, rss_kib};

/// What the sink saw: frames carry increasing sequence numbers, so a duplicate or a frame
/// out of order shows as a number not above the last one.
#[derive(Default)]
struct Seen {
    received: u64,
    last: Option<u64>,
    violations: u64,
}

/// A length-prefixed sink on `port` that checks every frame's sequence number.
fn start_sink(port: u16, seen: Arc<Mutex<Seen>>) -> Peer {
    Peer::start_on(port, move |mut stream: TcpStream, _| {
        let mut pending = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = stream.read(&mut buf) {
            pending.extend_from_slice(&buf[..n]);
            let mut at = 0;
            let mut seen = seen.lock().unwrap();
            while pending.len() - at >= 4 {
                let len = u32::from_be_bytes(pending[at..at + 4].try_into().unwrap()) as usize;
                if pending.len() - at - 4 < len {
                    break;
                }
                let body = &pending[at + 4..at + 4 + len];
                let seq = u64::from_be_bytes(body[..8].try_into().unwrap());
                if seen.last.is_some_and(|last| seq <= last) {
                    seen.violations += 1;
                }
                seen.last = Some(seq);
                seen.received += 1;
                at += 4 + len;
            }
            pending.drain(..at);
        }
    })
    .expect("the sink's port is free")
}

fn main() {
    // `cargo bench` adds `--bench`; every argument but these and `--smoke` is ignored.
    let arg = |name, default| {
        support::arg(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let smoke = support::smoke();
    let secs = arg("secs", if smoke { 4 } else { 30 });
    let every = arg("restart-every", if smoke { 2 } else { 5 });
    let port = support::free_port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut sink = Some(start_sink(port, seen.clone()));

    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(LengthDelimited::len32())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(500);
        })
        .delivery(|d| {
            d.overflow = Overflow::DropOldest;
            d.outbox_frames = 20_000;
            d.outbox_bytes = 4 << 20;
            d.frame_ttl = Some(Duration::from_secs(2));
        })
        .build()
        .expect("link");

    // Abandoned frames come back in events: count them.
    let abandoned_seen = Arc::new(AtomicU64::new(0));
    let events = link.events().clone();
    let counter = abandoned_seen.clone();
    let reader = thread::spawn(move || {
        while let Ok(ev) = events.recv() {
            if let Event::Abandoned { .. } = ev {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let link = link.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut frame = seq.to_be_bytes().to_vec();
                frame.resize(64, 0);
                match link.send(frame) {
                    Ok(()) => seq += 1,
                    Err(SendError::Closed(_)) => break,
                    Err(_) => thread::yield_now(),
                }
                if seq % 20 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            seq
        })
    };

    let start = Instant::now();
    // Memory and descriptors are sampled after a warm-up: a restart period, at least 5 s, and
    // at most half the run (so a short run samples too).
    let warm = Duration::from_secs(every.max(5)).min(Duration::from_secs(secs) / 2);
    let (mut rss_start, mut fd_start) = (0, 0);
    let (mut rss_max, mut fd_max) = (0, 0);
    let mut restarts = 0u64;
    let mut next_restart = start + Duration::from_secs(every);
    while start.elapsed() < Duration::from_secs(secs) {
        thread::sleep(Duration::from_millis(100));
        if Instant::now() >= next_restart {
            sink.take().expect("running").stop();
            thread::sleep(Duration::from_millis(300));
            sink = Some(start_sink(port, seen.clone()));
            restarts += 1;
            next_restart += Duration::from_secs(every);
        }
        if rss_start == 0 && start.elapsed() >= warm {
            rss_start = rss_kib();
            fd_start = open_fds();
        }
        if rss_start > 0 {
            rss_max = rss_max.max(rss_kib());
            fd_max = fd_max.max(open_fds());
        }
    }
    stop.store(true, Ordering::Relaxed);
    let produced = producer.join().expect("producer");
    let m = link.close(Duration::from_secs(2));
    drop(link);
    let _ = reader.join();
    if let Some(s) = sink {
        s.stop();
    }

    let seen = seen.lock().unwrap();
    let duplicates_or_reordered = seen.violations;
    let rss_growth = rss_max.saturating_sub(rss_start);
    let ok = m.unaccounted() == 0
        && m.frames_submitted == produced
        && duplicates_or_reordered == 0
        && abandoned_seen.load(Ordering::Relaxed) == m.abandoned.total()
        && rss_growth < 32 * 1024
        // Descriptors that come and go (4 at most in smoke runs): the sink's listener and
        // connection replaced at a restart, libzmq's socket of the new connection before the
        // old one is closed, the link's TCP_INFO duplicate while frames wait. A leak of one
        // per restart grows past this slack within a long run.
        && fd_max <= fd_start + 6;
    println!(
        "soak secs={secs} restarts={restarts} submitted={} sent={} peer_received={} abandoned={} \
         (expired={} overflow={} shutdown={}) rejected={} unaccounted={} \
         duplicates_or_reordered={duplicates_or_reordered} rss_start_kib={rss_start} rss_max_kib={rss_max} fd_start={fd_start} \
         fd_max={fd_max} ok={ok}",
        m.frames_submitted,
        m.frames_sent,
        seen.received,
        m.abandoned.total(),
        m.abandoned.expired,
        m.abandoned.overflow,
        m.abandoned.shutdown,
        m.frames_rejected,
        m.unaccounted(),
    );
    if !ok {
        std::process::exit(1);
    }
}
