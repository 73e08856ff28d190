//! RESP pipelining to a redis-server that restarts mid-run, with the exact accounting.
//!
//! Run it with `cargo run --example redis` (needs `redis-server` on PATH; it starts its own on
//! 127.0.0.1 on a free port, without persistence, and kills it at the end). Set
//! `RUST_LOG=debug` for every attempt. It ends by itself in about 3 seconds.
//!
//! The link frames with [`Resp`]: commands go out as arrays of bulk strings (built with
//! [`Resp::command`]), every reply comes back as one whole value, read with [`RespValue`].
//! Each command is a request (`Link::request`), matched to its reply in order
//! (the built-in `protocols::Redis`: redis answers every command in order); the heartbeat's
//! `PING` takes its turn among them, so no reply is ever taken for its pong nor it for a reply. Commands are pipelined in windows
//! (SET, GET, INCR); halfway through, redis-server is killed and started again on the same
//! port, and the requests it left unanswered are written again (`Redelivery::Resend`). At the
//! end every request is answered or failed with its reason.

use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use relink::framing::{Resp, RespValue};
use relink::protocol::Correlation;
use relink::protocol::Redis;
use relink::{Event, Heartbeat, Link, Pending, Redelivery};

/// Windows of pipelined commands.
const WINDOWS: usize = 20;
/// SET + GET + INCR triples per window.
const PER_WINDOW: usize = 10;
/// How long a window waits for its replies before the next one is sent.
const WINDOW_WAIT: Duration = Duration::from_millis(100);

/// Starts redis-server on `port` and waits (bounded) until it accepts connections.
fn start_redis(port: u16) -> Result<Child, String> {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server ({e}); install it (e.g. apt-get install redis-server) and run again"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!(
                "redis-server did not listen on port {port} within 5 s"
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(child)
}

fn stop_redis(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// What came back for the requests.
#[derive(Default)]
struct Replies {
    answered: u64,
    redis_errors: u64,
    unparsable: u64,
    failed: u64,
}

impl Replies {
    fn settle(&mut self, pending: Pending) {
        match pending.wait() {
            Ok(reply) => {
                self.answered += 1;
                match RespValue::parse(&reply) {
                    Ok(RespValue::Error(e)) => {
                        self.redis_errors += 1;
                        println!("  error reply: {}", String::from_utf8_lossy(&e));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.unparsable += 1;
                        println!("  unparsable reply ({e}): {reply:?}");
                    }
                }
            }
            Err(e) => {
                self.failed += 1;
                println!("  request failed: {e}");
            }
        }
    }
}

/// Prints the link's state changes and errors until `deadline`.
fn show_events(link: &Link, deadline: Instant) {
    while let Ok(ev) = link.events().recv_deadline(deadline) {
        match ev {
            Event::State(t) => println!("  {t}"),
            Event::Error(e) => println!("  error: {e}"),
            _ => {}
        }
    }
}

fn run() -> Result<bool, String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let mut redis = Some(start_redis(port)?);
    println!("redis-server on 127.0.0.1:{port}");

    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(Resp::new())
        // Every command answered in order, PING as the ping, RESP3 pushes the server's own.
        .protocol(Redis::new())
        .requests(|q| {
            q.correlation = Some(Correlation::in_order());
            q.redelivery = Redelivery::Resend;
            q.timeout = Duration::from_secs(10);
        })
        .heartbeat(Heartbeat::every(Duration::from_millis(100)).max_missed(4))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(400);
        })
        .build()
        .map_err(|e| format!("link: {e}"))?;

    let mut replies = Replies::default();
    let mut pending = Vec::new();
    for window in 0..WINDOWS {
        if window == WINDOWS / 2 {
            println!("window {window}: killing redis-server");
            if let Some(child) = redis.take() {
                stop_redis(child);
            }
        }
        if window == WINDOWS / 2 + 3 {
            println!("window {window}: starting redis-server again");
            redis = Some(start_redis(port)?);
        }
        for i in 0..PER_WINDOW {
            let key = format!("relink:{window}:{i}");
            for cmd in [
                Resp::command(["SET", &key, &format!("value {window}.{i}")]),
                Resp::command(["GET", &key]),
                Resp::command(["INCR", "relink:counter"]),
            ] {
                pending.push(link.request(cmd));
            }
        }
        show_events(&link, Instant::now() + WINDOW_WAIT);
    }
    // Each request ends answered or failed with its reason, within its timeout.
    let submitted = pending.len() as u64;
    for p in pending {
        replies.settle(p);
    }
    let m = link.close(Duration::from_secs(1));
    if let Some(child) = redis.take() {
        stop_redis(child);
    }

    let adds_up = replies.answered + replies.failed == submitted;
    println!();
    println!(
        "requests {submitted} = answered {} + failed {}: {}",
        replies.answered,
        replies.failed,
        if adds_up {
            "adds up"
        } else {
            "DOES NOT ADD UP"
        }
    );
    println!(
        "redis errors among the answers {} (a restarted redis-server answers -LOADING until \
         ready); unparsable {}; the link counted {} answered, {} failed",
        replies.redis_errors, replies.unparsable, m.requests_answered, m.requests_failed
    );
    println!(
        "connects {}, reconnects {}, heartbeats sent {}, last round trip {:?}",
        m.connects, m.reconnects, m.heartbeats_sent, m.last_rtt
    );
    Ok(adds_up && replies.unparsable == 0)
}

fn main() -> ExitCode {
    env_logger::init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("redis example: {e}");
            ExitCode::FAILURE
        }
    }
}
