//! How a changefeed names a plugin (`name@version`) and what it grants it. The
//! types are the changefeed config's (`sluice_config`): a stored plugin is the
//! validated plugin table of the file it was created from.

pub use sluice_config::{Capabilities, DataDir, Limits, PluginId};

/// One plugin of a stored changefeed (the sink, or one filter), named
/// `name@version`, with its options, capabilities and quotas.
pub type PluginRef = sluice_config::PluginConfig<PluginId>;
