//! The shared conformance suite, run against `EmbeddedMetaStore`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sluice_meta::conformance::Harness;
use sluice_meta::{EmbeddedMetaStore, Revision};

/// Each store is a fresh file in the harness's temporary directory.
struct Embedded {
    dir: tempfile::TempDir,
    next: AtomicUsize,
}

impl Embedded {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("create a temporary directory"),
            next: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Harness for Embedded {
    type Store = EmbeddedMetaStore;

    async fn store(&self) -> Arc<EmbeddedMetaStore> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("meta-{n}.redb"));
        Arc::new(
            EmbeddedMetaStore::open(path)
                .await
                .expect("open a new store"),
        )
    }

    fn lease_ttl(&self) -> Duration {
        Duration::from_millis(800)
    }

    async fn compact(&self, store: &EmbeddedMetaStore, revision: Revision) {
        store.compact(revision);
    }
}

sluice_meta::conformance_tests!(Embedded::new());
