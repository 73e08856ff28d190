//! The `marks` file: where a run of the spool says of itself what the next start needs to tell
//! a process's death from the machine's, and to bound the numbers a power cut can have taken
//! ([`Marker`]).
//!
//! Two slots of [`SLOT`] bytes, their space reserved when the file is made, each written in
//! place and synced: marker `id` goes to slot `id % 2`, so a write torn by a power cut leaves
//! the other slot, the marker before it, whole. The marker of a start is the valid slot with
//! the greater id. A write and its `fdatasync` touch one small block and no file's size, so
//! they cost one device flush and no journal commit of the other files' data.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;
use fs4::fs_std::FileExt as _;

use super::record::{self, Marker};

/// A slot's size: a marker's record with a boot id of up to [`BOOT_MAX`] bytes.
const SLOT: usize = 128;

/// The longest boot id a marker keeps.
pub(super) const BOOT_MAX: usize = SLOT - record::HEADER - 32;

/// Under `Group`, the fewest numbers a marker lets the callers hand out past those handed out
/// when it was written (more when frames came faster: see [`AHEAD`]).
pub(super) const HEADROOM_MIN: u64 = 256;

/// Under `Group`, a marker of the spool's thread lets the callers hand out this many times
/// the numbers handed out since its last one (an interval's, and the time its write and sync
/// took), so that a steady stream never waits for a marker of its own.
pub(super) const AHEAD: u64 = 4;

/// The open `marks` file.
#[derive(Debug)]
pub(super) struct MarksFile {
    file: File,
    /// The last marker's id: markers are numbered in the order they are written, each synced
    /// before the next is begun, so the last one on disk at a power cut is the last synced or
    /// the one being written.
    last: u64,
}

impl MarksFile {
    /// Opens (or makes, its two slots reserved) the `marks` file of `dir`, and reads its last
    /// marker.
    pub(super) fn open(dir: &Path) -> io::Result<(MarksFile, Option<Marker>)> {
        let path = dir.join("marks");
        let file = super::private()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        let mut data = vec![0u8; 2 * SLOT];
        let n = file.read_at(&mut data, 0)?;
        data.truncate(n);
        let last = data
            .chunks(SLOT)
            .filter_map(|slot| {
                let (records, _) = record::decode_all(&Bytes::copy_from_slice(slot));
                records.first().and_then(Marker::of)
            })
            .max_by_key(|m| m.id);
        file.allocate(2 * SLOT as u64)?;
        let id = last.as_ref().map_or(0, |m| m.id);
        Ok((MarksFile { file, last: id }, last))
    }

    /// Writes `m`, numbered after the last marker, to its slot and syncs it; gives its id.
    pub(super) fn write(&mut self, m: &Marker) -> io::Result<u64> {
        let id = self.write_unsynced(m)?;
        self.file.sync_data()?;
        Ok(id)
    }

    /// Writes `m`, numbered after the last marker, to its slot, not synced: in the page
    /// cache, it outlives the process, and a power cut leaves it or the marker its slot held
    /// before (each whole or failing its check). Gives its id.
    pub(super) fn write_unsynced(&mut self, m: &Marker) -> io::Result<u64> {
        let id = self.last + 1;
        let mut buf = Vec::with_capacity(SLOT);
        Marker { id, ..m.clone() }.encode(&mut buf);
        buf.resize(SLOT, 0);
        // The id is used once the write began: a torn one may be on disk.
        self.last = id;
        self.file.write_all_at(&buf, (id % 2) * SLOT as u64)?;
        Ok(id)
    }
}

/// What the callers may hand out, from the markers written (see [`Marks::limit`]).
#[derive(Debug, Default)]
pub(super) struct Marks {
    /// The last marker known synced: its id and bound.
    pub synced: (u64, u64),
    /// The bound of the spool's thread's next marker, once it is decided and until it is
    /// synced (it can then be the last on disk; a caller's marker is written and synced
    /// under the writer's lock, so it is never pending).
    pub pending: Option<u64>,
    /// The next number when the spool's thread's last marker was decided.
    from: u64,
}

