//! Running a fleet: links carry their names into log lines and handles, the pool answers
//! for all its links in one call, and failures no retry can fix are retried slowly.

mod util;

use std::time::Duration;

use relink::{Cause, IoPool, Link, State};
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
    // Other tests' links log beside this one: the name tells them apart.
    let line = logs.wait_for("relink[meter-17]: Connecting -> Backoff (refused", T);
    assert!(
        line.is_some(),
        "no transition line names the link; seen: {:?}",
        logs.matching("Connecting -> Backoff")
    );
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
    let named = Link::builder(&endpoint)
        .name("gw-1")
        .build()
        .expect("build");
    assert_eq!((named.name(), named.events().name()), ("gw-1", "gw-1"));
}

#[test]
fn a_pool_view_counts_links_per_state_and_names_the_worst() {
    let _g = shared();
    let pool = IoPool::new(2).expect("pool");
    let peer = Peer::start(Behaviour::Echo);
    let up: Vec<Link> = (0..3)
        .map(|i| {
            Link::builder(&peer.endpoint())
                .name(format!("up-{i}"))
                .backoff(ms(10), ms(50))
                .min_stable(ms(10))
                .io_pool(&pool)
                .build()
                .expect("build")
        })
        .collect();
    let down: Vec<Link> = ["down-a", "down-b"]
        .iter()
        .map(|name| {
            Link::builder(&refused_endpoint())
                .name(*name)
                .backoff(ms(10), ms(50))
                .io_pool(&pool)
                .build()
                .expect("build")
        })
        .collect();
    let settled = wait_for(T, || {
        let v = pool.view(10);
        (v.states.get(State::Ready) == 3 && v.longest_down.len() == 2).then_some(v)
    })
    .unwrap_or_else(|| panic!("no settled view; last: {}", pool.view(10)));
    assert_eq!((settled.threads, settled.links), (2, 5));
    let mut names: Vec<&str> = settled.longest_down.iter().map(|l| &*l.name).collect();
    names.sort_unstable();
    assert_eq!(names, ["down-a", "down-b"]);
    assert!(settled.most_reconnects.is_empty(), "{settled}");
    let top = pool.view(1);
    assert_eq!(top.longest_down.len(), 1, "{top}");
    assert!(top.longest_down[0].down_for >= settled.longest_down[1].down_for);

    // The peer restarts: the three come back, and the view names them by reconnects.
    let port = peer.port();
    peer.stop();
    let peer = Peer::start_on(port, Behaviour::Echo).expect("restart the peer");
    let back = wait_for(T, || {
        let v = pool.view(10);
        (v.totals.reconnects == 3 && v.states.get(State::Ready) == 3).then_some(v)
    })
    .unwrap_or_else(|| panic!("not all back; last: {}", pool.view(10)));
    let mut names: Vec<&str> = back.most_reconnects.iter().map(|l| &*l.name).collect();
    names.sort_unstable();
    assert_eq!(names, ["up-0", "up-1", "up-2"]);
    assert!(back.totals.connects >= 6, "{back}");
    for link in up.iter().chain(&down) {
        link.close(T);
    }
    assert_eq!(pool.view(10).links, 0);
    peer.stop();
}
