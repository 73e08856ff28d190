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

use crate::builder::defaults::BATCH_BYTES;

/// The capacity of a batch buffer under the default batch size: room for the batch and its
/// TLS records (see `Slot::new`).
pub(crate) const CAPACITY: usize = capacity(BATCH_BYTES);

/// Buffers kept for the next batches, at most.
const KEPT: usize = 32;

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

/// The buffers kept: a bounded channel, both ends.
type Kept = (Sender<Vec<u8>>, Receiver<Vec<u8>>);

fn kept() -> &'static Kept {
    static KEPT_BUFFERS: OnceLock<Kept> = OnceLock::new();
    KEPT_BUFFERS.get_or_init(|| crossbeam_channel::bounded(KEPT))
}

/// An empty buffer of `capacity` bytes: one given back if there is one of that size.
pub(crate) fn take(capacity: usize) -> Vec<u8> {
    if capacity == CAPACITY {
        if let Ok(buf) = kept().1.try_recv() {
            return buf;
        }
    }
    Vec::with_capacity(capacity)
}

/// A buffer libzmq is done with: kept for a next batch if it is of the usual size and there
/// is room, else freed.
pub(crate) fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() == CAPACITY {
        buf.clear();
        let _ = kept().0.try_send(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_of_the_usual_size_given_back_is_taken_again_and_others_are_not_kept() {
        // Other tests of the process may take and give back too: look for this one's buffer.
        let mut buf = take(CAPACITY);
        buf.extend_from_slice(b"batch");
        let at = buf.as_ptr() as usize;
        give_back(buf);
        let again: Vec<Vec<u8>> = (0..KEPT).map(|_| take(CAPACITY)).collect();
        assert!(again
            .iter()
            .any(|b| b.as_ptr() as usize == at && b.is_empty()));
        assert!(again.iter().all(|b| b.capacity() == CAPACITY));
        for b in again {
            give_back(b);
        }
        let odd = take(CAPACITY + 1);
        assert_eq!(odd.capacity(), CAPACITY + 1);
    }
}
