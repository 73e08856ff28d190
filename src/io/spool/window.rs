//! Under [`Durability::OsWriteBack`](crate::Durability::OsWriteBack) and
//! [`Durability::Group`](crate::Durability::Group), the part of the current segment the callers
//! write their records into: a shared mapping of the file, so a record is in the kernel's page
//! cache (and outlives this process) the moment it is copied there; under `Group` the spool's
//! thread makes it durable with the file's `fdatasync`, under `OsWriteBack` the kernel writes
//! it back in its own time.
//!
//! The file's space is reserved before it is mapped: `fallocate` (through `fs4`) sets the length
//! and reserves the blocks of the whole window, so a full disk is an error at the call that
//! needs the space, never a `SIGBUS` at a write into the mapping. A window is [`WINDOW`] bytes
//! (at most a segment's size), or on a disk without room for that, just what the records need,
//! in whole [`GRAIN`]s. The reserved space past the last record holds zeros; the segment is
//! trimmed to its records' end at a roll-over and at a clean close, and a segment left at its
//! reserved length by a crash is a whole number of grains long, which is how a start tells the
//! zeros never written from a torn record ([`record::torn_end`](super::record::torn_end)).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use fs4::fs_std::FileExt as _;
use memmap2::MmapMut;

use super::record::GRAIN;
use crate::io::ffi;

/// The bytes a window maps (and reserves on disk) when the disk has room.
pub(crate) const WINDOW: u64 = 16 * 1024 * 1024;

/// The mapped tail of a segment: the mapping, if one is made, and where it begins in the file.
#[derive(Debug)]
pub(super) struct Window {
    map: Option<(MmapMut, u64)>,
    /// The bytes to map at a time (grains).
    bytes: u64,
}

impl Window {
    /// No mapping yet; windows of [`WINDOW`] bytes, or of the segment's size if that is less.
    pub(super) fn new(segment_bytes: u64) -> Window {
        Window {
            map: None,
            bytes: WINDOW.min(segment_bytes.div_ceil(GRAIN) * GRAIN),
        }
    }

    /// The bytes `pos..pos + need` of `file` (whose records end at `pos`), mapped: the
    /// mapping is made (the space reserved first) when it does not cover them yet. `Err` when
    /// the disk has no room for them: nothing is mapped then, and the file keeps the length
    /// it had.
    pub(super) fn room(&mut self, file: &File, pos: u64, need: u64) -> io::Result<&mut [u8]> {
        let end = pos + need;
        let covered = self
            .map
            .as_ref()
            .is_some_and(|(map, start)| *start <= pos && end <= start + map.len() as u64);
        if !covered {
            self.remap(file, pos, end)?;
        }
        match self.map.as_mut() {
            Some((map, start)) => {
                let at = (pos - *start) as usize;
                Ok(&mut map[at..at + need as usize])
            }
            None => Err(io::Error::other("the spool's segment is not mapped")),
        }
    }

    /// Maps the file from the grain `pos` lies in to `end` at least, a window's worth when
    /// the disk has room.
    fn remap(&mut self, file: &File, pos: u64, end: u64) -> io::Result<()> {
        let had = self.end().unwrap_or(pos);
        // The length changes only with no mapping alive.
        self.map = None;
        let start = pos / GRAIN * GRAIN;
        let tight = (end - start).div_ceil(GRAIN) * GRAIN;
        let wide = tight.max(self.bytes);
        let len = match reserve(file, pos, start + wide) {
            Ok(()) => Ok(wide),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && wide > tight => {
                let _ = file.set_len(had);
                reserve(file, pos, start + tight).map(|()| tight)
            }
            Err(e) => Err(e),
        }
        .inspect_err(|_| {
            let _ = file.set_len(had);
        })?;
        self.map = Some((ffi::map_segment(file, start, len as usize)?, start));
        Ok(())
    }

    /// Zeroes the mapped bytes from `from` to `to`: records taken back leave nothing a start
    /// would read.
    pub(super) fn zero(&mut self, from: u64, to: u64) {
        if let Some((map, start)) = self.map.as_mut() {
            let lo = from.saturating_sub(*start) as usize;
            let hi = (to.saturating_sub(*start) as usize).min(map.len());
            if lo < hi {
                map[lo..hi].fill(0);
            }
        }
    }

    /// Drops the mapping and cuts the reserved space off the file: its records end at `pos`.
    pub(super) fn trim(&mut self, file: &File, pos: u64) -> io::Result<()> {
        self.map = None;
        file.set_len(pos)
    }

    /// Where the mapping ends in the file.
    fn end(&self) -> Option<u64> {
        self.map.as_ref().map(|(m, s)| s + m.len() as u64)
    }
}

/// Sets `file`'s length to at least `len` with its blocks reserved. On a file system without
/// `fallocate`, zeros written from `pos` (where the records end) reserve them instead.
fn reserve(file: &File, pos: u64, len: u64) -> io::Result<()> {
    match file.allocate(len) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            let zeros = vec![0u8; 64 * 1024];
            let mut at = pos;
            while at < len {
                let n = (len - at).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            Ok(())
        }
        r => r,
    }
}
