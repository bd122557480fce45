//! The changefeed file: one schema ([`ChangefeedFile`]) for `sluice run` and the
//! server, parsed once and validated in a [`Mode`] into the typed value the rest
//! of the host uses: [`ChangefeedConfig`] (what a server stores) or, for
//! `sluice run`, a [`RunConfig`] around one. TOML, kebab-case keys, unknown keys
//! rejected; nothing here does I/O.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::bounds::{MAX_FILE_BYTES, MAX_FILTERS};
use crate::consistent::ConsistentConfig;
use crate::error::{ConfigError, invalid};
use crate::filter::FilterConfig;
use crate::name::{NameKind, PluginId, validate_name};
use crate::pipeline::PipelineConfig;
use crate::plugin::{PluginConfig, check_plugin_name};
use crate::source::SourceConfig;
use crate::validator::ValidatorConfig;

/// Who reads the file; the schema is the same, a few keys differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `sluice run`: needs `[changefeed]`; plugins by name (in `plugin-dir`) or
    /// path; `capabilities.data-dir` is a path.
    Run,
    /// `sluice server` (create and update): the changefeed's name comes with the
    /// request, so no `[changefeed]`, `plugin-dir` or `data-dir`; plugins are
    /// `name@version` from the tenant's registry; `capabilities.data-dir = true`.
    Server,
}

/// A changefeed file as written: every key either mode takes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChangefeedFile {
    /// Where built plugins are looked up by name (`<plugin-dir>/<name>.wasm`);
    /// `sluice run` only.
    pub plugin_dir: Option<PathBuf>,
    /// Where the host keeps its own state (precompiled plugins, the meta store);
    /// `sluice run` only.
    pub data_dir: Option<PathBuf>,
    /// `[changefeed]`: `sluice run` only.
    pub changefeed: Option<ChangefeedSection>,
    /// `[source]`.
    pub source: SourceConfig,
    /// `[filter]`: which tables are replicated and which events skipped.
    #[serde(default)]
    pub filter: FilterConfig,
    /// `[[filters]]`: the filter chain, applied in order.
    #[serde(default)]
    pub filters: Vec<PluginConfig<String>>,
    /// `[sink]`.
    pub sink: PluginConfig<String>,
    /// `[pipeline]`.
    #[serde(default)]
    pub pipeline: PipelineConfig,
    /// `[validator]`.
    #[serde(default)]
    pub validator: ValidatorConfig,
    /// `[consistent]`: the redo log.
    #[serde(default)]
    pub consistent: ConsistentConfig,
}

/// `[changefeed]` (`sluice run`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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

/// What to replicate, validated: the source, the table filter, the filter
/// chain, the sink and the pipeline tuning. `P` names plugins: [`PluginId`] in a server (this is what the
/// owner stores), `String` in `sluice run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    bound(deserialize = "P: Deserialize<'de>")
)]
pub struct ChangefeedConfig<P = PluginId> {
    /// The source.
    pub source: SourceConfig,
    /// Which tables are replicated and which events skipped (`[filter]`).
    #[serde(default)]
    pub filter: FilterConfig,
    /// Filter plugins, applied in order.
    #[serde(default)]
    pub filters: Vec<PluginConfig<P>>,
    /// The sink plugin.
    pub sink: PluginConfig<P>,
    /// Pipeline tuning.
    #[serde(default)]
    pub pipeline: PipelineConfig,
    /// The continuous validator (`[validator]`).
    #[serde(default, skip_serializing_if = "ValidatorConfig::is_default")]
    pub validator: ValidatorConfig,
    /// Consistent replication (`[consistent]`).
    #[serde(default, skip_serializing_if = "ConsistentConfig::is_default")]
    pub consistent: ConsistentConfig,
}

/// What `sluice run` runs: a changefeed config and where the run keeps things.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// `[changefeed] id`.
    pub id: String,
    /// `[changefeed] resume`.
    pub resume: bool,
    /// `plugin-dir` (default `target/plugins`).
    pub plugin_dir: PathBuf,
    /// `data-dir` (default `.sluice`).
    pub data_dir: PathBuf,
    /// The changefeed, plugins named as written.
    pub feed: ChangefeedConfig<String>,
}

/// `plugin-dir` when the file gives none.
pub const DEFAULT_PLUGIN_DIR: &str = "target/plugins";
/// `data-dir` when the file gives none.
pub const DEFAULT_DATA_DIR: &str = ".sluice";

impl ChangefeedFile {
    /// Parse TOML text once and validate it for `mode`. TOML errors read as
    /// toml's own report (with the quoted line) in `sluice run`, on one line
    /// (`line L, column C: what`) for a server's API answers.
    pub fn parse(text: &str, mode: Mode) -> Result<Self, ConfigError> {
        if text.len() > MAX_FILE_BYTES {
            return invalid!(
                "the changefeed file is {} bytes; at most {MAX_FILE_BYTES} (128KiB)",
                text.len()
            );
        }
        let file: ChangefeedFile = toml::from_str(text).map_err(|e| match mode {
            Mode::Run => ConfigError::Syntax(e.to_string().trim_end().to_string()),
            Mode::Server => ConfigError::Syntax(one_line(text, &e)),
        })?;
        file.validate(mode)?;
        Ok(file)
    }

