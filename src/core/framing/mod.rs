//! Framing: how frames become bytes on the wire and back.
//!
//! A link cuts the byte stream of its connection into frames with one [`Framing`], set with
//! [`Builder::framing`](crate::Builder::framing) or brought by the link's
//! [`Protocol`](crate::protocol::Protocol). Frames go out as `&[u8]` and come in as
//! [`Bytes`]: a received frame is cut from the link's receive buffer, not copied.
//!
//! A framing given alone (a line protocol with [`Lines`], a length-prefixed one with
//! [`LengthDelimited`]) is a protocol whose peer answers nothing: its frames are confirmed by
//! the peer's TCP, and every frame the peer writes is an [`Event::Frame`](crate::Event::Frame)
//! (or a request's reply, in order).
//!
//! # The built-ins
//!
//! | framing | on the wire | common case | every knob |
//! |---|---|---|---|
//! | [`Raw`] (the default) | every chunk read is a frame | `Raw::new()` | none |
//! | [`LengthDelimited`] | a length field then the frame | `LengthDelimited::len32()` | [`LengthDelimited::builder`] |
//! | [`Lines`] | frames ending in `\n` (`\r\n` accepted) | `Lines::new()` | [`Lines::builder`] |
//! | [`Delimited`] | frames ending in any delimiter | | [`Delimited::builder`] |
//! | [`Resp`] | redis commands out, whole replies in | `Resp::new()` | [`Resp::builder`] |
//!
//! A reply decoded by [`Resp`] is read in place with [`RespReply`] (no copy, no second
//! check: the decoder checked it), or as an owned tree with [`RespValue::parse`].
//!
//! Every built-in is configured the same way: a constructor for the common case that cannot
//! fail, and a builder whose `build()` returns `Result<_, ConfigError>`
//! ([`ConfigError`](crate::error::ConfigError)) for every setting. [`Raw`] has no setting, so no
//! builder; [`Delimited`] has no common case, its delimiter is the application's.
//! Every built-in is incremental (bytes may arrive split anywhere), memory bounded (it refuses
//! a frame above its limit as soon as the limit is passed or announced, and never reserves
//! what the peer announces) and never panics on what the peer sends.
//!
//! # A framing of one's own
//!
//! [`Framing`] is sans-IO, in the shape of tokio-util's `Decoder` and `Encoder`:
//!
//! - [`encode`](Framing::encode) appends the wire form of one frame to a `Vec<u8>`, or
//!   refuses it with an [`EncodeError`] (the frame is then handed back to the caller of
//!   `send`); [`check`](Framing::check) makes the same decision without writing, at `send`.
//! - [`decode`](Framing::decode) takes one whole frame from the front of a [`BytesMut`] that
//!   the link appends received bytes to, `Ok(None)` when more bytes are needed, or a
//!   [`DecodeError`] (the link then resets the connection with cause `protocol`). Cut the
//!   frame with `src.split_to(len).freeze()` so that it shares the receive buffer.
//! - [`reset`](Framing::reset) forgets decoding state for a new connection,
//!   [`max_buffered`](Framing::max_buffered) bounds an incomplete frame,
//!   [`delimits_frames`](Framing::delimits_frames) says whether decode returns the peer's own
//!   frames (a heartbeat reply or a handshake needs it).
//!
//! A frame shares the allocation of the receive buffer it was cut from: an application that
//! keeps a few small frames for long keeps that buffer too; `Bytes::copy_from_slice(&frame)`
//! keeps a frame on its own.
//!
//! The types the trait names are all reachable from relink: [`bytes`](crate::bytes) is
//! re-exported, and the errors live here. A framing runs on the link's IO thread; a panic in
//! it is caught and counted as a failure of the connection
//! ([`Cause::CallbackPanic`](crate::Cause::CallbackPanic)).

mod counted;
mod delimited;
mod length;
mod raw;
mod reply;
mod resp;

pub use counted::Counted;
pub use delimited::{Delimited, DelimitedBuilder, Lines, LinesBuilder};
pub use length::{LengthDelimited, LengthDelimitedBuilder};
pub use raw::Raw;
pub use reply::{RespItems, RespReply};
pub use resp::{Resp, RespBuilder, RespValue};

