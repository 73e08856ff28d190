//! Our own pauses in virtual time: a gap in which the IO side did not serve the link
//! (`Input::Resumed`) gives the peer a fresh chance instead of a verdict, a dead peer is still
//! found one bound after the gap, frame deadlines stay absolute; slow callbacks are counted and
//! reported once per period.

use super::*;
use crate::core::guard::Stopwatch;
use crate::error::LinkError;
use bytes::Bytes;

/// The IO side's view of a pause: `d` passed without the link being served, then the pass
/// that resumes tells the machine so before it fires any timer.
fn pause(s: &mut Sim, d: Duration) {
    s.now += d;
    s.input(Input::Resumed { unserved: d });
}

fn heartbeat() -> Heartbeat {
    Heartbeat::new(200 * MS, Ping::Raw(b"PING\n".to_vec()))
        .max_missed(2)
        .reply(Predicate::new(|f| f == b"PONG"))
}

/// Ready with a heartbeat, and one ping answered.
fn ready_with_heartbeat() -> Sim {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()).heartbeat(heartbeat()));
    s.next_timer();
    s.transmit();
    s.data(b"PONG\n");
    s
}

fn left_ready(s: &Sim) -> Vec<(State, State, Cause)> {
    s.transitions()
        .into_iter()
        .filter(|(from, _, _)| *from == Ready)
        .collect()
}

#[test]
fn a_pause_past_the_heartbeat_bound_gives_the_peer_a_ping_and_a_full_bound_not_a_verdict() {
    let mut s = ready_with_heartbeat();
    // A ping goes out, and the process stops before its answer is read.
    s.next_timer();
    s.transmit();
    let pings = s.metrics().heartbeats_sent;
    pause(&mut s, 3000 * MS);
    s.advance(Duration::ZERO);
    s.transmit();
    assert_eq!(s.m.state(), Ready, "{:?}", s.transitions());
    assert_eq!(s.metrics().heartbeats_sent, pings + 1, "a ping at once");
    assert_eq!(s.metrics().verdicts_deferred, 1);
    // The peer answers it: alive, and the round trip of the ping from before the pause is
    // not taken for the peer's.
    s.now += 5 * MS;
    s.data(b"PONG\n");
    let rtt = s.metrics().last_rtt;
    assert!(
        rtt < Some(1000 * MS),
        "the pause measured as a round trip: {rtt:?}"
    );
    s.data(b"PONG\n");
    s.advance(100 * MS);
    assert_eq!(s.m.state(), Ready);
    assert_eq!(s.metrics().last_rtt, Some(5 * MS));
    assert!(s.frames().is_empty(), "both answers are the pings'");
}

#[test]
fn a_peer_that_answered_what_arrived_during_the_pause_is_not_condemned() {
    let mut s = ready_with_heartbeat();
    pause(&mut s, 700 * MS);
    // What waited in the kernel is read before any timer fires.
    s.data(b"PONG\n");
    s.advance(Duration::ZERO);
    assert!(left_ready(&s).is_empty(), "{:?}", s.transitions());
}

#[test]
fn a_silent_peer_is_still_declared_dead_one_bound_after_a_pause() {
    let mut s = ready_with_heartbeat();
    pause(&mut s, 3000 * MS);
    let resumed_at = s.now;
    while s.m.state() == Ready {
        s.next_timer();
        s.transmit();
    }
    assert_eq!(s.last_transition().cause, Cause::HeartbeatTimeout);
    assert_eq!(s.now - resumed_at, 600 * MS, "interval × (max_missed + 1)");
}

#[test]
fn without_a_gap_the_heartbeat_verdict_is_unchanged() {
    let mut s = ready_with_heartbeat();
    let answered = s.now;
    while s.m.state() == Ready {
        s.next_timer();
        s.transmit();
    }
    assert_eq!(s.now - answered, 600 * MS);
    assert_eq!(s.metrics().verdicts_deferred, 0);
}

#[test]
fn a_short_gap_leaves_a_verdict_more_than_an_interval_away_where_it_was() {
    let mut s = ready_with_heartbeat();
    let answered = s.now;
    pause(&mut s, 60 * MS);
    while s.m.state() == Ready {
        s.next_timer();
        s.transmit();
    }
    assert_eq!(s.now - answered, 600 * MS);
    assert_eq!(s.metrics().verdicts_deferred, 0);
}

#[test]
fn a_handshake_reply_due_during_a_pause_gets_its_full_timeout_again() {
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let b = Sim::builder().framing(Lines::new()).protocol(hs);
    let mut s = Sim::connecting(b.handshake_timeout(1000 * MS));
    s.tcp_up();
    s.transmit();
    pause(&mut s, 3000 * MS);
    s.advance(Duration::ZERO);
    assert_eq!(s.m.state(), Connected, "no verdict at the resume");
    // The reply that libzmq hands over a little after the resume still counts.
    s.now += 20 * MS;
    s.data(b"OK\n");
    assert_eq!(s.m.state(), Ready);
}

#[test]
fn a_missing_handshake_reply_still_fails_one_timeout_after_a_pause() {
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let b = Sim::builder().framing(Lines::new()).protocol(hs);
    let mut s = Sim::connecting(b.handshake_timeout(1000 * MS));
    s.tcp_up();
    pause(&mut s, 3000 * MS);
    let waited = s.next_timer();
    assert_eq!(waited, 1000 * MS);
    assert_eq!(s.last_transition().cause, Cause::HandshakeTimeout);
}

#[test]
fn a_dial_due_to_time_out_during_a_pause_gets_its_full_bound_again() {
    let mut s = Sim::connecting(Sim::builder().socket(|s| s.connect_timeout = 1000 * MS));
    pause(&mut s, 5000 * MS);
    s.advance(Duration::ZERO);
    assert_eq!(s.m.state(), Connecting, "no connect-timeout at the resume");
    s.tcp_up();
    assert_eq!(s.m.state(), Ready);
    assert_eq!(s.metrics().verdicts_deferred, 1);
}

