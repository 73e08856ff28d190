//! The fault matrix: one test per failure a long-lived TCP client meets, each proving that the
//! link keeps working and accounts for every frame.
//!
//! Every scenario states at its top, and checks:
//! - the expected sequence of states;
//! - its detection bound (how soon the link must notice), measured on the real clock with
//!   generous slack and printed with `eprintln!` (run with `--nocapture` to see the figures);
//! - the accounting identity `submitted = sent + abandoned + rejected + queued`
//!   (`Metrics::unaccounted() == 0`), and that every `Abandoned` event matches the counters;
//! - that no frame reached the peer twice: payloads carry sequence numbers
//!   (`util::seq_payload`), and what the peer received (or echoed) is checked for duplicates
//!   and order.
//!
//! Peers are the scripted ones of `tests/util` on 127.0.0.1, a copy of this test binary run as
//! a child process (to be killed with SIGKILL), `redis-server` (ignored: needs redis-server), or
//! a peer inside network namespaces this file creates (ignored: needs root). The non-ignored
//! part runs in well under a minute in debug mode.
//!
//! Every test holds [`PROCESS`] for reading; the leak test holds it for writing, because it
//! counts the threads and file descriptors of the whole process.

mod netns;
mod util;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use relink::{
    AbandonReason, Builder, Cause, Codec, CodecError, Context, Event, Events, Heartbeat, Jitter,
    Link, LinkError, Metrics, Overflow, Ping, Predicate, ProofOfLife, SendError, State, Transition,
};
use util::{Behaviour, Peer, PeerEvent, RedisServer};

/// Room for scheduling delays on a loaded two-core machine, on top of every time bound.
const SLACK: Duration = Duration::from_millis(500);
/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(5);
/// How soon a FIN or RST from the peer must turn into a Backoff: the kernel delivers it at once
/// on loopback, so this is all slack.
const CLOSE_DETECT: Duration = Duration::from_secs(1);
/// Bytes of one `seq_payload` line on the wire: 14 bytes and a newline.
const LINE: usize = 15;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Held for reading by every test, for writing by the test that counts the process's threads
/// and file descriptors (which every other test changes).
static PROCESS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    PROCESS.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    PROCESS.write().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------
// Watching a link
// ---------------------------------------------------------------------------------------

/// Everything a link reported, taken from its event channel by the test thread.
struct Watch {
    events: Events,
    transitions: Vec<(Instant, Transition)>,
    frames: Vec<Vec<u8>>,
    abandoned: Vec<(Vec<u8>, AbandonReason)>,
    errors: Vec<LinkError>,
}

impl Watch {
    fn new(link: &Link) -> Watch {
        Watch {
            events: link.events().clone(),
            transitions: Vec::new(),
            frames: Vec::new(),
            abandoned: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn record(&mut self, ev: Event) -> Option<Transition> {
        match ev {
            Event::State(t) => {
                self.transitions.push((Instant::now(), t.clone()));
                Some(t)
            }
            Event::Frame(f) => {
                self.frames.push(f);
                None
            }
            Event::Abandoned { frame, reason } => {
                self.abandoned.push((frame, reason));
                None
            }
            Event::Error(e) => {
                self.errors.push(e);
                None
            }
            _ => None,
        }
    }

    /// Takes events until a transition satisfies `f`; returns it with the instant it was
    /// received. Panics at `timeout` with every transition seen so far.
    fn until(
        &mut self,
        timeout: Duration,
        f: impl Fn(&Transition) -> bool,
    ) -> (Instant, Transition) {
        let deadline = Instant::now() + timeout;
        loop {
            match self.events.recv_deadline(deadline) {
                Ok(ev) => {
                    if let Some(t) = self.record(ev) {
                        if f(&t) {
                            return (self.transitions.last().expect("just pushed").0, t);
                        }
                    }
                }
                Err(e) => panic!(
                    "no matching transition within {timeout:?} ({e}); seen: {}",
                    self.trace()
                ),
            }
        }
    }

    /// Takes events until `n` frames arrived in all; false at the timeout.
    fn frames_until(&mut self, n: usize, timeout: Duration) -> bool {
        self.until_frames(timeout, |f| f.len() >= n)
    }

    /// Takes events until the frames received so far satisfy `f`; false at the timeout.
    fn until_frames(&mut self, timeout: Duration, f: impl Fn(&[Vec<u8>]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while !f(&self.frames) {
            match self.events.recv_deadline(deadline) {
                Ok(ev) => {
                    self.record(ev);
                }
                Err(_) => return false,
            }
        }
        true
    }

    /// Takes events for `d`; the first transition among them, if any.
    fn quiet_for(&mut self, d: Duration) -> Option<Transition> {
        let deadline = Instant::now() + d;
        let mut first = None;
        while let Ok(ev) = self.events.recv_deadline(deadline) {
            if let Some(t) = self.record(ev) {
                first.get_or_insert(t);
            }
        }
        first
    }

    /// Takes every event waiting now.
    fn drain(&mut self) {
        while let Ok(ev) = self.events.try_recv() {
            self.record(ev);
        }
    }

    /// After `close`: takes events until the channel is exhausted (bounded).
    fn finish(&mut self) {
        let deadline = Instant::now() + T;
        while let Ok(ev) = self.events.recv_deadline(deadline) {
            self.record(ev);
        }
        assert!(
            Instant::now() < deadline,
            "the event channel was not exhausted after close"
        );
    }

    /// Transitions received from index `from` on.
    fn since(&self, from: usize) -> Vec<Transition> {
        self.transitions[from..]
            .iter()
            .map(|(_, t)| t.clone())
            .collect()
    }

    fn trace(&self) -> String {
        show(&self.since(0))
    }
}

fn show(ts: &[Transition]) -> String {
    let parts: Vec<String> = ts
        .iter()
        .map(|t| format!("{}->{}({},attempt={})", t.from, t.to, t.cause, t.attempt))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The delay a backoff of `base`, factor 2 and cap `max` draws around after `attempt`
/// failures in a row, before jitter.
fn nominal(base: Duration, max: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.saturating_sub(1).min(20))
        .min(max)
}

/// Asserts that each Backoff's delay is its nominal delay ± 10 % (proportional jitter).
fn assert_delays_follow(backoffs: &[&Transition], base: Duration, max: Duration, what: &str) {
    for t in backoffs {
        let d = t.next_retry.expect("a Backoff carries its delay");
        let n = nominal(base, max, t.attempt);
        assert!(
            d >= n.mul_f64(0.9) && d <= n.mul_f64(1.1),
            "{what}: attempt {} drew {d:?}, not within 10 % of {n:?}",
            t.attempt
        );
    }
}

/// Asserts that every transition in `ts` is one `allowed` admits.
fn assert_only(ts: &[Transition], what: &str, allowed: impl Fn(&Transition) -> bool) {
    if let Some(bad) = ts.iter().find(|t| !allowed(t)) {
        panic!(
            "{what}: unexpected transition {}->{}({}); all: {}",
            bad.from,
            bad.to,
            bad.cause,
            show(ts)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Frames and accounting
// ---------------------------------------------------------------------------------------

/// Sends `seq_payload(n)` for every `n` in `range`; none may be refused.
fn send_seqs(link: &Link, range: std::ops::Range<u64>) {
    for n in range {
        link.send(util::seq_payload(n))
            .unwrap_or_else(|e| panic!("send of frame {n} refused: {e:?}"));
    }
}

/// The sequence numbers of `frames`, skipping exactly the frames in `skip`; panics on any
/// other frame.
fn seqs_of(frames: &[Vec<u8>], skip: &[&[u8]]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| !skip.contains(&f.as_slice()))
        .map(|f| {
            util::parse_seq(f)
                .unwrap_or_else(|| panic!("a frame nobody sent: {:?}", String::from_utf8_lossy(f)))
        })
        .collect()
}

/// The sequence numbers of the lines in `bytes` (what a peer received).
fn line_seqs(bytes: &[u8]) -> Vec<u64> {
    seqs_of(&util::decode_lines(bytes).0, &[])
}

/// Asserts that `got` is exactly `want`, in order, each once; says what is duplicated or
/// missing otherwise.
fn assert_each_once_in_order(got: &[u64], want: std::ops::Range<u64>, what: &str) {
    let dups = util::duplicates(got);
    assert!(dups.is_empty(), "{what}: received twice: {dups:?}");
    let seen: HashSet<u64> = got.iter().copied().collect();
    let missing: Vec<u64> = want.clone().filter(|n| !seen.contains(n)).collect();
    assert!(missing.is_empty(), "{what}: never arrived: {missing:?}");
    let extra: Vec<u64> = got.iter().copied().filter(|n| !want.contains(n)).collect();
    assert!(extra.is_empty(), "{what}: never sent: {extra:?}");
    assert_eq!(
        util::first_out_of_order(got),
        None,
        "{what}: out of order: {got:?}"
    );
}

/// `submitted = sent + abandoned + rejected + queued`, exactly.
fn assert_accounted(m: &Metrics, what: &str) {
    assert_eq!(
        m.unaccounted(),
        0,
        "{what}: submitted {} != sent {} + abandoned {} + rejected {} + queued {}: {m:?}",
        m.frames_submitted,
        m.frames_sent,
        m.abandoned.total(),
        m.frames_rejected,
        m.outbox_frames
    );
}

/// Every `Abandoned` event is counted under its reason, and nothing else is.
fn assert_abandoned_match(m: &Metrics, abandoned: &[(Vec<u8>, AbandonReason)], what: &str) {
    let mut by_reason: HashMap<AbandonReason, u64> = HashMap::new();
    for (_, r) in abandoned {
        *by_reason.entry(*r).or_default() += 1;
    }
    let n = |r| by_reason.get(&r).copied().unwrap_or(0);
    assert_eq!(
        (
            n(AbandonReason::Expired),
            n(AbandonReason::Overflow),
            n(AbandonReason::Shutdown),
            n(AbandonReason::ConnectionLost)
        ),
        (
            m.abandoned.expired,
            m.abandoned.overflow,
            m.abandoned.shutdown,
            m.abandoned.connection_lost
        ),
        "{what}: Abandoned events (expired, overflow, shutdown, connection-lost) disagree with \
         the counters"
    );
}

/// `close` with a measured duration, asserting it is within `timeout + linger + slack`.
fn timed_close(link: &Link, timeout: Duration, what: &str) -> (Metrics, Duration) {
    let linger = relink::defaults::LINGER;
    let t0 = Instant::now();
    let m = link.close(timeout);
    let took = t0.elapsed();
    let bound = timeout + linger + SLACK;
    assert!(
        took <= bound,
        "{what}: close({timeout:?}) took {took:?}; the bound is {bound:?}"
    );
    assert_eq!(link.state(), State::Closed, "{what}: state after close");
    assert_eq!(m.state, State::Closed, "{what}: final metrics");
    (m, took)
}

// ---------------------------------------------------------------------------------------
// A peer in a child process (to be killed with SIGKILL)
// ---------------------------------------------------------------------------------------

/// Env var giving the child peer its port; the helper test does nothing without it.
const CHILD_PORT_VAR: &str = "RELINK_FAULTS_CHILD_PEER_PORT";
/// Name of the helper test, for `--exact`.
const CHILD_PEER_TEST: &str = "child_peer_helper_echoes_on_the_port_it_is_given_until_killed";
/// The line the child prints once it listens.
const CHILD_READY: &str = "relink-faults-child-peer listening";

/// The SIGKILL test runs this test binary again, filtered to this test, with the port in
/// `RELINK_FAULTS_CHILD_PEER_PORT`, as an echo peer to kill. Run on its own, it checks that
/// role: it starts itself as such a child and expects its bytes echoed.
#[test]
#[ignore = "starts a child process; the SIGKILL test relies on it"]
fn child_peer_helper_echoes_on_the_port_it_is_given_until_killed() {
    let Ok(port) = std::env::var(CHILD_PORT_VAR) else {
        use std::io::{Read as _, Write as _};
        let port = util::free_port();
        let child = ChildPeer::start(port);
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the child listens");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"ping\n").unwrap();
        let mut back = [0u8; 5];
        s.read_exact(&mut back).expect("the child echoes");
        assert_eq!(&back, b"ping\n");
        drop(child);
        return;
    };
    let port: u16 = port.parse().expect("a port number");
    let peer = Peer::start_on(port, Behaviour::Echo).expect("listen on the given port");
    println!("{CHILD_READY} {}", peer.port());
    // Runs until killed, or until the parent closes our stdin (or dies).
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    peer.stop();
}

/// This test binary, re-run as an echo peer on `port`. Killed (SIGKILL) and reaped on drop.
struct ChildPeer {
    child: Option<Child>,
}

impl ChildPeer {
    /// Starts the child and waits (bounded) until it listens.
    fn start(port: u16) -> ChildPeer {
        let exe = std::env::current_exe().expect("path of the test binary");
        let mut cmd = Command::new(exe);
        cmd.args([CHILD_PEER_TEST, "--exact", "--ignored", "--nocapture"])
            .env(CHILD_PORT_VAR, port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec here.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn the child peer");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = crossbeam_channel::unbounded::<String>();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let peer = ChildPeer { child: Some(child) };
        wait_child_line(&rx, port);
        peer
    }

    /// SIGKILL, then reap.
    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the child peer");
            let _ = child.wait();
        }
    }
}

fn wait_child_line(rx: &Receiver<String>, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match rx.recv_deadline(deadline) {
            Ok(line) if line.starts_with(CHILD_READY) => return,
            Ok(_) => {}
            Err(e) => panic!("the child peer on port {port} did not come up: {e}"),
        }
    }
}

impl Drop for ChildPeer {
    fn drop(&mut self) {
        self.kill9();
    }
}

// ---------------------------------------------------------------------------------------
// Network namespaces
// ---------------------------------------------------------------------------------------

/// Builds a link on a thread that entered network namespace `ns`, with a libzmq context of
/// its own created there: libzmq starts its IO thread at the context's first socket, and every
/// thread inherits the namespace of the thread that starts it, so the link's IO thread and
/// libzmq's both live in `ns` while the test thread stays where it is.
fn build_in_namespace(ns: &str, make: impl FnOnce(&Context) -> Builder + Send + 'static) -> Link {
    use std::os::unix::io::AsRawFd;
    let path = std::path::Path::new("/run/netns").join(ns);
    thread::spawn(move || {
        let file =
            std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        // SAFETY: setns(2) with a valid namespace descriptor; it changes this thread only.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "setns into {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        let ctx = Context::with_max_sockets(64).expect("a context of its own");
        make(&ctx)
            .build()
            .expect("build the link inside the namespace")
    })
    .join()
    .expect("the namespace thread panicked")
}

fn netns_pair() -> netns::NetnsPair {
    netns::NetnsPair::create()
        .unwrap_or_else(|e| panic!("this test needs root and network namespaces: {e}"))
}

// ---------------------------------------------------------------------------------------
// 1. Graceful restart
// ---------------------------------------------------------------------------------------

/// Expected states: Ready -(peer-closed)-> Backoff, then any number of
/// Connecting -(refused)-> Backoff -(retry-timer)-> Connecting while the port is closed, then
/// Connecting -> Connected -> Ready once the peer is back.
/// Detection bound: Backoff within `CLOSE_DETECT` (1 s) of the stop (the FIN arrives at once);
/// Ready within backoff max (200 ms) + two libzmq redial intervals (200 ms) + slack of the
/// restart.
/// Frames: 100 before, 100 during the outage, 100 after: each reaches the peer exactly once,
/// in order; nothing abandoned.
#[test]
fn a_peer_that_restarts_gracefully_gets_every_frame_sent_before_during_and_after_exactly_once() {
    let _g = shared();
    let port = util::free_port();
    let peer = Peer::start_on(port, Behaviour::Sink).expect("start the peer");
    let link = Link::builder(&util::endpoint_for(port))
        .codec(Codec::lines())
        .backoff(ms(20), ms(200))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Ready);
    send_seqs(&link, 0..100);
    assert!(
        peer.wait_received_len(100 * LINE, T),
        "the first 100 frames did not arrive"
    );
    let before = peer.received_all();

    let mark = w.transitions.len();
    let stopped_at = Instant::now();
    peer.stop();
    let (at, t) = w.until(T, |t| t.from == State::Ready);
    let detect = at - stopped_at;
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::PeerClosed),
        "{}",
        w.trace()
    );
    assert!(detect <= CLOSE_DETECT, "noticed the close after {detect:?}");
    send_seqs(&link, 100..200);
    // The port is closed: at least one refused attempt before the peer returns.
    w.until(T, |t| t.cause == Cause::Refused);

