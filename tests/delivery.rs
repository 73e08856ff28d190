//! Confirmed delivery against real peers: a slow reader killed with a reset while one producer
//! streams numbered 1 KiB frames, then a new peer; plaintext and TLS, under each redelivery
//! policy. In each, every frame submitted is read by a peer, reported in an `Abandoned` event,
//! or was held unread by the dead peer's kernel (which acknowledged it); duplicates only under
//! `Resend`, and no more than were counted resent.
//!
//! The same kill with libzmq's own fast redial: the peer closes its listener with the reset,
//! relink's next dial is refused and handed to libzmq's redial (`native_retries`), and the peer
//! listens again before that redial comes.

mod util;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use relink::framing::Lines;
use relink::{AbandonReason, Builder, Event, Link, Overflow, Redelivery, Tls};
use util::slow::{SlowPeer, SlowSeen};
use util::tls::{server_config, TlsKit};
use util::{decode_lines, duplicates, first_out_of_order, wait_for, Server};

const T: Duration = Duration::from_secs(30);
/// Frames the producer streams.
const N: u64 = 6_000;
/// Bytes the slow peer reads per 10 ms tick.
const CHUNK: usize = 64 * 1024;
/// The slow peer is killed once its application has read this much.
const KILL_AFTER: usize = 512 * 1024;

/// `seq-0000000042` padded with dots to 1023 bytes (1 KiB on the wire with its newline).
fn frame(n: u64) -> Vec<u8> {
    let mut f = format!("seq-{n:010}").into_bytes();
    f.resize(1023, b'.');
    f
}

fn seq(line: &[u8]) -> u64 {
    std::str::from_utf8(&line[4..14])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a frame nobody sent: {:?}", String::from_utf8_lossy(line)))
}

/// What one kill scenario ended with.
#[derive(Debug)]
struct Outcome {
    /// Sequence numbers read by the first peer, then by later ones.
    first: Vec<u64>,
    later: Vec<u64>,
    /// Held unread by the killed peer's kernel (whole frames), and the bytes of frames cut
    /// by the end of what it held or could decrypt.
    held: Vec<u64>,
    held_opaque: usize,
    reported: Vec<(u64, AbandonReason)>,
    resent: u64,
    sent: u64,
    confirmed: u64,
    /// libzmq's own redials since the link was last stable.
    native_redials: u32,
}

/// How the slow peer dies.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kill {
    /// A reset; the listener stays open, so relink's next dial connects.
    Reset,
    /// A reset with the listener closed until relink's dial was refused and handed to
    /// libzmq's own redial, which makes the next connection.
    ResetThenNativeRedial,
}

/// Starts a producer streaming the `N` frames into `link`, and a collector of the frames
/// reported in `Abandoned` events (sequence number and reason), which ends when the link
/// closes or after `bound`. Reported frames are taken as they come: a full event channel
/// pauses the link's reading.
type Collector = thread::JoinHandle<Vec<(u64, AbandonReason)>>;

fn stream(link: &Link, bound: Duration) -> (Collector, thread::JoinHandle<()>) {
    let collector = {
        let events = link.events().clone();
        thread::spawn(move || {
            let mut reported = Vec::new();
            let deadline = Instant::now() + bound;
            while Instant::now() < deadline {
                match events.recv_timeout(Duration::from_millis(100)) {
                    Ok(Event::Abandoned { frame, reason }) => reported.push((seq(&frame), reason)),
                    Ok(Event::State(t)) if t.to == relink::State::Closed => break,
                    Ok(_) | Err(relink::error::RecvTimeoutError::Timeout) => {}
                    Err(_) => break,
                }
            }
            reported
        })
    };
    let producer = {
        let link = link.clone();
        thread::spawn(move || {
            for n in 0..N {
                link.send(frame(n)).expect("accepted");
            }
        })
    };
    (collector, producer)
}

/// The link `b` describes, for a producer streaming through a peer's death: the producer
/// waits for room in the outbox (up to `T`), and a short backoff (20 to 100 ms).
fn streaming(b: Builder) -> Link {
    b.delivery(|d| d.overflow = Overflow::Block(T))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(20);
            r.backoff_max = Duration::from_millis(100);
        })
        .build()
        .unwrap()
}

fn kill_scenario(b: Builder, peer: &SlowPeer) -> Outcome {
    kill_scenario_with(b, peer, Kill::Reset)
}

