//! A link's way in for one producer thread: each frame handed to the IO thread on its own,
//! through a single-producer ring (`crate::io::lane`), without a locked instruction per frame.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::send::{Plan, Wait};
use super::Link;
use crate::error::SendError;
use crate::io::intake::{Refused, Tell};
use crate::io::lane::{self, LaneIn};
use crate::send::SendOptions;

/// Bytes of frames a producer's ring holds (with a ring of a frame's length and deadline per
/// 64 bytes of it, 1.25 MiB in all).
const RING: usize = 1024 * 1024;

/// Frames and bytes of the outbox a producer admits at a time, ahead of its frames.
const CREDIT: (usize, usize) = (512, 32 * 1024);

/// How long a frame waits at most for room in a full ring, when its call does not wait for
/// room in the outbox: the IO thread empties the ring at its next pass.
const RING_WAIT: Duration = Duration::from_millis(100);

/// Times a producer that finds its ring full gives its core away before it naps between tries.
const YIELDS: u32 = 16;

/// How long a producer that found its ring full many times naps before it tries again.
const NAP: Duration = Duration::from_micros(50);

/// What a frame waits for when there is no room now.
enum Blocked {
    /// Room in the outbox.
    Room,
    /// Room in the producer's ring.
    Ring,
}

/// The bounds of one call's waits, set when each wait begins, and its tries at a full ring.
#[derive(Default)]
struct Waits {
    room: Option<Option<Instant>>,
    ring: Option<Instant>,
    tries: u32,
}

/// One producer thread's way into a link: [`send`](Producer::send) hands each frame to the link
/// at once, as [`Link::send`] does, at about the cost of a frame in a batch.
///
/// `Link::send` orders every frame against every other sent through any clone from any
/// thread, which costs each frame a locked instruction. A `Producer` belongs to one producer at
/// a time (it is `Send`, not `Sync`, and its calls take `&mut self`): it copies each frame
/// into a ring of its own that the link's IO thread empties, and admits room in the outbox a
/// block at a time, so a frame costs a copy and a store. Nothing waits in the producer: a frame
/// is the IO thread's as soon as `send` returns, as with `Link::send` (where a
/// [`Writer`](crate::Writer) keeps frames until it is full or flushed).
///
/// The same contract as `Link::send`: the link's overflow policy and `frame_ttl`, or the
/// producer's [`options`](Producer::options); a refused frame comes back in the error; a frame
/// counts in the link's [`Metrics`](crate::Metrics) once the IO thread has taken it. Frames
/// leave in the order they were sent; frames and requests sent meanwhile on the link itself or
/// through another producer are not ordered against them (the IO thread reads the producer's
/// ring after the link's own queue, so the two meet there, not at the calls). A producer holds
/// at most 512 frames and 32 KiB of the outbox's room ahead (never more than half the room
/// left), which it gives back when it is dropped. A producer's ring holds 1 MiB of frames
/// (1.25 MiB of memory in all, made with the producer): when the IO thread is that far behind
/// (it did not run), a frame waits for it as for room in the outbox (100 ms at most when the
/// call does not wait), then is refused as `Full`.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{Link, Producer};
/// use relink::error::SendError;
/// use relink::framing::LengthDelimited;
///
/// fn produce(mut producer: Producer) -> Result<(), SendError> {
///     let mut reading = [0u8; 16];
///     for i in 0..100u8 {
///         reading.fill(i); // a frame in a buffer of the producer's, copied once
///         producer.send(&reading)?;
///     }
///     Ok(())
/// }
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .framing(LengthDelimited::len32())
///     .build()?;
/// let producer = link.producer();
/// std::thread::spawn(move || produce(producer)).join().unwrap()?;
/// // Nobody listens on `port`: the frames wait in the outbox, and are abandoned at the close.
/// assert_eq!(link.close(Duration::from_millis(50)).abandoned.shutdown, 100);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A producer moves between threads, and is never shared by two:
/// ```compile_fail
/// fn shared<T: Sync>(_: &T) {}
/// # let link = relink::Link::builder("tcp://127.0.0.1:1").build().unwrap();
/// shared(&link.producer());
/// ```
#[derive(Debug)]
pub struct Producer {
    link: Link,
    lane: LaneIn,
    plan: Plan,
    /// Room admitted ahead and not used yet: frames, bytes.
    credit: (usize, usize),
}

