//! The record format and the log against random transactions: round trips,
//! truncation at every byte, bit flips anywhere.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{
    Column, ColumnType, CommitTs, DdlEvent, Op, TableBatch, TableSchema, Transaction,
    TransactionRun, Value,
};

use crate::format::{Damage, LogKind, Record, Records};
use crate::log::{FileName, LogReader, LogWriter, Schemas};
use crate::meta::Meta;
use crate::replay::table_batch;
use crate::storage::{Storage, StorageUri};

fn schema(table_id: u32, version: u32) -> Arc<TableSchema> {
    let column = |name: &str, ty: ColumnType, key: bool| Column {
        name: name.into(),
        ty,
        sql_type: format!("{ty:?}"),
        nullable: !key,
        key,
    };
    Arc::new(TableSchema {
        table_id,
        version,
        schema_name: "shop".into(),
        table_name: format!("t{table_id}"),
        columns: vec![
            column("id", ColumnType::Int, true),
            column("name", ColumnType::Text, false),
            column("price", ColumnType::Float, false),
            column("blob", ColumnType::Blob, false),
            column("n", ColumnType::Uint, false),
        ],
    })
}

/// One row's values for `schema` (NULLs included).
fn values() -> impl Strategy<Value = Vec<Value>> {
    (
        any::<i64>(),
        proptest::option::of("[a-zé€😀 ]{0,12}"),
        proptest::option::of(any::<f64>().prop_filter("not NaN", |f| !f.is_nan())),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(id, name, price, blob, n)| {
            vec![
                Value::Int(id),
                name.map_or(Value::Null, |n| Value::Bytes(n.into_bytes())),
                price.map_or(Value::Null, Value::Float),
                blob.map_or(Value::Null, Value::Bytes),
                n.map_or(Value::Null, Value::UInt),
            ]
        })
}

/// A transaction of up to three tables and a few rows each.
fn transaction(ts: u64) -> impl Strategy<Value = Transaction> {
    proptest::collection::vec((1u32..4, 0u8..3, values(), values()), 1..8).prop_map(move |rows| {
        let mut txn = Transaction::new(CommitTs::new(ts));
        txn.id = ts * 7;
        for (table, op, before, after) in rows {
            let s = schema(table, 1);
            let op = match op {
                0 => Op::Insert,
                1 => Op::Update,
                _ => Op::Delete,
            };
            let (b, a) = match op {
                Op::Insert => (None, Some(&after[..])),
                Op::Update => (Some(&before[..]), Some(&after[..])),
                Op::Delete => (Some(&before[..]), None),
            };
            txn.table(&s).push_values(op, b, a);
        }
        txn
    })
}