fn kill_scenario_with(b: Builder, peer: &SlowPeer, kill: Kill) -> Outcome {
    let _ = env_logger::builder().is_test(true).try_init();
    let link = streaming(b.framing(Lines::new()));
    let (collector, producer) = stream(&link, 2 * T);
    let read = || peer.seen().read.first().map_or(0, Vec::len);
    assert!(
        wait_for(T, || (read() >= KILL_AFTER).then_some(())).is_some(),
        "the slow peer reads"
    );
    match kill {
        Kill::Reset => peer.kill(),
        Kill::ResetThenNativeRedial => peer.kill_and_close(),
    }
    assert!(
        wait_for(T, || peer.seen().killed.then_some(())).is_some(),
        "the slow peer dies"
    );
    if kill == Kill::ResetThenNativeRedial {
        // libzmq redials 100-200 ms after the refusal; the peer listens again within a few.
        assert!(
            wait_for(T, || (link.metrics().native_redials >= 1).then_some(())).is_some(),
            "relink's dial is refused and left to libzmq's redial: {:?}",
            link.metrics()
        );
        peer.listen_again();
    }
    producer.join().unwrap();
    wait_settled(&link, N);
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    let reported = collector.join().unwrap();
    // Confirmed means in the peer's kernel: let the peer read every connection to its end
    // before counting what it read.
    assert!(
        wait_for(T, || {
            let s = peer.seen();
            (s.ended == s.read.len()).then_some(())
        })
        .is_some(),
        "the peer reads its connections to their end"
    );
    let seen: SlowSeen = peer.seen();
    let first_bytes = &seen.read[0];
    let (first, rest) = decode_lines(first_bytes);
    let first: Vec<u64> = first.iter().map(|l| seq(l)).collect();
    // A frame cut by the reset: its head was read, its tail held.
    let mut held_bytes = rest.to_vec();
    held_bytes.extend_from_slice(&seen.held);
    let (held, cut) = decode_lines(&held_bytes);
    let later: Vec<u64> = seen.read[1..]
        .iter()
        .flat_map(|r| decode_lines(r).0)
        .map(|l| seq(&l))
        .collect();
    Outcome {
        first,
        later,
        held: held.iter().map(|l| seq(l)).collect(),
        held_opaque: seen.held_opaque + cut.len(),
        reported,
        resent: m.frames_resent,
        sent: m.frames_sent,
        confirmed: m.frames_confirmed,
        native_redials: m.native_redials,
    }
}

/// Waits (up to `T`) until each of the `n` frames given to `link` is confirmed or reported.
fn wait_settled(link: &Link, n: u64) {
    let settled = |m: &relink::Metrics| m.frames_confirmed + m.abandoned.total() == n;
    assert!(
        wait_for(T, || settled(&link.metrics()).then_some(())).is_some(),
        "every frame confirmed or reported: {:?}",
        link.metrics()
    );
}

/// The numbers of `seqs` that are in `set`, in `seqs`' order.
fn among(seqs: &[u64], set: &HashSet<u64>) -> Vec<u64> {
    seqs.iter().filter(|n| set.contains(n)).copied().collect()
}

