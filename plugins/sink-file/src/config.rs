use std::path::{Component, Path};

use serde::Deserialize;
pub use sluice_formats::{BinaryEncoding, CsvOptions, EncodeOptions, Format, validate_csv};
use sluice_sdk::Error;

/// Smallest accepted `max-file-bytes`.
pub const MIN_FILE_BYTES: u64 = 1024;

/// `sink-file` options. The format options carry TiCDC's names and defaults, so a
/// consumer written for TiCDC reads the files as they are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Directory for the files, relative to the sink's data directory (the directory
    /// the host grants the plugin). Created if missing. Must not be absolute or
    /// contain `..`. Default: the data directory itself.
    #[serde(default)]
    pub dir: String,
    /// Files are named `{prefix}-{seq:06}.{ext}`, e.g. `changes-000001.jsonl`.
    /// Default: `changes`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Line format: `canal-json` (files end in `.jsonl`), `csv` (`.csv`) or
    /// `debezium` (`.jsonl`). Default: `canal-json`.
    #[serde(default)]
    pub format: Format,
    /// Start a new file before a line would make the current one larger than this
    /// many bytes (a single longer line goes alone into a fresh file). At least 1024.
    /// Default: 67108864 (64 MiB).
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    /// Add Sluice's fields to every line, as TiCDC's `enable-tidb-extension` adds
    /// `_tidb`: `"_sluice":{"commitTs":..,"replay":..}` in canal-json (and inside
    /// `payload` in debezium), a `sluice-meta$replay` column in CSV. Default: false.
    #[serde(default)]
    pub enable_sluice_extension: bool,
    /// canal-json only: `old` of an UPDATE holds only the columns whose value
    /// changed (as the official Canal does), not every column. Default: false.
    #[serde(default)]
    pub only_output_updated_columns: Option<bool>,
    /// CSV only: the field separator, 1 to 3 characters. Default: `,`.
    #[serde(default)]
    pub delimiter: Option<String>,
    /// CSV only: the character that encloses text-like fields, or `""` to escape
    /// line breaks, `\` and the delimiter with `\` instead. Default: `"`.
    #[serde(default)]
    pub quote: Option<String>,
    /// CSV only: how NULL is written (never quoted). Default: `\N`.
    #[serde(default)]
    pub null: Option<String>,
    /// CSV only: the record terminator, `"\r\n"` or `"\n"`. Default: `"\r\n"`.
    #[serde(default)]
    pub terminator: Option<String>,
    /// CSV only: write the commit ts as column 4. Default: false.
    #[serde(default)]
    pub include_commit_ts: Option<bool>,
    /// CSV only: how blobs are written, `base64` or `hex`. Default: `base64`.
    #[serde(default)]
    pub binary_encoding_method: Option<BinaryEncoding>,
    /// CSV only: add the `is-update` column and write an UPDATE as a `D` record of
    /// the old row followed by an `I` record of the new one. Default: false.
    #[serde(default)]
    pub output_old_value: Option<bool>,
    /// CSV only: start every file, and every change of table within a file, with
    /// a header record naming the columns. Default: false.
    #[serde(default)]
    pub output_field_header: Option<bool>,
    /// debezium only: leave out the `schema` part of every message (as TiCDC's
    /// `debezium-disable-schema`). Default: false.
    #[serde(default)]
    pub debezium_disable_schema: Option<bool>,
}

fn default_prefix() -> String {
    "changes".to_string()
}

fn default_max_file_bytes() -> u64 {
    64 * 1024 * 1024
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dir: String::new(),
            prefix: default_prefix(),
            format: Format::default(),
            max_file_bytes: default_max_file_bytes(),
            enable_sluice_extension: false,
            only_output_updated_columns: None,
            delimiter: None,
            quote: None,
            null: None,
            terminator: None,
            include_commit_ts: None,
            binary_encoding_method: None,
            output_old_value: None,
            output_field_header: None,
            debezium_disable_schema: None,
        }
    }
}