    /// Checks beyond the types, for `mode` (pure, no I/O).
    pub fn validate(&self, mode: Mode) -> Result<(), ConfigError> {
        match mode {
            Mode::Server => {
                if self.changefeed.is_some() {
                    return invalid!(
                        "remove the [changefeed] section: the server takes the changefeed's name from the request"
                    );
                }
                for (key, given) in [
                    ("plugin-dir", self.plugin_dir.is_some()),
                    ("data-dir", self.data_dir.is_some()),
                ] {
                    if given {
                        return invalid!(
                            "remove {key}: a server loads plugins from its registry and keeps \
                             its state in its own data dir"
                        );
                    }
                }
            }
            Mode::Run => match &self.changefeed {
                None => {
                    return invalid!(
                        "the [changefeed] section is missing: sluice run needs one with an id"
                    );
                }
                Some(section) => validate_name(NameKind::Changefeed, &section.id)
                    .map_err(|e| ConfigError::Invalid(format!("changefeed.id: {e}")))?,
            },
        }
        for (at, plugin) in plugins_of(&self.filters, &self.sink) {
            check_plugin_name(&at, &plugin.plugin, mode)?;
        }
        validate_parts(
            &self.source,
            &self.filter,
            &self.filters,
            &self.sink,
            (&self.pipeline, &self.validator, &self.consistent),
            mode,
        )
    }

    /// The typed config a server stores. Call on a file parsed in
    /// [`Mode::Server`].
    pub fn into_server(self) -> Result<ChangefeedConfig, ConfigError> {
        let id = |at: String, p: PluginConfig<String>| -> Result<PluginConfig, ConfigError> {
            let plugin = check_plugin_name(&at, &p.plugin, Mode::Server)?
                .expect("a server's plugin has an id");
            Ok(PluginConfig {
                plugin,
                config: p.config,
                limits: p.limits,
                capabilities: p.capabilities,
            })
        };
        let filters = self
            .filters
            .into_iter()
            .enumerate()
            .map(|(i, f)| id(format!("filters[{i}]"), f))
            .collect::<Result<_, _>>()?;
        Ok(ChangefeedConfig {
            source: self.source,
            filter: self.filter,
            filters,
            sink: id("sink".into(), self.sink)?,
            pipeline: self.pipeline,
            validator: self.validator,
            consistent: self.consistent,
        })
    }

    /// What `sluice run` runs. Call on a file parsed in [`Mode::Run`].
    pub fn into_run(self) -> Result<RunConfig, ConfigError> {
        let Some(section) = self.changefeed else {
            return invalid!(
                "the [changefeed] section is missing: sluice run needs one with an id"
            );
        };
        Ok(RunConfig {
            id: section.id,
            resume: section.resume,
            plugin_dir: self
                .plugin_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_PLUGIN_DIR)),
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            feed: ChangefeedConfig {
                source: self.source,
                filter: self.filter,
                filters: self.filters,
                sink: self.sink,
                pipeline: self.pipeline,
                validator: self.validator,
                consistent: self.consistent,
            },
        })
    }
}

impl ChangefeedConfig {
    /// Parse and validate a changefeed file as a server takes it.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        ChangefeedFile::parse(text, Mode::Server)?.into_server()
    }
}

impl RunConfig {
    /// Parse and validate a changefeed file as `sluice run` takes it.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        ChangefeedFile::parse(text, Mode::Run)?.into_run()
    }
}

impl<P> ChangefeedConfig<P> {
    /// Every plugin with where it is in the file (`filters[0]`, ..., `sink`).
    pub fn plugins(&self) -> impl Iterator<Item = (String, &PluginConfig<P>)> {
        plugins_of(&self.filters, &self.sink)
    }

    /// Every plugin, mutable, in the same order.
    pub fn plugins_mut(&mut self) -> impl Iterator<Item = &mut PluginConfig<P>> {
        self.filters.iter_mut().chain([&mut self.sink])
    }

    /// Every check beyond the types for `mode` (pure, no I/O): the source, the
    /// table filter, the chain's length, every plugin's quotas, options and grants, the pipeline.
    /// A stored config is checked again with this before it is stored.
    pub fn validate(&self, mode: Mode) -> Result<(), ConfigError> {
        validate_parts(
            &self.source,
            &self.filter,
            &self.filters,
            &self.sink,
            (&self.pipeline, &self.validator, &self.consistent),
            mode,
        )
    }
}

fn plugins_of<'a, P>(
    filters: &'a [PluginConfig<P>],
    sink: &'a PluginConfig<P>,
) -> impl Iterator<Item = (String, &'a PluginConfig<P>)> {
    filters
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("filters[{i}]"), f))
        .chain(std::iter::once(("sink".to_string(), sink)))
}

/// The smallest `pipeline.event-cache-count` a changefeed with redo may have.
pub const MIN_REDO_CACHE_EVENTS: usize = 64;

fn validate_parts<P>(
    source: &SourceConfig,
    filter: &FilterConfig,
    filters: &[PluginConfig<P>],
    sink: &PluginConfig<P>,
    (pipeline, validator, consistent): (&PipelineConfig, &ValidatorConfig, &ConsistentConfig),
    mode: Mode,
) -> Result<(), ConfigError> {
    source.validate()?;
    filter.validate()?;
    if filters.len() > MAX_FILTERS {
        return invalid!(
            "the changefeed has {} filters; at most {MAX_FILTERS}",
            filters.len()
        );
    }
    for (at, plugin) in plugins_of(filters, sink) {
        plugin.validate(&at, mode)?;
    }
    pipeline.validate()?;
    consistent.validate(mode)?;
    if consistent.enabled() && pipeline.event_cache_count < MIN_REDO_CACHE_EVENTS {
        // Events wait at the redo fence in the cache: a handful of slots
        // would make a flush (an fsync, or an object in S3) per event or two.
        return invalid!(
            "pipeline.event-cache-count is {}; with consistent.level = \"eventual\" it must be at least {MIN_REDO_CACHE_EVENTS} (events wait in the cache for the redo log)",
            pipeline.event_cache_count
        );
    }
    validator.validate(sink)
}

/// A TOML error on one line: `line L, column C: what`, for API answers.
fn one_line(text: &str, e: &toml::de::Error) -> String {
    let what = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}
