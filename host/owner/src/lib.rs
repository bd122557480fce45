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
//!
//! Who is the owner is decided in [`election`]: captures register under their
//! leases and campaign (etcd's election recipe); the owner's writes carry the
//! guard of its [`OwnerTerm`].

mod actor;
mod admin;
mod assign;
mod backoff;
mod clock;
mod context;
pub mod election;
#[cfg(any(test, feature = "testing"))]
pub mod election_checks;
mod error;
mod id;
mod info;
mod manager;
mod plugin;
mod records;
pub mod relocate;
mod rollout;
mod runtime;
mod shadow;
mod state;
mod swap;
pub mod tables;

#[cfg(test)]
mod tests;

pub use actor::{FeedView, Owner, Snapshot};
pub use admin::{AdminJob, Effect, apply_admin_job};
pub use assign::{AssignedWork, Assigner, CaptureLoad, capture_loads, changefeed_rates, drained};
pub use backoff::{Backoff, BackoffConfig, JitterSource, SeededJitter};
pub use clock::{Clock, FakeClock, SystemClock};
pub use context::{InfoWrite, LiveProgress, OwnerContext, SaveError, Stored, Work, WorkProgress};
pub use election::{OwnerTerm, Registration};
pub use error::{AdminError, BackoffConfigError, DecodeError, InfoError, OwnerError};
pub use id::{ChangefeedId, DEFAULT_TENANT};
pub use info::{
    Changefeed, ChangefeedInfo, ChangefeedStatus, ErrorRecord, FailReason, INFO_VERSION,
    MAX_INFO_BYTES, MAX_RECORDS, MAX_TS_AHEAD_MS, STATUS_VERSION, WarningRecord, check_not_future,
};
pub use manager::{Decision, FeedStateManager};
pub use plugin::{Capabilities, DataDir, Limits, PluginId, PluginRef};
pub use records::{GiveUp, MetaRecords};
pub use rollout::{MAX_ROLLOUT_BATCH, RolloutPlan, RolloutStep, RolloutSummary, rollout};
pub use runtime::{OwnerConfig, Totals};
pub use shadow::{
    MAX_SHADOW_LAG_MS, MAX_SHADOW_QUEUED_BYTES, MIN_SHADOW_LAG_MS, ShadowAsk, ShadowRecord,
    ShadowState,
};
pub use sluice_config::{ChangefeedConfig, IdError, MAX_NAME_LEN, NameKind, validate_name};
pub use sluice_protocol::{
    ASSIGNMENT_VERSION, Assignment, CaptureInfo, Desired, Epoch, ErrorKind, Fenced, LatencyReport,
    MAX_MESSAGE_BYTES, MAX_REPORTED_DIFFERENCES, Outcome, RedoReport, ShadowDifference,
    ShadowReport, ShipRole, Shipment, SwapReport, SwapState, Tables, TaskReport, TaskState,
    WHOLE_ASSIGNMENT_VERSION, bound_message, fence,
};
pub use state::FeedState;
pub use swap::{
    MAX_PROBATION_FLUSHES, MAX_PROBATION_MS, MAX_PROBATION_RETRIES, MAX_SWAP_RECORDS, PluginRole,
    ProbationPolicy, SwapAsk, SwapRecord, record_for, within_grants,
};
