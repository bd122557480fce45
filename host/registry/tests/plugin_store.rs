//! The cluster's plugin store (ADR 0012) on a real S3-compatible server: a
//! plugin uploaded through one capture loads on another through its cache,
//! damaged copies are caught, and the cluster agrees on one store.

use std::path::Path;
use std::sync::Arc;

use sluice_meta::{EmbeddedMetaStore, MetaStore};
use sluice_owner::PluginId;
use sluice_redo::StorageUri;
use sluice_registry::{PluginFiles, PluginRegistry, RegistryError, hex_sha256};
use sluice_runtime::{PluginKind, PluginRuntime, RuntimeConfig};
use sluice_tests::s3::{S3Server, SECRET_KEY};

/// One capture's registry: its own data dir (cache, precompiled artifacts),
/// the cluster's meta store and plugin store, which it agrees on.
async fn capture(meta: &Arc<dyn MetaStore>, uri: &StorageUri, data: &Path) -> PluginRegistry {
    let registry = capture_without_agreeing(meta, uri, data).await;
    registry.files().agree(meta.as_ref(), true).await.unwrap();
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_uploaded_through_one_capture_runs_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = S3Server::start(&dir.path().join("s3"), "plugins");
    let uri = StorageUri::parse(&server.uri("plugins", "cluster-1/files")).unwrap();
    let meta: Arc<dyn MetaStore> = Arc::new(
        EmbeddedMetaStore::open(dir.path().join("meta.redb"))
            .await
            .unwrap(),
    );
    let a = capture(&meta, &uri, &dir.path().join("a")).await;
    let b = capture(&meta, &uri, &dir.path().join("b")).await;
    assert!(!a.files().location().contains(SECRET_KEY));
    assert_eq!(
        a.files().location(),
        format!(
            "s3://plugins/cluster-1/files at http://127.0.0.1:{}",
            server.port
        )
    );

    let id: PluginId = "sink-blackhole@0.1.0".parse().unwrap();
    let bytes = std::fs::read(sluice_tests::plugin_path("sink-blackhole")).unwrap();
    let sha = hex_sha256(&bytes);
    let record = a
        .upload("acme", &id, PluginKind::Sink, &bytes)
        .await
        .unwrap();
    assert_eq!(record.sha256, sha);
    // In the bucket, under the prefix, by its sha256: nothing in a data dir.
    let object = dir
        .path()
        .join(format!("s3/plugins/cluster-1/files/{sha}.wasm"));
    assert_eq!(std::fs::read(&object).unwrap(), bytes);
    assert_eq!(a.files().count().await.unwrap(), 1);

    // The other capture reads it from the store, keeps it in its cache, and
    // loads it from there next time, even with the store gone.
    let cached = dir.path().join(format!("b/plugin-cache/{sha}.wasm"));
    assert!(!cached.exists());
    assert_eq!(b.load("acme", &id).await.unwrap().digest(), sha);
    assert_eq!(std::fs::read(&cached).unwrap(), bytes);
    server.kill();
    assert_eq!(b.load("acme", &id).await.unwrap().digest(), sha);

    // What a crash in the middle of a copy into the cache leaves goes at the
    // next start; the cached file stays.
    let leftover = dir
        .path()
        .join(format!("b/plugin-cache/{sha}.wasm.tmp4242-0"));
    std::fs::write(&leftover, b"half").unwrap();
    let b = capture_without_agreeing(&meta, &uri, &dir.path().join("b")).await;
    assert!(!leftover.exists());
    assert_eq!(b.load("acme", &id).await.unwrap().digest(), sha);

    // A damaged cache file is read again from the store, not run.
    server.spawn();
    std::fs::write(&cached, b"tampered").unwrap();
    assert_eq!(b.load("acme", &id).await.unwrap().digest(), sha);
    assert_eq!(std::fs::read(&cached).unwrap(), bytes);

    // A damaged object in the store is caught on a capture that has no copy.
    std::fs::write(&object, b"tampered").unwrap();
    let c = capture(&meta, &uri, &dir.path().join("c")).await;
    let err = c.load("acme", &id).await.unwrap_err();
    assert!(matches!(err, RegistryError::Damaged { .. }), "{err}");
    assert!(
        !dir.path()
            .join(format!("c/plugin-cache/{sha}.wasm"))
            .exists()
    );

    // A store that does not answer is an error to retry, and says where.
    std::fs::remove_dir_all(dir.path().join("c/plugin-cache")).unwrap();
    server.kill();
    let c = capture_without_agreeing(&meta, &uri, &dir.path().join("c")).await;
    let err = c.load("acme", &id).await.unwrap_err();
    assert!(matches!(err, RegistryError::Io { .. }), "{err}");
    let shown = format!("{err:#}");
    assert!(!shown.contains(SECRET_KEY), "{shown}");
    server.spawn();

    // Removing the last record removes the file from the store and the cache.
    std::fs::write(&object, &bytes).unwrap();
    a.delete("acme", &id, &[]).await.unwrap();
    assert!(!object.exists());
    assert_eq!(a.files().count().await.unwrap(), 0);
}

