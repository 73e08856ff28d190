//! Scripted TCP peers on 127.0.0.1: a [`Peer`] runs a [`Behaviour`] (echo, sink, accept then
//! close, silent, stop reading, close after some bytes, garbage, or a script) on every
//! connection it accepts, and records what it received. Also the port helpers.
//!
//! Ports: [`Peer::start`], [`free_port`] and [`refused_endpoint`] pick ports *below* the
//! kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 by
//! default), never the same one twice in a process. A client that keeps redialling a
//! closed port inside the ephemeral range can be handed that very port as its own local
//! port and connect to itself (TCP simultaneous open); a port outside the range cannot.
//!
//! Restarting on the same port: std's `TcpListener::bind` sets `SO_REUSEADDR` on Unix
//! (checked by `tests/peer_selftest.rs`), so [`Peer::start_on`] succeeds right after the
//! previous peer on that port was stopped, even with its old connections in TIME_WAIT. It
//! fails with `AddrInUse` while another socket still *listens* there.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::payload::{decode_length_prefixed, decode_lines, encode_length_prefixed};

/// How long the accept loop parks between two non-blocking `accept` calls (it wakes at once
/// when the peer stops). Accept times are late by at most about this much.
const ACCEPT_POLL: Duration = Duration::from_millis(1);
/// Longest a connection thread blocks in one read or write before checking its stop flags.
const IO_TICK: Duration = Duration::from_millis(20);
/// A write that makes no progress for this long fails (the client is not reading).
const WRITE_STALL: Duration = Duration::from_secs(5);
/// Bound on joining the peer's threads when it stops.
const JOIN_BOUND: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// Behaviours
// ---------------------------------------------------------------------------------------

/// A script run on its own thread for each accepted connection. The connection is closed
/// (FIN) when the script returns, unless it called [`Conn::reset`] (RST).
pub type Script = Arc<dyn Fn(&mut Conn) + Send + Sync>;

/// What a [`Peer`] does with each connection it accepts. Changing it with
/// [`Peer::set_behaviour`] affects connections accepted afterwards.
#[derive(Clone)]
pub enum Behaviour {
    /// Record every byte received and write it straight back.
    Echo,
    /// Record every byte received; never write anything.
    Sink,
    /// Accept, then close at once (FIN) without reading or writing.
    AcceptThenClose,
    /// Accept and keep the socket open, never reading or writing: like a stopped process
    /// (the kernel completes the handshake and buffers what the client sends until its
    /// window fills). Closed only when the peer stops or by [`Peer::close_connections`].
    Silent,
    /// Record the first `n` bytes received (like `Sink`), then stop reading and keep the
    /// socket open like `Silent`: the client's writes back up once the kernel buffers fill.
    /// `StopReadingAfter(0)` is `Silent`.
    StopReadingAfter(usize),
    /// Record what is received until at least `n` bytes have arrived, then close. Bytes the
    /// client sent beyond what was read make the kernel close with RST instead of FIN.
    CloseAfterBytes(usize),
    /// Write these bytes as soon as the connection is accepted, then behave as `Echo`.
    Garbage(Vec<u8>),
    /// Run a script (see [`Conn`] for what it can do).
    Script(Script),
}

impl Behaviour {
    /// `Behaviour::Script` from a closure.
    pub fn script(f: impl Fn(&mut Conn) + Send + Sync + 'static) -> Behaviour {
        Behaviour::Script(Arc::new(f))
    }
}

impl std::fmt::Debug for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Behaviour::Echo => write!(f, "Echo"),
            Behaviour::Sink => write!(f, "Sink"),
            Behaviour::AcceptThenClose => write!(f, "AcceptThenClose"),
            Behaviour::Silent => write!(f, "Silent"),
            Behaviour::StopReadingAfter(n) => write!(f, "StopReadingAfter({n})"),
            Behaviour::CloseAfterBytes(n) => write!(f, "CloseAfterBytes({n})"),
            Behaviour::Garbage(b) => write!(f, "Garbage({} bytes)", b.len()),
            Behaviour::Script(_) => write!(f, "Script(..)"),
        }
    }
}

