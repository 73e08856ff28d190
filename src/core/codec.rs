//! Framing: how the byte stream of a connection is cut into frames, and back.
//!
//! A [`Codec`] names one of the first three framings (raw chunks, len32, lines) and is itself a
//! [`Framing`]: every call is made by the built-in framing it names. Its [`Decoder`] (a receive
//! buffer and that framing) turns the chunks read from the socket into frames. Decoding is
//! incremental, memory bounded and amortised linear in the bytes fed.

use bytes::BytesMut;

use super::framing::{BoxedFraming, Framing, LengthDelimited, Lines, Raw};
use crate::error::{CodecError, FrameError};

/// How bytes on the wire are cut into frames.
///
/// # Examples
///
/// ```
/// use relink::Codec;
///
/// let codec = Codec::length_prefixed();
/// let mut wire = Vec::new();
/// codec.encode_into(b"hello", &mut wire);
/// assert_eq!(wire, b"\0\0\0\x05hello");
///
/// let mut decoder = codec.decoder();
/// decoder.feed(&wire);
/// assert_eq!(decoder.decode(), Ok(Some(b"hello".to_vec())));
/// assert_eq!(decoder.decode(), Ok(None));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Codec {
    /// Every chunk read from the socket is one frame (chunks ignore message boundaries);
    /// frames are written as they are.
    ///
    /// An empty frame is refused ([`FrameError::Empty`]). The decoder returns everything fed
    /// since the last [`Decoder::decode`] as one frame: chunks fed back to back come out
    /// concatenated.
    #[default]
    Raw,
    /// Each frame is a `u32` big-endian length followed by that many bytes.
    ///
    /// A zero-length frame is legal.
    LengthPrefixed {
        /// The largest frame, in bytes (without the 4-byte prefix), sent or accepted.
        max_frame: usize,
    },
    /// Each frame is a line ending in `'\n'`; a `'\r'` just before the `'\n'` is stripped on
    /// decode. Frames are written with `"\n"` appended and must not contain `'\n'`.
    ///
    /// An empty line is a legal empty frame. A frame that ends in `'\r'` is sent as is but
    /// loses that `'\r'` when the peer decodes it the same way.
    Lines {
        /// The longest line, in bytes, sent or accepted: every byte before the `'\n'`,
        /// counting a `'\r'` just before it.
        max_line: usize,
    },
}

impl Codec {
    /// The default `max_frame` of [`Codec::length_prefixed`]: 16 MiB.
    pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

    /// The default `max_line` of [`Codec::lines`]: 64 KiB.
    pub const DEFAULT_MAX_LINE: usize = 64 * 1024;

    /// Length-prefixed frames of at most [`Codec::DEFAULT_MAX_FRAME`] bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::Codec;
    ///
    /// assert_eq!(
    ///     Codec::length_prefixed(),
    ///     Codec::LengthPrefixed { max_frame: Codec::DEFAULT_MAX_FRAME }
    /// );
    /// ```
    pub fn length_prefixed() -> Codec {
        Codec::LengthPrefixed {
            max_frame: Codec::DEFAULT_MAX_FRAME,
        }
    }

    /// Lines of at most [`Codec::DEFAULT_MAX_LINE`] bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::Codec;
    ///
    /// assert_eq!(Codec::lines(), Codec::Lines { max_line: Codec::DEFAULT_MAX_LINE });
    /// ```
    pub fn lines() -> Codec {
        Codec::Lines {
            max_line: Codec::DEFAULT_MAX_LINE,
        }
    }

