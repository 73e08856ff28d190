//! Read by the peer, in virtual time: answers that take their turns, frames confirmed by a
//! reply, barriers, flushes, and frames given up as poison.

use super::*;
use crate::error::{ConfigError, FlushError, RequestError};
use crate::protocol::{Answers, Correlation, Protocol};
use crate::{Confirm, Redelivery};
use bytes::Bytes;

const SEC: Duration = Duration::from_secs(1);

/// Lines, a ping `PING` every second (answered `PONG`), and the peer's TCP acknowledging at
/// once.
fn pinged() -> Builder {
    Sim::builder()
        .framing(Lines::new())
        .heartbeat(Heartbeat::new(SEC, Ping::Frame(b"PING".to_vec())))
}

impl Sim {
    fn request_line(&mut self, token: Token, frame: &[u8]) {
        self.input(Input::Request {
            token,
            frame: Bytes::copy_from_slice(frame),
            id: None,
            deadline: self.now + 10 * SEC,
        });
    }

    fn flush(&mut self, token: Token, timeout: Duration) {
        let deadline = self.now + timeout;
        self.input(Input::Flush { token, deadline });
    }

    /// Drops the connection and brings the next one up (Ready).
    fn redial(&mut self) {
        self.tcp_down();
        while self.m.state() != State::Connecting {
            self.next_timer();
        }
        self.tcp_up();
        assert_eq!(self.m.state(), State::Ready);
    }

    fn confirmed(&self) -> u64 {
        self.metrics().frames_confirmed
    }
}

/// A protocol that says only what the peer answers.
#[derive(Clone)]
struct Answering(Answers);

impl Protocol for Answering {
    fn answers(&self) -> Answers {
        self.0
    }
}

fn reply(s: &Sim, token: Token) -> Option<&Outcome> {
    s.answers.iter().find(|(t, _)| *t == token).map(|(_, o)| o)
}

#[test]
fn every_frame_a_pong_in_its_turn_never_answers_the_request_behind_it() {
    let mut s = Sim::ready(pinged().protocol(Answering(Answers::EveryFrame)));
    s.advance(SEC);
    s.transmit();
    s.request_line(1, b"GET a");
    s.transmit();
    assert_eq!(s.written, b"PING\nGET a\n");
    // The pong, whatever it says, answers the ping; the next line answers the request.
    s.data(b"+OK\nvalue-a\n");
    assert_eq!(reply(&s, 1), Some(&Ok(Bytes::from_static(b"value-a"))));
    assert!(s.frames().is_empty(), "the pong is not delivered");
}

#[test]
fn every_frame_a_reply_that_looks_like_a_pong_still_answers_its_request() {
    let mut s = Sim::ready(pinged().protocol(Answering(Answers::EveryFrame)));
    s.request_line(1, b"GET a");
    s.transmit();
    s.advance(SEC);
    s.transmit();
    assert_eq!(s.written, b"GET a\nPING\n");
    s.data(b"PONG\nPONG\n");
    assert_eq!(reply(&s, 1), Some(&Ok(Bytes::from_static(b"PONG"))));
    assert!(s.frames().is_empty(), "the second PONG answers the ping");
    assert!(s.metrics().last_rtt.is_some());
}

#[test]
fn pings_a_pong_is_taken_only_in_a_pings_turn_and_a_requests_turn_takes_any_reply() {
    let b = pinged().heartbeat(
        Heartbeat::new(SEC, Ping::Frame(b"PING".to_vec())).reply(|f: &[u8]| f == b"PONG"),
    );
    let mut s = Sim::ready(b);
    s.request_line(1, b"GET a");
    s.transmit();
    s.advance(SEC);
    s.transmit();
    // The request's reply looks like a pong: it comes in the request's turn.
    s.data(b"PONG\n");
    assert_eq!(reply(&s, 1), Some(&Ok(Bytes::from_static(b"PONG"))));
    // A notice of the peer's own in the ping's turn goes to the application.
    s.data(b"INFO x\nPONG\n");
    assert_eq!(s.frames(), [b"INFO x".to_vec()]);
}

