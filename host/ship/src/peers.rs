//! How one server reaches another's gRPC listener (a receiver its reader, a
//! standby the owner): plain HTTP/2, or TLS verified by the CA the cluster's
//! certificates chain to (`--peer-ca`), so rows shipped between captures and
//! forwarded calls, tokens included, are not sent in the clear.

use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// The way to other servers of the cluster.
#[derive(Clone, Debug, Default)]
pub struct Peers {
    tls: Option<ClientTlsConfig>,
    /// The PEM certificates TLS trusts (for clients other than gRPC's).
    ca: Option<Vec<u8>>,
}

impl Peers {
    /// Plain HTTP/2 (a cluster whose servers run without `--tls-cert`).
    pub fn plain() -> Self {
        Self::default()
    }

    /// TLS, trusting the PEM certificates in `ca` (each server's certificate
    /// must name the host of the address it advertises).
    pub fn tls(ca: &[u8]) -> Self {
        Self {
            tls: Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca))),
            ca: Some(ca.to_vec()),
        }
    }

    /// The PEM certificates peers' TLS is verified with; none for plain.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca.as_deref()
    }

    /// Whether peers are reached over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// An endpoint for the server whose gRPC listener is at `address`
    /// (`host:port`): connected on first use, and failing the calls under
    /// way within seconds once that server stops answering (frozen, cut off).
    pub fn endpoint(&self, address: &str) -> Result<Endpoint, String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| format!("the address {address}: {e}"))?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(3));
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|e| format!("TLS to {address}: {e}"))?;
        }
        Ok(endpoint)
    }
}
