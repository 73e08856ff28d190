//! A framing a user would write, for the benchmarks that compare it with the built-ins.

use relink::bytes::{Buf, Bytes, BytesMut};
use relink::framing::{DecodeError, EncodeError, Framing};

/// A user's len32: a u32 big-endian length, then the frame, at most 16 MiB.
#[derive(Debug, Clone)]
pub struct UserLen32;

impl Framing for UserLen32 {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        dst.extend_from_slice(frame);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let Some(head) = src.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > 16 << 20 {
            return Err(DecodeError::FrameTooLarge {
                len: len as u64,
                max: 16 << 20,
            });
        }
        if src.len() < 4 + len {
            return Ok(None);
        }
        src.advance(4);
        Ok(Some(src.split_to(len).freeze()))
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        if frame.len() > 16 << 20 {
            return Err(EncodeError::TooLarge {
                len: frame.len(),
                max: 16 << 20,
            });
        }
        Ok(())
    }
}
