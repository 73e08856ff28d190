//! Test kit for TLS: a throw-away PKI written to a temp dir ([`TlsKit`]), a `redis-server`
//! child that speaks TLS only ([`TlsRedis`]), and a plain rustls client over a std
//! `TcpStream` ([`connect`]) to check a server without relink.
//!
//! Everything is bounded: the server must come up within 10 s, every client read and write
//! has a timeout, and the child is killed (SIGKILL, even while SIGSTOPped) and reaped on drop.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

#[allow(unused_imports)]
pub use super::pki::{Pem, Pki, PkiFiles, OTHER_NAME, SERVER_NAME};
use super::proc::{installed, Server, ServerProcess};
use super::redis::redis_ready;

/// A fresh PKI and its PEM files in a temp dir of their own, removed on drop.
#[derive(Debug)]
pub struct TlsKit {
    pub dir: PathBuf,
    pub pki: Pki,
    pub files: PkiFiles,
}

impl TlsKit {
    pub fn new() -> TlsKit {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "relink-tls-kit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Pki::new();
        let files = pki.write_to(&dir);
        TlsKit { dir, pki, files }
    }

    /// The certificate and key files of `cert`.
    pub fn server_files(&self, cert: ServerCert) -> &(PathBuf, PathBuf) {
        match cert {
            ServerCert::Valid => &self.files.server,
            ServerCert::OtherName => &self.files.other_name,
            ServerCert::Expired => &self.files.expired,
            ServerCert::UnknownCa => &self.files.unknown_ca_server,
        }
    }
}

impl Drop for TlsKit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Which certificate a TLS server presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCert {
    /// For `localhost` and 127.0.0.1, from the trusted CA.
    Valid,
    /// For [`OTHER_NAME`] only, from the trusted CA.
    OtherName,
    /// For `localhost`, expired.
    Expired,
    /// For `localhost`, from a CA nobody trusts.
    UnknownCa,
}

/// A port outside the kernel's ephemeral range (so no outgoing connection of this machine
/// can hold it while a restarted server wants it back), free when it is returned.
pub fn restartable_port() -> u16 {
    super::peers::free_port()
}

/// `redis-server` listening with TLS only (its plain port is off), on 127.0.0.1, without
/// persistence.
#[derive(Debug)]
pub struct TlsRedis {
    binary: PathBuf,
    port: u16,
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    auth_clients: bool,
    process: ServerProcess,
    log: PathBuf,
    /// With persistence: the directory of its append-only file (every write fsynced).
    data: Option<PathBuf>,
}

impl TlsRedis {
    /// None when `redis-server` is not on PATH. Presents `cert`; with `auth_clients` it
    /// requires a client certificate signed by the kit's CA (`--tls-auth-clients yes`).
    /// Panics if the server does not accept on its TLS port within 10 s.
    pub fn start(kit: &TlsKit, cert: ServerCert, auth_clients: bool) -> Option<TlsRedis> {
        TlsRedis::start_with(kit, cert, auth_clients, false)
    }

    /// As `start` (the valid certificate, no client certificate required), with `appendonly
    /// yes` and `appendfsync always`: what it answered survives a SIGKILL and `relaunch`. Its
    /// data lives in the kit's directory.
    pub fn start_persistent(kit: &TlsKit) -> Option<TlsRedis> {
        TlsRedis::start_with(kit, ServerCert::Valid, false, true)
    }

    fn start_with(
        kit: &TlsKit,
        cert: ServerCert,
        auth_clients: bool,
        persistent: bool,
    ) -> Option<TlsRedis> {
        let binary = installed("redis-server")?;
        let (cert, key) = kit.server_files(cert).clone();
        // A port found free may be taken again before redis binds it (by another test's
        // listener in this process): redis then exits, and a fresh port is tried.
        let mut refused = Vec::new();
        for _ in 0..3 {
            let port = restartable_port();
            let mut redis = TlsRedis {
                binary: binary.clone(),
                port,
                cert: cert.clone(),
                key: key.clone(),
                ca: kit.files.ca.clone(),
                auth_clients,
                process: ServerProcess::default(),
                log: kit.dir.join(format!("redis-{port}.log")),
                data: persistent.then(|| {
                    let dir = kit.dir.join(format!("redis-{port}.d"));
                    std::fs::create_dir_all(&dir).expect("create the redis data directory");
                    dir
                }),
            };
            match redis.try_launch() {
                Ok(()) => return Some(redis),
                Err(log) if log.contains("Address already in use") => refused.push(port),
                Err(log) => panic!(
                    "redis-server exited; log:
{log}"
                ),
            }
        }
        panic!("redis-server found each of the ports {refused:?} taken");
    }

