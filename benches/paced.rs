//! Paced traffic: the CPU a client uses for small frames at a steady rate, one every 200 µs
//! (5 000 a second) and one every 2 ms (500 a second), beside the std and tokio clients a
//! user would otherwise write and the floor of relink's design, a raw ZMQ_STREAM client.
//!
//! Run with `cargo bench --bench paced` (5 s per client, case and pace), `-- --quick` (2 s)
//! or `--smoke` (or `RELINK_BENCH_SMOKE=1`: 0.3 s, to show that it runs to the end). Each
//! case runs every client in turn, five rounds (`--rounds N`; one under `--smoke`), each round
//! starting one client further on, and a client's figures are the medians of its rounds: a
//! run's threads land on one core or on two, which moves a single run's CPU by up to 1.5 ×.
//! `--gap-us N` runs one pace (a frame every N µs), `--case in|out|rr` one case, and
//! `--client relink` (or `learnt`, `raw` or `card`) that client alone (no ratios).
//!
//! Three cases, each a line-framed connection to a peer thread on 127.0.0.1:
//! - `in`: the peer writes a line every gap; the client takes each one (relink:
//!   `events().recv_timeout`; std: `BufRead::read_line`; tokio: `FramedRead` with
//!   `LinesCodec` on a current-thread runtime; raw: `recv` of the routing id and the data,
//!   lines cut from the data).
//! - `out`: the client writes a line every gap (relink: `send`; std: `write_all` and
//!   `flush`; tokio: `FramedWrite::send`; raw: `send` of the routing id, then the line); the
//!   peer reads them.
//! - `rr`: request and reply: every gap the client writes a line and waits for the peer's
//!   echo of it.
//!
//! The raw client is what a careful user of the `zmq` crate writes: the pacing thread owns a
//! ZMQ_STREAM socket, takes the routing id from its connect notification, and blocks in
//! `recv` (libzmq's `zmq_poll` on the socket's mailbox) for what comes. A frame wakes two
//! threads (the application's and libzmq's IO thread) where relink's wakes three: it is the
//! floor for a client built on libzmq's ZMQ_STREAM, and `raw_ratio` is relink's CPU over it.
//!
//! The card-minimal client is the least a client of relink's shape costs: the pacing thread
//! and one IO thread (`card-io`) that owns a ZMQ_STREAM socket, a crossbeam channel each way,
//! and an eventfd that the pacing thread writes after each `put` to wake the IO thread out of
//! `zmq::poll` (the socket and the eventfd, `zmq::PollItem::from_fd`); no timers, no state
//! machine, no accounting. The IO thread cuts lines from the data and hands each one over. A
//! frame wakes the same three threads as relink's, so `card_ratio` (relink's CPU over it) is
//! what relink's work beyond that shape costs.
//!
//! relink runs twice: as built by default (`Looks::Never`: every wait sleeps at once) and with
//! `Looks::Learnt` (a waiting thread looks for a reply before it sleeps), the setting that
//! spends CPU for a shorter round trip.
//!
//! Every client paces itself the same way (`thread::sleep` to the next tick). What is
//! measured is the client's CPU, user + system, over its run: this process's
//! (`getrusage(RUSAGE_SELF)`) less the peer thread's own (`CLOCK_THREAD_CPUTIME_ID`), in per
//! cent of one core. One line per case and pace, relink's CPU beside the baselines' and as
//! ratios (above 1: relink uses more), and for `rr` the round trip's p50 and its ratio:
//!
//! `paced case=<in|out|rr> gap_us=<200|2000> relink_cpu_pct=<r> learnt_cpu_pct=<n>
//! card_cpu_pct=<c> raw_cpu_pct=<w> std_cpu_pct=<s> tokio_cpu_pct=<t> card_ratio=<r/c>
//! learnt_card_ratio=<n/c> card_raw_ratio=<c/w> raw_ratio=<r/w> learnt_raw_ratio=<n/w>
//! ratio_std=<r/s> ratio_tokio=<r/t> learnt_ratio_tokio=<n/t> [ relink_p50_us=<..>
//! learnt_p50_us=<..> card_p50_us=<..> raw_p50_us=<..> std_p50_us=<..> tokio_p50_us=<..>
//! rtt_card_ratio=<..> learnt_rtt_card_ratio=<..> rtt_raw_ratio=<..> rtt_ratio_tokio=<..>
//! learnt_rtt_ratio_tokio=<..>]`
//!
//! Before it, where relink's and the raw client's CPU went, thread by thread
//! (`/proc/self/task`: CPU µs and voluntary context switches, each a sleep and so a wake-up,
//! per frame; `app` is the pacing thread, `relink-io` relink's IO thread, `card-io` the
//! card-minimal client's, `ZMQbg-IO-0` libzmq's):
//!
//! `paced threads client=<relink|learnt|card|raw> case=<..> gap_us=<..> <thread>_us=<..>
//! <thread>_wakes=<..> ... all_us=<..> all_wakes=<..>`

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use relink::config::Looks;
use relink::framing::Lines;
use relink::{Event, Link, State};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec};

