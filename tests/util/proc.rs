//! Child processes and process-wide locks: a child the tests stop, resume and kill, a copy of
//! the running test binary as a peer that can be killed with SIGKILL, a child that dies with
//! its parent, and the lock that keeps tests which count the process's threads and file
//! descriptors alone.

use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

/// Held for reading by every test, for writing by the test that counts the process's threads
/// and file descriptors (which every other test changes).
pub static PROCESS: RwLock<()> = RwLock::new(());

pub fn shared() -> RwLockReadGuard<'static, ()> {
    PROCESS.read().unwrap_or_else(|e| e.into_inner())
}

pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    PROCESS.write().unwrap_or_else(|e| e.into_inner())
}

/// A server's child process, while it runs: stopped and resumed with signals, killed with
/// SIGKILL and reaped on `kill` and on drop, even while SIGSTOPped.
#[derive(Debug, Default)]
pub struct ServerProcess {
    child: Option<Child>,
}

/// Where the server program `name` is installed: on PATH or in /usr/sbin (where Debian puts
/// nats-server and mosquitto). None when it is not installed: the test that needs it says so.
pub fn installed(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

impl ServerProcess {
    /// The one way a server of the kit starts: `cmd` as this server's child (its output
    /// dropped: a server that logs writes to a file of its own), then a wait of up to 10 s
    /// until `serves` says it serves. `Err` when the child exited first (it is reaped) or did
    /// not serve in time (it is killed).
    pub fn launch(
        &mut self,
        mut cmd: Command,
        mut serves: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {:?}: {e}", cmd.get_program()))?;
        self.set(child);
        let outcome = super::wait::wait_for(Duration::from_secs(10), || {
            if let Some(status) = self.exited() {
                return Some(Err(format!("{:?} exited ({status})", cmd.get_program())));
            }
            serves().then_some(Ok(()))
        });
        outcome.unwrap_or_else(|| {
            self.kill();
            Err(format!("{:?} did not serve within 10 s", cmd.get_program()))
        })
    }

    /// The child just started; panics if one still runs.
    pub fn set(&mut self, child: Child) {
        assert!(self.child.is_none(), "a child already runs");
        self.child = Some(child);
    }

    /// Process id (None once killed or exited).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status if it has exited (reaped: not running from then on).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self
            .child
            .as_mut()?
            .try_wait()
            .expect("wait for the child")?;
        self.child = None;
        Some(status)
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.pid().expect("the child is not running");
        // SAFETY: plain kill(2) on our own child, which is not reaped while `child` is Some.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}): {}", io::Error::last_os_error());
    }

    /// SIGSTOP: the process freezes; the kernel still completes new TCP handshakes. Returns
    /// once every thread of the process is stopped (a signal is delivered after `kill`
    /// returns: a thread on another core can still read and answer for a moment).
    pub fn stop_signal(&self) {
        self.signal(libc::SIGSTOP);
        let pid = self.pid().expect("the child is not running");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "process {pid} did not stop within 5 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGCONT: resume after `stop_signal`.
    pub fn cont_signal(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILL and reap (no-op if not running).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A server the tests run as a child process and stop, resume, kill and start again on the
/// same port.
pub trait Server {
    fn process(&self) -> &ServerProcess;
    fn process_mut(&mut self) -> &mut ServerProcess;
    /// Starts the child on the server's port and waits (bounded) until it serves.
    fn launch(&mut self);

    /// Process id (None once killed).
    fn pid(&self) -> Option<u32> {
        self.process().pid()
    }

    /// SIGSTOP: the process freezes; the kernel still completes new TCP handshakes (and no
    /// handshake above TCP ever completes).
    fn stop_signal(&self) {
        self.process().stop_signal();
    }

    /// SIGCONT: resume after `stop_signal`.
    fn cont_signal(&self) {
        self.process().cont_signal();
    }

    /// SIGKILL and reap (no-op if not running): connects are refused from then on.
    fn kill(&mut self) {
        self.process_mut().kill();
    }

    /// Starts again on the same port after `kill`.
    fn relaunch(&mut self) {
        self.launch();
    }

    /// `kill` then `relaunch` on the same port.
    fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

/// Makes the child `cmd` starts receive SIGKILL when its parent dies.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec here.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
}

/// This test binary re-run as a child that runs only the ignored test `test`, with `env` set:
/// dies with its parent; its stdout comes line by line through the receiver (stderr is
/// dropped).
pub fn run_self(test: &str, env: &[(&str, String)]) -> (Child, Receiver<String>) {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--ignored", "--nocapture"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().expect("spawn a child of the test binary");
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = crossbeam_channel::unbounded::<String>();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Env var giving the child peer its port; the helper test does nothing without it.
pub const CHILD_PORT_VAR: &str = "RELINK_FAULTS_CHILD_PEER_PORT";
/// Name of the helper test, for `--exact`.
pub const CHILD_PEER_TEST: &str = "child_peer_helper_echoes_on_the_port_it_is_given_until_killed";
/// The line the child prints once it listens.
pub const CHILD_READY: &str = "relink-faults-child-peer listening";

/// This test binary, re-run as an echo peer on `port`. Killed (SIGKILL) and reaped on drop.
pub struct ChildPeer {
    process: ServerProcess,
}

impl ChildPeer {
    /// Starts the child and waits (bounded) until it listens.
    pub fn start(port: u16) -> ChildPeer {
        let (child, rx) = run_self(CHILD_PEER_TEST, &[(CHILD_PORT_VAR, port.to_string())]);
        let mut peer = ChildPeer {
            process: ServerProcess::default(),
        };
        peer.process.set(child);
        wait_child_line(&rx, port);
        peer
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        self.process.kill();
    }

    /// SIGSTOP: the peer reads and answers nothing more; its kernel still acknowledges bytes.
    pub fn stop(&self) {
        self.process.stop_signal();
    }
}

pub fn wait_child_line(rx: &Receiver<String>, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match rx.recv_deadline(deadline) {
            Ok(line) if line.starts_with(CHILD_READY) => return,
            Ok(_) => {}
            Err(e) => panic!("the child peer on port {port} did not come up: {e}"),
        }
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    })
}
