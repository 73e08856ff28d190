//! What arrives for a link: the monitor's events, the STREAM socket's messages (routing-id
//! toggles and data), the peer's acknowledgements, each translated into machine inputs.

use std::time::Instant;

use super::Slot;
use crate::core::machine::Input;
use crate::io::ffi;

/// Messages read from one link's socket per pass before the other links get their turn.
const READ_BUDGET: usize = 256;

const EVENT_CONNECTED: u16 = 0x0001;
const EVENT_CONNECT_RETRIED: u16 = 0x0004;
const EVENT_DISCONNECTED: u16 = 0x0200;

impl Slot {
    /// Reads the monitor's events of the current dial: a failed attempt, a connection's
    /// descriptor, and the peer's close, which the monitor tells ahead of the data still
    /// unread (that data is then read up to the in-band notification, and the close acted on
    /// behind it).
    pub(super) fn read_monitor(&mut self, now: Instant) {
        while let Ok(head) = self.monitor.recv_msg(zmq::DONTWAIT) {
            let mut endpoint = None;
            while self.monitor.get_rcvmore().unwrap_or(false) {
                match self.monitor.recv_msg(zmq::DONTWAIT) {
                    Ok(m) => endpoint = Some(m),
                    Err(_) => break,
                }
            }
            if head.len() < 6 {
                continue;
            }
            let event = u16::from_ne_bytes([head[0], head[1]]);
            let value = u32::from_ne_bytes([head[2], head[3], head[4], head[5]]);
            let ours = match (&endpoint, &self.endpoint) {
                (Some(e), Some(active)) => e.as_str() == Some(active.as_str()),
                _ => false,
            };
            log::trace!(
                "relink[{}]: monitor event {event:#06x} value {value} ours={ours}",
                self.machine.name()
            );
            if !ours {
                continue;
            }
            let Some((_, generation)) = self.rid else {
                continue;
            };
            if event == EVENT_CONNECTED {
                self.monitor_up = true;
                self.note_connection(now, generation, value);
            }
            match event {
                EVENT_CONNECT_RETRIED if !self.connected => {
                    self.machine
                        .handle_input(now, Input::ConnectFailed { generation });
                    self.carry_out(now);
                }
                EVENT_DISCONNECTED if self.connected || self.monitor_up => {
                    // libzmq announces the close on the monitor before the application read
                    // what came ahead of it, and keeps that data and the in-band notification
                    // readable (docs/design.md, "Inbound at a close"). Read it all now,
                    // whatever the application's pace, and whether or not the connect
                    // notification was read yet (a link behind when the connection came up
                    // has not): the peer sends nothing more, and libzmq's pipe bounds what is
                    // left. A pipe left full at the close is one libzmq must not reuse
                    // ("libzmq's asserts within relink's reach"). The close is acted on
                    // behind the last byte, at the notification.
                    self.monitor_up = false;
                    self.read_socket_to_close(now);
                    if self.connected {
                        // No notification behind the data: with ZMQ_IMMEDIATE libzmq drops
                        // the pipe at the close, the notification with it; without, it was
                        // not flushed yet or found the pipe full. Everything readable was
                        // read: act on the monitor.
                        self.monitor_mismatch += u64::from(!self.immediate);
                        self.peer_gone(now, generation);
                    }
                }
                EVENT_CONNECTED | EVENT_DISCONNECTED => {
                    self.monitor_up &= event == EVENT_CONNECTED;
                    // Cross-check: the routing-id toggles are the source of truth; a monitor
                    // event that disagrees with them is counted and logged.
                    let says_up = event == EVENT_CONNECTED;
                    if says_up == self.connected {
                        continue;
                    }
                    self.monitor_mismatch += 1;
                    log::trace!(
                        "relink[{}]: monitor says {} before the stream notification",
                        self.machine.name(),
                        if says_up { "connected" } else { "disconnected" }
                    );
                }
                _ => {}
            }
        }
    }

    /// The connection of dial `generation` is gone: a last reading of the acknowledgements,
    /// then the machine hears of it.
    fn peer_gone(&mut self, now: Instant, generation: u64) {
        self.connected = false;
        self.last_acks(now);
        self.machine
            .handle_input(now, Input::Disconnected { generation });
        self.carry_out(now);
    }

