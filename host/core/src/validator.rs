//! What a changefeed's continuous validator reports (see `[validator]` in
//! the changefeed config and `sluice_diff::validator`).

use serde::{Deserialize, Serialize};

/// Most persistent mismatches a report names.
pub const MAX_REPORTED_MISMATCHES: usize = 20;

/// Counts of the validator of one run, and the latest persistent
/// mismatches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ValidatorReport {
    /// `fast` (rows present or absent) or `full` (every column compared).
    pub mode: String,
    /// Rows whose downstream state matched the upstream image.
    #[serde(default)]
    pub matched: u64,
    /// Rows that still differed after every retry (persistent mismatches).
    #[serde(default)]
    pub mismatched: u64,
    /// Rows waiting to be checked or re-checked now.
    #[serde(default)]
    pub pending: u64,
    /// Rows not checked: the validator's cache (`event-cache-count`) or its
    /// queue was full, so the sink was not held up for them.
    #[serde(default)]
    pub skipped: u64,
    /// Downstream reads that failed (the rows stay pending).
    #[serde(default)]
    pub errors: u64,
    /// The last failure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The latest persistent mismatches (at most
    /// [`MAX_REPORTED_MISMATCHES`]), e.g. `shop.orders id=7: amount: upstream
    /// 12.50, downstream 12.40`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<String>,
}
