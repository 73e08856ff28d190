//! The machine's dial: which endpoint and address come next, the name lookups (the first and
//! the background refreshes), the connect, and the connection it brings up.

use std::net::SocketAddr;
use std::time::Instant;

use super::connection::Connection;
use super::{Action, Machine, Timer, Unresolved};
use crate::core::endpoint::Host;
use crate::core::endpoints::fmt_addr;
use crate::event::{Cause, State};

impl Machine {
    pub(super) fn dial(&mut self, now: Instant, cause: Cause) {
        self.generation += 1;
        self.attempt = self.attempt.saturating_add(1);
        self.native_left = self.cfg.native_retries.saturating_sub(self.native_used);
        self.dial_started = now;
        self.timers.disarm(Timer::Retry);
        self.retry_delay = None;
        let idx = self.endpoints.next_index();
        let ep = self.endpoints.get(idx).clone();
        self.timers.arm(Timer::Dial, now + self.cfg.dial_bound);
        match ep.host {
            Host::Ip(ip) => {
                self.current = Some((idx, SocketAddr::new(ip, ep.port)));
                self.transition(now, State::Connecting, cause);
                self.connect_current();
            }
            Host::Name(name) => {
                if let Some(addr) = self.endpoints.cached(idx, now, self.cfg.dns_refresh) {
                    self.current = Some((idx, addr));
                    self.transition(now, State::Connecting, cause);
                    self.connect_current();
                } else {
                    // Keep the next address index across resolutions so every address gets
                    // its turn.
                    self.current = None;
                    self.resolving = Some(idx);
                    self.transition(now, State::Connecting, cause);
                    self.actions.push_back(Action::Resolve {
                        generation: self.generation,
                        host: name,
                        port: ep.port,
                    });
                }
            }
        }
    }

    pub(super) fn resolved(&mut self, now: Instant, addrs: Vec<SocketAddr>) {
        let Some(idx) = self.resolving.take() else {
            self.c.ignored += 1;
            return;
        };
        if addrs.is_empty() {
            return self.fail(now, Cause::Dns);
        }
        let addr = self.endpoints.resolved(idx, addrs, now);
        self.current = Some((idx, addr));
        self.timers
            .arm(Timer::DnsRefresh, now + self.cfg.dns_refresh);
        self.connect_current();
    }

    /// Asks for a fresh answer for the endpoint in use, in the background: the next dial then
    /// finds it in the cache.
    pub(super) fn refresh_dns(&mut self) {
        let Some((idx, _)) = self.current else {
            return;
        };
        let ep = self.endpoints.get(idx);
        if let Host::Name(name) = &ep.host {
            self.actions.push_back(Action::Refresh {
                endpoint: idx,
                host: name.clone(),
                port: ep.port,
            });
        }
    }

    /// A background answer: replaces the cached one (a failure keeps the old answer), and the
    /// next refresh is armed. No state changes.
    /// A resolver that panicked in the background is reported; the connection in use is not
    /// touched.
    pub(super) fn refreshed(
        &mut self,
        now: Instant,
        idx: usize,
        result: Result<Vec<SocketAddr>, Unresolved>,
    ) {
        if let Err(Unresolved::Panicked(p)) = &result {
            self.report_panic(p);
        }
        if self.state == State::Closed || idx >= self.endpoints.len() {
            self.c.ignored += 1;
            return;
        }
        match result {
            Ok(addrs) if !addrs.is_empty() => self.endpoints.refreshed(idx, addrs, now),
            Ok(_) | Err(_) => {
                log::debug!(
                    "relink[{}]: background refresh of {} failed; the old answer stays",
                    self.cfg.name,
                    self.endpoints.get(idx)
                );
            }
        }
        self.timers
            .arm(Timer::DnsRefresh, now + self.cfg.dns_refresh);
    }

    fn connect_current(&mut self) {
        if let Some((_, addr)) = self.current {
            log::debug!("relink[{}]: dialling {}", self.cfg.name, fmt_addr(addr));
            self.actions.push_back(Action::Connect {
                generation: self.generation,
                addr,
            });
        }
    }

    /// The TCP connection of the current dial came up: a fresh [`Connection`] for it, and
    /// with TLS its handshake begins.
    pub(super) fn tcp_connected(&mut self, now: Instant) {
        self.timers.disarm(Timer::Dial);
        self.timers.disarm(Timer::SendRetry);
        self.c.connects += 1;
        let (tls, handshake) = match self.tls_session() {
            None => (None, Ok(None)),
            Some((Ok(session), bound)) => (Some(session), Ok(Some(bound))),
            Some((Err(e), _)) => (None, Err(e)),
        };
        self.conn = Some(Connection::new(tls));
        self.transition(now, State::Connected, Cause::TcpConnected);
        match handshake {
            Ok(None) => self.link_up(now),
            // The ClientHello is ready in the session; poll_transmit sends it.
            Ok(Some(bound)) => self.timers.arm(Timer::Handshake, now + bound),
            Err(e) => self.tls_failed(now, e),
        }
    }

    /// A dial that failed makes the cached answer of its endpoint suspect.
    pub(super) fn note_address_failed(&mut self) {
        if let Some((idx, _)) = self.current {
            self.endpoints.mark_failed(idx);
        }
    }
}
