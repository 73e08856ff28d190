//! The reconnect-storm benchmark: a fleet of clients loses its server at once; how does it come
//! back?
//!
//! Run it with `cargo bench --bench storm -- [--clients N] [--down SECS]
//! [--strategies fixed,libzmq,relink] [--svg PATH]` (defaults: 1000 clients, 5 s down, all three
//! strategies, no chart, about a minute; `--svg docs/storm.svg` writes the chart). `--smoke` (or
//! `RELINK_BENCH_SMOKE=1`) makes it 20 clients and 0.5 s down unless told otherwise, to show
//! that it runs to the end. No setup: the
//! clients and a counting server run in this one process, on 127.0.0.1.
//!
//! For each strategy, with fresh clients and a fresh server: the server accepts every client and
//! holds the connections; once they have all been connected for 1.5 s (past relink's
//! `min_stable`), it closes every connection and its listener (new connects are refused), stays
//! down for `--down` seconds, listens again on the same port and counts accepts per 100 ms until
//! every client is back or `--bound` seconds pass. One line per strategy:
//!
//! ```text
//! storm strategy=<name> clients=<n> peak_per_100ms=<x> p50_back_s=<y> p99_back_s=<z> all_back_s=<w> attempts_per_client=<v>
//! ```
//!
//! `peak_per_100ms` is the most accepts in any 100 ms window (the chart's fixed buckets, whose
//! peak the detail line gives, can split a burst in two). Times are from the server's return. A
//! client is "back" when the server accepts its connection again; clients are told apart by
//! count (each holds one connection, and a held connection is never redialled), and the fleet
//! is asked afterwards how many believe they are connected, which a `storm detail` line
//! reports. Attempts are TCP connects from the drop until the client is back, counted on the
//! client side (the server cannot see refused SYNs):
//! - `fixed`: one thread per client that sleeps 3 s after a disconnect or a refusal and dials
//!   again; every `connect()` call counts.
//! - `libzmq`: one raw ZMQ_STREAM socket per client (reconnect_ivl 100 ms, reconnect_ivl_max
//!   30 s, immediate off) on one shared context; every ZMQ_EVENT_CONNECT_RETRIED from its monitor
//!   is a scheduled redial, and each counts.
//! - `relink`: one `Link` per client with the defaults, on the global context and the global IO
//!   pool (`IoPool::global()`: one thread per core for the whole fleet); an attempt is a
//!   dial (an `Event::State` transition into Connecting, up to the Ready) or a redial libzmq
//!   makes by itself: `native_retries` (1 by default) on the first refused dial of an outage.
//!   `Metrics::native_redials` is reset with the attempt counter once a link is stable again, so
//!   the benchmark adds the default's one redial to every link whose first dial after the drop
//!   was refused (every link here: the server is down for seconds and the first dial comes
//!   within the backoff's first delay).
//!
//! Each relink link uses four file descriptors and each held connection one: the benchmark
//! raises RLIMIT_NOFILE to its hard limit first (with 20 000, about 3 900 clients fit); with
//! CAP_SYS_RESOURCE it raises the hard limit too when the fleet needs more (5 000 clients need
//! about 26 000; this machine's sandbox allows no more than 20 000).

mod support;

use std::io::{self, Read};
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::raw::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use crossbeam_channel::{RecvTimeoutError, Sender};
use relink::{Event, Link, State};

/// How long the clients stay connected before the drop: past relink's `min_stable` (1 s), so
/// every link starts the storm with a reset attempt counter.
const SETTLE: Duration = Duration::from_millis(1500);
/// Bound on the first connect of the whole fleet.
const CONNECT_ALL_BOUND: Duration = Duration::from_secs(60);
/// The width of one bucket of the accept histogram.
const BUCKET: Duration = Duration::from_millis(100);
/// The `fixed` strategy's pause after a disconnect or a refusal.
const FIXED_SLEEP: Duration = Duration::from_secs(3);
/// How long the clients may take to see the connects the server has accepted.
const CLIENT_REPORT_BOUND: Duration = Duration::from_secs(2);
/// The accept backlog (std's `bind` uses 128, which a storm of a thousand clients overflows).
const BACKLOG: c_int = 4096;

