//! Length-delimited frames: a length field (fixed width or varint) before each frame.

use bytes::{Buf, Bytes, BytesMut};

use super::{DecodeError, EncodeError, Framing, DEFAULT_MAX_FRAME};
use crate::error::ConfigError;

/// How the length field is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// `width` bytes, big or little endian.
    Fixed { width: usize, big_endian: bool },
    /// LEB128 / MQTT "variable byte integer": 7 bits a byte, least significant group first,
    /// the high bit set on every byte but the last; at most `max_bytes` bytes.
    Varint { max_bytes: usize },
}

/// Frames preceded by a length field, configured like tokio-util's `LengthDelimitedCodec`.
///
/// On the wire a frame is `head ++ length field ++ payload`, where `head` is
/// [`length_field_offset`](LengthDelimitedBuilder::length_field_offset) bytes the framing does
/// not interpret (a type byte, say), and the length field's value plus the
/// [`length_adjustment`](LengthDelimitedBuilder::length_adjustment) is the payload's length.
///
/// - **Decode** returns the wire bytes of a frame from
///   [`num_skip`](LengthDelimitedBuilder::num_skip) on; by default everything up to the end
///   of the length field is skipped and only the payload is returned.
/// - **Encode** takes a frame that starts with the `head` bytes (none when the offset is 0,
///   the usual case), and writes those bytes, the length field (the payload's length minus
///   the adjustment), then the payload. With the default settings and an offset of 0,
///   decoding what was encoded gives the frame back; with an offset, the decoder returns the
///   head only when `num_skip` keeps it.
///
/// Unlike tokio-util, the adjustment always relates the field to the bytes that follow the
/// field, whatever `num_skip` is.
///
/// # Examples
///
/// Today's `len32`: a 4-byte big-endian length, then the frame.
///
/// ```
/// use relink::bytes::BytesMut;
/// use relink::framing::{Framing, LengthDelimited};
///
/// let mut len32 = LengthDelimited::len32();
/// let mut wire = Vec::new();
/// len32.encode(b"hello", &mut wire)?;
/// assert_eq!(wire, b"\0\0\0\x05hello");
/// let mut src = BytesMut::from(&wire[..]);
/// assert_eq!(len32.decode(&mut src)?.as_deref(), Some(&b"hello"[..]));
///
/// // A 2-byte little-endian length that counts its own two bytes.
/// let mut le = LengthDelimited::builder()
///     .length_field_length(2)
///     .little_endian()
///     .length_adjustment(-2)
///     .build()?;
/// let mut wire = Vec::new();
/// le.encode(b"abc", &mut wire)?;
/// assert_eq!(wire, b"\x05\0abc");
///
/// // MQTT: a type byte, then the remaining length as a varint of at most 4 bytes; the
/// // decoder keeps the whole packet.
/// let mut mqtt = LengthDelimited::builder()
///     .length_field_offset(1)
///     .varint()
///     .num_skip(Some(0))
///     .build()?;
/// let mut src = BytesMut::from(&b"\xc0\x00\xd0\x00"[..]); // PINGREQ, PINGRESP
/// assert_eq!(mqtt.decode(&mut src)?.as_deref(), Some(&b"\xc0\x00"[..]));
/// assert_eq!(mqtt.decode(&mut src)?.as_deref(), Some(&b"\xd0\x00"[..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LengthDelimited {
    offset: usize,
    field: Field,
    adjustment: isize,
    num_skip: Option<usize>,
    /// The largest payload read or written: the setting clamped to what the field can carry.
    max_payload: usize,
    /// The smallest payload that can be written (a positive adjustment).
    min_payload: usize,
}

/// Builds a [`LengthDelimited`] framing; made by [`LengthDelimited::builder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LengthDelimitedBuilder {
    offset: usize,
    width: usize,
    big_endian: bool,
    varint: Option<usize>,
    adjustment: isize,
    num_skip: Option<usize>,
    max_frame_length: usize,
}

