//! Dead-peer detection, measured: how long after a peer goes silent does relink's heartbeat
//! declare the connection dead?
//!
//! Run it with `cargo bench --bench detect -- [--trials N]` (N defaults to 10, about 15 s per
//! case, or to 1 with `--smoke` or `RELINK_BENCH_SMOKE=1`; `--interval-ms` (200) and `--max-missed` (2) set the heartbeat, whose bound is
//! interval × (max_missed + 1): 600 ms by default).
//!
//! Three cases, each timed from the instant the peer goes silent to the `heartbeat-timeout`
//! transition:
//! - `silent`: an in-process scripted peer that answers pings until told to stop, then keeps
//!   the connection open and sends nothing (silence starts when the flag is set);
//! - `redis-sigstop`: a `redis-server` child frozen with SIGSTOP (silence starts just before
//!   the signal is sent; SIGCONT after each trial). Needs `redis-server` on PATH;
//! - `blackhole`: an echo peer (`socat`) in one network namespace and the link in another
//!   (this program again, run with `ip netns exec`), then a blackhole route between them, so
//!   nothing gets through and no FIN or RST arrives (silence starts just before `ip route add`
//!   runs; the route is removed after each trial). Needs root, `ip netns` and `socat`: run as
//!   another user, the case is skipped with the reason.
//!
//! A case that cannot run prints `detect case=<name> skipped reason=...`. Before each trial
//! the link must have been Ready for one bound, one interval and a random part of an interval,
//! so that silence begins at a random point between two answered pings: a verdict should land
//! between `bound − interval` and the bound after the silence begins. The output ends with one
//! line per case: `detect case=<name> trials=<n> median_ms=<x> max_ms=<y> bound_ms=<z>`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::Rng;
use relink::framing::Lines;
use relink::protocol::{Ping, Predicate};
use relink::{Event, Heartbeat, Link};

use support::netns::{self, mono_us, us_between, Report};
use support::peer::Peer;
use support::proc::Server;
use support::redis::RedisServer;

/// Measures how long relink takes to notice a dead peer.
#[derive(Parser, Debug)]
struct Args {
    /// Trials per case (10; 1 with `--smoke`).
    #[arg(long)]
    trials: Option<usize>,
    /// Heartbeat interval, in milliseconds.
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// Silent intervals tolerated before the verdict.
    #[arg(long, default_value_t = 2)]
    max_missed: u32,
    /// Internal: run the blackhole case's link (inside namespace A), dialling this endpoint.
    #[arg(long, hide = true)]
    netns_child: Option<String>,
    #[command(flatten)]
    cargo: support::CargoBench,
}

/// The heartbeat settings every case uses.
#[derive(Clone, Copy)]
struct Settings {
    trials: usize,
    interval: Duration,
    max_missed: u32,
}

impl Settings {
    fn bound(&self) -> Duration {
        self.interval * (self.max_missed + 1)
    }

    /// How long a child link may run: far more than the trials need.
    fn child_limit(&self) -> Duration {
        Duration::from_secs(60) * (self.trials as u32 + 1)
    }
}

/// How a case ended.
enum Outcome {
    Measured(Vec<Duration>),
    Skipped(String),
    Failed(String),
}

/// A state transition, seen by a link in this process or reported by a child's.
struct Change {
    /// When it was seen, in [`mono_us`] time.
    t_us: u64,
    from: String,
    to: String,
    cause: String,
}

/// Where a case's state changes come from: a link in this process or a child's reports.
trait Changes {
    /// The next change before `deadline`; Ok(None) at the deadline, Err if the source ended.
    fn next(&mut self, deadline: Instant) -> Result<Option<Change>, String>;
}

impl Changes for &Link {
    fn next(&mut self, deadline: Instant) -> Result<Option<Change>, String> {
        loop {
            match self.events().recv_deadline(deadline) {
                Ok(Event::State(t)) => {
                    return Ok(Some(Change {
                        t_us: mono_us(),
                        from: t.from.to_string(),
                        to: t.to.to_string(),
                        cause: t.cause.to_string(),
                    }))
                }
                Ok(_) => continue,
                Err(relink::error::RecvTimeoutError::Timeout) => return Ok(None),
                Err(relink::error::RecvTimeoutError::Disconnected) => {
                    return Err("the link closed".into())
                }
            }
        }
    }
}

/// The stdout lines of a child running `netns::run_child_link`.
struct ChildReports<'a>(&'a Receiver<String>);

impl Changes for ChildReports<'_> {
    fn next(&mut self, deadline: Instant) -> Result<Option<Change>, String> {
        loop {
            match self.0.recv_deadline(deadline) {
                Ok(line) => {
                    if let Some(Report::State {
                        t_us,
                        from,
                        to,
                        cause,
                        ..
                    }) = Report::parse(&line)
                    {
                        return Ok(Some(Change {
                            t_us,
                            from,
                            to,
                            cause,
                        }));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("the child link's output ended".into())
                }
            }
        }
    }
}

