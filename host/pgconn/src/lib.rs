//! Connecting to PostgreSQL as a `postgres://` DSN asks, TLS included.
//!
//! tokio-postgres reads `sslmode` as `disable`, `prefer` or `require` and
//! verifies nothing itself; libpq's users also write `verify-ca`,
//! `verify-full` and `sslrootcert`. [`settings`] takes those two out of the
//! DSN and gives back the tokio-postgres [`Config`] with a rustls connector
//! that checks what the mode promises, as libpq does:
//!
//! | `sslmode` | TLS | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (no `sslmode`) | if the server offers it | no |
//! | `require` | always | no; chain only when `sslrootcert` is given |
//! | `verify-ca` | always | chain (to `sslrootcert`, else the Mozilla roots) |
//! | `verify-full` | always | chain and host name |

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error as TlsError, SignatureScheme};
use tokio_postgres::Config;
use tokio_postgres::config::SslMode;
pub use tokio_postgres_rustls::MakeRustlsConnect;

/// What a DSN's `sslmode` asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, unchecked.
    Prefer,
    /// TLS, certificate unchecked (unless a root certificate is given).
    Require,
    /// TLS, certificate chain checked.
    VerifyCa,
    /// TLS, certificate chain and host name checked.
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "disable" => Self::Disable,
            "allow" | "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode `{}` is not one of disable, prefer, require, verify-ca, verify-full",
                    other.chars().take(40).collect::<String>()
                ));
            }
        })
    }
}

/// The TLS settings of a DSN and the DSN without them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    /// `sslmode` (default `prefer`).
    pub mode: Mode,
    /// `sslrootcert`: a PEM file of the certificates to trust.
    pub root_cert: Option<String>,
    /// The DSN without `sslmode` and `sslrootcert`.
    pub rest: String,
}

