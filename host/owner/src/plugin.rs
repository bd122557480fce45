//! How a changefeed names a plugin (`name@version`) and what it grants it:
//! its options, capabilities and quotas.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{IdError, InfoError};
use crate::id::{NameKind, validate_name};

/// A plugin at one version, written `name@version` (e.g. `sink-file@0.1.0`). The name
/// follows the changefeed name rule; the version is `MAJOR.MINOR.PATCH` with an
/// optional `-pre-release` and `+build` suffix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PluginId {
    name: String,
    version: String,
}

impl PluginId {
    /// A checked plugin id.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Result<Self, IdError> {
        let (name, version) = (name.into(), version.into());
        validate_name(NameKind::Plugin, &name)?;
        if let Some(problem) = version_problem(&version) {
            return Err(IdError::InvalidVersion {
                plugin: name,
                version,
                problem,
            });
        }
        Ok(Self { name, version })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's version.
    pub fn version(&self) -> &str {
        &self.version
    }
}

fn version_problem(version: &str) -> Option<&'static str> {
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Some("it needs three numbers, MAJOR.MINOR.PATCH");
    }
    for part in parts {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Some("MAJOR, MINOR and PATCH must be numbers");
        }
        if part.len() > 1 && part.starts_with('0') {
            return Some("numbers must not have leading zeros");
        }
        if part.parse::<u64>().is_err() {
            return Some("a number is too large");
        }
    }
    let label_ok = |s: &str| {
        s.split('.')
            .all(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    if pre.is_some_and(|p| !label_ok(p)) {
        return Some("the pre-release part may hold only letters, digits, `-` and `.`");
    }
    if build.is_some_and(|b| !label_ok(b)) {
        return Some("the build part may hold only letters, digits, `-` and `.`");
    }
    None
}

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

impl FromStr for PluginId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        match s.split_once('@') {
            Some((name, version)) => PluginId::new(name, version),
            None => Err(IdError::MissingVersion {
                value: s.to_owned(),
            }),
        }
    }
}

impl TryFrom<String> for PluginId {
    type Error = IdError;

    fn try_from(s: String) -> Result<Self, IdError> {
        s.parse()
    }
}

impl From<PluginId> for String {
    fn from(id: PluginId) -> String {
        id.to_string()
    }
}

/// One plugin in a changefeed: the sink, or one filter of the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PluginRef {
    /// The plugin and its version, `name@version`.
    pub plugin: PluginId,
    /// The plugin's own options, handed to its `validate-config` and `open` as JSON.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// What the plugin may touch; everything not granted here is denied.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Quotas of one plugin instance.
    #[serde(default)]
    pub limits: Limits,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl PluginRef {
    /// A plugin with empty options, no capabilities and default limits.
    pub fn new(plugin: PluginId) -> Self {
        Self {
            plugin,
            config: empty_object(),
            capabilities: Capabilities::default(),
            limits: Limits::default(),
        }
    }

    /// Pure checks of the grants and quotas (the plugin checks its own options).
    pub fn validate(&self) -> Result<(), InfoError> {
        let bad = |field: &'static str, value: &str, problem: String| InfoError::Capability {
            plugin: self.plugin.to_string(),
            field,
            value: value.to_owned(),
            problem,
        };
        for addr in &self.capabilities.tcp {
            if let Some(problem) = host_port_problem(addr, true) {
                return Err(bad("tcp", addr, problem));
            }
        }
        for host in &self.capabilities.http {
            if let Some(problem) = host_port_problem(host, false) {
                return Err(bad("http", host, problem));
            }
        }
        let limit = |field: &'static str, value: u64| {
            if value == 0 {
                Err(InfoError::ZeroLimit {
                    plugin: self.plugin.to_string(),
                    field,
                })
            } else {
                Ok(())
            }
        };
        limit("memory-bytes", self.limits.memory_bytes)?;
        limit("call-timeout-ms", self.limits.call_timeout_ms)?;
        limit("host-call-timeout-ms", self.limits.host_call_timeout_ms)?;
        limit("max-resources", self.limits.max_resources)?;
        Ok(())
    }
}

/// `host:port` (port required) or `host[:port]` (port optional).
fn host_port_problem(value: &str, port_required: bool) -> Option<String> {
    if value.contains("://") {
        return Some("write the host without a scheme".into());
    }
    if value.contains('/') {
        return Some("write the host without a path".into());
    }
    // `[v6]:port` or `host:port`.
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => return Some("an IPv6 address needs a closing `]`".into()),
        }
    } else {
        match value.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        }
    };
    if host.is_empty() || host.chars().any(char::is_whitespace) {
        return Some("the host is empty or contains spaces".into());
    }
    match port {
        None if port_required => Some("a port is required, e.g. `db.internal:5432`".into()),
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => None,
            _ => Some(format!("`{port}` is not a port (1-65535)")),
        },
    }
}

/// What a plugin instance may touch. Deny by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Capabilities {
    /// A private directory for the instance (the host chooses where), seen by the
    /// plugin as `/data`.
    #[serde(default)]
    pub data_dir: bool,
    /// `host:port` pairs the plugin may open TCP connections to.
    #[serde(default)]
    pub tcp: Vec<String>,
    /// Hosts (`name` or `name:port`) the plugin may send HTTP requests to.
    #[serde(default)]
    pub http: Vec<String>,
}