fn transactions() -> impl Strategy<Value = Vec<Transaction>> {
    proptest::collection::vec(transaction(0), 1..12).prop_map(|mut txns| {
        for (i, t) in txns.iter_mut().enumerate() {
            t.commit_ts = CommitTs::new(100 + i as u64 * 10);
            t.id = i as u64;
        }
        txns
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A transaction at `ts` of one insert into `table` (id `ts`, the rest NULL).
fn insert_at(ts: u64, table: u32) -> Transaction {
    insert_into(ts, &schema(table, 1))
}

/// A transaction at `ts` of one insert into `schema`'s table (id `ts`, the
/// rest NULL).
fn insert_into(ts: u64, schema: &Arc<TableSchema>) -> Transaction {
    let mut t = Transaction::new(CommitTs::new(ts));
    t.table(schema).push_values(
        Op::Insert,
        None,
        Some(&[
            Value::Int(ts as i64),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
        ]),
    );
    t
}

/// A DDL at `ts`.
fn ddl(ts: u64) -> DdlEvent {
    DdlEvent {
        commit_ts: CommitTs::new(ts),
        query: format!("ALTER TABLE t1 COMMENT '{ts}'"),
        ..DdlEvent::default()
    }
}

/// `txns` as the batches a sink would get, one per table per transaction.
fn expected(txns: &[Transaction]) -> Vec<TableBatch> {
    txns.iter()
        .flat_map(|t| {
            t.tables
                .iter()
                .map(|c| TableBatch::from_changes(c.clone(), t.commit_ts, t.id, 0))
        })
        .collect()
}

/// Every rows record of `records` as batches (schemas resolved in order).
fn batches(records: Vec<Record>) -> Result<Vec<TableBatch>, String> {
    let mut schemas = Schemas::default();
    let mut out = Vec::new();
    for r in records {
        match r {
            Record::Schema(s) => schemas.add(s),
            Record::Rows { txns, tables } => {
                for t in tables {
                    out.push(table_batch(t, &txns, &schemas)?.1);
                }
            }
            Record::Ddl(_) | Record::Resumed { .. } => {}
        }
    }
    Ok(out)
}

/// Writes `txns` in one flush (and a DDL after the first) and returns the
/// directory, the rows file's name and its bytes.
fn write_log(txns: &[Transaction]) -> (tempfile::TempDir, FileName, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        for (i, t) in txns.iter().enumerate() {
            w.append_transaction(t).unwrap();
            if i == 0 {
                w.append_ddl(&DdlEvent::of_table(
                    CommitTs::new(t.commit_ts.get() + 1),
                    "shop",
                    "t1",
                    "ALTER TABLE t1 ADD COLUMN x INT",
                ))
                .unwrap();
            }
        }
        w.flush(0).await.unwrap();
        let reader = LogReader::open(storage.clone()).await.unwrap();
        let file = reader.listing().files[0].0;
        let bytes = storage.get(&file.name()).await.unwrap();
        (dir, file, bytes)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn transactions_come_back_as_written(txns in transactions()) {
        let (dir, file, _) = write_log(&txns);
        let uri = StorageUri::Local(dir.path().to_path_buf());
        let (rows, ddls, meta) = runtime().block_on(async {
            let storage = Storage::open(&uri, "cf").await.unwrap();
            let reader = LogReader::open(storage).await.unwrap();
            let meta = reader.listing().meta.unwrap();
            let rows = reader.read(file, meta.resolved_ts).await.unwrap();
            let ddl = reader.files_for(crate::LogKind::Ddl, meta);
            let ddls = reader.read(ddl[0], meta.resolved_ts).await.unwrap();
            (rows, ddls, meta)
        });
        prop_assert_eq!(meta.resolved_ts, txns.last().unwrap().commit_ts.get() + u64::from(txns.len() == 1));
        prop_assert!(rows.skipped.is_none());
        prop_assert_eq!(batches(rows.records).unwrap(), expected(&txns));
        prop_assert_eq!(ddls.records.len(), 1);
    }

    #[test]
    fn a_file_cut_at_any_byte_gives_a_prefix_of_its_records_and_says_where(txns in transactions()) {
        let (_dir, _, bytes) = write_log(&txns);
        let (_, all) = Records::new(&bytes).unwrap();
        let all: Vec<(u64, Record)> = all.map(Result::unwrap).collect();
        for cut in 0..bytes.len() {
            let Ok((_, records)) = Records::new(&bytes[..cut]) else {
                prop_assert!(cut < crate::format::HEADER_LEN);
                continue;
            };
            let mut good = Vec::new();
            let mut damage = None;
            for r in records {
                match r {
                    Ok(r) => good.push(r),
                    Err(d) => damage = Some(d),
                }
            }
            prop_assert_eq!(&good[..], &all[..good.len()]);
            let at_boundary = cut == crate::format::HEADER_LEN
                || all.iter().any(|(offset, _)| *offset as usize == cut);
            if at_boundary {
                prop_assert!(damage.is_none());
            } else {
                let damage = damage.expect("a cut inside a record is found");
                prop_assert!(damage.is_torn(), "{damage}");
                prop_assert_eq!(damage.offset(), all[good.len()].0);
            }
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_file_is_caught(txns in transactions(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (_dir, _, mut bytes) = write_log(&txns);
        let at = at.index(bytes.len());
        bytes[at] ^= 1 << bit;
        let caught = match Records::new(&bytes) {
            Err(Damage::Header(_)) => true,
            Err(other) => panic!("unexpected {other}"),
            Ok((_, records)) => records.into_iter().any(|r| r.is_err()),
        };
        prop_assert!(caught, "a flip at byte {at} bit {bit} went unseen");
    }

    #[test]
    fn a_flipped_bit_anywhere_in_the_meta_is_caught(checkpoint in 0u64..1 << 40, ahead in 0u64..1 << 20, at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let meta = Meta { checkpoint_ts: checkpoint, resolved_ts: checkpoint + ahead };
        let mut bytes = meta.encode();
        prop_assert_eq!(Meta::decode(&bytes), Ok(meta));
        let at = at.index(bytes.len());
        bytes[at] ^= 1 << bit;
        prop_assert!(Meta::decode(&bytes).is_err());
    }
}

/// A record far larger than a step of its CRC (which is summed as it is
/// appended), with one value larger than a step: it reads back whole, and a
/// flipped bit in any step of it is caught.
#[test]
fn a_record_larger_than_its_crc_steps_reads_back_and_a_flip_in_any_step_is_caught() {
    let mut t = Transaction::new(CommitTs::new(1_000));
    for i in 0..300u64 {
        let long = vec![b'a' + (i % 26) as u8; if i == 7 { 200 << 10 } else { 1_500 }];
        t.table(&schema(1, 1)).push_values(
            Op::Insert,
            None,
            Some(&[
                Value::Int(i as i64),
                Value::Bytes(long),
                Value::Float(i as f64),
                Value::Null,
                Value::UInt(i),
            ]),
        );
    }
    let txns = vec![t];
    let (_dir, _, bytes) = write_log(&txns);
    assert!(bytes.len() > 600 << 10, "{} bytes", bytes.len());
    let (_, records) = Records::new(&bytes).unwrap();
    let records: Vec<Record> = records.into_iter().map(|r| r.unwrap().1).collect();
    assert_eq!(batches(records).unwrap(), expected(&txns));
    for at in (64..bytes.len()).step_by(40_000) {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x10;
        let caught = match Records::new(&flipped) {
            Err(_) => true,
            Ok((_, records)) => records.into_iter().any(|r| r.is_err()),
        };
        assert!(caught, "a flip at byte {at} went unseen");
    }
}

#[test]
fn damage_in_a_file_past_the_resolved_ts_is_skipped_and_said_and_elsewhere_stops_the_read() {
    let txns: Vec<Transaction> = (0..20u64)
        .map(|i| {
            let mut t = Transaction::new(CommitTs::new(1000 + i));
            t.table(&schema(1, 1)).push_values(
                Op::Insert,
                None,
                Some(&[
                    Value::Int(i as i64),
                    Value::Bytes(b"x".to_vec()),
                    Value::Null,
                    Value::Null,
                    Value::UInt(i),
                ]),
            );
            t
        })
        .collect();
    let (dir, file, bytes) = write_log(&txns);
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        // Torn in the middle.
        storage
            .put(&file.name(), Arc::new(bytes[..bytes.len() / 2].to_vec()))
            .await
            .unwrap();
        let reader = LogReader::open(storage.clone()).await.unwrap();
        let meta = reader.listing().meta.unwrap();
        assert_eq!(meta.resolved_ts, file.cut);
        // The replay needs it: the read stops, naming the file and offset.
        let err = reader.read(file, meta.resolved_ts).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&file.name()) && text.contains("torn record at offset"),
            "{text}"
        );
        // Had the meta not reached its cut, it would hold only later events.
        let read = reader.read(file, file.cut - 1).await.unwrap();
        assert!(read.skipped.as_ref().is_some_and(Damage::is_torn));
        let prefix = batches(read.records).unwrap();
        assert!(!prefix.is_empty() && prefix.len() < txns.len());
        assert_eq!(prefix[..], expected(&txns)[..prefix.len()]);
    });
}

#[test]
fn a_flipped_bit_in_every_header_byte_is_caught() {
    let (_dir, _, bytes) = write_log(&[{
        let mut t = Transaction::new(CommitTs::new(5));
        t.table(&schema(1, 1)).push_values(
            Op::Insert,
            None,
            Some(&[
                Value::Int(1),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
            ]),
        );
        t
    }]);
    for at in 0..crate::format::HEADER_LEN {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[at] ^= 1 << bit;
            // A flip of the kind byte to the other kind is a valid header:
            // the reader refuses it because the file's name says otherwise.
            let caught = match Records::new(&b) {
                Err(Damage::Header(_)) => true,
                Err(_) => false,
                Ok((kind, _)) => kind != crate::LogKind::Rows,
            };
            assert!(caught, "a flip at header byte {at} bit {bit} went unseen");
        }
    }
}

#[test]
fn file_names_round_trip_and_other_names_are_not_log_files() {
    let f = FileName {
        kind: crate::LogKind::Rows,
        run: 3,
        seq: 42,
        cut: 7,
        max: 9,
    };
    assert_eq!(FileName::parse(&f.name()), Some(f));
    // A name of four numbers (before runs were named) is of run 0.
    assert_eq!(
        FileName::parse("ddl-0000000042-00000000000000000007-00000000000000000009.log"),
        Some(FileName {
            kind: crate::LogKind::Ddl,
            run: 0,
            ..f
        })
    );
    for other in [
        "meta",
        "rows-1-2.log",
        "rows-a-2-3.log",
        "x-1-2-3.log",
        "rows-1-2-3-4-5.log",
        "rows-1-2-3-.log",
    ] {
        assert_eq!(FileName::parse(other), None, "{other}");
    }
}

#[test]
fn the_writer_goes_on_after_the_files_there_and_gc_removes_what_the_checkpoint_passed() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let one = |ts: u64| {
            let mut t = Transaction::new(CommitTs::new(ts));
            t.table(&schema(1, 1)).push_values(
                Op::Delete,
                Some(&[
                    Value::Int(1),
                    Value::Null,
                    Value::Float(1.5),
                    Value::Null,
                    Value::Null,
                ]),
                None,
            );
            t
        };
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.append_transaction(&one(10)).unwrap();
        w.flush(0).await.unwrap();
        w.append_transaction(&one(20)).unwrap();
        w.flush(10).await.unwrap();
        drop(w);
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        assert_eq!(
            w.meta(),
            Meta {
                checkpoint_ts: 10,
                resolved_ts: 20
            }
        );
        w.append_transaction(&one(30)).unwrap();
        w.resolved(35);
        w.flush(20).await.unwrap();
        assert_eq!(
            w.meta(),
            Meta {
                checkpoint_ts: 20,
                resolved_ts: 35
            }
        );
        let names: Vec<(u64, u64)> = crate::Listing::read(&storage)
            .await
            .unwrap()
            .files
            .iter()
            .map(|(f, _)| (f.seq, f.cut))
            .collect();
        assert_eq!(names, [(0, 10), (1, 20), (2, 35)]);
        assert_eq!(w.collect_garbage().await.unwrap(), 2);
        let left = crate::Listing::read(&storage).await.unwrap();
        assert_eq!(left.files.len(), 1);
        assert_eq!(left.files[0].0.max, 35);
    });
}

