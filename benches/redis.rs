//! Request and reply against a local redis-server: relink beside the `redis` crate's
//! multiplexed connection, in the same run, against the same server.
//!
//! Run with `cargo bench --bench redis` (needs `redis-server` on PATH), or
//! `cargo bench --bench redis -- --smoke` for a short run that only checks it works.
//!
//! Two modes, each a mix of `SET key:i v` and `GET key:i` (alternating):
//! - `pipelined`: 256 requests outstanding at all times. relink: `Link::request` with
//!   a window of 256 `Pending`s, the oldest waited for before the next is sent. redis crate:
//!   256 tokio tasks, each sending its share one after the other on a clone of one
//!   `MultiplexedConnection` (the way the crate pipelines).
//! - `one`: one request at a time. relink: `Link::request`; redis crate: one task awaiting
//!   `query_async` for each.
//!
//! relink runs twice in each mode: as built by default (`Looks::Never`: a waiting caller
//! sleeps at once) and with `Looks::Learnt` (it looks for the reply first), printed as
//! `impl=relink-learnt` and as the `learnt_` ratios.
//!
//! Each request's latency runs from its submission to its reply reaching the caller. Rounds
//! alternate between the two clients so that load on the machine hits both alike. The output
//! is one line per client and mode, then one ratio line per mode (relink / redis crate):
//!
//! ```text
//! redis mode=pipelined impl=relink ops_per_s=... p50_us=... p99_us=...
//! redis mode=pipelined impl=relink-learnt ops_per_s=... p50_us=... p99_us=...
//! redis mode=pipelined impl=redis-rs ops_per_s=... p50_us=... p99_us=...
//! ratio mode=pipelined throughput=... p50=... p99=... learnt_throughput=... learnt_p50=...
//! learnt_p99=...
//! ```
//!
//! `cargo bench --bench redis -- --mixed` runs one more mode alone, relink only: `mixed`,
//! sends and requests from one thread in one order, as a redis user writes (`Redis` protocol,
//! every reply to its own frame): per ten calls, nine `SET`s through `Link::send` and one
//! `GET` through `Link::request` (256 requests outstanding at most), 200 000 calls, then a
//! flush; `redis mode=mixed impl=relink ops_per_s=...` and its p50/p99 over the requests.
//!
//! Targets, for `Looks::Learnt` (the setting for a caller that waits on each reply):
//! relink's pipelined throughput at least the redis crate's (ratio ≥ 1), its one-at-a-time
//! p50 at most 1.1× the redis crate's.

mod support;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use relink::config::Looks;
use relink::framing::Resp;
use relink::protocol::{Correlation, Redis, RequestReply};
use relink::{Link, Pending, SendOptions, State};
use support::redis::RedisServer;

/// Requests outstanding in the pipelined mode.
const DEPTH: usize = 256;
/// Longest wait for the link before the bench fails.
const BOUND: Duration = Duration::from_secs(10);

/// The command for request `i`: SETs and GETs alternate, over `keys` keys.
fn command(i: usize, keys: usize) -> Vec<u8> {
    let k = (i / 2) % keys;
    if i % 2 == 0 {
        format!("SET key:{k} value-{k}").into_bytes()
    } else {
        format!("GET key:{k}").into_bytes()
    }
}

/// Latencies in µs and the run's throughput.
struct Run {
    ops_per_s: f64,
    latencies_us: Vec<f64>,
}

impl Run {
    fn new(ops: usize, elapsed: Duration, latencies_us: Vec<f64>) -> Run {
        Run {
            ops_per_s: ops as f64 / elapsed.as_secs_f64(),
            latencies_us,
        }
    }
}

/// A link to `server` whose waiting threads wait as `looks` says.
fn relink_link(server: &RedisServer, looks: Looks) -> Link {
    let link = Link::builder(server.endpoint())
        .looks(looks)
        .framing(Resp::new())
        .protocol(RequestReply)
        .requests(|q| {
            q.correlation = Some(Correlation::resp());
            q.limit_frames = DEPTH * 2;
            q.limit_bytes = 16 << 20;
        })
        .build()
        .expect("build the link");
    support::wait_state(&link, State::Ready, Instant::now() + BOUND);
    link
}

fn check_reply(i: usize, reply: &[u8]) {
    let ok = if i % 2 == 0 {
        reply == b"+OK\r\n"
    } else {
        reply.starts_with(b"$")
    };
    assert!(ok, "request {i}: {:?}", String::from_utf8_lossy(reply));
}

