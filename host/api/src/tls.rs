//! TLS on both listeners (`--tls-cert`, `--tls-key`): PEM files read at start
//! and again on SIGHUP ([`Tls::reload`]); a file that does not load keeps the
//! certificate in use. Each connection's handshake runs on its own task with a
//! time bound, so a client that never finishes one holds up no other.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const BACKLOG: usize = 64;

/// Which listener a configuration is for: the protocols it offers (ALPN).
#[derive(Debug, Clone, Copy)]
pub enum Listener {
    /// gRPC: HTTP/2 only.
    Grpc,
    /// `/metrics`, `/healthz`, `/api/v1`: HTTP/1.1.
    Http,
}

struct Configs {
    grpc: Arc<ServerConfig>,
    http: Arc<ServerConfig>,
}

/// The server's certificate and key, reloadable.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    configs: RwLock<Arc<Configs>>,
}

fn load(cert: &Path, key: &Path) -> anyhow::Result<Configs> {
    use anyhow::Context;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("--tls-cert {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("--tls-cert {}: not PEM certificates", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("--tls-cert {} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--tls-key {}: no PEM private key in it", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = |alpn: &[&[u8]]| -> anyhow::Result<Arc<ServerConfig>> {
        let mut c = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key.clone_key())
            .context("the certificate and key do not go together")?;
        c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(c))
    };
    Ok(Configs {
        grpc: config(&[b"h2"])?,
        http: config(&[b"http/1.1"])?,
    })
}

impl Tls {
    /// Reads the certificate chain and key (PEM).
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<Self>> {
        let configs = load(cert, key)?;
        Ok(Arc::new(Self {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            configs: RwLock::new(Arc::new(configs)),
        }))
    }

    /// Reads the files again; new connections use what they hold. On an
    /// error the certificate in use stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let configs = load(&self.cert, &self.key)?;
        *self
            .configs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(configs);
        Ok(())
    }

    fn config(&self, which: Listener) -> Arc<ServerConfig> {
        let configs = self
            .configs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match which {
            Listener::Grpc => configs.grpc.clone(),
            Listener::Http => configs.http.clone(),
        }
    }

    /// Accepts connections on `listener` and hands over those whose
    /// handshake succeeded, with their peer's address.
    pub fn accept(
        self: &Arc<Self>,
        listener: TcpListener,
        which: Listener,
    ) -> mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)> {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let tls = self.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, for one: wait, then go on.
                        tracing::warn!(error = %e, "A connection could not be accepted.");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                // Replies go out as written (a large one must not wait for a
                // delayed acknowledgement of its first segments).
                let _ = tcp.set_nodelay(true);
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.config(which));
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "A TLS handshake failed.");
                        }
                        Err(_) => tracing::debug!(%peer, "A TLS handshake took too long."),
                    }
                });
            }
        });
        rx
    }
}
