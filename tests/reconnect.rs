//! The reconnect policy against real peers on 127.0.0.1: growing jittered gaps, the flap
//! guard against accept-then-close servers (compared with libzmq's own redial), restarts,
//! Cooldown and its probes, `reconnect_now`, both settings of `immediate`, and where the
//! random draws come from.

mod util;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use relink::config::Jitter;
use relink::framing::Lines;
use relink::{Cause, Event, Link, State, Transition};
use util::*;

/// Bound on any single wait for something that should happen within a second or two.
const T: Duration = Duration::from_secs(10);

/// The libzmq reconnect interval of the raw STREAM socket the flap-guard test compares with.
const LIBZMQ_IVL_MS: i32 = 100;

/// A gap libzmq's redial (interval + up to one interval of jitter) stays below, and that
/// relink's backoff goes beyond after a few failures.
const LIBZMQ_GAP_BOUND: Duration = Duration::from_millis(400);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn mean(d: &[Duration]) -> Duration {
    d.iter().sum::<Duration>() / d.len() as u32
}

fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

fn fmt_ms(d: &[Duration]) -> String {
    let v: Vec<String> = d.iter().map(|d| d.as_millis().to_string()).collect();
    v.join(",")
}

fn assert_step(t: &Transition, from: State, to: State, cause: Cause) {
    assert_eq!(
        (t.from, t.to, t.cause),
        (from, to, cause),
        "unexpected transition {t:?}"
    );
}

/// What a link did while its peer refused every connect: when each dial started, and each
/// Backoff transition (with the delay drawn).
struct RefusedTrace {
    dials: Vec<Instant>,
    backoffs: Vec<Transition>,
}

impl RefusedTrace {
    fn delays(&self) -> Vec<Duration> {
        self.backoffs
            .iter()
            .map(|t| {
                t.next_retry
                    .expect("a Backoff transition carries its delay")
            })
            .collect()
    }
}

/// Follows a link dialling a refused endpoint until it has entered Backoff `n` times and
/// dialled again after the last one (so `n` gaps between dials).
fn trace_refused(link: &Link, n: usize, timeout: Duration) -> RefusedTrace {
    let deadline = Instant::now() + timeout;
    let mut w = Watch::new(link);
    let mut trace = RefusedTrace {
        dials: Vec::new(),
        backoffs: Vec::new(),
    };
    while trace.dials.len() < n + 1 {
        let Some((at, t)) =
            w.try_until(deadline.saturating_duration_since(Instant::now()), |_| true)
        else {
            panic!(
                "only {} dials and {} backoffs within {timeout:?}",
                trace.dials.len(),
                trace.backoffs.len()
            );
        };
        match t.to {
            State::Connecting => trace.dials.push(at),
            State::Backoff => {
                assert_eq!(t.cause, Cause::Refused, "{t:?}");
                trace.backoffs.push(t);
            }
            other => panic!("unexpected state {other} while the peer is down: {t:?}"),
        }
    }
    trace
}

/// Full jitter's band for the `i`-th delay (0-based) of a 50 ms .. 2 s backoff: `[floor,
/// nominal]`.
fn full_jitter_band(i: usize) -> (Duration, Duration) {
    let nominal = ms(50).saturating_mul(1 << i.min(16)).min(ms(2000));
    (relink::config::defaults::BACKOFF_FLOOR, nominal)
}

