//! Ids the IO side hands out itself (link ids, request tokens), and the hasher of the maps
//! keyed by them.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A new link id (process-wide, never reused).
pub(crate) fn next_link_id() -> u64 {
    static LINK_ID: AtomicU64 = AtomicU64::new(0);
    LINK_ID.fetch_add(1, Ordering::Relaxed)
}

/// Hashes an id (a counter) with one multiplication: a command costs one lookup, and
/// SipHash's resistance to chosen keys buys nothing for ids the crate hands out itself.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The hasher of maps keyed by a link id or a request token.
pub(super) type ById = BuildHasherDefault<IdHasher>;
