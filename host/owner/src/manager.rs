//! The feed state manager: one changefeed's state machine at run time (TiCDC's
//! `feedStateManager`). It takes what the changefeed's pipeline reports (errors,
//! warnings, checkpoints, the end), admin jobs and the passing of time, and answers
//! each with a [`Decision`] for the server to carry out. It does no I/O: time comes
//! from an injected [`Clock`], jitter from an injected [`JitterSource`].
//!
//! - A config or fatal error fails the changefeed at once.
//! - A retryable error (plugin traps included) stops the pipeline: the changefeed
//!   is pending until its backoff ends, then restarts under a new epoch in state
//!   warning. Waits grow from `initial-interval-ms` by `multiplier` up to
//!   `max-interval-ms`, each moved by up to `jitter` either way.
//! - Once the checkpoint moves, a warning changefeed is normal again and the
//!   backoff starts over.
//! - If the checkpoint has not moved for `fail-after-ms` since the first error of a
//!   streak, the changefeed fails.
//! - A checkpoint at or past the target ts, or the pipeline reporting the end,
//!   finishes it.
//!
//! Reports carry the epoch of the pipeline that made them; reports from any other
//! epoch are [`Fenced`] and change nothing.

use sluice_core::CheckpointTs;

use crate::ErrorKind;
use crate::Fenced;
use crate::admin::{self, AdminJob, Effect};
use crate::backoff::{Backoff, BackoffConfig, JitterSource};
use crate::clock::Clock;
use crate::error::{AdminError, BackoffConfigError};
use crate::info::{Changefeed, ErrorRecord, FailReason, WarningRecord};
use crate::state::FeedState;
use crate::{Epoch, fence};

/// What the server must do now. Every decision that changed the record
/// (`Restart`, `Fail`, `Finish`) must be persisted before it is acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The pipeline of the current epoch keeps running; nothing to change.
    Run,
    /// Stop any old pipeline and start one under `epoch`, from `checkpoint`.
    Restart {
        /// The changefeed's new epoch.
        epoch: Epoch,
        /// Replicate what commits after this.
        checkpoint: CheckpointTs,
    },
    /// No pipeline may run; call [`FeedStateManager::tick`] at or after this time
    /// (milliseconds since the Unix epoch).
    WaitUntil(u64),
    /// The changefeed has just failed: stop its pipeline and show the reason.
    Fail(FailReason),
    /// The changefeed has just finished: stop its pipeline.
    Finish,
    /// The changefeed does not run (stopped, failed, finished or removed) and
    /// nothing will change until an admin job.
    Idle,
}

/// An error streak: from the first error after the checkpoint last moved, until it
/// moves again in a running changefeed (or an operator intervenes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Streak {
    /// Start of the no-progress clock: the first error or warning of the streak, or
    /// a later checkpoint move while the changefeed was pending.
    stalled_since_ms: u64,
    /// While pending: when the restart is due.
    restart_at_ms: Option<u64>,
}

/// One changefeed's run-time state machine. See the module docs.
#[derive(Debug)]
pub struct FeedStateManager<C, J> {
    changefeed: Changefeed,
    config: BackoffConfig,
    clock: C,
    jitter: J,
    backoff: Backoff,
    streak: Option<Streak>,
    /// The latest time seen; the manager's now never goes back.
    now_ms: u64,
    /// An epoch whose run ended without finishing or failing (stopped: its
    /// capture left, was drained, or stopped): a running changefeed runs
    /// again under the next epoch, so that no two runs share one.
    ended: Option<Epoch>,
}

