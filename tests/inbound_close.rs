//! What the peer wrote before it closed reaches the application, in order, before the state
//! change that says the connection is gone: with the application reading, and with reading
//! paused (the application took no event for a while, so the link stopped reading the socket
//! and TCP pushed back on the peer) when the peer closes.
//!
//! Each scenario runs against a real peer on 127.0.0.1: the kit's [`burst`] peer writes
//! length-prefixed frames of 100 bytes in one write and closes (FIN, or a reset); the TLS
//! scenario uses an in-process rustls server that sends close_notify before its FIN. The
//! `libzmq_*` and `the_kernel_*` tests probe, with a raw STREAM socket, the facts of
//! docs/design.md ("Inbound at a close") the link relies on.
//!
//! `cargo test --test inbound_close -- --nocapture --test-threads=1` prints each scenario's
//! counts.

mod util;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use relink::error::LinkError;
use relink::framing::LengthDelimited;
use relink::{Builder, Link, Metrics, State, Tls};
use util::payload::seq_frame;
use util::peers::{burst, Ending, Peer};
use util::tls::{server_config, Serve, TlsKit, TlsServer};
use util::{ms, Watch};

/// Bound on any wait for something that takes milliseconds when all is well.
const T: Duration = Duration::from_secs(20);
/// The scenario of the issue: 10 000 frames of 100 bytes.
const FRAMES: usize = 10_000;
const LEN: usize = 100;
/// The peer closes this long after its FIN.
const LINGER: Duration = Duration::from_millis(200);
/// The application takes no event for this long after building the link.
const PAUSE: Duration = Duration::from_secs(3);
/// Runs of the repeated scenarios, and how many run at once.
const RUNS: usize = 50;
const AT_ONCE: usize = 10;

/// What one run saw.
#[derive(Debug)]
struct Run {
    /// Frames delivered (their sequence numbers), in the order they came.
    seqs: Vec<u64>,
    /// Frames that came before the link left Ready.
    before_leaving: usize,
    errors: Vec<LinkError>,
    metrics: Metrics,
}

impl Run {
    fn lost(&self, expected: usize) -> usize {
        expected.saturating_sub(self.seqs.len())
    }

    /// Every frame once, in order, all of them before the state change.
    fn whole(&self, expected: usize) -> bool {
        self.seqs.len() == expected
            && self.seqs.iter().enumerate().all(|(i, s)| *s == i as u64)
            && self.before_leaving == expected
    }
}

/// A link with the len32 framing to `endpoint`, its redial far enough away that the run ends
/// first.
fn len32(endpoint: &str) -> Builder {
    Link::builder(endpoint)
        .framing(LengthDelimited::len32())
        .reconnect(|r| {
            r.backoff_base = ms(500);
            r.backoff_max = ms(1000);
        })
}

/// Builds the link, takes no event for `pause` (the scenario's slow application), then reads
/// until the link leaves Ready and closes it.
fn observe(builder: Builder, pause: Duration) -> Run {
    let link = builder.build().expect("build the link");
    if !pause.is_zero() {
        // The scenario itself: an application that takes no event for a while.
        thread::sleep(pause);
    }
    let mut w = Watch::new(&link);
    w.until(T, |t| t.from == State::Ready);
    let before_leaving = *w.frames_before.last().expect("a transition");
    let (metrics, _) = w.close(&link, T, "after the peer's close");
    let seqs = w
        .frames
        .iter()
        .map(|f| u64::from_be_bytes(f[..8].try_into().expect("a seq frame")))
        .collect();
    Run {
        seqs,
        before_leaving,
        errors: w.errors.clone(),
        metrics,
    }
}

/// Runs `one` `RUNS` times, `AT_ONCE` at a time; prints and returns the runs.
fn repeated(
    what: &str,
    expected: usize,
    one: impl Fn() -> Run + Send + Sync + 'static,
) -> Vec<Run> {
    let one = Arc::new(one);
    let started = Instant::now();
    let mut runs = Vec::new();
    while runs.len() < RUNS {
        let n = AT_ONCE.min(RUNS - runs.len());
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let one = one.clone();
                thread::spawn(move || one())
            })
            .collect();
        runs.extend(handles.into_iter().map(|h| h.join().expect("a run")));
    }
    let lost: Vec<usize> = runs.iter().map(|r| r.lost(expected)).collect();
    let short = lost.iter().filter(|l| **l > 0).count();
    let disordered = runs.iter().filter(|r| !r.whole(expected)).count();
    println!(
        "{what}: {} runs in {:.1?}; frames lost {} in all ({short} runs short: {:?}); runs not \
         whole (lost, out of order, or after the state change): {disordered}",
        runs.len(),
        started.elapsed(),
        lost.iter().sum::<usize>(),
        lost.iter().filter(|l| **l > 0).collect::<Vec<_>>()
    );
    runs
}

