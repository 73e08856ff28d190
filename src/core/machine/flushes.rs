//! Flushes: each waits until the frames submitted before it have their outcome, or until its
//! deadline.

use std::time::Instant;

use crate::core::requests::Token;
use crate::error::FlushError;

/// The flushes waiting for the frames submitted before them.
#[derive(Debug, Default)]
pub(super) struct Flushes {
    waiting: Vec<Flush>,
}

/// A flush: waits until the frames submitted before it have their outcome.
#[derive(Debug)]
struct Flush {
    token: Token,
    /// Frames submitted before it.
    mark: u64,
    /// Frames abandoned before it.
    abandoned: u64,
    deadline: Instant,
}

impl Flushes {
    /// A flush of the frames `submitted` so far (`abandoned` of all frames abandoned so far),
    /// answered by `deadline` at the latest.
    pub(super) fn push(&mut self, token: Token, submitted: u64, abandoned: u64, deadline: Instant) {
        self.waiting.push(Flush {
            token,
            mark: submitted,
            abandoned,
            deadline,
        });
    }

    /// Whether a flush waits.
    pub(super) fn waits(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The earliest deadline of a waiting flush.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|f| f.deadline).min()
    }

    /// Answers (through `answer`) the flushes whose frames all have their outcome, or whose
    /// deadline passed: `waiting` frames are still held (queued or unconfirmed) out of the
    /// `submitted` so far, `abandoned` of all were given back. Frames leave the outbox and
    /// the window in the order they came (but for a deadline of their own), so a flush is
    /// done once no more frames wait than came after it.
    pub(super) fn settle(
        &mut self,
        now: Instant,
        waiting: u64,
        submitted: u64,
        abandoned: u64,
        mut answer: impl FnMut(Token, Result<(), FlushError>),
    ) {
        self.waiting.retain(|f| {
            let after = submitted - f.mark;
            let outcome = if waiting <= after {
                match abandoned - f.abandoned {
                    0 => Ok(()),
                    frames => Err(FlushError::Abandoned { frames }),
                }
            } else if f.deadline <= now {
                Err(FlushError::TimedOut {
                    waiting: waiting - after,
                })
            } else {
                return true;
            };
            answer(f.token, outcome);
            false
        });
    }
}
