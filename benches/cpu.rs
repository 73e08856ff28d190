//! Where one frame's CPU goes, thread by thread: the producer, relink's IO thread, libzmq's
//! IO thread and the sink, for each way of sending, beside std's `TcpStream` + `BufWriter`.
//!
//! Run with `cargo bench --bench cpu` (about half a minute; `-- --frames N` and
//! `-- --rounds R` change the counts, 2 000 000 frames of 64 B and 5 rounds by default).
//!
//! Throughput on two cores shared by four busy threads is set by the CPU all of them use
//! per frame, and the rounds of `benches/throughput.rs` are too short and too noisy to show
//! a change of a few per cent. Here each thread's CPU time is read from the kernel's
//! accounting before and after a round (`/proc/self/task/*/schedstat`, in nanoseconds, taken
//! while those threads wait; the producer and the sink read their own clocks), so the figures
//! do not depend on how the threads were scheduled. Linux only.
//!
//! Each round: a link with `LengthDelimited::len32()` and `Overflow::Block` to a sink on
//! 127.0.0.1 that only reads, Ready before the round starts; `N` frames of 64 B; the round
//! ends when the sink has read every byte. Senders:
//!
//! - `send`: `Link::send` per frame (a `Bytes` of a static payload);
//! - `sender`: `Link::sender()`'s `send(&[u8])`, each frame handed over at once through the
//!   sender's single-producer ring;
//! - `writer`: `Link::writer()`'s `send(&[u8])`, 1 024 frames a hand-over, `flush` at the end;
//! - `batch`: `send_batch` of 1 024 frames, built per batch;
//! - `raw_zmq`: a ZMQ_STREAM socket, one message per frame (prefix and payload);
//! - `std`: the prefix and the payload through a `BufWriter` (8 KiB) on a `TcpStream`;
//! - `tokio`: the tokio client a user would write (`benches/support/tokio_client.rs`: a
//!   runtime thread owning `FramedWrite<_, LengthDelimitedCodec>` behind a bounded mpsc
//!   handle, its channel 100 000 frames as in the throughput bench).
//!
//! One line per sender, the median of the rounds, in nanoseconds of CPU per frame:
//!
//! `cpu sender=<name> producer_ns=<p> io_ns=<i> zmq_ns=<z> sink_ns=<s> all_ns=<a> wall_ns=<w>`
//!
//! `io` is the sender's own IO thread (relink's, or the tokio client's runtime thread), `zmq`
//! libzmq's threads, `all` every thread of the process, `wall` the round's time per frame.
//! Then the CPU per frame of all threads as ratios, relink's over each baseline's (below 1:
//! relink uses less):
//!
//! `cpu_ratio send_std=<x> sender_std=<x> writer_std=<x> batch_std=<x> send_raw_zmq=<x> send_tokio=<x>`

mod support;

use std::collections::HashMap;
use std::io::{BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use relink::Batch;
use support::tokio_client::TokioClient;

const SIZE: usize = 64;
static PAYLOAD: [u8; SIZE] = [0xA5; SIZE];
/// The longest a round may take before the bench gives up on it.
const ROUND_BOUND: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sender {
    Send,
    Lane,
    Writer,
    Batch,
    RawZmq,
    Std,
    Tokio,
}

impl Sender {
    const ALL: [Sender; 7] = [
        Sender::Send,
        Sender::Lane,
        Sender::Writer,
        Sender::Batch,
        Sender::RawZmq,
        Sender::Std,
        Sender::Tokio,
    ];

    fn name(self) -> &'static str {
        match self {
            Sender::Send => "send",
            Sender::Lane => "sender",
            Sender::Writer => "writer",
            Sender::Batch => "batch",
            Sender::RawZmq => "raw_zmq",
            Sender::Std => "std",
            Sender::Tokio => "tokio",
        }
    }

    fn is_relink(self) -> bool {
        matches!(
            self,
            Sender::Send | Sender::Lane | Sender::Writer | Sender::Batch
        )
    }
}

/// A baseline's connection to the sink.
enum Baseline {
    RawZmq {
        // The socket before the context: dropped first.
        socket: zmq::Socket,
        _ctx: zmq::Context,
        rid: Vec<u8>,
    },
    Std(BufWriter<TcpStream>),
    Tokio(TokioClient),
}

