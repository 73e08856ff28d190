//! Throughput: frames per second from this process to one local TCP sink.
//!
//! Run with `cargo bench --bench throughput` (a few minutes) or
//! `cargo bench --bench throughput -- --quick` (under 30 s).
//!
//! These senders are compared, each writing the same bytes on the wire (a 4-byte big-endian
//! length, then the payload) for 64 B, 1 KiB and 64 KiB payloads:
//! - `relink`: one [`Link`] with the length-prefixed codec and `Overflow::Block`, so the
//!   producer waits for room and never loses a frame; one producer thread, `link.send` of a
//!   clone of one `Bytes` payload per frame, a view of a static buffer (the tokio clients
//!   get the same clones).
//! - `relink4`: the same link fed by four producer threads splitting the same total.
//! - `raw_zmq`: a bare ZMQ_STREAM socket, one zmq message per frame, blocking sends from one
//!   thread, with the send high-water mark raised to [`queue_frames`] (100 000 frames, fewer
//!   for large frames: about 64 MiB).
//! - `std_tcp`: `std::net::TcpStream` behind a `BufWriter`.
//! - `relink_batch`: the `relink` link, frames handed over in [`Batch`]es of up to 1024
//!   frames (64 KiB of payload at most) with `send_batch`.
//! - `relink_writer`: the `relink` link, each frame written from one buffer of the producer's
//!   (a slice, not a `Bytes`) with `link.writer()`'s `send` (1 024 frames or 64 KiB a
//!   hand-over), one `flush` at the end: the buffered sender, as `std_tcp`'s `BufWriter` is.
//! - `relink_sender`: the `relink` link, each frame written from one buffer of the
//!   producer's with `link.producer()`'s `send`: handed to the IO thread at once, as `send`
//!   hands it, through the sender's single-producer ring.
//! - `tokio`: the client a tokio user would write: a runtime thread owning tokio-util's
//!   `FramedWrite<_, LengthDelimitedCodec>`, fed through a bounded mpsc handle
//!   (`blocking_send` from the producer thread); see `support/tokio_client.rs`. Its channel
//!   holds [`queue_frames`] frames, as many as raw_zmq's high-water mark: a small channel
//!   (1 024) costs it a third of its speed at 64 B, so the size is chosen for throughput.
//! - `tokio_stubborn`: the same over stubborn-io's `StubbornTcpStream`.
//! - `relink_user`: the `relink` sender with a len32 framing written in this file against the
//!   public [`Framing`] trait instead of the built-in (`LengthDelimited::len32`), to measure
//!   what a user's framing costs through the trait (`ratio_user` = relink_user / relink).
//! - `relink_own` and `relink_global`: the `relink` sender with its link given a pool of one
//!   thread of its own (`IoPool::new(1)`) or the shared `IoPool::global()`, to choose the
//!   default by measurement (`throughput_pool` lines, `ratio_global_own` = global / own).
//! - `relink_tls`: `relink` with TLS (rustls, ring), verified against a private CA, to a
//!   TLS sink (a rustls server thread that decrypts and counts); for 1 KiB and 64 KiB only.
//!
//! The sink is a thread that reads and discards, counting bytes. A run is timed from the first
//! send until the sink has read every byte. Rounds are interleaved (every round runs every
//! sender for every size) and the median of the rounds (7, or 5 with `--quick`) is reported.
//! The last lines are one summary per size:
//!
//! `throughput size=<bytes> relink_mps=<x> relink4_mps=<x4> raw_zmq_mps=<y> std_tcp_mps=<z>
//! ratio_raw=<x/y> ratio_std=<x/z> ratio_4v1=<x4/x> relink_user_mps=<u> ratio_user=<u/x>`
//!
//! and one more per size for the batch and the tokio clients:
//!
//! `throughput size=<bytes> relink_batch_mps=<b> tokio_mps=<t> tokio_stubborn_mps=<s>
//! ratio_tokio=<x/t> ratio_stubborn=<x/s> ratio_batch_std=<b/z> ratio_batch_tokio=<b/t>`
//!
//! one per size for the writer:
//!
//! `throughput_writer size=<bytes> relink_mps=<x> relink_writer_mps=<w> std_tcp_mps=<z>
//! ratio_writer_std=<w/z> ratio_writer_send=<w/x>`
//!
//! one per size for the sender:
//!
//! `throughput_sender size=<bytes> relink_mps=<x> relink_sender_mps=<s> std_tcp_mps=<z>
//! ratio_sender_std=<s/z> ratio_sender_send=<s/x> ratio_sender_batch=<s/b>`
//!
//! then, for 1 KiB and 64 KiB, `throughput_tls size=<bytes> relink_mps=<x> relink_tls_mps=<t>
//! ratio_tls=<t/x>`, and the TLS handshake on loopback: `build()` to Ready, median of `N`
//! links, without and with TLS, and the difference:
//! `tls_handshake n=<N> connect_ready_ms=<p> tls_connect_ready_ms=<t> handshake_ms=<t-p>`,
//! where `*_mps` is millions of frames per second.
//!
//! `--smoke` (or `RELINK_BENCH_SMOKE=1`) runs one round of small counts, in seconds: it shows
//! that every sender runs to the end and every summary line prints, not how fast they are.
//!
//! To profile one case, `--only=<sender>` and `--size=<bytes>` narrow the runs (no summary
//! lines then), e.g. `cargo bench --bench throughput -- --quick --only=relink --size=65536`.

