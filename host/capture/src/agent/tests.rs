//! The agent against an embedded meta store, without a process: assignments
//! written to the store start work that reports in its task position.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::ServerLimits;
use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::{Compare, EmbeddedMetaStore, MetaStore, Op, Revision, Txn, keys};
use sluice_owner::{ChangefeedId, ChangefeedInfo, PluginId, PluginRef};
use sluice_protocol::{
    Assignment, Desired, Epoch, Receiver, ShipRole, Shipment, Tables, TaskPosition, TaskState,
};
use sluice_registry::PluginRegistry;
use sluice_runtime::{PluginKind, PluginRuntime, RuntimeConfig};

use super::Agent;
use crate::{Capture, Ctx};

const START: u64 = 1000;

struct Fixture {
    dir: tempfile::TempDir,
    store: Arc<dyn MetaStore>,
    capture: Arc<Capture>,
    registry: Arc<PluginRegistry>,
    guard: Compare,
    /// Capture c-1's shipments.
    shipping: sluice_ship::Shipping,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetaStore> = Arc::new(
        EmbeddedMetaStore::open(dir.path().join("meta.redb"))
            .await
            .unwrap(),
    );
    keys::ensure_layout(store.as_ref()).await.unwrap();
    let runtime = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("precompiled")),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let files = sluice_registry::PluginFiles::open(
        &sluice_redo::StorageUri::Local(dir.path().join("plugins")),
        &dir.path().join("plugin-cache"),
    )
    .await
    .unwrap();
    let registry = Arc::new(PluginRegistry::new(store.clone(), runtime, files, 64 << 20));
    let bytes = std::fs::read(sluice_tests::plugin_path("sink-blackhole")).unwrap();
    registry
        .upload("default", &sink(), PluginKind::Sink, &bytes)
        .await
        .unwrap();
    // The guard of an owner that holds: a key nobody deletes.
    store.put("/test/owner", b"1".to_vec(), None).await.unwrap();
    let created = store
        .get("/test/owner")
        .await
        .unwrap()
        .unwrap()
        .create_revision;
    let guard = Compare::create_revision("/test/owner", created);
    let shipping = sluice_ship::Shipping::default();
    let capture = new_capture(
        dir.path(),
        (&store, &registry, &guard),
        "c-1",
        shipping.clone(),
    );
    Fixture {
        dir,
        store,
        capture,
        registry,
        guard,
        shipping,
    }
}

impl Fixture {
    /// Another capture on the fixture's store.
    fn capture_named(&self, id: &str) -> Arc<Capture> {
        new_capture(
            self.dir.path(),
            (&self.store, &self.registry, &self.guard),
            id,
            sluice_ship::Shipping::default(),
        )
    }
}

/// A capture `id` on `store`, with its own data dir under `root`.
fn new_capture(
    root: &std::path::Path,
    (store, registry, guard): (&Arc<dyn MetaStore>, &Arc<PluginRegistry>, &Compare),
    id: &str,
    shipping: sluice_ship::Shipping,
) -> Arc<Capture> {
    let data_dir = root.join(id);
    {
        Arc::new(Capture::new(Arc::new(Ctx {
            store: store.clone(),
            registry: registry.clone(),
            redo_root: sluice_redo::StorageUri::Local(data_dir.join("redo")),
            data_dir,
            capture_id: id.into(),
            capture_guard: guard.clone(),
            fence: sluice_core::WriteFence::open(),
            limits: ServerLimits {
                max_call_timeout_ms: 600_000,
                max_host_call_timeout_ms: 600_000,
                max_resources: 65_536,
                max_tenant_instances: 1024,
            },
            stop_timeout: Duration::from_secs(10),
            reserved: crate::Reserved::default(),
            work: tokio::runtime::Handle::current(),
            shipping,
            peers: sluice_ship::Peers::plain(),
        })))
    }
}

fn sink() -> PluginId {
    PluginId::new("sink-blackhole", "1.0.0").unwrap()
}

/// Stores the info of changefeed `name` at `epoch`, reading `rows` rows (0: no
/// end) at `rate` rows/s (0: unpaced); returns the revision it landed at.
async fn store_info(f: &Fixture, name: &str, epoch: u64, rows: u64, rate: u64) -> Revision {
    store_info_with(f, name, epoch, rows, rate, false).await
}

