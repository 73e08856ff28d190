//! `relink-cat`: like `nc`, but it never gives up on the server.
//!
//! Run it with `cargo run --example cat -- [OPTIONS] <ENDPOINT>`, for instance against a local
//! redis-server:
//!
//! ```text
//! cargo run --example cat -- --status --heartbeat 'PING\r\n' --heartbeat-reply '+PONG' \
//!     tcp://127.0.0.1:6379
//! ```
//!
//! Every line typed on stdin becomes a frame (with `--codec lines` and `len32` the line without
//! its `\n` or `\r\n`; with `raw` the line as read, newline included). Frames typed while the
//! server is away wait in the outbox and go out, in order, once the link is Ready again.
//! Received frames go to stdout: one per line with `lines`, bytes as they came with `raw`, one
//! per line (lossy UTF-8) with `len32`.
//!
//! State changes go to stderr: a short human form by default, nothing with `--quiet`, and with
//! `--status` one machine-readable line per change plus a `metrics` line every
//! `--status-interval`:
//!
//! ```text
//! state from=Connected to=Ready cause=alive attempt=1 next_retry_ms=-
//! metrics state=Ready time_in_state_ms=812 attempt=1 consecutive_failures=0 ...
//! ```
//!
//! With `--tls` the link speaks TLS, verifying the server against the web roots, or against
//! `--ca FILE` (a PEM of a private CA), for the endpoint's host name or `--server-name NAME`;
//! `--cert FILE --key FILE` present a client certificate (mutual TLS). A TLS redis-server:
//!
//! ```text
//! cargo run --example cat -- --tls --ca ca.crt --server-name localhost tcp://127.0.0.1:6380
//! ```
//!
//! A failed handshake shows as `cause=tls-handshake`, with its reason on an `error` line.
//!
//! Frames the outbox refuses and frames abandoned are always reported on stderr. End of stdin,
//! or Ctrl-C, closes the link gracefully (flushing the outbox for up to a second) and exits 0.
//! A bad option exits 2 with a one-line message.

use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use relink::{
    Codec, ConfigError, Event, Heartbeat, Jitter, Link, Metrics, Ping, Predicate, ProofOfLife,
    RecvTimeoutError, SendError, Tls, Transition,
};

/// Exit status for a bad option or a configuration the builder refuses.
const EXIT_USAGE: u8 = 2;
/// Exit status when libzmq cannot make the socket.
const EXIT_FAILURE: u8 = 1;
/// How long a close may spend flushing the outbox.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for an event before the stop signals are checked again.
const TICK: Duration = Duration::from_millis(50);

/// A TCP client that keeps its connection alive: stdin to the server, the server to stdout.
#[derive(Debug, Parser)]
#[command(name = "relink-cat", bin_name = "relink-cat", version)]
struct Cli {
    /// The server: tcp://host:port (IPv6 in brackets: tcp://[::1]:6379).
    endpoint: String,

    /// How frames are cut on the wire.
    #[arg(long, value_enum, default_value_t = CodecArg::Lines)]
    codec: CodecArg,

    /// Heartbeat ping, written as is whatever the codec. Escapes: \r \n \t \\ \xNN.
    #[arg(long, value_name = "PAYLOAD", value_parser = parse_escaped)]
    heartbeat: Option<Escaped>,

