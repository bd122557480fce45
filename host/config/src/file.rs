//! The changefeed file `sluice run` reads (TOML, kebab-case keys, unknown keys
//! rejected). Parsing and validation are pure; nothing here touches the disk
//! except [`ChangefeedFile::load`] reading the file itself.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use sluice_source::DatagenConfig;

/// A whole changefeed description.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChangefeedFile {
    /// Where built plugins are looked up by name (`<plugin-dir>/<name>.wasm`).
    #[serde(default = "default_plugin_dir")]
    pub plugin_dir: PathBuf,
    /// Where the host keeps its own state (precompiled plugins).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    pub changefeed: ChangefeedSection,
    pub source: SourceConfig,
    /// Filter chain, applied in order.
    #[serde(default)]
    pub filters: Vec<PluginSection>,
    pub sink: PluginSection,
    #[serde(default)]
    pub pipeline: PipelineSection,
}

fn default_plugin_dir() -> PathBuf {
    PathBuf::from("target/plugins")
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(".sluice")
}

/// `[changefeed]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChangefeedSection {
    /// Changefeed id: ASCII letters and digits, optionally joined by single hyphens
    /// (TiCDC's rule), at most 128 characters.
    pub id: String,
    /// Save positions in `<data-dir>/meta.redb` and, when run again, resume from the
    /// saved checkpoint (rows that may have been written before are flagged replay).
    #[serde(default)]
    pub resume: bool,
}

/// `[source]`, chosen by `type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SourceConfig {
    /// The built-in deterministic data generator.
    Datagen(DatagenConfig),
}

/// `[sink]` or one `[[filters]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PluginSection {
    /// A plugin name (looked up as `<plugin-dir>/<name>.wasm`) or a path to a `.wasm` file.
    pub plugin: String,
    /// The plugin's own options, passed to it as JSON.
    #[serde(default)]
    pub config: toml::Table,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub capabilities: CapabilitiesSection,
}

/// `[sink.limits]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LimitsSection {
    /// Linear memory quota, e.g. `"64MiB"` or a number of bytes.
    #[serde(default = "default_memory")]
    pub memory: ByteSize,
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
}

fn default_max_resources() -> u64 {
    1024
}

fn default_memory() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_call_timeout() -> u64 {
    5_000
}
fn default_host_call_timeout() -> u64 {
    30_000
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            memory: default_memory(),
            call_timeout_ms: default_call_timeout(),
            host_call_timeout_ms: default_host_call_timeout(),
            max_resources: default_max_resources(),
        }
    }
}

/// `[sink.capabilities]`: everything is denied unless listed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CapabilitiesSection {
    /// A host directory the plugin may use, seen by it as `/data`.
    pub data_dir: Option<PathBuf>,
    /// `ip:port` pairs the plugin may open TCP connections to.
    #[serde(default)]
    pub tcp: Vec<String>,
    /// Hosts (`name` or `name:port`) the plugin may send HTTP requests to.
    #[serde(default)]
    pub http: Vec<String>,
}

/// `[pipeline]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PipelineSection {
    /// Most rows per batch.
    #[serde(default = "default_batch_rows")]
    pub max_batch_rows: usize,
    /// Most bytes per batch, e.g. `"4MiB"`.
    #[serde(default = "default_batch_bytes")]
    pub max_batch_bytes: ByteSize,
    /// How often the sink is flushed and the checkpoint moves, in milliseconds.
    #[serde(default = "default_flush_ms")]
    pub flush_interval_ms: u64,
    /// Decoded transactions that may wait between source and pipeline.
    #[serde(default = "default_cache")]
    pub event_cache_count: usize,
    /// Bytes of row data that may wait there, e.g. `"64MiB"` (an event larger
    /// than this waits alone); the source blocks when either bound is reached.
    #[serde(default = "default_cache_bytes")]
    pub event_cache_bytes: ByteSize,
    /// Retries of one failing plugin call before the changefeed fails.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// How often the checkpoint is saved (with `resume` or in a server), at most,
    /// in milliseconds.
    #[serde(default = "default_checkpoint_ms")]
    pub checkpoint_interval_ms: u64,
    /// How far ahead of the rows written the saved fence runs, in milliseconds of
    /// upstream time: larger means fewer saves and more rows flagged replay after a
    /// crash.
    #[serde(default = "default_fence_ms")]
    pub fence_ahead_ms: u64,
}

