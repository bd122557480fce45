//! Hot swaps: replacing a running changefeed's sink with another version at a
//! barrier, recorded in the changefeed's info.
//!
//! A swap is a change of the changefeed's description: the owner checks the new
//! version (outside its task), then in one meta-store write (compare-and-swap
//! on the info's revision, under its ownership) sets the sink to the new
//! version and appends a [`SwapRecord`] in state [`SwapState::Pending`]. The
//! capture that runs the changefeed sees the new info revision and swaps at a
//! barrier without stopping the work; it reports each step in its task
//! position ([`SwapReport`]), and the owner writes the outcome into the record:
//! on probation, done, rolled back (the sink is set back to the old version)
//! or refused. Whatever the store holds is what runs: a server killed at any
//! point of a swap runs the sink its stored info names, and a record still
//! pending or on probation puts that sink on probation again, with the old
//! version to fall back to.

use serde::{Deserialize, Serialize};
use sluice_config::PluginConfig;
use sluice_core::CheckpointTs;

use crate::plugin::PluginId;
use crate::{SwapReport, SwapState, bound_message};

/// What a plugin does in a changefeed: the sink, or the filter at a position
/// of the chain (`sink`, `filter-0`, ... as shown and stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginRole {
    /// The sink.
    Sink,
    /// The filter at this position (0-based).
    Filter(usize),
}

impl PluginRole {
    /// `sink` or `filter-N`.
    pub fn parse(text: &str) -> Option<Self> {
        if text == "sink" {
            return Some(Self::Sink);
        }
        let n = text.strip_prefix("filter-")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 6 {
            return None;
        }
        n.parse().ok().map(Self::Filter)
    }

    /// The key of its table in a changefeed file (`sink`, `filters[N]`).
    pub fn key(self) -> String {
        match self {
            Self::Sink => "sink".into(),
            Self::Filter(i) => format!("filters[{i}]"),
        }
    }

    /// Finds a filter of `filters` by its position (`0`, `1`, ...) or by its
    /// plugin's name (`filter-mask`, or `filter-mask@0.1.0`; it must be the
    /// only such filter).
    pub fn filter_named(filters: &[PluginConfig], which: &str) -> Result<Self, String> {
        let which = which.trim();
        if !which.is_empty() && which.bytes().all(|b| b.is_ascii_digit()) {
            let at: usize = which
                .parse()
                .map_err(|_| format!("filter position `{which}` is out of range"))?;
            if at >= filters.len() {
                return Err(format!(
                    "there is no filter at position {at}: the changefeed has {} filters",
                    filters.len()
                ));
            }
            return Ok(Self::Filter(at));
        }
        let found: Vec<usize> = filters
            .iter()
            .enumerate()
            .filter(|(_, f)| f.plugin.name() == which || f.plugin.to_string() == which)
            .map(|(i, _)| i)
            .collect();
        match found.as_slice() {
            [at] => Ok(Self::Filter(*at)),
            [] => Err(format!(
                "no filter of the changefeed is `{}`; its filters are: {}",
                crate::bound_message(which),
                filters
                    .iter()
                    .enumerate()
                    .map(|(i, f)| format!("{i}: {}", f.plugin))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            many => Err(format!(
                "filters at positions {many:?} are `{which}`; name the filter by its position"
            )),
        }
    }
}

impl std::fmt::Display for PluginRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sink => f.write_str("sink"),
            Self::Filter(i) => write!(f, "filter-{i}"),
        }
    }
}

/// Swap records kept per changefeed (the newest).
pub const MAX_SWAP_RECORDS: usize = 20;

/// Longest probation window a swap may ask for.
pub const MAX_PROBATION_MS: u64 = 24 * 3600 * 1000;
/// Most flushes a probation may ask for.
pub const MAX_PROBATION_FLUSHES: u64 = 1_000_000;
/// Most retryable failures a probation may tolerate.
pub const MAX_PROBATION_RETRIES: u32 = 100;

/// How long a swapped-in sink is on trial (both must pass), and how many
/// retryable failures it may have meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProbationPolicy {
    /// At least this long (ms).
    pub window_ms: u64,
    /// And at least this many acknowledged flushes.
    pub flushes: u64,
    /// Retryable failures tolerated; the next one rolls back. Any other
    /// failure rolls back at once.
    pub max_retries: u32,
}

