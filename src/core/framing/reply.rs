//! A RESP reply read in place: the view of a frame that [`Resp`](super::Resp) decoded.

use bytes::Bytes;

use super::resp::{elements, parse_int, RespValue};
use super::DecodeError;

/// One RESP value read in place from a frame decoded by [`Resp`](super::Resp): no copy and no
/// second check.
///
/// The decoder has checked the whole value when it returned the frame, so a view reads only
/// what it is asked for: its type byte and header line, an element's extent when an array is
/// walked. Strings come back as [`Bytes`] cut from the frame, not copied. [`RespValue::parse`]
/// is the other way to read a reply: an owned tree, every byte checked again.
///
/// A view of bytes that are not one RESP value (not a frame from [`Resp`](super::Resp)) never
/// panics: its reads return `None` (an array's elements end where the bytes stop making sense).
///
/// # Examples
///
/// ```
/// use relink::bytes::BytesMut;
/// use relink::framing::{Framing, Resp, RespItems, RespReply};
///
/// let mut resp = Resp::new();
/// let mut src = BytesMut::from(&b"*3\r\n$5\r\nhello\r\n:42\r\n*-1\r\n"[..]);
/// let frame = resp.decode(&mut src)?.expect("one whole reply");
///
/// let reply = RespReply::new(frame.clone());
/// assert_eq!(reply.len(), Some(3));
/// let items: RespItems = reply.items(); // an iterator of views, no copy
/// let items: Vec<RespReply> = items.collect();
/// assert_eq!(items[0].as_bulk().as_deref(), Some(&b"hello"[..]));
/// assert_eq!(items[1].as_integer(), Some(42));
/// assert!(items[2].is_null());
/// // The string is the frame's own bytes.
/// let hello = items[0].as_bulk().unwrap();
/// assert_eq!(hello.as_ptr(), frame[8..].as_ptr());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespReply {
    /// Exactly the value's wire bytes.
    wire: Bytes,
}

/// The first line of a value: its type byte, the line's content, and where the line ends.
struct Head<'a> {
    kind: u8,
    line: &'a [u8],
    /// The index just after the line's `\r\n`.
    next: usize,
}

/// The head of the value at `at`, `None` when `wire` has no whole line there.
fn head(wire: &[u8], at: usize) -> Option<Head<'_>> {
    let rest = wire.get(at..)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let line = rest.get(1..nl.checked_sub(1)?)?;
    Some(Head {
        kind: *rest.first()?,
        line,
        next: at + nl + 1,
    })
}

/// Where the value at `at` ends, walking its elements without checking them (iteratively, so
/// that no input can exhaust the stack); `None` when the bytes stop before it does.
fn value_end(wire: &[u8], mut at: usize) -> Option<usize> {
    let mut left: u64 = 1;
    while left > 0 {
        left -= 1;
        let h = head(wire, at)?;
        at = match h.kind {
            b'$' | b'!' | b'=' => match parse_int(h.line).ok()? {
                n if n < 0 => h.next,
                n => h
                    .next
                    .checked_add(usize::try_from(n).ok()?)?
                    .checked_add(2)?,
            },
            b'*' | b'%' | b'~' | b'>' | b'|' => {
                left = left.checked_add(elements(h.kind, parse_int(h.line).ok()?).ok()?)?;
                h.next
            }
            _ => h.next,
        };
    }
    (at <= wire.len()).then_some(at)
}

impl RespReply {
    /// A view of `frame`, a frame decoded by [`Resp`](super::Resp).
    pub fn new(frame: Bytes) -> RespReply {
        RespReply { wire: frame }
    }

    /// The value's wire bytes.
    pub fn as_wire(&self) -> &Bytes {
        &self.wire
    }

    /// The type byte: `+`, `-`, `:`, `$`, `*`, or one of RESP3's `_ # , ( ! = % ~ > |`.
    pub fn kind(&self) -> Option<u8> {
        self.wire.first().copied()
    }

