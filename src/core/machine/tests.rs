//! The state machine in virtual time: one test per row of the transition table, then the
//! invariants over random input sequences. Nothing here sleeps or opens a socket.

use super::*;
use crate::core::backoff::Jitter;
use crate::core::heartbeat::{Heartbeat, Ping};
use crate::core::predicate::Predicate;
use crate::core::settings::ProofOfLife;
use crate::framing::{LengthDelimited, Lines};
use crate::metrics::Metrics;
use crate::{Builder, Overflow};

const MS: Duration = Duration::from_millis(1);

/// Drives a machine in virtual time and records what it does.
struct Sim {
    m: Machine,
    now: Instant,
    events: Vec<Event>,
    connects: Vec<(u64, SocketAddr)>,
    resolves: Vec<(u64, String)>,
    refreshes: Vec<usize>,
    disconnects: usize,
    stopped: bool,
    written: Vec<u8>,
    answers: Vec<(Token, Outcome)>,
    /// The peer's TCP acknowledges every byte as soon as it is written.
    auto_ack: bool,
}

impl Sim {
    fn with(b: Builder) -> Sim {
        let cfg = b.rng_seed(7).into_config().expect("valid config");
        let now = Instant::now();
        Sim {
            m: Machine::new(cfg.core, 7, now),
            now,
            events: Vec::new(),
            connects: Vec::new(),
            resolves: Vec::new(),
            refreshes: Vec::new(),
            disconnects: 0,
            stopped: false,
            written: Vec::new(),
            answers: Vec::new(),
            auto_ack: true,
        }
    }

    fn builder() -> Builder {
        Builder::new("tcp://127.0.0.1:7000")
            .native_retries(0)
            .backoff(100 * MS, 10_000 * MS)
            .backoff_floor(MS)
    }

    // --- scenarios: a machine already in the state a test is about -------------------------

    fn connecting(b: Builder) -> Sim {
        let mut s = Sim::with(b);
        s.input(Input::Start);
        s
    }

    fn ready(b: Builder) -> Sim {
        let mut s = Sim::connecting(b);
        s.tcp_up();
        assert_eq!(s.m.state(), State::Ready);
        s
    }

    fn backoff(b: Builder) -> Sim {
        let mut s = Sim::connecting(b);
        s.refuse();
        assert_eq!(s.m.state(), State::Backoff);
        s
    }

    // --- inputs --------------------------------------------------------------------------

    fn input(&mut self, i: Input) {
        self.m.handle_input(self.now, i);
        self.drain();
    }

    fn gen(&self) -> u64 {
        let c = self.connects.last().map(|c| c.0);
        let r = self.resolves.last().map(|r| r.0);
        c.max(r).expect("a dial happened")
    }

    fn tcp_up(&mut self) {
        let generation = self.gen();
        self.input(Input::Connected { generation });
    }

    fn tcp_down(&mut self) {
        let generation = self.gen();
        self.input(Input::Disconnected { generation });
    }

    fn refuse(&mut self) {
        let generation = self.gen();
        self.input(Input::ConnectFailed { generation });
    }

    fn data(&mut self, bytes: &[u8]) {
        let g = self.gen();
        self.m.handle_data(self.now, g, bytes);
        self.drain();
    }

    fn submit(&mut self, frame: &[u8]) {
        self.input(Input::Submit {
            frame: bytes::Bytes::copy_from_slice(frame),
            deadline: None,
        });
    }

