//! The `relink-cat` binary run as a program: bad options, an echo peer, end of stdin and the
//! quiet time after it, exit codes, Ctrl-C, `host:port`, giving up, a server that comes up
//! late, and redis-server restarts.
//!
//! The test kit is relink's own (`tests/util` at the top of the repository).

#[path = "../../tests/util/mod.rs"]
mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use util::{Behaviour, Peer, RedisServer, Server};

/// Bound on anything that normally takes milliseconds (a connect, an echo, an exit).
const WAIT: Duration = Duration::from_secs(10);

/// The relink-cat binary cargo built for these tests.
fn cat_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_relink-cat"))
}

/// One output stream of the child, line by line, with everything seen so far kept for
/// failure messages.
struct Lines {
    rx: Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn start(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = crossbeam_channel::unbounded();
        thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim_end_matches(['\n', '\r']).to_string();
                        if tx.send(text).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Takes lines until one satisfies `pred`, waiting up to `timeout`.
    fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.rx.recv_deadline(deadline) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Takes every line left, until the stream ends (bounded).
    fn drain(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while let Ok(line) = self.rx.recv_deadline(deadline) {
            self.seen.push(line);
        }
    }

    fn text(&self) -> String {
        self.seen.join("\n")
    }
}

/// A running `relink-cat`, killed on drop if it is still running.
struct Cat {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines,
    stderr: Lines,
}

impl Cat {
    fn start(args: &[&str]) -> Cat {
        let mut child = Command::new(cat_binary())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn relink-cat");
        let stdin = child.stdin.take();
        let stdout = Lines::start(child.stdout.take().expect("piped stdout"));
        let stderr = Lines::start(child.stderr.take().expect("piped stderr"));
        Cat {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .expect("write to relink-cat's stdin");
    }

    /// Waits for a stdout line equal to `line`; panics with both streams if none comes.
    fn expect_stdout(&mut self, line: &str) {
        if self.stdout.wait_for(WAIT, |l| l == line).is_none() {
            panic!("no {line:?} on stdout\n{}", self.transcript());
        }
    }

    /// Waits for a stderr line starting with `prefix`; panics with both streams if none
    /// comes.
    fn expect_stderr(&mut self, prefix: &str) -> String {
        self.expect_stderr_where(prefix, |_| true)
    }

    /// Waits for a stderr line starting with `prefix` that satisfies `pred`.
    fn expect_stderr_where(&mut self, prefix: &str, pred: impl Fn(&str) -> bool) -> String {
        match self
            .stderr
            .wait_for(WAIT, |l| l.starts_with(prefix) && pred(l))
        {
            Some(l) => l,
            None => panic!(
                "no such stderr line starting {prefix:?}\n{}",
                self.transcript()
            ),
        }
    }

    fn interrupt(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) on our own child, which is not reaped before `finish` or drop.
        let rc = unsafe { libc::kill(pid, libc::SIGINT) };
        assert_eq!(rc, 0, "kill(SIGINT): {}", std::io::Error::last_os_error());
    }

    /// Writes `text` to stdin and closes it at once, as `echo text | relink-cat` does.
    fn pipe(&mut self, text: &str) {
        let mut stdin = self.stdin.take().expect("stdin is open");
        stdin
            .write_all(text.as_bytes())
            .expect("write to relink-cat's stdin");
    }

    /// Closes stdin (unless `keep_stdin`), waits up to `timeout` for the exit, and collects
    /// what is left of both streams. Returns the status and how long the exit took.
    fn finish(&mut self, keep_stdin: bool, timeout: Duration) -> (ExitStatus, Duration) {
        let start = Instant::now();
        if !keep_stdin {
            drop(self.stdin.take());
        }
        let status = util::wait_for(timeout, || self.child.try_wait().ok().flatten());
        let took = start.elapsed();
        let Some(status) = status else {
            panic!(
                "relink-cat still running {timeout:?} after it was told to stop\n{}",
                self.transcript()
            );
        };
        self.stdout.drain(WAIT);
        self.stderr.drain(WAIT);
        (status, took)
    }

