//! Request and reply against scripted peers and a real redis-server: every request ends in
//! exactly one outcome, and no reply ever reaches another request's caller.
//!
//! The redis scenarios are `#[ignore = "needs redis-server"]`; run them with
//! `cargo test --test request -- --ignored --nocapture` to see their counts.

mod util;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use relink::bytes::Bytes;
use relink::config::Looks;
use relink::error::RequestError;
use relink::framing::{Lines, Resp};
use relink::protocol::{Correlation, Redis, RequestReply};
use relink::{AbandonReason, Event, Link, Overflow, Pending, Redelivery, State};
use util::*;

/// Bound on waits for things that take milliseconds when all is well.
const T: Duration = Duration::from_secs(5);

/// A line peer: answers each line `N` (or `slow N`) with `reply N`, holding the reply to a
/// `slow` line for `delay` first. In order, as one connection's replies always are.
fn replier(delay: Duration) -> Behaviour {
    Behaviour::script(move |c| {
        while let Ok(line) = c.read_line(T) {
            let line = String::from_utf8_lossy(&line).into_owned();
            let n = match line.strip_prefix("slow ") {
                Some(n) => {
                    c.pause(delay);
                    n.to_string()
                }
                None => line,
            };
            if c.write_all(format!("reply {n}\n").as_bytes()).is_err() {
                return;
            }
        }
    })
}

/// A line link to `peer`, which answers every line in order.
fn lines_link(peer: &Peer) -> relink::Builder {
    Link::builder(peer.endpoint())
        .framing(Lines::new())
        .protocol(RequestReply)
}

#[test]
fn every_later_reply_goes_to_its_own_request_when_some_replies_come_late() {
    let peer = Peer::start(replier(ms(300)));
    let link = lines_link(&peer).build().unwrap();
    // Connected first: the short deadlines below are for replies, not for the connect.
    Watch::new(&link).until_state(State::Ready, T);
    // Every tenth request is slow and has a deadline shorter than its reply's delay.
    let pending: Vec<(usize, Pending)> = (0..100)
        .map(|i| {
            let p = if i % 10 == 3 {
                link.request_within(format!("slow {i}"), ms(100))
            } else {
                link.request_within(i.to_string(), Duration::from_secs(30))
            };
            (i, p)
        })
        .collect();
    let (mut answered, mut timed_out) = (0, 0);
    for (i, p) in pending {
        match p.wait() {
            Ok(reply) => {
                assert_eq!(reply, format!("reply {i}").into_bytes(), "request {i}");
                answered += 1;
            }
            Err(RequestError::TimedOut) => {
                assert_eq!(i % 10, 3, "only the slow requests time out");
                timed_out += 1;
            }
            Err(e) => panic!("request {i}: {e}"),
        }
    }
    let m = link.metrics();
    eprintln!(
        "late replies: {answered} answered, {timed_out} timed out, {} late replies dropped",
        m.replies_late
    );
    assert_eq!((answered, timed_out), (90, 10));
    assert!(wait_until(T, || link.metrics().replies_late == 10));
    assert_eq!(link.metrics().requests_outstanding, 0);
    while let Ok(ev) = link.events().try_recv() {
        assert!(
            !matches!(ev, Event::Frame(_)),
            "a reply leaked as an event: {ev:?}"
        );
    }
    link.close(T);
}

#[test]
fn replies_by_id_in_any_order_reach_their_own_callers() {
    // Reads batches of ten `id:word` lines and answers each batch backwards: `id:WORD`.
    let peer = Peer::start(Behaviour::script(|c| loop {
        let mut batch = Vec::new();
        for _ in 0..10 {
            match c.read_line(T) {
                Ok(l) => batch.push(String::from_utf8_lossy(&l).into_owned()),
                Err(_) => return,
            }
        }
        for l in batch.iter().rev() {
            let (id, word) = l.split_once(':').unwrap();
            if c.write_all(format!("{id}:{}\n", word.to_uppercase()).as_bytes())
                .is_err()
            {
                return;
            }
        }
    }));
    let id = |f: &[u8]| f.iter().position(|b| *b == b':').map(|i| f[..i].to_vec());
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .requests(|q| q.correlation = Some(Correlation::by_id(id, id)))
        .build()
        .unwrap();
    let pending: Vec<_> = (0..200)
        .map(|i| link.request(format!("{i}:word{i}")))
        .collect();
    let mut answered = 0;
    for (i, p) in pending.into_iter().enumerate() {
        assert_eq!(p.wait().unwrap(), format!("{i}:WORD{i}").into_bytes());
        answered += 1;
    }
    eprintln!("out of order by id: {answered} of 200 answered by their own replies");
    assert_eq!(answered, 200);
    let refused = link.request("no id").wait().unwrap_err();
    assert_eq!(refused, RequestError::NoId(Bytes::from_static(b"no id")));
    link.close(T);
}

