//! RESP, the redis protocol: commands out as arrays of bulk strings, replies in as whole values.

use bytes::{Bytes, BytesMut};

use super::{DecodeError, EncodeError, Framing, DEFAULT_MAX_FRAME};
use crate::error::ConfigError;

/// RESP2 and RESP3: each decoded frame is one whole reply, as its exact wire bytes; each
/// encoded frame is one command.
///
/// Decode accepts every RESP2 and RESP3 type: simple strings, errors, integers, bulk strings
/// (binary, and the null bulk string), arrays (nested, empty and null), and RESP3's null,
/// boolean, double, big number, blob error, verbatim string, map, set, push and attribute (an
/// attribute and the value after it are one frame). It is incremental (a value split
/// anywhere is resumed where it stopped, not parsed again) and bounded: a value longer than
/// `max_frame` bytes or nested deeper than `max_depth` aggregates is refused as soon as that is
/// known, and nothing the peer announces is reserved before its bytes are there. Read a
/// decoded reply in place with [`RespReply`](super::RespReply) (no copy and no second check),
/// or as an owned tree with [`RespValue::parse`].
///
/// Encode writes a frame that starts with `*` as it is, once checked to be exactly one
/// complete RESP array (as made by [`Resp::command`]); any other frame is an inline command,
/// split on ASCII whitespace and written as an array of bulk strings. Commands whose
/// arguments hold spaces or binary data are made with [`Resp::command`].
///
/// # Examples
///
/// ```
/// use relink::bytes::BytesMut;
/// use relink::framing::{Framing, Resp, RespValue};
///
/// let mut resp = Resp::new();
/// let mut wire = Vec::new();
/// resp.encode(b"GET key", &mut wire)?;
/// assert_eq!(wire, b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n");
/// resp.encode(&Resp::command(["SET", "key", "a b\r\n"]), &mut wire)?;
///
/// let mut src = BytesMut::from(&b"+PONG\r\n*2\r\n$1\r\n\n\r\n:7\r\n$3\r\nab"[..]);
/// assert_eq!(resp.decode(&mut src)?.as_deref(), Some(&b"+PONG\r\n"[..]));
/// let reply = resp.decode(&mut src)?.unwrap();
/// assert_eq!(
///     RespValue::parse(&reply)?,
///     RespValue::Array(vec![RespValue::Bulk(b"\n".to_vec()), RespValue::Integer(7)])
/// );
/// assert_eq!(resp.decode(&mut src)?, None); // "$3\r\nab" waits for its last byte
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Resp {
    max_frame: usize,
    max_depth: usize,
    scanner: Scanner,
    /// The protocol's check of a command at the call, beside the framing's own.
    commands: Option<CommandCheck>,
}

/// A protocol's check of a command at the call.
pub(crate) type CommandCheck = fn(&[u8]) -> Result<(), EncodeError>;

/// Where the decoding of the value at the front of the buffer stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Scanner {
    /// `src[..pos]` is a valid beginning of the value (whole items).
    pos: usize,
    /// `src[pos..scan]` holds no `\n`.
    scan: usize,
    /// Elements still expected by each open array, outermost first.
    open: Vec<u64>,
}

impl PartialEq for Resp {
    fn eq(&self, other: &Resp) -> bool {
        // The protocol's check is known by whether there is one.
        (
            self.max_frame,
            self.max_depth,
            &self.scanner,
            self.commands.is_some(),
        ) == (
            other.max_frame,
            other.max_depth,
            &other.scanner,
            other.commands.is_some(),
        )
    }
}

impl Eq for Resp {}

impl Default for Resp {
    fn default() -> Self {
        Resp::new()
    }
}

impl Resp {
    /// The default `max_depth`: 32 nested arrays.
    pub const DEFAULT_MAX_DEPTH: usize = 32;

