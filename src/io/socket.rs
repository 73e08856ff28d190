//! The STREAM socket's side of libzmq: the options a link sets before it connects, and the
//! send of one batch.

use std::time::Duration;

use super::ffi;
use crate::core::machine::TxResult;

/// Bound on one TCP connect (libzmq's ZMQ_CONNECT_TIMEOUT and relink's own timer).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// libzmq's ZMQ_RECONNECT_IVL.
pub const RECONNECT_IVL: Duration = Duration::from_millis(100);
/// libzmq's ZMQ_LINGER: how long a closed socket keeps trying to write.
pub const LINGER: Duration = Duration::from_millis(200);
/// libzmq's send high-water mark, in messages (each message is a batch of frames).
pub const SNDHWM: i32 = 64;
/// libzmq's receive high-water mark, in messages.
pub const RCVHWM: i32 = 64;

/// TCP keepalive, a kernel backstop: probes an idle connection and resets it when `count`
/// probes go unanswered.
///
/// Made with [`Keepalive::new`] and its setters; the fields can be read.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::Keepalive;
///
/// // First probe after 30 s idle, then every 5 s; reset after 3 unanswered.
/// let keepalive = Keepalive::new(Duration::from_secs(30))
///     .interval(Duration::from_secs(5))
///     .count(3);
/// assert_eq!(keepalive.idle, Duration::from_secs(30));
/// let builder = Link::builder("tcp://127.0.0.1:6379").socket(|s| s.keepalive = Some(keepalive));
/// # drop(builder);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is reset.
    pub count: u32,
}

impl Keepalive {
    /// Keepalive that sends its first probe after `idle` without traffic.
    ///
    /// The interval defaults to `idle / 3` (at least one second) and the count to 3.
    pub fn new(idle: Duration) -> Keepalive {
        Keepalive {
            idle,
            interval: (idle / 3).max(Duration::from_secs(1)),
            count: 3,
        }
    }

    /// Time between probes once probing started.
    pub fn interval(mut self, interval: Duration) -> Keepalive {
        self.interval = interval;
        self
    }

    /// Unanswered probes before the kernel resets the connection.
    pub fn count(mut self, count: u32) -> Keepalive {
        self.count = count;
        self
    }
}