    /// [`Cat::finish`] for a run that must succeed: asserts a zero exit within `bound` and
    /// returns everything relink-cat wrote on stderr.
    fn finish_within(&mut self, keep_stdin: bool, bound: Duration) -> String {
        let (status, took) = self.finish(keep_stdin, WAIT);
        assert!(status.success(), "{status}\n{}", self.transcript());
        assert!(took < bound, "exit took {took:?}");
        self.stderr.text()
    }

    fn transcript(&mut self) -> String {
        while let Ok(l) = self.stdout.rx.try_recv() {
            self.stdout.seen.push(l);
        }
        while let Ok(l) = self.stderr.rx.try_recv() {
            self.stderr.seen.push(l);
        }
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout.text(),
            self.stderr.text()
        )
    }
}

impl Drop for Cat {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs relink-cat with stdin closed and returns (status, stdout, stderr); bounded.
fn run_to_end(args: &[&str]) -> (ExitStatus, String, String) {
    let mut cat = Cat::start(args);
    let (status, _) = cat.finish(false, WAIT);
    (status, cat.stdout.text(), cat.stderr.text())
}

/// Asserts a refused command line: status 2, nothing on stdout, one line on stderr that
/// contains every one of `words`.
fn assert_usage_error(args: &[&str], words: &[&str]) {
    let (status, stdout, stderr) = run_to_end(args);
    assert_eq!(
        status.code(),
        Some(2),
        "status for {args:?}; stderr:\n{stderr}"
    );
    assert_eq!(stdout, "", "stdout for {args:?}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line for {args:?}:\n{stderr}"
    );
    for w in words {
        assert!(stderr.contains(w), "{w:?} missing from {stderr:?}");
    }
}

/// The `key=value` pairs of a status line, after its first word.
/// Asserts that `text` contains `part`, quoting all of it otherwise.
fn assert_has(text: &str, part: &str) {
    assert!(text.contains(part), "{text}");
}

fn fields(line: &str) -> Vec<(&str, &str)> {
    line.split(' ')
        .skip(1)
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .collect()
}

#[test]
fn an_unparsable_duration_exits_with_status_2_and_a_one_line_message() {
    let endpoint = util::refused_endpoint();
    assert_usage_error(
        &["--connect-timeout", "5x", &endpoint],
        &["--connect-timeout", "5x", "duration"],
    );
    assert_usage_error(
        &["--heartbeat", "p", "--heartbeat-interval", "300", &endpoint],
        &["--heartbeat-interval", "300"],
    );
}

#[test]
fn an_unknown_framing_exits_with_status_2_and_names_the_known_ones() {
    let endpoint = util::refused_endpoint();
    assert_usage_error(
        &["--framing", "morse", &endpoint],
        &["morse", "raw", "lines", "len32"],
    );
}

#[test]
fn a_bad_escape_in_the_heartbeat_exits_with_status_2_and_a_one_line_message() {
    let endpoint = util::refused_endpoint();
    assert_usage_error(&["--heartbeat", r"PING\q", &endpoint], &["escape", r"\q"]);
    assert_usage_error(&["--heartbeat", r"PING\x4", &endpoint], &["escape", r"\x"]);
    assert_usage_error(&["--heartbeat", r"PING\", &endpoint], &["escape"]);
}

#[test]
fn a_bad_endpoint_exits_with_status_2_and_the_builders_message() {
    let expected = relink::Link::builder("udp://127.0.0.1:6379")
        .build()
        .expect_err("a udp:// endpoint is refused")
        .to_string();
    assert_usage_error(&["udp://127.0.0.1:6379"], &[&expected]);
    assert_usage_error(&["127.0.0.1"], &["127.0.0.1"]);
}

#[test]
fn a_give_up_of_zero_attempts_exits_with_status_2() {
    let endpoint = util::refused_endpoint();
    assert_usage_error(&["--give-up-after", "0", &endpoint], &["--give-up-after"]);
    assert_usage_error(&["--give-up-after", "soon", &endpoint], &["soon"]);
}

#[test]
fn a_host_port_endpoint_without_a_scheme_is_dialled_over_tcp() {
    let peer = Peer::start(Behaviour::Echo);
    let host_port = peer.addr().to_string();
    let mut cat = Cat::start(&["--quiet", &host_port]);
    cat.type_line("plain");
    cat.expect_stdout("plain");
    let (status, _) = cat.finish(false, WAIT);
    assert_eq!(status.code(), Some(0), "{}", cat.transcript());
}

#[test]
fn piped_input_waits_for_a_late_reply_then_exits_zero() {
    // Answers each line 300 ms late, as a slow server does: the default quiet time (500 ms
    // after the outbox flushed) must still see the reply.
    let peer = Peer::start(Behaviour::script(|conn| {
        while let Ok(bytes) = conn.read_some(Duration::from_secs(5)) {
            if bytes.is_empty() {
                return;
            }
            conn.pause(Duration::from_millis(300));
            if conn.write_all(b"+PONG\n").is_err() {
                return;
            }
        }
    }));
    let mut cat = Cat::start(&["--quiet", &peer.addr().to_string()]);
    cat.pipe("PING\n");
    let (status, _) = cat.finish(false, WAIT);
    assert_eq!(cat.stdout.text(), "+PONG", "{}", cat.transcript());
    assert_eq!(status.code(), Some(0), "{}", cat.transcript());
    assert_eq!(peer.received_all(), b"PING\n");
}

#[test]
fn piped_lines_faster_than_the_server_reads_wait_for_room_and_all_arrive_in_order() {
    // The server reads nothing for a second: 300 000 lines overflow the outbox (100 000 frames)
    // long before it reads again. They wait for room, as a pipe's writer does, instead of being
    // refused (the run would then exit 1).
    let peer = Peer::start(Behaviour::script(|conn| {
        conn.pause(Duration::from_secs(1));
        conn.sink();
    }));
    let lines: String = (0..300_000).map(|i| format!("line-{i:06}\n")).collect();
    let mut cat = Cat::start(&["--status", "--quiet-time", "0ms", &peer.addr().to_string()]);
    cat.pipe(&lines);
    let (status, _) = cat.finish(false, WAIT);
    let stderr = cat.stderr.text();
    assert!(!stderr.contains("refused error="), "{}", cat.transcript());
    assert_eq!(status.code(), Some(0), "{}", cat.transcript());
    assert!(
        peer.wait_received_len(lines.len(), WAIT),
        "{}",
        cat.transcript()
    );
    assert!(
        peer.received_all() == lines.as_bytes(),
        "every line, once, in order"
    );
}

#[test]
fn give_up_after_n_attempts_exits_1_at_that_attempt() {
    let endpoint = util::refused_endpoint();
    let mut cat = Cat::start(&[
        "--status",
        "--backoff",
        "20ms..40ms",
        "--give-up-after",
        "3",
        &endpoint,
    ]);
    cat.type_line("never delivered");
    let (status, _) = cat.finish(true, WAIT);
    assert_eq!(status.code(), Some(1), "{}", cat.transcript());
    let stderr = cat.stderr.text();
    let last_state = stderr
        .lines()
        .rfind(|l| l.starts_with("state ") && l.contains(" to=Backoff "))
        .unwrap_or_default()
        .to_string();
    assert!(last_state.contains(" attempt=3 "), "{stderr}");
    assert!(!stderr.contains(" attempt=4 "), "{stderr}");
    assert_has(
        &stderr,
        r#"abandoned reason=shutdown bytes=15 frame="never delivered""#,
    );
}

#[test]
fn give_up_after_a_duration_exits_1_in_about_that_time() {
    let endpoint = util::refused_endpoint();
    let mut cat = Cat::start(&["--quiet", "--give-up-after", "400ms", &endpoint]);
    let (status, took) = cat.finish(true, WAIT);
    assert_eq!(status.code(), Some(1), "{}", cat.transcript());
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(5),
        "gave up after {took:?}"
    );
}

#[test]
fn max_attempts_with_give_up_ends_at_the_cooldown_instead_of_cycling() {
    let endpoint = util::refused_endpoint();
    let mut cat = Cat::start(&[
        "--status",
        "--backoff",
        "20ms..40ms",
        "--max-attempts",
        "2",
        "--cooldown",
        "100ms",
        "--give-up-after",
        "60s",
        &endpoint,
    ]);
    let (status, _) = cat.finish(true, WAIT);
    assert_eq!(status.code(), Some(1), "{}", cat.transcript());
    let stderr = cat.stderr.text();
    assert_has(&stderr, "to=Cooldown cause=refused attempt=2 ");
    assert!(!stderr.contains("cause=cooldown-over"), "{stderr}");
}

#[test]
fn a_configuration_the_builder_refuses_exits_with_status_2_and_its_message() {
    let endpoint = util::refused_endpoint();
    let expected = relink::Link::builder(&endpoint)
        .reconnect(|r| {
            r.backoff_base = Duration::from_secs(5);
            r.backoff_max = Duration::from_secs(1);
        })
        .build()
        .expect_err("max below base is refused")
        .to_string();
    assert_usage_error(&["--backoff", "5s..1s", &endpoint], &[&expected]);
}

#[test]
fn lines_on_stdin_come_back_on_stdout_from_an_echo_peer() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--framing", "lines", "--quiet", &peer.endpoint()]);
    cat.type_line("hello");
    cat.type_line("world");
    cat.expect_stdout("hello");
    cat.expect_stdout("world");
    assert_eq!(peer.received_all(), b"hello\nworld\n");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn status_prints_a_connected_to_ready_line_and_metrics_lines_with_every_field() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--status", "--status-interval", "200ms", &peer.endpoint()]);
    let ready = cat.expect_stderr("state from=Connected to=Ready ");
    let keys: Vec<&str> = fields(&ready).iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        ["from", "to", "cause", "attempt", "next_retry_ms"],
        "{ready}"
    );
    assert_eq!(fields(&ready)[2], ("cause", "alive"), "{ready}");
    assert_eq!(fields(&ready)[4], ("next_retry_ms", "-"), "{ready}");