/// The checks every kill scenario ends with; `opaque_frames` is how many frames may hide in
/// held bytes the peer could not decode.
fn check(o: &Outcome, policy: Redelivery, what: &str) {
    let frames = |b: usize| b.div_ceil(1024) as u64 + 1;
    eprintln!(
        "{what}: first peer read {}, its kernel held {} (+{} B undecodable), later peers read \
         {}, reported {}, resent {}, sent {}, confirmed {}",
        o.first.len(),
        o.held.len(),
        o.held_opaque,
        o.later.len(),
        o.reported.len(),
        o.resent,
        o.sent,
        o.confirmed
    );
    assert_eq!(
        first_out_of_order(&o.first),
        None,
        "{what}: first peer in order"
    );
    assert_eq!(
        first_out_of_order(&o.later),
        None,
        "{what}: later peers in order"
    );
    let mut delivered: Vec<u64> = o.first.iter().chain(&o.held).copied().collect();
    delivered.extend(&o.later);
    let dups = duplicates(&delivered);
    let reported: HashSet<u64> = o.reported.iter().map(|r| r.0).collect();
    match policy {
        Redelivery::Resend => {
            assert!(
                o.reported.is_empty(),
                "{what}: nothing reported: {:?}",
                o.reported
            );
            assert!(
                dups.len() as u64 <= o.resent,
                "{what}: {} duplicates, {} resent",
                dups.len(),
                o.resent
            );
            // Resent frames go first on the next connection, in order: a frame read twice
            // must be among the first `resent` the later peers read.
            let resent: HashSet<u64> = o.later.iter().take(o.resent as usize).copied().collect();
            let unexplained: Vec<u64> = dups
                .iter()
                .filter(|n| !resent.contains(n))
                .copied()
                .collect();
            assert!(
                unexplained.is_empty(),
                "{what}: read twice but not resent: {unexplained:?}"
            );
        }
        _ => {
            assert!(dups.is_empty(), "{what}: no frame twice: {dups:?}");
            assert!(
                o.reported.iter().all(|r| r.1 == AbandonReason::Unconfirmed),
                "{what}: {:?}",
                o.reported
            );
            let again = among(&o.later, &reported);
            assert!(
                again.is_empty(),
                "{what}: reported and delivered later: {again:?}"
            );
            // The first peer's application read these long after its kernel acknowledged
            // them (its receive buffer lies between): confirmed, so never reported.
            let confirmed_reported = among(&o.first, &reported);
            assert!(
                confirmed_reported.is_empty(),
                "{what}: read by the first peer and reported: {confirmed_reported:?}"
            );
        }
    }
    let accounted: HashSet<u64> = delivered.iter().copied().chain(reported).collect();
    let lost: Vec<u64> = (0..N).filter(|n| !accounted.contains(n)).collect();
    let allowed = if o.held_opaque > 0 {
        frames(o.held_opaque)
    } else {
        0
    };
    eprintln!(
        "{what}: lost without a report {} (allowed {allowed}: frames in held bytes that could \
         not be decoded), delivered twice {}",
        lost.len(),
        dups.len()
    );
    assert!(
        lost.len() as u64 <= allowed,
        "{what}: {} frames neither read, held nor reported: {:?}",
        lost.len(),
        &lost[..lost.len().min(20)]
    );
}

/// A slow peer, plain or TLS, killed as `kill` says while the link streams to it, with
/// frames resent and then with frames reported: nothing is lost without a report either way.
fn slow_peer_killed(tls: bool, kill: Kill) {
    for policy in [Redelivery::Resend, Redelivery::Report] {
        let kit = tls.then(TlsKit::new);
        let config = kit.as_ref().map(|k| server_config(&k.pki.server, None));
        let peer = SlowPeer::start(config, CHUNK);
        let b = match &kit {
            None => Link::builder(peer.endpoint()),
            Some(kit) => {
                Link::builder(peer.named_endpoint()).tls(Tls::new().ca_pem(&kit.pki.ca.cert))
            }
        };
        let b = b.delivery(|d| d.redelivery = policy);
        let what = format!(
            "{}, {kill:?}, {policy:?}",
            if tls { "tls" } else { "plaintext" }
        );
        match kill {
            Kill::Reset => check(&kill_scenario(b, &peer), policy, &what),
            Kill::ResetThenNativeRedial => {
                let o = kill_scenario_with(native_redial(b), &peer, kill);
                check_native(&o, policy, &what);
            }
        }
    }
}

#[test]
fn a_slow_peer_killed_with_a_reset_loses_nothing_unreported_whether_frames_are_resent_or_reported()
{
    slow_peer_killed(false, Kill::Reset);
}

#[test]
fn a_slow_tls_peer_killed_with_a_reset_loses_nothing_unreported_whether_frames_are_resent_or_reported(
) {
    slow_peer_killed(true, Kill::Reset);
}

// ----- libzmq's own fast redial --------------------------------------------------------------

/// The builder for a link whose next connection after the kill is libzmq's own redial: one
/// native retry, and `min_stable` long enough that the count of native redials is still there
/// at the end.
fn native_redial(b: Builder) -> Builder {
    b.reconnect(|r| {
        r.native_retries = 1;
        r.min_stable = 4 * T;
    })
}

fn check_native(o: &Outcome, policy: Redelivery, what: &str) {
    check(o, policy, what);
    assert!(
        o.native_redials >= 1,
        "{what}: the next connection was libzmq's redial: {o:?}"
    );
    assert!(
        !o.later.is_empty(),
        "{what}: the redialled peer read frames"
    );
}

#[test]
fn a_slow_peer_reset_and_reached_again_by_libzmqs_own_redial_loses_nothing_unreported_whether_frames_are_resent_or_reported(
) {
    slow_peer_killed(false, Kill::ResetThenNativeRedial);
}

