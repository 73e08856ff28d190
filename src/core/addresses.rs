//! The endpoints of one link: the order this link tries them in, and the DNS cache.
//!
//! Each link draws its own order (from its seeded generator), so a fleet given the same list
//! spreads over its servers. A name's answer is kept for `dns_refresh` and its addresses are
//! taken in turn; a failed dial makes the answer suspect, so the next dial asks again.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::endpoint::Endpoint;

#[derive(Debug)]
struct DnsEntry {
    addrs: Vec<SocketAddr>,
    resolved_at: Instant,
    next: usize,
    /// Whether an address of this answer failed since it was resolved.
    failed: bool,
}

/// The endpoints in this link's order, with the last answer for each name.
#[derive(Debug)]
pub(super) struct Endpoints {
    list: Vec<Endpoint>,
    /// Endpoint indices in this link's own order, and the position of the next one.
    order: Vec<usize>,
    next_endpoint: usize,
    dns: Vec<Option<DnsEntry>>,
}

impl Endpoints {
    /// Draws this link's order from `rng`.
    pub(super) fn new(list: Vec<Endpoint>, rng: &mut StdRng) -> Endpoints {
        let mut order: Vec<usize> = (0..list.len()).collect();
        order.shuffle(rng);
        let dns = list.iter().map(|_| None).collect();
        Endpoints {
            list,
            order,
            next_endpoint: 0,
            dns,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn get(&self, idx: usize) -> &Endpoint {
        &self.list[idx]
    }

    /// The endpoint to dial next; each call moves on to the following one.
    pub(super) fn next_index(&mut self) -> usize {
        let idx = self.order[self.next_endpoint % self.order.len()];
        self.next_endpoint = (self.next_endpoint + 1) % self.order.len();
        idx
    }

    /// The next address of the cached answer for endpoint `idx`, if that answer is younger
    /// than `max_age` and none of its addresses failed since.
    pub(super) fn cached(
        &mut self,
        idx: usize,
        now: Instant,
        max_age: Duration,
    ) -> Option<SocketAddr> {
        let fresh = self.dns[idx].as_ref().is_some_and(|d| {
            !d.failed
                && !d.addrs.is_empty()
                && now.saturating_duration_since(d.resolved_at) < max_age
        });
        if !fresh {
            return None;
        }
        let d = self.dns[idx].as_mut().expect("fresh entry");
        let addr = d.addrs[d.next % d.addrs.len()];
        d.next += 1;
        Some(addr)
    }

    /// Keeps the answer a dial waited for (`addrs` is not empty) and returns the address to
    /// dial. After a failure the next address gets its turn; a clean answer starts over.
    pub(super) fn resolved(
        &mut self,
        idx: usize,
        mut addrs: Vec<SocketAddr>,
        now: Instant,
    ) -> SocketAddr {
        addrs.dedup();
        let next = self.dns[idx]
            .as_ref()
            .map_or(0, |d| if d.failed { d.next } else { 0 });
        let addr = addrs[next % addrs.len()];
        self.dns[idx] = Some(DnsEntry {
            addrs,
            resolved_at: now,
            next: next + 1,
            failed: false,
        });
        addr
    }

    /// Replaces the cached answer with a background one (`addrs` is not empty), keeping the
    /// turn of the addresses.
    pub(super) fn refreshed(&mut self, idx: usize, mut addrs: Vec<SocketAddr>, now: Instant) {
        addrs.dedup();
        let next = self.dns[idx].as_ref().map_or(0, |d| d.next);
        self.dns[idx] = Some(DnsEntry {
            addrs,
            resolved_at: now,
            next,
            failed: false,
        });
    }

    /// A dial to an address of endpoint `idx` failed: its answer is suspect.
    pub(super) fn mark_failed(&mut self, idx: usize) {
        if let Some(d) = self.dns[idx].as_mut() {
            d.failed = true;
        }
    }
}

/// `tcp://1.2.3.4:5` or `tcp://[::1]:5`.
pub(crate) fn fmt_addr(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("tcp://{ip}:{}", addr.port()),
        IpAddr::V6(ip) => format!("tcp://[{ip}]:{}", addr.port()),
    }
}
