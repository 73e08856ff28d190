//! Built-in protocols: a [`Protocol`] for servers relink knows, to hand to
//! [`Builder::protocol`](crate::Builder::protocol) as they are. A protocol of one's own
//! implements the trait (see its page for a whole NATS client in one example).

use std::collections::BTreeSet;
use std::time::Duration;

use super::confirm::Answers;
use super::framing::{AnyFraming, Resp, RespValue};
use super::heartbeat::Heartbeat;
use super::protocol::{Opening, Protocol, Replies, ReplyKind, Verdict};
use crate::error::EncodeError;

/// redis (RESP 2 or 3), bringing its framing ([`Resp`]), its heartbeat (`PING` every second)
/// and confirmation by reply ([`Confirm::reply`](crate::Confirm::reply)) unless the builder is given its own: every
/// command answered in order ([`Answers::EveryFrame`], so [`Confirm::reply`](crate::Confirm::reply) confirms each
/// frame by its reply), `PING` as the heartbeat's ping, and the commands that open every
/// connection (`AUTH`, `SELECT`, `HELLO 3`, `CLIENT SETNAME`).
///
/// What it knows of redis' answers:
/// - **Pushes are the server's own.** RESP3 pushes (`>`: pub/sub messages, client-side
///   caching invalidations), and in RESP2 the `message`, `pmessage` and `smessage` arrays of a
///   connection that subscribed, and `MONITOR`'s lines, take no turn and are no request's
///   reply: they are [`Event::Frame`](crate::Event::Frame)s.
/// - **What the connection is, it learns from redis' answers**, read in order, never from
///   what was written: RESP3 from `HELLO 3`'s map (`HELLO 2` and `RESET`'s `+RESET` go
///   back), the channels, patterns and shard channels held from the names in the
///   confirmations, a transaction from `MULTI`'s `+OK` (its answers then read off `EXEC`'s
///   array), `MONITOR` from its `+OK`.
/// - **Pub/sub commands are followed answer by answer** ([`Replies::Followed`]): `SUBSCRIBE a
///   b` lasts two confirmations (`*3` in RESP2, `>3` pushes in RESP3), a bare `UNSUBSCRIBE`
///   one per channel held when redis runs it; a confirmation of another kind, or one in a
///   plain command's turn, is [`ReplyKind::Unexpected`] and closes the connection. As a
///   request, a `SUBSCRIBE` gets its first confirmation as its reply.
/// - **Blocking commands hold their answer on purpose** ([`Replies::Held`]): `BLPOP`,
///   `BRPOP`, `BRPOPLPUSH`, `BLMOVE`, `BLMPOP`, `BZPOPMIN`, `BZPOPMAX`, `BZMPOP`, `XREAD` and
///   `XREADGROUP` with `BLOCK`, `WAIT`, `WAITAOF`: the heartbeat waits their own timeout.
/// - **Commands that take answers away are refused at the call**: `CLIENT REPLY OFF` and
///   `SKIP`, `QUIT` ([`EncodeError::Unsupported`], by the framing's check).
/// - **A refusal is not a confirmation.** `-LOADING`, `-BUSY`, `-TRYAGAIN`, `-MASTERDOWN`
///   and `-CLUSTERDOWN` say the command did not run and will later
///   ([`ReplyKind::Refused`]: that frame alone written again after a pause, or reported);
///   any other error reply (`-ERR`, `-WRONGTYPE`, a RESP3 `!` blob error) is
///   [`ReplyKind::Error`], given to the application with its frame. Inside a transaction a
///   refusal is an error too (`EXEC` aborts the whole block), and so is a refused `MULTI`.
/// - **The opening waits out a loading server.** With opening commands the link is Ready
///   once each has its reply. A refusal above answering one of them writes the opening again
///   after a short pause ([`Verdict::Retry`]), so `open_with(["PING"])` keeps the link from
///   a server that still loads its data and makes it Ready within 250 ms of the end; any other
///   error reply (a wrong password, a database that does not exist) refuses the link
///   ([`Verdict::Refused`], retried at
///   [`Reconnect::config_failure_retry`](crate::config::Reconnect::config_failure_retry)'s pace, the reply in an
///   [`Event::Error`](crate::Event::Error)). Without opening commands the link is Ready at
///   the connect.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::protocol::Redis;
/// use relink::Link;
///
/// let link = Link::builder("127.0.0.1:6379")
///     .protocol(Redis::new().open_with(["AUTH", "app", "secret"]).open_with(["SELECT", "2"]))
///     .build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Redis {
    opening: Vec<Vec<u8>>,
    /// Answers the opening still waits for.
    awaited: usize,
    /// The connection as redis' answers describe it.
    session: Session,
}

/// What redis said of the connection so far: each field changes only on an answer that says
/// so, read in the order redis gave them.
#[derive(Clone, Debug, Default)]
struct Session {
    /// `HELLO 3` was answered with RESP3's map (`HELLO 2` or `RESET` goes back).
    resp3: bool,
    /// Channels (`[0]`), patterns (`[1]`) and shard channels (`[2]`) held, by name, as redis'
    /// confirmations named them.
    held: [BTreeSet<Vec<u8>>; 3],
    /// `MULTI` was answered `+OK` and no `EXEC` or `DISCARD` answered since: commands answer
    /// `+QUEUED`.
    multi: bool,
    /// `MONITOR` was answered `+OK`: its lines are pushes.
    monitoring: bool,
    /// Answers come in the turn of a command whose answers are followed.
    seen: u32,
    /// What the commands queued in the transaction asked, in order: `EXEC`'s answer holds
    /// theirs.
    queued: Vec<Asked>,
    /// `EXEC`'s answer is being read: the queued commands whose answers are still to come
    /// (a pub/sub command queued in a transaction answers inside `EXEC`'s array, and its
    /// confirmations past the array's count follow it as answers of their own).
    exec: Option<Exec>,
}

