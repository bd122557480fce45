//! The event cache: a bounded queue between the source task and the pipeline.
//!
//! It is bounded by count (`event-cache-count` events, a semaphore of slots) and
//! by bytes (`event-cache-bytes`, a semaphore of wire bytes). The reader takes an
//! event's slot and bytes before it keeps it and blocks while the cache is full:
//! it never drops.
//! An event larger than the whole byte bound takes all of it, so it waits alone.
//!
//! Events travel in chunks: while the source has its next event ready at once,
//! the reader gathers events (up to [`CHUNK_EVENTS`] of them, or the chunk byte
//! bound) and sends them in one message; as soon as the source would wait, what
//! is gathered goes out first, so no event waits for a chunk to fill. Consecutive
//! transactions in a chunk are gathered into one [`TransactionRun`] (one set of
//! columns per table), copied on the reader's thread while the source's columns
//! are still in its cache, so that the dispatchers move or copy many
//! transactions' rows at once. One channel hop and one wake-up then serve many
//! small transactions. Every event holds one of `event-cache-count` slots and
//! its wire bytes until the pipeline is done with it: the pipeline splits a
//! chunk's permit back into one [`CachePermit`] per item and drops it when the
//! item's rows are in batches (rows held behind a DDL barrier keep theirs, so
//! they count as cached).

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use sluice_core::{Checkpoint, Source, SourceEvent, TransactionRun};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::error::PipelineError;

/// Most events in one chunk.
pub(crate) const CHUNK_EVENTS: usize = 1024;

/// The bytes and the event slots an item holds in the event cache, given back
/// when it is dropped.
pub(crate) struct CachePermit {
    bytes: Option<OwnedSemaphorePermit>,
    events: Option<OwnedSemaphorePermit>,
}

/// `n` permits of `from` as a permit of their own (fewer if fewer are left).
fn split_off(from: &mut Option<OwnedSemaphorePermit>, n: usize) -> Option<OwnedSemaphorePermit> {
    let p = from.as_mut()?;
    let n = n.min(p.num_permits());
    if n == 0 { None } else { p.split(n) }
}

/// Add `permit` to `into`.
fn merge(into: &mut Option<OwnedSemaphorePermit>, permit: OwnedSemaphorePermit) {
    match into {
        Some(p) => p.merge(permit),
        None => *into = Some(permit),
    }
}

impl CachePermit {
    /// A permit that holds nothing (tests).
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        CachePermit {
            bytes: None,
            events: None,
        }
    }

    /// `bytes` of these bytes and `events` of these slots as a permit of their
    /// own (fewer if fewer are left).
    pub(crate) fn split(&mut self, bytes: usize, events: usize) -> CachePermit {
        CachePermit {
            bytes: split_off(&mut self.bytes, bytes),
            events: split_off(&mut self.events, events),
        }
    }
}

/// What the cache hands out: one source event, or consecutive transactions
/// gathered into a run.
pub(crate) enum Item {
    /// A source event other than a transaction that joined a run.
    Event(Result<SourceEvent, PipelineError>),
    /// Transactions in a row (see [`TransactionRun`]).
    Run(SharedRun),
}

/// A run the redo writer may hold too: it shares the run instead of copying
/// it, and lets go of it before the fence passes it, so whoever takes the run
/// from the fence gets it without a copy.
#[derive(Debug)]
pub(crate) struct SharedRun(Arc<TransactionRun>);

impl SharedRun {
    pub(crate) fn new(run: TransactionRun) -> Self {
        Self(Arc::new(run))
    }

    /// Another holder of the run (the redo writer).
    pub(crate) fn share(&self) -> Arc<TransactionRun> {
        self.0.clone()
    }

    /// The run, copied only if another holder still has it.
    pub(crate) fn into_inner(self) -> TransactionRun {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }

    /// The run to add to, if nobody else holds it yet.
    pub(crate) fn get_mut(&mut self) -> Option<&mut TransactionRun> {
        Arc::get_mut(&mut self.0)
    }
}

impl std::ops::Deref for SharedRun {
    type Target = TransactionRun;

    fn deref(&self) -> &TransactionRun {
        &self.0
    }
}

impl From<TransactionRun> for SharedRun {
    fn from(run: TransactionRun) -> Self {
        Self::new(run)
    }
}

/// Items read in a row, each with the wire bytes and the events it holds in the
/// cache, and the permit for all of those.
pub(crate) struct Chunk {
    items: Vec<(Item, usize, usize)>,
    permit: CachePermit,
}

impl Chunk {
    /// The items in source order, each with a permit for its own bytes and events.
    pub(crate) fn into_items(self) -> impl Iterator<Item = (Item, CachePermit)> {
        let mut permit = self.permit;
        self.items
            .into_iter()
            .map(move |(item, bytes, events)| (item, permit.split(bytes, events)))
    }
}

