//! Admin jobs: what operators ask of a changefeed, and the pure function that
//! applies one to a changefeed record.
//!
//! A job that asks for what already holds succeeds and changes nothing (pausing a
//! stopped changefeed, resuming a running one without a new checkpoint, removing a
//! removed one). A job that cannot be carried out fails with an [`AdminError`] that
//! says what to do instead, and leaves the record untouched.
//!
//! | state \ job | create | pause | resume | update | remove |
//! |---|---|---|---|---|---|
//! | normal, warning, pending | already exists | stopped | unchanged; error with a checkpoint | pause first | removed |
//! | stopped | already exists | unchanged | normal, new epoch | updated | removed |
//! | failed | already exists | nothing to pause | normal, new epoch | updated | removed |
//! | finished | already exists | nothing to pause | normal, new epoch (below the target ts only) | cannot update | removed |
//! | removed | normal, new epoch | was removed | was removed | was removed | unchanged |

use sluice_core::CheckpointTs;

use crate::Epoch;
use crate::error::AdminError;
use crate::id::ChangefeedId;
use crate::info::{Changefeed, ChangefeedInfo};
use crate::shadow::{ShadowRecord, ShadowState};
use crate::state::FeedState;
use crate::swap::SwapRecord;

/// What an operator asks of a changefeed.
#[derive(Debug, Clone, PartialEq)]
pub enum AdminJob {
    /// Create the changefeed. On an existing record this only succeeds when the
    /// record was removed: the new incarnation continues its epochs.
    Create(Box<ChangefeedInfo>),
    /// Stop replicating, keeping the checkpoint.
    Pause,
    /// Start again after a pause, a failure or the end, from the checkpoint or from
    /// the given one.
    Resume {
        /// Resume from this checkpoint instead of the changefeed's own.
        overwrite_checkpoint: Option<CheckpointTs>,
    },
    /// Replace the source, filters, sink and target ts of a stopped or failed
    /// changefeed. The id and start ts cannot change; state, epoch, creation time and
    /// records are kept.
    Update(Box<ChangefeedInfo>),
    /// Stop replicating and drop the changefeed. Its record stays as a tombstone in
    /// state removed, so a later create continues its epochs.
    Remove,
    /// Replace the sink with another version (checked already) while the
    /// changefeed runs: record the swap and make the new version the sink. Its
    /// `from` must be the sink as it stands.
    Swap(Box<SwapRecord>),
    /// Run a candidate (checked already) in shadow beside the plugin in its
    /// role, whose version must be the record's `live`.
    ShadowStart(Box<ShadowRecord>),
    /// Stop the shadow running.
    ShadowStop,
}

impl AdminJob {
    /// The job's name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            AdminJob::Create(_) => "create",
            AdminJob::Pause => "pause",
            AdminJob::Resume { .. } => "resume",
            AdminJob::Update(_) => "update",
            AdminJob::Remove => "remove",
            AdminJob::Swap(_) => "swap",
            AdminJob::ShadowStart(_) => "shadow-start",
            AdminJob::ShadowStop => "shadow-stop",
        }
    }
}

/// What the server must do after a job was applied. In every case it first
/// persists the changed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Start a pipeline under `epoch`, replicating from `checkpoint` (create, resume).
    Start {
        /// The changefeed's new epoch.
        epoch: Epoch,
        /// Replicate what commits after this.
        checkpoint: CheckpointTs,
    },
    /// Stop the changefeed's pipeline, if any (pause).
    Stop,
    /// The description changed; nothing runs (update).
    Updated,
    /// Stop the pipeline, if any, and delete what the changefeed kept (remove).
    Remove,
    /// A plugin (a swap) or the shadow changed while the work runs on: tell
    /// the work.
    Reconfigured,
    /// Nothing changed.
    Unchanged,
}

