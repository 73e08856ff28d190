//! Where a link connects: `tcp://host:port` (or `host:port`), parsed and checked once.

use std::fmt;
use std::net::IpAddr;

use crate::error::ConfigError;

/// Where a link connects: `tcp://host:port`.
///
/// The host is an IPv4 literal, a bracketed IPv6 literal (`tcp://[::1]:6379`) or a name, which
/// relink resolves itself, off every IO thread (a lookup there would stall every link it serves).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Endpoint {
    pub(crate) host: Host,
    pub(crate) port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Endpoint {
    /// Parses `tcp://host:port`, or `host:port` as the same.
    pub(crate) fn parse(s: &str) -> Result<Endpoint, ConfigError> {
        let bad = |reason| ConfigError::BadEndpoint {
            endpoint: s.to_string(),
            reason,
        };
        let rest = match s.split_once("://") {
            Some(("tcp", rest)) => rest,
            Some(_) => return Err(bad("only tcp:// is supported")),
            None => s,
        };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad("missing :port"))?;
            let ip: IpAddr = addr.parse().map_err(|_| bad("bad IPv6 address"))?;
            if !ip.is_ipv6() {
                return Err(bad("bad IPv6 address"));
            }
            (Host::Ip(ip), port)
        } else {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("missing :port"))?;
            if host.is_empty() {
                return Err(bad("empty host"));
            }
            if host == "*" {
                return Err(bad("a wildcard host cannot be connected to"));
            }
            if host.contains(':') {
                return Err(bad("an IPv6 address must be in brackets"));
            }
            match host.parse::<IpAddr>() {
                Ok(ip) => (Host::Ip(ip), port),
                Err(_) => {
                    let valid = host.len() <= 253
                        && host.split('.').all(|label| {
                            !label.is_empty()
                                && label.len() <= 63
                                && label
                                    .bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        });
                    if !valid {
                        return Err(bad("bad host name"));
                    }
                    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                        return Err(bad("bad IPv4 address"));
                    }
                    (Host::Name(host.to_ascii_lowercase()), port)
                }
            }
        };
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("port must be a number"));
        }
        let port: u16 = port.parse().map_err(|_| bad("port out of range"))?;
        if port == 0 {
            return Err(bad("port 0 cannot be connected to"));
        }
        Ok(Endpoint { host, port })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "tcp://[{ip}]:{}", self.port),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "tcp://{ip}:{}", self.port),
            Host::Name(n) => write!(f, "tcp://{n}:{}", self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn an_ipv6_literal_a_name_and_a_port_zero_are_parsed_or_refused() {
        let v6 = Endpoint::parse("tcp://[::1]:6379").unwrap();
        assert_eq!(v6.to_string(), "tcp://[::1]:6379");
        assert_eq!(v6.port, 6379);
        let name = Endpoint::parse("tcp://Cache.Example:6379").unwrap();
        assert_eq!(name.to_string(), "tcp://cache.example:6379");
        assert!(Endpoint::parse("tcp://127.0.0.1:0").is_err());
    }

    #[test]
    fn host_and_port_alone_mean_tcp_and_another_scheme_is_refused() {
        let e = Endpoint::parse("tcp://127.0.0.1:6379").unwrap();
        assert_eq!(e.to_string(), "tcp://127.0.0.1:6379");
        assert_eq!(Endpoint::parse("127.0.0.1:6379"), Ok(e));
        let v6 = Endpoint::parse("[::1]:6379").unwrap();
        assert_eq!(v6.to_string(), "tcp://[::1]:6379");
        assert_eq!(
            Endpoint::parse("Cache.Example:6379").unwrap().to_string(),
            "tcp://cache.example:6379"
        );
        for other in ["udp://127.0.0.1:6379", "ipc:///tmp/x", "://x:1"] {
            let err = Endpoint::parse(other).unwrap_err();
            assert!(err.to_string().contains("only tcp://"), "{other}: {err}");
        }
    }
}
