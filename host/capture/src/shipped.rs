//! The source of a run whose changefeed has its tables split across
//! captures (ADR 0013): the changefeed's own source with the receivers'
//! tables shipped to them (this capture reads), or what the reading capture
//! ships (this capture receives). A run of a whole changefeed reads as
//! before.

use sluice_core::{
    Checkpoint, DdlEvent, ResumeError, Source, SourceEvent, SourceStats, TableSchema,
    TransactionRun,
};
use sluice_owner::ChangefeedId;
use sluice_processor::{LogEverything, Progress, TablesHere};
use sluice_protocol::{Epoch, ShipRole, Shipment};
use sluice_ship::{
    FlushReporter, MAX_WINDOW, MIN_WINDOW, Routes, ShipError, ShipKey, ShipRequest, ShippedSource,
    Split, SplitError,
};
use sluice_source::{AnySource, SourceError};
use tokio::sync::watch;

use crate::Ctx;
use crate::builder::UpTo;

/// How long a receiver keeps asking for a shipment the reader has not
/// opened yet, and how long a reader waits for a receiver to come.
pub const SHIP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The source a run reads.
pub enum RunSource {
    /// The changefeed's source, every table.
    Whole(UpTo<AnySource>),
    /// The changefeed's source, the receivers' tables shipped to them.
    Reads(Split<UpTo<AnySource>>),
    /// What the reading capture ships.
    Receives(ShippedSource),
}

/// Why a run's source stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunSourceError {
    /// The changefeed's source failed.
    #[error(transparent)]
    Source(SourceError),
    /// A shipment could not go on.
    #[error(transparent)]
    Ship(ShipError),
}

impl RunSourceError {
    /// Whether running again cannot help (the upstream must be fixed, or a
    /// shipment was malformed).
    pub fn is_fatal(&self) -> bool {
        match self {
            Self::Source(e) => e.is_fatal(),
            Self::Ship(e) => matches!(e, ShipError::Malformed(_)),
        }
    }
}

impl From<SplitError<SourceError>> for RunSourceError {
    fn from(e: SplitError<SourceError>) -> Self {
        match e {
            SplitError::Source(e) => Self::Source(e),
            SplitError::Ship(e) => Self::Ship(e),
        }
    }
}

impl Source for RunSource {
    type Error = RunSourceError;

    async fn next_event(&mut self) -> Result<SourceEvent, RunSourceError> {
        match self {
            Self::Whole(s) => s.next_event().await.map_err(RunSourceError::Source),
            Self::Reads(s) => s.next_event().await.map_err(Into::into),
            Self::Receives(s) => s.next_event().await.map_err(RunSourceError::Ship),
        }
    }

    async fn next_run(
        &mut self,
        max_transactions: usize,
        max_bytes: usize,
    ) -> Result<Option<TransactionRun>, RunSourceError> {
        match self {
            Self::Whole(s) => s
                .next_run(max_transactions, max_bytes)
                .await
                .map_err(RunSourceError::Source),
            Self::Reads(s) => s
                .next_run(max_transactions, max_bytes)
                .await
                .map_err(Into::into),
            Self::Receives(s) => s
                .next_run(max_transactions, max_bytes)
                .await
                .map_err(RunSourceError::Ship),
        }
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        match self {
            Self::Whole(s) => s.resume(from),
            Self::Reads(s) => s.resume(from),
            Self::Receives(s) => s.resume(from),
        }
    }

    fn stats(&self) -> Option<std::sync::Arc<SourceStats>> {
        match self {
            Self::Whole(s) => s.stats(),
            Self::Reads(s) => s.stats(),
            Self::Receives(_) => None,
        }
    }
}

/// A run's source, with what the pipeline must know of the other captures.
pub struct RunInput {
    /// The source.
    pub source: RunSource,
    /// Reading: what the receivers report and the DDLs across captures (the
    /// checkpoint and those DDLs wait for them), and where the pipeline tells
    /// the source of each DDL it applied.
    pub elsewhere: Option<sluice_processor::Elsewhere>,
    /// Receiving: where to report this capture's durable ts.
    pub reporter: Option<FlushReporter>,
}

/// Which of a split changefeed's tables and DDLs are the reading capture's.
struct Here(std::sync::Arc<Routes>);