impl LengthDelimited {
    /// A builder with the defaults: offset 0, a 4-byte big-endian field, no adjustment, the
    /// field stripped, frames of at most 16 MiB.
    pub fn builder() -> LengthDelimitedBuilder {
        LengthDelimitedBuilder {
            offset: 0,
            width: 4,
            big_endian: true,
            varint: None,
            adjustment: 0,
            num_skip: None,
            max_frame_length: DEFAULT_MAX_FRAME,
        }
    }

    /// Today's `len32`: a `u32` big-endian length then the frame, frames of at most 16 MiB.
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::framing::{Framing, LengthDelimited};
    ///
    /// assert_eq!(LengthDelimited::len32().name(), "len32");
    /// assert_eq!(LengthDelimited::len32(), LengthDelimited::builder().build().unwrap());
    /// ```
    pub fn len32() -> LengthDelimited {
        match LengthDelimited::builder().build() {
            Ok(framing) => framing,
            Err(_) => unreachable!("the default settings are valid"),
        }
    }

    /// The number of bytes of the length field, or the most it can take (varint).
    fn field_max_len(&self) -> usize {
        match self.field {
            Field::Fixed { width, .. } => width,
            Field::Varint { max_bytes } => max_bytes,
        }
    }

    #[inline]
    /// Reads the length field at `offset`: its value and its length in bytes, `None` when
    /// more bytes are needed.
    fn read_field(&self, src: &[u8]) -> Result<Option<(u64, usize)>, DecodeError> {
        let bytes = src.get(self.offset..).unwrap_or(&[]);
        match self.field {
            Field::Fixed { width, big_endian } => {
                let Some(field) = bytes.get(..width) else {
                    return Ok(None);
                };
                let value = read_uint(field, big_endian);
                Ok(Some((value, width)))
            }
            Field::Varint { max_bytes } => {
                let mut value = 0u64;
                for i in 0..max_bytes {
                    let Some(&b) = bytes.get(i) else {
                        return Ok(None);
                    };
                    value |= u64::from(b & 0x7f) << (7 * i);
                    if b & 0x80 == 0 {
                        if i > 0 && b == 0 {
                            return Err(DecodeError::Malformed("overlong varint length"));
                        }
                        return Ok(Some((value, i + 1)));
                    }
                }
                Err(DecodeError::Malformed(
                    "varint length longer than its maximum",
                ))
            }
        }
    }

    /// Appends the length field for a payload of `len` bytes (checked before, so the value
    /// is neither negative nor too large for the field).
    #[inline]
    fn write_field(&self, len: usize, dst: &mut Vec<u8>) {
        let value = (len as u64).wrapping_sub(self.adjustment as i64 as u64);
        match self.field {
            Field::Fixed { width, big_endian } => {
                write_uint(value, width, big_endian, dst);
            }
            Field::Varint { .. } => {
                let mut v = value;
                loop {
                    let b = (v & 0x7f) as u8;
                    v >>= 7;
                    if v == 0 {
                        dst.push(b);
                        break;
                    }
                    dst.push(b | 0x80);
                }
            }
        }
    }
}

/// Reads an unsigned integer of 1 to 8 bytes (constant-size reads for the usual widths).
#[inline]
fn read_uint(field: &[u8], big_endian: bool) -> u64 {
    macro_rules! read {
        ($t:ty, $n:literal) => {{
            let mut bytes = [0u8; $n];
            bytes.copy_from_slice(field);
            u64::from(if big_endian {
                <$t>::from_be_bytes(bytes)
            } else {
                <$t>::from_le_bytes(bytes)
            })
        }};
    }
    match field.len() {
        1 => u64::from(field[0]),
        2 => read!(u16, 2),
        4 => read!(u32, 4),
        8 => read!(u64, 8),
        _ if big_endian => field.iter().fold(0, |v, &b| (v << 8) | u64::from(b)),
        _ => field.iter().rev().fold(0, |v, &b| (v << 8) | u64::from(b)),
    }
}

/// Appends `value` as an unsigned integer of `width` bytes (it fits: checked before).
#[inline]
fn write_uint(value: u64, width: usize, big_endian: bool, dst: &mut Vec<u8>) {
    macro_rules! write {
        ($t:ty) => {{
            let v = value as $t;
            dst.extend_from_slice(&if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            })
        }};
    }
    match width {
        1 => dst.push(value as u8),
        2 => write!(u16),
        4 => write!(u32),
        8 => write!(u64),
        _ => {
            let all = value.to_be_bytes();
            let field = &all[8 - width..];
            if big_endian {
                dst.extend_from_slice(field);
            } else {
                dst.extend(field.iter().rev());
            }
        }
    }
}

