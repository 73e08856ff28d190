//! The spool: frames kept on disk until confirmed, replayed first at the next start. Real
//! crashes (a child process SIGKILLed at random moments, then the spool opened again here with
//! a new peer), torn tails, a full disk, two processes on one spool, deadlines that pass while
//! the spool waits.

mod util;

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use relink::error::{ConfigError, SendError};
use relink::framing::Lines;
use relink::{AbandonReason, Durability, Event, Link, Spool};
use util::spool::*;
use util::*;

const BOUND: Duration = Duration::from_secs(20);

/// The child of the crash trials: it streams numbered lines through a spooled link to the
/// port it is given, a burst each millisecond, and prints `ok SEQ MICROS` for each frame whose
/// `send` returned `Ok`, until it is killed (or 30 s). Run on its own, it checks that role: it
/// starts itself as such a child against a local sink, kills it, and expects the numbers it
/// printed one apart, in order and each once.
#[test]
#[ignore = "starts a child process; the crash trials rely on it"]
fn spool_child_helper_streams_numbered_frames_until_killed() {
    let (Ok(dir), Ok(policy), Ok(port)) = (
        std::env::var(SPOOL_DIR_VAR),
        std::env::var(SPOOL_POLICY_VAR),
        std::env::var(SPOOL_PORT_VAR),
    ) else {
        let dir = ScratchDir::new("spool-child-alone");
        let sink = Peer::start(Behaviour::Sink);
        let mut child = SpoolChild::start(dir.path(), "group:5", sink.port());
        assert!(child.running(), "the child died by itself");
        let acked: Vec<u64> = child.kill9().into_iter().map(|(seq, _)| seq).collect();
        let first = acked[0];
        let expected: Vec<u64> = (first..first + acked.len() as u64).collect();
        assert_eq!(acked, expected, "numbers one apart, in order, each once");
        return;
    };
    let link = Link::builder(endpoint_for(port.parse().expect("port")))
        .framing(Lines::new())
        .spool(Spool::new(&dir).durability(parse_policy(&policy)))
        .build()
        .expect("the child's link");
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    while start.elapsed() < Duration::from_secs(30) {
        for _ in 0..20 {
            let seq = link
                .send_numbered(|seq| format!("{seq}"))
                .expect("send_numbered");
            let _ = writeln!(out, "ok {seq} {}", start.elapsed().as_micros());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn spooled(endpoint: &str, dir: &ScratchDir, durability: Durability) -> Link {
    Link::builder(endpoint)
        .framing(Lines::new())
        .spool(Spool::new(dir.path()).durability(durability))
        .build()
        .expect("a spooled link")
}

/// The numbers in the lines a peer received (every connection).
fn numbers(peer: &Peer) -> Vec<u64> {
    peer.snapshot()
        .lines()
        .into_iter()
        .flat_map(|(lines, _)| lines)
        .filter_map(|l| std::str::from_utf8(&l).ok()?.parse().ok())
        .collect()
}

/// The link's first event when its spool held frames, else `None` (bounded). Every start
/// here follows a process's death or close in this same boot, so none reports frames lost
/// with the machine.
fn recovered(link: &Link) -> Option<(u64, u64)> {
    match link.events().recv_timeout(Duration::from_secs(5)) {
        Ok(Event::Recovered {
            frames,
            cut_bytes,
            lost_at_most,
            ..
        }) => {
            assert_eq!(lost_at_most, 0, "the machine did not go down");
            Some((frames, cut_bytes))
        }
        _ => None,
    }
}

/// What one crash trial found.
#[derive(Debug, Default)]
struct Trial {
    acked: usize,
    recovered: u64,
    lost: Vec<u64>,
    /// The loss's span: from the oldest lost frame's `Ok` to the child's last `Ok` (µs).
    lost_span_us: u64,
    duplicates: usize,
    /// The oldest duplicated frame's `Ok`, before the child's last (µs).
    duplicate_span_us: u64,
}

/// A child streams through a spool to peer A and is SIGKILLed after a random time; then the
/// spool is opened here with peer B, and what it recovered is confirmed there.
fn crash_trial(policy: &str, durability: Durability, rng: &mut impl Rng) -> Trial {
    let dir = ScratchDir::new("spool-crash");
    let a = Peer::start(Behaviour::Sink);
    let mut child = SpoolChild::start(dir.path(), policy, a.port());
    std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
    assert!(child.running(), "the child died before its kill");
    let acked = child.kill9();
    assert!(a.wait_all_closed(BOUND), "peer A never saw the child's end");
    let b = Peer::start(Behaviour::Sink);
    let link = spooled(&b.endpoint(), &dir, durability);
    let (frames, cut) = recovered(&link).unwrap_or_default();
    assert_eq!(cut, 0, "a process's death is no damage");
    assert!(
        wait_until(BOUND, || link.metrics().frames_confirmed >= frames),
        "the recovered frames were not confirmed: {:?}",
        link.metrics()
    );
    assert!(wait_until(BOUND, || numbers(&b).len() as u64 >= frames));
    link.close(Duration::from_secs(5));
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for n in numbers(&a).into_iter().chain(numbers(&b)) {
        *seen.entry(n).or_default() += 1;
    }
    let last = acked.last().map_or(0, |&(_, t)| t);
    let lost: Vec<(u64, u64)> = acked
        .iter()
        .copied()
        .filter(|(s, _)| !seen.contains_key(s))
        .collect();
    Trial {
        acked: acked.len(),
        recovered: frames,
        lost_span_us: lost.first().map_or(0, |&(_, t)| last - t),
        lost: lost.iter().map(|&(s, _)| s).collect(),
        duplicates: seen.values().filter(|&&n| n > 1).count(),
        duplicate_span_us: acked
            .iter()
            .find(|(s, _)| seen.get(s).is_some_and(|&n| n > 1))
            .map_or(0, |&(_, t)| last - t),
    }
}

fn crash_trials(policy: &str, durability: Durability, n: usize) -> Vec<Trial> {
    let _p = proc::shared();
    let mut rng = rand::rngs::StdRng::seed_from_u64(40);
    let trials: Vec<Trial> = (0..n)
        .map(|_| crash_trial(policy, durability, &mut rng))
        .collect();
    let sum = |f: fn(&Trial) -> usize| trials.iter().map(f).sum::<usize>();
    eprintln!(
        "spool crash trials ({policy}): {n} kills, {} frames acknowledged, {} recovered, \
         {} lost, {} duplicated, longest loss span {} µs, oldest duplicate {} µs before the \
         kill",
        sum(|t| t.acked),
        trials.iter().map(|t| t.recovered).sum::<u64>(),
        sum(|t| t.lost.len()),
        sum(|t| t.duplicates),
        trials.iter().map(|t| t.lost_span_us).max().unwrap_or(0),
        trials
            .iter()
            .map(|t| t.duplicate_span_us)
            .max()
            .unwrap_or(0),
    );
    trials
}

/// The spool records what left about a millisecond after it left: a frame confirmed longer
/// before the kill than that (and the scheduler's delays on two shared cores) is not sent
/// again.
const DUPLICATES_WITHIN_US: u64 = 1_000 + 99_000;

#[test]
fn every_frame_sync_loses_nothing_and_repeats_only_the_last_moments_across_100_kills() {
    for t in crash_trials("every", Durability::EveryFrame, 100) {
        assert!(t.lost.is_empty(), "lost {:?} ({t:?})", t.lost);
        assert!(t.duplicate_span_us <= DUPLICATES_WITHIN_US, "{t:?}");
    }
}

#[test]
fn os_write_back_loses_nothing_when_only_the_process_dies() {
    for t in crash_trials("os", Durability::OsWriteBack, 30) {
        assert!(t.lost.is_empty(), "lost {:?} ({t:?})", t.lost);
        assert!(t.duplicate_span_us <= DUPLICATES_WITHIN_US, "{t:?}");
    }
}

#[test]
fn group_commit_loses_nothing_when_only_the_process_dies() {
    // The records are in the page cache when `send` returns; the interval bounds only what a
    // power cut can take.
    for t in crash_trials("group:5", Durability::Group(Duration::from_millis(5)), 30) {
        assert!(t.lost.is_empty(), "lost {:?} ({t:?})", t.lost);
        assert!(t.duplicate_span_us <= DUPLICATES_WITHIN_US, "{t:?}");
    }
}

/// Frames left in a spool by a link that closed before it could send them (no peer).
fn fill(dir: &ScratchDir, n: u64, ttl: Option<Duration>) -> Vec<u64> {
    let mut b = Link::builder(refused_endpoint())
        .framing(Lines::new())
        .spool(Spool::new(dir.path()).durability(Durability::OsWriteBack));
    if let Some(ttl) = ttl {
        b = b.delivery(|d| d.frame_ttl = Some(ttl));
    }
    let link = b.build().expect("link");
    let seqs = (0..n)
        .map(|_| link.send_numbered(|s| format!("{s}")).expect("send"))
        .collect();
    let m = link.close(Duration::from_millis(10));
    assert_eq!(m.abandoned.shutdown, n, "closed before any was sent");
    seqs
}

/// Opens the spool again, waiting (bounded) for the lock the closed link's threads still hold.
fn reopen(endpoint: &str, dir: &ScratchDir) -> Link {
    reopen_with(endpoint, dir.path(), Durability::OsWriteBack)
}

#[test]
fn frames_left_at_a_close_are_sent_first_at_the_next_start_in_order() {
    let dir = ScratchDir::new("spool-replay");
    let seqs = fill(&dir, 50, None);
    let peer = Peer::start(Behaviour::Sink);
    let link = reopen(&peer.endpoint(), &dir);
    assert_eq!(recovered(&link), Some((50, 0)));
    let next = link.send_numbered(|s| format!("{s}")).expect("send");
    assert!(
        seqs.iter().all(|&s| s < next),
        "numbers go on past every number the spool handed out: {next}"
    );
    assert!(wait_until(BOUND, || numbers(&peer).len() == 51));
    let mut want = seqs.clone();
    want.push(next);
    assert_eq!(
        numbers(&peer),
        want,
        "recovered first, in order, then the new one"
    );
    assert!(wait_until(BOUND, || link.metrics().frames_confirmed == 51));
    let m = link.close(Duration::from_secs(1));
    assert_eq!((m.frames_recovered, m.frames_submitted), (50, 51));
    drop(link);
    let again = reopen(&refused_endpoint(), &dir);
    assert_eq!(recovered(&again), None, "confirmed frames left the spool");
}

/// The link's first event when its spool held frames or reported damage (bounded): frames
/// recovered, bytes cut, and how many frames at most were lost with their numbers.
fn recovered_all(link: &Link) -> Option<(u64, u64, u64, std::ops::Range<u64>)> {
    match link.events().recv_timeout(Duration::from_secs(5)) {
        Ok(Event::Recovered {
            frames,
            cut_bytes,
            lost_at_most,
            lost_seqs,
            ..
        }) => Some((frames, cut_bytes, lost_at_most, lost_seqs)),
        _ => None,
    }
}

#[test]
fn a_torn_tail_cut_at_random_offsets_is_cut_counted_and_reported() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    for _ in 0..20 {
        let dir = ScratchDir::new("spool-torn");
        fill(&dir, 40, None);
        let seg = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|x| x == "seg") && fs::metadata(p).unwrap().len() > 0
            })
            .expect("a segment with the frames");
        let len = fs::metadata(&seg).unwrap().len();
        let cut_at = rng.random_range(0..len);
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(cut_at)
            .unwrap();
        // A record is 24 bytes of header and the frame's bytes (its number, no newline); the
        // segment's seal follows the last.
        let mut whole = 0;
        let mut at = 0;
        for s in 0..40u64 {
            at += 24 + s.to_string().len() as u64;
            if at > cut_at {
                break;
            }
            whole += 1;
        }
        let good: u64 = (0..whole).map(|s| 24 + s.to_string().len() as u64).sum();
        let peer = Peer::start(Behaviour::Sink);
        let link = reopen(&peer.endpoint(), &dir);
        let got = recovered_all(&link);
        // The close said 40 frames: those missing are reported by their numbers.
        let lost = 40 - whole;
        let seqs = if lost > 0 { whole..40 } else { 0..0 };
        if cut_at == good && whole == 0 {
            assert_eq!(got, Some((0, 0, 40, 0..40)));
        } else {
            assert_eq!(
                got,
                Some((whole, cut_at - good, lost, seqs)),
                "cut at {cut_at} of {len}"
            );
        }
        assert!(wait_until(BOUND, || numbers(&peer).len() as u64 == whole));
        assert_eq!(numbers(&peer), (0..whole).collect::<Vec<_>>());
        let m = link.close(Duration::from_secs(1));
        assert_eq!(
            (
                m.frames_recovered,
                m.spool_bytes_cut,
                m.spool_frames_lost_at_most
            ),
            (whole, cut_at - good, lost)
        );
    }
}

