//! A request on its way, [`Pending`]: a request is a frame whose reply the link matches to it
//! (by the builder's [`Correlation`](crate::protocol::Correlation)) and hands to its caller, or which
//! ends in exactly one [`RequestError`]. The calls that make one are on the handle
//! ([`Link::request`](crate::Link::request) and its siblings, in src/link.rs).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::error::RequestError;
use crate::io::answer::Answer;

/// A request on its way: its reply, or why there is none, once the link knows. Wait for it
/// ([`Pending::wait`]), look ([`Pending::try_take`]) or await it: `Pending` is a `Future` for
/// any executor, woken by the link's IO thread.
///
/// Dropping it does not withdraw the request: it is still written, and its reply consumed.
///
/// # Examples
/// See [`Link::request`](crate::Link::request).
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
    /// The outcome of a request handed to the IO thread, on its way in `answer`.
    pub(crate) fn new(answer: Answer) -> Pending {
        Pending { answer }
    }

    /// A request refused at the call: its outcome is `e`, at once.
    pub(crate) fn refused(e: RequestError) -> Pending {
        Pending::new(Answer::ready(Err(e)))
    }

    /// Blocks until the reply or the request's end. Never waits forever: every request has a
    /// deadline, and a link that stops ends its requests. Like a blocking receive of events
    /// ([`Events`](crate::Events)), it sleeps at once by default; on a link built with
    /// [`Looks::Learnt`](crate::config::Looks::Learnt) it looks for the reply first (the
    /// link's look, 30 to 250 µs, learnt from how soon replies come), yielding its core.
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

#[allow(dead_code)]
fn assert_send() {
    fn is_send<T: Send + 'static>() {}
    is_send::<Pending>();
    is_send::<RequestError>();
}