fn default_checkpoint_ms() -> u64 {
    500
}
fn default_fence_ms() -> u64 {
    2_000
}

fn default_batch_rows() -> usize {
    1024
}
fn default_batch_bytes() -> ByteSize {
    ByteSize(4 << 20)
}
fn default_flush_ms() -> u64 {
    1000
}
fn default_cache() -> usize {
    10_240
}
fn default_cache_bytes() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_retries() -> u32 {
    8
}

impl Default for PipelineSection {
    fn default() -> Self {
        Self {
            max_batch_rows: default_batch_rows(),
            max_batch_bytes: default_batch_bytes(),
            flush_interval_ms: default_flush_ms(),
            event_cache_count: default_cache(),
            event_cache_bytes: default_cache_bytes(),
            max_retries: default_retries(),
            checkpoint_interval_ms: default_checkpoint_ms(),
            fence_ahead_ms: default_fence_ms(),
        }
    }
}

/// A size in bytes, written as a number or as `"<n>B|KiB|MiB|GiB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => parse_size(&s)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write e.g. \"64MiB\" or a number of bytes"))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}`; use B, KiB, MiB or GiB"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

impl ChangefeedFile {
    /// Read and parse `path`, then validate.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid changefeed file {}", path.display()))
    }

    /// Parse TOML text, then validate.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        check_file_size(text)?;
        let file: ChangefeedFile = toml::from_str(text)?;
        file.validate()?;
        Ok(file)
    }

    /// Checks beyond the types (pure, no I/O).
    pub fn validate(&self) -> anyhow::Result<()> {
        let id = &self.changefeed.id;
        sluice_owner::validate_name(sluice_owner::NameKind::Changefeed, id)
            .map_err(|e| anyhow::anyhow!("changefeed.id: {e}"))?;
        match &self.source {
            SourceConfig::Datagen(d) => d.validate().context("in [source]")?,
        }
        check_filters(self.filters.len())?;
        for (i, section) in self.filters.iter().enumerate() {
            section.validate(&format!("filters[{i}]"))?;
        }
        self.sink.validate("sink")?;
        self.pipeline.validate()
    }

    /// The pipeline tuning.
    pub fn pipeline_config(&self) -> sluice_processor::PipelineConfig {
        self.pipeline.to_config()
    }
}

/// The ranges of the changefeed file's numbers, checked when a file is validated
/// (documented in docs/configuration.md).
pub mod bounds {
    /// Largest changefeed file, in bytes.
    pub const MAX_FILE_BYTES: usize = 128 << 10;
    /// Most filters in a chain.
    pub const MAX_FILTERS: usize = 16;
    /// Largest plugin options (`config`), as JSON bytes.
    pub const MAX_PLUGIN_CONFIG_BYTES: usize = 64 << 10;
    /// Most entries in `capabilities.tcp` and in `capabilities.http`.
    pub const MAX_GRANTS: usize = 64;
    /// Longest `capabilities.http` entry.
    pub const MAX_GRANT_CHARS: usize = 255;
    /// Plugin memory quota: 1 MiB ..= 4 GiB (a 32-bit linear memory's reach).
    pub const MIN_MEMORY: u64 = 1 << 20;
    pub const MAX_MEMORY: u64 = 4 << 30;
    /// Plugin call deadlines: 1 ms ..= 10 minutes.
    pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;
    /// Host resources per plugin instance: 16 ..= 65536.
    pub const MIN_RESOURCES: u64 = 16;
    pub const MAX_RESOURCES: u64 = 65_536;
    /// `pipeline.max-batch-rows`: 1 ..= 65536.
    pub const MAX_BATCH_ROWS: usize = 65_536;
    /// `pipeline.max-batch-bytes`: 1 KiB ..= 256 MiB.
    pub const MIN_BATCH_BYTES: u64 = 1 << 10;
    pub const MAX_BATCH_BYTES: u64 = 256 << 20;
    /// `pipeline.event-cache-count`: 1 ..= 1048576.
    pub const MAX_EVENT_CACHE: usize = 1 << 20;
    /// `pipeline.event-cache-bytes`: 1 MiB ..= 1 GiB.
    pub const MIN_EVENT_CACHE_BYTES: u64 = 1 << 20;
    pub const MAX_EVENT_CACHE_BYTES: u64 = 1 << 30;
    /// `pipeline.max-retries`: 0 ..= 1000.
    pub const MAX_RETRIES: u32 = 1_000;
    /// Intervals in `[pipeline]`: at most one hour.
    pub const MAX_INTERVAL_MS: u64 = 3_600_000;
}

