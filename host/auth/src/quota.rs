//! A tenant's quotas and what it uses, and the rule that admits a request.

use serde::{Deserialize, Serialize};

use crate::error::AuthError;

/// The most a quota may be set to (a larger one is a typo, not a plan).
const MAX_COUNT: u64 = 1_000_000;
const MAX_BYTES: u64 = 1 << 40;
/// The weight a tenant without a `cpu-weight` has.
pub const DEFAULT_CPU_WEIGHT: u64 = 100;
const MAX_CPU_WEIGHT: u64 = 10_000;
/// Most cores' worth a cap may name, in thousandths of a core.
const MAX_MILLICORES: u64 = 1_000_000;
/// Fewest: a hundredth of a core (below it a plugin's call cannot finish a
/// slice in time).
const MIN_MILLICORES: u64 = 10;
const MAX_CONCURRENCY: u64 = 1024;

/// What one tenant may hold; `None` is no limit. Checked where it is spent:
/// changefeeds, plugin memory, buffer bytes, SQL connections and egress at
/// create, update, swap and shadow; plugin bytes and versions at upload; the
/// CPU settings by the plugin scheduler at every slice of guest code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Summed host-side buffers of its changefeeds: each one's event cache
    /// (`pipeline.event-cache-bytes`, which the replay buffer and the redo
    /// share live in) and a running shadow's queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_buffer_bytes: Option<u64>,
    /// Summed connections its plugins may open to granted databases
    /// (`limits.sql-connections` times the databases granted, per plugin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sql_connections: Option<u64>,
    /// Its share of the plugin threads when tenants contend for them, against
    /// the other busy tenants' weights (default [`DEFAULT_CPU_WEIGHT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
    /// The most CPU its plugins' guest code may use, in thousandths of a
    /// core, even when nobody else wants the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_millicores: Option<u64>,
    /// The most of its plugin calls that run guest code at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_concurrency: Option<u64>,
    /// What its changefeeds may grant their plugins (TCP peers, HTTP hosts,
    /// SQL databases): rules of [`crate::Egress`]; `None` is anything the
    /// server allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Vec<String>>,
}

/// What one tenant holds now, in the quotas' units. Also what one changefeed
/// adds to it (its footprint).
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
    /// Summed host-side buffer bounds of its changefeeds.
    pub buffer_bytes: u64,
    /// Summed database connections its plugins may open.
    pub sql_connections: u64,
}

impl TenantUsage {
    fn counts(&self) -> [u64; 6] {
        [
            self.changefeeds,
            self.plugin_bytes,
            self.plugin_versions,
            self.plugin_memory,
            self.buffer_bytes,
            self.sql_connections,
        ]
    }

    fn from_counts(c: [u64; 6]) -> Self {
        Self {
            changefeeds: c[0],
            plugin_bytes: c[1],
            plugin_versions: c[2],
            plugin_memory: c[3],
            buffer_bytes: c[4],
            sql_connections: c[5],
        }
    }

    /// This use with `before` taken out and `after` put in (a changefeed's
    /// footprint replaced by its new one).
    pub fn replace(&self, before: &TenantUsage, after: &TenantUsage) -> TenantUsage {
        let (now, b, a) = (self.counts(), before.counts(), after.counts());
        Self::from_counts(std::array::from_fn(|i| {
            now[i].saturating_sub(b[i]).saturating_add(a[i])
        }))
    }

    /// The sum of two uses.
    pub fn plus(&self, other: &TenantUsage) -> TenantUsage {
        self.replace(&TenantUsage::default(), other)
    }
}

/// Names of the counted quotas, in [`TenantUsage::counts`] order.
const COUNTED: [&str; 6] = [
    "changefeeds",
    "plugin-bytes",
    "plugin-versions",
    "plugin-memory",
    "buffer-bytes",
    "sql-connections",
];

impl TenantQuota {
    /// Refuses numbers outside any sensible range and egress rules that do
    /// not parse.
    pub fn validate(&self) -> Result<(), AuthError> {
        for (key, value, min, max) in self.ranges() {
            if let Some(v) = value
                && !(min..=max).contains(&v)
            {
                return Err(AuthError::Invalid(if min == 0 {
                    format!("--{key} is {v}; it must be at most {max}")
                } else {
                    format!("--{key} is {v}; it must be between {min} and {max}")
                }));
            }
        }
        if let Some(rules) = &self.egress {
            crate::Egress::parse(rules)?;
        }
        Ok(())
    }