#[test]
fn a_slow_tls_peer_reset_and_reached_again_by_libzmqs_own_redial_loses_nothing_unreported_whether_frames_are_resent_or_reported(
) {
    slow_peer_killed(true, Kill::ResetThenNativeRedial);
}

// ----- a redis-server killed mid-stream ------------------------------------------------------

/// Bytes the server side of the established connections on `port` holds unread (`ss`'s
/// Recv-Q), summed.
fn recv_queue(port: u16) -> usize {
    let out = std::process::Command::new("ss")
        .args([
            "-tnH",
            "state",
            "established",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<usize>().ok())
        .sum()
}

/// `command` (inline) sent to the redis-server at `addr` over a plain connection of its own,
/// its reply to be read line by line.
fn redis_command(addr: std::net::SocketAddr, command: &str) -> BufReader<std::net::TcpStream> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, T).expect("connect to redis");
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(format!("{command}\r\n").as_bytes()).unwrap();
    BufReader::new(s)
}

/// One line of a reply, without its CRLF.
fn reply_line(reply: &mut BufReader<std::net::TcpStream>) -> String {
    let mut line = String::new();
    let n = reply.read_line(&mut line).expect("a reply line");
    assert!(n > 0, "redis closed");
    line.trim_end().to_string()
}

/// The integer reply to `command`.
fn integer_reply(addr: std::net::SocketAddr, command: &str) -> u64 {
    let line = reply_line(&mut redis_command(addr, command));
    line.strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{command}: not an integer reply: {line:?}"))
}