impl PipelineSection {
    /// Checks beyond the types: every number against its range.
    pub fn validate(&self) -> anyhow::Result<()> {
        use bounds::*;
        if !(1..=MAX_BATCH_ROWS).contains(&self.max_batch_rows) {
            bail!(
                "pipeline.max-batch-rows is {}; it must be between 1 and {MAX_BATCH_ROWS}",
                self.max_batch_rows
            );
        }
        if !(MIN_BATCH_BYTES..=MAX_BATCH_BYTES).contains(&self.max_batch_bytes.0) {
            bail!(
                "pipeline.max-batch-bytes is {} bytes; it must be between 1KiB and 256MiB",
                self.max_batch_bytes.0
            );
        }
        if !(1..=MAX_EVENT_CACHE).contains(&self.event_cache_count) {
            bail!(
                "pipeline.event-cache-count is {}; it must be between 1 and {MAX_EVENT_CACHE}",
                self.event_cache_count
            );
        }
        if !(MIN_EVENT_CACHE_BYTES..=MAX_EVENT_CACHE_BYTES).contains(&self.event_cache_bytes.0) {
            bail!(
                "pipeline.event-cache-bytes is {} bytes; it must be between 1MiB and 1GiB",
                self.event_cache_bytes.0
            );
        }
        if self.max_retries > MAX_RETRIES {
            bail!(
                "pipeline.max-retries is {}; at most {MAX_RETRIES}",
                self.max_retries
            );
        }
        if self.flush_interval_ms == 0 {
            bail!("pipeline.flush-interval-ms must be at least 1");
        }
        for (key, value) in [
            ("flush-interval-ms", self.flush_interval_ms),
            ("checkpoint-interval-ms", self.checkpoint_interval_ms),
            ("fence-ahead-ms", self.fence_ahead_ms),
        ] {
            if value > MAX_INTERVAL_MS {
                bail!("pipeline.{key} is {value}; at most {MAX_INTERVAL_MS} (one hour)");
            }
        }
        Ok(())
    }

    /// The pipeline tuning.
    pub fn to_config(&self) -> sluice_processor::PipelineConfig {
        let p = self;
        sluice_processor::PipelineConfig {
            max_batch_rows: p.max_batch_rows,
            max_batch_bytes: p.max_batch_bytes.0 as usize,
            flush_interval: Duration::from_millis(p.flush_interval_ms),
            event_cache_count: p.event_cache_count,
            event_cache_bytes: p.event_cache_bytes.0 as usize,
            max_retries: p.max_retries,
            checkpoint_interval: Duration::from_millis(p.checkpoint_interval_ms),
            fence_ahead: Duration::from_millis(p.fence_ahead_ms),
            ..Default::default()
        }
    }
}

/// Checks a plugin's grants: TCP grants are `ip:port` pairs (no name lookups);
/// at most [`bounds::MAX_GRANTS`] of each kind, HTTP hosts of bounded length.
pub fn check_grants(at: &str, tcp: &[String], http: &[String]) -> anyhow::Result<()> {
    use bounds::*;
    for (key, list) in [("tcp", tcp), ("http", http)] {
        if list.len() > MAX_GRANTS {
            bail!(
                "{at}.capabilities.{key} lists {} entries; at most {MAX_GRANTS}",
                list.len()
            );
        }
    }
    for host in http {
        if host.is_empty() || host.len() > MAX_GRANT_CHARS || host.chars().any(char::is_control) {
            bail!(
                "{at}.capabilities.http: each host must be 1 to {MAX_GRANT_CHARS} characters without control characters"
            );
        }
    }
    check_tcp(at, tcp)
}

