//! The peer every measurement dials: a TCP server on 127.0.0.1 that runs a handler for each
//! connection on a thread of its own ([`Peer`]), the handlers most of them need ([`echo`]),
//! and the same echo server in a child process, for measurements that must not count the
//! peer's CPU time ([`ChildPeer`]).

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// What a [`Peer`] runs for each connection: the stream and the connection's index (0 for
/// the first accepted, then 1, 2, ...). The connection closes when the handler returns. It
/// should return once a read gives 0 bytes or fails: that is how [`Peer::stop`] ends it.
pub type Handler = Arc<dyn Fn(TcpStream, usize) + Send + Sync>;

/// A TCP server on 127.0.0.1. Stopping it (or dropping it) closes its listener, so that
/// connects are refused from then on, and every connection it accepted.
pub struct Peer {
    port: u16,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    /// A second handle on every connection whose handler runs, to shut it down on stop.
    streams: Arc<Mutex<HashMap<usize, TcpStream>>>,
    handlers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Peer {
    /// Listens on a free port.
    pub fn start(handler: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> Peer {
        Peer::start_on(0, handler).expect("bind a peer on 127.0.0.1")
    }

    /// Listens on `port` (0: a free one). Fails if the port is taken.
    pub fn start_on(
        port: u16,
        handler: impl Fn(TcpStream, usize) + Send + Sync + 'static,
    ) -> io::Result<Peer> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let port = listener.local_addr()?.port();
        let handler: Handler = Arc::new(handler);
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(HashMap::new()));
        let handlers = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, streams, handlers) = (stop.clone(), streams.clone(), handlers.clone());
            thread::spawn(move || accept_loop(listener, handler, &stop, &streams, &handlers))
        };
        Ok(Peer {
            port,
            stop,
            accept: Some(accept),
            streams,
            handlers,
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `tcp://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// Closes the listener and every connection, and waits (bounded) for the handlers.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept; the loop sees the flag and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let _ = accept.join();
        for (_, s) in lock(&self.streams).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for h in lock(&self.handlers).drain(..) {
            while !h.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(2));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.shut();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(
    listener: TcpListener,
    handler: Handler,
    stop: &AtomicBool,
    streams: &Arc<Mutex<HashMap<usize, TcpStream>>>,
    handlers: &Mutex<Vec<JoinHandle<()>>>,
) {
    let mut index = 0;
    while !stop.load(Ordering::SeqCst) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors, or a connection reset before it was taken: try again.
                thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(clone) = stream.try_clone() {
            lock(streams).insert(index, clone);
        }
        let (handler, streams) = (handler.clone(), streams.clone());
        lock(handlers).push(thread::spawn(move || {
            handler(stream, index);
            // The connection closes when its last handle does: this one.
            lock(&streams).remove(&index);
        }));
        index += 1;
    }
}

/// The handler that writes back every byte it reads, TCP_NODELAY set, until the connection
/// ends.
pub fn echo(mut stream: TcpStream, _index: usize) {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Set in the child process that plays a [`ChildPeer`].
const CHILD_ENV: &str = "RELINK_BENCH_CHILD_PEER";

/// An echo [`Peer`] in a child process: this same program, started again with
/// `RELINK_BENCH_CHILD_PEER` set. A program that uses it calls [`serve_if_child`] first
/// thing in `main`.
pub struct ChildPeer {
    child: Child,
    port: u16,
}

/// In the child a [`ChildPeer`] started: runs the echo peer, prints its port, and exits
/// once stdin closes (the parent is done, or dead). Elsewhere returns at once.
pub fn serve_if_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let peer = Peer::start(echo);
    println!("port {}", peer.port());
    io::stdout().flush().expect("flush the port");
    let _ = io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0);
}

impl ChildPeer {
    /// Starts the child and reads its port.
    pub fn start() -> ChildPeer {
        let exe = std::env::current_exe().expect("path of this program");
        let mut child = Command::new(exe)
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the peer process");
        let stdout = child.stdout.take().expect("peer stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the peer's port");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("bad line from the peer: {line:?}"));
        ChildPeer { child, port }
    }

    /// `tcp://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// Closes the child's stdin and waits (bounded) for it to exit; kills it after 5 s.
    pub fn stop(mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
