//! One order on the wire, in virtual time: frames and requests are written in the order they
//! were handed in, whatever stops them (the batch, the window, the pause after a refusal, a
//! request waiting for room), and what a drop takes back is written again in that order.

use super::*;
use crate::framing::Resp;
use crate::protocol::Redis;
use crate::{Confirm, Redelivery};
use bytes::Bytes;

const SEC: Duration = Duration::from_secs(1);

fn lines() -> Builder {
    Sim::builder().framing(Lines::new())
}

fn ask(s: &mut Sim, token: Token, frame: &[u8]) {
    let deadline = s.now + 10 * SEC;
    s.input(Input::Request {
        token,
        frame: Bytes::copy_from_slice(frame),
        id: None,
        deadline,
    });
}

fn cmd(parts: &[&str]) -> Vec<u8> {
    Resp::command(parts)
}

#[test]
fn a_request_between_frames_is_written_between_them_behind_a_backlog() {
    let mut s = Sim::ready(lines());
    for _ in 0..100 {
        s.submit(b"f");
    }
    ask(&mut s, 1, b"R");
    s.submit(b"g");
    s.input(Input::SubmitBatch {
        batch: ["h", "i"].into_iter().collect(),
        deadline: None,
    });
    ask(&mut s, 2, b"S");
    s.transmit();
    let mut expected = b"f\n".repeat(100);
    expected.extend_from_slice(b"R\ng\nh\ni\nS\n");
    assert_eq!(
        String::from_utf8_lossy(&s.written),
        String::from_utf8_lossy(&expected)
    );
    assert_eq!(s.metrics().frames_sent, 103);
}

#[test]
fn a_full_batch_stops_the_requests_given_after_the_frames_it_left_out() {
    let mut s = Sim::ready(lines().delivery(|d| d.batch_bytes = 4));
    s.submit(b"aaa");
    s.submit(b"bbb");
    ask(&mut s, 1, b"R");
    let mut buf = Vec::new();
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(buf, b"aaa\n", "the batch is full after the first frame");
    s.m.transmit_done(s.now, TxResult::Sent);
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(
        buf, b"bbb\n",
        "the request waits for the frame given before it"
    );
    s.m.transmit_done(s.now, TxResult::Sent);
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(buf, b"R\n");
}

#[test]
fn the_window_bound_holds_back_the_requests_given_after_the_frames_it_holds_back() {
    let mut s = Sim::ready(lines().delivery(|d| d.window = 4));
    s.auto_ack = false;
    ask(&mut s, 1, b"Q");
    s.submit(b"aaa");
    s.submit(b"bbb");
    ask(&mut s, 2, b"R");
    s.transmit();
    assert_eq!(
        s.written, b"Q\naaa\n",
        "the window is full after aaa: bbb waits, and R given after it"
    );
    s.ack(s.m.delivery.window.written());
    s.transmit();
    assert_eq!(s.written, b"Q\naaa\nbbb\nR\n");
}

#[test]
fn the_pause_after_a_refusal_holds_back_the_requests_given_after_the_refused_frame() {
    let mut s = Sim::ready(
        Sim::builder()
            .framing(Resp::new())
            .protocol(Redis::new())
            .confirm(Confirm::reply()),
    );
    s.submit(&cmd(&["SET", "a", "1"]));
    s.submit(&cmd(&["SET", "b", "1"]));
    s.transmit();
    s.written.clear();
    s.data(b"+OK\r\n-LOADING Redis is loading the dataset in memory\r\n");
    assert_eq!(s.metrics().frames_refused, 1);
    // Given after the refused frame: it waits out the pause behind it.
    s.input(Input::Request {
        token: 1,
        frame: Bytes::from(cmd(&["GET", "b"])),
        id: None,
        deadline: s.now + 10 * SEC,
    });
    s.transmit();
    assert!(s.written.is_empty(), "nothing during the pause");
    s.next_timer();
    s.transmit();
    let mut again = cmd(&["SET", "b", "1"]);
    again.extend(cmd(&["GET", "b"]));
    assert_eq!(
        s.written, again,
        "the refused frame first, then the request"
    );
    s.data(b"+OK\r\n$1\r\n1\r\n");
    assert_eq!(s.answers, [(1, Ok(Bytes::from_static(b"$1\r\n1\r\n")))]);
}

#[test]
fn frames_given_after_a_request_waiting_for_room_wait_behind_it() {
    let mut s = Sim::ready(
        lines()
            .delivery(|d| d.overflow = Overflow::Block(10 * SEC))
            .requests(|q| q.limit_frames = 1),
    );
    ask(&mut s, 1, b"Q");
    ask(&mut s, 2, b"R");
    s.submit(b"f");
    s.transmit();
    assert_eq!(s.written, b"Q\n", "R waits for room, and f given after it");
    s.data(b"q\n");
    s.transmit();
    assert_eq!(s.written, b"Q\nR\nf\n");
    assert_eq!(s.answers, [(1, Ok(Bytes::from_static(b"q")))]);
}

#[test]
fn after_a_drop_frames_and_requests_are_written_again_in_the_order_they_were_given() {
    let mut s = Sim::ready(lines().requests(|q| q.redelivery = Redelivery::Resend));
    s.auto_ack = false;
    s.submit(b"a");
    ask(&mut s, 1, b"R");
    s.input(Input::SubmitBatch {
        batch: ["b", "c"].into_iter().collect(),
        deadline: None,
    });
    ask(&mut s, 2, b"S");
    s.submit(b"d");
    s.transmit();
    assert_eq!(s.written, b"a\nR\nb\nc\nS\nd\n");
    s.written.clear();
    s.tcp_down();
    assert!(s.answers.is_empty(), "resent, not failed");
    // Given while the link is down: after everything taken back.
    s.submit(b"e");
    ask(&mut s, 3, b"T");
    s.next_timer();
    s.tcp_up();
    s.transmit();
    assert_eq!(
        String::from_utf8_lossy(&s.written),
        "a\nR\nb\nc\nS\nd\ne\nT\n"
    );
    assert_eq!(s.metrics().frames_resent, 4);
}