    cat.type_line("counted");
    cat.expect_stdout("counted");
    let metrics = cat.expect_stderr("metrics state=Ready ");
    let keys: Vec<&str> = fields(&metrics).iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        [
            "state",
            "time_in_state_ms",
            "attempt",
            "native_redials",
            "consecutive_failures",
            "connects",
            "reconnects",
            "last_outage_ms",
            "next_retry_ms",
            "peer",
            "submitted",
            "sent",
            "confirmed",
            "unconfirmed",
            "resent",
            "rejected",
            "abandoned",
            "outbox_frames",
            "outbox_bytes",
            "received",
            "bytes_in",
            "bytes_out",
            "hb_sent",
            "hb_missed",
            "rtt_us",
            "paused",
            "down_for_ms",
            "tls_rejected",
            "cut",
            "unread",
            "bytes_discarded",
            "answered",
            "refused",
            "name"
        ],
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(" peer={} ", peer.addr())),
        "{metrics}"
    );
    assert!(
        metrics.ends_with(&format!(" name=\"{}\"", peer.endpoint())),
        "a link without --name is named after its endpoint: {metrics}"
    );
    // The echo came back, so the peer's TCP acknowledged the line: a later line says so.
    cat.expect_stderr_where("metrics state=Ready ", |l| {
        l.contains(" sent=1 confirmed=1 unconfirmed=0 resent=0 ")
    });
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn human_state_lines_carry_the_name_given() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--name", "meter-17", &peer.endpoint()]);
    cat.expect_stderr("relink-cat: meter-17: Connected -> Ready (alive)");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn status_metrics_lines_carry_the_name_given() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&[
        "--status",
        "--status-interval",
        "200ms",
        "--name",
        "meter-17",
        &peer.endpoint(),
    ]);
    let metrics = cat.expect_stderr("metrics state=Ready ");
    assert!(
        metrics.contains(" down_for_ms=- tls_rejected=0 cut=0 unread=0 bytes_discarded=0 "),
        "{metrics}"
    );
    assert!(metrics.ends_with(" name=\"meter-17\""), "{metrics}");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn stdin_eof_closes_the_link_and_exits_zero_promptly() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--status", &peer.endpoint()]);
    cat.expect_stderr("state from=Connected to=Ready ");
    cat.type_line("last words");
    cat.expect_stdout("last words");
    // The outbox is empty, so the close has nothing to flush: well under the 1 s flush bound.
    let stderr = cat.finish_within(false, Duration::from_secs(3));
    assert_has(&stderr, "state from=Ready to=Closed cause=closed");
    assert!(peer.wait_all_closed(WAIT), "the connection was not closed");
}