#[derive(Parser, Debug)]
#[command(about = "Reconnect storm: N clients lose their server at once and come back")]
struct Args {
    /// Clients per strategy (1000; 20 with `--smoke`).
    #[arg(long)]
    clients: Option<usize>,
    /// Seconds the server stays down, refusing connects (5; 0.5 with `--smoke`).
    #[arg(long)]
    down: Option<f64>,
    /// Strategies to run, one after the other.
    #[arg(long, value_delimiter = ',', default_value = "fixed,libzmq,relink")]
    strategies: Vec<Strategy>,
    /// Seconds after the server's return to wait for every client.
    #[arg(long, default_value_t = 40.0)]
    bound: f64,
    /// Write a chart of accepts per 100 ms (SVG) to this path.
    #[arg(long)]
    svg: Option<PathBuf>,
    #[command(flatten)]
    cargo: support::CargoBench,
}

impl Args {
    fn clients(&self) -> usize {
        self.clients
            .unwrap_or(if support::smoke() { 20 } else { 1000 })
    }

    fn down(&self) -> f64 {
        self.down
            .unwrap_or(if support::smoke() { 0.5 } else { 5.0 })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Strategy {
    /// Sleep 3 s and retry.
    Fixed,
    /// libzmq's own redial only.
    Libzmq,
    /// relink with its defaults.
    Relink,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Fixed => "fixed",
            Strategy::Libzmq => "libzmq",
            Strategy::Relink => "relink",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Strategy::Fixed => "fixed: sleep 3 s, retry",
            Strategy::Libzmq => "libzmq: ivl 100 ms, ivl_max 30 s",
            Strategy::Relink => "relink: defaults (full jitter)",
        }
    }
}

/// What one run measured.
struct Outcome {
    strategy: Strategy,
    clients: usize,
    /// Seconds from the server's return to each accept, in order.
    back: Vec<f64>,
    /// Accepts per bucket since the server's return.
    buckets: Vec<u32>,
    report: FleetReport,
}

/// What a fleet says about itself once the storm is over.
struct FleetReport {
    /// TCP connects per client from the drop until it was back (or the end).
    attempts: Vec<u32>,
    /// Clients that believe they are connected at the end (filled in by `run`).
    connected: usize,
    /// Extra figures for the detail line, each with a leading space.
    detail: String,
}

/// A set of clients under test.
trait Fleet {
    /// Called just before the server drops everyone.
    fn before_drop(&mut self);
    /// Clients that believe they are connected now.
    fn connected(&self) -> usize;
    /// Counts, then stops every client and releases everything.
    fn finish(self: Box<Self>, dropped_at: Instant) -> FleetReport;
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args = Args::parse();
    if args.clients() == 0 {
        return Err("--clients must be at least 1".into());
    }
    let (soft, hard) = raise_fd_limit(args.clients())?;
    println!(
        "storm: {} clients, server down {} s, open-file limit {soft} (hard {hard})",
        args.clients(),
        args.down()
    );
    let mut outcomes = Vec::new();
    for &strategy in &args.strategies {
        let outcome = run(strategy, &args)?;
        print_outcome(&outcome);
        outcomes.push(outcome);
    }
    if let Some(path) = &args.svg {
        chart(path, &outcomes, &args)?;
        println!("storm: chart written to {}", path.display());
    }
    Ok(())
}

/// One strategy, start to end, with fresh clients and a fresh server.
fn run(strategy: Strategy, args: &Args) -> Result<Outcome, Box<dyn std::error::Error>> {
    let n = args.clients();
    let mut server = Server::start()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port));
    let mut fleet: Box<dyn Fleet> = match strategy {
        Strategy::Fixed => Box::new(FixedFleet::start(addr, n)?),
        Strategy::Libzmq => Box::new(ZmqFleet::start(addr, n)?),
        Strategy::Relink => Box::new(RelinkFleet::start(addr, n)?),
    };
    let first = server.accept_until(n, CONNECT_ALL_BOUND);
    if first.len() < n {
        fleet.finish(Instant::now());
        server.close();
        return Err(format!(
            "{}: only {} of {n} clients connected within {CONNECT_ALL_BOUND:?}",
            strategy.name(),
            first.len()
        )
        .into());
    }
    thread::sleep(SETTLE);
    fleet.before_drop();

    let dropped_at = Instant::now();
    server.go_down();
    thread::sleep(Duration::from_secs_f64(args.down()));
    let returned_at = server.come_back()?;
    let accepts = server.accept_until(n, Duration::from_secs_f64(args.bound));

    // The server accepts before a client has seen its connect complete: give the stragglers'
    // own bookkeeping a moment (bounded) before asking them.
    let asked_until = Instant::now() + CLIENT_REPORT_BOUND;
    while fleet.connected() < accepts.len() && Instant::now() < asked_until {
        thread::sleep(Duration::from_millis(10));
    }
    let connected = fleet.connected();
    let closed_by_peer = server.closed_by_peer();
    let mut report = fleet.finish(dropped_at);
    report.connected = connected;
    if closed_by_peer > 0 {
        report.detail += &format!(" held_connections_closed_by_client={closed_by_peer}");
    }
    server.close();

    let back: Vec<f64> = accepts
        .iter()
        .map(|t| t.saturating_duration_since(returned_at).as_secs_f64())
        .collect();
    let mut buckets = Vec::new();
    for &t in &back {
        let i = (t / BUCKET.as_secs_f64()) as usize;
        if buckets.len() <= i {
            buckets.resize(i + 1, 0);
        }
        buckets[i] += 1;
    }
    Ok(Outcome {
        strategy,
        clients: n,
        back,
        buckets,
        report,
    })
}

