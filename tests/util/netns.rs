//! Network namespaces for the dead-peer tests: two namespaces joined by a veth pair, processes
//! started inside them, a blackhole route that silences one side without a FIN or RST, a link
//! built inside one, and the line protocol a link running in a child process reports on.
//!
//! Part of the test kit: `util::netns`. The benches include this same file as
//! `support::netns` (with `util::proc` as `support::proc`).
//!
//! Everything here needs root and `ip` (iproute2). The addresses (10.213.0.1/30 in A,
//! 10.213.0.2/30 in B) exist only inside the two namespaces this module creates, which nothing
//! routes to or from; each pair has names unique to the process and the call. A
//! [`NetnsPair`] deletes its namespaces on drop and a [`Process`] kills its whole process group
//! on drop, so both are cleaned up on failure too (a panic unwinds through their `Drop`).
//!
//! A child link (see [`run_child_link`]) prints one line per observation on stdout, each
//! starting with [`PREFIX`] and carrying `t_us`, CLOCK_MONOTONIC in microseconds, which is the
//! same clock for every process on the machine (see [`mono_us`]):
//! ```text
//! relink-netns t_us=81234567 started
//! relink-netns t_us=81234901 state from=Connected to=Ready cause=alive attempt=0
//! relink-netns t_us=81235110 frame len=4
//! ```

use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use relink::pool::Context;
use relink::{Builder, Link};

/// The first word of every line a child link prints.
pub const PREFIX: &str = "relink-netns";

/// CLOCK_MONOTONIC in microseconds: comparable between processes on one machine (std's
/// `Instant` reads the same clock but cannot be printed).
pub fn mono_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Microseconds as a `Duration` (saturating at zero for a negative difference).
pub fn us_between(from_us: u64, to_us: u64) -> Duration {
    Duration::from_micros(to_us.saturating_sub(from_us))
}

/// Runs a command to completion; its stdout on success, a readable error otherwise.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let shown = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{shown}` could not run: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether `name` is an executable file on PATH.
pub fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
    })
}

/// Ok when this process is root and `ip netns` answers; else why not.
pub fn check_root_and_netns() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(format!(
            "not root (euid {euid}); network namespaces need root"
        ));
    }
    run("ip", &["netns", "list"]).map(|_| ())
}

/// Two network namespaces, A and B, joined by a veth pair: A is 10.213.0.1/30, B is
/// 10.213.0.2/30. Deleted on drop.
pub struct NetnsPair {
    /// Name of namespace A (where the client runs).
    pub a: String,
    /// Name of namespace B (where the peer runs).
    pub b: String,
    /// A's address on the veth link.
    pub addr_a: Ipv4Addr,
    /// B's address on the veth link.
    pub addr_b: Ipv4Addr,
    veth_a: String,
    veth_b: String,
    /// Namespaces created so far (deleted on drop).
    created: Vec<String>,
    /// The veth pair exists and may still be in the root namespace.
    veth_in_root: bool,
}

impl NetnsPair {
    /// Creates the pair. Fails (with the failing command and its stderr) when not root or
    /// when `ip` cannot do it; whatever was created before the failure is removed.
    pub fn create() -> Result<NetnsPair, String> {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        check_root_and_netns()?;
        let pid = std::process::id();
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let mut pair = NetnsPair {
            a: format!("relink-{pid}-{n}-a"),
            b: format!("relink-{pid}-{n}-b"),
            addr_a: Ipv4Addr::new(10, 213, 0, 1),
            addr_b: Ipv4Addr::new(10, 213, 0, 2),
            // Interface names are limited to 15 bytes.
            veth_a: format!("rl{pid}v{n}a"),
            veth_b: format!("rl{pid}v{n}b"),
            created: Vec::new(),
            veth_in_root: false,
        };
        pair.build()?;
        Ok(pair)
    }

