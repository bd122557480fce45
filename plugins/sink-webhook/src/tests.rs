//! Native tests: the sink against the SDK's HTTP test double.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::Value as Json;
use sluice_sdk::http::{ErrorKind, HttpError, Request, Response, testing};
use sluice_sdk::testing::{SinkHarness, schema};
use sluice_sdk::{ColumnType, DdlEvent, Error, FLAG_REPLAY, TableBatchBuilder, TableSchema, Value};

use super::SinkWebhook;

fn users() -> TableSchema {
    schema(
        1,
        "app",
        "users",
        &[
            ("id", ColumnType::Int, true),
            ("name", ColumnType::Text, false),
        ],
    )
}

/// Every request the double took, as (request, parsed body).
type Seen = Rc<RefCell<Vec<(Request, Json)>>>;

/// A double answering `status` for each request, recording what it took.
fn receiver(
    statuses: impl Fn(usize) -> Result<u16, HttpError> + 'static,
) -> (Seen, testing::MockGuard) {
    let seen: Seen = Rc::default();
    let log = seen.clone();
    let guard = testing::mock(move |r: &Request| {
        let n = log.borrow().len();
        let body: Json = serde_json::from_slice(r.body_bytes()).expect("the body is JSON");
        log.borrow_mut().push((r.clone(), body));
        statuses(n).map(Response::new)
    });
    (seen, guard)
}

fn rows(from: i64, n: i64, ts: u64) -> sluice_sdk::TableBatch {
    let s = users();
    let mut b = TableBatchBuilder::new(&s);
    for id in from..from + n {
        b.insert(ts, &[Value::Int(id), Value::Text("ada")]);
    }
    b.finish()
}

