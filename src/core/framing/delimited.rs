//! Delimited frames: any delimiter, and lines.

use bytes::{Buf, Bytes, BytesMut};

use super::{DecodeError, EncodeError, Framing};
use crate::error::ConfigError;

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
/// use relink::bytes::BytesMut;
/// use relink::framing::{Delimited, Framing};
///
/// let mut nul = Delimited::builder(b"\0").build()?;
/// let mut wire = Vec::new();
/// nul.encode(b"one", &mut wire)?;
/// nul.encode(b"", &mut wire)?;
/// assert_eq!(wire, b"one\0\0");
/// assert!(nul.encode(b"o\0ne", &mut wire).is_err());
///
/// let mut src = BytesMut::from(&b"two\0thr"[..]);
/// assert_eq!(nul.decode(&mut src)?.as_deref(), Some(&b"two"[..]));
/// assert_eq!(nul.decode(&mut src)?, None);
///
/// let mut keep = Delimited::builder(b"\r\n").strip(false).build()?;
/// let mut src = BytesMut::from(&b"+OK\r\n"[..]);
/// assert_eq!(keep.decode(&mut src)?.as_deref(), Some(&b"+OK\r\n"[..]));
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
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        let body = self.body(frame);
        dst.reserve(body.len() + self.delimiter.len());
        dst.extend_from_slice(body);
        dst.extend_from_slice(&self.delimiter);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let d = self.delimiter.len();
        // A frame within the limit has its delimiter within these bytes.
        let window = &src[..src.len().min(self.max_length.saturating_add(d))];
        match find(window, &self.delimiter, self.scan) {
            Some(at) => {
                self.scan = 0;
                let end = if self.strip { at } else { at + d };
                let frame = src.split_to(end).freeze();
                src.advance(at + d - end);
                Ok(Some(frame))
            }
            None if window.len() == self.max_length.saturating_add(d) => {
                Err(DecodeError::LineTooLong {
                    max: self.max_length,
                })
            }
            None => {
                self.scan = window.len().saturating_sub(d - 1);
                Ok(None)
            }
        }
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        let body = self.body(frame);
        if body.len() > self.max_length {
            return Err(EncodeError::TooLarge {
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
            return Err(EncodeError::ContainsDelimiter);
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
/// Decode accepts LF and CRLF line ends alike; encode writes `\n`, or `\r\n` with
/// [`crlf(true)`](LinesBuilder::crlf), and refuses a frame containing `\n`
/// ([`EncodeError::ContainsNewline`]) or longer than
/// [`max_length`](LinesBuilder::max_length). With LF ends, a frame that itself ends in `\r`
/// loses that `\r` when decoded the same way; with CRLF ends every frame without `\n` comes
/// back as it was.
///
/// # Examples
///
/// ```
/// use relink::bytes::BytesMut;
/// use relink::framing::{Framing, Lines};
///
/// let mut lines = Lines::builder().crlf(true).build()?;
/// let mut wire = Vec::new();
/// lines.encode(b"PING", &mut wire)?;
/// assert_eq!(wire, b"PING\r\n");
///
/// let mut src = BytesMut::from(&b"+PONG\r\nbare\npart"[..]);
/// assert_eq!(lines.decode(&mut src)?.as_deref(), Some(&b"+PONG"[..]));
/// assert_eq!(lines.decode(&mut src)?.as_deref(), Some(&b"bare"[..]));
/// assert_eq!(lines.decode(&mut src)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lines {
    crlf: bool,
    max_length: usize,
    /// `src[..scan]` holds no `\n` (decoding state).
    scan: usize,
}

/// Builds a [`Lines`] framing; made by [`Lines::builder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinesBuilder {
    crlf: bool,
    max_length: usize,
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
            scan: 0,
        }
    }

    /// A builder with the defaults of [`Lines::new`].
    pub fn builder() -> LinesBuilder {
        LinesBuilder {
            crlf: false,
            max_length: Lines::DEFAULT_MAX_LENGTH,
        }
    }

    /// The bytes a line within the limit has before its `\n`, at most (a `\r` included).
    fn room(&self) -> usize {
        self.max_length.saturating_add(1)
    }
}

impl LinesBuilder {
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

    /// The framing.
    ///
    /// # Errors
    ///
    /// None today: every setting of a line framing can work. The `Result` keeps every
    /// framing builder the same.
    pub fn build(self) -> Result<Lines, ConfigError> {
        Ok(Lines {
            crlf: self.crlf,
            max_length: self.max_length,
            scan: 0,
        })
    }
}

