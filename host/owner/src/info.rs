//! The changefeed model as the owner stores it: [`ChangefeedInfo`] (what to
//! replicate, its state, epoch and recent errors; written when any of these change)
//! and [`ChangefeedStatus`] (the checkpoint; written often). Both carry a `version`
//! for their stored form and are JSON with kebab-case keys.
//!
//! What to replicate is stored typed: the validated [`ChangefeedConfig`]. Version 1
//! of the stored form kept the source and the pipeline tuning as the JSON of their
//! TOML tables, parsed again at every start; it is still read, and migrated to
//! the typed form on read.

use crate::{ErrorKind, MAX_MESSAGE_BYTES, bound_message};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ShadowReport;
use crate::shadow::{ShadowRecord, ShadowState};
use crate::swap::{PluginRole, SwapRecord};
use crate::{SwapReport, SwapState};
use sluice_config::PluginConfig;
use sluice_config::{ChangefeedConfig, Mode};
use sluice_core::{CheckpointTs, CommitTs};

use crate::Epoch;
use crate::error::{DecodeError, InfoError};
use crate::id::ChangefeedId;
use crate::state::FeedState;

/// The stored form of [`ChangefeedInfo`] this crate writes. It also reads
/// version 1 (migrated on read, see [`ChangefeedInfo::decode`]).
pub const INFO_VERSION: u32 = 2;
/// The stored form of [`ChangefeedStatus`] this crate writes and reads.
pub const STATUS_VERSION: u32 = 1;
/// How many error and warning records a changefeed keeps (the newest).
pub const MAX_RECORDS: usize = 5;
/// Largest stored description a create or update may make, in bytes: half of
/// the meta store's 1 MiB record limit, so that errors, warnings and later
/// fields always fit beside it.
pub const MAX_INFO_BYTES: usize = 512 << 10;
/// How far ahead of this server's clock a start ts or an overwritten checkpoint
/// may be (clocks of clients and servers differ a little).
pub const MAX_TS_AHEAD_MS: u64 = 60_000;

/// Refuses a start ts or overwritten checkpoint (`what`) in the future, as TiCDC
/// refuses one past PD's current ts: no source produces anything for it yet, and
/// a ts near `u64::MAX` would leave no room above it.
pub fn check_not_future(what: &'static str, ts: CommitTs, now_ms: u64) -> Result<(), InfoError> {
    let physical_ms = ts.physical_millis();
    let limit = now_ms.saturating_add(MAX_TS_AHEAD_MS);
    if physical_ms > limit {
        return Err(InfoError::InFuture {
            what,
            ts: ts.get(),
            physical_ms,
            ahead_ms: physical_ms - now_ms,
        });
    }
    Ok(())
}

/// What to replicate and where the changefeed stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChangefeedInfo {
    /// Version of this stored form ([`INFO_VERSION`]).
    pub version: u32,
    /// The changefeed's tenant and name.
    pub id: ChangefeedId,
    /// What to replicate: the source, the filters, the sink and the pipeline
    /// tuning, validated, with every default filled in.
    pub config: ChangefeedConfig,
    /// The operator's description as submitted (the changefeed file), for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// Replication starts after this ts: the first checkpoint is `start-ts`.
    pub start_ts: CommitTs,
    /// The changefeed finishes once its checkpoint reaches this ts; none means never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ts: Option<CommitTs>,
    /// When the changefeed was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Its lifecycle state.
    pub state: FeedState,
    /// The epoch of the latest (re)start; [`Epoch::NONE`] before the first.
    pub epoch: Epoch,
    /// The latest errors, oldest first, at most [`MAX_RECORDS`].
    #[serde(default)]
    pub errors: Vec<ErrorRecord>,
    /// How many errors this incarnation of the changefeed recorded in all
    /// (saturating); `errors` keeps only the newest. Absent in records written
    /// before it was kept, and while zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub error_count: u64,
    /// The latest warnings, oldest first, at most [`MAX_RECORDS`].
    #[serde(default)]
    pub warnings: Vec<WarningRecord>,
    /// Why the changefeed is failed; set only in [`FeedState::Failed`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailReason>,
    /// The latest sink swaps, oldest first, at most
    /// [`crate::MAX_SWAP_RECORDS`]; the last one may be in progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub swaps: Vec<SwapRecord>,
    /// How many swaps this changefeed recorded in all (the next one's number
    /// is one more).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub swap_count: u64,
    /// The shadow running, or the last one (see [`ShadowRecord`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowRecord>,
    /// How many shadows this changefeed started in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shadow_count: u64,
}

