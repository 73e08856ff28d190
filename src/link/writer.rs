//! A link's buffered writer: frames copied into a batch of its own and handed to the link
//! together, at the cost of a frame in a batch.

use super::Link;
use crate::core::batch::Batch;
use crate::error::BatchError;
use crate::send::SendOptions;

/// Frames a [`Writer`] holds before it hands them to the link, by default.
const FRAMES: usize = 1024;

/// Bytes a [`Writer`] holds before it hands them to the link, by default.
const BYTES: usize = 64 * 1024;

/// A buffered sender for one producer: frames are copied into a [`Batch`] and handed to the
/// link together, as [`Link::send_batch`] hands them, when the writer holds its
/// [`capacity`](Writer::capacity) (1 024 frames or 64 KiB by default), at
/// [`flush`](Writer::flush), and when it is dropped. What `std::io::BufWriter` is to a
/// `TcpStream`: a frame costs a copy, where [`Link::send`] hands each frame to the IO thread on
/// its own, and a frame waits in the writer until one of those three.
///
/// The writer takes a frame as a slice, so frames that live in a buffer of the caller's are
/// sent without an allocation each. It is not an [`std::io::Write`]: it takes whole frames.
/// It copies every frame, so a large frame that is already a `Bytes` goes faster through
/// [`Link::send`], which hands it over as it is.
///
/// Frames leave the writer in the order they were written, as one batch each time; frames and
/// requests sent on the link itself meanwhile go before those still in the writer (the
/// writer's frames take their place in the link's order when it hands them over). Nothing is lost without a
/// report: a frame the framing cannot encode is refused at its own call, and frames the link
/// does not accept at a hand-over (the outbox at its limit, the link closed) come back in the
/// error of the call that handed them over. The link's overflow policy applies at a hand-over,
/// or the writer's [`options`](Writer::options); a frame's time to live counts from its
/// hand-over. A drop hands the last frames over as [`flush`](Writer::flush) does, blocking if
/// the policy waits for room: in async code, `flush_async` before the writer goes.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::framing::LengthDelimited;
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .framing(LengthDelimited::len32())
///     .build()?;
/// let mut writer = link.writer();
/// let mut reading = [0u8; 16];
/// for i in 0..100u8 {
///     reading.fill(i); // a frame in a buffer of the caller's, copied once
///     writer.send(&reading)?;
/// }
/// assert_eq!(writer.buffered(), 100); // not handed over yet
/// writer.flush()?;
/// assert_eq!((writer.buffered(), link.metrics().frames_submitted), (0, 100));
/// link.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Writer {
    link: Link,
    batch: Batch,
    options: SendOptions,
    frames: usize,
    bytes: usize,
}

impl Writer {
    /// An empty writer on `link`, with the default thresholds.
    pub(super) fn new(link: Link) -> Writer {
        Writer {
            link,
            batch: Batch::new(),
            options: SendOptions::new(),
            frames: FRAMES,
            bytes: BYTES,
        }
    }

    /// Hands the frames over once the writer holds `frames` frames or `bytes` bytes (at least
    /// one frame; a frame larger than `bytes` is handed over as soon as it is written).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::Link;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")).build()?;
    /// let mut writer = link.writer().capacity(2, 1024);
    /// writer.send(b"one")?;
    /// writer.send(b"two")?; // the second frame fills the writer: both are handed over
    /// assert_eq!((writer.buffered(), link.metrics().frames_submitted), (0, 2));
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn capacity(mut self, frames: usize, bytes: usize) -> Writer {
        self.frames = frames.max(1);
        self.bytes = bytes;
        self
    }

    /// Hands the frames over with these options (how long to wait for room in the outbox, how
    /// long a frame may wait to be sent), as [`Link::send_batch`] does.
    #[must_use]
    pub fn options(mut self, options: SendOptions) -> Writer {
        self.options = options;
        self
    }

