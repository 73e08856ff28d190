//! A long-lived raw-TCP client link that keeps itself alive.
//!
//! relink connects to any TCP server through libzmq's ZMQ_STREAM socket and keeps the
//! connection up: a jittered exponential backoff that spreads a fleet's reconnects, an
//! application heartbeat that notices half-open and stopped peers, a bounded outbox where every
//! frame ends in exactly one reported outcome, and a metrics snapshot that says what the link
//! is doing at any moment.
//!
//! # Quick start
//! ```
//! use std::io::{Read, Write};
//! use std::time::Duration;
//! use relink::{Event, Link, State};
//! use relink::framing::{Delimited, Lines, LengthDelimited, Raw, Resp, Framing};
//!
//! // A local echo server to talk to.
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let port = listener.local_addr()?.port();
//! std::thread::spawn(move || {
//!     let (mut s, _) = listener.accept().unwrap();
//!     let mut buf = [0u8; 1024];
//!     while let Ok(n) = s.read(&mut buf) {
//!         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
//!     }
//! });
//!
//! let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
//!     .framing(Lines::new())
//!     .build()?;
//! link.send(b"hello".to_vec())?; // queued until the link is Ready, then sent
//! loop {
//!     match link.events().recv_timeout(Duration::from_secs(5))? {
//!         Event::State(t) => println!("{} -> {} ({})", t.from, t.to, t.cause),
//!         Event::Frame(f) => { assert_eq!(f, &b"hello"[..]); break; }
//!         _ => {}
//!     }
//! }
//! assert_eq!(link.state(), State::Ready);
//! let m = link.close(Duration::from_secs(1));
//! assert_eq!(m.frames_sent, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Platforms
//! Linux only. relink builds and is tested on Linux (x86_64, glibc) with libzmq 4.3 or newer.
//! Other systems do not build: the IO thread is woken through a Linux `eventfd`, and the
//! kernel backstops rely on Linux socket options (`TCP_USER_TIMEOUT`, the keepalive
//! settings). On any other target the build stops with a `compile_error!` that says so.
//!
//! # In scope
//! - One client link per [`Link`] to one or several `tcp://host:port` servers speaking raw TCP,
//!   framed by any [`Framing`](framing::Framing): the public, sans-IO framing trait of the
//!   [`framing`] module, implemented by a type of your own or by a built-in —
//!   [`LengthDelimited`](framing::LengthDelimited) (width 1 to 8 bytes, either byte order,
//!   offset, adjustment, varint), [`Delimited`](framing::Delimited),
//!   [`Lines`](framing::Lines), [`Resp`](framing::Resp) (redis), [`Raw`](framing::Raw).
//!   Frames arrive as [`Bytes`](bytes::Bytes) cut from the receive buffer ([`bytes`] is
//!   re-exported). A heartbeat or handshake reply is always a whole decoded frame; with raw
//!   chunks `build()` refuses a reply predicate.
//! - Reconnection: libzmq's own redial for the first failures, then relink's backoff (full
//!   jitter by default), max attempts leading to a Cooldown that probes again, a flap guard
//!   (the attempt counter resets only after a connection proved alive and stable).
//! - Dead-peer detection: [`Heartbeat`] pings, handshake timeouts, TCP keepalive and
//!   TCP_USER_TIMEOUT as kernel backstops.
//! - Accounting: every frame given to [`Link::send`] is confirmed (by the peer's reply or its
//!   TCP), abandoned
//!   with a reason and handed back in an [`Event::Abandoned`], or refused at the call with the
//!   frame given back (see "Confirmed delivery" below).
//! - Frames in: every `send*` call of [`Link`], blocking or async, frame or [`Batch`], takes
//!   the same path (admission against the outbox limits, then the link's intake buffer, which
//!   the IO thread takes whole), with [`SendOptions`] for the wait and a per-frame deadline;
//!   frames are anything that converts into `bytes::Bytes`. A request goes through the same
//!   intake, between the frames, and is admitted by the requests' window in the IO thread; a
//!   [`Producer`] has rings of its own that the IO thread drains beside the intake.
//! - Names resolved off every IO thread; several endpoints tried in a per-link order.
//! - TLS on the link itself ([`Builder::tls`](crate::Builder::tls), [`Tls`]): a rustls session per connection
//!   between the socket's bytes and the framing, the server verified by default (trust roots,
//!   server name, optional client certificate for mutual TLS, ALPN). A failed handshake is a
//!   failed attempt with cause [`Cause::Tls`] and the reason in [`LinkError::Tls`](error::LinkError::Tls); there is
//!   never a plaintext fallback. One no retry can fix (the certificates) is
//!   [`Cause::TlsRejected`], retried at [`Reconnect::config_failure_retry`](crate::config::Reconnect::config_failure_retry)'s slow pace.
//! - Many links per IO thread: by default every link runs on [`IoPool::global`] (a thread per
//!   core); links given the same [`IoPool`] share its threads, and a link given
//!   `IoPool::new(1)` has one of its own. A budget per link per pass keeps a busy link from
//!   starving the others.
//! - Any program: blocking calls ([`Events::recv`], [`Link::close`]), their async twins woken by
//!   the IO thread on any executor ([`Events::recv_async`], [`Events`] as a
//!   `futures_core::Stream`, [`Link::send_async`], [`Link::close_async`]), [`Batch`] sends
//!   that hand many frames over in one call, a [`Producer`] ([`Link::producer`]) for one producer
//!   that hands each frame over at once without a locked instruction, and a buffered
//!   [`Writer`] ([`Link::writer`]) that copies frames from the caller's buffers and hands them
//!   over a batch at a time, as `BufWriter` writes. Dropping the last handle never waits.
//! - Request and reply ([`Link::request`] and [`Link::request_within`], each giving a
//!   [`Pending`] to wait for or await): replies matched to requests in order or by id
//!   ([`Correlation`](protocol::Correlation)), a deadline per request counted from the call, every request ended in
//!   exactly one outcome ([`RequestError`](error::RequestError)), requests outstanding at a drop resent or failed
//!   ([`Redelivery`]). See [Request and reply](#request-and-reply).
//!
//! - Fleets: a name per link in every log line ([`Builder::name`](crate::Builder::name)), one call for a whole pool
//!   ([`IoPool::view`]: links per state, summed counters, the worst links by name), PEM
//!   credentials read again when their files change ([`Tls::client_auth_files`]), the
//!   system's trust store ([`Tls::system_roots`]), and, with the cargo feature `metrics`, an
//!   export through the `metrics` crate's facade (`IoPool::export_metrics`).
//!
//! # Where things are
//! The crate root holds what a program names in ordinary use: the link ([`Link`],
//! [`Builder`], [`Events`], [`Event`] and the data it carries, [`Metrics`], [`Pending`],
//! [`Producer`], [`Writer`]), what
//! the builder takes ([`SendOptions`], [`Overflow`], [`Batch`], [`Heartbeat`], [`ProofOfLife`](config::ProofOfLife),
//! [`Correlation`](protocol::Correlation), [`Redelivery`], [`Tls`], [`Spool`], …) and [`IoPool`]. Every error type is in
//! [`error`]; the libzmq [`Context`](pool::Context) and a pool's view
//! ([`PoolView`](pool::PoolView)) are in [`pool`]; the framing trait and the built-ins in
//! [`framing`]; the builder's defaults in [`defaults`](config::defaults). Callbacks are plain closures.
//!
//! # Out of scope
//! - Servers (relink only dials).
//! - Delivery guarantees past the peer's application: confirmed by reply means the peer read
//!   the frame and answered it, not that it stored it (redis with `appendfsync always`
//!   does; a NATS server forwards to subscribers on its own time). Against a peer that answers
//!   nothing, confirmation stops at the peer's kernel.
//!
//! # Confirmed delivery
//! A frame is *confirmed* at one of two levels ([`Confirm`]), the protocol's by default:
//! - **By reply** ([`Confirm::reply`]; what [`Redis`](protocol::Redis) brings): the peer's
//!   application answered the frame, or a frame written after it (a peer that answers in
//!   order read every byte before). Each answer goes to the frame it answers
//!   ([`Protocol::replies`](protocol::Protocol::replies) says how many each gets; a push takes
//!   no turn), and what it says decides
//!   ([`Protocol::reply_kind`](protocol::Protocol::reply_kind)): run, an error given back
//!   beside its frame ([`Event::ErrorReply`]), or a refusal (redis' `-LOADING`), which is no
//!   confirmation: the frame is written again after a pause, or reported.
//! - **By TCP** ([`Confirm::tcp`], for a peer that answers nothing): the peer's kernel
//!   acknowledged the frame's last byte. relink writes (and encrypts) every byte of a
//!   connection, so it knows where each frame ends in the stream, and reads the peer's
//!   acknowledged count (`TCP_INFO`, Linux 4.1 or newer) while frames wait. A peer that dies
//!   with acknowledged bytes unread loses them, and the link cannot know.
//!
//! At most [`Delivery::window`](crate::config::Delivery::window) bytes (4 MiB by default) are
//! handed to the socket unconfirmed; the rest wait in the outbox, counted. When a connection
//! drops, its unconfirmed frames are written again first on the next one
//! ([`Redelivery::Resend`], the default: at-least-once), or each is handed back in an
//! [`Event::Abandoned`] with [`AbandonReason::Unconfirmed`] ([`Redelivery::Report`]:
//! at-most-once, "may have been received"). [`Link::close`] and [`Link::flush`] wait for the
//! confirmations until their deadline. [`Metrics::frames_confirmed`],
//! [`Metrics::frames_unconfirmed`], [`Metrics::frames_resent`], [`Metrics::frames_refused`] and
//! [`Metrics::oldest_unconfirmed`] show it; `frames_sent` counts hand-offs to the socket.
//!
//! All of that holds while the process lives. A [`Spool`] ([`Builder::spool`](crate::Builder::spool), opt-in) keeps
//! every frame on disk until it is confirmed, by a sync policy ([`Durability`]), and sends what
//! it holds first at the next start ([`Event::Recovered`]): at-least-once across the process's
//! own crash, each frame numbered ([`Link::send_numbered`]) so a receiver can drop a repeat.
//!
//! # States
//! A link is always in one [`State`]. The state machine changes it on an *input*: something
//! the IO thread saw (a connect, a close, bytes, a timer) or the application asked for.
//! Every change is emitted as an [`Event::State`] carrying a [`Transition`] with its [`Cause`];
//! [`Link::state`] and [`Metrics::state`] say where the link is now.
//!
#![doc = include_str!("../docs/transitions.md")]
//!
//! "failure" in the diagram is any of rows 3, 6, 7, 9–13 and 22: their causes are the ones
//! for which [`Cause::is_failure`] is true. An ignored pair shows in
//! [`Metrics::ignored_inputs`].
//!
//! # Examples
//! Following a link through its states: every transition names where it comes from, where it
//! goes and why.
//! ```
//! use std::time::Duration;
//! use relink::{Cause, Event, Link, State};
//!
//! # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! // Nobody listens on `port`: every dial is refused.
//! let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
//!     .reconnect(|r| {
//!         r.native_retries = 0;
//!         r.max_attempts = Some(2);
//!         r.backoff_base = Duration::from_millis(10);
//!         r.backoff_max = Duration::from_millis(50);
//!     })
//!     .build()?;
//! let mut seen = Vec::new();
//! while let Event::State(t) = link.events().recv_timeout(Duration::from_secs(5))? {
//!     seen.push((t.from, t.to, t.cause));
//!     if t.to == State::Cooldown { break; }
//! }
//! assert_eq!(seen[0], (State::Idle, State::Connecting, Cause::Start));            // row 1
//! assert!(seen.contains(&(State::Connecting, State::Backoff, Cause::Refused)));     // row 6
//! assert!(seen.contains(&(State::Backoff, State::Connecting, Cause::RetryTimer)));  // row 15
//! assert_eq!(seen.last(), Some(&(State::Connecting, State::Cooldown, Cause::Refused)));
//! link.close(Duration::from_millis(100));
//! assert_eq!(link.state(), State::Closed);                                          // row 18
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Application code that panics
//! relink calls the application's code on its own threads: the [`Predicate`](protocol::Predicate)s of a handshake
//! and of the heartbeat reply on the IO thread, the resolver ([`Builder::resolver`](crate::Builder::resolver)) on a resolver thread, and the
//! [`Framing`](framing::Framing) on the IO thread. A panic there is caught where the
//! code is called and treated as a failure of the connection: the application receives
//! [`Event::Error`] with [`LinkError::CallbackPanicked`](error::LinkError::CallbackPanicked) (`heartbeat reply predicate
//! panicked: boom`), then the transition to Backoff (or Cooldown) with cause
//! [`Cause::CallbackPanic`]; the link resets the connection, backs off and tries again, so the
//! backoff bounds a callback that panics every time. A resolver panic fails that dial the same
//! way. [`Metrics::callback_panics`] counts them. The panic never unwinds through the IO
//! thread and never reaches another link. The process's panic hook still runs first: by
//! default it prints the panic to stderr. (With `panic = "abort"` nothing can be caught.)
//!
//! Should the IO loop itself panic while serving a link (a bug in relink), that link is Closed,
//! and the other links of its IO thread carry on: [`Link::state`] and
//! the final [`Metrics`] say so, new sends are refused, and every blocked caller (`send` with
//! [`Overflow::Block`], [`Link::close`], [`Link::metrics`], event receivers) returns at once;
//! the event stream ends with [`LinkError::IoThreadPanicked`](error::LinkError::IoThreadPanicked).
//!
//! # Request and reply
//! A request is a frame whose reply the link matches to it and hands to its caller: in order,
//! where the link knows which frames the peer answers (a protocol whose
//! [`answers`](protocol::Protocol::answers) says it: [`RequestReply`](protocol::RequestReply)
//! for a peer that answers every frame, [`Redis`](protocol::Redis)), or by id
//! ([`Correlation::by_id`](protocol::Correlation::by_id)). Elsewhere (a framing alone) a
//! request is refused at the call ([`RequestError::AnswersUnknown`](error::RequestError::AnswersUnknown)):
//! the answer to a frame given to `send` could be taken for its reply.
//! ```
//! use std::time::Duration;
//! use relink::framing::Lines;
//! use relink::Link;
//! use relink::protocol::RequestReply;
//! use relink::error::RequestError;
//! # use std::io::{BufRead, BufReader, Write};
//! # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! # let port = listener.local_addr()?.port();
//! # std::thread::spawn(move || {
//! #     let (s, _) = listener.accept().unwrap();
//! #     let mut w = s.try_clone().unwrap();
//! #     for line in BufReader::new(s).lines().map_while(Result::ok) {
//! #         if line.starts_with("slow") { std::thread::sleep(Duration::from_millis(300)); }
//! #         if w.write_all(format!("re {line}\n").as_bytes()).is_err() { break; }
//! #     }
//! # });
//!
//! // The server on `port` answers each line `L` with `re L`, a `slow` one after 300 ms.
//! let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
//!     .framing(Lines::new())
//!     .protocol(RequestReply) // the peer answers every line, in order
//!     .build()?;
//! assert_eq!(link.request("hello").wait()?, &b"re hello"[..]); // connected, answered
//! let slow = link.request_within("slow", Duration::from_millis(50));
//! let next = link.request("next");
//! assert_eq!(slow.wait(), Err(RequestError::TimedOut));
//! // The late reply to "slow" is dropped: "next" gets its own.
//! assert_eq!(next.wait()?, &b"re next"[..]);
//! assert_eq!(link.close(Duration::from_secs(1)).replies_late, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//! In order, a request that timed out keeps its place until its late reply, which is consumed
//! and counted ([`Metrics::replies_late`]); by id ([`Correlation::by_id`](protocol::Correlation::by_id)), a reply whose id
//! nobody waits for is. The answers to frames given to `send` confirm them and are consumed
//! (counted in [`Metrics::answers_consumed`]); frames that are no reply (RESP3 pushes with
//! [`Correlation::resp`](protocol::Correlation::resp), a greeting) are [`Event::Frame`]s. The window of
//! outstanding requests ([`Requests::limit_frames`](crate::config::Requests::limit_frames)) is the pipelining depth, under the
//! link's [`Overflow`] policy. A connection lost with requests outstanding resends them first
//! on the next one, after its hello ([`Redelivery::Resend`]), or fails them as "may have been
//! processed" ([`Redelivery::Report`], the default). A close waits (until its timeout) for the
//! replies outstanding; the requests left end as `Abandoned(Shutdown)`.

