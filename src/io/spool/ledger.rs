//! The IO thread's side of a spool: which frame the machine holds under which sequence
//! number, and which numbers left for good.
//!
//! Each frame the IO thread takes from the intake gets the next number (the callers number
//! frames in the intake's order: those recovered at open first, then one each from the first
//! number of this run) and is known by its bytes' place in memory (the machine
//! keeps a frame's bytes where the take put them; an abandoned frame comes back as a slice of
//! the same buffer). A frame leaves by one of two ways:
//! - abandoned: its `Event::Abandoned` names it (by address); it leaves the spool, unless
//!   the link closed first (reason `Shutdown`, or `Unconfirmed` given back by the close),
//!   which keeps it for the next start;
//! - confirmed: the machine confirms frames in the order it took them, skipping only
//!   abandoned ones, so `n` confirmations are the `n` oldest frames not abandoned.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use super::Store;
use crate::core::machine::Input;
use crate::event::AbandonReason;

#[derive(Debug, Clone, Copy)]
struct Held {
    seq: u64,
    at: usize,
    len: usize,
    abandoned: bool,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Ledger {
    store: Arc<Store>,
    held: VecDeque<Held>,
    /// Where the last abandoned frame was found: the next is likely just after it.
    hint: usize,
    /// Numbers that left, not yet handed to the store.
    left: Vec<u64>,
    /// The numbers of the recovered frames not yet taken, then the next new number.
    recovered: VecDeque<u64>,
    next: u64,
    /// The machine's count of confirmed frames, as last seen.
    confirmed: u64,
}

impl Ledger {
    pub(crate) fn new(store: Arc<Store>) -> Ledger {
        let (recovered, next) = store.numbers();
        Ledger {
            recovered,
            next,
            store,
            held: VecDeque::new(),
            hint: 0,
            left: Vec::new(),
            confirmed: 0,
        }
    }

    /// A submission the IO thread hands the machine, before it does.
    pub(crate) fn taken(&mut self, input: &Input) {
        match input {
            Input::Submit { frame, .. } => self.hold(frame),
            Input::SubmitBatch { batch, .. } => batch.iter().for_each(|f| self.hold(f)),
            _ => {}
        }
    }

    /// Gives the next number to a frame the machine is to hold.
    fn hold(&mut self, frame: &[u8]) {
        let seq = self.recovered.pop_front().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        });
        self.held.push_back(Held {
            seq,
            at: frame.as_ptr() as usize,
            len: frame.len(),
            abandoned: false,
        });
    }

    /// A frame given back by the machine; `closed`: the machine had closed by then.
    pub(crate) fn abandoned(&mut self, frame: &Bytes, reason: AbandonReason, closed: bool) {
        let key = (frame.as_ptr() as usize, frame.len());
        let n = self.held.len();
        let start = self.hint.min(n);
        let found = (start..n).chain(0..start).find(|&i| {
            let h = &self.held[i];
            !h.abandoned && (h.at, h.len) == key
        });
        let Some(i) = found else { return };
        self.held[i].abandoned = true;
        self.hint = i + 1;
        // Given back because the link closed: the spool keeps it for the next start.
        let kept =
            reason == AbandonReason::Shutdown || (reason == AbandonReason::Unconfirmed && closed);
        if !kept {
            self.left.push(self.held[i].seq);
        }
    }

    /// What the spool's writes did since the last call, as the link's events say it: that
    /// it cannot write (and why), then that it writes again.
    pub(crate) fn news(&self) -> Vec<crate::error::LinkError> {
        self.store
            .news()
            .into_iter()
            .map(|(writable, message)| crate::error::LinkError::Spool { writable, message })
            .collect()
    }

    /// The machine has confirmed `total` frames so far; the numbers that left go to the
    /// store.
    pub(crate) fn confirmed_total(&mut self, total: u64) {
        let n = total.saturating_sub(self.confirmed);
        self.confirmed = total;
        self.confirmed(n);
    }

    /// `n` more frames were confirmed.
    fn confirmed(&mut self, mut n: u64) {
        while let Some(front) = self.held.front() {
            if !front.abandoned {
                if n == 0 {
                    break;
                }
                n -= 1;
                self.left.push(front.seq);
            }
            self.held.pop_front();
            self.hint = self.hint.saturating_sub(1);
        }
        if !self.left.is_empty() {
            self.store.left(&mut self.left);
        }
    }
}
