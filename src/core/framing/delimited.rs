//! Delimited frames: any delimiter, and lines.

use bytes::{Buf, BytesMut};

use super::Framing;
use crate::error::{CodecError, ConfigError, FrameError};

/// Frames that end in a delimiter: any non-empty byte sequence (`\0`, `\r\n`, `\n`, ...).
///
/// Encode writes the frame then the delimiter, and refuses a frame that contains the
/// delimiter (or that would form one with the delimiter after it, as `a` before `aa`).
/// Decode returns each frame at its first delimiter, without it ([`strip`](DelimitedBuilder::strip),
/// the default) or with it. A frame of more than [`max_length`](DelimitedBuilder::max_length)
/// bytes (the delimiter not counted) is refused both ways; the decoder refuses it as soon as
/// `max_length + delimiter length` bytes arrived without a delimiter.
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use relink::{Delimited, Framing};
///
/// let mut nul = Delimited::builder(b"\0").build()?;
/// let mut wire = Vec::new();
/// nul.encode(b"one", &mut wire)?;
/// nul.encode(b"", &mut wire)?;
/// assert_eq!(wire, b"one\0\0");
/// assert!(nul.encode(b"o\0ne", &mut wire).is_err());
///
/// let mut src = BytesMut::from(&b"two\0thr"[..]);
/// assert_eq!(nul.decode(&mut src)?, Some(b"two".to_vec()));
/// assert_eq!(nul.decode(&mut src)?, None);
///
/// let mut keep = Delimited::builder(b"\r\n").strip(false).build()?;
/// let mut src = BytesMut::from(&b"+OK\r\n"[..]);
/// assert_eq!(keep.decode(&mut src)?, Some(b"+OK\r\n".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delimited {
    delimiter: Vec<u8>,
    strip: bool,
    max_length: usize,
    /// `src[..scan]` holds no delimiter start (decoding state).
    scan: usize,
}

/// Builds a [`Delimited`] framing; made by [`Delimited::builder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelimitedBuilder {
    delimiter: Vec<u8>,
    strip: bool,
    max_length: usize,
}

impl Delimited {
    /// The default `max_length`: 64 KiB.
    pub const DEFAULT_MAX_LENGTH: usize = 64 * 1024;

    /// A builder for frames ending in `delimiter`.
    pub fn builder(delimiter: impl AsRef<[u8]>) -> DelimitedBuilder {
        DelimitedBuilder {
            delimiter: delimiter.as_ref().to_vec(),
            strip: true,
            max_length: Delimited::DEFAULT_MAX_LENGTH,
        }
    }

    /// The frame's body: with `strip(false)`, a frame that ends in the delimiter is written
    /// without appending another.
    fn body<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        if !self.strip {
            if let Some(body) = frame.strip_suffix(&self.delimiter[..]) {
                return body;
            }
        }
        frame
    }
}

impl DelimitedBuilder {
    /// Whether decode drops the delimiter (true) or keeps it at the end of the frame (false).
    /// When kept, a frame given to encode may end in the delimiter; another one is not
    /// appended then. Defaults to true.
    pub fn strip(mut self, strip: bool) -> Self {
        self.strip = strip;
        self
    }

    /// The longest frame, without its delimiter, read or written. Defaults to
    /// [`Delimited::DEFAULT_MAX_LENGTH`].
    pub fn max_length(mut self, max_length: usize) -> Self {
        self.max_length = max_length;
        self
    }

    /// The framing.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadFraming`] for an empty delimiter, [`ConfigError::ZeroLimit`] for a
    /// `max_length` of 0.
    pub fn build(self) -> Result<Delimited, ConfigError> {
        if self.delimiter.is_empty() {
            return Err(ConfigError::BadFraming {
                setting: "delimiter",
                reason: "must not be empty",
            });
        }
        if self.max_length == 0 {
            return Err(ConfigError::ZeroLimit { name: "max_length" });
        }
        Ok(Delimited {
            delimiter: self.delimiter,
            strip: self.strip,
            max_length: self.max_length,
            scan: 0,
        })
    }
}

