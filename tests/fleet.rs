//! Running a fleet: links carry their names into log lines and handles, the pool answers
//! for all its links in one call, and failures no retry can fix are retried slowly.

mod util;

use std::time::Duration;

use relink::{Cause, Link, State};
use util::logs::Logs;
use util::*;

/// Bound on a link reaching a state.
const T: Duration = Duration::from_secs(10);

#[test]
fn a_captured_log_line_carries_the_link_name() {
    let _g = shared();
    let logs = Logs::capture();
    let link = Link::builder(&refused_endpoint())
        .name("meter-17")
        .backoff(ms(10), ms(20))
        .build()
        .expect("build");
    let mut watch = Watch::new(&link);
    watch.until(T, |t| t.to == State::Backoff && t.cause == Cause::Refused);
    let line = logs
        .wait_for("Connecting -> Backoff", T)
        .expect("the transition is logged");
    assert!(line.contains("relink[meter-17]: "), "{line}");
    assert!(
        logs.matching("dialling")
            .iter()
            .all(|l| l.contains("relink[")),
        "every dial line names its link"
    );
    watch.close(&link, T, "named link");
}

#[test]
fn a_link_without_a_name_is_named_after_its_endpoint() {
    let _g = shared();
    let endpoint = refused_endpoint();
    let link = Link::builder(&endpoint).build().expect("build");
    assert_eq!(link.name(), endpoint);
    assert_eq!(link.events().name(), endpoint);
    let named = Link::builder(&endpoint).name("gw-1").build().expect("build");
    assert_eq!((named.name(), named.events().name()), ("gw-1", "gw-1"));
}