fn print_outcome(o: &Outcome) {
    let n = o.clients;
    let quantile = |q: f64| -> String {
        let k = ((q * n as f64).ceil() as usize).max(1);
        o.back
            .get(k - 1)
            .map_or_else(|| "-".to_string(), |t| format!("{t:.2}"))
    };
    // The busiest 100 ms anywhere (a burst that straddles two buckets counts whole).
    let mut peak = 0;
    let mut from = 0;
    for (to, &t) in o.back.iter().enumerate() {
        while t - o.back[from] >= BUCKET.as_secs_f64() {
            from += 1;
        }
        peak = peak.max(to + 1 - from);
    }
    let peak_bucket = o.buckets.iter().copied().max().unwrap_or(0);
    let attempts = o.report.attempts.iter().map(|&a| a as f64).sum::<f64>() / n as f64;
    println!(
        "storm strategy={} clients={n} peak_per_100ms={peak} p50_back_s={} p99_back_s={} all_back_s={} attempts_per_client={attempts:.1}",
        o.strategy.name(),
        quantile(0.5),
        quantile(0.99),
        if o.back.len() >= n { quantile(1.0) } else { "-".to_string() },
    );
    let max_attempts = o.report.attempts.iter().copied().max().unwrap_or(0);
    println!(
        "storm detail strategy={} peak_bucket={peak_bucket} accepts_after_return={} connected_at_end={} max_attempts={max_attempts}{}",
        o.strategy.name(),
        o.back.len(),
        o.report.connected,
        o.report.detail,
    );
}

// ----- the counting server --------------------------------------------------------------------

/// A server that accepts and holds connections, drops them all at once, and comes back on the
/// same port.
struct Server {
    port: u16,
    listener: Option<TcpListener>,
    held: Vec<TcpStream>,
}

