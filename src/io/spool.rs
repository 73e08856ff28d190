//! The spool on disk: a log of segment files holding every frame admitted by `send` until it
//! leaves (confirmed, or abandoned and reported), an acks log of the sequence numbers that
//! left (its space reserved), a `stage` file where records wait for their write to a segment
//! (under [`Durability::OsWriteBack`] and [`Durability::Group`]), a `marks` file where each
//! run says of itself what the next start needs, a `numbers` file (the numbers reserved), a
//! `LOCK` file held with `flock` while a link uses the directory, and a `VERSION` file. The
//! directory is made 0700 and every file 0600, whatever the umask.
//!
//! Who does what:
//! - the caller of `send` appends the frame's record under the writer's lock and, by the
//!   sync policy, writes and `fdatasync`s it ([`Durability::EveryFrame`]) or copies it into
//!   the stage, a shared mapping of the `stage` file ([`Durability::OsWriteBack`],
//!   [`Durability::Group`], see [`stage`]): there it is in the kernel's page cache when the
//!   call returns, and outlives the process. A caller that finds the stage full writes it to
//!   the segment first. Then it offers the frame to the intake, and takes the record back if
//!   the intake refuses it (its number is then not used), so numbers follow the intake's
//!   order. Under `EveryFrame` and `OsWriteBack`, when the call's records reached the segment,
//!   a marker (not synced) says how far this run's records reached the segments;
//! - the IO thread never touches the disk: its [`Ledger`] gives each frame it takes from the
//!   intake the next number (those recovered at open first), learns which frames left, and
//!   hands their numbers to `left`; it tells the link's events when the spool's writes fail
//!   and when they succeed again ([`Core::news`]);
//! - the spool's own thread (the flusher), every tick, writes the stage to the segment and,
//!   under `Group`, `fdatasync`s the segment and writes a marker (synced); appends what left to
//!   the acks log (what a failed write could not write goes with the next), deletes segments
//!   whose frames all left and, after a failed write, replaces the current segment once its
//!   frames all left, so that a full disk gets its space back while the link lives.
//!
//! Each segment begins with an opening that lists the numbers the segment before it holds,
//! and is closed with a seal that lists its own. At open, the segments are read in order; each
//! record is checked by its CRC-32C, and past one that fails the reading resumes at the next
//! whole record. A number missing from a seal's or an opening's list, or from the last run's
//! own numbers (from its first up to what its marker says was written, and up to its last
//! record in a segment or the stage, when that run closed cleanly, or the page cache outlived
//! it, or it ran under `EveryFrame`), that did not leave, is a frame lost to damage: reported
//! once, and counted as left from then on. The bytes that fail their check are cut and
//! counted, but for a torn tail the last run's death explains (when that run lacks none of its
//! numbers). Then the stage's records with numbers past the segments' are recovered too; they
//! stay staged, and the run's new segment begins with them.

mod ledger;
mod marks;
pub(crate) mod record;
mod stage;

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fs4::fs_std::FileExt as _;

pub(crate) use ledger::Ledger;
use marks::{Marks, MarksFile};
use record::{Marker, Ranges, Seal};
use stage::Stage;

use crate::core::batch::Batch;
use crate::spool::{Durability, Spool};

/// The format this relink writes and reads. Format 1 has no stage, format 2 no markers, format
/// 3 no seals, format 4 no openings and no `written` in its markers; a directory at any of
/// them is read and marked 5, so that a relink that reads an older format only refuses it once
/// it may hold what that format has not.
pub(crate) const VERSION: u32 = 5;

/// The space of the acks log, reserved when it is written (zeros past its records): the
/// record of frames that left is written on a full disk too, so that their segments can go.
const ACKS_SPACE: u64 = 64 * 1024;

/// The acks log is written again, compacted, once it is this large (within its space).
const ACKS_COMPACT: u64 = ACKS_SPACE - 16 * 1024;

/// The mode of the spool's directory and of its files: the owner's alone (frames can hold
/// secrets).
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// Sequence numbers reserved on disk at a time: before a call hands out a number at or past
/// the bound in the `numbers` file, the bound moves this far ahead (a file written, synced and
/// renamed over the old one). A start numbers from the bound, so a number handed out before a
/// crash (a frame a peer may have seen, whose record never reached the disk) is never handed
/// out again for another frame.
const RESERVE: u64 = 1 << 16;

/// The id of the boot this process runs in: a start that finds another in the last run's
/// marker knows the machine went down since (empty where the kernel does not say).
fn boot_id() -> Vec<u8> {
    fs::read("/proc/sys/kernel/random/boot_id")
        .map(|mut b| {
            while b.last().is_some_and(u8::is_ascii_whitespace) {
                b.pop();
            }
            b.truncate(marks::BOOT_MAX);
            b
        })
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.seg")
}

/// What a spool held at open.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// The frames to send again, in order: sequence number, deadline (ms since the epoch, 0
    /// for none), bytes.
    pub frames: Vec<(u64, u64, Bytes)>,
    /// Bytes cut from torn or corrupt tails.
    pub cut_bytes: u64,
    /// The frames lost to damage (numbers handed out that did not leave and whose record a
    /// seal, an opening or the last run's marker expects), and when the machine went down
    /// while the last run held the spool (a power cut, a kernel crash: its last marker is of
    /// another boot and not of a clean close), the numbers that run may have handed out of
    /// which no record survived: how many at most, and from the first to one past the last.
    pub lost: (u64, std::ops::Range<u64>),
}

/// What [`Core::admit_one`] gives: the frame's number and what the offer gave; or the frame
/// and the offer's refusal; `Err`, the frame and a write error.
pub(crate) type Admitted<T, E> = Result<Result<(u64, T), (Bytes, E)>, (Bytes, String)>;

/// A frame's deadline as the spool keeps it: milliseconds since the Unix epoch (0: none).
pub(crate) fn wall_deadline(ttl: Option<Duration>) -> u64 {
    let Some(ttl) = ttl else { return 0 };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (now + ttl).as_millis().max(1) as u64
}

/// A deadline kept by the spool, as an instant of this process (one already past for a
/// deadline that passed while the spool waited).
pub(crate) fn instant_deadline(ms: u64, now: Instant) -> Option<Instant> {
    if ms == 0 {
        return None;
    }
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    Some(match ms.checked_sub(wall) {
        Some(left) => now + Duration::from_millis(left),
        None => now.checked_sub(Duration::from_millis(1)).unwrap_or(now),
    })
}

