//! relink through a socat TLS tunnel: the guide's alternative to the built-in TLS, for
//! transports relink does not speak itself, tested. A self-signed certificate from `openssl`,
//! a TLS echo server (`socat OPENSSL-LISTEN … EXEC:cat`), and a local client tunnel
//! (`socat TCP-LISTEN … OPENSSL:…,verify=1`) that relink dials in plain TCP on 127.0.0.1. Length-prefixed frames go through it and come back in order; the TLS
//! server restarts and the link recovers; a tunnel that expects another name refuses the
//! server.
//!
//! Needs `socat` and `openssl` on PATH: `cargo test --test tls_socat -- --ignored`.

mod util;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use relink::framing::LengthDelimited;
use relink::protocol::{Handshake, Predicate};
use relink::{Cause, Event, Link, State};
use util::{encode_length_prefixed, endpoint_for, free_port, wait_for, watched};

/// Bound on any single wait for something that should happen at once on loopback.
const T: Duration = Duration::from_secs(10);

/// Frames pushed through the tunnel in each round.
const FRAMES: usize = 1000;

/// Child processes (each the leader of its own process group) and their scratch directory.
/// On drop every group is killed with SIGKILL and reaped, and the directory removed, so a
/// failing test leaves nothing behind.
struct Procs {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Procs {
    fn new() -> Procs {
        let dir =
            std::env::temp_dir().join(format!("relink-tls-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        Procs {
            dir,
            children: Vec::new(),
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// The output of process `name` so far.
    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// Starts `program args` in the scratch directory, in a new process group, with its
    /// output in `name.log`.
    fn spawn(&mut self, name: &str, program: &str, args: &[String]) {
        let log = std::fs::File::create(self.log_path(name)).unwrap();
        let child = Command::new(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        self.children.push((name.to_string(), child));
    }

    /// Runs `program args` to completion (bounded), panicking with its output if it fails.
    fn run(&mut self, name: &str, program: &str, args: &[String]) {
        self.spawn(name, program, args);
        let child = &mut self.children.last_mut().unwrap().1;
        let status = wait_for(Duration::from_secs(30), || child.try_wait().unwrap());
        let status = status.unwrap_or_else(|| panic!("{name} did not finish within 30 s"));
        assert!(status.success(), "{name}: {status}\n{}", self.log(name));
    }

    /// Kills process `name` and every process it forked.
    fn kill(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, child) = self.children.remove(i);
            kill_group(child);
        }
    }

    /// Waits until 127.0.0.1:`port` accepts TCP connections; panics with the output of
    /// process `name` if it exits or the port stays closed for 10 s.
    fn wait_port(&mut self, name: &str, port: u16) {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let up = wait_for(T, || {
            if let Some((_, c)) = self.children.iter_mut().find(|(n, _)| n == name) {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("{name} exited ({status}):\n{}", self.log(name));
                }
            }
            TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                .ok()
                .map(|_| ())
        });
        assert!(
            up.is_some(),
            "{name}: port {port} closed after {T:?}:\n{}",
            self.log(name)
        );
    }
}

fn kill_group(mut child: Child) {
    // SAFETY: kill(2) on the process group of our own child, which is not reaped yet.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.wait();
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in self.children.drain(..) {
            kill_group(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Fails loudly when a program this test needs is not installed.
fn require(program: &str) {
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| Path::new(&dir).join(program).is_file())
    });
    assert!(
        found,
        "this test needs `{program}` on PATH (apt-get install {program})"
    );
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `socat OPENSSL-LISTEN:<port>,reuseaddr,fork,cert=cert.pem,key=key.pem,verify=0 EXEC:cat`
fn tls_echo_server_args(port: u16) -> Vec<String> {
    strings(&[
        &format!("OPENSSL-LISTEN:{port},reuseaddr,fork,cert=cert.pem,key=key.pem,verify=0"),
        "EXEC:cat",
    ])
}

/// `socat TCP-LISTEN:<port>,bind=127.0.0.1,reuseaddr,fork
///  OPENSSL:127.0.0.1:<server>,cafile=cert.pem,verify=1,commonname=<name>`
fn tunnel_args(port: u16, server: u16, name: &str) -> Vec<String> {
    strings(&[
        &format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"),
        &format!("OPENSSL:127.0.0.1:{server},cafile=cert.pem,verify=1,commonname={name}"),
    ])
}

/// A frame whose content tells its round and number, of varied length.
fn frame(round: usize, i: usize) -> Vec<u8> {
    let mut f = format!("round-{round}-frame-{i:05}-").into_bytes();
    f.resize(f.len() + (i * 37) % 500, b'a' + (i % 26) as u8);
    f
}

/// Sends `FRAMES` frames of `round` and checks they all come back, in order. Returns the
/// time taken and the payload bytes sent.
fn push_round(link: &Link, round: usize) -> (Duration, usize) {
    let start = Instant::now();
    let sent: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(round, i)).collect();
    for f in &sent {
        link.send(f.clone()).unwrap();
    }
    let deadline = start + Duration::from_secs(20);
    for (i, want) in sent.iter().enumerate() {
        match link.events().recv_deadline(deadline) {
            Ok(Event::Frame(got)) => assert!(
                got == want,
                "round {round}: frame {i} came back as {:?}",
                String::from_utf8_lossy(&got[..got.len().min(40)])
            ),
            Ok(other) => panic!("round {round}: after {i} frames, unexpected {other:?}"),
            Err(e) => panic!("round {round}: only {i} of {FRAMES} frames came back: {e:?}"),
        }
    }
    (start.elapsed(), sent.iter().map(Vec::len).sum())
}

/// Whether the tunnel on `port` echoes a frame (it must not when it refuses the server).
fn tunnel_echoes(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, T) else {
        return false;
    };
    if s.write_all(&encode_length_prefixed(b"probe")).is_err() {
        return false;
    }
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(n) => return n > 0,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

#[test]
#[ignore = "needs socat and openssl"]
fn frames_cross_a_verified_tls_tunnel_in_order_and_the_link_survives_a_tls_server_restart() {
    require("socat");
    require("openssl");
    let mut procs = Procs::new();
    procs.run(
        "openssl",
        "openssl",
        &strings(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ]),
    );
    let (server_port, tunnel_port, wrong_port) = (free_port(), free_port(), free_port());
    procs.spawn("server", "socat", &tls_echo_server_args(server_port));
    procs.wait_port("server", server_port);
    procs.spawn(
        "tunnel",
        "socat",
        &tunnel_args(tunnel_port, server_port, "localhost"),
    );
    procs.wait_port("tunnel", tunnel_port);