impl Server {
    /// Listens on a free port below the ephemeral range, so that no client's own port can take
    /// it while the server is down.
    fn start() -> io::Result<Server> {
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32768);
        let span = 4000u16.min(low.saturating_sub(1024));
        let first = low - span;
        let offset = (std::process::id() % span.max(1) as u32) as u16;
        let mut last_err = io::Error::new(io::ErrorKind::AddrInUse, "no free port");
        for i in 0..span {
            let port = first + (offset + i) % span;
            match listen(port) {
                Ok(listener) => {
                    return Ok(Server {
                        port,
                        listener: Some(listener),
                        held: Vec::new(),
                    })
                }
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    /// Accepts until `n` more connections are held or `bound` passes; returns when each came.
    fn accept_until(&mut self, n: usize, bound: Duration) -> Vec<Instant> {
        let deadline = Instant::now() + bound;
        let mut times = Vec::with_capacity(n);
        let Some(listener) = &self.listener else {
            return times;
        };
        let mut failures = 0u32;
        while times.len() < n && Instant::now() < deadline {
            match listener.accept() {
                Ok((s, _)) => {
                    times.push(Instant::now());
                    self.held.push(s);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_readable(listener, Duration::from_millis(5))
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        eprintln!("storm: accept failed: {e}");
                    }
                    thread::sleep(Duration::from_millis(1));
                }
            }
        }
        if failures > 1 {
            eprintln!("storm: {failures} accepts failed");
        }
        times
    }

    /// Held connections whose client has closed them (a client counted back that left again).
    fn closed_by_peer(&self) -> usize {
        let mut fds: Vec<libc::pollfd> = self
            .held
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: a valid array of `fds.len()` pollfds; timeout 0 only looks.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        fds.iter()
            .filter(|p| p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
            .count()
    }

    /// Closes every held connection and the listener: connects are refused from now on.
    fn go_down(&mut self) {
        self.listener = None;
        self.held.clear();
    }

    /// Listens again on the same port; returns when.
    fn come_back(&mut self) -> io::Result<Instant> {
        self.listener = Some(listen(self.port)?);
        Ok(Instant::now())
    }

    fn close(mut self) {
        self.go_down();
    }
}

/// A non-blocking listener on 127.0.0.1:`port` with SO_REUSEADDR (the old connections sit in
/// TIME_WAIT) and a backlog of 4096.
fn listen(port: u16) -> io::Result<TcpListener> {
    // SAFETY: socket(2) takes no pointers; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns; the listener closes it, also on
    // the error paths below.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    let one: c_int = 1;
    // SAFETY: the value points to a c_int of the length passed, read before the call returns.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const c_int as *const c_void,
            mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sockaddr_in is plain data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_in = unsafe { mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = port.to_be();
    sa.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
    // SAFETY: the address points to a sockaddr_in of the length passed.
    let rc = unsafe {
        libc::bind(
            fd,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: listen(2) on a socket we own; no pointers.
    if unsafe { libc::listen(fd, BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn wait_readable(listener: &TcpListener, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1; the result only says whether to accept again.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as c_int) };
}

/// Raises the open-file limit to the hard limit; returns (soft, hard). When the fleet needs more
/// than the hard limit (five descriptors per client: four for its link, one for the server's
/// end of its connection) and the process may raise it (CAP_SYS_RESOURCE), the hard limit is raised
/// too.
fn raise_fd_limit(clients: usize) -> io::Result<(libc::rlim_t, libc::rlim_t)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let needed = (clients as libc::rlim_t)
        .saturating_mul(5)
        .saturating_add(1024);
    if needed > lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: needed,
            rlim_max: needed,
        };
        // SAFETY: setrlimit reads one rlimit from `raised`; it fails without privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok((needed, needed));
        }
        eprintln!(
            "storm: {clients} clients need about {needed} open files, above the hard limit {}; \
             raising it needs CAP_SYS_RESOURCE",
            lim.rlim_max
        );
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads one rlimit from `lim`.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

// ----- fixed: sleep 3 s and retry -------------------------------------------------------------

/// One thread per client: connect; on a refusal or a disconnect, sleep 3 s and connect again.
struct FixedFleet {
    stop: Option<Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    attempts: Arc<Vec<AtomicU32>>,
    connected: Arc<Vec<AtomicBool>>,
    at_drop: Vec<u32>,
}

impl FixedFleet {
    fn start(addr: SocketAddr, n: usize) -> io::Result<FixedFleet> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let attempts: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let connected: Arc<Vec<AtomicBool>> =
            Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (stopped, attempts, connected) =
                (stopped.clone(), attempts.clone(), connected.clone());
            let t = thread::Builder::new()
                .name(format!("fixed-{i}"))
                .stack_size(64 * 1024)
                .spawn(move || loop {
                    attempts[i].fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut s) = TcpStream::connect(addr) {
                        connected[i].store(true, Ordering::SeqCst);
                        let mut buf = [0u8; 64];
                        while matches!(s.read(&mut buf), Ok(k) if k > 0) {}
                        connected[i].store(false, Ordering::SeqCst);
                    }
                    match stopped.recv_timeout(FIXED_SLEEP) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                })?;
            threads.push(t);
        }
        Ok(FixedFleet {
            stop: Some(stop),
            threads,
            attempts,
            connected,
            at_drop: Vec::new(),
        })
    }
}

impl Fleet for FixedFleet {
    fn before_drop(&mut self) {
        self.at_drop = self
            .attempts
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect();
    }

    fn connected(&self) -> usize {
        self.connected
            .iter()
            .filter(|c| c.load(Ordering::SeqCst))
            .count()
    }