impl Producer {
    /// A producer on `link`, with a lane of its own.
    pub(super) fn new(link: Link) -> Producer {
        let (lane, end) = lane::lane(RING);
        link.inner.shared.lanes.add(end);
        let plan = link.plan(SendOptions::new());
        Producer {
            link,
            lane,
            plan,
            credit: (0, 0),
        }
    }

    /// Sends with these options (how long to wait for room in the outbox, how long a frame
    /// may wait to be sent), as [`Link::send_with`] does.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, Overflow, SendOptions};
    /// use relink::error::SendError;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: frames wait in the outbox.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .delivery(|d| {
    ///         d.outbox_frames = 1;
    ///         d.outbox_bytes = 1024;
    ///         d.overflow = Overflow::Block(Duration::from_secs(10));
    ///     })
    ///     .build()?;
    /// let mut producer = link.producer().options(SendOptions::new().no_wait());
    /// producer.send(b"first")?;
    /// assert_eq!(producer.send(b"second"), Err(SendError::Full("second".into())));
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn options(mut self, options: SendOptions) -> Producer {
        self.plan = self.link.plan(options);
        self
    }

    /// Copies a frame into the producer's ring, for the IO thread to take at once; waits for
    /// room as the link's overflow policy (or the producer's options) says.
    ///
    /// # Errors
    /// As [`Link::send`], the frame given back (copied): [`SendError::Full`] at the limit,
    /// [`SendError::Closed`] after `close`, [`SendError::Invalid`] when the framing cannot
    /// encode it, [`SendError::Spool`] on a link with a [`Spool`](crate::Spool) (whose frames
    /// go through [`Link::send`]).
    ///
    /// # Examples
    /// See [`Producer`].
    #[inline]
    pub fn send(&mut self, frame: impl AsRef<[u8]>) -> Result<(), SendError> {
        let frame = frame.as_ref();
        let mut waits = Waits::default();
        loop {
            match self.offer(frame)? {
                None => return Ok(()),
                Some(Blocked::Room) => {
                    let until = self.room_until(&mut waits, frame)?;
                    let intake = &self.link.inner.shared.intake;
                    if !intake.wait_for_room(frame.len(), until, self.plan.forced) {
                        return Err(self.refuse(frame));
                    }
                }
                Some(Blocked::Ring) => {
                    let nap = self.ring_nap(&mut waits, frame)?;
                    if nap.is_zero() {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(nap);
                    }
                }
            }
        }
    }