    let restarted_at = Instant::now();
    let peer = Peer::start_on(port, Behaviour::Sink).expect("restart on the same port");
    let (ready_at, _) = w.until(T, |t| t.to == State::Ready);
    let back = ready_at - restarted_at;
    let back_bound = ms(200) + ms(200) + SLACK;
    assert!(back <= back_bound, "Ready {back:?} after the restart");
    send_seqs(&link, 200..300);
    assert!(
        peer.wait_received_len(200 * LINE, T),
        "frames sent during and after the outage did not arrive"
    );
    let path = w.since(mark);
    assert_only(&path, "graceful restart", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Ready, State::Backoff, Cause::PeerClosed)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
                | (State::Connecting, State::Backoff, Cause::Refused)
                | (State::Connecting, State::Connected, Cause::TcpConnected)
                | (State::Connected, State::Ready, Cause::Alive)
        )
    });

    let (m, _) = timed_close(&link, ms(500), "graceful restart");
    w.finish();
    let mut all = line_seqs(&before);
    all.extend(line_seqs(&peer.received_all()));
    assert_each_once_in_order(&all, 0..300, "graceful restart");
    assert_accounted(&m, "graceful restart");
    assert_abandoned_match(&m, &w.abandoned, "graceful restart");
    assert_eq!((m.frames_sent, m.abandoned.total()), (300, 0), "{m:?}");
    eprintln!(
        "measured: graceful restart: Backoff(peer-closed) {detect:?} after the stop (bound \
         {CLOSE_DETECT:?}); Ready {back:?} after the restart (bound {back_bound:?}); path {}",
        show(&path)
    );
}

// ---------------------------------------------------------------------------------------
// 2. SIGKILL
// ---------------------------------------------------------------------------------------

