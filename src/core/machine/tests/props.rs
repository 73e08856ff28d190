//! Invariants over random input sequences.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Up,
    Down,
    Refuse,
    Data(u8),
    Timer,
    Advance(u16),
    Reconnect,
    Submit,
    Stale,
    Close,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Up),
        3 => Just(Step::Down),
        4 => Just(Step::Refuse),
        2 => any::<u8>().prop_map(Step::Data),
        6 => Just(Step::Timer),
        2 => any::<u16>().prop_map(Step::Advance),
        1 => Just(Step::Reconnect),
        2 => Just(Step::Submit),
        1 => Just(Step::Stale),
        1 => Just(Step::Close),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn the_machine_keeps_its_invariants(
        steps in proptest::collection::vec(step(), 1..80),
        native in 0u32..3,
        max_attempts in proptest::option::of(1u32..6),
        jitter in prop_oneof![
            Just(Jitter::Full), Just(Jitter::None),
            Just(Jitter::Decorrelated), Just(Jitter::Proportional(0.3))
        ],
    ) {
        let mut b = Sim::builder()
            .reconnect(|r| {
                r.native_retries = native;
                r.jitter = jitter;
            })
            .ready_when(ProofOfLife::Inbound)
            .heartbeat(Heartbeat::new(500 * MS, Ping::Raw(b"p".to_vec())));
        if let Some(m) = max_attempts {
            b = b.reconnect(|r| { r.max_attempts = Some(m); r.cooldown = 30_000 * MS; });
        }
        let mut s = Sim::connecting(b);
        let ceiling = crate::core::backoff::Backoff::new(s.m.cfg.backoff.clone()).ceiling();
        let floor = s.m.cfg.backoff.floor;
        let mut in_flight = 1i32;
        let mut seen_connects = s.connects.len();
        let mut seen_disconnects = 0;
        let mut closed = false;
        for st in steps {
            let failures_before = s.metrics().consecutive_failures;
            let attempt_before = s.metrics().attempt;
            let was_ready = s.m.state() == Ready;
            let events_before = s.events.len();
            match st {
                Step::Up => s.tcp_up(),
                Step::Down => s.tcp_down(),
                Step::Refuse => s.refuse(),
                Step::Data(n) => s.data(&vec![b'x'; n as usize + 1]),
                Step::Timer => { if s.m.poll_timeout().is_some() { s.next_timer(); } }
                Step::Advance(ms) => s.advance(Duration::from_millis(ms as u64)),
                Step::Reconnect => s.input(Input::ReconnectNow),
                Step::Submit => s.submit(b"f"),
                Step::Stale => {
                    let g = s.gen().wrapping_sub(1);
                    s.input(Input::Connected { generation: g });
                }
                Step::Close => {
                    let deadline = s.now + 1000 * MS;
                    s.input(Input::Close { deadline });
                }
            }
            s.transmit();
            // At most one connection attempt in flight: every new dial follows a teardown.
            in_flight += (s.connects.len() - seen_connects) as i32;
            in_flight -= (s.disconnects - seen_disconnects) as i32;
            in_flight = in_flight.max(0);
            prop_assert!(in_flight <= 1, "two dials in flight");
            seen_connects = s.connects.len();
            seen_disconnects = s.disconnects;
            // The retry timer is armed exactly in Backoff and Cooldown.
            let retry_armed = s.m.timers.at(Timer::Retry).is_some();
            prop_assert_eq!(retry_armed, matches!(s.m.state(), Backoff | Cooldown));
            // Every delay is within [floor, max × (1 + jitter)] (cooldown aside).
            let mut min_attempt = if was_ready { 0 } else { attempt_before };
            for e in &s.events[events_before..] {
                if let Event::State(t) = e {
                    if t.from == Ready || t.to == Ready {
                        min_attempt = 0;
                    }
                    if t.to == Backoff {
                        let d = t.next_retry.expect("a delay");
                        prop_assert!(d >= floor && d <= ceiling, "delay {:?}", d);
                    }
                    // The counter resets only on Ready (after min_stable).
                    prop_assert!(t.attempt >= min_attempt, "counter went down outside Ready");
                    min_attempt = t.attempt;
                }
            }
            // A reset needs a Ready connection during this step.
            let failures_after = s.metrics().consecutive_failures;
            let became_ready = s.events[events_before..]
                .iter()
                .any(|e| matches!(e, Event::State(t) if t.to == Ready));
            if failures_after < failures_before {
                prop_assert!(was_ready || became_ready || s.m.state() == Ready);
            }
            if closed {
                prop_assert_eq!(s.m.state(), Closed);
            }
            closed = s.m.state() == Closed;
            prop_assert_eq!(s.metrics().unaccounted(), 0);
        }
    }
}
