//! The shipped plugins through the real runtime, asserting exact output.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use sluice_core::{
    Batch, BatchBuilder, Column, ColumnType, CommitTs, DdlEvent, FLAG_REPLAY, Filter, Op,
    PluginError, Sink, TableSchema, Value,
};
use sluice_runtime::{
    PluginKind, PluginRuntime, PluginSettings, RuntimeConfig, WasmFilter, WasmSink,
};
use sluice_tests::plugin_path;

const MS: u64 = 1_713_436_126_708;
const TS: u64 = (MS << 18) | 5;

fn users() -> Arc<TableSchema> {
    let c = |name: &str, ty: ColumnType, sql: &str, key: bool| Column {
        name: name.into(),
        ty,
        sql_type: sql.into(),
        nullable: !key,
        key,
    };
    Arc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "app".into(),
        table_name: "users".into(),
        columns: vec![
            c("id", ColumnType::Int, "int", true),
            c("name", ColumnType::Text, "", false),
            c("score", ColumnType::Decimal, "decimal(6,2)", false),
            c("seen", ColumnType::Datetime, "datetime", false),
            c("ok", ColumnType::Boolean, "boolean", false),
        ],
    })
}

fn text(s: &str) -> Value {
    Value::Bytes(s.as_bytes().to_vec())
}

/// Insert, update (flagged replay), delete of one user.
fn sample() -> (Vec<Arc<TableSchema>>, Batch) {
    let t = users();
    let seen = Value::Int(1_700_000_000_123_456);
    let row = |op, before: Option<Vec<Value>>, after: Option<Vec<Value>>| (op, before, after);
    let mut b = BatchBuilder::new();
    let push = |b: &mut BatchBuilder,
                ts: CommitTs,
                flags: u8,
                (op, before, after): (Op, Option<Vec<Value>>, Option<Vec<Value>>)| {
        b.push_values(&t, ts, flags, op, before.as_deref(), after.as_deref());
    };
    push(
        &mut b,
        CommitTs::new(TS),
        0,
        row(
            Op::Insert,
            None,
            Some(vec![
                Value::Int(7),
                text("say \"hi\"\nbye"),
                Value::Null,
                seen.clone(),
                Value::Int(1),
            ]),
        ),
    );
    push(
        &mut b,
        CommitTs::new(TS + 1),
        FLAG_REPLAY,
        row(
            Op::Update,
            Some(vec![
                Value::Int(7),
                text("ada"),
                text("1.50"),
                seen.clone(),
                Value::Int(1),
            ]),
            Some(vec![
                Value::Int(7),
                text("ada"),
                Value::Null,
                seen.clone(),
                Value::Int(0),
            ]),
        ),
    );
    push(
        &mut b,
        CommitTs::new(TS + 2),
        0,
        row(
            Op::Delete,
            Some(vec![
                Value::Int(7),
                text("ada"),
                text("-0.25"),
                Value::Null,
                Value::Int(0),
            ]),
            None,
        ),
    );
    b.finish()
}

fn sink_file(rt: &PluginRuntime, dir: &std::path::Path, config: serde_json::Value) -> WasmSink {
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-file"))
        .unwrap();
    let mut settings = PluginSettings::new("sink-file", config.to_string());
    settings.capabilities.data_dir = Some(dir.to_path_buf());
    WasmSink::new(component, settings).unwrap()
}

