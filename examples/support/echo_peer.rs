//! A line-echo peer for the examples, in a thread of the example's process: it answers
//! `ping` with `PONG` and echoes everything else in upper case, and can be stopped (every
//! connection dropped) and started again on the same port.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A line-echo peer that can be stopped, dropping every connection.
pub struct EchoPeer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoPeer {
    pub fn start(port: u16) -> std::io::Result<EchoPeer> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut conns: Vec<TcpStream> = Vec::new();
            let mut buf = [0u8; 4096];
            while !flag.load(Ordering::Relaxed) {
                while let Ok((s, _)) = listener.accept() {
                    s.set_nonblocking(true).ok();
                    conns.push(s);
                }
                let mut quiet = true;
                conns.retain_mut(|s| match s.read(&mut buf) {
                    Ok(0) => false,
                    Ok(n) => {
                        quiet = false;
                        // Answer heartbeat pings, echo everything else in upper case.
                        let text = String::from_utf8_lossy(&buf[..n]).replace("ping\n", "pong\n");
                        s.write_all(text.to_uppercase().as_bytes()).is_ok()
                    }
                    Err(e) => matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                });
                if quiet {
                    thread::sleep(Duration::from_millis(5));
                }
            }
        });
        Ok(EchoPeer {
            stop,
            thread: Some(thread),
        })
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
