//! The heartbeat in virtual time.

use super::*;

fn hb(idle_only: bool) -> Heartbeat {
    Heartbeat::new(Duration::from_secs(1), Ping::Raw(b"p".to_vec()))
        .max_missed(2)
        .idle_only(idle_only)
}

#[test]
fn death_comes_interval_times_max_missed_plus_one_after_the_last_byte() {
    let t0 = Instant::now();
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    assert_eq!(h.death_at(), Some(t0 + Duration::from_secs(3)));
    h.on_inbound(t0 + Duration::from_millis(1500));
    assert_eq!(h.death_at(), Some(t0 + Duration::from_millis(4500)));
}

#[test]
fn pings_are_periodic_unless_idle_only() {
    let t0 = Instant::now();
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    h.on_outbound(t0 + Duration::from_millis(900));
    assert_eq!(h.next_ping(), t0 + Duration::from_secs(1));
    let mut idle = HeartbeatState::start(&hb(true), t0, false);
    idle.on_outbound(t0 + Duration::from_millis(900));
    assert_eq!(idle.next_ping(), t0 + Duration::from_millis(1900));
}

#[test]
fn a_ping_after_a_silent_interval_counts_as_missed() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    assert!(!h.on_ping(t0 + s), "the connect itself counts as life");
    assert!(h.on_ping(t0 + 2 * s));
    h.on_inbound(t0 + 2 * s + s / 2);
    assert!(!h.on_ping(t0 + 3 * s));
    // TCP keeps order: the replies come oldest ping first.
    let at = t0 + 3 * s + s / 10;
    assert_eq!(h.on_reply(at), Some(Reply::Rtt(2 * s + s / 10)));
    assert_eq!(h.on_reply(at), Some(Reply::Rtt(s + s / 10)));
    assert_eq!(h.on_reply(at), Some(Reply::Rtt(s / 10)));
    assert_eq!(h.on_reply(at), None, "one reply per ping");
}

#[test]
fn no_verdict_while_paused_and_silence_restarts_on_resume() {
    let t0 = Instant::now();
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    h.set_paused(true, t0 + Duration::from_secs(1));
    assert_eq!(h.death_at(), None);
    h.set_paused(false, t0 + Duration::from_secs(60));
    assert_eq!(h.death_at(), Some(t0 + Duration::from_secs(63)));
}

#[test]
fn after_a_gap_a_due_verdict_becomes_a_ping_now_and_a_full_bound() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    assert!(!h.on_ping(t0 + s));
    // Stopped from 1.2 s to 4.2 s: the verdict was due at 3 s.
    let resume = t0 + 4 * s + s / 5;
    assert!(h.resumed(resume, 3 * s));
    assert_eq!(h.death_at(), Some(resume + 3 * s));
    assert_eq!(h.next_ping(), resume, "a ping at once");
    assert!(
        !h.on_ping(resume),
        "the interval the gap broke is not missed"
    );
    assert_eq!(h.next_ping(), resume + s);
    // The ping sent before the gap is answered first: its round trip is the gap's.
    assert_eq!(h.on_reply(resume + s / 100), Some(Reply::Unmeasured));
    assert_eq!(h.on_reply(resume + s / 100), Some(Reply::Rtt(s / 100)));
}

#[test]
fn after_a_gap_a_verdict_more_than_an_interval_away_stays_where_it_was() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    h.on_inbound(t0 + s);
    // A gap of 0.5 s ending at 1.6 s: the verdict (4 s) is 2.4 s away, more than an interval.
    assert!(!h.resumed(t0 + s + s * 6 / 10, s / 2));
    assert_eq!(h.death_at(), Some(t0 + 4 * s));
}

#[test]
fn a_dead_peer_is_still_found_one_bound_after_the_gap() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    let resume = t0 + 10 * s;
    assert!(h.resumed(resume, 10 * s));
    // Nothing arrives: the next gap-free verdict comes one bound after the resume.
    assert_eq!(h.death_at(), Some(resume + 3 * s));
    assert!(
        !h.resumed(resume + s, Duration::ZERO),
        "no gap, no new chance"
    );
    assert_eq!(h.death_at(), Some(resume + 3 * s));
}

#[test]
fn replies_match_the_oldest_of_the_last_eight_pings_in_order() {
    let t0 = Instant::now();
    let mut h = HeartbeatState::start(&hb(false), t0, false);
    let at = |i: u64| t0 + Duration::from_secs(i);
    // Ten pings unanswered: the two oldest are forgotten.
    for i in 1..=10 {
        h.on_ping(at(i));
    }
    let now = at(20);
    for i in 3..=10 {
        assert_eq!(h.on_reply(now), Some(Reply::Rtt(now - at(i))), "ping {i}");
    }
    assert_eq!(h.on_reply(now), None, "no ping left unanswered");
    // The ring carries on around its end.
    h.on_ping(at(21));
    h.on_ping(at(22));
    assert_eq!(h.on_reply(at(23)), Some(Reply::Rtt(Duration::from_secs(2))));
    assert_eq!(h.on_reply(at(23)), Some(Reply::Rtt(Duration::from_secs(1))));
    assert_eq!(h.on_reply(at(23)), None);
}
