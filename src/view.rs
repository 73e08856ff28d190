//! The pool-wide view: plain data the IO threads of an [`IoPool`](crate::IoPool) fill from
//! their links' counters, one answer per thread, merged by [`IoPool::view`](crate::IoPool::view).

use std::cmp::Reverse;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::event::{AbandonReason, State};
use crate::metrics::{Abandoned, Metrics};

/// Every link of a pool at one moment: how many are in each state, the sums of their
/// counters, and the links that are worst off, by name. Taken by
/// [`IoPool::view`](crate::IoPool::view).
///
/// Each IO thread answers for its own links in one pass, so the view of one thread is
/// consistent; two threads answer a few microseconds apart.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::{IoPool, Link, State};
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let pool = IoPool::new(1)?;
/// // Nobody listens on `port`: both links keep trying.
/// let links = ["meter-1", "meter-2"].map(|name| {
///     Link::builder(&format!("tcp://127.0.0.1:{port}"))
///         .name(name)
///         .io_pool(&pool)
///         .build()
/// });
/// let view = pool.view(10);
/// assert_eq!(view.links, 2);
/// assert_eq!(view.states.get(State::Ready), 0);
/// println!("{view}");
/// # drop(links);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct PoolView {
    /// The pool's IO threads that answered.
    pub threads: usize,
    /// Links running on them (built and not yet closed).
    pub links: usize,
    /// How many links are in each state.
    pub states: StateCounts,
    /// The links' counters, summed.
    pub totals: Totals,
    /// The links without a Ready connection for longest, longest first (at most the number
    /// asked for; links that are up are not in it).
    pub longest_down: Vec<LinkSummary>,
    /// The links that came back from the most outages, most first (at most the number asked
    /// for; links that never reconnected are not in it).
    pub most_reconnects: Vec<LinkSummary>,
}

/// Links per state, in a [`PoolView`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCounts {
    /// Built, not started yet.
    pub idle: usize,
    /// Resolving or dialling.
    pub connecting: usize,
    /// TCP up, proof of life not seen yet.
    pub connected: usize,
    /// Up.
    pub ready: usize,
    /// Waiting to try again.
    pub backoff: usize,
    /// Resting after `max_attempts` failures.
    pub cooldown: usize,
    /// Closing (a link leaves the pool once it is Closed).
    pub closed: usize,
}

impl StateCounts {
    /// Links in `state`.
    pub fn get(&self, state: State) -> usize {
        match state {
            State::Idle => self.idle,
            State::Connecting => self.connecting,
            State::Connected => self.connected,
            State::Ready => self.ready,
            State::Backoff => self.backoff,
            State::Cooldown => self.cooldown,
            State::Closed => self.closed,
        }
    }

    fn slot(&mut self, state: State) -> &mut usize {
        match state {
            State::Idle => &mut self.idle,
            State::Connecting => &mut self.connecting,
            State::Connected => &mut self.connected,
            State::Ready => &mut self.ready,
            State::Backoff => &mut self.backoff,
            State::Cooldown => &mut self.cooldown,
            State::Closed => &mut self.closed,
        }
    }

    fn add(&mut self, other: &StateCounts) {
        for s in State::ALL {
            *self.slot(s) += other.get(s);
        }
    }
}

/// The counters of a pool's links, summed (see [`Metrics`] for what each counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// TCP connections established.
    pub connects: u64,
    /// Returns to Ready after losing a Ready connection.
    pub reconnects: u64,
    /// Frames abandoned, by reason.
    pub abandoned: Abandoned,
    /// Frames waiting in the outboxes.
    pub outbox_frames: u64,
    /// Payload bytes waiting in the outboxes.
    pub outbox_bytes: u64,
    /// Frames handed to the sockets.
    pub frames_sent: u64,
    /// Frame payload bytes handed to the sockets.
    pub bytes_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Frames the peers' closes cut short (reported, never delivered).
    pub frames_cut: u64,
    /// Frames of closed connections dropped after waiting `closed_frames_wait` for the
    /// application.
    pub frames_unread: u64,
    /// Bytes received and never decoded because relink ended the connection itself.
    pub bytes_discarded: u64,
    /// Heartbeat intervals that passed without a byte from the peer.
    pub heartbeats_missed: u64,
}

impl Totals {
    /// Adds one link's snapshot. (A counter added to [`Metrics`] that a fleet should see is
    /// summed here too.)
    pub(crate) fn add(&mut self, m: &Metrics) {
        self.connects += m.connects;
        self.reconnects += m.reconnects;
        self.abandoned += m.abandoned;
        self.outbox_frames += m.outbox_frames;
        self.outbox_bytes += m.outbox_bytes;
        self.frames_sent += m.frames_sent;
        self.bytes_sent += m.bytes_sent;
        self.frames_received += m.frames_received;
        self.bytes_received += m.bytes_received;
        self.frames_cut += m.frames_cut;
        self.frames_unread += m.frames_unread;
        self.bytes_discarded += m.bytes_discarded;
        self.heartbeats_missed += m.heartbeats_missed;
    }

