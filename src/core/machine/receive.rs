//! The machine's receive path: the connection's bytes through the framing, and each frame to
//! where it belongs (the handshake's verdict, the heartbeat's reply, a request's answer, or the
//! application).

use std::time::Instant;

use bytes::Bytes;

use super::{Ev, Machine};
use crate::core::guard::{guarded, timed, Panicked};
use crate::core::heartbeat::Reply;
use crate::core::requests::{Matched, Matching, Verdict};
use crate::core::settings::ProofOfLife;
use crate::error::{Callback, DecodeError, LinkError};
use crate::event::{Event, State};

impl Machine {
    /// Application bytes (without TLS) into the framing.
    pub(super) fn on_plaintext(&mut self, now: Instant, bytes: &[u8]) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.rx.extend_from_slice(bytes);
        self.on_received(now, bytes.len());
    }

    /// `received` application bytes were appended to the receive buffer: decodes the frames.
    pub(super) fn on_received(&mut self, now: Instant, received: usize) {
        self.c.bytes_received += received as u64;
        if self.state == State::Connected && matches!(self.cfg.proof, ProofOfLife::Inbound) {
            self.step(now, Ev::Alive);
        }
        while let Some(conn) = self.conn.as_mut() {
            let (framing, rx, watch) = (&mut self.framing, &mut conn.rx, &*self.watch);
            let (decoded, took) = timed(watch, Callback::Decode, || framing.decode(rx));
            let buffered = rx.len();
            self.took(now, Callback::Decode, took);
            match decoded {
                Ok(Ok(Some(frame))) => self.on_frame(now, frame),
                Ok(Ok(None)) => {
                    let max = self.framing.max_buffered();
                    if buffered > max {
                        let e = DecodeError::Overbuffered { buffered, max };
                        self.step(now, Ev::ProtocolError(e));
                    }
                    break;
                }
                Ok(Err(e)) => {
                    self.step(now, Ev::ProtocolError(e));
                    break;
                }
                Err(p) => {
                    self.step(now, Ev::CallbackPanicked(p));
                    break;
                }
            }
            if !matches!(self.state, State::Connected | State::Ready) {
                break;
            }
        }
    }

    /// The peer closed the connection: bytes left undecoded in the receive buffer are the
    /// start of a frame its end will never follow. Reported with their length (never
    /// delivered), counted, and taken out of the buffer.
    pub(super) fn report_cut_frame(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let bytes = conn.rx.len();
        if bytes == 0 {
            return;
        }
        conn.rx.clear();
        self.c.frames_cut += 1;
        self.c.bytes_cut += bytes as u64;
        log::warn!(
            "relink[{}]: the peer closed in the middle of a frame ({bytes} bytes of it came)",
            self.cfg.name
        );
        self.emit(Event::Error(LinkError::CutFrame { bytes }));
    }

    /// `len` bytes that arrived from a connection the machine already let go: discarded.
    pub(crate) fn stale_data(&mut self, len: usize) {
        self.c.bytes_discarded += len as u64;
    }

    fn on_frame(&mut self, now: Instant, frame: Bytes) {
        if self.conn.as_ref().is_some_and(|c| c.handshake_pending) {
            if let ProofOfLife::Handshake { accept, .. } = &self.cfg.proof {
                let (accepted, took) =
                    timed(&*self.watch, Callback::Handshake, || accept.test(&frame));
                self.took(now, Callback::Handshake, took);
                match accepted {
                    Ok(true) => {
                        self.step(now, Ev::Alive);
                        return;
                    }
                    Ok(false) => {}
                    Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
                }
            }
        }
        if let Some(reply) = self.cfg.heartbeat.as_ref().and_then(|h| h.reply.as_ref()) {
            let (is_reply, took) = timed(&*self.watch, Callback::HeartbeatReply, || {
                reply.test(&frame)
            });
            self.took(now, Callback::HeartbeatReply, took);
            let is_reply = match is_reply {
                Ok(r) => r,
                Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
            };
            if is_reply {
                // Only the replies to our own pings are swallowed: an application that sends
                // the same command as the ping still gets its answers.
                let heartbeat = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut());
                if let Some(reply) = heartbeat.and_then(|h| h.on_reply(now)) {
                    if let Reply::Rtt(rtt) = reply {
                        self.last_rtt = Some(rtt);
                    }
                    return;
                }
            }
        }
        self.c.received += 1;
        log::trace!(
            "relink[{}]: frame of {} bytes received",
            self.cfg.name,
            frame.len()
        );
        if self.requests.is_empty() {
            return self.emit(Event::Frame(frame));
        }
        let verdict = match self.verdict(&frame) {
            Ok(v) => v,
            Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
        };
        match self.requests.on_frame(frame, verdict) {
            Matched::Answer(_) => self.answer_requests(),
            Matched::Late => log::debug!("relink[{}]: a late reply dropped", self.cfg.name),
            Matched::Unsolicited(frame) => self.emit(Event::Frame(frame)),
        }
    }

    /// What the correlation's code says of an inbound frame, guarded.
    fn verdict(&self, frame: &[u8]) -> Result<Verdict, Panicked> {
        guarded(Callback::Correlation, || {
            match &self.cfg.requests.correlation.0 {
                Matching::InOrder {
                    unsolicited: Some(p),
                } if p.test(frame) => Verdict::Unsolicited,
                Matching::InOrder { .. } => Verdict::Reply,
                Matching::ById { reply_id, .. } => match reply_id.read(frame) {
                    Some(id) => Verdict::Id(id),
                    None => Verdict::Unsolicited,
                },
            }
        })
    }
}