/// Expected states: Ready -(peer-closed)-> Backoff (the kernel closes a killed process's
/// sockets: FIN, or RST with unread data), Connecting -(refused)-> Backoff while nothing
/// listens, then Connected -> Ready once a new peer process listens on the same port.
/// Detection bound: Backoff within `CLOSE_DETECT` (1 s) of the SIGKILL.
/// Frames: an echo peer; 50 before the kill, 50 during the outage: each echoed exactly once,
/// in order (the echo is the evidence of arrival: the peer lives in another process).
#[test]
fn a_peer_killed_with_sigkill_is_noticed_at_once_and_used_again_when_a_new_one_listens() {
    let _g = shared();
    let port = util::free_port();
    let mut child = ChildPeer::start(port);
    let link = Link::builder(&util::endpoint_for(port))
        .codec(Codec::lines())
        .backoff(ms(20), ms(200))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Ready);
    send_seqs(&link, 0..50);
    assert!(w.frames_until(50, T), "the first 50 frames were not echoed");

    let mark = w.transitions.len();
    let killed_at = Instant::now();
    child.kill9();
    let (at, t) = w.until(T, |t| t.from == State::Ready);
    let detect = at - killed_at;
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::PeerClosed),
        "{}",
        w.trace()
    );
    assert!(detect <= CLOSE_DETECT, "noticed the kill after {detect:?}");
    send_seqs(&link, 50..100);
    w.until(T, |t| t.cause == Cause::Refused);

    let _child = ChildPeer::start(port);
    w.until(T, |t| t.to == State::Ready);
    assert!(
        w.frames_until(100, T),
        "frames queued during the outage were not echoed after the restart"
    );
    let path = w.since(mark);
    assert_only(&path, "SIGKILL", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Ready, State::Backoff, Cause::PeerClosed)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
                | (State::Connecting, State::Backoff, Cause::Refused)
                | (State::Connecting, State::Connected, Cause::TcpConnected)
                | (State::Connected, State::Ready, Cause::Alive)
        )
    });
    let (m, _) = timed_close(&link, ms(500), "SIGKILL");
    w.finish();
    assert_each_once_in_order(&seqs_of(&w.frames, &[]), 0..100, "SIGKILL echoes");
    assert_accounted(&m, "SIGKILL");
    assert_abandoned_match(&m, &w.abandoned, "SIGKILL");
    assert_eq!((m.frames_sent, m.frames_received), (100, 100), "{m:?}");
    eprintln!(
        "measured: SIGKILL: Backoff(peer-closed) {detect:?} after the kill (bound \
         {CLOSE_DETECT:?}); path {}",
        show(&path)
    );
}

// ---------------------------------------------------------------------------------------
// 3. SIGSTOP / SIGCONT
// ---------------------------------------------------------------------------------------

/// Expected states: Ready -(heartbeat-timeout)-> Backoff after SIGSTOP; while stopped, new
/// connects still succeed (the kernel completes the handshake), so
/// Connecting -> Connected -(handshake-timeout)-> Backoff repeats: the link waits for a +PONG
/// to its hello before it calls a connection Ready, so no frame is written into a stopped
/// server; after SIGCONT, Connected -(alive)-> Ready.
/// Detection bound: `Heartbeat::bound()` = 200 ms × (2 + 1) = 600 ms, + slack.
/// Frames: `PING seq-N` commands, each answered by a `seq-N` bulk string; 20 before, 20 during
/// the stop: each answered exactly once, in order.
#[test]
#[ignore = "needs redis-server"]
fn a_sigstopped_redis_server_is_declared_dead_within_the_heartbeat_bound_and_every_command_is_answered_once_after_sigcont(
) {
    let _g = shared();
    let redis = RedisServer::start().expect("this test needs redis-server on PATH");
    let pong = || Predicate::starts_with(&b"+PONG"[..]);
    let hb = Heartbeat::new(ms(200), Ping::Raw(b"PING\r\n".to_vec()))
        .max_missed(2)
        .reply(pong());
    let bound = hb.bound();
    let link = Link::builder(&redis.endpoint())
        .codec(Codec::lines())
        .heartbeat(hb)
        .ready_when(ProofOfLife::Handshake {
            hello: vec![b"PING".to_vec()],
            accept: pong(),
            timeout: ms(500),
        })
        .backoff(ms(50), ms(400))
        .build()
        .expect("build");
    let command = |n: u64| {
        let mut c = b"PING ".to_vec();
        c.extend_from_slice(&util::seq_payload(n));
        c
    };
    // Replies: `$14` then `seq-N` per command; a `+PONG` no ping waited for is delivered too.
    let answers = |frames: &[Vec<u8>]| -> Vec<u64> {
        frames
            .iter()
            .filter(|f| !f.starts_with(b"$") && !f.starts_with(b"+PONG"))
            .map(|f| util::parse_seq(f).unwrap_or_else(|| panic!("unexpected reply {f:?}")))
            .collect()
    };
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Ready);
    for n in 0..20 {
        link.send(command(n)).expect("send");
    }
    assert!(
        w.until_frames(T, |f| answers(f).len() >= 20),
        "the first 20 commands were not answered"
    );

    let mark = w.transitions.len();
    redis.stop_signal();
    let stopped_at = Instant::now();
    let (at, t) = w.until(bound + SLACK + T, |t| t.from == State::Ready);
    let detect = at - stopped_at;
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::HeartbeatTimeout),
        "{}",
        w.trace()
    );
    assert!(
        detect <= bound + SLACK,
        "declared dead {detect:?} after SIGSTOP; the bound is {bound:?} + {SLACK:?}"
    );
    for n in 20..40 {
        link.send(command(n)).expect("send");
    }
    // A connection to the stopped server is made, and refused the Ready state.
    w.until(T, |t| t.cause == Cause::HandshakeTimeout);
    assert_eq!(
        link.metrics().outbox_frames,
        20,
        "frames left the outbox while stopped"
    );

    redis.cont_signal();
    let cont_at = Instant::now();
    let (ready_at, _) = w.until(T, |t| t.to == State::Ready);
    assert!(
        w.until_frames(T, |f| answers(f).len() >= 40),
        "the commands queued during the stop were not answered; {}",
        w.trace()
    );
    let path = w.since(mark);
    assert_only(&path, "SIGSTOP", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Ready, State::Backoff, Cause::HeartbeatTimeout)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
                | (State::Connecting, State::Connected, Cause::TcpConnected)
                | (State::Connected, State::Backoff, Cause::HandshakeTimeout)
                | (State::Connected, State::Ready, Cause::Alive)
        )
    });
    // And it stays up: two heartbeat bounds without a transition.
    let late = w.quiet_for(2 * bound);
    assert!(late.is_none(), "left Ready after SIGCONT: {}", w.trace());
    let (m, _) = timed_close(&link, ms(500), "SIGSTOP");
    w.finish();
    assert_each_once_in_order(&answers(&w.frames), 0..40, "SIGSTOP answers");
    assert_accounted(&m, "SIGSTOP");
    assert_abandoned_match(&m, &w.abandoned, "SIGSTOP");
    assert_eq!(m.frames_sent, 40, "{m:?}");
    eprintln!(
        "measured: SIGSTOP: Backoff(heartbeat-timeout) {detect:?} after SIGSTOP (bound \
         {bound:?} + {SLACK:?}); Ready {:?} after SIGCONT; path {}",
        ready_at - cont_at,
        show(&path)
    );
}

// ---------------------------------------------------------------------------------------
// 4. Connection refused for a long time
// ---------------------------------------------------------------------------------------

/// A 30 s refusal, scaled down to 3 s with a matching short backoff (50 ms .. 800 ms); the
/// 30 s and 60 s versions run in virtual time in `src/machine_tests.rs`
/// (`a_long_outage_warns_a_handful_of_times_not_once_per_retry`).
/// Expected states: Connecting -(refused)-> Backoff -(retry-timer)-> Connecting, repeated, with
/// `attempt` growing and the drawn delays growing (proportional ±10 % jitter here, so growth
/// is visible in each step) up to the cap; Connected -> Ready once the peer listens.
/// Detection bound: each refusal within two libzmq redial intervals (the first failure is left
/// to libzmq's own redial) + slack: 200 ms + 500 ms.
/// Frames: one every 100 ms during the outage, no ttl: all 30 arrive once, in order.
#[test]
fn a_link_refused_for_three_seconds_retries_with_growing_delays_and_delivers_every_frame_afterwards(
) {
    let _g = shared();
    let port = util::free_port();
    let link = Link::builder(&util::endpoint_for(port))
        .codec(Codec::lines())
        .backoff(ms(50), ms(800))
        .jitter(Jitter::Proportional(0.1))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        send_seqs(&link, sent..sent + 1);
        sent += 1;
        // Events are taken while waiting for the next send.
        w.quiet_for(ms(100));
    }
    let outage = w.since(0);
    let peer = Peer::start_on(port, Behaviour::Sink).expect("the peer comes up");
    w.until(T, |t| t.to == State::Ready);
    assert!(
        peer.wait_received_len(sent as usize * LINE, T),
        "frames sent during the outage did not all arrive"
    );
    let (m, _) = timed_close(&link, ms(500), "refused");
    w.finish();

    assert_only(&outage, "refused", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Idle, State::Connecting, Cause::Start)
                | (State::Connecting, State::Backoff, Cause::Refused)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
        )
    });
    let backoffs: Vec<&Transition> = outage.iter().filter(|t| t.to == State::Backoff).collect();
    assert!(
        backoffs.len() >= 5,
        "only {} refused attempts in 3 s: {}",
        backoffs.len(),
        show(&outage)
    );
    let attempts: Vec<u32> = backoffs.iter().map(|t| t.attempt).collect();
    assert_eq!(
        util::first_out_of_order(&attempts),
        None,
        "the attempt counter did not grow: {attempts:?}"
    );
    let delays: Vec<Duration> = backoffs
        .iter()
        .map(|t| t.next_retry.expect("a Backoff carries its delay"))
        .collect();
    // 50 ms × 2^(attempt − 1) ± 10 %, capped at 800 ms: each step grows until the cap.
    assert_delays_follow(&backoffs, ms(50), ms(800), "refused");
    assert!(
        delays[0] < delays[1] && delays[1] < delays[2],
        "delays did not grow: {delays:?}"
    );
    // Each refusal came quickly after its Connecting.
    let mut refusal = Duration::ZERO;
    let stamped = &w.transitions[..outage.len()];
    for pair in stamped.windows(2) {
        if pair[0].1.to == State::Connecting && pair[1].1.to == State::Backoff {
            refusal = refusal.max(pair[1].0 - pair[0].0);
        }
    }
    let refusal_bound = ms(200) + SLACK;
    assert!(
        refusal <= refusal_bound,
        "a refusal took {refusal:?} to notice"
    );
    assert_each_once_in_order(&line_seqs(&peer.received_all()), 0..sent, "refused");
    assert_accounted(&m, "refused");
    assert_abandoned_match(&m, &w.abandoned, "refused");
    assert_eq!((m.frames_sent, m.abandoned.total()), (sent, 0), "{m:?}");
    eprintln!(
        "measured: refused 3 s: {} refused attempts, attempts {attempts:?}, delays {delays:?}; \
         slowest refusal noticed in {refusal:?} (bound {refusal_bound:?}); {sent} frames \
         queued, all delivered",
        backoffs.len()
    );
}