    fn finish(mut self: Box<Self>, _dropped_at: Instant) -> FleetReport {
        let attempts = self
            .attempts
            .iter()
            .zip(&self.at_drop)
            .map(|(a, &before)| a.load(Ordering::SeqCst) - before)
            .collect();
        // Sleeping clients wake at once; connected ones end when the server closes them, so the
        // threads are joined by a helper while the caller closes the server.
        self.stop.take();
        let threads = mem::take(&mut self.threads);
        thread::spawn(move || threads.into_iter().for_each(|t| drop(t.join())));
        FleetReport {
            attempts,
            connected: 0,
            detail: String::new(),
        }
    }
}

// ----- libzmq: native redial only --------------------------------------------------------------

const ZMQ_EVENT_CONNECTED: u16 = 0x0001;
const ZMQ_EVENT_CONNECT_DELAYED: u16 = 0x0002;
const ZMQ_EVENT_CONNECT_RETRIED: u16 = 0x0004;
const ZMQ_EVENT_CLOSED: u16 = 0x0080;
const ZMQ_EVENT_DISCONNECTED: u16 = 0x0200;

/// A libzmq context with ZMQ_MAX_SOCKETS raised (rust-zmq 0.9 has no setter, and a thousand
/// monitored sockets need three thousand).
struct ZmqContext {
    ptr: *mut c_void,
}

impl ZmqContext {
    fn new(max_sockets: c_int) -> io::Result<ZmqContext> {
        // SAFETY: zmq_ctx_new has no preconditions; null is checked.
        let ptr = unsafe { zmq_sys::zmq_ctx_new() };
        if ptr.is_null() {
            return Err(io::Error::last_os_error());
        }
        let ctx = ZmqContext { ptr };
        // SAFETY: a live context; ZMQ_MAX_SOCKETS takes an int.
        let rc =
            unsafe { zmq_sys::zmq_ctx_set(ptr, zmq_sys::ZMQ_MAX_SOCKETS as c_int, max_sockets) };
        if rc != 0 {
            return Err(io::Error::other("zmq_ctx_set(ZMQ_MAX_SOCKETS) failed"));
        }
        Ok(ctx)
    }

    /// A socket of a `zmq_sys::ZMQ_*` type that rust-zmq closes on drop; it must be dropped
    /// before the context.
    fn socket(&self, kind: u32) -> zmq::Result<zmq::Socket> {
        // SAFETY: the context is live until Drop, which runs after every socket is dropped.
        let sock = unsafe { zmq_sys::zmq_socket(self.ptr, kind as c_int) };
        if sock.is_null() {
            // SAFETY: zmq_errno reads this thread's errno.
            return Err(zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() }));
        }
        // SAFETY: a fresh socket that nothing else owns.
        Ok(unsafe { zmq::Socket::from_raw(sock) })
    }
}

impl Drop for ZmqContext {
    fn drop(&mut self) {
        // SAFETY: the context is live and terminated once, after its sockets (linger 0) closed.
        unsafe {
            while zmq_sys::zmq_ctx_term(self.ptr) == -1 && zmq_sys::zmq_errno() == libc::EINTR {}
        }
    }
}

/// What a monitor thread saw: per client, each event with its time.
type MonitorLog = Vec<Vec<(Instant, u16)>>;

/// One raw ZMQ_STREAM socket per client, left to libzmq's own redial; a thread drains their
/// monitors all the time (an undrained monitor stalls the context).
struct ZmqFleet {
    sockets: Vec<zmq::Socket>,
    monitor: Option<JoinHandle<(Vec<zmq::Socket>, MonitorLog)>>,
    /// Per client: whether its monitor last said connected.
    up: Arc<Vec<AtomicBool>>,
    stop: Arc<AtomicBool>,
    // Declared last: dropped after the sockets.
    _ctx: ZmqContext,
}