#[test]
fn a_request_is_refused_at_the_call_where_the_link_does_not_know_what_the_peer_answers() {
    let peer = Peer::start(Behaviour::Echo);
    // A framing alone: an echo of a sent line could be taken for a request's reply.
    let link = Link::builder(peer.endpoint())
        .framing(Lines::new())
        .build()
        .unwrap();
    let err = link.request("GET k").wait().unwrap_err();
    assert_eq!(
        err,
        RequestError::AnswersUnknown(Bytes::from_static(b"GET k"))
    );
    let text = err.to_string();
    assert!(
        text.contains("protocol::RequestReply") && text.contains("Correlation::by_id"),
        "the error names the fix: {text}"
    );
    assert!(!err.may_have_been_processed());
    assert_eq!(err.into_frame().as_deref(), Some(&b"GET k"[..]));
    assert_eq!(
        link.metrics().requests_submitted,
        0,
        "nothing reached the link"
    );
    link.close(T);
}

#[test]
fn requests_after_flushed_sends_get_their_own_replies_from_a_peer_that_answers_every_line() {
    // The peer echoes every line: the echoes of the sends confirm them, and each request's
    // echo is its reply; none is taken for another's.
    for run in 0..10 {
        let peer = Peer::start(Behaviour::Echo);
        let link = lines_link(&peer).build().unwrap();
        for i in 0..100 {
            link.send(format!("send-{run}-{i}")).unwrap();
        }
        link.flush(T).unwrap();
        for j in 0..10 {
            let line = format!("request-{run}-{j}");
            let reply = link.request_within(line.clone(), T).wait().unwrap();
            assert_eq!(reply, line.into_bytes(), "run {run}");
        }
        let m = link.close(T);
        assert_eq!(
            m.answers_consumed, 100,
            "run {run}: every send's echo consumed"
        );
    }
}

/// Frames and requests go through one intake; on the wire each keeps the order of its calls
/// (a request waiting for room in the requests' window holds back no frame, so the two lines
/// are not merged into one).
#[test]
fn frames_and_requests_called_together_leave_in_the_order_of_their_calls() {
    let (seen, lines) = std::sync::mpsc::channel::<Vec<u8>>();
    let peer = Peer::start(Behaviour::script(move |c| {
        while let Ok(line) = c.read_line(T) {
            let reply = [&line[..], b"\n"].concat();
            let _ = seen.send(line);
            if c.write_all(&reply).is_err() {
                return;
            }
        }
    }));
    let link = lines_link(&peer).build().unwrap();
    // Called before the link is up, so that they wait in the intake together.
    let (mut pending, mut called) = (Vec::new(), Vec::new());
    for i in 0..300 {
        if i % 3 == 0 {
            let line = format!("r{i}");
            pending.push((line.clone(), link.request(line.clone())));
            called.push(line);
        } else {
            let line = format!("f{i}");
            link.send(line.clone()).unwrap();
            called.push(line);
        }
    }
    for (line, p) in pending {
        assert_eq!(p.wait().unwrap(), line.into_bytes());
    }
    let got: Vec<String> = (0..called.len())
        .map(|_| String::from_utf8(lines.recv_timeout(T).unwrap()).unwrap())
        .collect();
    assert_eq!(got, called, "the peer read them in the order of the calls");
    link.close(T);
}

