//! A `nats-server` child process on 127.0.0.1, and a plain subscriber that stays subscribed
//! across its restarts and records what it is delivered.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::peers::{endpoint_for, free_port};
use super::proc::{installed, Server, ServerProcess};
use super::wait::wait_for;

/// A `nats-server` child process on 127.0.0.1. Killed (SIGKILL) and reaped on drop.
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    process: ServerProcess,
    /// Options after the defaults (`-c FILE`, ...).
    extra: Vec<String>,
    /// A configuration file of the test's, removed on drop.
    config: Option<PathBuf>,
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.process.kill();
        if let Some(c) = &self.config {
            let _ = std::fs::remove_file(c);
        }
    }
}

/// Whether a NATS server answers on `addr`: its greeting is an `INFO` line.
fn nats_greets(addr: SocketAddr, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).is_ok() && &buf == b"INFO"
}

impl NatsServer {
    /// None when `nats-server` is not on PATH (it is in /usr/sbin on Debian). Panics if it is
    /// there and does not greet within 10 s.
    pub fn start(extra: &[&str]) -> Option<NatsServer> {
        let binary = installed("nats-server")?;
        let mut server = NatsServer {
            binary,
            port: free_port(),
            process: ServerProcess::default(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            config: None,
        };
        server.launch();
        Some(server)
    }

    /// As `start`, with the server pinging each client every `interval_s` seconds and
    /// dropping one that misses two pings in a row (`ping_max: 2`).
    pub fn start_pinging(interval_s: u64) -> Option<NatsServer> {
        let config = std::env::temp_dir().join(format!(
            "relink-test-nats-{}-{}.conf",
            std::process::id(),
            free_port()
        ));
        std::fs::write(
            &config,
            format!("ping_interval: \"{interval_s}s\"\nping_max: 2\n"),
        )
        .expect("write the nats-server configuration");
        let path = config.to_string_lossy().into_owned();
        let mut server = NatsServer::start(&["-c", &path]);
        match &mut server {
            // Kept while the server lives: a relaunch reads it again.
            Some(s) => s.config = Some(config),
            None => {
                let _ = std::fs::remove_file(&config);
            }
        }
        server
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        endpoint_for(self.port)
    }
}

impl Server for NatsServer {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.extra);
        let addr = self.addr();
        let serves = || nats_greets(addr, Duration::from_millis(200));
        if let Err(e) = self.process.launch(cmd, serves) {
            panic!("nats-server on port {}: {e}", self.port);
        }
    }
}

/// A plain NATS subscriber to one subject: it reconnects whenever its connection drops,
/// subscribes again, answers the server's pings, and records each message's payload.
pub struct NatsSubscriber {
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Connections on which the subscription was confirmed (its `PING` answered).
    subscribed: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl NatsSubscriber {
    /// Subscribes to `subject` on the server at `addr`, and waits (bounded) until the
    /// subscription holds.
    pub fn start(addr: SocketAddr, subject: &str) -> NatsSubscriber {
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let subscribed = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, got, subscribed) = (stop.clone(), got.clone(), subscribed.clone());
            let subject = subject.to_string();
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let _ = subscribe_once(addr, &subject, &stop, &got, &subscribed);
                    thread::sleep(Duration::from_millis(2));
                }
            })
        };
        let s = NatsSubscriber {
            stop,
            got,
            subscribed,
            thread: Some(thread),
        };
        s.wait_subscribed(1);
        s
    }

    /// Waits (bounded: 10 s) until the subscription holds on its `n`-th connection.
    pub fn wait_subscribed(&self, n: u64) {
        let ok = wait_for(Duration::from_secs(10), || {
            (self.subscribed.load(Ordering::SeqCst) >= n).then_some(())
        });
        assert!(ok.is_some(), "the subscriber subscribed on connection {n}");
    }

    /// The payloads delivered so far.
    pub fn payloads(&self) -> Vec<Vec<u8>> {
        self.got.lock().unwrap().clone()
    }

    /// The distinct payloads delivered so far.
    pub fn distinct(&self) -> HashSet<Vec<u8>> {
        self.payloads().into_iter().collect()
    }
}

impl Drop for NatsSubscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection of the subscriber, until it drops or the subscriber stops.
fn subscribe_once(
    addr: SocketAddr,
    subject: &str,
    stop: &AtomicBool,
    got: &Mutex<Vec<Vec<u8>>>,
    subscribed: &AtomicU64,
) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    s.write_all(
        format!("CONNECT {{\"verbose\":false}}\r\nSUB {subject} 1\r\nPING\r\n").as_bytes(),
    )?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    while !stop.load(Ordering::SeqCst) {
        match r.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) if line.ends_with('\n') => {}
            // A timeout may leave part of a line read: the next read appends the rest.
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e),
        }
        let whole = std::mem::take(&mut line);
        let l = whole.trim_end();
        if l == "PING" {
            w.write_all(b"PONG\r\n")?;
        } else if l == "PONG" {
            subscribed.fetch_add(1, Ordering::SeqCst);
        } else if let Some(rest) = l.strip_prefix("MSG ") {
            let len: usize = rest
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let mut payload = vec![0u8; len + 2];
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut at = 0;
            while at < payload.len() {
                match r.read(&mut payload[at..]) {
                    Ok(0) => return Ok(()),
                    Ok(n) => at += n,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        if Instant::now() > deadline {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            payload.truncate(len);
            got.lock().unwrap().push(payload);
        }
    }
    Ok(())
}
