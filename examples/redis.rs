//! RESP pipelining to a redis-server that restarts mid-run, with the exact accounting.
//!
//! Run it with `cargo run --example redis` (needs `redis-server` in /usr/sbin, /usr/bin or on
//! PATH; it starts its own on 127.0.0.1 on a free port, without persistence, and kills it at
//! the end, whatever the end). Set `RUST_LOG=debug` for every attempt. It ends by itself in
//! about 3 seconds.
//!
//! The link is `.protocol(Redis::new())` (`relink::protocol::Redis`): [`Resp`] framing, a
//! `PING` heartbeat, every command confirmed by its reply, requests matched in order. Commands
//! go out as arrays of bulk strings (built with [`Resp::command`]), every reply comes back as
//! one whole value, read with [`RespValue`]. Each command is a request (`Link::request`); the
//! heartbeat's `PING` takes its turn among them, so no reply is ever taken for its pong nor it
//! for a reply. Two settings are the example's own: a `PING` every 100 ms, so the drop is seen
//! at once, and requests written again after a drop (`Redelivery::Resend`). Commands are
//! pipelined in windows (SET, GET, INCR); halfway through, redis-server is killed and started
//! again on the same port, and the requests it left unanswered are written again. At the end
//! every request is answered or failed with its reason.

#[path = "support/server.rs"]
mod server;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use relink::framing::{Resp, RespValue};
use relink::protocol::Redis;
use relink::{Event, Heartbeat, Link, Pending, Redelivery};
use server::{free_port, Server};

/// Windows of pipelined commands.
const WINDOWS: usize = 20;
/// SET + GET + INCR triples per window.
const PER_WINDOW: usize = 10;
/// How long a window waits for its replies before the next one is sent.
const WINDOW_WAIT: Duration = Duration::from_millis(100);

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
    let port = free_port()?;
    let port_arg = port.to_string();
    // Killed and reaped when dropped, whatever the end.
    let mut redis = Server::start(
        "redis-server",
        [
            "--port",
            port_arg.as_str(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        port,
    )?;
    println!("redis-server on 127.0.0.1:{port}");

    let link = Link::builder(redis.endpoint())
        .protocol(Redis::new())
        .heartbeat(Heartbeat::every(Duration::from_millis(100)).max_missed(4))
        .requests(|q| {
            q.redelivery = Redelivery::Resend;
            q.timeout = Duration::from_secs(10);
        })
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
            redis.stop();
        }
        if window == WINDOWS / 2 + 3 {
            println!("window {window}: starting redis-server again");
            redis.start_again()?;
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
    drop(redis);

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
