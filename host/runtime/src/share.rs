//! Plugin CPU shared fairly between tenants.
//!
//! Guest code that computes past its first slice runs on its plugin's own
//! thread (`thread.rs`). Left to the operating system, those threads share
//! the cores evenly *per thread*: a tenant with ten spinning sinks would get
//! ten times the CPU of a tenant with one. Here every poll of such a call
//! first takes a **turn**: at most `turns` polls run at once (one per core by
//! default), and when more want one, the next goes to the waiting tenant
//! that has used the least CPU for its weight (its virtual time: CPU
//! nanoseconds × [`DEFAULT_WEIGHT`] / weight). A poll lasts at most about one
//! epoch tick (guest code yields every tick), so turns change hands at slice
//! granularity. A call blocked in a host call (I/O, a sleep) holds no turn.
//!
//! Per tenant, on top: a **concurrency** limit (turns held at once) and a
//! **CPU cap** in thousandths of a core, a token bucket refilled at that
//! rate (up to [`BURST`] of it): a tenant past its cap waits even when the
//! cores are idle. A tenant that comes back after being idle starts at the
//! busy tenants' least virtual time, so idling banks no credit.
//!
//! A call's first slice runs on the caller's task and takes no turn: short
//! calls (the usual case) cost nothing here.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

// Tokio's clock (the system's, unless a test pauses it).
use tokio::time::Instant;

/// The weight of a tenant without one.
pub const DEFAULT_WEIGHT: u64 = 100;
/// How much unused CPU cap a tenant may save up and spend at once: this much
/// wall time's worth of its cap.
pub const BURST: Duration = Duration::from_millis(100);

/// How one tenant shares the plugin threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// Its share against other busy tenants' (1 and up).
    pub weight: u64,
    /// The most turns it holds at once (`None`: as many as there are).
    pub max_concurrency: Option<usize>,
    /// The most CPU it may use, in thousandths of a core (`None`: no cap).
    pub max_millicores: Option<u64>,
}

impl Default for ShareConfig {
    fn default() -> Self {
        Self {
            weight: DEFAULT_WEIGHT,
            max_concurrency: None,
            max_millicores: None,
        }
    }
}

/// What one tenant's plugins have used, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUsage {
    /// The tenant.
    pub tenant: String,
    /// Guest CPU time charged to it (polls on plugin threads), ns.
    pub cpu_nanos: u64,
    /// Polls that waited for a turn (another tenant's or its own limit).
    pub waits: u64,
    /// Polls that waited for its CPU cap to refill.
    pub throttled: u64,
}

/// The turns of one process's plugin threads. Cheap to clone.
#[derive(Clone)]
pub struct CpuShares {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// The host leaves less than half a core (see [`CpuShares::crowded`]).
    crowded: AtomicBool,
}

struct State {
    /// Turns handed out now (1 to `max_turns`: see [`CpuShares::leave_to_host`]).
    turns: usize,
    /// Turns at most (one per core by default).
    max_turns: usize,
    running: usize,
    tenants: HashMap<Arc<str>, Tenant>,
}

struct Tenant {
    config: ShareConfig,
    running: usize,
    /// CPU ns × DEFAULT_WEIGHT / weight.
    vtime: u64,
    waiting: VecDeque<Arc<Waiter>>,
    /// Cap credit, ns of CPU (negative: owed), as of `refilled`.
    credit: i64,
    refilled: Instant,
    cpu_nanos: u64,
    waits: u64,
    throttled: u64,
}

impl Tenant {
    fn new(config: ShareConfig) -> Self {
        Self {
            config,
            running: 0,
            vtime: 0,
            waiting: VecDeque::new(),
            credit: burst_nanos(config.max_millicores),
            refilled: Instant::now(),
            cpu_nanos: 0,
            waits: 0,
            throttled: 0,
        }
    }

    fn active(&self) -> bool {
        self.running > 0 || !self.waiting.is_empty()
    }

