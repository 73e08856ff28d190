//! Raw chunks: no framing at all.

use bytes::{Bytes, BytesMut};

use super::{DecodeError, EncodeError, Framing};

/// Every chunk is a frame: frames are written as they are, and decode returns every byte
/// received since the last call as one frame.
///
/// Chunks ignore the peer's message boundaries, so [`Framing::delimits_frames`] is false:
/// a heartbeat reply predicate or a handshake cannot be used with raw chunks. An empty frame
/// is refused ([`EncodeError::Empty`]): an empty write would close the connection.
///
/// # Examples
///
/// ```
/// use relink::bytes::BytesMut;
/// use relink::framing::{Framing, Raw};
///
/// let mut raw = Raw::new();
/// let mut wire = Vec::new();
/// raw.encode(b"any bytes", &mut wire)?;
/// assert!(raw.encode(b"", &mut wire).is_err());
/// let mut src = BytesMut::from(&b"ab"[..]);
/// src.extend_from_slice(b"cd");
/// assert_eq!(raw.decode(&mut src)?.as_deref(), Some(&b"abcd"[..]));
/// assert_eq!(raw.decode(&mut src)?, None);
/// assert!(!raw.delimits_frames());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Raw;

impl Raw {
    /// Raw chunks (the default framing); it has no settings, so it has no builder.
    pub fn new() -> Raw {
        Raw
    }
}

impl Framing for Raw {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.extend_from_slice(frame);
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        if src.is_empty() {
            return Ok(None);
        }
        // The whole buffer is the frame: handed over as it is, and the link starts a new one.
        Ok(Some(std::mem::take(src).freeze()))
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        if frame.is_empty() {
            return Err(EncodeError::Empty);
        }
        Ok(())
    }

    fn delimits_frames(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "raw"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::framing::testkit::decode_chunks;

    #[test]
    fn raw_returns_every_byte_fed_at_every_split_point() {
        let wire = b"hello, world: any bytes \0\n\r\xff at all";
        for split in 0..=wire.len() {
            let (a, b) = wire.split_at(split);
            let frames = decode_chunks(&mut Raw, [a, b]).unwrap();
            assert_eq!(frames.concat(), wire, "{split}");
            let expected = usize::from(!a.is_empty()) + usize::from(!b.is_empty());
            assert_eq!(frames.len(), expected);
        }
    }

    #[test]
    fn raw_hands_over_the_receive_buffer_itself() {
        let mut src = BytesMut::from(&b"chunk"[..]);
        let start = src.as_ptr();
        let frame = Raw.decode(&mut src).unwrap().unwrap();
        assert_eq!(frame.as_ptr(), start, "not copied");
        assert_eq!(src.capacity(), 0, "nothing of it is kept");
    }

    #[test]
    fn raw_returns_the_chunks_appended_before_a_decode_as_one_frame() {
        let mut src = BytesMut::from(&b"ab"[..]);
        src.extend_from_slice(b"cd");
        assert_eq!(Raw.decode(&mut src), Ok(Some(Bytes::from_static(b"abcd"))));
        assert_eq!(Raw.decode(&mut src), Ok(None));
    }

    #[test]
    fn raw_returns_each_chunk_and_refuses_an_empty_frame() {
        let chunks: [&[u8]; 3] = [b"ab", b"", b"\0\n"];
        assert_eq!(
            decode_chunks(&mut Raw, chunks),
            Ok(vec![b"ab".to_vec(), b"\0\n".to_vec()])
        );
        assert_eq!(Raw.check(b""), Err(EncodeError::Empty));
        assert!(!Raw.delimits_frames());
    }
}
