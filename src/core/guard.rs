//! The guard around every call into application code: a panic is caught where the code is
//! called and comes back as a value, so it never unwinds through the IO loop or reaches another
//! link; and the call is timed, so that slow application code is named.
//!
//! The core reads no clock: a [`Stopwatch`] given by the IO side measures each call (the
//! core's tests give one that runs in simulated time).
//!
//! The process's panic hook still runs first (by default it prints the panic to stderr); the
//! guard only stops the unwinding. With `panic = "abort"` nothing can be caught.

use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::error::{Callback, LinkError};

/// A caught panic: what panicked, and its message when the payload is a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Panicked {
    pub callback: Callback,
    pub message: Option<String>,
}

impl Panicked {
    /// The error the application is told of.
    pub(crate) fn to_error(&self) -> LinkError {
        LinkError::CallbackPanicked {
            callback: self.callback,
            message: self.message.clone(),
        }
    }
}

/// Runs `f`, application code named `what`; a panic in it comes back as `Err`.
///
/// `AssertUnwindSafe` is sound here because whatever `f` borrows is either reset after a panic
/// (the caller treats it as a failure of the connection, which drops the per-connection state)
/// or belongs to the application.
pub(crate) fn guarded<T>(what: Callback, f: impl FnOnce() -> T) -> Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| Panicked {
        callback: what,
        message: panic_message(payload.as_ref()),
    })
}

/// Measures calls into application code; implemented by the IO side, which reads the clock
/// around the call.
pub(crate) trait Stopwatch: fmt::Debug + Send {
    /// Runs `f`, the callback `what`, and returns how long it took.
    fn time(&self, what: Callback, f: &mut dyn FnMut()) -> Duration;
}

/// No measurement: every call takes no time (a machine no IO side has given a stopwatch).
#[derive(Debug)]
pub(crate) struct Untimed;

impl Stopwatch for Untimed {
    fn time(&self, _: Callback, f: &mut dyn FnMut()) -> Duration {
        f();
        Duration::ZERO
    }
}

/// [`guarded`], timed by `watch`: the call's result (a panic caught as a value) and how long
/// it took. A call that panicked took no time that counts: the panic is reported as such, and
/// the panic hook's own time (a backtrace with `RUST_BACKTRACE=1` takes a hundred milliseconds)
/// is not the callback's.
pub(crate) fn timed<T>(
    watch: &dyn Stopwatch,
    what: Callback,
    f: impl FnOnce() -> T,
) -> (Result<T, Panicked>, Duration) {
    let mut f = Some(f);
    let mut out = None;
    let took = watch.time(what, &mut || {
        if let Some(f) = f.take() {
            out = Some(guarded(what, f));
        }
    });
    let out = out.unwrap_or_else(|| {
        // A stopwatch that did not run the call: treat it as a callback that failed.
        Err(Panicked {
            callback: what,
            message: Some("the call was not run".into()),
        })
    });
    let took = if out.is_err() { Duration::ZERO } else { took };
    (out, took)
}

/// The message of a panic payload, when it is a string (`panic!("literal")` gives a `&str`,
/// `panic!("{x}")` a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> Option<String> {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        Some((*s).to_string())
    } else {
        payload.downcast_ref::<String>().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_call_gives_its_value_and_the_stopwatch_s_reading() {
        #[derive(Debug)]
        struct Fixed;
        impl Stopwatch for Fixed {
            fn time(&self, _: Callback, f: &mut dyn FnMut()) -> Duration {
                f();
                Duration::from_millis(150)
            }
        }
        let (r, took) = timed(&Fixed, Callback::Decode, || 7);
        assert_eq!((r, took), (Ok(7), Duration::from_millis(150)));
        let (r, took) = timed(&Fixed, Callback::Decode, || -> u8 { panic!("boom") });
        assert_eq!(r.unwrap_err().message.as_deref(), Some("boom"));
        assert_eq!(
            took,
            Duration::ZERO,
            "a panic is reported as one, not as slow"
        );
    }

    #[test]
    fn a_call_that_returns_gives_its_value() {
        assert_eq!(guarded(Callback::Resolver, || 7), Ok(7));
    }

    #[test]
    fn a_literal_panic_gives_its_message() {
        let r: Result<(), _> = guarded(Callback::HeartbeatReply, || panic!("boom"));
        assert_eq!(
            r,
            Err(Panicked {
                callback: Callback::HeartbeatReply,
                message: Some("boom".into())
            })
        );
    }

    #[test]
    fn a_formatted_panic_gives_its_message() {
        let n = 3;
        let r: Result<(), _> = guarded(Callback::Protocol, || panic!("bad frame {n}"));
        assert_eq!(r.unwrap_err().message.as_deref(), Some("bad frame 3"));
    }

    #[test]
    fn a_panic_with_another_payload_has_no_message() {
        let r: Result<(), _> = guarded(Callback::Decode, || std::panic::panic_any(42_u32));
        assert_eq!(
            r,
            Err(Panicked {
                callback: Callback::Decode,
                message: None
            })
        );
    }

    #[test]
    fn the_error_names_the_callback_and_the_message() {
        let p = Panicked {
            callback: Callback::HeartbeatReply,
            message: Some("boom".into()),
        };
        assert_eq!(
            p.to_error().to_string(),
            "heartbeat reply predicate panicked: boom"
        );
        let p = Panicked {
            callback: Callback::Resolver,
            message: None,
        };
        assert_eq!(p.to_error().to_string(), "resolver panicked");
    }
}
