//! Server-wide maximums of what a changefeed may ask for.

use crate::changefeed::ChangefeedConfig;

/// Server-wide maximums of what a changefeed may ask for (`sluice server` flags).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// `--max-call-timeout-ms`.
    pub max_call_timeout_ms: u64,
    /// `--max-host-call-timeout-ms`.
    pub max_host_call_timeout_ms: u64,
    /// `--max-plugin-resources`.
    pub max_resources: u64,
    /// `--max-tenant-instances`.
    pub max_tenant_instances: u64,
}

impl ServerLimits {
    /// Refuses plugin limits past the server's maximums (at create and update).
    pub fn check<P>(&self, config: &ChangefeedConfig<P>) -> Result<(), String> {
        for (at, plugin) in config.plugins() {
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

    /// `config` with every plugin deadline lowered to the server's maximums (a
    /// changefeed stored before the server's maximums were lowered).
    pub fn clamp<P>(&self, mut config: ChangefeedConfig<P>) -> ChangefeedConfig<P> {
        for plugin in config.plugins_mut() {
            let limits = &mut plugin.limits;
            limits.call_timeout_ms = limits.call_timeout_ms.min(self.max_call_timeout_ms);
            limits.host_call_timeout_ms = limits
                .host_call_timeout_ms
                .min(self.max_host_call_timeout_ms);
            limits.max_resources = limits.max_resources.min(self.max_resources);
        }
        config
    }
}
