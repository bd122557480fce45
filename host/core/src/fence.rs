//! [`WriteFence`]: until when a capture may write downstream.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Until when this process may write to a changefeed's downstream: a capture
/// in a cluster may write only while its lease stands, and another capture
/// may take its work once the lease ends at the meta store. The keeper of the
/// lease moves the deadline on with every renewal (to a margin before the
/// lease can end at the store) and closes the fence when the lease is lost;
/// the host checks it before every plugin call and host operation that
/// reaches outside (`WasmSink`'s calls, the `sql` interface, HTTP requests).
///
/// The clock is the monotonic one, which keeps running while a process is
/// stopped (SIGSTOP, a VM pause): a capture that wakes after its lease may
/// have ended finds the fence closed before it writes anything, whichever of
/// its tasks runs first.
///
/// Clones share one deadline. [`WriteFence::open`] never closes (a single
/// process with no lease: `sluice run`, tests).
#[derive(Clone)]
pub struct WriteFence {
    inner: Arc<Inner>,
}

struct Inner {
    base: Instant,
    /// How long a renewal keeps the fence open (`None`: no lease).
    window: Option<Duration>,
    /// Nanoseconds after `base` until which writes are allowed; `u64::MAX`
    /// for a fence that never closes, 0 once closed.
    until: AtomicU64,
}

/// A write refused by a closed [`WriteFence`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this capture's lease may have ended (it was not renewed in time, or the process was \
     paused): it writes nothing more, and another capture takes over its work"
)]
pub struct FenceClosed;

impl WriteFence {
    /// A fence that never closes.
    pub fn open() -> Self {
        Self::with(u64::MAX, None)
    }

    /// A fence open until `deadline`.
    pub fn until(deadline: Instant) -> Self {
        Self::leased(deadline, None)
    }

    /// A lease's fence: open until `deadline`, each renewal keeping it open
    /// for `window` more ([`WriteFence::window`]).
    pub fn lease(deadline: Instant, window: Duration) -> Self {
        Self::leased(deadline, Some(window))
    }

    fn leased(deadline: Instant, window: Option<Duration>) -> Self {
        let fence = Self::with(u64::MAX, window);
        let at = fence.offset(deadline);
        fence.inner.until.store(at, Ordering::Release);
        fence
    }

    fn with(until: u64, window: Option<Duration>) -> Self {
        Self {
            inner: Arc::new(Inner {
                base: Instant::now(),
                window,
                until: AtomicU64::new(until),
            }),
        }
    }

    /// How long one renewal keeps a lease's fence open (`None`: no lease).
    /// A downstream transaction this process leaves open and idle for longer
    /// (the process was paused mid-way) is one the downstream should roll
    /// back: by then another capture may be writing the same rows, and would
    /// wait on the paused one's locks.
    pub fn window(&self) -> Option<Duration> {
        self.inner.window
    }

    fn offset(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.inner.base).as_nanos();
        // 0 and u64::MAX mean closed and open.
        u64::try_from(nanos)
            .unwrap_or(u64::MAX - 1)
            .clamp(1, u64::MAX - 1)
    }

    /// Keeps the fence open until `deadline` (never earlier than it already
    /// is); a closed fence stays closed.
    pub fn extend_to(&self, deadline: Instant) {
        let to = self.offset(deadline);
        let _ = self
            .inner
            .until
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                (now != 0 && now != u64::MAX && to > now).then_some(to)
            });
    }

    /// Closes the fence for good: nothing is written after this.
    pub fn close(&self) {
        self.inner.until.store(0, Ordering::Release);
    }

    /// Whether writes are allowed at `now`.
    pub fn is_open_at(&self, now: Instant) -> bool {
        match self.inner.until.load(Ordering::Acquire) {
            u64::MAX => true,
            0 => false,
            until => self.offset(now) < until,
        }
    }

    /// `Ok` while writes are allowed now.
    pub fn check(&self) -> Result<(), FenceClosed> {
        if self.is_open_at(Instant::now()) {
            Ok(())
        } else {
            Err(FenceClosed)
        }
    }

    /// How long writes stay allowed from `now` (`None`: no deadline).
    pub fn remaining_at(&self, now: Instant) -> Option<Duration> {
        match self.inner.until.load(Ordering::Acquire) {
            u64::MAX => None,
            until => Some(Duration::from_nanos(until.saturating_sub(self.offset(now)))),
        }
    }
}

impl Default for WriteFence {
    fn default() -> Self {
        Self::open()
    }
}

impl fmt::Debug for WriteFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.remaining_at(Instant::now()) {
            None => f.write_str("WriteFence(open)"),
            Some(left) => write!(f, "WriteFence({left:?} left)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_fence_never_closes_by_time() {
        let fence = WriteFence::open();
        assert!(fence.is_open_at(Instant::now() + Duration::from_secs(1 << 30)));
        assert_eq!(fence.remaining_at(Instant::now()), None);
        fence.close();
        assert_eq!(fence.check(), Err(FenceClosed));
    }

    #[test]
    fn a_deadline_moves_forward_only_and_a_closed_fence_stays_closed() {
        let t0 = Instant::now();
        let fence = WriteFence::until(t0 + Duration::from_secs(4));
        let shared = fence.clone();
        assert!(fence.is_open_at(t0 + Duration::from_secs(3)));
        assert!(!fence.is_open_at(t0 + Duration::from_secs(4)));
        // A renewal that was sent earlier than the last one does not pull the
        // deadline back.
        shared.extend_to(t0 + Duration::from_secs(2));
        assert!(fence.is_open_at(t0 + Duration::from_secs(3)));
        shared.extend_to(t0 + Duration::from_secs(9));
        assert!(fence.is_open_at(t0 + Duration::from_secs(8)));
        assert!(!fence.is_open_at(t0 + Duration::from_secs(9)));
        assert_eq!(
            fence.remaining_at(t0 + Duration::from_secs(7)),
            Some(Duration::from_secs(2))
        );
        fence.close();
        assert!(!shared.is_open_at(t0));
        shared.extend_to(t0 + Duration::from_secs(20));
        assert!(!shared.is_open_at(t0), "a closed fence does not reopen");
        assert_eq!(shared.check(), Err(FenceClosed));
    }

    #[test]
    fn a_deadline_in_the_past_is_closed() {
        let fence = WriteFence::until(Instant::now());
        assert_eq!(fence.check(), Err(FenceClosed));
    }
}