/// Something that happened at the peer, in the order it happened for one connection.
/// Connections are numbered from 0 in accept order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// Connection `.0` was accepted at `.1`.
    Accepted(usize, Instant),
    /// These bytes were read from connection `.0` (one read; boundaries mean nothing).
    Data(usize, Vec<u8>),
    /// Connection `.0` is over: the client closed it, it failed, or the peer closed it.
    Closed(usize),
}

/// Cuts bytes into items (frames, lines) and the bytes left over after the last whole one.
type Decoder = fn(&[u8]) -> (Vec<Vec<u8>>, &[u8]);

/// Everything the peer recorded, one entry per connection in accept order. Handed by
/// reference to the predicate of [`Peer::wait_until`] (under the peer's lock: keep the
/// predicate short) and by value from [`Peer::snapshot`].
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Accept time of each connection.
    pub accepts: Vec<Instant>,
    /// Bytes received on each connection, concatenated.
    pub received: Vec<Vec<u8>>,
    /// Whether each connection is over.
    pub closed: Vec<bool>,
}

impl Snapshot {
    /// Number of connections accepted so far.
    pub fn accept_count(&self) -> usize {
        self.accepts.len()
    }
    /// Bytes received over all connections.
    pub fn total_received(&self) -> usize {
        self.received.iter().map(Vec::len).sum()
    }
    /// Bytes received over all connections, concatenated in accept order.
    pub fn all_received(&self) -> Vec<u8> {
        self.received.concat()
    }
    /// Connections accepted and not yet over.
    pub fn open_count(&self) -> usize {
        self.closed.iter().filter(|c| !**c).count()
    }
    /// Length-prefixed frames of each connection (see [`decode_length_prefixed`]), with the
    /// count of trailing bytes that do not make a whole frame.
    pub fn length_prefixed_frames(&self) -> Vec<(Vec<Vec<u8>>, usize)> {
        self.decoded(decode_length_prefixed)
    }
    /// Lines of each connection (see [`decode_lines`]), with the count of trailing bytes
    /// after the last newline.
    pub fn lines(&self) -> Vec<(Vec<Vec<u8>>, usize)> {
        self.decoded(decode_lines)
    }
    /// Each connection's bytes cut by `decode`, with the count of bytes left over.
    fn decoded(&self, decode: Decoder) -> Vec<(Vec<Vec<u8>>, usize)> {
        self.received
            .iter()
            .map(|r| {
                let (items, rest) = decode(r);
                (items, rest.len())
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------------------

struct ConnSlot {
    /// A clone of the accepted socket, to shut it down or write to it from outside; taken
    /// (and dropped) when the connection is over.
    stream: Option<TcpStream>,
    /// Set by `close_connections`: the connection's thread must end.
    killed: Arc<AtomicBool>,
}

struct State {
    rec: Snapshot,
    slots: Vec<ConnSlot>,
    threads: Vec<JoinHandle<()>>,
    script_panics: Vec<usize>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stopping: AtomicBool,
    behaviour: Mutex<Behaviour>,
    events: Sender<PeerEvent>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking script must not make every later call panic too.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn record_data(&self, conn: usize, data: &[u8]) {
        let mut st = self.lock();
        st.rec.received[conn].extend_from_slice(data);
        drop(st);
        self.changed.notify_all();
        let _ = self.events.send(PeerEvent::Data(conn, data.to_vec()));
    }

    fn wait_until(&self, timeout: Duration, mut f: impl FnMut(&Snapshot) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if f(&st.rec) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Conn: one accepted connection, as seen by a behaviour or a script
// ---------------------------------------------------------------------------------------

/// One accepted connection, handed to a [`Behaviour::Script`]. Bytes read through its
/// `read_*` methods, `echo` and `sink` are recorded by the peer; bytes read directly from
/// [`Conn::stream`] are not. Every method returns once the peer stops (reads then fail with
/// `ConnectionAborted`), so a script built from them ends with the peer.
pub struct Conn {
    index: usize,
    stream: TcpStream,
    shared: Arc<Shared>,
    killed: Arc<AtomicBool>,
    stop_rx: Receiver<()>,
    /// Bytes already read (and recorded) but not yet handed to the script.
    pending: Vec<u8>,
    reset: bool,
}

fn aborted() -> io::Error {
    io::Error::new(ErrorKind::ConnectionAborted, "peer stopping")
}

fn timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "timed out")
}

impl Conn {
    /// This connection's number (0 for the first accepted).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The socket itself (read and write timeouts are set to a short tick; reads made
    /// here are not recorded).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// True once the peer is stopping or this connection was closed from outside.
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping() || self.killed.load(Ordering::SeqCst)
    }

    fn set_read_timeout_until(&self, deadline: Option<Instant>) {
        let mut t = IO_TICK;
        if let Some(d) = deadline {
            t = t.min(d.saturating_duration_since(Instant::now()));
        }
        let _ = self
            .stream
            .set_read_timeout(Some(t.max(Duration::from_millis(1))));
    }

    fn read_chunk(&mut self, deadline: Option<Instant>) -> io::Result<Vec<u8>> {
        if !self.pending.is_empty() {
            return Ok(std::mem::take(&mut self.pending));
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if self.is_stopping() {
                return Err(aborted());
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Err(timed_out());
                }
            }
            self.set_read_timeout_until(deadline);
            match self.stream.read(&mut buf) {
                Ok(0) => return Ok(Vec::new()),
                Ok(n) => {
                    self.shared.record_data(self.index, &buf[..n]);
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whatever arrives next (at least one byte), or an empty vector at end of stream.
    /// `TimedOut` after `timeout`, `ConnectionAborted` when the peer stops.
    pub fn read_some(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        self.read_chunk(Some(Instant::now() + timeout))
    }

    /// Exactly `n` bytes (more that arrived stay buffered for the next read).
    /// `UnexpectedEof` if the stream ends first.
    pub fn read_exact(&mut self, n: usize, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let chunk = self.read_chunk(Some(deadline))?;
            if chunk.is_empty() {
                self.pending = out;
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "stream ended"));
            }
            out.extend_from_slice(&chunk);
        }
        self.pending = out.split_off(n);
        Ok(out)
    }

    /// The next line, without its `\n` (nor a `\r` before it).
    pub fn read_line(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            if let Some(pos) = out.iter().position(|b| *b == b'\n') {
                self.pending = out.split_off(pos + 1);
                out.pop();
                if out.last() == Some(&b'\r') {
                    out.pop();
                }
                return Ok(out);
            }
            let chunk = self.read_chunk(Some(deadline))?;
            if chunk.is_empty() {
                self.pending = out;
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "stream ended"));
            }
            out.extend_from_slice(&chunk);
        }
    }