/// Per table: (commit ts, transaction id, op, before, after) of every row, in
/// order.
type TableRowsSeen =
    std::collections::BTreeMap<u32, Vec<(u64, u64, u8, Option<Vec<Value>>, Option<Vec<Value>>)>>;

fn rows_per_table(batches: &[TableBatch]) -> TableRowsSeen {
    let mut out = TableRowsSeen::new();
    for b in batches {
        for (i, r) in b.rows().enumerate() {
            out.entry(b.table_id).or_default().push((
                b.commit_ts[i],
                b.txn[i],
                b.ops[i],
                r.before(),
                r.after(),
            ));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn a_run_comes_back_as_its_transactions(txns in transactions()) {
        let mut run = sluice_core::TransactionRun::new();
        for t in txns.clone() {
            prop_assert!(run.push(t).is_ok());
        }
        let dir = tempfile::tempdir().unwrap();
        let uri = StorageUri::Local(dir.path().to_path_buf());
        let records = runtime().block_on(async {
            let storage = Storage::open(&uri, "cf").await.unwrap();
            let mut w = LogWriter::open(storage.clone()).await.unwrap();
            w.append_run(&run).unwrap();
            w.flush(0).await.unwrap();
            let reader = LogReader::open(storage).await.unwrap();
            let meta = reader.listing().meta.unwrap();
            prop_assert_eq!(meta.resolved_ts, txns.last().unwrap().commit_ts.get());
            let file = reader.listing().files[0].0;
            Ok(reader.read(file, meta.resolved_ts).await.unwrap().records)
        })?;
        let got = batches(records).unwrap();
        prop_assert_eq!(rows_per_table(&got), rows_per_table(&expected(&txns)));
    }
}

#[test]
fn a_writer_opened_again_skips_what_is_durable_and_marks_where_it_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    let one = |ts: u64, more: bool| {
        let mut t = insert_at(ts, 1);
        t.more = more;
        t
    };
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        for ts in [10, 20] {
            w.append_transaction(&one(ts, false)).unwrap();
        }
        // The first part of a large transaction at 30: durable in a file, but
        // the resolved ts stays at 20 (its last part is not in).
        w.append_transaction(&one(30, true)).unwrap();
        w.flush(0).await.unwrap();
        assert_eq!(w.meta().resolved_ts, 20);
        drop(w); // a crash: the source reads again from the checkpoint (0)

        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        for (ts, more) in [(10, false), (20, false), (30, true), (30, false)] {
            w.append_transaction(&one(ts, more)).unwrap();
        }
        w.flush(0).await.unwrap();
        assert_eq!(w.meta().resolved_ts, 30);

        let reader = LogReader::open(storage.clone()).await.unwrap();
        let meta = w.meta();
        let mut seen = Vec::new();
        for file in reader.files_for(crate::LogKind::Rows, meta) {
            for record in reader.read(file, meta.resolved_ts).await.unwrap().records {
                match record {
                    Record::Rows { txns, .. } => seen.extend(
                        txns.iter()
                            .map(|t| format!("{}{}", t.commit_ts, if t.more { "+" } else { "" })),
                    ),
                    Record::Resumed { resolved_ts } => seen.push(format!("resumed@{resolved_ts}")),
                    _ => {}
                }
            }
        }
        // 10 and 20 once; the part of 30 before the restart is there, then
        // the marker that discards it, then 30 whole.
        assert_eq!(seen, ["10", "20", "30+", "resumed@20", "30+", "30"]);
    });
}

