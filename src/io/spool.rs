//! The spool on disk: a log of segment files holding every frame admitted by `send` until it
//! leaves (confirmed, or abandoned and reported), an acks log of the sequence numbers that
//! left, a `stage` file where records wait for their write to a segment (under
//! [`Durability::OsWriteBack`] and [`Durability::Group`]), a `LOCK` file held with `flock`
//! while a link uses the directory, and a `VERSION` file.
//!
//! Who does what:
//! - the caller of `send` appends the frame's record under the writer's lock and, by the
//!   sync policy, writes and `fdatasync`s it ([`Durability::EveryFrame`]) or copies it into
//!   the stage, a shared mapping of the `stage` file ([`Durability::OsWriteBack`],
//!   [`Durability::Group`], see [`stage`]): there it is in the kernel's page cache when the
//!   call returns, and outlives the process. A caller that finds the stage full writes it to
//!   the segment first. Then it offers the frame to the intake, and takes the record back if
//!   the intake refuses it (its number is then not used), so numbers follow the intake's
//!   order;
//! - the IO thread never touches the disk: its [`Ledger`] gives each frame it takes from the
//!   intake the next number (those recovered at open first), learns which frames left, and
//!   hands their numbers to `left`;
//! - the spool's own thread (the flusher), every tick, writes the stage to the segment and,
//!   under `Group`, `fdatasync`s the segment, appends what left to the acks log, and deletes
//!   segments whose frames all left.
//!
//! At open, the segments are read in order; each record is checked by its CRC-32C, and past
//! one that fails the reading resumes at the next whole record. Each segment's seal (or, for
//! one without, the next segment's first number, the stage, or the clean close's bound) says
//! which numbers it must hold: those missing are reported as frames possibly lost, and the
//! bytes that failed as cut, but for a torn tail the last run's death explains. Then
//! the stage's records with numbers past the segments' are recovered too; they stay staged,
//! and the run's new segment begins with them.

mod ledger;
mod marks;
pub(crate) mod record;
mod stage;

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fs4::fs_std::FileExt as _;

pub(crate) use ledger::Ledger;
use marks::{Marks, MarksFile};
use record::{Marker, Ranges};
use stage::Stage;

use crate::core::batch::Batch;
use crate::spool::{Durability, Spool};

/// The format this relink writes and reads. Format 1 has no stage, format 2 no markers, format
/// 3 no seals; a directory at any of them is read and marked 4, so that a relink that reads an
/// older format only refuses it once it may hold what that format has not.
pub(crate) const VERSION: u32 = 4;

/// The acks log is written again, compacted, once it is this large.
const ACKS_COMPACT: u64 = 64 * 1024;

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
    /// When the machine went down while the last run held the spool (a power cut, a kernel
    /// crash: its last marker is of another boot and not of a clean close), the numbers that
    /// run may have handed out of which no record survived: how many at most, and from the
    /// first to one past the last.
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
    done: Ranges,
    file: File,
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
}

