//! The spool's on-disk records, each checked by a CRC-32C, and the set of sequence numbers
//! that left the spool.
//!
//! A frame's record (little-endian): `len: u32`, `crc: u32`, `seq: u64`, `deadline: u64`
//! (milliseconds since the Unix epoch, 0 for none), then `len` bytes of the frame. The CRC
//! covers everything after itself. A marker (see [`Marker`], kept in the `marks` file) is a
//! record whose deadline has its top bit set (a deadline in milliseconds never has), its own
//! fields in the rest. An acks record: `lo: u64`, `hi: u64` (the sequence numbers `lo..hi` left), `crc: u32` over the two.

use std::collections::BTreeMap;

use bytes::Bytes;

/// The bytes before a frame's own.
pub(crate) const HEADER: usize = 24;

/// The size of an acks record.
pub(crate) const ACK: usize = 20;

/// The largest frame a record holds.
pub(crate) const MAX_FRAME: usize = u32::MAX as usize;

/// The size of a frame's record.
pub(crate) fn size(frame: &[u8]) -> usize {
    HEADER + frame.len()
}

/// Appends the record of one frame to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, seq: u64, deadline_ms: u64, frame: &[u8]) {
    let start = out.len();
    out.resize(start + size(frame), 0);
    encode_into(&mut out[start..], seq, deadline_ms, frame);
}

/// Writes the record of one frame at the start of `out` (at least [`size`] bytes); gives its
/// size.
pub(crate) fn encode_into(out: &mut [u8], seq: u64, deadline_ms: u64, frame: &[u8]) -> usize {
    let end = size(frame);
    out[0..4].copy_from_slice(&(frame.len() as u32).to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..24].copy_from_slice(&deadline_ms.to_le_bytes());
    out[HEADER..end].copy_from_slice(frame);
    let crc = crc32c::crc32c(&out[8..end]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    end
}

/// One record read back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub seq: u64,
    pub deadline_ms: u64,
    pub frame: Bytes,
}

/// A marker's deadline field: this bit, then the marker's flags.
const MARKER: u64 = 1 << 63;
/// The marker was written at a clean close, everything before it synced.
const CLOSED: u64 = 1;
/// The run wrote under `Group`: the marker's bound holds its numbers.
const GROUP: u64 = 2;
/// The run wrote under `EveryFrame`: every number it handed out has its record on disk.
const EVERY_FRAME: u64 = 4;
/// A segment's seal (see [`Seal`]), not a marker.
const SEAL: u64 = 8;
/// With [`SEAL`]: a segment's opening (see [`Seal`]), its first record.
const OPENING: u64 = 16;
/// A marker that says how far its run's records reached the segments (`Marker::written`).
const WRITTEN: u64 = 32;

/// What a run of the spool says of itself (in the `marks` file, see `super::marks`), for the
/// next start to tell a process's death (the page cache kept everything) from the machine's
/// (the records not yet synced are gone), and which numbers the lost records can have had.
/// Written at the run's start, when records reach a segment (under `Group` after each group
/// commit, synced; else not synced: a process's death leaves it in the page cache), and at a
/// clean close.
///
/// Its record: `seq` holds `bound`, the deadline field [`MARKER`] and the flags, the frame
/// `first`, `id`, `written` and `from` (8 bytes each, little-endian), then the boot's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The markers of a spool are numbered, across its runs: the last one written has the
    /// greatest.
    pub id: u64,
    /// Under `Group`, every number the run handed out is below this (the callers stay below
    /// the bound of every marker that can be the last one on disk).
    pub bound: u64,
    /// The first number whose record the run keeps: its first number, or the first of the
    /// records an earlier run staged when they could not be written and synced at its start.
    pub first: u64,
    /// The first number the run handed out (`first` in a marker of an older format).
    pub from: u64,
    /// Every number the run handed out from `first` below this has its record in a segment
    /// (0 in a marker of an older format, which does not say).
    pub written: u64,
    /// The id of the boot the run ran in (`/proc/sys/kernel/random/boot_id`).
    pub boot: Vec<u8>,
    /// Written at a clean close: nothing of the run can be lost any more.
    pub closed: bool,
    /// The run's policy, as far as the next start needs it.
    pub group: bool,
    pub every_frame: bool,
}

