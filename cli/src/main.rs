//! `relink-cat`: like `nc`, but it never gives up on the server.
//!
//! Install it with `cargo install --path cli` (from the repository's top), or run it with
//! `cargo run -p relink-cat -- [OPTIONS] <ENDPOINT>`, for instance against a local redis-server:
//!
//! ```text
//! relink-cat --status --heartbeat 'PING\r\n' --heartbeat-reply '+PONG' 127.0.0.1:6379
//! echo PING | relink-cat 127.0.0.1:6379        # prints +PONG, exits 0
//! ```
//!
//! `--framing` chooses the framing: `raw`, `lines` (with `--crlf` to end lines with `\r\n`),
//! `len32`, `len:W[:be|le]` (a W-byte length, W one of 1, 2, 3, 4, 8), `varint`, `delim:SEQ`
//! (frames ending in SEQ, e.g. `delim:\0` or `delim:\r\n`) and `resp` (redis: each line an
//! inline command, sent as an array of bulk strings).
//!
//! Every line typed on stdin becomes a frame (the line without its `\n` or `\r\n`; with `raw`
//! the line as read, newline included). Frames typed while the server is away wait in the
//! outbox and go out, in order, once the link is Ready again. Received frames go to stdout:
//! bytes as they came with `raw`, each RESP reply as its wire bytes with `resp`, one per line
//! otherwise (lossy UTF-8 except with `lines`).
//!
//! State changes go to stderr: a short human form by default, nothing with `--quiet`, and with
//! `--status` one machine-readable line per change plus a `metrics` line every
//! `--status-interval`:
//!
//! ```text
//! state from=Connected to=Ready cause=alive attempt=1 next_retry_ms=-
//! metrics state=Ready time_in_state_ms=812 attempt=1 consecutive_failures=0 ... down_for_ms=- tls_rejected=0 ... name="meter-17"
//! ```
//!
//! With `--tls` the link speaks TLS, verifying the server against the web roots, or against
//! `--ca FILE` (a PEM of a private CA), for the endpoint's host name or `--server-name NAME`;
//! `--cert FILE --key FILE` present a client certificate (mutual TLS). A TLS redis-server:
//!
//! ```text
//! relink-cat --tls --ca ca.crt --server-name localhost 127.0.0.1:6380
//! ```
//!
//! A failed handshake shows as `cause=tls-handshake`, with its reason on an `error` line; one
//! no retry can fix (a certificate not valid for the name, an unknown issuer, the server
//! refusing ours) as `cause=tls-rejected`, retried after the cooldown period.
//!
//! Lines are handed to the link a batch at a time while stdin has more at hand, and at once
//! when the next read would wait (a typed line goes as it is typed). Lines read faster than
//! the link sends them wait for room in the outbox, up to `--flush-timeout` at a time. Frames
//! the outbox still refuses and frames abandoned are always reported on stderr.
//!
//! With `--replies each` (the default with `--framing resp`) every line is a request, and the
//! server is taken to answer every line in order ([`RequestReply`], unless `--heartbeat-reply`
//! says it answers pings; the framing must cut frames, not `raw`): its reply is printed in the order the lines were read (other frames, such as RESP3 pushes, as they
//! come), a line that gets no reply within `--request-timeout` is reported on stderr
//! (`request-failed error=timed-out frame="GET k" ...` with `--status`), and the run ends once
//! every line got its reply or failed, with status 1 if any failed:
//!
//! ```text
//! printf 'SET k v\nGET k\n' | relink-cat --framing resp 127.0.0.1:6379   # +OK, $1 v; exits 0
//! ```
//!
//! Otherwise (`--replies stream`), at the end of stdin it waits for the outbox to flush (up to
//! `--flush-timeout`), then prints replies until nothing arrived for `--quiet-time` (socat's
//! `-t`), then closes. Ctrl-C closes
//! gracefully at once. `--give-up-after N` (attempts) or `--give-up-after 30s` (time without a
//! Ready connection) ends the run when the server stays away.
//!
//! Exit status: 0 every line was delivered (with `--replies each`: answered); 1 it gave up,
//! closed with frames refused or abandoned, a request failed or timed out (or libzmq failed); 2 a bad option; 130 Ctrl-C (SIGINT).

