//! The shared conformance suite, run against `EtcdMetaStore` on a private etcd
//! (own data dir, own ports) per check. Needs the `etcd` binary (Debian:
//! `etcd-server`); `.ci/run` and `cargo xtask test` install it.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice_meta::conformance::Harness;
use sluice_meta::{EtcdMetaStore, MetaStore, Revision};

/// A private etcd server, killed when dropped.
struct PrivateEtcd {
    child: Child,
    _dir: tempfile::TempDir,
    endpoint: String,
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl PrivateEtcd {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "sluice-test", "--data-dir"])
            .arg(dir.path().join("etcd"))
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("sluice-test={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd is not installed: apt-get install etcd-server (cargo xtask test does)");
        Self {
            child,
            _dir: dir,
            endpoint: format!("127.0.0.1:{client}"),
        }
    }
}

/// One private etcd per store; they live as long as the harness (one check).
struct Etcd {
    servers: Mutex<Vec<PrivateEtcd>>,
}

#[async_trait]
impl Harness for Etcd {
    type Store = EtcdMetaStore;

    async fn store(&self) -> Arc<EtcdMetaStore> {
        let server = PrivateEtcd::start();
        let endpoint = server.endpoint.clone();
        self.servers.lock().unwrap().push(server);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(store) = EtcdMetaStore::connect(std::slice::from_ref(&endpoint)).await
                && store.revision().await.is_ok()
            {
                return Arc::new(store);
            }
            assert!(
                Instant::now() < deadline,
                "etcd at {endpoint} did not start within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn lease_ttl(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn compact(&self, store: &EtcdMetaStore, revision: Revision) {
        store.compact(revision.next()).await.expect("compaction");
    }
}

sluice_meta::conformance_tests!(Etcd {
    servers: Mutex::new(Vec::new())
});