    /// The next length-prefixed frame (u32 big-endian length, then the payload).
    pub fn read_frame(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let head = self.read_exact(4, timeout)?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let left = deadline.saturating_duration_since(Instant::now());
        self.read_exact(len, left)
    }

    /// Write all of `data`. Fails with `TimedOut` if no byte could be written for 5 s (the
    /// client is not reading), `ConnectionAborted` when the peer stops.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        let (shared, killed) = (self.shared.clone(), self.killed.clone());
        write_all_bounded(&mut self.stream, data, &move || {
            shared.stopping() || killed.load(Ordering::SeqCst)
        })
    }

    /// `write_all` of `payload` with its u32 big-endian length in front.
    pub fn write_frame(&mut self, payload: &[u8]) -> io::Result<()> {
        self.write_all(&encode_length_prefixed(payload))
    }

    /// Echo (and record) until the client closes, the connection fails or the peer stops.
    pub fn echo(&mut self) {
        loop {
            match self.read_chunk(None) {
                Ok(chunk) if chunk.is_empty() => return,
                Ok(chunk) => {
                    if self.write_all(&chunk).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Record until the client closes, the connection fails or the peer stops.
    pub fn sink(&mut self) {
        while let Ok(chunk) = self.read_chunk(None) {
            if chunk.is_empty() {
                return;
            }
        }
    }

    /// Record until at least `n` bytes were received in all on this connection (counting
    /// what the script already read), or the stream ends. Returns the total received.
    pub fn sink_until(&mut self, n: usize) -> usize {
        loop {
            let got = self.shared.lock().rec.received[self.index].len();
            if got >= n {
                return got;
            }
            match self.read_chunk(None) {
                Ok(chunk) if !chunk.is_empty() => {}
                _ => return self.shared.lock().rec.received[self.index].len(),
            }
        }
    }

    /// Keep the connection open without reading or writing until the peer stops or the
    /// connection is closed from outside.
    pub fn hold(&mut self) {
        while !self.is_stopping() {
            match self.stop_rx.recv_timeout(IO_TICK) {
                Err(RecvTimeoutError::Disconnected) => return,
                _ => continue,
            }
        }
    }

    /// Wait up to `d` (returns early when the peer stops). Use it in scripts instead of
    /// `thread::sleep`, so that stopping the peer is never delayed.
    pub fn pause(&self, d: Duration) {
        let deadline = Instant::now() + d;
        while !self.is_stopping() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            if let Err(RecvTimeoutError::Disconnected) =
                self.stop_rx.recv_timeout((deadline - now).min(IO_TICK))
            {
                return;
            }
        }
    }

    /// Make the close at the end of the script an abortive one (RST, via SO_LINGER 0).
    pub fn reset(&mut self) {
        self.reset = true;
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Drop the clone kept for outside access first: the socket is closed only when the
        // last descriptor goes.
        let clone = {
            let mut st = self.shared.lock();
            st.rec.closed[self.index] = true;
            st.slots[self.index].stream.take()
        };
        if self.reset {
            set_linger_zero(&self.stream);
        } else {
            let _ = self.stream.shutdown(Shutdown::Both);
        }
        drop(clone);
        self.shared.changed.notify_all();
        let _ = self.shared.events.send(PeerEvent::Closed(self.index));
        // self.stream is closed when the struct's fields drop, right after this.
    }
}

/// Makes the close of `stream` an abortive one (RST): SO_LINGER with a zero timeout.
pub fn set_linger_zero(stream: &TcpStream) {
    use std::os::unix::io::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor and a correctly sized option value.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn write_all_bounded(
    stream: &mut TcpStream,
    mut data: &[u8],
    stop: &dyn Fn() -> bool,
) -> io::Result<()> {
    let _ = stream.set_write_timeout(Some(IO_TICK));
    let mut last_progress = Instant::now();
    while !data.is_empty() {
        if stop() {
            return Err(aborted());
        }
        match stream.write(data) {
            Ok(0) => return Err(io::Error::new(ErrorKind::WriteZero, "wrote nothing")),
            Ok(n) => {
                data = &data[n..];
                last_progress = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if last_progress.elapsed() >= WRITE_STALL {
                    return Err(timed_out());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn run_behaviour(conn: &mut Conn, behaviour: &Behaviour) {
    match behaviour {
        Behaviour::Echo => conn.echo(),
        Behaviour::Sink => conn.sink(),
        Behaviour::AcceptThenClose => {}
        Behaviour::Silent => conn.hold(),
        Behaviour::StopReadingAfter(n) => {
            if *n > 0 {
                let got = conn.sink_until(*n);
                if got < *n {
                    return; // the stream ended first
                }
            }
            conn.hold();
        }
        Behaviour::CloseAfterBytes(n) => {
            conn.sink_until(*n);
        }
        Behaviour::Garbage(bytes) => {
            if conn.write_all(bytes).is_ok() {
                conn.echo();
            }
        }
        Behaviour::Script(f) => f(conn),
    }
}

// ---------------------------------------------------------------------------------------
// Peer
// ---------------------------------------------------------------------------------------

/// A scripted TCP server on 127.0.0.1 that records what it sees. Stopped (listener and
/// every connection closed, threads joined, bounded) by [`Peer::stop`] or on drop. If a
/// script panicked, `stop` and drop panic too (unless already panicking), so an assertion
/// inside a script fails the test.
pub struct Peer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop_tx: Option<Sender<()>>,
    acceptor: Option<JoinHandle<()>>,
    events_rx: Receiver<PeerEvent>,
    stopped: bool,
}

impl Peer {
    /// Start on a fresh port (below the ephemeral range; see the module docs).
    /// Panics if no port can be bound.
    pub fn start(behaviour: Behaviour) -> Peer {
        let listener = bind_fresh_listener().expect("bind a listener on 127.0.0.1");
        Peer::from_listener(listener, behaviour).expect("start peer")
    }

    /// Start on this port, e.g. to bring a peer back where a stopped one was.
    pub fn start_on(port: u16, behaviour: Behaviour) -> io::Result<Peer> {
        // The port can be held for a moment by a socket of an earlier run (a second bind of a
        // port just freed is refused now and then on a loaded machine): retry, bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let listener = loop {
            match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                Ok(l) => break l,
                Err(e)
                    if e.kind() == io::ErrorKind::AddrInUse
                        && std::time::Instant::now() < deadline =>
                {
                    thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        };
        Peer::from_listener(listener, behaviour)
    }

    fn from_listener(listener: TcpListener, behaviour: Behaviour) -> io::Result<Peer> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        reserve_port(addr.port());
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rec: Snapshot::default(),
                slots: Vec::new(),
                threads: Vec::new(),
                script_panics: Vec::new(),
            }),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            behaviour: Mutex::new(behaviour),
            events: events_tx,
        });
        let sh = shared.clone();
        let acceptor = thread::Builder::new()
            .name(format!("peer-accept-{}", addr.port()))
            .spawn(move || accept_loop(listener, sh, stop_rx))?;
        Ok(Peer {
            addr,
            shared,
            stop_tx: Some(stop_tx),
            acceptor: Some(acceptor),
            events_rx,
            stopped: false,
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// Behaviour for connections accepted from now on.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self
            .shared
            .behaviour
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = behaviour;
    }

    /// Accept time of every connection so far, in accept order.
    pub fn accepts(&self) -> Vec<Instant> {
        self.shared.lock().rec.accepts.clone()
    }

    pub fn accept_count(&self) -> usize {
        self.shared.lock().rec.accepts.len()
    }

    /// Wait until at least `n` connections were accepted.
    pub fn wait_accepts(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.accepts.len() >= n)
    }

    /// Bytes received, one entry per connection in accept order.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.shared.lock().rec.received.clone()
    }

    /// Bytes received over all connections, concatenated in accept order.
    pub fn received_all(&self) -> Vec<u8> {
        self.shared.lock().rec.all_received()
    }

    pub fn received_len(&self) -> usize {
        self.shared.lock().rec.total_received()
    }

    /// Wait until at least `total_bytes` were received over all connections.
    pub fn wait_received_len(&self, total_bytes: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.total_received() >= total_bytes)
    }

    /// Waits until `total_bytes` of length-prefixed frames came over one connection, and
    /// returns them; panics (saying what came) if they did not come in `timeout`, came over
    /// more than one connection or end in a partial frame.
    pub fn wait_frames_on_one_connection(
        &self,
        total_bytes: usize,
        timeout: Duration,
    ) -> Vec<Vec<u8>> {
        assert!(
            self.wait_received_len(total_bytes, timeout),
            "the peer got {} of {total_bytes} bytes",
            self.received_len()
        );
        let mut conns = self.snapshot().length_prefixed_frames();
        assert_eq!(conns.len(), 1, "one connection");
        let (frames, rest) = conns.remove(0);
        assert_eq!(rest, 0, "no partial frame");
        frames
    }

    /// Whether each connection is over, in accept order.
    pub fn closed(&self) -> Vec<bool> {
        self.shared.lock().rec.closed.clone()
    }

    /// Wait until connection `conn` exists and is over.
    pub fn wait_closed(&self, conn: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.closed.get(conn).copied().unwrap_or(false))
    }

    /// Connections accepted and not yet over.
    pub fn open_count(&self) -> usize {
        self.shared.lock().rec.open_count()
    }

    pub fn snapshot(&self) -> Snapshot {
        self.shared.lock().rec.clone()
    }

    /// Wait until `f` holds for what was recorded; re-checked at every recorded change.
    /// Returns false at the timeout. `f` runs under the peer's lock: keep it short.
    pub fn wait_until(&self, timeout: Duration, f: impl FnMut(&Snapshot) -> bool) -> bool {
        self.shared.wait_until(timeout, f)
    }

    /// The event stream (all events since the start). Clones share one queue: each event
    /// goes to one receiver.
    pub fn events(&self) -> Receiver<PeerEvent> {
        self.events_rx.clone()
    }

    /// The next event, waiting up to `timeout`.
    pub fn next_event(&self, timeout: Duration) -> Option<PeerEvent> {
        self.events_rx.recv_timeout(timeout).ok()
    }

    /// Write to connection `conn` from the test thread (concurrently with its behaviour).
    /// `NotConnected` if the connection does not exist or is over; `TimedOut` if the client
    /// reads nothing for 5 s.
    pub fn send(&self, conn: usize, data: &[u8]) -> io::Result<()> {
        let (mut stream, killed) = {
            let st = self.shared.lock();
            let slot = st
                .slots
                .get(conn)
                .ok_or_else(|| io::Error::new(ErrorKind::NotConnected, "no such connection"))?;
            let s = slot
                .stream
                .as_ref()
                .ok_or_else(|| io::Error::new(ErrorKind::NotConnected, "connection over"))?;
            (s.try_clone()?, slot.killed.clone())
        };
        let shared = self.shared.clone();
        write_all_bounded(&mut stream, data, &move || {
            shared.stopping() || killed.load(Ordering::SeqCst)
        })
    }

    /// `send` to the most recently accepted connection.
    pub fn send_latest(&self, data: &[u8]) -> io::Result<()> {
        let n = self.accept_count();
        if n == 0 {
            return Err(io::Error::new(ErrorKind::NotConnected, "no connection yet"));
        }
        self.send(n - 1, data)
    }

    /// Close (FIN both ways) every connection open now; the listener goes on accepting.
    pub fn close_connections(&self) {
        let streams: Vec<TcpStream> = {
            let mut st = self.shared.lock();
            st.slots
                .iter_mut()
                .filter_map(|slot| {
                    slot.killed.store(true, Ordering::SeqCst);
                    slot.stream.take()
                })
                .collect()
        };
        for s in streams {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Wait until every connection open now is over (after `close_connections`, say).
    pub fn wait_all_closed(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.closed.iter().all(|c| *c))
    }

    /// Stop: close the listener and every connection and join the threads (bounded).
    /// Panics if a script panicked.
    pub fn stop(mut self) {
        self.shutdown();
        self.check_scripts();
    }

    fn shutdown(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.shared.stopping.store(true, Ordering::SeqCst);
        drop(self.stop_tx.take()); // wakes every recv_timeout on the stop channel
        let deadline = Instant::now() + JOIN_BOUND;
        if let Some(a) = self.acceptor.take() {
            join_bounded(a, deadline, "accept");
        }
        // The acceptor is gone: no new connection can appear.
        let (streams, threads) = {
            let mut st = self.shared.lock();
            let streams: Vec<TcpStream> = st
                .slots
                .iter_mut()
                .filter_map(|slot| {
                    slot.killed.store(true, Ordering::SeqCst);
                    slot.stream.take()
                })
                .collect();
            (streams, std::mem::take(&mut st.threads))
        };
        for s in &streams {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in threads {
            join_bounded(t, deadline, "connection");
        }
        drop(streams);
        self.shared.changed.notify_all();
    }

    fn check_scripts(&self) {
        let panics = self.shared.lock().script_panics.clone();
        if !panics.is_empty() && !thread::panicking() {
            panic!(
                "peer on port {}: behaviour panicked on connection(s) {:?}",
                self.port(),
                panics
            );
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.shutdown();
        self.check_scripts();
    }
}

fn join_bounded(handle: JoinHandle<()>, deadline: Instant, what: &str) {
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            eprintln!("peer: a {what} thread did not stop in time; leaving it behind");
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let _ = handle.join();
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop_rx: Receiver<()>) {
    loop {
        if shared.stopping() {
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let at = Instant::now();
                if shared.stopping() {
                    return;
                }
                if let Err(e) = start_conn(&shared, &stop_rx, stream, at) {
                    eprintln!("peer: could not start a connection thread: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if let Err(RecvTimeoutError::Disconnected) = stop_rx.recv_timeout(ACCEPT_POLL) {
                    return;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                // ECONNABORTED, EMFILE and the like: try again shortly.
                if let Err(RecvTimeoutError::Disconnected) =
                    stop_rx.recv_timeout(Duration::from_millis(10))
                {
                    return;
                }
            }
        }
    }
}

fn start_conn(
    shared: &Arc<Shared>,
    stop_rx: &Receiver<()>,
    stream: TcpStream,
    at: Instant,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TICK))?;
    stream.set_write_timeout(Some(IO_TICK))?;
    let clone = stream.try_clone()?;
    let killed = Arc::new(AtomicBool::new(false));
    let behaviour = shared
        .behaviour
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let index = {
        let mut st = shared.lock();
        let index = st.rec.accepts.len();
        st.rec.accepts.push(at);
        st.rec.received.push(Vec::new());
        st.rec.closed.push(false);
        st.slots.push(ConnSlot {
            stream: Some(clone),
            killed: killed.clone(),
        });
        index
    };
    shared.changed.notify_all();
    let _ = shared.events.send(PeerEvent::Accepted(index, at));
    let mut conn = Conn {
        index,
        stream,
        shared: shared.clone(),
        killed,
        stop_rx: stop_rx.clone(),
        pending: Vec::new(),
        reset: false,
    };
    let sh = shared.clone();
    let spawned = thread::Builder::new()
        .name(format!("peer-conn-{index}"))
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_behaviour(&mut conn, &behaviour)
            }));
            drop(conn);
            if result.is_err() {
                sh.lock().script_panics.push(index);
            }
        });
    match spawned {
        Ok(handle) => {
            shared.lock().threads.push(handle);
            Ok(())
        }
        Err(e) => Err(e), // `conn` was dropped with the closure: the connection is closed
    }
}