impl LengthDelimitedBuilder {
    /// Bytes before the length field, which the framing does not interpret. A frame given to
    /// encode must start with them. Defaults to 0.
    pub fn length_field_offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// The width of the length field in bytes: 1, 2, 3, 4 or 8 (others are refused by
    /// [`build`](Self::build)). Leaves varint mode. Defaults to 4.
    pub fn length_field_length(mut self, width: usize) -> Self {
        self.width = width;
        self.varint = None;
        self
    }

    /// The length field is big endian (network order). The default.
    pub fn big_endian(mut self) -> Self {
        self.big_endian = true;
        self
    }

    /// The length field is little endian. Defaults to big endian.
    pub fn little_endian(mut self) -> Self {
        self.big_endian = false;
        self
    }

    /// The length field is a varint (LEB128, as MQTT's remaining length and protobuf's
    /// lengths): 7 bits a byte, least significant first, the high bit set on every byte but
    /// the last, at most 4 bytes (change with [`varint_max_bytes`](Self::varint_max_bytes)).
    /// An overlong encoding (a last byte of zero after the first) is a decode error.
    pub fn varint(mut self) -> Self {
        self.varint = Some(self.varint.unwrap_or(4));
        self
    }

    /// Varint mode with at most `max_bytes` bytes (1 to 9; MQTT uses 4, a `u32` needs 5).
    /// Defaults to 4 once [`varint`](Self::varint) is chosen.
    pub fn varint_max_bytes(mut self, max_bytes: usize) -> Self {
        self.varint = Some(max_bytes);
        self
    }

    /// Added to the field's value to give the payload's length: `-2` for a 2-byte field that
    /// counts itself, `-(offset + width)` for one that counts the whole header. Defaults to 0.
    pub fn length_adjustment(mut self, adjustment: isize) -> Self {
        self.adjustment = adjustment;
        self
    }

    /// How many bytes from the start of a frame's wire bytes decode drops; `None` (the
    /// default) drops the head and the length field, returning the payload alone. At most
    /// the offset plus the field's width (in varint mode: at most the offset).
    pub fn num_skip(mut self, num_skip: Option<usize>) -> Self {
        self.num_skip = num_skip;
        self
    }

    /// The largest payload (the bytes after the length field) read or written. A larger value
    /// than the field can express is clamped to what it can. Defaults to 16 MiB.
    pub fn max_frame_length(mut self, max: usize) -> Self {
        self.max_frame_length = max;
        self
    }

