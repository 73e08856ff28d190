//! Confirmed delivery in virtual time: frames wait in the window until the peer's TCP
//! acknowledges their last byte (the count enters as an input), the window holds frames back,
//! and a drop resends or reports what was not confirmed.

use super::super::delivery::{QUIET, QUIET_WAKE};
use super::*;
use crate::Redelivery;

/// A Ready link whose peer acknowledges only what a test says.
fn quiet(b: Builder) -> Sim {
    let mut s = Sim::ready(b);
    s.auto_ack = false;
    s
}

fn sent_frames(s: &Sim) -> (u64, u64, u64) {
    let m = s.metrics();
    (m.frames_sent, m.frames_confirmed, m.frames_unconfirmed)
}

#[test]
fn a_frame_is_confirmed_once_the_peer_acknowledges_its_last_byte() {
    let mut s = quiet(Sim::builder().framing(Lines::new()));
    s.submit(b"aaa");
    s.submit(b"bb");
    s.transmit();
    assert_eq!(s.written, b"aaa\nbb\n");
    assert_eq!(sent_frames(&s), (2, 0, 2));
    s.ack(6);
    assert_eq!(
        sent_frames(&s),
        (2, 1, 1),
        "\"aaa\\n\" ends at 4, \"bb\\n\" at 7"
    );
    s.ack(7);
    assert_eq!(sent_frames(&s), (2, 2, 0));
    assert_eq!(s.metrics().unaccounted(), 0);
    assert_eq!(
        s.m.delivery.window.poll_at(),
        None,
        "no reading wanted once all is confirmed"
    );
}

#[test]
fn the_machine_asks_for_readings_while_frames_wait_and_less_often_while_nothing_moves() {
    let mut s = quiet(Sim::builder());
    s.submit(b"a");
    s.transmit();
    assert!(!s.m.reading_due(s.now), "no reading right after the write");
    let first = s.next_timer();
    assert!(
        first >= QUIET,
        "the first reading {first:?} waits for a quiet link's frames"
    );
    s.ack(0);
    let second = s.next_timer();
    s.ack(0);
    let third = s.m.poll_timeout().unwrap() - s.now;
    assert!(third > second, "{third:?} after {second:?}");
    assert!(s.metrics().oldest_unconfirmed >= Some(first + second));
}

#[test]
fn a_link_writing_every_few_milliseconds_reads_in_its_frames_passes_and_a_lone_frame_wakes_later() {
    let ms = Duration::from_millis;
    let mut s = quiet(Sim::builder());
    let began = s.now;
    s.submit(b"a");
    s.transmit();
    // Nothing waits on the confirmation: the link's own timer comes only at QUIET_WAKE.
    assert_eq!(s.m.poll_timeout(), Some(began + QUIET_WAKE));
    // A frame every 2 ms: the reading is due in the first pass after QUIET, the pass of a
    // frame, and no timer fires before it.
    let mut read_at = None;
    for i in 1..=10u32 {
        let at = began + ms(2) * i;
        assert!(
            s.m.poll_timeout().is_some_and(|t| t > at - ms(2)),
            "frame {i}"
        );
        s.now = at;
        // A pass reads before its timers, as `Slot::pass` does.
        if read_at.is_none() && s.m.reading_due(s.now) {
            read_at = Some(at - began);
            s.ack(s.m.delivery.window.written());
        }
        s.m.handle_timeout(s.now);
        s.submit(b"a");
        s.transmit();
    }
    assert_eq!(
        read_at,
        Some(QUIET),
        "read in the pass of the frame at QUIET"
    );
    assert_eq!(sent_frames(&s), (11, 5, 6));
    // The link goes quiet: its own timer reads what waits, QUIET_WAKE after the oldest (the
    // frame written in the pass that read).
    let wake = s.m.poll_timeout().expect("a reading is wanted");
    assert_eq!(wake, began + QUIET + QUIET_WAKE);
    assert!(s.m.reading_due(wake));
    // A pass it made for something else QUIET after that frame would have read it then.
    assert!(!s.m.reading_due(began + QUIET + QUIET - ms(1)));
    assert!(s.m.reading_due(began + QUIET + QUIET + ms(1)));
}

#[test]
fn a_flush_or_a_close_or_a_filling_window_asks_for_a_reading_at_once() {
    let mut s = quiet(Sim::builder());
    s.submit(b"a");
    s.transmit();
    assert!(!s.m.reading_due(s.now));
    s.m.flush(s.now, 0, s.now + Duration::from_secs(1));
    assert!(s.m.reading_due(s.now), "a flush waits on the confirmation");

    let mut s = quiet(Sim::builder().delivery(|d| {
        d.window = 64;
        d.batch_bytes = 8;
    }));
    s.submit(b"abcdefg");
    s.transmit();
    assert!(!s.m.reading_due(s.now), "7 of 64 bytes unconfirmed");
    s.submit(b"abcdefg");
    s.submit(b"abcdefg");
    s.transmit();
    assert!(
        s.m.reading_due(s.now),
        "a quarter of the window unconfirmed"
    );
}

