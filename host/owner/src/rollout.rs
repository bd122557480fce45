//! Canary rollout: one plugin version replaced by another in every
//! changefeed of a tenant that runs it, a batch at a time, each swap waited
//! for until its probation ends; the first rollback (or refusal) stops it.
//!
//! A rollout is a sequence of ordinary swaps ([`Owner::swap`]): each is
//! checked, recorded and carried out as one, so a rollout interrupted at any
//! point (the caller gone, the server restarted) leaves every changefeed on
//! exactly one of the two versions, with its own swap history saying which.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::SwapState;
use crate::actor::Owner;
use crate::id::ChangefeedId;
use crate::plugin::PluginId;
use crate::state::FeedState;
use crate::swap::{PluginRole, ProbationPolicy, SwapAsk};

/// Most changefeeds a rollout swaps at once.
pub const MAX_ROLLOUT_BATCH: usize = 100;
/// How often a rollout looks at the swaps it waits for.
const POLL: Duration = Duration::from_millis(200);
/// How long past its probation window a swap may take to end before the
/// rollout stops waiting for it (the changefeed may have stopped meanwhile).
const GRACE: Duration = Duration::from_secs(120);

/// What a rollout does.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutPlan {
    /// Whose changefeeds.
    pub tenant: String,
    /// The version running now.
    pub from: PluginId,
    /// The version to run.
    pub to: PluginId,
    /// Changefeeds swapped at once (1..=[`MAX_ROLLOUT_BATCH`]).
    pub batch_size: usize,
    /// Each swap's trial.
    pub probation: ProbationPolicy,
    /// Who asks, for the swap records.
    pub by: String,
}

impl RolloutPlan {
    /// Checks the plan's numbers and versions.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_ROLLOUT_BATCH).contains(&self.batch_size) {
            return Err(format!(
                "batch size is {}; it must be 1..={MAX_ROLLOUT_BATCH}",
                self.batch_size
            ));
        }
        if self.from == self.to {
            return Err(format!(
                "from and to are both {}; nothing to roll out",
                self.from
            ));
        }
        if self.from.name() != self.to.name() {
            return Err(format!(
                "{} and {} are different plugins; a rollout moves one plugin to another version \
                 (swap each changefeed to change the plugin)",
                self.from, self.to
            ));
        }
        self.probation.validate()
    }
}

/// One step of a rollout, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutStep {
    /// The changefeed.
    pub changefeed: ChangefeedId,
    /// Which of its plugins.
    pub role: PluginRole,
    /// `swapping`, then the swap's end (`done`, `rolled-back`, `refused`,
    /// `superseded`); or `skipped` (not running) or `error` (not asked, or
    /// not ended in time).
    pub state: String,
    /// Why, for every state but `swapping` and `done`.
    pub reason: String,
    /// The swap's number within the changefeed (0 when none was recorded).
    pub seq: u64,
}

/// How a rollout ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolloutSummary {
    /// Swaps that passed their probation.
    pub swapped: u32,
    /// Swaps that rolled back, were refused or went wrong.
    pub failed: u32,
    /// Changefeeds left out because they did not run.
    pub skipped: u32,
    /// Changefeeds not tried because the rollout stopped.
    pub remaining: u32,
    /// Whether it stopped early.
    pub stopped: bool,
}

