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
    /// Its HTTP listener's address (the host of `address`, the HTTP
    /// listener's port), where a standby forwards HTTP API calls; empty in
    /// records of older versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub http_address: String,
    /// The `sluice` version it runs.
    pub sluice_version: String,
    /// When it started, in ms since the Unix epoch.
    pub started_at_ms: u64,
}