    // Verification is on: a tunnel that expects another name gets nothing through.
    procs.spawn(
        "wrong",
        "socat",
        &tunnel_args(wrong_port, server_port, "wronghost"),
    );
    procs.wait_port("wrong", wrong_port);
    assert!(
        !tunnel_echoes(wrong_port),
        "a tunnel expecting CN=wronghost echoed: verification is off"
    );
    assert!(
        tunnel_echoes(tunnel_port),
        "the CN=localhost tunnel echoed nothing"
    );

    // The hello goes through the tunnel and the TLS server and back: Ready means the whole
    // path is up, not just the local TCP connection to the tunnel.
    let (link, mut w) = watched(
        Link::builder(endpoint_for(tunnel_port))
            .framing(LengthDelimited::len32())
            .protocol(Handshake::new(
                vec![b"hello".to_vec()],
                Predicate::new(|f| f == b"hello"),
            ))
            .reconnect(|r| {
                r.native_retries = 0;
                r.backoff_base = Duration::from_millis(50);
                r.backoff_max = Duration::from_millis(500);
            }),
    );
    w.until(T, |t| t.to == State::Ready);
    let (first_took, bytes) = push_round(&link, 1);

    // The TLS server dies (with the connection it forked): the link notices, backs off,
    // and is Ready again once the server is back on its port.
    procs.kill("server");
    let (_, lost) = w.until(T, |t| t.from == State::Ready);
    assert!(lost.cause.is_failure(), "{lost:?}");
    // While the server is down, the tunnel still accepts, but the hello gets no reply: the
    // attempt fails without reaching Ready.
    let mark = w.transitions.len();
    let (_, failed) = w.until(T, |t| t.to == State::Backoff);
    assert_eq!(failed.from, State::Connected, "{failed:?}");
    assert!(
        matches!(failed.cause, Cause::PeerClosed | Cause::HandshakeTimeout),
        "{failed:?}"
    );
    let seen = w.since(0);
    assert!(
        seen[mark..].iter().all(|t| t.to != State::Ready),
        "{seen:?}"
    );
    procs.spawn("server", "socat", &tls_echo_server_args(server_port));
    let back_at = Instant::now();
    procs.wait_port("server", server_port);
    w.until(T, |t| t.to == State::Ready);
    let recovered = back_at.elapsed();
    let (second_took, _) = push_round(&link, 2);
    let m = link.close(T);
    assert_eq!(m.frames_sent, 2 * FRAMES as u64);
    assert_eq!(m.frames_received, 2 * FRAMES as u64);
    assert_eq!(m.unaccounted(), 0);
    println!(
        "tls: {FRAMES} frames ({bytes} payload bytes) through a socat TLS tunnel (verify=1, \
         CN=localhost) and back in order in {} ms; after the TLS server was killed and \
         restarted the link was Ready again {} ms after the restart and {FRAMES} more came \
         back in order in {} ms; a tunnel expecting CN=wronghost passed nothing",
        first_took.as_millis(),
        recovered.as_millis(),
        second_took.as_millis()
    );
}
