use std::path::{Component, Path};

use serde::Deserialize;
use sluice_sdk::Error;

/// Smallest accepted `max-file-bytes`.
pub const MIN_FILE_BYTES: u64 = 1024;

/// `sink-file` options.
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
    /// Line format: `canal-json` (files end in `.jsonl`) or `csv` (`.csv`).
    /// Default: `canal-json`.
    #[serde(default)]
    pub format: Format,
    /// Start a new file before a line would make the current one larger than this
    /// many bytes (a single longer line goes alone into a fresh file). At least 1024.
    /// Default: 67108864 (64 MiB).
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
}

/// The line format of the files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One canal-json object per line (`.jsonl`).
    #[default]
    CanalJson,
    /// One CSV record per line (`.csv`); DDL is not written.
    Csv,
}

impl Format {
    /// The file extension, without the dot.
    pub const fn extension(self) -> &'static str {
        match self {
            Format::CanalJson => "jsonl",
            Format::Csv => "csv",
        }
    }
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
        Ok(())
    }
}
