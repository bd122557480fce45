//! The behaviour every [`MetaStore`] must show, as a test suite shared by all
//! implementations (feature `testing`).
//!
//! An implementation provides a [`Harness`] and expands
//! [`conformance_tests!`](crate::conformance_tests) in one of its test files:
//!
//! ```ignore
//! sluice_meta::conformance_tests!(MyHarness::new().await);
//! ```
//!
//! That generates one `#[tokio::test]` per check below, so the test crate needs
//! `tokio` with the `macros` and `rt-multi-thread` features. Every check talks to the
//! store as an `Arc<dyn MetaStore>`, panics with a message on the first difference,
//! and asserts exact values: revisions, kinds and order of events, errors.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep, timeout};

use crate::error::MetaError;
use crate::keys;
use crate::store::{KeyValue, LeaseId, MAX_REQUEST_BYTES, MAX_TXN_OPS, MetaStore, Revision};
use crate::txn::{Compare, Op, OpResult, Txn};
use crate::watch::{WatchEvent, WatchEventKind, WatchStream};

/// How an implementation is set up for the suite.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The store under test.
    type Store: MetaStore + 'static;

    /// A new, empty store that only the calling check uses: checks assert exact
    /// revisions and listings, so nothing else may write to it meanwhile.
    async fn store(&self) -> Arc<Self::Store>;

    /// A short lease TTL the store honours (etcd: a few seconds). Lease checks
    /// take about four times this long.
    fn lease_ttl(&self) -> Duration;

    /// Make the changes at or below `revision` unavailable to watches. With etcd
    /// that is `compact(revision + 1)`: etcd still serves watches that start at
    /// its compaction revision.
    async fn compact(&self, store: &Self::Store, revision: Revision);
}

/// Expands to one `#[tokio::test]` per conformance check, each calling
/// `crate::conformance::<check>(&$harness)`. `$harness` is evaluated once per
/// test, inside the test's async body (so it may `.await`).
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(@tests $harness;
            put_get_and_revisions,
            delete_removes_a_key_once,
            list_uses_exact_byte_prefixes_in_key_order,
            txn_runs_the_branch_its_compares_choose,
            concurrent_compare_and_swap_has_exactly_one_winner,
            txn_ops_apply_in_order_as_one_write,
            invalid_requests_are_refused_and_change_nothing,
            lease_keys_are_deleted_when_the_lease_expires,
            keep_alive_keeps_a_lease_and_its_keys,
            revoke_deletes_exactly_the_keys_still_on_the_lease,
            unknown_leases_are_refused,
            watch_delivers_changes_under_its_prefix_in_order,
            watch_resumes_after_a_revision,
            watch_of_compacted_revisions_fails,
            layout_version_is_written_once_and_checked,
        );
    };
    (@tests $harness:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let harness = $harness;
                $crate::conformance::$check(&harness).await;
            }
        )*
    };
}

/// How long a check waits for an event that must come.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

async fn store<H: Harness>(h: &H) -> Arc<dyn MetaStore> {
    let store: Arc<dyn MetaStore> = h.store().await;
    let listing = store.list("").await.expect("list a new store");
    assert!(
        listing.kvs.is_empty(),
        "the harness must give an empty store, found {:?}",
        listing.kvs
    );
    store
}

async fn next_event(stream: &mut WatchStream) -> WatchEvent {
    match timeout(EVENT_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(err))) => panic!("the watch failed: {err}"),
        Ok(None) => panic!("the watch ended"),
        Err(_) => panic!("no watch event within {EVENT_TIMEOUT:?}"),
    }
}

async fn next_events(stream: &mut WatchStream, n: usize) -> Vec<WatchEvent> {
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        events.push(next_event(stream).await);
    }
    events
}

fn kv(key: &str, value: &[u8], create: Revision, modified: Revision) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.to_vec(),
        create_revision: create,
        mod_revision: modified,
        lease: None,
    }
}

fn put_event(kv: KeyValue) -> WatchEvent {
    WatchEvent {
        kind: WatchEventKind::Put,
        revision: kv.mod_revision,
        kv,
    }
}

