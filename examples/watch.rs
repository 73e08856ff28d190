//! `watch`: a live one-line status of a link whose server keeps going away.
//!
//! Run it with `cargo run --example watch` (no setup: it runs its own echo server on
//! 127.0.0.1), or `cargo run --example watch -- --secs 60` for a longer run. Ctrl-C ends it
//! early with a graceful close.
//!
//! The example starts a line-echo server in-process and kills it (every connection dropped,
//! the port refused) for 3 s out of every 8, while a producer sends a frame every 100 ms and a
//! heartbeat pings every 300 ms. One status line is redrawn in place: state, attempt, the
//! countdown to the next retry, the heartbeat round trip, the outbox depth, frames sent and
//! received. State changes and server events are printed above it. When stdout is not a
//! terminal, each refresh is printed as its own line instead.

use std::io::{self, IsTerminal, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use clap::Parser;
use relink::framing::Lines;
use relink::protocol::Ping;
use relink::{Event, Heartbeat, Link, Metrics, State};

/// How often the status line is redrawn.
const REFRESH: Duration = Duration::from_millis(200);
/// The server's schedule: up for `PERIOD - DOWN`, then down for `DOWN`, again and again.
const PERIOD: Duration = Duration::from_secs(8);
const DOWN: Duration = Duration::from_secs(3);
/// Time between two frames of the producer.
const SEND_EVERY: Duration = Duration::from_millis(100);
/// Heartbeat interval.
const HEARTBEAT: Duration = Duration::from_millis(300);

/// A live status line for a link whose server goes down 3 s out of every 8.
#[derive(Debug, Parser)]
#[command(name = "watch")]
struct Cli {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 25)]
    secs: u64,
}

