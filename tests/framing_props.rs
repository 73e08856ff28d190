//! Property tests of the framings through the public api, each property once: round trips
//! split anywhere, noise that never panics, buffers past the limit nor returns more than was
//! fed, length sums that never overflow into a frame, the RESP decoder and parser in
//! agreement, bad settings, and a framing of one's own.
//!
//! Each property runs 256 cases per framing.

use proptest::prelude::*;
use proptest::sample::Index;
use relink::bytes::{Buf, Bytes, BytesMut};
use relink::error::ConfigError;
use relink::framing::{
    DecodeError, Delimited, EncodeError, Framing, LengthDelimited, Lines, Raw, Resp, RespReply,
    RespValue,
};

const CASES: u32 = 256;

/// What decoding an encoded frame gives back.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// The frame itself.
    Same,
    /// The frame without its first `n` bytes (a head the decoder skips).
    DropHead(usize),
    /// The frame's own wire bytes from `n` on (a decoder that keeps part of the header).
    WireFrom(usize),
    /// The frame without one trailing `\r` (LF lines).
    StripCr,
}

/// The framings under test, with small limits so that they are hit.
fn framings() -> Vec<(&'static str, Box<dyn Framing>, Expect)> {
    let len = |b: relink::framing::LengthDelimitedBuilder| {
        Box::new(b.build().unwrap()) as Box<dyn Framing>
    };
    let mut all: Vec<(&'static str, Box<dyn Framing>, Expect)> = Vec::new();
    for width in [1, 2, 3, 4, 8] {
        let b = LengthDelimited::builder()
            .length_field_length(width)
            .max_frame_length(40);
        all.push(("len be", len(b.clone()), Expect::Same));
        all.push(("len le", len(b.little_endian()), Expect::Same));
    }
    let two = LengthDelimited::builder()
        .length_field_length(2)
        .max_frame_length(40);
    all.extend([
        (
            "len counts header",
            len(two.clone().length_adjustment(-2)),
            Expect::Same,
        ),
        (
            "len offset 2",
            len(two.clone().length_field_offset(2)),
            Expect::DropHead(2),
        ),
        (
            "len offset 1 kept",
            len(two.length_field_offset(1).num_skip(Some(0))),
            Expect::WireFrom(0),
        ),
        ("len32", Box::new(LengthDelimited::len32()), Expect::Same),
        (
            "varint",
            len(LengthDelimited::builder().varint().max_frame_length(200)),
            Expect::Same,
        ),
        (
            "varint mqtt",
            len(LengthDelimited::builder()
                .length_field_offset(1)
                .varint()
                .num_skip(Some(0))
                .max_frame_length(200)),
            Expect::WireFrom(0),
        ),
        (
            "nul",
            Box::new(Delimited::builder(b"\0").max_length(40).build().unwrap()),
            Expect::Same,
        ),
        (
            "crlf delimited",
            Box::new(Delimited::builder(b"\r\n").max_length(40).build().unwrap()),
            Expect::Same,
        ),
        (
            "lines lf",
            Box::new(Lines::builder().max_length(40).build().unwrap()),
            Expect::StripCr,
        ),
        (
            "lines crlf",
            Box::new(Lines::builder().max_length(40).crlf(true).build().unwrap()),
            Expect::Same,
        ),
    ]);
    all
}

/// Bytes biased toward what matters to framings: zeros, CR, LF, RESP type bytes and digits.
fn bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
    const SPECIAL: &[u8] = b"\0\r\n\r\n*$+-:_#,(123-";
    prop::collection::vec(any::<u16>(), len).prop_map(|words| {
        words
            .into_iter()
            .map(|w| {
                let [hi, lo] = w.to_be_bytes();
                if hi < 96 {
                    SPECIAL[usize::from(lo) % SPECIAL.len()]
                } else {
                    lo
                }
            })
            .collect()
    })
}

/// Feeds `wire` cut at `cuts`, decoding every frame after each piece; checks the buffer bound.
fn decode_cut(
    framing: &mut dyn Framing,
    wire: &[u8],
    cuts: &[Index],
) -> Result<Vec<Vec<u8>>, DecodeError> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
    points.push(wire.len());
    points.sort_unstable();
    let mut src = BytesMut::new();
    let mut frames = Vec::new();
    let mut at = 0;
    for p in points {
        src.extend_from_slice(&wire[at..p]);
        at = p;
        while let Some(frame) = framing.decode(&mut src)? {
            frames.push(frame.to_vec());
        }
        assert!(src.len() <= framing.max_buffered());
    }
    Ok(frames)
}

