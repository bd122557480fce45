//! The one place a source is built from its config: one arm per kind of
//! [`SourceConfig`], used by `sluice run` and by a server's processors alike.

use sluice_config::SourceConfig;
use sluice_core::{Checkpoint, CommitTs, ResumeError, Source, SourceEvent};

use crate::datagen::{DatagenError, DatagenSource};

/// A source of any kind, built by [`build`].
pub enum AnySource {
    /// The deterministic data generator.
    Datagen(DatagenSource),
}

/// Why a source could not be built or failed while reading.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The data generator's error.
    #[error(transparent)]
    Datagen(#[from] DatagenError),
}

/// Builds the source `config` describes (validated). `start_ts` is the
/// changefeed's start ts: a source without a saved position begins after it
/// (datagen starts generated time after it if it is later than `start-millis`;
/// `sluice run` passes zero).
pub fn build(config: &SourceConfig, start_ts: CommitTs) -> Result<AnySource, SourceError> {
    Ok(match config {
        SourceConfig::Datagen(d) => {
            AnySource::Datagen(DatagenSource::new(d.clone())?.begin_after(start_ts))
        }
    })
}

impl Source for AnySource {
    type Error = SourceError;

    async fn next_event(&mut self) -> Result<SourceEvent, SourceError> {
        match self {
            AnySource::Datagen(s) => Ok(s.next_event().await?),
        }
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        match self {
            AnySource::Datagen(s) => s.resume(from),
        }
    }
}
