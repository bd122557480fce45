//! The event cache: a bounded queue between the source task and the pipeline.
//!
//! It is bounded by count (`event-cache-count`, the channel's capacity) and by
//! bytes (`event-cache-bytes`, a semaphore of wire bytes). The reader takes an
//! event's bytes before it queues it and blocks while the cache is full: it never
//! drops. An event larger than the whole byte bound takes all of it, so it waits
//! alone. The bytes come back when the pipeline drops the event's [`CachePermit`]
//! (rows held behind a DDL barrier keep theirs, so they count as cached).

use std::sync::Arc;

use sluice_core::{Checkpoint, Source, SourceEvent};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::error::PipelineError;

/// Bytes an event holds in the event cache, given back when it is dropped.
pub(crate) struct CachePermit(
    #[expect(dead_code, reason = "held for its drop")] OwnedSemaphorePermit,
);

/// An event out of the cache, with the bytes it holds there.
pub(crate) type Cached = (Result<SourceEvent, PipelineError>, CachePermit);

/// The reading end of the cache, and the reader task (aborted when this is dropped).
pub(crate) struct EventCache {
    pub(crate) rx: mpsc::Receiver<Cached>,
    bytes: Arc<Semaphore>,
    budget: usize,
    _reader: JoinSet<()>,
}

impl EventCache {
    /// Resume `source` from `start` and read it into a cache of `count` events
    /// and `bytes` bytes, in the caller's span.
    pub(crate) fn start<S: Source + 'static>(
        mut source: S,
        start: &Checkpoint,
        count: usize,
        bytes: usize,
    ) -> Result<Self, PipelineError> {
        source
            .resume(start)
            .map_err(|e| PipelineError::Source(Box::new(e)))?;
        let (tx, rx) = mpsc::channel::<Cached>(count.max(1));
        let budget = bytes.clamp(1, u32::MAX as usize);
        let semaphore = Arc::new(Semaphore::new(budget));
        let cached_bytes = semaphore.clone();
        let mut reader = JoinSet::new();
        reader.spawn(
            async move {
                loop {
                    let event = source
                        .next_event()
                        .await
                        .map_err(|e| PipelineError::Source(Box::new(e)));
                    let last = matches!(event, Ok(SourceEvent::End) | Err(_));
                    let size = match &event {
                        Ok(SourceEvent::Transaction(t)) => t.wire_bytes(),
                        _ => 0,
                    };
                    // An event larger than the whole budget takes all of it.
                    let want = size.min(budget) as u32;
                    let Ok(permit) = cached_bytes.clone().acquire_many_owned(want).await else {
                        break;
                    };
                    if tx.send((event, CachePermit(permit))).await.is_err() || last {
                        break;
                    }
                }
            }
            .instrument(tracing::Span::current()),
        );
        Ok(Self {
            rx,
            bytes: semaphore,
            budget,
            _reader: reader,
        })
    }

    /// Bytes the cache holds now (queued events, and rows held with their permits).
    pub(crate) fn held_bytes(&self) -> u64 {
        (self.budget - self.bytes.available_permits()) as u64
    }

    /// The byte bound.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }
}
