//! Request and reply: which outstanding request an inbound frame answers, and the one outcome
//! of every request. Pure: tokens and frames in, outcomes out, time as an argument.
//!
//! ```text
//!  submit ─► parked (Block, over the window) ─► window: [ sent … | in flight … | unsent … ]
//!                                                          ▲ a reply answers one of them
//!  outcome: the reply · timed out · abandoned (expired unsent, connection lost, overflow,
//!           shutdown) · refused (full)
//! ```
//!
//! In order, a request that timed out keeps its place in the window (without its frame) until
//! its late reply comes, which is consumed and counted, never handed to the next request. By
//! id, a timed-out request leaves at once and a reply whose id nobody waits for is counted as
//! late. A lost connection resends what was sent (first, in order, on the next connection) or
//! fails it, by the [`Redelivery`] policy.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::predicate::Predicate;
use super::window::Redelivery;
use crate::core::overflow::Overflow;
use crate::error::RequestError;
use crate::event::AbandonReason;

/// Who waits for a request's outcome (the IO side's number for it).
pub(crate) type Token = u64;

/// The outcome of one request.
pub(crate) type Outcome = Result<Bytes, RequestError>;

/// Reads the id of a request or of a reply; `None` when the frame carries none.
#[derive(Clone)]
pub(crate) struct IdReader(Arc<IdFn>);

type IdFn = dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync;

impl IdReader {
    /// Wraps a closure.
    pub(crate) fn new(f: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static) -> IdReader {
        IdReader(Arc::new(f))
    }

    pub(crate) fn read(&self, frame: &[u8]) -> Option<Vec<u8>> {
        (self.0)(frame)
    }
}

impl fmt::Debug for IdReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdReader(..)")
    }
}

/// How replies are matched to requests ([`Requests::correlation`](crate::config::Requests::correlation)).
///
/// # Examples
/// A protocol whose requests and replies start with a 4-byte id, answered in any order:
/// ```
/// use relink::protocol::Correlation;
///
/// let id = |frame: &[u8]| frame.get(..4).map(<[u8]>::to_vec);
/// let by_id = Correlation::by_id(id, id);
/// # let _ = by_id;
/// ```
#[derive(Clone, Debug)]
pub struct Correlation(pub(crate) Matching);

/// How a [`Correlation`] tells replies apart.
#[derive(Clone, Debug)]
pub(crate) enum Matching {
    /// Each reply answers the oldest outstanding request; a frame `unsolicited` accepts is none.
    InOrder { unsolicited: Option<Predicate> },
    /// A reply answers the outstanding request with the same id.
    ById {
        request_id: IdReader,
        reply_id: IdReader,
    },
}

impl Correlation {
    /// Each reply answers its request in turn (redis, memcached, most line protocols), among
    /// the answers the protocol says the peer gives
    /// ([`Protocol::answers`](crate::protocol::Protocol::answers): with none said, a request
    /// is refused at the call). The default.
    pub fn in_order() -> Correlation {
        Correlation(Matching::InOrder { unsolicited: None })
    }

    /// In order, the frames `unsolicited` accepts (a push, a notice) delivered as
    /// [`Event::Frame`](crate::Event::Frame)s instead.
    pub fn in_order_except(
        unsolicited: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
    ) -> Correlation {
        Correlation(Matching::InOrder {
            unsolicited: Some(Predicate::new(unsolicited)),
        })
    }

    /// Redis (RESP2 and RESP3, with [`Resp`](crate::framing::Resp) framing): in order, RESP3 pushes
    /// (`>`-prefixed: pub/sub messages, client-side caching invalidations) delivered as events.
    pub fn resp() -> Correlation {
        Correlation(Matching::InOrder {
            unsolicited: Some(Predicate::starts_with(">")),
        })
    }

