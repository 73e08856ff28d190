//! The handle applications hold: a command sender and a receiver of events. Every method of
//! [`Link`] is in this file, in sections: starting, state and events, close, sending (every
//! `send*` call, one submission through the intake), request and reply, flush, and the
//! [`Writer`] and [`Producer`] it makes; [`Builder::build`] starts a link through
//! `Link::start`. In link/: send.rs (a call's plan: its wait for room and its frames' deadline), writer.rs
//! ([`Writer`]) and producer.rs ([`Producer`]), each type with its own methods.

use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{self as channel, Receiver};

use self::send::{Plan, Wait};
use crate::builder::{Builder, Config, Overflow};
use crate::core::batch::Batch;
use crate::core::framing::BoxedFraming;
use crate::core::requests::{Matching, RequestSettings};
use crate::error::{BatchError, ConfigError, FlushError, RequestError, SendError};
use crate::event::{Event, State};
use crate::io::answer::Answer;
use crate::io::ids::next_link_id;
use crate::io::intake::{Asked, Intake, Refused, Tell};
use crate::io::look::{LookSpan, Looks};
use crate::io::pool::WorkerRef;
use crate::io::shared::{Command, Shared};
use crate::io::slot::{IoSettings, Slot, Wiring};
use crate::io::spool::{self, Store};
use crate::io::worker::{Msg, Route};
use crate::io::{Context, IoPool};
use crate::metrics::Metrics;
use crate::pending::Pending;
use crate::receiver::Events;
use crate::send::{SendOptions, WaitFor};

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

impl Link {
    /// A builder for a link to `endpoint`: `tcp://host:port`, or `host:port` for the same
    /// (host a name, an IPv4 literal or a bracketed IPv6 literal). `build()` checks it.
    ///
    /// See the examples on [`Builder`] and in the crate docs' quick start.
    pub fn builder(endpoint: impl AsRef<str>) -> Builder {
        Builder::new(endpoint.as_ref())
    }