impl ChangefeedInfo {
    /// A changefeed description with no filters and no target ts, not yet created
    /// (state normal, epoch 0, created at 0: [`crate::Changefeed::create`] sets them).
    pub fn new(id: ChangefeedId, config: ChangefeedConfig, start_ts: CommitTs) -> Self {
        Self {
            version: INFO_VERSION,
            id,
            config,
            spec: None,
            start_ts,
            target_ts: None,
            created_at_ms: 0,
            state: FeedState::Normal,
            epoch: Epoch::NONE,
            errors: Vec::new(),
            error_count: 0,
            warnings: Vec::new(),
            failure: None,
            swaps: Vec::new(),
            swap_count: 0,
            shadow: None,
            shadow_count: 0,
        }
    }

    /// The table of the plugin in `role`; none for a filter position the
    /// chain does not have.
    pub fn plugin(&self, role: PluginRole) -> Option<&PluginConfig> {
        match role {
            PluginRole::Sink => Some(&self.config.sink),
            PluginRole::Filter(i) => self.config.filters.get(i),
        }
    }

    fn plugin_mut(&mut self, role: PluginRole) -> Option<&mut PluginConfig> {
        match role {
            PluginRole::Sink => Some(&mut self.config.sink),
            PluginRole::Filter(i) => self.config.filters.get_mut(i),
        }
    }

    /// The shadow running, if any.
    pub fn running_shadow(&self) -> Option<&ShadowRecord> {
        self.shadow.as_ref().filter(|s| s.is_running())
    }

    /// Records `record` as the next shadow.
    pub(crate) fn begin_shadow(&mut self, mut record: ShadowRecord) {
        self.shadow_count = self.shadow_count.saturating_add(1);
        record.seq = self.shadow_count;
        self.shadow = Some(record);
    }

    /// Ends the shadow running (if any) in `state`. Returns whether one ran.
    pub(crate) fn end_shadow(
        &mut self,
        state: ShadowState,
        why: Option<&str>,
        now_ms: u64,
    ) -> bool {
        match self.shadow.as_mut().filter(|s| s.is_running()) {
            Some(s) => {
                s.end(state, why, now_ms);
                true
            }
            None => false,
        }
    }

    /// Takes in a capture's report on a shadow: one it dropped ends. Returns
    /// whether anything changed.
    pub fn on_shadow_report(&mut self, report: &ShadowReport, now_ms: u64) -> bool {
        let Some(why) = &report.dropped else {
            return false;
        };
        if self.running_shadow().is_none_or(|s| s.seq != report.seq) {
            return false;
        }
        self.end_shadow(ShadowState::Dropped, Some(why), now_ms)
    }

    /// The swap in progress (pending or on probation), if any.
    pub fn open_swap(&self) -> Option<&SwapRecord> {
        self.swaps.last().filter(|s| s.state.is_open())
    }

    /// Records `record` as the next swap and makes its new version the sink.
    pub(crate) fn begin_swap(&mut self, mut record: SwapRecord) {
        self.swap_count = self.swap_count.saturating_add(1);
        record.seq = self.swap_count;
        record.state = SwapState::Pending;
        record.promotes = None;
        if let Some(at) = record.role().and_then(|r| self.plugin_mut(r)) {
            *at = record.to.clone();
        }
        crate::swap::push_record(&mut self.swaps, record);
    }

    /// Ends a swap in progress that was overtaken (an update, a removal).
    pub(crate) fn supersede_swap(&mut self, why: &str, now_ms: u64) {
        if let Some(last) = self.swaps.last_mut().filter(|s| s.state.is_open()) {
            last.end(SwapState::Superseded, Some(why), now_ms);
        }
    }

    /// The work finished (its source ended) with the new version of a swap
    /// on probation: it delivered everything, so the swap is done.
    pub(crate) fn finish_open_swap(&mut self, now_ms: u64) {
        let running = |s: &SwapRecord| s.role().and_then(|r| self.plugin(r)).cloned();
        let open = self.swaps.last().filter(|s| s.state.is_open());
        if open.is_some_and(|s| running(s).as_ref() == Some(&s.to))
            && let Some(open) = self.swaps.last_mut()
        {
            open.end(
                SwapState::Done,
                Some("the changefeed finished while the new version was on probation"),
                now_ms,
            );
        }
    }

