//! The spool: what a frame costs with each sync policy beside the in-memory outbox, what an
//! `fdatasync` per frame costs, and how long a spool of a million frames takes to recover.
//!
//! Run with `cargo bench --bench spool` (about a minute) or
//! `cargo bench --bench spool -- --smoke` (seconds, small counts: it shows the program runs).
//!
//! Throughput, 64 B and 1 KiB payloads (length-prefixed, one producer, `Overflow::Block`), to a
//! local sink that reads and discards, timed from the first `send` until a `flush` after the
//! last returns (every frame confirmed, so every frame has also left the spool's ledger), the
//! spool in the system's temporary directory:
//! - `memory`: no spool;
//! - `os`: `Durability::OsWriteBack` (a `write` per frame);
//! - `group`: `Durability::Group(5 ms)` (frames buffered, written and synced every 5 ms by
//!   the spool's thread);
//! - `every`: `Durability::EveryFrame` (a `write` and an `fdatasync` per frame; fewer frames).
//!
//! Rounds run the four back to back; each row is the median over the rounds:
//!
//! `spool size=<bytes> rounds=<n> memory_fps=<m> os_fps=<o> group_fps=<g> every_fps=<e>
//! ratio_os=<o/m> ratio_group=<g/m> ratio_every=<e/m>`
//!
//! `spool_fsync size=<bytes> every_us=<µs per frame through the link>
//! raw_us=<µs per write + fdatasync of the same record on a plain file>`
//!
//! Recovery: a spool filled with a million 64 B frames (`--smoke`: 20 000) by a link that
//! never connects, closed (its frames stay in the spool), then opened again:
//!
//! `spool_recover frames=<n> bytes=<spool bytes> open_ms=<build() of the link on the spool>
//! first_event_ms=<until its Event::Recovered>`

#[path = "support/mod.rs"]
mod support;

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use relink::framing::LengthDelimited;
use relink::{Durability, Event, Link, Overflow, Spool, State};
use support::peer::Peer;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p =
            std::env::temp_dir().join(format!("relink-bench-spool-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn sink() -> Peer {
    Peer::start(move |mut s: TcpStream, _| {
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    })
}

/// Builds a link on `dir`'s spool, retrying (bounded) while the last link's threads still
/// hold its lock.
fn build(b: impl Fn() -> relink::Builder) -> Link {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match b().build() {
            Ok(link) => return link,
            Err(relink::error::ConfigError::Spool(e)) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("build: {e}"),
        }
    }
}

/// Seconds to send `frames` frames of `size` bytes and have them all confirmed.
fn run(peer: &Peer, spool: Option<(&Path, Durability)>, size: usize, frames: u64) -> f64 {
    let _ = spool.map(|(dir, _)| fs::remove_dir_all(dir));
    let make = || {
        let b = Link::builder(peer.endpoint())
            .framing(LengthDelimited::len32())
            .overflow(Overflow::Block(Duration::from_secs(30)));
        match spool {
            Some((dir, d)) => b.spool(Spool::new(dir).durability(d)),
            None => b,
        }
    };
    let link = build(make);
    support::wait_state(
        &link,
        State::Ready,
        Instant::now() + Duration::from_secs(10),
    );
    let payload = Bytes::from(vec![7u8; size]);
    let start = Instant::now();
    for _ in 0..frames {
        link.send(payload.clone()).expect("send");
    }
    link.flush(Duration::from_secs(120)).expect("flush");
    let took = start.elapsed().as_secs_f64();
    link.close(Duration::from_secs(5));
    took
}

/// Microseconds per `write` + `fdatasync` of one record of `size` bytes on a plain file.
fn raw_fsync(dir: &Path, size: usize, n: usize) -> f64 {
    fs::create_dir_all(dir).expect("dir");
    let f = File::create(dir.join("raw")).expect("file");
    let rec = vec![1u8; size + 24];
    let start = Instant::now();
    for i in 0..n {
        f.write_all_at(&rec, (i * rec.len()) as u64).expect("write");
        f.sync_data().expect("sync");
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn median(xs: &mut [f64]) -> f64 {
    support::median(xs)
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn recover(frames: u64) {
    let scratch = Scratch::new("recover");
    let dir = scratch.0.clone();
    let endpoint = support::peers::endpoint_for(support::free_port());
    let make = || {
        Link::builder(&endpoint)
            .outbox_limits(frames as usize * 2, 1 << 30)
            .spool(Spool::new(&dir).durability(Durability::OsWriteBack))
    };
    let link = build(make);
    let payload = Bytes::from(vec![7u8; 64]);
    for _ in 0..frames {
        link.send(payload.clone()).expect("send");
    }
    let m = link.close(Duration::from_millis(10));
    assert_eq!(
        m.abandoned.shutdown, frames,
        "every frame stays in the spool"
    );
    drop(link);
    let bytes = dir_bytes(&dir);
    let start = Instant::now();
    let link = build(make);
    let open = start.elapsed();
    let first = loop {
        match link.events().recv_timeout(Duration::from_secs(60)) {
            Ok(Event::Recovered { frames: n, .. }) => {
                assert_eq!(n, frames);
                break start.elapsed();
            }
            Ok(_) => {}
            Err(e) => panic!("no Recovered event: {e}"),
        }
    };
    link.close(Duration::from_millis(10));
    println!(
        "spool_recover frames={frames} bytes={bytes} open_ms={:.0} first_event_ms={:.0}",
        open.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3
    );
}

fn main() {
    let smoke = support::smoke();
    let rounds = if smoke { 1 } else { 5 };
    let peer = sink();
    let scratch = Scratch::new("rate");
    for size in [64usize, 1024] {
        let frames: u64 = if smoke { 5_000 } else { 200_000 };
        let every_frames: u64 = if smoke { 100 } else { 2_000 };
        let (mut m, mut o, mut g, mut e) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let fps = |t: f64, n: u64| n as f64 / t;
            m.push(fps(run(&peer, None, size, frames), frames));
            let os = Some((scratch.0.as_path(), Durability::OsWriteBack));
            o.push(fps(run(&peer, os, size, frames), frames));
            let group = Durability::Group(Duration::from_millis(5));
            g.push(fps(
                run(&peer, Some((&scratch.0, group)), size, frames),
                frames,
            ));
            let every = Some((scratch.0.as_path(), Durability::EveryFrame));
            e.push(fps(run(&peer, every, size, every_frames), every_frames));
        }
        let (m, o, g, e) = (
            median(&mut m),
            median(&mut o),
            median(&mut g),
            median(&mut e),
        );
        println!(
            "spool size={size} rounds={rounds} memory_fps={m:.0} os_fps={o:.0} group_fps={g:.0} \
             every_fps={e:.0} ratio_os={:.2} ratio_group={:.2} ratio_every={:.4}",
            o / m,
            g / m,
            e / m
        );
        let raw = raw_fsync(&scratch.0.join("raw"), size, every_frames as usize);
        println!(
            "spool_fsync size={size} every_us={:.0} raw_us={raw:.0}",
            1e6 / e
        );
    }
    let _ = std::io::stdout().flush();
    recover(if smoke { 20_000 } else { 1_000_000 });
    peer.stop();
}