// ---------------------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------------------

fn used_ports() -> &'static Mutex<HashSet<u16>> {
    static USED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    USED.get_or_init(|| Mutex::new(HashSet::new()))
}

fn reserve_port(port: u16) {
    used_ports()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(port);
}

fn random_u64() -> u64 {
    use std::sync::atomic::AtomicU64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

/// Ports outside the kernel's ephemeral range, as `lo..hi`.
fn port_pool() -> Option<(u16, u16)> {
    let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    if lo >= 12000 {
        Some((10000, lo as u16))
    } else if hi <= 60000 {
        Some((hi as u16 + 1, 65535))
    } else {
        None
    }
}

/// Bind a listener on a port of the pool no one in this process was given yet.
fn bind_fresh_listener() -> io::Result<TcpListener> {
    if let Some((lo, hi)) = port_pool() {
        for _ in 0..500 {
            let port = lo + (random_u64() % u64::from(hi - lo)) as u16;
            if used_ports()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&port)
            {
                continue;
            }
            if let Ok(l) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                reserve_port(port);
                return Ok(l);
            }
        }
    }
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    reserve_port(l.local_addr()?.port());
    Ok(l)
}

/// A port on 127.0.0.1 with nothing bound to it right now, below the ephemeral range, and
/// never handed out before in this process. Nothing holds it afterwards: another process
/// could take it (unlikely; the pool has over 20000 ports).
pub fn free_port() -> u16 {
    let l = bind_fresh_listener().expect("bind a listener on 127.0.0.1");
    l.local_addr().expect("local addr").port()
}