/// The answers of a transaction's commands, read off `EXEC`'s answer.
#[derive(Clone, Debug, Default)]
struct Exec {
    queue: std::collections::VecDeque<Asked>,
    /// Answers of the first queued command read so far.
    seen: u32,
    /// `EXEC`'s own array was read.
    started: bool,
}

impl Session {
    fn subscribed(&self) -> bool {
        self.held.iter().any(|h| !h.is_empty())
    }
}

/// The interval of the `PING` a redis link writes, unless told otherwise.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// The errors by which redis says a command did not run and will later.
const REFUSALS: [&[u8]; 5] = [
    b"-LOADING",
    b"-BUSY",
    b"-TRYAGAIN",
    b"-MASTERDOWN",
    b"-CLUSTERDOWN",
];

/// The pub/sub commands, by kind (channels, patterns, shard channels): subscribe, then
/// unsubscribe, as redis names them in its confirmations.
const PUBSUB: [(&[u8], &[u8]); 3] = [
    (b"subscribe", b"unsubscribe"),
    (b"psubscribe", b"punsubscribe"),
    (b"ssubscribe", b"sunsubscribe"),
];

/// What a command asks of redis' answers, as far as the link follows them: the mark of its
/// [`Replies::Followed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    /// Any other command: one answer, which is never a pub/sub confirmation in RESP2.
    Plain,
    Hello,
    Reset,
    Monitor,
    Multi,
    Exec,
    Discard,
    /// A script: one answer of any shape.
    Script,
    /// `(P|S)SUBSCRIBE` (`sub`) or `(P|S)UNSUBSCRIBE` of kind `kind` with `args` names: one
    /// confirmation per name, or (a bare unsubscribe) one per name held.
    PubSub {
        kind: u8,
        sub: bool,
        args: u32,
    },
}

impl Asked {
    fn mark(self) -> u32 {
        match self {
            Asked::Plain => 0,
            Asked::Hello => 1,
            Asked::Reset => 2,
            Asked::Monitor => 3,
            Asked::Multi => 4,
            Asked::Exec => 5,
            Asked::Discard => 6,
            Asked::Script => 7,
            Asked::PubSub { kind, sub, args } => {
                8 | u32::from(kind) << 1 | u32::from(sub) | args.min(1 << 23) << 8
            }
        }
    }

    fn of(replies: Replies) -> Asked {
        let Replies::Followed(mark) = replies else {
            return Asked::Plain;
        };
        match mark {
            1 => Asked::Hello,
            2 => Asked::Reset,
            3 => Asked::Monitor,
            4 => Asked::Multi,
            5 => Asked::Exec,
            6 => Asked::Discard,
            7 => Asked::Script,
            m if m & 8 != 0 => Asked::PubSub {
                kind: ((m >> 1) & 3) as u8,
                sub: m & 1 == 1,
                args: m >> 8,
            },
            _ => Asked::Plain,
        }
    }
}

impl Redis {
    /// redis with no opening command: Ready at the connect.
    pub fn new() -> Redis {
        Redis::default()
    }

    /// A command written first on every connection, in the order given, and answered before
    /// the link is Ready: `open_with(["AUTH", user, password])`.
    pub fn open_with<I>(mut self, command: I) -> Redis
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.opening.push(Resp::command(command));
        self
    }

    /// What a pub/sub confirmation (`*3` or `>3`: kind, name or null, count) in the turn of
    /// `asked` does: the names held follow it, and it says whether the turn goes on.
    fn confirmation(&mut self, reply: &[u8], kind: u8, sub: bool, args: u32) -> ReplyKind {
        let Some((name, channel)) = confirmation(reply) else {
            return ReplyKind::Unexpected;
        };
        let (subscribe, unsubscribe) = PUBSUB[usize::from(kind)];
        let expected = if sub { subscribe } else { unsubscribe };
        if !name.eq_ignore_ascii_case(expected) {
            return ReplyKind::Unexpected;
        }
        let held = &mut self.session.held[usize::from(kind)];
        if let Some(channel) = channel {
            if sub {
                held.insert(channel.to_vec());
            } else {
                held.remove(channel);
            }
        }
        self.session.seen += 1;
        let done = match args {
            0 => channel.is_none() || held.is_empty(),
            n => self.session.seen >= n,
        };
        if done {
            self.session.seen = 0;
            ReplyKind::Done
        } else {
            ReplyKind::More
        }
    }
}

