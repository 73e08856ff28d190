//! The machine's snapshot for [`Metrics`].

use std::time::Instant;

use super::{Machine, Timer};
use crate::event::State;
use crate::metrics::Metrics;

impl Machine {
    /// A consistent snapshot at `now`.
    pub(crate) fn metrics(&self, now: Instant) -> Metrics {
        let next_retry_in = match self.state {
            State::Backoff | State::Cooldown => self
                .timers
                .at(Timer::Retry)
                .map(|t| t.saturating_duration_since(now)),
            _ => None,
        };
        let queued = self.outbox.len();
        let queued_bytes = self.outbox.bytes();
        Metrics {
            state: self.state,
            time_in_state: now.saturating_duration_since(self.since),
            attempt: self.attempt,
            native_redials: self.native_used,
            consecutive_failures: self.failures,
            connects: self.c.connects,
            reconnects: self.c.reconnects,
            last_outage: self.last_outage,
            next_retry_in,
            peer_addr: self.current.map(|(_, a)| a),
            frames_submitted: self.c.submitted,
            frames_sent: self.c.sent,
            bytes_sent: self.c.bytes_sent,
            frames_rejected: self.c.rejected,
            abandoned: self.c.abandoned,
            outbox_frames: queued as u64,
            outbox_bytes: queued_bytes as u64,
            frames_received: self.c.received,
            bytes_received: self.c.bytes_received,
            frames_cut: self.c.frames_cut,
            bytes_cut: self.c.bytes_cut,
            // The IO side's (`Sources::compose`).
            frames_unread: 0,
            bytes_unread: 0,
            bytes_discarded: self.c.bytes_discarded,
            heartbeats_sent: self.c.heartbeats_sent,
            heartbeats_missed: self.c.heartbeats_missed,
            last_rtt: self.last_rtt,
            reading_paused: self.read_paused,
            events_dropped: 0,
            ignored_inputs: self.c.ignored,
            callback_panics: self.c.callback_panics,
            requests_submitted: self.c.requests_submitted,
            requests_late_held: (self.requests.len() - self.requests.waiting()) as u64,
            barriers_sent: self.c.barriers,
            handshakes_refused: self.c.handshakes_refused,
            frames_answered: self.c.answered_by_link,
            requests_answered: self.requests.answered,
            requests_failed: self.requests.failed,
            requests_outstanding: self.requests.waiting() as u64,
            requests_written: self.requests.written() as u64,
            replies_late: self.requests.late,
            slow_callbacks: self.c.slow_callbacks,
            slowest_callback: self.c.slowest_callback,
            verdicts_deferred: self.c.verdicts_deferred,
            down_for: self
                .failing_since
                .map(|since| now.saturating_duration_since(since)),
            tls_rejected: self.c.tls_rejected,
            frames_confirmed: self.c.confirmed,
            frames_unconfirmed: self.window.len() as u64,
            frames_resent: self.c.resent,
            oldest_unconfirmed: self
                .window
                .oldest()
                .map(|t| now.saturating_duration_since(t)),
            frames_recovered: 0,
            spool_bytes_cut: 0,
        }
    }
}
