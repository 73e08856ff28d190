//! The peer's close in virtual time: what it wrote before is delivered ahead of the state
//! change, a frame it cut short is reported with its length (never delivered), bytes relink
//! itself left undecoded are counted, and no handshake verdict is given while reading is
//! paused.

use super::*;

/// The events in order, each as a short word: `frame:<payload>`, `cut:<bytes>`,
/// `state:<to>`.
fn story(s: &Sim) -> Vec<String> {
    s.events
        .iter()
        .filter_map(|e| match e {
            Event::Frame(f) => Some(format!("frame:{}", String::from_utf8_lossy(f))),
            Event::Error(LinkError::CutFrame { bytes }) => Some(format!("cut:{bytes}")),
            Event::State(t) if t.from == Ready => Some(format!("state:{:?}", t.to)),
            _ => None,
        })
        .collect()
}

/// A lines link whose handshake is HELLO, answered by OK within `timeout`.
fn handshake(timeout: Duration) -> Builder {
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    Sim::builder()
        .framing(Lines::new())
        .protocol(hs)
        .handshake_timeout(timeout)
}

#[test]
fn frames_before_the_peers_close_come_before_the_state_change_and_a_cut_one_is_reported() {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()));
    s.data(b"one\ntwo\nthr");
    s.tcp_down();
    assert_eq!(
        story(&s),
        vec!["frame:one", "frame:two", "cut:3", "state:Backoff"],
        "{:?}",
        s.events
    );
    let m = s.metrics();
    assert_eq!((m.frames_received, m.frames_cut, m.bytes_cut), (2, 1, 3));
    assert_eq!(m.bytes_discarded, 0);
}

#[test]
fn a_close_on_a_frame_boundary_reports_nothing_cut() {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()));
    s.data(b"one\n");
    s.tcp_down();
    assert_eq!(story(&s), vec!["frame:one", "state:Backoff"]);
    assert_eq!(s.metrics().frames_cut, 0);
}

#[test]
fn bytes_left_undecoded_when_relink_ends_the_connection_are_counted_as_discarded() {
    let hb = Heartbeat::new(100 * MS, Ping::Raw(b"p".to_vec())).max_missed(1);
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()).heartbeat(hb));
    s.data(b"half a li");
    while s.m.state() == Ready {
        s.next_timer();
    }
    assert_eq!(s.last_transition().cause, Cause::HeartbeatTimeout);
    let m = s.metrics();
    assert_eq!((m.bytes_discarded, m.frames_cut), (9, 0));
    // Bytes of the connection let go, read after it: discarded too.
    let stale = s.m.dial.generation() - 1;
    s.m.handle_data(s.now, stale, b"late\n");
    assert_eq!(s.metrics().bytes_discarded, 14);
    assert!(s.frames().is_empty());
}

#[test]
fn no_handshake_verdict_is_given_while_reading_is_paused() {
    let mut s = Sim::connecting(handshake(500 * MS));
    s.tcp_up();
    s.transmit();
    s.input(Input::ReadPaused(true));
    s.advance(3000 * MS);
    assert_eq!(s.m.state(), Connected, "{:?}", s.transitions());
    assert!(s.metrics().verdicts_deferred >= 1);
    // Reading resumes: the reply that waited unread is read within a fresh bound.
    s.input(Input::ReadPaused(false));
    s.advance(400 * MS);
    assert_eq!(s.m.state(), Connected);
    s.data(b"OK\n");
    assert_eq!(s.m.state(), Ready);
}

#[test]
fn a_silent_handshake_still_fails_one_bound_after_reading_resumes() {
    let mut s = Sim::connecting(handshake(500 * MS));
    s.tcp_up();
    s.transmit();
    s.input(Input::ReadPaused(true));
    s.advance(2000 * MS);
    s.input(Input::ReadPaused(false));
    let resumed = s.now;
    while s.m.state() == Connected {
        s.next_timer();
    }
    assert_eq!(s.last_transition().cause, Cause::HandshakeTimeout);
    assert_eq!(s.now - resumed, 500 * MS);
}
