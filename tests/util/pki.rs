//! A throw-away PKI made at test time with rcgen: one CA and the certificates the TLS tests
//! need, as PEM text (and DER for rustls). Shared by the crate's unit tests (through a `#[path]`
//! module) and by the integration kit in `tests/util/tls.rs`, so both speak of the same
//! certificates. [`ServerSetup`] is the one rustls server configuration over them, for the
//! in-memory servers of the unit tests, the kit's in-process servers and the benches'.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// The name every valid server certificate is made for (plus the address 127.0.0.1).
pub const SERVER_NAME: &str = "localhost";

/// The name of the certificate made for another server.
pub const OTHER_NAME: &str = "other.relink.test";

/// A certificate and its private key, in PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    /// The certificate (`-----BEGIN CERTIFICATE-----`).
    pub cert: String,
    /// Its private key (PKCS#8, `-----BEGIN PRIVATE KEY-----`).
    pub key: String,
}

/// A CA and what it signed, plus a second CA that signed a server certificate nobody trusts.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA that clients trust.
    pub ca: Pem,
    /// A server certificate for `localhost` and 127.0.0.1, signed by `ca`.
    pub server: Pem,
    /// A server certificate for [`OTHER_NAME`] only, signed by `ca`.
    pub other_name: Pem,
    /// A certificate for `localhost` and 127.0.0.1, signed by `ca`, that expired in 2021.
    pub expired: Pem,
    /// A client certificate (client-auth usage), signed by `ca`.
    pub client: Pem,
    /// A certificate for `localhost` signed by a CA that no client trusts.
    pub unknown_ca_server: Pem,
    /// A second, untrusted CA (the issuer of `unknown_ca_server`).
    pub unknown_ca: Pem,
}

/// The file paths of a [`Pki`] written to a directory by [`Pki::write_to`].
#[derive(Debug, Clone)]
pub struct PkiFiles {
    /// `ca.crt`.
    pub ca: PathBuf,
    /// `server.crt`, `server.key`.
    pub server: (PathBuf, PathBuf),
    /// `other.crt`, `other.key`.
    pub other_name: (PathBuf, PathBuf),
    /// `expired.crt`, `expired.key`.
    pub expired: (PathBuf, PathBuf),
    /// `client.crt`, `client.key`.
    pub client: (PathBuf, PathBuf),
    /// `unknown-ca-server.crt`, `unknown-ca-server.key`.
    pub unknown_ca_server: (PathBuf, PathBuf),
}

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn make_ca(common_name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    Ca { cert, key }
}

fn make_leaf(ca: &Ca, names: &[&str], usage: ExtendedKeyUsagePurpose, expired: bool) -> Pem {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names.clone()).unwrap();
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    if expired {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2021, 1, 1);
    }
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

impl Pki {
    /// Makes a fresh CA and all the certificates (ECDSA P-256, a few milliseconds).
    pub fn new() -> Pki {
        let ca = make_ca("relink test CA");
        let untrusted = make_ca("relink untrusted CA");
        let server_names = [SERVER_NAME, "127.0.0.1"];
        let server = ExtendedKeyUsagePurpose::ServerAuth;
        Pki {
            server: make_leaf(&ca, &server_names, server.clone(), false),
            other_name: make_leaf(&ca, &[OTHER_NAME], server.clone(), false),
            expired: make_leaf(&ca, &server_names, server.clone(), true),
            client: make_leaf(
                &ca,
                &["relink-client"],
                ExtendedKeyUsagePurpose::ClientAuth,
                false,
            ),
            unknown_ca_server: make_leaf(&untrusted, &server_names, server, false),
            ca: Pem {
                cert: ca.cert.pem(),
                key: ca.key.serialize_pem(),
            },
            unknown_ca: Pem {
                cert: untrusted.cert.pem(),
                key: untrusted.key.serialize_pem(),
            },
        }
    }

    /// Writes every certificate and key as PEM files into `dir` (which must exist).
    pub fn write_to(&self, dir: &Path) -> PkiFiles {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let pair = |name: &str, pem: &Pem| {
            (
                write(&format!("{name}.crt"), &pem.cert),
                write(&format!("{name}.key"), &pem.key),
            )
        };
        PkiFiles {
            ca: write("ca.crt", &self.ca.cert),
            server: pair("server", &self.server),
            other_name: pair("other", &self.other_name),
            expired: pair("expired", &self.expired),
            client: pair("client", &self.client),
            unknown_ca_server: pair("unknown-ca-server", &self.unknown_ca_server),
        }
    }
}

/// How a rustls server is set up: the certificate it presents, and what it asks of clients.
#[derive(Debug, Clone)]
pub struct ServerSetup<'a> {
    /// The certificate and key presented.
    pub cert: &'a Pem,
    /// Require a client certificate signed by this CA (PEM).
    pub client_ca: Option<&'a str>,
    /// The ALPN protocols offered.
    pub alpn: Vec<Vec<u8>>,
    /// Speak TLS 1.2 only.
    pub tls12_only: bool,
}

impl<'a> ServerSetup<'a> {
    /// A server presenting `cert`, asking nothing of clients.
    pub fn with(cert: &'a Pem) -> ServerSetup<'a> {
        ServerSetup {
            cert,
            client_ca: None,
            alpn: Vec::new(),
            tls12_only: false,
        }
    }

    /// The rustls configuration, with rustls' process-wide provider (*ring*, the one crypto
    /// feature of rustls in these builds).
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        let chain = CertificateDer::pem_slice_iter(self.cert.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(self.cert.key.as_bytes()).expect("key PEM");
        let builder = if self.tls12_only {
            rustls::ServerConfig::builder_with_protocol_versions(&[&rustls::version::TLS12])
        } else {
            rustls::ServerConfig::builder()
        };
        let builder = match self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(c.expect("CA PEM")).expect("CA certificate");
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                    .build()
                    .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).expect("server config");
        config.alpn_protocols = self.alpn.clone();
        Arc::new(config)
    }

    /// A server session over the configuration, for bytes moved by hand (no buffer limit).
    pub fn session(&self) -> rustls::ServerConnection {
        let mut conn = rustls::ServerConnection::new(self.config()).expect("server session");
        conn.set_buffer_limit(None);
        conn
    }
}

/// A rustls server configuration presenting `cert`, requiring a client certificate signed by
/// `client_ca` when given.
pub fn server_config(cert: &Pem, client_ca: Option<&str>) -> Arc<rustls::ServerConfig> {
    ServerSetup {
        client_ca,
        ..ServerSetup::with(cert)
    }
    .config()
}
