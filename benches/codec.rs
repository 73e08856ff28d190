//! Framing speed: encode + decode throughput of a framing, without any socket.
//!
//! Run with `cargo bench --bench codec` (about 8 s); `--smoke` (or `RELINK_BENCH_SMOKE=1`) runs
//! one round of 20 ms slices, to show that it runs to the end.
//!
//! Three ways to put 4-byte big-endian length-prefixed frames on the wire and read them back
//! are compared, at 64 B and 1 KiB frames:
//! - `user`: a len32 written against the public [`Framing`] trait (benches/support), used as
//!   a `Box<dyn Framing>` (as a link holds one);
//! - `builtin`: [`LengthDelimited::len32`], also as a `Box<dyn Framing>`;
//! - `tokio`: tokio-util's `LengthDelimitedCodec`, the baseline.
//!
//! One pass encodes a batch of frames into a buffer, then decodes it fed in 8 KiB chunks (the
//! size of the chunks libzmq hands over). Rounds alternate between the three (5 rounds of
//! 250 ms each); the median is reported, one line per size:
//!
//! `codec size=<bytes> user_mps=<x> builtin_mps=<y> tokio_mps=<z> ratio_user_builtin=<x/y>
//! ratio_builtin_tokio=<y/z>`
//!
//! where `*_mps` is millions of frames per second (each encoded and decoded once).

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use relink::bytes::{Bytes, BytesMut};
use relink::framing::{Framing, LengthDelimited};
use support::framing::UserLen32;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

/// Frames per pass.
const BATCH: usize = 1024;
/// Bytes fed to a decoder at a time.
const CHUNK: usize = 8192;
/// Rounds per size; the median is reported.
const ROUNDS: usize = 5;
/// Time per measurement.
const SLICE: Duration = Duration::from_millis(250);
/// Time per measurement in the smoke mode.
const SMOKE_SLICE: Duration = Duration::from_millis(20);

/// One pass through a framing: encode the batch, decode it back; returns frames decoded.
fn pass_framing(framing: &mut dyn Framing, frames: &[Vec<u8>], wire: &mut Vec<u8>) -> usize {
    wire.clear();
    for frame in frames {
        framing.check(frame).unwrap();
        framing.encode(frame, wire).unwrap();
    }
    let mut src = BytesMut::with_capacity(2 * CHUNK);
    let mut count = 0;
    for chunk in wire.chunks(CHUNK) {
        src.extend_from_slice(chunk);
        while let Some(frame) = framing.decode(&mut src).unwrap() {
            black_box(&frame);
            count += 1;
        }
    }
    count
}

/// One pass through tokio-util's codec.
fn pass_tokio(codec: &mut LengthDelimitedCodec, frames: &[Bytes], wire: &mut BytesMut) -> usize {
    wire.clear();
    for frame in frames {
        codec.encode(frame.clone(), wire).unwrap();
    }
    let mut src = BytesMut::with_capacity(2 * CHUNK);
    let mut count = 0;
    for chunk in wire.chunks(CHUNK) {
        src.extend_from_slice(chunk);
        while let Some(frame) = codec.decode(&mut src).unwrap() {
            black_box(&frame);
            count += 1;
        }
    }
    count
}

/// Millions of frames per second of `pass`, run for one slice.
fn measure(slice: Duration, mut pass: impl FnMut() -> usize) -> f64 {
    let start = Instant::now();
    let mut frames = 0;
    while start.elapsed() < slice {
        frames += pass();
    }
    frames as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let smoke = support::smoke();
    let (rounds, slice) = if smoke {
        (1, SMOKE_SLICE)
    } else {
        (ROUNDS, SLICE)
    };
    for size in [64usize, 1024] {
        let frames: Vec<Vec<u8>> = (0..BATCH).map(|i| vec![i as u8; size]).collect();
        let shared: Vec<Bytes> = frames.iter().cloned().map(Bytes::from).collect();
        let mut wire = Vec::new();
        let mut tokio_wire = BytesMut::new();
        let mut user: Box<dyn Framing> = Box::new(UserLen32);
        let mut builtin: Box<dyn Framing> = Box::new(LengthDelimited::len32());
        let mut tokio = LengthDelimitedCodec::new();
        let (mut u, mut b, mut t) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            u.push(measure(slice, || {
                pass_framing(user.as_mut(), &frames, &mut wire)
            }));
            b.push(measure(slice, || {
                pass_framing(builtin.as_mut(), &frames, &mut wire)
            }));
            t.push(measure(slice, || {
                pass_tokio(&mut tokio, &shared, &mut tokio_wire)
            }));
        }
        let (u, b, t) = (median(u), median(b), median(t));
        println!(
            "codec size={size} user_mps={u:.2} builtin_mps={b:.2} tokio_mps={t:.2} \
             ratio_user_builtin={:.2} ratio_builtin_tokio={:.2}",
            u / b,
            b / t
        );
    }
}
