//! Name resolution off every IO thread.
//!
//! libzmq resolves a host name with a blocking getaddrinfo on its own IO thread at every attempt,
//! stalling every socket of the context, and then uses only the first address. relink instead
//! asks a small process-wide pool of resolver threads and gives libzmq IP literals only. A slow
//! answer delays only the link that asked (its connect timeout covers the wait).

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::stopwatch::CallClock;
use crate::core::guard::timed;
use crate::core::machine::Unresolved;
use crate::error::Callback;

/// Resolver threads in the pool.
const WORKERS: usize = 4;

/// A custom resolver: `(host, port) -> addresses` or a short reason ([`Builder::resolver`](crate::Builder::resolver)).
#[derive(Clone)]
pub(crate) struct Resolver(Arc<ResolverFn>);

type ResolverFn = dyn Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync;

impl Resolver {
    /// Wraps a closure: `(host, port) -> addresses` or a short reason.
    pub(crate) fn new(
        f: impl Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync + 'static,
    ) -> Resolver {
        Resolver(Arc::new(f))
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolver(..)")
    }
}

/// Where an answer goes (the asking link's IO thread).
pub(super) type Reply =
    Box<dyn FnOnce(Result<Vec<SocketAddr>, Unresolved>, Option<Duration>) + Send>;

struct Job {
    custom: Option<Resolver>,
    host: String,
    port: u16,
    reply: Reply,
}

static POOL: OnceLock<Sender<Job>> = OnceLock::new();

/// Starts the process's resolver threads, once: every IO pool does before its first link, so
/// a thread the system refuses is an error there, not a panic at a link's first lookup.
pub(crate) fn start() -> std::io::Result<()> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if POOL.get().is_some() {
        return Ok(());
    }
    let (tx, rx) = crossbeam_channel::unbounded::<Job>();
    for i in 0..WORKERS {
        let rx: Receiver<Job> = rx.clone();
        // A thread started before one that failed ends when `tx` is dropped.
        std::thread::Builder::new()
            .name(format!("relink-dns-{i}"))
            .spawn(move || serve(rx))?;
    }
    let _ = POOL.set(tx);
    Ok(())
}

/// One resolver thread: answers jobs until the pool's sender is gone.
fn serve(rx: Receiver<Job>) {
    for job in rx.iter() {
        let (result, took) = match &job.custom {
            Some(r) => {
                let (answer, took) = timed(&CallClock, Callback::Resolver, || {
                    (r.0)(&job.host, job.port)
                });
                let result = match answer {
                    Ok(answer) => answer.map_err(Unresolved::Failed),
                    Err(p) => Err(Unresolved::Panicked(p)),
                };
                (result, Some(took))
            }
            None => (
                lookup(&job.host, job.port).map_err(Unresolved::Failed),
                None,
            ),
        };
        (job.reply)(result, took);
    }
}

/// Asks the pool to resolve `host`; `reply` gets the answer, on a resolver thread.
pub(super) fn resolve(custom: Option<Resolver>, host: String, port: u16, reply: Reply) {
    let job = Job {
        custom,
        host,
        port,
        reply,
    };
    // Started with the link's IO pool, it lives as long as the process: a send cannot fail.
    match POOL.get() {
        Some(pool) => {
            let _ = pool.send(job);
        }
        None => (job.reply)(Err(Unresolved::Failed("no resolver threads".into())), None),
    }
}

fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    match (host, port).to_socket_addrs() {
        Ok(addrs) => {
            let mut out: Vec<SocketAddr> = Vec::new();
            for a in addrs {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
            if out.is_empty() {
                Err(format!("{host}: no address"))
            } else {
                Ok(out)
            }
        }
        Err(e) => Err(format!("{host}: {e}")),
    }
}