#[test]
fn under_either_looks_setting_each_request_gets_its_reply_and_each_push_comes_in_turn() {
    let peer = Peer::start(Behaviour::script(|c| {
        while let Ok(line) = c.read_line(T) {
            let out = format!("{}\n>push\n", String::from_utf8_lossy(&line));
            if c.write_all(out.as_bytes()).is_err() {
                return;
            }
        }
    }));
    // `Never`: every wait finds nothing at first and sleeps, so each reply and each push
    // reaches a caller only through a wake-up. `Learnt`: the waits look first.
    for looks in [Looks::Never, Looks::Learnt] {
        let link = lines_link(&peer)
            .requests(|q| {
                q.correlation = Some(Correlation::in_order_except(|f| f.starts_with(b">")))
            })
            .looks(looks)
            .build()
            .unwrap();
        for i in 0..200 {
            let reply = link.request_within(format!("q{i}"), T).wait().unwrap();
            assert_eq!(
                reply,
                format!("q{i}").into_bytes(),
                "{looks:?}: request {i}"
            );
            let push = loop {
                if let Event::Frame(f) = link.events().recv_timeout(T).unwrap() {
                    break f;
                }
            };
            assert_eq!(push, &b">push"[..], "{looks:?}: push {i}");
        }
        link.close(T);
    }
}

#[test]
fn pushes_between_replies_are_delivered_as_events() {
    let peer = Peer::start(Behaviour::script(|c| {
        let mut n = 0;
        while let Ok(line) = c.read_line(T) {
            let out = format!(
                ">push {n}\n{}\n>push {n}b\n",
                String::from_utf8_lossy(&line)
            );
            n += 1;
            if c.write_all(out.as_bytes()).is_err() {
                return;
            }
        }
    }));
    let link = lines_link(&peer)
        .requests(|q| q.correlation = Some(Correlation::in_order_except(|f| f.starts_with(b">"))))
        .build()
        .unwrap();
    let pending: Vec<_> = (0..50).map(|i| link.request(format!("q{i}"))).collect();
    for (i, p) in pending.into_iter().enumerate() {
        assert_eq!(p.wait().unwrap(), format!("q{i}").into_bytes());
    }
    let mut pushes = Vec::new();
    while pushes.len() < 100 {
        if let Event::Frame(f) = link.events().recv_timeout(T).unwrap() {
            pushes.push(f);
        }
    }
    assert!(pushes.iter().all(|p| p.starts_with(b">push ")));
    assert_eq!(pushes[0], &b">push 0"[..]);
    link.close(T);
}

#[test]
fn a_request_queued_through_an_outage_expires_counting_the_time_queued() {
    let link = Link::builder(refused_endpoint())
        .framing(Lines::new())
        .protocol(RequestReply)
        .requests(|q| q.timeout = ms(200))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = link.request("GET k").wait().unwrap_err();
    eprintln!("expired after {:?}", started.elapsed());
    assert_eq!(err, RequestError::Abandoned(AbandonReason::Expired));
    assert!(!err.may_have_been_processed());
    link.close(T);
}

/// A peer that reads one line and closes, unanswered, on its first connection, and answers
/// every line on the later ones.
fn drops_the_first_request() -> Behaviour {
    Behaviour::script(|c| {
        if c.index() == 0 {
            let _ = c.read_line(T);
            return;
        }
        while let Ok(line) = c.read_line(T) {
            let reply = [b"re ".as_slice(), &line, b"\n"].concat();
            if c.write_all(&reply).is_err() {
                return;
            }
        }
    })
}

#[test]
fn report_fails_a_request_whose_connection_dropped_as_maybe_processed() {
    let peer = Peer::start(drops_the_first_request());
    let link = lines_link(&peer)
        .requests(|q| q.redelivery = Redelivery::Report)
        .build()
        .unwrap();
    let err = link.request("SET k v").wait().unwrap_err();
    assert_eq!(err, RequestError::Abandoned(AbandonReason::ConnectionLost));
    assert!(err.may_have_been_processed());
    assert_eq!(link.request("again").wait().unwrap(), &b"re again"[..]);
    link.close(T);
}

#[test]
fn resend_answers_a_request_whose_connection_dropped_on_the_next_one() {
    let peer = Peer::start(drops_the_first_request());
    let link = lines_link(&peer)
        .requests(|q| q.redelivery = Redelivery::Resend)
        .build()
        .unwrap();
    assert_eq!(link.request("SET k v").wait().unwrap(), &b"re SET k v"[..]);
    assert_eq!(peer.accept_count(), 2);
    link.close(T);
}

#[test]
fn past_the_window_a_request_is_refused_with_its_frame() {
    let peer = Peer::start(Behaviour::Sink);
    let link = lines_link(&peer)
        .requests(|q| {
            q.limit_frames = 2;
            q.limit_bytes = 1024;
        })
        .delivery(|d| d.overflow = Overflow::RejectNew)
        .build()
        .unwrap();
    let _a = link.request("a");
    let _b = link.request("b");
    let err = link.request("c").wait().unwrap_err();
    assert_eq!(err.into_frame().as_deref(), Some(&b"c"[..]));
    link.close(ms(100));
}