impl ZmqFleet {
    fn start(addr: SocketAddr, n: usize) -> Result<ZmqFleet, Box<dyn std::error::Error>> {
        let ctx = ZmqContext::new((3 * n + 16).max(1023) as c_int)?;
        let endpoint = format!("tcp://{addr}");
        let mask = (ZMQ_EVENT_CONNECTED
            | ZMQ_EVENT_CONNECT_DELAYED
            | ZMQ_EVENT_CONNECT_RETRIED
            | ZMQ_EVENT_CLOSED
            | ZMQ_EVENT_DISCONNECTED) as i32;
        let mut sockets = Vec::with_capacity(n);
        let mut pairs = Vec::with_capacity(n);
        for i in 0..n {
            let s = ctx.socket(zmq_sys::ZMQ_STREAM)?;
            s.set_linger(0)?;
            s.set_reconnect_ivl(100)?;
            s.set_reconnect_ivl_max(30_000)?;
            s.set_immediate(false)?;
            let inproc = format!("inproc://storm-monitor-{i}");
            s.monitor(&inproc, mask)?;
            let pair = ctx.socket(zmq_sys::ZMQ_PAIR)?;
            pair.set_linger(0)?;
            pair.connect(&inproc)?;
            sockets.push(s);
            pairs.push(pair);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let up: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
        let up_w = up.clone();
        let monitor = thread::Builder::new()
            .name("storm-monitor".into())
            .spawn(move || drain_monitors(pairs, &up_w, &flag))?;
        for s in &sockets {
            s.connect(&endpoint)?;
        }
        Ok(ZmqFleet {
            sockets,
            monitor: Some(monitor),
            up,
            stop,
            _ctx: ctx,
        })
    }
}

fn drain_monitors(
    pairs: Vec<zmq::Socket>,
    up: &[AtomicBool],
    stop: &AtomicBool,
) -> (Vec<zmq::Socket>, MonitorLog) {
    let mut log: MonitorLog = vec![Vec::new(); pairs.len()];
    while !stop.load(Ordering::SeqCst) {
        let ready: Vec<usize> = {
            let mut items: Vec<zmq::PollItem> =
                pairs.iter().map(|p| p.as_poll_item(zmq::POLLIN)).collect();
            if zmq::poll(&mut items, 20).is_err() {
                continue;
            }
            (0..items.len())
                .filter(|&i| items[i].is_readable())
                .collect()
        };
        for i in ready {
            while let Ok(head) = pairs[i].recv_msg(zmq::DONTWAIT) {
                let now = Instant::now();
                while pairs[i].get_rcvmore().unwrap_or(false) {
                    if pairs[i].recv_msg(zmq::DONTWAIT).is_err() {
                        break;
                    }
                }
                if head.len() >= 6 {
                    let ev = u16::from_ne_bytes([head[0], head[1]]);
                    match ev {
                        ZMQ_EVENT_CONNECTED => up[i].store(true, Ordering::SeqCst),
                        ZMQ_EVENT_DISCONNECTED => up[i].store(false, Ordering::SeqCst),
                        _ => {}
                    }
                    log[i].push((now, ev));
                }
            }
        }
    }
    (pairs, log)
}

impl Fleet for ZmqFleet {
    fn before_drop(&mut self) {}

    fn connected(&self) -> usize {
        self.up.iter().filter(|u| u.load(Ordering::SeqCst)).count()
    }

    fn finish(mut self: Box<Self>, dropped_at: Instant) -> FleetReport {
        // Stop each monitor before its PAIR closes (libzmq #3575).
        for s in &mut self.sockets {
            // SAFETY: a live socket; a null endpoint with no events stops its monitor.
            unsafe { zmq_sys::zmq_socket_monitor(s.as_mut_ptr(), std::ptr::null(), 0) };
        }
        self.stop.store(true, Ordering::SeqCst);
        let (pairs, log) = self
            .monitor
            .take()
            .expect("the monitor thread runs until finish")
            .join()
            .expect("the monitor thread does not panic");
        drop(pairs);
        let mut attempts = Vec::with_capacity(log.len());
        for events in &log {
            let mut redials = 0;
            for &(_, ev) in events.iter().filter(|(t, _)| *t >= dropped_at) {
                match ev {
                    ZMQ_EVENT_CONNECT_RETRIED => redials += 1,
                    ZMQ_EVENT_CONNECTED => break,
                    _ => {}
                }
            }
            attempts.push(redials);
        }
        let events: usize = log.iter().map(Vec::len).sum();
        self.sockets.clear();
        FleetReport {
            attempts,
            connected: 0,
            detail: format!(" monitor_events={events}"),
        }
    }
}

// ----- relink: defaults --------------------------------------------------------------------------

/// One relink `Link` per client, defaults throughout, on the process-wide context.
struct RelinkFleet {
    links: Vec<Link>,
}

impl RelinkFleet {
    fn start(addr: SocketAddr, n: usize) -> Result<RelinkFleet, relink::error::ConfigError> {
        let endpoint = format!("tcp://{addr}");
        // The links share the global IO pool (one thread per core), not a thread each.
        let pool = relink::IoPool::global()?;
        let links = (0..n)
            .map(|_| Link::builder(&endpoint).io_pool(&pool).build())
            .collect::<Result<_, _>>()?;
        Ok(RelinkFleet { links })
    }
}

/// What one link's transitions since the drop say.
#[derive(Default)]
struct Tally {
    /// Dials: transitions into Connecting.
    dials: u32,
    back: bool,
}

impl Fleet for RelinkFleet {
    fn before_drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && self.links.iter().any(|l| l.state() != State::Ready) {
            thread::sleep(Duration::from_millis(10));
        }
        for l in &self.links {
            while l.events().try_recv().is_ok() {}
        }
    }