/// What a command asks, read off its name (and for a blocking one, its timeout).
fn asked(frame: &[u8]) -> Replies {
    // The name alone, read without a copy: most commands end here.
    let Some((name, args)) = head(frame) else {
        return Replies::One;
    };
    let followed = |a: Asked| Replies::Followed(a.mark());
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    for (kind, (subscribe, unsubscribe)) in PUBSUB.into_iter().enumerate() {
        let kind = kind as u8;
        if is(subscribe) {
            return followed(Asked::PubSub {
                kind,
                sub: true,
                args,
            });
        }
        if is(unsubscribe) {
            return followed(Asked::PubSub {
                kind,
                sub: false,
                args,
            });
        }
    }
    let simple = [
        (&b"HELLO"[..], Asked::Hello),
        (b"RESET", Asked::Reset),
        (b"MONITOR", Asked::Monitor),
        (b"MULTI", Asked::Multi),
        (b"EXEC", Asked::Exec),
        (b"DISCARD", Asked::Discard),
        (b"EVAL", Asked::Script),
        (b"EVALSHA", Asked::Script),
        (b"EVAL_RO", Asked::Script),
        (b"EVALSHA_RO", Asked::Script),
        (b"FCALL", Asked::Script),
        (b"FCALL_RO", Asked::Script),
    ];
    if let Some(&(_, a)) = simple.iter().find(|(n, _)| is(n)) {
        return followed(a);
    }
    let may_block = [&b"B"[..], b"X", b"W"]
        .iter()
        .any(|c| name.first().is_some_and(|f| f.eq_ignore_ascii_case(&c[0])));
    match Command::parse(frame)
        .filter(|_| may_block)
        .and_then(|c| c.blocks())
    {
        Some(hold) => Replies::Held(hold),
        None => Replies::One,
    }
}

/// A command's name and how many arguments follow it, read off a RESP array's header and its
/// first bulk string (or an inline command's first word), without a copy.
fn head(frame: &[u8]) -> Option<(&[u8], u32)> {
    let Some(rest) = frame.strip_prefix(b"*") else {
        let line = frame.split(|&b| b == b'\r' || b == b'\n').next()?;
        let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
        let name = words.next()?;
        return Some((name, words.count() as u32));
    };
    let (n, rest) = number(rest)?;
    let (len, rest) = number(rest.strip_prefix(b"$")?)?;
    Some((rest.get(..len)?, n.checked_sub(1)? as u32))
}

/// The kind and the name (none for a null) of a pub/sub confirmation: an array or a push of
/// three, a kind, a name, a count.
fn confirmation(reply: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let rest = reply
        .strip_prefix(b"*3\r\n")
        .or_else(|| reply.strip_prefix(b">3\r\n"))?;
    let (len, rest) = number(rest.strip_prefix(b"$")?)?;
    let kind = rest.get(..len)?;
    let rest = rest.get(len + 2..)?;
    let (channel, rest) = if let Some(r) = rest.strip_prefix(b"$-1\r\n") {
        (None, r)
    } else if let Some(r) = rest.strip_prefix(b"_\r\n") {
        (None, r)
    } else {
        let (len, r) = number(rest.strip_prefix(b"$")?)?;
        (Some(r.get(..len)?), r.get(len + 2..)?)
    };
    let count = rest.strip_prefix(b":")?;
    number(count)?;
    PUBSUB
        .iter()
        .any(|(s, u)| kind.eq_ignore_ascii_case(s) || kind.eq_ignore_ascii_case(u))
        .then_some((kind, channel))
}

/// The name (none for a null) of a pub/sub confirmation read as a value.
fn value_confirmation(value: &RespValue) -> Option<Option<Vec<u8>>> {
    let (RespValue::Array(v) | RespValue::Push(v)) = value else {
        return None;
    };
    let [RespValue::Bulk(kind), channel, RespValue::Integer(_)] = &v[..] else {
        return None;
    };
    if !PUBSUB
        .iter()
        .any(|(s, u)| kind.eq_ignore_ascii_case(s) || kind.eq_ignore_ascii_case(u))
    {
        return None;
    }
    match channel {
        RespValue::Bulk(c) => Some(Some(c.clone())),
        RespValue::Null => Some(None),
        _ => None,
    }
}

/// A redis command as written: its name and arguments.
struct Command<'a> {
    parts: Vec<&'a [u8]>,
}

impl<'a> Command<'a> {
    /// Reads a RESP array of bulk strings (or an inline command); `None` for anything else.
    fn parse(frame: &'a [u8]) -> Option<Command<'a>> {
        let Some(rest) = frame.strip_prefix(b"*") else {
            let line = frame.split(|&b| b == b'\r' || b == b'\n').next()?;
            let parts: Vec<&[u8]> = line
                .split(|&b| b == b' ')
                .filter(|p| !p.is_empty())
                .collect();
            return (!parts.is_empty()).then_some(Command { parts });
        };
        let (n, mut rest) = number(rest)?;
        let mut parts = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let (len, after) = number(rest.strip_prefix(b"$")?)?;
            parts.push(after.get(..len)?);
            rest = after.get(len + 2..)?;
        }
        (!parts.is_empty()).then_some(Command { parts })
    }