/// Where the callers append.
#[derive(Debug)]
struct SegmentWriter {
    file: Arc<File>,
    /// The first sequence number of the current segment.
    first: u64,
    /// Where the records end in the current segment's file.
    pos: u64,
    /// What the current segment's opening says the segment before it holds.
    opening: Vec<(u64, u64)>,
    /// The lowest number a kept segment holds or its opening names: the acks log keeps what
    /// left from there.
    floor: u64,
    /// A write to the spool failed while the current segment was the last: once every frame
    /// it and the stage hold left, it is replaced by a new one, so that its space is free.
    starved: bool,
    /// Every number this run handed out below this has its record in a segment (more when
    /// nothing waits to be written: [`SegmentWriter::written_to`]); and the highest of these
    /// a marker says.
    hwm: u64,
    hwm_marked: u64,
    /// The records of a call before they are written: under `EveryFrame`, or those of a
    /// call that need more than the stage holds.
    buf: Vec<u8>,
    /// Under `OsWriteBack` and `Group`, where the records wait for the next write to the
    /// segment, in the page cache.
    stage: Option<Stage>,
    next_seq: u64,
    /// Numbers below this are reserved on disk (the `numbers` file).
    reserved: u64,
    /// The markers written and synced, and what they let the callers hand out.
    marks: Marks,
    /// What every marker of this run says besides its bound.
    run: Marker,
    /// A marker of this run is on disk (a start that could not write one writes one before
    /// it hands out a number).
    marked: bool,
    /// Closed segments, oldest first: first sequence number, path.
    closed: VecDeque<(u64, PathBuf)>,
    /// Closed segments the flusher has not synced yet.
    unsynced: Vec<Arc<File>>,
    /// A segment was made and the directory not synced since.
    dir_dirty: bool,
    /// Records were written since the last sync of the spool's thread.
    written: bool,
    /// The spool's thread was told of the records appended since its last flush.
    told: bool,
    /// The store is shut ([`Store::shut`]): nothing more is written.
    shut: bool,
    /// The numbers of the records the current segment holds (for its seal): those an earlier
    /// run staged, carried over at open, then this run's from `from` to `next_seq`.
    carried: Option<(u64, u64)>,
    from: u64,
}

/// Whether the spool writes, as the link's events say it: a write that fails after one that
/// did not, and one that succeeds after one that failed, are news for the IO thread
/// ([`Core::news`]).
#[derive(Debug, Default)]
struct Disk {
    failing: bool,
    news: Vec<(bool, String)>,
}

/// What the spool's thread waits for.
#[derive(Debug, Default)]
struct SyncWake {
    /// There is something to write, sync or record.
    work: bool,
    /// The store goes.
    stopped: bool,
}

/// What only the flusher touches: the numbers that left and the acks log.
#[derive(Debug)]
struct Acks {
    /// The numbers the acks log holds (and, in memory, gaps that never leave).
    done: Ranges,
    /// Numbers that left, not yet written (a write failed): written with the next.
    unwritten: Ranges,
    file: File,
    /// Where its records end (its space past them is zeros).
    len: u64,
}