#[test]
fn a_segment_cut_at_a_record_boundary_reports_the_lost_frames_in_the_event_and_metrics() {
    let dir = ScratchDir::new("spool-cut-boundary");
    fill(&dir, 300, None);
    let seg = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "seg") && fs::metadata(p).unwrap().len() > 0)
        .expect("a segment with the frames");
    let boundary: u64 = (0..200u64).map(|s| 24 + s.to_string().len() as u64).sum();
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(boundary)
        .unwrap();
    let link = reopen(&refused_endpoint(), &dir);
    assert_eq!(recovered_all(&link), Some((200, 0, 100, 200..300)));
    let m = link.close(Duration::from_millis(10));
    assert_eq!(
        (
            m.frames_recovered,
            m.spool_bytes_cut,
            m.spool_frames_lost_at_most
        ),
        (200, 0, 100)
    );
}

#[test]
fn a_second_process_on_the_same_spool_is_refused() {
    let _p = proc::shared();
    let dir = ScratchDir::new("spool-two");
    let a = Peer::start(Behaviour::Sink);
    let mut child = SpoolChild::start(dir.path(), "os", a.port());
    let err = Link::builder(a.endpoint())
        .spool(Spool::new(dir.path()))
        .build()
        .expect_err("two processes on one spool");
    assert!(
        matches!(&err, ConfigError::Spool(e) if e.contains("in use")),
        "{err}"
    );
    child.kill9();
    // The kernel released the dead child's lock.
    let link = Link::builder(refused_endpoint())
        .spool(Spool::new(dir.path()))
        .build()
        .expect("the spool is free once its process died");
    let second = Link::builder(refused_endpoint())
        .spool(Spool::new(dir.path()))
        .build();
    assert!(
        matches!(second, Err(ConfigError::Spool(_))),
        "two links, one process"
    );
    link.close(Duration::from_millis(10));
}

