//! The bounded, in-memory history of committed changes that watches read from.
//!
//! Every change gets a sequence number. A watch keeps a cursor (the next sequence
//! number to look at); when the history drops events the cursor has not passed,
//! the watch ends with `Compacted`, exactly as when it asks for a revision that is
//! already gone.

use std::collections::VecDeque;

use crate::error::MetaError;
use crate::store::Revision;
use crate::watch::WatchEvent;

/// Committed changes, oldest first.
#[derive(Debug)]
pub(super) struct History {
    events: VecDeque<WatchEvent>,
    /// Sequence number of `events[0]`.
    first_seq: u64,
    /// Every change with a revision above this one is in `events`.
    compacted: Revision,
    /// The store revision of the last published write.
    head: Revision,
    capacity: usize,
}

/// Where one watch is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cursor {
    /// The next sequence number to look at.
    seq: u64,
    /// Only changes above this revision are delivered.
    after: Revision,
    /// The revision of the last delivered change (`after` before the first).
    delivered: Revision,
}

impl History {
    /// An empty history of a store at `head`; at least one event is kept.
    pub(super) fn new(head: Revision, capacity: usize) -> Self {
        Self {
            events: VecDeque::new(),
            first_seq: 0,
            compacted: head,
            head,
            capacity: capacity.max(1),
        }
    }

    /// The sequence number the next published event gets.
    pub(super) fn next_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64
    }

    /// Append the changes of one committed write, dropping the oldest beyond capacity.
    pub(super) fn publish(&mut self, revision: Revision, events: Vec<WatchEvent>) {
        debug_assert!(
            revision > self.head,
            "writes are published in revision order"
        );
        self.head = revision;
        self.events.extend(events);
        while self.events.len() > self.capacity {
            self.pop_front();
        }
    }

    /// Drop the changes at or below `revision` (at most the head).
    pub(super) fn compact(&mut self, revision: Revision) {
        let revision = revision.min(self.head);
        while self.events.front().is_some_and(|e| e.revision <= revision) {
            self.pop_front();
        }
        self.compacted = self.compacted.max(revision);
    }

    fn pop_front(&mut self) {
        if let Some(event) = self.events.pop_front() {
            self.first_seq += 1;
            self.compacted = self.compacted.max(event.revision);
        }
    }

    /// A cursor for the changes after `after` (after the head for `None`).
    pub(super) fn start(&self, after: Option<Revision>) -> Result<Cursor, MetaError> {
        let after = after.unwrap_or(self.head);
        if after < self.compacted {
            return Err(MetaError::Compacted {
                requested: after,
                compacted: self.compacted,
            });
        }
        let skip = self.events.partition_point(|e| e.revision <= after);
        Ok(Cursor {
            seq: self.first_seq + skip as u64,
            after,
            delivered: after,
        })
    }

    /// Up to `max` changes under `prefix` at the cursor, advancing it.
    pub(super) fn read(
        &self,
        cursor: &mut Cursor,
        prefix: &str,
        max: usize,
    ) -> Result<Vec<WatchEvent>, MetaError> {
        if cursor.seq < self.first_seq {
            return Err(MetaError::Compacted {
                requested: cursor.delivered,
                compacted: self.compacted,
            });
        }
        let mut out = Vec::new();
        let start = (cursor.seq - self.first_seq) as usize;
        for event in self.events.range(start..) {
            if out.len() == max {
                break;
            }
            cursor.seq += 1;
            if event.revision > cursor.after && event.kv.key.starts_with(prefix) {
                cursor.delivered = event.revision;
                out.push(event.clone());
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::KeyValue;
    use crate::watch::WatchEventKind;

    fn put(key: &str, rev: u64) -> WatchEvent {
        WatchEvent {
            kind: WatchEventKind::Put,
            kv: KeyValue {
                key: key.into(),
                value: vec![],
                create_revision: Revision(rev),
                mod_revision: Revision(rev),
                lease: None,
            },
            revision: Revision(rev),
        }
    }

    fn keys(events: &[WatchEvent]) -> Vec<(String, u64)> {
        events
            .iter()
            .map(|e| (e.kv.key.clone(), e.revision.0))
            .collect()
    }

    #[test]
    fn cursor_skips_revisions_up_to_after_and_other_prefixes() {
        let mut h = History::new(Revision(0), 100);
        h.publish(Revision(1), vec![put("/a/1", 1)]);
        h.publish(Revision(2), vec![put("/b/1", 2), put("/a/2", 2)]);
        h.publish(Revision(3), vec![put("/a/3", 3)]);
        let mut c = h.start(Some(Revision(1))).unwrap();
        let got = h.read(&mut c, "/a/", 10).unwrap();
        assert_eq!(keys(&got), [("/a/2".into(), 2), ("/a/3".into(), 3)]);
        assert!(h.read(&mut c, "/a/", 10).unwrap().is_empty());
        h.publish(Revision(4), vec![put("/a/4", 4)]);
        assert_eq!(
            keys(&h.read(&mut c, "/a/", 10).unwrap()),
            [("/a/4".into(), 4)]
        );
    }

    #[test]
    fn read_stops_at_max_without_losing_events() {
        let mut h = History::new(Revision(0), 100);
        h.publish(
            Revision(1),
            (0..5).map(|i| put(&format!("/k{i}"), 1)).collect(),
        );
        let mut c = h.start(Some(Revision(0))).unwrap();
        assert_eq!(h.read(&mut c, "", 2).unwrap().len(), 2);
        assert_eq!(h.read(&mut c, "", 2).unwrap().len(), 2);
        assert_eq!(keys(&h.read(&mut c, "", 2).unwrap()), [("/k4".into(), 1)]);
    }

    #[test]
    fn dropped_events_make_old_starts_and_slow_cursors_compacted() {
        let mut h = History::new(Revision(0), 2);
        h.publish(Revision(1), vec![put("/a", 1)]);
        let mut slow = h.start(None).unwrap();
        h.publish(Revision(2), vec![put("/a", 2)]);
        h.publish(Revision(3), vec![put("/a", 3)]);
        h.publish(Revision(4), vec![put("/a", 4)]);
        // Revisions 1 and 2 are gone; 3 and 4 are kept.
        assert!(matches!(
            h.start(Some(Revision(1))),
            Err(MetaError::Compacted {
                requested: Revision(1),
                compacted: Revision(2)
            })
        ));
        let mut c = h.start(Some(Revision(2))).unwrap();
        assert_eq!(
            keys(&h.read(&mut c, "", 10).unwrap()),
            [("/a".into(), 3), ("/a".into(), 4)]
        );
        assert!(matches!(
            h.read(&mut slow, "", 10),
            Err(MetaError::Compacted {
                requested: Revision(1),
                ..
            })
        ));
    }

    #[test]
    fn compact_drops_through_a_revision() {
        let mut h = History::new(Revision(0), 100);
        for rev in 1..=5 {
            h.publish(Revision(rev), vec![put("/a", rev)]);
        }
        h.compact(Revision(3));
        assert!(h.start(Some(Revision(2))).is_err());
        let mut c = h.start(Some(Revision(3))).unwrap();
        assert_eq!(
            keys(&h.read(&mut c, "", 10).unwrap()),
            [("/a".into(), 4), ("/a".into(), 5)]
        );
        // Compacting past the head stops at the head.
        h.compact(Revision(99));
        assert!(h.start(Some(Revision(5))).is_ok());
    }
}
