//! The IO side: the only code that calls libzmq, starts threads or reads the clock. It drives
//! the core and never decides policy.
//!
//! - [`answer`]: the one-shot cell a request's outcome goes into.
//! - [`event_loop`]: an IO thread's loop over its links: wait, translate what arrived into core
//!   inputs, carry out the core's actions.
//! - [`pool`]: the IO threads links share.
//! - [`shared`]: the commands handles send and the state they share with the IO thread.
//! - [`intake`]: where a link's frames wait for its IO thread, and their admission.
//! - [`timer`]: the deadline of async waits, on any executor.
//! - [`padded`]: a value on a cache line of its own.
//! - [`resolver`]: the resolver thread pool (names never block an IO thread).
//! - [`socket`]: the STREAM socket's options and the send of one batch.
//! - [`stopwatch`]: the clock around calls into application code.
//! - [`context`]: the libzmq context that links share.
//! - [`ffi`]: the raw libzmq and libc calls, the crate's only `unsafe` code.

pub(crate) mod answer;
mod context;
pub(crate) mod event_loop;
#[allow(unsafe_code)]
mod ffi;
pub(crate) mod intake;
mod padded;
pub(crate) mod pool;
mod resolver;
pub(crate) mod shared;
mod socket;
mod stopwatch;
mod timer;

pub use context::{Context, MAX_SOCKETS};
pub use pool::IoPool;
pub(crate) use resolver::Resolver;
pub use socket::Keepalive;
pub(crate) use socket::SocketOptions;