    /// A short name for logs: `"raw"`, `"len32"` or `"lines"`.
    pub fn name(&self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::LengthPrefixed { .. } => "len32",
            Codec::Lines { .. } => "lines",
        }
    }

    /// The number of bytes that encoding a frame of `len` bytes produces (saturating).
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::Codec;
    ///
    /// assert_eq!(Codec::Raw.encoded_len(5), 5);
    /// assert_eq!(Codec::length_prefixed().encoded_len(5), 9);
    /// assert_eq!(Codec::lines().encoded_len(5), 6);
    /// ```
    pub fn encoded_len(&self, len: usize) -> usize {
        match self {
            Codec::Raw => len,
            Codec::LengthPrefixed { .. } => len.saturating_add(4),
            Codec::Lines { .. } => len.saturating_add(1),
        }
    }

    /// Whether a frame can be encoded.
    ///
    /// # Errors
    ///
    /// Raw refuses an empty frame ([`FrameError::Empty`]); len32 a frame longer than
    /// `max_frame` or than `u32::MAX` ([`FrameError::TooLarge`], whose `max` is the smaller of
    /// the two); lines a frame longer than `max_line` ([`FrameError::TooLarge`]) or one that
    /// contains `'\n'` ([`FrameError::ContainsNewline`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::{Codec, FrameError};
    ///
    /// assert_eq!(Codec::Raw.check_frame(b""), Err(FrameError::Empty));
    /// assert_eq!(Codec::lines().check_frame(b"a\nb"), Err(FrameError::ContainsNewline));
    /// assert_eq!(
    ///     Codec::LengthPrefixed { max_frame: 2 }.check_frame(b"abc"),
    ///     Err(FrameError::TooLarge { len: 3, max: 2 })
    /// );
    /// assert_eq!(Codec::length_prefixed().check_frame(b""), Ok(()));
    /// ```
    pub fn check_frame(&self, frame: &[u8]) -> Result<(), FrameError> {
        match *self {
            Codec::Raw => Raw.check(frame),
            Codec::LengthPrefixed { max_frame } => {
                LengthDelimited::len32_max(max_frame).check(frame)
            }
            Codec::Lines { max_line } => self.lines_framing(max_line).check(frame),
        }
    }

    /// Appends the encoded frame to `out`.
    ///
    /// The frame must pass [`Codec::check_frame`]; this is checked by a `debug_assert!` only.
    /// A frame that does not pass is not written.
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::Codec;
    ///
    /// let mut out = Vec::new();
    /// Codec::lines().encode_into(b"ping", &mut out);
    /// Codec::lines().encode_into(b"", &mut out);
    /// assert_eq!(out, b"ping\n\n");
    /// ```
    pub fn encode_into(&self, frame: &[u8], out: &mut Vec<u8>) {
        let written = self.clone().encode(frame, out);
        debug_assert!(
            written.is_ok(),
            "encode_into given a frame that check_frame refuses"
        );
    }

    /// A new, empty decoder for this codec.
    pub fn decoder(&self) -> Decoder {
        Decoder {
            framing: self.framing(),
            buf: BytesMut::new(),
            error: None,
        }
    }

    /// The built-in framing this codec names, boxed, with its own decoding state.
    pub(crate) fn framing(&self) -> BoxedFraming {
        match *self {
            Codec::Raw => BoxedFraming(Box::new(Raw)),
            Codec::LengthPrefixed { max_frame } => {
                BoxedFraming(Box::new(LengthDelimited::len32_max(max_frame)))
            }
            Codec::Lines { max_line } => BoxedFraming(Box::new(self.lines_framing(max_line))),
        }
    }

    fn lines_framing(&self, max_line: usize) -> Lines {
        Lines::new().max_length(max_line).counting_cr()
    }
}

/// A codec is a framing: each call is made by the built-in it names ([`Raw`], len32 as
/// [`LengthDelimited`], LF [`Lines`] whose `max_line` counts a `\r`). A link given a `Codec`
/// runs that built-in itself, with its decoding state; called directly, `decode` keeps no
/// state between calls and looks at the buffered bytes again each time.
impl Framing for Codec {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), FrameError> {
        match *self {
            Codec::Raw => Raw.encode(frame, dst),
            Codec::LengthPrefixed { max_frame } => {
                LengthDelimited::len32_max(max_frame).encode(frame, dst)
            }
            Codec::Lines { max_line } => self.lines_framing(max_line).encode(frame, dst),
        }
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Vec<u8>>, CodecError> {
        match *self {
            Codec::Raw => Raw.decode(src),
            Codec::LengthPrefixed { max_frame } => {
                LengthDelimited::len32_max(max_frame).decode(src)
            }
            Codec::Lines { max_line } => self.lines_framing(max_line).decode(src),
        }
    }

    fn check(&self, frame: &[u8]) -> Result<(), FrameError> {
        self.check_frame(frame)
    }

    fn max_buffered(&self) -> usize {
        match *self {
            Codec::Raw => Raw.max_buffered(),
            Codec::LengthPrefixed { max_frame } => {
                LengthDelimited::len32_max(max_frame).max_buffered()
            }
            Codec::Lines { max_line } => self.lines_framing(max_line).max_buffered(),
        }
    }

    fn delimits_frames(&self) -> bool {
        !matches!(self, Codec::Raw)
    }

    fn name(&self) -> &str {
        Codec::name(self)
    }
}

