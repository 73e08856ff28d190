//! Under [`Durability::OsWriteBack`](crate::Durability::OsWriteBack) and
//! [`Durability::Group`](crate::Durability::Group), where the callers put their records before
//! they are written to a segment: the `stage` file of the spool's directory, [`STAGE`] bytes,
//! its space reserved (`fallocate`) and mapped shared once, at open. A record copied there is in
//! the kernel's page cache, so it outlives the process; the mapping's pages stay mapped and
//! writable, so a copy costs no system call and (but after the kernel writes the file back, a
//! few times a minute) no page fault.
//!
//! The stage is written to the current segment (one `pwrite`) by the spool's thread at each
//! tick, or by the caller that finds it full, and then begins again at its start. Its records
//! are read at open from its start, for as long as each passes its check and has a number
//! greater than the one before: what follows the last record written since the stage began
//! again is older (lower numbers) or torn.

use std::path::Path;

use bytes::Bytes;
use fs4::fs_std::FileExt as _;
use memmap2::MmapMut;

use super::record::{self, Record};
use crate::io::ffi;

/// The stage's size: records of a call that need more are written to the segment at once.
/// Large, so that each write of the stage to a segment is large: the kernel fills a segment's
/// page cache in larger folios and spends less per byte on it (against 64 KiB, the spool's
/// bench measures about a quarter less CPU per 1 KiB frame under `Group`, in the process and in
/// the caller alike; docs/benchmarks.md, "Spool").
pub(crate) const STAGE: usize = 1024 * 1024;

/// The mapped `stage` file and how much of it holds records not yet written to a segment.
#[derive(Debug)]
pub(super) struct Stage {
    map: MmapMut,
    len: usize,
}

impl Stage {
    /// Opens the stage in `dir` (made, its space reserved, when missing; `None` when it is
    /// missing and `make` is false) and reads the records it holds, which it keeps.
    pub(super) fn open(dir: &Path, make: bool) -> Result<Option<(Stage, Vec<Record>)>, String> {
        let path = dir.join("stage");
        if !make && !path.exists() {
            return Ok(None);
        }
        let err = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
        let file = super::private()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| err("cannot open", e))?;
        file.allocate(STAGE as u64)
            .map_err(|e| err("cannot reserve space for", e))?;
        let map = ffi::map_file(&file, 0, STAGE).map_err(|e| err("cannot map", e))?;
        let (records, len) = record::decode_rising(&Bytes::copy_from_slice(&map[..]));
        Ok(Some((Stage { map, len }, records)))
    }

    /// Keeps only the records numbered past `seq` (those before are in a segment already),
    /// moved to the stage's start.
    pub(super) fn keep_after(&mut self, seq: u64, records: &[Record]) {
        let mut from = 0;
        for r in records.iter().take_while(|r| r.seq <= seq) {
            from += record::size(&r.frame);
        }
        if from > 0 {
            self.map.copy_within(from..self.len, 0);
            let len = self.len - from;
            self.map[len..self.len].fill(0);
            self.len = len;
        }
    }

    /// The records not yet written to a segment.
    pub(super) fn staged(&self) -> &[u8] {
        &self.map[..self.len]
    }

    /// `need` bytes after the staged records, if the stage has room for them.
    pub(super) fn room(&mut self, need: usize) -> Option<&mut [u8]> {
        let end = self.len.checked_add(need).filter(|&e| e <= STAGE)?;
        Some(&mut self.map[self.len..end])
    }

    /// Counts `n` more bytes as staged (written through [`room`](Stage::room)).
    pub(super) fn grow(&mut self, n: usize) {
        self.len += n;
    }

    /// Keeps the first `len` staged bytes; what was past them becomes zeros, so a start does
    /// not read records taken back.
    pub(super) fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.map[len..self.len].fill(0);
            self.len = len;
        }
    }

    /// Begins again at the start (the staged records are in a segment now): the first
    /// record's header becomes zeros, so a start reads nothing until a record is staged.
    pub(super) fn clear(&mut self) {
        let head = self.len.min(record::HEADER);
        self.map[..head].fill(0);
        self.len = 0;
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}