fn ids(seen: &Seen) -> Vec<String> {
    seen.borrow()
        .iter()
        .flat_map(|(_, b)| b["events"].as_array().unwrap().clone())
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rows_go_out_in_batches_of_rows_with_keys_headers_and_canal_json_data() {
    let (seen, _g) = receiver(|_| Ok(200));
    let s = users();
    let mut sink = SinkHarness::<SinkWebhook>::open(
        r#"{"url":"https://hooks.test/cdc?k=1","batch-rows":2,"bearer-token":"t0k","headers":{"x-tenant":"a"}}"#,
    )
    .unwrap();
    sink.write(&[&s], vec![rows(1, 3, 100)]).unwrap();
    // Two full requests would need four rows: one went, one waits.
    assert_eq!(seen.borrow().len(), 1);
    sink.flush(100).unwrap();
    assert_eq!(seen.borrow().len(), 2);
    let seen_ref = seen.borrow();
    let (request, body) = &seen_ref[0];
    assert_eq!(request.url(), "https://hooks.test/cdc?k=1");
    assert_eq!(
        request.header_value("authorization"),
        Some(&b"Bearer t0k"[..])
    );
    assert_eq!(request.header_value("x-tenant"), Some(&b"a"[..]));
    assert_eq!(
        request.header_value("content-type"),
        Some(&b"application/json"[..])
    );
    assert_eq!(body["changefeed"], "test/changefeed");
    let event = &body["events"][0];
    assert_eq!(event["commitTs"], 100);
    assert_eq!(event["replay"], false);
    assert_eq!(event["data"]["type"], "INSERT");
    assert_eq!(event["data"]["data"][0]["id"], "1");
    assert_eq!(event["data"]["table"], "users");
    drop(seen_ref);
    let keys = ids(&seen);
    assert_eq!(keys.len(), 3);
    // (changefeed, table, transaction, row index): distinct per row.
    assert!(
        keys[0].starts_with("test/changefeed/app.users/"),
        "{keys:?}"
    );
    let unique: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!(unique.len(), 3);
    assert_eq!(sluice_sdk::host::native_counters()["rows"], 3);
}

#[test]
fn a_body_never_passes_batch_bytes_unless_one_event_does() {
    let (seen, _g) = receiver(|_| Ok(204));
    let s = users();
    let mut sink =
        SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/","batch-bytes":1024}"#).unwrap();
    sink.write(&[&s], vec![rows(1, 40, 7)]).unwrap();
    sink.flush(7).unwrap();
    let seen = seen.borrow();
    assert!(seen.len() > 2, "{} requests", seen.len());
    for (r, _) in seen.iter() {
        assert!(r.body_bytes().len() <= 1024, "{}", r.body_bytes().len());
    }
    let events: usize = seen
        .iter()
        .map(|(_, b)| b["events"].as_array().unwrap().len())
        .sum();
    assert_eq!(events, 40);
}

#[test]
fn failures_map_to_what_the_host_does_next() {
    let s = users();
    let cases: [(Result<u16, HttpError>, &str); 6] = [
        (Ok(503), "retryable"),
        (Ok(429), "retryable"),
        (Ok(400), "fatal"),
        (
            Err(HttpError::new(ErrorKind::Timeout, "stalled")),
            "retryable",
        ),
        (
            Err(HttpError::new(ErrorKind::Connect, "refused")),
            "retryable",
        ),
        (
            Err(HttpError::new(ErrorKind::Denied, "not granted")),
            "config",
        ),
    ];
    for (answer, want) in cases {
        let answer2 = answer.clone();
        let (_seen, _g) = receiver(move |_| answer2.clone());
        let mut sink =
            SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/x","retries":0}"#).unwrap();
        sink.write(&[&s], vec![rows(1, 1, 5)]).unwrap();
        let got = match sink.flush(5).unwrap_err() {
            Error::Retryable(_) => "retryable",
            Error::Fatal(_) => "fatal",
            Error::Config(_) => "config",
        };
        assert_eq!(got, want, "{answer:?}");
    }
}

#[test]
fn replayed_rows_keep_their_keys_and_are_flagged() {
    let (seen, _g) = receiver(|_| Ok(200));
    let s = users();
    let mut sink = SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/"}"#).unwrap();
    let first = rows(1, 2, 9);
    let mut again = first.clone();
    again.row_flags.iter_mut().for_each(|f| *f |= FLAG_REPLAY);
    sink.write(&[&s], vec![first]).unwrap();
    sink.flush(9).unwrap();
    sink.write(&[&s], vec![again]).unwrap();
    sink.flush(9).unwrap();
    let keys = ids(&seen);
    assert_eq!(keys[..2], keys[2..]);
    let seen = seen.borrow();
    assert_eq!(seen[0].1["events"][0]["replay"], false);
    assert_eq!(seen[1].1["events"][0]["replay"], true);
}

#[test]
fn ddl_goes_out_at_once_in_canal_json_and_not_in_debezium() {
    let ddl = DdlEvent {
        commit_ts: 50,
        txn_id: 77,
        kind: "alter table".into(),
        schema_name: "app".into(),
        table_name: "users".into(),
        tables: Vec::new(),
        default_schema: "app".into(),
        session: Vec::new(),
        query: "ALTER TABLE users ADD c INT".into(),
    };
    let (seen, _g) = receiver(|_| Ok(200));
    let mut sink = SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/"}"#).unwrap();
    sink.apply_ddl(&ddl).unwrap();
    assert_eq!(seen.borrow().len(), 1);
    let event = seen.borrow()[0].1["events"][0].clone();
    assert_eq!(event["ddl"], true);
    assert_eq!(event["id"], "test/changefeed/ddl/77");
    assert_eq!(event["data"]["isDdl"], true);
    let mut sink =
        SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/","format":"debezium"}"#).unwrap();
    sink.apply_ddl(&ddl).unwrap();
    assert_eq!(seen.borrow().len(), 1);
}

#[test]
fn bad_configs_are_refused_naming_the_key_and_never_the_secret() {
    for (config, says) in [
        (r#"{"url":"ftp://h/"}"#, "url"),
        (r#"{"url":"https://u:p@h/"}"#, "user or password"),
        (r#"{"url":"http://h/","batch-rows":0}"#, "batch-rows = 0"),
        (
            r#"{"url":"http://h/","batch-bytes":10}"#,
            "batch-bytes = 10",
        ),
        (r#"{"url":"http://h/","timeout-ms":99999999}"#, "timeout-ms"),
        (r#"{"url":"http://h/","retries":11}"#, "retries = 11"),
        (r#"{"url":"http://h/","format":"csv"}"#, "csv"),
        (
            r#"{"url":"http://h/","debezium-disable-schema":true}"#,
            "debezium",
        ),
        (
            r#"{"url":"http://h/","headers":{"bad name":"v"}}"#,
            "bad name",
        ),
        (
            r#"{"url":"http://h/","headers":{"x":"a\r\nInjected: 1"}}"#,
            "line break",
        ),
        (
            r#"{"url":"http://h/","headers":{"Content-Length":"1"}}"#,
            "set by the sink",
        ),
        (
            r#"{"url":"http://h/","bearer-token":"HUSH","headers":{"authorization":"HUSH"}}"#,
            "keep one",
        ),
        (
            r#"{"url":"http://h/","bearer-token":"HU SH"}"#,
            "bearer-token",
        ),
        (r#"{"url":"http://h/","nope":1}"#, "nope"),
    ] {
        let Err(Error::Config(message)) = SinkHarness::<SinkWebhook>::open(config) else {
            panic!("{config} was accepted");
        };
        assert!(message.contains(says), "{config}: {message}");
        assert!(
            !message.contains("HUSH") && !message.contains("HU SH"),
            "{message}"
        );
    }
    let config: super::Config =
        serde_json::from_str(r#"{"url":"http://h/","bearer-token":"HUSH","headers":{"k":"HUSH"}}"#)
            .unwrap();
    assert!(!format!("{config:?}").contains("HUSH"));
}

#[test]
fn a_failed_request_goes_again_flagged_replay_then_the_host_takes_over() {
    let s = users();
    // Fails twice, then takes it: the retries carry the same ids, flagged.
    let (seen, _g) = receiver(|n| if n < 2 { Ok(503) } else { Ok(200) });
    let mut sink = SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/","retries":2}"#).unwrap();
    sink.write(&[&s], vec![rows(1, 3, 5)]).unwrap();
    sink.flush(5).unwrap();
    let seen_ref = seen.borrow();
    assert_eq!(seen_ref.len(), 3);
    let replay: Vec<Vec<bool>> = seen_ref
        .iter()
        .map(|(_, b)| {
            b["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["replay"] == true)
                .collect()
        })
        .collect();
    assert_eq!(replay, [vec![false; 3], vec![true; 3], vec![true; 3]]);
    drop(seen_ref);
    let ids = ids(&seen);
    assert_eq!(ids[..3], ids[3..6]);
    assert_eq!(sluice_sdk::host::native_counters()["retries"], 2);
    // Out of retries: retryable for the host; a fatal status is not retried.
    let (seen, _g) = receiver(|_| Ok(503));
    let mut sink = SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/","retries":1}"#).unwrap();
    sink.write(&[&s], vec![rows(1, 1, 5)]).unwrap();
    assert!(matches!(sink.flush(5), Err(Error::Retryable(_))));
    assert_eq!(seen.borrow().len(), 2);
    let (seen, _g) = receiver(|_| Ok(404));
    let mut sink = SinkHarness::<SinkWebhook>::open(r#"{"url":"http://h/","retries":3}"#).unwrap();
    sink.write(&[&s], vec![rows(1, 1, 5)]).unwrap();
    assert!(matches!(sink.flush(5), Err(Error::Fatal(_))));
    assert_eq!(seen.borrow().len(), 1);
}