use support::eventfd::EventFd;
use support::peer::Peer;
use support::threads;
use support::{cpu_time, median, thread_cpu_time};

/// The paces run by default: one frame per this many microseconds.
const GAPS_US: [u64; 2] = [200, 2_000];
/// The longest any one wait of a client may take.
const BOUND: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    In,
    Out,
    Rr,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::In => "in",
            Case::Out => "out",
            Case::Rr => "rr",
        }
    }
}

#[derive(Clone, Copy)]
enum Client {
    Relink(Looks),
    Card,
    Raw,
    Std,
    Tokio,
}

/// What one client's run gave: its CPU in per cent of a core, and the p50 of its round trips
/// (`rr` only).
struct Run {
    cpu_pct: f64,
    p50_us: f64,
}

impl Run {
    /// The median CPU and the median p50 of `rounds`.
    fn median(rounds: Vec<Run>) -> Run {
        let mut cpu: Vec<f64> = rounds.iter().map(|r| r.cpu_pct).collect();
        let mut p50: Vec<f64> = rounds.iter().map(|r| r.p50_us).collect();
        Run {
            cpu_pct: median(&mut cpu),
            p50_us: median(&mut p50),
        }
    }
}

/// The ticks of a run of `window`, `gap` apart: sleeps until each, in turn.
struct Pace {
    next: Instant,
    end: Instant,
    gap: Duration,
}

impl Pace {
    fn new(window: Duration, gap: Duration) -> Pace {
        let now = Instant::now();
        Pace {
            next: now,
            end: now + window,
            gap,
        }
    }

    /// Sleeps until the next tick; false once the run is over.
    fn tick(&mut self) -> bool {
        self.next += self.gap;
        let now = Instant::now();
        if now >= self.end {
            return false;
        }
        if self.next > now {
            thread::sleep(self.next - now);
        }
        true
    }
}

/// The peer of `case`: writes a line every tick (`in`), reads and discards (`out`) or echoes
/// (`rr`), until the connection ends or, writing, `window` has passed; then sends its
/// thread's CPU time.
fn peer(case: Case, gap: Duration, window: Duration, cpu: mpsc::Sender<Duration>) -> Peer {
    Peer::start(move |mut stream: TcpStream, _| {
        threads::name_this(threads::PEER);
        let _ = stream.set_nodelay(true);
        let start = thread_cpu_time();
        match case {
            Case::In => {
                let mut pace = Pace::new(window + Duration::from_millis(200), gap);
                while pace.tick() {
                    if stream.write_all(b"tick\n").is_err() {
                        break;
                    }
                }
            }
            Case::Out => {
                let mut buf = [0u8; 4096];
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            }
            Case::Rr => support::peer::echo(stream, 0),
        }
        let _ = cpu.send(thread_cpu_time() - start);
    })
}

