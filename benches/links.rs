//! Many links in one process: what each costs, and what they cost idle.
//!
//! Run with `cargo bench --bench links` (100, 1000 and 4500 links, 10 s idle windows) or
//! `cargo bench --bench links -- --quick` (3 s windows); `--links 100,2000` picks the counts,
//! `--window SECS` the idle window; `--smoke` (or `RELINK_BENCH_SMOKE=1`) is 20 links and a
//! 1 s window unless told otherwise, to show that it runs to the end.
//!
//! The peer is a `redis-server` child (one process, epoll, not counted in our CPU time) when
//! one is on PATH, else the benches' echo peer in a child process. Each count runs in a fresh
//! child process of this program, so that its threads, descriptors and memory start from
//! nothing: it raises RLIMIT_NOFILE's soft limit to the hard one, builds the links on the
//! global IO pool (`IoPool::global()`, one thread per core; lines codec, a 1 s heartbeat `Ping::Raw(b"PING\r\n")`, ready on connect),
//! waits until every one is Ready, and reports one line:
//!
//! ```text
//! links n=<n> ready_s=<t> threads=<process threads> fds_per_link=<f> rss_kib_per_link=<r> idle_cpu_pct=<c> heartbeats=<sent> missed=<m> not_ready=<k>
//! ```
//!
//! then where the window's CPU went, thread by thread, per heartbeat round (one a link a
//! second: CPU µs and voluntary context switches, each a sleep and so a wake-up; `/proc/self/task`,
//! as `--bench paced` prints them; `app` is the main thread, asleep):
//!
//! ```text
//! links threads n=<n> <thread>_us=<..> <thread>_wakes=<..> ... all_us=<..> all_wakes=<..>
//! ```
//!
//! `threads` counts the whole process (main thread, relink's IO and resolver threads, libzmq's
//! IO and reaper threads). `fds_per_link` and `rss_kib_per_link` are the growth from before the
//! first link to all Ready, divided by the number of links. `idle_cpu_pct` is this process's
//! CPU time (user + system) over the window, in percent of one core, while every link
//! exchanges heartbeats with the peer.
//!
//! Beside it, in another fresh child, the bare sockets a user would otherwise hold: `n` tokio
//! `TcpStream`s to the same peer on a current-thread runtime, each writing `PING\r\n` every
//! second (their starts spread over the first second, as the links' heartbeats are) and reading
//! the `+PONG`, the same exchange as a link's heartbeat with nothing else:
//!
//! ```text
//! links_tokio n=<n> idle_cpu_pct=<c> pings=<sent> ratio_tokio=<relink's idle CPU / this>
//! ```
//!
//! And, in a third child, the floor of relink's design: what a careful user of the `zmq` crate
//! writes for the same fleet, one thread owning one ZMQ_STREAM socket with `n` connections to
//! the peer (`n` `connect`s, each connection known by the routing id of its connect
//! notification), blocking in `zmq::poll` until the next ping is due or input comes, then
//! reading to EAGAIN and sending each ping that is due (`[rid, "PING\r\n"]` every second from
//! the connection's notification, as a link's heartbeat runs from its Ready), with the same
//! window; then its threads as above:
//!
//! ```text
//! links_raw n=<n> idle_cpu_pct=<c> pings=<sent> pongs=<read> raw_ratio=<relink's idle CPU / this>
//! links_raw threads n=<n> <thread>_us=<..> <thread>_wakes=<..> ... all_us=<..> all_wakes=<..>
//! ```
//!
//! And, in a fourth child, the least a client of relink's shape costs for the same fleet
//! (card-minimal): the raw fleet's loop on an IO thread of its own that also polls an eventfd
//! (`zmq::PollItem::from_fd`, the application's wake-up; never written, as an idle fleet's
//! application has nothing to say), the main thread asleep until it ends:
//!
//! ```text
//! links_card n=<n> idle_cpu_pct=<c> pings=<sent> pongs=<read> card_ratio=<relink's idle CPU / this>
//! links_card threads n=<n> <thread>_us=<..> <thread>_wakes=<..> ... all_us=<..> all_wakes=<..>
//! ```
//!
//! Then it times `IoPool::view` against walking every handle's `metrics()` (see
//! `pool_view_row`) and prints the view; with `--features metrics`, an export pass and the
//! Prometheus text it makes, per pool and per link (`export_row`).

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use relink::framing::Lines;
use relink::protocol::Ping;
use relink::{Heartbeat, IoPool, Link, State};

