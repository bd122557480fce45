//! The changefeed model as the owner stores it: [`ChangefeedInfo`] (what to
//! replicate, its state, epoch and recent errors; written when any of these change)
//! and [`ChangefeedStatus`] (the checkpoint; written often). Both carry a `version`
//! for their stored form and are JSON with kebab-case keys.

use std::fmt;

use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointTs, CommitTs, PluginError};

use crate::epoch::Epoch;
use crate::error::{DecodeError, InfoError};
use crate::id::ChangefeedId;
use crate::plugin::PluginRef;
use crate::state::FeedState;

/// The stored form of [`ChangefeedInfo`] this crate writes and reads.
pub const INFO_VERSION: u32 = 1;
/// The stored form of [`ChangefeedStatus`] this crate writes and reads.
pub const STATUS_VERSION: u32 = 1;
/// How many error and warning records a changefeed keeps (the newest).
pub const MAX_RECORDS: usize = 5;

/// What to replicate and where the changefeed stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChangefeedInfo {
    /// Version of this stored form ([`INFO_VERSION`]).
    pub version: u32,
    pub id: ChangefeedId,
    /// The source's configuration. Opaque to the owner; the server parses it.
    pub source: serde_json::Value,
    /// Filter plugins, applied in order.
    #[serde(default)]
    pub filters: Vec<PluginRef>,
    /// The sink plugin.
    pub sink: PluginRef,
    /// Pipeline tuning (batch sizes, flush interval). Opaque to the owner; the
    /// server parses it. Null means the defaults.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub pipeline: serde_json::Value,
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
    pub state: FeedState,
    /// The epoch of the latest (re)start; [`Epoch::NONE`] before the first.
    pub epoch: Epoch,
    /// The latest errors, oldest first, at most [`MAX_RECORDS`].
    #[serde(default)]
    pub errors: Vec<ErrorRecord>,
    /// The latest warnings, oldest first, at most [`MAX_RECORDS`].
    #[serde(default)]
    pub warnings: Vec<WarningRecord>,
    /// Why the changefeed is failed; set only in [`FeedState::Failed`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailReason>,
}

impl ChangefeedInfo {
    /// A changefeed description with no filters and no target ts, not yet created
    /// (state normal, epoch 0, created at 0: [`crate::Changefeed::create`] sets them).
    pub fn new(
        id: ChangefeedId,
        source: serde_json::Value,
        sink: PluginRef,
        start_ts: CommitTs,
    ) -> Self {
        Self {
            version: INFO_VERSION,
            id,
            source,
            filters: Vec::new(),
            sink,
            pipeline: serde_json::Value::Null,
            spec: None,
            start_ts,
            target_ts: None,
            created_at_ms: 0,
            state: FeedState::Normal,
            epoch: Epoch::NONE,
            errors: Vec::new(),
            warnings: Vec::new(),
            failure: None,
        }
    }

    /// Pure checks of what an operator wrote: the stored-form version, the source,
    /// every plugin's grants and quotas, and the target ts against the start ts.
    /// Plugin options are checked by the plugins' own `validate-config`.
    pub fn validate(&self) -> Result<(), InfoError> {
        if self.version != INFO_VERSION {
            return Err(InfoError::Version {
                found: self.version,
                supported: INFO_VERSION,
            });
        }
        if self.source.is_null() {
            return Err(InfoError::NoSource {
                id: self.id.clone(),
            });
        }
        for plugin in self.filters.iter().chain(std::iter::once(&self.sink)) {
            plugin.validate()?;
        }
        if let Some(target) = self.target_ts
            && target <= self.start_ts
        {
            return Err(InfoError::TargetNotAfterStart {
                target,
                start: self.start_ts,
            });
        }
        Ok(())
    }

    /// Whether the checkpoint has reached the target ts.
    pub fn reached_target(&self, checkpoint: CheckpointTs) -> bool {
        self.target_ts.is_some_and(|t| checkpoint.get() >= t.get())
    }

    /// Appends an error record, keeping the newest [`MAX_RECORDS`].
    pub fn record_error(&mut self, record: ErrorRecord) {
        push_bounded(&mut self.errors, record);
    }

    /// Appends a warning record, keeping the newest [`MAX_RECORDS`].
    pub fn record_warning(&mut self, record: WarningRecord) {
        push_bounded(&mut self.warnings, record);
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("changefeed info always serializes")
    }

    /// Reads a stored form, refusing versions this build does not know.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_versioned(bytes, "changefeed info", INFO_VERSION)
    }
}

fn push_bounded<T>(list: &mut Vec<T>, item: T) {
    list.push(item);
    if list.len() > MAX_RECORDS {
        let excess = list.len() - MAX_RECORDS;
        list.drain(..excess);
    }
}

fn decode_versioned<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    supported: u32,
) -> Result<T, DecodeError> {
    #[derive(Deserialize)]
    struct Peek {
        version: u32,
    }
    let peek: Peek =
        serde_json::from_slice(bytes).map_err(|source| DecodeError::Malformed { what, source })?;
    if peek.version != supported {
        return Err(DecodeError::Version {
            what,
            found: peek.version,
            supported,
        });
    }
    serde_json::from_slice(bytes).map_err(|source| DecodeError::Malformed { what, source })
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
            checkpoint_ts: CheckpointTs(start_ts.get()),
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

/// How the owner reacts to an error (DESIGN §3): grouped by what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The configuration is wrong: fail at once; retrying cannot help.
    Config,
    /// Retrying will not help: fail at once.
    Fatal,
    /// Transient: back off and restart from the checkpoint.
    Retryable,
}