#[test]
fn a_replay_gives_checkpoint_to_resolved_in_order_with_ddls_in_place_and_nothing_stale() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    let one = |ts: u64, table: u32, more: bool| {
        let mut t = insert_at(ts, table);
        t.more = more;
        t
    };
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        // 10 is below the checkpoint (5 is flushed as the checkpoint later).
        let mut run = TransactionRun::new();
        for ts in [10, 20, 30] {
            run.push(one(ts, 1 + (ts as u32 / 10) % 2, false)).unwrap();
        }
        w.append_run(&run).unwrap();
        w.append_ddl(&ddl(35)).unwrap();
        w.append_transaction(&one(40, 1, false)).unwrap();
        // A part of 50, durable in a file but not resolved: stale after the
        // restart below.
        w.append_transaction(&one(50, 2, true)).unwrap();
        w.flush(10).await.unwrap();
        drop(w);
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        for t in [one(50, 2, true), one(50, 1, false), one(60, 2, false)] {
            w.append_transaction(&t).unwrap();
        }
        w.append_ddl(&ddl(65)).unwrap();
        // 70 is past the resolved ts.
        w.resolved(65);
        w.flush(10).await.unwrap();
        w.append_transaction(&one(70, 1, false)).unwrap();
        // Written without a meta (a crash before it): past the resolved ts.
        let mut files = w.storage().list().await.unwrap().len();
        w.flush(10).await.unwrap();
        files += 1;
        assert_eq!(w.storage().list().await.unwrap().len(), files);
        let bytes = Meta {
            checkpoint_ts: 10,
            resolved_ts: 65,
        }
        .encode();
        storage.put("meta", Arc::new(bytes)).await.unwrap();

        let mut replay = crate::Replay::open(storage.clone(), false).await.unwrap();
        assert_eq!(replay.meta().resolved_ts, 65);
        let mut seen = Vec::new();
        while let Some(event) = replay.next().await.unwrap() {
            match event {
                crate::ReplayEvent::Rows { batch, max_ts, .. } => {
                    let mut ts: Vec<String> = batch
                        .tables
                        .iter()
                        .flat_map(|t| {
                            t.commit_ts
                                .iter()
                                .map(move |ts| format!("{ts}@t{}", t.table_id))
                        })
                        .collect();
                    ts.sort();
                    assert!(
                        batch
                            .tables
                            .iter()
                            .all(|t| t.commit_ts.iter().all(|&c| c <= max_ts.get()))
                    );
                    seen.push(ts.join(" "));
                }
                crate::ReplayEvent::Ddl(d) => seen.push(format!("ddl {}", d.commit_ts)),
            }
        }
        assert_eq!(
            seen,
            [
                "20@t1 30@t2",
                "ddl 35",
                "40@t1",
                "50@t2",
                "50@t1",
                "60@t2",
                "ddl 65"
            ]
        );
        assert!(replay.skipped().is_empty());
    });
}

#[test]
fn compressed_files_read_back_as_written_and_a_flipped_bit_in_them_is_refused() {
    use sluice_config::RedoCompression;
    let txns: Vec<Transaction> = (0..50u64)
        .map(|i| {
            let mut t = Transaction::new(CommitTs::new(10 + i));
            for r in 0..20i64 {
                t.table(&schema(1, 1)).push_values(
                    Op::Insert,
                    None,
                    Some(&[
                        Value::Int(i as i64 * 100 + r),
                        Value::Bytes(format!("name {r} of a row that repeats itself").into_bytes()),
                        Value::Float(r as f64),
                        Value::Null,
                        Value::UInt(i),
                    ]),
                );
            }
            t
        })
        .collect();
    let mut sizes = Vec::new();
    for compression in [
        RedoCompression::None,
        RedoCompression::Lz4,
        RedoCompression::Zstd,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let uri = StorageUri::Local(dir.path().to_path_buf());
        runtime().block_on(async {
            let storage = Storage::open(&uri, "cf").await.unwrap();
            let mut w = LogWriter::open(storage.clone())
                .await
                .unwrap()
                .with_compression(compression);
            for t in &txns {
                w.append_transaction(t).unwrap();
            }
            w.flush(0).await.unwrap();
            let reader = LogReader::open(storage.clone()).await.unwrap();
            let meta = reader.listing().meta.unwrap();
            let file = reader.listing().files[0].0;
            let read = reader.read(file, meta.resolved_ts).await.unwrap();
            assert_eq!(
                batches(read.records).unwrap(),
                expected(&txns),
                "{compression:?}"
            );
            let mut bytes = storage.get(&file.name()).await.unwrap();
            sizes.push(bytes.len());
            // A bit flipped past the header: refused, never read as records.
            let at = crate::format::HEADER_LEN + (bytes.len() - crate::format::HEADER_LEN) / 2;
            bytes[at] ^= 0x10;
            storage.put(&file.name(), Arc::new(bytes)).await.unwrap();
            let err = reader
                .read(file, meta.resolved_ts)
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains(&file.name()), "{compression:?}: {err}");
        });
    }
    assert!(
        sizes[1] < sizes[0] / 2 && sizes[2] < sizes[0] / 2,
        "{sizes:?}"
    );
}

