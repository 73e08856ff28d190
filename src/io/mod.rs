//! The IO side: the only code that calls libzmq, starts threads or reads the clock. It drives
//! the core and never decides policy.
//!
//! - [`answer`]: the one-shot cell a request's outcome goes into.
//! - [`worker`]: an IO thread's loop over its links: wait, decide which links to serve, serve
//!   them; the messages of the thread's channel and a link's way to it (`Route`).
//! - [`slot`]: one link as its IO thread holds it: translate what arrived into core inputs,
//!   carry out the core's actions.
//! - [`sink`]: a link's events on their way to the application, and what is dropped when it
//!   does not read them.
//! - [`snapshot`]: a link's `Metrics`, composed in one place from its sources.
//! - [`ids`]: link ids, and the hasher of the maps keyed by ids.
//! - [`pool`]: the IO threads links share.
//! - [`shared`]: the commands handles send and the state they share with the IO thread.
//! - [`intake`]: where a link's frames wait for its IO thread, and their admission.
//! - [`lane`]: a `Producer`'s single-producer ring, drained with the intake.
//! - [`sleep`]: the deadline of async waits, on any executor.
//! - [`look`]: a blocking receive looks for what it waits for before its thread sleeps.
//! - [`padded`]: a value on a cache line of its own.
//! - [`resolver`]: the resolver thread pool (names never block an IO thread).
//! - [`socket`]: the STREAM socket's options and the send of one batch.
//! - [`spool`]: a link's spool on disk, and the IO thread's ledger of its frames.
//! - [`buffers`]: batch buffers used again once libzmq is done with them.
//! - [`stopwatch`]: the clock around calls into application code.
//! - [`context`]: the libzmq context that links share.
//! - [`ffi`]: the raw libzmq and libc calls, the crate's only `unsafe` code.

pub(crate) mod answer;
mod buffers;
mod context;
#[allow(unsafe_code)]
mod ffi;
pub(crate) mod ids;
pub(crate) mod intake;
pub(crate) mod lane;
pub(crate) mod look;
mod padded;
pub(crate) mod pool;
mod resolver;
pub(crate) mod shared;
mod sink;
pub(crate) mod sleep;
pub(crate) mod slot;
mod snapshot;
mod socket;
pub(crate) mod spool;
mod stopwatch;
pub(crate) mod worker;

pub use context::{Context, MAX_SOCKETS};
pub use look::Looks;
pub use pool::IoPool;
pub(crate) use resolver::Resolver;
pub use socket::Keepalive;
pub use socket::{SocketOptions, CONNECT_TIMEOUT, LINGER, RCVHWM, RECONNECT_IVL, SNDHWM};