#[test]
fn a_link_started_while_the_peer_is_down_retries_with_growing_jittered_gaps_then_connects() {
    const GAPS: usize = 8;
    let port = free_port();
    let build = |seed| {
        Link::builder(endpoint_for(port))
            .reconnect(|r| {
                r.native_retries = 0;
                r.backoff_base = ms(50);
                r.backoff_max = ms(2000);
                r.rng_seed = Some(seed);
            })
            .build()
            .expect("build")
    };
    let (a, b) = (build(1), build(2));
    let (ta, tb) = std::thread::scope(|s| {
        let ha = s.spawn(|| trace_refused(&a, GAPS, Duration::from_secs(30)));
        let hb = s.spawn(|| trace_refused(&b, GAPS, Duration::from_secs(30)));
        (ha.join().unwrap(), hb.join().unwrap())
    });

    for (name, trace) in [("seed 1", &ta), ("seed 2", &tb)] {
        let delays = trace.delays();
        let measured = gaps(&trace.dials);
        eprintln!(
            "{name}: drawn ms={} measured ms={}",
            fmt_ms(&delays),
            fmt_ms(&measured)
        );
        for (i, t) in trace.backoffs.iter().enumerate() {
            assert_eq!(t.attempt as usize, i + 1, "failures are counted: {t:?}");
        }
        for (i, d) in delays.iter().enumerate() {
            let (lo, hi) = full_jitter_band(i);
            assert!(
                *d >= lo && *d <= hi,
                "{name}: delay {i} = {d:?} outside full jitter's [{lo:?}, {hi:?}]"
            );
        }
        assert!(
            delays
                .iter()
                .enumerate()
                .any(|(i, d)| *d != full_jitter_band(i).1),
            "{name}: delays are not jittered: {delays:?}"
        );
        // The link waits the delay it drew: never noticeably less, not much more.
        for (i, (gap, d)) in measured.iter().zip(&delays).enumerate() {
            assert!(
                *gap + ms(20) >= *d && *gap <= *d + ms(1000),
                "{name}: gap {i} = {gap:?} for a drawn delay of {d:?}"
            );
        }
        let early = mean(&measured[..3]);
        let late = mean(&measured[GAPS - 3..]);
        assert!(
            late > early * 2,
            "{name}: later gaps (mean {late:?}) should be well above earlier ones ({early:?})"
        );
    }
    assert_ne!(
        ta.delays(),
        tb.delays(),
        "two seeds drew the same delay sequence"
    );

    // The peer comes up on that port: both links connect.
    let peer = Peer::start_on(port, Behaviour::Echo).expect("start the peer on its port");
    for link in [&a, &b] {
        let seen = Watch::new(link).through(State::Ready, T);
        let (_, last) = seen.last().unwrap();
        assert_eq!(last.cause, Cause::Alive);
    }
    assert!(peer.wait_accepts(2, T));
    a.close(ms(500));
    b.close(ms(500));
}

#[test]
fn an_accept_then_close_peer_sees_growing_gaps_from_relink_but_steady_redials_from_libzmq() {
    const RELINK_ACCEPTS: usize = 8;
    const LIBZMQ_ACCEPTS: usize = 10;
    let relink_peer = Peer::start(Behaviour::AcceptThenClose);
    let libzmq_peer = Peer::start(Behaviour::AcceptThenClose);

    // relink, every retry its own (native_retries 0), the default 1 s flap guard: each of
    // these short connections is a failure and the backoff grows.
    let link = Link::builder(relink_peer.endpoint())
        .reconnect(|r| {
            r.native_retries = 0;
            r.backoff_base = ms(100);
            r.backoff_max = ms(3200);
            r.rng_seed = Some(7);
        })
        .build()
        .expect("build");

    // libzmq alone: a STREAM socket with a 100 ms reconnect interval.
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::STREAM).expect("STREAM socket");
    raw.set_linger(0).unwrap();
    raw.set_reconnect_ivl(LIBZMQ_IVL_MS).unwrap();
    raw.connect(&libzmq_peer.endpoint()).unwrap();

    assert!(
        libzmq_peer.wait_accepts(LIBZMQ_ACCEPTS, T),
        "libzmq redialled only {} times",
        libzmq_peer.accept_count()
    );
    drop(raw);
    drop(ctx);
    assert!(
        relink_peer.wait_accepts(RELINK_ACCEPTS, Duration::from_secs(30)),
        "relink redialled only {} times",
        relink_peer.accept_count()
    );
    let metrics = link.close(ms(500));

    let libzmq_gaps = gaps(&libzmq_peer.accepts()[..LIBZMQ_ACCEPTS]);
    let relink_gaps = gaps(&relink_peer.accepts()[..RELINK_ACCEPTS]);
    eprintln!("libzmq gaps ms={}", fmt_ms(&libzmq_gaps));
    eprintln!("relink gaps ms={}", fmt_ms(&relink_gaps));

    assert!(
        libzmq_gaps.iter().all(|g| *g < LIBZMQ_GAP_BOUND),
        "libzmq's own redial should stay near its interval: {libzmq_gaps:?}"
    );
    let n = relink_gaps.len();
    let late = mean(&relink_gaps[n - 3..]);
    assert!(
        late > LIBZMQ_GAP_BOUND,
        "relink's later gaps (mean {late:?}) should exceed {LIBZMQ_GAP_BOUND:?}: {relink_gaps:?}"
    );
    assert!(
        late > mean(&relink_gaps[..3]) * 2,
        "relink's gaps should grow: {relink_gaps:?}"
    );
    assert!(
        metrics.consecutive_failures as usize >= RELINK_ACCEPTS - 1,
        "each short connection is a failure: {metrics:?}"
    );
}

