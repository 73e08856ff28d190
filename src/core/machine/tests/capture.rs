//! A logger that keeps every record, tagged with the thread that logged it, so that a test
//! can read its own lines while other tests run.

use std::sync::{Mutex, OnceLock};
use std::thread::ThreadId;

pub struct Capture(Mutex<Vec<(ThreadId, log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        let line = (std::thread::current().id(), r.level(), r.args().to_string());
        self.0.lock().unwrap().push(line);
    }
    fn flush(&self) {}
}

pub fn install() -> &'static Capture {
    static LOGGER: OnceLock<&'static Capture> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let logger: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(logger).expect("no other logger in unit tests");
        log::set_max_level(log::LevelFilter::Trace);
        logger
    })
}

/// This thread's lines at `level`.
pub fn lines(c: &Capture, level: log::Level) -> Vec<String> {
    let me = std::thread::current().id();
    let all = c.0.lock().unwrap();
    all.iter()
        .filter(|(t, l, _)| *t == me && *l == level)
        .map(|(_, _, m)| m.clone())
        .collect()
}
