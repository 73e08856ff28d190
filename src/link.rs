//! The handle applications hold: a command sender and a receiver of events. `build()` lives
//! here, with the handle it builds.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crossbeam_channel::{self as channel, Receiver};
use event_listener::EventListener;

use crate::batch::Batch;
use crate::builder::{Builder, Config, Overflow};
use crate::core::framing::BoxedFraming;
use crate::error::{BatchError, ConfigError, RecvError, RecvTimeoutError, SendError, TryRecvError};
use crate::event::{Event, State};
use crate::io::event_loop::{next_link_id, IoSettings, Slot, Wiring};
use crate::io::pool::WorkerRef;
use crate::io::shared::{Command, Msg, Route, Shared};
use crate::io::{Context, IoPool};
use crate::metrics::Metrics;

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
/// use relink::{Codec, Event, Link};
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
///     .codec(Codec::lines())
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
///         replies.push(String::from_utf8(f)?);
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
    max_frames: usize,
    max_bytes: usize,
    frame_ttl: Option<Duration>,
    close_timeout: Duration,
    linger: Duration,
    /// Disconnected when the IO thread has freed the link's slot.
    done: Receiver<()>,
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

/// How long `submit` may wait for room.
#[derive(Clone, Copy)]
enum Wait {
    No,
    /// Wait up to this long; the clock is read only if there is no room at once.
    For(Duration),
    /// Accept regardless; the IO thread drops the oldest.
    Force,
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
    /// A builder for a link to `endpoint` (`tcp://host:port`).
    ///
    /// See the examples on [`Builder`] and in the crate docs' quick start.
    pub fn builder(endpoint: &str) -> Builder {
        Builder::new(endpoint)
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
        let shared = Arc::new(Shared::new(worker.wake.clone()));
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
        };
        let wiring = Wiring {
            context,
            seed,
            shared: shared.clone(),
            route: route.clone(),
            events: events_tx,
            done: done_tx,
        };
        let slot = Slot::new(config.core.clone(), io, wiring)?;
        worker
            .tx
            .send(Msg::Register(Box::new(slot)))
            .map_err(|_| ConfigError::NoRoom("the IO thread has stopped".into()))?;
        worker.wake.wake();
        Ok(Link {
            inner: Arc::new(Inner {
                route,
                _worker: worker,
                events: Events {
                    rx: events_rx,
                    shared: shared.clone(),
                    listener: None,
                    name: config.core.name.clone(),
                },
                shared,
                framing: config.core.framing.clone(),
                overflow: config.overflow,
                max_frames: config.core.outbox_frames,
                max_bytes: config.core.outbox_bytes,
                frame_ttl: config.frame_ttl,
                close_timeout: config.close_timeout,
                linger: config.socket.linger,
                done,
                name: config.core.name.clone(),
            }),
        })
    }

    /// Queues a frame, applying the overflow policy at the outbox limit. Never waits on the
    /// network: with `RejectNew` (the default) and `DropOldest` it returns at once; with
    /// `Block(t)` it waits up to `t` for room.
    ///
    /// # Errors
    /// The frame comes back in the error: [`SendError::Full`] at the limit,
    /// [`SendError::Closed`] after `close`, [`SendError::Invalid`] when the codec cannot
    /// encode it.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Codec, Event, Link, SendError};
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
    ///     .codec(Codec::lines())
    ///     .build()?;
    /// link.send("PING")?; // queued at once, sent as soon as the link is Ready
    /// // A line cannot hold a newline: refused at the call, the frame given back.
    /// let err = link.send("a\nb").unwrap_err();
    /// assert!(matches!(err, SendError::Invalid(..)));
    /// assert_eq!(err.into_inner(), b"a\nb");
    /// loop {
    ///     if let Event::Frame(f) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         assert_eq!(f, b"PING");
    ///         break;
    ///     }
    /// }
    /// link.close(Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send(&self, frame: impl Into<Vec<u8>>) -> Result<(), SendError> {
        let wait = match self.inner.overflow {
            Overflow::RejectNew => Wait::No,
            Overflow::DropOldest => Wait::Force,
            Overflow::Block(t) => Wait::For(t),
        };
        self.submit(frame.into(), wait, self.inner.frame_ttl)
    }

    /// Queues a frame, or refuses it at once when the outbox is at its limit (whatever the
    /// policy, except `DropOldest`, which drops the oldest frame instead).
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// ```
    /// use std::time::{Duration, Instant};
    /// use relink::{Link, Overflow, SendError};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: frames wait in the outbox.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .outbox_limits(1, 1024)
    ///     .overflow(Overflow::Block(Duration::from_secs(10))) // `send` would wait 10 s
    ///     .build()?;
    /// link.try_send("first")?;
    /// let start = Instant::now();
    /// assert_eq!(link.try_send("second"), Err(SendError::Full(b"second".to_vec())));
    /// assert!(start.elapsed() < Duration::from_secs(5)); // refused without waiting
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_send(&self, frame: impl Into<Vec<u8>>) -> Result<(), SendError> {
        let wait = match self.inner.overflow {
            Overflow::DropOldest => Wait::Force,
            _ => Wait::No,
        };
        self.submit(frame.into(), wait, self.inner.frame_ttl)
    }

    /// Queues a frame, waiting up to `timeout` for room in the outbox.
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// With room for one frame, each call waits until the frame before it went out:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Codec, Event, Link};
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
    ///     .codec(Codec::lines())
    ///     .outbox_limits(1, 1024)
    ///     .build()?;
    /// for line in ["one", "two", "three"] {
    ///     link.send_timeout(line, Duration::from_secs(5))?;
    /// }
    /// let mut replies = 0;
    /// while replies < 3 {
    ///     if let Event::Frame(_) = link.events().recv_timeout(Duration::from_secs(5))? {
    ///         replies += 1;
    ///     }
    /// }
    /// assert_eq!(link.close(Duration::from_millis(100)).frames_sent, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_timeout(
        &self,
        frame: impl Into<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(), SendError> {
        self.submit(frame.into(), Wait::For(timeout), self.inner.frame_ttl)
    }

    /// Queues a frame that is abandoned (reason `Expired`) if it is not sent within `ttl`,
    /// overriding the builder's `frame_ttl`. The overflow policy applies as in `send`.
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// A frame that is worthless once late is given back with reason `Expired`:
    /// ```
    /// use std::time::Duration;
    /// use relink::{AbandonReason, Event, Link};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: the frame cannot be sent in time.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// link.send_with_ttl("price: 42", Duration::from_millis(20))?;
    /// let (frame, reason) = loop {
    ///     if let Event::Abandoned { frame, reason } =
    ///         link.events().recv_timeout(Duration::from_secs(5))?
    ///     {
    ///         break (frame, reason);
    ///     }
    /// };
    /// assert_eq!((frame.as_slice(), reason), (&b"price: 42"[..], AbandonReason::Expired));
    /// assert_eq!(link.close(Duration::from_millis(50)).abandoned.expired, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_with_ttl(&self, frame: impl Into<Vec<u8>>, ttl: Duration) -> Result<(), SendError> {
        let wait = match self.inner.overflow {
            Overflow::RejectNew => Wait::No,
            Overflow::DropOldest => Wait::Force,
            Overflow::Block(t) => Wait::For(t),
        };
        self.submit(frame.into(), wait, Some(ttl))
    }

    fn submit(&self, frame: Vec<u8>, wait: Wait, ttl: Option<Duration>) -> Result<(), SendError> {
        let inner = &*self.inner;
        let shared = &*inner.shared;
        if let Err(e) = inner.framing.check(&frame) {
            return Err(self.reject(SendError::Invalid(frame, e)));
        }
        if shared.closed.load(Ordering::SeqCst) {
            return Err(self.reject(SendError::Closed(frame)));
        }
        let len = frame.len();
        if !self.reserve(len, wait) {
            return Err(self.refuse(frame));
        }
        self.enqueue_frame(frame, ttl)
    }

    /// The error for a frame that found no room: `Closed` if the link closed meanwhile.
    fn refuse(&self, frame: Vec<u8>) -> SendError {
        let err = if self.inner.shared.closed.load(Ordering::SeqCst) {
            SendError::Closed(frame)
        } else {
            SendError::Full(frame)
        };
        self.reject(err)
    }

    /// Hands a frame, whose room is reserved, to the IO thread.
    fn enqueue_frame(&self, frame: Vec<u8>, ttl: Option<Duration>) -> Result<(), SendError> {
        let len = frame.len();
        let deadline = ttl.map(|t| Instant::now() + t);
        match self.enqueue(Command::Send { frame, deadline }, 1, len) {
            Ok(()) => Ok(()),
            Err(Command::Send { frame, .. }) => Err(self.reject(SendError::Closed(frame))),
            Err(_) => unreachable!("the command enqueued is a Send"),
        }
    }

    /// Sends a command carrying `frames` frames of `bytes` bytes, whose room is reserved, to
    /// the IO thread; gives it back (room released) if the link closed first.
    fn enqueue(&self, cmd: Command, frames: usize, bytes: usize) -> Result<(), Command> {
        let inner = &*self.inner;
        let shared = &*inner.shared;
        // The IO thread sets `closed`, then waits for `sending` to reach zero before its last
        // look at the channel: a frame is either seen by it or refused here.
        shared.sending.fetch_add(1, Ordering::SeqCst);
        if shared.closed.load(Ordering::SeqCst) {
            shared.sending.fetch_sub(1, Ordering::SeqCst);
            self.unreserve(frames, bytes);
            return Err(cmd);
        }
        let sent = inner.route.send(cmd);
        shared.sending.fetch_sub(1, Ordering::SeqCst);
        match sent {
            Ok(()) => {
                shared.wake_for_command();
                Ok(())
            }
            Err(crossbeam_channel::SendError(cmd)) => {
                self.unreserve(frames, bytes);
                Err(cmd)
            }
        }
    }

    fn reject(&self, e: SendError) -> SendError {
        self.inner.shared.rejected.fetch_add(1, Ordering::SeqCst);
        e
    }

    /// Admits one frame of `len` bytes if the reserved total stays within (frames, bytes); a
    /// frame larger than the byte limit is admitted alone.
    fn try_reserve(&self, len: usize, max_frames: usize, max_bytes: usize) -> bool {
        let shared = &*self.inner.shared;
        let frames = shared.queued_frames.fetch_add(1, Ordering::SeqCst);
        let bytes = shared.queued_bytes.fetch_add(len, Ordering::SeqCst);
        if frames < max_frames && (bytes + len <= max_bytes || frames == 0) {
            true
        } else {
            self.unreserve(1, len);
            false
        }
    }

    fn unreserve(&self, frames: usize, bytes: usize) {
        let shared = &*self.inner.shared;
        shared.queued_frames.fetch_sub(frames, Ordering::SeqCst);
        shared.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
    }

    /// The limits a frame is admitted under: the outbox's, or for `DropOldest` twice them (the
    /// IO thread trims the outbox to its limits; beyond twice the limits the frames are still
    /// on their way to it, and a producer that fast waits for the IO thread, never for the
    /// network, so memory stays bounded).
    fn limits(&self, force: bool) -> (usize, usize) {
        let inner = &*self.inner;
        if force {
            (
                inner.max_frames.saturating_mul(2),
                inner.max_bytes.saturating_mul(2),
            )
        } else {
            (inner.max_frames, inner.max_bytes)
        }
    }

    /// Reserves room for one frame of `len` bytes in the outbox.
    fn reserve(&self, len: usize, wait: Wait) -> bool {
        match wait {
            Wait::No => {
                let (f, b) = self.limits(false);
                self.try_reserve(len, f, b)
            }
            Wait::For(timeout) => {
                let (f, b) = self.limits(false);
                self.try_reserve(len, f, b)
                    || self
                        .wait_for_room(Some(timeout), || self.try_reserve(len, f, b).then_some(()))
                        .is_some()
            }
            Wait::Force => {
                let (f, b) = self.limits(true);
                self.try_reserve(len, f, b)
                    || self
                        .wait_for_room(None, || self.try_reserve(len, f, b).then_some(()))
                        .is_some()
            }
        }
    }

    /// Reserves room for as many frames from the start of `batch` as fit under the limits;
    /// returns how many. One reservation for all of them when no other sender interferes.
    fn reserve_prefix(&self, batch: &Batch, max_frames: usize, max_bytes: usize) -> usize {
        let shared = &*self.inner.shared;
        let f0 = shared.queued_frames.load(Ordering::SeqCst);
        let b0 = shared.queued_bytes.load(Ordering::SeqCst);
        let mut k = 0;
        while k < batch.len() {
            let end = batch.prefix_bytes(k + 1);
            let alone = f0 + k == 0;
            if f0 + k >= max_frames || (b0 + end > max_bytes && !alone) {
                break;
            }
            k += 1;
        }
        if k == 0 {
            return 0;
        }
        let kb = batch.prefix_bytes(k);
        let frames = shared.queued_frames.fetch_add(k, Ordering::SeqCst);
        let bytes = shared.queued_bytes.fetch_add(kb, Ordering::SeqCst);
        if frames + k <= max_frames && (bytes + kb <= max_bytes || (frames == 0 && k == 1)) {
            return k;
        }
        self.unreserve(k, kb);
        // Another sender got in between: one frame at a time, as `send` does.
        let mut k = 0;
        while k < batch.len() {
            let len = batch.prefix_bytes(k + 1) - batch.prefix_bytes(k);
            if !self.try_reserve(len, max_frames, max_bytes) {
                break;
            }
            k += 1;
        }
        k
    }

    /// Reserves room for a whole batch under `DropOldest`: admitted at once while the reserved
    /// total is under twice the limits (or nothing is reserved).
    fn try_reserve_all(&self, batch: &Batch) -> bool {
        let shared = &*self.inner.shared;
        let (max_frames, max_bytes) = self.limits(true);
        let (n, nb) = (batch.len(), batch.bytes());
        let frames = shared.queued_frames.fetch_add(n, Ordering::SeqCst);
        let bytes = shared.queued_bytes.fetch_add(nb, Ordering::SeqCst);
        if (frames < max_frames && bytes < max_bytes) || frames == 0 {
            true
        } else {
            self.unreserve(n, nb);
            false
        }
    }

    /// Waits until `try_reserve` succeeds, the link closes, or `timeout` (if any) passes.
    fn wait_for_room<R>(
        &self,
        timeout: Option<Duration>,
        mut try_reserve: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        let shared = &*self.inner.shared;
        let deadline = timeout.map(|t| Instant::now() + t);
        shared.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = shared.room.lock().unwrap_or_else(|e| e.into_inner());
        let got = loop {
            if let Some(r) = try_reserve() {
                break Some(r);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) || shared.closed.load(Ordering::SeqCst) {
                break None;
            }
            // Without a deadline, wake now and then anyway: a bound on every wait.
            let wait = deadline.map_or(Duration::from_millis(100), |d| d - now);
            guard = shared
                .room_cv
                .wait_timeout(guard, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(guard);
        shared.waiters.fetch_sub(1, Ordering::SeqCst);
        got
    }

    /// Waits, without blocking the thread, until `try_reserve` succeeds or the link closes
    /// (`None`). Woken by the IO thread when room frees and when the link closes.
    async fn room_async<R>(&self, mut try_reserve: impl FnMut() -> Option<R>) -> Option<R> {
        if let Some(r) = try_reserve() {
            return Some(r);
        }
        let shared = &*self.inner.shared;
        let _waiting = Waiting::new(shared);
        loop {
            if shared.closed.load(Ordering::SeqCst) {
                return None;
            }
            // Register, then look again: room freed after the look wakes the listener.
            let listener = shared.room_freed.listen();
            if let Some(r) = try_reserve() {
                return Some(r);
            }
            if shared.closed.load(Ordering::SeqCst) {
                return None;
            }
            listener.await;
            if let Some(r) = try_reserve() {
                return Some(r);
            }
        }
    }

    /// Queues many frames in one call: one admission check and one message to the IO thread
    /// for all of them, the frames stored back to back (see [`Batch`]). Each frame keeps its
    /// own outcome and counts as one frame in the metrics; order is kept.
    ///
    /// The overflow policy applies per frame: with `RejectNew` the frames that fit are
    /// queued and the rest are refused; with `DropOldest` all are queued and the oldest
    /// frames are abandoned as needed; with `Block(t)` the call waits up to `t` in all for
    /// room for the rest, then refuses what is left. The builder's `frame_ttl` applies to
    /// every frame.
    ///
    /// # Examples
    /// ```no_run
    /// use relink::{Batch, Codec, Link};
    ///
    /// let link = Link::builder("tcp://127.0.0.1:7000")
    ///     .codec(Codec::length_prefixed())
    ///     .build()?;
    /// let mut batch = Batch::with_capacity(100, 100 * 64);
    /// for i in 0..100u8 {
    ///     batch.push(&[i; 64]);
    /// }
    /// if let Err(e) = link.send_batch(batch) {
    ///     println!("{} accepted, {} refused", e.accepted(), e.into_inner().len());
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`BatchError::Full`] or [`BatchError::Closed`] give back the frames not accepted (the
    /// ones before them were); [`BatchError::Invalid`] gives back the whole batch, none sent,
    /// when the codec refuses one of its frames.
    pub fn send_batch(&self, batch: Batch) -> Result<(), BatchError> {
        let batch = self.check_batch(batch)?;
        if batch.is_empty() {
            return Ok(());
        }
        match self.inner.overflow {
            Overflow::RejectNew => {
                let (f, b) = self.limits(false);
                let k = self.reserve_prefix(&batch, f, b);
                self.enqueue_prefix(batch, k, 0)
            }
            Overflow::DropOldest => {
                if !self.try_reserve_all(&batch)
                    && self
                        .wait_for_room(None, || self.try_reserve_all(&batch).then_some(()))
                        .is_none()
                {
                    return Err(self.refuse_batch(batch, 0));
                }
                let k = batch.len();
                self.enqueue_prefix(batch, k, 0)
            }
            Overflow::Block(timeout) => {
                let deadline = Instant::now() + timeout;
                let (f, b) = self.limits(false);
                let mut rest = batch;
                let mut accepted = 0;
                loop {
                    let k = match self.reserve_prefix(&rest, f, b) {
                        0 => {
                            // Nothing fits now: wait, the deadline bounding the whole call.
                            let left = deadline.saturating_duration_since(Instant::now());
                            match self.wait_for_room(Some(left), || {
                                Some(self.reserve_prefix(&rest, f, b)).filter(|&k| k > 0)
                            }) {
                                Some(k) => k,
                                None => return Err(self.refuse_batch(rest, accepted)),
                            }
                        }
                        k => k,
                    };
                    if k == rest.len() {
                        return self.enqueue_prefix(rest, k, accepted);
                    }
                    let tail = rest.split_off(k);
                    self.enqueue_prefix(rest, k, accepted)?;
                    accepted += k;
                    rest = tail;
                }
            }
        }
    }

    /// Queues every frame of `frames` as one batch; see [`send_batch`](Link::send_batch).
    ///
    /// # Errors
    /// As [`send_batch`](Link::send_batch).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{BatchError, Link};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: frames wait in the outbox, which has room for 3.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .outbox_limits(3, 1024)
    ///     .build()?;
    /// let err = link.send_all(["a", "b", "c", "d", "e"]).unwrap_err();
    /// assert_eq!(err.accepted(), 3);
    /// assert_eq!(err.into_inner().into_frames(), [b"d".to_vec(), b"e".to_vec()]);
    /// let m = link.close(Duration::from_millis(50));
    /// assert_eq!((m.frames_submitted, m.frames_rejected), (5, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_all<I>(&self, frames: I) -> Result<(), BatchError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.send_batch(frames.into_iter().collect())
    }

    /// Refuses the whole batch if the codec refuses one of its frames, or if the link is
    /// closed.
    fn check_batch(&self, batch: Batch) -> Result<Batch, BatchError> {
        let framing = &self.inner.framing;
        if let Some((index, error)) = batch
            .iter()
            .enumerate()
            .find_map(|(i, f)| framing.check(f).err().map(|e| (i, e)))
        {
            self.reject_frames(batch.len());
            return Err(BatchError::Invalid {
                batch,
                index,
                error,
            });
        }
        if self.inner.shared.closed.load(Ordering::SeqCst) && !batch.is_empty() {
            return Err(self.refuse_batch(batch, 0));
        }
        Ok(batch)
    }

    fn reject_frames(&self, n: usize) {
        self.inner
            .shared
            .rejected
            .fetch_add(n as u64, Ordering::SeqCst);
    }

    /// The error for the frames of a batch that found no room (`accepted` were queued).
    fn refuse_batch(&self, rest: Batch, accepted: usize) -> BatchError {
        self.reject_frames(rest.len());
        if self.inner.shared.closed.load(Ordering::SeqCst) {
            BatchError::Closed { accepted, rest }
        } else {
            BatchError::Full { accepted, rest }
        }
    }

    /// Hands the first `k` frames of `batch`, whose room is reserved, to the IO thread; the
    /// rest are refused. `before` frames of the same call were accepted earlier.
    fn enqueue_prefix(&self, mut batch: Batch, k: usize, before: usize) -> Result<(), BatchError> {
        let rest = batch.split_off(k);
        if k > 0 {
            let bytes = batch.bytes();
            let deadline = self.inner.frame_ttl.map(|t| Instant::now() + t);
            if let Err(cmd) = self.enqueue(Command::SendBatch { batch, deadline }, k, bytes) {
                let Command::SendBatch { mut batch, .. } = cmd else {
                    unreachable!("the command enqueued is a SendBatch")
                };
                batch.extend(&rest);
                self.reject_frames(batch.len());
                return Err(BatchError::Closed {
                    accepted: before,
                    rest: batch,
                });
            }
        }
        if rest.is_empty() {
            Ok(())
        } else {
            Err(self.refuse_batch(rest, before + k))
        }
    }

    /// Queues a frame as [`send`](Link::send) does, without blocking the thread: with
    /// `Overflow::Block` it waits for room until there is some or the link closes, woken by
    /// the IO thread when frames leave the outbox. The `Block` duration is not applied here:
    /// bound the wait with your executor's timer (e.g. `tokio::time::timeout`). Works on any
    /// executor.
    ///
    /// If the future is dropped while it waits, the frame is dropped with it, never accepted
    /// and not counted.
    ///
    /// # Errors
    /// As [`send`](Link::send); `Full` only under `RejectNew`.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, Overflow};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: the outbox fills up and nothing leaves it.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .outbox_limits(1, 1024)
    ///     .overflow(Overflow::Block(Duration::from_secs(60)))
    ///     .build()?;
    /// link.send_async("first").await?;
    /// // No room: the task waits (the thread does not); the caller bounds the wait.
    /// let waited = tokio::time::timeout(Duration::from_millis(50), link.send_async("second"));
    /// assert!(waited.await.is_err());
    /// link.close_async(Duration::from_millis(50)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_async(&self, frame: impl Into<Vec<u8>>) -> Result<(), SendError> {
        let frame = frame.into();
        let inner = &*self.inner;
        if let Err(e) = inner.framing.check(&frame) {
            return Err(self.reject(SendError::Invalid(frame, e)));
        }
        if inner.shared.closed.load(Ordering::SeqCst) {
            return Err(self.reject(SendError::Closed(frame)));
        }
        let len = frame.len();
        let reserved = match inner.overflow {
            Overflow::RejectNew => {
                let (f, b) = self.limits(false);
                self.try_reserve(len, f, b)
            }
            Overflow::DropOldest | Overflow::Block(_) => {
                let force = matches!(inner.overflow, Overflow::DropOldest);
                let (f, b) = self.limits(force);
                self.room_async(|| self.try_reserve(len, f, b).then_some(()))
                    .await
                    .is_some()
            }
        };
        if !reserved {
            return Err(self.refuse(frame));
        }
        self.enqueue_frame(frame, inner.frame_ttl)
    }

    /// Queues a batch as [`send_batch`](Link::send_batch) does, without blocking the thread:
    /// with `Overflow::Block` it waits for room for the rest until all are accepted or the link
    /// closes (bound it with your executor's timer; the `Block` duration is not applied).
    ///
    /// If the future is dropped while it waits, the frames not yet accepted are dropped with
    /// it, uncounted; those accepted stay queued.
    ///
    /// # Errors
    /// As [`send_batch`](Link::send_batch).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Batch, Link};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let batch: Batch = (0..100u8).map(|i| [i; 16]).collect();
    /// link.send_batch_async(batch).await?;
    /// assert_eq!(link.close_async(Duration::from_millis(50)).await.frames_submitted, 100);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_batch_async(&self, batch: Batch) -> Result<(), BatchError> {
        let batch = self.check_batch(batch)?;
        if batch.is_empty() {
            return Ok(());
        }
        match self.inner.overflow {
            Overflow::RejectNew => self.send_batch(batch),
            Overflow::DropOldest => {
                if self
                    .room_async(|| self.try_reserve_all(&batch).then_some(()))
                    .await
                    .is_none()
                {
                    return Err(self.refuse_batch(batch, 0));
                }
                let k = batch.len();
                self.enqueue_prefix(batch, k, 0)
            }
            Overflow::Block(_) => {
                let (f, b) = self.limits(false);
                let mut rest = batch;
                let mut accepted = 0;
                loop {
                    let k = match self
                        .room_async(|| Some(self.reserve_prefix(&rest, f, b)).filter(|&k| k > 0))
                        .await
                    {
                        Some(k) => k,
                        None => return Err(self.refuse_batch(rest, accepted)),
                    };
                    if k == rest.len() {
                        return self.enqueue_prefix(rest, k, accepted);
                    }
                    let tail = rest.split_off(k);
                    self.enqueue_prefix(rest, k, accepted)?;
                    accepted += k;
                    rest = tail;
                }
            }
        }
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
    /// assert_eq!(reader.join().unwrap(), Some(b"hello".to_vec()));
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
    /// use relink::{Codec, Event, Link, State};
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
    ///     .codec(Codec::lines())
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
        let m = m.unwrap_or_else(|| {
            // Wait (bounded) for the IO thread's final snapshot if it is stopping.
            let _ = self.inner.done.recv_timeout(Duration::from_secs(2));
            self.final_snapshot()
        });
        self.with_rejected(m)
    }

    /// The IO thread's last snapshot, if it has stopped.
    fn final_snapshot(&self) -> Metrics {
        self.inner
            .shared
            .final_metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(|| Metrics::empty(self.state()))
    }

    /// Adds the frames refused at the call, which only the handles count.
    fn with_rejected(&self, mut m: Metrics) -> Metrics {
        let rejected = self.inner.shared.rejected.load(Ordering::SeqCst);
        m.frames_submitted += rejected;
        m.frames_rejected += rejected;
        m
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
    /// handles see when the IO thread stops. Not part of the API.
    #[doc(hidden)]
    pub fn __panic_io_thread_for_tests(&self) {
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
    /// use relink::{Link, SendError, State};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: queued frames cannot go out.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// link.send("a")?;
    /// link.send("b")?;
    /// let m = link.close(Duration::from_millis(50)); // flushes for 50 ms, then gives up
    /// assert_eq!((m.state, m.abandoned.shutdown), (State::Closed, 2));
    /// assert_eq!(link.send("c"), Err(SendError::Closed(b"c".to_vec())));
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
        self.with_rejected(self.final_snapshot())
    }
}

