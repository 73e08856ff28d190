//! Looking before sleeping: a thread about to sleep until another thread hands it something
//! looks for it a little while first, giving its core away between looks.
//!
//! On a machine whose cores are idle, waking a sleeping thread costs tens of microseconds
//! (docs/design.md, "The round trip (measured)"), more than a round trip through the link's
//! socket. A caller that waits for a reply looks for up to [`LOOK`] before it sleeps, so a
//! reply that comes within a round trip is taken without that wake-up; a longer wait costs
//! the look once, then sleeps without CPU.

use std::time::{Duration, Instant};

/// How long a blocking receive of an event or a reply looks before its thread sleeps.
pub(crate) const LOOK: Duration = Duration::from_micros(30);

/// Calls `find` until it gives something, for up to [`LOOK`] (or until `deadline`, if
/// earlier), yielding the core between calls; `None` if nothing came.
///
/// `find` is called at least twice, before and after one yield, however long the yield
/// takes: on a loaded machine a yield can outlast the whole bound, and the look after it is
/// the one that sees what the other thread handed over meanwhile.
pub(crate) fn look<T>(deadline: Option<Instant>, mut find: impl FnMut() -> Option<T>) -> Option<T> {
    if let Some(found) = find() {
        return Some(found);
    }
    let start = Instant::now();
    let until = deadline.map_or(start + LOOK, |d| d.min(start + LOOK));
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
        let mut calls = 0;
        assert_eq!(
            look(Some(Instant::now()), || {
                calls += 1;
                (calls == 2).then_some(calls)
            }),
            Some(2),
            "what comes after the first call is seen, even past the deadline"
        );
        let start = Instant::now();
        assert_eq!(look(None, || None::<()>), None);
        assert!(start.elapsed() >= LOOK, "looked for its whole bound");
        let mut calls = 0;
        let past = Instant::now();
        assert_eq!(
            look(Some(past), || {
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
}
