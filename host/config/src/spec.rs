//! The changefeed file `sluice server` takes on create and update: the file
//! `sluice run` reads, without `[changefeed]` (the id comes with the request), and
//! with plugins named `name@version` from the tenant's registry. A plugin gets a
//! data directory by `capabilities.data-dir = true`; the server chooses where.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use sluice_core::CommitTs;
use sluice_owner::{Capabilities, ChangefeedId, ChangefeedInfo, Limits, PluginId, PluginRef};

use crate::file::{
    LimitsSection, PipelineSection, SourceConfig, check_file_size, check_filters, check_grants,
    check_plugin_config,
};

/// A changefeed file as the server takes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FeedSpec {
    pub source: SourceConfig,
    #[serde(default)]
    pub filters: Vec<SpecPlugin>,
    pub sink: SpecPlugin,
    #[serde(default)]
    pub pipeline: PipelineSection,
}

/// `[sink]` or one `[[filters]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SpecPlugin {
    /// `name@version` of an uploaded plugin.
    pub plugin: PluginId,
    #[serde(default)]
    pub config: toml::Table,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub capabilities: Capabilities,
}

impl FeedSpec {
    /// Parse and check a changefeed file (pure).
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        check_file_size(text)?;
        let table: toml::Table = toml::from_str(text).map_err(|e| one_line(text, &e))?;
        if table.contains_key("changefeed") {
            bail!(
                "remove the [changefeed] section: the server takes the changefeed's name from the request"
            );
        }
        let spec: FeedSpec = toml::from_str(text).map_err(|e| one_line(text, &e))?;
        match &spec.source {
            SourceConfig::Datagen(d) => d.validate().context("in [source]")?,
        }
        check_filters(spec.filters.len())?;
        for (at, plugin) in spec.plugins() {
            plugin.limits.validate(&at)?;
            check_plugin_config(&at, &plugin.config)?;
            check_grants(&at, &plugin.capabilities.tcp, &plugin.capabilities.http)?;
        }
        spec.pipeline.validate()?;
        Ok(spec)
    }

    /// Every plugin with where it is in the file (`filters[0]`, ..., `sink`).
    pub fn plugins(&self) -> impl Iterator<Item = (String, &SpecPlugin)> {
        self.filters
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("filters[{i}]"), f))
            .chain(std::iter::once(("sink".to_string(), &self.sink)))
    }

    /// The changefeed description the owner stores. `text` is the file this spec
    /// was parsed from; it is kept for display.
    pub fn to_info(
        &self,
        text: &str,
        id: ChangefeedId,
        start_ts: CommitTs,
        target_ts: Option<CommitTs>,
    ) -> anyhow::Result<ChangefeedInfo> {
        let raw: toml::Table = toml::from_str(text)?;
        let json = |v: Option<&toml::Value>| -> anyhow::Result<serde_json::Value> {
            Ok(match v {
                Some(v) => serde_json::to_value(v)?,
                None => serde_json::Value::Null,
            })
        };
        let mut info =
            ChangefeedInfo::new(id, json(raw.get("source"))?, self.sink.to_ref()?, start_ts);
        info.filters = self
            .filters
            .iter()
            .map(SpecPlugin::to_ref)
            .collect::<anyhow::Result<_>>()?;
        info.pipeline = json(raw.get("pipeline"))?;
        info.spec = Some(text.to_string());
        info.target_ts = target_ts;
        Ok(info)
    }
}

impl SpecPlugin {
    fn to_ref(&self) -> anyhow::Result<PluginRef> {
        Ok(PluginRef {
            plugin: self.plugin.clone(),
            config: serde_json::to_value(&self.config)?,
            capabilities: self.capabilities.clone(),
            limits: Limits {
                memory_bytes: self.limits.memory.0,
                call_timeout_ms: self.limits.call_timeout_ms,
                host_call_timeout_ms: self.limits.host_call_timeout_ms,
                max_resources: self.limits.max_resources,
            },
        })
    }
}

/// A TOML error on one line: `line L, column C: what`, for API answers.
fn one_line(text: &str, e: &toml::de::Error) -> anyhow::Error {
    let what = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            anyhow::anyhow!("line {line}, column {column}: {what}")
        }
        None => anyhow::anyhow!("{what}"),
    }
}