    /// Jumps to the machine's next deadline and fires it.
    fn next_timer(&mut self) -> Duration {
        let t = self.m.poll_timeout().expect("a timer is armed");
        let waited = t.saturating_duration_since(self.now);
        self.now = self.now.max(t);
        self.m.handle_timeout(self.now);
        self.drain();
        waited
    }

    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(t) = self.m.poll_timeout() {
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            self.m.handle_timeout(self.now);
            self.drain();
        }
        self.now = end;
        self.m.handle_timeout(self.now);
        self.drain();
    }

    /// Writes what the machine offers, as the IO thread does.
    fn transmit(&mut self) {
        let mut buf = Vec::new();
        while self.m.poll_transmit(self.now, &mut buf) {
            self.written.extend_from_slice(&buf);
            self.m.transmit_done(self.now, TxResult::Sent);
            self.drain();
            if self.auto_ack {
                self.ack(self.m.window.written());
            }
        }
    }

    /// The peer's TCP acknowledged `bytes` bytes of the current connection.
    fn ack(&mut self, bytes: u64) {
        let generation = self.m.generation;
        self.input(Input::Acked {
            generation,
            bytes: Some(bytes),
        });
    }

    fn drain(&mut self) {
        while let Some(a) = self.m.poll_action() {
            match a {
                Action::Emit(e) => self.events.push(e),
                Action::Connect { generation, addr } => self.connects.push((generation, addr)),
                Action::Resolve {
                    generation, host, ..
                } => self.resolves.push((generation, host)),
                Action::Refresh { endpoint, .. } => self.refreshes.push(endpoint),
                Action::Send(bytes) => self.written.extend_from_slice(&bytes),
                Action::Disconnect => self.disconnects += 1,
                Action::Stop => self.stopped = true,
                Action::Answer(token, outcome) => self.answers.push((token, outcome)),
            }
        }
    }

    // --- observations ----------------------------------------------------------------------

    fn transitions(&self) -> Vec<(State, State, Cause)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::State(t) => Some((t.from, t.to, t.cause)),
                _ => None,
            })
            .collect()
    }

    fn last_transition(&self) -> Transition {
        self.events
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::State(t) => Some(t.clone()),
                _ => None,
            })
            .expect("a transition happened")
    }

    fn delays(&self) -> Vec<Duration> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::State(t) => t.next_retry,
                _ => None,
            })
            .collect()
    }

    fn abandoned(&self) -> Vec<(Vec<u8>, AbandonReason)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Abandoned { frame, reason } => Some((frame.to_vec(), *reason)),
                _ => None,
            })
            .collect()
    }

    fn frames(&self) -> Vec<Vec<u8>> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Frame(f) => Some(f.to_vec()),
                _ => None,
            })
            .collect()
    }

    fn metrics(&self) -> Metrics {
        self.m.metrics(self.now)
    }
}

use State::*;

mod connection;
mod pause;
mod requests;
mod tls;
mod window;

// --- one test per row ---------------------------------------------------------------------

#[test]
fn row1_start_dials_the_endpoint() {
    let s = Sim::connecting(Sim::builder());
    assert_eq!(s.transitions(), [(Idle, Connecting, Cause::Start)]);
    assert_eq!(s.connects.len(), 1);
    assert_eq!(s.connects[0].1, "127.0.0.1:7000".parse().unwrap());
}

#[test]
fn row2_a_resolved_name_is_dialled_by_address() {
    let mut s = Sim::connecting(Builder::new("tcp://db.example:7000").native_retries(0));
    assert_eq!(s.resolves.len(), 1);
    assert!(s.connects.is_empty(), "libzmq is never given a name");
    let generation = s.gen();
    let addrs = vec![
        "10.0.0.1:7000".parse().unwrap(),
        "[::1]:7000".parse().unwrap(),
    ];
    s.input(Input::Resolved {
        generation,
        result: Ok(addrs),
    });
    assert_eq!(s.connects.len(), 1);
    assert_eq!(s.connects[0].1, "10.0.0.1:7000".parse().unwrap());
    assert_eq!(s.m.state(), Connecting);
}

#[test]
fn row3_a_name_that_does_not_resolve_backs_off_with_cause_dns() {
    let mut s = Sim::connecting(Builder::new("tcp://nowhere.invalid:1").native_retries(0));
    let generation = s.gen();
    s.input(Input::Resolved {
        generation,
        result: Err("no such host".into()),
    });
    assert_eq!(s.last_transition().cause, Cause::Dns);
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.metrics().consecutive_failures, 1);
}

#[test]
fn row4_the_tcp_connect_makes_the_link_ready_when_it_is_the_proof() {
    let s = Sim::ready(Sim::builder());
    assert_eq!(
        &s.transitions()[1..],
        [
            (Connecting, Connected, Cause::TcpConnected),
            (Connected, Ready, Cause::Alive)
        ]
    );
}

#[test]
fn row4_the_tcp_connect_alone_leaves_the_link_connected_when_proof_is_inbound() {
    let mut s = Sim::connecting(Sim::builder().ready_when(ProofOfLife::Inbound));
    s.tcp_up();
    assert_eq!(s.m.state(), Connected);
}