#[test]
fn a_link_returns_to_ready_after_its_peer_restarts_on_the_same_port() {
    let peer = Peer::start(Behaviour::Echo);
    let port = peer.port();
    let (link, mut w) = watched(Link::builder(peer.endpoint()).reconnect(|r| {
        r.backoff_base = ms(50);
        r.backoff_max = ms(400);
    }));
    w.through(State::Ready, T);

    peer.stop();
    let (_, t) = w.next(T);
    assert_step(&t, State::Ready, State::Backoff, Cause::PeerClosed);
    // Let it fail a few times against the closed port.
    for _ in 0..2 {
        let seen = w.through(State::Backoff, T);
        assert_eq!(seen.last().unwrap().1.cause, Cause::Refused);
    }

    let peer = Peer::start_on(port, Behaviour::Echo).expect("restart on the same port");
    let seen = w.through(State::Ready, T);
    assert_eq!(seen.last().unwrap().1.cause, Cause::Alive);
    assert!(peer.wait_accepts(1, T));
    let m = link.metrics();
    assert_eq!(m.state, State::Ready);
    assert_eq!(m.reconnects, 1, "{m:?}");
    assert!(m.last_outage.is_some(), "{m:?}");
    link.close(ms(500));
}

#[test]
fn max_attempts_lead_to_cooldown_whose_probes_reconnect_once_the_peer_is_up() {
    let port = free_port();
    let cooldown = Duration::from_secs(1);
    let (link, mut w) = watched(Link::builder(endpoint_for(port)).reconnect(|r| {
        r.native_retries = 0;
        r.backoff_base = ms(20);
        r.backoff_max = ms(100);
        r.max_attempts = Some(3);
        r.cooldown = cooldown;
    }));

    let expected = [
        (State::Idle, State::Connecting, Cause::Start),
        (State::Connecting, State::Backoff, Cause::Refused),
        (State::Backoff, State::Connecting, Cause::RetryTimer),
        (State::Connecting, State::Backoff, Cause::Refused),
        (State::Backoff, State::Connecting, Cause::RetryTimer),
        (State::Connecting, State::Cooldown, Cause::Refused),
    ];
    let mut entered_cooldown = None;
    for (from, to, cause) in expected {
        let (at, t) = w.next(T);
        assert_step(&t, from, to, cause);
        if to == State::Cooldown {
            assert_eq!(t.attempt, 3, "{t:?}");
            assert_eq!(t.next_retry, Some(cooldown), "{t:?}");
            entered_cooldown = Some(at);
        }
    }
    assert_eq!(link.state(), State::Cooldown);

    // The probe after the cooldown, refused again: back to Cooldown, counter still growing.
    let (probe_at, t) = w.next(cooldown + T);
    assert_step(&t, State::Cooldown, State::Connecting, Cause::CooldownOver);
    let waited = probe_at - entered_cooldown.unwrap();
    assert!(
        waited >= cooldown - ms(100) && waited < cooldown + ms(3000),
        "the probe came {waited:?} after entering a {cooldown:?} cooldown"
    );
    let (_, t) = w.next(T);
    assert_step(&t, State::Connecting, State::Cooldown, Cause::Refused);
    assert_eq!(t.attempt, 4, "{t:?}");

    // The peer comes up: the next probe connects.
    let peer = Peer::start_on(port, Behaviour::Echo).expect("start the peer on its port");
    let (_, t) = w.next(cooldown + T);
    assert_step(&t, State::Cooldown, State::Connecting, Cause::CooldownOver);
    let (_, t) = w.next(T);
    assert_step(&t, State::Connecting, State::Connected, Cause::TcpConnected);
    let (_, t) = w.next(T);
    assert_step(&t, State::Connected, State::Ready, Cause::Alive);
    assert!(peer.wait_accepts(1, T));
    link.close(ms(500));
}

/// A link to a refused port whose backoff would wait 10 s, then 20 s (no jitter).
fn slow_refused_link(max_attempts: Option<u32>) -> Link {
    let mut b = Link::builder(refused_endpoint()).reconnect(|r| {
        r.native_retries = 0;
        r.backoff_base = Duration::from_secs(10);
        r.backoff_max = Duration::from_secs(20);
        r.jitter = Jitter::None;
        r.cooldown = Duration::from_secs(30);
    });
    if let Some(n) = max_attempts {
        b = b.reconnect(|r| r.max_attempts = Some(n));
    }
    b.build().expect("build")
}

