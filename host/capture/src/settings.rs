//! From a changefeed's typed config to the settings of its running parts: the
//! runtime settings of each plugin and where a plugin's private directory is.
//! `sluice run` and a server's processors both build plugins with these.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_config::PluginConfig;
use sluice_owner::ChangefeedId;

/// Runtime settings of one plugin of `changefeed` (`tenant/name`): `name` is
/// how logs and metrics name it, `data_dir` the directory granted to it, if any
/// (already resolved: the server's choice or `sluice run`'s path).
pub fn plugin_settings<P: Display>(
    plugin: &PluginConfig<P>,
    changefeed: &str,
    name: String,
    data_dir: Option<PathBuf>,
) -> sluice_runtime::PluginSettings {
    let limits = &plugin.limits;
    sluice_runtime::PluginSettings {
        name,
        changefeed: changefeed.to_string(),
        config_json: plugin.config_json(),
        limits: sluice_runtime::PluginLimits {
            memory_bytes: limits.memory_bytes(),
            call_timeout: Duration::from_millis(limits.call_timeout_ms),
            host_call_timeout: Duration::from_millis(limits.host_call_timeout_ms),
            max_batch_bytes: None,
            max_resources: usize::try_from(limits.max_resources).unwrap_or(usize::MAX),
            sql_connections: usize::try_from(limits.sql_connections).unwrap_or(64),
        },
        capabilities: sluice_runtime::Capabilities {
            data_dir,
            // Validated: every entry is an ip:port pair.
            tcp_allow: plugin
                .capabilities
                .tcp
                .iter()
                .filter_map(|a| a.parse().ok())
                .collect(),
            http_allow: plugin.capabilities.http.clone(),
            // A server adds its own listeners and its write fence
            // (`Ctx::plugin_settings`).
            reserved: Vec::new(),
            fence: sluice_core::WriteFence::open(),
            sql: plugin
                .capabilities
                .sql
                .iter()
                .map(|(name, dsn)| (name.clone(), dsn.clone()))
                .collect(),
        },
    }
}

/// Where a server keeps the private directory of one plugin of a changefeed
/// (`role` is `sink` or `filter-<i>`).
pub fn plugin_data_dir(data_dir: &Path, id: &ChangefeedId, role: &str) -> PathBuf {
    data_dir
        .join("plugin-data")
        .join(id.tenant())
        .join(id.name())
        .join(role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_plugin_becomes_its_runtime_settings() {
        let config = sluice_config::ChangefeedConfig::parse(
            r#"
[source]
type = "datagen"
[sink]
plugin = "sink-file@0.1.0"
config = { format = "csv" }
limits = { memory = "32MiB", call-timeout-ms = 7, max-resources = 20 }
capabilities = { data-dir = true, tcp = ["10.0.0.1:5432"], http = ["api.example:443"] }
"#,
        )
        .unwrap();
        let sink = &config.sink;
        let s = plugin_settings(
            sink,
            "t/c",
            sink.plugin.to_string(),
            Some(PathBuf::from("/x")),
        );
        assert_eq!(s.name, "sink-file@0.1.0");
        assert_eq!(s.config_json, r#"{"format":"csv"}"#);
        assert_eq!(s.limits.memory_bytes, 32 << 20);
        assert_eq!(s.limits.call_timeout, Duration::from_millis(7));
        assert_eq!(s.limits.host_call_timeout, Duration::from_secs(30));
        assert_eq!(s.limits.max_resources, 20);
        assert_eq!(s.capabilities.data_dir, Some(PathBuf::from("/x")));
        assert_eq!(s.capabilities.tcp_allow, ["10.0.0.1:5432".parse().unwrap()]);
        assert_eq!(s.capabilities.http_allow, ["api.example:443"]);
        let id = ChangefeedId::new("acme", "orders").unwrap();
        assert_eq!(
            plugin_data_dir(Path::new("d"), &id, "sink"),
            PathBuf::from("d/plugin-data/acme/orders/sink")
        );
    }
}
