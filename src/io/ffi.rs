//! The only `unsafe` code of the crate: the libzmq calls rust-zmq 0.9 does not wrap (among
//! them a send whose buffer comes back to relink when libzmq frees it), libc's
//! `srand`, the eventfd that wakes an IO thread and the epoll set it waits on, and the shared
//! mapping of a spool's stage file.
//!
//! Each block says why it is sound. Nothing here holds policy; the IO module decides what to call.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::raw::{c_int, c_void};
use std::sync::Once;

/// A shared, writable mapping of `len` bytes of `file` from `offset`: what the caller writes
/// there is in the kernel's page cache at once, so it outlives this process.
///
/// For a spool's `stage` file only: the caller holds the spool directory's `LOCK` (`flock`),
/// has already set the file's length to at least `offset + len` and reserved its blocks, and
/// never changes the file's length.
pub(super) fn map_file(
    file: &std::fs::File,
    offset: u64,
    len: usize,
) -> std::io::Result<memmap2::MmapMut> {
    // SAFETY: the mapping stays valid while it lives (no access past the file's end, no
    // SIGBUS) because nothing shrinks the file under it: the file is the stage of a spool
    // directory held with the LOCK file's flock, so no other relink process opens it, and this
    // process never changes its length after reserving `offset + len` bytes of it (before the
    // call, so a write into the mapping never needs a block the disk lacks). The bytes are
    // plain data read and written through the `MmapMut` only.
    unsafe {
        memmap2::MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_mut(file)
    }
}

/// A raw libzmq context: rust-zmq 0.9's `Context` hides its pointer, and relink needs it to raise
/// `ZMQ_MAX_SOCKETS` (a thousand monitored links need three thousand sockets).
#[derive(Debug)]
pub(super) struct RawContext {
    ptr: *mut c_void,
}

// SAFETY: a libzmq context is thread-safe by libzmq's contract (zmq_ctx_new(3): "contexts are
// thread safe"); the pointer is only passed to libzmq.
unsafe impl Send for RawContext {}
// SAFETY: as above; every libzmq context function may be called from any thread.
unsafe impl Sync for RawContext {}

impl RawContext {
    /// A new context that allows `max_sockets` sockets.
    pub(super) fn new(max_sockets: u32) -> Result<RawContext, zmq::Error> {
        // SAFETY: zmq_ctx_new has no preconditions; a null return is handled.
        let ptr = unsafe { zmq_sys::zmq_ctx_new() };
        if ptr.is_null() {
            return Err(last_error());
        }
        let ctx = RawContext { ptr };
        let value = c_int::try_from(max_sockets).unwrap_or(c_int::MAX);
        // SAFETY: ptr is a live context owned by `ctx`; ZMQ_MAX_SOCKETS takes an int value.
        let rc = unsafe { zmq_sys::zmq_ctx_set(ctx.ptr, zmq_sys::ZMQ_MAX_SOCKETS as c_int, value) };
        if rc != 0 {
            return Err(last_error());
        }
        Ok(ctx)
    }

    /// A new socket of this context, wrapped so that rust-zmq closes it on drop.
    ///
    /// The socket must be dropped before the context (the IO thread drops its sockets, then its
    /// `Arc` of the context).
    pub(super) fn socket(&self, kind: zmq::SocketType) -> Result<zmq::Socket, zmq::Error> {
        let raw = match kind {
            zmq::STREAM => zmq_sys::ZMQ_STREAM,
            zmq::PAIR => zmq_sys::ZMQ_PAIR,
            _ => return Err(zmq::Error::EINVAL),
        };
        // SAFETY: self.ptr is a live context (it is only terminated in Drop).
        let sock = unsafe { zmq_sys::zmq_socket(self.ptr, raw as c_int) };
        if sock.is_null() {
            return Err(last_error());
        }
        // SAFETY: `sock` is a fresh socket that nothing else owns; rust-zmq closes it once.
        Ok(unsafe { zmq::Socket::from_raw(sock) })
    }
}

impl Drop for RawContext {
    fn drop(&mut self) {
        // SAFETY: the context is live and dropped once; every socket made from it was closed
        // first (see `socket`), so termination does not wait on any of ours.
        unsafe {
            while zmq_sys::zmq_ctx_term(self.ptr) == -1 && zmq_sys::zmq_errno() == libc::EINTR {}
        }
    }
}

fn last_error() -> zmq::Error {
    // SAFETY: zmq_errno only reads the calling thread's errno.
    zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() })
}

