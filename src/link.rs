//! The handle applications hold: a command sender and a receiver of events. `build()` lives
//! here, with the handle it builds.

use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{self as channel, Receiver};

use crate::batch::Batch;
use crate::builder::{Builder, Config, Overflow};
use crate::core::framing::BoxedFraming;
use crate::core::requests::RequestSettings;
use crate::error::{BatchError, ConfigError, SendError};
use crate::event::{Event, State};
use crate::events::Events;
use crate::io::ids::next_link_id;
use crate::io::intake::Intake;
use crate::io::pool::WorkerRef;
use crate::io::shared::{Command, Shared};
use crate::io::slot::{IoSettings, Slot, Wiring};
use crate::io::spool::{self, Store};
use crate::io::worker::{Msg, Route};
use crate::io::{Context, IoPool};
use crate::metrics::Metrics;
use crate::send::SendOptions;

mod producer;
mod send;
mod writer;

pub use producer::Producer;
pub use writer::Writer;

/// A self-healing TCP link. Cheap to clone; every clone drives the same link, from any thread.
///
/// Dropping the last clone starts the close [`close`](Link::close) makes, bounded by the
/// builder's `close_timeout`, and returns at once: the IO thread finishes it on its own
/// (flushes the outbox until `close_timeout`, gives what is left back in `Abandoned` events to
/// any [`Events`] clone still held, closes the socket).
///
/// # Examples
/// Every clone drives the same link: here one thread sends and another reads the replies.
/// ```
/// use std::time::Duration;
/// use relink::{Event, Link};
/// use relink::framing::Lines;
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
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
///     .framing(Lines::new())
///     .build()?;
/// let sender = link.clone();
/// std::thread::spawn(move || {
///     for i in 0..3 {
///         sender.send(format!("line {i}")).unwrap();
///     }
/// });
/// let mut replies = Vec::new();
/// while replies.len() < 3 {
///     if let Event::Frame(f) = link.events().recv_timeout(Duration::from_secs(5))? {
///         replies.push(String::from_utf8(f.to_vec())?);
///     }
/// }
/// assert_eq!(replies, ["line 0", "line 1", "line 2"]);
/// link.close(Duration::from_secs(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    route: Route,
    /// Keeps the IO thread from exiting while a handle can still reach it.
    _worker: Arc<WorkerRef>,
    shared: Arc<Shared>,
    events: Events,
    /// A copy of the link's framing, to check frames at the call.
    framing: BoxedFraming,
    overflow: Overflow,
    frame_ttl: Option<Duration>,
    close_timeout: Duration,
    linger: Duration,
    /// Disconnected when the IO thread has freed the link's slot.
    done: Receiver<()>,
    /// Request and reply settings, for the request calls.
    requests: RequestSettings,
    name: Arc<str>,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("name", &self.name())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Checks the configuration and starts the link.
    ///
    /// # Errors
    /// [`ConfigError`] for a setting out of range or a libzmq object that could not be made;
    /// see the example there. Examples of whole configurations are on [`Builder`].
    pub fn build(self) -> Result<Link, ConfigError> {
        let (config, context, pool) = self.validate()?;
        Link::start(config, context, pool)
    }
}

impl Link {
    /// A builder for a link to `endpoint`: `tcp://host:port`, or `host:port` for the same
    /// (host a name, an IPv4 literal or a bracketed IPv6 literal). `build()` checks it.
    ///
    /// See the examples on [`Builder`] and in the crate docs' quick start.
    pub fn builder(endpoint: impl AsRef<str>) -> Builder {
        Builder::new(endpoint.as_ref())
    }

    fn start(config: Config, context: Context, pool: IoPool) -> Result<Link, ConfigError> {
        let worker = pool.place();
        let link = Link::start_on(config, context, worker.clone());
        if link.is_err() {
            worker.wake.links.fetch_sub(1, Ordering::SeqCst);
        }
        link
    }

