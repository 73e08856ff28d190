//! A link's [`Metrics`], composed in one place from its sources: the machine's counters, what
//! the IO thread counts beside them (events dropped, frames given back without reaching the
//! machine) and the frames refused at the call, which only the intake counts.
//!
//! The live snapshot is composed on the IO thread; the final one from the sources the IO
//! thread kept when it stopped, when it is read, so that frames refused after the close are
//! counted too.

use super::intake::Intake;
use crate::event::State;
use crate::metrics::Metrics;

/// What a snapshot is made of besides the frames refused at the call (read from the intake
/// when the snapshot is made).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sources {
    /// The machine's counters (`Machine::metrics`).
    pub machine: Metrics,
    /// Events dropped because the application did not take them.
    pub events_dropped: u64,
    /// Frames of closed connections the application did not take in time, and their bytes.
    pub unread: (u64, u64),
    /// Frames given back as abandoned (reason `Shutdown`) that never reached the machine:
    /// those still on their way when the link stopped outside its machine.
    pub given_back: u64,
    /// The IO thread let the link go: the state is Closed whatever the machine last said.
    pub stopped: bool,
}

impl Sources {
    /// The sources of a link whose machine said nothing: no counter, in `state`.
    pub(crate) fn empty(state: State) -> Sources {
        Sources {
            machine: Metrics::empty(state),
            events_dropped: 0,
            unread: (0, 0),
            given_back: 0,
            stopped: false,
        }
    }

    /// The snapshot, with the frames `intake` refused at the call so far.
    pub(crate) fn compose(&self, intake: &Intake) -> Metrics {
        let mut m = self.machine;
        if self.stopped {
            m.state = State::Closed;
        }
        m.events_dropped = self.events_dropped;
        (m.frames_unread, m.bytes_unread) = self.unread;
        let given_back = self.given_back + intake.given_back_late_total();
        m.frames_submitted += given_back;
        m.abandoned.shutdown += given_back;
        let rejected = intake.rejected_total();
        m.frames_submitted += rejected;
        m.frames_rejected += rejected;
        (
            m.frames_recovered,
            m.spool_bytes_cut,
            m.spool_frames_lost_at_most,
        ) = intake.recovered();
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Sources {
        let mut machine = Metrics::empty(State::Ready);
        machine.frames_submitted = 5;
        machine.frames_sent = 3;
        machine.frames_confirmed = 3;
        machine.outbox_frames = 2;
        machine.events_dropped = 7;
        Sources {
            machine,
            ..Sources::empty(State::Ready)
        }
    }

    #[test]
    fn frames_refused_at_the_call_count_as_submitted_and_rejected() {
        let intake = Intake::new(8, 1024);
        intake.rejected(4);
        let m = sources().compose(&intake);
        assert_eq!((m.frames_submitted, m.frames_rejected), (9, 4));
        assert_eq!(m.unaccounted(), 0);
    }

    #[test]
    fn frames_given_back_outside_the_machine_count_as_submitted_and_abandoned_at_shutdown() {
        let intake = Intake::new(8, 1024);
        let s = Sources {
            given_back: 3,
            ..sources()
        };
        let m = s.compose(&intake);
        assert_eq!((m.frames_submitted, m.abandoned.shutdown), (8, 3));
        assert_eq!(m.unaccounted(), 0);
    }

    #[test]
    fn a_stopped_link_says_closed_whatever_its_machine_last_said() {
        let intake = Intake::new(8, 1024);
        let s = Sources {
            stopped: true,
            ..sources()
        };
        assert_eq!(s.compose(&intake).state, State::Closed);
        assert_eq!(sources().compose(&intake).state, State::Ready);
    }

    #[test]
    fn the_events_dropped_are_the_slots_count_not_the_machines() {
        let intake = Intake::new(8, 1024);
        let s = Sources {
            events_dropped: 2,
            ..sources()
        };
        assert_eq!(s.compose(&intake).events_dropped, 2);
    }
}
