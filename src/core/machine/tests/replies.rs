//! Every reply to the frame it answers, in virtual time: commands answered by pushes take no
//! turn, a refusal is not a confirmation, an error reply names its frame, and an opening the
//! peer is not ready for is written again.

use super::*;
use crate::framing::Resp;
use crate::protocol::Redis;
use crate::{Confirm, Redelivery};
use bytes::Bytes;

const SEC: Duration = Duration::from_secs(1);

/// redis, confirmed by reply, its answers to sent frames delivered as events.
fn redis(protocol: Redis) -> Builder {
    Sim::builder()
        .framing(Resp::new())
        .protocol(protocol)
        .confirm(Confirm::reply())
        .delivery(|d| d.answer_events = true)
}

fn cmd(parts: &[&str]) -> Vec<u8> {
    Resp::command(parts)
}

impl Sim {
    fn request_cmd(&mut self, token: Token, parts: &[&str]) {
        self.input(Input::Request {
            token,
            frame: Bytes::from(cmd(parts)),
            id: None,
            deadline: self.now + 10 * SEC,
        });
    }

    fn reply_to(&self, token: Token) -> Option<&Outcome> {
        self.answers
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, o)| o)
    }

    fn error_replies(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::ErrorReply { frame, reply } => Some((frame.to_vec(), reply.to_vec())),
                _ => None,
            })
            .collect()
    }
}

/// Ready on a redis link that opened with `HELLO 3` (its reply given).
fn resp3() -> Sim {
    let mut s = Sim::connecting(redis(Redis::new().open_with(["HELLO", "3"])));
    s.tcp_up();
    s.transmit();
    s.data(b"%1\r\n+proto\r\n:3\r\n");
    assert_eq!(s.m.state(), Ready);
    s
}