#[test]
fn the_window_holds_frames_back_until_acknowledgements_free_it() {
    let mut s = quiet(Sim::builder().delivery(|d| {
        d.window = 10;
        d.batch_bytes = 4;
    }));
    for _ in 0..5 {
        s.submit(b"abcd");
    }
    s.transmit();
    assert_eq!(
        s.written.len(),
        12,
        "three frames: the third fills the window past 10"
    );
    assert_eq!(s.metrics().outbox_frames, 2);
    s.ack(12);
    s.transmit();
    assert_eq!(s.written.len(), 20);
    assert_eq!(s.metrics().unaccounted(), 0);
}

#[test]
fn a_window_of_zero_sets_no_bound() {
    let mut s = quiet(Sim::builder().delivery(|d| {
        d.window = 0;
        d.batch_bytes = 4;
    }));
    for _ in 0..5 {
        s.submit(b"abcd");
    }
    s.transmit();
    assert_eq!(s.written.len(), 20);
    assert_eq!(sent_frames(&s), (5, 0, 5), "still confirmed one by one");
}

#[test]
fn resend_writes_unconfirmed_frames_again_first_on_the_next_connection() {
    let mut s = quiet(Sim::builder().delivery(|d| d.redelivery = Redelivery::Resend));
    s.submit(b"a");
    s.submit(b"b");
    s.transmit();
    s.ack(1);
    s.submit(b"c");
    s.tcp_down();
    s.next_timer();
    s.tcp_up();
    s.written.clear();
    s.transmit();
    assert_eq!(s.written, b"bc", "b again, before the newer c");
    let m = s.metrics();
    assert_eq!(
        (m.frames_resent, m.frames_sent, m.frames_confirmed),
        (1, 4, 1)
    );
    assert!(s.abandoned().is_empty());
    assert_eq!(m.unaccounted(), 0);
}

#[test]
fn resent_frames_follow_the_hello_of_the_new_connection() {
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).protocol(hs));
    s.auto_ack = false;
    s.tcp_up();
    s.data(b"OK\n");
    s.submit(b"x");
    s.transmit();
    assert_eq!(s.written, b"HELLO\nx\n");
    s.tcp_down();
    s.next_timer();
    s.tcp_up();
    s.written.clear();
    s.transmit();
    assert_eq!(s.written, b"HELLO\n", "nothing before the hello's reply");
    s.data(b"OK\n");
    s.transmit();
    assert_eq!(s.written, b"HELLO\nx\n");
    assert_eq!(s.metrics().frames_resent, 1);
}

#[test]
fn report_gives_back_each_unconfirmed_frame_at_a_drop() {
    let mut s = quiet(Sim::builder().delivery(|d| d.redelivery = Redelivery::Report));
    s.submit(b"a");
    s.submit(b"b");
    s.transmit();
    s.ack(1);
    s.tcp_down();
    assert_eq!(
        s.abandoned(),
        vec![(b"b".to_vec(), AbandonReason::Unconfirmed)]
    );
    let m = s.metrics();
    assert_eq!((m.frames_confirmed, m.abandoned.unconfirmed), (1, 1));
    assert_eq!(m.unaccounted(), 0);
    s.next_timer();
    s.tcp_up();
    s.written.clear();
    s.transmit();
    assert!(s.written.is_empty(), "nothing replayed");
}

#[test]
fn a_resent_frame_whose_deadline_passed_expires() {
    let mut s = quiet(Sim::builder());
    let deadline = Some(s.now + 50 * MS);
    s.input(Input::Submit {
        frame: bytes::Bytes::from_static(b"a"),
        deadline,
    });
    s.transmit();
    s.tcp_down();
    s.advance(100 * MS);
    assert_eq!(s.abandoned(), vec![(b"a".to_vec(), AbandonReason::Expired)]);
    assert_eq!(s.metrics().unaccounted(), 0);
}

#[test]
fn a_count_from_an_earlier_connection_confirms_nothing() {
    let mut s = quiet(Sim::builder());
    let old = s.m.dial.generation();
    s.submit(b"a");
    s.transmit();
    s.tcp_down();
    s.next_timer();
    s.tcp_up();
    s.transmit();
    s.input(Input::Acked {
        generation: old,
        bytes: Some(1),
    });
    assert_eq!(sent_frames(&s), (2, 0, 1));
}

#[test]
fn a_connection_whose_acknowledgements_cannot_be_read_confirms_frames_as_written() {
    let mut s = quiet(Sim::builder());
    s.submit(b"a");
    s.transmit();
    let generation = s.m.dial.generation();
    s.input(Input::AcksUnavailable { generation });
    assert_eq!(sent_frames(&s), (1, 1, 0));
    s.submit(b"b");
    s.transmit();
    assert_eq!(sent_frames(&s), (2, 2, 0));
}

#[test]
fn close_waits_for_confirmation_then_reports_the_unconfirmed_rest() {
    let mut s = quiet(Sim::builder());
    s.submit(b"a");
    s.submit(b"b");
    s.transmit();
    s.ack(1);
    let deadline = s.now + 100 * MS;
    s.input(Input::Close { deadline });
    assert_eq!(s.m.state(), Ready, "b is not confirmed yet");
    s.advance(200 * MS);
    assert_eq!(s.m.state(), Closed);
    assert_eq!(
        s.abandoned(),
        vec![(b"b".to_vec(), AbandonReason::Unconfirmed)]
    );
    assert_eq!(s.metrics().unaccounted(), 0);
}
