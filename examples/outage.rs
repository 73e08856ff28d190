//! Memory during a long outage: one producer sends as fast as it can to a server that is down.
//!
//! Run it with `cargo run --release --example outage -- [--secs 60] [--policy reject|drop]`.
//! The outbox is the only place frames wait, and it is bounded: the process's peak RSS stays
//! near the outbox limit whatever the producer does. Prints one summary line.

use std::time::{Duration, Instant};

use relink::{Codec, Link, Overflow, SendError};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let secs: u64 = arg("--secs").and_then(|v| v.parse().ok()).unwrap_or(60);
    let policy = match arg("--policy").as_deref() {
        Some("drop") => Overflow::DropOldest,
        _ => Overflow::RejectNew,
    };
    // A port with nothing listening: every dial is refused for the whole run.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (limit_frames, limit_bytes) = (10_000, 16 << 20);
    let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
        .codec(Codec::length_prefixed())
        .outbox_limits(limit_frames, limit_bytes)
        .overflow(policy)
        .build()
        .expect("link");
    // Abandoned frames come back as events: a reader takes them, as an application would.
    let events = link.events().clone();
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        while events.recv().is_ok() {
            n += 1;
        }
        n
    });
    let rss_start = rss_kib();
    let mut rss_peak = rss_start;
    let start = Instant::now();
    let (mut accepted, mut refused) = (0u64, 0u64);
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        match link.send(vec![0u8; 1024]) {
            Ok(()) => accepted += 1,
            Err(SendError::Full(_)) => refused += 1,
            Err(e) => panic!("unexpected: {e}"),
        }
        i += 1;
        if i % 4096 == 0 {
            rss_peak = rss_peak.max(rss_kib());
        }
    }
    let m = link.close(Duration::from_millis(200));
    drop(link);
    let events = reader.join().expect("reader");
    println!(
        "outage secs={secs} policy={policy:?} frame_bytes=1024 outbox_limit_frames={limit_frames} \
         outbox_limit_kib={} submitted={} accepted={accepted} refused={refused} abandoned={} \
         events={events} unaccounted={} rss_start_kib={rss_start} rss_peak_kib={rss_peak}",
        limit_bytes / 1024,
        m.frames_submitted,
        m.abandoned.total(),
        m.unaccounted(),
    );
}
