//! A `redis-server` child process on 127.0.0.1.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use relink::error::{FlushError, RecvTimeoutError};
use relink::protocol::Redis;
use relink::{AbandonReason, Builder, Event, Events, Link, Metrics, Overflow, Redelivery, State};

use super::peers::{endpoint_for, free_port};
use super::proc::{installed, Server, ServerProcess};
use super::wait::wait_for;

/// A `redis-server` child process on 127.0.0.1, without persistence. Killed (SIGKILL) and
/// reaped on drop, even while SIGSTOPped. Its output goes to a log file in the temp dir,
/// quoted in the panic if it fails to start.
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    process: ServerProcess,
    log: PathBuf,
    /// With persistence: the directory of its append-only file (every write fsynced).
    data: Option<PathBuf>,
    /// Options given after the defaults (they override them).
    extra: Vec<String>,
}

/// Whether the redis-server writing to `log` is ready: it says so once its data is loaded.
/// No connect is tried before that: a connect to a port nobody listens on yet can be answered
/// by the connecting socket itself (a TCP self-connect), which then holds the port redis is
/// about to bind.
pub fn redis_ready(log: &Path) -> bool {
    std::fs::read_to_string(log).is_ok_and(|l| l.contains("Ready to accept connections"))
}

/// Send `PING\r\n` and expect `+PONG\r\n`, all within `timeout`.
pub fn redis_ping(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let min = Duration::from_millis(1);
    if s.set_write_timeout(Some(left().max(min))).is_err() || s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < 7 {
        let t = left();
        if t.is_zero() || s.set_read_timeout(Some(t.max(min))).is_err() {
            return false;
        }
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    got == b"+PONG\r\n"
}

impl RedisServer {
    /// None when `redis-server` is not on PATH. Panics if it is there but does not come
    /// up (answer PING) within 10 s.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(false, &[])
    }

    /// As `start`, with `appendonly yes` and `appendfsync always`: every write acknowledged
    /// is on disk, so what it answered survives a SIGKILL and `relaunch`. Its data directory
    /// is removed on drop.
    pub fn start_persistent() -> Option<RedisServer> {
        RedisServer::start_with(true, &[])
    }

    /// `start` (persistent as `start_persistent` if asked) with these options after the
    /// defaults, e.g. `["--appendfsync", "everysec"]`.
    pub fn start_with(persistent: bool, extra: &[&str]) -> Option<RedisServer> {
        let binary = installed("redis-server")?;
        let port = free_port();
        let data = persistent.then(|| {
            let dir = std::env::temp_dir()
                .join(format!("relink-test-redis-{}-{port}.d", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create the redis data directory");
            dir
        });
        let mut server = RedisServer {
            binary,
            port,
            process: ServerProcess::default(),
            log: std::env::temp_dir().join(format!(
                "relink-test-redis-{}-{port}.log",
                std::process::id()
            )),
            data,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.launch();
        Some(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        endpoint_for(self.port)
    }

    /// Its data directory, when persistent.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.data.as_deref()
    }

    /// PING it, expecting PONG within `timeout`.
    pub fn ping(&self, timeout: Duration) -> bool {
        redis_ping(self.addr(), timeout)
    }
}

impl Server for RedisServer {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    fn launch(&mut self) {
        let _ = std::fs::remove_file(&self.log);
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--port").arg(self.port.to_string());
        match &self.data {
            None => cmd
                .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(std::env::temp_dir()),
            Some(dir) => cmd
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ])
                .args(["--bind", "127.0.0.1", "--dir"])
                .arg(dir),
        };
        cmd.arg("--logfile").arg(&self.log).args(&self.extra);
        let log = self.log.clone();
        if let Err(e) = self.process.launch(cmd, || redis_ready(&log)) {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("redis-server on port {}: {e}; log:\n{log}", self.port);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
        if let Some(dir) = &self.data {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Kills `redis` and starts it again twice while `link` writes `writes` frames from
/// `producer` (each kill once another third of them has settled: confirmed or abandoned),
/// waits for the producer, flushes the link and closes it. Returns the final metrics, in
/// which every frame is accounted for.
pub fn kill_twice_while_writing(
    link: &Link,
    redis: &mut RedisServer,
    writes: u64,
    producer: std::thread::JoinHandle<()>,
    bound: Duration,
) -> Metrics {
    for kill in 1..=2u64 {
        let settled = || {
            let m = link.metrics();
            m.frames_confirmed + m.abandoned.total()
        };
        let flowing = wait_for(bound, || (settled() >= kill * writes / 3).then_some(()));
        assert!(flowing.is_some(), "writes flow");
        redis.kill();
        redis.relaunch();
    }
    producer.join().unwrap();
    match link.flush(bound) {
        Ok(()) | Err(FlushError::Abandoned { .. }) => {}
        Err(e) => panic!("the writes settle: {e}"),
    }
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    m
}

/// A link to `redis` for writes through its restarts: the `Redis` protocol (RESP, a heartbeat,
/// confirmation by reply), what a drop leaves unconfirmed resent or reported by `policy`, a
/// producer held up to `bound` at the outbox limit, a short backoff, and room in the events
/// channel for every write in flight to come back at once.
pub fn writer_to(redis: &RedisServer, policy: Redelivery, bound: Duration) -> Builder {
    Link::builder(redis.endpoint())
        .protocol(Redis::new())
        .delivery(|d| {
            d.redelivery = policy;
            d.overflow = Overflow::Block(bound);
        })
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(20);
            r.backoff_max = Duration::from_millis(100);
        })
        .events_capacity(65_536)
}

/// Collects, on a thread of its own, the frames given back in `Event::Abandoned` until the
/// link closes or `bound` passes.
pub fn collect_abandoned(
    events: &Events,
    bound: Duration,
) -> std::thread::JoinHandle<Vec<(relink::bytes::Bytes, AbandonReason)>> {
    let events = events.clone();
    std::thread::spawn(move || {
        let mut given_back = Vec::new();
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Abandoned { frame, reason }) => given_back.push((frame, reason)),
                Ok(Event::State(t)) if t.to == State::Closed => break,
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        given_back
    })
}