impl<C: Clock, J: JitterSource> FeedStateManager<C, J> {
    /// Takes charge of a changefeed as loaded or just created. Backoff state is not
    /// stored: a changefeed loaded in state pending restarts after a fresh
    /// `initial-interval-ms`, and one loaded in warning starts a fresh no-progress
    /// clock.
    pub fn new(
        changefeed: Changefeed,
        config: BackoffConfig,
        clock: C,
        jitter: J,
    ) -> Result<Self, BackoffConfigError> {
        config.validate()?;
        let now_ms = clock.now_ms();
        let mut manager = Self {
            changefeed,
            config,
            clock,
            jitter,
            backoff: Backoff::new(config),
            streak: None,
            now_ms,
            ended: None,
        };
        match manager.changefeed.state() {
            FeedState::Pending => {
                let delay = manager.backoff.next_delay(&mut manager.jitter);
                manager.streak = Some(Streak {
                    stalled_since_ms: now_ms,
                    restart_at_ms: Some(now_ms.saturating_add(delay)),
                });
            }
            FeedState::Warning => {
                manager.streak = Some(Streak {
                    stalled_since_ms: now_ms,
                    restart_at_ms: None,
                });
            }
            _ => {}
        }
        Ok(manager)
    }

    /// The changefeed as it stands; persist it after every call that changed it.
    pub fn changefeed(&self) -> &Changefeed {
        &self.changefeed
    }

    /// Gives the changefeed back.
    pub fn into_changefeed(self) -> Changefeed {
        self.changefeed
    }

    /// The backoff options it runs with.
    pub fn config(&self) -> &BackoffConfig {
        &self.config
    }

    /// While pending: when the restart is due.
    pub fn restart_at(&self) -> Option<u64> {
        self.streak.and_then(|s| s.restart_at_ms)
    }

    /// During an error streak: when the changefeed fails unless its checkpoint moves.
    pub fn fail_at(&self) -> Option<u64> {
        self.streak
            .map(|s| s.stalled_since_ms.saturating_add(self.config.fail_after_ms))
    }

    /// Checks a pipeline's epoch against the changefeed's.
    pub fn fence(&self, epoch: Epoch) -> Result<(), Fenced> {
        fence(epoch, self.changefeed.epoch())
    }

    /// Applies an operator's job (see [`admin::apply_admin_job`]). A start, a pause
    /// or a removal ends any error streak and resets the backoff.
    pub fn apply_admin_job(&mut self, job: AdminJob) -> Result<Effect, AdminError> {
        let now = self.now();
        let effect = admin::apply_admin_job(&mut self.changefeed, job, now)?;
        match effect {
            Effect::Start { .. } | Effect::Stop | Effect::Remove => self.end_streak(),
            Effect::Updated | Effect::Unchanged | Effect::Reconfigured => {}
        }
        Ok(effect)
    }

    /// The work finished (its source ended) with the new version of a swap
    /// still on probation: it delivered everything, so the swap is done.
    pub fn on_finished_with_swap(&mut self) {
        let now = self.now();
        self.changefeed.info.finish_open_swap(now);
    }

    /// A capture reported on a swap (see [`crate::ChangefeedInfo::on_swap_report`]);
    /// reports of another epoch count too (a swap spans restarts), reports of a
    /// removed changefeed do not. Returns whether the changefeed changed.
    pub fn on_swap_report(&mut self, report: &crate::SwapReport) -> bool {
        if self.changefeed.state() == FeedState::Removed {
            return false;
        }
        let now = self.now();
        self.changefeed.info.on_swap_report(report, now)
    }

    /// A capture reported on a shadow (see
    /// [`crate::ChangefeedInfo::on_shadow_report`]). Returns whether the
    /// changefeed changed.
    pub fn on_shadow_report(&mut self, report: &crate::ShadowReport) -> bool {
        if self.changefeed.state() == FeedState::Removed {
            return false;
        }
        let now = self.now();
        self.changefeed.info.on_shadow_report(report, now)
    }