fn expected(framing: &mut dyn Framing, frame: &[u8], expect: Expect) -> Vec<u8> {
    match expect {
        Expect::Same => frame.to_vec(),
        Expect::DropHead(n) => frame[n..].to_vec(),
        Expect::WireFrom(n) => {
            let mut wire = Vec::new();
            framing.encode(frame, &mut wire).unwrap();
            wire[n..].to_vec()
        }
        Expect::StripCr => frame.strip_suffix(b"\r").unwrap_or(frame).to_vec(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn every_framing_round_trips_frames_split_anywhere(
        frames in prop::collection::vec(bytes(0..48), 0..12),
        cuts in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        for (name, mut framing, expect) in framings() {
            let mut wire = Vec::new();
            let mut want = Vec::new();
            for frame in &frames {
                match framing.check(frame) {
                    Ok(()) => {
                        framing.encode(frame, &mut wire).unwrap();
                        want.push(expected(framing.as_mut(), frame, expect));
                    }
                    Err(e) => {
                        let before = wire.len();
                        prop_assert_eq!(framing.encode(frame, &mut wire), Err(e), "{}", name);
                        prop_assert_eq!(wire.len(), before);
                    }
                }
            }
            framing.reset();
            prop_assert_eq!(decode_cut(framing.as_mut(), &wire, &cuts), Ok(want), "{}", name);
        }
    }

    #[test]
    fn resp_commands_round_trip_as_whole_values_split_anywhere(
        commands in prop::collection::vec(prop::collection::vec(bytes(0..24), 1..5), 0..8),
        cuts in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        let mut resp = Resp::builder().max_frame(4096).build().unwrap();
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for args in &commands {
            let command = Resp::command(args);
            resp.encode(&command, &mut wire).unwrap();
            want.push(command);
        }
        prop_assert_eq!(decode_cut(&mut resp, &wire, &cuts), Ok(want));
    }

    #[test]
    fn arbitrary_bytes_never_panic_buffer_past_the_limit_nor_return_more_than_was_fed(
        noise in prop_oneof![bytes(0..400), len32_stream()],
        chunk in 1usize..64,
    ) {
        let mut all = framings();
        all.push(("resp", Box::new(Resp::builder().max_frame(64).max_depth(3).build().unwrap()), Expect::Same));
        all.push(("raw", Box::new(Raw::new()), Expect::Same));
        for (name, mut framing, _) in all {
            let mut src = BytesMut::new();
            let mut fed = 0;
            let mut out = Vec::new();
            'feed: for piece in noise.chunks(chunk) {
                src.extend_from_slice(piece);
                fed += piece.len();
                prop_assert!(src.len() <= framing.max_buffered() + chunk, "{}", name);
                loop {
                    match framing.decode(&mut src) {
                        Ok(Some(frame)) => {
                            prop_assert!(frame.len() <= framing.max_buffered(), "{}", name);
                            out.extend_from_slice(&frame);
                        }
                        Ok(None) => break,
                        Err(_) => break 'feed,
                    }
                }
                prop_assert!(src.len() <= framing.max_buffered(), "{} buffers {}", name, src.len());
                prop_assert!(out.len() + src.len() <= fed, "{} returns more than was fed", name);
            }
            if name == "raw" {
                prop_assert_eq!(&out[..], &noise[..], "raw returns every byte, in order");
            }
        }
    }
}

/// A stream of noise, len32 frames, and len32 frames whose body may not have the announced
/// length, so that every framing gets both frames and garbage.
fn len32_stream() -> impl Strategy<Value = Vec<u8>> {
    let prefixed = |len: u32, body: &[u8]| [&len.to_be_bytes()[..], body].concat();
    let segment = prop_oneof![
        1 => bytes(0..64),
        4 => bytes(0..64).prop_map(move |body| prefixed(body.len() as u32, &body)),
        1 => (0u32..64, bytes(0..64)).prop_map(move |(len, body)| prefixed(len, &body)),
    ];
    prop::collection::vec(segment, 0..12).prop_map(|segments| segments.concat())
}

#[test]
fn bad_framing_settings_are_config_errors() {
    assert!(matches!(
        LengthDelimited::builder().length_field_length(5).build(),
        Err(ConfigError::BadFraming { .. })
    ));
    assert!(matches!(
        LengthDelimited::builder().max_frame_length(0).build(),
        Err(ConfigError::ZeroLimit { .. })
    ));
    assert!(matches!(
        Delimited::builder(b"").build(),
        Err(ConfigError::BadFraming { .. })
    ));
    assert!(Resp::builder().max_frame(0).build().is_err());
}

/// A framing of one's own: a 2-byte big-endian length of the body, a type byte, the body.
/// The frame the application sees is the type byte then the body.
#[derive(Clone, Debug)]
struct Typed;

impl Framing for Typed {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.extend_from_slice(&((frame.len() - 1) as u16).to_be_bytes());
        dst.extend_from_slice(frame);
        Ok(())
    }
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let Some(&[hi, lo, _]) = src.get(..3) else {
            return Ok(None);
        };
        let end = 3 + usize::from(u16::from_be_bytes([hi, lo]));
        if src.len() < end {
            return Ok(None);
        }
        src.advance(2);
        Ok(Some(src.split_to(end - 2).freeze()))
    }
    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        match frame.len() {
            0 => Err(EncodeError::TooShort { len: 0, min: 1 }),
            len if len > 1 + 0xffff => Err(EncodeError::TooLarge {
                len,
                max: 1 + 0xffff,
            }),
            _ => Ok(()),
        }
    }
    fn max_buffered(&self) -> usize {
        3 + 0xffff
    }
    fn name(&self) -> &str {
        "typed"
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn a_user_framing_round_trips_through_the_public_trait(
        frames in prop::collection::vec(bytes(1..48), 0..12),
        cuts in prop::collection::vec(any::<Index>(), 0..10),
    ) {
        let mut framing: Box<dyn Framing> = Box::new(Typed);
        let mut wire = Vec::new();
        for frame in &frames {
            framing.encode(frame, &mut wire).unwrap();
        }
        prop_assert_eq!(wire.len(), frames.iter().map(|f| f.len() + 2).sum::<usize>());
        prop_assert_eq!(decode_cut(framing.as_mut(), &wire, &cuts), Ok(frames));
        prop_assert!(framing.delimits_frames());
        prop_assert_eq!(framing.name(), "typed");
    }
}

