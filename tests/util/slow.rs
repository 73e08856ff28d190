//! A slow peer for the delivery tests: it reads one chunk per tick (64 KiB every 10 ms, say)
//! from the first connection, plain or TLS, and can be killed with a reset (SO_LINGER 0). Just
//! before its reset it measures what its kernel held unread (`peek`, the bytes `FIONREAD`
//! counts), and for TLS decrypts what of it it can, so a test can count the frames that the
//! kernel acknowledged and the application never read. Later connections are read at full
//! speed until they close.
//!
//! [`SlowPeer::kill_and_close`] also closes the listener, so that the link's next dial is
//! refused and libzmq's own redial (`native_retries`) makes the connection once
//! [`SlowPeer::listen_again`] has bound the same port again.
//!
//! Part of the test kit: `util::slow`. The serving thread stops when the peer is dropped
//! (a stop flag and 10 ms socket timeouts; the join is bounded by them).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::peers::set_linger_zero;

/// What a [`SlowPeer`] saw.
#[derive(Clone, Debug, Default)]
pub struct SlowSeen {
    /// Plaintext its application read, per connection in accept order.
    pub read: Vec<Vec<u8>>,
    /// Plaintext the killed connection's kernel held unread at the reset (what could be
    /// decrypted of it, with TLS).
    pub held: Vec<u8>,
    /// With TLS: ciphertext bytes held unread that could not be decrypted (a record cut short
    /// at the end).
    pub held_opaque: usize,
    /// Whether the first connection was killed.
    pub killed: bool,
    /// Whether the listener is open (it closes at a `kill_and_close`).
    pub listening: bool,
    /// Connections whose reading ended (killed, or read to their end).
    pub ended: usize,
}

/// See the module docs.
pub struct SlowPeer {
    addr: SocketAddr,
    seen: Arc<Mutex<SlowSeen>>,
    kill: Arc<AtomicBool>,
    /// Set with `kill`: the listener closes at the kill; `relisten` binds it again.
    close: Arc<AtomicBool>,
    relisten: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The flags the serving thread reads.
struct Flags {
    kill: Arc<AtomicBool>,
    close: Arc<AtomicBool>,
    relisten: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

const TICK: Duration = Duration::from_millis(10);

/// One accepted connection, plain or TLS, read through one interface.
struct Conn {
    sock: TcpStream,
    tls: Option<rustls::ServerConnection>,
}

impl Conn {
    /// Reads at most `max` socket bytes (waiting up to a tick); the plaintext they carried.
    /// None at the end of the stream or on an error.
    fn read(&mut self, max: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; max];
        let n = match self.sock.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => 0,
            Err(_) => return None,
        };
        self.plaintext(&buf[..n])
    }

    /// The plaintext in these socket bytes (for TLS, also answers the handshake).
    fn plaintext(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        let Some(tls) = &mut self.tls else {
            return Some(bytes.to_vec());
        };
        let mut out = Vec::new();
        let mut rd = bytes;
        while !rd.is_empty() {
            match tls.read_tls(&mut rd) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => return None,
            }
            tls.process_new_packets().ok()?;
            let _ = tls.reader().read_to_end(&mut out);
        }
        while tls.wants_write() {
            if tls.write_tls(&mut self.sock).is_err() {
                return None;
            }
        }
        Some(out)
    }

    /// The bytes this connection's kernel holds unread, without taking them.
    fn unread(&mut self) -> Vec<u8> {
        let _ = self.sock.set_nonblocking(true);
        let mut buf = vec![0u8; 64 << 20];
        let n = self.sock.peek(&mut buf).unwrap_or(0);
        buf.truncate(n);
        buf
    }
}