fn assert_whole(runs: &[Run], expected: usize) {
    for (i, r) in runs.iter().enumerate() {
        assert!(
            r.whole(expected),
            "run {i}: {} of {expected} frames, {} before the state change; errors {:?}",
            r.seqs.len(),
            r.before_leaving,
            r.errors
        );
        assert_eq!(r.metrics.frames_received, expected as u64, "run {i}");
    }
}

#[test]
fn a_paused_reader_gets_every_frame_the_peer_wrote_before_its_fin_in_50_runs() {
    let runs = repeated("plaintext, paused, FIN", FRAMES, || {
        let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Fin(LINGER)));
        observe(len32(&peer.endpoint()), PAUSE)
    });
    assert_whole(&runs, FRAMES);
}

#[test]
fn a_paused_tls_reader_gets_every_frame_the_server_wrote_before_close_notify_in_50_runs() {
    let kit = Arc::new(TlsKit::new());
    let runs = repeated("tls, paused, close_notify then FIN", FRAMES, move || {
        let serve = Serve::Burst {
            frames: FRAMES,
            len: LEN,
            linger: LINGER,
        };
        let server = TlsServer::start(server_config(&kit.pki.server, None), serve);
        let b = len32(&server.named_endpoint()).tls(Tls::new().ca_pem(&kit.pki.ca.cert));
        observe(b, PAUSE)
    });
    assert_whole(&runs, FRAMES);
}

#[test]
fn a_reader_that_keeps_up_gets_every_frame_of_a_peer_that_closes_at_full_speed() {
    let runs = repeated("plaintext, reading, FIN at once", FRAMES, || {
        let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Fin(Duration::ZERO)));
        observe(len32(&peer.endpoint()), Duration::ZERO)
    });
    assert_whole(&runs, FRAMES);
}

#[test]
fn a_frame_cut_by_the_peers_close_is_reported_with_its_length_never_delivered() {
    // 10 frames, then the first 40 bytes of an 11th (its length says 100).
    let mut tail = 100u32.to_be_bytes().to_vec();
    tail.extend_from_slice(&seq_frame(10, 36));
    for pause in [Duration::ZERO, ms(1500)] {
        let peer = Peer::start(burst(10, LEN, tail.clone(), Ending::Fin(LINGER)));
        let run = observe(len32(&peer.endpoint()).events_capacity(4), pause);
        assert!(run.whole(10), "{run:?}");
        let cut: Vec<_> = run
            .errors
            .iter()
            .filter_map(|e| match e {
                LinkError::CutFrame { bytes } => Some(*bytes),
                _ => None,
            })
            .collect();
        assert_eq!(cut, vec![40], "paused {pause:?}: {:?}", run.errors);
        assert_eq!(run.metrics.frames_cut, 1);
        assert_eq!(run.metrics.bytes_cut, 40);
    }
}

#[test]
fn frames_of_a_closed_connection_left_waiting_past_the_bound_are_dropped_and_reported() {
    // 2 000 frames (208 000 B) fit in libzmq's pipe (a larger one than the default, so that
    // this holds however libzmq cuts what it reads): the close is seen, and what is left read,
    // while the application takes no event.
    let frames = 2000;
    let peer = Peer::start(burst(frames, LEN, Vec::new(), Ending::Fin(LINGER)));
    let b = len32(&peer.endpoint())
        .socket(|s| {
            s.sndhwm = 64;
            s.rcvhwm = 1000;
        })
        .closed_frames_wait(ms(300));
    let run = observe(b, ms(1500));
    let reported: Vec<(u64, u64)> = run
        .errors
        .iter()
        .filter_map(|e| match e {
            LinkError::FramesUnread { frames, bytes } => Some((*frames, *bytes)),
            _ => None,
        })
        .collect();
    let m = &run.metrics;
    println!(
        "closed_frames_wait 300 ms, reader back after 1.5 s: {} of {frames} delivered, \
         reported {reported:?}",
        run.seqs.len()
    );
    assert!(in_order_before_leaving(&run), "{run:?}");
    assert_eq!(reported, vec![(m.frames_unread, m.bytes_unread)]);
    assert!(m.frames_unread > 0);
    assert_eq!(run.seqs.len() as u64 + m.frames_unread, frames as u64);
    assert_eq!(m.bytes_unread, m.frames_unread * LEN as u64);
    assert_eq!(m.frames_received, frames as u64, "decoded, all of them");
}