/// The trees of an aggregate's values.
fn items(reply: &RespReply) -> Vec<RespValue> {
    reply.items().map(|item| tree(&item)).collect()
}

/// Values two by two.
fn pairs(items: Vec<RespValue>) -> Vec<(RespValue, RespValue)> {
    let mut it = items.into_iter();
    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
}

/// The owned tree of a reply, built from its in-place view alone.
fn tree(reply: &RespReply) -> RespValue {
    let text = |b: Option<Bytes>| b.expect("a string").to_vec();
    match reply.kind().expect("a type byte") {
        _ if reply.is_null() => RespValue::Null,
        b'+' => RespValue::Simple(text(reply.as_simple())),
        b'-' | b'!' => RespValue::Error(text(reply.as_error())),
        b':' => RespValue::Integer(reply.as_integer().expect("an integer")),
        b'$' | b'=' => RespValue::Bulk(text(reply.as_bulk())),
        b'#' => RespValue::Boolean(reply.as_bool().expect("a boolean")),
        b',' => RespValue::Double(reply.as_double().expect("a double")),
        b'(' => RespValue::BigNumber(text(reply.as_big_number())),
        b'*' => RespValue::Array(items(reply)),
        b'~' => RespValue::Set(items(reply)),
        b'>' => RespValue::Push(items(reply)),
        b'%' => RespValue::Map(pairs(items(reply))),
        b'|' => {
            let mut all = items(reply);
            let value = Box::new(all.pop().expect("the attributed value"));
            RespValue::Attributed {
                attributes: pairs(all),
                value,
            }
        }
        other => panic!("type {other}"),
    }
}