    /// RESP with values of at most 16 MiB and [`Resp::DEFAULT_MAX_DEPTH`] nested arrays.
    pub fn new() -> Resp {
        Resp {
            max_frame: DEFAULT_MAX_FRAME,
            max_depth: Resp::DEFAULT_MAX_DEPTH,
            scanner: Scanner::default(),
            commands: None,
        }
    }

    /// RESP whose check at the call also asks `commands` (a protocol's refusal of commands it
    /// cannot follow).
    pub(crate) fn checking(commands: CommandCheck) -> Resp {
        Resp {
            commands: Some(commands),
            ..Resp::new()
        }
    }

    /// A builder with the defaults of [`Resp::new`].
    pub fn builder() -> RespBuilder {
        RespBuilder {
            max_frame: DEFAULT_MAX_FRAME,
            max_depth: Resp::DEFAULT_MAX_DEPTH,
        }
    }

    /// A command as RESP sends it: an array of bulk strings, one per argument (any bytes).
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::framing::Resp;
    ///
    /// assert_eq!(Resp::command(["PING"]), b"*1\r\n$4\r\nPING\r\n");
    /// assert_eq!(Resp::command([&b"SET"[..], b"k", b""]), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    /// ```
    pub fn command<I>(args: I) -> Vec<u8>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let args: Vec<I::Item> = args.into_iter().collect();
        let mut out = Vec::new();
        write_array(args.iter().map(AsRef::as_ref), args.len(), &mut out);
        out
    }
}

/// Builds a [`Resp`] framing; made by [`Resp::builder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespBuilder {
    max_frame: usize,
    max_depth: usize,
}

impl RespBuilder {
    /// The largest value read, or command written, in wire bytes. Defaults to 16 MiB.
    pub fn max_frame(mut self, max_frame: usize) -> Self {
        self.max_frame = max_frame;
        self
    }

    /// The deepest nesting of arrays read or written (1 allows arrays of plain values only).
    /// Defaults to [`Resp::DEFAULT_MAX_DEPTH`].
    pub fn max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// The framing.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`] for a `max_frame` or a `max_depth` of 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use relink::framing::Resp;
    ///
    /// let resp = Resp::builder().max_frame(1 << 20).max_depth(4).build()?;
    /// assert!(Resp::builder().max_depth(0).build().is_err());
    /// # Ok::<(), relink::error::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<Resp, ConfigError> {
        if self.max_frame == 0 {
            return Err(ConfigError::ZeroLimit { name: "max_frame" });
        }
        if self.max_depth == 0 {
            return Err(ConfigError::ZeroLimit { name: "max_depth" });
        }
        Ok(Resp {
            max_frame: self.max_frame,
            max_depth: self.max_depth,
            scanner: Scanner::default(),
            commands: None,
        })
    }
}

/// Appends an array of `len` bulk strings.
fn write_array<'a>(args: impl Iterator<Item = &'a [u8]>, len: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{len}\r\n").as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// The length of a bulk string of `len` bytes on the wire.
fn bulk_len(len: usize) -> usize {
    1 + decimal_len(len) + 2 + len + 2
}

/// The number of decimal digits of `n`.
fn decimal_len(n: usize) -> usize {
    let mut digits = 1;
    let mut n = n / 10;
    while n > 0 {
        digits += 1;
        n /= 10;
    }
    digits
}

/// The words of an inline command.
fn words(frame: &[u8]) -> impl Iterator<Item = &[u8]> {
    frame
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
}

/// Parses a RESP integer line: an optional `+` or `-`, then decimal digits (the spec's
/// `:[<+|->]<value>`; lengths use the same form).
pub(super) fn parse_int(line: &[u8]) -> Result<i64, DecodeError> {
    let digits = line
        .strip_prefix(b"-")
        .or_else(|| line.strip_prefix(b"+"))
        .unwrap_or(line);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(DecodeError::Malformed("bad RESP integer"));
    }
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(DecodeError::Malformed("bad RESP integer"))
}