/// Counts an async sender among the waiters for room while it waits (dropped with its
/// future if that is cancelled).
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn new(shared: &'a Shared) -> Waiting<'a> {
        shared.waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(shared)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Inner {
    /// Refuses new frames and asks the IO thread to close by `now + timeout`; never waits.
    fn start_close(&self, timeout: Duration) {
        self.shared.closed.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        if self.route.send(Command::Close { deadline }).is_ok() {
            self.shared.wake();
        }
        self.shared.wake_room_waiters();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.start_close(self.close_timeout);
    }
}

/// The receiving end of a link's events, with crossbeam-channel's words, and an async twin
/// for any executor: [`recv_async`](Events::recv_async) and a
/// [`Stream`](futures_core::Stream) of events, woken by the IO thread when it delivers events
/// and when it stops (no polling, no thread per link).
///
/// Every clone takes from the same stream of events: each event goes to one receiver.
///
/// # Examples
/// ```no_run
/// # async fn demo(link: relink::Link) {
/// use relink::Event;
///
/// while let Ok(ev) = link.events().recv_async().await {
///     if let Event::Frame(f) = ev {
///         println!("{} bytes", f.len());
///     }
/// }
/// # }
/// ```
pub struct Events {
    rx: Receiver<Event>,
    shared: Arc<Shared>,
    /// The registration of this receiver's `Stream` while it waits.
    listener: Option<EventListener>,
    name: Arc<str>,
}

impl Clone for Events {
    fn clone(&self) -> Events {
        Events {
            rx: self.rx.clone(),
            shared: self.shared.clone(),
            listener: None,
            name: self.name.clone(),
        }
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events")
            .field("name", &self.name)
            .field("queued", &self.rx.len())
            .finish()
    }
}

impl Events {
    /// The name of the link whose events these are (see [`Link::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for the next event. Fails only when the link is closed and every event was taken.
    ///
    /// # Examples
    /// A reader thread that runs until the link is closed:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let events = link.events().clone();
    /// let reader = std::thread::spawn(move || {
    ///     let mut states = Vec::new();
    ///     // Err(RecvError) once the link is closed and every event was taken.
    ///     while let Ok(ev) = events.recv() {
    ///         if let Event::State(t) = ev {
    ///             states.push(t.to);
    ///         }
    ///     }
    ///     states
    /// });
    /// link.close(Duration::from_millis(50));
    /// let states = reader.join().unwrap();
    /// assert_eq!(states.first(), Some(&State::Connecting));
    /// assert_eq!(states.last(), Some(&State::Closed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv(&self) -> Result<Event, RecvError> {
        match self.rx.recv() {
            Ok(ev) => Ok(self.took(ev)),
            Err(channel::RecvError) => self.leftover().ok_or(RecvError),
        }
    }

    /// The next event if there is one now.
    ///
    /// # Examples
    /// A loop with other work to do polls without blocking:
    /// ```
    /// use std::time::{Duration, Instant};
    /// use relink::{Event, Link, State, TryRecvError};
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
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// loop {
    ///     match link.events().try_recv() {
    ///         Ok(Event::State(t)) if t.to == State::Ready => break,
    ///         Ok(_) => {}
    ///         Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)), // other work
    ///         Err(TryRecvError::Disconnected) => unreachable!("the link is open"),
    ///     }
    ///     assert!(Instant::now() < deadline);
    /// }
    /// link.close(Duration::from_millis(50));
    /// while link.events().try_recv().is_ok() {} // what was left
    /// assert_eq!(link.events().try_recv(), Err(TryRecvError::Disconnected));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_recv(&self) -> Result<Event, TryRecvError> {
        match self.rx.try_recv() {
            Ok(ev) => Ok(self.took(ev)),
            Err(channel::TryRecvError::Disconnected) => {
                self.leftover().ok_or(TryRecvError::Disconnected)
            }
            Err(channel::TryRecvError::Empty) => Err(TryRecvError::Empty),
        }
    }

    /// Waits up to `timeout` for the next event.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, RecvTimeoutError, State};
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: one refused dial, then an hour of rest.
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
    /// let quiet = link.events().recv_timeout(Duration::from_millis(50));
    /// assert_eq!(quiet, Err(RecvTimeoutError::Timeout));
    /// link.close(Duration::from_millis(50));
    /// while link.events().recv_timeout(Duration::from_millis(50)).is_ok() {}
    /// let end = link.events().recv_timeout(Duration::from_millis(50));
    /// assert_eq!(end, Err(RecvTimeoutError::Disconnected));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        self.recv_deadline(Instant::now() + timeout)
    }

    /// Waits until `deadline` for the next event.
    ///
    /// # Examples
    /// One bound on a wait that takes several events:
    /// ```
    /// use std::time::{Duration, Instant};
    /// use relink::{Link, State};
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
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// while link.state() != State::Ready {
    ///     link.events().recv_deadline(deadline)?;
    /// }
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_deadline(&self, deadline: Instant) -> Result<Event, RecvTimeoutError> {
        match self.rx.recv_deadline(deadline) {
            Ok(ev) => Ok(self.took(ev)),
            Err(channel::RecvTimeoutError::Disconnected) => {
                self.leftover().ok_or(RecvTimeoutError::Disconnected)
            }
            Err(channel::RecvTimeoutError::Timeout) => Err(RecvTimeoutError::Timeout),
        }
    }

    /// Waits for the next event without blocking the thread, on any executor. Fails only
    /// when the link is closed and every event was taken, as [`recv`](Events::recv) does.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Event, Link, State};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let port = server.local_addr()?.port();
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let ready = tokio::time::timeout(Duration::from_secs(5), async {
    ///     while let Ok(ev) = link.events().recv_async().await {
    ///         if matches!(ev, Event::State(t) if t.to == State::Ready) {
    ///             return true;
    ///         }
    ///     }
    ///     false
    /// });
    /// assert!(ready.await?);
    /// link.close_async(Duration::from_millis(50)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn recv_async(&self) -> Recv<'_> {
        Recv {
            events: self,
            listener: None,
        }
    }

    /// Takes an event, or registers `listener` to be woken when the IO thread delivers more
    /// (register first, then look again: a delivery after the look wakes it). `None` once the
    /// link is closed and every event was taken.
    fn poll_event(
        &self,
        listener: &mut Option<EventListener>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Event>> {
        loop {
            match self.try_recv() {
                Ok(ev) => {
                    *listener = None;
                    return Poll::Ready(Some(ev));
                }
                Err(TryRecvError::Disconnected) => {
                    *listener = None;
                    return Poll::Ready(None);
                }
                Err(TryRecvError::Empty) => {}
            }
            match listener {
                None => *listener = Some(self.shared.arrived.listen()),
                Some(l) => {
                    if Pin::new(l).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    *listener = None;
                }
            }
        }
    }

    /// Events waiting in the channel.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no event is waiting in the channel.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    fn took(&self, ev: Event) -> Event {
        self.shared.events_queued.fetch_sub(1, Ordering::SeqCst);
        if self.shared.reader_waiting.load(Ordering::SeqCst) {
            self.shared.wake();
        }
        ev
    }

    fn leftover(&self) -> Option<Event> {
        self.shared
            .leftover
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }
}