/// The reading end of the cache, and the reader task (aborted when this is dropped).
pub(crate) struct EventCache {
    pub(crate) rx: mpsc::Receiver<Chunk>,
    bytes: Arc<Semaphore>,
    budget: usize,
    _reader: JoinSet<()>,
}

/// The chunk a reader is gathering, and where it goes.
struct Gather {
    tx: mpsc::Sender<Chunk>,
    /// Wire bytes (`event-cache-bytes`).
    semaphore: Arc<Semaphore>,
    /// Event slots (`event-cache-count`).
    slots: Arc<Semaphore>,
    chunk: Chunk,
    /// Source events in the chunk.
    events: usize,
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
    /// The last transaction was a part with more to come.
    in_parts: bool,
}

impl Gather {
    fn empty(max_events: usize) -> Chunk {
        Chunk {
            items: Vec::with_capacity(max_events.min(64)),
            permit: CachePermit {
                bytes: None,
                events: None,
            },
        }
    }

    /// Send the gathered items, if any; false if the pipeline is gone.
    async fn send(&mut self) -> bool {
        if self.chunk.items.is_empty() {
            return true;
        }
        let chunk = std::mem::replace(&mut self.chunk, Self::empty(self.max_events));
        (self.events, self.bytes) = (0, 0);
        self.tx.send(chunk).await.is_ok()
    }

    /// Room left in the chunk: (events, bytes).
    fn room(&self) -> (usize, usize) {
        (
            self.max_events.saturating_sub(self.events).max(1),
            self.max_bytes.saturating_sub(self.bytes).max(1),
        )
    }

    /// Take `n` permits of `semaphore` (sending what is gathered first if they
    /// are not free now); `None` if the pipeline is gone.
    async fn take(&mut self, semaphore: &Arc<Semaphore>, n: u32) -> Option<OwnedSemaphorePermit> {
        match semaphore.clone().try_acquire_many_owned(n) {
            Ok(p) => Some(p),
            Err(_) => {
                if !self.send().await {
                    return None;
                }
                semaphore.clone().acquire_many_owned(n).await.ok()
            }
        }
    }

    /// Add a run the source wrote (its transactions' slots and bytes taken
    /// first); false if the pipeline is gone.
    async fn push_run(&mut self, run: SharedRun, budget: usize) -> bool {
        let events = run.len().max(1);
        let size = run.wire_bytes().min(budget);
        if !self.chunk.items.is_empty()
            && (self.bytes + size > self.max_bytes || self.events + events > self.max_events)
            && !self.send().await
        {
            return false;
        }
        let (slots, bytes) = (self.slots.clone(), self.semaphore.clone());
        let Some(slot) = self.take(&slots, events as u32).await else {
            return false;
        };
        merge(&mut self.chunk.permit.events, slot);
        if size > 0 {
            let Some(permit) = self.take(&bytes, size as u32).await else {
                return false;
            };
            merge(&mut self.chunk.permit.bytes, permit);
        }
        self.chunk.items.push((Item::Run(run), size, events));
        self.events += events;
        self.bytes += size;
        if self.events >= self.max_events || self.bytes >= self.max_bytes {
            return self.send().await;
        }
        true
    }

    /// Add an event of `size` wire bytes, taking its bytes first (sending what is
    /// gathered if the cache is full or the chunk would pass its bounds); false
    /// if the pipeline is gone.
    async fn push(&mut self, event: Result<SourceEvent, PipelineError>, size: u32) -> bool {
        if !self.chunk.items.is_empty()
            && self.bytes + size as usize > self.max_bytes
            && !self.send().await
        {
            return false;
        }
        // A slot for the event, then its bytes; while the cache is full, what is
        // gathered goes first, then the reader waits.
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !self.send().await {
                    return false;
                }
                match self.slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return false,
                }
            }
        };
        merge(&mut self.chunk.permit.events, slot);
        if size > 0 {
            let permit = match self.semaphore.clone().try_acquire_many_owned(size) {
                Ok(p) => p,
                Err(_) => {
                    if !self.send().await {
                        return false;
                    }
                    match self.semaphore.clone().acquire_many_owned(size).await {
                        Ok(p) => p,
                        Err(_) => return false,
                    }
                }
            };
            merge(&mut self.chunk.permit.bytes, permit);
        }
        let size = size as usize;
        match event {
            // A part of a large transaction, its last part included, goes on
            // its own (runs hold whole transactions only).
            Ok(SourceEvent::Transaction(txn)) if txn.more || self.in_parts => {
                self.in_parts = txn.more;
                self.chunk
                    .items
                    .push((Item::Event(Ok(SourceEvent::Transaction(txn))), size, 1));
            }
            Ok(SourceEvent::Transaction(txn)) => {
                let txn = match self.chunk.items.last_mut() {
                    Some((Item::Run(run), bytes, events)) => match run.get_mut() {
                        Some(run) => match run.push(txn) {
                            Ok(()) => {
                                *bytes += size;
                                *events += 1;
                                None
                            }
                            Err(txn) => Some(txn),
                        },
                        None => Some(txn),
                    },
                    _ => Some(txn),
                };
                if let Some(txn) = txn {
                    let mut run = TransactionRun::new();
                    let pushed = run.push(txn);
                    debug_assert!(pushed.is_ok(), "an empty run takes any transaction");
                    self.chunk.items.push((Item::Run(run.into()), size, 1));
                }
            }
            event => self.chunk.items.push((Item::Event(event), size, 1)),
        }
        self.events += 1;
        self.bytes += size;
        if self.events >= self.max_events || self.bytes >= self.max_bytes {
            return self.send().await;
        }
        true
    }
}