// The option docs below are clap's --help text, written for a terminal, not Markdown.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::io::{self, BufRead, BufReader, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use relink::config::{Jitter, ProofOfLife};
use relink::error::{BatchError, ConfigError, RecvTimeoutError, RequestError};
use relink::framing::{Delimited, LengthDelimited, Lines, Raw, Resp};
use relink::protocol::{Correlation, Ping, Predicate, RequestReply};
use relink::{Event, Heartbeat, Link, Metrics, Overflow, Pending, State, Tls, Transition};

/// Exit status for a bad option or a configuration the builder refuses.
const EXIT_USAGE: u8 = 2;
/// Exit status when it gave up, frames were not delivered, or libzmq cannot make the socket.
const EXIT_FAILURE: u8 = 1;
/// Exit status after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;
/// How long a close may spend flushing the outbox.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for an event before the stop signals are checked again.
const TICK: Duration = Duration::from_millis(50);

/// A TCP client that keeps its connection alive: stdin to the server, the server to stdout.
#[derive(Debug, Parser)]
#[command(name = "relink-cat", bin_name = "relink-cat", version)]
struct Cli {
    /// The server: host:port or tcp://host:port (IPv6 in brackets: [::1]:6379).
    endpoint: String,

    /// How frames are cut on the wire: raw, lines, len32, len:W[:be|le] (a W-byte length
    /// before each frame, W one of 1 2 3 4 8, big endian by default), varint (a LEB128/MQTT
    /// length), delim:SEQ (frames ending in SEQ; escapes \0 \r \n \t \\ \xNN) or resp (redis:
    /// each line an inline command).
    #[arg(long, value_name = "SPEC", default_value = "lines", value_parser = parse_framing)]
    framing: FramingArg,

    /// With --framing lines: end the lines sent with \r\n instead of \n.
    #[arg(long)]
    crlf: bool,

    /// Heartbeat ping, written as is whatever the framing. Escapes: \0 \r \n \t \\ \xNN.
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

    /// Attempts in a row before the link rests in Cooldown (with --give-up-after: gives up
    /// instead).
    #[arg(long, value_name = "N")]
    max_attempts: Option<u32>,

    /// Give up (exit 1) after N failed attempts in a row, or after a duration (30s) without a
    /// Ready connection. Default: never.
    #[arg(long, value_name = "N|DUR", value_parser = parse_give_up)]
    give_up_after: Option<GiveUp>,

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

    /// After stdin ends and the outbox is flushed, keep printing replies until nothing
    /// arrived for this long (socat's -t).
    #[arg(long, visible_alias = "eof-wait", value_name = "DUR", default_value = "500ms",
          value_parser = parse_duration)]
    quiet_time: Duration,

    /// After stdin ends, how long to wait for the outbox to flush before closing.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration)]
    flush_timeout: Duration,

    /// Machine-readable state and metrics lines on stderr.
    #[arg(long)]
    status: bool,

    /// The link's name, in its log lines, its `metrics` lines and its state lines. Defaults
    /// to the endpoint.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,

    /// Time between two `metrics` lines with --status.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_positive_duration,
          requires = "status")]
    status_interval: Duration,

    /// No state changes on stderr (refused and abandoned frames are still reported).
    #[arg(long, short, conflicts_with = "status")]
    quiet: bool,

    /// How lines and replies pair up: each (every line is a request: relink-cat waits for
    /// its reply, prints it, and exits 1 if any request failed or timed out; no quiet time)
    /// or stream (frames printed as they come, until --quiet-time after the end of stdin).
    /// Defaults to each with --framing resp, stream otherwise.
    #[arg(long, value_enum, value_name = "MODE")]
    replies: Option<Replies>,

    /// With --replies each: how long a line waits for its reply, from the moment it was read
    /// (time queued while the server is away counts).
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_positive_duration)]
    request_timeout: Duration,
}

/// How lines and replies pair up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Replies {
    /// Every line is a request, answered by one reply.
    Each,
    /// Frames are printed as they come.
    Stream,
}