#[test]
fn a_sealed_flush_is_written_while_the_next_rows_are_appended_and_a_failed_write_lands_under_its_names()
 {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.append_transaction(&insert_at(10, 1)).unwrap();
        let mut first = w.seal(0);
        assert_eq!(first.meta().resolved_ts, 10);
        // Appending goes on while the first is not written; the meta has
        // not moved.
        w.append_transaction(&insert_at(20, 1)).unwrap();
        assert_eq!(w.meta().resolved_ts, 0);
        // The first write fails: the log's directory is a file for now.
        let log_dir = dir.path().join("cf");
        std::fs::remove_dir_all(&log_dir).unwrap();
        std::fs::write(&log_dir, b"in the way").unwrap();
        assert!(first.write().await.is_err());
        assert_eq!(w.meta().resolved_ts, 0);
        // Tried again once the storage is back: the same names.
        std::fs::remove_file(&log_dir).unwrap();
        std::fs::create_dir(&log_dir).unwrap();
        first.write().await.unwrap();
        w.sealed(first);
        assert_eq!(w.meta().resolved_ts, 10);
        // The second seal goes on from the first's meta.
        let mut second = w.seal(10);
        second.write().await.unwrap();
        w.sealed(second);
        assert_eq!(
            w.meta(),
            Meta {
                checkpoint_ts: 10,
                resolved_ts: 20
            }
        );
        let reader = LogReader::open(storage.clone()).await.unwrap();
        let files = reader.listing().files.clone();
        let names: Vec<(u64, u64)> = files.iter().map(|(f, _)| (f.seq, f.cut)).collect();
        assert_eq!(names, [(0, 10), (1, 20)], "one file per flush, in order");
        let mut ids = Vec::new();
        for (file, _) in files {
            for b in batches(reader.read(file, 20).await.unwrap().records).unwrap() {
                ids.extend(b.commit_ts);
            }
        }
        assert_eq!(ids, [10, 20]);
    });
}

/// `records` as a file of format version 1 (every record postcard-encoded
/// as [`Record`] derives it, which is what version 1 wrote).
fn version_1_file(records: &[Record]) -> Vec<u8> {
    let mut bytes = crate::format::header(crate::LogKind::Rows).to_vec();
    bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
    for r in records {
        crate::format::encode(r, &mut bytes).unwrap();
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A log written by an older build (format version 1) is read by this
    /// one: the same records come back as the current format gives them.
    #[test]
    fn a_version_1_file_reads_as_the_current_format_does(txns in transactions()) {
        let (_dir, _, bytes) = write_log(&txns);
        prop_assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), crate::format::FORMAT_VERSION);
        let (_, records) = Records::new(&bytes).unwrap();
        let current: Vec<Record> = records.map(|r| r.unwrap().1).collect();
        let old = version_1_file(&current);
        prop_assert_ne!(&old[crate::format::HEADER_LEN..], &bytes[crate::format::HEADER_LEN..]);
        let (_, records) = Records::new(&old).unwrap();
        let read: Vec<Record> = records.map(|r| r.unwrap().1).collect();
        prop_assert_eq!(&read, &current);
        prop_assert_eq!(batches(read).unwrap(), expected(&txns));
    }
}

/// A rows record whose CRC matches but whose arrays do not fit together
/// (written by a faulty build, say) is damage that names what is wrong, and
/// nothing of it is returned.
#[test]
fn a_version_2_rows_record_that_does_not_fit_is_refused_with_its_reason() {
    use crate::format::TxnMark;
    use crate::format::rows::{RecordRef, TableRowsRef};
    let mut t = insert_at(7, 1);
    t.table(&schema(1, 1)).push_values(
        Op::Insert,
        None,
        Some(&[
            Value::Int(8),
            Value::Bytes(b"eight".to_vec()),
            Value::Float(8.5),
            Value::Null,
            Value::UInt(8),
        ]),
    );
    let changes = &t.tables[0];
    let txns = [TxnMark {
        commit_ts: 7,
        id: 0,
        more: false,
    }];
    let record = |txn: Vec<(u32, u32)>, after: &[sluice_core::ColumnData]| {
        let table = TableRowsRef {
            table_id: 1,
            schema_version: 1,
            ops: changes.ops(),
            txn,
            seq: changes.seq(),
            flags: changes.flags(),
            before: changes.before(),
            after,
        };
        let mut bytes = crate::format::header(crate::LogKind::Rows).to_vec();
        crate::format::frame(
            &RecordRef::Rows {
                txns: &txns,
                tables: &[table],
            },
            &mut bytes,
        )
        .unwrap();
        let (_, mut records) = Records::new(&bytes).unwrap();
        records.next().unwrap()
    };
    // As written: two rows of transaction 0.
    let Ok((_, Record::Rows { tables, .. })) = record(vec![(2, 0)], changes.after()) else {
        panic!("the record as written reads back");
    };
    assert_eq!(tables[0].txn, [0, 0]);
    assert_eq!(tables[0].after, changes.after());
    for (txn, reason) in [
        (vec![(1, 0)], "table 1: transactions cover 1 of its 2 rows"),
        (
            vec![(2, 0), (1, 0)],
            "table 1: a transaction's rows end at 1, after row 2 of 2",
        ),
        (
            vec![(3, 0)],
            "a transaction's rows end at 3, after row 0 of 2",
        ),
    ] {
        match record(txn, changes.after()) {
            Err(Damage::Decode { offset, reason: r }) => {
                assert_eq!(offset, crate::format::HEADER_LEN as u64);
                assert!(r.contains(reason), "{r}");
            }
            other => panic!("{other:?}"),
        }
    }
    // A float column cut short of its last value.
    let mut after = changes.after().to_vec();
    if let sluice_core::ColumnValues::Float64(v) = &mut after[2].values {
        v.pop();
    }
    let read = record(vec![(2, 0)], &after);
    let Ok((_, Record::Rows { txns, tables })) = read else {
        panic!("a column one value short still decodes: {read:?}");
    };
    // ... and the replay refuses it against the schema.
    let mut schemas = Schemas::default();
    schemas.add((*schema(1, 1)).clone());
    let err = table_batch(tables.into_iter().next().unwrap(), &txns, &schemas).unwrap_err();
    assert!(
        err.contains("column `price` has 1 values for 2 rows"),
        "{err}"
    );
}