    /// Time between heartbeat pings.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_duration,
          requires = "heartbeat")]
    heartbeat_interval: Duration,

    /// Silent heartbeat intervals tolerated before the connection is declared dead.
    #[arg(long, value_name = "N", default_value_t = 2, requires = "heartbeat")]
    max_missed: u32,

    /// Ping only when nothing was sent for an interval.
    #[arg(long, requires = "heartbeat")]
    idle_only: bool,

    /// Frames starting with this prefix are heartbeat replies: timed for the round trip and
    /// not printed (even when they answer a line you typed). Same escapes as --heartbeat.
    #[arg(long, value_name = "PREFIX", value_parser = parse_escaped, requires = "heartbeat")]
    heartbeat_reply: Option<Escaped>,

    /// Backoff delays grow from BASE to MAX, e.g. 100ms..5s.
    #[arg(long, value_name = "BASE..MAX", value_parser = parse_backoff)]
    backoff: Option<(Duration, Duration)>,

    /// Backoff jitter: full, none, decorrelated or prop:<F> (F in (0, 1]).
    #[arg(long, value_name = "MODE", value_parser = parse_jitter)]
    jitter: Option<Jitter>,

    /// Failures in a row before the link rests in Cooldown.
    #[arg(long, value_name = "N")]
    max_attempts: Option<u32>,

    /// How long Cooldown lasts before a probe.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    cooldown: Option<Duration>,

    /// Failed connects left to libzmq's own redial before relink's backoff takes over.
    #[arg(long, value_name = "N")]
    native_retries: Option<u32>,

    /// What makes a connection Ready: the TCP connect, or the first bytes from the server.
    #[arg(long, value_enum, value_name = "PROOF")]
    ready_when: Option<ReadyWhen>,

    /// Bound on one connection attempt.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    connect_timeout: Option<Duration>,

    /// libzmq's ZMQ_IMMEDIATE: relink redials after every drop itself.
    #[arg(long)]
    immediate: bool,

    /// Speak TLS, verifying the server (web roots, or --ca).
    #[arg(long)]
    tls: bool,

    /// Trust the CA certificates in this PEM file instead of the web roots.
    #[arg(long, value_name = "FILE", requires = "tls")]
    ca: Option<std::path::PathBuf>,

    /// A client certificate chain (PEM) for mutual TLS; needs --key.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "key"])]
    cert: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM); needs --cert.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "cert"])]
    key: Option<std::path::PathBuf>,

    /// The name the server's certificate must be valid for (and SNI). Defaults to the
    /// endpoint's host; required when it is an IP address.
    #[arg(long, value_name = "NAME", requires = "tls")]
    server_name: Option<String>,

    /// After stdin ends, keep printing what arrives for this long before closing.
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = parse_duration)]
    eof_wait: Duration,

    /// Machine-readable state and metrics lines on stderr.
    #[arg(long)]
    status: bool,

    /// Time between two `metrics` lines with --status.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_positive_duration,
          requires = "status")]
    status_interval: Duration,

    /// No state changes on stderr (refused and abandoned frames are still reported).
    #[arg(long, short, conflicts_with = "status")]
    quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CodecArg {
    /// Chunks as they come; writes as they are.
    Raw,
    /// Newline-terminated lines.
    Lines,
    /// A u32 big-endian length before each frame.
    Len32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ReadyWhen {
    /// The TCP connect.
    Connect,
    /// The first bytes from the server.
    Inbound,
}

/// Why the main loop stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// stdin reached its end.
    Eof,
    /// Ctrl-C (SIGINT).
    Interrupt,
    /// stdout is gone (e.g. `| head -1`).
    StdoutClosed,
}

/// Parses `250ms`, `2s` or `1.5s`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "bad duration {s:?}: give a unit, ms or s (250ms, 1.5s)"
        ));
    };
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0 && !number.starts_with('+'))
        .ok_or_else(|| format!("bad duration {s:?}: expected a number then ms or s"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("duration {s:?} is too long"))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("duration {s:?} must be greater than zero")),
        d => Ok(d),
    }
}

/// Parses `BASE..MAX`, e.g. `100ms..5s`.
fn parse_backoff(s: &str) -> Result<(Duration, Duration), String> {
    let (base, max) = s
        .split_once("..")
        .ok_or_else(|| format!("bad backoff {s:?}: expected BASE..MAX, e.g. 100ms..5s"))?;
    Ok((parse_duration(base)?, parse_duration(max)?))
}

/// Parses `full`, `none`, `decorrelated` or `prop:<F>`.
fn parse_jitter(s: &str) -> Result<Jitter, String> {
    match s {
        "full" => Ok(Jitter::Full),
        "none" => Ok(Jitter::None),
        "decorrelated" => Ok(Jitter::Decorrelated),
        _ => s
            .strip_prefix("prop:")
            .and_then(|f| f.parse::<f64>().ok())
            .map(Jitter::Proportional)
            .ok_or_else(|| {
                format!("bad jitter {s:?}: expected full, none, decorrelated or prop:<F>")
            }),
    }
}

