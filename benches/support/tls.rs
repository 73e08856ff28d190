//! TLS for the measurements: a throw-away PKI (the tests' own, made with rcgen), the rustls
//! server configuration a TLS sink presents, and the [`relink::Tls`] settings that trust it.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[path = "../../tests/util/pki.rs"]
mod pki;

pub use pki::{Pki, SERVER_NAME};

/// A rustls server configuration presenting the PKI's server certificate (for `localhost`
/// and 127.0.0.1).
pub fn server_config(pki: &Pki) -> Arc<rustls::ServerConfig> {
    let chain = CertificateDer::pem_slice_iter(pki.server.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("server certificate");
    let key = PrivateKeyDer::from_pem_slice(pki.server.key.as_bytes()).expect("server key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    Arc::new(config)
}

/// Link settings that verify the sink: the PKI's CA, the name `localhost` (the endpoint is an
/// IP address).
pub fn client(pki: &Pki) -> relink::Tls {
    relink::Tls::new()
        .ca_pem(&pki.ca.cert)
        .server_name(SERVER_NAME)
}