fn delete_event(key: &str, revision: Revision) -> WatchEvent {
    WatchEvent {
        kind: WatchEventKind::Delete,
        kv: KeyValue {
            key: key.into(),
            value: Vec::new(),
            create_revision: Revision::ZERO,
            mod_revision: revision,
            lease: None,
        },
        revision,
    }
}

fn keys_of(kvs: &[KeyValue]) -> Vec<&str> {
    kvs.iter().map(|kv| kv.key.as_str()).collect()
}

/// Wait until `key` is gone; panics after `limit`.
async fn wait_until_deleted(store: &dyn MetaStore, key: &str, limit: Duration) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if store.get(key).await.expect("get").is_none() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{key} still exists {limit:?} after its lease should have expired"
        );
        sleep(Duration::from_millis(25)).await;
    }
}

/// A put is one write: it returns the next revision, sets the create revision
/// once and the mod revision every time; reads do not move the revision.
pub async fn put_get_and_revisions<H: Harness>(h: &H) {
    let s = store(h).await;
    let r0 = s.revision().await.unwrap();
    let r1 = s.put("/t/a", b"1".to_vec(), None).await.unwrap();
    assert_eq!(r1, r0.next(), "a put is one write");
    assert_eq!(s.get("/t/a").await.unwrap(), Some(kv("/t/a", b"1", r1, r1)));
    let r2 = s.put("/t/a", b"2".to_vec(), None).await.unwrap();
    assert_eq!(r2, r1.next());
    assert_eq!(
        s.get("/t/a").await.unwrap(),
        Some(kv("/t/a", b"2", r1, r2)),
        "an overwrite keeps the create revision"
    );
    let r3 = s.put("/t/b", Vec::new(), None).await.unwrap();
    assert_eq!(r3, r2.next());
    assert_eq!(
        s.get("/t/b").await.unwrap(),
        Some(kv("/t/b", b"", r3, r3)),
        "an empty value is a value"
    );
    assert_eq!(s.get("/t/missing").await.unwrap(), None);
    assert_eq!(s.list("/t/").await.unwrap().revision, r3);
    assert_eq!(s.revision().await.unwrap(), r3, "reads are not writes");
}

/// Deleting an existing key is a write; deleting a missing key is not. A key put
/// again after a delete starts a new life (new create revision).
pub async fn delete_removes_a_key_once<H: Harness>(h: &H) {
    let s = store(h).await;
    let r1 = s.put("/t/a", b"1".to_vec(), None).await.unwrap();
    assert!(s.delete("/t/a").await.unwrap(), "the key existed");
    let r2 = s.revision().await.unwrap();
    assert_eq!(r2, r1.next(), "a delete is one write");
    assert_eq!(s.get("/t/a").await.unwrap(), None);
    assert!(!s.delete("/t/a").await.unwrap(), "the key is gone");
    assert_eq!(
        s.revision().await.unwrap(),
        r2,
        "deleting nothing is not a write"
    );
    let r3 = s.put("/t/a", b"again".to_vec(), None).await.unwrap();
    assert_eq!(r3, r2.next());
    assert_eq!(
        s.get("/t/a").await.unwrap(),
        Some(kv("/t/a", b"again", r3, r3))
    );
}