//! # Pauses of the process and slow callbacks
//! A heartbeat judges the peer on silence, so it must not count the time relink itself was not
//! listening. Each IO thread measures its own lateness: how long past the deadline it slept to
//! it woke, and how long its last pass over its links took. When the two together reach 50 ms
//! (the process was stopped by SIGSTOP, a VM pause, a CPU quota or a debugger, or a callback
//! held the thread), every link of the thread is told before anything is read or any timer
//! fires. What already arrived is read first; a verdict that was due, or would come within an
//! interval, becomes a fresh chance: a ping at once and a full `interval × (max_missed + 1)`
//! from the resume (the handshake, TLS handshake and connect bounds likewise get their full
//! length again). So a pause condemns no healthy peer, and a dead one is still found within
//! the pause plus one bound. Frame deadlines ([`SendOptions::ttl`], [`Delivery::frame_ttl`](crate::config::Delivery::frame_ttl))
//! stay absolute: a frame that got stale in a pause is stale. [`Metrics::verdicts_deferred`]
//! counts the fresh chances, and the thread says at warn how late it was and why (a named slow
//! callback, or "the process got no CPU").
//!
//! Application code on an IO thread (the framing, the reply and handshake predicates) holds
//! every link of that thread while it runs: their pings are not sent and their replies not
//! read. Their peers are not condemned for it (the gap gives them a fresh chance), but their
//! frames wait as long. Every such call is timed (with the coarse monotonic clock, a few
//! nanoseconds a reading; the encodes of one batch together); one that takes [`Builder::slow_callback`](crate::Builder::slow_callback) (100 ms by default) or more
//! is logged at warn with the link, the callback and the time, counted in
//! [`Metrics::slow_callbacks`] and [`Metrics::slowest_callback`], and reported as
//! [`Event::Error`] with [`LinkError::SlowCallback`](error::LinkError::SlowCallback) (the line and the event at most once per
//! link per 10 s). A slow resolver ([`Builder::resolver`](crate::Builder::resolver)) runs on a resolver thread and delays only its own
//! link's dial; it is reported the same way.
//!
//! # Architecture
//! A [`Link`] is a crossbeam sender of commands to an IO thread plus that thread's eventfd. An
//! IO thread of an [`IoPool`] serves many links (by default those of [`IoPool::global`], a
//! thread per core) or one (a pool of one thread given to one link): it owns each link's ZMQ_STREAM socket and monitor and is the only code that calls
//! zmq or reads the clock. Everything else (state machine, backoff, heartbeat, outbox,
//! framing) is a pure core that takes `now` as an argument and returns its next deadline, so every
//! timer is tested in simulated time. Links share one libzmq context per process by default.
//!
//! The source tree shows the layers; imports run one way, from the public face to `io` to
//! `core`, and nothing in `core` names the IO side or the face (`core/mod.rs` says the rule;
//! `tests/claims.rs` checks that this map names every module and nothing else):
//! ```text
//! the face (public types, the handle, the builder)
//!   lib.rs                crate docs and re-exports
//!   link.rs               Link, the handle: every method of it
//!   link/send.rs          one send* call through the link's intake
//!   link/producer.rs      Producer: one producer thread's rings
//!   link/writer.rs        Writer: frames copied into a batch of its own
//!   receiver.rs           Events, the receiving end of a link's events
//!   pending.rs            Pending, a request's outcome on its way
//!   send.rs               SendOptions
//!   builder.rs            Builder, its defaults (`config::defaults`)
//!   builder/groups.rs     Reconnect, Delivery, Requests: the builder's groups
//!   builder/check.rs      the checks build() makes
//!   event.rs, error.rs, metrics.rs   plain data every layer uses
//!   spool.rs, tls.rs      Spool and Durability, Tls: public settings
//!   tls/provider.rs       the rustls crypto provider (ring's, from rustls' public parts)
//!   view.rs, export.rs    a pool's view and its `metrics` export
//! io (the only code that calls libzmq, starts threads or reads the clock)
//!   io/mod.rs             the rule and the parts
//!   io/pool.rs            IoPool: IO threads links share
//!   io/worker.rs          an IO thread's loop over its links
//!   io/slot.rs            one link as its IO thread holds it (slot: its place on the thread)
//!   io/slot/input.rs      what arrives for a link: monitor events, socket messages
//!   io/socket.rs          SocketOptions and the STREAM socket's sends
//!   io/context.rs         the libzmq context links share
//!   io/ffi.rs             the only unsafe code
//!   io/shared.rs          what handles and IO threads share (commands, the eventfd wake)
//!   io/intake.rs          where handles' frames and requests wait for the IO thread
//!   io/lane.rs            a producer's lane: its single-producer rings
//!   io/sink.rs            where a link's events go: the bounded events channel
//!   io/answer.rs          the one-shot cell of a request's or a flush's outcome
//!   io/look.rs            a thread's look for a reply due soon before it sleeps
//!   io/sleep.rs           the process-wide thread that ends async waits at their deadline
//!   io/snapshot.rs        a link's Metrics, composed
//!   io/stopwatch.rs       the clock around calls into application code
//!   io/resolver.rs        name resolution off every IO thread
//!   io/buffers.rs         batch buffers used again
//!   io/ids.rs             link ids, request tokens
//!   io/padded.rs          a value on a cache line of its own
//!   io/spool.rs           the spool on disk: segments, acks, numbers, the lock
//!   io/spool/ledger.rs    which frame the machine holds under which number
//!   io/spool/record.rs    records checked by CRC-32C; segment seals
//!   io/spool/marks.rs     what a run says of itself for the next start
//!   io/spool/stage.rs     the mapped stage records wait in before a segment
//! core (sans-IO policy: no socket, no clock, no thread)
//!   core/mod.rs           the rule and the parts
//!   core/machine.rs       the state machine and its transition table
//!   core/machine/dial.rs, connection.rs, delivery.rs (its Backlog), flushes.rs, outage.rs,
//!     callbacks.rs, receive.rs, transmit.rs   the machine's parts, each a type of its own
//!   core/protocol.rs      Protocol: the peer's language
//!   core/redis.rs         the built-in Redis protocol
//!   core/framing/mod.rs   Framing and its built-ins: counted.rs, delimited.rs, length.rs,
//!     raw.rs, resp.rs, reply.rs
//!   core/confirm.rs       Confirm, Answers, the turns in which answers come
//!   core/window.rs        frames written and not yet confirmed
//!   core/outbox.rs        frames waiting for a Ready connection
//!   core/requests.rs      Correlation and the window of outstanding requests
//!   core/batch.rs         Batch: many frames in one buffer
//!   core/heartbeat.rs, backoff.rs, timers.rs, predicate.rs, overflow.rs, abandon.rs,
//!     counters.rs, settings.rs, guard.rs, endpoint.rs, addresses.rs (endpoint order and
//!     DNS cache), tls.rs (the session of one connection)
//! ```
//! A few words are the crate's own, each for a thing the field has no word for: a *slot* is a
//! link's place on its IO thread; a *lane* a producer's ring; the *intake* where handles
//! hand frames to the IO thread; the *sink* where events leave it; a *look* a waiting thread's
//! short check for a reply before it sleeps; a *turn* the place of an answer in the order the
//! peer answers; the *stage* the spool's mapped buffer; the *ledger* the spool's numbers of
//! the frames in flight.
#![warn(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "relink supports Linux only: it wakes its IO thread through a Linux eventfd and relies on \
     Linux socket options (TCP_USER_TIMEOUT); see build.md, \"Platforms\""
);