impl futures_core::Stream for Events {
    type Item = Event;

    /// The next event; `None` once the link is closed and every event was taken.
    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Event>> {
        let this = self.get_mut();
        let mut listener = this.listener.take();
        let next = this.poll_event(&mut listener, cx);
        this.listener = listener;
        next
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.rx.len(), None)
    }
}

/// The future of [`Events::recv_async`]: the next event, or `RecvError` once the link is
/// closed and every event was taken.
#[must_use = "futures do nothing unless awaited"]
pub struct Recv<'a> {
    events: &'a Events,
    listener: Option<EventListener>,
}

impl fmt::Debug for Recv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recv")
            .field("waiting", &self.listener.is_some())
            .finish()
    }
}

impl Future for Recv<'_> {
    type Output = Result<Event, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.events
            .poll_event(&mut this.listener, cx)
            .map(|ev| ev.ok_or(RecvError))
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync + Clone + 'static>() {}
    is::<Link>();
    is::<Events>();
    is::<crate::Context>();
    is::<crate::IoPool>();
    fn is_send<T: Send + Sync + 'static>() {}
    is_send::<Event>();
    is_send::<Metrics>();
    is_send::<SendError>();
    is_send::<BatchError>();
    is_send::<Recv<'static>>();
    fn future_is_send<F: Future + Send>(_: F) {}
    fn link_futures_are_send(link: &Link) {
        future_is_send(link.send_async(Vec::new()));
        future_is_send(link.send_batch_async(Batch::new()));
        future_is_send(link.close_async(Duration::ZERO));
    }
}