fn run(case: Case, client: Client, gap: Duration, window: Duration) -> Run {
    let (tx, rx) = mpsc::channel();
    let peer = peer(case, gap, window, tx);
    let before = cpu_time();
    let p50_us = match client {
        Client::Relink(looks) => relink(case, looks, &peer.endpoint(), gap, window),
        Client::Card => card_client(case, &peer.endpoint(), gap, window),
        Client::Raw => raw_client(case, &peer.endpoint(), gap, window),
        Client::Std => std_client(case, peer.port(), gap, window),
        Client::Tokio => tokio_client(case, peer.port(), gap, window),
    };
    let peer_cpu = rx.recv_timeout(BOUND).expect("the peer's CPU time");
    let used = (cpu_time() - before).saturating_sub(peer_cpu);
    peer.stop();
    Run {
        cpu_pct: 100.0 * used.as_secs_f64() / window.as_secs_f64(),
        p50_us,
    }
}

/// What a client does for a case: `take` one line (false once none comes), `put` one.
trait LineClient {
    fn take(&mut self) -> bool;
    fn put(&mut self);
}

/// Runs `case` for `window` with `client`; returns the p50 of its round trips in µs (`rr`),
/// 0 for none.
fn drive(case: Case, gap: Duration, window: Duration, client: &mut impl LineClient) -> f64 {
    let mut rtts = Vec::new();
    let mut pace = Pace::new(window, gap);
    match case {
        Case::In => {
            let end = Instant::now() + window;
            while Instant::now() < end && client.take() {}
        }
        Case::Out => {
            while pace.tick() {
                client.put();
            }
        }
        Case::Rr => {
            while pace.tick() {
                let sent = Instant::now();
                client.put();
                assert!(client.take(), "no reply");
                rtts.push(sent.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    median(&mut rtts)
}

impl LineClient for Link {
    fn take(&mut self) -> bool {
        loop {
            match self.events().recv_timeout(BOUND) {
                Ok(Event::Frame(_)) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    fn put(&mut self) {
        self.send("tick").expect("send");
    }
}

fn relink(case: Case, looks: Looks, endpoint: &str, gap: Duration, window: Duration) -> f64 {
    let mut link = Link::builder(endpoint)
        .framing(Lines::new())
        .looks(looks)
        .build()
        .expect("build the link");
    support::wait_state(&link, State::Ready, Instant::now() + BOUND);
    let before = threads::Threads::read();
    let p50 = drive(case, gap, window, &mut link);
    let after = threads::Threads::read();
    print_threads(
        if looks == Looks::Learnt {
            "learnt"
        } else {
            "relink"
        },
        case,
        gap,
        window,
        &after.since(&before),
    );
    link.close(Duration::from_secs(1));
    p50
}

/// Prints the `paced threads` line: what each thread of `client` used per frame.
fn print_threads(
    client: &str,
    case: Case,
    gap: Duration,
    window: Duration,
    used: &threads::Threads,
) {
    let frames = (window.as_micros() / gap.as_micros()).max(1) as f64;
    println!(
        "paced threads client={client} case={} gap_us={}{}",
        case.name(),
        gap.as_micros(),
        used.per_frame(frames)
    );
}

/// The raw ZMQ_STREAM client: the pacing thread owns the socket and blocks in `recv`; lines
/// are cut from the data chunks as they come (ZMQ_STREAM keeps no message boundaries).
struct RawLines {
    socket: zmq::Socket,
    rid: Vec<u8>,
    /// Bytes received and not yet taken as lines.
    buf: Vec<u8>,
}

impl LineClient for RawLines {
    fn take(&mut self) -> bool {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                self.buf.drain(..=end);
                return true;
            }
            // A message is two frames: the routing id, then the data (empty: disconnected).
            let Ok(_rid) = self.socket.recv_msg(0) else {
                return false;
            };
            match self.socket.recv_msg(0) {
                Ok(data) if !data.is_empty() => self.buf.extend_from_slice(&data),
                _ => return false,
            }
        }
    }

    fn put(&mut self) {
        self.socket
            .send(&self.rid[..], zmq::SNDMORE)
            .expect("send rid");
        self.socket.send(&b"tick\n"[..], 0).expect("send line");
    }
}

fn raw_client(case: Case, endpoint: &str, gap: Duration, window: Duration) -> f64 {
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::STREAM).expect("a stream socket");
    socket.set_linger(100).expect("linger");
    socket
        .set_rcvtimeo(BOUND.as_millis() as i32)
        .expect("rcvtimeo");
    socket.connect(endpoint).expect("connect");
    // With STREAM_NOTIFY (the default) the connection announces itself: `[rid, ""]`.
    let rid = socket.recv_bytes(0).expect("the connect notification");
    let empty = socket
        .recv_bytes(0)
        .expect("the connect notification's body");
    assert!(empty.is_empty(), "expected the connect notification");
    let mut client = RawLines {
        socket,
        rid,
        buf: Vec::new(),
    };
    let before = threads::Threads::read();
    let p50 = drive(case, gap, window, &mut client);
    let after = threads::Threads::read();
    print_threads("raw", case, gap, window, &after.since(&before));
    drop(client);
    drop(ctx);
    p50
}

/// The card-minimal client's pacing-thread side: lines out over one channel (and a write to
/// the eventfd), lines in over the other.
struct CardLines {
    out: Option<crossbeam_channel::Sender<&'static [u8]>>,
    lines: crossbeam_channel::Receiver<Vec<u8>>,
    wake: std::sync::Arc<EventFd>,
    io: Option<thread::JoinHandle<()>>,
}

impl LineClient for CardLines {
    fn take(&mut self) -> bool {
        self.lines.recv_timeout(BOUND).is_ok()
    }

    fn put(&mut self) {
        let out = self.out.as_ref().expect("open");
        out.send(b"tick\n").expect("the IO thread");
        self.wake.wake();
    }
}

impl Drop for CardLines {
    fn drop(&mut self) {
        // The IO thread ends when it finds the channel closed.
        self.out = None;
        self.wake.wake();
        if let Some(io) = self.io.take() {
            let _ = io.join();
        }
    }
}

/// The card-minimal client's IO thread: connects, says so, then waits in `zmq::poll` on the
/// socket and the eventfd (bounded, so that a lost peer cannot hang the bench); sends what
/// the channel holds when woken, reads to EAGAIN and hands each line over when data comes.
fn card_io(
    endpoint: String,
    out: crossbeam_channel::Receiver<&'static [u8]>,
    lines: crossbeam_channel::Sender<Vec<u8>>,
    wake: std::sync::Arc<EventFd>,
) {
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::STREAM).expect("a stream socket");
    socket.set_linger(100).expect("linger");
    socket.connect(&endpoint).expect("connect");
    let mut rid = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let mut items = [
            socket.as_poll_item(zmq::POLLIN),
            zmq::PollItem::from_fd(wake.raw(), zmq::POLLIN),
        ];
        if zmq::poll(&mut items, BOUND.as_millis() as i64).expect("poll") == 0 {
            return;
        }
        let (data_in, woken) = (items[0].is_readable(), items[1].is_readable());
        if woken {
            wake.drain();
            loop {
                match out.try_recv() {
                    Ok(line) => {
                        socket.send(&rid[..], zmq::SNDMORE).expect("send rid");
                        socket.send(line, 0).expect("send line");
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return,
                }
            }
        }
        if data_in {
            // A message is two frames: the routing id, then the data (empty: connected or
            // disconnected).
            while let Ok(id) = socket.recv_msg(zmq::DONTWAIT) {
                let data = socket.recv_msg(0).expect("the data frame");
                if data.is_empty() {
                    if rid.is_empty() {
                        rid = id.to_vec();
                        // The empty line says: connected.
                        let _ = lines.send(Vec::new());
                    } else {
                        return;
                    }
                    continue;
                }
                buf.extend_from_slice(&data);
                while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    if lines.send(line).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

fn card_client(case: Case, endpoint: &str, gap: Duration, window: Duration) -> f64 {
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let (lines_tx, lines_rx) = crossbeam_channel::unbounded();
    let wake = std::sync::Arc::new(EventFd::new());
    let io = {
        let (endpoint, wake) = (endpoint.to_string(), wake.clone());
        thread::Builder::new()
            .name("card-io".into())
            .spawn(move || card_io(endpoint, out_rx, lines_tx, wake))
            .expect("spawn the IO thread")
    };
    let connected = lines_rx
        .recv_timeout(BOUND)
        .expect("the connect notification");
    assert!(connected.is_empty(), "expected the connect notification");
    let mut client = CardLines {
        out: Some(out_tx),
        lines: lines_rx,
        wake,
        io: Some(io),
    };
    let before = threads::Threads::read();
    let p50 = drive(case, gap, window, &mut client);
    let after = threads::Threads::read();
    print_threads("card", case, gap, window, &after.since(&before));
    drop(client);
    p50
}

/// std's client: a `BufReader` on one handle of the stream, writes on the other.
struct StdLines {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: String,
}

impl LineClient for StdLines {
    fn take(&mut self) -> bool {
        self.line.clear();
        self.reader.read_line(&mut self.line).unwrap_or(0) > 0
    }

    fn put(&mut self) {
        self.writer.write_all(b"tick\n").expect("write");
        self.writer.flush().expect("flush");
    }
}

fn std_client(case: Case, port: u16, gap: Duration, window: Duration) -> f64 {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream.set_read_timeout(Some(BOUND)).expect("read timeout");
    let mut client = StdLines {
        reader: BufReader::new(stream.try_clone().expect("clone the stream")),
        writer: stream,
        line: String::new(),
    };
    drive(case, gap, window, &mut client)
}

/// tokio's client: `FramedRead` and `FramedWrite` with `LinesCodec` on the halves of one
/// stream, driven by a current-thread runtime from the pacing thread.
struct TokioLines {
    rt: tokio::runtime::Runtime,
    reader: FramedRead<OwnedReadHalf, LinesCodec>,
    writer: FramedWrite<OwnedWriteHalf, LinesCodec>,
}

impl LineClient for TokioLines {
    fn take(&mut self) -> bool {
        let reader = &mut self.reader;
        let next = self
            .rt
            .block_on(async { tokio::time::timeout(BOUND, reader.next()).await });
        matches!(next, Ok(Some(Ok(_))))
    }

    fn put(&mut self) {
        self.rt.block_on(self.writer.send("tick")).expect("send");
    }
}

fn tokio_client(case: Case, port: u16, gap: Duration, window: Duration) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let stream = rt
        .block_on(tokio::net::TcpStream::connect(("127.0.0.1", port)))
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (r, w) = stream.into_split();
    let mut client = TokioLines {
        rt,
        reader: FramedRead::new(r, LinesCodec::new()),
        writer: FramedWrite::new(w, LinesCodec::new()),
    };
    drive(case, gap, window, &mut client)
}

fn main() {
    // `cargo bench` adds `--bench`; every argument but `--quick`, `--smoke`, `--gap-us`,
    // `--case`, `--client` and `--rounds` is ignored.
    let smoke = support::smoke();
    let window = Duration::from_millis(if smoke {
        300
    } else if support::flag("quick") {
        2_000
    } else {
        5_000
    });
    let rounds_per_case: usize = match support::arg("rounds") {
        Some(r) => r.parse().expect("--rounds takes a count"),
        None if smoke => 1,
        None => 5,
    };
    assert!(rounds_per_case > 0, "--rounds takes at least 1");
    let gaps: Vec<u64> = match support::arg("gap-us") {
        Some(g) => vec![g.parse().expect("--gap-us takes microseconds")],
        None => GAPS_US.to_vec(),
    };
    let cases: Vec<Case> = match support::arg("case").as_deref() {
        None => vec![Case::In, Case::Out, Case::Rr],
        Some("in") => vec![Case::In],
        Some("out") => vec![Case::Out],
        Some("rr") => vec![Case::Rr],
        Some(other) => panic!("--case takes in, out or rr, not {other}"),
    };
    let clients: Vec<Client> = match support::arg("client").as_deref() {
        None => vec![
            Client::Relink(Looks::Never),
            Client::Relink(Looks::Learnt),
            Client::Card,
            Client::Raw,
            Client::Std,
            Client::Tokio,
        ],
        Some("relink") => vec![Client::Relink(Looks::Never)],
        Some("learnt") => vec![Client::Relink(Looks::Learnt)],
        Some("card") => vec![Client::Card],
        Some("raw") => vec![Client::Raw],
        Some(other) => panic!("--client takes relink, learnt, card or raw, not {other}"),
    };
    for gap_us in gaps {
        let gap = Duration::from_micros(gap_us);
        println!(
            "paced: a frame every {gap_us} µs, {} ms per client and case, {rounds_per_case} \
             rounds",
            window.as_millis()
        );
        for &case in &cases {
            // Rounds of every client in turn; each client's figures are the medians of its
            // rounds, so that one round whose threads the scheduler placed well or badly does
            // not decide a ratio. Each round starts one client further on, so that no client
            // always runs right after the same one.
            let mut rounds: Vec<Vec<Run>> = clients.iter().map(|_| Vec::new()).collect();
            for round in 0..rounds_per_case {
                for k in 0..clients.len() {
                    let i = (k + round) % clients.len();
                    rounds[i].push(run(case, clients[i], gap, window));
                }
            }
            let runs: Vec<Run> = rounds.into_iter().map(Run::median).collect();
            let [relink, learnt, card, raw, std, tokio] = match runs.as_slice() {
                [relink, learnt, card, raw, std, tokio] => [relink, learnt, card, raw, std, tokio],
                [one] => {
                    println!(
                        "paced case={} gap_us={gap_us} {}_cpu_pct={:.1} {}_p50_us={:.1}",
                        case.name(),
                        support::arg("client").unwrap_or_default(),
                        one.cpu_pct,
                        support::arg("client").unwrap_or_default(),
                        one.p50_us
                    );
                    continue;
                }
                _ => unreachable!("one client or six"),
            };
            let round_trip = if case == Case::Rr {
                format!(
                    " relink_p50_us={:.1} learnt_p50_us={:.1} card_p50_us={:.1} raw_p50_us={:.1} \
                     std_p50_us={:.1} tokio_p50_us={:.1} rtt_card_ratio={:.2} \
                     learnt_rtt_card_ratio={:.2} rtt_raw_ratio={:.2} rtt_ratio_tokio={:.2} \
                     learnt_rtt_ratio_tokio={:.2}",
                    relink.p50_us,
                    learnt.p50_us,
                    card.p50_us,
                    raw.p50_us,
                    std.p50_us,
                    tokio.p50_us,
                    relink.p50_us / card.p50_us.max(0.01),
                    learnt.p50_us / card.p50_us.max(0.01),
                    relink.p50_us / raw.p50_us.max(0.01),
                    relink.p50_us / tokio.p50_us.max(0.01),
                    learnt.p50_us / tokio.p50_us.max(0.01)
                )
            } else {
                String::new()
            };
            println!(
                "paced case={} gap_us={gap_us} relink_cpu_pct={:.1} learnt_cpu_pct={:.1} \
                 card_cpu_pct={:.1} raw_cpu_pct={:.1} std_cpu_pct={:.1} tokio_cpu_pct={:.1} \
                 card_ratio={:.2} learnt_card_ratio={:.2} card_raw_ratio={:.2} raw_ratio={:.2} \
                 learnt_raw_ratio={:.2} ratio_std={:.2} ratio_tokio={:.2} \
                 learnt_ratio_tokio={:.2}{round_trip}",
                case.name(),
                relink.cpu_pct,
                learnt.cpu_pct,
                card.cpu_pct,
                raw.cpu_pct,
                std.cpu_pct,
                tokio.cpu_pct,
                relink.cpu_pct / card.cpu_pct.max(0.01),
                learnt.cpu_pct / card.cpu_pct.max(0.01),
                card.cpu_pct / raw.cpu_pct.max(0.01),
                relink.cpu_pct / raw.cpu_pct.max(0.01),
                learnt.cpu_pct / raw.cpu_pct.max(0.01),
                relink.cpu_pct / std.cpu_pct.max(0.01),
                relink.cpu_pct / tokio.cpu_pct.max(0.01),
                learnt.cpu_pct / tokio.cpu_pct.max(0.01),
            );
        }
    }
}