/// The first index at or after `from` where `needle` starts in `hay`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = needle[0];
    let mut i = from;
    while i + needle.len() <= hay.len() {
        let at = i + hay[i..=hay.len() - needle.len()]
            .iter()
            .position(|&b| b == first)?;
        if hay[at..].starts_with(needle) {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

impl Framing for Delimited {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), FrameError> {
        self.check(frame)?;
        let body = self.body(frame);
        dst.reserve(body.len() + self.delimiter.len());
        dst.extend_from_slice(body);
        dst.extend_from_slice(&self.delimiter);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Vec<u8>>, CodecError> {
        let d = self.delimiter.len();
        // A frame within the limit has its delimiter within these bytes.
        let window = &src[..src.len().min(self.max_length.saturating_add(d))];
        match find(window, &self.delimiter, self.scan) {
            Some(at) => {
                self.scan = 0;
                let end = if self.strip { at } else { at + d };
                let frame = src[..end].to_vec();
                src.advance(at + d);
                Ok(Some(frame))
            }
            None if window.len() == self.max_length.saturating_add(d) => {
                Err(CodecError::LineTooLong {
                    max: self.max_length,
                })
            }
            None => {
                self.scan = window.len().saturating_sub(d - 1);
                Ok(None)
            }
        }
    }

    fn check(&self, frame: &[u8]) -> Result<(), FrameError> {
        let body = self.body(frame);
        if body.len() > self.max_length {
            return Err(FrameError::TooLarge {
                len: body.len(),
                max: self.max_length,
            });
        }
        // The first delimiter in body ++ delimiter must be the one appended.
        let tail_start = body.len().saturating_sub(self.delimiter.len() - 1);
        let mut tail = body[tail_start..].to_vec();
        tail.extend_from_slice(&self.delimiter);
        if find(body, &self.delimiter, 0).is_some()
            || find(&tail, &self.delimiter, 0) != Some(body.len() - tail_start)
        {
            return Err(FrameError::ContainsDelimiter);
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.scan = 0;
    }

    /// The longest frame and its delimiter.
    fn max_buffered(&self) -> usize {
        self.max_length.saturating_add(self.delimiter.len())
    }

    fn name(&self) -> &str {
        "delimited"
    }
}

/// Lines: frames ending in `\n`, with a `\r` just before it stripped on decode.
///
/// Decode accepts LF and CRLF line ends alike (as today's `lines`); encode writes `\n`, or
/// `\r\n` with [`crlf(true)`](Lines::crlf), and refuses a frame containing `\n`
/// ([`FrameError::ContainsNewline`]) or longer than [`max_length`](Lines::max_length). With
/// LF ends, a frame that itself ends in `\r` loses that `\r` when decoded the same way; with
/// CRLF ends every frame without `\n` comes back as it was.
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use relink::{Framing, Lines};
///
/// let mut lines = Lines::new().crlf(true);
/// let mut wire = Vec::new();
/// lines.encode(b"PING", &mut wire)?;
/// assert_eq!(wire, b"PING\r\n");
///
/// let mut src = BytesMut::from(&b"+PONG\r\nbare\npart"[..]);
/// assert_eq!(lines.decode(&mut src)?, Some(b"+PONG".to_vec()));
/// assert_eq!(lines.decode(&mut src)?, Some(b"bare".to_vec()));
/// assert_eq!(lines.decode(&mut src)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lines {
    crlf: bool,
    max_length: usize,
    /// `max_length` counts a `\r` before the `\n` (as [`Codec::Lines`](crate::Codec::Lines)).
    cr_counts: bool,
    /// `src[..scan]` holds no `\n` (decoding state).
    scan: usize,
}

impl Default for Lines {
    fn default() -> Self {
        Lines::new()
    }
}

impl Lines {
    /// The default `max_length`: 64 KiB.
    pub const DEFAULT_MAX_LENGTH: usize = 64 * 1024;

    /// LF line ends, lines of at most [`Lines::DEFAULT_MAX_LENGTH`] bytes.
    pub fn new() -> Lines {
        Lines {
            crlf: false,
            max_length: Lines::DEFAULT_MAX_LENGTH,
            cr_counts: false,
            scan: 0,
        }
    }

    /// Whether encode ends lines with `\r\n` (true) or `\n`. Decode accepts both either way.
    /// Defaults to false.
    pub fn crlf(mut self, crlf: bool) -> Self {
        self.crlf = crlf;
        self
    }

    /// The longest line, without its `\n` or `\r\n`, read or written (0 allows empty lines
    /// only). Defaults to [`Lines::DEFAULT_MAX_LENGTH`].
    pub fn max_length(mut self, max_length: usize) -> Self {
        self.max_length = max_length;
        self
    }

    /// `max_length` counts a `\r` just before the `\n`, and a line is refused as soon as
    /// `max_length + 1` bytes arrived without a `\n`: the rule of
    /// [`Codec::Lines`](crate::Codec::Lines).
    pub(crate) fn counting_cr(mut self) -> Self {
        self.cr_counts = true;
        self
    }

    /// The bytes a line within the limit has before its `\n`, at most.
    fn room(&self) -> usize {
        self.max_length
            .saturating_add(if self.cr_counts { 0 } else { 1 })
    }
}

impl Framing for Lines {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), FrameError> {
        self.check(frame)?;
        dst.reserve(frame.len() + 2);
        dst.extend_from_slice(frame);
        if self.crlf {
            dst.push(b'\r');
        }
        dst.push(b'\n');
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Vec<u8>>, CodecError> {
        // A line within the limit, with a `\r`, has its `\n` within these bytes.
        let window = &src[..src.len().min(self.room().saturating_add(1))];
        match window[self.scan..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let at = self.scan + i;
                self.scan = 0;
                let raw = &window[..at];
                let line = raw.strip_suffix(b"\r").unwrap_or(raw);
                let counted = if self.cr_counts {
                    raw.len()
                } else {
                    line.len()
                };
                if counted > self.max_length {
                    return Err(CodecError::LineTooLong {
                        max: self.max_length,
                    });
                }
                let frame = line.to_vec();
                src.advance(at + 1);
                Ok(Some(frame))
            }
            None if window.len() > self.room() => Err(CodecError::LineTooLong {
                max: self.max_length,
            }),
            None => {
                self.scan = window.len();
                Ok(None)
            }
        }
    }

    fn check(&self, frame: &[u8]) -> Result<(), FrameError> {
        if frame.len() > self.max_length {
            return Err(FrameError::TooLarge {
                len: frame.len(),
                max: self.max_length,
            });
        }
        if frame.contains(&b'\n') {
            return Err(FrameError::ContainsNewline);
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.scan = 0;
    }

    /// The longest line and its line end.
    fn max_buffered(&self) -> usize {
        self.room().saturating_add(1)
    }

    fn name(&self) -> &str {
        "lines"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::framing::testkit::{assert_every_split, decode_chunks, encode_all};

    fn delimited(delimiter: &[u8], max_length: usize) -> Delimited {
        Delimited::builder(delimiter)
            .max_length(max_length)
            .build()
            .expect("valid settings")
    }

    #[test]
    fn nul_and_crlf_delimited_frames_round_trip_at_every_split_point() {
        let nul = delimited(b"\0", 20);
        let frames: &[&[u8]] = &[b"one", b"", b"\r\n", b"twenty bytes exactly"];
        assert_every_split(&nul, &encode_all(&mut nul.clone(), frames), frames);

        let crlf = delimited(b"\r\n", 20);
        let frames: &[&[u8]] = &[b"one", b"", b"\0\n\r", b"a\rb\nc", b"\n"];
        let wire = encode_all(&mut crlf.clone(), frames);
        assert_eq!(&wire[..5], b"one\r\n");
        assert_every_split(&crlf, &wire, frames);
    }

    #[test]
    fn a_frame_that_contains_or_would_form_the_delimiter_is_refused() {
        let crlf = delimited(b"\r\n", 20);
        assert_eq!(crlf.check(b"a\r\nb"), Err(FrameError::ContainsDelimiter));
        assert_eq!(crlf.check(b"a\r"), Ok(()));
        let aa = delimited(b"aa", 20);
        assert_eq!(aa.check(b"xa"), Err(FrameError::ContainsDelimiter));
        assert_eq!(aa.check(b"xaax"), Err(FrameError::ContainsDelimiter));
        assert_eq!(aa.check(b"axb"), Ok(()));
    }

    #[test]
    fn kept_delimiters_come_back_and_are_not_doubled_on_encode() {
        let mut keep = Delimited::builder(b"\r\n").strip(false).build().unwrap();
        let wire = encode_all(&mut keep, &[b"+OK\r\n", b"bare"]);
        assert_eq!(wire, b"+OK\r\nbare\r\n");
        assert_every_split(&keep, &wire, &[b"+OK\r\n", b"bare\r\n"]);
    }

    #[test]
    fn a_frame_is_refused_once_max_plus_delimiter_bytes_arrived_without_one() {
        let mut framing = delimited(b"\r\n", 3);
        let mut src = BytesMut::from(&b"abc\r"[..]);
        assert_eq!(framing.decode(&mut src), Ok(None));
        src.extend_from_slice(b"\n");
        assert_eq!(framing.decode(&mut src), Ok(Some(b"abc".to_vec())));
        src.extend_from_slice(b"abcd");
        assert_eq!(framing.decode(&mut src), Ok(None));
        src.extend_from_slice(b"e");
        assert_eq!(
            framing.decode(&mut src),
            Err(CodecError::LineTooLong { max: 3 })
        );
        assert_eq!(
            framing.check(b"abcd"),
            Err(FrameError::TooLarge { len: 4, max: 3 })
        );
    }

    #[test]
    fn the_delimiter_scan_resumes_where_it_stopped() {
        let mut framing = delimited(b"\r\n", 1000);
        let mut src = BytesMut::new();
        for i in 1..=100 {
            src.extend_from_slice(b"z\r");
            assert_eq!(framing.decode(&mut src), Ok(None));
            assert_eq!(framing.scan, 2 * i - 1);
        }
        src.extend_from_slice(b"\n");
        assert_eq!(framing.decode(&mut src).unwrap().unwrap().len(), 199);
        assert_eq!(framing.scan, 0);
    }

    #[test]
    fn an_empty_delimiter_or_a_zero_max_is_a_config_error() {
        assert!(matches!(
            Delimited::builder(b"").build(),
            Err(ConfigError::BadFraming {
                setting: "delimiter",
                ..
            })
        ));
        assert_eq!(
            Delimited::builder(b"\0").max_length(0).build(),
            Err(ConfigError::ZeroLimit { name: "max_length" })
        );
    }

    #[test]
    fn lines_read_lf_and_crlf_ends_at_every_split_point() {
        let lines = Lines::new().max_length(10);
        assert_every_split(
            &lines,
            b"one\r\n\r\ntwo\r\r\nthree\n\n",
            &[b"one", b"", b"two\r", b"three", b""],
        );
    }

    #[test]
    fn lines_write_lf_or_crlf_and_crlf_round_trips_a_trailing_cr() {
        let mut lf = Lines::new();
        assert_eq!(encode_all(&mut lf, &[b"a", b""]), b"a\n\n");
        let crlf = Lines::new().crlf(true);
        let frames: &[&[u8]] = &[b"a", b"", b"b\r", b"\r"];
        let wire = encode_all(&mut crlf.clone(), frames);
        assert_eq!(wire, b"a\r\n\r\nb\r\r\n\r\r\n");
        assert_every_split(&crlf, &wire, frames);
        assert_eq!(crlf.check(b"a\nb"), Err(FrameError::ContainsNewline));
    }

    #[test]
    fn lines_do_not_count_the_line_end_toward_max_length() {
        let mut lines = Lines::new().max_length(3);
        assert_eq!(
            decode_chunks(&mut lines, [&b"abc\r\nabc\n"[..]]),
            Ok(vec![b"abc".to_vec(), b"abc".to_vec()])
        );
        assert_eq!(
            decode_chunks(&mut lines, [&b"abcd\n"[..]]),
            Err(CodecError::LineTooLong { max: 3 })
        );
        let mut src = BytesMut::from(&b"abc\r"[..]);
        assert_eq!(lines.decode(&mut src), Ok(None));
        src.extend_from_slice(b"x");
        assert_eq!(
            lines.decode(&mut src),
            Err(CodecError::LineTooLong { max: 3 })
        );
    }
}
