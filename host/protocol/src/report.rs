//! What a capture reports about the swap and the shadow it carries out.

use serde::{Deserialize, Serialize};

use crate::bound_message;

/// Differences a report carries with their detail.
pub const MAX_REPORTED_DIFFERENCES: usize = 10;

/// Where a swap stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapState {
    /// Recorded; the capture has not swapped yet (or the changefeed is not
    /// running: the new version starts on probation when it runs).
    Pending,
    /// Swapped at a barrier; the new version is on trial.
    Probation,
    /// The new version passed its probation.
    Done,
    /// The new version failed on probation; the old one runs again.
    RolledBack,
    /// The new version did not open; the old one ran on.
    Refused,
    /// Overtaken before it ended: the changefeed was updated or removed.
    Superseded,
}

impl SwapState {
    /// Whether the swap is still in progress (a new swap must wait).
    pub fn is_open(self) -> bool {
        matches!(self, SwapState::Pending | SwapState::Probation)
    }

    /// The state's name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            SwapState::Pending => "pending",
            SwapState::Probation => "probation",
            SwapState::Done => "done",
            SwapState::RolledBack => "rolled-back",
            SwapState::Refused => "refused",
            SwapState::Superseded => "superseded",
        }
    }
}

/// What a capture reports about the swap it runs (in its task position).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SwapReport {
    /// The swap's number (`SwapRecord::seq` in the changefeed's info).
    pub seq: u64,
    /// Where it stands at the capture: probation, done, rolled back or refused.
    pub state: SwapState,
    /// The checkpoint at the barrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_ts: Option<u64>,
    /// How long delivery paused at the barrier (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<u64>,
    /// The same in microseconds (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_us: Option<u64>,
    /// Why (a rollback's or refusal's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A plugin's call latency while a shadow runs (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LatencyReport {
    /// Calls timed.
    pub calls: u64,
    /// Mean over every call.
    pub mean_us: u64,
    /// Median of the latest calls.
    pub p50_us: u64,
    /// 99th percentile of the latest calls.
    pub p99_us: u64,
    /// The longest call.
    pub max_us: u64,
}

/// Where a candidate's output differs from the live plugin's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ShadowDifference {
    /// `schema.table`.
    pub table: String,
    /// The row's key (`id=5`).
    pub key: String,
    /// The first column that differs (`(row)`: one side has no such row).
    pub column: String,
    /// The live value.
    pub live: String,
    /// The candidate's value.
    pub candidate: String,
}

/// What a capture reports about the shadow it runs (in its task position).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ShadowReport {
    /// The shadow's number (`ShadowRecord::seq` in the changefeed's info).
    pub seq: u64,
    /// Batches the candidate got.
    #[serde(default)]
    pub batches: u64,
    /// Rows compared (a filter).
    #[serde(default)]
    pub rows_compared: u64,
    /// Rows whose outputs differ (a filter).
    #[serde(default)]
    pub rows_differing: u64,
    /// The first differences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<ShadowDifference>,
    /// Candidate calls that failed.
    #[serde(default)]
    pub errors: u64,
    /// The last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The live plugin's call latency.
    #[serde(default)]
    pub live_latency: LatencyReport,
    /// The candidate's.
    #[serde(default)]
    pub candidate_latency: LatencyReport,
    /// Rows a sink candidate wrote.
    #[serde(default)]
    pub rows_written: u64,
    /// Flushes a sink candidate acknowledged.
    #[serde(default)]
    pub flushes: u64,
    /// How far a sink candidate was behind (ms).
    #[serde(default)]
    pub lag_ms: u64,
    /// Why the capture dropped the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

impl ShadowReport {
    /// The same report with every text bounded and escaped (a plugin's
    /// values and errors are in it).
    pub fn bounded(mut self) -> Self {
        self.differences.truncate(MAX_REPORTED_DIFFERENCES);
        for d in &mut self.differences {
            for text in [
                &mut d.table,
                &mut d.key,
                &mut d.column,
                &mut d.live,
                &mut d.candidate,
            ] {
                *text = sluice_core::bounded_text(text, 256);
            }
        }
        self.last_error = self.last_error.map(|e| bound_message(&e));
        self.dropped = self.dropped.map(|e| bound_message(&e));
        self
    }
}