    fn below_concurrency(&self) -> bool {
        self.config
            .max_concurrency
            .is_none_or(|max| self.running < max)
    }

    /// Brings the cap's credit up to `now`; how long until it is positive
    /// again if it is not.
    fn refill(&mut self, now: Instant) -> Option<Duration> {
        let millicores = self.config.max_millicores?;
        let elapsed = now.saturating_duration_since(self.refilled).as_nanos() as u64;
        self.refilled = now;
        let earned = elapsed.saturating_mul(millicores) / 1000;
        self.credit = self
            .credit
            .saturating_add(earned.min(i64::MAX as u64) as i64)
            .min(burst_nanos(Some(millicores)));
        (self.credit < 0).then(|| {
            // Wait until the debt is paid, and at least a millisecond.
            let owed = self.credit.unsigned_abs();
            Duration::from_nanos(owed.saturating_mul(1000) / millicores.max(1))
                .max(Duration::from_millis(1))
        })
    }
}

fn burst_nanos(millicores: Option<u64>) -> i64 {
    millicores.map_or(0, |m| {
        (BURST.as_nanos() as u64).saturating_mul(m) as i64 / 1000
    })
}

/// One poll's wait for a turn.
struct Waiter {
    granted: std::sync::atomic::AtomicBool,
    waker: Mutex<Waker>,
}

impl CpuShares {
    /// `turns` polls of guest code may run at once (at least one).
    pub fn new(turns: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    turns: turns.max(1),
                    max_turns: turns.max(1),
                    running: 0,
                    tenants: HashMap::new(),
                }),
                crowded: AtomicBool::new(false),
            }),
        }
    }

    /// One turn per core of this machine.
    pub fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The host's own work (pipelines, sources, short plugin calls) is keeping
    /// `busy_cores` cores busy: hand out only the turns for the cores it
    /// leaves (rounded to the nearest, at least one, at most the turns this
    /// was made with). So guest code that computes for long takes what the
    /// host leaves and, when the host is busy, one turn among all tenants
    /// (still shared by virtual time): a tenant's spinning sinks cost the
    /// others' pipelines one low-priority thread, however many it runs. The
    /// turns that go are taken back at their holders' next slice.
    pub fn leave_to_host(&self, busy_cores: f64) {
        let mut state = self.lock();
        let left = state.max_turns as f64 - busy_cores.max(0.0);
        self.shared.crowded.store(left < 0.5, Ordering::Relaxed);
        state.turns = (left.round() as usize).clamp(1, state.max_turns);
        state.dispatch();
    }

    /// Whether the host's own work leaves guest code less than half a core
    /// (as of the last [`CpuShares::leave_to_host`]): then a call that runs
    /// away on a plugin thread is lowered further (`thread.rs`), since every
    /// share of a core it takes is the pipelines'.
    pub fn crowded(&self) -> bool {
        self.shared.crowded.load(Ordering::Relaxed)
    }

    /// The turns handed out now.
    pub fn turns(&self) -> usize {
        self.lock().turns
    }

    /// Sets how `tenant` shares; calls in progress keep their turns.
    pub fn configure(&self, tenant: &str, config: ShareConfig) {
        let config = ShareConfig {
            weight: config.weight.max(1),
            max_concurrency: config.max_concurrency.map(|n| n.max(1)),
            max_millicores: config.max_millicores.map(|m| m.max(1)),
        };
        let mut state = self.lock();
        match state.tenants.get_mut(tenant) {
            Some(t) => {
                if t.config.max_millicores != config.max_millicores {
                    t.credit = burst_nanos(config.max_millicores);
                    t.refilled = Instant::now();
                }
                t.config = config;
            }
            None => {
                state.tenants.insert(Arc::from(tenant), Tenant::new(config));
            }
        }
        // A raised limit may let a waiter in.
        state.dispatch();
    }

    /// The handle the plugins of `tenant` take their turns with.
    pub fn tenant(&self, tenant: &str) -> TenantShare {
        let mut state = self.lock();
        let key = match state.tenants.get_key_value(tenant) {
            Some((k, _)) => k.clone(),
            None => {
                let key: Arc<str> = Arc::from(tenant);
                state
                    .tenants
                    .insert(key.clone(), Tenant::new(ShareConfig::default()));
                key
            }
        };
        TenantShare {
            shares: self.clone(),
            tenant: key,
        }
    }

    /// What each tenant's plugins have used, by tenant name.
    pub fn usage(&self) -> Vec<ShareUsage> {
        let state = self.lock();
        let mut out: Vec<ShareUsage> = state
            .tenants
            .iter()
            .map(|(name, t)| ShareUsage {
                tenant: name.to_string(),
                cpu_nanos: t.cpu_nanos,
                waits: t.waits,
                throttled: t.throttled,
            })
            .collect();
        out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        out
    }
}

