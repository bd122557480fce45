//! Addresses no plugin may be granted: the server's own listeners (its admin
//! API) and its meta store. A changefeed that grants one (a TCP pair, an HTTP
//! host, a SQL DSN that reaches it) is refused when it is created, updated or
//! swapped.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sluice_config::{Capabilities, GrantedHost};
use sluice_owner::OwnerError;

/// How long a grant's name may take to resolve before it is taken as
/// unresolvable (and so not this server).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The server's own addresses.
#[derive(Debug, Clone, Default)]
pub struct Reserved {
    /// What each is, and where it listens.
    listeners: Vec<(&'static str, SocketAddr)>,
    /// The meta store's endpoints (`host:port`, a scheme allowed), resolved
    /// at every check.
    meta: Vec<String>,
}

impl Reserved {
    /// The listeners (`("the gRPC listener", addr)`) and meta store endpoints
    /// of this server.
    pub fn new(listeners: Vec<(&'static str, SocketAddr)>, meta: Vec<String>) -> Self {
        Self { listeners, meta }
    }

    /// The listeners' addresses, which a running plugin's HTTP requests are
    /// checked against when they are sent (a name may resolve elsewhere
    /// later than when it was granted).
    pub fn listeners(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(_, a)| *a).collect()
    }

    /// Refuses grants in `caps` (of the plugin table `at`) that reach one of
    /// the server's own addresses.
    pub async fn check(&self, at: &str, caps: &Capabilities) -> Result<(), OwnerError> {
        if self.listeners.is_empty() && self.meta.is_empty() {
            return Ok(());
        }
        let mut reserved = self.listeners.clone();
        for endpoint in &self.meta {
            let bare = endpoint
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .trim_end_matches('/');
            for addr in resolve_all(bare).await {
                reserved.push(("meta store", addr));
            }
        }
        for granted in caps.hosts(at) {
            let ips = resolve_host(&granted).await;
            for (what, addr) in &reserved {
                if ips
                    .iter()
                    .any(|ip| sluice_runtime::reaches(*ip, granted.port, *addr))
                {
                    let every_port = if granted.port.is_none() {
                        " (a host without a port grants every port of it: name the port)"
                    } else {
                        ""
                    };
                    return Err(OwnerError::Invalid(format!(
                        "{}: `{}` reaches this server's {what} ({addr}){every_port}; a plugin may not be granted the server's own listeners or its meta store",
                        granted.key, granted.grant
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The addresses `host:port` resolves to (none when it does not resolve in
/// time).
async fn resolve_all(host_port: &str) -> Vec<SocketAddr> {
    if let Ok(addr) = host_port.parse::<SocketAddr>() {
        return vec![addr];
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(host_port)).await {
        Ok(Ok(addrs)) => addrs.collect(),
        _ => Vec::new(),
    }
}

/// The IP addresses a grant's host stands for.
async fn resolve_host(granted: &GrantedHost) -> Vec<IpAddr> {
    if let Ok(ip) = granted.host.parse::<IpAddr>() {
        return vec![ip];
    }
    let port = granted.port.unwrap_or(80);
    let lookup = tokio::net::lookup_host((granted.host.as_str(), port));
    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(tcp: &[&str], http: &[&str], sql: &[(&str, &str)]) -> Capabilities {
        Capabilities {
            tcp: tcp.iter().map(|s| s.to_string()).collect(),
            http: http.iter().map(|s| s.to_string()).collect(),
            sql: sql
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Capabilities::default()
        }
    }

    async fn refusal(reserved: &Reserved, caps: Capabilities) -> Option<String> {
        reserved
            .check("sink", &caps)
            .await
            .err()
            .map(|e| e.to_string())
    }

    #[tokio::test]
    async fn grants_that_reach_the_servers_listeners_or_meta_store_are_refused() {
        let reserved = Reserved::new(
            vec![
                ("gRPC listener", "0.0.0.0:8300".parse().unwrap()),
                ("HTTP listener", "127.0.0.1:8301".parse().unwrap()),
            ],
            vec!["http://127.0.0.1:2379".into()],
        );
        // Another port of this machine, a remote address: granted.
        for ok in [
            caps(
                &["127.0.0.1:9000", "10.255.255.1:8300"],
                &["localhost:9000"],
                &[],
            ),
            caps(&[], &[], &[("db", "mysql://u:p@127.0.0.1:3306/d")]),
        ] {
            assert_eq!(refusal(&reserved, ok).await, None);
        }
        let cases = [
            (
                caps(&["127.0.0.1:9000", "127.0.0.1:8300"], &[], &[]),
                "sink.capabilities.tcp[1]: `127.0.0.1:8300` reaches this server's gRPC listener (0.0.0.0:8300); a plugin may not be granted the server's own listeners or its meta store",
            ),
            (
                caps(&["[::1]:8301"], &[], &[]),
                "sink.capabilities.tcp[0]: `[::1]:8301` reaches this server's HTTP listener (127.0.0.1:8301)",
            ),
            (
                caps(&[], &["localhost:8301"], &[]),
                "sink.capabilities.http[0]: `localhost:8301` reaches this server's HTTP listener",
            ),
            (
                caps(&[], &["localhost"], &[]),
                "(a host without a port grants every port of it: name the port)",
            ),
            (
                caps(
                    &[],
                    &[],
                    &[("meta", "mysql://root:secret@localhost:2379/x")],
                ),
                "sink.capabilities.sql.meta: `localhost:2379` reaches this server's meta store (127.0.0.1:2379)",
            ),
        ];
        for (caps, want) in cases {
            let got = refusal(&reserved, caps.clone()).await;
            let got = got.unwrap_or_else(|| panic!("{caps:?} was granted"));
            assert!(got.contains(want), "{got}\nwant: {want}");
            assert!(!got.contains("secret"), "{got}");
        }
        // `sluice run` has no listeners: everything is granted.
        assert_eq!(
            refusal(
                &Reserved::default(),
                caps(&["127.0.0.1:8300"], &["localhost"], &[])
            )
            .await,
            None
        );
    }
}