/// Calls `reconnect_now` and checks that the link dials at once, well before any timer,
/// keeping the attempt counter: after `failures` failed attempts the new dial is attempt
/// `failures + 1`, not 1.
fn reconnect_now_dials_at_once(link: &Link, w: &mut Watch, from: State, failures: u32) {
    let asked = Instant::now();
    link.reconnect_now();
    let (at, t) = w.next(T);
    assert_step(&t, from, State::Connecting, Cause::ReconnectNow);
    assert!(
        at - asked < Duration::from_secs(2),
        "reconnect_now took {:?} to dial",
        at - asked
    );
    assert_eq!(
        t.attempt,
        failures + 1,
        "reconnect_now reset the counter: {t:?}"
    );
}

/// [`reconnect_now_dials_at_once`], then the transition that ends that dial.
fn redial_now(link: &Link, w: &mut Watch, from: State, failures: u32) -> Transition {
    reconnect_now_dials_at_once(link, w, from, failures);
    w.next(T).1
}

#[test]
fn reconnect_now_cuts_a_backoff_short_and_keeps_the_attempt_counter() {
    let link = slow_refused_link(None);
    let mut w = Watch::new(&link);
    let (_, t) = w.next(T);
    assert_step(&t, State::Idle, State::Connecting, Cause::Start);
    let (_, t) = w.next(T);
    assert_step(&t, State::Connecting, State::Backoff, Cause::Refused);
    assert_eq!(
        (t.attempt, t.next_retry),
        (1, Some(Duration::from_secs(10)))
    );

    // Refused again: the second failure in a row, so the second (doubled) delay.
    let t = redial_now(&link, &mut w, State::Backoff, 1);
    assert_step(&t, State::Connecting, State::Backoff, Cause::Refused);
    assert_eq!(
        (t.attempt, t.next_retry),
        (2, Some(Duration::from_secs(20)))
    );
    assert_eq!(link.metrics().consecutive_failures, 2);

    let t = redial_now(&link, &mut w, State::Backoff, 2);
    assert_step(&t, State::Connecting, State::Backoff, Cause::Refused);
    assert_eq!(t.attempt, 3);
    assert_eq!(link.metrics().consecutive_failures, 3);
    link.close(ms(500));
}

#[test]
fn reconnect_now_cuts_a_cooldown_short_and_keeps_the_attempt_counter() {
    let link = slow_refused_link(Some(2));
    let mut w = Watch::new(&link);
    let seen = w.through(State::Backoff, T);
    assert_eq!(seen.last().unwrap().1.attempt, 1);

    let t = redial_now(&link, &mut w, State::Backoff, 1);
    assert_step(&t, State::Connecting, State::Cooldown, Cause::Refused);
    assert_eq!(
        (t.attempt, t.next_retry),
        (2, Some(Duration::from_secs(30)))
    );
    let m = link.metrics();
    assert_eq!(m.state, State::Cooldown);
    assert!(
        m.next_retry_in.is_some_and(|d| d > Duration::from_secs(20)),
        "{m:?}"
    );

    let t = redial_now(&link, &mut w, State::Cooldown, 2);
    assert_step(&t, State::Connecting, State::Cooldown, Cause::Refused);
    assert_eq!(t.attempt, 3);
    assert_eq!(link.metrics().consecutive_failures, 3);
    link.close(ms(500));
}

/// Frames flow, the peer restarts on the same port, and frames flow again.
fn frames_flow_again_after_a_peer_restart(immediate: bool) {
    let peer = Peer::start(Behaviour::Echo);
    let port = peer.port();
    let (link, mut w) = watched(
        Link::builder(peer.endpoint())
            .framing(Lines::new())
            .socket(|s| s.immediate = immediate)
            .reconnect(|r| {
                r.backoff_base = ms(50);
                r.backoff_max = ms(400);
            }),
    );
    let expect_echo = |payload: &[u8]| {
        link.send(payload.to_vec()).expect("send");
        let deadline = Instant::now() + T;
        loop {
            match link.events().recv_deadline(deadline) {
                Ok(Event::Frame(f)) => {
                    assert_eq!(f, payload);
                    return;
                }
                Ok(Event::State(t)) => panic!("unexpected state change {t:?}"),
                Ok(_) => {}
                Err(e) => panic!("no echo of {payload:?}: {e}"),
            }
        }
    };

    w.through(State::Ready, T);
    expect_echo(b"before");

    peer.stop();
    let (_, t) = w.next(T);
    assert_step(&t, State::Ready, State::Backoff, Cause::PeerClosed);

    let peer = Peer::start_on(port, Behaviour::Echo).expect("restart on the same port");
    w.through(State::Ready, T);
    expect_echo(b"after");
    assert_eq!(peer.received_all(), b"after\n");
    let m = link.close(ms(500));
    assert_eq!((m.frames_sent, m.frames_received), (2, 2), "{m:?}");
    assert_eq!(m.unaccounted(), 0);
}

