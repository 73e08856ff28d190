//! A throw-away PKI made at test time with rcgen: one CA and the certificates the TLS tests
//! need, as PEM text (and DER for rustls). Shared by the crate's unit tests (through a `#[path]`
//! module) and by the integration kit in `tests/util/tls.rs`, so both speak of the same
//! certificates.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

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