// ---------------------------------------------------------------------------------------
// 5. Flapping
// ---------------------------------------------------------------------------------------

/// Expected states: Connecting -> Connected -> Ready -(peer-closed)-> Backoff, over and over
/// (the TCP connect is the proof of life here, so every flap reaches Ready), with `attempt`
/// growing at every Backoff: a connection that lasts less than `min_stable` never resets it.
/// Then, the peer echoing: Ready, and stable (no transition for `min_stable` + 300 ms, the
/// counter back to 0).
/// Detection bound: each close noticed within `CLOSE_DETECT`; each delay is 25 ms ×
/// 2^(attempt − 1) ± 10 % (proportional jitter here, so each step shows the growth), and the
/// gaps between the link's dials grow with it.
/// Frames: one every 20 ms while flapping, 20 after the switch. Frames handed to a connection
/// the peer closes at once are lost with it (sent, never read: the contract's "handed to the
/// socket"); none reaches the peer twice or out of order, the echo matches what the peer read,
/// and every frame sent after the switch arrives.
#[test]
fn a_flapping_peer_gets_growing_gaps_and_a_never_reset_attempt_counter_then_a_stable_link() {
    let _g = shared();
    let peer = Peer::start(Behaviour::AcceptThenClose);
    let min_stable = ms(500);
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::lines())
        .backoff(ms(25), ms(800))
        .jitter(Jitter::Proportional(0.1))
        .min_stable(min_stable)
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let mut next = 0u64;
    let flaps = 6;
    let deadline = Instant::now() + Duration::from_secs(10);
    while w
        .transitions
        .iter()
        .filter(|(_, t)| t.to == State::Backoff)
        .count()
        < flaps
    {
        assert!(Instant::now() < deadline, "too slow to flap: {}", w.trace());
        send_seqs(&link, next..next + 1);
        next += 1;
        w.quiet_for(ms(20));
    }
    let flapping = w.since(0);
    let accepts_flapping = peer.accept_count();

    peer.set_behaviour(Behaviour::Echo);
    // Connections accepted from now on echo: once the last of these frames comes back, the
    // link is Ready on an echoing connection.
    let first_after = next;
    send_seqs(&link, next..next + 20);
    next += 20;
    let last = next - 1;
    assert!(
        w.until_frames(T, |f| f.iter().any(|f| util::parse_seq(f) == Some(last))),
        "no echo after the switch: {}",
        w.trace()
    );
    let left = w.quiet_for(min_stable + ms(300));
    assert!(
        left.is_none(),
        "not stable with an echoing peer: {}",
        w.trace()
    );
    let m_stable = link.metrics();
    assert_eq!(
        (m_stable.state, m_stable.consecutive_failures),
        (State::Ready, 0),
        "the counter did not reset after min_stable"
    );

    let (m, _) = timed_close(&link, ms(500), "flapping");
    w.finish();

    // The flapping phase.
    assert_only(&flapping, "flapping", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Idle, State::Connecting, Cause::Start)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
                | (State::Connecting, State::Connected, Cause::TcpConnected)
                | (State::Connected, State::Ready, Cause::Alive)
                | (
                    State::Ready | State::Connected,
                    State::Backoff,
                    Cause::PeerClosed
                )
                | (State::Connecting, State::Backoff, Cause::Refused)
        )
    });
    let backoffs: Vec<&Transition> = flapping.iter().filter(|t| t.to == State::Backoff).collect();
    let attempts: Vec<u32> = backoffs.iter().map(|t| t.attempt).collect();
    assert_eq!(
        util::first_out_of_order(&attempts),
        None,
        "the attempt counter was reset while flapping: {attempts:?}"
    );
    let mut detect = Duration::ZERO;
    let stamped = &w.transitions[..flapping.len()];
    for pair in stamped.windows(2) {
        if pair[0].1.to == State::Ready && pair[1].1.to == State::Backoff {
            detect = detect.max(pair[1].0 - pair[0].0);
        }
    }
    assert!(detect <= CLOSE_DETECT, "a close noticed after {detect:?}");
    assert_delays_follow(&backoffs, ms(25), ms(800), "flapping");
    // The gaps between the link's own dials grow with them.
    let dials: Vec<Instant> = stamped
        .iter()
        .filter(|(_, t)| t.to == State::Connecting)
        .map(|(at, _)| *at)
        .collect();
    let gaps: Vec<Duration> = dials.windows(2).map(|p| p[1] - p[0]).collect();
    assert!(gaps.len() >= 4, "too few dials: {}", show(&flapping));
    assert_eq!(
        util::first_out_of_order(&gaps[..4]),
        None,
        "the gaps between dials did not grow: {gaps:?}"
    );
    // Frames: nothing twice, nothing out of order, everything after the switch arrived.
    let at_peer: Vec<u64> = peer.received().iter().flat_map(|c| line_seqs(c)).collect();
    assert!(
        util::duplicates(&at_peer).is_empty(),
        "duplicated: {at_peer:?}"
    );
    assert_eq!(util::first_out_of_order(&at_peer), None, "{at_peer:?}");
    let echoed = seqs_of(&w.frames, &[]);
    assert!(
        util::duplicates(&echoed).is_empty(),
        "echoed twice: {echoed:?}"
    );
    assert_eq!(echoed, at_peer, "the echo differs from what the peer read");
    let got: HashSet<u64> = at_peer.iter().copied().collect();
    let missing: Vec<u64> = (first_after..next).filter(|n| !got.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "sent to the echoing peer, never arrived: {missing:?}"
    );
    let lost = m.frames_sent - at_peer.len() as u64;
    assert_accounted(&m, "flapping");
    assert_abandoned_match(&m, &w.abandoned, "flapping");
    assert_eq!((m.frames_sent, m.abandoned.total()), (next, 0), "{m:?}");
    eprintln!(
        "measured: flapping: {} flaps, attempts {attempts:?}, gaps between dials {gaps:?}; \
         slowest close noticed in {detect:?} (bound {CLOSE_DETECT:?}); {lost} of {next} frames \
         lost with flapping connections, none twice; {accepts_flapping} connections accepted \
         while the link dialled {} times",
        backoffs.len(),
        dials.len()
    );
}

// ---------------------------------------------------------------------------------------
// 6. Connect timeout
// ---------------------------------------------------------------------------------------