impl Cli {
    /// Whether every line is a request whose reply is awaited.
    fn each_line_a_request(&self) -> bool {
        match self.replies {
            Some(r) => r == Replies::Each,
            None => self.framing == FramingArg::Resp,
        }
    }
}

/// The framing chosen with `--framing`, already built (a bad spec is refused while parsing).
#[derive(Clone, Debug, PartialEq, Eq)]
enum FramingArg {
    /// Chunks as they come; writes as they are.
    Raw,
    /// Newline-terminated lines.
    Lines,
    /// A length field before each frame: len32, len:W[:be|le], varint.
    Length(LengthDelimited),
    /// Frames ending in a delimiter.
    Delim(Delimited),
    /// RESP.
    Resp,
}

/// Parses `--framing`: `raw`, `lines`, `len32`, `len:W[:be|le]`, `varint`, `delim:SEQ`, `resp`.
fn parse_framing(s: &str) -> Result<FramingArg, String> {
    let length = |b: relink::framing::LengthDelimitedBuilder| b.build().map_err(|e| e.to_string());
    if let Some(seq) = s.strip_prefix("delim:") {
        let Escaped(delimiter) = parse_escaped(seq)?;
        let framing = Delimited::builder(delimiter)
            .build()
            .map_err(|e| format!("{e} (delim:SEQ needs a delimiter, e.g. delim:\\0)"))?;
        return Ok(FramingArg::Delim(framing));
    }
    if let Some(rest) = s.strip_prefix("len:") {
        let (width, order) = rest.split_once(':').unwrap_or((rest, "be"));
        let width: usize = width
            .parse()
            .map_err(|_| format!("len:W needs a width W of 1, 2, 3, 4 or 8, not {width:?}"))?;
        let b = LengthDelimited::builder().length_field_length(width);
        let b = match order {
            "be" => b.big_endian(),
            "le" => b.little_endian(),
            other => return Err(format!("byte order {other:?}: use be or le")),
        };
        return Ok(FramingArg::Length(
            length(b).map_err(|e| format!("{e} (len:W needs W of 1, 2, 3, 4 or 8)"))?,
        ));
    }
    match s {
        "raw" => Ok(FramingArg::Raw),
        "lines" => Ok(FramingArg::Lines),
        "len32" => Ok(FramingArg::Length(LengthDelimited::len32())),
        "varint" => Ok(FramingArg::Length(length(LengthDelimited::builder().varint())?)),
        "resp" => Ok(FramingArg::Resp),
        other => Err(format!(
            "unknown framing {other:?}: use raw, lines, len32, len:W[:be|le], varint, delim:SEQ or resp"
        )),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ReadyWhen {
    /// The TCP connect.
    Connect,
    /// The first bytes from the server.
    Inbound,
}

/// When to give up on a server that stays away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveUp {
    /// After this many failed attempts in a row.
    Attempts(u32),
    /// After this long without a Ready connection.
    After(Duration),
}

/// Parses `5` (attempts) or `30s` (a duration).
fn parse_give_up(s: &str) -> Result<GiveUp, String> {
    if let Ok(n) = s.parse::<u32>() {
        return match n {
            0 => Err("--give-up-after must be at least 1 attempt".to_string()),
            n => Ok(GiveUp::Attempts(n)),
        };
    }
    parse_positive_duration(s).map(GiveUp::After)
}

/// `host:port` becomes `tcp://host:port`; anything with a scheme is left to the builder.
fn endpoint_url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("tcp://{endpoint}")
    }
}

/// Why the main loop stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// stdin reached its end, the outbox flushed (or its wait ran out) and the quiet time
    /// passed.
    Eof,
    /// `--give-up-after` (or Cooldown with it) was reached.
    GaveUp,
    /// Ctrl-C (SIGINT).
    Interrupt,
    /// stdout is gone (e.g. `| head -1`).
    StdoutClosed,
    /// With `--replies each`: stdin ended and every line got its reply or failed.
    Answered,
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

