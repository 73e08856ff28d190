//! Payloads a test can recognise again (sequence numbers, producer tags) and decoders for
//! what a peer received.

use std::collections::HashSet;
use std::hash::Hash;

/// `payload` with its u32 big-endian length in front.
pub fn encode_length_prefixed(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Split `bytes` into length-prefixed frames (u32 big-endian length + payload). Returns
/// the whole frames and the trailing bytes that do not make one.
pub fn decode_length_prefixed(bytes: &[u8]) -> (Vec<Vec<u8>>, &[u8]) {
    let mut frames = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if rest.len() - 4 < len {
            break;
        }
        frames.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    (frames, rest)
}

/// Split `bytes` into lines on `\n`; each line loses its `\n` and one `\r` before it.
/// Returns the whole lines and the bytes after the last `\n`.
pub fn decode_lines(bytes: &[u8]) -> (Vec<Vec<u8>>, &[u8]) {
    let mut lines = Vec::new();
    let mut rest = bytes;
    while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
        let mut line = &rest[..pos];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        lines.push(line.to_vec());
        rest = &rest[pos + 1..];
    }
    (lines, rest)
}

/// `decode_lines` as strings (invalid UTF-8 replaced), ignoring an unterminated tail.
pub fn lines_str(bytes: &[u8]) -> Vec<String> {
    decode_lines(bytes)
        .0
        .into_iter()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
        .collect()
}

/// A frame of `len` bytes (at least 8) that says its sequence number in its first 8, big-endian.
pub fn seq_frame(seq: u64, len: usize) -> Vec<u8> {
    let mut f = seq.to_be_bytes().to_vec();
    f.resize(len.max(8), b'x');
    f
}

/// A payload carrying a sequence number, `seq-0000000042`, for order and duplicate checks.
pub fn seq_payload(n: u64) -> Vec<u8> {
    format!("seq-{n:010}").into_bytes()
}

/// The sequence number of a `seq_payload` (None for anything else).
pub fn parse_seq(payload: &[u8]) -> Option<u64> {
    std::str::from_utf8(payload.strip_prefix(b"seq-")?)
        .ok()?
        .parse()
        .ok()
}

/// Items that occur more than once (each reported once, in order of second occurrence).
pub fn duplicates<T: Eq + Hash + Clone>(items: &[T]) -> Vec<T> {
    let mut seen = HashSet::new();
    let mut reported = HashSet::new();
    let mut out = Vec::new();
    for it in items {
        if !seen.insert(it) && reported.insert(it) {
            out.push(it.clone());
        }
    }
    out
}

/// Index of the first item not strictly greater than the one before it (None when the
/// items are strictly increasing).
pub fn first_out_of_order<T: Ord>(items: &[T]) -> Option<usize> {
    items.windows(2).position(|w| w[1] <= w[0]).map(|i| i + 1)
}

/// `p3-seq-0000000042`: producer 3's frame number 42.
pub fn producer_payload(producer: u8, seq: u64) -> Vec<u8> {
    let mut out = format!("p{producer}-").into_bytes();
    out.extend_from_slice(&seq_payload(seq));
    out
}

/// The producer and sequence number of a `producer_payload` (None for anything else).
pub fn parse_producer_payload(frame: &[u8]) -> Option<(u8, u64)> {
    let rest = frame.strip_prefix(b"p")?;
    let dash = rest.iter().position(|&b| b == b'-')?;
    let producer = std::str::from_utf8(&rest[..dash]).ok()?.parse().ok()?;
    Some((producer, parse_seq(&rest[dash + 1..])?))
}

/// Bytes of one `seq_payload` line on the wire: 14 bytes and a newline.
pub const LINE: usize = 15;