    fn merge(&mut self, o: &Totals) {
        self.connects += o.connects;
        self.reconnects += o.reconnects;
        self.abandoned += o.abandoned;
        self.outbox_frames += o.outbox_frames;
        self.outbox_bytes += o.outbox_bytes;
        self.frames_sent += o.frames_sent;
        self.bytes_sent += o.bytes_sent;
        self.frames_received += o.frames_received;
        self.bytes_received += o.bytes_received;
        self.frames_cut += o.frames_cut;
        self.frames_unread += o.frames_unread;
        self.bytes_discarded += o.bytes_discarded;
        self.heartbeats_missed += o.heartbeats_missed;
    }
}

/// One link, by name, in a [`PoolView`]'s lists.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkSummary {
    /// The link's name ([`Builder::name`](crate::Builder::name)).
    pub name: Arc<str>,
    /// Its state.
    pub state: State,
    /// How long it has been without a Ready connection ([`Metrics::down_for`]).
    pub down_for: Option<Duration>,
    /// Its returns to Ready after an outage ([`Metrics::reconnects`]).
    pub reconnects: u64,
    /// Its last outage, from losing Ready to Ready again ([`Metrics::last_outage`]).
    pub last_outage: Option<Duration>,
}

/// One link as a thread's tally sees it: no name copied unless it makes a list.
struct Row<'a> {
    name: &'a Arc<str>,
    state: State,
    down_for: Option<Duration>,
    reconnects: u64,
    last_outage: Option<Duration>,
}

impl Row<'_> {
    fn summary(&self) -> LinkSummary {
        LinkSummary {
            name: self.name.clone(),
            state: self.state,
            down_for: self.down_for,
            reconnects: self.reconnects,
            last_outage: self.last_outage,
        }
    }
}

/// The view of one thread's links, with the `top` worst of each list.
pub(crate) fn tally<'a>(
    links: impl Iterator<Item = (&'a Arc<str>, Metrics)>,
    top: usize,
) -> PoolView {
    let mut view = PoolView {
        threads: 1,
        ..PoolView::default()
    };
    let mut rows = Vec::new();
    for (name, m) in links {
        view.links += 1;
        *view.states.slot(m.state) += 1;
        view.totals.add(&m);
        rows.push(Row {
            name,
            state: m.state,
            down_for: m.down_for,
            reconnects: m.reconnects,
            last_outage: m.last_outage,
        });
    }
    view.longest_down = worst(&rows, top, |r| r.down_for.map(|d| (d, r.reconnects)));
    view.most_reconnects = worst(&rows, top, |r| {
        (r.reconnects > 0).then_some((r.reconnects, r.down_for.unwrap_or_default()))
    });
    view
}