/// `list(prefix)` returns exactly the keys that start with `prefix`, byte-wise,
/// sorted by bytes, with the revision it read at.
pub async fn list_uses_exact_byte_prefixes_in_key_order<H: Harness>(h: &H) {
    let s = store(h).await;
    let all = [
        "/a",
        "/a/b",
        "/a/b/c",
        "/a/bc",
        "/a/c",
        "/a/z",
        "/a/\u{e9}",
        "/ab",
        "/b",
    ];
    // Written out of order.
    let mut last = Revision::ZERO;
    for key in [
        "/a/z",
        "/b",
        "/a/bc",
        "/a",
        "/a/\u{e9}",
        "/a/b/c",
        "/ab",
        "/a/c",
        "/a/b",
    ] {
        last = s.put(key, key.as_bytes().to_vec(), None).await.unwrap();
    }
    let list = |prefix: &'static str| {
        let s = s.clone();
        async move { s.list(prefix).await.unwrap() }
    };
    assert_eq!(
        keys_of(&list("/a/bc").await.kvs),
        ["/a/bc"],
        "/a/b is not under /a/bc"
    );
    assert_eq!(
        keys_of(&list("/a/b").await.kvs),
        ["/a/b", "/a/b/c", "/a/bc"]
    );
    assert_eq!(keys_of(&list("/a/b/").await.kvs), ["/a/b/c"]);
    assert_eq!(
        keys_of(&list("/a/").await.kvs),
        ["/a/b", "/a/b/c", "/a/bc", "/a/c", "/a/z", "/a/\u{e9}"],
        "sorted by bytes: 'z' (0x7a) before '\u{e9}' (0xc3 0xa9)"
    );
    assert_eq!(
        keys_of(&list("/a").await.kvs),
        [
            "/a",
            "/a/b",
            "/a/b/c",
            "/a/bc",
            "/a/c",
            "/a/z",
            "/a/\u{e9}",
            "/ab"
        ]
    );
    let everything = list("").await;
    assert_eq!(keys_of(&everything.kvs), all);
    assert_eq!(everything.revision, last);
    let one = &list("/a/c").await.kvs[0];
    assert_eq!(one.value, b"/a/c");
    assert_eq!(one.mod_revision, one.create_revision);
    let none = list("/c").await;
    assert!(none.kvs.is_empty());
    assert_eq!(none.revision, last);
}

/// Compares choose the branch; only the chosen branch's ops run, as one write.
pub async fn txn_runs_the_branch_its_compares_choose<H: Harness>(h: &H) {
    let s = store(h).await;
    let k = "/t/k";
    let r1 = s.put(k, b"v1".to_vec(), None).await.unwrap();
    let cas = |expected: Revision| {
        Txn::new()
            .when([Compare::mod_revision(k, expected)])
            .and_then([Op::put(k, "v2"), Op::get(k)])
            .or_else([Op::get(k)])
    };

    let won = s.txn(cas(r1)).await.unwrap();
    let r2 = r1.next();
    assert!(won.succeeded, "the mod revision matched");
    assert_eq!(won.revision, r2);
    assert_eq!(
        won.results,
        [OpResult::Put, OpResult::Get(Some(kv(k, b"v2", r1, r2)))]
    );

    let lost = s.txn(cas(r1)).await.unwrap();
    assert!(!lost.succeeded, "the mod revision is stale");
    assert_eq!(lost.revision, r2, "the failure branch only read");
    assert_eq!(lost.results, [OpResult::Get(Some(kv(k, b"v2", r1, r2)))]);
    assert_eq!(s.get(k).await.unwrap().unwrap().value, b"v2");

    // Absent.
    let txn = |compares: Vec<Compare>, key: &str| {
        Txn::new().when(compares).and_then([Op::put(key, "new")])
    };
    let r = s.txn(txn(vec![Compare::absent(k)], k)).await.unwrap();
    assert!(!r.succeeded && r.results.is_empty() && r.revision == r2);
    let r = s
        .txn(txn(vec![Compare::absent("/t/n")], "/t/n"))
        .await
        .unwrap();
    let r3 = r2.next();
    assert!(r.succeeded && r.revision == r3);
    // A missing key's mod and create revisions are zero.
    let r = s
        .txn(txn(
            vec![Compare::mod_revision("/t/m", Revision::ZERO)],
            "/t/m",
        ))
        .await
        .unwrap();
    let r4 = r3.next();
    assert!(r.succeeded && r.revision == r4);
    let r = s
        .txn(txn(
            vec![Compare::create_revision("/t/o", Revision::ZERO)],
            "/t/o",
        ))
        .await
        .unwrap();
    let r5 = r4.next();
    assert!(r.succeeded && r.revision == r5);

    // Value.
    let del = |compares: Vec<Compare>| Txn::new().when(compares).and_then([Op::delete(k)]);
    let r = s.txn(del(vec![Compare::value(k, "v1")])).await.unwrap();
    assert!(!r.succeeded && r.revision == r5, "the value is v2");
    let r = s.txn(del(vec![Compare::value(k, "v2")])).await.unwrap();
    let r6 = r5.next();
    assert!(r.succeeded && r.revision == r6);
    assert_eq!(r.results, [OpResult::Delete { deleted: true }]);
    let r = s.txn(del(vec![Compare::value(k, "")])).await.unwrap();
    assert!(!r.succeeded, "a value compare fails on a missing key");

    // Every compare must hold.
    let both = |create: Revision| {
        Txn::new()
            .when([
                Compare::value("/t/n", "new"),
                Compare::create_revision("/t/n", create),
            ])
            .and_then([Op::get("/t/n")])
            .or_else([Op::put("/t/n", "else")])
    };
    let r = s.txn(both(r3)).await.unwrap();
    assert!(r.succeeded && r.revision == r6);
    assert_eq!(r.gets().next(), Some(Some(&kv("/t/n", b"new", r3, r3))));
    let r = s.txn(both(r1)).await.unwrap();
    let r7 = r6.next();
    assert!(!r.succeeded && r.revision == r7, "the failure branch wrote");
    assert_eq!(
        s.get("/t/n").await.unwrap(),
        Some(kv("/t/n", b"else", r3, r7))
    );
}

