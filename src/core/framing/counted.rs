//! A header line, then a body whose length the header says: NATS' `PUB`/`MSG`, memcached's
//! `VALUE`, and the many line protocols that carry a counted payload.

use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{DecodeError, EncodeError, Framing};

type BodyLen = dyn Fn(&[u8]) -> Option<usize> + Send + Sync;

/// Frames of a CRLF-ended header line and, when the header says so, a counted body followed
/// by CRLF. `body_len` reads the body's length from a header line (without its CRLF); `None`
/// means the header has no body.
///
/// A decoded frame is the header line, and (with a body) CRLF and the body: `MSG s 1 5\r\nhello`.
/// A frame is written as it is given, with CRLF after it: `PUB s 5\r\nhello` goes out as
/// `PUB s 5\r\nhello\r\n`. Lines and bodies are bounded by `max_frame` (a peer past it
/// breaks the framing).
///
/// # Examples
/// NATS: `MSG <subject> <sid> [reply-to] <#bytes>` and `PUB` carry a body; `PING`, `+OK`, `INFO`
/// do not.
/// ```
/// use relink::bytes::BytesMut;
/// use relink::framing::{Counted, Framing};
///
/// let mut nats = Counted::new(|header| {
///     let text = std::str::from_utf8(header).ok()?;
///     let counted = text.starts_with("MSG ") || text.starts_with("PUB ");
///     counted.then(|| text.rsplit(' ').next()?.parse().ok()).flatten()
/// });
/// let mut src = BytesMut::from(&b"PING\r\nMSG a 1 5\r\nhel"[..]);
/// assert_eq!(nats.decode(&mut src)?.as_deref(), Some(&b"PING"[..]));
/// assert_eq!(nats.decode(&mut src)?, None); // the body is not all here yet
/// src.extend_from_slice(b"lo\r\n");
/// assert_eq!(nats.decode(&mut src)?.as_deref(), Some(&b"MSG a 1 5\r\nhello"[..]));
/// let mut wire = Vec::new();
/// nats.encode(b"PUB a 2\r\nhi", &mut wire)?;
/// assert_eq!(wire, b"PUB a 2\r\nhi\r\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Counted {
    body_len: Arc<BodyLen>,
    max_frame: usize,
    /// Bytes of the buffer already searched for the header's end.
    scan: usize,
}

/// The default bound on a frame: a header line and its body.
const MAX_FRAME: usize = 16 << 20;

impl Counted {
    /// Frames whose header's body length `body_len` reads; at most 16 MiB each.
    pub fn new(body_len: impl Fn(&[u8]) -> Option<usize> + Send + Sync + 'static) -> Counted {
        Counted {
            body_len: Arc::new(body_len),
            max_frame: MAX_FRAME,
            scan: 0,
        }
    }

    /// The largest frame (header and body) either way. Defaults to 16 MiB.
    pub fn max_frame(mut self, max: usize) -> Counted {
        self.max_frame = max;
        self
    }
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counted")
            .field("max_frame", &self.max_frame)
            .finish_non_exhaustive()
    }
}

impl Framing for Counted {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        dst.reserve(frame.len() + 2);
        dst.extend_from_slice(frame);
        dst.extend_from_slice(b"\r\n");
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let window = &src[..src.len().min(self.max_frame + 2)];
        let Some(i) = window[self.scan..].windows(2).position(|w| w == b"\r\n") else {
            if window.len() > self.max_frame {
                return Err(DecodeError::LineTooLong {
                    max: self.max_frame,
                });
            }
            self.scan = window.len().saturating_sub(1);
            return Ok(None);
        };
        let header_end = self.scan + i;
        let body = (self.body_len)(&src[..header_end]);
        let Some(body) = body else {
            self.scan = 0;
            let mut frame = src.split_to(header_end + 2);
            frame.truncate(header_end);
            return Ok(Some(frame.freeze()));
        };
        let len = header_end + 2 + body;
        if len > self.max_frame {
            return Err(DecodeError::FrameTooLarge {
                len: len as u64,
                max: self.max_frame,
            });
        }
        if src.len() < len + 2 {
            // The header's end is known: search from it again next time.
            self.scan = header_end;
            return Ok(None);
        }
        if &src[len..len + 2] != b"\r\n" {
            return Err(DecodeError::Malformed(
                "a counted body not followed by CRLF",
            ));
        }
        self.scan = 0;
        let mut frame = src.split_to(len + 2);
        frame.truncate(len);
        Ok(Some(frame.freeze()))
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        if frame.len() > self.max_frame {
            return Err(EncodeError::TooLarge {
                len: frame.len(),
                max: self.max_frame,
            });
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.scan = 0;
    }

    fn max_buffered(&self) -> usize {
        self.max_frame + 2
    }

    fn name(&self) -> &str {
        "counted"
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{assert_every_split, decode_chunks};
    use super::*;

    fn memcached() -> Counted {
        // VALUE <key> <flags> <bytes> [<cas>]
        Counted::new(|h| {
            let text = std::str::from_utf8(h).ok()?;
            let mut f = text.split(' ');
            (f.next()? == "VALUE").then_some(())?;
            f.nth(2)?.parse().ok()
        })
    }

    #[test]
    fn headers_and_counted_bodies_decode_whatever_the_split() {
        let wire = b"VALUE k 0 5\r\na\r\nbc\r\nEND\r\nSTORED\r\n";
        let frames: [&[u8]; 3] = [b"VALUE k 0 5\r\na\r\nbc", b"END", b"STORED"];
        assert_every_split(&memcached(), wire, &frames);
    }

    #[test]
    fn a_body_not_followed_by_crlf_breaks_the_framing() {
        let got = decode_chunks(&mut memcached(), [&b"VALUE k 0 1\r\nxyz\r\n"[..]]);
        assert!(matches!(got, Err(DecodeError::Malformed(_))));
    }

    #[test]
    fn a_header_or_body_past_the_bound_breaks_the_framing_without_buffering_more() {
        let mut c = memcached().max_frame(16);
        let got = decode_chunks(&mut c, [&[b'x'; 40][..]]);
        assert!(matches!(got, Err(DecodeError::LineTooLong { max: 16 })));
        let got = decode_chunks(&mut memcached().max_frame(16), [&b"VALUE k 0 99\r\n"[..]]);
        assert!(matches!(got, Err(DecodeError::FrameTooLarge { .. })));
    }
}