#[test]
fn row5_a_refused_dial_with_native_redials_left_stays_connecting() {
    let mut s = Sim::connecting(Sim::builder().native_retries(2));
    s.refuse();
    s.refuse();
    assert_eq!(s.m.state(), Connecting);
    assert_eq!(s.disconnects, 0, "libzmq keeps redialling");
    assert_eq!(s.metrics().consecutive_failures, 2);
    s.refuse();
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.disconnects, 1);
}

#[test]
fn native_redials_are_spent_once_per_outage_not_once_per_dial() {
    let mut s = Sim::connecting(Sim::builder().native_retries(1));
    s.refuse();
    assert_eq!(s.m.state(), Connecting, "libzmq's fast redial");
    s.refuse();
    assert_eq!(s.m.state(), Backoff);
    s.next_timer();
    s.refuse();
    assert_eq!(
        s.m.state(),
        Backoff,
        "no second native redial in the same outage"
    );
    s.next_timer();
    s.tcp_up();
    s.advance(1000 * MS);
    s.tcp_down();
    s.next_timer();
    s.refuse();
    assert_eq!(
        s.m.state(),
        Connecting,
        "a new outage gets its fast redial again"
    );
}

#[test]
fn row6_a_refused_dial_without_native_redials_stops_libzmq_and_backs_off() {
    let mut s = Sim::connecting(Sim::builder());
    s.refuse();
    assert_eq!(s.disconnects, 1);
    assert_eq!(s.last_transition().cause, Cause::Refused);
    assert_eq!(s.m.state(), Backoff);
}

#[test]
fn row7_a_dial_that_hangs_times_out() {
    let mut s = Sim::connecting(Sim::builder().connect_timeout(2000 * MS));
    let waited = s.next_timer();
    assert!(waited >= 2000 * MS, "{waited:?}");
    assert_eq!(s.last_transition().cause, Cause::ConnectTimeout);
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.disconnects, 1);
}

#[test]
fn row6_a_dial_libzmq_gave_up_on_after_the_connect_timeout_is_reported_as_a_timeout() {
    let mut s = Sim::connecting(Sim::builder().connect_timeout(2000 * MS));
    s.advance(2000 * MS);
    assert_eq!(
        s.m.state(),
        Connecting,
        "relink's own bound is a little later"
    );
    s.refuse();
    assert_eq!(s.last_transition().cause, Cause::ConnectTimeout);
}

#[test]
fn row8_the_first_inbound_bytes_make_the_link_ready() {
    let mut s = Sim::connecting(Sim::builder().ready_when(ProofOfLife::Inbound));
    s.tcp_up();
    s.data(b"hi");
    assert_eq!(s.m.state(), Ready);
    assert_eq!(
        s.frames(),
        [b"hi".to_vec()],
        "the bytes are still delivered"
    );
}

#[test]
fn row8_an_accepted_handshake_reply_makes_the_link_ready_and_is_not_delivered() {
    let hs = ProofOfLife::handshake(vec![b"HELLO".to_vec()], |f| f == b"OK");
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).ready_when(hs));
    s.submit(b"queued");
    s.tcp_up();
    s.transmit();
    assert_eq!(s.written, b"HELLO\n", "only the hello before the reply");
    s.data(b"OK\n");
    assert_eq!(s.m.state(), Ready);
    s.transmit();
    assert_eq!(s.written, b"HELLO\nqueued\n");
    assert!(s.frames().is_empty());
}

#[test]
fn row9_a_missing_handshake_reply_is_a_failure() {
    let hs = ProofOfLife::handshake(vec![b"HELLO".to_vec()], |f| f == b"OK");
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).ready_when(hs));
    s.tcp_up();
    s.next_timer();
    assert_eq!(s.last_transition().cause, Cause::HandshakeTimeout);
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.metrics().consecutive_failures, 1);
}

#[test]
fn row10_a_drop_before_ready_is_a_failure_followed_by_a_backoff() {
    let mut s = Sim::connecting(Sim::builder().ready_when(ProofOfLife::Inbound));
    s.tcp_up();
    s.tcp_down();
    assert_eq!(s.last_transition().cause, Cause::PeerClosed);
    assert_eq!(s.m.state(), Backoff, "never an immediate redial");
    assert_eq!(s.connects.len(), 1);
}