/// RESP-like values: well-formed values of every type the decoder knows, and lines whose
/// content breaks the type (a sign alone, letters in a number, a bad verbatim format), nested
/// in aggregates whose header may not match what follows, so that the decoder and the parser
/// meet both.
fn resp_value() -> impl Strategy<Value = Vec<u8>> {
    const LINES: &[&[u8]] = &[
        b"+OK", b"-ERR x", b":5", b":+5", b":-5", b":+", b":5a", b"_", b"_x", b"#t", b"#f", b"#x",
        b",1.5", b",-2", b",+3e-2", b",1E9", b",inf", b",-inf", b",nan", b",abc", b",", b",1.",
        b",.5", b",1e", b",NaN", b"(123", b"(-1", b"(+1", b"(1a", b"(", b"$-1", b"*-1", b"*0",
        b"?", b"%1", b"~1", b">1", b"", b"+a\rb",
    ];
    let line = prop::sample::select(LINES).prop_map(|l| [l, b"\r\n"].concat());
    let blob = (
        prop::sample::select(&b"$!="[..]),
        prop_oneof![Just(b"txt:".to_vec()), bytes(0..6)],
        bytes(0..8),
        -1i8..2,
    )
        .prop_map(|(kind, head, body, skew)| {
            let body = [head, body].concat();
            let len = body.len() as i64 + i64::from(skew);
            [&[kind][..], format!("{len}\r\n").as_bytes(), &body, b"\r\n"].concat()
        });
    let leaf = prop_oneof![4 => line, 2 => blob];
    leaf.prop_recursive(3, 24, 4, |inner| {
        (
            prop::sample::select(&b"**%~>|"[..]),
            prop::collection::vec(inner, 0..5),
            -1i8..2,
        )
            .prop_map(|(kind, items, skew)| {
                // A map's header counts pairs, an attribute's its pairs before the value.
                let n = match kind {
                    b'%' => items.len() / 2,
                    b'|' => items.len().saturating_sub(1) / 2,
                    _ => items.len(),
                };
                let len = n as i64 + i64::from(skew);
                [
                    format!("{}{len}\r\n", kind as char).into_bytes(),
                    items.concat(),
                ]
                .concat()
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4 * CASES))]

    #[test]
    fn the_resp_decoder_accepts_exactly_what_the_parser_accepts_and_the_view_reads_the_same_value(
        wire in resp_value(),
        cuts in prop::collection::vec(any::<Index>(), 0..4),
    ) {
        let parsed = RespValue::parse(&wire);
        let decoded = decode_cut(&mut Resp::new(), &wire, &cuts);
        let whole = matches!(&decoded, Ok(frames) if frames.len() == 1 && frames[0] == wire);
        prop_assert_eq!(parsed.is_ok(), whole, "{:?}: {:?} / {:?}", wire, parsed, decoded);
        if let Ok(value) = parsed {
            // Read in place, the decoded frame gives the same value, without a second check.
            let view = tree(&RespReply::new(Bytes::from(wire.clone())));
            prop_assert_eq!(format!("{view:?}"), format!("{value:?}"));
        }
    }

    #[test]
    fn a_length_field_past_what_arrived_is_never_a_frame_nor_a_panic(
        field in prop::sample::select(&[1usize, 2, 3, 4, 8][..]),
        offset in 0usize..3,
        adjustment in prop_oneof![Just(isize::MAX), Just(isize::MAX / 2), Just(0isize), 0isize..16],
        keep in prop::option::of(0usize..3),
        varint in any::<bool>(),
        noise in bytes(0..32),
    ) {
        let mut b = LengthDelimited::builder()
            .length_field_offset(offset)
            .length_adjustment(adjustment)
            .num_skip(keep)
            .max_frame_length(usize::MAX);
        b = if varint { b.varint_max_bytes(9) } else { b.length_field_length(field) };
        let Ok(mut framing) = b.build() else { return Ok(()) };
        let wire = [&noise[..offset.min(noise.len())], &[0xff; 8][..], &[0x7f], &noise].concat();
        // The field announces at least 255 bytes, more than ever arrive: no frame, whatever
        // the sum of header, length and adjustment comes to.
        let mut src = BytesMut::from(&wire[..]);
        let result = framing.decode(&mut src);
        prop_assert!(
            matches!(result, Ok(None) | Err(DecodeError::FrameTooLarge { .. })),
            "{:?}",
            result
        );
    }
}