#[test]
fn close_ends_every_outstanding_request_and_later_ones_are_refused() {
    let peer = Peer::start(Behaviour::Sink);
    let link = lines_link(&peer).build().unwrap();
    let pending: Vec<_> = (0..5).map(|i| link.request(format!("q{i}"))).collect();
    link.close(ms(200));
    for p in pending {
        assert_eq!(
            p.wait().unwrap_err(),
            RequestError::Abandoned(AbandonReason::Shutdown)
        );
    }
    assert_eq!(
        link.request("late").wait().unwrap_err(),
        RequestError::Closed(Bytes::from_static(b"late"))
    );
    assert_eq!(link.state(), State::Closed);
}

#[test]
fn an_async_request_is_answered_on_any_executor() {
    let peer = Peer::start(replier(ms(0)));
    let link = lines_link(&peer).build().unwrap();
    let mut exec = TestExec::new();
    let reply = exec
        .block_on(link.request("7"), T)
        .expect("answered in time");
    assert_eq!(reply.unwrap(), &b"reply 7"[..]);
    let pending = link.request("8");
    assert_eq!(exec.block_on(pending, T).unwrap().unwrap(), &b"reply 8"[..]);
    link.close(T);
}

// --- redis-server -----------------------------------------------------------------------

/// A redis-server the scenario kills and starts again: plaintext or TLS.
trait Restart {
    /// A link to it, with RESP framing (and TLS, for a TLS server).
    fn builder(&self) -> relink::Builder;
    /// SIGKILL, then start again on the same port with the same data.
    fn restart(&mut self);
    /// SIGSTOP: the server answers nothing until it is killed.
    fn freeze(&self);
}

impl Restart for RedisServer {
    fn builder(&self) -> relink::Builder {
        Link::builder(self.endpoint()).framing(Resp::new())
    }
    fn restart(&mut self) {
        Server::restart(self)
    }
    fn freeze(&self) {
        self.stop_signal()
    }
}

/// A TLS-only redis-server and the PKI its certificate comes from.
struct TlsServer(util::tls::TlsKit, util::tls::TlsRedis);

impl Restart for TlsServer {
    fn builder(&self) -> relink::Builder {
        Link::builder(self.1.named_endpoint())
            .framing(Resp::new())
            .tls(relink::Tls::new().ca_pem(&self.0.pki.ca.cert))
    }
    fn restart(&mut self) {
        self.1.restart()
    }
    fn freeze(&self) {
        self.1.stop_signal()
    }
}

fn tls_server() -> TlsServer {
    let kit = util::tls::TlsKit::new();
    let redis = util::tls::TlsRedis::start_persistent(&kit).expect("redis-server on PATH");
    TlsServer(kit, redis)
}

/// The outcome of each of `n` pipelined `SET key:i i` against `server`, SIGKILLed and
/// restarted twice on its way: after the first quarter is submitted and after the first three
/// fifths are, each time frozen first (SIGSTOP) until the link has written requests it will
/// not see answered, so that requests are in flight at each kill.
///
/// The link's opening is a `PING` answered `+PONG`: a restarted redis-server accepts
/// connections while it loads its append-only file and answers `-LOADING` until then, so
/// requests (resent ones first) wait until it serves.
fn sets_through_two_kills(
    server: &mut dyn Restart,
    policy: Redelivery,
    n: usize,
) -> Vec<Result<Bytes, RequestError>> {
    let link = server
        .builder()
        .protocol(Redis::new().open_with(["PING"]))
        .handshake_timeout(ms(300))
        .requests(|q| {
            q.correlation = Some(Correlation::resp());
            q.redelivery = policy;
            q.timeout = Duration::from_secs(60);
            q.limit_frames = 1024;
            q.limit_bytes = 4 << 20;
        })
        .delivery(|d| d.overflow = Overflow::Block(Duration::from_secs(60)))
        .build()
        .unwrap();
    let mut watch = Watch::new(&link);
    watch.until_state(State::Ready, T);
    let mut pending: Vec<Pending> = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        pending.push(link.request(format!("SET key:{i} {i}")));
        i += 1;
        if i == n / 4 || i == n * 3 / 5 {
            // Frozen, the server answers nothing more: keep submitting until the link has
            // written requests it will never see answered, then kill it under them.
            server.freeze();
            let written = wait_until(T, || {
                if link.metrics().requests_written > 0 {
                    return true;
                }
                if i < n {
                    pending.push(link.request(format!("SET key:{i} {i}")));
                    i += 1;
                }
                false
            });
            assert!(written, "no request written to the frozen server");
            server.restart();
            watch.until_state(State::Ready, T);
        }
    }
    let outcomes: Vec<_> = pending.into_iter().map(Pending::wait).collect();
    let m = link.close(T);
    eprintln!(
        "{policy:?}: reconnects {}, answered {}, failed {}",
        m.reconnects, m.requests_answered, m.requests_failed
    );
    outcomes
}