/// Quotas of one plugin instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    /// Sum of all linear memories of the instance, in bytes (default 64 MiB).
    #[serde(default = "default_memory")]
    pub memory_bytes: u64,
    /// CPU time one call may take, in milliseconds (default 5000).
    #[serde(default = "default_call_timeout")]
    pub call_timeout_ms: u64,
    /// Wall time one call may take including host calls (HTTP, sockets), in
    /// milliseconds (default 30000).
    #[serde(default = "default_host_call_timeout")]
    pub host_call_timeout_ms: u64,
    /// Host resources (open files, sockets, streams, HTTP fields and requests)
    /// one instance may hold at once (default 1024).
    #[serde(default = "default_max_resources")]
    pub max_resources: u64,
}

fn default_max_resources() -> u64 {
    1024
}

fn default_memory() -> u64 {
    64 << 20
}
fn default_call_timeout() -> u64 {
    5_000
}
fn default_host_call_timeout() -> u64 {
    30_000
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: default_memory(),
            call_timeout_ms: default_call_timeout(),
            host_call_timeout_ms: default_host_call_timeout(),
            max_resources: default_max_resources(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_id_parses_name_at_version() {
        let id: PluginId = "sink-file@0.1.0".parse().unwrap();
        assert_eq!((id.name(), id.version()), ("sink-file", "0.1.0"));
        assert_eq!(id.to_string(), "sink-file@0.1.0");
        for ok in [
            "a@1.2.3",
            "x@10.0.0-rc.1",
            "x@1.0.0+build.7",
            "x@1.0.0-alpha-2+b",
        ] {
            assert!(ok.parse::<PluginId>().is_ok(), "{ok}");
        }
    }

    #[test]
    fn plugin_id_errors_say_how_to_write_it() {
        let msg = |s: &str| s.parse::<PluginId>().unwrap_err().to_string();
        assert_eq!(
            msg("sink-file"),
            "plugin `sink-file` has no version; write it as name@version, e.g. `sink-file@0.1.0`"
        );
        assert_eq!(
            msg("sink-file@1.0"),
            "version `1.0` of plugin `sink-file` is invalid: it needs three numbers, \
             MAJOR.MINOR.PATCH; write e.g. `0.1.0` or `1.2.0-rc.1`"
        );
        assert!(msg("sink-file@01.0.0").contains("leading zeros"));
        assert!(msg("sink-file@1.0.0-").contains("pre-release"));
        assert!(msg("sink-file@1.x.0").contains("must be numbers"));
        assert!(msg("sink_file@1.0.0").starts_with("plugin name `sink_file` is invalid"));
    }

    #[test]
    fn plugin_ref_reads_kebab_case_with_defaults() {
        let r: PluginRef = serde_json::from_str(
            r#"{"plugin":"sink-file@0.1.0","capabilities":{"data-dir":true,"tcp":["db:5432"]},
                "limits":{"memory-bytes":1048576}}"#,
        )
        .unwrap();
        assert!(r.capabilities.data_dir);
        assert_eq!(r.capabilities.tcp, ["db:5432"]);
        assert_eq!(r.limits.memory_bytes, 1 << 20);
        assert_eq!(r.limits.call_timeout_ms, 5_000);
        assert_eq!(r.limits.host_call_timeout_ms, 30_000);
        assert_eq!(r.config, serde_json::json!({}));
        r.validate().unwrap();
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["plugin"], "sink-file@0.1.0");
        assert_eq!(back["limits"]["call-timeout-ms"], 5_000);

        let err =
            serde_json::from_str::<PluginRef>(r#"{"plugin":"a@1.0.0","quota":{}}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `quota`"), "{err}");
    }

    #[test]
    fn validate_rejects_bad_grants_and_zero_limits() {
        let mut r = PluginRef::new("sink-pg@1.0.0".parse().unwrap());
        r.capabilities.tcp = vec!["db.internal".into()];
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "capability tcp = `db.internal` of plugin sink-pg@1.0.0 is invalid: a port is \
             required, e.g. `db.internal:5432`"
        );
        r.capabilities.tcp = vec!["[::1]:5432".into(), "10.0.0.1:5432".into()];
        r.validate().unwrap();
        r.capabilities.http = vec!["https://api.example.com".into()];
        assert!(
            r.validate()
                .unwrap_err()
                .to_string()
                .ends_with("write the host without a scheme")
        );
        r.capabilities.http = vec!["api.example.com".into(), "api.example.com:8443".into()];
        r.validate().unwrap();
        r.capabilities.tcp = vec!["db:0".into()];
        assert!(
            r.validate()
                .unwrap_err()
                .to_string()
                .contains("`0` is not a port")
        );
        r.capabilities.tcp.clear();
        r.limits.call_timeout_ms = 0;
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "limit call-timeout-ms of plugin sink-pg@1.0.0 is 0; give it a positive value or \
             leave it out for the default"
        );
    }
}