impl State {
    /// The least virtual time among busy tenants (what an idle one returning
    /// starts from).
    fn floor(&self) -> Option<u64> {
        self.tenants
            .values()
            .filter(|t| t.active())
            .map(|t| t.vtime)
            .min()
    }

    /// Hands free turns to waiters: each to the tenant with the least
    /// virtual time that is below its concurrency limit.
    fn dispatch(&mut self) {
        while self.running < self.turns {
            let next = self
                .tenants
                .iter()
                .filter(|(_, t)| !t.waiting.is_empty() && t.below_concurrency())
                .min_by_key(|(_, t)| t.vtime)
                .map(|(k, _)| k.clone());
            let Some(key) = next else { return };
            let t = self.tenants.get_mut(&key).expect("just found");
            let waiter = t.waiting.pop_front().expect("has waiters");
            t.running += 1;
            self.running += 1;
            waiter.granted.store(true, Ordering::Release);
            waiter
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .wake_by_ref();
        }
    }

    /// Charges `cpu_nanos` of CPU to `tenant`.
    fn charge(&mut self, tenant: &str, cpu_nanos: u64) {
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.cpu_nanos = t.cpu_nanos.saturating_add(cpu_nanos);
            t.vtime = t
                .vtime
                .saturating_add(cpu_nanos.saturating_mul(DEFAULT_WEIGHT) / t.config.weight);
            if t.config.max_millicores.is_some() {
                t.credit = t
                    .credit
                    .saturating_sub(cpu_nanos.min(i64::MAX as u64) as i64);
            }
        }
    }

    /// Gives back a turn of `tenant` that used `cpu_nanos`.
    fn release(&mut self, tenant: &str, cpu_nanos: u64) {
        self.charge(tenant, cpu_nanos);
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.running = t.running.saturating_sub(1);
        }
        self.running = self.running.saturating_sub(1);
        self.dispatch();
    }

    /// Whether a turn of `tenant` that has just been charged may go on
    /// without asking again: no waiter could take it (none of its own
    /// tenant's, none of a tenant below it in virtual time) and its CPU cap
    /// is not spent.
    fn may_keep(&mut self, tenant: &str) -> bool {
        let Some(mine) = self.tenants.get_mut(tenant) else {
            return false;
        };
        if mine.refill(Instant::now()).is_some() || !mine.waiting.is_empty() {
            return false;
        }
        // Fewer turns than are held: give this one back.
        if self.running > self.turns {
            return false;
        }
        let vtime = mine.vtime;
        !self.tenants.iter().any(|(name, t)| {
            &**name != tenant && !t.waiting.is_empty() && t.below_concurrency() && t.vtime < vtime
        })
    }
}

/// How the plugins of one tenant take turns.
#[derive(Clone)]
pub struct TenantShare {
    shares: CpuShares,
    tenant: Arc<str>,
}

