//! TLS for the measurements: a throw-away PKI (the tests' own, made with rcgen), the rustls
//! server configuration a TLS sink presents, and the [`relink::Tls`] settings that trust it.

use std::sync::Arc;

#[path = "../../tests/util/pki.rs"]
mod pki;

pub use pki::{Pki, SERVER_NAME};

/// A rustls server configuration presenting the PKI's server certificate (for `localhost`
/// and 127.0.0.1).
pub fn server_config(pki: &Pki) -> Arc<rustls::ServerConfig> {
    pki::server_config(&pki.server, None)
}

/// Link settings that verify the sink: the PKI's CA, the name `localhost` (the endpoint is an
/// IP address).
pub fn client(pki: &Pki) -> relink::Tls {
    relink::Tls::new()
        .ca_pem(&pki.ca.cert)
        .server_name(SERVER_NAME)
}

/// The server side of one TLS connection as a reader of plaintext: each socket read takes up
/// to 256 KiB of records at once (rustls's own stream reads a few KiB at a time, which would
/// make the sink, not the link, the bottleneck).
pub struct TlsReader {
    sock: std::net::TcpStream,
    conn: rustls::ServerConnection,
    buf: Vec<u8>,
    plain: Vec<u8>,
    pos: usize,
}

impl TlsReader {
    pub fn new(sock: std::net::TcpStream, config: Arc<rustls::ServerConfig>) -> TlsReader {
        let mut conn = rustls::ServerConnection::new(config).expect("tls session");
        conn.set_buffer_limit(None);
        TlsReader {
            sock,
            conn,
            buf: vec![0u8; 256 * 1024],
            plain: Vec::with_capacity(256 * 1024),
            pos: 0,
        }
    }
}

impl std::io::Read for TlsReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Error, ErrorKind};
        while self.pos == self.plain.len() {
            self.plain.clear();
            self.pos = 0;
            while self.conn.wants_write() {
                self.conn.write_tls(&mut self.sock)?;
            }
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            let mut rd = &self.buf[..n];
            while !rd.is_empty() {
                self.conn.read_tls(&mut rd)?;
                let state = self
                    .conn
                    .process_new_packets()
                    .map_err(|e| Error::new(ErrorKind::InvalidData, e))?;
                // rustls holds at most 16 KiB of plaintext: take it after every pass.
                let mut left = state.plaintext_bytes_to_read();
                let start = self.plain.len();
                self.plain.resize(start + left, 0);
                let mut at = start;
                while left > 0 {
                    let got = self.conn.reader().read(&mut self.plain[at..at + left])?;
                    at += got;
                    left -= got;
                }
            }
        }
        let n = out.len().min(self.plain.len() - self.pos);
        out[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
