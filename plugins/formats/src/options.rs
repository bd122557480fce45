//! The format options, with TiCDC's names and defaults.

use serde::Deserialize;
use sluice_sdk::Error;

/// Longest accepted CSV `delimiter`, in characters (TiCDC accepts 1 to 3).
pub const MAX_DELIMITER_CHARS: usize = 3;

/// Longest accepted CSV `null` marker, in characters.
pub const MAX_NULL_CHARS: usize = 16;

/// The line format of the files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One canal-json object per line (`.jsonl`), as TiCDC's canal-json protocol.
    #[default]
    CanalJson,
    /// One CSV record per row change (`.csv`), as TiCDC's CSV protocol; DDL is not
    /// written.
    Csv,
    /// One Debezium change event (`{"payload":..,"schema":..}`) per line
    /// (`.jsonl`), as TiCDC's debezium protocol; DDL is not written.
    Debezium,
}

impl Format {
    /// Every format, for matching file names.
    pub const ALL: [Format; 3] = [Format::CanalJson, Format::Csv, Format::Debezium];

    /// The file extension, without the dot.
    pub const fn extension(self) -> &'static str {
        match self {
            Format::CanalJson | Format::Debezium => "jsonl",
            Format::Csv => "csv",
        }
    }

    /// The name configs give it (`format = "canal-json"`).
    pub const fn name(self) -> &'static str {
        match self {
            Format::CanalJson => "canal-json",
            Format::Csv => "csv",
            Format::Debezium => "debezium",
        }
    }
}

/// How CSV writes blob values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BinaryEncoding {
    /// Standard base64 with padding (RFC 4648).
    #[default]
    Base64,
    /// Lowercase hexadecimal, two digits per byte.
    Hex,
}

/// The CSV options with their defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvOptions {
    /// The field separator.
    pub delimiter: String,
    /// Empty: fields are escaped with `\` instead of quoted.
    pub quote: String,
    /// How NULL is written.
    pub null: String,
    /// The record terminator.
    pub terminator: String,
    /// Write the commit ts as column 4.
    pub include_commit_ts: bool,
    /// How blobs are written.
    pub binary_encoding: BinaryEncoding,
    /// Add `is-update` and write an UPDATE as a `D` and an `I` record.
    pub output_old_value: bool,
    /// Start every file and table change with a header record.
    pub output_field_header: bool,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            delimiter: ",".to_string(),
            quote: "\"".to_string(),
            null: "\\N".to_string(),
            terminator: "\r\n".to_string(),
            include_commit_ts: false,
            binary_encoding: BinaryEncoding::Base64,
            output_old_value: false,
            output_field_header: false,
        }
    }
}

impl CsvOptions {
    /// The quote as one byte, if records are quoted (validation keeps it ASCII).
    pub fn quote_byte(&self) -> Option<u8> {
        self.quote.as_bytes().first().copied()
    }
}

/// What the encoder needs from the options, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EncodeOptions {
    /// The format.
    pub format: Format,
    /// Add Sluice's fields (`_sluice`, or CSV's `sluice-meta$replay` column).
    pub sluice_extension: bool,
    /// canal-json: `old` holds only changed columns.
    pub only_output_updated_columns: bool,
    /// The CSV options.
    pub csv: CsvOptions,
    /// debezium: include the `schema` part.
    pub debezium_schema: bool,
}

/// TiCDC's rules for the CSV options, plus what keeps a record one line apart from
/// quoted values (the crash repair cuts files at the last newline outside quotes).
pub fn validate_csv(csv: &CsvOptions) -> Result<(), Error> {
    let line_break = |s: &str| s.contains(['\r', '\n']);
    let quote = &csv.quote;
    if quote.chars().count() > 1
        || quote
            .chars()
            .any(|c| !c.is_ascii() || c.is_ascii_alphanumeric())
        || line_break(quote)
        || quote == "\\"
    {
        return Err(Error::config(format!(
            "quote = {quote:?} is not a quote character; use one ASCII punctuation character such as \"\\\"\" or \"'\", or \"\" to escape with '\\' instead of quoting"
        )));
    }
    let delimiter = &csv.delimiter;
    let chars = delimiter.chars().count();
    if chars == 0 || chars > MAX_DELIMITER_CHARS {
        return Err(Error::config(format!(
            "delimiter = {delimiter:?} must be 1 to {MAX_DELIMITER_CHARS} characters long, e.g. delimiter = \",\" or \"|@|\""
        )));
    }
    if line_break(delimiter) {
        return Err(Error::config(format!(
            "delimiter = {delimiter:?} contains a line break; line breaks end records, so pick another delimiter"
        )));
    }
    if !quote.is_empty() && delimiter.contains(quote.as_str()) {
        return Err(Error::config(format!(
            "delimiter = {delimiter:?} contains the quote {quote:?}; the quote and the delimiter must differ"
        )));
    }
    if quote.is_empty() && delimiter.contains('\\') {
        return Err(Error::config(format!(
            "delimiter = {delimiter:?} contains '\\', which escapes characters when quote = \"\"; pick another delimiter or set a quote"
        )));
    }
    let null = &csv.null;
    if null.chars().count() > MAX_NULL_CHARS
        || line_break(null)
        || null.contains(delimiter.as_str())
        || (!quote.is_empty() && null.contains(quote.as_str()))
    {
        return Err(Error::config(format!(
            "null = {null:?} cannot mark NULL: it must be at most {MAX_NULL_CHARS} characters without a line break, the delimiter or the quote, e.g. null = \"\\\\N\""
        )));
    }
    if csv.terminator != "\r\n" && csv.terminator != "\n" {
        return Err(Error::config(format!(
            "terminator = {:?} is not supported; use \"\\r\\n\" (the default) or \"\\n\"",
            csv.terminator
        )));
    }
    Ok(())
}
