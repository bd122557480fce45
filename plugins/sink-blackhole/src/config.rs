use serde::Deserialize;

/// `sink-blackhole` options.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Fail `open` with a config error (to exercise the host's error path).
    #[serde(default)]
    pub reject: bool,
}
