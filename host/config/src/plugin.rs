//! A plugin table (`[sink]` or one `[[filters]]` entry): which plugin, its own
//! options, its quotas ([`Limits`]) and what it may touch ([`Capabilities`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bounds::*;
use crate::bytes::ByteSize;
use crate::changefeed::Mode;
use crate::error::{ConfigError, invalid};
use crate::name::PluginId;

/// One plugin of a changefeed: the sink, or one filter of the chain. `P` is how
/// the plugin is named: a [`PluginId`] (`name@version`, from a server's registry)
/// or, in `sluice run`, a `String` (a name looked up in the plugin dir, or a path).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    bound(deserialize = "P: Deserialize<'de>")
)]
pub struct PluginConfig<P = PluginId> {
    /// The plugin: `name@version` in a server; a name or a `.wasm` path in
    /// `sluice run`.
    pub plugin: P,
    /// The plugin's own options, handed to its `validate-config` and `open` as JSON.
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
    /// Quotas of one instance of the plugin.
    #[serde(default)]
    pub limits: Limits,
    /// What the plugin may touch; everything not granted here is denied.
    #[serde(default)]
    pub capabilities: Capabilities,
}

impl<P> PluginConfig<P> {
    /// A plugin with empty options, no capabilities and default limits.
    pub fn new(plugin: P) -> Self {
        Self {
            plugin,
            config: serde_json::Map::new(),
            limits: Limits::default(),
            capabilities: Capabilities::default(),
        }
    }

    /// The plugin's options as the JSON text handed to it.
    pub fn config_json(&self) -> String {
        serde_json::Value::Object(self.config.clone()).to_string()
    }

    /// Checks beyond the types, `at` naming the table (`sink`, `filters[0]`):
    /// quotas, the options' size and the grants, as allowed in `mode`.
    pub fn validate(&self, at: &str, mode: Mode) -> Result<(), ConfigError> {
        self.limits.validate(at)?;
        let len = self.config_json().len();
        if len > MAX_PLUGIN_CONFIG_BYTES {
            return invalid!(
                "{at}.config is {len} bytes as JSON; at most {MAX_PLUGIN_CONFIG_BYTES} (64KiB)"
            );
        }
        self.capabilities.validate(at, mode)
    }
}

impl PluginConfig<String> {
    /// Where the component file is (`sluice run`): a value ending in `.wasm` or
    /// containing `/` is a path, anything else a name in `plugin_dir`.
    pub fn resolve(&self, plugin_dir: &Path) -> PathBuf {
        if is_path(&self.plugin) {
            PathBuf::from(&self.plugin)
        } else {
            plugin_dir.join(format!("{}.wasm", self.plugin))
        }
    }

    /// The plugin's name for logs (the file stem).
    pub fn name(&self) -> String {
        Path::new(&self.plugin)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.plugin.clone())
    }
}

pub(crate) fn is_path(plugin: &str) -> bool {
    plugin.ends_with(".wasm") || plugin.contains('/')
}

/// Checks how `plugin` names a plugin in `mode` and returns the id a server
/// loads it by (`None` in `sluice run`).
pub(crate) fn check_plugin_name(
    at: &str,
    plugin: &str,
    mode: Mode,
) -> Result<Option<PluginId>, ConfigError> {
    if plugin.trim().is_empty() {
        return invalid!(
            "{at}.plugin is empty: name a plugin (e.g. \"sink-file\") or a .wasm path"
        );
    }
    match mode {
        Mode::Server if is_path(plugin) => invalid!(
            "{at}.plugin `{plugin}` is a path; a server runs uploaded plugins, named \
             name@version (sluice cli plugin upload)"
        ),
        Mode::Server => plugin
            .parse::<PluginId>()
            .map(Some)
            .map_err(|e| ConfigError::Invalid(format!("{at}.plugin: {e}"))),
        Mode::Run if !is_path(plugin) && plugin.contains('@') => invalid!(
            "{at}.plugin `{plugin}` names an uploaded plugin of a server; sluice run loads a \
             name from the plugin dir or a .wasm path"
        ),
        Mode::Run => Ok(None),
    }
}

