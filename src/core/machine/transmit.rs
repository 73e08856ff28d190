//! The filling of a batch: the outbox's frames through the framing, within the batch's and
//! the window's bounds and below an order number (the next request's: frames and requests
//! leave in the order they were handed in), the built-in framings called directly, not
//! through the box.

use std::time::Duration;

use bytes::Bytes;

use crate::core::framing::BoxedFraming;
use crate::core::framing::{Framing, LengthDelimited, Lines};
use crate::core::guard::{guarded, Panicked};
use crate::core::outbox::{Outbox, Unsent};
use crate::core::protocol::{BoxedProtocol, Replies};
use crate::error::{Callback, EncodeError};

/// How long to wait before offering the socket a batch again after EAGAIN.
pub(super) const SEND_RETRY: Duration = Duration::from_millis(1);

/// How filling a batch ended: frames the framing refused now (taken out of the outbox), the
/// panic that ended it, if any, and whether it stopped short of the order bound (the batch or
/// the window is full, or a refused frame waits for the next batch): then nothing given after
/// the frames left may go into this batch either.
#[derive(Default)]
pub(super) struct Filled {
    pub(super) refused: Vec<Bytes>,
    pub(super) panicked: Option<Panicked>,
    pub(super) stopped: bool,
}

/// How much one batch may hold: payload bytes (`limit`, one frame at least), and the
/// window's bound on bytes written and not yet acknowledged (`unacked` of them already).
#[derive(Clone, Copy)]
pub(super) struct Bounds {
    pub(super) limit: usize,
    pub(super) window: u64,
    pub(super) unacked: u64,
}

/// Where the frames of a batch end, and (`replies`: when the peer answers every frame) what
/// the protocol says of each one's answers, asked as it is written.
pub(super) struct Ends<'a> {
    pub(super) ends: &'a mut Vec<usize>,
    pub(super) replies: Option<(&'a BoxedProtocol, &'a mut Vec<Replies>)>,
}

impl Ends<'_> {
    fn push(&mut self, end: usize, frame: &[u8]) {
        self.ends.push(end);
        if let Some((protocol, replies)) = &mut self.replies {
            replies.push(protocol.replies(frame));
        }
    }
}

impl Bounds {
    /// Bounds that take no frame.
    pub(super) const NONE: Bounds = Bounds {
        limit: 0,
        window: 0,
        unacked: 1,
    };
}

/// Encodes queued frames numbered below `until` into `buf` within `bounds`, noting where each
/// ends in `ends`. The calls into the framing are guarded together, once per call: a panic
/// ends the batch where it happened, with the frames refused before it kept in `refused`.
pub(super) fn fill_batch(
    outbox: &mut Outbox,
    framing: &mut BoxedFraming,
    name: &str,
    buf: &mut Vec<u8>,
    (bounds, until): (Bounds, u64),
    ends: &mut Ends<'_>,
) -> Filled {
    let mut refused = Vec::new();
    let mut stopped = false;
    let encoded = guarded(Callback::Encode, || {
        // A run at a time: the frames of one submission are read off its buffer in order and
        // marked in flight together.
        while let Some(unsent) = outbox.unsent().filter(|u| u.order() < until) {
            let RunFill { taken, full, error } = fill_run(framing, unsent, buf, bounds, ends);
            outbox.advance(taken);
            if full {
                stopped = true;
                break;
            }
            if let Some(e) = error {
                if outbox.in_flight() > 0 {
                    // The frames before it go first; it is then first in line.
                    stopped = true;
                    break;
                }
                // The framing accepted the frame at `send` and refuses it now.
                log::debug!("relink[{name}]: the framing refused a queued frame: {e}");
                refused.push(outbox.pop_front().expect("front exists"));
            }
        }
    });
    Filled {
        refused,
        panicked: encoded.err(),
        stopped,
    }
}

/// How the frames of one run went into a batch: how many were encoded, whether the batch is
/// full, and the framing's refusal of the next one, if any.
struct RunFill {
    taken: usize,
    full: bool,
    error: Option<EncodeError>,
}

/// Encodes the frames of one run into `buf` until the batch is full or the framing refuses
/// one. The built-in framings' `encode` is called directly, inlined in the loop, instead of
/// through the box.
fn fill_run(
    framing: &mut BoxedFraming,
    unsent: Unsent<'_>,
    buf: &mut Vec<u8>,
    bounds: Bounds,
    ends: &mut Ends<'_>,
) -> RunFill {
    let any = framing.as_any_mut();
    if let Some(f) = any.downcast_mut::<LengthDelimited>() {
        return fill_run_with(f, unsent, buf, bounds, ends);
    }
    if let Some(f) = any.downcast_mut::<Lines>() {
        return fill_run_with(f, unsent, buf, bounds, ends);
    }
    fill_run_with(&mut **framing, unsent, buf, bounds, ends)
}

fn fill_run_with<F: Framing + ?Sized>(
    framing: &mut F,
    unsent: Unsent<'_>,
    buf: &mut Vec<u8>,
    bounds: Bounds,
    ends: &mut Ends<'_>,
) -> RunFill {
    let mut fill = RunFill {
        taken: 0,
        full: false,
        error: None,
    };
    for frame in unsent.frames() {
        if !buf.is_empty() && buf.len().saturating_add(frame.len()) > bounds.limit {
            fill.full = true;
            break;
        }
        let unacked = bounds.unacked + buf.len() as u64;
        if unacked > 0 && unacked >= bounds.window {
            fill.full = true;
            break;
        }
        let mark = buf.len();
        match framing.encode(frame, buf) {
            Ok(()) => {
                fill.taken += 1;
                ends.push(buf.len(), frame);
            }
            Err(e) => {
                buf.truncate(mark);
                fill.error = Some(e);
                break;
            }
        }
    }
    fill
}