/// Checks a plugin's options: at most [`bounds::MAX_PLUGIN_CONFIG_BYTES`] as JSON.
pub fn check_plugin_config(at: &str, config: &toml::Table) -> anyhow::Result<()> {
    let len = serde_json::to_vec(config)
        .with_context(|| format!("{at}.config cannot be turned into JSON"))?
        .len();
    if len > bounds::MAX_PLUGIN_CONFIG_BYTES {
        bail!(
            "{at}.config is {len} bytes as JSON; at most {} (64KiB)",
            bounds::MAX_PLUGIN_CONFIG_BYTES
        );
    }
    Ok(())
}

/// Checks the size of a changefeed file and the length of its filter chain.
pub fn check_file_size(text: &str) -> anyhow::Result<()> {
    if text.len() > bounds::MAX_FILE_BYTES {
        bail!(
            "the changefeed file is {} bytes; at most {} (128KiB)",
            text.len(),
            bounds::MAX_FILE_BYTES
        );
    }
    Ok(())
}

/// Checks the number of filters.
pub fn check_filters(count: usize) -> anyhow::Result<()> {
    if count > bounds::MAX_FILTERS {
        bail!(
            "the changefeed has {count} filters; at most {}",
            bounds::MAX_FILTERS
        );
    }
    Ok(())
}

/// TCP grants are `ip:port` pairs (no name lookups).
pub fn check_tcp(at: &str, grants: &[String]) -> anyhow::Result<()> {
    for addr in grants {
        addr.parse::<SocketAddr>().map_err(|_| {
            anyhow::anyhow!("{at}.capabilities.tcp: `{addr}` is not an ip:port pair")
        })?;
    }
    Ok(())
}

impl LimitsSection {
    pub fn validate(&self, at: &str) -> anyhow::Result<()> {
        use bounds::*;
        if self.memory.0 < MIN_MEMORY {
            bail!(
                "{at}.limits.memory is {} bytes; give a plugin at least 1MiB",
                self.memory.0
            );
        }
        if self.memory.0 > MAX_MEMORY {
            bail!(
                "{at}.limits.memory is {} bytes; at most 4GiB",
                self.memory.0
            );
        }
        if self.call_timeout_ms == 0 || self.host_call_timeout_ms == 0 {
            bail!("{at}.limits: timeouts must be at least 1 ms");
        }
        if self.call_timeout_ms > MAX_TIMEOUT_MS || self.host_call_timeout_ms > MAX_TIMEOUT_MS {
            bail!("{at}.limits: timeouts may be at most {MAX_TIMEOUT_MS} ms (10 minutes)");
        }
        if !(MIN_RESOURCES..=MAX_RESOURCES).contains(&self.max_resources) {
            bail!(
                "{at}.limits.max-resources is {}; it must be between {MIN_RESOURCES} and {MAX_RESOURCES}",
                self.max_resources
            );
        }
        Ok(())
    }
}

impl PluginSection {
    fn validate(&self, at: &str) -> anyhow::Result<()> {
        if self.plugin.trim().is_empty() {
            bail!("{at}.plugin is empty: name a plugin (e.g. \"sink-file\") or a .wasm path");
        }
        self.limits.validate(at)?;
        check_plugin_config(at, &self.config)?;
        check_grants(at, &self.capabilities.tcp, &self.capabilities.http)
    }

    /// Where the component file is.
    pub fn resolve(&self, plugin_dir: &Path) -> PathBuf {
        if self.plugin.ends_with(".wasm") || self.plugin.contains('/') {
            PathBuf::from(&self.plugin)
        } else {
            plugin_dir.join(format!("{}.wasm", self.plugin))
        }
    }