mod support;

use std::io::{self, BufWriter, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use relink::bytes::Bytes;
use relink::framing::LengthDelimited;
use relink::{Batch, IoPool, Link, Overflow, State};

use support::framing::UserLen32;
use support::peer::Peer;
use support::tls::Pki;
use support::tokio_client::TokioClient;

/// Bytes of the length prefix every sender writes before a payload.
const PREFIX: usize = 4;
/// Producer threads of the `relink4` sender.
const PRODUCERS: usize = 4;
/// Upper bound on one run, so that a stuck sender fails the bench instead of hanging it.
const RUN_BOUND: Duration = Duration::from_secs(300);

/// The bytes of every payload.
static PAYLOAD: [u8; 64 * 1024] = [0xA5; 64 * 1024];

/// The payload the `Bytes` senders (relink's `send`, the tokio clients) clone for each frame:
/// a view of a static buffer, so that a clone costs neither an allocation nor a reference
/// count, as a slice costs std and raw zmq nothing.
fn payload(size: usize) -> Bytes {
    Bytes::from_static(&PAYLOAD[..size])
}

/// Frames a baseline may queue ahead of the wire (raw_zmq's high-water mark, the tokio
/// client's channel): 100 000, or about 64 MiB for large frames.
fn queue_frames(size: usize) -> usize {
    (64 * 1024 * 1024 / (PREFIX + size)).clamp(1000, 100_000)
}

/// The senders compared, in the order they run within a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Relink,
    Relink4,
    RawZmq,
    StdTcp,
    RelinkUser,
    RelinkTls,
    RelinkBatch,
    Tokio,
    TokioStubborn,
    RelinkOwn,
    RelinkGlobal,
    RelinkWriter,
    RelinkSender,
}

/// Which IO thread the link of a `relink*` sender runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    /// Whatever the builder does without `io_pool`.
    Default,
    /// A pool of one thread, its own.
    Own,
    /// `IoPool::global()`, shared with every other link that uses it.
    Global,
}

impl Client {
    const ALL: [Client; 13] = [
        Client::Relink,
        Client::Relink4,
        Client::RawZmq,
        Client::StdTcp,
        Client::RelinkUser,
        Client::RelinkTls,
        Client::RelinkBatch,
        Client::Tokio,
        Client::TokioStubborn,
        Client::RelinkOwn,
        Client::RelinkGlobal,
        Client::RelinkWriter,
        Client::RelinkSender,
    ];