    /// As [`send`](Producer::send), without blocking the thread while it waits for room (as
    /// [`Link::send_async`] waits).
    ///
    /// # Errors
    /// As [`send`](Producer::send).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::Link;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let mut producer = link.producer();
    /// for i in 0..10u8 {
    ///     producer.send_async(&[i; 32]).await?;
    /// }
    /// assert_eq!(link.close_async(Duration::from_millis(50)).await.abandoned.shutdown, 10);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_async(&mut self, frame: impl AsRef<[u8]>) -> Result<(), SendError> {
        let frame = frame.as_ref();
        let mut waits = Waits::default();
        loop {
            match self.offer(frame)? {
                None => return Ok(()),
                Some(Blocked::Room) => {
                    let until = self.room_until(&mut waits, frame)?;
                    let intake = &self.link.inner.shared.intake;
                    if !intake
                        .room_async(frame.len(), until, self.plan.forced)
                        .await
                    {
                        return Err(self.refuse(frame));
                    }
                }
                Some(Blocked::Ring) => {
                    let nap = self.ring_nap(&mut waits, frame)?;
                    crate::io::sleep::sleep_until(Instant::now() + nap.max(NAP)).await;
                }
            }
        }
    }

    /// Queues the frame if there is room now: `Ok(None)` when queued, `Ok(Some(..))` when it
    /// must wait for room in the outbox or in the ring.
    #[inline]
    fn offer(&mut self, frame: &[u8]) -> Result<Option<Blocked>, SendError> {
        let link = &*self.link.inner;
        if let Err(e) = link.framing.check(frame) {
            return Err(self
                .link
                .reject(SendError::Invalid(Bytes::copy_from_slice(frame), e)));
        }
        if link.shared.closed.load(Ordering::Relaxed) {
            return Err(self.closed(frame));
        }
        if link.shared.spool.is_some() {
            // Its ring would pass the spool by.
            return Err(self.link.reject(SendError::Spool(
                Bytes::copy_from_slice(frame),
                "a spooled link takes frames through Link::send, not a Producer".into(),
            )));
        }
        let len = frame.len();
        if self.credit.0 == 0 || self.credit.1 < len {
            match self.admit(len) {
                Ok(()) => {}
                Err(Refused::Closed) => return Err(self.closed(frame)),
                Err(Refused::Full) => return Ok(Some(Blocked::Room)),
            }
        }
        let deadline = self.plan.ttl.map(|t| Instant::now() + t);
        let pushed = self.lane.push(frame, deadline);
        if pushed {
            self.credit.0 -= 1;
            self.credit.1 -= len;
        }
        if self.lane.must_tell() {
            self.link.tell(Tell(true));
        }
        Ok((!pushed).then_some(Blocked::Ring))
    }

    /// Admits room for a frame of `len` bytes (and more ahead), if there is room now.
    #[cold]
    fn admit(&mut self, len: usize) -> Result<(), Refused> {
        let intake = &self.link.inner.shared.intake;
        // What is left is too little for this frame: give it back first, so that the
        // producer's own room does not keep it waiting.
        intake.unreserve(self.credit.0, self.credit.1);
        self.credit = (0, 0);
        self.credit = intake.reserve(len, CREDIT, self.plan.forced)?;
        Ok(())
    }

    /// The end of the wait for room in the outbox, read when it begins; refuses the frame
    /// when the call does not wait.
    #[cold]
    fn room_until(&self, waits: &mut Waits, frame: &[u8]) -> Result<Option<Instant>, SendError> {
        if self.plan.wait == Wait::No {
            return Err(self.refuse(frame));
        }
        Ok(*waits.room.get_or_insert_with(|| self.plan.until()))
    }

    /// The ring is full (the IO thread has not run since it filled): how long to nap before
    /// the next try, within the plan's wait (or [`RING_WAIT`] when the call does not wait),
    /// zero for a yield; refuses the frame once the wait is over.
    #[cold]
    fn ring_nap(&self, waits: &mut Waits, frame: &[u8]) -> Result<Duration, SendError> {
        let until = *waits.ring.get_or_insert_with(|| match self.plan.wait {
            Wait::For(t) => Instant::now() + t,
            Wait::No | Wait::Forced => Instant::now() + RING_WAIT,
        });
        if Instant::now() >= until {
            return Err(self.refuse(frame));
        }
        waits.tries += 1;
        Ok(if waits.tries <= YIELDS {
            Duration::ZERO
        } else {
            NAP
        })
    }

    /// The error for a frame that found no room (`Closed` if the link closed meanwhile),
    /// given back as a copy.
    #[cold]
    fn refuse(&self, frame: &[u8]) -> SendError {
        self.link.refuse(Bytes::copy_from_slice(frame))
    }

    /// The error for a frame refused because the link is closed; frames the ring took after
    /// the IO thread's last take are counted then.
    #[cold]
    fn closed(&self, frame: &[u8]) -> SendError {
        self.count_stranded();
        self.link
            .reject(SendError::Closed(Bytes::copy_from_slice(frame)))
    }

    /// Counts the frames the ring took after the IO thread's last take (the link closed
    /// between this producer's look at it and its push) as given back at shutdown.
    fn count_stranded(&self) {
        let n = self.lane.stranded();
        if n > 0 {
            log::warn!(
                "relink[{}]: {n} frames sent as the link closed were not taken; counted as \
                 abandoned at shutdown",
                self.link.name()
            );
            self.link.inner.shared.intake.given_back_late(n);
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.link
            .inner
            .shared
            .intake
            .unreserve(self.credit.0, self.credit.1);
        self.count_stranded();
        // The IO thread takes what is left and lets the lane (and its rings) go.
        self.lane.leave();
        self.link.tell(Tell(true));
    }
}
