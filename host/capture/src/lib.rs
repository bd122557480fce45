//! `sluice-capture`: what a capture runs. A [`Processor`] is one changefeed's
//! pipeline at one epoch on this capture; it keeps its task position in the meta
//! store ([`MetaProgressStore`]).

mod processor;
pub mod progress;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::ServerLimits;
use sluice_meta::{Compare, MetaStore};
use sluice_owner::ChangefeedId;
use sluice_registry::PluginRegistry;
use tokio::sync::mpsc;

pub use processor::{Live, Outcome, PluginCounters, Processor, plugin_roles};
pub use progress::{Claim, MetaProgressStore, TaskPosition};

/// What the processors of a capture share.
pub struct Ctx {
    pub store: Arc<dyn MetaStore>,
    pub registry: Arc<PluginRegistry>,
    pub data_dir: PathBuf,
    pub capture_id: String,
    /// Processors send their changefeed here when they end.
    pub wake: mpsc::UnboundedSender<ChangefeedId>,
    /// Holds while this capture is the owner: checked in every task position claim.
    pub owner_guard: Compare,
    pub limits: ServerLimits,
    /// `--stop-timeout-ms`.
    pub stop_timeout: Duration,
}

/// An error with its causes, on one line (`outer: cause: cause`).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