fn relink_pipelined(link: &Link, ops: usize, keys: usize) -> Run {
    let mut window: VecDeque<(usize, Instant, Pending)> = VecDeque::with_capacity(DEPTH);
    let mut latencies = Vec::with_capacity(ops);
    let start = Instant::now();
    let settle = |(i, at, p): (usize, Instant, Pending), latencies: &mut Vec<f64>| {
        let reply = p.wait().expect("relink reply");
        latencies.push(at.elapsed().as_secs_f64() * 1e6);
        check_reply(i, &reply);
    };
    for i in 0..ops {
        if window.len() == DEPTH {
            settle(window.pop_front().expect("full"), &mut latencies);
        }
        window.push_back((i, Instant::now(), link.request(command(i, keys))));
    }
    while let Some(w) = window.pop_front() {
        settle(w, &mut latencies);
    }
    Run::new(ops, start.elapsed(), latencies)
}

fn relink_one(link: &Link, ops: usize, keys: usize) -> Run {
    let mut latencies = Vec::with_capacity(ops);
    let start = Instant::now();
    for i in 0..ops {
        let at = Instant::now();
        let reply = link.request(command(i, keys)).wait().expect("relink reply");
        latencies.push(at.elapsed().as_secs_f64() * 1e6);
        check_reply(i, &reply);
    }
    Run::new(ops, start.elapsed(), latencies)
}

/// The `mixed` mode: sends and requests in one order, the replies to the sends as events
/// (drained by a thread of their own).
fn relink_mixed(server: &RedisServer, ops: usize, keys: usize) -> Run {
    let link = Link::builder(server.endpoint())
        .protocol(Redis::new())
        .requests(|q| {
            q.limit_frames = DEPTH * 2;
            q.limit_bytes = 16 << 20;
        })
        .build()
        .expect("build the link");
    support::wait_state(&link, State::Ready, Instant::now() + BOUND);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drain = {
        let (events, stop) = (link.events().clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = events.recv_timeout(Duration::from_millis(10));
            }
        })
    };
    let mut window: VecDeque<(Instant, Pending)> = VecDeque::with_capacity(DEPTH);
    let mut latencies = Vec::with_capacity(ops / 10 + 1);
    let settle = |(at, p): (Instant, Pending), latencies: &mut Vec<f64>| {
        let reply = p.wait().expect("relink reply");
        latencies.push(at.elapsed().as_secs_f64() * 1e6);
        assert!(
            reply.starts_with(b"$"),
            "{:?}",
            String::from_utf8_lossy(&reply)
        );
    };
    let start = Instant::now();
    for i in 0..ops {
        let k = i % keys;
        if i % 10 == 9 {
            if window.len() == DEPTH {
                settle(window.pop_front().expect("full"), &mut latencies);
            }
            let get = Resp::command(["GET".to_string(), format!("key:{k}")]);
            window.push_back((Instant::now(), link.request(get)));
        } else {
            let set = Resp::command(["SET".to_string(), format!("key:{k}"), format!("v{k}")]);
            link.send_with(set, SendOptions::new().wait(BOUND))
                .expect("queued");
        }
    }
    while let Some(w) = window.pop_front() {
        settle(w, &mut latencies);
    }
    link.flush(BOUND).expect("the sends are confirmed");
    let run = Run::new(ops, start.elapsed(), latencies);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    link.close(Duration::from_secs(1));
    drain.join().expect("the drain thread");
    run
}

/// The redis crate's multiplexed connection on a tokio runtime of its own.
struct RedisRs {
    rt: tokio::runtime::Runtime,
    con: redis::aio::MultiplexedConnection,
}

impl RedisRs {
    fn connect(server: &RedisServer) -> RedisRs {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let url = format!(
            "redis://{}/",
            server.endpoint().trim_start_matches("tcp://")
        );
        let client = redis::Client::open(url).expect("redis client");
        let con = rt
            .block_on(client.get_multiplexed_async_connection())
            .expect("redis crate connection");
        RedisRs { rt, con }
    }

    fn pipelined(&self, ops: usize, keys: usize) -> Run {
        let start = Instant::now();
        let latencies = self.rt.block_on(async {
            let tasks: Vec<_> = (0..DEPTH)
                .map(|t| {
                    let mut con = self.con.clone();
                    tokio::spawn(async move {
                        let mut latencies = Vec::with_capacity(ops / DEPTH + 1);
                        for i in (t..ops).step_by(DEPTH) {
                            let at = Instant::now();
                            query(&mut con, i, keys).await;
                            latencies.push(at.elapsed().as_secs_f64() * 1e6);
                        }
                        latencies
                    })
                })
                .collect();
            let mut all = Vec::with_capacity(ops);
            for t in tasks {
                all.extend(t.await.expect("task"));
            }
            all
        });
        Run::new(ops, start.elapsed(), latencies)
    }