/// The largest query buffer (`qbuf` + `qbuf-free` of `CLIENT LIST`, in bytes) among the
/// clients of the redis-server at `addr` other than the one asking: the most one read of
/// redis's takes from its kernel.
fn query_buffer(addr: std::net::SocketAddr) -> usize {
    let mut reply = redis_command(addr, "CLIENT LIST");
    let len: usize = reply_line(&mut reply)
        .trim_start_matches('$')
        .parse()
        .expect("a bulk reply");
    let mut list = vec![0u8; len];
    reply.read_exact(&mut list).expect("the client list");
    let field = |line: &str, name: &str| {
        line.split_whitespace()
            .find_map(|kv| {
                kv.strip_prefix(name)?
                    .strip_prefix('=')?
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0)
    };
    String::from_utf8_lossy(&list)
        .lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .map(|line| field(line, "qbuf") + field(line, "qbuf-free"))
        .max()
        .unwrap_or(0)
}

/// The runs of `N` below `writes` whose `key-N` the redis-server at `addr` does not have, as
/// (first, count).
fn missing_runs(addr: std::net::SocketAddr, writes: u64) -> Vec<(u64, u64)> {
    let mut reply = redis_command(addr, "KEYS key-*");
    let count: usize = reply_line(&mut reply)
        .trim_start_matches('*')
        .parse()
        .expect("an array");
    let mut present = vec![false; writes as usize];
    for _ in 0..count {
        let _bulk_len = reply_line(&mut reply);
        let key = reply_line(&mut reply);
        if let Some(n) = key.strip_prefix("key-").and_then(|n| n.parse::<u64>().ok()) {
            if n < writes {
                present[n as usize] = true;
            }
        }
    }
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (n, here) in present.iter().enumerate() {
        if *here {
            continue;
        }
        match runs.last_mut() {
            Some((first, len)) if *first + *len == n as u64 => *len += 1,
            _ => runs.push((n as u64, 1)),
        }
    }
    runs
}

/// One `SET key-N N` as RESP: 51 bytes for every N below 10^10.
fn set(n: u64) -> Vec<u8> {
    relink::framing::Resp::command(["SET", &format!("key-{n:010}"), &format!("{n:010}")])
}

#[test]
#[ignore = "needs redis-server"]
fn a_redis_server_killed_twice_mid_stream_loses_no_write_beyond_what_its_kernel_held() {
    let _ = env_logger::builder().is_test(true).try_init();
    const WRITES: u64 = 20_000;
    // Every write on disk before its reply, in a data directory removed on drop.
    let mut redis =
        util::RedisServer::start_persistent().expect("this test needs redis-server on PATH");
    let link = streaming(Link::builder(redis.endpoint()).framing(relink::framing::Resp::new()));
    let collector = {
        let events = link.events().clone();
        thread::spawn(move || {
            // Frames reported, and redis's error replies (`-LOADING` while a restarted
            // server reads its append-only file: the write was read and refused).
            let (mut reported, mut refused) = (0u64, 0u64);
            let deadline = Instant::now() + 2 * T;
            while Instant::now() < deadline {
                match events.recv_timeout(Duration::from_millis(100)) {
                    Ok(Event::Abandoned { .. }) => reported += 1,
                    Ok(Event::Frame(f)) if f.starts_with(b"-") => refused += 1,
                    Ok(Event::State(t)) if t.to == relink::State::Closed => break,
                    Ok(_) | Err(relink::error::RecvTimeoutError::Timeout) => {}
                    Err(_) => break,
                }
            }
            (reported, refused)
        })
    };
    let producer = {
        let link = link.clone();
        thread::spawn(move || {
            for n in 0..WRITES {
                link.send(set(n)).expect("accepted");
            }
        })
    };
    // What each kill can take without any reading seeing it, in writes: what redis-server's
    // kernel held unread, and what redis had read from it into its query buffer and not yet
    // put in its append-only file (at most the buffer, read with CLIENT LIST just before the
    // freeze). Runs of this test lost one buffer's worth of writes per kill (401) beyond what
    // the kernel held, no more; the 864 seen before were the last writes, confirmed by
    // redis's kernel and not yet applied when the keys were counted.
    let mut held = 0;
    let mut read = 0;
    for kill in 1..=2u64 {
        let submitted = || link.metrics().frames_confirmed;
        assert!(
            wait_for(T, || (submitted() >= kill * WRITES / 3).then_some(())).is_some(),
            "writes flow"
        );
        let qbuf = query_buffer(redis.addr());
        // Frozen, the process reads nothing more: what its kernel holds is what a kill takes.
        redis.stop_signal();
        // Its kernel takes bytes until its receive buffer is full: measure once it stops
        // growing (bounded).
        let mut q = recv_queue(redis.port());
        for _ in 0..100 {
            thread::sleep(Duration::from_millis(20));
            let now = recv_queue(redis.port());
            if now == q {
                break;
            }
            q = now;
        }
        held += q as u64 / 51 + 1;
        // Redis makes a client's query buffer 16 KiB when it reads into an empty one (its
        // allocator rounds that up: 20 474 bytes here), and an idle client's is freed (0),
        // so no less than two such reads is allowed.
        read += qbuf.max(2 * 16 * 1024) as u64 / 51 + 1;
        eprintln!(
            "kill {kill}: redis-server's kernel held {q} bytes unread, its query buffer {qbuf}"
        );
        redis.kill();
        redis.relaunch();
    }
    producer.join().unwrap();
    wait_settled(&link, WRITES);
    // Confirmed is taken by redis's kernel, not yet applied by redis: one more write, applied
    // after every write before it on its connection, says when all of them are.
    link.send(relink::framing::Resp::command(["SET", "relink-done", "1"]))
        .expect("accepted");
    let done = || integer_reply(redis.addr(), "EXISTS relink-done") == 1;
    assert!(
        wait_for(T, || done().then_some(())).is_some(),
        "redis applies the last write"
    );
    let m = link.close(Duration::from_secs(1));
    let (reported, refused) = collector.join().unwrap();
    let runs = missing_runs(redis.addr(), WRITES);
    let missing: u64 = runs.iter().map(|(_, n)| n).sum();
    let lost = missing.saturating_sub(refused);
    eprintln!(
        "redis killed twice: {missing} of {WRITES} keys missing (runs {runs:?}), {refused} \
         refused by redis with an error reply, {reported} reported, {} resent; {lost} lost, \
         at most {held} held unread in the dead kernels and {read} read into redis's query \
         buffers",
        m.frames_resent,
    );
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    assert_eq!(reported, 0, "nothing reported under Resend");
    assert!(
        lost <= held + read,
        "{lost} writes lost without a report; the dead kernels held at most {held} and \
         redis's query buffers {read}"
    );
}

// ----- a blackhole route added mid-stream ------------------------------------------------------

#[test]
#[ignore = "needs root and network namespaces"]
fn a_blackhole_mid_stream_loses_nothing_unreported_and_resends_what_was_not_confirmed() {
    use util::netns;
    let _ = env_logger::builder().is_test(true).try_init();
    let pair = netns::netns_pair();
    let port = 7003;
    // Each connection: socat runs `tee` on it, which echoes every byte (life for the
    // heartbeat) and records it in a file of its own.
    let dir = std::env::temp_dir().join(format!("relink-delivery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = format!("SYSTEM:tee {}/conn-$$", dir.display());
    let _peer = pair
        .spawn(
            &pair.b,
            "socat",
            &[format!("TCP-LISTEN:{port},reuseaddr,fork"), record],
            &[],
        )
        .expect("socat in namespace B");
    assert!(pair.wait_listening(&pair.b, port, T), "the peer listens");
    let endpoint = format!("tcp://{}:{port}", pair.addr_b);
    let link = netns::build_in_namespace(&pair.a, move |ctx| {
        let hb = relink::Heartbeat::new(
            Duration::from_millis(200),
            relink::protocol::Ping::Raw(b"ping\n".to_vec()),
        )
        .max_missed(2)
        .reply(relink::protocol::Predicate::new(|f| f == b"ping"));
        Link::builder(&endpoint)
            .context(ctx)
            .framing(Lines::new())
            .heartbeat(hb)
            .delivery(|d| d.overflow = Overflow::Block(T))
            .socket(|s| s.connect_timeout = Duration::from_millis(1000))
            .reconnect(|r| {
                r.backoff_base = Duration::from_millis(50);
                r.backoff_max = Duration::from_millis(400);
            })
    });
    let (collector, producer) = stream(&link, 3 * T);
    assert!(
        wait_for(T, || (link.metrics().frames_confirmed >= N / 4)
            .then_some(()))
        .is_some(),
        "frames flow"
    );
    pair.blackhole_b_in_a().expect("add the blackhole route");
    let resent = || link.metrics().frames_resent;
    assert!(
        wait_for(T, || (resent() > 0 || link.state() != relink::State::Ready)
            .then_some(()))
        .is_some(),
        "the heartbeat declares the connection dead"
    );
    thread::sleep(Duration::from_millis(300));
    // What the peer's kernel acknowledged and its socat has not read: the echo cannot get out
    // either, so socat stops reading, and the reset that ends the old connection once the
    // route is back discards these bytes. Confirmed means in the peer's kernel; measured
    // while nothing can arrive.
    let queues: Vec<u64> = pair
        .ss(&pair.b, port)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .collect();
    assert!(!queues.is_empty(), "the peer's connection is seen by ss");
    let held: u64 = queues.iter().sum();
    pair.clear_blackhole().expect("remove the blackhole route");
    producer.join().unwrap();
    let settled = |m: &relink::Metrics| m.frames_confirmed + m.abandoned.total() == N;
    assert!(
        wait_for(2 * T, || settled(&link.metrics()).then_some(())).is_some(),
        "every frame confirmed or reported: {:?}",
        link.metrics()
    );
    // The peer's files hold what its application read; give tee a moment to write the last.
    let read_all = || -> Vec<u64> {
        let mut got = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            got.extend(
                decode_lines(&bytes)
                    .0
                    .iter()
                    .filter(|l| l.starts_with(b"seq-"))
                    .map(|l| seq(l)),
            );
        }
        got
    };
    let _ = wait_for(T, || {
        let got: HashSet<u64> = read_all().into_iter().collect();
        (got.len() as u64 >= N).then_some(())
    });
    let m = link.close(Duration::from_secs(1));
    let reported: Vec<u64> = collector.join().unwrap().iter().map(|r| r.0).collect();
    let got = read_all();
    let _ = std::fs::remove_dir_all(&dir);
    let dups = duplicates(&got);
    let seen: HashSet<u64> = got
        .iter()
        .copied()
        .chain(reported.iter().copied())
        .collect();
    let lost: Vec<u64> = (0..N).filter(|n| !seen.contains(n)).collect();
    // Besides the kernel's queue, socat's buffer and the pipe to tee (64 KiB) die with it.
    let allowed = held.div_ceil(1024) + (8 + 64) + 1;
    eprintln!(
        "blackhole: peer read {} frames ({} twice), reported {}, resent {}, lost without a \
         report {} (allowed {allowed}: the peer's kernel held {held} B unread, plus socat's \
         buffer and pipe)",
        got.len(),
        dups.len(),
        reported.len(),
        m.frames_resent,
        lost.len()
    );
    assert_eq!(m.unaccounted(), 0, "{m:?}");
    assert!(
        lost.len() as u64 <= allowed,
        "lost without a report: {} of them {:?}",
        lost.len(),
        &lost[..lost.len().min(20)]
    );
    assert!(
        dups.len() as u64 <= m.frames_resent,
        "{} twice, {} resent",
        dups.len(),
        m.frames_resent
    );
}