fn io_err(what: &str, path: &Path, e: io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes the `numbers` file of `dir` whole with `bound`, synced, through a file renamed over
/// it: after a crash it is the old bound or the new one, never torn.
fn write_reserved(dir: &Path, bound: u64) -> Result<(), String> {
    let tmp = dir.join("numbers.tmp");
    let path = dir.join("numbers");
    let mut f = File::create(&tmp).map_err(|e| io_err("cannot make", &tmp, e))?;
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
        fs::create_dir_all(&dir).map_err(|e| io_err("cannot make", &dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock_file = OpenOptions::new()
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
            recovered.cut_bytes += (data.len() - good) as u64;
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
        // What each segment must hold, against what it holds: frames possibly lost to damage
        // (numbers that did not leave), and bytes cut that are damage.
        let closed_run = marker.as_ref().filter(|m| m.closed);
        let machine_down = marker
            .as_ref()
            .is_some_and(|m| boot.is_empty() || m.boot != boot);
        let mut damaged = Ranges::default();
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
                // Where the numbers of an unsealed segment end: the next segment's first, the
                // first staged record (the stage follows the last segment), or the clean
                // close's bound; else (the last segment of a run that did not close cleanly)
                // at its last whole record.
                let end = if version < VERSION {
                    None
                } else if !last {
                    read.get(k + 1).map(|(f, ..)| *f)
                } else if let Some(r) = staged.first() {
                    Some(r.seq)
                } else {
                    closed_run.map(|m| m.bound)
                };
                if let Some(end) = end {
                    let from = seg.records.last().map_or(*first, |r| r.seq + 1);
                    expected.insert(from, end);
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
            // A torn tail is damage unless the last run's death explains it: under every
            // policy a process's death (a write cut short: its records are in the stage, or
            // under `EveryFrame` its call never returned), and under `EveryFrame` a power cut
            // too. What a power cut took under the other policies is counted.
            let tail = len - seg.end as u64;
            let explained = last
                && closed_run.is_none()
                && (!machine_down || marker.as_ref().is_some_and(|m| m.every_frame));
            let cut = seg.corrupt + if explained { 0 } else { tail };
            if cut > 0 || lost > 0 {
                log::warn!(
                    "relink: spool segment {}: {cut} bytes failed their check; {lost} frames \
                     possibly lost",
                    path.display()
                );
            }
            recovered.cut_bytes += cut;
        }
        for (lo, hi) in damaged.iter() {
            next_seq = next_seq.max(hi);
            // Reported once: from now on they count as left.
            done.insert(lo, hi);
        }
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
            }
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
        let file = Core::new_segment(&path)?;
        // What the run's markers say of it (the first written by `Core::mark_start`, before
        // any number is handed out). Its first number is the first staged record's when the
        // last run's stage is carried over and cannot be synced (`Core::carry`).
        let run = Marker {
            id: 0,
            bound: next_seq,
            first,
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
        // The acks log, compacted: what is below the oldest kept frame need not be said.
        let floor = closed.front().map_or(next_seq, |(f, _)| *f);
        done.prune(floor);
        let acks = Core::write_acks(&dir, &done)?;
        // A number below the run's first that no record holds will never leave (reserved
        // and not handed out, or lost with the page cache at a power cut): it counts as left,
        // so that the segment around it can go once its own frames have. Kept in memory only
        // (the next start finds the same gaps), so that a start on a full disk writes no more
        // than the acks it read.
        Core::gaps_left(&mut held, next_seq, &mut done);
        sync_dir(&dir).map_err(|e| io_err("cannot sync", &dir, e))?;
        let len = acks
            .metadata()
            .map_err(|e| io_err("cannot read", &acks_path, e))?
            .len();
        let wake = (Mutex::new(SyncWake::default()), Condvar::new());
        let segment_bytes = spool.get_segment_bytes().max(record::HEADER as u64);
        let core = Arc::new(Core {
            dir,
            durability,
            segment_bytes,
            w: Mutex::new(SegmentWriter {
                file: Arc::new(file),
                first,
                pos: 0,
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
                file: acks,
                len,
            }),
            wake,
            lock: Mutex::new(Some(lock_file)),
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
    fn new_segment(path: &Path) -> Result<File, String> {
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err("cannot make", path, e))
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
            ..w.run.clone()
        };
        match lock(&self.marks).write(&marker) {
            Ok(id) => {
                w.marks.synced(id, bound);
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
                Ok(v @ 1..=3) => Core::write_version(dir).map(|()| v),
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
        let mut f = File::create(&tmp).map_err(|e| io_err("cannot make", &tmp, e))?;
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
    /// only; a torn tail is cut; an unsealed one (the segment a run left open) is sealed with
    /// the numbers it holds now (those it lacks were reported). Each change is synced.
    fn repair(path: &Path, len: u64, seg: &record::Segment) -> Result<(), String> {
        let mut holds = Ranges::default();
        holds.extend(&mut seg.records.iter().map(|r| r.seq).collect::<Vec<_>>());
        let seal = record::Seal(holds.iter().collect());
        if seg.corrupt > 0 {
            let tmp = path.with_extension("tmp");
            let mut buf = Vec::new();
            for r in &seg.records {
                record::encode(&mut buf, r.seq, r.deadline_ms, &r.frame);
            }
            seal.encode(&mut buf);
            let mut f = File::create(&tmp).map_err(|e| io_err("cannot make", &tmp, e))?;
            f.write_all(&buf)
                .and_then(|()| f.sync_all())
                .map_err(|e| io_err("cannot write", &tmp, e))?;
            return fs::rename(&tmp, path).map_err(|e| io_err("cannot rename", &tmp, e));
        }
        if seg.seal.is_some() && seg.end as u64 == len {
            return Ok(());
        }
        let f = OpenOptions::new()
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
            ..w.run.clone()
        };
        let id = lock(&self.marks).write(&marker)?;
        w.marks.synced(id, next);
        Ok(())
    }

    /// Writes the acks log anew with `done` (through a file renamed over it) and opens it
    /// for appending.
    fn write_acks(dir: &Path, done: &Ranges) -> Result<File, String> {
        let tmp = dir.join("acks.tmp");
        let path = dir.join("acks");
        let mut buf = Vec::new();
        for (lo, hi) in done.iter() {
            record::encode_ack(&mut buf, lo, hi);
        }
        let mut f = File::create(&tmp).map_err(|e| io_err("cannot make", &tmp, e))?;
        f.write_all(&buf)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("cannot write", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| io_err("cannot rename", &tmp, e))?;
        OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io_err("cannot open", &path, e))
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
        if let Err(e) = self.roll_if_full(&mut w) {
            return Err((frame, e));
        }
        if let Err(e) = self
            .reserve(&mut w, seq + 1)
            .and_then(|()| self.mark_for(&mut w, seq + 1))
        {
            return Err((frame, e));
        }
        if frame.len() > record::MAX_FRAME {
            return Err((frame, "frame too large for the spool".into()));
        }
        let mark = w.pos + w.unwritten();
        if let Err(e) = w
            .append(seq, deadline_ms, std::iter::once(&frame[..]), None)
            .and_then(|()| self.persist(&mut w))
        {
            w.rollback(mark);
            return Err((frame, format!("cannot write to the spool: {e}")));
        }
        match offer(&mut frame) {
            Ok(t) => {
                w.next_seq += 1;
                Ok(Ok((seq, t)))
            }
            Err(e) => {
                w.rollback(mark);
                Ok(Err((frame, e)))
            }
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
        self.roll_if_full(&mut w)?;
        let first = w.next_seq;
        self.reserve(&mut w, first + frames.len() as u64)?;
        self.mark_for(&mut w, first + frames.len() as u64)?;
        if frames.iter().any(|f| f.len() > record::MAX_FRAME) {
            return Err("frame too large for the spool".into());
        }
        let mark = w.pos + w.unwritten();
        let mut ends = Vec::new();
        let n = frames.len();
        if let Err(e) = w
            .append(first, deadline_ms, frames.iter(), Some(&mut ends))
            .and_then(|()| self.persist(&mut w))
        {
            w.rollback(mark);
            return Err(format!("cannot write to the spool: {e}"));
        }
        match offer(frames) {
            Ok((k, r)) => {
                if k < n {
                    w.rollback(if k == 0 { mark } else { ends[k - 1] });
                }
                w.next_seq += k as u64;
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
        w.seal()
            .and_then(|()| match self.durability {
                Durability::EveryFrame => w.file.sync_data(),
                _ => Ok(()),
            })
            .map_err(|e| format!("cannot write to the spool: {e}"))?;
        let path = self.dir.join(segment_name(w.next_seq));
        let file = Core::new_segment(&path)?;
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
        w.pos = 0;
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
    /// meets the error) and, under `Group`, synced, the numbers that left in the acks log,
    /// segments whose frames all left deleted.
    ///
    /// The acks log is not synced: a record of it lost at a power cut makes a frame that had
    /// left be sent once more, never a frame lost.
    fn flush(&self) {
        let (file, unsynced, dir_dirty, sync, mark) = {
            let mut w = lock(&self.w);
            w.told = false;
            if let Err(e) = w.write() {
                log::error!("relink: cannot write to the spool: {e}");
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
                    ..w.run.clone()
                }
            });
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
                Ok(id) => w.marks.synced(id, marker.bound),
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
            let mut buf = Vec::new();
            for (lo, hi) in fresh.iter() {
                record::encode_ack(&mut buf, lo, hi);
                acks.done.insert(lo, hi);
            }
            match acks.file.write_all(&buf) {
                Ok(()) => acks.len += buf.len() as u64,
                Err(e) => log::error!("relink: cannot write the spool's acks: {e}"),
            }
        }
        // Segments whose every frame left.
        let gone: Vec<PathBuf> = {
            let mut w = lock(&self.w);
            let mut gone = Vec::new();
            while let Some(&(first, _)) = w.closed.front() {
                let next = w.closed.get(1).map_or(w.first, |(f, _)| *f);
                if acks.done.first_absent(first) < next {
                    break;
                }
                if let Some((_, path)) = w.closed.pop_front() {
                    gone.push(path);
                }
            }
            gone
        };
        for path in &gone {
            let _ = fs::remove_file(path);
        }
        if acks.len > ACKS_COMPACT {
            let floor = {
                let w = lock(&self.w);
                w.closed.front().map_or(w.first, |(f, _)| *f)
            };
            acks.done.prune(floor);
            match Core::write_acks(&self.dir, &acks.done) {
                Ok(f) => {
                    acks.len = f.metadata().map(|m| m.len()).unwrap_or(0);
                    acks.file = f;
                }
                Err(e) => log::error!("relink: {e}"),
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
    fn seal(&mut self) -> io::Result<()> {
        self.write()?;
        let run = (self.from < self.next_seq).then_some((self.from, self.next_seq));
        let seal = record::Seal(self.carried.into_iter().chain(run).collect());
        seal.encode(&mut self.buf);
        self.write()
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
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all_at(&self.buf, self.pos) {
            // A part may be on the file: the buffer stays the truth.
            let _ = self.file.set_len(self.pos);
            return Err(e);
        }
        self.pos += self.buf.len() as u64;
        self.buf.clear();
        self.written = true;
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
