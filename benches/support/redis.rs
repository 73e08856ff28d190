//! A `redis-server` child process for the `detect` program's SIGSTOP case.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A `redis-server` on 127.0.0.1, without persistence. Killed (SIGKILL) and reaped on drop,
/// even while SIGSTOPped. Its log goes to a file in the temp dir, quoted if it fails to start.
pub struct RedisServer {
    port: u16,
    child: Child,
    log: PathBuf,
}

impl RedisServer {
    /// Starts one on a free port and waits (up to 10 s) until it answers PING; Err says why
    /// it could not.
    pub fn start() -> Result<RedisServer, String> {
        let binary = super::find_on_path("redis-server").ok_or("redis-server not on PATH")?;
        let port = super::free_port();
        let log = std::env::temp_dir().join(format!(
            "relink-bench-redis-{}-{port}.log",
            std::process::id()
        ));
        let child = Command::new(&binary)
            .arg("--port")
            .arg(port.to_string())
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        let mut server = RedisServer { port, child, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(server.addr(), Duration::from_millis(200)) {
            let exited = matches!(server.child.try_wait(), Ok(Some(_)));
            if exited || Instant::now() >= deadline {
                let log = std::fs::read_to_string(&server.log).unwrap_or_default();
                return Err(format!("redis-server did not come up; log:\n{log}"));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `tcp://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("tcp://{}", self.addr())
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.child.id();
        // SAFETY: plain kill(2) on our own child, which is reaped only on drop.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}): {}", io::Error::last_os_error());
    }

    /// SIGSTOP: the process freezes; the kernel still completes new TCP handshakes.
    pub fn stop_signal(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT: resumes after [`RedisServer::stop_signal`].
    pub fn cont_signal(&self) {
        self.signal(libc::SIGCONT);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Sends `PING\r\n` and expects `+PONG\r\n`, all within `timeout`.
fn ping(addr: SocketAddr, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    if s.set_read_timeout(Some(timeout)).is_err() || s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut got = [0u8; 7];
    s.read_exact(&mut got).is_ok() && &got == b"+PONG\r\n"
}