impl Marker {
    /// The marker's record, appended to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut frame = Vec::with_capacity(32 + self.boot.len());
        frame.extend_from_slice(&self.first.to_le_bytes());
        frame.extend_from_slice(&self.id.to_le_bytes());
        frame.extend_from_slice(&self.written.to_le_bytes());
        frame.extend_from_slice(&self.from.to_le_bytes());
        frame.extend_from_slice(&self.boot);
        let flags = MARKER
            | WRITTEN
            | if self.closed { CLOSED } else { 0 }
            | if self.group { GROUP } else { 0 }
            | if self.every_frame { EVERY_FRAME } else { 0 };
        encode(out, self.bound, flags, &frame);
    }

    /// The marker a record is, if it is one.
    pub(crate) fn of(r: &Record) -> Option<Marker> {
        let written = r.deadline_ms & WRITTEN != 0;
        let boot_at = if written { 32 } else { 16 };
        if r.deadline_ms & MARKER == 0 || r.deadline_ms & SEAL != 0 || r.frame.len() < boot_at {
            return None;
        }
        let first = u64::from_le_bytes(r.frame[..8].try_into().ok()?);
        let (written, from) = if written {
            (
                u64::from_le_bytes(r.frame[16..24].try_into().ok()?),
                u64::from_le_bytes(r.frame[24..32].try_into().ok()?),
            )
        } else {
            (0, first)
        };
        Some(Marker {
            id: u64::from_le_bytes(r.frame[8..16].try_into().ok()?),
            bound: r.seq,
            first,
            from,
            written,
            boot: r.frame[boot_at..].to_vec(),
            closed: r.deadline_ms & CLOSED != 0,
            group: r.deadline_ms & GROUP != 0,
            every_frame: r.deadline_ms & EVERY_FRAME != 0,
        })
    }
}

/// The last record of a segment once it is closed (at its roll, at a clean close, or by the
/// next start for the segment a run left open): the numbers of the frames it must hold, as
/// ranges, so that a start tells records missing from it (a cut at a record's boundary, an
/// emptied file) from numbers never handed out. Its record: `seq` holds the count, the
/// deadline field [`MARKER`] and [`SEAL`], the frame the ranges (`lo`, `hi`: 8 bytes each,
/// little-endian).
///
/// The same ranges open the segment after it (its first record, with [`OPENING`] too): what
/// the segment before must hold, so that a start finds a segment deleted or lost whole from
/// the file after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Seal(pub Vec<(u64, u64)>);

impl Seal {
    /// The seal's record, appended to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        self.encode_as(out, MARKER | SEAL);
    }

    /// The same ranges as the opening record of the next segment, appended to `out`.
    pub(crate) fn encode_opening(&self, out: &mut Vec<u8>) {
        self.encode_as(out, MARKER | SEAL | OPENING);
    }

    fn encode_as(&self, out: &mut Vec<u8>, flags: u64) {
        let mut frame = Vec::with_capacity(16 * self.0.len());
        let mut count = 0;
        for &(lo, hi) in &self.0 {
            frame.extend_from_slice(&lo.to_le_bytes());
            frame.extend_from_slice(&hi.to_le_bytes());
            count += hi - lo;
        }
        encode(out, count, flags, &frame);
    }

    /// The seal of the numbers the records of `seg` hold.
    pub(crate) fn holding(seg: &Segment) -> Seal {
        let mut holds = Ranges::default();
        holds.extend(&mut seg.records.iter().map(|r| r.seq).collect::<Vec<_>>());
        Seal(holds.iter().collect())
    }

    /// The size of its record.
    pub(crate) fn size(&self) -> usize {
        HEADER + 16 * self.0.len()
    }

    /// The lowest number it names (`u64::MAX` for none).
    pub(crate) fn low(&self) -> u64 {
        self.0.iter().map(|r| r.0).min().unwrap_or(u64::MAX)
    }

    /// The seal a record is, if it is one.
    pub(crate) fn of(r: &Record) -> Option<Seal> {
        Seal::with_flags(r, MARKER | SEAL)
    }

    /// The opening a record is, if it is one.
    pub(crate) fn opening_of(r: &Record) -> Option<Seal> {
        Seal::with_flags(r, MARKER | SEAL | OPENING)
    }

    fn with_flags(r: &Record, flags: u64) -> Option<Seal> {
        if r.deadline_ms != flags || r.frame.len() % 16 != 0 {
            return None;
        }
        let ranges = r
            .frame
            .chunks(16)
            .map(|c| {
                let lo = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
                let hi = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
                (lo, hi)
            })
            .collect();
        Some(Seal(ranges))
    }
}