    /// Starts a link on its IO pool with a checked configuration ([`Builder::build`]).
    pub(crate) fn start(
        config: Config,
        context: Context,
        pool: IoPool,
    ) -> Result<Link, ConfigError> {
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
        let shared = Arc::new(
            Shared::new(worker.wake.clone(), intake)
                .with_looks(config.looks)
                .with_spool(store.clone()),
        );
        let report = recovered.as_ref().and_then(|r| {
            let frames = r.frames.len() as u64;
            (frames > 0 || r.cut_bytes > 0 || r.lost.0 > 0).then(|| Event::Recovered {
                frames,
                cut_bytes: r.cut_bytes,
                seqs: match (r.frames.first(), r.frames.last()) {
                    (Some(a), Some(b)) => a.0..b.0 + 1,
                    _ => 0..0,
                },
                lost_at_most: r.lost.0,
                lost_seqs: r.lost.1.clone(),
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
            looks: config.looks == Looks::Learnt,
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
        // The frames the spool recovered were admitted once: the machine's outbox holds them
        // besides its limits, which bound the new frames only (the intake counts both), so
        // none is given back as `Overflow` unless the policy is `DropOldest`.
        let mut core = config.core.clone();
        if let Some(r) = &recovered {
            core.outbox_frames = core.outbox_frames.saturating_add(r.frames.len());
            let bytes = r.frames.iter().map(|f| f.2.len()).sum::<usize>();
            core.outbox_bytes = core.outbox_bytes.saturating_add(bytes);
        }
        let slot = Slot::new(core, io, wiring)?;
        // What the spool held goes first, before any frame the link is given.
        let mut restored = false;
        if let Some(recovered) = recovered {
            shared
                .intake
                .spool_cut(recovered.cut_bytes, recovered.lost.0);
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
    ///     .reconnect(|r| {
    ///         r.native_retries = 0;
    ///         r.max_attempts = Some(1);
    ///         r.cooldown = Duration::from_secs(3600);
    ///     })
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

    /// The link's name ([`Builder::name`](crate::Builder::name); by default the endpoint given to
    /// [`Link::builder`]). Every log line about the link carries it.
    ///
    /// A [`Metrics`] snapshot stays `Copy` (plain numbers, cheap to take for thousands of
    /// links), so it does not carry the name: the handle does, and so do the events receiver
    /// ([`Events::name`]) and the pool's view ([`IoPool::view`](crate::IoPool::view)).
    ///
    /// See the example on [`Builder::name`](crate::Builder::name).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Makes the link's IO thread panic, as a bug in relink would (`test_hooks`).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn panic_io_thread(&self) {
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

    // ----- sending: every `send*` call, one submission through the intake ------------------------

    /// Queues a frame, applying the overflow policy at the outbox limit. Never waits on the
    /// network: with `RejectNew` (the default) and `DropOldest` it returns at once; with
    /// `Block(t)` it waits up to `t` for room. The builder's `frame_ttl` applies.
    /// [`send_with`](Link::send_with) is the same call with options.
    ///
    /// Takes anything that converts into [`Bytes`] without a copy: a `Vec<u8>`, a `String`,
    /// a `&'static` string or byte string, a `Bytes` (a clone of one is a reference count).
    /// A small frame is copied once, into the link's intake; a large one (over 1 KiB) is
    /// handed over as it is. A producer of many small frames that can say when it pauses goes
    /// faster through a [`Writer`](crate::Writer) ([`Link::writer`]), which hands them over a
    /// batch at a time.
    ///
    /// Frames and [requests](Link::request) leave in the order of the calls that gave them
    /// (through this handle and its clones), after a drop too: a frame sent after a request is
    /// never written before it.
    ///
    /// # Errors
    /// The frame comes back in the error: [`SendError::Full`] at the limit,
    /// [`SendError::Closed`] after `close`, [`SendError::Invalid`] when the framing cannot
    /// encode it.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link};
    /// use relink::error::SendError;
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
    /// link.send("PING")?; // queued at once, sent as soon as the link is Ready
    /// // A line cannot hold a newline: refused at the call, the frame given back.
    /// let err = link.send("a\nb").unwrap_err();
    /// assert!(matches!(err, SendError::Invalid(..)));
    /// assert_eq!(err.into_inner(), &b"a\nb"[..]);
    /// loop {
    ///     if let Event::Frame(f) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         assert_eq!(f, &b"PING"[..]);
    ///         break;
    ///     }
    /// }
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send(&self, frame: impl Into<Bytes>) -> Result<(), SendError> {
        self.send_with(frame, SendOptions::new())
    }

    /// Queues a frame as `options` say: how long to wait for room at the outbox limit, and how
    /// long the frame may wait to be sent. `send` is this call with `SendOptions::new()`
    /// of their own; `SendOptions::new().no_wait()` refuses at once at the limit, whatever the
    /// policy.
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// A frame that is worthless once late is given back with reason `Expired`:
    /// ```
    /// use std::time::Duration;
    /// use relink::{AbandonReason, Event, Link, SendOptions};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: the frame cannot be sent in time.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// link.send_with("price: 42", SendOptions::new().ttl(Duration::from_millis(20)))?;
    /// let (frame, reason) = loop {
    ///     if let Event::Abandoned { frame, reason } =
    ///         link.events().recv_timeout(Duration::from_secs(5))?
    ///     {
    ///         break (frame, reason);
    ///     }
    /// };
    /// assert_eq!((&frame[..], reason), (&b"price: 42"[..], AbandonReason::Expired));
    /// assert_eq!(link.close(Duration::from_millis(50)).abandoned.expired, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_with(
        &self,
        frame: impl Into<Bytes>,
        options: SendOptions,
    ) -> Result<(), SendError> {
        let plan = self.plan(options);
        let mut frame = frame.into();
        let mut until = None;
        loop {
            frame = match self.submit(frame, &plan)? {
                None => return Ok(()),
                Some(frame) => frame,
            };
            let until = *until.get_or_insert_with(|| plan.until());
            if !self
                .inner
                .shared
                .intake
                .wait_for_room(frame.len(), until, plan.forced)
            {
                return Err(self.refuse(frame));
            }
        }
    }

    /// Queues a frame as [`send_with`](Link::send_with) does, without blocking the thread: the
    /// same options, the same bounds on the wait.
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, SendOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let options = SendOptions::new()
    ///     .wait(Duration::from_secs(1))
    ///     .ttl(Duration::from_millis(20));
    /// link.send_async("quote", options).await?;
    /// let m = link.close_async(Duration::from_millis(100)).await;
    /// assert_eq!(m.abandoned.expired, 1); // nobody listens: too late for its 20 ms
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_async(
        &self,
        frame: impl Into<Bytes>,
        options: SendOptions,
    ) -> Result<(), SendError> {
        let plan = self.plan(options);
        let mut frame = frame.into();
        let mut until = None;
        loop {
            frame = match self.submit(frame, &plan)? {
                None => return Ok(()),
                Some(frame) => frame,
            };
            let until = *until.get_or_insert_with(|| plan.until());
            let intake = &self.inner.shared.intake;
            if !intake.room_async(frame.len(), until, plan.forced).await {
                return Err(self.refuse(frame));
            }
        }
    }

    /// How a call with `options` waits and what deadline its frames get.
    fn plan(&self, options: SendOptions) -> Plan {
        let inner = &*self.inner;
        let forced = inner.overflow == Overflow::DropOldest;
        let wait = match options.wait {
            None => match inner.overflow {
                Overflow::RejectNew => Wait::No,
                Overflow::DropOldest => Wait::Forced,
                Overflow::Block(t) => Wait::For(t),
            },
            Some(WaitFor::No) if forced => Wait::Forced,
            Some(WaitFor::No) => Wait::No,
            Some(WaitFor::For(t)) => Wait::For(t),
        };
        Plan {
            forced: wait == Wait::Forced,
            wait,
            ttl: options.ttl.or(inner.frame_ttl),
        }
    }

    /// The one submission under every `send*` call: the framing's check, then the frame is
    /// queued in the intake if there is room now (and the IO thread told if it must be).
    /// `Ok(None)` when queued; `Ok(Some(frame))` when it found no room and the call may wait.
    fn submit(&self, mut frame: Bytes, plan: &Plan) -> Result<Option<Bytes>, SendError> {
        let inner = &*self.inner;
        if inner.shared.spool.is_some() {
            let mut once = Some(frame);
            let mut make = |_| once.take().unwrap_or_default();
            return Ok(self.submit_spooled(&mut make, plan)?.err());
        }
        if let Err(e) = inner.framing.check(&frame) {
            return Err(self.reject(SendError::Invalid(frame, e)));
        }
        let deadline = plan.ttl.map(|t| Instant::now() + t);
        match inner.shared.intake.offer(&mut frame, deadline, plan.forced) {
            Ok(tell) => {
                drop(frame);
                self.tell(tell);
                Ok(None)
            }
            Err(Refused::Closed) => Err(self.reject(SendError::Closed(frame))),
            Err(Refused::Full) if plan.wait == Wait::No => Err(self.refuse(frame)),
            Err(Refused::Full) => Ok(Some(frame)),
        }
    }

    /// [`submit`](Link::submit) on a spooled link: the frame `make` gives for its sequence
    /// number is written to the spool, then queued (or taken back from the spool).
    /// `Ok(Ok(seq))` when queued; `Ok(Err(frame))` when it found no room and the call may
    /// wait.
    fn submit_spooled(
        &self,
        make: &mut dyn FnMut(u64) -> Bytes,
        plan: &Plan,
    ) -> Result<Result<u64, Bytes>, SendError> {
        enum No {
            Room(Refused),
            Invalid(crate::error::EncodeError),
        }
        let inner = &*self.inner;
        let Some(store) = &inner.shared.spool else {
            return Err(self.reject(SendError::Spool(make(0), "no spool".into())));
        };
        let deadline = plan.ttl.map(|t| Instant::now() + t);
        let intake = &inner.shared.intake;
        let framing = &inner.framing;
        let offer = |frame: &mut Bytes| {
            framing.check(frame).map_err(No::Invalid)?;
            intake.offer(frame, deadline, plan.forced).map_err(No::Room)
        };
        match store.admit_one(make, spool::wall_deadline(plan.ttl), offer) {
            Ok(Ok((seq, tell))) => {
                self.tell(tell);
                Ok(Ok(seq))
            }
            Ok(Err((frame, No::Invalid(e)))) => Err(self.reject(SendError::Invalid(frame, e))),
            Ok(Err((frame, No::Room(Refused::Closed)))) => {
                Err(self.reject(SendError::Closed(frame)))
            }
            Ok(Err((frame, No::Room(Refused::Full)))) if plan.wait == Wait::No => {
                Err(self.refuse(frame))
            }
            Ok(Err((frame, No::Room(Refused::Full)))) => Ok(Err(frame)),
            Err((frame, e)) => Err(self.reject(SendError::Spool(frame, e))),
        }
    }

    /// Queues the frame `make` gives for its sequence number in the link's
    /// [`Spool`](crate::Spool), as [`send`](Link::send) queues a frame, and returns the number.
    /// Numbers grow by one per frame admitted within a run, and a start goes on past every
    /// number given before (they are reserved on disk a block ahead), so no two frames ever
    /// share one and a receiver that finds the number in the frame can drop a frame it saw
    /// before: a spool delivers at least once. `make` may be called again (with the next free number) when the call waits
    /// for room.
    ///
    /// # Errors
    /// As [`send`](Link::send), and [`SendError::Spool`] for a write error or a link without
    /// a spool.
    ///
    /// # Examples
    /// See [`Spool`](crate::Spool).
    pub fn send_numbered<B: Into<Bytes>>(
        &self,
        mut make: impl FnMut(u64) -> B,
    ) -> Result<u64, SendError> {
        let plan = self.plan(SendOptions::new());
        let mut make = |seq| make(seq).into();
        let mut until = None;
        loop {
            let frame = match self.submit_spooled(&mut make, &plan)? {
                Ok(seq) => return Ok(seq),
                Err(frame) => frame,
            };
            let until = *until.get_or_insert_with(|| plan.until());
            if !self
                .inner
                .shared
                .intake
                .wait_for_room(frame.len(), until, plan.forced)
            {
                return Err(self.refuse(frame));
            }
        }
    }

    /// Tells the IO thread that frames wait in the intake, if they are the first since it
    /// last took them; it is woken only if it sleeps.
    fn tell(&self, tell: Tell) {
        if tell.0 && self.inner.route.send(Command::Take).is_ok() {
            self.inner.shared.wake_for_command();
        }
        // A send that fails finds the IO thread gone: the frames are given back by the
        // slot's `StopGuard`, as abandoned.
    }

    /// The error for a frame that found no room: `Closed` if the link closed meanwhile.
    fn refuse(&self, frame: Bytes) -> SendError {
        let err = if self.inner.shared.closed.load(Ordering::SeqCst) {
            SendError::Closed(frame)
        } else {
            SendError::Full(frame)
        };
        self.reject(err)
    }

    /// What the request calls (`crate::request`) need of the handle: the framing, to check a
    /// request at the call, the request settings, and how long a blocking wait for a reply
    /// looks before it sleeps (the link's, shared with its event receives).
    fn request_parts(&self) -> (&BoxedFraming, &RequestSettings, &Arc<LookSpan>) {
        (
            &self.inner.framing,
            &self.inner.requests,
            &self.inner.shared.look,
        )
    }

    /// Hands a command to the IO thread; gives it back if the link is closed.
    fn enqueue_command(&self, cmd: Command) -> Result<(), Command> {
        let inner = &*self.inner;
        if inner.shared.closed.load(Ordering::SeqCst) {
            return Err(cmd);
        }
        match inner.route.send(cmd) {
            Ok(()) => {
                inner.shared.wake_for_command();
                Ok(())
            }
            Err(crossbeam_channel::SendError(cmd)) => Err(cmd),
        }
    }

    /// Queues a request in the intake, behind the frames and requests before it; gives it
    /// back if the link is closed. A request that reaches a link closing meanwhile is
    /// answered `Closed` when the intake's last frames are taken, never left waiting.
    fn enqueue_request(&self, asked: Asked) -> Result<(), Asked> {
        let shared = &self.inner.shared;
        if shared.closed.load(Ordering::SeqCst) {
            return Err(asked);
        }
        let tell = shared.intake.offer_request(asked)?;
        self.tell(tell);
        Ok(())
    }

    fn reject(&self, e: SendError) -> SendError {
        self.inner.shared.intake.rejected(1);
        e
    }

    /// Queues a batch as `options` say (see [`send_with`](Link::send_with)): the wait bounds
    /// the whole call, the deadline applies to every frame.
    ///
    /// # Errors
    /// As [`send_batch`](Link::send_batch).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Batch, Link, SendOptions};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: the frames wait in the outbox until they expire.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let batch: Batch = ["tick 1", "tick 2"].into_iter().collect();
    /// link.send_batch(batch, SendOptions::new().ttl(Duration::from_millis(20)))?;
    /// std::thread::sleep(Duration::from_millis(100));
    /// assert_eq!(link.close(Duration::from_millis(50)).abandoned.expired, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_batch(&self, batch: Batch, options: SendOptions) -> Result<(), BatchError> {
        let mut batch = self.check_batch(batch)?;
        self.queue_batch(&mut batch, options)
    }

    /// Queues the frames of `rest`, whose frames the framing was asked about already
    /// (`send_batch` after its framing check), taking each accepted prefix off its front;
    /// an error takes the rest into itself, so `rest` is empty after the call either way.
    fn queue_batch(&self, rest: &mut Batch, options: SendOptions) -> Result<(), BatchError> {
        let plan = self.plan(options);
        self.check_open(rest)?;
        let mut accepted = 0;
        let mut until = None;
        while !self.submit_batch(rest, &plan, &mut accepted)? {
            let until = *until.get_or_insert_with(|| plan.until());
            let len = rest.get(0).map_or(0, <[u8]>::len);
            if !self
                .inner
                .shared
                .intake
                .wait_for_room(len, until, plan.forced)
            {
                return Err(self.refuse_batch(std::mem::take(rest), accepted));
            }
        }
        Ok(())
    }

    /// Refuses the whole batch if the framing refuses one of its frames.
    fn check_batch(&self, batch: Batch) -> Result<Batch, BatchError> {
        let framing = &self.inner.framing;
        let refused = batch
            .iter()
            .enumerate()
            .find_map(|(i, f)| framing.check(f).err().map(|e| (i, e)));
        if let Some((index, error)) = refused {
            self.inner.shared.intake.rejected(batch.len());
            return Err(BatchError::Invalid {
                batch,
                index,
                error,
            });
        }
        Ok(batch)
    }

    /// Refuses one frame the framing cannot encode, given back as a batch of its own.
    fn check_frame(&self, frame: &[u8]) -> Result<(), BatchError> {
        match self.inner.framing.check(frame) {
            Ok(()) => Ok(()),
            Err(error) => {
                self.inner.shared.intake.rejected(1);
                Err(BatchError::Invalid {
                    batch: std::iter::once(frame).collect(),
                    index: 0,
                    error,
                })
            }
        }
    }

    /// Refuses the whole batch (taken out of `rest`) if the link is closed.
    fn check_open(&self, rest: &mut Batch) -> Result<(), BatchError> {
        if self.inner.shared.closed.load(Ordering::SeqCst) && !rest.is_empty() {
            return Err(self.refuse_batch(std::mem::take(rest), 0));
        }
        Ok(())
    }

    /// The one submission under every `send_batch*` call: queues the longest prefix of `rest`
    /// that has room now; `Ok(true)` once every frame is queued, `Ok(false)` when the call may
    /// wait for room for the rest. `accepted` counts the frames queued by the call so far.
    fn submit_batch(
        &self,
        rest: &mut Batch,
        plan: &Plan,
        accepted: &mut usize,
    ) -> Result<bool, BatchError> {
        if rest.is_empty() {
            return Ok(true);
        }
        let deadline = plan.ttl.map(|t| Instant::now() + t);
        let intake = &self.inner.shared.intake;
        let offered = match &self.inner.shared.spool {
            None => intake.offer_batch(rest, deadline, plan.forced),
            Some(store) => {
                let offer = |rest: &mut Batch| intake.offer_batch(rest, deadline, plan.forced);
                match store.admit(rest, spool::wall_deadline(plan.ttl), offer) {
                    Ok(r) => r.map(|(_, k, tell)| (k, tell)),
                    Err(error) => {
                        let rest = std::mem::take(rest);
                        self.inner.shared.intake.rejected(rest.len());
                        return Err(BatchError::Spool {
                            accepted: *accepted,
                            rest,
                            error,
                        });
                    }
                }
            }
        };
        match offered {
            Ok((k, tell)) => {
                self.tell(tell);
                *accepted += k;
                if rest.is_empty() {
                    return Ok(true);
                }
            }
            Err(Refused::Closed) => {
                return Err(self.refuse_batch(std::mem::take(rest), *accepted));
            }
            Err(Refused::Full) => {}
        }
        if plan.wait == Wait::No {
            return Err(self.refuse_batch(std::mem::take(rest), *accepted));
        }
        Ok(false)
    }

    /// The error for the frames of a batch that found no room (`accepted` were queued).
    fn refuse_batch(&self, rest: Batch, accepted: usize) -> BatchError {
        self.inner.shared.intake.rejected(rest.len());
        if self.inner.shared.closed.load(Ordering::SeqCst) {
            BatchError::Closed { accepted, rest }
        } else {
            BatchError::Full { accepted, rest }
        }
    }

    /// Queues a batch as [`send_batch`](Link::send_batch) does, without blocking
    /// the thread.
    ///
    /// # Errors
    /// As [`send_batch`](Link::send_batch).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Batch, Link, Overflow, SendOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: room for 2 frames, and nothing leaves the outbox.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .delivery(|d| {
    ///         d.outbox_frames = 2;
    ///         d.outbox_bytes = 1024;
    ///     })
    ///     .build()?;
    /// let batch: Batch = ["a", "b", "c"].into_iter().collect();
    /// let options = SendOptions::new().wait(Duration::from_millis(20));
    /// let err = link.send_batch_async(batch, options).await.unwrap_err();
    /// assert_eq!(err.accepted(), 2); // the third found no room within 20 ms
    /// link.close_async(Duration::from_millis(50)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_batch_async(
        &self,
        batch: Batch,
        options: SendOptions,
    ) -> Result<(), BatchError> {
        let mut batch = self.check_batch(batch)?;
        self.queue_batch_async(&mut batch, options).await
    }

    /// As [`queue_batch`](Link::queue_batch), without blocking the thread. The frames not yet
    /// accepted stay in `rest` while it waits: a future dropped then leaves them there.
    pub(super) async fn queue_batch_async(
        &self,
        rest: &mut Batch,
        options: SendOptions,
    ) -> Result<(), BatchError> {
        let plan = self.plan(options);
        self.check_open(rest)?;
        let mut accepted = 0;
        let mut until = None;
        while !self.submit_batch(rest, &plan, &mut accepted)? {
            let until = *until.get_or_insert_with(|| plan.until());
            let len = rest.get(0).map_or(0, <[u8]>::len);
            let intake = &self.inner.shared.intake;
            if !intake.room_async(len, until, plan.forced).await {
                return Err(self.refuse_batch(std::mem::take(rest), accepted));
            }
        }
        Ok(())
    }

    // ----- request and reply ---------------------------------------------------------------------

    /// Sends `frame` as a request and returns at once: many requests can be outstanding
    /// (pipelined, up to the builder's [`Requests::limit_frames`](crate::config::Requests::limit_frames)),
    /// each with its own outcome. The deadline is the builder's `request_timeout` from now.
    ///
    /// It is written in the order of the calls, between the frames [sent](Link::send) before
    /// and after it. While it waits for room (the limit reached under `Overflow::Block`), the
    /// frames sent after it wait too.
    ///
    /// Replies are matched in order only where the link knows which frames the peer answers
    /// (a protocol whose [`answers`](crate::protocol::Protocol::answers) says it, as
    /// [`RequestReply`](crate::protocol::RequestReply) does, or a heartbeat's `reply`), or by
    /// id ([`Correlation::by_id`](crate::protocol::Correlation::by_id)). Else the request is
    /// refused at once, its frame given back
    /// ([`RequestError::AnswersUnknown`](crate::error::RequestError::AnswersUnknown)): an
    /// answer to a frame given to `send` could be taken for its reply.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::framing::Lines;
    /// use relink::protocol::RequestReply;
    /// use relink::Link;
    /// # use std::io::{BufRead, BufReader, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (s, _) = listener.accept().unwrap();
    /// #     let mut w = s.try_clone().unwrap();
    /// #     for line in BufReader::new(s).lines() {
    /// #         let line = line.unwrap();
    /// #         if w.write_all(format!("{}\n", line.to_uppercase()).as_bytes()).is_err() { break; }
    /// #     }
    /// # });
    ///
    /// // The server on `port` answers each line with the line in capitals.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .framing(Lines::new())
    ///     .protocol(RequestReply)
    ///     .build()?;
    /// let pending: Vec<_> = ["a", "b", "c"].iter().map(|l| link.request(*l)).collect();
    /// let replies: Vec<_> = pending.into_iter().map(|p| p.wait()).collect::<Result<_, _>>()?;
    /// assert_eq!(replies, [&b"A"[..], b"B", b"C"]);
    /// link.close(Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request(&self, frame: impl Into<Bytes>) -> Pending {
        let timeout = self.request_parts().1.timeout;
        self.request_within(frame, timeout)
    }

    /// [`request`](Link::request) with a deadline of its own: its reply
    /// within `within` from now.
    pub fn request_within(&self, frame: impl Into<Bytes>, within: Duration) -> Pending {
        let frame = frame.into();
        let deadline = Instant::now() + within;
        let (framing, settings, look) = self.request_parts();
        if !settings.matchable {
            return Pending::refused(RequestError::AnswersUnknown(frame));
        }
        if let Err(e) = framing.check(&frame) {
            return Pending::refused(RequestError::Invalid(frame, e));
        }
        let id = match &settings.correlation.0 {
            Matching::ById { request_id, .. } => match request_id.read(&frame) {
                Some(id) => Some(id),
                None => return Pending::refused(RequestError::NoId(frame)),
            },
            _ => None,
        };
        let (promise, answer) = Answer::pair(look.clone());
        let asked = Asked {
            frame,
            id,
            deadline,
            promise,
        };
        if let Err(Asked { frame, promise, .. }) = self.enqueue_request(asked) {
            promise.fill(Err(RequestError::Closed(frame)));
        }
        Pending::new(answer)
    }

    // ----- flush: a wait for the frames sent before it -------------------------------------------

    /// Blocks until every frame sent before the call (through this handle, its clones, a
    /// [`Writer`](crate::Writer) flushed before, or a [`Producer`](crate::Producer)) is confirmed,
    /// or until `timeout`. Under [`Confirm::reply`](crate::Confirm::reply) with
    /// [`Answers::Pings`](crate::protocol::Answers::Pings) the link writes a ping at once, whose
    /// answer confirms them. Requests are not waited for: each has its own outcome.
    ///
    /// # Errors
    /// [`FlushError::TimedOut`] with how many still wait (they go on);
    /// [`FlushError::Abandoned`] when frames were abandoned while it waited (each in an
    /// [`Event::Abandoned`](crate::Event::Abandoned)); [`FlushError::Closed`] when the link
    /// is closed.
    ///
    /// # Examples
    /// ```
    /// use std::io::Read;
    /// use std::time::Duration;
    /// use relink::Link;
    ///
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut sink = Vec::new();
    /// #     let _ = s.read_to_end(&mut sink);
    /// # });
    /// // A peer on `port` reads what it is sent.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// link.send("reading 1\n")?;
    /// link.send("reading 2\n")?;
    /// link.flush(Duration::from_secs(5))?; // both confirmed by the peer's TCP
    /// assert_eq!(link.metrics().frames_confirmed, 2);
    /// # link.close(Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&self, timeout: Duration) -> Result<(), FlushError> {
        self.flush_answer(timeout)
            .wait()
            .unwrap_or(Err(FlushError::Closed))
    }

    /// [`flush`](Link::flush) for async code, awaited on any executor.
    ///
    /// # Errors
    /// As [`flush`](Link::flush).
    pub async fn flush_async(&self, timeout: Duration) -> Result<(), FlushError> {
        let mut answer = self.flush_answer(timeout);
        std::future::poll_fn(|cx| answer.poll_take(cx)).await
    }

    fn flush_answer(&self, timeout: Duration) -> Answer<Result<(), FlushError>> {
        let deadline = Instant::now() + timeout;
        let (promise, answer) = Answer::pair(self.request_parts().2.clone());
        match self.enqueue_command(Command::Flush { deadline, promise }) {
            Ok(()) => answer,
            Err(Command::Flush { promise, .. }) => {
                promise.fill(Err(FlushError::Closed));
                answer
            }
            Err(_) => unreachable!("the command enqueued is a Flush"),
        }
    }

    // ----- the buffered writer -------------------------------------------------------------------

    /// A buffered writer on this link (see [`Writer`]), for one producer.
    ///
    /// # Examples
    /// See [`Writer`].
    pub fn writer(&self) -> Writer {
        Writer::new(self.clone())
    }

    // ----- a producer thread's way in ------------------------------------------------------------

    /// A producer on this link for one producer (see [`Producer`]).
    ///
    /// # Examples
    /// See [`Producer`].
    pub fn producer(&self) -> Producer {
        Producer::new(self.clone())
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
        future_is_send(link.send_async(Vec::new(), SendOptions::new()));
        future_is_send(link.send_async(Vec::new(), SendOptions::new()));
        future_is_send(link.send_batch_async(Batch::new(), SendOptions::new()));
        future_is_send(link.close_async(Duration::ZERO));
        future_is_send(link.request(Vec::new()));
        future_is_send(link.flush_async(Duration::ZERO));
        future_is_send(link.events().recv_async());
    }
}