    fn one(&self, ops: usize, keys: usize) -> Run {
        let mut con = self.con.clone();
        let start = Instant::now();
        let latencies = self.rt.block_on(async move {
            let mut latencies = Vec::with_capacity(ops);
            for i in 0..ops {
                let at = Instant::now();
                query(&mut con, i, keys).await;
                latencies.push(at.elapsed().as_secs_f64() * 1e6);
            }
            latencies
        });
        Run::new(ops, start.elapsed(), latencies)
    }
}

async fn query(con: &mut redis::aio::MultiplexedConnection, i: usize, keys: usize) {
    let k = (i / 2) % keys;
    if i % 2 == 0 {
        let () = redis::cmd("SET")
            .arg(format!("key:{k}"))
            .arg(format!("value-{k}"))
            .query_async(con)
            .await
            .expect("redis crate SET");
    } else {
        let _: Option<String> = redis::cmd("GET")
            .arg(format!("key:{k}"))
            .query_async(con)
            .await
            .expect("redis crate GET");
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// The rounds of one client merged: the median round's throughput, all latencies pooled.
struct Summary {
    ops_per_s: f64,
    p50: f64,
    p99: f64,
}

fn summarise(runs: Vec<Run>) -> Summary {
    let mut rates: Vec<f64> = runs.iter().map(|r| r.ops_per_s).collect();
    rates.sort_by(f64::total_cmp);
    let mut all: Vec<f64> = runs.into_iter().flat_map(|r| r.latencies_us).collect();
    all.sort_by(f64::total_cmp);
    Summary {
        ops_per_s: rates[rates.len() / 2],
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
    }
}

fn print(mode: &str, name: &str, s: &Summary) {
    println!(
        "redis mode={mode} impl={name} ops_per_s={:.0} p50_us={:.1} p99_us={:.1}",
        s.ops_per_s, s.p50, s.p99
    );
}

fn main() {
    let smoke = support::flag("smoke");
    let Some(server) = RedisServer::start() else {
        eprintln!("redis bench skipped: redis-server not on PATH");
        return;
    };
    if support::flag("mixed") {
        let ops = if smoke { 2_000 } else { 200_000 };
        let run = summarise(vec![relink_mixed(&server, ops, 10_000)]);
        print("mixed", "relink", &run);
        return;
    }
    let (rounds, pipelined_ops, one_ops, keys) = if smoke {
        (1, 2_000, 200, 100)
    } else {
        (5, 100_000, 5_000, 10_000)
    };
    let link = relink_link(&server, Looks::default());
    let learnt = relink_link(&server, Looks::Learnt);
    let rs = RedisRs::connect(&server);
    // Warm-up: the connections, the server's keys.
    relink_pipelined(&link, pipelined_ops / 10 + 2, keys);
    relink_pipelined(&learnt, pipelined_ops / 10 + 2, keys);
    rs.pipelined(pipelined_ops / 10 + 2, keys);

    for (mode, f_relink, f_rs) in [
        (
            "pipelined",
            &(|l: &Link| relink_pipelined(l, pipelined_ops, keys)) as &dyn Fn(&Link) -> Run,
            &(|r: &RedisRs| r.pipelined(pipelined_ops, keys)) as &dyn Fn(&RedisRs) -> Run,
        ),
        (
            "one",
            &(|l: &Link| relink_one(l, one_ops, keys)) as &dyn Fn(&Link) -> Run,
            &(|r: &RedisRs| r.one(one_ops, keys)) as &dyn Fn(&RedisRs) -> Run,
        ),
    ] {
        let (mut a, mut l, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            a.push(f_relink(&link));
            l.push(f_relink(&learnt));
            b.push(f_rs(&rs));
        }
        let (a, l, b) = (summarise(a), summarise(l), summarise(b));
        print(mode, "relink", &a);
        print(mode, "relink-learnt", &l);
        print(mode, "redis-rs", &b);
        println!(
            "ratio mode={mode} throughput={:.2} p50={:.2} p99={:.2} learnt_throughput={:.2} \
             learnt_p50={:.2} learnt_p99={:.2}",
            a.ops_per_s / b.ops_per_s,
            a.p50 / b.p50,
            a.p99 / b.p99,
            l.ops_per_s / b.ops_per_s,
            l.p50 / b.p50,
            l.p99 / b.p99
        );
    }
    link.close(Duration::from_secs(1));
    learnt.close(Duration::from_secs(1));
}