    fn name(&self) -> &'a [u8] {
        self.parts[0]
    }

    fn is(&self, name: &[u8]) -> bool {
        self.name().eq_ignore_ascii_case(name)
    }

    fn arg(&self, i: usize) -> Option<&'a [u8]> {
        self.parts.get(i).copied()
    }

    /// How long redis may hold the answer of a blocking command: its own timeout
    /// (`Duration::MAX` for 0, as long as it likes); `None` for a command that does not block.
    fn blocks(&self) -> Option<Duration> {
        let seconds = |arg: Option<&[u8]>| -> Option<Duration> {
            let s: f64 = std::str::from_utf8(arg?).ok()?.parse().ok()?;
            (s.is_finite() && s >= 0.0).then(|| match s {
                0.0 => Duration::MAX,
                s => Duration::from_secs_f64(s),
            })
        };
        let millis = |arg: Option<&[u8]>| -> Option<Duration> {
            let ms: u64 = std::str::from_utf8(arg?).ok()?.parse().ok()?;
            Some(match ms {
                0 => Duration::MAX,
                ms => Duration::from_millis(ms),
            })
        };
        let last = self.parts.len().checked_sub(1)?;
        let by_last = [
            &b"BLPOP"[..],
            b"BRPOP",
            b"BRPOPLPUSH",
            b"BLMOVE",
            b"BZPOPMIN",
            b"BZPOPMAX",
        ];
        if by_last.iter().any(|n| self.is(n)) {
            return seconds(self.arg(last));
        }
        if self.is(b"BLMPOP") || self.is(b"BZMPOP") {
            return seconds(self.arg(1));
        }
        if self.is(b"WAIT") {
            return millis(self.arg(2));
        }
        if self.is(b"WAITAOF") {
            return millis(self.arg(3));
        }
        if self.is(b"XREAD") || self.is(b"XREADGROUP") {
            let at = self
                .parts
                .iter()
                .position(|p| p.eq_ignore_ascii_case(b"BLOCK"))?;
            return millis(self.arg(at + 1));
        }
        None
    }
}

/// A decimal number ended by CRLF, and what follows.
fn number(s: &[u8]) -> Option<(usize, &[u8])> {
    let end = s.iter().position(|&b| b == b'\r')?;
    let n = std::str::from_utf8(&s[..end]).ok()?.parse().ok()?;
    Some((n, s.get(end + 2..)?))
}

/// Whether `frame` is a RESP2 array whose first element is one of `kinds`.
fn array_of(frame: &[u8], kinds: &[&[u8]]) -> bool {
    let Some(rest) = frame.strip_prefix(b"*") else {
        return false;
    };
    let Some((_, rest)) = number(rest) else {
        return false;
    };
    let Some((len, rest)) = rest.strip_prefix(b"$").and_then(number) else {
        return false;
    };
    rest.get(..len).is_some_and(|kind| kinds.contains(&kind))
}

/// Whether `frame` is a line of `MONITOR`'s: `+1700000000.123456 [0 127.0.0.1:6379] ...`.
fn monitor_line(frame: &[u8]) -> bool {
    let Some(rest) = frame.strip_prefix(b"+") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && rest.get(digits) == Some(&b'.')
}

/// Refuses, at the call, a command whose answers a kept connection cannot follow.
fn followable(frame: &[u8]) -> Result<(), EncodeError> {
    let Some((name, _)) = head(frame) else {
        return Ok(());
    };
    if !name.eq_ignore_ascii_case(b"CLIENT") && !name.eq_ignore_ascii_case(b"QUIT") {
        return Ok(());
    }
    let Some(command) = Command::parse(frame) else {
        return Ok(());
    };
    if command.is(b"CLIENT")
        && command
            .arg(1)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"REPLY"))
        && command
            .arg(2)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"OFF") || a.eq_ignore_ascii_case(b"SKIP"))
    {
        return Err(EncodeError::Unsupported(
            "CLIENT REPLY OFF or SKIP takes away the answers that match replies to frames; \
             send the commands whose answers are not wanted on the link and ignore them",
        ));
    }
    if command.is(b"QUIT") {
        return Err(EncodeError::Unsupported(
            "QUIT ends the connection the link keeps; close the link instead (Link::close)",
        ));
    }
    Ok(())
}

/// What an answer says by its first byte: a refusal, another error, or a result.
fn plain_kind(reply: &[u8]) -> ReplyKind {
    if REFUSALS.iter().any(|r| reply.starts_with(r)) {
        ReplyKind::Refused
    } else if matches!(reply.first(), Some(b'-' | b'!')) {
        ReplyKind::Error
    } else {
        ReplyKind::Done
    }
}

impl Protocol for Redis {
    fn open(&mut self) -> Opening {
        self.session = Session::default();
        self.awaited = self.opening.len();
        if self.opening.is_empty() {
            Opening::ready(Vec::new())
        } else {
            Opening::wait(self.opening.clone())
        }
    }

    fn verdict(&mut self, frame: &[u8]) -> Verdict {
        if REFUSALS.iter().any(|r| frame.starts_with(r)) {
            return Verdict::Retry;
        }
        if let Some(error) = frame.strip_prefix(b"-") {
            let error = error.strip_suffix(b"\r\n").unwrap_or(error);
            return Verdict::Refused(String::from_utf8_lossy(error).into_owned());
        }
        // The opening command this answers, and what the answer says of the connection.
        let at = self.opening.len().saturating_sub(self.awaited);
        if let Some(command) = self.opening.get(at).cloned() {
            let asked = Asked::of(asked(&command));
            self.follow(frame, asked);
        }
        self.awaited = self.awaited.saturating_sub(1);
        if self.awaited == 0 {
            Verdict::Ready
        } else {
            Verdict::Continue
        }
    }