impl ErrorKind {
    /// The kind of a plugin error. Traps, exhausted quotas and deadlines
    /// (`Stopped`) are retryable with a fresh instance; a call the host refused
    /// (`Refused`) would be refused again, so it is fatal.
    pub fn of_plugin_error(err: &PluginError) -> Self {
        match err {
            PluginError::Config(_) => ErrorKind::Config,
            e if e.is_retryable() => ErrorKind::Retryable,
            _ => ErrorKind::Fatal,
        }
    }

    /// The kind's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Fatal => "fatal",
            ErrorKind::Retryable => "retryable",
        }
    }
}

impl From<&PluginError> for ErrorKind {
    fn from(err: &PluginError) -> Self {
        ErrorKind::of_plugin_error(err)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    pub kind: ErrorKind,
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
    pub message: String,
}

/// Why a changefeed failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FailReason {
    /// A config error.
    Config { message: String },
    /// A fatal error.
    Fatal { message: String },
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
                "fatal error: {message}; fix the cause downstream, then resume"
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
    pub info: ChangefeedInfo,
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
        info.warnings.clear();
        info.failure = None;
        let status = ChangefeedStatus::at_start(info.start_ts);
        Ok(Self { info, status })
    }

    pub fn id(&self) -> &ChangefeedId {
        &self.info.id
    }

    pub fn state(&self) -> FeedState {
        self.info.state
    }

    pub fn epoch(&self) -> Epoch {
        self.info.epoch
    }

    pub fn checkpoint(&self) -> CheckpointTs {
        self.status.checkpoint_ts
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_info(name: &str) -> ChangefeedInfo {
        ChangefeedInfo::new(
            ChangefeedId::new("shop", name).unwrap(),
            serde_json::json!({"type": "datagen", "seed": 7}),
            PluginRef::new("sink-file@0.1.0".parse().unwrap()),
            CommitTs(1_000),
        )
    }

    #[test]
    fn create_starts_normal_at_epoch_one_with_checkpoint_at_start_ts() {
        let mut info = sample_info("orders");
        info.state = FeedState::Failed;
        info.epoch = Epoch(9);
        let cf = Changefeed::create(info, 42).unwrap();
        assert_eq!(cf.state(), FeedState::Normal);
        assert_eq!(cf.epoch(), Epoch(1));
        assert_eq!(cf.checkpoint(), CheckpointTs(1_000));
        assert_eq!(cf.info.created_at_ms, 42);
    }

    #[test]
    fn stored_form_is_kebab_case_and_round_trips() {
        let mut info = sample_info("orders");
        info.target_ts = Some(CommitTs(5_000));
        info.filters
            .push(PluginRef::new("filter-mask@1.0.0".parse().unwrap()));
        info.record_error(ErrorRecord {
            at_ms: 7,
            epoch: Epoch(1),
            kind: ErrorKind::Retryable,
            message: "connection reset".into(),
        });
        let json: serde_json::Value = serde_json::from_slice(&info.encode()).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(
            json["id"],
            serde_json::json!({"tenant": "shop", "name": "orders"})
        );
        assert_eq!(json["start-ts"], 1_000);
        assert_eq!(json["target-ts"], 5_000);
        assert_eq!(json["created-at-ms"], 0);
        assert_eq!(json["state"], "normal");
        assert_eq!(json["epoch"], 0);
        assert_eq!(json["sink"]["plugin"], "sink-file@0.1.0");
        assert_eq!(json["errors"][0]["kind"], "retryable");
        assert_eq!(json["errors"][0]["at-ms"], 7);
        assert_eq!(ChangefeedInfo::decode(&info.encode()).unwrap(), info);

        let status = ChangefeedStatus::at_start(CommitTs(9));
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
        json["version"] = 2.into();
        let err = ChangefeedInfo::decode(json.to_string().as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stored changefeed info has version 2, this build reads version 1; run a build \
             that knows version 2"
        );
        json["version"] = 1.into();
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
    fn validate_rejects_target_not_after_start_and_missing_source() {
        let mut info = sample_info("orders");
        info.target_ts = Some(CommitTs(1_000));
        assert_eq!(
            info.validate().unwrap_err().to_string(),
            "target ts 1000 is not after start ts 1000; choose a later target ts, or leave it \
             out to replicate without end"
        );
        info.target_ts = None;
        info.source = serde_json::Value::Null;
        assert_eq!(
            info.validate().unwrap_err().to_string(),
            "changefeed shop/orders has no source; add a source section"
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
    fn plugin_errors_map_to_error_kinds() {
        let kind = |e: PluginError| ErrorKind::of_plugin_error(&e);
        assert_eq!(kind(PluginError::Config("x".into())), ErrorKind::Config);
        assert_eq!(kind(PluginError::Fatal("x".into())), ErrorKind::Fatal);
        assert_eq!(
            kind(PluginError::Retryable("x".into())),
            ErrorKind::Retryable
        );
        assert_eq!(
            kind(PluginError::Stopped("trap".into())),
            ErrorKind::Retryable
        );
        assert_eq!(
            kind(PluginError::Refused("too big".into())),
            ErrorKind::Fatal
        );
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
}
