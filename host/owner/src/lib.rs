//! `sluice-owner`: the lifecycle of changefeeds, as the owner runs it (TiCDC's owner
//! and feed state manager). It holds the changefeed model ([`ChangefeedInfo`] with
//! its [`ChangefeedId`], plugins and [`FeedState`]; [`ChangefeedStatus`] with the
//! checkpoint), applies admin jobs ([`apply_admin_job`]: create, pause, resume,
//! update, remove) with TiCDC's transition rules, hands out a new [`Epoch`] at every
//! (re)start and [`fence`]s writes from older ones, and decides, in
//! [`FeedStateManager`], how a running changefeed reacts to errors, checkpoints and
//! time: fail at once, back off and restart, return to normal, give up, or finish.
//! Everything here is pure logic: no I/O, no meta store, no async runtime. Time and
//! jitter are injected ([`Clock`], [`JitterSource`]) so every path can be tested
//! step by step; the server persists the records and carries out the decisions.

mod admin;
mod backoff;
mod clock;
mod epoch;
mod error;
mod id;
mod info;
mod manager;
mod plugin;
mod state;

#[cfg(test)]
mod tests;

pub use admin::{AdminJob, Effect, apply_admin_job};
pub use backoff::{Backoff, BackoffConfig, JitterSource, SeededJitter};
pub use clock::{Clock, FakeClock, SystemClock};
pub use epoch::{Epoch, fence};
pub use error::{AdminError, BackoffConfigError, DecodeError, Fenced, IdError, InfoError};
pub use id::{ChangefeedId, DEFAULT_TENANT, MAX_NAME_LEN, NameKind, validate_name};
pub use info::{
    Changefeed, ChangefeedInfo, ChangefeedStatus, ErrorKind, ErrorRecord, FailReason, INFO_VERSION,
    MAX_INFO_BYTES, MAX_MESSAGE_BYTES, MAX_RECORDS, MAX_TS_AHEAD_MS, STATUS_VERSION, WarningRecord,
    bound_message, check_not_future,
};
pub use manager::{Decision, FeedStateManager};
pub use plugin::{Capabilities, Limits, PluginId, PluginRef};
pub use state::FeedState;
