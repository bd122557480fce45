//! Shadow runs: a candidate version of a changefeed's sink or of one of its
//! filters runs beside the live one on the same batches, measured and
//! compared, never delivered (see `sluice_processor`'s shadow module).
//!
//! A shadow is a change of the changefeed's description like a swap: the
//! owner checks the candidate (outside its task), then records a
//! [`ShadowRecord`] in the info in one write; the capture that runs the work
//! sees the new info revision and starts the candidate without stopping
//! anything. The capture reports what the shadow did in its task position
//! ([`ShadowReport`]); `changefeed shadow status` shows it. Stopping the
//! shadow, or promoting it (a swap to the candidate), ends the record; a
//! candidate the capture dropped (too far behind, failing) ends it too.

use serde::{Deserialize, Serialize};
use sluice_config::PluginConfig;

use crate::bound_message;
use crate::plugin::PluginId;
use crate::swap::PluginRole;

/// Shortest lag bound a shadow may ask for (ms).
pub const MIN_SHADOW_LAG_MS: u64 = 100;
/// Longest lag bound a shadow may ask for (ms): one hour.
pub const MAX_SHADOW_LAG_MS: u64 = 3600 * 1000;
/// Most bytes a shadow may ask to queue for its sink candidate (1 GiB).
pub const MAX_SHADOW_QUEUED_BYTES: u64 = 1 << 30;
/// Where a shadow stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShadowState {
    /// The candidate runs (or starts when the changefeed runs).
    Running,
    /// Stopped on request.
    Stopped,
    /// Turned into a swap to the candidate.
    Promoted,
    /// The capture dropped the candidate (it fell behind past its bound, or
    /// kept failing).
    Dropped,
    /// Overtaken: the changefeed was updated or removed.
    Superseded,
}

impl ShadowState {
    /// The state's name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ShadowState::Running => "running",
            ShadowState::Stopped => "stopped",
            ShadowState::Promoted => "promoted",
            ShadowState::Dropped => "dropped",
            ShadowState::Superseded => "superseded",
        }
    }
}

/// A shadow run of a changefeed, as stored in its info.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ShadowRecord {
    /// The shadow's number within the changefeed (1, 2, ...).
    pub seq: u64,
    /// Beside what it runs: `sink` or `filter-N`.
    pub role: String,
    /// The live plugin when the shadow started.
    pub live: PluginId,
    /// The candidate's table (a sink candidate has its own options and
    /// grants: a staging target).
    pub candidate: PluginConfig,
    /// Who asked (the tenant, and the caller's address when known).
    pub by: String,
    /// When it was asked for (ms since the Unix epoch).
    pub at_ms: u64,
    /// A sink candidate further behind than this is dropped (ms).
    pub max_lag_ms: u64,
    /// Or with more than this many bytes waiting for it.
    pub max_queued_bytes: u64,
    /// Where it stands.
    pub state: ShadowState,
    /// Why it ended as it did (bounded and escaped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it ended (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
}

impl ShadowRecord {
    /// Whether the candidate runs.
    pub fn is_running(&self) -> bool {
        self.state == ShadowState::Running
    }

    /// The role it runs in.
    pub fn role(&self) -> Option<PluginRole> {
        PluginRole::parse(&self.role)
    }

    /// Ends it in `state`; its table keeps only the plugin id.
    pub(crate) fn end(&mut self, state: ShadowState, reason: Option<&str>, now_ms: u64) {
        self.state = state;
        if let Some(reason) = reason {
            self.reason = Some(bound_message(reason));
        }
        self.ended_at_ms = Some(now_ms);
        self.candidate = PluginConfig::new(self.candidate.plugin.clone());
    }
}

/// What an operator asks for: run `candidate` in shadow beside the plugin in
/// `role`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowAsk {
    /// Beside what.
    pub role: PluginRole,
    /// The candidate's table.
    pub candidate: PluginConfig,
    /// Drop a sink candidate further behind than this (ms).
    pub max_lag_ms: u64,
    /// Or with more bytes than this waiting for it.
    pub max_queued_bytes: u64,
    /// Who asks, for the record.
    pub by: String,
    /// The version the caller saw in that role (refused if it is no longer
    /// the one running there).
    pub expect: Option<PluginId>,
}

impl ShadowAsk {
    /// Checks every number against its range.
    pub fn validate(&self) -> Result<(), String> {
        if !(MIN_SHADOW_LAG_MS..=MAX_SHADOW_LAG_MS).contains(&self.max_lag_ms) {
            return Err(format!(
                "shadow max lag is {} ms; it must be {MIN_SHADOW_LAG_MS}..={MAX_SHADOW_LAG_MS}",
                self.max_lag_ms
            ));
        }
        if !(1..=MAX_SHADOW_QUEUED_BYTES).contains(&self.max_queued_bytes) {
            return Err(format!(
                "shadow max queued bytes is {}; it must be 1..={MAX_SHADOW_QUEUED_BYTES}",
                self.max_queued_bytes
            ));
        }
        Ok(())
    }

    /// The record of this ask against `live`, the plugin in its role.
    pub fn record(self, live: &PluginConfig, now_ms: u64) -> Result<ShadowRecord, String> {
        self.validate()?;
        if self.candidate == *live {
            return Err(format!(
                "the {} is {} with this table already; a shadow of it compares nothing",
                self.role, live.plugin
            ));
        }
        Ok(ShadowRecord {
            seq: 0,
            role: self.role.to_string(),
            live: live.plugin.clone(),
            candidate: self.candidate,
            by: bound_message(&self.by),
            at_ms: now_ms,
            max_lag_ms: self.max_lag_ms,
            max_queued_bytes: self.max_queued_bytes,
            state: ShadowState::Running,
            reason: None,
            ended_at_ms: None,
        })
    }
}
