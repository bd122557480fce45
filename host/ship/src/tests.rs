use std::time::Duration;

use sluice_core::{Source, SourceEvent, TableChanges};
use sluice_source::{DatagenConfig, DatagenSource};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Channel, Endpoint, Server};

use crate::frame::{Decoder, Encoder, Received};
use crate::{
    MIN_WINDOW, ShipError, ShipKey, ShipRequest, ShipService, ShippedSource, Shipping, Split,
};

const TOKEN: &str = "0123456789abcdef-secret";

fn datagen(rows: u64) -> DatagenSource {
    DatagenSource::new(DatagenConfig {
        total_rows: rows,
        max_txn_rows: 6,
        ..DatagenConfig::default()
    })
    .expect("datagen")
}

fn key(capture: &str) -> ShipKey {
    ShipKey {
        tenant: "default".into(),
        changefeed: "cf".into(),
        epoch: 7,
        capture: capture.into(),
    }
}

/// One table's rows of one transaction, as a sink would be handed them.
type Rows = (u64, String, TableChanges);

/// Every row `source` yields until its end (by runs where it makes them),
/// and how many resolved events it gave.
async fn drain<S: Source>(source: &mut S) -> Result<(Vec<Rows>, usize), S::Error> {
    let mut rows = Vec::new();
    let mut resolved = 0;
    let push = |txn: sluice_core::Transaction, rows: &mut Vec<Rows>| {
        for t in txn.tables {
            if !t.is_empty() {
                rows.push((txn.commit_ts.get(), t.schema().qualified_name(), t));
            }
        }
    };
    loop {
        if let Some(run) = source.next_run(64, 1 << 20).await? {
            for txn in run.into_transactions() {
                push(txn, &mut rows);
            }
            continue;
        }
        match source.next_event().await? {
            SourceEvent::Transaction(txn) => push(txn, &mut rows),
            SourceEvent::Resolved(_) => resolved += 1,
            SourceEvent::Ddl(_) => {}
            SourceEvent::End => {
                assert!(
                    rows.windows(2).all(|w| w[0].0 <= w[1].0),
                    "rows out of commit-ts order"
                );
                // Within a transaction, tables come in the order the run that
                // carried it first touched them: compare in table order.
                rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
                return Ok((rows, resolved));
            }
        }
    }
}