/// A block of a block-aligned buffer.
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(4096))]
struct Page([u8; 4096]);

#[test]
fn files_written_past_the_page_cache_read_back_byte_for_byte_at_every_size_boundary() {
    use crate::storage::{DirectWrites, put_durably_with};
    use std::path::Path;
    // The temporary directory, and tmpfs where there is one (a file system
    // that may refuse writes past the page cache: the ordinary write then).
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    if Path::new("/dev/shm").is_dir() {
        dirs.push(tempfile::tempdir_in("/dev/shm").unwrap());
    }
    let block = 4096;
    let small = 256 << 10;
    for dir in &dirs {
        let mut direct = DirectWrites::default();
        let mut sizes = vec![0, 1, block, small - 1, small, small + 1];
        sizes.extend([
            small + block,
            3 * small + 17,
            (1 << 20) + 1,
            (5 << 20) + 4095,
            4 << 20,
        ]);
        // Each size from a buffer as the allocator gives it (copied to the
        // aligned buffer unless it happens to be aligned), then from a
        // block-aligned one (written from where it is; only its last partial
        // block copied).
        for (i, len) in sizes.into_iter().enumerate() {
            let bytes: Vec<u8> = (0..len).map(|b| ((b * 7 + i) % 253) as u8).collect();
            let mut pages = vec![Page([0; 4096]); len.div_ceil(block)];
            let at: &mut [u8] = bytemuck::cast_slice_mut(&mut pages);
            at[..len].copy_from_slice(&bytes);
            for (from, aligned) in [(&bytes[..], false), (&at[..len], true)] {
                let copied = direct.copied();
                put_durably_with(dir.path(), "f.log", from, Some(&mut direct), &|| Ok(())).unwrap();
                let read = std::fs::read(dir.path().join("f.log")).unwrap();
                assert_eq!(read.len(), len, "{}: size {len}", dir.path().display());
                assert!(read == bytes, "{}: size {len}", dir.path().display());
                assert!(!dir.path().join("f.log.tmp").exists());
                if aligned && len >= small && !direct.refused() {
                    assert_eq!(
                        direct.copied() - copied,
                        (len % block) as u64,
                        "size {len}: an aligned buffer's whole blocks are written from it"
                    );
                }
            }
        }
        // The seven sizes from 256 KiB up (some in several 1 MiB chunks)
        // went past the cache, twice each, unless this file system refused
        // it.
        assert!(
            direct.refused() || direct.files() == 14,
            "{}",
            dir.path().display()
        );
    }
}

/// A buffer made to the expected size is kept for the next file; one that
/// grew past twice that for an outsized flush is let go once written.
#[test]
fn a_written_buffer_is_kept_for_the_next_file_unless_an_outsized_flush_grew_it() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        let expected = 256 << 10;
        w.expect_file_size(expected);
        let mut ts = 100u64;
        let mut write = async |w: &mut LogWriter, bytes: usize| {
            let mut written = 0;
            while written < bytes {
                let mut t = Transaction::new(CommitTs::new(ts));
                t.table(&schema(1, 1)).push_values(
                    Op::Insert,
                    None,
                    Some(&[
                        Value::Int(ts as i64),
                        Value::Bytes(vec![b'x'; 1_000]),
                        Value::Null,
                        Value::Null,
                        Value::UInt(ts),
                    ]),
                );
                w.append_transaction(&t).unwrap();
                ts += 1;
                written += 1_000;
            }
            w.flush(0).await.unwrap();
        };
        write(&mut w, 100 << 10).await;
        let kept = w.spare_capacity().expect("a buffer kept");
        assert!(kept >= expected && kept < 2 * expected, "{kept}");
        // An outsized flush grows the kept buffer past twice the size: it
        // goes once written.
        write(&mut w, 2 << 20).await;
        assert_eq!(w.spare_capacity(), None);
        // The next file has a buffer of the expected size again, kept.
        write(&mut w, 100 << 10).await;
        assert_eq!(w.spare_capacity(), Some(kept));
    });
}

#[test]
fn a_large_file_is_written_past_the_page_cache_from_where_it_was_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        let s = schema(1, 1);
        let mut txns = Vec::new();
        // About 2 MiB of rows, flushed twice (the second file is encoded
        // into the first one's buffer, kept).
        for round in 0..2u64 {
            for i in 0..2_000u64 {
                let ts = 100 + round * 10_000 + i;
                let mut t = Transaction::new(CommitTs::new(ts));
                t.id = ts;
                let name = format!("{ts:0>500}");
                t.table(&s).push_values(
                    Op::Insert,
                    None,
                    Some(&[
                        Value::Int(ts as i64),
                        Value::Bytes(name.into_bytes()),
                        Value::Float(ts as f64),
                        Value::Bytes(vec![round as u8; 300]),
                        Value::UInt(ts),
                    ]),
                );
                w.append_transaction(&t).unwrap();
                txns.push(t);
            }
            w.flush(0).await.unwrap();
        }
        let (files, copied, refused) = w.direct_writes().expect("a large file was written");
        if !refused {
            assert_eq!(files, 2);
            // Only each file's last partial block.
            assert!(copied < 2 * 4096, "copied {copied} bytes of the files");
        }
        // And they read back whole.
        let reader = LogReader::open(storage.clone()).await.unwrap();
        let meta = reader.listing().meta.unwrap();
        let mut rows = 0;
        for file in reader.files_for(LogKind::Rows, Meta::default()) {
            let read = reader.read(file, meta.resolved_ts).await.unwrap();
            assert!(read.skipped.is_none());
            for record in read.records {
                if let Record::Rows { tables, .. } = record {
                    rows += tables.iter().map(|t| t.ops.len()).sum::<usize>();
                }
            }
        }
        assert_eq!(rows, txns.len());
    });
}

