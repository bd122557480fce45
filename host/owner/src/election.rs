//! Captures and the owner election on the meta store (etcd's election recipe).
//!
//! A capture registers under a lease of its own: its record
//! (`/sluice/v1/capture/{id}`) and its owner candidacy
//! (`/sluice/v1/owner/{lease}`) are attached to the lease, so both vanish when
//! the capture stops renewing it. The candidate whose key was created first
//! (the lowest create revision) is the owner; the others wait, each for the
//! deletion of the candidacy just before its own, and the next in line takes
//! over when the owner's lease ends. An owner term is named by its candidacy's
//! create revision, which only grows from one term to the next, and every write
//! the owner makes carries [`OwnerTerm::guard`], a compare that fails once the
//! candidacy is gone: a deposed owner cannot write.
//!
//! A capture that cannot renew its lease stops by itself ([`keep_alive`]
//! returns) once the lease may have ended at the store, before another capture
//! can have been given its work.

use crate::CaptureInfo;
use sluice_core::WriteFence;
use std::sync::Arc;
use std::time::Duration;

use sluice_meta::keys;
use sluice_meta::{Compare, LeaseId, MetaError, MetaStore, Op, Revision, Txn, WatchEventKind};
use tokio::time::Instant;

/// How long a capture's lease lasts without a renewal, unless the server says
/// otherwise: a killed capture's work waits this long at most before another
/// capture may take it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// Why a capture could not register, campaign or stay registered.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The meta store failed.
    #[error(transparent)]
    Store(#[from] MetaError),
    /// A live capture is registered under this id.
    #[error(
        "capture {id} is already registered: another server runs with this data dir (or a copy \
         of it), or a killed one's lease has not expired yet (up to {ttl:?})"
    )]
    AlreadyRegistered {
        /// The id.
        id: String,
        /// How long a dead capture's registration may linger.
        ttl: Duration,
    },
    /// Another capture is the owner (from [`Registration::try_campaign`]).
    #[error("capture {} at {} is the owner of this meta store", .owner.id, .owner.address)]
    OtherOwner {
        /// The owner.
        owner: CaptureInfo,
    },
    /// The capture's lease ended while it campaigned: its candidacy is gone.
    #[error("this capture's lease ended (its candidacy is gone); register again")]
    LeaseLost,
}

/// A capture registered in the meta store under its lease. Keep the lease
/// alive with [`keep_alive`]; [`Registration::resign`] ends it.
#[derive(Clone)]
pub struct Registration {
    store: Arc<dyn MetaStore>,
    info: CaptureInfo,
    lease: LeaseId,
    ttl: Duration,
    /// The create revision of the capture's record.
    registered: Revision,
    /// When the lease's grant was asked for: it ends at the store no sooner
    /// than a TTL after this.
    granted_at: Instant,
    /// Open while the lease stands (see [`Registration::fence`]).
    fence: WriteFence,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("capture", &self.info.id)
            .field("lease", &self.lease)
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// One owner term: this capture is the owner while its candidacy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerTerm {
    /// Holds while the term lasts: every write of the owner carries it.
    pub guard: Compare,
    /// The term's number (its candidacy's create revision): a later term's is
    /// larger.
    pub term: Revision,
}

impl Registration {
    /// Registers `info` and its owner candidacy under a new lease of `ttl`
    /// (the store may grant a longer one). Fails if a live capture is
    /// registered under the same id.
    pub async fn register(
        store: Arc<dyn MetaStore>,
        info: CaptureInfo,
        ttl: Duration,
    ) -> Result<Self, ElectionError> {
        let granted_at = Instant::now();
        let lease = store.grant_lease(ttl).await?;
        let capture_key = keys::capture(&info.id)?;
        let value = keys::encode(&info)?;
        let registered = store
            .txn(Txn::new().when([Compare::absent(&capture_key)]).and_then([
                Op::put_with_lease(&capture_key, value.clone(), lease.id),
                Op::put_with_lease(keys::owner_candidate(lease.id), value, lease.id),
            ]))
            .await;
        match registered {
            Ok(r) if r.succeeded => Ok(Self {
                store,
                info,
                lease: lease.id,
                ttl: lease.ttl,
                registered: r.revision,
                granted_at,
                fence: WriteFence::lease(
                    granted_at.into_std() + fence_after(lease.ttl),
                    fence_after(lease.ttl),
                ),
            }),
            Ok(_) => {
                let _ = store.revoke(lease.id).await;
                Err(ElectionError::AlreadyRegistered {
                    id: info.id,
                    ttl: lease.ttl,
                })
            }
            Err(e) => {
                let _ = store.revoke(lease.id).await;
                Err(e.into())
            }
        }
    }