#[test]
fn frame_deadlines_stay_absolute_across_a_pause() {
    let mut s = Sim::backoff(Sim::builder().reconnect(|r| {
        r.backoff_base = 60_000 * MS;
        r.backoff_max = 60_000 * MS;
    }));
    let deadline = Some(s.now + 500 * MS);
    s.input(Input::Submit {
        frame: Bytes::from_static(b"stale"),
        deadline,
    });
    pause(&mut s, 3000 * MS);
    s.advance(Duration::ZERO);
    assert_eq!(s.abandoned(), [(b"stale".to_vec(), AbandonReason::Expired)]);
}

/// Every call of `slow` takes `took`; every other call takes no time.
#[derive(Debug)]
struct SlowOn(Callback, Duration);

impl Stopwatch for SlowOn {
    fn time(&self, what: Callback, f: &mut dyn FnMut()) -> Duration {
        f();
        if what == self.0 {
            self.1
        } else {
            Duration::ZERO
        }
    }
}

fn slow_errors(s: &Sim) -> Vec<(Callback, Duration)> {
    s.events
        .iter()
        .filter_map(|e| match e {
            Event::Error(LinkError::SlowCallback { callback, took }) => Some((*callback, *took)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_slow_decode_is_counted_every_time_and_reported_once_per_period() {
    let logs = capture::install();
    let mut s = ready_with_heartbeat();
    s.m.set_stopwatch(Box::new(SlowOn(Callback::Decode, 1500 * MS)));
    s.data(b"a\nb\n");
    assert_eq!(
        slow_errors(&s),
        [(Callback::Decode, 1500 * MS)],
        "one event for the period"
    );
    let m = s.metrics();
    // Three decode calls: two frames, then "need more bytes".
    assert_eq!((m.slow_callbacks, m.slowest_callback), (3, Some(1500 * MS)));
    assert_eq!(
        s.frames(),
        [b"a".to_vec(), b"b".to_vec()],
        "nothing is lost"
    );
    let warns: Vec<String> = capture::lines(logs, log::Level::Warn)
        .into_iter()
        .filter(|l| l.contains("slow callback"))
        .collect();
    assert_eq!(warns.len(), 1, "{warns:#?}");
    assert!(warns[0].contains("tcp://127.0.0.1:7000"), "{}", warns[0]);
    assert!(
        warns[0].contains("framing decoder took 1.5s"),
        "{}",
        warns[0]
    );
    // The next period reports again, and says how many went unreported (the two other calls
    // of the first period).
    s.now += 10_000 * MS;
    s.data(b"c\n");
    assert_eq!(slow_errors(&s).len(), 2);
    let warns = capture::lines(logs, log::Level::Warn);
    assert!(
        warns
            .last()
            .unwrap()
            .contains("2 more since the last report"),
        "{warns:#?}"
    );
}

#[test]
fn a_call_under_the_threshold_is_not_slow() {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()).slow_callback(200 * MS));
    s.m.set_stopwatch(Box::new(SlowOn(Callback::Decode, 150 * MS)));
    s.data(b"a\n");
    assert!(slow_errors(&s).is_empty());
    assert_eq!(s.metrics().slow_callbacks, 0);
}

#[test]
fn a_slow_reply_predicate_and_a_slow_resolver_are_named() {
    let mut s = ready_with_heartbeat();
    s.m.set_stopwatch(Box::new(SlowOn(Callback::HeartbeatReply, 300 * MS)));
    s.next_timer();
    s.transmit();
    s.data(b"PONG\n");
    assert_eq!(slow_errors(&s), [(Callback::HeartbeatReply, 300 * MS)]);
    let mut r = Sim::connecting(Sim::builder());
    r.input(Input::CallbackTook {
        callback: Callback::Resolver,
        took: 2000 * MS,
    });
    assert_eq!(slow_errors(&r), [(Callback::Resolver, 2000 * MS)]);
}

#[test]
fn a_zero_slow_callback_threshold_is_refused() {
    let err = Sim::builder()
        .slow_callback(Duration::ZERO)
        .into_config()
        .unwrap_err();
    assert_eq!(
        err,
        crate::error::ConfigError::ZeroDuration {
            name: "slow_callback"
        }
    );
}

/// Lines through a framing of the application's own: its `encode` is application code.
#[derive(Clone)]
struct OwnLines(Lines);

impl crate::framing::Framing for OwnLines {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), crate::error::EncodeError> {
        self.0.encode(frame, dst)
    }

    fn decode(
        &mut self,
        src: &mut bytes::BytesMut,
    ) -> Result<Option<Bytes>, crate::error::DecodeError> {
        self.0.decode(src)
    }
}

#[test]
fn a_batch_through_a_built_in_framing_is_not_timed_as_application_code() {
    let builtin = Sim::ready(Sim::builder().framing(Lines::new()));
    let own = Sim::ready(Sim::builder().framing(OwnLines(Lines::new())));
    let mut slow = Vec::new();
    for mut s in [builtin, own] {
        // Every encode the stopwatch sees takes 132 ms.
        s.m.set_stopwatch(Box::new(SlowOn(Callback::Encode, 132 * MS)));
        s.submit(b"a");
        s.submit(b"b");
        s.transmit();
        assert_eq!(s.written, b"a\nb\n");
        slow.push(slow_errors(&s));
    }
    assert_eq!(slow[0], [], "the built-in framing's batch is not timed");
    assert_eq!(
        slow[1],
        [(Callback::Encode, 132 * MS)],
        "the application's framing is timed, once for the batch"
    );
}
