//! What the owner runtime needs from the world, as one trait ([`OwnerContext`]):
//! the stored records of every changefeed, the plugins a changefeed names, and
//! the work a capture does for a changefeed. The server implements it with the
//! meta store ([`crate::MetaRecords`]), the plugin registry and assignments to
//! the capture through the meta store ([`crate::Assigner`]); the
//! runtime's tests implement it with a fake, step by step, without a process.

use crate::Outcome;
use std::future::Future;
use std::sync::Arc;

use sluice_core::{CheckpointTs, CommitTs};
use sluice_meta::Revision;

use crate::Epoch;
use crate::error::OwnerError;
use crate::id::ChangefeedId;
use crate::info::{ChangefeedInfo, ChangefeedStatus};
use crate::plugin::PluginId;
use sluice_config::SourceConfig;

/// Where a capture's work for one changefeed stands, as the owner sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkProgress {
    /// Every row with commit ts <= this is durable downstream.
    pub checkpoint_ts: CheckpointTs,
    /// The highest ts the source resolved.
    pub resolved_ts: CommitTs,
    /// Row changes read from the source.
    pub rows_read: u64,
    /// Row changes handed to the sink.
    pub rows_written: u64,
    /// Bytes of row data handed to the sink.
    pub bytes_written: u64,
    /// Plugin calls that failed and were retried.
    pub retries: u64,
    /// Upstream events the source read.
    pub source_events: u64,
    /// Upstream statements the source did not recognise (not replicated).
    pub source_skipped_statements: u64,
    /// Upstream time of the source's last event (ms since the Unix epoch; 0:
    /// unknown).
    pub source_time_ms: u64,
    /// Bytes of row data waiting in the event cache.
    pub event_cache_bytes: u64,
    /// Where the latest swap stands at the capture, if the work ran one.
    pub swap: Option<crate::SwapReport>,
    /// What the shadow running at the capture did, if one runs.
    pub shadow: Option<crate::ShadowReport>,
    /// What the continuous validator of the work found, if one runs.
    pub validator: Option<sluice_core::ValidatorReport>,
    /// Where the work's redo log stands, with consistent replication.
    pub redo: Option<crate::RedoReport>,
    /// The capture that runs the work (none: not known, as for work that
    /// runs in this process).
    pub capture: Option<String>,
}

/// The latest progress of running work, read at any time by anyone (queries
/// read it through the owner's snapshot, without asking the owner).
pub trait LiveProgress: Send + Sync {
    /// The latest progress; none before the work has started its pipeline.
    fn progress(&self) -> Option<WorkProgress>;
}

/// Work a capture runs for one changefeed at one epoch: the owner starts it from
/// a checkpoint, may ask it to stop, and observes its progress and outcome.
pub trait Work: Send + Sync + 'static {
    /// The changefeed epoch it runs under.
    fn epoch(&self) -> Epoch;
    /// Its progress, shared.
    fn live(&self) -> Arc<dyn LiveProgress>;
    /// Asks it to write what it read, flush and close; returns at once. Idempotent.
    fn signal_stop(&mut self);
    /// Whether it was asked to stop.
    fn is_stopping(&self) -> bool;
    /// Whether it has ended (its outcome is ready).
    fn is_finished(&self) -> bool;
    /// The changefeed's info changed while the work runs (a swap): it is now
    /// stored at `info_revision`; the work reads it there and follows it.
    fn reconfigure(&mut self, info_revision: Revision);
    /// Waits for its outcome (it must have ended or been asked to stop).
    fn join(self) -> impl Future<Output = Outcome> + Send;
    /// Cancels it without flushing and waits until no write of it can land.
    fn abort(self) -> impl Future<Output = ()> + Send;
}

/// What the meta store holds about every changefeed, as read at start.
#[derive(Debug, Default)]
pub struct Stored {
    /// Readable infos with the revision they were stored at.
    pub infos: Vec<(ChangefeedInfo, Revision)>,
    /// Readable statuses.
    pub statuses: Vec<(ChangefeedId, ChangefeedStatus)>,
    /// Checkpoints the changefeeds' task positions saved: (changefeed, the
    /// changefeed epoch of the run that saved it, checkpoint).
    pub positions: Vec<(ChangefeedId, Epoch, CheckpointTs)>,
    /// Changefeeds with a record this build cannot read: left alone.
    pub unreadable: Vec<ChangefeedId>,
    /// Work an earlier owner assigned that still runs: (changefeed, the epoch
    /// it runs under). A running changefeed of that epoch keeps running where
    /// it is (the new owner adopts it); every other one starts under a new
    /// epoch.
    pub running: Vec<(ChangefeedId, Epoch)>,
}