/// Incremental decoder: feed chunks, take frames.
///
/// Made by [`Codec::decoder`]: a receive buffer and the built-in framing the codec names.
/// Memory is bounded by the codec's limit: with [`Decoder::decode`] called until it returns
/// `Ok(None)` after every [`Decoder::feed`], [`Decoder::buffered`] is at most `max_frame + 3`
/// (len32) or `max_line` (lines) between feeds, and at most that plus the chunk just fed right
/// after a feed. A raw decoder buffers only what was fed since the last `decode`.
///
/// # Examples
///
/// ```
/// use relink::{Codec, CodecError};
///
/// let mut decoder = Codec::Lines { max_line: 8 }.decoder();
/// decoder.feed(b"one\r\ntw");
/// assert_eq!(decoder.decode(), Ok(Some(b"one".to_vec())));
/// assert_eq!(decoder.decode(), Ok(None));
/// assert_eq!(decoder.buffered(), 2);
/// decoder.feed(b"o\n");
/// assert_eq!(decoder.decode(), Ok(Some(b"two".to_vec())));
///
/// decoder.feed(b"far too long");
/// assert_eq!(decoder.decode(), Err(CodecError::LineTooLong { max: 8 }));
/// decoder.reset();
/// assert_eq!(decoder.decode(), Ok(None));
/// ```
#[derive(Debug)]
pub struct Decoder {
    /// The built-in framing of the codec.
    framing: BoxedFraming,
    /// Bytes fed and not yet returned as frames.
    buf: BytesMut,
    /// The error that poisoned the decoder, until `reset`.
    error: Option<CodecError>,
}

