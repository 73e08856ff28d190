//! What the receive path asks of an inbound frame before it knows where the frame goes:
//! whether the protocol or the correlation calls it the peer's own, and which request it
//! answers. Both call application code, guarded.

use crate::core::guard::{guarded, Panicked};
use crate::core::protocol::BoxedProtocol;
use crate::core::requests::{Inbound, Matching};
use crate::error::Callback;

/// Whether the protocol, or the in-order correlation `matching`, calls `frame` the peer's
/// own.
pub(super) fn unsolicited(
    protocol: Option<&BoxedProtocol>,
    matching: &Matching,
    frame: &[u8],
) -> Result<bool, Panicked> {
    if protocol_unsolicited(protocol, frame)? {
        return Ok(true);
    }
    guarded(Callback::Correlation, || match matching {
        Matching::InOrder {
            unsolicited: Some(p),
        } => p.test(frame),
        _ => false,
    })
}

/// What the protocol and the correlation `matching` say of `frame`: the peer's own, the
/// reply in turn, or the reply to the request with its id.
pub(super) fn inbound(
    protocol: Option<&BoxedProtocol>,
    matching: &Matching,
    frame: &[u8],
) -> Result<Inbound, Panicked> {
    if protocol_unsolicited(protocol, frame)? {
        return Ok(Inbound::Unsolicited);
    }
    guarded(Callback::Correlation, || match matching {
        Matching::InOrder {
            unsolicited: Some(p),
        } if p.test(frame) => Inbound::Unsolicited,
        Matching::InOrder { .. } => Inbound::Reply,
        Matching::ById { reply_id, .. } => match reply_id.read(frame) {
            Some(id) => Inbound::Id(id),
            None => Inbound::Unsolicited,
        },
    })
}

/// Whether the protocol calls `frame` the peer's own by its content.
fn protocol_unsolicited(protocol: Option<&BoxedProtocol>, frame: &[u8]) -> Result<bool, Panicked> {
    match protocol {
        Some(p) => guarded(Callback::Protocol, || p.is_unsolicited(frame)),
        None => Ok(false),
    }
}
