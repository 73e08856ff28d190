//! NATS as a relink protocol, the whole of it in one value: `Link::builder(ep).protocol(Nats::new())`
//! is a complete NATS link.
//!
//! - **Framing**: CRLF-ended lines, `PUB`/`MSG`/`HMSG` headers followed by a counted body
//!   ([`Counted`]). A frame is given without its final CRLF: the framing writes it.
//! - **Opening**: `CONNECT` and the subscriptions on every connection, Ready at once (`verbose`
//!   off: the server answers nothing).
//! - **Pings**: the server's `PING` answered `PONG` by the link; the link's own `PING` as the
//!   heartbeat (every 5 s, the default a protocol's ping brings), its `PONG` the pong.
//! - **Confirmation by reply**: the server answers only pings, in order ([`Answers::Pings`]), so
//!   the `PONG` to a ping written after a `PUB` says the server read the `PUB`.
//!
//! Shared by `examples/nats.rs` and `tests/protocols.rs`.

use std::sync::{Arc, Mutex};

use relink::framing::{AnyFraming, Counted};
use relink::protocol::{Answers, Opening, Protocol, Reaction};

/// The NATS client protocol: what opens each connection, and the link's own replies.
#[derive(Clone, Default)]
pub struct Nats {
    /// The subjects subscribed to, renewed on every connection (sid = place in the list).
    subjects: Arc<Mutex<Vec<String>>>,
}

impl Nats {
    pub fn new() -> Nats {
        Nats::default()
    }

    /// Subscribes to `subject` on every connection from the next one on; the frame that
    /// subscribes on the current one (send it with `Link::send`).
    pub fn subscribe(&self, subject: &str) -> Vec<u8> {
        let mut subjects = self.subjects.lock().unwrap();
        subjects.push(subject.to_string());
        sub(subject, subjects.len() - 1)
    }
}

fn sub(subject: &str, sid: usize) -> Vec<u8> {
    format!("SUB {subject} {sid}").into_bytes()
}

/// A `PUB` frame: the header line, CRLF, the payload (the framing ends it with CRLF).
pub fn publish(subject: &str, payload: &[u8]) -> Vec<u8> {
    let mut f = format!("PUB {subject} {}\r\n", payload.len()).into_bytes();
    f.extend_from_slice(payload);
    f
}

/// A `MSG` frame's subject and payload.
pub fn message(frame: &[u8]) -> Option<(&str, &[u8])> {
    let header_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let header = std::str::from_utf8(&frame[..header_end]).ok()?;
    let subject = header.strip_prefix("MSG ")?.split(' ').next()?;
    Some((subject, &frame[header_end + 2..]))
}

/// NATS on the wire: CRLF lines, and `PUB`/`MSG`/`HMSG` headers followed by a counted body
/// (the header's last field is its length).
fn wire() -> Counted {
    Counted::new(|header| {
        let text = std::str::from_utf8(header).ok()?;
        let counted = ["PUB ", "MSG ", "HMSG "]
            .iter()
            .any(|p| text.starts_with(p));
        counted
            .then(|| text.rsplit(' ').next()?.parse().ok())
            .flatten()
    })
}

impl Protocol for Nats {
    fn framing(&self) -> Option<AnyFraming> {
        Some(wire().into())
    }

    fn open(&mut self) -> Opening {
        let mut frames = vec![br#"CONNECT {"verbose":false,"pedantic":false}"#.to_vec()];
        let subjects = self.subjects.lock().unwrap();
        frames.extend(subjects.iter().enumerate().map(|(sid, s)| sub(s, sid)));
        Opening::ready(frames)
    }

    fn react(&mut self, frame: &[u8]) -> Reaction {
        match frame {
            b"PING" => Reaction::Answer(b"PONG".to_vec()),
            _ => Reaction::Deliver,
        }
    }

    fn ping(&self) -> Option<Vec<u8>> {
        Some(b"PING".to_vec())
    }

    fn is_pong(&self, frame: &[u8]) -> bool {
        frame == b"PONG"
    }

    fn answers(&self) -> Answers {
        Answers::Pings
    }

    fn name(&self) -> &str {
        "nats"
    }
}
