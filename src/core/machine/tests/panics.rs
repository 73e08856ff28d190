//! Application code that panics (row 22, and row 3 for the resolver): the connection fails,
//! the application hears of it, and the link recovers.

use super::*;

/// A predicate that panics with `boom` on its first call (or on every call), then answers
/// `answer`.
fn panicking(every_call: bool, answer: bool) -> Predicate {
    let calls = std::sync::atomic::AtomicU32::new(0);
    Predicate::new(move |_| {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if every_call || n == 0 {
            panic!("boom");
        }
        answer
    })
}

fn panic_errors(s: &Sim) -> Vec<(crate::error::Callback, Option<String>)> {
    s.events
        .iter()
        .filter_map(|e| match e {
            Event::Error(LinkError::CallbackPanicked { callback, message }) => {
                Some((*callback, message.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn row22_a_reply_predicate_that_panics_once_fails_the_connection_then_the_link_recovers() {
    let hb = Heartbeat::new(1000 * MS, Ping::Raw(b"p".to_vec())).reply(panicking(false, false));
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()).heartbeat(hb));
    // The predicate is asked only while a ping waits for its pong.
    s.advance(1000 * MS);
    s.transmit();
    s.data(b"first\n");
    let errors = panic_errors(&s);
    assert_eq!(
        errors,
        [(crate::error::Callback::HeartbeatReply, Some("boom".into()))]
    );
    let error_at = s
        .events
        .iter()
        .position(|e| matches!(e, Event::Error(_)))
        .unwrap();
    let t = s.last_transition();
    assert_eq!(
        (t.from, t.to, t.cause),
        (Ready, Backoff, Cause::CallbackPanic)
    );
    let backoff_at = s
        .events
        .iter()
        .position(|e| matches!(e, Event::State(t) if t.to == Backoff))
        .unwrap();
    assert!(
        error_at < backoff_at,
        "the error comes before the transition"
    );
    assert_eq!(s.disconnects, 1, "the connection is reset");
    assert!(
        s.frames().is_empty(),
        "the frame being tested is not delivered"
    );
    let m = s.metrics();
    assert_eq!(
        (m.state, m.callback_panics, m.consecutive_failures),
        (Backoff, 1, 1)
    );

    s.next_timer();
    s.tcp_up();
    assert_eq!(s.m.state(), Ready);
    s.data(b"second\n");
    assert_eq!(s.frames(), [b"second".to_vec()]);
    assert_eq!(s.metrics().callback_panics, 1);
}

#[test]
fn row22_a_reply_predicate_that_always_panics_backs_off_with_growing_delays_then_cools_down() {
    let hb = Heartbeat::new(10 * MS, Ping::Raw(b"p".to_vec())).reply(panicking(true, false));
    let b = Sim::builder()
        .framing(Lines::new())
        .heartbeat(hb)
        .reconnect(|r| {
            r.jitter = Jitter::None;
            r.max_attempts = Some(5);
            r.cooldown = 60_000 * MS;
        });
    let mut s = Sim::connecting(b);
    for _ in 0..5 {
        s.tcp_up();
        // The predicate is asked only while a ping waits for its pong.
        s.advance(10 * MS);
        s.transmit();
        s.data(b"x\n");
        assert_eq!(s.last_transition().cause, Cause::CallbackPanic);
        s.next_timer();
    }
    let delays = s.delays();
    assert_eq!(delays.len(), 5);
    assert!(
        delays[..4].windows(2).all(|w| w[0] < w[1]),
        "the backoff grows: {delays:?}"
    );
    assert_eq!(delays[4], 60_000 * MS, "max_attempts leads to Cooldown");
    assert!(s
        .transitions()
        .contains(&(Ready, Cooldown, Cause::CallbackPanic)));
    assert_eq!(panic_errors(&s).len(), 5, "each panic is reported");
    assert_eq!(s.metrics().callback_panics, 5);
}

#[test]
fn row22_a_handshake_predicate_that_panics_fails_the_connection() {
    let hs = Handshake::new(vec![b"HELLO".to_vec()], panicking(false, true));
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).protocol(hs));
    s.tcp_up();
    s.data(b"OK\n");
    assert_eq!(
        panic_errors(&s),
        [(crate::error::Callback::Protocol, Some("boom".into()))]
    );
    assert_eq!(
        s.transitions().last(),
        Some(&(Connected, Backoff, Cause::CallbackPanic))
    );
    assert_eq!(s.disconnects, 1);
    assert!(s.frames().is_empty());

    s.next_timer();
    s.tcp_up();
    s.data(b"OK\n");
    assert_eq!(s.m.state(), Ready, "the next reply is accepted");
    assert_eq!(s.metrics().callback_panics, 1);
}

fn resolver_panic() -> Unresolved {
    Unresolved::Panicked(Panicked {
        callback: crate::error::Callback::Resolver,
        message: Some("boom".into()),
    })
}

#[test]
fn row3_a_resolver_that_panics_fails_the_dial_with_cause_callback_panic() {
    let mut s =
        Sim::connecting(Builder::new("tcp://db.example:1").reconnect(|r| r.native_retries = 0));
    let generation = s.gen();
    s.input(Input::Resolved {
        generation,
        result: Err(resolver_panic()),
    });
    assert_eq!(
        panic_errors(&s),
        [(crate::error::Callback::Resolver, Some("boom".into()))]
    );
    assert_eq!(
        s.transitions().last(),
        Some(&(Connecting, Backoff, Cause::CallbackPanic))
    );
    let m = s.metrics();
    assert_eq!((m.callback_panics, m.consecutive_failures), (1, 1));
    s.next_timer();
    assert_eq!(s.resolves.len(), 2, "the next dial asks again");
}

#[test]
fn a_resolver_panic_in_a_late_answer_is_reported_without_a_transition() {
    let mut s =
        Sim::connecting(Builder::new("tcp://db.example:1").reconnect(|r| r.native_retries = 0));
    let generation = s.gen();
    s.next_timer(); // the dial times out
    let before = s.transitions().len();
    s.input(Input::Resolved {
        generation,
        result: Err(resolver_panic()),
    });
    assert_eq!(panic_errors(&s).len(), 1);
    assert_eq!(s.transitions().len(), before);
    assert_eq!(s.metrics().callback_panics, 1);
}

#[test]
fn a_resolver_panic_in_a_background_refresh_is_reported_and_the_connection_stays() {
    let b = Builder::new("tcp://db.example:7000").reconnect(|r| {
        r.native_retries = 0;
        r.dns_refresh = 10_000 * MS;
    });
    let mut s = Sim::connecting(b);
    let generation = s.gen();
    s.input(Input::Resolved {
        generation,
        result: Ok(vec!["10.0.0.1:7000".parse().unwrap()]),
    });
    s.tcp_up();
    s.advance(10_000 * MS);
    assert_eq!(s.refreshes, [0]);
    s.input(Input::Refreshed {
        endpoint: 0,
        result: Err(resolver_panic()),
    });
    assert_eq!(panic_errors(&s).len(), 1);
    assert_eq!(s.m.state(), Ready, "the connection in use is not touched");
    assert_eq!(s.metrics().callback_panics, 1);
    s.advance(10_000 * MS);
    assert_eq!(s.refreshes, [0, 0], "the next refresh is armed");
}

/// Lines, except that encoding the frame `boom` panics.
#[derive(Clone)]
struct PanicsOnBoom;

impl crate::framing::Framing for PanicsOnBoom {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), crate::error::EncodeError> {
        dst.extend_from_slice(frame);
        if frame == b"boom" {
            panic!("boom");
        }
        dst.push(b'\n');
        Ok(())
    }

    fn decode(
        &mut self,
        src: &mut bytes::BytesMut,
    ) -> Result<Option<bytes::Bytes>, crate::error::DecodeError> {
        Ok(src
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| src.split_to(i + 1).freeze().slice(..i)))
    }
}

#[test]
fn a_framing_that_panics_mid_batch_writes_nothing_of_it_and_every_frame_stays_first_in_line() {
    let mut s = Sim::ready(Sim::builder().framing(PanicsOnBoom));
    for f in [&b"a"[..], b"b", b"boom", b"c"] {
        s.submit(f);
    }
    s.transmit();
    s.drain();
    assert!(s.written.is_empty(), "nothing of the batch is written");
    assert_eq!(
        panic_errors(&s),
        [(crate::error::Callback::Encode, Some("boom".into()))]
    );
    assert_eq!(s.last_transition().cause, Cause::CallbackPanic);
    let m = s.metrics();
    assert_eq!((m.frames_sent, m.outbox_frames), (0, 4), "all four wait");
    assert!(s.abandoned().is_empty(), "none is lost");
}
