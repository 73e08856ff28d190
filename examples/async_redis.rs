//! Run with `cargo run --example async_redis` (needs `redis-server` in /usr/sbin, /usr/bin or on
//! PATH; it starts its own on 127.0.0.1, on a free port, without persistence, and kills it at
//! the end, whatever the end: a failed request, an error, a panic).
//!
//! A tokio program that talks to redis through relink with no thread parked per link: the link
//! is `.protocol(Redis::new())` (RESP framing, a `PING` heartbeat, every command confirmed by
//! its reply, requests matched in order), with requests written again after a drop
//! (`Redelivery::Resend`). It reads the link's state changes as a `Stream`, pipelines `INCR`
//! commands as requests (`Link::request`, each `Pending` awaited for its own reply), restarts
//! redis in the middle of the run and shows that the link comes back Ready on its own, that the
//! requests made during the outage wait and are answered after the restart (those the link had
//! written to the dead connection before it saw the drop are written again), and that every
//! request is accounted for.

#[path = "support/server.rs"]
mod server;

use std::error::Error;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::StreamExt;
use relink::bytes::Bytes;
use relink::error::RequestError;
use relink::framing::{Resp, RespValue};
use relink::protocol::Redis;
use relink::{Event, Link, Metrics, Redelivery, State};
use server::{free_port, Server};
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
    let port_arg = port.to_string();
    // Killed and reaped when `redis` is dropped: at the end, at an error returned with `?`, at
    // a panic.
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
    let started = Instant::now();
    let t = move || format!("{:>7.3}s", started.elapsed().as_secs_f64());

    let link = Link::builder(redis.endpoint())
        .protocol(Redis::new())
        .requests(|q| {
            // A request cut by a drop is written again on the next connection: an INCR the
            // dead server never read is not lost.
            q.redelivery = Redelivery::Resend;
            q.timeout = BOUND;
        })
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(500);
        })
        .build()?;

    // One task reads every event; the transitions to Ready go to main through a channel.
    let (ready_tx, mut ready) = mpsc::unbounded_channel::<()>();
    let mut events = link.events().clone();
    let reader = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            match ev {
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
    let first = round_trip(&link, "first").await?;
    println!(
        "{} round 1: {ROUND} INCRs pipelined, last reply {first}",
        t()
    );

    // Restart redis: the link notices, backs off, redials, and is Ready again.
    println!("{} restarting redis-server", t());
    redis.stop();
    // Made while redis is down: each request is submitted at once and waits for the link.
    let during: Vec<_> = (0..ROUND)
        .map(|_| link.request(Resp::command(["INCR", "during-outage"])))
        .collect();
    println!("{} {ROUND} INCRs made during the outage", t());
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.start_again()?;
    timeout(BOUND, ready.recv()).await?;
    let queued = last_reply(join_all(during).await)?;
    println!(
        "{} the {ROUND} INCRs made during the outage were answered after the restart, last \
         reply {queued}",
        t()
    );
    let again = round_trip(&link, "second").await?;
    println!(
        "{} round 2: {ROUND} INCRs pipelined, last reply {again}",
        t()
    );

    let m = link.close_async(Duration::from_secs(2)).await;
    reader.await?;
    print_accounting(&m);
    if m.requests_submitted != m.requests_answered + m.requests_failed || m.requests_failed > 0 {
        return Err("a request was not answered".into());
    }
    Ok(())
}

/// Pipelines `ROUND` INCRs of one key as requests and awaits their replies; returns the last.
async fn round_trip(link: &Link, key: &str) -> Result<String, Box<dyn Error>> {
    let command = Bytes::from(Resp::command(["INCR", key]));
    let replies = join_all((0..ROUND).map(|_| link.request(command.clone()))).await;
    last_reply(replies)
}

/// The last of `replies` (an integer), or the first request that failed.
fn last_reply(replies: Vec<Result<Bytes, RequestError>>) -> Result<String, Box<dyn Error>> {
    let mut last = Bytes::new();
    for reply in replies {
        last = reply?;
    }
    match RespValue::parse(&last)? {
        RespValue::Integer(n) => Ok(n.to_string()),
        other => Err(format!("not an integer: {other:?}").into()),
    }
}

fn print_accounting(m: &Metrics) {
    println!("accounting:");
    println!("  requests made      {}", m.requests_submitted);
    println!("  answered           {}", m.requests_answered);
    println!("  failed             {}", m.requests_failed);
    println!("  still outstanding  {}", m.requests_outstanding);
    println!("  connects           {}", m.connects);
    println!("  reconnects         {}", m.reconnects);
    println!("  last outage        {:?}", m.last_outage);
    println!(
        "  made = answered + failed: {}",
        m.requests_submitted == m.requests_answered + m.requests_failed
    );
}