/// The source of a stored changefeed.
pub fn source_of(info: &ChangefeedInfo) -> anyhow::Result<SourceConfig> {
    serde_json::from_value(info.source.clone()).context("the stored [source] no longer parses")
}

/// The pipeline tuning of a stored changefeed.
pub fn pipeline_of(info: &ChangefeedInfo) -> anyhow::Result<PipelineSection> {
    if info.pipeline.is_null() {
        return Ok(PipelineSection::default());
    }
    serde_json::from_value(info.pipeline.clone()).context("the stored [pipeline] no longer parses")
}

/// Where the server keeps the private directory of one plugin of a changefeed
/// (`role` is `sink` or `filter-<i>`).
pub fn plugin_data_dir(data_dir: &Path, id: &ChangefeedId, role: &str) -> PathBuf {
    data_dir
        .join("plugin-data")
        .join(id.tenant())
        .join(id.name())
        .join(role)
}

/// Runtime settings of one plugin of a changefeed.
pub fn settings_of(
    plugin: &PluginRef,
    data_dir: Option<PathBuf>,
) -> sluice_runtime::PluginSettings {
    sluice_runtime::PluginSettings {
        name: plugin.plugin.to_string(),
        config_json: plugin.config.to_string(),
        limits: sluice_runtime::PluginLimits {
            memory_bytes: plugin.limits.memory_bytes,
            call_timeout: Duration::from_millis(plugin.limits.call_timeout_ms),
            host_call_timeout: Duration::from_millis(plugin.limits.host_call_timeout_ms),
            max_batch_bytes: None,
            max_resources: plugin.limits.max_resources as usize,
        },
        capabilities: sluice_runtime::Capabilities {
            data_dir: if plugin.capabilities.data_dir {
                data_dir
            } else {
                None
            },
            tcp_allow: plugin
                .capabilities
                .tcp
                .iter()
                .filter_map(|a| a.parse().ok())
                .collect(),
            http_allow: plugin.capabilities.http.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[source]
type = "datagen"
total-rows = 100

[[filters]]
plugin = "filter-mask@0.1.0"
config = { columns = ["email"] }

[sink]
plugin = "sink-file@0.1.0"
[sink.config]
format = "csv"
[sink.limits]
memory = "32MiB"
[sink.capabilities]
data-dir = true

[pipeline]
max-batch-rows = 10
"#;

    #[test]
    fn a_spec_becomes_the_stored_description_and_back() {
        let spec = FeedSpec::parse(GOOD).unwrap();
        let id = ChangefeedId::new("acme", "orders").unwrap();
        let info = spec
            .to_info(GOOD, id.clone(), CommitTs::new(5), Some(CommitTs::new(9)))
            .unwrap();
        assert_eq!(info.sink.plugin.to_string(), "sink-file@0.1.0");
        assert_eq!(info.sink.config, serde_json::json!({"format": "csv"}));
        assert_eq!(info.sink.limits.memory_bytes, 32 << 20);
        assert!(info.sink.capabilities.data_dir);
        assert_eq!(info.filters[0].plugin.to_string(), "filter-mask@0.1.0");
        assert_eq!(info.source["total-rows"], 100);
        assert_eq!(info.target_ts, Some(CommitTs::new(9)));
        info.validate().unwrap();
        let SourceConfig::Datagen(d) = source_of(&info).unwrap();
        assert_eq!(d.total_rows, 100);
        assert_eq!(pipeline_of(&info).unwrap().max_batch_rows, 10);
        let settings = settings_of(&info.sink, Some(PathBuf::from("/x")));
        assert_eq!(settings.config_json, r#"{"format":"csv"}"#);
        assert_eq!(settings.capabilities.data_dir, Some(PathBuf::from("/x")));
        assert_eq!(
            plugin_data_dir(Path::new("d"), &id, "sink"),
            PathBuf::from("d/plugin-data/acme/orders/sink")
        );
    }

    #[test]
    fn bad_specs_say_what_to_fix() {
        let cases = [
            (
                GOOD.replace("sink-file@0.1.0", "sink-file"),
                "`sink-file` has no version",
            ),
            (
                format!("[changefeed]\nid = \"x\"\n{GOOD}"),
                "remove the [changefeed] section",
            ),
            (
                GOOD.replace("data-dir = true", "data-dir = \"/tmp\""),
                "invalid type: string",
            ),
            (
                GOOD.replace("max-batch-rows = 10", "max-batch-rows = 0"),
                "pipeline.max-batch-rows is 0; it must be between 1 and 65536",
            ),
            (
                GOOD.replace("memory = \"32MiB\"", "memory = \"1KiB\""),
                "sink.limits.memory is 1024 bytes",
            ),
            (
                GOOD.replace("[pipeline]", "[pipelin]"),
                "unknown field `pipelin`",
            ),
            (
                GOOD.replace("data-dir = true", "tcp = [\"db:5432\"]"),
                "sink.capabilities.tcp: `db:5432` is not an ip:port pair",
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", FeedSpec::parse(&text).unwrap_err());
            assert!(err.contains(want), "want `{want}` in: {err}");
        }
    }

    #[test]
    fn every_number_is_checked_against_its_range_at_validation() {
        let cases = [
            (
                GOOD.replace(
                    "max-batch-rows = 10",
                    "event-cache-count = 9223372036854775807",
                ),
                "pipeline.event-cache-count is 9223372036854775807; it must be between 1 and 1048576",
            ),
            (
                GOOD.replace("max-batch-rows = 10", "max-batch-rows = 4294967295"),
                "pipeline.max-batch-rows is 4294967295; it must be between 1 and 65536",
            ),
            (
                GOOD.replace("max-batch-rows = 10", "max-batch-bytes = \"1GiB\""),
                "pipeline.max-batch-bytes is 1073741824 bytes",
            ),
            (
                GOOD.replace("max-batch-rows = 10", "max-retries = 4294967295"),
                "pipeline.max-retries is 4294967295; at most 1000",
            ),
            (
                GOOD.replace(
                    "total-rows = 100",
                    "total-rows = 0\nmax-txn-rows = 4294967295",
                ),
                "max-txn-rows is 4294967295",
            ),
            (
                GOOD.replace(
                    "total-rows = 100",
                    "total-rows = 100\n[source.mix]\ninsert = 4294967295\nupdate = 1\ndelete = 1",
                ),
                "mix.insert is 4294967295",
            ),
            (
                GOOD.replace(
                    "total-rows = 100",
                    "total-rows = 100\nstart-millis = 70368744177660",
                ),
                "start-millis is 70368744177660",
            ),
            (
                GOOD.replace("memory = \"32MiB\"", "memory = \"5GiB\""),
                "sink.limits.memory is 5368709120 bytes; at most 4GiB",
            ),
            (
                GOOD.replace(
                    "data-dir = true",
                    &format!("http = [{}]", vec!["\"h\""; 65].join(",")),
                ),
                "sink.capabilities.http lists 65 entries; at most 64",
            ),
            (
                GOOD.replace(
                    "\n[sink]\n",
                    &format!(
                        "{}\n[sink]\n",
                        "[[filters]]\nplugin = \"filter-mask@0.1.0\"\n".repeat(16)
                    ),
                ),
                "the changefeed has 17 filters; at most 16",
            ),
            (
                GOOD.replace(
                    "format = \"csv\"",
                    &format!("format = \"{}\"", "c".repeat(70_000)),
                ),
                "bytes as JSON; at most 65536 (64KiB)",
            ),
            (
                format!("{GOOD}\n#{}", "x".repeat(128 << 10)),
                "bytes; at most 131072 (128KiB)",
            ),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", FeedSpec::parse(&text).unwrap_err());
            assert!(err.contains(want), "want `{want}` in: {err}");
        }
    }

    #[test]
    fn a_string_that_reads_like_a_section_is_a_string() {
        let text = GOOD.replace(
            "format = \"csv\"",
            "format = \"csv\"\nnote = \"[changefeed]\"",
        );
        let spec = FeedSpec::parse(&text).unwrap();
        assert_eq!(spec.sink.config["note"].as_str(), Some("[changefeed]"));
    }

    proptest::proptest! {
        #[test]
        fn the_parser_never_panics_on_mutated_specs(pos in 0usize..400, byte in proptest::num::u8::ANY) {
            let mut bytes = GOOD.as_bytes().to_vec();
            let at = pos % bytes.len();
            bytes[at] = byte;
            if let Ok(text) = String::from_utf8(bytes)
                && let Ok(spec) = FeedSpec::parse(&text)
            {
                let id = ChangefeedId::new("acme", "orders").unwrap();
                let _ = spec.to_info(&text, id, CommitTs::new(0), None);
            }
        }
    }
}