#[test]
fn down_for_counts_from_losing_ready_and_ends_at_ready_again() {
    let mut s = Sim::ready(Sim::builder());
    assert_eq!(s.metrics().down_for, None);
    s.tcp_down();
    s.advance(700 * MS);
    let down = s.metrics().down_for.expect("down since the drop");
    assert!(down >= 700 * MS, "{down:?}");
    while s.m.state() != Connecting {
        s.next_timer();
    }
    s.tcp_up();
    assert_eq!(s.m.state(), Ready);
    assert_eq!(s.metrics().down_for, None);
}

#[test]
fn row10_a_drop_from_ready_backs_off_and_counts_the_outage() {
    let mut s = Sim::ready(Sim::builder());
    s.advance(5000 * MS);
    s.tcp_down();
    assert_eq!(s.m.state(), Backoff);
    s.next_timer();
    s.tcp_up();
    let m = s.metrics();
    assert_eq!(m.reconnects, 1);
    assert!(m.last_outage.is_some());
}

#[test]
fn row11_a_silent_peer_is_declared_dead_within_the_bound() {
    let hb = Heartbeat::new(1000 * MS, Ping::Raw(b"p".to_vec())).max_missed(2);
    let mut s = Sim::ready(Sim::builder().heartbeat(hb));
    let ready_at = s.now;
    while s.m.state() == Ready {
        s.next_timer();
        s.transmit();
    }
    assert_eq!(s.last_transition().cause, Cause::HeartbeatTimeout);
    assert_eq!(s.now - ready_at, 3000 * MS);
    assert_eq!(s.written, b"pp", "pings at 1 s and 2 s");
    assert_eq!(s.disconnects, 1, "relink closes the connection itself");
    let m = s.metrics();
    assert_eq!(m.heartbeats_sent, 2);
    assert_eq!(
        m.heartbeats_missed, 2,
        "max_missed silent intervals at the verdict"
    );
}

#[test]
fn row11_a_peer_that_answers_is_never_declared_dead() {
    let hb = Heartbeat::new(1000 * MS, Ping::Raw(b"p\n".to_vec()))
        .max_missed(1)
        .reply(Predicate::new(|f| f == b"P"));
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()).heartbeat(hb));
    for _ in 0..100 {
        s.next_timer();
        s.transmit();
        s.now += 10 * MS;
        s.data(b"P\n");
    }
    assert_eq!(s.m.state(), Ready);
    assert_eq!(s.metrics().last_rtt, Some(10 * MS));
    assert!(s.frames().is_empty(), "recognised replies are swallowed");
}

#[test]
fn a_frame_like_the_heartbeat_reply_is_delivered_when_no_ping_awaits_it() {
    let hb =
        Heartbeat::new(1000 * MS, Ping::Raw(b"p\n".to_vec())).reply(Predicate::new(|f| f == b"P"));
    let mut s = Sim::ready(Sim::builder().framing(Lines::new()).heartbeat(hb));
    s.data(b"P\n");
    assert_eq!(s.frames(), [b"P".to_vec()], "the application's own answer");
    s.next_timer();
    s.transmit();
    s.data(b"P\n");
    assert_eq!(s.frames().len(), 1, "the answer to our ping is swallowed");
}

#[test]
fn row12_a_peer_that_breaks_the_framing_gets_its_connection_reset() {
    let mut s = Sim::ready(
        Sim::builder().framing(
            LengthDelimited::builder()
                .max_frame_length(16)
                .build()
                .unwrap(),
        ),
    );
    s.data(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(s.last_transition().cause, Cause::Protocol);
    assert!(s
        .events
        .iter()
        .any(|e| matches!(e, Event::Error(LinkError::Decode(_)))));
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.disconnects, 1);
}

#[test]
fn row13_an_unroutable_send_is_a_failure() {
    let mut s = Sim::ready(Sim::builder());
    s.submit(b"x");
    let mut buf = Vec::new();
    assert!(s.m.poll_transmit(s.now, &mut buf));
    s.m.transmit_done(s.now, TxResult::Unreachable);
    s.drain();
    assert_eq!(s.last_transition().cause, Cause::Unreachable);
    assert_eq!(
        s.metrics().outbox_frames,
        1,
        "the frame waits for the next connection"
    );
}

#[test]
fn row14_the_attempt_counter_resets_only_after_min_stable() {
    let mut s = Sim::backoff(Sim::builder());
    s.next_timer();
    s.refuse();
    s.next_timer();
    s.tcp_up();
    assert_eq!(s.m.state(), Ready);
    assert_eq!(
        s.metrics().consecutive_failures,
        2,
        "not on the TCP connect alone"
    );
    s.advance(1000 * MS);
    assert_eq!(s.metrics().consecutive_failures, 0);
}

