//! Property test: random sequences of puts, deletes, transactions, lease grants and
//! revocations and restarts give the same results, revisions, state and watch
//! events on `EmbeddedMetaStore` as on a small in-memory model of the semantics.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use sluice_meta::{
    Compare, EmbeddedMetaStore, KeyValue, LeaseId, MetaError, MetaStore, Op, OpResult, Revision,
    Txn, TxnResult, WatchEvent, WatchEventKind, WatchStream,
};

const KEYS: [&str; 5] = ["/a", "/a/b", "/a/c", "/b", "/b/a"];

#[derive(Debug, Clone)]
enum Cmp {
    Absent(usize),
    /// `None`: the key's current mod revision.
    ModRevision(usize, Option<u64>),
    CreateRevision(usize, Option<u64>),
    /// `None`: the key's current value.
    Value(usize, Option<u8>),
}

#[derive(Debug, Clone)]
enum MOp {
    /// Key, value, lease (an index into the leases granted so far).
    Put(usize, u8, Option<usize>),
    Delete(usize),
    Get(usize),
}

#[derive(Debug, Clone)]
enum Action {
    Put(usize, u8, Option<usize>),
    Delete(usize),
    Txn(Vec<Cmp>, Vec<MOp>, Vec<MOp>),
    Grant,
    Revoke(usize),
    /// Drop the store and open it again.
    Reopen,
}

fn key() -> impl Strategy<Value = usize> {
    0..KEYS.len()
}

fn lease() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![3 => Just(None), 1 => (0..4usize).prop_map(Some)]
}

fn cmp() -> impl Strategy<Value = Cmp> {
    prop_oneof![
        key().prop_map(Cmp::Absent),
        (key(), proptest::option::weighted(0.3, 0..6u64)).prop_map(|(k, r)| Cmp::ModRevision(k, r)),
        (key(), proptest::option::weighted(0.3, 0..6u64))
            .prop_map(|(k, r)| Cmp::CreateRevision(k, r)),
        (key(), proptest::option::weighted(0.5, 0..3u8)).prop_map(|(k, v)| Cmp::Value(k, v)),
    ]
}

fn mop() -> impl Strategy<Value = MOp> {
    prop_oneof![
        3 => (key(), 0..3u8, lease()).prop_map(|(k, v, l)| MOp::Put(k, v, l)),
        1 => key().prop_map(MOp::Delete),
        1 => key().prop_map(MOp::Get),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (key(), 0..3u8, lease()).prop_map(|(k, v, l)| Action::Put(k, v, l)),
        2 => key().prop_map(Action::Delete),
        4 => (
            proptest::collection::vec(cmp(), 0..3),
            proptest::collection::vec(mop(), 0..4),
            proptest::collection::vec(mop(), 0..3),
        )
            .prop_map(|(c, s, f)| Action::Txn(c, s, f)),
        1 => Just(Action::Grant),
        1 => (0..4usize).prop_map(Action::Revoke),
        1 => Just(Action::Reopen),
    ]
}

/// How a call ended, comparably.
#[derive(Debug, PartialEq)]
enum Outcome {
    Txn(TxnResult),
    Revision(Revision),
    Deleted(bool),
    Granted,
    Revoked,
    InvalidRequest,
    LeaseNotFound,
}

fn outcome<T>(result: Result<T, MetaError>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match result {
        Ok(value) => ok(value),
        Err(MetaError::InvalidRequest { .. }) => Outcome::InvalidRequest,
        Err(MetaError::LeaseNotFound { .. }) => Outcome::LeaseNotFound,
        Err(err) => panic!("unexpected error: {err}"),
    }
}

/// The semantics, written as plainly as possible.
#[derive(Default)]
struct Model {
    kvs: BTreeMap<String, KeyValue>,
    revision: Revision,
    /// Every lease the store granted, in grant order, and which are still live.
    granted: Vec<LeaseId>,
    live: BTreeSet<LeaseId>,
    /// Changes since the current watch started.
    events: Vec<WatchEvent>,
}

impl Model {
    fn lease(&self, index: Option<usize>) -> Option<LeaseId> {
        let i = index?;
        (!self.granted.is_empty()).then(|| self.granted[i % self.granted.len()])
    }

