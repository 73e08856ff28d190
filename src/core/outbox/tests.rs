//! The outbox in virtual time.

use super::*;
use std::time::Duration;

fn f(n: u8) -> Bytes {
    Bytes::from(vec![n; n as usize])
}

fn batch(ns: &[u8]) -> Batch {
    ns.iter().map(|&n| f(n)).collect()
}

/// Hands out up to `max` frames as `poll_transmit` would; the frames handed out.
fn write_all(o: &mut Outbox, max: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    while out.len() < max {
        let Some(unsent) = o.unsent() else { break };
        let n = unsent.frames().take(max - out.len()).count();
        out.extend(unsent.frames().take(n).map(Bytes::copy_from_slice));
        o.advance(n);
    }
    out
}

#[test]
fn expire_removes_only_overdue_frames_and_keeps_order() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut o = Outbox::new(10, 1000);
    o.push(f(1), Some(t0 + s), 0);
    o.push(f(2), None, 0);
    o.push(f(3), Some(t0 + 3 * s), 0);
    o.push(f(4), Some(t0 + s), 0);
    assert_eq!(o.next_deadline(), Some(t0 + s));
    let gone = o.expire(t0 + 2 * s);
    assert_eq!(gone, vec![vec![1], vec![4; 4]]);
    assert_eq!(o.len(), 2);
    assert_eq!(o.bytes(), 5);
    assert_eq!(o.next_deadline(), Some(t0 + 3 * s));
    assert_eq!(o.pop_front().unwrap(), vec![2, 2]);
}

#[test]
fn limits_count_frames_and_bytes() {
    let mut o = Outbox::new(2, 5);
    o.push(f(2), None, 0);
    o.push(f(3), None, 0);
    assert!(!o.over_limit());
    o.push(f(1), None, 0);
    assert!(o.over_limit());
    o.pop_front();
    assert!(!o.over_limit());
    o.push(f(4), None, 0);
    assert!(o.over_limit(), "8 bytes > 5");
}

#[test]
fn batch_frames_keep_their_order_among_single_frames() {
    let mut o = Outbox::new(100, 1000);
    o.push(f(1), None, 0);
    o.push_batch(batch(&[2, 3, 4]), None, 0);
    o.push(f(5), None, 0);
    assert_eq!(o.len(), 5);
    assert_eq!(o.bytes(), 15);
    assert_eq!(write_all(&mut o, 100), vec![f(1), f(2), f(3), f(4), f(5)]);
}

#[test]
fn written_frames_leave_exactly_those_in_flight_even_inside_a_batch() {
    let t0 = Instant::now();
    let mut o = Outbox::new(100, 1000);
    o.push_batch(batch(&[1, 2, 3, 4]), Some(t0), 0);
    o.push(f(5), None, 0);
    assert_eq!(write_all(&mut o, 2), vec![f(1), f(2)]);
    assert_eq!(o.in_flight(), 2);
    let mut taken = Vec::new();
    o.take_written(|w| taken.extend(w.frames().into_iter().map(|f| (f, w.deadline))));
    assert_eq!(taken, vec![(f(1), Some(t0)), (f(2), Some(t0))]);
    assert_eq!((o.len(), o.bytes(), o.in_flight()), (3, 12, 0));
    assert_eq!(write_all(&mut o, 100), vec![f(3), f(4), f(5)]);
    o.take_written(|_| {});
    assert!(o.is_empty());
    assert_eq!(o.bytes(), 0);
}

#[test]
fn frames_put_back_in_front_go_first_and_keep_their_deadline() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut o = Outbox::new(100, 1000);
    o.push(f(3), None, 0);
    o.push_front(f(2), Some(t0 + s), 0);
    o.push_front(f(1), None, 0);
    assert_eq!((o.len(), o.bytes()), (3, 6));
    assert_eq!(o.next_deadline(), Some(t0 + s));
    assert_eq!(o.expire(t0 + 2 * s), vec![f(2)]);
    assert_eq!(write_all(&mut o, 100), vec![f(1), f(3)]);
}

#[test]
fn requeued_frames_are_written_again_first() {
    let mut o = Outbox::new(100, 1000);
    o.push_batch(batch(&[1, 2, 3]), None, 0);
    assert_eq!(write_all(&mut o, 2), vec![f(1), f(2)]);
    o.requeue();
    assert_eq!(o.in_flight(), 0);
    assert_eq!(o.len(), 3);
    assert_eq!(write_all(&mut o, 100), vec![f(1), f(2), f(3)]);
}

#[test]
fn a_batch_gives_its_frames_back_one_by_one_when_popped_expired_or_drained() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut o = Outbox::new(100, 1000);
    o.push_batch(batch(&[1, 2, 3]), Some(t0 + s), 0);
    o.push_batch(batch(&[4, 5]), None, 0);
    assert_eq!(o.pop_front(), Some(f(1)));
    assert_eq!(o.expire(t0 + s), vec![f(2), f(3)]);
    assert_eq!((o.len(), o.bytes()), (2, 9));
    assert_eq!(o.drain(), vec![f(4), f(5)]);
    assert!(o.is_empty());
}

#[test]
fn nothing_expires_while_frames_are_in_flight() {
    let t0 = Instant::now();
    let mut o = Outbox::new(100, 1000);
    o.push(f(1), Some(t0), 0);
    write_all(&mut o, 1);
    assert!(o.expire(t0).is_empty());
    o.requeue();
    assert_eq!(o.expire(t0), vec![f(1)]);
}

#[test]
fn frames_leaving_a_batch_are_slices_of_its_one_buffer_not_copies() {
    let mut o = Outbox::new(100, 1000);
    let b = batch(&[1, 2, 3]);
    let base = b.get(0).expect("a frame").as_ptr();
    o.push_batch(b, None, 0);
    write_all(&mut o, 2);
    let mut taken = Vec::new();
    o.take_written(|w| taken.extend(w.frames()));
    let drained = o.drain();
    let at: Vec<usize> = taken
        .iter()
        .chain(&drained)
        .map(|f| f.as_ptr() as usize - base as usize)
        .collect();
    assert_eq!(
        at,
        [0, 1, 3],
        "each frame where it lies in the batch's buffer"
    );
}