    fn name(self) -> &'static str {
        match self {
            Client::Relink => "relink",
            Client::Relink4 => "relink4",
            Client::RawZmq => "raw_zmq",
            Client::StdTcp => "std_tcp",
            Client::RelinkUser => "relink_user",
            Client::RelinkTls => "relink_tls",
            Client::RelinkBatch => "relink_batch",
            Client::Tokio => "tokio",
            Client::TokioStubborn => "tokio_stubborn",
            Client::RelinkOwn => "relink_own",
            Client::RelinkGlobal => "relink_global",
            Client::RelinkWriter => "relink_writer",
            Client::RelinkSender => "relink_sender",
        }
    }

    /// Whether this sender runs at this size (TLS: 1 KiB and 64 KiB).
    fn runs_at(self, size: usize) -> bool {
        self != Client::RelinkTls || size >= 1024
    }

    /// Sends `frames` frames of `size` bytes to a fresh sink; returns the time from the first
    /// send until the sink read the last byte.
    fn run(self, size: usize, frames: usize, pki: &Pki) -> Duration {
        let tls = (self == Client::RelinkTls).then(|| support::tls::server_config(pki));
        let sink = Sink::start((frames * (PREFIX + size)) as u64, tls);
        let elapsed = match self {
            Client::Relink => run_relink(&sink, size, frames, 1, false, None, Pool::Default),
            Client::Relink4 => {
                run_relink(&sink, size, frames, PRODUCERS, false, None, Pool::Default)
            }
            Client::RelinkUser => run_relink(&sink, size, frames, 1, true, None, Pool::Default),
            Client::RelinkTls => {
                run_relink(&sink, size, frames, 1, false, Some(pki), Pool::Default)
            }
            Client::RelinkOwn => run_relink(&sink, size, frames, 1, false, None, Pool::Own),
            Client::RelinkGlobal => run_relink(&sink, size, frames, 1, false, None, Pool::Global),
            Client::RawZmq => run_raw_zmq(&sink, size, frames),
            Client::StdTcp => run_std_tcp(&sink, size, frames),
            Client::RelinkBatch => run_relink_batch(&sink, size, frames),
            Client::RelinkWriter => run_relink_writer(&sink, size, frames),
            Client::RelinkSender => run_relink_sender(&sink, size, frames),
            Client::Tokio => run_tokio(&sink, size, frames, false),
            Client::TokioStubborn => run_tokio(&sink, size, frames, true),
        };
        sink.join();
        elapsed
    }
}

/// A local TCP server that reads and discards, and reports the instant it has read the
/// expected number of bytes from its one connection; with a TLS configuration it decrypts
/// first and counts the plaintext.
struct Sink {
    peer: Peer,
    done: mpsc::Receiver<Result<Instant, String>>,
}

impl Sink {
    fn start(expected: u64, tls: Option<Arc<rustls::ServerConfig>>) -> Sink {
        let (tx, done) = mpsc::channel();
        let peer = Peer::start(move |stream: TcpStream, _| {
            let mut stream: Box<dyn Read> = match &tls {
                None => Box::new(stream),
                Some(config) => Box::new(support::tls::TlsReader::new(stream, config.clone())),
            };
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            let result = loop {
                if total >= expected {
                    break Ok(Instant::now());
                }
                match stream.read(&mut buf) {
                    Ok(0) => break Err(format!("eof after {total} of {expected} bytes")),
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(format!("read after {total} bytes: {e}")),
                }
            };
            let ok = result.is_ok();
            let _ = tx.send(result);
            if ok {
                // Read on until the sender closes, so that its close is orderly.
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            }
        });
        Sink { peer, done }
    }

    fn endpoint(&self) -> String {
        self.peer.endpoint()
    }

    /// The instant the sink had read every byte.
    fn wait(&self) -> Instant {
        match self.done.recv_timeout(RUN_BOUND) {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => panic!("sink failed: {e}"),
            Err(e) => panic!("sink did not finish within {RUN_BOUND:?}: {e}"),
        }
    }

    fn join(self) {
        self.peer.stop();
    }
}