/// A shipping service on a free local port, and a channel to it.
async fn serve(shipping: Shipping) -> Channel {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(
        Server::builder()
            .add_service(ShipService::new(shipping).into_server())
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Endpoint::from_shared(format!("http://{address}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect")
}

fn request(capture: &str, token: &str, window: u64) -> ShipRequest {
    ShipRequest {
        key: key(capture),
        token: token.into(),
        window,
        patience: Duration::from_secs(5),
    }
}

/// A served shipment with its receiver attached at the smallest window.
async fn attached() -> (Shipping, crate::OutboxHandle, ShippedSource) {
    let shipping = Shipping::default();
    let channel = serve(shipping.clone()).await;
    let outbox = shipping.open(key("b"), TOKEN.into()).expect("open");
    let shipped = ShippedSource::connect(channel, request("b", TOKEN, MIN_WINDOW))
        .await
        .expect("connect");
    (shipping, outbox, shipped)
}

#[tokio::test]
async fn frames_carry_every_row_schema_and_mark_back_unchanged() {
    let mut source = datagen(3_000);
    let (expected, _) = drain(&mut datagen(3_000)).await.expect("reference");
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new();
    let mut got = Vec::new();
    loop {
        let mut received = Vec::new();
        if let Some(run) = source.next_run(50, 1 << 20).await.expect("run") {
            let parts: Vec<_> = run.parts.iter().collect();
            encoder.run(&run.transactions, &parts);
        } else {
            match source.next_event().await.expect("event") {
                SourceEvent::Transaction(txn) => {
                    let tables: Vec<_> = txn.tables.iter().collect();
                    encoder.transaction(&txn, &tables);
                }
                SourceEvent::Resolved(ts) => encoder.resolved(ts.get()),
                SourceEvent::Ddl(ddl) => encoder.ddl(&ddl),
                SourceEvent::End => encoder.end(),
            }
        }
        decoder
            .decode(&encoder.take(), &mut received)
            .expect("decodes");
        let mut ended = false;
        for r in received {
            let txns = match r {
                Received::Run(run) => run.into_transactions(),
                Received::Event(SourceEvent::Transaction(t)) => vec![t],
                Received::Event(SourceEvent::End) => {
                    ended = true;
                    vec![]
                }
                Received::Event(_) => vec![],
            };
            for txn in txns {
                for t in txn.tables {
                    if !t.is_empty() {
                        got.push((txn.commit_ts.get(), t.schema().qualified_name(), t));
                    }
                }
            }
        }
        if ended {
            break;
        }
    }
    got.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    assert_eq!(got.len(), expected.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
        panic!(
            "row {i} differs from the source's: {:?}\nagainst {:?}",
            got[i], expected[i]
        );
    }
}

#[tokio::test]
async fn damaged_frames_are_refused_not_handed_on() {
    let mut source = datagen(200);
    let run = loop {
        if let Some(run) = source.next_run(50, 1 << 20).await.expect("run") {
            break run;
        }
        source.next_event().await.expect("event");
    };
    let mut encoder = Encoder::new();
    let parts: Vec<_> = run.parts.iter().collect();
    encoder.run(&run.transactions, &parts);
    let bytes = encoder.take();
    // Cut short: does not decode.
    let mut out = Vec::new();
    let cut = Decoder::new().decode(&bytes[..bytes.len() - 3], &mut out);
    assert!(matches!(cut, Err(ShipError::Malformed(_))), "{cut:?}");
    // Rows whose schema never came.
    let mut encoder = Encoder::new();
    encoder.run(&run.transactions, &parts);
    let mut first = Decoder::new();
    first.decode(&encoder.take(), &mut out).expect("whole");
    encoder.run(&run.transactions, &parts);
    let rows_only = encoder.take();
    let orphan = Decoder::new().decode(&rows_only, &mut Vec::new());
    assert!(
        matches!(&orphan, Err(ShipError::Malformed(m)) if m.contains("before its schema")),
        "{orphan:?}"
    );
    // Garbage.
    let garbage = Decoder::new().decode(&[0xff; 64], &mut Vec::new());
    assert!(
        matches!(garbage, Err(ShipError::Malformed(_))),
        "{garbage:?}"
    );
}

#[tokio::test]
async fn a_split_keeps_its_tables_and_ships_the_others_in_order_over_grpc() {
    let rows = 40_000;
    let (expected, _) = drain(&mut datagen(rows)).await.expect("reference");
    let schema = DatagenConfig::default().schema;
    let remote = format!("{schema}.orders");
    let shipping = Shipping::default();
    let channel = serve(shipping.clone()).await;
    let outbox = shipping.open(key("b"), TOKEN.into()).expect("open");
    let mut split = Split::new(datagen(rows), vec![(outbox, vec![remote.clone()])]);
    let receiver = tokio::spawn(async move {
        let mut shipped = ShippedSource::connect(channel, request("b", TOKEN, MIN_WINDOW))
            .await
            .expect("connect");
        let drained = drain(&mut shipped).await;
        (drained, shipped.bytes_received())
    });
    let (local, local_resolved) = drain(&mut split).await.expect("local");
    let ((shipped, shipped_resolved), bytes) = match receiver.await.expect("receiver") {
        (Ok(drained), bytes) => (drained, bytes),
        (Err(e), _) => panic!("receiver: {e}"),
    };
    let expected_local: Vec<_> = expected.iter().filter(|r| r.1 != remote).cloned().collect();
    let expected_shipped: Vec<_> = expected.iter().filter(|r| r.1 == remote).cloned().collect();
    assert!(!expected_local.is_empty() && !expected_shipped.is_empty());
    assert_eq!(
        (local.len(), shipped.len()),
        (expected_local.len(), expected_shipped.len())
    );
    assert!(local == expected_local, "local rows differ");
    assert!(shipped == expected_shipped, "shipped rows differ");
    assert_eq!(
        shipped_resolved, local_resolved,
        "every resolved ts goes to both"
    );
    assert!(
        bytes > MIN_WINDOW * 4,
        "{bytes} bytes: more than the window, so credit was renewed"
    );
    drop(split);
    assert!(shipping.is_empty(), "the outbox leaves with the run");
}

#[tokio::test]
async fn a_receiver_that_does_not_read_holds_the_sender_at_its_window() {
    let (shipping, outbox, shipped) = attached().await;
    let frame = 10_000usize;
    let sender = tokio::spawn(async move {
        for _ in 0..1_000 {
            if outbox.send(vec![0; frame], 0).await.is_err() {
                break;
            }
        }
        outbox
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!sender.is_finished(), "the sender waits for credit");
    // The receiver took nothing: at most a window (and one frame past it) went.
    let (sent, taken) = {
        // Dropping the receiver ends the sender with an error; read first.
        let found = shipping.len();
        assert_eq!(found, 1);
        drop(shipped);
        let outbox = sender.await.expect("sender");
        outbox.in_flight()
    };
    assert_eq!(taken, 0);
    assert!(
        sent >= MIN_WINDOW && sent < MIN_WINDOW + frame as u64,
        "{sent} bytes sent against a window of {MIN_WINDOW}"
    );
}

#[tokio::test]
async fn a_receiver_that_goes_away_fails_the_sender() {
    let (_shipping, outbox, shipped) = attached().await;
    outbox.send(vec![1; 100], 0).await.expect("first");
    drop(shipped);
    let mut failed = None;
    for _ in 0..100 {
        match outbox.send(vec![1; 100], 0).await {
            Ok(()) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(&failed, Some(ShipError::Lost(m)) if m.contains("closed its stream") || m.contains("broke")),
        "{failed:?}"
    );
}

#[tokio::test]
async fn a_wrong_secret_another_run_or_a_bad_window_is_refused() {
    let shipping = Shipping::new(Duration::from_millis(300));
    let channel = serve(shipping.clone()).await;
    let _outbox = shipping.open(key("b"), TOKEN.into()).expect("open");
    let mut wrong_secret = request("b", "0123456789abcdef-wrong!", MIN_WINDOW);
    wrong_secret.patience = Duration::from_millis(300);
    let wrong = ShippedSource::connect(channel.clone(), wrong_secret).await;
    // Answered as an unknown run is: nothing tells a caller without the
    // secret which runs exist.
    assert!(
        matches!(&wrong, Err(ShipError::Lost(m)) if m.contains("no shipment with that name and secret")),
        "{:?}",
        wrong.err()
    );
    let mut other_epoch = request("b", TOKEN, MIN_WINDOW);
    other_epoch.key.epoch = 8;
    other_epoch.patience = Duration::from_millis(300);
    let other = ShippedSource::connect(channel.clone(), other_epoch).await;
    assert!(
        matches!(&other, Err(ShipError::Lost(m)) if m.contains("no shipment")),
        "{:?}",
        other.err()
    );
    let small = ShippedSource::connect(channel.clone(), request("b", TOKEN, 1024)).await;
    assert!(
        matches!(&small, Err(ShipError::Refused(m)) if m.contains("window")),
        "{:?}",
        small.err()
    );
    let first = ShippedSource::connect(channel.clone(), request("b", TOKEN, MIN_WINDOW)).await;
    assert!(first.is_ok());
    let second = ShippedSource::connect(channel, request("b", TOKEN, MIN_WINDOW)).await;
    assert!(
        matches!(&second, Err(ShipError::Refused(m)) if m.contains("receiver already")),
        "{:?}",
        second.err()
    );
    assert!(matches!(
        shipping.open(key("b"), TOKEN.into()),
        Err(ShipError::Refused(_))
    ));
    assert!(matches!(
        shipping.open(key("c"), "short".into()),
        Err(ShipError::Refused(_))
    ));
}

#[tokio::test]
async fn a_receiver_that_never_comes_fails_the_sender_after_the_patience() {
    let shipping = Shipping::new(Duration::from_millis(200));
    let outbox = shipping.open(key("b"), TOKEN.into()).expect("open");
    let e = outbox.send(vec![0; 10], 0).await.expect_err("nobody came");
    assert!(
        matches!(&e, ShipError::Lost(m) if m.contains("did not come")),
        "{e}"
    );
}

#[tokio::test]
async fn what_the_receiver_made_durable_reaches_the_reader() {
    let (_shipping, outbox, shipped) = attached().await;
    let mut durable = outbox.durable();
    let reporter = shipped.flush_reporter();
    assert!(reporter.report(42));
    assert!(reporter.report(41)); // an older report never moves it back
    assert!(reporter.report(40));
    assert!(reporter.report_saved(30));
    tokio::time::timeout(Duration::from_secs(5), durable.wait_for(|d| *d == (42, 30)))
        .await
        .expect("reported in time")
        .expect("open");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*outbox.durable().borrow(), (42, 30));
}

/// A source that yields a script, then its end.
struct Script(std::collections::VecDeque<SourceEvent>);

impl Source for Script {
    type Error = std::convert::Infallible;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        Ok(self.0.pop_front().unwrap_or(SourceEvent::End))
    }

    fn resume(&mut self, _from: &sluice_core::Checkpoint) -> Result<(), sluice_core::ResumeError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_large_transactions_parts_and_flags_reach_the_receiver_as_read_and_a_database_ddl_is_a_barrier()
 {
    use sluice_core::{
        Column, ColumnType, CommitTs, DdlEvent, FLAG_NO_FK_CHECKS, Op, ResolvedTs, TableSchema,
        Transaction, Value,
    };
    let column = |name: &str, ty| Column {
        name: name.into(),
        ty,
        sql_type: String::new(),
        nullable: true,
        key: false,
    };
    let schema = std::sync::Arc::new(TableSchema {
        table_id: 1,
        version: 1,
        schema_name: "s".into(),
        table_name: "t".into(),
        columns: vec![
            column("id", ColumnType::Int),
            column("name", ColumnType::Text),
        ],
    });
    let row = |id: i64| [Value::Int(id), Value::Bytes(format!("n{id}").into_bytes())];
    // Part one of transaction 10: three rows, the second under
    // foreign_key_checks=0 (its flags stop short of the third row).
    let mut first = Transaction::new(CommitTs::new(10));
    first.more = true;
    let t = first.table(&schema);
    t.push_values(Op::Insert, None, Some(&row(1)));
    t.push_values(Op::Insert, None, Some(&row(2)));
    t.flag_rows_from(1, FLAG_NO_FK_CHECKS);
    t.push_values(Op::Insert, None, Some(&row(3)));
    assert_eq!(t.flags().len(), 2, "the flags stop short of the rows");
    let mut last = Transaction::new(CommitTs::new(10));
    last.table(&schema)
        .push_values(Op::Insert, None, Some(&row(4)));
    let drop_database = DdlEvent {
        commit_ts: CommitTs::new(11),
        kind: "drop database".into(),
        schema_name: "s".into(),
        ..DdlEvent::default()
    };
    let mut after = Transaction::new(CommitTs::new(12));
    after
        .table(&schema)
        .push_values(Op::Insert, None, Some(&row(5)));
    let script = Script(
        [
            SourceEvent::Transaction(first),
            SourceEvent::Transaction(last),
            SourceEvent::Resolved(ResolvedTs::new(10)),
            SourceEvent::Ddl(drop_database.clone()),
            SourceEvent::Transaction(after),
        ]
        .into(),
    );
    let (shipping, outbox, mut shipped) = attached().await;
    let (applied_tx, applied) = tokio::sync::watch::channel(0);
    let mut split = Split::new(script, vec![(outbox, vec!["s.t".into()])]).with_applied(applied);
    let mut kept = Vec::new();
    loop {
        let event = split.next_event().await.expect("split");
        let end = matches!(event, SourceEvent::End);
        let ddl = matches!(event, SourceEvent::Ddl(_));
        kept.push(event);
        if ddl {
            // Kept here (it concerns this capture's tables and the
            // receiver's): nothing more goes until the pipeline applied it.
            let held = tokio::time::timeout(Duration::from_millis(300), split.next_event()).await;
            assert!(held.is_err(), "shipped on before the DDL was applied");
            assert_eq!(
                *split.across().borrow(),
                11,
                "the pipeline is told it is across"
            );
            applied_tx.send_replace(11);
        }
        if end {
            break;
        }
    }
    // What the receiver gets, asked as the pipeline asks: a run first.
    let mut got = Vec::new();
    loop {
        if let Some(run) = shipped.next_run(64, 1 << 20).await.expect("run") {
            got.push(format!("run of {}", run.len()));
            continue;
        }
        match shipped.next_event().await.expect("event") {
            SourceEvent::Transaction(t) => {
                let c = &t.tables[0];
                let flags: Vec<u8> = (0..c.len()).map(|i| c.flag(i)).collect();
                got.push(format!(
                    "txn {} more {} rows {} flags {flags:?}",
                    t.commit_ts.get(),
                    t.more,
                    c.len()
                ));
            }
            SourceEvent::Resolved(r) => got.push(format!("resolved {}", r.get())),
            SourceEvent::Ddl(d) => got.push(format!("ddl {} {}", d.kind, d.schema_name)),
            SourceEvent::End => break,
        }
    }
    assert_eq!(
        got,
        [
            format!("txn 10 more true rows 3 flags [0, {FLAG_NO_FK_CHECKS}, 0]"),
            "txn 10 more false rows 1 flags [0]".to_string(),
            "resolved 10".into(),
            // Below the DDL, shipped; the DDL is not the receiver's to apply.
            "resolved 10".into(),
            "run of 1".into(),
        ]
    );
    // The reader kept no rows, and the statement about the database too.
    assert!(kept.iter().all(|e| match e {
        SourceEvent::Transaction(t) => t.tables.is_empty(),
        _ => true,
    }));
    assert!(
        kept.iter()
            .any(|e| matches!(e, SourceEvent::Ddl(d) if *d == drop_database))
    );
    drop(split);
    assert!(shipping.is_empty());
}

#[tokio::test]
async fn an_outbox_opened_after_a_log_ships_only_what_the_log_has() {
    let shipping = Shipping::default();
    let channel = serve(shipping.clone()).await;
    let (logged, durable) = tokio::sync::watch::channel(5u64);
    let outbox = shipping
        .open_after_log(key("b"), TOKEN.into(), durable)
        .expect("open");
    let mut shipped = ShippedSource::connect(channel, request("b", TOKEN, MIN_WINDOW))
        .await
        .expect("connect");
    let mut encoder = Encoder::new();
    for ts in [10, 20] {
        encoder.resolved(ts);
        let through = encoder.through();
        assert_eq!(through, ts);
        outbox.send(encoder.take(), through).await.expect("sent");
    }
    // Sent, and held: the log is durable through 5 only.
    assert!(outbox.in_flight().0 > 0);
    let held = tokio::time::timeout(Duration::from_millis(300), shipped.next_event()).await;
    assert!(held.is_err(), "a frame above the log went: {held:?}");
    // The log has 10 (not 20): the first goes, the second waits.
    logged.send_replace(12);
    let first = tokio::time::timeout(Duration::from_secs(5), shipped.next_event())
        .await
        .expect("released")
        .expect("an event");
    assert!(
        matches!(first, SourceEvent::Resolved(ts) if ts.get() == 10),
        "{first:?}"
    );
    let held = tokio::time::timeout(Duration::from_millis(300), shipped.next_event()).await;
    assert!(held.is_err(), "a frame above the log went: {held:?}");
    // The run's log ends below 20: that frame never goes, the stream fails.
    drop(logged);
    let ended = tokio::time::timeout(Duration::from_secs(5), shipped.next_event())
        .await
        .expect("ended");
    assert!(
        matches!(&ended, Err(ShipError::Lost(m)) if m.contains("redo log")),
        "{ended:?}"
    );
}