#[test]
fn resp3_a_subscribe_takes_no_turn_so_each_request_gets_its_own_reply_beside_pushes() {
    let mut s = resp3();
    s.submit(&cmd(&["SUBSCRIBE", "ch"]));
    s.transmit();
    s.request_cmd(1, &["GET", "a"]);
    s.request_cmd(2, &["ECHO", "b"]);
    s.transmit();
    // The subscription's answer is a push, then a message pushed before the replies.
    s.data(b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
    s.data(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n$3\r\nval\r\n$1\r\nb\r\n");
    assert_eq!(
        s.reply_to(1),
        Some(&Ok(Bytes::from_static(b"$3\r\nval\r\n")))
    );
    assert_eq!(s.reply_to(2), Some(&Ok(Bytes::from_static(b"$1\r\nb\r\n"))));
    assert_eq!(s.frames().len(), 2, "both pushes are the application's");
    // The subscription is confirmed by the reply to what was written after it.
    assert_eq!(s.metrics().frames_confirmed, 1);
}

#[test]
fn resp2_a_subscribe_takes_one_turn_per_channel_and_messages_are_pushes() {
    let mut s = Sim::ready(redis(Redis::new()));
    s.submit(&cmd(&["SUBSCRIBE", "a", "b"]));
    s.request_cmd(1, &["PING"]);
    s.transmit();
    s.data(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n");
    s.data(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n");
    s.data(b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n");
    s.data(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(
        s.reply_to(1),
        Some(&Ok(Bytes::from_static(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")))
    );
    assert_eq!(s.frames().len(), 3, "two confirmations and a message");
}

#[test]
fn a_request_of_a_subscribe_gets_its_first_confirmation_and_the_others_are_frames() {
    let mut s = Sim::ready(redis(Redis::new()));
    s.request_cmd(1, &["SUBSCRIBE", "a", "b"]);
    s.request_cmd(2, &["GET", "k"]);
    s.transmit();
    s.data(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n");
    s.data(b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n");
    s.data(b"-ERR Can't execute 'get'\r\n");
    assert_eq!(
        s.reply_to(1),
        Some(&Ok(Bytes::from_static(
            b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
        )))
    );
    assert_eq!(
        s.reply_to(2),
        Some(&Ok(Bytes::from_static(b"-ERR Can't execute 'get'\r\n")))
    );
    assert_eq!(s.frames().len(), 1, "the second confirmation");
}

#[test]
fn an_answer_that_cannot_be_its_turns_closes_the_connection_and_is_nobodys_reply() {
    let mut s = Sim::ready(redis(Redis::new()));
    s.request_cmd(1, &["GET", "k"]);
    s.transmit();
    s.data(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n");
    assert_ne!(s.m.state(), Ready);
    assert!(!matches!(s.reply_to(1), Some(Ok(_))));
    assert_eq!(s.metrics().replies_unexpected, 1);
}

#[test]
fn a_blocking_command_holds_off_the_heartbeats_verdict_until_its_own_timeout() {
    let hb = crate::Heartbeat::every(SEC).max_missed(2);
    let mut s = Sim::ready(redis(Redis::new()).heartbeat(hb));
    s.submit(&cmd(&["BLPOP", "k", "5"]));
    s.transmit();
    // Silent for 7 s: the hold (5 s) and less than the bound after it.
    s.advance(7 * SEC);
    assert_eq!(s.m.state(), Ready, "the peer holds its answer on purpose");
    s.data(b"*-1\r\n");
    assert_eq!(s.m.state(), Ready);
    // Without a hold, silence ends the link within the bound.
    s.advance(4 * SEC);
    assert_ne!(s.m.state(), Ready);
}

#[test]
fn a_refused_frame_alone_is_taken_back_and_written_again_after_a_pause() {
    let mut s = Sim::ready(redis(Redis::new()));
    for k in ["a", "b", "c", "d"] {
        s.submit(&cmd(&["SET", k, "1"]));
    }
    s.transmit();
    s.written.clear();
    s.data(b"+OK\r\n-LOADING Redis is loading the dataset in memory\r\n+OK\r\n-BUSY busy\r\n");
    let m = s.metrics();
    assert_eq!(m.frames_confirmed, 2, "a and c ran");
    assert_eq!(m.frames_refused, 2);
    assert_eq!(m.replies_dropped, 0);
    assert_eq!(s.frames(), [b"+OK\r\n".to_vec(), b"+OK\r\n".to_vec()]);
    // Nothing is written during the pause.
    s.transmit();
    assert!(s.written.is_empty());
    s.submit(&cmd(&["SET", "e", "1"]));
    assert_eq!(s.next_timer(), Duration::from_millis(10));
    s.transmit();
    // The refused frames in their order, ahead of the frame queued after them.
    let mut again = cmd(&["SET", "b", "1"]);
    again.extend(cmd(&["SET", "d", "1"]));
    again.extend(cmd(&["SET", "e", "1"]));
    assert_eq!(s.written, again);
    s.data(b"+OK\r\n+OK\r\n+OK\r\n");
    let m = s.metrics();
    assert_eq!(m.frames_confirmed, 5);
    assert_eq!(m.frames_resent, 2);
    assert_eq!(m.frames_unconfirmed, 0);
    assert_eq!(m.abandoned.total(), 0);
}

#[test]
fn refusals_in_a_row_double_the_pause_and_an_answer_resets_it() {
    let mut s = Sim::ready(redis(Redis::new()));
    s.submit(&cmd(&["SET", "a", "1"]));
    let mut pauses = Vec::new();
    for _ in 0..4 {
        s.transmit();
        s.data(b"-BUSY script\r\n");
        pauses.push(s.next_timer());
    }
    assert_eq!(
        pauses,
        [10, 20, 40, 80].map(Duration::from_millis),
        "the pause grows"
    );
    s.transmit();
    s.data(b"+OK\r\n");
    s.submit(&cmd(&["SET", "b", "1"]));
    s.transmit();
    s.data(b"-BUSY script\r\n");
    assert_eq!(s.next_timer(), Duration::from_millis(10));
}

#[test]
fn under_report_a_refused_frame_comes_back_with_its_reply_and_those_behind_it_are_answered() {
    let mut s = Sim::ready(redis(Redis::new()).delivery(|d| d.redelivery = Redelivery::Report));
    for k in ["a", "b"] {
        s.submit(&cmd(&["SET", k, "1"]));
    }
    s.transmit();
    s.data(b"-LOADING loading\r\n+OK\r\n");
    assert_eq!(
        s.error_replies(),
        [(cmd(&["SET", "a", "1"]), b"-LOADING loading\r\n".to_vec())]
    );
    assert_eq!(
        s.abandoned(),
        [(cmd(&["SET", "a", "1"]), AbandonReason::Refused)]
    );
    let m = s.metrics();
    assert_eq!(m.abandoned.refused, 1);
    assert_eq!(m.frames_confirmed, 1, "b ran");
    assert_eq!(m.frames_submitted, m.frames_confirmed + m.abandoned.total());
}

#[test]
fn an_error_reply_names_its_frame_and_confirms_it() {
    let mut s = Sim::ready(redis(Redis::new()));
    s.submit(&cmd(&["INCR", "s"]));
    s.submit(&cmd(&["SET", "k", "v"]));
    s.transmit();
    s.data(b"-WRONGTYPE Operation against a key\r\n+OK\r\n");
    assert_eq!(
        s.error_replies(),
        [(
            cmd(&["INCR", "s"]),
            b"-WRONGTYPE Operation against a key\r\n".to_vec()
        )]
    );
    assert_eq!(s.frames(), [b"+OK\r\n".to_vec()]);
    assert_eq!(s.metrics().frames_confirmed, 2);
}

#[test]
fn an_opening_answered_loading_is_written_again_until_it_is_answered_and_never_backs_off() {
    let mut s = Sim::connecting(redis(Redis::new().open_with(["PING"])).handshake_timeout(SEC));
    s.tcp_up();
    s.transmit();
    assert_eq!(s.written, cmd(&["PING"]));
    // Loading for five seconds: five times the handshake timeout.
    let mut waited = Duration::ZERO;
    while waited < 5 * SEC {
        s.data(b"-LOADING Redis is loading the dataset in memory\r\n");
        waited += s.next_timer();
        s.written.clear();
        s.transmit();
        assert_eq!(s.written, cmd(&["PING"]), "the opening again");
    }
    assert_eq!(s.m.state(), Connected);
    s.data(b"+PONG\r\n");
    assert_eq!(s.m.state(), Ready);
    assert!(s
        .transitions()
        .iter()
        .all(|&(_, to, _)| !matches!(to, Backoff | Cooldown)));
    assert_eq!(s.metrics().handshakes_refused, 0);
}

#[test]
fn a_handshake_whose_reply_says_not_yet_sends_its_hello_again() {
    let ping = b"PING".to_vec();
    let hello = Handshake::new(vec![ping], Predicate::new(|r| r == b"PONG"))
        .retry_when(Predicate::starts_with("LOADING"));
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).protocol(hello));
    s.tcp_up();
    s.transmit();
    s.data(b"LOADING\n");
    assert!(s.frames().is_empty());
    s.next_timer();
    s.written.clear();
    s.transmit();
    assert_eq!(s.written, b"PING\n");
    s.data(b"PONG\n");
    assert_eq!(s.m.state(), Ready);
}

#[test]
fn an_answer_no_frame_waits_for_closes_the_connection_instead_of_shifting_the_replies() {
    let mut s = Sim::ready(redis(Redis::new()));
    s.request_cmd(1, &["GET", "a"]);
    s.transmit();
    // Two answers to one command: the second could only be taken for a later frame's.
    s.data(b"$1\r\nx\r\n$1\r\ny\r\n");
    assert_eq!(s.reply_to(1), Some(&Ok(Bytes::from_static(b"$1\r\nx\r\n"))));
    assert_eq!(s.last_transition().cause, Cause::Protocol);
    assert!(s.frames().is_empty());
}

#[test]
fn a_redis_protocol_alone_brings_its_framing_ping_and_confirmation_by_reply() {
    let mut s = Sim::with(Sim::builder().protocol(Redis::new()));
    s.auto_ack = false;
    s.input(Input::Start);
    s.tcp_up();
    assert_eq!(s.m.state(), Ready);
    s.submit(&cmd(&["SET", "a", "1"]));
    s.transmit();
    assert_eq!(s.written, cmd(&["SET", "a", "1"]), "written as RESP is");
    assert_eq!(s.metrics().frames_confirmed, 0, "not by TCP");
    s.data(b"+OK\r\n");
    assert_eq!(s.metrics().frames_confirmed, 1, "by its reply");
    s.written.clear();
    s.advance(SEC);
    s.transmit();
    assert_eq!(s.written, cmd(&["PING"]), "its ping, every second");
}

#[test]
fn what_the_builder_is_given_overrides_what_the_protocol_brings() {
    let mut s = Sim::with(
        Sim::builder()
            .protocol(Redis::new())
            .confirm(Confirm::tcp())
            .heartbeat(Heartbeat::every(10 * SEC)),
    );
    s.input(Input::Start);
    s.tcp_up();
    s.submit(&cmd(&["SET", "a", "1"]));
    s.transmit();
    assert_eq!(s.metrics().frames_confirmed, 1, "by TCP");
    s.written.clear();
    s.advance(SEC);
    s.transmit();
    assert!(s.written.is_empty(), "no ping within the longer interval");
}