/// A SYN that is never answered: the peer address lives in namespace B, whose route back to
/// the client's namespace A is a blackhole, so neither a SYN-ACK nor a RST ever returns.
/// Expected states: Connecting -(connect-timeout)-> Backoff -(retry-timer)-> Connecting ->
/// ... The documented behaviour: libzmq gives up after ZMQ_CONNECT_TIMEOUT and reports it as a
/// plain failed dial (CONNECT_RETRIED); relink labels a dial that took at least
/// `connect_timeout` as ConnectTimeout, never Refused.
/// Detection bound: the first failure is left to libzmq's own redial (`native_retries` 1), so
/// two dials: 2 × (connect_timeout 500 ms + 2 × reconnect_ivl 100 ms) = 1.4 s, + slack.
/// Frames: 3 queued, never sent; close gives them back as Abandoned(Shutdown).
#[test]
#[ignore = "needs root and network namespaces"]
fn a_dial_whose_syn_is_never_answered_backs_off_with_connect_timeout_within_the_bound() {
    let _g = shared();
    let pair = netns_pair();
    pair.ip(
        &pair.b,
        &["route", "add", "blackhole", &format!("{}/32", pair.addr_a)],
    )
    .unwrap_or_else(|e| panic!("cannot add the blackhole route in B: {e}"));
    let endpoint = format!("tcp://{}:7001", pair.addr_b);
    let connect_timeout = ms(500);
    let built_at = Instant::now();
    let link = build_in_namespace(&pair.a, move |ctx| {
        Link::builder(&endpoint)
            .context(ctx)
            .codec(Codec::lines())
            .connect_timeout(connect_timeout)
            .backoff(ms(50), ms(200))
    });
    let mut w = Watch::new(&link);
    send_seqs(&link, 0..3);
    let bound = 2 * (connect_timeout + 2 * relink::defaults::RECONNECT_IVL) + SLACK;
    let (at, t) = w.until(bound + T, |t| t.to == State::Backoff);
    let detect = at - built_at;
    assert_eq!(
        (t.from, t.cause),
        (State::Connecting, Cause::ConnectTimeout),
        "{}",
        w.trace()
    );
    assert!(
        detect <= bound,
        "timed out after {detect:?}; bound {bound:?}"
    );
    assert!(
        detect >= connect_timeout,
        "a timeout after {detect:?}, before connect_timeout"
    );
    // And the next attempt times out the same way.
    let (at2, t2) = w.until(bound + T, |t| t.to == State::Backoff);
    assert_eq!(t2.cause, Cause::ConnectTimeout, "{}", w.trace());
    let (m, _) = timed_close(&link, ms(200), "connect timeout");
    w.finish();
    assert_accounted(&m, "connect timeout");
    assert_abandoned_match(&m, &w.abandoned, "connect timeout");
    assert_eq!((m.frames_sent, m.abandoned.shutdown), (0, 3), "{m:?}");
    let back: Vec<u64> = seqs_of(
        &w.abandoned
            .iter()
            .map(|(f, _)| f.clone())
            .collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(back, vec![0, 1, 2]);
    eprintln!(
        "measured: connect timeout: Backoff(connect-timeout) {detect:?} after the start \
         (bound {bound:?}); the next one {:?} later; path {}",
        at2 - at,
        w.trace()
    );
}

// ---------------------------------------------------------------------------------------
// 7. Half-open connection
// ---------------------------------------------------------------------------------------

/// A blackhole route for the peer is added in the client's namespace while the link is Ready:
/// the connection goes quiet without a FIN or RST.
/// Expected states: Ready -(heartbeat-timeout)-> Backoff; while the route is there, dials fail
/// (Connecting -> Backoff, refused or connect-timeout); once it is removed, Connected -> Ready.
/// Detection bound: `Heartbeat::bound()` = 200 ms × (2 + 1) = 600 ms, + slack.
/// Frames: an echo peer (socat); 20 echoed before, 20 queued during the outage and echoed
/// after it: each echoed exactly once, in order.
#[test]
#[ignore = "needs root and network namespaces"]
fn a_half_open_connection_is_declared_dead_within_the_heartbeat_bound_and_no_frame_is_lost_or_doubled(
) {
    let _g = shared();
    let pair = netns_pair();
    let port = 7002;
    let _echo = pair
        .start_echo_in_b(port)
        .unwrap_or_else(|e| panic!("cannot start the echo peer in namespace B: {e}"));
    assert!(
        pair.wait_listening(&pair.b, port, T),
        "the echo peer does not listen in namespace B"
    );
    let hb = Heartbeat::new(ms(200), Ping::Raw(b"ping\n".to_vec()))
        .max_missed(2)
        .reply(Predicate::new(|f| f == b"ping"));
    let bound = hb.bound();
    let endpoint = format!("tcp://{}:{port}", pair.addr_b);
    let link = build_in_namespace(&pair.a, move |ctx| {
        Link::builder(&endpoint)
            .context(ctx)
            .codec(Codec::lines())
            .heartbeat(hb)
            .connect_timeout(ms(1000))
            .backoff(ms(50), ms(400))
    });
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Ready);
    send_seqs(&link, 0..20);
    let echoed = |n: usize| move |f: &[Vec<u8>]| seqs_of(f, &[b"ping"]).len() >= n;
    assert!(
        w.until_frames(T, echoed(20)),
        "the first 20 frames were not echoed"
    );

    let mark = w.transitions.len();
    pair.blackhole_b_in_a()
        .unwrap_or_else(|e| panic!("cannot add the blackhole route: {e}"));
    let silenced_at = Instant::now();
    let (at, t) = w.until(bound + SLACK + T, |t| t.from == State::Ready);
    let detect = at - silenced_at;
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::HeartbeatTimeout),
        "{}",
        w.trace()
    );
    assert!(
        detect <= bound + SLACK,
        "declared dead {detect:?} after the blackhole; bound {bound:?} + {SLACK:?}"
    );
    send_seqs(&link, 20..40);
    // At least one dial fails while the route is there.
    let (_, failed) = w.until(T, |t| t.from == State::Connecting && t.to == State::Backoff);
    pair.clear_blackhole()
        .unwrap_or_else(|e| panic!("cannot remove the blackhole route: {e}"));
    w.until(2 * T, |t| t.to == State::Ready);
    assert!(
        w.until_frames(T, echoed(40)),
        "frames queued during the outage were not echoed; {}",
        w.trace()
    );
    let path = w.since(mark);
    assert_only(&path, "half-open", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Ready, State::Backoff, Cause::HeartbeatTimeout)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
                | (
                    State::Connecting,
                    State::Backoff,
                    Cause::Refused | Cause::ConnectTimeout
                )
                | (State::Connecting, State::Connected, Cause::TcpConnected)
                | (State::Connected, State::Ready, Cause::Alive)
        )
    });
    let (m, _) = timed_close(&link, ms(500), "half-open");
    w.finish();
    assert_each_once_in_order(&seqs_of(&w.frames, &[b"ping"]), 0..40, "half-open echoes");
    assert_accounted(&m, "half-open");
    assert_abandoned_match(&m, &w.abandoned, "half-open");
    assert_eq!(m.frames_sent, 40, "{m:?}");
    eprintln!(
        "measured: half-open: Backoff(heartbeat-timeout) {detect:?} after the blackhole \
         (bound {bound:?} + {SLACK:?}); dials meanwhile failed as {}; path {}",
        failed.cause,
        show(&path)
    );
}

// ---------------------------------------------------------------------------------------
// 8. Garbage from the peer
// ---------------------------------------------------------------------------------------

/// The peer streams bytes without a newline, far past the lines codec's `max_line` (64).
/// Expected states: Ready -(protocol)-> Backoff with an `Error(Codec(LineTooLong))` event, over
/// again while the peer keeps doing it; once it echoes, Ready and a round trip.
/// Detection bound: the reset within 1 s of the connect (it takes `max_line + 1` bytes).
/// Memory bound: the link resets the connection instead of buffering: the peer manages to
/// write only what the socket buffers hold (asserted below 16 MiB of the 64 MiB it tries).
/// Frames: 10 queued while the peer misbehaves arrive once each after the switch, in order.
#[test]
fn a_peer_that_sends_an_endless_line_gets_its_connection_reset_without_a_panic_and_bounded_memory()
{
    let _g = shared();
    const TRY: usize = 64 << 20;
    // The most one connection took before the link reset it.
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    let peer = Peer::start(Behaviour::script(move |conn| {
        let chunk = vec![b'x'; 64 * 1024];
        let mut n = 0;
        while n < TRY && conn.write_all(&chunk).is_ok() {
            n += chunk.len();
        }
        counter.fetch_max(n, Ordering::SeqCst);
    }));
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::Lines { max_line: 64 })
        .backoff(ms(50), ms(200))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let (ready_at, _) = w.until(T, |t| t.to == State::Ready);
    let (at, t) = w.until(T, |t| t.from == State::Ready);
    let detect = at - ready_at;
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::Protocol),
        "{}",
        w.trace()
    );
    assert!(detect <= ms(1000), "reset {detect:?} after Ready");
    assert!(
        w.errors
            .contains(&LinkError::Codec(CodecError::LineTooLong { max: 64 })),
        "no codec error event: {:?}",
        w.errors
    );
    send_seqs(&link, 0..10);
    assert!(peer.wait_closed(0, T), "the first connection stayed open");
    peer.set_behaviour(Behaviour::Echo);
    // The next connection that echoes makes the link Ready for good.
    let deadline = Instant::now() + 2 * T;
    while !w.frames_until(10, ms(100)) {
        assert!(
            Instant::now() < deadline,
            "no echo after the switch: {}",
            w.trace()
        );
    }
    let wrote = written.load(Ordering::SeqCst);
    let (m, _) = timed_close(&link, ms(500), "endless line");
    w.finish();
    assert!(
        wrote < 16 << 20,
        "the peer wrote {wrote} bytes on one connection before the link reset it"
    );
    assert_each_once_in_order(&seqs_of(&w.frames, &[]), 0..10, "endless line");
    assert_accounted(&m, "endless line");
    assert_abandoned_match(&m, &w.abandoned, "endless line");
    assert_eq!(m.frames_sent, 10, "{m:?}");
    eprintln!(
        "measured: endless line: Backoff(protocol) {detect:?} after Ready (bound 1 s); the \
         peer wrote at most {} KiB on one connection before the reset; {} codec errors",
        wrote / 1024,
        w.errors.len()
    );
}

/// The peer announces a frame of 4 GiB − 1 bytes (length prefix `ff ff ff ff`).
/// Expected states: Ready -(protocol)-> Backoff with `Error(Codec(FrameTooLarge { len:
/// 4294967295, .. }))`, as soon as the 4 prefix bytes are in (nothing is allocated for the
/// frame); once the peer echoes, Ready and a round trip.
/// Detection bound: the reset within 1 s of the connect.
/// Frames: 10 queued meanwhile arrive once each, in order.
#[test]
fn a_length_prefix_of_four_gib_is_refused_at_once_and_the_link_reconnects() {
    let _g = shared();
    let mut garbage = vec![0xff; 4];
    garbage.extend_from_slice(b"and then some bytes");
    let peer = Peer::start(Behaviour::Garbage(garbage));
    let max = 1 << 20;
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::LengthPrefixed { max_frame: max })
        .backoff(ms(50), ms(200))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let (ready_at, _) = w.until(T, |t| t.to == State::Ready);
    let (at, t) = w.until(T, |t| t.from == State::Ready);
    let detect = at - ready_at;
    assert_eq!(
        (t.to, t.cause),
        (State::Backoff, Cause::Protocol),
        "{}",
        w.trace()
    );
    assert!(detect <= ms(1000), "reset {detect:?} after Ready");
    assert!(
        w.errors
            .contains(&LinkError::Codec(CodecError::FrameTooLarge {
                len: u32::MAX as u64,
                max
            })),
        "no codec error event: {:?}",
        w.errors
    );
    send_seqs(&link, 0..10);
    peer.set_behaviour(Behaviour::Echo);
    let deadline = Instant::now() + 2 * T;
    while !w.frames_until(10, ms(100)) {
        assert!(
            Instant::now() < deadline,
            "no echo after the switch: {}",
            w.trace()
        );
    }
    let (m, _) = timed_close(&link, ms(500), "4 GiB prefix");
    w.finish();
    assert_each_once_in_order(&seqs_of(&w.frames, &[]), 0..10, "4 GiB prefix");
    assert_accounted(&m, "4 GiB prefix");
    assert_abandoned_match(&m, &w.abandoned, "4 GiB prefix");
    assert_eq!(m.frames_sent, 10, "{m:?}");
    eprintln!(
        "measured: 4 GiB prefix: Backoff(protocol) {detect:?} after Ready (bound 1 s); {} \
         codec errors; {} bytes received in all",
        w.errors.len(),
        m.bytes_received
    );
}

