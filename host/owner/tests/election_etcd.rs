//! The election's checks on a private etcd (own data dir, own ports): the same
//! checks the unit tests run on the embedded store. Needs the `etcd` binary
//! (Debian: `etcd-server`); `.ci/run` and `cargo xtask test` install it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_meta::{EtcdMetaStore, MetaStore};
use sluice_owner::election_checks;
use sluice_tests::etcd::PrivateEtcd;

async fn connect(etcd: &PrivateEtcd) -> Arc<dyn MetaStore> {
    etcd.wait_listening();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(store) = EtcdMetaStore::connect(std::slice::from_ref(&etcd.endpoint)).await
            && store.revision().await.is_ok()
        {
            return Arc::new(store);
        }
        assert!(Instant::now() < deadline, "etcd did not answer within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_line_of_succession_holds_on_etcd() {
    let etcd = PrivateEtcd::start();
    election_checks::line_of_succession(connect(&etcd).await).await;
}

#[tokio::test]
async fn registrations_and_their_guards_hold_on_etcd() {
    let etcd = PrivateEtcd::start();
    election_checks::registrations_and_their_guards(connect(&etcd).await).await;
}