    fn head(&self) -> Option<Head<'_>> {
        head(&self.wire, 0)
    }

    /// The text of a simple string (`+`).
    pub fn as_simple(&self) -> Option<Bytes> {
        self.line_of(b'+')
    }

    /// The text of an error: `-` or RESP3's blob error `!`.
    pub fn as_error(&self) -> Option<Bytes> {
        match self.kind()? {
            b'-' => self.line_of(b'-'),
            b'!' => self.blob(),
            _ => None,
        }
    }

    /// An integer (`:`).
    pub fn as_integer(&self) -> Option<i64> {
        let h = self.head()?;
        (h.kind == b':').then(|| parse_int(h.line).ok())?
    }

    /// A bulk string (`$`, not the null one) or RESP3's verbatim string (`=`, with its format
    /// prefix).
    pub fn as_bulk(&self) -> Option<Bytes> {
        match self.kind()? {
            b'$' | b'=' => self.blob(),
            _ => None,
        }
    }

    /// Whether the value is null: the null bulk string, the null array, or RESP3's `_`.
    pub fn is_null(&self) -> bool {
        self.head().is_some_and(|h| match h.kind {
            b'_' => true,
            b'$' | b'*' => h.line == b"-1",
            _ => false,
        })
    }

    /// RESP3's boolean (`#`).
    pub fn as_bool(&self) -> Option<bool> {
        let h = self.head()?;
        match (h.kind, h.line) {
            (b'#', b"t") => Some(true),
            (b'#', b"f") => Some(false),
            _ => None,
        }
    }

    /// RESP3's double (`,`).
    pub fn as_double(&self) -> Option<f64> {
        let h = self.head()?;
        if h.kind != b',' {
            return None;
        }
        std::str::from_utf8(h.line).ok()?.parse().ok()
    }

    /// RESP3's big number (`(`), as its decimal digits.
    pub fn as_big_number(&self) -> Option<Bytes> {
        self.line_of(b'(')
    }

    /// The number of values [`items`](Self::items) yields, for an aggregate: an array's, a
    /// set's or a push's elements (`*`, `~`, `>`; not the null array), a map's keys and
    /// values (`%`: twice its pairs), an attribute's keys and values then the value they
    /// describe (`|`).
    pub fn len(&self) -> Option<usize> {
        let h = self.head()?;
        if !matches!(h.kind, b'*' | b'%' | b'~' | b'>' | b'|') || self.is_null() {
            return None;
        }
        usize::try_from(elements(h.kind, parse_int(h.line).ok()?).ok()?).ok()
    }

    /// Whether the value is an empty aggregate.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// The values of an aggregate, in wire order, each a view of its own bytes (a map's keys
    /// and values alternate; an attribute's value comes last); nothing for any other value.
    pub fn items(&self) -> RespItems {
        let (at, left) = match (self.head(), self.len()) {
            (Some(h), Some(n)) => (h.next, n),
            _ => (0, 0),
        };
        RespItems {
            wire: self.wire.clone(),
            at,
            left,
        }
    }

    /// The value as an owned tree, checked as [`RespValue::parse`] checks it.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Malformed`] when the bytes are not exactly one value.
    pub fn to_value(&self) -> Result<RespValue, DecodeError> {
        RespValue::parse(&self.wire)
    }

    /// The line's content, for a value of type `kind`.
    fn line_of(&self, kind: u8) -> Option<Bytes> {
        let h = self.head()?;
        (h.kind == kind).then(|| self.wire.slice(1..1 + h.line.len()))
    }

    /// The body of a blob (`$`, `!`, `=`).
    fn blob(&self) -> Option<Bytes> {
        let h = self.head()?;
        let len = usize::try_from(parse_int(h.line).ok()?).ok()?;
        let end = h.next.checked_add(len)?;
        (end <= self.wire.len()).then(|| self.wire.slice(h.next..end))
    }
}

/// The elements of an array reply, made by [`RespReply::items`].
#[derive(Clone, Debug)]
pub struct RespItems {
    wire: Bytes,
    at: usize,
    left: usize,
}

impl Iterator for RespItems {
    type Item = RespReply;