    /// The pipeline of `epoch` reported an error. Errors reach a changefeed that is
    /// running or pending only; otherwise they are ignored.
    pub fn on_error(
        &mut self,
        epoch: Epoch,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> Result<Decision, Fenced> {
        let now = self.now();
        self.fence(epoch)?;
        let state = self.changefeed.state();
        if !state.is_active() {
            return Ok(self.evaluate(now));
        }
        // Bounded and escaped before it is stored, shown or logged: a plugin's
        // error text must not make the record unstorable.
        let message = crate::bound_message(&message.into());
        self.changefeed.info.record_error(ErrorRecord {
            at_ms: now,
            epoch,
            kind,
            message: message.clone(),
        });
        match kind {
            ErrorKind::Config => return Ok(self.fail(FailReason::Config { message })),
            ErrorKind::Fatal => return Ok(self.fail(FailReason::Fatal { message })),
            ErrorKind::Retryable if state == FeedState::Pending => {}
            ErrorKind::Retryable => {
                let stalled_since_ms = match self.streak {
                    Some(s) => s.stalled_since_ms,
                    None => {
                        self.backoff.reset();
                        now
                    }
                };
                let delay = self.backoff.next_delay(&mut self.jitter);
                self.streak = Some(Streak {
                    stalled_since_ms,
                    restart_at_ms: Some(now.saturating_add(delay)),
                });
                self.changefeed.info.state = FeedState::Pending;
            }
        }
        Ok(self.evaluate(now))
    }

    /// The pipeline of `epoch` reported a warning: it keeps running, but a normal
    /// changefeed turns warning and its no-progress clock starts.
    pub fn on_warning(
        &mut self,
        epoch: Epoch,
        message: impl Into<String>,
    ) -> Result<Decision, Fenced> {
        let now = self.now();
        self.fence(epoch)?;
        let state = self.changefeed.state();
        if state.is_active() {
            self.changefeed.info.record_warning(WarningRecord {
                at_ms: now,
                epoch,
                message: message.into(),
            });
        }
        if state == FeedState::Normal {
            self.changefeed.info.state = FeedState::Warning;
            self.streak.get_or_insert(Streak {
                stalled_since_ms: now,
                restart_at_ms: None,
            });
        }
        Ok(self.evaluate(now))
    }

    /// The pipeline of `epoch` made everything up to `checkpoint` durable. The
    /// checkpoint only moves forward; a smaller one is ignored. Ignored once the
    /// changefeed finished or was removed.
    pub fn on_checkpoint(
        &mut self,
        epoch: Epoch,
        checkpoint: CheckpointTs,
    ) -> Result<Decision, Fenced> {
        let now = self.now();
        self.fence(epoch)?;
        let state = self.changefeed.state();
        if matches!(state, FeedState::Finished | FeedState::Removed)
            || checkpoint <= self.changefeed.checkpoint()
        {
            return Ok(self.evaluate(now));
        }
        self.changefeed.status.checkpoint_ts = checkpoint;
        if state.is_active() && self.changefeed.info.reached_target(checkpoint) {
            return Ok(self.finish());
        }
        match state {
            FeedState::Warning => {
                self.changefeed.info.state = FeedState::Normal;
                self.end_streak();
            }
            FeedState::Pending => {
                if let Some(streak) = &mut self.streak {
                    streak.stalled_since_ms = now;
                }
            }
            _ => {}
        }
        Ok(self.evaluate(now))
    }

    /// The pipeline of `epoch` delivered everything it will ever deliver (the
    /// target ts, or the end of a bounded source) and reported its final
    /// checkpoint first. Finishes a running or pending changefeed.
    pub fn on_target_reached(&mut self, epoch: Epoch) -> Result<Decision, Fenced> {
        let now = self.now();
        self.fence(epoch)?;
        if self.changefeed.state().is_active() {
            return Ok(self.finish());
        }
        Ok(self.evaluate(now))
    }

    /// The run of `epoch` stopped without finishing or failing (its capture
    /// left or was drained, or it was stopped there): the next decision of a
    /// running changefeed starts it again under a new epoch, at once.
    pub fn on_run_stopped(&mut self, epoch: Epoch) -> Result<(), Fenced> {
        self.fence(epoch)?;
        self.ended = Some(epoch);
        Ok(())
    }

    /// The passing of time: restarts a pending changefeed whose backoff ended, and
    /// fails one whose checkpoint has not moved for `fail-after-ms`.
    pub fn tick(&mut self) -> Decision {
        let now = self.now();
        self.evaluate(now)
    }

    fn now(&mut self) -> u64 {
        self.now_ms = self.now_ms.max(self.clock.now_ms());
        self.now_ms
    }

    fn evaluate(&mut self, now: u64) -> Decision {
        match self.changefeed.state() {
            FeedState::Normal => self.run(),
            FeedState::Warning => match self.fail_at() {
                Some(fail_at) if now >= fail_at => self.fail_no_progress(),
                _ => self.run(),
            },
            FeedState::Pending => {
                let streak = *self.streak.get_or_insert(Streak {
                    stalled_since_ms: now,
                    restart_at_ms: Some(now),
                });
                let fail_at = streak
                    .stalled_since_ms
                    .saturating_add(self.config.fail_after_ms);
                let restart_at = streak.restart_at_ms.unwrap_or(now);
                if now >= fail_at {
                    self.fail_no_progress()
                } else if now >= restart_at {
                    self.restart()
                } else {
                    Decision::WaitUntil(restart_at.min(fail_at))
                }
            }
            FeedState::Failed | FeedState::Stopped | FeedState::Finished | FeedState::Removed => {
                Decision::Idle
            }
        }
    }

    /// Keeps the current run, or starts the next epoch's if the current one
    /// has stopped (the state stays as it is).
    fn run(&mut self) -> Decision {
        let epoch = self.changefeed.epoch();
        if self.ended.take() != Some(epoch) {
            return Decision::Run;
        }
        let info = &mut self.changefeed.info;
        info.epoch = epoch.next();
        Decision::Restart {
            epoch: info.epoch,
            checkpoint: self.changefeed.status.checkpoint_ts,
        }
    }

    fn restart(&mut self) -> Decision {
        let info = &mut self.changefeed.info;
        info.epoch = info.epoch.next();
        info.state = FeedState::Warning;
        if let Some(streak) = &mut self.streak {
            streak.restart_at_ms = None;
        }
        Decision::Restart {
            epoch: info.epoch,
            checkpoint: self.changefeed.status.checkpoint_ts,
        }
    }

    fn fail_no_progress(&mut self) -> Decision {
        let since_ms = self.streak.map_or(self.now_ms, |s| s.stalled_since_ms);
        self.fail(FailReason::NoProgress {
            since_ms,
            waited_ms: self.config.fail_after_ms,
        })
    }

    fn fail(&mut self, reason: FailReason) -> Decision {
        self.changefeed.info.state = FeedState::Failed;
        self.changefeed.info.failure = Some(reason.clone());
        self.end_streak();
        Decision::Fail(reason)
    }

    fn finish(&mut self) -> Decision {
        self.changefeed.info.state = FeedState::Finished;
        self.end_streak();
        Decision::Finish
    }

    fn end_streak(&mut self) {
        self.streak = None;
        self.backoff.reset();
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::CommitTs;

    use super::*;
    use crate::backoff::SeededJitter;
    use crate::backoff::tests::FixedJitter;
    use crate::clock::FakeClock;
    use crate::info::tests::sample_info;

    const SEC: u64 = 1_000;
    const MIN: u64 = 60 * SEC;

    type Manager<J> = FeedStateManager<FakeClock, J>;

    /// A manager of a changefeed created at time 0 (epoch 1, checkpoint 1000), with
    /// the default backoff and jitter pinned to the middle (no jitter).
    fn manager(target: Option<u64>) -> (Manager<FixedJitter>, FakeClock) {
        manager_with(target, BackoffConfig::default(), FixedJitter(0.5))
    }

    fn manager_with<J: JitterSource>(
        target: Option<u64>,
        config: BackoffConfig,
        jitter: J,
    ) -> (Manager<J>, FakeClock) {
        let clock = FakeClock::new(0);
        let mut info = sample_info("orders");
        info.target_ts = target.map(CommitTs::new);
        let cf = Changefeed::create(info, 0).unwrap();
        let m = FeedStateManager::new(cf, config, clock.clone(), jitter).unwrap();
        (m, clock)
    }

    #[test]
    fn a_stopped_run_is_followed_by_one_under_the_next_epoch_at_once() {
        let (mut m, _clock) = manager(None);
        assert_eq!(m.tick(), Decision::Run);
        // A report of another epoch changes nothing.
        assert!(m.on_run_stopped(Epoch(7)).is_err());
        assert_eq!(m.tick(), Decision::Run);
        m.on_run_stopped(Epoch(1)).unwrap();
        assert_eq!(
            m.tick(),
            Decision::Restart {
                epoch: Epoch(2),
                checkpoint: m.changefeed().checkpoint(),
            }
        );
        assert_eq!(state(&m), FeedState::Normal, "no backoff, no warning");
        assert_eq!(m.tick(), Decision::Run, "once");
        // A stop that arrives after the changefeed was paused: nothing runs.
        m.apply_admin_job(crate::AdminJob::Pause).unwrap();
        m.on_run_stopped(Epoch(2)).unwrap();
        assert_eq!(m.tick(), Decision::Idle);
    }

    fn retryable<J: JitterSource>(m: &mut Manager<J>) -> Decision {
        let epoch = m.changefeed().epoch();
        m.on_error(epoch, ErrorKind::Retryable, "connection reset")
            .unwrap()
    }

    fn state<J: JitterSource>(m: &Manager<J>) -> FeedState {
        m.changefeed().state()
    }

    #[test]
    fn retryable_error_waits_10s_then_restarts_under_a_new_epoch_in_warning() {
        let (mut m, clock) = manager(None);
        assert_eq!(m.tick(), Decision::Run);
        clock.set(5 * SEC);
        assert_eq!(retryable(&mut m), Decision::WaitUntil(15 * SEC));
        assert_eq!(state(&m), FeedState::Pending);
        clock.set(15 * SEC - 1);
        assert_eq!(m.tick(), Decision::WaitUntil(15 * SEC));
        clock.set(15 * SEC);
        assert_eq!(
            m.tick(),
            Decision::Restart {
                epoch: Epoch(2),
                checkpoint: CheckpointTs::new(1_000)
            }
        );
        assert_eq!(state(&m), FeedState::Warning);
        assert_eq!(m.tick(), Decision::Run);
        let last = m.changefeed().info.errors.last().unwrap();
        assert_eq!(
            (last.at_ms, last.epoch, last.kind, last.message.as_str()),
            (5 * SEC, Epoch(1), ErrorKind::Retryable, "connection reset")
        );
    }

    #[test]
    fn backoff_doubles_from_10s_to_a_10min_cap_without_jitter() {
        let config = BackoffConfig {
            fail_after_ms: 10 * 60 * MIN,
            ..BackoffConfig::default()
        };
        let (mut m, clock) = manager_with(None, config, FixedJitter(0.5));
        let mut waits = Vec::new();
        for _ in 0..10 {
            let now = clock.now_ms();
            let Decision::WaitUntil(at) = retryable(&mut m) else {
                panic!("expected a wait")
            };
            waits.push((at - now) / SEC);
            clock.set(at);
            assert!(matches!(m.tick(), Decision::Restart { .. }));
        }
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 600, 600, 600, 600]);
        assert_eq!(m.changefeed().epoch(), Epoch(11));
    }

