//! Server-wide maximums of what a changefeed may ask for.

/// Server-wide maximums of what a changefeed may ask for.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub max_call_timeout_ms: u64,
    pub max_host_call_timeout_ms: u64,
    pub max_resources: u64,
    pub max_tenant_instances: u64,
}

impl ServerLimits {
    /// Refuses plugin limits past the server's maximums (at create and update).
    pub fn check(&self, info: &sluice_owner::ChangefeedInfo) -> Result<(), String> {
        let plugins = info
            .filters
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("filters[{i}]"), f))
            .chain([("sink".to_string(), &info.sink)]);
        for (at, plugin) in plugins {
            for (key, value, max, flag) in [
                (
                    "call-timeout-ms",
                    plugin.limits.call_timeout_ms,
                    self.max_call_timeout_ms,
                    "--max-call-timeout-ms",
                ),
                (
                    "host-call-timeout-ms",
                    plugin.limits.host_call_timeout_ms,
                    self.max_host_call_timeout_ms,
                    "--max-host-call-timeout-ms",
                ),
                (
                    "max-resources",
                    plugin.limits.max_resources,
                    self.max_resources,
                    "--max-plugin-resources",
                ),
            ] {
                if value > max {
                    return Err(format!(
                        "{at}.limits.{key} is {value}; this server allows at most {max} ({flag})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `info` with every plugin deadline lowered to the server's maximums (a
    /// changefeed stored before the server's maximums were lowered).
    pub fn clamp(&self, mut info: sluice_owner::ChangefeedInfo) -> sluice_owner::ChangefeedInfo {
        for plugin in info.filters.iter_mut().chain([&mut info.sink]) {
            plugin.limits.call_timeout_ms =
                plugin.limits.call_timeout_ms.min(self.max_call_timeout_ms);
            plugin.limits.host_call_timeout_ms = plugin
                .limits
                .host_call_timeout_ms
                .min(self.max_host_call_timeout_ms);
            plugin.limits.max_resources = plugin.limits.max_resources.min(self.max_resources);
        }
        info
    }
}
