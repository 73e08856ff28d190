//! Flush on a [`Link`]: a wait until every frame sent before the call has its outcome,
//! confirmed at the link's level (the peer's TCP, or a reply under
//! [`Confirm::reply`](crate::Confirm::reply)) or abandoned.

use std::time::{Duration, Instant};

use crate::error::FlushError;
use crate::io::answer::Answer;
use crate::io::shared::Command;
use crate::link::Link;

/// Flush.
impl Link {
    /// Blocks until every frame sent before the call (through this handle, its clones, a
    /// [`Writer`](crate::Writer) flushed before, or a [`Producer`](crate::Producer)) is confirmed,
    /// or until `timeout`. Under [`Confirm::reply`](crate::Confirm::reply) with
    /// [`Answers::Pings`](crate::Answers::Pings) the link writes a ping at once, whose
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
}