    #[test]
    fn backoff_with_seeded_jitter_stays_within_ten_percent_and_never_restarts_early() {
        let config = BackoffConfig {
            fail_after_ms: 10 * 60 * MIN,
            ..BackoffConfig::default()
        };
        let (mut m, clock) = manager_with(None, config, SeededJitter::new(7));
        let bases = [10, 20, 40, 80, 160, 320, 600, 600, 600, 600].map(|s| s * SEC);
        let mut waits = Vec::new();
        for base in bases {
            let now = clock.now_ms();
            let Decision::WaitUntil(at) = retryable(&mut m) else {
                panic!("expected a wait")
            };
            let wait = at - now;
            assert!(
                (base * 9 / 10..=base * 11 / 10).contains(&wait),
                "wait {wait} for interval {base}"
            );
            waits.push(wait);
            clock.set(at - 1);
            assert_eq!(m.tick(), Decision::WaitUntil(at));
            clock.set(at);
            assert!(matches!(m.tick(), Decision::Restart { .. }));
        }
        // Jitter really moves the waits: not all of them sit on the interval.
        assert!(waits.iter().zip(bases).any(|(w, b)| *w != b), "{waits:?}");
        // The same seed gives the same waits.
        let (mut again, clock) = manager_with(None, config, SeededJitter::new(7));
        let mut waits_again = Vec::new();
        for _ in bases {
            let now = clock.now_ms();
            let Decision::WaitUntil(at) = retryable(&mut again) else {
                panic!("expected a wait")
            };
            waits_again.push(at - now);
            clock.set(at);
            again.tick();
        }
        assert_eq!(waits, waits_again);
    }