    fn next(&mut self) -> Option<RespReply> {
        if self.left == 0 {
            return None;
        }
        let Some(end) = value_end(&self.wire, self.at) else {
            self.left = 0;
            return None;
        };
        let item = RespReply::new(self.wire.slice(self.at..end));
        self.at = end;
        self.left -= 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::framing::{Framing, Resp};
    use bytes::BytesMut;

    fn decoded(wire: &[u8]) -> Bytes {
        let mut src = BytesMut::from(wire);
        Resp::new()
            .decode(&mut src)
            .unwrap()
            .expect("one whole value")
    }

    #[test]
    fn every_type_reads_in_place_from_a_decoded_frame() {
        let r = |w: &[u8]| RespReply::new(decoded(w));
        assert_eq!(r(b"+OK\r\n").as_simple().as_deref(), Some(&b"OK"[..]));
        assert_eq!(r(b"-ERR x\r\n").as_error().as_deref(), Some(&b"ERR x"[..]));
        assert_eq!(r(b"!3\r\nbad\r\n").as_error().as_deref(), Some(&b"bad"[..]));
        assert_eq!(r(b":+5\r\n").as_integer(), Some(5));
        assert_eq!(
            r(b"$2\r\n\r\n\r\n").as_bulk().as_deref(),
            Some(&b"\r\n"[..])
        );
        assert_eq!(
            r(b"=7\r\ntxt:abc\r\n").as_bulk().as_deref(),
            Some(&b"txt:abc"[..])
        );
        assert!(r(b"$-1\r\n").is_null() && r(b"*-1\r\n").is_null() && r(b"_\r\n").is_null());
        assert_eq!(r(b"$-1\r\n").as_bulk(), None);
        assert_eq!(r(b"#f\r\n").as_bool(), Some(false));
        assert_eq!(r(b",-2.5\r\n").as_double(), Some(-2.5));
        assert_eq!(r(b"(123\r\n").as_big_number().as_deref(), Some(&b"123"[..]));
        assert!(r(b"*0\r\n").is_empty());
        assert_eq!(
            r(b"+OK\r\n").as_integer(),
            None,
            "a read of another type is None"
        );
    }

    #[test]
    fn nested_arrays_are_walked_element_by_element_and_agree_with_the_parser() {
        let wire = b"*4\r\n*2\r\n$1\r\na\r\n*1\r\n:1\r\n$3\r\nb\r\n\r\n*0\r\n:7\r\n";
        let reply = RespReply::new(decoded(wire));
        let items: Vec<RespReply> = reply.items().collect();
        assert_eq!(items.len(), 4);
        let inner: Vec<RespReply> = items[0].items().collect();
        assert_eq!(inner[0].as_bulk().as_deref(), Some(&b"a"[..]));
        assert_eq!(
            inner[1].items().next().and_then(|i| i.as_integer()),
            Some(1)
        );
        assert_eq!(items[1].as_bulk().as_deref(), Some(&b"b\r\n"[..]));
        assert!(items[2].is_empty());
        assert_eq!(items[3].as_integer(), Some(7));
        assert_eq!(reply.to_value(), RespValue::parse(wire));
    }

    #[test]
    fn a_map_yields_its_keys_and_values_and_an_attribute_its_value_last() {
        let map = RespReply::new(decoded(b"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n"));
        assert_eq!(map.len(), Some(4));
        let items: Vec<RespReply> = map.items().collect();
        assert_eq!(items[2].as_simple().as_deref(), Some(&b"b"[..]));
        assert_eq!(items[3].len(), Some(1));
        let attributed = RespReply::new(decoded(b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n"));
        let last = attributed.items().last().and_then(|v| v.as_bulk());
        assert_eq!(last.as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn a_bulk_string_is_the_frames_own_bytes() {
        let frame = decoded(b"$5\r\nhello\r\n");
        let body = RespReply::new(frame.clone()).as_bulk().unwrap();
        assert_eq!(body.as_ptr(), frame[4..].as_ptr());
    }

    #[test]
    fn bytes_that_are_not_a_value_read_as_none_without_a_panic() {
        for wire in [
            &b""[..],
            b"*",
            b"*3\r\n:1\r\n",
            b"$10\r\nab\r\n",
            b"*99999999999999\r\n",
            b"*-5\r\n",
            b"\r\n",
            b"$-7\r\n",
        ] {
            let reply = RespReply::new(Bytes::copy_from_slice(wire));
            let _ = (
                reply.as_bulk(),
                reply.as_integer(),
                reply.len(),
                reply.kind(),
            );
            assert!(reply.items().count() <= 1, "{wire:?}");
        }
        let deep = b"*1\r\n".repeat(100_000);
        assert_eq!(value_end(&deep, 0), None, "walked without recursion");
    }
}
