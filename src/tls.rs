//! [`Tls`]: the TLS settings of a link (server name, trust roots, client certificate, ALPN),
//! and [`TlsConfigError`], what is wrong with them.
//!
//! The settings are checked once, when the link is built: PEM files are read and parsed, the
//! client key is matched with its certificate, and one rustls configuration is made for all
//! the connections of the link. PEM files are looked at again (one `stat` each) at every new
//! connection: when one changed (a rotated certificate), they are read again and the new
//! configuration is used from that connection on; if the new files cannot be used, the last
//! good configuration stays and the link says so once ([`LinkError::TlsCredentials`]).
//!
//! [`LinkError::TlsCredentials`]: crate::error::LinkError::TlsCredentials

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::core::tls::{ConfigSource, TlsSettings, TLS_HANDSHAKE_TIMEOUT};
use crate::error::ConfigError;
use crate::error::TlsConfigError;

/// TLS settings for a link: a by-value builder.
///
/// Verification is always on unless the test-only
/// [`dangerous_skip_verification_for_tests`](Tls::dangerous_skip_verification_for_tests) is
/// called. The server's certificate must chain to a trusted root and be valid for the server
/// name, which is the endpoint's host name unless [`server_name`](Tls::server_name) says
/// otherwise.
///
/// **Trust roots.** `Tls::new()` trusts the web's public roots (Mozilla's list, bundled in the
/// crate, so no system file is needed). Giving a private CA with [`ca_pem`](Tls::ca_pem) or
/// [`ca_file`](Tls::ca_file) *replaces* the web roots: a server with a private CA is
/// usually private too, and trusting every public CA as well would let any of them vouch for
/// it. Call [`web_roots(true)`](Tls::web_roots) to trust both. The system's store can be
/// given as a CA file (`/etc/ssl/certs/ca-certificates.crt` on Debian).
///
/// # Examples
/// ```
/// let tls = relink::Tls::new()
///     .server_name("redis.internal")
///     .ca_pem(b"-----BEGIN CERTIFICATE-----\n...".to_vec())
///     .alpn(vec![b"redis".to_vec()]);
/// # let _ = tls;
/// ```
#[derive(Clone, Default)]
pub struct Tls {
    server_name: Option<String>,
    cas: Vec<Pem>,
    web_roots: Option<bool>,
    client_auth: Option<(Pem, Pem)>,
    alpn: Vec<Vec<u8>>,
    skip_verification: bool,
    handshake_timeout: Option<Duration>,
    system_roots: bool,
}

/// PEM text given inline or as a file read when the link is built.
#[derive(Clone)]
enum Pem {
    Inline(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    /// How the error messages name it.
    fn origin(&self, what: &str) -> String {
        match self {
            Pem::Inline(_) => format!("{what} (PEM given inline)"),
            Pem::File(path) => format!("{what} {}", path.display()),
        }
    }

    fn read(&self, what: &str) -> Result<Vec<u8>, TlsConfigError> {
        match self {
            Pem::Inline(bytes) => Ok(bytes.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|e| TlsConfigError::Unreadable {
                what: self.origin(what),
                reason: e.to_string(),
            }),
        }
    }

    fn certificates(&self, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
        let bytes = self.read(what)?;
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsConfigError::BadPem {
                what: self.origin(what),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(TlsConfigError::NoCertificate {
                what: self.origin(what),
            });
        }
        Ok(certs)
    }

    fn private_key(&self, what: &str) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
        let bytes = self.read(what)?;
        PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsConfigError::NoKey {
                what: self.origin(what),
            },
            e => TlsConfigError::BadPem {
                what: self.origin(what),
                reason: e.to_string(),
            },
        })
    }
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pem::Inline(bytes) => write!(f, "<{} bytes of PEM>", bytes.len()),
            Pem::File(path) => write!(f, "{path:?}"),
        }
    }
}

impl fmt::Debug for Tls {
    // By hand: the client key's bytes are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("server_name", &self.server_name)
            .field("cas", &self.cas)
            .field("web_roots", &self.web_roots)
            .field(
                "client_auth",
                &self.client_auth.as_ref().map(|(cert, _)| cert),
            )
            .field("alpn", &self.alpn)
            .field("skip_verification", &self.skip_verification)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("system_roots", &self.system_roots)
            .finish()
    }
}

