use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::marks::{MarksFile, AHEAD, HEADROOM_MIN};
use super::*;
use crate::core::batch::Batch;
use crate::spool::SEGMENT_BYTES;

/// A directory of its own under the system's temporary one, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p =
            std::env::temp_dir().join(format!("relink-spool-unit-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn put(store: &Store, frame: &'static [u8]) -> u64 {
    let r = store.admit_one(|_| Bytes::from_static(frame), 0, |_| Ok::<(), ()>(()));
    r.ok()
        .and_then(|r| r.ok())
        .map(|(seq, ())| seq)
        .expect("admitted")
}

fn settle(store: Arc<Store>) {
    drop(store);
}

/// A spool of its own in a new directory, opened.
fn open(name: &str, policy: Durability) -> (Dir, Spool, Arc<Store>) {
    let dir = Dir::new(name);
    let spool = Spool::new(&dir.0).durability(policy);
    let (store, _) = Store::open(&spool).unwrap();
    (dir, spool, store)
}

/// Under `Group`, with an interval longer than any test: nothing is synced.
const UNSYNCED: Durability = Durability::Group(Duration::from_secs(60));

const POLICIES: [Durability; 3] = [Durability::EveryFrame, Durability::OsWriteBack, UNSYNCED];

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs
}

/// The numbers of the records the spool's files hold now (segments, then the stage), as a
/// process that died this moment would leave them.
fn on_disk(dir: &Path) -> Vec<u64> {
    let read = |p: &Path| Bytes::from(fs::read(p).unwrap());
    let mut seqs: Vec<u64> = segments(dir)
        .iter()
        .flat_map(|p| record::read_segment(&read(p)).records)
        .map(|r| r.seq)
        .collect();
    let stage = dir.join("stage");
    if stage.exists() {
        seqs.extend(record::decode_rising(&read(&stage)).0.iter().map(|r| r.seq));
    }
    seqs
}

