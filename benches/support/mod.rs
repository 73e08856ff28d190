//! What the measurement programs in `benches/` share: the peer they measure against
//! ([`peer`]), the network namespaces and a `redis-server` child ([`netns`], [`redis`];
//! they, the child processes ([`proc`]) and bounded waits ([`wait`]) are the test kit's own
//! files from `tests/util/`, included here), TLS settings and a PKI for TLS sinks ([`tls`]),
//! the tokio client
//! they compare against ([`tokio_client`]), the card-minimal clients' wake-up ([`eventfd`]),
//! and a few small helpers: waiting for a link's
//! state, reading this process's memory and CPU use, and the command line.
//!
//! Each program includes it with `mod support;` and uses a part of it.
#![allow(dead_code)]

pub mod eventfd;
pub mod framing;
#[path = "../../tests/util/netns.rs"]
pub mod netns;
pub mod peer;
#[path = "../../tests/util/proc.rs"]
pub mod proc;
#[path = "../../tests/util/redis.rs"]
pub mod redis;
pub mod threads;
pub mod tls;
pub mod tokio_client;
#[path = "../../tests/util/wait.rs"]
pub mod wait;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use relink::{Event, Link, State};

/// The flags every bench binary takes: `--bench`, which `cargo bench` passes (accepted and
/// ignored), and `--smoke` (see [`smoke`]).
#[derive(clap::Args, Debug)]
pub struct CargoBench {
    /// Passed by `cargo bench`; ignored.
    #[arg(long = "bench", hide = true)]
    pub bench: bool,
    /// Run in seconds with small counts, to show that the program runs to its end.
    #[arg(long)]
    pub smoke: bool,
}

/// The value of `--name value` or `--name=value` among the arguments; every other argument
/// (`--bench` from `cargo bench` among them) is left alone.
pub fn arg(name: &str) -> Option<String> {
    let flag = format!("--{name}");
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.iter().enumerate().find_map(|(i, a)| {
        if *a == flag {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&flag)?.strip_prefix('=').map(str::to_string)
        }
    })
}

/// Whether the bare flag `--name` is among the arguments.
pub fn flag(name: &str) -> bool {
    let flag = format!("--{name}");
    std::env::args().skip(1).any(|a| a == flag)
}

/// What the test kit's `redis` module takes from its `peers` module.
pub mod peers {
    pub use super::free_port;

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint_for(port: u16) -> String {
        format!("tcp://127.0.0.1:{port}")
    }
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released): dials to it are
/// refused.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Whether the program runs in its smoke mode: `--smoke` among the arguments, or
/// `RELINK_BENCH_SMOKE=1` in the environment. A smoke run takes seconds and small counts: it
/// shows that the program runs to its end (CI runs every bench so), not how fast anything is.
pub fn smoke() -> bool {
    flag("smoke") || std::env::var("RELINK_BENCH_SMOKE").is_ok_and(|v| v == "1")
}

/// Takes the link's events up to and including its transition into `state`, so that the
/// start-up transitions before it are not left for the caller to read; panics, saying where
/// the link is instead, if that transition has not come by `deadline`. For a link that has
/// not yet been in `state` since the caller last took its events.
pub fn wait_state(link: &Link, state: State, deadline: Instant) {
    loop {
        match link.events().recv_deadline(deadline) {
            Ok(Event::State(t)) if t.to == state => return,
            Ok(_) => {}
            Err(e) => panic!(
                "the link did not reach {state} in time (it is {}): {e}",
                link.state()
            ),
        }
    }
}

/// A link to `endpoint` with `LengthDelimited::len32()` framing and `Overflow::Block(block)`,
/// the throughput benches' sender, once it is Ready (within 10 s, or a panic).
pub fn ready_len32_link(endpoint: &str, block: Duration) -> Link {
    let link = Link::builder(endpoint)
        .framing(relink::framing::LengthDelimited::len32())
        .delivery(|d| d.overflow = relink::Overflow::Block(block))
        .build()
        .expect("build the link");
    wait_state(
        &link,
        State::Ready,
        Instant::now() + Duration::from_secs(10),
    );
    link
}

/// This process's resident set size, in KiB (0 if /proc cannot tell).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// This process's open file descriptors.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The CPU time (user + system) this process has used so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`: exact to the
/// call, where `/proc/thread-self/schedstat` lags a running thread by up to a tick).
pub fn thread_cpu_time() -> Duration {
    // SAFETY: clock_gettime only writes into the struct it is given.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        assert_eq!(
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts),
            0
        );
        ts
    };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The median of `xs` (sorted in place); 0 for none.
pub fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