/// Applies `job` to `cf` at `now_ms`. On error `cf` is unchanged.
pub fn apply_admin_job(
    cf: &mut Changefeed,
    job: AdminJob,
    now_ms: u64,
) -> Result<Effect, AdminError> {
    use FeedState::*;
    let state = cf.state();
    let id = cf.id().clone();
    if state == Removed {
        return match job {
            AdminJob::Create(info) => {
                if info.id != id {
                    return Err(AdminError::IdChanged {
                        id,
                        new_id: info.id.clone(),
                    });
                }
                *cf = Changefeed::incarnate(*info, now_ms, cf.epoch())?;
                Ok(start(cf))
            }
            AdminJob::Remove => Ok(Effect::Unchanged),
            AdminJob::Pause
            | AdminJob::Resume { .. }
            | AdminJob::Update(_)
            | AdminJob::Swap(_)
            | AdminJob::ShadowStart(_)
            | AdminJob::ShadowStop => Err(AdminError::Removed { id }),
        };
    }
    match job {
        AdminJob::Create(_) => Err(AdminError::AlreadyExists { id, state }),
        AdminJob::Pause => match state {
            Normal | Warning | Pending => {
                cf.info.state = Stopped;
                Ok(Effect::Stop)
            }
            Stopped => Ok(Effect::Unchanged),
            Failed | Finished | Removed => Err(AdminError::NothingToPause { id, state }),
        },
        AdminJob::Resume {
            overwrite_checkpoint,
        } => match state {
            Normal | Warning | Pending => match overwrite_checkpoint {
                Some(_) => Err(AdminError::OverwriteWhileActive { id, state }),
                None => Ok(Effect::Unchanged),
            },
            // (Removed was handled above.)
            Failed | Stopped | Finished | Removed => {
                let checkpoint = overwrite_checkpoint.unwrap_or(cf.checkpoint());
                if let Some(target) = cf.info.target_ts
                    && cf.info.reached_target(checkpoint)
                {
                    return Err(match overwrite_checkpoint {
                        Some(checkpoint) => AdminError::OverwritePastTarget {
                            id,
                            checkpoint,
                            target,
                        },
                        None => AdminError::AtTarget { id, target },
                    });
                }
                cf.status.checkpoint_ts = checkpoint;
                cf.info.state = Normal;
                cf.info.epoch = cf.epoch().next();
                cf.info.failure = None;
                Ok(start(cf))
            }
        },
        AdminJob::Update(new) => match state {
            Normal | Warning | Pending => Err(AdminError::UpdateWhileActive { id, state }),
            Finished => Err(AdminError::UpdateFinished { id }),
            // (Removed was handled above.)
            Stopped | Failed | Removed => {
                if new.id != id {
                    return Err(AdminError::IdChanged {
                        id,
                        new_id: new.id.clone(),
                    });
                }
                if new.start_ts != cf.info.start_ts {
                    return Err(AdminError::StartTsChanged {
                        id,
                        start: cf.info.start_ts,
                        new_start: new.start_ts,
                    });
                }
                new.validate()?;
                if let Some(target) = new.target_ts
                    && target.get() <= cf.checkpoint().get()
                {
                    return Err(AdminError::TargetNotAfterCheckpoint {
                        id,
                        target,
                        checkpoint: cf.checkpoint(),
                    });
                }
                let ChangefeedInfo {
                    config,
                    spec,
                    target_ts,
                    ..
                } = *new;
                cf.info.supersede_swap("the changefeed was updated", now_ms);
                cf.info.end_shadow(
                    ShadowState::Superseded,
                    Some("the changefeed was updated"),
                    now_ms,
                );
                cf.info.config = config;
                cf.info.spec = spec;
                cf.info.target_ts = target_ts;
                Ok(Effect::Updated)
            }
        },
        AdminJob::Remove => {
            cf.info.supersede_swap("the changefeed was removed", now_ms);
            cf.info.end_shadow(
                ShadowState::Superseded,
                Some("the changefeed was removed"),
                now_ms,
            );
            cf.info.state = Removed;
            cf.info.failure = None;
            Ok(Effect::Remove)
        }
        AdminJob::Swap(record) => {
            can_change_plugins(cf, &id)?;
            let role = record.role().ok_or_else(|| AdminError::NoSuchPlugin {
                id: id.clone(),
                role: record.role.clone(),
            })?;
            let current = cf
                .info
                .plugin(role)
                .ok_or_else(|| AdminError::NoSuchPlugin {
                    id: id.clone(),
                    role: record.role.clone(),
                })?;
            if record.from != *current {
                return Err(AdminError::SwapStale {
                    id,
                    expected: record.from.plugin.to_string(),
                    current: current.plugin.to_string(),
                });
            }
            // A shadow running: only its promotion may go ahead, and it
            // ends the shadow; a promotion of a shadow that no longer runs
            // is refused.
            let promotes = match (cf.info.running_shadow(), record.promotes) {
                (None, None) => false,
                (Some(s), Some(seq)) if s.seq == seq && s.role == record.role => true,
                (None, Some(_)) => return Err(AdminError::NoShadow { id }),
                (Some(s), _) => {
                    return Err(AdminError::ShadowRunning {
                        id,
                        seq: s.seq,
                        role: s.role.clone(),
                        candidate: s.candidate.plugin.to_string(),
                    });
                }
            };
            let mut next = cf.info.clone();
            if promotes {
                let why = format!("promoted: swap {}", next.swap_count + 1);
                next.end_shadow(ShadowState::Promoted, Some(&why), now_ms);
            }
            next.begin_swap(*record);
            next.validate()?;
            cf.info = next;
            Ok(Effect::Reconfigured)
        }
        AdminJob::ShadowStart(record) => {
            can_change_plugins(cf, &id)?;
            if let Some(s) = cf.info.running_shadow() {
                return Err(AdminError::ShadowRunning {
                    id,
                    seq: s.seq,
                    role: s.role.clone(),
                    candidate: s.candidate.plugin.to_string(),
                });
            }
            let current = record
                .role()
                .and_then(|r| cf.info.plugin(r))
                .ok_or_else(|| AdminError::NoSuchPlugin {
                    id: id.clone(),
                    role: record.role.clone(),
                })?;
            if record.live != current.plugin {
                return Err(AdminError::SwapStale {
                    id,
                    expected: record.live.to_string(),
                    current: current.plugin.to_string(),
                });
            }
            cf.info.begin_shadow(*record);
            Ok(Effect::Reconfigured)
        }
        AdminJob::ShadowStop => {
            if cf
                .info
                .end_shadow(ShadowState::Stopped, Some("stopped on request"), now_ms)
            {
                Ok(Effect::Reconfigured)
            } else {
                Err(AdminError::NoShadow { id })
            }
        }
    }
}