/// The spool's files as they are this moment (what a SIGKILL of this process would leave,
/// the page cache included), copied to `to`.
fn crash_copy(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().filter_map(|e| e.ok()) {
        if e.file_name() != "LOCK" {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The spool's files as a power cut this moment would leave them, copied to `to`, when only
/// the stage holds what was not synced (the tests below sync or write nothing else unsynced
/// by then): the stage's pages never written back.
fn power_cut_copy(from: &Path, to: &Path) {
    crash_copy(from, to);
    let stage = to.join("stage");
    if stage.exists() {
        let len = fs::metadata(&stage).unwrap().len() as usize;
        fs::write(&stage, vec![0u8; len]).unwrap();
    }
}

/// Opens `dir` as a start after the machine went down would (another boot).
fn open_after_reboot(dir: &Path, policy: Durability) -> (Arc<Store>, Recovered) {
    Store::open_in_boot(
        &Spool::new(dir).durability(policy),
        b"another boot".to_vec(),
    )
    .unwrap()
}

fn seqs(rec: &Recovered) -> Vec<u64> {
    rec.frames.iter().map(|f| f.0).collect()
}

#[test]
fn a_power_cut_under_group_reports_the_numbers_after_the_last_group_at_most() {
    let (dir, _, store) = open("cut-group", UNSYNCED);
    let cut = Dir::new("cut-group-after");
    for _ in 0..3 {
        put(&store, b"synced");
    }
    store.flush();
    let unsynced: Vec<u64> = (0..5).map(|_| put(&store, b"staged")).collect();
    power_cut_copy(&dir.0, &cut.0);
    settle(store);
    let (_store, rec) = open_after_reboot(&cut.0, UNSYNCED);
    assert_eq!(seqs(&rec), [0, 1, 2], "the group synced is recovered");
    let (at_most, numbers) = rec.lost.clone();
    assert!(
        unsynced.iter().all(|n| numbers.contains(n)),
        "{unsynced:?} lost, {numbers:?} reported"
    );
    assert_eq!(numbers.start, 3, "no number recovered is reported");
    assert_eq!(
        at_most, HEADROOM_MIN,
        "bounded by the marker of the last group: {numbers:?}"
    );
}

#[test]
fn a_power_cut_after_random_groups_reports_every_unsynced_number_and_no_synced_one() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(40);
    for trial in 0..30 {
        let (dir, _, store) = open("cut-random", UNSYNCED);
        let cut = Dir::new("cut-random-after");
        // Groups synced by the spool's thread (`flush`), then frames never synced; fewer than
        // the stage holds, so that nothing unsynced reaches a segment.
        let (mut synced, mut group) = (0u64, 0u64);
        for _ in 0..rng.random_range(0..4) {
            group = rng.random_range(0..600);
            for _ in 0..group {
                put(&store, b"x");
            }
            synced += group;
            store.flush();
        }
        let unsynced = rng.random_range(0..800);
        for _ in 0..unsynced {
            put(&store, b"x");
        }
        power_cut_copy(&dir.0, &cut.0);
        settle(store);
        let (_store, rec) = open_after_reboot(&cut.0, UNSYNCED);
        let why = format!("trial {trial}: {synced} synced, last group {group}, {unsynced} not");
        assert_eq!(seqs(&rec), (0..synced).collect::<Vec<_>>(), "{why}");
        let (at_most, numbers) = rec.lost;
        assert!(
            numbers.start == synced && numbers.end >= synced + unsynced,
            "{why}: {numbers:?}"
        );
        assert_eq!(at_most, numbers.end - numbers.start, "{why}");
        assert!(
            at_most <= HEADROOM_MIN + AHEAD * group.max(unsynced) + unsynced,
            "{why}: {at_most}"
        );
    }
}

#[test]
fn records_a_dead_process_left_unsynced_outlive_a_power_cut_in_the_next_run() {
    for policy in [UNSYNCED, Durability::OsWriteBack] {
        let (dir, _, store) = open("carried", policy);
        let crashed = Dir::new("carried-dead");
        let cut = Dir::new("carried-cut");
        put(&store, b"a");
        store.flush();
        put(&store, b"b");
        // The process dies: a in the segment, b in the stage, neither synced under
        // `OsWriteBack`, b not under `Group`.
        crash_copy(&dir.0, &crashed.0);
        settle(store);
        let spool = Spool::new(&crashed.0).durability(policy);
        let (store, rec) = Store::open(&spool).unwrap();
        assert_eq!(seqs(&rec), [0, 1], "{policy:?}");
        // The next run is cut before it syncs anything of its own.
        power_cut_copy(&crashed.0, &cut.0);
        settle(store);
        let (_store, rec) = open_after_reboot(&cut.0, policy);
        assert_eq!(seqs(&rec), [0, 1], "{policy:?}: synced at the start");
        assert!(
            !rec.lost.1.contains(&0) && !rec.lost.1.contains(&1),
            "{policy:?}"
        );
    }
}

#[test]
fn a_process_death_in_the_same_boot_reports_nothing_lost() {
    let (dir, spool, store) = open("death", UNSYNCED);
    let crashed = Dir::new("death-after");
    store.flush();
    for _ in 0..5 {
        put(&store, b"staged");
    }
    crash_copy(&dir.0, &crashed.0);
    settle(store);
    let (_store, rec) = Store::open(&Spool::new(&crashed.0).durability(UNSYNCED)).unwrap();
    assert_eq!(seqs(&rec), [0, 1, 2, 3, 4]);
    assert_eq!(rec.lost, (0, 0..0));
    drop(spool);
}

#[test]
fn a_clean_close_reports_nothing_lost_after_a_reboot() {
    for policy in POLICIES {
        let (dir, _, store) = open("closed", policy);
        for _ in 0..5 {
            put(&store, b"kept");
        }
        settle(store);
        let cut = Dir::new("closed-after");
        // A power cut after the close: what the close synced is all there is.
        power_cut_copy(&dir.0, &cut.0);
        let (_store, rec) = open_after_reboot(&cut.0, policy);
        assert_eq!(seqs(&rec), [0, 1, 2, 3, 4], "{policy:?}");
        assert_eq!(rec.lost, (0, 0..0), "{policy:?}");
    }
}

#[test]
fn every_frame_reports_nothing_lost_after_a_reboot() {
    let (dir, _, store) = open("cut-every", Durability::EveryFrame);
    let cut = Dir::new("cut-every-after");
    for _ in 0..3 {
        put(&store, b"synced");
    }
    power_cut_copy(&dir.0, &cut.0);
    settle(store);
    let (_store, rec) = open_after_reboot(&cut.0, Durability::EveryFrame);
    assert_eq!(seqs(&rec), [0, 1, 2]);
    assert_eq!(rec.lost, (0, 0..0));
}

#[test]
fn a_power_cut_under_os_write_back_reports_up_to_the_reserved_numbers() {
    let (dir, _, store) = open("cut-os", Durability::OsWriteBack);
    let cut = Dir::new("cut-os-after");
    for _ in 0..3 {
        put(&store, b"staged");
    }
    power_cut_copy(&dir.0, &cut.0);
    settle(store);
    let (_store, rec) = open_after_reboot(&cut.0, Durability::OsWriteBack);
    assert!(rec.frames.is_empty(), "nothing was written back");
    assert_eq!(rec.lost, (1 + RESERVE, 0..1 + RESERVE));
}

#[test]
fn a_burst_past_the_markers_bound_writes_a_marker_in_the_caller() {
    let (dir, _, store) = open("burst", UNSYNCED);
    let cut = Dir::new("burst-after");
    let burst = HEADROOM_MIN + 50;
    for _ in 0..burst {
        put(&store, b"burst");
    }
    // The spool's thread has not run (its interval is a minute): the caller that reached the
    // opening marker's bound wrote one itself, with room for the burst.
    let (_, last) = MarksFile::open(&dir.0).unwrap();
    let last = last.expect("a marker");
    assert!(last.bound >= burst, "{last:?}");
    power_cut_copy(&dir.0, &cut.0);
    settle(store);
    let (_store, rec) = open_after_reboot(&cut.0, UNSYNCED);
    assert!(rec.frames.is_empty(), "nothing was synced");
    let (at_most, numbers) = rec.lost;
    assert_eq!((numbers.start, numbers.end), (0, last.bound));
    // A marker of the spool's thread would have come within the interval; the caller's
    // lets the burst go on to (1 + AHEAD) times what it handed out.
    assert!(
        at_most >= burst && at_most <= (1 + AHEAD) * (burst + 1),
        "{at_most} reported for {burst} lost"
    );
}

#[test]
fn frames_not_left_are_recovered_in_order_with_their_numbers() {
    let dir = Dir::new("recover");
    let spool = Spool::new(&dir.0).durability(Durability::OsWriteBack);
    let (store, rec) = Store::open(&spool).unwrap();
    assert!(rec.frames.is_empty());
    assert_eq!(put(&store, b"a"), 0);
    assert_eq!(put(&store, b"b"), 1);
    assert_eq!(put(&store, b"c"), 2);
    store.left(&mut vec![1]);
    settle(store);
    let (store, rec) = Store::open(&spool).unwrap();
    let got: Vec<(u64, Bytes)> = rec.frames.into_iter().map(|(s, _, f)| (s, f)).collect();
    assert_eq!(got, [(0, Bytes::from("a")), (2, Bytes::from("c"))]);
    let d = put(&store, b"d");
    assert!(d > 2, "numbers go on across restarts: {d}");
    assert_eq!(put(&store, b"e"), d + 1, "one by one within a run");
}

#[test]
fn a_number_handed_out_before_a_crash_is_never_handed_out_again() {
    let dir = Dir::new("reserved");
    let spool = Spool::new(&dir.0).durability(Durability::Group(Duration::from_secs(60)));
    let (store, _) = Store::open(&spool).unwrap();
    let handed: Vec<u64> = [b"a", b"b", b"c"].iter().map(|f| put(&store, *f)).collect();
    settle(store);
    // A power cut before the group was synced: none of the three reached the disk.
    for seg in fs::read_dir(&dir.0).unwrap().filter_map(|e| e.ok()) {
        if seg.file_name().to_string_lossy().ends_with(".seg") {
            OpenOptions::new()
                .write(true)
                .open(seg.path())
                .unwrap()
                .set_len(0)
                .unwrap();
        }
    }
    let (store, rec) = Store::open(&spool).unwrap();
    assert!(rec.frames.is_empty(), "nothing of them is on disk");
    let next = put(&store, b"d");
    assert!(
        handed.iter().all(|&n| n < next),
        "a peer may have seen {handed:?}; the next frame got {next}"
    );
}

#[test]
fn a_refused_frame_leaves_nothing_in_the_spool() {
    for policy in POLICIES {
        let (dir, spool, store) = open("refused", policy);
        let r = store.admit_one(|_| Bytes::from_static(b"no"), 0, |_| Err::<(), _>("full"));
        assert!(matches!(r, Ok(Err((_, "full")))));
        assert!(on_disk(&dir.0).is_empty(), "{policy:?}");
        assert_eq!(put(&store, b"yes"), 0, "the refused frame took no number");
        settle(store);
        let (_store, rec) = Store::open(&spool).unwrap();
        assert_eq!(rec.frames.len(), 1, "{policy:?}");
    }
}

#[test]
fn the_frames_a_batch_refused_leave_nothing_in_the_spool() {
    for policy in POLICIES {
        let (dir, _, store) = open("batch", policy);
        let mut batch: Batch = ["0", "1", "2", "3"].into_iter().collect();
        let r = store.admit(&mut batch, 0, |_| Ok::<_, ()>((2, ())));
        assert!(matches!(r, Ok(Ok((0, 2, ())))), "{policy:?}");
        assert_eq!(on_disk(&dir.0), [0, 1], "{policy:?}");
        assert_eq!(put(&store, b"next"), 2, "{policy:?}");
    }
}

#[test]
fn a_group_record_is_in_the_stage_when_the_call_returns() {
    a_record_is_in_the_stage_when_the_call_returns(UNSYNCED);
}

#[test]
fn an_os_write_back_record_is_in_the_stage_when_the_call_returns() {
    a_record_is_in_the_stage_when_the_call_returns(Durability::OsWriteBack);
}

fn a_record_is_in_the_stage_when_the_call_returns(policy: Durability) {
    let (dir, _, store) = open(&format!("in-stage-{policy:?}"), policy);
    put(&store, b"in the page cache");
    let stage = Bytes::from(fs::read(dir.0.join("stage")).unwrap());
    let got = record::decode_rising(&stage).0;
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].frame[..], b"in the page cache");
    settle(store);
    assert_eq!(
        on_disk(&dir.0),
        [0],
        "written to the segment once, at the close"
    );
}