impl Default for ProbationPolicy {
    fn default() -> Self {
        Self {
            window_ms: 30_000,
            flushes: 3,
            max_retries: 2,
        }
    }
}

impl ProbationPolicy {
    /// Checks every number against its range.
    pub fn validate(&self) -> Result<(), String> {
        if self.window_ms > MAX_PROBATION_MS {
            return Err(format!(
                "probation window is {} ms; at most {MAX_PROBATION_MS} (24 h)",
                self.window_ms
            ));
        }
        if self.flushes > MAX_PROBATION_FLUSHES {
            return Err(format!(
                "probation flushes is {}; at most {MAX_PROBATION_FLUSHES}",
                self.flushes
            ));
        }
        if self.max_retries > MAX_PROBATION_RETRIES {
            return Err(format!(
                "probation retries is {}; at most {MAX_PROBATION_RETRIES}",
                self.max_retries
            ));
        }
        Ok(())
    }
}

/// One swap of a changefeed's sink, as stored in its info.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SwapRecord {
    /// The swap's number within the changefeed (1, 2, ...).
    pub seq: u64,
    /// What was swapped: `sink` or `filter-N`.
    pub role: String,
    /// The plugin table before the swap.
    pub from: PluginConfig,
    /// The plugin table after it.
    pub to: PluginConfig,
    /// Who asked (the tenant, and the caller's address when known).
    pub by: String,
    /// When it was asked for (ms since the Unix epoch).
    pub at_ms: u64,
    /// The changefeed epoch when it was asked for.
    pub epoch: crate::Epoch,
    /// The new version's trial.
    pub probation: ProbationPolicy,
    /// Where it stands.
    pub state: SwapState,
    /// The checkpoint at the barrier: the old version has every row up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_ts: Option<CheckpointTs>,
    /// How long delivery paused at the barrier (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<u64>,
    /// The same in microseconds (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_us: Option<u64>,
    /// Why it ended as it did (rolled back, refused, superseded, or run after a
    /// restart), bounded and escaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it reached its last state (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
    /// While it is being asked for: the shadow it promotes (that shadow must
    /// still run). Not stored.
    #[serde(skip)]
    pub promotes: Option<u64>,
}

impl SwapRecord {
    /// What was swapped.
    pub fn role(&self) -> Option<PluginRole> {
        PluginRole::parse(&self.role)
    }

    /// The version swapped away from.
    pub fn from_plugin(&self) -> &PluginId {
        &self.from.plugin
    }

    /// The version swapped to.
    pub fn to_plugin(&self) -> &PluginId {
        &self.to.plugin
    }

    /// Ends the swap in `state` (with `reason`, if any) at `now_ms`. An ended
    /// record keeps only the plugin ids of its tables: their options and
    /// grants matter only while the swap may still roll back, and this keeps
    /// the newest records small whatever the tables held. Returns the old
    /// table as it was.
    pub(crate) fn end(
        &mut self,
        state: SwapState,
        reason: Option<&str>,
        now_ms: u64,
    ) -> PluginConfig {
        self.state = state;
        if let Some(reason) = reason {
            self.reason = Some(bound_message(reason));
        }
        self.ended_at_ms = Some(now_ms);
        self.to = PluginConfig::new(self.to.plugin.clone());
        let bare = PluginConfig::new(self.from.plugin.clone());
        std::mem::replace(&mut self.from, bare)
    }
}

/// Appends `record`, keeping the newest [`MAX_SWAP_RECORDS`].
pub(crate) fn push_record(records: &mut Vec<SwapRecord>, record: SwapRecord) {
    records.push(record);
    if records.len() > MAX_SWAP_RECORDS {
        let extra = records.len() - MAX_SWAP_RECORDS;
        records.drain(..extra);
    }
}

