//! Requests through the machine, in virtual time: written after the hello, matched to their
//! replies, and ended exactly once at a timeout, a drop or a close.

use super::*;
use crate::error::RequestError;
use crate::protocol::Correlation;
use crate::Redelivery;
use bytes::Bytes;

const SEC: Duration = Duration::from_secs(1);

fn lines() -> Builder {
    Sim::builder().framing(Lines::new())
}

impl Sim {
    fn request(&mut self, token: Token, frame: &[u8], timeout: Duration) {
        self.input(Input::Request {
            token,
            frame: Bytes::copy_from_slice(frame),
            id: None,
            deadline: self.now + timeout,
        });
    }
}

#[test]
fn a_reply_answers_its_request_and_is_not_delivered_as_an_event() {
    let mut s = Sim::ready(lines());
    s.request(1, b"GET a", SEC);
    s.transmit();
    assert_eq!(s.written, b"GET a\n");
    s.data(b"value-a\n");
    assert_eq!(s.answers, [(1, Ok(Bytes::from_static(b"value-a")))]);
    assert!(s.frames().is_empty());
    assert_eq!(s.metrics().requests_answered, 1);
}

#[test]
fn a_request_counts_as_written_from_its_write_until_its_reply() {
    let mut s = Sim::ready(lines());
    s.request(1, b"GET a", SEC);
    s.request(2, b"GET b", SEC);
    let m = s.metrics();
    assert_eq!(
        (m.requests_outstanding, m.requests_written),
        (2, 0),
        "queued"
    );
    s.transmit();
    let m = s.metrics();
    assert_eq!(
        (m.requests_outstanding, m.requests_written),
        (2, 2),
        "written"
    );
    s.data(b"value-a\n");
    let m = s.metrics();
    assert_eq!(
        (m.requests_outstanding, m.requests_written),
        (1, 1),
        "one answered"
    );
}

#[test]
fn unsolicited_frames_between_replies_are_delivered_as_events() {
    let mut s =
        Sim::ready(lines().requests(|q| {
            q.correlation = Some(Correlation::in_order_except(|f| f.starts_with(b">")))
        }));
    s.request(1, b"one", SEC);
    s.request(2, b"two", SEC);
    s.transmit();
    s.data(b">push 1\nreply 1\n>push 2\nreply 2\n");
    assert_eq!(
        s.answers,
        [
            (1, Ok(Bytes::from_static(b"reply 1"))),
            (2, Ok(Bytes::from_static(b"reply 2")))
        ]
    );
    assert_eq!(s.frames(), [b">push 1".to_vec(), b">push 2".to_vec()]);
}

#[test]
fn a_request_queued_through_an_outage_times_out_counting_the_queued_time() {
    let mut s = Sim::backoff(lines());
    s.request(1, b"GET a", 2 * SEC);
    s.advance(2 * SEC);
    assert_eq!(
        s.answers,
        [(1, Err(RequestError::Abandoned(AbandonReason::Expired)))]
    );
    assert_eq!(s.metrics().requests_outstanding, 0);
}

#[test]
fn resent_requests_go_after_the_hello_on_the_next_connection() {
    let hello = Handshake::new(vec![b"AUTH pw".to_vec()], Predicate::new(|f| f == b"+OK"));
    let b = lines()
        .protocol(hello)
        .requests(|q| q.redelivery = Redelivery::Resend);
    let mut s = Sim::connecting(b);
    s.tcp_up();
    s.transmit();
    s.data(b"+OK\n");
    assert_eq!(s.m.state(), Ready);
    s.request(1, b"SET k v", 10 * SEC);
    s.transmit();
    s.written.clear();
    s.tcp_down();
    assert!(s.answers.is_empty(), "resent, not failed");
    s.next_timer();
    s.tcp_up();
    s.transmit();
    assert_eq!(
        s.written, b"AUTH pw\n",
        "only the hello before the handshake's reply"
    );
    s.data(b"+OK\n");
    s.transmit();
    assert_eq!(s.written, b"AUTH pw\nSET k v\n");
    s.data(b"+OK\n");
    assert_eq!(s.answers, [(1, Ok(Bytes::from_static(b"+OK")))]);
}

#[test]
fn report_fails_a_written_request_when_its_connection_drops() {
    let mut s = Sim::ready(lines());
    s.request(1, b"SET k v", 10 * SEC);
    s.transmit();
    s.tcp_down();
    assert_eq!(
        s.answers,
        [(
            1,
            Err(RequestError::Abandoned(AbandonReason::ConnectionLost))
        )]
    );
}

#[test]
fn a_late_reply_is_counted_and_the_next_reply_goes_to_its_own_request() {
    let mut s = Sim::ready(lines());
    s.request(1, b"slow", SEC);
    s.request(2, b"fast", 5 * SEC);
    s.transmit();
    s.advance(SEC);
    assert_eq!(s.answers, [(1, Err(RequestError::TimedOut))]);
    s.data(b"late\nfast-reply\n");
    assert_eq!(s.answers[1], (2, Ok(Bytes::from_static(b"fast-reply"))));
    assert_eq!(s.metrics().replies_late, 1);
    assert!(s.frames().is_empty());
}

#[test]
fn close_waits_for_outstanding_replies_then_ends_the_rest_as_shutdown() {
    let mut s = Sim::ready(lines());
    s.request(1, b"one", 10 * SEC);
    s.request(2, b"two", 10 * SEC);
    s.transmit();
    let deadline = s.now + SEC;
    s.input(Input::Close { deadline });
    assert_eq!(s.m.state(), Ready, "the close waits for the replies");
    s.data(b"r1\n");
    s.advance(SEC);
    assert_eq!(s.m.state(), Closed);
    assert_eq!(
        s.answers,
        [
            (1, Ok(Bytes::from_static(b"r1"))),
            (2, Err(RequestError::Abandoned(AbandonReason::Shutdown)))
        ]
    );
}

#[test]
fn a_request_to_a_closed_machine_is_refused_with_its_frame() {
    let mut s = Sim::ready(lines());
    s.input(Input::Close { deadline: s.now });
    s.request(1, b"late", SEC);
    assert_eq!(
        s.answers,
        [(1, Err(RequestError::Closed(Bytes::from_static(b"late"))))]
    );
}

#[test]
fn a_correlation_that_panics_fails_the_connection() {
    let mut s = Sim::ready(
        lines()
            .requests(|q| q.correlation = Some(Correlation::in_order_except(|_| panic!("boom")))),
    );
    s.request(1, b"q", 10 * SEC);
    s.transmit();
    s.data(b"reply\n");
    assert_eq!(s.last_transition().cause, Cause::CallbackPanic);
    assert_eq!(
        s.answers,
        [(
            1,
            Err(RequestError::Abandoned(AbandonReason::ConnectionLost))
        )]
    );
}