    /// By id, in any order: `request_id` reads a request's id at the call (a request without
    /// one is refused), `reply_id` an inbound frame's. A frame whose `reply_id` is `None` is no
    /// reply (delivered as an event); one whose id nobody waits for (its request timed out) is
    /// a late reply, dropped and counted.
    pub fn by_id(
        request_id: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
        reply_id: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Correlation {
        Correlation(Matching::ById {
            request_id: IdReader::new(request_id),
            reply_id: IdReader::new(reply_id),
        })
    }
}

/// The request settings of one link, from the builder.
#[derive(Clone, Debug)]
pub(crate) struct RequestSettings {
    pub correlation: Correlation,
    pub redelivery: Redelivery,
    pub overflow: Overflow,
    /// The window: requests outstanding (queued or written, not answered), and their bytes.
    pub max_frames: usize,
    pub max_bytes: usize,
    /// A request's deadline, counted from the call, unless the call gives its own.
    pub timeout: Duration,
    /// Whether a reply can be matched to its request: by id, or in order where the link knows
    /// which frames the peer answers (settled by `build()`). Else a request is refused at the
    /// call.
    pub matchable: bool,
}

impl Default for RequestSettings {
    fn default() -> RequestSettings {
        RequestSettings {
            correlation: Correlation::in_order(),
            redelivery: Redelivery::Report,
            overflow: Overflow::RejectNew,
            max_frames: REQUEST_LIMIT_FRAMES,
            max_bytes: REQUEST_LIMIT_BYTES,
            timeout: REQUEST_TIMEOUT,
            matchable: false,
        }
    }
}

/// What an inbound frame is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Matched {
    /// The reply to this request.
    Answer(Token),
    /// The reply to a request nobody waits for any more: dropped.
    Late,
    /// Not a reply, given back: for the application, as an event.
    Unsolicited(Bytes),
}

#[derive(Debug)]
struct Outstanding {
    token: Token,
    /// Empty once nobody waits for it (in order, it keeps its place until its reply).
    frame: Bytes,
    id: Option<Vec<u8>>,
    deadline: Instant,
    waiting: bool,
    /// Connection losses at which it was the oldest request written and not answered.
    losses: u32,
    /// Its place among the frames and requests handed to the machine, kept when it is parked
    /// or resent: the machine writes frames and requests merged by it.
    order: u64,
}

/// The requests of one link: the window of outstanding ones and those parked for room.
#[derive(Debug)]
pub(crate) struct RequestWindow {
    by_id: bool,
    redelivery: Redelivery,
    overflow: Overflow,
    max_frames: usize,
    max_bytes: usize,
    /// A request written before this many losses in a row fails as poison.
    max_losses: u32,
    /// In submission order: `[..sent]` handed to the socket, then `in_flight` taken into the
    /// batch being written, then the unsent ones.
    window: VecDeque<Outstanding>,
    sent: usize,
    in_flight: usize,
    /// Bytes of the frames in the window.
    bytes: usize,
    /// Over the window with `Overflow::Block`: wait for room until the instant.
    parked: VecDeque<(Outstanding, Instant)>,
    /// No deadline falls before this (it may be earlier than the earliest: then a scan
    /// finds the right one).
    next_deadline: Option<Instant>,
    outcomes: VecDeque<(Token, Outcome)>,
    /// Late replies dropped, since the start.
    pub late: u64,
    /// Outcomes handed out, since the start: replies, and the others.
    pub answered: u64,
    pub failed: u64,
}

impl RequestWindow {
    pub(crate) fn new(s: &RequestSettings, max_losses: u32) -> RequestWindow {
        RequestWindow {
            max_losses,
            by_id: matches!(s.correlation.0, Matching::ById { .. }),
            redelivery: s.redelivery,
            overflow: s.overflow,
            max_frames: s.max_frames,
            max_bytes: s.max_bytes,
            window: VecDeque::new(),
            sent: 0,
            in_flight: 0,
            bytes: 0,
            parked: VecDeque::new(),
            next_deadline: None,
            outcomes: VecDeque::new(),
            late: 0,
            answered: 0,
            failed: 0,
        }
    }

