//! Allocations per frame, each way, plaintext and TLS, counted by a global allocator.
//!
//! Run with `cargo bench --bench copies` (a few seconds; `-- --frames N` to change the count,
//! 20 000 by default).
//!
//! One link with [`LengthDelimited::len32`] talks to a peer on 127.0.0.1 that runs in this
//! process on threads whose allocations are not counted. Every other thread counts: the
//! program's own (which receives the events and calls `send`) and relink's. Each direction is
//! measured once the link is Ready, over `N` frames of 64 B and of 1 KiB:
//!
//! - `in`: the peer writes `N` frames; counted until the application has taken the `N`
//!   [`Event::Frame`]s;
//! - `out`: the frames are made before counting starts, then given to `send` one by one
//!   (`Overflow::Block`); counted until the peer has read every byte.
//!
//! One line per direction, transport and size:
//!
//! `copies dir=<in|out> tls=<bool> size=<bytes> frames=<N> allocs_per_frame=<x>
//! alloc_bytes_per_frame=<y>`
//!
//! libzmq allocates in C (its messages, its pipes): those allocations are not seen here.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use relink::framing::LengthDelimited;
use relink::{Event, Link, Overflow, State};
use support::tls::{client, server_config, Pki, TlsReader};

/// Counts every allocation (and reallocation) made by a thread that is not quiet.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the peer's threads: their allocations are not the link's.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

fn count(size: usize) {
    if !QUIET.try_with(Cell::get).unwrap_or(true) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only atomics and a const thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's layout is passed on as it came.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bound on every wait.
const BOUND: Duration = Duration::from_secs(60);

/// Allocations and bytes allocated so far.
fn counted() -> (u64, u64) {
    (ALLOCS.load(Ordering::SeqCst), BYTES.load(Ordering::SeqCst))
}

/// The len32 wire form of `n` frames of `size` bytes.
fn wire(n: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * (size + 4));
    for i in 0..n {
        out.extend_from_slice(&(size as u32).to_be_bytes());
        out.resize(out.len() + size, i as u8);
    }
    out
}

/// Accepts one connection on a quiet thread and hands it to `serve` with the TLS settings.
fn peer(
    tls: Option<Arc<rustls::ServerConfig>>,
    serve: impl FnOnce(TcpStream, Option<Arc<rustls::ServerConfig>>) + Send + 'static,
) -> (u16, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the peer");
    let port = listener.local_addr().expect("peer address").port();
    let handle = thread::spawn(move || {
        QUIET.with(|q| q.set(true));
        let (sock, _) = listener.accept().expect("accept the link");
        sock.set_nodelay(true).expect("nodelay");
        serve(sock, tls);
    });
    (port, handle)
}

/// A len32 link to `port` with the default settings, Ready.
fn link(port: u16, pki: Option<&Pki>) -> Link {
    let mut b = Link::builder(format!("tcp://127.0.0.1:{port}"))
        .framing(LengthDelimited::len32())
        .delivery(|d| d.overflow = Overflow::Block(BOUND));
    if let Some(pki) = pki {
        b = b.tls(client(pki));
    }
    let link = b.build().expect("build the link");
    support::wait_state(&link, State::Ready, Instant::now() + BOUND);
    link
}

/// Allocations per frame while the peer writes `n` frames of `size` bytes to the link.
fn inbound(n: usize, size: usize, pki: Option<&Pki>) -> (f64, f64) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let bytes = wire(n, size);
    let (port, peer) = peer(pki.map(server_config), move |mut sock, tls| {
        // The connection stays open until the link has every frame: a link whose reading is
        // paused acts on a close at once, and the frames still unread would be lost.
        match tls {
            None => {
                go_rx.recv_timeout(BOUND).expect("go");
                sock.write_all(&bytes).expect("write the frames");
                let _ = go_rx.recv_timeout(BOUND);
            }
            Some(config) => {
                let conn = rustls::ServerConnection::new(config).expect("tls session");
                let mut s = rustls::StreamOwned::new(conn, sock);
                // The handshake completes before the count starts.
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock).expect("tls handshake");
                }
                go_rx.recv_timeout(BOUND).expect("go");
                s.write_all(&bytes).expect("write the frames");
                s.flush().expect("flush");
                let _ = go_rx.recv_timeout(BOUND);
            }
        }
    });
    let link = link(port, pki);
    let before = counted();
    go_tx.send(()).expect("go");
    let deadline = Instant::now() + BOUND;
    let mut got = 0;
    while got < n {
        match link.events().recv_deadline(deadline).expect("frames") {
            Event::Frame(f) => {
                assert_eq!(f.len(), size);
                got += 1;
            }
            // The start-up transitions may still be on their way; leaving Ready is not.
            Event::State(t) => assert_ne!(t.from, State::Ready, "the link left Ready: {t:?}"),
            _ => {}
        }
    }
    let after = counted();
    drop(go_tx);
    link.close(Duration::from_millis(100));
    peer.join().expect("peer");
    per_frame(before, after, n)
}

/// Allocations per frame while the link sends `n` frames of `size` bytes to the peer.
fn outbound(n: usize, size: usize, pki: Option<&Pki>) -> (f64, f64) {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let total = n * (size + 4);
    let (port, peer) = peer(pki.map(server_config), move |sock, tls| {
        let mut reader: Box<dyn Read> = match tls {
            None => Box::new(sock),
            Some(config) => Box::new(TlsReader::new(sock, config)),
        };
        let mut buf = vec![0u8; 256 * 1024];
        let mut read = 0;
        while read < total {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => read += k,
            }
        }
        assert_eq!(read, total, "the peer read every byte");
        done_tx.send(()).expect("done");
    });
    let link = link(port, pki);
    let frames: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; size]).collect();
    let before = counted();
    for frame in frames {
        link.send(frame).expect("send");
    }
    done_rx
        .recv_timeout(BOUND)
        .expect("the peer read every frame");
    let after = counted();
    link.close(Duration::from_millis(100));
    peer.join().expect("peer");
    per_frame(before, after, n)
}

fn per_frame(before: (u64, u64), after: (u64, u64), n: usize) -> (f64, f64) {
    (
        (after.0 - before.0) as f64 / n as f64,
        (after.1 - before.1) as f64 / n as f64,
    )
}

fn main() {
    let n: usize = support::arg("frames")
        .map(|s| s.parse().expect("--frames N"))
        .unwrap_or(20_000);
    let pki = Pki::new();
    for tls in [false, true] {
        for size in [64usize, 1024] {
            let pki = tls.then_some(&pki);
            for (dir, (allocs, bytes)) in [
                ("in", inbound(n, size, pki)),
                ("out", outbound(n, size, pki)),
            ] {
                println!(
                    "copies dir={dir} tls={tls} size={size} frames={n} \
                     allocs_per_frame={allocs:.3} alloc_bytes_per_frame={bytes:.1}"
                );
            }
        }
    }
}