fn run_relink(
    sink: &Sink,
    size: usize,
    frames: usize,
    producers: usize,
    user: bool,
    tls: Option<&Pki>,
    pool: Pool,
) -> Duration {
    let builder = Link::builder(sink.endpoint());
    let builder = match pool {
        Pool::Default => builder,
        Pool::Own => builder.io_pool(&IoPool::new(1).expect("a pool of one thread")),
        Pool::Global => builder.io_pool(&IoPool::global().expect("the global pool")),
    };
    let mut builder = if user {
        builder.framing(UserLen32)
    } else {
        builder.framing(LengthDelimited::len32())
    };
    if let Some(pki) = tls {
        builder = builder.tls(support::tls::client(pki));
    }
    let link = builder
        .delivery(|d| d.overflow = Overflow::Block(RUN_BOUND))
        .build()
        .expect("build the link");
    support::wait_state(
        &link,
        State::Ready,
        Instant::now() + Duration::from_secs(10),
    );
    let payload = payload(size);
    let barrier = Arc::new(Barrier::new(producers + 1));
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            // Split the total; the first threads take the remainder.
            let n = frames / producers + usize::from(p < frames % producers);
            let link = link.clone();
            let payload = payload.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..n {
                    if let Err(e) = link.send(payload.clone()) {
                        panic!("relink send failed: {e}");
                    }
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for t in threads {
        t.join().expect("producer panicked");
    }
    finish_link(sink, &link, frames, start)
}

/// The link of `relink_batch` and `relink_writer`, Ready.
fn ready_link(sink: &Sink) -> Link {
    support::ready_len32_link(&sink.endpoint(), RUN_BOUND)
}

/// Waits for the sink, closes the link and checks that it sent every frame.
fn finish_link(sink: &Sink, link: &Link, frames: usize, start: Instant) -> Duration {
    let done = sink.wait();
    let m = link.close(Duration::from_secs(5));
    assert_eq!(
        m.frames_sent, frames as u64,
        "relink did not send every frame"
    );
    done - start
}

fn run_relink_writer(sink: &Sink, size: usize, frames: usize) -> Duration {
    let link = ready_link(sink);
    let payload = vec![0xA5u8; size];
    let mut writer = link.writer();
    let start = Instant::now();
    for _ in 0..frames {
        if let Err(e) = writer.send(&payload) {
            panic!("relink writer send failed: {e}");
        }
    }
    if let Err(e) = writer.flush() {
        panic!("relink writer flush failed: {e}");
    }
    finish_link(sink, &link, frames, start)
}

fn run_relink_sender(sink: &Sink, size: usize, frames: usize) -> Duration {
    let link = ready_link(sink);
    let payload = vec![0xA5u8; size];
    let mut sender = link.producer();
    let start = Instant::now();
    for _ in 0..frames {
        if let Err(e) = sender.send(&payload) {
            panic!("relink sender send failed: {e}");
        }
    }
    finish_link(sink, &link, frames, start)
}

fn run_relink_batch(sink: &Sink, size: usize, frames: usize) -> Duration {
    let link = ready_link(sink);
    let payload = vec![0xA5u8; size];
    let per_batch = (64 * 1024 / size).clamp(1, 1024);
    let start = Instant::now();
    let mut left = frames;
    while left > 0 {
        let n = per_batch.min(left);
        let mut batch = Batch::with_capacity(n, n * size);
        for _ in 0..n {
            batch.push(&payload);
        }
        if let Err(e) = link.send_batch(batch, relink::SendOptions::new()) {
            panic!("relink send_batch failed: {e}");
        }
        left -= n;
    }
    finish_link(sink, &link, frames, start)
}

fn run_tokio(sink: &Sink, size: usize, frames: usize, stubborn: bool) -> Duration {
    let addr = ([127, 0, 0, 1], sink.peer.port()).into();
    let client = TokioClient::with_channel(addr, stubborn, queue_frames(size));
    let payload = payload(size);
    let start = Instant::now();
    for _ in 0..frames {
        client.send(payload.clone());
    }
    let done = sink.wait();
    client.finish();
    done - start
}

fn run_raw_zmq(sink: &Sink, size: usize, frames: usize) -> Duration {
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::STREAM).expect("stream socket");
    // Enough room that the sender rarely waits, bounded to about 64 MiB of queued frames.
    socket
        .set_sndhwm(queue_frames(size) as i32)
        .expect("sndhwm");
    socket.set_linger(1000).expect("linger");
    socket.set_rcvtimeo(10_000).expect("rcvtimeo");
    socket.connect(&sink.endpoint()).expect("connect");
    // The connect notification [rid, ""] gives the routing id of the connection.
    let rid = socket.recv_bytes(0).expect("connect notification");
    let empty = socket.recv_bytes(0).expect("connect notification body");
    assert!(empty.is_empty(), "expected the connect notification");
    let mut message = Vec::with_capacity(PREFIX + size);
    message.extend_from_slice(&(size as u32).to_be_bytes());
    message.resize(PREFIX + size, 0xA5);
    let start = Instant::now();
    for _ in 0..frames {
        socket.send(&rid[..], zmq::SNDMORE).expect("send rid");
        socket.send(&message[..], 0).expect("send frame");
    }
    let done = sink.wait();
    drop(socket);
    drop(ctx);
    done - start
}

fn run_std_tcp(sink: &Sink, size: usize, frames: usize) -> Duration {
    let stream = TcpStream::connect(("127.0.0.1", sink.peer.port())).expect("connect");
    let mut writer = BufWriter::new(stream);
    let prefix = (size as u32).to_be_bytes();
    let payload = vec![0xA5u8; size];
    let start = Instant::now();
    for _ in 0..frames {
        writer.write_all(&prefix).expect("write prefix");
        writer.write_all(&payload).expect("write payload");
    }
    writer.flush().expect("flush");
    let done = sink.wait();
    drop(writer);
    done - start
}