#[test]
fn backoff_never_resets_on_tcp_connect_alone() {
    // An accept-then-close server: every connection drops before min_stable.
    let mut s = Sim::connecting(Sim::builder().backoff_factor(2.0).jitter(Jitter::None));
    for _ in 0..6 {
        s.tcp_up();
        s.tcp_down();
        s.next_timer();
    }
    assert_eq!(
        s.delays(),
        [100, 200, 400, 800, 1600, 3200].map(|n| n * MS),
        "gaps grow"
    );
}

#[test]
fn row15_the_retry_timer_dials_again() {
    let mut s = Sim::backoff(Sim::builder());
    s.next_timer();
    assert_eq!(s.last_transition().cause, Cause::RetryTimer);
    assert_eq!(s.m.state(), Connecting);
    assert_eq!(s.connects.len(), 2);
    assert_ne!(
        s.connects[0].0, s.connects[1].0,
        "a new generation per dial"
    );
}

#[test]
fn row16_max_attempts_leads_to_cooldown_which_probes_again() {
    let mut s = Sim::connecting(Sim::builder().max_attempts(3).cooldown(60_000 * MS));
    for _ in 0..2 {
        s.refuse();
        s.next_timer();
    }
    s.refuse();
    assert_eq!(s.m.state(), Cooldown);
    assert_eq!(s.last_transition().next_retry, Some(60_000 * MS));
    assert_eq!(s.next_timer(), 60_000 * MS);
    assert_eq!(s.last_transition().cause, Cause::CooldownOver);
    s.refuse();
    assert_eq!(s.m.state(), Cooldown, "a failed probe rests again");
    s.next_timer();
    s.tcp_up();
    assert_eq!(s.m.state(), Ready);
}

#[test]
fn row17_reconnect_now_cuts_backoff_short_and_keeps_the_counter() {
    let mut s = Sim::backoff(Sim::builder());
    s.input(Input::ReconnectNow);
    assert_eq!(s.last_transition().cause, Cause::ReconnectNow);
    assert_eq!(s.m.state(), Connecting);
    assert_eq!(s.metrics().consecutive_failures, 1);
}

#[test]
fn row17_reconnect_now_cuts_cooldown_short() {
    let mut s = Sim::connecting(Sim::builder().max_attempts(1));
    s.refuse();
    assert_eq!(s.m.state(), Cooldown);
    s.input(Input::ReconnectNow);
    assert_eq!(s.m.state(), Connecting);
    assert_eq!(s.metrics().consecutive_failures, 1);
}

#[test]
fn row18_close_with_nothing_queued_closes_at_once() {
    let mut s = Sim::ready(Sim::builder());
    let deadline = s.now + 1000 * MS;
    s.input(Input::Close { deadline });
    assert_eq!(s.m.state(), Closed);
    assert!(s.stopped);
    assert_eq!(s.disconnects, 1);
}

#[test]
fn row19_and_20_close_flushes_queued_frames_then_closes() {
    let mut s = Sim::backoff(Sim::builder());
    s.submit(b"a");
    s.submit(b"b");
    let deadline = s.now + 10_000 * MS;
    s.input(Input::Close { deadline });
    assert_eq!(s.m.state(), Backoff, "still trying, to flush");
    s.next_timer();
    s.tcp_up();
    s.transmit();
    assert_eq!(s.written, b"ab");
    assert_eq!(s.m.state(), Closed);
    assert!(s.abandoned().is_empty());
}

#[test]
fn row21_the_close_deadline_abandons_what_is_left_as_shutdown() {
    let mut s = Sim::connecting(Sim::builder().backoff(60_000 * MS, 60_000 * MS));
    s.submit(b"a");
    s.submit(b"b");
    s.refuse();
    let deadline = s.now + 500 * MS;
    s.input(Input::Close { deadline });
    s.next_timer();
    assert_eq!(s.m.state(), Closed);
    assert_eq!(
        s.abandoned(),
        [
            (b"a".to_vec(), AbandonReason::Shutdown),
            (b"b".to_vec(), AbandonReason::Shutdown)
        ]
    );
    assert_eq!(s.metrics().unaccounted(), 0);
}

