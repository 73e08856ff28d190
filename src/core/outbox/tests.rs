//! The outbox in virtual time.

use super::*;
use std::time::Duration;

fn q(n: u8, deadline: Option<Instant>) -> Queued {
    Queued {
        frame: vec![n; n as usize],
        deadline,
    }
}

#[test]
fn expire_removes_only_overdue_frames_and_keeps_order() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut o = Outbox::new(10, 1000);
    o.push_back(q(1, Some(t0 + s)));
    o.push_back(q(2, None));
    o.push_back(q(3, Some(t0 + 3 * s)));
    o.push_back(q(4, Some(t0 + s)));
    assert_eq!(o.next_deadline(), Some(t0 + s));
    let gone = o.expire(t0 + 2 * s);
    assert_eq!(gone, vec![vec![1], vec![4; 4]]);
    assert_eq!(o.len(), 2);
    assert_eq!(o.bytes(), 5);
    assert_eq!(o.next_deadline(), Some(t0 + 3 * s));
    assert_eq!(o.pop_front().unwrap().frame, vec![2, 2]);
}

#[test]
fn limits_count_frames_and_bytes() {
    let mut o = Outbox::new(2, 5);
    o.push_back(q(2, None));
    o.push_back(q(3, None));
    assert!(!o.over_limit());
    o.push_back(q(1, None));
    assert!(o.over_limit());
    o.pop_front();
    assert!(!o.over_limit());
    o.push_back(q(4, None));
    assert!(o.over_limit(), "8 bytes > 5");
}
