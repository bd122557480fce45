//! A capture's record.

use serde::{Deserialize, Serialize};

/// What a capture registers under `/sluice/v1/capture/{id}` (with its lease),
/// and, as its candidacy, under `/sluice/v1/owner/{lease}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CaptureInfo {
    /// Version of this stored form.
    pub version: u32,
    /// The capture's id.
    pub id: String,
    /// Its gRPC address.
    pub address: String,
    /// The `sluice` version it runs.
    pub sluice_version: String,
    /// When it started, in ms since the Unix epoch.
    pub started_at_ms: u64,
}
