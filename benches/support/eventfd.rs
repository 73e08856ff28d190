//! The wake-up of the card-minimal clients (`--bench paced`, `--bench links`): an eventfd
//! that the application's thread writes and the IO thread polls beside its socket
//! (`zmq::PollItem::from_fd`), as relink wakes its IO threads.

/// An eventfd: one thread writes it to wake another out of `zmq::poll`.
pub struct EventFd(std::os::fd::OwnedFd);

impl EventFd {
    pub fn new() -> EventFd {
        // SAFETY: eventfd has no memory preconditions; a negative return is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a new descriptor that nothing else owns.
        EventFd(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
    }

    pub fn raw(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    /// Adds one to the counter, making the fd readable.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: the fd is open for the life of self; the buffer is 8 valid bytes. A full
        // counter (EAGAIN) already reads as readable.
        unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter.
    pub fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: the fd is open; the buffer is 8 writable bytes; EAGAIN (nothing) is fine.
        unsafe { libc::read(self.raw(), (&mut value as *mut u64).cast(), 8) };
    }
}