/// Bytes given on the command line with escapes (a newtype: clap reads a bare `Vec<u8>` as
/// many values).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Escaped(Vec<u8>);

/// Turns `PING\r\n` (backslashes typed as such) into bytes. Escapes: `\r`, `\n`, `\t`, `\\`,
/// `\xNN`.
fn parse_escaped(s: &str) -> Result<Escaped, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let escape = match bytes.get(i + 1) {
            Some(b'r') => b'\r',
            Some(b'n') => b'\n',
            Some(b't') => b'\t',
            Some(b'\\') => b'\\',
            Some(b'x') => {
                let hex = bytes
                    .get(i + 2..i + 4)
                    .and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad escape in {s:?}: \\x needs two hex digits"))?;
                out.push(byte);
                i += 4;
                continue;
            }
            Some(_) => {
                let rest: String = s[i..].chars().take(2).collect();
                return Err(format!(
                    "bad escape {rest} in {s:?}: use \\r \\n \\t \\\\ or \\xNN"
                ));
            }
            None => return Err(format!("bad escape in {s:?}: a lone \\ at the end")),
        };
        out.push(escape);
        i += 2;
    }
    Ok(Escaped(out))
}

/// Parses the command line; a bad option is one line on stderr and status 2.
fn parse_cli() -> Result<Cli, ExitCode> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            let rendered = e.render().to_string();
            let message = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            eprintln!("relink-cat: {message} (try --help)");
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

fn build_link(cli: &Cli) -> Result<Link, ConfigError> {
    let codec = match cli.codec {
        CodecArg::Raw => Codec::Raw,
        CodecArg::Lines => Codec::lines(),
        CodecArg::Len32 => Codec::length_prefixed(),
    };
    let mut b = Link::builder(&cli.endpoint).codec(codec);
    if let Some(Escaped(ping)) = &cli.heartbeat {
        let mut hb = Heartbeat::new(cli.heartbeat_interval, Ping::Raw(ping.clone()))
            .max_missed(cli.max_missed)
            .idle_only(cli.idle_only);
        if let Some(Escaped(prefix)) = &cli.heartbeat_reply {
            hb = hb.reply(Predicate::starts_with(prefix.clone()));
        }
        b = b.heartbeat(hb);
    }
    if let Some((base, max)) = cli.backoff {
        b = b.backoff(base, max);
    }
    if let Some(j) = cli.jitter {
        b = b.jitter(j);
    }
    if let Some(n) = cli.max_attempts {
        b = b.max_attempts(n);
    }
    if let Some(d) = cli.cooldown {
        b = b.cooldown(d);
    }
    if let Some(n) = cli.native_retries {
        b = b.native_retries(n);
    }
    if let Some(r) = cli.ready_when {
        b = b.ready_when(match r {
            ReadyWhen::Connect => ProofOfLife::Connect,
            ReadyWhen::Inbound => ProofOfLife::Inbound,
        });
    }
    if let Some(d) = cli.connect_timeout {
        b = b.connect_timeout(d);
    }
    if cli.tls {
        let mut tls = Tls::new();
        if let Some(ca) = &cli.ca {
            tls = tls.ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&cli.cert, &cli.key) {
            tls = tls.client_auth_files(cert, key);
        }
        if let Some(name) = &cli.server_name {
            tls = tls.server_name(name);
        }
        b = b.tls(tls);
    }
    b.immediate(cli.immediate).build()
}

/// Where stderr lines go, and in which form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Report {
    Status,
    Human,
    Quiet,
}

