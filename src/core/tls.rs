//! The TLS session of one connection: rustls's client state object between the socket's bytes
//! and the framing, with no socket and no clock.
//!
//! ```text
//!  socket chunks ──feed()──────────► TlsSession ──(appended to rx)───► framing
//!  socket sends  ◄──take_ciphertext()─ TlsSession ◄──send_plaintext()── framing
//! ```
//!
//! A fresh session is made for every connection and dropped with it; nothing of one
//! connection's session outlives it. The caller moves bytes: after every `feed`,
//! `send_plaintext` or `close_notify` it calls `take_ciphertext` and writes what it got to the
//! socket (handshake records, replies, alerts). Every call works on the bytes at hand and
//! returns: none blocks or waits for more.
//!
//! A failure is classified into a [`TlsError`] so that the link can report a handshake
//! failure as its own cause. After a failure the session is dead: the caller may still take
//! the alert rustls queued for the peer, then closes the connection.

use std::fmt;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use rustls::{CertificateError, ClientConfig, ClientConnection};

use crate::error::{TlsConfigError, TlsError};

/// What a session needs, made once per link and endpoint when the link is built: the client
/// configuration (shared by every endpoint) and the name to check.
#[derive(Debug, Clone)]
pub(crate) struct TlsSettings {
    /// The rustls configuration, shared by every session of the link.
    pub(crate) config: Arc<ClientConfig>,
    /// The name sent in SNI and checked against the server's certificate.
    pub(crate) server_name: ServerName<'static>,
    /// Certificate verification is off (a test-only setting): each session logs a warning.
    pub(crate) skip_verification: bool,
    /// How long a handshake may take from the TCP connect.
    pub(crate) handshake_timeout: Duration,
    /// Renews `config` for each new connection when the credentials behind it changed (PEM
    /// files rotated). None: `config` is used for every connection.
    pub(crate) source: Option<Arc<dyn ConfigSource>>,
}

/// Where each new connection's rustls configuration comes from, when the credentials can
/// change while the link lives (its implementation reads files; the core only asks it).
pub(crate) trait ConfigSource: Send + Sync + fmt::Debug {
    /// The configuration for a new connection. When the credentials changed and cannot be
    /// used, the last good configuration and what is wrong (said once per change).
    fn current(&self) -> (Arc<ClientConfig>, Option<TlsConfigError>);
}

impl TlsSettings {
    /// The configuration for a new connection (see [`ConfigSource::current`]).
    pub(crate) fn fresh_config(&self) -> (Arc<ClientConfig>, Option<TlsConfigError>) {
        match &self.source {
            Some(source) => source.current(),
            None => (self.config.clone(), None),
        }
    }
}

/// The plaintext of one full TLS record (rustls' largest fragment, with no `max_fragment_size`
/// set): [`TlsSession::seal`] hands the session this much at a time, so that it knows where
/// each record ends.
pub(crate) const RECORD_PLAINTEXT: usize = 16 * 1024;

/// Default bound on a TLS handshake, from the TCP connect to its completion.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client side of one TLS connection, sans IO.
#[derive(Debug)]
pub(crate) struct TlsSession {
    conn: ClientConnection,
    /// The server name, for error messages.
    server_name: String,
    /// The peer sent close_notify.
    peer_closed: bool,
    /// A failure was reported: the session takes no more bytes.
    failed: bool,
}

impl TlsSession {
    /// A fresh session for a new connection; the ClientHello is ready at once in
    /// [`take_ciphertext`](Self::take_ciphertext).
    #[cfg(test)]
    pub(crate) fn new(settings: &TlsSettings) -> Result<TlsSession, TlsError> {
        TlsSession::with_config(settings, settings.config.clone())
    }

    /// A fresh session as [`new`](Self::new) makes it, with this configuration (renewed for
    /// the connection).
    pub(crate) fn with_config(
        settings: &TlsSettings,
        config: Arc<ClientConfig>,
    ) -> Result<TlsSession, TlsError> {
        let mut conn = ClientConnection::new(config, settings.server_name.clone())
            .map_err(|e| TlsError::Other(e.to_string()))?;
        // The caller takes the ciphertext after every send: rustls need not bound it, and a
        // bound would make a large frame fail half-written.
        conn.set_buffer_limit(None);
        Ok(TlsSession {
            conn,
            server_name: settings.server_name.to_str().into_owned(),
            peer_closed: false,
            failed: false,
        })
    }

    /// Takes bytes that arrived from the socket, all of them: decrypts what is complete and
    /// appends the plaintext to `plaintext` (the framing's receive buffer: no copy between),
    /// keeps the rest for the next call. Bytes after the peer's close_notify are ignored.
    pub(crate) fn feed(
        &mut self,
        mut ciphertext: &[u8],
        plaintext: &mut BytesMut,
    ) -> Result<(), TlsError> {
        if self.failed {
            return Err(TlsError::Other("the session has already failed".into()));
        }
        while !ciphertext.is_empty() && !self.peer_closed {
            // read_tls takes at most what its buffer has room for; each pass frees the room
            // again. Every pass takes at least one byte or ends the loop, so it is bounded.
            let taken = match self.conn.read_tls(&mut ciphertext) {
                Ok(n) => n,
                Err(e) => return Err(self.fail(TlsError::Other(e.to_string()))),
            };
            self.process(plaintext)?;
            if taken == 0 && !self.peer_closed {
                // Never drop bytes silently: a session that cannot take them has failed.
                return Err(self.fail(TlsError::Other("tls input not taken".into())));
            }
        }
        Ok(())
    }