impl Framing for Lines {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.reserve(frame.len() + 2);
        dst.extend_from_slice(frame);
        if self.crlf {
            dst.push(b'\r');
        }
        dst.push(b'\n');
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        // A line within the limit, with a `\r`, has its `\n` within these bytes.
        let window = &src[..src.len().min(self.room().saturating_add(1))];
        match window[self.scan..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let at = self.scan + i;
                self.scan = 0;
                let raw = &window[..at];
                let len = raw.strip_suffix(b"\r").unwrap_or(raw).len();
                if len > self.max_length {
                    return Err(DecodeError::LineTooLong {
                        max: self.max_length,
                    });
                }
                let mut line = src.split_to(at + 1);
                line.truncate(len);
                Ok(Some(line.freeze()))
            }
            None if window.len() > self.room() => Err(DecodeError::LineTooLong {
                max: self.max_length,
            }),
            None => {
                self.scan = window.len();
                Ok(None)
            }
        }
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        if frame.len() > self.max_length {
            return Err(EncodeError::TooLarge {
                len: frame.len(),
                max: self.max_length,
            });
        }
        if frame.contains(&b'\n') {
            return Err(EncodeError::ContainsNewline);
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

    fn lines(crlf: bool, max_length: usize) -> Lines {
        Lines::builder()
            .crlf(crlf)
            .max_length(max_length)
            .build()
            .expect("valid settings")
    }

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
        assert_eq!(crlf.check(b"a\r\nb"), Err(EncodeError::ContainsDelimiter));
        assert_eq!(crlf.check(b"a\r"), Ok(()));
        let aa = delimited(b"aa", 20);
        assert_eq!(aa.check(b"xa"), Err(EncodeError::ContainsDelimiter));
        assert_eq!(aa.check(b"xaax"), Err(EncodeError::ContainsDelimiter));
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
        assert_eq!(
            framing.decode(&mut src),
            Ok(Some(Bytes::from_static(b"abc")))
        );
        src.extend_from_slice(b"abcd");
        assert_eq!(framing.decode(&mut src), Ok(None));
        src.extend_from_slice(b"e");
        assert_eq!(
            framing.decode(&mut src),
            Err(DecodeError::LineTooLong { max: 3 })
        );
        assert_eq!(
            framing.check(b"abcd"),
            Err(EncodeError::TooLarge { len: 4, max: 3 })
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
        let lines = lines(false, 10);
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
        let crlf = lines(true, Lines::DEFAULT_MAX_LENGTH);
        let frames: &[&[u8]] = &[b"a", b"", b"b\r", b"\r"];
        let wire = encode_all(&mut crlf.clone(), frames);
        assert_eq!(wire, b"a\r\n\r\nb\r\r\n\r\r\n");
        assert_every_split(&crlf, &wire, frames);
        assert_eq!(crlf.check(b"a\nb"), Err(EncodeError::ContainsNewline));
    }

    #[test]
    fn lines_do_not_count_the_line_end_toward_max_length() {
        let mut lines = lines(false, 3);
        assert_eq!(
            decode_chunks(&mut lines, [&b"abc\r\nabc\n"[..]]),
            Ok(vec![b"abc".to_vec(), b"abc".to_vec()])
        );
        assert_eq!(
            decode_chunks(&mut lines, [&b"abcd\n"[..]]),
            Err(DecodeError::LineTooLong { max: 3 })
        );
        let mut src = BytesMut::from(&b"abc\r"[..]);
        assert_eq!(lines.decode(&mut src), Ok(None));
        src.extend_from_slice(b"x");
        assert_eq!(
            lines.decode(&mut src),
            Err(DecodeError::LineTooLong { max: 3 })
        );
    }

    #[test]
    fn lines_accept_empty_lines_even_with_a_zero_max_length() {
        let mut lines = lines(false, 0);
        assert_eq!(
            decode_chunks(&mut lines, [&b"\n\n\r\n"[..]]),
            Ok(vec![Vec::new(); 3])
        );
        assert_eq!(
            decode_chunks(&mut lines, [&b"a\n"[..]]),
            Err(DecodeError::LineTooLong { max: 0 })
        );
    }

    #[test]
    fn lines_accept_a_line_of_exactly_max_length_and_refuse_one_as_soon_as_it_passes() {
        let mut lines = lines(false, 4);
        let mut src = BytesMut::from(&b"abcd"[..]);
        assert_eq!(lines.decode(&mut src), Ok(None));
        src.extend_from_slice(b"\nab\r\nabcd");
        assert_eq!(
            lines.decode(&mut src),
            Ok(Some(Bytes::from_static(b"abcd")))
        );
        assert_eq!(lines.decode(&mut src), Ok(Some(Bytes::from_static(b"ab"))));
        assert_eq!(lines.decode(&mut src), Ok(None));
        src.extend_from_slice(b"ef");
        assert_eq!(
            lines.decode(&mut src),
            Err(DecodeError::LineTooLong { max: 4 })
        );
        assert_eq!(
            decode_chunks(&mut lines, [&b"abcdefgh\n"[..]]),
            Err(DecodeError::LineTooLong { max: 4 }),
            "refused even when its newline came with it"
        );
    }

    #[test]
    fn lines_resume_the_newline_scan_where_it_stopped() {
        let mut lines = Lines::new();
        let mut src = BytesMut::new();
        for i in 1..=100 {
            src.extend_from_slice(b"z");
            assert_eq!(lines.decode(&mut src), Ok(None));
            assert_eq!(lines.scan, i);
        }
        src.extend_from_slice(b"\ny\n");
        assert_eq!(
            lines.decode(&mut src),
            Ok(Some(Bytes::from(vec![b'z'; 100])))
        );
        assert_eq!(lines.decode(&mut src), Ok(Some(Bytes::from_static(b"y"))));
    }
}