/// Quotas of one plugin instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    /// Linear memory quota, e.g. `"64MiB"` or a number of bytes. Unset: what
    /// the plugin declares it needs (a `sluice:limits` section, see
    /// [`Limits::resolve_memory`]), else [`DEFAULT_MEMORY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    /// CPU time one call may take, in milliseconds.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_ms: u64,
    /// Wall time one call may take including host calls (HTTP, sockets), in milliseconds.
    #[serde(default = "default_host_call_timeout")]
    pub host_call_timeout_ms: u64,
    /// Host resources (open files, sockets, streams, HTTP fields) one instance may
    /// hold at once.
    #[serde(default = "default_max_resources")]
    pub max_resources: u64,
    /// Connections the host may open to each database granted in
    /// `capabilities.sql` (shared by the plugin's instances; 1 to 64).
    #[serde(default = "default_sql_connections")]
    pub sql_connections: u64,
}

/// The memory quota of a plugin that declares no need and is given none.
pub const DEFAULT_MEMORY: u64 = 64 << 20;
fn default_call_timeout() -> u64 {
    5_000
}
fn default_host_call_timeout() -> u64 {
    30_000
}
fn default_max_resources() -> u64 {
    1024
}
fn default_sql_connections() -> u64 {
    4
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: None,
            call_timeout_ms: default_call_timeout(),
            host_call_timeout_ms: default_host_call_timeout(),
            max_resources: default_max_resources(),
            sql_connections: default_sql_connections(),
        }
    }
}

impl Limits {
    /// The memory quota in bytes: as given, else [`DEFAULT_MEMORY`] (a
    /// plugin's declared need is filled in by [`Limits::resolve_memory`]
    /// once the plugin is known).
    pub fn memory_bytes(&self) -> u64 {
        self.memory.map_or(DEFAULT_MEMORY, |m| m.0)
    }

    /// Fill an unset memory quota with what the plugin declares it needs
    /// (`declared`, read from its `sluice:limits` section), never below
    /// [`DEFAULT_MEMORY`] and within the quota's range; a quota the config
    /// gives is kept. Resolved once, where the changefeed is made, so that
    /// what a tenant is charged is what its instances get.
    pub fn resolve_memory(&mut self, declared: Option<u64>) {
        if self.memory.is_none() {
            let bytes = declared.unwrap_or(0).clamp(DEFAULT_MEMORY, MAX_MEMORY);
            self.memory = Some(ByteSize(bytes));
        }
    }

    /// Every quota against its range; `at` names the plugin table.
    pub fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let memory = self.memory_bytes();
        if memory < MIN_MEMORY {
            return invalid!("{at}.limits.memory is {memory} bytes; give a plugin at least 1MiB");
        }
        if memory > MAX_MEMORY {
            return invalid!("{at}.limits.memory is {memory} bytes; at most 4GiB");
        }
        for (key, value) in [
            ("call-timeout-ms", self.call_timeout_ms),
            ("host-call-timeout-ms", self.host_call_timeout_ms),
        ] {
            if !(1..=MAX_TIMEOUT_MS).contains(&value) {
                return invalid!(
                    "{at}.limits.{key} is {value}; it must be between 1 and {MAX_TIMEOUT_MS} ms \
                     (10 minutes)"
                );
            }
        }
        if !(1..=64).contains(&self.sql_connections) {
            return invalid!(
                "{at}.limits.sql-connections is {}; it must be between 1 and 64",
                self.sql_connections
            );
        }
        if !(MIN_RESOURCES..=MAX_RESOURCES).contains(&self.max_resources) {
            return invalid!(
                "{at}.limits.max-resources is {}; it must be between {MIN_RESOURCES} and {MAX_RESOURCES}",
                self.max_resources
            );
        }
        Ok(())
    }
}

/// What a plugin instance may touch. Deny by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Capabilities {
    /// A private directory, seen by the plugin as `/data`.
    #[serde(default)]
    pub data_dir: DataDir,
    /// `ip:port` pairs the plugin may open TCP connections to.
    #[serde(default)]
    pub tcp: Vec<String>,
    /// Hosts (`name` or `name:port`) the plugin may send HTTP requests to.
    #[serde(default)]
    pub http: Vec<String>,
    /// Databases the host runs statements on for a sink (the `sql` interface):
    /// a name the plugin uses, and a `mysql://user:password@host:port/db`
    /// (MySQL, MariaDB, TiDB) or `postgres://user:password@host:port/db`
    /// (PostgreSQL) DSN it never sees.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sql: BTreeMap<String, String>,
}

