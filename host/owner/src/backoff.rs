//! Exponential backoff between restarts after retryable errors (TiCDC's values: 10 s
//! doubling to 10 min, 10 % jitter, give up after 30 min without progress).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use serde::{Deserialize, Serialize};

use crate::error::BackoffConfigError;

/// How a changefeed backs off after retryable errors, and when it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct BackoffConfig {
    /// Wait before the first restart of an error streak, in milliseconds (default 10000).
    pub initial_interval_ms: u64,
    /// Each wait is the previous one times this (default 2).
    pub multiplier: f64,
    /// The longest wait, before jitter, in milliseconds (default 600000).
    pub max_interval_ms: u64,
    /// Each wait is moved by a random amount of up to this fraction of it, either way
    /// (default 0.1).
    pub jitter: f64,
    /// Fail the changefeed when its checkpoint has not moved for this long since the
    /// first error of a streak, in milliseconds (default 1800000).
    pub fail_after_ms: u64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial_interval_ms: 10_000,
            multiplier: 2.0,
            max_interval_ms: 600_000,
            jitter: 0.1,
            fail_after_ms: 1_800_000,
        }
    }
}

impl BackoffConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), BackoffConfigError> {
        let err = |field, problem: String| Err(BackoffConfigError { field, problem });
        if self.initial_interval_ms == 0 {
            return err("initial-interval-ms", "is 0; it must be positive".into());
        }
        if self.max_interval_ms < self.initial_interval_ms {
            return err(
                "max-interval-ms",
                format!(
                    "is {}, below initial-interval-ms ({}); it must be at least that",
                    self.max_interval_ms, self.initial_interval_ms
                ),
            );
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return err(
                "multiplier",
                format!("is {}; it must be at least 1", self.multiplier),
            );
        }
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            return err(
                "jitter",
                format!("is {}; it must be at least 0 and below 1", self.jitter),
            );
        }
        if self.fail_after_ms == 0 {
            return err("fail-after-ms", "is 0; it must be positive".into());
        }
        Ok(())
    }
}

/// Where jitter comes from: uniform samples in `[0, 1)`. Injected so tests can pin it.
pub trait JitterSource {
    /// The next sample, in `[0, 1)`.
    fn next_unit(&mut self) -> f64;
}

impl<J: JitterSource + ?Sized> JitterSource for &mut J {
    fn next_unit(&mut self) -> f64 {
        (**self).next_unit()
    }
}

impl<J: JitterSource + ?Sized> JitterSource for Box<J> {
    fn next_unit(&mut self) -> f64 {
        (**self).next_unit()
    }
}

/// A small deterministic generator (SplitMix64): the same seed gives the same jitter.
#[derive(Debug, Clone)]
pub struct SeededJitter {
    state: u64,
}