#[test]
fn stdin_eof_while_the_server_is_down_reports_the_queued_line_abandoned_and_exits_1() {
    let endpoint = util::refused_endpoint();
    let mut cat = Cat::start(&["--status", "--flush-timeout", "300ms", &endpoint]);
    cat.expect_stderr("state from=Connecting to=Backoff cause=refused ");
    cat.type_line("lost");
    // The flush waits 300 ms, the close at most 1 s more, before abandoning.
    let (status, took) = cat.finish(false, WAIT);
    assert_eq!(status.code(), Some(1), "{}", cat.transcript());
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    let stderr = cat.stderr.text();
    assert_has(&stderr, r#"abandoned reason=shutdown bytes=4 frame="lost""#);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("metrics state=Closed "), "{last}");
    assert!(
        last.contains(
            " submitted=1 sent=0 confirmed=0 unconfirmed=0 resent=0 rejected=0 abandoned=1 \
             outbox_frames=0 "
        ),
        "{last}"
    );
}

#[test]
fn ctrl_c_closes_gracefully_and_exits_130() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--status", &peer.endpoint()]);
    cat.expect_stderr("state from=Connected to=Ready ");
    cat.interrupt();
    let (status, took) = cat.finish(true, WAIT);
    assert_eq!(status.code(), Some(130), "{}", cat.transcript());
    assert!(took < Duration::from_secs(3), "exit took {took:?}");
    let stderr = cat.stderr.text();
    assert_has(&stderr, "state from=Ready to=Closed cause=closed");
}

