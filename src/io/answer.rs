//! The one-shot cell a request's (or a flush's) outcome goes into: filled once by the IO
//! thread, taken by the caller, who blocks on it or awaits it (on any executor: the fill wakes
//! both).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use event_listener::{Event as Notify, EventListener, Listener};

use super::look::{look, LookSpan};
use crate::core::requests::Outcome;
use crate::error::{FlushError, RequestError};
use crate::event::AbandonReason;

/// An outcome, and the one a promise dropped unfilled gives (the link stopped first).
pub(crate) trait Unfilled {
    fn unfilled() -> Self;
}

impl Unfilled for Outcome {
    fn unfilled() -> Outcome {
        Err(RequestError::Abandoned(AbandonReason::Shutdown))
    }
}

impl Unfilled for Result<(), FlushError> {
    fn unfilled() -> Self {
        Err(FlushError::Closed)
    }
}

#[derive(Debug)]
struct Cell<T> {
    outcome: Mutex<Option<T>>,
    filled: AtomicBool,
    notify: Notify,
}

impl<T> Default for Cell<T> {
    fn default() -> Cell<T> {
        Cell {
            outcome: Mutex::new(None),
            filled: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }
}

impl<T> Cell<T> {
    fn fill(&self, outcome: T) {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
        self.filled.store(true, Ordering::Release);
        self.notify.notify(usize::MAX);
    }
}

/// The IO thread's end. Dropped unfilled (the link stopped with the request on its way), it
/// fills the cell with `Shutdown`: nobody waits forever.
#[derive(Debug)]
pub(crate) struct Promise<T: Unfilled = Outcome>(Option<Arc<Cell<T>>>);

impl<T: Unfilled> Promise<T> {
    pub(crate) fn fill(mut self, outcome: T) {
        if let Some(cell) = self.0.take() {
            cell.fill(outcome);
        }
    }
}

impl<T: Unfilled> Drop for Promise<T> {
    fn drop(&mut self) {
        if let Some(cell) = self.0.take() {
            cell.fill(T::unfilled());
        }
    }
}

/// The caller's end.
#[derive(Debug)]
pub(crate) struct Answer<T = Outcome> {
    cell: Arc<Cell<T>>,
    listener: Option<EventListener>,
    /// How long a blocking wait looks before it sleeps: the link's (see `io::look`).
    look: Arc<LookSpan>,
}

impl<T: Unfilled> Answer<T> {
    /// A cell and its two ends; a blocking wait looks for as long as `look` says.
    pub(crate) fn pair(look: Arc<LookSpan>) -> (Promise<T>, Answer<T>) {
        let cell = Arc::new(Cell::default());
        (
            Promise(Some(cell.clone())),
            Answer {
                cell,
                listener: None,
                look,
            },
        )
    }

    /// An answer known at the call (a refusal).
    pub(crate) fn ready(outcome: T) -> Answer<T> {
        let (promise, answer) = Answer::pair(Arc::default());
        promise.fill(outcome);
        answer
    }

    /// The outcome, if it has come (taken once).
    pub(crate) fn try_take(&mut self) -> Option<T> {
        if !self.cell.filled.load(Ordering::Acquire) {
            return None;
        }
        self.cell
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Blocks until the outcome comes (`None` if it was taken already).
    pub(crate) fn wait(&mut self) -> Option<T> {
        let filled = &self.cell.filled;
        let looked = Instant::now();
        if look(&self.look, None, || {
            filled.load(Ordering::Acquire).then_some(())
        })
        .is_some()
        {
            return self.try_take();
        }
        loop {
            if self.cell.filled.load(Ordering::Acquire) {
                self.look.waited(looked.elapsed(), true);
                return self.try_take();
            }
            let listener = self.cell.notify.listen();
            if self.cell.filled.load(Ordering::Acquire) {
                self.look.waited(looked.elapsed(), true);
                return self.try_take();
            }
            listener.wait();
        }
    }

    /// The outcome, or the task registered to be woken when it comes (register first, then
    /// look again: a fill after the look wakes it).
    pub(crate) fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<T> {
        loop {
            if let Some(o) = self.try_take() {
                self.listener = None;
                return Poll::Ready(o);
            }
            match &mut self.listener {
                None => self.listener = Some(self.cell.notify.listen()),
                Some(l) => {
                    if Pin::new(l).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.listener = None;
                }
            }
        }
    }
}
