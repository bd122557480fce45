//! `sluice-owner`: the lifecycle of changefeeds, as the owner runs it (TiCDC's owner
//! and feed state manager). It holds the changefeed model ([`ChangefeedInfo`] with
//! its [`ChangefeedId`], plugins and [`FeedState`]; [`ChangefeedStatus`] with the
//! checkpoint), applies admin jobs ([`apply_admin_job`]: create, pause, resume,
//! update, remove) with TiCDC's transition rules, hands out a new [`Epoch`] at every
//! (re)start and [`fence`]s writes from older ones, and decides, in
//! [`FeedStateManager`], how a running changefeed reacts to errors, checkpoints and
//! time: fail at once, back off and restart, return to normal, give up, or finish.
//! Time and jitter are injected ([`Clock`], [`JitterSource`]) so every path can
//! be tested step by step.
//!
//! On top of that pure logic sits the owner runtime: [`Owner`] is a handle on
//! one task that owns every changefeed's state, persists each change before it
//! acts on it, and starts and stops the work a capture does for a changefeed.
//! Callers send it commands; queries read the [`Snapshot`] it publishes. Its I/O
//! (the stored records, the plugins a changefeed names, the capture's work) goes
//! through an [`OwnerContext`]: the server plugs in the meta store
//! ([`MetaRecords`]), the plugin registry and [`Assigner`], which assigns work to
//! captures through the meta store and follows the task positions they report
//! ([`AssignedWork`]); tests plug in a fake.
//! It answers with an [`OwnerError`], grouped by what the caller does next; the
//! API maps that to gRPC codes and HTTP statuses.

mod actor;
mod admin;
mod assign;
mod backoff;
mod clock;
mod context;
mod epoch;
mod error;
mod id;
mod info;
mod manager;
mod plugin;
mod records;
mod rollout;
mod runtime;
mod shadow;
mod state;
mod swap;

#[cfg(test)]
mod tests;

pub use actor::{FeedView, Owner, Snapshot};
pub use admin::{AdminJob, Effect, apply_admin_job};
pub use assign::{
    ASSIGNMENT_VERSION, AssignedWork, Assigner, Assignment, Desired, RedoReport, Tables,
    TaskReport, TaskState,
};
pub use backoff::{Backoff, BackoffConfig, JitterSource, SeededJitter};
pub use clock::{Clock, FakeClock, SystemClock};
pub use context::{
    InfoWrite, LiveProgress, Outcome, OwnerContext, SaveError, Stored, Work, WorkProgress,
};
pub use epoch::{Epoch, fence};
pub use error::{AdminError, BackoffConfigError, DecodeError, Fenced, InfoError, OwnerError};
pub use id::{ChangefeedId, DEFAULT_TENANT};
pub use info::{
    Changefeed, ChangefeedInfo, ChangefeedStatus, ErrorKind, ErrorRecord, FailReason, INFO_VERSION,
    MAX_INFO_BYTES, MAX_MESSAGE_BYTES, MAX_RECORDS, MAX_TS_AHEAD_MS, STATUS_VERSION, WarningRecord,
    bound_message, check_not_future,
};
pub use manager::{Decision, FeedStateManager};
pub use plugin::{Capabilities, DataDir, Limits, PluginId, PluginRef};
pub use records::{GiveUp, MetaRecords};
pub use rollout::{MAX_ROLLOUT_BATCH, RolloutPlan, RolloutStep, RolloutSummary, rollout};
pub use runtime::{OwnerConfig, Totals};
pub use shadow::{
    LatencyReport, MAX_REPORTED_DIFFERENCES, MAX_SHADOW_LAG_MS, MAX_SHADOW_QUEUED_BYTES,
    MIN_SHADOW_LAG_MS, ShadowAsk, ShadowDifference, ShadowRecord, ShadowReport, ShadowState,
};
pub use sluice_config::{ChangefeedConfig, IdError, MAX_NAME_LEN, NameKind, validate_name};
pub use state::FeedState;
pub use swap::{
    MAX_PROBATION_FLUSHES, MAX_PROBATION_MS, MAX_PROBATION_RETRIES, MAX_SWAP_RECORDS, PluginRole,
    ProbationPolicy, SwapAsk, SwapRecord, SwapReport, SwapState, record_for, within_grants,
};