/// The link's state as last reported, and since when.
struct Tracker {
    state: String,
    since_us: u64,
}

impl Tracker {
    fn apply(&mut self, c: &Change) {
        self.state = c.to.clone();
        self.since_us = c.t_us;
    }
}

/// Waits until the link has been Ready for `hold` without a break.
fn wait_healthy(
    src: &mut dyn Changes,
    tr: &mut Tracker,
    hold: Duration,
    timeout: Duration,
) -> Result<(), String> {
    let give_up = Instant::now() + timeout;
    loop {
        let now = mono_us();
        let ready_for = us_between(tr.since_us, now);
        if tr.state == "Ready" && ready_for >= hold {
            return Ok(());
        }
        let until = if tr.state == "Ready" {
            (Instant::now() + (hold - ready_for)).min(give_up)
        } else {
            give_up
        };
        match src.next(until)? {
            Some(c) => tr.apply(&c),
            None if Instant::now() >= give_up => {
                return Err(format!(
                    "not Ready for {hold:?} in a row within {timeout:?} (state {})",
                    tr.state
                ))
            }
            None => {}
        }
    }
}

/// Runs the trials of one case: wait until healthy, `silence` the peer (it returns when the
/// silence began, in `mono_us` time), time the verdict, `restore` the peer.
fn run_trials(
    name: &str,
    s: Settings,
    src: &mut dyn Changes,
    silence: &mut dyn FnMut() -> Result<u64, String>,
    restore: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Vec<Duration>, String> {
    let bound = s.bound();
    let mut tr = Tracker {
        state: "Idle".into(),
        since_us: mono_us(),
    };
    let mut rng = rand::rng();
    let mut out = Vec::with_capacity(s.trials);
    for i in 0..s.trials {
        let phase = s.interval.mul_f64(rng.random_range(0.0..1.0));
        wait_healthy(
            src,
            &mut tr,
            bound + s.interval + phase,
            Duration::from_secs(30),
        )
        .map_err(|e| format!("trial {i}: {e}"))?;
        let silent_since = silence().map_err(|e| format!("trial {i}: {e}"))?;
        let wait = 3 * bound + Duration::from_secs(5);
        let give_up = Instant::now() + wait;
        let change = loop {
            match src.next(give_up)? {
                Some(c) if c.from == "Ready" => break c,
                Some(c) => tr.apply(&c),
                None => {
                    let _ = restore();
                    return Err(format!("trial {i}: still Ready {wait:?} after the silence"));
                }
            }
        };
        tr.apply(&change);
        restore().map_err(|e| format!("trial {i}: {e}"))?;
        if change.cause != "heartbeat-timeout" {
            return Err(format!(
                "trial {i}: left Ready for {}, not for a heartbeat timeout",
                change.cause
            ));
        }
        let took = us_between(silent_since, change.t_us);
        println!(
            "case={name} trial={i} detect_ms={:.1} ({} -> {})",
            ms(took),
            change.from,
            change.to
        );
        out.push(took);
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A link with the heartbeat of the settings; replies recognised by `reply`.
fn link_to(endpoint: &str, s: Settings, ping: &[u8], reply: &[u8]) -> Result<Link, String> {
    Link::builder(endpoint)
        .framing(Lines::new())
        .heartbeat(
            Heartbeat::new(s.interval, Ping::Raw(ping.to_vec()))
                .max_missed(s.max_missed)
                .reply(Predicate::starts_with(reply)),
        )
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(500);
        })
        .build()
        .map_err(|e| format!("build the link: {e}"))
}

/// An in-process peer that answers `ping` with `pong` until its connection is silenced.
fn silent_case(s: Settings) -> Outcome {
    // The connection that must stay silent. Held while answering, so that once it is set no
    // answer is on its way.
    let silenced: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
    let flag = silenced.clone();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let peer = Peer::start(move |stream: TcpStream, index| {
        count.fetch_max(index + 1, Ordering::SeqCst);
        let Ok(mut out) = stream.try_clone() else {
            return;
        };
        let mut line = String::new();
        let mut lines = BufReader::new(stream);
        while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
            let silenced = flag.lock().unwrap_or_else(|e| e.into_inner());
            if *silenced != Some(index) && line == "ping\n" && out.write_all(b"pong\n").is_err() {
                return;
            }
            line.clear();
        }
    });
    let link = match link_to(&peer.endpoint(), s, b"ping\n", b"pong") {
        Ok(l) => l,
        Err(e) => return Outcome::Failed(e),
    };
    let result = run_trials(
        "silent",
        s,
        &mut &link,
        &mut || {
            let current = accepted
                .load(Ordering::SeqCst)
                .checked_sub(1)
                .ok_or("no connection")?;
            let mut g = silenced.lock().unwrap_or_else(|e| e.into_inner());
            *g = Some(current);
            Ok(mono_us())
        },
        &mut || Ok(()),
    );
    link.close(Duration::from_millis(500));
    peer.stop();
    result.map_or_else(Outcome::Failed, Outcome::Measured)
}

