//! Built-in protocols: a [`Protocol`] for servers relink knows, to hand to
//! [`Builder::protocol`](crate::Builder::protocol) as they are. A protocol of one's own
//! implements the trait (see its page for a whole NATS client in one example).

use super::confirm::Answers;
use super::framing::Resp;
use super::protocol::{Opening, Protocol, Verdict};

/// redis (RESP 2 or 3), on the [`Resp`] framing: every command answered in order
/// ([`Answers::EveryFrame`], so [`Confirm::reply`](crate::Confirm::reply) confirms each
/// frame by its reply), `PING` as the heartbeat's ping, RESP3 pushes (`>`) the server's own
/// frames, and the commands that open every connection (`AUTH`, `SELECT`, `HELLO 3`,
/// `CLIENT SETNAME`).
///
/// With opening commands the link is Ready once each has its reply; an error reply (a wrong
/// password, a database that does not exist) refuses the link
/// ([`Verdict::Refused`], retried at
/// [`config_failure_retry`](crate::Builder::config_failure_retry)'s pace, the reply in an
/// [`Event::Error`](crate::Event::Error)). redis answers these commands even while it loads
/// its data after a restart. Without opening commands the link is Ready at the connect.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::framing::Resp;
/// use relink::protocols::Redis;
/// use relink::{Confirm, Correlation, Heartbeat, Link};
///
/// let link = Link::builder("127.0.0.1:6379")
///     .framing(Resp::new())
///     .protocol(Redis::new().open_with(["AUTH", "app", "secret"]).open_with(["SELECT", "2"]))
///     .heartbeat(Heartbeat::every(Duration::from_secs(1)))
///     .confirm(Confirm::reply())
///     .correlation(Correlation::in_order())
///     .build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Redis {
    opening: Vec<Vec<u8>>,
    awaited: usize,
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
}

impl Protocol for Redis {
    fn open(&mut self) -> Opening {
        self.awaited = self.opening.len();
        if self.opening.is_empty() {
            Opening::ready(Vec::new())
        } else {
            Opening::wait(self.opening.clone())
        }
    }

    fn verdict(&mut self, frame: &[u8]) -> Verdict {
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

    fn is_pong(&self, frame: &[u8]) -> bool {
        frame == b"+PONG\r\n"
    }

    fn answers(&self) -> Answers {
        Answers::EveryFrame
    }

    fn is_unsolicited(&self, frame: &[u8]) -> bool {
        frame.first() == Some(&b'>')
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
}
