//! MQTT 3.1.1 as a relink protocol, the whole of it in one value:
//! `Link::builder(ep).protocol(Mqtt::new("client-id")).build()` is a complete MQTT link.
//!
//! - **Framing**: the packets on the wire ([`Packets`]: a type byte, the remaining length, the
//!   rest).
//! - **Opening**: `CONNECT` (keep-alive 30 s), and the link Ready on the `CONNACK` that accepts
//!   it (a refusal is reported with its reason and retried at the slow pace); `SUBSCRIBE`
//!   renewed on every connection.
//! - **Pings**: `PINGREQ` every 5 s as the heartbeat, `PINGRESP` its pong.
//! - **Confirmation by reply**: the broker reads a connection's packets in order and answers
//!   `PINGREQ` with `PINGRESP` ([`Answers::Pings`]), so the `PINGRESP` to a ping written after a
//!   QoS 0 `PUBLISH` (which gets no answer of its own) says the broker read it.
//! - **Requests**: a QoS 1 `PUBLISH` given to `Link::request` is answered by the `PUBACK` with
//!   its packet id (its `correlation`); DUP is set on a `PUBLISH` written again after a
//!   drop. A QoS 1 `PUBLISH` from the broker is acknowledged with its `PUBACK` by the link.
//!
//! Shared by `examples/mqtt.rs` and `tests/protocols.rs`.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relink::bytes::{Bytes, BytesMut};
use relink::error::{DecodeError, EncodeError};
use relink::framing::{AnyFraming, Framing};
use relink::protocol::{Answers, Correlation, Opening, Protocol, Reaction, Verdict};

/// The keep-alive `CONNECT` asks for: the broker drops a client silent for 1.5 times it. The
/// link's `PINGREQ` goes every 5 s (the default a protocol's ping brings), well inside it.
const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// MQTT's packets on the wire: a type byte, the remaining length (a varint), the rest.
#[derive(Clone, Default)]
pub struct Packets;

impl Framing for Packets {
    fn encode(&mut self, frame: &[u8], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
        dst.extend_from_slice(frame); // frames are whole packets
        Ok(())
    }

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        let (mut len, mut shift, mut at) = (0usize, 0, 1);
        loop {
            let Some(&b) = src.get(at) else {
                return Ok(None);
            };
            len |= ((b & 0x7f) as usize) << shift;
            at += 1;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 21 {
                return Err(DecodeError::Malformed("a remaining length over four bytes"));
            }
        }
        if src.len() < at + len {
            return Ok(None);
        }
        Ok(Some(src.split_to(at + len).freeze()))
    }
}

/// A packet: its type byte, then the remaining length and `body`.
fn packet(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![kind];
    let mut n = body.len();
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        p.push(if n > 0 { b | 0x80 } else { b });
        if n == 0 {
            break;
        }
    }
    p.extend_from_slice(body);
    p
}

fn string(s: &str) -> Vec<u8> {
    [&(s.len() as u16).to_be_bytes()[..], s.as_bytes()].concat()
}

/// The offset of the variable header: after the type byte and the remaining length.
fn header_at(p: &[u8]) -> usize {
    1 + p[1..].iter().take_while(|&&b| b & 0x80 != 0).count() + 1
}

/// A QoS 1 `PUBLISH`'s (or a `PUBACK`'s) packet id.
pub fn packet_id(p: &[u8]) -> Option<u16> {
    let at = header_at(p);
    let id_at = match p.first()? >> 4 {
        3 if p[0] & 0x06 != 0 => at + 2 + u16::from_be_bytes([p[at], p[at + 1]]) as usize,
        4 => at,
        _ => return None,
    };
    Some(u16::from_be_bytes([*p.get(id_at)?, *p.get(id_at + 1)?]))
}

/// A `PUBLISH`'s topic and payload.
pub fn publication(p: &[u8]) -> Option<(String, &[u8])> {
    (p.first()? >> 4 == 3).then_some(())?;
    let at = header_at(p);
    let topic_len = u16::from_be_bytes([p[at], p[at + 1]]) as usize;
    let topic = String::from_utf8_lossy(&p[at + 2..at + 2 + topic_len]).into_owned();
    let qos = (p[0] >> 1) & 3;
    let body = at + 2 + topic_len + if qos > 0 { 2 } else { 0 };
    Some((topic, &p[body..]))
}

/// An MQTT 3.1.1 client: its id, the subscriptions it renews, its packet ids.
#[derive(Clone)]
pub struct Mqtt {
    client_id: String,
    username: Option<(String, String)>,
    topics: Arc<Mutex<Vec<String>>>,
    next_id: Arc<AtomicU16>,
}