/// Whether `s` is one or more ASCII digits.
fn all_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// Whether `line` is a RESP3 double: `[+|-]digits[.digits][(e|E)[+|-]digits]`, `inf`,
/// `-inf` or `nan`.
fn is_double(line: &[u8]) -> bool {
    let unsigned = line
        .strip_prefix(b"-")
        .or_else(|| line.strip_prefix(b"+"))
        .unwrap_or(line);
    if line == b"nan" || unsigned == b"inf" {
        return true;
    }
    let (mantissa, exponent) = match unsigned.iter().position(|&b| b == b'e' || b == b'E') {
        Some(e) => (&unsigned[..e], Some(&unsigned[e + 1..])),
        None => (unsigned, None),
    };
    let (integral, fraction) = match mantissa.iter().position(|&b| b == b'.') {
        Some(dot) => (&mantissa[..dot], Some(&mantissa[dot + 1..])),
        None => (mantissa, None),
    };
    let exponent = exponent.map(|e| {
        e.strip_prefix(b"-")
            .or_else(|| e.strip_prefix(b"+"))
            .unwrap_or(e)
    });
    all_digits(integral) && fraction.map_or(true, all_digits) && exponent.map_or(true, all_digits)
}

/// Checks a simple line's content for its type byte.
fn check_simple(kind: u8, line: &[u8]) -> Result<(), DecodeError> {
    match kind {
        b':' => parse_int(line).map(drop),
        b'_' if !line.is_empty() => Err(DecodeError::Malformed("bad RESP null")),
        b'#' if line != b"t" && line != b"f" => Err(DecodeError::Malformed("bad RESP boolean")),
        b',' if !is_double(line) => Err(DecodeError::Malformed("bad RESP double")),
        b'(' if !all_digits(
            line.strip_prefix(b"-")
                .or_else(|| line.strip_prefix(b"+"))
                .unwrap_or(line),
        ) =>
        {
            Err(DecodeError::Malformed("bad RESP big number"))
        }
        _ if line.contains(&b'\r') => Err(DecodeError::Malformed("a RESP line holds a CR")),
        _ => Ok(()),
    }
}

/// Checks the body of a blob (`$`, `!`, `=`): a verbatim string starts with a 3-byte format
/// and a colon.
fn check_blob(kind: u8, body: &[u8]) -> Result<(), DecodeError> {
    if kind == b'=' && body.get(3) != Some(&b':') {
        return Err(DecodeError::Malformed("bad RESP verbatim string"));
    }
    Ok(())
}

/// The values that follow the header of an aggregate of type `kind` whose header says `n`:
/// an array's, a set's or a push's `n` elements, a map's `n` keys and `n` values, an
/// attribute's `n` pairs then the value they describe. 0 for RESP2's null array (`*-1`).
pub(super) fn elements(kind: u8, n: i64) -> Result<u64, DecodeError> {
    let bad = DecodeError::Malformed("bad RESP aggregate length");
    match (kind, u64::try_from(n)) {
        (b'*', Err(_)) if n == -1 => Ok(0),
        (_, Err(_)) => Err(bad),
        (b'%', Ok(n)) => n.checked_mul(2).ok_or(bad),
        (b'|', Ok(n)) => n.checked_mul(2).and_then(|n| n.checked_add(1)).ok_or(bad),
        (_, Ok(n)) => Ok(n),
    }
}

/// Finds the `\n` ending the line that starts at `start`, searching from `from`; checks the
/// `\r` before it. Returns the index of the `\r`.
fn line_end(src: &[u8], start: usize, from: usize) -> Result<Option<usize>, DecodeError> {
    let Some(i) = src[from..].iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let nl = from + i;
    if nl < start + 2 || src[nl - 1] != b'\r' {
        return Err(DecodeError::Malformed("a RESP line must end in CRLF"));
    }
    Ok(Some(nl - 1))
}