/// Turns `PING\r\n` (backslashes typed as such) into bytes. Escapes: `\0`, `\r`, `\n`, `\t`,
/// `\\`, `\xNN`.
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
            Some(b'0') => 0,
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
                    "bad escape {rest} in {s:?}: use \\0 \\r \\n \\t \\\\ or \\xNN"
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
    let mut b = Link::builder(endpoint_url(&cli.endpoint));
    if let Some(name) = &cli.name {
        b = b.name(name);
    }
    let mut b = match &cli.framing {
        FramingArg::Raw => b.framing(Raw::new()),
        FramingArg::Lines => b.framing(Lines::builder().crlf(cli.crlf).build()?),
        FramingArg::Length(framing) => b.framing(framing.clone()),
        FramingArg::Delim(framing) => b.framing(framing.clone()),
        FramingArg::Resp => b.framing(Resp::new()),
    };
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
        b = b.reconnect(|r| {
            r.backoff_base = base;
            r.backoff_max = max;
        });
    }
    if let Some(j) = cli.jitter {
        b = b.reconnect(|r| r.jitter = j);
    }
    if let Some(n) = cli.max_attempts {
        b = b.reconnect(|r| r.max_attempts = Some(n));
    }
    if let Some(d) = cli.cooldown {
        b = b.reconnect(|r| r.cooldown = d);
    }
    if let Some(n) = cli.native_retries {
        b = b.reconnect(|r| r.native_retries = n);
    }
    if let Some(r) = cli.ready_when {
        b = b.ready_when(match r {
            ReadyWhen::Connect => ProofOfLife::Connect,
            ReadyWhen::Inbound => ProofOfLife::Inbound,
        });
    }
    if let Some(d) = cli.connect_timeout {
        b = b.socket(|s| s.connect_timeout = d);
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
    if cli.each_line_a_request() {
        let correlation = match cli.framing {
            FramingArg::Resp => Correlation::resp(),
            _ => Correlation::in_order(),
        };
        // The server answers every line, in order (unless the heartbeat's replies say it
        // answers pings); lines read faster than it answers wait for room, within their
        // deadline.
        if cli.heartbeat_reply.is_none() {
            b = b.protocol(RequestReply);
        }
        b = b
            .requests(|q| {
                q.correlation = Some(correlation);
                q.timeout = cli.request_timeout;
            })
            .delivery(|d| d.overflow = Overflow::Block(cli.request_timeout));
    } else {
        // Lines read faster than the link sends them (a file piped in) wait for room, as a
        // pipe's writer does, within the flush bound.
        b = b.delivery(|d| d.overflow = Overflow::Block(cli.flush_timeout));
    }
    b.socket(|s| s.immediate = cli.immediate).build()
}

/// Where stderr lines go, and in which form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Report {
    Status,
    Human,
    Quiet,
}