#[test]
fn a_line_typed_before_the_server_is_up_is_delivered_when_it_comes_up() {
    let port = util::free_port();
    let endpoint = util::endpoint_for(port);
    let mut cat = Cat::start(&["--status", "--backoff", "50ms..200ms", &endpoint]);
    cat.type_line("early");
    cat.expect_stderr("state from=Connecting to=Backoff cause=refused ");
    let peer = Peer::start_on(port, Behaviour::Echo).expect("listen on the port cat dials");
    cat.expect_stderr("state from=Connected to=Ready ");
    cat.expect_stdout("early");
    assert_eq!(peer.received_all(), b"early\n");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

/// A heartbeat redis-server answers: `PING` every 200 ms, `+PONG` back.
const REDIS_HEARTBEAT: [&str; 6] = [
    "--heartbeat",
    r"PING\r\n",
    "--heartbeat-reply",
    "+PONG",
    "--heartbeat-interval",
    "200ms",
];

fn redis() -> RedisServer {
    RedisServer::start().expect("redis-server is not on PATH")
}

#[test]
#[ignore = "needs redis-server"]
fn ping_on_stdin_gets_pong_from_redis_server() {
    let server = redis();
    let mut cat = Cat::start(&["--framing", "lines", "--quiet", &server.endpoint()]);
    cat.type_line("PING");
    cat.expect_stdout("+PONG");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
#[ignore = "needs redis-server"]
fn echo_ping_piped_to_a_host_port_prints_pong_and_exits_zero() {
    let server = redis();
    let host_port = server.endpoint().trim_start_matches("tcp://").to_string();
    let mut cat = Cat::start(&["--quiet", &host_port]);
    cat.pipe("PING\n");
    let (status, _) = cat.finish(false, WAIT);
    assert_eq!(cat.stdout.text(), "+PONG", "{}", cat.transcript());
    assert_eq!(status.code(), Some(0), "{}", cat.transcript());
}

#[test]
#[ignore = "needs redis-server"]
fn a_redis_restart_goes_through_backoff_and_back_to_ready() {
    let mut server = redis();
    let endpoint = server.endpoint();
    let mut cat = Cat::start(
        &[
            &["--status"][..],
            &REDIS_HEARTBEAT,
            &[
                "--backoff",
                "100ms..1s",
                "--status-interval",
                "100ms",
                &endpoint,
            ],
        ]
        .concat(),
    );
    cat.expect_stderr("state from=Connected to=Ready ");
    // The heartbeat's replies are recognised: a round trip is measured.
    cat.expect_stderr_where("metrics state=Ready ", |l| !l.contains(" rtt_us=- "));
    server.restart();
    cat.expect_stderr("state from=Ready to=Backoff ");
    cat.expect_stderr("state from=Connected to=Ready ");
    // A command after the restart is answered on the new connection. (Not PING: its +PONG
    // is taken as a heartbeat reply; see the test below.)
    cat.type_line("ECHO after-restart");
    cat.expect_stdout("after-restart");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
    let last = cat.stderr.seen.last().cloned().unwrap_or_default();
    assert!(last.starts_with("metrics state=Closed "), "{last}");
    assert!(last.contains(" reconnects=1 "), "{last}");
}

#[test]
#[ignore = "needs redis-server"]
fn a_ping_typed_while_the_heartbeat_pings_redis_still_gets_its_pong() {
    let server = redis();
    let endpoint = server.endpoint();
    let mut cat = Cat::start(&[&["--quiet"][..], &REDIS_HEARTBEAT, &[&endpoint]].concat());
    cat.type_line("PING");
    cat.expect_stdout("+PONG");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

// ----- --framing specs -----------------------------------------------------------------------

#[test]
fn bad_framing_specs_exit_with_status_2_and_say_what_is_wrong() {
    let endpoint = util::refused_endpoint();
    assert_usage_error(
        &["--framing", "len:5", &endpoint],
        &["len:5", "1, 2, 3, 4 or 8"],
    );
    assert_usage_error(&["--framing", "len:2:xe", &endpoint], &["xe", "be or le"]);
    assert_usage_error(&["--framing", "len:two", &endpoint], &["two", "width"]);
    assert_usage_error(&["--framing", "delim:", &endpoint], &["delimiter", "empty"]);
    assert_usage_error(&["--framing", r"delim:\q", &endpoint], &["escape", r"\q"]);
    assert_usage_error(
        &["--framing", "raw", "--crlf", &endpoint],
        &["--crlf", "--framing lines"],
    );
}

#[test]
fn help_lists_every_framing_spec_and_crlf() {
    let out = Command::new(cat_binary())
        .arg("--help")
        .output()
        .expect("run relink-cat --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "raw",
        "lines",
        "len32",
        "len:W[:be|le]",
        "varint",
        "delim:SEQ",
        "resp",
        "--crlf",
    ] {
        assert!(help.contains(word), "{word} missing from --help:\n{help}");
    }
}

/// A peer that reads frames with a 2-byte big-endian length and answers each with its body
/// reversed, framed the same way.
fn len16_reversing_peer() -> Peer {
    Peer::start(Behaviour::script(|conn| loop {
        let Ok(head) = conn.read_exact(2, Duration::from_secs(30)) else {
            return;
        };
        let len = usize::from(u16::from_be_bytes([head[0], head[1]]));
        let Ok(mut body) = conn.read_exact(len, WAIT) else {
            return;
        };
        body.reverse();
        let mut out = (body.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        if conn.write_all(&out).is_err() {
            return;
        }
    }))
}

#[test]
fn len_2_be_writes_a_two_byte_big_endian_prefix_the_peer_checks() {
    let peer = len16_reversing_peer();
    let mut cat = Cat::start(&["--framing", "len:2:be", "--quiet", &peer.endpoint()]);
    cat.type_line("hello");
    cat.expect_stdout("olleh");
    assert_eq!(peer.received_all(), b"\0\x05hello");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn delim_nul_ends_each_frame_with_a_nul_byte() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--framing", r"delim:\0", "--quiet", &peer.endpoint()]);
    cat.type_line("one");
    cat.type_line("two");
    cat.expect_stdout("one");
    cat.expect_stdout("two");
    assert_eq!(peer.received_all(), b"one\0two\0");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn crlf_ends_the_lines_sent_with_cr_lf() {
    let peer = Peer::start(Behaviour::Echo);
    let mut cat = Cat::start(&["--framing", "lines", "--crlf", "--quiet", &peer.endpoint()]);
    cat.type_line("PING");
    cat.expect_stdout("PING");
    assert_eq!(peer.received_all(), b"PING\r\n");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
#[ignore = "needs redis-server"]
fn resp_sends_inline_lines_as_arrays_and_prints_whole_replies_from_redis_server() {
    let server = redis();
    let mut cat = Cat::start(&["--framing", "resp", "--quiet", &server.endpoint()]);
    // A value with a newline in it would break `lines`; RESP carries it as a bulk string.
    cat.type_line("SET relink-cat-key hello");
    cat.expect_stdout("+OK");
    cat.type_line("RPUSH relink-cat-list a b");
    cat.expect_stdout(":2");
    cat.type_line("LRANGE relink-cat-list 0 -1");
    // One reply, an array of two bulk strings, printed as its wire bytes.
    cat.expect_stdout("*2");
    cat.expect_stdout("$1");
    cat.expect_stdout("a");
    cat.expect_stdout("$1");
    cat.expect_stdout("b");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

fn tls_redis(kit: &util::tls::TlsKit, auth_clients: bool) -> util::tls::TlsRedis {
    util::tls::TlsRedis::start(kit, util::tls::ServerCert::Valid, auth_clients)
        .expect("redis-server is not on PATH")
}

#[test]
#[ignore = "needs redis-server"]
fn tls_through_a_tls_redis_server_and_back_to_ready_after_its_restart() {
    let kit = util::tls::TlsKit::new();
    let mut server = tls_redis(&kit, false);
    let ca = kit.files.ca.to_str().unwrap().to_string();
    let endpoint = server.endpoint();
    let mut cat = Cat::start(&[
        "--status",
        "--status-interval",
        "1s",
        "--backoff",
        "100ms..1s",
        "--tls",
        "--ca",
        &ca,
        "--server-name",
        "localhost",
        &endpoint,
    ]);
    cat.expect_stderr("state from=Connected to=Ready ");
    cat.type_line("PING");
    cat.expect_stdout("+PONG");
    server.restart();
    cat.expect_stderr("state from=Ready to=Backoff ");
    cat.expect_stderr("state from=Connected to=Ready ");
    cat.type_line("ECHO after-restart");
    cat.expect_stdout("after-restart");
    let (status, _) = cat.finish(false, WAIT);
    let transcript = cat.transcript();
    eprintln!("{transcript}");
    assert!(status.success(), "{status}\n{transcript}");
    assert!(!transcript.contains("tls-handshake"), "{transcript}");
    let last = cat.stderr.seen.last().cloned().unwrap_or_default();
    assert!(last.contains(" reconnects=1 "), "{last}");
}

#[test]
#[ignore = "needs redis-server"]
fn tls_a_wrong_server_name_is_a_tls_rejection_with_its_reason() {
    let kit = util::tls::TlsKit::new();
    let server = tls_redis(&kit, false);
    let ca = kit.files.ca.to_str().unwrap().to_string();
    let endpoint = server.endpoint();
    let mut cat = Cat::start(&[
        "--status",
        "--tls",
        "--ca",
        &ca,
        "--server-name",
        "redis.example",
        &endpoint,
    ]);
    cat.expect_stderr("error message=\"tls: server certificate is not valid for");
    cat.expect_stderr("state from=Connected to=Backoff cause=tls-rejected ");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
#[ignore = "needs redis-server"]
fn tls_mutual_tls_with_cert_and_key_gets_pong_from_a_redis_server_that_requires_them() {
    let kit = util::tls::TlsKit::new();
    let server = tls_redis(&kit, true);
    let ca = kit.files.ca.to_str().unwrap().to_string();
    let (cert, key) = &kit.files.client;
    let endpoint = server.endpoint();
    let mut cat = Cat::start(&[
        "--quiet",
        "--tls",
        "--ca",
        &ca,
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--server-name",
        "localhost",
        &endpoint,
    ]);
    cat.type_line("PING");
    cat.expect_stdout("+PONG");
    let (status, _) = cat.finish(false, WAIT);
    assert!(status.success(), "{status}\n{}", cat.transcript());
}

#[test]
fn tls_an_ip_endpoint_without_a_server_name_exits_with_status_2() {
    assert_usage_error(&["--tls", "tcp://127.0.0.1:1"], &["server_name"]);
}

// --- replies: every line a request ------------------------------------------------------

/// Answers each line `L` with `re L`, the first one 300 ms late.
fn replier() -> Behaviour {
    Behaviour::script(|conn| {
        let mut first = true;
        while let Ok(line) = conn.read_line(WAIT) {
            if first {
                conn.pause(Duration::from_millis(300));
                first = false;
            }
            let reply = [b"re ".as_slice(), &line, b"\n"].concat();
            if conn.write_all(&reply).is_err() {
                return;
            }
        }
    })
}

#[test]
fn with_replies_each_every_reply_is_printed_in_order_and_the_run_ends_at_the_last_one() {
    let peer = Peer::start(replier());
    // A quiet time longer than the wait allowed: the run must end on the last reply.
    let mut cat = Cat::start(&[
        "--quiet",
        "--replies",
        "each",
        "--quiet-time",
        "60s",
        &peer.endpoint(),
    ]);
    cat.pipe("a\nb\nc\n");
    let (status, _) = cat.finish(false, WAIT);
    assert_eq!(
        cat.stdout.text(),
        "re a\nre b\nre c",
        "{}",
        cat.transcript()
    );
    assert_eq!(status.code(), Some(0), "{}", cat.transcript());
}

#[test]
fn with_replies_each_a_line_without_a_reply_in_time_is_reported_and_exits_1() {
    let peer = Peer::start(Behaviour::Sink);
    let mut cat = Cat::start(&[
        "--status",
        "--replies",
        "each",
        "--request-timeout",
        "1s",
        &peer.endpoint(),
    ]);
    cat.pipe("GET k\n");
    let line = cat.expect_stderr("request-failed ");
    assert_has(&line, "error=timed-out");
    assert_has(&line, "frame=\"GET k\"");
    let (status, _) = cat.finish(false, WAIT);
    assert_eq!(status.code(), Some(1), "{}", cat.transcript());
}

#[test]
#[ignore = "needs redis-server"]
fn resp_lines_wait_for_each_reply_from_redis_server_and_exit_zero() {
    let server = redis();
    let mut cat = Cat::start(&[
        "--quiet",
        "--framing",
        "resp",
        "--quiet-time",
        "60s",
        &server.endpoint(),
    ]);
    cat.pipe("SET relink-cat-key v\nGET relink-cat-key\n");
    let (status, _) = cat.finish(false, WAIT);
    assert_eq!(cat.stdout.text(), "+OK\n$1\nv", "{}", cat.transcript());
    assert_eq!(status.code(), Some(0), "{}", cat.transcript());
}
