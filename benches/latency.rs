//! Latency: request/response round trips of 64-byte frames against a local echo peer.
//!
//! Run with `cargo bench --bench latency` or `cargo bench --bench latency -- --quick`.
//!
//! Six clients, each on its own connection to its own echo thread (which writes back every
//! byte it reads, TCP_NODELAY set), each sending a length-prefixed 64-byte frame and waiting
//! for the whole echo before sending the next:
//! - `relink`: `link.send(frame)`, then `link.events().recv()` until the decoded frame arrives.
//! - `relink_learnt`: the same with `Looks::Learnt` (a waiting thread looks for the echo
//!   before it sleeps; the default, `Looks::Never`, sleeps at once).
//! - `relink_own`, `relink_global`: the same with the link on a pool of one thread of its own
//!   (`IoPool::new(1)`) or on the shared `IoPool::global()`: the default is chosen by these.
//! - `raw_zmq`: a bare ZMQ_STREAM socket: send `[rid, prefix + payload]`, receive until the
//!   whole echo is in.
//! - `std_tcp`: `TcpStream` with TCP_NODELAY: `write_all`, then `read_exact`.
//! - `tokio`: the client a tokio user would write: a runtime thread owning tokio-util's
//!   `FramedWrite`/`FramedRead` with `LengthDelimitedCodec`, requests through an mpsc handle
//!   (`blocking_send`), replies through another (`blocking_recv`); see
//!   `support/tokio_client.rs`.
//!
//! After a warm-up, the round trips run in blocks that alternate between the clients, so that
//! a burst of load on the machine hits all of them alike. The last lines are one summary per
//! client: `latency impl=<name> p50_us=<x> p99_us=<y> p999_us=<z>`.
//!
//! `--only=<impl>` runs one client alone, for profiling. `--smoke` (or `RELINK_BENCH_SMOKE=1`)
//! makes 200 round trips per client, in about a second: it shows that every client runs to
//! the end, not how fast.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use relink::config::Looks;
use relink::framing::LengthDelimited;
use relink::{Event, IoPool, Link, State};

use support::peer::{self, Peer};
use support::tokio_client::TokioClient;

/// Payload bytes of every frame.
const SIZE: usize = 64;
/// Bytes of the length prefix before the payload.
const PREFIX: usize = 4;
/// Longest wait for one echo before the bench fails.
const ECHO_BOUND: Duration = Duration::from_secs(10);

/// One request/response client.
trait Client {
    fn name(&self) -> &'static str;
    /// One round trip: send a frame, wait for all of its echo.
    fn round_trip(&mut self);
    /// Closes the connection; the echo thread then ends.
    fn finish(self: Box<Self>);
}

struct RelinkClient {
    name: &'static str,
    link: Link,
    frame: Bytes,
}

impl RelinkClient {
    /// A link on the builder's default IO thread (`pool` none), or on `pool`, waiting as
    /// `looks` says.
    fn connect(
        echo: &Peer,
        name: &'static str,
        pool: Option<IoPool>,
        looks: Looks,
    ) -> RelinkClient {
        let mut builder = Link::builder(echo.endpoint())
            .framing(LengthDelimited::len32())
            .looks(looks);
        if let Some(pool) = &pool {
            builder = builder.io_pool(pool);
        }
        let link = builder.build().expect("build the link");
        support::wait_state(&link, State::Ready, Instant::now() + ECHO_BOUND);
        RelinkClient {
            name,
            link,
            frame: Bytes::from(vec![0x5A; SIZE]),
        }
    }
}

impl Client for RelinkClient {
    fn name(&self) -> &'static str {
        self.name
    }

    fn round_trip(&mut self) {
        self.link.send(self.frame.clone()).expect("relink send");
        loop {
            match self.link.events().recv_timeout(ECHO_BOUND) {
                Ok(Event::Frame(f)) => {
                    assert_eq!(f.len(), SIZE, "echo of the wrong size");
                    return;
                }
                Ok(Event::State(t)) if t.to != State::Ready => {
                    panic!("the link left Ready: {} -> {} ({})", t.from, t.to, t.cause)
                }
                Ok(_) => {}
                Err(e) => panic!("no echo from relink: {e}"),
            }
        }
    }

    fn finish(self: Box<Self>) {
        self.link.close(Duration::from_secs(1));
    }
}

struct ZmqClient {
    socket: zmq::Socket,
    rid: Vec<u8>,
    message: Vec<u8>,
    /// Dropped after the socket.
    _ctx: zmq::Context,
}

impl ZmqClient {
    fn connect(echo: &Peer) -> ZmqClient {
        let ctx = zmq::Context::new();
        let socket = ctx.socket(zmq::STREAM).expect("stream socket");
        socket.set_linger(100).expect("linger");
        socket
            .set_rcvtimeo(ECHO_BOUND.as_millis() as i32)
            .expect("rcvtimeo");
        socket.connect(&echo.endpoint()).expect("connect");
        let rid = socket.recv_bytes(0).expect("connect notification");
        let empty = socket.recv_bytes(0).expect("connect notification body");
        assert!(empty.is_empty(), "expected the connect notification");
        let mut message = (SIZE as u32).to_be_bytes().to_vec();
        message.resize(PREFIX + SIZE, 0x5A);
        ZmqClient {
            socket,
            rid,
            message,
            _ctx: ctx,
        }
    }
}

