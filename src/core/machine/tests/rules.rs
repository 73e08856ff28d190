//! The rules around the transition table: stale and unmatched inputs, the terminal state,
//! the seeded backoff, the order and batching of frames, the outbox's limits, the endpoints'
//! turns, name lookups and the outage's log lines.

use super::*;

#[test]
fn an_input_with_no_row_is_ignored_and_counted() {
    let mut s = Sim::ready(Sim::builder());
    let before = s.events.len();
    s.input(Input::ReconnectNow);
    assert_eq!(s.events.len(), before);
    assert_eq!(s.m.state(), Ready);
    assert_eq!(s.metrics().ignored_inputs, 1);
}

#[test]
fn stale_inputs_from_an_earlier_dial_are_dropped() {
    let mut s = Sim::backoff(Sim::builder());
    let old = s.connects[0].0;
    s.next_timer();
    s.input(Input::Connected { generation: old });
    assert_eq!(s.m.state(), Connecting);
    s.input(Input::ConnectFailed { generation: old });
    assert_eq!(s.m.state(), Connecting);
    s.m.handle_data(s.now, old, b"late bytes");
    assert_eq!(s.metrics().ignored_inputs, 3);
}

#[test]
fn closed_is_terminal() {
    let mut s = Sim::ready(Sim::builder());
    let deadline = s.now;
    s.input(Input::Close { deadline });
    s.input(Input::Start);
    s.input(Input::ReconnectNow);
    s.tcp_up();
    s.advance(100_000 * MS);
    assert_eq!(s.m.state(), Closed);
    assert_eq!(s.m.poll_timeout(), None, "no timer survives close");
}

#[test]
fn a_fixed_seed_gives_an_exact_delay_sequence() {
    let run = || {
        let mut s = Sim::connecting(Sim::builder());
        for _ in 0..6 {
            s.refuse();
            s.next_timer();
        }
        s.delays()
    };
    let first = run();
    assert_eq!(first, run());
    let ms: Vec<u128> = first.iter().map(|d| d.as_millis()).collect();
    assert_eq!(ms, [3, 61, 57, 434, 435, 3043]);
}

#[test]
fn frames_reach_the_socket_only_while_ready_and_in_order() {
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()));
    s.submit(b"1");
    s.submit(b"2");
    s.transmit();
    assert!(s.written.is_empty());
    s.tcp_up();
    s.submit(b"3");
    s.transmit();
    assert_eq!(s.written, b"1\n2\n3\n");
    assert_eq!(s.metrics().frames_sent, 3);
}

#[test]
fn small_frames_are_coalesced_into_one_write() {
    let mut s = Sim::ready(Sim::builder().framing(LengthDelimited::len32()));
    for i in 0..100u8 {
        s.submit(&[i; 10]);
    }
    let mut buf = Vec::new();
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(buf.len(), 100 * 14, "one batch holds all of them");
}

#[test]
fn a_refused_batch_is_offered_again_in_the_same_order() {
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()));
    s.submit(b"a");
    s.submit(b"b");
    let mut buf = Vec::new();
    assert!(s.m.poll_transmit(s.now, &mut buf));
    s.m.transmit_done(s.now, TxResult::WouldBlock);
    assert!(!s.m.poll_transmit(s.now, &mut buf), "waits before retrying");
    s.now += 2 * MS;
    assert!(s.m.poll_transmit(s.now, &mut buf));
    assert_eq!(buf, b"a\nb\n");
}

#[test]
fn queued_frames_expire_while_offline() {
    let mut s = Sim::backoff(Sim::builder().reconnect(|r| {
        r.backoff_base = 60_000 * MS;
        r.backoff_max = 60_000 * MS;
    }));
    let deadline = Some(s.now + 500 * MS);
    s.input(Input::Submit {
        frame: bytes::Bytes::from_static(b"old"),
        deadline,
    });
    s.submit(b"keep");
    s.next_timer();
    assert_eq!(s.abandoned(), [(b"old".to_vec(), AbandonReason::Expired)]);
    assert_eq!(s.metrics().outbox_frames, 1);
}

#[test]
fn drop_oldest_trims_the_outbox_to_its_limit() {
    let b = Sim::builder().delivery(|d| {
        d.outbox_frames = 2;
        d.outbox_bytes = 1000;
        d.overflow = Overflow::DropOldest;
    });
    let mut s = Sim::backoff(b);
    for f in [b"1", b"2", b"3"] {
        s.submit(f);
    }
    assert_eq!(s.abandoned(), [(b"1".to_vec(), AbandonReason::Overflow)]);
    assert_eq!(s.metrics().unaccounted(), 0);
}