impl SeededJitter {
    /// A generator whose samples follow from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Seeded from the process's hash randomness, so owners of different
    /// processes do not restart in lockstep.
    pub fn from_random_seed() -> Self {
        Self::new(RandomState::new().build_hasher().finish())
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl JitterSource for SeededJitter {
    fn next_unit(&mut self) -> f64 {
        // The top 53 bits as a fraction: exactly representable, uniform in [0, 1).
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The wait sequence of one error streak: `initial`, `initial * multiplier`, ... up
/// to `max`, each moved by up to `jitter` either way.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    interval_ms: u64,
    attempts: u32,
}

impl Backoff {
    /// A backoff at its first step.
    pub fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            interval_ms: config.initial_interval_ms,
            attempts: 0,
        }
    }

    /// Starts the sequence over (the checkpoint moved, or an operator intervened).
    pub fn reset(&mut self) {
        self.interval_ms = self.config.initial_interval_ms;
        self.attempts = 0;
    }

    /// How many waits were handed out since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The interval the next wait is drawn around, before jitter.
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// The next wait in milliseconds; the interval then grows.
    pub fn next_delay(&mut self, jitter: &mut impl JitterSource) -> u64 {
        let base = self.interval_ms;
        let unit = jitter.next_unit().clamp(0.0, 1.0);
        let factor = 1.0 + self.config.jitter * (2.0 * unit - 1.0);
        let delay = ((base as f64) * factor).round() as u64;
        let grown = (base as f64 * self.config.multiplier) as u64;
        self.interval_ms = grown.clamp(base, self.config.max_interval_ms.max(base));
        self.attempts = self.attempts.saturating_add(1);
        delay.max(1)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Always the same sample: 0 is the shortest wait, 0.5 the interval itself.
    #[derive(Debug)]
    pub(crate) struct FixedJitter(pub f64);

    impl JitterSource for FixedJitter {
        fn next_unit(&mut self) -> f64 {
            self.0
        }
    }

    #[test]
    fn defaults_are_ticdcs() {
        let c = BackoffConfig::default();
        assert_eq!(c.initial_interval_ms, 10_000);
        assert_eq!(c.multiplier, 2.0);
        assert_eq!(c.max_interval_ms, 600_000);
        assert_eq!(c.jitter, 0.1);
        assert_eq!(c.fail_after_ms, 1_800_000);
        c.validate().unwrap();
    }

    #[test]
    fn config_reads_kebab_case_and_fills_defaults() {
        let c: BackoffConfig =
            serde_json::from_str(r#"{"initial-interval-ms": 500, "fail-after-ms": 60000}"#)
                .unwrap();
        assert_eq!(c.initial_interval_ms, 500);
        assert_eq!(c.fail_after_ms, 60_000);
        assert_eq!(c.max_interval_ms, 600_000);
        assert!(serde_json::from_str::<BackoffConfig>(r#"{"initial-ms": 1}"#).is_err());
    }

    #[test]
    fn config_validation_names_the_field() {
        let bad = |c: BackoffConfig| c.validate().unwrap_err().to_string();
        let d = BackoffConfig::default();
        assert_eq!(
            bad(BackoffConfig { jitter: 1.0, ..d }),
            "backoff option jitter is 1; it must be at least 0 and below 1"
        );
        assert_eq!(
            bad(BackoffConfig {
                max_interval_ms: 5_000,
                ..d
            }),
            "backoff option max-interval-ms is 5000, below initial-interval-ms (10000); it must \
             be at least that"
        );
        assert!(
            bad(BackoffConfig {
                multiplier: 0.5,
                ..d
            })
            .starts_with("backoff option multiplier")
        );
        assert!(
            bad(BackoffConfig {
                initial_interval_ms: 0,
                ..d
            })
            .contains("initial-interval-ms is 0")
        );
        assert!(
            bad(BackoffConfig {
                fail_after_ms: 0,
                ..d
            })
            .contains("fail-after-ms is 0")
        );
    }

    #[test]
    fn without_jitter_doubles_from_10s_to_a_10min_cap() {
        let mut b = Backoff::new(BackoffConfig::default());
        let mut mid = FixedJitter(0.5);
        let delays: Vec<u64> = (0..9).map(|_| b.next_delay(&mut mid) / 1000).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 600, 600, 600]);
        assert_eq!(b.attempts(), 9);
        b.reset();
        assert_eq!(b.next_delay(&mut mid), 10_000);
    }

    #[test]
    fn jitter_bounds_are_plus_minus_ten_percent() {
        let mut low = Backoff::new(BackoffConfig::default());
        let mut high = low.clone();
        assert_eq!(low.next_delay(&mut FixedJitter(0.0)), 9_000);
        assert_eq!(high.next_delay(&mut FixedJitter(0.999_999_999)), 11_000);
        // The jitter does not compound: the interval still doubles exactly.
        assert_eq!(low.interval_ms(), 20_000);
        assert_eq!(high.interval_ms(), 20_000);
    }

    #[test]
    fn seeded_jitter_is_reproducible_and_uniform_enough() {
        let mut a = SeededJitter::new(42);
        let mut b = SeededJitter::new(42);
        let xs: Vec<f64> = (0..1000).map(|_| a.next_unit()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.next_unit()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let below_half = xs.iter().filter(|x| **x < 0.5).count();
        assert!((400..600).contains(&below_half), "{below_half}");
        assert_ne!(SeededJitter::new(43).next_unit(), xs[0]);
    }
}
