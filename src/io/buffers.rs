//! The batch buffers of the process's IO threads, used again once libzmq is done with them.
//!
//! A batch moves into its zmq message without a copy, and libzmq frees the message on its own
//! IO thread once it has written it. A buffer that one thread allocates and another frees
//! costs the allocator's lock of the allocating thread's arena on every free, and the IO
//! thread then waits for that lock on its next allocation (measured: a third of the futex
//! calls of a busy link at 64 B frames were those locks). So a buffer of the usual size
//! ([`CAPACITY`], the default batch) goes back here when libzmq frees it, and the next batch
//! takes it; other sizes are allocated and freed as usual.
//!
//! At most [`KEPT`] buffers wait here (about 2 MiB for the process): an idle process holds no
//! more than that, and no link holds any.

use std::sync::OnceLock;

use crossbeam_channel::{Receiver, Sender};

use crate::core::settings::BATCH_BYTES;

/// The capacity of a batch buffer under the default batch size: room for the batch and its
/// TLS records (see `Slot::new`).
pub(crate) const CAPACITY: usize = capacity(BATCH_BYTES);

/// Buffers kept for the next batches, at most.
const KEPT: usize = 8;

/// The capacity of a batch buffer for batches of up to `batch_bytes` of payload: room for
/// the TLS records of a batch too (about 22 bytes per 16 KiB record).
pub(crate) const fn capacity(batch_bytes: usize) -> usize {
    let b = if batch_bytes < (1 << 20) {
        batch_bytes
    } else {
        1 << 20
    };
    b + 64 + b / 256
}

/// Buffers kept for the next batches: a bounded channel, both ends.
struct Kept {
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
}

impl Kept {
    fn new(max: usize) -> Kept {
        let (tx, rx) = crossbeam_channel::bounded(max);
        Kept { tx, rx }
    }

    fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity == CAPACITY {
            if let Ok(buf) = self.rx.try_recv() {
                return buf;
            }
        }
        Vec::with_capacity(capacity)
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() == CAPACITY {
            buf.clear();
            let _ = self.tx.try_send(buf);
        }
    }
}

/// The process's buffers.
fn kept() -> &'static Kept {
    static KEPT_BUFFERS: OnceLock<Kept> = OnceLock::new();
    KEPT_BUFFERS.get_or_init(|| Kept::new(KEPT))
}

/// An empty buffer of `capacity` bytes: one given back if there is one of that size.
pub(crate) fn take(capacity: usize) -> Vec<u8> {
    kept().take(capacity)
}

/// A buffer libzmq is done with: kept for a next batch if it is of the usual size and there
/// is room, else freed.
pub(crate) fn give_back(buf: Vec<u8>) {
    kept().give_back(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_of_the_usual_size_given_back_is_taken_again_and_others_are_not_kept() {
        let kept = Kept::new(2);
        let mut buf = kept.take(CAPACITY);
        buf.extend_from_slice(b"batch");
        let at = buf.as_ptr();
        kept.give_back(buf);
        let again = kept.take(CAPACITY);
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 0),
            "the same buffer, emptied"
        );
        // Other sizes are freed, not kept; and no more than the bound is kept.
        kept.give_back(Vec::with_capacity(CAPACITY + 1));
        assert!(kept.rx.is_empty());
        for _ in 0..3 {
            kept.give_back(Vec::with_capacity(CAPACITY));
        }
        assert_eq!(kept.rx.len(), 2);
        assert_eq!(kept.take(CAPACITY + 1).capacity(), CAPACITY + 1);
        assert_eq!(
            kept.rx.len(),
            2,
            "a buffer of another size is not taken from the kept"
        );
    }
}