impl Report {
    fn transition(self, t: &Transition) {
        let retry = t.next_retry.map(|d| d.as_millis());
        match self {
            Report::Status => eprintln!(
                "state from={} to={} cause={} attempt={} next_retry_ms={}",
                t.from.name(),
                t.to.name(),
                t.cause.as_str(),
                t.attempt,
                or_dash(retry)
            ),
            Report::Human => eprintln!(
                "relink-cat: {} -> {} ({}), attempt {}{}{}",
                t.from,
                t.to,
                t.cause,
                t.attempt,
                t.endpoint
                    .as_deref()
                    .map(|e| format!(", {e}"))
                    .unwrap_or_default(),
                retry
                    .map(|ms| format!(", next try in {ms} ms"))
                    .unwrap_or_default()
            ),
            Report::Quiet => {}
        }
    }

    fn refused(self, e: &SendError) {
        let (error, frame): (&str, &[u8]) = match e {
            SendError::Full(f) => ("full", f),
            SendError::Closed(f) => ("closed", f),
            SendError::Invalid(f, _) => ("invalid", f),
            _ => ("other", &[]),
        };
        match self {
            Report::Status => eprintln!(
                "refused error={error} bytes={} frame={:?} message={:?}",
                frame.len(),
                String::from_utf8_lossy(frame),
                e.to_string()
            ),
            _ => eprintln!(
                "relink-cat: frame refused ({e}): {:?}",
                String::from_utf8_lossy(frame)
            ),
        }
    }

    fn abandoned(self, frame: &[u8], reason: relink::AbandonReason) {
        match self {
            Report::Status => eprintln!(
                "abandoned reason={} bytes={} frame={:?}",
                reason.as_str(),
                frame.len(),
                String::from_utf8_lossy(frame)
            ),
            _ => eprintln!(
                "relink-cat: frame abandoned ({reason}): {:?}",
                String::from_utf8_lossy(frame)
            ),
        }
    }

    fn error(self, e: &relink::LinkError) {
        match self {
            Report::Status => eprintln!("error message={:?}", e.to_string()),
            _ => eprintln!("relink-cat: {e}"),
        }
    }
}

fn or_dash(v: Option<impl ToString>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".to_string())
}

/// The `metrics key=value ...` line.
fn metrics_line(m: &Metrics) -> String {
    format!(
        "metrics state={} time_in_state_ms={} attempt={} consecutive_failures={} connects={} \
         reconnects={} last_outage_ms={} next_retry_ms={} peer={} submitted={} sent={} \
         rejected={} abandoned={} outbox_frames={} outbox_bytes={} received={} bytes_in={} \
         bytes_out={} hb_sent={} hb_missed={} rtt_us={} paused={}",
        m.state.name(),
        m.time_in_state.as_millis(),
        m.attempt,
        m.consecutive_failures,
        m.connects,
        m.reconnects,
        or_dash(m.last_outage.map(|d| d.as_millis())),
        or_dash(m.next_retry_in.map(|d| d.as_millis())),
        or_dash(m.peer_addr),
        m.frames_submitted,
        m.frames_sent,
        m.frames_rejected,
        m.abandoned.total(),
        m.outbox_frames,
        m.outbox_bytes,
        m.frames_received,
        m.bytes_received,
        m.bytes_sent,
        m.heartbeats_sent,
        m.heartbeats_missed,
        or_dash(m.last_rtt.map(|d| d.as_micros())),
        m.reading_paused,
    )
}

/// Writes received frames to stdout in the codec's form.
struct Output {
    codec: CodecArg,
    out: io::Stdout,
}

impl Output {
    fn frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let mut out = self.out.lock();
        match self.codec {
            CodecArg::Raw => out.write_all(frame)?,
            CodecArg::Lines => {
                out.write_all(frame)?;
                out.write_all(b"\n")?;
            }
            CodecArg::Len32 => writeln!(out, "{}", String::from_utf8_lossy(frame))?,
        }
        out.flush()
    }
}