    /// The plugin's name for logs (file stem).
    pub fn name(&self) -> String {
        Path::new(&self.plugin)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.plugin.clone())
    }

    /// Runtime settings for this plugin.
    pub fn settings(&self) -> anyhow::Result<sluice_runtime::PluginSettings> {
        let config_json = serde_json::to_string(&self.config)
            .context("plugin config cannot be turned into JSON")?;
        Ok(sluice_runtime::PluginSettings {
            name: self.name(),
            config_json,
            limits: sluice_runtime::PluginLimits {
                memory_bytes: self.limits.memory.0,
                call_timeout: Duration::from_millis(self.limits.call_timeout_ms),
                host_call_timeout: Duration::from_millis(self.limits.host_call_timeout_ms),
                max_batch_bytes: None,
                max_resources: self.limits.max_resources as usize,
            },
            capabilities: sluice_runtime::Capabilities {
                data_dir: self.capabilities.data_dir.clone(),
                tcp_allow: self
                    .capabilities
                    .tcp
                    .iter()
                    .filter_map(|a| a.parse().ok())
                    .collect(),
                http_allow: self.capabilities.http.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[changefeed]
id = "demo"

[source]
type = "datagen"
total-rows = 100

[[filters]]
plugin = "filter-mask"
config = { columns = ["email"] }

[sink]
plugin = "sink-file"
[sink.config]
dir = "out"
[sink.limits]
memory = "32MiB"
[sink.capabilities]
data-dir = "out/demo"
"#;

    #[test]
    fn parses_a_complete_changefeed() {
        let f = ChangefeedFile::parse(GOOD).unwrap();
        assert_eq!(f.changefeed.id, "demo");
        assert_eq!(f.sink.limits.memory, ByteSize(32 << 20));
        assert_eq!(f.filters.len(), 1);
        let s = f.sink.settings().unwrap();
        assert_eq!(s.config_json, r#"{"dir":"out"}"#);
        assert_eq!(
            f.sink.resolve(Path::new("p")),
            PathBuf::from("p/sink-file.wasm")
        );
        let SourceConfig::Datagen(d) = &f.source;
        assert_eq!(d.total_rows, 100);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name_and_line() {
        let text = GOOD.replace("total-rows = 100", "total-rows = 100\ntotal-rowz = 5");
        let err = format!("{:#}", ChangefeedFile::parse(&text).unwrap_err());
        assert!(err.contains("unknown field `total-rowz`"), "{err}");
        assert!(err.contains("line 5") && err.contains("[source]"), "{err}");
        let text = GOOD.replace("memory = \"32MiB\"", "memory = \"32MB\"");
        let err = format!("{:#}", ChangefeedFile::parse(&text).unwrap_err());
        assert!(err.contains("unknown size unit `MB`"), "{err}");
    }

    #[test]
    fn semantic_errors_name_the_key() {
        let text = GOOD.replace("id = \"demo\"", "id = \"-bad id\"");
        let err = format!("{:#}", ChangefeedFile::parse(&text).unwrap_err());
        assert!(err.contains("changefeed.id"), "{err}");
        let text = GOOD.replace("data-dir = \"out/demo\"", "tcp = [\"localhost\"]");
        let err = format!("{:#}", ChangefeedFile::parse(&text).unwrap_err());
        assert!(err.contains("sink.capabilities.tcp: `localhost`"), "{err}");
        let text = GOOD.replace("type = \"datagen\"", "type = \"binlog\"");
        let err = format!("{:#}", ChangefeedFile::parse(&text).unwrap_err());
        assert!(err.contains("unknown variant `binlog`"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,400}") {
            let _ = ChangefeedFile::parse(&text);
        }

        #[test]
        fn parser_never_panics_on_mutated_configs(pos in 0usize..400, byte in proptest::num::u8::ANY) {
            let mut bytes = GOOD.as_bytes().to_vec();
            let at = pos % bytes.len();
            bytes[at] = byte;
            if let Ok(text) = String::from_utf8(bytes) {
                let _ = ChangefeedFile::parse(&text);
            }
        }
    }
}