    #[test]
    fn fails_30min_after_the_first_error_without_progress() {
        let (mut m, clock) = manager(None);
        // Errors right after every restart: waits 10, 20, 40, 80, 160, 320, 600 s.
        let mut restarts = Vec::new();
        for _ in 0..7 {
            let Decision::WaitUntil(at) = retryable(&mut m) else {
                panic!("expected a wait")
            };
            clock.set(at);
            assert!(matches!(m.tick(), Decision::Restart { .. }));
            restarts.push(at / SEC);
        }
        assert_eq!(restarts, [10, 30, 70, 150, 310, 630, 1230]);
        // The next restart would be at 1830 s, past the 30 min limit: wait for the limit.
        assert_eq!(retryable(&mut m), Decision::WaitUntil(30 * MIN));
        clock.set(30 * MIN - 1);
        assert_eq!(m.tick(), Decision::WaitUntil(30 * MIN));
        clock.set(30 * MIN);
        let reason = FailReason::NoProgress {
            since_ms: 0,
            waited_ms: 30 * MIN,
        };
        assert_eq!(m.tick(), Decision::Fail(reason.clone()));
        assert_eq!(state(&m), FeedState::Failed);
        assert_eq!(m.changefeed().info.failure, Some(reason));
        assert_eq!(m.tick(), Decision::Idle);
        assert_eq!(m.changefeed().epoch(), Epoch(8));
    }

