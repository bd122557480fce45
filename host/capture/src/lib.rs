//! `sluice-capture`: what a capture runs, i.e. starting and stopping work. A
//! [`Processor`] is one changefeed's pipeline at one epoch on this capture; it
//! keeps its task position in the meta store ([`MetaProgressStore`]) and reports
//! there how it runs and how it ended. The owner never reaches a processor: it
//! writes assignments to the meta store, and the capture's [`Agent`] watches
//! them, starts a processor (through [`Capture`]) for each new one and stops or
//! aborts it when the assignment says so or goes.

mod agent;
mod builder;
mod processor;
pub mod progress;
mod reserved;
mod settings;
pub mod shipped;
pub mod validate;
mod work;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::ServerLimits;
use sluice_meta::{Compare, MetaStore};
use sluice_registry::PluginRegistry;

pub use agent::Agent;
pub use builder::{Changefeed, ChangefeedBuilder, UpTo, open_redo};
pub use processor::{Live, PluginCounters, Processor, SwapStats, plugin_roles};
pub use progress::{Claim, MetaProgressStore, Reporter};
pub use reserved::Reserved;
pub use settings::{plugin_data_dir, plugin_settings};
pub use sluice_protocol::{CaptureInfo, Counters, TaskPosition};
pub use work::{Capture, LocalRun, Side, registry_error, remove_redo};

/// What the processors of a capture share.
pub struct Ctx {
    /// The meta store (task positions).
    pub store: Arc<dyn MetaStore>,
    /// Where processors load their plugins from.
    pub registry: Arc<PluginRegistry>,
    /// The server's data dir (the plugins' private directories are under it).
    pub data_dir: PathBuf,
    /// Where redo logs are kept (`<tenant>/<changefeed>` under it).
    pub redo_root: sluice_redo::StorageUri,
    /// This capture's id (task positions are saved under it).
    pub capture_id: String,
    /// Holds while this capture is registered under its lease
    /// (`Registration::guard`): checked in every task position claim and save,
    /// so a capture whose lease ended (cut off from the store, or too slow to
    /// renew it) writes nothing more.
    pub capture_guard: Compare,
    /// Open while this capture may write downstream
    /// (`Registration::fence`): every plugin it runs is refused writes once
    /// it closes, and a run that ends then is `fenced`, not failed.
    pub fence: sluice_core::WriteFence,
    /// What a changefeed may ask for (stored ones are clamped to it).
    pub limits: ServerLimits,
    /// `--stop-timeout-ms`.
    pub stop_timeout: Duration,
    /// The server's own addresses, which no plugin may be granted.
    pub reserved: Reserved,
    /// The runtime processors run on (and every task they start): apart from
    /// the one serving the API and the owner, so a node busy moving rows still
    /// answers at once.
    pub work: tokio::runtime::Handle,
    /// The outboxes of the runs this capture reads for other captures (the
    /// server serves them on its gRPC listener, `sluice_ship::ShipService`).
    pub shipping: sluice_ship::Shipping,
    /// How this capture reaches the others' gRPC listeners (a receiver its
    /// reader): plain, or TLS with `--peer-ca`.
    pub peers: sluice_ship::Peers,
}

impl Ctx {
    /// [`plugin_settings`] of a plugin this capture runs: besides its grants,
    /// the server's own listeners, which it never reaches.
    pub fn plugin_settings<P: std::fmt::Display>(
        &self,
        plugin: &sluice_config::PluginConfig<P>,
        changefeed: &str,
        name: String,
        data_dir: Option<PathBuf>,
    ) -> sluice_runtime::PluginSettings {
        let mut settings = plugin_settings(plugin, changefeed, name, data_dir);
        settings.capabilities.reserved = self.reserved.listeners();
        settings.capabilities.fence = self.fence.clone();
        settings
    }
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