fn filter(rt: &PluginRuntime, name: &str, config: serde_json::Value) -> WasmFilter {
    let component = rt
        .load_file(PluginKind::Filter, &plugin_path(name))
        .unwrap();
    WasmFilter::new(component, PluginSettings::new(name, config.to_string())).unwrap()
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn sink_file_writes_exact_canal_json_lines() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut sink = sink_file(
        &rt,
        dir.path(),
        serde_json::json!({ "dir": "out", "enable-sluice-extension": true }),
    );
    sink.validate_config().await.unwrap();
    let (schemas, mut batch) = sample();
    let start = now_ms();
    sink.write(&schemas, &mut batch).await.unwrap();
    sink.flush(CommitTs::new(TS + 2)).await.unwrap();
    sink.apply_ddl(&DdlEvent::of_table(
        CommitTs::new(TS + 3),
        "app",
        "users",
        "ALTER TABLE users ADD COLUMN x INT",
    ))
    .await
    .unwrap();
    sink.close().await.unwrap();
    let end = now_ms();

    let out = std::fs::read_to_string(dir.path().join("out/changes-000001.jsonl")).unwrap();
    // `ts` is the wall clock when the line was made: check it, then blank it.
    let lines: Vec<String> = out
        .lines()
        .map(|l| {
            let ts = serde_json::from_str::<serde_json::Value>(l).unwrap()["ts"]
                .as_u64()
                .unwrap();
            assert!((start..=end).contains(&ts), "{ts} not in {start}..={end}");
            l.replace(&format!(r#""ts":{ts},"#), r#""ts":NOW,"#)
        })
        .collect();
    let head = r#"{"id":0,"database":"app","table":"users","pkNames":["id"],"isDdl":false"#;
    let types = concat!(
        r#""sqlType":{"id":4,"name":2005,"score":3,"seen":93,"ok":-6},"#,
        r#""mysqlType":{"id":"int","name":"text","score":"decimal","seen":"datetime","ok":"tinyint"}"#
    );
    let expected = [
        format!(
            r#"{head},"type":"INSERT","es":{MS},"ts":NOW,"sql":"",{types},"data":[{{"id":"7","name":"say \"hi\"\nbye","score":null,"seen":"2023-11-14 22:13:20","ok":"1"}}],"old":null,"_sluice":{{"commitTs":{TS},"replay":false}}}}"#
        ),
        format!(
            r#"{head},"type":"UPDATE","es":{MS},"ts":NOW,"sql":"",{types},"data":[{{"id":"7","name":"ada","score":null,"seen":"2023-11-14 22:13:20","ok":"0"}}],"old":[{{"id":"7","name":"ada","score":"1.50","seen":"2023-11-14 22:13:20","ok":"1"}}],"_sluice":{{"commitTs":{},"replay":true}}}}"#,
            TS + 1
        ),
        format!(
            r#"{head},"type":"DELETE","es":{MS},"ts":NOW,"sql":"",{types},"data":[{{"id":"7","name":"ada","score":"-0.25","seen":null,"ok":"0"}}],"old":null,"_sluice":{{"commitTs":{},"replay":false}}}}"#,
            TS + 2
        ),
        format!(
            r#"{{"id":0,"database":"app","table":"users","pkNames":null,"isDdl":true,"type":"ALTER","es":{MS},"ts":NOW,"sql":"ALTER TABLE users ADD COLUMN x INT","sqlType":null,"mysqlType":null,"data":null,"old":null,"_sluice":{{"commitTs":{},"replay":false}}}}"#,
            TS + 3
        ),
    ];
    assert_eq!(lines, expected);
    assert_eq!(
        std::fs::read_dir(dir.path().join("out")).unwrap().count(),
        1
    );
    assert_eq!(sink.stats().counters()["rows"], 3);
}

/// A sink behind a closed write fence (its capture's lease may have ended)
/// is refused every call before the plugin runs: what it wrote before stays,
/// nothing more reaches the file, and what it holds unflushed is dropped.
#[tokio::test]
async fn a_closed_write_fence_refuses_every_sink_call_before_the_plugin_runs() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-file"))
        .unwrap();
    let mut settings =
        PluginSettings::new("sink-file", serde_json::json!({ "dir": "out" }).to_string());
    settings.capabilities.data_dir = Some(dir.path().to_path_buf());
    let fence = sluice_core::WriteFence::until(
        std::time::Instant::now() + std::time::Duration::from_secs(60),
    );
    settings.capabilities.fence = fence.clone();
    let mut sink = WasmSink::new(component, settings).unwrap();
    let (schemas, mut batch) = sample();
    sink.write(&schemas, &mut batch).await.unwrap();
    sink.flush(CommitTs::new(TS + 2)).await.unwrap();
    let file = dir.path().join("out/changes-000001.jsonl");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written.lines().count(), 3);
    // Written, not flushed, when the fence closes.
    let (schemas, mut batch) = sample();
    sink.write(&schemas, &mut batch).await.unwrap();
    fence.close();
    let (schemas, mut batch) = sample();
    let refused = sink.write(&schemas, &mut batch).await.unwrap_err();
    assert!(
        matches!(&refused, PluginError::Refused(m) if m.contains("lease")),
        "{refused}"
    );
    for refused in [
        sink.flush(CommitTs::new(TS + 9)).await.unwrap_err(),
        sink.apply_ddl(&DdlEvent::of_table(
            CommitTs::new(TS + 9),
            "app",
            "users",
            "DROP TABLE users",
        ))
        .await
        .unwrap_err(),
        sink.close().await.unwrap_err(),
    ] {
        assert!(matches!(refused, PluginError::Refused(_)), "{refused}");
    }
    assert!(!sink.is_live(), "the instance is dropped, not closed");
    let after: Vec<String> = std::fs::read_dir(dir.path().join("out"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(
        after
            .concat()
            .lines()
            .filter(|l| l.contains("DROP TABLE"))
            .count(),
        0
    );
    assert!(
        after.concat().lines().count() <= 6,
        "at most what was written before the fence closed: {}",
        after.concat().lines().count()
    );
    assert_eq!(
        sink.stats().counters()["rows"],
        3,
        "rows count once flushed: only those flushed before the fence closed"
    );
}

#[tokio::test]
async fn sink_file_writes_exact_csv_lines_and_rotates() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut sink = sink_file(
        &rt,
        dir.path(),
        serde_json::json!({
            "format": "csv", "prefix": "u", "max-file-bytes": 1024, "include-commit-ts": true
        }),
    );
    let (schemas, mut batch) = sample();
    for _ in 0..10 {
        sink.write(&schemas, &mut batch).await.unwrap();
    }
    sink.flush(CommitTs::new(TS + 2)).await.unwrap();
    let lines = [
        format!(
            "\"I\",\"users\",\"app\",{TS},7,\"say \"\"hi\"\"\nbye\",\\N,\"2023-11-14 22:13:20\",1\r\n"
        ),
        format!(
            "\"U\",\"users\",\"app\",{},7,\"ada\",\\N,\"2023-11-14 22:13:20\",0\r\n",
            TS + 1
        ),
        format!(
            "\"D\",\"users\",\"app\",{},7,\"ada\",\"-0.25\",\\N,0\r\n",
            TS + 2
        ),
    ];
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let names: Vec<_> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert_eq!(all, lines.concat().repeat(10));
    assert!(
        files
            .iter()
            .all(|f| std::fs::metadata(f).unwrap().len() <= 1024)
    );
    assert_eq!(names[0], "u-000001.csv");
    assert!(names.len() >= 2, "{names:?}");
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn filter_mask_hashes_and_nulls_matched_columns() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let mut f = filter(
        &rt,
        "filter-mask",
        serde_json::json!({ "columns": ["name", "app.users.score"], "salt": "s" }),
    );
    f.validate_config().await.unwrap();
    let (schemas, mut batch) = sample();
    f.transform(&schemas, &mut batch).await.unwrap();
    let t = &batch.tables[0];
    assert_eq!(t.ops, vec![0, 1, 2]);
    let name = |image: &[sluice_core::ColumnData], i| image[1].value(i);
    assert_eq!(
        name(&t.after, 0),
        text(&sha256_hex(&[b"s", b"say \"hi\"\nbye"]))
    );
    assert_eq!(name(&t.after, 1), text(&sha256_hex(&[b"s", b"ada"])));
    assert_eq!(name(&t.before, 0), text(&sha256_hex(&[b"s", b"ada"])));
    // score is a decimal: masked to NULL in either mode.
    assert_eq!(t.before[2].value(0), Value::Null);
    assert_eq!(t.before[2].value(1), Value::Null);
    // Unmatched columns pass untouched.
    assert_eq!(t.after[0].value(0), Value::Int(7));
    assert_eq!(t.after[3].value(1), Value::Int(1_700_000_000_123_456));
    assert_eq!(f.stats().counters()["masked"], 6);
}

#[tokio::test]
async fn filter_events_drops_matching_rows_and_keeps_the_rest() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let mut f = filter(
        &rt,
        "filter-events",
        serde_json::json!({ "rules": [{ "matcher": ["app.user*"], "ignore-event": ["delete", "update"] }] }),
    );
    let (schemas, mut batch) = sample();
    f.transform(&schemas, &mut batch).await.unwrap();
    assert_eq!(batch.tables.len(), 1);
    let t = &batch.tables[0];
    assert_eq!(t.ops, vec![0]);
    assert_eq!(t.commit_ts, vec![TS]);
    assert_eq!(t.after[1].value(0), text("say \"hi\"\nbye"));
    assert_eq!(t.before[0].len(), 0);
    assert_eq!(f.stats().counters()["dropped"], 2);

    let mut f = filter(
        &rt,
        "filter-events",
        serde_json::json!({ "rules": [{ "matcher": ["other.*"], "ignore-event": ["all-dml"] }] }),
    );
    let (schemas, mut batch) = sample();
    let before = batch.clone();
    f.transform(&schemas, &mut batch).await.unwrap();
    assert_eq!(batch, before);

    let mut bad = filter(
        &rt,
        "filter-events",
        serde_json::json!({ "rules": [{ "matcher": ["*"], "ignore-event": ["truncate"] }] }),
    );
    let err = bad.validate_config().await.unwrap_err();
    assert!(err.to_string().contains("truncate"), "{err}");
}

#[tokio::test]
async fn the_tutorial_sink_runs_under_the_host() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let component = rt
        .load_file(PluginKind::Sink, &plugin_path("sink-lines"))
        .unwrap();
    let mut settings = PluginSettings::new("sink-lines", r#"{"file": "rows.txt"}"#);
    settings.capabilities.data_dir = Some(dir.path().to_path_buf());
    let mut sink = WasmSink::new(component, settings).unwrap();
    let (schemas, mut batch) = sample();
    sink.write(&schemas, &mut batch).await.unwrap();
    sink.flush(CommitTs::new(TS + 2)).await.unwrap();
    let text = std::fs::read_to_string(dir.path().join("rows.txt")).unwrap();
    assert_eq!(
        text,
        format!(
            "I app.users {TS} id=7 name=say \"hi\"\nbye score=NULL seen=2023-11-14 22:13:20.123456 ok=1\n\
             U app.users {} replay id=7 name=ada score=NULL seen=2023-11-14 22:13:20.123456 ok=0\n\
             D app.users {} id=7 name=ada score=-0.25 seen=NULL ok=0\n",
            TS + 1,
            TS + 2
        )
    );
}