/// Runs `plan` through `owner`, sending each step to `steps` (a closed
/// receiver stops the rollout before its next batch).
pub async fn rollout(
    owner: &Owner,
    plan: RolloutPlan,
    steps: mpsc::Sender<RolloutStep>,
) -> RolloutSummary {
    let mut summary = RolloutSummary::default();
    // Every (changefeed, role) of the tenant running `from`.
    let snapshot = owner.snapshot();
    let mut targets = Vec::new();
    for view in snapshot.list(&plan.tenant) {
        let info = &view.changefeed.info;
        if info.id.tenant() != plan.tenant {
            continue;
        }
        let roles = info
            .config
            .filters
            .iter()
            .enumerate()
            .filter(|(_, f)| f.plugin == plan.from)
            .map(|(i, _)| PluginRole::Filter(i))
            .chain((info.config.sink.plugin == plan.from).then_some(PluginRole::Sink));
        for role in roles {
            if matches!(info.state, FeedState::Normal | FeedState::Warning) {
                targets.push((info.id.clone(), role));
            } else {
                summary.skipped += 1;
                let step = RolloutStep {
                    changefeed: info.id.clone(),
                    role,
                    state: "skipped".into(),
                    reason: format!("the changefeed is {}", info.state),
                    seq: 0,
                };
                let _ = steps.send(step).await;
            }
        }
    }
    // A changefeed with the version in two roles has one swap in flight at
    // a time: its first role in the first pass, its second in the next.
    let mut passes: Vec<Vec<(ChangefeedId, PluginRole)>> = Vec::new();
    let mut seen = std::collections::HashMap::<ChangefeedId, usize>::new();
    for (id, role) in targets {
        let pass = seen.entry(id.clone()).or_default();
        if passes.len() <= *pass {
            passes.push(Vec::new());
        }
        passes[*pass].push((id, role));
        *pass += 1;
    }
    let batches: Vec<&[(ChangefeedId, PluginRole)]> = passes
        .iter()
        .flat_map(|pass| pass.chunks(plan.batch_size))
        .collect();
    let window = Duration::from_millis(plan.probation.window_ms) + GRACE;
    let mut left: usize = passes.iter().map(Vec::len).sum();
    for batch in batches {
        let mut waiting = Vec::new();
        for (id, role) in batch {
            if steps.is_closed() {
                // The caller went away: no new swap starts.
                summary.stopped = true;
                break;
            }
            left -= 1;
            let ask = owner.snapshot().get(id).and_then(|view| {
                let info = &view.changefeed.info;
                let mut to = info.plugin(*role).cloned().ok_or_else(|| {
                    crate::OwnerError::Invalid(format!("changefeed {id} has no {role} any more"))
                })?;
                if to.plugin != plan.from {
                    return Err(crate::OwnerError::Precondition(format!(
                        "its {role} is {} now, not {}",
                        to.plugin, plan.from
                    )));
                }
                to.plugin = plan.to.clone();
                Ok(SwapAsk {
                    role: *role,
                    to,
                    probation: plan.probation,
                    by: format!("{} (rollout {} to {})", plan.by, plan.from, plan.to),
                    expect: Some(plan.from.clone()),
                    promotes: None,
                })
            });
            let asked = match ask {
                Ok(ask) => owner.swap(id, ask).await,
                Err(e) => Err(e),
            };
            let step = match asked {
                Ok(view) => {
                    let seq = view.changefeed.info.swap_count;
                    waiting.push((id.clone(), *role, seq));
                    RolloutStep {
                        changefeed: id.clone(),
                        role: *role,
                        state: "swapping".into(),
                        reason: String::new(),
                        seq,
                    }
                }
                Err(e) => {
                    summary.failed += 1;
                    RolloutStep {
                        changefeed: id.clone(),
                        role: *role,
                        state: "error".into(),
                        reason: e.to_string(),
                        seq: 0,
                    }
                }
            };
            let _ = steps.send(step).await;
        }
        // Wait for every swap of the batch to end.
        let started = tokio::time::Instant::now();
        while !waiting.is_empty() {
            tokio::time::sleep(POLL).await;
            let snapshot = owner.snapshot();
            let mut still = Vec::new();
            for (id, role, seq) in waiting {
                let record = snapshot.view(&id).and_then(|v| {
                    v.changefeed
                        .info
                        .swaps
                        .iter()
                        .find(|s| s.seq == seq)
                        .cloned()
                });
                let (state, reason) = match record {
                    Some(r) if r.state.is_open() => {
                        if started.elapsed() < window {
                            still.push((id, role, seq));
                            continue;
                        }
                        (
                            "error".to_string(),
                            format!(
                                "swap {seq} is still {} after {} s; the rollout stops waiting \
                                 (see `changefeed query`)",
                                r.state.as_str(),
                                window.as_secs()
                            ),
                        )
                    }
                    Some(r) => (
                        r.state.as_str().to_string(),
                        r.reason.clone().unwrap_or_default(),
                    ),
                    None => (
                        "error".to_string(),
                        format!("swap {seq} is no longer recorded (the changefeed was removed?)"),
                    ),
                };
                if state == SwapState::Done.as_str() {
                    summary.swapped += 1;
                } else {
                    summary.failed += 1;
                }
                let step = RolloutStep {
                    changefeed: id,
                    role,
                    state,
                    reason,
                    seq,
                };
                let _ = steps.send(step).await;
            }
            waiting = still;
        }
        if summary.failed > 0 || summary.stopped {
            summary.stopped = true;
            break;
        }
    }
    if summary.stopped {
        summary.remaining = left as u32;
    }
    summary
}