    /// The capture's record.
    pub fn info(&self) -> &CaptureInfo {
        &self.info
    }

    /// The lease its keys hang on.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// The lease's TTL as the store granted it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Holds while this registration stands (its record, created at
    /// registration, is there): every write of the capture's own (its task
    /// positions) carries it, so a capture whose lease ended writes nothing
    /// more, whoever the owner is.
    pub fn guard(&self) -> Compare {
        let key = keys::capture(&self.info.id).expect("checked at registration");
        Compare::create_revision(key, self.registered)
    }

    /// Open while this capture may write downstream: [`keep_alive`] moves it
    /// on with each renewal, to a margin before the lease can end at the
    /// store, and closes it when it returns. Every plugin call of the
    /// capture's processors checks it, so a capture that was cut off or
    /// paused past its lease writes nothing once another may have its work.
    pub fn fence(&self) -> &WriteFence {
        &self.fence
    }

    fn candidacy(&self) -> String {
        keys::owner_candidate(self.lease)
    }

    /// The owner term if this capture is the owner now; otherwise
    /// [`ElectionError::OtherOwner`] naming the owner.
    pub async fn try_campaign(&self) -> Result<OwnerTerm, ElectionError> {
        match self.standing().await? {
            Standing::Owner(term) => Ok(term),
            Standing::Behind { first, .. } => Err(ElectionError::OtherOwner { owner: first }),
        }
    }

    /// Waits until this capture is the owner (every candidacy before its own is
    /// gone) and returns the term. Fails with [`ElectionError::LeaseLost`] if
    /// its own candidacy goes first.
    pub async fn campaign(&self) -> Result<OwnerTerm, ElectionError> {
        loop {
            let (key, after) = match self.standing().await? {
                Standing::Owner(term) => return Ok(term),
                Standing::Behind {
                    previous, listed, ..
                } => (previous, listed),
            };
            // Wakes for the candidacy just before ours (when the owner goes,
            // only the next in line takes over) or for our own (the lease ended).
            let ours = self.candidacy();
            let mut watch = self.store.watch(&keys::owner_prefix(), Some(after)).await?;
            while let Some(Ok(event)) = watch.next().await {
                if event.kind == WatchEventKind::Delete
                    && (event.kv.key == key || event.kv.key == ours)
                {
                    break;
                }
            }
            // Gone, or the watch ended (or failed: compacted, a lost
            // connection): look again; a store that stays down fails the
            // listing.
        }
    }

    async fn standing(&self) -> Result<Standing, ElectionError> {
        let ours = self.candidacy();
        let listing = self.store.list(&keys::owner_prefix()).await?;
        let Some(own) = listing.kvs.iter().find(|kv| kv.key == ours) else {
            return Err(ElectionError::LeaseLost);
        };
        let before = |kv: &&sluice_meta::KeyValue| kv.create_revision < own.create_revision;
        let first = listing
            .kvs
            .iter()
            .filter(before)
            .min_by_key(|kv| kv.create_revision);
        let previous = listing
            .kvs
            .iter()
            .filter(before)
            .max_by_key(|kv| kv.create_revision);
        match (first, previous) {
            (Some(first), Some(previous)) => Ok(Standing::Behind {
                first: keys::decode(&first.key, &first.value)?,
                previous: previous.key.clone(),
                listed: listing.revision,
            }),
            _ => Ok(Standing::Owner(OwnerTerm {
                guard: Compare::create_revision(ours, own.create_revision),
                term: own.create_revision,
            })),
        }
    }