    fn ping(&self) -> Option<Vec<u8>> {
        Some(Resp::command(["PING"]))
    }

    fn framing(&self) -> Option<AnyFraming> {
        Some(Resp::checking(followable).into())
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        Some(Heartbeat::every(HEARTBEAT))
    }

    fn is_pong(&self, frame: &[u8]) -> bool {
        frame == b"+PONG\r\n"
    }

    fn answers(&self) -> Answers {
        Answers::EveryFrame
    }

    fn replies(&self, frame: &[u8]) -> Replies {
        asked(frame)
    }

    fn reply_kind(&mut self, reply: &[u8], asked: Replies) -> ReplyKind {
        self.follow(reply, Asked::of(asked))
    }

    fn is_unsolicited(&self, frame: &[u8]) -> bool {
        match frame.first() {
            // A push, unless it confirms a pub/sub command: that answers its command.
            Some(b'>') => confirmation(frame).is_none(),
            Some(b'*') if self.session.subscribed() && !self.session.resp3 => {
                array_of(frame, &[b"message", b"pmessage", b"smessage"])
            }
            Some(b'+') if self.session.monitoring => monitor_line(frame),
            _ => false,
        }
    }

    fn name(&self) -> &str {
        "redis"
    }
}

impl Redis {
    /// An answer in `EXEC`'s turn while its transaction's answers are read: `EXEC`'s array
    /// (each element a queued command's answer, in order), or a confirmation past the array's
    /// count. The names held and the protocol follow them; the turn lasts until every queued
    /// command has its answers.
    fn exec_answer(&mut self, reply: &[u8]) -> ReplyKind {
        let Ok(value) = RespValue::parse(reply) else {
            return ReplyKind::Unexpected;
        };
        let first = self
            .session
            .exec
            .as_mut()
            .is_some_and(|e| !std::mem::replace(&mut e.started, true));
        match value {
            RespValue::Array(elements) if first => {
                for e in &elements {
                    self.exec_step(e);
                }
            }
            // EXEC answered null (a watched key changed) or an error: nothing ran.
            RespValue::Null | RespValue::Error(_) if first => {
                self.session.exec = None;
                return plain_kind(reply);
            }
            other => self.exec_step(&other),
        }
        match &self.session.exec {
            Some(e) if !e.queue.is_empty() => ReplyKind::More,
            _ => {
                self.session.exec = None;
                ReplyKind::Done
            }
        }
    }

    /// One answer of the transaction's next command, from `EXEC`'s answer.
    fn exec_step(&mut self, value: &RespValue) {
        let s = &mut self.session;
        let Some(exec) = s.exec.as_mut() else {
            return;
        };
        let Some(&front) = exec.queue.front() else {
            return;
        };
        let done = match front {
            Asked::PubSub { kind, sub, args } => match value_confirmation(value) {
                Some(channel) => {
                    let held = &mut s.held[usize::from(kind)];
                    if let Some(channel) = &channel {
                        if sub {
                            held.insert(channel.clone());
                        } else {
                            held.remove(channel);
                        }
                    }
                    exec.seen += 1;
                    match args {
                        0 => channel.is_none() || held.is_empty(),
                        n => exec.seen >= n,
                    }
                }
                None => true,
            },
            Asked::Hello => {
                match value {
                    RespValue::Map(_) => s.resp3 = true,
                    RespValue::Array(_) => s.resp3 = false,
                    _ => {}
                }
                true
            }
            _ => true,
        };
        if done {
            exec.queue.pop_front();
            exec.seen = 0;
        }
    }

