//! The spool: what a frame costs with each sync policy beside the in-memory outbox, what an
//! `fdatasync` per frame costs, and how long a spool of a million frames takes to recover.
//!
//! Run with `cargo bench --bench spool` (about a minute) or
//! `cargo bench --bench spool -- --smoke` (seconds, small counts: it shows the program runs).
//! `-- --rates` runs the throughput rows only, `--size <bytes>` one payload size, `--rounds <n>`
//! that many rounds (default 5), `--frames <n>` that many frames a run (default 200 000),
//! `--only <memory,os,group,every>` those columns only (the others read 0), `--interval <ms>`
//! the `group` column's interval (default `Durability::DEFAULT_GROUP_INTERVAL`).
//!
//! Throughput, 64 B and 1 KiB payloads (length-prefixed, one producer, `Overflow::Block`), to a
//! local sink that reads and discards, timed from the first `send` until a `flush` after the
//! last returns (every frame confirmed, so every frame has also left the spool's ledger), the
//! spool in the system's temporary directory:
//! - `memory`: no spool;
//! - `os`: `Durability::OsWriteBack` (each record copied into the spool's mapped stage file,
//!   written to the segment when the stage fills or the spool's thread runs, never synced);
//! - `group`: `Durability::group()` (each record copied into the stage, written and synced
//!   every interval, 5 ms by default, by the spool's thread);
//! - `every`: `Durability::EveryFrame` (a `write` and an `fdatasync` per frame; fewer frames).
//!
//! Rounds run the four back to back; each row is the median over the rounds:
//!
//! `spool size=<bytes> rounds=<n> memory_fps=<m> os_fps=<o> group_fps=<g> every_fps=<e>
//! ratio_os=<o/m> ratio_group=<g/m> ratio_every=<e/m>`
//!
//! `spool_cpu size=<bytes> memory_ns=<m> os_ns=<o> group_ns=<g> every_ns=<e>
//! memory_caller_ns=<m> os_caller_ns=<o> group_caller_ns=<g> every_caller_ns=<e>`: the CPU time
//! per frame, in nanoseconds, of the whole process (the caller, the link's and libzmq's
//! threads, the spool's, the sink), then of the calling thread alone; medians over the rounds.
//!
//! `spool_fsync size=<bytes> every_us=<µs per frame through the link>
//! raw_us=<µs per write + fdatasync of the same record on a plain file>`
//!
//! Recovery: a spool filled with a million 64 B frames (`--smoke`: 20 000) by a link that
//! never connects, closed (its frames stay in the spool), then opened again:
//!
//! `spool_recover frames=<n> bytes=<spool bytes> open_ms=<build() of the link on the spool>
//! first_event_ms=<until its Event::Recovered>`
//!
//! Crash trials, more than `tests/spool.rs` runs (300 per policy; `--smoke`: 3): this program
//! re-run as a child streams numbered frames through a spooled link to a sink (bursts of 20 a
//! millisecond), is SIGKILLed after a random 0–40 ms, and the spool is opened again here with
//! a new sink; every frame whose `send` returned `Ok` is looked for at the two sinks:
//!
//! `spool_crash policy=<every|os|group:5> kills=<n> acknowledged=<frames> recovered=<frames>
//! lost=<frames> duplicated=<frames> lost_span_us=<the oldest lost frame's Ok before the last>`

#[path = "support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use bytes::Bytes;
use relink::framing::{LengthDelimited, Lines};
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