/// A link's spool (see the module docs): its state, shared with its thread, and the thread,
/// stopped and joined when the store is shut ([`Store::shut`]: by the IO thread as the link
/// ends, whoever still holds the link's shared state) or goes.
#[derive(Debug)]
pub(crate) struct Store {
    core: Arc<Core>,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::ops::Deref for Store {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// The spool's state (see [`Store`]).
#[derive(Debug)]
pub(crate) struct Core {
    dir: PathBuf,
    durability: Durability,
    segment_bytes: u64,
    w: Mutex<SegmentWriter>,
    /// The numbers of the frames recovered at open, in order (taken by the IO thread's
    /// ledger), and the first number this run gives: the frames reach the intake in the order
    /// of their numbers, and a frame the intake refuses gives its number back.
    recovered: Mutex<VecDeque<u64>>,
    first_new: u64,
    /// Numbers of frames that left for good, not yet in the acks log.
    left: Mutex<Vec<u64>>,
    acks: Mutex<Acks>,
    /// The `marks` file: written by the spool's thread and by a caller, one at a time (a
    /// caller takes it while it holds the writer's lock, the spool's thread never so).
    marks: Mutex<MarksFile>,
    /// The spool's thread sleeps on this until there is work (or the store goes).
    wake: (Mutex<SyncWake>, Condvar),
    /// Held (`flock`) until the store is shut: closing it lets the lock go.
    lock: Mutex<Option<File>>,
    disk: Mutex<Disk>,
    /// The IO thread has news in `disk` to take.
    has_news: std::sync::atomic::AtomicBool,
}

fn io_err(what: &str, path: &Path, e: io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Options that make a file of the spool readable and writable by its owner alone, whatever
/// the umask.
pub(super) fn private() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// Makes a new file of the spool (emptied if it exists), the owner's alone.
fn create(path: &Path) -> Result<File, String> {
    private()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .map_err(|e| io_err("cannot make", path, e))
}

/// Makes the spool's directory (and those above it) the owner's alone (0700) whatever the
/// umask. A directory that was there already and that others can read, enter or write (the
/// frames in its files can hold secrets) is made 0700, with a warning that says so; one that
/// cannot be (another owner's) is refused. Files in it that others can read or write are
/// made 0600.
fn private_dir(dir: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| io_err("cannot make", dir, e))?;
    let mode = fs::metadata(dir)
        .map_err(|e| io_err("cannot read", dir, e))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(|e| {
            format!(
                "{} is open to other accounts (mode {mode:03o}) and cannot be made 0700 ({e}): \
                 its frames would be readable by them",
                dir.display()
            )
        })?;
        log::warn!(
            "relink: spool {} was open to other accounts (mode {mode:03o}): made 0700, so that \
             only its owner reads its frames",
            dir.display()
        );
    }
    for e in fs::read_dir(dir).map_err(|e| io_err("cannot read", dir, e))? {
        let Ok(e) = e else { continue };
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(e.path(), fs::Permissions::from_mode(FILE_MODE))
                .map_err(|err| io_err("cannot make private", &e.path(), err))?;
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes the `numbers` file of `dir` whole with `bound`, synced, through a file renamed over
/// it: after a crash it is the old bound or the new one, never torn.
fn write_reserved(dir: &Path, bound: u64) -> Result<(), String> {
    let tmp = dir.join("numbers.tmp");
    let path = dir.join("numbers");
    let mut f = create(&tmp)?;
    f.write_all(&record::encode_reserved(bound))
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err("cannot write", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| io_err("cannot rename", &tmp, e))?;
    sync_dir(dir).map_err(|e| io_err("cannot sync", dir, e))
}

impl Store {
    /// Opens (or makes) the spool: takes its lock, checks its version, reads what it holds
    /// (cutting torn tails) and starts its thread.
    pub(crate) fn open(spool: &Spool) -> Result<(Arc<Store>, Recovered), String> {
        Store::open_in_boot(spool, boot_id())
    }

    /// [`Store::open`], in the boot `boot` (another than the last run's tells that the
    /// machine went down since).
    fn open_in_boot(spool: &Spool, boot: Vec<u8>) -> Result<(Arc<Store>, Recovered), String> {
        let dir = spool.dir().to_path_buf();
        private_dir(&dir)?;
        let lock_path = dir.join("LOCK");
        let lock_file = private()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err("cannot open", &lock_path, e))?;
        if !matches!(lock_file.try_lock_exclusive(), Ok(true)) {
            return Err(format!(
                "{} is in use by another link or process",
                dir.display()
            ));
        }
        let version = Core::check_version(&dir)?;
        let mut recovered = Recovered::default();
        // The acks log.
        let acks_path = dir.join("acks");
        let mut done = Ranges::default();
        if let Ok(data) = fs::read(&acks_path) {
            let good = record::decode_acks(&data, &mut done);
            // Zeros past the records are its reserved space.
            let tail = data[good..]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |i| i + 1);
            recovered.cut_bytes += tail as u64;
        }
        // The segments, in order.
        let mut segments: Vec<(u64, PathBuf)> = fs::read_dir(&dir)
            .map_err(|e| io_err("cannot read", &dir, e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let first = name.strip_suffix(".seg")?.parse::<u64>().ok()?;
                Some((first, e.path()))
            })
            .collect();
        segments.sort();
        let mut next_seq = done.end();
        let mut last_seq = None;
        // Every number a record on disk holds, in order (segments, then the stage).
        let mut held: Vec<u64> = Vec::new();
        let mut kept = VecDeque::new();
        // The last run's last marker.
        let (marks_file, marker) =
            MarksFile::open(&dir).map_err(|e| io_err("cannot open", &dir.join("marks"), e))?;
        let read: Vec<(u64, PathBuf, u64, record::Segment)> = segments
            .into_iter()
            .map(|(first, path)| {
                let data = fs::read(&path).map_err(|e| io_err("cannot read", &path, e))?;
                let len = data.len() as u64;
                Ok((first, path, len, record::read_segment(&Bytes::from(data))))
            })
            .collect::<Result<_, String>>()?;
        for (first, _, _, seg) in &read {
            next_seq = next_seq.max(*first);
            if let Some(r) = seg.records.last() {
                last_seq = last_seq.max(Some(r.seq));
            }
        }
        // Records staged and not yet written to a segment when the last process ended: they
        // stay staged, and the new segment begins with them.
        let durability = spool.get_durability();
        let mut stage = Stage::open(&dir, durability != Durability::EveryFrame)?;
        let mut staged = Vec::new();
        if let Some((stage, records)) = stage.as_mut() {
            if let Some(last) = last_seq {
                stage.keep_after(last, records);
            }
            staged = records
                .drain(..)
                .filter(|r| last_seq < Some(r.seq))
                .collect();
        }
        // What each segment must hold, against what it holds: frames lost to damage (numbers
        // that did not leave), and bytes cut that are damage.
        let closed_run = marker.as_ref().filter(|m| m.closed);
        let machine_down = marker
            .as_ref()
            .is_some_and(|m| boot.is_empty() || m.boot != boot);
        let mut damaged = Ranges::default();
        // Every number a record holds, in a segment or staged, and those that left.
        let mut known = done.clone();
        for (_, _, _, seg) in &read {
            known.extend(&mut seg.records.iter().map(|r| r.seq).collect::<Vec<_>>());
        }
        known.extend(&mut staged.iter().map(|r| r.seq).collect::<Vec<_>>());
        // What the openings say the segment before each must hold: a segment deleted or
        // lost whole is found from the file after it.
        for (_, _, _, seg) in &read {
            for &(lo, hi) in seg.opening.iter().flat_map(|o| o.0.iter()) {
                for (a, b) in known.missing(lo, hi) {
                    damaged.insert(a, b);
                }
            }
        }
        // The last run, when it closed cleanly (everything synced), when the page cache
        // outlived it (a process's death), or under `EveryFrame`: every number it handed out
        // has a record, or left. It handed out its numbers one after the other from its
        // `from`, up to its last marker's `written` at least (the clean close's: every number
        // it handed out), and up to the last number a record of it holds.
        let mut run_lost = 0;
        if let Some(m) = marker
            .as_ref()
            .filter(|m| m.closed || !machine_down || m.every_frame)
        {
            let last_held = read
                .iter()
                .flat_map(|(.., seg)| seg.records.last())
                .chain(staged.last())
                .map(|r| r.seq + 1)
                .filter(|&end| end > m.from)
                .max()
                .unwrap_or(0);
            let handed = m.written.max(last_held);
            for (a, b) in known.missing(m.from, handed) {
                run_lost += b - a;
                damaged.insert(a, b);
            }
        }
        let n = read.len();
        for (k, (first, path, len, seg)) in read.iter().enumerate() {
            let last = k + 1 == n;
            let mut expected = Ranges::default();
            let mut holds = Ranges::default();
            holds.extend(&mut seg.records.iter().map(|r| r.seq).collect::<Vec<_>>());
            if let Some(seal) = &seg.seal {
                for &(lo, hi) in &seal.0 {
                    expected.insert(lo, hi);
                }
            } else {
                for &(before, after) in &seg.holes {
                    expected.insert(before.map_or(*first, |b| b + 1), after);
                }
                // The last segment of a run that closed cleanly ends at the close's bound.
                if let (true, Some(m), true) = (last, closed_run, version >= 4) {
                    let from = seg.records.last().map_or(*first, |r| r.seq + 1);
                    expected.insert(from, m.bound);
                }
            }
            let mut known = holds;
            for (a, b) in done.iter() {
                known.insert(a, b);
            }
            let mut lost = 0;
            for (lo, hi) in expected.iter() {
                for (a, b) in known.missing(lo, hi) {
                    lost += b - a;
                    damaged.insert(a, b);
                }
            }
            // A torn tail is damage unless the last run's death explains it: a write cut
            // short by the process's death (its records are in the stage, or under
            // `EveryFrame` its call never returned), when the run lacks no number it handed
            // out, and under `EveryFrame` a power cut too. What a power cut took under the
            // other policies is counted.
            let tail = len - seg.end as u64;
            let explained = last
                && closed_run.is_none()
                && run_lost == 0
                && (!machine_down || marker.as_ref().is_some_and(|m| m.every_frame));
            let cut = seg.corrupt + if explained { 0 } else { tail };
            if cut > 0 || lost > 0 {
                log::warn!(
                    "relink: spool segment {}: {cut} bytes failed their check; {lost} frames \
                     lost",
                    path.display()
                );
            }
            recovered.cut_bytes += cut;
        }
        if run_lost > 0 {
            log::warn!(
                "relink: spool {}: {run_lost} frames its last run numbered have no record",
                dir.display()
            );
        }
        for (lo, hi) in damaged.iter() {
            next_seq = next_seq.max(hi);
            // Reported once: from now on they count as left.
            done.insert(lo, hi);
        }
        // What the last segment must hold, as its seal says (or, unsealed, as its repair
        // seals it): the new segment's opening. The acks log keeps what left from the lowest
        // number a kept segment holds or its opening names.
        let mut opening = record::Seal::default();
        let mut floor = u64::MAX;
        for (first, path, len, seg) in read {
            let mut pending = false;
            for r in &seg.records {
                held.push(r.seq);
                next_seq = next_seq.max(r.seq + 1);
                if !done.contains(r.seq) {
                    pending = true;
                    recovered
                        .frames
                        .push((r.seq, r.deadline_ms, r.frame.clone()));
                }
            }
            if pending {
                Core::repair(&path, len, &seg)?;
                floor = floor
                    .min(first)
                    .min(seg.opening.as_ref().map_or(first, Seal::low));
            }
            opening = seg.seal.clone().unwrap_or_else(|| Seal::holding(&seg));
            kept.push_back((first, path, pending));
        }
        let mut first = None;
        let mut carried = None;
        for r in staged {
            held.push(r.seq);
            first.get_or_insert(r.seq);
            carried = Some((first.unwrap_or(r.seq), r.seq + 1));
            next_seq = next_seq.max(r.seq + 1);
            if !done.contains(r.seq) {
                recovered.frames.push((r.seq, r.deadline_ms, r.frame));
            }
        }
        // Numbers handed out before a crash and never written stay used; after a clean close
        // the numbers go on from the close's (every number handed out is below it).
        let reserved = match Core::read_reserved(&dir)? {
            Some(bound) => bound,
            None => {
                let known = marker.as_ref().map_or(0, |m| m.bound).max(next_seq);
                let bound = known + RESERVE;
                log::warn!(
                    "relink: spool {}: its numbers file fails its check; rebuilt from what the \
                     directory holds: numbers go on from {bound}",
                    dir.display()
                );
                write_reserved(&dir, bound)?;
                bound
            }
        };
        next_seq = match closed_run {
            Some(m) => next_seq.max(m.bound),
            None => next_seq.max(reserved),
        };
        let machine = Core::lost(marker.as_ref(), &boot, reserved, &held, &done);
        let (count, span) = damaged.count_span();
        recovered.lost = if count == 0 {
            machine
        } else if machine.0 == 0 {
            (count, span)
        } else {
            (
                count + machine.0,
                span.start.min(machine.1.start)..span.end.max(machine.1.end),
            )
        };
        if recovered.lost.0 > 0 {
            log::warn!(
                "relink: spool {}: the machine went down while its last run held it; at most {} \
                 frames it numbered {:?} were lost with it",
                dir.display(),
                recovered.lost.0,
                recovered.lost.1
            );
        }
        // A new segment for this run; the old ones stay while they hold frames.
        let first = first.unwrap_or(next_seq);
        let path = dir.join(segment_name(first));
        let (file, pos) = Core::new_segment(&path, &opening)?;
        floor = floor.min(opening.low());
        // What the run's markers say of it (the first written by `Core::mark_start`, before
        // any number is handed out). Its first number is the first staged record's when the
        // last run's stage is carried over and cannot be synced (`Core::carry`).
        let run = Marker {
            id: 0,
            bound: next_seq,
            first,
            from: next_seq,
            written: 0,
            boot,
            closed: false,
            group: matches!(durability, Durability::Group(_)),
            every_frame: durability == Durability::EveryFrame,
        };
        let marks = Marks::new(next_seq);
        let mut closed = VecDeque::new();
        for (first, old, pending) in kept {
            if old == path {
                continue;
            }
            if pending {
                closed.push_back((first, old));
            } else {
                let _ = fs::remove_file(&old);
            }
        }
        // After a run that did not close cleanly, its segments may hold records the kernel
        // has not written back: synced now, so that what a power cut in this run can take is
        // only this run's own.
        if !matches!(marker, Some(Marker { closed: true, .. })) {
            for (_, old) in &closed {
                if let Err(e) = File::open(old).and_then(|f| f.sync_data()) {
                    log::warn!("relink: cannot sync {}: {e}", old.display());
                }
            }
        }
        // The acks log, compacted: what is below the oldest number a kept segment holds or
        // names need not be said.
        let floor = floor.min(next_seq);
        done.prune(floor);
        let (acks, len) = Core::write_acks(&dir, &done)?;
        // A number below the run's first that no record holds will never leave (reserved
        // and not handed out, or lost with the page cache at a power cut): it counts as left,
        // so that the segment around it can go once its own frames have. Kept in memory only
        // (the next start finds the same gaps), so that a start on a full disk writes no more
        // than the acks it read.
        Core::gaps_left(&mut held, next_seq, &mut done);
        sync_dir(&dir).map_err(|e| io_err("cannot sync", &dir, e))?;
        let wake = (Mutex::new(SyncWake::default()), Condvar::new());
        let segment_bytes = spool.get_segment_bytes().max(record::HEADER as u64);
        let core = Arc::new(Core {
            dir,
            durability,
            segment_bytes,
            w: Mutex::new(SegmentWriter {
                file: Arc::new(file),
                first,
                pos,
                opening: opening.0,
                floor,
                starved: false,
                hwm: next_seq,
                hwm_marked: 0,
                buf: Vec::new(),
                stage: stage.map(|(stage, _)| stage),
                next_seq,
                reserved: next_seq,
                marks,
                marked: false,
                run,
                closed,
                unsynced: Vec::new(),
                dir_dirty: false,
                written: false,
                told: false,
                shut: false,
                carried,
                from: next_seq,
            }),
            recovered: Mutex::new(recovered.frames.iter().map(|f| f.0).collect()),
            first_new: next_seq,
            left: Mutex::new(Vec::new()),
            marks: Mutex::new(marks_file),
            acks: Mutex::new(Acks {
                done,
                unwritten: Ranges::default(),
                file: acks,
                len,
            }),
            wake,
            lock: Mutex::new(Some(lock_file)),
            disk: Mutex::new(Disk::default()),
            has_news: std::sync::atomic::AtomicBool::new(false),
        });
        if durability == Durability::EveryFrame {
            core.unstage()?;
        } else {
            core.carry();
        }
        core.mark_start();
        let tick = spool.tick();
        let theirs = core.clone();
        let flusher = std::thread::Builder::new()
            .name("relink-spool".into())
            .spawn(move || flusher(theirs, tick))
            .map_err(|e| format!("cannot start the spool's thread: {e}"))?;
        let store = Store {
            core,
            flusher: Mutex::new(Some(flusher)),
        };
        Ok((Arc::new(store), recovered))
    }
}

impl Core {
    /// Makes a segment file (empty).
    /// Makes a segment file that begins with `opening` (what the segment before it holds);
    /// gives it and where its records begin. On a disk with no room for the opening, the
    /// segment begins without one (and a start cannot tell the segment before it missing).
    fn new_segment(path: &Path, opening: &Seal) -> Result<(File, u64), String> {
        let file = create(path)?;
        if opening.0.is_empty() {
            return Ok((file, 0));
        }
        let mut buf = Vec::new();
        opening.encode_opening(&mut buf);
        match file.write_all_at(&buf, 0) {
            Ok(()) => Ok((file, buf.len() as u64)),
            Err(e) => {
                log::warn!("relink: {}", io_err("cannot write", path, e));
                let _ = file.set_len(0);
                Ok((file, 0))
            }
        }
    }