impl TablesHere for Here {
    fn runs(&self, schema: &TableSchema) -> bool {
        self.0.runs_here(&schema.qualified_name())
    }

    fn applies(&self, ddl: &DdlEvent) -> bool {
        self.0.applies_here(ddl)
    }
}

/// The source of `id`'s run at `epoch` on this capture, as `shipment` says
/// (none: every table from `source`); `window` is the bytes a receiver
/// holds in flight. A reading capture that writes a redo log (`logs`)
/// hands its pipeline every table's events, for the log, and ships only
/// what the log has (ADR 0013).
pub async fn input(
    ctx: &Ctx,
    id: &ChangefeedId,
    (epoch, shipment): (Epoch, Option<&Shipment>),
    source: UpTo<AnySource>,
    window: u64,
    logs: bool,
) -> Result<RunInput, ShipError> {
    let key = |capture: &str| ShipKey {
        tenant: id.tenant().to_string(),
        changefeed: id.name().to_string(),
        epoch: epoch.0,
        capture: capture.to_string(),
    };
    let Some(shipment) = shipment else {
        return Ok(RunInput {
            source: RunSource::Whole(source),
            elsewhere: None,
            reporter: None,
        });
    };
    match &shipment.role {
        ShipRole::Reads { receivers } => {
            let (logged, log_durable) = watch::channel(0);
            let mut destinations = Vec::with_capacity(receivers.len());
            for r in receivers {
                let (key, token) = (key(&r.capture), shipment.token.clone());
                let outbox = if logs {
                    ctx.shipping
                        .open_after_log(key, token, log_durable.clone())?
                } else {
                    ctx.shipping.open(key, token)?
                };
                destinations.push((outbox, r.tables.clone()));
            }
            let (passed, applied) = watch::channel(0);
            let mut split = Split::new(source, destinations).with_applied(applied);
            let log = if logs {
                split = split.logging_every_table();
                Some(LogEverything {
                    here: std::sync::Arc::new(Here(split.routes())),
                    logged,
                })
            } else {
                None
            };
            let elsewhere = sluice_processor::Elsewhere {
                durable: split.durable_watches(),
                across: split.across(),
                passed,
                log,
            };
            Ok(RunInput {
                source: RunSource::Reads(split),
                elsewhere: Some(elsewhere),
                reporter: None,
            })
        }
        ShipRole::Receives { reader, address } => {
            drop(source);
            tracing::info!(%reader, %address, "Receiving this capture's tables from the reading capture.");
            let shipped = ShippedSource::connect_to(
                &ctx.peers,
                address,
                ShipRequest {
                    key: key(&ctx.capture_id),
                    token: shipment.token.clone(),
                    window: window.clamp(MIN_WINDOW, MAX_WINDOW),
                    patience: SHIP_PATIENCE,
                },
            )
            .await?;
            let reporter = shipped.flush_reporter();
            Ok(RunInput {
                source: RunSource::Receives(shipped),
                elsewhere: None,
                reporter: Some(reporter),
            })
        }
    }
}

/// Reports each checkpoint the pipeline flushes and saves to the reading
/// capture, until the pipeline is gone. The reader saves its source position
/// with its own checkpoint, which never passes what the receivers saved, so
/// that the next run (from the lowest checkpoint of the sides) starts at the
/// reader's saved position; a DDL across captures waits for what they
/// flushed. A report the stream had no room for is sent again.
pub async fn report_durable(mut progress: watch::Receiver<Progress>, reporter: FlushReporter) {
    const AGAIN: std::time::Duration = std::time::Duration::from_millis(200);
    let mut reported = None;
    let mut flushed_reported = None;
    loop {
        let (flushed, saved) = {
            let p = progress.borrow_and_update();
            (p.checkpoint_ts.get(), p.saved_checkpoint_ts.get())
        };
        if flushed_reported < Some(flushed) && reporter.report(flushed) {
            flushed_reported = Some(flushed);
        }
        if reported < Some(saved) && reporter.report_saved(saved) {
            reported = Some(saved);
        }
        let unsent = reported < Some(saved) || flushed_reported < Some(flushed);
        tokio::select! {
            changed = progress.changed() => if changed.is_err() {
                return;
            },
            () = tokio::time::sleep(AGAIN), if unsent => {}
        }
    }
}
