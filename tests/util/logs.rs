//! The log lines a test binary's links write: a process-wide logger that keeps every line
//! (at debug level and above) so that a test can wait for one and read it.
//!
//! [`Logs::capture`] installs the logger on its first call (later calls share it); a test
//! then waits for a line with [`Logs::wait_for`], bounded and woken by each new line.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The lines kept, each as `LEVEL target: message`.
pub struct Logs {
    lines: Mutex<Vec<String>>,
    added: Condvar,
}

impl Log for Logs {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= Level::Debug
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format!("{} {}: {}", record.level(), record.target(), record.args());
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
        self.added.notify_all();
    }

    fn flush(&self) {}
}

impl Logs {
    /// The process's capturing logger, installed by the first call.
    pub fn capture() -> &'static Logs {
        static LOGS: OnceLock<&'static Logs> = OnceLock::new();
        LOGS.get_or_init(|| {
            let logs: &'static Logs = Box::leak(Box::new(Logs {
                lines: Mutex::new(Vec::new()),
                added: Condvar::new(),
            }));
            log::set_logger(logs).expect("no other logger in this test binary");
            log::set_max_level(LevelFilter::Debug);
            logs
        })
    }

    /// Every line kept so far that contains `needle`.
    pub fn matching(&self, needle: &str) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }

    /// Waits (bounded by `timeout`) for a line that contains `needle`; the first one.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(l) = lines.iter().find(|l| l.contains(needle)) {
                return Some(l.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            lines = self
                .added
                .wait_timeout(lines, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