    /// Takes in a capture's report on a swap. When the new version was rolled
    /// back or refused, the old one becomes the sink again and a warning says
    /// why. Returns whether anything changed.
    pub fn on_swap_report(&mut self, report: &SwapReport, now_ms: u64) -> bool {
        let Some(record) = self.swaps.iter_mut().rev().find(|r| r.seq == report.seq) else {
            return false;
        };
        let Some(back) = crate::swap::advance(record, report, now_ms) else {
            return false;
        };
        if let Some(old) = back {
            let (seq, from, to, state) = (
                record.seq,
                record.from.plugin.to_string(),
                record.to.plugin.to_string(),
                record.state.as_str(),
            );
            let reason = record.reason.clone().unwrap_or_default();
            let role = record.role();
            if let Some(at) = role.and_then(|r| self.plugin_mut(r)) {
                *at = old;
            }
            self.record_warning(WarningRecord {
                at_ms: now_ms,
                epoch: self.epoch,
                message: format!("swap {seq} from {from} to {to} {state}: {reason}; {from} runs"),
            });
            if self.state == FeedState::Normal {
                self.state = FeedState::Warning;
            }
        }
        true
    }

    /// Pure checks of what an operator wrote: the stored-form version, the config
    /// (the same checks a server's changefeed file passed: every number against
    /// its range, every plugin's grants and quotas), and the target ts against
    /// the start ts. Plugin options are checked by the plugins' own
    /// `validate-config`.
    pub fn validate(&self) -> Result<(), InfoError> {
        if self.version != INFO_VERSION {
            return Err(InfoError::Version {
                found: self.version,
                supported: INFO_VERSION,
            });
        }
        self.config.validate(Mode::Server)?;
        if let Some(target) = self.target_ts
            && target <= self.start_ts
        {
            return Err(InfoError::TargetNotAfterStart {
                target,
                start: self.start_ts,
            });
        }
        let bytes = self.encode().len();
        if bytes > MAX_INFO_BYTES {
            return Err(InfoError::TooLarge {
                bytes,
                max: MAX_INFO_BYTES,
            });
        }
        Ok(())
    }

    /// Whether the checkpoint has reached the target ts.
    pub fn reached_target(&self, checkpoint: CheckpointTs) -> bool {
        self.target_ts.is_some_and(|t| checkpoint.get() >= t.get())
    }

    /// Appends an error record, keeping the newest [`MAX_RECORDS`], and counts it.
    pub fn record_error(&mut self, mut record: ErrorRecord) {
        if record.message.len() > MAX_MESSAGE_BYTES {
            record.message = bound_message(&record.message);
        }
        push_bounded(&mut self.errors, record);
        self.error_count = self.error_count.saturating_add(1);
    }

    /// Appends a warning record, keeping the newest [`MAX_RECORDS`].
    pub fn record_warning(&mut self, mut record: WarningRecord) {
        if record.message.len() > MAX_MESSAGE_BYTES {
            record.message = bound_message(&record.message);
        }
        push_bounded(&mut self.warnings, record);
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("changefeed info always serializes")
    }

    /// Reads a stored form, refusing versions this build does not know. A
    /// version 1 record is migrated: its source and pipeline tables (the JSON of
    /// what the operator wrote) become the typed config, defaults filled in, and
    /// each plugin's `memory-bytes` becomes `memory`.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        const WHAT: &str = "changefeed info";
        let mut info: Self = match peek_version(bytes, WHAT)? {
            1 => {
                let old: serde_json::Value = serde_json::from_slice(bytes)
                    .map_err(|source| DecodeError::Malformed { what: WHAT, source })?;
                serde_json::from_value(migrate_v1(old))
                    .map_err(|source| DecodeError::Malformed { what: WHAT, source })?
            }
            _ => decode_versioned(bytes, WHAT, INFO_VERSION)?,
        };
        // Records written before the count was kept count at least what they hold.
        info.error_count = info.error_count.max(info.errors.len() as u64);
        Ok(info)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn push_bounded<T>(list: &mut Vec<T>, item: T) {
    list.push(item);
    if list.len() > MAX_RECORDS {
        let excess = list.len() - MAX_RECORDS;
        list.drain(..excess);
    }
}

fn peek_version(bytes: &[u8], what: &'static str) -> Result<u32, DecodeError> {
    #[derive(Deserialize)]
    struct Peek {
        version: u32,
    }
    let peek: Peek =
        serde_json::from_slice(bytes).map_err(|source| DecodeError::Malformed { what, source })?;
    Ok(peek.version)
}

fn decode_versioned<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    supported: u32,
) -> Result<T, DecodeError> {
    let found = peek_version(bytes, what)?;
    if found != supported {
        return Err(DecodeError::Version {
            what,
            found,
            supported,
        });
    }
    serde_json::from_slice(bytes).map_err(|source| DecodeError::Malformed { what, source })
}