/// Eight transactions race to swap the same revision: exactly one wins.
pub async fn concurrent_compare_and_swap_has_exactly_one_winner<H: Harness>(h: &H) {
    let s = store(h).await;
    let k = "/t/owner";
    let r = s.put(k, b"start".to_vec(), None).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let txn = Txn::new()
                .when([Compare::mod_revision(k, r)])
                .and_then([Op::put(k, format!("task {i}"))]);
            (i, s.txn(txn).await.unwrap())
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (i, result) = task.await.unwrap();
        if result.succeeded {
            assert_eq!(result.revision, r.next());
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let now = s.get(k).await.unwrap().unwrap();
    assert_eq!(now.value, format!("task {}", winners[0]).into_bytes());
    assert_eq!(now.mod_revision, r.next());
    assert_eq!(
        s.revision().await.unwrap(),
        r.next(),
        "the losers wrote nothing"
    );
}

/// The ops of a branch run in order (a get sees the puts before it) and share
/// one revision; a branch that changes nothing is not a write.
pub async fn txn_ops_apply_in_order_as_one_write<H: Harness>(h: &H) {
    let s = store(h).await;
    let r1 = s.put("/t/c", b"c".to_vec(), None).await.unwrap();
    let txn = Txn::new().and_then([
        Op::put("/t/a", "a"),
        Op::get("/t/a"),
        Op::delete("/t/c"),
        Op::get("/t/c"),
        Op::delete("/t/missing"),
        Op::put("/t/b", "b"),
    ]);
    let r = s.txn(txn).await.unwrap();
    let r2 = r1.next();
    assert!(r.succeeded, "no compares always succeed");
    assert_eq!(r.revision, r2, "one write");
    assert_eq!(
        r.results,
        [
            OpResult::Put,
            OpResult::Get(Some(kv("/t/a", b"a", r2, r2))),
            OpResult::Delete { deleted: true },
            OpResult::Get(None),
            OpResult::Delete { deleted: false },
            OpResult::Put,
        ]
    );
    assert_eq!(
        s.list("/t/").await.unwrap().kvs,
        [kv("/t/a", b"a", r2, r2), kv("/t/b", b"b", r2, r2)]
    );
    let r = s
        .txn(Txn::new().and_then([Op::delete("/t/nope"), Op::get("/t/a")]))
        .await
        .unwrap();
    assert_eq!(r.revision, r2, "deleting nothing is not a write");
    assert_eq!(
        r.results,
        [
            OpResult::Delete { deleted: false },
            OpResult::Get(Some(kv("/t/a", b"a", r2, r2)))
        ]
    );
    let r = s.txn(Txn::new()).await.unwrap();
    assert!(r.succeeded && r.results.is_empty() && r.revision == r2);
}

/// Empty keys, oversized requests, too many ops, a key written twice in a branch
/// and a zero or endless TTL are refused, and nothing is applied.
pub async fn invalid_requests_are_refused_and_change_nothing<H: Harness>(h: &H) {
    let s = store(h).await;
    let r0 = s.put("/t/seed", Vec::new(), None).await.unwrap();
    let invalid_key = |r: Result<_, MetaError>| {
        assert!(
            matches!(r, Err(MetaError::InvalidKey { .. })),
            "expected InvalidKey, got {r:?}"
        )
    };
    let invalid = |r: Result<_, MetaError>| {
        assert!(
            matches!(r, Err(MetaError::InvalidRequest { .. })),
            "expected InvalidRequest, got {r:?}"
        )
    };
    invalid_key(s.put("", b"x".to_vec(), None).await.map(|_| ()));
    invalid_key(s.get("").await.map(|_| ()));
    invalid_key(s.delete("").await.map(|_| ()));
    invalid_key(
        s.txn(
            Txn::new()
                .when([Compare::absent("")])
                .and_then([Op::put("/t/a", "a")]),
        )
        .await
        .map(|_| ()),
    );
    invalid(
        s.txn(Txn::new().and_then([Op::put("/t/a", "1"), Op::put("/t/a", "2")]))
            .await
            .map(|_| ()),
    );
    invalid(
        s.txn(Txn::new().and_then([Op::put("/t/a", "1"), Op::delete("/t/a")]))
            .await
            .map(|_| ()),
    );
    let many = |n: usize| Txn::new().and_then((0..n).map(|i| Op::put(format!("/t/many/{i}"), "")));
    invalid(s.txn(many(MAX_TXN_OPS + 1)).await.map(|_| ()));
    let too_big = vec![0u8; MAX_REQUEST_BYTES];
    invalid(s.put("/t/big", too_big, None).await.map(|_| ()));
    invalid(s.grant_lease(Duration::ZERO).await.map(|_| ()));
    invalid(s.grant_lease(Duration::MAX).await.map(|_| ()));
    assert_eq!(s.revision().await.unwrap(), r0, "nothing was applied");
    assert_eq!(keys_of(&s.list("").await.unwrap().kvs), ["/t/seed"]);

    // The limits themselves are allowed.
    let r = s.txn(many(MAX_TXN_OPS)).await.unwrap();
    assert_eq!(r.revision, r0.next());
    let key = "/t/big";
    let r = s
        .put(key, vec![7u8; MAX_REQUEST_BYTES - key.len()], None)
        .await
        .unwrap();
    assert_eq!(r, r0.next().next());
    assert_eq!(
        s.get(key).await.unwrap().unwrap().value.len(),
        MAX_REQUEST_BYTES - key.len()
    );
}

/// Without keep-alives, a lease expires after its TTL (not before), its keys are
/// deleted (watchers see deletes), and it can no longer be used.
pub async fn lease_keys_are_deleted_when_the_lease_expires<H: Harness>(h: &H) {
    let s = store(h).await;
    let ttl = h.lease_ttl();
    let before_grant = Instant::now();
    let lease = s.grant_lease(ttl).await.unwrap();
    assert!(lease.ttl >= ttl, "granted {:?} for {ttl:?}", lease.ttl);
    let mut watch = s.watch("/t/", None).await.unwrap();
    let r1 = s
        .put("/t/leased", b"x".to_vec(), Some(lease.id))
        .await
        .unwrap();
    let r2 = s.put("/t/plain", b"y".to_vec(), None).await.unwrap();
    assert_eq!(
        s.get("/t/leased").await.unwrap().unwrap().lease,
        Some(lease.id)
    );

    let gone = wait_until_deleted(&*s, "/t/leased", lease.ttl + Duration::from_secs(10)).await;
    assert!(
        gone - before_grant >= lease.ttl,
        "the key was deleted {:?} after the grant, before the TTL of {:?}",
        gone - before_grant,
        lease.ttl
    );
    assert!(
        s.get("/t/plain").await.unwrap().is_some(),
        "keys without the lease stay"
    );
    let r3 = s.revision().await.unwrap();
    assert_eq!(r3, r2.next(), "the expiry is one write");
    let mut leased = kv("/t/leased", b"x", r1, r1);
    leased.lease = Some(lease.id);
    assert_eq!(
        next_events(&mut watch, 3).await,
        [
            put_event(leased),
            put_event(kv("/t/plain", b"y", r2, r2)),
            delete_event("/t/leased", r3)
        ]
    );

    let not_found = |r: Result<(), MetaError>| {
        assert!(
            matches!(r, Err(MetaError::LeaseNotFound { lease: id }) if id == lease.id),
            "expected LeaseNotFound, got {r:?}"
        )
    };
    not_found(s.keep_alive(lease.id).await.map(|_| ()));
    not_found(
        s.put("/t/again", b"z".to_vec(), Some(lease.id))
            .await
            .map(|_| ()),
    );
    not_found(s.revoke(lease.id).await);
    assert_eq!(s.get("/t/again").await.unwrap(), None);
}

/// Keep-alives well within the TTL keep a lease and its keys past several TTLs;
/// when they stop, the lease expires.
pub async fn keep_alive_keeps_a_lease_and_its_keys<H: Harness>(h: &H) {
    let s = store(h).await;
    let lease = s.grant_lease(h.lease_ttl()).await.unwrap();
    s.put("/t/leased", b"x".to_vec(), Some(lease.id))
        .await
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < lease.ttl * 3 {
        sleep(lease.ttl / 5).await;
        assert_eq!(s.keep_alive(lease.id).await.unwrap(), lease.ttl);
        assert!(
            s.get("/t/leased").await.unwrap().is_some(),
            "the key vanished {:?} after the grant although the lease was kept alive",
            start.elapsed()
        );
    }
    wait_until_deleted(&*s, "/t/leased", lease.ttl + Duration::from_secs(10)).await;
    assert!(matches!(
        s.keep_alive(lease.id).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
}

/// Revoking deletes, in one write and in key order, the keys still attached to the
/// lease; keys put again without it or with another lease, stay.
pub async fn revoke_deletes_exactly_the_keys_still_on_the_lease<H: Harness>(h: &H) {
    let s = store(h).await;
    let ttl = h.lease_ttl() * 20;
    let lease = s.grant_lease(ttl).await.unwrap();
    let other = s.grant_lease(ttl).await.unwrap();
    assert_ne!(lease.id, other.id);
    for key in ["/t/b", "/t/a", "/t/d", "/t/e", "/t/f"] {
        s.put(key, key.as_bytes().to_vec(), Some(lease.id))
            .await
            .unwrap();
    }
    s.put("/t/c", b"c".to_vec(), None).await.unwrap();
    s.put("/t/d", b"d".to_vec(), None).await.unwrap();
    s.delete("/t/e").await.unwrap();
    s.put("/t/f", b"f".to_vec(), Some(other.id)).await.unwrap();
    let before = s.revision().await.unwrap();
    let mut watch = s.watch("/t/", None).await.unwrap();

    s.revoke(lease.id).await.unwrap();
    let r = before.next();
    assert_eq!(s.revision().await.unwrap(), r, "a revocation is one write");
    assert_eq!(
        next_events(&mut watch, 2).await,
        [delete_event("/t/a", r), delete_event("/t/b", r)]
    );
    assert_eq!(
        keys_of(&s.list("/t/").await.unwrap().kvs),
        ["/t/c", "/t/d", "/t/f"]
    );
    assert_eq!(s.get("/t/f").await.unwrap().unwrap().lease, Some(other.id));
    assert!(matches!(
        s.revoke(lease.id).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
    assert!(matches!(
        s.keep_alive(lease.id).await,
        Err(MetaError::LeaseNotFound { .. })
    ));

    // A lease without keys revokes without a write.
    let empty = s.grant_lease(ttl).await.unwrap();
    s.revoke(empty.id).await.unwrap();
    assert_eq!(s.revision().await.unwrap(), r);
    s.revoke(other.id).await.unwrap();
    assert_eq!(keys_of(&s.list("/t/").await.unwrap().kvs), ["/t/c", "/t/d"]);
}

/// A put with a lease that does not exist fails, and so does a transaction whose
/// chosen branch has one: nothing of it is applied.
pub async fn unknown_leases_are_refused<H: Harness>(h: &H) {
    let s = store(h).await;
    let r0 = s.put("/t/seed", Vec::new(), None).await.unwrap();
    let unknown = LeaseId(0x7fff_0000_dead_beef);
    assert!(matches!(
        s.put("/t/a", b"x".to_vec(), Some(unknown)).await,
        Err(MetaError::LeaseNotFound { lease }) if lease == unknown
    ));
    let txn = Txn::new().when([Compare::absent("/t/a")]).and_then([
        Op::put("/t/b", "b"),
        Op::put_with_lease("/t/a", "a", unknown),
    ]);
    assert!(matches!(
        s.txn(txn).await,
        Err(MetaError::LeaseNotFound { .. })
    ));
    // The same lease in the branch that does not run is not looked at.
    let txn = Txn::new()
        .when([Compare::absent("/t/seed")])
        .and_then([Op::put_with_lease("/t/a", "a", unknown)])
        .or_else([Op::put("/t/b", "b")]);
    let r = s.txn(txn).await.unwrap();
    assert!(!r.succeeded);
    assert_eq!(r.revision, r0.next());
    assert_eq!(
        keys_of(&s.list("/t/").await.unwrap().kvs),
        ["/t/b", "/t/seed"]
    );
}

/// A watch without a start revision sees every later change under its prefix,
/// and only those, in order, with exact key values; one write's changes share its
/// revision and keep the write's order.
pub async fn watch_delivers_changes_under_its_prefix_in_order<H: Harness>(h: &H) {
    let s = store(h).await;
    s.put("/w/before", b"0".to_vec(), None).await.unwrap();
    let mut watch = s.watch("/w/", None).await.unwrap();
    let r1 = s.put("/w/a", b"1".to_vec(), None).await.unwrap();
    s.put("/x/a", b"-".to_vec(), None).await.unwrap();
    s.put("/w", b"-".to_vec(), None).await.unwrap();
    s.put("/wx/a", b"-".to_vec(), None).await.unwrap();
    let r5 = s.put("/w/b", b"2".to_vec(), None).await.unwrap();
    let r6 = s.put("/w/a", b"3".to_vec(), None).await.unwrap();
    assert!(s.delete("/w/b").await.unwrap());
    let r7 = r6.next();
    let txn = Txn::new().and_then([
        Op::put("/w/c", "c"),
        Op::put("/x/e", "-"),
        Op::put("/w/d", "d"),
        Op::delete("/w/a"),
        Op::get("/w/c"),
    ]);
    let r8 = s.txn(txn).await.unwrap().revision;
    assert_eq!(r8, r7.next());
    let r9 = s.put("/w/z", b"z".to_vec(), None).await.unwrap();
    assert_eq!(
        next_events(&mut watch, 8).await,
        [
            put_event(kv("/w/a", b"1", r1, r1)),
            put_event(kv("/w/b", b"2", r5, r5)),
            put_event(kv("/w/a", b"3", r1, r6)),
            delete_event("/w/b", r7),
            put_event(kv("/w/c", b"c", r8, r8)),
            put_event(kv("/w/d", b"d", r8, r8)),
            delete_event("/w/a", r8),
            put_event(kv("/w/z", b"z", r9, r9)),
        ]
    );
    // Two watches of the same prefix each see everything.
    let mut second = s.watch("/w/z", None).await.unwrap();
    let r10 = s.put("/w/z", b"zz".to_vec(), None).await.unwrap();
    let expected = put_event(kv("/w/z", b"zz", r9, r10));
    assert_eq!(next_event(&mut watch).await, expected);
    assert_eq!(next_event(&mut second).await, expected);
}

/// A watch after revision R first replays the kept changes above R, then goes on
/// live; list-then-watch at the listing's revision misses nothing and repeats
/// nothing; a future R skips the changes up to it.
pub async fn watch_resumes_after_a_revision<H: Harness>(h: &H) {
    let s = store(h).await;
    let mut revs = Vec::new();
    for i in 0..5 {
        s.put(&format!("/x/{i}"), Vec::new(), None).await.unwrap();
        revs.push(s.put(&format!("/w/{i}"), vec![i], None).await.unwrap());
    }
    let mut watch = s.watch("/w/", Some(revs[1])).await.unwrap();
    for (i, rev) in revs.iter().enumerate().skip(2) {
        assert_eq!(
            next_event(&mut watch).await,
            put_event(kv(&format!("/w/{i}"), &[i as u8], *rev, *rev))
        );
    }
    let listing = s.list("/w/").await.unwrap();
    assert_eq!(listing.kvs.len(), 5);
    let mut from_listing = s.watch("/w/", Some(listing.revision)).await.unwrap();
    let live = s.put("/w/live", b"l".to_vec(), None).await.unwrap();
    let expected = put_event(kv("/w/live", b"l", live, live));
    assert_eq!(next_event(&mut watch).await, expected);
    assert_eq!(next_event(&mut from_listing).await, expected);

    let mut future = s.watch("/w/", Some(live.next().next())).await.unwrap();
    s.put("/w/skip1", Vec::new(), None).await.unwrap();
    s.put("/w/skip2", Vec::new(), None).await.unwrap();
    let first = s.put("/w/first", Vec::new(), None).await.unwrap();
    assert_eq!(
        next_event(&mut future).await,
        put_event(kv("/w/first", b"", first, first))
    );
}

/// Watching after a compacted revision fails with `Compacted` (from `watch` or as
/// the stream's only item); after the compaction revision it works.
pub async fn watch_of_compacted_revisions_fails<H: Harness>(h: &H) {
    let s = h.store().await;
    let dyn_store: Arc<dyn MetaStore> = s.clone();
    let mut revs = Vec::new();
    for i in 0..5u8 {
        revs.push(
            dyn_store
                .put(&format!("/w/{i}"), vec![i], None)
                .await
                .unwrap(),
        );
    }
    h.compact(&s, revs[2]).await;
    let err = match dyn_store.watch("/w/", Some(revs[0])).await {
        Err(err) => err,
        Ok(mut stream) => {
            let item = timeout(EVENT_TIMEOUT, stream.next())
                .await
                .expect("the watch answers");
            let Some(Err(err)) = item else {
                panic!("expected Compacted, got {item:?}");
            };
            assert!(
                stream.next().await.is_none(),
                "the stream ends after an error"
            );
            err
        }
    };
    match err {
        MetaError::Compacted {
            requested,
            compacted,
        } => {
            assert_eq!(requested, revs[0]);
            assert_eq!(compacted, revs[2]);
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    let mut watch = dyn_store.watch("/w/", Some(revs[2])).await.unwrap();
    assert_eq!(
        next_events(&mut watch, 2).await,
        [
            put_event(kv("/w/3", &[3], revs[3], revs[3])),
            put_event(kv("/w/4", &[4], revs[4], revs[4]))
        ]
    );
}

/// `keys::ensure_layout` writes the layout version once, accepts it after, and
/// refuses a newer or unreadable one.
pub async fn layout_version_is_written_once_and_checked<H: Harness>(h: &H) {
    let s = store(h).await;
    assert_eq!(
        keys::ensure_layout(&*s).await.unwrap(),
        keys::LAYOUT_VERSION
    );
    let written = s.get(keys::LAYOUT_KEY).await.unwrap().unwrap();
    assert_eq!(written.value, br#"{"version":1}"#);
    assert_eq!(
        keys::ensure_layout(&*s).await.unwrap(),
        keys::LAYOUT_VERSION
    );
    assert_eq!(
        s.get(keys::LAYOUT_KEY).await.unwrap().unwrap().mod_revision,
        written.mod_revision,
        "a second check does not write"
    );
    s.put(keys::LAYOUT_KEY, br#"{"version":2}"#.to_vec(), None)
        .await
        .unwrap();
    assert!(matches!(
        keys::ensure_layout(&*s).await,
        Err(MetaError::NewerLayout {
            found: 2,
            supported: 1,
            ..
        })
    ));
    s.put(keys::LAYOUT_KEY, b"garbage".to_vec(), None)
        .await
        .unwrap();
    assert!(matches!(
        keys::ensure_layout(&*s).await,
        Err(MetaError::BadValue { .. })
    ));
}