/// Takes in a report on the swap of `record` if it moves the swap forward
/// (reports arrive again and out of date; only forward moves count). Returns
/// none when nothing changed; else the old table when the sink goes back to it.
pub(crate) fn advance(
    record: &mut SwapRecord,
    report: &SwapReport,
    now_ms: u64,
) -> Option<Option<PluginConfig>> {
    use crate::SwapState::*;
    if report.seq != record.seq {
        return None;
    }
    let forward = matches!(
        (record.state, report.state),
        (Pending, Probation | Done | RolledBack | Refused) | (Probation, Done | RolledBack)
    );
    if !forward {
        return None;
    }
    if let Some(b) = report.barrier_ts {
        record.barrier_ts = Some(CheckpointTs::new(b));
    }
    if report.pause_ms.is_some() {
        record.pause_ms = report.pause_ms;
        record.pause_us = report.pause_us;
    }
    if report.state.is_open() {
        record.state = report.state;
        if let Some(reason) = &report.reason {
            record.reason = Some(bound_message(reason));
        }
        return Some(None);
    }
    let from = record.end(report.state, report.reason.as_deref(), now_ms);
    Some(matches!(report.state, RolledBack | Refused).then_some(from))
}

/// What an operator asks for: swap the plugin in `role` to `to` (its table:
/// the new version, and its options, quotas and grants), on trial for
/// `probation`.
#[derive(Debug, Clone, PartialEq)]
pub struct SwapAsk {
    /// The sink, or which filter.
    pub role: PluginRole,
    /// The new table. Its grants must be within the current one's.
    pub to: PluginConfig,
    /// The trial.
    pub probation: ProbationPolicy,
    /// Who asks, for the record.
    pub by: String,
    /// The version the caller saw in that role (refused if it is no longer
    /// the one running there: the chain changed meanwhile).
    pub expect: Option<PluginId>,
    /// The shadow this swap promotes.
    pub promotes: Option<u64>,
}

/// Refuses grants in `to` that `from` does not hold: a swap may not widen
/// what the changefeed grants the plugin in `role` (an update may, while it
/// is stopped).
pub fn within_grants(
    role: PluginRole,
    from: &sluice_config::Capabilities,
    to: &sluice_config::Capabilities,
) -> Result<(), String> {
    let at = role.key();
    if to.data_dir.is_granted() && !from.data_dir.is_granted() {
        return Err(format!(
            "{at}.capabilities.data-dir is not granted to the running {role}; a swap cannot \
             grant it (pause the changefeed and update it)"
        ));
    }
    if let Some(name) = to
        .sql
        .iter()
        .find(|(n, dsn)| from.sql.get(*n) != Some(*dsn))
        .map(|(n, _)| n)
    {
        return Err(format!(
            "{at}.capabilities.sql.{name} is not granted to the running {role} as it stands; a \
             swap cannot widen the grants (pause the changefeed and update it)"
        ));
    }
    for (key, want, have) in [("tcp", &to.tcp, &from.tcp), ("http", &to.http, &from.http)] {
        if let Some(extra) = want.iter().find(|w| !have.contains(w)) {
            return Err(format!(
                "{at}.capabilities.{key} `{extra}` is not granted to the running {role}; a swap \
                 cannot widen the grants (pause the changefeed and update it)"
            ));
        }
    }
    Ok(())
}

/// The record of a swap `ask`ed for on a changefeed whose plugin in the
/// ask's role is `from`, at `now_ms` under `epoch` (its number is set when it
/// is stored).
pub fn record_for(
    from: &PluginConfig,
    ask: SwapAsk,
    epoch: crate::Epoch,
    now_ms: u64,
) -> Result<SwapRecord, String> {
    ask.probation.validate()?;
    within_grants(ask.role, &from.capabilities, &ask.to.capabilities)?;
    if ask.to == *from {
        return Err(format!(
            "the {} is {} with this table already; nothing to swap",
            ask.role, from.plugin
        ));
    }
    Ok(SwapRecord {
        seq: 0,
        role: ask.role.to_string(),
        from: from.clone(),
        to: ask.to,
        by: bound_message(&ask.by),
        at_ms: now_ms,
        epoch,
        probation: ask.probation,
        state: SwapState::Pending,
        barrier_ts: None,
        pause_ms: None,
        pause_us: None,
        reason: None,
        ended_at_ms: None,
        promotes: ask.promotes,
    })
}
