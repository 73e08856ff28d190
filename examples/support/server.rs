//! A server child process for the examples (redis-server, nats-server, mosquitto) on 127.0.0.1:
//! started, waited for until it accepts connections (bounded), and killed and reaped when its
//! [`Server`] is dropped, so an example leaves no server behind on any path: its end, an error
//! returned with `?`, a panic. A configuration file it reads is a [`Scratch`], removed the same
//! way.

// Each example uses a part of it.
#![allow(dead_code)]

use std::ffi::OsString;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const START_BOUND: Duration = Duration::from_secs(10);

/// A free port on 127.0.0.1.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// A server child process, killed (SIGKILL) and reaped on drop.
pub struct Server {
    program: PathBuf,
    args: Vec<OsString>,
    port: u16,
    child: Option<Child>,
}

impl Server {
    /// Starts `program` (from /usr/sbin, /usr/bin or PATH) with `args`, and waits until it
    /// accepts connections on 127.0.0.1:`port`.
    pub fn start<I, S>(program: &str, args: I, port: u16) -> Result<Server, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let program = ["/usr/sbin", "/usr/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(program))
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from(program));
        let mut server = Server {
            program,
            args: args.into_iter().map(Into::into).collect(),
            port,
            child: None,
        };
        server.start_again()?;
        Ok(server)
    }

    /// Kills the server and reaps it (nothing if it is not running).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again, as it was started, on the same port.
    pub fn start_again(&mut self) -> Result<(), String> {
        self.stop();
        let name = self.program.display().to_string();
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {name} ({e}): is it installed?"))?;
        // Held by the guard at once: a server that does not come up is killed too.
        self.child = Some(child);
        let deadline = Instant::now() + START_BOUND;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!("{name} exited at its start ({status})"));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{name} did not accept connections on port {} within {START_BOUND:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// `tcp://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A file in the temporary directory, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// Writes `text` to a file named `name` (made unique by the process id).
    pub fn write(name: &str, text: &str) -> Result<Scratch, String> {
        let path = std::env::temp_dir().join(format!("{}-{name}", std::process::id()));
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
        Ok(Scratch(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