/// Takes `sslmode` and `sslrootcert` out of a `postgres://` DSN's query
/// string. Errors name the parameter, never the DSN.
pub fn tls_params(dsn: &str) -> Result<TlsParams, String> {
    let (base, query) = match dsn.split_once('?') {
        Some((base, query)) => (base, query),
        None => (dsn, ""),
    };
    let mut mode = Mode::Prefer;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for piece in query.split('&').filter(|p| !p.is_empty()) {
        let mut pairs = form_urlencoded::parse(piece.as_bytes());
        match pairs.next() {
            Some((key, value)) if key == "sslmode" => mode = Mode::parse(&value)?,
            Some((key, value)) if key == "sslrootcert" => {
                if value.is_empty() {
                    return Err("sslrootcert is empty".into());
                }
                root_cert = Some(value.into_owned());
            }
            _ => kept.push(piece),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(TlsParams {
        mode,
        root_cert,
        rest,
    })
}

/// The tokio-postgres settings of `dsn` and the connector for its TLS mode.
/// Errors never repeat the DSN (it holds a password).
pub fn settings(dsn: &str) -> Result<(Config, MakeRustlsConnect), String> {
    let tls = tls_params(dsn)?;
    let mut config: Config = tls.rest.parse().map_err(|e: tokio_postgres::Error| {
        let text = e.to_string();
        // tokio-postgres names the part it could not read, not the DSN.
        format!(
            "the DSN is not valid ({})",
            text.chars().take(200).collect::<String>()
        )
    })?;
    config.ssl_mode(match tls.mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = || -> Result<Arc<rustls::RootCertStore>, String> {
        let mut store = rustls::RootCertStore::empty();
        match &tls.root_cert {
            Some(path) => {
                let pem = read_root_cert(path)?;
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("sslrootcert {path}: {e}"))?;
                if certs.is_empty() {
                    return Err(format!("sslrootcert {path} holds no certificate"));
                }
                for cert in certs {
                    store
                        .add(cert)
                        .map_err(|e| format!("sslrootcert {path}: {e}"))?;
                }
            }
            None => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        Ok(Arc::new(store))
    };
    let webpki = |roots: Arc<rustls::RootCertStore>| {
        WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("cannot check certificates: {e}"))
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (tls.mode, &tls.root_cert) {
        (Mode::VerifyFull, _) => webpki(roots()?)?,
        (Mode::VerifyCa, _) | (Mode::Require, Some(_)) => Arc::new(ChainOnly(webpki(roots()?)?)),
        (Mode::Disable | Mode::Prefer | Mode::Require, _) => {
            Arc::new(Unchecked(provider.signature_verification_algorithms))
        }
    };
    let client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok((config, MakeRustlsConnect::new(client)))
}

/// Largest `sslrootcert` file read (a bundle of a few hundred certificates).
const MAX_ROOT_CERT_BYTES: u64 = 1 << 20;

/// The bytes of the `sslrootcert` file: a regular file of at most
/// [`MAX_ROOT_CERT_BYTES`] (a changefeed file is the tenant's to write; a
/// path to a device or pipe must not hang or fill the host).
fn read_root_cert(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("sslrootcert {path}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("sslrootcert {path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("sslrootcert {path} is not a regular file"));
    }
    if meta.len() > MAX_ROOT_CERT_BYTES {
        return Err(format!(
            "sslrootcert {path} is over {} KiB",
            MAX_ROOT_CERT_BYTES >> 10
        ));
    }
    let mut pem = Vec::new();
    file.take(MAX_ROOT_CERT_BYTES)
        .read_to_end(&mut pem)
        .map_err(|e| format!("sslrootcert {path}: {e}"))?;
    Ok(pem)
}

/// A driver error with its causes (tokio-postgres shows only the outermost:
/// "error performing TLS handshake", not why).
pub fn error_text(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Whether `text` (from [`error_text`]) says the server's certificate was
/// refused: a setting to fix, not a moment to wait out.
pub fn is_certificate_error(text: &str) -> bool {
    text.contains("invalid peer certificate")
}

/// Checks the chain, not the name (`verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Takes any certificate (`prefer`, `require` without a root certificate:
/// encrypted, not authenticated, as with libpq); the handshake's signatures
/// are still checked.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_come_out_of_the_dsn_and_the_rest_stays() {
        let t = tls_params(
            "postgres://u:pw@db:5432/x?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(t.mode, Mode::VerifyFull);
        assert_eq!(t.root_cert.as_deref(), Some("/etc/ca x.pem"));
        assert_eq!(
            t.rest,
            "postgres://u:pw@db:5432/x?application_name=a&connect_timeout=3"
        );
        let plain = tls_params("postgres://u:pw@db/x").unwrap();
        assert_eq!(
            (plain.mode, plain.rest.as_str()),
            (Mode::Prefer, "postgres://u:pw@db/x")
        );
        assert_eq!(
            tls_params("postgres://u:pw@db/x?sslmode=disable")
                .unwrap()
                .rest,
            "postgres://u:pw@db/x"
        );
    }

    #[test]
    fn bad_tls_parameters_are_named_without_the_dsn() {
        let e = tls_params("postgres://u:secret@db/x?sslmode=strict").unwrap_err();
        assert!(e.contains("sslmode `strict`"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = tls_params("postgres://u:secret@db/x?sslrootcert=").unwrap_err();
        assert_eq!(e, "sslrootcert is empty");
        let Err(e) =
            settings("postgres://u:secret@db/x?sslmode=verify-ca&sslrootcert=/nonexistent.pem")
        else {
            panic!("a missing root certificate file is refused");
        };
        assert!(e.starts_with("sslrootcert /nonexistent.pem:"), "{e}");
        // A device is refused before a byte is read (it would never end).
        let Err(e) = settings("postgres://u:pw@db/x?sslmode=verify-ca&sslrootcert=/dev/zero")
        else {
            panic!("a device as root certificate is refused");
        };
        assert_eq!(e, "sslrootcert /dev/zero is not a regular file");
        let dir = std::env::temp_dir().join(format!("pgconn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let Err(e) = settings(&format!(
            "postgres://u:pw@db/x?sslmode=verify-full&sslrootcert={}",
            junk.display()
        )) else {
            panic!("a file with no certificate is refused");
        };
        assert!(e.ends_with("holds no certificate"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!e.contains("secret"), "{e}");
        for mode in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            assert!(
                settings(&format!("postgres://u:pw@db/x?sslmode={mode}")).is_ok(),
                "{mode}"
            );
        }
    }
}