// ---------------------------------------------------------------------------------------
// 9. A peer that stops reading
// ---------------------------------------------------------------------------------------

/// The peer accepts and never reads: the kernel buffers and libzmq's queue fill, then the
/// outbox (64 frames) fills, then `send` (RejectNew) refuses with the frame given back.
/// Expected states: Ready, and Ready still (a full pipe is not a failure).
/// Bounds: no `send` call takes more than 200 ms (RejectNew never waits); `close(300 ms)`
/// returns within 300 ms + linger + slack.
/// Accounting: submitted = sent + rejected + queued at every step; at close the frames still
/// queued come back as Abandoned(Shutdown), in order, and sent + abandoned = accepted (the
/// kernel's buffers may still grow and take some of them during the close's flush).
#[test]
fn a_peer_that_stops_reading_fills_the_outbox_then_sends_are_refused_with_the_frame_back() {
    let _g = shared();
    let peer = Peer::start(Behaviour::StopReadingAfter(0));
    let limit = 64;
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::length_prefixed())
        .outbox_limits(limit, 64 << 20)
        .overflow(Overflow::RejectNew)
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Ready);
    let frame = |n: u64| {
        let mut f = util::seq_payload(n);
        f.resize(16 * 1024, b'.');
        f
    };
    let mut slowest = Duration::ZERO;
    let mut accepted = 0u64;
    let mut refused = None;
    // At most 256 MiB offered; kernel buffers and libzmq's queue hold far less.
    for n in 0..16_384u64 {
        let f = frame(n);
        let t0 = Instant::now();
        let r = link.send(f.clone());
        slowest = slowest.max(t0.elapsed());
        match r {
            Ok(()) => accepted += 1,
            Err(SendError::Full(back)) => {
                assert_eq!(back, f, "the refused frame came back changed");
                refused = Some(n);
                break;
            }
            Err(e) => panic!("send failed: {e:?}"),
        }
    }
    let refused = refused.expect("the outbox never filled");
    let m = link.metrics();
    assert_accounted(&m, "stopped reader (at the first refusal)");
    assert_eq!(m.state, State::Ready, "a full pipe is not a failure");
    assert!(m.outbox_frames <= limit as u64, "{m:?}");
    // Once more: refused again, the frame given back (libzmq may have taken a few more
    // frames meanwhile, while the kernel buffers were still filling).
    let mut rejected = 1;
    let mut n = refused + 1;
    loop {
        let f = frame(n);
        match link.send(f.clone()) {
            Ok(()) => accepted += 1,
            Err(SendError::Full(back)) => {
                assert_eq!(back, f);
                rejected += 1;
                break;
            }
            Err(e) => panic!("send failed: {e:?}"),
        }
        n += 1;
        assert!(n < refused + 10_000, "the outbox never filled again");
    }
    let m = link.metrics();
    assert_accounted(&m, "stopped reader (before close)");
    assert_eq!(m.frames_rejected, rejected, "{m:?}");
    assert_eq!(m.frames_sent + m.outbox_frames, accepted, "{m:?}");
    assert!(
        slowest <= ms(200),
        "a send took {slowest:?}: RejectNew must not wait"
    );
    let (m, took) = timed_close(&link, ms(300), "stopped reader");
    w.finish();
    assert_accounted(&m, "stopped reader");
    assert_abandoned_match(&m, &w.abandoned, "stopped reader");
    assert_eq!(m.frames_sent + m.abandoned.shutdown, accepted, "{m:?}");
    let back: Vec<u64> = w
        .abandoned
        .iter()
        .map(|(f, _)| util::parse_seq(&f[..14]).expect("one of ours"))
        .collect();
    // Frames are numbered by attempt; the two refused ones were never accepted.
    let expected: Vec<u64> = (0..n)
        .filter(|k| *k != refused && *k != n)
        .skip(m.frames_sent as usize)
        .collect();
    assert_eq!(back, expected, "the frames given back at close");
    assert_only(&w.since(0), "stopped reader", |t| {
        matches!(
            (t.from, t.to),
            (State::Idle, State::Connecting)
                | (State::Connecting, State::Connected)
                | (State::Connected, State::Ready)
                | (State::Ready, State::Closed)
        )
    });
    eprintln!(
        "measured: stopped reader: {accepted} frames of 16 KiB accepted ({} handed to the \
         socket) before the first refusal; slowest send {slowest:?} (bound 200 ms); close took \
         {took:?} (bound {:?})",
        m.frames_sent,
        ms(300) + relink::defaults::LINGER + SLACK
    );
}

// ---------------------------------------------------------------------------------------
// 10. A host name that does not resolve
// ---------------------------------------------------------------------------------------

/// `tcp://does-not-exist.invalid:1`: the `.invalid` top-level domain never resolves.
/// Expected states: Connecting -(dns)-> Backoff -(retry-timer)-> Connecting, repeated.
/// Detection bound: Backoff(dns) within `connect_timeout` (5 s by default: it covers the
/// resolution too) + slack; here the resolver answers at once.
/// Meanwhile a second link in the same process, on the same default context, round-trips
/// with an echo peer: at least 200 round trips, and on until the other link failed 4 times,
/// none slower than 250 ms (resolution happens off every IO thread, so it cannot stall
/// libzmq's).
/// Frames: the unresolvable link's 5 queued frames come back as Abandoned(Shutdown).
#[test]
fn a_host_name_that_does_not_resolve_backs_off_with_cause_dns_while_another_link_keeps_round_tripping(
) {
    let _g = shared();
    let peer = Peer::start(Behaviour::Echo);
    let echo = Link::builder(&peer.endpoint())
        .codec(Codec::lines())
        .build()
        .expect("build");
    let mut we = Watch::new(&echo);
    we.until(T, |t| t.to == State::Ready);

    let built_at = Instant::now();
    let dns = Link::builder("tcp://does-not-exist.invalid:1")
        .codec(Codec::lines())
        .backoff(ms(20), ms(100))
        .build()
        .expect("build");
    let mut wd = Watch::new(&dns);
    send_seqs(&dns, 0..5);
    let (at, t) = wd.until(relink::defaults::CONNECT_TIMEOUT + SLACK, |t| {
        t.to == State::Backoff
    });
    let detect = at - built_at;
    assert_eq!(
        (t.from, t.cause),
        (State::Connecting, Cause::Dns),
        "{}",
        wd.trace()
    );

    // At least 200 round trips, and on until the other link has failed a few more times.
    let mut rtts = Vec::new();
    let dns_failures = |wd: &Watch| {
        wd.transitions
            .iter()
            .filter(|(_, t)| t.to == State::Backoff)
            .count()
    };
    let until = Instant::now() + T;
    let mut n = 0u64;
    while n < 200 || (dns_failures(&wd) < 4 && Instant::now() < until) {
        let t0 = Instant::now();
        echo.send(util::seq_payload(n)).expect("send");
        assert!(we.frames_until(n as usize + 1, T), "no echo of frame {n}");
        rtts.push(t0.elapsed());
        wd.drain();
        n += 1;
    }
    wd.drain();
    let dns_failures = dns_failures(&wd);
    assert!(
        dns_failures >= 3,
        "the unresolvable link stopped retrying: {}",
        wd.trace()
    );
    assert_only(&wd.since(0), "dns", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Idle, State::Connecting, Cause::Start)
                | (State::Connecting, State::Backoff, Cause::Dns)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
        )
    });
    rtts.sort();
    let (median, max) = (rtts[rtts.len() / 2], rtts[rtts.len() - 1]);
    assert!(
        max <= ms(250),
        "a round trip took {max:?} (median {median:?})"
    );

    let (md, dns_close) = timed_close(&dns, ms(200), "dns");
    wd.finish();
    let (me, _) = timed_close(&echo, ms(500), "dns: echo link");
    we.finish();
    assert_accounted(&md, "dns");
    assert_abandoned_match(&md, &wd.abandoned, "dns");
    assert_eq!((md.frames_sent, md.abandoned.shutdown), (0, 5), "{md:?}");
    assert_accounted(&me, "dns: echo link");
    assert_each_once_in_order(&seqs_of(&we.frames, &[]), 0..n, "dns: echo link");
    eprintln!(
        "measured: dns: Backoff(dns) {detect:?} after the start (bound {:?}); {dns_failures} \
         failures during {n} round trips of the other link: median {median:?}, max {max:?} \
         (bound 250 ms); close of the failing link {dns_close:?}",
        relink::defaults::CONNECT_TIMEOUT + SLACK
    );
}

// ---------------------------------------------------------------------------------------
// 11. Close in every state
// ---------------------------------------------------------------------------------------

/// Sends 5 frames to a link in `state`, closes it with a 300 ms timeout, and checks: close
/// returns within 300 ms + linger + slack, the state is Closed, accounting is exact, and the
/// frames that were not sent come back as Abandoned(Shutdown), in order.
fn close_in(link: &Link, w: &mut Watch, state: State, what: &str) -> Duration {
    assert_eq!(link.state(), state, "{what}: not in {state}: {}", w.trace());
    send_seqs(link, 0..5);
    let (m, took) = timed_close(link, ms(300), what);
    w.finish();
    assert_accounted(&m, what);
    assert_abandoned_match(&m, &w.abandoned, what);
    let back: Vec<u64> = seqs_of(
        &w.abandoned
            .iter()
            .map(|(f, _)| f.clone())
            .collect::<Vec<_>>(),
        &[],
    );
    assert!(
        w.abandoned
            .iter()
            .all(|(_, r)| *r == AbandonReason::Shutdown),
        "{what}: {:?}",
        w.abandoned
    );
    assert_each_once_in_order(&back, m.frames_sent..5, what);
    assert_eq!(m.frames_sent + m.abandoned.shutdown, 5, "{what}: {m:?}");
    let last = w.transitions.last().map(|(_, t)| t.clone());
    assert!(
        matches!(&last, Some(t) if t.to == State::Closed && t.cause == Cause::Closed),
        "{what}: last transition {last:?}"
    );
    eprintln!(
        "measured: close in {state}: {took:?} (bound {:?})",
        ms(300) + relink::defaults::LINGER + SLACK
    );
    took
}