impl Scanner {
    /// Advances over `src`: `Some(end)` once `src[..end]` is one whole value.
    fn scan(
        &mut self,
        src: &[u8],
        max_frame: usize,
        max_depth: usize,
    ) -> Result<Option<usize>, DecodeError> {
        let too_large = |len: usize| DecodeError::FrameTooLarge {
            len: len as u64,
            max: max_frame,
        };
        loop {
            let start = self.pos;
            let Some(cr) = line_end(src, start, self.scan.max(start))? else {
                self.scan = src.len();
                if src.len() > max_frame {
                    return Err(too_large(src.len()));
                }
                return Ok(None);
            };
            let next = cr + 2;
            if next > max_frame {
                return Err(too_large(next));
            }
            let kind = src[start];
            let line = &src[start + 1..cr];
            let end = match kind {
                b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => {
                    check_simple(kind, line)?;
                    next
                }
                b'$' | b'!' | b'=' => match parse_int(line)? {
                    -1 if kind == b'$' => next,
                    n if n < 0 => return Err(DecodeError::Malformed("bad RESP bulk length")),
                    n => {
                        let end = usize::try_from(n)
                            .ok()
                            .and_then(|n| next.checked_add(n)?.checked_add(2))
                            .filter(|&end| end <= max_frame)
                            .ok_or_else(|| too_large(next.saturating_add(n as usize)))?;
                        if src.len() < end {
                            self.scan = start;
                            return Ok(None);
                        }
                        if &src[end - 2..end] != b"\r\n" {
                            return Err(DecodeError::Malformed(
                                "a RESP bulk string must end in CRLF",
                            ));
                        }
                        check_blob(kind, &src[next..end - 2])?;
                        end
                    }
                },
                b'*' | b'%' | b'~' | b'>' | b'|' => match elements(kind, parse_int(line)?)? {
                    0 => next,
                    n => {
                        if self.open.len() >= max_depth {
                            return Err(DecodeError::Malformed("RESP arrays nested too deep"));
                        }
                        self.open.push(n);
                        self.pos = next;
                        self.scan = next;
                        continue;
                    }
                },
                _ => return Err(DecodeError::Malformed("unknown RESP type")),
            };
            self.pos = end;
            self.scan = end;
            loop {
                match self.open.last_mut() {
                    None => {
                        *self = Scanner::default();
                        return Ok(Some(end));
                    }
                    Some(left) => {
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        self.open.pop();
                    }
                }
            }
        }
    }
}

impl Resp {
    /// The framing's own check: one complete array, or an inline command, within the limits.
    fn check_form(&self, frame: &[u8]) -> Result<(), EncodeError> {
        if frame.first() == Some(&b'*') {
            if frame.len() > self.max_frame {
                return Err(EncodeError::TooLarge {
                    len: frame.len(),
                    max: self.max_frame,
                });
            }
            return match Scanner::default().scan(frame, self.max_frame, self.max_depth) {
                Ok(Some(end)) if end == frame.len() => Ok(()),
                _ => Err(EncodeError::Malformed(
                    "not exactly one complete RESP array",
                )),
            };
        }
        let (count, body) =
            words(frame).fold((0, 0), |(n, len), w| (n + 1, len + bulk_len(w.len())));
        if count == 0 {
            return Err(EncodeError::Malformed("an inline command needs a word"));
        }
        let len = 1 + decimal_len(count) + 2 + body;
        if len > self.max_frame {
            return Err(EncodeError::TooLarge {
                len,
                max: self.max_frame,
            });
        }
        Ok(())
    }
}

