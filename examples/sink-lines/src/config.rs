use serde::Deserialize;
use sluice_sdk::Error;

/// `sink-lines` options (the `[sink.config]` table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// File name inside the sink's data directory. Default: `rows.txt`.
    #[serde(default = "default_file")]
    pub file: String,
}

fn default_file() -> String {
    "rows.txt".to_string()
}

impl Config {
    /// Check the options without touching the file system.
    pub fn validate(&self) -> Result<(), Error> {
        if self.file.is_empty() || self.file.contains('/') || self.file == "." || self.file == ".."
        {
            return Err(Error::config(format!(
                "file = {:?} is not a plain file name; give a name such as \"rows.txt\"",
                self.file
            )));
        }
        Ok(())
    }
}
