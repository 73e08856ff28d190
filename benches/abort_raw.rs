//! libzmq's `_input_stopped` abort (issue #3937), reproduced with a bare ZMQ_STREAM socket.
//!
//! Run it with `cargo bench --bench abort_raw` (no setup: its peer listens on 127.0.0.1); it
//! takes about a minute. `--mode M` picks how the socket is set up (`redial`, the default:
//! libzmq 4.3.4's defaults with `ZMQ_IMMEDIATE=0`; `stop`: the same with
//! `ZMQ_RECONNECT_STOP=HANDSHAKE_FAILED`, relink's guard; `immediate`: `ZMQ_IMMEDIATE=1`),
//! `--peer P` what the peer writes (`exact`, the default: 63 chunks of 8 KiB, which with the
//! connect notification fill a pipe of RCVHWM 64, then a FIN; `random`: 32 to 96 chunks and a
//! few bytes, then a FIN or a reset), `--cycles N` (default 1000) and `--secs S` (default
//! 60) bound the run, `--ivl MS` sets ZMQ_RECONNECT_IVL (default 100; -1 is libzmq's "no
//! redial", 2147483647 relink's guard on libzmq 4.3.2). `--smoke` runs 20 cycles.
//!
//! Each cycle, in a child process (this program again) so that an abort is counted and not
//! fatal: a STREAM socket (RCVHWM 64, STREAM_NOTIFY) dials the peer and reads nothing; the
//! peer writes its burst and closes; once libzmq has redialled (the peer's next accept, held
//! silent) or, when no redial comes, after a bound, the socket reads everything it holds. The
//! path, read off the 4.3.4 source: the close's notification is refused by the full pipe
//! (`raw_engine.cpp`, `error`), which leaves the pipe's write flag down with no engine
//! stopped; the redial's engine attaches to the same pipe (IMMEDIATE=0); the reader's
//! `activate_write` then restarts the input of an engine whose input never stopped
//! (`stream_engine_base.cpp:417`). It prints one line per run:
//!
//! ```text
//! abort_raw mode=redial peer=exact ivl_ms=100 cycles=... aborts=... per_1000=... redials=... bytes_lost=...
//! ```
//!
//! `bytes_lost` counts bytes of the bursts that were never readable (with `immediate`, the
//! pipe dropped at the close; with `random`, what a reset discarded).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

/// Env var that makes this program a child running cycles: `<mode> <peer> <ivl_ms> <cycles>`.
const CHILD: &str = "RELINK_ABORT_RAW_CHILD";
/// libzmq's batch: the engine reads at most this much per message.
const CHUNK: usize = 8192;
/// RCVHWM of the socket (relink's default).
const RCVHWM: i32 = 64;
/// ZMQ_RECONNECT_STOP (libzmq 4.3.3 and newer, outside the draft API) and its HANDSHAKE_FAILED
/// bit.
const ZMQ_RECONNECT_STOP: u32 = 109;
const STOP_HANDSHAKE_FAILED: i32 = 0x2;
/// Bound on every wait of a cycle for something that takes milliseconds.
const BOUND: Duration = Duration::from_secs(3);

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let smoke = support::smoke();
    let mode = support::arg("mode").unwrap_or_else(|| "redial".into());
    let peer = support::arg("peer").unwrap_or_else(|| "exact".into());
    let ivl: i32 = support::arg("ivl").map_or(100, |v| v.parse().expect("--ivl MS"));
    let cycles: u64 = if smoke {
        20
    } else {
        support::arg("cycles").map_or(1000, |v| v.parse().expect("--cycles N"))
    };
    let secs: u64 = support::arg("secs").map_or(60, |v| v.parse().expect("--secs S"));
    let deadline = Instant::now() + Duration::from_secs(if smoke { 20 } else { secs });
    let exe = std::env::current_exe().expect("this program's path");
    let (mut done, mut aborts, mut redials, mut lost) = (0u64, 0u64, 0u64, 0u64);
    while done < cycles && Instant::now() < deadline {
        let spec = format!("{mode} {peer} {ivl} {}", cycles - done);
        let mut child = Command::new(&exe)
            .env(CHILD, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn a child");
        let out = child.stdout.take().expect("piped");
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("cycle ") {
                done += 1;
                let field = |name: &str| -> u64 {
                    rest.split_whitespace()
                        .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                        .unwrap_or(0)
                };
                redials += field("redialed");
                lost += field("lost");
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                break;
            }
        }
        let status = child.wait().expect("wait for the child");
        if status.signal() == Some(libc::SIGABRT) {
            // The cycle that aborted counts as a cycle.
            done += 1;
            aborts += 1;
        }
    }
    let per_1000 = if done == 0 {
        0.0
    } else {
        aborts as f64 * 1000.0 / done as f64
    };
    println!(
        "abort_raw mode={mode} peer={peer} ivl_ms={ivl} cycles={done} aborts={aborts} \
         per_1000={per_1000:.0} redials={redials} bytes_lost={lost}"
    );
}