#[test]
fn with_immediate_a_paused_reader_still_gets_every_frame_before_the_close() {
    // ZMQ_IMMEDIATE (not the default): libzmq terminates a closed connection's pipe when it
    // redials, and drops what relink had not read; with ZMQ_RECONNECT_STOP (relink sets it,
    // docs/design.md "libzmq's asserts within relink's reach") the session ends from its own
    // side instead and the socket's end of the pipe stays readable to its end.
    let mut lost = Vec::new();
    for _ in 0..10 {
        let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Fin(LINGER)));
        let run = observe(
            len32(&peer.endpoint()).socket(|s| s.immediate = true),
            ms(1000),
        );
        assert!(in_order_before_leaving(&run), "{run:?}");
        lost.push(run.lost(FRAMES));
    }
    println!(
        "immediate, paused 1 s, FIN: frames not delivered per run {lost:?} (of {FRAMES}); {} in \
         all",
        lost.iter().sum::<usize>()
    );
    assert!(lost.iter().all(|&l| l == 0), "frames lost: {lost:?}");
}

/// Frames in order from 0, every one before the state change (a prefix of what was written).
fn in_order_before_leaving(r: &Run) -> bool {
    r.seqs.iter().enumerate().all(|(i, s)| *s == i as u64) && r.before_leaving == r.seqs.len()
}

#[test]
fn a_peer_that_resets_after_its_burst_loses_only_what_the_kernel_discards() {
    // What a reset loses is the kernels' business (the peer's unsent bytes, and on this
    // side what libzmq had not read yet when the reset came): measured, not asserted away.
    for (what, after) in [
        ("reset 200 ms after the burst", LINGER),
        ("reset at once", Duration::ZERO),
    ] {
        let mut lost = Vec::new();
        for _ in 0..10 {
            let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Reset(after)));
            let run = observe(len32(&peer.endpoint()), ms(1000));
            assert!(in_order_before_leaving(&run), "{what}: {run:?}");
            let cut = run.metrics.frames_cut as usize;
            assert!(cut <= 1, "{what}: {run:?}");
            assert_eq!(
                run.metrics.frames_received as usize,
                run.seqs.len(),
                "{what}"
            );
            lost.push(run.lost(FRAMES));
        }
        println!(
            "paused 1 s, {what}: frames not delivered per run {lost:?} (of {FRAMES}); {} in all",
            lost.iter().sum::<usize>()
        );
    }
}