impl SlowPeer {
    /// Listens on 127.0.0.1 (a free port); reads `chunk` bytes per 10 ms from the first
    /// connection, with TLS when `tls` is given.
    pub fn start(tls: Option<Arc<rustls::ServerConfig>>, chunk: usize) -> SlowPeer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(SlowSeen::default()));
        let flag = || Arc::new(AtomicBool::new(false));
        let (kill, close, relisten, stop) = (flag(), flag(), flag(), flag());
        let thread = {
            let flags = Flags {
                kill: kill.clone(),
                close: close.clone(),
                relisten: relisten.clone(),
                stop: stop.clone(),
            };
            let seen = seen.clone();
            thread::spawn(move || serve(listener, tls, chunk, &seen, &flags))
        };
        SlowPeer {
            addr,
            seen,
            kill,
            close,
            relisten,
            stop,
            thread: Some(thread),
        }
    }

    /// `tcp://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// `tcp://localhost:PORT`, for TLS (the kit's server certificate names localhost).
    pub fn named_endpoint(&self) -> String {
        format!("tcp://localhost:{}", self.addr.port())
    }

    /// Kills the first connection at its next tick: measure what is unread, then reset.
    pub fn kill(&self) {
        self.kill.store(true, Ordering::SeqCst);
    }

    /// Kills the first connection as [`kill`](SlowPeer::kill) does and closes the listener
    /// with it: dials are refused until [`listen_again`](SlowPeer::listen_again).
    pub fn kill_and_close(&self) {
        self.close.store(true, Ordering::SeqCst);
        self.kill();
    }

    /// Binds the same port again after [`kill_and_close`](SlowPeer::kill_and_close) (within a
    /// few milliseconds; `listening` tells when).
    pub fn listen_again(&self) {
        self.relisten.store(true, Ordering::SeqCst);
    }

    /// What it saw so far.
    pub fn seen(&self) -> SlowSeen {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for SlowPeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    chunk: usize,
    seen: &Mutex<SlowSeen>,
    flags: &Flags,
) {
    let Flags {
        kill,
        close,
        relisten,
        stop,
    } = flags;
    let addr = listener.local_addr().unwrap();
    let mut listener = Some(listener);
    seen.lock().unwrap().listening = true;
    while !stop.load(Ordering::SeqCst) {
        if listener.is_none() && relisten.load(Ordering::SeqCst) {
            // std sets SO_REUSEADDR, and a reset leaves no TIME_WAIT: the port is free.
            let l = TcpListener::bind(addr).expect("bind the same port again");
            l.set_nonblocking(true).unwrap();
            listener = Some(l);
            seen.lock().unwrap().listening = true;
        }
        let accepted = listener.as_ref().map(TcpListener::accept);
        let sock = match accepted {
            Some(Ok((sock, _))) => sock,
            _ => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        let _ = sock.set_nonblocking(false);
        let _ = sock.set_read_timeout(Some(TICK));
        let mut conn = Conn {
            sock,
            tls: tls
                .as_ref()
                .map(|c| rustls::ServerConnection::new(c.clone()).unwrap()),
        };
        let index = {
            let mut s = seen.lock().unwrap();
            s.read.push(Vec::new());
            s.read.len() - 1
        };
        let slow = index == 0;
        while !stop.load(Ordering::SeqCst) {
            if slow && kill.load(Ordering::SeqCst) {
                let unread = conn.unread();
                let (held, opaque) = match conn.tls.is_some() {
                    false => (unread, 0),
                    true => {
                        let held = conn.plaintext(&unread).unwrap_or_default();
                        // Whole records were decrypted; what is left is a record cut short.
                        (held, unread.len() - tls_records_len(&unread))
                    }
                };
                set_linger_zero(&conn.sock);
                if close.load(Ordering::SeqCst) {
                    listener = None;
                }
                let mut s = seen.lock().unwrap();
                s.listening = listener.is_some();
                s.held = held;
                s.held_opaque = opaque;
                s.killed = true;
                break;
            }
            let Some(plain) = conn.read(if slow { chunk } else { 1 << 20 }) else {
                break;
            };
            seen.lock().unwrap().read[index].extend_from_slice(&plain);
            if slow {
                thread::sleep(TICK);
            }
        }
        let _ = conn.sock.flush();
        seen.lock().unwrap().ended += 1;
    }
}

/// The length of the whole TLS records at the start of `bytes`.
fn tls_records_len(bytes: &[u8]) -> usize {
    let mut at = 0;
    while bytes.len() >= at + 5 {
        let len = u16::from_be_bytes([bytes[at + 3], bytes[at + 4]]) as usize;
        if bytes.len() < at + 5 + len {
            break;
        }
        at += 5 + len;
    }
    at
}
