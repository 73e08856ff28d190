//! The core: the policy of one link, pure and sans-IO.
//!
//! **Rule: nothing in `core` names the IO side** — no socket, no FFI, no resolver thread, no
//! clock (time comes in as `now`), no global random generator (the generator is seeded per
//! link). It may use the plain data types of the crate root (`event`, `error`, `metrics`) and
//! nothing else outside `core` (its tests may use the public face).
//!
//! - [`machine`]: the state machine and its transition table; inputs in, actions out.
//! - [`timers`]: the timer table, one deadline per kind of timer.
//! - [`addresses`]: the per-link endpoint order and the DNS cache.
//! - [`counters`]: every frame's outcome and connection event, for the metrics.
//! - [`backoff`]: the jittered exponential delay policy ([`Jitter`](backoff::Jitter)).
//! - [`heartbeat`]: when to ping and when a silent connection is dead.
//! - [`confirm`]: what confirms a frame, which frames the peer answers, and the turns in
//!   which answers come.
//! - [`outbox`]: frames waiting for a Ready connection.
//! - [`tls`]: the TLS session of one connection (rustls, sans-IO), between the socket's
//!   bytes and the framing.
//! - [`framing`]: the [`Framing`](framing::Framing) trait and the built-in framings.
//! - [`endpoint`]: `tcp://host:port`, parsed.
//! - [`protocol`]: the [`Protocol`](protocol::Protocol) trait: the peer's language (its
//!   framing, opening, answers, ping, confirmation).
//! - [`redis`]: the built-in redis protocol.
//! - [`predicate`]: a shareable test on a frame (handshake and heartbeat replies).
//! - [`settings`]: what the core is told, built once by the builder, and the proof of life.
//! - [`requests`]: request and reply: which request an inbound frame answers.
//! - [`batch`]: [`Batch`](batch::Batch), many frames in one buffer.
//! - [`abandon`]: why a frame was never handed to the socket ([`AbandonReason`](abandon::AbandonReason)).
//! - [`overflow`]: what `send` does at the outbox's limit ([`Overflow`](overflow::Overflow)).
//! - [`window`]: frames written on the current connection and not yet confirmed, and what
//!   a drop does to them ([`Redelivery`](window::Redelivery)).
//! - [`guard`]: the guard around every call into application code (a panic becomes a value;
//!   the time it took is measured by a stopwatch the IO side gives).

pub(crate) mod abandon;
mod addresses;
pub(crate) mod backoff;
pub(crate) mod batch;
pub(crate) mod confirm;
mod counters;
pub(crate) mod endpoint;
pub mod framing;
pub(crate) mod guard;
pub(crate) mod heartbeat;
pub(crate) mod machine;
mod outbox;
pub(crate) mod overflow;
pub(crate) mod predicate;
pub(crate) mod protocol;
pub(crate) mod redis;
pub(crate) mod requests;
pub(crate) mod settings;
mod timers;
pub(crate) mod tls;
pub(crate) mod window;

pub(crate) use addresses::fmt_addr;
