//! Memory during a long outage: one producer sends as fast as it can to a server that is down.
//!
//! Run it with `cargo bench --bench outage -- [--secs 10] [--policy reject|drop]` (10 s by
//! default; docs/benchmarks.md's figures come from `--secs 60`); `--smoke` (or `RELINK_BENCH_SMOKE=1`)
//! runs for 1 s unless `--secs` says otherwise.
//!
//! The outbox is the only place frames wait, and it is bounded: the process's peak RSS stays
//! near the outbox limit whatever the producer does. Prints one summary line.

mod support;

use std::time::{Duration, Instant};

use relink::error::SendError;
use relink::framing::LengthDelimited;
use relink::{Link, Overflow};

use support::rss_kib;

fn main() {
    // `cargo bench` adds `--bench`; every argument but these and `--smoke` is ignored.
    let secs: u64 = support::arg("secs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if support::smoke() { 1 } else { 10 });
    let policy = match support::arg("policy").as_deref() {
        Some("drop") => Overflow::DropOldest,
        _ => Overflow::RejectNew,
    };
    // A port with nothing listening: every dial is refused for the whole run.
    let port = support::free_port();
    let (limit_frames, limit_bytes) = (10_000, 16 << 20);
    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(LengthDelimited::len32())
        .delivery(|d| {
            d.outbox_frames = limit_frames;
            d.outbox_bytes = limit_bytes;
            d.overflow = policy;
        })
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