    #[test]
    fn a_restarted_changefeed_without_progress_fails_after_30min_even_without_new_errors() {
        let (mut m, clock) = manager(None);
        clock.set(MIN);
        retryable(&mut m);
        clock.set(MIN + 10 * SEC);
        assert!(matches!(m.tick(), Decision::Restart { .. }));
        clock.set(31 * MIN - 1);
        assert_eq!(m.tick(), Decision::Run);
        assert_eq!(state(&m), FeedState::Warning);
        clock.set(31 * MIN);
        assert_eq!(
            m.tick(),
            Decision::Fail(FailReason::NoProgress {
                since_ms: MIN,
                waited_ms: 30 * MIN
            })
        );
    }

    #[test]
    fn checkpoint_progress_after_a_restart_returns_to_normal_and_resets_the_backoff() {
        let (mut m, clock) = manager(None);
        for _ in 0..3 {
            let Decision::WaitUntil(at) = retryable(&mut m) else {
                panic!()
            };
            clock.set(at);
            m.tick();
        }
        assert_eq!(state(&m), FeedState::Warning);
        let epoch = m.changefeed().epoch();
        assert_eq!(epoch, Epoch(4));
        // The same checkpoint again is no progress.
        assert_eq!(
            m.on_checkpoint(epoch, CheckpointTs::new(1_000)),
            Ok(Decision::Run)
        );
        assert_eq!(state(&m), FeedState::Warning);
        assert_eq!(
            m.on_checkpoint(epoch, CheckpointTs::new(1_001)),
            Ok(Decision::Run)
        );
        assert_eq!(state(&m), FeedState::Normal);
        assert_eq!(m.fail_at(), None);
        // The next error starts a new streak at 10 s.
        let now = clock.now_ms();
        assert_eq!(retryable(&mut m), Decision::WaitUntil(now + 10 * SEC));
        assert_eq!(m.fail_at(), Some(now + 30 * MIN));
    }

    #[test]
    fn checkpoint_progress_while_pending_restarts_the_no_progress_clock() {
        let (mut m, clock) = manager(None);
        retryable(&mut m);
        clock.set(5 * SEC);
        // A late flush of the stopped pipeline.
        assert_eq!(
            m.on_checkpoint(Epoch(1), CheckpointTs::new(1_500)),
            Ok(Decision::WaitUntil(10 * SEC))
        );
        assert_eq!(state(&m), FeedState::Pending);
        assert_eq!(m.changefeed().checkpoint(), CheckpointTs::new(1_500));
        assert_eq!(m.fail_at(), Some(5 * SEC + 30 * MIN));
    }

