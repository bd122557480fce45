//! The audit log: every change made through the API (admin jobs, uploads,
//! swaps, tenants, quotas, tokens), with who asked, from where, when, on
//! which tenant and how it ended; refusals included. Kept in the meta store
//! under `/sluice/v1/audit/`, the newest `retention` entries (trimmed when a
//! tenth more have come), written by one task so that no request waits for
//! it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sluice_meta::keys;
use sluice_meta::{MetaStore, Op, Txn};
use tokio::sync::mpsc;

use crate::error::AuthError;

/// The most bytes of an error message an entry keeps.
const MAX_MESSAGE: usize = 512;
/// Entries waiting to be written at most; past it new ones are counted as
/// dropped (and logged) rather than held.
const QUEUE: usize = 1024;

/// One audited request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AuditEntry {
    /// Schema version of this record (1).
    pub version: u64,
    /// When it was answered (ms since the Unix epoch).
    pub at_ms: u64,
    /// The caller's token id (empty: no valid token); never the secret.
    pub token: String,
    /// The token's tenant and role (empty without a valid token).
    pub caller_tenant: String,
    /// The token's role.
    pub role: String,
    /// Where the request came from.
    pub address: String,
    /// What was asked: `Service/Method`.
    pub action: String,
    /// The tenant it acted on (empty when refused before one was known).
    pub tenant: String,
    /// `ok`, or the refusal's kind (`permission denied`, `not found`, ...).
    pub outcome: String,
    /// The refusal's message (at most 512 bytes).
    pub message: String,
}

/// Writes and reads the audit log of one meta store.
#[derive(Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<AuditEntry>,
    store: Arc<dyn MetaStore>,
    dropped: Arc<AtomicU64>,
}

impl AuditLog {
    /// Starts the writer task (on the current runtime) keeping the newest
    /// `retention` entries.
    pub async fn start(store: Arc<dyn MetaStore>, retention: u64) -> Result<Self, AuthError> {
        let held = store.list(&keys::audit_prefix()).await?.kvs.len() as u64;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_entries(store.clone(), rx, retention, held));
        Ok(Self {
            tx,
            store,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Queues `entry` for writing; never waits.
    pub fn record(&self, mut entry: AuditEntry) {
        if entry.message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !entry.message.is_char_boundary(end) {
                end -= 1;
            }
            entry.message.truncate(end);
        }
        if self.tx.try_send(entry).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                dropped = n,
                "The audit log's queue is full; an entry was dropped."
            );
        }
    }

    /// Entries lost because the queue was full, since the server started.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The entries at or after `since_ms`, oldest first, of `tenant` (acted
    /// on, or the caller's) or of every tenant for `None`; the newest
    /// `limit` of them.
    pub async fn list(
        &self,
        tenant: Option<&str>,
        since_ms: u64,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, AuthError> {
        let listing = self.store.list(&keys::audit_prefix()).await?;
        let mut out = Vec::new();
        for kv in &listing.kvs {
            let entry: AuditEntry = keys::decode(&kv.key, &kv.value)?;
            if entry.at_ms >= since_ms
                && tenant.is_none_or(|t| entry.tenant == t || entry.caller_tenant == t)
            {
                out.push(entry);
            }
        }
        let skip = out.len().saturating_sub(limit);
        Ok(out.split_off(skip))
    }
}

/// The writer: one entry at a time, trimming to `retention` once a tenth
/// more (at least one) has come.
async fn write_entries(
    store: Arc<dyn MetaStore>,
    mut rx: mpsc::Receiver<AuditEntry>,
    retention: u64,
    mut held: u64,
) {
    let mut seq: u64 = {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        u64::from_le_bytes(b)
    };
    let slack = (retention / 10).max(1);
    while let Some(entry) = rx.recv().await {
        seq = seq.wrapping_add(1);
        let put = keys::encode(&entry).map(|value| (keys::audit(entry.at_ms, seq), value));
        match put {
            Ok((key, value)) => match store.put(&key, value, None).await {
                Ok(_) => held += 1,
                Err(e) => tracing::warn!(error = %e, "An audit entry could not be written."),
            },
            Err(e) => tracing::warn!(error = %e, "An audit entry could not be encoded."),
        }
        if held > retention + slack {
            match trim(store.as_ref(), retention).await {
                Ok(left) => held = left,
                Err(e) => tracing::warn!(error = %e, "The audit log could not be trimmed."),
            }
        }
    }
}

/// Deletes the oldest entries past `retention`; returns how many are left.
async fn trim(store: &dyn MetaStore, retention: u64) -> Result<u64, sluice_meta::MetaError> {
    let listing = store.list(&keys::audit_prefix()).await?;
    let total = listing.kvs.len() as u64;
    let excess = total.saturating_sub(retention) as usize;
    for chunk in listing.kvs[..excess].chunks(sluice_meta::MAX_TXN_OPS) {
        store
            .txn(Txn::new().and_then(chunk.iter().map(|kv| Op::delete(&kv.key))))
            .await?;
    }
    Ok(total - excess as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::EmbeddedMetaStore;

    fn entry(at_ms: u64, tenant: &str) -> AuditEntry {
        AuditEntry {
            version: 1,
            at_ms,
            token: "00000000000000aa".into(),
            caller_tenant: tenant.into(),
            role: "tenant-admin".into(),
            address: "127.0.0.1:1".into(),
            action: "ChangefeedService/PauseChangefeed".into(),
            tenant: tenant.into(),
            outcome: "ok".into(),
            message: "x".repeat(2000),
        }
    }

    #[tokio::test]
    async fn the_log_keeps_the_newest_entries_in_order_and_filters_by_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetaStore> = Arc::new(
            EmbeddedMetaStore::open(dir.path().join("meta.redb"))
                .await
                .unwrap(),
        );
        let log = AuditLog::start(store.clone(), 20).await.unwrap();
        for i in 0..50u64 {
            log.record(entry(1_000 + i, if i % 2 == 0 { "acme" } else { "globex" }));
        }
        // The writer is one task: wait until it has written the last one
        // and trimmed after it (the 50th entry is one past the slack, so a
        // list between its write and the trim sees 23).
        let mut all = Vec::new();
        for _ in 0..200 {
            all = log.list(None, 0, usize::MAX).await.unwrap();
            if all.last().is_some_and(|e| e.at_ms == 1_049) && all.len() <= 22 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!((20..=22).contains(&all.len()), "{}", all.len());
        let times: Vec<u64> = all.iter().map(|e| e.at_ms).collect();
        let mut sorted = times.clone();
        sorted.sort_unstable();
        assert_eq!(times, sorted);
        assert_eq!(*times.last().unwrap(), 1_049);
        assert!(all.iter().all(|e| e.message.len() == MAX_MESSAGE));
        let acme = log.list(Some("acme"), 0, usize::MAX).await.unwrap();
        assert!(acme.iter().all(|e| e.tenant == "acme"));
        let recent = log.list(None, 1_045, 3).await.unwrap();
        let times: Vec<u64> = recent.iter().map(|e| e.at_ms).collect();
        assert_eq!(times, [1_047, 1_048, 1_049]);
        assert_eq!(log.dropped(), 0);
    }
}