/// Expected states: Idle -> Connecting, and Connecting still: the refused dial is left to
/// libzmq's own redial, 10 s away; then close -> Closed within the bound, 5 frames back.
#[test]
fn close_while_connecting_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let link = Link::builder(&util::refused_endpoint())
        .codec(Codec::lines())
        .native_retries(1_000)
        .reconnect_ivl(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(30))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Connecting);
    assert!(w.quiet_for(ms(200)).is_none(), "{}", w.trace());
    close_in(&link, &mut w, State::Connecting, "close while connecting");
}

/// Expected states: Connecting -> Connected, and Connected still (the peer never writes and
/// the first inbound bytes are the proof of life); then close -> Closed within the bound. The
/// peer is a `Sink`, silent like `Silent` but reading, so it sees the close.
#[test]
fn close_while_connected_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::lines())
        .ready_when(ProofOfLife::Inbound)
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Connected);
    close_in(&link, &mut w, State::Connected, "close while connected");
    assert!(
        peer.wait_closed(0, T),
        "the connection stayed open after close"
    );
}

/// Expected states: Connected -> Ready; then close -> Closed within the bound. The peer
/// reads, so the 5 frames are flushed (sent, none abandoned) and reach it once each; the
/// stopped-reader test covers a close with frames stuck while Ready.
#[test]
fn close_while_ready_flushes_within_the_bound_and_every_frame_arrives_once() {
    let _g = shared();
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::lines())
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    w.until(T, |t| t.to == State::Ready);
    close_in(&link, &mut w, State::Ready, "close while ready");
    assert!(
        peer.wait_closed(0, T),
        "the connection stayed open after close"
    );
    assert_each_once_in_order(&line_seqs(&peer.received_all()), 0..5, "close while ready");
}

/// Expected states: Connecting -(refused)-> Backoff, and Backoff still (a 10 s delay); then
/// close -> Closed within the bound.
#[test]
fn close_while_backing_off_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let link = Link::builder(&util::refused_endpoint())
        .codec(Codec::lines())
        .native_retries(0)
        .backoff(Duration::from_secs(10), Duration::from_secs(20))
        .jitter(Jitter::None)
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let (_, t) = w.until(T, |t| t.to == State::Backoff);
    assert_eq!(t.cause, Cause::Refused);
    close_in(&link, &mut w, State::Backoff, "close while backing off");
}

/// Expected states: Connecting -(refused)-> Cooldown (`max_attempts(1)`), and Cooldown still
/// (60 s); then close -> Closed within the bound.
#[test]
fn close_while_cooling_down_returns_within_the_bound_and_gives_every_queued_frame_back() {
    let _g = shared();
    let link = Link::builder(&util::refused_endpoint())
        .codec(Codec::lines())
        .native_retries(0)
        .max_attempts(1)
        .cooldown(Duration::from_secs(60))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let (_, t) = w.until(T, |t| t.to == State::Cooldown);
    assert_eq!(t.cause, Cause::Refused);
    close_in(&link, &mut w, State::Cooldown, "close while cooling down");
}

// ---------------------------------------------------------------------------------------
// 12. Open and close many times
// ---------------------------------------------------------------------------------------

fn count_entries(dir: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {dir}: {e}"))
        .count()
}

/// (open file descriptors, threads) of this process.
fn fds_and_threads() -> (usize, usize) {
    (
        count_entries("/proc/self/fd"),
        count_entries("/proc/self/task"),
    )
}

/// 1000 links opened and closed, alternating an endpoint that accepts (each link waits for
/// Ready) and one that refuses. Counted after a warm-up link of each kind, because the first
/// link starts the process-wide context (libzmq's IO and reaper threads).
/// Expected: afterwards, no more file descriptors or threads than before (within 5 s for the
/// last threads to exit); every close within its bound; accounting exact on each link.
#[test]
fn opening_and_closing_a_thousand_links_leaks_no_thread_and_no_file_descriptor() {
    let _g = exclusive();
    let peer = Peer::start(Behaviour::Sink);
    let refused = util::refused_endpoint();
    let open_close = |endpoint: &str, wait_ready: bool| {
        let link = Link::builder(endpoint)
            .codec(Codec::lines())
            .build()
            .expect("build");
        if wait_ready {
            let mut w = Watch::new(&link);
            w.until(T, |t| t.to == State::Ready);
        }
        let m = link.close(ms(100));
        assert_accounted(&m, "open/close");
        assert_eq!(link.state(), State::Closed);
    };
    open_close(&peer.endpoint(), true);
    open_close(&refused, false);
    assert!(
        util::wait_until(T, || peer.open_count() == 0),
        "the warm-up connection stayed open"
    );
    let before = fds_and_threads();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..1000 {
        let t0 = Instant::now();
        if i % 2 == 0 {
            open_close(&peer.endpoint(), true);
        } else {
            open_close(&refused, false);
        }
        slowest = slowest.max(t0.elapsed());
    }
    let took = started.elapsed();
    // The kernel completes a connect before the peer's accept loop takes it: wait for it.
    assert!(
        peer.wait_accepts(501, T),
        "only {} connections for 501 connected links",
        peer.accept_count()
    );
    let mut after = fds_and_threads();
    let settled = util::wait_until(T, || {
        after = fds_and_threads();
        after.0 <= before.0 && after.1 <= before.1 && peer.open_count() == 0
    });
    assert!(
        settled,
        "(fds, threads) before {before:?}, after {after:?}; {} peer connections still open",
        peer.open_count()
    );
    let accepted = peer.accept_count();
    assert!(
        accepted >= 501,
        "only {accepted} connections for 501 connected links"
    );
    eprintln!(
        "measured: open/close x1000: {took:?} in all, slowest {slowest:?}; (fds, threads) \
         before {before:?}, after {after:?}; the peer accepted {accepted} connections for 501 \
         connected links"
    );
}

// ---------------------------------------------------------------------------------------
// 13. Eight producers while the peer restarts
// ---------------------------------------------------------------------------------------

/// `p3-seq-0000000042`: producer 3's frame number 42.
fn producer_payload(producer: u8, seq: u64) -> Vec<u8> {
    let mut out = format!("p{producer}-").into_bytes();
    out.extend_from_slice(&util::seq_payload(seq));
    out
}

fn parse_producer_payload(frame: &[u8]) -> Option<(u8, u64)> {
    let rest = frame.strip_prefix(b"p")?;
    let dash = rest.iter().position(|&b| b == b'-')?;
    let producer = std::str::from_utf8(&rest[..dash]).ok()?.parse().ok()?;
    Some((producer, util::parse_seq(&rest[dash + 1..])?))
}

/// Bytes of each connection a peer saw, in accept order, from its event stream after it
/// stopped (a snapshot before `stop` could miss the last reads).
fn stop_and_collect(peer: Peer) -> Vec<Vec<u8>> {
    let rx = peer.events();
    peer.stop();
    let mut conns: Vec<Vec<u8>> = Vec::new();
    for ev in rx.try_iter() {
        match ev {
            PeerEvent::Accepted(i, _) if conns.len() <= i => conns.resize(i + 1, Vec::new()),
            PeerEvent::Data(i, bytes) => conns[i].extend_from_slice(&bytes),
            _ => {}
        }
    }
    conns
}

/// What the thread draining the link's events saw.
#[derive(Default)]
struct Drained {
    transitions: Vec<(Instant, Transition)>,
    abandoned: Vec<(Vec<u8>, AbandonReason)>,
    errors: Vec<LinkError>,
}