#[test]
fn a_spool_that_outlives_its_frames_deadlines_reports_them_expired() {
    let dir = ScratchDir::new("spool-expired");
    fill(&dir, 10, Some(Duration::from_millis(50)));
    // The deadlines are wall-clock: they pass while no process holds the spool.
    std::thread::sleep(Duration::from_millis(100));
    let peer = Peer::start(Behaviour::Sink);
    let link = reopen(&peer.endpoint(), &dir);
    assert_eq!(recovered(&link), Some((10, 0)));
    let mut expired = 0;
    let deadline = Instant::now() + BOUND;
    while expired < 10 && Instant::now() < deadline {
        if let Ok(Event::Abandoned { reason, .. }) = link.events().recv_timeout(BOUND) {
            assert_eq!(reason, AbandonReason::Expired);
            expired += 1;
        }
    }
    assert_eq!(expired, 10);
    assert!(numbers(&peer).is_empty(), "an expired frame is never sent");
    link.close(Duration::from_secs(1));
    drop(link);
    let again = reopen(&refused_endpoint(), &dir);
    assert_eq!(recovered(&again), None, "reported frames left the spool");
}

#[test]
fn a_sender_is_refused_on_a_spooled_link() {
    let dir = ScratchDir::new("spool-sender");
    let link = Link::builder(refused_endpoint())
        .spool(Spool::new(dir.path()))
        .build()
        .unwrap();
    let mut sender = link.producer();
    assert!(matches!(sender.send("x"), Err(SendError::Spool(..))));
    link.close(Duration::from_millis(10));
}

