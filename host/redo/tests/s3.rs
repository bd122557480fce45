//! The redo log in S3, against a real S3-compatible server the test starts
//! (`s3s-fs`, which keeps its objects in a directory, so that it can be
//! restarted with what it had): files large enough to go up in parts, the
//! secret never shown, and a server that goes away in the middle of a flush
//! and comes back.
//!
//! `s3s-fs` comes from `cargo install s3s-fs@0.14.1 --features binary`
//! (`cargo xtask test` installs it); see `sluice_tests::s3`.

use std::sync::Arc;

use sluice_core::{Column, ColumnType, CommitTs, DdlEvent, Op, TableSchema, Transaction, Value};
use sluice_redo::{LogWriter, Replay, ReplayEvent, Storage, StorageUri};
use sluice_tests::s3::{S3Server, SECRET_KEY};

fn schema() -> Arc<TableSchema> {
    let column = |name: &str, ty: ColumnType, key: bool| Column {
        name: name.into(),
        ty,
        sql_type: format!("{ty:?}"),
        nullable: !key,
        key,
    };
    Arc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "shop".into(),
        table_name: "t1".into(),
        columns: vec![
            column("id", ColumnType::Int, true),
            column("blob", ColumnType::Blob, false),
        ],
    })
}

/// A transaction at `ts` of `rows` inserts with `blob`-byte values.
fn txn(ts: u64, rows: usize, blob: usize) -> Transaction {
    let schema = schema();
    let mut t = Transaction::new(CommitTs::new(ts));
    for i in 0..rows {
        let id = (ts * 1_000 + i as u64) as i64;
        let bytes: Vec<u8> = (0..blob).map(|j| (id as usize + j) as u8).collect();
        t.table(&schema).push_values(
            Op::Insert,
            None,
            Some(&[Value::Int(id), Value::Bytes(bytes)]),
        );
    }
    t
}

/// What a replay from the start gives: (commit ts, rows) runs, the DDLs' ts
/// and the resolved ts.
async fn replayed(storage: Storage) -> (Vec<(u64, usize)>, Vec<u64>, u64) {
    let mut replay = Replay::open(storage, true).await.unwrap();
    let resolved = replay.meta().resolved_ts;
    let (mut rows, mut ddls) = (Vec::new(), Vec::new());
    while let Some(event) = replay.next().await.unwrap() {
        match event {
            ReplayEvent::Rows { batch, .. } => {
                for t in &batch.tables {
                    for ts in &t.commit_ts {
                        match rows.last_mut() {
                            Some((last, n)) if *last == *ts => *n += 1,
                            _ => rows.push((*ts, 1)),
                        }
                    }
                }
            }
            ReplayEvent::Ddl(d) => ddls.push(d.commit_ts.get()),
        }
    }
    (rows, ddls, resolved)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_log_in_s3_reads_back_as_written_large_files_in_parts_and_the_secret_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(dir.path(), "redo");
    let uri = StorageUri::parse(&server.uri("redo", "dc1/feeds")).unwrap();
    for shown in [uri.to_string(), format!("{uri:?}")] {
        assert!(!shown.contains(SECRET_KEY), "{shown}");
    }
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        assert!(!format!("{storage:?}").contains(SECRET_KEY));
        assert_eq!(
            storage.location(),
            format!("s3://redo/dc1/feeds/cf at http://127.0.0.1:{}", server.port)
        );
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        // One small file, then one of ~12 MiB (above the part size).
        w.append_transaction(&txn(10, 3, 100)).unwrap();
        w.append_ddl(&DdlEvent::of_table(
            CommitTs::new(15),
            "shop",
            "t1",
            "ALTER TABLE t1 ADD COLUMN x INT",
        ))
        .unwrap();
        w.flush(0).await.unwrap();
        for ts in [20, 30, 40] {
            w.append_transaction(&txn(ts, 1_000, 4_096)).unwrap();
        }
        assert!(w.pending_bytes() > sluice_redo::storage::MULTIPART_BYTES);
        w.flush(10).await.unwrap();
        assert_eq!(w.meta().resolved_ts, 40);
        assert_eq!(w.meta().checkpoint_ts, 10);

        // What the server holds, as its own files.
        let on_disk = dir.path().join("redo/dc1/feeds/cf");
        let mut sizes: Vec<(String, u64)> = std::fs::read_dir(&on_disk)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_file())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        sizes.sort();
        let listed: Vec<(String, u64)> = storage
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.size))
            .collect();
        assert_eq!(
            listed,
            sizes
                .iter()
                .filter(|(n, _)| !n.starts_with('.'))
                .cloned()
                .collect::<Vec<_>>()
        );
        assert_eq!(listed.len(), 4, "{listed:?}"); // rows, ddl, rows, meta
        assert!(
            listed
                .iter()
                .any(|(_, size)| *size > sluice_redo::storage::MULTIPART_BYTES as u64)
        );

        let (rows, ddls, resolved) = replayed(storage.clone()).await;
        assert_eq!(rows, vec![(10, 3), (20, 1_000), (30, 1_000), (40, 1_000)]);
        assert_eq!(ddls, vec![15]);
        assert_eq!(resolved, 40);
        // The values too, for the large file: every byte as written.
        let mut replay = Replay::open(storage.clone(), true).await.unwrap();
        let mut blobs = 0usize;
        while let Some(event) = replay.next().await.unwrap() {
            if let ReplayEvent::Rows { batch, .. } = event {
                for t in &batch.tables {
                    for row in t.rows() {
                        let after = row.after().expect("an insert has an after image");
                        let Value::Int(id) = after[0] else {
                            panic!("id {:?}", after[0])
                        };
                        let Value::Bytes(b) = &after[1] else {
                            panic!("blob {:?}", after[1])
                        };
                        assert!(
                            b.iter()
                                .enumerate()
                                .all(|(j, &x)| x == (id as usize + j) as u8)
                        );
                        blobs += b.len();
                    }
                }
            }
        }
        assert_eq!(blobs, 3 * 100 + 3_000 * 4_096);

        // Removing the log leaves nothing under its prefix; a writer opened
        // on a log whose removal was cut short starts it anew.
        assert_eq!(sluice_redo::remove_log(&storage).await.unwrap(), 4);
        assert!(storage.list().await.unwrap().is_empty());
        w.append_transaction(&txn(50, 1, 1)).unwrap();
        w.flush(0).await.unwrap();
        storage
            .put(sluice_redo::REMOVED_MARKER, Arc::new(Vec::new()))
            .await
            .unwrap();
        let w = LogWriter::open(storage.clone()).await.unwrap();
        assert_eq!(w.meta(), sluice_redo::Meta::default());
        assert!(storage.list().await.unwrap().is_empty());
    });
}