/// A redis-server frozen by SIGSTOP.
fn redis_case(s: Settings) -> Outcome {
    if !netns::on_path("redis-server") {
        return Outcome::Skipped("redis-server not on PATH".into());
    }
    let Some(redis) = RedisServer::start() else {
        return Outcome::Skipped("redis-server not on PATH".into());
    };
    let link = match link_to(&redis.endpoint(), s, b"PING\r\n", b"+PONG") {
        Ok(l) => l,
        Err(e) => return Outcome::Failed(e),
    };
    let result = run_trials(
        "redis-sigstop",
        s,
        &mut &link,
        &mut || {
            let t = mono_us();
            redis.stop_signal();
            Ok(t)
        },
        &mut || {
            redis.cont_signal();
            Ok(())
        },
    );
    link.close(Duration::from_millis(500));
    drop(redis);
    result.map_or_else(Outcome::Failed, Outcome::Measured)
}

/// An echo peer in namespace B, the link in namespace A, and a blackhole route between them.
fn blackhole_case(s: Settings) -> Outcome {
    if let Err(e) = netns::check_root_and_netns() {
        return Outcome::Skipped(e);
    }
    if !netns::on_path("socat") {
        return Outcome::Skipped("socat not on PATH".into());
    }
    match blackhole_trials(s) {
        Ok(d) => Outcome::Measured(d),
        Err(e) => Outcome::Failed(e),
    }
}

fn blackhole_trials(s: Settings) -> Result<Vec<Duration>, String> {
    let pair = netns::NetnsPair::create()?;
    let port = 7000;
    let _echo = pair.start_echo_in_b(port)?;
    if !pair.wait_listening(&pair.b, port, Duration::from_secs(5)) {
        return Err("the echo peer does not listen in namespace B".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("path of this program: {e}"))?;
    let exe = exe
        .to_str()
        .ok_or("the path of this program is not UTF-8")?;
    let args = vec![
        "--netns-child".to_string(),
        format!("tcp://{}:{port}", pair.addr_b),
        format!("--interval-ms={}", s.interval.as_millis()),
        format!("--max-missed={}", s.max_missed),
        format!("--trials={}", s.trials),
    ];
    let mut child = pair.spawn(&pair.a, exe, &args, &[])?;
    let result = run_trials(
        "blackhole",
        s,
        &mut ChildReports(child.lines()),
        &mut || {
            let t = mono_us();
            pair.blackhole_b_in_a()?;
            Ok(t)
        },
        &mut || pair.clear_blackhole(),
    );
    child.close_stdin();
    result
}

fn print_stats(name: &str, bound: Duration, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Measured(d) if !d.is_empty() => {
            let mut v: Vec<f64> = d.iter().copied().map(ms).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            let median = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            println!(
                "case={name} min_ms={:.1} median_ms={median:.1} max_ms={:.1} bound_ms={}",
                v[0],
                v[n - 1],
                bound.as_millis()
            );
            format!(
                "detect case={name} trials={n} median_ms={median:.1} max_ms={:.1} bound_ms={}",
                v[n - 1],
                bound.as_millis()
            )
        }
        Outcome::Measured(_) => format!("detect case={name} skipped reason=no trials asked"),
        Outcome::Skipped(why) => format!("detect case={name} skipped reason={why}"),
        Outcome::Failed(why) => format!("detect case={name} failed reason={why}"),
    }
}

fn main() -> ExitCode {
    let _ = env_logger::try_init();
    let args = Args::parse();
    let s = Settings {
        trials: args.trials.unwrap_or(if support::smoke() { 1 } else { 10 }),
        interval: Duration::from_millis(args.interval_ms.max(1)),
        max_missed: args.max_missed,
    };
    if let Some(endpoint) = &args.netns_child {
        netns::run_child_link(endpoint, s.interval, s.max_missed, s.child_limit());
        return ExitCode::SUCCESS;
    }
    println!(
        "heartbeat every {:?}, max_missed {}: bound {:?}; {} trials per case",
        s.interval,
        s.max_missed,
        s.bound(),
        s.trials
    );
    type Case = (&'static str, fn(Settings) -> Outcome);
    let cases: [Case; 3] = [
        ("silent", silent_case),
        ("redis-sigstop", redis_case),
        ("blackhole", blackhole_case),
    ];
    let mut summary = Vec::new();
    let mut failed = false;
    for (name, run) in cases {
        let outcome = run(s);
        failed |= matches!(outcome, Outcome::Failed(_));
        summary.push(print_stats(name, s.bound(), &outcome));
    }
    for line in summary {
        println!("{line}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
