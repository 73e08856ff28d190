//! The TLS settings: defaults, trust roots, server names and every refusal of `build()`.

use super::*;

use crate::core::tls::test_certs as certs;

fn tls_error(result: Result<impl fmt::Debug, ConfigError>) -> TlsConfigError {
    match result.unwrap_err() {
        ConfigError::Tls(e) => e,
        other => panic!("expected a TLS config error, got {other:?}"),
    }
}

#[test]
fn the_defaults_verify_against_the_bundled_web_roots() {
    let tls = Tls::new();
    assert!(tls.root_store().unwrap().len() > 100);
    tls.client_config().unwrap();
}

#[test]
fn a_private_ca_replaces_the_web_roots_unless_they_are_asked_for() {
    let pki = certs::Pki::new();
    let private = Tls::new().ca_pem(&pki.ca.cert);
    assert_eq!(private.root_store().unwrap().len(), 1);
    let both = private.clone().web_roots(true);
    assert!(both.root_store().unwrap().len() > 100);
}

#[test]
fn the_system_store_replaces_the_web_roots_and_adds_to_a_private_ca() {
    // This machine's store: the distribution's bundle in /etc/ssl/certs.
    let system = Tls::new().system_roots(true);
    let n = system.root_store().unwrap().len();
    assert!(n > 100, "{n} roots from the system's store");
    let pki = certs::Pki::new();
    let both = system.ca_pem(&pki.ca.cert);
    assert_eq!(both.root_store().unwrap().len(), n + 1);
}

#[test]
fn no_ca_and_no_web_roots_is_refused() {
    assert_eq!(
        tls_error(Tls::new().web_roots(false).client_config()),
        TlsConfigError::NoTrustRoots
    );
}

#[test]
fn the_endpoint_host_is_the_server_name_unless_one_is_set() {
    let tls = Tls::new();
    let name = tls.resolve_server_name("redis.example", false).unwrap();
    assert_eq!(name.to_str(), "redis.example");
    let name = tls
        .clone()
        .server_name("cache.internal")
        .resolve_server_name("redis.example", false)
        .unwrap();
    assert_eq!(name.to_str(), "cache.internal");
}

#[test]
fn an_ip_endpoint_needs_a_server_name() {
    let err = tls_error(Tls::new().resolve_server_name("10.0.0.7", true));
    assert_eq!(
        err,
        TlsConfigError::ServerNameRequired {
            host: "10.0.0.7".into()
        }
    );
    let name = Tls::new()
        .server_name("10.0.0.7")
        .resolve_server_name("10.0.0.7", true)
        .unwrap();
    assert!(matches!(name, ServerName::IpAddress(_)));
}

#[test]
fn a_malformed_server_name_is_refused() {
    let err = tls_error(
        Tls::new()
            .server_name("no spaces allowed")
            .resolve_server_name("h", false),
    );
    assert_eq!(
        err,
        TlsConfigError::BadServerName("no spaces allowed".into())
    );
}