    fn build(&mut self) -> Result<(), String> {
        for ns in [self.a.clone(), self.b.clone()] {
            run("ip", &["netns", "add", &ns])?;
            self.created.push(ns);
        }
        run(
            "ip",
            &[
                "link",
                "add",
                &self.veth_a,
                "type",
                "veth",
                "peer",
                "name",
                &self.veth_b,
            ],
        )?;
        self.veth_in_root = true;
        run("ip", &["link", "set", &self.veth_a, "netns", &self.a])?;
        run("ip", &["link", "set", &self.veth_b, "netns", &self.b])?;
        self.veth_in_root = false;
        for (ns, dev, addr) in [
            (self.a.clone(), self.veth_a.clone(), self.addr_a),
            (self.b.clone(), self.veth_b.clone(), self.addr_b),
        ] {
            self.ip(&ns, &["addr", "add", &format!("{addr}/30"), "dev", &dev])?;
            self.ip(&ns, &["link", "set", &dev, "up"])?;
            self.ip(&ns, &["link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Runs `ip -n <ns> <args>`.
    pub fn ip(&self, ns: &str, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-n", ns];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Adds a blackhole route for B's address in A: from then on nothing A sends reaches B and
    /// no FIN or RST comes back; established connections just go quiet.
    pub fn blackhole_b_in_a(&self) -> Result<(), String> {
        let dst = format!("{}/32", self.addr_b);
        self.ip(&self.a, &["route", "add", "blackhole", &dst])
            .map(|_| ())
    }

    /// Removes the route added by [`NetnsPair::blackhole_b_in_a`].
    pub fn clear_blackhole(&self) -> Result<(), String> {
        let dst = format!("{}/32", self.addr_b);
        self.ip(&self.a, &["route", "del", "blackhole", &dst])
            .map(|_| ())
    }

    /// Starts `program args` inside namespace `ns` (through `ip netns exec`, which execs it in
    /// place), in a process group of its own, with `env` added to its environment, stdin and
    /// stdout piped (stdout read line by line into [`Process::lines`]), stderr inherited.
    /// It gets SIGKILL if the thread that started it dies without cleaning up.
    pub fn spawn(
        &self,
        ns: &str,
        program: &str,
        args: &[String],
        env: &[(&str, String)],
    ) -> Result<Process, String> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, program]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Process::start(cmd, format!("{program} in {ns}"))
    }

    /// This test binary again in namespace `ns`, running only the (ignored) test `test`, with
    /// `env` added to its environment; piped and killed as [`NetnsPair::spawn`] says.
    pub fn spawn_this_test(
        &self,
        ns: &str,
        test: &str,
        env: &[(&str, String)],
    ) -> Result<Process, String> {
        let exe = std::env::current_exe().map_err(|e| format!("path of the test binary: {e}"))?;
        let exe = exe.to_str().ok_or("the test binary's path is not UTF-8")?;
        let args: Vec<String> = [test, "--exact", "--ignored", "--nocapture"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        self.spawn(ns, exe, &args, env)
    }

    /// Starts an echo server (`socat TCP-LISTEN:<port>,reuseaddr,fork PIPE`) in namespace B.
    pub fn start_echo_in_b(&self, port: u16) -> Result<Process, String> {
        if !on_path("socat") {
            return Err("socat is not on PATH".into());
        }
        self.spawn(
            &self.b,
            "socat",
            &[format!("TCP-LISTEN:{port},reuseaddr,fork"), "PIPE".into()],
            &[],
        )
    }

    /// Starts the echo peer in namespace B ([`NetnsPair::start_echo_in_b`]) and waits until it
    /// listens; panics if it does not within `timeout`.
    pub fn echo_in_b(&self, port: u16, timeout: Duration) -> Process {
        let echo = self
            .start_echo_in_b(port)
            .unwrap_or_else(|e| panic!("cannot start the echo peer in namespace B: {e}"));
        assert!(
            self.wait_listening(&self.b, port, timeout),
            "the echo peer does not listen in namespace B"
        );
        echo
    }

    /// `ss` inside namespace `ns`: the established TCP connections on local port `port`, one
    /// line each, receive queue first.
    pub fn ss(&self, ns: &str, port: u16) -> String {
        let filter = format!("( sport = :{port} )");
        run(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "ss",
                "-tnH",
                "state",
                "established",
                &filter,
            ],
        )
        .unwrap_or_default()
    }

    /// Waits (bounded) until something listens on TCP `port` in namespace `ns`.
    pub fn wait_listening(&self, ns: &str, port: u16, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let filter = format!("sport = :{port}");
        loop {
            let out = run(
                "ip",
                &["netns", "exec", ns, "ss", "-H", "-l", "-t", "-n", &filter],
            );
            if out.is_ok_and(|s| !s.trim().is_empty()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for ns in self.created.drain(..) {
            if let Err(e) = run("ip", &["netns", "del", &ns]) {
                eprintln!("netns cleanup: {e}");
            }
        }
        if self.veth_in_root {
            // Moved into no namespace: still in the root one. Deleting one end deletes both.
            let _ = run("ip", &["link", "del", &self.veth_a]);
        }
    }
}

/// A process started by [`NetnsPair::spawn`]. Dropping it kills its process group (SIGKILL),
/// reaps it and joins the thread reading its stdout.
pub struct Process {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    label: String,
}

impl Process {
    /// This test binary again, running only the (ignored) test `test`, with `env` added to
    /// its environment: a child process a test can stop and continue (SIGSTOP, SIGCONT) while
    /// the peers stay in the parent. Piped and killed as [`NetnsPair::spawn`] says.
    pub fn this_test(test: &str, env: &[(&str, String)]) -> Result<Process, String> {
        let exe = std::env::current_exe().map_err(|e| format!("path of the test binary: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args([test, "--exact", "--ignored", "--nocapture"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Process::start(cmd, format!("test {test}"))
    }

    /// Spawns `cmd` in a process group of its own, stdin and stdout piped (stdout read line by
    /// line into [`Process::lines`]), stderr inherited; SIGKILL if the thread that started it
    /// dies without cleaning up.
    fn start(mut cmd: Command, label: String) -> Result<Process, String> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        super::proc::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| format!("spawn {label}: {e}"))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take();
        let (tx, rx) = crossbeam_channel::unbounded();
        let reader = std::thread::Builder::new()
            .name(format!("child-out-{}", child.id()))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("spawn a reader thread: {e}"))?;
        Ok(Process {
            child: Some(child),
            stdin,
            lines: rx,
            reader: Some(reader),
            label,
        })
    }

    /// Sends `sig` to the process (SIGSTOP freezes it, SIGCONT lets it run on).
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.id().expect("the process was killed");
        // SAFETY: kill(2) on our own child, which is not reaped while `child` is Some.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        );
    }

    /// Its stdout, one line per message; disconnected at end of output.
    pub fn lines(&self) -> &Receiver<String> {
        &self.lines
    }

    /// Process id (also its process group id).
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Closes its stdin (a child link takes that as the order to stop).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Whether it has exited (reaping it if so).
    pub fn has_exited(&mut self) -> bool {
        matches!(
            self.child.as_mut().map(|c| c.try_wait()),
            Some(Ok(Some(_))) | None
        )
    }

    /// Kills the process group and reaps the process (no-op once done). The other members
    /// (socat's per-connection forks) go first, while their parent is alive to reap them;
    /// killed together with it they would be left as zombies for init.
    pub fn kill(&mut self) {
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let leader = child.id();
                let members = group_members(leader);
                for &pid in &members {
                    // SAFETY: kill(2) on a member of the group led by our unreaped child: its
                    // group id cannot belong to anyone else.
                    unsafe {
                        libc::kill(pid as libc::pid_t, libc::SIGKILL);
                    }
                }
                let deadline = Instant::now() + Duration::from_secs(1);
                while members
                    .iter()
                    .any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
                // SAFETY: as above, for the whole group (the leader and any late member).
                unsafe {
                    libc::kill(-(leader as libc::pid_t), libc::SIGKILL);
                }
            }
            let _ = child.wait();
        }
        if let Some(reader) = self.reader.take() {
            // The pipe closes with the last process holding it: bounded, but do not hang on a
            // grandchild that left the group.
            let deadline = Instant::now() + Duration::from_secs(2);
            while !reader.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if reader.is_finished() {
                let _ = reader.join();
            } else {
                eprintln!(
                    "netns: output of {} still open; reader left behind",
                    self.label
                );
            }
        }
    }
}

/// Processes in the process group `pgid`, its leader excepted (from /proc/<pid>/stat).
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != pgid)
        .filter(|pid| {
            // Fields after the command (which is in parentheses): state, ppid, pgrp, ...
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<u32>().ok())
                    == Some(pgid)
            })
        })
        .collect()
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------
// The child link and its reports
// ---------------------------------------------------------------------------------------