impl Decoder {
    /// Appends bytes received from the peer.
    ///
    /// A poisoned decoder (one whose [`Decoder::decode`] returned an error) drops them.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.error.is_some() || bytes.is_empty() {
            return;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame: `Ok(Some(frame))`, or `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    ///
    /// The peer broke the framing or a limit: a len32 prefix above `max_frame`
    /// ([`CodecError::FrameTooLarge`], as soon as its 4 bytes are in), or a line longer than
    /// `max_line` ([`CodecError::LineTooLong`], as soon as `max_line + 1` bytes of it are in
    /// without a `'\n'`). Raw never fails.
    ///
    /// After an `Err` the decoder is poisoned: it drops what it buffered, ignores what is fed
    /// and returns the same `Err` until [`Decoder::reset`].
    pub fn decode(&mut self) -> Result<Option<Vec<u8>>, CodecError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let result = self.framing.decode(&mut self.buf);
        if let Err(e) = result {
            self.error = Some(e);
            self.buf = BytesMut::new();
            self.framing.reset();
        }
        result
    }

    /// Bytes buffered and not yet returned as frames (0 once poisoned).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Forgets everything buffered and any error (a new connection starts clean).
    pub fn reset(&mut self) {
        self.buf = BytesMut::new();
        self.framing.reset();
        self.error = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` one after the other, decoding everything after each; stops at an error.
    fn decode_chunks<'a>(
        codec: &Codec,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<Vec<u8>>, CodecError> {
        let mut decoder = codec.decoder();
        let mut frames = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk);
            while let Some(frame) = decoder.decode()? {
                frames.push(frame);
            }
        }
        Ok(frames)
    }

    fn encode_all(codec: &Codec, frames: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for frame in frames {
            assert_eq!(codec.check_frame(frame), Ok(()));
            codec.encode_into(frame, &mut out);
        }
        out
    }

    /// Checks that `wire` decodes to `frames` when split at every point and fed byte by byte.
    fn assert_decodes_at_every_split(codec: &Codec, wire: &[u8], frames: &[&[u8]]) {
        let expected: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
        for split in 0..=wire.len() {
            let (a, b) = wire.split_at(split);
            assert_eq!(
                decode_chunks(codec, [a, b]),
                Ok(expected.clone()),
                "{split}"
            );
        }
        assert_eq!(decode_chunks(codec, wire.chunks(1)), Ok(expected));
    }

    #[test]
    fn names_are_raw_len32_and_lines() {
        assert_eq!(Codec::Raw.name(), "raw");
        assert_eq!(Codec::length_prefixed().name(), "len32");
        assert_eq!(Codec::lines().name(), "lines");
    }

    #[test]
    fn the_default_codec_is_raw_and_constructors_use_the_default_limits() {
        assert_eq!(Codec::default(), Codec::Raw);
        assert_eq!(
            Codec::length_prefixed(),
            Codec::LengthPrefixed {
                max_frame: 16 * 1024 * 1024
            }
        );
        assert_eq!(
            Codec::lines(),
            Codec::Lines {
                max_line: 64 * 1024
            }
        );
    }

    #[test]
    fn encoded_len_is_the_length_encode_into_appends() {
        for codec in [Codec::Raw, Codec::length_prefixed(), Codec::lines()] {
            for frame in [&b"x"[..], b"hello", &[7; 300]] {
                let mut out = vec![1, 2, 3];
                codec.encode_into(frame, &mut out);
                assert_eq!(out.len() - 3, codec.encoded_len(frame.len()), "{codec:?}");
                assert_eq!(out[..3], [1, 2, 3]);
            }
        }
        assert_eq!(Codec::length_prefixed().encoded_len(usize::MAX), usize::MAX);
    }

    #[test]
    fn len32_writes_a_big_endian_prefix() {
        let mut out = Vec::new();
        Codec::length_prefixed().encode_into(&[9; 258], &mut out);
        assert_eq!(out[..4], [0, 0, 1, 2]);
        assert_eq!(out.len(), 262);
    }

    #[test]
    fn raw_refuses_an_empty_frame() {
        assert_eq!(Codec::Raw.check_frame(b""), Err(FrameError::Empty));
        assert_eq!(Codec::Raw.check_frame(b"a"), Ok(()));
    }

    #[test]
    fn len32_refuses_a_frame_above_max_frame_and_accepts_one_at_it() {
        let codec = Codec::LengthPrefixed { max_frame: 3 };
        assert_eq!(codec.check_frame(b"abc"), Ok(()));
        assert_eq!(codec.check_frame(b""), Ok(()));
        assert_eq!(
            codec.check_frame(b"abcd"),
            Err(FrameError::TooLarge { len: 4, max: 3 })
        );
    }

    #[test]
    fn lines_refuses_a_frame_above_max_line_or_with_a_newline() {
        let codec = Codec::Lines { max_line: 3 };
        assert_eq!(codec.check_frame(b"abc"), Ok(()));
        assert_eq!(codec.check_frame(b""), Ok(()));
        assert_eq!(codec.check_frame(b"ab\r"), Ok(()));
        assert_eq!(
            codec.check_frame(b"abcd"),
            Err(FrameError::TooLarge { len: 4, max: 3 })
        );
        assert_eq!(codec.check_frame(b"a\n"), Err(FrameError::ContainsNewline));
        assert_eq!(codec.check_frame(b"\n"), Err(FrameError::ContainsNewline));
    }

    #[test]
    fn raw_returns_every_byte_fed_at_every_split_point() {
        let wire = b"hello, world: any bytes \0\n\r\xff at all";
        for split in 0..=wire.len() {
            let (a, b) = wire.split_at(split);
            let frames = decode_chunks(&Codec::Raw, [a, b]).unwrap();
            assert_eq!(frames.concat(), wire, "{split}");
            assert!(frames.iter().all(|f| !f.is_empty()));
            let expected = usize::from(!a.is_empty()) + usize::from(!b.is_empty());
            assert_eq!(frames.len(), expected);
        }
    }

    #[test]
    fn raw_returns_each_byte_fed_one_at_a_time_as_a_frame() {
        let wire = b"abc\n\0def";
        let frames = decode_chunks(&Codec::Raw, wire.chunks(1)).unwrap();
        let expected: Vec<Vec<u8>> = wire.iter().map(|&b| vec![b]).collect();
        assert_eq!(frames, expected);
    }

    #[test]
    fn raw_returns_chunks_fed_before_a_decode_as_one_frame() {
        let mut decoder = Codec::Raw.decoder();
        decoder.feed(b"ab");
        decoder.feed(b"");
        decoder.feed(b"cd");
        assert_eq!(decoder.buffered(), 4);
        assert_eq!(decoder.decode(), Ok(Some(b"abcd".to_vec())));
        assert_eq!(decoder.buffered(), 0);
        assert_eq!(decoder.decode(), Ok(None));
        decoder.feed(b"");
        assert_eq!(decoder.decode(), Ok(None));
    }

    #[test]
    fn len32_decodes_the_same_frames_at_every_split_point() {
        let codec = Codec::LengthPrefixed { max_frame: 300 };
        let frames: &[&[u8]] = &[b"hello", b"", b"\0\0\0\x05", &[0xab; 300], b"x", b""];
        let wire = encode_all(&codec, frames);
        assert_decodes_at_every_split(&codec, &wire, frames);
    }

    #[test]
    fn len32_accepts_empty_frames() {
        let codec = Codec::length_prefixed();
        let mut decoder = codec.decoder();
        decoder.feed(&[0; 12]);
        for _ in 0..3 {
            assert_eq!(decoder.decode(), Ok(Some(Vec::new())));
        }
        assert_eq!(decoder.decode(), Ok(None));
        assert_eq!(decoder.buffered(), 0);
    }

    #[test]
    fn len32_accepts_a_frame_of_exactly_max_frame() {
        let codec = Codec::LengthPrefixed { max_frame: 4 };
        let mut decoder = codec.decoder();
        decoder.feed(b"\0\0\0\x04abcd");
        assert_eq!(decoder.decode(), Ok(Some(b"abcd".to_vec())));
    }

    #[test]
    fn len32_refuses_an_oversize_prefix_as_soon_as_its_four_bytes_are_in() {
        let codec = Codec::LengthPrefixed { max_frame: 4 };
        let mut decoder = codec.decoder();
        decoder.feed(b"\0\0\0");
        assert_eq!(decoder.decode(), Ok(None));
        decoder.feed(b"\x05");
        assert_eq!(
            decoder.decode(),
            Err(CodecError::FrameTooLarge { len: 5, max: 4 })
        );
    }

    #[test]
    fn len32_refuses_a_4_gib_prefix_without_allocating() {
        let mut decoder = Codec::length_prefixed().decoder();
        decoder.feed(&[0xff; 4]);
        decoder.feed(b"some payload");
        let before = decoder.buf.capacity();
        assert_eq!(
            decoder.decode(),
            Err(CodecError::FrameTooLarge {
                len: 0xffff_ffff,
                max: Codec::DEFAULT_MAX_FRAME
            })
        );
        assert!(before < 1024, "{before}");
        assert_eq!(decoder.buf.capacity(), 0);
        assert_eq!(decoder.buffered(), 0);
    }

    #[test]
    fn len32_does_not_reserve_the_announced_length_while_a_frame_arrives() {
        let mut decoder = Codec::LengthPrefixed {
            max_frame: u32::MAX as usize,
        }
        .decoder();
        decoder.feed(&[0xff; 4]);
        decoder.feed(b"abc");
        assert_eq!(decoder.decode(), Ok(None));
        assert_eq!(decoder.buffered(), 7);
        assert!(decoder.buf.capacity() < 1024);
    }

    #[test]
    fn lines_decodes_the_same_frames_at_every_split_point() {
        let codec = Codec::Lines { max_line: 300 };
        let long = [b'y'; 300];
        let frames: &[&[u8]] = &[b"hello", b"", b"a\rb", &long, b"\r\r x", b""];
        let wire = encode_all(&codec, frames);
        assert_decodes_at_every_split(&codec, &wire, frames);
    }

    #[test]
    fn lines_strips_a_carriage_return_before_the_newline_at_every_split_point() {
        let codec = Codec::Lines { max_line: 10 };
        let wire = b"one\r\n\r\ntwo\r\r\nthree\n";
        assert_decodes_at_every_split(&codec, wire, &[b"one", b"", b"two\r", b"three"]);
    }

    #[test]
    fn lines_accepts_empty_lines() {
        let mut decoder = Codec::Lines { max_line: 0 }.decoder();
        decoder.feed(b"\n\n\r\n");
        for _ in 0..2 {
            assert_eq!(decoder.decode(), Ok(Some(Vec::new())));
        }
        // "\r" is one byte before the newline: above a max_line of 0
        assert_eq!(decoder.decode(), Err(CodecError::LineTooLong { max: 0 }));
    }

    #[test]
    fn lines_accepts_a_line_of_exactly_max_line() {
        let mut decoder = Codec::Lines { max_line: 4 }.decoder();
        decoder.feed(b"abcd");
        assert_eq!(decoder.decode(), Ok(None));
        decoder.feed(b"\nab\r\n");
        assert_eq!(decoder.decode(), Ok(Some(b"abcd".to_vec())));
        assert_eq!(decoder.decode(), Ok(Some(b"ab".to_vec())));
    }

    #[test]
    fn lines_refuses_a_line_as_soon_as_it_passes_max_line() {
        let mut decoder = Codec::Lines { max_line: 4 }.decoder();
        decoder.feed(b"ok\nabcd");
        assert_eq!(decoder.decode(), Ok(Some(b"ok".to_vec())));
        assert_eq!(decoder.decode(), Ok(None));
        decoder.feed(b"e");
        assert_eq!(decoder.decode(), Err(CodecError::LineTooLong { max: 4 }));
    }

    #[test]
    fn lines_refuses_a_long_line_even_when_its_newline_came_with_it() {
        let mut decoder = Codec::Lines { max_line: 4 }.decoder();
        decoder.feed(b"abcdefgh\n");
        assert_eq!(decoder.decode(), Err(CodecError::LineTooLong { max: 4 }));
    }

    #[test]
    fn lines_counts_a_carriage_return_toward_max_line() {
        let mut decoder = Codec::Lines { max_line: 4 }.decoder();
        decoder.feed(b"abc\r\nabcd\r\n");
        assert_eq!(decoder.decode(), Ok(Some(b"abc".to_vec())));
        assert_eq!(decoder.decode(), Err(CodecError::LineTooLong { max: 4 }));
    }

    #[test]
    fn lines_resumes_the_newline_scan_where_it_stopped() {
        // The decoder's framing keeps its scan position: a line that grows byte by byte is
        // found once its newline arrives, and the decoder starts the next one clean.
        let mut decoder = Codec::lines().decoder();
        for i in 1..=100 {
            decoder.feed(b"z");
            assert_eq!(decoder.decode(), Ok(None));
            assert_eq!(decoder.buffered(), i);
        }
        decoder.feed(b"\n");
        assert_eq!(decoder.decode(), Ok(Some(vec![b'z'; 100])));
        decoder.feed(b"y\n");
        assert_eq!(decoder.decode(), Ok(Some(b"y".to_vec())));
    }

    #[test]
    fn the_buffer_is_compacted_as_frames_are_taken() {
        let codec = Codec::length_prefixed();
        let wire = encode_all(&codec, &[&b"0123456789"[..]; 1000]);
        let mut decoder = codec.decoder();
        let mut count = 0;
        for chunk in wire.chunks(37) {
            decoder.feed(chunk);
            assert!(decoder.buf.len() <= 2 * (14 + 37), "{}", decoder.buf.len());
            while let Some(frame) = decoder.decode().unwrap() {
                assert_eq!(frame, &b"0123456789"[..]);
                count += 1;
            }
        }
        assert_eq!(count, 1000);
    }

    #[test]
    fn a_decoder_is_poisoned_after_an_error() {
        for (codec, wire, error) in [
            (
                Codec::LengthPrefixed { max_frame: 1 },
                &b"\0\0\0\x02ab\0\0\0\0"[..],
                CodecError::FrameTooLarge { len: 2, max: 1 },
            ),
            (
                Codec::Lines { max_line: 1 },
                &b"abc\n\n"[..],
                CodecError::LineTooLong { max: 1 },
            ),
        ] {
            let mut decoder = codec.decoder();
            decoder.feed(wire);
            assert_eq!(decoder.decode(), Err(error));
            assert_eq!(decoder.buffered(), 0);
            decoder.feed(&[0; 8]);
            decoder.feed(b"\n");
            assert_eq!(decoder.buffered(), 0);
            assert_eq!(decoder.decode(), Err(error));
            assert_eq!(decoder.decode(), Err(error));
        }
    }

    #[test]
    fn reset_clears_buffered_bytes_and_the_error() {
        let mut decoder = Codec::LengthPrefixed { max_frame: 4 }.decoder();
        decoder.feed(b"\0\0\0\x03ab");
        assert_eq!(decoder.decode(), Ok(None));
        decoder.reset();
        assert_eq!(decoder.buffered(), 0);
        decoder.feed(b"\0\0\0\x01z");
        assert_eq!(decoder.decode(), Ok(Some(b"z".to_vec())));

        decoder.feed(b"\0\0\0\x09");
        assert!(decoder.decode().is_err());
        decoder.reset();
        assert_eq!(decoder.decode(), Ok(None));
        decoder.feed(b"\0\0\0\x00");
        assert_eq!(decoder.decode(), Ok(Some(Vec::new())));

        let mut lines = Codec::Lines { max_line: 4 }.decoder();
        lines.feed(b"abc");
        assert_eq!(lines.decode(), Ok(None));
        lines.reset();
        assert_eq!(lines.buffered(), 0);
        lines.feed(b"d\n");
        assert_eq!(lines.decode(), Ok(Some(b"d".to_vec())));
    }
}
