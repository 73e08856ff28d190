//! RESP pipelining to a redis-server that restarts mid-run, with the exact accounting.
//!
//! Run it with `cargo run --example redis` (needs `redis-server` on PATH; it starts its own on
//! 127.0.0.1 on a free port, without persistence, and kills it at the end). Set
//! `RUST_LOG=debug` for every attempt. It ends by itself in about 3 seconds.
//!
//! The link frames with [`Resp`]: commands go out as arrays of bulk strings (built with
//! [`Resp::command`]), every reply comes back as one whole value, read with [`RespValue`]. A
//! heartbeat sends RESP `PING` and recognises `+PONG` as a whole reply, so no application
//! reply is ever taken for it. Commands are pipelined in windows (SET, GET, INCR); halfway
//! through, redis-server is killed and started again on the same port. At the end every frame
//! given to `send` is accounted for (`submitted = sent + abandoned + rejected + queued`), and
//! every reply received is parsed.

use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use relink::framing::{Resp, RespValue};
use relink::{Event, Heartbeat, Link, Ping, State};

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

/// What came back.
#[derive(Default)]
struct Replies {
    received: u64,
    parsed: u64,
    errors: u64,
    unparsable: u64,
}

impl Replies {
    fn take(&mut self, ev: Event) {
        match ev {
            Event::Frame(f) => {
                self.received += 1;
                match RespValue::parse(&f) {
                    Ok(RespValue::Error(e)) => {
                        self.parsed += 1;
                        self.errors += 1;
                        println!("  error reply: {}", String::from_utf8_lossy(&e));
                    }
                    Ok(_) => self.parsed += 1,
                    Err(e) => {
                        self.unparsable += 1;
                        println!(
                            "  unparsable reply ({e}): {:?}",
                            String::from_utf8_lossy(&f)
                        );
                    }
                }
            }
            Event::State(t) => println!(
                "  {} -> {} ({}){}",
                t.from,
                t.to,
                t.cause,
                t.next_retry
                    .map(|d| format!(", next try in {d:?}"))
                    .unwrap_or_default()
            ),
            Event::Abandoned { reason, .. } => println!("  frame abandoned: {reason}"),
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
        .heartbeat(
            Heartbeat::new(Duration::from_millis(100), Ping::Frame(b"PING".to_vec()))
                .max_missed(4)
                .reply(|reply: &[u8]| reply == b"+PONG\r\n"),
        )
        .backoff(Duration::from_millis(50), Duration::from_millis(400))
        .build()
        .map_err(|e| format!("link: {e}"))?;

    let mut replies = Replies::default();
    let mut refused = 0u64;
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
                if let Err(e) = link.send(cmd) {
                    refused += 1;
                    println!("  refused: {e}");
                }
            }
        }
        let deadline = Instant::now() + WINDOW_WAIT;
        while let Ok(ev) = link.events().recv_deadline(deadline) {
            replies.take(ev);
        }
    }
    // The last window's replies, and those of frames queued through the outage.
    let deadline = Instant::now() + Duration::from_secs(2);
    while link.state() == State::Ready && link.metrics().outbox_frames > 0 {
        if let Ok(ev) = link.events().recv_deadline(deadline) {
            replies.take(ev);
        }
        if Instant::now() > deadline {
            break;
        }
    }
    let settle = Instant::now() + Duration::from_millis(300);
    while let Ok(ev) = link.events().recv_deadline(settle) {
        replies.take(ev);
    }
    let m = link.close(Duration::from_secs(1));
    while let Ok(ev) = link.events().try_recv() {
        replies.take(ev);
    }
    if let Some(child) = redis.take() {
        stop_redis(child);
    }

    let abandoned = m.abandoned.total();
    let adds_up = m.unaccounted() == 0;
    println!();
    println!(
        "submitted {} = confirmed {} + unconfirmed {} + abandoned {} + rejected {} + queued {}: {}",
        m.frames_submitted,
        m.frames_confirmed,
        m.frames_unconfirmed,
        abandoned,
        m.frames_rejected,
        m.outbox_frames,
        if adds_up {
            "adds up"
        } else {
            "DOES NOT ADD UP"
        }
    );
    println!(
        "replies received {} (parsed {}, of which redis errors {}; unparsable {}); \
         confirmed without a reply: {} (in redis-server's kernel unread when it was killed)",
        replies.received,
        replies.parsed,
        replies.errors,
        replies.unparsable,
        m.frames_confirmed.saturating_sub(replies.received)
    );
    println!(
        "connects {}, reconnects {}, heartbeats sent {}, last round trip {:?}, refused at send {refused}",
        m.connects, m.reconnects, m.heartbeats_sent, m.last_rtt
    );
    Ok(adds_up && replies.unparsable == 0 && replies.received == replies.parsed)
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