/// [`store_info`], with a redo log (`[consistent]`) if `consistent`.
async fn store_info_with(
    f: &Fixture,
    name: &str,
    epoch: u64,
    rows: u64,
    rate: u64,
    consistent: bool,
) -> Revision {
    let mut info = ChangefeedInfo::new(
        ChangefeedId::new("default", name).unwrap(),
        sluice_config::ChangefeedConfig {
            source: sluice_config::SourceConfig::Datagen(sluice_config::DatagenConfig {
                total_rows: rows,
                rate,
                ..Default::default()
            }),
            filter: Default::default(),
            filters: Vec::new(),
            sink: PluginRef::new(sink()),
            pipeline: sluice_config::PipelineConfig::default(),
            validator: Default::default(),
            consistent: sluice_config::ConsistentConfig {
                level: if consistent {
                    sluice_config::ConsistentLevel::Eventual
                } else {
                    sluice_config::ConsistentLevel::None
                },
                ..Default::default()
            },
        },
        CommitTs::new(START),
    );
    info.epoch = Epoch(epoch);
    let key = keys::changefeed_info("default", name).unwrap();
    f.store.put(&key, info.encode(), None).await.unwrap()
}

async fn assign(f: &Fixture, name: &str, epoch: u64, revision: Revision, desired: Desired) {
    assign_version(f, name, 1, epoch, revision, desired).await
}

async fn assign_version(
    f: &Fixture,
    name: &str,
    version: u32,
    epoch: u64,
    revision: Revision,
    desired: Desired,
) {
    let a = Assignment {
        version,
        changefeed_epoch: Epoch(epoch),
        tables: Tables::All,
        checkpoint_ts: CheckpointTs::new(START),
        info_revision: revision,
        desired,
        shipment: None,
    };
    let key = keys::assignment("c-1", "default", name).unwrap();
    let put = Txn::new().and_then([Op::put(&key, keys::encode(&a).unwrap())]);
    assert!(f.store.txn(put).await.unwrap().succeeded);
}

async fn position(f: &Fixture, name: &str) -> Option<TaskPosition> {
    position_on(f, "c-1", name).await
}

async fn position_on(f: &Fixture, capture: &str, name: &str) -> Option<TaskPosition> {
    let key = keys::task_position("default", name, capture).unwrap();
    let kv = f.store.get(&key).await.unwrap()?;
    Some(keys::decode(&kv.key, &kv.value).unwrap())
}

/// Waits (at most 60 s) until `name`'s task position satisfies `done`.
async fn wait_for(f: &Fixture, name: &str, done: impl Fn(&TaskPosition) -> bool) -> TaskPosition {
    wait_for_on(f, "c-1", name, done).await
}