/// What a segment holds, read with [`read_segment`].
#[derive(Debug, Default)]
pub(crate) struct Segment {
    /// The frames' records that pass their check, in order.
    pub records: Vec<Record>,
    /// Its seal, when it ends with a whole one.
    pub seal: Option<Seal>,
    /// Its opening, when it begins with a whole one: what the segment before it must hold.
    pub opening: Option<Seal>,
    /// Bytes that fail their check between whole records, and for each such stretch before a
    /// frame's record the numbers of the records on either side (`None` before the first).
    pub corrupt: u64,
    pub holes: Vec<(Option<u64>, u64)>,
    /// Where the whole records end: past it, a torn or corrupt tail.
    pub end: usize,
}

/// The record at `at` in `data`, and where it ends, if it is whole and passes its check.
fn record_at(data: &Bytes, at: usize) -> Option<(Record, usize)> {
    let h = data.get(at..at.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes(h[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(h[4..8].try_into().ok()?);
    let end = at.checked_add(HEADER)?.checked_add(len)?;
    if end > data.len() || crc32c::crc32c(&data[at + 8..end]) != crc {
        return None;
    }
    let r = Record {
        seq: u64::from_le_bytes(h[8..16].try_into().ok()?),
        deadline_ms: u64::from_le_bytes(h[16..24].try_into().ok()?),
        frame: data.slice(at + HEADER..end),
    };
    Some((r, end))
}

/// Reads a segment: its records in order, and past a record that fails its check, the next
/// whole one (found by trying each later offset; its number must be above the last good
/// one's), so that one damaged record costs only itself. A seal ends the reading.
pub(crate) fn read_segment(data: &Bytes) -> Segment {
    let mut s = Segment::default();
    let mut at = 0;
    let mut last: Option<u64> = None;
    if let Some((r, end)) = record_at(data, 0) {
        if let Some(opening) = Seal::opening_of(&r) {
            s.opening = Some(opening);
            at = end;
        }
    }
    while at < data.len() {
        if let Some((r, end)) = record_at(data, at) {
            if let Some(seal) = Seal::of(&r) {
                s.seal = Some(seal);
                at = end;
                break;
            }
            last = Some(r.seq);
            s.records.push(r);
            at = end;
            continue;
        }
        let next = (at + 1..data.len().saturating_sub(HEADER - 1)).find_map(|p| {
            let (r, _) = record_at(data, p)?;
            if Seal::of(&r).is_some() {
                return Some((p, None));
            }
            last.map_or(true, |l| r.seq > l).then_some((p, Some(r.seq)))
        });
        match next {
            Some((p, seq)) => {
                s.corrupt += (p - at) as u64;
                // Before a seal, the seal says what is missing.
                if let Some(seq) = seq {
                    s.holes.push((last, seq));
                }
                at = p;
            }
            None => break,
        }
    }
    s.end = at;
    s
}

/// Reads the records of a segment in order; stops at the first that is torn or fails its
/// check. Gives the records and the length of the good prefix.
pub(crate) fn decode_all(data: &Bytes) -> (Vec<Record>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while data.len() - at >= HEADER {
        let h = &data[at..at + HEADER];
        let len = u32::from_le_bytes(h[0..4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(h[4..8].try_into().unwrap_or_default());
        if data.len() - at - HEADER < len {
            break;
        }
        let end = at + HEADER + len;
        if crc32c::crc32c(&data[at + 8..end]) != crc {
            break;
        }
        out.push(Record {
            seq: u64::from_le_bytes(h[8..16].try_into().unwrap_or_default()),
            deadline_ms: u64::from_le_bytes(h[16..24].try_into().unwrap_or_default()),
            frame: data.slice(at + HEADER..end),
        });
        at = end;
    }
    (out, at)
}

/// Reads the records of a stage in order, for as long as each passes its check and has a
/// greater number than the one before. Gives the records and where the last ends.
pub(crate) fn decode_rising(data: &Bytes) -> (Vec<Record>, usize) {
    let (mut records, _) = decode_all(data);
    let rising = records
        .windows(2)
        .position(|w| w[1].seq <= w[0].seq)
        .map_or(records.len(), |i| i + 1);
    records.truncate(rising);
    let end = records.iter().map(|r| size(&r.frame)).sum();
    (records, end)
}

/// Appends an acks record for `lo..hi`.
pub(crate) fn encode_ack(out: &mut Vec<u8>, lo: u64, hi: u64) {
    let start = out.len();
    out.extend_from_slice(&lo.to_le_bytes());
    out.extend_from_slice(&hi.to_le_bytes());
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// The `numbers` file: the bound below which every number handed out lies, and its CRC.
pub(crate) fn encode_reserved(bound: u64) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&bound.to_le_bytes());
    let crc = crc32c::crc32c(&out[..8]);
    out[8..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The bound of a `numbers` file, or `None` when it fails its check.
pub(crate) fn decode_reserved(data: &[u8]) -> Option<u64> {
    let data: &[u8; 12] = data.try_into().ok()?;
    let crc = u32::from_le_bytes(data[8..].try_into().ok()?);
    (crc32c::crc32c(&data[..8]) == crc)
        .then(|| u64::from_le_bytes(data[..8].try_into().unwrap_or_default()))
}

/// Reads acks records into `set` up to the first that fails its check; gives the length of
/// the good prefix.
pub(crate) fn decode_acks(data: &[u8], set: &mut Ranges) -> usize {
    let mut at = 0;
    while data.len() - at >= ACK {
        let r = &data[at..at + ACK];
        let crc = u32::from_le_bytes(r[16..20].try_into().unwrap_or_default());
        if crc32c::crc32c(&r[..16]) != crc {
            break;
        }
        let lo = u64::from_le_bytes(r[0..8].try_into().unwrap_or_default());
        let hi = u64::from_le_bytes(r[8..16].try_into().unwrap_or_default());
        set.insert(lo, hi);
        at += ACK;
    }
    at
}

/// Disjoint ranges of sequence numbers, merged as they touch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `lo..hi`.
    pub(crate) fn insert(&mut self, mut lo: u64, mut hi: u64) {
        if lo >= hi {
            return;
        }
        // A range that starts at or before `lo` and reaches it.
        if let Some((&l, &h)) = self.0.range(..=lo).next_back() {
            if h >= lo {
                lo = l;
                hi = hi.max(h);
                self.0.remove(&l);
            }
        }
        // Ranges that start inside `lo..=hi`.
        while let Some((&l, &h)) = self.0.range(lo..=hi).next() {
            hi = hi.max(h);
            self.0.remove(&l);
        }
        self.0.insert(lo, hi);
    }

    /// Adds sequence numbers given one by one, in any order.
    pub(crate) fn extend(&mut self, seqs: &mut [u64]) {
        seqs.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        for &s in seqs.iter() {
            run = match run {
                Some((lo, hi)) if s == hi => Some((lo, hi + 1)),
                Some((lo, hi)) if s < hi => Some((lo, hi)),
                Some((lo, hi)) => {
                    self.insert(lo, hi);
                    Some((s, s + 1))
                }
                None => Some((s, s + 1)),
            };
        }
        if let Some((lo, hi)) = run {
            self.insert(lo, hi);
        }
    }

    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.0
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, &h)| seq < h)
    }

    /// The first number from `floor` on that is not in the set.
    pub(crate) fn first_absent(&self, floor: u64) -> u64 {
        match self.0.range(..=floor).next_back() {
            Some((_, &h)) if h > floor => h,
            _ => floor,
        }
    }

    /// One past the highest number in the set.
    pub(crate) fn end(&self) -> u64 {
        self.0.values().next_back().copied().unwrap_or(0)
    }

    /// Forgets what lies below `floor` (except what tells where the numbers reached).
    pub(crate) fn prune(&mut self, floor: u64) {
        let below: Vec<u64> = self.0.range(..floor).map(|(&l, _)| l).collect();
        let keep_last = self.0.len() == below.len();
        for (i, l) in below.iter().enumerate() {
            let h = self.0[l];
            if h <= floor && !(keep_last && i + 1 == below.len()) {
                self.0.remove(l);
            }
        }
    }

    /// The numbers of `lo..hi` not in the set: how many, and from the first to one past the
    /// last (empty when there is none).
    pub(crate) fn absent(&self, lo: u64, hi: u64) -> (u64, std::ops::Range<u64>) {
        let (mut count, mut first, mut end) = (0, None, lo);
        let mut at = lo;
        while at < hi {
            let next = self.first_absent(at);
            if next >= hi {
                break;
            }
            let upto = self.0.range(next..hi).next().map_or(hi, |(&l, _)| l);
            count += upto - next;
            first.get_or_insert(next);
            end = upto;
            at = upto;
        }
        (count, first.map_or(0..0, |f| f..end))
    }

    /// The numbers of `lo..hi` not in the set, as ranges.
    pub(crate) fn missing(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = lo;
        while at < hi {
            let next = self.first_absent(at);
            if next >= hi {
                break;
            }
            let upto = self.0.range(next..hi).next().map_or(hi, |(&l, _)| l);
            out.push((next, upto));
            at = upto;
        }
        out
    }

    /// How many numbers the set holds, and from the first to one past the last (empty when
    /// it holds none).
    pub(crate) fn count_span(&self) -> (u64, std::ops::Range<u64>) {
        let count = self.0.iter().map(|(l, h)| h - l).sum();
        let first = self.0.keys().next().copied();
        (count, first.map_or(0..0, |f| f..self.end()))
    }

    /// The ranges, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&l, &h)| (l, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_a_torn_tail_stops_the_reading() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, 0, b"hello");
        encode(&mut buf, 8, 123, b"");
        let good = buf.len();
        encode(&mut buf, 9, 0, b"torn away");
        buf.truncate(buf.len() - 3);
        let (records, at) = decode_all(&Bytes::from(buf));
        assert_eq!(at, good);
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].seq, &records[0].frame[..]), (7, &b"hello"[..]));
        assert_eq!((records[1].seq, records[1].deadline_ms), (8, 123));
    }

    #[test]
    fn a_flipped_bit_fails_the_check() {
        let mut buf = Vec::new();
        encode(&mut buf, 1, 0, b"abc");
        encode(&mut buf, 2, 0, b"def");
        let first = HEADER + 3;
        buf[first + HEADER + 1] ^= 1;
        let (records, at) = decode_all(&Bytes::from(buf));
        assert_eq!((records.len(), at), (1, first));
    }

    #[test]
    fn a_stage_is_read_while_its_numbers_rise() {
        let mut old = Vec::new();
        for seq in 1..=4 {
            encode(&mut old, seq, 0, b"older, written out");
        }
        let mut stage = Vec::new();
        encode(&mut stage, 9, 0, b"new");
        encode(&mut stage, 10, 0, b"newer");
        let end = stage.len();
        // What follows the new records is what the stage held before it began again.
        stage.extend_from_slice(&old[end..]);
        let (records, at) = decode_rising(&Bytes::from(stage));
        let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
        assert_eq!((seqs, at), (vec![9, 10], end));
        // An older record that happens to start right after them is not read either.
        let mut aligned = Vec::new();
        encode(&mut aligned, 9, 0, b"n");
        aligned.extend_from_slice(&old);
        let (records, _) = decode_rising(&Bytes::from(aligned));
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn a_marker_reads_back_as_itself_and_a_frame_is_no_marker() {
        let m = Marker {
            id: 3,
            bound: 1 << 40,
            first: 7,
            from: 8,
            written: 9,
            boot: b"4c5cf402-a978-4459-b4f8-e8557485a9c4".to_vec(),
            closed: false,
            group: true,
            every_frame: false,
        };
        let mut buf = Vec::new();
        encode(
            &mut buf,
            7,
            u64::MAX >> 1,
            b"a frame with the latest deadline there is",
        );
        m.encode(&mut buf);
        let (records, at) = decode_all(&Bytes::from(buf.clone()));
        assert_eq!(at, buf.len());
        assert_eq!(Marker::of(&records[0]), None);
        assert_eq!(Marker::of(&records[1]), Some(m));
    }

    #[test]
    fn a_marker_of_format_4_reads_with_nothing_written_said() {
        // Format 4: the frame holds `first`, `id`, then the boot; no `written` flag.
        let mut frame = Vec::new();
        frame.extend_from_slice(&7u64.to_le_bytes());
        frame.extend_from_slice(&3u64.to_le_bytes());
        frame.extend_from_slice(b"boot");
        let mut buf = Vec::new();
        encode(&mut buf, 100, MARKER | GROUP, &frame);
        let (records, _) = decode_all(&Bytes::from(buf));
        let m = Marker::of(&records[0]).expect("a marker");
        assert_eq!(
            (m.first, m.from, m.id, m.written, &m.boot[..]),
            (7, 7, 3, 0, &b"boot"[..])
        );
    }

    #[test]
    fn an_opening_is_read_apart_from_the_records_and_the_seal() {
        let mut buf = Vec::new();
        Seal(vec![(0, 5)]).encode_opening(&mut buf);
        encode(&mut buf, 5, 0, b"five");
        Seal(vec![(5, 6)]).encode(&mut buf);
        let seg = read_segment(&Bytes::from(buf));
        assert_eq!(seg.opening, Some(Seal(vec![(0, 5)])));
        assert_eq!(seg.records.len(), 1);
        assert_eq!(seg.seal, Some(Seal(vec![(5, 6)])));
    }

    #[test]
    fn ranges_merge_and_answer() {
        let mut r = Ranges::default();
        r.extend(&mut [5, 3, 4, 9, 10, 0]);
        assert!(r.contains(3) && r.contains(5) && r.contains(10) && r.contains(0));
        assert!(!r.contains(6) && !r.contains(1) && !r.contains(11));
        assert_eq!(r.first_absent(3), 6);
        assert_eq!(r.first_absent(6), 6);
        r.insert(6, 9);
        assert_eq!(r.first_absent(3), 11);
        assert_eq!(r.end(), 11);
        assert_eq!(r.absent(0, 20), (11, 1..20));
        assert_eq!(r.absent(3, 11), (0, 0..0));
        assert_eq!(r.absent(2, 4), (1, 2..3));
        r.prune(11);
        assert_eq!(r.end(), 11);
        let mut acks = Vec::new();
        encode_ack(&mut acks, 2, 4);
        encode_ack(&mut acks, 20, 30);
        acks.push(1);
        let mut back = Ranges::default();
        assert_eq!(decode_acks(&acks, &mut back), 2 * ACK);
        assert!(back.contains(25) && back.contains(3) && !back.contains(4));
    }
}