#[test]
fn a_fenced_storage_refuses_writes_and_deletes_once_the_fence_closes() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let fence = sluice_core::WriteFence::until(
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        );
        let storage = Storage::open(&uri, "cf")
            .await
            .unwrap()
            .fenced(fence.clone());
        storage.put("a", Arc::new(b"one".to_vec())).await.unwrap();
        fence.close();
        let err = storage
            .put("b", Arc::new(b"two".to_vec()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cannot write b"), "{err}");
        assert_eq!(err.source.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(storage.delete("a").await.is_err());
        // Reading goes on; nothing changed.
        assert_eq!(storage.get("a").await.unwrap(), b"one");
        assert!(!storage.exists("b").await.unwrap());
    });
}

/// A log in a directory writes its flushes on the blocking pool, past
/// `Storage::put`: the fences hold there too. Once the capture's lease may
/// have ended, or once the run that writes the log retired it, a flush
/// writes no file and no meta, and the log stays as the last flush left it.
#[test]
fn a_log_in_a_directory_writes_nothing_once_its_fence_or_its_run_closes() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        for closes in ["lease", "run"] {
            let lease = sluice_core::WriteFence::open();
            let retired = sluice_core::WriteFence::open();
            let storage = Storage::open(&uri, closes)
                .await
                .unwrap()
                .fenced(lease.clone());
            let mut writer = LogWriter::open(storage.clone()).await.unwrap();
            writer.retire_with(retired.clone());
            writer.append_transaction(&insert_at(10, 1)).unwrap();
            writer.flush(0).await.unwrap();
            let before = LogReader::open(storage.clone()).await.unwrap();
            let files = before.listing().files.len();
            assert_eq!(before.listing().meta.unwrap().resolved_ts, 10);
            match closes {
                "lease" => lease.close(),
                _ => retired.close(),
            }
            writer.append_transaction(&insert_at(20, 1)).unwrap();
            let err = writer.flush(0).await.unwrap_err();
            assert!(err.to_string().contains("cannot write"), "{closes}: {err}");
            let after = LogReader::open(storage).await.unwrap();
            assert_eq!(
                after.listing().files.len(),
                files,
                "{closes}: a file landed"
            );
            assert_eq!(after.listing().meta.unwrap().resolved_ts, 10, "{closes}");
        }
    });
}

/// A run that starts below the log's resolved ts rewinds it: the meta goes
/// back to the run's start at once, what the last run logged above it (rows
/// and a DDL) is superseded, and what this run reads again is logged again
/// under the commit ts it gives it now (a MySQL source need not give a
/// transaction read again its old ts), never dropped as durable already
/// and never applied twice.
#[test]
fn a_run_that_starts_below_the_resolved_ts_logs_again_what_it_reads_again() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        for ts in [10, 20, 30] {
            w.append_transaction(&insert_at(ts, 1)).unwrap();
        }
        w.append_ddl(&ddl(35)).unwrap();
        // A heartbeat's resolved ts past what was read.
        w.resolved(60);
        w.flush(20).await.unwrap();
        drop(w);

        // The next run starts at the checkpoint, 20: the transaction at 30
        // comes again as 24, the DDL as 25, a new one at 27.
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.rewind_to(20).await.unwrap();
        let listing = LogReader::open(storage.clone()).await.unwrap();
        assert_eq!(
            listing.listing().meta.unwrap(),
            Meta {
                checkpoint_ts: 20,
                resolved_ts: 20
            },
            "the meta goes back before anything is logged again"
        );
        w.append_transaction(&insert_at(24, 1)).unwrap();
        w.append_ddl(&ddl(25)).unwrap();
        w.append_transaction(&insert_at(27, 1)).unwrap();
        w.flush(20).await.unwrap();
        assert_eq!(w.meta().resolved_ts, 27);

        let mut replay = crate::Replay::open(storage.clone(), true).await.unwrap();
        let mut seen = Vec::new();
        while let Some(event) = replay.next().await.unwrap() {
            match event {
                crate::ReplayEvent::Rows { batch, .. } => seen.extend(
                    batch
                        .tables
                        .iter()
                        .flat_map(|t| t.commit_ts.iter().map(|ts| ts.to_string())),
                ),
                crate::ReplayEvent::Ddl(d) => seen.push(format!("ddl {}", d.commit_ts)),
            }
        }
        assert_eq!(seen, ["10", "20", "24", "ddl 25", "27"]);
    });
}

/// The writers of two runs gave two tables one (table id, version): a sink
/// knows a schema by them, so the replay gives the second its own id, and
/// each row comes with its own table's schema.
#[test]
fn a_replay_gives_two_tables_that_two_runs_numbered_alike_two_ids() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    let renamed = |table: &str, id: u32| {
        let mut s = (*schema(id, 1)).clone();
        s.table_name = table.into();
        Arc::new(s)
    };
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        // The first run numbers orders 1; the second, which meets customers
        // first, numbers customers 1 and orders 2.
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.append_transaction(&insert_into(10, &renamed("orders", 1)))
            .unwrap();
        w.flush(0).await.unwrap();
        drop(w);
        let mut w = LogWriter::open(storage.clone()).await.unwrap();
        w.rewind_to(10).await.unwrap();
        w.append_transaction(&insert_into(20, &renamed("customers", 1)))
            .unwrap();
        w.append_transaction(&insert_into(30, &renamed("orders", 2)))
            .unwrap();
        w.flush(10).await.unwrap();

        let mut replay = crate::Replay::open(storage, true).await.unwrap();
        let mut seen = Vec::new();
        while let Some(event) = replay.next().await.unwrap() {
            let crate::ReplayEvent::Rows { schemas, batch, .. } = event else {
                continue;
            };
            for t in &batch.tables {
                let s = schemas.iter().find(|s| s.table_id == t.table_id).unwrap();
                assert_eq!(s.version, t.schema_version);
                seen.push((t.commit_ts[0], s.table_name.clone(), s.table_id));
            }
        }
        let names: Vec<_> = seen.iter().map(|(ts, n, _)| (*ts, n.as_str())).collect();
        assert_eq!(names, [(10, "orders"), (20, "customers"), (30, "orders")]);
        let ids: std::collections::HashSet<(u32, &str)> =
            seen.iter().map(|(_, n, id)| (*id, n.as_str())).collect();
        assert_eq!(ids.len(), 3, "{seen:?}");
        let by_id: std::collections::HashSet<u32> = seen.iter().map(|s| s.2).collect();
        assert_eq!(by_id.len(), 3, "one id per schema given: {seen:?}");
    });
}