/// libzmq's own options on the link's socket, set before it connects. Changed in place by [`Builder::socket`](crate::Builder::socket). Most links keep the defaults.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::config::SocketOptions;
///
/// // A policy kept as a function, for every link of a fleet.
/// fn fleet(s: &mut SocketOptions) {
///     s.connect_timeout = Duration::from_secs(2);
/// }
/// let link = Link::builder("tcp://127.0.0.1:7000").socket(fleet).build()?;
/// # link.close(Duration::ZERO);
/// # Ok::<(), relink::error::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SocketOptions {
    /// libzmq's ZMQ_RECONNECT_IVL: the gap of its own redial. Defaults to 100 ms. Not used
    /// with libzmq 4.3.2, where libzmq does not redial and relink takes every attempt (build.md,
    /// "Which libzmq").
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub reconnect_ivl: Duration,
    /// libzmq's ZMQ_RECONNECT_IVL_MAX (0: no growth). Defaults to 0.
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub reconnect_ivl_max: Duration,
    /// libzmq's ZMQ_IMMEDIATE. With `true`, libzmq never redials a STREAM endpoint after a
    /// drop, so relink always does. Needs libzmq 4.3.3 or newer: with 4.3.2, at the peer's
    /// close libzmq drops what it had received and relink had not read yet (at most its receive
    /// queue, [`SocketOptions::sndhwm`](crate::config::SocketOptions::sndhwm)'s `rcvhwm`
    /// messages), uncounted, so `build()` refuses it there (build.md, "Which libzmq").
    /// Defaults to false.
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub immediate: bool,
    /// Bound on a connection attempt, including name resolution (also given to libzmq as
    /// ZMQ_CONNECT_TIMEOUT). Defaults to 5 s.
    ///
    /// # Examples
    /// The socket group ([`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout),
    /// [`SocketOptions::immediate`](crate::config::SocketOptions::immediate), [`SocketOptions::reconnect_ivl`](crate::config::SocketOptions::reconnect_ivl),
    /// [`SocketOptions::reconnect_ivl_max`](crate::config::SocketOptions::reconnect_ivl_max), [`SocketOptions::linger`](crate::config::SocketOptions::linger),
    /// [`SocketOptions::sndhwm`](crate::config::SocketOptions::sndhwm), [`SocketOptions::keepalive`](crate::config::SocketOptions::keepalive),
    /// [`SocketOptions::tcp_maxrt`](crate::config::SocketOptions::tcp_maxrt)) is handed to libzmq and the kernel:
    /// ```
    /// use std::time::Duration;
    /// use relink::{Link, State};
    /// use relink::config::Keepalive;
    /// use relink::error::ConfigError;
    /// # use std::io::{Read, Write};
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let port = listener.local_addr()?.port();
    /// # std::thread::spawn(move || {
    /// #     let (mut s, _) = listener.accept().unwrap();
    /// #     let mut buf = [0u8; 1024];
    /// #     while let Ok(n) = s.read(&mut buf) {
    /// #         if n == 0 || s.write_all(&buf[..n]).is_err() { break; }
    /// #     }
    /// # });
    ///
    /// let link = Link::builder(&format!("tcp://127.0.0.1:{port}")) // a local echo server
    ///     .socket(|s| {
    ///         s.connect_timeout = Duration::from_secs(2);
    ///         s.immediate = false;
    ///         s.reconnect_ivl = Duration::from_millis(100);
    ///         s.reconnect_ivl_max = Duration::from_secs(1);
    ///         s.linger = Duration::from_millis(100);
    ///         s.sndhwm = 128;
    ///         s.rcvhwm = 128;
    ///         s.keepalive = Some(Keepalive::new(Duration::from_secs(30)));
    ///         s.tcp_maxrt = Some(Duration::from_secs(10));
    ///     })
    ///     .build()?;
    /// while link.state() != State::Ready {
    ///     link.events().recv_timeout(Duration::from_secs(5))?;
    /// }
    /// link.close(Duration::from_millis(100));
    ///
    /// // Checked once, in build(): libzmq's redial gap must not shrink as it grows.
    /// let bad = Link::builder("tcp://127.0.0.1:6379")
    ///     .socket(|s| {
    ///         s.reconnect_ivl = Duration::from_secs(1);
    ///         s.reconnect_ivl_max = Duration::from_millis(100);
    ///     })
    ///     .build();
    /// assert!(matches!(bad, Err(ConfigError::MaxBelowBase { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub connect_timeout: Duration,
    /// libzmq's ZMQ_LINGER, always bounded. Defaults to 200 ms.
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub linger: Duration,
    /// libzmq's send and receive high-water marks, in messages. Defaults to 64 and 64.
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub sndhwm: i32,
    /// Receive high-water mark in messages, ZMQ_RCVHWM: 64.
    pub rcvhwm: i32,
    /// TCP keepalive (kernel backstop for idle links). Defaults to the system's (off).
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub keepalive: Option<Keepalive>,
    /// TCP_USER_TIMEOUT (libzmq's ZMQ_TCP_MAXRT): unacknowledged data older than this resets
    /// the connection (kernel backstop for links that send). Defaults to the system's.
    ///
    /// See the example on [`SocketOptions::connect_timeout`](crate::config::SocketOptions::connect_timeout).
    pub tcp_maxrt: Option<Duration>,
}

impl Default for SocketOptions {
    fn default() -> SocketOptions {
        SocketOptions {
            reconnect_ivl: RECONNECT_IVL,
            reconnect_ivl_max: Duration::ZERO,
            immediate: false,
            connect_timeout: CONNECT_TIMEOUT,
            linger: LINGER,
            sndhwm: SNDHWM,
            rcvhwm: RCVHWM,
            keepalive: None,
            tcp_maxrt: None,
        }
    }
}

