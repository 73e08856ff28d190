//! Looking before sleeping: a thread about to sleep until another thread hands it something
//! looks for it a little while first, giving its core away between looks.
//!
//! On a machine whose cores are idle, waking a sleeping thread costs tens of microseconds
//! (docs/design.md, "The round trip (measured)"), more than a round trip through the link's
//! socket. A caller that waits for a reply looks before it sleeps, so a reply that comes
//! within the look is taken without that wake-up; a longer wait costs the look once, then
//! sleeps without CPU.
//!
//! How long to look is learnt from the waits that follow a look that found nothing
//! ([`Window`]), as a guest kernel's haltpoll governor learns how long to poll before it
//! halts: what came soon after the look would have been caught by a longer one, and a long
//! wait says that looking costs CPU for nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest look, and the first.
pub(crate) const LOOK: Duration = Duration::from_micros(30);

/// The longest look: a wait longer than this after a look shortens the next.
pub(crate) const LOOK_MAX: Duration = Duration::from_micros(250);

/// How long a thread looks before it sleeps, between [`LOOK`] and [`LOOK_MAX`], learnt from
/// the waits after the looks that found nothing: one that ended with something coming
/// within [`LOOK_MAX`] doubles the look (a longer one would have caught it); one longer than
/// that halves it. A wait that ended at its own timeout within the bound says nothing.
/// Shared by the threads that wait on one link; a stale read only looks a little longer or
/// shorter.
#[derive(Debug)]
pub(crate) struct Window {
    micros: AtomicU64,
}

impl Window {
    pub(crate) const fn new() -> Window {
        Window {
            micros: AtomicU64::new(LOOK.as_micros() as u64),
        }
    }

    /// How long to look now.
    pub(crate) fn get(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    /// A wait after a look that found nothing ended after `waited`, with something that
    /// came (`came`) or at its timeout.
    pub(crate) fn waited(&self, waited: Duration, came: bool) {
        let now = self.micros.load(Ordering::Relaxed);
        let next = if waited > LOOK_MAX {
            now / 2
        } else if came {
            now.saturating_mul(2)
        } else {
            return;
        };
        let (min, max) = (LOOK.as_micros() as u64, LOOK_MAX.as_micros() as u64);
        self.micros.store(next.clamp(min, max), Ordering::Relaxed);
    }
}

impl Default for Window {
    fn default() -> Window {
        Window::new()
    }
}

/// Calls `find` until it gives something, for up to `window`'s look (or until `deadline`,
/// if earlier), yielding the core between calls; `None` if nothing came.
///
/// `find` is called at least twice, before and after one yield, however long the yield
/// takes: on a loaded machine a yield can outlast the whole bound, and the look after it is
/// the one that sees what the other thread handed over meanwhile.
pub(crate) fn look<T>(
    window: &Window,
    deadline: Option<Instant>,
    mut find: impl FnMut() -> Option<T>,
) -> Option<T> {
    if let Some(found) = find() {
        return Some(found);
    }
    let start = Instant::now();
    let bound = start + window.get();
    let until = deadline.map_or(bound, |d| d.min(bound));
    loop {
        std::thread::yield_now();
        if let Some(found) = find() {
            return Some(found);
        }
        if Instant::now() >= until {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_gives_what_comes_and_gives_up_after_its_bound() {
        let window = Window::new();
        let mut calls = 0;
        assert_eq!(
            look(&window, Some(Instant::now()), || {
                calls += 1;
                (calls == 2).then_some(calls)
            }),
            Some(2),
            "what comes after the first call is seen, even past the deadline"
        );
        let start = Instant::now();
        assert_eq!(look(&window, None, || None::<()>), None);
        assert!(start.elapsed() >= LOOK, "looked for its whole bound");
        let mut calls = 0;
        let past = Instant::now();
        assert_eq!(
            look(&window, Some(past), || {
                calls += 1;
                None::<()>
            }),
            None
        );
        assert_eq!(
            calls, 2,
            "a deadline already past ends the look after one yield"
        );
    }

    #[test]
    fn a_look_grows_while_what_it_missed_comes_soon_and_shrinks_when_waits_are_long() {
        let window = Window::new();
        assert_eq!(window.get(), LOOK);
        let us = Duration::from_micros;
        // Something came 40 µs after the look: twice as long, up to the bound.
        window.waited(us(40), true);
        assert_eq!(window.get(), LOOK * 2);
        for _ in 0..10 {
            window.waited(us(40), true);
        }
        assert_eq!(window.get(), LOOK_MAX);
        // A timeout within the bound says nothing; a wait beyond it halves, down to LOOK.
        window.waited(us(100), false);
        assert_eq!(window.get(), LOOK_MAX);
        window.waited(LOOK_MAX + us(1), true);
        assert_eq!(window.get(), LOOK_MAX / 2);
        for _ in 0..10 {
            window.waited(Duration::from_secs(1), false);
        }
        assert_eq!(window.get(), LOOK);
    }
}
