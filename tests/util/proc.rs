//! Child processes and process-wide locks: a copy of the running test binary as a peer that
//! can be killed with SIGKILL, a child that dies with its parent, and the lock that keeps
//! tests which count the process's threads and file descriptors alone.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
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

/// Env var giving the child peer its port; the helper test does nothing without it.
pub const CHILD_PORT_VAR: &str = "RELINK_FAULTS_CHILD_PEER_PORT";
/// Name of the helper test, for `--exact`.
pub const CHILD_PEER_TEST: &str = "child_peer_helper_echoes_on_the_port_it_is_given_until_killed";
/// The line the child prints once it listens.
pub const CHILD_READY: &str = "relink-faults-child-peer listening";

/// This test binary, re-run as an echo peer on `port`. Killed (SIGKILL) and reaped on drop.
pub struct ChildPeer {
    child: Option<Child>,
}

impl ChildPeer {
    /// Starts the child and waits (bounded) until it listens.
    pub fn start(port: u16) -> ChildPeer {
        let exe = std::env::current_exe().expect("path of the test binary");
        let mut cmd = Command::new(exe);
        cmd.args([CHILD_PEER_TEST, "--exact", "--ignored", "--nocapture"])
            .env(CHILD_PORT_VAR, port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("spawn the child peer");
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
        let peer = ChildPeer { child: Some(child) };
        wait_child_line(&rx, port);
        peer
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the child peer");
            let _ = child.wait();
        }
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

impl Drop for ChildPeer {
    fn drop(&mut self) {
        self.kill9();
    }
}