/// Set in the child process that measures one count: the count.
const CHILD_ENV: &str = "RELINK_BENCH_LINKS_CHILD";
/// Set (with [`CHILD_ENV`]) in the child that measures the bare sockets: `tokio`, `raw` or
/// `card`.
const BARE_ENV: &str = "RELINK_BENCH_LINKS_BARE";
/// redis-server's answer to a `PING`: the raw fleet counts its pongs by their bytes.
const PONG: &[u8] = b"+PONG\r\n";
/// Bound on all links reaching Ready.
const READY_BOUND: Duration = Duration::from_secs(120);

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        let n = n.parse().expect("a count of links");
        match std::env::var(BARE_ENV).as_deref() {
            Ok("tokio") => child_tokio(n),
            Ok("raw") => child_raw(n, None),
            Ok("card") => child_card(n),
            _ => child(n),
        }
        return;
    }
    let smoke = support::smoke();
    let quick = support::flag("quick");
    let window: u64 = support::arg("window")
        .map(|w| w.parse().expect("--window SECS"))
        .unwrap_or(if smoke {
            1
        } else if quick {
            3
        } else {
            10
        });
    let counts: Vec<usize> = support::arg("links")
        .unwrap_or_else(|| if smoke { "20" } else { "100,1000,4500" }.into())
        .split(',')
        .map(|n| n.trim().parse().expect("--links N,N,.."))
        .collect();
    support::peer::serve_if_child();
    let redis = support::redis::RedisServer::start();
    let child_peer;
    let (endpoint, peer_name) = match &redis {
        Some(r) => (r.endpoint(), "redis-server"),
        None => {
            eprintln!("links: redis-server not on PATH; using the echo peer");
            child_peer = support::peer::ChildPeer::start();
            (child_peer.endpoint(), "echo peer")
        }
    };
    println!(
        "links: peer {peer_name} at {endpoint}, {window} s idle windows, {} cores",
        thread::available_parallelism().map_or(1, |n| n.get())
    );
    let exe = std::env::current_exe().expect("path of this program");
    for n in counts {
        let mut relink_cpu = None;
        for bare in ["", "tokio", "raw", "card"] {
            let mut command = Command::new(&exe);
            command
                .env(CHILD_ENV, n.to_string())
                .env("RELINK_BENCH_ENDPOINT", &endpoint)
                .env("RELINK_BENCH_WINDOW", window.to_string())
                .stdout(Stdio::piped());
            if !bare.is_empty() {
                command.env(BARE_ENV, bare);
            }
            let child = command.spawn().expect("start a measuring child");
            let out = child.wait_with_output().expect("the measuring child");
            for line in BufReader::new(&out.stdout[..]).lines() {
                let line = line.expect("a line");
                let cpu = line
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("idle_cpu_pct="))
                    .and_then(|c| c.parse::<f64>().ok());
                match (bare, cpu) {
                    ("", Some(c)) if line.starts_with("links n=") => relink_cpu = Some(c),
                    ("tokio" | "raw" | "card", Some(c)) => {
                        let ratio = relink_cpu.map_or(f64::NAN, |r| r / c.max(0.01));
                        let name = match bare {
                            "raw" => "raw_ratio",
                            "card" => "card_ratio",
                            _ => "ratio_tokio",
                        };
                        println!("{line} {name}={ratio:.2}");
                        continue;
                    }
                    _ => {}
                }
                println!("{line}");
            }
            if !out.status.success() {
                println!(
                    "links n={n} ({}) failed: {}",
                    if bare.is_empty() { "relink" } else { bare },
                    out.status
                );
            }
        }
    }
}

