//! Built-in protocols: a [`Protocol`] for servers relink knows, to hand to
//! [`Builder::protocol`](crate::Builder::protocol) as they are. A protocol of one's own
//! implements the trait (see its page for a whole NATS client in one example).

use std::time::Duration;

use super::confirm::{Answers, Confirm};
use super::framing::{AnyFraming, Resp};
use super::heartbeat::Heartbeat;
use super::protocol::{Opening, Protocol, Replies, ReplyKind, Verdict};

/// redis (RESP 2 or 3), bringing its framing ([`Resp`]), its heartbeat (`PING` every second)
/// and confirmation by reply ([`Confirm::reply`]) unless the builder is given its own: every
/// command answered in order ([`Answers::EveryFrame`], so [`Confirm::reply`] confirms each
/// frame by its reply), `PING` as the heartbeat's ping, and the commands that open every
/// connection (`AUTH`, `SELECT`, `HELLO 3`, `CLIENT SETNAME`).
///
/// What it knows of redis' answers:
/// - **Pushes are the server's own.** RESP3 pushes (`>`: pub/sub messages, client-side
///   caching invalidations), and in RESP2 the `message`, `pmessage` and `smessage` arrays of a
///   connection that subscribed, and `MONITOR`'s lines, take no turn and are no request's
///   reply: they are [`Event::Frame`](crate::Event::Frame)s.
/// - **Some commands are answered by pushes.** `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE` and
///   their `UN…` forms take no turn in RESP3 ([`Replies::Pushed`]) and one per channel in
///   RESP2 ([`Replies::Many`]), so a later command never takes their answer for its own; as
///   a request they are refused at the call. RESP3 is known from an opening `HELLO 3` or a
///   `HELLO 3` written later (`RESET` goes back to RESP2).
/// - **A refusal is not a confirmation.** `-LOADING`, `-BUSY`, `-TRYAGAIN`, `-MASTERDOWN`
///   and `-CLUSTERDOWN` say the command did not run and will later
///   ([`ReplyKind::Refused`]: written again after a pause, or reported); any other error
///   reply (`-ERR`, `-WRONGTYPE`, a RESP3 `!` blob error) is [`ReplyKind::Error`], given to
///   the application with its frame.
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
    awaited: usize,
    /// The connection speaks RESP3 (`HELLO 3` written).
    resp3: bool,
    /// RESP2: a subscribe command was written on this connection, so `message` arrays are
    /// pushes.
    subscribed: bool,
    /// RESP2: channels (`[0]`), patterns (`[1]`) and shard channels (`[2]`) subscribed on this
    /// connection, for the answers an `UNSUBSCRIBE` with no argument gets.
    channels: [u32; 3],
    /// `MONITOR` was written on this connection: its lines are pushes.
    monitoring: bool,
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

    /// Follows a `HELLO` or `RESET` written on the connection.
    fn note_mode(&mut self, command: &Command<'_>) {
        if command.is(b"HELLO") {
            if let Some(version) = command.arg(1) {
                self.resp3 = version == b"3";
            }
        } else if command.is(b"RESET") {
            *self = Redis {
                opening: std::mem::take(&mut self.opening),
                awaited: self.awaited,
                ..Redis::default()
            };
        }
    }
}

