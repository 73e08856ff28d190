//! Run with `cargo run --example async_redis` (needs `redis-server` on PATH; it starts its own
//! on 127.0.0.1, on a free port, without persistence, and kills it at the end).
//!
//! A tokio program that talks to redis through relink with no thread parked per link: it
//! reads the link's events as a `Stream`, pipelines `INCR` commands with `send_batch_async`,
//! restarts redis in the middle of the run and shows that the link comes back Ready on its
//! own, that the commands sent during the outage wait in the outbox and are answered after
//! the restart, and that every frame is accounted for.

use std::error::Error;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use relink::bytes::Bytes;
use relink::framing::Lines;
use relink::{Batch, Event, Handshake, Link, Metrics, Predicate, State};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// Commands per pipelined round.
const ROUND: usize = 1000;
/// Bound on every wait of the example.
const BOUND: Duration = Duration::from_secs(20);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    env_logger::init();
    let port = free_port()?;
    let mut redis = start_redis(port)?;
    let started = Instant::now();
    let t = move || format!("{:>7.3}s", started.elapsed().as_secs_f64());

    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(Lines::new())
        // Ready only once redis answers PING on the new connection.
        .protocol(Handshake::new(
            vec![b"PING".to_vec()],
            Predicate::new(|r| r == b"+PONG"),
        ))
        .backoff(Duration::from_millis(50), Duration::from_millis(500))
        .build()?;

    // One task reads every event; replies and transitions go to main through channels.
    let (replies_tx, mut replies) = mpsc::unbounded_channel::<Bytes>();
    let (ready_tx, mut ready) = mpsc::unbounded_channel::<()>();
    let mut events = link.events().clone();
    let reader = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            match ev {
                Event::Frame(f) => {
                    let _ = replies_tx.send(f);
                }
                Event::State(tr) => {
                    println!("{} state {} -> {} ({})", t(), tr.from, tr.to, tr.cause);
                    if tr.to == State::Ready {
                        let _ = ready_tx.send(());
                    }
                }
                Event::Abandoned { frame, reason } => println!(
                    "{} abandoned ({reason}): {}",
                    t(),
                    String::from_utf8_lossy(&frame)
                ),
                other => println!("{} {other:?}", t()),
            }
        }
        println!("{} event stream ended", t());
    });

    timeout(BOUND, ready.recv()).await?;
    let first = round_trip(&link, &mut replies, "first").await?;
    println!(
        "{} round 1: {ROUND} INCRs pipelined, last reply {first}",
        t()
    );

    // Restart redis: the link notices, backs off, redials, and is Ready again.
    println!("{} restarting redis-server", t());
    redis.kill()?;
    redis.wait()?;
    // Sent while redis is down: they wait in the outbox.
    let mut batch = Batch::with_capacity(ROUND, ROUND * 16);
    for _ in 0..ROUND {
        batch.push(b"INCR during-outage");
    }
    link.send_batch_async(batch).await?;
    println!("{} {ROUND} INCRs queued during the outage", t());
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis = start_redis(port)?;
    timeout(BOUND, ready.recv()).await?;
    let queued = collect(&mut replies, ROUND).await?;
    println!(
        "{} the {ROUND} queued INCRs were answered after the restart, last reply {}",
        t(),
        queued
    );
    let again = round_trip(&link, &mut replies, "second").await?;
    println!(
        "{} round 2: {ROUND} INCRs pipelined, last reply {again}",
        t()
    );

    let m = link.close_async(Duration::from_secs(2)).await;
    reader.await?;
    print_accounting(&m);
    redis.kill()?;
    redis.wait()?;
    Ok(())
}

/// Pipelines `ROUND` INCRs of one key in one batch and waits for all the replies; returns the
/// last one.
async fn round_trip(
    link: &Link,
    replies: &mut mpsc::UnboundedReceiver<Bytes>,
    key: &str,
) -> Result<String, Box<dyn Error>> {
    let command = format!("INCR {key}");
    let batch: Batch = std::iter::repeat(command.as_bytes()).take(ROUND).collect();
    link.send_batch_async(batch).await?;
    collect(replies, ROUND).await
}

/// Waits for `n` replies; returns the last one.
async fn collect(
    replies: &mut mpsc::UnboundedReceiver<Bytes>,
    n: usize,
) -> Result<String, Box<dyn Error>> {
    let mut last = Bytes::new();
    for _ in 0..n {
        last = timeout(BOUND, replies.recv())
            .await?
            .ok_or("the link's event stream ended")?;
    }
    Ok(String::from_utf8_lossy(&last).into_owned())
}

fn print_accounting(m: &Metrics) {
    println!("accounting:");
    println!("  frames submitted  {}", m.frames_submitted);
    println!("  frames confirmed  {}", m.frames_confirmed);
    println!("  unconfirmed now   {}", m.frames_unconfirmed);
    println!("  frames abandoned  {}", m.abandoned.total());
    println!("  frames refused    {}", m.frames_rejected);
    println!("  still queued      {}", m.outbox_frames);
    println!("  replies received  {}", m.frames_received);
    println!("  connects          {}", m.connects);
    println!("  reconnects        {}", m.reconnects);
    println!("  last outage       {:?}", m.last_outage);
    println!(
        "  submitted = confirmed + unconfirmed + abandoned + refused + queued: {}",
        m.unaccounted() == 0
    );
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `redis-server` on `port` and waits until it accepts connections.
fn start_redis(port: u16) -> Result<Child, Box<dyn Error>> {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    let deadline = Instant::now() + BOUND;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() >= deadline {
            return Err("redis-server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}