    /// Makes the link's sockets here, so that errors reach `build()`, then hands the link to
    /// its IO thread.
    fn start_on(
        config: Config,
        context: Context,
        worker: Arc<WorkerRef>,
    ) -> Result<Link, ConfigError> {
        let intake = Intake::new(config.core.outbox_frames, config.core.outbox_bytes);
        let (store, recovered) = match &config.spool {
            Some(spool) => {
                let (store, recovered) = Store::open(spool).map_err(ConfigError::Spool)?;
                (Some(store), Some(recovered))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared::new(worker.wake.clone(), intake).with_spool(store.clone()));
        let report = recovered.as_ref().and_then(|r| {
            let frames = r.frames.len() as u64;
            (frames > 0 || r.cut_bytes > 0).then(|| Event::Recovered {
                frames,
                cut_bytes: r.cut_bytes,
                seqs: match (r.frames.first(), r.frames.last()) {
                    (Some(a), Some(b)) => a.0..b.0 + 1,
                    _ => 0..0,
                },
            })
        });
        let route = Route {
            id: next_link_id(),
            tx: worker.tx.clone(),
        };
        // Unbounded underneath, so that an idle link holds no buffer; `events_capacity` is
        // kept by the IO thread (`Shared::events_queued`).
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let (done_tx, done) = crossbeam_channel::bounded::<()>(0);
        let seed = config.rng_seed.unwrap_or_else(rand::random);
        let io = IoSettings {
            socket: config.socket.clone(),
            resolver: config.resolver.clone(),
            events_capacity: config.events_capacity,
            closed_frames_wait: config.closed_frames_wait,
        };
        let wiring = Wiring {
            context,
            seed,
            shared: shared.clone(),
            id: route.id,
            post: route.post(),
            events: events_tx,
            done: done_tx,
            recovered: report,
        };
        let slot = Slot::new(config.core.clone(), io, wiring)?;
        // What the spool held goes first, before any frame the link is given.
        let mut restored = false;
        if let Some(recovered) = recovered {
            shared.intake.spool_cut(recovered.cut_bytes);
            let now = Instant::now();
            for (_, deadline, frame) in recovered.frames {
                let _ = shared
                    .intake
                    .restore(frame, spool::instant_deadline(deadline, now));
                restored = true;
            }
        }
        worker
            .tx
            .send(Msg::Register(Box::new(slot)))
            .map_err(|_| ConfigError::NoRoom("the IO thread has stopped".into()))?;
        if restored && route.send(Command::Take).is_ok() {
            shared.wake_for_command();
        }
        worker.wake.wake();
        Ok(Link {
            inner: Arc::new(Inner {
                route,
                _worker: worker,
                events: Events::new(events_rx, shared.clone(), config.core.name.clone()),
                shared,
                framing: config.core.framing.clone(),
                overflow: config.overflow,
                frame_ttl: config.frame_ttl,
                close_timeout: config.close_timeout,
                linger: config.socket.linger,
                done,
                requests: config.core.requests.clone(),
                name: config.core.name.clone(),
            }),
        })
    }

    /// The events of this link: frames, state changes, abandoned frames, errors.
    ///
    /// The channel is bounded (`events_capacity`): when the application falls behind, the link
    /// stops reading the socket, so TCP pushes back on the peer; nothing is dropped. Every
    /// clone of the returned receiver takes from the same stream.
    ///
    /// # Examples
    /// A reader thread of its own, through a clone of the receiver:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link};
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
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?; // a local echo server
    /// let events = link.events().clone();
    /// let reader = std::thread::spawn(move || loop {
    ///     match events.recv_timeout(Duration::from_secs(5)) {
    ///         Ok(Event::Frame(f)) => return Some(f),
    ///         Ok(Event::State(t)) => println!("{} -> {} ({})", t.from, t.to, t.cause),
    ///         Ok(_) => {}
    ///         Err(_) => return None,
    ///     }
    /// });
    /// link.send("hello")?;
    /// assert_eq!(reader.join().unwrap(), Some(relink::bytes::Bytes::from_static(b"hello")));
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events(&self) -> &Events {
        &self.inner.events
    }

    /// The current state.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, State};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: the link never gets far.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// assert!(matches!(link.state(), State::Idle | State::Connecting | State::Backoff));
    /// link.close(Duration::from_millis(50));
    /// assert_eq!(link.state(), State::Closed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn state(&self) -> State {
        State::from_u8(self.inner.shared.state.load(Ordering::Acquire))
    }

    /// Cuts a Backoff or Cooldown short: dial now. The attempt counter is kept. Ignored in
    /// other states.
    ///
    /// # Examples
    /// The server is known to be back: dial now instead of resting out the cooldown.
    /// ```
    /// use std::time::Duration;
    /// use relink::{Cause, Event, Link, State};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port` yet.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .native_retries(0)
    ///     .max_attempts(1)
    ///     .cooldown(Duration::from_secs(3600))
    ///     .build()?;
    /// loop {
    ///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         if t.to == State::Cooldown { break; }
    ///     }
    /// }
    /// let _server = std::net::TcpListener::bind(("127.0.0.1", port))?;
    /// link.reconnect_now();
    /// let mut causes = Vec::new();
    /// loop {
    ///     if let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         causes.push(t.cause);
    ///         if t.to == State::Ready { break; }
    ///     }
    /// }
    /// assert_eq!(causes, [Cause::ReconnectNow, Cause::TcpConnected, Cause::Alive]);
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reconnect_now(&self) {
        if self.inner.route.send(Command::ReconnectNow).is_ok() {
            self.inner.shared.wake();
        }
    }