fn connect_baseline(sender: Sender, port: u16) -> Option<Baseline> {
    match sender {
        Sender::RawZmq => {
            let ctx = zmq::Context::new();
            let socket = ctx.socket(zmq::STREAM).expect("stream socket");
            socket.set_sndhwm(100_000).expect("sndhwm");
            socket.set_linger(1000).expect("linger");
            socket.set_rcvtimeo(10_000).expect("rcvtimeo");
            socket
                .connect(&format!("tcp://127.0.0.1:{port}"))
                .expect("connect");
            // The connect notification [rid, ""] gives the routing id of the connection.
            let rid = socket.recv_bytes(0).expect("connect notification");
            let empty = socket.recv_bytes(0).expect("connect notification body");
            assert!(empty.is_empty(), "expected the connect notification");
            Some(Baseline::RawZmq {
                socket,
                _ctx: ctx,
                rid,
            })
        }
        Sender::Std => Some(Baseline::Std(BufWriter::new(
            TcpStream::connect(("127.0.0.1", port)).expect("connect"),
        ))),
        Sender::Tokio => Some(Baseline::Tokio(TokioClient::with_channel(
            ([127, 0, 0, 1], port).into(),
            false,
            100_000,
        ))),
        _ => None,
    }
}

/// Nanoseconds of CPU per thread, by task id, with each thread's name.
fn threads() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if let Some(ns) = schedstat(&path.join("schedstat")) {
            out.insert(tid, (name.trim().to_string(), ns));
        }
    }
    out
}