/// Sends `[rid, data]` without waiting. The data is taken when it is sent (`data` is left empty,
/// and keeps its capacity when the batch was copied: [`COPIED_MAX`]); when the socket
/// refuses the message at its routing id (EAGAIN, EHOSTUNREACH) `data` is left as it was, so
/// that bytes which cannot be made again (TLS records) can be offered again.
pub(super) fn send_batch(socket: &mut zmq::Socket, rid: &[u8], data: &mut Vec<u8>) -> TxResult {
    let classify = |e: zmq::Error| match e {
        zmq::Error::EAGAIN => TxResult::WouldBlock,
        zmq::Error::EHOSTUNREACH => TxResult::Unreachable,
        other => {
            log::warn!("relink: zmq send failed: {other}");
            TxResult::Unreachable
        }
    };
    if let Err(e) = socket.send(rid, zmq::SNDMORE | zmq::DONTWAIT) {
        // The data is still the caller's: it can be offered again as it is.
        return classify(e);
    }
    // Once the routing id is queued the data frame goes with it (libzmq checks the
    // high-water mark on a message's first frame); if it fails all the same, it is lost.
    let sent = if data.len() <= COPIED_MAX {
        // Copied into the message itself, and the buffer kept for the next batch.
        let sent = socket.send(&data[..], zmq::DONTWAIT);
        data.clear();
        sent
    } else {
        // Without a copy; the buffer comes back for a next batch when libzmq is done with it.
        super::ffi::send_owned(socket, std::mem::take(data), zmq::DONTWAIT)
    };
    match sent {
        Ok(()) => TxResult::Sent,
        Err(e) => classify(e),
    }
}

/// Batches of up to this many bytes (a heartbeat's ping, a short request) are copied into
/// their zmq message, where libzmq keeps them inside the message itself (its "very small
/// message", up to 33 bytes on a 64-bit target): no allocation, no buffer handed to libzmq's IO
/// thread and given back from it (`buffers`), and the link's buffer is written again next.
pub(super) const COPIED_MAX: usize = 33;

/// ZMQ_RECONNECT_STOP (libzmq 4.3.3 and newer, outside the draft API) and its bit that stops
/// libzmq's redial after a connection's handshake failed: for a STREAM socket, after any
/// connection that was up drops (`stream_engine_base.cpp`, `error`).
const ZMQ_RECONNECT_STOP: u32 = 109;
const RECONNECT_STOP_HANDSHAKE_FAILED: i32 = 0x2;

/// The oldest libzmq relink accepts: a link on an older one is refused at `build()`.
pub(super) const OLDEST_LIBZMQ: (i32, i32, i32) = (4, 3, 2);
/// The first libzmq with ZMQ_RECONNECT_STOP.
const RECONNECT_STOP_SINCE: (i32, i32, i32) = (4, 3, 3);

/// libzmq's ZMQ_RECONNECT_IVL under [`Guard::NoRedial`]: its largest value, about 24.8 days.
/// libzmq's redial timer is never due within a connection's life, and libzmq 4.3.2 keeps the
/// sum of the interval and its jitter within an `int` (`stream_connecter_base.cpp`).
const NO_REDIAL_IVL: i32 = i32::MAX;

/// How relink keeps libzmq from redialling a connection that was up, which can abort the
/// process (docs/design.md, "libzmq's asserts within relink's reach"). One per process, chosen
/// from the version of the libzmq in use ([`guard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Guard {
    /// libzmq 4.3.3 and newer: ZMQ_RECONNECT_STOP's HANDSHAKE_FAILED bit. A drop ends the
    /// session; a refused dial is still redialled by libzmq (`Reconnect::native_retries`).
    ReconnectStop,
    /// libzmq 4.3.2: ZMQ_RECONNECT_IVL at [`NO_REDIAL_IVL`], so libzmq redials nothing, neither
    /// a connection that dropped nor a refused dial (whose failure it still reports at once,
    /// CONNECT_RETRIED); relink dials every attempt itself, and the link's
    /// `SocketOptions::reconnect_ivl` and `Reconnect::native_retries` are not used.
    /// ZMQ_IMMEDIATE is refused: libzmq 4.3.2 drops a closed connection's unread bytes at
    /// its redial's start whatever the interval (`session_base_t::reconnect`).
    NoRedial,
}