/// A line-echo server on 127.0.0.1 that can be killed: listener closed and every connection
/// shut down.
struct EchoServer {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl EchoServer {
    fn start(listener: TcpListener) -> io::Result<EchoServer> {
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acceptor = thread::Builder::new()
            .name("echo-accept".into())
            .spawn(move || {
                let mut conns = Vec::new();
                while !flag.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let flag = flag.clone();
                            conns.push(thread::spawn(move || echo(stream, &flag)));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => break,
                    }
                }
                conns
            })?;
        Ok(EchoServer {
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// Closes the listener and every connection; returns once all are closed.
    fn kill(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            for conn in acceptor.join().unwrap_or_default() {
                let _ = conn.join();
            }
        }
    }
}

/// Echoes bytes back until the peer leaves or the server is killed.
fn echo(mut stream: TcpStream, stop: &AtomicBool) {
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .is_err()
    {
        return;
    }
    let mut buf = [0u8; 8192];
    while !stop.load(Ordering::SeqCst) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A listener on a port below the kernel's ephemeral range: a client redialling a closed port
/// inside that range can be given the very same port as its own and connect to itself.
fn bind_below_ephemeral() -> io::Result<TcpListener> {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
        .max(12_000);
    let span = u32::from(low) - 10_000;
    let first = std::process::id() % span;
    let mut last_err = None;
    for i in 0..span.min(1000) {
        let port = 10_000 + ((first + i * 997) % span) as u16;
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return Ok(l),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port")))
}

/// Draws the status line: redrawn in place on a terminal, one line per refresh otherwise.
struct Screen {
    tty: bool,
    out: io::Stdout,
    start: Instant,
}

impl Screen {
    /// A line that stays (an event), printed above the status line.
    fn note(&self, text: &str) {
        let mut out = self.out.lock();
        let t = self.start.elapsed().as_secs_f64();
        if self.tty {
            let _ = write!(out, "\r\x1b[2K");
        }
        let _ = writeln!(out, "{t:6.2}s  {text}");
        let _ = out.flush();
    }

    fn status(&self, m: &Metrics, refused: u64) {
        let retry = match m.next_retry_in {
            Some(d) if matches!(m.state, State::Backoff | State::Cooldown) => {
                format!("retry in {:>5} ms", d.as_millis())
            }
            _ => "                 ".to_string(),
        };
        let rtt = m
            .last_rtt
            .map(|d| format!("{:.2} ms", d.as_secs_f64() * 1e3))
            .unwrap_or_else(|| "-".into());
        let line = format!(
            "{:<10} attempt {:>2}  {retry}  rtt {rtt:>8}  outbox {:>3}  sent {:>4}  received {:>4}  \
             refused {refused}  abandoned {}",
            m.state.name(),
            m.attempt,
            m.outbox_frames,
            m.frames_sent,
            m.frames_received,
            m.abandoned.total(),
        );
        let mut out = self.out.lock();
        let t = self.start.elapsed().as_secs_f64();
        if self.tty {
            let _ = write!(out, "\r\x1b[2K{t:6.2}s  {line}");
        } else {
            let _ = writeln!(out, "{t:6.2}s  {line}");
        }
        let _ = out.flush();
    }

    fn end(&self) {
        if self.tty {
            let mut out = self.out.lock();
            let _ = writeln!(out);
            let _ = out.flush();
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;

    let listener = bind_below_ephemeral()?;
    let port = listener.local_addr()?.port();
    let mut server = Some(EchoServer::start(listener)?);

    let link = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(Lines::new())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(100);
            r.backoff_max = Duration::from_secs(2);
        })
        .heartbeat(
            Heartbeat::new(HEARTBEAT, Ping::Frame(b"ping".to_vec())).reply(|f: &[u8]| f == b"ping"),
        )
        .build()?;

    let screen = Screen {
        tty: io::stdout().is_terminal(),
        out: io::stdout(),
        start: Instant::now(),
    };
    screen.note(&format!(
        "echo server on 127.0.0.1:{port}, down {}s out of every {}s; running {}s",
        DOWN.as_secs(),
        PERIOD.as_secs(),
        cli.secs
    ));

    // The producer: one frame every 100 ms, refused ones counted.
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let producer = {
        let (link, stop, refused) = (link.clone(), stop.clone(), refused.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            let mut next = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                if link.send(format!("frame {n}")).is_err() {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
                next += SEND_EVERY;
                thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        })
    };

    let run_for = Duration::from_secs(cli.secs);
    let mut next_refresh = Instant::now();
    while screen.start.elapsed() < run_for && !interrupted.load(Ordering::SeqCst) {
        // The server's schedule.
        let phase =
            Duration::from_nanos((screen.start.elapsed().as_nanos() % PERIOD.as_nanos()) as u64);
        let should_be_up = phase < PERIOD - DOWN;
        if should_be_up && server.is_none() {
            match TcpListener::bind(("127.0.0.1", port)).and_then(EchoServer::start) {
                Ok(s) => {
                    server = Some(s);
                    screen.note("server: up");
                }
                Err(e) => screen.note(&format!("server: cannot listen again yet: {e}")),
            }
        } else if !should_be_up {
            if let Some(s) = server.take() {
                s.kill();
                screen.note(&format!("server: killed for {} s", DOWN.as_secs()));
            }
        }

        let now = Instant::now();
        if now >= next_refresh {
            screen.status(&link.metrics(), refused.load(Ordering::Relaxed));
            next_refresh = now + REFRESH;
        }
        match link
            .events()
            .recv_timeout(next_refresh.saturating_duration_since(Instant::now()))
        {
            Ok(Event::State(t)) => screen.note(&format!(
                "link: {} -> {} ({}), attempt {}{}",
                t.from,
                t.to,
                t.cause,
                t.attempt,
                t.next_retry
                    .map(|d| format!(", next try in {} ms", d.as_millis()))
                    .unwrap_or_default()
            )),
            Ok(Event::Abandoned { frame, reason }) => screen.note(&format!(
                "link: abandoned {:?} ({reason})",
                String::from_utf8_lossy(&frame)
            )),
            Ok(Event::Error(e)) => screen.note(&format!("link: error: {e}")),
            // Echoed frames are counted in the metrics.
            Ok(_) | Err(_) => {}
        }
    }

    stop.store(true, Ordering::SeqCst);
    let _ = producer.join();
    let m = link.close(Duration::from_secs(1));
    while let Ok(ev) = link.events().try_recv() {
        if let Event::Abandoned { frame, reason } = ev {
            screen.note(&format!(
                "link: abandoned {:?} ({reason})",
                String::from_utf8_lossy(&frame)
            ));
        }
    }
    screen.status(&m, refused.load(Ordering::Relaxed));
    screen.end();
    println!(
        "done: {} submitted = {} confirmed + {} refused + {} abandoned + {} queued; {} received; \
         {} connects, {} reconnects, last outage {}",
        m.frames_submitted,
        m.frames_confirmed,
        m.frames_rejected,
        m.abandoned.total(),
        m.outbox_frames,
        m.frames_received,
        m.connects,
        m.reconnects,
        m.last_outage
            .map(|d| format!("{} ms", d.as_millis()))
            .unwrap_or_else(|| "-".into()),
    );
    if let Some(s) = server {
        s.kill();
    }
    Ok(())
}