    /// Copies a frame into the writer, and hands every frame it holds to the link if that
    /// fills it.
    ///
    /// # Errors
    /// [`BatchError::Invalid`] with this frame alone when the framing cannot encode it (the
    /// frames the writer holds stay); otherwise as [`flush`](Writer::flush), when the frame
    /// filled the writer.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::Link;
    /// use relink::error::BatchError;
    /// use relink::framing::Lines;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .framing(Lines::new())
    ///     .build()?;
    /// let mut writer = link.writer();
    /// writer.send(b"fine")?;
    /// // A line cannot hold a newline: refused at its own call, and given back.
    /// let err = writer.send(b"a\nb").unwrap_err();
    /// assert!(matches!(err, BatchError::Invalid { index: 0, .. }));
    /// assert_eq!(err.into_inner().into_frames(), [b"a\nb".to_vec()]);
    /// assert_eq!(writer.buffered(), 1);
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send(&mut self, frame: impl AsRef<[u8]>) -> Result<(), BatchError> {
        if self.write(frame.as_ref())? {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// As [`send`](Writer::send), without blocking the thread when the hand-over waits for
    /// room (as [`Link::send_batch_async`] does).
    ///
    /// # Errors
    /// As [`send`](Writer::send).
    pub async fn send_async(&mut self, frame: impl AsRef<[u8]>) -> Result<(), BatchError> {
        if self.write(frame.as_ref())? {
            self.flush_async().await
        } else {
            Ok(())
        }
    }

    /// Hands every frame the writer holds to the link, as one batch; the writer is empty
    /// afterwards, whatever the outcome.
    ///
    /// # Errors
    /// As [`Link::send_batch`]: [`BatchError::Full`] or [`BatchError::Closed`] give back the
    /// frames the link did not accept, in order (those before them were).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::Link;
    /// use relink::error::BatchError;
    ///
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// // Nobody listens on `port`: frames wait in the outbox, which has room for 2.
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    ///     .delivery(|d| {
    ///         d.outbox_frames = 2;
    ///         d.outbox_bytes = 1024;
    ///     })
    ///     .build()?;
    /// let mut writer = link.writer();
    /// for frame in [&b"a"[..], b"b", b"c"] {
    ///     writer.send(frame)?;
    /// }
    /// let err = writer.flush().unwrap_err();
    /// assert!(matches!(err, BatchError::Full { accepted: 2, .. }));
    /// assert_eq!(err.into_inner().into_frames(), [b"c".to_vec()]);
    /// link.close(Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&mut self) -> Result<(), BatchError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.link.queue_batch(&mut self.batch, self.options)
    }

    /// As [`flush`](Writer::flush), without blocking the thread while it waits for room. If
    /// the future is dropped while it waits, the frames not yet accepted stay in the writer.
    ///
    /// # Errors
    /// As [`flush`](Writer::flush).
    pub async fn flush_async(&mut self) -> Result<(), BatchError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.link
            .queue_batch_async(&mut self.batch, self.options)
            .await
    }

    /// Frames written and not yet handed to the link.
    pub fn buffered(&self) -> usize {
        self.batch.len()
    }

    /// The link the writer hands its frames to.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Copies a checked frame in; true when the writer is full.
    fn write(&mut self, frame: &[u8]) -> Result<bool, BatchError> {
        self.link.check_frame(frame)?;
        if self.batch.is_empty() {
            // Made at the first frame: a writer that holds nothing holds no buffer.
            // No more than a megabyte ahead, however large the capacity.
            self.batch = Batch::with_capacity(self.frames.min(16 * 1024), self.bytes.min(1 << 20));
        }
        self.batch.push(frame);
        Ok(self.batch.len() >= self.frames || self.batch.bytes() >= self.bytes)
    }
}

impl Drop for Writer {
    /// Hands the last frames over, as [`flush`](Writer::flush) does (so under
    /// `Overflow::Block(t)` a drop may wait up to `t` for room). Frames the link does not accept
    /// then have no caller to come back to: they are counted as refused in the link's metrics
    /// and logged at warn.
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::warn!(
                "relink: {}: frames refused when a writer was dropped: {e}",
                self.link.name()
            );
        }
    }
}
