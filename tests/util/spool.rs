//! Spool test support: a scratch directory removed on drop, and a child process (this test
//! binary re-run) that streams numbered frames through a spooled link until it is killed,
//! printing each number whose `send` returned `Ok`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::proc::{run_self, ServerProcess};

/// A directory of its own under the system's temporary directory, removed on drop.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> ScratchDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("relink-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        ScratchDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Env vars of the spool child: its spool directory, its durability (`every`, `os`, or
/// `group:MS`) and its peer's port. The helper test does nothing without them.
pub const SPOOL_DIR_VAR: &str = "RELINK_SPOOL_CHILD_DIR";
pub const SPOOL_POLICY_VAR: &str = "RELINK_SPOOL_CHILD_POLICY";
pub const SPOOL_PORT_VAR: &str = "RELINK_SPOOL_CHILD_PORT";
/// The helper test's name, for `--exact`.
pub const SPOOL_CHILD_TEST: &str = "spool_child_helper_streams_numbered_frames_until_killed";

/// The durability a child's env var names.
pub fn parse_policy(s: &str) -> relink::Durability {
    match s {
        "every" => relink::Durability::EveryFrame,
        "os" => relink::Durability::OsWriteBack,
        g => {
            let ms = g
                .strip_prefix("group:")
                .and_then(|m| m.parse().ok())
                .unwrap_or(5);
            relink::Durability::Group(Duration::from_millis(ms))
        }
    }
}

/// The spool child while it runs; SIGKILLed and reaped on drop.
pub struct SpoolChild {
    process: ServerProcess,
    lines: Receiver<String>,
    /// Each number acknowledged so far, with the child's microseconds since its start.
    pub acked: Vec<(u64, u64)>,
}

impl SpoolChild {
    /// Starts the child; returns once it printed its first acknowledged number (bounded).
    pub fn start(dir: &Path, policy: &str, port: u16) -> SpoolChild {
        let env = [
            (SPOOL_DIR_VAR, dir.display().to_string()),
            (SPOOL_POLICY_VAR, policy.to_string()),
            (SPOOL_PORT_VAR, port.to_string()),
        ];
        let (child, rx) = run_self(SPOOL_CHILD_TEST, &env);
        let mut c = SpoolChild {
            process: ServerProcess::default(),
            lines: rx,
            acked: Vec::new(),
        };
        c.process.set(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.acked.is_empty() {
            match c.lines.recv_deadline(deadline) {
                Ok(line) => c.note(&line),
                Err(e) => panic!("the spool child printed no number: {e}"),
            }
        }
        c
    }

    fn note(&mut self, line: &str) {
        let mut parts = line.split_whitespace();
        if parts.next() != Some("ok") {
            return;
        }
        let seq = parts.next().and_then(|s| s.parse().ok());
        let at = parts.next().and_then(|s| s.parse().ok());
        if let (Some(seq), Some(at)) = (seq, at) {
            self.acked.push((seq, at));
        }
    }

    /// Whether the child still runs.
    pub fn running(&mut self) -> bool {
        self.process.exited().is_none()
    }

    /// SIGKILL, then every number it printed before it died (its stdout read to the end,
    /// bounded).
    pub fn kill9(&mut self) -> Vec<(u64, u64)> {
        self.process.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(line) = self.lines.recv_deadline(deadline) {
            self.note(&line);
        }
        std::mem::take(&mut self.acked)
    }
}