#[test]
#[ignore = "needs root (mounts a small tmpfs)"]
fn a_full_disk_is_an_error_at_the_call_with_the_frame_given_back() {
    full_disk(Durability::EveryFrame);
}

#[test]
#[ignore = "needs root (mounts a small tmpfs)"]
fn a_full_disk_under_group_commit_is_an_error_at_the_call_never_a_crash() {
    // The stage's space is reserved when the spool opens: a copy into its mapping cannot meet
    // a full disk (SIGBUS); the write of the stage to a segment meets it, at a call.
    full_disk(Durability::Group(Duration::from_millis(5)));
}

/// A tmpfs of `size` mounted on a scratch directory, unmounted on drop (needs root).
struct Tmpfs(ScratchDir);

impl Tmpfs {
    fn mount(name: &str, size: &str) -> Tmpfs {
        let dir = ScratchDir::new(name);
        fs::create_dir_all(dir.path()).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(mounted.success(), "mount a tmpfs (needs root)");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

/// Frames of 4000 B sent through a spool on a 1 280 KiB tmpfs (256 KiB past the 1 MiB stage
/// `Group` reserves) until one is refused.
fn full_disk(durability: Durability) {
    let disk = Tmpfs::mount("spool-full", "1280k");
    let spool_dir = disk.0.path().join("spool");
    let link = Link::builder(refused_endpoint())
        .spool(Spool::new(&spool_dir).durability(durability))
        .delivery(|d| {
            d.outbox_frames = 100_000;
            d.outbox_bytes = 64 << 20;
        })
        .build()
        .unwrap();
    let frame = vec![b'x'; 4000];
    let mut accepted = 0u64;
    let err = loop {
        match link.send(frame.clone()) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(
            accepted < 1000,
            "a 1 280 KiB disk took {accepted} frames of 4000 B"
        );
    };
    eprintln!("full disk ({durability:?}): {accepted} frames accepted, then: {err}");
    assert!(
        matches!(&err, SendError::Spool(f, _) if f.len() == 4000),
        "{err:?}"
    );
    let m = link.close(Duration::from_millis(10));
    assert_eq!((m.frames_submitted, m.frames_rejected), (accepted + 1, 1));
    drop(link);
    let peer = Peer::start(Behaviour::Sink);
    let again = wait_for(BOUND, || {
        Link::builder(peer.endpoint())
            .spool(Spool::new(&spool_dir).durability(durability))
            .build()
            .ok()
    })
    .expect("reopen");
    assert_eq!(
        recovered(&again).map(|r| r.0),
        Some(accepted),
        "every accepted frame kept"
    );
    assert!(wait_until(BOUND, || again.metrics().frames_confirmed == accepted));
    again.close(Duration::from_secs(1));
}

#[test]
fn a_batch_keeps_in_the_spool_exactly_the_frames_the_outbox_took() {
    let dir = ScratchDir::new("spool-batch");
    let link = Link::builder(refused_endpoint())
        .framing(Lines::new())
        .delivery(|d| {
            d.outbox_frames = 3;
            d.outbox_bytes = 1024;
        })
        .spool(Spool::new(dir.path()).durability(Durability::EveryFrame))
        .build()
        .unwrap();
    let err = link
        .send_batch(
            ["0", "1", "2", "3", "4"].into_iter().collect(),
            relink::SendOptions::new(),
        )
        .unwrap_err();
    assert_eq!(err.accepted(), 3);
    let m = link.close(Duration::from_millis(10));
    assert_eq!(m.abandoned.shutdown, 3);
    drop(link);
    let peer = Peer::start(Behaviour::Sink);
    let link = reopen(&peer.endpoint(), &dir);
    assert_eq!(
        recovered(&link),
        Some((3, 0)),
        "the refused frames left no record"
    );
    assert!(wait_until(BOUND, || numbers(&peer).len() == 3));
    assert_eq!(numbers(&peer), [0, 1, 2]);
    let mut writer = link.writer();
    writer.send("3").unwrap();
    writer.flush().unwrap();
    assert!(wait_until(BOUND, || numbers(&peer).len() == 4));
    let next = link.send_numbered(|s| format!("{s}")).unwrap();
    assert!(next > 2, "numbers go on past the recovered ones: {next}");
    link.close(Duration::from_secs(1));
}

/// Opens the spool at once (no wait for its lock): `Err` holds the build's error.
fn open_now(endpoint: &str, dir: &ScratchDir) -> Result<Link, ConfigError> {
    Link::builder(endpoint)
        .framing(Lines::new())
        .spool(Spool::new(dir.path()).durability(Durability::OsWriteBack))
        .build()
}

/// Opens the spool once its lock is free, within 5 s: a child process another test forks
/// holds a copy of the lock's descriptor until its `exec` (a few milliseconds). A lock held
/// by the closed link itself stays held past the bound.
fn open_soon(endpoint: &str, dir: &ScratchDir) -> Result<Link, ConfigError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open_now(endpoint, dir) {
            Err(ConfigError::Spool(e)) if e.contains("in use") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// A spooled link whose 300 frames were all confirmed by a sink, with a clone of its events
/// held by the caller.
fn confirmed_300(dir: &ScratchDir, peer: &Peer) -> (Link, relink::Events) {
    let link = open_now(&peer.endpoint(), dir).expect("a spooled link");
    let events = link.events().clone();
    for _ in 0..300 {
        link.send_numbered(|s| format!("{s}")).expect("send");
    }
    link.flush(BOUND).expect("every frame confirmed");
    (link, events)
}

/// The clone sees the end of the stream (bounded): every event taken, then `Disconnected`.
fn ends(events: &relink::Events) -> bool {
    let deadline = Instant::now() + BOUND;
    loop {
        match events.recv_deadline(deadline) {
            Ok(_) => continue,
            Err(relink::error::RecvTimeoutError::Disconnected) => return true,
            Err(relink::error::RecvTimeoutError::Timeout) => return false,
        }
    }
}

#[test]
fn close_lets_the_spool_go_while_a_clone_of_the_events_lives() {
    let dir = ScratchDir::new("spool-close-clone");
    let peer = Peer::start(Behaviour::Sink);
    let (link, events) = confirmed_300(&dir, &peer);
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.frames_confirmed, 300);
    // At once: `close` returned after the spool closed, its lock let go.
    let again = open_soon(&refused_endpoint(), &dir).expect("the lock is let go at close");
    assert_eq!(recovered(&again), None, "no confirmed frame is replayed");
    assert!(ends(&events), "the clone sees the end of the stream");
    drop((link, events));
}

#[test]
fn the_last_link_dropped_lets_the_spool_go_while_a_clone_of_the_events_lives() {
    let dir = ScratchDir::new("spool-drop-clone");
    let peer = Peer::start(Behaviour::Sink);
    let (link, events) = confirmed_300(&dir, &peer);
    drop(link);
    // The end of the stream comes once the spool is closed.
    assert!(ends(&events), "the clone sees the end of the stream");
    let again = open_soon(&refused_endpoint(), &dir).expect("the lock is let go");
    assert_eq!(recovered(&again), None, "no confirmed frame is replayed");
    drop(events);
}

#[test]
fn frames_recovered_past_the_outbox_limit_are_all_sent_and_none_abandoned() {
    let dir = ScratchDir::new("spool-over-limit");
    // 500 frames left in the spool by a link whose outbox held them all.
    let link = Link::builder(refused_endpoint())
        .framing(Lines::new())
        .delivery(|d| {
            d.outbox_frames = 1000;
            d.outbox_bytes = 1 << 20;
        })
        .spool(Spool::new(dir.path()).durability(Durability::OsWriteBack))
        .build()
        .expect("link");
    for _ in 0..500 {
        link.send_numbered(|s| format!("{s}")).expect("send");
    }
    link.close(Duration::from_millis(10));
    drop(link);
    // The next start's outbox holds 100 frames: the 500 recovered go all the same.
    let peer = Peer::start(Behaviour::Sink);
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .delivery(|d| {
            d.outbox_frames = 100;
            d.outbox_bytes = 1 << 20;
        })
        .spool(Spool::new(dir.path()).durability(Durability::OsWriteBack))
        .build()
        .expect("link");
    assert_eq!(recovered(&link), Some((500, 0)));
    assert!(
        wait_until(BOUND, || link.metrics().frames_confirmed == 500),
        "{:?}",
        link.metrics()
    );
    let m = link.close(Duration::from_secs(1));
    assert_eq!(m.abandoned.overflow, 0, "no recovered frame given back");
    assert_eq!(numbers(&peer), (0..500).collect::<Vec<_>>());
    while let Ok(ev) = link.events().try_recv() {
        assert!(!matches!(ev, Event::Abandoned { .. }), "{ev:?}");
    }
}

#[test]
#[ignore = "needs root (mounts a small tmpfs)"]
fn a_full_disk_is_a_state_the_link_comes_out_of_under_every_frame() {
    full_disk_survived(Durability::EveryFrame, 4000);
    full_disk_survived(Durability::EveryFrame, 1000);
}

#[test]
#[ignore = "needs root (mounts a small tmpfs)"]
fn a_full_disk_is_a_state_the_link_comes_out_of_under_os_write_back() {
    full_disk_survived(Durability::OsWriteBack, 1000);
}

#[test]
#[ignore = "needs root (mounts a small tmpfs)"]
fn a_full_disk_is_a_state_the_link_comes_out_of_under_group_commit() {
    full_disk_survived(Durability::Group(Duration::from_millis(5)), 1000);
}

/// The next `Event::Error` of the spool within the bound: whether it says the spool writes.
fn spool_news(events: &relink::Events) -> Option<bool> {
    let deadline = Instant::now() + BOUND;
    loop {
        match events.recv_deadline(deadline) {
            Ok(Event::Error(relink::error::LinkError::Spool { writable, .. })) => {
                return Some(writable)
            }
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// On a 2 MiB tmpfs with the receiver away: frames of about `size` bytes until the disk is full
/// (refused at the call, an `Event::Error` says so); the receiver back, every accepted frame
/// confirmed; then 200 more frames taken as the space of the confirmed ones is freed (an
/// `Event::Error` says the spool writes again); after a clean close a start replays none of
/// the confirmed frames and reports none lost.
fn full_disk_survived(durability: Durability, size: usize) {
    let disk = Tmpfs::mount("spool-full-survived", "2m");
    let dir = disk.0.path().join("spool");
    let port = free_port();
    let link = Link::builder(endpoint_for(port))
        .framing(Lines::new())
        .spool(Spool::new(&dir).durability(durability))
        .delivery(|d| {
            d.outbox_frames = 100_000;
            d.outbox_bytes = 64 << 20;
        })
        .build()
        .unwrap();
    let pad = "x".repeat(size);
    let mut accepted = 0u64;
    let err = loop {
        match link.send_numbered(|s| format!("{s} {pad}")) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(
            accepted < 4000,
            "a 2 MiB disk took {accepted} frames of {size} B"
        );
    };
    assert!(matches!(&err, SendError::Spool(..)), "{err:?}");
    let mut refused = 1;
    for _ in 0..9 {
        if link.send_numbered(|s| format!("{s} {pad}")).is_err() {
            refused += 1;
        }
    }
    assert_eq!(
        spool_news(link.events()),
        Some(false),
        "the full disk is told"
    );
    let peer = Peer::start_on(port, Behaviour::Sink).expect("the receiver back");
    link.flush(BOUND).expect("every accepted frame confirmed");
    let confirmed = link.metrics().frames_confirmed;
    assert_eq!(confirmed, accepted + 10 - refused);
    // The space of the confirmed frames is freed while the link lives.
    let mut after = 0;
    for _ in 0..200 {
        let took = wait_until(BOUND, || {
            link.send_numbered(|s| format!("{s} {pad}")).is_ok()
        });
        assert!(took, "a send refused once the disk had room: {after} taken");
        after += 1;
    }
    assert_eq!(
        spool_news(link.events()),
        Some(true),
        "the spool writes again"
    );
    link.flush(BOUND).expect("the new frames confirmed");
    let m = link.close(Duration::from_secs(1));
    drop(link);
    let again = reopen_with(&refused_endpoint(), &dir, durability);
    let replayed = recovered(&again).map_or(0, |r| r.0);
    eprintln!(
        "full disk survived ({durability:?}, {size} B): {accepted} accepted, {refused} of 10 refused \
         then, {confirmed} confirmed, {after} of 200 taken once the receiver was back, {} \
         confirmed in all, {replayed} replayed after the clean close",
        m.frames_confirmed
    );
    assert_eq!(replayed, 0, "a confirmed frame replayed");
    again.close(Duration::from_millis(10));
    drop(peer);
}

/// Opens the spool at `dir` under `durability` once its lock is free (bounded).
fn reopen_with(endpoint: &str, dir: &std::path::Path, durability: Durability) -> Link {
    wait_for(BOUND, || {
        match Link::builder(endpoint)
            .framing(Lines::new())
            .spool(Spool::new(dir).durability(durability))
            .build()
        {
            Ok(link) => Some(link),
            Err(ConfigError::Spool(e)) if e.contains("in use") => None,
            Err(e) => panic!("reopen: {e}"),
        }
    })
    .expect("the spool's lock was never released")
}

#[test]
fn runs_killed_in_a_row_with_the_receiver_away_report_no_frame_lost() {
    let _p = proc::shared();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for (policy, durability) in [
        ("os", Durability::OsWriteBack),
        ("group:5", Durability::Group(Duration::from_millis(5))),
        ("every", Durability::EveryFrame),
    ] {
        let dir = ScratchDir::new("spool-kills-in-a-row");
        // Nobody listens: every frame stays in the spool.
        let away = free_port();
        let mut acked = 0;
        for _ in 0..4 {
            let mut child = SpoolChild::start(dir.path(), policy, away);
            std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
            acked += child.kill9().len() as u64;
        }
        let peer = Peer::start(Behaviour::Sink);
        let link = reopen_with(&peer.endpoint(), dir.path(), durability);
        let got = recovered_all(&link);
        let (frames, cut, lost, seqs) = got.clone().expect("the frames of 4 runs");
        eprintln!(
            "4 runs killed in a row ({policy}): {acked} acknowledged, {frames} recovered, \
             {cut} bytes cut, {lost} reported lost {seqs:?}"
        );
        assert!(frames >= acked, "{got:?}: {acked} acknowledged");
        assert_eq!((cut, lost), (0, 0), "{policy}: {got:?}");
        assert!(wait_until(BOUND, || link.metrics().frames_confirmed == frames));
        link.close(Duration::from_secs(1));
    }
}