#[test]
fn a_process_crash_loses_no_staged_record_and_repeats_none_written_out() {
    let (dir, _, store) = open("group-crash", UNSYNCED);
    let crashed = Dir::new("group-crashed");
    let admit = |f: &'static [u8]| {
        let r = store.admit_one(|_| Bytes::from_static(f), 0, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Ok(Ok(_))));
    };
    admit(b"a");
    admit(b"b");
    // Written to the segment, not synced; the stage begins again.
    store.flush();
    admit(b"c");
    // What a SIGKILL now leaves: a and b in the segment, c in the stage, nothing synced.
    crash_copy(&dir.0, &crashed.0);
    settle(store);
    let spool = Spool::new(&crashed.0).durability(UNSYNCED);
    let (store, rec) = Store::open(&spool).unwrap();
    let got: Vec<&[u8]> = rec.frames.iter().map(|f| &f.2[..]).collect();
    assert_eq!(got, [&b"a"[..], b"b", b"c"]);
    assert_eq!(rec.cut_bytes, 0);
    let d = put(&store, b"d");
    assert!(d > 2, "numbers go on: {d}");
    // A second crash before the stage was written out: c is still staged, d after it.
    crash_copy(&crashed.0, &dir.0.join("again"));
    settle(store);
    let (_store, rec) = Store::open(&Spool::new(dir.0.join("again"))).unwrap();
    let seqs: Vec<u64> = rec.frames.iter().map(|f| f.0).collect();
    assert_eq!(seqs, [0, 1, 2, d]);
}