pub use crate::error::{DecodeError, EncodeError};
use bytes::{Bytes, BytesMut};

/// The default frame limit of the built-in framings: 16 MiB.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// How frames become bytes on the wire and back: sans-IO, incremental, memory bounded.
///
/// The link owns the receive buffer: it appends the bytes it reads to it and calls
/// [`Framing::decode`] until it returns `Ok(None)`. A decoder may keep state between calls
/// (how far it scanned), which [`Framing::reset`] forgets; it must assume only that bytes are
/// appended to `src` and that nothing else advances it.
///
/// # Examples
///
/// A framing of one's own: a 2-byte big-endian length (counting the type byte) then a type
/// byte, then the body. The frame the application sees is the type byte and the body.
///
/// ```
/// use relink::bytes::{Buf, Bytes, BytesMut};
/// use relink::framing::{DecodeError, EncodeError, Framing};
///
/// #[derive(Debug, Clone)]
/// struct Typed;
///
/// impl Framing for Typed {
///     fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
///         self.check(frame)?;
///         dst.extend_from_slice(&(frame.len() as u16).to_be_bytes());
///         dst.extend_from_slice(frame);
///         Ok(())
///     }
///     fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
///         let Some(head) = src.get(..2) else { return Ok(None) };
///         let len = usize::from(u16::from_be_bytes([head[0], head[1]]));
///         if len == 0 {
///             return Err(DecodeError::Malformed("a frame needs its type byte"));
///         }
///         if src.len() < 2 + len {
///             return Ok(None);
///         }
///         src.advance(2);
///         Ok(Some(src.split_to(len).freeze())) // shares the receive buffer: no copy
///     }
///     fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
///         match frame.len() {
///             0 => Err(EncodeError::TooShort { len: 0, min: 1 }),
///             len if len > 0xffff => Err(EncodeError::TooLarge { len, max: 0xffff }),
///             _ => Ok(()),
///         }
///     }
///     fn max_buffered(&self) -> usize {
///         2 + 0xffff
///     }
/// }
///
/// let mut wire = Vec::new();
/// Typed.encode(b"\x07hello", &mut wire)?;
/// assert_eq!(wire, b"\0\x06\x07hello");
/// let mut src = BytesMut::from(&wire[..]);
/// assert_eq!(Typed.decode(&mut src)?.as_deref(), Some(&b"\x07hello"[..]));
/// assert_eq!(Typed.decode(&mut src)?, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Framing: Send + Sync + 'static {
    /// Appends the wire form of `frame` to `dst`, or refuses the frame (it is then handed back
    /// to the caller of send).
    ///
    /// # Errors
    ///
    /// Why the frame cannot be written; `dst` is then left as it was.
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError>;

    /// Takes one whole frame from the front of `src` (advancing it), `Ok(None)` when more bytes
    /// are needed. A frame cut with `src.split_to(len).freeze()` shares the receive buffer.
    ///
    /// # Errors
    ///
    /// The peer broke the framing or one of its limits; the link then resets the connection
    /// with cause `protocol`.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError>;

    /// Checks a frame at the call, before it is queued, so that a bad frame is refused by
    /// `send` itself. Defaults to accepting every frame; the built-ins check their limits
    /// here.
    ///
    /// # Errors
    ///
    /// Why [`Framing::encode`] would refuse the frame.
    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        let _ = frame;
        Ok(())
    }

    /// Forgets decoding state: called for each new connection. Defaults to doing nothing.
    fn reset(&mut self) {}

    /// The most bytes the link buffers for one incomplete frame before it resets the
    /// connection as a protocol error. Defaults to 16 MiB + 64.
    fn max_buffered(&self) -> usize {
        DEFAULT_MAX_FRAME + 64
    }

    /// Whether decode returns the peer's own frames (true) or arbitrary chunks (false, raw
    /// only). A heartbeat reply predicate or a handshake needs true. Defaults to true.
    fn delimits_frames(&self) -> bool {
        true
    }

    /// Short name for logs. Defaults to `"custom"`.
    fn name(&self) -> &str {
        "custom"
    }
}