    /// What `reply`, in the turn of a command that asked `asked`, says of it, and what it
    /// says of the connection.
    fn follow(&mut self, reply: &[u8], asked: Asked) -> ReplyKind {
        let kind = plain_kind(reply);
        let s = &mut self.session;
        // Inside a transaction every command but its end is queued: `+QUEUED`, or an error
        // after which `EXEC` aborts the whole transaction. A refusal there is reported, never
        // written again: the block stands or falls whole, by `EXEC`'s answer.
        if s.multi && !matches!(asked, Asked::Exec | Asked::Discard | Asked::Reset) {
            return match kind {
                ReplyKind::Done => {
                    s.queued.push(asked);
                    ReplyKind::Done
                }
                _ => ReplyKind::Error,
            };
        }
        if asked == Asked::Exec && s.exec.is_some() {
            return self.exec_answer(reply);
        }
        match asked {
            Asked::PubSub { .. } | Asked::Plain if kind != ReplyKind::Done => kind,
            Asked::PubSub { kind, sub, args } => self.confirmation(reply, kind, sub, args),
            Asked::Plain if !s.resp3 && confirmation(reply).is_some() => ReplyKind::Unexpected,
            Asked::Plain | Asked::Script => kind,
            Asked::Hello => {
                match reply.first() {
                    Some(b'%') => s.resp3 = true,
                    Some(b'*') => s.resp3 = false,
                    _ => {}
                }
                kind
            }
            Asked::Reset if reply == b"+RESET\r\n" => {
                *s = Session::default();
                kind
            }
            Asked::Monitor if reply == b"+OK\r\n" => {
                s.monitoring = true;
                kind
            }
            // A refused `MULTI` is reported, not written again: the commands behind it,
            // meant for the transaction, run on their own meanwhile.
            Asked::Multi if kind == ReplyKind::Refused => ReplyKind::Error,
            Asked::Multi if reply == b"+OK\r\n" => {
                s.multi = true;
                kind
            }
            // A refused `EXEC` leaves the transaction open: written again, it aborts it.
            Asked::Exec | Asked::Discard if kind == ReplyKind::Refused => kind,
            Asked::Exec if kind == ReplyKind::Done && s.multi => {
                s.multi = false;
                let queue = std::mem::take(&mut s.queued);
                if !queue
                    .iter()
                    .any(|a| matches!(a, Asked::PubSub { .. } | Asked::Hello))
                {
                    return kind;
                }
                s.exec = Some(Exec {
                    queue: queue.into(),
                    ..Exec::default()
                });
                self.exec_answer(reply)
            }
            Asked::Exec | Asked::Discard => {
                s.multi = false;
                s.queued.clear();
                kind
            }
            Asked::Reset | Asked::Monitor | Asked::Multi => kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Vec<u8> {
        Resp::command(args)
    }

    /// A pub/sub confirmation, RESP2 (`*`) or RESP3 (`>`).
    fn confirm(mark: char, kind: &str, channel: Option<&str>, count: i64) -> Vec<u8> {
        let channel = match channel {
            Some(c) => format!("${}\r\n{c}\r\n", c.len()),
            None => "$-1\r\n".to_string(),
        };
        format!(
            "{mark}3\r\n${}\r\n{kind}\r\n{channel}:{count}\r\n",
            kind.len()
        )
        .into_bytes()
    }

    #[test]
    fn without_opening_commands_the_link_is_ready_at_once() {
        let mut r = Redis::new();
        assert_eq!(r.open(), Opening::ready(Vec::new()));
    }

    #[test]
    fn each_opening_command_is_answered_before_ready() {
        let mut r = Redis::new()
            .open_with(["AUTH", "u", "p"])
            .open_with(["SELECT", "2"]);
        let opening = r.open();
        assert_eq!(
            opening,
            Opening::wait(vec![
                b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n".to_vec(),
                b"*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n".to_vec(),
            ])
        );
        assert_eq!(r.verdict(b"+OK\r\n"), Verdict::Continue);
        assert_eq!(r.verdict(b"+OK\r\n"), Verdict::Ready);
        // Every connection waits for every reply again.
        r.open();
        assert_eq!(r.verdict(b"+OK\r\n"), Verdict::Continue);
    }

    #[test]
    fn an_error_reply_to_an_opening_command_refuses_the_link_with_its_text() {
        let mut r = Redis::new().open_with(["AUTH", "u", "wrong"]);
        r.open();
        assert_eq!(
            r.verdict(b"-WRONGPASS invalid username-password pair\r\n"),
            Verdict::Refused("WRONGPASS invalid username-password pair".into())
        );
    }

    #[test]
    fn pushes_are_the_servers_own_and_pong_is_known() {
        let r = Redis::new();
        assert!(r.is_unsolicited(b">3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1\r\ny\r\n"));
        assert!(!r.is_unsolicited(&confirm('>', "subscribe", Some("x"), 1)));
        assert!(!r.is_unsolicited(b"+OK\r\n"));
        assert!(r.is_pong(b"+PONG\r\n"));
        assert_eq!(r.answers(), Answers::EveryFrame);
        assert_eq!(r.ping(), Some(b"*1\r\n$4\r\nPING\r\n".to_vec()));
    }

    #[test]
    fn a_subscribe_lasts_one_confirmation_per_name_in_resp2_and_resp3() {
        for mark in ['*', '>'] {
            let mut r = Redis::new();
            r.open();
            let asked = r.replies(&cmd(&["SUBSCRIBE", "a", "b"]));
            let a = confirm(mark, "subscribe", Some("a"), 1);
            let b = confirm(mark, "subscribe", Some("b"), 2);
            assert_eq!(r.reply_kind(&a, asked), ReplyKind::More);
            assert_eq!(r.reply_kind(&b, asked), ReplyKind::Done);
            assert!(r.session.subscribed());
        }
    }

    #[test]
    fn a_bare_unsubscribe_lasts_one_confirmation_per_channel_held_when_it_runs() {
        let mut r = Redis::new();
        r.open();
        let sub = r.replies(&cmd(&["SUBSCRIBE", "c"]));
        for _ in 0..2 {
            // The second SUBSCRIBE of the same channel is confirmed too; one is held.
            assert_eq!(
                r.reply_kind(&confirm('*', "subscribe", Some("c"), 1), sub),
                ReplyKind::Done
            );
        }
        let psub = r.replies(&cmd(&["PSUBSCRIBE", "p*"]));
        assert_eq!(
            r.reply_kind(&confirm('*', "psubscribe", Some("p*"), 2), psub),
            ReplyKind::Done
        );
        let unsub = r.replies(&cmd(&["UNSUBSCRIBE"]));
        assert_eq!(
            r.reply_kind(&confirm('*', "unsubscribe", Some("c"), 1), unsub),
            ReplyKind::Done,
            "one channel held: one answer, whatever the patterns"
        );
        // None held: one answer with a null channel.
        assert_eq!(
            r.reply_kind(&confirm('*', "unsubscribe", None, 1), unsub),
            ReplyKind::Done
        );
        assert!(r.session.subscribed(), "the pattern is still held");
    }

    #[test]
    fn a_confirmation_of_another_kind_or_in_a_plain_turn_is_unexpected() {
        let mut r = Redis::new();
        r.open();
        let sub = r.replies(&cmd(&["SUBSCRIBE", "a"]));
        assert_eq!(
            r.reply_kind(&confirm('*', "unsubscribe", Some("a"), 0), sub),
            ReplyKind::Unexpected
        );
        assert_eq!(r.reply_kind(b"+OK\r\n", sub), ReplyKind::Unexpected);
        let get = r.replies(&cmd(&["GET", "k"]));
        assert_eq!(
            r.reply_kind(&confirm('*', "subscribe", Some("a"), 1), get),
            ReplyKind::Unexpected
        );
        // A script may answer anything.
        let eval = r.replies(&cmd(&["EVAL", "return 1", "0"]));
        assert_eq!(
            r.reply_kind(&confirm('*', "subscribe", Some("a"), 1), eval),
            ReplyKind::Done
        );
    }

    #[test]
    fn messages_are_pushes_only_while_redis_says_channels_are_held() {
        let mut r = Redis::new();
        r.open();
        let message = b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n";
        assert!(!r.is_unsolicited(message));
        let sub = r.replies(&cmd(&["SUBSCRIBE", "a"]));
        assert!(!r.is_unsolicited(message), "written, not yet confirmed");
        r.reply_kind(&confirm('*', "subscribe", Some("a"), 1), sub);
        assert!(r.is_unsolicited(message));
        let unsub = r.replies(&cmd(&["UNSUBSCRIBE", "a"]));
        r.reply_kind(&confirm('*', "unsubscribe", Some("a"), 0), unsub);
        assert!(!r.is_unsolicited(message), "an LRANGE may answer this");
    }

    #[test]
    fn resp3_follows_hello_s_answer_and_reset_s() {
        let mut r = Redis::new();
        r.open();
        let hello = r.replies(&cmd(&["HELLO", "3"]));
        assert_eq!(
            r.reply_kind(b"-NOPROTO unsupported protocol version\r\n", hello),
            ReplyKind::Error
        );
        assert!(!r.session.resp3, "an error leaves the protocol as it was");
        assert_eq!(
            r.reply_kind(b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n", hello),
            ReplyKind::Done
        );
        assert!(r.session.resp3);
        let reset = r.replies(&cmd(&["RESET"]));
        assert_eq!(r.reply_kind(b"+RESET\r\n", reset), ReplyKind::Done);
        assert!(!r.session.resp3);
        // In the opening too.
        let mut r = Redis::new().open_with(["HELLO", "3"]);
        r.open();
        assert_eq!(
            r.verdict(b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
            Verdict::Ready
        );
        assert!(r.session.resp3);
        r.open();
        assert!(!r.session.resp3, "a new connection speaks RESP2 until told");
    }

    #[test]
    fn monitor_lines_are_pushes_once_monitor_is_answered() {
        let mut r = Redis::new();
        r.open();
        let line = b"+1700000000.123456 [0 127.0.0.1:5000] \"GET\" \"k\"\r\n";
        let monitor = r.replies(b"MONITOR\r\n");
        assert!(!r.is_unsolicited(line));
        assert_eq!(r.reply_kind(b"+OK\r\n", monitor), ReplyKind::Done);
        assert!(r.is_unsolicited(line));
        assert!(!r.is_unsolicited(b"+OK\r\n"));
    }

    #[test]
    fn inside_a_transaction_a_refusal_is_reported_and_exec_ends_it() {
        let mut r = Redis::new();
        r.open();
        let multi = r.replies(&cmd(&["MULTI"]));
        let set = r.replies(&cmd(&["SET", "k", "v"]));
        let sub = r.replies(&cmd(&["SUBSCRIBE", "a", "b"]));
        let exec = r.replies(&cmd(&["EXEC"]));
        assert_eq!(r.reply_kind(b"+OK\r\n", multi), ReplyKind::Done);
        assert_eq!(
            r.reply_kind(b"-BUSY Redis is busy running a script\r\n", set),
            ReplyKind::Error
        );
        assert_eq!(r.reply_kind(b"+QUEUED\r\n", sub), ReplyKind::Done);
        assert_eq!(
            r.reply_kind(b"-EXECABORT Transaction discarded\r\n", exec),
            ReplyKind::Error
        );
        assert!(!r.session.multi);
        assert_eq!(
            r.reply_kind(b"-BUSY Redis is busy running a script\r\n", set),
            ReplyKind::Refused
        );
        // A refused MULTI is reported, not written again behind the commands meant for it.
        assert_eq!(
            r.reply_kind(b"-LOADING Redis is loading\r\n", multi),
            ReplyKind::Error
        );
    }

    #[test]
    fn blocking_commands_say_how_long_redis_may_hold_their_answer() {
        let r = Redis::new();
        let held = |args: &[&str]| r.replies(&cmd(args));
        assert_eq!(
            held(&["BLPOP", "k", "5"]),
            Replies::Held(Duration::from_secs(5))
        );
        assert_eq!(held(&["BLPOP", "k", "0"]), Replies::Held(Duration::MAX));
        assert_eq!(
            held(&["BRPOP", "a", "b", "0.5"]),
            Replies::Held(Duration::from_millis(500))
        );
        assert_eq!(
            held(&["BLMPOP", "2", "2", "a", "b", "LEFT"]),
            Replies::Held(Duration::from_secs(2))
        );
        assert_eq!(
            held(&["XREAD", "BLOCK", "1500", "STREAMS", "s", "$"]),
            Replies::Held(Duration::from_millis(1500))
        );
        assert_eq!(held(&["XREAD", "STREAMS", "s", "0"]), Replies::One);
        assert_eq!(held(&["WAIT", "1", "0"]), Replies::Held(Duration::MAX));
        assert_eq!(
            held(&["WAITAOF", "1", "0", "100"]),
            Replies::Held(Duration::from_millis(100))
        );
        assert_eq!(held(&["GET", "k"]), Replies::One);
    }

    #[test]
    fn commands_whose_answers_cannot_be_followed_are_refused_at_the_call() {
        let framing = Redis::new().framing().expect("a framing").0;
        for refused in [
            cmd(&["CLIENT", "REPLY", "OFF"]),
            cmd(&["client", "reply", "skip"]),
            cmd(&["QUIT"]),
        ] {
            assert!(matches!(
                framing.check(&refused),
                Err(EncodeError::Unsupported(_))
            ));
        }
        assert_eq!(framing.check(&cmd(&["CLIENT", "REPLY", "ON"])), Ok(()));
        assert_eq!(framing.check(&cmd(&["GET", "k"])), Ok(()));
    }

    #[test]
    fn a_subscribe_queued_in_a_transaction_is_followed_through_exec_s_answer() {
        // As redis 7 answers `MULTI`, `SUBSCRIBE a b`, `PING x`, `EXEC`: an array of two
        // whose elements are the two confirmations, then the PING's answer on its own.
        let mut r = Redis::new();
        r.open();
        let multi = r.replies(&cmd(&["MULTI"]));
        let sub = r.replies(&cmd(&["SUBSCRIBE", "a", "b"]));
        let ping = r.replies(&cmd(&["PING", "x"]));
        let exec = r.replies(&cmd(&["EXEC"]));
        assert_eq!(r.reply_kind(b"+OK\r\n", multi), ReplyKind::Done);
        assert_eq!(r.reply_kind(b"+QUEUED\r\n", sub), ReplyKind::Done);
        assert_eq!(r.reply_kind(b"+QUEUED\r\n", ping), ReplyKind::Done);
        let mut array = b"*2\r\n".to_vec();
        array.extend(confirm('*', "subscribe", Some("a"), 1));
        array.extend(confirm('*', "subscribe", Some("b"), 2));
        assert_eq!(r.reply_kind(&array, exec), ReplyKind::More);
        assert_eq!(
            r.reply_kind(b"*2\r\n$4\r\npong\r\n$1\r\nx\r\n", exec),
            ReplyKind::Done
        );
        assert_eq!(r.session.held[0].len(), 2);
        // RESP3: the array holds the first push, the second follows it.
        let mut r = Redis::new();
        r.open();
        r.session.resp3 = true;
        assert_eq!(r.reply_kind(b"+OK\r\n", multi), ReplyKind::Done);
        assert_eq!(r.reply_kind(b"+QUEUED\r\n", sub), ReplyKind::Done);
        let mut array = b"*1\r\n".to_vec();
        array.extend(confirm('>', "subscribe", Some("a"), 1));
        assert_eq!(r.reply_kind(&array, exec), ReplyKind::More);
        assert!(!r.is_unsolicited(&confirm('>', "subscribe", Some("b"), 2)));
        assert_eq!(
            r.reply_kind(&confirm('>', "subscribe", Some("b"), 2), exec),
            ReplyKind::Done
        );
    }

    #[test]
    fn transient_errors_are_refusals_and_others_errors() {
        let mut r = Redis::new();
        r.open();
        for refusal in [
            &b"-LOADING Redis is loading the dataset in memory\r\n"[..],
            b"-BUSY Redis is busy running a script\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
        ] {
            assert_eq!(r.reply_kind(refusal, Replies::One), ReplyKind::Refused);
        }
        let kind = |r: &mut Redis, reply: &[u8]| r.reply_kind(reply, Replies::One);
        assert_eq!(kind(&mut r, b"-ERR unknown command\r\n"), ReplyKind::Error);
        assert_eq!(kind(&mut r, b"-WRONGTYPE Operation\r\n"), ReplyKind::Error);
        assert_eq!(kind(&mut r, b"!3\r\nERR\r\n"), ReplyKind::Error);
        assert_eq!(kind(&mut r, b"+OK\r\n"), ReplyKind::Done);
        assert_eq!(kind(&mut r, b"$1\r\n-\r\n"), ReplyKind::Done);
    }

    #[test]
    fn a_loading_server_makes_the_opening_retry_not_refuse() {
        let mut r = Redis::new().open_with(["PING"]);
        r.open();
        assert_eq!(
            r.verdict(b"-LOADING Redis is loading the dataset in memory\r\n"),
            Verdict::Retry
        );
        r.open();
        assert_eq!(r.verdict(b"+PONG\r\n"), Verdict::Ready);
    }
}