impl std::fmt::Debug for TenantShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantShare")
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl TenantShare {
    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// See [`CpuShares::crowded`].
    pub fn crowded(&self) -> bool {
        self.shares.crowded()
    }

    /// Runs `call`, each poll of it in a turn; `cpu` reads the CPU time the
    /// poll used (the polling thread's CPU clock).
    pub fn run<F: Future>(&self, call: F, cpu: fn() -> u64) -> InTurns<F> {
        InTurns {
            share: self.clone(),
            call: Box::pin(call),
            wait: Wait::Idle,
            held: None,
            cpu,
        }
    }

    /// Waits for a turn (a future; dropping it gives back a turn granted
    /// meanwhile).
    pub fn turn(&self) -> TurnWait {
        TurnWait {
            share: self.clone(),
            wait: Wait::Idle,
        }
    }

    /// Takes a turn now if one is free and nobody the rule puts first is
    /// waiting; else queues `waiter`, or says how long the CPU cap wants it
    /// to wait.
    fn try_take(&self, waiter: &mut Wait, cx: &Context<'_>) -> Poll<Result<Turn, Duration>> {
        let mut state = self.shares.lock();
        if let Wait::Queued(w) = waiter {
            if w.granted.load(Ordering::Acquire) {
                *waiter = Wait::Idle;
                return Poll::Ready(Ok(self.turn_held()));
            }
            *w.waker.lock().unwrap_or_else(PoisonError::into_inner) = cx.waker().clone();
            return Poll::Pending;
        }
        let floor = state.floor();
        let free = state.running < state.turns;
        let t = state
            .tenants
            .get_mut(&*self.tenant)
            .expect("a share's tenant is never removed");
        if !t.active()
            && let Some(floor) = floor
        {
            t.vtime = t.vtime.max(floor);
        }
        if let Some(wait) = t.refill(Instant::now()) {
            t.throttled += 1;
            return Poll::Ready(Err(wait));
        }
        if free && t.below_concurrency() {
            t.running += 1;
            state.running += 1;
            return Poll::Ready(Ok(self.turn_held()));
        }
        t.waits += 1;
        let w = Arc::new(Waiter {
            granted: std::sync::atomic::AtomicBool::new(false),
            waker: Mutex::new(cx.waker().clone()),
        });
        t.waiting.push_back(w.clone());
        *waiter = Wait::Queued(w);
        Poll::Pending
    }

    fn turn_held(&self) -> Turn {
        Turn {
            share: self.clone(),
            used: 0,
        }
    }

    /// A queued wait was dropped: leave the queue, or give back the turn it
    /// was granted.
    fn abandon(&self, wait: &mut Wait) {
        if let Wait::Queued(w) = std::mem::replace(wait, Wait::Idle) {
            let mut state = self.shares.lock();
            if w.granted.load(Ordering::Acquire) {
                state.release(&self.tenant, 0);
            } else if let Some(t) = state.tenants.get_mut(&*self.tenant) {
                t.waiting.retain(|x| !Arc::ptr_eq(x, &w));
            }
        }
    }
}

enum Wait {
    Idle,
    Queued(Arc<Waiter>),
    Throttled(Pin<Box<tokio::time::Sleep>>),
}