/// Waits (at most 60 s) until `name`'s task position on `capture` satisfies
/// `done`.
async fn wait_for_on(
    f: &Fixture,
    capture: &str,
    name: &str,
    done: impl Fn(&TaskPosition) -> bool,
) -> TaskPosition {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(p) = position_on(f, capture, name).await
            && done(&p)
        {
            return p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out; the position on {capture} is {:?}",
            position_on(f, capture, name).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_runs_and_reports_progress_and_its_end() {
    let f = fixture().await;
    let agent = Agent::start(f.capture.clone());
    let revision = store_info(&f, "orders", 1, 3000, 0).await;
    assign(&f, "orders", 1, revision, Desired::Run).await;
    let p = wait_for(&f, "orders", |p| p.state.is_terminal()).await;
    assert_eq!(p.state, TaskState::Finished);
    assert_eq!(p.changefeed_epoch, 1);
    assert_eq!(p.epoch, 1, "one run claimed the key");
    assert_eq!(p.counters.rows_read, 3000);
    assert_eq!(p.counters.rows_written, 3000);
    assert!(p.counters.bytes_written > 0);
    assert!(p.checkpoint_ts > START, "checkpoint {}", p.checkpoint_ts);
    assert!(p.resolved_ts >= p.checkpoint_ts);
    agent.stop(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_in_the_assignment_ends_the_work_stopped() {
    let f = fixture().await;
    let agent = Agent::start(f.capture.clone());
    let revision = store_info(&f, "orders", 1, 0, 5000).await;
    assign(&f, "orders", 1, revision, Desired::Run).await;
    let running = wait_for(&f, "orders", |p| p.counters.rows_written > 0).await;
    assert_eq!(running.state, TaskState::Running);
    assign(&f, "orders", 1, revision, Desired::Stop).await;
    let p = wait_for(&f, "orders", |p| p.state.is_terminal()).await;
    assert_eq!(p.state, TaskState::Stopped);
    assert!(p.counters.rows_written >= running.counters.rows_written);
    assert!(p.checkpoint_ts >= running.checkpoint_ts);
    assert!(p.checkpoint_ts > START);
    assert_eq!((p.epoch, p.changefeed_epoch), (1, 1));
    agent.stop(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_of_a_stale_epoch_is_ignored() {
    let f = fixture().await;
    let agent = Agent::start(f.capture.clone());
    // The stored info is at epoch 3: an assignment of epoch 2 is stale.
    let revision = store_info(&f, "orders", 3, 100, 0).await;
    assign(&f, "orders", 2, revision, Desired::Run).await;
    // An assignment a newer build wrote is not run either.
    let newer = store_info(&f, "events", 1, 100, 0).await;
    assign_version(&f, "events", 2, 1, newer, Desired::Run).await;
    // Another changefeed, assigned after it, runs: the agent saw both.
    let other = store_info(&f, "users", 1, 100, 0).await;
    assign(&f, "users", 1, other, Desired::Run).await;
    let p = wait_for(&f, "users", |p| p.state.is_terminal()).await;
    assert_eq!(
        (p.state, p.counters.rows_written),
        (TaskState::Finished, 100)
    );
    assert_eq!(
        position(&f, "orders").await,
        None,
        "the stale assignment ran"
    );
    // Its current epoch runs.
    assign(&f, "orders", 3, revision, Desired::Run).await;
    let p = wait_for(&f, "orders", |p| p.state.is_terminal()).await;
    assert_eq!((p.state, p.changefeed_epoch), (TaskState::Finished, 3));
    agent.stop(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_picks_up_its_assignments() {
    let f = fixture().await;
    // The same workload run straight through, for the final checkpoint.
    let straight = store_info(&f, "straight", 1, 12_000, 4000).await;
    let agent = Agent::start(f.capture.clone());
    assign(&f, "straight", 1, straight, Desired::Run).await;
    let whole = wait_for(&f, "straight", |p| p.state.is_terminal()).await;
    assert_eq!(whole.state, TaskState::Finished);

    let revision = store_info(&f, "orders", 1, 12_000, 4000).await;
    assign(&f, "orders", 1, revision, Desired::Run).await;
    let before = wait_for(&f, "orders", |p| {
        p.checkpoint_ts > START && p.counters.rows_written > 0
    })
    .await;
    // Killed: its processor is gone and reported nothing.
    agent.vanish().await;
    let crashed = position(&f, "orders").await.unwrap();
    assert_eq!((crashed.state, crashed.epoch), (TaskState::Running, 1));

    let agent = Agent::start(f.capture.clone());
    let p = wait_for(&f, "orders", |p| p.state.is_terminal()).await;
    assert_eq!(p.state, TaskState::Finished);
    assert_eq!(
        (p.epoch, p.changefeed_epoch),
        (2, 1),
        "a second run of the same epoch"
    );
    // It resumed from where the first run got to, not from the assignment's
    // checkpoint, and ended where the straight run did.
    assert!(p.checkpoint_ts >= before.checkpoint_ts);
    assert_eq!(p.checkpoint_ts, whole.checkpoint_ts);
    assert!(p.counters.rows_written >= 12_000, "{:?}", p.counters);
    agent.stop(false).await;
}

/// Runs changefeed `name` (`rows` datagen rows, a redo log if `consistent`)
/// split: capture c-1 reads the source and serves its shipments, c-2 runs
/// `shop.orders` from them. Returns both sides' final positions and the
/// rows of `shop.orders` in the workload.
async fn run_split(
    f: &Fixture,
    name: &str,
    rows: u64,
    consistent: bool,
) -> (TaskPosition, TaskPosition, u64) {
    use sluice_core::Source;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(sluice_ship::ShipService::new(f.shipping.clone()).into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let second = f.capture_named("c-2");
    let (reader, receiver) = (Agent::start(f.capture.clone()), Agent::start(second));
    let revision = store_info_with(f, name, 1, rows, 0, consistent).await;
    let shipped = "shop.orders".to_string();
    let token = "a-test-secret-of-the-shipment".to_string();
    let assignment = |tables, role| Assignment {
        version: sluice_protocol::ASSIGNMENT_VERSION,
        changefeed_epoch: Epoch(1),
        tables,
        checkpoint_ts: CheckpointTs::new(START),
        info_revision: revision,
        desired: Desired::Run,
        shipment: Some(Shipment {
            token: token.clone(),
            role,
        }),
    };
    let reads = assignment(
        Tables::All,
        ShipRole::Reads {
            receivers: vec![Receiver {
                capture: "c-2".into(),
                tables: vec![shipped.clone()],
            }],
        },
    );
    let receives = assignment(
        Tables::Only(vec![shipped.clone()]),
        ShipRole::Receives {
            reader: "c-1".into(),
            address,
        },
    );
    for (capture, a) in [("c-2", &receives), ("c-1", &reads)] {
        let key = keys::assignment(capture, "default", name).unwrap();
        f.store
            .put(&key, keys::encode(a).unwrap(), None)
            .await
            .unwrap();
    }
    let on_reader = wait_for_on(f, "c-1", name, |p| p.state.is_terminal()).await;
    let on_receiver = wait_for_on(f, "c-2", name, |p| p.state.is_terminal()).await;
    assert_eq!(on_reader.state, TaskState::Finished, "{on_reader:?}");
    assert_eq!(on_receiver.state, TaskState::Finished, "{on_receiver:?}");
    let mut generator = sluice_source::DatagenSource::new(sluice_config::DatagenConfig {
        total_rows: rows,
        ..Default::default()
    })
    .unwrap();
    let mut orders = 0;
    loop {
        match generator.next_event().await.unwrap() {
            sluice_core::SourceEvent::Transaction(t) => {
                orders += t
                    .tables
                    .iter()
                    .filter(|c| c.schema().qualified_name() == shipped)
                    .map(|c| c.len() as u64)
                    .sum::<u64>();
            }
            sluice_core::SourceEvent::End => break,
            _ => {}
        }
    }
    assert!(orders > 0 && orders < rows);
    reader.stop(false).await;
    receiver.stop(false).await;
    (on_reader, on_receiver, orders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changefeed_split_across_two_captures_runs_each_table_on_one() {
    let f = fixture().await;
    let rows = 3000;
    let (on_reader, on_receiver, orders) = run_split(&f, "split", rows, false).await;
    // What each sink got: exactly its tables' rows, every row once.
    assert_eq!(on_receiver.counters.rows_written, orders);
    assert_eq!(on_reader.counters.rows_written, rows - orders);
    // The reader's checkpoint (saved with its source position) never passes
    // what the receiver made durable.
    assert!(
        on_reader.checkpoint_ts <= on_receiver.checkpoint_ts,
        "reader {} receiver {}",
        on_reader.checkpoint_ts,
        on_receiver.checkpoint_ts
    );
    assert!(on_receiver.checkpoint_ts > START);
    assert!(f.shipping.is_empty(), "the shipment closed with the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changefeed_with_a_redo_log_split_across_two_captures_logs_every_table_once() {
    let f = fixture().await;
    let rows = 3000;
    let (on_reader, on_receiver, orders) = run_split(&f, "logged", rows, true).await;
    // Each sink got exactly its tables' rows, as without a log.
    assert_eq!(on_receiver.counters.rows_written, orders);
    assert_eq!(on_reader.counters.rows_written, rows - orders);
    // The reader's one log has every table's rows, each once; the receiver
    // wrote none of its own.
    let uri =
        sluice_redo::StorageUri::Local(f.dir.path().join("c-1").join("redo")).child("default");
    let storage = sluice_redo::Storage::open(&uri, "logged").await.unwrap();
    let log = sluice_redo::LogReader::open(storage).await.unwrap();
    let meta = log.listing().meta.unwrap();
    let mut logged: std::collections::BTreeMap<u32, u64> = Default::default();
    for file in log.files_for(sluice_redo::LogKind::Rows, sluice_redo::Meta::default()) {
        for record in log.read(file, meta.resolved_ts).await.unwrap().records {
            if let sluice_redo::Record::Rows { tables, .. } = record {
                for t in tables {
                    *logged.entry(t.table_id).or_default() += t.txn.len() as u64;
                }
            }
        }
    }
    assert_eq!(logged.values().sum::<u64>(), rows, "{logged:?}");
    assert!(
        logged.values().any(|&n| n == orders),
        "the shipped table's rows are in the log: {logged:?}, {orders} shipped"
    );
    assert!(
        !f.dir.path().join("c-2").join("redo").exists(),
        "the receiving capture wrote a log"
    );
    // No sink passed the log's resolved ts: every checkpoint is at or below it.
    assert!(on_receiver.checkpoint_ts > START);
    assert!(on_receiver.checkpoint_ts <= meta.resolved_ts, "{meta:?}");
    assert!(on_reader.checkpoint_ts <= meta.resolved_ts, "{meta:?}");
    assert!(f.shipping.is_empty(), "the shipment closed with the run");
}