    #[test]
    fn warning_report_keeps_running_and_clears_on_progress() {
        let (mut m, clock) = manager(None);
        clock.set(SEC);
        assert_eq!(m.on_warning(Epoch(1), "sink slow"), Ok(Decision::Run));
        assert_eq!(state(&m), FeedState::Warning);
        assert_eq!(m.changefeed().info.warnings[0].message, "sink slow");
        assert_eq!(m.fail_at(), Some(SEC + 30 * MIN));
        assert_eq!(
            m.on_checkpoint(Epoch(1), CheckpointTs::new(2_000)),
            Ok(Decision::Run)
        );
        assert_eq!(state(&m), FeedState::Normal);
        assert_eq!(m.changefeed().epoch(), Epoch(1));
    }

    #[test]
    fn config_and_fatal_errors_fail_at_once_and_never_restart() {
        for (kind, reason) in [
            (
                ErrorKind::Config,
                FailReason::Config {
                    message: "bad url".into(),
                },
            ),
            (
                ErrorKind::Fatal,
                FailReason::Fatal {
                    message: "bad url".into(),
                },
            ),
        ] {
            let (mut m, clock) = manager(None);
            retryable(&mut m);
            assert_eq!(state(&m), FeedState::Pending);
            assert_eq!(
                m.on_error(Epoch(1), kind, "bad url"),
                Ok(Decision::Fail(reason.clone()))
            );
            assert_eq!(state(&m), FeedState::Failed);
            clock.set(24 * 60 * MIN);
            assert_eq!(m.tick(), Decision::Idle);
            assert_eq!(m.restart_at(), None);
            assert_eq!(m.changefeed().epoch(), Epoch(1));
        }
    }

    #[test]
    fn finishes_when_the_checkpoint_reaches_the_target_ts() {
        let (mut m, _clock) = manager(Some(5_000));
        assert_eq!(
            m.on_checkpoint(Epoch(1), CheckpointTs::new(4_999)),
            Ok(Decision::Run)
        );
        assert_eq!(
            m.on_checkpoint(Epoch(1), CheckpointTs::new(5_000)),
            Ok(Decision::Finish)
        );
        assert_eq!(state(&m), FeedState::Finished);
        assert_eq!(m.tick(), Decision::Idle);
        // Late reports change nothing.
        assert_eq!(
            m.on_checkpoint(Epoch(1), CheckpointTs::new(6_000)),
            Ok(Decision::Idle)
        );
        assert_eq!(
            m.on_error(Epoch(1), ErrorKind::Fatal, "closing"),
            Ok(Decision::Idle)
        );
        assert_eq!(m.changefeed().checkpoint(), CheckpointTs::new(5_000));
        assert_eq!(state(&m), FeedState::Finished);
    }

    #[test]
    fn target_reached_report_finishes_a_running_changefeed() {
        let (mut m, _clock) = manager(None);
        assert_eq!(m.on_target_reached(Epoch(1)), Ok(Decision::Finish));
        assert_eq!(state(&m), FeedState::Finished);
        assert_eq!(m.on_target_reached(Epoch(1)), Ok(Decision::Idle));
    }

    #[test]
    fn every_start_gets_a_new_epoch_and_older_epochs_are_fenced() {
        let (mut m, clock) = manager(None);
        assert_eq!(m.changefeed().epoch(), Epoch(1));
        // Automatic restart: epoch 2.
        retryable(&mut m);
        clock.set(10 * SEC);
        assert_eq!(
            m.tick(),
            Decision::Restart {
                epoch: Epoch(2),
                checkpoint: CheckpointTs::new(1_000)
            }
        );
        let stale = Fenced {
            writer: Epoch(1),
            current: Epoch(2),
        };
        assert_eq!(
            m.on_checkpoint(Epoch(1), CheckpointTs::new(9_999)),
            Err(stale)
        );
        assert_eq!(m.on_error(Epoch(1), ErrorKind::Fatal, "late"), Err(stale));
        assert_eq!(m.on_warning(Epoch(1), "late"), Err(stale));
        assert_eq!(m.on_target_reached(Epoch(1)), Err(stale));
        assert_eq!(m.changefeed().checkpoint(), CheckpointTs::new(1_000));
        assert_eq!(state(&m), FeedState::Warning);
        // Pause and resume: epoch 3.
        assert_eq!(m.apply_admin_job(AdminJob::Pause), Ok(Effect::Stop));
        assert_eq!(m.changefeed().epoch(), Epoch(2));
        assert_eq!(
            m.apply_admin_job(AdminJob::Resume {
                overwrite_checkpoint: None
            }),
            Ok(Effect::Start {
                epoch: Epoch(3),
                checkpoint: CheckpointTs::new(1_000)
            })
        );
        assert!(m.on_checkpoint(Epoch(2), CheckpointTs::new(2_000)).is_err());
        assert_eq!(
            m.on_checkpoint(Epoch(3), CheckpointTs::new(2_000)),
            Ok(Decision::Run)
        );
        // A newer epoch than the record's is fenced too.
        assert_eq!(
            m.fence(Epoch(4)),
            Err(Fenced {
                writer: Epoch(4),
                current: Epoch(3)
            })
        );
    }