/// The guard this process uses, decided at the first call from `zmq_version` and said once
/// in the log: at info for [`Guard::ReconnectStop`], at warn for [`Guard::NoRedial`]. An error
/// for a libzmq older than [`OLDEST_LIBZMQ`].
pub(super) fn guard() -> Result<Guard, String> {
    static GUARD: std::sync::OnceLock<Result<Guard, String>> = std::sync::OnceLock::new();
    GUARD
        .get_or_init(|| {
            let version = zmq::version();
            let result = guard_for(version);
            let (a, b, c) = version;
            match &result {
                Ok(Guard::ReconnectStop) => log::info!(
                    "relink: libzmq {a}.{b}.{c}: ZMQ_RECONNECT_STOP set, libzmq does not redial \
                     a connection that was up"
                ),
                Ok(Guard::NoRedial) => log::warn!(
                    "relink: libzmq {a}.{b}.{c} has no ZMQ_RECONNECT_STOP (4.3.3 and newer): \
                     libzmq's own redial is off (ZMQ_RECONNECT_IVL {NO_REDIAL_IVL} ms), relink \
                     dials every attempt itself, and ZMQ_IMMEDIATE is refused"
                ),
                Err(e) => log::error!("relink: {e}"),
            }
            result
        })
        .clone()
}

/// The guard for libzmq `version`.
fn guard_for(version: (i32, i32, i32)) -> Result<Guard, String> {
    if version < OLDEST_LIBZMQ {
        let ((a, b, c), (x, y, z)) = (version, OLDEST_LIBZMQ);
        Err(format!(
            "libzmq {a}.{b}.{c} is older than {x}.{y}.{z}, the oldest relink accepts (build.md)"
        ))
    } else if version < RECONNECT_STOP_SINCE {
        Ok(Guard::NoRedial)
    } else {
        Ok(Guard::ReconnectStop)
    }
}

