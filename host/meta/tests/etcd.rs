//! The shared conformance suite, run against `EtcdMetaStore` on a private etcd
//! (own data dir, own ports) per check. Needs the `etcd` binary (Debian:
//! `etcd-server`); `.ci/run` and `cargo xtask test` install it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice_meta::conformance::Harness;
use sluice_meta::{EtcdMetaStore, MetaStore, Revision};
use sluice_tests::etcd::PrivateEtcd;

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
