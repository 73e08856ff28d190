use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::batch::Batch;

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

/// The records a segment holds now, as a process that died this moment would leave them.
fn records_in(path: &Path) -> Vec<record::Record> {
    record::decode_all(&Bytes::from(fs::read(path).unwrap())).0
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
        assert!(records_in(&segments(&dir.0)[0]).is_empty(), "{policy:?}");
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
        let seqs: Vec<u64> = records_in(&segments(&dir.0)[0])
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(seqs, [0, 1], "{policy:?}");
        assert_eq!(put(&store, b"next"), 2, "{policy:?}");
    }
}

#[test]
fn a_group_record_is_in_the_file_when_the_call_returns() {
    a_record_is_in_the_file_when_the_call_returns(UNSYNCED);
}

#[test]
fn an_os_write_back_record_is_in_the_file_when_the_call_returns() {
    a_record_is_in_the_file_when_the_call_returns(Durability::OsWriteBack);
}

fn a_record_is_in_the_file_when_the_call_returns(policy: Durability) {
    let (dir, _, store) = open(&format!("in-file-{policy:?}"), policy);
    put(&store, b"in the page cache");
    let got = records_in(&dir.0.join(segment_name(0)));
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].frame[..], b"in the page cache");
    let reserved = fs::metadata(dir.0.join(segment_name(0))).unwrap().len();
    assert_eq!(reserved, window::WINDOW, "a window's space is reserved");
    settle(store);
    let trimmed = fs::metadata(dir.0.join(segment_name(0))).unwrap().len();
    assert_eq!(
        trimmed,
        (record::HEADER + 17) as u64,
        "a close trims the segment"
    );
}

#[test]
fn a_process_crash_under_group_loses_nothing_and_its_reserved_tail_is_not_cut() {
    let (dir, _, store) = open("group-crash", UNSYNCED);
    let crashed = Dir::new("group-crashed");
    for f in [&b"a"[..], b"b", b"c"] {
        let r = store.admit_one(|_| Bytes::copy_from_slice(f), 0, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Ok(Ok(_))));
    }
    // Never synced (the interval is a minute): the records are in the page cache only.
    crash_copy(&dir.0, &crashed.0);
    settle(store);
    let seg = crashed.0.join(segment_name(0));
    assert_eq!(fs::metadata(&seg).unwrap().len(), window::WINDOW);
    let (store, rec) = Store::open(&Spool::new(&crashed.0)).unwrap();
    let got: Vec<&[u8]> = rec.frames.iter().map(|f| &f.2[..]).collect();
    assert_eq!(got, [&b"a"[..], b"b", b"c"]);
    assert_eq!(rec.cut_bytes, 0, "reserved space is not a torn record");
    assert_eq!(
        fs::metadata(&seg).unwrap().len(),
        3 * (record::HEADER + 1) as u64,
        "cut to its records"
    );
    settle(store);
}

#[test]
fn a_torn_record_in_reserved_space_is_cut_and_counted() {
    let (dir, _, store) = open("group-torn", UNSYNCED);
    let crashed = Dir::new("group-torn-crashed");
    put(&store, b"whole");
    put(&store, b"torn by a power cut");
    crash_copy(&dir.0, &crashed.0);
    settle(store);
    // The power cut wrote back the torn record's first 30 bytes, not the rest.
    let seg = crashed.0.join(segment_name(0));
    let mut data = fs::read(&seg).unwrap();
    let second = record::HEADER + 5;
    data[second + 30..].fill(0);
    fs::write(&seg, &data).unwrap();
    let (_store, rec) = Store::open(&Spool::new(&crashed.0)).unwrap();
    assert_eq!(rec.frames.len(), 1);
    assert_eq!(rec.cut_bytes, 30);
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
    let len = fs::metadata(&seg).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 4)
        .unwrap();
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(rec.frames.len(), 1);
    assert_eq!(rec.cut_bytes, (record::HEADER + 11 - 4) as u64);
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
            let len = fs::metadata(closed).unwrap().len();
            assert_eq!(
                len % record::size(frame) as u64,
                0,
                "ends at its last record"
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