impl Tls {
    /// Verified TLS with the bundled web roots, the endpoint's host as the server name, no
    /// client certificate and no ALPN.
    pub fn new() -> Tls {
        Tls::default()
    }

    /// The name sent in SNI and checked against the server's certificate: a DNS name, or an
    /// IP address to check against the certificate's IP addresses.
    ///
    /// Defaults to the endpoint's host name. Required when the endpoint is an IP address
    /// (`build()` fails otherwise).
    pub fn server_name(mut self, name: impl Into<String>) -> Tls {
        self.server_name = Some(name.into());
        self
    }

    /// Trusts the CA certificates in this PEM text (one or more `CERTIFICATE` sections). Can
    /// be called more than once. Unless [`web_roots(true)`](Tls::web_roots) is called, the web
    /// roots are then no longer trusted.
    ///
    /// Defaults to none.
    pub fn ca_pem(mut self, pem: impl AsRef<[u8]>) -> Tls {
        self.cas.push(Pem::Inline(pem.as_ref().to_vec()));
        self
    }

    /// Like [`ca_pem`](Tls::ca_pem), with the PEM read from a file when the link is built,
    /// and again at the next connection whenever the file changes (see
    /// [`client_auth_files`](Tls::client_auth_files)).
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Tls {
        self.cas.push(Pem::File(path.as_ref().to_path_buf()));
        self
    }

    /// Whether the bundled web roots (Mozilla's list) are trusted.
    ///
    /// Defaults to `true` when no CA is given and the system's store is not asked for,
    /// `false` otherwise.
    pub fn web_roots(mut self, on: bool) -> Tls {
        self.web_roots = Some(on);
        self
    }

    /// Whether the system's certificate store is trusted (read with rustls-native-certs when
    /// the link is built: on Linux the bundle that `SSL_CERT_FILE`, `SSL_CERT_DIR` or the
    /// distribution's `/etc/ssl/certs` name). A fleet whose operators manage roots with the
    /// OS (a private CA installed with `update-ca-certificates`, a root withdrawn by an OS
    /// update) trusts what the machine trusts; the link reads the store again when it is
    /// rebuilt. Combines with [`ca_pem`](Tls::ca_pem) and [`web_roots`](Tls::web_roots);
    /// asking for it turns the bundled web roots off unless `web_roots(true)` is called.
    ///
    /// Defaults to `false`: the bundled roots behave the same on every machine, including
    /// minimal containers and gateways without a store; see docs/guide.md, "Trust roots".
    ///
    /// # Errors
    /// `build()` fails with [`TlsConfigError::NoSystemRoots`] when the store gives no usable
    /// certificate (and no other root is trusted).
    ///
    /// # Examples
    /// ```
    /// let tls = relink::Tls::new().system_roots(true);
    /// # let _ = tls;
    /// ```
    pub fn system_roots(mut self, on: bool) -> Tls {
        self.system_roots = on;
        self
    }