    fn compare(&self, cmp: &Cmp) -> Compare {
        let current = |k: usize| self.kvs.get(KEYS[k]);
        match *cmp {
            Cmp::Absent(k) => Compare::absent(KEYS[k]),
            Cmp::ModRevision(k, r) => Compare::mod_revision(
                KEYS[k],
                r.map_or_else(
                    || current(k).map_or(Revision::ZERO, |kv| kv.mod_revision),
                    Revision,
                ),
            ),
            Cmp::CreateRevision(k, r) => Compare::create_revision(
                KEYS[k],
                r.map_or_else(
                    || current(k).map_or(Revision::ZERO, |kv| kv.create_revision),
                    Revision,
                ),
            ),
            Cmp::Value(k, v) => Compare::value(
                KEYS[k],
                v.map_or_else(
                    || current(k).map_or(b"?".to_vec(), |kv| kv.value.clone()),
                    |v| vec![v],
                ),
            ),
        }
    }

    fn op(&self, op: &MOp) -> Op {
        match *op {
            MOp::Put(k, v, l) => Op::Put {
                key: KEYS[k].into(),
                value: vec![v],
                lease: self.lease(l),
            },
            MOp::Delete(k) => Op::delete(KEYS[k]),
            MOp::Get(k) => Op::get(KEYS[k]),
        }
    }

    fn txn(&mut self, txn: &Txn) -> Outcome {
        for branch in [&txn.success, &txn.failure] {
            let mut written = BTreeSet::new();
            for op in branch {
                if !matches!(op, Op::Get { .. }) && !written.insert(op.key()) {
                    return Outcome::InvalidRequest;
                }
            }
        }
        let succeeded = txn.compares.iter().all(|c| self.holds(c));
        let ops = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        for op in ops {
            if let Op::Put { lease: Some(l), .. } = op
                && !self.live.contains(l)
            {
                return Outcome::LeaseNotFound;
            }
        }
        let revision = self.revision.next();
        let mut changed = false;
        let mut results = Vec::new();
        for op in ops {
            match op {
                Op::Put { key, value, lease } => {
                    let create = self.kvs.get(key).map_or(revision, |kv| kv.create_revision);
                    let kv = KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: create,
                        mod_revision: revision,
                        lease: *lease,
                    };
                    self.kvs.insert(key.clone(), kv.clone());
                    self.events.push(WatchEvent {
                        kind: WatchEventKind::Put,
                        kv,
                        revision,
                    });
                    changed = true;
                    results.push(OpResult::Put);
                }
                Op::Delete { key } => {
                    let deleted = self.kvs.remove(key).is_some();
                    if deleted {
                        self.push_delete(key, revision);
                        changed = true;
                    }
                    results.push(OpResult::Delete { deleted });
                }
                Op::Get { key } => results.push(OpResult::Get(self.kvs.get(key).cloned())),
            }
        }
        if changed {
            self.revision = revision;
        }
        Outcome::Txn(TxnResult {
            succeeded,
            revision: self.revision,
            results,
        })
    }

    fn holds(&self, compare: &Compare) -> bool {
        let kv = self.kvs.get(compare.key());
        match compare {
            Compare::Absent { .. } => kv.is_none(),
            Compare::ModRevision { revision, .. } => match kv {
                Some(kv) => kv.mod_revision == *revision,
                None => *revision == Revision::ZERO,
            },
            Compare::CreateRevision { revision, .. } => match kv {
                Some(kv) => kv.create_revision == *revision,
                None => *revision == Revision::ZERO,
            },
            Compare::Value { value, .. } => kv.is_some_and(|kv| kv.value == *value),
        }
    }

    fn push_delete(&mut self, key: &str, revision: Revision) {
        self.events.push(WatchEvent {
            kind: WatchEventKind::Delete,
            kv: KeyValue {
                key: key.into(),
                value: Vec::new(),
                create_revision: Revision::ZERO,
                mod_revision: revision,
                lease: None,
            },
            revision,
        });
    }

    /// Delete, in one write and key order, the keys attached to leases `which` selects.
    fn delete_leased(&mut self, which: impl Fn(LeaseId) -> bool) {
        let doomed: Vec<String> = self
            .kvs
            .values()
            .filter(|kv| kv.lease.is_some_and(&which))
            .map(|kv| kv.key.clone())
            .collect();
        if doomed.is_empty() {
            return;
        }
        self.revision = self.revision.next();
        for key in doomed {
            self.kvs.remove(&key);
            self.push_delete(&key, self.revision);
        }
    }

    fn revoke(&mut self, lease: LeaseId) -> Outcome {
        if !self.live.remove(&lease) {
            return Outcome::LeaseNotFound;
        }
        self.delete_leased(|l| l == lease);
        Outcome::Revoked
    }
}

