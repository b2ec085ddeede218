//! `rediss://` (docs/service.md#tls): the Redis client for a TLS URL, and
//! the TLS settings the pub/sub reader ([`crate::pubsub`]) wraps its own
//! connection in. Both trust the same roots: the file `--redis-ca-file`
//! names if given, else the Mozilla roots compiled in. Built only with the
//! cargo feature `tls`; without it a `rediss://` URL is a start error.

use redis::{ConnectionAddr, ConnectionInfo};
use std::path::{Path, PathBuf};

/// The largest `--redis-ca-file` read: a bundle of CA certificates is a few
/// KiB to a few hundred; more is not a CA file.
pub const MAX_CA_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `url` is redacted.
    #[error(
        "`{url}` asks for TLS (`rediss://`), but this ruled was built without it: \
         build it with `cargo build -p ruled --features tls`"
    )]
    NotBuilt { url: String },
    #[error("--redis-ca-file is for a `rediss://` URL; `{url}` does not use TLS")]
    CaFileWithoutTls { url: String },
    #[error(
        "`{url}` turns certificate checks off (`#insecure`); ruled always checks them: \
         give the server's CA with --redis-ca-file instead"
    )]
    Insecure { url: String },
    /// `source` names the file (a regular file of at most
    /// [`MAX_CA_FILE_BYTES`], read like every input file).
    #[error("cannot read the Redis CA file {source}")]
    CaFileRead {
        source: rulecore_io::input_file::InputError,
    },
    #[error("the Redis CA file {} {reason}", path.display())]
    CaFileBad { path: PathBuf, reason: String },
    #[error("cannot set up TLS: {0}")]
    Setup(String),
}

/// The TLS side of the pub/sub connection: nothing for a plain URL.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    #[cfg(feature = "tls")]
    config: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// Whether `url` asks for TLS (`rediss://`, or `valkeys://` as the
/// Redis client also reads it).
pub fn wants_tls(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| matches!(scheme, "rediss" | "valkeys"))
}

/// Refuses a TLS URL (`url` redacted) in a build without the `tls`
/// feature, before the Redis client reads it and says less.
pub fn check_built(url: &str) -> Result<(), TlsError> {
    if wants_tls(url) && !cfg!(feature = "tls") {
        return Err(TlsError::NotBuilt { url: url.into() });
    }
    Ok(())
}

/// The Redis client for `info` (its URL `url`, redacted, for errors) and
/// the matching [`Tls`] for the pub/sub reader.
pub fn client(
    info: ConnectionInfo,
    url: &str,
    ca_file: Option<&Path>,
) -> Result<(redis::Client, Tls), TlsError> {
    let setup = |e: redis::RedisError| TlsError::Setup(e.to_string());
    let ConnectionAddr::TcpTls { insecure, .. } = info.addr() else {
        if ca_file.is_some() {
            return Err(TlsError::CaFileWithoutTls { url: url.into() });
        }
        return Ok((redis::Client::open(info).map_err(setup)?, Tls::default()));
    };
    if *insecure {
        return Err(TlsError::Insecure { url: url.into() });
    }
    tls_client(info, url, ca_file)
}

#[cfg(not(feature = "tls"))]
fn tls_client(
    _info: ConnectionInfo,
    url: &str,
    _ca_file: Option<&Path>,
) -> Result<(redis::Client, Tls), TlsError> {
    Err(TlsError::NotBuilt { url: url.into() })
}

#[cfg(feature = "tls")]
fn tls_client(
    info: ConnectionInfo,
    _url: &str,
    ca_file: Option<&Path>,
) -> Result<(redis::Client, Tls), TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = match ca_file {
        Some(path) => {
            let pem = rulecore_io::input_file::read_bounded(path, MAX_CA_FILE_BYTES)
                .map_err(|source| TlsError::CaFileRead { source })?;
            let bad = |reason: String| TlsError::CaFileBad {
                path: path.into(),
                reason,
            };
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(format!("is not PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("holds a certificate that is not a CA: {e}")))?;
            }
            if roots.is_empty() {
                return Err(bad("holds no PEM certificate".into()));
            }
            Some(pem)
        }
        None => {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            None
        }
    };
    // The ring provider by name: no process-wide default to depend on.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: ca_pem,
    };
    let client = redis::Client::build_with_tls(info, certificates)
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    let tls = Tls {
        config: Some(std::sync::Arc::new(config)),
    };
    Ok((client, tls))
}

impl Tls {
    /// `tcp` wrapped in TLS to `host` (its certificate checked against the
    /// roots and the name), or an error for a build without TLS.
    #[cfg(feature = "tls")]
    pub(crate) async fn wrap(
        &self,
        tcp: tokio::net::TcpStream,
        host: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let Some(config) = &self.config else {
            return Err(std::io::Error::other(
                "a `rediss://` address without TLS settings",
            ));
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{host}` is not a host name TLS can check: {e}"),
            )
        })?;
        tokio_rustls::TlsConnector::from(std::sync::Arc::clone(config))
            .connect(name, tcp)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    fn open(url: &str, ca: Option<&Path>) -> Result<(redis::Client, Tls), TlsError> {
        check_built(url)?;
        let info = url
            .into_connection_info()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        client(info, url, ca)
    }

    #[test]
    fn plain_urls_need_no_tls_and_take_no_ca_file() {
        assert!(open("redis://127.0.0.1:6379", None).is_ok());
        let err = open("redis://127.0.0.1:6379", Some(Path::new("/ca.pem")));
        assert!(
            matches!(err, Err(TlsError::CaFileWithoutTls { .. })),
            "{err:?}"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn insecure_is_refused() {
        let err = open("rediss://127.0.0.1:6380/#insecure", None);
        assert!(matches!(err, Err(TlsError::Insecure { .. })), "{err:?}");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn without_the_feature_rediss_says_how_to_build() {
        let Err(err) = open("rediss://127.0.0.1:6380", None) else {
            panic!("rediss:// without the tls feature must fail");
        };
        assert!(err.to_string().contains("--features tls"), "{err}");
        assert!(wants_tls("valkeys://h:1") && !wants_tls("redis://rediss"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_bad_ca_file_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let Err(err) = open("rediss://127.0.0.1:6380", Some(&path)) else {
            panic!("a CA file without certificates must fail");
        };
        assert!(err.to_string().contains("ca.pem"), "{err}");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let missing = dir.path().join("missing.pem");
        let Err(err) = open("rediss://127.0.0.1:6380", Some(&missing)) else {
            panic!("a missing CA file must fail");
        };
        assert!(err.to_string().contains("missing.pem"), "{err}");
        assert!(open("rediss://127.0.0.1:6380", None).is_ok());
    }
}
