//! What only the embedded store promises: durability across restarts and kills,
//! clear errors for bad files, lease cleanup on open, the bounded watch history.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_meta::{
    EmbeddedMetaStore, EmbeddedOptions, FORMAT_VERSION, MetaError, MetaStore, Op, Revision, Txn,
    WATCH_BUFFER, WatchEventKind,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn assert_corrupt(result: Result<EmbeddedMetaStore, MetaError>, path: &Path) -> String {
    match result {
        Err(err @ MetaError::Corrupt { .. }) => {
            let message = err.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("restore it from a backup"), "{message}");
            message
        }
        other => panic!("expected Corrupt for {}, got {other:?}", path.display()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_keeps_data_and_revision_and_drops_leased_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(EmbeddedMetaStore::FILE_NAME);
    let store = EmbeddedMetaStore::open(&path).await.unwrap();
    store.put("/k/a", b"a".to_vec(), None).await.unwrap();
    let lease = store.grant_lease(Duration::from_secs(3600)).await.unwrap();
    store
        .put("/k/leased-1", b"l".to_vec(), Some(lease.id))
        .await
        .unwrap();
    store
        .put("/k/leased-2", b"l".to_vec(), Some(lease.id))
        .await
        .unwrap();
    let last = store.put("/k/b", b"b".to_vec(), None).await.unwrap();
    let b = store.get("/k/b").await.unwrap().unwrap();
    drop(store);

    let store = EmbeddedMetaStore::open(&path).await.unwrap();
    assert_eq!(
        store.revision().await.unwrap(),
        last.next(),
        "deleting the leased keys on open is one write"
    );
    let keys: Vec<_> = store
        .list("/k/")
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(keys, ["/k/a", "/k/b"]);
    assert_eq!(store.get("/k/b").await.unwrap().unwrap(), b);
    assert!(matches!(
        store.keep_alive(lease.id).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
    let next = store.grant_lease(Duration::from_secs(60)).await.unwrap();
    assert!(
        next.id > lease.id,
        "lease ids are not reused across restarts"
    );
    drop(store);

    // Nothing leased any more: reopening writes nothing.
    let store = EmbeddedMetaStore::open(&path).await.unwrap();
    assert_eq!(store.revision().await.unwrap(), last.next());
}

/// Environment variable that turns `crash_child` into the writer that
/// `acknowledged_writes_survive_a_kill` kills.
const CRASH_CHILD: &str = "SLUICE_META_CRASH_CHILD";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of acknowledged_writes_survive_a_kill"]
async fn crash_child() {
    let Ok(path) = std::env::var(CRASH_CHILD) else {
        return;
    };
    let store = EmbeddedMetaStore::open(&path).await.unwrap();
    let lease = store.grant_lease(Duration::from_secs(3600)).await.unwrap();
    store
        .put("/crash/leased", b"l".to_vec(), Some(lease.id))
        .await
        .unwrap();
    for i in 0u32.. {
        let rev = store
            .put(&format!("/crash/{i:08}"), i.to_le_bytes().to_vec(), None)
            .await
            .unwrap();
        // Printed only once the write is acknowledged (durable).
        println!("ack {i} {}", rev.get());
    }
}

#[test]
fn acknowledged_writes_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(EmbeddedMetaStore::FILE_NAME);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--ignored", "--nocapture"])
        .env(CRASH_CHILD, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while acked.len() < 40 {
        let line = lines
            .next()
            .expect("the child stopped before 40 writes")
            .unwrap();
        if let Some(ack) = line.strip_prefix("ack ") {
            let (i, rev) = ack.split_once(' ').unwrap();
            acked.push((i.parse::<u32>().unwrap(), Revision(rev.parse().unwrap())));
        }
    }
    // SIGKILL, most likely in the middle of the next write.
    child.kill().unwrap();
    child.wait().unwrap();
    // The child went on writing while the lines above were read: what it
    // acknowledged before the kill is still in the pipe.
    for line in lines {
        let Ok(line) = line else { break };
        if let Some(ack) = line.strip_prefix("ack ") {
            let Some((i, rev)) = ack.split_once(' ') else {
                break;
            };
            let (Ok(i), Ok(rev)) = (i.parse::<u32>(), rev.parse()) else {
                break;
            };
            acked.push((i, Revision(rev)));
        }
    }

    runtime().block_on(async {
        let store = EmbeddedMetaStore::open(&path).await.unwrap();
        for (i, rev) in &acked {
            let kv = store
                .get(&format!("/crash/{i:08}"))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("acknowledged write {i} is lost"));
            assert_eq!(kv.value, i.to_le_bytes());
            assert_eq!(kv.mod_revision, *rev);
        }
        let listing = store.list("/crash/").await.unwrap();
        let keys: Vec<_> = listing.kvs.iter().map(|kv| kv.key.clone()).collect();
        let written = keys.len();
        assert!(
            written == acked.len() || written == acked.len() + 1,
            "{} acknowledged, {written} found: only the write in flight may be extra",
            acked.len()
        );
        let expected: Vec<_> = (0..written).map(|i| format!("/crash/{i:08}")).collect();
        assert_eq!(keys, expected, "the leased key is gone, no write is torn");
        let newest = listing.kvs.last().unwrap().mod_revision;
        assert_eq!(
            listing.revision,
            newest.next(),
            "the revision survived, plus the write deleting the leased key"
        );
    });
}

#[tokio::test]
async fn files_that_are_not_meta_stores_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();

    let text = dir.path().join("text");
    std::fs::write(&text, "this is not a database\n".repeat(100)).unwrap();
    assert_corrupt(EmbeddedMetaStore::open(&text).await, &text);

    let noise = dir.path().join("noise");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let bytes: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&noise, bytes).unwrap();
    assert_corrupt(EmbeddedMetaStore::open(&noise).await, &noise);

    // A redb database of someone else.
    let foreign = dir.path().join("foreign.redb");
    {
        let db = redb::Database::create(&foreign).unwrap();
        let wtx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("other");
            let mut table = wtx.open_table(def).unwrap();
            table.insert(1, 2).unwrap();
        }
        wtx.commit().unwrap();
    }
    let message = assert_corrupt(EmbeddedMetaStore::open(&foreign).await, &foreign);
    assert!(message.contains("no format version"), "{message}");
}