/// A redis command as written: its name and how many arguments it has.
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
        Some(Command { parts })
    }

    fn is(&self, name: &[u8]) -> bool {
        self.parts
            .first()
            .is_some_and(|p| p.eq_ignore_ascii_case(name))
    }

    fn arg(&self, i: usize) -> Option<&'a [u8]> {
        self.parts.get(i).copied()
    }

    fn args(&self) -> u32 {
        self.parts.len().saturating_sub(1) as u32
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

impl Protocol for Redis {
    fn open(&mut self) -> Opening {
        let opening = std::mem::take(&mut self.opening);
        *self = Redis {
            awaited: opening.len(),
            ..Redis::default()
        };
        for command in &opening {
            if let Some(c) = Command::parse(command) {
                self.note_mode(&c);
            }
        }
        self.opening = opening;
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
        Some(Resp::new().into())
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        Some(Heartbeat::every(HEARTBEAT))
    }

    fn confirm(&self) -> Confirm {
        Confirm::reply()
    }

    fn is_pong(&self, frame: &[u8]) -> bool {
        frame == b"+PONG\r\n"
    }

    fn answers(&self) -> Answers {
        Answers::EveryFrame
    }

    fn replies(&mut self, frame: &[u8]) -> Replies {
        let Some(command) = Command::parse(frame) else {
            return Replies::One;
        };
        self.note_mode(&command);
        let kinds: [(&[u8], &[u8]); 3] = [
            (b"SUBSCRIBE", b"UNSUBSCRIBE"),
            (b"PSUBSCRIBE", b"PUNSUBSCRIBE"),
            (b"SSUBSCRIBE", b"SUNSUBSCRIBE"),
        ];
        for (i, (subscribe, unsubscribe)) in kinds.into_iter().enumerate() {
            let answers = if command.is(subscribe) {
                self.channels[i] += command.args();
                command.args()
            } else if command.is(unsubscribe) {
                let n = match command.args() {
                    0 => self.channels[i].max(1),
                    n => n,
                };
                self.channels[i] = self.channels[i].saturating_sub(n);
                n
            } else {
                continue;
            };
            self.subscribed = true;
            return match self.resp3 {
                true => Replies::Pushed,
                false => Replies::Many(answers.max(1)),
            };
        }
        if command.is(b"MONITOR") {
            self.monitoring = true;
        }
        Replies::One
    }

    fn reply_kind(&self, reply: &[u8]) -> ReplyKind {
        if REFUSALS.iter().any(|r| reply.starts_with(r)) {
            ReplyKind::Refused
        } else if matches!(reply.first(), Some(b'-' | b'!')) {
            ReplyKind::Error
        } else {
            ReplyKind::Done
        }
    }

    fn is_unsolicited(&self, frame: &[u8]) -> bool {
        match frame.first() {
            Some(b'>') => true,
            Some(b'*') if self.subscribed && !self.resp3 => {
                array_of(frame, &[b"message", b"pmessage", b"smessage"])
            }
            Some(b'+') if self.monitoring => monitor_line(frame),
            _ => false,
        }
    }

    fn name(&self) -> &str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(r.is_unsolicited(b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n"));
        assert!(!r.is_unsolicited(b"+OK\r\n"));
        assert!(r.is_pong(b"+PONG\r\n"));
        assert_eq!(r.answers(), Answers::EveryFrame);
        assert_eq!(r.ping(), Some(b"*1\r\n$4\r\nPING\r\n".to_vec()));
    }

    #[test]
    fn subscribe_takes_no_turn_in_resp3_and_one_per_channel_in_resp2() {
        let mut r3 = Redis::new().open_with(["HELLO", "3"]);
        r3.open();
        let sub = Resp::command(["SUBSCRIBE", "a", "b"]);
        assert_eq!(r3.replies(&sub), Replies::Pushed);
        assert_eq!(r3.replies(&Resp::command(["GET", "k"])), Replies::One);
        let mut r2 = Redis::new();
        r2.open();
        assert!(!r2.is_unsolicited(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n"));
        assert_eq!(r2.replies(&sub), Replies::Many(2));
        assert!(r2.is_unsolicited(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n"));
        assert!(!r2.is_unsolicited(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"));
        // An UNSUBSCRIBE of everything is answered once per channel held.
        assert_eq!(
            r2.replies(&Resp::command(["UNSUBSCRIBE"])),
            Replies::Many(2)
        );
        assert_eq!(
            r2.replies(&Resp::command(["UNSUBSCRIBE"])),
            Replies::Many(1)
        );
        assert_eq!(
            r2.replies(&Resp::command(["psubscribe", "p*"])),
            Replies::Many(1)
        );
        // A new connection starts unsubscribed.
        r2.open();
        assert!(!r2.is_unsolicited(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n"));
    }

    #[test]
    fn hello_3_written_later_switches_to_pushes_and_reset_switches_back() {
        let mut r = Redis::new();
        r.open();
        let sub = Resp::command(["SUBSCRIBE", "a"]);
        assert_eq!(r.replies(&Resp::command(["HELLO", "3"])), Replies::One);
        assert_eq!(r.replies(&sub), Replies::Pushed);
        assert_eq!(r.replies(&Resp::command(["RESET"])), Replies::One);
        assert_eq!(r.replies(&sub), Replies::Many(1));
    }

    #[test]
    fn monitor_lines_are_pushes_once_monitor_is_written() {
        let mut r = Redis::new();
        r.open();
        let line = b"+1700000000.123456 [0 127.0.0.1:5000] \"GET\" \"k\"\r\n";
        assert!(!r.is_unsolicited(line));
        assert_eq!(r.replies(b"MONITOR\r\n"), Replies::One);
        assert!(r.is_unsolicited(line));
        assert!(!r.is_unsolicited(b"+OK\r\n"));
    }

    #[test]
    fn transient_errors_are_refusals_and_others_errors() {
        let r = Redis::new();
        for refusal in [
            &b"-LOADING Redis is loading the dataset in memory\r\n"[..],
            b"-BUSY Redis is busy running a script\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
        ] {
            assert_eq!(r.reply_kind(refusal), ReplyKind::Refused);
        }
        assert_eq!(r.reply_kind(b"-ERR unknown command\r\n"), ReplyKind::Error);
        assert_eq!(r.reply_kind(b"-WRONGTYPE Operation\r\n"), ReplyKind::Error);
        assert_eq!(r.reply_kind(b"!3\r\nERR\r\n"), ReplyKind::Error);
        assert_eq!(r.reply_kind(b"+OK\r\n"), ReplyKind::Done);
        assert_eq!(r.reply_kind(b"$1\r\n-\r\n"), ReplyKind::Done);
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