/// The first field of a `schedstat` file: nanoseconds on a CPU.
fn schedstat(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This thread's CPU time so far, in nanoseconds.
fn own_cpu() -> u64 {
    support::thread_cpu_time().as_nanos() as u64
}

/// This thread's task id.
fn own_tid() -> Option<u32> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// One round's CPU per frame, by group of threads, in nanoseconds.
#[derive(Clone, Copy)]
struct Round {
    producer: f64,
    io: f64,
    zmq: f64,
    sink: f64,
    all: f64,
    wall: f64,
}

/// A sink on 127.0.0.1 that reads one connection until `expected` bytes have come, and says
/// when, with the CPU its thread used meanwhile.
struct Sink {
    port: u16,
    done: mpsc::Receiver<Result<u64, String>>,
    thread: thread::JoinHandle<()>,
}

impl Sink {
    fn start(expected: u64) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the sink");
        let port = listener.local_addr().expect("the sink's address").port();
        let (tx, done) = mpsc::channel();
        let thread = thread::spawn(move || {
            let (mut stream, _) = match listener.accept() {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(Err(format!("accept: {e}")));
                    return;
                }
            };
            let _ = stream.set_read_timeout(Some(ROUND_BOUND));
            let started = own_cpu();
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            let result = loop {
                if total >= expected {
                    break Ok(own_cpu() - started);
                }
                match stream.read(&mut buf) {
                    Ok(0) => break Err(format!("eof after {total} of {expected} bytes")),
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
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
        Sink { port, done, thread }
    }

    /// The sink's CPU for the round, once it has read every byte.
    fn wait(&self) -> u64 {
        match self.done.recv_timeout(ROUND_BOUND) {
            Ok(Ok(ns)) => ns,
            Ok(Err(e)) => panic!("sink failed: {e}"),
            Err(e) => panic!("sink did not finish within {ROUND_BOUND:?}: {e}"),
        }
    }
}

fn round(sender: Sender, frames: usize) -> Round {
    let expected = (frames * (4 + SIZE)) as u64;
    let sink = Sink::start(expected);
    let link = sender
        .is_relink()
        .then(|| support::ready_len32_link(&format!("tcp://127.0.0.1:{}", sink.port), ROUND_BOUND));
    let mut baseline = connect_baseline(sender, sink.port);
    let before = threads();
    let producer_before = own_cpu();
    let start = Instant::now();
    match (sender, &link, &mut baseline) {
        (Sender::Send, Some(link), _) => {
            for _ in 0..frames {
                link.send(Bytes::from_static(&PAYLOAD)).expect("send");
            }
        }
        (Sender::Lane, Some(link), _) => {
            let mut sender = link.producer();
            for _ in 0..frames {
                sender.send(PAYLOAD).expect("sender send");
            }
        }
        (Sender::Writer, Some(link), _) => {
            let mut writer = link.writer();
            for _ in 0..frames {
                writer.send(PAYLOAD).expect("writer send");
            }
            writer.flush().expect("flush");
        }
        (Sender::Batch, Some(link), _) => {
            let mut left = frames;
            while left > 0 {
                let n = left.min(1024);
                let mut batch = Batch::with_capacity(n, n * SIZE);
                for _ in 0..n {
                    batch.push(PAYLOAD);
                }
                link.send_batch(batch, relink::SendOptions::new())
                    .expect("send_batch");
                left -= n;
            }
        }
        (Sender::RawZmq, _, Some(Baseline::RawZmq { socket, rid, .. })) => {
            let mut message = Vec::with_capacity(4 + SIZE);
            message.extend_from_slice(&(SIZE as u32).to_be_bytes());
            message.extend_from_slice(&PAYLOAD);
            for _ in 0..frames {
                socket.send(&rid[..], zmq::SNDMORE).expect("send rid");
                socket.send(&message[..], 0).expect("send frame");
            }
        }
        (Sender::Std, _, Some(Baseline::Std(stream))) => {
            let prefix = (SIZE as u32).to_be_bytes();
            for _ in 0..frames {
                stream.write_all(&prefix).expect("write prefix");
                stream.write_all(&PAYLOAD).expect("write payload");
            }
            stream.flush().expect("flush");
        }
        (Sender::Tokio, _, Some(Baseline::Tokio(client))) => {
            for _ in 0..frames {
                client.send(Bytes::from_static(&PAYLOAD));
            }
        }
        _ => unreachable!("each sender has its transport"),
    }
    let producer = own_cpu() - producer_before;
    let sink_ns = sink.wait();
    let wall = start.elapsed();
    let after = threads();
    let me = own_tid();
    // Every thread but this one from the kernel's accounting; this one from its own clock.
    let (mut io, mut zmq, mut all) = (0u64, 0u64, producer);
    for (tid, (name, ns)) in &after {
        if Some(*tid) == me {
            continue;
        }
        let used = ns.saturating_sub(before.get(tid).map_or(0, |(_, b)| *b));
        all += used;
        if name.starts_with("relink-io") || name.starts_with("tokio-client") {
            io += used;
        } else if name.starts_with("ZMQbg") {
            zmq += used;
        }
    }
    let per = |ns: u64| ns as f64 / frames as f64;
    let r = Round {
        producer: per(producer),
        io: per(io),
        zmq: per(zmq),
        sink: per(sink_ns),
        all: per(all),
        wall: per(wall.as_nanos() as u64),
    };
    if let Some(link) = link {
        link.close(Duration::from_secs(5));
    }
    match baseline {
        Some(Baseline::Tokio(client)) => client.finish(),
        other => drop(other),
    }
    let _ = sink.thread.join();
    r
}

fn main() {
    if std::fs::metadata("/proc/self/task").is_err() || own_tid().is_none() {
        println!("cpu: no per-thread CPU accounting here (/proc/self/task); nothing measured");
        return;
    }
    let smoke = support::smoke();
    let frames: usize = support::arg("frames")
        .and_then(|f| f.parse().ok())
        .unwrap_or(if smoke { 20_000 } else { 2_000_000 });
    let rounds: usize = support::arg("rounds")
        .and_then(|r| r.parse().ok())
        .unwrap_or(if smoke { 1 } else { 5 });
    println!("cpu: {rounds} rounds of {frames} frames of {SIZE} B per sender, senders in turn");
    let mut all: Vec<Vec<Round>> = vec![Vec::new(); Sender::ALL.len()];
    for _ in 0..rounds {
        for (i, sender) in Sender::ALL.into_iter().enumerate() {
            all[i].push(round(sender, frames));
        }
    }
    println!("# ns of CPU per frame, median of the rounds");
    let med = |i: usize, f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = all[i].iter().map(f).collect();
        support::median(&mut v)
    };
    for (i, sender) in Sender::ALL.into_iter().enumerate() {
        let med = |f: fn(&Round) -> f64| med(i, f);
        println!(
            "cpu sender={} producer_ns={:.1} io_ns={:.1} zmq_ns={:.1} sink_ns={:.1} all_ns={:.1} wall_ns={:.1}",
            sender.name(),
            med(|r| r.producer),
            med(|r| r.io),
            med(|r| r.zmq),
            med(|r| r.sink),
            med(|r| r.all),
            med(|r| r.wall),
        );
    }
    let all_of = |sender: Sender| {
        let i = Sender::ALL
            .iter()
            .position(|s| *s == sender)
            .expect("a sender");
        med(i, |r| r.all)
    };
    let ratio = |a: Sender, b: Sender| all_of(a) / all_of(b);
    println!(
        "cpu_ratio send_std={:.3} sender_std={:.3} writer_std={:.3} batch_std={:.3} send_raw_zmq={:.3} send_tokio={:.3}",
        ratio(Sender::Send, Sender::Std),
        ratio(Sender::Lane, Sender::Std),
        ratio(Sender::Writer, Sender::Std),
        ratio(Sender::Batch, Sender::Std),
        ratio(Sender::Send, Sender::RawZmq),
        ratio(Sender::Send, Sender::Tokio),
    );
}