impl Config {
    /// Check the options without touching the file system.
    pub fn validate(&self) -> Result<(), Error> {
        for component in Path::new(&self.dir).components() {
            match component {
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Error::config(format!(
                        "dir = {:?} is an absolute path; give a path relative to the sink's data directory, e.g. dir = \"out\"",
                        self.dir
                    )));
                }
                Component::ParentDir => {
                    return Err(Error::config(format!(
                        "dir = {:?} contains \"..\", which would leave the sink's data directory; give a path below it, e.g. dir = \"out\"",
                        self.dir
                    )));
                }
                Component::CurDir | Component::Normal(_) => {}
            }
        }
        if self.prefix.is_empty() || self.prefix.contains(['/', '\\', '\0']) {
            return Err(Error::config(format!(
                "prefix = {:?} is not a file-name prefix; use a non-empty name without '/' or '\\', e.g. prefix = \"changes\"",
                self.prefix
            )));
        }
        if self.max_file_bytes < MIN_FILE_BYTES {
            return Err(Error::config(format!(
                "max-file-bytes = {} is too small; set it to at least {MIN_FILE_BYTES} (the default is {}, 64 MiB)",
                self.max_file_bytes,
                default_max_file_bytes()
            )));
        }
        self.check_format_options()?;
        if self.format == Format::Csv {
            validate_csv(&self.encode_options().csv)?;
        }
        Ok(())
    }

    /// The encoder's options, defaults applied. Call after [`Config::validate`].
    pub fn encode_options(&self) -> EncodeOptions {
        let d = CsvOptions::default();
        EncodeOptions {
            format: self.format,
            sluice_extension: self.enable_sluice_extension,
            only_output_updated_columns: self.only_output_updated_columns.unwrap_or(false),
            csv: CsvOptions {
                delimiter: self.delimiter.clone().unwrap_or(d.delimiter),
                quote: self.quote.clone().unwrap_or(d.quote),
                null: self.null.clone().unwrap_or(d.null),
                terminator: self.terminator.clone().unwrap_or(d.terminator),
                include_commit_ts: self.include_commit_ts.unwrap_or(d.include_commit_ts),
                binary_encoding: self.binary_encoding_method.unwrap_or(d.binary_encoding),
                output_old_value: self.output_old_value.unwrap_or(d.output_old_value),
                output_field_header: self.output_field_header.unwrap_or(d.output_field_header),
            },
            debezium_schema: !self.debezium_disable_schema.unwrap_or(false),
        }
    }

    /// Refuse an option that the chosen format would silently ignore.
    fn check_format_options(&self) -> Result<(), Error> {
        let given = [
            (
                "only-output-updated-columns",
                Format::CanalJson,
                self.only_output_updated_columns.is_some(),
            ),
            ("delimiter", Format::Csv, self.delimiter.is_some()),
            ("quote", Format::Csv, self.quote.is_some()),
            ("null", Format::Csv, self.null.is_some()),
            ("terminator", Format::Csv, self.terminator.is_some()),
            (
                "include-commit-ts",
                Format::Csv,
                self.include_commit_ts.is_some(),
            ),
            (
                "binary-encoding-method",
                Format::Csv,
                self.binary_encoding_method.is_some(),
            ),
            (
                "output-old-value",
                Format::Csv,
                self.output_old_value.is_some(),
            ),
            (
                "output-field-header",
                Format::Csv,
                self.output_field_header.is_some(),
            ),
            (
                "debezium-disable-schema",
                Format::Debezium,
                self.debezium_disable_schema.is_some(),
            ),
        ];
        for (key, format, set) in given {
            if set && self.format != format {
                return Err(Error::config(format!(
                    "{key} applies to format = \"{}\" only, but format = \"{}\"; remove {key} or change the format",
                    format.name(),
                    self.format.name()
                )));
            }
        }
        Ok(())
    }
}
