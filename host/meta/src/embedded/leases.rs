//! Live leases: their TTLs, deadlines and attached keys, in memory.
//!
//! A lease is live until its deadline passes; after that it can no longer be kept
//! alive or have keys attached, and the expiry task deletes its keys and forgets it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::MetaError;
use crate::store::LeaseId;

#[derive(Debug)]
struct Entry {
    ttl: Duration,
    deadline: Instant,
    keys: BTreeSet<String>,
}

/// The leases granted since the store was opened and not yet revoked.
#[derive(Debug, Default)]
pub(super) struct Leases {
    map: HashMap<LeaseId, Entry>,
}

impl Leases {
    pub(super) fn grant(&mut self, id: LeaseId, ttl: Duration, now: Instant) {
        let entry = Entry {
            ttl,
            deadline: now + ttl,
            keys: BTreeSet::new(),
        };
        self.map.insert(id, entry);
    }

    /// Whether keys may be attached to `id`.
    pub(super) fn is_live(&self, id: LeaseId, now: Instant) -> bool {
        self.map.get(&id).is_some_and(|e| e.deadline > now)
    }

    /// Move the deadline to `now + ttl`; returns the TTL.
    pub(super) fn keep_alive(&mut self, id: LeaseId, now: Instant) -> Result<Duration, MetaError> {
        match self.map.get_mut(&id) {
            Some(entry) if entry.deadline > now => {
                entry.deadline = now + entry.ttl;
                Ok(entry.ttl)
            }
            _ => Err(MetaError::LeaseNotFound { lease: id }),
        }
    }

    /// The keys attached to `id`, sorted; `None` if it is not known (any more).
    pub(super) fn keys(&self, id: LeaseId) -> Option<Vec<String>> {
        self.map.get(&id).map(|e| e.keys.iter().cloned().collect())
    }

    pub(super) fn remove(&mut self, id: LeaseId) {
        self.map.remove(&id);
    }

    /// Record that `key` moved from lease `from` to lease `to` (either may be none).
    pub(super) fn attach(&mut self, key: &str, from: Option<LeaseId>, to: Option<LeaseId>) {
        if from == to {
            return;
        }
        if let Some(entry) = from.and_then(|id| self.map.get_mut(&id)) {
            entry.keys.remove(key);
        }
        if let Some(entry) = to.and_then(|id| self.map.get_mut(&id)) {
            entry.keys.insert(key.to_owned());
        }
    }

    /// The leases whose deadline has passed.
    pub(super) fn due(&self, now: Instant) -> Vec<LeaseId> {
        let mut due: Vec<_> = self
            .map
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        due.sort();
        due
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.map.values().map(|e| e.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_past_its_deadline_cannot_be_kept_alive() {
        let t0 = Instant::now();
        let mut leases = Leases::default();
        let id = LeaseId(1);
        leases.grant(id, Duration::from_secs(10), t0);
        assert!(leases.is_live(id, t0 + Duration::from_secs(9)));
        assert_eq!(
            leases.keep_alive(id, t0 + Duration::from_secs(9)).unwrap(),
            Duration::from_secs(10)
        );
        // Extended to t0 + 19 s.
        assert!(leases.due(t0 + Duration::from_secs(18)).is_empty());
        assert_eq!(leases.due(t0 + Duration::from_secs(19)), [id]);
        assert!(matches!(
            leases.keep_alive(id, t0 + Duration::from_secs(19)),
            Err(MetaError::LeaseNotFound { .. })
        ));
        assert!(!leases.is_live(id, t0 + Duration::from_secs(19)));
    }

    #[test]
    fn keys_follow_their_lease() {
        let t0 = Instant::now();
        let mut leases = Leases::default();
        leases.grant(LeaseId(1), Duration::from_secs(10), t0);
        leases.grant(LeaseId(2), Duration::from_secs(10), t0);
        leases.attach("/b", None, Some(LeaseId(1)));
        leases.attach("/a", None, Some(LeaseId(1)));
        leases.attach("/c", None, Some(LeaseId(1)));
        leases.attach("/c", Some(LeaseId(1)), Some(LeaseId(2)));
        leases.attach("/b", Some(LeaseId(1)), None);
        assert_eq!(leases.keys(LeaseId(1)).unwrap(), ["/a"]);
        assert_eq!(leases.keys(LeaseId(2)).unwrap(), ["/c"]);
        assert_eq!(leases.keys(LeaseId(3)), None);
    }
}