/// A writer paused past its lease lands one more file after the next
/// epoch's writer opened the log, under the seq that writer took too: the
/// file orders among its own run's, before the next run's resumed marker,
/// which supersedes what it holds above the new run's start.
#[test]
fn a_file_an_earlier_run_lands_late_is_superseded_by_the_next_runs_marker() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    let log = dir.path().join("cf");
    let aside = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let mut a = LogWriter::open(storage.clone()).await.unwrap().in_run(1);
        a.append_transaction(&insert_at(10, 1)).unwrap();
        a.flush(0).await.unwrap();
        let meta = std::fs::read(log.join(crate::meta::META_FILE)).unwrap();
        // Its next flush is written, then taken back as if its rename had
        // not happened yet: its file and meta are not there when the next
        // run opens the log.
        a.append_transaction(&insert_at(30, 1)).unwrap();
        a.append_transaction(&insert_at(40, 1)).unwrap();
        a.flush(0).await.unwrap();
        let before: Vec<String> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let late = before
            .iter()
            .find(|n| FileName::parse(n).is_some_and(|f| f.seq == 1))
            .unwrap()
            .clone();
        std::fs::rename(log.join(&late), aside.path().join(&late)).unwrap();
        std::fs::write(log.join(crate::meta::META_FILE), &meta).unwrap();
        drop(a);

        let mut b = LogWriter::open(storage.clone()).await.unwrap().in_run(2);
        assert_eq!(b.run(), 2);
        b.rewind_to(10).await.unwrap();
        b.append_transaction(&insert_at(25, 1)).unwrap();
        b.append_transaction(&insert_at(35, 1)).unwrap();
        b.flush(10).await.unwrap();
        // The paused writer's rename lands now.
        std::fs::rename(aside.path().join(&late), log.join(&late)).unwrap();

        let reader = LogReader::open(storage.clone()).await.unwrap();
        let seqs: Vec<(u64, u64)> = reader
            .listing()
            .files
            .iter()
            .filter(|(f, _)| f.kind == LogKind::Rows)
            .map(|(f, _)| (f.run, f.seq))
            .collect();
        assert_eq!(seqs, [(1, 0), (1, 1), (2, 1)], "both took seq 1");
        let mut replay = crate::Replay::open(storage.clone(), true).await.unwrap();
        let mut seen = Vec::new();
        while let Some(event) = replay.next().await.unwrap() {
            if let crate::ReplayEvent::Rows { batch, .. } = event {
                seen.extend(batch.tables.iter().flat_map(|t| t.commit_ts.clone()));
            }
        }
        assert_eq!(seen, [10, 25, 35]);

        // A writer told of an earlier run than the log's goes on in the
        // log's.
        let c = LogWriter::open(storage.clone()).await.unwrap().in_run(1);
        assert_eq!(c.run(), 2);
    });
}

/// The fence is asked again just before the rename that makes a file the
/// log's: refused, the file is not there and neither is its temporary.
#[test]
fn a_file_whose_fence_closes_while_it_is_written_never_lands() {
    let dir = tempfile::tempdir().unwrap();
    let refused = || {
        Err(crate::storage::StorageError {
            what: "closed".into(),
            source: std::io::Error::other("closed"),
        })
    };
    let err = crate::storage::put_durably(dir.path(), "f.log", b"bytes", &refused).unwrap_err();
    assert_eq!(err.what, "closed");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    crate::storage::put_durably(dir.path(), "f.log", b"bytes", &|| Ok(())).unwrap();
    assert_eq!(std::fs::read(dir.path().join("f.log")).unwrap(), b"bytes");
}

/// Names made by hand at the ends of their numbers: a run at the top is
/// gone on in (nothing is added to it), a seq at the top refuses the log
/// with the reason, and neither panics.
#[test]
fn files_named_at_the_ends_of_their_numbers_neither_overflow_nor_panic() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::Local(dir.path().to_path_buf());
    let log = dir.path().join("cf");
    runtime().block_on(async {
        let storage = Storage::open(&uri, "cf").await.unwrap();
        let top_run = FileName {
            kind: LogKind::Ddl,
            run: u64::MAX,
            seq: 3,
            cut: 0,
            max: 0,
        };
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(log.join(top_run.name()), b"").unwrap();
        let mut w = LogWriter::open(storage.clone()).await.unwrap().in_run(7);
        assert_eq!(w.run(), u64::MAX);
        w.append_transaction(&insert_at(10, 1)).unwrap();
        w.flush(0).await.unwrap();
        let reader = LogReader::open(storage.clone()).await.unwrap();
        let rows: Vec<(u64, u64)> = reader
            .listing()
            .files
            .iter()
            .filter(|(f, _)| f.kind == LogKind::Rows)
            .map(|(f, _)| (f.run, f.seq))
            .collect();
        assert_eq!(rows, [(u64::MAX, 4)]);

        let top_seq = FileName {
            seq: u64::MAX,
            ..top_run
        };
        std::fs::write(log.join(top_seq.name()), b"").unwrap();
        let err = LogWriter::open(storage.clone()).await.err().unwrap();
        assert!(err.to_string().contains("no file can follow it"), "{err}");
    });
}