impl Report {
    /// A state change; the human form names the link when `--name` gave it one.
    fn transition(self, t: &Transition, name: Option<&str>) {
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
                "relink-cat: {}{} -> {} ({}), attempt {}{}{}",
                name.map(|n| format!("{n}: ")).unwrap_or_default(),
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

    /// Every frame of a batch the link refused (the writer's hand-over of stdin's lines), one
    /// line each, as for a single frame.
    fn refused_batch(self, e: BatchError) {
        let error = match e {
            BatchError::Full { .. } => "full",
            BatchError::Closed { .. } => "closed",
            BatchError::Invalid { .. } => "invalid",
            _ => "other",
        };
        let message = e.to_string();
        for frame in e.into_inner().iter() {
            match self {
                Report::Status => eprintln!(
                    "refused error={error} bytes={} frame={:?} message={message:?}",
                    frame.len(),
                    String::from_utf8_lossy(frame),
                ),
                _ => eprintln!(
                    "relink-cat: frame refused ({message}): {:?}",
                    String::from_utf8_lossy(frame)
                ),
            }
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

    fn request_failed(self, line: &[u8], e: &RequestError) {
        let error = match e {
            RequestError::TimedOut => "timed-out".to_string(),
            RequestError::Abandoned(reason) => reason.as_str().to_string(),
            RequestError::Full(_) => "full".to_string(),
            RequestError::Closed(_) => "closed".to_string(),
            RequestError::Invalid(..) => "invalid".to_string(),
            RequestError::AnswersUnknown(_) => "answers-unknown".to_string(),
            _ => "other".to_string(),
        };
        match self {
            Report::Status => eprintln!(
                "request-failed error={error} frame={:?} message={:?}",
                String::from_utf8_lossy(line),
                e.to_string()
            ),
            _ => eprintln!(
                "relink-cat: no reply to {:?}: {e}",
                String::from_utf8_lossy(line)
            ),
        }
    }

    fn error(self, e: &relink::error::LinkError) {
        match self {
            Report::Status => eprintln!("error message={:?}", e.to_string()),
            _ => eprintln!("relink-cat: {e}"),
        }
    }
}

fn or_dash(v: Option<impl ToString>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".to_string())
}

/// The `metrics key=value ...` line of the link named `name`.
fn metrics_line(name: &str, m: &Metrics) -> String {
    format!(
        "metrics state={} time_in_state_ms={} attempt={} native_redials={} consecutive_failures={} connects={} \
         reconnects={} last_outage_ms={} next_retry_ms={} peer={} submitted={} sent={} \
         confirmed={} unconfirmed={} resent={} rejected={} abandoned={} outbox_frames={} \
         outbox_bytes={} received={} bytes_in={} bytes_out={} hb_sent={} hb_missed={} rtt_us={} paused={} down_for_ms={} tls_rejected={} \
         cut={} unread={} bytes_discarded={} answered={} refused={} name={:?}",
        m.state.name(),
        m.time_in_state.as_millis(),
        m.attempt,
        m.native_redials,
        m.consecutive_failures,
        m.connects,
        m.reconnects,
        or_dash(m.last_outage.map(|d| d.as_millis())),
        or_dash(m.next_retry_in.map(|d| d.as_millis())),
        or_dash(m.peer_addr),
        m.frames_submitted,
        m.frames_sent,
        m.frames_confirmed,
        m.frames_unconfirmed,
        m.frames_resent,
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
        or_dash(m.down_for.map(|d| d.as_millis())),
        m.tls_rejected,
        m.frames_cut,
        m.frames_unread,
        m.bytes_discarded,
        m.frames_answered,
        m.handshakes_refused,
        name,
    )
}

/// Writes received frames to stdout in the framing's form.
struct Output {
    framing: FramingArg,
    out: io::Stdout,
    /// The name given with `--name`, for the human state lines.
    name: Option<String>,
}

impl Output {
    fn frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let mut out = self.out.lock();
        match self.framing {
            FramingArg::Raw | FramingArg::Resp => out.write_all(frame)?,
            FramingArg::Lines => {
                out.write_all(frame)?;
                out.write_all(b"\n")?;
            }
            FramingArg::Length(_) | FramingArg::Delim(_) => {
                writeln!(out, "{}", String::from_utf8_lossy(frame))?
            }
        }
        out.flush()
    }
}

/// With `--replies each`: prints each line's reply in the order the lines were read, and
/// reports the lines that got none; tells the main loop once the last one is done.
fn spawn_printer(
    requests: Receiver<(Vec<u8>, Pending)>,
    framing: FramingArg,
    report: Report,
    failures: Arc<AtomicUsize>,
    stop: Sender<Stop>,
) {
    let spawned = thread::Builder::new()
        .name("replies".into())
        .spawn(move || {
            // Replies only: the state lines are the main loop's.
            let mut output = Output {
                framing,
                out: io::stdout(),
                name: None,
            };
            for (line, pending) in requests {
                match pending.wait() {
                    Ok(reply) => {
                        if output.frame(&reply).is_err() {
                            let _ = stop.send(Stop::StdoutClosed);
                            return;
                        }
                    }
                    Err(e) => {
                        failures.fetch_add(1, Ordering::SeqCst);
                        report.request_failed(&line, &e);
                    }
                }
            }
            let _ = stop.send(Stop::Answered);
        });
    if let Err(e) = spawned {
        eprintln!("relink-cat: cannot start the reply printer: {e}");
        std::process::exit(EXIT_FAILURE.into());
    }
}

/// Reads stdin line by line on its own thread and sends each line as a frame, or as a
/// request handed to the printer when `requests` is given.
fn spawn_reader(
    link: Link,
    framing: FramingArg,
    report: Report,
    stop: Sender<Stop>,
    requests: Option<Sender<(Vec<u8>, Pending)>>,
) {
    let spawned = thread::Builder::new().name("stdin".into()).spawn(move || {
        // Lines go through a writer: a batch at a time while stdin has more at hand, and
        // handed over whenever the next read would wait (an interactive line goes at once).
        let mut input = BufReader::with_capacity(64 * 1024, io::stdin().lock());
        let mut writer = link.writer();
        let mut line = Vec::new();
        loop {
            if input.buffer().is_empty() {
                if let Err(e) = writer.flush() {
                    report.refused_batch(e);
                }
            }
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
            let frame = match framing {
                FramingArg::Raw => &line[..],
                _ => line
                    .strip_suffix(b"\r\n")
                    .or_else(|| line.strip_suffix(b"\n"))
                    .unwrap_or(&line),
            };
            if let Some(requests) = &requests {
                let frame = frame.to_vec();
                let pending = link.request(frame.clone());
                if requests.send((frame, pending)).is_err() {
                    break;
                }
            } else if let Err(e) = writer.send(frame) {
                report.refused_batch(e);
            }
        }
        if let Err(e) = writer.flush() {
            report.refused_batch(e);
        }
        // With requests, the printer says when the run is over.
        if requests.is_none() {
            let _ = stop.send(Stop::Eof);
        }
    });
    if let Err(e) = spawned {
        eprintln!("relink-cat: cannot start the stdin reader: {e}");
        std::process::exit(EXIT_FAILURE.into());
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if cli.crlf && cli.framing != FramingArg::Lines {
        eprintln!("relink-cat: --crlf needs --framing lines (try --help)");
        return ExitCode::from(EXIT_USAGE);
    }
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
            std::process::exit(EXIT_INTERRUPTED.into());
        }
        let _ = on_interrupt.try_send(Stop::Interrupt);
    });
    if let Err(e) = handler {
        eprintln!("relink-cat: cannot handle Ctrl-C: {e}");
    }
    let failures = Arc::new(AtomicUsize::new(0));
    let requests = cli.each_line_a_request().then(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        spawn_printer(
            rx,
            cli.framing.clone(),
            report,
            failures.clone(),
            stop_tx.clone(),
        );
        tx
    });
    spawn_reader(link.clone(), cli.framing.clone(), report, stop_tx, requests);

    let mut output = Output {
        framing: cli.framing.clone(),
        out: io::stdout(),
        name: cli.name.clone(),
    };
    let stop = run(&link, &cli, report, &mut output, &stop_rx);

    // Having given up, wait for nothing: queued frames are abandoned at once.
    let last = link.close(if stop == Stop::GaveUp {
        Duration::ZERO
    } else {
        CLOSE_TIMEOUT
    });
    // Everything the link had for us is in the channel now that it is closed.
    while let Ok(ev) = link.events().try_recv() {
        handle(ev, report, &mut output);
    }
    if report == Report::Status {
        eprintln!("{}", metrics_line(link.name(), &last));
    }
    let undelivered = last.frames_rejected + last.abandoned.total();
    match stop {
        Stop::Interrupt => {
            if report == Report::Human {
                eprintln!("relink-cat: interrupted, closed");
            }
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Stop::GaveUp => {
            if report != Report::Quiet {
                eprintln!(
                    "relink-cat: gave up after attempt {} ({} frames not delivered)",
                    last.attempt, undelivered
                );
            }
            ExitCode::from(EXIT_FAILURE)
        }
        Stop::Eof | Stop::StdoutClosed | Stop::Answered
            if undelivered > 0 || failures.load(Ordering::SeqCst) > 0 =>
        {
            ExitCode::from(EXIT_FAILURE)
        }
        Stop::Eof | Stop::StdoutClosed | Stop::Answered => ExitCode::SUCCESS,
    }
}