    /// A snapshot of the link's metrics, exact at one instant: every frame sent before this
    /// call from this thread is counted.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    /// use relink::framing::Lines;
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
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
    ///     .framing(Lines::new())
    ///     .build()?;
    /// link.send("hello")?;
    /// while !matches!(link.events().recv_timeout(Duration::from_secs(5))?, Event::Frame(_)) {}
    /// let m = link.metrics();
    /// assert_eq!(m.state, State::Ready);
    /// assert_eq!((m.connects, m.frames_sent, m.frames_received), (1, 1, 1));
    /// assert_eq!(m.unaccounted(), 0);
    /// println!("{} for {:?}, peer {:?}", m.state, m.time_in_state, m.peer_addr);
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metrics(&self) -> Metrics {
        let shared = &*self.inner.shared;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let live = !shared.closed.load(Ordering::SeqCst)
            && self.inner.route.send(Command::Metrics(tx)).is_ok();
        let mut m = None;
        if live {
            shared.wake();
            m = rx.recv_timeout(Duration::from_secs(2)).ok();
        }
        m.unwrap_or_else(|| {
            // Wait (bounded) for the IO thread's final snapshot if it is stopping.
            let _ = self.inner.done.recv_timeout(Duration::from_secs(2));
            shared.final_metrics()
        })
    }

    /// The link's name ([`Builder::name`]; by default the endpoint given to
    /// [`Link::builder`]). Every log line about the link carries it.
    ///
    /// A [`Metrics`] snapshot stays `Copy` (plain numbers, cheap to take for thousands of
    /// links), so it does not carry the name: the handle does, and so do the events receiver
    /// ([`Events::name`]) and the pool's view ([`IoPool::view`](crate::IoPool::view)).
    ///
    /// See the example on [`Builder::name`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Makes the link's IO thread panic, as a bug in relink would: for tests of what the
    /// handles see when the IO thread stops. Only with the `test-hooks` feature, which only
    /// relink's own tests enable.
    #[cfg(feature = "test-hooks")]
    pub fn panic_io_thread_for_tests(&self) {
        if self.inner.route.send(Command::PanicForTests).is_ok() {
            self.inner.shared.wake();
        }
    }

    /// Closes the link: refuses new frames, flushes the outbox until `timeout`, abandons what
    /// is left (reason `Shutdown`, each frame returned in an event), closes the socket with a
    /// bounded linger and waits until its IO thread has let the link go (other links on that
    /// thread carry on). Returns the final metrics. Closing again is harmless.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, State};
    /// use relink::error::SendError;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: queued frames cannot go out.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// link.send("a")?;
    /// link.send("b")?;
    /// let m = link.close(Duration::from_millis(50)); // flushes for 50 ms, then gives up
    /// assert_eq!((m.state, m.abandoned.shutdown), (State::Closed, 2));
    /// assert_eq!(link.send("c"), Err(SendError::Closed(b"c"[..].into())));
    /// link.close(Duration::from_millis(50)); // closing again is harmless
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(&self, timeout: Duration) -> Metrics {
        self.inner.start_close(timeout);
        // The IO thread stops at the deadline, then closes the socket (bounded by linger).
        let bound = timeout + self.inner.linger + Duration::from_secs(2);
        if let Err(channel::RecvTimeoutError::Timeout) = self.inner.done.recv_timeout(bound) {
            log::error!(
                "relink[{}]: the link did not close within {bound:?}",
                self.name()
            );
        }
        self.metrics()
    }

    /// Closes the link as [`close`](Link::close) does, without blocking the thread: resolves
    /// with the final metrics once the IO thread has flushed (until `timeout`), abandoned what
    /// is left, closed the socket (libzmq keeps the bounded linger) and let the link go. Woken by the IO thread when it
    /// finishes; works on any executor. Closing again is harmless.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(link: relink::Link) {
    /// use std::time::Duration;
    ///
    /// let m = link.close_async(Duration::from_secs(1)).await;
    /// println!("{} frames sent", m.frames_sent);
    /// # }
    /// ```
    pub async fn close_async(&self, timeout: Duration) -> Metrics {
        self.inner.start_close(timeout);
        let shared = &*self.inner.shared;
        while !shared.finished.load(Ordering::SeqCst) {
            // Register, then look again: a finish after the look wakes the listener.
            let listener = shared.done.listen();
            if shared.finished.load(Ordering::SeqCst) {
                break;
            }
            listener.await;
        }
        shared.final_metrics()
    }
}

impl Inner {
    /// Refuses new frames and asks the IO thread to close by `now + timeout`; never waits.
    fn start_close(&self, timeout: Duration) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.intake.shut();
        let deadline = Instant::now() + timeout;
        if self.route.send(Command::Close { deadline }).is_ok() {
            self.shared.wake();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.start_close(self.close_timeout);
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync + Clone + 'static>() {}
    is::<Link>();
    is::<Events>();
    is::<crate::pool::Context>();
    is::<crate::IoPool>();
    fn is_send<T: Send + Sync + 'static>() {}
    is_send::<Event>();
    is_send::<Metrics>();
    is_send::<SendError>();
    is_send::<BatchError>();
    fn future_is_send<F: Future + Send>(_: F) {}
    fn link_futures_are_send(link: &Link) {
        future_is_send(link.send_async(Vec::new()));
        future_is_send(link.send_with_async(Vec::new(), SendOptions::new()));
        future_is_send(link.send_batch_async(Batch::new()));
        future_is_send(link.close_async(Duration::ZERO));
        future_is_send(link.events().recv_async());
    }
}
