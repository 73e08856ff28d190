//! Property tests of the codecs through the public api.
//!
//! Each property runs 512 cases.

use proptest::prelude::*;
use relink::{Codec, CodecError, Decoder};

const CASES: u32 = 512;

/// Codecs with small limits (so limits are hit) and with the default ones.
fn codec() -> impl Strategy<Value = Codec> {
    prop_oneof![
        Just(Codec::Raw),
        (0usize..48).prop_map(|max_frame| Codec::LengthPrefixed { max_frame }),
        (0usize..48).prop_map(|max_line| Codec::Lines { max_line }),
        Just(Codec::length_prefixed()),
        Just(Codec::lines()),
    ]
}

/// Bytes biased toward what matters to the codecs: one in eight is a zero, one in sixteen a
/// '\r', one in sixteen a '\n'; any byte may appear.
fn bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u16>(), len).prop_map(|words| {
        words
            .into_iter()
            .map(|w| {
                let [hi, lo] = w.to_be_bytes();
                match hi {
                    0..=31 => 0,
                    32..=47 => b'\n',
                    48..=63 => b'\r',
                    _ => lo,
                }
            })
            .collect()
    })
}

/// A stream of noise, len32 frames and len32 frames whose body may not have the announced
/// length, so that every codec gets both frames and garbage.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let prefixed = |len: u32, body: &[u8]| [&len.to_be_bytes()[..], body].concat();
    let segment = prop_oneof![
        1 => bytes(0..64),
        4 => bytes(0..64).prop_map(move |body| prefixed(body.len() as u32, &body)),
        1 => (0u32..64, bytes(0..64)).prop_map(move |(len, body)| prefixed(len, &body)),
    ];
    prop::collection::vec(segment, 0..12).prop_map(|segments| segments.concat())
}

/// Chunk sizes, used in turn (cycling) to split a stream.
fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..80, 1..12)
}

fn chunks<'a>(bytes: &'a [u8], cuts: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = bytes;
    let mut sizes = cuts.iter().cycle();
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let size = (*sizes.next()?).min(rest.len());
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        Some(chunk)
    })
}

/// The limit on a decoded frame, and the most `buffered()` may hold once `decode` returned
/// `Ok(None)` (a len32 prefix plus an incomplete frame: at most `max_frame + 3`; an unfinished
/// line: at most `max_line`).
fn limits(codec: &Codec) -> Option<(usize, usize)> {
    match *codec {
        Codec::LengthPrefixed { max_frame } => Some((max_frame, max_frame + 3)),
        Codec::Lines { max_line } => Some((max_line, max_line)),
        _ => None,
    }
}

/// Decodes until `Ok(None)` or an error; checks a poisoned decoder keeps its error.
fn drain(decoder: &mut Decoder, frames: &mut Vec<Vec<u8>>) -> Result<(), CodecError> {
    loop {
        match decoder.decode() {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return Ok(()),
            Err(e) => {
                assert_eq!(decoder.decode(), Err(e));
                assert_eq!(decoder.buffered(), 0);
                return Err(e);
            }
        }
    }
}

/// A line frame that the lines codec gives back as is: no '\n', not ending in '\r'.
fn line_frame(mut frame: Vec<u8>) -> Vec<u8> {
    for b in &mut frame {
        if *b == b'\n' {
            *b = b'n';
        }
    }
    while frame.last() == Some(&b'\r') {
        frame.pop();
    }
    frame
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_streams_never_panic_nor_return_more_than_was_fed(
        codec in codec(),
        bytes in stream(),
        cuts in cuts(),
    ) {
        let mut decoder = codec.decoder();
        let mut frames = Vec::new();
        let mut fed = 0;
        for chunk in chunks(&bytes, &cuts) {
            decoder.feed(chunk);
            fed += chunk.len();
            let result = drain(&mut decoder, &mut frames);
            let returned: usize = frames.iter().map(Vec::len).sum();
            prop_assert!(returned + decoder.buffered() <= fed);
            if codec == Codec::Raw {
                prop_assert!(result.is_ok());
                prop_assert_eq!(decoder.buffered(), 0);
                prop_assert_eq!(returned, fed);
            }
            if result.is_err() {
                break;
            }
        }
        if codec == Codec::Raw {
            prop_assert!(frames.iter().all(|f| !f.is_empty()));
            prop_assert_eq!(frames.concat(), bytes);
        }
    }

    #[test]
    fn limits_hold_for_arbitrary_streams(
        codec in codec(),
        bytes in stream(),
        cuts in cuts(),
    ) {
        let Some((max_frame, max_buffered)) = limits(&codec) else {
            return Ok(());
        };
        let mut decoder = codec.decoder();
        let mut frames = Vec::new();
        for chunk in chunks(&bytes, &cuts) {
            decoder.feed(chunk);
            prop_assert!(decoder.buffered() <= max_buffered + chunk.len());
            let result = drain(&mut decoder, &mut frames);
            prop_assert!(decoder.buffered() <= max_buffered);
            prop_assert!(frames.iter().all(|f| f.len() <= max_frame));
            if result.is_err() {
                break;
            }
        }
    }

    #[test]
    fn encoded_frames_decode_back_at_any_split(
        codec in prop_oneof![
            (0usize..48).prop_map(|max_frame| Codec::LengthPrefixed { max_frame }),
            (0usize..48).prop_map(|max_line| Codec::Lines { max_line }),
            Just(Codec::length_prefixed()),
            Just(Codec::lines()),
        ],
        frames in prop::collection::vec(bytes(0..64), 0..24),
        cuts in cuts(),
    ) {
        let frames: Vec<Vec<u8>> = frames
            .into_iter()
            .map(|f| if matches!(codec, Codec::Lines { .. }) { line_frame(f) } else { f })
            .filter(|f| codec.check_frame(f).is_ok())
            .collect();
        let mut wire = Vec::new();
        for frame in &frames {
            let before = wire.len();
            codec.encode_into(frame, &mut wire);
            prop_assert_eq!(wire.len() - before, codec.encoded_len(frame.len()));
        }
        let mut decoder = codec.decoder();
        let mut decoded = Vec::new();
        for chunk in chunks(&wire, &cuts) {
            decoder.feed(chunk);
            prop_assert_eq!(drain(&mut decoder, &mut decoded), Ok(()));
        }
        prop_assert_eq!(decoder.buffered(), 0);
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn raw_decodes_to_the_concatenation_of_what_was_encoded(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..64), 0..24),
        cuts in cuts(),
    ) {
        let codec = Codec::Raw;
        let mut wire = Vec::new();
        for frame in &frames {
            prop_assert_eq!(codec.check_frame(frame), Ok(()));
            codec.encode_into(frame, &mut wire);
        }
        let mut decoder = codec.decoder();
        let mut decoded = Vec::new();
        for chunk in chunks(&wire, &cuts) {
            decoder.feed(chunk);
            prop_assert_eq!(drain(&mut decoder, &mut decoded), Ok(()));
        }
        prop_assert_eq!(decoded.concat(), frames.concat());
    }
}