/// `tcp://127.0.0.1:PORT` where nothing listens: a connect is refused at once.
pub fn refused_endpoint() -> String {
    format!("tcp://127.0.0.1:{}", free_port())
}

/// A link to `peer` with the len32 framing and `Overflow::Block(bound)`, Ready (waited for up
/// to `bound`).
pub fn ready_len32_link(peer: &Peer, bound: Duration) -> relink::Link {
    let link = relink::Link::builder(peer.endpoint())
        .framing(relink::framing::LengthDelimited::len32())
        .delivery(|d| d.overflow = relink::Overflow::Block(bound))
        .build()
        .expect("build the link");
    super::watch::Watch::new(&link).until(bound, |t| t.to == relink::State::Ready);
    link
}

/// A link to [`refused_endpoint`] with these outbox limits (frames, bytes) and overflow
/// policy, to build: its frames stay in the outbox.
pub fn offline(limits: (usize, usize), policy: relink::Overflow) -> relink::Builder {
    relink::Link::builder(refused_endpoint()).delivery(|d| {
        d.outbox_frames = limits.0;
        d.outbox_bytes = limits.1;
        d.overflow = policy;
    })
}

/// A link to a peer on `port` that the test restarts while producers send: 4-byte length
/// prefixes, a short backoff (10 to 100 ms, a connection stable after 10 ms), and an outbox of
/// 2 000 frames or 1 MiB at which a producer waits up to 20 ms, each frame living `ttl`.
pub fn through_restarts(port: u16, ttl: std::time::Duration) -> relink::Builder {
    use std::time::Duration;
    relink::Link::builder(endpoint_for(port))
        .framing(relink::framing::LengthDelimited::len32())
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(10);
            r.backoff_max = Duration::from_millis(100);
            r.min_stable = Duration::from_millis(10);
        })
        .delivery(|d| {
            d.frame_ttl = Some(ttl);
            d.outbox_frames = 2_000;
            d.outbox_bytes = 1 << 20;
            d.overflow = relink::Overflow::Block(Duration::from_millis(20));
        })
}