    /// Whether replies are matched by id (in any order).
    pub(crate) fn by_id(&self) -> bool {
        self.by_id
    }

    /// Requests in the window and parked, answered or not.
    pub(crate) fn len(&self) -> usize {
        self.window.len() + self.parked.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests whose callers still wait.
    pub(crate) fn waiting(&self) -> usize {
        self.window.iter().filter(|e| e.waiting).count() + self.parked.len()
    }

    /// A new request; `id` is its id when correlating by id, `order` its place among the
    /// frames and requests handed to the machine.
    pub(crate) fn submit(
        &mut self,
        now: Instant,
        token: Token,
        frame: Bytes,
        id: Option<Vec<u8>>,
        deadline: Instant,
        order: u64,
    ) {
        if deadline <= now {
            return self.answer(token, Err(RequestError::Abandoned(AbandonReason::Expired)));
        }
        let entry = Outstanding {
            token,
            frame,
            id,
            deadline,
            waiting: true,
            losses: 0,
            order,
        };
        self.consider(deadline);
        if self.parked.is_empty() && self.fits(entry.frame.len()) {
            return self.admit(entry);
        }
        let overflow = self.overflow;
        match overflow {
            Overflow::Block(t) => {
                let until = deadline.min(now + t);
                self.consider(until);
                self.parked.push_back((entry, until));
            }
            Overflow::DropOldest if self.drop_oldest_unsent() && self.fits(entry.frame.len()) => {
                self.admit(entry)
            }
            _ => {
                let late = self.window.iter().filter(|e| !e.waiting).count();
                let frame = entry.frame;
                let e = match late {
                    0 => RequestError::Full(frame),
                    late => RequestError::FullOfLate { frame, late },
                };
                self.answer(entry.token, Err(e))
            }
        }
    }

    fn fits(&self, len: usize) -> bool {
        self.window.len() < self.max_frames
            && (self.window.is_empty() || self.bytes.saturating_add(len) <= self.max_bytes)
    }

    fn admit(&mut self, entry: Outstanding) {
        self.bytes += entry.frame.len();
        self.window.push_back(entry);
    }

    /// Abandons the oldest request not yet taken for the socket; false when there is none.
    fn drop_oldest_unsent(&mut self) -> bool {
        let first = self.sent + self.in_flight;
        match self.window.remove(first) {
            Some(e) => {
                self.bytes -= e.frame.len();
                self.answer(
                    e.token,
                    Err(RequestError::Abandoned(AbandonReason::Overflow)),
                );
                true
            }
            None => false,
        }
    }

    /// Parked requests move into the window while they fit.
    fn unpark(&mut self) {
        while let Some((e, _)) = self.parked.front() {
            if !self.fits(e.frame.len()) {
                break;
            }
            let (e, _) = self.parked.pop_front().expect("front exists");
            self.admit(e);
        }
    }

    fn consider(&mut self, t: Instant) {
        self.next_deadline = Some(self.next_deadline.map_or(t, |n| n.min(t)));
    }

    /// Ends a request with `outcome`.
    pub(crate) fn answer(&mut self, token: Token, outcome: Outcome) {
        self.outcomes.push_back((token, outcome));
    }

    /// The next outcome to hand to its caller.
    pub(crate) fn poll_outcome(&mut self) -> Option<(Token, Outcome)> {
        let next = self.outcomes.pop_front();
        match &next {
            Some((_, Ok(_))) => self.answered += 1,
            Some((_, Err(_))) => self.failed += 1,
            None => {}
        }
        next
    }

    /// The next frame to write, if one waits (call [`RequestWindow::advance`] once it is encoded).
    pub(crate) fn next_unsent(&self) -> Option<&[u8]> {
        self.window
            .get(self.sent + self.in_flight)
            .map(|e| &e.frame[..])
    }

    /// The order number of the next request to write, if one waits: in the window, or parked
    /// for room (then nothing given after it may be written before it).
    pub(crate) fn next_order(&self) -> Option<u64> {
        match self.window.get(self.sent + self.in_flight) {
            Some(e) => Some(e.order),
            None => self.parked.front().map(|(e, _)| e.order),
        }
    }

    /// Whether the next request to write waits for room in the window (parked).
    pub(crate) fn next_parked(&self) -> bool {
        self.window.len() == self.sent + self.in_flight && !self.parked.is_empty()
    }

    /// The frame from `next_unsent` is in the batch being written.
    pub(crate) fn advance(&mut self) {
        self.in_flight += 1;
    }

    /// Requests taken into the batch being written.
    /// Requests handed to the socket and not yet answered.
    pub(crate) fn written(&self) -> usize {
        self.sent
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The socket took the batch.
    pub(crate) fn confirm(&mut self) {
        self.sent += self.in_flight;
        self.in_flight = 0;
    }

    /// The socket did not take the batch: its requests are first in line again.
    pub(crate) fn requeue(&mut self) {
        self.in_flight = 0;
    }

    /// The request from `next_unsent` cannot be encoded: it fails with `error`.
    pub(crate) fn refuse_next(&mut self, error: impl FnOnce(Bytes) -> RequestError) {
        if let Some(e) = self.window.remove(self.sent + self.in_flight) {
            self.bytes -= e.frame.len();
            self.answer(e.token, Err(error(e.frame)));
            self.unpark();
        }
    }

    /// Matches an inbound frame. `unsolicited` tells (in order) whether the frame is no reply,
    /// `reply_id` (by id) reads its id; both are the application's code, guarded by the
    /// caller, which hands its verdict in.
    pub(crate) fn on_frame(&mut self, frame: Bytes, verdict: Inbound) -> Matched {
        let index = match verdict {
            Inbound::Unsolicited => return Matched::Unsolicited(frame),
            Inbound::Reply if self.sent == 0 => return Matched::Unsolicited(frame),
            Inbound::Reply => 0,
            Inbound::Id(id) => match self
                .window
                .range(..self.sent)
                .position(|e| e.id.as_deref() == Some(&id[..]))
            {
                Some(i) => i,
                None => {
                    self.late += 1;
                    return Matched::Late;
                }
            },
        };
        let e = self.window.remove(index).expect("index in the sent part");
        self.sent -= 1;
        self.bytes -= e.frame.len();
        self.unpark();
        if e.waiting {
            self.answer(e.token, Ok(frame));
            Matched::Answer(e.token)
        } else {
            self.late += 1;
            Matched::Late
        }
    }

    /// The next instant `expire` may have work (an answered request may leave it early).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.next_deadline
    }

    /// Times out the requests whose deadline passed and refuses the parked ones whose wait
    /// for room ran out.
    pub(crate) fn expire(&mut self, now: Instant) {
        if self.next_deadline.map_or(true, |t| t > now) {
            return;
        }
        let mut next: Option<Instant> = None;
        let mut keep = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        let taken = self.sent + self.in_flight;
        let mut i = 0;
        while i < self.window.len() {
            let e = &mut self.window[i];
            if !e.waiting || e.deadline > now {
                if e.waiting {
                    keep(e.deadline);
                }
                i += 1;
                continue;
            }
            if i >= self.sent && i < taken {
                // In the batch being written: its turn comes when the socket answers.
                keep(e.deadline);
                i += 1;
                continue;
            }
            if i >= taken {
                // Never written: it leaves, unsent.
                let e = self.window.remove(i).expect("in range");
                self.bytes -= e.frame.len();
                self.outcomes.push_back((
                    e.token,
                    Err(RequestError::Abandoned(AbandonReason::Expired)),
                ));
            } else if self.by_id && i < self.sent {
                // Its late reply, if any, is recognised by its id matching nobody.
                let e = self.window.remove(i).expect("in range");
                self.sent -= 1;
                self.bytes -= e.frame.len();
                self.outcomes
                    .push_back((e.token, Err(RequestError::TimedOut)));
            } else {
                // Written: it keeps its place until its reply, which is dropped.
                e.waiting = false;
                let frame = std::mem::take(&mut e.frame);
                let token = e.token;
                self.bytes -= frame.len();
                self.outcomes
                    .push_back((token, Err(RequestError::TimedOut)));
                i += 1;
            }
        }
        let mut j = 0;
        while j < self.parked.len() {
            let (e, until) = &self.parked[j];
            if *until > now {
                keep((*until).min(e.deadline));
                j += 1;
                continue;
            }
            let (e, _) = self.parked.remove(j).expect("in range");
            let err = if e.deadline <= now {
                RequestError::Abandoned(AbandonReason::Expired)
            } else {
                RequestError::Full(e.frame)
            };
            self.outcomes.push_back((e.token, Err(err)));
        }
        self.next_deadline = next;
        self.unpark();
    }

    /// The connection dropped (what was in flight is requeued first): the requests it carried
    /// are resent on the next one or fail, by the redelivery policy; those nobody waits for
    /// any more leave.
    pub(crate) fn connection_lost(&mut self, mark: impl Fn(&[u8]) -> Option<Vec<u8>>) {
        self.in_flight = 0;
        let mut carried: Vec<Outstanding> = self.window.drain(..self.sent).collect();
        self.sent = 0;
        // Only the oldest is counted: those behind it wait on it (in order) or were written
        // beside it; it is the one a peer that drops the connection cannot get past.
        if let Some(oldest) = carried.iter_mut().find(|e| e.waiting) {
            oldest.losses += 1;
        }
        for e in carried.into_iter().rev() {
            if !e.waiting {
                continue;
            }
            match self.redelivery {
                Redelivery::Resend if e.losses < self.max_losses => {
                    let mut e = e;
                    if let Some(marked) = mark(&e.frame) {
                        self.bytes = self.bytes - e.frame.len() + marked.len();
                        e.frame = marked.into();
                    }
                    self.window.push_front(e)
                }
                Redelivery::Resend => {
                    self.bytes -= e.frame.len();
                    self.outcomes
                        .push_back((e.token, Err(RequestError::Abandoned(AbandonReason::Poison))));
                }
                Redelivery::Report => {
                    self.bytes -= e.frame.len();
                    self.outcomes.push_back((
                        e.token,
                        Err(RequestError::Abandoned(AbandonReason::ConnectionLost)),
                    ));
                }
            }
        }
        self.unpark();
    }

    /// The link closed: every request left fails.
    pub(crate) fn shutdown(&mut self) {
        let window = std::mem::take(&mut self.window);
        let parked = std::mem::take(&mut self.parked);
        self.sent = 0;
        self.in_flight = 0;
        self.bytes = 0;
        self.next_deadline = None;
        for e in window.into_iter().chain(parked.into_iter().map(|(e, _)| e)) {
            if e.waiting {
                self.outcomes.push_back((
                    e.token,
                    Err(RequestError::Abandoned(AbandonReason::Shutdown)),
                ));
            }
        }
    }
}

/// What the application's correlation code says of an inbound frame.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// In order: a reply.
    Reply,
    /// Not a reply.
    Unsolicited,
    /// By id: a reply with this id.
    Id(Vec<u8>),
}

/// The default request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The default limit of outstanding requests, in requests.
pub const REQUEST_LIMIT_FRAMES: usize = 1024;
/// The default limit of outstanding requests, in bytes.
pub const REQUEST_LIMIT_BYTES: usize = 4 << 20;

#[cfg(test)]
mod tests;