mod builder;
mod core;
pub mod error;
mod event;
#[cfg(feature = "metrics")]
mod export;
mod io;
mod link;
mod metrics;
mod pending;
mod receiver;
mod send;
mod spool;
mod tls;
mod view;

pub use crate::core::batch::Batch;
pub use crate::core::confirm::Confirm;
pub use crate::core::framing;
pub use crate::core::heartbeat::Heartbeat;
pub use crate::core::window::Redelivery;
pub use builder::{Builder, Overflow};
/// The `bytes` crate, whose [`Bytes`](bytes::Bytes) carries received frames and whose
/// [`BytesMut`](bytes::BytesMut) is the receive buffer a [`Framing`](framing::Framing)
/// decodes from.
pub use bytes;
pub use event::{AbandonReason, Cause, Event, State, Transition};
pub use io::IoPool;
pub use link::{Link, Producer, Writer};
pub use metrics::{Abandoned, Metrics};
pub use pending::Pending;
pub use receiver::Events;
pub use send::SendOptions;
pub use spool::{Durability, Spool};
pub use tls::Tls;

pub mod protocol {
    //! The peer's language: a [`Protocol`] is one value that says how the peer frames its
    //! bytes, what opens a connection, which frames the peer answers and how many answers
    //! each gets, what an answer says of its frame, its ping and pong, how replies match
    //! requests, and what confirms a frame. [`Redis`] is built in, and [`RequestReply`] for a
    //! peer that answers every frame, in order; a protocol of one's own implements the trait
    //! ([`Handshake`] is the simplest that waits for the peer).
    //!
    //! # Examples
    //! ```
    //! use std::time::Duration;
    //! use relink::protocol::Redis;
    //! use relink::Link;
    //!
    //! // RESP framing, a PING every second, every write confirmed by its reply, requests
    //! // matched in order with pushes kept apart: all from the one value.
    //! let link = Link::builder("127.0.0.1:6379").protocol(Redis::new()).build()?;
    //! # link.close(Duration::ZERO);
    //! # Ok::<(), relink::error::ConfigError>(())
    //! ```
    pub use crate::core::confirm::Answers;
    pub use crate::core::heartbeat::Ping;
    pub use crate::core::predicate::Predicate;
    pub use crate::core::protocol::{
        Handshake, Opening, Protocol, Reaction, Replies, ReplyKind, RequestReply, Verdict,
    };
    pub use crate::core::redis::Redis;
    pub use crate::core::requests::Correlation;
}