/// What a child link reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The child is running.
    Started {
        /// When, in [`mono_us`] time.
        t_us: u64,
    },
    /// A state transition.
    State {
        /// When the child received it, in [`mono_us`] time.
        t_us: u64,
        /// State left (`Ready`).
        from: String,
        /// State entered.
        to: String,
        /// Cause (`heartbeat-timeout`).
        cause: String,
        /// Failures in a row.
        attempt: u32,
    },
    /// A frame from the peer (an echoed ping).
    Frame {
        /// When the child received it.
        t_us: u64,
    },
    /// The child is stopping.
    Ended {
        /// When.
        t_us: u64,
    },
}

impl Report {
    /// Its timestamp, in [`mono_us`] time.
    pub fn t_us(&self) -> u64 {
        match self {
            Report::Started { t_us }
            | Report::State { t_us, .. }
            | Report::Frame { t_us }
            | Report::Ended { t_us } => *t_us,
        }
    }

    /// Parses one line of a child's stdout; None for anything else (test harness output).
    pub fn parse(line: &str) -> Option<Report> {
        let mut words = line.split_whitespace();
        if words.next()? != PREFIX {
            return None;
        }
        let t_us = words.next()?.strip_prefix("t_us=")?.parse().ok()?;
        let kind = words.next()?;
        let mut field = |name: &str| -> Option<String> {
            words
                .next()?
                .strip_prefix(name)?
                .strip_prefix('=')
                .map(str::to_string)
        };
        match kind {
            "started" => Some(Report::Started { t_us }),
            "ended" => Some(Report::Ended { t_us }),
            "frame" => Some(Report::Frame { t_us }),
            "state" => Some(Report::State {
                t_us,
                from: field("from")?,
                to: field("to")?,
                cause: field("cause")?,
                attempt: field("attempt")?.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// Reads a child's reports until one satisfies `f` or `timeout` passes. Every report read
/// (the matching one included) is appended to `seen`. Err says why it stopped.
pub fn wait_report(
    lines: &Receiver<String>,
    timeout: Duration,
    seen: &mut Vec<Report>,
    mut f: impl FnMut(&Report) -> bool,
) -> Result<Report, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match lines.recv_deadline(deadline) {
            Ok(line) => {
                if let Some(r) = Report::parse(&line) {
                    seen.push(r.clone());
                    if f(&r) {
                        return Ok(r);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => return Err(format!("nothing within {timeout:?}")),
            Err(RecvTimeoutError::Disconnected) => return Err("the child's output ended".into()),
        }
    }
}

/// The link a child runs in namespace A: lines codec, a `ping\n` heartbeat every `interval`
/// (echoed back by the peer, so each reply arrives as a frame), `max_missed`, a short backoff.
/// Prints reports on stdout until its stdin closes or `limit` passes.
pub fn run_child_link(endpoint: &str, interval: Duration, max_missed: u32, limit: Duration) {
    use relink::framing::Lines;
    use relink::protocol::Ping;
    use relink::{Event, Heartbeat, Link};

    let say = |what: String| println!("{PREFIX} t_us={} {what}", mono_us());
    let link = Link::builder(endpoint)
        .framing(Lines::new())
        .heartbeat(Heartbeat::new(interval, Ping::Raw(b"ping\n".to_vec())).max_missed(max_missed))
        .reconnect(|r| {
            r.backoff_base = Duration::from_millis(50);
            r.backoff_max = Duration::from_millis(500);
        })
        .socket(|s| s.connect_timeout = Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("build the child link to {endpoint}: {e}"));
    // The parent closes our stdin (or dies): time to stop.
    let eof_rx = stdin_closed();
    say("started".into());
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && eof_rx.try_recv().is_err() {
        match link.events().recv_timeout(Duration::from_millis(50)) {
            Ok(Event::State(t)) => say(format!(
                "state from={} to={} cause={} attempt={}",
                t.from, t.to, t.cause, t.attempt
            )),
            Ok(Event::Frame(f)) => say(format!("frame len={}", f.len())),
            Ok(_) | Err(relink::error::RecvTimeoutError::Timeout) => {}
            Err(relink::error::RecvTimeoutError::Disconnected) => break,
        }
    }
    link.close(Duration::from_millis(200));
    say("ended".into());
}

/// For a child process: a channel that receives once this process's stdin ends (the parent
/// closed it, or died).
pub fn stdin_closed() -> Receiver<()> {
    let (eof_tx, eof_rx) = crossbeam_channel::bounded::<()>(1);
    thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = eof_tx.send(());
    });
    eof_rx
}

/// Builds a link on a thread that entered network namespace `ns`, with a libzmq context of
/// its own created there: libzmq starts its IO thread at the context's first socket, and every
/// thread inherits the namespace of the thread that starts it, so the link's IO thread and
/// libzmq's both live in `ns` while the test thread stays where it is.
pub fn build_in_namespace(
    ns: &str,
    make: impl FnOnce(&Context) -> Builder + Send + 'static,
) -> Link {
    use std::os::unix::io::AsRawFd;
    let path = std::path::Path::new("/run/netns").join(ns);
    thread::spawn(move || {
        let file =
            std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        // SAFETY: setns(2) with a valid namespace descriptor; it changes this thread only.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "setns into {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        let ctx = Context::with_max_sockets(64).expect("a context of its own");
        make(&ctx)
            .build()
            .expect("build the link inside the namespace")
    })
    .join()
    .expect("the namespace thread panicked")
}

/// A fresh [`NetnsPair`]; panics saying that the test needs root if it cannot be made.
pub fn netns_pair() -> NetnsPair {
    NetnsPair::create()
        .unwrap_or_else(|e| panic!("this test needs root and network namespaces: {e}"))
}
