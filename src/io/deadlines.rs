//! An IO thread's deadlines: `(instant, link)` entries taken earliest first.
//!
//! Most deadlines are pushed in order: a link served now mostly next falls due a heartbeat
//! interval from now, later than any deadline pushed before. Those go into a queue whose
//! front is the earliest (a push and a pop are a step at either end of one run of memory);
//! the others into a binary heap. The earliest entry is the earlier of the two fronts. On a
//! thread of thousands of idle links a heap's push and pop each walk a dozen levels, most of
//! them cache lines fetched from memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

/// A deadline and the link it is for.
pub(super) type Deadline = (Instant, u64);

/// Deadlines, earliest first; duplicates and stale entries are the caller's to skip.
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    /// Entries pushed no earlier than the one pushed before them: sorted, earliest in front.
    in_order: VecDeque<Deadline>,
    /// The others.
    heap: BinaryHeap<Reverse<Deadline>>,
}

impl Deadlines {
    pub(super) fn push(&mut self, entry: Deadline) {
        if self.in_order.back().map_or(true, |last| *last <= entry) {
            self.in_order.push_back(entry);
        } else {
            self.heap.push(Reverse(entry));
        }
    }

    /// The earliest entry.
    pub(super) fn peek(&self) -> Option<Deadline> {
        match (self.in_order.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => Some(*a.min(b)),
            (Some(a), None) => Some(*a),
            (None, Some(Reverse(b))) => Some(*b),
            (None, None) => None,
        }
    }

    /// Takes the earliest entry.
    pub(super) fn pop(&mut self) -> Option<Deadline> {
        let from_heap = match (self.in_order.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => b < a,
            (None, Some(_)) => true,
            _ => false,
        };
        if from_heap {
            self.heap.pop().map(|Reverse(e)| e)
        } else {
            self.in_order.pop_front()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.in_order.len() + self.heap.len()
    }

    /// Replaces every entry with `entries` (the live ones, when stale entries pile up).
    pub(super) fn rebuild(&mut self, entries: impl Iterator<Item = Deadline>) {
        let mut all: Vec<Deadline> = entries.collect();
        all.sort_unstable();
        self.heap.clear();
        self.in_order = all.into();
    }
}

#[cfg(test)]
mod tests {
    use super::Deadlines;
    use std::time::{Duration, Instant};

    fn drain(d: &mut Deadlines) -> Vec<u64> {
        std::iter::from_fn(|| d.pop()).map(|(_, id)| id).collect()
    }

    #[test]
    fn entries_come_out_earliest_first_whatever_order_they_went_in() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Deadlines::default();
        for (ms, id) in [(10, 1), (20, 2), (5, 3), (30, 4), (15, 5), (30, 6), (1, 7)] {
            d.push((at(ms), id));
        }
        assert_eq!(d.len(), 7);
        assert_eq!(d.peek(), Some((at(1), 7)));
        assert_eq!(drain(&mut d), vec![7, 3, 1, 5, 2, 4, 6]);
        assert_eq!(d.len(), 0);
        assert_eq!(d.peek(), None);
    }

    #[test]
    fn pushes_and_pops_interleaved_keep_the_order() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Deadlines::default();
        d.push((at(100), 1));
        d.push((at(200), 2));
        assert_eq!(d.pop(), Some((at(100), 1)));
        d.push((at(150), 3));
        d.push((at(50), 4));
        d.push((at(300), 5));
        assert_eq!(drain(&mut d), vec![4, 3, 2, 5]);
    }

    #[test]
    fn a_rebuild_keeps_only_the_entries_given() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Deadlines::default();
        for id in 0..10 {
            d.push((at(100 - id * 10), id));
        }
        d.rebuild([(at(40), 6), (at(10), 9), (at(70), 3)].into_iter());
        assert_eq!(d.len(), 3);
        d.push((at(20), 11));
        assert_eq!(drain(&mut d), vec![9, 11, 6, 3]);
    }
}