/// Poll `future` once: its output if it is ready, else `None` (it stays usable).
async fn poll_once<F: Future>(mut future: Pin<&mut F>) -> Option<F::Output> {
    std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Ready(out) => Poll::Ready(Some(out)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

impl EventCache {
    /// Resume `source` from `start` and read it into a cache of `count` events
    /// and `bytes` bytes, in chunks of at most `max_chunk_bytes` (and a
    /// sixteenth of `bytes`) unless one event is larger, in the caller's span.
    pub(crate) fn start<S: Source + 'static>(
        mut source: S,
        start: &Checkpoint,
        count: usize,
        bytes: usize,
        max_chunk_bytes: usize,
        redo: Option<crate::redo::RedoTee>,
    ) -> Result<Self, PipelineError> {
        source
            .resume(start)
            .map_err(|e| PipelineError::Source(Box::new(e)))?;
        let count = count.clamp(1, Semaphore::MAX_PERMITS);
        // A chunk takes half the slots at most: with redo, a chunk waiting at
        // the fence gives back all but one of its slots, and the next chunk
        // must fit in what is free then, or the source would read one chunk
        // per flush.
        let max_events = (count / 2).clamp(1, CHUNK_EVENTS);
        // Every chunk holds at least one event's slot, so the slots bound the chunks too.
        let (tx, rx) = mpsc::channel::<Chunk>(count);
        let budget = bytes.clamp(1, u32::MAX as usize);
        let semaphore = Arc::new(Semaphore::new(budget));
        let mut gather = Gather {
            tx,
            semaphore: semaphore.clone(),
            slots: Arc::new(Semaphore::new(count)),
            chunk: Gather::empty(max_events),
            events: 0,
            bytes: 0,
            in_parts: false,
            max_events,
            max_bytes: max_chunk_bytes.clamp(1, (budget / 16).max(1)),
        };
        let mut reader = JoinSet::new();
        reader.spawn(
            async move {
                loop {
                    // Transactions the source writes straight into a run, if it does.
                    let (events, room) = gather.room();
                    let run = {
                        let mut run = std::pin::pin!(source.next_run(events, room));
                        match poll_once(run.as_mut()).await {
                            Some(run) => run,
                            None => {
                                if !gather.send().await {
                                    break;
                                }
                                run.await
                            }
                        }
                    };
                    match run {
                        Ok(Some(run)) => {
                            let item = Item::Run(SharedRun::new(run));
                            if let Some(tee) = &redo
                                && let Err(e) = tee.log(&item).await
                            {
                                let _ = gather.push(Err(e), 0).await && gather.send().await;
                                break;
                            }
                            let Item::Run(run) = item else {
                                unreachable!("a run")
                            };
                            if !gather.push_run(run, budget).await {
                                break;
                            }
                            continue;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let _ = gather
                                .push(Err(PipelineError::Source(Box::new(e))), 0)
                                .await
                                && gather.send().await;
                            break;
                        }
                    }
                    let mut next = std::pin::pin!(source.next_event());
                    let event = match poll_once(next.as_mut()).await {
                        Some(event) => event,
                        None => {
                            // The source waits: what is gathered goes out now.
                            if !gather.send().await {
                                break;
                            }
                            next.await
                        }
                    };
                    let event = event.map_err(|e| PipelineError::Source(Box::new(e)));
                    let event = match (&redo, event) {
                        (Some(tee), Ok(event)) => {
                            let item = Item::Event(Ok(event));
                            match tee.log(&item).await {
                                Ok(()) => {
                                    let Item::Event(event) = item else {
                                        unreachable!("an event")
                                    };
                                    event
                                }
                                Err(e) => Err(e),
                            }
                        }
                        (_, event) => event,
                    };
                    let last = matches!(event, Ok(SourceEvent::End) | Err(_));
                    let size = match &event {
                        Ok(SourceEvent::Transaction(t)) => t.wire_bytes(),
                        _ => 0,
                    };
                    // An event larger than the whole budget takes all of it.
                    let size = size.min(budget) as u32;
                    if !gather.push(event, size).await {
                        break;
                    }
                    if last {
                        // The end (or an error) goes out at once.
                        let _ = gather.send().await;
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