impl Framing for Resp {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check(frame)?;
        if frame.first() == Some(&b'*') {
            dst.extend_from_slice(frame);
        } else {
            write_array(words(frame), words(frame).count(), dst);
        }
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let result = self.scanner.scan(src, self.max_frame, self.max_depth);
        match result {
            Ok(Some(end)) => Ok(Some(src.split_to(end).freeze())),
            Ok(None) => Ok(None),
            Err(e) => {
                self.scanner = Scanner::default();
                Err(e)
            }
        }
    }

    fn check(&self, frame: &[u8]) -> Result<(), EncodeError> {
        self.check_form(frame)?;
        match self.commands {
            Some(commands) => commands(frame),
            None => Ok(()),
        }
    }

    fn reset(&mut self) {
        self.scanner = Scanner::default();
    }

    /// The largest value.
    fn max_buffered(&self) -> usize {
        self.max_frame
    }

    fn name(&self) -> &str {
        "resp"
    }
}

/// One RESP value, as read from a frame decoded by [`Resp`].
///
/// # Examples
///
/// ```
/// use relink::framing::RespValue;
///
/// assert_eq!(RespValue::parse(b"+OK\r\n")?, RespValue::Simple(b"OK".to_vec()));
/// assert_eq!(RespValue::parse(b"$-1\r\n")?, RespValue::Null);
/// assert!(RespValue::parse(b"+OK\r\n+OK\r\n").is_err()); // one value only
/// # Ok::<(), relink::framing::DecodeError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RespValue {
    /// A simple string (`+`).
    Simple(Vec<u8>),
    /// An error (`-`, or RESP3's blob error `!`).
    Error(Vec<u8>),
    /// An integer (`:`).
    Integer(i64),
    /// A bulk string (`$`, or RESP3's verbatim string `=` with its format prefix).
    Bulk(Vec<u8>),
    /// An array (`*`).
    Array(Vec<RespValue>),
    /// The null bulk string, the null array, or RESP3's null (`_`).
    Null,
    /// RESP3's boolean (`#`).
    Boolean(bool),
    /// RESP3's double (`,`).
    Double(f64),
    /// RESP3's big number (`(`), as its decimal digits.
    BigNumber(Vec<u8>),
    /// RESP3's map (`%`): its keys and values, in wire order.
    Map(Vec<(RespValue, RespValue)>),
    /// RESP3's set (`~`).
    Set(Vec<RespValue>),
    /// RESP3's push (`>`): data the server sends unasked (pub/sub messages, invalidations).
    Push(Vec<RespValue>),
    /// A value after RESP3's attribute (`|`): the attribute's pairs, then the value they
    /// describe.
    Attributed {
        /// The attribute's keys and values.
        attributes: Vec<(RespValue, RespValue)>,
        /// The value.
        value: Box<RespValue>,
    },
}

impl RespValue {
    /// Reads exactly one whole value.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Malformed`] when `bytes` are not exactly one value (incomplete, followed by
    /// more bytes, not RESP, or nested deeper than [`Resp::DEFAULT_MAX_DEPTH`] aggregates, the
    /// decoder's default).
    pub fn parse(bytes: &[u8]) -> Result<RespValue, DecodeError> {
        let (value, end) = parse_value(bytes, 0, 0)?;
        if end != bytes.len() {
            return Err(DecodeError::Malformed("bytes after the RESP value"));
        }
        Ok(value)
    }
}

/// The value of an aggregate of type `kind` from its elements, in wire order.
fn aggregate(kind: u8, mut items: Vec<RespValue>) -> RespValue {
    let pairs = |items: Vec<RespValue>| {
        let mut it = items.into_iter();
        std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
    };
    match kind {
        b'%' => RespValue::Map(pairs(items)),
        b'~' => RespValue::Set(items),
        b'>' => RespValue::Push(items),
        b'|' => {
            let value = items.pop().unwrap_or(RespValue::Null);
            RespValue::Attributed {
                attributes: pairs(items),
                value: Box::new(value),
            }
        }
        _ => RespValue::Array(items),
    }
}