/// Which of the keys `key:0..n` the server holds, asked through a fresh link.
fn present_keys(server: &dyn Restart, n: usize) -> Vec<bool> {
    let link = server
        .builder()
        .protocol(RequestReply)
        .requests(|q| q.correlation = Some(Correlation::resp()))
        .delivery(|d| d.overflow = Overflow::Block(T))
        .build()
        .unwrap();
    let pending: Vec<_> = (0..n)
        .map(|i| link.request(format!("EXISTS key:{i}")))
        .collect();
    let present = pending
        .into_iter()
        .map(|p| match &p.wait().unwrap()[..] {
            b":1\r\n" => true,
            b":0\r\n" => false,
            other => panic!("EXISTS answered {:?}", String::from_utf8_lossy(other)),
        })
        .collect();
    link.close(T);
    present
}

const SETS: usize = 20_000;

/// With resend: every request answered `+OK`, every key present.
fn resend_scenario(server: &mut dyn Restart, what: &str) {
    let outcomes = sets_through_two_kills(server, Redelivery::Resend, SETS);
    let answered = outcomes.iter().filter(|o| o.is_ok()).count();
    let present = present_keys(server, SETS);
    let held = present.iter().filter(|p| **p).count();
    eprintln!("{what} resend: {answered} of {SETS} answered, {held} keys present");
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.as_deref(), Ok(&b"+OK\r\n"[..]), "SET key:{i}");
    }
    assert_eq!(held, SETS);
}

/// With report: every request answered `+OK` has its key; every missing key's request failed
/// as "may have been processed".
fn report_scenario(server: &mut dyn Restart, what: &str) {
    let outcomes = sets_through_two_kills(server, Redelivery::Report, SETS);
    let present = present_keys(server, SETS);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (i, (o, held)) in outcomes.iter().zip(&present).enumerate() {
        let kind = match (o, held) {
            (Ok(r), true) if r == &b"+OK\r\n"[..] => "answered, present",
            (Ok(r), _) => panic!("SET key:{i} answered {:?}", String::from_utf8_lossy(r)),
            (Err(e), true) => {
                assert!(e.may_have_been_processed(), "SET key:{i}: {e}");
                "failed, present (processed before the drop)"
            }
            (Err(e), false) => {
                assert!(e.may_have_been_processed(), "SET key:{i}: {e}");
                "failed, missing"
            }
        };
        *counts.entry(kind).or_default() += 1;
    }
    eprintln!("{what} report: {counts:?}");
    let failed: usize = outcomes.iter().filter(|o| o.is_err()).count();
    assert!(
        failed > 0,
        "two kills with requests in flight fail some of them"
    );
}

#[test]
#[ignore = "needs redis-server"]
fn with_resend_every_set_through_two_redis_kills_is_answered_and_present() {
    let _g = exclusive();
    let mut server = RedisServer::start_persistent().expect("redis-server on PATH");
    resend_scenario(&mut server, "plaintext");
}

#[test]
#[ignore = "needs redis-server"]
fn with_report_every_missing_key_after_two_redis_kills_was_failed_to_its_caller() {
    let _g = exclusive();
    let mut server = RedisServer::start_persistent().expect("redis-server on PATH");
    report_scenario(&mut server, "plaintext");
}

#[test]
#[ignore = "needs redis-server"]
fn with_resend_every_set_through_two_tls_redis_kills_is_answered_and_present() {
    let _g = exclusive();
    resend_scenario(&mut tls_server(), "tls");
}

#[test]
#[ignore = "needs redis-server"]
fn with_report_every_missing_key_after_two_tls_redis_kills_was_failed_to_its_caller() {
    let _g = exclusive();
    report_scenario(&mut tls_server(), "tls");
}