    fn limits(&self) -> [Option<u64>; 6] {
        [
            self.max_changefeeds,
            self.max_plugin_bytes,
            self.max_plugin_versions,
            self.max_plugin_memory,
            self.max_buffer_bytes,
            self.max_sql_connections,
        ]
    }

    fn ranges(&self) -> [(&'static str, Option<u64>, u64, u64); 9] {
        let l = self.limits();
        [
            ("max-changefeeds", l[0], 0, MAX_COUNT),
            ("max-plugin-bytes", l[1], 0, MAX_BYTES),
            ("max-plugin-versions", l[2], 0, MAX_COUNT),
            ("max-plugin-memory", l[3], 0, MAX_BYTES),
            ("max-buffer-bytes", l[4], 0, MAX_BYTES),
            ("max-sql-connections", l[5], 0, MAX_COUNT),
            ("cpu-weight", self.cpu_weight, 1, MAX_CPU_WEIGHT),
            (
                "max-cpu-millicores",
                self.max_cpu_millicores,
                MIN_MILLICORES,
                MAX_MILLICORES,
            ),
            (
                "max-plugin-concurrency",
                self.max_plugin_concurrency,
                1,
                MAX_CONCURRENCY,
            ),
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
        let (nows, afters) = (now.counts(), after.counts());
        for (i, max) in self.limits().into_iter().enumerate() {
            let Some(max) = max else { continue };
            let (key, now, after) = (COUNTED[i], nows[i], afters[i]);
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
            max_buffer_bytes: Some(4096),
            max_sql_connections: Some(8),
            ..TenantQuota::default()
        };
        let now = TenantUsage {
            changefeeds: 2,
            plugin_bytes: 90,
            plugin_versions: 1,
            plugin_memory: 600,
            buffer_bytes: 4000,
            sql_connections: 4,
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
        let e = grow(|u| u.buffer_bytes += 97).unwrap_err();
        assert!(e.to_string().contains("buffer-bytes would be 4097 bytes (it holds 4000 bytes, this request adds 97 bytes); the quota is 4096 bytes"), "{e}");
        let e = grow(|u| u.sql_connections += 5).unwrap_err();
        assert!(e.to_string().contains("sql-connections would be 9 (it holds 4, this request adds 5); the quota is 8. Remove something, or an admin raises it with `sluice cli tenant quota set acme --max-sql-connections N`"), "{e}");
        assert!(grow(|u| u.sql_connections += 4).is_ok());
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
        for (q, says) in [
            (
                TenantQuota {
                    cpu_weight: Some(0),
                    ..TenantQuota::default()
                },
                "--cpu-weight is 0; it must be between 1 and 10000",
            ),
            (
                TenantQuota {
                    max_cpu_millicores: Some(5),
                    ..TenantQuota::default()
                },
                "--max-cpu-millicores is 5; it must be between 10 and 1000000",
            ),
            (
                TenantQuota {
                    max_plugin_concurrency: Some(0),
                    ..TenantQuota::default()
                },
                "--max-plugin-concurrency is 0; it must be between 1 and 1024",
            ),
        ] {
            assert_eq!(q.validate().unwrap_err().to_string(), says);
        }
        let bad = TenantQuota {
            egress: Some(vec!["10.0.0.0/33".into()]),
            ..TenantQuota::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("10.0.0.0/33")
        );
    }

    #[test]
    fn a_footprint_is_replaced_without_wrapping() {
        let now = TenantUsage {
            changefeeds: 3,
            plugin_memory: 100,
            ..TenantUsage::default()
        };
        let old = TenantUsage {
            changefeeds: 1,
            plugin_memory: 150,
            ..TenantUsage::default()
        };
        let new = TenantUsage {
            changefeeds: 1,
            plugin_memory: 40,
            buffer_bytes: 7,
            ..TenantUsage::default()
        };
        let after = now.replace(&old, &new);
        assert_eq!(
            (after.changefeeds, after.plugin_memory, after.buffer_bytes),
            (3, 40, 7)
        );
        assert_eq!(now.plus(&new).changefeeds, 4);
    }
}