/// Reads stdin line by line on its own thread and sends each line as a frame.
fn spawn_reader(link: Link, codec: CodecArg, report: Report, stop: Sender<Stop>) {
    let spawned = thread::Builder::new().name("stdin".into()).spawn(move || {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match input.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("relink-cat: reading stdin: {e}");
                    break;
                }
            }
            let frame = match codec {
                CodecArg::Raw => line.clone(),
                CodecArg::Lines | CodecArg::Len32 => {
                    let end = line
                        .strip_suffix(b"\r\n")
                        .or_else(|| line.strip_suffix(b"\n"))
                        .unwrap_or(&line);
                    end.to_vec()
                }
            };
            if let Err(e) = link.send(frame) {
                report.refused(&e);
            }
        }
        let _ = stop.send(Stop::Eof);
    });
    if let Err(e) = spawned {
        eprintln!("relink-cat: cannot start the stdin reader: {e}");
        std::process::exit(EXIT_FAILURE.into());
    }
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let link = match build_link(&cli) {
        Ok(link) => link,
        Err(e @ ConfigError::Zmq(_)) => {
            eprintln!("relink-cat: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
        Err(e) => {
            eprintln!("relink-cat: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = if cli.status {
        Report::Status
    } else if cli.quiet {
        Report::Quiet
    } else {
        Report::Human
    };

    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<Stop>(4);
    let interrupts = AtomicUsize::new(0);
    let on_interrupt = stop_tx.clone();
    let handler = ctrlc::set_handler(move || {
        // A second Ctrl-C gives up on the graceful close.
        if interrupts.fetch_add(1, Ordering::SeqCst) > 0 {
            std::process::exit(130);
        }
        let _ = on_interrupt.try_send(Stop::Interrupt);
    });
    if let Err(e) = handler {
        eprintln!("relink-cat: cannot handle Ctrl-C: {e}");
    }
    spawn_reader(link.clone(), cli.codec, report, stop_tx);

    let mut output = Output {
        codec: cli.codec,
        out: io::stdout(),
    };
    let stop = run(&link, &cli, report, &mut output, &stop_rx);

    let last = link.close(CLOSE_TIMEOUT);
    // Everything the link had for us is in the channel now that it is closed.
    while let Ok(ev) = link.events().try_recv() {
        handle(ev, report, &mut output);
    }
    if report == Report::Status {
        eprintln!("{}", metrics_line(&last));
    }
    if stop == Stop::Interrupt && report == Report::Human {
        eprintln!("relink-cat: interrupted, closed");
    }
    ExitCode::SUCCESS
}

/// Prints events until stdin ends (plus `--eof-wait`), Ctrl-C, or stdout goes away.
fn run(
    link: &Link,
    cli: &Cli,
    report: Report,
    output: &mut Output,
    stop_rx: &Receiver<Stop>,
) -> Stop {
    let mut next_status = Instant::now() + cli.status_interval;
    let mut close_at: Option<Instant> = None;
    loop {
        match stop_rx.try_recv() {
            Ok(Stop::Eof) if close_at.is_none() => close_at = Some(Instant::now() + cli.eof_wait),
            Ok(Stop::Eof) => {}
            Ok(stop) => return stop,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
        }
        let now = Instant::now();
        if close_at.is_some_and(|t| now >= t) {
            return Stop::Eof;
        }
        if report == Report::Status && now >= next_status {
            eprintln!("{}", metrics_line(&link.metrics()));
            next_status += cli.status_interval;
            if next_status < now {
                next_status = now + cli.status_interval;
            }
        }
        let mut wait = TICK;
        if report == Report::Status {
            wait = wait.min(next_status.saturating_duration_since(now));
        }
        if let Some(t) = close_at {
            wait = wait.min(t.saturating_duration_since(now));
        }
        match link.events().recv_timeout(wait) {
            Ok(ev) => {
                if !handle(ev, report, output) {
                    return Stop::StdoutClosed;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Stop::Eof,
        }
    }
}

/// Reports one event; false when stdout is gone.
fn handle(ev: Event, report: Report, output: &mut Output) -> bool {
    match ev {
        Event::Frame(f) => return output.frame(&f).is_ok(),
        Event::State(t) => report.transition(&t),
        Event::Abandoned { frame, reason } => report.abandoned(&frame, reason),
        Event::Error(e) => report.error(&e),
        _ => {}
    }
    true
}
