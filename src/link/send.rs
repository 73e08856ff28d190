//! The send path of the handle: every `send*` call is a thin layer over one submission
//! through the link's intake (`crate::io::intake`), which admits, queues and tells the IO
//! thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::Link;
use crate::batch::Batch;
use crate::builder::Overflow;
use crate::core::framing::BoxedFraming;
use crate::core::requests::RequestSettings;
use crate::error::{BatchError, SendError};
use crate::io::intake::{Asked, Refused, Tell};
use crate::io::look::LookSpan;
use crate::io::shared::Command;
use crate::io::spool;
use crate::send::{SendOptions, WaitFor};

/// How a `send*` call waits for room, resolved from its options and the link's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    No,
    /// Wait up to this long; the clock is read only if there is no room at once.
    For(Duration),
    /// Wait as long as it takes under twice the limits (`DropOldest`: the IO thread drops the
    /// oldest frames).
    Forced,
}

/// One `send*` call's way through the intake.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) wait: Wait,
    pub(super) forced: bool,
    pub(super) ttl: Option<Duration>,
}

impl Plan {
    /// The end of the wait for room, read when a wait begins: `None` for no end.
    pub(super) fn until(&self) -> Option<Instant> {
        match self.wait {
            Wait::No => Some(Instant::now()),
            Wait::For(t) => Some(Instant::now() + t),
            Wait::Forced => None,
        }
    }
}

impl Link {
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

    /// Queues a frame, waiting up to `timeout` for room in the outbox, whatever the policy:
    /// [`send_with`](Link::send_with) with [`SendOptions::wait`].
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// With room for one frame, each call waits until the frame before it went out:
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
        frame: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<(), SendError> {
        self.send_with(frame, SendOptions::new().wait(timeout))
    }

    /// Queues a frame as `options` say: how long to wait for room at the outbox limit, and how
    /// long the frame may wait to be sent. `send` and `send_timeout` are this call with options
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

    /// Queues a frame as [`send`](Link::send) does, without blocking the thread: with
    /// `Overflow::Block(t)` it waits for room up to `t`, woken by the IO thread when frames
    /// leave the outbox (and by relink's timer thread at the bound). Works on any executor.
    ///
    /// If the future is dropped while it waits, the frame is dropped with it, never accepted
    /// and not counted.
    ///
    /// # Errors
    /// As [`send`](Link::send).
    ///
    /// # Examples
    /// ```
    /// use std::time::{Duration, Instant};
    /// use relink::{Link, Overflow};
    /// use relink::error::SendError;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: the outbox fills up and nothing leaves it.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .outbox_limits(1, 1024)
    ///     .overflow(Overflow::Block(Duration::from_millis(50)))
    ///     .build()?;
    /// link.send_async("first").await?;
    /// // No room: the task waits (the thread does not), for the policy's 50 ms.
    /// let start = Instant::now();
    /// assert_eq!(link.send_async("second").await, Err(SendError::Full("second".into())));
    /// assert!(start.elapsed() >= Duration::from_millis(50));
    /// link.close_async(Duration::from_millis(50)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_async(&self, frame: impl Into<Bytes>) -> Result<(), SendError> {
        self.send_with_async(frame, SendOptions::new()).await
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
    /// link.send_with_async("quote", options).await?;
    /// let m = link.close_async(Duration::from_millis(100)).await;
    /// assert_eq!(m.abandoned.expired, 1); // nobody listens: too late for its 20 ms
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_with_async(
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
    pub(super) fn plan(&self, options: SendOptions) -> Plan {
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
    pub(super) fn tell(&self, tell: Tell) {
        if tell.0 && self.inner.route.send(Command::Take).is_ok() {
            self.inner.shared.wake_for_command();
        }
        // A send that fails finds the IO thread gone: the frames are given back by the
        // slot's `StopGuard`, as abandoned.
    }

    /// The error for a frame that found no room: `Closed` if the link closed meanwhile.
    pub(super) fn refuse(&self, frame: Bytes) -> SendError {
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
    pub(crate) fn request_parts(&self) -> (&BoxedFraming, &RequestSettings, &Arc<LookSpan>) {
        (
            &self.inner.framing,
            &self.inner.requests,
            &self.inner.shared.look,
        )
    }

    /// Hands a command to the IO thread; gives it back if the link is closed.
    pub(crate) fn enqueue_command(&self, cmd: Command) -> Result<(), Command> {
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
    pub(crate) fn enqueue_request(&self, asked: Asked) -> Result<(), Asked> {
        let shared = &self.inner.shared;
        if shared.closed.load(Ordering::SeqCst) {
            return Err(asked);
        }
        let tell = shared.intake.offer_request(asked)?;
        self.tell(tell);
        Ok(())
    }

    pub(super) fn reject(&self, e: SendError) -> SendError {
        self.inner.shared.intake.rejected(1);
        e
    }

    /// Queues many frames in one call: one admission check and one hand-over to the IO thread
    /// for all of them, the frames stored back to back (see [`Batch`]). Each frame keeps its
    /// own outcome and counts as one frame in the metrics; order is kept.
    ///
    /// The overflow policy applies per frame: with `RejectNew` the frames that fit are
    /// queued and the rest are refused; with `DropOldest` all are queued and the oldest
    /// frames are abandoned as needed; with `Block(t)` the call waits up to `t` in all for
    /// room for the rest, then refuses what is left. The builder's `frame_ttl` applies to
    /// every frame. [`send_batch_with`](Link::send_batch_with) is the same call with options.
    ///
    /// # Examples
    /// ```no_run
    /// use relink::{Batch, Link};
    /// use relink::framing::LengthDelimited;
    ///
    /// let link = Link::builder("tcp://127.0.0.1:7000")
    ///     .framing(LengthDelimited::len32())
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
    /// when the framing refuses one of its frames.
    pub fn send_batch(&self, batch: Batch) -> Result<(), BatchError> {
        self.send_batch_with(batch, SendOptions::new())
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
    /// link.send_batch_with(batch, SendOptions::new().ttl(Duration::from_millis(20)))?;
    /// std::thread::sleep(Duration::from_millis(100));
    /// assert_eq!(link.close(Duration::from_millis(50)).abandoned.expired, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_batch_with(&self, batch: Batch, options: SendOptions) -> Result<(), BatchError> {
        let mut batch = self.check_batch(batch)?;
        self.queue_batch(&mut batch, options)
    }

    /// Queues the frames of `rest`, whose frames the framing was asked about already
    /// (`send_batch_with` after its framing check), taking each accepted prefix off its front;
    /// an error takes the rest into itself, so `rest` is empty after the call either way.
    pub(super) fn queue_batch(
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
    pub(super) fn check_frame(&self, frame: &[u8]) -> Result<(), BatchError> {
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

    /// Queues a batch as [`send_batch`](Link::send_batch) does, without blocking the thread:
    /// with `Overflow::Block(t)` it waits for room for the rest up to `t` in all, as
    /// `send_batch` does.
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
        self.send_batch_with_async(batch, SendOptions::new()).await
    }

    /// Queues a batch as [`send_batch_with`](Link::send_batch_with) does, without blocking
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
    ///     .outbox_limits(2, 1024)
    ///     .build()?;
    /// let batch: Batch = ["a", "b", "c"].into_iter().collect();
    /// let options = SendOptions::new().wait(Duration::from_millis(20));
    /// let err = link.send_batch_with_async(batch, options).await.unwrap_err();
    /// assert_eq!(err.accepted(), 2); // the third found no room within 20 ms
    /// link.close_async(Duration::from_millis(50)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_batch_with_async(
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
}