struct Session {
    store: EmbeddedMetaStore,
    watch: WatchStream,
}

async fn start(path: &std::path::Path) -> Session {
    let store = EmbeddedMetaStore::open(path).await.unwrap();
    let watch = store.watch("", None).await.unwrap();
    Session { store, watch }
}

/// The watch saw exactly the model's changes, and the state is the model's.
async fn check(session: &mut Session, model: &mut Model) {
    for (i, expected) in std::mem::take(&mut model.events).into_iter().enumerate() {
        let got = tokio::time::timeout(Duration::from_secs(5), session.watch.next())
            .await
            .unwrap_or_else(|_| panic!("watch event {i} did not come"))
            .expect("the watch is open")
            .expect("the watch is healthy");
        assert_eq!(got, expected, "watch event {i}");
    }
    let listing = session.store.list("").await.unwrap();
    assert_eq!(listing.revision, model.revision);
    assert_eq!(listing.kvs, model.kvs.values().cloned().collect::<Vec<_>>());
}

async fn run(actions: Vec<Action>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let mut model = Model::default();
    let mut session = start(&path).await;
    for action in actions {
        let s = &session.store;
        let (got, expected) = match &action {
            Action::Put(k, v, l) => {
                let lease = model.lease(*l);
                let txn = Txn::new().and_then([Op::Put {
                    key: KEYS[*k].into(),
                    value: vec![*v],
                    lease,
                }]);
                let expected = match model.txn(&txn) {
                    Outcome::Txn(r) => Outcome::Revision(r.revision),
                    other => other,
                };
                let got = outcome(s.put(KEYS[*k], vec![*v], lease).await, Outcome::Revision);
                (got, expected)
            }
            Action::Delete(k) => {
                let expected = match model.txn(&Txn::new().and_then([Op::delete(KEYS[*k])])) {
                    Outcome::Txn(r) => {
                        Outcome::Deleted(r.results[0] == OpResult::Delete { deleted: true })
                    }
                    other => other,
                };
                (
                    outcome(s.delete(KEYS[*k]).await, Outcome::Deleted),
                    expected,
                )
            }
            Action::Txn(compares, success, failure) => {
                let txn = Txn {
                    compares: compares.iter().map(|c| model.compare(c)).collect(),
                    success: success.iter().map(|o| model.op(o)).collect(),
                    failure: failure.iter().map(|o| model.op(o)).collect(),
                };
                let expected = model.txn(&txn);
                (outcome(s.txn(txn).await, Outcome::Txn), expected)
            }
            Action::Grant => {
                let lease = s.grant_lease(Duration::from_secs(3600)).await.unwrap();
                assert!(!model.granted.contains(&lease.id), "lease ids are unique");
                model.granted.push(lease.id);
                model.live.insert(lease.id);
                (Outcome::Granted, Outcome::Granted)
            }
            Action::Revoke(i) => match model.lease(Some(*i)) {
                Some(lease) => {
                    let expected = model.revoke(lease);
                    (
                        outcome(s.revoke(lease).await, |()| Outcome::Revoked),
                        expected,
                    )
                }
                None => continue,
            },
            Action::Reopen => {
                check(&mut session, &mut model).await;
                drop(session);
                model.live.clear();
                model.delete_leased(|_| true);
                // The deletes on open happen before the new watch starts.
                model.events.clear();
                session = start(&path).await;
                check(&mut session, &mut model).await;
                continue;
            }
        };
        assert_eq!(got, expected, "after {action:?}");
        assert_eq!(session.store.revision().await.unwrap(), model.revision);
    }
    check(&mut session, &mut model).await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn embedded_store_matches_the_model(actions in proptest::collection::vec(action(), 1..40)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(actions));
    }
}