/// The `top` rows with the largest keys (rows without one left out), largest first.
fn worst<K: Ord + Copy>(
    rows: &[Row<'_>],
    top: usize,
    key: impl Fn(&Row<'_>) -> Option<K>,
) -> Vec<LinkSummary> {
    let mut keyed: Vec<(K, usize)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| key(r).map(|k| (k, i)))
        .collect();
    if top == 0 {
        return Vec::new();
    }
    if keyed.len() > top {
        keyed.select_nth_unstable_by_key(top - 1, |k| Reverse(k.0));
        keyed.truncate(top);
    }
    keyed.sort_unstable_by_key(|k| Reverse(k.0));
    keyed.iter().map(|(_, i)| rows[*i].summary()).collect()
}

impl PoolView {
    /// Adds another thread's view; the lists keep the `top` worst of both.
    pub(crate) fn merge(&mut self, other: PoolView, top: usize) {
        self.threads += other.threads;
        self.links += other.links;
        self.states.add(&other.states);
        self.totals.merge(&other.totals);
        self.longest_down.extend(other.longest_down);
        self.longest_down
            .sort_by_key(|l| Reverse((l.down_for, l.reconnects)));
        self.longest_down.truncate(top);
        self.most_reconnects.extend(other.most_reconnects);
        self.most_reconnects
            .sort_by_key(|l| Reverse((l.reconnects, l.down_for)));
        self.most_reconnects.truncate(top);
    }
}

/// Several lines: the states, the totals, then each list (`name state down-for`).
impl fmt::Display for PoolView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} links on {} threads:", self.links, self.threads)?;
        for s in State::ALL {
            let n = self.states.get(s);
            if n > 0 {
                write!(f, " {s} {n}")?;
            }
        }
        let t = &self.totals;
        writeln!(f)?;
        write!(
            f,
            "connects {} reconnects {} outbox {} frames ({} B) abandoned {} (",
            t.connects,
            t.reconnects,
            t.outbox_frames,
            t.outbox_bytes,
            t.abandoned.total(),
        )?;
        for (i, r) in AbandonReason::ALL.into_iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{r} {}", t.abandoned.get(r))?;
        }
        writeln!(
            f,
            ") heartbeats missed {} inbound cut {} frames, unread {} frames, discarded {} B",
            t.heartbeats_missed, t.frames_cut, t.frames_unread, t.bytes_discarded
        )?;
        write!(f, "longest down:")?;
        if self.longest_down.is_empty() {
            write!(f, " none")?;
        }
        for l in &self.longest_down {
            write!(
                f,
                " {} {} {:.1}s;",
                l.name,
                l.state,
                l.down_for.unwrap_or_default().as_secs_f64()
            )?;
        }
        writeln!(f)?;
        write!(f, "most reconnects:")?;
        if self.most_reconnects.is_empty() {
            write!(f, " none")?;
        }
        for l in &self.most_reconnects {
            write!(f, " {} {};", l.name, l.reconnects)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(state: State, down_s: Option<u64>, reconnects: u64) -> Metrics {
        let mut m = Metrics::empty(state);
        m.down_for = down_s.map(Duration::from_secs);
        m.reconnects = reconnects;
        m.connects = reconnects + 1;
        m.outbox_frames = 2;
        m.abandoned.expired = 1;
        m
    }

    #[test]
    fn a_tally_counts_states_sums_counters_and_keeps_the_worst_by_name() {
        let names: Vec<Arc<str>> = (0..6).map(|i| Arc::from(format!("l{i}"))).collect();
        let links = [
            link(State::Ready, None, 5),
            link(State::Backoff, Some(30), 1),
            link(State::Backoff, Some(90), 0),
            link(State::Connecting, Some(10), 7),
            link(State::Ready, None, 0),
            link(State::Cooldown, Some(600), 2),
        ];
        let v = tally(names.iter().zip(links), 2);
        assert_eq!((v.threads, v.links), (1, 6));
        assert_eq!(
            [
                State::Ready,
                State::Backoff,
                State::Connecting,
                State::Cooldown
            ]
            .map(|s| v.states.get(s)),
            [2, 2, 1, 1]
        );
        assert_eq!(v.totals.reconnects, 15);
        assert_eq!(v.totals.connects, 21);
        assert_eq!(v.totals.outbox_frames, 12);
        assert_eq!(v.totals.abandoned.expired, 6);
        let names = |l: &[LinkSummary]| l.iter().map(|s| s.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&v.longest_down), ["l5", "l2"]);
        assert_eq!(names(&v.most_reconnects), ["l3", "l0"]);
    }

    #[test]
    fn every_abandon_reason_is_summed_and_said_in_the_text() {
        let names: Vec<Arc<str>> = vec![Arc::from("a"), Arc::from("b")];
        let mut m = link(State::Ready, None, 0);
        m.abandoned.unconfirmed = 4081;
        m.abandoned.poison = 1;
        let v = tally(names.iter().zip([m, m]), 1);
        assert_eq!(v.totals.abandoned.unconfirmed, 8162);
        assert_eq!(v.totals.abandoned.poison, 2);
        assert_eq!(v.totals.abandoned.total(), 2 * (1 + 4081 + 1));
        let text = v.to_string();
        for r in AbandonReason::ALL {
            assert!(text.contains(&format!("{r} ")), "{r} in {text}");
        }
        assert!(text.contains("unconfirmed 8162 poison 2"), "{text}");
    }

    #[test]
    fn merged_views_keep_the_worst_of_both() {
        let a_names: Vec<Arc<str>> = vec![Arc::from("a0"), Arc::from("a1")];
        let b_names: Vec<Arc<str>> = vec![Arc::from("b0")];
        let a = tally(
            a_names.iter().zip([
                link(State::Backoff, Some(5), 1),
                link(State::Backoff, Some(50), 3),
            ]),
            2,
        );
        let b = tally(b_names.iter().zip([link(State::Backoff, Some(20), 9)]), 2);
        let mut v = a;
        v.merge(b, 2);
        assert_eq!((v.threads, v.links, v.states.backoff), (2, 3, 3));
        let down: Vec<&str> = v.longest_down.iter().map(|l| &*l.name).collect();
        let most: Vec<&str> = v.most_reconnects.iter().map(|l| &*l.name).collect();
        assert_eq!((down, most), (vec!["a1", "b0"], vec!["b0", "a1"]));
        assert!(v
            .to_string()
            .starts_with("3 links on 2 threads: Backoff 3\n"));
    }
}