pub mod config {
    //! The builder's groups of settings, each a value with one `Default` (the builder's
    //! defaults), changed in place with its own setters:
    //! [`Builder::reconnect`](crate::Builder::reconnect) ([`Reconnect`]),
    //! [`Builder::delivery`](crate::Builder::delivery) ([`Delivery`]),
    //! [`Builder::requests`](crate::Builder::requests) ([`Requests`]) and
    //! [`Builder::socket`](crate::Builder::socket) ([`SocketOptions`]); the values their
    //! fields take ([`Jitter`], [`Keepalive`], [`ProofOfLife`], [`Looks`]); and every default
    //! as a constant ([`defaults`]).
    pub use crate::builder::{defaults, Delivery, Reconnect, Requests, SocketOptions};
    pub use crate::core::backoff::Jitter;
    pub use crate::core::settings::ProofOfLife;
    pub use crate::io::{Keepalive, Looks};
}

pub mod pool {
    //! The IO threads links share, the libzmq context under them, and what a pool says about
    //! its links.
    //!
    //! An [`IoPool`] (also at the crate root) runs the IO threads; [`Context`] is the libzmq
    //! context a link's socket is made in, for a process that keeps several apart. A
    //! [`PoolView`] ([`IoPool::view`]) sums up every link of a pool at once: links per state
    //! ([`StateCounts`]), counters summed ([`Totals`]), and the worst links by name
    //! ([`LinkSummary`]). With the cargo feature `metrics`, `MetricsExporter` (from
    //! `IoPool::export_metrics`) hands a pool's figures to the `metrics` crate's facade, described
    //! by a `MetricsExport`.
    //!
    //! # Examples
    //! ```
    //! use std::time::Duration;
    //! use relink::pool::{Context, IoPool, PoolView, StateCounts};
    //! use relink::{Link, State};
    //!
    //! # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    //! let pool = IoPool::new(1)?;
    //! let ctx = Context::with_max_sockets(30)?; // room for ten links
    //! // Nobody listens on `port`: the link keeps trying.
    //! let link = Link::builder(&format!("tcp://127.0.0.1:{port}"))
    //!     .io_pool(&pool)
    //!     .context(&ctx)
    //!     .build()?;
    //! let view: PoolView = pool.view(5);
    //! let states: StateCounts = view.states;
    //! assert_eq!(view.links, 1);
    //! assert_eq!(states.get(State::Ready), 0);
    //! link.close(Duration::from_millis(50));
    //! # Ok::<(), Box<dyn std::error::Error>>(())
    //! ```

    #[cfg(feature = "metrics")]
    pub use crate::export::{MetricsExport, MetricsExporter};
    pub use crate::io::{Context, IoPool};
    pub use crate::view::{LinkSummary, PoolView, StateCounts, Totals};
}

/// Hooks for relink's own tests, with the `test-hooks` feature only (which only relink's
/// dev-dependency on itself enables): not part of the API.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks {
    /// Makes the link's IO thread panic, as a bug in relink would: for tests of what the
    /// handles see when the IO thread stops.
    pub fn panic_io_thread(link: &crate::Link) {
        link.panic_io_thread();
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (docs/guide.md), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct GuideDoctests;
