//! Name resolution off every IO thread.
//!
//! libzmq resolves a host name with a blocking getaddrinfo on its own IO thread at every attempt,
//! stalling every socket of the context, and then uses only the first address. relink instead
//! asks a small process-wide pool of resolver threads and gives libzmq IP literals only. A slow
//! answer delays only the link that asked (its connect timeout covers the wait).

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::stopwatch::CallClock;
use crate::core::guard::timed;
use crate::core::machine::Unresolved;
use crate::error::Callback;

/// Resolver threads in the pool.
const WORKERS: usize = 4;

/// Resolves a host name to its addresses; replaces the system resolver (getaddrinfo) for a
/// link, for tests or for a service-discovery lookup. Runs on relink's resolver threads.
///
/// A resolver that panics fails that dial: the panic is caught on the resolver thread (which
/// keeps serving), reported in an [`Event::Error`](crate::Event) with
/// [`LinkError::CallbackPanicked`](crate::error::LinkError::CallbackPanicked), and the link backs
/// off with cause [`CallbackPanic`](crate::Cause::CallbackPanic).
///
/// # Examples
/// Names from a service registry instead of DNS:
/// ```
/// use std::net::SocketAddr;
/// use std::time::Duration;
/// use relink::{Event, Link, Resolver, State};
/// # use std::io::{Read, Write};
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let port = listener.local_addr()?.port();
/// # std::thread::spawn(move || {
/// #     let (mut s, _) = listener.accept().unwrap();
/// #     let mut buf = [0u8; 1024];
/// #     while let Ok(n) = s.read(&mut buf) {
/// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
/// #     }
/// # });
///
/// let registry = Resolver::new(|host, port| match host {
///     "cache.internal" => Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))]),
///     _ => Err(format!("{host}: not registered")),
/// });
/// let link = Link::builder(&format!("tcp://cache.internal:{port}")) // a local echo server
///     .resolver(registry)
///     .dns_refresh(Duration::from_secs(10)) // ask the registry again every 10 s
///     .build()?;
/// let ready = loop {
///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
///         if t.to == State::Ready { break t; }
///     }
/// };
/// assert_eq!(ready.endpoint, Some(format!("tcp://127.0.0.1:{port}")));
/// link.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Resolver(Arc<ResolverFn>);

type ResolverFn = dyn Fn(&str, u16) -> Result<Vec<std::net::SocketAddr>, String> + Send + Sync;

impl Resolver {
    /// Wraps a closure: `(host, port) -> addresses` or a short reason.
    pub fn new(
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

fn pool() -> &'static Sender<Job> {
    static POOL: OnceLock<Sender<Job>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        for i in 0..WORKERS {
            let rx: Receiver<Job> = rx.clone();
            std::thread::Builder::new()
                .name(format!("relink-dns-{i}"))
                .spawn(move || {
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
                })
                .expect("spawn resolver thread");
        }
        tx
    })
}

/// Asks the pool to resolve `host`; `reply` gets the answer, on a resolver thread.
pub(super) fn resolve(custom: Option<Resolver>, host: String, port: u16, reply: Reply) {
    let job = Job {
        custom,
        host,
        port,
        reply,
    };
    // The pool lives as long as the process; a send cannot fail.
    let _ = pool().send(job);
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
