//! A shareable test on a frame: recognises a handshake's reply or a heartbeat's pong.

use std::fmt;
use std::sync::Arc;

/// A shareable test on a frame (`Fn(&[u8]) -> bool`): what a [`Handshake`](crate::protocol::Handshake)'s
/// `accept` and [`Heartbeat::reply`](crate::Heartbeat::reply) take (any such closure converts
/// into one).
///
/// It runs on the link's IO thread. If it panics, the panic is caught there and counts as a
/// failure of the connection: an [`Event::Error`](crate::Event) with
/// [`LinkError::CallbackPanicked`](crate::error::LinkError::CallbackPanicked), then a transition
/// with cause [`CallbackPanic`](crate::Cause::CallbackPanic), a reset and a backoff. The frame
/// it was asked about is not delivered.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::framing::Lines;
/// use relink::{Heartbeat, Link};
/// use relink::protocol::{Handshake, Ping, Predicate};
///
/// let ok = Predicate::new(|reply: &[u8]| reply == b"OK" || reply.starts_with(b"OK "));
/// let pong = Predicate::starts_with("PONG");
/// let ping = Ping::Frame(b"PING".to_vec());
/// let builder = Link::builder("tcp://127.0.0.1:7000")
///     .framing(Lines::new())
///     .protocol(Handshake::new(vec![b"AUTH secret".to_vec()], ok))
///     .handshake_timeout(Duration::from_secs(2))
///     .heartbeat(Heartbeat::new(Duration::from_secs(5), ping).reply(pong));
/// # drop(builder);
/// ```
/// [`Builder::ready_when`](crate::Builder::ready_when) shows predicates at work on a live link.
#[derive(Clone)]
pub struct Predicate(pub(crate) Arc<PredicateFn>);

type PredicateFn = dyn Fn(&[u8]) -> bool + Send + Sync;

impl Predicate {
    /// Wraps a closure.
    pub fn new(f: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> Predicate {
        Predicate(Arc::new(f))
    }

    /// A predicate that accepts frames starting with `prefix`.
    pub fn starts_with(prefix: impl Into<Vec<u8>>) -> Predicate {
        let prefix = prefix.into();
        // A short prefix (a heartbeat's `+PONG`) is kept inside the closure, so that a test
        // reads one allocation, not two.
        const INLINE: usize = 24;
        if prefix.len() <= INLINE {
            let len = prefix.len();
            let mut inline = [0u8; INLINE];
            inline[..len].copy_from_slice(&prefix);
            return Predicate::new(move |frame| frame.starts_with(&inline[..len]));
        }
        Predicate::new(move |frame| frame.starts_with(&prefix))
    }

    pub(crate) fn test(&self, frame: &[u8]) -> bool {
        (self.0)(frame)
    }
}

impl<F: Fn(&[u8]) -> bool + Send + Sync + 'static> From<F> for Predicate {
    fn from(f: F) -> Predicate {
        Predicate::new(f)
    }
}

impl fmt::Debug for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Predicate(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::Predicate;

    #[test]
    fn starts_with_tests_short_and_long_prefixes_alike() {
        let short = Predicate::starts_with(&b"+PONG"[..]);
        assert!(short.test(b"+PONG"));
        assert!(short.test(b"+PONG\r\n"));
        assert!(!short.test(b"+PON"));
        assert!(!short.test(b"-ERR"));
        let empty = Predicate::starts_with(Vec::new());
        assert!(empty.test(b""));
        assert!(empty.test(b"anything"));
        let long = vec![b'x'; 40];
        let p = Predicate::starts_with(long.clone());
        assert!(p.test(&[long.as_slice(), b"tail"].concat()));
        assert!(!p.test(&long[..39]));
        let edge = vec![b'y'; 24];
        let p = Predicate::starts_with(edge.clone());
        assert!(p.test(&edge));
        assert!(!p.test(&edge[..23]));
    }
}