    /// Starts the server and waits until it is ready; `Err` with its log if it exited first.
    fn try_launch(&mut self) -> Result<(), String> {
        // The log of a run before says it was ready: this run's must say so anew.
        let _ = std::fs::remove_file(&self.log);
        let auth = if self.auth_clients { "yes" } else { "no" };
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--port", "0", "--tls-port", &self.port.to_string()])
            .arg("--tls-cert-file")
            .arg(&self.cert)
            .arg("--tls-key-file")
            .arg(&self.key)
            .arg("--tls-ca-cert-file")
            .arg(&self.ca)
            .args(["--tls-auth-clients", auth])
            .args(match self.data {
                None => &["--appendonly", "no"][..],
                Some(_) => &["--appendonly", "yes", "--appendfsync", "always"][..],
            })
            .args(["--save", "", "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.data.as_deref().unwrap_or(self.log.parent().unwrap()))
            .arg("--logfile")
            .arg(&self.log);
        let log = self.log.clone();
        self.process
            .launch(cmd, || redis_ready(&log))
            .map_err(|e| format!("{e}\n{}", self.log_text()))
    }

    /// What the server logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// `tcp://localhost:PORT`: the name its valid certificate is for.
    pub fn named_endpoint(&self) -> String {
        format!("tcp://{SERVER_NAME}:{}", self.port)
    }
}

impl Server for TlsRedis {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Starts the server again on its port (it must be free).
    fn launch(&mut self) {
        if let Err(log) = self.try_launch() {
            panic!("redis-server exited; log:\n{log}");
        }
    }
}

/// A rustls client configuration trusting `ca_pem`, with an optional client certificate (and
/// rustls' process-wide provider, *ring*).
pub fn client_config(ca_pem: &str, client: Option<&Pem>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let chain = CertificateDer::pem_slice_iter(pem.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(pem.key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    Arc::new(config)
}

/// A blocking TLS client stream: a std `TcpStream` (every read and write bounded by
/// `timeout`) under rustls.
pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects to `addr` and completes a handshake checking `server_name`, within about
/// `timeout`. The error is rustls's own (or the socket's).
pub fn connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    server_name: &str,
    timeout: Duration,
) -> io::Result<TlsStream> {
    let name = ServerName::try_from(server_name.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let sock = TcpStream::connect_timeout(&addr, timeout)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
    let mut stream = StreamOwned::new(conn, sock);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// Sends `PING\r\n` and reads the reply (a single line), bounded by the stream's timeouts.
pub fn ping(stream: &mut TlsStream) -> io::Result<Vec<u8>> {
    stream.write_all(b"PING\r\n")?;
    stream.flush()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 64];
    while !reply.ends_with(b"\r\n") {
        match stream.read(&mut buf)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => reply.extend_from_slice(&buf[..n]),
        }
    }
    Ok(reply)
}

/// The rustls error inside an `io::Error` from [`connect`] or [`ping`], if that is what it is.
pub fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// What an in-process TLS server does with the plaintext it decrypts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// Sends it back.
    Echo,
    /// Keeps it (see [`TlsServer::plaintext`]).
    Record,
    /// Once the handshake completes, writes `frames` length-prefixed frames of `len` bytes
    /// (`seq_frame(0..)`) on the first connection, then close_notify, then `shutdown(Write)`
    /// (FIN), and closes `linger` later. Later connections are held open, silent.
    Burst {
        frames: usize,
        len: usize,
        linger: Duration,
    },
}

/// What a [`TlsServer`] saw, over all its connections.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every byte that arrived on its sockets, before decryption (capped at 1 MiB).
    pub raw: Vec<u8>,
    /// Every byte decrypted (capped at 1 MiB in `Record`; empty in `Echo`).
    pub plaintext: Vec<u8>,
    /// Bytes decrypted, all of them.
    pub plaintext_len: usize,
    /// Connections accepted.
    pub connections: usize,
    /// Handshakes completed.
    pub handshakes: usize,
    /// Why each failed handshake failed, as rustls said.
    pub errors: Vec<String>,
}

/// A rustls server on 127.0.0.1 in a thread of this process: no redis, no openssl. Each
/// connection has a thread; all of them stop when the server is dropped (a stop flag and
/// 20 ms socket timeouts; the joins are bounded).
#[derive(Debug)]
pub struct TlsServer {
    addr: SocketAddr,
    seen: Arc<std::sync::Mutex<Seen>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

#[allow(unused_imports)]
pub use super::pki::server_config;

const SEEN_CAP: usize = 1 << 20;

impl TlsServer {
    /// Listens on 127.0.0.1 (a free port) with `config`.
    pub fn start(config: Arc<rustls::ServerConfig>, serve: Serve) -> TlsServer {
        TlsServer::start_on(0, config, serve)
    }