/// Write a store with some keys and close it; returns its path.
async fn written_store(dir: &Path) -> std::path::PathBuf {
    let path = dir.join(EmbeddedMetaStore::FILE_NAME);
    let store = EmbeddedMetaStore::open(&path).await.unwrap();
    for i in 0..200 {
        store
            .put(&format!("/k/{i:04}"), vec![i as u8; 500], None)
            .await
            .unwrap();
    }
    path
}

#[tokio::test]
async fn a_truncated_file_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = written_store(dir.path()).await;
    let len = std::fs::metadata(&path).unwrap().len();
    for keep in [len / 2, 100] {
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(keep).unwrap();
        drop(file);
        assert_corrupt(EmbeddedMetaStore::open(&path).await, &path);
    }
}

#[tokio::test]
async fn damaged_pages_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = written_store(dir.path()).await;
    let mut bytes = std::fs::read(&path).unwrap();
    // Past the header, over the data pages.
    let len = bytes.len();
    for b in &mut bytes[len / 4..len / 4 + 4096 * 4] {
        *b ^= 0x5a;
    }
    std::fs::write(&path, bytes).unwrap();
    assert_corrupt(EmbeddedMetaStore::open(&path).await, &path);
}

#[tokio::test]
async fn a_file_from_a_newer_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(EmbeddedMetaStore::FILE_NAME);
    drop(EmbeddedMetaStore::open(&path).await.unwrap());
    {
        let db = redb::Database::open(&path).unwrap();
        let wtx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
            let mut table = wtx.open_table(def).unwrap();
            table.insert("format-version", FORMAT_VERSION + 1).unwrap();
        }
        wtx.commit().unwrap();
    }
    match EmbeddedMetaStore::open(&path).await {
        Err(err @ MetaError::NewerLayout { .. }) => {
            let message = err.to_string();
            assert!(message.contains("upgrade sluice"), "{message}");
            assert!(message.contains(&format!("layout version {}", FORMAT_VERSION + 1)));
        }
        other => panic!("expected NewerLayout, got {other:?}"),
    }
}

#[tokio::test]
async fn a_file_open_elsewhere_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(EmbeddedMetaStore::FILE_NAME);
    let _first = EmbeddedMetaStore::open(&path).await.unwrap();
    match EmbeddedMetaStore::open(&path).await {
        Err(err @ MetaError::InUse { .. }) => {
            assert!(err.to_string().contains("give this one its own data dir"));
        }
        other => panic!("expected InUse, got {other:?}"),
    }
}