/// Sets an int socket option that rust-zmq 0.9 has no setter for.
pub(super) fn set_int_option(socket: &mut zmq::Socket, option: u32, value: i32) -> zmq::Result<()> {
    let value: c_int = value;
    // SAFETY: the socket pointer is live for the borrow; the value points to a c_int of the
    // size passed, which libzmq copies before returning.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            socket.as_mut_ptr(),
            option as c_int,
            (&value as *const c_int).cast(),
            std::mem::size_of::<c_int>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}

/// Reads an int socket option that rust-zmq 0.9 has no getter for.
pub(super) fn get_int_option(socket: &mut zmq::Socket, option: u32) -> zmq::Result<i32> {
    let mut value: c_int = 0;
    let mut size = std::mem::size_of::<c_int>();
    // SAFETY: the socket pointer is live; value and size are valid for writes of their size.
    let rc = unsafe {
        zmq_sys::zmq_getsockopt(
            socket.as_mut_ptr(),
            option as c_int,
            (&mut value as *mut c_int).cast(),
            &mut size,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(last_error())
    }
}

/// Sets a bytes socket option (ZMQ_CONNECT_ROUTING_ID).
pub(super) fn set_bytes_option(
    socket: &mut zmq::Socket,
    option: u32,
    value: &[u8],
) -> zmq::Result<()> {
    // SAFETY: the socket pointer is live; value is valid for reads of its length and libzmq
    // copies it before returning.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            socket.as_mut_ptr(),
            option as c_int,
            value.as_ptr().cast(),
            value.len(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}

/// Stops a socket's monitor (`zmq_socket_monitor(s, NULL, 0)`), which must happen before the
/// monitor's PAIR socket is closed (libzmq #3575).
pub(super) fn stop_monitor(socket: &mut zmq::Socket) {
    // SAFETY: the socket pointer is live; a null address is libzmq's documented way to stop.
    unsafe {
        zmq_sys::zmq_socket_monitor(socket.as_mut_ptr(), std::ptr::null(), 0);
    }
}

/// Seeds the C library's `rand()`, which libzmq draws its reconnect jitter and routing ids from
/// and never seeds itself. Done once per process.
pub(super) fn seed_libc_rand_once(seed: u32) {
    static SEEDED: Once = Once::new();
    SEEDED.call_once(|| {
        // SAFETY: srand only stores the seed; it is called once, before relink starts any
        // libzmq socket.
        unsafe { libc::srand(seed) }
    });
}

/// An eventfd that another thread writes to wake the IO thread out of its epoll wait.
#[derive(Debug)]
pub(super) struct EventFd {
    fd: c_int,
}

impl EventFd {
    pub(super) fn new() -> std::io::Result<EventFd> {
        // SAFETY: eventfd has no memory preconditions; a negative return is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(EventFd { fd })
        }
    }

    pub(super) fn raw(&self) -> c_int {
        self.fd
    }

    /// Adds one to the counter: an edge for an epoll set that watches the fd edge-triggered
    /// ([`Epoll::add_edge`]), which never reads it. A counter that is full (after 2^64 - 2
    /// wake-ups) is reset and written again, so that the write still makes its edge.
    pub(super) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: the fd is open for the life of self; the buffer is 8 valid bytes.
        let wrote = unsafe { libc::write(self.fd, (&one as *const u64).cast(), 8) };
        if wrote < 0 {
            self.drain();
            // SAFETY: as above; the counter was just reset, so this write has room.
            unsafe {
                libc::write(self.fd, (&one as *const u64).cast(), 8);
            }
        }
    }

    /// Resets the counter.
    fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: the fd is open; the buffer is 8 writable bytes; EAGAIN (nothing to read) is fine.
        unsafe {
            libc::read(self.fd, (&mut value as *mut u64).cast(), 8);
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by self and closed once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// An epoll set: an IO thread waits on the ZMQ_FD of each of its links' sockets and on its
/// eventfd, each registered with a token that names it.
#[derive(Debug)]
pub(super) struct Epoll {
    fd: c_int,
}

/// One readiness report: the token the file descriptor was registered with.
pub(super) type Ready = libc::epoll_event;

/// A blank report, to size the buffer `Epoll::wait` fills.
pub(super) const BLANK: Ready = libc::epoll_event { events: 0, u64: 0 };

/// The token of a readiness report.
pub(super) fn token(r: &Ready) -> u64 {
    r.u64
}

impl Epoll {
    pub(super) fn new() -> std::io::Result<Epoll> {
        // SAFETY: epoll_create1 has no memory preconditions; a negative return is an error.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(Epoll { fd })
        }
    }

    /// Watches `fd` for input (level-triggered), reporting `token`.
    pub(super) fn add(&self, fd: c_int, token: u64) -> std::io::Result<()> {
        self.watch(fd, token, libc::EPOLLIN as u32)
    }

    /// Watches `fd` for input edge-triggered, reporting `token` once per write to it: for an
    /// [`EventFd`], whose every write is an edge, so that the waiter never reads it (one
    /// system call fewer per wake-up).
    pub(super) fn add_edge(&self, fd: c_int, token: u64) -> std::io::Result<()> {
        self.watch(fd, token, (libc::EPOLLIN | libc::EPOLLET) as u32)
    }

    fn watch(&self, fd: c_int, token: u64, events: u32) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both fds are open; `ev` is a valid epoll_event that the kernel copies.
        let rc = unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Stops watching `fd` (before it is closed).
    pub(super) fn delete(&self, fd: c_int) {
        let mut ev = BLANK;
        // SAFETY: the epoll fd is open; `ev` is valid (ignored by DEL, required by old kernels).
        unsafe {
            libc::epoll_ctl(self.fd, libc::EPOLL_CTL_DEL, fd, &mut ev);
        }
    }

    /// Waits up to `timeout_ms` (-1: without bound) and fills `out`; returns how many reports
    /// it holds (0 on a timeout or an interrupted wait).
    pub(super) fn wait(&self, out: &mut [Ready], timeout_ms: i32) -> usize {
        let max = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: `out` is valid for writes of `max` epoll_events for the duration of the call.
        let n = unsafe { libc::epoll_wait(self.fd, out.as_mut_ptr(), max, timeout_ms) };
        usize::try_from(n).unwrap_or(0)
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by self and closed once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// CLOCK_MONOTONIC_COARSE: the monotonic clock at the kernel's tick (1–4 ms), read in a few
/// nanoseconds; for timing calls into application code against thresholds of tens of
/// milliseconds, on every frame.
pub(super) fn coarse_now() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One TCP connection libzmq opened, read through a duplicate of its descriptor while frames
/// wait for acknowledgement: the socket stays the same object however libzmq closes or reuses
/// its own number, and a last reading can be taken after libzmq let the connection go. While
/// nothing has waited for a moment (`slot::HOLD_IDLE`) the duplicate is closed (a link then
/// holds no descriptor more than libzmq's), and taken again, after both addresses are
/// checked, when frames wait again. Dropping it closes the duplicate (the connection itself
/// closes once libzmq has closed its descriptor).
#[derive(Debug)]
pub(super) struct TcpConn {
    /// libzmq's own descriptor, only ever used after its addresses were checked.
    raw: i32,
    local: std::net::SocketAddr,
    peer: std::net::SocketAddr,
    dup: Option<std::os::fd::OwnedFd>,
}

impl TcpConn {
    /// The connection behind `fd` (the value of the monitor's ZMQ_EVENT_CONNECTED), if it is a
    /// connected TCP socket whose peer is `peer`.
    pub(super) fn probe(fd: i32, peer: std::net::SocketAddr) -> Option<TcpConn> {
        let local = sock_addr(fd, libc::getsockname)?;
        let mut conn = TcpConn {
            raw: fd,
            local,
            peer,
            dup: None,
        };
        conn.hold().then_some(conn)
    }

    /// Makes sure the duplicate is open: takes it again if it was released, when libzmq's
    /// descriptor still names the same connection (the same local and peer addresses: no
    /// other socket can have both). False when the connection is gone.
    pub(super) fn hold(&mut self) -> bool {
        if self.dup.is_some() {
            return true;
        }
        let same = sock_addr(self.raw, libc::getpeername) == Some(self.peer)
            && sock_addr(self.raw, libc::getsockname) == Some(self.local);
        if !same {
            return false;
        }
        // SAFETY: `raw` is open (getpeername and getsockname just succeeded on it and named
        // this connection) and is only borrowed for the duplication, which makes a descriptor
        // of our own (F_DUPFD_CLOEXEC).
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.raw) };
        self.dup = borrowed.try_clone_to_owned().ok();
        self.dup.is_some()
    }

    /// Closes the duplicate while no frame waits for acknowledgement.
    pub(super) fn release(&mut self) {
        self.dup = None;
    }

    /// Whether the duplicate is open.
    pub(super) fn is_held(&self) -> bool {
        self.dup.is_some()
    }

    /// Payload bytes the peer's kernel acknowledged (`tcpi_bytes_acked − 1`: the SYN counts
    /// one), or `None` when the kernel does not report the field (Linux before 4.1).
    pub(super) fn bytes_acked(&mut self) -> Option<u64> {
        use std::os::fd::AsRawFd;
        if !self.hold() {
            return None;
        }
        let fd = self.dup.as_ref()?.as_raw_fd();
        // SAFETY: tcp_info is plain old data (integers only), for which all zeros is valid.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: the descriptor is ours and open; `info` is valid for writes of `len` bytes
        // and `len` for writes; the kernel writes at most `len` bytes and stores the count.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        let needed = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8;
        if rc != 0 || (len as usize) < needed {
            return None;
        }
        Some(info.tcpi_bytes_acked.saturating_sub(1))
    }
}

type AddrCall = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;

/// The local (`getsockname`) or peer (`getpeername`) address of a socket descriptor, a
/// v4-mapped IPv6 address given as the IPv4 address it maps.
fn sock_addr(fd: c_int, call: AddrCall) -> Option<std::net::SocketAddr> {
    // SAFETY: sockaddr_storage is plain old data, for which all zeros is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss` is valid for writes of `len` bytes (the largest address there is) and `len`
    // for writes; a descriptor that is not a socket only makes the call fail.
    let rc = unsafe {
        call(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    match c_int::from(ss.ss_family) {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote an AF_INET address, a sockaddr_in, into `ss`, which is
            // large enough and aligned for any address.
            let a = unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(std::net::SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for an AF_INET6 address and sockaddr_in6.
            let a =
                unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            let port = u16::from_be(a.sin6_port);
            // libzmq opens IPv6 sockets for IPv4 peers too: their addresses are v4-mapped.
            Some(match ip.to_ipv4_mapped() {
                Some(v4) => std::net::SocketAddr::from((v4, port)),
                None => std::net::SocketAddr::from((ip, port)),
            })
        }
        _ => None,
    }
}

/// Sends `data` as one zmq message without a copy, as rust-zmq's `send(Vec<u8>)` does, except
/// that the buffer goes to [`super::buffers::give_back`] when libzmq frees the message: on
/// libzmq's IO thread once written, or here when the send fails.
pub(super) fn send_owned(socket: &mut zmq::Socket, data: Vec<u8>, flags: c_int) -> zmq::Result<()> {
    let mut data = ManuallyDrop::new(data);
    let (ptr, len, cap) = (data.as_mut_ptr(), data.len(), data.capacity());
    let mut msg = MaybeUninit::<zmq_sys::zmq_msg_t>::uninit();
    // SAFETY: `msg` is storage for a message that zmq_msg_init_data initialises; the buffer is
    // `len` initialised bytes of a `Vec` given up above, and the free function rebuilds that
    // `Vec` from the pointer and the capacity passed as the hint, once (zmq_msg_init_data(3)).
    let rc = unsafe {
        zmq_sys::zmq_msg_init_data(
            msg.as_mut_ptr(),
            ptr.cast::<c_void>(),
            len,
            Some(free_owned),
            cap as *mut c_void,
        )
    };
    if rc == -1 {
        let e = last_error();
        // SAFETY: the message was not made, so the buffer is still this function's own.
        drop(unsafe { Vec::from_raw_parts(ptr, len, cap) });
        return Err(e);
    }
    // SAFETY: `msg` was initialised above and the socket pointer is a live socket that only
    // this thread uses; on success libzmq owns the message (zmq_msg_send(3)).
    let rc = unsafe { zmq_sys::zmq_msg_send(msg.as_mut_ptr(), socket.as_mut_ptr(), flags) };
    if rc == -1 {
        let e = last_error();
        // SAFETY: a message that was not sent is still ours to close; closing it frees the
        // buffer through `free_owned`.
        unsafe { zmq_sys::zmq_msg_close(msg.as_mut_ptr()) };
        return Err(e);
    }
    Ok(())
}

/// libzmq's free function for the messages of [`send_owned`]: the hint is the capacity.
unsafe extern "C" fn free_owned(data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `data` and the capacity in `hint` are those of the `Vec<u8>` that `send_owned`
    // gave up, and libzmq calls this once per message; the bytes need no drop, so its length
    // is 0.
    let buf = unsafe { Vec::from_raw_parts(data.cast::<u8>(), 0, hint as usize) };
    super::buffers::give_back(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_watched_edge_triggered_reports_each_write_once_without_being_read() {
        let epoll = Epoll::new().expect("an epoll set");
        let fd = EventFd::new().expect("an eventfd");
        epoll.add_edge(fd.raw(), 7).expect("watched");
        let mut out = [BLANK; 4];
        assert_eq!(epoll.wait(&mut out, 0), 0, "nothing written yet");
        fd.wake();
        assert_eq!(epoll.wait(&mut out, 0), 1);
        assert_eq!(token(&out[0]), 7);
        assert_eq!(
            epoll.wait(&mut out, 0),
            0,
            "an edge is reported once, though the counter was never read"
        );
        fd.wake();
        assert_eq!(
            epoll.wait(&mut out, 0),
            1,
            "a write to a counter already readable is a new edge"
        );
    }
}