/// A host a grant lets a plugin reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedHost {
    /// The key that grants it (`sink.capabilities.http[0]`).
    pub key: String,
    /// The grant as written (for a DSN, only its `host:port`).
    pub grant: String,
    /// A name or an IP address.
    pub host: String,
    /// The port; `None` when every port is granted (an HTTP host without one).
    pub port: Option<u16>,
}

/// Most databases granted to one plugin.
pub const MAX_SQL_GRANTS: usize = 16;
/// Longest DSN.
pub const MAX_DSN_CHARS: usize = 1024;

/// Why a `capabilities.sql` DSN cannot be used; `None` when it can. Never
/// repeats the DSN (it holds a password).
fn dsn_problem(dsn: &str) -> Option<String> {
    if dsn.len() > MAX_DSN_CHARS || dsn.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Some(format!(
            "the DSN must be at most {MAX_DSN_CHARS} characters without spaces or control characters"
        ));
    }
    let Some(rest) = ["mysql://", "postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| dsn.strip_prefix(scheme))
    else {
        return Some(
            "the DSN must be mysql://user:password@host:port/database (MySQL, MariaDB, TiDB) \
             or postgres://user:password@host:port/database (PostgreSQL)"
                .into(),
        );
    };
    if !dsn.starts_with("mysql://")
        && let Some(mode) = rest
            .split_once('?')
            .and_then(|(_, query)| query.split('&').find_map(|p| p.strip_prefix("sslmode=")))
        && ![
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ]
        .contains(&mode)
    {
        return Some(format!(
            "sslmode `{}` is not one of disable, prefer, require, verify-ca, verify-full",
            mode.chars().take(40).collect::<String>()
        ));
    }
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = host.split(['/', '?']).next().unwrap_or_default();
    if host.is_empty() {
        return Some("the DSN names no host".into());
    }
    if let Some((_, port)) = host.rsplit_once(':')
        && !host.ends_with(']')
        && !matches!(port.parse::<u16>(), Ok(1..))
    {
        return Some("the DSN's port is not a port (1-65535)".into());
    }
    None
}

impl Capabilities {
    /// Every host these grants let the plugin reach, for a server to check
    /// against its own addresses (`at` is the plugin's table). Call after
    /// validation; a DSN's password is never part of it.
    pub fn hosts(&self, at: &str) -> Vec<GrantedHost> {
        let mut out = Vec::new();
        for (i, addr) in self.tcp.iter().enumerate() {
            if let Ok(a) = addr.parse::<SocketAddr>() {
                out.push(GrantedHost {
                    key: format!("{at}.capabilities.tcp[{i}]"),
                    grant: addr.clone(),
                    host: a.ip().to_string(),
                    port: Some(a.port()),
                });
            }
        }
        for (i, value) in self.http.iter().enumerate() {
            if let Some((host, port)) = split_host(value) {
                out.push(GrantedHost {
                    key: format!("{at}.capabilities.http[{i}]"),
                    grant: value.clone(),
                    host: host.to_string(),
                    port: port.and_then(|p| p.parse().ok()),
                });
            }
        }
        for (name, dsn) in &self.sql {
            if let Ok(url) = url::Url::parse(dsn)
                && let Some(host) = url.host_str()
            {
                let default = if url.scheme() == "mysql" { 3306 } else { 5432 };
                out.push(GrantedHost {
                    key: format!("{at}.capabilities.sql.{name}"),
                    grant: format!("{host}:{}", url.port().unwrap_or(default)),
                    host: host
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_string(),
                    port: Some(url.port().unwrap_or(default)),
                });
            }
        }
        out
    }

