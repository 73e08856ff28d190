//! The machine's TLS glue: the session of the connection between the socket's bytes and the
//! framing, its handshake as part of bringing the connection up, its failures as causes.

use std::time::{Duration, Instant};

use super::{Ev, Machine, Timer};
use crate::core::tls::{TlsSession, TlsSettings};
use crate::error::{LinkError, TlsError};
use crate::event::{Cause, Event, State};

impl Machine {
    /// Socket bytes through the TLS session: handshake records advance it (its completion
    /// brings the connection up), application records come out as plaintext, appended to the
    /// receive buffer by the session itself.
    pub(super) fn tls_data(&mut self, now: Instant, bytes: &[u8]) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let Some(tls) = conn.tls.as_mut() else {
            return;
        };
        let was_handshaking = tls.is_handshaking();
        let before = conn.rx.len();
        let fed = tls.feed(bytes, &mut conn.rx);
        let established = was_handshaking && !tls.is_handshaking() && fed.is_ok();
        if tls.peer_closed() {
            log::debug!("relink[{}]: the peer sent tls close_notify", self.cfg.name);
        }
        if established {
            self.tls_established(now);
        }
        // Bringing the connection up can fail it: then nothing of these bytes is received.
        let received = self
            .conn
            .as_ref()
            .map_or(0, |c| c.rx.len().saturating_sub(before));
        if received > 0 && matches!(self.state, State::Connected | State::Ready) {
            self.on_received(now, received);
        } else if let Some(conn) = self.conn.as_mut() {
            conn.rx.truncate(before);
        }
        if let Err(e) = fed {
            self.step(now, Ev::Tls(e));
        }
    }

    /// `poll_transmit`'s bytes with TLS: the records of the next plaintext batch, while
    /// handshaking only the handshake's own records, and after EAGAIN the refused records
    /// again as they are.
    pub(super) fn poll_sealed(&mut self, now: Instant, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if !matches!(self.state, State::Connected | State::Ready) {
            return false;
        }
        if self.timers.at(Timer::SendRetry).is_some_and(|t| t > now) {
            return false;
        }
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        if let Some(retry) = conn.tls_retry.take() {
            // The same records: the frames in flight end where they did.
            *buf = retry;
            return true;
        }
        let handshaking = conn.tls.as_ref().is_some_and(TlsSession::is_handshaking);
        let mut plain = std::mem::take(&mut conn.plain_out);
        // No hello, ping or frame before the server is verified: only handshake records.
        let batch = !handshaking && self.poll_batch(now, &mut plain);
        let Some(conn) = self.conn.as_mut() else {
            // Encoding the batch failed the connection (a framing that panicked): its
            // session is gone, and so is the batch.
            buf.clear();
            return false;
        };
        let Some(tls) = conn.tls.as_mut() else {
            buf.clear();
            return false;
        };
        conn.pending_records.clear();
        let sealed = if batch {
            tls.seal(&plain, buf, &mut conn.pending_records)
        } else {
            tls.take_ciphertext(buf);
            Ok(())
        };
        plain.clear();
        conn.plain_out = plain;
        if let Err(e) = sealed {
            self.requeue_in_flight();
            self.step(now, Ev::Tls(e));
            buf.clear();
            return false;
        }
        !buf.is_empty()
    }

    /// Whether the current connection speaks TLS.
    pub(super) fn speaks_tls(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.tls.is_some())
    }

    /// The TLS settings of the endpoint in use, when the link speaks TLS.
    pub(super) fn tls_settings(&self) -> Option<&TlsSettings> {
        let idx = self.dial.endpoint()?;
        self.cfg.tls.as_ref().map(|list| &list[idx])
    }

    pub(super) fn tls_handshaking(&self) -> bool {
        self.conn
            .as_ref()
            .and_then(|c| c.tls.as_ref())
            .is_some_and(TlsSession::is_handshaking)
    }

    /// The handshake bound of the endpoint in use.
    pub(super) fn tls_handshake_bound(&self) -> Duration {
        self.tls_settings()
            .map_or(Duration::ZERO, |t| t.handshake_timeout)
    }

    /// A session for a connection to the endpoint in use, with its handshake bound; `None`
    /// without TLS. Credentials that were changed and refused are reported here (the last
    /// good ones stay).
    pub(super) fn tls_session(&mut self) -> Option<(Result<TlsSession, TlsError>, Duration)> {
        if let Some(t) = self.tls_settings().filter(|t| t.skip_verification) {
            log::warn!(
                "relink[{}]: TLS to {:?} without certificate verification (a test-only \
                 setting): anyone on the path can read and change this connection",
                self.cfg.name,
                t.server_name.to_str()
            );
        }
        let mut stale = None;
        let session = self.tls_settings().map(|t| {
            let (config, refused) = t.fresh_config();
            stale = refused;
            (TlsSession::with_config(t, config), t.handshake_timeout)
        });
        if let Some(e) = stale {
            log::warn!(
                "relink[{}]: new tls credentials refused, the last good ones stay: {e}",
                self.cfg.name
            );
            self.emit(Event::Error(LinkError::TlsCredentials(e)));
        }
        session
    }

    fn tls_established(&mut self, now: Instant) {
        self.timers.disarm(Timer::Handshake);
        if let Some(tls) = self.conn.as_ref().and_then(|c| c.tls.as_ref()) {
            log::debug!(
                "relink[{}]: tls established with {}{}",
                self.cfg.name,
                self.endpoint_text().unwrap_or_default(),
                tls.alpn_protocol()
                    .map(|p| format!(" (alpn {})", String::from_utf8_lossy(p)))
                    .unwrap_or_default()
            );
        }
        self.link_up(now);
    }

    /// A TLS failure: its own cause, the reason in an error event and in the log line. One
    /// that no retry can fix (the certificates) is `tls-rejected`, retried slowly.
    pub(super) fn tls_failed(&mut self, now: Instant, e: TlsError) {
        let cause = if e.is_config() {
            self.c.tls_rejected += 1;
            Cause::TlsRejected
        } else {
            Cause::Tls
        };
        self.fail_reason = Some(e.to_string());
        self.emit(Event::Error(LinkError::Tls(e)));
        self.fail(now, cause);
    }
}