/// The bare sockets' child: `n` tokio streams to the peer, each a `PING\r\n` every second
/// and its `+PONG` read, on one current-thread runtime; prints their CPU over the window.
fn child_tokio(n: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let endpoint = std::env::var("RELINK_BENCH_ENDPOINT").expect("endpoint");
    let addr = endpoint.trim_start_matches("tcp://").to_string();
    let window = Duration::from_secs(
        std::env::var("RELINK_BENCH_WINDOW")
            .ok()
            .and_then(|w| w.parse().ok())
            .unwrap_or(10),
    );
    raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let pings = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    rt.block_on(async {
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            let s = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            s.set_nodelay(true).expect("nodelay");
            streams.push(s);
        }
        for (i, mut s) in streams.into_iter().enumerate() {
            let pings = pings.clone();
            let start =
                tokio::time::Instant::now() + Duration::from_secs(1).mul_f64(i as f64 / n as f64);
            tokio::spawn(async move {
                let mut every = tokio::time::interval_at(start, Duration::from_secs(1));
                let mut buf = [0u8; 64];
                loop {
                    every.tick().await;
                    if s.write_all(b"PING\r\n").await.is_err() {
                        return;
                    }
                    pings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut got = 0;
                    while !buf[..got].ends_with(b"\r\n") {
                        match s.read(&mut buf[got..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => got = (got + k).min(buf.len() - 1),
                        }
                    }
                }
            });
        }
        // As for the links: the first rounds go by before the counts are taken.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let p0 = pings.load(std::sync::atomic::Ordering::Relaxed);
        let cpu0 = support::cpu_time();
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        let cpu = support::cpu_time() - cpu0;
        let sent = pings.load(std::sync::atomic::Ordering::Relaxed) - p0;
        println!(
            "links_tokio n={n} idle_cpu_pct={:.1} pings={sent}",
            100.0 * cpu.as_secs_f64() / t0.elapsed().as_secs_f64()
        );
    });
}

/// The card-minimal fleet's child: the raw fleet's loop on an IO thread of its own
/// (`card-io`), which polls an eventfd beside its socket, while the main thread, the
/// application's, waits for it to end.
fn child_card(n: usize) {
    let wake = support::eventfd::EventFd::new();
    thread::Builder::new()
        .name("card-io".into())
        .spawn(move || child_raw(n, Some(&wake)))
        .expect("spawn the IO thread")
        .join()
        .expect("the IO thread");
}