    fn connected(&self) -> usize {
        self.links
            .iter()
            .filter(|l| l.state() == State::Ready)
            .count()
    }

    fn finish(self: Box<Self>, _dropped_at: Instant) -> FleetReport {
        let mut attempts = Vec::with_capacity(self.links.len());
        let (mut dials, mut native) = (0u64, 0u64);
        for l in &self.links {
            let mut t = Tally::default();
            while let Ok(ev) = l.events().try_recv() {
                let Event::State(tr) = ev else { continue };
                if t.back {
                    continue;
                }
                match tr.to {
                    State::Connecting => t.dials += 1,
                    State::Ready => t.back = true,
                    _ => {}
                }
            }
            // The first dial after the drop was refused (the server is down for seconds):
            // libzmq then spent its one redial of the outage.
            let redials = if t.dials > 1 {
                relink::config::defaults::NATIVE_RETRIES
            } else {
                0
            };
            attempts.push(t.dials + redials);
            dials += u64::from(t.dials);
            native += u64::from(redials);
        }
        let n = self.links.len().max(1) as f64;
        let detail = format!(
            " dials_per_client={:.1} native_redials_per_client={:.1}",
            dials as f64 / n,
            native as f64 / n,
        );
        // Close them in parallel: each close joins an IO thread.
        let mut links = self.links;
        let chunk = links.len().div_ceil(8).max(1);
        let mut closers = Vec::new();
        while !links.is_empty() {
            let part: Vec<Link> = links.drain(..chunk.min(links.len())).collect();
            closers.push(thread::spawn(move || {
                for l in part {
                    l.close(Duration::from_millis(100));
                }
            }));
        }
        closers.into_iter().for_each(|c| drop(c.join()));
        FleetReport {
            attempts,
            connected: 0,
            detail,
        }
    }
}

// ----- the chart ---------------------------------------------------------------------------------

/// Accepts per 100 ms since the server's return, one line per strategy: the full scale on top,
/// and below it the same data up to a tenth of the fleet, where a spread-out return shows.
fn chart(
    path: &PathBuf,
    outcomes: &[Outcome],
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let n = args.clients();
    let buckets = outcomes.iter().map(|o| o.buckets.len()).max().unwrap_or(1);
    let x_max = (buckets as f64 * BUCKET.as_secs_f64()).max(1.0) + 0.5;
    let peak = outcomes
        .iter()
        .flat_map(|o| o.buckets.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1);
    let zoom = ((n as u32) / 10).max(10);
    let colors = [RED, BLUE, RGBColor(0, 150, 0)];

    let root = SVGBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(360);
    for (area, y_max, title) in [
        (
            &top,
            peak + peak / 10 + 1,
            format!(
                "Reconnect storm: {n} clients, server down {} s (accepts per 100 ms)",
                args.down()
            ),
        ),
        (
            &bottom,
            zoom,
            format!("The same, y axis cut at {zoom} (10 % of the clients)"),
        ),
    ] {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0f64..x_max, 0u32..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the server came back")
            .y_desc("accepts / 100 ms")
            .draw()?;
        for (o, color) in outcomes.iter().zip(colors.iter().cycle()) {
            let color = *color;
            // A step line: each bucket is flat over its 100 ms.
            let mut points = Vec::with_capacity(o.buckets.len() * 2 + 2);
            for (i, &count) in o.buckets.iter().enumerate() {
                let x0 = i as f64 * BUCKET.as_secs_f64();
                points.push((x0, count.min(y_max)));
                points.push((x0 + BUCKET.as_secs_f64(), count.min(y_max)));
            }
            points.push((o.buckets.len() as f64 * BUCKET.as_secs_f64(), 0));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(o.strategy.label())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