#[test]
fn a_stage_left_by_another_policy_is_written_out_under_every_frame() {
    let (dir, _, store) = open("unstage", UNSYNCED);
    put(&store, b"staged");
    let crashed = Dir::new("unstage-crashed");
    crash_copy(&dir.0, &crashed.0);
    settle(store);
    let (store, rec) = Store::open(&Spool::new(&crashed.0)).unwrap();
    assert_eq!(rec.frames.len(), 1);
    assert!(
        !crashed.0.join("stage").exists(),
        "EveryFrame keeps no stage"
    );
    assert_eq!(on_disk(&crashed.0), [0]);
    settle(store);
}

#[test]
fn a_torn_tail_is_cut_and_counted() {
    let dir = Dir::new("torn");
    let spool = Spool::new(&dir.0).durability(Durability::OsWriteBack);
    let (store, _) = Store::open(&spool).unwrap();
    put(&store, b"whole");
    put(&store, b"torn in two");
    settle(store);
    let seg = dir.0.join(segment_name(0));
    let whole = (record::HEADER + 5 + record::HEADER + 11) as u64;
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(whole - 4)
        .unwrap();
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(rec.frames.len(), 1);
    assert_eq!(rec.cut_bytes, (record::HEADER + 11 - 4) as u64);
    assert_eq!(
        rec.lost,
        (1, 1..2),
        "the torn frame is reported by its number"
    );
}

#[test]
fn a_second_open_is_refused_while_the_first_holds_the_lock() {
    let dir = Dir::new("lock");
    let spool = Spool::new(&dir.0);
    let (store, _) = Store::open(&spool).unwrap();
    let err = Store::open(&spool).unwrap_err();
    assert!(err.contains("in use"), "{err}");
    settle(store);
    assert!(Store::open(&spool).is_ok());
}

#[test]
fn a_spool_of_format_1_to_4_is_read_and_marked_5() {
    for old in ["1", "2", "3", "4"] {
        let dir = Dir::new("format-old");
        let spool = Spool::new(&dir.0).durability(Durability::OsWriteBack);
        let (store, _) = Store::open(&spool).unwrap();
        put(&store, b"kept");
        settle(store);
        fs::write(dir.0.join("VERSION"), format!("{old}\n")).unwrap();
        let (_store, rec) = Store::open(&spool).unwrap();
        assert_eq!(rec.frames.len(), 1, "format {old}");
        assert_eq!(fs::read_to_string(dir.0.join("VERSION")).unwrap(), "5\n");
    }
}

#[test]
fn another_format_is_refused_clearly() {
    let dir = Dir::new("version");
    fs::create_dir_all(&dir.0).unwrap();
    fs::write(dir.0.join("VERSION"), "0\n").unwrap();
    let err = Store::open(&Spool::new(&dir.0)).unwrap_err();
    assert!(err.contains("format 0"), "{err}");
    let other = Dir::new("foreign");
    fs::create_dir_all(&other.0).unwrap();
    fs::write(other.0.join("notes.txt"), "mine").unwrap();
    let err = Store::open(&Spool::new(&other.0)).unwrap_err();
    assert!(err.contains("no relink spool"), "{err}");
}