/// The raw ZMQ_STREAM fleet's child: one thread, one STREAM socket with `n` connections to
/// the peer, a `PING\r\n` on each every second and its `+PONG` read; prints its CPU over the
/// window, and its threads' per heartbeat round. With `wake`, the card-minimal fleet's IO
/// thread: it polls the eventfd too (nothing writes it: the application has nothing to say)
/// and its lines say `links_card`.
fn child_raw(n: usize, wake: Option<&support::eventfd::EventFd>) {
    let name = if wake.is_some() {
        "links_card"
    } else {
        "links_raw"
    };
    use std::collections::VecDeque;
    let endpoint = std::env::var("RELINK_BENCH_ENDPOINT").expect("endpoint");
    let window = Duration::from_secs(
        std::env::var("RELINK_BENCH_WINDOW")
            .ok()
            .and_then(|w| w.parse().ok())
            .unwrap_or(10),
    );
    raise_nofile();
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::STREAM).expect("a stream socket");
    socket.set_linger(100).expect("linger");
    for _ in 0..n {
        socket.connect(&endpoint).expect("connect");
    }
    // Each connection announces itself with `[rid, ""]` (STREAM_NOTIFY, the default).
    let deadline = Instant::now() + READY_BOUND;
    let mut rids = Vec::with_capacity(n);
    // Each connection's next ping, in the order they fall due: a second after its
    // notification, then a second apart, so the queue stays in order when a sent ping goes to
    // its back.
    let mut due: VecDeque<(Instant, usize)> = VecDeque::with_capacity(n);
    while rids.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "{name} n={n}: {} of {n} connected in time",
            rids.len()
        );
        let mut items = [socket.as_poll_item(zmq::POLLIN)];
        zmq::poll(&mut items, left.as_millis() as i64).expect("poll");
        while let Ok(rid) = socket.recv_bytes(zmq::DONTWAIT) {
            let body = socket.recv_msg(0).expect("the notification's body");
            if body.is_empty() {
                due.push_back((Instant::now() + Duration::from_secs(1), rids.len()));
                rids.push(rid);
            }
        }
    }
    let (mut pings, mut pong_bytes) = (0u64, 0u64);
    let mut serve_until = |end: Instant, pings: &mut u64, pong_bytes: &mut u64| loop {
        let now = Instant::now();
        if now >= end {
            return;
        }
        let next = due.front().map_or(end, |&(at, _)| at.min(end));
        // Whole milliseconds, rounded up, as a poll's timeout is.
        let wait = next.saturating_duration_since(now);
        let mut items = vec![socket.as_poll_item(zmq::POLLIN)];
        if let Some(wake) = wake {
            items.push(zmq::PollItem::from_fd(wake.raw(), zmq::POLLIN));
        }
        zmq::poll(&mut items, wait.as_micros().div_ceil(1000) as i64).expect("poll");
        if items.get(1).is_some_and(|w| w.is_readable()) {
            wake.expect("polled").drain();
        }
        // Read to EAGAIN: `[rid, data]`, a pong (or part of one, or more) in each.
        while socket.recv_msg(zmq::DONTWAIT).is_ok() {
            let data = socket.recv_msg(0).expect("the data after a routing id");
            *pong_bytes += data.len() as u64;
        }
        let now = Instant::now();
        while let Some(&(at, i)) = due.front() {
            if at > now {
                break;
            }
            due.pop_front();
            socket
                .send(&rids[i][..], zmq::SNDMORE)
                .expect("send the rid");
            socket.send(&b"PING\r\n"[..], 0).expect("send the ping");
            *pings += 1;
            due.push_back((at + Duration::from_secs(1), i));
        }
    };
    // As for the links: the first rounds go by before the counts are taken.
    serve_until(
        Instant::now() + Duration::from_millis(1500),
        &mut pings,
        &mut pong_bytes,
    );
    let (p0, q0) = (pings, pong_bytes);
    let threads0 = support::threads::Threads::read();
    let cpu0 = support::cpu_time();
    let t0 = Instant::now();
    serve_until(t0 + window, &mut pings, &mut pong_bytes);
    let cpu = support::cpu_time() - cpu0;
    let wall = t0.elapsed();
    let by_thread = support::threads::Threads::read().since(&threads0);
    println!(
        "{name} n={n} idle_cpu_pct={:.1} pings={} pongs={}",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        pings - p0,
        (pong_bytes - q0) / PONG.len() as u64
    );
    let rounds = n as f64 * wall.as_secs_f64();
    println!("{name} threads n={n}{}", by_thread.per_frame(rounds));
    drop(socket);
    drop(ctx);
}