#[test]
fn with_immediate_true_frames_flow_again_after_a_peer_restart() {
    frames_flow_again_after_a_peer_restart(true);
}

#[test]
fn with_immediate_false_frames_flow_again_after_a_peer_restart() {
    frames_flow_again_after_a_peer_restart(false);
}

/// The first `n` delays a link without a fixed seed draws against a refused port.
fn unseeded_delays(n: usize) -> Vec<Duration> {
    let link = Link::builder(refused_endpoint())
        .reconnect(|r| {
            r.native_retries = 0;
            r.backoff_base = ms(40);
            r.backoff_max = ms(320);
        })
        .build()
        .expect("build");
    let trace = trace_refused(&link, n, T);
    link.close(ms(200));
    trace.delays()
}

#[test]
fn two_links_in_one_process_draw_different_delays() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| unseeded_delays(4));
        let b = s.spawn(|| unseeded_delays(4));
        (a.join().unwrap(), b.join().unwrap())
    });
    eprintln!("link a: {a:?}\nlink b: {b:?}");
    assert_ne!(a, b, "two links drew the same delays");
}

/// Set in the environment of the child processes of the test below.
const CHILD_ENV: &str = "RELINK_TEST_PRINT_DELAYS";
const CHILD_MARK: &str = "relink-delays-ns:";

#[test]
fn two_processes_draw_different_delays() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // Child mode: draw and print.
        let delays = unseeded_delays(4);
        assert_eq!(delays.len(), 4);
        let ns: Vec<String> = delays.iter().map(|d| d.as_nanos().to_string()).collect();
        println!("{CHILD_MARK}{}", ns.join(","));
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let run_child = || {
        Command::new(&exe)
            .args([
                "two_processes_draw_different_delays",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the test binary")
    };
    let children = [run_child(), run_child()];
    let mut outputs = Vec::new();
    for mut child in children {
        let exited = wait_for(Duration::from_secs(30), || child.try_wait().ok().flatten());
        if exited.is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a child process did not finish within 30 s");
        }
        let out = child.wait_with_output().expect("child output");
        assert!(out.status.success(), "child failed: {:?}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = stdout
            .lines()
            .find_map(|l| l.split_once(CHILD_MARK).map(|(_, v)| v))
            .unwrap_or_else(|| panic!("no delays in the child's output:\n{stdout}"))
            .to_string();
        outputs.push(line);
    }
    eprintln!("process 1: {}\nprocess 2: {}", outputs[0], outputs[1]);
    assert_eq!(outputs[0].split(',').count(), 4);
    assert_ne!(outputs[0], outputs[1], "two processes drew the same delays");
}

#[test]
fn a_fixed_rng_seed_gives_two_links_the_same_delays() {
    let seeded = || {
        Link::builder(refused_endpoint())
            .reconnect(|r| {
                r.native_retries = 0;
                r.backoff_base = ms(10);
                r.backoff_max = ms(80);
                r.jitter = Jitter::Full;
                r.rng_seed = Some(0x5eed);
            })
            .build()
            .expect("build")
    };
    let (a, b) = (seeded(), seeded());
    let (ta, tb) = std::thread::scope(|s| {
        let ha = s.spawn(|| trace_refused(&a, 5, T));
        let hb = s.spawn(|| trace_refused(&b, 5, T));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    let (da, db) = (ta.delays(), tb.delays());
    eprintln!("seeded delays: {da:?}");
    assert_eq!(da, db, "the same seed drew different delays");
    let nominal = [10, 20, 40, 80, 80].map(ms);
    assert!(
        da.iter().zip(nominal).any(|(d, n)| *d != n),
        "the delays are not jittered: {da:?}"
    );
    a.close(ms(200));
    b.close(ms(200));
}
