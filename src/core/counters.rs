//! The counters of one link: every frame's outcome and every connection event, as the metrics
//! snapshot reports them. Frames submitted = confirmed + unconfirmed (in the window) +
//! abandoned + rejected + still queued.

use crate::event::AbandonReason;
use crate::metrics::Abandoned;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) submitted: u64,
    pub(super) sent: u64,
    pub(super) bytes_sent: u64,
    pub(super) rejected: u64,
    pub(super) abandoned: Abandoned,
    pub(super) received: u64,
    pub(super) bytes_received: u64,
    /// Frames the peer's close cut short, and their bytes.
    pub(super) frames_cut: u64,
    pub(super) bytes_cut: u64,
    /// Bytes received and never decoded because relink ended the connection itself.
    pub(super) bytes_discarded: u64,
    pub(super) connects: u64,
    pub(super) reconnects: u64,
    pub(super) heartbeats_sent: u64,
    pub(super) heartbeats_missed: u64,
    pub(super) ignored: u64,
    pub(super) callback_panics: u64,
    pub(super) released_frames: u64,
    pub(super) released_bytes: u64,
    pub(super) slow_callbacks: u64,
    pub(super) slowest_callback: Option<std::time::Duration>,
    pub(super) verdicts_deferred: u64,
    pub(super) tls_rejected: u64,
    pub(super) confirmed: u64,
    pub(super) resent: u64,
    pub(super) refused: u64,
    pub(super) replies_dropped: u64,
    pub(super) replies_unexpected: u64,
    pub(super) answers_consumed: u64,
    pub(super) barriers: u64,
    pub(super) handshakes_refused: u64,
    pub(super) answered_by_link: u64,
    pub(super) requests_submitted: u64,
}

impl Counters {
    /// Frames submitted, sent and received: changes whenever application data moved
    /// (heartbeats do not count).
    pub(super) fn traffic(&self) -> u64 {
        self.submitted
            .wrapping_add(self.sent)
            .wrapping_add(self.received)
    }

    /// `frames` frames of `bytes` bytes in all handed to the socket: a step on the way, they
    /// wait in the window for their confirmation.
    pub(super) fn sent(&mut self, frames: usize, bytes: usize) {
        self.sent += frames as u64;
        self.bytes_sent += bytes as u64;
    }

    /// `frames` frames of `bytes` bytes in all confirmed: they left the link for good.
    pub(super) fn confirmed(&mut self, frames: usize, bytes: usize) {
        self.confirmed += frames as u64;
        self.released_frames += frames as u64;
        self.released_bytes += bytes as u64;
    }

    /// A frame of `len` bytes abandoned for `reason`: it left the outbox for good.
    pub(super) fn abandon(&mut self, reason: AbandonReason, len: usize) {
        self.abandoned.count(reason);
        self.released_frames += 1;
        self.released_bytes += len as u64;
    }
}
