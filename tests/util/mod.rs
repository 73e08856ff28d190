//! The test kit shared by the integration tests, one file per role:
//! - [`peers`]: scripted TCP peers on 127.0.0.1 (echo, sink, accept then close, silent, stop
//!   reading, close after some bytes, garbage, scripts, a burst of frames then a FIN or a
//!   reset) and free or refused ports;
//! - [`watch`]: the link-event watcher, the one way to wait for a transition and to print
//!   what was seen;
//! - [`wait`]: bounded waits for conditions with no event to wait on;
//! - [`payload`]: payloads a test can recognise again and decoders for what a peer received;
//! - [`checks`]: the accounting and delivery checks the fault scenarios end with;
//! - [`exec`]: a minimal executor for async tests that counts polls and wakes;
//! - [`redis`]: a `redis-server` child process;
//! - [`mosquitto`]: a `mosquitto` broker child process with a configuration of the test's;
//! - [`nats`]: a `nats-server` child process and a subscriber that outlives its restarts;
//! - [`slow`]: a slow reader (plain or TLS) killed with a reset, that counts what its kernel held
//!   unread;
//! - [`netns`]: network namespaces, processes inside them and a link built in one;
//! - [`pki`]: a throw-away PKI made with rcgen (also used by the crate's unit tests);
//! - [`tls`]: a TLS-only `redis-server`, in-process rustls servers and a plain rustls client;
//! - [`logs`]: the log lines the links of a test binary write, captured;
//! - [`proc`]: child processes (this test binary re-run as a peer) and the process-wide lock;
//! - [`source`]: the repository's own files (for the tests that check the docs);
//! - [`spool`]: scratch directories and a child that streams numbered frames through a spooled
//!   link until it is killed.
//!
//! Include with `mod util;` in a test file, then `use util::*;` or name what is used.
//!
//! Rules the kit keeps, so that tests cannot hang or leak:
//! - everything listens on 127.0.0.1 (or inside namespaces the kit creates);
//! - every blocking call has a timeout, and every wait takes a deadline;
//! - every thread a [`Peer`] starts stops when the peer is stopped or dropped (a stop flag,
//!   a stop channel, short socket timeouts and `shutdown` of the accepted sockets), and the
//!   join is bounded;
//! - waits block on a condition variable or a channel where there is an event to wait on;
//!   [`wait_for`] polls (every 2 ms) only where there is none.
// Each test binary uses a part of the kit.
#![allow(dead_code)]

pub mod checks;
pub mod exec;
pub mod logs;
pub mod mosquitto;
pub mod nats;
pub mod netns;
pub mod payload;
pub mod peers;
pub mod pki;
pub mod proc;
pub mod redis;
pub mod slow;
pub mod source;
pub mod spool;
pub mod tls;
pub mod wait;
pub mod watch;

// The kit's items by name (`util::Watch`); a test binary that uses none of a module's items
// leaves its re-export unused.
#[allow(unused_imports)]
pub use checks::*;
#[allow(unused_imports)]
pub use exec::*;
#[allow(unused_imports)]
pub use mosquitto::*;
#[allow(unused_imports)]
pub use nats::*;
#[allow(unused_imports)]
pub use payload::*;
#[allow(unused_imports)]
pub use peers::*;
#[allow(unused_imports)]
pub use proc::*;
#[allow(unused_imports)]
pub use redis::*;
#[allow(unused_imports)]
pub use wait::*;
#[allow(unused_imports)]
pub use watch::*;