async fn capture_without_agreeing(
    meta: &Arc<dyn MetaStore>,
    uri: &StorageUri,
    data: &Path,
) -> PluginRegistry {
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(data.join("precompiled")),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let files = PluginFiles::open(uri, &data.join("plugin-cache"))
        .await
        .unwrap();
    PluginRegistry::new(meta.clone(), runtime, files, 64 << 20)
}

#[tokio::test]
async fn the_cluster_agrees_on_one_plugin_store() {
    let dir = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetaStore> = Arc::new(
        EmbeddedMetaStore::open(dir.path().join("meta.redb"))
            .await
            .unwrap(),
    );
    let shared = StorageUri::Local(dir.path().join("shared/plugins"));
    let own = StorageUri::Local(dir.path().join("a/plugins"));
    let files = |uri: StorageUri, data: &'static str| {
        let cache = dir.path().join(data).join("plugin-cache");
        async move { PluginFiles::open(&uri, &cache).await.unwrap() }
    };
    // Not recorded when asked not to (a single server's own data dir).
    files(own.clone(), "a")
        .await
        .agree(meta.as_ref(), false)
        .await
        .unwrap();
    // The first one recorded stays; the same one agrees.
    let first = files(shared.clone(), "a").await;
    first.agree(meta.as_ref(), true).await.unwrap();
    files(shared.clone(), "b")
        .await
        .agree(meta.as_ref(), true)
        .await
        .unwrap();
    // Another one is refused, naming both, recorded or not.
    let shared_shown = first.location().to_string();
    for (uri, explicit) in [(own.clone(), false), (own, true)] {
        let err = files(uri.clone(), "b")
            .await
            .agree(meta.as_ref(), explicit)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "plugin store: this cluster keeps its plugin files in {shared_shown}; start this \
                 server with the same --plugin-store (it uses file://{}/a/plugins)",
                dir.path().display()
            )
        );
    }
    // A bucket's root is not a place for them.
    let err = PluginFiles::open(
        &StorageUri::parse("s3://bucket?endpoint=http://127.0.0.1:1&region=x").unwrap(),
        &dir.path().join("cache"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("is the root of its bucket; name a prefix for the plugin files"),
        "{err}"
    );
}

/// The local cache of an object store's plugin files keeps what its bound
/// allows, a bound above the default included; past it the least recently
/// read go.
#[tokio::test]
async fn the_local_cache_of_plugin_files_is_bounded_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("plugin-cache");
    std::fs::create_dir_all(&cache).unwrap();
    // Two files of 1.5 GiB each (sparse: they take no disk), the first
    // read longer ago, and a copy a crash interrupted.
    for (name, age_s) in [("old.wasm", 60), ("new.wasm", 10)] {
        let f = std::fs::File::create(cache.join(name)).unwrap();
        f.set_len(3 << 29).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(age_s))
            .unwrap();
    }
    std::fs::write(cache.join("x.wasm.tmp1-0"), b"torn").unwrap();
    let uri =
        StorageUri::parse("s3://bucket/plugins?endpoint=http://127.0.0.1:1&region=x").unwrap();
    let names = || {
        let mut n: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    let files = PluginFiles::open(&uri, &cache).await.unwrap();
    assert_eq!(
        names(),
        ["new.wasm", "old.wasm"],
        "only the torn copy goes at open"
    );
    let files = files.with_cache_bound(4 << 30);
    assert_eq!(names(), ["new.wasm", "old.wasm"], "3 GiB fit a 4 GiB bound");
    drop(files.with_cache_bound(2 << 30));
    assert_eq!(names(), ["new.wasm"]);
}