/// A version 1 changefeed info as version 2: `source`, `filters`, `sink` and
/// `pipeline` (null for the defaults) move into `config`, and each plugin's
/// `limits.memory-bytes` is renamed `memory`. Whatever does not fit is left for
/// the typed decode to refuse.
fn migrate_v1(mut old: serde_json::Value) -> serde_json::Value {
    let Some(record) = old.as_object_mut() else {
        return old;
    };
    let mut config = serde_json::Map::new();
    for key in ["source", "filters", "sink", "pipeline"] {
        match record.remove(key) {
            None | Some(serde_json::Value::Null) => {}
            Some(value) => {
                config.insert(key.to_string(), value);
            }
        }
    }
    let rename = |plugin: &mut serde_json::Value| {
        if let Some(limits) = plugin
            .get_mut("limits")
            .and_then(serde_json::Value::as_object_mut)
            && let Some(memory) = limits.remove("memory-bytes")
        {
            limits.insert("memory".into(), memory);
        }
    };
    if let Some(filters) = config
        .get_mut("filters")
        .and_then(serde_json::Value::as_array_mut)
    {
        filters.iter_mut().for_each(rename);
    }
    if let Some(sink) = config.get_mut("sink") {
        rename(sink);
    }
    record.insert("config".into(), serde_json::Value::Object(config));
    record.insert("version".into(), INFO_VERSION.into());
    old
}

/// Where the changefeed's replication stands; written on every checkpoint move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChangefeedStatus {
    /// Version of this stored form ([`STATUS_VERSION`]).
    pub version: u32,
    /// Every event with commit ts <= this is durable downstream.
    pub checkpoint_ts: CheckpointTs,
}

impl ChangefeedStatus {
    /// The status of a changefeed that has not replicated anything after `start_ts`.
    pub fn at_start(start_ts: CommitTs) -> Self {
        Self {
            version: STATUS_VERSION,
            checkpoint_ts: CheckpointTs::from(start_ts),
        }
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("changefeed status always serializes")
    }

    /// Reads a stored form, refusing versions this build does not know.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_versioned(bytes, "changefeed status", STATUS_VERSION)
    }
}

/// One error a pipeline reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ErrorRecord {
    /// When the owner received it, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The epoch of the pipeline that reported it.
    pub epoch: Epoch,
    /// What the owner does about it.
    pub kind: ErrorKind,
    /// What went wrong (bounded, escaped).
    pub message: String,
}

/// One warning a pipeline reported (it kept running).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WarningRecord {
    /// When the owner received it, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The epoch of the pipeline that reported it.
    pub epoch: Epoch,
    /// What it said (bounded, escaped).
    pub message: String,
}

/// Why a changefeed failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FailReason {
    /// A config error.
    Config {
        /// What was wrong.
        message: String,
    },
    /// A fatal error.
    Fatal {
        /// What went wrong.
        message: String,
    },
    /// Retryable errors without checkpoint progress for too long.
    #[serde(rename_all = "kebab-case")]
    NoProgress {
        /// When the checkpoint last moved, or the first error of the streak if later.
        since_ms: u64,
        /// How long it waited (`fail-after-ms`).
        waited_ms: u64,
    },
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailReason::Config { message } => write!(
                f,
                "config error: {message}; correct the config with update, then resume"
            ),
            FailReason::Fatal { message } => write!(
                f,
                "fatal error: {message}; fix the cause downstream, then resume the changefeed \
                 (sluice cli changefeed resume); or, to skip the transaction or DDL that fails, \
                 add its commit ts to [filter] ignore-txn-start-ts, update the changefeed, then \
                 resume"
            ),
            FailReason::NoProgress { waited_ms, .. } => write!(
                f,
                "the checkpoint did not move for {} while retrying errors; see the errors, \
                 fix the cause, then resume",
                DisplayMillis(*waited_ms)
            ),
        }
    }
}

/// A duration in milliseconds shown in the largest whole unit (`30m`, `10s`, `1500ms`).
pub(crate) struct DisplayMillis(pub u64);

