//! The one place a source is built from its config: one arm per kind of
//! [`SourceConfig`], used by `sluice run` and by a server's processors alike.

use sluice_config::{FilterConfig, SourceConfig};

use crate::filter::TableFilter;
use sluice_core::{Checkpoint, CommitTs, ResumeError, Source, SourceEvent, TransactionRun};

use crate::datagen::{DatagenError, DatagenSource};
use crate::mysql::{MysqlError, MysqlSource};

/// A source of any kind, built by [`build`].
#[allow(
    clippy::large_enum_variant,
    reason = "one source per changefeed, built once and moved once into its reader task"
)]
pub enum AnySource {
    /// The deterministic data generator.
    Datagen(DatagenSource),
    /// A MySQL/MariaDB binlog.
    Mysql(MysqlSource),
}

/// Why a source could not be built or failed while reading.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The data generator's error.
    #[error(transparent)]
    Datagen(#[from] DatagenError),
    /// The binlog reader's error.
    #[error(transparent)]
    Mysql(#[from] MysqlError),
}

impl SourceError {
    /// Whether restarting the changefeed cannot help (the upstream or the
    /// position must be fixed first).
    pub fn is_fatal(&self) -> bool {
        match self {
            SourceError::Datagen(_) => false,
            SourceError::Mysql(e) => e.is_fatal(),
        }
    }
}

/// Builds the source `config` describes (validated). `start_ts` is the
/// changefeed's start ts: a source without a saved position begins after it
/// (datagen starts generated time after it if it is later than `start-millis`;
/// `sluice run` passes zero).
pub fn build(
    config: &SourceConfig,
    filter: &FilterConfig,
    start_ts: CommitTs,
) -> Result<AnySource, SourceError> {
    Ok(match config {
        SourceConfig::Datagen(d) => {
            AnySource::Datagen(DatagenSource::new(d.clone())?.begin_after(start_ts))
        }
        SourceConfig::Mysql(m) => AnySource::Mysql(
            MysqlSource::new(m.clone())
                .with_filter(TableFilter::new(filter))
                .begin_after(start_ts),
        ),
    })
}

/// Checks the source `config` describes the way a create does, and pins what a
/// later start must not decide again: a binlog source connects, checks the
/// server's settings and grants (each failure says what to change), and turns a
/// `now` (or `time:`) start into the position it stands for. Datagen needs no
/// check. Returns the config to store.
pub async fn prepare(config: &SourceConfig) -> Result<SourceConfig, SourceError> {
    Ok(match config {
        SourceConfig::Datagen(_) => config.clone(),
        SourceConfig::Mysql(m) => SourceConfig::Mysql(crate::mysql::prepare(m).await?),
    })
}

impl Source for AnySource {
    type Error = SourceError;

    async fn next_event(&mut self) -> Result<SourceEvent, SourceError> {
        match self {
            AnySource::Datagen(s) => Ok(s.next_event().await?),
            AnySource::Mysql(s) => Ok(s.next_event().await?),
        }
    }

    async fn next_run(
        &mut self,
        max_transactions: usize,
        max_bytes: usize,
    ) -> Result<Option<TransactionRun>, SourceError> {
        match self {
            AnySource::Datagen(s) => Ok(s.next_run(max_transactions, max_bytes).await?),
            AnySource::Mysql(_) => Ok(None),
        }
    }

    fn stats(&self) -> Option<std::sync::Arc<sluice_core::SourceStats>> {
        match self {
            AnySource::Datagen(_) => None,
            AnySource::Mysql(s) => s.stats(),
        }
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        match self {
            AnySource::Datagen(s) => s.resume(from),
            AnySource::Mysql(s) => s.resume(from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::{ChangefeedConfig, RunConfig};

    /// The commit ts of the first transaction `source` produces.
    fn first_commit(mut source: AnySource) -> CommitTs {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            loop {
                match source.next_event().await.unwrap() {
                    SourceEvent::Transaction(t) => return t.commit_ts,
                    SourceEvent::End => panic!("no transaction"),
                    _ => {}
                }
            }
        })
    }

    #[test]
    fn both_modes_build_the_same_source_from_the_same_table() {
        let table = "[source]\ntype = \"datagen\"\nseed = 9\nstart-millis = 1000\n";
        let server = ChangefeedConfig::parse(&format!(
            "{table}[sink]\nplugin = \"sink-blackhole@0.1.0\"\n"
        ))
        .unwrap();
        let run = RunConfig::parse(&format!(
            "[changefeed]\nid = \"x\"\n{table}[sink]\nplugin = \"sink-blackhole\"\n"
        ))
        .unwrap();
        let a = first_commit(build(&server.source, &server.filter, CommitTs::ZERO).unwrap());
        let b = first_commit(build(&run.feed.source, &run.feed.filter, CommitTs::ZERO).unwrap());
        assert_eq!(a, b);
        assert_eq!(a.physical_millis(), 1000);
        // A start ts after start-millis moves generated time past it.
        let start = CommitTs::compose(50_000, 3);
        let c = first_commit(build(&server.source, &server.filter, start).unwrap());
        assert!(c > start && c.physical_millis() == 50_001, "{c:?}");
    }
}
