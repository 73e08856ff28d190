//! Tests of the test helpers in `tests/util`.

mod util;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use util::*;

const T: Duration = Duration::from_secs(5);

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), T).expect("connect");
    s.set_read_timeout(Some(T)).unwrap();
    s.set_write_timeout(Some(T)).unwrap();
    s
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).expect("read");
    buf
}

/// Reads until end of stream (Ok(0)) or a reset; panics on a timeout.
fn expect_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("expected the peer to close, got {e}"),
        }
    }
}

#[test]
fn echo_round_trip() {
    let peer = Peer::start(Behaviour::Echo);
    assert!(peer.endpoint().starts_with("tcp://127.0.0.1:"));
    let mut c = connect(peer.port());
    c.write_all(b"hello").unwrap();
    assert_eq!(read_n(&mut c, 5), b"hello");
    assert!(peer.wait_accepts(1, T));
    assert!(peer.wait_received_len(5, T));
    assert_eq!(peer.received(), vec![b"hello".to_vec()]);
    assert_eq!(peer.open_count(), 1);

    let ev = peer.events();
    assert!(matches!(ev.recv_timeout(T), Ok(PeerEvent::Accepted(0, _))));
    assert_eq!(
        ev.recv_timeout(T).unwrap(),
        PeerEvent::Data(0, b"hello".to_vec())
    );
    drop(c);
    assert_eq!(ev.recv_timeout(T).unwrap(), PeerEvent::Closed(0));
    assert!(peer.wait_closed(0, T));
}