    /// Under `EveryFrame`, a stage left by a run under another policy: its records are
    /// written to the segment and synced, and the stage is removed.
    fn unstage(&self) -> Result<(), String> {
        let mut w = lock(&self.w);
        if w.stage.is_some() {
            w.write()
                .and_then(|()| w.file.sync_data())
                .map_err(|e| format!("cannot write to the spool: {e}"))?;
            w.stage = None;
            let path = self.dir.join("stage");
            fs::remove_file(&path).map_err(|e| io_err("cannot remove", &path, e))?;
        }
        Ok(())
    }

    /// Under `OsWriteBack` and `Group`, records the last run staged and this one keeps: written
    /// to the new segment and synced before this run hands out a number, so that what a power
    /// cut in this run can take is only its own. When they cannot be (a full disk), they stay
    /// staged, and the run's marker counts them as its own (its first number theirs).
    fn carry(&self) {
        let mut w = lock(&self.w);
        if w.unwritten() == 0 {
            return;
        }
        match w.write().and_then(|()| w.file.sync_data()) {
            Ok(()) => w.run.first = self.first_new,
            Err(e) => log::warn!(
                "relink: cannot write to the spool {}: {e}",
                self.dir.display()
            ),
        }
    }

    /// Writes the run's first marker, before it hands out a number. On a full disk the spool
    /// still opens, so that its frames can be sent and leave; the first number is then handed
    /// out after a marker (`Core::mark_for`).
    fn mark_start(&self) {
        let mut w = lock(&self.w);
        let next = w.next_seq;
        let bound = w.marks.tick(next);
        let marker = Marker {
            bound,
            written: w.written_to(),
            ..w.run.clone()
        };
        match lock(&self.marks).write(&marker) {
            Ok(id) => {
                w.marks.synced(id, bound);
                w.hwm_marked = marker.written;
                w.marked = true;
            }
            Err(e) => log::warn!(
                "relink: cannot write to the spool {}: {e}",
                self.dir.display()
            ),
        }
    }