/// What the main loop keeps track of between events.
struct Progress {
    /// When stdin ended.
    eof_at: Option<Instant>,
    /// When the outbox was found empty after stdin ended.
    flushed_at: Option<Instant>,
    /// When the last frame arrived.
    last_frame_at: Option<Instant>,
    /// Since when the link has not been Ready (None while it is).
    not_ready_since: Option<Instant>,
}

impl Progress {
    /// Whether a transition ends the run under `--give-up-after`.
    fn gives_up_on(&mut self, t: &Transition, give_up: Option<GiveUp>, now: Instant) -> bool {
        match t.to {
            State::Ready => self.not_ready_since = None,
            _ if t.from == State::Ready => self.not_ready_since = Some(now),
            _ => {}
        }
        let failed = matches!(t.to, State::Backoff | State::Cooldown);
        match give_up {
            None => false,
            // With a give-up mode, Cooldown (--max-attempts) ends the run instead of cycling.
            Some(_) if t.to == State::Cooldown => true,
            Some(GiveUp::Attempts(n)) => failed && t.attempt >= n,
            Some(GiveUp::After(_)) => false,
        }
    }

    /// When the run ends by itself, if it is due to: the give-up time or the end of input.
    fn due(&mut self, link: &Link, cli: &Cli, now: Instant) -> Option<(Instant, Stop)> {
        let give_up = match (cli.give_up_after, self.not_ready_since) {
            (Some(GiveUp::After(d)), Some(since)) => Some((since + d, Stop::GaveUp)),
            _ => None,
        };
        let eof = self.eof_at.map(|eof_at| {
            if self.flushed_at.is_none() && link.metrics().outbox_frames == 0 {
                self.flushed_at = Some(now);
            }
            match self.flushed_at {
                Some(flushed) => {
                    let quiet_from = self.last_frame_at.map_or(flushed, |f| f.max(flushed));
                    (quiet_from + cli.quiet_time, Stop::Eof)
                }
                // Not flushed yet (checked again every tick): close at the flush timeout, the
                // frames left are abandoned.
                None => (eof_at + cli.flush_timeout, Stop::Eof),
            }
        });
        match (give_up, eof) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// Prints events until the input is done (stdin ended, outbox flushed, a quiet time without
/// replies), Ctrl-C, stdout goes away, or the give-up mode ends the run.
fn run(
    link: &Link,
    cli: &Cli,
    report: Report,
    output: &mut Output,
    stop_rx: &Receiver<Stop>,
) -> Stop {
    let start = Instant::now();
    let mut next_status = start + cli.status_interval;
    let mut p = Progress {
        eof_at: None,
        flushed_at: None,
        last_frame_at: None,
        not_ready_since: Some(start),
    };
    loop {
        match stop_rx.try_recv() {
            Ok(Stop::Eof) if p.eof_at.is_none() => p.eof_at = Some(Instant::now()),
            Ok(Stop::Eof) => {}
            Ok(stop) => return stop,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
        }
        let now = Instant::now();
        let due = p.due(link, cli, now);
        if let Some((at, stop)) = due {
            if now >= at {
                return stop;
            }
        }
        if report == Report::Status && now >= next_status {
            eprintln!("{}", metrics_line(link.name(), &link.metrics()));
            next_status += cli.status_interval;
            if next_status < now {
                next_status = now + cli.status_interval;
            }
        }
        let mut wait = TICK;
        if report == Report::Status {
            wait = wait.min(next_status.saturating_duration_since(now));
        }
        if let Some((at, _)) = due {
            wait = wait.min(at.saturating_duration_since(now));
        }
        match link.events().recv_timeout(wait) {
            Ok(ev) => {
                let now = Instant::now();
                match &ev {
                    Event::Frame(_) => p.last_frame_at = Some(now),
                    Event::State(t) if p.gives_up_on(t, cli.give_up_after, now) => {
                        handle(ev, report, output);
                        return Stop::GaveUp;
                    }
                    _ => {}
                }
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
        Event::State(t) => report.transition(&t, output.name.as_deref()),
        Event::Abandoned { frame, reason } => report.abandoned(&frame, reason),
        Event::Error(e) => report.error(&e),
        _ => {}
    }
    true
}
