//! The state machine in virtual time: one test per row of the transition table, then the
//! invariants over random input sequences. Nothing here sleeps or opens a socket.

use super::*;
use crate::core::backoff::Jitter;
use crate::core::heartbeat::{Heartbeat, Ping};
use crate::core::predicate::Predicate;
use crate::core::settings::ProofOfLife;
use crate::framing::{LengthDelimited, Lines};
use crate::metrics::Metrics;
use crate::protocol::Handshake;
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
    flushed: Vec<(Token, Result<(), crate::error::FlushError>)>,
    /// The peer's TCP acknowledges every byte as soon as it is written.
    auto_ack: bool,
}

impl Sim {
    fn with(b: Builder) -> Sim {
        let cfg = b
            .reconnect(|r| r.rng_seed = Some(7))
            .into_config()
            .expect("valid config");
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
            flushed: Vec::new(),
            auto_ack: true,
        }
    }

    fn builder() -> Builder {
        Builder::new("tcp://127.0.0.1:7000").reconnect(|r| {
            r.native_retries = 0;
            r.backoff_base = 100 * MS;
            r.backoff_max = 10_000 * MS;
            r.backoff_floor = MS;
        })
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
                self.ack(self.m.delivery.window.written());
            }
        }
    }

    /// The peer's TCP acknowledged `bytes` bytes of the current connection.
    fn ack(&mut self, bytes: u64) {
        let generation = self.m.dial.generation();
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
                Action::Flushed(token, outcome) => self.flushed.push((token, outcome)),
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

mod capture;
mod close_inbound;
mod confirm;
mod connection;
mod order;
mod panics;
mod pause;
mod props;
mod protocol;
mod replies;
mod requests;
mod rules;
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
    let mut s =
        Sim::connecting(Builder::new("tcp://db.example:7000").reconnect(|r| r.native_retries = 0));
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
    let mut s = Sim::connecting(
        Builder::new("tcp://nowhere.invalid:1").reconnect(|r| r.native_retries = 0),
    );
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
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| r.native_retries = 2));
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
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| r.native_retries = 1));
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
    let mut s = Sim::connecting(Sim::builder().socket(|s| s.connect_timeout = 2000 * MS));
    let waited = s.next_timer();
    assert!(waited >= 2000 * MS, "{waited:?}");
    assert_eq!(s.last_transition().cause, Cause::ConnectTimeout);
    assert_eq!(s.m.state(), Backoff);
    assert_eq!(s.disconnects, 1);
}

#[test]
fn row6_a_dial_libzmq_gave_up_on_after_the_connect_timeout_is_reported_as_a_timeout() {
    let mut s = Sim::connecting(Sim::builder().socket(|s| s.connect_timeout = 2000 * MS));
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
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).protocol(hs));
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
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).protocol(hs));
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
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| {
        r.backoff_factor = 2.0;
        r.jitter = Jitter::None;
    }));
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
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| {
        r.max_attempts = Some(3);
        r.cooldown = 60_000 * MS;
    }));
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
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| r.max_attempts = Some(1)));
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
    let mut s = Sim::connecting(Sim::builder().reconnect(|r| {
        r.backoff_base = 60_000 * MS;
        r.backoff_max = 60_000 * MS;
    }));
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