/// [`offline`], built.
pub fn offline_link(limits: (usize, usize), policy: relink::Overflow) -> relink::Link {
    offline(limits, policy).build().expect("build the link")
}

/// How a [`burst`] peer ends its first connection once its bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `shutdown(Write)` (a clean FIN) at once, then the close after this long.
    Fin(Duration),
    /// An abortive close (RST, SO_LINGER 0) after this long.
    Reset(Duration),
}

/// A peer that writes `frames` length-prefixed frames of `len` bytes (`seq_frame(0..)`, a
/// u32 big-endian length in front) in one write on its first connection, then `tail` (bytes
/// of a frame cut short, or nothing), then ends as `ending` says. Later connections are held
/// open, silent, so that a redial adds nothing.
pub fn burst(frames: usize, len: usize, tail: Vec<u8>, ending: Ending) -> Behaviour {
    let mut bytes = Vec::with_capacity(frames * (len + 4) + tail.len());
    for seq in 0..frames as u64 {
        bytes.extend_from_slice(&encode_length_prefixed(&super::payload::seq_frame(
            seq, len,
        )));
    }
    bytes.extend_from_slice(&tail);
    let bytes = Arc::new(bytes);
    Behaviour::script(move |c| {
        if c.index() > 0 {
            return c.hold();
        }
        if c.write_all(&bytes).is_err() {
            return;
        }
        match ending {
            Ending::Fin(after) => {
                let _ = c.stream().shutdown(Shutdown::Write);
                c.pause(after);
            }
            Ending::Reset(after) => {
                c.pause(after);
                c.reset();
            }
        }
    })
}

/// `tcp://127.0.0.1:PORT`
pub fn endpoint_for(port: u16) -> String {
    format!("tcp://127.0.0.1:{port}")
}

/// Bytes of each connection a peer saw, in accept order, read from its event stream after it
/// stopped (a snapshot taken before `stop` could miss the last reads).
pub fn stop_and_collect(peer: Peer) -> Vec<Vec<u8>> {
    let rx = peer.events();
    peer.stop();
    let mut conns: Vec<Vec<u8>> = Vec::new();
    for ev in rx.try_iter() {
        match ev {
            PeerEvent::Accepted(i, _) => {
                if conns.len() <= i {
                    conns.resize(i + 1, Vec::new());
                }
            }
            PeerEvent::Data(i, bytes) => conns[i].extend_from_slice(&bytes),
            PeerEvent::Closed(_) => {}
        }
    }
    conns
}
