//! The machine's receive path: the connection's bytes through the framing, and each frame to
//! where it belongs (the handshake's verdict, the heartbeat's reply, a request's answer, or the
//! application).

use std::time::Instant;

use bytes::Bytes;

use super::connection::encode as encode_control;
use super::{Ev, Machine};
use crate::core::confirm::{Answers, Control, Turn};
use crate::core::guard::{guarded, timed, Panicked};
use crate::core::heartbeat::Reply;
use crate::core::protocol::{Reaction, Verdict as Opened};
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
            let (framing, rx, watch) = (&mut self.framing, &mut conn.rx, self.callbacks.watch());
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
        if self.cfg.answers != Answers::Unknown {
            return self.on_answer(now, frame);
        }
        if self.handshake_reply(now, &frame) {
            return;
        }
        if let Some(reply) = self.cfg.heartbeat.as_ref().and_then(|h| h.reply.as_ref()) {
            let (is_reply, took) = timed(self.callbacks.watch(), Callback::HeartbeatReply, || {
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
        self.deliver(now, frame);
    }

    /// While the handshake's reply is awaited: whether `frame` is it (the link is then Ready,
    /// or failed if the predicate panicked). A frame it does not accept goes on its way.
    fn handshake_reply(&mut self, now: Instant, frame: &[u8]) -> bool {
        if !self.conn.as_ref().is_some_and(|c| c.handshake_pending) {
            return false;
        }
        let Some(protocol) = self.protocol.as_mut() else {
            return false;
        };
        let (verdict, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
            protocol.verdict(frame)
        });
        self.took(now, Callback::Protocol, took);
        match verdict {
            Ok(Opened::Ready) => self.step(now, Ev::Alive),
            Ok(Opened::NotYet) => return false,
            Ok(Opened::Continue) => {}
            Ok(Opened::Refused(reason)) => self.step(now, Ev::Rejected(reason)),
            Err(p) => self.step(now, Ev::CallbackPanicked(p)),
        }
        true
    }

    /// A frame of a link that knows what its peer answers: the answer to the turn it comes
    /// in, or a frame of the peer's own. An answer confirms what was written up to the end of
    /// what it answers.
    fn on_answer(&mut self, now: Instant, frame: Bytes) {
        let every = self.cfg.answers == Answers::EveryFrame;
        // Under `Pings` the hello takes no turn: its reply is told by the handshake's
        // predicate, ahead of any ping written meanwhile.
        if !every && self.handshake_reply(now, &frame) {
            return;
        }
        let Some(front) = self.conn.as_ref().map(|c| c.turns.front()) else {
            return;
        };
        let takes_turn = match front {
            None => Ok(false),
            // Under `Pings`, only a frame the heartbeat's `reply` accepts answers a ping.
            Some(Turn::Ping { .. }) if !every => self.is_pong(now, &frame),
            // Any other turn takes the next frame, unless it is one of the peer's own.
            Some(_) => self.unsolicited(&frame).map(|u| !u),
        };
        let turn = match takes_turn {
            Ok(true) => front,
            Ok(false) => None,
            Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
        };
        let Some(turn) = turn else {
            if every && self.handshake_reply(now, &frame) {
                return;
            }
            return self.deliver_unsolicited(now, frame);
        };
        let Some((_, end)) = self.conn.as_mut().and_then(|c| c.turns.pop()) else {
            return;
        };
        let c = &mut self.c;
        self.window.answered(end, |n, len| c.confirmed(n, len));
        match turn {
            Turn::Ping { heartbeat } => {
                let hb = self.conn.as_mut().and_then(|c| c.heartbeat.as_mut());
                if let Some(Reply::Rtt(rtt)) =
                    hb.filter(|_| heartbeat).and_then(|h| h.on_reply(now))
                {
                    self.last_rtt = Some(rtt);
                }
            }
            Turn::Hello => {
                if !self.handshake_reply(now, &frame) {
                    self.emit_frame(frame);
                }
            }
            Turn::Frame => self.emit_frame(frame),
            Turn::Request => {
                self.c.received += 1;
                match self.requests.on_frame(frame, Verdict::Reply) {
                    Matched::Answer(_) => self.answer_requests(),
                    Matched::Late => log::debug!("relink[{}]: a late reply dropped", self.cfg.name),
                    Matched::Unsolicited(frame) => self.emit(Event::Frame(frame)),
                }
            }
        }
        self.check_flushed(now);
    }

    /// Whether the in-order correlation calls `frame` the peer's own, guarded.
    fn unsolicited(&self, frame: &[u8]) -> Result<bool, Panicked> {
        if self.protocol_unsolicited(frame)? {
            return Ok(true);
        }
        guarded(Callback::Correlation, || {
            match &self.cfg.requests.correlation.0 {
                Matching::InOrder {
                    unsolicited: Some(p),
                } => p.test(frame),
                _ => false,
            }
        })
    }

    /// Whether the heartbeat's `reply` (or the protocol) accepts `frame` as a pong, timed.
    fn is_pong(&mut self, now: Instant, frame: &[u8]) -> Result<bool, Panicked> {
        if let Some(protocol) = self.protocol.as_ref().filter(|p| p.ping().is_some()) {
            let (is, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
                protocol.is_pong(frame)
            });
            self.took(now, Callback::Protocol, took);
            return is;
        }
        let Some(reply) = self.cfg.heartbeat.as_ref().and_then(|h| h.reply.as_ref()) else {
            return Ok(false);
        };
        let (is, took) = timed(self.callbacks.watch(), Callback::HeartbeatReply, || {
            reply.test(frame)
        });
        self.took(now, Callback::HeartbeatReply, took);
        is
    }

    /// A frame no turn waits for: the protocol's reaction first, then the application's, or
    /// (by id) a request's reply.
    fn deliver_unsolicited(&mut self, now: Instant, frame: Bytes) {
        if self.requests.by_id() {
            return self.deliver(now, frame);
        }
        self.deliver_own(now, frame);
    }

    /// A frame for the application, as an event.
    fn emit_frame(&mut self, frame: Bytes) {
        self.c.received += 1;
        log::trace!(
            "relink[{}]: frame of {} bytes received",
            self.cfg.name,
            frame.len()
        );
        self.emit(Event::Frame(frame));
    }

    /// The protocol's reaction to a frame of the peer's own: an answer written at once, ahead
    /// of the outbox. Returns whether the frame goes on to the application.
    fn react(&mut self, now: Instant, frame: &[u8]) -> bool {
        let Some(protocol) = self.protocol.as_mut() else {
            return true;
        };
        let (reaction, took) = timed(self.callbacks.watch(), Callback::Protocol, || {
            protocol.react(frame)
        });
        self.took(now, Callback::Protocol, took);
        let (answer, deliver) = match reaction {
            Ok(Reaction::Deliver) => return true,
            Ok(Reaction::Answer(a)) => (a, false),
            Ok(Reaction::AnswerAndDeliver(a)) => (a, true),
            Err(p) => {
                self.step(now, Ev::CallbackPanicked(p));
                return false;
            }
        };
        let (encoded, took) = encode_control(
            &mut self.framing,
            self.callbacks.watch(),
            &self.cfg.name,
            &answer,
        );
        self.took(now, Callback::Encode, took);
        match encoded {
            Ok(Some(bytes)) => {
                if let Some(conn) = self.conn.as_mut() {
                    conn.control.push_back((Control::Answer, bytes));
                    self.c.answered_by_link += 1;
                }
            }
            Ok(None) => {}
            Err(p) => {
                self.step(now, Ev::CallbackPanicked(p));
                return false;
            }
        }
        deliver
    }

    /// A frame that is neither the handshake's nor a pong: a request's reply or the
    /// application's.
    fn deliver(&mut self, now: Instant, frame: Bytes) {
        if self.requests.is_empty() {
            return self.deliver_own(now, frame);
        }
        let verdict = match self.verdict(&frame) {
            Ok(v) => v,
            Err(p) => return self.step(now, Ev::CallbackPanicked(p)),
        };
        match self.requests.on_frame(frame, verdict) {
            Matched::Answer(_) => {
                self.c.received += 1;
                self.answer_requests();
            }
            Matched::Late => {
                self.c.received += 1;
                log::debug!("relink[{}]: a late reply dropped", self.cfg.name);
            }
            // Only a frame that answers no request is the peer's own: the protocol reacts.
            Matched::Unsolicited(frame) => self.deliver_own(now, frame),
        }
    }

    /// A frame of the peer's own: the protocol's reaction, then the application, unless the
    /// reaction keeps it.
    fn deliver_own(&mut self, now: Instant, frame: Bytes) {
        if self.react(now, &frame) {
            self.emit_frame(frame);
        }
    }

    /// What the correlation's code says of an inbound frame, guarded.
    fn verdict(&self, frame: &[u8]) -> Result<Verdict, Panicked> {
        if self.protocol_unsolicited(frame)? {
            return Ok(Verdict::Unsolicited);
        }
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

    /// Whether the protocol calls `frame` the peer's own by its content, guarded.
    fn protocol_unsolicited(&self, frame: &[u8]) -> Result<bool, Panicked> {
        match self.protocol.as_ref() {
            Some(p) => guarded(Callback::Protocol, || p.is_unsolicited(frame)),
            None => Ok(false),
        }
    }
}