    /// A client certificate (the chain, leaf first, in PEM) and its private key (PKCS#8,
    /// PKCS#1 or SEC1 PEM) for servers that require one (mutual TLS).
    ///
    /// Defaults to none.
    pub fn client_auth(
        mut self,
        cert_chain_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Tls {
        self.client_auth = Some((
            Pem::Inline(cert_chain_pem.as_ref().to_vec()),
            Pem::Inline(key_pem.as_ref().to_vec()),
        ));
        self
    }

    /// Like [`client_auth`](Tls::client_auth), with both read from files when the link is
    /// built, and again whenever they change: a link follows a certificate rotation without
    /// being rebuilt.
    ///
    /// At each new connection the link looks at its PEM files (a `stat` each: time, length,
    /// inode); when one changed it reads them all again, and the connection uses the new
    /// credentials. Files that cannot be used (unreadable, bad PEM, a key that does not match
    /// the certificate: a rotation half-done) leave the last good credentials in use; the
    /// link reports it once per change, in an [`Event::Error`](crate::Event::Error) with
    /// [`LinkError::TlsCredentials`](crate::error::LinkError::TlsCredentials) and a warn line, and
    /// tries the files again when they change next. Write the key and the certificate, then
    /// restart or wait for the server: the connection after the last write uses both. A
    /// file replaced by a rename (as rotation tools do) is always seen as changed; one
    /// rewritten in place, to the same length, within the same tick of the file clock (a few
    /// milliseconds) as its previous version may not be.
    pub fn client_auth_files(mut self, cert_chain: impl AsRef<Path>, key: impl AsRef<Path>) -> Tls {
        self.client_auth = Some((
            Pem::File(cert_chain.as_ref().to_path_buf()),
            Pem::File(key.as_ref().to_path_buf()),
        ));
        self
    }

    /// The application protocols offered through ALPN, most preferred first.
    ///
    /// Defaults to none (no ALPN extension is sent).
    pub fn alpn(mut self, protocols: Vec<Vec<u8>>) -> Tls {
        self.alpn = protocols;
        self
    }

    /// How long a handshake may take, from the TCP connect to its completion; past it the
    /// attempt fails with [`Cause::Tls`](crate::Cause::Tls) and
    /// [`TlsError::HandshakeTimeout`](crate::error::TlsError::HandshakeTimeout).
    ///
    /// Defaults to [`defaults::TLS_HANDSHAKE_TIMEOUT`](crate::config::defaults::TLS_HANDSHAKE_TIMEOUT)
    /// (10 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Tls {
        self.handshake_timeout = Some(timeout);
        self
    }

    /// The handshake bound in force.
    pub(crate) fn handshake_bound(&self) -> Duration {
        self.handshake_timeout.unwrap_or(TLS_HANDSHAKE_TIMEOUT)
    }

    /// **For tests only**: accepts any server certificate, for any name, from anyone. The
    /// connection is still encrypted but not authenticated: anyone on the path can read and
    /// change it. Every connection logs a warning.
    ///
    /// Defaults to off.
    pub fn dangerous_skip_verification_for_tests(mut self) -> Tls {
        self.skip_verification = true;
        self
    }