/// Seconds to send `frames` frames of `size` bytes and have them all confirmed, the CPU
/// seconds this process used meanwhile (every thread: the caller, the link's, libzmq's, the
/// spool's and the sink's), and those of the calling thread.
fn run(
    peer: &Peer,
    spool: Option<(&Path, Durability)>,
    size: usize,
    frames: u64,
) -> (f64, f64, f64) {
    let _ = spool.map(|(dir, _)| fs::remove_dir_all(dir));
    let make = || {
        let b = Link::builder(peer.endpoint())
            .framing(LengthDelimited::len32())
            .delivery(|d| d.overflow = Overflow::Block(Duration::from_secs(30)));
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
    let cpu = support::cpu_time();
    let caller = support::thread_cpu_time();
    let start = Instant::now();
    for _ in 0..frames {
        link.send(payload.clone()).expect("send");
    }
    link.flush(Duration::from_secs(120)).expect("flush");
    let took = start.elapsed().as_secs_f64();
    let cpu = (support::cpu_time() - cpu).as_secs_f64();
    let caller = (support::thread_cpu_time() - caller).as_secs_f64();
    link.close(Duration::from_secs(5));
    (took, cpu, caller)
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
            .delivery(|d| {
                d.outbox_frames = frames as usize * 2;
                d.outbox_bytes = 1 << 30;
            })
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

/// Set in the crash trials' child: `dir policy port`.
const CHILD_VAR: &str = "RELINK_BENCH_SPOOL_CHILD";

fn durability(policy: &str) -> Durability {
    match policy {
        "every" => Durability::EveryFrame,
        "os" => Durability::OsWriteBack,
        _ => Durability::Group(Duration::from_millis(5)),
    }
}

/// In the crash trials' child: streams numbered lines until killed (or 30 s), printing
/// `ok SEQ MICROS` for each `Ok`. Elsewhere returns at once.
fn stream_if_child() {
    let Ok(args) = std::env::var(CHILD_VAR) else {
        return;
    };
    let mut parts = args.split(' ');
    let (Some(dir), Some(policy), Some(port)) = (parts.next(), parts.next(), parts.next()) else {
        std::process::exit(2);
    };
    let link = Link::builder(support::peers::endpoint_for(port.parse().expect("port")))
        .framing(Lines::new())
        .spool(Spool::new(dir).durability(durability(policy)))
        .build()
        .expect("the child's link");
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    while start.elapsed() < Duration::from_secs(30) {
        for _ in 0..20 {
            let seq = link.send_numbered(|s| format!("{s}")).expect("send");
            let _ = writeln!(out, "ok {seq} {}", start.elapsed().as_micros());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::process::exit(0);
}

/// A sink that hands each connection's bytes over when it ends.
fn recording_sink() -> (Peer, crossbeam_channel::Receiver<Vec<u8>>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let peer = Peer::start(move |mut s: TcpStream, _| {
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let _ = tx.send(all);
    });
    (peer, rx)
}

fn numbers(bytes: &[u8], seen: &mut HashMap<u64, usize>) {
    for line in bytes.split(|&b| b == b'\n') {
        if let Some(n) = std::str::from_utf8(line).ok().and_then(|l| l.parse().ok()) {
            *seen.entry(n).or_default() += 1;
        }
    }
}

/// One kill: (acknowledged, recovered, lost, duplicated, lost span µs).
fn crash_trial(policy: &str, rng: &mut impl Rng) -> (usize, u64, usize, usize, u64) {
    let scratch = Scratch::new(&format!("crash-{}", rng.random::<u32>()));
    let (a, a_rx) = recording_sink();
    let exe = std::env::current_exe().expect("this program");
    let arg = format!("{} {policy} {}", scratch.0.display(), a.port());
    let mut child = Command::new(exe)
        .env(CHILD_VAR, arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let (tx, lines) = crossbeam_channel::unbounded::<String>();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let note = |line: String, acked: &mut Vec<(u64, u64)>| {
        let mut p = line.split(' ').skip(1).map(|x| x.parse::<u64>().ok());
        if let (Some(Some(s)), Some(Some(t))) = (p.next(), p.next()) {
            acked.push((s, t));
        }
    };
    let first = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("the child's first frame");
    note(first, &mut acked);
    std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
    let _ = child.kill();
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(line) = lines.recv_deadline(deadline) {
        note(line, &mut acked);
    }
    let mut seen = HashMap::new();
    numbers(
        &a_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default(),
        &mut seen,
    );
    let (b, b_rx) = recording_sink();
    let link = build(|| {
        Link::builder(b.endpoint())
            .framing(Lines::new())
            .spool(Spool::new(&scratch.0).durability(durability(policy)))
    });
    let recovered = match link.events().recv_timeout(Duration::from_secs(5)) {
        Ok(Event::Recovered { frames, .. }) => frames,
        _ => 0,
    };
    let _ = link.flush(Duration::from_secs(20));
    link.close(Duration::from_secs(5));
    drop(link);
    if recovered > 0 {
        numbers(
            &b_rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_default(),
            &mut seen,
        );
    }
    b.stop();
    a.stop();
    let last = acked.last().map_or(0, |a| a.1);
    let lost: Vec<&(u64, u64)> = acked
        .iter()
        .filter(|(s, _)| !seen.contains_key(s))
        .collect();
    (
        acked.len(),
        recovered,
        lost.len(),
        seen.values().filter(|&&n| n > 1).count(),
        lost.first().map_or(0, |l| last - l.1),
    )
}

fn crash_trials(kills: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(40);
    for policy in ["every", "os", "group:5"] {
        let (mut acked, mut rec, mut lost, mut dup, mut span) = (0, 0, 0, 0, 0);
        for _ in 0..kills {
            let t = crash_trial(policy, &mut rng);
            acked += t.0;
            rec += t.1;
            lost += t.2;
            dup += t.3;
            span = span.max(t.4);
        }
        println!(
            "spool_crash policy={policy} kills={kills} acknowledged={acked} recovered={rec} \
             lost={lost} duplicated={dup} lost_span_us={span}"
        );
    }
}

fn main() {
    stream_if_child();
    let smoke = support::smoke();
    let rounds = support::arg("rounds")
        .and_then(|r| r.parse().ok())
        .unwrap_or(if smoke { 1 } else { 5 });
    let sizes: Vec<usize> = match support::arg("size") {
        Some(s) => vec![s.parse().expect("--size <bytes>")],
        None => vec![64, 1024],
    };
    let only = support::arg("only").unwrap_or_else(|| "memory,os,group,every".into());
    let runs = |policy: &str| only.split(',').any(|p| p == policy);
    let group = match support::arg("interval") {
        Some(ms) => Durability::Group(Duration::from_millis(ms.parse().expect("--interval <ms>"))),
        None => Durability::group(),
    };
    if let Durability::Group(d) = group {
        println!("spool_group interval_ms={}", d.as_millis());
    }
    let peer = sink();
    let scratch = Scratch::new("rate");
    for size in sizes {
        let frames: u64 = support::arg("frames")
            .map(|n| n.parse().expect("--frames <n>"))
            .unwrap_or(if smoke { 5_000 } else { 200_000 });
        let every_frames: u64 = if smoke { 100 } else { 2_000 };
        // Per policy: frames per second, and CPU nanoseconds per frame (the process's, the
        // caller's), of each round.
        let mut rates: [(Vec<f64>, Vec<f64>, Vec<f64>); 4] = Default::default();
        for _ in 0..rounds {
            let policies = [
                ("memory", None, frames),
                ("os", Some(Durability::OsWriteBack), frames),
                ("group", Some(group), frames),
                ("every", Some(Durability::EveryFrame), every_frames),
            ];
            for (i, (name, durability, n)) in policies.into_iter().enumerate() {
                if runs(name) {
                    let spool = durability.map(|d| (scratch.0.as_path(), d));
                    let (took, cpu, caller) = run(&peer, spool, size, n);
                    rates[i].0.push(n as f64 / took);
                    rates[i].1.push(cpu * 1e9 / n as f64);
                    rates[i].2.push(caller * 1e9 / n as f64);
                }
            }
        }
        let [(m, mc, mk), (o, oc, ok), (g, gc, gk), (e, ec, ek)] =
            rates.map(|(mut fps, mut cpu, mut caller)| {
                (median(&mut fps), median(&mut cpu), median(&mut caller))
            });
        println!(
            "spool size={size} rounds={rounds} memory_fps={m:.0} os_fps={o:.0} group_fps={g:.0} \
             every_fps={e:.0} ratio_os={:.2} ratio_group={:.2} ratio_every={:.4}",
            o / m,
            g / m,
            e / m
        );
        println!(
            "spool_cpu size={size} memory_ns={mc:.0} os_ns={oc:.0} group_ns={gc:.0} \
             every_ns={ec:.0} memory_caller_ns={mk:.0} os_caller_ns={ok:.0} \
             group_caller_ns={gk:.0} every_caller_ns={ek:.0}"
        );
        if !runs("every") {
            continue;
        }
        let raw = raw_fsync(&scratch.0.join("raw"), size, every_frames as usize);
        println!(
            "spool_fsync size={size} every_us={:.0} raw_us={raw:.0}",
            1e6 / e
        );
    }
    let _ = std::io::stdout().flush();
    if support::flag("rates") {
        peer.stop();
        return;
    }
    recover(if smoke { 20_000 } else { 1_000_000 });
    peer.stop();
    crash_trials(if smoke { 3 } else { 300 });
}