#[test]
fn build_refuses_in_order_requests_beside_a_heartbeat_whose_pong_cannot_be_told_apart() {
    let err = |b: Builder| b.into_config().err().map(|e| e.to_string());
    let ambiguous = pinged().requests(|q| q.correlation = Some(Correlation::in_order()));
    assert!(matches!(
        ambiguous.into_config(),
        Err(ConfigError::Answers(_))
    ));
    assert!(err(pinged()
        .requests(|q| q.correlation = Some(Correlation::in_order()))
        .protocol(Answering(Answers::EveryFrame)))
    .is_none());
    assert!(
        err(pinged().protocol(Answering(Answers::Pings))).is_some(),
        "Pings needs a reply"
    );
    assert!(
        err(pinged().confirm(Confirm::reply())).is_some(),
        "reply needs answers"
    );
    let by_id = Correlation::by_id(|f| Some(f.to_vec()), |f| Some(f.to_vec()));
    assert!(err(pinged()
        .requests(|q| q.correlation = Some(by_id))
        .protocol(Answering(Answers::EveryFrame)))
    .is_some());
    assert!(err(pinged().delivery(|d| d.max_losses = 0)).is_some());
}

/// NATS-like: frames unanswered, the ping answered `PONG`; frames confirmed by reply.
fn nats_like() -> Builder {
    Sim::builder()
        .framing(Lines::new())
        .heartbeat(
            Heartbeat::new(10 * SEC, Ping::Frame(b"PING".to_vec())).reply(|f: &[u8]| f == b"PONG"),
        )
        .confirm(Confirm::reply().barrier(1 << 20, 5 * MS))
}

#[test]
fn by_reply_frames_acknowledged_by_tcp_wait_for_the_pong_of_a_barrier_written_after_them() {
    let mut s = Sim::ready(nats_like());
    s.submit(b"PUB a");
    s.submit(b"PUB b");
    s.transmit();
    assert_eq!(
        s.confirmed(),
        0,
        "the peer's TCP has them, its application may not"
    );
    assert_eq!(s.metrics().frames_unconfirmed, 2);
    // The barrier goes out once the oldest has waited its age.
    s.advance(5 * MS);
    s.transmit();
    assert_eq!(s.written, b"PUB a\nPUB b\nPING\n");
    assert_eq!(s.metrics().barriers_sent, 1);
    s.data(b"PONG\n");
    assert_eq!(s.confirmed(), 2);
    assert!(s.frames().is_empty());
    assert_eq!(s.metrics().unaccounted(), 0);
}

#[test]
fn by_reply_a_drop_before_the_pong_resends_frames_the_peers_tcp_had_acknowledged() {
    let mut s = Sim::ready(nats_like());
    s.submit(b"PUB a");
    s.transmit();
    s.redial();
    s.transmit();
    assert_eq!(s.written, b"PUB a\nPUB a\n");
    assert_eq!(s.metrics().frames_resent, 1);
}

#[test]
fn by_reply_under_report_a_drop_before_the_pong_reports_the_frame() {
    let mut s = Sim::ready(nats_like().delivery(|d| d.redelivery = Redelivery::Report));
    s.submit(b"PUB a");
    s.transmit();
    s.tcp_down();
    assert_eq!(
        s.abandoned(),
        [(b"PUB a".to_vec(), AbandonReason::Unconfirmed)]
    );
}

#[test]
fn every_frame_each_reply_confirms_its_frame_and_is_delivered_when_answers_are_events() {
    let b = Sim::builder()
        .framing(Lines::new())
        .protocol(Answering(Answers::EveryFrame))
        .delivery(|d| d.answer_events = true);
    let mut s = Sim::ready(b);
    for f in [&b"SET a 1"[..], b"SET b 2", b"SET c 3"] {
        s.submit(f);
    }
    s.transmit();
    assert_eq!(s.confirmed(), 0);
    s.data(b"+OK\n+OK\n");
    assert_eq!(s.confirmed(), 2);
    assert_eq!(s.frames(), [b"+OK".to_vec(), b"+OK".to_vec()]);
}

#[test]
fn by_default_the_answers_that_only_confirm_sent_frames_are_consumed_and_counted() {
    // Confirmation by reply follows from what the protocol says it answers.
    let b = Sim::builder()
        .framing(Lines::new())
        .protocol(Answering(Answers::EveryFrame));
    let mut s = Sim::ready(b);
    for f in [&b"SET a 1"[..], b"SET b 2"] {
        s.submit(f);
    }
    s.transmit();
    s.data(b"+OK\n+OK\n");
    assert_eq!(s.confirmed(), 2);
    assert!(s.frames().is_empty());
    assert_eq!(s.metrics().answers_consumed, 2);
}