#[test]
fn segments_whose_frames_all_left_are_deleted() {
    for policy in POLICIES {
        let dir = Dir::new("reclaim");
        let spool = Spool::new(&dir.0).durability(policy).segment_bytes(64);
        let (store, _) = Store::open(&spool).unwrap();
        let frame = b"0123456789012345678901234567890123456789";
        for _ in 0..10 {
            put(&store, frame);
        }
        let segs = segments(&dir.0);
        assert!(segs.len() >= 5, "{policy:?}");
        for closed in &segs[..segs.len() - 1] {
            let seg = record::read_segment(&Bytes::from(fs::read(closed).unwrap()));
            let seqs: Vec<(u64, u64)> = seg.records.iter().map(|r| (r.seq, r.seq + 1)).collect();
            assert_eq!(
                seg.seal,
                Some(record::Seal(seqs)),
                "sealed with the numbers it holds"
            );
        }
        store.left(&mut (0..10).collect());
        store.flush();
        assert_eq!(segments(&dir.0).len(), 1, "only the current segment stays");
        settle(store);
        let (store, rec) = Store::open(&spool).unwrap();
        assert!(rec.frames.is_empty());
        assert_eq!(rec.cut_bytes, 0);
        assert!(put(&store, b"next") >= 10, "no number is used twice");
    }
}

#[test]
fn a_segment_of_an_earlier_run_is_deleted_once_its_recovered_frames_left() {
    for policy in POLICIES {
        let (dir, spool, store) = open("earlier-run", policy);
        let sent: Vec<u64> = [b"a", b"b", b"c"].iter().map(|f| put(&store, *f)).collect();
        store.left(&mut vec![sent[1]]);
        settle(store);
        let (store, rec) = Store::open(&spool).unwrap();
        let mut recovered: Vec<u64> = rec.frames.iter().map(|f| f.0).collect();
        assert_eq!(recovered, [sent[0], sent[2]], "{policy:?}");
        // After a clean close the numbers go on from the close's.
        let new = put(&store, b"d");
        assert_eq!(new, sent[2] + 1, "{policy:?}");
        let before = segments(&dir.0);
        store.left(&mut recovered);
        store.flush();
        let after = segments(&dir.0);
        assert!(
            after.len() < before.len(),
            "{policy:?}: the earlier run's segment stays: {before:?} -> {after:?}"
        );
        settle(store);
        let (_store, rec) = Store::open(&spool).unwrap();
        let left: Vec<u64> = rec.frames.iter().map(|f| f.0).collect();
        assert_eq!(left, [new], "{policy:?}");
    }
}

/// 300 frames left in a spool closed cleanly (none left): the frame of number `n` is
/// `n`'s digits, so its record is `record::HEADER` + as many bytes.
fn closed_with_300(name: &str, segment_bytes: u64) -> (Dir, Spool) {
    let dir = Dir::new(name);
    let spool = Spool::new(&dir.0)
        .durability(Durability::OsWriteBack)
        .segment_bytes(segment_bytes);
    let (store, _) = Store::open(&spool).unwrap();
    for n in 0..300u64 {
        let r = store.admit_one(|_| Bytes::from(n.to_string()), 0, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Ok(Ok(_))));
    }
    settle(store);
    (dir, spool)
}

/// Where the record of number `n` begins in the spool's one segment.
fn record_at(n: u64) -> u64 {
    (0..n)
        .map(|s| (record::HEADER + s.to_string().len()) as u64)
        .sum()
}