/// The child: runs cycles until told how many, printing `cycle N ...` after each.
fn child(spec: &str) {
    let words: Vec<&str> = spec.split_whitespace().collect();
    let [mode, peer, ivl, cycles] = words[..] else {
        panic!("bad {CHILD}: {spec:?}")
    };
    let ivl: i32 = ivl.parse().expect("ivl");
    let cycles: u64 = cycles.parse().expect("cycles");
    let ctx = zmq::Context::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let endpoint = format!("tcp://{}", listener.local_addr().expect("address"));
    let mut rng = rand::rng();
    let mut stdout = std::io::stdout();
    for n in 0..cycles {
        let (redialed, lost) = cycle(&ctx, &listener, &endpoint, mode, peer, ivl, n, &mut rng);
        let _ = writeln!(
            stdout,
            "cycle {n} redialed={} lost={lost}",
            u8::from(redialed)
        );
        let _ = stdout.flush();
    }
}

/// Accepts the next connection, within `bound`.
fn accept(listener: &TcpListener, bound: Duration) -> Option<TcpStream> {
    let deadline = Instant::now() + bound;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).ok()?;
                return Some(s);
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(500)),
            Err(_) => return None,
        }
    }
}

/// Closes `stream` with a reset (SO_LINGER 0) instead of a FIN.
fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a descriptor this stream owns, with a correctly sized linger.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

/// One cycle; returns whether libzmq redialled and how many bytes of the burst were not read.
#[allow(clippy::too_many_arguments)]
fn cycle(
    ctx: &zmq::Context,
    listener: &TcpListener,
    endpoint: &str,
    mode: &str,
    peer: &str,
    ivl: i32,
    n: u64,
    rng: &mut impl Rng,
) -> (bool, u64) {
    let mut socket = ctx.socket(zmq::STREAM).expect("socket");
    socket.set_rcvhwm(RCVHWM).expect("rcvhwm");
    socket.set_linger(0).expect("linger");
    socket.set_reconnect_ivl(ivl).expect("reconnect_ivl");
    socket
        .set_immediate(mode == "immediate")
        .expect("immediate");
    if mode == "stop" {
        set_int(&mut socket, ZMQ_RECONNECT_STOP, STOP_HANDSHAKE_FAILED);
    }
    let mut rid = [b'R'; 9];
    rid[1..].copy_from_slice(&n.to_be_bytes());
    set_bytes(&mut socket, zmq_sys::ZMQ_CONNECT_ROUTING_ID, &rid);
    socket.connect(endpoint).expect("connect");
    let first = accept(listener, BOUND).expect("the first connection");
    let (chunks, extra, rst) = match peer {
        "exact" => (RCVHWM as usize - 1, 0, false),
        _ => (
            rng.random_range(32..=96),
            rng.random_range(0..64),
            rng.random_bool(0.3),
        ),
    };
    let burst = chunks * CHUNK + extra;
    // Written from a thread: what libzmq's pipe and the kernel cannot hold waits there.
    let writer = std::thread::spawn(move || {
        let mut first = first;
        let _ = first.write_all(&vec![b'x'; burst]);
        if rst {
            reset(first);
        }
    });
    let _ = writer.join();
    // libzmq's redial (IVL plus up to IVL of jitter), held silent; none comes with the guard.
    // One not due within a second (-1: never; 2147483647: in weeks) is not waited for.
    let wait = match u64::try_from(ivl) {
        Ok(ms) if ms <= 1000 => Duration::from_millis(3 * ms.max(1) + 50),
        _ => Duration::from_millis(50),
    };
    let second = accept(listener, wait);
    let redialed = second.is_some();
    // Read everything now: the pipe's reader sends `activate_write` to the session.
    let mut read = 0u64;
    let quiet = Duration::from_millis(30);
    let mut last = Instant::now();
    while last.elapsed() < quiet {
        match socket.recv_msg(zmq::DONTWAIT) {
            Ok(m) => {
                if !socket.get_rcvmore().unwrap_or(false) {
                    read += m.len() as u64;
                }
                last = Instant::now();
            }
            Err(_) => {
                let mut items = [socket.as_poll_item(zmq::POLLIN)];
                let _ = zmq::poll(&mut items, 5);
            }
        }
    }
    drop(second);
    drop(socket);
    (redialed, (burst as u64).saturating_sub(read))
}

fn set_int(socket: &mut zmq::Socket, option: u32, value: i32) {
    // SAFETY: `socket` is a live socket; the option takes an int, passed by pointer and size.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            socket.as_mut_ptr(),
            option as i32,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>(),
        )
    };
    assert_eq!(rc, 0, "zmq_setsockopt({option}) refused");
}

fn set_bytes(socket: &mut zmq::Socket, option: u32, value: &[u8]) {
    // SAFETY: `socket` is a live socket; the option takes bytes, passed by pointer and length.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            socket.as_mut_ptr(),
            option as i32,
            value.as_ptr().cast(),
            value.len(),
        )
    };
    assert_eq!(rc, 0, "zmq_setsockopt({option}) refused");
}
