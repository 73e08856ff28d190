use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;

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
    // The crash took the group's buffer: none of the three reached the segment.
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
    let dir = Dir::new("refused");
    let spool = Spool::new(&dir.0);
    let (store, _) = Store::open(&spool).unwrap();
    let r = store.admit_one(|_| Bytes::from_static(b"no"), 0, |_| Err::<(), _>("full"));
    assert!(matches!(r, Ok(Err((_, "full")))));
    assert_eq!(put(&store, b"yes"), 0, "the refused frame took no number");
    settle(store);
    let (_store, rec) = Store::open(&spool).unwrap();
    assert_eq!(rec.frames.len(), 1);
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
    let dir = Dir::new("reclaim");
    let spool = Spool::new(&dir.0)
        .durability(Durability::OsWriteBack)
        .segment_bytes(64);
    let (store, _) = Store::open(&spool).unwrap();
    for _ in 0..10 {
        put(&store, b"0123456789012345678901234567890123456789");
    }
    let segs = || {
        fs::read_dir(&dir.0)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".seg")
            })
            .count()
    };
    assert!(segs() >= 5);
    store.left(&mut (0..10).collect());
    store.flush();
    assert_eq!(segs(), 1, "only the current segment stays");
    settle(store);
    let (store, rec) = Store::open(&spool).unwrap();
    assert!(rec.frames.is_empty());
    assert!(put(&store, b"next") >= 10, "no number is used twice");
}

#[test]
fn group_commit_writes_on_the_spools_thread() {
    let dir = Dir::new("group");
    let spool = Spool::new(&dir.0).durability(Durability::Group(Duration::from_millis(2)));
    let (store, _) = Store::open(&spool).unwrap();
    put(&store, b"soon on disk");
    let seg = dir.0.join(segment_name(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    while fs::metadata(&seg).unwrap().len() == 0 {
        assert!(Instant::now() < deadline, "the group was never written");
        std::thread::sleep(Duration::from_millis(1));
    }
    settle(store);
}
