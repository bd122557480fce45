use serde::Deserialize;
use sluice_sdk::Error;

/// `filter-mask` options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Glob patterns (`*` any run, `?` one character) naming the columns to mask. A
    /// pattern without a `.` matches the column name in every table (`email`,
    /// `phone*`); a pattern with dots matches `schema.table.column`
    /// (`app.users.email`, `*.orders.card_*`). Required, at least one.
    pub columns: Vec<String>,
    /// `hash`: replace text, blob and JSON values with the lowercase hex SHA-256 of
    /// `salt` followed by the value. `redact`: replace them with `redact-with`.
    /// In both modes, columns of other types (numbers, decimals, dates, datetimes,
    /// booleans) become NULL. Default: `hash`.
    #[serde(default)]
    pub mode: Mode,
    /// Bytes put before each value when hashing, so hashes cannot be looked up in
    /// precomputed tables. Keep it secret and stable: changing it changes every hash.
    /// Default: empty.
    #[serde(default)]
    pub salt: String,
    /// The replacement text in `redact` mode (written as a JSON string in JSON
    /// columns). Default: `***`.
    #[serde(default = "default_redact_with")]
    pub redact_with: String,
}

/// How matched text, blob and JSON values are rewritten.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Lowercase hex SHA-256 of salt + value.
    #[default]
    Hash,
    /// The fixed `redact-with` text.
    Redact,
}

fn default_redact_with() -> String {
    "***".to_string()
}

impl Config {
    /// Check the options.
    pub fn validate(&self) -> Result<(), Error> {
        if self.columns.is_empty() {
            return Err(Error::config(
                "columns is empty, so nothing would be masked; list at least one column pattern, e.g. columns = [\"email\", \"app.users.phone*\"]",
            ));
        }
        if self.columns.iter().any(|p| p.is_empty()) {
            return Err(Error::config(
                "columns contains an empty pattern, which matches no column; remove it or write a column name or glob such as \"email\"",
            ));
        }
        Ok(())
    }
}