impl fmt::Display for DisplayMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        if ms > 0 && ms.is_multiple_of(3_600_000) {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms > 0 && ms.is_multiple_of(60_000) {
            write!(f, "{}m", ms / 60_000)
        } else if ms > 0 && ms.is_multiple_of(1_000) {
            write!(f, "{}s", ms / 1_000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

/// One changefeed as the owner holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Changefeed {
    /// Its description.
    pub info: ChangefeedInfo,
    /// Where it stands.
    pub status: ChangefeedStatus,
}

impl Changefeed {
    /// Creates a changefeed from an operator's description: checks it, then sets it
    /// running (state normal) at epoch 1 with its checkpoint at the start ts.
    /// Whatever state, epoch or records `info` carried are replaced.
    pub fn create(info: ChangefeedInfo, now_ms: u64) -> Result<Self, InfoError> {
        Self::incarnate(info, now_ms, Epoch::NONE)
    }

    /// A new incarnation after `previous_epoch` (a changefeed created again after
    /// removal keeps counting, so writers of the removed one stay fenced).
    pub(crate) fn incarnate(
        mut info: ChangefeedInfo,
        now_ms: u64,
        previous_epoch: Epoch,
    ) -> Result<Self, InfoError> {
        info.validate()?;
        info.created_at_ms = now_ms;
        info.state = FeedState::Normal;
        info.epoch = previous_epoch.next();
        info.errors.clear();
        info.error_count = 0;
        info.warnings.clear();
        info.failure = None;
        let status = ChangefeedStatus::at_start(info.start_ts);
        Ok(Self { info, status })
    }

    /// Its tenant and name.
    pub fn id(&self) -> &ChangefeedId {
        &self.info.id
    }

    /// Its lifecycle state.
    pub fn state(&self) -> FeedState {
        self.info.state
    }

    /// The epoch of its latest (re)start.
    pub fn epoch(&self) -> Epoch {
        self.info.epoch
    }

    /// Every row with commit ts at or below this is downstream.
    pub fn checkpoint(&self) -> CheckpointTs {
        self.status.checkpoint_ts
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::plugin::PluginRef;
    use sluice_config::{ByteSize, DataDir, DatagenConfig, PipelineConfig, SourceConfig};

    pub(crate) fn sample_config() -> ChangefeedConfig {
        ChangefeedConfig {
            source: SourceConfig::Datagen(DatagenConfig {
                seed: 7,
                ..Default::default()
            }),
            filter: Default::default(),
            filters: Vec::new(),
            sink: PluginRef::new("sink-file@0.1.0".parse().unwrap()),
            pipeline: PipelineConfig::default(),
            validator: Default::default(),
            consistent: Default::default(),
        }
    }

    pub(crate) fn sample_info(name: &str) -> ChangefeedInfo {
        ChangefeedInfo::new(
            ChangefeedId::new("shop", name).unwrap(),
            sample_config(),
            CommitTs::new(1_000),
        )
    }

    #[test]
    fn a_description_too_large_to_store_with_its_errors_is_refused() {
        let mut info = sample_info("big");
        info.spec = Some("#".repeat(MAX_INFO_BYTES));
        let err = info.validate().unwrap_err();
        assert!(
            matches!(err, InfoError::TooLarge { max, .. } if max == MAX_INFO_BYTES),
            "{err}"
        );
        info.spec = Some("#".repeat(MAX_INFO_BYTES - 1024));
        info.validate().unwrap();
    }

    #[test]
    fn a_ts_in_the_future_is_refused() {
        let now = 1_767_225_600_000;
        check_not_future("start-ts", CommitTs::compose(now, 5), now).unwrap();
        check_not_future("start-ts", CommitTs::compose(now + MAX_TS_AHEAD_MS, 0), now).unwrap();
        check_not_future("start-ts", CommitTs::ZERO, now).unwrap();
        let err = check_not_future("start-ts", CommitTs::new(u64::MAX), now).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("start-ts 18446744073709551615 is 68601518577663 ms in the future"),
            "{err}"
        );
        assert!(check_not_future("start-ts", CommitTs::compose(now + 61_000, 0), now).is_err());
    }

    #[test]
    fn messages_are_bounded_and_escaped_before_they_are_stored() {
        assert_eq!(bound_message("plain"), "plain");
        assert_eq!(
            bound_message("line 1\nforged: line 2\r\u{1b}[31m"),
            "line 1\\nforged: line 2\\r\\u{1b}[31m"
        );
        // Cut on a character boundary, the length noted.
        let long = "é".repeat(2 * 1024 * 1024 / 2);
        let cut = bound_message(&long);
        assert!(cut.len() < MAX_MESSAGE_BYTES + 64, "{}", cut.len());
        assert!(
            cut.ends_with(" ... (cut; 2097152 bytes in all)"),
            "{cut:.100}"
        );
        // A changefeed that records many huge errors stays small enough to store.
        let mut info = sample_info("huge");
        for at_ms in 0..20 {
            info.record_error(ErrorRecord {
                at_ms,
                epoch: Epoch(1),
                kind: ErrorKind::Fatal,
                message: "x".repeat(100 << 20),
            });
            info.record_warning(WarningRecord {
                at_ms,
                epoch: Epoch(1),
                message: "y".repeat(10 << 20),
            });
        }
        assert!(info.encode().len() < 128 << 10, "{}", info.encode().len());
    }

    #[test]
    fn create_starts_normal_at_epoch_one_with_checkpoint_at_start_ts() {
        let mut info = sample_info("orders");
        info.state = FeedState::Failed;
        info.epoch = Epoch(9);
        let cf = Changefeed::create(info, 42).unwrap();
        assert_eq!(cf.state(), FeedState::Normal);
        assert_eq!(cf.epoch(), Epoch(1));
        assert_eq!(cf.checkpoint(), CheckpointTs::new(1_000));
        assert_eq!(cf.info.created_at_ms, 42);
    }

    #[test]
    fn stored_form_is_kebab_case_and_round_trips() {
        let mut info = sample_info("orders");
        info.target_ts = Some(CommitTs::new(5_000));
        info.config
            .filters
            .push(PluginRef::new("filter-mask@1.0.0".parse().unwrap()));
        info.record_error(ErrorRecord {
            at_ms: 7,
            epoch: Epoch(1),
            kind: ErrorKind::Retryable,
            message: "connection reset".into(),
        });
        let json: serde_json::Value = serde_json::from_slice(&info.encode()).unwrap();
        assert_eq!(json["version"], 2);
        assert_eq!(
            json["id"],
            serde_json::json!({"tenant": "shop", "name": "orders"})
        );
        assert_eq!(json["start-ts"], 1_000);
        assert_eq!(json["target-ts"], 5_000);
        assert_eq!(json["created-at-ms"], 0);
        assert_eq!(json["state"], "normal");
        assert_eq!(json["epoch"], 0);
        assert_eq!(json["config"]["sink"]["plugin"], "sink-file@0.1.0");
        // Unset until resolved against the plugin (`Limits::resolve_memory`).
        assert!(json["config"]["sink"]["limits"].get("memory").is_none());
        assert_eq!(json["config"]["source"]["type"], "datagen");
        assert_eq!(json["config"]["source"]["seed"], 7);
        assert_eq!(json["config"]["pipeline"]["max-batch-rows"], 1024);
        assert_eq!(json["errors"][0]["kind"], "retryable");
        assert_eq!(json["errors"][0]["at-ms"], 7);
        assert_eq!(ChangefeedInfo::decode(&info.encode()).unwrap(), info);

        let status = ChangefeedStatus::at_start(CommitTs::new(9));
        assert_eq!(
            String::from_utf8(status.encode()).unwrap(),
            r#"{"version":1,"checkpoint-ts":9}"#
        );
        assert_eq!(ChangefeedStatus::decode(&status.encode()).unwrap(), status);
    }

    #[test]
    fn decode_refuses_unknown_versions_and_fields() {
        let mut json: serde_json::Value =
            serde_json::from_slice(&sample_info("a").encode()).unwrap();
        json["version"] = 3.into();
        let err = ChangefeedInfo::decode(json.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stored changefeed info has version 3, this build reads version 2; run a build \
             that knows version 3"
        );
        json["version"] = 2.into();
        json["surprise"] = true.into();
        let err = ChangefeedInfo::decode(json.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("stored changefeed info is malformed"),
            "{err}"
        );
        assert!(ChangefeedStatus::decode(b"{\"checkpoint-ts\":1}").is_err());
    }

    #[test]
    fn validate_rejects_target_not_after_start_and_a_bad_config() {
        let mut info = sample_info("orders");
        info.target_ts = Some(CommitTs::new(1_000));
        assert_eq!(
            info.validate().unwrap_err().to_string(),
            "target ts 1000 is not after start ts 1000; choose a later target ts, or leave it \
             out to replicate without end"
        );
        info.target_ts = None;
        info.config.pipeline.max_batch_rows = 0;
        assert_eq!(
            info.validate().unwrap_err().to_string(),
            "pipeline.max-batch-rows is 0; it must be between 1 and 65536"
        );
        info.config.pipeline.max_batch_rows = 1;
        info.config.sink.capabilities.tcp = vec!["db.internal:5432".into()];
        assert_eq!(
            info.validate().unwrap_err().to_string(),
            "sink.capabilities.tcp: `db.internal:5432` is not an ip:port pair"
        );
        info.config.sink.capabilities.tcp.clear();
        info.config.sink.capabilities.data_dir = DataDir::At("/srv".into());
        assert!(
            info.validate()
                .unwrap_err()
                .to_string()
                .starts_with("sink.capabilities.data-dir is the path /srv; the server chooses")
        );
    }

    #[test]
    fn keeps_only_the_newest_records() {
        let mut info = sample_info("orders");
        for i in 0..(MAX_RECORDS as u64 + 3) {
            info.record_warning(WarningRecord {
                at_ms: i,
                epoch: Epoch(1),
                message: format!("w{i}"),
            });
        }
        let times: Vec<u64> = info.warnings.iter().map(|w| w.at_ms).collect();
        assert_eq!(times, [3, 4, 5, 6, 7]);
    }

    #[test]
    fn error_count_keeps_counting_past_the_kept_records() {
        let mut info = sample_info("orders");
        for i in 0..(MAX_RECORDS as u64 + 3) {
            info.record_error(ErrorRecord {
                at_ms: i,
                epoch: Epoch(1),
                kind: ErrorKind::Retryable,
                message: format!("e{i}"),
            });
        }
        assert_eq!(info.errors.len(), MAX_RECORDS);
        assert_eq!(info.error_count, MAX_RECORDS as u64 + 3);
        let json: serde_json::Value = serde_json::from_slice(&info.encode()).unwrap();
        assert_eq!(json["error-count"], 8);
        assert_eq!(ChangefeedInfo::decode(&info.encode()).unwrap(), info);
        info.error_count = u64::MAX;
        info.record_error(info.errors[0].clone());
        assert_eq!(info.error_count, u64::MAX);
        // A new incarnation starts counting again, as its records do.
        let cf = Changefeed::incarnate(info, 9, Epoch(3)).unwrap();
        assert_eq!((cf.info.errors.len(), cf.info.error_count), (0, 0));
    }

    /// A record as the build before the typed config wrote it (stored-form
    /// version 1): the source and pipeline as the JSON of their TOML tables, only
    /// the keys the operator wrote, and `memory-bytes` in the plugins' limits.
    const V1_RECORD: &str = r#"{"version":1,"id":{"tenant":"acme","name":"orders"},
        "source":{"type":"datagen","total-rows":100,"mix":{"insert":5,"update":0,"delete":0}},
        "filters":[{"plugin":"filter-mask@0.1.0","config":{"columns":["email"]},
            "capabilities":{"data-dir":false,"tcp":[],"http":[]},
            "limits":{"memory-bytes":67108864,"call-timeout-ms":5000,
                "host-call-timeout-ms":30000,"max-resources":1024}}],
        "sink":{"plugin":"sink-file@0.1.0","config":{"format":"csv"},
            "capabilities":{"data-dir":true,"tcp":["10.0.0.1:9000"],"http":[]},
            "limits":{"memory-bytes":33554432,"call-timeout-ms":5000,
                "host-call-timeout-ms":30000,"max-resources":1024}},
        "pipeline":{"max-batch-rows":10,"max-batch-bytes":"8MiB"},
        "spec":"[source]\ntype = \"datagen\"\n","start-ts":5,"target-ts":9,
        "created-at-ms":1767225600000,"state":"stopped","epoch":3,"errors":[],
        "warnings":[]}"#;

    #[test]
    fn a_version_1_record_decodes_to_the_typed_config_its_file_gives() {
        let info = ChangefeedInfo::decode(V1_RECORD.as_bytes()).unwrap();
        assert_eq!(info.version, INFO_VERSION);
        assert_eq!(info.id, ChangefeedId::new("acme", "orders").unwrap());
        assert_eq!(
            (info.start_ts, info.target_ts),
            (CommitTs::new(5), Some(CommitTs::new(9)))
        );
        assert_eq!(
            (info.state, info.epoch, info.created_at_ms),
            (FeedState::Stopped, Epoch(3), 1_767_225_600_000)
        );
        // The same typed value the changefeed file gives today.
        let file = r#"
[source]
type = "datagen"
total-rows = 100
[source.mix]
insert = 5
update = 0
delete = 0

[[filters]]
plugin = "filter-mask@0.1.0"
config = { columns = ["email"] }

[sink]
plugin = "sink-file@0.1.0"
config = { format = "csv" }
limits = { memory = "32MiB" }
capabilities = { data-dir = true, tcp = ["10.0.0.1:9000"] }

[pipeline]
max-batch-rows = 10
max-batch-bytes = "8MiB"
"#;
        // A version 1 record always held the memory quota, the default too.
        let mut expected = ChangefeedConfig::parse(file).unwrap();
        expected.filters[0].limits.memory = Some(ByteSize(64 << 20));
        assert_eq!(info.config, expected);
        assert_eq!(info.config.sink.limits.memory, Some(ByteSize(32 << 20)));
        assert_eq!(info.config.pipeline.flush_interval_ms, 1_000);
        info.validate().unwrap();
        // Written back in the current form, it reads back the same.
        let json: serde_json::Value = serde_json::from_slice(&info.encode()).unwrap();
        assert_eq!(json["version"], 2);
        assert!(json.get("source").is_none() && json.get("sink").is_none());
        assert_eq!(ChangefeedInfo::decode(&info.encode()).unwrap(), info);

        // A version 1 record without a pipeline table gets the defaults.
        let mut old: serde_json::Value = serde_json::from_str(V1_RECORD).unwrap();
        old.as_object_mut().unwrap().remove("pipeline");
        let info = ChangefeedInfo::decode(old.to_string().as_bytes()).unwrap();
        assert_eq!(info.config.pipeline, PipelineConfig::default());
        // And one whose source no longer parses is refused, not guessed at.
        old["source"] = serde_json::json!({"type": "binlog"});
        let err = ChangefeedInfo::decode(old.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("stored changefeed info is malformed"),
            "{err}"
        );
    }

    #[test]
    fn records_written_before_the_error_count_still_load() {
        let mut json: serde_json::Value =
            serde_json::from_slice(&sample_info("a").encode()).unwrap();
        assert!(json.get("error-count").is_none(), "not written while zero");
        json["errors"] = serde_json::json!([
            {"at-ms": 1, "epoch": 1, "kind": "fatal", "message": "disk full"}
        ]);
        let info = ChangefeedInfo::decode(json.to_string().as_bytes()).unwrap();
        assert_eq!((info.errors.len(), info.error_count), (1, 1));
    }

    #[test]
    fn fail_reasons_say_what_to_do() {
        assert_eq!(
            FailReason::NoProgress {
                since_ms: 0,
                waited_ms: 1_800_000
            }
            .to_string(),
            "the checkpoint did not move for 30m while retrying errors; see the errors, fix \
             the cause, then resume"
        );
        assert_eq!(DisplayMillis(1_500).to_string(), "1500ms");
        assert_eq!(DisplayMillis(10_000).to_string(), "10s");
        assert_eq!(DisplayMillis(7_200_000).to_string(), "2h");
    }

    #[test]
    fn ended_swaps_keep_only_plugin_ids_so_many_large_tables_still_fit() {
        let mut info = sample_info("orders");
        // Options near their 64 KiB bound in every version swapped to.
        let big = serde_json::Value::String("x".repeat(60 << 10));
        for i in 0..(crate::MAX_SWAP_RECORDS as u64 + 5) {
            let mut to = info.config.sink.clone();
            to.plugin = format!("sink-file@0.{}.0", i + 2).parse().unwrap();
            to.config.insert("pad".into(), big.clone());
            let record = crate::swap::record_for(
                &info.config.sink,
                crate::SwapAsk {
                    role: crate::PluginRole::Sink,
                    to: to.clone(),
                    probation: Default::default(),
                    by: "t".into(),
                    expect: None,
                    promotes: None,
                },
                Epoch(1),
                0,
            )
            .unwrap();
            info.begin_swap(record);
            info.validate().unwrap();
            let seq = info.swap_count;
            let report = SwapReport {
                seq,
                state: SwapState::Done,
                barrier_ts: Some(5),
                pause_ms: Some(1),
                pause_us: None,
                reason: None,
            };
            assert!(info.on_swap_report(&report, 10));
            assert_eq!(info.config.sink, to, "the new version's table is the sink");
        }
        assert_eq!(info.swaps.len(), crate::MAX_SWAP_RECORDS);
        let last = info.swaps.last().unwrap();
        assert_eq!(last.state, SwapState::Done);
        assert!(last.from.config.is_empty() && last.to.config.is_empty());
        assert!(info.encode().len() < 200 << 10, "{}", info.encode().len());
        // A rollback hands back the old table whole.
        let old = info.config.sink.clone();
        let mut to = old.clone();
        to.plugin = "sink-file@9.0.0".parse().unwrap();
        let record = crate::swap::record_for(
            &old,
            crate::SwapAsk {
                role: crate::PluginRole::Sink,
                to,
                probation: Default::default(),
                by: "t".into(),
                expect: None,
                promotes: None,
            },
            Epoch(1),
            0,
        )
        .unwrap();
        info.begin_swap(record);
        let report = SwapReport {
            seq: info.swap_count,
            state: SwapState::RolledBack,
            barrier_ts: None,
            pause_ms: None,
            pause_us: None,
            reason: Some("trap".into()),
        };
        assert!(info.on_swap_report(&report, 20));
        assert_eq!(info.config.sink, old);
        assert!(!info.config.sink.config.is_empty());
    }
}