    /// The framing.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadFraming`] for a width other than 1, 2, 3, 4 or 8, a varint of 0 or
    /// more than 9 bytes, a `num_skip` past the length field, or an adjustment that leaves no
    /// length the field can carry; [`ConfigError::ZeroLimit`] for a `max_frame_length` of 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::framing::LengthDelimited;
    /// use relink::error::ConfigError;
    ///
    /// assert!(matches!(
    ///     LengthDelimited::builder().length_field_length(5).build(),
    ///     Err(ConfigError::BadFraming { .. })
    /// ));
    /// assert!(LengthDelimited::builder().max_frame_length(0).build().is_err());
    /// ```
    pub fn build(self) -> Result<LengthDelimited, ConfigError> {
        let field = match self.varint {
            Some(max_bytes) if (1..=9).contains(&max_bytes) => Field::Varint { max_bytes },
            Some(_) => {
                return Err(ConfigError::BadFraming {
                    setting: "varint_max_bytes",
                    reason: "must be 1 to 9",
                })
            }
            None if matches!(self.width, 1 | 2 | 3 | 4 | 8) => Field::Fixed {
                width: self.width,
                big_endian: self.big_endian,
            },
            None => {
                return Err(ConfigError::BadFraming {
                    setting: "length_field_length",
                    reason: "must be 1, 2, 3, 4 or 8",
                })
            }
        };
        if self.max_frame_length == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "max_frame_length",
            });
        }
        let skip_max = match field {
            Field::Fixed { width, .. } => self.offset.saturating_add(width),
            Field::Varint { .. } => self.offset,
        };
        if self.num_skip.is_some_and(|n| n > skip_max) {
            return Err(ConfigError::BadFraming {
                setting: "num_skip",
                reason: "skips past the length field",
            });
        }
        let field_max: i128 = match field {
            Field::Fixed { width, .. } => (1i128 << (8 * width)) - 1,
            Field::Varint { max_bytes } => (1i128 << (7 * max_bytes)) - 1,
        };
        let adjustment = self.adjustment as i128;
        let field_len = match field {
            Field::Fixed { width, .. } => width,
            Field::Varint { max_bytes } => max_bytes,
        };
        // A whole frame (head, field, payload) must have a length: the payload leaves room.
        let room = (usize::MAX as i128) - (self.offset as i128) - (field_len as i128);
        let max_payload = (field_max + adjustment)
            .min(self.max_frame_length as i128)
            .min(room);
        let min_payload = adjustment.max(0);
        if max_payload < min_payload.max(0) || max_payload < 0 {
            return Err(ConfigError::BadFraming {
                setting: "length_adjustment",
                reason: "leaves no length the field can carry",
            });
        }
        Ok(LengthDelimited {
            offset: self.offset,
            field,
            adjustment: self.adjustment,
            num_skip: self.num_skip,
            max_payload: usize::try_from(max_payload).unwrap_or(usize::MAX),
            min_payload: usize::try_from(min_payload).unwrap_or(usize::MAX),
        })
    }
}