    /// The name a session with this endpoint sends and checks: the one set with
    /// [`server_name`](Tls::server_name), else the endpoint's host, which must then be a name.
    pub(crate) fn resolve_server_name(
        &self,
        endpoint_host: &str,
        is_ip: bool,
    ) -> Result<ServerName<'static>, ConfigError> {
        let name = match (&self.server_name, is_ip) {
            (Some(name), _) => name.clone(),
            (None, false) => endpoint_host.to_string(),
            (None, true) => {
                return Err(TlsConfigError::ServerNameRequired {
                    host: endpoint_host.to_string(),
                }
                .into())
            }
        };
        ServerName::try_from(name.clone()).map_err(|_| TlsConfigError::BadServerName(name).into())
    }

    /// The rustls configuration shared by every connection of a link, made once at `build()`:
    /// reads and checks every PEM, matches the client key with its certificate.
    pub(crate) fn client_config(&self) -> Result<Arc<ClientConfig>, ConfigError> {
        let mut provider = provider::ring();
        // AES-128-GCM first (as Go's crypto/tls does): as safe for a link's lifetime as
        // AES-256 and cheaper per byte. Every default suite stays offered.
        let preferred = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
        provider
            .cipher_suites
            .retain(|s| s.suite() != preferred.suite());
        provider.cipher_suites.insert(0, preferred);
        let provider = Arc::new(provider);
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsConfigError::Rustls(e.to_string()))?;
        let builder = if self.skip_verification {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
        } else {
            builder.with_root_certificates(self.root_store()?)
        };
        let mut config = match &self.client_auth {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = cert.certificates("client certificate")?;
                let key = key.private_key("client key")?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| match e {
                        rustls::Error::InconsistentKeys(_) => TlsConfigError::KeyMismatch,
                        e => TlsConfigError::BadClientAuth(e.to_string()),
                    })?
            }
        };
        config.alpn_protocols = self.alpn.clone();
        Ok(Arc::new(config))
    }

    fn root_store(&self) -> Result<RootCertStore, TlsConfigError> {
        let mut roots = RootCertStore::empty();
        if self
            .web_roots
            .unwrap_or(self.cas.is_empty() && !self.system_roots)
        {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        if self.system_roots {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(TlsConfigError::NoSystemRoots(if why.is_empty() {
                    "no certificate found".into()
                } else {
                    why
                }));
            }
        }
        for ca in &self.cas {
            for cert in ca.certificates("CA")? {
                roots
                    .add(cert)
                    .map_err(|e| TlsConfigError::BadCaCertificate {
                        what: ca.origin("CA"),
                        reason: e.to_string(),
                    })?;
            }
        }
        if roots.is_empty() {
            return Err(TlsConfigError::NoTrustRoots);
        }
        Ok(roots)
    }

    /// The link's rustls configuration, and, when any PEM comes from a file, the source that
    /// renews it for each new connection once a file changed.
    pub(crate) fn credentials(
        &self,
        link: &Arc<str>,
    ) -> Result<(Arc<ClientConfig>, Option<Renewal>), ConfigError> {
        let stamps = self.file_stamps();
        let config = self.client_config()?;
        if stamps.is_empty() {
            return Ok((config, None));
        }
        let reloader = Reloader {
            link: link.clone(),
            tls: self.clone(),
            loaded: Mutex::new(Loaded {
                stamps,
                config: config.clone(),
                refused: None,
            }),
        };
        Ok((config, Some(Arc::new(reloader))))
    }

    /// The PEM files given (CAs, client certificate and key), in a fixed order.
    fn files(&self) -> impl Iterator<Item = &Path> {
        let client = self.client_auth.iter().flat_map(|(c, k)| [c, k]);
        self.cas.iter().chain(client).filter_map(|p| match p {
            Pem::File(path) => Some(path.as_path()),
            Pem::Inline(_) => None,
        })
    }

    /// What tells each file's version apart: modification time, length and inode (a file
    /// replaced by a rename has a new inode). None for a file that cannot be read.
    fn file_stamps(&self) -> Vec<Stamp> {
        self.files()
            .map(|path| {
                let m = std::fs::metadata(path).ok()?;
                Some((m.modified().ok()?, m.len(), m.ino()))
            })
            .collect()
    }

    /// Everything a session with this endpoint needs, given the link's configuration.
    pub(crate) fn settings(
        &self,
        config: Arc<ClientConfig>,
        endpoint_host: &str,
        is_ip: bool,
    ) -> Result<TlsSettings, ConfigError> {
        Ok(TlsSettings {
            config,
            server_name: self.resolve_server_name(endpoint_host, is_ip)?,
            skip_verification: self.skip_verification,
            handshake_timeout: self.handshake_bound(),
            source: None,
        })
    }
}

/// What renews a link's configuration from its files.
type Renewal = Arc<dyn ConfigSource>;

/// One version of a PEM file: modification time, length, inode.
type Stamp = Option<(SystemTime, u64, u64)>;

/// Renews a link's configuration from its PEM files: at each new connection it looks at the
/// files (a `stat` each) and reads them again only when one changed.
#[derive(Debug)]
struct Reloader {
    /// The link's name, for the log line.
    link: Arc<str>,
    tls: Tls,
    loaded: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    /// The files' versions the configuration was made from.
    stamps: Vec<Stamp>,
    /// The last good configuration.
    config: Arc<ClientConfig>,
    /// The versions last refused (reported once; read again when they change).
    refused: Option<Vec<Stamp>>,
}

impl ConfigSource for Reloader {
    fn current(&self) -> (Arc<ClientConfig>, Option<TlsConfigError>) {
        let stamps = self.tls.file_stamps();
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if stamps == loaded.stamps || loaded.refused.as_ref() == Some(&stamps) {
            return (loaded.config.clone(), None);
        }
        match self.tls.client_config() {
            Ok(config) => {
                log::info!(
                    "relink[{}]: tls credentials renewed from their files",
                    self.link
                );
                loaded.config = config;
                loaded.stamps = stamps;
                loaded.refused = None;
                (loaded.config.clone(), None)
            }
            Err(e) => {
                loaded.refused = Some(stamps);
                let e = match e {
                    ConfigError::Tls(e) => e,
                    other => TlsConfigError::Rustls(other.to_string()),
                };
                (loaded.config.clone(), Some(e))
            }
        }
    }
}

/// The verifier of [`Tls::dangerous_skip_verification_for_tests`]: accepts every certificate,
/// but still checks the handshake's signatures (so the session's keys are the certificate's).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

mod provider;

#[cfg(test)]
mod tests;