    /// TCP grants are `ip:port` pairs (no name lookups), HTTP grants hosts with
    /// an optional port, at most [`MAX_GRANTS`] of each; the data dir is a path
    /// in `sluice run` and `true` in a server (which chooses where).
    pub fn validate(&self, at: &str, mode: Mode) -> Result<(), ConfigError> {
        for (key, list) in [("tcp", &self.tcp), ("http", &self.http)] {
            if list.len() > MAX_GRANTS {
                return invalid!(
                    "{at}.capabilities.{key} lists {} entries; at most {MAX_GRANTS}",
                    list.len()
                );
            }
        }
        for addr in &self.tcp {
            if addr.parse::<SocketAddr>().is_err() {
                return invalid!("{at}.capabilities.tcp: `{addr}` is not an ip:port pair");
            }
        }
        for host in &self.http {
            if let Some(problem) = http_host_problem(host) {
                return invalid!("{at}.capabilities.http: `{host}` is not a host: {problem}");
            }
        }
        if self.sql.len() > MAX_SQL_GRANTS {
            return invalid!(
                "{at}.capabilities.sql lists {} databases; at most {MAX_SQL_GRANTS}",
                self.sql.len()
            );
        }
        for (name, dsn) in &self.sql {
            let name_ok = (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !name_ok {
                return invalid!(
                    "{at}.capabilities.sql: `{}` is not a grant name (1 to 64 letters, digits, - or _)",
                    name.chars()
                        .take(64)
                        .flat_map(char::escape_default)
                        .collect::<String>()
                );
            }
            if let Some(problem) = dsn_problem(dsn) {
                return invalid!("{at}.capabilities.sql.{name}: {problem}");
            }
        }
        match (&self.data_dir, mode) {
            (DataDir::At(path), Mode::Server) => invalid!(
                "{at}.capabilities.data-dir is the path {}; the server chooses the directory: \
                 write data-dir = true",
                path.display()
            ),
            (DataDir::HostChosen, Mode::Run) => invalid!(
                "{at}.capabilities.data-dir is true; sluice run needs the directory's path, \
                 e.g. data-dir = \"out/sink\""
            ),
            (DataDir::At(path), Mode::Run) if path.as_os_str().is_empty() => {
                invalid!("{at}.capabilities.data-dir is empty; give a directory's path")
            }
            _ => Ok(()),
        }
    }
}

/// `name` or `name:port`: no scheme, no path, a port in 1..=65535.
/// `host[:port]` or `[v6]:port` split into host and port text; `None` when a
/// `[` is not closed.
fn split_host(value: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = value.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        return Some((host, tail.strip_prefix(':')));
    }
    Some(match value.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (value, None),
    })
}

fn http_host_problem(value: &str) -> Option<String> {
    if value.is_empty() || value.len() > MAX_GRANT_CHARS || value.chars().any(char::is_control) {
        return Some(format!(
            "it must be 1 to {MAX_GRANT_CHARS} characters without control characters"
        ));
    }
    if value.contains("://") {
        return Some("write the host without a scheme".into());
    }
    if value.contains('/') {
        return Some("write the host without a path".into());
    }
    let Some((host, port)) = split_host(value) else {
        return Some("an IPv6 address needs a closing `]`".into());
    };
    if host.is_empty() || host.chars().any(char::is_whitespace) {
        return Some("the host is empty or contains spaces".into());
    }
    match port.map(str::parse::<u16>) {
        None | Some(Ok(1..)) => None,
        Some(_) => Some(format!(
            "`{}` is not a port (1-65535)",
            port.unwrap_or_default()
        )),
    }
}

/// `capabilities.data-dir`: written as a path in `sluice run`, as `true` in a
/// server (the server chooses where), `false` or absent for none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DataDir {
    /// No filesystem.
    #[default]
    Denied,
    /// A directory of the host's choosing (a server: under its data dir).
    HostChosen,
    /// This directory (`sluice run`).
    At(PathBuf),
}

impl DataDir {
    /// Whether a directory is granted at all.
    pub fn is_granted(&self) -> bool {
        !matches!(self, DataDir::Denied)
    }
}

impl Serialize for DataDir {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            DataDir::Denied => s.serialize_bool(false),
            DataDir::HostChosen => s.serialize_bool(true),
            DataDir::At(path) => path.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for DataDir {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DataDir;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path (sluice run) or true (a server chooses the directory)")
            }
            fn visit_bool<E>(self, v: bool) -> Result<DataDir, E> {
                Ok(if v {
                    DataDir::HostChosen
                } else {
                    DataDir::Denied
                })
            }
            fn visit_str<E>(self, v: &str) -> Result<DataDir, E> {
                Ok(DataDir::At(PathBuf::from(v)))
            }
        }
        d.deserialize_any(Visitor)
    }
}