#[test]
fn the_last_replies_before_the_peers_close_answer_their_requests() {
    use relink::error::RequestError;
    use relink::framing::Lines;
    use relink::protocol::{Correlation, RequestReply};
    use relink::Redelivery;
    const REQUESTS: usize = 500;
    const NOTES: usize = 4;
    // Reads every request, then answers them all in one write, each reply after NOTES
    // unsolicited lines, shuts its side down (FIN) and closes a moment later.
    let peer = Peer::start(util::Behaviour::script(|c| {
        if c.index() > 0 {
            return c.hold();
        }
        let mut out = Vec::new();
        for _ in 0..REQUESTS {
            let Ok(line) = c.read_line(T) else { return };
            let n = String::from_utf8_lossy(&line).into_owned();
            for k in 0..NOTES {
                out.extend_from_slice(format!("note {n} {k}\n").as_bytes());
            }
            out.extend_from_slice(format!("reply {n}\n").as_bytes());
        }
        if c.write_all(&out).is_ok() {
            let _ = c.stream().shutdown(std::net::Shutdown::Write);
            c.pause(LINGER);
        }
    }));
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .protocol(RequestReply)
        .requests(|q| {
            q.correlation = Some(Correlation::in_order_except(|f| f.starts_with(b"note")));
            q.redelivery = Redelivery::Report;
        })
        .reconnect(|r| {
            r.backoff_base = ms(500);
            r.backoff_max = ms(1000);
        })
        .build()
        .unwrap();
    Watch::new(&link).until_state(State::Ready, T);
    let pending: Vec<_> = (0..REQUESTS)
        .map(|i| link.request_within(i.to_string(), T))
        .collect();
    // The application takes no event for a while: the notes fill the channel and reading
    // pauses with replies still unread when the peer closes.
    let reader = {
        let events = link.events().clone();
        thread::spawn(move || {
            thread::sleep(ms(1000));
            let mut w = Watch::on(&events);
            w.until(T, |t| t.from == State::Ready);
            (
                w.frames.len(),
                *w.frames_before.last().expect("a transition"),
            )
        })
    };
    let answers: Vec<Result<relink::bytes::Bytes, RequestError>> =
        pending.into_iter().map(|p| p.wait()).collect();
    let (notes, before_leaving) = reader.join().expect("the reader");
    let wrong: Vec<_> = answers
        .iter()
        .enumerate()
        .filter(|(i, a)| !matches!(a, Ok(b) if b[..] == *format!("reply {i}").as_bytes()))
        .map(|(i, a)| (i, a.clone()))
        .take(5)
        .collect();
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    println!("requests answered {answered} of {REQUESTS}; notes {notes}");
    assert!(
        wrong.is_empty(),
        "{answered} answered; first wrong: {wrong:?}"
    );
    assert_eq!(
        (notes, before_leaving),
        (REQUESTS * NOTES, REQUESTS * NOTES)
    );
    link.close(T);
}

// ----- libzmq's own behaviour at a peer's close (the facts docs/design.md states) ----------

const EVENT_DISCONNECTED: u16 = 0x0200;

/// What a raw ZMQ_STREAM socket showed of one connection to a [`burst`] peer.
#[derive(Debug, Default)]
struct RawSeen {
    /// Data bytes read from the socket (connect notification excluded).
    bytes: usize,
    /// The in-band disconnect notification `[rid, ""]` was read.
    terminator: bool,
    /// The monitor's DISCONNECTED was read before the terminator (when both were).
    monitor_first: Option<bool>,
    /// Data bytes still unread when the monitor's DISCONNECTED was read.
    unread_at_monitor: Option<usize>,
}

/// Reads a raw STREAM socket and its monitor connected to `peer`. Nothing is read from the
/// socket until `hold` has passed since the connect (the socket's owner pausing); then, each
/// pass reads the monitor first, then the socket, as relink's pass does. With `disconnect`,
/// `disconnect(endpoint)` (linger 0) is called as soon as the monitor says DISCONNECTED, before
/// reading on.
fn raw_stream(
    peer: &Peer,
    rcvhwm: i32,
    immediate: bool,
    hold: Duration,
    disconnect: bool,
) -> RawSeen {
    let ctx = zmq::Context::new();
    let s = ctx.socket(zmq::STREAM).expect("STREAM socket");
    s.set_immediate(immediate).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvhwm(rcvhwm).unwrap();
    let addr = format!("inproc://raw-{}", rand_suffix());
    s.monitor(&addr, zmq::SocketEvent::ALL as i32).unwrap();
    let m = ctx.socket(zmq::PAIR).unwrap();
    m.set_linger(0).unwrap();
    m.connect(&addr).unwrap();
    let endpoint = peer.endpoint();
    s.connect(&endpoint).unwrap();
    let start = Instant::now();
    let mut seen = RawSeen::default();
    let mut monitor_down = false;
    let mut connected = false;
    while start.elapsed() < T && !seen.terminator {
        let _ = zmq::poll(&mut [m.as_poll_item(zmq::POLLIN)], 5);
        while let Ok(head) = m.recv_msg(zmq::DONTWAIT) {
            while m.get_rcvmore().unwrap_or(false) {
                let _ = m.recv_msg(zmq::DONTWAIT);
            }
            if head.len() >= 6 && u16::from_ne_bytes([head[0], head[1]]) == EVENT_DISCONNECTED {
                monitor_down = true;
                seen.monitor_first.get_or_insert(true);
                seen.unread_at_monitor = Some(RAW_BYTES.saturating_sub(seen.bytes));
                if disconnect {
                    let _ = s.disconnect(&endpoint);
                }
            }
        }
        if start.elapsed() < hold {
            continue;
        }
        while let Ok(_rid) = s.recv_msg(zmq::DONTWAIT) {
            let data = s.recv_msg(0).expect("the data frame");
            if !data.is_empty() {
                seen.bytes += data.len();
            } else if connected {
                seen.terminator = true;
                seen.monitor_first.get_or_insert(false);
                break;
            } else {
                connected = true;
            }
        }
        if disconnect && monitor_down && s.recv_msg(zmq::DONTWAIT).is_err() {
            break;
        }
    }
    // The monitored socket first: closing it ends its monitor before the PAIR goes
    // (libzmq #3575).
    drop(s);
    drop(m);
    seen
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed) + u64::from(std::process::id()) * 1_000_000
}