#[test]
fn a_flush_returns_once_the_frames_before_it_are_confirmed() {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()));
    s.auto_ack = false;
    s.submit(b"a");
    s.transmit();
    s.flush(1, SEC);
    s.submit(b"b");
    assert!(s.flushed.is_empty());
    s.ack(2);
    assert_eq!(s.flushed, [(1, Ok(()))], "frame b came after the flush");
}

#[test]
fn a_flush_times_out_saying_how_many_still_wait() {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()));
    s.auto_ack = false;
    s.submit(b"a");
    s.transmit();
    s.flush(1, SEC);
    s.advance(SEC);
    assert_eq!(s.flushed, [(1, Err(FlushError::TimedOut { waiting: 1 }))]);
}

#[test]
fn a_flush_by_reply_writes_a_barrier_at_once() {
    let mut s = Sim::ready(nats_like());
    s.submit(b"PUB a");
    s.transmit();
    s.flush(1, SEC);
    s.transmit();
    assert_eq!(s.written, b"PUB a\nPING\n");
    s.data(b"PONG\n");
    assert_eq!(s.flushed, [(1, Ok(()))]);
}

#[test]
fn a_flush_says_how_many_were_abandoned_while_it_waited() {
    let mut s = Sim::ready(nats_like().delivery(|d| d.redelivery = Redelivery::Report));
    s.submit(b"PUB a");
    s.transmit();
    s.flush(1, 10 * SEC);
    s.transmit();
    s.tcp_down();
    assert_eq!(s.flushed, [(1, Err(FlushError::Abandoned { frames: 1 }))]);
}

#[test]
fn a_frame_in_flight_at_max_losses_in_a_row_is_abandoned_as_poison_and_the_rest_moves_on() {
    let mut s = Sim::ready(
        Sim::builder()
            .framing(Lines::new())
            .delivery(|d| d.max_losses = 3),
    );
    s.auto_ack = false;
    s.submit(b"poison");
    s.transmit();
    s.redial();
    s.transmit();
    s.redial();
    s.submit(b"next");
    s.transmit();
    assert!(s.abandoned().is_empty(), "two losses so far");
    s.redial();
    assert_eq!(s.abandoned(), [(b"poison".to_vec(), AbandonReason::Poison)]);
    assert_eq!(s.metrics().abandoned.poison, 1);
    s.written.clear();
    s.transmit();
    assert_eq!(s.written, b"next\n", "in flight at one loss only: resent");
}

#[test]
fn a_request_written_before_max_losses_in_a_row_fails_as_poison() {
    let b = Sim::builder()
        .framing(Lines::new())
        .requests(|q| q.redelivery = Redelivery::Resend)
        .delivery(|d| d.max_losses = 2);
    let mut s = Sim::ready(b);
    s.request_line(1, b"GET a");
    s.transmit();
    s.redial();
    s.transmit();
    assert!(s.answers.is_empty(), "resent after one loss");
    s.redial();
    assert_eq!(
        reply(&s, 1),
        Some(&Err(RequestError::Abandoned(AbandonReason::Poison)))
    );
}

#[test]
fn a_request_refused_while_timed_out_requests_hold_the_window_says_so() {
    let b = Sim::builder().framing(Lines::new()).requests(|q| {
        q.limit_frames = 1;
        q.limit_bytes = 1 << 20;
    });
    let mut s = Sim::ready(b);
    s.input(Input::Request {
        token: 1,
        frame: Bytes::from_static(b"GET a"),
        id: None,
        deadline: s.now + SEC,
    });
    s.transmit();
    s.advance(SEC);
    assert_eq!(reply(&s, 1), Some(&Err(RequestError::TimedOut)));
    assert_eq!(s.metrics().requests_late_held, 1);
    s.request_line(2, b"GET b");
    assert!(matches!(
        reply(&s, 2),
        Some(Err(RequestError::FullOfLate { late: 1, .. }))
    ));
    let m = s.metrics();
    assert_eq!(m.requests_submitted, 2);
    assert_eq!(
        m.requests_submitted,
        m.requests_answered + m.requests_failed + m.requests_outstanding
    );
}