    /// Listens on 127.0.0.1:`port` with `config`: a server restarted where another was
    /// (a [`restartable_port`]).
    pub fn start_on(port: u16, config: Arc<rustls::ServerConfig>, serve: Serve) -> TlsServer {
        use std::sync::atomic::AtomicBool;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let acceptor = {
            let (seen, stop, threads) = (seen.clone(), stop.clone(), threads.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((sock, _)) => {
                            seen.lock().unwrap().connections += 1;
                            let (config, seen, stop) = (config.clone(), seen.clone(), stop.clone());
                            let t = std::thread::spawn(move || {
                                serve_one(sock, config, serve, &seen, &stop)
                            });
                            threads.lock().unwrap().push(t);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        TlsServer {
            addr,
            seen,
            stop,
            threads,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `tcp://localhost:PORT`: the name the kit's valid server certificate is for.
    pub fn named_endpoint(&self) -> String {
        format!("tcp://{SERVER_NAME}:{}", self.addr.port())
    }

    /// Reads what it saw so far.
    pub fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().unwrap())
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for t in self.threads.lock().unwrap().drain(..) {
            let _ = t.join();
        }
    }
}

/// [`Serve::Burst`] on an established connection.
fn burst(
    sock: &mut TcpStream,
    conn: &mut rustls::ServerConnection,
    frames: usize,
    len: usize,
    linger: Duration,
) {
    for seq in 0..frames as u64 {
        let frame = super::payload::encode_length_prefixed(&super::payload::seq_frame(seq, len));
        if conn.writer().write_all(&frame).is_err() {
            return;
        }
    }
    conn.send_close_notify();
    while conn.wants_write() {
        if conn.write_tls(sock).is_err() {
            return;
        }
    }
    let _ = sock.shutdown(std::net::Shutdown::Write);
    std::thread::sleep(linger);
}

fn serve_one(
    mut sock: TcpStream,
    config: Arc<rustls::ServerConfig>,
    serve: Serve,
    seen: &std::sync::Mutex<Seen>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(5)));
    let mut conn = rustls::ServerConnection::new(config).unwrap();
    conn.set_buffer_limit(None);
    let mut buf = vec![0u8; 64 * 1024];
    let mut handshaking = true;
    while !stop.load(Ordering::SeqCst) {
        while conn.wants_write() {
            if conn.write_tls(&mut sock).is_err() {
                return;
            }
        }
        let n = match sock.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        };
        {
            let mut s = seen.lock().unwrap();
            let room = SEEN_CAP.saturating_sub(s.raw.len());
            s.raw.extend_from_slice(&buf[..n.min(room)]);
        }
        let mut rd = &buf[..n];
        let mut plain = Vec::new();
        while !rd.is_empty() {
            if conn.read_tls(&mut rd).unwrap_or(0) == 0 {
                break;
            }
            let processed = conn.process_new_packets();
            // rustls holds at most 16 KiB of plaintext: take it after every pass.
            let _ = conn.reader().read_to_end(&mut plain);
            if let Err(e) = processed {
                seen.lock().unwrap().errors.push(e.to_string());
                // The alert goes to the client, then the connection ends.
                while conn.wants_write() {
                    if conn.write_tls(&mut sock).is_err() {
                        break;
                    }
                }
                return;
            }
        }
        if handshaking && !conn.is_handshaking() {
            handshaking = false;
            let first = {
                let mut s = seen.lock().unwrap();
                s.handshakes += 1;
                s.handshakes == 1
            };
            if let Serve::Burst {
                frames,
                len,
                linger,
            } = serve
            {
                if first {
                    return burst(&mut sock, &mut conn, frames, len, linger);
                }
            }
        }
        if plain.is_empty() {
            continue;
        }
        {
            let mut s = seen.lock().unwrap();
            s.plaintext_len += plain.len();
            if serve == Serve::Record {
                let room = SEEN_CAP.saturating_sub(s.plaintext.len());
                s.plaintext
                    .extend_from_slice(&plain[..plain.len().min(room)]);
            }
        }
        if serve == Serve::Echo && conn.writer().write_all(&plain).is_err() {
            return;
        }
    }
}