/// Refuses a swap or a shadow of a finished changefeed, or of one whose swap
/// is still open.
fn can_change_plugins(cf: &Changefeed, id: &ChangefeedId) -> Result<(), AdminError> {
    if cf.state() == FeedState::Finished {
        return Err(AdminError::SwapFinished { id: id.clone() });
    }
    if let Some(open) = cf.info.open_swap() {
        return Err(AdminError::SwapInProgress {
            id: id.clone(),
            seq: open.seq,
            from: open.from.plugin.to_string(),
            to: open.to.plugin.to_string(),
            state: open.state.as_str(),
        });
    }
    Ok(())
}

fn start(cf: &Changefeed) -> Effect {
    Effect::Start {
        epoch: cf.epoch(),
        checkpoint: cf.checkpoint(),
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::CommitTs;

    use super::*;
    use crate::info::FailReason;
    use crate::info::tests::sample_info;
    use crate::plugin::PluginRef;

    /// `shop/orders`, created at epoch 1, then put in `state` at epoch 4 with its
    /// checkpoint at 2000 and a target ts of 9000.
    fn feed_in(state: FeedState) -> Changefeed {
        let mut info = sample_info("orders");
        info.target_ts = Some(CommitTs::new(9_000));
        let mut cf = Changefeed::create(info, 0).unwrap();
        cf.info.state = state;
        cf.info.epoch = Epoch(4);
        cf.status.checkpoint_ts = CheckpointTs::new(2_000);
        if state == FeedState::Failed {
            cf.info.failure = Some(FailReason::Fatal {
                message: "disk full".into(),
            });
        }
        cf
    }

    fn updated_info() -> ChangefeedInfo {
        let mut info = sample_info("orders");
        info.config.sink = PluginRef::new("sink-file@0.2.0".parse().unwrap());
        info.target_ts = Some(CommitTs::new(12_000));
        info
    }

    fn jobs() -> Vec<AdminJob> {
        vec![
            AdminJob::Create(Box::new(sample_info("orders"))),
            AdminJob::Pause,
            AdminJob::Resume {
                overwrite_checkpoint: None,
            },
            AdminJob::Resume {
                overwrite_checkpoint: Some(CheckpointTs::new(1_500)),
            },
            AdminJob::Update(Box::new(updated_info())),
            AdminJob::Remove,
        ]
    }

    /// The expected outcome of each job of [`jobs`] in each state: the effect and the
    /// state afterwards, or the error message.
    fn expected(state: FeedState) -> [Result<(Effect, FeedState), &'static str>; 6] {
        use FeedState::*;
        let start = |epoch, checkpoint| {
            Ok((
                Effect::Start {
                    epoch: Epoch(epoch),
                    checkpoint: CheckpointTs::new(checkpoint),
                },
                Normal,
            ))
        };
        match state {
            Normal => [
                Err(
                    "changefeed shop/orders already exists (state normal); remove it first or choose another name",
                ),
                Ok((Effect::Stop, Stopped)),
                Ok((Effect::Unchanged, Normal)),
                Err(
                    "changefeed shop/orders is running; pause it before overwriting its checkpoint",
                ),
                Err("changefeed shop/orders is running; pause it before updating it"),
                Ok((Effect::Remove, Removed)),
            ],
            Warning => [
                Err(
                    "changefeed shop/orders already exists (state warning); remove it first or choose another name",
                ),
                Ok((Effect::Stop, Stopped)),
                Ok((Effect::Unchanged, Warning)),
                Err(
                    "changefeed shop/orders is running with a warning; pause it before overwriting its checkpoint",
                ),
                Err(
                    "changefeed shop/orders is running with a warning; pause it before updating it",
                ),
                Ok((Effect::Remove, Removed)),
            ],
            Pending => [
                Err(
                    "changefeed shop/orders already exists (state pending); remove it first or choose another name",
                ),
                Ok((Effect::Stop, Stopped)),
                Ok((Effect::Unchanged, Pending)),
                Err(
                    "changefeed shop/orders is waiting to restart after an error; pause it before overwriting its checkpoint",
                ),
                Err(
                    "changefeed shop/orders is waiting to restart after an error; pause it before updating it",
                ),
                Ok((Effect::Remove, Removed)),
            ],
            Failed => [
                Err(
                    "changefeed shop/orders already exists (state failed); remove it first or choose another name",
                ),
                Err(
                    "changefeed shop/orders is failed and not running, so there is nothing to pause; resume it or remove it",
                ),
                start(5, 2_000),
                start(5, 1_500),
                Ok((Effect::Updated, Failed)),
                Ok((Effect::Remove, Removed)),
            ],
            Stopped => [
                Err(
                    "changefeed shop/orders already exists (state stopped); remove it first or choose another name",
                ),
                Ok((Effect::Unchanged, Stopped)),
                start(5, 2_000),
                start(5, 1_500),
                Ok((Effect::Updated, Stopped)),
                Ok((Effect::Remove, Removed)),
            ],
            Finished => [
                Err(
                    "changefeed shop/orders already exists (state finished); remove it first or choose another name",
                ),
                Err(
                    "changefeed shop/orders is finished and not running, so there is nothing to pause; resume it or remove it",
                ),
                start(5, 2_000),
                start(5, 1_500),
                Err(
                    "changefeed shop/orders has finished; only a stopped or failed changefeed can be updated; remove it and create it again with the new settings",
                ),
                Ok((Effect::Remove, Removed)),
            ],
            Removed => [
                start(5, 1_000),
                Err("changefeed shop/orders was removed; create it again"),
                Err("changefeed shop/orders was removed; create it again"),
                Err("changefeed shop/orders was removed; create it again"),
                Err("changefeed shop/orders was removed; create it again"),
                Ok((Effect::Unchanged, Removed)),
            ],
        }
    }

    #[test]
    fn transition_table_every_state_and_job() {
        for state in FeedState::ALL {
            for (job, want) in jobs().into_iter().zip(expected(state)) {
                let name = job.name();
                let mut cf = feed_in(state);
                let before = cf.clone();
                let got = apply_admin_job(&mut cf, job, 77);
                match want {
                    Ok((effect, after)) => {
                        assert_eq!(got, Ok(effect), "{state} x {name}");
                        assert_eq!(cf.state(), after, "{state} x {name}");
                        let started = matches!(effect, Effect::Start { .. });
                        assert_eq!(
                            cf.epoch(),
                            if started { Epoch(5) } else { Epoch(4) },
                            "{state} x {name}: the epoch moves exactly on a start"
                        );
                        assert!(state.may_become(after), "{state} -> {after}");
                    }
                    Err(message) => {
                        assert_eq!(
                            got.map_err(|e| e.to_string()),
                            Err(message.to_owned()),
                            "{state} x {name}"
                        );
                        assert_eq!(cf, before, "{state} x {name}: an error changes nothing");
                    }
                }
            }
        }
    }

    #[test]
    fn resume_clears_the_failure_and_keeps_the_records() {
        let mut cf = feed_in(FeedState::Failed);
        cf.info.record_error(crate::info::ErrorRecord {
            at_ms: 1,
            epoch: Epoch(4),
            kind: crate::ErrorKind::Fatal,
            message: "disk full".into(),
        });
        apply_admin_job(
            &mut cf,
            AdminJob::Resume {
                overwrite_checkpoint: None,
            },
            5,
        )
        .unwrap();
        assert_eq!(cf.info.failure, None);
        assert_eq!(cf.info.errors.len(), 1);
    }

    #[test]
    fn resume_refuses_a_checkpoint_at_or_past_the_target_ts() {
        let mut cf = feed_in(FeedState::Stopped);
        let err = apply_admin_job(
            &mut cf,
            AdminJob::Resume {
                overwrite_checkpoint: Some(CheckpointTs::new(9_000)),
            },
            5,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "checkpoint 9000 is not below the target ts 9000 of changefeed shop/orders, so it \
             would finish at once; choose a smaller checkpoint"
        );
        let mut cf = feed_in(FeedState::Finished);
        cf.status.checkpoint_ts = CheckpointTs::new(9_000);
        let err = apply_admin_job(
            &mut cf,
            AdminJob::Resume {
                overwrite_checkpoint: None,
            },
            5,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "changefeed shop/orders already reached its target ts 9000; resume it with a \
             checkpoint below the target ts, or remove it"
        );
        assert_eq!(cf.epoch(), Epoch(4));
    }

    #[test]
    fn update_replaces_the_description_and_keeps_state_epoch_and_creation() {
        let mut cf = feed_in(FeedState::Stopped);
        let created = cf.info.created_at_ms;
        assert_eq!(
            apply_admin_job(&mut cf, AdminJob::Update(Box::new(updated_info())), 99),
            Ok(Effect::Updated)
        );
        assert_eq!(cf.info.config.sink.plugin.to_string(), "sink-file@0.2.0");
        assert_eq!(cf.info.target_ts, Some(CommitTs::new(12_000)));
        assert_eq!(
            (cf.state(), cf.epoch(), cf.info.created_at_ms),
            (FeedState::Stopped, Epoch(4), created)
        );
        assert_eq!(cf.checkpoint(), CheckpointTs::new(2_000));
    }

    #[test]
    fn update_refuses_renames_start_ts_changes_bad_plugins_and_a_passed_target() {
        let msg = |info: ChangefeedInfo| {
            let mut cf = feed_in(FeedState::Failed);
            let before = cf.clone();
            let err = apply_admin_job(&mut cf, AdminJob::Update(Box::new(info)), 1).unwrap_err();
            assert_eq!(cf, before);
            err.to_string()
        };
        assert_eq!(
            msg(sample_info("payments")),
            "changefeed shop/orders cannot be renamed to shop/payments; create a new changefeed \
             instead"
        );
        let mut info = updated_info();
        info.start_ts = CommitTs::new(5);
        assert_eq!(
            msg(info),
            "the start ts of changefeed shop/orders cannot change (from 1000 to 5); to replicate \
             from another ts, resume it with an overwritten checkpoint"
        );
        let mut info = updated_info();
        info.target_ts = Some(CommitTs::new(2_000));
        assert_eq!(
            msg(info),
            "target ts 2000 of changefeed shop/orders is not after its checkpoint 2000, so it \
             would finish at once; choose a later target ts"
        );
        let mut info = updated_info();
        info.config.sink.limits.memory = Some(sluice_config::ByteSize(0));
        assert_eq!(
            msg(info),
            "sink.limits.memory is 0 bytes; give a plugin at least 1MiB"
        );
    }

    #[test]
    fn create_after_remove_continues_the_epochs() {
        let mut cf = feed_in(FeedState::Removed);
        let mut info = sample_info("orders");
        info.start_ts = CommitTs::new(50);
        let effect = apply_admin_job(&mut cf, AdminJob::Create(Box::new(info)), 123).unwrap();
        assert_eq!(
            effect,
            Effect::Start {
                epoch: Epoch(5),
                checkpoint: CheckpointTs::new(50)
            }
        );
        assert_eq!(cf.info.created_at_ms, 123);
        assert_eq!(cf.info.target_ts, None);

        let mut cf = feed_in(FeedState::Removed);
        let err = apply_admin_job(&mut cf, AdminJob::Create(Box::new(sample_info("other"))), 1)
            .unwrap_err();
        assert!(matches!(err, AdminError::IdChanged { .. }));
    }
}