/// An info to write, compare-and-swap on the revision it was stored at
/// ([`Revision::ZERO`]: the key must be absent).
#[derive(Debug, Clone, Copy)]
pub struct InfoWrite<'a> {
    /// The new info.
    pub info: &'a ChangefeedInfo,
    /// The revision of the stored info this replaces.
    pub revision: Revision,
}

/// Why a write of a changefeed's records failed, by what the owner does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaveError {
    /// The store did not answer or refused for now: keep the old state; retry.
    #[error("meta store: {0}")]
    Unavailable(String),
    /// The store refuses the record itself (too large): reject the request.
    #[error("the changefeed cannot be stored: {0}")]
    Refused(String),
    /// A new changefeed's key holds a record this build cannot read.
    #[error(
        "changefeed {0} has a stored record this server cannot read; remove it with a matching version first"
    )]
    Unreadable(ChangefeedId),
    /// This capture lost its ownership, or someone else changed the record:
    /// the context has stopped the server; nothing more may be written.
    #[error("{0}")]
    Lost(String),
}

/// Everything the owner runtime does outside its own memory.
pub trait OwnerContext: Send + Sync + 'static {
    /// The work a capture runs for a changefeed.
    type Work: Work;

    /// Reads every changefeed's records (once, at start).
    fn load(&self) -> impl Future<Output = Result<Stored, OwnerError>> + Send;

    /// Writes a changefeed's info and/or status in one transaction, under this
    /// capture's ownership. Returns the revision the write landed at.
    fn save(
        &self,
        id: &ChangefeedId,
        info: Option<InfoWrite<'_>>,
        status: Option<&ChangefeedStatus>,
    ) -> impl Future<Output = Result<Revision, SaveError>> + Send;

    /// Deletes what a removed changefeed kept besides its info (status, task
    /// positions); the info stays as a tombstone.
    fn forget(&self, id: &ChangefeedId) -> impl Future<Output = Result<(), SaveError>> + Send;

    /// Checks what a create or update would run: every plugin `info` names
    /// (uploaded, of the right world, its options accepted by its own
    /// `validate-config`, each plugin loaded once) and the source (reachable and
    /// set up for change capture). Returns the source config to store instead
    /// of `info`'s when checking it pinned something (a `now` start becomes the
    /// upstream position it stood for), so that every run starts from the same
    /// place.
    fn check(
        &self,
        info: &ChangefeedInfo,
    ) -> impl Future<Output = Result<Option<SourceConfig>, OwnerError>> + Send;

    /// Checks the plugins `info` names, as [`OwnerContext::check`] does, but
    /// not its source (a swap changes only a plugin of a running changefeed).
    fn check_plugins(
        &self,
        info: &ChangefeedInfo,
    ) -> impl Future<Output = Result<(), OwnerError>> + Send;

    /// Removes an uploaded plugin unless `used_by` names changefeeds using it.
    fn delete_plugin(
        &self,
        tenant: &str,
        plugin: &PluginId,
        used_by: &[String],
    ) -> impl Future<Output = Result<(), OwnerError>> + Send;

    /// Starts `info`'s work under `epoch`, replicating after `checkpoint`;
    /// `info_revision` is the revision `info` is stored at (the server assigns
    /// the work through the meta store, and the capture reads the info there).
    fn start_work(
        &self,
        info: &ChangefeedInfo,
        epoch: Epoch,
        checkpoint: CheckpointTs,
        info_revision: Revision,
    ) -> Self::Work;

    /// A removed changefeed's work-side leftovers (counters) may go.
    fn forget_work(&self, id: &ChangefeedId);

    /// Called once at start, after the owner started what it runs: work of
    /// earlier owners that [`Stored::running`] named and that was not
    /// started again under its epoch is ended. Default: nothing.
    fn release_unadopted(&self) -> impl Future<Output = Result<(), OwnerError>> + Send {
        async { Ok(()) }
    }
}