    /// Ends the lease: the capture's record and candidacy go at once (another
    /// candidate takes over without waiting for the TTL).
    pub async fn resign(&self) -> Result<(), ElectionError> {
        match self.store.revoke(self.lease).await {
            Ok(()) | Err(MetaError::LeaseNotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

enum Standing {
    Owner(OwnerTerm),
    Behind {
        first: CaptureInfo,
        previous: String,
        listed: Revision,
    },
}

/// The owner now and its term, if there is one.
pub async fn current_owner(
    store: &dyn MetaStore,
) -> Result<Option<(CaptureInfo, Revision)>, MetaError> {
    let listing = store.list(&keys::owner_prefix()).await?;
    match listing.kvs.iter().min_by_key(|kv| kv.create_revision) {
        Some(kv) => Ok(Some((
            keys::decode(&kv.key, &kv.value)?,
            kv.create_revision,
        ))),
        None => Ok(None),
    }
}

/// Renews the registration's lease every third of its TTL and returns why,
/// once the capture must stop writing: the store said the lease is gone, or no
/// renewal succeeded for four fifths of a TTL since the last good one was
/// sent, so the lease is about to end at the store (its deadline there is at
/// least a TTL after that send) and another capture may soon take over.
/// Errors in between are retried (sooner than the usual period). Keeps
/// [`Registration::fence`] open as long, and closes it on return.
pub async fn keep_alive(registration: &Registration) -> String {
    let why = renew(registration).await;
    registration.fence.close();
    why
}

async fn renew(registration: &Registration) -> String {
    let (store, lease, ttl) = (&registration.store, registration.lease, registration.ttl);
    let fence = &registration.fence;
    let mut deadline = registration.granted_at + fence_after(ttl);
    let mut wait = ttl / 3;
    loop {
        tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
        let sent = Instant::now();
        if sent >= deadline {
            return format!(
                "the capture's lease could not be renewed for {:?} (is the meta store \
                 reachable?); it is about to expire, and another capture may take over its work",
                fence_after(ttl)
            );
        }
        match tokio::time::timeout(deadline - sent, store.keep_alive(lease)).await {
            Ok(Ok(granted)) => {
                deadline = sent + fence_after(granted);
                fence.extend_to(deadline.into_std());
                wait = granted / 3;
            }
            Ok(Err(MetaError::LeaseNotFound { .. })) => {
                return "the capture's lease expired (was the meta store unreachable?)".into();
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "The capture's lease could not be renewed; retrying.");
                wait = (ttl / 10).min(Duration::from_secs(1));
            }
            Err(_) => wait = Duration::ZERO,
        }
    }
}

/// How long after a renewal was sent a capture that has not renewed since
/// stops writing: a fifth of the TTL before the store may end the lease, for
/// clocks that run at slightly different rates.
fn fence_after(ttl: Duration) -> Duration {
    ttl * 4 / 5
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election_checks::info;
    use sluice_meta::EmbeddedMetaStore;

    #[tokio::test]
    async fn the_first_candidate_owns_the_next_waits_and_takes_over_when_the_owner_goes() {
        let dir = tempfile::tempdir().unwrap();
        crate::election_checks::line_of_succession(store(&dir).await).await;
    }

    #[tokio::test]
    async fn a_second_capture_under_a_live_id_is_refused_and_a_resigned_id_is_free() {
        let dir = tempfile::tempdir().unwrap();
        crate::election_checks::registrations_and_their_guards(store(&dir).await).await;
    }

    async fn store(dir: &tempfile::TempDir) -> Arc<dyn MetaStore> {
        Arc::new(
            EmbeddedMetaStore::open(dir.path().join("meta.redb"))
                .await
                .unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alive_holds_the_lease_and_says_when_it_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        let ttl = Duration::from_secs(3);
        let a = Registration::register(store.clone(), info("a"), ttl)
            .await
            .unwrap();
        let b = Registration::register(store.clone(), info("b"), ttl)
            .await
            .unwrap();
        let keeper = tokio::spawn({
            let a = a.clone();
            async move { keep_alive(&a).await }
        });
        // b is not renewed: after its TTL its keys are gone; a's stay.
        tokio::time::sleep(ttl * 4).await;
        assert!(!keeper.is_finished());
        let now = Instant::now().into_std();
        assert!(a.fence().is_open_at(now), "renewed: a may write");
        assert!(!b.fence().is_open_at(now), "never renewed: b may not");
        let captures = store.list(&keys::capture_prefix()).await.unwrap();
        let ids: Vec<_> = captures.kvs.iter().map(|kv| kv.key.clone()).collect();
        assert_eq!(ids, vec![keys::capture("a").unwrap()]);
        assert!(matches!(
            b.try_campaign().await,
            Err(ElectionError::LeaseLost)
        ));
        // The lease ended behind the keeper's back: it says so.
        store.revoke(a.lease()).await.unwrap();
        let why = tokio::time::timeout(ttl, keeper).await.unwrap().unwrap();
        assert!(why.contains("lease expired"), "{why}");
        assert!(a.fence().check().is_err(), "closed once the keeper gave up");
    }

    /// A store whose lease renewals stop answering while `cut` is set (a
    /// capture cut off from the meta store).
    struct Partitioned {
        inner: Arc<dyn MetaStore>,
        cut: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl MetaStore for Partitioned {
        async fn txn(&self, txn: Txn) -> Result<sluice_meta::TxnResult, MetaError> {
            self.inner.txn(txn).await
        }
        async fn list(&self, prefix: &str) -> Result<sluice_meta::Listing, MetaError> {
            self.inner.list(prefix).await
        }
        async fn grant_lease(&self, ttl: Duration) -> Result<sluice_meta::Lease, MetaError> {
            self.inner.grant_lease(ttl).await
        }
        async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
            if self.cut.load(std::sync::atomic::Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            self.inner.keep_alive(lease).await
        }
        async fn revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
            self.inner.revoke(lease).await
        }
        async fn watch(
            &self,
            prefix: &str,
            after: Option<Revision>,
        ) -> Result<sluice_meta::WatchStream, MetaError> {
            self.inner.watch(prefix, after).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_capture_cut_off_from_the_store_stops_within_its_ttl_before_another_takes_over() {
        let dir = tempfile::tempdir().unwrap();
        let inner = store(&dir).await;
        let cut_off = Arc::new(Partitioned {
            inner: inner.clone(),
            cut: std::sync::atomic::AtomicBool::new(false),
        });
        let ttl = Duration::from_secs(3);
        let a = Registration::register(cut_off.clone(), info("a"), ttl)
            .await
            .unwrap();
        a.try_campaign().await.unwrap();
        let b = Registration::register(inner.clone(), info("b"), ttl)
            .await
            .unwrap();
        let keep_b = tokio::spawn({
            let b = b.clone();
            async move { keep_alive(&b).await }
        });
        let keeper = tokio::spawn({
            let a = a.clone();
            async move {
                let why = keep_alive(&a).await;
                (Instant::now(), why)
            }
        });
        let waiting_b = tokio::spawn({
            let b = b.clone();
            async move {
                let term = b.campaign().await;
                (Instant::now(), term)
            }
        });
        tokio::time::sleep(ttl * 2).await;
        assert!(!keeper.is_finished() && !waiting_b.is_finished());
        let cut_at = Instant::now();
        assert!(
            a.fence().is_open_at(cut_at.into_std()),
            "renewed until the cut"
        );
        cut_off.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        let (stopped_at, why) = tokio::time::timeout(ttl * 3, keeper)
            .await
            .expect("the cut-off capture stopped by itself")
            .unwrap();
        assert!(why.contains("could not be renewed"), "{why}");
        let (owner_at, term) = waiting_b.await.unwrap();
        term.unwrap();
        // a's plugins were refused writes before b could own (or run) its work,
        // whether or not a's keeper had run yet.
        assert!(!a.fence().is_open_at(owner_at.into_std()));
        assert!(b.fence().is_open_at(owner_at.into_std()));
        assert!(
            stopped_at < owner_at,
            "a stopped ({:?} after the cut) before b became the owner ({:?} after)",
            stopped_at - cut_at,
            owner_at - cut_at
        );
        assert!(stopped_at - cut_at < ttl, "a stopped within one TTL");
        assert!(owner_at - cut_at <= ttl * 2, "b took over within two TTLs");
        keep_b.abort();
    }
}