impl Mqtt {
    pub fn new(client_id: &str) -> Mqtt {
        Mqtt {
            client_id: client_id.to_string(),
            username: None,
            topics: Arc::default(),
            next_id: Arc::new(AtomicU16::new(1)),
        }
    }

    /// Subscribes (QoS 1) to `filter` on every connection from the next one on.
    pub fn subscribe(&self, filter: &str) {
        self.topics.lock().unwrap().push(filter.to_string());
    }

    /// A QoS 0 `PUBLISH` (send it with `Link::send`).
    pub fn publish0(&self, topic: &str, payload: &[u8]) -> Vec<u8> {
        packet(0x30, &[&string(topic)[..], payload].concat())
    }

    /// A QoS 1 `PUBLISH` with a fresh packet id (send it with `Link::request`: its `PUBACK`
    /// answers it).
    pub fn publish1(&self, topic: &str, payload: &[u8]) -> Vec<u8> {
        let id = match self.next_id.fetch_add(1, Ordering::Relaxed) {
            0 => self.next_id.fetch_add(1, Ordering::Relaxed),
            id => id,
        };
        packet(
            0x32,
            &[&string(topic)[..], &id.to_be_bytes(), payload].concat(),
        )
    }
}

impl Protocol for Mqtt {
    fn open(&mut self) -> Opening {
        let flags = 0x02 | if self.username.is_some() { 0xc0 } else { 0 }; // clean session
        let keep_alive = KEEP_ALIVE.as_secs() as u16;
        let mut body = [&string("MQTT")[..], &[4, flags], &keep_alive.to_be_bytes()].concat();
        body.extend(string(&self.client_id));
        if let Some((user, pass)) = &self.username {
            body.extend(string(user));
            body.extend(string(pass));
        }
        let mut frames = vec![packet(0x10, &body)];
        for (i, filter) in self.topics.lock().unwrap().iter().enumerate() {
            let sub = [&(i as u16 + 1).to_be_bytes()[..], &string(filter), &[1]].concat();
            frames.push(packet(0x82, &sub));
        }
        Opening::wait(frames)
    }

    fn verdict(&mut self, frame: &[u8]) -> Verdict {
        match frame {
            [0x20, 2, _, 0] => Verdict::Ready,
            [0x20, 2, _, code] => Verdict::Refused(match code {
                1 => "unacceptable protocol version".into(),
                2 => "client identifier rejected".into(),
                3 => "server unavailable".into(),
                4 => "bad user name or password".into(),
                5 => "not authorized".into(),
                c => format!("CONNACK return code {c}"),
            }),
            _ => Verdict::NotYet,
        }
    }

    fn react(&mut self, frame: &[u8]) -> Reaction {
        match (frame.first().map(|b| b >> 4), packet_id(frame)) {
            // A QoS 1 publication from the broker: acknowledged by the link, delivered.
            (Some(3), Some(id)) => Reaction::AnswerAndDeliver(packet(0x40, &id.to_be_bytes())),
            _ => Reaction::Deliver,
        }
    }

    fn ping(&self) -> Option<Vec<u8>> {
        Some(vec![0xc0, 0]) // PINGREQ
    }

    fn is_pong(&self, frame: &[u8]) -> bool {
        frame == [0xd0, 0] // PINGRESP
    }

    fn answers(&self) -> Answers {
        Answers::Pings
    }

    fn framing(&self) -> Option<AnyFraming> {
        Some(Packets.into())
    }

    /// QoS 1 publications answered by the `PUBACK` with their packet id.
    fn correlation(&self) -> Option<Correlation> {
        let id = |p: &[u8]| packet_id(p).map(|id| id.to_be_bytes().to_vec());
        let ack = |p: &[u8]| (p.first()? >> 4 == 4).then(|| packet_id(p))?;
        Some(Correlation::by_id(id, move |p| {
            ack(p).map(|id| id.to_be_bytes().to_vec())
        }))
    }

    fn resend(&self, frame: &[u8]) -> Option<Vec<u8>> {
        // DUP on a QoS 1 PUBLISH written again.
        (frame.first()? >> 4 == 3 && frame[0] & 0x06 != 0).then(|| {
            let mut f = frame.to_vec();
            f[0] |= 0x08;
            f
        })
    }

    fn name(&self) -> &str {
        "mqtt"
    }
}

impl Mqtt {
    /// With a user name and password in `CONNECT`.
    pub fn credentials(mut self, user: &str, pass: &str) -> Mqtt {
        self.username = Some((user.to_string(), pass.to_string()));
        self
    }
}