impl Wait {
    /// Polls for a turn: queued, throttled by the cap, or taken.
    fn poll_turn(&mut self, share: &TenantShare, cx: &mut Context<'_>) -> Poll<Turn> {
        loop {
            if let Wait::Throttled(sleep) = self {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                *self = Wait::Idle;
            }
            match share.try_take(self, cx) {
                Poll::Ready(Ok(turn)) => return Poll::Ready(turn),
                Poll::Ready(Err(wait)) => {
                    *self = Wait::Throttled(Box::pin(tokio::time::sleep(wait)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A turn held: given back (and its CPU charged) when dropped.
pub struct Turn {
    share: TenantShare,
    used: u64,
}

impl Turn {
    /// Charges `cpu_nanos` of CPU to the tenant when the turn is given back.
    pub fn charge(&mut self, cpu_nanos: u64) {
        self.used = self.used.saturating_add(cpu_nanos);
    }

    /// Charges what the turn used so far and says whether it may go on
    /// (nobody waiting could take it); if not, the caller drops it.
    pub fn may_keep(&mut self) -> bool {
        let mut state = self.share.shares.lock();
        state.charge(&self.share.tenant, std::mem::take(&mut self.used));
        state.may_keep(&self.share.tenant)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.share
            .shares
            .lock()
            .release(&self.share.tenant, self.used);
    }
}

/// [`TenantShare::turn`].
pub struct TurnWait {
    share: TenantShare,
    wait: Wait,
}

impl Future for TurnWait {
    type Output = Turn;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn> {
        let this = &mut *self;
        this.wait.poll_turn(&this.share, cx)
    }
}

impl Drop for TurnWait {
    fn drop(&mut self) {
        self.share.abandon(&mut self.wait);
    }
}

/// [`TenantShare::run`]: a call whose every poll holds a turn.
///
/// A poll that ends because the call yielded (it woke itself: guest code at
/// the end of an epoch slice) keeps its turn for the next poll if nobody
/// waiting could take it; any other `Pending` (a host call waiting for I/O)
/// gives it back.
pub struct InTurns<F: Future> {
    share: TenantShare,
    call: Pin<Box<F>>,
    wait: Wait,
    held: Option<Turn>,
    cpu: fn() -> u64,
}

/// A waker that notes whether it was woken, and passes the wake on.
struct NoteWake {
    inner: Waker,
    woken: std::sync::atomic::AtomicBool,
}

impl std::task::Wake for NoteWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.inner.wake_by_ref();
    }
}

impl<F: Future> Future for InTurns<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let mut turn = match this.held.take() {
            Some(turn) => turn,
            None => match this.wait.poll_turn(&this.share, cx) {
                Poll::Ready(turn) => turn,
                Poll::Pending => return Poll::Pending,
            },
        };
        let note = Arc::new(NoteWake {
            inner: cx.waker().clone(),
            woken: std::sync::atomic::AtomicBool::new(false),
        });
        let waker = Waker::from(note.clone());
        let start = (this.cpu)();
        let polled = this.call.as_mut().poll(&mut Context::from_waker(&waker));
        turn.charge((this.cpu)().saturating_sub(start));
        if polled.is_pending() && note.woken.load(Ordering::Acquire) && turn.may_keep() {
            this.held = Some(turn);
        }
        polled
    }
}

impl<F: Future> Drop for InTurns<F> {
    fn drop(&mut self) {
        self.held = None;
        self.share.abandon(&mut self.wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop_cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    /// Polls `f` once.
    fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut noop_cx())
    }

    #[test]
    fn a_free_turn_is_taken_at_once_and_a_full_house_queues() {
        let shares = CpuShares::new(2);
        let a = shares.tenant("a");
        let (mut w1, mut w2, mut w3) = (a.turn(), a.turn(), a.turn());
        let t1 = poll(&mut w1);
        let t2 = poll(&mut w2);
        assert!(t1.is_ready() && t2.is_ready());
        assert!(poll(&mut w3).is_pending());
        drop(t1);
        let t3 = poll(&mut w3);
        assert!(t3.is_ready(), "the freed turn goes to the waiter");
        assert_eq!(shares.lock().running, 2);
        drop((t2, t3));
        assert_eq!(shares.lock().running, 0);
    }

    #[test]
    fn the_tenant_with_the_least_weighted_cpu_goes_next() {
        let shares = CpuShares::new(1);
        let (a, b) = (shares.tenant("a"), shares.tenant("b"));
        shares.configure(
            "b",
            ShareConfig {
                weight: 300,
                ..ShareConfig::default()
            },
        );
        // a holds the one turn; b and a queue behind it.
        let Poll::Ready(mut held) = poll(&mut a.turn()) else {
            panic!()
        };
        held.charge(10_000_000);
        let mut next_a = a.turn();
        let mut next_b = b.turn();
        assert!(poll(&mut next_a).is_pending());
        assert!(poll(&mut next_b).is_pending());
        drop(held);
        // a has used 10 ms, b nothing: b goes first although a queued first.
        let Poll::Ready(mut tb) = poll(&mut next_b) else {
            panic!("b is next")
        };
        assert!(poll(&mut next_a).is_pending());
        // b's weight is 3x: 27 ms of its CPU count as 9 ms, still below a's 10.
        tb.charge(27_000_000);
        let mut again_b = b.turn();
        assert!(poll(&mut again_b).is_pending());
        drop(tb);
        let tb = poll(&mut again_b);
        assert!(tb.is_ready(), "b, at 9 ms, goes before a at 10");
        assert!(poll(&mut next_a).is_pending());
        drop(tb);
        assert!(poll(&mut next_a).is_ready());
    }

    #[test]
    fn a_tenant_never_holds_more_than_its_concurrency() {
        let shares = CpuShares::new(4);
        shares.configure(
            "a",
            ShareConfig {
                max_concurrency: Some(1),
                ..ShareConfig::default()
            },
        );
        let (a, b) = (shares.tenant("a"), shares.tenant("b"));
        let ta = poll(&mut a.turn());
        assert!(ta.is_ready());
        let mut second = a.turn();
        assert!(poll(&mut second).is_pending(), "a is at its limit");
        assert!(
            poll(&mut b.turn()).is_ready(),
            "b is not held up by a's limit"
        );
        drop(ta);
        assert!(poll(&mut second).is_ready());
    }

    #[test]
    fn a_dropped_wait_leaves_the_queue_or_gives_its_turn_back() {
        let shares = CpuShares::new(1);
        let a = shares.tenant("a");
        let held = poll(&mut a.turn());
        let mut queued = a.turn();
        assert!(poll(&mut queued).is_pending());
        drop(queued);
        assert!(shares.lock().tenants["a"].waiting.is_empty());
        // Granted, then dropped before it was polled again: the turn returns.
        let mut granted = a.turn();
        assert!(poll(&mut granted).is_pending());
        drop(held);
        assert_eq!(shares.lock().running, 1);
        drop(granted);
        assert_eq!(shares.lock().running, 0);
        assert!(poll(&mut a.turn()).is_ready());
    }

    #[test]
    fn an_idle_tenant_banks_no_credit() {
        let shares = CpuShares::new(1);
        let (a, b) = (shares.tenant("a"), shares.tenant("b"));
        // a computes alone for a while.
        for _ in 0..5 {
            let Poll::Ready(mut t) = poll(&mut a.turn()) else {
                panic!()
            };
            t.charge(100_000_000);
        }
        // a is busy (holds the turn); b arrives and starts at a's virtual time.
        let Poll::Ready(held) = poll(&mut a.turn()) else {
            panic!()
        };
        let mut wb = b.turn();
        assert!(poll(&mut wb).is_pending());
        assert_eq!(shares.lock().tenants["b"].vtime, 500_000_000);
        drop(held);
        assert!(poll(&mut wb).is_ready());
    }

    #[test]
    fn a_busy_host_leaves_guest_code_the_cores_it_does_not_use() {
        let shares = CpuShares::new(4);
        let (a, b) = (shares.tenant("a"), shares.tenant("b"));
        let mut held: Vec<Turn> = (0..3)
            .map(|_| match poll(&mut a.turn()) {
                Poll::Ready(mut t) => {
                    t.charge(1_000_000);
                    t
                }
                Poll::Pending => panic!("four turns are free"),
            })
            .collect();
        // The host keeps 2.6 cores busy: one turn left (1.4 rounds to 1),
        // and more than half a core: not crowded.
        assert!(!shares.crowded());
        shares.leave_to_host(2.6);
        assert_eq!(shares.turns(), 1);
        assert!(!a.crowded());
        let mut wb = b.turn();
        assert!(poll(&mut wb).is_pending(), "three held, one allowed");
        // Held turns go back at their next slice, the last one included
        // while more are held than allowed.
        assert!(!held[0].may_keep());
        held.remove(0);
        assert!(!held[0].may_keep());
        held.remove(0);
        // One held, one allowed, and b (waiting, less virtual time) goes first.
        assert!(!held[0].may_keep());
        held.clear();
        assert!(poll(&mut wb).is_ready());
        // However busy the host, one turn stays; an idle host gives all back.
        shares.leave_to_host(64.0);
        assert_eq!(shares.turns(), 1);
        assert!(a.crowded());
        shares.leave_to_host(3.6);
        assert!(a.crowded(), "less than half a core left");
        shares.leave_to_host(0.0);
        assert_eq!(shares.turns(), 4);
        assert!(!a.crowded());
        shares.leave_to_host(-1.0);
        assert_eq!(shares.turns(), 4);
        let c = shares.tenant("c");
        let turns: Vec<_> = (0..3).map(|_| poll(&mut c.turn())).collect();
        assert!(turns.iter().all(Poll::is_ready), "b holds one, three free");
    }

    #[tokio::test(start_paused = true)]
    async fn a_capped_tenant_waits_for_its_cap_even_on_idle_cores() {
        let shares = CpuShares::new(4);
        shares.configure(
            "a",
            ShareConfig {
                max_millicores: Some(100),
                ..ShareConfig::default()
            },
        );
        let a = shares.tenant("a");
        // The burst is 100 ms of a tenth of a core: 10 ms of CPU.
        let mut t = a.turn().await;
        t.charge(30_000_000);
        drop(t);
        // 20 ms owed at a tenth of a core: about 200 ms of wall time.
        let started = tokio::time::Instant::now();
        let _t = a.turn().await;
        let waited = started.elapsed();
        assert!(
            (Duration::from_millis(200)..Duration::from_millis(210)).contains(&waited),
            "{waited:?}"
        );
        assert_eq!(shares.usage()[0].throttled, 1);
    }

    /// Returns `Pending` once, having woken itself (as guest code does at the
    /// end of an epoch slice).
    async fn yield_like_a_guest() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    #[test]
    fn spinning_calls_of_two_tenants_share_one_turn_by_weight_not_by_thread() {
        // One turn; three threads spin for the light tenant, one for the heavy
        // one (weight 3x). Per thread the light tenant would get 3/4 of the
        // CPU; by weight the heavy one gets 3/4.
        let shares = CpuShares::new(1);
        shares.configure(
            "heavy",
            ShareConfig {
                weight: 300,
                ..ShareConfig::default()
            },
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = ["light", "light", "light", "heavy"]
            .into_iter()
            .map(|tenant| {
                let share = shares.tenant(tenant);
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(share.run(
                        async move {
                            while !stop.load(Ordering::Relaxed) {
                                // A slice of guest code: 1 ms of CPU, then yield.
                                let until = crate::state::thread_cpu_nanos() + 1_000_000;
                                while crate::state::thread_cpu_nanos() < until {
                                    std::hint::spin_loop();
                                }
                                yield_like_a_guest().await;
                            }
                        },
                        crate::state::thread_cpu_nanos,
                    ));
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let usage = shares.usage();
        let cpu = |name: &str| {
            usage
                .iter()
                .find(|u| u.tenant == name)
                .map_or(0, |u| u.cpu_nanos) as f64
        };
        let share = cpu("heavy") / (cpu("heavy") + cpu("light"));
        assert!(
            (0.6..0.9).contains(&share),
            "heavy's share of the CPU is {share:.2} ({usage:?})"
        );
        assert_eq!(shares.lock().running, 0);
    }
}
