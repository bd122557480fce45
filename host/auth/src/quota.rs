//! A tenant's quotas and what it uses, and the rule that admits a request.

use serde::{Deserialize, Serialize};

use crate::error::AuthError;

/// The most a quota may be set to (a larger one is a typo, not a plan).
const MAX_COUNT: u64 = 1_000_000;
const MAX_BYTES: u64 = 1 << 40;

/// What one tenant may hold; `None` is no limit. Checked where it is spent:
/// changefeeds and plugin memory at create, update, swap and shadow; plugin
/// bytes and versions at upload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TenantQuota {
    /// Changefeeds that are not removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_changefeeds: Option<u64>,
    /// Bytes of uploaded plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_bytes: Option<u64>,
    /// Uploaded plugin versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_versions: Option<u64>,
    /// Summed `limits.memory` of the plugins of its changefeeds (sinks,
    /// filters, shadow candidates): the linear memory they may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_memory: Option<u64>,
}

/// What one tenant holds now, in the quotas' units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    /// Changefeeds that are not removed.
    pub changefeeds: u64,
    /// Bytes of uploaded plugins.
    pub plugin_bytes: u64,
    /// Uploaded plugin versions.
    pub plugin_versions: u64,
    /// Summed `limits.memory` of its changefeeds' plugins.
    pub plugin_memory: u64,
}

impl TenantQuota {
    /// Refuses numbers past any sensible range.
    pub fn validate(&self) -> Result<(), AuthError> {
        for (key, value, max) in self.entries() {
            if let Some(v) = value
                && v > max
            {
                return Err(AuthError::Invalid(format!(
                    "--max-{key} is {v}; it must be at most {max}"
                )));
            }
        }
        Ok(())
    }

    fn entries(&self) -> [(&'static str, Option<u64>, u64); 4] {
        [
            ("changefeeds", self.max_changefeeds, MAX_COUNT),
            ("plugin-bytes", self.max_plugin_bytes, MAX_BYTES),
            ("plugin-versions", self.max_plugin_versions, MAX_COUNT),
            ("plugin-memory", self.max_plugin_memory, MAX_BYTES),
        ]
    }

    /// Admits a request that takes `tenant` from `now` to `after`, or says
    /// which quota it would pass: the quota, its use and the request. A
    /// request that only shrinks what a tenant holds always passes (a quota
    /// lowered below the use blocks growth, not clean-up).
    pub fn admit(
        &self,
        tenant: &str,
        now: &TenantUsage,
        after: &TenantUsage,
    ) -> Result<(), AuthError> {
        let pairs = [
            (now.changefeeds, after.changefeeds),
            (now.plugin_bytes, after.plugin_bytes),
            (now.plugin_versions, after.plugin_versions),
            (now.plugin_memory, after.plugin_memory),
        ];
        for ((key, max, _), (now, after)) in self.entries().into_iter().zip(pairs) {
            let Some(max) = max else { continue };
            if after > now && after > max {
                let unit = if key.ends_with("bytes") || key.ends_with("memory") {
                    " bytes"
                } else {
                    ""
                };
                return Err(AuthError::Exhausted(format!(
                    "tenant `{tenant}` is over its quota: {key} would be {after}{unit} (it holds {now}{unit}, this request adds {}{unit}); the quota is {max}{unit}. Remove something, or an admin raises it with `sluice cli tenant quota set {tenant} --max-{key} N`",
                    after - now
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_quota_refuses_growth_past_it_naming_quota_use_and_request() {
        let quota = TenantQuota {
            max_changefeeds: Some(2),
            max_plugin_bytes: Some(100),
            max_plugin_versions: Some(3),
            max_plugin_memory: Some(1000),
        };
        let now = TenantUsage {
            changefeeds: 2,
            plugin_bytes: 90,
            plugin_versions: 1,
            plugin_memory: 600,
        };
        let grow = |f: fn(&mut TenantUsage)| {
            let mut after = now;
            f(&mut after);
            quota.admit("acme", &now, &after)
        };
        let e = grow(|u| u.changefeeds += 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tenant `acme` is over its quota: changefeeds would be 3 (it holds 2, this request adds 1); the quota is 2. Remove something, or an admin raises it with `sluice cli tenant quota set acme --max-changefeeds N`"
        );
        assert!(matches!(e, AuthError::Exhausted(_)));
        let e = grow(|u| u.plugin_bytes += 11).unwrap_err();
        assert!(e.to_string().contains("plugin-bytes would be 101 bytes (it holds 90 bytes, this request adds 11 bytes); the quota is 100 bytes"), "{e}");
        assert!(grow(|u| u.plugin_bytes += 10).is_ok());
        assert!(grow(|u| u.plugin_versions += 2).is_ok());
        assert!(grow(|u| u.plugin_versions += 3).is_err());
        assert!(grow(|u| u.plugin_memory += 401).is_err());
        // Shrinking passes even past a lowered quota.
        let over = TenantUsage {
            changefeeds: 5,
            ..now
        };
        let fewer = TenantUsage {
            changefeeds: 4,
            ..now
        };
        assert!(quota.admit("acme", &over, &fewer).is_ok());
        assert!(TenantQuota::default().admit("acme", &now, &over).is_ok());
    }

    #[test]
    fn quotas_past_their_range_are_refused() {
        let q = TenantQuota {
            max_plugin_memory: Some(2 << 40),
            ..TenantQuota::default()
        };
        assert_eq!(
            q.validate().unwrap_err().to_string(),
            "--max-plugin-memory is 2199023255552; it must be at most 1099511627776"
        );
        assert!(TenantQuota::default().validate().is_ok());
    }
}