    /// Refuses a directory written in another format, or holding files of something else;
    /// gives the format it was at (this one for a new directory).
    fn check_version(dir: &Path) -> Result<u32, String> {
        let path = dir.join("VERSION");
        match fs::read_to_string(&path) {
            Ok(s) => match s.trim().parse::<u32>() {
                Ok(VERSION) => Ok(VERSION),
                Ok(v @ 1..=4) => Core::write_version(dir).map(|()| v),
                Ok(v) => Err(format!(
                    "{} holds a spool of format {v}; this relink reads formats 1 to {VERSION} \
                     only",
                    dir.display()
                )),
                Err(_) => Err(format!("{} has an unreadable VERSION file", dir.display())),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let foreign = fs::read_dir(dir)
                    .map_err(|e| io_err("cannot read", dir, e))?
                    .filter_map(|e| e.ok())
                    .any(|e| e.file_name() != "LOCK" && e.file_name() != "VERSION.tmp");
                if foreign {
                    return Err(format!(
                        "{} is not empty and holds no relink spool (no VERSION file)",
                        dir.display()
                    ));
                }
                Core::write_version(dir).map(|()| VERSION)
            }
            Err(e) => Err(io_err("cannot read", &path, e)),
        }
    }

    /// Writes the `VERSION` file (through a file renamed over it) and syncs it.
    fn write_version(dir: &Path) -> Result<(), String> {
        let tmp = dir.join("VERSION.tmp");
        let mut f = create(&tmp)?;
        f.write_all(format!("{VERSION}\n").as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("cannot write", &tmp, e))?;
        fs::rename(&tmp, dir.join("VERSION")).map_err(|e| io_err("cannot rename", &tmp, e))?;
        sync_dir(dir).map_err(|e| io_err("cannot sync", dir, e))
    }

    /// The numbers the last run may have lost with the machine (see [`Recovered::lost`]), from
    /// its last marker, the `numbers` file's bound, the numbers records hold and those that
    /// left: none after a clean close, in the same boot (the page cache outlived the process)
    /// or under `EveryFrame` (a number is handed out once its record is synced); else every
    /// number from the run's first below the bound, under `Group` the marker's, that no record
    /// holds and that did not leave.
    fn lost(
        marker: Option<&Marker>,
        boot: &[u8],
        reserved: u64,
        held: &[u64],
        done: &Ranges,
    ) -> (u64, std::ops::Range<u64>) {
        let down = |m: &&Marker| boot.is_empty() || m.boot != boot;
        let Some(m) = marker.filter(|m| !m.closed && !m.every_frame && down(m)) else {
            return (0, 0..0);
        };
        let end = if m.group {
            reserved.min(m.bound)
        } else {
            reserved
        };
        let mut known = done.clone();
        known.extend(&mut held.to_vec());
        known.absent(m.first, end)
    }

    /// Marks as left every number from the oldest held up to `end` that no record holds.
    fn gaps_left(held: &mut [u64], end: u64, done: &mut Ranges) {
        held.sort_unstable();
        let Some(&oldest) = held.first() else {
            return;
        };
        let mut at = oldest;
        for &seq in held.iter() {
            if seq > at {
                done.insert(at, seq);
            }
            at = at.max(seq + 1);
        }
        if end > at {
            done.insert(at, end);
        }
    }

    /// The bound the `numbers` file holds: every number handed out so far is below it. Zero
    /// when there is none (a new spool); `None` when it fails its check.
    fn read_reserved(dir: &Path) -> Result<Option<u64>, String> {
        let path = dir.join("numbers");
        match fs::read(&path) {
            Ok(data) => Ok(record::decode_reserved(&data)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(0)),
            Err(e) => Err(io_err("cannot read", &path, e)),
        }
    }

    /// A segment an earlier run left, which holds frames still to send, made whole: a
    /// segment with damage between its records is written again with its whole records
    /// only (and its opening); a torn tail is cut; an unsealed one (the segment a run left
    /// open) is sealed with the numbers it holds now (those it lacks were reported). Each
    /// change is synced.
    fn repair(path: &Path, len: u64, seg: &record::Segment) -> Result<(), String> {
        let seal = Seal::holding(seg);
        if seg.corrupt > 0 {
            let tmp = path.with_extension("tmp");
            let mut buf = Vec::new();
            if let Some(opening) = &seg.opening {
                opening.encode_opening(&mut buf);
            }
            for r in &seg.records {
                record::encode(&mut buf, r.seq, r.deadline_ms, &r.frame);
            }
            seal.encode(&mut buf);
            let mut f = create(&tmp)?;
            f.write_all(&buf)
                .and_then(|()| f.sync_all())
                .map_err(|e| io_err("cannot write", &tmp, e))?;
            return fs::rename(&tmp, path).map_err(|e| io_err("cannot rename", &tmp, e));
        }
        if seg.seal.is_some() && seg.end as u64 == len {
            return Ok(());
        }
        let f = private()
            .write(true)
            .open(path)
            .map_err(|e| io_err("cannot open", path, e))?;
        let mut buf = Vec::new();
        if seg.seal.is_none() {
            seal.encode(&mut buf);
        }
        f.set_len(seg.end as u64)
            .and_then(|()| f.write_all_at(&buf, seg.end as u64))
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("cannot cut", path, e))
    }

    /// Reserves on disk the numbers up to `end` (exclusive) and `RESERVE` more, unless they
    /// are already: the `numbers` file is written whole, synced and renamed over the old one,
    /// so it is the old bound or the new one after a crash, never torn.
    fn reserve(&self, w: &mut SegmentWriter, end: u64) -> Result<(), String> {
        if end <= w.reserved {
            return Ok(());
        }
        let bound = end + RESERVE;
        write_reserved(&self.dir, bound)?;
        w.reserved = bound;
        Ok(())
    }

    /// Before the numbers up to `end` (exclusive) are handed out: under `Group`, when they
    /// reach the bound of a marker that can be the last on disk ([`Marks::limit`]), and under
    /// any policy when the start could not write the run's marker, a marker with room past
    /// `end` is written and synced by the caller: rare under `Group`, since the spool's
    /// thread's marker leaves room for four times the frames of its last interval
    /// (`marks::AHEAD`), and cheap (one small block of the `marks` file).
    fn mark_for(&self, w: &mut SegmentWriter, end: u64) -> Result<(), String> {
        let group = matches!(self.durability, Durability::Group(_));
        if w.marked && (!group || end <= w.marks.limit()) {
            return Ok(());
        }
        let bound = w.marks.ahead(end);
        let marker = Marker {
            bound,
            written: w.written_to(),
            ..w.run.clone()
        };
        let id = lock(&self.marks)
            .write(&marker)
            .map_err(|e| format!("cannot write to the spool: {e}"))?;
        w.marks.synced(id, bound);
        w.marked = true;
        Ok(())
    }

    /// At a clean close: every record written and synced (under `OsWriteBack` the segments'
    /// too), then a marker saying so, so that the next start finds nothing lost even after a
    /// power cut.
    fn close(&self) -> io::Result<()> {
        let mut w = lock(&self.w);
        w.seal()?;
        if self.durability == Durability::OsWriteBack {
            for (_, path) in &w.closed {
                File::open(path)?.sync_data()?;
            }
        }
        w.file.sync_data()?;
        sync_dir(&self.dir)?;
        let next = w.next_seq;
        let marker = Marker {
            bound: next,
            closed: true,
            written: next,
            ..w.run.clone()
        };
        let id = lock(&self.marks).write(&marker)?;
        w.marks.synced(id, next);
        Ok(())
    }

