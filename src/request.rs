//! Request and reply on a [`Link`]: a request is a frame whose reply the link matches to it
//! (by the builder's [`Correlation`](crate::Correlation)) and hands to its caller, or which
//! ends in exactly one [`RequestError`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::core::requests::Matching;
use crate::error::RequestError;
use crate::io::answer::Answer;
use crate::io::intake::Asked;
use crate::link::Link;

/// A request on its way: its reply, or why there is none, once the link knows. Wait for it
/// ([`Pending::wait`]), look ([`Pending::try_take`]) or await it: `Pending` is a `Future` for
/// any executor, woken by the link's IO thread.
///
/// Dropping it does not withdraw the request: it is still written, and its reply consumed.
///
/// # Examples
/// See [`Link::request_pending`].
#[must_use = "a pending request's outcome is lost unless it is waited for"]
pub struct Pending {
    answer: Answer,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}

impl Pending {
    /// Blocks until the reply or the request's end. Never waits forever: every request has a
    /// deadline, and a link that stops ends its requests. Like a blocking receive of events
    /// ([`Events`](crate::Events)), and with the same look (the link's, 30 to 250 µs, learnt
    /// from how soon replies come), it looks for the reply, yielding its core, before its
    /// thread sleeps.
    ///
    /// # Errors
    /// Why the request got no reply; see [`RequestError`].
    pub fn wait(mut self) -> Result<Bytes, RequestError> {
        self.answer
            .wait()
            .unwrap_or(Err(RequestError::Abandoned(crate::AbandonReason::Shutdown)))
    }

    /// The outcome, if it has come; `None` while the request is outstanding. Once it gave an
    /// outcome, it gives `None`.
    pub fn try_take(&mut self) -> Option<Result<Bytes, RequestError>> {
        self.answer.try_take()
    }
}

impl Future for Pending {
    type Output = Result<Bytes, RequestError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().answer.poll_take(cx)
    }
}

/// Request and reply.
impl Link {
    /// Sends `frame` as a request and waits for its reply, within the builder's
    /// [`request_timeout`](crate::Builder::request_timeout) counted from now (time queued
    /// while the link reconnects counts).
    ///
    /// # Errors
    /// Why no reply came: timed out, abandoned (expired before it was written, its connection
    /// lost, the link closed), or refused at the call with the frame given back; see
    /// [`RequestError`].
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::framing::Lines;
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
    ///     .build()?;
    /// assert_eq!(link.request("hello")?, &b"HELLO"[..]);
    /// link.close(Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request(&self, frame: impl Into<Bytes>) -> Result<Bytes, RequestError> {
        self.request_pending(frame).wait()
    }

    /// [`request`](Link::request) with a deadline of its own: its reply within `within` from
    /// now, or [`RequestError::TimedOut`](crate::error::RequestError::TimedOut).
    ///
    /// # Errors
    /// As [`request`](Link::request).
    pub fn request_within(
        &self,
        frame: impl Into<Bytes>,
        within: Duration,
    ) -> Result<Bytes, RequestError> {
        self.request_pending_within(frame, within).wait()
    }

    /// [`request`](Link::request) for async code: the same request, awaited on any
    /// executor.
    ///
    /// # Errors
    /// As [`request`](Link::request).
    pub async fn request_async(&self, frame: impl Into<Bytes>) -> Result<Bytes, RequestError> {
        self.request_pending(frame).await
    }

    /// Sends `frame` as a request and returns at once: many requests can be outstanding
    /// (pipelined, up to the builder's [`request_limits`](crate::Builder::request_limits)),
    /// each with its own outcome. The deadline is the builder's `request_timeout` from now.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use relink::framing::Lines;
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
    ///     .build()?;
    /// let pending: Vec<_> = ["a", "b", "c"].iter().map(|l| link.request_pending(*l)).collect();
    /// let replies: Vec<_> = pending.into_iter().map(|p| p.wait()).collect::<Result<_, _>>()?;
    /// assert_eq!(replies, [&b"A"[..], b"B", b"C"]);
    /// link.close(Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request_pending(&self, frame: impl Into<Bytes>) -> Pending {
        let timeout = self.request_parts().1.timeout;
        self.request_pending_within(frame, timeout)
    }

    /// [`request_pending`](Link::request_pending) with a deadline of its own: its reply
    /// within `within` from now.
    pub fn request_pending_within(&self, frame: impl Into<Bytes>, within: Duration) -> Pending {
        let frame = frame.into();
        let deadline = Instant::now() + within;
        let (framing, settings, look) = self.request_parts();
        if let Err(e) = framing.check(&frame) {
            return refused(RequestError::Invalid(frame, e));
        }
        let id = match &settings.correlation.0 {
            Matching::ById { request_id, .. } => match request_id.read(&frame) {
                Some(id) => Some(id),
                None => return refused(RequestError::NoId(frame)),
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
        Pending { answer }
    }
}

fn refused(e: RequestError) -> Pending {
    Pending {
        answer: Answer::ready(Err(e)),
    }
}

#[allow(dead_code)]
fn assert_send() {
    fn is_send<T: Send + 'static>() {}
    is_send::<Pending>();
    is_send::<RequestError>();
    fn future_is_send<F: Future + Send>(_: F) {}
    fn request_future_is_send(link: &Link) {
        future_is_send(link.request_async(Vec::new()));
    }
}