/// A framing the link can hold and clone: any `Framing + Clone`, behind one object-safe trait.
pub(crate) trait DynFraming: Framing {
    /// A copy with the same settings and state.
    fn clone_box(&self) -> Box<dyn DynFraming>;

    /// The framing as its own type, for a loop that calls a built-in framing directly.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

impl<T: Framing + Clone> DynFraming for T {
    fn clone_box(&self) -> Box<dyn DynFraming> {
        Box::new(self.clone())
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// A framing of any type, as a [`Protocol`](crate::protocol::Protocol) gives its own
/// ([`Protocol::framing`](crate::protocol::Protocol::framing)): any `Framing + Clone`, boxed.
///
/// # Examples
/// ```
/// use relink::framing::{AnyFraming, Resp};
///
/// let framing: AnyFraming = Resp::new().into();
/// assert_eq!(framing.name(), "resp");
/// ```
#[derive(Clone, Debug)]
pub struct AnyFraming(pub(crate) BoxedFraming);

impl AnyFraming {
    /// The framing's short name.
    pub fn name(&self) -> &str {
        self.0.name()
    }
}

impl<F: Framing + Clone> From<F> for AnyFraming {
    fn from(framing: F) -> AnyFraming {
        AnyFraming(BoxedFraming::new(framing))
    }
}

/// The framing of one link, boxed: what the builder stores, the core decodes and encodes
/// with, and the handle checks frames with.
pub(crate) struct BoxedFraming(pub(crate) Box<dyn DynFraming>);

impl BoxedFraming {
    /// Boxes a framing.
    pub(crate) fn new<F: Framing + Clone>(framing: F) -> BoxedFraming {
        BoxedFraming(Box::new(framing))
    }
}

impl BoxedFraming {
    /// Whether the framing is one of the crate's own: its `encode` is no application code (and
    /// is not timed as such).
    pub(crate) fn is_builtin(&mut self) -> bool {
        let any = self.0.as_any_mut();
        any.is::<LengthDelimited>()
            || any.is::<Lines>()
            || any.is::<Delimited>()
            || any.is::<Resp>()
            || any.is::<Raw>()
            || any.is::<Counted>()
    }
}

impl Clone for BoxedFraming {
    fn clone(&self) -> Self {
        BoxedFraming(self.0.clone_box())
    }
}

impl std::fmt::Debug for BoxedFraming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Framing({})", self.0.name())
    }
}

impl std::ops::Deref for BoxedFraming {
    type Target = dyn DynFraming;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for BoxedFraming {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Helpers shared by the framing tests.
    use super::{DecodeError, Framing};
    use bytes::BytesMut;

    /// Encodes every frame, panicking on a refusal.
    pub fn encode_all<F: Framing>(framing: &mut F, frames: &[&[u8]]) -> Vec<u8> {
        let mut wire = Vec::new();
        for f in frames {
            framing.encode(f, &mut wire).expect("encodable frame");
        }
        wire
    }

    /// Feeds `chunks` one by one, decoding every frame after each; stops at the first error.
    pub fn decode_chunks<'a, F: Framing>(
        framing: &mut F,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<Vec<u8>>, DecodeError> {
        let mut src = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            src.extend_from_slice(chunk);
            while let Some(frame) = framing.decode(&mut src)? {
                out.push(frame.to_vec());
            }
            assert!(src.len() <= framing.max_buffered(), "{}", src.len());
        }
        Ok(out)
    }

    /// Decodes `wire` split in two at every point, with a fresh state each time.
    pub fn assert_every_split<F: Framing + Clone>(framing: &F, wire: &[u8], frames: &[&[u8]]) {
        for split in 0..=wire.len() {
            let (a, b) = wire.split_at(split);
            let got = decode_chunks(&mut framing.clone(), [a, b]).unwrap();
            assert_eq!(got, frames, "split at {split}");
        }
    }
}