#[test]
fn accept_then_close_closes() {
    let peer = Peer::start(Behaviour::AcceptThenClose);
    for i in 0..3 {
        let mut c = connect(peer.port());
        expect_closed(&mut c);
        assert!(peer.wait_closed(i, T));
    }
    assert_eq!(peer.accepts().len(), 3);
    let a = peer.accepts();
    assert!(a.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn restart_on_same_port() {
    let peer = Peer::start(Behaviour::Echo);
    let port = peer.port();
    let mut old = connect(port);
    old.write_all(b"x").unwrap();
    assert_eq!(read_n(&mut old, 1), b"x");

    let t0 = Instant::now();
    peer.stop();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "stop took {:?}",
        t0.elapsed()
    );
    // The old connection was closed by the peer: its side of it lingers (FIN_WAIT/TIME_WAIT).
    expect_closed(&mut old);
    drop(old);
    assert_eq!(
        TcpStream::connect(("127.0.0.1", port)).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );

    let peer = Peer::start_on(port, Behaviour::Echo).expect("restart on the same port");
    assert_eq!(peer.port(), port);
    let mut c = connect(port);
    c.write_all(b"again").unwrap();
    assert_eq!(read_n(&mut c, 5), b"again");
    assert_eq!(peer.received(), vec![b"again".to_vec()]);
}

#[test]
fn start_on_a_listening_port_fails() {
    let peer = Peer::start(Behaviour::Sink);
    let err = Peer::start_on(peer.port(), Behaviour::Sink)
        .err()
        .expect("second listener on the same port");
    assert_eq!(err.kind(), ErrorKind::AddrInUse);
}

#[test]
fn std_listener_sets_so_reuseaddr() {
    use std::os::unix::io::AsRawFd;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid socket and buffer of the right size.
    let rc = unsafe {
        libc::getsockopt(
            l.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(rc, 0);
    assert_ne!(v, 0, "std's TcpListener::bind no longer sets SO_REUSEADDR");
}

#[test]
fn refused_endpoint_refuses() {
    let ep = refused_endpoint();
    let addr = ep.strip_prefix("tcp://").unwrap();
    let err = TcpStream::connect(addr).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
}

#[test]
fn ports_are_outside_the_ephemeral_range_and_distinct() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let mut it = range.split_whitespace().map(|p| p.parse::<u16>().unwrap());
    let (lo, hi) = (it.next().unwrap(), it.next().unwrap());
    let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
    assert!(duplicates(&ports).is_empty());
    assert!(
        ports.iter().all(|p| *p < lo || *p > hi),
        "{ports:?} vs {lo}-{hi}"
    );
}

#[test]
fn sink_records_length_prefixed_frames_in_pieces() {
    let peer = Peer::start(Behaviour::Sink);
    let mut c = connect(peer.port());
    let mut bytes = Vec::new();
    for i in 0..100 {
        bytes.extend(encode_length_prefixed(&seq_payload(i)));
    }
    for chunk in bytes.chunks(7) {
        c.write_all(chunk).unwrap();
    }
    assert!(peer.wait_received_len(bytes.len(), T));
    let received = peer.received();
    let (frames, rest) = decode_length_prefixed(&received[0]);
    assert!(rest.is_empty());
    let seqs: Vec<u64> = frames.iter().map(|f| parse_seq(f).unwrap()).collect();
    assert_eq!(seqs, (0..100).collect::<Vec<_>>());
    assert_eq!(first_out_of_order(&seqs), None);
    assert!(duplicates(&seqs).is_empty());
    assert_eq!(peer.snapshot().length_prefixed_frames()[0].0.len(), 100);
}

#[test]
fn decoders() {
    let (lines, rest) = decode_lines(b"a\r\nb\n\nc");
    assert_eq!(lines, vec![b"a".to_vec(), b"b".to_vec(), b"".to_vec()]);
    assert_eq!(rest, b"c");
    assert_eq!(lines_str(b"x\ny\n"), vec!["x", "y"]);
    let (frames, rest) = decode_length_prefixed(&[0, 0, 0, 1, b'z', 0, 0, 0, 5, b'a']);
    assert_eq!(frames, vec![b"z".to_vec()]);
    assert_eq!(rest, &[0, 0, 0, 5, b'a']);
    assert_eq!(duplicates(&[1, 2, 1, 3, 1, 2]), vec![1, 2]);
    assert_eq!(first_out_of_order(&[1, 2, 2, 3]), Some(2));
    assert_eq!(parse_seq(&seq_payload(42)), Some(42));
    assert_eq!(parse_seq(b"nope"), None);
}

#[test]
fn garbage_then_echo() {
    let peer = Peer::start(Behaviour::Garbage(b"\xff\xfe junk".to_vec()));
    let mut c = connect(peer.port());
    assert_eq!(read_n(&mut c, 7), b"\xff\xfe junk");
    c.write_all(b"ok").unwrap();
    assert_eq!(read_n(&mut c, 2), b"ok");
}

#[test]
fn stop_reading_after_records_only_that_much() {
    let peer = Peer::start(Behaviour::StopReadingAfter(10));
    let mut c = connect(peer.port());
    c.write_all(&[1u8; 10]).unwrap();
    assert!(peer.wait_received_len(10, T));
    c.write_all(&[2u8; 10]).unwrap();
    // A bounded negative check: nothing more is read.
    assert!(!peer.wait_received_len(11, Duration::from_millis(100)));
    assert_eq!(peer.received_len(), 10);
}

#[test]
fn silent_peer_backs_up_the_client() {
    let peer = Peer::start(Behaviour::Silent);
    let mut c = connect(peer.port());
    assert!(peer.wait_accepts(1, T));
    c.set_nonblocking(true).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    let mut sent = 0usize;
    let full = wait_for(T, || match c.write(&chunk) {
        Ok(n) => {
            sent += n;
            None
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => Some(()),
        Err(e) => panic!("{e}"),
    });
    assert!(full.is_some(), "client never backed up after {sent} bytes");
    assert_eq!(peer.received_len(), 0);
    c.set_nonblocking(false).unwrap();
    // Stopping is bounded even with unread data, and the client sees the close.
    let t0 = Instant::now();
    peer.stop();
    assert!(t0.elapsed() < Duration::from_secs(1));
    let mut buf = [0u8; 16];
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
}

#[test]
fn close_connections_keeps_listening_and_send_reaches_the_client() {
    let peer = Peer::start(Behaviour::Sink);
    let mut c = connect(peer.port());
    assert!(peer.wait_accepts(1, T));
    peer.send(0, b"push").unwrap();
    peer.send_latest(b"!").unwrap();
    assert_eq!(read_n(&mut c, 5), b"push!");
    peer.close_connections();
    expect_closed(&mut c);
    assert!(peer.wait_all_closed(T));
    assert_eq!(
        peer.send(0, b"x").unwrap_err().kind(),
        ErrorKind::NotConnected
    );

    let mut c2 = connect(peer.port());
    c2.write_all(b"two").unwrap();
    assert!(peer.wait_until(T, |s| s.received.get(1).map(Vec::as_slice) == Some(b"two")));
}

#[test]
fn script_sees_lines_and_frames_and_can_reset() {
    let peer = Peer::start(Behaviour::script(|conn| {
        let hello = conn.read_line(T).expect("hello line");
        assert_eq!(hello, b"HELLO");
        conn.write_all(format!("WELCOME {}\n", conn.index()).as_bytes())
            .unwrap();
        let f = conn.read_frame(T).expect("frame");
        conn.write_frame(&f).unwrap();
        if conn.index() == 1 {
            conn.reset();
        }
    }));
    for i in 0..2 {
        let mut c = connect(peer.port());
        let mut msg = b"HELLO\r\n".to_vec();
        msg.extend(encode_length_prefixed(b"payload"));
        c.write_all(&msg).unwrap();
        let want = format!("WELCOME {i}\n");
        assert_eq!(read_n(&mut c, want.len()), want.as_bytes());
        assert_eq!(read_n(&mut c, 11), encode_length_prefixed(b"payload"));
        let mut buf = [0u8; 8];
        match (i, c.read(&mut buf)) {
            (0, Ok(0)) => {}
            (1, Err(e)) if e.kind() == ErrorKind::ConnectionReset => {}
            (_, r) => panic!("connection {i}: unexpected {r:?}"),
        }
    }
    let rec = peer.received();
    assert_eq!(rec.len(), 2);
    assert_eq!(rec[0].len(), 7 + 11);
}

#[test]
#[should_panic(expected = "behaviour panicked")]
fn a_panicking_script_fails_the_test() {
    let peer = Peer::start(Behaviour::script(|_conn| panic!("script assertion")));
    let mut c = connect(peer.port());
    expect_closed(&mut c);
    assert!(peer.wait_closed(0, T));
    peer.stop();
}

#[test]
fn script_is_stopped_with_the_peer() {
    let peer = Peer::start(Behaviour::script(|conn| {
        // Would wait a minute, but returns as soon as the peer stops.
        let _ = conn.read_some(Duration::from_secs(60));
        conn.pause(Duration::from_secs(60));
    }));
    let _c = connect(peer.port());
    assert!(peer.wait_accepts(1, T));
    let t0 = Instant::now();
    peer.stop();
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn set_behaviour_applies_to_later_connections() {
    let peer = Peer::start(Behaviour::AcceptThenClose);
    let mut c = connect(peer.port());
    expect_closed(&mut c);
    peer.set_behaviour(Behaviour::Echo);
    let mut c = connect(peer.port());
    c.write_all(b"e").unwrap();
    assert_eq!(read_n(&mut c, 1), b"e");
}

#[test]
fn wait_for_is_bounded() {
    let t0 = Instant::now();
    assert_eq!(wait_for(Duration::from_millis(30), || None::<()>), None);
    let e = t0.elapsed();
    assert!(
        e >= Duration::from_millis(30) && e < Duration::from_secs(1),
        "{e:?}"
    );
    let mut n = 0;
    assert_eq!(
        wait_for(T, || {
            n += 1;
            (n == 3).then_some(n)
        }),
        Some(3)
    );
    assert!(wait_until(T, || true));
}

#[test]
#[ignore = "needs redis-server"]
fn redis_server_helper() {
    let mut r = RedisServer::start().expect("redis-server on PATH");
    assert!(r.ping(T));
    assert!(r.endpoint().ends_with(&r.port().to_string()));
    let pid = r.pid().unwrap();

    // SIGSTOP: the kernel still completes the handshake, but nothing answers.
    r.stop_signal();
    let c = TcpStream::connect_timeout(&r.addr(), T);
    assert!(c.is_ok(), "connect to a stopped redis should succeed");
    assert!(!r.ping(Duration::from_millis(200)));
    r.cont_signal();
    assert!(r.ping(T));
    drop(c);

    let port = r.port();
    r.restart();
    assert_eq!(r.port(), port);
    assert_ne!(r.pid(), Some(pid));
    assert!(r.ping(T));

    r.kill();
    assert_eq!(
        TcpStream::connect(r.addr()).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
    r.relaunch();
    assert!(r.ping(T));

    // Drop kills it, even while stopped.
    let pid = r.pid().unwrap();
    r.stop_signal();
    drop(r);
    // SAFETY: probing a pid with signal 0.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    assert!(!alive, "redis-server {pid} still alive after drop");
}
