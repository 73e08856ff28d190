//! A `redis-server` child process on 127.0.0.1.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Child;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::peers::{endpoint_for, free_port};
use super::wait::wait_for;

/// A `redis-server` child process on 127.0.0.1, without persistence. Killed (SIGKILL) and
/// reaped on drop, even while SIGSTOPped. Its output goes to a log file in the temp dir,
/// quoted in the panic if it fails to start.
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
    /// With persistence: the directory of its append-only file (every write fsynced).
    data: Option<PathBuf>,
    /// Options given after the defaults (they override them).
    extra: Vec<String>,
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
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
        let binary = find_on_path("redis-server")?;
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
            child: None,
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

    fn launch(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
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
        let child = cmd
            .arg("--logfile")
            .arg(&self.log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.binary.display()));
        self.child = Some(child);
        let addr = self.addr();
        let mut exited = None;
        let up = wait_for(Duration::from_secs(10), || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                exited = Some(status);
                return Some(false);
            }
            redis_ping(addr, Duration::from_millis(200)).then_some(true)
        });
        if up != Some(true) {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            self.kill();
            panic!(
                "redis-server on port {} did not come up (exit status: {:?}); log:\n{log}",
                self.port, exited
            );
        }
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

    /// Process id (None once killed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// PING it, expecting PONG within `timeout`.
    pub fn ping(&self, timeout: Duration) -> bool {
        redis_ping(self.addr(), timeout)
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.pid().expect("redis-server is not running");
        // SAFETY: plain kill(2) on our own child, which is not reaped while `child` is Some.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}): {}", io::Error::last_os_error());
    }

    /// SIGSTOP: the process freezes; the kernel still completes new TCP handshakes.
    pub fn stop_signal(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT: resume after `stop_signal`.
    pub fn cont_signal(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILL and reap (no-op if not running): connects are refused from then on.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port after `kill`, waiting until it answers PING.
    pub fn relaunch(&mut self) {
        self.launch();
    }

    /// `kill` then `relaunch` on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
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
