//! The receiving end of a link's events: blocking calls with crossbeam-channel's words, and
//! an async twin (a future and a `Stream`) woken by the IO thread.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crossbeam_channel::{self as channel, Receiver};
use event_listener::{EventListener, Listener};

use crate::error::{RecvError, RecvTimeoutError, TryRecvError};
use crate::event::Event;
use crate::io::look::{look, LookSpan};
use crate::io::shared::Shared;

/// The receiving end of a link's events, with crossbeam-channel's words, and an async twin
/// for any executor: [`recv_async`](Events::recv_async) and a
/// [`Stream`](futures_core::Stream) of events, woken by the IO thread when it delivers events
/// and when it stops (no polling, no thread per link).
///
/// Every clone takes from the same stream of events: each event goes to one receiver.
///
/// A blocking receive ([`recv`](Events::recv), [`recv_timeout`](Events::recv_timeout),
/// [`recv_deadline`](Events::recv_deadline)) that finds no event sleeps at once by default
/// ([`Looks::Never`](crate::config::Looks::Never)). On a link built with
/// [`Looks::Learnt`](crate::config::Looks::Learnt) it looks again for a while first,
/// yielding its core between looks, before its thread sleeps: a reply that comes within the
/// look is then taken without the wake-up of a sleeping thread (docs/benchmarks.md, "The
/// round trip", shows what that saves). How long it looks is learnt per link from the waits after
/// the looks that missed (an event that came soon after doubles the next look, a longer wait
/// halves it): 30 to 250 µs on a link whose replies come soon after its writes (frames that
/// come within 250 µs of a write, as a request's reply does), and at most 30 µs on a stream
/// coming in, none once its events come further apart than that. A receive that waits
/// longer than the look costs the look's yielding once, then sleeps without CPU.
///
/// # Notes
/// [`Stream::poll_next`](futures_core::Stream::poll_next) takes `&mut self` while
/// [`Link::events`](crate::Link::events) lends a `&Events`: to use it as a `Stream`, take a
/// clone (`link.events().clone()`, which takes from the same events). The combinators
/// (`StreamExt::next`, ...) come from the `futures-util` crate (or `futures`,
/// `tokio-stream`), which relink does not re-export.
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
    /// The receiver of a link's events, made when the link is built.
    pub(crate) fn new(rx: Receiver<Event>, shared: Arc<Shared>, name: Arc<str>) -> Events {
        Events {
            rx,
            shared,
            listener: None,
            name,
        }
    }

    /// The name of the link whose events these are (see [`Link::name`](crate::Link::name)).
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
        let looked = Instant::now();
        if let Some(ev) = self.look(None) {
            return Ok(self.took(ev));
        }
        match self.sleep(None) {
            Ok(ev) => {
                self.waited(looked, true);
                Ok(ev)
            }
            Err(_) => Err(RecvError),
        }
    }

    /// The next event if there is one now.
    ///
    /// # Examples
    /// A loop with other work to do polls without blocking:
    /// ```
    /// use std::time::{Duration, Instant};
    /// use relink::{Event, Link, State};
    /// use relink::error::TryRecvError;
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
    /// use relink::{Event, Link, State};
    /// use relink::error::RecvTimeoutError;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: one refused dial, then an hour of rest.
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
        let looked = Instant::now();
        if let Some(ev) = self.look(Some(deadline)) {
            return Ok(self.took(ev));
        }
        match self.sleep(Some(deadline)) {
            Ok(ev) => {
                self.waited(looked, true);
                Ok(ev)
            }
            Err(e) => {
                if e == RecvTimeoutError::Timeout {
                    self.waited(looked, false);
                }
                Err(e)
            }
        }
    }

    /// Sleeps until an event comes (taken, as `try_recv` takes it), the link is closed with
    /// every event taken, or `deadline`. The thread sleeps on the notification the IO thread
    /// gives after each pass that delivered events (`Shared::arrived`, which async receivers
    /// wait on too), not in the channel's own blocking receive, whose backoff yields the core
    /// four times before it sleeps: a cost on every frame of a paced stream.
    fn sleep(&self, deadline: Option<Instant>) -> Result<Event, RecvTimeoutError> {
        loop {
            let listener = match self.try_recv() {
                Ok(ev) => return Ok(ev),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                // Registered first, then looked again: a delivery after the look wakes it.
                Err(TryRecvError::Empty) => self.shared.arrived.listen(),
            };
            match self.try_recv() {
                Ok(ev) => return Ok(ev),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            match deadline {
                None => listener.wait(),
                Some(deadline) => {
                    if listener.wait_deadline(deadline).is_none() {
                        return match self.try_recv() {
                            Ok(ev) => Ok(ev),
                            Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                            Err(TryRecvError::Empty) => Err(RecvTimeoutError::Timeout),
                        };
                    }
                }
            }
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
    pub fn recv_async(&self) -> impl Future<Output = Result<Event, RecvError>> + Send + Unpin + '_ {
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

    /// Looks for an event for a little while before the caller sleeps (`io::look`); stops
    /// at once when the channel is closed, which the caller's receive then reports.
    fn look(&self, deadline: Option<Instant>) -> Option<Event> {
        look(self.look_span(), deadline, || match self.rx.try_recv() {
            Ok(ev) => Some(Some(ev)),
            Err(channel::TryRecvError::Disconnected) => Some(None),
            Err(channel::TryRecvError::Empty) => None,
        })
        .flatten()
    }

    /// The link's look for a reply while its replies come soon after its writes, else its
    /// look on a stream.
    fn look_span(&self) -> &LookSpan {
        if self.shared.replying.load(Ordering::Relaxed) {
            &self.shared.look
        } else {
            &self.shared.stream_look
        }
    }

    /// A look that began at `looked` found nothing, and the wait after it ended now.
    fn waited(&self, looked: Instant, came: bool) {
        self.look_span().waited(looked.elapsed(), came);
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

/// The events as a `Stream`: poll a clone (`link.events().clone()`), since polling takes
/// `&mut self`; `StreamExt` is in the `futures-util` crate.
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
struct Recv<'a> {
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