// --- the rules around the table ----------------------------------------------------------

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
    let mut s = Sim::backoff(Sim::builder().backoff(60_000 * MS, 60_000 * MS));
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
    let b = Sim::builder()
        .outbox_limits(2, 1000)
        .overflow(Overflow::DropOldest);
    let mut s = Sim::backoff(b);
    for f in [b"1", b"2", b"3"] {
        s.submit(f);
    }
    assert_eq!(s.abandoned(), [(b"1".to_vec(), AbandonReason::Overflow)]);
    assert_eq!(s.metrics().unaccounted(), 0);
}

#[test]
fn frames_queued_at_a_drop_are_abandoned_when_asked() {
    let mut s = Sim::ready(Sim::builder().abandon_on_disconnect(true));
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
        .native_retries(0);
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
    let mut s = Sim::connecting(Builder::new("tcp://localhost:7000").native_retries(0));
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

/// A logger that keeps every record, tagged with the thread that logged it, so that a test
/// can read its own lines while other tests run.
mod capture {
    use std::sync::{Mutex, OnceLock};
    use std::thread::ThreadId;

    pub struct Capture(Mutex<Vec<(ThreadId, log::Level, String)>>);

    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, r: &log::Record) {
            let line = (std::thread::current().id(), r.level(), r.args().to_string());
            self.0.lock().unwrap().push(line);
        }
        fn flush(&self) {}
    }

    pub fn install() -> &'static Capture {
        static LOGGER: OnceLock<&'static Capture> = OnceLock::new();
        LOGGER.get_or_init(|| {
            let logger: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
            log::set_logger(logger).expect("no other logger in unit tests");
            log::set_max_level(log::LevelFilter::Trace);
            logger
        })
    }

    /// This thread's lines at `level`.
    pub fn lines(c: &Capture, level: log::Level) -> Vec<String> {
        let me = std::thread::current().id();
        let all = c.0.lock().unwrap();
        all.iter()
            .filter(|(t, l, _)| *t == me && *l == level)
            .map(|(_, _, m)| m.clone())
            .collect()
    }
}

#[test]
fn a_name_is_resolved_again_in_the_background_and_the_next_dial_uses_the_new_answer() {
    let b = Builder::new("tcp://db.example:7000")
        .native_retries(0)
        .dns_refresh(10_000 * MS)
        .min_stable(Duration::ZERO);
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
    let b = Sim::builder()
        .backoff(1000 * MS, 1000 * MS)
        .jitter(Jitter::None);
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
    let mut s = Sim::connecting(Sim::builder().max_attempts(2));
    s.refuse();
    s.next_timer();
    s.refuse();
    assert_eq!(s.m.state(), Cooldown);
    let warns = capture::lines(logs, log::Level::Warn);
    assert_eq!(warns.len(), 1);
    assert!(warns[0].contains("cooling down"), "{}", warns[0]);
}

// --- invariants over random input sequences ------------------------------------------------

mod props {
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
                .native_retries(native)
                .jitter(jitter)
                .ready_when(ProofOfLife::Inbound)
                .heartbeat(Heartbeat::new(500 * MS, Ping::Raw(b"p".to_vec())));
            if let Some(m) = max_attempts {
                b = b.max_attempts(m).cooldown(30_000 * MS);
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
}

// --- application code that panics (row 22, and row 3 for the resolver) -------------------

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
    let hb = Heartbeat::new(1000 * MS, Ping::Raw(b"p".to_vec())).reply(panicking(true, false));
    let b = Sim::builder()
        .framing(Lines::new())
        .heartbeat(hb)
        .jitter(Jitter::None)
        .max_attempts(5)
        .cooldown(60_000 * MS);
    let mut s = Sim::connecting(b);
    for _ in 0..5 {
        s.tcp_up();
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
    let hs = ProofOfLife::Handshake {
        hello: vec![b"HELLO".to_vec()],
        accept: panicking(false, true),
        timeout: 5000 * MS,
    };
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).ready_when(hs));
    s.tcp_up();
    s.data(b"OK\n");
    assert_eq!(
        panic_errors(&s),
        [(crate::error::Callback::Handshake, Some("boom".into()))]
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
    let mut s = Sim::connecting(Builder::new("tcp://db.example:1").native_retries(0));
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
    let mut s = Sim::connecting(Builder::new("tcp://db.example:1").native_retries(0));
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
    let b = Builder::new("tcp://db.example:7000")
        .native_retries(0)
        .dns_refresh(10_000 * MS);
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