pub(super) fn ms(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

/// Sets every libzmq option before the first connect (libzmq copies them at connect time) and
/// reads back those it can report.
/// Under [`Guard::NoRedial`] the redial interval is [`NO_REDIAL_IVL`] whatever `s` says, and a
/// link with `immediate` is refused (an error that says why).
pub(super) fn apply_options(
    socket: &mut zmq::Socket,
    s: &SocketOptions,
    guard: Guard,
) -> Result<(), String> {
    fn e(what: &'static str) -> impl Fn(zmq::Error) -> String {
        move |err| format!("{what}: {err}")
    }
    if guard == Guard::NoRedial && s.immediate {
        let (a, b, c) = zmq::version();
        return Err(format!(
            "immediate: libzmq {a}.{b}.{c} drops a closed connection's unread bytes with \
             ZMQ_IMMEDIATE, uncounted; it needs libzmq 4.3.3 or newer (ZMQ_RECONNECT_STOP)"
        ));
    }
    let reconnect_ivl = match guard {
        Guard::ReconnectStop => ms(s.reconnect_ivl),
        Guard::NoRedial => NO_REDIAL_IVL,
    };
    socket.set_linger(ms(s.linger)).map_err(e("linger"))?;
    socket
        .set_reconnect_ivl(reconnect_ivl)
        .map_err(e("reconnect_ivl"))?;
    socket
        .set_reconnect_ivl_max(ms(s.reconnect_ivl_max))
        .map_err(e("reconnect_ivl_max"))?;
    socket.set_immediate(s.immediate).map_err(e("immediate"))?;
    socket
        .set_connect_timeout(ms(s.connect_timeout))
        .map_err(e("connect_timeout"))?;
    socket.set_sndhwm(s.sndhwm).map_err(e("sndhwm"))?;
    socket.set_rcvhwm(s.rcvhwm).map_err(e("rcvhwm"))?;
    socket.set_ipv6(true).map_err(e("ipv6"))?;
    if let Some(k) = s.keepalive {
        socket.set_tcp_keepalive(1).map_err(e("tcp_keepalive"))?;
        socket
            .set_tcp_keepalive_idle(k.idle.as_secs().max(1) as i32)
            .map_err(e("tcp_keepalive_idle"))?;
        socket
            .set_tcp_keepalive_intvl(k.interval.as_secs().max(1) as i32)
            .map_err(e("tcp_keepalive_intvl"))?;
        socket
            .set_tcp_keepalive_cnt(k.count as i32)
            .map_err(e("tcp_keepalive_cnt"))?;
    }
    if let Some(d) = s.tcp_maxrt {
        ffi::set_int_option(socket, zmq_sys::ZMQ_TCP_MAXRT, ms(d)).map_err(e("tcp_maxrt"))?;
    }
    ffi::set_int_option(socket, zmq_sys::ZMQ_STREAM_NOTIFY, 1).map_err(e("stream_notify"))?;
    // libzmq never redials a connection that was up: relink ends such a connection itself at
    // its close and dials again its own way, and libzmq's redial would attach a new connection
    // to the closed one's pipe, where libzmq can abort the process (docs/design.md, "libzmq's
    // asserts within relink's reach") and where the peer's bytes would go past relink. For a
    // STREAM socket libzmq counts every drop as a failed handshake; refused dials still redial.
    // Under `Guard::NoRedial` the interval above keeps libzmq from redialling at all.
    if guard == Guard::ReconnectStop {
        ffi::set_int_option(socket, ZMQ_RECONNECT_STOP, RECONNECT_STOP_HANDSHAKE_FAILED)
            .map_err(e("reconnect_stop"))?;
    }

    let check = |name: &str, got: i32, want: i32| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{name} read back as {got}, set to {want}"))
        }
    };
    check(
        "linger",
        socket.get_linger().map_err(e("linger"))?,
        ms(s.linger),
    )?;
    check(
        "reconnect_ivl",
        socket.get_reconnect_ivl().map_err(e("reconnect_ivl"))?,
        reconnect_ivl,
    )?;
    check(
        "reconnect_ivl_max",
        socket
            .get_reconnect_ivl_max()
            .map_err(e("reconnect_ivl_max"))?,
        ms(s.reconnect_ivl_max),
    )?;
    check(
        "immediate",
        socket.is_immediate().map_err(e("immediate"))? as i32,
        s.immediate as i32,
    )?;
    check(
        "connect_timeout",
        socket.get_connect_timeout().map_err(e("connect_timeout"))?,
        ms(s.connect_timeout),
    )?;
    check(
        "sndhwm",
        socket.get_sndhwm().map_err(e("sndhwm"))?,
        s.sndhwm,
    )?;
    check(
        "rcvhwm",
        socket.get_rcvhwm().map_err(e("rcvhwm"))?,
        s.rcvhwm,
    )?;
    if let Some(k) = s.keepalive {
        check(
            "tcp_keepalive_cnt",
            socket
                .get_tcp_keepalive_cnt()
                .map_err(e("tcp_keepalive_cnt"))?,
            k.count as i32,
        )?;
    }
    if let Some(d) = s.tcp_maxrt {
        check(
            "tcp_maxrt",
            ffi::get_int_option(socket, zmq_sys::ZMQ_TCP_MAXRT).map_err(e("tcp_maxrt"))?,
            ms(d),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{guard_for, Guard};

    #[test]
    fn libzmq_before_4_3_3_gets_the_no_redial_guard_and_before_4_3_2_is_refused() {
        assert_eq!(guard_for((4, 3, 5)), Ok(Guard::ReconnectStop));
        assert_eq!(guard_for((4, 3, 3)), Ok(Guard::ReconnectStop));
        assert_eq!(guard_for((5, 0, 0)), Ok(Guard::ReconnectStop));
        assert_eq!(guard_for((4, 3, 2)), Ok(Guard::NoRedial));
        let old = guard_for((4, 3, 1)).unwrap_err();
        assert!(old.contains("4.3.1 is older than 4.3.2"), "{old}");
        assert!(guard_for((4, 2, 5)).is_err());
    }
}
