use serde::Deserialize;

/// `sink-blackhole` options.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// How to read the values: `columns` (default) scans each column's buffers
    /// once per batch; `rows` decodes every value through the row accessors
    /// (`Row`, `Image::value`). Both count the same rows, bytes and NULLs.
    #[serde(default)]
    pub read: Read,
    /// Fail `open` with a config error (to exercise the host's error path).
    #[serde(default)]
    pub reject: bool,
}

/// See [`Config::read`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Read {
    /// Scan each column's buffers once per batch.
    #[default]
    Columns,
    /// Decode every value through the row accessors.
    Rows,
}