#[test]
fn a_ca_pem_without_certificates_is_refused() {
    let err = tls_error(Tls::new().ca_pem("just text\n").client_config());
    assert!(
        matches!(err, TlsConfigError::NoCertificate { .. }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "no certificate in CA (PEM given inline)");
}

#[test]
fn a_broken_pem_is_refused_with_its_reason() {
    let broken = "-----BEGIN CERTIFICATE-----\nnot base64 at all!!\n-----END CERTIFICATE-----\n";
    let err = tls_error(Tls::new().ca_pem(broken).client_config());
    assert!(matches!(err, TlsConfigError::BadPem { .. }), "{err:?}");
}

#[test]
fn a_missing_ca_file_is_refused_with_its_path() {
    let err = tls_error(Tls::new().ca_file("/nonexistent/ca.pem").client_config());
    assert!(matches!(err, TlsConfigError::Unreadable { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
}

#[test]
fn a_client_key_that_is_not_the_certificates_is_refused() {
    let pki = certs::Pki::new();
    let tls = Tls::new().client_auth(&pki.client.cert, &pki.server.key);
    assert_eq!(tls_error(tls.client_config()), TlsConfigError::KeyMismatch);
}

#[test]
fn a_client_key_pem_without_a_key_is_refused() {
    let pki = certs::Pki::new();
    let tls = Tls::new().client_auth(&pki.client.cert, &pki.client.cert);
    assert!(matches!(
        tls_error(tls.client_config()),
        TlsConfigError::NoKey { .. }
    ));
}

#[test]
fn certificates_and_keys_are_read_from_files_when_the_config_is_made() {
    let pki = certs::Pki::new();
    let dir = std::env::temp_dir().join(format!("relink-tls-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = pki.write_to(&dir);
    let tls = Tls::new()
        .ca_file(&files.ca)
        .client_auth_files(&files.client.0, &files.client.1);
    let result = tls.client_config();
    std::fs::remove_dir_all(&dir).unwrap();
    let config = result.unwrap();
    assert!(config.client_auth_cert_resolver.has_certs());
}

#[test]
fn debug_never_prints_the_client_key() {
    let pki = certs::Pki::new();
    let tls = Tls::new().client_auth(&pki.client.cert, &pki.client.key);
    let text = format!("{tls:?}");
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

#[test]
fn build_refuses_an_ip_endpoint_without_a_server_name() {
    let b = crate::Link::builder("tcp://127.0.0.1:6379").tls(Tls::new());
    assert!(matches!(
        b.into_config().unwrap_err(),
        ConfigError::Tls(TlsConfigError::ServerNameRequired { .. })
    ));
}

#[test]
fn build_refuses_a_bad_ca_pem() {
    let b = crate::Link::builder("tcp://localhost:6379")
        .tls(Tls::new().ca_pem(b"-----BEGIN CERTIFICATE-----\nnot base64!\n"));
    assert!(matches!(b.into_config().unwrap_err(), ConfigError::Tls(_)));
}

#[test]
fn each_endpoint_checks_its_own_host_name_unless_one_is_set() {
    let names = |b: crate::Builder| -> Vec<String> {
        b.into_config()
            .unwrap()
            .core
            .tls
            .unwrap()
            .iter()
            .map(|s| s.server_name.to_str().into_owned())
            .collect()
    };
    let b = crate::Link::builder("tcp://a.example:1").endpoint("tcp://b.example:2");
    assert_eq!(names(b.tls(Tls::new())), ["a.example", "b.example"]);
    let b = crate::Link::builder("tcp://a.example:1").endpoint("tcp://10.0.0.1:2");
    assert_eq!(
        names(b.tls(Tls::new().server_name("c.example"))),
        ["c.example", "c.example"]
    );
}

/// Replaces `path` as rotation tools do: a new file renamed over the old one (a new inode, so
/// the change is seen even within one tick of the file clock).
fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A temp dir of its own, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("relink-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn changed_files_are_read_again_and_a_broken_change_keeps_the_last_good_config_said_once() {
    let pki = certs::Pki::new();
    let dir = Dir::new("reload");
    let (ca, cert, key) = (dir.0.join("ca"), dir.0.join("crt"), dir.0.join("key"));
    std::fs::write(&ca, &pki.ca.cert).unwrap();
    std::fs::write(&cert, &pki.client.cert).unwrap();
    std::fs::write(&key, &pki.client.key).unwrap();
    let tls = Tls::new().ca_file(&ca).client_auth_files(&cert, &key);
    let (first, source) = tls.credentials(&Arc::from("t")).unwrap();
    let source = source.expect("files: a source that renews them");
    let (same, none) = source.current();
    assert!(
        Arc::ptr_eq(&first, &same) && none.is_none(),
        "unchanged files"
    );

    replace(&key, "-----BEGIN PRIVATE KEY-----\nbroken");
    let (kept, refused) = source.current();
    assert!(
        Arc::ptr_eq(&first, &kept),
        "the last good configuration stays"
    );
    assert!(
        matches!(refused, Some(TlsConfigError::BadPem { .. })),
        "{refused:?}"
    );
    let (kept, again) = source.current();
    assert!(Arc::ptr_eq(&first, &kept) && again.is_none(), "said once");

    let other = certs::Pki::new();
    replace(&key, &other.client.key);
    let (kept, mismatch) = source.current();
    assert!(Arc::ptr_eq(&first, &kept));
    assert_eq!(
        mismatch,
        Some(TlsConfigError::KeyMismatch),
        "a rotation half done"
    );
    replace(&cert, &other.client.cert);
    let (renewed, none) = source.current();
    assert!(!Arc::ptr_eq(&first, &renewed) && none.is_none(), "renewed");
}

#[test]
fn inline_pem_needs_no_source() {
    let pki = certs::Pki::new();
    let (_, source) = Tls::new()
        .ca_pem(&pki.ca.cert)
        .credentials(&Arc::from("t"))
        .unwrap();
    assert!(source.is_none());
}