/// The median of one column; NaN (printed as such) for a column that has no run.
fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Four significant digits, whatever the magnitude.
fn sig4(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

fn main() {
    // `cargo bench` adds `--bench`; unknown arguments are ignored. For profiling one case:
    // `--only=<sender>` (relink, relink4, raw_zmq, std_tcp, relink_user) and `--size=<bytes>` (64, 1024,
    // 65536) narrow the runs; the summary lines need every sender.
    let smoke = support::smoke();
    let quick = support::flag("quick");
    let only = support::arg("only");
    let only_size: Option<usize> = support::arg("size").and_then(|s| s.parse().ok());
    let rounds = if smoke {
        1
    } else if quick {
        5
    } else {
        7
    };
    let plan: Vec<(usize, usize)> = if smoke {
        vec![(64, 20_000), (1024, 5_000), (64 * 1024, 100)]
    } else if quick {
        vec![(64, 300_000), (1024, 60_000), (64 * 1024, 1_800)]
    } else {
        vec![(64, 2_000_000), (1024, 400_000), (64 * 1024, 12_000)]
    };
    let plan: Vec<(usize, usize)> = plan
        .into_iter()
        .filter(|&(size, _)| only_size.map_or(true, |o| o == size))
        .collect();
    let senders: Vec<Client> = Client::ALL
        .into_iter()
        .filter(|s| only.as_deref().map_or(true, |o| o == s.name()))
        .collect();
    assert!(
        !plan.is_empty() && !senders.is_empty(),
        "--only or --size matched nothing"
    );
    println!(
        "throughput: {} rounds{}, frames per run: {}",
        rounds,
        if smoke {
            " (smoke)"
        } else if quick {
            " (quick)"
        } else {
            ""
        },
        plan.iter()
            .map(|(size, n)| format!("{n} x {size} B"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let pki = Pki::new();
    // One short warm-up run of each sender, not counted.
    for &sender in &senders {
        sender.run(1024, if smoke { 1_000 } else { 10_000 }, &pki);
    }

    // mps[size index][sender index] = one figure per round.
    let mut mps = vec![vec![Vec::new(); senders.len()]; plan.len()];
    let began = Instant::now();
    for round in 0..rounds {
        for (si, &(size, frames)) in plan.iter().enumerate() {
            for (ki, &sender) in senders.iter().enumerate() {
                if !sender.runs_at(size) {
                    continue;
                }
                let elapsed = sender.run(size, frames, &pki);
                let rate = frames as f64 / elapsed.as_secs_f64() / 1e6;
                mps[si][ki].push(rate);
                eprintln!(
                    "round {} size {size:>6} {:<14} {:>10} Mfps  {:>8.3} s",
                    round + 1,
                    sender.name(),
                    sig4(rate),
                    elapsed.as_secs_f64()
                );
            }
        }
    }
    println!("measured in {:.1} s", began.elapsed().as_secs_f64());

    println!();
    println!(
        "{:>6}  {:<14}  {:>12}  {:>10}  {:>21}",
        "size", "sender", "median Mfps", "MB/s", "min..max Mfps"
    );
    for (si, &(size, _)) in plan.iter().enumerate() {
        for (ki, sender) in senders.iter().enumerate() {
            let v = &mps[si][ki];
            if v.is_empty() {
                continue;
            }
            let med = median(v);
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(0.0, f64::max);
            let mbps = med * (PREFIX + size) as f64;
            println!(
                "{size:>6}  {:<14}  {:>12}  {:>10.1}  {:>21}",
                sender.name(),
                sig4(med),
                mbps,
                format!("{}..{}", sig4(min), sig4(max))
            );
        }
    }

    if senders.len() < Client::ALL.len() {
        return;
    }
    println!();
    println!("# *_mps: millions of frames per second (median of {rounds} rounds)");
    for (si, &(size, _)) in plan.iter().enumerate() {
        let m: Vec<f64> = mps[si][..5].iter().map(|v| median(v)).collect();
        let (x, x4, y, z, u) = (m[0], m[1], m[2], m[3], m[4]);
        println!(
            "throughput size={size} relink_mps={} relink4_mps={} raw_zmq_mps={} std_tcp_mps={} \
             ratio_raw={:.3} ratio_std={:.3} ratio_4v1={:.3} relink_user_mps={} ratio_user={:.3}",
            sig4(x),
            sig4(x4),
            sig4(y),
            sig4(z),
            x / y,
            x / z,
            x4 / x,
            sig4(u),
            u / x
        );
    }
    for (si, &(size, _)) in plan.iter().enumerate() {
        // Only the columns this line shows: the TLS column is empty at 64 B.
        let m = |sender: Client| median(&mps[si][sender as usize]);
        let (x, z) = (m(Client::Relink), m(Client::StdTcp));
        let (b, t, st) = (
            m(Client::RelinkBatch),
            m(Client::Tokio),
            m(Client::TokioStubborn),
        );
        println!(
            "throughput size={size} relink_batch_mps={} tokio_mps={} tokio_stubborn_mps={} \
             ratio_tokio={:.3} ratio_stubborn={:.3} ratio_batch_std={:.3} \
             ratio_batch_tokio={:.3}",
            sig4(b),
            sig4(t),
            sig4(st),
            x / t,
            x / st,
            b / z,
            b / t
        );
    }
    for (si, &(size, _)) in plan.iter().enumerate() {
        if !Client::RelinkTls.runs_at(size) {
            continue;
        }
        let (x, t) = (median(&mps[si][0]), median(&mps[si][5]));
        println!(
            "throughput_tls size={size} relink_mps={} relink_tls_mps={} ratio_tls={:.3}",
            sig4(x),
            sig4(t),
            t / x
        );
    }
    for (si, &(size, _)) in plan.iter().enumerate() {
        let m = |sender: Client| median(&mps[si][sender as usize]);
        let (own, global) = (m(Client::RelinkOwn), m(Client::RelinkGlobal));
        println!(
            "throughput_pool size={size} relink_mps={} relink_own_mps={} relink_global_mps={} \
             ratio_global_own={:.3}",
            sig4(m(Client::Relink)),
            sig4(own),
            sig4(global),
            global / own
        );
    }
    for (si, &(size, _)) in plan.iter().enumerate() {
        let m = |sender: Client| median(&mps[si][sender as usize]);
        let (x, w, z) = (
            m(Client::Relink),
            m(Client::RelinkWriter),
            m(Client::StdTcp),
        );
        println!(
            "throughput_writer size={size} relink_mps={} relink_writer_mps={} std_tcp_mps={} \
             ratio_writer_std={:.3} ratio_writer_send={:.3}",
            sig4(x),
            sig4(w),
            sig4(z),
            w / z,
            w / x
        );
    }
    for (si, &(size, _)) in plan.iter().enumerate() {
        let m = |sender: Client| median(&mps[si][sender as usize]);
        let (x, s, z, b) = (
            m(Client::Relink),
            m(Client::RelinkSender),
            m(Client::StdTcp),
            m(Client::RelinkBatch),
        );
        println!(
            "throughput_sender size={size} relink_mps={} relink_sender_mps={} std_tcp_mps={} \
             ratio_sender_std={:.3} ratio_sender_send={:.3} ratio_sender_batch={:.3}",
            sig4(x),
            sig4(s),
            sig4(z),
            s / z,
            s / x,
            s / b
        );
    }
    let n = if smoke {
        3
    } else if quick {
        21
    } else {
        51
    };
    let (mut plain, mut tls) = (Vec::new(), Vec::new());
    for _ in 0..n {
        plain.push(connect_time(&pki, false).as_secs_f64() * 1e3);
        tls.push(connect_time(&pki, true).as_secs_f64() * 1e3);
    }
    println!(
        "tls_handshake n={n} connect_ready_ms={:.3} tls_connect_ready_ms={:.3} handshake_ms={:.3}",
        median(&plain),
        median(&tls),
        median(&tls) - median(&plain)
    );
}

/// One link to a fresh sink (TLS or not): the time from `build()` to Ready, the connect
/// being the proof of life (with TLS: the handshake's completion).
fn connect_time(pki: &Pki, tls: bool) -> Duration {
    let sink = Sink::start(0, tls.then(|| support::tls::server_config(pki)));
    let start = Instant::now();
    let mut builder = Link::builder(sink.endpoint());
    if tls {
        builder = builder.tls(support::tls::client(pki));
    }
    let link = builder.build().expect("build the link");
    support::wait_state(
        &link,
        State::Ready,
        Instant::now() + Duration::from_secs(10),
    );
    let took = start.elapsed();
    link.close(Duration::from_secs(1));
    sink.join();
    took
}