    fn process(&mut self, plaintext: &mut BytesMut) -> Result<(), TlsError> {
        let state = match self.conn.process_new_packets() {
            Ok(state) => state,
            Err(e) => {
                let e = classify(e, &self.server_name);
                return Err(self.fail(e));
            }
        };
        if state.peer_has_closed() {
            self.peer_closed = true;
        }
        // Drain rustls's bounded plaintext buffer so the next read_tls has room: straight
        // from its buffer into `plaintext`.
        let mut reader = self.conn.reader();
        loop {
            match reader.fill_buf() {
                Ok([]) => break,
                Ok(chunk) => {
                    let n = chunk.len();
                    plaintext.extend_from_slice(chunk);
                    reader.consume(n);
                }
                // WouldBlock: no more for now; UnexpectedEof: the peer closed without
                // close_notify, which the connection's own close reports.
                Err(_) => break,
            }
        }
        Ok(())
    }

    fn fail(&mut self, e: TlsError) -> TlsError {
        self.failed = true;
        e
    }

    /// Encrypts `data` for the peer; the records are then taken with
    /// [`take_ciphertext`](Self::take_ciphertext). Refused before the handshake has
    /// completed: no application byte ever leaves before the server is verified.
    pub(crate) fn send_plaintext(&mut self, data: &[u8]) -> Result<(), TlsError> {
        if self.failed {
            return Err(TlsError::Other("the session has already failed".into()));
        }
        if self.conn.is_handshaking() {
            return Err(TlsError::Other(
                "application data before the handshake completed".into(),
            ));
        }
        self.conn
            .writer()
            .write_all(data)
            .map_err(|e| TlsError::Other(e.to_string()))
    }

    /// Seals `data` into records after whatever ciphertext is pending, appending all of it to
    /// `out`, [`RECORD_PLAINTEXT`] bytes of `data` at a time. Pushes to `record_ends`, for
    /// each such piece, the length of `out` once it is sealed: the peer can read a byte of
    /// piece `i` only when it has received `out[..record_ends[i]]`, since a record is
    /// decrypted whole.
    pub(crate) fn seal(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        record_ends: &mut Vec<usize>,
    ) -> Result<(), TlsError> {
        for piece in data.chunks(RECORD_PLAINTEXT) {
            self.send_plaintext(piece)?;
            self.take_ciphertext(out);
            record_ends.push(out.len());
        }
        Ok(())
    }

    /// Appends the bytes to send to the socket (handshake, records, alerts) to `out`; returns
    /// how many.
    pub(crate) fn take_ciphertext(&mut self, out: &mut Vec<u8>) -> usize {
        let mut total = 0;
        while self.conn.wants_write() {
            match self.conn.write_tls(out) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        total
    }

    /// The handshake has not completed yet.
    pub(crate) fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Queues close_notify for the peer; it is then taken with
    /// [`take_ciphertext`](Self::take_ciphertext).
    pub(crate) fn close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// The peer sent close_notify: it will send nothing more on this connection.
    pub(crate) fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// The application protocol agreed through ALPN, once the handshake has completed.
    pub(crate) fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }
}

/// Sorts a rustls failure into the causes the link reports.
fn classify(e: rustls::Error, server_name: &str) -> TlsError {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(ce) => match ce {
            CertificateError::UnknownIssuer => TlsError::UnknownIssuer,
            CertificateError::NotValidForName => TlsError::WrongName {
                expected: server_name.to_string(),
                presented: Vec::new(),
            },
            CertificateError::NotValidForNameContext { presented, .. } => TlsError::WrongName {
                expected: server_name.to_string(),
                presented: presented.into_iter().map(plain_name).collect(),
            },
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsError::Expired
            }
            other => TlsError::BadCertificate(other.to_string()),
        },
        E::AlertReceived(alert) => TlsError::Alert(alert_text(&format!("{alert:?}"))),
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::PeerSentOversizedRecord => TlsError::NotTls,
        other => TlsError::Other(other.to_string()),
    }
}

/// webpki's `DnsName("a.example")` → `a.example`, `IpAddress(10.0.0.1)` → `10.0.0.1`; any
/// other form as it is.
fn plain_name(presented: String) -> String {
    let inner = presented
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| {
            presented
                .strip_prefix("IpAddress(")
                .and_then(|rest| rest.strip_suffix(')'))
        });
    match inner {
        Some(name) => name.to_string(),
        None => presented,
    }
}

/// `CertificateRequired` → `"certificate required"`, `UnknownCA` → `"unknown ca"`.
fn alert_text(debug: &str) -> String {
    let mut text = String::with_capacity(debug.len() + 4);
    let mut after_lower = false;
    for c in debug.chars() {
        // A word starts at an upper-case letter after a lower-case one (`UnknownCA` →
        // `unknown ca`).
        if c.is_ascii_uppercase() && after_lower {
            text.push(' ');
        }
        after_lower = c.is_ascii_lowercase();
        text.push(c.to_ascii_lowercase());
    }
    text
}

/// The test PKI, shared with the integration tests' kit.
#[cfg(test)]
#[path = "../../tests/util/pki.rs"]
pub(crate) mod test_certs;

#[cfg(test)]
mod tests;