    /// The monitor reported the connection of dial `generation` with its descriptor: keep it
    /// (and its addresses) to read the peer's acknowledgements from, if it is the dialled
    /// peer's; otherwise the machine confirms this connection's frames as they are written.
    fn note_connection(&mut self, now: Instant, generation: u64, fd: u32) {
        let conn = match (i32::try_from(fd), self.dialed) {
            // A kernel that does not report the count (before Linux 4.1) counts as unmatched.
            (Ok(fd), Some(peer)) => ffi::TcpConn::probe(fd, peer)
                .and_then(|mut c| c.bytes_acked().is_some().then_some(c)),
            _ => None,
        };
        log::trace!(
            "relink: connection descriptor {fd} of {:?}: {conn:?}",
            self.dialed
        );
        let unmatched = conn.is_none();
        self.conn = conn;
        if !self.machine.wants_acks() {
            // Nothing waits yet: the duplicate is taken again when frames do.
            if let Some(conn) = &mut self.conn {
                conn.release();
            }
        }
        if unmatched {
            self.machine
                .handle_input(now, Input::AcksUnavailable { generation });
            self.carry_out(now);
        }
    }

    /// Reads how many bytes the peer acknowledged, while frames wait for it and a reading is
    /// `due` (`Machine::reading_due`).
    pub(super) fn read_acks(&mut self, now: Instant, due: bool) {
        if !self.machine.wants_acks() {
            // Nothing waits (a write of control bytes only): the pass lets the duplicate
            // descriptor go at its end (`Slot::pass`).
            return;
        }
        if !due {
            return;
        }
        self.acks_read = true;
        let Some((_, generation)) = self.rid else {
            return;
        };
        let bytes = self.conn.as_mut().and_then(ffi::TcpConn::bytes_acked);
        self.machine
            .handle_input(now, Input::Acked { generation, bytes });
        self.carry_out(now);
    }

    /// The connection dropped: one last reading (the descriptor is our own duplicate, still
    /// open), so that only frames the peer really did not acknowledge are resent or reported;
    /// then the duplicate is closed.
    fn last_acks(&mut self, now: Instant) {
        self.read_acks(now, true);
        self.conn = None;
    }

    /// Reads up to the budget; returns true when the budget ran out before the input did.
    pub(super) fn read_socket(&mut self, now: Instant) -> bool {
        self.read_messages(now, Some(READ_BUDGET))
    }

    /// Reads everything the socket holds up to the current connection's disconnect
    /// notification (or until nothing is left), with no budget and whether or not the
    /// application keeps up: the connection is closed, so what is left is bounded.
    /// Frames that have to wait for the application wait at most `closed_frames_wait`.
    fn read_socket_to_close(&mut self, now: Instant) {
        self.sink.closing(now + self.closed_frames_wait);
        self.read_messages(now, None);
        self.sink.closed();
    }

    /// Reads up to `budget` messages (with none, until the connection's disconnect
    /// notification); with a budget, stops as soon as the application falls behind. Returns
    /// true when it stopped with input left (the budget ran out, or the notification was
    /// read).
    fn read_messages(&mut self, now: Instant, budget: Option<usize>) -> bool {
        let mut left = budget.unwrap_or(usize::MAX);
        while left > 0 {
            left -= 1;
            let rid = match self.socket.recv_msg(zmq::DONTWAIT) {
                Ok(m) => m,
                Err(zmq::Error::EAGAIN) => {
                    self.socket_quiet = true;
                    return false;
                }
                Err(e) => {
                    log::error!("relink[{}]: zmq recv failed: {e}", self.machine.name());
                    return false;
                }
            };
            self.socket_quiet = false;
            if !self.socket.get_rcvmore().unwrap_or(false) {
                continue;
            }
            let data = match self.socket.recv_msg(0) {
                Ok(m) => m,
                Err(e) => {
                    log::error!("relink[{}]: zmq recv failed: {e}", self.machine.name());
                    return false;
                }
            };
            let learn = self.immediate
                && !self.connected
                && data.is_empty()
                && self.learnt_rid.as_deref() != Some(&rid[..]);
            let generation = match &mut self.rid {
                Some((r, g)) if r.as_slice() == &rid[..] => *g,
                Some((r, g)) if learn => {
                    *r = super::Rid::new(&rid);
                    self.learnt_rid = Some(rid.to_vec());
                    *g
                }
                _ => {
                    log::trace!(
                        "relink[{}]: {} bytes from a stale connection dropped",
                        self.machine.name(),
                        data.len()
                    );
                    self.machine.stale_data(data.len());
                    continue;
                }
            };
            if data.is_empty() {
                // STREAM_NOTIFY: an empty frame toggles between connected and disconnected.
                self.connected = !self.connected;
                if self.connected {
                    self.machine
                        .handle_input(now, Input::Connected { generation });
                } else {
                    self.peer_gone(now, generation);
                    if budget.is_none() {
                        return true;
                    }
                }
            } else {
                if !self.acks_read {
                    // A reply (or garbage that fails the connection) comes after the peer's
                    // kernel acknowledged what it answers: a reading before the first frame of
                    // the pass confirms those frames before anything the reply causes.
                    self.read_acks(now, true);
                }
                self.machine.handle_data(now, generation, &data);
            }
            self.carry_out(now);
            if budget.is_some() && self.sink.is_behind() {
                return false;
            }
        }
        true
    }
}