/// Eight threads send 1500 frames each, paced over 3 s, while the peer restarts four times
/// (one outage of 600 ms, longer than the frames' 400 ms ttl, so some expire).
/// Expected states, per restart: Ready -(peer-closed)-> Backoff, Connecting -(refused)->
/// Backoff any number of times, then Connected -> Ready.
/// Detection bound: each stop noticed within `CLOSE_DETECT`.
/// Frames: at the peer, each producer's frames in order and none twice; none both received and
/// abandoned; every Abandoned event matches the counters; submitted = sent + abandoned +
/// rejected + queued, and sent + abandoned = all 12000 frames.
#[test]
fn eight_producers_sending_through_four_peer_restarts_keep_order_with_no_duplicate_and_exact_accounting(
) {
    let _g = shared();
    const PRODUCERS: u8 = 8;
    const PER_PRODUCER: u64 = 1_500;
    const TOTAL: u64 = PRODUCERS as u64 * PER_PRODUCER;
    const SPREAD: Duration = Duration::from_secs(3);
    const RESTARTS: usize = 4;
    let port = util::free_port();
    let mut peer = Peer::start_on(port, Behaviour::Sink).expect("start the peer");
    let link = Link::builder(&util::endpoint_for(port))
        .codec(Codec::length_prefixed())
        .backoff(ms(10), ms(100))
        .min_stable(ms(10))
        .frame_ttl(ms(400))
        .outbox_limits(2_000, 1 << 20)
        .overflow(Overflow::Block(ms(20)))
        .build()
        .expect("build");
    let ready = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(Mutex::new(Drained::default()));
    let drainer = {
        let events = link.events().clone();
        let ready = ready.clone();
        let drained = drained.clone();
        thread::spawn(move || {
            while let Ok(ev) = events.recv() {
                let mut d = drained.lock().unwrap_or_else(|e| e.into_inner());
                match ev {
                    Event::State(t) => {
                        if t.to == State::Ready {
                            ready.fetch_add(1, Ordering::SeqCst);
                        }
                        d.transitions.push((Instant::now(), t));
                    }
                    Event::Abandoned { frame, reason } => d.abandoned.push((frame, reason)),
                    Event::Error(e) => d.errors.push(e),
                    _ => {}
                }
            }
        })
    };
    assert!(
        util::wait_until(T, || ready.load(Ordering::SeqCst) == 1),
        "no first Ready"
    );
    let start = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let link = link.clone();
            thread::spawn(move || {
                let mut refused = 0u64;
                for seq in 0..PER_PRODUCER {
                    let due = start + SPREAD.mul_f64(seq as f64 / PER_PRODUCER as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                    let mut frame = producer_payload(p, seq);
                    let give_up = Instant::now() + T;
                    loop {
                        match link.send(frame) {
                            Ok(()) => break,
                            Err(SendError::Full(f)) => {
                                refused += 1;
                                assert!(Instant::now() < give_up, "outbox full for {T:?}");
                                frame = f;
                            }
                            Err(e) => panic!("producer {p}: send failed: {e:?}"),
                        }
                    }
                }
                refused
            })
        })
        .collect();

    let mut connections: Vec<Vec<u8>> = Vec::new();
    let mut stops = Vec::new();
    for r in 0..RESTARTS {
        assert!(
            util::wait_until(T, || ready.load(Ordering::SeqCst) > r),
            "restart {r}: the link did not become Ready"
        );
        assert!(
            peer.wait_until(T, |s| s.total_received() >= 5_000),
            "restart {r}: no traffic reached the peer"
        );
        stops.push(Instant::now());
        connections.extend(stop_and_collect(peer));
        // The outage itself: the port refuses meanwhile.
        thread::sleep(if r == 2 { ms(600) } else { ms(50) });
        peer = Peer::start_on(port, Behaviour::Sink).expect("restart the peer on its port");
    }
    let refused: u64 = producers
        .into_iter()
        .map(|h| {
            assert!(
                util::wait_until(Duration::from_secs(20), || h.is_finished()),
                "a producer did not finish"
            );
            h.join().expect("a producer panicked")
        })
        .sum();
    assert!(
        util::wait_until(T, || link.metrics().outbox_frames == 0),
        "the outbox did not drain on the last connection"
    );
    let m = link.close(Duration::from_secs(1));
    assert!(
        util::wait_until(T, || drainer.is_finished()),
        "the event drainer did not finish"
    );
    drainer.join().expect("the drainer panicked");
    assert!(peer.wait_all_closed(T), "the last connection did not close");
    connections.extend(stop_and_collect(peer));
    let d = drained.lock().unwrap_or_else(|e| e.into_inner());

    // Detection of each stop.
    let mut detects = Vec::new();
    for at in &stops {
        let (when, t) = d
            .transitions
            .iter()
            .find(|(when, t)| when >= at && t.from == State::Ready)
            .unwrap_or_else(|| {
                panic!("a stop was never noticed: {}", show_stamped(&d.transitions))
            });
        assert_eq!(
            (t.to, t.cause),
            (State::Backoff, Cause::PeerClosed),
            "{}",
            show_stamped(&d.transitions)
        );
        detects.push(*when - *at);
    }
    let slowest = detects.iter().max().copied().unwrap_or_default();
    assert!(slowest <= CLOSE_DETECT, "a stop noticed after {slowest:?}");
    let ts: Vec<Transition> = d.transitions.iter().map(|(_, t)| t.clone()).collect();
    assert_only(&ts, "eight producers", |t| {
        matches!(
            (t.from, t.to, t.cause),
            (State::Idle, State::Connecting, Cause::Start)
                | (State::Ready, State::Backoff, Cause::PeerClosed)
                | (State::Backoff, State::Connecting, Cause::RetryTimer)
                | (State::Connecting, State::Backoff, Cause::Refused)
                | (State::Connecting, State::Connected, Cause::TcpConnected)
                | (State::Connected, State::Ready, Cause::Alive)
                | (State::Ready, State::Closed, Cause::Closed)
        )
    });

    // What the peer received.
    let mut received: Vec<(u8, u64)> = Vec::new();
    for (i, bytes) in connections.iter().enumerate() {
        for f in util::decode_length_prefixed(bytes).0 {
            received.push(parse_producer_payload(&f).unwrap_or_else(|| {
                panic!(
                    "connection {i}: a frame nobody sent: {:?}",
                    String::from_utf8_lossy(&f)
                )
            }));
        }
    }
    let dups = util::duplicates(&received);
    assert!(
        dups.is_empty(),
        "received twice: {:?}",
        &dups[..dups.len().min(10)]
    );
    for p in 0..PRODUCERS {
        let seqs: Vec<u64> = received
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            util::first_out_of_order(&seqs),
            None,
            "producer {p}: out of order at the peer"
        );
    }
    let mut abandoned_ids = HashSet::new();
    for (frame, _) in &d.abandoned {
        let id = parse_producer_payload(frame).expect("an abandoned frame is one we sent");
        assert!(abandoned_ids.insert(id), "{id:?} abandoned twice");
    }
    let both: Vec<_> = received
        .iter()
        .filter(|id| abandoned_ids.contains(id))
        .collect();
    assert!(both.is_empty(), "abandoned and received: {both:?}");
    assert!(d.errors.is_empty(), "errors: {:?}", d.errors);
    assert_accounted(&m, "eight producers");
    assert_abandoned_match(&m, &d.abandoned, "eight producers");
    assert_eq!(m.outbox_frames, 0);
    assert_eq!(m.frames_rejected, refused);
    assert_eq!(m.frames_submitted, TOTAL + refused);
    assert_eq!(m.frames_sent + m.abandoned.total(), TOTAL, "{m:?}");
    let lost = m.frames_sent as i128 - received.len() as i128;
    assert!(lost >= 0, "the peer received more than was sent");
    eprintln!(
        "measured: eight producers: {RESTARTS} restarts noticed in {detects:?} (bound \
         {CLOSE_DETECT:?}); submitted {} = sent {} + abandoned {} (expired {}) + rejected {} \
         + queued {}; received {} over {} connections; {lost} sent but lost with a \
         connection; took {:?}",
        m.frames_submitted,
        m.frames_sent,
        m.abandoned.total(),
        m.abandoned.expired,
        m.frames_rejected,
        m.outbox_frames,
        received.len(),
        connections.len(),
        start.elapsed()
    );
}

fn show_stamped(ts: &[(Instant, Transition)]) -> String {
    show(&ts.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>())
}

// ---------------------------------------------------------------------------------------
// 14. Findings
// ---------------------------------------------------------------------------------------

/// The flapping setup again, looking at the peer's side: every TCP connection it accepts must
/// be one the link dialled (`Metrics::connects`), none made by libzmq on its own after the
/// link's `disconnect(endpoint)`.
/// Expected: over 6 flaps, accepted connections == the link's connects.
#[test]
fn a_flapping_peer_accepts_only_the_connections_the_link_dials() {
    let _g = shared();
    let peer = Peer::start(Behaviour::AcceptThenClose);
    let link = Link::builder(&peer.endpoint())
        .codec(Codec::lines())
        .backoff(ms(25), ms(800))
        .jitter(Jitter::Proportional(0.1))
        .min_stable(ms(500))
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while w
        .transitions
        .iter()
        .filter(|(_, t)| t.to == State::Backoff)
        .count()
        < 6
    {
        assert!(Instant::now() < deadline, "too slow to flap: {}", w.trace());
        send_seqs(&link, next..next + 1);
        next += 1;
        w.quiet_for(ms(20));
    }
    // libzmq's own redial would come 100–200 ms after a drop; the next dial of the link is
    // 800 ms ± 10 % away.
    let extra = peer.wait_until(ms(500), |s| s.accept_count() as u64 > 6);
    let m = link.metrics();
    let accepted = peer.accept_count();
    let (m_end, _) = timed_close(&link, ms(200), "flapping, peer side");
    w.finish();
    assert_accounted(&m_end, "flapping, peer side");
    assert!(
        !extra && accepted as u64 == m.connects,
        "the peer accepted {accepted} connections; the link made {}; {}",
        m.connects,
        w.trace()
    );
}

/// A link closed with more frames queued than its event channel (1024) and the IO thread's
/// pending queue (4 × 1024) can hold, while nobody reads events during `close`.
/// Expected: every queued frame comes back in an `Abandoned(Shutdown)` event, as the contract
/// says ("abandoned with a reason and returned to the app in an event").
#[test]
fn closing_with_more_queued_frames_than_the_event_channel_holds_gives_every_frame_back() {
    let _g = shared();
    let link = Link::builder(&util::refused_endpoint())
        .codec(Codec::lines())
        .outbox_limits(8_000, 1 << 20)
        .build()
        .expect("build");
    let mut w = Watch::new(&link);
    send_seqs(&link, 0..8_000);
    let (m, _) = timed_close(&link, ms(100), "big close");
    w.finish();
    assert_accounted(&m, "big close");
    assert_eq!(m.abandoned.shutdown, 8_000, "{m:?}");
    let back: Vec<u64> = seqs_of(
        &w.abandoned
            .iter()
            .map(|(f, _)| f.clone())
            .collect::<Vec<_>>(),
        &[],
    );
    eprintln!(
        "measured: big close: {} of 8000 frames given back; events_dropped {}",
        back.len(),
        m.events_dropped
    );
    assert_each_once_in_order(&back, 0..8_000, "big close");
}