#[test]
fn a_flush_cut_by_an_s3_server_restart_is_written_again_under_its_name_and_nothing_is_doubled() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = S3Server::start(dir.path(), "redo");
    let uri = StorageUri::parse(&server.uri("redo", "")).unwrap();
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.append_transaction(&txn(10, 10, 64)).unwrap();
        w.flush(0).await.unwrap();

        // The server goes away with a large file pending: the flush fails
        // and keeps what it had.
        w.append_transaction(&txn(20, 2_500, 4_096)).unwrap();
        server.kill();
        let before = w.pending_bytes();
        let err = w.flush(0).await.expect_err("no server, no flush");
        let message = err.to_string();
        assert!(message.contains("s3://redo/cf"), "{message}");
        assert!(!message.contains(SECRET_KEY), "{message}");
        assert_eq!(
            w.meta().resolved_ts,
            10,
            "the meta does not move on a failed flush"
        );
        // More comes in while it is down.
        w.append_transaction(&txn(30, 5, 64)).unwrap();
        assert!(w.pending_bytes() > before);
        assert!(w.flush(0).await.is_err());

        // Back, with what it had: the next flush writes both.
        server.spawn();
        w.flush(0).await.unwrap();
        assert_eq!(w.meta().resolved_ts, 30);
        assert_eq!(w.pending_bytes(), 0);
        let (rows, _, resolved) = replayed(storage.clone()).await;
        assert_eq!(rows, vec![(10, 10), (20, 2_500), (30, 5)], "every row once");
        assert_eq!(resolved, 30);

        // A writer opened again (a restarted changefeed) goes on after it.
        drop(w);
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        for t in [txn(20, 2_500, 4_096), txn(30, 5, 64), txn(40, 1, 8)] {
            w.append_transaction(&t).unwrap();
        }
        w.flush(30).await.unwrap();
        let (rows, _, resolved) = replayed(storage.clone()).await;
        assert_eq!(rows, vec![(10, 10), (20, 2_500), (30, 5), (40, 1)]);
        assert_eq!(resolved, 40);
    });
}

#[test]
fn bad_s3_uris_are_refused_with_what_is_wrong_and_never_the_secret() {
    for (uri, says) in [
        ("s3:///prefix", "names a bucket"),
        ("s3://b/p?endpoint=ftp://x", "http:// or https://"),
        ("s3://b/p?colour=blue", "no key \"colour\""),
        ("s3://b/../p", "`..`"),
        ("s3://user:pw@b/p", "no user, password or port"),
        (
            "s3://b/p?force-path-style=maybe&secret-access-key=TOPSECRET",
            "true or false",
        ),
        ("gs://b/p", "file:// URI"),
    ] {
        let err = StorageUri::parse(uri).expect_err(uri);
        assert!(err.contains(says), "{uri}: {err}");
        assert!(!err.contains("TOPSECRET"), "{uri}: {err}");
    }
    let ok =
        StorageUri::parse("s3://b/a/b/cf?region=eu-west-1&secret-access-key=TOPSECRET").unwrap();
    assert!(!format!("{ok} {ok:?}").contains("TOPSECRET"));
    let (parent, name) = ok.split_last().unwrap();
    assert_eq!(
        (parent.to_string(), name.as_str()),
        ("s3://b/a/b".to_string(), "cf")
    );
    assert_eq!(parent.child("cf"), ok);
}
