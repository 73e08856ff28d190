//! A fleet's metrics in Prometheus text: a few hundred links on one pool against a local echo
//! peer that restarts once, exported through the `metrics` crate.
//!
//! Run it with `cargo run --example fleet_metrics --features metrics` (no setup: it starts its
//! own peer on 127.0.0.1); `-- --links N` sets the number of links (300 by default),
//! `-- --per-link` labels the series per link too. It ends by itself in about 10 seconds and
//! prints the Prometheus text, then how many series and bytes it holds and what one export
//! pass cost.

#[path = "support/echo_peer.rs"]
mod echo_peer;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use echo_peer::EchoPeer;
use metrics_exporter_prometheus::PrometheusBuilder;
use relink::framing::Lines;
use relink::pool::MetricsExport;
use relink::protocol::Ping;
use relink::{Heartbeat, IoPool, Link, State};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--links")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(300), |v| v.parse())?;
    let per_link = args.iter().any(|a| a == "--per-link");

    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let peer = EchoPeer::start(port)?;
    let pool = IoPool::new(2)?;
    let exporter = pool.export_metrics(MetricsExport::new("meters").per_link(per_link));
    let links = (0..n)
        .map(|i| {
            Link::builder(format!("tcp://127.0.0.1:{port}"))
                .name(format!("meter-{i}"))
                .io_pool(&pool)
                .framing(Lines::new())
                .reconnect(|r| {
                    r.backoff_base = Duration::from_millis(100);
                    r.backoff_max = Duration::from_secs(1);
                })
                .heartbeat(
                    Heartbeat::new(Duration::from_millis(500), Ping::Frame(b"ping".to_vec()))
                        .reply(|f: &[u8]| f == b"PONG"),
                )
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let all_ready = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while pool.view(0).states.get(State::Ready) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("fleet_metrics: {what}: {}", pool.view(3));
    };
    all_ready("up");
    for (i, link) in links.iter().enumerate() {
        link.send(format!("reading {i}"))?;
    }
    std::thread::sleep(Duration::from_secs(2));

    println!("fleet_metrics: the peer restarts");
    peer.stop();
    std::thread::sleep(Duration::from_secs(1));
    let peer = EchoPeer::start(port)?;
    all_ready("back");
    std::thread::sleep(Duration::from_secs(2));

    let t = Instant::now();
    exporter.flush();
    let pass = t.elapsed();
    let text = prometheus.render();
    println!("{text}");
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    println!(
        "fleet_metrics: {n} links, per_link={per_link}: {series} series, {} bytes of text, \
         one export pass {pass:?}",
        text.len()
    );
    for link in &links {
        link.close(Duration::from_millis(100));
    }
    peer.stop();
    Ok(())
}