fn cut(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_cut_at_a_record_boundary_reports_the_frames_it_took_by_their_numbers() {
    let (dir, spool) = closed_with_300("cut-boundary", SEGMENT_BYTES);
    cut(&dir.0.join(segment_name(0)), record_at(200));
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(seqs(&rec), (0..200).collect::<Vec<_>>());
    assert_eq!(rec.cut_bytes, 0, "no byte failed its check");
    assert_eq!(rec.lost, (100, 200..300));
    drop(_store);
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(rec.lost, (0, 0..0), "reported once");
    assert_eq!(rec.frames.len(), 200);
}

#[test]
fn an_emptied_segment_reports_every_frame_it_held() {
    let (dir, spool) = closed_with_300("emptied", SEGMENT_BYTES);
    cut(&dir.0.join(segment_name(0)), 0);
    let (store, rec) = Store::open(&spool).unwrap();
    assert_eq!((rec.frames.len(), rec.cut_bytes), (0, 0));
    assert_eq!(rec.lost, (300, 0..300));
    assert_eq!(
        put(&store, b"next"),
        300,
        "numbers go on past every number given"
    );
}

#[test]
fn a_closed_segment_cut_at_a_record_boundary_reports_its_missing_frames() {
    // Segments of about 1 KiB: the first closed one holds 0..=47.
    let (dir, spool) = closed_with_300("cut-closed", 1024);
    let first = dir.0.join(segment_name(0));
    let held = record::read_segment(&Bytes::from(fs::read(&first).unwrap())).records;
    let end = held.last().unwrap().seq + 1;
    cut(&first, record_at(10));
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(rec.lost, (end - 10, 10..end));
    assert_eq!(rec.frames.len() as u64, 300 - (end - 10));
}

#[test]
fn a_corrupt_record_costs_only_itself() {
    let (dir, spool) = closed_with_300("corrupt", SEGMENT_BYTES);
    let seg = dir.0.join(segment_name(0));
    let mut data = fs::read(&seg).unwrap();
    data[record_at(150) as usize + record::HEADER] ^= 0x40;
    fs::write(&seg, &data).unwrap();
    let (_store, rec) = Store::open(&spool).unwrap();
    let want: Vec<u64> = (0..300).filter(|&n| n != 150).collect();
    assert_eq!(seqs(&rec), want, "every whole record after it is recovered");
    assert_eq!(rec.cut_bytes, (record::HEADER + 3) as u64);
    assert_eq!(rec.lost, (1, 150..151));
    drop(_store);
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!((rec.frames.len(), rec.cut_bytes, rec.lost.0), (299, 0, 0));
}

#[test]
fn a_torn_tail_a_process_death_left_is_no_damage() {
    for policy in POLICIES {
        let (dir, _, store) = open(&format!("torn-death-{policy:?}"), policy);
        let crashed = Dir::new(&format!("torn-death-copy-{policy:?}"));
        for _ in 0..5 {
            put(&store, b"whole");
        }
        store.flush();
        crash_copy(&dir.0, &crashed.0);
        settle(store);
        // A write cut short by the kill: half a record at the segment's end (under
        // `EveryFrame` its call never returned; under the others its records are staged).
        let seg = segments(&crashed.0).pop().unwrap();
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        let mut half = Vec::new();
        record::encode(&mut half, 5, 0, b"never returned");
        f.write_all(&half[..half.len() / 2]).unwrap();
        drop(f);
        let (_store, rec) = Store::open(&Spool::new(&crashed.0).durability(policy)).unwrap();
        assert_eq!(rec.frames.len(), 5, "{policy:?}");
        assert_eq!((rec.cut_bytes, rec.lost.0), (0, 0), "{policy:?}");
    }
}

#[test]
fn a_corrupt_numbers_file_is_rebuilt_past_every_number_given() {
    let (dir, spool, store) = open("numbers-corrupt", Durability::OsWriteBack);
    let crashed = Dir::new("numbers-corrupt-copy");
    for _ in 0..10 {
        put(&store, b"x");
    }
    crash_copy(&dir.0, &crashed.0);
    drop(spool);
    settle(store);
    let path = crashed.0.join("numbers");
    let mut data = fs::read(&path).unwrap();
    data[0] ^= 1;
    fs::write(&path, &data).unwrap();
    let spool = Spool::new(&crashed.0).durability(Durability::OsWriteBack);
    let (store, rec) = Store::open(&spool).expect("rebuilt, not refused");
    assert_eq!(rec.frames.len(), 10);
    assert!(put(&store, b"y") >= 10 + RESERVE, "past every number given");
    settle(store);
    assert!(
        Core::read_reserved(&crashed.0).unwrap().is_some(),
        "written anew"
    );
}

/// What a start reports, as the figures of the spool's cases: frames recovered, bytes cut,
/// frames reported lost and their numbers.
fn figures(rec: &Recovered) -> (u64, u64, u64, std::ops::Range<u64>) {
    (
        rec.frames.len() as u64,
        rec.cut_bytes,
        rec.lost.0,
        rec.lost.1.clone(),
    )
}

/// A run that hands out 300 numbers (the frame of `n` is `n`'s digits) in segments of
/// `segment_bytes`, of which `left` left, with its stage written out, then dies (a copy of its
/// files as the kill leaves them).
fn killed_with_300(name: &str, policy: Durability, segment_bytes: u64, left: u64) -> (Dir, Spool) {
    let live = Dir::new(&format!("{name}-live"));
    let dir = Dir::new(name);
    let spool = Spool::new(&live.0)
        .durability(policy)
        .segment_bytes(segment_bytes);
    let (store, _) = Store::open(&spool).unwrap();
    for n in 0..300u64 {
        let r = store.admit_one(|_| Bytes::from(n.to_string()), 0, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Ok(Ok(_))));
    }
    store.left(&mut (0..left).collect());
    store.flush();
    crash_copy(&live.0, &dir.0);
    settle(store);
    let spool = Spool::new(&dir.0)
        .durability(policy)
        .segment_bytes(segment_bytes);
    (dir, spool)
}

/// The case of a deleted middle segment: 1 KiB segments, 300 frames of which 0..100 left,
/// killed, then the sealed segment that holds 150 deleted. Gives the report and the numbers
/// the deleted segment held.
fn deleted_middle_segment(policy: Durability) -> (Recovered, Vec<u64>) {
    let (dir, spool) = killed_with_300(&format!("deleted-{policy:?}"), policy, 1024, 100);
    let segs = segments(&dir.0);
    let read = |p: &Path| record::read_segment(&Bytes::from(fs::read(p).unwrap()));
    let victim = segs
        .iter()
        .find(|p| read(p).records.iter().any(|r| r.seq == 150))
        .unwrap()
        .clone();
    assert_ne!(Some(&victim), segs.last(), "a middle segment");
    let held: Vec<u64> = read(&victim).records.iter().map(|r| r.seq).collect();
    fs::remove_file(&victim).unwrap();
    let (_store, rec) = Store::open(&spool).unwrap();
    (rec, held)
}

