//! The checks `build()` makes: every setting in range, before any libzmq object is made.

use std::sync::Arc;
use std::time::Duration;

use super::{Builder, Config, Overflow, MAX_ZMQ_MS};
use crate::core::backoff::Jitter;
use crate::core::confirm::Answers;
use crate::core::endpoint::{Endpoint, Host};
use crate::core::heartbeat::Ping;
use crate::core::requests::Matching;
use crate::core::tls::TlsSettings;
use crate::error::ConfigError;

/// Checks every setting; no libzmq object is made.
pub(super) fn config(builder: Builder) -> Result<Config, ConfigError> {
    let mut c = builder.config;
    // What the protocol brings, unless the builder was given its own.
    if let Some(p) = &c.core.protocol {
        let said = builder.said;
        if let Some(f) = p.framing().filter(|_| !said.framing) {
            c.core.framing = f.0;
        }
        if !said.heartbeat {
            c.core.heartbeat = p.heartbeat();
        }
        if !said.confirm {
            c.core.confirm = p.confirm();
        }
        if let Some(r) = p.correlation().filter(|_| !said.correlation) {
            c.core.requests.correlation = r;
        }
    }
    if builder.endpoints.is_empty() {
        return Err(ConfigError::NoEndpoint);
    }
    c.core.endpoints = builder
        .endpoints
        .iter()
        .map(|e| Endpoint::parse(e))
        .collect::<Result<_, _>>()?;
    c.core.name = Arc::from(builder.name.as_deref().unwrap_or(&builder.endpoints[0]));
    let b = &c.core.backoff;
    positive("backoff base", b.base)?;
    if b.max < b.base {
        return Err(ConfigError::MaxBelowBase {
            base: b.base,
            max: b.max,
        });
    }
    if b.floor > b.max {
        return Err(ConfigError::FloorAboveMax {
            floor: b.floor,
            max: b.max,
        });
    }
    if !(b.factor.is_finite() && b.factor >= 1.0) {
        return Err(ConfigError::BadFactor(b.factor));
    }
    if let Jitter::Proportional(x) = b.jitter {
        if !(x.is_finite() && x > 0.0 && x <= 1.0) {
            return Err(ConfigError::JitterOutOfRange(x));
        }
    }
    if c.core.max_attempts == Some(0) {
        return Err(ConfigError::ZeroLimit {
            name: "max_attempts",
        });
    }
    positive("cooldown", c.core.cooldown)?;
    if let Some(d) = c.core.config_retry {
        positive("config_failure_retry", d)?;
    }
    let s = &c.socket;
    positive("connect_timeout", s.connect_timeout)?;
    positive("reconnect_ivl", s.reconnect_ivl)?;
    positive("linger", s.linger)?;
    for (name, d) in [
        ("connect_timeout", s.connect_timeout),
        ("reconnect_ivl", s.reconnect_ivl),
        ("reconnect_ivl_max", s.reconnect_ivl_max),
        ("linger", s.linger),
    ] {
        fits_zmq_ms(name, d)?;
    }
    if s.reconnect_ivl_max > Duration::ZERO && s.reconnect_ivl_max < s.reconnect_ivl {
        return Err(ConfigError::MaxBelowBase {
            base: s.reconnect_ivl,
            max: s.reconnect_ivl_max,
        });
    }
    if s.sndhwm <= 0 {
        return Err(ConfigError::ZeroLimit { name: "sndhwm" });
    }
    if s.rcvhwm <= 0 {
        return Err(ConfigError::ZeroLimit { name: "rcvhwm" });
    }
    if let Some(k) = s.keepalive {
        positive("keepalive idle", k.idle)?;
        positive("keepalive interval", k.interval)?;
        if k.count == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "keepalive count",
            });
        }
        for (name, d) in [
            ("keepalive idle", k.idle),
            ("keepalive interval", k.interval),
        ] {
            if d.as_secs() as u128 > MAX_ZMQ_MS / 1000 {
                return Err(ConfigError::TooLarge {
                    name,
                    value: d.as_secs() as u128,
                    max: MAX_ZMQ_MS / 1000,
                });
            }
        }
        if k.count > i32::MAX as u32 {
            return Err(ConfigError::TooLarge {
                name: "keepalive count",
                value: k.count as u128,
                max: i32::MAX as u128,
            });
        }
    }
    if let Some(d) = s.tcp_maxrt {
        positive("tcp_maxrt", d)?;
        fits_zmq_ms("tcp_maxrt", d)?;
    }
    let framing = &c.core.framing;
    let needs_framing = |what| ConfigError::ReplyNeedsFraming {
        what,
        framing: framing.name().to_string(),
    };
    if let Some(protocol) = &c.core.protocol {
        if !framing.delimits_frames() {
            return Err(needs_framing("protocol"));
        }
        // A clone's opening and ping stand for every connection's: a frame the framing
        // cannot write is refused here, not found at the first connect.
        let mut probe = protocol.clone();
        let unencodable = |what| move |source| ConfigError::Unencodable { what, source };
        for f in &probe.open().frames {
            framing.check(f).map_err(unencodable("opening frame"))?;
        }
        if let Some(ping) = probe.ping() {
            framing.check(&ping).map_err(unencodable("protocol ping"))?;
        }
    }
    let protocol_ping = c.core.protocol.as_ref().is_some_and(|p| p.ping().is_some());
    if let Some(hb) = &c.core.heartbeat {
        positive("heartbeat interval", hb.interval)?;
        if hb.reply.is_some() && !framing.delimits_frames() {
            return Err(needs_framing("heartbeat reply"));
        }
        match &hb.ping {
            // The protocol's ping is written in its place.
            Ping::Raw(p) if p.is_empty() && protocol_ping => {}
            Ping::Raw(p) if p.is_empty() => return Err(ConfigError::EmptyPing),
            Ping::Raw(_) => {}
            Ping::Frame(p) => framing
                .check(p)
                .map_err(|source| ConfigError::Unencodable {
                    what: "heartbeat ping",
                    source,
                })?,
        }
    }
    if c.core.outbox_frames == 0 {
        return Err(ConfigError::ZeroLimit {
            name: "outbox frames",
        });
    }
    if c.core.outbox_bytes == 0 {
        return Err(ConfigError::ZeroLimit {
            name: "outbox bytes",
        });
    }
    if let Overflow::Block(d) = c.overflow {
        positive("overflow block timeout", d)?;
    }
    if let Some(ttl) = c.frame_ttl {
        positive("frame_ttl", ttl)?;
    }
    if c.events_capacity == 0 {
        return Err(ConfigError::ZeroLimit {
            name: "events_capacity",
        });
    }
    positive("close_timeout", c.close_timeout)?;
    positive("slow_callback", c.core.slow_callback)?;
    positive("dns_refresh", c.core.dns_refresh)?;
    if c.core.batch_bytes == 0 {
        return Err(ConfigError::ZeroLimit {
            name: "batch_bytes",
        });
    }
    // The core's dial bounds, computed once. libzmq's own redial waits up to two reconnect
    // intervals before dialling again.
    c.core.connect_timeout = c.socket.connect_timeout;
    c.core.dial_bound = c.socket.connect_timeout + c.socket.reconnect_ivl * 2;
    if let Some(tls) = &builder.tls {
        positive("tls handshake timeout", tls.handshake_bound())?;
        // One rustls configuration for the link (every PEM read and checked here); one
        // server name per endpoint.
        let (config, source) = tls.credentials(&c.core.name)?;
        let sessions = c
            .core
            .endpoints
            .iter()
            .map(|e| match &e.host {
                Host::Ip(ip) => tls.settings(config.clone(), &ip.to_string(), true),
                Host::Name(name) => tls.settings(config.clone(), name, false),
            })
            .map(|s| {
                s.map(|s| TlsSettings {
                    source: source.clone(),
                    ..s
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        c.core.tls = Some(sessions);
    }
    check_requests(&mut c)?;
    check_answers(&mut c, builder.requests_said)?;
    Ok(c)
}

/// What the peer answers, what confirms a frame, and whether every inbound frame has one
/// meaning. Settles `Answers::Unknown` with a heartbeat `reply` as `Answers::Pings`, and
/// whether a request's reply can be matched (by id, or in order where the answers are known).
fn check_answers(c: &mut Config, requests_said: bool) -> Result<(), ConfigError> {
    let core = &mut c.core;
    positive("handshake_timeout", core.handshake_timeout)?;
    core.answers = core
        .protocol
        .as_ref()
        .map_or(Answers::Unknown, |p| p.answers());
    let protocol_pong = core.protocol.as_ref().is_some_and(|p| p.ping().is_some());
    let reply = core.heartbeat.as_ref().is_some_and(|h| h.reply.is_some())
        || (protocol_pong && core.answers != Answers::EveryFrame);
    let in_order = matches!(core.requests.correlation.0, Matching::InOrder { .. });
    if core.max_losses == 0 {
        return Err(ConfigError::ZeroLimit { name: "max_losses" });
    }
    match core.answers {
        Answers::Unknown if reply => core.answers = Answers::Pings,
        Answers::Unknown if core.confirm.by_reply => {
            return Err(ConfigError::Answers(
                "Confirm::reply needs to know what the peer answers: a protocol whose answers() says it, or Heartbeat::reply",
            ))
        }
        Answers::Unknown if core.heartbeat.is_some() && in_order && requests_said => {
            return Err(ConfigError::Answers(
                "in-order requests and a heartbeat without a reply: a pong could answer a \
                 request; give a protocol whose answers() says what the peer answers \
                 (protocol::RequestReply where it answers every frame), or Heartbeat::reply",
            ))
        }
        Answers::EveryFrame if !in_order => {
            return Err(ConfigError::Answers(
                "Answers::EveryFrame answers in order; requests are correlated by id",
            ))
        }
        Answers::EveryFrame if reply => {
            return Err(ConfigError::Answers(
                "Answers::EveryFrame tells the pong by its place; drop Heartbeat::reply",
            ))
        }
        Answers::Pings if !reply => {
            return Err(ConfigError::Answers(
                "Answers::Pings needs a heartbeat whose reply recognises the pong",
            ))
        }
        _ => {}
    }
    // In order, a reply is matched to a request only where the link knows which frames the
    // peer answers: else an answer to a sent frame would be taken for a request's.
    core.requests.matchable = !in_order || core.answers != Answers::Unknown;
    if core.confirm.by_reply && core.answers == Answers::Pings {
        positive("barrier age", core.confirm.barrier_age)?;
        if core.confirm.barrier_bytes == 0 {
            return Err(ConfigError::ZeroLimit {
                name: "barrier bytes",
            });
        }
    }
    Ok(())
}

fn check_requests(c: &mut Config) -> Result<(), ConfigError> {
    let r = &mut c.core.requests;
    r.overflow = c.overflow;
    positive("request_timeout", r.timeout)?;
    if r.max_frames == 0 {
        return Err(ConfigError::ZeroLimit {
            name: "request limit",
        });
    }
    if r.max_bytes == 0 {
        return Err(ConfigError::ZeroLimit {
            name: "request limit bytes",
        });
    }
    Ok(())
}

fn positive(name: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(ConfigError::ZeroDuration { name })
    } else {
        Ok(())
    }
}

fn fits_zmq_ms(name: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.as_millis() > MAX_ZMQ_MS {
        Err(ConfigError::TooLarge {
            name,
            value: d.as_millis(),
            max: MAX_ZMQ_MS,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::core::framing::Lines;
    use crate::core::heartbeat::{Heartbeat, Ping};
    use crate::core::protocol::RequestReply;
    use crate::core::requests::Correlation;
    use crate::Link;

    fn matchable(b: crate::Builder) -> bool {
        b.into_config()
            .expect("a valid configuration")
            .core
            .requests
            .matchable
    }

    fn lines() -> crate::Builder {
        Link::builder("tcp://127.0.0.1:7000").framing(Lines::new())
    }

    #[test]
    fn requests_match_in_order_only_where_the_peers_answers_are_known() {
        assert!(!matchable(lines()), "a framing alone");
        assert!(matchable(lines().protocol(RequestReply)), "every frame");
        let pong = Heartbeat::new(Duration::from_secs(1), Ping::Frame(b"PING".to_vec()))
            .reply(|f: &[u8]| f == b"PONG");
        assert!(matchable(lines().heartbeat(pong)), "pings, by the reply");
        let id = |f: &[u8]| Some(f.to_vec());
        let by_id = lines().requests(|q| q.correlation = Some(Correlation::by_id(id, id)));
        assert!(matchable(by_id), "by id, whatever is answered");
    }
}