impl Framing for LengthDelimited {
    #[inline]
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.reserve(frame.len() + self.field_max_len());
        let (head, payload) = frame.split_at(self.offset);
        dst.extend_from_slice(head);
        self.write_field(payload.len(), dst);
        dst.extend_from_slice(payload);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let Some((value, field_len)) = self.read_field(src)? else {
            return Ok(None);
        };
        // Every sum is checked: a length past what a frame can have is too large.
        let payload = i128::from(value) + self.adjustment as i128;
        if payload < 0 {
            return Err(DecodeError::Malformed("length field below the adjustment"));
        }
        let too_large = DecodeError::FrameTooLarge {
            len: u64::try_from(payload).unwrap_or(u64::MAX),
            max: self.max_payload,
        };
        let header = self.offset + field_len;
        let total = match usize::try_from(payload) {
            Ok(payload) if payload <= self.max_payload => header.checked_add(payload),
            _ => None,
        };
        let Some(total) = total else {
            return Err(too_large);
        };
        if src.len() < total {
            return Ok(None);
        }
        let skip = self.num_skip.unwrap_or(header);
        src.advance(skip);
        Ok(Some(src.split_to(total - skip).freeze()))
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        let len = frame.len();
        let Some(payload) = len.checked_sub(self.offset) else {
            return Err(EncodeError::TooShort {
                len,
                min: self.offset + self.min_payload,
            });
        };
        if payload < self.min_payload {
            return Err(EncodeError::TooShort {
                len,
                min: self.offset + self.min_payload,
            });
        }
        if payload > self.max_payload {
            return Err(EncodeError::TooLarge {
                len,
                max: self.offset.saturating_add(self.max_payload),
            });
        }
        Ok(())
    }

    /// The head, the longest field and the largest payload.
    fn max_buffered(&self) -> usize {
        self.offset
            .saturating_add(self.field_max_len())
            .saturating_add(self.max_payload)
    }

    fn name(&self) -> &str {
        match self.field {
            Field::Varint { .. } => "varint",
            Field::Fixed {
                width: 4,
                big_endian: true,
            } if self.offset == 0 && self.adjustment == 0 && self.num_skip.is_none() => "len32",
            Field::Fixed { .. } => "length",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::framing::testkit::{assert_every_split, decode_chunks, encode_all};

    fn build(b: LengthDelimitedBuilder) -> LengthDelimited {
        b.build().expect("valid settings")
    }

    #[test]
    fn len32_writes_a_big_endian_u32_then_the_frame() {
        let mut len32 = LengthDelimited::len32();
        assert_eq!(
            encode_all(&mut len32, &[b"hello", b""]),
            b"\0\0\0\x05hello\0\0\0\0"
        );
        assert_eq!(len32.max_buffered(), 4 + DEFAULT_MAX_FRAME);
    }

    #[test]
    fn len32_accepts_empty_frames() {
        assert_eq!(
            decode_chunks(&mut LengthDelimited::len32(), [&[0u8; 12][..]]),
            Ok(vec![Vec::new(); 3])
        );
    }

    #[test]
    fn len32_refuses_a_4_gib_prefix_at_once_without_reserving_it() {
        let mut src = BytesMut::with_capacity(64);
        src.extend_from_slice(&[0xff; 4]);
        src.extend_from_slice(b"some payload");
        assert_eq!(
            LengthDelimited::len32().decode(&mut src),
            Err(DecodeError::FrameTooLarge {
                len: 0xffff_ffff,
                max: DEFAULT_MAX_FRAME
            })
        );
        assert!(src.capacity() < 1024, "{}", src.capacity());
    }

    #[test]
    fn the_receive_buffer_stays_small_as_frames_are_cut_from_it() {
        let mut len32 = LengthDelimited::len32();
        let wire = encode_all(&mut len32.clone(), &[&b"0123456789"[..]; 1000]);
        let mut src = BytesMut::new();
        let mut count = 0;
        for chunk in wire.chunks(37) {
            src.extend_from_slice(chunk);
            assert!(src.len() <= 2 * (14 + 37), "{}", src.len());
            while let Some(frame) = len32.decode(&mut src).unwrap() {
                assert_eq!(frame, &b"0123456789"[..]);
                count += 1;
            }
        }
        assert_eq!(count, 1000);
    }

    #[test]
    fn a_decoded_frame_shares_the_receive_buffer() {
        let mut src = BytesMut::with_capacity(64);
        src.extend_from_slice(b"\0\0\0\x05hello\0\0\0\x01x");
        let start = src.as_ptr() as usize;
        let frame = LengthDelimited::len32().decode(&mut src).unwrap().unwrap();
        assert_eq!(
            frame.as_ptr() as usize,
            start + 4,
            "cut from the buffer, not copied"
        );
    }

    #[test]
    fn every_width_and_byte_order_round_trips_at_every_split_point() {
        let long = [0xab; 300];
        for width in [1, 2, 3, 4, 8] {
            for little in [false, true] {
                let mut b = LengthDelimited::builder().length_field_length(width);
                if little {
                    b = b.little_endian();
                }
                let framing = build(b.max_frame_length(300));
                let frames: &[&[u8]] = if width == 1 {
                    &[b"hello", b"", b"\0\0\0\x05", b"x"]
                } else {
                    &[b"hello", b"", &long, b"x"]
                };
                let wire = encode_all(&mut framing.clone(), frames);
                assert_eq!(
                    wire.len(),
                    frames.iter().map(|f| f.len() + width).sum::<usize>()
                );
                assert_every_split(&framing, &wire, frames);
            }
        }
    }

    #[test]
    fn a_two_byte_little_endian_field_is_written_low_byte_first() {
        let mut le = build(
            LengthDelimited::builder()
                .length_field_length(2)
                .little_endian(),
        );
        assert_eq!(encode_all(&mut le, &[&[7u8; 258]])[..2], [2, 1]);
        let mut be = build(LengthDelimited::builder().length_field_length(3));
        assert_eq!(encode_all(&mut be, &[&[7u8; 258]])[..3], [0, 1, 2]);
    }

    #[test]
    fn a_length_that_counts_its_own_header_round_trips() {
        let framing = build(
            LengthDelimited::builder()
                .length_field_length(2)
                .length_adjustment(-2),
        );
        let wire = encode_all(&mut framing.clone(), &[b"abc", b""]);
        assert_eq!(wire, b"\0\x05abc\0\x02");
        assert_every_split(&framing, &wire, &[b"abc", b""]);
    }

    #[test]
    fn a_length_below_the_adjustment_is_malformed() {
        let mut framing = build(
            LengthDelimited::builder()
                .length_field_length(1)
                .length_adjustment(-2),
        );
        assert_eq!(
            decode_chunks(&mut framing, [&b"\x01a"[..]]),
            Err(DecodeError::Malformed("length field below the adjustment"))
        );
    }

    #[test]
    fn the_head_before_the_field_comes_from_the_frame_and_is_skipped_by_default() {
        let mut framing = build(
            LengthDelimited::builder()
                .length_field_offset(1)
                .length_field_length(2),
        );
        let wire = encode_all(&mut framing, &[b"\x07abc"]);
        assert_eq!(wire, b"\x07\0\x03abc");
        assert_every_split(&framing, &wire, &[b"abc"]);
        for (skip, frame) in [(0, &wire[..]), (1, &wire[1..]), (3, &wire[3..])] {
            let keep = build(
                LengthDelimited::builder()
                    .length_field_offset(1)
                    .length_field_length(2)
                    .num_skip(Some(skip)),
            );
            assert_every_split(&keep, &wire, &[frame]);
        }
        assert_eq!(
            framing.check(b""),
            Err(EncodeError::TooShort { len: 0, min: 1 })
        );
    }

    #[test]
    fn a_positive_adjustment_refuses_frames_shorter_than_it() {
        let mut framing = build(
            LengthDelimited::builder()
                .length_field_length(1)
                .length_adjustment(2),
        );
        assert_eq!(
            framing.check(b"a"),
            Err(EncodeError::TooShort { len: 1, min: 2 })
        );
        let wire = encode_all(&mut framing, &[b"abc"]);
        assert_eq!(wire, b"\x01abc");
        assert_every_split(&framing, &wire, &[b"abc"]);
    }

    #[test]
    fn varint_writes_mqtt_remaining_lengths() {
        let mut framing = build(LengthDelimited::builder().varint());
        for (len, field) in [
            (0usize, &b"\x00"[..]),
            (127, b"\x7f"),
            (128, b"\x80\x01"),
            (16_383, b"\xff\x7f"),
            (16_384, b"\x80\x80\x01"),
            (2_097_152, b"\x80\x80\x80\x01"),
        ] {
            let frame = vec![1u8; len];
            let wire = encode_all(&mut framing, &[&frame]);
            assert_eq!(&wire[..field.len()], field, "{len}");
            assert_eq!(decode_chunks(&mut framing, [&wire[..]]), Ok(vec![frame]));
        }
    }

    #[test]
    fn varint_refuses_an_overlong_or_too_long_length() {
        let mut framing = build(LengthDelimited::builder().varint());
        assert_eq!(
            decode_chunks(&mut framing, [&b"\x80\x00"[..]]),
            Err(DecodeError::Malformed("overlong varint length"))
        );
        assert_eq!(
            decode_chunks(&mut framing, [&b"\x80\x80\x80\x80\x01"[..]]),
            Err(DecodeError::Malformed(
                "varint length longer than its maximum"
            ))
        );
        let mut five = build(
            LengthDelimited::builder()
                .varint_max_bytes(5)
                .max_frame_length(usize::MAX),
        );
        assert_eq!(
            decode_chunks(&mut five, [&b"\x80\x80\x80\x80\x01"[..]]),
            Ok(vec![])
        );
    }

    #[test]
    fn an_oversize_length_is_refused_once_the_field_is_in_and_nothing_is_reserved() {
        let mut framing = build(LengthDelimited::builder().max_frame_length(4));
        let mut src = BytesMut::from(&b"\0\0\0"[..]);
        assert_eq!(framing.decode(&mut src), Ok(None));
        src.extend_from_slice(b"\x05");
        assert_eq!(
            framing.decode(&mut src),
            Err(DecodeError::FrameTooLarge { len: 5, max: 4 })
        );

        let mut big = build(
            LengthDelimited::builder()
                .length_field_length(8)
                .max_frame_length(usize::MAX),
        );
        let mut src = BytesMut::with_capacity(16);
        src.extend_from_slice(&[0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0xff, 1, 2]);
        assert_eq!(big.decode(&mut src), Ok(None));
        assert!(src.capacity() < 1024, "{}", src.capacity());
    }

    /// Decodes `wire` with `framing`, as one chunk.
    fn decode_once(
        framing: &mut LengthDelimited,
        wire: &[u8],
    ) -> Result<Option<Bytes>, DecodeError> {
        let mut src = BytesMut::from(wire);
        framing.decode(&mut src)
    }

    #[test]
    fn an_eight_byte_length_of_all_ones_without_a_limit_is_too_large_not_a_panic() {
        let mut framing = build(
            LengthDelimited::builder()
                .length_field_length(8)
                .max_frame_length(usize::MAX),
        );
        let wire = [[0xff; 8].as_slice(), b"payload"].concat();
        assert!(matches!(
            decode_once(&mut framing, &wire),
            Err(DecodeError::FrameTooLarge { len: u64::MAX, .. })
        ));
    }

    #[test]
    fn a_kept_header_is_never_returned_as_a_frame_when_the_length_overflows() {
        let mut framing = build(
            LengthDelimited::builder()
                .length_field_length(8)
                .num_skip(Some(0))
                .max_frame_length(usize::MAX),
        );
        let wire = [[0xff; 8].as_slice(), b"payload"].concat();
        assert!(matches!(
            decode_once(&mut framing, &wire),
            Err(DecodeError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn a_large_positive_adjustment_that_overflows_the_length_is_too_large() {
        let mut framing = build(
            LengthDelimited::builder()
                .length_field_length(8)
                .length_adjustment(isize::MAX)
                .num_skip(Some(0))
                .max_frame_length(usize::MAX),
        );
        let wire = [[0xff; 8].as_slice(), b"payload"].concat();
        assert!(matches!(
            decode_once(&mut framing, &wire),
            Err(DecodeError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn a_varint_with_a_large_adjustment_that_overflows_the_length_is_too_large() {
        let mut framing = build(
            LengthDelimited::builder()
                .varint_max_bytes(9)
                .length_adjustment(isize::MAX)
                .num_skip(Some(0))
                .max_frame_length(usize::MAX),
        );
        let wire = [[0xff; 8].as_slice(), b"\x7fpayload"].concat();
        assert!(matches!(
            decode_once(&mut framing, &wire),
            Err(DecodeError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn the_largest_payload_leaves_room_for_the_header_in_max_buffered() {
        let framing = build(
            LengthDelimited::builder()
                .length_field_offset(3)
                .length_field_length(8)
                .max_frame_length(usize::MAX),
        );
        assert_eq!(framing.max_buffered(), usize::MAX);
        assert_eq!(framing.check(&[0; 3]), Ok(()));
    }

    #[test]
    fn a_max_the_width_cannot_express_is_clamped_to_it() {
        let framing = build(
            LengthDelimited::builder()
                .length_field_length(1)
                .max_frame_length(1000),
        );
        assert_eq!(framing.check(&[0; 255]), Ok(()));
        assert_eq!(
            framing.check(&[0; 256]),
            Err(EncodeError::TooLarge { len: 256, max: 255 })
        );
        assert_eq!(framing.max_buffered(), 256);
    }

    #[test]
    fn bad_settings_are_config_errors() {
        for width in [0, 5, 6, 7, 9] {
            assert!(matches!(
                LengthDelimited::builder()
                    .length_field_length(width)
                    .build(),
                Err(ConfigError::BadFraming {
                    setting: "length_field_length",
                    ..
                })
            ));
        }
        assert_eq!(
            LengthDelimited::builder().max_frame_length(0).build(),
            Err(ConfigError::ZeroLimit {
                name: "max_frame_length"
            })
        );
        for bytes in [0, 10] {
            assert!(LengthDelimited::builder()
                .varint_max_bytes(bytes)
                .build()
                .is_err());
        }
        assert!(LengthDelimited::builder()
            .num_skip(Some(5))
            .build()
            .is_err());
        assert!(LengthDelimited::builder()
            .varint()
            .length_field_offset(1)
            .num_skip(Some(2))
            .build()
            .is_err());
        assert!(LengthDelimited::builder()
            .length_field_length(1)
            .length_adjustment(-256)
            .build()
            .is_err());
    }
}