#[test]
fn a_deleted_middle_segment_reports_exactly_the_frames_it_held() {
    for policy in POLICIES {
        let (rec, held) = deleted_middle_segment(policy);
        let n = held.len() as u64;
        assert_eq!(
            figures(&rec),
            (200 - n, 0, n, held[0]..held[held.len() - 1] + 1),
            "{policy:?}"
        );
    }
}

/// The case of a torn last record: 300 frames under `EveryFrame`, killed, the segment cut
/// by 30 bytes (the record of 299 is 27 bytes: it goes, and 3 bytes of 298's).
fn torn_last_record() -> Recovered {
    let (dir, spool) = killed_with_300("torn-last", Durability::EveryFrame, SEGMENT_BYTES, 0);
    let seg = segments(&dir.0).pop().unwrap();
    let len = fs::metadata(&seg).unwrap().len();
    cut(&seg, len - 30);
    Store::open(&spool).unwrap().1
}

#[test]
fn a_torn_last_record_of_a_killed_run_is_cut_and_reported() {
    let rec = torn_last_record();
    assert_eq!(figures(&rec), (298, 24, 2, 298..300));
}

/// The case of the last segment of a killed run cut at the record of 200 (`Some(200)`) or
/// emptied (`None`).
fn killed_run_cut(policy: Durability, at: Option<u64>) -> Recovered {
    let name = format!("killed-cut-{policy:?}-{at:?}");
    let (dir, spool) = killed_with_300(&name, policy, SEGMENT_BYTES, 0);
    let seg = segments(&dir.0).pop().unwrap();
    cut(&seg, at.map_or(0, record_at));
    Store::open(&spool).unwrap().1
}

#[test]
fn the_last_segment_of_a_killed_run_cut_at_a_record_boundary_reports_its_missing_frames() {
    for policy in POLICIES {
        let rec = killed_run_cut(policy, Some(200));
        assert_eq!(figures(&rec), (200, 0, 100, 200..300), "{policy:?}");
    }
}

#[test]
fn the_last_segment_of_a_killed_run_emptied_reports_every_frame_it_held() {
    for policy in POLICIES {
        let rec = killed_run_cut(policy, None);
        assert_eq!(figures(&rec), (0, 0, 300, 0..300), "{policy:?}");
    }
}

/// The case of runs killed in a row with no peer: each hands out 50 numbers, its stage never
/// written out, then dies; a last start reads the spool.
fn killed_in_a_row(policy: Durability, kills: usize) -> Recovered {
    let dirs: Vec<Dir> = (0..=kills)
        .map(|k| Dir::new(&format!("in-a-row-{policy:?}-{k}")))
        .collect();
    for k in 0..kills {
        let (store, _) = Store::open(&Spool::new(&dirs[k].0).durability(policy)).unwrap();
        for _ in 0..50 {
            put(&store, b"x");
        }
        crash_copy(&dirs[k].0, &dirs[k + 1].0);
        settle(store);
    }
    Store::open(&Spool::new(&dirs[kills].0).durability(policy))
        .unwrap()
        .1
}

#[test]
fn runs_killed_in_a_row_report_no_number_never_handed_out() {
    for policy in POLICIES {
        let rec = killed_in_a_row(policy, 4);
        assert_eq!(figures(&rec).0, 200, "{policy:?}");
        assert_eq!(
            (rec.cut_bytes, rec.lost.0),
            (0, 0),
            "{policy:?}: {:?}",
            rec.lost
        );
    }
}