    #[test]
    fn pause_ends_the_streak_and_resume_starts_the_backoff_over() {
        let (mut m, clock) = manager(None);
        for _ in 0..4 {
            let Decision::WaitUntil(at) = retryable(&mut m) else {
                panic!()
            };
            clock.set(at);
            m.tick();
        }
        m.apply_admin_job(AdminJob::Pause).unwrap();
        assert_eq!(m.tick(), Decision::Idle);
        assert_eq!(m.fail_at(), None);
        // Errors of the stopped pipeline are ignored.
        let epoch = m.changefeed().epoch();
        assert_eq!(
            m.on_error(epoch, ErrorKind::Retryable, "late"),
            Ok(Decision::Idle)
        );
        assert_eq!(state(&m), FeedState::Stopped);
        m.apply_admin_job(AdminJob::Resume {
            overwrite_checkpoint: None,
        })
        .unwrap();
        let now = clock.now_ms();
        assert_eq!(retryable(&mut m), Decision::WaitUntil(now + 10 * SEC));
    }

    #[test]
    fn retryable_error_while_pending_keeps_the_deadline() {
        let (mut m, clock) = manager(None);
        assert_eq!(retryable(&mut m), Decision::WaitUntil(10 * SEC));
        clock.set(3 * SEC);
        assert_eq!(retryable(&mut m), Decision::WaitUntil(10 * SEC));
        assert_eq!(m.changefeed().info.errors.len(), 2);
    }

    #[test]
    fn a_clock_going_back_does_not_move_deadlines() {
        let (mut m, clock) = manager(None);
        clock.set(100 * SEC);
        assert_eq!(retryable(&mut m), Decision::WaitUntil(110 * SEC));
        clock.set(50 * SEC);
        assert_eq!(m.tick(), Decision::WaitUntil(110 * SEC));
        clock.set(110 * SEC);
        assert!(matches!(m.tick(), Decision::Restart { .. }));
    }

    #[test]
    fn loading_a_pending_changefeed_schedules_a_fresh_backoff() {
        let clock = FakeClock::new(1_000 * SEC);
        let mut cf = Changefeed::create(sample_info("orders"), 0).unwrap();
        cf.info.state = FeedState::Pending;
        cf.info.epoch = Epoch(6);
        let mut m = FeedStateManager::new(
            cf,
            BackoffConfig::default(),
            clock.clone(),
            FixedJitter(0.5),
        )
        .unwrap();
        assert_eq!(m.tick(), Decision::WaitUntil(1_010 * SEC));
        clock.set(1_010 * SEC);
        assert_eq!(
            m.tick(),
            Decision::Restart {
                epoch: Epoch(7),
                checkpoint: CheckpointTs::new(1_000)
            }
        );
    }

    #[test]
    fn rejects_an_invalid_backoff_config() {
        let cf = Changefeed::create(sample_info("orders"), 0).unwrap();
        let config = BackoffConfig {
            jitter: -0.1,
            ..BackoffConfig::default()
        };
        let err =
            FeedStateManager::new(cf, config, FakeClock::new(0), FixedJitter(0.5)).unwrap_err();
        assert_eq!(err.field, "jitter");
    }
}