const RAW_BYTES: usize = FRAMES * (LEN + 4);
/// libzmq's own RCVHWM: its pipe holds the whole burst (1 MB in 8 KiB messages).
const HWM_ALL: i32 = 1000;
/// relink's default RCVHWM (`defaults::RCVHWM`), and libzmq's largest message of received
/// bytes: what its pipe can hold.
const HWM_RELINK: i32 = 64;
const CHUNK: usize = 8192;

#[test]
fn libzmq_keeps_a_closed_connections_unread_data_only_without_immediate() {
    for immediate in [false, true] {
        let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Fin(LINGER)));
        let seen = raw_stream(&peer, HWM_ALL, immediate, ms(1000), false);
        println!("rcvhwm {HWM_ALL}, immediate={immediate}, read after 1 s: {seen:?}");
        if immediate {
            // libzmq terminates the pipe at the close: what was not read is gone.
            assert_eq!((seen.bytes, seen.terminator), (0, false), "{seen:?}");
        } else {
            assert_eq!((seen.bytes, seen.terminator), (RAW_BYTES, true), "{seen:?}");
        }
    }
}

#[test]
fn libzmq_drops_a_closed_connections_unread_data_at_disconnect() {
    let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Fin(LINGER)));
    let seen = raw_stream(&peer, HWM_ALL, false, ms(1000), true);
    println!("rcvhwm {HWM_ALL}, disconnect(endpoint) at the monitor's DISCONNECTED: {seen:?}");
    assert_eq!((seen.bytes, seen.terminator), (0, false), "{seen:?}");
}

#[test]
fn libzmq_announces_the_close_on_the_monitor_ahead_of_at_most_one_pipe_of_data() {
    let bound = HWM_RELINK as usize * CHUNK;
    let runs = 5;
    for hold in [Duration::ZERO, ms(500)] {
        let (mut monitor_first, mut most_unread) = (0, 0);
        for _ in 0..runs {
            let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Fin(Duration::ZERO)));
            let seen = raw_stream(&peer, HWM_RELINK, false, hold, false);
            assert_eq!((seen.bytes, seen.terminator), (RAW_BYTES, true), "{seen:?}");
            monitor_first += usize::from(seen.monitor_first == Some(true));
            most_unread = most_unread.max(seen.unread_at_monitor.unwrap_or(0));
        }
        println!(
            "rcvhwm {HWM_RELINK}, reading after {hold:?}: the monitor's DISCONNECTED came \
             before the notification in {monitor_first} of {runs}, with at most {most_unread} \
             bytes unread"
        );
        assert!(most_unread <= bound, "{most_unread} > {bound}");
    }
}

#[test]
fn the_kernel_discards_what_it_holds_unread_when_the_peer_resets() {
    // The peer resets 200 ms after its burst: every byte was acknowledged by then. With the
    // whole burst in libzmq's pipe before the reset, all of it stays readable; with relink's
    // RCVHWM most of it still waits in this kernel's receive queue at the reset.
    for rcvhwm in [HWM_ALL, HWM_RELINK] {
        let peer = Peer::start(burst(FRAMES, LEN, Vec::new(), Ending::Reset(LINGER)));
        let seen = raw_stream(&peer, rcvhwm, false, ms(1000), false);
        println!(
            "rcvhwm {rcvhwm}, reset, read after 1 s: {} of {RAW_BYTES} bytes",
            seen.bytes
        );
        assert!(seen.terminator, "{seen:?}");
        if rcvhwm == HWM_ALL {
            assert_eq!(seen.bytes, RAW_BYTES);
        } else {
            assert!(seen.bytes < RAW_BYTES, "{seen:?}");
        }
    }
}
