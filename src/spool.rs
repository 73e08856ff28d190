//! Spool and Durability: the public settings of a link's durable outbox on disk
//! (`Builder::spool`). The store itself is `io::spool`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// When a frame admitted by `send` is made durable on disk.
///
/// A frame is written to the spool before its `send` returns `Ok`; the policy says how far
/// towards the disk it has gone by then.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{Durability, Spool};
///
/// let spool = Spool::new("/var/lib/collector/spool")
///     .durability(Durability::Group(Duration::from_millis(5)));
/// assert_eq!(spool.get_durability(), Durability::Group(Duration::from_millis(5)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Every frame is written and `fdatasync`ed before its `send` returns: nothing whose
    /// `send` returned `Ok` is lost at a crash or a power cut. Costs one `fdatasync` per
    /// frame (about a quarter of a millisecond here, far more on an SD card): for a few
    /// frames a second. The default.
    #[default]
    EveryFrame,
    /// Group commit: `send` copies the frame's record into the spool's stage, a shared
    /// mapping of a small file (1 MiB), and returns, with no system call; a thread of the
    /// spool writes the stage to the spool's segment and `fdatasync`s it every interval (a
    /// caller that finds the stage full writes it itself). The record is in the operating
    /// system's page cache when `send` returns, so nothing is lost when the process dies (a
    /// kill, an abort, the OOM killer): the next start reads the stage. A power cut or a
    /// kernel crash loses at most the frames of about the last interval, and the next start
    /// reports them: a torn record in a segment is cut and counted
    /// ([`Event::Recovered`](crate::Event::Recovered)'s `cut_bytes`), and the numbers the
    /// lost frames can have had are bounded by the spool's last marker, synced after each
    /// group (`lost_at_most`, `lost_seqs`); a receiver that saw a number there had its frame.
    ///
    /// The stage's space is reserved on disk when the spool opens, so a full disk is a
    /// [`SendError::Spool`](crate::error::SendError::Spool) at the call that writes the stage,
    /// as under the other policies.
    Group(Duration),
    /// Each frame's record is copied into the spool's stage before `send` returns, as under
    /// `Group`, and written to the segment when the stage fills or the spool's thread runs,
    /// never `fdatasync`ed by relink while the link lives (a clean close syncs it): nothing is
    /// lost when the process dies, and what the kernel had not written back yet (about 30 s
    /// on Linux by default) is lost at a power cut or a kernel crash, reported at the next
    /// start as a range of up to 65 536 numbers (`Event::Recovered`'s `lost_seqs`). After a
    /// power cut, damage to the newest segment past what its last marker the disk kept says
    /// is not found (the guide's "Spool" section, "What a start finds lost to damage").
    OsWriteBack,
}

impl Durability {
    /// The interval of [`Durability::group`]: 5 ms. Measured with
    /// `cargo bench --bench spool -- --rates --only memory,group --size 1024 --interval <ms>`
    /// (docs/benchmarks.md, "The group commit's interval"): from 1 to 50 ms the rate stays at
    /// 0.49–0.57 of a link without a spool and the CPU per 1 KiB frame at 1.0–1.4 µs (against
    /// 0.6–0.7 µs without one), within the runs' noise; a power cut takes about an interval's
    /// frames, so the default is short, and one `fdatasync` of the segment and one of the
    /// `marks` file every 5 ms cost no frame rate that the runs could tell.
    pub const DEFAULT_GROUP_INTERVAL: Duration = Duration::from_millis(5);

    /// [`Durability::Group`] with [`DEFAULT_GROUP_INTERVAL`](Durability::DEFAULT_GROUP_INTERVAL).
    pub const fn group() -> Durability {
        Durability::Group(Durability::DEFAULT_GROUP_INTERVAL)
    }
}

/// A link's spool: a directory that holds every frame admitted by `send` until it is
/// confirmed (or abandoned and reported), replayed first at the next start. Given to
/// [`Builder::spool`](crate::Builder::spool); see the guide's "Spool" section.
///
/// One directory per link; two processes (or two links) cannot use one at a time: the
/// second `build()` fails with [`ConfigError::Spool`](crate::error::ConfigError::Spool).
///
/// The directory and its files are the owner's alone (0700, 0600) whatever the umask: a
/// directory that others can read, enter or write is made 0700 at the start, with a warning
/// (`log::warn!`), or refused with `ConfigError::Spool` when it cannot be.
///
/// A full disk refuses the sends that must write
/// ([`SendError::Spool`](crate::error::SendError::Spool)) and is told by an
/// [`Event::Error`](crate::Event::Error) with
/// [`LinkError::Spool`](crate::error::LinkError::Spool); the space of confirmed frames is
/// freed while the link lives, and a second event says when the spool writes again.
///
/// # Examples
/// ```
/// use relink::{Durability, Link, Spool};
///
/// # let dir = std::env::temp_dir().join(format!("relink-doc-spool-{}", std::process::id()));
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
///     .spool(Spool::new(&dir).durability(Durability::OsWriteBack))
///     .build()?;
/// let seq = link.send_numbered(|seq| format!("reading {seq}"))?;
/// assert_eq!(seq, 0); // a new spool numbers from 0
/// link.close(std::time::Duration::from_millis(50));
/// # drop(link);
/// # let _ = std::fs::remove_dir_all(&dir);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spool {
    dir: PathBuf,
    durability: Durability,
    segment_bytes: u64,
}

/// The default size at which the spool starts a new segment file.
pub(crate) const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

impl Spool {
    /// A spool in `dir` (made if missing), with [`Durability::EveryFrame`] and segments of
    /// 64 MiB.
    pub fn new(dir: impl AsRef<Path>) -> Spool {
        Spool {
            dir: dir.as_ref().to_path_buf(),
            durability: Durability::default(),
            segment_bytes: SEGMENT_BYTES,
        }
    }

    /// When a frame is made durable. Defaults to [`Durability::EveryFrame`].
    pub fn durability(mut self, durability: Durability) -> Spool {
        self.durability = durability;
        self
    }

    /// The size at which a segment file is closed and a new one begun; a segment is deleted
    /// once every frame in it is confirmed or reported. Defaults to 64 MiB.
    pub fn segment_bytes(mut self, bytes: u64) -> Spool {
        self.segment_bytes = bytes;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sync policy.
    pub fn get_durability(&self) -> Durability {
        self.durability
    }

    pub(crate) fn get_segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// How long the spool's own thread gathers work once woken: the group commit's interval,
    /// else a millisecond of frames that left.
    pub(crate) fn tick(&self) -> Duration {
        match self.durability {
            Durability::Group(d) => d,
            _ => Duration::from_millis(1),
        }
    }
}