fn count_entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn child(n: usize) {
    let endpoint = std::env::var("RELINK_BENCH_ENDPOINT").expect("endpoint");
    let window = Duration::from_secs(
        std::env::var("RELINK_BENCH_WINDOW")
            .ok()
            .and_then(|w| w.parse().ok())
            .unwrap_or(10),
    );
    let (soft, hard) = raise_nofile();
    eprintln!("links n={n}: RLIMIT_NOFILE {soft}/{hard}");
    let fds0 = support::open_fds();
    let rss0 = support::rss_kib();
    let started = Instant::now();
    let pool = IoPool::global().expect("the global IO pool");
    let mut links = Vec::with_capacity(n);
    for i in 0..n {
        let link = Link::builder(&endpoint)
            .name(format!("link-{i}"))
            .io_pool(&pool)
            .framing(Lines::new())
            .heartbeat(
                Heartbeat::new(Duration::from_secs(1), Ping::Raw(b"PING\r\n".to_vec()))
                    .reply(relink::protocol::Predicate::starts_with(&b"+PONG"[..])),
            )
            .build();
        match link {
            Ok(l) => links.push(l),
            Err(e) => {
                println!("links n={n} build failed at link {i}: {e}");
                return;
            }
        }
    }
    let deadline = started + READY_BOUND;
    for link in &links {
        support::wait_state(link, State::Ready, deadline);
    }
    let ready = started.elapsed();
    // Let the first heartbeats go round before the counts are taken.
    thread::sleep(Duration::from_millis(1500));
    let threads = count_entries("/proc/self/task");
    let fds = support::open_fds().saturating_sub(fds0);
    let rss = support::rss_kib().saturating_sub(rss0);
    let hb0: u64 = links.iter().map(|l| l.metrics().heartbeats_sent).sum();
    let missed0: u64 = links.iter().map(|l| l.metrics().heartbeats_missed).sum();
    let threads0 = support::threads::Threads::read();
    let cpu0 = support::cpu_time();
    let t0 = Instant::now();
    thread::sleep(window);
    let cpu = support::cpu_time() - cpu0;
    let wall = t0.elapsed();
    let by_thread = support::threads::Threads::read().since(&threads0);
    let hb: u64 = links
        .iter()
        .map(|l| l.metrics().heartbeats_sent)
        .sum::<u64>()
        - hb0;
    let missed: u64 = links
        .iter()
        .map(|l| l.metrics().heartbeats_missed)
        .sum::<u64>()
        - missed0;
    let not_ready = links.iter().filter(|l| l.state() != State::Ready).count();
    println!(
        "links n={n} ready_s={:.2} threads={threads} fds_per_link={:.2} rss_kib_per_link={:.1} \
         idle_cpu_pct={:.1} heartbeats={hb} missed={missed} not_ready={not_ready}",
        ready.as_secs_f64(),
        fds as f64 / n as f64,
        rss as f64 / n as f64,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
    );
    // A heartbeat round (a ping written, its pong read) per link per second of the window.
    let rounds = n as f64 * wall.as_secs_f64();
    println!("links threads n={n}{}", by_thread.per_frame(rounds));
    pool_view_row(n, &pool, &links);
    #[cfg(feature = "metrics")]
    export_row(n, &pool);
    let t = Instant::now();
    drop(links);
    eprintln!("links n={n}: dropping every link took {:?}", t.elapsed());
}

/// The cost of one `IoPool::view` beside its baseline, asking every handle for its metrics
/// and summing them; medians of a few calls each:
///
/// ```text
/// pool_view n=<n> view_us=<v> walk_us=<w> view/walk=<ratio>
/// ```
///
/// then the view itself (docs/guide.md shows a view's `Display`).
fn pool_view_row(n: usize, pool: &IoPool, links: &[Link]) {
    const CALLS: usize = 21;
    let mut view_us = Vec::with_capacity(CALLS);
    let mut walk_us = Vec::with_capacity(CALLS);
    let mut view = pool.view(10);
    for _ in 0..CALLS {
        let t = Instant::now();
        view = pool.view(10);
        view_us.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let ready = links
            .iter()
            .map(|l| l.metrics())
            .filter(|m| m.state == State::Ready)
            .count();
        walk_us.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(ready <= n);
    }
    let (v, w) = (support::median(&mut view_us), support::median(&mut walk_us));
    println!(
        "pool_view n={n} view_us={v:.0} walk_us={w:.0} view/walk={:.3}",
        v / w
    );
    println!("{view}");
}

/// With `--features metrics`: one export pass and the Prometheus text it makes, with labels
/// per pool and per link:
///
/// ```text
/// export n=<n> per_link=<bool> pass_us=<t> series=<s> text_kib=<k>
/// ```
#[cfg(feature = "metrics")]
fn export_row(n: usize, pool: &IoPool) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    for per_link in [false, true] {
        let exporter = pool.export_metrics(
            relink::pool::MetricsExport::new("bench")
                .per_link(per_link)
                .interval(Duration::from_secs(3600)),
        );
        let mut pass_us = Vec::new();
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..5 {
                let t = Instant::now();
                exporter.flush();
                pass_us.push(t.elapsed().as_secs_f64() * 1e6);
            }
        });
        let text = handle.render();
        let series = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        println!(
            "export n={n} per_link={per_link} pass_us={:.0} series={series} text_kib={:.0}",
            support::median(&mut pass_us),
            text.len() as f64 / 1024.0
        );
    }
}

/// Raises RLIMIT_NOFILE's soft limit to the hard one; returns (soft, hard).
fn raise_nofile() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (0, 0);
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads one rlimit from `lim`.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    (lim.rlim_cur, lim.rlim_max)
}