impl Client for ZmqClient {
    fn name(&self) -> &'static str {
        "raw_zmq"
    }

    fn round_trip(&mut self) {
        self.socket
            .send(&self.rid[..], zmq::SNDMORE)
            .expect("send rid");
        self.socket.send(&self.message[..], 0).expect("send frame");
        let mut got = 0;
        while got < self.message.len() {
            let _rid = self.socket.recv_msg(0).expect("echo rid");
            let data = self.socket.recv_msg(0).expect("echo data");
            assert!(!data.is_empty(), "the echo peer disconnected");
            got += data.len();
        }
        assert_eq!(got, self.message.len(), "echo of the wrong size");
    }

    fn finish(self: Box<Self>) {
        let _ = self.socket.send(&self.rid[..], zmq::SNDMORE);
        let _ = self.socket.send(&b""[..], 0);
    }
}

struct StdClient {
    stream: TcpStream,
    message: Vec<u8>,
    reply: Vec<u8>,
}

impl StdClient {
    fn connect(echo: &Peer) -> StdClient {
        let stream = TcpStream::connect(("127.0.0.1", echo.port())).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream.set_read_timeout(Some(ECHO_BOUND)).expect("timeout");
        let mut message = (SIZE as u32).to_be_bytes().to_vec();
        message.resize(PREFIX + SIZE, 0x5A);
        StdClient {
            stream,
            reply: vec![0; message.len()],
            message,
        }
    }
}

impl Client for StdClient {
    fn name(&self) -> &'static str {
        "std_tcp"
    }

    fn round_trip(&mut self) {
        self.stream.write_all(&self.message).expect("write");
        self.stream.read_exact(&mut self.reply).expect("read echo");
    }

    fn finish(self: Box<Self>) {}
}

struct TokioRoundTrip {
    client: TokioClient,
    frame: Bytes,
}

impl Client for TokioRoundTrip {
    fn name(&self) -> &'static str {
        "tokio"
    }

    fn round_trip(&mut self) {
        self.client.send(self.frame.clone());
        let reply = self.client.recv();
        assert_eq!(reply.len(), SIZE, "echo of the wrong size");
    }

    fn finish(self: Box<Self>) {
        self.client.finish();
    }
}

/// The `p`-th percentile (nearest rank) of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // `cargo bench` adds `--bench`; unknown arguments are ignored. For profiling one client:
    // `--only=<impl>` (relink, relink_learnt, relink_own, relink_global, raw_zmq, std_tcp,
    // tokio).
    let smoke = support::smoke();
    let quick = support::flag("quick");
    let only = support::arg("only");
    let (n, warmup, block) = if smoke {
        (200, 20, 100)
    } else if quick {
        (2_000, 200, 500)
    } else {
        (20_000, 2_000, 1_000)
    };
    println!(
        "latency: {n} round trips of {SIZE} B per client after {warmup} warm-up, blocks of \
         {block}{}",
        if smoke {
            " (smoke)"
        } else if quick {
            " (quick)"
        } else {
            ""
        }
    );

    let wanted = |name: &str| only.as_deref().map_or(true, |o| o == name);
    let mut echoes = Vec::new();
    let mut clients: Vec<Box<dyn Client>> = Vec::new();
    let relinks = [
        ("relink", None, Looks::default()),
        ("relink_learnt", None, Looks::Learnt),
        (
            "relink_own",
            Some(IoPool::new(1).expect("a pool of one thread")),
            Looks::default(),
        ),
        (
            "relink_global",
            Some(IoPool::global().expect("the global pool")),
            Looks::default(),
        ),
    ];
    for (name, pool, looks) in relinks {
        if wanted(name) {
            echoes.push(Peer::start(peer::echo));
            let echo = &echoes[echoes.len() - 1];
            clients.push(Box::new(RelinkClient::connect(echo, name, pool, looks)));
        }
    }
    if wanted("raw_zmq") {
        echoes.push(Peer::start(peer::echo));
        clients.push(Box::new(ZmqClient::connect(&echoes[echoes.len() - 1])));
    }
    if wanted("std_tcp") {
        echoes.push(Peer::start(peer::echo));
        clients.push(Box::new(StdClient::connect(&echoes[echoes.len() - 1])));
    }
    if wanted("tokio") {
        echoes.push(Peer::start(peer::echo));
        let addr = ([127, 0, 0, 1], echoes[echoes.len() - 1].port()).into();
        clients.push(Box::new(TokioRoundTrip {
            client: TokioClient::connect(addr, false),
            frame: Bytes::from(vec![0x5A; SIZE]),
        }));
    }
    assert!(!clients.is_empty(), "--only matched nothing");

    for c in clients.iter_mut() {
        for _ in 0..warmup {
            c.round_trip();
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); clients.len()];
    let began = Instant::now();
    while samples[0].len() < n {
        for (c, s) in clients.iter_mut().zip(samples.iter_mut()) {
            let todo = block.min(n - s.len());
            for _ in 0..todo {
                let t = Instant::now();
                c.round_trip();
                s.push(t.elapsed());
            }
        }
    }
    println!("measured in {:.1} s", began.elapsed().as_secs_f64());

    let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
    for c in clients {
        c.finish();
    }
    for e in echoes {
        e.stop();
    }

    println!();
    println!(
        "{:<14}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}",
        "impl", "min µs", "p50 µs", "p99 µs", "p99.9 µs", "max µs"
    );
    let mut summary = Vec::new();
    for (name, mut s) in names.into_iter().zip(samples) {
        s.sort();
        let (p50, p99, p999) = (
            percentile(&s, 50.0),
            percentile(&s, 99.0),
            percentile(&s, 99.9),
        );
        println!(
            "{name:<14}  {:>9.1}  {:>9.1}  {:>9.1}  {:>9.1}  {:>9.1}",
            us(s[0]),
            us(p50),
            us(p99),
            us(p999),
            us(s[s.len() - 1])
        );
        summary.push(format!(
            "latency impl={name} p50_us={:.1} p99_us={:.1} p999_us={:.1}",
            us(p50),
            us(p99),
            us(p999)
        ));
    }
    println!();
    for line in summary {
        println!("{line}");
    }
}