impl Marks {
    /// Bookkeeping for a run whose first number is `first`.
    pub(super) fn new(first: u64) -> Marks {
        Marks {
            from: first,
            ..Marks::default()
        }
    }

    /// Under `Group`, the first number a caller may not hand out without writing a marker:
    /// every number handed out is below the bound of each marker that can be the last on
    /// disk at a power cut (the last synced, and the spool's thread's next).
    pub(super) fn limit(&self) -> u64 {
        self.pending.map_or(self.synced.1, |p| p.min(self.synced.1))
    }

    /// The bound of the spool's thread's marker after a group (and of the run's first),
    /// written when the next number is `next`: room for [`AHEAD`] times the numbers handed out
    /// since its last marker, and at least [`HEADROOM_MIN`].
    pub(super) fn tick(&mut self, next: u64) -> u64 {
        let bound = next + (AHEAD * next.saturating_sub(self.from)).max(HEADROOM_MIN);
        self.from = next;
        bound
    }

    /// The bound of a caller's marker, when numbers up to `end` are to be handed out past the
    /// limit: room past `end` for [`AHEAD`] times the numbers to be handed out since the
    /// spool's thread's last marker, so that a burst writes few.
    pub(super) fn ahead(&self, end: u64) -> u64 {
        end + (AHEAD * end.saturating_sub(self.from)).max(HEADROOM_MIN)
    }

    /// Notes that marker `id` with `bound` is on disk.
    pub(super) fn synced(&mut self, id: u64, bound: u64) {
        if id > self.synced.0 {
            self.synced = (id, bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_the_lower_of_the_last_synced_and_the_spool_threads_next() {
        let mut m = Marks::new(0);
        m.synced(1, 300);
        assert_eq!(m.limit(), 300);
        let bound = m.tick(10);
        assert_eq!(bound, 10 + HEADROOM_MIN);
        m.pending = Some(bound);
        assert_eq!(m.limit(), bound, "a lower bound counts from its decision");
        m.synced(2, bound);
        m.pending = None;
        assert_eq!(m.limit(), bound);
        // A higher bound counts only once synced.
        let high = m.tick(1000);
        assert_eq!(high, 1000 + AHEAD * 990);
        m.pending = Some(high);
        assert_eq!(m.limit(), 10 + HEADROOM_MIN);
        // A caller's marker written meanwhile: the spool thread's, written after it, can
        // still be the last on disk.
        let b = m.ahead(1001);
        assert_eq!(b, 1001 + HEADROOM_MIN);
        m.synced(3, b);
        assert_eq!(m.limit(), b.min(high));
        m.synced(4, high);
        m.pending = None;
        assert_eq!(m.limit(), high);
        // An older id never replaces a newer.
        m.synced(3, b);
        assert_eq!(m.synced, (4, high));
    }

    #[test]
    fn a_torn_slot_leaves_the_marker_before_it() {
        let dir = std::env::temp_dir().join(format!("relink-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = |id| Marker {
            id,
            bound: 100 + id,
            first: 0,
            from: 0,
            written: 7,
            boot: b"boot".to_vec(),
            closed: false,
            group: true,
            every_frame: false,
        };
        let (mut f, last) = MarksFile::open(&dir).unwrap();
        assert_eq!(last, None);
        assert_eq!(f.write(&marker(0)).unwrap(), 1, "numbered as written");
        f.write(&marker(2)).unwrap();
        assert_eq!(MarksFile::open(&dir).unwrap().1, Some(marker(2)));
        f.write(&marker(3)).unwrap();
        // Marker 3's slot torn by a power cut: 2 is the last.
        f.file.write_all_at(&[0xff; 8], SLOT as u64 + 30).unwrap();
        assert_eq!(MarksFile::open(&dir).unwrap().1, Some(marker(2)));
        f.write(&marker(4)).unwrap();
        assert_eq!(MarksFile::open(&dir).unwrap().1, Some(marker(4)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