#[tokio::test]
async fn an_empty_or_short_file_is_refused_and_a_missing_dir_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty");
    std::fs::write(&path, b"").unwrap();
    let message = assert_corrupt(EmbeddedMetaStore::open(&path).await, &path);
    assert!(message.contains("the file is empty (0 bytes)"), "{message}");
    // Refused, not replaced: the file is still there, still empty.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    for short in [&b"\0"[..], b"redb", &[0u8; 511]] {
        std::fs::write(&path, short).unwrap();
        assert_corrupt(EmbeddedMetaStore::open(&path).await, &path);
        assert_eq!(std::fs::read(&path).unwrap(), short);
    }
    // Where no file exists, a new store is created.
    let fresh = dir.path().join("fresh");
    let store = EmbeddedMetaStore::open(&fresh).await.unwrap();
    assert_eq!(store.revision().await.unwrap(), Revision::ZERO);
    drop(store);

    let missing = dir.path().join("no-such-dir").join("meta.redb");
    match EmbeddedMetaStore::open(&missing).await {
        Err(err @ MetaError::Unavailable { .. }) => {
            assert!(err.to_string().contains("check that its directory exists"));
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn the_history_bound_compacts_old_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedOptions {
        history_capacity: 3,
    };
    let store = EmbeddedMetaStore::open_with(dir.path().join("m"), options)
        .await
        .unwrap();
    let mut revs = Vec::new();
    for i in 0..5 {
        revs.push(store.put(&format!("/k/{i}"), vec![], None).await.unwrap());
    }
    // Kept: the changes of revs[2..].
    assert!(matches!(
        store.watch("/k/", Some(revs[0])).await,
        Err(MetaError::Compacted { requested, compacted }) if requested == revs[0] && compacted == revs[1]
    ));
    let mut watch = store.watch("/k/", Some(revs[1])).await.unwrap();
    for rev in &revs[2..] {
        assert_eq!(watch.next().await.unwrap().unwrap().revision, *rev);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_behind_the_history_gets_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedOptions {
        history_capacity: 150,
    };
    let store = EmbeddedMetaStore::open_with(dir.path().join("m"), options)
        .await
        .unwrap();
    let start = store.revision().await.unwrap();
    let mut watch = store.watch("/k/", None).await.unwrap();
    // Writes of 100 changes each, far more than the stream buffers plus the
    // history keeps, while nobody reads the stream.
    let writes = (WATCH_BUFFER + 150) / 100 + 3;
    for w in 0..writes {
        let txn = Txn::new().and_then((0..100).map(|i| Op::put(format!("/k/{w}/{i:03}"), "")));
        store.txn(txn).await.unwrap();
    }
    let mut delivered = 0;
    let mut last = start;
    loop {
        match watch.next().await {
            Some(Ok(event)) => {
                assert_eq!(event.kind, WatchEventKind::Put);
                assert!(event.revision >= last, "in order");
                assert_eq!(
                    event.kv.key,
                    format!(
                        "/k/{}/{:03}",
                        event.revision.get() - start.get() - 1,
                        delivered % 100
                    ),
                    "no event skipped before the error"
                );
                last = event.revision;
                delivered += 1;
            }
            Some(Err(MetaError::Compacted { requested, .. })) => {
                assert_eq!(requested, last);
                break;
            }
            other => panic!("expected events, then Compacted; got {other:?}"),
        }
    }
    assert!(delivered < writes * 100);
    assert!(
        watch.next().await.is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test]
async fn a_watch_ends_after_its_events_when_the_store_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedMetaStore::open(dir.path().join("m")).await.unwrap();
    let mut watch = store.watch("/k/", None).await.unwrap();
    let rev = store.put("/k/a", b"a".to_vec(), None).await.unwrap();
    drop(store);
    assert_eq!(watch.next().await.unwrap().unwrap().revision, rev);
    assert!(watch.next().await.is_none());
}

#[tokio::test]
async fn the_store_works_as_a_trait_object() {
    let dir = tempfile::tempdir().unwrap();
    let store: std::sync::Arc<dyn MetaStore> =
        std::sync::Arc::new(EmbeddedMetaStore::open(dir.path().join("m")).await.unwrap());
    let rev = store.put("/k", b"v".to_vec(), None).await.unwrap();
    assert_eq!(store.get("/k").await.unwrap().unwrap().mod_revision, rev);
}