    /// Writes the acks log anew with `done` (through a file renamed over it), its space
    /// reserved ([`ACKS_SPACE`], zeros past its records; left unreserved when the disk has no
    /// room); gives it open for writing and where its records end.
    fn write_acks(dir: &Path, done: &Ranges) -> Result<(File, u64), String> {
        let tmp = dir.join("acks.tmp");
        let path = dir.join("acks");
        let mut buf = Vec::new();
        for (lo, hi) in done.iter() {
            record::encode_ack(&mut buf, lo, hi);
        }
        let mut f = create(&tmp)?;
        f.write_all(&buf)
            .map_err(|e| io_err("cannot write", &tmp, e))?;
        if let Err(e) = f.allocate(ACKS_SPACE.max(buf.len() as u64)) {
            log::warn!("relink: cannot reserve space for {}: {e}", path.display());
        }
        f.sync_all().map_err(|e| io_err("cannot write", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| io_err("cannot rename", &tmp, e))?;
        Ok((f, buf.len() as u64))
    }

    /// Appends the record of the frame `make` gives for the next sequence number and makes it
    /// as durable as the policy says, then calls `offer`, which hands it to the intake. Its
    /// record is taken back if the intake refuses it. Gives the frame's number and what
    /// `offer` gave, or the frame with the refusal; `Err` is a write error (the frame was not
    /// offered).
    pub(crate) fn admit_one<T, E>(
        &self,
        make: impl FnOnce(u64) -> Bytes,
        deadline_ms: u64,
        offer: impl FnOnce(&mut Bytes) -> Result<T, E>,
    ) -> Admitted<T, E> {
        let mut w = lock(&self.w);
        let seq = w.next_seq;
        let mut frame = make(seq);
        if w.shut {
            // The intake closed before the store was shut: the offer is refused.
            return Ok(offer(&mut frame).map(|t| (seq, t)).map_err(|e| (frame, e)));
        }
        if let Err(e) = self
            .roll_if_full(&mut w)
            .and_then(|()| self.reserve(&mut w, seq + 1))
            .and_then(|()| self.mark_for(&mut w, seq + 1))
        {
            self.write_failed(&mut w, &e);
            return Err((frame, e));
        }
        if frame.len() > record::MAX_FRAME {
            return Err((frame, "frame too large for the spool".into()));
        }
        let (mark, pos) = (w.pos + w.unwritten(), w.pos);
        if let Err(e) = w
            .append(seq, deadline_ms, std::iter::once(&frame[..]), None)
            .and_then(|()| self.persist(&mut w))
        {
            w.rollback(mark);
            let e = format!("cannot write to the spool: {e}");
            self.write_failed(&mut w, &e);
            return Err((frame, e));
        }
        match offer(&mut frame) {
            Ok(t) => {
                w.next_seq += 1;
                self.admitted(&mut w, pos);
                Ok(Ok((seq, t)))
            }
            Err(e) => {
                w.rollback(mark);
                Ok(Err((frame, e)))
            }
        }
    }

    /// A call's write failed: news for the link's events, and the current segment is
    /// replaced once its frames all left, so that its space is free.
    fn write_failed(&self, w: &mut SegmentWriter, e: &str) {
        w.starved = true;
        self.disk_failed(&e);
    }

    /// A call's frames were taken, their records written where the policy says (`pos`: where
    /// the segment's records ended before the call): when the call wrote to the segment,
    /// the spool writes; under `EveryFrame` and `OsWriteBack`, a marker says how far this
    /// run's records reached the segments.
    fn admitted(&self, w: &mut SegmentWriter, pos: u64) {
        if w.pos != pos {
            self.disk_ok();
        }
        if !matches!(self.durability, Durability::Group(_)) {
            self.tell_written(w);
        }
    }

    /// Makes what was appended as durable as the policy says before the call returns. Under
    /// `OsWriteBack` and `Group` the records are in the page cache already (in the stage);
    /// under `Group` the spool's thread is told there is a group to write and sync.
    fn persist(&self, w: &mut SegmentWriter) -> io::Result<()> {
        match self.durability {
            Durability::EveryFrame => w.write().and_then(|()| w.file.sync_data()),
            Durability::OsWriteBack => Ok(()),
            Durability::Group(_) => {
                if !w.told {
                    w.told = true;
                    self.nudge();
                }
                Ok(())
            }
        }
    }

    /// Appends the records of `frames` (numbered from the next sequence number) and makes
    /// them as durable as the policy says, then calls `offer`, which hands the frames to the
    /// intake and says how many it took. The records of the frames it did not take are taken
    /// back. Gives the first frame's number, how many were taken and what `offer` gave.
    ///
    /// `Err` is a write error: no frame was offered.
    pub(crate) fn admit<R, E>(
        &self,
        frames: &mut Batch,
        deadline_ms: u64,
        offer: impl FnOnce(&mut Batch) -> Result<(usize, R), E>,
    ) -> Result<Result<(u64, usize, R), E>, String> {
        let mut w = lock(&self.w);
        if w.shut {
            // The intake closed before the store was shut: the offer is refused.
            let first = w.next_seq;
            return Ok(offer(frames).map(|(k, r)| (first, k, r)));
        }
        let first = w.next_seq;
        let end = first + frames.len() as u64;
        if let Err(e) = self
            .roll_if_full(&mut w)
            .and_then(|()| self.reserve(&mut w, end))
            .and_then(|()| self.mark_for(&mut w, end))
        {
            self.write_failed(&mut w, &e);
            return Err(e);
        }
        if frames.iter().any(|f| f.len() > record::MAX_FRAME) {
            return Err("frame too large for the spool".into());
        }
        let (mark, pos) = (w.pos + w.unwritten(), w.pos);
        let mut ends = Vec::new();
        let n = frames.len();
        if let Err(e) = w
            .append(first, deadline_ms, frames.iter(), Some(&mut ends))
            .and_then(|()| self.persist(&mut w))
        {
            w.rollback(mark);
            let e = format!("cannot write to the spool: {e}");
            self.write_failed(&mut w, &e);
            return Err(e);
        }
        match offer(frames) {
            Ok((k, r)) => {
                if k < n {
                    w.rollback(if k == 0 { mark } else { ends[k - 1] });
                }
                w.next_seq += k as u64;
                self.admitted(&mut w, pos);
                Ok(Ok((first, k, r)))
            }
            Err(e) => {
                w.rollback(mark);
                Ok(Err(e))
            }
        }
    }

    /// Closes the current segment once it is full and begins the next.
    fn roll_if_full(&self, w: &mut SegmentWriter) -> Result<(), String> {
        if w.pos + w.unwritten() < self.segment_bytes {
            return Ok(());
        }
        let seal = w
            .seal()
            .and_then(|seal| match self.durability {
                Durability::EveryFrame => w.file.sync_data().map(|()| seal),
                _ => Ok(seal),
            })
            .map_err(|e| format!("cannot write to the spool: {e}"))?;
        let path = self.dir.join(segment_name(w.next_seq));
        let (file, pos) = Core::new_segment(&path, &seal)?;
        if self.durability == Durability::EveryFrame {
            sync_dir(&self.dir).map_err(|e| io_err("cannot sync", &self.dir, e))?;
        } else {
            w.dir_dirty = true;
        }
        let old = std::mem::replace(&mut w.file, Arc::new(file));
        if matches!(self.durability, Durability::Group(_)) {
            w.unsynced.push(old);
        }
        let old_first = std::mem::replace(&mut w.first, w.next_seq);
        w.closed
            .push_back((old_first, self.dir.join(segment_name(old_first))));
        w.pos = pos;
        w.opening = seal.0;
        w.carried = None;
        w.from = w.next_seq;
        Ok(())
    }

    /// The numbers of the frames the intake gets, in its order: those recovered at open,
    /// then one each from the first number this run gave.
    fn numbers(&self) -> (VecDeque<u64>, u64) {
        (std::mem::take(&mut *lock(&self.recovered)), self.first_new)
    }

    /// Numbers of frames that left for good (from the IO thread); the spool's thread is woken
    /// for the first of a round.
    fn left(&self, seqs: &mut Vec<u64>) {
        let first = {
            let mut left = lock(&self.left);
            let first = left.is_empty();
            left.append(seqs);
            first
        };
        if first {
            self.nudge();
        }
    }

    /// Wakes the spool's thread: there is work.
    fn nudge(&self) {
        let (m, cv) = &self.wake;
        let mut wake = lock(m);
        if !wake.work {
            wake.work = true;
            cv.notify_one();
        }
    }

    /// The flusher's work, and the last of it at the end: the staged records written (a
    /// failed write is logged, and the records stay staged: a call that finds the stage full
    /// meets the error) and, under `Group`, synced, the numbers that left in the acks log
    /// (those a failed write could not write go with the next), segments whose frames all
    /// left deleted, and after a failed write the current segment replaced once its frames
    /// all left.
    ///
    /// The acks log is not synced here (a clean close syncs it): a record of it lost at a
    /// power cut makes a frame that had left be sent once more, never a frame lost.
    fn flush(&self) {
        let (file, unsynced, dir_dirty, sync, mark) = {
            let mut w = lock(&self.w);
            w.told = false;
            let wrote = w.written;
            match w.write() {
                Err(e) => {
                    log::error!("relink: cannot write to the spool: {e}");
                    w.starved = true;
                    self.disk_failed(&e);
                }
                Ok(()) if w.written && !wrote => self.disk_ok(),
                Ok(()) => {}
            }
            let group = matches!(self.durability, Durability::Group(_));
            let sync = std::mem::replace(&mut w.written, false) && group;
            // Under `Group`, a marker with room for the next interval, written after the
            // group's sync; the callers stay below its bound from now.
            let mark = sync.then(|| {
                let next = w.next_seq;
                let bound = w.marks.tick(next);
                w.marks.pending = Some(bound);
                Marker {
                    bound,
                    written: w.written_to(),
                    ..w.run.clone()
                }
            });
            if !group {
                self.tell_written(&mut w);
            }
            (
                w.file.clone(),
                std::mem::take(&mut w.unsynced),
                std::mem::replace(&mut w.dir_dirty, false) && group,
                sync,
                mark,
            )
        };
        let mut synced = true;
        if sync || !unsynced.is_empty() {
            for f in unsynced.iter().chain(std::iter::once(&file)) {
                if let Err(e) = f.sync_data() {
                    log::error!("relink: cannot sync the spool: {e}");
                    synced = false;
                }
            }
        }
        if dir_dirty && sync_dir(&self.dir).is_err() {
            lock(&self.w).dir_dirty = true;
            synced = false;
        }
        if let Some(marker) = mark {
            let written = if synced {
                lock(&self.marks)
                    .write(&marker)
                    .map_err(|e| log::error!("relink: cannot write to the spool: {e}"))
            } else {
                Err(())
            };
            let mut w = lock(&self.w);
            match written {
                Ok(id) => {
                    w.marks.synced(id, marker.bound);
                    w.hwm_marked = w.hwm_marked.max(marker.written);
                }
                // A failed write may be on disk, whole: the callers stay below its bound
                // too, until a later marker is synced.
                Err(()) => w.marks.synced.1 = w.marks.limit(),
            }
            w.marks.pending = None;
        }
        let mut left = std::mem::take(&mut *lock(&self.left));
        let mut acks = lock(&self.acks);
        if !left.is_empty() {
            let mut fresh = Ranges::default();
            fresh.extend(&mut left);
            for (lo, hi) in fresh.iter() {
                acks.unwritten.insert(lo, hi);
            }
        }
        if acks.unwritten.iter().next().is_some() {
            let mut buf = Vec::new();
            for (lo, hi) in acks.unwritten.iter() {
                record::encode_ack(&mut buf, lo, hi);
            }
            // In place past the records: a write cut short leaves a part that the next
            // write covers.
            match acks.file.write_all_at(&buf, acks.len) {
                Ok(()) => {
                    acks.len += buf.len() as u64;
                    let fresh = std::mem::take(&mut acks.unwritten);
                    for (lo, hi) in fresh.iter() {
                        acks.done.insert(lo, hi);
                    }
                }
                Err(e) => {
                    log::error!("relink: cannot write the spool's acks: {e}");
                    lock(&self.w).starved = true;
                    self.disk_failed(&e);
                }
            }
        }
        // Segments whose every frame left (as the acks log says).
        let gone: Vec<PathBuf> = {
            let mut w = lock(&self.w);
            let mut gone = Vec::new();
            while let Some(&(first, _)) = w.closed.front() {
                let next = w.closed.get(1).map_or(w.first, |(f, _)| *f);
                if acks.done.first_absent(first) < next {
                    break;
                }
                if let Some((_, path)) = w.closed.pop_front() {
                    // The segment after it names its numbers (its opening): their acks stay.
                    w.floor = w.floor.max(first);
                    gone.push(path);
                }
            }
            if w.starved {
                if let Some(old) = self.reclaim(&mut w, &acks.done) {
                    gone.push(old);
                }
            }
            gone
        };
        for path in &gone {
            let _ = fs::remove_file(path);
        }
        if acks.len > ACKS_COMPACT {
            let floor = lock(&self.w).floor;
            acks.done.prune(floor);
            match Core::write_acks(&self.dir, &acks.done) {
                Ok((f, len)) => {
                    acks.len = len;
                    acks.file = f;
                }
                Err(e) => log::error!("relink: {e}"),
            }
        }
    }

    /// After a failed write, the current segment once every frame it and the stage hold left
    /// (as the acks log says): the stage is emptied and a new segment begun, with the same
    /// opening; gives the old one's path, to delete.
    fn reclaim(&self, w: &mut SegmentWriter, done: &Ranges) -> Option<PathBuf> {
        let holds = w.ranges();
        if holds.iter().any(|&(lo, hi)| done.first_absent(lo) < hi) {
            return None;
        }
        if holds.is_empty() && w.pos <= Seal(w.opening.clone()).size() as u64 {
            // Nothing in it to free.
            w.starved = false;
            return None;
        }
        let path = self.dir.join(segment_name(w.next_seq));
        let old = self.dir.join(segment_name(w.first));
        if path == old {
            return None;
        }
        let opening = Seal(w.opening.clone());
        let (file, pos) = match Core::new_segment(&path, &opening) {
            Ok(f) => f,
            Err(e) => {
                log::warn!("relink: {e}");
                return None;
            }
        };
        if let Some(stage) = w.stage.as_mut() {
            stage.clear();
        }
        w.buf.clear();
        w.file = Arc::new(file);
        w.first = w.next_seq;
        w.pos = pos;
        w.from = w.next_seq;
        w.carried = None;
        w.starved = false;
        w.dir_dirty = true;
        Some(old)
    }

    /// Notes a failed write to the spool: news for the link's events, unless the last write
    /// failed too.
    fn disk_failed(&self, e: &dyn std::fmt::Display) {
        let mut disk = lock(&self.disk);
        if !disk.failing {
            disk.failing = true;
            disk.news.push((
                false,
                format!("cannot write to {}: {e}", self.dir.display()),
            ));
            self.has_news
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Notes a write to the spool that succeeded: news for the link's events when the last
    /// failed.
    fn disk_ok(&self) {
        let mut disk = lock(&self.disk);
        if disk.failing {
            disk.failing = false;
            disk.news
                .push((true, format!("{} takes writes again", self.dir.display())));
            self.has_news
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// What the spool's writes did since the last call, for the link's events: whether it
    /// writes, and what failed or succeeded, in order.
    pub(crate) fn news(&self) -> Vec<(bool, String)> {
        use std::sync::atomic::Ordering;
        // Read first: the IO thread asks at every pass, and the flag seldom changes.
        if !self.has_news.load(Ordering::Acquire) || !self.has_news.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut lock(&self.disk).news)
    }

    /// Under `EveryFrame` and `OsWriteBack`, when more of this run's numbers have their record
    /// in a segment than the last marker says: a marker that says so, not synced (a process's
    /// death leaves it in the page cache). Under `Group` the spool's thread's marker says it.
    fn tell_written(&self, w: &mut SegmentWriter) {
        let written = w.written_to();
        if written <= w.hwm_marked {
            return;
        }
        let marker = Marker {
            bound: w.marks.limit(),
            written,
            ..w.run.clone()
        };
        match lock(&self.marks).write_unsynced(&marker) {
            Ok(_) => w.hwm_marked = written,
            Err(e) => {
                log::error!("relink: cannot write to the spool: {e}");
                self.disk_failed(&e);
            }
        }
    }
}

impl SegmentWriter {
    /// Appends the records of `frames`, numbered from `first`, and notes where each ends in
    /// `ends` when given (a single frame needs no note): into the stage (`OsWriteBack`,
    /// `Group`; written to the segment first when it has no room for all of them), else, or when they need more than the whole stage, into
    /// the call's buffer, which is then written at once. `Err` is that write's error.
    fn append<'a>(
        &mut self,
        first: u64,
        deadline_ms: u64,
        frames: impl Iterator<Item = &'a [u8]> + Clone,
        mut ends: Option<&mut Vec<u64>>,
    ) -> io::Result<()> {
        let need: usize = frames.clone().map(record::size).sum();
        if self.stage.as_mut().is_some_and(|s| s.room(need).is_none()) {
            self.write()?;
        }
        let base = self.pos;
        if let Some(stage) = self.stage.as_mut() {
            let staged = stage.len();
            if let Some(room) = stage.room(need) {
                let mut at = 0;
                for (i, frame) in frames.enumerate() {
                    at +=
                        record::encode_into(&mut room[at..], first + i as u64, deadline_ms, frame);
                    if let Some(ends) = ends.as_deref_mut() {
                        ends.push(base + (staged + at) as u64);
                    }
                }
                stage.grow(at);
                return Ok(());
            }
        }
        for (i, frame) in frames.enumerate() {
            record::encode(&mut self.buf, first + i as u64, deadline_ms, frame);
            if let Some(ends) = ends.as_deref_mut() {
                ends.push(base + self.buf.len() as u64);
            }
        }
        if self.stage.is_some() {
            self.write()?;
        }
        Ok(())
    }

    /// Writes what is staged, then the current segment's seal (the numbers it holds), so
    /// that nothing more is appended to it.
    fn seal(&mut self) -> io::Result<Seal> {
        self.write()?;
        let seal = Seal(self.ranges());
        seal.encode(&mut self.buf);
        self.write().map(|()| seal)
    }

    /// The numbers of the records the current segment and the stage hold: those an earlier
    /// run staged, carried over at open, then this run's since the segment began.
    fn ranges(&self) -> Vec<(u64, u64)> {
        let run = (self.from < self.next_seq).then_some((self.from, self.next_seq));
        self.carried.into_iter().chain(run).collect()
    }

    /// Every number this run handed out below this has its record in a segment.
    fn written_to(&self) -> u64 {
        if self.unwritten() == 0 {
            self.next_seq
        } else {
            self.hwm
        }
    }

    /// Bytes of records not yet written to the segment.
    fn unwritten(&self) -> u64 {
        (self.stage.as_ref().map_or(0, Stage::len) + self.buf.len()) as u64
    }

    /// Writes the staged records, then the buffer, to the current segment.
    fn write(&mut self) -> io::Result<()> {
        if let Some(stage) = self.stage.as_mut() {
            if stage.len() > 0 {
                if let Err(e) = self.file.write_all_at(stage.staged(), self.pos) {
                    // A part may be on the file: the stage stays the truth.
                    let _ = self.file.set_len(self.pos);
                    return Err(e);
                }
                self.pos += stage.len() as u64;
                stage.clear();
                self.written = true;
            }
        }
        if !self.buf.is_empty() {
            if let Err(e) = self.file.write_all_at(&self.buf, self.pos) {
                // A part may be on the file: the buffer stays the truth.
                let _ = self.file.set_len(self.pos);
                return Err(e);
            }
            self.pos += self.buf.len() as u64;
            self.buf.clear();
            self.written = true;
        }
        // Every number handed out has its record in the segment now.
        self.hwm = self.next_seq;
        Ok(())
    }

    /// Takes back every record past `to` (a position in the segment, written or not); staged
    /// ones become zeros in the stage.
    fn rollback(&mut self, to: u64) {
        if to >= self.pos {
            let keep = (to - self.pos) as usize;
            let staged = self.stage.as_ref().map_or(0, Stage::len);
            if let Some(stage) = self.stage.as_mut() {
                stage.truncate(keep.min(staged));
            }
            self.buf.truncate(keep.saturating_sub(staged));
        } else {
            if let Some(stage) = self.stage.as_mut() {
                stage.truncate(0);
            }
            self.buf.clear();
            let _ = self.file.set_len(to);
            self.pos = to;
        }
    }
}

impl Store {
    /// Ends the spool's run, once the link is done with it (its intake closed, the numbers of
    /// the frames that left handed over): the spool's thread stopped, its last work done (the
    /// acks written), the clean close written and synced ([`Core::close`]), the stage
    /// unmapped and the directory's lock let go. Later calls do nothing; a caller of
    /// [`Core::admit_one`] or [`Core::admit`] then reaches the intake, closed, with no record.
    pub(crate) fn shut(&self) {
        let Some(t) = lock(&self.flusher).take() else {
            return;
        };
        {
            let (m, cv) = &self.core.wake;
            lock(m).stopped = true;
            cv.notify_all();
        }
        let _ = t.join();
        self.core.flush();
        // The acks log synced: a start after the clean close replays no confirmed frame.
        if let Err(e) = lock(&self.core.acks).file.sync_data() {
            log::error!("relink: cannot sync the spool's acks: {e}");
        }
        if let Err(e) = self.core.close() {
            log::error!("relink: cannot close the spool: {e}");
        }
        lock(&self.core.w).shut = true;
        lock(&self.core.w).stage = None;
        // Closing the file lets the `flock` go.
        lock(&self.core.lock).take();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shut();
    }
}

/// The spool's thread, until the store goes: asleep until there is work, then `gather` later
/// (the group's interval, or a millisecond for the numbers that left, so that a round takes
/// many), a flush.
fn flusher(core: Arc<Core>, gather: Duration) {
    let (m, cv) = &core.wake;
    loop {
        {
            let mut wake = lock(m);
            while !wake.work && !wake.stopped {
                wake = cv.wait(wake).unwrap_or_else(|e| e.into_inner());
            }
            let (mut wake, _) = cv
                .wait_timeout_while(wake, gather, |w| !w.stopped)
                .unwrap_or_else(|e| e.into_inner());
            if wake.stopped {
                return;
            }
            wake.work = false;
        }
        core.flush();
    }
}

#[cfg(test)]
mod tests;