/// Reads the value at `start`: the value and where it ends.
fn parse_value(src: &[u8], start: usize, depth: usize) -> Result<(RespValue, usize), DecodeError> {
    let incomplete = DecodeError::Malformed("incomplete RESP value");
    if start >= src.len() {
        return Err(incomplete);
    }
    let cr = line_end(src, start, start)?.ok_or(incomplete)?;
    let next = cr + 2;
    let kind = src[start];
    let line = &src[start + 1..cr];
    if matches!(kind, b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(') {
        check_simple(kind, line)?;
    }
    let value = match kind {
        b'+' => RespValue::Simple(line.to_vec()),
        b'-' => RespValue::Error(line.to_vec()),
        b':' => RespValue::Integer(parse_int(line)?),
        b'_' => RespValue::Null,
        b'#' => RespValue::Boolean(line == b"t"),
        b',' => RespValue::Double(
            std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(DecodeError::Malformed("bad RESP double"))?,
        ),
        b'(' => RespValue::BigNumber(line.to_vec()),
        b'$' | b'!' | b'=' => match parse_int(line)? {
            -1 if kind == b'$' => RespValue::Null,
            n if n < 0 => return Err(DecodeError::Malformed("bad RESP bulk length")),
            n => {
                let end = usize::try_from(n)
                    .ok()
                    .and_then(|n| next.checked_add(n)?.checked_add(2))
                    .filter(|&end| end <= src.len())
                    .ok_or(incomplete)?;
                if &src[end - 2..end] != b"\r\n" {
                    return Err(DecodeError::Malformed(
                        "a RESP bulk string must end in CRLF",
                    ));
                }
                check_blob(kind, &src[next..end - 2])?;
                let body = src[next..end - 2].to_vec();
                let value = if kind == b'!' {
                    RespValue::Error(body)
                } else {
                    RespValue::Bulk(body)
                };
                return Ok((value, end));
            }
        },
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let n = parse_int(line)?;
            if kind == b'*' && n == -1 {
                return Ok((RespValue::Null, next));
            }
            let count = elements(kind, n)?;
            if depth >= Resp::DEFAULT_MAX_DEPTH {
                return Err(DecodeError::Malformed("RESP arrays nested too deep"));
            }
            let mut items = Vec::new();
            let mut at = next;
            for _ in 0..count {
                let (item, end) = parse_value(src, at, depth + 1)?;
                items.push(item);
                at = end;
            }
            return Ok((aggregate(kind, items), at));
        }
        _ => return Err(DecodeError::Malformed("unknown RESP type")),
    };
    Ok((value, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::framing::testkit::{assert_every_split, decode_chunks, encode_all};

    #[test]
    fn an_inline_command_is_written_as_an_array_of_bulk_strings() {
        let mut resp = Resp::new();
        assert_eq!(
            encode_all(&mut resp, &[b"  SET k\tv \r\n"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        );
        assert_eq!(
            resp.check(b" \r\n"),
            Err(EncodeError::Malformed("an inline command needs a word"))
        );
    }

    #[test]
    fn an_array_frame_is_written_as_is_only_when_it_is_one_whole_array() {
        let mut resp = Resp::new();
        let cmd = Resp::command([&b"SET"[..], b"k", b"a\r\nb"]);
        assert_eq!(encode_all(&mut resp, &[&cmd]), cmd);
        let refused = EncodeError::Malformed("not exactly one complete RESP array");
        assert_eq!(resp.check(&cmd[..cmd.len() - 1]), Err(refused));
        assert_eq!(resp.check(&[&cmd[..], b"+OK\r\n"].concat()), Err(refused));
        assert_eq!(resp.check(b"*1\r\n$1\r\nab\r\n"), Err(refused));
        assert_eq!(resp.check(b"*-1\r\n"), Ok(()));
    }

    #[test]
    fn every_reply_type_is_one_frame_at_every_split_point() {
        let replies: &[&[u8]] = &[
            b"+PONG\r\n",
            b"-ERR wrong\r\n",
            b":-42\r\n",
            b"$5\r\na\r\n\0b\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n*0\r\n$-1\r\n",
            b"_\r\n",
            b"#t\r\n",
            b",1.5\r\n",
            b"(12345678901234567890\r\n",
            b"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
            b"%0\r\n",
        ];
        assert_every_split(&Resp::new(), &replies.concat(), replies);
    }

    #[test]
    fn a_split_array_is_resumed_not_parsed_again() {
        let mut resp = Resp::new();
        let mut src = BytesMut::from(&b"*2\r\n$3\r\nabc\r\n$2\r\n"[..]);
        assert_eq!(resp.decode(&mut src), Ok(None));
        assert_eq!(resp.scanner.pos, 13);
        assert_eq!(resp.scanner.open, [1]);
        src.extend_from_slice(b"de\r\n");
        assert_eq!(resp.decode(&mut src).unwrap().unwrap().len(), 21);
        assert_eq!(resp.scanner, Scanner::default());
    }

    #[test]
    fn an_announced_bulk_above_the_limit_is_refused_without_waiting_or_reserving() {
        let mut resp = Resp::builder().max_frame(100).build().unwrap();
        let mut src = BytesMut::with_capacity(64);
        src.extend_from_slice(b"$1000000000\r\n");
        assert!(matches!(
            resp.decode(&mut src),
            Err(DecodeError::FrameTooLarge { max: 100, .. })
        ));
        assert!(src.capacity() < 1024);
        assert_eq!(
            decode_chunks(&mut resp, [&[b'+'; 101][..]]),
            Err(DecodeError::FrameTooLarge { len: 101, max: 100 })
        );
    }

    #[test]
    fn arrays_nested_past_max_depth_are_refused() {
        let mut resp = Resp::builder().max_depth(2).build().unwrap();
        assert_eq!(
            decode_chunks(&mut resp, [&b"*1\r\n*1\r\n:1\r\n"[..]])
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            decode_chunks(&mut resp, [&b"*1\r\n*1\r\n*1\r\n:1\r\n"[..]]),
            Err(DecodeError::Malformed("RESP arrays nested too deep"))
        );
    }

    #[test]
    fn bytes_that_break_resp_are_malformed() {
        for (wire, why) in [
            (&b"?x\r\n"[..], "unknown RESP type"),
            (b"+OK\n", "a RESP line must end in CRLF"),
            (b":12a\r\n", "bad RESP integer"),
            (b"$-2\r\n", "bad RESP bulk length"),
            (b"$1\r\nab\r\n", "a RESP bulk string must end in CRLF"),
            (b"*-5\r\n", "bad RESP aggregate length"),
            (b"%-1\r\n", "bad RESP aggregate length"),
            (b"#x\r\n", "bad RESP boolean"),
        ] {
            assert_eq!(
                decode_chunks(&mut Resp::new(), [wire]),
                Err(DecodeError::Malformed(why)),
                "{wire:?}"
            );
        }
    }

    #[test]
    fn resp_values_parse_from_whole_replies() {
        use RespValue::*;
        assert_eq!(
            RespValue::parse(b"*4\r\n+OK\r\n-ERR x\r\n$2\r\n\r\n\r\n*2\r\n:5\r\n$-1\r\n"),
            Ok(Array(vec![
                Simple(b"OK".to_vec()),
                Error(b"ERR x".to_vec()),
                Bulk(b"\r\n".to_vec()),
                Array(vec![Integer(5), Null]),
            ]))
        );
        assert_eq!(RespValue::parse(b"#f\r\n"), Ok(Boolean(false)));
        assert_eq!(RespValue::parse(b",2.5\r\n"), Ok(Double(2.5)));
        assert_eq!(RespValue::parse(b"*-1\r\n"), Ok(Null));
        assert_eq!(
            RespValue::parse(b"%1\r\n+k\r\n~1\r\n:1\r\n"),
            Ok(Map(vec![(Simple(b"k".to_vec()), Set(vec![Integer(1)]))]))
        );
        assert_eq!(
            RespValue::parse(b">1\r\n+hi\r\n"),
            Ok(Push(vec![Simple(b"hi".to_vec())]))
        );
        assert_eq!(
            RespValue::parse(b"|1\r\n+ttl\r\n:3\r\n:7\r\n"),
            Ok(Attributed {
                attributes: vec![(Simple(b"ttl".to_vec()), Integer(3))],
                value: Box::new(Integer(7)),
            })
        );
        assert!(
            RespValue::parse(b"|1\r\n+ttl\r\n:3\r\n").is_err(),
            "no value after it"
        );
        let nested = |depth: usize| [b"*1\r\n".repeat(depth), b":1\r\n".to_vec()].concat();
        for (depth, whole) in [
            (Resp::DEFAULT_MAX_DEPTH, true),
            (Resp::DEFAULT_MAX_DEPTH + 1, false),
        ] {
            let wire = nested(depth);
            let decoded = decode_chunks(&mut Resp::new(), [&wire[..]]);
            assert_eq!(decoded.is_ok(), whole, "decode at depth {depth}");
            assert_eq!(
                RespValue::parse(&wire).is_ok(),
                whole,
                "parse at depth {depth}"
            );
        }
        assert!(RespValue::parse(b"*2\r\n:1\r\n").is_err());
        assert!(RespValue::parse(b"*1000000000\r\n").is_err());
        assert!(RespValue::parse(b"").is_err());
    }

    #[test]
    fn an_integer_with_a_plus_sign_is_accepted_as_the_spec_allows() {
        assert_eq!(
            decode_chunks(&mut Resp::new(), [&b":+5\r\n"[..]]),
            Ok(vec![b":+5\r\n".to_vec()])
        );
        assert_eq!(RespValue::parse(b":+5\r\n"), Ok(RespValue::Integer(5)));
        assert!(RespValue::parse(b":+\r\n").is_err());
        assert!(RespValue::parse(b":+-5\r\n").is_err());
    }

    #[test]
    fn the_decoder_and_the_parser_agree_on_resp3_doubles_big_numbers_and_verbatim_strings() {
        for (wire, valid) in [
            (&b",1.5\r\n"[..], true),
            (b",-2\r\n", true),
            (b",+3.25e-2\r\n", true),
            (b",1E10\r\n", true),
            (b",inf\r\n", true),
            (b",-inf\r\n", true),
            (b",nan\r\n", true),
            (b",abc\r\n", false),
            (b",\r\n", false),
            (b",1.\r\n", false),
            (b",.5\r\n", false),
            (b",1e\r\n", false),
            (b",infinity\r\n", false),
            (b",NaN\r\n", false),
            (b"(12345678901234567890123\r\n", true),
            (b"(-1\r\n", true),
            (b"(+1\r\n", true),
            (b"(12a\r\n", false),
            (b"(\r\n", false),
            (b"=7\r\ntxt:abc\r\n", true),
            (b"=3\r\nabc\r\n", false),
            (b"=4\r\nabcd\r\n", false),
        ] {
            let decoded = decode_chunks(&mut Resp::new(), [wire]);
            let parsed = RespValue::parse(wire);
            assert_eq!(decoded.is_ok(), valid, "decode {wire:?}: {decoded:?}");
            assert_eq!(parsed.is_ok(), valid, "parse {wire:?}: {parsed:?}");
        }
    }

    #[test]
    fn zero_limits_are_config_errors() {
        assert_eq!(
            Resp::builder().max_frame(0).build(),
            Err(ConfigError::ZeroLimit { name: "max_frame" })
        );
        assert_eq!(
            Resp::builder().max_depth(0).build(),
            Err(ConfigError::ZeroLimit { name: "max_depth" })
        );
    }
}