/// The figures of each case, as a start reports them (`cargo test --lib spool_case_figures --
/// --ignored --nocapture`).
#[test]
#[ignore = "prints figures"]
fn spool_case_figures() {
    for policy in POLICIES {
        let (rec, held) = deleted_middle_segment(policy);
        eprintln!(
            "deleted middle segment ({policy:?}): {:?}; truth: {} lost {}..{}",
            figures(&rec),
            held.len(),
            held[0],
            held[held.len() - 1] + 1
        );
    }
    eprintln!(
        "torn last record (EveryFrame): {:?}; truth: 2 lost 298..300",
        figures(&torn_last_record())
    );
    for policy in POLICIES {
        eprintln!(
            "killed run cut at 200 ({policy:?}): {:?}; truth: 100 lost 200..300",
            figures(&killed_run_cut(policy, Some(200)))
        );
        eprintln!(
            "killed run emptied ({policy:?}): {:?}; truth: 300 lost 0..300",
            figures(&killed_run_cut(policy, None))
        );
        eprintln!(
            "4 runs killed in a row ({policy:?}): {:?}; truth: 200 recovered, none lost",
            figures(&killed_in_a_row(policy, 4))
        );
    }
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_spool_is_its_owners_alone_whatever_the_umask() {
    for policy in POLICIES {
        let (dir, spool, store) = open(&format!("private-{policy:?}"), policy);
        put(&store, b"a secret");
        settle(store);
        // A clean close, then a start: every file the spool makes is there.
        let (store, _) = Store::open(&spool).unwrap();
        assert_eq!(mode(&dir.0), 0o700, "{policy:?}");
        for e in fs::read_dir(&dir.0).unwrap() {
            let p = e.unwrap().path();
            assert_eq!(mode(&p), 0o600, "{policy:?}: {}", p.display());
        }
        settle(store);
    }
}

#[test]
fn a_directory_open_to_others_is_made_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, spool, store) = open("opened-up", Durability::OsWriteBack);
    put(&store, b"a secret");
    settle(store);
    let open_to_all = fs::Permissions::from_mode(0o777);
    fs::set_permissions(&dir.0, open_to_all.clone()).unwrap();
    let seg = segments(&dir.0).pop().unwrap();
    fs::set_permissions(&seg, fs::Permissions::from_mode(0o644)).unwrap();
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(rec.frames.len(), 1);
    assert_eq!((mode(&dir.0), mode(&seg)), (0o700, 0o600));
}

#[test]
fn confirmed_frames_whose_acks_could_not_be_written_are_written_with_the_next() {
    let (dir, spool, store) = open("acks-retry", Durability::OsWriteBack);
    for _ in 0..3 {
        put(&store, b"x");
    }
    // The acks log cannot be written (as on a full disk without its reserved space).
    let read_only = File::open(dir.0.join("acks")).unwrap();
    let good = std::mem::replace(&mut lock(&store.acks).file, read_only);
    store.left(&mut vec![0, 1]);
    store.flush();
    assert!(!lock(&store.acks).done.contains(0), "not written");
    let news = store.news();
    assert!(
        matches!(&news[..], [(false, m)] if m.contains("cannot write")),
        "{news:?}"
    );
    lock(&store.acks).file = good;
    store.left(&mut vec![2]);
    store.flush();
    assert!(lock(&store.acks).done.contains(0));
    settle(store);
    let (_store, rec) = Store::open(&spool).unwrap();
    assert!(
        rec.frames.is_empty(),
        "every confirmed frame's ack was written"
    );
}

#[test]
fn after_a_failed_write_the_current_segment_goes_once_its_frames_left() {
    for policy in POLICIES {
        let (dir, spool, store) = open(&format!("reclaim-current-{policy:?}"), policy);
        for _ in 0..5 {
            put(&store, b"0123456789");
        }
        store.flush();
        let before = segments(&dir.0);
        assert_eq!(before.len(), 1);
        lock(&store.w).starved = true;
        store.left(&mut (0..5).collect());
        store.flush();
        let after = segments(&dir.0);
        assert_eq!(after.len(), 1, "{policy:?}");
        assert_ne!(after, before, "{policy:?}: a new segment");
        let next = put(&store, b"after");
        assert_eq!(next, 5, "{policy:?}");
        settle(store);
        let (_store, rec) = Store::open(&spool).unwrap();
        assert_eq!(figures(&rec), (1, 0, 0, 0..0), "{policy:?}");
    }
}

#[test]
fn under_group_the_spool_thread_writes_the_stage_to_the_segment_within_the_interval() {
    let (dir, _, store) = open("group-thread", Durability::Group(Duration::from_millis(1)));
    put(&store, b"written by the spool's thread");
    let seg = segments(&dir.0).pop().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while fs::metadata(&seg).unwrap().len() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        fs::metadata(&seg).unwrap().len() > 0,
        "the stage was never written"
    );
}

#[test]
fn the_newest_segment_deleted_after_a_clean_close_reports_every_frame_it_held() {
    for policy in POLICIES {
        let dir = Dir::new(&format!("deleted-newest-{policy:?}"));
        let spool = Spool::new(&dir.0).durability(policy).segment_bytes(1024);
        let (store, _) = Store::open(&spool).unwrap();
        for _ in 0..100 {
            put(&store, b"0123456789");
        }
        store.left(&mut (0..10).collect());
        settle(store);
        let newest = segments(&dir.0).pop().unwrap();
        let read = record::read_segment(&Bytes::from(fs::read(&newest).unwrap()));
        let held: Vec<u64> = read.records.iter().map(|r| r.seq).collect();
        assert!(!held.is_empty(), "{policy:?}");
        fs::remove_file(&newest).unwrap();
        let (_store, rec) = Store::open(&spool).unwrap();
        let n = held.len() as u64;
        assert_eq!(
            figures(&rec),
            (90 - n, 0, n, held[0]..held[held.len() - 1] + 1),
            "{policy:?}"
        );
    }
}