#[test]
fn frames_queued_at_a_drop_are_abandoned_when_asked() {
    let mut s = Sim::ready(Sim::builder().delivery(|d| d.abandon_on_disconnect = true));
    s.submit(b"x");
    s.tcp_down();
    assert_eq!(
        s.abandoned(),
        [(b"x".to_vec(), AbandonReason::ConnectionLost)]
    );
}

#[test]
fn each_attempt_goes_to_the_next_endpoint() {
    let b = Builder::new("tcp://127.0.0.1:1")
        .endpoint("tcp://127.0.0.1:2")
        .endpoint("tcp://127.0.0.1:3")
        .reconnect(|r| r.native_retries = 0);
    let mut s = Sim::connecting(b);
    for _ in 0..5 {
        s.refuse();
        s.next_timer();
    }
    let ports: Vec<u16> = s.connects.iter().map(|c| c.1.port()).collect();
    assert_eq!(ports.len(), 6);
    for w in ports.windows(3) {
        let mut seen = w.to_vec();
        seen.sort();
        assert_eq!(
            seen,
            [1, 2, 3],
            "a full sweep every three attempts: {ports:?}"
        );
    }
    assert_eq!(
        s.delays().len(),
        5,
        "a jittered delay between every attempt"
    );
}

#[test]
fn every_address_of_a_name_gets_its_turn() {
    let mut s =
        Sim::connecting(Builder::new("tcp://localhost:7000").reconnect(|r| r.native_retries = 0));
    let a: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let b: SocketAddr = "[::1]:7000".parse().unwrap();
    for _ in 0..2 {
        let generation = s.gen();
        s.input(Input::Resolved {
            generation,
            result: Ok(vec![a, b]),
        });
        s.refuse();
        s.next_timer();
    }
    let dialled: Vec<SocketAddr> = s.connects.iter().map(|c| c.1).collect();
    assert_eq!(dialled, [a, b]);
}

#[test]
fn a_name_is_resolved_again_in_the_background_and_the_next_dial_uses_the_new_answer() {
    let b = Builder::new("tcp://db.example:7000").reconnect(|r| {
        r.native_retries = 0;
        r.dns_refresh = 10_000 * MS;
        r.min_stable = Duration::ZERO;
    });
    let mut s = Sim::connecting(b);
    let old: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let new: SocketAddr = "10.0.0.2:7000".parse().unwrap();
    let generation = s.gen();
    s.input(Input::Resolved {
        generation,
        result: Ok(vec![old]),
    });
    s.tcp_up();
    s.advance(10_000 * MS);
    assert_eq!(
        s.refreshes,
        [0],
        "asked again after dns_refresh, while Ready"
    );
    assert_eq!(s.m.state(), Ready, "a refresh changes no state");
    s.input(Input::Refreshed {
        endpoint: 0,
        result: Ok(vec![new]),
    });
    s.tcp_down();
    s.next_timer();
    assert_eq!(s.resolves.len(), 1, "the refreshed answer is in the cache");
    assert_eq!(s.connects.last().map(|c| c.1), Some(new));
}

#[test]
fn a_long_outage_warns_a_handful_of_times_not_once_per_retry() {
    let logs = capture::install();
    // A 60 s outage at one retry per second.
    let b = Sim::builder().reconnect(|r| {
        r.backoff_base = 1000 * MS;
        r.backoff_max = 1000 * MS;
        r.jitter = Jitter::None;
    });
    let mut s = Sim::connecting(b);
    let start = s.now;
    let mut retries = 0;
    while s.now - start < 60_000 * MS {
        s.refuse();
        s.next_timer();
        retries += 1;
    }
    let warns = capture::lines(logs, log::Level::Warn);
    let infos = capture::lines(logs, log::Level::Info);
    let debugs = capture::lines(logs, log::Level::Debug);
    assert_eq!(retries, 60);
    // Warned at 10 s, 20 s and 40 s of outage.
    assert_eq!(warns.len(), 3, "{warns:#?}");
    assert!(warns[0].contains("no connection for 10s"), "{}", warns[0]);
    assert_eq!(infos.len(), 1 + 2 * 60, "one info line per state change");
    assert!(
        debugs
            .iter()
            .filter(|l| l.contains("attempt failed"))
            .count()
            == 60
    );
    // Back again: one line says so.
    s.tcp_up();
    let warns = capture::lines(logs, log::Level::Warn);
    assert_eq!(warns.len(), 4);
    assert!(
        warns[3].contains("connected again after 60s"),
        "{}",
        warns[3]
    );
}

#[test]
fn entering_cooldown_warns_once() {
    let logs = capture::install();
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| r.max_attempts = Some(2)));
    s.refuse();
    s.next_timer();
    s.refuse();
    assert_eq!(s.m.state(), Cooldown);
    let warns = capture::lines(logs, log::Level::Warn);
    assert_eq!(warns.len(), 1);
    assert!(warns[0].contains("cooling down"), "{}", warns[0]);
}
