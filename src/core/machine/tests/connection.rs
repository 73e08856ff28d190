//! Per-connection state: each TCP connection starts from a fresh one, and nothing of a lost
//! connection reaches the next.

use super::*;

#[test]
fn a_reconnect_starts_with_an_empty_receive_buffer_and_a_fresh_handshake() {
    let hs = Handshake::new(vec![b"HELLO".to_vec()], Predicate::new(|f| f == b"OK"));
    let mut s = Sim::connecting(Sim::builder().framing(Lines::new()).protocol(hs));
    s.tcp_up();
    s.transmit();
    // Half a reply, left undecoded when the connection drops.
    s.data(b"O");
    assert_eq!(s.m.conn.as_ref().map(|c| c.rx.len()), Some(1));
    s.tcp_down();
    assert!(s.m.conn.is_none(), "the connection's state went with it");
    s.next_timer();
    s.tcp_up();
    assert_eq!(s.m.state(), Connected);
    s.transmit();
    assert_eq!(s.written, b"HELLO\nHELLO\n", "one hello per connection");
    // Joined to the old half this would be the accepted reply.
    s.data(b"K\n");
    assert_eq!(s.m.state(), Connected);
    assert_eq!(s.frames(), vec![b"K".to_vec()]);
    s.data(b"OK\n");
    assert_eq!(s.m.state(), Ready);
}
