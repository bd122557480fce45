//! Checks of the election that any [`MetaStore`] must pass: run on the
//! embedded store by the unit tests and on a private etcd by
//! `tests/election_etcd.rs` (feature `testing`).

use std::sync::Arc;
use std::time::Duration;

use sluice_meta::{Compare, MetaStore, Op, Txn, keys};

use crate::CaptureInfo;
use crate::election::{ElectionError, OwnerTerm, Registration, current_owner};

/// A capture's record for the checks.
pub fn info(id: &str) -> CaptureInfo {
    CaptureInfo {
        version: 1,
        id: id.into(),
        address: format!("{id}:8300"),
        http_address: String::new(),
        sluice_version: "test".into(),
        started_at_ms: 1,
    }
}

/// A write only the holder of `term` may make.
async fn guarded_put(store: &dyn MetaStore, term: &OwnerTerm, value: &str) -> bool {
    store
        .txn(
            Txn::new()
                .when([term.guard.clone()])
                .and_then([Op::put("/sluice/v1/test/owned", value.as_bytes().to_vec())]),
        )
        .await
        .unwrap()
        .succeeded
}

/// Three, then four, candidates: the first owns, the next in line takes over
/// when the owner goes (and only then), a deposed owner's writes fail, and a
/// waiter that leaves does not promote the one behind it.
pub async fn line_of_succession(store: Arc<dyn MetaStore>) {
    // Long enough that no lease ends in the test: they go by resigning.
    let ttl = Duration::from_secs(60);
    let a = Registration::register(store.clone(), info("a"), ttl)
        .await
        .unwrap();
    let b = Registration::register(store.clone(), info("b"), ttl)
        .await
        .unwrap();
    let c = Registration::register(store.clone(), info("c"), ttl)
        .await
        .unwrap();
    let term_a = a.try_campaign().await.unwrap();
    match b.try_campaign().await {
        Err(ElectionError::OtherOwner { owner }) => assert_eq!(owner.id, "a"),
        other => panic!("b is not the owner while a is: {other:?}"),
    }
    assert_eq!(
        current_owner(store.as_ref()).await.unwrap().unwrap().0.id,
        "a"
    );

    // b and c wait in line.
    let waiting_b = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    let waiting_c = tokio::spawn({
        let c = c.clone();
        async move { c.campaign().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting_b.is_finished() && !waiting_c.is_finished());
    assert!(guarded_put(store.as_ref(), &term_a, "a").await);

    a.resign().await.unwrap();
    let term_b = tokio::time::timeout(Duration::from_secs(5), waiting_b)
        .await
        .expect("b took over")
        .unwrap()
        .unwrap();
    assert!(
        term_b.term > term_a.term,
        "a later term has a larger number"
    );
    assert!(!waiting_c.is_finished(), "c waits behind b");
    // The deposed owner's writes fail; the new owner's pass.
    assert!(!guarded_put(store.as_ref(), &term_a, "a again").await);
    assert!(guarded_put(store.as_ref(), &term_b, "b").await);
    let owned = store.get("/sluice/v1/test/owned").await.unwrap().unwrap();
    assert_eq!(owned.value, b"b");
    assert_eq!(
        current_owner(store.as_ref()).await.unwrap().unwrap().0.id,
        "b"
    );

    // Removing a waiter does not wake the one behind it as owner early.
    let d = Registration::register(store.clone(), info("d"), ttl)
        .await
        .unwrap();
    let waiting_d = tokio::spawn({
        let d = d.clone();
        async move { d.campaign().await }
    });
    c.resign().await.unwrap();
    assert!(matches!(
        waiting_c.await.unwrap(),
        Err(ElectionError::LeaseLost)
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    if waiting_d.is_finished() {
        panic!("d waits behind b, not c: {:?}", waiting_d.await);
    }
    b.resign().await.unwrap();
    let term_d = tokio::time::timeout(Duration::from_secs(5), waiting_d)
        .await
        .expect("d took over")
        .unwrap()
        .unwrap();
    assert!(term_d.term > term_b.term);
    assert!(!guarded_put(store.as_ref(), &term_b, "b again").await);
    assert!(guarded_put(store.as_ref(), &term_d, "d").await);
}

/// A second capture under a live id is refused (leaving no candidacy), a
/// resigned id is free again, and a registration's guard holds while it
/// stands and only for it.
pub async fn registrations_and_their_guards(store: Arc<dyn MetaStore>) {
    let ttl = Duration::from_secs(5);
    let first = Registration::register(store.clone(), info("a"), ttl)
        .await
        .unwrap();
    let err = Registration::register(store.clone(), info("a"), ttl)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("capture a is already registered"),
        "{err}"
    );
    // The refused registration left no candidacy behind.
    assert_eq!(
        store.list(&keys::owner_prefix()).await.unwrap().kvs.len(),
        1
    );
    // The capture's own writes hold while it is registered, and not after.
    let own = |guard: Compare| {
        Txn::new()
            .when([guard])
            .and_then([Op::put("/sluice/v1/test/position", b"p".to_vec())])
    };
    assert!(store.txn(own(first.guard())).await.unwrap().succeeded);
    first.resign().await.unwrap();
    assert!(
        store
            .list(&keys::capture_prefix())
            .await
            .unwrap()
            .kvs
            .is_empty()
    );
    assert!(!store.txn(own(first.guard())).await.unwrap().succeeded);
    let again = Registration::register(store.clone(), info("a"), ttl)
        .await
        .unwrap();
    again.try_campaign().await.unwrap();
    // The same id registered again is another registration: the first
    // one's guard does not hold for it.
    assert!(!store.txn(own(first.guard())).await.unwrap().succeeded);
    assert!(store.txn(own(again.guard())).await.unwrap().succeeded);
}
